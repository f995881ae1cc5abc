"""cuBLAS's batched attention-shaped products by sequence length (issue 30): which kernel runs and
how long it takes (CUPTI), aligned and not, at the short lengths vision and text encoders use (77,
197, 577 tokens) and about the calibration's unaligned length (1025).

    python validation/probes/unaligned_gemm_probe.py OUT.jsonl

One line per product: ``kind`` (``qk``: Q·Kᵀ, ``pv``: P·V), ``n``, ``d``, ``batch_heads``, ``dtype``, the
kernels the profiler saw in one call (name, CUPTI microseconds) and ``us``: their mean duration over
20 calls inside the profiler (the per-kernel durations a trace record's diagnostic compares with).
A probe of the library's kernels, not of attention: nothing in a validation set runs these alone.
"""

from __future__ import annotations

import json
import sys

import torch
from probe_timing import run_sections
from torch.profiler import ProfilerActivity, profile

LENGTHS = (64, 77, 128, 129, 197, 256, 257, 577, 1024, 1025)
HEAD_DIMS = (64, 128)
BATCH_HEADS = (192, 511)
CALLS = 20


def cupti(fn) -> list[dict]:
    """The kernels of ``CALLS`` calls of ``fn`` (after a warm-up), each with its mean CUPTI time."""
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(CALLS):
            fn()
        torch.cuda.synchronize()
    return [
        {"name": e.key[:160], "us": e.device_time_total / max(e.count, 1), "count": e.count}
        for e in prof.key_averages()
        if e.device_time_total > 0
    ]


def products(f) -> None:
    for dtype in ("bf16", "fp16"):
        dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
        for bh in BATCH_HEADS:
            for d in HEAD_DIMS:
                for n in LENGTHS:
                    q = torch.randn(bh, n, d, device="cuda", dtype=dt)
                    k = torch.randn(bh, n, d, device="cuda", dtype=dt)
                    p = torch.randn(bh, n, n, device="cuda", dtype=dt)
                    for kind, fn in (
                        ("qk", lambda q=q, k=k: torch.matmul(q, k.transpose(-1, -2))),
                        ("pv", lambda p=p, k=k: torch.matmul(p, k)),
                    ):
                        kernels = cupti(fn)
                        line = {"section": "gemm", "kind": kind, "n": n, "d": d, "batch_heads": bh, "dtype": dtype}
                        line |= {"kernels": kernels, "us": sum(x["us"] for x in kernels)}
                        f.write(json.dumps(line) + "\n")
                    del q, k, p
                f.flush()


if __name__ == "__main__":
    run_sections(sys.argv[1], [products])
