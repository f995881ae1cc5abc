"""The schedule simulator behind validation/h200/l2-schedule-sim.md (a check of the L2 rules)."""

import pytest

from .sims import l2_schedule_sim as sim


@pytest.mark.parametrize("policy", ["random", "lru", "partitioned"])
@pytest.mark.parametrize("order", ["reverse", "forward"])
def test_all_blocks_fit_only_compulsory_misses(policy, order):
    # 3 heads × 4 Q blocks, r = 2: CTA i visits 2·(i+1) blocks → 3 · 2·(1+2+3+4) = 60 requests;
    # each head's 2·4 = 8 blocks miss once: 24 misses (an L2 of 64 blocks holds all 24)
    assert sim.simulate(4, 2, 3, 5, 64, order, policy) == (60, 24)


def test_one_line_l2_misses_whenever_the_block_changes():
    # one slot, one line: one CTA at a time; a request hits only if it repeats the previous one
    # 1 head × 3 Q blocks, r = 1: 1 + 2 + 3 = 6 requests; the reverse walk of CTA i ends on
    # block 0 and CTA i+1 starts on block i+1 → no consecutive repeat: 6 misses
    assert sim.simulate(3, 1, 1, 1, 1, "reverse", "random") == (6, 6)
    # the forward walk: CTA 0 reads block 0 and CTA 1 starts on block 0 (a hit), CTA 1 ends on
    # block 1 and CTA 2 starts on block 0: 5 misses
    assert sim.simulate(3, 1, 1, 1, 1, "forward", "lru") == (6, 5)


def test_misses_between_compulsory_and_requested():
    req, miss = sim.simulate(64, 2, 4, 32, 40, "reverse", "random")
    assert req == 4 * 2 * 64 * 65 // 2  # Σ_i 2·(i+1) per head, 4 heads
    assert 4 * 2 * 64 <= miss <= req
