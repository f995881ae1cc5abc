"""The measured causal re-read curves (memory.l2.causal_reuse_d*) and the K/V live they are read at."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from memmodel.calibration.causal_reuse import fitted_curves
from memmodel.fileio import read_json
from memmodel.hardware import load_profile
from memmodel.model import compare, l2_context
from memmodel.traffic.flash import _log_interp
from memmodel.traffic.reuse import ReuseCurve
from memmodel.workload import Workload

from .conftest import profile_with_l2

ROOT = Path(__file__).resolve().parent.parent
H200 = load_profile("h200")
L2 = 60 * 2**20


def _kv_reads(w: Workload, profile=H200, impl: str = "sdpa-flash"):
    k = next(k for k in compare(w, profile, impl=impl).tiled.traffic.kernels if k.name == "fa2_fwd")
    return sum(np.asarray(t.bytes) for t in k.transfers if t.tensor in ("K", "V") and t.level == "hbm")


def test_one_head_keeps_its_own_k_and_v_live():
    # one head of 65536 at d = 128: K and V are 2 · 65536 · 128 · 2 = 32 MiB, whatever its span
    c = compare(Workload(n=65536, d=128, causal=True, dtype="fp16"), H200, impl="sdpa-flash")
    assert c.tiled.traffic.params["causal_live_bytes"] == pytest.approx(32 * 2**20)


def test_many_heads_keep_one_plus_tc_over_span_heads_live():
    # 8 heads of 32768, d = 128, 128 x 64 blocks: T_r = 256, T_c = 512, visited = 256 · 257 = 65792
    # per head (the causal blocks); 264 CTAs at once: span s = 65792 / 264 = 249.2 steps;
    # heads in flight 8 · (s + 512) / (8 s + 512) = 2.418; K and V of one head 16 MiB
    w = Workload(n=32768, d=128, heads=8, causal=True, dtype="fp16")
    c = compare(w, H200, impl="sdpa-flash")
    s = 65792 / 264
    assert c.tiled.traffic.params["causal_live_bytes"] == pytest.approx(8 * (s + 512) / (8 * s + 512) * 16 * 2**20)


@settings(max_examples=40, deadline=None)
@given(heads=st.integers(1, 64), n=st.sampled_from([4096, 16384, 65536]), group=st.sampled_from([1, 2, 4, 8]))
def test_the_live_k_v_is_at_least_one_head_and_at_most_twice_all(heads, n, group):
    # read against one head, which keeps at least half of its K/V live on average
    if heads % group:
        heads = group * max(1, heads // group)
    w = Workload(n=n, d=128, heads=heads, kv_heads=heads // group, causal=True, dtype="fp16")
    live = compare(w, H200, impl="sdpa-flash").tiled.traffic.params["causal_live_bytes"]
    one = 2 * n * 128 * 2
    assert one * (1 - 1e-9) <= live <= 2 * one * (heads // group) * (1 + 1e-9)


def test_the_fit_reads_the_reference_record():
    record = read_json(ROOT / "validation/h200/causal-reuse-2/h200-causal-reuse-ref-placed.json.gz")
    assert record["ncu"]["placements"] == 5  # fitted at the median of five placements (probe 12)
    curves = fitted_curves(record, L2)
    assert sorted(curves) == [64, 128, 256]
    # d = 128 at 1 x the L2 (n = 122880: K, V 60 MiB): the median placement read 5.765 GB, 90.14
    # extra passes over K and V of the 480 re-read passes the model counts miss: 0.1880
    assert curves[128][1000] == pytest.approx(0.1880, abs=2e-4)
    for d, points in curves.items():
        assert len(points) == 8
        assert list(points.values()) == sorted(points.values())  # more K/V live, more misses
        # the bundled profile holds exactly what the fit gives
        assert dict(H200.figures[f"memory.l2.causal_reuse_d{d}"]) == points


def test_several_heads_curves_come_from_the_four_head_references():
    record = read_json(ROOT / "validation/h200/causal-reuse-2/h200-causal-heads-ref.json.gz")
    assert fitted_curves(record, L2) == {}  # no one-head rows
    curves = fitted_curves(record, L2, heads=4)
    assert sorted(curves) == [64, 128, 256]
    assert [len(p) for p in curves.values()] == [7, 8, 7]
    for d, points in curves.items():
        assert list(points.values()) == sorted(points.values())
        assert dict(H200.figures[f"memory.l2.causal_reuse_h4_d{d}"]) == points
    # four heads of 80k at d = 128 (K/V live 1.008 x the L2): 46.41 extra passes over their K and
    # V of the 319.5 re-read passes the model counts miss: 0.1452
    assert curves[128][1008] == pytest.approx(0.1452, abs=2e-4)
    # below the knee four heads miss more often than one head at the same K/V live (0.4 x: 4.5
    # against 1.0 per mille), around it less (1 x: 14.5 % against 18.8 %)
    one = dict(H200.figures["memory.l2.causal_reuse_d128"])
    assert curves[128][418] > 3 * one[408]
    assert curves[128][1008] < 0.8 * one[1000]


def kv_miss_share(w: Workload, impl: str = "sdpa-flash") -> float:
    """The share of a causal forward's K/V re-reads the model has miss."""
    kernel = next(k for k in compare(w, H200, impl=impl).tiled.traffic.kernels if k.name == "fa2_fwd")
    kv = 2 * w.batch * w.kv_heads_ * w.n * w.d * w.element_bytes
    requested = 2 * kernel.bytes(level="l2", direction="read", tensor="K")
    return (2 * kernel.bytes(level="hbm", direction="read", tensor="K") - kv) / (requested - kv)


