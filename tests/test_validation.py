"""Validation on the CPU: case planning, ncu CSV parsing on a real H200 trace, scoring, records."""

from __future__ import annotations

import json
import shutil

import pytest

from memmodel.cases import DEVICE_PROFILES, Case, default_cases, parse_case, profile_for_device
from memmodel.errors import WorkloadError
from memmodel.fileio import read_json, read_text
from memmodel.gpu.ncu import NcuParseError, parse_csv, split_by_marker
from memmodel.hardware import available, load_profile
from memmodel.scoring import measured_ctas_per_sm, score_case, summarize_record

from .conftest import REPO

RUN = REPO / "validation" / "h200" / "run-2"
RECORD = RUN / "h200-validate.json.gz"
TRACE = RUN / "h200-validate.ncu.csv.gz"


def test_case_specs_and_ids():
    c = parse_case("impl=sdpa-flash,batch=4,heads=32,kv_heads=8,n=1,n_kv=32768,d=128,causal=0")
    assert c.id == "sdpa-flash/b4h32kv8n1nkv32768d128/fp16"
    assert (
        parse_case("impl=triton,n=64,d=64,block_q=64,block_kv=32,causal=1").id
        == "triton/b1h1n64d64/fp16-causal-bq64bkv32"
    )
    for bad, msg in [
        ("n=64", "needs at least n= and d="),
        ("impl=cuda,n=64,d=64", "unknown kernel implementation 'cuda'"),
        ("n=x,d=64", "case n='x' is not an integer"),
        ("n=64,d=64,speed=9", "unknown case key 'speed'"),
        ("n64", "expected key=value"),
        ("n=64,d=64,heads=8,kv_heads=3", "kv_heads"),
    ]:
        with pytest.raises(WorkloadError, match=msg):
            parse_case(bad)


def test_spec_round_trips_through_parse_case():
    for c in default_cases():
        assert parse_case(c.spec()) == c


def test_default_cases_cover_what_the_issue_asks():
    cases = default_cases()
    assert len({c.id for c in cases}) == len(cases)
    assert {c.impl for c in cases} == {"standard", "sdpa-flash", "sdpa-cudnn", "sdpa-efficient", "triton"}
    assert {c.d for c in cases} >= {64, 128} and {c.dtype for c in cases} >= {"fp16", "bf16"}
    assert any(c.causal for c in cases) and any(c.kv_heads_ != c.heads for c in cases) and any(c.n == 1 for c in cases)
    assert min(c.n for c in cases if c.n > 1) <= 1024 and max(c.n for c in cases if c.heads > 1) >= 16384
    # one long sequence whose K/V (one head) exceed the H200's 60 MiB L2
    assert any(2 * c.n_kv_ * c.d * 2 > 60 * 2**20 and c.heads == 1 for c in cases)


def test_profile_for_device():
    assert profile_for_device("NVIDIA H200") == "h200"
    assert profile_for_device("NVIDIA H100 80GB HBM3") == "h100-sxm"
    assert profile_for_device("NVIDIA H100 PCIe") == "h100-pcie"
    assert profile_for_device("NVIDIA A100-SXM4-40GB") == "a100-40gb"
    assert profile_for_device("NVIDIA A100 80GB PCIe") == "a100-pcie"  # torch's name for the 300 W card
    assert profile_for_device("NVIDIA A100-SXM4-80GB") == "a100"
    # the GPUs of issue 28's item 4 by the names torch gives them: none falls to a shorter name's profile
    names = {
        "NVIDIA H20": "h20",
        "NVIDIA H100 NVL": "h100-nvl",
        "NVIDIA GB200": "gb200",
        "NVIDIA B200": "b200",
        "NVIDIA GB300": "gb300",
        "NVIDIA B300 SXM6 AC": "b300",
        "NVIDIA GeForce RTX 5090": "rtx5090",
        "NVIDIA RTX PRO 6000 Blackwell Server Edition": "rtx-pro-6000",
        "AMD Instinct MI300X": "mi300x",
        "AMD Instinct MI325X": "mi325x",
        "AMD Instinct MI355X": "mi355x",
    }
    assert {name: profile_for_device(name) for name in names} == names
    assert profile_for_device("Some Future GPU") is None
    # every fragment reaches its own profile (no earlier, shorter fragment shadows it), a bundled one
    assert all(profile_for_device(f"NVIDIA {fragment}") == profile for fragment, profile in DEVICE_PROFILES)
    assert {profile for _, profile in DEVICE_PROFILES} - {None} <= set(available())
    assert profile_for_device("NVIDIA L40") is None and profile_for_device("NVIDIA L4") == "l4"


def test_parse_a_real_ncu_trace_and_split_it_by_marker():
    kernels = parse_csv(read_text(TRACE))
    data = read_json(RECORD)
    ids = [e["case"]["id"] for e in data["cases"] if e["status"] == "ok"]
    groups = split_by_marker(kernels, ids)
    fa2 = groups["sdpa-flash/b4h16n4096d64/fp16"]
    assert [k.name.split("<")[0] for k in fa2 if "flash" in k.name] == ["void pytorch_flash::flash_fwd_kernel"]
    main = next(k for k in fa2 if "flash_fwd_kernel" in k.name)
    # Q, K, V: 3 × 4·16·4096·64·2 B = 100,663,296 B; measured with ncu (cold L2): 100.9 MB
    assert main.dram_read_bytes == pytest.approx(100_663_296, rel=0.005)
    assert measured_ctas_per_sm(fa2, 132) == 2
    with pytest.raises(NcuParseError, match="marked cases"):
        split_by_marker(kernels, ids[:-1])
    with pytest.raises(NcuParseError, match="no ncu CSV header"):
        parse_csv("==PROF== nothing\n")


