from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memmodel import units
from memmodel.units import UnitError, parse


@pytest.mark.parametrize(
    ("text", "kind", "expected"),
    [
        ("80 GB", "bytes", 80e9),
        ("40 MiB", "bytes", 40 * 2**20),
        ("192 KiB", "bytes", 192 * 1024),
        ("192 KB", "bytes", 192_000),  # SI: K is 1000, whatever vendors mean
        ("192kB", "bytes", 192_000),
        ("2.0 TB/s", "bandwidth", 2.0e12),
        ("2039 GB/s", "bandwidth", 2.039e12),
        ("900 GiB/s", "bandwidth", 900 * 2**30),
        ("200 ns", "time", 200e-9),
        ("4 us", "time", 4e-6),
        ("4 µs", "time", 4e-6),
        ("1.5 ms", "time", 1.5e-3),
        ("312 TFLOP/s", "flops", 312e12),
        ("19.5 TFLOPS", "flops", 19.5e12),
        ("3.9 Top/s", "ops", 3.9e12),
        ("1410 MHz", "frequency", 1.41e9),
        (108, "count", 108),
        ("108", "count", 108),
        ("1e3 GB", "bytes", 1e12),
    ],
)
def test_parse_accepts_units_as_people_write_them(text, kind, expected):
    assert parse(text, kind) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    ("value", "kind", "fragment"),
    [
        ("2 TB", "bandwidth", "is not a bandwidth"),  # a size is not a bandwidth
        ("80", "bytes", "is not a size"),
        (80, "bytes", "has no unit"),
        ("0 GB", "bytes", "positive"),
        ("-3 GB/s", "bandwidth", "positive"),
        ("nan GB", "bytes", "cannot read"),
        ("inf TB/s", "bandwidth", "cannot read"),
        ("fast", "bandwidth", "cannot read"),
        ("", "time", "cannot read"),
        (None, "time", "got NoneType"),
        (True, "count", "got True"),
        (1.5, "count", "whole number"),
        ("200 ms/s", "time", "is not a time"),
        ("1e400 GB", "bytes", "positive, finite"),
    ],
)
def test_parse_refuses_with_a_message_that_says_what_is_accepted(value, kind, fragment):
    with pytest.raises(UnitError, match=fragment):
        parse(value, kind)


@given(st.floats(min_value=1e-3, max_value=1e6, allow_nan=False), st.sampled_from(["", "K", "M", "G", "T"]))
def test_si_prefixes_are_powers_of_1000(number, prefix):
    scale = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}[prefix]
    assert math.isclose(parse(f"{number!r} {prefix}B", "bytes"), number * scale, rel_tol=1e-12)


def test_formatting():
    assert units.format_bytes(318_767_104) == "318.8 MB"  # 318767104 / 1e6
    assert units.format_bytes(512) == "512 B"
    assert units.format_bytes(40 * 2**20, binary=True, digits=0) == "40 MiB"
    assert units.format_time(1.2345e-3) == "1.234 ms" or units.format_time(1.2345e-3) == "1.235 ms"
    assert units.format_time(5e-9) == "5.000 ns"
    assert units.format_rate(3.12e14) == "312.0 TFLOP/s"
    assert units.format_count(2.58e10) == "25.8 GFLOP"
    assert units.format_bandwidth(2.039e12) == "2.0 TB/s"
