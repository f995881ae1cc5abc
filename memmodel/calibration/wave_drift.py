"""The profile's ``memory.l2.wave_drift`` from non-causal heads too long for the L2.

The CTAs of a wave of a non-causal tiled forward walk their head's K/V side by side; the model
reads it once a wave where it does not stay in L2. Measured, a long head reads it more often,
and the more the longer the kernel has run: the wave's CTAs drift apart
(:func:`memmodel.traffic.flash.wave_drift_hbm`). The drift is one number, the spread a wave
gains per wave as a share of its walk, by head dim, fitted here to single-kernel reference
shapes: one non-causal FlashAttention-2 head (batch 1) whose K and V are 1.6 to 5.3 × the L2, at
d = 64, 128 (``validation/cases/h200-long-ref.txt``) and 256 (``h200-reuse-ref-3.txt``), run by
``memmodel validate --ncu --placements 5``, each at the median of its placements. The fit
minimises the squared logarithm of predicted over measured K/V reads (DRAM read − Q) at each head
dim; the rows of several heads in the same records check it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

#: the reference records and the commands that made them
RECORDS = (
    "validation/h200/causal-reuse-3/h200-long-ref.json.gz",
    "validation/h200/causal-reuse-3/h200-reuse-ref-3.json.gz",
    "validation/h200/causal-reuse-3/h200-ref-d96-2.json.gz",
)
COMMAND = (
    "python3 -m memmodel validate --ncu --placements 5 --gpu h200 --cases validation/cases/h200-long-ref.txt "
    "(and h200-reuse-ref-3.txt, h200-ref-d96-2.txt) --output h200-long-ref.json"
)
SOURCE = "measured-wave-drift"


def _rows(record: Mapping[str, Any], impl: str) -> list[tuple[Any, float]]:
    """(workload, measured K/V reads) of the record's one-head non-causal forwards of ``impl``."""
    from ..cases import Case

    rows: list[tuple[Any, float]] = []
    for entry in record.get("cases", []):
        c = entry.get("case", {})
        found = [b for b in entry.get("bytes") or [] if b.get("kernel") == "fa2_fwd"]
        one = c.get("batch") == 1 and c.get("heads") == 1 and (c.get("kv_heads") or 1) == 1
        if not found or c.get("impl") != impl or c.get("causal") or not one:
            continue
        w = Case.from_dict(c).workload()
        q = w.n * w.d * w.element_bytes
        rows.append((w, float(found[0]["measured_hbm_read_bytes"]) - q))
    return rows


def _predicted_kv(w: Any, profile: Any, impl: str) -> float:
    from ..model import compare

    kernel = next(k for k in compare(w, profile, impl=impl).tiled.traffic.kernels if k.name == "fa2_fwd")
    return float(
        sum(
            int(t.bytes)
            for t in kernel.transfers
            if t.tensor in ("K", "V") and t.level == "hbm" and t.direction == "read"
        )
    )


def golden_min(loss: Any, lo: float, hi: float, steps: int = 24) -> float:
    """The argument in [lo, hi] of a unimodal ``loss``'s minimum (golden-section search)."""
    ratio = (math.sqrt(5) - 1) / 2
    a, b = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
    fa, fb = loss(a), loss(b)
    for _ in range(steps):
        if fa <= fb:
            hi, b, fb = b, a, fa
            a = hi - ratio * (hi - lo)
            fa = loss(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + ratio * (hi - lo)
            fb = loss(b)
    return (lo + hi) / 2


def fitted_drift(records: Any, impl: str = "sdpa-flash", profile: Any = None) -> dict[int, float]:
    """{head dim: drift (4 decimals)} that best predicts the K/V reads of the records' one-head
    non-causal forwards at that head dim (least squares in the logarithm, on [0, 0.5]); empty
    without such rows."""
    from ..hardware import load_profile

    base = profile or load_profile("h200")
    rows = [row for record in records for row in _rows(record, impl)]
    out = {}
    for d in sorted({w.d for w, _ in rows}):
        at = [(w, m) for w, m in rows if w.d == d]

        def loss(drift: float, at: Any = at, d: int = d) -> float:
            figures = {**base.figures, "memory.l2.wave_drift": ((d, drift),)}
            p = dataclasses.replace(base, figures=figures)
            return sum(math.log(max(_predicted_kv(w, p, impl), 1.0) / max(m, 1.0)) ** 2 for w, m in at)

        out[d] = round(golden_min(loss, 0.0, 0.5), 4)
    return out


def apply(data: dict[str, Any], records: Any, impl: str = "sdpa-flash") -> dict[str, Any]:
    """``data`` (a profile's YAML mapping) with ``memory.l2.wave_drift`` fitted from ``records``
    and its source."""
    drift = fitted_drift(records, impl)
    if not drift:
        return data
    record = records[0]
    l2 = data.setdefault("memory", {}).setdefault("l2", {})
    rows = sum(len(_rows(r, impl)) for r in records)
    placed = (record.get("ncu") or {}).get("placements", 1)
    at = f", the median of {placed} placements of the inputs" if placed > 1 else ""
    l2["wave_drift"] = {
        "value": drift,
        "source": SOURCE,
        "note": "how far apart the CTAs of a wave walking K/V in lockstep drift per wave the kernel "
        "has run, as a share of the walk, by head dim (memmodel.traffic.flash.wave_drift_hbm): fitted "
        f"to the K/V reads of {rows} non-causal FlashAttention-2 heads of 1.6 to 5.3 x the L2, Nsight "
        f"Compute, cold L2{at}",
    }
    from .sources import with_record_source

    title = "memmodel non-causal long-head references (FlashAttention-2)"
    return with_record_source(data, SOURCE, title, ", ".join(RECORDS), record, COMMAND)
