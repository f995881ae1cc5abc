"""The model's K/V HBM reads against the L2 reuse microbenchmark, family by family.

Each microbenchmark launch is an FA2-style forward kernel without Q, O or arithmetic meaning:
``kv_heads × q_per_kv`` query heads, N = N_kv = tiles × BN rows, B_r × B_c = BM × BN tiles,
``slots`` CTAs at once, causal from the diagonal down (FA2) or up (our Triton kernel). The
model's K and V HBM reads (:func:`memmodel.traffic.flash.fa2_forward_kernel` with the bundled
h200 profile's L2) are set against the DRAM bytes Nsight Compute read. The simple families
(waves, half, parity, stream, tiles) are what ``memory.l2.reuse`` was fitted to; the others
(heads, causal, GQA, dq-atomic) are held out.

    python tests/sims/l2_reuse_check.py [--gpu h200] [--markdown]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from memmodel.fileio import read_json  # noqa: E402
from memmodel.hardware import load_profile  # noqa: E402
from memmodel.model import l2_context  # noqa: E402
from memmodel.traffic.blocks import BlockSizes, tile_context  # noqa: E402
from memmodel.traffic.flash import fa2_forward_kernel  # noqa: E402
from memmodel.workload import Workload  # noqa: E402

RECORD = ROOT / "validation" / "h200" / "l2-reuse" / "l2_reuse.json.gz"
SIMPLE = ("waves-", "tile-", "half", "parity", "stream")


def predict(pt: dict, profile_name: str) -> float | None:
    """The model's K/V HBM read bytes for one point (None where it does not apply: dq-atomic)."""
    if pt.get("atomic"):
        return None
    profile = load_profile(profile_name)
    slots = int(pt["slots"])
    per_sm = max(1, slots // profile.sm_count)
    rows = int(pt["tiles"]) * int(pt["bn"])
    causal = pt["order"] != "full"
    q_heads = int(pt["kv_heads"]) * int(pt["q_per_kv"])
    ctas = int(pt["ctas"])
    n = rows if causal else ctas // q_heads * int(pt["bm"])  # full rows: CTAs per head × BM query rows
    w = Workload(
        n=n, d=int(pt["d"]), heads=q_heads, kv_heads=int(pt["kv_heads"]), n_kv=rows, dtype="fp16", causal=causal
    )
    bm, bn = int(pt["bm"]), int(pt["bn"])
    blocks = BlockSizes(bm, bn, -(-n // bm), -(-rows // bn), "given", 0)
    order = "forward" if pt["order"] == "causal-up" else "reverse"
    ctx = tile_context(w, blocks, profile.sm_count, profile.sram.capacity_per_sm_bytes, per_sm, order)
    kernel = fa2_forward_kernel(ctx, l2_context(profile, "cold"), streams_q=False)  # no Q, O tiles
    return float(sum(t.bytes for t in kernel.transfers if t.tensor in ("K", "V") and t.level == "hbm"))


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", default="h200")
    args = ap.parse_args(argv)
    result = read_json(RECORD)
    rows, errs = [], {}
    for pt in result["points"]:
        pred = predict(pt, args.gpu)
        if pred is None:
            continue
        meas = float(pt["dram_read_bytes"])
        err = pred / meas - 1.0
        kind = "fitted" if pt["family"].startswith(SIMPLE) else "held out"
        errs.setdefault(pt["family"], []).append(err)
        rows.append((pt["family"], kind, pt["footprint_factor"], meas / 2**20, pred / 2**20, err))
    print("| family | set | × L2 | measured MiB | model MiB | error |")
    print("| --- | --- | --- | --- | --- | --- |")
    for fam, kind, f, meas, pred, err in rows:
        print(f"| {fam} | {kind} | {f:g} | {meas:.1f} | {pred:.1f} | {err * 100:+.1f}% |")
    print("\n| family | median abs error | max abs error |\n| --- | --- | --- |")
    for fam, es in errs.items():
        a = [abs(e) for e in es]
        print(f"| {fam} | {statistics.median(a) * 100:.1f}% | {max(a) * 100:.1f}% |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
