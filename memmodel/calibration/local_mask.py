"""The profile's ``implementations.<impl>.local_block_cost``: what every block of a
sliding-window forward costs beyond a plain block's work.

FlashAttention-2's local kernels apply the window's mask to every K/V block they visit (its
``Mask::apply_mask`` runs whenever ``Is_local``), not only to the blocks the window's edges cut;
the time model then prices each visited block at 1 + ``local_block_cost`` plain blocks
(:func:`memmodel.timing.kernel_time`). The cost is one number per head dim, fitted here to the
local kernels' CUDA-event times on calibration shapes (``validation/cases/h200-window-ref.txt``:
the calibration's 8 × 16 × 2048 and 1 × 8 × 16384, windows 256 and 1024). The model's time is
linear in the cost, T(c) = T(0) + c · (T(1) − T(0)), so each shape gives c = (measured − T(0)) /
(T(1) − T(0)); the figure is their mean at the head dim (at least 0).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

#: the reference records and the command that made them
RECORDS = ("validation/h200/window-ref/h200-window-ref.json.gz",)
COMMAND = (
    "python3 -m memmodel validate --gpu h200 --cases validation/cases/h200-window-ref.txt "
    "--output h200-window-ref.json.gz --format summary"
)
SOURCE = "measured-local-kernels"
FIGURE = "local_block_cost"


def _rows(record: Mapping[str, Any], impl: str) -> list[tuple[Any, float]]:
    """(workload, measured step time) of the record's sliding-window forwards of ``impl``."""
    from ..cases import Case

    rows: list[tuple[Any, float]] = []
    for entry in record.get("cases", []):
        c = entry.get("case", {})
        timing = entry.get("timing") or {}
        measured = (timing.get("kernels") or {}).get("attention")
        if c.get("impl") != impl or not c.get("window") or c.get("backward") or not measured:
            continue
        rows.append((Case.from_dict(c).workload(), float(measured)))
    return rows


def _time(w: Any, profile: Any, impl: str) -> float:
    from ..model import compare

    return float(compare(w, profile, impl=impl).tiled.timing.time_s)


def fitted_cost(records: Any, impl: str = "sdpa-flash", profile: Any = None) -> dict[int, float]:
    """{head dim: cost (3 decimals)} from the records' sliding-window forwards (empty without)."""
    from ..hardware import load_profile

    base = profile or load_profile("h200")
    rows = [row for record in records for row in _rows(record, impl)]
    out: dict[int, float] = {}
    for d in sorted({int(w.d) for w, _ in rows}):
        at = lambda c, d=d: base.with_implementation_figures(impl, local_block_cost=((d, c),))  # noqa: E731
        costs = []
        for w, measured in (row for row in rows if int(row[0].d) == d):
            t0, t1 = _time(w, at(0.0), impl), _time(w, at(1.0), impl)
            costs.append((measured - t0) / (t1 - t0) if t1 > t0 else 0.0)
        out[d] = round(max(0.0, statistics.fmean(costs)), 3)
    return out


def apply(data: dict[str, Any], records: Any, impl: str = "sdpa-flash") -> dict[str, Any]:
    """``data`` (a profile's YAML mapping) with ``implementations.<impl>.local_block_cost``
    fitted from ``records`` and its source."""
    rows = sum(len(_rows(r, impl)) for r in records)
    if not rows:
        return data
    cost = fitted_cost(records, impl)
    record = records[0]
    figures = dict((data.get("implementations") or {}).get(impl) or {})
    figures[FIGURE] = {
        "value": cost,
        "source": SOURCE,
        "note": "extra cost of every block a sliding-window forward visits (its kernel masks each), in plain "
        f"blocks; fitted to {rows} local forwards at the calibration's shapes (8 x 16 x 2048 and 1 x 8 x 16384, "
        "windows 256 and 1024, fp16), medians of CUDA-event times, the other figures as fitted: "
        "memmodel.calibration.local_mask",
    }
    data.setdefault("implementations", {})[impl] = figures
    sources = dict(data.get("sources") or {})
    sources[SOURCE] = {
        "title": f"memmodel sliding-window references (FlashAttention-2's local kernels), {record.get('device', 'GPU')} "
        f"({', '.join(RECORDS)})",
        "kind": "measured",
        "machine": f"lent {record.get('device', 'GPU')} (nvidia-h200), memmodel {record.get('memmodel_version', '?')}",
        "date": str(record.get("started", ""))[:10],
        "command": COMMAND,
    }
    data["sources"] = sources
    return data
