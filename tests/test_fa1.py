"""FlashAttention-1 as flash-attn v1.0.9's fmha kernels run (``--impl fa1``): tiles, grid, the
split heuristics and the traffic of its loops, pinned by hand (memmodel/traffic/fmha.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from memmodel import Workload, compare
from memmodel.errors import WorkloadError
from memmodel.hardware import load_profile
from memmodel.implementations import (
    fa1_backward_ctas,
    fa1_backward_smem_bytes,
    fa1_backward_splits,
    fa1_forward_splits,
    fa1_rounded_n_kv,
    padded_head_dim,
    tiles,
)
from memmodel.options import Options, options_for

A100 = load_profile("a100")
H100 = load_profile("h100-sxm")
H200 = load_profile("h200")


def by_name(traffic):
    return {k.name: k for k in traffic.kernels}


def test_tiles_per_head_dim():
    # fmha_api.cpp: blocksize_c = head_size > 64 ? 128 : 256; 16 query rows a step (STEP)
    assert tiles("fa1", 32, False) == (16, 256)
    assert tiles("fa1", 64, True) == (16, 256)
    assert tiles("fa1", 128, False) == (16, 128)
    assert tiles("fa1", 64, False, n_kv=128) == (16, 128)  # fmha_fwd_hdim64.cu: seqlen_k == 128
    assert padded_head_dim("fa1", 48) == 64 and padded_head_dim("fa1", 80) == 128
    assert options_for("fa1", Workload(n=100, n_kv=100, d=64, dtype="fp16"), A100).block_kv == 128


def test_launched_key_count():
    # max_seqlen_k: 128 up to 128, 256 up to 256, else a multiple of the block
    assert [fa1_rounded_n_kv(n, 256) for n in (1, 128, 129, 256, 257, 1000)] == [128, 128, 256, 256, 512, 1024]
    assert fa1_rounded_n_kv(1000, 128) == 1024


def test_backward_shared_memory_and_occupancy():
    # d = 128: 2 Q buffers ×2 (2·16·128·2·2 = 16,384) + V twice (2·128·128·2 = 65,536)
    # + fp32 dQ of 8 warps (16·128·4·8 = 65,536) + 2 score tiles (2·16·128·2 = 8,192) = 155,648
    assert fa1_backward_smem_bytes(128, 128) == 155_648
    # d = 64, 256 keys: 8,192 + 65,536 + 32,768 + 16,384 = 122,880; V in registers at 128 keys:
    # 8,192 + 16,384 + 32,768 + 8,192 = 65,536
    assert fa1_backward_smem_bytes(64, 256) == 122_880
    assert fa1_backward_smem_bytes(64, 128) == 65_536
    # A100 164 KiB, H100 228 KiB: one 120 KiB or 152 KiB CTA each; 64 KiB: two (the cap)
    assert fa1_backward_ctas(64, 256, A100) == fa1_backward_ctas(128, 128, H100) == 1
    assert fa1_backward_ctas(64, 128, A100) == 2


def test_forward_split_heuristic():
    # 128 heads on 108 SMs × 2 = 216 slots: waves 128·s/216 fill 0.59, 0.59, 0.89, 0.79, 0.99
    # of their last wave for s = 1..5; the best (≤ 30 splits) is 1.0 at s = 27: 5 is within 0.95
    assert fa1_forward_splits(128, 4096, 108, 2) == 5
    # one head: s/216 grows to s = 30 (min(30, N + 16)); the first above 0.95 · 30/216 is 29
    assert fa1_forward_splits(1, 4096, 108, 2) == 29
    # 216 heads fill the slots exactly: no split
    assert fa1_forward_splits(216, 512, 108, 2) == 1


def test_backward_split_heuristic():
    # 128 heads on 108 SMs (one CTA each): unsplit 128/108 fills 0.59 of its last wave; split in
    # 16 K/V blocks 2048/108 = 18.96 of 19 waves, 0.998 / (1 + 256/4096) = 0.94: split
    assert fa1_backward_splits(128, 4096, 256, 108, 1, False) == 16
    # 216 heads: exactly two waves unsplit (1.0): not split
    assert fa1_backward_splits(216, 512, 256, 108, 1, False) == 1
    # causal with ≥ 10 K/V blocks always splits
    assert fa1_backward_splits(216, 4096, 256, 108, 1, True) == 16


def test_forward_traffic_by_hand():
    """216 heads, N 512, d 64 fp16, A100, L2 off: no split, T_c = 512 / 256 = 2."""
    c = compare(Workload(n=512, d=64, heads=216, dtype="fp16"), A100, impl="fa1", l2="off")
    t = c.tiled.traffic
    assert t.variant == "fa1" and t.params["splits"] == 1 and (t.params["block_q"], t.params["block_kv"]) == (16, 256)
    (fwd,) = t.kernels
    q = 512 * 64 * 2 * 216  # Q (or O) of every head: 14,155,776
    acc = 512 * 64 * 4 * 216  # the fp32 O: 28,311,552
    stat = 512 * 4 * 216  # the logsumexp: 442,368
    hbm = lambda **m: fwd.bytes(level="hbm", **m)  # noqa: E731
    assert hbm(tensor="K") == hbm(tensor="V") == q  # once (one split)
    assert hbm(tensor="Q") == 2 * q  # once per K/V block
    # fp32 O written after block 0, read before block 1; O in fp16 written once
    assert hbm(tensor="O", role="state", direction="read") == hbm(tensor="O", role="state", direction="write") == acc
    assert hbm(tensor="O", role="output") == q
    assert hbm(tensor="lse", direction="write") == 2 * stat and hbm(tensor="lse", direction="read") == stat
    # every one of the 4 warps reads the CTA's 16 query rows from shared memory
    assert fwd.bytes(level="sram", tensor="Q", direction="read") == 4 * 2 * q
    # products at whole tiles: 4 · 216 · 512² · 64
    assert fwd.matmul_flops == 4 * 216 * 512 * 512 * 64
    assert fwd.ctas == 216


def test_forward_splits_share_kv_in_l2():
    """One head, N 4096: 29 splits each load every K/V block (29 × 524,288 B requested), read from
    HBM once (one wave); its 4096 rows of Q, fp32 O and logsumexp (1.6 MB) stay in L2."""
    t = compare(Workload(n=4096, d=64, dtype="fp16"), A100, impl="fa1").tiled.traffic
    (fwd,) = t.kernels
    kv = 4096 * 64 * 2
    assert t.params["splits"] == 29 and fwd.ctas == 29
    assert fwd.bytes(level="l2", tensor="K") == 29 * kv and fwd.bytes(level="hbm", tensor="K") == kv
    assert fwd.bytes(level="hbm", tensor="Q") == kv  # once, though requested T_c = 16 times
    assert fwd.bytes(level="hbm", tensor="O", role="state", direction="read") == 0
    assert fwd.bytes(level="hbm", tensor="O", role="state", direction="write") == 4096 * 64 * 4  # written back once


def test_splits_past_the_q_blocks_do_nothing():
    """Decoding (N = 1, one 16-row Q block): the grid has 29 splits, 28 of which return at once;
    the one CTA a head walks all 8192 keys (flash-attn v1 has no split-KV)."""
    (fwd,) = compare(Workload(n=1, n_kv=8192, d=64, dtype="fp16"), A100, impl="fa1").tiled.traffic.kernels
    assert fwd.ctas == 1 and fwd.bytes(level="l2", tensor="K") == 8192 * 64 * 2


def test_backward_kernels_by_hand():
    """Not split (216 heads fill two waves of 108): one kernel per (batch, head), T_c = 2, L2 off."""
    t = compare(Workload(n=512, d=64, heads=216, dtype="fp16"), A100, impl="fa1", l2="off", backward=True).tiled
    assert [k.name for k in t.traffic.kernels] == ["fa1_fwd", "fa1_bwd"]
    assert t.traffic.params["backward_splits"] == 1 and t.traffic.params["backward_ctas_per_sm"] == 1
    bwd = t.traffic.kernels[1]
    q, acc, stat = 512 * 64 * 2 * 216, 512 * 64 * 4 * 216, 512 * 4 * 216
    hbm = lambda **m: bwd.bytes(level="hbm", **m)  # noqa: E731
    assert hbm(tensor="K") == hbm(tensor="V") == hbm(tensor="dK") == hbm(tensor="dV") == q
    assert hbm(tensor="Q") == hbm(tensor="dO") == 2 * q and hbm(tensor="O") == q  # O: first K/V block only
    assert hbm(tensor="lse") == 2 * stat and hbm(tensor="D", direction="read") == 2 * stat
    assert hbm(tensor="D", direction="write") == stat
    assert hbm(tensor="dQ", role="state", direction="read") == hbm(tensor="dQ", role="state", direction="write") == acc
    assert hbm(tensor="dQ", role="output") == q
    assert bwd.matmul_flops == 10 * 216 * 512 * 512 * 64  # 5 products: 2.5 × the forward's


def test_split_backward_kernels():
    """16 heads, N 4096: a CTA per K/V block (16 a head), dQ added in fp32, then copied out."""
    t = compare(Workload(n=4096, d=64, heads=16, dtype="fp16"), A100, impl="fa1", backward=True).tiled
    names = [k.name for k in t.traffic.kernels]
    assert names == ["fa1_fwd", "fa1_bwd_dq_zero", "fa1_bwd_dot", "fa1_bwd", "fa1_bwd_dq"]
    k = by_name(t.traffic)
    acc = 16 * 4096 * 64 * 4
    assert k["fa1_bwd"].ctas == 16 * 16 and t.traffic.params["backward_splits"] == 16
    assert k["fa1_bwd_dq_zero"].bytes(level="hbm") == acc
    assert k["fa1_bwd"].bytes(level="l2", tensor="dQacc", direction="write") == 16 * acc  # one add per K/V block
    # 256 CTAs on 108 slots: a head's 16 CTAs, 16 apart in the grid, fall into all 3 waves
    assert k["fa1_bwd"].bytes(level="hbm", tensor="Q") == 3 * 16 * 4096 * 64 * 2
    assert k["fa1_bwd_dq"].bytes(level="hbm", tensor="dQ") == 16 * 4096 * 64 * 2


def test_products_at_the_mma_sync_rate():
    """264 heads on an H100 (132 SMs × 2): one CTA per slot, no tail; the products at the
    profile's compute.mma_sync rate (453.4 TFLOP/s fp16), not the wgmma peak (782)."""
    c = compare(Workload(n=4096, d=64, heads=264, dtype="fp16"), H100, impl="fa1")
    (fwd,) = c.tiled.timing.kernels
    # over the efficiency sdpa-flash measured at d = 64 (1.094); 264 CTAs on 264 slots: no tail
    assert fwd.terms["matmul"] == pytest.approx(4 * 264 * 4096 * 4096 * 64 / 453.4e12 / 1.094)
    # the A100 runs mma.sync natively: its fp16 peak
    (a,) = compare(Workload(n=4096, d=64, heads=216, dtype="fp16"), A100, impl="fa1").tiled.timing.kernels
    assert a.terms["matmul"] == pytest.approx(4 * 216 * 4096 * 4096 * 64 / 271.2e12 / 1.094)
    # its efficiency is sdpa-flash's (same design family), and the caveat says so
    assert not any("no measured efficiency for fa1" in str(x) for x in c.caveats)
    assert any("same design family and instruction class as sdpa-flash" in str(x) for x in c.caveats)


