"""The profile's ``memory.l2.causal_reuse_d*`` curves from one causal head measured at several lengths.

A causal FlashAttention-2 forward re-reads each head's K/V once per Q block up to the diagonal;
what share of those re-reads misses in L2 depends on the K/V live while they happen, and on the
order the kernel's CTAs walk it, which no microbenchmark of ours reproduced past about 0.8 × the
L2 (the ``causal-down`` family of :mod:`memmodel.calibration.l2_reuse` misses a tenth as often as
the kernel does there). So the curve is measured on the kernel itself, on single-kernel reference
shapes: one causal head (batch 1), fp16, whose K and V are 0.4 to 2.2 × the L2, at d = 64, 128
and 256 (``validation/cases/h200-causal-reuse-ref.txt``, run by ``memmodel validate --ncu``).
Each point is

    miss = (DRAM read − Q − K − V) / (K and V requested − K − V)

at the head's K and V (:func:`memmodel.traffic.flash.causal_live_bytes` of one head) per mille
of the L2, the requests as the model counts them (Q block × visited K/V block).
Everything else (several heads, GQA, other lengths) is the model's: those records check it.
cuDNN's forward schedules its own way; its curves (``memory.l2.cudnn_causal_reuse_d*``) come
from the same one-head shapes run on cuDNN (probe 11, ``validation/h200/probe-11/``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..frozen import frozen
from ..traffic.l2 import CAUSAL_CURVE_DIMS as HEAD_DIMS
from ..traffic.l2 import CAUSAL_CURVES


@frozen
class Fit:
    """One family of curves and where it is measured."""

    source: str  # the profile's source id
    record: str  # the validate record it is fitted from (repository path)
    command: str  # the command that made the record
    heads: int = 1  # batch × heads of the rows fitted (1: the one-head curves; more: several heads')
    gqa: bool = False  # the GQA rows instead (any count of heads), binned by K/V live
    #: further records whose rows join ``record``'s (later references extending the same curves)
    also: tuple[str, ...] = ()

    def records(self) -> tuple[str, ...]:
        return (self.record, *self.also)


def merged(records: Any) -> dict[str, Any]:
    """One record of the first's fields and every record's cases (references of one GPU, fitted
    together)."""
    records = list(records)
    return {**records[0], "cases": [c for r in records for c in r.get("cases", [])]}


#: per implementation, its fits. FlashAttention-2's: one head and 2, 4 and 16 heads, each profiled at
#: five placements of its inputs and fitted at the median (probe 12: one placement moves a
#: kernel's bytes by up to `70 %` in the knee); cuDNN's are probe 11's one-head rows (its
#: several-head rows check the one-head-live rule)
FITS = {
    "sdpa-flash": (
        Fit(
            "measured-causal-reuse",
            "validation/h200/causal-reuse-2/h200-causal-reuse-ref-placed.json.gz",
            "python3 -m memmodel validate --ncu --placements 5 --gpu h200 "
            "--cases validation/cases/h200-causal-reuse-ref.txt --output h200-causal-reuse-ref-placed.json",
        ),
        Fit(
            "measured-causal-reuse-h4",
            "validation/h200/causal-reuse-2/h200-causal-heads-ref.json.gz",
            "python3 -m memmodel validate --ncu --placements 5 --gpu h200 "
            "--cases validation/cases/h200-causal-heads-ref.txt --output h200-causal-heads-ref.json",
            heads=4,
        ),
        *(
            Fit(
                f"measured-causal-reuse-h{n}",
                "validation/h200/causal-reuse-2/h200-causal-heads-ref-2.json.gz",
                "python3 -m memmodel validate --ncu --placements 5 --gpu h200 "
                "--cases validation/cases/h200-causal-heads-ref-2.txt --output h200-causal-heads-ref-2.json",
                heads=n,
            )
            for n in (2, 16)
        ),
        Fit(
            "measured-causal-reuse-gqa",
            "validation/h200/causal-reuse-2/h200-causal-gqa-ref.json.gz",
            "python3 -m memmodel validate --ncu --placements 5 --gpu h200 "
            "--cases validation/cases/h200-causal-gqa-ref.txt --output h200-causal-gqa-ref.json",
            gqa=True,
        ),
        Fit(
            "measured-causal-reuse-d96",
            "validation/h200/causal-reuse-3/h200-causal-ref-d96.json.gz",
            "python3 -m memmodel validate --ncu --placements 5 --gpu h200 "
            "--cases validation/cases/h200-causal-ref-d96.txt --output h200-causal-ref-d96.json",
        ),
        *(
            Fit(
                f"measured-causal-reuse-h{n}-d96",
                "validation/h200/causal-reuse-3/h200-ref-d96-2.json.gz",
                "python3 -m memmodel validate --ncu --placements 5 --gpu h200 "
                "--cases validation/cases/h200-ref-d96-2.txt --output h200-ref-d96-2.json",
                heads=n,
            )
            for n in (2, 4, 16)
        ),
        Fit(
            "measured-causal-reuse-gqa-d96",
            "validation/h200/causal-reuse-3/h200-causal-ref-d96.json.gz",
            "python3 -m memmodel validate --ncu --placements 5 --gpu h200 "
            "--cases validation/cases/h200-causal-ref-d96.txt --output h200-causal-ref-d96.json",
            gqa=True,
        ),
        Fit(
            "measured-causal-reuse-gqa-2",
            "validation/h200/causal-reuse-3/h200-causal-gqa-ref-2.json.gz",
            "python3 -m memmodel validate --ncu --placements 5 --gpu h200 "
            "--cases validation/cases/h200-causal-gqa-ref-2.txt --output h200-causal-gqa-ref-2.json",
            gqa=True,
        ),
    ),
    "sdpa-cudnn": (
        Fit(
            "measured-cudnn-causal-reuse",
            "validation/h200/probe-11/h200-cudnn-causal-probe.json.gz",
            "python3 -m memmodel validate --ncu --gpu h200 --cases validation/cases/h200-cudnn-causal-probe.txt "
            "--output h200-cudnn-causal-probe.json",
        ),
        Fit(
            "measured-cudnn-causal-reuse-gqa",
            "validation/h200/causal-reuse-4/h200-cudnn-gqa-ref.json.gz",
            "python3 -m memmodel validate --ncu --placements 5 --gpu h200 "
            "--cases validation/cases/h200-cudnn-gqa-ref.txt --output h200-cudnn-gqa-ref.json "
            "(and h200-cudnn-gqa-ref-2.txt)",
            gqa=True,
            also=("validation/h200/causal-reuse-4/h200-cudnn-gqa-ref-2.json.gz",),
        ),
    ),
}


def fitted_curves(
    record: Mapping[str, Any], l2_bytes: float, impl: str = "sdpa-flash", heads: int = 1, gqa: bool = False
) -> dict[int, dict[int, float]]:
    """{head dim: {K/V per mille of the L2: miss share of the re-reads (4 decimals)}} of the
    record's causal forwards of ``impl`` with ``heads`` heads in all (batch 1, no GQA); with
    ``gqa`` its GQA forwards of any count of heads instead, binned by K/V live to the nearest
    `50` per mille, each bin the median live and the median share of its rows."""
    import statistics

    from ..cases import Case
    from ..model import compare

    found: dict[int, dict[int, list[tuple[float, float]]]] = {}
    for entry in record.get("cases", []):
        c = entry.get("case", {})
        rows = [b for b in entry.get("bytes") or [] if b.get("kernel") == "fa2_fwd"]
        n_heads, kv_heads = c.get("heads"), c.get("kv_heads") or c.get("heads")
        if gqa:
            shape = c.get("batch") == 1 and kv_heads < n_heads
        else:
            shape = c.get("batch") == 1 and n_heads == heads and kv_heads == heads
        if not rows or c.get("impl") != impl or not c.get("causal") or not shape or c.get("d") not in HEAD_DIMS:
            continue
        w = Case.from_dict(c).workload()
        tiled = compare(w, _profile(), impl=impl).tiled.traffic
        kernel = next(k for k in tiled.kernels if k.name == "fa2_fwd")
        requested = sum(
            int(t.bytes)
            for t in kernel.transfers
            if t.tensor in ("K", "V") and t.level == "l2" and t.direction == "read"
        )
        kv = 2 * w.kv_heads_ * w.n * w.d * w.element_bytes
        q = w.heads * w.n * w.d * w.element_bytes
        miss = (float(rows[0]["measured_hbm_read_bytes"]) - q - kv) / max(float(requested - kv), 1.0)
        live = float(tiled.params["causal_live_bytes"]) / l2_bytes * 1000
        key = round(live / 50) * 50 if gqa else round(live)
        found.setdefault(int(c["d"]), {}).setdefault(key, []).append((live, min(1.0, max(0.0, miss))))
    out: dict[int, dict[int, float]] = {}
    for d, bins in found.items():
        for points in bins.values():
            at = round(statistics.median(p[0] for p in points))
            out.setdefault(d, {})[at] = round(statistics.median(p[1] for p in points), 4)
    return {d: dict(sorted(points.items())) for d, points in sorted(out.items())}


def _profile() -> Any:
    """The bundled H200 profile: the requests and the live K/V the model counts for a shape
    depend on its SMs and occupancy, not on the curves being fitted."""
    from ..hardware import load_profile

    return load_profile("h200")


def apply(
    data: dict[str, Any], record: Mapping[str, Any], impl: str = "sdpa-flash", fit: Fit | None = None
) -> dict[str, Any]:
    """``data`` (a profile's YAML mapping) with the causal re-read curves of ``fit`` (default:
    ``impl``'s first in :data:`FITS`), fitted from ``record``: ``memory.l2.<prefix>_d*``, the
    prefix of ``impl``'s schedule in ``traffic.l2.CAUSAL_CURVES`` (its several-heads prefix for
    a fit of several heads), and the fit's source."""
    from ..implementations import get
    from ..units import parse

    fit = fit or FITS[impl][0]
    curves_of = CAUSAL_CURVES[get(impl).causal_schedule]
    if fit.gqa:
        prefix = curves_of.gqa
    else:
        prefix = curves_of.prefix if fit.heads == 1 else dict(curves_of.several).get(fit.heads)
    if prefix is None:
        raise ValueError(f"{impl}'s causal schedule has no curves for {'GQA' if fit.gqa else fit.heads} heads")
    l2 = data.setdefault("memory", {}).setdefault("l2", {})
    capacity = l2.get("capacity", {})
    l2_bytes = parse(capacity.get("value") if isinstance(capacity, Mapping) else capacity, "bytes")
    curves = fitted_curves(record, l2_bytes, impl, fit.heads, fit.gqa)
    if not curves:
        return data
    kernel = "FlashAttention-2" if impl == "sdpa-flash" else "cuDNN"
    heads = (
        "GQA grids of 1 to 8 K/V heads, 4 or 8 query heads each, binned by K/V live"
        if fit.gqa
        else "one causal head"
        if fit.heads == 1
        else f"{fit.heads} causal heads"
    )
    dtypes = sorted({str((e.get("case") or {}).get("dtype") or "fp16") for e in record.get("cases", [])})
    placed = (record.get("ncu") or {}).get("placements", 1)
    at = f", the median of {placed} placements of the inputs" if placed > 1 else ""
    for d, points in curves.items():
        l2[f"{prefix}_d{d}"] = {
            "value": points,
            "source": fit.source,
            "note": f"share of a causal {kernel} forward's K/V re-reads served by HBM, by the K/V live "
            f"(per mille of memory.l2.capacity, {l2_bytes / 2**20:.0f} MiB; memmodel.traffic.flash."
            f"causal_live_bytes): {heads}, d = {d}, {' and '.join(dtypes)}, "
            f"{len(points)} lengths; (DRAM read - Q - K - V) / (K, V requested - K - V), Nsight Compute, "
            f"cold L2{at}",
        }
    from .sources import with_record_source

    title = f"memmodel causal re-read references ({kernel}, {heads})"
    return with_record_source(data, fit.source, title, ", ".join(fit.records()), record, fit.command)


