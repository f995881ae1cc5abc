"""cuDNN's backward at d 192 and with V's head dim below Q's (``memmodel.calibration.cudnn_bwd_dims``): the
probes' rows, the fit, and what the figures do to a prediction."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memmodel import Workload, compare, load_profile
from memmodel.calibration import cudnn_bwd_dims
from memmodel.cases import Case

ROOT = Path(__file__).resolve().parent.parent
H200 = load_profile("h200")
#: the bundled profile before the probes: the calibrated head dims alone
CALIBRATED = H200.with_implementation_figures(
    "sdpa-cudnn",
    backward_efficiency=tuple((d, e) for d, e in H200.implementation("sdpa-cudnn").backward_efficiency if d != 192),
    backward_dv_efficiency=(),
    backward_dv_causal_efficiency=(),
)


def _case(d: int, d_v: int | None, causal: bool, heads: int = 16) -> Case:
    return Case(
        impl="sdpa-cudnn", batch=2, heads=heads, n=2048, d=d, d_v=d_v, dtype="bf16", causal=causal, backward=True
    )


def _record(rows: list[tuple[Case, float]]) -> dict:
    cases = []
    for case, seconds in rows:
        spec = {k: getattr(case, k) for k in ("impl", "batch", "heads", "n", "d", "d_v", "dtype", "causal", "backward")}
        kernels = [
            {"name": "Memset (Device)", "time_s": 1e-6},
            {
                "name": "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x192",
                "time_s": seconds,
            },
            {"name": "void cudnn::fusion::convert_dq_to_16bits<true>", "time_s": 5e-5},
        ]
        cases.append({"case": spec, "status": "ok", "timing": {"profiled_kernels": kernels}})
    return {"cases": cases}


def test_rows_take_the_fused_kernels_duration_and_skip_forwards_and_failures():
    plain = _case(192, None, False)
    rec = _record([(plain, 4e-3)])
    rec["cases"].append({"case": {"impl": "sdpa-cudnn", "batch": 1, "heads": 8, "n": 512, "d": 64}, "status": "ok"})
    rec["cases"].append(dict(rec["cases"][0], status="failed"))
    found = cudnn_bwd_dims.rows([rec])
    assert len(found) == 1
    case, seconds = found[0]
    assert (case.d, case.d_v, case.causal) == (192, None, False)
    assert seconds == pytest.approx(4e-3)  # the bprop kernel alone: not the memset, not the dQ conversion


@settings(max_examples=3, deadline=None)
@given(plain=st.floats(0.35, 0.7), full=st.floats(0.3, 0.7), causal=st.floats(0.4, 0.9))
def test_the_fit_recovers_the_three_figures_it_was_made_with(plain, full, causal):
    # measurements made by the model at known figures (d 160 runs the d-192 kernel, so it counts at 192)
    truth = CALIBRATED.with_implementation_figures(
        "sdpa-cudnn",
        backward_efficiency=tuple(
            sorted({**dict(CALIBRATED.implementation("sdpa-cudnn").backward_efficiency), 192: plain}.items())
        ),
        backward_dv_efficiency=((192, full),),
        backward_dv_causal_efficiency=((192, causal),),
    )
    cases = [_case(192, None, False), _case(160, None, True), _case(192, 128, False), _case(192, 128, True, heads=32)]
    found = [(c, cudnn_bwd_dims.predicted_s(c, truth)) for c in cases]
    figures, each = cudnn_bwd_dims.fit(found, CALIBRATED)
    assert figures["backward_efficiency"][192] == pytest.approx(plain, rel=2e-3)
    assert figures["backward_dv_efficiency"][192] == pytest.approx(full, rel=2e-3)
    assert figures["backward_dv_causal_efficiency"][192] == pytest.approx(causal, rel=2e-3)
    assert all(p == pytest.approx(m, rel=5e-3) for _, p, m in each)


def test_the_bundled_profile_holds_what_the_committed_probes_give():
    figures, _ = cudnn_bwd_dims.fit(cudnn_bwd_dims.rows(cudnn_bwd_dims.load(ROOT)), CALIBRATED)
    cudnn = H200.implementation("sdpa-cudnn")
    assert dict(cudnn.backward_efficiency)[192] == figures["backward_efficiency"][192]
    assert cudnn.backward_dv_efficiency == tuple(figures["backward_dv_efficiency"].items())
    assert cudnn.backward_dv_causal_efficiency == tuple(figures["backward_dv_causal_efficiency"].items())
    # the probes: a non-causal 192 / 128 block costs more than a 192 / 192 one, a causal one less
    assert (
        cudnn.backward_dv_efficiency[0][1]
        < dict(cudnn.backward_efficiency)[192]
        < cudnn.backward_dv_causal_efficiency[0][1]
    )


def test_a_narrow_v_backward_takes_its_own_figure_and_only_on_hopper():
    w = dict(n=4096, batch=2, heads=32, d=192, dtype="bf16")

    def bwd(profile, **extra):
        c = compare(Workload(**w, **extra), profile, impl="sdpa-cudnn", backward=True)
        return sum(
            float(t.time_s) for k, t in zip(c.tiled.traffic.kernels, c.tiled.timing.kernels) if k.name == "cudnn_bwd"
        )

    cudnn = H200.implementation("sdpa-cudnn")
    plain, narrow = bwd(H200), bwd(H200, d_v=128)
    # the non-causal 192 / 128 kernel runs at 0.42 of the rate where 192 / 192 runs at 0.49 on fewer
    # FLOPs (3·192 + 2·128 = 832 of 960): about as long as the 192 / 192 one, as the probes measured
    assert narrow / plain == pytest.approx(
        832 / 960 * dict(cudnn.backward_efficiency)[192] / cudnn.backward_dv_efficiency[0][1], rel=0.03
    )
    # the same figures are not carried to another architecture (a Hopper kernel's trait) but are to the H100
    assert load_profile("h100-sxm").implementation("sdpa-cudnn").backward_dv_efficiency == cudnn.backward_dv_efficiency
    assert load_profile("b200").implementation("sdpa-cudnn").backward_dv_efficiency == ()
    assert load_profile("a100").implementation("sdpa-cudnn").backward_dv_causal_efficiency == ()
