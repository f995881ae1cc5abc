"""Start-up cost: `memmodel compare --n 4096 --d 768` as a whole process, against the bare
imports it cannot avoid (`python -c "import numpy, yaml, click, rich"`).

    python benchmarks/bench_startup.py [--runs 21]

Both commands run alternately, RUNS times each, after warm-up runs; the medians and their
ratio are printed (target: ≤ 1.5×). Bytecode is cached first (PYTHONDONTWRITEBYTECODE is
cleared for this script's children), as it is after `pip install`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

COMMAND = [sys.executable, "-m", "memmodel", "compare", "--n", "4096", "--d", "768"]
BASELINE = [sys.executable, "-c", "import numpy, yaml, click, rich"]


def timed(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


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
    for _ in range(args.runs):
        ours.append(timed(COMMAND, env))
        base.append(timed(BASELINE, env))
    m_ours, m_base = statistics.median(ours), statistics.median(base)
    print(f"memmodel compare --n 4096 --d 768        median {m_ours * 1e3:7.1f} ms  ({args.runs} runs)")
    print(f'python -c "import numpy, yaml, click, rich"  median {m_base * 1e3:7.1f} ms  ({args.runs} runs)')
    print(f"ratio {m_ours / m_base:.2f}× (target ≤ 1.5×)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