def test_grids_of_several_k_v_heads_read_the_curves_of_their_head_count():
    # four heads of 49152 at d = 128 (K/V live 0.706 x the L2) read the four-head curve: 5.08 %
    w = Workload(n=49152, d=128, heads=4, causal=True, dtype="fp16")
    live = compare(w, H200, impl="sdpa-flash").tiled.traffic.params["causal_live_bytes"]
    assert live / (60 * 2**20) == pytest.approx(0.706, abs=1e-3)
    assert kv_miss_share(w) == pytest.approx(0.0508, rel=0.01)
    # sixteen heads of 30720 (0.702 x): the sixteen-head curve, 2.34 %
    assert kv_miss_share(Workload(n=30720, d=128, heads=16, causal=True, dtype="fp16")) == pytest.approx(
        0.0234, rel=0.02
    )


@settings(max_examples=25, deadline=None)
@given(kv_heads=st.sampled_from([2, 3, 4, 6, 8, 12, 16, 32]), n=st.sampled_from([24576, 36864, 49152]))
def test_between_measured_head_counts_the_share_lies_between_theirs(kv_heads, n):
    # at the same K/V live a grid of k heads (no GQA) reads between the curves of the measured
    # counts about k (log-linear in the count)
    w = Workload(n=n, d=128, heads=kv_heads, causal=True, dtype="fp16")
    share = kv_miss_share(w)
    tiled = compare(w, H200, impl="sdpa-flash").tiled.traffic
    live = tiled.params["causal_live_bytes"] / (60 * 2**20) * 1000
    counts = [1, 2, 4, 16]
    curves = {
        1: dict(H200.figures["memory.l2.causal_reuse_d128"]),
        **{n: dict(H200.figures[f"memory.l2.causal_reuse_h{n}_d128"]) for n in counts[1:]},
    }

    def at(n: int) -> float:
        xs = sorted(curves[n])
        return float(np.exp(np.interp(live, xs, np.log([curves[n][x] for x in xs]))))

    # within every curve's measured span; the model takes the larger of the curves' share and the
    # reuse-window rule's (other heads' data streaming through), so the curves' is a lower bound
    assume(all(min(curves[c]) <= live <= max(curves[c]) for c in counts))
    lo = max(c for c in counts if c <= kv_heads)
    hi = min((c for c in counts if c >= kv_heads), default=16)
    t = 0.0 if hi == lo else (np.log(min(kv_heads, 16)) - np.log(lo)) / (np.log(hi) - np.log(lo))
    expected = float(np.exp((1 - t) * np.log(at(lo)) + t * np.log(at(hi))))
    assert share >= expected * 0.999
    assert min(at(lo), at(hi)) * 0.999 <= expected <= max(at(lo), at(hi)) * 1.001


