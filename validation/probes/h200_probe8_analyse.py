"""Probe 8's CTA times against the list schedule and the model's tail estimate.

    python validation/probes/h200_probe8_analyse.py > validation/h200/probe-8/README-table.md

Per shape: the most CTAs an SM held at once, whether CTAs started in grid order, the median time
a CTA took per K/V block, the span from the first start to the last end over the balanced time
(every CTA's blocks at that per-block time, two to an SM, over 132 SMs), and the same factor from
the list schedule (tests/sims/causal_tail_sim.py) and from memmodel.timing.cta_tail_factor.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO))

from memmodel import Workload  # noqa: E402
from memmodel.fileio import read_json  # noqa: E402
from memmodel.timing import cta_tail_factor  # noqa: E402

_spec = importlib.util.spec_from_file_location("causal_tail_sim", REPO / "tests" / "sims" / "causal_tail_sim.py")
sim = importlib.util.module_from_spec(_spec)
assert _spec.loader is not None
_spec.loader.exec_module(sim)


def most_at_once(starts: np.ndarray, ends: np.ndarray, sms: np.ndarray) -> int:
    best = 0
    for s in np.unique(sms):
        events = sorted([(a, 1) for a in starts[sms == s]] + [(b, -1) for b in ends[sms == s]])
        now = 0
        for _, step in events:
            now += step
            best = max(best, now)
    return best


def main() -> None:
    rows = read_json(REPO / "validation" / "h200" / "probe-8" / "cta_times.json.gz")
    print(
        "| N | heads | CTAs | most per SM | grid order | ns a block (median) | span / balanced | list schedule | estimate |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        c = np.array(r["ctas"], dtype=np.float64)
        n, heads, bq, bkv = r["n"], r["heads"], r["block_q"], r["block_kv"]
        m = np.arange(len(c)) % (n // bq)
        blocks = (m + 1) * bq // bkv
        starts, ends, sms = c[:, 0], c[:, 1], c[:, 2].astype(int)
        per_block = float(np.median((ends - starts) / blocks))
        occ = most_at_once(starts, ends, sms)
        balanced = blocks.sum() * per_block / occ / 132
        listed = sim.listed_factor(blocks.astype(np.float64), 132, occ, 0.829)
        est = float(
            cta_tail_factor(Workload(n=n, d=r["d"], heads=heads, dtype="fp16", causal=True), bq, bkv, 132, occ, 0.829)
        )
        in_order = bool(np.all(np.diff(starts) >= -1000))  # within a microsecond
        print(
            f"| {n} | {heads} | {len(c)} | {occ} | {'yes' if in_order else 'no'} | {per_block:.0f} | "
            f"{ends.max() / balanced:.3f} | {listed:.3f} | {est:.3f} |"
        )


if __name__ == "__main__":
    main()
