"""``--impl ck``: AMD's CK/aiter FMHA as its kernels are built (tiles per head dim, dtype and
architecture, waves, grid, GQA, the backward's kernels), what ``--impl auto`` picks on an AMD
GPU, and the stand-in rule its time rests on (no efficiency was measured)."""

from __future__ import annotations

import json

import pytest

from memmodel import Workload, compare, load_profile
from memmodel.backward import backward_tile_rule
from memmodel.implementations import ROCM_DEFAULT_NOTE, default_for, occupancy, smem_reads, tiles, unsupported
from memmodel.options import options_for

from .conftest import REPO


@pytest.fixture(scope="module")
def amd():
    return load_profile("mi300x"), load_profile("mi355x")


def test_forward_tiles_are_aiters_assembly_kernels_where_they_run_else_ck_tiles(amd):
    mi300x, mi355x = amd
    # aiter hsa/gfx942/fmha_v3_fwd/fmha_fwd.csv: bf16 hd128 ts_qo 256, ts_kv 32; gfx950: 256 × 64
    assert tiles("ck", 128, False, profile=mi300x, dtype="bf16") == (256, 32)
    assert tiles("ck", 128, True, profile=mi355x, dtype="bf16") == (256, 64)
    # fp8 in, bf16 out: 256 × 64 (gfx942), 256 × 128 (gfx950), and d = 256 on gfx950 only
    assert tiles("ck", 128, False, profile=mi300x, dtype="fp8") == (256, 64)
    assert tiles("ck", 128, False, profile=mi355x, dtype="fp8") == (256, 128)
    assert tiles("ck", 256, False, profile=mi355x, dtype="fp8") == (256, 64)
    # no assembly kernel: fp16, other head dims, dropout -> CK tile's bm0 × bn0
    assert tiles("ck", 128, False, profile=mi300x, dtype="fp16") == (128, 128)
    assert tiles("ck", 64, False, profile=mi300x, dtype="bf16") == (128, 64)
    assert tiles("ck", 80, False, profile=mi300x, dtype="bf16") == (128, 128)  # runs at d = 128, CK tile's
    assert tiles("ck", 256, False, profile=mi300x, dtype="fp8") == (128, 128)
    assert tiles("ck", 128, False, dropout=0.1, profile=mi300x, dtype="bf16") == (128, 128)
    assert tiles("ck", 128, False, dtype="bf16") == (128, 128)  # no profile: no architecture, CK tile


def test_waves_and_occupancy_follow_the_kernels(amd):
    mi300x, _ = amd
    # 512 threads = 8 waves of 64 for the 256-row assembly tiles, each reading the K/V tile from LDS
    assert smem_reads("ck", 256, 128, profile=mi300x) == 8
    assert smem_reads("ck", 128, 128, profile=mi300x) == 4  # CK tile: F_rm = 4
    assert smem_reads("ck", 128, 32, profile=mi300x) == 2
    assert occupancy("ck", 128, 256) == 1 and occupancy("ck", 128, 128) is None


def test_grid_is_batch_by_query_heads_by_q_blocks_and_products_run_at_the_gemm_rate(amd):
    mi300x, _ = amd
    w = Workload(batch=4, heads=32, kv_heads=8, n=8192, d=128, dtype="bf16")
    opts = options_for("ck", w, mi300x)
    assert (opts.block_q, opts.block_kv, opts.ctas_per_sm) == (256, 32, 1)
    c = compare(w, mi300x, opts)
    fwd = c.tiled.traffic.kernels[0]
    # GQA: one workgroup per query head (s_gqa = 32 / 8 in the kernel's arguments): 8192 / 256 × 32 × 4
    assert fwd.ctas == 32 * 32 * 4 == 4096
    assert fwd.concurrent_ctas == 304  # one a CU
    terms = c.tiled.timing.kernels[0].terms
    # 4·B·H·N²·d = 4 × 4 × 32 × 8192² × 128 = 4.398e12 FLOP at the published 708 TFLOP/s BF16 GEMM rate,
    # × the wave tail 14 / (4096 / 304) = 1.0390625: 6.2119 ms × 1.0390625 = 6.4546 ms
    assert terms["matmul"] == pytest.approx(4 * 4 * 32 * 8192**2 * 128 / 708e12 * 14 / (4096 / 304))