#: the references of GQA grids with batch > 1 (``memory.l2.causal_gqa_others``)
GQA_OTHERS_RECORDS = (
    "validation/h200/causal-reuse-3/h200-causal-gqa-ref-2.json.gz",
    "validation/h200/causal-reuse-3/h200-reuse-ref-3.json.gz",
    "validation/h200/causal-reuse-3/h200-causal-ref-d96.json.gz",
)
GQA_OTHERS_SOURCE = "measured-causal-gqa-others"


def _batched_gqa_rows(record: Mapping[str, Any], impl: str) -> list[tuple[Any, float]]:
    """(workload, measured K/V reads) of the record's causal GQA forwards with batch > 1."""
    from ..cases import Case

    rows = []
    for entry in record.get("cases", []):
        c = entry.get("case", {})
        found = [b for b in entry.get("bytes") or [] if b.get("kernel") == "fa2_fwd"]
        heads, kv_heads = c.get("heads"), c.get("kv_heads") or c.get("heads")
        if not found or c.get("impl") != impl or not c.get("causal") or (c.get("batch") or 1) < 2 or kv_heads >= heads:
            continue
        w = Case.from_dict(c).workload()
        q = w.batch * w.heads * w.n * w.d * w.element_bytes
        rows.append((w, float(found[0]["measured_hbm_read_bytes"]) - q))
    return rows


