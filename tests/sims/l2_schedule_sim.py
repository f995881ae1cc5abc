"""Discrete simulation of a causal FA2-style forward kernel's K/V requests through an L2.

A check of the analytic L2 rules in memmodel.traffic (flash._fa2_causal_reuse and
l2.random_replacement_miss_ratio), not part of the model. The schedule is the one the
model assumes: CTAs (Q blocks of one head next to each other, heads in grid order) are
dispatched in grid order into ``slots`` free slots; CTA i of a head visits its
``r·(i+1)`` K/V blocks (r = B_r/B_c, causal, N_q = N_kv), one block per step, from the
diagonal down (``reverse``, FlashAttention-2) or from block 0 up (``forward``, our Triton
kernel); every running CTA advances one step per time step (no timing drift). One K/V
block (K_j and V_j) is one cache entry. Policies:

* ``random``: fully associative, ``lines`` entries, a miss evicts a random entry;
* ``lru``: fully associative, least recently used;
* ``partitioned``: two ``random`` halves; a slot's SM uses its own half, a block has a
  home half by address; a miss in the own half is served by the home half if there,
  else by HBM (counted), and the block is then held in both (the H100/H200 L2's two
  partitions, data read by every SM duplicated).

Prints requested and missed blocks. Example (one head, n = 131072, d = 128, 128×64
tiles, 2 CTAs/SM on 132 SMs, 30 MiB of 32 KiB blocks):

    python tests/sims/l2_schedule_sim.py --t-r 1024 --r 2 --heads 1 --slots 264 --lines 960
"""

from __future__ import annotations

import argparse
import random
from collections import OrderedDict


class _Random:
    def __init__(self, lines: int, rng: random.Random) -> None:
        self.lines, self.rng, self.where, self.keys = lines, rng, {}, []

    def __contains__(self, key: object) -> bool:
        return key in self.where

    def insert(self, key: object) -> None:
        if key in self.where:
            return
        if len(self.keys) < self.lines:
            self.where[key] = len(self.keys)
            self.keys.append(key)
            return
        j = self.rng.randrange(self.lines)
        del self.where[self.keys[j]]
        self.keys[j] = key
        self.where[key] = j


def simulate(
    t_r: int, r: int, heads: int, slots: int, lines: int, order: str = "reverse", policy: str = "random", seed: int = 1
) -> tuple[int, int]:
    """(requested, missed) K/V blocks of the kernel."""
    rng = random.Random(seed)
    grid = [(h, i) for h in range(heads) for i in range(t_r)]
    nxt = 0

    def start(slot: int) -> list | None:
        nonlocal nxt
        if nxt == len(grid):
            return None
        h, i = grid[nxt]
        nxt += 1
        n = r * (i + 1)
        blocks = list(range(n - 1, -1, -1)) if order == "reverse" else list(range(n))
        return [h, blocks, 0, slot]

    running = [c for c in (start(s) for s in range(slots)) if c]
    lru: OrderedDict = OrderedDict()
    halves = [_Random(lines // 2, rng) for _ in range(2)]
    whole = _Random(lines, rng)
    requested = missed = 0
    while running:
        rng.shuffle(running)  # order of requests within one time step
        still = []
        for cta in running:
            h, blocks, k, slot = cta
            key = (h, blocks[k])
            requested += 1
            if policy == "lru":
                if key in lru:
                    lru.move_to_end(key)
                else:
                    missed += 1
                    lru[key] = None
                    if len(lru) > lines:
                        lru.popitem(last=False)
            elif policy == "partitioned":
                own, home = halves[slot % 2], halves[hash(key) % 2]
                if key not in own:
                    if key not in home:
                        missed += 1
                        home.insert(key)
                    own.insert(key)
            else:
                if key not in whole:
                    missed += 1
                    whole.insert(key)
            cta[2] += 1
            if cta[2] < len(blocks):
                still.append(cta)
            else:
                nxt_cta = start(slot)
                if nxt_cta:
                    still.append(nxt_cta)
        running = still
    return requested, missed


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--t-r", type=int, required=True, help="Q blocks per head")
    p.add_argument("--r", type=int, required=True, help="B_r / B_c")
    p.add_argument("--heads", type=int, default=1, help="batch × heads")
    p.add_argument("--slots", type=int, required=True, help="CTAs resident at once (SMs × CTAs/SM)")
    p.add_argument("--lines", type=int, required=True, help="L2 capacity in K/V blocks")
    p.add_argument("--order", choices=("reverse", "forward"), default="reverse")
    p.add_argument("--policy", choices=("random", "lru", "partitioned"), default="random")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    req, miss = simulate(a.t_r, a.r, a.heads, a.slots, a.lines, a.order, a.policy, a.seed)
    print(f"requested {req} blocks, missed {miss} ({miss / req:.4f})")


if __name__ == "__main__":
    main()
