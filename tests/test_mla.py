"""Multi-head latent attention and a value head dim apart from the key head dim (issue #29, item 4):
d_v in the workload, the traffic and the FLOPs, each kernel's (d, d_v) pairs, --impl auto,
the absorbed decode kernel (FlashInfer's Hopper MLA, --impl flashmla) and PyTorch's math
fallback, the models, the sweep axis, the validation cases and the GPU runner's CPU paths."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memmodel.cases import parse_case
from memmodel.errors import WorkloadError
from memmodel.flops import convention_flops
from memmodel.hardware import load_profile
from memmodel.model import compare
from memmodel.model_shapes import MODELS, load_model
from memmodel.traffic import l2 as l2m
from memmodel.traffic.mla import cluster_tail, flashinfer_plan, kv_len_limit, math_fallback_kernels, mla_rounds
from memmodel.traffic.standard import standard
from memmodel.workload import Workload

H200 = load_profile("h200")


def hbm(traffic, kernel, tensor, direction="read"):
    return sum(
        int(t.bytes)
        for t in traffic.transfers
        if t.kernel == kernel and t.tensor == tensor and t.level == "hbm" and t.direction == direction
    )


def l2_bytes(traffic, tensor, direction="read"):
    return sum(
        int(t.bytes) for t in traffic.transfers if t.tensor == tensor and t.level == "l2" and t.direction == direction
    )


# ---------------------------------------------------------------------------------------
# The workload


def test_d_v_equal_to_d_is_plain_attention():
    w = Workload(n=128, d=64, d_v=64, heads=2)
    assert w.d_v is None and "d_v" not in w.to_dict()
    assert w == Workload(n=128, d=64, heads=2)
    v = Workload(n=128, d=192, d_v=128, heads=2, dtype="bf16")
    assert v.to_dict()["d_v"] == 128
    # V: 1·2·128·128·2 = 65,536 bytes; K: 1·2·128·192·2 = 98,304; O like V, Q like K
    assert (v.v_bytes(), v.kv_bytes(), v.o_bytes(), v.q_bytes()) == (65536, 98304, 65536, 98304)
    with pytest.raises(WorkloadError, match="d_v must be a positive integer"):
        Workload(n=128, d=64, d_v=0)


def test_convention_flops_with_d_v():
    w = Workload(n=4, d=192, d_v=128)
    f = convention_flops(w, backward=True)
    # forward 2·4·4·(192 + 128) = 10,240; backward 2·4·4·(3·192 + 2·128) = 26,624
    assert (f["forward"], f["backward"]) == (10240, 26624)
    c = convention_flops(w.with_(causal=True), backward=True)
    assert (c["forward"], c["backward"]) == (5120, 13312)
    # d_v = d: the FlashAttention convention exactly (4·N·N_kv·d, backward 2.5 ×)
    same = convention_flops(Workload(n=4, d=128, d_v=128), backward=True)
    assert (same["forward"], same["backward"]) == (4 * 4 * 4 * 128, 4 * 4 * 4 * 128 * 5 // 2)


# ---------------------------------------------------------------------------------------
# Standard and tiled traffic


def test_standard_attention_reads_v_and_writes_o_at_d_v():
    w = Workload(n=256, d=192, d_v=128, heads=2, dtype="fp16")
    t = standard(w, l2m.L2("off", 0.0, 1), backward=True)
    # V: 1·2·256·128·2 = 131,072 bytes; O and dO the same; K and Q at 192: 196,608
    assert hbm(t, "pv", "V") == 131072 and hbm(t, "pv", "O", "write") == 131072
    assert hbm(t, "dp", "dO") == 131072 and hbm(t, "dv", "dV", "write") == 131072
    assert hbm(t, "qk", "K") == 196608 and hbm(t, "dq", "dQ", "write") == 196608
    pv = next(k for k in t.kernels if k.name == "pv")
    qk = next(k for k in t.kernels if k.name == "qk")
    # 2·(2·256·256)·128 = 33,554,432 FLOPs for O = PV; 2·(2·256·256)·192 for S = QKᵀ
    assert (int(pv.matmul_flops), int(qk.matmul_flops)) == (33554432, 50331648)


@settings(max_examples=25, deadline=None)
@given(
    n=st.sampled_from([256, 1000, 2048]),
    batch=st.integers(1, 4),
    heads=st.sampled_from([4, 8, 16]),
    causal=st.booleans(),
    dv=st.sampled_from([64, 128]),
)
def test_cudnn_reads_v_at_d_v_over_d_of_k(n, batch, heads, causal, dv):
    """cuDNN's forward with d 192: V's requests and HBM reads are K's scaled by d_v / 192 (one
    miss share for both), O is B·H·N·d_v·e, and K's counts are those of the same d without d_v."""
    w = Workload(n=n, d=192, d_v=dv, batch=batch, heads=heads, dtype="bf16", causal=causal)
    c = compare(w, H200, impl="sdpa-cudnn")
    t = c.tiled.traffic
    k, v = l2_bytes(t, "K"), l2_bytes(t, "V")
    assert v == k * dv // 192
    assert hbm(t, "fa2_fwd", "V") == hbm(t, "fa2_fwd", "K") * dv // 192
    assert hbm(t, "fa2_fwd", "O", "write") == batch * heads * n * dv * 2
    assert l2_bytes(t, "Q") == batch * heads * n * 192 * 2


