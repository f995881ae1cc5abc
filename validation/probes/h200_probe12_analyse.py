"""Probe 12's table: each case's HBM reads at each input offset in each process, their spread,
and the model's prediction (bundled ``h200`` profile).

    python validation/probes/h200_probe12_analyse.py [validation/h200/probe-12/data]

Every process launches the same cases at the same offsets in the same order
(``h200_probe12_knee_repeat.py``; the order is written beside the Nsight Compute CSVs).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from memmodel.cases import parse_case
from memmodel.fileio import read_text
from memmodel.gpu.ncu import parse_csv
from memmodel.hardware import load_profile
from memmodel.scoring import predicted_kernels

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from h200_probe12_knee_repeat import CASES, OFFSETS  # noqa: E402

DATA = HERE.parent / "h200" / "probe-12" / "data"


def main(folder: Path) -> int:
    runs = sorted(folder.glob("ncu-*.csv*"))
    reads: dict[str, list[list[float]]] = {}
    for run in runs:
        kernels = parse_csv(read_text(run))
        it = iter(kernels)
        for spec in CASES:
            case = parse_case(spec)
            row = [next(it).dram_read_bytes for _ in OFFSETS]
            reads.setdefault(case.id, []).append(row)
    profile = load_profile("h200")
    print(f"{len(runs)} processes × {len(OFFSETS)} offsets ({', '.join(f'{o >> 10} KiB' for o in OFFSETS)})\n")
    print(
        "| case | HBM reads, MB (min – max) | spread (max/min − 1) | across offsets, one process | model | model against the median |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for spec in CASES:
        case = parse_case(spec)
        rows = reads[case.id]
        flat = [x for r in rows for x in r]
        lo, hi, med = min(flat), max(flat), statistics.median(flat)
        within = max(max(r) / min(r) - 1 for r in rows)
        model = predicted_kernels(case, profile, "cold")[0].bytes(level="hbm", direction="read")
        print(
            f"| {case.id} | {lo / 1e6:.1f} – {hi / 1e6:.1f} | `{(hi / lo - 1) * 100:.1f} %` | "
            f"`{within * 100:.1f} %` | {model / 1e6:.1f} | `{(model / med - 1) * 100:+.1f} %` |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else DATA))
