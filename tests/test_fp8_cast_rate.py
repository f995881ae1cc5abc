"""``kernels.fp8_cast.bandwidth``: the FP8 K/V cast's own rate, fitted from the cast microbenchmark."""

from __future__ import annotations

import dataclasses

import pytest

from memmodel import Workload, compare, load_profile
from memmodel.calibration import fp8_cast

H200 = load_profile("h200")


def line(src, n, rate):
    return {"section": "cast", "from": src, "to": "bfloat16", "elements": n, "bytes": 3 * n, "bytes_per_s": rate}


def test_the_rate_is_the_median_of_the_large_fp8_conversions():
    lines = [
        {"section": "env", "gpu": "NVIDIA H200", "torch": "2.11.0"},
        line("float8_e4m3fn", 1 << 24, 9e12),  # 16M elements: L2-sized, left out
        line("float8_e4m3fn", 1 << 26, 1.0e12),
        line("float8_e5m2", 1 << 26, 1.2e12),
        line("float8_e4m3fn", 1 << 28, 1.1e12),
        line("bfloat16", 1 << 28, 4.0e12),  # the 16-bit copy: a reference, not a conversion
    ]
    assert fp8_cast.fitted(lines) == 1.1e12  # median of 1.0, 1.2, 1.1 TB/s
    data = fp8_cast.apply({"sources": {}}, lines)
    assert data["kernels"]["fp8_cast"]["bandwidth"]["value"] == "1100 GB/s"
    assert "4 TB/s" in data["kernels"]["fp8_cast"]["bandwidth"]["note"]
    assert fp8_cast.fitted([lines[0], lines[1]]) is None


def test_the_kv_cast_kernels_take_the_cast_rate_where_the_profile_has_one():
    w = Workload(n=1, n_kv=16384, batch=16, heads=32, kv_heads=8, d=128, dtype="bf16", kv_dtype="fp8")

    def cast_time(profile):
        t = compare(w, profile, impl="sdpa-cudnn").tiled.timing
        return next(k for k in t.kernels if k.name == "kv_cast_k").terms["hbm"]

    rates = H200.kernel_rates
    slow = dataclasses.replace(H200, kernel_rates=dataclasses.replace(rates, fp8_cast_bytes_per_s=1e12))
    # 16·8·16384·128 elements: 268 MB read (e4m3) + 537 MB written (bf16) = 805 MB at 1 TB/s
    assert cast_time(slow) == pytest.approx(16 * 8 * 16384 * 128 * 3 / 1e12)
    none = dataclasses.replace(H200, kernel_rates=dataclasses.replace(rates, fp8_cast_bytes_per_s=None))
    assert cast_time(none) == pytest.approx(16 * 8 * 16384 * 128 * 3 / rates.elementwise_bytes_per_s)
