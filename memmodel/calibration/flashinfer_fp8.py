"""``implementations.flashinfer.kv_convert_flops``: what FlashInfer's CUDA-core decode spends converting
an FP8 K/V cache.

Its decode kernel loads a K/V tile into shared memory at a byte an element, and every thread then
converts the elements it reads for its own query head (``cast_load`` in ``compute_qk`` and
``update_local_state``, ``include/flashinfer/attention/decode.cuh``): once an element for each query
head of the group. A probe (``validation/cases/h200-fp8-kv-probe.txt``, record :data:`RECORD`;
predictions committed first) measured its decodes over FP8 and bf16 caches of the same shapes,
groups 1 to 8, d 64 and 128: a group of 1 runs faster over FP8 (half the bytes), groups of 4 and 8
about a quarter to a half slower (the conversions). The figure is that cost, FP32-pipe FLOPs an
element converted for one query head, at the kernel's CUDA-core efficiency like its dot products,
fitted to the probe's FP8 decodes (the squared logarithm of predicted over measured kernel time,
least), the other figures of the profile as built.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

RECORD = "validation/h200/fp8-kv-probe/fp8-kv-probe.json.gz"
COMMAND = (
    "python3 -m memmodel validate --gpu h200 --no-host-probe --cases validation/cases/h200-fp8-kv-probe.txt "
    "--output fp8-kv-probe.json.gz"
)
SOURCE = "measured-flashinfer-fp8"
#: the search range, FLOPs an element for one query head
RANGE = (1e-3, 40.0)


def rows(record: Mapping[str, Any]) -> list[tuple[str, float]]:
    """(case spec, the decode kernel's measured seconds) of the record's decodes over an FP8 cache."""
    from ..cases import Case

    out = []
    for c in record.get("cases", []):
        timing = c.get("timing") or {}
        dec = [
            k for k in timing.get("profiled_kernels", []) if "BatchDecodeWithPagedKVCacheKernel" in str(k.get("name"))
        ]
        if c.get("status") != "ok" or not dec or not c["case"].get("kv_dtype"):
            continue
        out.append((Case.from_dict(c["case"]).spec(), float(dec[0]["time_s"])))
    return out


def fit(record: Mapping[str, Any], profile: Any) -> float | None:
    """The figure, fitted to the record's FP8 decodes; None where it has none."""
    from .serving import _golden, _planned, predicted

    found = rows(record)
    if not found:
        return None
    base = profile.with_implementation_figures("flashinfer", kv_convert_flops=None)
    plans = {spec: _planned(spec, "", base) for spec, _ in found}

    def loss(x: float) -> float:
        p = base.with_implementation_figures("flashinfer", kv_convert_flops=math.exp(x))
        return sum(math.log(predicted(plans[s], "flashinfer_decode", p) / m) ** 2 for s, m in found)

    x = _golden(loss, math.log(RANGE[0]), math.log(RANGE[1]))
    return float(f"{math.exp(x):.4g}")


def apply(data: dict[str, Any], record: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` (a profile's YAML mapping) with ``implementations.flashinfer.kv_convert_flops`` fitted
    from ``record`` and its source."""
    from ..hardware.parse import parse_profile
    from .serving import cite

    value = fit(record, parse_profile(data, "<profile being built>"))
    if value is None:
        return data
    figures = (data.setdefault("implementations", {})).setdefault("flashinfer", {})
    figures["kv_convert_flops"] = {
        "value": value,
        "source": SOURCE,
        "note": "FP32-pipe FLOPs FlashInfer's CUDA-core decode spends converting one element of an FP8 K/V cache for "
        "one query head (every thread of the group converts what it reads), at its CUDA-core efficiency; fitted to "
        f"{len(rows(record))} decodes over e4m3 caches (groups 1-8, d 64 and 128): {__name__}",
    }
    env = {"gpu": str(record.get("device") or "NVIDIA H200"), "torch": "2.11.0+cu130"}
    software = ", FlashInfer 0.7.2.post1"
    return cite(data, SOURCE, "memmodel FlashInfer FP8 cache probe", RECORD, COMMAND, env, software, date="2026-12-04")
