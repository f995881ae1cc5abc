"""cuDNN's SDPA backward at MLA's head dims, by how long it runs (issue #29's MLA backward).

On the H200 the blind MLA set's non-causal cuDNN backward of 4 × 128 heads × 2048 tokens (d_qk 192,
d_v 128, 11 ms) came out about a third slower than memmodel counts, where its causal ones and its
forward are right. The model slows a forward kernel once the power limit lowers the clocks, not a
backward one. This probe times the same backward at 1 to 8 requests (3 to 22 ms a call), cool (after
a second idle) and hot (after a run of calls), with the SM clock nvidia-smi reports beside it, to
tell a clock effect (its time a FLOP grows with how long it has run) from a shape effect.

    python validation/probes/cudnn_bwd_clock_probe.py OUT.jsonl

One JSON line a shape: the backward's time (CUDA events around ``torch.autograd.grad``, the forward
outside), cool (the first call after a second idle) and hot (the median of the last 5 of 20 calls),
and the kernels' CUPTI times of one call.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F
from probe_timing import kernel_names
from torch.nn.attention import SDPBackend, sdpa_kernel

SHAPES = (  # batch, heads, tokens, d_qk, d_v, causal
    (1, 128, 2048, 192, 128, False),
    (2, 128, 2048, 192, 128, False),
    (4, 128, 2048, 192, 128, False),
    (8, 128, 2048, 192, 128, False),
    (4, 128, 2048, 128, 128, False),
    (4, 128, 2048, 192, 128, True),
    (4, 32, 4096, 192, 128, False),
)


def events_s(fn) -> float:
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    fn()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) * 1e-3


def main(out: str) -> None:
    clocks = subprocess.Popen(
        ["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw", "--format=csv,noheader", "-lms", "20"],
        stdout=open(out + ".clocks.csv", "w"),
    )
    try:
        with open(out, "w") as f, sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            f.write(
                json.dumps({"section": "env", "torch": torch.__version__, "gpu": torch.cuda.get_device_name()}) + "\n"
            )
            for b, h, n, dqk, dv, causal in SHAPES:
                q = torch.randn(b, h, n, dqk, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                k = torch.randn(b, h, n, dqk, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                v = torch.randn(b, h, n, dv, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                do = torch.randn_like(o)

                def backward(o=o, do=do, q=q, k=k, v=v):
                    return torch.autograd.grad(o, (q, k, v), do, retain_graph=True)

                backward()
                torch.cuda.synchronize()
                time.sleep(1.0)
                t0 = time.time()
                cool = events_s(backward)
                runs = [events_s(backward) for _ in range(20)]
                row = {
                    "section": "backward",
                    "batch": b,
                    "heads": h,
                    "n": n,
                    "d_qk": dqk,
                    "d_v": dv,
                    "causal": causal,
                    "cool_s": cool,
                    "hot_s": statistics.median(runs[-5:]),
                    "runs_s": runs,
                    "wall_start": t0,
                    "kernels": kernel_names(backward),
                }
                f.write(json.dumps(row) + "\n")
                f.flush()
                print(b, h, n, dqk, dv, causal, f"cool {cool * 1e3:.3f} ms hot {row['hot_s'] * 1e3:.3f} ms", flush=True)
                del q, k, v, o, do
                torch.cuda.empty_cache()
    finally:
        clocks.terminate()


if __name__ == "__main__":
    main(sys.argv[1])
