"""Run the L2 reuse microbenchmark alone and write its record::

    python -m memmodel.gpu.l2_reuse_run --out DIR [--quick] [--only FAMILY,...] [--factors F,...]

writes ``DIR/l2_reuse.json`` (the points, the curves and how they were measured),
``DIR/l2_reuse.md`` (a table) and the raw data: ``l2_reuse.ncu.csv`` (Nsight Compute's output),
``l2_reuse.stderr.txt`` (the child's stderr) and ``l2_reuse.log.json`` (the launch log).
The same measurement is ``calibrate``'s ``l2_reuse`` step; ``--child LOG`` is the process
that step runs under Nsight Compute.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..calibration import l2_reuse as plan_mod
from .calibrate import make_context
from .l2_reuse import measure_l2_reuse, run_patterns
from .measure import describe


def _child(log_path: str, quick: bool, only: Sequence[str], budget_s: float, factors: Sequence[float] = ()) -> None:
    """What runs under ncu: every pattern, the launch log written as JSON at the end."""
    ctx = make_context(quick=quick)
    patterns = plan_mod.make_patterns(ctx.info.l2_bytes, quick=quick, only=only, factors=factors)
    log: list[dict[str, Any]] = []
    try:
        run_patterns(ctx, patterns, log, budget_s=budget_s)
    finally:
        Path(log_path).write_text(json.dumps(log))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m memmodel.gpu.l2_reuse_run", description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="folder for l2_reuse.json, l2_reuse.ncu.csv and l2_reuse.md")
    parser.add_argument("--quick", action="store_true", help="fewer footprints per family")
    parser.add_argument("--only", default="", metavar="FAMILY,...", help="only these pattern families")
    parser.add_argument(
        "--budget-s", type=float, default=180.0, help="launch no pattern after this many seconds (default 180)"
    )
    parser.add_argument(
        "--factors",
        default="",
        metavar="F,...",
        help="footprints (x L2, each in (0, 8]) for every family instead of its own, e.g. the knee",
    )
    parser.add_argument("--child", metavar="LOG", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    only = tuple(f for f in args.only.split(",") if f)
    try:
        factors = tuple(float(f) for f in args.factors.split(",") if f)
        plan_mod.make_patterns(60 * 2**20, only=only, factors=factors)  # refuse bad values before any GPU work
    except ValueError as exc:
        parser.error(f"--factors/--only: {exc}")
    if args.child:
        _child(args.child, args.quick, only, args.budget_s, factors)
        return 0
    if not args.out:
        parser.error("--out DIR is needed")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ctx = make_context(quick=args.quick)
    info = ctx.info
    started = time.time()
    result: dict[str, Any] = {
        "schema": plan_mod.SCHEMA,
        "date": datetime.date.today().isoformat(),
        "command": "python -m memmodel.gpu.l2_reuse_run " + " ".join(sys.argv[1:] if argv is None else argv),
        "device": {
            "name": info.name,
            "sm_count": info.sm_count,
            "l2_bytes": info.l2_bytes,
            "compute_capability": f"{info.capability[0]}.{info.capability[1]}",
            **{f"{k}_version": v for k, v in info.versions.items()},
        },
        "errors": {},
    }
    try:
        result.update(measure_l2_reuse(ctx, only=only, raw_dir=out, budget_s=args.budget_s, factors=factors))
    except (KeyboardInterrupt, MemoryError):
        raise
    except Exception as exc:  # recorded with what came back
        result["errors"]["l2_reuse"] = describe(exc)
    result["wall_s"] = round(time.time() - started, 1)
    result.pop("ncu_csv", None)  # written as it came, l2_reuse.ncu.csv
    (out / "l2_reuse.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "l2_reuse.md").write_text(plan_mod.summary_markdown(result))
    print(plan_mod.summary_markdown(result))
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
