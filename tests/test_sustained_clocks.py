"""Clocks under the power limit: calibrate's sustained series, the profile fields, and the
model's ``clocks`` modes (benchmark, boost, sustained)."""

from __future__ import annotations

import json
import math

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from memmodel.calibration.figures import power_figures, settle
from memmodel.calibration.plan import SUSTAINED_SETTLED_FROM_S
from memmodel.hardware import ProfileError, load_profile, parse_profile
from memmodel.model import compare
from memmodel.options import Options, options_for, with_options
from memmodel.timing import BENCHMARK_CALLS_BEFORE, clock_share
from memmodel.workload import Workload, WorkloadError

from .test_calibrated_time import CALIBRATED


def _profile(share: float | None = 0.9, reaction: str | None = "50 ms", impl: str = "sdpa-flash"):
    data = yaml.safe_load(CALIBRATED.read_text())
    for section in data.get("implementations", {}).values():
        section.pop("sustained_share", None)
        section.pop("sustained_after", None)
    section = data.setdefault("implementations", {}).setdefault(impl, {})
    if share is not None:
        section["sustained_share"] = {"value": share, "source": "measured"}
    if reaction is not None:
        section["sustained_after"] = {"value": reaction, "source": "measured"}
    return parse_profile(data, "x")


def _flash(profile, w, clocks="benchmark"):
    return compare(w, profile, with_options(options_for("sdpa-flash", w, profile), clocks=clocks))


LONG = Workload(n=16384, d=128, batch=1, heads=32, dtype="fp16")  # about 27 ms: past 50 ms / 16
SHORT = Workload(n=2048, d=128, batch=1, heads=16, dtype="fp16")  # about 0.1 ms


def test_settle_reads_the_rate_before_and_after_the_clocks_fall():
    # 1 ms calls: 60 at 1.00 ms (60 ms busy), then 1.10 ms: the fall begins at 60 ms of busy
    # time; from 0.3 s on every call is 1.10 ms: share 1.00 / 1.10 = 0.909
    times = [1e-3] * 60 + [1.1e-3] * 1000
    got = settle(times)
    assert got["first_s"] == pytest.approx(1e-3)
    assert got["settled_s"] == pytest.approx(1.1e-3)
    assert got["share"] == pytest.approx(1 / 1.1)
    assert got["onset_s"] == pytest.approx(0.060)
    assert settle([1e-3] * 7) is None  # too short to read
    assert settle([1e-3] * 100) is None  # 0.1 s busy: never reaches 0.3 s


@given(st.lists(st.floats(1e-4, 1e-2), min_size=8, max_size=40), st.integers(0, 3))
@settings(max_examples=60, deadline=None)
def test_settle_is_a_ratio_of_medians_and_the_onset_lies_inside_the_series(calls, more):
    # the calls repeated past SUSTAINED_SETTLED_FROM_S of busy time, a repeat (8 calls or more) to spare
    times = calls * (math.ceil(SUSTAINED_SETTLED_FROM_S / sum(calls)) + 1 + more)
    got = settle(times)
    assert got is not None
    assert got["busy_s"] == pytest.approx(sum(times))
    assert got["share"] == pytest.approx(got["first_s"] / got["settled_s"])
    assert min(times) <= got["first_s"] <= max(times)
    assert got["onset_s"] is None or 0 <= got["onset_s"] < sum(times)


@given(st.lists(st.floats(1e-4, 1e-3), max_size=250))
@settings(max_examples=60, deadline=None)
def test_a_series_shorter_than_the_settling_time_settles_nothing(times):
    assert sum(times) < SUSTAINED_SETTLED_FROM_S  # 250 calls of at most 1 ms: 0.25 s
    assert settle(times) is None


