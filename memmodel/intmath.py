"""Exact integer arithmetic that broadcasts over numpy arrays.

Scalars stay Python ints (exact at any size). Arrays are int64; every product is checked
against a float64 shadow so a result past int64 raises :class:`OverflowError` instead of
wrapping silently.
"""

from __future__ import annotations

import math
from typing import Union

import numpy as np

IntLike = Union[int, np.ndarray]  # noqa: UP007 (runtime alias, Python 3.10)

_LIMIT = float(2**63 - 1)


def as_int(value: object, name: str = "value") -> IntLike:
    """A Python int, or an int64 array (from any integer-valued array)."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "iu":
            return value.astype(np.int64, copy=False)
        if value.dtype.kind == "f" and np.all(np.isfinite(value)) and np.all(value == np.round(value)):
            return value.astype(np.int64)
        raise TypeError(f"{name} must hold integers")
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be an integer, not a bool")
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise TypeError(f"{name} must be an integer, got {value!r}")


def is_array(*values: object) -> bool:
    return any(isinstance(v, np.ndarray) for v in values)


def mul(*factors: IntLike) -> IntLike:
    """Product of integers; exact for scalars, overflow-checked int64 for arrays.

    Arrays: the scalar factors are multiplied first, as Python ints, and the arrays by their
    product once (int64 products wrap modulo 2^64, so any order gives the same result where
    the whole fits, which the bound or the shadow checks)."""
    if not is_array(*factors):
        out = 1
        for f in factors:
            out *= int(f)
        return out
    arrays = [np.asarray(f, dtype=np.int64) for f in factors if isinstance(f, np.ndarray)]
    scalar = 1
    for f in factors:
        if not isinstance(f, np.ndarray):
            scalar *= int(f)
    out_arr = arrays[0]
    for a in arrays[1:]:
        out_arr = out_arr * a
    if scalar != 1 or len(arrays) == 1:  # (a new array, never the one given)
        out_arr = out_arr * scalar
    if _bound(arrays, mul=True) * abs(scalar) < _EXACT_LIMIT:  # no product can reach 2^63: skip the shadow
        return out_arr
    shadow = np.ones((), dtype=np.float64)
    for f in factors:
        shadow = shadow * np.asarray(f, dtype=np.float64)
    if np.any(np.abs(shadow) >= _LIMIT):
        raise OverflowError("a byte or FLOP count exceeds int64 (9.2e18); use smaller sizes or scalar inputs")
    return out_arr


def add(*terms: IntLike) -> IntLike:
    """Sum of integers; exact for scalars, overflow-checked int64 for arrays (the scalar terms
    added first, as Python ints, as :func:`mul` multiplies them)."""
    if not is_array(*terms):
        return sum(int(t) for t in terms)
    arrays = [np.asarray(t, dtype=np.int64) for t in terms if isinstance(t, np.ndarray)]
    scalars = [int(t) for t in terms if not isinstance(t, np.ndarray)]
    if _bound(arrays, mul=False) + sum(abs(s) for s in scalars) >= _EXACT_LIMIT:
        # a sum could reach 2^63: check with a float shadow
        shadow = sum(np.asarray(t, dtype=np.float64) for t in terms)
        if np.any(np.abs(shadow) >= _LIMIT):
            raise OverflowError("a byte or FLOP count exceeds int64 (9.2e18); use smaller sizes or scalar inputs")
    out = arrays[0]
    for a in arrays[1:]:
        out = out + a
    scalar = sum(scalars)
    if scalar or len(arrays) == 1:  # (a new array, never the one given)
        out = out + scalar
    return out


_EXACT_LIMIT = 2**63 - 1


def _bound(arrays: list[np.ndarray], *, mul: bool) -> int:
    """An exact upper bound of |product| (or |sum|) of the arrays' elements, from a bound of
    each array's magnitudes (read once per array, however often it is given)."""
    seen: dict[int, int] = {}
    out = 1 if mul else 0
    for a in arrays:
        m = seen.get(id(a))
        if m is None:
            m = seen[id(a)] = _magnitude(a)
        out = out * m if mul else out + m
    return out


def _magnitude(a: np.ndarray) -> int:
    """An upper bound of |x| over the elements x of ``a``: where none is negative (the sign bit
    set in none), their bitwise or, at least the largest and less than twice it, in one pass;
    else the largest magnitude, from the largest and the smallest element."""
    if not a.size:
        return 0
    ored = int(np.bitwise_or.reduce(a, axis=None))
    return ored if ored >= 0 else max(int(a.max()), -int(a.min()))


def floor_div(a: IntLike, b: IntLike) -> IntLike:
    if not is_array(a, b):
        return int(a) // int(b)
    return np.asarray(a, dtype=np.int64) // np.asarray(b, dtype=np.int64)


def gcd(a: IntLike, b: IntLike) -> IntLike:
    if not is_array(a, b):
        return math.gcd(int(a), int(b))
    return np.gcd(np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64))


def ceil_div(a: IntLike, b: IntLike) -> IntLike:
    if not is_array(a, b):
        return -(-int(a) // int(b))
    return -(-np.asarray(a, dtype=np.int64) // np.asarray(b, dtype=np.int64))


def scaled(value: IntLike, num: IntLike, den: IntLike) -> IntLike:
    """⌊value · num / den⌋ (non-negative integers, den ≥ 1), floored alike for scalars and arrays.

    Arrays are exact in int64 where the result fits: ``value`` is split into a quotient and
    a remainder by ``den`` first (q·num + ⌊r·num / den⌋), so the product value · num never
    has to fit; where r·num could pass int64 the elements are computed as Python ints.
    """
    if not is_array(value, num, den):
        return int(value) * int(num) // int(den)
    if num is den and (np.ndim(value) or np.ndim(num)):  # ⌊value · n / n⌋: the value (all pairs visited)
        return add(np.broadcast_arrays(np.asarray(value, dtype=np.int64), np.asarray(num, dtype=np.int64))[0])
    v, n, d = np.broadcast_arrays(*(np.asarray(x, dtype=np.int64) for x in (value, num, den)))
    q, r = np.divmod(v, d)
    if _bound([r, n], mul=True) >= _EXACT_LIMIT:  # r·num could wrap: exact, element by element
        exact = [
            int(a) * int(b) // int(c) for a, b, c in zip(v.ravel().tolist(), n.ravel().tolist(), d.ravel().tolist())
        ]
        if any(x > _EXACT_LIMIT for x in exact):
            raise OverflowError("a byte or FLOP count exceeds int64 (9.2e18); use smaller sizes or scalar inputs")
        return np.asarray(exact, dtype=np.int64).reshape(v.shape)
    return add(mul(q, n), r * n // d)


def minimum(a: IntLike, b: IntLike) -> IntLike:
    if not is_array(a, b):
        return min(int(a), int(b))
    return np.minimum(np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64))


def maximum(a: IntLike, b: IntLike) -> IntLike:
    if not is_array(a, b):
        return max(int(a), int(b))
    return np.maximum(np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64))


def kept(value: IntLike) -> IntLike:
    """``value`` made read-only where it is an array: for results computed once and handed
    out again (so that no caller changes them for the next)."""
    if isinstance(value, np.ndarray):
        value.flags.writeable = False
    return value


def to_float(value: IntLike) -> float | np.ndarray:
    return float(value) if not isinstance(value, np.ndarray) else value.astype(np.float64)