def test_cudnn_training_step_counts_do_and_dv_at_d_v():
    w = Workload(n=2048, d=192, d_v=128, batch=1, heads=8, dtype="bf16")
    t = compare(w, H200, impl="sdpa-cudnn", backward=True).tiled.traffic
    # O, dO read by the preprocess: 1·8·2048·128·2 = 4,194,304 each; dV written at d_v
    assert hbm(t, "cudnn_bwd_pre", "O") == 4194304 and hbm(t, "cudnn_bwd_pre", "dO") == 4194304
    assert hbm(t, "cudnn_bwd", "dV", "write") == 4194304
    assert hbm(t, "cudnn_bwd", "dK", "write") == 8 * 2048 * 192 * 2
    main = next(k for k in t.kernels if k.name == "cudnn_bwd")
    # five products at 2·scores·(3·192 + 2·128) over whole 128 × 128 tiles: 8·16·16·128·128 scores
    assert int(main.matmul_flops) == 2 * 8 * 16 * 16 * 128 * 128 * (3 * 192 + 2 * 128)


def test_nothing_moves_where_d_v_is_d():
    base = compare(Workload(n=4096, d=128, batch=2, heads=16, dtype="bf16", causal=True), H200, backward=True)
    same = compare(Workload(n=4096, d=128, d_v=128, batch=2, heads=16, dtype="bf16", causal=True), H200, backward=True)
    assert base.tiled.traffic.transfers == same.tiled.traffic.transfers
    assert base.tiled.timing.time_s == same.tiled.timing.time_s


# ---------------------------------------------------------------------------------------
# Which kernels take d_v, and --impl auto


@pytest.mark.parametrize(
    "impl, words",
    [
        ("sdpa-flash", "check_head_dim_size_flash"),
        ("triton", "memmodel's Triton kernel takes one head dim"),
        ("fa4", "FA4's (192, 128) DeepSeek kernel is not modelled"),
    ],
)
def test_kernels_that_take_one_head_dim_are_refused_in_one_line(run, impl, words):
    gpu = "b200" if impl == "fa4" else "h200"
    r = run("compare", "--n", "4096", "--d", "192", "--d-v", "128", "--dtype", "bf16", "--gpu", gpu, "--impl", impl)
    assert r.exit_code == 2
    assert len(r.stderr.strip().splitlines()) == 1 and words in r.stderr


def test_fa3_takes_192_128_only(run):
    ok = run(
        "compare", "--n", "4096", "--d", "192", "--d-v", "128", "--dtype", "bf16", "--gpu", "h200", "--impl", "fa3"
    )
    assert ok.exit_code == 0, ok.stderr
    bad = run(
        "compare", "--n", "4096", "--d", "128", "--d-v", "64", "--dtype", "bf16", "--gpu", "h200", "--impl", "fa3"
    )
    assert bad.exit_code == 2 and "built for (192, 128)" in bad.stderr


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--tiled", "fa1", "--impl", "paper"], "--tiled fa1 with --d-v"),
        (["--context-parallel", "2"], "--d-v with --context-parallel is not modelled"),
        (["--impl", "flashmla"], "flashmla runs MLA's absorbed decode only"),
    ],
)
def test_combinations_not_modelled_get_one_line(run, extra, words):
    r = run("compare", "--n", "4096", "--d", "192", "--d-v", "128", "--dtype", "bf16", "--gpu", "h200", *extra)
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1 and words in r.stderr, r.stderr


