"""cuDNN's fp8 forward as a share of its bf16 one (``memmodel.calibration.cudnn_fp8``): the probe's rows,
the fit, and what the share does to a prediction."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memmodel import load_profile
from memmodel.calibration import cudnn_fp8
from memmodel.calibration.serving import _planned, predicted

H200 = load_profile("h200")
SHAPES = ((1, 32, 8, 4096, 128, 128, False), (1, 64, 64, 4096, 192, 128, True), (2, 16, 16, 2048, 256, 256, False))


def _row(shape, dtype, seconds=None, error=None):
    b, h, hk, n, d, dv, causal = shape
    row = {"section": "sdpa", "batch": b, "heads": h, "kv_heads": hk, "n": n, "d": d, "d_v": dv, "causal": causal}
    row["dtype"] = dtype
    if error:
        row["error"] = error
    if seconds is not None:
        row["time_s"] = seconds * 1.02  # the call's pace: the profiler's kernel is what is fitted
        row["kernels"] = [{"name": "cudnn_zero", "us": 1.5}, {"name": "sdpa_fprop", "us": seconds * 1e6}]
    return row


def test_spec_names_the_case_as_the_predictions_file_does():
    assert cudnn_fp8.spec(_row(SHAPES[1], "fp8")) == (
        "impl=sdpa-cudnn,batch=1,heads=64,kv_heads=64,n=4096,d=192,d_v=128,dtype=fp8,causal=1"
    )
    assert (
        cudnn_fp8.spec(_row(SHAPES[0], "bf16")) == "impl=sdpa-cudnn,batch=1,heads=32,kv_heads=8,n=4096,d=128,dtype=bf16"
    )


def test_pairs_take_the_profilers_longest_kernel_and_skip_failed_or_lone_rows():
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
    assert (mb, mf) == pytest.approx((400e-6, 300e-6))  # the 1.5 us memset is not the kernel


@settings(max_examples=6, deadline=None)
@given(share=st.floats(0.3, 1.2), bf16_error=st.floats(0.8, 1.25))
def test_the_fit_recovers_the_share_whatever_the_bf16_kernels_own_error(share, bf16_error):
    # measurements made by the model at a known share, every kernel off by the same factor: the fit
    # compares each fp8 kernel with the bf16 one of its shape, so the factor does not move the share
    truth = H200.with_implementation_figures("sdpa-cudnn", fp8_share=share)
    rows = []
    for shape in SHAPES:
        for dtype in ("bf16", "fp8"):
            row = _row(shape, dtype)
            t = predicted(_planned(cudnn_fp8.spec(row), "", truth), cudnn_fp8.KERNEL, truth) * bf16_error
            rows.append(_row(shape, dtype, t))
    fitted, each = cudnn_fp8.fit(rows, H200)
    assert fitted == pytest.approx(share, rel=2e-3)
    assert len(each) == 2 * len(SHAPES)


def test_the_share_slows_only_cudnns_fp8_forward():
    spec8 = "impl=sdpa-cudnn,batch=1,heads=32,kv_heads=8,n=8192,d=128,dtype=fp8"
    spec16 = spec8.replace("fp8", "bf16")
    base = H200.with_implementation_figures("sdpa-cudnn", fp8_share=None)
    half = H200.with_implementation_figures("sdpa-cudnn", fp8_share=0.5)
    t8 = [predicted(_planned(spec8, "", p), "fa2_fwd", p) for p in (base, half)]
    t16 = [predicted(_planned(spec16, "", p), "fa2_fwd", p) for p in (base, half)]
    assert t16[0] == pytest.approx(t16[1])
    # compute-bound at 8192 keys: half the efficiency, close to twice the time
    assert 1.8 < t8[1] / t8[0] <= 2.0
