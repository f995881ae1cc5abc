"""The table of validation/h200/flex-bwd-probe/README.md: per case of a flex backward probe, the
template kernel's HBM bytes (Nsight Compute) against memmodel's count now, and its local-memory
(register spill) traffic; the stack a thread from the compile, where the record has it in case order.

    python validation/probes/flex_bwd_probe_table.py NCU.csv[.gz] CASES [RES-USAGE]
"""

from __future__ import annotations

import gzip
import re
import sys
from pathlib import Path

from memmodel import load_profile
from memmodel.cases import parse_case
from memmodel.gpu.ncu import parse_csv, split_placements
from memmodel.scoring import predicted_kernels

LOCAL = "l1tex__t_bytes_pipe_lsu_mem_local_op_"


def stacks(path: str | None) -> list[int]:
    """The backward template's stack bytes a thread, in compile order (``-printf '%T@'`` listings only)."""
    if path is None:
        return []
    text = Path(path).read_text()
    if not re.match(r"^\d+\.\d+ ", text):
        return []
    return [int(m) for m in re.findall(r"flex_attention_backward_\d+:\n\s+REG:\d+ STACK:(\d+)", text)]


def main(csv_path: str, cases_path: str, res_path: str | None = None) -> None:
    opener = gzip.open if csv_path.endswith(".gz") else open
    with opener(csv_path, "rt") as fh:
        kernels = parse_csv(fh.read())
    lines = [ln.strip() for ln in Path(cases_path).read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    cases = [parse_case(ln) for ln in lines]
    runs = split_placements(kernels, [c.id for c in cases], 1)
    stack = stacks(res_path)
    profile = load_profile("h200")
    print(
        "| case | counted read (MB) | read (MB) | write (MB) | local loads (MB) | of them L1 misses | local stores (MB) | stack (B) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for i, case in enumerate(cases):
        model = next(k for k in predicted_kernels(case, profile) if k.name == "flex_attention_backward")
        counted = sum(float(t.bytes) for t in model.transfers if t.level == "hbm" and t.direction == "read")
        m = next(k for k in runs[case.id][0] if k.name.startswith("triton_tem") and "backward" in k.name).metrics
        miss = m.get(LOCAL + "ld_lookup_miss.sum")
        cells = [
            case.id,
            f"{counted / 1e6:.1f}",
            f"{m['dram__bytes_read.sum'] / 1e6:.1f}",
            f"{m['dram__bytes_write.sum'] / 1e6:.1f}",
            f"{m[LOCAL + 'ld.sum'] / 1e6:.1f}",
            "—" if miss is None else f"{miss / 1e6:.1f}",
            f"{m[LOCAL + 'st.sum'] / 1e6:.1f}",
            str(stack[i]) if len(stack) == len(cases) else "—",
        ]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(*sys.argv[1:4])