def test_auto_follows_pytorchs_rules_for_d_v():
    from memmodel.options import options_for

    def auto(gpu, **kw):
        return options_for("auto", Workload(**kw), load_profile(gpu)).implementation

    assert auto("h200", n=4096, d=192, d_v=128, heads=16, dtype="bf16") == "sdpa-cudnn"  # measured on an H200
    assert auto("h200", n=4096, d=128, d_v=64, heads=16, dtype="fp32") == "sdpa-efficient"  # no cuDNN at fp32
    assert auto("a100", n=4096, d=128, d_v=64, heads=16, dtype="fp16") == "sdpa-efficient"  # no flash at d ≠ d_v
    # past 128 the efficient kernel accumulates O in global memory (not modelled): the paper's algorithm
    assert auto("a100", n=4096, d=192, d_v=128, heads=16, dtype="bf16") == "paper"
    # the absorbed MLA decode shape: GQA (no efficient kernel), d 576 (no cuDNN): the math path
    assert auto("h200", n=1, n_kv=4096, d=576, d_v=512, heads=16, kv_heads=1, dtype="bf16") == "sdpa-math"


def test_auto_on_the_absorbed_shape_warns_of_the_math_fallback(run):
    r = run(
        "compare", "--n", "1", "--n-kv", "4096", "--d", "576", "--d-v", "512", "--heads", "16", "--kv-heads", "1",
        "--batch", "64", "--dtype", "bf16", "--gpu", "h200", "--format", "json",
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert any("falls back to its math path" in w for w in data["warnings"])
    tiled = data["algorithms"][1]
    assert tiled["variant"] == "math"
    names = [k["name"] for k in tiled["kernels"]]
    assert names == [
        "cast_q", "cast_k", "cast_v", "scale_q", "expand_k", "expand_v", "scale_k", "qk", "softmax", "pv",
        "cast_o", "cast_p",
    ]  # fmt: skip
    mla = run(
        "compare", "--n", "1", "--n-kv", "4096", "--d", "576", "--d-v", "512", "--heads", "16", "--kv-heads", "1",
        "--batch", "64", "--dtype", "bf16", "--gpu", "h200", "--impl", "flashmla", "--format", "json",
    )  # fmt: skip
    assert mla.exit_code == 0, mla.stderr
    fast = json.loads(mla.stdout)["algorithms"][1]["predicted_time_s"]
    assert tiled["predicted_time_s"] > 50 * fast  # the math path: K/V copied to 16 heads in fp32


# ---------------------------------------------------------------------------------------
# The absorbed decode kernel and the math path


def test_flashinfer_plan_as_mlaplan_computes_it():
    # 16 heads, one token: 16 rows, a cluster of one CTA, 132 clusters on an H200; the work is
    # 64 · 4096 = 262,144 keys, 1,986 a cluster, rounded up to 2,048: each request split in two
    p = flashinfer_plan(64, 16, 1, 4096, 132)
    assert (p["cluster"], p["clusters"], p["tiles"], p["kv_len_limit"], p["chunks"]) == (1, 132, 1, 2048, 2)
    # 128 heads: two CTAs a cluster, 66 clusters, 3,972 keys a cluster → 4,096: not split
    q = flashinfer_plan(64, 128, 1, 4096, 132)
    assert (q["cluster"], q["clusters"], q["kv_len_limit"], q["chunks"]) == (2, 66, 4096, 1)
    assert [kv_len_limit(x) for x in (1, 8, 9, 16, 17, 32, 33, 64, 65, 256, 257)] == [
        32, 32, 64, 64, 128, 128, 192, 192, 256, 256, 512,
    ]  # fmt: skip
    # a 32-key chunk computes a whole 64-token tile: 1,000 keys in 32-key chunks → 32 chunks, 31 · 64 + 64
    r = flashinfer_plan(1, 16, 1, 1000, 132)
    assert (r["kv_len_limit"], r["chunks"], r["executed_tokens"]) == (32, 32, 32 * 64)


def test_flashmla_partials_of_a_later_round_reach_hbm():
    # 100 requests of 1,000 keys, 16 heads: 100,000 keys over 132 clusters, 758 each → 768: two
    # chunks a request, 200 work items, two rounds. The first round's partials see the second
    # round's K/V pass: 100 · 1,000 · 576 · 2 · (2 − 1) / 2 = 57.6 MB, past the 30 MiB L2
    w = Workload(n=1, n_kv=1000, d=576, d_v=512, batch=100, heads=16, kv_heads=1, dtype="bf16")
    p = flashinfer_plan(100, 16, 1, 1000, 132)
    assert (p["kv_len_limit"], p["chunks"], mla_rounds(100, p)) == (768, 2, 2)
    t = compare(w, H200, impl="flashmla").tiled.traffic
    assert hbm(t, "flashinfer_mla", "O_partial", "write") == 100 * 16 * 2 * 512 * 2
    assert hbm(t, "flashinfer_mla", "O_partial", "read") == 100 * 16 * 2 * 512 * 2


def test_flashmla_lasts_as_long_as_its_busiest_cluster():
    # 100 requests of 1,000 keys on 132 one-CTA clusters: chunks of 768 and 232 keys (cost 2 · 64
    # + keys: 896 and 360). The first 66 requests fill every cluster once, alternately; the next 33
    # put a 768 and a 232 on the 66 clusters at 360; the last request's 768 goes to a cluster at
    # 720 (232 + 232): 256 + 256 + 768 = 1,280 tokens of whole 64-token tiles, against a mean of
    # 100 · (768 + 256) / 132 = 775.76: 1.65
    assert cluster_tail(100, 1000, 768, 132, 64) == pytest.approx(1280 / (100 * 1024 / 132))
    # one request of 24,576 keys in 48 chunks of 512 on 66 clusters: 18 clusters idle, the busiest
    # one chunk against a mean of 48 · 512 / 66
    assert cluster_tail(1, 24576, 512, 66, 128) == pytest.approx(512 / (48 * 512 / 66))
    # every cluster one equal chunk: no tail
    assert cluster_tail(132, 1024, 1024, 132, 64) == 1.0
    # past MAX_WORKS items the plan is not replayed
    assert cluster_tail(20000, 1000, 768, 132, 64) == 1.0
    # the kernel carries it and its compute terms take it: 1.65 times the even split's
    from memmodel.timing import kernel_time

    w = Workload(n=1, n_kv=1000, d=576, d_v=512, batch=100, heads=16, kv_heads=1, dtype="bf16")
    c = compare(w, H200, impl="flashmla").tiled
    kernel, timed = c.traffic.kernels[0], c.timing.kernels[0]
    assert kernel.tail == pytest.approx(1280 / (100 * 1024 / 132))
    even = kernel_time(kernel, H200, "bf16", "flashmla", 576)
    assert timed.terms["matmul"] == pytest.approx(kernel.tail * even.terms["matmul"])


def test_flashmla_reads_the_latent_cache_once():
    w = Workload(n=1, n_kv=4096, d=576, d_v=512, batch=64, heads=16, kv_heads=1, dtype="bf16")
    t = compare(w, H200, impl="flashmla").tiled.traffic
    assert [k.name for k in t.kernels] == ["flashinfer_mla"]
    # the cache: 64 · 4096 · 576 · 2 = 301,989,888 bytes from HBM, no V of its own
    assert hbm(t, "flashinfer_mla", "KV") == 301989888
    assert not any(x.tensor == "V" for x in t.transfers)
    # two chunks a request: partial O 64·16·2·512·2 = 2,097,152 bytes, the logsumexp 64·16·2·4,
    # written as the launch ends (64 · 2 = 128 work items on 132 clusters: one round) and read
    # back by the merge from the L2: none reaches HBM
    assert l2_bytes(t, "O_partial", "write") == 2097152
    assert l2_bytes(t, "lse_partial", "write") == 8192
    assert hbm(t, "flashinfer_mla", "O_partial", "write") == 0
    assert hbm(t, "flashinfer_mla", "O_partial", "read") == 0
    # O written once (by the merge): 64·16·512·2
    assert hbm(t, "flashinfer_mla", "O", "write") == 1048576
    # page table: 64 requests · 64 pages · 4 bytes
    assert hbm(t, "flashinfer_mla", "page_table") == 16384
    ref = compare(w, H200, impl="flashmla").bounds
    # compulsory: Q 64·16·576·2 + the cache + O (V is part of the cache)
    assert ref["compulsory_bytes"] == 1179648 + 301989888 + 1048576


def test_flashmla_is_refused_for_training_and_off_hopper(run):
    args = ["compare", "--model", "deepseek-v3", "--n", "1", "--n-kv", "4096", "--dtype", "bf16", "--impl", "flashmla"]
    r = run(*args, "--gpu", "h200", "--backward")
    assert r.exit_code == 2 and "modelled forward only" in r.stderr
    r = run(*args, "--gpu", "a100")
    assert r.exit_code == 2 and "compute capability" in r.stderr


def test_math_fallback_kernels_pinned():
    w = Workload(n=1, n_kv=4096, d=576, d_v=512, batch=64, heads=16, kv_heads=1, dtype="bf16")
    ks = {k.name: k for k in math_fallback_kernels(w, l2m.L2("off", 0.0, 1))}
    written = lambda k, t: sum(
        int(x.bytes) for x in ks[k].transfers if x.tensor == t and x.level == "hbm" and x.direction == "write"
    )  # noqa: E731
    # K copied to 16 heads in fp32: 64·16·4096·576·4 = 9,663,676,416 bytes; V: 64·16·4096·512·4
    assert written("expand_k", "K") == 9663676416 and written("expand_v", "V") == 8589934592
    # the casts: K 64·4096·576 elements to fp32
    assert written("cast_k", "K") == 64 * 4096 * 576 * 4
    assert int(ks["qk"].matmul_flops) == 2 * 64 * 16 * 4096 * 576
    assert int(ks["pv"].matmul_flops) == 2 * 64 * 16 * 4096 * 512
    # fp32 inputs: no casts; MHA: no copies
    plain = [k.name for k in math_fallback_kernels(Workload(n=64, d=64, heads=2), l2m.L2("off", 0.0, 1))]
    assert plain == ["scale_q", "scale_k", "qk", "softmax", "pv"]


# ---------------------------------------------------------------------------------------
# Models


@pytest.mark.parametrize("name, heads, layers", [
    ("deepseek-v3", 128, 61), ("deepseek-r1", 128, 61), ("deepseek-v2", 128, 60),
    ("deepseek-v2-lite", 16, 27), ("kimi-k2", 64, 61),
])  # fmt: skip
def test_mla_models_take_their_two_forms(name, heads, layers):
    m = MODELS[name]
    assert (m.heads, m.layers) == (heads, layers)
    pre = m.attention(4096)
    assert (pre.heads, pre.kv_heads, pre.d, pre.d_v, pre.form) == (heads, heads, 192, 128, "mla-prefill")
    dec = m.attention(1, 32768)
    assert (dec.heads, dec.kv_heads, dec.d, dec.d_v, dec.form) == (heads, 1, 576, 512, "mla-absorbed")
    assert m.kv_cache_bytes_per_token(2) == 1152  # (512 + 64) · 2
    with pytest.raises(WorkloadError, match="give decoding and prefill shapes apart"):
        m.attention([1, 4096], [4096])


def test_other_models_cache_k_and_v_of_each_kv_head():
    m = load_model("llama-3-8b")
    assert m.kv_cache_bytes_per_token(2) == 2 * 8 * 128 * 2
    assert m.attention(1, 4096).d_v is None


def test_compare_says_which_form_and_the_cache(run):
    r = run("compare", "--model", "deepseek-v2-lite", "--n", "1", "--n-kv", "8192", "--dtype", "bf16", "--gpu", "h200")
    assert r.exit_code == 0, r.stderr
    assert "decoding in the absorbed form" in r.stderr
    assert "K/V cache 1.2 kB a token a layer" in r.stderr  # 1152 B, 27 layers: 31.1 kB
    assert "31.1 kB a token over its 27 layers" in r.stderr


# ---------------------------------------------------------------------------------------
# Sweep, roofline, validation cases


def test_sweep_takes_d_v_as_an_axis_and_rows_equal_compare(run):
    r = run(
        "sweep", "--n", "2048", "--d", "192", "--d-v", "64,128", "--heads", "8", "--dtype", "bf16", "--gpu", "h200",
        "--format", "csv",
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    tiled = [x for x in rows if x["algorithm"] == "tiled"]
    assert [x["d_v"] for x in tiled] == ["64", "128"]
    for x in tiled:
        c = compare(Workload(n=2048, d=192, d_v=int(x["d_v"]), heads=8, dtype="bf16"), H200)
        assert int(x["hbm_bytes"]) == int(c.tiled.traffic.hbm_bytes)
    plain = run("sweep", "--n", "2048", "--d", "64", "--format", "csv")
    assert {x["d_v"] for x in csv.DictReader(io.StringIO(plain.stdout))} == {"64"}  # V's head dim: d


def test_roofline_takes_d_v(run):
    r = run(
        "roofline", "--n", "4096", "--d", "192", "--d-v", "128", "--dtype", "bf16", "--gpu", "h200", "--format", "json"
    )
    assert r.exit_code == 0, r.stderr


def test_cases_take_d_v_and_the_mla_kernels():
    c = parse_case("impl=sdpa-efficient,batch=4,heads=16,n=4096,d=128,d_v=64,dtype=fp16")
    assert c.id == "sdpa-efficient/b4h16n4096d128dv64/fp16" and parse_case(c.spec()) == c
    assert c.to_dict()["d_v"] == 64 and "d_v" not in parse_case("n=64,d=64").to_dict()
    m = parse_case("impl=flashmla,model=deepseek-v3,n=1,n_kv=4096,batch=2,dtype=bf16")
    assert (m.heads, m.kv_heads, m.d, m.d_v) == (128, 1, 576, 512) and m.v_in_k
    # the cache read once: Q 2·128·576·2 + K 2·4096·576·2 + O 2·128·512·2 (no V of its own)
    assert m.input_bytes() == 294912 + 9437184 + 262144
    with pytest.raises(WorkloadError, match="V's head dim apart from Q's runs with impl"):
        parse_case("impl=sdpa-flash,n=64,d=192,d_v=128")
    with pytest.raises(WorkloadError, match="forward only"):
        parse_case("impl=flashmla,model=deepseek-v3,n=1,n_kv=64,backward=1,dtype=bf16")
    with pytest.raises(WorkloadError, match="the absorbed MLA decode shape"):
        parse_case("impl=flashmla,n=1,n_kv=64,d=192,d_v=128,dtype=bf16")


def test_the_mla_check_has_its_cases_and_each_predicts():
    from pathlib import Path

    from memmodel.scoring import prediction_line

    lines = [x.strip() for x in Path("validation/cases/h200-mla-check.txt").read_text().splitlines()]
    cases = [parse_case(x) for x in lines if x and not x.startswith("#")]
    assert len(cases) >= 12
    assert {c.impl for c in cases} == {"sdpa-cudnn", "sdpa-efficient", "standard", "flashmla", "sdpa-math"}
    assert sum(c.impl == "sdpa-math" for c in cases) >= 2 and any(c.backward for c in cases)
    for c in cases:
        assert prediction_line(c, H200).startswith(c.id)


# ---------------------------------------------------------------------------------------
# The GPU runner's paths that run on the CPU


def test_page_table_scatters_every_page_once():
    from memmodel.gpu.mla import page_table

    t = page_table(3, 200, seed=1)
    # ⌈200 / 64⌉ = 4 pages a request, 12 in all
    assert t["pages"] == 12 and t["kv_indptr"] == [0, 4, 8, 12] and t["kv_len"] == [200] * 3
    assert sorted(t["kv_indices"]) == list(range(12)) and t["kv_indices"] != list(range(12))


def test_gather_request_reads_pages_in_token_order():
    torch = pytest.importorskip("torch")
    from memmodel.gpu.mla import gather_request

    pool = torch.arange(4 * 2 * 3, dtype=torch.float32).reshape(4, 2, 3)  # 4 pages of 2 tokens
    rows = gather_request(torch, pool, [2, 0], 3)
    assert rows.tolist() == [[12, 13, 14], [15, 16, 17], [0, 1, 2]]


def test_flashinfer_missing_is_one_clear_line(monkeypatch):
    import builtins

    from memmodel.errors import RuntimeFailure
    from memmodel.gpu.mla import import_flashinfer

    real = builtins.__import__

    def no_flashinfer(name, *args, **kw):
        if name == "flashinfer":
            raise ImportError(name)
        return real(name, *args, **kw)

    monkeypatch.setattr(builtins, "__import__", no_flashinfer)
    with pytest.raises(RuntimeFailure, match="impl=flashmla needs FlashInfer"):
        import_flashinfer()


@pytest.fixture
def cpu_run(monkeypatch):
    torch = pytest.importorskip("torch")
    from torch.nn.attention import SDPBackend

    from memmodel.gpu import run as gpu_run

    monkeypatch.setattr(gpu_run, "DEVICE", "cpu")
    monkeypatch.setattr(gpu_run, "sdpa_backend", lambda case: SDPBackend.MATH)
    return gpu_run, torch


@pytest.mark.parametrize(
    "spec",
    [
        "impl=standard,batch=1,heads=2,n=64,d=48,d_v=32,dtype=fp32,backward=1",
        "impl=sdpa-cudnn,batch=2,heads=4,n=80,d=48,d_v=16,dtype=fp32,causal=1,backward=1",
        "impl=sdpa-efficient,batch=1,heads=2,n=64,d=32,d_v=64,dtype=fp32,backward=1",
    ],
)
def test_d_v_cases_check_against_float32_on_the_cpu(cpu_run, spec):
    gpu_run, torch = cpu_run
    case = parse_case(spec)
    run = gpu_run.CaseRun(case)
    assert tuple(run.v.shape) == (case.batch, case.kv_heads_, case.n_kv_, case.d_v)
    run.run()
    result = gpu_run.check_run(case, run)
    assert result["rel_error"] < 1e-5 and max(result["grad_errors"].values()) < 1e-5


def test_absorbed_decode_through_the_math_path_on_the_cpu(cpu_run):
    gpu_run, torch = cpu_run
    case = parse_case("impl=sdpa-math,batch=2,heads=4,kv_heads=1,n=1,n_kv=96,d=72,d_v=64,dtype=fp32")
    run = gpu_run.CaseRun(case)
    # V is the first d_v of K's latent rows (one cache), a view
    assert run.v.data_ptr() == run.k.data_ptr() and tuple(run.v.shape) == (2, 1, 96, 64)
    out = run.run()
    assert tuple(out.shape) == (2, 4, 1, 64)
    assert gpu_run.check(case, out, run.q, run.k, run.v) < 1e-5
    # a wrong output is caught
    from memmodel.errors import RuntimeFailure

    with pytest.raises(RuntimeFailure):
        gpu_run.check(case, out * 1.1, run.q, run.k, run.v)


def test_flashmla_runs_only_on_the_gpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("FlashInfer's MLA kernel needs a CUDA GPU")
    pytest.importorskip("flashinfer")
    from memmodel.gpu import run as gpu_run

    case = parse_case("impl=flashmla,model=deepseek-v2-lite,batch=2,n=1,n_kv=1000,dtype=bf16")
    run = gpu_run.CaseRun(case)
    out = run.run()
    assert gpu_run.check(case, out, run.q, run.k, run.v) < 2e-2


def test_sweep_and_model_arrays_agree_on_a_grid():
    w = Workload(
        n=1, n_kv=np.array([1024, 4096]), d=576, d_v=512, batch=np.array([1, 64]), heads=16, kv_heads=1, dtype="bf16"
    )
    grid = compare(w, H200, impl="flashmla")
    for i, (nkv, b) in enumerate(((1024, 1), (4096, 64))):
        one = compare(w.with_(n_kv=nkv, batch=b), H200, impl="flashmla")
        assert int(np.asarray(grid.tiled.traffic.hbm_bytes)[i]) == int(one.tiled.traffic.hbm_bytes)


def test_validate_drops_flashmla_cases_with_one_line_where_flashinfer_is_missing(monkeypatch, capsys):
    from memmodel.cli import validate
    from memmodel.errors import RuntimeFailure
    from memmodel.gpu import mla

    monkeypatch.setattr(mla, "missing", lambda: "impl=flashmla needs FlashInfer")
    cases = [
        parse_case("impl=flashmla,model=deepseek-v2-lite,n=1,n_kv=1024,dtype=bf16"),
        parse_case("impl=sdpa-cudnn,n=1024,d=192,d_v=128,dtype=bf16"),
    ]
    assert [c.impl for c in validate._runnable(cases)] == ["sdpa-cudnn"]
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["memmodel: warning: skipping 1 flashmla case(s): impl=flashmla needs FlashInfer"]
    with pytest.raises(RuntimeFailure, match="no case to run"):
        validate._runnable(cases[:1])
    monkeypatch.setattr(mla, "missing", lambda: None)
    assert validate._runnable(cases) == cases


def test_compare_json_says_which_mla_form(run):
    r = run("compare", "--model", "kimi-k2", "--n", "2048", "--dtype", "bf16", "--gpu", "h200", "--format", "json")
    assert r.exit_code == 0, r.stderr
    cache = json.loads(r.stdout)["kv_cache"]
    assert cache["form"] == "mla-prefill" and cache["bytes_per_token"] == 1152 * 61
    plain = run("compare", "--model", "llama-3-8b", "--n", "2048", "--format", "json")
    assert "kv_cache" not in json.loads(plain.stdout)  # other models' outputs as they were


def test_the_merge_walks_a_split_rows_chunks_at_the_l2_latency():
    # batch 1, 16 heads over 32768 keys: the plan splits the request into 128 chunks of 256 keys;
    # after the grid barrier each row merges them one after another: 128 × 147.6 ns = 18.89 us
    w = Workload(n=1, n_kv=32768, d=576, d_v=512, batch=1, heads=16, kv_heads=1, dtype="bf16")
    (kernel,) = compare(w, H200, impl="flashmla").tiled.timing.kernels
    assert kernel.terms["merge"] == pytest.approx(128 * 147.6e-9)
    # a plan that does not split (one chunk a request) merges nothing
    big = Workload(n=1, n_kv=4096, d=576, d_v=512, batch=64, heads=128, kv_heads=1, dtype="bf16")
    (kernel,) = compare(big, H200, impl="flashmla").tiled.timing.kernels
    assert "merge" not in kernel.terms


def test_the_partials_stay_in_l2_where_they_fit():
    # batch 1, 128 heads over 16384 keys: 32 chunks of partials (8.4 MB) read back by the same
    # launch; they fit in the L2 beside the 18.9 MB cache: HBM sees Q, the cache, the page table
    # and O only: 147,456 + 18,874,368 + 1,024 + 131,072 = 19,153,920 bytes (Nsight Compute
    # measured 19.1 MB read, 1.3 kB written: h200-mla-check-2)
    w = Workload(n=1, n_kv=16384, d=576, d_v=512, batch=1, heads=128, kv_heads=1, dtype="bf16")
    (kernel,) = compare(w, H200, impl="flashmla").tiled.traffic.kernels
    assert int(kernel.bytes(level="hbm")) == 19_153_920
    # without the L2 (the paper's view) the partials go to HBM and back
    (paper,) = compare(w, H200, impl="flashmla", l2="off").tiled.traffic.kernels
    assert int(paper.bytes(level="hbm")) > 19_153_920 + 2 * 8_000_000


def test_flashmla_sweeps_and_each_row_is_its_compare(run):
    # a sweep broadcasts the fixed d, d_v and kv_heads over the grid: the absorbed shape check takes
    # every element; each row's time is compare's for that point (the plan replayed per element)
    out = run(
        "sweep", "--impl", "flashmla", "--model", "deepseek-v3", "--n", "1", "--n-kv", "1000,24576",
        "--batch", "1,100", "--dtype", "bf16", "--gpu", "h200", "--format", "csv",
    )  # fmt: skip
    assert out.exit_code == 0, out.stderr
    rows = list(csv.DictReader(io.StringIO(out.stdout)))
    tiled = [r for r in rows if r["algorithm"] != "standard"]
    assert len(tiled) == 4
    for r in tiled:
        w = Workload(
            n=1, n_kv=int(r["n_kv"]), d=576, d_v=512, batch=int(r["batch"]), heads=128, kv_heads=1, dtype="bf16"
        )
        assert float(r["predicted_time_s"]) == pytest.approx(compare(w, H200, impl="flashmla").tiled.timing.time_s)
    refused = run(
        "sweep", "--impl", "flashmla", "--heads", "16", "--d", "576", "--d-v", "512", "--kv-heads", "1,2",
        "--n", "1", "--n-kv", "4096", "--dtype", "bf16", "--gpu", "h200",
    )  # fmt: skip
    assert refused.exit_code == 2 and "kv_heads=1/2" in refused.stderr


def test_flashmla_calls_are_timed_with_its_wrappers_own_host_figure():
    # the FlashInfer host probe: the planned MLA wrapper's run costs the host 28.98 us a call on the
    # lent H200 (PyTorch's FlashAttention-2 call, which stood in, 21.25 us): no stand-in note
    w = Workload(n=1, n_kv=4096, d=576, d_v=512, batch=8, heads=128, kv_heads=1, dtype="bf16")
    assert H200.implementation("flashmla").call_host_s == pytest.approx(28.98e-6)
    times = compare(w, H200, impl="flashmla").tiled.times
    assert times.notes == ()
    assert times.of("call") > times.of("kernel") + 28.98e-6 * 0.5


def _page_table_hbm(w: Workload) -> int:
    (k,) = [k for k in compare(w, H200, impl="flashmla").tiled.traffic.kernels if k.name == "flashinfer_mla"]
    return sum(t.bytes for t in k.transfers if t.tensor == "page_table" and t.level == "hbm")


def test_flashmla_takes_the_cache_page_size(run):
    # FlashInfer's MLA wrapper reads its latent cache through a page table of any page size: 32 requests
    # of 4096 tokens, 4-byte entries: 32 · 64 · 4 = 8,192 bytes at pages of 64 (the default, the kernel's
    # tile), 32 · 4096 · 4 = 524,288 at pages of 1 (SGLang's); the time is the same (the kernel walks
    # 64-token tiles whatever the page)
    w = Workload(n=1, n_kv=4096, d=576, d_v=512, batch=32, heads=128, kv_heads=1, dtype="bf16")
    assert _page_table_hbm(w) == _page_table_hbm(w.with_(page_size=64)) == 8_192
    assert _page_table_hbm(w.with_(page_size=1)) == 524_288
    out = run(
        "compare", "--model", "deepseek-v3", "--n", "1", "--n-kv", "4096", "--batch", "32", "--dtype", "bf16",
        "--gpu", "h200", "--impl", "flashmla", "--page-size", "64",
    )  # fmt: skip
    assert out.exit_code == 0, out.stderr
    assert "--impl flashmla at --page-size" not in out.stderr
    small = run(
        "compare", "--model", "deepseek-v3", "--n", "1", "--n-kv", "4096", "--batch", "32", "--dtype", "bf16",
        "--gpu", "h200", "--impl", "flashmla", "--page-size", "1",
    )  # fmt: skip
    assert small.exit_code == 0, small.stderr
    assert "counted at 1 token a page" in small.stderr and "not measured" in small.stderr
