"""Columns of numbers as text, with numpy: each value written as Python's ``str()`` writes it.

A column becomes a ``(rows, width)`` matrix of ASCII bytes in which NUL bytes stand for
nothing (a shorter value is padded with them, on either side); :func:`join_rows` puts cells
side by side with separators and drops the NULs, so rows of variable-width cells come out
of a few whole-array operations instead of a Python loop over every value.

* :func:`int_text`: decimal integers (``str(int)``), three digits per table look-up;
* :func:`float_text`: the shortest decimal that reads back as the same double, laid out as
  ``repr(float)`` does (``0.0001``, ``1e-05``, ``1234.5``, ``1e+16``). The digits come from
  products exact to about 2**-100 (a double times a power of ten held as two doubles); a value
  whose digits that leaves in doubt (a tie, an interval end on an integer), and every value
  outside the fast path's range (zero, subnormal, huge, tiny, inf, nan), is written by
  ``repr`` itself;
* :func:`table_text`: codes into a small table of strings.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def _table4() -> np.ndarray:
    """Rows of four bytes as uint32: 0-9999 every digit; 10000-19999 a leading group (no
    leading zeros, right-aligned; 0 is "0"); 20000 nothing."""
    full = b"".join(b"%04d" % i for i in range(10000))
    lead = b"".join(b"%4d" % i for i in range(10000)).replace(b" ", b"\0")
    return np.frombuffer(full + lead + b"\0" * 4, dtype=np.uint32).copy()


_GROUPS = _table4()
_NOTHING = 20000


def _digits(values: np.ndarray, width: int) -> np.ndarray:
    """Non-negative int64 ``values`` (each below 10**width) as right-aligned decimal digits."""
    groups = -(-width // 4)
    out = np.empty((len(values), groups), dtype=np.uint32)
    q = values
    for g in range(groups):
        higher = q // 10000
        r = q - 10000 * higher
        if g == 0:
            index = np.where(higher > 0, r, r + 10000)
        else:
            index = np.where(higher > 0, r, np.where(q > 0, r + 10000, _NOTHING))
        out[:, groups - 1 - g] = _GROUPS.take(index)
        q = higher
    return out.view(np.uint8)[:, 4 * groups - width :]


def int_text(values: np.ndarray) -> np.ndarray:
    """Integers as ``str(int)`` writes them (``-`` before negatives)."""
    v = np.asarray(values).astype(np.int64, copy=False)
    if not len(v):
        return np.zeros((0, 1), dtype=np.uint8)
    negative = v < 0
    if negative.any():
        if v.min() == np.iinfo(np.int64).min:  # no int64 holds its magnitude
            return _python_text(v.tolist(), str)
        magnitude = np.abs(v)
        width = len(str(int(magnitude.max())))
        sign = np.where(negative, np.uint8(ord("-")), np.uint8(0))[:, None]
        return np.concatenate([sign, _digits(magnitude, width)], axis=1)
    return _digits(v, len(str(int(v.max()))))


def table_text(codes: np.ndarray, table: Sequence[str]) -> np.ndarray:
    """``table[code]`` for every code (ASCII strings; "" is nothing)."""
    encoded = [s.encode("ascii") for s in table]
    width = max([1, *(len(s) for s in encoded)])
    lut = np.frombuffer(b"".join(s.ljust(width, b"\0") for s in encoded), dtype=np.uint8).reshape(-1, width)
    return lut[np.asarray(codes, dtype=np.intp)]


def _python_text(values: list, convert) -> np.ndarray:  # type: ignore[no-untyped-def,type-arg]
    """What ``convert`` (str, repr) writes for each value, left-aligned."""
    texts = [convert(v).encode("ascii") for v in values]
    width = max([1, *(len(t) for t in texts)])
    return np.frombuffer(b"".join(t.ljust(width, b"\0") for t in texts), dtype=np.uint8).reshape(-1, width)


# ---------------------------------------------------------------------------------------
# Doubles: the shortest round-trip digits, from exact products in pairs of doubles


def _powers() -> tuple[np.ndarray, np.ndarray]:
    """10**k for k in [-27, 27] as hi + lo, each correctly rounded (hi + lo is 10**k to 2**-106)."""
    from fractions import Fraction

    hi, lo = [], []
    for k in range(-27, 28):
        exact = Fraction(10) ** k
        hi.append(float(exact))
        lo.append(float(exact - Fraction(hi[-1])))
    return np.array(hi), np.array(lo)


_P_HI, _P_LO = _powers()
_SPLIT = 134217729.0  # 2**27 + 1: Veltkamp's split of a double into two halves of 26 bits
_P_HI_HI = _P_HI * _SPLIT - (_P_HI * _SPLIT - _P_HI)
_P_HI_LO = _P_HI - _P_HI_HI
_P10_I = np.array([10**j for j in range(18)], dtype=np.int64)
#: a decision closer than this to its boundary (units of the 17th digit; the pairs' error is
#: below 1e-13 of a unit) goes to repr()
_MARGIN = 1e-9
_EXPONENT_BITS = np.uint64(0x7FF0000000000000)


def _product(a: np.ndarray, a_hi: np.ndarray, a_lo: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """a × 10**k as p + lo, p the rounded product (an integer here, 2**53 < p) and lo the rest
    (Dekker's exact product of a and hi, plus a × lo)."""
    i = k + 27
    b, b_hi, b_lo = _P_HI[i], _P_HI_HI[i], _P_HI_LO[i]
    p = a * b
    err = ((a_hi * b_hi - p) + a_hi * b_lo + a_lo * b_hi) + a_lo * b_lo
    return p, err + a * _P_LO[i]


def float_text(values: np.ndarray) -> np.ndarray:
    """Doubles as ``repr(float)`` writes them."""
    x = np.asarray(values, dtype=np.float64)
    n = len(x)
    if not n:
        return np.zeros((0, 1), dtype=np.uint8)
    a = np.abs(x)
    fast = (a >= 1e-11) & (a < 1e42)  # also false for 0, inf, nan
    idx = np.flatnonzero(fast)
    a = a[idx]
    t = a * _SPLIT
    a_hi = t - (t - a)
    a_lo = a - a_hi
    e10 = np.floor(np.log10(a)).astype(np.int64)
    p, lo = _product(a, a_hi, a_lo, 16 - e10)
    for _ in range(2):  # log10 may be one off near powers of ten
        low, high = p < 1e16, p >= 1e17
        if not (low.any() or high.any()):
            break
        e10 = e10 - low + high
        p, lo = _product(a, a_hi, a_lo, 16 - e10)
    k = 16 - e10
    # half the gap to the neighbouring doubles (below: half as wide at a power of two), × 10**k
    bits = a.view(np.uint64) & _EXPONENT_BITS
    half = (bits - np.uint64(53 << 52)).view(np.float64)
    below = np.where(a.view(np.uint64) & np.uint64(0xFFFFFFFFFFFFF) == 0, half / 2, half)
    i = k + 27
    up_frac = lo + (half * _P_HI[i] + half * _P_LO[i])
    down_frac = lo - (below * _P_HI[i] + below * _P_LO[i])
    r = np.rint(lo)
    f = lo - r
    base = p.astype(np.int64)
    nearest = base + r.astype(np.int64)  # the 17-digit decimal nearest to a
    hi = base + np.floor(up_frac).astype(np.int64)
    low_end = base + np.ceil(down_frac).astype(np.int64)
    sure = (
        (p >= 1e16)
        & (p < 1e17)
        & (np.abs(up_frac - np.rint(up_frac)) > _MARGIN)
        & (np.abs(down_frac - np.rint(down_frac)) > _MARGIN)
        & (low_end >= _P10_I[16])  # the interval within one decade: the digits' scale is a's
        & (hi < _P10_I[17])
        & (nearest >= low_end)
        & (nearest <= hi)
    )
    best = nearest.copy()
    shift = np.zeros(len(a), dtype=np.int64)
    active = np.flatnonzero(sure)
    for j in range(1, 17):  # fewer digits while a multiple of 10**j lies in [low_end, hi]
        q = _P10_I[j]
        found = (hi[active] // q) * q >= low_end[active]
        active = active[found]
        if not len(active):
            break
        c17, fa = nearest[active], f[active]
        floor_q = (c17 // q) * q
        r2 = 2 * (c17 - floor_q)
        up = (r2 > q) | ((r2 == q) & (fa > 0))
        sure[active[(r2 == q) & (np.abs(fa) <= _MARGIN)]] = False  # a tie, or too near one
        near = floor_q + q * up
        other = floor_q + q * ~up
        inside = (near >= low_end[active]) & (near <= hi[active])
        best[active] = np.where(inside, near, other)
        shift[active] = j
    sure &= (shift > 0) | (np.abs(f) < 0.5 - _MARGIN)  # 17 digits: the nearest integer is certain
    digits = best // _P10_I[shift]
    last = e10 - 16 + shift  # the exponent of the last digit
    zero = (digits % 10 == 0) & (digits > 0)
    while zero.any():  # a carry to 10**17 leaves trailing zeros
        digits = np.where(zero, digits // 10, digits)
        last = last + zero
        zero = (digits % 10 == 0) & (digits > 0)
    nd = np.searchsorted(_P10_I, digits, side="right")
    point = last + nd  # Python's decpt: the decimal point after this many digits
    ok = np.flatnonzero(sure)
    text, width = _layout(digits[ok], nd[ok], point[ok], np.signbit(x[idx[ok]]))
    slow = np.setdiff1d(np.arange(n), idx[ok], assume_unique=True)
    if len(slow):
        extra = _python_text(x[slow].tolist(), repr)
        width = max(width, extra.shape[1])
    out = np.zeros((n, width), dtype=np.uint8)
    out[idx[ok], : text.shape[1]] = text
    if len(slow):
        out[slow, : extra.shape[1]] = extra
    return out


def _layout(digits: np.ndarray, nd: np.ndarray, point: np.ndarray, neg: np.ndarray) -> tuple[np.ndarray, int]:
    """repr()'s layout of ``digits`` (nd of them, the decimal point after ``point``): fixed
    notation for -4 < point <= 16, else d.ddde±XX; left-aligned rows."""
    if not len(digits):
        return np.zeros((0, 1), dtype=np.uint8), 1
    dm = _digits(digits, 17)  # right-aligned: the digits are dm[:, 17 - nd:]
    fixed = (point > -4) & (point <= 16)
    exponent = point - 1
    key = (
        (neg.astype(np.int64) << 14)
        | (fixed.astype(np.int64) << 13)
        | (nd << 8)
        | np.where(fixed, point, exponent) + 128
    )
    order = np.argsort(key.astype(np.uint16), kind="stable")
    sorted_keys = key[order]
    bounds = np.flatnonzero(np.diff(sorted_keys)) + 1
    starts = np.concatenate([[0], bounds])
    ends = np.concatenate([bounds, [len(order)]])
    pieces = []
    width = 1
    for s, e in zip(starts.tolist(), ends.tolist()):
        rows = order[s:e]
        kv = int(sorted_keys[s])
        sign = b"-" if kv >> 14 & 1 else b""
        is_fixed = kv >> 13 & 1
        count = kv >> 8 & 31
        at = (kv & 255) - 128
        d = dm[rows, 17 - count :]
        parts: list[np.ndarray | bytes] = [sign] if sign else []
        if is_fixed and at > 0:
            if at < count:
                parts += [d[:, :at], b".", d[:, at:]]
            else:
                parts += [d, b"0" * (at - count) + b".0"]
        elif is_fixed:
            parts += [b"0." + b"0" * -at, d]
        else:
            parts += [d[:, :1]] + ([b".", d[:, 1:]] if count > 1 else [])
            parts += [b"e%+03d" % at]
        block = np.concatenate(
            [
                p if isinstance(p, np.ndarray) else np.broadcast_to(np.frombuffer(p, np.uint8), (len(rows), len(p)))
                for p in parts
            ],
            axis=1,
        )
        pieces.append((rows, block))
        width = max(width, block.shape[1])
    out = np.zeros((len(digits), width), dtype=np.uint8)
    for rows, block in pieces:
        out[rows, : block.shape[1]] = block
    return out, width


def join_rows(cells: Sequence[np.ndarray], separator: bytes = b",", end: bytes = b"\n") -> bytearray:
    """Rows of ``cells`` (equal-length matrices from the functions above), separated and ended."""
    n = len(cells[0])
    widths = [c.shape[1] + len(separator) for c in cells]
    widths[-1] += len(end) - len(separator)
    total = sum(widths)
    buffer = bytearray(n * total)
    rows = np.frombuffer(buffer, dtype=np.uint8).reshape(n, total)
    at = 0
    for i, (cell, width) in enumerate(zip(cells, widths)):
        w = cell.shape[1]
        rows[:, at : at + w] = cell
        tail = end if i == len(cells) - 1 else separator
        rows[:, at + w : at + width] = np.frombuffer(tail, dtype=np.uint8)
        at += width
    return buffer.translate(None, b"\0")
