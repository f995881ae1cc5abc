"""Probe 3: what a kernel of one wave costs when its CTAs have few K/V blocks each, and
cuBLAS' unaligned products against the sequence length.

Reference shapes only (none is a validation case):

* one wave: SDPA flash and cuDNN on 1 × H × N with H · N / 128 = 112 query blocks of 128 rows
  (under the 132 SMs, over FlashAttention-2's split threshold of 211 blocks of 64), N from 256
  to 8192, d = 64 and 128, causal and not: time = fixed + blocks × per block, the fixed part
  of a one-wave kernel read off the intercept;
* unaligned products: Q·Kᵀ (fp16, S written) and P·V at N = 193, 385, 769, 1537 (odd, as
  eager attention's unpadded lengths are) against N = 1025, d = 64 and 80, 2^29 bytes of S.

Each step: CUDA-event time (calibrate's timer: queued behind a sleeping kernel) and each
kernel's CUPTI duration (PyTorch's profiler). Run on the GPU machine:
``python validation/probes/h200_probe3_one_wave.py OUT_DIR``; writes ``probe.json``.
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


BACKENDS = {"sdpa-flash": SDPBackend.FLASH_ATTENTION, "sdpa-cudnn": SDPBackend.CUDNN_ATTENTION}
g = torch.Generator(device="cuda").manual_seed(3)
for d in (64, 128):
    for n in (256, 512, 1024, 2048, 4096, 8192):
        h = 112 * 128 // n
        qkv = [torch.randn(1, h, n, d, device="cuda", dtype=torch.float16, generator=g) for _ in range(3)]
        for impl, backend in BACKENDS.items():
            for causal in (False, True):

                def fn(qkv=qkv, backend=backend, causal=causal):
                    with sdpa_kernel([backend]):
                        return torch.nn.functional.scaled_dot_product_attention(*qkv, is_causal=causal)

                try:
                    record("one_wave", impl=impl, shape=[1, h, n, d, causal], **timed(fn))
                except Exception as exc:  # recorded; the others go on
                    record("one_wave", impl=impl, shape=[1, h, n, d, causal], error=str(exc)[:200])
        del qkv
        torch.cuda.empty_cache()

S_BYTES = 2**29


def products(d: int, n: int) -> None:
    bh = max(1, S_BYTES // (2 * n * n))
    q = torch.randn(bh, n, d, device="cuda", dtype=torch.float16, generator=g)
    k = torch.randn(bh, n, d, device="cuda", dtype=torch.float16, generator=g)
    s = torch.empty(bh, n, n, device="cuda", dtype=torch.float16)
    o = torch.empty(bh, n, d, device="cuda", dtype=torch.float16)
    moved = 2 * (2 * bh * n * d + bh * n * n)
    r = timed(lambda: torch.matmul(q, k.transpose(-1, -2), out=s), reps=20)
    record("qk_unaligned", d=d, n=n, bh=bh, bytes=moved, rate=moved / r["time_s"], **r)
    r = timed(lambda: torch.matmul(s, k, out=o), reps=20)
    record("pv_unaligned", d=d, n=n, bh=bh, bytes=moved, rate=moved / r["time_s"], **r)


for d in (64, 80):
    for n in (193, 385, 769, 1025, 1537):
        products(d, n)
        torch.cuda.empty_cache()
results["finished"] = time.time()
save()
