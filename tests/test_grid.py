"""One arithmetic path: a grid (a workload whose fields are arrays) gives, row by row, what a
call for that row alone gives."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memmodel import intmath


@settings(max_examples=200, deadline=None)
@given(
    value=st.integers(0, 2**62),
    num=st.integers(0, 2**40),
    den=st.integers(1, 2**40),
)
def test_scaled_floors_alike_for_scalars_and_arrays(value, num, den):
    expected = value * num // den
    if expected >= 2**63:
        with pytest.raises(OverflowError):
            intmath.scaled(np.array([value]), np.array([num]), np.array([den]))
        return
    assert intmath.scaled(value, num, den) == expected
    out = intmath.scaled(np.array([value, 0]), np.array([num, num]), np.array([den, den]))
    assert out.dtype == np.int64 and out.tolist() == [expected, 0]


def test_scaled_floors_where_rounding_would_round_up():
    # 7 · 2 / 3 = 4.67: floored to 4 for one value and for an array (rounding gave 5)
    assert intmath.scaled(7, 2, 3) == 4
    assert intmath.scaled(np.array([7]), 2, 3).tolist() == [4]
    # past 2^53 a float product loses the last bits; the split by den keeps them
    big = 2**61 + 12_345
    assert intmath.scaled(np.array([big]), 3, 4).tolist() == [big * 3 // 4]