def test_gqa_grids_read_the_gqa_curve_at_the_head_dims_it_was_measured_at():
    # GQA 4:1 on 8 K/V heads of 59392 (live 0.706 x the L2): the GQA curve's 0.7 point, 3.45 %
    w = Workload(n=59392, d=128, heads=32, kv_heads=8, causal=True, dtype="bf16")
    live = compare(w, H200, impl="sdpa-flash").tiled.traffic.params["causal_live_bytes"] / (60 * 2**20)
    assert live == pytest.approx(0.706, abs=2e-3)
    assert kv_miss_share(w) == pytest.approx(0.0345, rel=0.02)
    curve = dict(H200.figures["memory.l2.causal_reuse_gqa_d128"])
    assert sorted(curve) == [547, 706, 848, 993, 1243]  # medians of six grids per bin
    # at d = 64 the GQA curve of the second references (causal-reuse-3): 4 K/V heads of 98304 at
    # 570.6 per mille, log-linear between 554 (0.16 %) and 703 (0.88 %): about 0.19 %, where the
    # four-head curve would give about 0.5 % (the blind check read it at +31 %, the GQA curve -17 %)
    w64 = Workload(n=98304, d=64, heads=16, kv_heads=4, causal=True, dtype="fp16")
    live64 = compare(w64, H200, impl="sdpa-flash").tiled.traffic.params["causal_live_bytes"] / (60 * 2**20) * 1000
    g64 = dict(H200.figures["memory.l2.causal_reuse_gqa_d64"])
    expected = float(np.exp(np.interp(live64, sorted(g64), np.log([g64[x] for x in sorted(g64)]))))
    assert live64 == pytest.approx(570.6, abs=0.5)
    assert kv_miss_share(w64) == pytest.approx(expected, rel=0.02)
    assert 0.0017 < expected < 0.0021
    # d = 256 has no GQA curve: its GQA grids read the head-count curves
    assert "memory.l2.causal_reuse_gqa_d256" not in H200.figures


def test_the_gqa_fit_bins_the_reference_grids():
    record = read_json(ROOT / "validation/h200/causal-reuse-2/h200-causal-gqa-ref.json.gz")
    curves = fitted_curves(record, L2, gqa=True)
    assert list(curves) == [128]
    # five bins of six grids each (G = 4 on 1, 2, 4, 8 K/V heads; G = 8 on 1, 4)
    assert curves[128] == dict(H200.figures["memory.l2.causal_reuse_gqa_d128"])
    assert list(curves[128].values()) == sorted(curves[128].values())


def test_log_interpolation_between_points_and_below_the_first():
    curve = ReuseCurve((10.0, 20.0, 30.0), (0.01, 0.04, 0.5))
    # halfway between 0.01 and 0.04 in the logarithm: sqrt(0.01 · 0.04) = 0.02
    assert _log_interp(15.0, curve) == pytest.approx(0.02)
    # below the first point at the first segment's rate: 0.01 / 2 at 5 (a factor 4 per 10)
    assert _log_interp(5.0, curve) == pytest.approx(0.005)
    assert _log_interp(40.0, curve) == pytest.approx(0.5)  # past the last: the last


def test_the_curve_moves_one_long_head_and_only_flash_attention_2():
    # one head of 131072 at d = 128 (64 MiB of K and V): the curve at 64 MiB gives about a quarter
    # of the 512 re-read passes missing; without it (the window rule) the model reads K/V 32 times
    w = Workload(n=131072, d=128, causal=True, dtype="fp16")
    kv = 2 * 131072 * 128 * 2
    assert _kv_reads(w) / kv > 100
    import dataclasses

    figures = {k: v for k, v in H200.figures.items() if "causal_reuse" not in k}
    bare = dataclasses.replace(H200, figures=figures)
    assert l2_context(bare, "on").causal is None
    assert _kv_reads(w, bare) / kv < 40
    # cuDNN has curves of its own (probe 11): the bare profile has neither
    assert _kv_reads(w, H200, "sdpa-cudnn") != _kv_reads(w, bare, "sdpa-cudnn")


