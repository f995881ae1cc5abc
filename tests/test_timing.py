from __future__ import annotations

import numpy as np
import pytest

from memmodel import Workload, compare, load_profile
from memmodel.timing import kernel_time


def test_handbook_example_times_on_a100():
    c = compare(Workload(n=4096, d=768), load_profile("a100"))
    qk, softmax, pv = c.standard.timing.kernels
    launch = 1.38e-6  # the H200's measured launch overhead, transferred to the A100 as is
    # qk: 2·4096²·768 = 25.77 GFLOP at 14.82 TFLOP/s (fp32, no tensor cores: the A100's 19.5 × the
    # H200's measured 50.91 of 67) = 1.739 ms; its 92.3 MB at 1.923 TB/s would take only 48 us
    assert qk.time_s == pytest.approx(25_769_803_776 / 14.82e12 + launch)
    assert qk.bound == "matmul"
    # softmax: 134.2 MB at PyTorch's fp32 softmax rate for rows of 4096 (2.43 TB/s on the H200),
    # carried to the A100 by the stream rule (transfer_from: h200): its time per byte, 1/2.43,
    # less the H200's streaming 1/4.528, over the SMs × clock ratio 0.5826, plus the A100's
    # streaming 1/1.923: 1/(0.5200 + 0.3273) = 1.180 TB/s, HBM-bound
    rate = load_profile("a100").kernel_rates.softmax_fp32_rate(4096)
    assert rate == pytest.approx(
        1 / (1 / 1.923e12 + (1 / 2.43e12 - 1 / 4.528e12) / (108 * 1410 / (132 * 1980))), rel=1e-3
    )
    assert softmax.time_s == pytest.approx(134_217_728 / rate + launch)
    assert softmax.bound == "hbm"
    assert c.standard.timing.time_s == pytest.approx(qk.time_s + softmax.time_s + pv.time_s)
    assert c.standard.timing.bound == "matmul"  # 3.48 of its 3.55 ms are matmul-bound
    # FA2 with L2: K, V read 3 times (100.7 MB in all, 52 us at 1.923 TB/s); the fused loop
    # issues matmuls (51.5 GFLOP / 14.82 TFLOP/s = 3.478 ms), softmax arithmetic and exps
    # from the same warps, so they add; Algorithm 1's 14-row Q blocks give ⌈4096/14⌉ = 293
    # CTAs on 108 SMs: 2.713 waves take 3 (× 3/(293/108) = 1.1058): 3.846 ms, compute-bound
    (fa2,) = c.tiled.timing.kernels
    assert fa2.time_s == pytest.approx(fa2.terms["matmul"] + fa2.terms["softmax"] + fa2.terms["exp"] + launch)
    assert fa2.terms["matmul"] == pytest.approx(4 * 4096 * 4096 * 768 / 14.82e12 * 3 / (293 / 108))
    assert fa2.bound == "compute"
    # the paper's view: 7.399 GB of K/V re-reads at 1.923 TB/s = 3.847 ms, just under the fused
    # loop's compute (3.93 ms with its softmax and exps): compute-bound, as with the L2
    (paper,) = compare(Workload(n=4096, d=768), load_profile("a100"), l2="off").tiled.timing.kernels
    assert paper.terms["hbm"] == pytest.approx(7_398_768_640 / 1.923e12)
    assert paper.bound == "compute" and paper.time_s == pytest.approx(fa2.time_s)


def test_fp16_uses_the_tensor_core_peak():
    p = load_profile("a100")
    c = compare(Workload(n=8192, d=128, batch=4, heads=16, dtype="fp16"), p)
    qk = c.standard.traffic.kernels[0]
    t = kernel_time(qk, p, "fp16")
    # the A100's published dense BF16 matmul rate (MAMF, FP16 by the same-units rule): 271.2 TFLOP/s
    assert t.terms["matmul"] == pytest.approx(qk.matmul_flops / 271.2e12)


def test_exp_bound_when_the_sfu_is_the_slowest_unit():
    p = load_profile("a100")
    w = Workload(n=4096, d=16, dtype="fp16", batch=8, heads=16)
    (k,) = compare(w, p, impl="paper", block_q=128, block_kv=128).tiled.timing.kernels
    # d = 16: 4·N²·d matmul FLOPs = 64 FLOP per score at 271.2 TFLOP/s (0.25 ps) vs ~1 exp per
    # score at 2.44 T/s (0.41 ps): the exponentials dominate the compute of the fused loop
    assert k.terms["exp"] > k.terms["matmul"] > k.terms["softmax"]
    assert k.bound == "compute"


def test_latency_bound_for_a_decode_with_few_ctas():
    p = load_profile("h200")
    # one sequence, one K/V head, short cache: 1 split CTA keeps 2·256·64·2 = 64 KiB in flight;
    # at 273 ns latency that is 240 GB/s, far below HBM bandwidth
    c = compare(Workload(n=1, n_kv=4096, d=64, dtype="fp16"), p, splits=1)
    (k,) = c.tiled.timing.kernels
    assert k.bound == "latency"