def test_backward_runs_aiters_kernels_under_their_names_with_their_tiles(amd):
    mi300x, mi355x = amd
    # hsa/<arch>/fmha_v3_bwd/fmha_bwd_dqdkdv.csv: ts_qo × ts
    assert backward_tile_rule("ck", 128, profile=mi300x) == (16, 192)
    assert backward_tile_rule("ck", 128, profile=mi355x) == (16, 256)
    assert backward_tile_rule("ck", 64, profile=mi300x) == (32, 192)
    assert backward_tile_rule("ck", 192, profile=mi300x) == (16, 64)
    # CK tile's backward where no assembly kernel runs: d = 256, dropout
    assert backward_tile_rule("ck", 256, profile=mi300x) == (16, 64)
    assert backward_tile_rule("ck", 128, dropout=0.1, profile=mi300x) == (16, 128)
    w = Workload(batch=4, heads=32, kv_heads=8, n=4096, d=128, dtype="bf16")
    c = compare(w, mi300x, options_for("ck", w, mi300x, backward=True))
    names = [k.name for k in c.tiled.traffic.kernels]
    # torch::zeros of the fp32 dQ accumulator (mha_bwd.cu: workspace_alloc(..., zero_init=true)), odo,
    # dqdkdv (dQ in fp32 atomics), the dQ conversion; GQA: at::sum_out of dK, dV over the group
    assert names == [
        "fa2_fwd",
        "ck_bwd_dq_zero",
        "ck_bwd_odo",
        "ck_bwd_dqdkdv",
        "ck_bwd_dq_convert",
        "dk_group_sum",
        "dv_group_sum",
    ]
    zero = c.tiled.traffic.kernels[1]
    # B·H·N·d·4 = 4 × 32 × 4096 × 128 × 4 = 268,435,456 bytes zeroed, unpadded (the a32 layout)
    assert zero.bytes(level="hbm", direction="write") == 268_435_456 and zero.bytes(direction="read") == 0
    assert not any(t.tensor == "dQacc" for t in c.tiled.traffic.kernels[2].transfers)  # not in odo
    main = next(k for k in c.tiled.traffic.kernels if k.name == "ck_bwd_dqdkdv")
    assert main.ctas == 22 * 32 * 4  # ⌈4096 / 192⌉ = 22 K/V blocks × 32 query heads × batch 4


def test_backward_keeps_fa2s_measured_backward_to_forward_ratio(amd):
    """The design-ratio rule: ck's forward runs at the GEMM rate (no figure), its backward at the
    share of its forward that FlashAttention-2's backward keeps on the measured H200."""
    mi300x, mi355x = amd
    h200 = load_profile("h200").implementation("sdpa-flash")
    fwd, bwd = dict(h200.efficiency), dict(h200.backward_efficiency)
    for p in (mi300x, mi355x):
        ck = p.implementation("ck")
        assert ck.efficiency == ()  # the forward keeps the GEMM rate
        # h200's sdpa-flash at d = 128: 0.806 / 1.066 = 0.7561
        assert dict(ck.backward_efficiency)[128] == pytest.approx(bwd[128] / fwd[128], rel=1e-3)
        assert dict(ck.backward_efficiency)[128] == pytest.approx(0.7561, abs=1e-3)
        assert p.kind_of("implementations.ck.backward_efficiency") == "derived"
        assert "design-ratio rule" in p.provenance["implementations.ck.backward_efficiency"].note
    assert load_profile("h200").implementation("ck").backward_efficiency == ()  # NVIDIA: none
    w = Workload(batch=4, heads=32, kv_heads=8, n=4096, d=128, dtype="bf16")
    c = compare(w, mi300x, options_for("ck", w, mi300x, backward=True))
    main = c.tiled.timing.kernels[3]
    assert c.tiled.traffic.kernels[3].name == "ck_bwd_dqdkdv"
    flops = c.tiled.traffic.kernels[3].matmul_flops
    assert flops == 2_834_678_415_360  # its five products, 10.3125 × B·H·N²·d = 10.3125 × 4·32·4096²·128
    # at the published 708 TFLOP/s BF16 GEMM rate × 0.7561: 2.8347e12 / 535.3e12 = 5.295 ms (× the wave tail: 2816 CTAs
    # on 304 slots, 10 waves for 9.26, × 10 / 9.263 = 1.0795)
    assert main.terms["matmul"] == pytest.approx(flops / (708e12 * 0.7561) * 10 / (2816 / 304), rel=1e-3)
    assert main.terms["matmul"] == pytest.approx(5.716e-3, rel=1e-3)  # 5.295 ms × 1.0795