def test_scores_on_the_real_trace():
    h200 = load_profile("h200")
    data = read_json(RECORD)
    ok = [Case.from_dict(e["case"]) for e in data["cases"] if e["status"] == "ok"]
    groups = split_by_marker(parse_csv(read_text(TRACE)), [c.id for c in ok])
    by_id = {c.id: c for c in ok}
    (s,) = score_case(by_id["sdpa-flash/b4h16n4096d64/fp16"], groups["sdpa-flash/b4h16n4096d64/fp16"], h200)
    assert abs(s.error) < 0.01  # within 1 %
    assert s.paper_error > 10  # the paper's count: T_r = 32 passes over K and V, 15× too many bytes
    # the long sequence: K+V (67 MB) > 30 MiB, 1024 Q blocks in ⌈1024/264⌉ = 4 waves, each read
    # 1 + f·live/L2 times as the waves drift apart: f = 0.0366 · 3.88 / 2 = 0.0710, live = 67.1 MB
    # of the 62.9 MB L2 (every such re-read misses): 4 · 1.0758 = 4.303 reads
    (s,) = score_case(by_id["sdpa-flash/b1h1n131072d128/fp16"], groups["sdpa-flash/b1h1n131072d128/fp16"], h200)
    assert s.predicted_read == pytest.approx(33_554_432 + 4.303 * 67_108_864, rel=1e-3)
    assert -0.15 < s.error < 0
    assert s.compulsory_error < -0.5  # compulsory bytes miss the re-reads
    std = score_case(by_id["standard/b4h16n4096d64/fp16"], groups["standard/b4h16n4096d64/fp16"], h200)
    assert [x.kernel for x in std] == ["qk", "softmax", "pv"]
    assert max(abs(x.error) for x in std) < 0.01


def test_summary_of_the_committed_record():
    data = read_json(RECORD)
    s = summarize_record(data)
    assert s["cases"] == {"ok": 22}
    assert s["hbm_bytes"]["model"]["median_abs"] < 0.05
    assert s["hbm_bytes"]["paper"]["max_abs"] > 10
    assert summarize_record({"cases": []})["time"] is None


def test_rescore_cli_writes_a_record_a_summary_and_a_plot(run, tmp_path):
    record = tmp_path / "rec.json.gz"
    shutil.copy(RECORD, record)
    shutil.copy(TRACE, tmp_path / "rec.ncu.csv.gz")
    out = tmp_path / "new.json"
    r = run("validate", "--rescore", str(record), "--gpu", "h200", "--output", str(out), "--format", "markdown")
    assert r.exit_code == 0, r.stderr
    assert "# Validation on NVIDIA H200" in r.stdout and "| HBM bytes, memmodel |" in r.stdout
    new = json.loads(out.read_text())
    assert new["rescored"] and new["summary"]["hbm_bytes"]["model"]["n"] == 35
    pytest.importorskip("matplotlib")
    png = tmp_path / "v.png"
    r = run("validate", "--rescore", str(record), "--gpu", "h200", "--plot", str(png))
    assert r.exit_code == 0, r.stderr
    assert png.stat().st_size > 10_000 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_validate_errors_without_a_gpu(run, tmp_path):
    r = run("validate", "--case", "impl=standard,n=64,d=64")
    assert r.exit_code == 1
    assert r.stderr.startswith("memmodel: error: ") and len(r.stderr.strip().splitlines()) == 1
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    r = run("validate", "--rescore", str(bad))
    assert r.exit_code == 2 and "not a memmodel validate record" in r.stderr
    r = run("validate", "--list", "--case", "impl=nope,n=1,d=1")
    assert r.exit_code == 2 and "unknown kernel implementation" in r.stderr
    r = run("validate", "--list", "--impl", "triton")
    assert r.exit_code == 0 and all(line.startswith("triton/") for line in r.stdout.split())


def test_time_rows_carry_achieved_rates():
    from memmodel.gpu.validate import rescore
    from memmodel.scoring import time_errors

    data = rescore(read_json(RECORD), read_text(TRACE), load_profile("h200"))
    entry = next(e for e in data["cases"] if e["case"]["id"] == "standard/b4h16n4096d64/fp16")
    rows = {r["step"]: r for r in time_errors(entry)}
    # softmax: 2 × 4·16·4096²·2 B = 4,294,967,296 B of HBM traffic over the measured time
    softmax = rows["softmax"]
    assert softmax["achieved_hbm_bytes_per_s"] == pytest.approx(4_294_967_296 / softmax["measured_s"])
    bandwidth = load_profile("h200").hbm.bandwidth_bytes_per_s  # the calibration's 4.622 TB/s
    assert softmax["hbm_share"] == pytest.approx(softmax["achieved_hbm_bytes_per_s"] / bandwidth)
    assert 0 < rows["qk"]["flops_share"] < 1
