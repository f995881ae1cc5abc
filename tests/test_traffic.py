from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from memmodel import Workload, compare, load_profile
from memmodel.errors import WorkloadError
from memmodel.traffic import block_sizes, fa1_forward, fa2_forward, standard_forward
from memmodel.traffic.ledger import DIRECTIONS, LEVELS, ROLES, total

A100_SRAM = 164 * 1024  # bytes of shared memory per SM on the A100


def test_handbook_example_n4096_d768_fp32():
    s = standard_forward(Workload(n=4096, d=768))
    # Q, K, V: 3 × 4096·768·4 = 3 × 12_582_912 = 37_748_736 B = 37.7 MB
    assert s.bytes(level="hbm", role="input") == 37_748_736
    # S written, S read, P written, P read: 4 × 4096²·4 = 4 × 67_108_864 = 268_435_456 B = 268.4 MB
    assert s.bytes(level="hbm", role="intermediate") == 268_435_456
    # O: 4096·768·4 = 12_582_912 B = 12.6 MB
    assert s.bytes(level="hbm", role="output") == 12_582_912
    # Algorithm 0 reads V once: 37.7 + 268.4 + 12.6 = 318.8 MB (the handbook's 331.4 MB reads V twice)
    assert s.hbm_bytes == 318_767_104
    assert s.hbm_bytes + 12_582_912 == 331_350_016  # the handbook's figure, V counted twice
    # 2·N²·d per matmul: 2 × 4096² × 768 = 25_769_803_776
    assert [k.matmul_flops for k in s.kernels] == [25_769_803_776, 0, 25_769_803_776]
    assert s.kernels[1].exp_ops == 4096 * 4096


def test_every_total_is_a_sum_of_transfer_records():
    c = compare(Workload(n=1000, d=96, batch=3, heads=5, dtype="bf16"), load_profile("a100"), tiled="fa1")
    for alg in (c.standard.traffic, c.tiled.traffic):
        by_role = sum(alg.bytes(level="hbm", role=r) for r in ROLES)
        assert by_role == alg.hbm_bytes == alg.hbm_read_bytes + alg.hbm_write_bytes
        assert alg.hbm_bytes == sum(t.bytes for t in alg.transfers if t.level == "hbm")
        for level in ("hbm", "l2", "sram"):
            assert alg.bytes(level=level) == sum(k.bytes(level=level) for k in alg.kernels)


def test_algorithm1_block_sizes_a100():
    # fp16: M = 167_936 / 2 = 83_968 elements; B_c = ⌈83_968 / (4·64)⌉ = 328; B_r = min(328, 64) = 64
    b = block_sizes(Workload(n=4096, d=64, dtype="fp16"), A100_SRAM)
    assert (b.block_q, b.block_kv, b.sram_elements) == (64, 328, 83_968)
    assert (b.t_r, b.t_c) == (64, 13)  # ⌈4096/64⌉, ⌈4096/328⌉
    # fp32, d=768: M = 41_984; B_c = ⌈41_984 / 3_072⌉ = 14 = B_r
    b = block_sizes(Workload(n=4096, d=768), A100_SRAM)
    assert (b.block_q, b.block_kv, b.t_r) == (14, 14, 293)
    # blocks larger than the sequence are clamped to it
    b = block_sizes(Workload(n=100, d=64, dtype="fp16"), A100_SRAM)
    assert (b.block_q, b.block_kv, b.t_r, b.t_c) == (64, 100, 2, 1)


def test_fa2_small_case_by_hand():
    w = Workload(n=256, d=64, dtype="fp16")
    b = block_sizes(w, A100_SRAM, block_q=64, block_kv=128)  # T_r = 4, T_c = 2
    f = fa2_forward(w, b)
    got = {(t.tensor, t.direction): t.bytes for t in f.transfers if t.level == "hbm"}
    assert got == {
        ("Q", "read"): 32_768,  # 256·64·2
        ("K", "read"): 131_072,  # T_r · 256·64·2 = 4 · 32_768
        ("V", "read"): 131_072,
        ("O", "write"): 32_768,
        ("lse", "write"): 1_024,  # 256 rows · 4 B (fp32)
    }
    assert f.hbm_bytes == 328_704
    assert f.matmul_flops == 4 * 256 * 256 * 64  # two matmuls of 2·N²·d = 16_777_216


