"""Probe 2, part three: the ring's per-GPU step kernel measured alone on one GPU.

The GPU pair's ring cases with few heads at 16k tokens (validation/h200x2/final/h200x2-cp.json.gz)
run, on each GPU and each of the two steps, a FlashAttention-2 forward of 8192 queries over
8192 keys, d = 128, bf16. Timed here alone (CUDA events, median of 50 after warm-up), for 2 and
8 heads, to tell the kernel's own time from what running beside the other GPU's step and NCCL
adds. Run on the GPU machine: ``python validation/probes/h200_probe2_ring_step.py OUT_DIR``.
"""

from __future__ import annotations

import json
import os
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from memmodel.gpu.measure import cuda_timer

OUT = sys.argv[1] if len(sys.argv) > 1 else "."
timer = cuda_timer(torch)
g = torch.Generator(device="cuda").manual_seed(0)
runs = []
for heads in (2, 8):
    q, k, v = (torch.randn(1, heads, 8192, 128, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))

    def fn(q=q, k=k, v=v):
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v)

    times = sorted(timer(fn, 50, 5))
    runs.append({"impl": "sdpa-flash", "batch": 1, "heads": heads, "n": 8192, "d": 128, "dtype": "bf16",
                 "time_s": times[len(times) // 2], "min_s": times[0], "max_s": times[-1]})  # fmt: skip
    print(runs[-1], flush=True)
with open(os.path.join(OUT, "ring_step.json"), "w") as f:
    json.dump({"device": torch.cuda.get_device_name(), "runs": runs}, f, indent=1)
