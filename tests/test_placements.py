"""``validate --placements``: each case profiled with its inputs at several places in memory,
scored at the median (probe 12: in the L2's knee one kernel's HBM bytes move by tens of percent
with its inputs' addresses alone)."""

from __future__ import annotations

import json
import shutil

import pytest

from memmodel.cases import Case, parse_case
from memmodel.fileio import read_json, read_text
from memmodel.gpu.ncu import (
    PLACEMENT_OFFSETS,
    MeasuredKernel,
    NcuParseError,
    median_kernels,
    parse_csv,
    split_by_marker,
    split_placements,
)
from memmodel.gpu.validate import rescore
from memmodel.hardware import load_profile
from memmodel.scoring import placement_spread

from .conftest import REPO

RUN = REPO / "validation" / "h200" / "run-2"
RECORD = RUN / "h200-validate.json.gz"
TRACE = RUN / "h200-validate.ncu.csv.gz"
HEADER = (
    '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
    '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"'
)


def to_csv(kernels: list[MeasuredKernel]) -> str:
    """Nsight Compute's --csv form of ``kernels`` (renumbered in order)."""
    lines = [HEADER]
    for i, k in enumerate(kernels):
        for metric, value in k.metrics.items():
            lines.append(
                f'"{i}","1","python","h","{k.name}","1","7","(128, 1, 1)","(8, 1, 1)","0","9.0","s",'
                f'"{metric}","byte","{value:,.0f}"'
            )
    return "\n".join(lines) + "\n"


def marked(kernels: list[MeasuredKernel]) -> list[MeasuredKernel]:
    tiny = {"dram__bytes_read.sum": 0.0}
    return [MeasuredKernel(0, "memmodel_begin", tiny), *kernels, MeasuredKernel(0, "memmodel_end", tiny)]


def fa2(read: float, write: float = 1000.0) -> MeasuredKernel:
    return MeasuredKernel(0, "flash_fwd_kernel", {"dram__bytes_read.sum": read, "dram__bytes_write.sum": write})


def test_split_placements_and_take_medians():
    # two cases, three placements each, one kernel per run
    reads = {"a": [300.0, 100.0, 200.0], "b": [10.0, 40.0, 20.0]}
    trace = [k for case in ("a", "b") for r in reads[case] for k in marked([fa2(r)])]
    groups = split_placements(parse_csv(to_csv(trace)), ["a", "b"], 3)
    assert [[k.dram_read_bytes for k in run] for run in groups["a"]] == [[300.0], [100.0], [200.0]]
    (m,) = median_kernels(groups["a"])
    assert (m.dram_read_bytes, m.dram_write_bytes) == (200.0, 1000.0)
    (m,) = median_kernels(groups["b"])
    assert m.dram_read_bytes == 20.0
    # an even count: the mean of the middle two (10, 20, 40, 50 → 30)
    (m,) = median_kernels([[fa2(x)] for x in (50.0, 10.0, 40.0, 20.0)])
    assert m.dram_read_bytes == 30.0
    # one marked run short of 2 cases × 3 placements
    with pytest.raises(NcuParseError, match="marked cases"):
        split_placements(parse_csv(to_csv(trace[:-3])), ["a", "b"], 3)


def test_placements_that_launched_different_kernels():
    fill = MeasuredKernel(0, "fill", {"dram__bytes_read.sum": 1.0})
    # a one-off kernel in one placement (the first run of a process) is left out
    (m,) = median_kernels([[fa2(1.0), fill], [fa2(2.0)], [fa2(3.0)]])
    assert (m.name, m.dram_read_bytes) == ("flash_fwd_kernel", 2.0)
    # the same kernels in another order are not comparable
    with pytest.raises(NcuParseError, match="different kernels"):
        median_kernels([[fa2(1.0), fill], [fill, fa2(2.0)]])


def test_placement_spread_from_the_errors():
    # predicted 120 against measured 100, 80, 150: errors +20 %, +50 %, −20 %; spread 150/80 − 1
    errors = [120 / 100 - 1, 120 / 80 - 1, 120 / 150 - 1]
    assert placement_spread(errors) == pytest.approx(150 / 80 - 1)


def test_offsets_are_distinct_and_aligned():
    assert len(set(PLACEMENT_OFFSETS)) == len(PLACEMENT_OFFSETS) == 8
    assert PLACEMENT_OFFSETS[0] == 0
    assert all(o % 4096 == 0 for o in PLACEMENT_OFFSETS)  # whole pages of 4 KiB: every dtype's alignment


