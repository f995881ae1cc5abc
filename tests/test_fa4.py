"""FlashAttention-4 (``--impl fa4``): what its SM100 code fixes (tiles, GQA packing, exp2
emulation, lazy rescale, its backward), its figures by the same-design rule, its refusal off
Blackwell; and the power-clock rule for sustained clocks of one architecture."""

from __future__ import annotations

import json
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memmodel import units
from memmodel.hardware import load_profile
from memmodel.implementations import (
    FA4_MAX_SPLITS,
    FA4_PROFILES,
    fa4_exp_emulated_share,
    fa4_num_splits,
    kernel_workload,
)
from memmodel.model import compare
from memmodel.options import options_for
from memmodel.timing import kernel_time
from memmodel.workload import Workload

from .conftest import REPO


def bf16(**kw):
    return Workload(dtype="bf16", **{"batch": 2, "heads": 16, "n": 4096, "d": 128, **kw})


@pytest.mark.parametrize(
    ("d", "causal", "rows", "cap", "want"),
    [
        (128, False, 4096, 10.0, 6 / 16 * 2 / 4),  # CTA pairs: freq 10, res 4, fragments 1-2 of 4 = 0.1875
        (128, True, 4096, 10.0, 4 / 16 * 2 / 4),  # causal: freq 16 (k = 12, 14, 28, 30) = 0.125
        (128, False, 256, 10.0, 4 / 16 * 2 / 4),  # one CTA, untuned: freq 16, from fragment 1
        (64, False, 4096, 10.0, 4 / 16 * 2 / 4),
        (256, False, 4096, 10.0, 6 / 16 * 3 / 4),  # freq 14, res 6 (k = 8, 10, 12, 22, 24, 26), from fragment 0
        (128, False, 4096, 10.3, 0.0),  # SM103: native exp2 only
    ],
)
def test_the_share_of_exponentials_emulated_follows_the_tuning_table(d, causal, rows, cap, want):
    assert fa4_exp_emulated_share(d, causal, rows, cap, False) == pytest.approx(want)


def test_gqa_packed_rows_past_d64_take_freq_10_where_untuned():
    # one CTA (256 rows), not causal, d = 128 packed: freq 10 -> 6 of 16 pairs, 2 of 4 fragments
    assert fa4_exp_emulated_share(128, False, 256, 10.0, True) == pytest.approx(0.1875)


def test_tiles_two_q_tiles_a_cta_one_where_the_rows_fit_one():
    b200 = load_profile("b200")
    assert options_for("fa4", bf16(), b200).block_q == 256  # q_stage 2 x 128
    assert options_for("fa4", bf16(n=128), b200).block_q == 128  # 128 packed rows: q_stage 1
    assert options_for("fa4", bf16(), b200).block_kv == 128
    assert options_for("fa4", bf16(), b200).ctas_per_sm == 1


def test_gqa_is_packed_at_every_length_but_not_causal():
    w = bf16(heads=32, kv_heads=8, n=1024)
    kw = kernel_workload(w, "fa4")
    assert (int(kw.heads), int(kw.n)) == (8, 4096)  # 4 query heads x 1024 rows per K/V head
    assert kernel_workload(w.with_(causal=True), "fa4") is not None
    assert int(kernel_workload(w.with_(causal=True), "fa4").n) == 1024
    assert int(kernel_workload(w, "fa3").n) == 1024  # FA3's packing in memmodel: decoding only


def test_no_k_v_split_when_decoding():
    c = compare(
        bf16(n=1, n_kv=65536, heads=32, kv_heads=8),
        load_profile("b200"),
        options_for("fa4", bf16(n=1, n_kv=65536, heads=32, kv_heads=8), load_profile("b200")),
    )
    assert [k.name for k in c.tiled.traffic.kernels] == ["fa2_fwd"]


