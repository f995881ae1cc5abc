"""cuDNN on Blackwell (compute capability 10.x): its 16-bit forward as FA4's design (two 128-row
Q tiles a CTA, FA4's figures, lazy rescale), its split rule, and what stays cuDNN's own."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from memmodel.hardware import load_profile
from memmodel.implementations import (
    CUDNN_SM100_ROWS,
    cudnn_sm100_splits,
    cudnn_tiles,
    forward_design,
    splits_by_forward,
)
from memmodel.model import compare
from memmodel.options import options_for
from memmodel.workload import Workload

from .conftest import REPO

PROFILES = REPO / "memmodel" / "hardware" / "profiles"


def bf16(**kw):
    return Workload(dtype="bf16", **{"batch": 2, "heads": 16, "n": 8192, "d": 128, **kw})


def ardit(n=985, dtype="bf16"):
    # cudnn-frontend's auto_regressive_dit: one frame's queries over 62208 cached keys, 9 heads
    return Workload(dtype=dtype, batch=1, heads=9, n=n, n_kv=62208, d=128)


@pytest.mark.parametrize(
    ("gpu", "d", "dtype", "want"),
    [
        ("b200", 128, "bf16", (256, 128)),  # Tiles_Q = 2 x TILE_M 128 (the SM100 engine)
        ("gb300", 64, "fp16", (256, 128)),  # compute capability 10.3: the same family
        ("b200", 256, "bf16", (128, 128)),  # no source read above d 128
        ("b200", 128, "fp8", (128, 128)),  # nor for its fp8 graph
        ("h200", 128, "bf16", (128, 128)),  # Hopper: 2 x 64-row warpgroups
        ("rtx5090", 128, "bf16", (128, 128)),  # compute capability 12.0: no tcgen05
    ],
)
def test_tiles_by_architecture_head_dim_and_dtype(gpu, d, dtype, want):
    assert cudnn_tiles(d, load_profile(gpu), dtype) == want


def test_forward_design_is_fa4s_on_blackwell_in_16_bits_only():
    b200 = load_profile("b200")
    assert forward_design("sdpa-cudnn", b200, "bf16") == ("fa4", True)
    assert forward_design("sdpa-cudnn", b200, "bf16", 128) == ("fa4", True)
    assert forward_design("sdpa-cudnn", b200, "bf16", 256) is None  # no source read above d 128
    design, rows = forward_design("sdpa-cudnn", b200, "bf16", np.array([64, 128, 192, 256]))
    assert design == "fa4" and rows.tolist() == [True, True, False, False]
    assert forward_design("sdpa-cudnn", b200, "fp8") is None
    assert forward_design("sdpa-cudnn", load_profile("h200"), "bf16") is None
    assert forward_design("sdpa-flash", b200, "bf16") is None
    assert splits_by_forward("sdpa-cudnn", CUDNN_SM100_ROWS) and not splits_by_forward("sdpa-cudnn", 128)


def test_a_profile_that_measured_cudnn_keeps_its_own_figures(tmp_path):
    # a user's own calibration of a Blackwell GPU: its measured efficiency wins over the design's
    b200 = load_profile("b200")
    data = yaml.safe_load((PROFILES / "b200.yaml").read_text())
    data["name"] = "b200-mine"
    data["implementations"] = {"sdpa-cudnn": {"efficiency": {"value": {128: 0.5}, "source": "mine"}}}
    data["sources"]["mine"] = {"title": "my calibration", "kind": "measured", "date": "2026-12-05"}
    mine = tmp_path / "b200-mine.yaml"
    mine.write_text(yaml.safe_dump(data))
    own = load_profile(str(mine))
    assert own.kind_of("implementations.sdpa-cudnn.efficiency") == "measured"
    assert forward_design("sdpa-cudnn", own, "bf16") is None
    assert forward_design("sdpa-cudnn", b200, "bf16") == ("fa4", True)


def test_forward_takes_fa4s_figures_and_runs_as_fa4_does_on_a_long_grid():
    # GB300 (SFU rate doubled: FA4 emulates no exponentials there), one K/V head per query head
    # (no GQA packing): the same kernel, tiles and figures, so the same forward time
    gb300 = load_profile("gb300")
    w = bf16(causal=True, n=16384)
    cudnn = compare(w, gb300, options_for("sdpa-cudnn", w, gb300))
    fa4 = compare(w, gb300, options_for("fa4", w, gb300))
    fwd = next(k for k in cudnn.tiled.timing.kernels if k.name == "fa2_fwd")
    assert cudnn.tiled.traffic.params["block_q"] == 256 and fa4.tiled.traffic.params["block_q"] == 256
    # to the launch overhead cuDNN's kernel pays for the memset launched before it (extra_launches)
    gap = float(fwd.time_s) - float(fa4.tiled.timing.kernels[0].time_s)
    assert gap == pytest.approx(gb300.launch_overhead_s, rel=1e-6)
    # each K/V block read once per 256 query rows: T_r = 16384 / 256 = 64, causal half ~ 32.5 visits
    hopper = load_profile("h200")
    on_h200 = compare(w, hopper, options_for("sdpa-cudnn", w, hopper))
    assert on_h200.tiled.traffic.params["block_q"] == 128


def test_the_backward_keeps_cudnns_own_figures():
    b200 = load_profile("b200")
    w = bf16()
    train = compare(w, b200, options_for("sdpa-cudnn", w, b200, backward=True))
    assert train.tiled.traffic.params["splits"] == 1  # the training forward is not split
    names = [k.name for k in train.tiled.traffic.kernels]
    assert "cudnn_combine" not in names


@pytest.mark.parametrize(
    ("ctas", "kv_tiles", "rows", "want"),
    [
        # 36 CTAs over 486 K/V tiles, 8865 rows (60 combine waves: 6 tiles a partial):
        # s=1 507, s=2 264 + 12 = 276, s=4 143 + 24 = 167, s=8 2 x 82 + 48 = 212 -> 4
        (36, 486, 8865, 4),
        # 72 CTAs, 18432 rows (125 waves: 12.5 a partial): s=1 507, s=2 264 + 25 = 289, s=4 2 x 143 + 50 -> 2
        (72, 486, 18432, 2),
        (1024, 16, 262144, 1),  # 7 waves whole: a split only adds waves and combine
        (36, 1, 8865, 1),  # one K/V tile: nothing to split
        # a decode-shaped launch: 8 CTAs over 256 tiles, 16 rows (the 0.35 floor): 16 ways,
        # 8 x 16 = 128 CTAs in one wave, 16 + 21 + 5.6 = 42.6 against 277
        (8, 256, 16, 16),
    ],
)
def test_split_rule_pins(ctas, kv_tiles, rows, want):
    assert cudnn_sm100_splits(ctas, kv_tiles, rows, 148) == want


@given(
    waves=st.integers(1, 8),
    kv_tiles=st.integers(1, 4096),
    rows=st.integers(1, 10**7),
    sms=st.sampled_from([108, 132, 148, 160]),
)
def test_a_grid_of_whole_waves_never_splits(waves, kv_tiles, rows, sms):
    # s ways cost s * waves * (ceil(kv / s) + 21) >= waves * (kv + 21 s) > the unsplit waves * (kv + 21)
    assert cudnn_sm100_splits(waves * sms, kv_tiles, rows, sms) == 1


@given(ctas=st.integers(1, 2000), kv_tiles=st.integers(1, 4096), rows=st.integers(1, 10**7))
def test_splits_are_powers_of_two_that_leave_two_tiles_a_chunk(ctas, kv_tiles, rows):
    s = cudnn_sm100_splits(ctas, kv_tiles, rows, 148)
    assert s & (s - 1) == 0 and 1 <= s <= 256
    assert s == 1 or kv_tiles // s >= 2


def test_an_under_filled_grid_splits_with_its_forward_kernel_and_a_combine():
    gb200 = load_profile("gb200")
    w = ardit()
    c = compare(w, gb200, options_for("sdpa-cudnn", w, gb200))
    names = [k.name for k in c.tiled.traffic.kernels]
    assert names == ["cudnn_zero", "fa2_fwd", "cudnn_combine"]
    assert c.tiled.traffic.params["splits"] == 4
    fwd = c.tiled.traffic.kernels[1]
    assert int(fwd.ctas) == 9 * 4 * 4  # 9 heads x ceil(985 / 256) Q tiles x 4 chunks
    out = {t.tensor: t for t in fwd.transfers if t.level == "l2" and t.direction == "write"}
    assert int(out["O_partial"].bytes) == 9 * 4 * 985 * 128 * 4  # B·H·splits·N·d·4 = 18,155,520
    # unsplit, the same products on 36 of 148 SMs
    whole = compare(w, gb200, options_for("sdpa-cudnn", w, gb200, splits=1))
    assert [k.name for k in whole.tiled.traffic.kernels] == ["cudnn_zero", "fa2_fwd"]
    assert c.tiled.timing.time_s < 0.5 * whole.tiled.timing.time_s
    # fp8 keeps its own tiles (128 rows) and no split of this kind
    w8 = ardit(dtype="fp8")
    c8 = compare(w8, gb200, options_for("sdpa-cudnn", w8, gb200))
    assert c8.tiled.traffic.params["block_q"] == 128
    assert "cudnn_combine" not in [k.name for k in c8.tiled.traffic.kernels]


def test_the_cli_names_the_design_and_the_split_rule(run):
    args = ["compare", "--gpu", "gb200", "--impl", "sdpa-cudnn", "--n", "985", "--n-kv", "62208", "--d", "128"]
    args += ["--heads", "9", "--dtype", "bf16"]
    r = run(*args)
    assert r.exit_code == 0
    assert "taken as fa4's design" in r.stderr
    assert "choose_split_kv" in r.stderr and "up to 4 ways" in r.stderr
    j = json.loads(run(*args, "--format", "json").stdout)
    tiled = next(a for a in j["algorithms"] if a["name"] == "tiled")
    assert tiled["params"]["splits"] == 4
    assert [k["name"] for k in tiled["kernels"]][-1] == "cudnn_combine"
    # on the H200 neither: its own measured kernel
    h = run(
        "compare",
        "--gpu",
        "h200",
        "--impl",
        "sdpa-cudnn",
        "--n",
        "985",
        "--n-kv",
        "62208",
        "--d",
        "128",
        "--heads",
        "9",
        "--dtype",
        "bf16",
    )
    assert h.exit_code == 0 and "fa4's design" not in h.stderr and "choose_split_kv" not in h.stderr


@pytest.mark.parametrize(
    ("gpu", "sms", "mhz"),
    [("gb200", 148, 2062), ("b200", 148, 1980), ("b300", 148, 1980), ("gb300", 160, 1907)],
)
def test_blackwell_l2_bandwidth_is_the_gb200_measurement_at_memmodels_method(gpu, sms, mhz):
    # gpu-l2-cache on a GB200: 18.86 TB/s (20-83 MB); x 9.265 / 9.8 (our H200 calibration over the
    # same benchmark's H200) = 17.83 TB/s at 148 SMs x 2062 MHz, re-clocked per SM: b200 and b300
    # 17.83 x (148 x 1980) / (148 x 2062) = 17.12 TB/s, gb300 x (160 x 1907) / (148 x 2062) = 17.83
    per_sm_clock = 18.856e12 * 9.265 / 9.8 / (148 * 2062e6)
    profile = load_profile(gpu)
    assert profile.l2.bandwidth_bytes_per_s == pytest.approx(per_sm_clock * sms * mhz * 1e6, rel=2e-3)
    assert profile.kind_of("memory.l2.bandwidth") == "published"
