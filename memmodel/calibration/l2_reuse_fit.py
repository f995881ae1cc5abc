"""The profile's ``memory.l2.reuse`` curve from the L2 reuse microbenchmark's record.

Only the simple families are fitted (one head's K/V read by all CTAs in N waves, in
lockstep): ``waves-*``, ``half``, ``parity``, ``stream`` and ``tile-*``. Each point's
cross-wave miss share is (DRAM read / unique − 1) / (waves − 1); the curve is the median over
the families at each footprint (per mille of the L2). The causal, GQA, ``heads-*`` and
``dq-atomic`` families are held out: they check the schedule model (:mod:`memmodel.traffic.reuse`).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

SOURCE = "measured-l2-reuse"
RECORD = "validation/h200/l2-reuse/l2_reuse.json.gz"


def _simple(family: str) -> bool:
    return family.startswith(("waves-", "tile-")) or family in ("half", "parity", "stream")


def fitted_points(result: Mapping[str, Any]) -> dict[int, float]:
    """{footprint per mille of the L2: miss share of a cross-wave re-read} (2 decimals)."""
    by_factor: dict[int, list[float]] = {}
    for pt in result.get("points", []):
        if not _simple(pt["family"]) or pt.get("order", "full") != "full":
            continue
        waves = float(pt.get("waves", 2.0))
        if waves <= 1.0:
            continue  # one wave: no cross-wave re-read to learn from
        miss = (float(pt["hbm_over_unique"]) - 1.0) / (waves - 1.0)
        by_factor.setdefault(round(float(pt["footprint_factor"]) * 1000), []).append(min(1.0, max(0.0, miss)))
    return {k: round(statistics.median(v), 2) for k, v in sorted(by_factor.items())}


def apply(data: dict[str, Any], result: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` (a profile's YAML mapping) with ``memory.l2.reuse`` and its source."""
    points = fitted_points(result)
    if not points:
        return data
    dev = result.get("device", {})
    families = sorted({p["family"] for p in result.get("points", []) if _simple(p["family"])})
    l2 = data.setdefault("memory", {}).setdefault("l2", {})
    l2["reuse"] = {
        "value": points,
        "source": SOURCE,
        "note": "share of a cross-wave re-read served by HBM, by the footprint live across it (per mille of "
        f"memory.l2.capacity; {dev.get('l2_bytes', 0) / 2**20:.0f} MiB on the device): median of "
        f"(DRAM read / unique - 1) / (waves - 1) over {', '.join(families)} (Nsight Compute, cold L2); "
        "causal, GQA, heads-N and dq-atomic held out to check the model",
    }
    sources = dict(data.get("sources") or {})
    sources[SOURCE] = {
        "title": f"memmodel L2 reuse microbenchmark, {dev.get('name', 'GPU')} ({RECORD})",
        "kind": "measured",
        "machine": f"{dev.get('name', 'GPU')} ({dev.get('sm_count', '?')} SMs, CUDA {dev.get('cuda_version', '?')}, "
        f"torch {dev.get('torch_version', '?')}, Triton {dev.get('triton_version', '?')})",
        "date": str(result.get("date", "")),
        "command": str(result.get("command", "")),
    }
    data["sources"] = sources
    return data