def test_auto_picks_ck_on_amd_gpus_and_says_pytorchs_default_is_aotriton(amd):
    mi300x, mi355x = amd
    w = Workload(batch=1, heads=16, n=4096, d=128, dtype="bf16")
    for p in (mi300x, mi355x):
        impl, why = default_for(w, p)
        assert impl == "ck" and why == ROCM_DEFAULT_NOTE and "AOTriton" in why
    assert default_for(w, load_profile("h200"))[0] == "sdpa-cudnn"  # NVIDIA unchanged
    assert unsupported("ck", w, load_profile("h200")) == "ck runs on AMD Instinct GPUs only"
    assert unsupported("ck", w.with_(dtype="fp32"), mi300x) == "ck runs fp16, bf16, fp8 (got fp32)"
    # fp32: no CK kernel, and NVIDIA's backends are not built for CDNA: the paper's algorithm, whose
    # blocks fit the 64 KiB of LDS (the memory-efficient kernel's 64 x 128 fp32 tiles at d 128 need 160 KiB)
    impl, why = default_for(w.with_(dtype="fp32"), mi300x)
    assert impl == "paper" and why.startswith("ck runs fp16, bf16, fp8 (got fp32); PyTorch's ROCm kernels")
    c = compare(w.with_(dtype="fp32"), mi300x)
    assert c.tiled.traffic.hbm_bytes > 0


def test_caveat_names_the_stand_in_rule(amd):
    from memmodel.timing import caveats

    mi300x, _ = amd
    (line,) = [c for c in caveats(mi300x, "ck", "bf16", 128) if "efficiency" in c]
    assert "stand-in rule" in line and "compute.bf16, published" in line
    # the backward's share by the design-ratio rule, named with its figure at d = 128
    assert "design-ratio rule" in line and "0.76 at d = 128" in line


def test_cli_compare_with_ck(run):
    r = run(
        "compare",
        "--gpu",
        "mi300x",
        "--impl",
        "ck",
        "--n",
        "8192",
        "--d",
        "128",
        "--batch",
        "4",
        "--heads",
        "32",
        "--kv-heads",
        "8",
        "--dtype",
        "bf16",
        "--format",
        "json",
    )
    assert r.exit_code == 0, r.stderr
    tiled = next(a for a in json.loads(r.stdout)["algorithms"] if a["name"] == "tiled")
    assert tiled["params"]["block_q"] == 256 and tiled["params"]["block_kv"] == 32
    r = run("compare", "--gpu", "mi300x", "--n", "4096", "--d", "128", "--dtype", "bf16")
    assert r.exit_code == 0 and "--impl auto: PyTorch on ROCm" in r.stderr


def test_cli_refuses_ck_with_the_fa1_variant_in_one_line(run):
    r = run("compare", "--gpu", "mi300x", "--impl", "ck", "--tiled", "fa1", "--n", "4096", "--d", "128")
    assert r.exit_code == 2
    assert r.stderr.strip().count("\n") == 0 and "--tiled fa2" in r.stderr