def test_tiled_fa1_is_the_fa1_kernels_and_paper_is_algorithm_1():
    w = Workload(n=2048, d=64, batch=2, heads=8, dtype="bf16")
    impl = compare(w, A100, impl="fa1").tiled
    tiled = compare(w, A100, tiled="fa1").tiled
    assert impl.timing.time_s == tiled.timing.time_s and [k.name for k in tiled.traffic.kernels] == ["fa1_fwd"]
    paper = compare(w, A100, tiled="fa1", impl="paper").tiled
    assert paper.traffic.params["block_q"] != 16  # Algorithm 1's blocks
    # fp32 and d > 128: flash-attn v1 does not run them, --tiled fa1 shows Algorithm 1
    opts = options_for("auto", Workload(n=512, d=256, dtype="fp16"), A100, tiled="fa1")
    assert opts.implementation == "paper" and "head dims up to 128" in opts.notes[0]


def test_grid_matches_single_workloads():
    grid = Workload(n=np.array([512, 4096, 4096]), d=np.array([64, 64, 128]), heads=16, batch=2, dtype="fp16")
    g = compare(grid, A100, impl="fa1", backward=True).tiled
    for i, (n, d) in enumerate([(512, 64), (4096, 64), (4096, 128)]):
        one = compare(Workload(n=n, d=d, heads=16, batch=2, dtype="fp16"), A100, impl="fa1", backward=True).tiled
        assert np.asarray(g.timing.time_s)[i] == pytest.approx(one.timing.time_s)
        assert np.asarray(g.traffic.hbm_bytes)[i] == one.traffic.hbm_bytes


