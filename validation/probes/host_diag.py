"""Why validate's SDPA calls cost the host twice what the host probe measured (issue #30): the same
calls timed bare (a lambda, as the probe times them), through validate's CaseRun (its backend held
once), with and without a rich progress bar drawing, and autograd chains timed by their queued pace.

    python validation/probes/host_diag.py OUT.jsonl
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from memmodel.cases import parse_case  # noqa: E402
from memmodel.gpu import run as R  # noqa: E402
from memmodel.gpu.calibrate_host import call_seconds as call  # noqa: E402

CASES = (
    "impl=sdpa-cudnn,batch=4,heads=12,n=197,d=64,dtype=bf16",
    "impl=sdpa-flash,batch=32,heads=12,n=128,d=64,dtype=bf16",
    "impl=sdpa-flash,batch=1,heads=16,n=512,d=64,dtype=fp16,causal=1",
    "impl=sdpa-cudnn,batch=1,heads=32,kv_heads=8,n=1,n_kv=4096,d=128,dtype=bf16",
)


def queued(fn, calls=200):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    a.record()
    for _ in range(calls):
        fn()
    b.record()
    host = (time.perf_counter() - t0) / calls
    b.synchronize()
    return a.elapsed_time(b) * 1e-3 / calls, host


def row(fh, **kw):
    fh.write(json.dumps(kw) + "\n")
    fh.flush()
    print(json.dumps(kw), flush=True)


def measure(fh, label, fn):
    q, h = queued(fn)
    row(fh, section="sdpa", how=label, queued_s=q, host_loop_s=h, call_s=call(fn))


def main(out):
    from torch.nn.attention import sdpa_kernel

    with open(out, "w") as fh:
        for spec in CASES:
            case = parse_case(spec)
            run = R.CaseRun(case)
            q, k, v = run.q, run.k, run.v
            kw = {"is_causal": case.causal, "enable_gqa": case.kv_heads_ != case.heads}
            bare = lambda q=q, k=k, v=v, kw=kw: F.scaled_dot_product_attention(q, k, v, **kw)  # noqa: E731
            measure(fh, f"{case.id} bare auto", bare)
            with sdpa_kernel([R.sdpa_backend(case)]):
                measure(fh, f"{case.id} bare backend held", bare)
            with R.held_backend(case):
                measure(fh, f"{case.id} CaseRun held", run.run)
            measure(fh, f"{case.id} CaseRun per call", run.run)
            from rich.progress import Progress

            with Progress() as bar:
                bar.add_task("x", total=1)
                with R.held_backend(case):
                    measure(fh, f"{case.id} CaseRun held, progress bar", run.run)
            del run
        # elementwise kernels off ATen's vectorised path: copies of permuted or transposed tensors
        # (the heads split or merged), a product with a 0-dim tensor, a broadcast operand
        for label, shape, make in (
            ("permute_copy", (8, 1024, 12, 64), lambda x: x.permute(0, 2, 1, 3).contiguous()),
            ("permute_copy", (32, 1024, 16, 128), lambda x: x.permute(0, 2, 1, 3).contiguous()),
            ("permute_copy", (32, 197, 12, 64), lambda x: x.permute(0, 2, 1, 3).contiguous()),
            ("transpose_copy", (8, 12, 1024, 64), lambda x: x.transpose(-1, -2).contiguous()),
            ("transpose_copy", (32, 16, 1024, 128), lambda x: x.transpose(-1, -2).contiguous()),
            ("contiguous_copy", (32, 16, 1024, 128), lambda x: x.clone()),
            ("div_0dim", (8, 12, 1024, 1024), lambda x: x / torch.full([], 8.0, dtype=x.dtype, device=x.device)),
            ("mul_scalar", (8, 12, 1024, 1024), lambda x: x * 0.125),
            ("add_broadcast_row", (4096, 4096), lambda x: x * x[:, :1]),
        ):
            x = torch.randn(*shape, device="cuda", dtype=torch.bfloat16)
            fn = lambda x=x, make=make: make(x)  # noqa: E731
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
            torch.cuda._sleep(int(4e7))
            events = [torch.cuda.Event(enable_timing=True) for _ in range(21)]
            events[0].record()
            for i in range(20):
                fn()
                events[i + 1].record()
            torch.cuda.synchronize()
            t = statistics.median(events[i].elapsed_time(events[i + 1]) * 1e-3 for i in range(20))
            moved = 2 * x.numel() * x.element_size()
            row(fh, section="kernel", op=label, shape=list(shape), time_s=t, bytes=moved, bytes_per_s=moved / t)
        # autograd: chains of n muls and of n views, backward by queued pace
        for kind in ("mul", "view", "matmul"):
            for n in (1, 4, 16):
                x = torch.randn(1, 8, 128, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                w = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)

                def chain(x=x, n=n, kind=kind, w=w):
                    y = x
                    for i in range(n):
                        if kind == "mul":
                            y = y * 1.01
                        elif kind == "view":
                            y = y.transpose(1, 2) if i % 2 == 0 else y.transpose(1, 2)
                        else:
                            y = y @ w
                    return (y * 1.0) if kind == "view" else y

                g = torch.ones_like(chain())
                fwd_q, fwd_h = queued(lambda chain=chain: chain(), calls=100)
                step_q, step_h = queued(lambda chain=chain, x=x, g=g: torch.autograd.grad(chain(), (x,), g), calls=100)
                row(
                    fh,
                    section="autograd",
                    kind=kind,
                    n=n,
                    forward_queued_s=fwd_q,
                    forward_host_s=fwd_h,
                    step_queued_s=step_q,
                    step_host_s=step_h,
                    step_call_s=call(lambda chain=chain, x=x, g=g: torch.autograd.grad(chain(), (x,), g)),
                )


if __name__ == "__main__":
    main(sys.argv[1])
