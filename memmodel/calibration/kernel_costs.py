"""Two costs of FlashAttention-2's kernels the reference shapes of ``calibrate`` do not show,
each fitted to a reference record of its own by the model itself.

* ``implementations.<impl>.local_block_cost``: what every block of a sliding-window forward
  costs beyond a plain block's work, in plain blocks. Its local kernels apply the window's mask
  to every K/V block they visit (``Mask::apply_mask`` runs whenever ``Is_local``), not only to
  the blocks the window's edges cut. Fitted to the local kernels at the calibration's shapes
  (``validation/cases/h200-window-ref.txt``: 8 × 16 × 2048 and 1 × 8 × 16384, windows 256 and
  1024).
* ``implementations.<impl>.exited_cta_cost``: what a CTA costs that returns at its start — a
  packed row's grid is ⌈longest document / B_r⌉ × documents × heads, and the CTAs past a shorter
  document's end exit at once (``flash_fwd_kernel.h``: ``if (m_block * kBlockM >=
  actual_seqlen_q) return``). Fitted to packed rows of one long document and many of one block
  (``validation/cases/h200-varlen-ref.txt``), taken the same for the backward's grid.

The model's time is linear in either cost, T(c) = T(lo) + (c − lo) · (T(hi) − T(lo)) / (hi − lo)
(lo above 0: at 0 the local rule is off), so each shape gives c from its measured time; the
figure is their mean at the head dim (at least 0).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping
from typing import Any

#: the reference records and the commands that made them, per figure
RECORDS = {
    "local_block_cost": ("validation/h200/window-ref/h200-window-ref.json.gz",),
    "exited_cta_cost": ("validation/h200/varlen-ref/h200-varlen-ref.json.gz",),
}
COMMANDS = {
    "local_block_cost": "python3 -m memmodel validate --gpu h200 --cases validation/cases/h200-window-ref.txt "
    "--output h200-window-ref.json.gz --format summary",
    "exited_cta_cost": "python3 -m memmodel validate --gpu h200 --cases validation/cases/h200-varlen-ref.txt "
    "--output h200-varlen-ref.json.gz --format summary",
}
SOURCES = {"local_block_cost": "measured-local-kernels", "exited_cta_cost": "measured-varlen-kernels"}
#: the profile field each fills (:class:`~memmodel.hardware.profile.ImplementationFigures`) and its unit
FIELDS = {"local_block_cost": ("local_block_cost", ""), "exited_cta_cost": ("exited_cta_cost_s", " s")}
NOTES = {
    "local_block_cost": "extra cost of every block a sliding-window forward visits (its kernel masks each), in plain "
    "blocks; fitted to {rows} local forwards at the calibration's shapes (8 x 16 x 2048 and 1 x 8 x 16384, windows "
    "256 and 1024, fp16), medians of CUDA-event times, the other figures as fitted: memmodel.calibration.kernel_costs",
    "exited_cta_cost": "what a CTA that returns at once costs, per CTA slot (a packed row's grid past a shorter "
    "document's end), forward and backward; fitted to {rows} packed rows of one long document and many of one "
    "block (fp16, causal), medians of CUDA-event times, the other figures as fitted: memmodel.calibration.kernel_costs",
}
TITLES = {
    "local_block_cost": "memmodel sliding-window references (FlashAttention-2's local kernels)",
    "exited_cta_cost": "memmodel packed-row references (FlashAttention-2's varlen kernels)",
}


def _selects(figure: str) -> Callable[[Mapping[str, Any]], bool]:
    if figure == "local_block_cost":
        return lambda c: bool(c.get("window")) and not c.get("seq_lens")
    return lambda c: bool(c.get("seq_lens")) and not c.get("window")


def _rows(record: Mapping[str, Any], impl: str, figure: str = "local_block_cost") -> list[tuple[Any, float]]:
    """(workload, measured step time) of the record's forwards of ``impl`` that ``figure`` is fitted to."""
    from ..cases import Case

    wanted = _selects(figure)
    rows: list[tuple[Any, float]] = []
    for entry in record.get("cases", []):
        c = entry.get("case", {})
        measured = ((entry.get("timing") or {}).get("kernels") or {}).get("attention")
        if c.get("impl") != impl or not wanted(c) or c.get("backward") or not measured:
            continue
        rows.append((Case.from_dict(c).workload(), float(measured)))
    return rows


def _time(w: Any, profile: Any, impl: str) -> float:
    from ..model import compare

    return float(compare(w, profile, impl=impl).tiled.timing.time_s)


def fitted(
    records: Any, figure: str = "local_block_cost", impl: str = "sdpa-flash", profile: Any = None
) -> dict[int, float]:
    """{head dim: figure} from the records' forwards (empty without); ``local_block_cost`` in
    plain blocks (3 decimals), ``exited_cta_cost`` in seconds (4 significant digits)."""
    from ..hardware import load_profile

    base = profile or load_profile("h200")
    field = FIELDS[figure][0]
    rows = [row for record in records for row in _rows(record, impl, figure)]
    lo, hi = (1e-6, 1.0) if figure == "local_block_cost" else (1e-9, 4e-6)
    out: dict[int, float] = {}
    for d in sorted({int(w.d) for w, _ in rows}):
        at = lambda c, d=d: base.with_implementation_figures(impl, **{field: ((d, c),)})  # noqa: E731
        costs = []
        for w, measured in (row for row in rows if int(row[0].d) == d):
            t_lo, t_hi = _time(w, at(lo), impl), _time(w, at(hi), impl)
            costs.append(lo + (measured - t_lo) * (hi - lo) / (t_hi - t_lo) if t_hi > t_lo else 0.0)
        value = max(0.0, statistics.fmean(costs))
        out[d] = round(value, 3) if figure == "local_block_cost" else float(f"{value:.4g}")
    return out


def apply(
    data: dict[str, Any], records: Any, figure: str = "local_block_cost", impl: str = "sdpa-flash"
) -> dict[str, Any]:
    """``data`` (a profile's YAML mapping) with ``implementations.<impl>.<figure>`` fitted from
    ``records`` and its source."""
    rows = sum(len(_rows(r, impl, figure)) for r in records)
    if not rows:
        return data
    cost = fitted(records, figure, impl)
    unit = FIELDS[figure][1]
    record = records[0]
    figures = dict((data.get("implementations") or {}).get(impl) or {})
    figures[figure] = {
        "value": {d: (f"{v:.4g}{unit}" if unit else v) for d, v in cost.items()},
        "source": SOURCES[figure],
        "note": NOTES[figure].format(rows=rows),
    }
    data.setdefault("implementations", {})[impl] = figures
    from .sources import with_record_source

    return with_record_source(
        data, SOURCES[figure], TITLES[figure], ", ".join(RECORDS[figure]), record, COMMANDS[figure]
    )