@pytest.mark.parametrize(
    ("m_blocks", "kv_blocks", "want"),
    [
        (36, 486, 4),  # 148 // 36 = 4 (9 heads x 4 Q tiles of 256 rows over 62208 keys)
        (72, 486, 2),  # 148 // 72 = 2
        (144, 486, 1),  # 148 // 144 = 1: one wave already
        (1, 486, 128),  # at most 128
        (2, 20, 20),  # at most one a K/V block: 148 // 2 = 74 > 20
        (2, 4, 1),  # 4 K/V blocks or fewer: never split
        (300, 486, 1),  # more CTAs than SMs: 148 // 300 = 0, no split
    ],
)
def test_fa4_split_heuristic(m_blocks, kv_blocks, want):
    assert fa4_num_splits(m_blocks, 148, kv_blocks) == want


@given(st.integers(1, 2000), st.integers(1, 5000), st.integers(1, 200))
def test_fa4_splits_fill_at_most_one_wave(m_blocks, kv_blocks, sm_count):
    s = fa4_num_splits(m_blocks, sm_count, kv_blocks)
    assert 1 <= s <= min(FA4_MAX_SPLITS, max(kv_blocks, 1))
    if s > 1:  # a split grid never spills into a second wave
        assert m_blocks * s <= sm_count


def ardit(n=1024):
    # cudnn-frontend's auto_regressive_dit: one frame's queries over 62208 cached keys
    return Workload(dtype="bf16", batch=1, heads=9, n=n, n_kv=62208, d=128)


def test_splits_auto_runs_fa4s_own_heuristic_with_its_forward_kernel_and_a_combine():
    gb200 = load_profile("gb200")
    c = compare(ardit(), gb200, options_for("fa4", ardit(), gb200, splits="auto"))
    fwd, combine = c.tiled.traffic.kernels
    assert (fwd.name, combine.name) == ("fa2_fwd", "fa4_combine")
    assert c.tiled.traffic.params["splits"] == 4  # 9 heads x 4 Q tiles = 36 CTAs: 148 // 36
    assert int(fwd.ctas) == 9 * 4 * 4
    out = {t.tensor: t for t in fwd.transfers if t.level == "l2" and t.direction == "write"}
    assert "O" not in out  # O and the logsumexp go to fp32 partials
    assert int(out["O_partial"].bytes) == 9 * 4 * 1024 * 128 * 4  # B·H·splits·N·d·4 = 18,874,368
    assert int(out["lse_partial"].bytes) == 9 * 4 * 1024 * 4
    k = next(t for t in fwd.transfers if t.tensor == "K" and t.level == "l2")
    # no CTA pairs in a split forward: every CTA requests its K tiles whole, T_r·B·H·N_kv·d·e
    assert int(k.bytes) == 4 * 9 * 62208 * 128 * 2
    assert combine.figures_from == "sdpa-flash"  # FlashAttention-2's measured combine figures
    # the same products either way, the split only spreads them over the SMs
    plain = compare(ardit(), gb200, options_for("fa4", ardit(), gb200))
    assert [k.name for k in plain.tiled.traffic.kernels] == ["fa2_fwd"]
    assert int(plain.tiled.traffic.kernels[0].matmul_flops) == int(fwd.matmul_flops)
    assert c.tiled.timing.time_s < 0.5 * plain.tiled.timing.time_s  # 36 CTAs on 148 SMs, split 4 ways


def test_splits_auto_leaves_a_grid_that_fills_the_gpu_unsplit():
    gb200 = load_profile("gb200")
    c = compare(ardit(4096), gb200, options_for("fa4", ardit(4096), gb200, splits="auto"))
    assert [k.name for k in c.tiled.traffic.kernels] == ["fa2_fwd"]  # 144 CTAs: 148 // 144 = 1


def test_splits_flag_takes_auto_or_a_count(run):
    args = ["compare", "--gpu", "gb200", "--impl", "fa4", "--n", "1024", "--n-kv", "62208", "--d", "128"]
    args += ["--heads", "9", "--dtype", "bf16", "--format", "json"]

    def splits(*more):
        algorithms = json.loads(run(*args, *more).stdout)["algorithms"]
        return next(a for a in algorithms if a["name"] == "tiled")["params"]["splits"]

    assert splits("--splits", "auto") == 4
    assert splits("--splits", "2") == 2
    assert splits() == 1  # flash_attn_func's default: num_splits=1
    for bad in ("0", "-1", "many", "1.5"):
        r = run(*args, "--splits", bad)
        assert r.exit_code == 2 and "Traceback" not in r.stderr
        assert "neither a positive integer nor auto" in r.stderr


