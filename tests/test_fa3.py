"""FlashAttention-3 (``--impl fa3``): its tiles and backward as its Hopper code launches them, its
runner (flash_attn.cute) planned on the CPU, ``calibrate --impl fa3`` and the merge of its run
into the H200 profile. The GPU test at the end runs where CUDA and flash-attn-4 are present."""

from __future__ import annotations

import copy
import gzip
import json

import pytest

from memmodel.backward import backward_tile_rule
from memmodel.calibration import fits, plan
from memmodel.calibration.merge import cite_impl, merge_impl
from memmodel.cases import parse_case
from memmodel.errors import MemmodelError, RuntimeFailure
from memmodel.hardware import load_profile, parse_profile
from memmodel.implementations import occupancy, tiles
from memmodel.model import compare
from memmodel.options import options_for
from memmodel.scoring import BACKWARD_MAIN, KERNEL_PATTERNS
from memmodel.workload import Workload

from .conftest import REPO

FA3_RUN = REPO / "validation" / "h200" / "fa3" / "calibrate-fa3.json.gz"
FA3_CHECK = REPO / "validation" / "h200" / "final" / "h200-fa3-check.json.gz"


@pytest.mark.parametrize(
    ("d", "causal", "want"),
    [
        (64, False, (192, 128)),  # three consumer warpgroups of 64 rows
        (48, False, (192, 128)),  # runs at 64
        (96, False, (192, 144)),
        (80, True, (192, 128)),  # runs at 96; causal takes 128 keys
        (128, False, (128, 128)),
        (128, True, (128, 128)),
        (192, False, (128, 128)),
        (256, False, (128, 80)),
    ],
)
def test_forward_tiles_are_fa3s_own_per_head_dim(d, causal, want):
    assert tiles("fa3", d, causal) == want


@pytest.mark.parametrize(
    ("d", "causal", "want"),
    [(64, False, (128, 128)), (96, False, (64, 128)), (128, False, (80, 128)), (128, True, (64, 128)),
     (192, False, (64, 96)), (256, False, (64, 48))],
)  # fmt: skip
def test_backward_tiles_are_fa3s_own_per_head_dim(d, causal, want):
    assert backward_tile_rule("fa3", d, causal=causal) == want


def test_fa3_keeps_one_cta_per_sm_and_computes_whole_192_row_tiles():
    h200 = load_profile("h200")
    assert occupancy("fa3", 64, 192) == 1
    w = Workload(n=2048, d=64, batch=8, heads=16, dtype="fp16")
    c = compare(w, h200, options_for("fa3", w, h200))
    (kernel,) = c.tiled.traffic.kernels
    assert (c.tiled.traffic.params["block_q"], c.tiled.traffic.params["block_kv"]) == (192, 128)
    # 132 SMs x 1 CTA; 8 x 16 heads x ceil(2048 / 192) = 11 Q blocks = 1408 CTAs
    assert kernel.concurrent_ctas == 132 and kernel.ctas == 1408
    # whole tiles: 4 x (8·16) x (11·192 = 2112 rows) x 2048 keys x 64 = 141 733 920 768
    assert kernel.matmul_flops == 141_733_920_768


def test_fa3_backward_runs_its_own_kernels_at_its_tiles():
    h200 = load_profile("h200")
    w = Workload(n=2048, d=128, batch=8, heads=16, dtype="fp16")
    c = compare(w, h200, options_for("fa3", w, h200, backward=True))
    names = [k.name for k in c.tiled.traffic.kernels]
    assert names == ["fa2_fwd", "fa3_bwd_pre", "fa3_bwd", "fa3_bwd_dq"]
    assert (c.tiled.traffic.params["backward_block_q"], c.tiled.traffic.params["backward_block_kv"]) == (80, 128)
    main = c.tiled.traffic.kernels[2]
    # a CTA per K/V block: 8·16 heads x 2048/128 = 2048 CTAs; 5 products over whole 80-row steps:
    # 10 x (8·16) x (26·80 = 2080 rows) x 2048 keys x 128 = 697 932 185 600
    assert main.ctas == 2048 and main.matmul_flops == 697_932_185_600
    assert BACKWARD_MAIN["fa3"] == "fa3_bwd"