def test_causal_forward_pairs_a_heads_first_and_last_q_blocks(amd):
    from memmodel.implementations import pairs_causal_kv_blocks, pairs_causal_q_blocks
    from memmodel.timing import cta_tail_factor, paired_lengths

    mi300x, _ = amd
    # aiter's get_grid_dim: tg_div = 2 under a mask, for the assembly kernels' 256-row tiles only
    assert pairs_causal_q_blocks("ck", 256) and not pairs_causal_q_blocks("ck", 128)
    assert not pairs_causal_q_blocks("sdpa-flash", 256)
    # a square grid: Q block i sees 8(i + 1) blocks of 32 keys; i with 15 − i: 8 × 17 = 136 each
    lengths = paired_lengths(4096, 4096, 256, 32, 1)
    assert lengths.tolist() == [136.0] * 8
    # odd T_r = 5 (1280 keys): 0+4, 1+3, and 2 alone: 8 + 40, 16 + 32, 24
    assert paired_lengths(1280, 1280, 256, 32, 1).tolist() == [48.0, 48.0, 24.0]
    # batch 1 × 32 heads × 4096 on 304 CUs: 256 equal paired jobs in one wave, the makespan one
    # job over the balanced time: 136 / (256 × 136 / 304) = 304 / 256 = 1.1875
    w = Workload(batch=1, heads=32, kv_heads=8, n=4096, d=128, dtype="bf16", causal=True)
    assert cta_tail_factor(w, 256, 32, 304, 1, paired=True) == pytest.approx(304 / 256)
    # unpaired, the 512 CTAs' last ones are the longest: (34816 − 128)/304 − 68/2 + 128 = 208.1
    # over 34816/304 = 114.5: 1.817
    assert cta_tail_factor(w, 256, 32, 304, 1) == pytest.approx(((34816 - 128) / 304 - 34 + 128) / (34816 / 304))
    # the backward's dqdkdv pairs K/V blocks under a causal mask where the assembly kernels run
    assert pairs_causal_kv_blocks("ck", 128, "cdna3") and not pairs_causal_kv_blocks("ck", 128, "cdna3", 0.1)
    assert not pairs_causal_kv_blocks("ck", 256, "cdna3") and not pairs_causal_kv_blocks("fa3", 128, "cdna3")


def test_paired_causal_forward_time_follows_the_paired_tail(amd):
    mi300x, _ = amd
    causal = Workload(batch=1, heads=32, kv_heads=8, n=4096, d=128, dtype="bf16", causal=True)
    full = Workload(batch=1, heads=32, kv_heads=8, n=4096, d=128, dtype="bf16")
    t_causal = compare(causal, mi300x, options_for("ck", causal, mi300x)).tiled.timing.kernels[0].time_s
    t_full = compare(full, mi300x, options_for("ck", full, mi300x)).tiled.timing.kernels[0].time_s
    # no mask: 512 CTAs on 304 CUs, two waves (tail 2 × 304 / 512 = 1.1875) of 128 blocks each;
    # causal: 256 jobs of 136 blocks in one wave (1.1875 too); so the times go as the visited
    # blocks a head, Σ_{i<16} 8(i + 1) = 1088 against 16 × 128 = 2048 (= 34816 / 65536)
    assert float(t_causal) / float(t_full) == pytest.approx(34816 / 65536, rel=0.02)


def test_ring_steps_start_their_exchange_on_the_paired_grid(amd):
    from memmodel.timing import idle_share

    # 256 paired jobs in one wave of 304 CUs: 48 CUs are idle from the start; with masking the
    # share is 1 / the tail factor, 256 / 304 paired (1 / 1.1875), 114.5 / 208.1 unpaired
    w = Workload(batch=1, heads=32, kv_heads=8, n=4096, d=128, dtype="bf16", causal=True)
    assert idle_share(w, 256, 32, 304, 1, None, 8, paired=True) == pytest.approx(256 / 304)
    assert idle_share(w, 256, 32, 304, 1, None, 8) == pytest.approx((34816 / 304) / ((34816 - 128) / 304 - 34 + 128))


def test_a_sweep_pairs_each_head_dim_as_its_own_compare_does(amd):
    from memmodel.sweep import Grid, evaluate

    # d = 64 runs CK tile (128-row tiles, no pairing), d = 128 the assembly kernels (paired), d = 256
    # CK tile's forward and, past 192, CK tile's backward: one grid must time each as compare does
    g = Grid(n=(4096,), d=(64, 128, 256), heads=(32,), kv_heads=(8,), dtypes=("bf16",), gpus=("mi300x",),
             impls=("ck",), causal=(True,), backward=(True,))  # fmt: skip
    rows = [r for r in evaluate(g).rows() if r["algorithm"] == "tiled"]
    assert [r["d"] for r in rows] == [64, 128, 256]
    mi300x, _ = amd
    for r in rows:
        w = Workload(batch=1, heads=32, kv_heads=8, n=4096, d=r["d"], dtype="bf16", causal=True)
        c = compare(w, mi300x, options_for("ck", w, mi300x, backward=True))
        assert r["predicted_time_s"] == pytest.approx(float(c.tiled.timing.time_s), rel=1e-9), r["d"]


