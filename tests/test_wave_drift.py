"""The wave drift of FlashAttention-2's non-causal waves (memory.l2.wave_drift), the cap on a
batched GQA grid's live K/V (memory.l2.causal_gqa_others), and the causal curves past their end."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from memmodel.calibration import wave_drift
from memmodel.calibration.causal_reuse import GQA_OTHERS_RECORDS, fitted_gqa_others
from memmodel.cli import cli
from memmodel.fileio import read_json
from memmodel.hardware import load_profile
from memmodel.model import compare
from memmodel.traffic.flash import _curve_share, drift_share
from memmodel.traffic.reuse import ReuseCurve
from memmodel.workload import Workload

ROOT = Path(__file__).resolve().parent.parent
H200 = load_profile("h200")
L2 = 60 * 2**20


def _kv(w: Workload, profile=H200, impl: str = "sdpa-flash") -> int:
    k = next(k for k in compare(w, profile, impl=impl).tiled.traffic.kernels if k.name == "fa2_fwd")
    return int(sum(int(t.bytes) for t in k.transfers if t.tensor in ("K", "V") and t.level == "hbm"))


def _without(figure: str):
    return dataclasses.replace(H200, figures={k: v for k, v in H200.figures.items() if k != figure})


def test_drift_share_grows_then_saturates():
    # δ·K ≤ 1: the mean of δ·k over k in [0, K] is δ·K/2; past it 1 − 1/(2·δ·K)
    assert drift_share(4.0, 0.05) == pytest.approx(0.1)
    assert drift_share(20.0, 0.05) == pytest.approx(0.5)  # the spread reaches a whole walk at the end
    assert drift_share(40.0, 0.05) == pytest.approx(1 - 1 / 4)
    assert drift_share(0.0, 0.05) == 0.0


@settings(max_examples=60, deadline=None)
@given(st.floats(0, 500), st.floats(0, 500), st.floats(0.0, 1.0))
def test_drift_share_is_a_share_and_grows_with_the_waves(a, b, drift):
    lo, hi = sorted((a, b))
    assert 0.0 <= drift_share(lo, drift) <= drift_share(hi, drift) + 1e-12 < 1.0 + 1e-12


def test_one_long_head_reads_its_kv_once_a_wave_plus_the_drift():
    # one head of 524288 at d = 128, fp16: 4096 Q blocks of 128, 264 CTAs at once: 15.52 waves,
    # read once each where the waves keep together (16 reads: the waves a run of CTAs overlaps);
    # f = 0.0366 · 15.52 / 2 = 0.284; live = K and V = 256 MiB = 4.27 of the L2, every re-read misses:
    # 16 · (1 + 0.284 · 4.27) = 35.4 reads, measured 37 (l2-check: -10 %, 16 reads: -58 %)
    w = Workload(n=524288, d=128, dtype="fp16")
    head = 2 * 524288 * 128 * 2
    assert _kv(w, _without("memory.l2.wave_drift")) == 16 * head
    drift = dict(H200.figures["memory.l2.wave_drift"])[128]
    f = drift * (4096 / 264) / 2
    assert _kv(w) == pytest.approx(16 * head * (1 + f * head / L2), rel=1e-6)
    assert 35.0 < _kv(w) / head < 36.0


def test_only_flash_attention_2_drifts():
    # our Triton kernel and cuDNN read a long head once a wave (measured: within 0.2 % at 131k and
    # 262k for Triton, -0.1 % to -13 % for cuDNN at 131k, 327k and 524k)
    w = Workload(n=262144, d=128, dtype="fp16")
    for impl in ("sdpa-cudnn", "triton"):
        assert _kv(w, impl=impl) == _kv(w, _without("memory.l2.wave_drift"), impl=impl)
    assert _kv(w) > 1.2 * _kv(w, _without("memory.l2.wave_drift"))


def test_no_drift_where_the_data_stays_in_l2():
    # 16 heads of 4096 at d = 64: each head's K/V 1 MiB, far below the cross-wave knee: no misses
    w = Workload(n=4096, d=64, heads=16, batch=4, dtype="fp16")
    assert _kv(w) == _kv(w, _without("memory.l2.wave_drift")) == 2 * 64 * 4096 * 64 * 2


def test_the_drift_fit_reproduces_the_profile():
    records = [read_json(ROOT / r) for r in wave_drift.RECORDS]
    assert wave_drift.fitted_drift(records) == dict(H200.figures["memory.l2.wave_drift"])
    # d = 256 drifts a quarter as fast as d = 64 and 128
    drift = dict(H200.figures["memory.l2.wave_drift"])
    assert drift[256] < drift[64] / 3 and drift[256] < drift[128] / 3


def test_the_gqa_cap_binds_on_batched_grids_only():
    # batch 2, 8 query heads on 2 K/V heads of 65536 at d = 128: one K/V head's K and V are
    # 2 · 65536 · 128 · 2 = 32 MiB; the others add 0.464 of the 60 MiB L2 at most: 59.84 MiB
    others = dict(H200.figures["memory.l2.causal_gqa_others"])[128]
    w = Workload(n=65536, d=128, heads=8, kv_heads=2, batch=2, causal=True, dtype="bf16")
    live = compare(w, H200, impl="sdpa-flash").tiled.traffic.params["causal_live_bytes"]
    assert live == pytest.approx(32 * 2**20 + others * L2)
    uncapped = compare(w, _without("memory.l2.causal_gqa_others"), impl="sdpa-flash").tiled.traffic
    assert uncapped.params["causal_live_bytes"] == pytest.approx(32 * 2**20 + 0.5 * L2)  # the effective capacity
    # batch 1: the rule's own count (1.26 of the L2, a d = 64 GQA reference) stands above the
    # cap one K/V head of 0.88 + 0.305 would set (its curve was measured so)
    one = Workload(n=216064, d=64, heads=4, kv_heads=1, causal=True, dtype="bf16")
    head = 2 * 216064 * 64 * 2
    live = compare(one, H200, impl="sdpa-flash").tiled.traffic.params["causal_live_bytes"]
    assert live / L2 == pytest.approx(1.26, abs=0.005)
    assert live > head + dict(H200.figures["memory.l2.causal_gqa_others"])[64] * L2


def test_the_gqa_cap_fit_reproduces_the_profile():
    records = [read_json(ROOT / r) for r in GQA_OTHERS_RECORDS]
    assert fitted_gqa_others(records) == dict(H200.figures["memory.l2.causal_gqa_others"])


def test_a_curve_past_its_end_meets_random_replacement():
    L = 100.0
    below = {128: ReuseCurve((50.0, 125.0), (0.01, 0.1))}  # ends below 1 - L2/live = 0.2 at 125
    above = {128: ReuseCurve((50.0, 125.0), (0.01, 0.3))}  # ends above it
    # just past the end the share does not jump: 0.1 · (1 - 100/126) / 0.2 = 0.1032
    assert _curve_share(np.array(126.0), 128, below, L) == pytest.approx(0.1 * (1 - 100 / 126) / 0.2)
    # at twice the L2: random replacement's 0.5 scaled by 0.1 / 0.2
    assert _curve_share(np.array(200.0), 128, below, L) == pytest.approx(0.25)
    # a curve that ends above random replacement keeps its last share until that overtakes it
    assert _curve_share(np.array(126.0), 128, above, L) == pytest.approx(0.3)
    assert _curve_share(np.array(200.0), 128, above, L) == pytest.approx(0.5)


def test_compare_says_where_the_drift_adds_reads():
    # one head of 524288 at d = 128: 35.4 / 16 = 2.21 reads a wave, +121 % over one
    args = ["compare", "--n", "524288", "--d", "128", "--dtype", "fp16", "--gpu", "h200", "--impl", "sdpa-flash"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "drift apart (+121 % over one read a wave; memory.l2.wave_drift)" in result.output
    # a head that fits in L2 gains nothing, and says nothing
    short = CliRunner().invoke(cli, [*args[:2], "4096", *args[3:]])
    assert short.exit_code == 0 and "drift apart" not in short.output
    # cuDNN keeps the wave count: no note either
    cudnn = CliRunner().invoke(cli, [*args[:-1], "sdpa-cudnn"])
    assert cudnn.exit_code == 0 and "drift apart" not in cudnn.output


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.integers(0, 5000), min_size=1, max_size=8),
    st.sampled_from(["int64", "float64", "int32"]),
    st.booleans(),
)
def test_interpolate_log2_table_path_matches_the_formula(values, dtype, fractional):
    # a grid's column (longer than the table's threshold) gives the same numbers as the formula
    from memmodel.hardware import interpolate_log2

    curve = ((64, 0.03), (96, 0.05), (128, 0.04), (256, 0.01))
    x = np.resize(np.asarray(values), 5000).astype(dtype)
    if fractional and dtype == "float64":
        x = x + 0.5
    xs, ys = np.log2([p[0] for p in curve]), np.array([p[1] for p in curve])
    direct = np.interp(np.log2(np.maximum(x.astype(np.float64), 1.0)), xs, ys)
    assert np.array_equal(interpolate_log2(curve, x), direct)
