"""FlashAttention-1 as flash-attn v1.0.9's fmha kernels run (``--impl fa1``): tiles, grid, the
split heuristics and the traffic of its loops, pinned by hand (memmodel/traffic/fmha.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

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
    assert fwd.terms["matmul"] == pytest.approx(4 * 264 * 4096 * 4096 * 64 / 453.4e12)
    # the A100 runs mma.sync natively: its fp16 peak
    (a,) = compare(Workload(n=4096, d=64, heads=216, dtype="fp16"), A100, impl="fa1").tiled.timing.kernels
    assert a.terms["matmul"] == pytest.approx(4 * 216 * 4096 * 4096 * 64 / 255.8e12)
    assert any("no measured efficiency for fa1" in str(x) for x in c.caveats)


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