def test_fa1_small_case_by_hand():
    w = Workload(n=256, d=64, dtype="fp16")
    f = fa1_forward(w, block_sizes(w, A100_SRAM, block_q=64, block_kv=128))  # T_c = 2
    hbm = lambda **m: f.bytes(level="hbm", **m)  # noqa: E731
    assert hbm(tensor="K") == hbm(tensor="V") == 32_768  # read once
    assert hbm(tensor="Q") == 65_536  # T_c · 32_768
    assert hbm(tensor="O", direction="read") == 65_536  # T_c · 32_768
    assert hbm(tensor="O", direction="write") == 98_304  # init + T_c · 32_768
    assert hbm(tensor="l") == hbm(tensor="m") == 1_024 + 2 * 2 * 1_024  # init + T_c reads + T_c writes
    # 32_768·2 (K, V) + 65_536 (Q) + 65_536 + 98_304 (O) + 2 · 5_120 (l, m) = 305_152
    assert f.hbm_bytes == 305_152


def test_batch_and_heads_multiply_everything():
    # the paper's algorithm: a library kernel's split count (FlashAttention-2 splits K/V when
    # batch × heads leave SMs idle) changes with batch and heads by design
    one = compare(Workload(n=512, d=64, dtype="fp16"), load_profile("a100"), impl="paper")
    many = compare(Workload(n=512, d=64, dtype="fp16", batch=3, heads=7), load_profile("a100"), impl="paper")
    for a, b in zip(one.algorithms, many.algorithms):
        assert b.traffic.hbm_bytes == 21 * a.traffic.hbm_bytes
        assert b.traffic.flops == 21 * a.traffic.flops


def test_theorem2_scaling_standard_n_squared_tiled_n2_d2_over_m():
    """Standard: Θ(Nd + N²). Tiled: Θ(N²d²/M) when B_r = ⌈M/4d⌉ < d."""
    w = lambda n, d: Workload(n=n, d=d)  # noqa: E731
    std = lambda n, d: standard_forward(w(n, d)).hbm_bytes  # noqa: E731
    # for N ≫ d the N² term dominates: doubling N nearly quadruples bytes
    assert std(65536, 64) / std(32768, 64) == pytest.approx(4.0, rel=0.01)

    def tiled(n: int, d: int, sram: int) -> int:
        wl = w(n, d)
        return fa2_forward(wl, block_sizes(wl, sram)).hbm_bytes

    # fp32, M = 16_384 elements (64 KiB), d = 256: B_r = ⌈16384/1024⌉ = 16 < d
    assert tiled(65536, 256, 65536) / tiled(32768, 256, 65536) == pytest.approx(4.0, rel=0.01)
    # doubling d (B_r halves) gives ~4× the K/V re-reads: d² in the numerator
    assert tiled(65536, 512, 65536) / tiled(65536, 256, 65536) == pytest.approx(4.0, rel=0.02)
    # doubling M (B_r doubles) halves them: M in the denominator
    assert tiled(65536, 256, 131072) / tiled(65536, 256, 65536) == pytest.approx(0.5, rel=0.02)


def test_large_head_dim_makes_tiling_lose_on_hbm_bytes_in_the_papers_view():
    """Without L2, tiling saves HBM traffic only while d² ≪ M; the documented example is past that."""
    c = compare(Workload(n=4096, d=768), load_profile("a100"), l2="off")
    assert c.tiled.traffic.hbm_bytes > c.standard.traffic.hbm_bytes
    c = compare(Workload(n=4096, d=64, dtype="fp16"), load_profile("a100"), l2="off")
    assert c.tiled.traffic.hbm_bytes < c.standard.traffic.hbm_bytes
    # with L2 (effective 20 MiB), the 293 Q blocks run in ⌈293 / 108⌉ = 3 waves, and K+V of
    # the head (25.2 MB) does not fit: K and V are each read 3 times, 3 × 12.6 MB
    c = compare(Workload(n=4096, d=768), load_profile("a100"))
    assert c.tiled.traffic.bytes(level="hbm", tensor="K") == 3 * 12_582_912
    assert c.tiled.traffic.hbm_bytes < c.standard.traffic.hbm_bytes