def test_the_grid_path_equals_the_scalar_path():
    # the sweep evaluates grids through the same code: element i of a grid is the scalar result
    ns = np.array([32768, 65536, 131072])
    w = Workload(n=ns, d=128, heads=2, causal=True, dtype="fp16")
    grid = compare(w, H200, impl="sdpa-flash").tiled.traffic.params["causal_live_bytes"]
    for i, n in enumerate(ns):
        one = compare(Workload(n=int(n), d=128, heads=2, causal=True, dtype="fp16"), H200, impl="sdpa-flash")
        assert grid[i] == pytest.approx(one.tiled.traffic.params["causal_live_bytes"])
    kv_grid = _kv_reads(w)
    for i, n in enumerate(ns):
        assert kv_grid[i] == _kv_reads(Workload(n=int(n), d=128, heads=2, causal=True, dtype="fp16"))


def test_a_shared_kv_head_is_all_live_after_its_first_query_head():
    # GQA 8:1, one K/V head of 65536 at d = 128 (32 MiB of K and V): T_r = 512, T_c = 1024,
    # visited = 2 · (1 + ... + 512) = 262,656 blocks, s = 262,656 / 264 = 994.9 steps; live
    # (8s − s/2 + 1024)/(8s + 1024) = 0.945 K/V heads, one head (s/2 + 1024)/(s + 1024) = 0.754:
    # the curve is read at 1.253 × 32 MiB
    w = Workload(n=65536, d=128, heads=8, kv_heads=1, causal=True, dtype="fp16")
    s = 262656 / 264
    ratio = ((8 * s - s / 2 + 1024) / (8 * s + 1024)) / ((s / 2 + 1024) / (s + 1024))
    live = compare(w, H200, impl="sdpa-flash").tiled.traffic.params["causal_live_bytes"]
    assert live == pytest.approx(ratio * 32 * 2**20)
    assert ratio == pytest.approx(1.253, abs=1e-3)


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(1, 400_000),
    n_kv=st.integers(1, 400_000),
    b_r=st.sampled_from([16, 32, 64, 128]),
    b_c=st.sampled_from([16, 32, 64, 128, 256]),
)
def test_causal_visited_blocks_on_arrays_equal_the_scalar_closed_form(n, n_kv, b_r, b_c):
    from memmodel.traffic.blocks import _causal_visited_array, _causal_visited_scalar

    got = _causal_visited_array(np.array([n, n_kv]), np.array([n_kv, n]), b_r, b_c)
    assert list(got) == [_causal_visited_scalar(n, n_kv, b_r, b_c), _causal_visited_scalar(n_kv, n, b_r, b_c)]


def test_the_knee_caveat_says_which_causal_rule_read_the_bytes():
    w = Workload(n=98304, d=128, causal=True, dtype="fp16")  # 48 MiB of K and V: past the knee
    flash = " ".join(compare(w, H200, impl="sdpa-flash").caveats)
    cudnn = " ".join(compare(w, H200, impl="sdpa-cudnn").caveats)
    triton = " ".join(compare(w, H200, impl="triton").caveats)  # walks K/V forward: no curve
    # the checked figures of each schedule's curves, from the records (memmodel/data/validated.json)
    from memmodel.validated import checked

    assert "read from the measured causal curve" in flash and f"(on the H200: {checked('causal_curve_fa2')};" in flash
    assert checked("causal_curve_fa2").startswith("one head ")
    assert "read from the measured causal curve" in cudnn and f"(on the H200: {checked('causal_curve_cudnn')};" in cudnn
    assert "read from the measured causal curve" not in triton and "does not follow it" in triton


