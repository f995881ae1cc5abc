"""Parse and format physical quantities as people write them.

One parser for every number in a hardware profile: ``"80 GB"``, ``"2.0 TB/s"``,
``"200 ns"``, ``"192 KiB"``, ``"312 TFLOP/s"``, ``"1410 MHz"``.

SI prefixes are powers of 1000 (``kB``/``KB``, ``MB``, ``GB``, ``TB``, ``PB``), binary
prefixes powers of 1024 (``KiB``, ``MiB``, ``GiB``, ``TiB``); ``KB`` is read as SI, as
the prefix says, whatever vendors mean by it. Each value is parsed for a *kind*, and a
unit of another kind is refused: a bandwidth written as ``"2 TB"`` is an error, not a
bandwidth of 2e12 bytes per second.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Literal

Kind = Literal["bytes", "bandwidth", "time", "flops", "ops", "frequency", "count", "ratio"]

_SI = {"": 1, "k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15}
_BIN = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50}
_TIME = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ns": 1e-9, "ps": 1e-12}

_NUMBER = r"(?P<num>[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)"
_RE = re.compile(rf"^\s*{_NUMBER}\s*(?P<unit>\S*(?:\s*/\s*s)?)\s*$")

#: Units accepted for each kind, for error messages.
EXAMPLES: dict[str, str] = {
    "bytes": "a size such as '80 GB', '40 MiB' or '192 KiB'",
    "bandwidth": "a bandwidth such as '2.0 TB/s' or '900 GB/s'",
    "time": "a time such as '200 ns', '4 us' or '1.5 ms'",
    "flops": "a rate such as '312 TFLOP/s' or '19.5 TFLOPS'",
    "ops": "a rate such as '3.9 Top/s' or '2.4e12 op/s'",
    "frequency": "a frequency such as '1410 MHz' or '1.98 GHz'",
    "count": "a whole number such as 108",
    "ratio": "a ratio such as 0.45 or '45 %'",
}


class UnitError(ValueError):
    """A value that is not a quantity of the kind asked for."""


def _prefixed(unit: str, base: str, *, binary: bool) -> float | None:
    """Scale of ``unit`` if it is ``base`` with an SI (or binary) prefix, else None."""
    if not unit.endswith(base):
        return None
    prefix = unit[: len(unit) - len(base)]
    if prefix in _SI:
        return float(_SI[prefix])
    if binary and prefix in _BIN:
        return float(_BIN[prefix])
    return None


def _scale(unit: str, kind: Kind) -> float | None:
    unit = re.sub(r"\s+", "", unit)
    if kind == "count":
        return 1.0 if unit == "" else None
    if kind == "ratio":
        return {"": 1.0, "%": 0.01}.get(unit)
    if kind == "time":
        return _TIME.get(unit)
    if kind == "bytes":
        return _prefixed(unit, "B", binary=True)
    if kind == "bandwidth":
        return _prefixed(unit[:-2], "B", binary=True) if unit.endswith("/s") else None
    if kind == "frequency":
        return _prefixed(unit, "Hz", binary=False)
    if kind == "flops":
        for base in ("FLOP/s", "FLOPS", "flop/s"):
            scale = _prefixed(unit, base, binary=False)
            if scale is not None:
                return scale
        return None
    if kind == "ops":
        for base in ("op/s", "ops/s", "OP/s", "OPS"):
            scale = _prefixed(unit, base, binary=False)
            if scale is not None:
                return scale
        return None
    raise ValueError(f"unknown kind {kind!r}")  # pragma: no cover - programming error


def parse(value: object, kind: Kind) -> float:
    """Return ``value`` in base units (bytes, bytes/s, s, FLOP/s, op/s, Hz, count).

    Numbers without a unit are accepted only for ``count`` and ``ratio``. The result is finite and
    strictly positive; anything else raises :class:`UnitError` with a message that says
    what is accepted.
    """
    shown = _show(value)
    if isinstance(value, bool):
        raise UnitError(f"expected {EXAMPLES[kind]}, got {shown}")
    if isinstance(value, (int, float)):
        if kind not in ("count", "ratio"):
            raise UnitError(f"{shown} has no unit; expected {EXAMPLES[kind]}")
        if kind == "count" and isinstance(value, float) and not value.is_integer():
            raise UnitError(f"expected {EXAMPLES[kind]}, got {shown}")
        try:
            number, scale = float(value), 1.0
        except OverflowError:
            raise UnitError(f"{shown} is too large; expected {EXAMPLES[kind]}") from None
    elif isinstance(value, str):
        match = _RE.match(value)
        if not match:
            raise UnitError(f"cannot read {shown}; expected {EXAMPLES[kind]}")
        found = _scale(match["unit"], kind)
        if found is None:
            raise UnitError(f"unit {_show(match['unit'] or '(none)')} in {shown} is not {EXAMPLES[kind]}")
        number, scale = float(match["num"]), found
    else:
        raise UnitError(f"expected {EXAMPLES[kind]}, got {type(value).__name__}")
    result = number * scale
    if not math.isfinite(result) or result <= 0:
        raise UnitError(f"{shown} must be a positive, finite quantity")
    if kind == "count" and not float(result).is_integer():
        raise UnitError(f"expected {EXAMPLES[kind]}, got {shown}")
    return result


def _show(value: object, limit: int = 60) -> str:
    """``repr(value)``, cut short: messages quote what was written, not 5000 digits of it."""
    try:
        text = repr(value)
    except ValueError:  # an int past Python's 4300-digit str() limit
        return "a number too large to print"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def format_bytes(n: float, *, binary: bool = False, digits: int = 1) -> str:
    """``318_767_104 -> '318.8 MB'`` (decimal by default, as vendors write)."""
    base, units = (
        (1024.0, ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"])
        if binary
        else (
            1000.0,
            ["B", "kB", "MB", "GB", "TB", "PB", "EB"],
        )
    )
    value = float(n)
    for unit in units:
        if abs(value) < base or unit == units[-1]:
            return f"{value:.0f} {unit}" if unit == "B" else f"{_number(value, digits)} {unit}"
        value /= base
    raise AssertionError("unreachable")  # pragma: no cover


def _number(value: float, digits: int) -> str:
    """Fixed point, or scientific past a million of the largest unit: a float printed in full
    shows digits it does not have (``8.0e42``, not ``7999999999999999121145662139227059385270272.0``)."""
    if abs(value) >= 1e6:
        return f"{value:.{max(digits, 1)}e}"
    return f"{value:.{digits}f}"


def _format_si(value: float, unit: str, digits: int) -> str:
    for prefix, scale in (("E", 1e18), ("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{_number(value / scale, digits)} {prefix}{unit}"
    return f"{value:.{digits}f} {unit}"


def format_rate(value: float, unit: str = "FLOP/s", digits: int = 1) -> str:
    """``3.12e14 -> '312.0 TFLOP/s'``."""
    return _format_si(value, unit, digits)


def format_count(value: float, unit: str = "FLOP", digits: int = 1) -> str:
    """``2.58e10 -> '25.8 GFLOP'``."""
    return _format_si(value, unit, digits)


def format_bandwidth(value: float, digits: int = 1) -> str:
    """``2.039e12 -> '2.0 TB/s'``."""
    return _format_si(value, "B/s", digits)


def format_time(seconds: float, digits: int = 3) -> str:
    """``1.234e-3 -> '1.234 ms'``."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(seconds) >= scale:
            return f"{_number(seconds / scale, digits)} {unit}"
    return f"{seconds / 1e-9:.{digits}f} ns"