def test_bad_combinations_are_refused():
    with pytest.raises(WorkloadError, match="--impl sdpa-flash runs the fa2 variant: use --tiled fa2"):
        Options(tiled="fa1", implementation="sdpa-flash")
    with pytest.raises(WorkloadError, match="--impl fa1 runs the fa1 variant: use --tiled fa1"):
        Options(tiled="fa2", implementation="fa1")


def test_cli(run):
    r = run("compare", "--n", "4096", "--d", "64", "--batch", "4", "--heads", "32", "--dtype", "fp16",
            "--gpu", "a100", "--impl", "fa1", "--backward", "--format", "json")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    tiled = [a for a in json.loads(r.stdout)["algorithms"] if a["name"] == "tiled"][0]
    assert tiled["variant"] == "fa1" and tiled["params"]["splits"] == 5 and tiled["params"]["backward_splits"] == 16
    r = run("compare", "--n", "4096", "--d", "64", "--dtype", "fp16", "--tiled", "fa1")
    assert r.exit_code == 0 and "FA1 (outer loop over K/V blocks) as FlashAttention-1, flash-attn v1.0.9" in r.stdout
    for args, message in (
        (("--tiled", "fa1", "--impl", "sdpa-flash"), "--impl sdpa-flash runs the fa2 variant: use --tiled fa2"),
        (("--impl", "fa1", "--splits", "2"), "splits applies to the fa2 variant"),
    ):
        r = run("compare", "--n", "4096", "--d", "64", "--dtype", "fp16", *args)
        assert r.exit_code == 2 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    r = run("compare", "--n", "4096", "--d", "64", "--dtype", "fp32", "--tiled", "fa1")
    assert r.exit_code == 0 and "fa1 runs fp16, bf16 (got fp32): showing the paper's Algorithm 1" in r.stderr