def test_cudnn_keeps_one_heads_kv_live():
    # probe 11: 8 heads of 32768 at d = 128 (16 MiB of K and V each) read their K/V once, as one
    # head does: the curve is read at one head's 16 MiB (below its first point), not at 8 heads'
    w = Workload(n=32768, d=128, heads=8, causal=True, dtype="fp16")
    one = 2 * 32768 * 128 * 2
    live = compare(w, H200, impl="sdpa-cudnn").tiled.traffic.params["causal_live_bytes"]
    assert live == pytest.approx(one)
    assert _kv_reads(w, H200, "sdpa-cudnn") == pytest.approx(8 * one, rel=1e-3)
    assert _kv_reads(w, H200, "sdpa-flash") > 2 * 8 * one  # FlashAttention-2 keeps several heads live


@pytest.mark.parametrize(
    ("field", "key", "why"),
    [
        ("causal_reuse_d128", 500, "a miss share is between 0 and 1"),
        ("reuse", 500, "a miss share is between 0 and 1"),
        ("wave_drift", 128, "a wave cannot drift apart by more than a whole walk a wave"),
        ("causal_gqa_others", 128, "a share of the L2"),
    ],
)
def test_a_share_above_one_is_refused_in_one_line(field, key, why, tmp_path):
    from click.testing import CliRunner

    from memmodel.cli import cli

    path = tmp_path / "x.yaml"
    path.write_text(profile_with_l2(field, f"{{{key}: 1.5}}"))
    result = CliRunner().invoke(cli, ["compare", "--n", "4096", "--d", "128", "--gpu", str(path)])
    assert result.exit_code == 2
    assert f"memory.l2.{field}.{key}: 1.5 is above 1: {why}" in result.output
    assert "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_cudnn_curves_come_from_probe_11s_one_head_rows():
    record = read_json(ROOT / "validation/h200/probe-11/h200-cudnn-causal-probe.json.gz")
    curves = fitted_curves(record, L2, "sdpa-cudnn")
    assert sorted(curves) == [64, 128, 256]
    for d, points in curves.items():
        assert len(points) == 8  # the several-head rows are not fitted: they check the one-head-live rule
        assert dict(H200.figures[f"memory.l2.cudnn_causal_reuse_d{d}"]) == points
    # d = 128 at 2.2 x the L2 (n = 270336): 493.9 extra passes of the 1056 the model counts: 0.4679
    assert curves[128][2200] == pytest.approx(0.4679, abs=2e-4)


