"""tests/sims/causal_tail_sim.py: the list schedule it runs against the model's tail estimate."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memmodel import timing

from .sims import causal_tail_sim as sim


def test_list_schedule_by_hand():
    # one SM of one slot runs 1, 2, 3 back to back: 6, balanced 6
    assert sim.listed_factor(np.array([1.0, 2.0, 3.0]), 1, 1, 1.0) == pytest.approx(1.0)
    # two SMs of one slot: 1 and 1 first, the 4 on the first freed (at 1): ends at 5, balanced 3
    assert sim.listed_factor(np.array([1.0, 1.0, 4.0]), 2, 1, 1.0) == pytest.approx(5 / 3)
    # one SM of two slots: two CTAs of 2 share it (4 each), the third starts at 4 and, the last,
    # runs alone at 0.8: 4 + 2/0.8 = 6.5 against 6
    assert sim.listed_factor(np.array([2.0, 2.0, 2.0]), 1, 2, 0.8) == pytest.approx(6.5 / 6)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 40), min_size=1, max_size=24), st.integers(1, 6), st.sampled_from([1, 2]))
def test_one_wave_is_the_models_exact_placement(lengths, sms, occ):
    """A grid of at most one wave is placed as the model places it; longer ones take at least
    as long as balanced."""
    arr = np.array(lengths, dtype=np.float64)
    got = sim.listed_factor(arr, sms, occ, 0.83)
    assert got >= 1.0
    if arr.size <= sms * occ and arr.sum() > 0:
        assert got == pytest.approx(timing._one_wave_factor(arr, sms, occ, 0.83))
