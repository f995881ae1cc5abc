"""``kernels.fp8_cast.bandwidth``: what ATen's conversion of an FP8 tensor to 16 bits moves per second.

A user who keeps an FP8 K/V cache and calls a kernel that takes K and V only in the dtype of Q
casts them first (``k.to(torch.bfloat16)``, :mod:`memmodel.traffic.quant`). That conversion is not
a 16-bit stream: ATen's elementwise copy across dtypes converts element by element. Its rate is
measured by the microbenchmark ``validation/probes/fp8_cast_probe.py`` (record :data:`RECORD`):
``x8.to(dtype)`` of e4m3 and e5m2 tensors to bf16 and fp16, medians of 20 CUDA-event timings. The
figure is the median rate (bytes read + written per second) of the conversions whose tensors are
far past the L2 (2^26 elements and more: 64 MB in, 128 MB out).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from typing import Any

RECORD = "validation/h200/fp8-cast/fp8-cast.jsonl.gz"
COMMAND = "python3 validation/probes/fp8_cast_probe.py fp8-cast.jsonl"
SOURCE = "measured-fp8-cast"
#: the smallest conversion the figure is taken from (elements): its tensors far past the L2
MIN_ELEMENTS = 1 << 26


def rows(lines: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The record's FP8-to-16-bit conversions the figure is taken from."""
    return [
        r
        for r in lines
        if r.get("section") == "cast"
        and str(r.get("from", "")).startswith("float8")
        and int(r.get("elements", 0)) >= MIN_ELEMENTS
        and float(r.get("bytes_per_s", 0)) > 0
    ]


def fitted(lines: Iterable[Mapping[str, Any]]) -> float | None:
    """The median rate, bytes per second (4 significant digits); None without rows."""
    found = rows(lines)
    if not found:
        return None
    return float(f"{statistics.median(float(r['bytes_per_s']) for r in found):.4g}")


def apply(data: dict[str, Any], lines: list[Mapping[str, Any]]) -> dict[str, Any]:
    """``data`` (a profile's YAML mapping) with ``kernels.fp8_cast.bandwidth`` and its source."""
    rate = fitted(lines)
    if rate is None:
        return data
    env = next((r for r in lines if r.get("section") == "env"), {})
    found = rows(lines)
    copies = [float(r["bytes_per_s"]) for r in lines if r.get("section") == "cast" and r.get("from") == r.get("to")]
    against = f"; a 16-bit copy of the same sizes: {max(copies) / 1e12:.3g} TB/s" if copies else ""
    kernels = data.setdefault("kernels", {})
    kernels["fp8_cast"] = {
        "bandwidth": {
            "value": f"{rate / 1e9:.4g} GB/s",
            "source": SOURCE,
            "note": f"x8.to(bf16 or fp16) of e4m3 and e5m2 tensors, bytes read + written per second: the median of "
            f"{len(found)} conversions of 2^26 and 2^28 elements, medians of 20 CUDA-event times{against}: "
            "memmodel.calibration.fp8_cast",
        }
    }
    from .serving import cite

    return cite(data, SOURCE, "memmodel FP8 cast microbenchmark", RECORD, COMMAND, env)
