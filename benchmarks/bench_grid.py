"""Grid throughput: workload configurations per second through the Python API.

    python benchmarks/bench_grid.py [--runs 3] [--sample 2000] [--gpu a100]

``--gpu h200`` runs the grid through the measured L2 reuse curve (``memory.l2.reuse``: per-head
K/V of up to 64 MiB at N = 131072, d = 128, across the H200's capacity knee); ``--causal`` makes
every configuration causal (with ``--gpu h200 --impl sdpa-flash``, FlashAttention-2's through the
measured causal curves, ``memory.l2.causal_reuse_d*``); ``--kv-heads 8`` makes every one a GQA grid
(batched ones through the re-reads across a group's query heads).

The same grid is evaluated two ways and both figures are printed:

* vectorised: ``memmodel.sweep.evaluate(grid)`` — numpy, one ``compare`` call per
  (GPU, dtype, tiled) group and chunk — timed whole (median of RUNS runs, and the best), in one process
  and with the chunks shared out between one process per core (the default);
* one by one: a random sample of SAMPLE configurations of the same grid, each through a
  scalar ``memmodel.compare`` call plus the same row fields, timed and extrapolated
  linearly to the whole grid (scalar calls do not get cheaper in bulk).

Targets: ≥ 1,000,000 configurations/s vectorised, ≥ 100× the one-by-one rate. The sample's
rows are also checked against the vectorised rows, so both paths compute the same thing.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time

from memmodel import Workload, compare, load_profile
from memmodel.sweep import Grid, evaluate
from memmodel.traffic.ledger import DIRECTIONS, LEVELS

GRID = {
    "n": "32:131072:+32",  # 4096 sequence lengths
    "d": "64,128",
    "batch": "1,2,4,8,16",
    "heads": "8,16,32,64,128",
    "dtypes": ("fp16", "bf16", "fp32"),
    "tiled": ("fa1", "fa2"),
}


def scalar_row(w: Workload, profile, tiled: str, impl: str = "auto") -> list:
    """What one row pair of the sweep holds, computed through a scalar compare call."""
    c = compare(w, profile, tiled=tiled, impl=impl)
    out = []
    for ev in c.algorithms:
        t = ev.traffic
        out += [t.bytes(level=lv, direction=dr) for lv in LEVELS for dr in DIRECTIONS]
        out += [t.flops, t.exp_ops, ev.timing.time_s, ev.timing.bound]
    out += list(c.ratios().values())
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="timed runs of the whole grid (median; default 5)")
    parser.add_argument("--sample", type=int, default=2000, help="configurations evaluated one by one (default 2000)")
    parser.add_argument("--gpu", default="a100", help="bundled profile (default a100; h200 has the L2 reuse curve)")
    parser.add_argument("--causal", action="store_true", help="every configuration causal")
    parser.add_argument(
        "--impl", default="auto", help="implementation (default auto; sdpa-flash for the causal curves)"
    )
    parser.add_argument(
        "--kv-heads",
        type=int,
        default=None,
        help="K/V heads of every configuration (GQA: 8 divides every head count of the grid; default: "
        "as many as query heads)",
    )
    args = parser.parse_args()
    if args.kv_heads is not None and any(int(h) % args.kv_heads for h in GRID["heads"].split(",")):
        parser.error(f"--kv-heads {args.kv_heads} must divide every head count of the grid ({GRID['heads']})")
    profile = load_profile(args.gpu)
    profiles = {args.gpu: profile}
    axes = dict(GRID, tiled=("fa2",)) if args.impl != "auto" else GRID  # an implementation is an FA2 kernel
    if args.kv_heads is not None:
        axes = dict(axes, kv_heads=str(args.kv_heads))
    grid = Grid(gpus=(args.gpu,), causal=(True,) if args.causal else (False,), impls=(args.impl,), **axes)
    print(f"grid: {grid.size:,} configurations ({grid.describe_size()}) on {args.gpu}")
    if hasattr(os, "getloadavg"):  # other work on the machine slows both paths down
        print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")

    evaluate(Grid(gpus=(args.gpu,), n="32:4096:+32", d="64", dtypes=("fp16",)), profiles)  # warm-up
    result = None
    rates = {}
    for workers, what in ((1, "one process"), (None, f"all {os.cpu_count()} cores")):
        times = []
        for _ in range(args.runs):
            result = None  # free the previous result first
            start = time.perf_counter()
            result = evaluate(grid, profiles, workers=workers)
            times.append(time.perf_counter() - start)
        seconds = statistics.median(times)
        rates[workers] = grid.size / seconds
        print(
            f"vectorised, {what}: {seconds:.3f} s for the grid (median of {args.runs}; best {min(times):.3f} s) "
            f"= {rates[workers]:,.0f} configurations/s"
        )
    vector_rate = rates[None]

    rng = random.Random(0)
    per_group = grid.workloads_per_group
    picks = sorted(rng.sample(range(grid.size), args.sample))
    mesh = grid.mesh()
    start = time.perf_counter()
    rows = []
    for i in picks:
        group, j = divmod(i, per_group)
        setting = grid.groups[group]
        dtype, tiled = setting.dtype, setting.tiled
        w = Workload(
            n=int(mesh["n"][j]),
            d=int(mesh["d"][j]),
            batch=int(mesh["batch"][j]),
            heads=int(mesh["heads"][j]),
            kv_heads=int(mesh["kv_heads"][j]),
            dtype=dtype,
            causal=args.causal,
        )
        rows.append(scalar_row(w, profile, tiled, args.impl))
    scalar_s = time.perf_counter() - start
    scalar_rate = args.sample / scalar_s
    print(
        f"one by one: {scalar_s:.3f} s for a sample of {args.sample:,} = {scalar_rate:,.0f} configurations/s "
        f"(the whole grid: ≈ {grid.size / scalar_rate:,.0f} s, extrapolated)"
    )
    print(
        f"speed-up: {vector_rate / scalar_rate:,.0f}× on all cores, {rates[1] / scalar_rate:,.0f}× in one process "
        "(targets: ≥ 1,000,000 configurations/s, ≥ 100×)"
    )

    assert result is not None
    names = [f"{lv}_{dr}_bytes" for lv in LEVELS for dr in DIRECTIONS] + ["flops", "exp_ops", "predicted_time_s"]
    for i, row in zip(picks, rows):
        std, til = list(result.rows(2 * i, 2 * i + 2))
        vector = [std[k] for k in names] + [std["bound"]] + [til[k] for k in names] + [til["bound"]]
        vector += [std["ratio_hbm_bytes"], std["ratio_flops"], std["ratio_predicted_time_s"]]
        for a, b in zip(vector, row):
            assert a == b or (isinstance(a, float) and abs(a - b) <= 1e-12 * abs(b)), (i, a, b)
    print(f"checked: the {args.sample:,} sampled configurations agree between the two paths")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