sizes = st.integers(min_value=1, max_value=1 << 15)
long_sizes = st.integers(min_value=1, max_value=1 << 17)
head_dims = st.sampled_from([16, 32, 64, 80, 96, 128])


@settings(max_examples=200, deadline=None)
@given(
    n=long_sizes, d=head_dims, dtype=st.sampled_from(["fp16", "bf16", "fp32"]), variant=st.sampled_from(["fa1", "fa2"])
)
def test_tiled_never_exceeds_standard_once_n_exceeds_the_block(n, d, dtype, variant):
    """While B_r = d (Algorithm 1's ⌈M/4d⌉ ≥ d, i.e. d ≲ √(M/4)) and N ≥ 2·B_c, tiled
    re-reads (FA2: K, V ≈ 2·N²·e; FA1: Q, O ≈ 3·N²·d/B_c·e) stay below standard's S/P
    traffic (4·N²·e). Past that the property is false (see the d=768 test below)."""
    profile = load_profile("a100")
    w = Workload(n=n, d=d, dtype=dtype)
    b = block_sizes(w, profile.sram.capacity_per_sm_bytes)
    assume(int(b.block_q) == d and n >= 2 * int(b.block_kv))
    c = compare(w, profile, tiled=variant, impl="paper")  # no split-KV partials: the algorithm's own bytes
    assert c.tiled.traffic.hbm_bytes <= c.standard.traffic.hbm_bytes


@settings(max_examples=200, deadline=None)
@given(n=sizes, d=head_dims, dtype=st.sampled_from(["fp16", "fp32", "bf16"]), variant=st.sampled_from(["fa1", "fa2"]))
def test_bytes_are_monotone_in_n(n, d, dtype, variant):
    profile = load_profile("a100")
    a = compare(Workload(n=n, d=d, dtype=dtype), profile, tiled=variant)
    b = compare(Workload(n=n + 1, d=d, dtype=dtype), profile, tiled=variant)
    assert b.standard.traffic.hbm_bytes > a.standard.traffic.hbm_bytes
    assert b.tiled.traffic.hbm_bytes >= a.tiled.traffic.hbm_bytes


@settings(max_examples=200, deadline=None)
@given(n=sizes, d=head_dims, bq=st.integers(1, 64), bkv=st.integers(1, 64), variant=st.sampled_from(["fa1", "fa2"]))
def test_bytes_are_proportional_to_dtype_size_except_fp32_statistics(n, d, bq, bkv, variant):
    """In the paper's view (no L2); with L2, whether data fits depends on its size."""
    profile = load_profile("a100")
    opts = {"tiled": variant, "block_q": bq, "block_kv": bkv, "l2": "off", "impl": "paper"}
    half = compare(Workload(n=n, d=d, dtype="fp16"), profile, **opts)
    full = compare(Workload(n=n, d=d, dtype="fp32"), profile, **opts)
    assert full.standard.traffic.hbm_bytes == 2 * half.standard.traffic.hbm_bytes
    data = lambda c: c.tiled.traffic.hbm_bytes - c.tiled.traffic.bytes(level="hbm", role="state")  # noqa: E731
    assert data(full) == 2 * data(half)
    assert full.tiled.traffic.bytes(level="hbm", role="state") == half.tiled.traffic.bytes(level="hbm", role="state")


