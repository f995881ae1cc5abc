"""Causal FlashAttention-2 forward time: the model's tail estimate against the list schedule run.

``memmodel.timing.cta_tail_factor`` estimates how much longer than balanced a causal grid of
more than one wave runs (CTAs of one head shortest first, handed out in grid order, so the last
heads' longest CTAs come last) with a closed form. This tool runs the schedule itself instead
(:func:`listed_factor`: the first SMs × CTAs/SM breadth first, then each next CTA to the slot
that frees first, a CTA of L blocks holding its slot L × CTAs/SM while its SM is full; after the
last one starts, each SM's CTAs finish as in one wave, the last alone at ``one_cta_share``) and
rescores the records' causal FlashAttention-2 forwards both ways:

    python tests/sims/causal_tail_sim.py > validation/h200/causal-tail-sim.md

Not used by the model: on the records it fixes grids of two to four heads of 16k–32k (probe 7's
Ulysses kernel: −17 % → within 2 %) but overshoots grids of many waves by about 6 %.
"""

from __future__ import annotations

import heapq
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from memmodel import timing  # noqa: E402
from memmodel.cli.validate import ncu_trace, recorded_profile  # noqa: E402
from memmodel.fileio import read_json  # noqa: E402
from memmodel.gpu.validate import rescore  # noqa: E402

RECORDS = (
    "validation/h200/probe-7/h200-cp-kernels.json.gz",
    "validation/h200/final/h200-causal-check.json.gz",
    "validation/h200/final/h200-reuse-check.json.gz",
    "validation/h200/final/h200-l2-check.json.gz",
    "validation/h200/final/h200-backward-check.json.gz",
    "validation/h200/final/h200-backward-check-2.json.gz",
    "validation/h200/final/h200-training-3.json.gz",
)


def listed_factor(lengths: np.ndarray, sm_count: int, occ: int, share: float) -> float:
    """Makespan over the balanced time of the list schedule of CTAs of these lengths (blocks)."""
    total = float(lengths.sum())
    occ = max(int(occ), 1)
    slots = sm_count * occ
    if total <= 0 or lengths.size <= slots:
        return timing._one_wave_factor(lengths, sm_count, occ, share) if total > 0 else 1.0
    ends = [(occ * float(lengths[k * sm_count + m]), k, m) for k in range(occ) for m in range(sm_count)]
    heapq.heapify(ends)
    start = 0.0
    for x in lengths[slots:].tolist():
        start, k, m = heapq.heappop(ends)
        heapq.heappush(ends, (start + occ * x, k, m))
    left = np.zeros((occ, sm_count))
    for end, k, m in ends:
        left[k, m] = max(0.0, end - start) / occ
    per_sm = np.sort(left, axis=0)
    if occ < 2:
        finish = per_sm.sum(axis=0)
    else:
        steps = np.diff(per_sm, axis=0, prepend=0.0)
        running = (occ - np.arange(occ))[:, None].astype(np.float64)
        finish = np.where(running >= 2, steps * running, steps / share).sum(axis=0)
    return max(1.0, (start + float(finish.max())) / (total / sm_count))


def scheduled_tail(workload, block_q, block_kv, sm_count, ctas_per_sm=None, one_cta_share=None):  # type: ignore[no-untyped-def]
    """``cta_tail_factor`` with the list schedule run for causal grids of more than one wave."""
    estimate = ORIGINAL(workload, block_q, block_kv, sm_count, ctas_per_sm, one_cta_share)
    if not workload.causal or np.ndim(estimate):
        return estimate
    occ = int(ctas_per_sm or 1)
    n, n_kv, bq, bkv = int(workload.n), int(workload.n_kv_), int(block_q), int(block_kv)
    bh = int(workload.batch) * int(workload.heads)
    if bh * -(-n // bq) <= sm_count * occ:
        return estimate
    share = float(one_cta_share) if one_cta_share else 1.0
    return listed_factor(timing._causal_lengths(n, n_kv, bq, bkv, bh), sm_count, occ, share)


ORIGINAL = timing.cta_tail_factor


def rows(record: str) -> list[tuple[str, float, float]]:
    data = read_json(REPO / record)
    csv = ncu_trace(REPO / record)
    profile = recorded_profile(data, str(REPO / record))  # found as --rescore finds it
    out = {}
    for label, fn in (("estimate", ORIGINAL), ("schedule", scheduled_tail)):
        timing.cta_tail_factor = fn
        try:
            new = rescore(data, csv, profile)
        finally:
            timing.cta_tail_factor = ORIGINAL
        for e in new["cases"]:
            c = e["case"]
            if c.get("impl") != "sdpa-flash" or not c.get("causal") or c.get("n", 0) < 4096 or e["status"] != "ok":
                continue
            step = "forward" if c.get("backward") else "attention"
            got, took = e["predicted"]["steps"].get(step), e["timing"]["kernels"].get(step)
            if got and took:
                out.setdefault(c["id"], {})[label] = (got, took)
    return [
        (k, v["estimate"][0] / v["estimate"][1] - 1, v["schedule"][0] / v["schedule"][1] - 1) for k, v in out.items()
    ]


def main() -> None:
    print("| record | case | error, tail estimate | error, list schedule |")
    print("| --- | --- | --- | --- |")
    for record in RECORDS:
        for case, a, b in rows(record):
            print(f"| {Path(record).name.removesuffix('.json.gz')} | {case} | {a:+.1%} | {b:+.1%} |")


if __name__ == "__main__":
    main()
