"""Probe 4: FlashAttention-2 (SDPA flash) forward grids a little past one CTA per SM, and head
dims the kernels are not built for.

Reference shapes only (none is a validation case):

* one wave of two CTAs per SM: 1 × H × N with H · N / 128 between 144 and 256 query blocks of
  128 rows (more CTAs than the 132 SMs, at most two per SM; over the split threshold), N = 1024
  and 2048, d = 64 and 128, causal and not: where the CTAs land decides how long the busiest SM
  works (breadth first, probe 2);
* uneven head dims: 4 × 8 × 2048, non-causal, at d = 40, 48 (run by the d = 64 kernel), 80
  (d = 96), 112 (d = 128) beside 64, 96 and 128: the kernels mask the padded columns.

Each step: CUDA-event time (calibrate's timer) and each kernel's CUPTI duration. Run on the GPU
machine: ``python validation/probes/h200_probe4_two_ctas.py OUT_DIR``; writes ``probe.json``.
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from memmodel.gpu.measure import cuda_timer
from memmodel.gpu.run import kernel_events, median_kernels

TIMER = cuda_timer(torch)
OUT = sys.argv[1] if len(sys.argv) > 1 else "."
os.makedirs(OUT, exist_ok=True)
results: dict = {"started": time.time(), "device": torch.cuda.get_device_name(), "runs": []}


def save() -> None:
    with open(os.path.join(OUT, "probe.json"), "w") as f:
        json.dump(results, f, indent=1)


def kernels(fn, sessions: int = 5) -> list:
    from torch.profiler import ProfilerActivity, profile

    runs = []
    for _ in range(sessions):
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        runs.append(kernel_events(prof, "CUDA"))
    return median_kernels(runs)


def timed(fn, reps: int = 50, warmup: int = 5) -> dict:
    times = sorted(TIMER(fn, reps, warmup))
    return {"time_s": times[len(times) // 2], "min_s": times[0], "max_s": times[-1], "kernels": kernels(fn)}


def record(kind: str, **kw) -> None:
    results["runs"].append({"kind": kind, **kw})
    ks = [(k["name"][:30], round(k["time_s"] * 1e6, 2)) for k in kw.get("kernels", [])]
    print(kind, {k: v for k, v in kw.items() if k != "kernels"}, ks, flush=True)
    save()


g = torch.Generator(device="cuda").manual_seed(4)


def run(kind: str, b: int, h: int, n: int, d: int, causal: bool) -> None:
    qkv = [torch.randn(b, h, n, d, device="cuda", dtype=torch.float16, generator=g) for _ in range(3)]

    def fn():
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            return torch.nn.functional.scaled_dot_product_attention(*qkv, is_causal=causal)

    try:
        record(kind, impl="sdpa-flash", shape=[b, h, n, d, causal], **timed(fn))
    except Exception as exc:  # recorded; the others go on
        record(kind, impl="sdpa-flash", shape=[b, h, n, d, causal], error=str(exc)[:200])


for d in (64, 128):
    for n in (1024, 2048):
        for blocks in (144, 168, 192, 224, 256):
            h = blocks * 128 // n
            if h * n // 128 != blocks:
                continue
            for causal in (True, False):
                run("two_per_sm", 1, h, n, d, causal)
                torch.cuda.empty_cache()
for d in (40, 48, 64, 80, 96, 112, 128):
    run("head_dim", 4, 8, 2048, d, False)
    torch.cuda.empty_cache()
results["finished"] = time.time()
save()
