"""``memmodel validate --rescore A B ...``: several records, one table with a row per record."""

from __future__ import annotations

import gzip
import json

from memmodel.report.scoring import headline

from .conftest import REPO

FINAL = REPO / "validation" / "h200" / "final"
ONE, TWO = FINAL / "h200-default.json.gz", FINAL / "h200-training.json.gz"


def test_headline_rows_are_the_records_own_statistics():
    summary = {
        "cases": {"ok": 3, "failed": 1},
        "hbm_bytes": {"model": {"median_abs": 0.012, "max_abs": 0.25, "n": 7}},
        "time": {"median_abs": 0.031, "max_abs": 0.1, "n": 5},
    }
    lines = headline([("r", summary)]).splitlines()
    assert lines[0].startswith("| record | cases | HBM bytes")
    # 0.012 -> 1.2%, 0.25 -> 25.0% over 7 kernels; only the 3 cases that ran count; no training step
    assert lines[2] == "| r | 3 | 1.2% / 25.0% (7) | 3.1% / 10.0% (5) | — |"


def test_several_records_print_one_row_each_as_each_alone_scores(run):
    r = run("validate", "--rescore", str(ONE), str(TWO), "--format", "summary")
    assert r.exit_code == 0, r.stderr
    rows = [line for line in r.stdout.splitlines() if line.startswith("| h200-")]
    assert [row.split(" | ")[0] for row in rows] == ["| h200-default", "| h200-training"]
    alone = json.loads(run("validate", "--rescore", str(TWO), "--format", "json").stdout)["summary"]
    st = alone["step_time"]
    assert rows[1].endswith(f"| {st['median_abs'] * 100:.1f}% / {st['max_abs'] * 100:.1f}% ({st['n']}) |")
    both = json.loads(run("validate", "--rescore", str(ONE), str(TWO), "--format", "json").stdout)
    assert [b["record"] for b in both] == [str(ONE), str(TWO)] and both[1]["summary"] == alone
    table = run("validate", "--rescore", str(ONE), str(TWO))
    assert table.exit_code == 0 and "h200-default" in table.stdout and "h200-training" in table.stdout


def test_a_plain_and_a_compressed_record_read_alike(run, tmp_path):
    plain = tmp_path / "h200-default.json"
    plain.write_bytes(gzip.decompress(ONE.read_bytes()))
    (tmp_path / "h200-default.ncu.csv").write_bytes(gzip.decompress((FINAL / "h200-default.ncu.csv.gz").read_bytes()))
    a = run("validate", "--rescore", str(plain), "--gpu", str(REPO / "validation/h200/h200-calibrated.yaml"))
    b = run("validate", "--rescore", str(ONE), "--gpu", str(REPO / "validation/h200/h200-calibrated.yaml"))
    assert a.exit_code == 0 and a.stdout == b.stdout and "fa2_fwd bytes" in a.stdout


def test_records_without_rescore_or_with_output_are_refused(run, tmp_path):
    r = run("validate", str(ONE))
    assert r.exit_code == 2 and "records are given after --rescore" in r.stderr
    r = run("validate", "--rescore", str(ONE), str(TWO), "--output", str(tmp_path / "x.json"))
    assert r.exit_code == 2 and "several records print one table" in r.stderr


def test_a_record_named_gz_is_written_compressed(run, tmp_path):
    from memmodel.fileio import for_file, read_json
    from memmodel.gpu.validate import Record
    from memmodel.hardware import load_profile

    assert for_file("r.json", "{}\n") == "{}\n"
    assert gzip.decompress(for_file("r.json.gz", "{}\n")) == b"{}\n"
    assert for_file("r.json.gz", "{}\n") == for_file("r.json.gz", "{}\n")  # no time stamp: reproducible
    record = Record(tmp_path / "r.json.gz", "dev", load_profile("h200"), "memmodel validate")
    record.save()
    assert read_json(tmp_path / "r.json.gz")["device"] == "dev"
    assert record.trace_path() == tmp_path / "r.ncu.csv.gz"
    assert Record(tmp_path / "r.json", "dev", load_profile("h200"), "x").trace_path() == tmp_path / "r.ncu.csv"
    out = tmp_path / "again.json.gz"
    r = run("validate", "--rescore", str(ONE), "--output", str(out), "--format", "stats")
    assert r.exit_code == 0, r.stderr
    assert (
        read_json(out)["summary"]
        == json.loads(run("validate", "--rescore", str(ONE), "--format", "json").stdout)["summary"]
    )