def test_fa3s_gqa_backward_converts_the_kv_heads_accumulators():
    h200 = load_profile("h200")
    w = Workload(n=2048, d=128, batch=4, heads=32, kv_heads=8, dtype="fp16")
    c = compare(w, h200, options_for("fa3", w, h200, backward=True))
    convert = {k.name: k for k in c.tiled.traffic.kernels if k.name in ("fa3_bwd_dk", "fa3_bwd_dv")}
    assert set(convert) == {"fa3_bwd_dk", "fa3_bwd_dv"}
    # writes one dK of the K/V heads: 4 x 8 x 2048 x 128 x 2 bytes = 16 777 216
    assert convert["fa3_bwd_dk"].bytes(level="hbm", direction="write") == 16_777_216


def test_kernel_patterns_match_the_names_flash_attn_cute_gave_on_the_h200():
    import re

    pats = KERNEL_PATTERNS["fa3"]
    names = {
        "fa2_fwd": "kernel_cutlass_kernel_flash_attncuteflash_fwd_sm90FlashAttentionForwardSm90_object_at__tensor0000o11",
        "fa3_bwd_pre": "kernel_cutlass_kernel_flash_attncuteflash_bwd_preprocessFlashAttentionBackwardPreprocess_object",
        "fa3_bwd": "kernel_cutlass_kernel_flash_attncuteflash_bwd_sm90FlashAttentionBackwardSm90_object_at__tensor0000o1",
        "fa3_bwd_dq": "kernel_cutlass_kernel_flash_attncuteflash_bwd_postprocessFlashAttentionBackwardPostprocess_object",
    }
    for model, name in names.items():
        hits = [k for k in ("fa2_fwd", "fa3_bwd_pre", "fa3_bwd", "fa3_bwd_dq") if re.search(pats[k], name)]
        assert hits == [model], (model, hits)


# --- cases and the runner, on the CPU --------------------------------------------------


def test_fa3_cases_parse_and_keep_flash_attentions_layout_on_the_cpu(monkeypatch):
    from memmodel.gpu import run

    monkeypatch.setattr(run, "DEVICE", "cpu")
    case = parse_case("impl=fa3,batch=2,heads=4,kv_heads=2,n=64,d=32,backward=1")
    assert case.id == "fa3/b2h4kv2n64d32/fp16-bwd"
    q, k, v = run.make_inputs(case)
    # batch x heads x N x d views of batch x N x heads x d storage: the call passes them unchanged
    assert tuple(q.shape) == (2, 4, 64, 32) and tuple(k.shape) == (2, 2, 64, 32)
    assert q.transpose(1, 2).is_contiguous() and v.transpose(1, 2).is_contiguous()
    assert q.is_leaf and q.requires_grad


def test_fa3_cases_with_dropout_or_tiles_are_refused_before_any_work(monkeypatch):
    from memmodel.gpu import run

    monkeypatch.setattr(run, "DEVICE", "cpu")
    for spec in ("impl=fa3,n=64,d=32,dropout=0.1", "impl=fa3,n=64,d=32,block_q=64,block_kv=64"):
        with pytest.raises(RuntimeFailure, match="no dropout and their own tiles"):
            run.CaseRun(parse_case(spec))


def test_validate_drops_fa3_cases_with_one_line_where_the_package_is_missing(monkeypatch, capsys):
    from memmodel.cli import validate
    from memmodel.gpu import fa3

    monkeypatch.setattr(fa3, "missing", lambda: "flash_attn.cute does not import")
    cases = [parse_case("impl=fa3,n=1024,d=64"), parse_case("impl=sdpa-flash,n=1024,d=64")]
    kept = validate._runnable(cases)
    assert [c.impl for c in kept] == ["sdpa-flash"]
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["memmodel: warning: skipping 1 fa3 case(s): flash_attn.cute does not import"]
    with pytest.raises(RuntimeFailure, match="no case to run: flash_attn.cute does not import"):
        validate._runnable(cases[:1])
    monkeypatch.setattr(fa3, "missing", lambda: None)
    assert validate._runnable(cases) == cases


def test_calibrate_impl_without_the_package_fails_with_one_line(run, monkeypatch):
    from memmodel.gpu import fa3

    monkeypatch.setattr(fa3, "missing", lambda: "flash_attn.cute does not import (ModuleNotFoundError)")
    r = run("calibrate", "--impl", "fa3")
    assert r.exit_code == 1
    assert r.stderr.strip().splitlines()[-1] == (
        "memmodel: error: flash_attn.cute does not import (ModuleNotFoundError)"
    )
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--impl", "fa3", "--output", "x.yaml"), "--impl measures one implementation's reference shapes"),
        (("--impl", "fa3", "--gpus", "2"), "--impl runs on one GPU"),
        (("--impl", "fa4"), "'fa4' is not 'fa3'"),
    ],
)
def test_calibrate_impl_bad_options_are_one_line_and_exit_2(run, args, message):
    r = run("calibrate", *args)
    assert r.exit_code == 2 and message in r.stderr and "Traceback" not in r.stderr


