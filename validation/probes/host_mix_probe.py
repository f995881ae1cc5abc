"""The host's time for ATen ops issued in turn against each op repeated on its own (issue #30).

memmodel's host figures (``host.op``, ``host.view``, ``host.gemm``) are read off one op called over
and over in a loop; a layer calls dozens of different ops once each. Traced and measured on the H200,
decode layers cost the host about twice the sum of their ops' figures. This probe asks whether a
sequence of different ops costs the host more per op than the same ops each repeated on its own
(the CPU's caches and branch predictors hold one op's path in a tight loop, not forty), and whether
calling them from an ``nn.Module`` tree adds to it:

* ``alone``: each op's host seconds a call, 50 calls in a loop;
* ``cycle``: one pass over all the ops in turn, 20 passes, host seconds an op;
* ``modules``: the same pass with each op inside its own ``nn.Module`` called by a parent module.

Every loop runs behind a sleeping kernel, so the GPU never holds the host back; each figure is the
median of 7 runs, interleaved (alone, cycle, modules, alone, ...) so that a drift of the host's speed
shows in all three alike.

    python validation/probes/host_mix_probe.py OUT.jsonl
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

BF16 = torch.bfloat16


def ops() -> dict[str, object]:
    x = torch.randn(1, 1, 4096, device="cuda", dtype=BF16)
    y = torch.randn_like(x)
    h = torch.randn(1, 32, 1, 128, device="cuda", dtype=BF16)
    cos = torch.randn(1, 1, 1, 128, device="cuda", dtype=BF16)
    w = torch.randn(1024, 4096, device="cuda", dtype=BF16)
    x32 = x.float()
    return {
        "view": lambda: x.view(1, 1, 32, 128),
        "transpose": lambda: h.transpose(1, 2),
        "slice": lambda: h[..., :64],
        "add": lambda: x + y,
        "mul by a number": lambda: x * 0.5,
        "mul broadcast": lambda: h * cos,
        "neg": lambda: -h,
        "cat": lambda: torch.cat((h, h), dim=-1),
        "silu": lambda: F.silu(x),
        "cast to fp32": lambda: x.float(),
        "cast to bf16": lambda: x32.to(BF16),
        "pow": lambda: x32.pow(2),
        "mean": lambda: x32.mean(-1, keepdim=True),
        "rsqrt": lambda: torch.rsqrt(x32),
        "linear": lambda: F.linear(x, w),
    }


class Op(torch.nn.Module):
    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn

    def forward(self):
        return self.fn()


class Parent(torch.nn.Module):
    def __init__(self, fns) -> None:
        super().__init__()
        self.ops = torch.nn.ModuleList([Op(fn) for fn in fns])

    def forward(self):
        for op in self.ops:
            op()


def host_per_call(fn, calls: int) -> float:
    torch.cuda._sleep(200_000_000)  # about 100 ms: the GPU never holds the host back
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    seconds = (time.perf_counter() - t0) / calls
    torch.cuda.synchronize()
    return seconds


def main(out: str) -> None:
    table = ops()
    fns = list(table.values())

    def cycle():
        for fn in fns:
            fn()

    parent = Parent(fns)
    for fn in (*fns, cycle, parent):
        fn()
    torch.cuda.synchronize()
    runs: dict[str, list[float]] = {"cycle": [], "modules": [], **{name: [] for name in table}}
    for _ in range(7):
        for name, fn in table.items():
            runs[name].append(host_per_call(fn, 50))
        runs["cycle"].append(host_per_call(cycle, 20) / len(fns))
        runs["modules"].append(host_per_call(parent, 20) / len(fns))
    with open(out, "w") as f:
        f.write(json.dumps({"section": "env", "torch": torch.__version__, "gpu": torch.cuda.get_device_name()}) + "\n")
        for name, values in runs.items():
            section = name if name in ("cycle", "modules") else "alone"
            row = {"section": section, "op": name, "host_s": statistics.median(values), "runs_s": values}
            f.write(json.dumps(row) + "\n")
        alone = statistics.fmean(statistics.median(runs[n]) for n in table)
        summary = {
            "section": "summary",
            "alone_mean_s": alone,
            "cycle_s": statistics.median(runs["cycle"]),
            "modules_s": statistics.median(runs["modules"]),
        }
        f.write(json.dumps(summary) + "\n")
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