def test_d96_has_its_own_curves_and_a_missing_count_is_read_relative_to_d128():
    import dataclasses

    from memmodel.traffic.flash import _curve_share

    record = read_json(ROOT / "validation/h200/causal-reuse-3/h200-causal-ref-d96.json.gz")
    assert fitted_curves(record, L2) == {96: dict(H200.figures["memory.l2.causal_reuse_d96"])}
    assert fitted_curves(record, L2, gqa=True) == {96: dict(H200.figures["memory.l2.causal_reuse_gqa_d96"])}
    counts = read_json(ROOT / "validation/h200/causal-reuse-3/h200-ref-d96-2.json.gz")
    assert fitted_curves(counts, L2, heads=4) == {96: dict(H200.figures["memory.l2.causal_reuse_h4_d96"])}
    # one d = 96 head misses about half as often as d = 128's at the same live K/V (1 x the L2)
    one96, one128 = dict(H200.figures["memory.l2.causal_reuse_d96"]), dict(H200.figures["memory.l2.causal_reuse_d128"])
    assert one96[1000] < 0.55 * one128[1000]
    # four heads of 65536 at d = 96 read d = 96's four-head curve; a profile without it reads d =
    # 96's one-head share times the four-head over one-head ratio of d = 128 at the same live K/V
    w = Workload(n=65536, d=96, heads=4, causal=True, dtype="bf16")
    live = compare(w, H200, impl="sdpa-flash").tiled.traffic.params["causal_live_bytes"]
    x = np.asarray(float(live))
    l2 = l2_context(H200, "cold", "fa2")
    assert kv_miss_share(w) == pytest.approx(float(_curve_share(x, 96, l2.causal_several[4], l2.whole)), rel=0.02)
    drop = {f"memory.l2.causal_reuse_h{n}_d96" for n in (2, 4, 16)}
    without = dataclasses.replace(H200, figures={k: v for k, v in H200.figures.items() if k not in drop})
    l2w = l2_context(without, "cold", "fa2")
    expected = float(
        _curve_share(x, 96, l2w.causal, l2w.whole)
        * _curve_share(x, 96, l2w.causal_several[4], l2w.whole)
        / _curve_share(x, 96, {d: l2w.causal[d] for d in l2w.causal_several[4]}, l2w.whole)
    )
    kernel = next(k for k in compare(w, without, impl="sdpa-flash").tiled.traffic.kernels if k.name == "fa2_fwd")
    kv = 2 * w.n * w.d * w.heads * w.element_bytes
    requested = 2 * kernel.bytes(level="l2", direction="read", tensor="K")
    share = (2 * kernel.bytes(level="hbm", direction="read", tensor="K") - kv) / (requested - kv)
    assert share == pytest.approx(expected, rel=0.02)
    assert expected < float(_curve_share(x, 128, l2w.causal_several[4], l2w.whole))


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.sampled_from([32, 64, 80, 96, 128, 160, 192, 256]), min_size=1, max_size=4, unique=True),
    st.lists(st.integers(1, 1024), min_size=1, max_size=50),
)
def test_nearest_head_dim_is_the_nearest_in_the_logarithm(dims, ds):
    from memmodel.traffic.flash import _nearest_dim

    d = np.asarray(ds, dtype=np.float64)
    grid = np.asarray(sorted(dims), dtype=np.float64)
    # the lower one on a tie, as argmin takes the first
    expected = grid[np.argmin(np.abs(np.log(d[..., None] / grid)), axis=-1)]
    assert np.array_equal(_nearest_dim(d, dims), expected)


def test_cudnn_gqa_grids_read_their_own_curve():
    # the references (validation/cases/h200-cudnn-gqa-ref.txt and -ref-2.txt, five placements): 4 and 8
    # query heads per K/V head at d = 128 and 64, 2 and 4 at d = 256, binned by K/V live; the one-head
    # curve read the first set -27 % to +62 % (+167 % at d = 64)
    from memmodel.calibration.causal_reuse import FITS, merged

    fit = next(f for f in FITS["sdpa-cudnn"] if f.gqa)
    record = merged(read_json(ROOT / r) for r in fit.records())
    curves = fitted_curves(record, L2, "sdpa-cudnn", gqa=True)
    assert sorted(curves) == [64, 128, 256]
    for d, points in curves.items():
        assert dict(H200.figures[f"memory.l2.cudnn_causal_reuse_gqa_d{d}"]) == points
    shares = list(curves[128].values())  # from 0.32 to 2.1 x the L2 it rises a thousandfold
    assert shares[0] == 0.0003 and shares[-1] == 0.2727
    # 4 query heads on one K/V head of 65536 at d = 128: cuDNN keeps one K/V head live, 708 per
    # mille of the L2 (its K and V over the one-head share (s/2 + T_c)/(s + T_c)); the curve's own
    # point there, 0.29 %, where the one-head curve gives 0.37 %
    w = Workload(n=65536, d=128, heads=4, kv_heads=1, causal=True, dtype="bf16")
    live = compare(w, H200, impl="sdpa-cudnn").tiled.traffic.params["causal_live_bytes"] / L2 * 1000
    assert live == pytest.approx(708.0, abs=0.5)
    assert kv_miss_share(w, "sdpa-cudnn") == pytest.approx(0.0029, rel=0.01)
    # FlashAttention-2's GQA curves are not cuDNN's
    assert kv_miss_share(w, "sdpa-flash") != pytest.approx(kv_miss_share(w, "sdpa-cudnn"), rel=0.1)
