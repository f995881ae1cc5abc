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


@pytest.mark.parametrize(
    ("args", "kwargs", "expected"),
    [
        # fixed decimals, prefix chosen on the value as it is (tables: 999.96 GB/s stays in GB/s)
        ((999.96e9, "B/s"), {}, "1000.0 GB/s"),
        ((3.12e14, "FLOP/s"), {}, "312.0 TFLOP/s"),
        ((12.0, "B/s"), {}, "12.0 B/s"),
        ((8e42, "B"), {}, "8.0e+24 EB"),  # past a million of the largest prefix: scientific
        # significant digits, prefix chosen after rounding (profiles, chart labels, the GPU table)
        ((999.96e9, "B/s", 4), {"significant": True}, "1 TB/s"),
        ((4.8e12, "B/s", 3), {"significant": True}, "4.8 TB/s"),
        ((1954.75, "B", 3), {"significant": True}, "1.95 kB"),  # rounded once (1.955 kB is not rounded again)
        ((2.25e15, "FLOP/s", 3), {"significant": True, "largest": "P"}, "2.25 PFLOP/s"),
        ((1000 * 2**10, "B", 3), {"significant": True, "binary": True}, "1000 KiB"),  # not 1e+03 KiB
        ((228 * 2**10, "B", 3), {"significant": True, "binary": True}, "228 KiB"),
        # times: below the unit down to ns
        ((1.2e-3, "s", 3), {"largest": "", "smallest": "n"}, "1.200 ms"),
        ((2e-12, "s", 3), {"largest": "", "smallest": "n"}, "0.002 ns"),
        # tick labels: no separator, no unit, plain numbers below 1
        ((1e4,), {"digits": 3, "significant": True, "sep": ""}, "10k"),
        ((0.01,), {"digits": 3, "significant": True, "sep": ""}, "0.01"),
        ((999.6e3,), {"digits": 3, "significant": True, "sep": ""}, "1M"),
    ],
)
def test_format_si_is_the_one_prefix_formatter(args, kwargs, expected):
    assert units.format_si(*args, **kwargs) == expected


def test_the_format_helpers_are_format_si():
    assert units.format_bytes(1954.75, digits=3, significant=True) == units.format_si(1954.75, "B", 3, significant=True)
    assert units.format_bytes(37.5, digits=3, significant=True) == "38 B"  # whole bytes under 1 kB
    assert units.quantity(7.686e14, "flops") == "768.6 TFLOP/s"
    assert units.quantity(999.96e9, "bandwidth") == "1 TB/s"
    assert units.quantity(2.5e-6, "time") == "2.5 us"
    for kind in ("bandwidth", "flops", "ops", "bytes", "time"):
        for value in (1.234e-6, 999.96e9, 4.521e12, 3.0):
            assert math.isclose(parse(units.quantity(value, kind), kind), float(f"{value:.4g}"), rel_tol=1e-12)


@pytest.mark.parametrize(("ratio", "expected"), [(0.123, "+12.3%"), (-0.05, "-5.0%"), (0.0, "+0.0%"), (None, "—")])
def test_format_percent(ratio, expected):
    assert units.format_percent(ratio) == expected