def fitted_gqa_others(records: Any, impl: str = "sdpa-flash") -> dict[int, float]:
    """{head dim: the share of the L2 (3 decimals)} that best predicts the K/V reads of the
    records' causal GQA forwards with batch > 1 at that head dim, as the cap of
    :func:`memmodel.traffic.flash.causal_live_bytes` (least squares in the logarithm, on
    [0.05, 1])."""
    import dataclasses
    import math

    from .wave_drift import golden_min

    base = _profile()
    rows = [row for record in records for row in _batched_gqa_rows(record, impl)]
    out = {}
    for d in sorted({w.d for w, _ in rows}):
        at = [(w, m) for w, m in rows if w.d == d]

        def loss(share: float, at: Any = at, d: int = d) -> float:
            from ..model import compare

            p = dataclasses.replace(base, figures={**base.figures, "memory.l2.causal_gqa_others": ((d, share),)})
            total = 0.0
            for w, measured in at:
                kernel = next(k for k in compare(w, p, impl=impl).tiled.traffic.kernels if k.name == "fa2_fwd")
                kv = sum(
                    int(t.bytes)
                    for t in kernel.transfers
                    if t.tensor in ("K", "V") and t.level == "hbm" and t.direction == "read"
                )
                total += math.log(max(kv, 1) / max(measured, 1.0)) ** 2
            return total

        out[d] = round(golden_min(loss, 0.05, 1.0), 3)
    return out


