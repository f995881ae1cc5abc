"""``kernels.small.column_reduction`` and ``kernels.reduction.column_bandwidth``: ATen's sum over a
tensor's leading dims (a linear layer's bias gradient, ``dO.sum(0)``), which runs another kernel than
a row's sum.

The probe (:data:`RECORD`, ``validation/probes/column_sum_probe.py``) timed ``x.sum(0)`` of bf16 and
fp32 (rows, cols) tensors, 128 to 32768 rows of 768 to 4096 columns, by the reduce kernel's CUPTI time
(the memset ATen launches before it from a few thousand rows is a kernel of its own). Its time is a
fixed part that grows with the rows reduced (about 3.4 us at 128 rows, 8 us at 512, whatever the
columns) and its bytes: the fixed part at each measured row count is the median of its times less the
bytes at the rate; the rate is the bytes over the time less the fixed part at the largest row count,
where the bytes dominate (the median over columns and dtypes). Rows between those measured take the
fixed part linear in log2(rows); past them, the ends'.
"""

from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path
from typing import Any

RECORD = "validation/h200/column-sum/column-sum.jsonl.gz"
COMMAND = "cd validation/probes && python3 column_sum_probe.py column-sum.jsonl"
SOURCE = "measured-column-sums"


def _points(repo: Path) -> list[tuple[int, float, float]]:
    """(rows, bytes read, the reduce kernel's seconds) of each ``x.sum(0)`` of the probe."""
    out = []
    for line in gzip.open(repo / RECORD, "rt"):
        row = json.loads(line)
        if row.get("section") != "sum" or row.get("dim") != 0:
            continue
        us = sum(k["us"] for k in row["kernels"] if "reduce_kernel" in k["name"])
        element = 2 if row["dtype"] == "bf16" else 4
        out.append((int(row["rows"]), float(row["rows"] * row["cols"] * element), us * 1e-6))
    return out


def fit(repo: Path) -> dict[str, Any]:
    """``{"fixed": {rows: seconds}, "bandwidth": bytes/s, "points": n}`` (see the module)."""
    points = _points(repo)
    if not points:
        raise ValueError(f"{RECORD}: no sum over the leading dim")
    by_rows: dict[int, list[tuple[float, float]]] = {}
    for rows, nbytes, seconds in points:
        by_rows.setdefault(rows, []).append((nbytes, seconds))
    smallest, largest = min(by_rows), max(by_rows)
    fixed_small = statistics.median(s for _, s in by_rows[smallest])
    # the rate where the bytes dominate: the largest row count, its fixed part taken as the
    # second-largest's median time (the bytes there a few microseconds at most)
    ordered = sorted(by_rows)
    floor = statistics.median(s for _, s in by_rows[ordered[1]]) if len(ordered) > 1 else fixed_small
    bandwidth = statistics.median(b / max(s - floor, 1e-9) for b, s in by_rows[largest])
    fixed = {rows: max(statistics.median(s - b / bandwidth for b, s in by_rows[rows]), 0.0) for rows in ordered}
    return {"fixed": fixed, "bandwidth": bandwidth, "points": len(points)}


def apply(data: dict[str, Any], repo: Path) -> dict[str, Any]:
    """``data`` (a profile's YAML mapping) with the column reduction's figures and their source."""
    result = fit(repo)
    note = (
        f"x.sum(0) of bf16 and fp32 (rows, cols) tensors (a bias gradient: ATen's column reduction), "
        f"{result['points']} shapes of 128 to 32768 rows and 768 to 4096 columns, the reduce kernel's CUPTI time"
    )
    kernels = data.setdefault("kernels", {})
    kernels.setdefault("small", {})["column_reduction"] = {
        "value": {rows: f"{s * 1e6:.4g} us" for rows, s in sorted(result["fixed"].items())},
        "source": SOURCE,
        "note": f"its fixed time by the rows reduced, beyond its bytes at kernels.reduction.column_bandwidth; {note}: "
        "memmodel.calibration.column_sums",
    }
    kernels.setdefault("reduction", {})["column_bandwidth"] = {
        "value": f"{result['bandwidth'] / 1e12:.4g} TB/s",
        "source": SOURCE,
        "note": f"its bytes read over its time less the fixed part, at the most rows; {note}: memmodel.calibration.column_sums",
    }
    from .sources import put_source

    return put_source(
        data,
        SOURCE,
        title=f"memmodel column-sum probe (ATen's sum over the leading dim), NVIDIA H200 ({RECORD})",
        machine="lent NVIDIA H200 (nvidia-h200), torch 2.11.0+cu130",
        date="2026-12-04",
        command=COMMAND,
    )
