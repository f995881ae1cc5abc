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
from typing import Literal

Kind = Literal["bytes", "bandwidth", "time", "flops", "ops", "frequency", "power", "count", "ratio"]

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
    "power": "a power such as '700 W' or '1.2 kW'",
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
    if kind == "power":
        return _prefixed(unit, "W", binary=False)
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


#: Prefixes from the largest down, past the unit to nano (for times); binary ones for sizes.
_DECIMAL = (
    ("E", 1e18),
    ("P", 1e15),
    ("T", 1e12),
    ("G", 1e9),
    ("M", 1e6),
    ("k", 1e3),
    ("", 1.0),
    ("m", 1e-3),
    ("u", 1e-6),
    ("n", 1e-9),
    ("p", 1e-12),
)
_BINARY = (
    ("Ei", 2.0**60),
    ("Pi", 2.0**50),
    ("Ti", 2.0**40),
    ("Gi", 2.0**30),
    ("Mi", 2.0**20),
    ("Ki", 2.0**10),
    ("", 1.0),
)


def format_si(
    value: float,
    unit: str = "",
    digits: int = 1,
    *,
    significant: bool = False,
    binary: bool = False,
    largest: str = "E",
    smallest: str = "",
    sep: str = " ",
) -> str:
    """The one formatter of a quantity with a prefix: ``value`` (in base units) scaled by the
    largest prefix, from ``largest`` down to ``smallest``, that leaves at least 1 (the
    smallest takes every smaller value): ``3.12e14, "FLOP/s" -> '312.0 TFLOP/s'``.

    ``digits`` decimals by default; with ``significant``, ``digits`` significant digits with
    trailing zeros dropped, and the prefix chosen after rounding (``999.96e9, "B/s", 4,
    significant=True -> '1 TB/s'``): as profiles, tables of GPUs and chart labels write
    numbers, and :func:`parse` reads them back. ``binary``: Ki, Mi, Gi... (powers of 1024).
    (``largest`` names the prefix without its ``i``.) ``smallest="n"`` goes below the unit (m, u, n: times). ``sep`` goes between the number and
    the prefix; nothing trails when both prefix and unit are empty. A number past a million of
    the largest prefix prints in scientific notation (never 5000 digits of a float).
    """
    table = _BINARY if binary else _DECIMAL
    names = [name.rstrip("i") for name, _ in table]
    value = float(value)
    for prefix, scale in table[names.index(largest) : names.index(smallest) + 1]:
        mantissa = value / scale
        text = _significant(mantissa, digits) if significant else _number(mantissa, digits)
        if prefix == smallest or abs(float(text) if significant else mantissa) >= 1:
            return f"{text}{sep}{prefix}{unit}".rstrip()
    raise AssertionError("unreachable")  # pragma: no cover


def _significant(value: float, digits: int) -> str:
    """``digits`` significant digits, trailing zeros dropped (``%g``); a whole number under a
    million written out (``1020``, not ``1.02e+03``: a binary prefix leaves up to 1023)."""
    text = f"{value:.{digits}g}"
    return f"{float(text):g}" if "e+" in text else text


def _number(value: float, digits: int) -> str:
    """Fixed point, or scientific past a million of the largest unit: a float printed in full
    shows digits it does not have (``8.0e42``, not ``7999999999999999121145662139227059385270272.0``)."""
    if abs(value) >= 1e6:
        return f"{value:.{max(digits, 1)}e}"
    return f"{value:.{digits}f}"


def format_bytes(n: float, *, binary: bool = False, digits: int = 1, significant: bool = False) -> str:
    """``318_767_104 -> '318.8 MB'`` (decimal by default, as vendors write; ``binary``: KiB,
    MiB...); below 1 kB (1 KiB) whole bytes. ``significant``: as :func:`format_si`'s."""
    if abs(float(n)) < (1024.0 if binary else 1000.0):
        return f"{float(n):.0f} B"
    return format_si(n, "B", digits, significant=significant, binary=binary)


def format_rate(value: float, unit: str = "FLOP/s", digits: int = 1, *, significant: bool = False) -> str:
    """``3.12e14 -> '312.0 TFLOP/s'``."""
    return format_si(value, unit, digits, significant=significant)


def format_count(value: float, unit: str = "FLOP", digits: int = 1) -> str:
    """``2.58e10 -> '25.8 GFLOP'``."""
    return format_si(value, unit, digits)


def format_bandwidth(value: float, digits: int = 1, *, significant: bool = False) -> str:
    """``2.039e12 -> '2.0 TB/s'``."""
    return format_si(value, "B/s", digits, significant=significant)


def format_time(seconds: float, digits: int = 3) -> str:
    """``1.234e-3 -> '1.234 ms'`` (s, ms, us or ns)."""
    return format_si(seconds, "s", digits, largest="", smallest="n")


def format_time_range(seconds: float, low: float | None, high: float | None, digits: int = 3) -> str:
    """A time with the range it is likely measured in, the range in the time's unit to two
    significant digits: ``3.75e-3, 3.4e-3, 4.1e-3 -> '3.750 ms (3.4–4.1)'``; the time alone
    where there is no range."""
    text = format_time(seconds, digits)
    if low is None or high is None:
        return text
    prefix = text.split()[-1].removesuffix("s")
    scale = dict(_DECIMAL).get(prefix, 1.0)
    return f"{text} ({_significant(low / scale, 2)}–{_significant(high / scale, 2)})"


def format_percent(ratio: float | None, digits: int = 1) -> str:
    """A signed relative error or change as a percentage with its sign (0.123 reads plus 12.3
    per cent, ``digits`` decimals); ``'—'`` for None (not known)."""
    return "—" if ratio is None else f"{ratio * 100:+.{digits}f}%"


_KIND_UNITS: dict[str, str] = {
    "bandwidth": "B/s",
    "flops": "FLOP/s",
    "ops": "op/s",
    "frequency": "Hz",
    "power": "W",
    "bytes": "B",
}


def quantity(value: float, kind: Kind, digits: int = 4) -> str | float:
    """``value`` (base units) as a profile writes it, to ``digits`` significant digits, that
    :func:`parse` reads back: ``7.686e14, "flops" -> '768.6 TFLOP/s'``; counts and ratios
    as numbers."""
    if kind in ("count", "ratio"):
        return float(f"{value:.{digits}g}")
    if kind == "time":
        return format_si(value, "s", digits, significant=True, largest="", smallest="n")
    return format_si(value, _KIND_UNITS[kind], digits, significant=True, largest="P")
