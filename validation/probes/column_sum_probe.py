"""ATen's sum over a tensor's leading dim (a linear layer's bias gradient: the column sums of
dO) against its sum over the last dim, by rows and columns (issue 30).

    python validation/probes/column_sum_probe.py OUT.jsonl

One line per reduction: ``dim`` (0: over the rows, -1: over the columns), ``rows``, ``cols``,
``dtype``, the kernels one call launched and ``us``, their mean CUPTI time over 20 calls. A probe
of the library's kernel, not a check: nothing in a validation set runs it alone.
"""

from __future__ import annotations

import json
import sys

import torch
from probe_timing import run_sections
from unaligned_gemm_probe import cupti

ROWS = (128, 512, 3152, 8192, 32768)
COLS = (768, 2304, 4096)


def sums(f) -> None:
    for dtype in ("bf16", "fp32"):
        dt = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype]
        for rows in ROWS:
            for cols in COLS:
                x = torch.randn(rows, cols, device="cuda", dtype=dt)
                for dim in (0, -1):
                    kernels = cupti(lambda x=x, dim=dim: x.sum(dim))
                    line = {"section": "sum", "dim": dim, "rows": rows, "cols": cols, "dtype": dtype}
                    line |= {"kernels": kernels, "us": sum(k["us"] for k in kernels)}
                    f.write(json.dumps(line) + "\n")
                del x
            f.flush()


if __name__ == "__main__":
    run_sections(sys.argv[1], [sums])
