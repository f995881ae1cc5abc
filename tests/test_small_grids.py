"""Grids that do not fill the GPU: FlashAttention-2's split-KV prefill, an SM left with one CTA,
cuDNN's 128-row CTAs and its decoding occupancy, and the calibrate figures behind them."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memmodel.calibration import fits
from memmodel.calibration.figures import kernel_figures
from memmodel.hardware import load_profile
from memmodel.implementations import occupancy, tiles
from memmodel.model import compare
from memmodel.options import options_for
from memmodel.timing import cta_tail_factor
from memmodel.traffic.decode import choose_splits, num_splits_heuristic
from memmodel.workload import Workload

H200 = load_profile("h200")


def test_flash_attention_2_splits_a_prefill_that_leaves_slots_empty():
    # 12 heads × ⌈1024/64⌉ = 192 Q blocks < 0.8 × 264 slots; 4 K/V blocks of 256 (d = 64):
    # the heuristic's best wave efficiency within 85 % is 4 splits (192·4/264 = 2.9 waves)
    w = Workload(n=1024, d=64, heads=12, dtype="fp16")
    assert num_splits_heuristic(192, 264, 4) == 4
    assert choose_splits(w, 132, prefill=True) == 4
    assert choose_splits(w, 132) == 1  # another kernel: only decoding splits
    assert choose_splits(w.with_(dropout=0.1), 132, prefill=True) == 1  # no split kernel with dropout
    # 14 heads × ⌈1536/64⌉ = 336 ≥ 211.2: no split
    assert choose_splits(Workload(n=1536, d=64, heads=14, kv_heads=2, dtype="bf16"), 132, prefill=True) == 1
    c = compare(w, H200, impl="sdpa-flash")
    assert [k.name for k in c.tiled.traffic.kernels] == ["fa2_splitkv", "fa2_combine"]
    assert c.tiled.traffic.params["splits"] == 4
    # cuDNN does not split a prefill (one head's 33 and 66 CTAs take as long: probe 2); the SDPA
    # call's memset comes first
    assert [k.name for k in compare(w, H200, impl="sdpa-cudnn").tiled.traffic.kernels] == ["cudnn_zero", "fa2_fwd"]


@settings(max_examples=60, deadline=None)
@given(
    n=st.sampled_from([1, 128, 512, 1024, 1536, 4096]),
    heads=st.sampled_from([1, 2, 8, 12, 32]),
    batch=st.sampled_from([1, 2, 4]),
    d=st.sampled_from([64, 128, 256]),
)
def test_a_grid_splits_as_its_rows_do(n, heads, batch, d):
    grid = Workload(n=np.array([n, 2048]), d=d, heads=heads, batch=batch, n_kv=4096, dtype="fp16")
    got = choose_splits(grid, 132, prefill=True)
    for i, nn in enumerate([n, 2048]):
        one = Workload(n=nn, d=d, heads=heads, batch=batch, n_kv=4096, dtype="fp16")
        assert int(np.asarray(got).reshape(-1)[i]) == choose_splits(one, 132, prefill=True)


def test_an_sm_left_with_one_cta_runs_at_the_one_cta_share():
    w = Workload(n=128 * 132, d=128, dtype="bf16")  # 132 CTAs of 128 rows on 132 SMs
    # one CTA per SM where the kernel keeps two: each runs at 0.8 of the rate → 1/0.8
    assert cta_tail_factor(w, 128, 64, 132, 2, 0.8) == pytest.approx(1.25)
    assert cta_tail_factor(w, 128, 64, 132, 1, 0.8) == pytest.approx(1.0)  # one is all it keeps
    assert cta_tail_factor(w, 128, 64, 132, 2, None) == pytest.approx(1.0)  # no figure: full rate
    # 396 CTAs: 3 per SM, a pair then one alone: (2 + 1/0.8) / 3
    assert cta_tail_factor(w.with_(n=128 * 396), 128, 64, 132, 2, 0.8) == pytest.approx(3.25 / 3)
    # 198 CTAs: the SMs with two set the time (2 against 1/0.8 alone): 2 / 1.5
    assert cta_tail_factor(w.with_(n=128 * 198), 128, 64, 132, 2, 0.8) == pytest.approx(2 / 1.5)
    # causal, at most one CTA per SM: the longest alone
    causal = w.with_(causal=True)
    assert cta_tail_factor(causal, 128, 64, 132, 2, 0.8) == pytest.approx(
        cta_tail_factor(causal, 128, 64, 132, 2, None) / 0.8
    )


def test_the_profile_carries_the_share_and_the_model_uses_it_for_mma_sync_only():
    assert 0.5 < H200.mma_sync_one_cta_share < 1.0
    w = Workload(n=128 * 132, n_kv=16384, d=128, dtype="bf16")
    flash = compare(w, H200, impl="sdpa-flash").tiled.timing.time_s
    without = compare(w, dataclasses.replace(H200, mma_sync_one_cta_share=None), impl="sdpa-flash").tiled.timing
    assert flash > without.time_s * 1.1  # the lone CTAs are slower
    cudnn = compare(w, H200, impl="sdpa-cudnn").tiled.timing.time_s
    cudnn_without = compare(w, dataclasses.replace(H200, mma_sync_one_cta_share=None), impl="sdpa-cudnn")
    assert cudnn == cudnn_without.tiled.timing.time_s  # wgmma: one CTA per SM is all it keeps


def test_cudnn_forward_ctas_cover_128_rows_and_its_decoding_kernels_keep_two_per_sm():
    assert tiles("sdpa-cudnn", 128, False) == (128, 128)
    assert tiles("sdpa-cudnn", 64, True) == (128, 128)
    assert occupancy("sdpa-cudnn", 128, 128) == 1
    assert occupancy("sdpa-cudnn", 256, 16) == 2  # decoding: 16 rows, 4 warps
    w = Workload(n=1, n_kv=8192, d=256, batch=16, heads=8, kv_heads=4, dtype="bf16")
    assert options_for("sdpa-cudnn", w, H200).ctas_per_sm == 2  # not capped by whole K/V tiles
    # L2 requests of one head of 16384 tokens, d = 128: T_r = 128 Q blocks each read K and V
    # (2 · 16384 · 128 · 2 B = 8 MiB): 128 · 8 MiB = 1 GiB, half of what 64-row blocks request
    c = compare(Workload(n=16384, d=128, dtype="bf16"), H200, impl="sdpa-cudnn")
    kv = sum(t.bytes for t in c.tiled.traffic.transfers if t.level == "l2" and t.tensor in ("K", "V"))
    assert kv == 128 * 8 * 2**20


def test_the_fit_is_least_squares_over_the_plain_references():
    x, t = 1 / 0.9, 2e-6  # efficiency 0.9, 2 µs per CTA
    ref = lambda c, f: {"compute_s": c, "waves": f, "launch_s": 1e-6, "measured_s": c * x + f * t + 1e-6}  # noqa: E731
    long, short, loop = ref(400e-6, 8.0), ref(60e-6, 62.0), ref(1.8e-3, 4.0)
    fit = fits.fit_reference(long, short, None, loop=loop)
    assert fit["efficiency"] == pytest.approx(0.9) and fit["cta_overhead_s"] == pytest.approx(t)
    # a long loop that runs 10 % slower than the short shapes say pulls the efficiency down
    slow = {**loop, "measured_s": loop["measured_s"] * 1.1}
    assert fits.fit_reference(long, short, None, loop=slow)["efficiency"] < 0.9


def test_calibrate_writes_the_one_cta_share():
    m = {
        "mma_sync": {
            "one_cta": {
                "tile": [128, 128, 64],
                "warps": 4,
                "ctas_1": {"ctas": 132, "rate": 485.8e12},
                "ctas_2": {"ctas": 264, "rate": 588.5e12},
                "share": 485.8 / 588.5,
            }
        }
    }
    value, note = kernel_figures(m, {})["compute.mma_sync.one_cta_share"]
    assert value == 0.825  # 485.8 / 588.5 = 0.8255
    assert "132 CTAs 485.8 TFLOP/s, 264 CTAs 588.5 TFLOP/s" in note


def test_our_triton_kernel_runs_at_its_efficiency_at_the_tile_it_is_given():
    # the bundled h200 measured it at 64x64 and 128x64 on the long-loop reference
    tiles = H200.implementation("triton").tile_efficiency
    assert set(tiles) == {(64, 64), (128, 64)}
    default = H200.implementation("triton").efficiency_at(128)
    assert H200.implementation("triton").efficiency_at(128, (128, 128)) == default  # its default tile at d = 128
    assert H200.implementation("triton").efficiency_at(128, (64, 64)) == dict(tiles[(64, 64)])[128]
    # at d = 64, 128x64 is the default tile: the two figures agree
    assert H200.implementation("triton").efficiency_at(64, (128, 64)) == pytest.approx(
        H200.implementation("triton").efficiency_at(64), abs=1e-3
    )
    # arrays of tiles take each element's figure
    got = H200.implementation("triton").efficiency_at(128, (np.array([64, 128]), np.array([64, 128])))
    assert list(got) == [dict(tiles[(64, 64)])[128], default]
    w = Workload(n=131072, d=128, dtype="fp16")
    small = compare(w, H200, impl="triton", block_q=64, block_kv=64).tiled.timing.time_s
    big = compare(w, H200, impl="triton", block_q=128, block_kv=128).tiled.timing.time_s
    assert small > big  # 64x64 tiles measured slower per FLOP than the defaults


def test_a_tile_figure_reads_from_a_profile(tmp_path):
    from memmodel.hardware import parse_profile

    text = (
        "name: x\nfull_name: X\nvendor: NVIDIA\narchitecture: Hopper\nsm_count: 132\n"
        "memory:\n  hbm: {capacity: 141 GB, bandwidth: 4.8 TB/s, latency: 300 ns}\n"
        "  l2: {capacity: 60 MiB, bandwidth: 9 TB/s, latency: 150 ns}\n"
        "  sram: {capacity_per_sm: 228 KiB, bandwidth_per_sm: 250 GB/s, latency: 15 ns}\n"
        "compute: {fp32: 60 TFLOP/s, fp16: 800 TFLOP/s}\n"
        "implementations:\n  triton:\n    efficiency: {64: 1.0, 128: 0.9}\n    efficiency_64x64: {128: 0.6}\n"
    )
    import yaml

    p = parse_profile(yaml.safe_load(text), "x.yaml")
    assert p.implementation("triton").efficiency_at(128, (64, 64)) == 0.6
    assert p.implementation("triton").efficiency_at(64, (64, 64)) == 0.6  # one head dim: the figure for all
    assert p.implementation("triton").efficiency_at(128, (128, 64)) == 0.9  # a tile it was not measured at


def test_an_overlapped_transfer_leaves_the_step_fewer_sms():
    from memmodel.parallel import beside_transfer_time

    # one wave: 128 CTAs fit 2 per SM on 125 SMs; placed at launch, the grid runs on them to the end
    assert beside_transfer_time(128, 2, 100e-6, 160e-6, 50e-6, 125) == 160e-6
    # several waves: slowed only while the SMs are held: 800 + 60 · (820/800 − 1) µs
    assert beside_transfer_time(1024, 2, 800e-6, 820e-6, 60e-6, 125) == pytest.approx(801.5e-6)
    # a transfer longer than the kernel: the whole kernel is slowed
    assert beside_transfer_time(1024, 2, 100e-6, 110e-6, 500e-6, 125) == pytest.approx(110e-6)


def test_calibrate_fits_the_sms_nccl_holds_to_the_overlap_references():
    import json
    from pathlib import Path

    from memmodel.calibration.interconnect import p2p_sms

    # measured on the H200 pair: 4x8x4096x128 786.1 µs alone, 784.8 µs beside a 65.1 µs
    # exchange; 1x4x4096x128 (one wave) 122.4 µs alone, 191.3 µs beside a 64.8 µs exchange
    run = json.loads((Path(__file__).parent.parent / "validation/h200x2/calibrate-nccl.json").read_text())
    rows = run["overlap"]
    assert [r["shape"] for r in rows] == [[4, 8, 4096, 128], [1, 4, 4096, 128]]
    count, pairs = p2p_sms({"overlap": rows}, H200)
    assert 4 <= count <= 12
    for measured, modelled in pairs:
        assert modelled == pytest.approx(measured, rel=0.03)
    assert p2p_sms({"overlap": []}, H200) is None
    assert H200.interconnect.p2p_sms == count  # the bundled profile holds what the pair measured


def test_the_ring_backward_step_beside_its_transfer_is_slower_than_alone():
    from memmodel.parallel import context_parallel

    w = Workload(n=16384, d=128, heads=2, dtype="bf16")
    held = context_parallel(w, H200, 2, "ring", impl="sdpa-flash", backward=True)
    free = context_parallel(
        w,
        dataclasses.replace(H200, interconnect=dataclasses.replace(H200.interconnect, p2p_sms=0)),
        2,
        "ring",
        impl="sdpa-flash",
        backward=True,
    )
    back = lambda r: next(s for s in r.tiled.steps if s.pass_ == "backward" and s.index == 0)  # noqa: E731
    # the backward's first kernel is short: NCCL starts in its tail and holds SMs beside the main one
    assert back(held).compute_s > back(free).compute_s
    # the forward's attention takes the SMs first: NCCL's SMs do not slow it, the transfer waits
    assert held.tiled.steps[0].compute_s == free.tiled.steps[0].compute_s


def test_idle_share_is_when_the_sms_given_one_cta_fewer_go_idle():
    from memmodel import timing
    from memmodel.timing import idle_share

    share = 0.83
    # 4 heads of 8192 at 128-row blocks: 256 CTAs on 132 SMs, 2 each: 8 SMs get one CTA, alone
    # at 0.83 of the rate, so idle at (1/0.83) / 2 = 0.602 of the kernel; 32 SMs: not before its end
    four = Workload(n=8192, d=128, heads=4)
    assert idle_share(four, 128, 64, 132, 2, share, 8) == pytest.approx(1 / 0.83 / 2)
    assert idle_share(four, 128, 64, 132, 2, share, 32) == 1.0
    # 8 heads: 512 CTAs, 16 SMs get 3 and 116 get 4: (2 + 1/0.83) / 4 = 0.801 (probe: 630 of 784 µs)
    eight = Workload(n=8192, d=128, heads=8)
    assert idle_share(eight, 128, 64, 132, 2, share, 16) == pytest.approx((2 + 1 / 0.83) / 4)
    # one head of 8192: 64 CTAs leave 68 SMs idle from the start
    assert idle_share(Workload(n=8192, d=128, heads=1), 128, 64, 132, 2, share, 32) == 0.0
    # every SM the same number of CTAs (2 · 132 = 264 = 4 heads of 66 blocks): none idles early
    assert idle_share(Workload(n=66 * 128, d=128, heads=4), 128, 64, 132, 2, share, 1) == 1.0
    # more SMs asked for than the GPU has
    assert idle_share(four, 128, 64, 132, 2, share, 133) == 1.0
    # causal: the balanced time over the makespan
    causal = Workload(n=8192, d=128, heads=8, causal=True)
    tail = timing.cta_tail_factor(causal, 128, 64, 132, 2, share)
    assert idle_share(causal, 128, 64, 132, 2, share, 32) == pytest.approx(1 / tail)


@pytest.mark.parametrize(("heads", "starts_at_end"), [(2, True), (1, False)])
def test_the_ring_forward_transfer_waits_for_the_attention_tail(heads, starts_at_end):
    from memmodel.parallel import context_parallel

    assert H200.interconnect.p2p_idle_sms == 32  # probe 10
    r = context_parallel(Workload(n=16384, d=128, heads=heads, dtype="bf16"), H200, 2, "ring", impl="sdpa-flash")
    step = r.tiled.steps[0]
    assert step.link_s > 0
    if starts_at_end:  # 2 heads of 8192 a GPU: 128 CTAs leave 4 SMs idle, fewer than 32
        assert step.link_start_s == step.compute_s
        assert step.time_s == pytest.approx(step.compute_s + step.link_s)
        assert step.to_dict()["hidden_link_s"] == 0.0
    else:  # 1 head: 64 CTAs leave 68 SMs idle, NCCL starts at once
        assert step.link_start_s == 0.0
        assert step.time_s == pytest.approx(max(step.compute_s, step.link_s))


@pytest.mark.parametrize(
    ("section", "text", "message"),
    [
        ("compute", "compute: {fp32: 60 TFLOP/s, mma_sync: {fp16: 400 TFLOP/s, one_cta_share: 1.5}}", "above 1"),
        ("interconnect", "interconnect: {bandwidth: 450 GB/s, p2p_sms: 132}", "leaves no SM of the 132"),
        ("interconnect", "interconnect: {bandwidth: 450 GB/s, p2p_idle_sms: 133}", "more than the 132 SMs"),
    ],
)
def test_a_profile_with_an_impossible_share_or_sm_count_is_refused(section, text, message):
    import yaml

    from memmodel.errors import ProfileError
    from memmodel.hardware import parse_profile

    base = (
        "name: x\nfull_name: X\nvendor: NVIDIA\narchitecture: Hopper\nsm_count: 132\n"
        "memory:\n  hbm: {capacity: 141 GB, bandwidth: 4.8 TB/s, latency: 300 ns}\n"
        "  l2: {capacity: 60 MiB, bandwidth: 9 TB/s, latency: 150 ns}\n"
        "  sram: {capacity_per_sm: 228 KiB, bandwidth_per_sm: 250 GB/s, latency: 15 ns}\n"
    )
    data = yaml.safe_load(base + (text if section == "compute" else "compute: {fp32: 60 TFLOP/s}\n" + text))
    with pytest.raises(ProfileError, match=message):
        parse_profile(data, "x.yaml")


def test_a_tile_without_its_own_efficiency_says_so():
    w = Workload(n=8192, d=128, dtype="fp16")
    said = compare(w, H200, impl="triton", block_q=64, block_kv=128).caveats
    assert any("at 64x128 the default tiles' figure stands in" in c for c in said)
    for bq, bkv in ((64, 64), (128, 128)):  # measured, and the default
        assert not any("stands in" in c for c in compare(w, H200, impl="triton", block_q=bq, block_kv=bkv).caveats)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 80), st.integers(-3, 3)), min_size=1, max_size=300),
)
def test_distinct_rows_rebuild_their_columns(pairs):
    """per_element's distinct combinations: each element's index points at its own row, every
    row is distinct, and past _FEW_ROWS of them (up to 81 × 7 here) the sort takes the rest."""
    from memmodel.implementations import _distinct_rows, per_element

    a = np.array([p[0] for p in pairs], dtype=np.int64)
    b = np.array([p[1] for p in pairs], dtype=np.int64)
    rows, inverse = _distinct_rows([a, b])
    assert len(set(rows)) == len(rows) == len(set(pairs))
    assert [rows[i] for i in inverse] == [tuple(p) for p in pairs]
    got = per_element(lambda x, y: 10 * x + y, a, b)
    assert np.array_equal(np.broadcast_to(got, a.shape), 10 * a + b)


def test_a_backward_grid_smaller_than_the_chip_runs_on_its_own_ctas_sms():
    """The fused backward kernel (a CTA per K/V block) of one head fills few SMs: it runs at the
    share of the chip its CTAs hold, not at the whole chip's rate."""
    from memmodel.timing import equal_jobs_tail

    h200 = load_profile("h200")
    for impl in ("sdpa-flash", "sdpa-cudnn"):
        small = Workload(n=4096, d=128, dtype="bf16")
        big = small.with_(batch=4, heads=32)
        rates = []
        for w in (small, big):
            c = compare(w, h200, options_for(impl, w, h200, backward=True))
            (k, t) = next(
                (k, t)
                for k, t in zip(c.tiled.traffic.kernels, c.tiled.timing.kernels)
                if k.matmul_flops and k.pass_ == "backward"
            )
            rates.append(k.matmul_flops / t.time_s)
            if w is small:
                # 4096 / 128 = 32 CTAs on 132 SMs, one each: ⌈32/132⌉ / (32/132) = 4.125
                assert k.ctas == 32 and equal_jobs_tail(32, 132) == pytest.approx(132 / 32)
        # the 32 CTAs hold 32 of 132 SMs: their rate is at most about that share of the full grid's
        assert rates[0] < rates[1] * 32 / 132 * 1.1


