"""Turn a cuDNN fp8 probe's lines (``cudnn_fp8_probe.py``'s JSONL) into a ``memmodel validate`` record.

PyTorch's SDPA has no fp8 path, so ``memmodel validate`` cannot run cuDNN's ``sdpa_fp8`` graph
itself; the probe runs it through the cuDNN frontend. This writes what the probe measured as a
validate record (schema ``memmodel.validate/1``) so that ``memmodel validate --rescore`` scores it
with the model as it is now, like every other record:

    python validation/probes/cudnn_fp8_record.py PROBE.jsonl[.gz] CASES.txt RECORD.json.gz

Each probe line becomes the case of ``CASES.txt`` it ran (in order; the probe reads the same file),
its step ``attention`` timed as the probe timed it: CUDA events around calls of the graph queued back
to back, the median of 15 runs (the memset and the attention kernel and the gap between them; no
host time). The predictions stored are the model's when the record is written; ``--rescore``
predicts again.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path


def read_lines(path: Path) -> list[dict]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        print("usage: cudnn_fp8_record.py PROBE.jsonl[.gz] CASES.txt RECORD.json[.gz]", file=sys.stderr)
        return 2
    from memmodel.cases import parse_case
    from memmodel.gpu.validate import Record
    from memmodel.hardware import load_profile
    from memmodel.scoring import predicted_times

    probe, cases_file, out = (Path(a) for a in argv)
    lines = read_lines(probe)
    env = next((r for r in lines if r.get("section") == "env"), {})
    rows = [r for r in lines if r.get("section") == "sdpa"]
    specs = [line.strip() for line in cases_file.read_text().splitlines() if line.strip() and not line.startswith("#")]
    if len(specs) != len(rows):
        print(f"{probe}: {len(rows)} probe lines, but {cases_file} has {len(specs)} cases", file=sys.stderr)
        return 1
    profile = load_profile("h200")
    command = (
        f"cd validation/probes && python3 cudnn_fp8_probe.py OUT.jsonl ../cases/{cases_file.name} "
        f"(torch {env.get('torch', '?')}, cuDNN {env.get('cudnn_backend', '?')}, "
        f"cudnn-frontend {env.get('cudnn_frontend', '?')}); then validation/probes/cudnn_fp8_record.py"
    )
    record = Record(out, str(env.get("gpu", "?")), profile, command)
    for spec, row in zip(specs, rows):
        case = parse_case(spec)
        same = (case.batch, case.heads, case.n, case.d, case.dtype, bool(case.causal))
        ran = (row["batch"], row["heads"], row["n"], row["d"], row["dtype"], bool(row.get("causal")))
        if same != ran:
            print(f"{probe}: line {ran} is not case {spec}", file=sys.stderr)
            return 1
        entry = {"case": case.to_dict(), "predicted": predicted_times(case, profile)}
        if row.get("error") or not row.get("time_s"):
            entry.update(status="failed", reason=str(row.get("error", "no time"))[:500])
        else:
            entry["timing"] = {
                "case": case.to_dict(),
                "time_s": row["time_s"],
                "kernels": {"attention": row["time_s"]},
                "profiled_kernels": [{"name": k["name"], "time_s": k["us"] * 1e-6} for k in row.get("kernels", [])],
                "reps": 15,
                "queued": True,
                "max_rel_diff": row.get("max_rel_diff"),
            }
            entry["status"] = "ok"
        record.data["cases"].append(entry)
    record.data["probe"] = {"file": probe.name, "env": env}
    record.save()
    print(f"wrote {out}: {len(rows)} cases")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