def test_the_paired_grid_is_not_flagged_for_an_estimated_causal_tail(amd):
    mi300x, _ = amd
    # 32 heads × 16 Q blocks = 512 CTAs on 304 slots: a FlashAttention-2 grid's tail is estimated and
    # says so; aiter's pairs are 256 equal jobs, whose tail is exact. CK tile (d = 64) is not paired.
    paired = Workload(batch=1, heads=32, kv_heads=8, n=4096, d=128, dtype="bf16", causal=True)
    tile = Workload(batch=2, heads=32, kv_heads=8, n=4096, d=64, dtype="bf16", causal=True)
    said = " ".join(compare(paired, mi300x, options_for("ck", paired, mi300x)).caveats)
    assert "fill 2 to 4 waves" not in said
    said = " ".join(compare(tile, mi300x, options_for("ck", tile, mi300x)).caveats)
    assert "fill 2 to 4 waves" in said


def test_light_load_clock_rule_pins_the_power_clock_law():
    from types import SimpleNamespace

    from memmodel.timing import light_load_boost

    mi300x = load_profile("mi300x")
    # AMD's MAF: bf16 at 1207 MHz under a GEMM that fills the 304 CUs, peak 2100 MHz
    assert mi300x.clock_under_load_hz["bf16"] == pytest.approx(1207e6)
    # 128 of 304 CUs busy: (304 / 128) ** (1/3) = 1.3338
    assert light_load_boost(SimpleNamespace(ctas=128), mi300x, "bf16") == pytest.approx((304 / 128) ** (1 / 3))
    # 10 CTAs: (30.4) ** (1/3) = 3.12, capped at the peak: 2100 / 1207 = 1.7398
    assert light_load_boost(SimpleNamespace(ctas=10), mi300x, "bf16") == pytest.approx(2100 / 1207)
    assert light_load_boost(SimpleNamespace(ctas=304), mi300x, "bf16") is None  # the grid fills the GPU
    assert light_load_boost(SimpleNamespace(ctas=128), mi300x, "fp32") is None  # no loaded clock for fp32
    assert light_load_boost(SimpleNamespace(ctas=128), load_profile("h200"), "bf16") is None  # no such figure


def test_a_grid_of_fewer_ctas_than_cus_computes_faster_by_the_rule(amd):
    import dataclasses

    mi300x, _ = amd
    w = Workload(n=1024, d=128, batch=1, heads=32, kv_heads=8, dtype="bf16")
    plain = dataclasses.replace(mi300x, clock_under_load_hz={})
    fast = compare(w, mi300x, options_for("ck", w, mi300x)).tiled.timing.kernels[0]
    slow = compare(w, plain, options_for("ck", w, plain)).tiled.timing.kernels[0]
    # aiter's 256-row tiles: 4 × 32 = 128 workgroups on 304 CUs; the products' time / 1.3338
    assert slow.terms["matmul"] / fast.terms["matmul"] == pytest.approx((304 / 128) ** (1 / 3))
    big = Workload(n=8192, d=128, batch=4, heads=32, kv_heads=8, dtype="bf16")
    a = compare(big, mi300x, options_for("ck", big, mi300x)).tiled.timing.time_s
    b = compare(big, plain, options_for("ck", big, plain)).tiled.timing.time_s
    assert a == pytest.approx(b)  # 1024 workgroups: the GPU is full, nothing changes


def test_a_loaded_clock_above_the_peak_or_without_it_is_refused(tmp_path):
    from memmodel.errors import MemmodelError

    src = (REPO / "memmodel" / "hardware" / "profiles" / "mi300x.yaml").read_text(encoding="utf-8")
    bad = tmp_path / "fast.yaml"
    bad.write_text(src.replace("bf16: {value: 1207 MHz", "bf16: {value: 2500 MHz"), encoding="utf-8")
    with pytest.raises(MemmodelError, match=r"clock_under_load\.bf16: 2500 MHz is above the peak clock \(2100 MHz\)"):
        load_profile(str(bad))
    lines = [ln for ln in src.splitlines() if not ln.startswith("clock: ")]
    none = tmp_path / "noclock.yaml"
    none.write_text("\n".join(lines), encoding="utf-8")
    with pytest.raises(MemmodelError, match=r"clock_under_load\.fp16: needs clock"):
        load_profile(str(none))