@given(
    st.integers(1, 8),
    st.integers(1, 32),
    st.sampled_from([256, 1000, 2048, 8192]),
    st.booleans(),
)
@settings(max_examples=40, deadline=None)
def test_the_backward_tail_is_at_least_one_and_equal_jobs_without_a_mask(batch, heads, n, causal):
    from memmodel.timing import _backward_lengths, backward_tail_factor, equal_jobs_tail, schedule_tail

    h200 = load_profile("h200")
    w = Workload(batch=batch, heads=heads, n=n, d=64, dtype="fp16", causal=causal)
    c = compare(w, h200, options_for("sdpa-flash", w, h200, backward=True))
    k = next(k for k in c.tiled.traffic.kernels if k.name == "fa2_bwd")
    bw = c.tiled.traffic.facts.backward
    tail = backward_tail_factor(w, k, bw.block_q, bw.block_kv, 132, bw.ctas_per_sm, 0.832)
    assert tail >= 1.0
    if not causal:  # whole waves (validation/h200/backward-grid): ⌈CTAs / slots⌉ over CTAs / slots
        assert tail == pytest.approx(equal_jobs_tail(k.ctas, 132, bw.ctas_per_sm, 0.832))
    else:  # a head's K/V blocks, longest first, list-scheduled head after head on the CTA slots
        lengths = _backward_lengths(n, n, int(bw.block_q), int(bw.block_kv), None)
        assert lengths[0] == -(-n // int(bw.block_q)) and lengths[-1] >= 1
        slots = 132 * int(bw.ctas_per_sm)
        total = lengths.sum() * batch * heads
        assert tail == pytest.approx(max(1.0, schedule_tail(np.tile(lengths, batch * heads), slots)))
        if k.ctas <= slots:  # one wave: the longest CTA, seen by every Q block, sets the time
            assert tail == pytest.approx(max(1.0, lengths[0] * slots / total))


def test_the_backward_tail_pinned():
    from memmodel.timing import _backward_lengths, schedule_tail

    # 1024 keys in K/V blocks of 128, Q blocks of 64, causal: K/V block j is seen by the Q blocks
    # from 2j on, 16 − 2j of them: 16, 14, …, 2
    assert list(_backward_lengths(1024, 1024, 64, 128, None)) == [16, 14, 12, 10, 8, 6, 4, 2]
    # a window of 256 keys: block j is seen by rows j·128 to j·128 + 128 − 2 + 256, 7 Q blocks, clipped at the end
    assert list(_backward_lengths(1024, 1024, 64, 128, 256)) == [6, 6, 6, 6, 6, 6, 4, 2]
    # two heads of [3, 2, 1] on 2 slots: 3 on A (0–3), 2 on B (0–2), 1 on B (2–3), 3 on A (3–6),
    # 2 on B (3–5), 1 on B (5–6): makespan 6 against a balanced 12 / 2 = 6
    assert schedule_tail(np.array([3.0, 2.0, 1.0, 3.0, 2.0, 1.0]), 2) == 1.0
    # [4, 1, 1] on 2 slots: 4 on A, 1 and 1 on B: makespan 4 against a balanced 3
    assert schedule_tail(np.array([4.0, 1.0, 1.0]), 2) == pytest.approx(4 / 3)


def test_a_packed_rows_backward_tail_walks_each_documents_own_blocks():
    from memmodel.timing import _packed_backward_tail

    # documents of 1024 and 256 tokens, causal, Q blocks of 64, K/V blocks of 128: the grid is 8 K/V
    # blocks × 2 documents; the first walks 16, 14, …, 2 Q blocks (72), the second 4, 2 and exits 6 CTAs
    # at once: 78 block steps on 132 slots, one wave, so its longest CTA (16) sets the time:
    # 16 / (78 / 132) = 27.08
    w = Workload(n=1280, d=64, dtype="fp16", causal=True, seq_lens=(1024, 256))
    assert _packed_backward_tail(w, 64, 128, 132, 1) == pytest.approx(16 * 132 / 78)
    # 64 heads of it: 1024 CTAs (384 exit at once), list-scheduled in launch order: the last heads'
    # longest CTAs end at 48 block steps against a balanced 78 × 64 / 132 = 37.82: 1.269
    many = w.with_(heads=64)
    assert _packed_backward_tail(many, 64, 128, 132, 1) == pytest.approx(48 / (78 * 64 / 132))
