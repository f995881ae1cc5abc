"""Microbenchmark of the FP8 K/V cast on the lent H200 (issue #29, item 5): ``x8.to(dtype)`` of an
e4m3 or e5m2 tensor to bf16 or fp16 (the one elementwise kernel a user's cast of an FP8 cache to
the dtype of Q launches), against a 16-bit copy of the same elements (``x16.clone()``).

    python validation/probes/fp8_cast_probe.py OUT.jsonl

One JSON line per (conversion, elements): the bytes it moves (read + write), the median of 20
CUDA-event timings (back to back, each call's output a new tensor as the user's code makes it)
and the kernel the profiler saw.
"""

from __future__ import annotations

import json
import sys

import torch
from probe_timing import kernel_names, timed

SIZES = (1 << 24, 1 << 26, 1 << 28)  # elements: 16M (L2-sized inputs) to 268M (a large cache)
CONVERSIONS = (
    ("float8_e4m3fn", "bfloat16"),
    ("float8_e5m2", "bfloat16"),
    ("float8_e4m3fn", "float16"),
    ("bfloat16", "bfloat16"),  # the reference: a plain 16-bit copy
)


def main(out: str) -> None:
    with open(out, "w") as f:
        f.write(json.dumps({"section": "env", "torch": torch.__version__, "gpu": torch.cuda.get_device_name()}) + "\n")
        for src, dst in CONVERSIONS:
            for n in SIZES:
                s, d = getattr(torch, src), getattr(torch, dst)
                x = torch.randn(n, device="cuda", dtype=torch.float32).to(s)
                fn = (lambda x=x: x.clone()) if s == d else (lambda x=x, d=d: x.to(d))
                us = timed(fn)
                moved = n * (x.element_size() + torch.empty((), dtype=d).element_size())
                row = {
                    "section": "cast",
                    "from": src,
                    "to": dst,
                    "elements": n,
                    "bytes": moved,
                    "time_us": us,
                    "bytes_per_s": moved / (us * 1e-6),
                    "kernels": kernel_names(fn),
                }
                f.write(json.dumps(row) + "\n")
                f.flush()
                print(src, dst, n, f"{us:.1f} us", f"{moved / (us * 1e-6) / 1e12:.3f} TB/s", flush=True)
                del x


if __name__ == "__main__":
    main(sys.argv[1])