# --- what FA1 takes from FlashAttention-2 and what it adds (split-K exchange, barriers) ---

#: the figures fa1 takes from sdpa-flash on every GPU (hardware.schema.SAME_FAMILY)
BORROWED = ("efficiency", "backward_efficiency", "cta_overhead_s", "backward_cta_overhead_s", "masked_block_cost")


@pytest.mark.parametrize("profile", [H200, H100, A100], ids=lambda p: p.name)
def test_fa1_takes_sdpa_flash_figures_on_the_same_gpu(profile):
    """Measured (h200), derived (h100-sxm) or transferred (a100): fa1's figures are sdpa-flash's
    on that GPU, each citing the rule and where sdpa-flash's was measured."""
    fa1, fa2 = profile.implementation("fa1"), profile.implementation("sdpa-flash")
    for name in BORROWED:
        assert getattr(fa1, name) == getattr(fa2, name) != ()
    prov = profile.provenance["implementations.fa1.efficiency"]
    assert prov.source == "same-family" and prov.kind == "derived"
    assert prov.note.startswith(
        "same design family and instruction class as sdpa-flash: its measured efficiency, from h200 measured 2026-12-01"
    )
    # what the rule does not take: split-KV, combine and clock figures (v1 has no split-KV kernel)
    assert fa1.split_efficiency == () and fa1.combine_time_s is None and fa1.sustained_share is None


def test_a_profile_without_sdpa_flash_figures_gives_fa1_none(tmp_path):
    """The rule copies what is there: a datasheet profile keeps fa1 at its instructions alone."""
    from memmodel.hardware.load import load_file

    path = load_profile("a100").path
    assert path is not None
    data = path.read_text(encoding="utf-8").replace("transfer_from: h200\n", "")
    own = tmp_path / "bare.yaml"
    own.write_text(data, encoding="utf-8")
    bare = load_file(own)
    assert bare.implementation("fa1").efficiency == () and "same-family" not in bare.sources
    c = compare(Workload(n=4096, d=64, heads=16, dtype="fp16"), bare, impl="fa1")
    assert any("no measured efficiency for fa1" in str(x) for x in c.caveats)


