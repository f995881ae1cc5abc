"""The L2 reuse curve (issue 14): the profile field, the re-read rule, grids against scalars,
the knee flag, and the model against the microbenchmark's families."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memmodel import compare, load_profile
from memmodel.calibration.l2_reuse_fit import fitted_points
from memmodel.fileio import read_json
from memmodel.model import l2_context
from memmodel.traffic import l2 as l2m
from memmodel.traffic.reuse import ReuseCurve, cross_wave_hbm, live_footprint, poorly_modelled, step_curve
from memmodel.workload import Workload
from tests.test_grid import assert_rows_are_scalar_calls

ROOT = Path(__file__).resolve().parent.parent
RECORD = ROOT / "validation" / "h200" / "l2-reuse" / "l2_reuse.json.gz"
MiB = 2**20


def test_the_bundled_h200_holds_the_curve_fitted_from_the_record():
    p = load_profile("h200")
    points = dict(p.figures["memory.l2.reuse"])
    assert points == fitted_points(read_json(RECORD))
    # every re-read hits up to 3/8 of the L2, 44 % miss at half, all from 3/4 on
    assert points[375] == 0.0 and points[500] == 0.44 and points[750] == 1.0
    assert p.provenance["memory.l2.reuse"].kind == "measured"


def test_h100s_derive_the_curve_and_others_have_none():
    h100 = load_profile("h100-sxm")
    assert h100.provenance["memory.l2.reuse"].kind == "derived"
    assert l2_context(h100, "on").reuse is not None
    assert l2_context(load_profile("a100"), "on").reuse is None


def test_curve_interpolates_between_points():
    c = ReuseCurve((22.5 * MiB, 30 * MiB, 45 * MiB), (0.0, 0.44, 1.0))
    assert c.miss_share(10 * MiB) == 0.0
    assert c.miss_share(30 * MiB) == pytest.approx(0.44)
    assert c.miss_share(37.5 * MiB) == pytest.approx(0.72)
    assert c.miss_share(200 * MiB) == 1.0
    # the step (no measured curve): hit up to the capacity, miss past it
    s = step_curve(30 * MiB)
    assert s.miss_share(30 * MiB) == 0.0 and s.miss_share(30 * MiB + 1) == 1.0


def test_cross_wave_rule_pins_numbers():
    c = ReuseCurve((22.5 * MiB, 30 * MiB, 45 * MiB), (0.0, 0.44, 1.0))
    # 30 MiB read in 2 waves (60 MiB per wave in all) at 30 MiB live: 30 + 30 · 0.44 = 43.2 MiB
    assert cross_wave_hbm(30 * MiB, 60 * MiB, 10**12, 30 * MiB, c) == round(43.2 * MiB)
    # never more than requested
    assert cross_wave_hbm(30 * MiB, 60 * MiB, 40 * MiB, 45 * MiB, c) == 40 * MiB
    # 4 heads of 2 MiB in a wave of 264 CTAs, 66 each: 8 MiB live
    assert live_footprint(2 * MiB, 66, 264) == 8 * MiB


@settings(max_examples=200, deadline=None)
@given(
    unique=st.integers(1, 2**34),
    waves=st.integers(1, 64),
    groups=st.integers(1, 64),
    ctas=st.integers(1, 4096),
    concurrent=st.integers(1, 528),
    ws=st.integers(1, 2**30),
    streamed=st.integers(0, 2**26),
)
def test_reread_with_the_curve_row_equals_scalar(unique, waves, groups, ctas, concurrent, ws, streamed):
    """Element i of a grid equals the scalar result (the curve path of :func:`.l2.reread_hbm`)."""
    curve = l2_context(load_profile("h200"), "on").reuse
    l2 = l2m.L2("cold", 30 * MiB, concurrent, 60 * MiB, curve, streamed)
    requested = unique * waves
    scalar = l2m.reread_hbm(unique, requested, ctas, ws, l2, groups)
    arr = lambda x: np.array([x, 1], dtype=np.int64)  # noqa: E731
    l2a = l2m.L2("cold", 30 * MiB, arr(concurrent), 60 * MiB, curve, arr(streamed))
    grid = l2m.reread_hbm(arr(unique), arr(requested), arr(ctas), arr(ws), l2a, arr(groups))
    assert isinstance(scalar, int) and grid.dtype == np.int64
    assert grid[0] == scalar
    assert unique <= scalar <= requested or scalar == requested


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("impl", ["sdpa-flash", "triton", "sdpa-cudnn"])
@pytest.mark.parametrize("backward", [False, True])
def test_a_grid_across_the_knee_gives_every_row_what_one_workload_gives(causal, impl, backward):
    if impl == "triton" and backward:
        pytest.skip("the Triton kernel has no backward")
    mesh = {
        "n": np.array([16384, 49152, 65536, 98304, 131072], dtype=np.int64),
        "n_kv": np.array([16384, 49152, 65536, 98304, 131072], dtype=np.int64),
        "d": np.array([128, 64, 128, 128, 64], dtype=np.int64),
        "batch": np.array([1, 1, 2, 1, 1], dtype=np.int64),
        "heads": np.array([8, 1, 4, 1, 2], dtype=np.int64),
        "kv_heads": np.array([2, 1, 4, 1, 2], dtype=np.int64),
    }
    assert_rows_are_scalar_calls(mesh, "h200", "fp16", impl, causal=causal, backward=backward)


def test_knee_flag_in_params_and_caveats():
    p = load_profile("h200")
    # one head of 32 MiB K/V (0.53 x L2) over two waves: near the knee
    near = compare(Workload(n=65536, d=128, dtype="fp16"), p, impl="sdpa-flash")
    assert near.tiled.traffic.params["l2_knee"] is True
    assert any("capacity knee" in c for c in near.caveats)
    # 8 MiB: far below it
    far = compare(Workload(n=16384, d=128, dtype="fp16"), p, impl="sdpa-flash")
    assert far.tiled.traffic.params["l2_knee"] is False
    assert not any("capacity knee" in c for c in far.caveats)
    # causal past the knee's start: flagged
    causal = compare(Workload(n=131072, d=128, dtype="fp16", causal=True), p, impl="sdpa-flash")
    assert any("causal K/V re-reads" in c for c in causal.caveats)
    # a grid: flags per row
    assert poorly_modelled(np.array([8 * MiB, 32 * MiB]), 512, 264, False, l2_context(p, "on").reuse).tolist() == [
        False,
        True,
    ]


def test_a_profile_without_the_curve_says_so_where_it_matters():
    a100 = load_profile("a100")
    c = compare(Workload(n=131072, d=128, dtype="fp16"), a100, impl="sdpa-flash")
    assert any("no measured L2 reuse curve" in x for x in c.caveats)
    short = compare(Workload(n=1024, d=128, dtype="fp16", heads=8), a100, impl="sdpa-flash")
    assert not any("no measured L2 reuse curve" in x for x in short.caveats)


def test_the_model_follows_the_microbenchmark_families_it_was_fitted_to_and_heads():
    out = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "sims" / "l2_reuse_check.py")], capture_output=True, text=True, check=True
    ).stdout
    rows = [line.split("|") for line in out.splitlines() if line.startswith("| ") and "%" in line]
    summary = {r[1].strip(): float(r[3].strip().rstrip("%")) for r in rows if len(r) == 5}
    for family in ("waves-1", "waves-2", "waves-4", "heads-2", "heads-4", "half", "parity", "stream"):
        assert summary[family] < 1.0, family
