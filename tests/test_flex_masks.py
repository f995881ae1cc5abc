"""FlexAttention's prefill under block masks (``--impl flex`` with a window, documents, causal,
none): the block geometry, the kernels' counts, the runner's mask and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from memmodel import Workload, compare, load_profile
from memmodel.calibration import flex_prefill
from memmodel.cases import Case
from memmodel.cli import cli
from memmodel.errors import WorkloadError
from memmodel.traffic import flex
from memmodel.traffic.flexmask import block_counts

ROOT = Path(__file__).resolve().parent.parent
H200 = load_profile("h200")


def brute(n, n_kv, causal, window, seq_lens, qb=128, kb=128):
    """Full/partial block counts from the element mask itself, padded to whole blocks with False
    as create_block_mask pads it (a block cut by the sequence's end is never full)."""
    q = np.arange(n)[:, None]
    k = np.arange(n_kv)[None, :]
    allowed = np.ones((n, n_kv), dtype=bool)
    if causal:
        allowed &= k <= q + (n_kv - n)
    if window:
        allowed &= q + (n_kv - n) - k < window
    if seq_lens:
        doc = np.repeat(np.arange(len(seq_lens)), seq_lens)
        allowed &= doc[:, None] == doc[None, :]
    allowed = np.pad(allowed, ((0, -n % qb), (0, -n_kv % kb)), constant_values=False)
    full = partial = 0
    full_kv = np.zeros(-(-n_kv // kb), dtype=int)
    for i in range(0, n, qb):
        for j in range(0, n_kv, kb):
            blk = allowed[i : i + qb, j : j + kb]
            if blk.all():
                full += 1
                full_kv[j // kb] += 1
            elif blk.any():
                partial += 1
    return full, partial, full_kv


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 700),
    extra=st.integers(0, 300),
    causal=st.booleans(),
    window=st.sampled_from([None, 1, 7, 128, 200, 513]),
    cuts=st.lists(st.integers(1, 699), max_size=4, unique=True),
    blocks=st.sampled_from([(128, 128), (64, 128), (128, 64)]),
)
def test_block_counts_match_the_element_mask(n, extra, causal, window, cuts, blocks):
    window = window if causal else None
    seq_lens = None
    n_kv = n + extra
    if cuts and extra == 0:
        bounds = [0, *sorted(c for c in cuts if c < n), n]
        seq_lens = tuple(b - a for a, b in zip(bounds, bounds[1:]) if b > a)
    c = block_counts(n, n_kv, causal, window, seq_lens, *blocks)
    full, partial, full_kv = brute(n, n_kv, causal, window, seq_lens, *blocks)
    assert (c.full, c.partial) == (full, partial)
    assert c.full_kv.tolist() == full_kv.tolist()
    assert int(c.full_kv.sum() + c.partial_kv.sum()) == c.visited  # the transposed lists hold the same blocks


def test_pinned_masks():
    # causal, 8 blocks: row i has i full blocks and the diagonal: 0+1+…+7 = 28 full, 8 partial
    c = block_counts(1024, 1024, True)
    assert (c.full, c.partial, c.keys) == (28, 8, 128 * 36)
    # a window of 256 keys: row 0 the diagonal; row 1 block 0 full (q − k in 1…255), the diagonal;
    # rows 2…7 block i−2 partial (q − k in 129…383), i−1 full, the diagonal: 7 full, 1 + 1 + 6·2 = 14 partial
    c = block_counts(1024, 1024, True, 256)
    assert (c.full, c.partial) == (7, 14)
    # documents of 256, 512, 256 tokens: causal within each: 1 + (1 + 2 + 3) + 1 = 8 full, 8 diagonals
    c = block_counts(1024, 1024, True, None, (256, 512, 256))
    assert (c.full, c.partial) == (8, 8)
    # a mask allowing every pair: whole blocks full; those cut by the sequence's end (300 = 2·128 + 44
    # queries, 500 = 3·128 + 116 keys) partial, as create_block_mask pads them with False: 2·3 full, 12 − 6
    assert (block_counts(300, 500, False).full, block_counts(300, 500, False).partial) == (6, 6)


def test_block_counts_match_torch_create_block_mask():
    pytest.importorskip("torch")
    from torch.nn.attention.flex_attention import create_block_mask

    from memmodel.gpu.paged_run import flex_mask_mod

    for case in (
        Case(impl="flex", n=1024, d=64, dtype="bf16", window=300),
        Case(impl="flex", n=1024, d=64, dtype="bf16", causal=True, seq_lens=(100, 412, 256, 256)),
        Case(impl="flex", n=512, n_kv=1024, d=64, dtype="bf16", causal=True),
        Case(impl="flex", n=1000, d=64, dtype="bf16", causal=True),  # the last Q and K/V blocks cut
        Case(impl="flex", n=700, d=64, dtype="bf16", window=200),
        Case(impl="flex", n=1000, d=64, dtype="bf16", causal=True, seq_lens=(100, 412, 200, 288)),
    ):
        m = create_block_mask(flex_mask_mod(case), None, None, case.n, case.n_kv_, device="cpu")
        c = block_counts(case.n, case.n_kv_, case.causal, case.window, case.seq_lens)
        assert m.full_kv_num_blocks[0, 0].tolist() == c.full_q.tolist()
        assert m.kv_num_blocks[0, 0].tolist() == c.partial_q.tolist()


def test_forward_kernel_counts():
    # 1 × 2 heads × 1024 tokens, d 64, causal: BLOCK_M 128, BLOCK_N 128 (one step a sparse block);
    # a head's tiles walk 36 blocks, 8 of them partial; (query, key) pairs the tiles compute:
    # 128 rows × 128 keys × 36 = 589,824 a head; products 2·pairs·(d + d_v) = 2 · 1,179,648 · 128
    w = Workload(n=1024, heads=2, d=64, dtype="bf16", causal=True)
    c = compare(w, H200, impl="flex")
    (k,) = [k for k in c.tiled.traffic.kernels if k.name == "flex_attention"]
    assert (k.ctas, k.blocks, k.diagonal_blocks) == (16, 72, 16)
    assert k.matmul_flops == 2 * 2 * 589_824 * 128
    assert k.figures_from == "flex"
    # Q once, O and the fp32 logsumexp written: 2·1024·64·2 each, lse 2·1024·4
    assert k.bytes(level="hbm", direction="write") == 2 * 1024 * 64 * 2 + 2 * 1024 * 4


def test_backward_kernels_and_their_steps():
    # the same head with a training step: Δ's reduction, then one template of K/V programs (BLOCK_N1
    # 128: 8 a head, each 2 steps of 64 rows per Q block it keeps) and Q programs (BLOCK_M2 128: 8,
    # each 2 steps of 64 keys per K/V block): 2·72 + 2·72 steps a head, of which 2·8 + 2·8 partial
    w = Workload(n=1024, heads=2, d=64, dtype="bf16", causal=True)
    c = compare(w, H200, impl="flex", backward=True)
    names = [k.name for k in c.tiled.traffic.kernels]
    assert names == ["flex_attention", "flex_bwd_delta", "flex_attention_backward"]
    bwd = c.tiled.traffic.kernels[-1]
    assert (bwd.ctas, bwd.blocks, bwd.diagonal_blocks) == (2 * 16, 2 * 144, 2 * 32)
    assert bwd.pass_ == "backward"
    # dQ, dK, dV written once each: 3 · 2·1024·64·2
    assert bwd.bytes(level="hbm", direction="write") == 3 * 2 * 1024 * 64 * 2


def test_window_and_documents_cost_less_than_causal():
    base = dict(n=8192, heads=32, kv_heads=8, d=128, dtype="bf16", causal=True)
    causal = compare(Workload(**base), H200, impl="flex", backward=True)
    windowed = compare(Workload(**base, window=1024), H200, impl="flex", backward=True)
    docs = compare(Workload(**base, seq_lens=(4096, 2048, 2048)), H200, impl="flex", backward=True)
    t = lambda c: c.tiled.time_s()  # noqa: E731
    assert t(windowed) < t(docs) < t(causal)
    assert windowed.tiled.traffic.flops < causal.tiled.traffic.flops


@settings(max_examples=40, deadline=None)
@given(lengths=st.lists(st.integers(1, 50), min_size=1, max_size=300), slots=st.integers(1, 40))
def test_schedule_tail_is_at_least_one(lengths, slots):
    tail = flex.schedule_tail(np.asarray(lengths, dtype=np.float64), slots)
    assert tail >= 1.0 - 1e-12
    assert flex.schedule_tail(np.full(4 * slots, 3.0), slots) == pytest.approx(1.0)


def test_tiles_by_head_dim():
    assert flex.forward_config("bf16", 64)[:2] == (128, 128)
    assert flex.forward_config("bf16", 128)[:2] == (128, 64)
    assert flex.forward_config("bf16", 96) == flex.FORWARD_FALLBACK
    assert flex.backward_config("bf16", 128)[:4] == (64, 128, 128, 64)
    assert flex.rounded_head_dim(96) == 128


def test_fit_reproduces_the_profiles_figures():
    record = flex_prefill.load(ROOT)
    fitted, found = flex_prefill.fit(record, H200)
    # 9 training steps of the first reference and the second's 4 at 2000 tokens (its 6 byte probes left
    # out): forward and backward templates each
    assert len(found) == 26
    assert sum(r.checked for r, _ in found) == 8
    figures = H200.implementation("flex")
    assert dict(figures.efficiency)[64] == pytest.approx(fitted["efficiency_64"])
    assert dict(figures.backward_efficiency)[128] == pytest.approx(fitted["backward_efficiency_128"])
    assert dict(figures.checked_step_cost)[64] == pytest.approx(fitted["checked_step_cost_64"])
    assert dict(figures.backward_checked_step_cost)[128] == pytest.approx(fitted["backward_checked_step_cost_128"])
    # every reference kernel a figure is fitted to within 15 % at the fitted figures; the causal rows at
    # 2000 tokens (partial and bounds-checked steps together, in no figure's rows) within 25 % (d 128's
    # forward comes out about a quarter slow: docs/variants.md)
    fitted_rows = [(r, p) for r, p in found if not (r.causal and r.checked)]
    assert max(abs(p / r.measured_s - 1) for r, p in fitted_rows) < 0.15
    assert max(abs(p / r.measured_s - 1) for r, p in found) < 0.25


def test_cli_flex_window_and_documents():
    runner = CliRunner()
    out = runner.invoke(cli, ["-q", "compare", "--n", "8192", "--heads", "32", "--kv-heads", "8", "--d", "128",
                              "--dtype", "bf16", "--gpu", "h200", "--impl", "flex", "--window", "1024", "--backward",
                              "--format", "json"])  # fmt: skip
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    tiled = next(a for a in data["algorithms"] if a["name"] == "tiled")
    assert [k["name"] for k in tiled["kernels"]] == ["flex_attention", "flex_bwd_delta", "flex_attention_backward"]
    out = runner.invoke(cli, ["-q", "compare", "--seq-lens", "4096,2048,2048", "--heads", "32", "--d", "128",
                              "--dtype", "bf16", "--gpu", "h200", "--impl", "flex", "--causal"])  # fmt: skip
    assert out.exit_code == 0, out.output
    bad = runner.invoke(cli, ["compare", "--n", "64", "--d", "128", "--gpu", "h200", "--impl", "flex", "--backward"])
    assert bad.exit_code == 2
    assert "decoding kernel" in bad.output and "Traceback" not in bad.output
    for extra in (["--n", "64", "--window", "32", "--causal"], ["--seq-lens", "32,32", "--causal"]):
        bad = runner.invoke(cli, ["compare", "--d", "128", "--gpu", "h200", "--impl", "flex", *extra])
        assert bad.exit_code == 2 and "decoding kernel" in bad.output, bad.output
        assert len(bad.output.strip().splitlines()) == 1
    bad = runner.invoke(cli, ["compare", "--n", "4096", "--d", "128", "--gpu", "h200", "--impl", "sdpa-cudnn",
                              "--window", "512"])  # fmt: skip
    assert bad.exit_code == 2 and "flex" in bad.output


def test_cases_take_flex_masks():
    c = Case(impl="flex", n=1024, d=64, dtype="bf16", window=256, backward=True)
    assert c.causal and "win256" in c.id
    with pytest.raises(WorkloadError, match="sdpa-flash or impl=flex"):
        Case(impl="sdpa-cudnn", n=1024, d=64, dtype="bf16", window=256)


def test_bounds_checked_steps_are_the_full_ones_of_an_undivisible_kernel():
    # 1 × 2 heads × 1000 tokens, d 64, causal: 1000 is not a multiple of 128 (IS_DIVISIBLE false).
    # Sparse blocks 8 × 8 (the last cut): 28 full below the diagonal, 8 on it partial, and the last
    # row's 7 full-looking blocks partial too (cut: create_block_mask pads them with False):
    # 21 full + 15 partial a head; BLOCK_N 128, one step a block; the full ones are bounds-checked
    w = Workload(n=1000, heads=2, d=64, dtype="bf16", causal=True)
    (k,) = [k for k in compare(w, H200, impl="flex").tiled.traffic.kernels if k.name == "flex_attention"]
    assert (k.blocks, k.diagonal_blocks, k.checked_blocks) == (2 * 36, 2 * 15, 2 * 21)
    # at 1024 tokens nothing is checked
    w = Workload(n=1024, heads=2, d=64, dtype="bf16", causal=True)
    (k,) = [k for k in compare(w, H200, impl="flex").tiled.traffic.kernels if k.name == "flex_attention"]
    assert k.checked_blocks == 0
    # and the checked steps cost time: without the figure the kernel is faster
    w = Workload(n=2000, heads=16, batch=8, d=64, dtype="bf16")
    with_cost = compare(w, H200, impl="flex").tiled.timing.kernels[0].time_s
    bare = H200.with_implementation_figures("flex", checked_step_cost=())
    assert compare(w, bare, impl="flex").tiled.timing.kernels[0].time_s < with_cost / 1.1


def test_paged_decode_blocks_are_all_partial():
    # flex's paged template (a group of 3: not a power of two) at one query: every (128-row, 64-key
    # page) block is cut in Q, so partial: 8192 / 64 = 128 blocks, BLOCK_N 64, one step each, a CTA
    # per (request, query head): 16 · 24 · 128 steps, all partial, none bounds-checked as full
    w = Workload(n=1, n_kv=8192, batch=16, heads=24, kv_heads=8, d=128, dtype="bf16", page_size=64)
    (k,) = [k for k in compare(w, H200, impl="flex").tiled.traffic.kernels if k.name == "flex_attention"]
    assert (k.blocks, k.diagonal_blocks, k.checked_blocks) == (16 * 24 * 128,) * 2 + (0,)


def test_kv_program_rereads_grow_with_the_group_under_a_drifting_mask():
    # causal, 8192 queries, K/V tiles of 128 (64 of them), Q steps of 64 rows (Q, dO at d 128 and lse, Δ:
    # 520 bytes a row): a Q tile is read by (64 + 1) / 2 K/V programs on average; 132 CTAs each
    # bring 64 · 520 bytes a step over a 60 MiB L2
    from memmodel.traffic import l2 as l2m

    l2 = l2m.L2("on", 30 * 2**20, 132, 60 * 2**20)
    rows = 8192 * 65 // 2
    extra = [flex.kv_program_rereads(rows, 8192, g, 64, 128, True, 132, 64 * 520, l2) for g in (1, 2, 4, 8)]
    assert extra == sorted(extra) and extra[0] > 0
    # head 0's neighbours read a tile 2 steps apart: k = 132 · 2 · 33,280 / 62,914,560 ≈ 0.14 at
    # u = 1 / 32.5; one head: x ≈ u / (1 − k(1 − u)) ≈ 0.036, x · readers − 1 ≈ 0.16
    assert extra[0] == pytest.approx(0.156, abs=0.01)
    # the group's later heads drift: 8 heads re-read each byte about three times more
    assert extra[3] == pytest.approx(2.89, abs=0.05)
    # in step (a window, or no mask): the same gap every head, no growth with the group
    still = [flex.kv_program_rereads(rows, 8192, g, 64, 128, False, 132, 64 * 520, l2) for g in (1, 8)]
    assert still[0] == pytest.approx(still[1])
    # L2 off: every request from HBM
    assert flex.kv_program_rereads(rows, 8192, 4, 64, 128, True, 132, 64 * 520, l2m.L2("off", 0.0, 1)) == (
        pytest.approx(65 / 2 - 1)
    )


def test_strided_wave_reads_count_a_group_straddling_a_wave():
    # flex's grid (1 tile, 16 requests, 24 query heads), groups of 3, 264 CTAs at once: CTA = b + 16·h;
    # the wave boundary at 264 cuts head 16 (CTAs 256..271), so K/V group 5 (heads 15, 16, 17) runs in two
    # waves for every request: 16 · 8 pairs, 16 of them twice: 144
    assert flex.strided_wave_reads(16, 24, 3, 1, 264) == 16 * 8 + 16
    # everything in one wave: each pair once
    assert flex.strided_wave_reads(8, 24, 3, 1, 264) == 8 * 8
    # a group whose readers span three waves (1 request, 4 heads a group, 2 tiles, 3 CTAs at once):
    # CTAs 0..7, waves 0,0,0,1,1,1,2,2: 3 waves for the one pair
    assert flex.strided_wave_reads(1, 4, 4, 2, 3) == 3
    # heads more than a wave apart: 2 requests, a group of 2 heads, 1 tile, 1 CTA at a time:
    # CTA = b + 2·h: request 0 runs at waves 0 and 2, request 1 at 1 and 3: 2 each, not the 3 between
    assert flex.strided_wave_reads(2, 2, 2, 1, 1) == 4
    # large grids stay cheap (no tile axis): 512 requests · 128 heads · 8192 tiles
    assert flex.strided_wave_reads(512, 128, 8, 8192, 264) > 512 * 16


def test_paged_group_of_three_rereads_kv_across_the_wave_boundary():
    # the committed set's paged decode (16 requests, 24 heads on 8, 8192 keys, d 128, pages of 64): the
    # template's 8 warps hold one CTA an SM, 132 at once, so waves end at CTA 132 (= 16 · 8 + 4: head 8's
    # requests 4..15 run after their group's heads 6, 7) and 264 (= 16 · 16 + 8: head 16 splits group 5,
    # heads 15..17, for all 16 requests): 12 + 16 = 28 pairs read their K/V twice. K/V once
    # (16 · 8 · 8192 · 256 · 2 = 536,870,912) plus 28 · 8192 · 256 · 2 = 117,440,512 at a cross-wave
    # miss share of 1 (a wave streams far more than the L2)
    w = Workload(n=1, n_kv=8192, batch=16, heads=24, kv_heads=8, d=128, dtype="bf16", page_size=64)
    (k,) = [k for k in compare(w, H200, impl="flex").tiled.traffic.kernels if k.name == "flex_attention"]
    assert k.concurrent_ctas == 132
    kv = sum(t.bytes for t in k.transfers if t.tensor in ("K", "V") and t.level == "hbm")
    assert kv == pytest.approx(536_870_912 + 117_440_512, rel=1e-6)


def test_q_phase_rereads_where_the_kv_programs_fill_the_gpu():
    # d 128, a group of 4, a window of 4096 keys, 8 K/V heads, 132 slots (one CTA an SM), an L2 of
    # 30 MiB less the masked template's stacks (264 bytes × 256 threads × 132 CTAs = 8,921,088 bytes)
    cfg = flex.backward_config("bf16", 128)[:4]
    cap = 30 * 2**20 - flex.BACKWARD_STACK_BYTES * 256 * 132
    assert cap == 22_536_192

    def rereads(n, capacity=cap):
        return flex.q_phase_rereads(n, n, (True, 4096, None), 4, 128, 128, 2, cfg, 132, 8, capacity)

    # 16k tokens: 128 K/V programs a head fill the GPU, the Q programs run after them and re-read
    # about every Q/dO tile (the replay's 0.908) and every K/V tile once more (plus edges: 1.06)
    xq, xk = rereads(16384)
    assert xq == pytest.approx(0.908, abs=0.01) and xk == pytest.approx(1.06, abs=0.01)
    # 8k tokens: 64 K/V programs share the GPU with their Q programs: every re-read hits
    assert rereads(8192) == (0.0, 0.0)
    # an L2 as large as the data: nothing again; none at all: every read after the first misses,
    # a Q tile about 29 times (33 K/V programs a window, fewer at the end, then its Q program)
    assert rereads(16384, 1e9) == (0.0, 0.0)
    none = rereads(16384, 0.0)
    assert none[0] == pytest.approx(28.6, abs=0.1)
    # random replacement (the probe's comparison): some misses at any size, all of them at none
    rand = flex.q_phase_rereads(16384, 16384, (True, 4096, None), 4, 128, 128, 2, cfg, 132, 8, 1e9, "random")
    assert 0 < rand[0] < 0.2
    zero = flex.q_phase_rereads(16384, 16384, (True, 4096, None), 4, 128, 128, 2, cfg, 132, 8, 0.0, "random")
    assert zero == pytest.approx(none)
    # fewer misses as the L2 grows
    seq = [rereads(16384, c) for c in (0.0, 1e7, cap, 1e9)]
    assert [s[0] for s in seq] == sorted((s[0] for s in seq), reverse=True)
    assert [s[1] for s in seq] == sorted((s[1] for s in seq), reverse=True)


def test_flex_backward_counts_the_q_programs_rereads(monkeypatch):
    # #29's committed case: measured 701.9 MB of reads (Nsight Compute, h200-variants-final); the
    # Q/dO (272.6 MB with lse, Δ) take 0.908 more reads, K/V (67.1 MB) 1.06 more
    w = Workload(n=16384, d=128, batch=1, heads=32, kv_heads=8, dtype="bf16", causal=True, window=4096)

    def reads():
        kernels = compare(w, H200, impl="flex", backward=True).tiled.traffic.kernels
        return next(k for k in kernels if k.name == "flex_attention_backward").sums[("hbm", "read")]

    counted = reads()
    assert counted / 701.9e6 - 1 == pytest.approx(-0.062, abs=0.005)
    monkeypatch.setattr(flex, "q_phase_rereads", lambda *a: (0.0, 0.0))
    assert reads() == pytest.approx(382.1e6, rel=0.002)  # the drift rule alone: −45.6 %
    monkeypatch.undo()
    # past the replay's limit the Q phase is not counted
    monkeypatch.setattr(flex, "SCHEDULE_EVENTS", 1000)
    assert reads() == pytest.approx(382.1e6, rel=0.002)