def test_a_grid_is_one_call_and_matches_scalar_calls():
    profile = load_profile("a100")
    n = np.array([128, 1000, 4096, 65536])
    d = np.array([[64], [128]])
    grid = compare(Workload(n=n, d=d, dtype="fp16", batch=2, heads=4), profile)
    assert grid.standard.traffic.hbm_bytes.shape == (2, 4)
    for i, dd in enumerate([64, 128]):
        for j, nn in enumerate(n.tolist()):
            one = compare(Workload(n=nn, d=dd, dtype="fp16", batch=2, heads=4), profile)
            for g, o in zip(grid.algorithms, one.algorithms):
                assert g.traffic.hbm_bytes[i, j] == o.traffic.hbm_bytes
                assert g.traffic.flops[i, j] == o.traffic.flops
                assert g.timing.time_s[i, j] == pytest.approx(o.timing.time_s, rel=1e-12)
                assert g.timing.bound[i, j] == o.timing.bound


def test_scalars_are_exact_beyond_int64_and_grids_refuse_overflow():
    w = Workload(n=10_000_000, d=128, batch=100_000, dtype="fp16")
    s = standard_forward(w)
    # S alone: 100_000 · (10^7)² · 2 B = 2·10^19 B > 2^63 − 1 ≈ 9.22·10^18
    assert s.bytes(level="hbm", tensor="S", direction="write") == 20_000_000_000_000_000_000
    with pytest.raises(OverflowError, match="exceeds int64"):
        standard_forward(Workload(n=np.array([10_000_000]), d=128, batch=100_000, dtype="fp16"))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n": 0, "d": 64}, "n must be a positive integer"),
        ({"n": 64, "d": -1}, "d must be a positive integer"),
        ({"n": 64, "d": 64, "dtype": "fp64"}, "unknown dtype 'fp64': accepted are fp32, tf32, fp16, bf16, fp8"),
        ({"n": 64, "d": 64, "heads": 8, "kv_heads": 3}, r"kv_heads \(3\) must divide heads \(8\)"),
        ({"n": 1.5, "d": 64}, "n: n must be an integer"),
        ({"n": np.array([64, 0]), "d": 64}, "n must be a positive integer"),
    ],
)
def test_workload_refuses_nonsense(kwargs, message):
    with pytest.raises(WorkloadError, match=message):
        Workload(**kwargs)


def test_blocks_that_do_not_fit_are_refused():
    w = Workload(n=4096, d=128, dtype="fp16")
    # (256 + 2·256)·128·2 = 196_608 B > 167_936 B
    with pytest.raises(WorkloadError, match=r"need \(B_r \+ 2·B_c\)·d·e = 196608 bytes"):
        block_sizes(w, A100_SRAM, block_q=256, block_kv=256)
    with pytest.raises(WorkloadError, match="head dimension d=30000 is too large"):
        block_sizes(Workload(n=64, d=30000), A100_SRAM)
    with pytest.raises(WorkloadError, match="block-q must be a positive integer"):
        block_sizes(w, A100_SRAM, block_q=0)


def test_ledger_sums_by_level_and_direction_are_the_transfers_and_read_only():
    # bytes(level=..., direction=...) reads sums kept per kernel and per algorithm: each equals
    # the scan over the transfers (exact integers), on a grid and for one workload
    a100 = load_profile("a100")
    for w in (
        Workload(n=np.array([128, 4096, 577]), d=64, batch=2, heads=8, kv_heads=2, dtype="fp16", causal=True),
        Workload(n=1000, d=128, batch=3, heads=4, dtype="bf16"),
    ):
        c = compare(w, a100, tiled="fa2", backward=True)
        for ledger in (c.standard.traffic, c.tiled.traffic, *c.standard.traffic.kernels, *c.tiled.traffic.kernels):
            for level in (None, *LEVELS):
                for direction in (None, *DIRECTIONS):
                    match = {k: v for k, v in (("level", level), ("direction", direction)) if v}
                    got, scan = ledger.bytes(**match), total(ledger.transfers, **match)
                    assert np.array_equal(got, scan) and ledger.bytes(**match) is got, (match, ledger)
        hbm = c.tiled.traffic.hbm_bytes
        if isinstance(hbm, np.ndarray):
            assert not hbm.flags.writeable  # kept and handed out again: nobody changes it
