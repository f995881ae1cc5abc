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

import numpy as np

#: the reference records and the commands that made them, per figure
RECORDS = {
    "local_block_cost": (
        "validation/h200/window-ref/h200-window-ref.json.gz",
        "validation/h200/local-window-probe/h200-local-window-probe.json.gz",
    ),
    "exited_cta_cost": ("validation/h200/varlen-ref/h200-varlen-ref.json.gz",),
}
COMMANDS = {
    "local_block_cost": "python3 -m memmodel validate --gpu h200 --cases validation/cases/h200-window-ref.txt "
    "--output h200-window-ref.json.gz --format summary; the same with h200-local-window-probe.txt --no-host-probe",
    "exited_cta_cost": "python3 -m memmodel validate --gpu h200 --cases validation/cases/h200-varlen-ref.txt "
    "--output h200-varlen-ref.json.gz --format summary",
}
SOURCES = {"local_block_cost": "measured-local-kernels", "exited_cta_cost": "measured-varlen-kernels"}
#: the profile field each fills (:class:`~memmodel.hardware.profile.ImplementationFigures`) and its unit
FIELDS = {"local_block_cost": ("local_block_cost", ""), "exited_cta_cost": ("exited_cta_cost_s", " s")}
NOTES = {
    "local_block_cost": "extra cost of every block a sliding-window forward visits (its kernel masks each), in plain "
    "blocks; fitted to {rows} local forwards (the calibration's shapes, 8 x 16 x 2048 and 1 x 8 x 16384 at windows "
    "256 and 1024, fp16; and a probe of windows 64 to 2048 at 64 heads on 8 x 32768 tokens, d 64, and 128 to 1024 "
    "at 32 on 8, d 128, bf16), medians of CUDA-event times, the other figures as fitted; at a head dim whose CTAs "
    "fall on both sides of the masking steps jointly with local_loop_cost: memmodel.calibration.kernel_costs",
    "exited_cta_cost": "what a CTA that returns at once costs, per CTA slot (a packed row's grid past a shorter "
    "document's end), forward and backward; fitted to {rows} packed rows of one long document and many of one "
    "block (fp16, causal), medians of CUDA-event times, the other figures as fitted: memmodel.calibration.kernel_costs",
}
#: the second figure the local kernels' fit gives where their CTAs fall on both sides of the masking steps
LOOP_NOTE = (
    "what a sliding-window forward's CTA costs beyond its blocks where it walks past its masking steps "
    "(FlashAttention-2's second loop), per CTA slot; fitted jointly with local_block_cost to the head dims whose "
    "local forwards have CTAs on both sides (d 64: windows up to 128 keys run their masking steps alone), {rows} "
    "of them; 0 at the others (their CTAs all on one side: the CTA overhead holds it); "
    "memmodel.calibration.kernel_costs"
)
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
    if figure == "local_block_cost":
        return {d: cost for d, (cost, _) in fitted_local(records, impl, profile).items()}
    from ..hardware import load_profile

    base = profile or load_profile("h200")
    field = FIELDS[figure][0]
    rows = [row for record in records for row in _rows(record, impl, figure)]
    lo, hi = 1e-9, 4e-6
    out: dict[int, float] = {}
    for d in sorted({int(w.d) for w, _ in rows}):
        at = lambda c, d=d: base.with_implementation_figures(impl, **{field: ((d, c),)})  # noqa: E731
        costs = []
        for w, measured in (row for row in rows if int(row[0].d) == d):
            t_lo, t_hi = _time(w, at(lo), impl), _time(w, at(hi), impl)
            costs.append(lo + (measured - t_lo) * (hi - lo) / (t_hi - t_lo) if t_hi > t_lo else 0.0)
        out[d] = float(f"{max(0.0, statistics.fmean(costs)):.4g}")
    return out


def fitted_local(records: Any, impl: str = "sdpa-flash", profile: Any = None) -> dict[int, tuple[float, float | None]]:
    """{head dim: (local_block_cost, local_loop_cost_s or None)} from the records' local forwards.

    The model's time is linear in both, T = T₀ + c · a + k · b (a, b from the model at two values
    of each). Where a head dim's forwards have CTAs on both sides of the masking steps (some with
    no CTA past them, some with), both are fitted by least squares on the relative error; where
    not, or where the loop's cost comes out negative, the block cost alone, the mean of each
    forward's own (as the reference shapes had it)."""
    from ..hardware import load_profile

    base = profile or load_profile("h200")
    rows = [row for record in records for row in _rows(record, impl)]
    out: dict[int, tuple[float, float | None]] = {}
    for d in sorted({int(w.d) for w, _ in rows}):

        def at(c: float, k: float, d: int = d) -> Any:
            return base.with_implementation_figures(impl, local_block_cost=((d, c),), local_loop_cost_s=((d, k),))

        lines = []
        for w, measured in (row for row in rows if int(row[0].d) == d):
            t0 = _time(w, at(1e-6, 0.0), impl)
            a = _time(w, at(1.0, 0.0), impl) - t0
            b = (_time(w, at(1e-6, 1e-6), impl) - t0) / 1e-6
            lines.append((measured, t0, a, b))
        both = any(b > 0 for *_, b in lines) and any(b == 0 for *_, b in lines)
        if both:
            design = np.asarray([[a / m, b / m] for m, _, a, b in lines])
            target = np.asarray([(m - t0) / m for m, t0, _, _ in lines])
            (c, k), *_ = np.linalg.lstsq(design, target, rcond=None)
            if k > 0:
                out[d] = (round(max(0.0, float(c)), 3), float(f"{float(k):.4g}"))
                continue
        costs = [(m - t0) / a if a > 0 else 0.0 for m, t0, a, _ in lines]
        out[d] = (round(max(0.0, statistics.fmean(costs)), 3), None)
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
    if figure == "local_block_cost":
        fits = fitted_local(records, impl)
        loops = {d: k for d, (_, k) in fits.items() if k is not None}
        if loops:  # 0 where the CTA overhead holds it (every CTA on one side), so no head dim takes another's
            figures["local_loop_cost"] = {
                "value": {d: f"{loops[d]:.4g} s" if d in loops else 0 for d in fits},
                "source": SOURCES[figure],
                "note": LOOP_NOTE.format(rows=sum(1 for r in records for w, _ in _rows(r, impl) if int(w.d) in loops)),
            }
    data.setdefault("implementations", {})[impl] = figures
    from .sources import with_record_source

    return with_record_source(
        data, SOURCES[figure], TITLES[figure], ", ".join(RECORDS[figure]), record, COMMANDS[figure]
    )