def test_exchange_bytes_are_the_sum_of_the_exchange_transfers():
    """Every byte of the split-K exchange is a transfer (SRAM rows of O, m, l, lse)."""
    c = compare(Workload(n=1000, d=80, batch=3, heads=5, dtype="fp16", causal=True), A100, impl="fa1", backward=True)
    for k in c.tiled.traffic.kernels:
        rows = [t for t in k.transfers if t.level == "sram" and t.role == "intermediate"]
        assert sum(int(t.bytes) for t in rows) == int(k.exchange_bytes)
    fwd = by_name(c.tiled.traffic)["fa1_fwd"]
    assert {t.tensor for t in fwd.transfers if t.role == "intermediate"} == {"O", "m", "l", "lse"}
    # FlashAttention-2 splits no product across warps: nothing exchanged, no such terms
    fa2 = compare(Workload(n=1000, d=80, batch=3, heads=5, dtype="fp16"), A100, impl="sdpa-flash", backward=True)
    assert all(k.exchange_bytes == 0 and k.barriers == 0 for k in fa2.tiled.traffic.kernels)
    assert not any({"exchange", "barrier"} & set(k.terms) for k in fa2.tiled.timing.kernels)


def test_a100_forward_pinned():
    """A100, 4 × 16 heads, N 4096, d 64, fp16, non-causal: 10 splits, 640 CTAs on 216 slots;
    16 K/V blocks of 256 keys, 256 steps of 16 rows at each."""
    c = compare(Workload(n=4096, d=64, batch=4, heads=16, dtype="fp16"), A100, impl="fa1")
    (k,) = c.tiled.traffic.kernels
    (t,) = c.tiled.timing.kernels
    assert c.tiled.traffic.params["splits"] == 10 and k.ctas == 640 and k.concurrent_ctas == 216
    steps = 64 * 256 * 16  # 262,144 (16-row step, K/V block) pairs
    # per step: O partials 4 warps · 16 · 64 · 4 = 16,384 B each way; max 256 B stored, 4·256 + 16·64
    # = 2,048 read; sum 256 stored, 1,024 read; the previous logsumexp 256 + 1,024 after a row's first
    later = steps - 64 * 256
    assert k.exchange_bytes == steps * (2 * 16_384 + 256 + 2_048 + 256 + 1_024) + later * (256 + 1_024)  # 9,844,031,488
    # barriers: 2 a step, 4 a K/V block a CTA visits, one more after its first
    assert k.barriers == 2 * steps + 4 * 640 * 16 + 640 * 15  # 574,848
    # tail: 640 CTAs on 108 SMs × 2: 6 or 5 a SM (2 + 2 + one alone at 0.832): 6 / (640/108)
    tail = 6 / (640 / 108)
    assert t.terms["matmul"] == pytest.approx(4 * 64 * 4096**2 * 64 / 271.2e12 / 1.094 * tail, rel=1e-3)
    # the exchange at 180.5 GB/s × 108 SMs, not divided by the efficiency; its barriers 16.3 ns each a slot
    assert t.terms["exchange"] == pytest.approx(9_844_031_488 / (180.5e9 * 108) * tail)
    assert t.terms["barrier"] == pytest.approx(574_848 * 16.3e-9 / 216 * tail)
    # CTA overhead (sdpa-flash's 3.022 µs at 1980 MHz = 4.244 µs at 1410): 3 CTAs a slot, 16 K/V blocks each
    assert t.terms["cta"] == pytest.approx(3 * 16 * 3.022e-6 * 1980 / 1410, rel=1e-3)
    compute = t.terms["matmul"] + t.terms["softmax"] + t.terms["exp"] + t.terms["exchange"] + t.terms["barrier"]
    assert t.terms["compute"] == pytest.approx(compute + t.terms["cta"])
    assert t.time_s == pytest.approx(2.3938e-3, rel=1e-3) and t.bound == "compute"