def test_rescore_a_record_profiled_at_three_placements():
    """The real trace of run 2 with each case's run repeated at three placements that read 0.8×,
    1× and 1.3× the measured bytes: scored at the median, the errors are the record's own."""
    data = read_json(RECORD)
    h200 = load_profile("h200")
    ok = [Case.from_dict(e["case"]) for e in data["cases"] if e["status"] == "ok"]
    one = rescore(data, read_text(TRACE), h200)
    groups = split_by_marker(parse_csv(read_text(TRACE)), [c.id for c in ok])
    trace = []
    for case in ok:
        for factor in (0.8, 1.0, 1.3):
            scaled = [
                MeasuredKernel(
                    k.id, k.name, {m: (v * factor if m == "dram__bytes_read.sum" else v) for m, v in k.metrics.items()}
                )
                for k in groups[case.id]
            ]
            trace += marked(scaled)
    three = rescore({**data, "ncu": {**data.get("ncu", {}), "placements": 3}}, to_csv(trace), h200)
    before = [b["error"] for e in one["cases"] for b in e.get("bytes", [])]
    after = [b["error"] for e in three["cases"] for b in e.get("bytes", [])]
    assert after == pytest.approx(before, rel=1e-3, abs=1e-4)  # the CSV's bytes are rounded to 1 B
    row = next(b for e in three["cases"] for b in e.get("bytes", []) if b["kernel"] == "fa2_fwd")
    # error = predicted / (measured reads + writes credited) − 1; the credit c (writes) is the
    # same at every placement, the reads r scale: predicted / (f·r + c) − 1
    p = row["predicted_hbm_read_bytes"] + row["predicted_hbm_write_bytes"]
    r = row["measured_hbm_read_bytes"]
    c = p / (1 + row["error"]) - r
    expected = [p / (f * r + c) - 1 for f in (0.8, 1.0, 1.3)]
    assert row["placement_errors"] == pytest.approx(expected, rel=1e-3, abs=1e-4)
    s = three["summary"]["hbm_bytes"]
    spreads = [placement_spread(b["placement_errors"]) for e in three["cases"] for b in e.get("bytes", [])]
    assert s["placement_spread"]["max_abs"] == pytest.approx(max(spreads))
    assert max(spreads) <= 1.3 / 0.8 - 1 + 1e-9  # the writes' credit narrows the spread of the totals
    inside = sum(
        min(b["placement_errors"]) <= 0 <= max(b["placement_errors"]) for e in three["cases"] for b in e["bytes"]
    )
    assert s["within_placements"] == inside > 0


def test_rescore_cli_prints_the_placements(run, tmp_path):
    data = read_json(RECORD)
    ok = [Case.from_dict(e["case"]) for e in data["cases"] if e["status"] == "ok"]
    groups = split_by_marker(parse_csv(read_text(TRACE)), [c.id for c in ok])
    trace = [k for c in ok for _ in range(2) for k in marked(groups[c.id])]
    (tmp_path / "rec.json").write_text(json.dumps({**data, "ncu": {"status": "ok", "placements": 2}}))
    (tmp_path / "rec.ncu.csv").write_text(to_csv(trace))
    r = run("validate", "--rescore", str(tmp_path / "rec.json"), "--gpu", "h200", "--format", "summary")
    assert r.exit_code == 0, r.stderr
    assert "| HBM bytes, memmodel, against each placement |" in r.stdout
    assert "profiled with its inputs at 2 places in memory" in r.stdout
    assert "error at each placement |" in r.stdout


def test_placements_need_ncu(run):
    r = run("validate", "--placements", "3", "--case", "impl=sdpa-flash,n=1024,d=64")
    assert r.exit_code == 2
    assert "--placements needs --ncu" in r.stderr
    r = run("validate", "--placements", "9", "--ncu", "--case", "impl=sdpa-flash,n=1024,d=64")
    assert r.exit_code == 2 and "9" in r.stderr
    r = run("validate", "--gpus", "2", "--ncu", "--placements", "3", "--case", "scheme=ring,n=16384,d=128")
    assert r.exit_code == 2 and "not with --gpus" in r.stderr and "Traceback" not in r.stderr


