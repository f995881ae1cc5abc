"""Probe 2, part two: do long attention kernels run at a lower clock than short ones?

One head of 131072 tokens, d = 128, fp16 (about 15 ms a call), with cuDNN and FlashAttention-2,
40 calls back to back, each call's CUDA-event time kept, while nvidia-smi samples the SM clock,
power and throttle reasons every 20 ms (``sustained-smi.csv``); then the same kernels on
16384 keys (about 0.2 ms a call) for comparison. Reference shapes, not validation cases.

Run on the GPU machine: ``python validation/probes/h200_probe2_sustained.py OUT_DIR``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

OUT = sys.argv[1] if len(sys.argv) > 1 else "."
os.makedirs(OUT, exist_ok=True)
fields = "timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active"
smi = subprocess.Popen(
    ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits", "-lms", "20"],
    stdout=open(os.path.join(OUT, "sustained-smi.csv"), "w"),
    stderr=subprocess.DEVNULL,
)
F = torch.nn.functional.scaled_dot_product_attention
g = torch.Generator(device="cuda").manual_seed(0)
runs = []
try:
    for n_q, n_kv in ((131072, 131072), (16896, 16384)):
        q = torch.randn(1, 1, n_q, 128, device="cuda", dtype=torch.float16, generator=g)
        k, v = (torch.randn(1, 1, n_kv, 128, device="cuda", dtype=torch.float16, generator=g) for _ in range(2))
        for name, backend in (("sdpa-cudnn", SDPBackend.CUDNN_ATTENTION), ("sdpa-flash", SDPBackend.FLASH_ATTENTION)):

            def fn(q=q, k=k, v=v, backend=backend):
                with sdpa_kernel([backend]):
                    return F(q, k, v)

            for _ in range(3):
                fn()
            torch.cuda.synchronize()
            time.sleep(0.5)
            reps = 40 if n_q > 100000 else 400
            ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
            t0 = time.time()
            for a, b in ev:
                a.record()
                fn()
                b.record()
            torch.cuda.synchronize()
            runs.append(
                {
                    "impl": name,
                    "n": n_q,
                    "n_kv": n_kv,
                    "flop": 4 * n_q * n_kv * 128,
                    "times_s": [a.elapsed_time(b) * 1e-3 for a, b in ev],
                    "wall": [t0, time.time()],
                }
            )
            print(name, n_q, n_kv, [round(x * 1e3, 3) for x in runs[-1]["times_s"][:: max(1, reps // 10)]], flush=True)
            time.sleep(1.0)
        del q, k, v
        torch.cuda.empty_cache()
finally:
    with open(os.path.join(OUT, "sustained.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "runs": runs}, f, indent=1)
    smi.terminate()
