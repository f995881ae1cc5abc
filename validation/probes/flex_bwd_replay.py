"""A replay of FlexAttention's backward schedule through an L2 (the flex backward probe's
README): which of the measured HBM reads a plain replacement policy explains, without spills.

For each measured flex backward kernel (the records named below and the two probes), the
template's grid (per (batch, K/V head): its K/V programs, then the group's Q programs; each K/V
program's head loops over its Q blocks, partial ones first; each Q program over its K/V blocks)
is list-scheduled onto 132 CTA slots with a K/V program's step costing 4 units and a Q program's 3
(the model's ``KV_PROGRAM_PRODUCTS``, ``Q_PROGRAM_PRODUCTS``). Every read of a Q/dO block (per
query head) and of a K/V block is timed; a read after the first misses with probability
``1 − exp(−x)`` (random replacement) or when ``x > 1`` (LRU), where ``x`` is the bytes the kernel
brings into L2 between the two reads (its compulsory reads and writes plus the misses, at the
steady rate of all slots) over the L2's capacity. One (batch, K/V head) group of the middle of
the grid is replayed.

    python validation/probes/flex_bwd_replay.py [--policy lru|random] [--capacity BYTES]

A probe's analysis: it prints, per kernel, measured against replayed HBM reads. The model's
``memmodel.traffic.flex.q_phase_rereads`` runs the same schedule (LRU at the L2's effective capacity
less the masked template's spilled stacks).
"""

from __future__ import annotations

import argparse
import gzip
import heapq
import json
import statistics
from pathlib import Path

import numpy as np

from memmodel.cases import Case, parse_case
from memmodel.gpu.ncu import parse_csv, split_placements
from memmodel.traffic.flex import backward_config
from memmodel.traffic.flexmask import SPARSE_BLOCK, block_matrix

REPO = Path(__file__).resolve().parent.parent.parent
RECORDS = ("flex-probe/flex-ref-2", "final/h200-variants-final", "final/h200-flex-masks-check",
           "final/h200-flex-cut-check", "final/h200-flex-bwd-check")  # fmt: skip
PROBES = (
    ("flex-bwd-probe/ncu.csv.gz", "h200-flex-bwd-probe.txt"),
    ("flex-bwd-probe/ncu-2.csv.gz", "h200-flex-bwd-probe-2.txt"),
)
SLOTS = 132


def walk(some: np.ndarray, every: np.ndarray) -> np.ndarray:
    return np.concatenate([np.flatnonzero(some & ~every), np.flatnonzero(every)])