def test_inputs_at_an_offset_on_the_cpu(monkeypatch):
    torch = pytest.importorskip("torch")
    from memmodel.gpu import run as gpu_run

    monkeypatch.setattr(gpu_run, "DEVICE", "cpu")
    case = parse_case("impl=sdpa-flash,batch=2,heads=4,kv_heads=2,n=64,n_kv=96,d=32,dtype=fp16,backward=1")
    q, k, v = gpu_run.make_inputs(case, offset=64 << 10)
    assert [tuple(t.shape) for t in (q, k, v)] == [(2, 4, 64, 32), (2, 2, 96, 32), (2, 2, 96, 32)]
    assert all(t.is_leaf and t.requires_grad and t.is_contiguous() for t in (q, k, v))
    # one allocation: Q starts 64 KiB in, K right after Q, V right after K
    base = q.untyped_storage().data_ptr()
    assert q.data_ptr() - base == 64 << 10
    assert k.data_ptr() - q.data_ptr() == 2 * 4 * 64 * 32 * 2
    assert v.data_ptr() - k.data_ptr() == 2 * 2 * 96 * 32 * 2
    assert k.untyped_storage().data_ptr() == base
    assert 0.8 < float(q.detach().float().std()) < 1.2  # standard normal, filled
    assert torch.isfinite(v.float()).all()


def test_rescore_reads_a_compressed_trace(run, tmp_path):
    import gzip

    (tmp_path / "rec.json").write_bytes(gzip.decompress(RECORD.read_bytes()))  # a plain record, a compressed trace
    shutil.copy(TRACE, tmp_path / "rec.ncu.csv.gz")
    r = run("validate", "--rescore", str(tmp_path / "rec.json"), "--gpu", "h200", "--format", "stats")
    plain = run("validate", "--rescore", str(RECORD), "--gpu", "h200", "--format", "stats")
    assert r.exit_code == 0, r.stderr
    assert "| HBM bytes, memmodel |" in r.stdout and r.stdout == plain.stdout
    # a file named .gz that is not gzip: one line naming it, exit 2
    (tmp_path / "rec.ncu.csv.gz").write_text("not gzip")
    r = run("validate", "--rescore", str(tmp_path / "rec.json"), "--gpu", "h200")
    assert r.exit_code == 2
    assert "rec.ncu.csv.gz: not a gzip file" in r.stderr and "Traceback" not in r.stderr


def test_extra_ncu_metrics_are_checked_deduplicated_and_put_on_the_command_line(monkeypatch, tmp_path):
    import subprocess

    from memmodel.gpu import validate as gv
    from memmodel.gpu.ncu import METRICS, command, extra_metrics

    assert extra_metrics("lts__t_sectors_op_red.sum, lts__t_sectors_op_red.sum,dram__bytes_read.sum") == (
        "lts__t_sectors_op_red.sum",  # once, and dram__bytes_read.sum is collected already
    )
    for bad in ("", " , ", "lts_x.sum", "lts__x; rm -rf /", "LTS__T.sum"):
        with pytest.raises(ValueError):
            extra_metrics(bad)
    line = command(["python3", "x.py"], metrics=("lts__t_sectors_op_atom.sum",))
    assert line[line.index("--metrics") + 1] == ",".join((*METRICS, "lts__t_sectors_op_atom.sum"))
    # measure_bytes hands them to ncu
    seen = {}

    def fake_run(args, **kw):
        seen["args"] = args
        return subprocess.CompletedProcess(args, 1, "", "ncu: no GPU")

    monkeypatch.setattr(gv.shutil, "which", lambda name: "/usr/bin/ncu")
    monkeypatch.setattr(gv.subprocess, "run", fake_run)
    record = gv.Record(tmp_path / "r.json", "cpu", load_profile("h200"), "memmodel validate")
    case = parse_case("impl=sdpa-flash,n=1024,d=64")
    gv.measure_bytes([case], load_profile("h200"), record, 1, ("lts__t_sectors_op_red.sum",))
    assert "lts__t_sectors_op_red.sum" in seen["args"][seen["args"].index("--metrics") + 1]
    assert record.data["ncu"]["status"] == "failed"


def test_ncu_metrics_need_ncu_and_real_names(run):
    case = ["--case", "impl=sdpa-flash,n=1024,d=64"]
    r = run("validate", "--ncu-metrics", "lts__t_sectors_op_red.sum", *case)
    assert r.exit_code == 2 and "--ncu-metrics needs --ncu" in r.stderr
    r = run("validate", "--ncu", "--ncu-metrics", "not a metric", *case)
    assert r.exit_code == 2 and "is not an Nsight Compute metric name" in r.stderr
    assert "Traceback" not in r.stderr
