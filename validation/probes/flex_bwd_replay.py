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
import json
import statistics
from pathlib import Path

from memmodel.cases import Case, parse_case
from memmodel.gpu.ncu import parse_csv, split_placements
from memmodel.traffic.flex import backward_config, q_phase_rereads

REPO = Path(__file__).resolve().parent.parent.parent
RECORDS = ("flex-probe/flex-ref-2", "final/h200-variants-final", "final/h200-flex-masks-check",
           "final/h200-flex-cut-check", "final/h200-flex-bwd-check")  # fmt: skip
PROBES = (
    ("flex-bwd-probe/ncu.csv.gz", "h200-flex-bwd-probe.txt"),
    ("flex-bwd-probe/ncu-2.csv.gz", "h200-flex-bwd-probe-2.txt"),
)
SLOTS = 132


def replay(case: Case, policy: str, capacity: float) -> tuple[float, float]:
    """(Q/dO re-reads, K/V re-reads) per unique byte: the model's own schedule
    (``memmodel.traffic.flex.q_phase_rereads``) at ``capacity`` bytes under ``policy``."""
    w = case.workload()
    mask = (bool(w.causal), w.window, w.seq_lens)
    config = backward_config(w.dtype, int(w.d))
    groups = int(w.batch) * int(w.kv_heads_)
    return q_phase_rereads(int(w.n), int(w.n_kv_), mask, int(w.group), int(w.d), int(w.d_v_), 2, config,
                           SLOTS, groups, capacity, policy)  # fmt: skip


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