def test_h100_causal_forward_pinned():
    """H100 SXM, 8 × 16 heads, N 2048, d 128, fp16, causal: 128-key blocks, 2 splits (256 CTAs on
    264 slots); v1 masks every block it visits score by score, so every one costs 1 + 0.329."""
    c = compare(Workload(n=2048, d=128, batch=8, heads=16, dtype="fp16", causal=True), H100, impl="fa1")
    (k,) = c.tiled.traffic.kernels
    (t,) = c.tiled.timing.kernels
    # K/V block j (of 16) is visited by the Q blocks i ≥ 8j: Σ (128 − 8j) = 1,088 pairs a head
    steps = 128 * 1_088  # 139,264
    assert k.blocks == k.diagonal_blocks == steps
    # per step: O 2 · 4 · 16 · 128 · 4 = 65,536; max 256 + 1,024 + 2,048; sum 256 + 2,048; lse 256 + 2,048
    later = steps - 128 * 128
    assert k.exchange_bytes == steps * (65_536 + 3_328 + 2_304) + later * 2_304 == 10_194_255_872
    tail = 2 / (256 / 132)  # 256 CTAs on 132 SMs × 2: 2 on most SMs
    mm = k.matmul_flops / 453.4e12 / 1.066 * (1 + 0.329) * tail
    assert t.terms["matmul"] == pytest.approx(mm, rel=1e-3)
    assert t.terms["exchange"] == pytest.approx(10_194_255_872 / (249.7e9 * 132) * tail)
    assert t.time_s == pytest.approx(0.96584e-3, rel=1e-3)


def _times(profile, w, backward):
    fa1 = compare(w, profile, impl="fa1", backward=backward).tiled.timing.time_s
    fa2 = compare(w, profile, impl="sdpa-flash", backward=backward).tiled.timing.time_s
    return fa1, fa2


GPUS = {"a100": A100, "h100-sxm": H100, "h200": H200}


@settings(max_examples=60, deadline=None)
@given(
    gpu=st.sampled_from(sorted(GPUS)),
    d=st.sampled_from([64, 128]),
    n=st.integers(512, 16384),
    batch=st.integers(1, 32),
    heads=st.integers(1, 32),
    causal=st.booleans(),
    dtype=st.sampled_from(["fp16", "bf16"]),
)
def test_fa1_is_never_faster_than_fa2(gpu, d, n, batch, heads, causal, dtype):
    """FlashAttention-2 was designed to remove FA1's inefficiencies and runs the same instruction
    class: on the same GPU and shape FA1's forward and forward + backward take at least as long.
    Where the model does not hold it, left out here and said in docs/implementations.md: grids
    of less than a wave of FA2's forward CTAs (B·H·⌈N/128⌉ < 2 × SMs: FA2's measured split and
    causal tail against v1's row splits, which balance one wave), the d = 64 forward +
    backward below N = 1280 (v1's one fused backward kernel against FA2's three), and causal
    lengths that are not multiples of 128 (FA2's uneven kernel takes its measured slowdown; v1's
    own was never measured)."""
    profile = GPUS[gpu]
    assume(batch * heads * -(-n // 128) >= 2 * profile.sm_count)
    assume(not causal or n % 128 == 0)
    w = Workload(n=n, d=d, batch=batch, heads=heads, dtype=dtype, causal=causal)
    fwd1, fwd2 = _times(profile, w, False)
    assert fwd1 >= fwd2
    if d == 128 or n >= 1280:
        both1, both2 = _times(profile, w, True)
        assert both1 >= both2


@pytest.mark.parametrize("gpu", [A100, H100], ids=lambda p: p.name)
@pytest.mark.parametrize("n", [512, 2048, 16384])
def test_fa1_is_slower_than_fa2_on_the_benchmark_shapes(gpu, n):
    """The FlashAttention papers' benchmark shapes (16k tokens, hidden 2048, d = 128, fp16):
    FA1 slower than FA2 forward and forward + backward, causal or not, N = 512 included."""
    for causal in (False, True):
        w = Workload(n=n, d=128, batch=16384 // n, heads=16, dtype="fp16", causal=causal)
        for backward in (False, True):
            fa1, fa2 = _times(gpu, w, backward)
            assert fa1 > fa2
