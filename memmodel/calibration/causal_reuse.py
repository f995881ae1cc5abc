"""The profile's ``memory.l2.causal_reuse_d*`` curves from one causal head measured at several lengths.

A causal FlashAttention-2 forward re-reads each head's K/V once per Q block up to the diagonal;
what share of those re-reads misses in L2 depends on the K/V live while they happen, and on the
order the kernel's CTAs walk it, which no microbenchmark of ours reproduced past about 0.8 × the
L2 (the ``causal-down`` family of :mod:`memmodel.calibration.l2_reuse` stays near `5 %` where the
kernel reaches `50 %`). So the curve is measured on the kernel itself, on single-kernel reference
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

from ..traffic.l2 import CAUSAL_CURVE_DIMS as HEAD_DIMS
from ..traffic.l2 import CAUSAL_CURVES

#: per implementation: (source id, record, command that made it); cuDNN's are probe 11's one-head
#: rows (its several-head rows check the one-head-live rule)
FITS = {
    "sdpa-flash": (
        "measured-causal-reuse",
        "validation/h200/causal-reuse/h200-causal-reuse-ref.json",
        "python3 -m memmodel validate --ncu --gpu h200 --cases validation/cases/h200-causal-reuse-ref.txt "
        "--output h200-causal-reuse-ref.json",
    ),
    "sdpa-cudnn": (
        "measured-cudnn-causal-reuse",
        "validation/h200/probe-11/h200-cudnn-causal-probe.json",
        "python3 -m memmodel validate --ncu --gpu h200 --cases validation/cases/h200-cudnn-causal-probe.txt "
        "--output h200-cudnn-causal-probe.json",
    ),
}


def fitted_curves(record: Mapping[str, Any], l2_bytes: float, impl: str = "sdpa-flash") -> dict[int, dict[int, float]]:
    """{head dim: {K/V per mille of the L2: miss share of the re-reads (4 decimals)}} of the
    record's one-head causal forwards of ``impl``."""
    from ..model import compare
    from ..workload import Workload

    out: dict[int, dict[int, float]] = {}
    for entry in record.get("cases", []):
        c = entry.get("case", {})
        rows = [b for b in entry.get("bytes") or [] if b.get("kernel") == "fa2_fwd"]
        one_head = c.get("batch") == 1 and c.get("heads") == 1
        if not rows or c.get("impl") != impl or not c.get("causal") or not one_head or c.get("d") not in HEAD_DIMS:
            continue
        w = Workload(n=int(c["n"]), d=int(c["d"]), causal=True, dtype=str(c.get("dtype", "fp16")))
        tiled = compare(w, _profile(), impl=impl).tiled.traffic
        kernel = next(k for k in tiled.kernels if k.name == "fa2_fwd")
        requested = sum(
            int(t.bytes)
            for t in kernel.transfers
            if t.tensor in ("K", "V") and t.level == "l2" and t.direction == "read"
        )
        kv = 2 * w.n * w.d * w.element_bytes
        q = w.n * w.d * w.element_bytes
        miss = (float(rows[0]["measured_hbm_read_bytes"]) - q - kv) / max(float(requested - kv), 1.0)
        live = float(tiled.params["causal_live_bytes"])
        out.setdefault(int(c["d"]), {})[round(live / l2_bytes * 1000)] = round(min(1.0, max(0.0, miss)), 4)
    return {d: dict(sorted(points.items())) for d, points in sorted(out.items())}


def _profile() -> Any:
    """The bundled H200 profile: the requests and the live K/V the model counts for a shape
    depend on its SMs and occupancy, not on the curves being fitted."""
    from ..hardware import load_profile

    return load_profile("h200")


def apply(data: dict[str, Any], record: Mapping[str, Any], impl: str = "sdpa-flash") -> dict[str, Any]:
    """``data`` (a profile's YAML mapping) with ``impl``'s causal re-read curves
    (``memory.l2.<prefix>_d*``, the prefix of its schedule in ``traffic.l2.CAUSAL_CURVES``) and
    the source in :data:`FITS`."""
    from ..implementations import get
    from ..units import parse

    source, path, command = FITS[impl]
    prefix = CAUSAL_CURVES[get(impl).causal_schedule][0]
    l2 = data.setdefault("memory", {}).setdefault("l2", {})
    capacity = l2.get("capacity", {})
    l2_bytes = parse(capacity.get("value") if isinstance(capacity, Mapping) else capacity, "bytes")
    curves = fitted_curves(record, l2_bytes, impl)
    if not curves:
        return data
    kernel = "FlashAttention-2" if impl == "sdpa-flash" else "cuDNN"
    for d, points in curves.items():
        l2[f"{prefix}_d{d}"] = {
            "value": points,
            "source": source,
            "note": f"share of a causal {kernel} forward's K/V re-reads served by HBM, by the K/V live "
            f"(per mille of memory.l2.capacity, {l2_bytes / 2**20:.0f} MiB; memmodel.traffic.flash."
            f"causal_live_bytes): one causal head, d = {d}, fp16, "
            f"{len(points)} lengths; (DRAM read - Q - K - V) / (K, V requested - K - V), Nsight Compute, cold L2",
        }
    sources = dict(data.get("sources") or {})
    sources[source] = {
        "title": f"memmodel causal re-read references ({kernel}), {record.get('device', 'GPU')} ({path})",
        "kind": "measured",
        "machine": f"lent {record.get('device', 'GPU')} (nvidia-h200), memmodel {record.get('memmodel_version', '?')}",
        "date": str(record.get("started", ""))[:10],
        "command": command,
    }
    data["sources"] = sources
    return data
