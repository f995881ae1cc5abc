"""CLI sweep throughput: the whole ``memmodel sweep ... --format csv > FILE`` process, timed.

    python benchmarks/bench_sweep_cli.py [--runs 3] [--grid a100|h200|both] [--format csv]

Two grids of 1,048,576 configurations each (2,097,152 rows):

* ``a100``: the paper's kernels, ``--n 64:65536:+64 --d 32:256:+32 --heads 1,8,16,32
  --batch 1,2,4,8 --dtype fp16,bf16 --causal off,on --tiled fa1,fa2 --gpu a100``;
* ``h200``: a real kernel's tiles and measured L2 reuse curves, GQA included,
  ``--n 64:65536:+64 --d 64,96,128,256 --heads 8,16,32,64 --kv-heads 1,8 --batch 1,2,4,8,16,32,64,128
  --dtype fp16,bf16 --causal off,on --impl sdpa-flash --gpu h200``.

Each run is a fresh process (start-up, evaluation, formatting and writing all count) whose
stdout goes to a file on disk; the wall time from start to exit is taken, and the CPU time
(user + system, the process and its workers). Printed per grid: the median of RUNS runs in
seconds and in configurations (workloads; each gives a standard and a tiled row) per second,
the fastest and slowest run, the median CPU time, the load average before (other work on the
machine slows every run), and the output's size. Target: >= 200,000 configurations/s for CSV.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

GRIDS = {
    "a100": (
        "--n 64:65536:+64 --d 32:256:+32 --heads 1,8,16,32 --batch 1,2,4,8 --dtype fp16,bf16 "
        "--causal off,on --tiled fa1,fa2 --gpu a100"
    ),
    "h200": (
        "--n 64:65536:+64 --d 64,96,128,256 --heads 8,16,32,64 --kv-heads 1,8 --batch 1,2,4,8,16,32,64,128 "
        "--dtype fp16,bf16 --causal off,on --impl sdpa-flash --gpu h200"
    ),
}


def run_once(args: list[str], path: str, env: dict[str, str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one run."""
    with open(path, "wb") as out:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(args, stdout=out, stderr=subprocess.DEVNULL, env=env, check=True)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="timed runs per grid (median; default 3)")
    parser.add_argument("--grid", choices=(*GRIDS, "both"), default="both", help="which grid (default both)")
    parser.add_argument("--format", choices=("csv", "json", "jsonl"), default="csv", help="output format (default csv)")
    parser.add_argument("--dir", default=None, help="where the output files go (default: a temporary folder)")
    args = parser.parse_args()
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "100"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    names = list(GRIDS) if args.grid == "both" else [args.grid]
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        path = os.path.join(tmp, f"sweep.{args.format}")
        for name in names:
            cmd = [sys.executable, "-m", "memmodel", "sweep", *GRIDS[name].split(), "--format", args.format]
            run_once(
                [sys.executable, "-m", "memmodel", "sweep", "--n", "64", "--d", "64", "--format", "csv"], path, env
            )
            load = (
                f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores" if hasattr(os, "getloadavg") else ""
            )
            runs = [run_once(cmd, path, env) for _ in range(args.runs)]
            times, cpu = [r[0] for r in runs], [r[1] for r in runs]
            size = os.path.getsize(path)
            with open(path, "rb") as f:
                lines = sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 24), b""))
            rows = lines - {"csv": 1, "jsonl": 0, "json": 2}[args.format]  # a header; none; the brackets' lines
            med = statistics.median(times)
            print(f"{name}: memmodel sweep {GRIDS[name]} --format {args.format} > FILE  ({load} before)")
            print(
                f"  {rows:,} rows ({rows // 2:,} configurations), {size / 1e6:,.0f} MB; median {med:.2f} s of {args.runs} "
                f"(fastest {min(times):.2f} s, slowest {max(times):.2f} s) = {rows / 2 / med:,.0f} configurations/s "
                f"({rows / 2 / max(times):,.0f} to {rows / 2 / min(times):,.0f}); CPU median {statistics.median(cpu):.2f} s"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