def test_fa1_runs_one_cta_per_batch_and_head():
    """The paper's FA1 launches a CTA per (batch, head): one head keeps one SM of 108 busy."""
    a100 = load_profile("a100")
    (one,) = compare(Workload(n=4096, d=64, dtype="fp16"), a100, tiled="fa1", impl="paper").tiled.timing.kernels
    # 4·4096²·64 = 4.295 GFLOP of products at 271.2 TFLOP/s, on one SM of 108: × 108
    assert one.terms["matmul"] == pytest.approx(4 * 4096 * 4096 * 64 / 271.2e12 * 108)
    # 216 heads fill two waves exactly: no tail
    (full,) = compare(
        Workload(n=4096, d=64, heads=216, dtype="fp16"), a100, tiled="fa1", impl="paper"
    ).tiled.timing.kernels
    assert full.terms["matmul"] == pytest.approx(216 * 4 * 4096 * 4096 * 64 / 271.2e12)


def test_cudnn_overlaps_its_softmax_with_the_products():
    """cuDNN (FlashAttention-3's design): compute is the larger of the products and the softmax
    work, where FlashAttention-2 adds them."""
    h200 = load_profile("h200")
    w = Workload(n=4096, d=64, batch=4, heads=16, dtype="fp16")
    (k,) = [k for k in compare(w, h200, impl="sdpa-cudnn").tiled.timing.kernels if k.name == "fa2_fwd"]
    t = k.terms
    assert t["compute"] == pytest.approx(max(t["matmul"], t["exp"] + t["softmax"]) + t.get("cta", 0.0))
    (f,) = [k for k in compare(w, h200, impl="sdpa-flash").tiled.timing.kernels if k.name == "fa2_fwd"]
    assert f.terms["compute"] == pytest.approx(
        f.terms["matmul"] + f.terms["exp"] + f.terms["softmax"] + f.terms.get("cta", 0.0)
    )


def test_split_kv_timing_follows_the_kernels_kind_not_its_name():
    """The measured CTA rate (split-KV) and combine cost apply to kernels of that kind, whatever
    they are called."""
    import dataclasses

    from memmodel.implementations import padded_head_dim

    from .conftest import REPO

    profile = load_profile(str(REPO / "validation" / "h200" / "h200-calibrated.yaml"))
    c = compare(Workload(n=1, n_kv=65_536, d=128, heads=32, kv_heads=8, dtype="bf16"), profile, impl="sdpa-flash")
    kernels = {k.kind: k for k in c.tiled.traffic.kernels}
    assert set(kernels) >= {"split_kv", "combine"}
    impl = c.options.model_implementation
    for kind in ("split_kv", "combine"):
        k = kernels[kind]
        renamed = dataclasses.replace(k, name="renamed")
        args = (profile, "bf16", impl, padded_head_dim(impl, 128))
        assert kernel_time(renamed, *args).time_s == kernel_time(k, *args).time_s
        plain = dataclasses.replace(k, kind="")
        assert kernel_time(plain, *args).time_s != kernel_time(k, *args).time_s


def test_largest_term_is_the_tables_max_and_first_argmax():
    # timing._largest takes the max row by row and the index of the first row reaching it:
    # what max(axis=0) and argmax(axis=0) of the stacked table give, ties and nan included
    from memmodel.timing import _largest

    for rows in (
        [np.array([1.0, 5.0, 2.0, 0.0]), 3.0, np.array([4.0, 5.0, 2.0, 0.0])],  # ties: the first wins
        [np.array([1.0, 5.0, 2.0, np.nan]), 3.0, np.array([np.nan, 5.0, 7.0, 1.0])],  # nan: argmax's
        [2.0, 1.0],  # one workload
    ):
        table = np.stack(np.broadcast_arrays(*(np.asarray(r, dtype=np.float64) for r in rows)))
        top, index = _largest(rows)
        assert np.array_equal(top, table.max(axis=0), equal_nan=True)
        assert np.array_equal(index, table.argmax(axis=0))


def test_a_fused_kernel_is_timed_with_its_implementations_figures():
    """kernel_time takes an implementation's efficiency, CTA overhead and diagonal cost from the
    profile's figures object of that implementation (Profile.implementation) and nothing else."""
    h200 = load_profile("h200")
    w = Workload(n=4096, d=128, heads=16, batch=4, dtype="fp16", causal=True)

    def fwd(**figures):
        p = h200.with_implementation_figures("sdpa-flash", **figures)
        c = compare(w, p, impl="sdpa-flash", clocks="boost")
        return next(k for k in c.tiled.timing.kernels if k.name == "fa2_fwd")

    bare = fwd(efficiency=(), masked_block_cost=(), cta_overhead_s=())
    half = fwd(efficiency=((128, 0.5),), masked_block_cost=(), cta_overhead_s=())
    assert "cta" not in bare.terms
    # efficiency 0.5 at d = 128: every compute term twice the instructions' time
    assert half.terms["matmul"] == pytest.approx(2 * bare.terms["matmul"])
    with_cta = fwd(efficiency=(), masked_block_cost=(), cta_overhead_s=((128, 1e-6),))
    assert with_cta.terms["cta"] > 0 and with_cta.terms["matmul"] == bare.terms["matmul"]
    # a diagonal block costs 1 + 0.5 plain blocks: more compute than without the figure
    masked = fwd(efficiency=(), masked_block_cost=((128, 0.5),), cta_overhead_s=())
    assert masked.terms["matmul"] > bare.terms["matmul"]