def test_forward_compute_is_the_busiest_pipe_with_lazy_rescale():
    b200 = load_profile("b200")
    w = bf16()
    opts = options_for("fa4", w, b200)
    c = compare(w, b200, opts)
    k = c.tiled.timing.kernels[0]
    t = k.terms
    assert "exp_fma" in t
    assert t["compute"] == pytest.approx(max(t["matmul"], t["exp"], t["softmax"] + t["exp_fma"]) + t.get("cta", 0.0))
    kernel = c.tiled.traffic.kernels[0]
    # the softmax term counts 3 FLOPs a score and the final divide, not the per-block rescale of O:
    # 2 x 16 x 4096 rows x 128 d x 32 visited blocks
    assert int(kernel.rescale_flops) == 2 * 16 * 4096 * 128 * 32
    no_rescale = kernel_time(kernel, b200, "bf16", "fa4", 128, exp_emulated=0.1875)
    fa3ish = kernel_time(kernel, b200, "bf16", "fa3", 128)
    assert no_rescale.terms["softmax"] < fa3ish.terms["softmax"]


def test_backward_kernels_and_tiles():
    b200 = load_profile("b200")
    w = bf16(heads=32, kv_heads=8)
    c = compare(w, b200, options_for("fa4", w, b200, backward=True))
    names = [k.name for k in c.tiled.traffic.kernels]
    assert names == ["fa2_fwd", "fa4_bwd_pre", "fa4_bwd", "fa4_bwd_dq", "fa4_bwd_dk", "fa4_bwd_dv"]
    assert c.tiled.traffic.facts.backward.block_q == 128
    assert c.tiled.traffic.facts.backward.block_kv == 128


def _transfer(c, kernel, tensor, rw="read"):
    (t,) = [
        t
        for t in c.tiled.traffic.transfers
        if t.kernel == kernel and t.tensor == tensor and t.direction == rw and t.level == "l2"
    ]
    return t


def test_cta_pairs_halve_the_forwards_k_v_requests_where_they_run():
    b200 = load_profile("b200")
    # 2 x 16 heads x 4096 rows, d 128, not causal: pairs run (4096 > 256 rows); B_r = 256 so
    # T_r = 16 and K's requests are T_r · B·H·N_kv·d·e / 2 = 16 · 2·16·4096·128·2 / 2 = 268,435,456 bytes
    w = bf16()
    c = compare(w, b200, options_for("fa4", w, b200))
    k = _transfer(c, "fa2_fwd", "K")
    assert k.bytes == 16 * 2 * 16 * 4096 * 128 * 2 // 2
    assert "CTA pairs" in k.formula
    # causal: no pairs (use_2cta_instrs asks for not causal), whole tiles requested
    wc = bf16(causal=True)
    kc = _transfer(compare(wc, b200, options_for("fa4", wc, b200)), "fa2_fwd", "K")
    assert "CTA pairs" not in kc.formula
    # 256 rows or fewer (one CTA's two Q tiles): no pairs
    ws = bf16(n=256, batch=64)
    ks = _transfer(compare(ws, b200, options_for("fa4", ws, b200)), "fa2_fwd", "K")
    assert "CTA pairs" not in ks.formula


