"""Start-up cost: `memmodel compare --n 4096 --d 768` as a whole process, against the bare
imports it cannot avoid (`python -c "import numpy, yaml, click, rich"`).

    python benchmarks/bench_startup.py [--runs 21]

Both commands run alternately, RUNS times each, after warm-up runs; the medians and their
ratio are printed (target: ≤ 1.5×), of the wall time and of the CPU time (user + system) each
process used, which other work on a shared machine inflates less; with the spread (fastest,
slowest) and the load average. Bytecode is cached first (PYTHONDONTWRITEBYTECODE is
cleared for this script's children), as it is after `pip install`.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time

COMMAND = [sys.executable, "-m", "memmodel", "compare", "--n", "4096", "--d", "768"]
BASELINE = [sys.executable, "-c", "import numpy, yaml, click, rich"]


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21, help="timed runs of each command (default 21)")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(NO_COLOR="1", COLUMNS="100")
    for _ in range(3):  # warm-up: caches bytecode and the OS file cache
        timed(COMMAND, env)
        timed(BASELINE, env)
    ours, base = [], []
    load = os.getloadavg()[0]
    for _ in range(args.runs):
        ours.append(timed(COMMAND, env))
        base.append(timed(BASELINE, env))
    print(f"{args.runs} runs each, alternating; load average {load:.2f} on {os.cpu_count()} cores before")
    for i, what in ((0, "wall"), (1, "CPU ")):
        a, b = [t[i] for t in ours], [t[i] for t in base]
        m_ours, m_base = statistics.median(a), statistics.median(b)
        print(
            f"{what}: memmodel compare --n 4096 --d 768 median {m_ours * 1e3:6.1f} ms ({min(a) * 1e3:.0f}-{max(a) * 1e3:.0f}); "
            f'python -c "import numpy, yaml, click, rich" median {m_base * 1e3:6.1f} ms ({min(b) * 1e3:.0f}-{max(b) * 1e3:.0f}); '
            f"ratio {m_ours / m_base:.2f}× (target ≤ 1.5×)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
