"""Microbenchmark of PyTorch's softmax kernels by row length (issue #28: the softmax earlier PyTorch ran).

PyTorch 2.7 changed which kernel a last-dimension softmax of rows longer than 1024 runs (pull
request 144679, January 2025): the warp-per-row kernel up to 2048 keys, then a register-cached
block-per-row kernel (``cunn_SoftMaxForwardReg``, element loads) up to 9216; before it, every
row longer than 1024 ran a block-per-row kernel with 16-byte loads (``cunn_SoftMaxForwardSmem``,
the row cached in shared memory, or ``cunn_SoftMaxForward`` where the row does not fit or is not
16-byte aligned). The softmax with a 32-bit output (``torch._softmax(x, -1, half_to_float=True)``)
still runs those older kernels at every row length, so they can be timed on a current PyTorch:

* ``half``: fp16 in, fp16 out (``torch.softmax``): what this PyTorch runs;
* ``to_float``: fp16 in, fp32 out (``torch._softmax(x, -1, True)``): the block-per-row kernels;

over plain rows, causally masked square blocks (−inf above the diagonal) and rows that are not a
multiple of 8 elements, inputs of 512 MiB. At rows both modes run the same kernel (past 9216 keys),
the ratio of their times is what the wider output costs; memmodel.calibration.softmax_paths takes
the older kernels' fp16 rate from it.

    python validation/probes/softmax_paths_probe.py OUT.jsonl

One JSON line per (section, mode, row): the bytes read + written, the median of 20 CUDA-event
timings and the kernels the profiler saw.
"""

from __future__ import annotations

import json
import re
import sys

import torch
from probe_timing import kernel_names, timed

BYTES = 512 * 2**20  # fp16 input bytes
PLAIN = (1024, 1536, 2048, 3072, 4096, 6144, 8192, 9216, 10240, 12288, 16384)
MASKED = (2048, 4096, 8192, 16384)
ODD = (1025, 2049, 4097, 8193, 12289, 16385)


def short(name: str) -> str:
    found = re.search(r"(cunn_\w+|softmax_warp_\w+)", name)
    return found.group(1) if found else name[:60]


def inputs(section: str, row: int) -> torch.Tensor:
    g = torch.Generator(device="cuda").manual_seed(row)
    if section == "masked":
        heads = max(1, BYTES // (2 * row * row))
        x = torch.randn(heads, row, row, device="cuda", dtype=torch.float16, generator=g)
        x.masked_fill_(torch.ones(row, row, device="cuda", dtype=torch.bool).triu_(1), float("-inf"))
        return x
    return torch.randn(BYTES // (2 * row), row, device="cuda", dtype=torch.float16, generator=g)


def main(out: str) -> None:
    with open(out, "w") as f:
        env = {
            "section": "env",
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "gpu": torch.cuda.get_device_name(),
            "sm_count": torch.cuda.get_device_properties(0).multi_processor_count,
        }
        f.write(json.dumps(env) + "\n")
        for section, rows in (("plain", PLAIN), ("masked", MASKED), ("odd", ODD)):
            for row in rows:
                x = inputs(section, row)
                for mode in ("half", "to_float"):
                    if mode == "half":
                        y = torch.empty_like(x)
                        fn = lambda x=x, y=y: torch.softmax(x, dim=-1, out=y)  # noqa: E731
                        out_bytes = 2
                    else:
                        fn = lambda x=x: torch._softmax(x, -1, True)  # noqa: E731
                        out_bytes = 4
                    us = timed(fn)
                    moved = x.numel() * (2 + out_bytes)
                    line = {
                        "section": section,
                        "mode": mode,
                        "row": row,
                        "rows": x.numel() // row,
                        "elements": x.numel(),
                        "bytes": moved,
                        "time_us": us,
                        "bytes_per_s": moved / (us * 1e-6),
                        "kernels": kernel_names(fn),
                    }
                    f.write(json.dumps(line) + "\n")
                    f.flush()
                    names = ",".join(short(k["name"]) for k in line["kernels"])
                    print(
                        section, mode, row, f"{us:.1f} us", f"{line['bytes_per_s'] / 1e12:.3f} TB/s", names, flush=True
                    )
                    torch.cuda.empty_cache()
                del x
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1])