def test_power_figures_write_each_share_and_when_its_clocks_fell():
    flash = [1e-3] * 50 + [1.05e-3] * 600  # falls at 50 ms busy: share 0.952
    cudnn = [0.5e-3] * 120 + [0.55e-3] * 1200  # falls at 60 ms: share 0.909
    steady = [2e-3] * 400  # never falls: share 1, no onset
    m = {
        "sustained": {
            "series": [
                {"impl": "sdpa-flash", "shape": [8, 16, 2048, 128], "idle_s": 3, "times_s": flash},
                {"impl": "sdpa-cudnn", "shape": [8, 16, 2048, 128], "idle_s": 3, "times_s": cudnn},
                {"impl": "triton", "shape": [8, 16, 2048, 128], "idle_s": 3, "times_s": steady},
                {"impl": "sdpa-efficient", "shape": [8, 16, 2048, 128], "error": "no kernel"},
            ]
        }
    }
    out = power_figures(m)
    assert out["implementations.sdpa-flash.sustained_share"][0] == 0.952
    assert out["implementations.sdpa-cudnn.sustained_share"][0] == 0.909
    assert out["implementations.triton.sustained_share"][0] == 1.0
    assert "implementations.sdpa-efficient.sustained_share" not in out
    assert out["implementations.sdpa-flash.sustained_after"][0] == "50 ms"
    assert out["implementations.sdpa-cudnn.sustained_after"][0] == "60 ms"
    assert "implementations.triton.sustained_after" not in out  # its clocks never fell
    assert power_figures({}) == {}


def test_the_profile_refuses_a_share_above_one_or_a_reaction_time_of_zero():
    with pytest.raises(ProfileError, match="sustained_share"):
        _profile(share=1.2)
    with pytest.raises(ProfileError, match="sustained_after"):
        _profile(reaction="0 ms")
    assert _profile().implementation("sdpa-flash").clocks_fall[0] == 0.9
    assert _profile(reaction=None).implementation("sdpa-flash").clocks_fall is None  # no time to fall: not applied


def test_a_benchmark_loop_slows_only_where_its_calls_keep_the_gpu_busy_past_the_reaction():
    p = _profile()
    assert clock_share(p, "sdpa-flash", 0.050 / BENCHMARK_CALLS_BEFORE) == 0.9  # exactly the reaction time
    assert clock_share(p, "sdpa-flash", 0.049 / BENCHMARK_CALLS_BEFORE) is None
    assert clock_share(p, "sdpa-flash", 1e-6, "sustained") == 0.9
    assert clock_share(p, "sdpa-flash", 1.0, "boost") is None
    assert clock_share(p, "sdpa-cudnn", 1.0) is None  # no figure for it
    assert list(clock_share(p, "sdpa-flash", [1e-3, 1e-2])) == [1.0, 0.9]


def test_the_forward_kernels_compute_slows_by_the_share_and_nothing_else_moves():
    p = _profile()
    boost, bench, steady = (_flash(p, LONG, c) for c in ("boost", "benchmark", "sustained"))
    assert bench.tiled.timing.clock_share == 0.9 and boost.tiled.timing.clock_share is None
    kb, kt = boost.tiled.timing.kernels[0], bench.tiled.timing.kernels[0]
    assert float(kt.terms["compute"]) == pytest.approx(float(kb.terms["compute"]) / 0.9, rel=0.02)
    assert float(kt.terms["hbm"]) == float(kb.terms["hbm"])
    assert steady.tiled.timing.time_s == pytest.approx(bench.tiled.timing.time_s)
    assert bench.tiled.traffic.hbm_bytes == boost.tiled.traffic.hbm_bytes
    # standard attention has no figure: unchanged
    assert bench.standard.timing.time_s == boost.standard.timing.time_s
    short = _flash(p, SHORT)
    assert short.tiled.timing.clock_share is None
    assert _flash(p, SHORT, "sustained").tiled.timing.time_s > short.tiled.timing.time_s
    assert any("power limit" in c for c in bench.caveats)
    assert not any("power limit" in c for c in short.caveats)