def test_cta_pairs_halve_the_backwards_q_do_and_dq_traffic_from_d128():
    b200 = load_profile("b200")
    w = bf16()
    c = compare(w, b200, options_for("fa4", w, b200, backward=True))
    # T_c = 4096 / 128 = 32 blocks: Q requested T_c · B·H·N·d·e / 2 = 32 · 2·16·4096·128·2 / 2 bytes
    assert _transfer(c, "fa4_bwd", "Q").bytes == 32 * 2 * 16 * 4096 * 128 * 2 // 2
    assert _transfer(c, "fa4_bwd", "dO").bytes == 32 * 2 * 16 * 4096 * 128 * 2 // 2
    # the dQ accumulator's fp32 adds, halved; the row statistics loaded by both CTAs
    assert _transfer(c, "fa4_bwd", "dQacc").bytes == 32 * 2 * 16 * 4096 * 128 * 4 // 2
    assert _transfer(c, "fa4_bwd", "lse").bytes == 32 * 2 * 16 * 4096 * 4
    # d = 64: no pairs
    w64 = bf16(d=64)
    c64 = compare(w64, b200, options_for("fa4", w64, b200, backward=True))
    assert _transfer(c64, "fa4_bwd", "Q").bytes == 32 * 2 * 16 * 4096 * 64 * 2
    # FA3's backward on the H200 keeps every CTA's own loads
    h200 = load_profile("h200")
    c3 = compare(w, h200, options_for("fa3", w, h200, backward=True))
    assert "CTA pairs" not in _transfer(c3, "fa3_bwd", "Q").formula


def test_figures_by_the_same_design_rule():
    h200, b200, b300 = load_profile("h200"), load_profile("b200"), load_profile("b300")
    for p in (b200, b300):
        fa4 = p.implementation("fa4")
        assert fa4.efficiency == h200.implementation("fa3").efficiency
        assert fa4.backward_efficiency == h200.implementation("fa3").backward_efficiency
        assert fa4.sustained_share == h200.implementation("sdpa-cudnn").sustained_share  # 0.872
        note = p.provenance["implementations.fa4.efficiency"].note
        assert note.startswith("from h200, measured 2026-12-01, same-design rule: fa3's efficiency")
        assert "sdpa-cudnn's sustained_share" in p.provenance["implementations.fa4.sustained_share"].note
    assert not load_profile("rtx5090").implementation("fa4").efficiency  # compute capability 12.0


@pytest.mark.parametrize("gpu", ["h200", "h100-sxm", "rtx5090", "rtx-pro-6000", "a100", "mi300x"])
def test_fa4_off_blackwell_is_refused_in_one_line(run, gpu):
    r = run("compare", "--gpu", gpu, "--impl", "fa4", "--n", "4096", "--d", "128", "--dtype", "bf16")
    assert r.exit_code == 2
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "--impl fa4" in lines[0] and "b200" in lines[0]
    assert "Traceback" not in r.stderr


def test_fa4_refuses_head_dims_its_kernels_lack_and_dropout(run):
    r = run("compare", "--gpu", "b200", "--impl", "fa4", "--n", "4096", "--d", "192", "--dtype", "bf16")
    assert r.exit_code == 2 and "d=192" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = run(
        "compare", "--gpu", "b200", "--impl", "fa4", "--n", "4096", "--d", "128", "--dtype", "bf16", "--dropout", "0.1"
    )
    assert r.exit_code == 2 and "dropout" in r.stderr


def test_auto_never_picks_fa4():
    b200 = load_profile("b200")
    assert options_for("auto", bf16(), b200).implementation == "sdpa-cudnn"


def test_fa4_profiles_are_the_bundled_compute_capability_10_ones():
    from memmodel.hardware.load import bundled_dir

    names = sorted(f.stem for f in bundled_dir().glob("*.yaml"))
    found = tuple(n for n in names if str(load_profile(n).compute_capability or "").startswith("10."))
    assert found == FA4_PROFILES


def test_sweep_takes_fa4_on_its_impl_axis(run):
    r = run(
        "sweep",
        "--gpu",
        "b200",
        "--impl",
        "fa4,sdpa-cudnn",
        "--n",
        "1024,4096",
        "--d",
        "128",
        "--dtype",
        "bf16",
        "--format",
        "csv",
    )
    assert r.exit_code == 0, r.stderr
    assert ",fa4," in r.stdout and ",sdpa-cudnn," in r.stdout


