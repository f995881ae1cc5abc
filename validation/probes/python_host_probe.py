"""Where a traced function's host time goes, on the lent H200's host (issue #30: call time).

Timed as a user times them, the decode layers of the trace sets cost the host two to three times
the sum of their ATen ops' host figures (validation/NOTES.md): Python runs between the ops (module
calls, slicing, attribute lookups) that the trace does not see, since it records ATen ops. This
probe counts, for a few trace cases, what the Python code calls at each level, and times the host:

* ``functions``: each case's host time a call (calls queued behind a sleeping kernel, so the GPU
  never holds the host back), and the number of module calls (a global forward pre-hook),
  Python-level torch calls (a ``TorchFunctionMode``: functions, tensor methods, ``__getitem__``)
  and ATen ops (a ``TorchDispatchMode``) one call makes; the same counted on the CPU by
  ``memmodel trace`` can then price the host;
* ``calls``: the host seconds of single Python-level calls that launch nothing (a module call of
  ``nn.Identity``, a slice, ``view``, ``transpose``, ``tensor.shape``) and of two that launch one
  small kernel (``x + y``, ``F.linear`` of one row), each in a loop of 200.

    python validation/probes/python_host_probe.py OUT.jsonl [CASES_FILE]

Run from the repository root (memmodel importable); the cases are ``memmodel validate --cases``
lines of ``trace`` cases (default: the decode and prefill layers and blocks of the trace sets).
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

CASES = (
    "trace examples/layers/llama_decoder.py:llama3_8b --dtype bf16 --shape hidden_states=1,1,4096 "
    "--shape k_cache=1,8,32768,128 --shape v_cache=1,8,32768,128",
    "trace examples/layers/llama_decoder.py:qwen2_5_7b --dtype bf16 --shape hidden_states=1,1,3584 "
    "--shape k_cache=1,4,32768,128 --shape v_cache=1,4,32768,128",
    "trace examples/layers/llama_decoder.py:llama3_8b --dtype bf16 --shape hidden_states=1,2048,4096",
    "trace examples/attention/gpt2_block.py:attention --dtype bf16 --shape x=8,1024,768 "
    "--shape c_attn_weight=768,2304 --shape c_attn_bias=2304 --shape c_proj_weight=768,768 "
    "--shape c_proj_bias=768 --shape bias=1,1,1024,1024:bool",
    "trace examples/attention/vit_attention.py:attention --dtype bf16 --shape x=32,197,768 "
    "--shape qkv_weight=2304,768 --shape qkv_bias=2304 --shape proj_weight=768,768 --shape proj_bias=768",
    "trace examples/attention/mqa_einsum.py:attention --dtype bf16 --shape q=16,71,1,64 --shape k=16,2048,64 "
    "--shape v=16,2048,64",
    "trace examples/attention/gpt2_block.py:attention --dtype bf16 --backward --shape x=8,256,768 "
    "--shape c_attn_weight=768,2304 --shape c_attn_bias=2304 --shape c_proj_weight=768,768 "
    "--shape c_proj_bias=768 --shape bias=1,1,256,256:bool",
)


class Functions(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0
        self.names: dict[str, int] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.count += 1
        name = getattr(func, "__name__", str(func))
        self.names[name] = self.names.get(name, 0) + 1
        return func(*args, **(kwargs or {}))


class Aten(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


def host_per_call(fn, calls: int = 10, runs: int = 5) -> float:
    """Host microseconds a call, the GPU held behind a sleeping kernel (the host never waits)."""
    fn()
    torch.cuda.synchronize()
    values = []
    for _ in range(runs):
        torch.cuda._sleep(100_000_000)  # about 50 ms
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        values.append((time.perf_counter() - t0) * 1e6 / calls)
        torch.cuda.synchronize()
    return statistics.median(values)


def functions(f, lines: list[str]) -> None:
    from memmodel.gpu.trace_run import TraceRun
    from memmodel.trace_cases import parse_trace_case

    for line in lines:
        case = parse_trace_case(line)
        run = TraceRun(case)
        run.run()
        torch.cuda.synchronize()
        host = host_per_call(run.run)
        modules = [0]

        def hook(module, args, modules=modules):
            modules[0] += 1

        handle = torch.nn.modules.module.register_module_forward_pre_hook(hook)
        try:
            with Functions() as fmode:
                run.run()
            modules_seen = modules[0]
            with Aten() as amode:
                run.run()
        finally:
            handle.remove()
        torch.cuda.synchronize()
        row = {
            "section": "functions",
            "case": line,
            "host_us": host,
            "module_calls": modules_seen,
            "torch_function_calls": fmode.count,
            "torch_functions": fmode.names,
            "aten_ops": amode.count,
        }
        f.write(json.dumps(row) + "\n")
        f.flush()
        print(line[:80], f"host {host:.1f} us", modules_seen, fmode.count, amode.count, flush=True)
        del run
        torch.cuda.empty_cache()


def calls(f) -> None:
    x = torch.randn(1, 1, 32, 128, device="cuda", dtype=torch.bfloat16)
    y = torch.randn_like(x)
    w = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    row = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16)
    identity = torch.nn.Identity()
    linear = torch.nn.Linear(4096, 4096, bias=False, device="cuda", dtype=torch.bfloat16)
    loops = {
        "module call (nn.Identity)": lambda: identity(x),
        "slice x[..., :64]": lambda: x[..., :64],
        "view": lambda: x.view(1, 1, 4096),
        "transpose": lambda: x.transpose(1, 2),
        "shape": lambda: x.shape,
        "add (one small kernel)": lambda: x + y,
        "F.linear of one row": lambda: F.linear(row, w),
        "nn.Linear of one row": lambda: linear(row),
    }
    for name, fn in loops.items():
        us = host_per_call(fn, calls=200)
        f.write(json.dumps({"section": "calls", "call": name, "host_us": us}) + "\n")
        f.flush()
        print(name, f"{us:.2f} us", flush=True)


def main(out: str, cases_file: str | None = None) -> None:
    lines = list(CASES)
    if cases_file:
        with open(cases_file) as fh:
            lines = [ln.split("#")[0].strip() for ln in fh if ln.split("#")[0].strip()]
    with open(out, "w") as f:
        env = {"section": "env", "torch": torch.__version__, "gpu": torch.cuda.get_device_name()}
        f.write(json.dumps(env) + "\n")
        for part in (lambda: calls(f), lambda: functions(f, lines)):
            try:
                part()
            except Exception as exc:  # keep what was measured
                f.write(json.dumps({"section": "error", "error": repr(exc)[:300]}) + "\n")
                print("error", repr(exc)[:300], flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
