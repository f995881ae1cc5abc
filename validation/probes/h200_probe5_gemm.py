"""Probe 5, part 2: cuBLAS's batched products as eager attention launches them, by sequence
length, and cuDNN's decoding kernels at reference shapes.

* P·V-shaped (``[b, N, N] @ [b, N, d]``: reads an N x N operand) and Q·Kᵀ-shaped
  (``[b, N, d] @ [b, d, N]``: writes one) products at N from 128 to 8192, d = 64 and 128, fp16,
  with the N x N tensor 256 MiB (b = 256 MiB / 2N²): calibrate measures them at N = 2048 only,
  and P·V at N ≤ 1024 (a short reduction) runs ~10 % below that in the records;
* the same at 24 MiB (held in L2, as a small eager step's P is after its softmax);
* cuDNN (SDPA) decoding, one query row, at reference shapes (batch x heads x kv heads x N_kv
  x d, bf16; none a validation case): each kernel's CUPTI duration and name, to read whether
  it splits the keys and how many CTAs it launches.

Run on the GPU machine: ``python validation/probes/h200_probe5_gemm.py OUT_DIR``; writes ``gemm.json``.
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
results: dict = {"started": time.time(), "device": torch.cuda.get_device_name(), "torch": torch.__version__, "runs": []}


def save() -> None:
    with open(os.path.join(OUT, "gemm.json"), "w") as f:
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


def timed(fn) -> dict:
    rounds = [sorted(TIMER(fn, 20, 3)) for _ in range(3)]
    best = min(rounds, key=lambda t: t[10])
    return {"time_s": best[10], "round_times_s": [t[10] for t in rounds], "kernels": kernels(fn)}


def record(kind: str, **kw) -> None:
    results["runs"].append({"kind": kind, **kw})
    ks = [(k["name"][:40], round(k["time_s"] * 1e6, 2)) for k in kw.get("kernels", [])]
    print(kind, {k: v for k, v in kw.items() if k != "kernels"}, ks, flush=True)
    save()


g = torch.Generator(device="cuda").manual_seed(6)
for size_mib in (256, 24):
    for d in (64, 128):
        for n in (128, 256, 384, 512, 768, 1024, 1536, 2048, 4096, 8192):
            b = size_mib * (1 << 20) // (2 * n * n)
            if b < 1:
                continue
            p = torch.randn(b, n, n, device="cuda", dtype=torch.float16, generator=g)
            v = torch.randn(b, n, d, device="cuda", dtype=torch.float16, generator=g)
            kt = torch.randn(b, d, n, device="cuda", dtype=torch.float16, generator=g)
            try:
                record("pv", size_mib=size_mib, b=b, n=n, d=d, **timed(lambda p=p, v=v: torch.matmul(p, v)))
                record("qk", size_mib=size_mib, b=b, n=n, d=d, **timed(lambda v=v, kt=kt: torch.matmul(v, kt)))
            except Exception as exc:  # recorded; the others go on
                record("error", size_mib=size_mib, b=b, n=n, d=d, error=str(exc)[:200])
            torch.cuda.empty_cache()

for b, h, hkv, nkv, d in (
    (1, 32, 8, 16384, 128),
    (4, 32, 8, 16384, 128),
    (32, 32, 8, 2048, 128),
    (1, 16, 8, 16384, 256),
    (4, 16, 8, 16384, 256),
    (4, 8, 4, 2048, 256),
    (32, 8, 4, 2048, 256),
    (2, 8, 2, 65536, 256),
):
    q = torch.randn(b, h, 1, d, device="cuda", dtype=torch.bfloat16, generator=g)
    k = torch.randn(b, hkv, nkv, d, device="cuda", dtype=torch.bfloat16, generator=g)
    vv = torch.randn(b, hkv, nkv, d, device="cuda", dtype=torch.bfloat16, generator=g)

    def fn(q=q, k=k, vv=vv):
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            return torch.nn.functional.scaled_dot_product_attention(q, k, vv, enable_gqa=True)

    try:
        record("cudnn_decode", shape=[b, h, hkv, nkv, d], **timed(fn))
    except Exception as exc:  # recorded; the others go on
        record("cudnn_decode", shape=[b, h, hkv, nkv, d], error=str(exc)[:200])
results["finished"] = time.time()
save()