# --- fitting and merging ---------------------------------------------------------------


def _bare_h200():
    import yaml

    data = yaml.safe_load((REPO / "validation" / "h200" / "h200-calibrated.yaml").read_text())
    data["implementations"].pop("fa3", None)
    return parse_profile(data, "x")


def test_the_forward_fit_recovers_fa3s_efficiency_and_cta_overhead_from_model_made_times():
    """Times made by the model with e = 0.75, t = 4 µs and, on the causal shapes, m = 1.2 are
    fitted back (the plain shapes' partial tiles at d = 96 and 256, 2048 keys in blocks of 144
    and 80, count as masked blocks too: the fit leaves the plain shapes without a diagonal cost)."""
    bare = _bare_h200()
    e, t, m = 0.75, 4e-6, 1.2
    points = []
    for shape in plan.SDPA_SHAPES:
        part = fits._fused_parts("fa3", shape, bare)
        r = part["diagonal_share"] if shape[4] else 0.0
        # C/e·(1 + m·r) + F·t, plus the launch
        time = part["compute_s"] / e * (1 + m * r) + part["waves"] * t + part["launch_s"]
        points.append({"impl": "fa3", "shape": list(shape), "time_s": time})
    out = fits.efficiency_figures({"sdpa": {"points": points}}, bare)
    eff = out["implementations.fa3.efficiency"][0]
    assert set(eff) == {64, 96, 128, 256} and all(v == pytest.approx(e, abs=1e-3) for v in eff.values())
    assert out["implementations.fa3.cta_overhead"][0] == {64: "4 us", 128: "4 us", 256: "4 us"}
    masked = out["implementations.fa3.masked_block_cost"][0]
    assert set(masked) == {64, 128, 256} and all(v == pytest.approx(m, abs=1e-3) for v in masked.values())


def test_the_backward_fit_recovers_fa3s_backward_efficiency_and_cta_overhead():
    bare = _bare_h200()
    parts = fits.backward_reference_parts(bare)
    e, t = 0.6, 5e-6
    points = []
    for b, h, n, d, causal in plan.SDPA_SHAPES:
        p = parts("fa3", b, h, n, d, causal)
        # the other backward kernels + compute / e + waves x t
        time = p["other_s"] + p["compute_s"] / e + p["waves"] * t
        points.append({"impl": "fa3", "shape": [b, h, n, d, causal], "backward": {"time_s": time}})
    out = fits.backward_efficiency_figures({"points": points}, parts)
    eff = out["implementations.fa3.backward_efficiency"][0]
    assert set(eff) == {64, 96, 128, 256} and all(v == pytest.approx(e, abs=2e-3) for v in eff.values())
    assert out["implementations.fa3.backward_cta_overhead"][0] == {64: "5 us", 128: "5 us", 256: "5 us"}


def _run(impl_points=(), device="NVIDIA H200"):
    return {
        "device": {"name": device, "sm_count": 132, "torch_version": "2.11"},
        "measurements": {
            "sdpa": {"points": [{"impl": "sdpa-flash", "shape": [1], "time_s": 1.0}, *impl_points]},
            "backward": {"sdpa_backward": {"points": [{"impl": "sdpa-flash", "shape": [1]}]}},
        },
    }


def test_a_run_of_one_implementation_replaces_its_points_and_keeps_the_others():
    full = _run([{"impl": "fa3", "shape": [1], "time_s": 9.0}])
    part = {
        "impl": "fa3",
        "date": "2026-12-01",
        "command": "memmodel calibrate --impl fa3 --format json",
        "device": {"name": "NVIDIA H200"},
        "measurements": {
            "sdpa": {"points": [{"impl": "fa3", "shape": [2], "time_s": 2.0}]},
            "backward": {"sdpa_backward": {"points": [{"impl": "fa3", "shape": [2]}]}},
        },
    }
    before = copy.deepcopy(full)
    out = merge_impl(full, part)
    assert full == before  # the inputs are left alone
    assert [(p["impl"], p["time_s"]) for p in out["measurements"]["sdpa"]["points"]] == [
        ("sdpa-flash", 1.0),
        ("fa3", 2.0),
    ]
    assert [p["impl"] for p in out["measurements"]["backward"]["sdpa_backward"]["points"]] == ["sdpa-flash", "fa3"]
    assert out["merged"] == [
        {
            "impl": "fa3",
            "date": "2026-12-01",
            "command": "memmodel calibrate --impl fa3 --format json",
            "memmodel": None,
        }
    ]


