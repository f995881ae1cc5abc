"""Causal chunks (more keys than queries): bottom-right, as the model counts them, in the model's
choice of kernel, in the validation runner's masks and in a record scored again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from memmodel import Workload, load_profile
from memmodel.cases import parse_case
from memmodel.cli import cli
from memmodel.errors import WorkloadError
from memmodel.options import chunk_causal, options_for

H200 = load_profile("h200")
CHUNK = Workload(n=2048, n_kv=16384, batch=1, heads=32, kv_heads=8, d=128, dtype="bf16", causal=True)


def test_a_chunk_is_causal_with_fewer_queries_than_keys():
    assert chunk_causal(CHUNK)
    assert not chunk_causal(CHUNK.with_(causal=False))
    assert not chunk_causal(CHUNK.with_(n=16384))  # square: top-left and bottom-right agree
    assert not chunk_causal(CHUNK.with_(n=1))  # one query: bottom-right sees every key


def test_cudnn_is_refused_for_a_causal_chunk_and_auto_runs_flash():
    with pytest.raises(WorkloadError, match="causal_lower_right"):
        options_for("sdpa-cudnn", CHUNK, H200)
    opts = options_for("auto", CHUNK, H200)
    assert opts.implementation == "sdpa-flash"
    assert any("causal_lower_right" in n for n in opts.notes)
    # the square causal forward stays with cuDNN (what PyTorch picks on sm90 at bf16)
    assert options_for("auto", CHUNK.with_(n=16384), H200).implementation == "sdpa-cudnn"


def test_the_cli_says_why_in_one_line():
    r = CliRunner().invoke(
        cli, ["compare", "--n", "2048", "--n-kv", "16384", "--d", "128", "--causal", "--impl", "sdpa-cudnn"]
    )
    assert r.exit_code == 2
    assert "sdpa-flash or sdpa-efficient" in r.output and "Traceback" not in r.output


def test_the_runner_masks_bottom_right(monkeypatch):
    torch = pytest.importorskip("torch")
    from memmodel.gpu import run

    monkeypatch.setattr(run, "DEVICE", "cpu")
    case = parse_case("impl=sdpa-flash,n=4,n_kv=6,d=8,dtype=fp16,causal=1")
    assert run.causal_offset(case) == 2
    # query 0 (the first new token) sees keys 0..2, query 3 (the last) all six: 3, 2, 1, 0 hidden
    assert run.hidden_keys(case, torch.arange(4)).sum(dim=1).tolist() == [3, 2, 1, 0]
    square = parse_case("impl=sdpa-flash,n=4,d=8,dtype=fp16,causal=1")
    assert run.hidden_keys(square, torch.arange(4)).sum(dim=1).tolist() == [3, 2, 1, 0]


def test_a_record_case_the_model_now_refuses_is_listed_not_scored():
    """The first FP8 set measured a cuDNN chunk with is_causal (top-left: 84 us for what the model
    counts as a bottom-right chunk); scored again, it is listed as refused, the rest scored."""
    record = str(Path(__file__).resolve().parent.parent / "validation/h200/final/h200-fp8-check.json.gz")
    r = CliRunner().invoke(cli, ["validate", "--rescore", record, "--format", "json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output[r.output.index("{") :])
    refused = [e for e in out["cases"] if e.get("status") == "refused"]
    assert [e["case"]["n_kv"] for e in refused] == [16384]
    assert "causal_lower_right" in refused[0]["refused"]
    assert sum(e.get("status") == "ok" for e in out["cases"]) == 11


def test_a_grid_of_chunks_runs_flash_under_auto_and_a_mixed_one_is_refused():
    import numpy as np

    chunks = CHUNK.with_(n=np.array([512, 2048]))
    assert options_for("auto", chunks, H200).implementation == "sdpa-flash"
    mixed = CHUNK.with_(n=np.array([2048, 16384]))  # a chunk and a square prefill
    with pytest.raises(WorkloadError, match="evaluate them apart"):
        options_for("auto", mixed, H200)


def test_a_sweep_runs_its_chunks_through_flash_and_its_square_row_through_cudnn():
    import csv
    import io

    r = CliRunner().invoke(
        cli,
        ["-q", "sweep", "--n", "2048,8192", "--n-kv", "8192", "--causal", "--d", "128", "--dtype", "bf16",
         "--gpu", "h200", "--format", "csv"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    rows = [row for row in csv.DictReader(io.StringIO(r.output)) if row["algorithm"] == "tiled"]
    assert {int(row["n"]): row["implementation"] for row in rows} == {2048: "sdpa-flash", 8192: "sdpa-cudnn"}