_KIND_UNITS: dict[str, str] = {"bandwidth": "B/s", "flops": "FLOP/s", "ops": "op/s", "frequency": "Hz", "bytes": "B"}


def quantity(value: float, kind: Kind, digits: int = 4) -> str | float:
    """``value`` (base units) as a profile writes it, to ``digits`` significant digits, that
    :func:`parse` reads back: ``7.686e14, "flops" -> '768.6 TFLOP/s'``; counts and ratios
    as numbers."""
    if kind in ("count", "ratio"):
        return float(f"{value:.{digits}g}")
    if kind == "time":
        for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)):
            if abs(value) >= scale or unit == "ns":
                return f"{float(f'{value / scale:.{digits}g}'):g} {unit}"
    unit = _KIND_UNITS[kind]
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3), ("", 1.0)):
        if abs(value) >= scale or prefix == "":
            return f"{float(f'{value / scale:.{digits}g}'):g} {prefix}{unit}"
    raise AssertionError("unreachable")  # pragma: no cover


def significant(value: float, formatter: Callable[..., str], figures: int = 3) -> str:
    """``value`` through ``formatter(value, digits=...)`` to ``figures`` significant digits,
    trailing zeros dropped: 2.25 PFLOP/s, 312 TFLOP/s, 4.8 TB/s, 80 GB (not 2 PFLOP/s)."""
    text = formatter(value, digits=figures)
    number, _, unit = text.partition(" ")
    try:
        mantissa = float(number)
    except ValueError:
        return text
    if mantissa == 0 or "e" in number.lower():
        return text
    magnitude = math.floor(math.log10(abs(mantissa)))
    decimals = max(0, figures - 1 - magnitude)
    shown = f"{round(mantissa, decimals):.{decimals}f}"
    if "." in shown:
        shown = shown.rstrip("0").rstrip(".")
    return f"{shown} {unit}".strip()
