"""The checked figures the caveats quote, read from data (``memmodel/data/validated.json``).

``scripts/update_validated.py`` writes the file from the committed validation records (the
signed errors the model makes where each caveat fires) and the bundled H200 profile (the
figures a caveat quotes for a GPU whose profile lacks them); a test regenerates it and fails
when it is stale. No figure of accuracy is typed into the code.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

#: the checked figures of every caveat class
VALIDATED = Path(__file__).with_name("data") / "validated.json"
VALIDATED_SCHEMA = "memmodel.validated/1"

#: figures of the bundled H200 profile that caveats quote for GPUs whose profiles lack them
REFERENCE = {
    "mma_sync_share": "mma.sync's fp16 rate over the dense fp16 peak",
    "one_cta_share": "the rate of an SM left with one CTA of a kernel that keeps two (compute.mma_sync.one_cta_share)",
    "sustained_slowdown": "the longest a forward kernel takes once the clocks fall, over its time before, less 1",
    "sustained_after_min_s": "the shortest busy time after which the clocks fall",
    "sustained_after_max_s": "the longest busy time after which the clocks fall",
    "tile_slowdown_min": "the least a tile other than the default one ran slower (its efficiency's inverse, less 1)",
    "tile_slowdown_max": "the most a tile other than the default one ran slower",
}

#: caveat classes whose errors the data file records: id -> what its errors are of
CHECKED = {
    "causal_curve_fa2": "forward HBM bytes where a causal head sits past the L2's knee (FlashAttention-2's curves)",
    "causal_curve_cudnn": "forward HBM bytes where a causal head sits past the L2's knee (cuDNN's curves)",
    "wave_drift": "forward HBM bytes where the waves' drift adds K/V reads",
    "gqa_row": "forward HBM bytes where a GQA group's row of new data sits in the L2's knee",
    "causal_tail": "forward kernel time where a causal grid fills 2 to 4 waves of CTA slots",
    "causal_backward": "backward HBM bytes where several causal heads are longer than the CTA slots",
    "mea_backward": "backward HBM bytes of the memory-efficient kernel on heads longer than its CTA slots",
    "fa2_uneven": "forward kernel time of FlashAttention-2's causal uneven kernel (packed rows, ragged lengths)",
    "flex_spills": "backward HBM bytes of FlexAttention's masked template at head dims 65 to 128 (its registers spill)",
    "window_band": "forward HBM bytes of FlashAttention-2's sliding window where the K/V its CTAs hold reaches the L2's knee",
}


@lru_cache(maxsize=1)
def _data() -> dict[str, Any]:
    if not VALIDATED.exists():
        return {}
    data = json.loads(VALIDATED.read_text(encoding="utf-8"))
    return data if data.get("schema") == VALIDATED_SCHEMA else {}


def validated() -> dict[str, Any]:
    """The checked figures by caveat class (``{}`` where the data file is absent)."""
    return _data().get("classes", {})


def reference(name: str) -> float | None:
    """A figure of the bundled H200 profile that a caveat quotes (:data:`REFERENCE`), or None."""
    value = _data().get("reference", {}).get(name)
    return float(value) if value is not None else None


def _percent(share: float, digits: int) -> str:
    """``share`` as a signed percentage at ``digits`` decimals, zero unsigned."""
    text = f"{100 * share:+.{digits}f}"
    return (text[1:] if float(text) == 0 else text) + " %"


def _span(stats: dict[str, Any]) -> str:
    """A class's (or group's) statistics in words: its range, median and count of kernels."""
    n = int(stats["count"])
    if n == 1:
        return f"{_percent(stats['median'], 0)}, 1 kernel"
    low, high, median = (_percent(stats[k], d) for k, d in (("min", 0), ("max", 0), ("median", 1)))
    return f"{low} to {high}, median {median}, {n} kernels"


def checked(cls: str) -> str | None:
    """How the model did where caveat class ``cls`` fires, as the data file records it:
    its range and median, by group where it has groups; None where nothing was checked."""
    entry = validated().get(cls)
    if not entry or not entry.get("count"):
        return None
    groups = entry.get("groups") or {}
    if len(groups) > 1:
        return "; ".join(f"{name} {_span(stats)}" for name, stats in groups.items())
    return _span(entry)


def time_range_errors(rate_class: str, timing: str = "kernel") -> dict[str, Any] | None:
    """The measured errors behind a time's range for a profile of ``rate_class``
    (:attr:`memmodel.hardware.Profile.rate_class`) under ``timing`` (``kernel``, ``call``,
    ``queued``, ``graph``): ``low``/``high`` signed errors (predicted / measured - 1, the first and
    last decile), ``count``, ``basis``; None where the file has none.

    A user's timer (``call``, ``queued``, ``graph``): the errors of that mode in the records
    (measured on the H200, with the host figures of the machine each ran on); a profile of
    another class widens its kernel-time range by that mode's spread about its median (the host
    and the GPU err apart: the factors multiply)."""
    found = _data().get("time_ranges", {}).get(rate_class)
    kernel = found if isinstance(found, dict) and "low" in found and "high" in found else None
    if timing == "kernel":
        return kernel
    mode = _data().get("mode_ranges", {}).get(timing)
    if not (isinstance(mode, dict) and "low" in mode and "high" in mode):
        return None
    if rate_class == "measured" or kernel is None:
        return mode
    median = 1.0 + float(mode.get("median", 0.0))
    spread = {k: (1.0 + float(kernel[k])) * (1.0 + float(mode[k])) / median - 1.0 for k in ("low", "high")}
    return {
        **{k: round(v, 4) for k, v in spread.items()},
        "count": mode.get("count", 0),
        "basis": f"{kernel.get('basis', '')}; widened by the {timing} time's spread about its median "
        f"({mode.get('basis', '')})",
    }


def time_range(rate_class: str, seconds: Any, timing: str = "kernel") -> tuple[Any, Any] | None:
    """Where a time predicted at ``seconds`` (a number or an array) under ``timing`` is measured,
    from the first to the last decile of the errors of the rate class (and the timing mode: see
    :func:`time_range_errors`; a prediction p with error e measures p / (1 + e)); None where the
    data file gives no range."""
    errors = time_range_errors(rate_class, timing)
    if errors is None:
        return None
    return seconds / (1.0 + errors["high"]), seconds / (1.0 + errors["low"])
