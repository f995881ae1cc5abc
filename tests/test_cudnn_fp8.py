"""cuDNN's fp8 forward as a share of its bf16 one (``memmodel.calibration.cudnn_fp8``): the probe's rows,
the fit, and what the share does to a prediction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memmodel import load_profile
from memmodel.calibration import cudnn_fp8
from memmodel.calibration.serving import _planned

ROOT = Path(__file__).resolve().parent.parent
H200 = load_profile("h200")
SHAPES = ((1, 32, 8, 4096, 128, 128, False), (1, 64, 64, 4096, 192, 128, True), (2, 16, 16, 2048, 256, 256, False))


def _row(shape, dtype, seconds=None, error=None):
    b, h, hk, n, d, dv, causal = shape
    row = {"section": "sdpa", "batch": b, "heads": h, "kv_heads": hk, "n": n, "d": d, "d_v": dv, "causal": causal}
    row["dtype"] = dtype
    if error:
        row["error"] = error
    if seconds is not None:
        row["time_s"] = seconds  # the calls' pace, queued back to back: what is fitted
        row["kernels"] = [{"name": "Memset (Device)", "us": 0.8}, {"name": "sdpa_fprop", "us": seconds * 0.9e6}]
    return row


def test_spec_names_the_case_as_the_predictions_file_does():
    assert cudnn_fp8.spec(_row(SHAPES[1], "fp8")) == (
        "impl=sdpa-cudnn,batch=1,heads=64,kv_heads=64,n=4096,d=192,d_v=128,dtype=fp8,causal=1"
    )
    assert (
        cudnn_fp8.spec(_row(SHAPES[0], "bf16")) == "impl=sdpa-cudnn,batch=1,heads=32,kv_heads=8,n=4096,d=128,dtype=bf16"
    )


def test_pairs_take_the_calls_pace_and_skip_failed_or_lone_rows():
    rows = [
        {"section": "env", "torch": "2.11.0+cu130"},
        _row(SHAPES[0], "bf16", 400e-6),
        _row(SHAPES[0], "fp8", 300e-6),
        _row(SHAPES[1], "bf16", 500e-6),
        _row(SHAPES[1], "fp8", error="cudnnGraphNotSupportedError"),  # no fp8 partner: dropped
        _row(SHAPES[2], "fp8", 250e-6),  # no bf16 partner: dropped
    ]
    found = cudnn_fp8.pairs(rows)
    assert len(found) == 1
    b, mb, f, mf = found[0]
    assert b.endswith("dtype=bf16") and f.endswith("dtype=fp8")
    assert (mb, mf) == pytest.approx((400e-6, 300e-6))  # time_s, not the profiler's one-call kernel list


@settings(max_examples=4, deadline=None)
@given(shares=st.lists(st.floats(0.3, 1.2), min_size=3, max_size=3), bf16_error=st.floats(0.8, 1.25))
def test_the_fit_recovers_each_head_dims_share_whatever_the_bf16_calls_own_error(shares, bf16_error):
    # measurements made by the model at known shares (one per head dim), every call off by the same
    # factor: the fit compares each fp8 call with the bf16 one of its shape, so the factor does not move them
    truth = H200.with_implementation_figures("sdpa-cudnn", fp8_share=tuple(zip((128, 192, 256), shares)))
    rows = []
    for shape in SHAPES:
        for dtype in ("bf16", "fp8"):
            t = cudnn_fp8.predicted_s(_planned(cudnn_fp8.spec(_row(shape, dtype)), "", truth), truth) * bf16_error
            rows.append(_row(shape, dtype, t))
    curve, each = cudnn_fp8.fit(rows, H200)
    assert [d for d, _ in curve] == [128, 192, 256]
    assert [v for _, v in curve] == pytest.approx(shares, rel=2e-3)
    assert len(each) == 2 * len(SHAPES)


def test_the_bundled_profile_holds_what_the_committed_probe_gives():
    lines = cudnn_fp8.load(ROOT)
    curve, each = cudnn_fp8.fit(lines, H200)
    assert H200.implementation("sdpa-cudnn").fp8_share == curve
    assert [d for d, _ in curve] == [64, 128, 192, 256]  # the probe's 13 shapes: d 64, 128, 192 (d_v 128), 256
    # d = 192 the lowest: the fp8 kernel at (192, 128) ran no faster than the bf16 one (1.04 ms to 1.06 ms)
    assert min(curve, key=lambda p: p[1])[0] == 192
    # a fit to its own shapes: every fp8 call within 12 % of its measured time
    assert max(abs(p / m - 1) for spec, p, m in each if spec.endswith(("fp8", "fp8,causal=1"))) < 0.12
    # not on Blackwell: a Hopper kernel's trait (memmodel.hardware.derive.TRANSFER_ARCH_OWN)
    assert load_profile("b200").implementation("sdpa-cudnn").fp8_share_at(128) is None
    assert load_profile("h100-sxm").implementation("sdpa-cudnn").fp8_share == curve


def test_the_share_slows_only_cudnns_fp8_forward():
    spec8 = "impl=sdpa-cudnn,batch=1,heads=32,kv_heads=8,n=8192,d=128,dtype=fp8"
    spec16 = spec8.replace("fp8", "bf16")
    base = H200.with_implementation_figures("sdpa-cudnn", fp8_share=None)
    half = H200.with_implementation_figures("sdpa-cudnn", fp8_share=0.5)  # a number: every head dim
    t8 = [cudnn_fp8.predicted_s(_planned(spec8, "", p), p) for p in (base, half)]
    t16 = [cudnn_fp8.predicted_s(_planned(spec16, "", p), p) for p in (base, half)]
    assert t16[0] == pytest.approx(t16[1])
    # compute-bound at 8192 keys: half the efficiency, close to twice the time
    assert 1.8 < t8[1] / t8[0] <= 2.0


def test_the_caveat_names_the_share_where_one_applies_and_says_so_where_none_does():
    from click.testing import CliRunner

    from memmodel.cli import cli

    def caveat(gpu):
        args = ["-q", "compare", "--n", "8192", "--d", "192", "--d-v", "128", "--heads", "32"]
        run = CliRunner().invoke(
            cli, [*args, "--dtype", "fp8", "--impl", "sdpa-cudnn", "--gpu", gpu, "--format", "json"]
        )
        assert run.exit_code == 0, run.output
        return next(c for c in json.loads(run.output)["caveats"] if c.startswith("Same-share rule"))

    share = H200.implementation("sdpa-cudnn").fp8_share_at(192)
    assert f"× {share:.2f}, what its fp8 kernel keeps of that at d=192" in caveat("h200")
    assert "implementations.sdpa-cudnn.fp8_share, derived" in caveat("h100-sxm")  # same architecture: carried
    assert "(no fp8 run of it was measured)" in caveat("b200")  # Hopper's share stays on Hopper