def replay(case: Case, policy: str, capacity: float) -> tuple[float, float]:
    """(Q/dO re-reads, K/V re-reads) per unique byte."""
    w = case.workload()
    n, n_kv, d, dv, g = int(w.n), int(w.n_kv_), int(w.d), int(w.d_v_), int(w.group)
    groups, e = int(w.batch) * int(w.kv_heads_), 2
    m1, n1, m2, n2, _, _ = backward_config(w.dtype, d)
    causal = bool(w.causal) or w.window is not None
    some, every = block_matrix(n, n_kv, causal, w.window, w.seq_lens)  # the model's own (memmodel.traffic.flexmask)
    rows, cols = some.shape
    kv_prog = [walk(some[:, p * n1 // SPARSE_BLOCK], every[:, p * n1 // SPARSE_BLOCK]) for p in range(-(-n_kv // n1))]
    q_prog = [walk(some[q * m2 // SPARSE_BLOCK], every[q * m2 // SPARSE_BLOCK]) for q in range(-(-n // m2))]
    per1, per2 = SPARSE_BLOCK // m1, SPARSE_BLOCK // n2
    one = np.concatenate([[len(v) * per1 * g * 4 for v in kv_prog], np.tile([len(v) * per2 * 3 for v in q_prog], g)])
    mid = min(groups - 1, 2) if groups > 1 else 0
    heap = [0.0] * SLOTS
    starts = []
    for x in np.tile(one, mid + 1).tolist():
        s = heapq.heappop(heap)
        starts.append(s)
        heapq.heappush(heap, s + x)
    s0 = np.asarray(starts[mid * one.size :])
    qo_tile, kv_tile = SPARSE_BLOCK * ((d + dv) * e + 8), SPARSE_BLOCK * (d + dv) * e
    base = rows * g * qo_tile + cols * kv_tile + n * g * d * e + n_kv * (d + dv) * e
    qt, qi, kt, ki = [], [], [], []
    for p, v in enumerate(kv_prog):
        steps = len(v) * per1
        for h in range(g):
            qt.append(s0[p] + (h * steps + np.arange(len(v)) * per1) * 4)
            qi.append(h * rows + v)
        kt.append(np.array([s0[p]]))
        ki.append(np.array([p * n1 // SPARSE_BLOCK]))
    for h in range(g):
        for q, v in enumerate(q_prog):
            st = s0[len(kv_prog) + h * len(q_prog) + q]
            qt.append(np.array([st]))
            qi.append(np.array([h * rows + q * m2 // SPARSE_BLOCK]))
            kt.append(st + np.arange(len(v)) * per2 * 3)
            ki.append(v)
    gaps = []
    for times, ids in ((qt, qi), (kt, ki)):
        t, i = np.concatenate(times), np.concatenate(ids)
        order = np.lexsort((t, i))
        t, i = t[order], i[order]
        gaps.append(np.diff(t)[i[1:] == i[:-1]])
    xq = xk = 0.0
    for _ in range(3):  # the rate counts the misses it gives
        rate = SLOTS * (base + xq * rows * g * qo_tile + xk * cols * kv_tile) / one.sum()
        miss = [(1 - np.exp(-rate * gap / capacity)) if policy == "random" else (rate * gap > capacity) for gap in gaps]
        xq, xk = float(np.sum(miss[0])) / (rows * g), float(np.sum(miss[1])) / cols
    return xq, xk


def measured() -> list[tuple[Case, float]]:
    out = []
    for stem in RECORDS:
        data = json.loads(gzip.open(REPO / "validation" / "h200" / f"{stem}.json.gz").read())
        for entry in data["cases"]:
            for b in entry.get("bytes") or []:
                if b["kernel"] == "flex_attention_backward":
                    out.append((Case.from_dict(entry["case"]), b["measured_hbm_read_bytes"]))
    for csv, cases_file in PROBES:
        lines = (REPO / "validation" / "cases" / cases_file).read_text().splitlines()
        cases = [parse_case(x.strip()) for x in lines if x.strip() and not x.startswith("#")]
        runs = split_placements(
            parse_csv(gzip.open(REPO / "validation" / "h200" / csv, "rt").read()), [c.id for c in cases], 1
        )
        for c in cases:
            m = next(k for k in runs[c.id][0] if k.name.startswith("triton_tem") and "backward" in k.name).metrics
            out.append((c, m["dram__bytes_read.sum"]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--policy", choices=("lru", "random"), default="lru")
    ap.add_argument("--capacity", type=float, default=60 * 2**20)
    args = ap.parse_args()
    errors = []
    for case, read in measured():
        w = case.workload()
        xq, xk = replay(case, args.policy, args.capacity)
        qo = int(w.batch) * int(w.heads) * int(w.n) * ((int(w.d) + int(w.d_v_)) * 2 + 8)
        kv = int(w.batch) * int(w.kv_heads_) * int(w.n_kv_) * (int(w.d) + int(w.d_v_)) * 2
        replayed = qo * (1 + xq) + kv * (1 + xk)
        errors.append(replayed / read - 1)
        print(
            f"{case.id[:64]:64s} measured {read / 1e6:8.1f} MB  replayed {replayed / 1e6:8.1f} MB  {100 * errors[-1]:+6.1f} %"
        )
    print(
        f"median |error| {100 * statistics.median(abs(x) for x in errors):.1f} %, max {100 * max(abs(x) for x in errors):.1f} %"
    )


if __name__ == "__main__":
    main()