def test_runs_of_other_gpus_or_of_no_implementation_are_refused():
    with pytest.raises(
        MemmodelError, match="cannot merge a calibration of fa3 on 'NVIDIA H100' into one of 'NVIDIA H200'"
    ):
        merge_impl(_run(), {"impl": "fa3", "device": {"name": "NVIDIA H100"}})
    with pytest.raises(MemmodelError, match="names no implementation"):
        merge_impl(_run(), {"device": {"name": "NVIDIA H200"}})


def test_the_merged_figures_cite_their_own_run():
    data = {"implementations": {"fa3": {"efficiency": {"value": {64: 0.8}, "source": "measured"}}}, "sources": {}}
    part = {"impl": "fa3", "date": "2026-12-01", "memmodel": "0.1.0", "device": {"name": "NVIDIA H200", "sm_count": 132,
            "torch_version": "2.11.0"}, "command": "memmodel calibrate --impl fa3 --format json"}  # fmt: skip
    out = cite_impl(data, part)
    assert out["implementations"]["fa3"]["efficiency"]["source"] == "measured-fa3"
    assert out["sources"]["measured-fa3"] == {
        "title": "fa3 measured on NVIDIA H200, 2026-12-01, memmodel 0.1.0",
        "kind": "measured",
        "machine": "NVIDIA H200 (132 SMs); torch 2.11.0",
        "date": "2026-12-01",
        "command": "memmodel calibrate --impl fa3 --format json",
    }


def test_the_bundled_h200_carries_fa3s_measured_figures():
    h200 = load_profile("h200")
    fa3 = h200.implementation("fa3")
    # fitted by scripts/update_profiles.py to validation/h200/fa3/calibrate-fa3.json.gz
    assert dict(fa3.efficiency) == {64: 0.792, 96: 0.916, 128: 0.998, 256: 1.074}
    assert dict(fa3.backward_efficiency) == {64: 0.794, 96: 0.832, 128: 0.934, 256: 0.506}
    run_data = json.loads(gzip.decompress(FA3_RUN.read_bytes()))
    assert run_data["impl"] == "fa3" and run_data["device"]["name"] == "NVIDIA H200"
    # 13 forward and 13 backward reference shapes, none failed
    assert len(run_data["measurements"]["sdpa"]["points"]) == len(plan.SDPA_SHAPES) == 13
    assert all("error" not in p for p in run_data["measurements"]["backward"]["sdpa_backward"]["points"])


def test_the_fa3_check_record_scores_within_its_committed_figures(run):
    r = run("validate", "--rescore", str(FA3_CHECK), "--format", "json")
    assert r.exit_code == 0, r.stderr
    summary = json.loads(r.stdout)["summary"]
    assert summary["cases"] == {"ok": 16}
    # forward steps and training-step passes (22): median 1.3 %, max 12.5 % (docs/implementations.md)
    assert summary["time"]["n"] == 22
    assert summary["time"]["median_abs"] == pytest.approx(0.013, abs=0.002)
    assert summary["time"]["max_abs"] == pytest.approx(0.125, abs=0.002)


# --- on a Hopper GPU with flash-attn-4 ---------------------------------------------------


def _fa3_runs() -> bool:
    try:
        import torch

        from memmodel.gpu.fa3 import missing

        return bool(torch.cuda.is_available()) and missing() is None
    except Exception:
        return False


@pytest.mark.skipif(not _fa3_runs(), reason="needs a Hopper GPU with flash-attn-4 (flash_attn.cute)")
def test_fa3_runs_checks_and_times_a_training_step_on_the_gpu():
    from memmodel.gpu.run import time_case

    got = time_case(parse_case("impl=fa3,batch=2,heads=4,kv_heads=2,n=512,d=64,causal=1,backward=1"), reps=3)
    assert got["time_s"] > 0 and max(got["grad_errors"].values()) < 3e-2


def test_an_implementations_calibration_records_its_packages_versions():
    from memmodel.gpu import calibrate as cal

    # pytest is installed here, a package of this name is not
    got = cal._package_versions(("pytest", "no-such-distribution-xyz"))
    assert list(got) == ["pytest_version"] and got["pytest_version"] == pytest.__version__