def apply_gqa_others(data: dict[str, Any], records: Any, impl: str = "sdpa-flash") -> dict[str, Any]:
    """``data`` (a profile's YAML mapping) with ``memory.l2.causal_gqa_others`` fitted from
    ``records`` and its source."""
    shares = fitted_gqa_others(records, impl)
    if not shares:
        return data
    rows = sum(len(_batched_gqa_rows(r, impl)) for r in records)
    record = records[0]
    data.setdefault("memory", {}).setdefault("l2", {})["causal_gqa_others"] = {
        "value": shares,
        "source": GQA_OTHERS_SOURCE,
        "note": "the share of the L2 that other K/V heads add at most to a causal GQA grid's live K/V "
        "(memmodel.traffic.flash.causal_live_bytes), by head dim, with the re-reads across query heads "
        "(memmodel.traffic.flash.cross_head_hbm) counted: fitted to the K/V reads of "
        f"{rows} causal FlashAttention-2 GQA grids with batch 2 and 4, Nsight Compute, cold L2, the "
        "median of 5 placements of the inputs",
    }
    from .sources import with_record_source

    title = "memmodel causal GQA references with batch > 1 (FlashAttention-2)"
    command = (
        "python3 -m memmodel validate --ncu --placements 5 --gpu h200 --cases "
        "validation/cases/h200-causal-gqa-ref-2.txt (and h200-reuse-ref-3.txt)"
    )
    return with_record_source(data, GQA_OTHERS_SOURCE, title, ", ".join(GQA_OTHERS_RECORDS), record, command)
