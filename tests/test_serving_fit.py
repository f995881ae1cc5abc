"""The serving kernels' own figures (``memmodel.calibration.serving``): fitted to the committed
probe, written into the bundled profile, and the two figures they added to the time model."""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path

import pytest

from memmodel import Workload, compare, load_profile
from memmodel.calibration import serving
from memmodel.errors import WorkloadError
from memmodel.traffic import paged

ROOT = Path(__file__).resolve().parent.parent
H200 = load_profile("h200")


def probe_lines():
    with gzip.open(ROOT / serving.RECORD, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def test_rows_match_each_probe_kernel_to_the_model_kernel_it_is():
    rows = serving.rows(probe_lines())
    by_kernel = {}
    for r in rows:
        by_kernel[r.kernel] = by_kernel.get(r.kernel, 0) + 1
    # 24 CUDA-core decodes (2 models x 4 shapes x 3 page sizes); a merge after the 18 that split
    # (batch 96 does not) and after the 2 tensor-core decodes: 20; 6 sm90 prefills (auto and fa3 backends); 3 fa2 prefills and
    # the 2 tensor-core decodes; 8 MLA decodes (auto and fa3); 4 fp8 prefills (auto and fa3)
    assert by_kernel == {
        "flashinfer_decode": 24,
        "flashinfer_merge": 20,
        "flashinfer_prefill_sm90": 6,
        "flashinfer_prefill": 5,
        "flashinfer_mla": 8,
        "fa2_fwd": 4,
    }
    assert all(r.measured_s > 0 for r in rows)


def test_the_bundled_profile_holds_what_the_fit_gives():
    fitted, predicted = serving.fit(probe_lines(), H200)
    fi = H200.implementation("flashinfer")
    assert fi.hbm_share == fitted["hbm_share"]
    assert fi.split_efficiency == ((1, fitted["split_efficiency"]),)
    assert fi.combine_time_s[0] == pytest.approx(fitted["combine_time"])
    assert H200.implementation("fa3").fp8_share == ((1, fitted["fp8_share"]),)  # one figure, every head dim
    # the sm90 prefill is FA3's curve times one factor
    fa3 = H200.implementation("fa3").efficiency
    assert [d for d, _ in fi.efficiency] == [d for d, _ in fa3]
    assert [v for _, v in fi.efficiency] == pytest.approx([v * fitted["sm90_factor"] for _, v in fa3], rel=1e-3)
    # a fit to its own reference shapes: every kernel within 16 % of its measured time
    worst = max(abs(p / r.measured_s - 1) for r, p in predicted)
    assert worst < 0.16


def test_the_fit_does_not_depend_on_what_the_profile_held():
    """Started from the profile with the figures changed, the fit gives the same figures."""
    lines = probe_lines()
    first, _ = serving.fit(lines, H200)
    changed = H200.with_implementation_figures("flashinfer", hbm_share=0.3, split_efficiency=((1, 0.9),))
    again, _ = serving.fit(lines, changed)
    assert again == first


def test_hbm_share_divides_the_hbm_term():
    w = Workload(batch=16, heads=16, kv_heads=16, n=1, n_kv=16384, d=64, dtype="bf16", page_size=16)

    def hbm(profile):
        t = compare(w, profile, impl="flashinfer").tiled.timing
        return next(k for k in t.kernels if k.name == "flashinfer_decode").terms["hbm"]

    full = hbm(H200.with_implementation_figures("flashinfer", hbm_share=1.0))
    half = hbm(H200.with_implementation_figures("flashinfer", hbm_share=0.5))
    assert half == pytest.approx(2 * full)
    # 2 x B·H_kv·N_kv·d·2 bytes = 2·16·16·16384·64·2 = 1.07 GB of K/V at the profile's rate
    assert full == pytest.approx(2 * 16 * 16 * 16384 * 64 * 2 / H200.hbm.bandwidth_bytes_per_s, rel=0.02)


def test_fp8_share_slows_only_the_fp8_forward():
    fp8 = Workload(batch=1, heads=32, kv_heads=8, n=8192, d=128, dtype="fp8")
    bf16 = Workload(batch=1, heads=32, kv_heads=8, n=8192, d=128, dtype="bf16")

    def compute(w, share):
        p = H200.with_implementation_figures("fa3", fp8_share=share)
        return compare(w, p, impl="fa3").tiled.timing.kernels[0].terms["matmul"]

    assert compute(fp8, 0.5) == pytest.approx(2 * compute(fp8, 1.0))
    assert compute(bf16, 0.5) == compute(bf16, 1.0)


def flex_lines():
    with gzip.open(ROOT / serving.FLEX_RECORD, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def flex_paged():
    with gzip.open(ROOT / serving.FLEX_PAGED_RECORD, "rt") as f:
        return json.load(f)


def flex_many():
    with gzip.open(ROOT / serving.FLEX_OCCUPANCY_RECORD, "rt") as f:
        return json.load(f)


def test_the_bundled_profile_holds_flexs_decode_figures_as_fitted():
    fitted, predicted = serving.fit_flex(flex_lines(), H200, flex_paged(), flex_many())
    flex = H200.implementation("flex")
    assert [b for b, _ in flex.block_step_time_s] == [16, 64]
    assert [t for _, t in flex.block_step_time_s] == pytest.approx([fitted["step_16"], fitted["step_64"]])
    assert flex.mask_key_time_s == pytest.approx(fitted["mask_key_time"])
    assert [r for _, r in flex.cta_bandwidth_bytes_per_s] == pytest.approx([fitted["step_bandwidth"]])
    assert flex.co_resident_cost == pytest.approx(fitted["co_resident"])
    assert flex.contiguous_step_share == pytest.approx(fitted["contiguous_share"])
    # 7 batches + 4 key counts without a mask; the paged probe's 24 (the contiguous BlockMask rows are not
    # rows); the occupancy probe's 11 paged decodes of a group of 4 (6 at pages of 64, 3 of 16, 2 at d 64)
    # and its 10 contiguous ones (6 at d 128, 4 at d 64)
    assert len(predicted) == 11 + 24 + 11 + 10
    many = sorted(abs(p / r.measured_s - 1) for r, p in predicted if r.choice == "paged-many")
    assert len(many) == 11 and many[5] < 0.1 and many[-1] < 0.2
    # without a mask: the walk bounds short decodes, the steps (at the contiguous share) long ones
    contiguous = sorted(abs(p / r.measured_s - 1) for r, p in predicted if r.choice == "no-mask")
    assert len(contiguous) == 21 and contiguous[10] < 0.06 and contiguous[-1] < 0.15
    paged = [(r, p) for r, p in predicted if r.choice == "paged"]
    # one step time for pages of 16, one for 64 and 128, and the step's loads at one CTA's rate
    # (d 128's twice d 64's; the kernel alone: batch 1's short kernels miss most, the model up to 29 % long)
    errors = sorted(abs(p / r.measured_s - 1) for r, p in paged)
    assert len(errors) == 24
    assert errors[12] < 0.07 and errors[-1] < 0.3


def test_flexs_default_mask_costs_each_wave_its_keys():
    w = Workload(n=1, n_kv=8192, batch=8, heads=32, kv_heads=8, d=128, dtype="bf16")
    p = H200.with_implementation_figures(
        "flex",
        block_step_time_s=((16, 1.5e-6), (64, 3e-6)),
        mask_key_time_s=20e-9,
        cta_bandwidth_bytes_per_s=(),
        co_resident_cost=None,
        contiguous_step_share=None,
    )
    t = next(k for k in compare(w, p, impl="flex").tiled.timing.kernels if k.name == "flex_decode")
    # 8 x 8 K/V heads x SPLIT_KV 4 (132 // 64 x 2) = 256 CTAs, one wave of 528 (4 an SM at d 128
    # contiguous): 8192 keys x 20 ns
    assert t.terms["mask"] == pytest.approx(8192 * 20e-9)
    # contiguous: each split covers 8192 / 4 = 2048 keys, 32 steps of 64 at 3 us
    assert t.terms["latency"] == pytest.approx(32 * 3e-6)
    # the mask's walk and the steps run side by side: the longer bounds the kernel (163.84 us > 96 us)
    assert t.time_s == pytest.approx(8192 * 20e-9 + t.terms.get("launch", 0.0), rel=1e-9)
    paged = compare(w.with_(page_size=16), p, impl="flex").tiled.timing
    k16 = next(k for k in paged.kernels if k.name == "flex_decode")
    assert "mask" not in k16.terms  # a paged cache comes with its block mask
    # paged: K is the pool, 2 x 8 x 8192 keys; TILE_KV 32768 covers a request's 8192 in one
    # split (the other three exit): 8192 / 16 = 512 steps of 16 at 1.5 us
    assert k16.terms["latency"] == pytest.approx(512 * 1.5e-6)


def test_flexs_steps_pay_their_loads_at_one_ctas_rate():
    w = Workload(n=1, n_kv=8192, batch=8, heads=32, kv_heads=8, d=128, dtype="bf16", page_size=64)
    p = H200.with_implementation_figures(
        "flex", block_step_time_s=((16, 1.5e-6), (64, 3e-6)), cta_bandwidth_bytes_per_s=((1, 32e9),)
    )

    def latency(work):
        timing = compare(work, p, impl="flex").tiled.timing
        return next(k for k in timing.kernels if k.name == "flex_decode").terms["latency"]

    # the default pool, twice the batch's 8 x 128 pages: K holds 2048 x 64 keys, SPLIT_KV 4
    # (132 // 64 x 2), TILE_KV 32768 covers a request's 8192 keys in one split: 8192 / 64 = 128
    # steps; a step loads 64 rows of K and of V, 256 bytes each at d 128: 32,768 bytes at 32 GB/s
    # = 1.024 us beside the block's 3 us
    assert latency(w) == pytest.approx(128 * (3e-6 + 2 * 64 * 256 / 32e9))
    # d 64: rows of 128 bytes, half the loads
    assert latency(w.with_(d=64)) == pytest.approx(128 * (3e-6 + 2 * 64 * 128 / 32e9))


def test_flex_paged_splits_cover_the_pools_length():
    from memmodel.traffic import paged as pm

    # batch 1 x 8 K/V heads: SPLIT_KV 132 // 8 x 2 = 32; a pool of 32768 keys: TILE_KV 1024, so
    # 8192 keys find 8 splits of 32; a pool of 131072: TILE_KV 4096, 2 splits
    assert pm.flex_split_kv(1, 8, 132) == 32
    assert pm.flex_tile_kv(32768, 32, 64) == 1024
    assert pm.flex_working_splits(8192, 1024, 32) == 8
    assert pm.flex_working_splits(8192, pm.flex_tile_kv(131072, 32, 64), 32) == 2
    w = Workload(n=1, n_kv=8192, batch=1, heads=32, kv_heads=8, d=128, dtype="bf16", page_size=64)
    p = H200.with_implementation_figures(
        "flex", block_step_time_s=((16, 1.5e-6), (64, 3e-6)), cta_bandwidth_bytes_per_s=()
    )

    def latency(work):
        return next(k for k in compare(work, p, impl="flex").tiled.timing.kernels if k.name == "flex_decode").terms[
            "latency"
        ]

    # the default pool: twice the batch's 128 pages, 16384 keys: TILE_KV 512, 8 steps of 64
    assert w.kv_pool_ == 256
    assert latency(w) == pytest.approx(512 / 64 * 3e-6)
    # 2048 pages of 64: TILE_KV 4096, 64 steps
    assert latency(w.with_(kv_pool=2048)) == pytest.approx(4096 / 64 * 3e-6)


def test_a_pool_that_cannot_hold_the_batch_is_refused():
    with pytest.raises(WorkloadError, match="kv_pool 100 pages cannot hold the batch's 128"):
        Workload(n=1, n_kv=8192, batch=1, heads=8, d=64, dtype="bf16", page_size=64, kv_pool=100)
    with pytest.raises(WorkloadError, match="give page_size as well"):
        Workload(n=1, n_kv=8192, batch=1, heads=8, d=64, dtype="bf16", kv_pool=100)


def test_flexs_paged_forward_takes_its_own_prefill_figures_else_its_designs():
    from memmodel.calibration import flex_prefill

    w = Workload(n=1024, n_kv=8192, batch=1, heads=32, kv_heads=8, d=128, dtype="bf16", causal=True, page_size=64)
    with_flex = compare(w, H200, impl="flex").tiled.timing.time_s
    figures = {k: v for k, v in H200.implementation_figures.items() if k != "flex"}
    without = compare(w, dataclasses.replace(H200, implementation_figures=figures), impl="flex").tiled.timing.time_s
    decode_only = compare(w, flex_prefill.bare(H200), impl="flex").tiled.timing.time_s
    assert "flex" in H200.implementation_figures
    assert decode_only == pytest.approx(without)  # only its decode measured: the Triton kernel's figures
    assert with_flex != pytest.approx(without)  # its prefill measured: its own efficiency


def test_flexs_decoding_kernel_holds_the_ctas_its_registers_leave():
    # Nsight Compute on the H200: 2-warp CTAs, 4 an SM at BLOCK_N 64 (178-231 registers), 10 at 16 (96),
    # 8 contiguous at d 64 (128), 4 at d 128 (184)
    assert paged.flex_decode_ctas_per_sm(128, 64, True) == 4
    assert paged.flex_decode_ctas_per_sm(64, 64, True) == 4
    assert paged.flex_decode_ctas_per_sm(128, 16, True) == 10
    assert paged.flex_decode_ctas_per_sm(128, 32, True) == 8
    assert paged.flex_decode_ctas_per_sm(64, 64, False) == 8
    assert paged.flex_decode_ctas_per_sm(128, 64, False) == 4
    # 128 requests x 8 K/V heads, SPLIT_KV 1: 1024 CTAs over 132 x 4 = 528 slots, two waves
    w = Workload(n=1, n_kv=4096, batch=128, heads=32, kv_heads=8, d=128, dtype="bf16", page_size=64)
    k = next(k for k in compare(w, H200, impl="flex").tiled.traffic.kernels if k.name == "flex_decode")
    assert (k.ctas, k.concurrent_ctas) == (1024, 528)


def test_a_co_resident_cta_slows_each_decoding_step_by_its_share():
    # 64 requests x 8 K/V heads = 512 CTAs in one wave of 528: 4 on the busiest SM (512 / 132 = 3.9),
    # each paged step of 64 keys 2 us x (1 + 0.25 x 3) = 3.5 us; 4096 / 64 = 64 steps: 224 us
    w = Workload(n=1, n_kv=4096, batch=64, heads=32, kv_heads=8, d=128, dtype="bf16", page_size=64)
    p = H200.with_implementation_figures(
        "flex", block_step_time_s=((16, 1e-6), (64, 2e-6)), cta_bandwidth_bytes_per_s=(), co_resident_cost=0.25
    )
    t = next(k for k in compare(w, p, impl="flex").tiled.timing.kernels if k.name == "flex_decode")
    assert t.terms["latency"] == pytest.approx(64 * 2e-6 * 1.75)
    # one request x 8 K/V heads: SPLIT_KV 32 (132 // 8 x 2) over K's 8192 tokens (the pool, two requests'
    # pages): TILE_KV 256, 16 splits find the request's 4096 keys, 8 x 16 = 128 working CTAs, one an SM:
    # no sharing, 256 / 64 = 4 steps of 2 us
    alone = next(k for k in compare(w.with_(batch=1), p, impl="flex").tiled.timing.kernels if k.name == "flex_decode")
    assert alone.terms["latency"] == pytest.approx(4 * 2e-6)


def test_a_contiguous_decoding_step_takes_its_share_of_the_paged_step():
    # contiguous K/V, 32 requests x 8 K/V heads, SPLIT_KV 1: 256 CTAs, 4096 keys each, 64 steps of 64 keys;
    # one CTA an SM or two (256 / 132): the busiest SM holds 2, no co-resident cost here. A step of 64
    # keys: 3 us x 0.5 (no page table to read) = 1.5 us; 64 steps: 96 us
    w = Workload(n=1, n_kv=4096, batch=32, heads=32, kv_heads=8, d=128, dtype="bf16")
    p = H200.with_implementation_figures(
        "flex",
        block_step_time_s=((16, 1.5e-6), (64, 3e-6)),
        cta_bandwidth_bytes_per_s=(),
        co_resident_cost=None,
        contiguous_step_share=0.5,
    )
    t = next(k for k in compare(w, p, impl="flex").tiled.timing.kernels if k.name == "flex_decode")
    assert t.terms["latency"] == pytest.approx(64 * 1.5e-6)
    # a paged cache reads its table first: the whole step
    paged16 = w.with_(page_size=64)
    t = next(k for k in compare(paged16, p, impl="flex").tiled.timing.kernels if k.name == "flex_decode")
    assert t.terms["latency"] == pytest.approx(64 * 3e-6)