def test_published_fa4_points_are_scored():
    sys.path.insert(0, str(REPO / "benchmarks"))
    import published_checks as pc

    scored = pc.score(pc.load_checks(), gpu="b200", impl="fa4")
    assert len(scored) == 2 and all(s.not_modelled is None and s.predicted_time_s for s in scored)


# ---------------------------------------------------------------------------------------
# the power-clock rule


def test_power_parses():
    assert units.parse("700 W", "power") == 700.0
    assert units.parse("1.2 kW", "power") == 1200.0
    with pytest.raises(units.UnitError):
        units.parse("700 MHz", "power")


def test_power_clock_rule_on_hopper_siblings():
    # cuDNN: 0.872 x 1980 MHz = 1726.6 MHz at 700 W / 132 SMs on the H200
    base = 0.872 * 1980e6
    # H100 PCIe: 350 W / 114 SMs -> x ((350/114) / (700/132))^(1/3) = x 0.8335 -> 1439 MHz of 1755 MHz
    pcie = min(1755e6, base * ((350 / 114) / (700 / 132)) ** (1 / 3)) / 1755e6
    assert load_profile("h100-pcie").implementation("sdpa-cudnn").sustained_share == pytest.approx(pcie, abs=1e-4)
    assert pcie == pytest.approx(0.8199, abs=1e-4)
    # H100 NVL: 400 W / 132 SMs at 1980 MHz -> x (400/700)^(1/3) = x 0.8298 -> 0.7236
    assert load_profile("h100-nvl").implementation("sdpa-cudnn").sustained_share == pytest.approx(0.7236, abs=1e-4)
    # H100 SXM: the H200's power per SM and boost clock: unchanged
    assert load_profile("h100-sxm").implementation("sdpa-cudnn").sustained_share == 0.872
    note = load_profile("h100-pcie").provenance["implementations.sdpa-cudnn.sustained_share"].note
    assert note.startswith("power-clock rule: h200's measured share 0.872")
    # another architecture: carried as it is
    assert load_profile("b200").implementation("sdpa-cudnn").sustained_share == 0.872


def test_power_clock_is_capped_at_the_boost_clock(tmp_path):
    from memmodel.hardware.load import load_file

    text = (REPO / "memmodel/hardware/profiles/h100-pcie.yaml").read_text()
    text = text.replace("value: 350 W", "value: 2000 W")
    f = tmp_path / "hot.yaml"
    f.write_text(text)
    p = load_file(f)
    assert p.implementation("sdpa-cudnn").sustained_share == 1.0
    assert "capped at the boost clock" in p.provenance["implementations.sdpa-cudnn.sustained_share"].note


def test_sustained_clocks_slow_compute_bound_times_by_the_rule():
    w = Workload(n=8192, d=128, batch=8, heads=16, dtype="bf16")
    p = load_profile("h100-nvl")
    boost = compare(w, p, options_for("sdpa-cudnn", w, p, clocks="boost")).tiled.timing.time_s
    slow = compare(w, p, options_for("sdpa-cudnn", w, p, clocks="sustained")).tiled.timing.time_s
    assert slow > boost * 1.3  # 1 / 0.7236 on the forward's compute
    assert json.dumps({"t": slow})


def test_a_grid_fa4_would_split_says_so_and_a_split_one_names_its_stand_in_combine(run):
    args = ["compare", "--gpu", "gb200", "--impl", "fa4", "--n", "1024", "--n-kv", "62208", "--d", "128"]
    args += ["--heads", "9", "--dtype", "bf16"]
    plain = run(*args)
    assert plain.exit_code == 0
    assert "num_splits=0" in plain.stderr and "up to 4 ways: --splits auto" in plain.stderr
    split = run(*args, "--splits", "auto")
    assert "num_splits=0" not in split.stderr
    assert "timed at FlashAttention-2's measured combine figures" in split.stderr
    # a grid that fills the GPU: nothing to say
    full = run(
        "compare", "--gpu", "gb200", "--impl", "fa4", "--n", "8192", "--d", "128", "--heads", "32", "--dtype", "bf16"
    )
    assert full.exit_code == 0
    assert "num_splits" not in full.stderr and "split forward" not in full.stderr