def test_the_backward_kernels_keep_their_time():
    p = _profile()
    w = LONG.with_(n=8192)
    opts = options_for("sdpa-flash", w, p, backward=True)
    bench = compare(w, p, opts)
    boost = compare(w, p, with_options(opts, clocks="boost"))
    assert bench.tiled.timing.clock_share == 0.9
    for kb, kt, k in zip(boost.tiled.timing.kernels, bench.tiled.timing.kernels, bench.tiled.traffic.kernels):
        if k.pass_ == "backward":
            assert kt.time_s == kb.time_s
        elif k.overlap == "serial-compute":
            assert kt.time_s > kb.time_s


def test_a_grid_slows_only_its_long_rows():
    p = _profile()
    import numpy as np

    w = Workload(n=np.array([2048, 16384]), d=128, batch=1, heads=32, dtype="fp16")
    c = compare(w, p, options_for("sdpa-flash", w, p))
    one = [_flash(p, Workload(n=n, d=128, batch=1, heads=32, dtype="fp16")).tiled.timing.time_s for n in (2048, 16384)]
    assert list(c.tiled.timing.clock_share) == [1.0, 0.9]
    assert np.allclose(c.tiled.timing.time_s, one)


def test_clocks_is_checked_and_on_the_cli(run):
    with pytest.raises(WorkloadError, match="clocks"):
        Options(clocks="turbo")
    r = run("compare", "--n", "4096", "--d", "128", "--dtype", "fp16", "--clocks", "turbo")
    assert r.exit_code == 2 and "turbo" in r.output
    args = ["compare", "--n", "65536", "--d", "128", "--heads", "8", "--dtype", "fp16", "--gpu", "h200"]
    times = {}
    for clocks in ("boost", "sustained"):
        r = run(*args, "--clocks", clocks, "--format", "json")
        assert r.exit_code == 0, r.output
        times[clocks] = json.loads(r.stdout)["algorithms"][1]["predicted_time_s"]
    h200 = load_profile("h200")
    share = h200.implementation("sdpa-cudnn").sustained_share
    assert share is not None and share < 1  # the bundled calibration measured it
    assert times["sustained"] > times["boost"]
    r = json.loads(run(*args, "--clocks", "sustained", "--format", "json").stdout)
    assert r["algorithms"][1]["clock_share"] == share and r["algorithms"][0]["clock_share"] == 1.0
    r = json.loads(run(*args, "--clocks", "boost", "--format", "json").stdout)
    assert r["algorithms"][1]["clock_share"] == 1.0


def test_power_figures_take_the_median_over_an_implementations_series():
    def series(first_ms: float, onset_calls: int, slower: float) -> list[float]:
        return [first_ms * 1e-3] * onset_calls + [first_ms * slower * 1e-3] * 1200

    def entry(impl: str, times: list[float], i: int) -> dict:
        return {"impl": impl, "shape": [8, 16, 2048, 128], "idle_s": 3, "series": i, "times_s": times}

    flash = [series(1.0, 50, 1 / 0.95), series(1.0, 26, 1 / 0.90), series(1.0, 60, 1 / 0.96)]
    # cuDNN's clocks fell in one series of three: a share, but no time to fall
    cudnn = [series(0.5, 100, 1.0), series(0.5, 100, 1 / 0.9), series(0.5, 100, 1.0)]
    m = {
        "sustained": {
            "series": [entry("sdpa-flash", t, i) for i, t in enumerate(flash)]
            + [entry("sdpa-cudnn", t, i) for i, t in enumerate(cudnn)]
        }
    }
    out = power_figures(m)
    # shares 0.95, 0.90, 0.96: median 0.95; onsets 50, 26, 60 ms: median 50 ms
    assert out["implementations.sdpa-flash.sustained_share"][0] == 0.95
    assert out["implementations.sdpa-flash.sustained_after"][0] == "50 ms"
    assert "3 series" in out["implementations.sdpa-flash.sustained_after"][1]
    assert out["implementations.sdpa-cudnn.sustained_share"][0] == 1.0
    assert "implementations.sdpa-cudnn.sustained_after" not in out
