"""The training step: cases, the backward kernels' ledgers, FLOPs conventions, the alignment
of measured kernels, scoring and records, all on the CPU; the GPU code's eager paths and
float32 references on the CPU through torch (fp32); GPU runs skip without CUDA."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memmodel import compare
from memmodel.backward import backward_tile_rule, backward_tiles
from memmodel.cases import Case, parse_case
from memmodel.cli.validate import ncu_trace, recorded_profile
from memmodel.errors import WorkloadError
from memmodel.fileio import read_json, read_text, sibling
from memmodel.flops import convention_flops
from memmodel.gpu.ncu import MeasuredKernel, parse_csv, split_by_marker
from memmodel.gpu.validate import profile_entry, rescore
from memmodel.hardware import load_profile
from memmodel.scoring import (
    KERNEL_PATTERNS,
    align_kernels,
    align_launches,
    kernel_time_errors,
    predicted_kernels,
    predicted_times,
    score_case_detail,
    step_time_error,
    summarize_record,
)
from memmodel.traffic.flash_backward import accumulator_head_dim, cutlass_splits
from memmodel.workload import Workload

from .conftest import HARDWARE, REPO

A100 = load_profile("a100")
H200 = load_profile("h200")
L4 = load_profile("l4")
FINAL = sorted((REPO / "validation" / "h200" / "final").glob("h200-*.json.gz"))
#: records written before cases had the backward and dropout keys
EARLIER = [p for p in FINAL if '"backward"' not in read_text(p)]


def by_name(alg):
    return {k.name: k for k in alg.traffic.kernels}


# ---------------------------------------------------------------------------------------
# Cases


def test_backward_and_dropout_case_keys():
    c = parse_case("impl=sdpa-flash,n=4096,d=64,batch=4,heads=16,causal=1,dropout=0.1,backward=1")
    assert c.backward and c.dropout == 0.1
    assert c.id == "sdpa-flash/b4h16n4096d64/fp16-causal-drop0.1-bwd"
    assert c.spec() == "impl=sdpa-flash,n=4096,d=64,batch=4,heads=16,dtype=fp16,causal=1,dropout=0.1,backward=1"
    assert parse_case(c.spec()) == c
    assert c.to_dict()["backward"] is True and c.to_dict()["dropout"] == 0.1
    assert c.workload().dropout == 0.1
    # the defaults leave ids and specs as they were
    plain = parse_case("impl=standard,n=1024,d=64,backward=0,dropout=0")
    assert plain.id == "standard/b1h1n1024d64/fp16" and "backward" not in plain.spec()
    for bad, msg in [
        ("n=64,d=64,backward=maybe", "is not a flag"),
        ("n=64,d=64,dropout=lots", "dropout='lots' is not a number"),
        ("n=64,d=64,dropout=1.5", "dropout must be in"),
        ("n=64,d=64,grads=1", "accepted are .*dropout, backward"),
    ]:
        with pytest.raises(WorkloadError, match=msg):
            parse_case(bad)


def test_cases_of_earlier_records_load_with_the_defaults():
    assert len(EARLIER) >= 6
    for path in EARLIER:
        for entry in read_json(path)["cases"]:
            fields = entry["case"]
            assert "backward" not in fields and "dropout" not in fields
            case = Case.from_dict(fields)
            assert case.id == fields["id"] and not case.backward and case.dropout == 0.0


#: case files written after the second training set (its shapes were new when it was written)
LATER_THAN_TRAINING_2 = {
    "h200-zero-shot-6.txt",
    "h200-zero-shot-7.txt",
    "h200-window-check.txt",
    "h200-window-check-2.txt",
    "h200-window-ref.txt",
    "h200-varlen-check.txt",
    "h200-varlen-check-2.txt",
    "h200-varlen-ref.txt",
    "h200-flex-bwd-probe.txt",
    "h200-flex-bwd-probe-2.txt",
    "h200-varlen-probe.txt",
    "h200-varlen-probe-2.txt",
    "h200-varlen-probe-3.txt",
}


def test_training_case_files():
    from memmodel.cli.validate import validate_cmd  # noqa: F401 - the command reads these files

    def cases(name):
        text = (REPO / "validation" / "cases" / name).read_text()
        return [
            parse_case(s)
            for line in text.splitlines()
            if not line.startswith("trace ")  # a traced function's line (memmodel.trace_cases)
            for s in line.split("#", 1)[0].split()
        ]

    for name in ("h200-training.txt", "h200-training-2.txt"):
        full = cases(name)
        assert len(full) >= 12 and all(c.backward for c in full)
        assert {c.impl for c in full} == {"sdpa-flash", "sdpa-cudnn", "sdpa-efficient", "standard"}
        assert {c.dtype for c in full} == {"fp16", "bf16"} and {c.d for c in full} == {64, 128}
        assert {c.causal for c in full} == {True, False} and {c.dropout for c in full} == {0.0, 0.1}
        assert any(c.kv_heads_ != c.heads for c in full)
        assert min(c.n for c in full) == 1024 and max(c.n for c in full) == 16384
        assert len({c.id for c in full}) == len(full)
    # the second set's shapes are in no earlier case file (nor, so, in any record)
    shape = lambda c: (c.batch, c.heads, c.kv_heads_, c.n, c.n_kv_, c.d)  # noqa: E731
    earlier = {
        shape(c)
        for f in (REPO / "validation" / "cases").glob("*.txt")
        if f.name != "h200-training-2.txt"
        and not f.name.startswith(("h200x2-", "h200x4-", "h200x8-"))  # validate --gpus cases
        and f.name not in LATER_THAN_TRAINING_2
        for c in cases(f.name)
    }
    second = cases("h200-training-2.txt")
    assert not {shape(c) for c in second} & earlier
    # every fused backend with dropout, and the eager ops past 32-bit offsets
    assert {c.impl for c in second if c.dropout} == {"sdpa-flash", "sdpa-cudnn", "sdpa-efficient", "standard"}
    assert any(c.impl == "standard" and c.batch * c.heads * c.n * c.n_kv_ * 2 > 2**31 for c in second)
    smoke = cases("h200-training-smoke.txt")
    assert {c.impl for c in smoke} == {"sdpa-flash", "sdpa-cudnn", "sdpa-efficient", "standard"}
    assert max(c.n for c in smoke) <= 512 and any(not c.backward and c.dropout for c in smoke)


# ---------------------------------------------------------------------------------------
# Standard attention as eager PyTorch runs it


def test_eager_standard_by_hand():
    # N = 128, d = 64, fp16, one head, causal, dropout 0.1, L2 off: S = 128² · 2 = 32,768 B;
    # Q, K, V, O, dO = 128 · 64 · 2 = 16,384 B; the dropout mask and the causal mask 128² · 1 = 16,384 B
    w = Workload(n=128, d=64, dtype="fp16", causal=True, dropout=0.1)
    s = compare(w, A100, l2="off", backward=True, standard="eager").standard
    assert s.traffic.variant == "eager"
    assert [(k.name, k.pass_) for k in s.traffic.kernels] == [
        ("qk", "forward"),
        ("scale", "forward"),
        ("mask", "forward"),
        ("softmax", "forward"),
        ("dropout", "forward"),
        ("pv", "forward"),
        ("dv", "backward"),
        ("dp", "backward"),
        ("dropout_bwd", "backward"),
        ("softmax_bwd_mul", "backward"),
        ("softmax_bwd", "backward"),
        ("mask_bwd_copy", "backward"),
        ("mask_bwd", "backward"),
        ("scale_bwd", "backward"),
        ("dk", "backward"),
        ("dq", "backward"),
    ]
    per = {k.name: k.bytes(level="hbm") for k in s.traffic.kernels}
    assert per["qk"] == 16_384 * 2 + 32_768  # read Q, K; write S
    assert per["scale"] == per["mask_bwd_copy"] == per["scale_bwd"] == 2 * 32_768  # read, write S
    assert per["mask"] == per["mask_bwd"] == 32_768 + 16_384 + 32_768  # read S and the mask; write S
    assert per["dropout"] == 32_768 + 32_768 + 16_384  # read P; write P' and the mask Z
    assert per["dropout_bwd"] == 32_768 + 16_384 + 32_768  # read dP', Z; write dP
    # _softmax_backward_data is two kernels: T = dP ⊙ P (read dP, P; write T), then the
    # softmax backward proper (read T, P; write dS)
    assert per["softmax_bwd_mul"] == per["softmax_bwd"] == 3 * 32_768
    assert per["dv"] == per["dk"] == per["dq"] == 32_768 + 2 * 16_384
    ops = {k.name: k.op for k in s.traffic.kernels}
    assert ops["softmax_bwd"] == ops["softmax_bwd_mul"] == "softmax_backward"
    assert ops["dropout"] == "dropout" and ops["dq"] == "gemm"
    assert ops["scale"] == ops["scale_bwd"] == "scale" and ops["mask"] == ops["mask_bwd"] == "masked_fill"
    assert ops["mask_bwd_copy"] == "memcpy"  # a contiguous clone: a device-to-device memcpy
    assert all(k.launches == 1 for k in s.traffic.kernels)  # S of 32 kB: 32-bit offsets
    sm = by_name(s)["softmax_bwd"]
    assert (sm.rows, sm.row_length) == (128, 128)
    # forward 4 · 65,536 + 2 · 81,920 = 425,984; backward 6 · 65,536 + 81,920 + 2 · 98,304 +
    # 81,920 = 753,664
    fwd = sum(k.bytes(level="hbm") for k in s.traffic.kernels if k.pass_ == "forward")
    bwd = sum(k.bytes(level="hbm") for k in s.traffic.kernels if k.pass_ == "backward")
    assert (fwd, bwd) == (425_984, 753_664)
    # against Algorithm 0/3: the scale pass (65,536) forward; the softmax gradient's product,
    # the mask gradient's copy and fill and the scale's gradient (98,304 + 65,536 + 81,920 +
    # 65,536 = 311,296) backward
    a0 = compare(w, A100, l2="off", backward=True).standard
    assert a0.traffic.variant == "algorithm0"
    a0_fwd = sum(k.bytes(level="hbm") for k in a0.traffic.kernels if k.pass_ == "forward")
    a0_bwd = sum(k.bytes(level="hbm") for k in a0.traffic.kernels if k.pass_ == "backward")
    assert (fwd - a0_fwd, bwd - a0_bwd) == (65_536, 311_296)
    # 6 products of 2 · 128² · 64 = 2,097,152 FLOPs
    assert s.traffic.matmul_flops == 6 * 2 * 128 * 128 * 64


def test_eager_kernels_take_their_own_library_rates():
    # 4 · 16 heads, N = 2048, d = 128, bf16 on the bundled h200: S = 64 · 2048² · 2 B =
    # 536,870,912 B; the elementwise kernels count every byte they move (L2 level)
    case = parse_case("impl=standard,batch=4,heads=16,n=2048,d=128,dtype=bf16,causal=1,backward=1")
    t = predicted_times(case, H200)["kernels"]
    rates = H200.kernel_rates
    s_bytes = 536_870_912
    launch = H200.launch_overhead_s
    # the scale and its gradient: read S, write S at the measured multiply-by-a-scalar rate
    assert t["scale"] == pytest.approx(2 * s_bytes / rates.scale_bytes_per_s + launch)
    assert t["scale_bwd"] == t["scale"]
    assert t["mask_bwd_copy"] == pytest.approx(2 * s_bytes / rates.copy_bytes_per_s + launch)
    # both masked fills at the masked_fill_ rate (they also read the mask)
    assert t["mask_bwd"] == pytest.approx(t["mask"])
    assert t["mask"] > 2 * s_bytes / rates.elementwise_bytes_per_s
    # the softmax gradient's two kernels, 3 S each, share the op's time (3 S at its rate)
    op = 3 * s_bytes / rates.softmax_backward_rate(2048)
    assert t["softmax_bwd_mul"] + t["softmax_bwd"] == pytest.approx(op + 2 * launch)
    # an S past 32-bit offsets: each launch of a split kernel pays the launch overhead
    big = parse_case("impl=standard,batch=4,heads=32,kv_heads=8,n=4096,d=128,dtype=bf16,causal=1,backward=1")
    tb = predicted_times(big, H200)["kernels"]
    assert tb["scale"] == pytest.approx(2 * 8 * s_bytes / rates.scale_bytes_per_s + 2 * launch)


def test_eager_gqa_stacks_the_group_and_repeats_the_mask():
    # 4 query heads on 2 K/V heads, N = 256, d = 64, fp16: the mask is one (2 · 256) × 256 bool
    # tensor = 131,072 B, read by each of the 2 K/V heads (L2 off: both reads reach HBM)
    w = Workload(n=256, d=64, heads=4, kv_heads=2, dtype="fp16", causal=True)
    s = by_name(compare(w, A100, l2="off", backward=True, standard="eager").standard)
    assert s["mask"].bytes(level="hbm", tensor="mask") == 2 * 2 * 256 * 256
    assert s["dk"].bytes(level="hbm", tensor="dK", direction="write") == 2 * 256 * 64 * 2  # per K/V head
    assert "dk_group_sum" not in s


def test_compare_cli_standard_variant_and_passes(run):
    args = ["compare", "--n", "1024", "--d", "64", "--dtype", "fp16", "--causal", "--backward"]
    r = run(*args, "--standard", "eager", "--format", "json")
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    std, til = data["algorithms"]
    assert std["variant"] == "eager" and "softmax_bwd" in std["passes"]["backward"]["kernels"]
    for alg in (std, til):
        assert set(alg["passes"]) == {"forward", "backward"}
        assert alg["flops_executed"] == alg["flops"]
        total = alg["passes"]["forward"]["hbm_bytes"] + alg["passes"]["backward"]["hbm_bytes"]
        assert total == alg["hbm_bytes"]
        assert sum(p["predicted_time_s"] for p in alg["passes"].values()) == pytest.approx(alg["predicted_time_s"])
        # 4 · 1024² · 64 / 2 (causal) = 134,217,728; backward 2.5 ×: 335,544,320
        assert alg["flops_convention"]["forward"] == alg["passes"]["forward"]["flops_convention"] == 134_217_728
        assert alg["flops_convention"]["backward"] == 335_544_320
    r = run(*args)
    assert r.exit_code == 0 and "By pass" in r.stdout and "backward: FLOPs, convention" in r.stdout
    r = run("compare", "--n", "1024", "--d", "64", "--format", "json")
    assert set(json.loads(r.stdout)["algorithms"][0]["passes"]) == {"forward"}
    r = run(*args, "--standard", "nope")
    assert r.exit_code == 2


# ---------------------------------------------------------------------------------------
# Fused backward kernels


def test_backward_tile_rules():
    # FlashAttention-2's launch template, by head dim and shared memory a block may use
    assert backward_tile_rule("sdpa-flash", 64, profile=H200) == (128, 128)
    assert backward_tile_rule("sdpa-flash", 64, profile=L4) == (64, 128)  # 99 KiB a block
    assert backward_tile_rule("sdpa-flash", 80, profile=H200) == (64, 128)  # runs at d = 96
    assert backward_tile_rule("sdpa-flash", 128, profile=A100) == (64, 128)
    assert backward_tile_rule("sdpa-flash", 128, profile=L4) == (64, 64)
    assert backward_tile_rule("sdpa-flash", 256, profile=H200) == (64, 64)
    assert backward_tile_rule("sdpa-flash", 256, profile=L4) == (64, 32)
    assert backward_tile_rule("sdpa-flash", 256, profile=L4, dropout=0.1) == (64, 64)
    # CUTLASS (dispatch_cutlassB_f16_sm80: the first kernel whose kMaxK, dropout and shared
    # memory pass): 64 × 64 up to d = 64, as the H200 record's kernel name says
    assert backward_tile_rule("sdpa-efficient", 64, profile=H200) == (64, 64)
    assert backward_tile_rule("sdpa-efficient", 64, profile=H200, dropout=0.1) == (64, 64)
    assert backward_tile_rule("sdpa-efficient", 128, profile=H200) == (128, 128)
    assert backward_tile_rule("sdpa-efficient", 128, profile=H200, dropout=0.1) == (128, 128)
    assert backward_tile_rule("sdpa-efficient", 128, profile=L4) == (64, 64)  # k128 without preload
    assert backward_tile_rule("sdpa-efficient", 96, profile=L4, dropout=0.1) == (64, 64)  # runs at 128
    assert backward_tile_rule("sdpa-efficient", 160, profile=H200) == (128, 64)  # k65536
    # cuDNN: 128 K/V rows per CTA (its L2 traffic on the smoke run)
    assert backward_tile_rule("sdpa-cudnn", 64, profile=H200) == (64, 128)
    grid = backward_tiles("sdpa-flash", Workload(n=1024, d=np.array([64, 128, 256]), dtype="fp16"), H200)
    assert list(grid.block_q) == [128, 64, 64] and list(grid.block_kv) == [128, 128, 64]
    assert accumulator_head_dim(80) == 96 and accumulator_head_dim(160) == 192
    assert list(accumulator_head_dim(np.array([64, 80, 200]))) == [64, 96, 256]


def test_fa2_backward_gqa_by_hand():
    # 4 query heads on 2 K/V heads, N = 256, d = 64, fp16, A100: backward tiles 128 × 128, T_c = 2.
    # Q, dO = 4 · 256 · 64 · 2 = 131,072 B; K, V = 2 · 256 · 64 · 2 = 65,536 B; dK, dV per query
    # head = 131,072 B each; lse, D = 4 · 256 · 4 = 4,096 B; dQ accumulator 4 · 256 · 64 · 4 = 262,144 B
    w = Workload(n=256, d=64, heads=4, kv_heads=2, dtype="fp16")
    t = compare(w, A100, impl="sdpa-flash", l2="cold", backward=True).tiled
    k = by_name(t)
    assert list(k) == ["fa2_fwd", "fa2_bwd_pre", "fa2_bwd", "fa2_bwd_dq", "dk_group_sum", "dv_group_sum"]
    assert k["fa2_bwd_pre"].bytes(level="hbm") == 2 * 131_072 + 4_096 + 262_144  # O, dO; D; zeroed accumulator
    main = k["fa2_bwd"]
    assert main.bytes(level="l2", tensor="K") == 131_072  # each query head's CTAs request its K/V head
    assert main.bytes(level="hbm", tensor="K") == 65_536  # the group's heads share it in L2
    assert main.bytes(level="l2", tensor="Q") == 2 * 131_072  # once per K/V block
    assert main.bytes(level="hbm", tensor="Q") == 131_072
    assert main.bytes(level="hbm", tensor="dK", direction="write") == 131_072  # per query head
    assert main.overlap == "serial-compute" and main.pass_ == "backward"
    for name in ("dk_group_sum", "dv_group_sum"):
        assert k[name].bytes(level="hbm") == 131_072 + 65_536  # read per query head, write per K/V head
        assert k[name].op == "reduction"
    assert k["fa2_bwd_dq"].bytes(level="hbm") == 262_144 + 131_072
    # L2 off (the paper's view): every request reaches HBM
    off = by_name(compare(w, A100, impl="sdpa-flash", l2="off", backward=True).tiled)["fa2_bwd"]
    assert off.bytes(level="hbm", tensor="K") == 131_072 and off.bytes(level="hbm", tensor="Q") == 2 * 131_072


def test_causal_fa2_backward_q_side_by_hand():
    # one head of 65,536 × 128, fp16, causal, on the bundled h200 (132 SMs, one backward CTA per
    # SM: C = 132; 60 MiB L2, reuse curve 0.44 at 500 ‰, 1.0 at 750 ‰). Tiles 64 × 128: T_r =
    # 1024, T_c = 512, r = 2, W(j) = 1024 − 2j. A step reads Q_i, dO_i (64·128·2 each), lse_i,
    # D_i (64·4 each) and the fp32 dQ_i tile (64·128·4): 66,048 B. Leaders j = 132, 264, 396
    # walk 760, 496, 232 blocks after gaps W(131) = 762, W(263) = 498, W(395) = 234 steps.
    # Footprints: behind lockstep group 0, 762 blocks = 48.0 MiB (800 ‰: miss 1); behind chain
    # group 1, 498 + 2·131 = 760 blocks = 47.9 MiB (miss 1); behind lockstep group 2, 234
    # blocks = 14.7 MiB (245.6 ‰: miss 0). Share = 1 + (760 + 496)/1024 = 2.2266.
    w = Workload(n=65536, d=128, heads=1, dtype="fp16", causal=True)
    main = by_name(compare(w, H200, impl="sdpa-flash", l2="cold", backward=True).tiled)["fa2_bwd"]
    q = 65536 * 128 * 2
    assert 760 * 66_048 / (60 * 2**20) * 1000 > 750 and 234 * 66_048 / (60 * 2**20) * 1000 < 375
    share = 1 + (760 + 496) / 1024
    assert share == pytest.approx(2.2266, abs=1e-4)
    assert main.bytes(level="hbm", tensor="Q") == round(q * share)
    assert main.bytes(level="hbm", tensor="dQacc", direction="read") == round(65536 * 128 * 4 * share)
    assert main.bytes(level="hbm", tensor="K") == q  # K, V once: each CTA holds its block
    # 16 heads of 16,384 (T_c = 128 ≤ C: every CTA of a head starts within a few steps of the
    # one before it): the Q side once, as Nsight Compute measured (h200-training: −0.1 %)
    many = Workload(n=16384, d=128, heads=16, dtype="bf16", causal=True)
    k = by_name(compare(many, H200, impl="sdpa-flash", l2="cold", backward=True).tiled)["fa2_bwd"]
    assert k.bytes(level="hbm", tensor="Q") == 16 * 16384 * 128 * 2
    # the paper's view (L2 off): every request
    off = by_name(compare(w, H200, impl="sdpa-flash", l2="off", backward=True).tiled)["fa2_bwd"]
    assert off.bytes(level="hbm", tensor="Q") == off.bytes(level="l2", tensor="Q")


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 40).map(lambda k: 4096 * k),
    d=st.sampled_from([64, 128, 256]),
    heads=st.sampled_from([1, 2, 3, 8]),
    impl=st.sampled_from(["sdpa-flash", "sdpa-cudnn"]),
)
def test_causal_backward_q_side_between_unique_and_requested(n, d, heads, impl):
    """The causal backward's Q-side HBM reads lie between once and every request, are exactly
    once where a head's K/V blocks fit in the slots, and a grid gives each row's scalar answer."""
    w = Workload(n=n, d=d, heads=heads, dtype="fp16", causal=True)
    name = "fa2_bwd" if impl == "sdpa-flash" else "cudnn_bwd"
    k = by_name(compare(w, H200, impl=impl, l2="cold", backward=True).tiled)[name]
    unique, requested = heads * n * d * 2, k.bytes(level="l2", tensor="Q")
    got = k.bytes(level="hbm", tensor="Q")
    assert unique <= got <= requested
    t_c = -(-n // backward_tile_rule(impl, d, profile=H200)[1])
    if t_c <= H200.sm_count:  # one CTA per SM
        assert got == unique
    grid = Workload(n=np.array([n, 4096]), d=d, heads=heads, dtype="fp16", causal=True)
    kg = by_name(compare(grid, H200, impl=impl, l2="cold", backward=True).tiled)[name]
    assert int(np.asarray(kg.bytes(level="hbm", tensor="Q"))[0]) == got


def test_cutlass_backward_by_hand():
    # N = 256, d = 64, fp16, one head, A100, L2 off: 64 × 64 tiles (the k64 kernel), T_r = T_c
    # = 4, one key split per K/V block (4). Q, O, dO, K, V = 256 · 64 · 2 = 32,768 B.
    w = Workload(n=256, d=64, dtype="fp16")
    k = by_name(compare(w, A100, impl="sdpa-efficient", l2="off", backward=True).tiled)
    assert list(k) == ["fa2_fwd", "mea_bwd_zero", "mea_bwd"]
    # the dQ workspace: 4 Q blocks × ⌈64/64⌉ = 1 column tile of 64 × 64 fp32 (16,384 B) + 16 B lock each
    assert k["mea_bwd_zero"].bytes(level="hbm") == 4 * (64 * 64 * 4 + 16) == 65_600
    main = k["mea_bwd"]
    assert main.bytes(level="hbm", tensor="O") == 4 * 32_768  # D computed by each of the 4 CTAs
    assert main.bytes(level="hbm", tensor="dO") == (4 + 2 * 4) * 32_768  # for D, then twice per pair
    assert main.bytes(level="hbm", tensor="Q") == 2 * 4 * 32_768  # twice per pair (S, dK)
    assert main.bytes(level="hbm", tensor="K") == (1 + 4) * 32_768  # once for S, then per pair for dQ
    assert main.bytes(level="hbm", tensor="V") == 4 * 32_768  # per pair for dP
    # dQ partials: 16 pairs of 64 × 64 fp32 tiles, each loaded (key splits: the zeroed
    # workspace), stored by all but the last of each Q block (which writes dQ)
    assert main.bytes(level="hbm", tensor="dQacc", direction="read") == 16 * 16_384
    assert main.bytes(level="hbm", tensor="dQacc", direction="write") == (16 - 4) * 16_384
    assert cutlass_splits(w, SimpleNamespace(block_kv=64)) == 4
    many = Workload(n=128, d=64, batch=32, heads=8, dtype="fp16")  # 256 CTAs, N_kv ≤ 2 blocks: one split
    assert cutlass_splits(many, SimpleNamespace(block_kv=64)) == 1
    one = by_name(compare(many, A100, impl="sdpa-efficient", l2="off", backward=True).tiled)
    assert "mea_bwd_zero" not in one
    # one split: the first key block's partials start from zero (no load): 256 heads · 2 Q
    # blocks · 64 rows · 64 · 4 B = 8,388,608 B per key block, loaded and stored for the second
    assert one["mea_bwd"].bytes(level="hbm", tensor="dQacc", direction="read") == 8_388_608
    assert one["mea_bwd"].bytes(level="hbm", tensor="dQacc", direction="write") == 8_388_608


def test_cudnn_backward_sums_gqa_after_the_kernel():
    # probe 9's profiles: the main kernel writes dK, dV per query head, two fmha_reduce_head
    # kernels sum them over the group
    w = Workload(n=256, d=64, heads=4, kv_heads=2, dtype="fp16")
    k = by_name(compare(w, H200, impl="sdpa-cudnn", l2="cold", backward=True).tiled)
    # with the SDPA call's memsets before the forward and the backward kernels
    assert list(k) == [
        "cudnn_zero",
        "fa2_fwd",
        "cudnn_bwd_zero",
        "cudnn_bwd_pre",
        "cudnn_bwd",
        "cudnn_bwd_dq",
        "dk_group_sum",
        "dv_group_sum",
    ]
    # 4 query heads · 256 · 64 · 2 B = 131,072 B written; the sum writes 2 K/V heads' 65,536 B
    assert k["cudnn_bwd"].bytes(level="hbm", tensor="dK", direction="write") == 131_072
    assert k["dk_group_sum"].bytes(level="hbm", tensor="dK", direction="write") == 65_536


def test_cudnn_gqa_backward_reads_kv_half_way_between_once_and_per_query_head():
    # probe 9: 32 query heads of 16384 at d = 128 on 4 K/V heads (G = 8): K read (8 + 1)/2 = 4.5
    # times its 4 · 16384 · 128 · 2 = 16,777,216 B = 75,497,472 B
    w = Workload(n=16384, d=128, heads=32, kv_heads=4, dtype="bf16", causal=True)
    k = by_name(compare(w, H200, impl="sdpa-cudnn", backward=True).tiled)
    assert k["cudnn_bwd"].bytes(level="hbm", tensor="K", direction="read") == 75_497_472


def test_backward_params_and_occupancy_override():
    w = Workload(n=4096, d=128, batch=4, heads=16, dtype="fp16")
    c = compare(w, H200, impl="sdpa-flash", backward=True)
    p = c.tiled.traffic.params
    assert (p["block_q"], p["block_kv"]) == (128, 64)  # the forward's tiles
    assert (p["backward_block_q"], p["backward_block_kv"], p["backward_ctas_per_sm"]) == (64, 128, 1)
    assert p["backward_concurrent_ctas"] == 132
    two = compare(w, H200, impl="sdpa-flash", backward=True, backward_ctas_per_sm=2).tiled.traffic.params
    assert two["backward_concurrent_ctas"] == 264
    paper = compare(w, H200, impl="paper", backward=True).tiled.traffic.params
    assert "backward_block_q" not in paper  # the FA2 paper's backward keeps the forward's blocks


def test_flops_conventions():
    # GPT-2 medium (FlashAttention paper, Figure 2): 64 × 16 heads, N = 1024, d = 64, causal:
    # forward 4 · 64 · 16 · 1024² · 64 / 2 = 137,438,953,472; backward 2.5 × = 343,597,383,680
    w = Workload(n=1024, d=64, batch=64, heads=16, dtype="fp16", causal=True)
    conv = convention_flops(w, backward=True)
    assert conv["forward"] == 137_438_953_472 and conv["backward"] == 343_597_383_680
    assert conv["total"] == 481_036_337_152
    assert convention_flops(w)["backward"] == 0
    grid = convention_flops(Workload(n=np.array([1024, 2048]), d=64, dtype="fp16"), backward=True)
    assert list(grid["forward"]) == [4 * 1024**2 * 64, 4 * 2048**2 * 64]
    # the backward kernel executes five products on every visited 128 × 128 block: 8 · 9 / 2 =
    # 36 of 64 blocks under the causal mask (the convention counts 32): 10 · 64 · 16 · 36 ·
    # 128² · 64 = 386,547,056,640 = 36/32 × the convention's backward
    t = compare(w, A100, backward=True).tiled.traffic
    executed = sum(k.matmul_flops for k in t.kernels if k.pass_ == "backward")
    assert executed == 10 * 64 * 16 * 36 * 128 * 128 * 64 == 386_547_056_640


def test_figure_2_bytes_in_the_docs():
    """The memmodel totals docs/training.md sets beside the FlashAttention paper's Figure 2 (in
    blocks the tool generates), and the published figures it quotes (in backticks and quotes)."""
    w = Workload(n=1024, d=64, batch=64, heads=16, dtype="fp16", causal=True, dropout=0.1)
    paper = compare(w, A100, impl="paper", tiled="fa1", backward=True)
    assert round(paper.standard.traffic.hbm_bytes / 1e7) == 4027  # 40.27 GB (published: 40.3 GB)
    assert round(paper.tiled.traffic.hbm_bytes / 1e7) == 342  # 3.42 GB (published: 4.4 GB)
    assert (paper.tiled.traffic.params["block_q"], paper.tiled.traffic.params["block_kv"]) == (64, 328)
    blocks = compare(w, A100, impl="paper", tiled="fa1", block_q=128, block_kv=128, backward=True)
    assert round(blocks.tiled.traffic.hbm_bytes / 1e7) == 603
    pytorch = compare(w, A100, backward=True, standard="eager")
    assert round(pytorch.standard.traffic.hbm_bytes / 1e7) == 6389  # + 6.44 GB: the softmax gradient's product
    assert round(pytorch.tiled.traffic.hbm_bytes / 1e7) == 288
    text = (REPO / "docs" / "training.md").read_text()
    step = (
        "memmodel sweep --n 1024 --d 64 --heads 16 --batch 64 --dtype fp16 --causal --dropout 0.1 --backward --gpu a100"
    )
    for block in (
        f"<!-- run: {step} --tiled fa1 --impl paper --block-q 64,128 --block-kv 128,328 -->",
        f"<!-- run: {step} --standard algorithm0,eager -->",
    ):
        assert block in text
    for figure in ('`"40.3 GB"`', '`"41.7 ms"`', '`"4.4 GB"`', '`"7.3 ms"`'):  # quoted from Dao et al., 2022, Figure 2
        assert figure in text


workloads = st.builds(
    dict,
    n=st.integers(1, 9000),
    d=st.sampled_from([32, 64, 80, 128, 256]),
    batch=st.integers(1, 4),
    heads=st.sampled_from([1, 2, 4, 8]),
    group=st.sampled_from([1, 2, 4]),
    dtype=st.sampled_from(["fp16", "bf16", "fp32"]),
    causal=st.booleans(),
    dropout=st.sampled_from([0.0, 0.1]),
)


def _compare(*args, **kwargs):
    """compare(), or reject the example where the forward's tiles do not fit (fp32 at d = 256)."""
    from hypothesis import reject

    try:
        return compare(*args, **kwargs)
    except WorkloadError:
        reject()


def _workload(w):
    w = dict(w)
    group = w.pop("group")
    return Workload(**w, kv_heads=w["heads"], n_kv=None).with_(heads=w["heads"] * group)


def _useful_forward_flops(alg, w) -> int:
    """The forward pass's FLOPs without the padding of whole tiles: the standard path's as
    counted (exact), the tiled kernel's scaled back from its executed tiles to the scores."""
    if alg.traffic.name == "standard":
        return alg.traffic.flops
    scores = (w.batch * w.heads * w.n * w.n_kv_) // (2 if w.causal else 1)
    return 4 * scores * w.d


@settings(max_examples=120, deadline=None)
@given(
    w=workloads,
    impl=st.sampled_from(["sdpa-flash", "sdpa-efficient", "sdpa-cudnn", "paper"]),
    mode=st.sampled_from(["on", "cold", "off"]),
    variant=st.sampled_from(["algorithm0", "eager"]),
)
def test_training_step_properties(w, impl, mode, variant):
    wl = _workload(w)
    fwd = _compare(wl, H200, impl=impl, l2=mode, standard=variant)
    both = _compare(wl, H200, impl=impl, l2=mode, backward=True, standard=variant)
    off = _compare(wl, H200, impl=impl, l2="off", backward=True, standard=variant)
    for a, b, ref in zip(fwd.algorithms, both.algorithms, off.algorithms):
        t = b.traffic
        assert t.bytes(level="hbm") <= t.bytes(level="l2") <= t.bytes(level="sram")
        assert t.bytes(level="hbm") <= ref.traffic.bytes(level="hbm")  # L2 never adds HBM traffic
        assert t.hbm_bytes > a.traffic.hbm_bytes  # backward moves bytes of its own
        # the backward pass does at least twice the forward's work: the forward's kernel computes
        # whole compile-time tiles (padding short sequences), so compare with its useful work
        assert t.flops >= 2 * _useful_forward_flops(a, wl)
        for k in t.kernels:
            assert k.bytes(level="hbm", direction="read") >= 0 and k.bytes(level="hbm", direction="write") > 0
    # the fused kernels regenerate dropout's mask
    assert all(x.tensor != "Z" for x in both.tiled.traffic.transfers)


@settings(max_examples=60, deadline=None)
@given(w=workloads, impl=st.sampled_from(["sdpa-flash", "sdpa-efficient", "sdpa-cudnn"]))
def test_gqa_with_a_group_of_one_is_mha(w, impl):
    w = {**w, "group": 1}
    mha = Workload(**{k: v for k, v in w.items() if k != "group"})
    same = _workload(w)
    a = _compare(mha, H200, impl=impl, backward=True, standard="eager")
    b = _compare(same, H200, impl=impl, backward=True, standard="eager")
    for x, y in zip(a.algorithms, b.algorithms):
        assert [k.name for k in x.traffic.kernels] == [k.name for k in y.traffic.kernels]
        assert x.traffic.hbm_bytes == y.traffic.hbm_bytes and x.traffic.flops == y.traffic.flops
    assert not any(k.name.endswith("group_sum") for k in a.tiled.traffic.kernels)


@settings(max_examples=60, deadline=None)
@given(w=workloads, group=st.sampled_from([2, 4]))
def test_gqa_reads_kv_once_per_kv_head_in_the_fa2_backward(w, group):
    w = {**w, "group": group, "dtype": "fp16", "n": max(w["n"], 64)}
    wl = _workload(w)
    k = by_name(compare(wl, H200, impl="sdpa-flash", l2="cold", backward=True).tiled)
    main = k["fa2_bwd"]
    kv = int(wl.kv_bytes())
    assert kv <= main.bytes(level="hbm", tensor="K") <= group * kv
    assert main.bytes(level="l2", tensor="K") == group * kv
    assert k["dk_group_sum"].bytes(level="hbm", direction="write") == kv


# ---------------------------------------------------------------------------------------
# Aligning measured kernels (names as PyTorch's libraries name them)

FA2_BWD_NAMES = [
    "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, 0, 0, cutlass::half_t>>(Flash_fwd_params)",
    "void pytorch_flash::flash_bwd_dot_do_o_kernel<true, Flash_bwd_kernel_traits<64, 128, 128, 8, 4, 4, 4>>(Flash_bwd_params)",
    "void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<64, 128, 128, 8>>(Flash_bwd_params)",
    "void pytorch_flash::flash_bwd_convert_dq_kernel<Flash_bwd_kernel_traits<64, 128, 128, 8>>(Flash_bwd_params)",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<c10::Half, at::native::func_wrapper_t<float, sum_functor>>>(R)",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<c10::Half, at::native::func_wrapper_t<float, sum_functor>>>(R)",
]
#: as CUPTI names them on an H200 (validation/h200/final/h200-training.json.gz; shortened): the
#: softmax gradient's product before its kernel, the mask gradient's copy a Memcpy DtoD
EAGER_NAMES = [
    "nvjet_sm90_hsh_256x128_64x4_1x2_h_bz_coopA_TNT",
    "void at::native::vectorized_elementwise_kernel<8, at::native::AUnaryFunctor<c10::Half, c10::Half, c10::Half, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 2ul> >",
    "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::(anonymous namespace)::masked_fill_kernel(at::TensorIterator&, c10::Scalar const&)>>",
    "void (anonymous namespace)::softmax_warp_forward<c10::Half, c10::Half, float, 10, false, false>(c10::Half*, c10::Half const*, int, int, int, bool const*, int, bool)",
    "void at::native::(anonymous namespace)::fused_dropout_kernel_vec<c10::Half, float, unsigned int, 1, 8, bool>(at::cuda::detail::TensorInfo)",
    "Memset (Device)",
    "nvjet_sm90_hsh_64x512_64x2_1x2_h_bz_coopB_NNT",
    "nvjet_sm90_hsh_64x512_64x2_1x2_h_bz_coopB_NTT",
    "nvjet_sm90_hsh_256x128_64x4_1x2_h_bz_coopA_TNT",
    "void at::native::vectorized_elementwise_kernel<8, at::native::(anonymous namespace)::masked_scale_kernel<bool, c10::Half, float>(at::Tensor&, at::Tensor const&, at::Tensor const&, float)>",
    "void at::native::vectorized_elementwise_kernel<8, at::native::BinaryFunctor<c10::Half, c10::Half, c10::Half, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul> >",
    "void (anonymous namespace)::softmax_warp_backward<c10::Half, c10::Half, float, 10, false, false>(c10::Half*, c10::Half const*, c10::Half const*, int, int, int, bool const*)",
    "Memcpy DtoD (Device -> Device)",
    "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::(anonymous namespace)::masked_fill_kernel(at::TensorIterator&, c10::Scalar const&)>>",
    "void at::native::vectorized_elementwise_kernel<8, at::native::AUnaryFunctor<c10::Half, c10::Half, c10::Half, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 2ul> >",
    "nvjet_sm90_hsh_512x64_64x2_2x1_v_bz_coopB_NTN",
    "nvjet_sm90_hsh_64x512_64x2_1x2_h_bz_coopB_NNT",
]


def _fake(names, nbytes=1.0):
    return [
        MeasuredKernel(i, n, {"dram__bytes_read.sum": nbytes, "dram__bytes_write.sum": nbytes})
        for i, n in enumerate(names)
    ]


def test_align_fa2_backward_names_with_an_extra_and_a_missing_kernel():
    model = ["fa2_fwd", "fa2_bwd_pre", "fa2_bwd", "fa2_bwd_dq", "dk_group_sum", "dv_group_sum"]
    measured = _fake(
        FA2_BWD_NAMES[:3]
        + ["void at::native::vectorized_elementwise_kernel<4, FillFunctor<float>>"]
        + FA2_BWD_NAMES[3:5]
    )
    pairs = align_kernels("sdpa-flash", model, measured)
    matched = [(n, m.name.split("<")[0]) for n, m in pairs if n and m]
    assert [n for n, _ in matched] == model[:5]
    assert [m.name for n, m in pairs if n is None][0].endswith("FillFunctor<float>>")  # not modelled
    assert [n for n, m in pairs if m is None] == ["dv_group_sum"]  # nothing left to match


def test_align_eager_standard_names():
    names = [
        k.name for k in predicted_kernels(parse_case("impl=standard,n=1024,d=64,causal=1,dropout=0.1,backward=1"), H200)
    ]
    pairs = align_kernels("standard", names, _fake(EAGER_NAMES))
    assert [n for n, m in pairs if n] == names and all(m for n, m in pairs if n)  # every kernel matched, in order
    assert [m.name for n, m in pairs if n is None] == ["Memset (Device)"]  # not modelled
    got = {n: m.name for n, m in pairs if n}
    assert "masked_scale" in got["dropout_bwd"] and "softmax_warp_backward" in got["softmax_bwd"]
    assert "BinaryFunctor" in got["softmax_bwd_mul"] and got["mask_bwd_copy"].startswith("Memcpy DtoD")
    assert "AUnaryFunctor" in got["scale"] and "AUnaryFunctor" in got["scale_bwd"]
    # a fused scale (no multiply kernel) leaves the model's scale unmatched, the rest aligned
    pairs = align_kernels("standard", names, _fake([n for i, n in enumerate(EAGER_NAMES) if i != 1]))
    assert [n for n, m in pairs if n and m is None] == ["scale"]
    assert sum(1 for n, m in pairs if n and m) == len(names) - 1


def test_elementwise_ops_past_32_bit_offsets_launch_in_parts():
    from memmodel.traffic.standard import elementwise_launches

    # ATen's gpu_kernel halves an iterator until every operand's last byte offset fits an int32:
    # bf16 S of 4 · 8 · 4 · 4096² = 2³¹ scores (4 GiB): halves of 2³⁰ scores end at 2³¹ − 1
    assert elementwise_launches(2**31, 2) == 2
    assert elementwise_launches(2**30, 2) == 1  # (2³⁰ − 1) · 2 + 1 = 2³¹ − 1 fits
    assert elementwise_launches(2**30 + 1, 2) == 2
    assert elementwise_launches(3 * 2**30, 2) == 4  # halves of 1.5 · 2³⁰ split again
    assert elementwise_launches(2**30, 4) == 2  # fp32: 2³⁰ scores are 4 GiB
    assert elementwise_launches(2**31, 1) == 2  # a bool mask: numel past int32
    # masked_fill_ with the mask broadcast over 32 heads: split by heads, 16 and 16
    assert elementwise_launches(2**31, 2, 32) == 2
    assert list(elementwise_launches(np.array([2**28, 2**31]), 2)) == [1, 2]
    # the eager kernels over that S (the H200 record's GQA case): the elementwise ops twice,
    # the softmax, dropout (64-bit indices), the copy (a memcpy) and the products once
    case = parse_case("impl=standard,batch=4,heads=32,kv_heads=8,n=4096,d=128,dtype=bf16,causal=1,backward=1")
    kernels = predicted_kernels(case, H200)
    launches = {k.name: k.launches for k in kernels}
    assert {n for n, v in launches.items() if v == 2} == {
        "scale",
        "mask",
        "softmax_bwd_mul",
        "mask_bwd",
        "scale_bwd",
    }
    # the measured launches are merged into one per model kernel: bytes and times summed
    scale = next(k for k in kernels if k.name == "scale")
    names = EAGER_NAMES[:2] + EAGER_NAMES[1:]
    measured = [
        MeasuredKernel(i, n, {"dram__bytes_read.sum": 5.0, "dram__bytes_write.sum": 7.0, "gpu__time_duration.sum": 3.0})
        for i, n in enumerate(names)
    ]
    pairs = dict((n, m) for n, m in align_launches("standard", kernels, measured) if n)
    merged = pairs["scale"]
    assert (merged.dram_read_bytes, merged.dram_write_bytes) == (10.0, 14.0)  # 5 + 5, 7 + 7
    assert merged.time_s == pytest.approx(6e-9) and merged.metrics["gpu__time_duration.sum"] == 6.0
    assert merged.name.endswith("(x2 launches)") and scale.launches == 2
    assert "(x" not in pairs["qk"].name  # one launch: the measured kernel itself
    # a model kernel whose second launch nothing matched keeps the one that did
    assert pairs["mask"].name == EAGER_NAMES[2]


def test_align_optional_cudnn_and_cutlass_kernels():
    cudnn = [
        "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0",
        "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_3_64x128x64_4x1x1_cga1x1x1_kernel0_0",
    ]
    pairs = align_kernels("sdpa-cudnn", ["fa2_fwd", "cudnn_bwd_pre", "cudnn_bwd", "cudnn_bwd_dq"], _fake(cudnn))
    got = {n: m for n, m in pairs if n}
    assert got["cudnn_bwd"] is not None and "bprop" in got["cudnn_bwd"].name
    assert got["cudnn_bwd_pre"] is None and got["cudnn_bwd_dq"] is None
    mea = [
        "fmha_cutlassF_f16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::half_t>::Params)",
        "fmha_cutlassB_f16_aligned_128x128_k64_seqaligned_sm80(AttentionBackwardKernel<Sm80>::Params)",
    ]
    pairs = align_kernels("sdpa-efficient", ["fa2_fwd", "mea_bwd_zero", "mea_bwd"], _fake(mea))
    assert [(n, m is not None) for n, m in pairs] == [("fa2_fwd", True), ("mea_bwd_zero", False), ("mea_bwd", True)]
    assert "cutlassF" in dict(pairs)["fa2_fwd"].name
    assert set(KERNEL_PATTERNS["sdpa-flash"]) >= {
        "fa2_bwd_pre",
        "fa2_bwd",
        "fa2_bwd_dq",
        "dk_group_sum",
        "dv_group_sum",
    }


def _perfect_measurement(case, profile, extra=()):
    """Measured kernels named as PyTorch names them, with the model's own cold-L2 bytes."""
    names = {
        "sdpa-flash": dict(
            zip(["fa2_fwd", "fa2_bwd_pre", "fa2_bwd", "fa2_bwd_dq", "dk_group_sum", "dv_group_sum"], FA2_BWD_NAMES)
        ),
    }[case.impl]
    out = []
    for i, k in enumerate(predicted_kernels(case, profile, "cold")):
        metrics = {
            "dram__bytes_read.sum": float(k.bytes(level="hbm", direction="read")),
            "dram__bytes_write.sum": float(k.bytes(level="hbm", direction="write")),
            "lts__t_bytes.sum": float(k.bytes(level="l2")),
            "gpu__time_duration.sum": 1000.0,
        }
        out.append(MeasuredKernel(i, names[k.name], metrics))
        if k.name == "fa2_bwd_pre":
            out += [
                MeasuredKernel(100 + j, n, {"dram__bytes_read.sum": 5.0, "dram__bytes_write.sum": 7.0})
                for j, n in enumerate(extra)
            ]
    return out


def test_score_a_training_case_and_summarize_its_record():
    case = parse_case("impl=sdpa-flash,batch=2,heads=8,kv_heads=2,n=1024,d=128,dtype=bf16,causal=1,backward=1")
    measured = _perfect_measurement(
        case, H200, extra=["void at::native::vectorized_elementwise_kernel<4, at::native::direct_copy_kernel_cuda>"]
    )
    detail = score_case_detail(case, measured, H200)
    assert [s.kernel for s in detail.scores] == [
        "fa2_fwd",
        "fa2_bwd_pre",
        "fa2_bwd",
        "fa2_bwd_dq",
        "dk_group_sum",
        "dv_group_sum",
    ]
    assert all(abs(s.error) < 1e-9 for s in detail.scores)  # the model against its own bytes
    assert [s.pass_ for s in detail.scores].count("backward") == 5
    assert [k.name for k in detail.unmatched][0].endswith("direct_copy_kernel_cuda>") and detail.missing == []
    # a record entry as validate writes it, with CUPTI kernel times 10 % over the model's
    from memmodel.gpu.validate import score_entry

    entry = {"case": case.to_dict(), "status": "ok", "predicted": predicted_times(case, H200)}
    # each kernel's own duration: its time less the launch overhead it holds (CUPTI's peer)
    launch = entry["predicted"]["kernel_launch_s"]
    kernels = {n: t - launch[n] for n, t in entry["predicted"]["kernels"].items()}
    entry["timing"] = {
        "time_s": 1.1 * entry["predicted"]["time_s"],
        "kernels": {p: 1.1 * entry["predicted"]["steps"][p] for p in ("forward", "backward")},
        "profiled_kernels": [{"name": s.measured_name, "time_s": 1.1 * kernels[s.kernel]} for s in detail.scores]
        + [{"name": "Memset (Device)", "time_s": 1e-6}],
        "grad_errors": {"dq": 1e-3, "dk": 2e-3, "dv": 1e-3},
    }
    score_entry(entry, case, measured, H200)
    assert entry["missing_kernels"] == [] and len(entry["unmodelled_kernels"]) == 1
    assert entry["measured_ctas_per_sm"] is None and entry["measured_backward_ctas_per_sm"] is None  # no launch stats
    st_ = step_time_error(entry)
    assert st_["error"] == pytest.approx(1 / 1.1 - 1)
    rows = kernel_time_errors(entry)
    assert [r["kernel"] for r in rows][-1] is None  # the memset: not modelled
    assert all(r["error"] == pytest.approx(1 / 1.1 - 1) for r in rows if r["kernel"])
    s = summarize_record({"cases": [entry]})
    assert s["step_time"]["n"] == 1 and s["kernel_time"]["n"] == 6 and s["hbm_bytes"]["backward_kernels"]["n"] == 5
    assert s["time"]["n"] == 2  # the forward and backward passes
    from memmodel.report.scoring import markdown

    md = markdown(
        {
            "device": "x",
            "memmodel_version": "0",
            "profile": {"name": "h200"},
            "started": "t",
            "command": "c",
            "cases": [entry],
            "summary": s,
        }
    )
    assert "## Training step (forward + backward)" in md and "(not modelled)" in md
    assert "training step time (forward + backward)" in md and "direct_copy" in md


def test_forward_only_summaries_keep_their_keys():
    data = read_json(EARLIER[0])  # a forward-only record
    s = summarize_record(data)
    assert "step_time" not in s and "backward_kernels" not in s["hbm_bytes"]


@pytest.mark.parametrize("path", EARLIER, ids=lambda p: p.name.removesuffix(".json.gz"))
def test_earlier_records_rescore_exactly_as_before(path):
    """Every committed H200 record rescores with its own profile: the same kernels matched to
    the same measurements (the predictions follow the model as it is now)."""
    data = read_json(path)
    csv = ncu_trace(path)
    new = rescore(data, csv, recorded_profile(data, str(path)))  # found as --rescore finds it
    keys = (
        "case",
        "kernel",
        "measured_kernel",
        "measured_hbm_read_bytes",
        "measured_hbm_write_bytes",
    )
    old_rows = [[b[k] for k in keys] for e in data["cases"] for b in e.get("bytes", [])]
    new_rows = [[b[k] for k in keys] for e in new["cases"] for b in e.get("bytes", [])]
    if path.name == "h200-training.json.gz":
        # written before eager attention's elementwise ops were modelled in their launches
        # (ATen's 32-bit split) and the softmax gradient's product kernel was: those kernels'
        # rows changed, every other row is as it was
        launches = {
            (e["case"]["id"], k): n for e in new["cases"] for k, n in e["predicted"].get("kernel_launches", {}).items()
        }
        split = {key for key, n in launches.items() if n > 1}
        assert {k for _, k in split} == {"scale", "mask", "softmax_bwd_mul", "mask_bwd", "scale_bwd"}
        old_rows = [r for r in old_rows if (r[0], r[1]) not in split]
        new_rows = [r for r in new_rows if (r[0], r[1]) not in split and r[1] != "softmax_bwd_mul"]
        merged = [b for e in new["cases"] for b in e["bytes"] if (b["case"], b["kernel"]) in split]
        assert merged and all(b["measured_kernel"].endswith("(x2 launches)") for b in merged)
    assert new_rows == old_rows
    assert new["summary"]["cases"] == data["summary"]["cases"]
    # a case written with the new keys at their defaults scores the same
    plain = [e for e in data["cases"] if e["status"] == "ok" and not e["case"].get("backward")]
    for e in plain[:1]:  # (the training record has none)
        assert Case.from_dict({**e["case"], "backward": False, "dropout": 0.0}) == Case.from_dict(e["case"])


def test_records_name_a_profile_of_the_repository_by_its_path_in_it(monkeypatch, tmp_path):
    """A bundled profile is recorded as ``memmodel/hardware/profiles/h200.yaml`` (relative to the folder validate
    runs in), not as the measuring machine's absolute path, which no other checkout has."""
    monkeypatch.chdir(REPO)
    assert profile_entry(load_profile("h200")) == {"name": "h200", "path": "memmodel/hardware/profiles/h200.yaml"}
    assert profile_entry(load_profile("validation/h200/h200-calibrated.yaml"))["path"] == (
        "validation/h200/h200-calibrated.yaml"
    )
    monkeypatch.chdir(tmp_path)  # outside the repository: the path as it is
    assert profile_entry(load_profile("h200"))["path"] == (HARDWARE / "h200.yaml").as_posix()
    for record in FINAL:  # every committed record finds its profile from any checkout
        assert not Path(read_json(record)["profile"]["path"]).is_absolute(), record.name


def test_rescore_cli_on_an_earlier_record(run, tmp_path):
    record = tmp_path / "rec.json.gz"
    shutil.copy(EARLIER[0], record)
    shutil.copy(sibling(EARLIER[0], ".ncu.csv.gz"), tmp_path / "rec.ncu.csv.gz")
    r = run(
        "validate", "--rescore", str(record), "--gpu", "validation/h200/h200-calibrated.yaml", "--format", "markdown"
    )
    assert r.exit_code == 0, r.stderr
    assert "Training step" not in r.stdout and "| HBM bytes, memmodel |" in r.stdout


def test_split_a_synthetic_training_trace():
    lines = [
        '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"'
    ]
    names = ["memmodel_begin", *FA2_BWD_NAMES[:4], "memmodel_end"]
    for i, n in enumerate(names):
        lines.append(
            f'"{i}","1","python","h","{n}","1","7","(128, 1, 1)","(8, 1, 1)","0","9.0","s","dram__bytes_read.sum","byte","{i * 1000}"'
        )
    groups = split_by_marker(parse_csv("\n".join(lines)), ["c"])
    assert [k.name for k in groups["c"]] == FA2_BWD_NAMES[:4]


# ---------------------------------------------------------------------------------------
# The GPU code's eager paths and references, on the CPU (fp32)


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
        "impl=standard,batch=2,heads=4,kv_heads=2,n=96,d=32,dtype=fp32,causal=1,dropout=0.2,backward=1",
        "impl=standard,batch=1,heads=2,n=64,d=16,dtype=fp32,backward=1",
        "impl=sdpa-flash,batch=2,heads=4,kv_heads=2,n=80,d=32,dtype=fp32,causal=1,backward=1",
    ],
)
def test_training_step_gradients_match_the_float32_reference(cpu_run, spec):
    gpu_run, torch = cpu_run
    case = parse_case(spec)
    run = gpu_run.CaseRun(case)
    grads = run.run()
    assert [tuple(g.shape) for g in grads] == [tuple(t.shape) for t in (run.q, run.k, run.v)]
    result = gpu_run.check_run(case, run)
    assert result["rel_error"] < 1e-5 and max(result["grad_errors"].values()) < 1e-5
    assert run.q.grad is None  # torch.autograd.grad: nothing accumulated, no extra kernels
    # the eager forward is the op sequence the model describes, in its order
    if case.impl == "standard":
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as prof:
            run.run()
        ops = [e["name"] for e in gpu_run.kernel_events(prof, "CPU")]
        wanted = ["aten::matmul", "aten::mul", "aten::softmax", "aten::matmul", "aten::_softmax_backward_data"]
        if case.causal:
            wanted.insert(2, "aten::masked_fill_")
        positions = [ops.index(op, (ops.index(wanted[i - 1]) + 1) if i else 0) for i, op in enumerate(wanted)]
        assert positions == sorted(positions)
        assert ("aten::native_dropout" in ops) == bool(case.dropout)
        assert ("aten::native_dropout_backward" in ops) == bool(case.dropout)


def test_gradient_check_catches_a_wrong_gradient(cpu_run):
    gpu_run, torch = cpu_run
    case = parse_case("impl=standard,batch=1,heads=2,n=64,d=16,dtype=fp32,causal=1,backward=1")
    run = gpu_run.CaseRun(case)
    dq, dk, dv = run.run()
    from memmodel.errors import RuntimeFailure

    with pytest.raises(RuntimeFailure, match="dk relative error"):
        gpu_run.check_grads(case, (dq, dk * 1.1, dv), run.q, run.k, run.v, run.do)
    with pytest.raises(RuntimeFailure, match="gradient shapes"):
        gpu_run.check_grads(case, (dq, dk[:, :, 1:], dv), run.q, run.k, run.v, run.do)
    # a dropout mask other than the one drawn is caught too
    case = parse_case("impl=standard,batch=1,heads=2,n=64,d=16,dtype=fp32,dropout=0.3,backward=1")
    run = gpu_run.CaseRun(case)
    grads = run.run()
    keep = gpu_run._keep(run.dropped)
    assert gpu_run.check_grads(case, grads, run.q, run.k, run.v, run.do, keep)["dq"] < 1e-5
    with pytest.raises(RuntimeFailure):
        gpu_run.check_grads(case, grads, run.q, run.k, run.v, run.do, ~keep)


def test_dropout_probe_reveals_the_kernels_mask(cpu_run):
    gpu_run, torch = cpu_run
    case = parse_case(
        "impl=sdpa-flash,batch=4,heads=4,kv_heads=2,n=512,d=32,dtype=fp32,causal=1,dropout=0.1,backward=1"
    )
    result = gpu_run.dropout_probe(case)
    assert result["out"] < 1e-5 and max(result[k] for k in ("dq", "dk", "dv")) < 1e-5
    assert 0.02 < result["drop_rate"] < 0.25  # p = 0.1 over 32 · 33 / 2 · 2 unmasked scores


def test_forward_only_dropout_is_checked_with_its_mask(cpu_run):
    gpu_run, torch = cpu_run
    case = parse_case("impl=standard,batch=1,heads=2,n=64,d=16,dtype=fp32,causal=1,dropout=0.25")
    run = gpu_run.CaseRun(case)
    out = run.run()
    assert [name for name, _ in run.steps] == ["qk", "mask", "softmax", "dropout", "pv"]
    assert gpu_run.check(case, out, run.q, run.k, run.v, gpu_run._keep(run.dropped)[: case.n]) < 1e-5


def test_kernel_events_and_medians(cpu_run):
    gpu_run, torch = cpu_run
    case = parse_case("impl=standard,batch=1,heads=2,n=64,d=16,dtype=fp32,backward=1")
    run = gpu_run.CaseRun(case)
    run.run()
    profiled = gpu_run.profile_kernels(run, reps=2)
    assert profiled and all(k["time_s"] >= 0 for k in profiled)
    runs = [[{"name": "a", "time_s": t}, {"name": "b", "time_s": 2 * t}] for t in (1.0, 3.0, 2.0)]
    runs.append([{"name": "a", "time_s": 9.0}])
    assert gpu_run.median_kernels(runs) == [{"name": "a", "time_s": 2.0}, {"name": "b", "time_s": 4.0}]
    assert gpu_run.median_kernels([]) == []


def test_profiler_sessions_finalize_cupti(cpu_run, monkeypatch):
    """validate profiles a case before timing its calls: each session asks Kineto to finalize
    CUPTI at its end (TEARDOWN_CUPTI=1), unless the user's environment says otherwise."""
    gpu_run, torch = cpu_run
    run = gpu_run.CaseRun(parse_case("impl=standard,batch=1,heads=2,n=64,d=16,dtype=fp32"))
    run.run()
    monkeypatch.delenv("TEARDOWN_CUPTI", raising=False)
    assert gpu_run.profile_kernels(run, reps=1)
    assert __import__("os").environ["TEARDOWN_CUPTI"] == "1"
    monkeypatch.setenv("TEARDOWN_CUPTI", "0")  # the user's own setting is kept
    assert gpu_run.profile_kernels(run, reps=1)
    assert __import__("os").environ["TEARDOWN_CUPTI"] == "0"


def test_validate_says_when_the_environment_keeps_cupti_attached(monkeypatch):
    from memmodel.gpu.cupti import lingering_note

    monkeypatch.delenv("TEARDOWN_CUPTI", raising=False)
    assert lingering_note() is None
    monkeypatch.setenv("TEARDOWN_CUPTI", "1")
    assert lingering_note() is None
    monkeypatch.setenv("TEARDOWN_CUPTI", "0")
    note = lingering_note()
    assert note is not None and note.startswith("TEARDOWN_CUPTI=0") and "call" in note
    # the CLI says it before it looks for a GPU (here: none, one line and a non-zero exit)
    from click.testing import CliRunner

    from memmodel.cli import cli

    result = CliRunner().invoke(cli, ["validate", "--case", "impl=sdpa-flash,n=128,d=64"])
    assert "TEARDOWN_CUPTI=0 in the environment" in result.output
    assert result.exit_code != 0 or "NVIDIA" in result.output


def test_triton_has_no_backward(cpu_run):
    gpu_run, torch = cpu_run
    from memmodel.errors import RuntimeFailure

    with pytest.raises(RuntimeFailure, match="no backward pass"):
        gpu_run.CaseRun(parse_case("impl=triton,n=64,d=64,backward=1"))


cuda = pytest.mark.skipif(
    not (__import__("importlib").util.find_spec("torch") and __import__("torch").cuda.is_available()),
    reason="needs a CUDA GPU",
)


@cuda
def test_time_a_training_step_on_the_gpu():  # pragma: no cover - GPU only
    from memmodel.gpu.run import time_case

    for spec in (
        "impl=standard,batch=2,heads=4,kv_heads=2,n=256,d=64,causal=1,dropout=0.1,backward=1",
        "impl=sdpa-flash,batch=2,heads=4,n=256,d=64,dropout=0.1,backward=1",
    ):
        t = time_case(parse_case(spec), reps=20)
        assert t["time_s"] > 0 and set(t["kernels"]) == {"forward", "backward"} and t["profiled_kernels"]


# ---------------------------------------------------------------------------------------
# Calibration of the backward kernels: from measurements to profile fields


def test_backward_calibration_figures():
    from memmodel.calibration import fits as cb

    m = {
        "softmax_backward": {
            "fp16": [{"row": 1024, "rate": 3.0e12}, {"row": 4096, "rate": 2.0e12}],
            "bf16": [{"row": 1024, "rate": 2.0e12}],
        },
        "dropout": {"p": 0.1, "bytes": 2**29, "forward": {"rate": 2.5e12}, "backward": {"rate": 3.5e12}},
        "elementwise_backward": {
            "n": 2048,
            "batch_heads": 64,
            "scale": {"rate": 3e12},
            "copy": {"rate": 4e12},
            "masked_fill_zero": {"rate": 2e12},
        },
        "reduction": {"shape": [4, 4096, 8, 4, 128], "rate": 2.0e12},
        "sdpa_backward": {
            "points": [
                {"impl": "sdpa-flash", "shape": [8, 16, 2048, 64, False], "backward": {"time_s": 2e-3}},
                {"impl": "sdpa-flash", "shape": [8, 16, 2048, 128, False], "backward": {"time_s": 4e-3}},
                {"impl": "sdpa-flash", "shape": [8, 16, 2048, 128, True], "backward": {"time_s": 2.1e-3}},
                {"impl": "sdpa-cudnn", "shape": [8, 16, 2048, 64, False], "error": "not built"},
            ]
        },
    }
    predict = lambda impl, b, h, n, d, causal: 1e-3 * (d / 64) / (2 if causal else 1)  # noqa: E731
    out = cb.backward_figures(m, predict=predict)
    assert out["kernels.softmax_backward.bandwidth"][0] == {1024: "2.5 TB/s", 4096: "2 TB/s"}  # (3 + 2) / 2
    assert out["kernels.dropout.bandwidth"][0] == "2.5 TB/s"
    assert out["kernels.dropout_backward.bandwidth"][0] == "3.5 TB/s"
    assert out["kernels.elementwise_backward.bandwidth"][0] == "3 TB/s"  # (3 + 4 + 2) / 3
    assert out["kernels.scale.bandwidth"][0] == "3 TB/s" and out["kernels.copy.bandwidth"][0] == "4 TB/s"
    assert out["kernels.reduction.bandwidth"][0] == "2 TB/s"
    value, note = out["implementations.sdpa-flash.backward_efficiency"]
    assert value == {64: 0.5, 128: 0.5}  # 1 ms / 2 ms, 2 ms / 4 ms
    assert "causal d=128" in note and "-4.8%" in note  # (1 ms / 0.5 − 2.1 ms) / 2.1 ms
    assert "implementations.sdpa-cudnn.backward_efficiency" not in out
    assert cb.backward_figures({}) == {}
    # the real model as the predictor: a ratio for each head dim
    real = cb.backward_efficiency_figures(m["sdpa_backward"], cb.predicted_backward_s(H200))
    assert set(real["implementations.sdpa-flash.backward_efficiency"][0]) == {64, 128}


def test_backward_efficiency_is_the_fused_kernels_compute_share():
    from memmodel.calibration import fits as cb

    m = {
        "points": [
            {"impl": "sdpa-cudnn", "shape": [8, 16, 2048, 64, False], "backward": {"time_s": 900e-6}},
            {"impl": "sdpa-cudnn", "shape": [8, 16, 2048, 64, True], "backward": {"time_s": 500e-6}},
        ]
    }
    # the model: 400 µs of compute in the fused kernel, 100 µs in the others (pre, dQ conversion):
    # 400 / (900 − 100) = 0.5; the causal check: 50 + 200 / 0.5 = 450 µs against 500 µs, −10.0 %
    predict = lambda impl, b, h, n, d, causal: (200e-6, 50e-6) if causal else (400e-6, 100e-6)  # noqa: E731
    value, note = cb.backward_efficiency_figures(m, predict)["implementations.sdpa-cudnn.backward_efficiency"]
    assert value == {64: 0.5} and "-10.0% off" in note
    # with the model itself: its compute term and the other kernels' times
    compute, other = cb.predicted_backward_s(H200)("sdpa-flash", 8, 16, 2048, 64, False)
    # the others hold calibrate's two layout copies of O and dO (batch × heads × N × d tensors):
    # each 8·16·2048·64 fp16 = 33.55 MB read and written at the 1.889 TB/s elementwise rate + a
    # 1.38 us launch = 36.9 us
    copies = 2 * (2 * 8 * 16 * 2048 * 64 * 2 / 1.889e12 + 1.38e-6)
    assert copies == pytest.approx(73.8e-6, rel=1e-3)
    assert compute > 10 * (other - copies) > 0 and other > copies
    # one head: the two layouts are one, no copies; cuDNN reads any strides, none either
    _, alone = cb.predicted_backward_s(H200)("sdpa-flash", 8, 1, 2048, 64, False)
    _, cudnn = cb.predicted_backward_s(H200)("sdpa-cudnn", 8, 16, 2048, 64, False)
    assert alone < (other - copies) and cudnn < other - copies / 2


def test_backward_efficiency_cta_overhead_and_diagonal_cost_fitted_jointly():
    from memmodel.calibration import fits as cb

    # a synthetic GPU whose fused backward takes compute / 0.5 × (1 + 0.4 × diagonal share)
    # + 3 µs per CTA wave, besides 100 µs of other kernels; the model's parts per shape:
    parts = {
        (8, 16, 2048, False): dict(compute_s=1000e-6, other_s=100e-6, waves=8.0, diagonal_share=0.0),
        (64, 16, 256, False): dict(compute_s=125e-6, other_s=100e-6, waves=8.0, diagonal_share=0.0),
        (1, 8, 16384, False): dict(compute_s=1000e-6, other_s=100e-6, waves=1.0, diagonal_share=0.0),
        (8, 16, 2048, True): dict(compute_s=500e-6, other_s=100e-6, waves=8.0, diagonal_share=0.1),
    }

    def predict(impl, b, h, n, d, causal):
        return parts[(b, h, n, causal)]

    def took(b, h, n, causal):
        p = parts[(b, h, n, causal)]
        return p["other_s"] + p["compute_s"] / 0.5 * (1 + 0.4 * p["diagonal_share"]) + 3e-6 * p["waves"]

    m = {
        "points": [
            {"impl": "sdpa-flash", "shape": [b, h, n, 128, causal], "backward": {"time_s": took(b, h, n, causal)}}
            for b, h, n, causal in parts
        ]
    }
    out = cb.backward_efficiency_figures(m, predict)
    assert out["implementations.sdpa-flash.backward_efficiency"][0] == {128: 0.5}
    assert out["implementations.sdpa-flash.backward_cta_overhead"][0] == {128: "3 us"}
    assert out["implementations.sdpa-flash.backward_masked_block_cost"][0] == {128: 0.4}
    assert "fitted jointly" in out["implementations.sdpa-flash.backward_efficiency"][1]
    # and the model takes them: a profile with the three figures times a backward kernel so
    fitted = H200.with_implementation_figures(
        "sdpa-flash",
        backward_efficiency=((128, 0.5),),
        backward_cta_overhead_s=((128, 3e-6),),
        backward_masked_block_cost=((128, 0.4),),
    )
    real = cb.backward_reference_parts(fitted)("sdpa-flash", 8, 16, 2048, 128, True)
    w = Workload(n=2048, d=128, heads=16, batch=8, dtype="fp16", causal=True)
    main = next(
        k for k in compare(w, fitted, impl="sdpa-flash", backward=True).tiled.timing.kernels if k.name == "fa2_bwd"
    )
    # compute / 0.5 · (1 + 0.4 · r) plus 3 µs a wave (the compute term holds both), from the
    # model's own bare parts
    want = (real["compute_s"] - float(main.terms.get("launch", 0.0))) / 0.5 * (1 + 0.4 * real["diagonal_share"])
    assert float(main.terms["cta"]) == pytest.approx(3e-6 * real["waves"])
    assert float(main.terms["compute"]) == pytest.approx(want + 3e-6 * real["waves"], rel=1e-9)


def test_dropout_rate_figures_and_their_use():
    from memmodel.calibration import fits as cb

    m = {
        "points": [
            {
                "impl": "sdpa-flash",
                "shape": [8, 16, 2048, 64, False],
                "dropout": {"forward": {"time_s": 600e-6}, "backward": {"time_s": 1700e-6}},
                "plain": {"forward": {"time_s": 470e-6}, "backward": {"time_s": 1400e-6}},
            },
            {  # not slower with dropout: no figure
                "impl": "sdpa-cudnn",
                "shape": [8, 16, 2048, 64, False],
                "dropout": {"forward": {"time_s": 300e-6}, "backward": {"time_s": 800e-6}},
                "plain": {"forward": {"time_s": 300e-6}, "backward": {"time_s": 820e-6}},
            },
            {"impl": "sdpa-efficient", "shape": [8, 16, 2048, 64, False], "error": "no dropout"},
        ]
    }
    # 8 · 16 · 2048² = 536,870,912 scores: over 130 µs, 4.130 Top/s; over 300 µs, 1.790 Top/s
    scores = lambda impl, b, h, n, d, backward: float(b * h * n * n)  # noqa: E731
    out = cb.dropout_rate_figures(m, scores)
    assert out["implementations.sdpa-flash.dropout_rate"][0] == {64: "4.13 Top/s"}
    assert out["implementations.sdpa-flash.backward_dropout_rate"][0] == {64: "1.79 Top/s"}
    assert "470.0 us -> 600.0 us" in out["implementations.sdpa-flash.dropout_rate"][1]
    assert not any("sdpa-cudnn" in k or "sdpa-efficient" in k for k in out)
    # the model's count: every score of the kernels' tiles, forward and backward
    assert cb.dropout_scores(H200)("sdpa-flash", 8, 16, 2048, 64, False) == 536_870_912
    assert cb.dropout_scores(H200)("sdpa-efficient", 8, 16, 2048, 64, True) == 536_870_912
    # in the time model: scores / rate added to the fused kernel's compute, per pass
    case = parse_case("impl=sdpa-flash,batch=8,heads=16,n=2048,d=64,dtype=fp16,dropout=0.1,backward=1")
    data = _profile_data_with(
        {"dropout_rate": {64: "4.13 Top/s"}, "backward_dropout_rate": {64: "1.79 Top/s"}}, "sdpa-flash"
    )
    from memmodel.hardware import parse_profile

    with_rates = parse_profile(data, "x")
    bare = _profile_data_with({}, "sdpa-flash")
    for key in ("dropout_rate", "backward_dropout_rate"):
        bare["implementations"]["sdpa-flash"].pop(key, None)
    before = predicted_times(case, parse_profile(bare, "x"))["kernels"]
    after = predicted_times(case, with_rates)["kernels"]
    assert after["fa2_fwd"] - before["fa2_fwd"] == pytest.approx(536_870_912 / 4.13e12)  # 130 µs
    assert after["fa2_bwd"] - before["fa2_bwd"] == pytest.approx(536_870_912 / 1.79e12)  # 300 µs
    assert after["fa2_bwd_pre"] == before["fa2_bwd_pre"]
    plain = parse_case("impl=sdpa-flash,batch=8,heads=16,n=2048,d=64,dtype=fp16,backward=1")
    assert predicted_times(plain, with_rates)["kernels"] == predicted_times(plain, H200)["kernels"]


def _profile_data_with(fields, impl):
    import yaml

    data = yaml.safe_load((HARDWARE / "h200.yaml").read_text())
    data["implementations"][impl].update(fields)
    return data


def test_library_wiring_is_documented():
    text = Path(REPO / "memmodel" / "calibration" / "figures.py").read_text()
    for field in (
        "kernels.softmax_backward.bandwidth",
        "kernels.dropout.bandwidth",
        "kernels.reduction.bandwidth",
        "implementations.<name>.backward_efficiency",
        'op="softmax_backward"',
        'op="reduction"',
    ):
        assert field in text


def test_rescore_a_synthetic_training_record(run, tmp_path):
    """A record with a training case and its Nsight Compute trace: rescored and printed."""
    case = parse_case("impl=sdpa-flash,batch=2,heads=8,kv_heads=2,n=1024,d=128,dtype=bf16,causal=1,backward=1")
    extra = "void at::native::vectorized_elementwise_kernel<4, at::native::direct_copy_kernel_cuda>"
    measured = _perfect_measurement(case, H200, extra=[extra])
    header = (
        '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
        '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"'
    )
    lines = [header]
    kernels = [("memmodel_begin", {"dram__bytes_read.sum": 0.0})]
    kernels += [
        (k.name, {**k.metrics, "launch__grid_size": 1024, "launch__waves_per_multiprocessor": 3.88}) for k in measured
    ]
    kernels += [("memmodel_end", {"dram__bytes_read.sum": 0.0})]
    for i, (name, metrics) in enumerate(kernels):
        lines += [
            f'"{i}","1","p","h","{name}","1","7","(1,1,1)","(1,1,1)","0","9.0","s","{m}","x","{v}"'
            for m, v in metrics.items()
        ]
    entry = {
        "case": case.to_dict(),
        "status": "ok",
        "predicted": predicted_times(case, H200),
        "timing": {
            "time_s": 1e-4,
            "kernels": {"forward": 3e-5, "backward": 7e-5},
            "profiled_kernels": [{"name": k.name, "time_s": 1e-5} for k in measured],
            "grad_errors": {"dq": 1e-3, "dk": 1e-3, "dv": 1e-3},
        },
    }
    record = {
        "schema": "memmodel.validate/1",
        "memmodel_version": "0.1.0",
        "device": "NVIDIA H200",
        "profile": {"name": "h200", "path": None},
        "started": "t",
        "command": "c",
        "cases": [entry],
        "summary": {},
    }
    (tmp_path / "r.json").write_text(json.dumps(record))
    (tmp_path / "r.ncu.csv").write_text("\n".join(lines) + "\n")
    r = run("validate", "--rescore", str(tmp_path / "r.json"), "--gpu", "h200", "--output", str(tmp_path / "n.json"))
    assert r.exit_code == 0, r.stderr
    assert "fa2_bwd bytes" in r.stdout and "backward" in r.stdout
    new = json.loads((tmp_path / "n.json").read_text())
    e = new["cases"][0]
    assert e["measured_backward_ctas_per_sm"] == 2  # 1024 CTAs over 3.88 waves of 132 SMs
    assert e["missing_kernels"] == [] and e["unmodelled_kernels"][0]["name"] == extra
    assert max(abs(b["error"]) for b in e["bytes"]) < 1e-9
    assert new["summary"]["step_time"]["n"] == 1 and new["summary"]["kernel_time"]["n"] == 6
    r = run("validate", "--rescore", str(tmp_path / "r.json"), "--gpu", "h200", "--format", "markdown")
    assert r.exit_code == 0 and "## Training step (forward + backward)" in r.stdout


def test_cutlass_dropout_backward_reads_and_writes_its_dq_workspace_from_hbm():
    # 4 × 8 heads × 4096, d = 128, dropout 0.1: 128 × 128 tiles, T_c = 4096 / 128 = 32 key
    # blocks, splits = 32 (a zeroed workspace): every pair loads its 128 × 128 fp32 tile, all
    # but the first key block's store it back. Per pass over the keys the workspace is
    # B·H·N·d·4 = 4·8·4096·128·4 = 67,108,864 bytes: loads 32 × that = 2,147,483,648, stores
    # 31 × that = 2,080,374,784, all from HBM (spills crowd the tiles out of L2)
    from memmodel.model import compare
    from memmodel.options import options_for
    from memmodel.traffic.ledger import total

    h200 = load_profile("h200")

    def dq_hbm(d: int, dropout: float) -> tuple[int, int]:
        w = Workload(n=4096, d=d, batch=4, heads=8, dtype="fp16", dropout=dropout)
        c = compare(w, h200, options_for("sdpa-efficient", w, h200, backward=True))
        k = next(k for k in c.tiled.traffic.kernels if k.name == "mea_bwd")
        return (
            int(total(k.transfers, tensor="dQacc", level="hbm", direction="read")),
            int(total(k.transfers, tensor="dQacc", level="hbm", direction="write")),
        )

    assert dq_hbm(128, 0.1) == (2_147_483_648, 2_080_374_784)
    plain = dq_hbm(128, 0.0)
    assert plain[0] < 2_147_483_648 // 4 and plain[1] < 2_080_374_784 // 4  # held in L2 without dropout
    # d = 64 runs the 64 × 64 kernel, whose dropout variant moves no such extra
    assert dq_hbm(64, 0.1) == dq_hbm(64, 0.0)


def _mea_dq(w, profile=H200, l2="cold"):
    k = by_name(compare(w, profile, impl="sdpa-efficient", l2=l2, backward=True).tiled)["mea_bwd"]
    return (
        k.bytes(level="hbm", tensor="dQacc", direction="read"),
        k.bytes(level="hbm", tensor="dQacc", direction="write"),
    )


def test_cutlass_workspace_round_trip_at_one_steps_footprint():
    # 4 × 12 heads of 2048, d = 128, causal, H200: 128 × 128 tiles, one CTA per SM (132 slots),
    # T_r = T_c = 16 (a head fits the slots). Per step a CTA touches Q_i, dO_i (128·128·2 each),
    # lse_i, D_i (128·4 each), its fp32 tile (128·128·4 + a 16-byte lock) and its K_j, V_j
    # (128·128·2 each): 2·32,768 + 1,024 + 65,552 + 65,536 = 197,648 B; 132 CTAs: 26,089,536 B,
    # between the curve's 375 ‰ (23,592,960 B, 0) and 500 ‰ (31,457,280 B, 0.44) of 60 MiB
    share = 0.44 * (26_089_536 - 23_592_960) / (31_457_280 - 23_592_960)
    assert share == pytest.approx(0.13968, abs=1e-5)
    w = Workload(n=2048, d=128, batch=4, heads=12, dtype="fp16", causal=True)
    # stores: all but the last of each Q block's i + 1 contributions, Σ i = 120 a head, of
    # 128 · 128 · 4 = 65,536 B: 48 · 120 · 65,536 = 377,487,360; the workspace (with its locks)
    # 48 · 16 · 65,552 = 50,343,936 is read and written once, each written-back store once more
    expected = round(50_343_936 + 377_487_360 * share)
    assert expected == 103_071_621
    assert _mea_dq(w) == (expected, expected)
    # the share only comes with the L2: off, every request (136 visited pairs a head)
    assert _mea_dq(w, l2="off") == (48 * 136 * 65_536, 377_487_360)


def test_cutlass_workspace_round_trip_of_heads_longer_than_the_slots():
    # 2 heads of 32k, d = 128, causal: T_c = 256 > 132 slots. Group 0 (CTAs 0-131) runs
    # 132 · 125 = 16,500 pairs on 132 distinct blocks (share 0.13968: 2,304.7 misses), then
    # drains over Σ_{j<132} (131 − j) = 8,646 pairs as convoy CTAs replace it (163.2 misses:
    # the footprint falls below the knee's 375 ‰ after 19 of its CTAs); group 1 (124 CTAs) is
    # a convoy: 2,467.9 / 32,896 pairs = 0.07502
    from memmodel.model import l2_context
    from memmodel.traffic.flash_backward import backward_context, workspace_round_trip_share

    w = Workload(n=32768, d=128, heads=2, dtype="fp16", causal=True)
    ctx = backward_context(w, backward_tiles("sdpa-efficient", w, H200), H200.sm_count, exec_d=128)
    l2 = l2_context(H200, "cold").with_ctas(ctx.concurrent)
    got = workspace_round_trip_share(ctx, l2, 256, 197_648, 65_536)
    assert got == pytest.approx(2467.93 / 32_896, abs=1e-6)
    assert workspace_round_trip_share(ctx, l2.__class__("off", 1.0, 132), 256, 197_648, 65_536) is None
    assert workspace_round_trip_share(ctx, l2, 1, 197_648, 65_536) == 0.0  # one split: a walk apart
    # 2 · Σ_{i<256} i = 65,280 stores of 65,536 B written back at that share, on top of the
    # workspace once (2 · 256 · 65,552 = 33,562,624)
    expected = round(33_562_624 + 65_280 * 65_536 * got)
    assert expected == 354_522_389
    assert _mea_dq(w) == (expected, expected)
    # not causal, every CTA walks all 256 blocks from block j, wrapping: no convoy, every pair
    # at the share of 132 resident CTAs, 2 · 255 · 256 stores written back at 0.13968
    flat = Workload(n=32768, d=128, heads=2, dtype="fp16")
    flat_ctx = backward_context(flat, backward_tiles("sdpa-efficient", flat, H200), H200.sm_count, exec_d=128)
    assert workspace_round_trip_share(flat_ctx, l2, 256, 197_648, 65_536) == pytest.approx(0.13968, abs=1e-5)
    assert _mea_dq(flat)[1] >= round(33_562_624 + 2 * 255 * 256 * 65_536 * 0.13968)


def test_cutlass_workspace_round_trip_below_the_knee():
    # d = 64: 64 × 64 tiles; at 3 CTAs per SM (396 slots), 396 · (2·8,192 + 512 + 16,400 +
    # 16,384) = 396 · 49,680 = 19,673,280 B, under the curve's 375 ‰ (23,592,960 B): no round
    # trip reaches HBM, the records' d = 64 kernels keep their figures
    from memmodel.model import l2_context
    from memmodel.traffic.flash_backward import backward_context, workspace_round_trip_share

    w = Workload(n=1024, d=64, batch=16, heads=8, dtype="bf16", causal=True)
    ctx = backward_context(w, backward_tiles("sdpa-efficient", w, H200), H200.sm_count, exec_d=64)
    l2 = l2_context(H200, "cold").with_ctas(396)
    assert workspace_round_trip_share(ctx, l2, 16, 49_680, 16_384) == 0.0
    assert workspace_round_trip_share(ctx, l2.with_ctas(480), 16, 49_680, 16_384) > 0.0  # 4 per SM: 22.7 MiB


@settings(max_examples=60, deadline=None)
@given(
    n=st.lists(st.integers(64, 70_000), min_size=1, max_size=4),
    d=st.sampled_from([64, 128, 256]),
    heads=st.sampled_from([1, 2, 16]),
    causal=st.booleans(),
)
def test_cutlass_workspace_round_trip_share_is_elementwise_and_bounded(n, d, heads, causal):
    # the share is a miss share (0 to 1), a grid's rows are the scalar results, and the dQ
    # workspace's HBM bytes lie between the workspace once and every request
    from memmodel.model import l2_context
    from memmodel.traffic.flash_backward import backward_context, cutlass_splits, workspace_round_trip_share

    def share(wl):
        tiles = backward_tiles("sdpa-efficient", wl, H200)
        ctx = backward_context(wl, tiles, H200.sm_count, exec_d=d)
        l2 = l2_context(H200, "cold").with_ctas(ctx.concurrent)
        kv = 2 * tiles.block_kv * d * 2
        return workspace_round_trip_share(ctx, l2, cutlass_splits(wl, tiles), 200_000, kv)

    grid = Workload(n=np.array(n), d=d, heads=heads, dtype="fp16", causal=causal)
    got = np.atleast_1d(share(grid))
    one = [share(Workload(n=x, d=d, heads=heads, dtype="fp16", causal=causal)) for x in n]
    assert got.tolist() == pytest.approx(one, abs=1e-12)
    assert np.all((got >= 0.0) & (got <= 1.0))
    read, write = _mea_dq(grid)
    off_read, off_write = _mea_dq(grid, l2="off")
    assert np.all(np.asarray(read) <= np.asarray(off_read)) and np.all(np.asarray(write) <= np.asarray(off_write))


def test_schedule_caveats_where_the_causal_schedule_is_estimated():
    # 2 heads of 32k, d = 128 on the H200: 2 · 256 = 512 forward CTAs on 264 slots (2 to 4
    # waves, several heads); the backward's T_c = 256 K/V blocks per head > 132 slots
    w = Workload(n=32768, d=128, heads=2, kv_heads=1, dtype="bf16", causal=True)
    c = compare(w, H200, impl="sdpa-flash", backward=True)
    assert any("the causal grid's CTAs (512) fill 2 to 4 waves" in x for x in c.caveats)
    assert any("causal backward over several heads" in x for x in c.caveats)
    # one head: neither (its one wave and its groups are modelled as they run); not causal:
    # neither; 32 heads of 1024: 32 · 8 = 256 CTAs, one wave, and 8 K/V blocks a head: neither
    one_wave = Workload(n=1024, d=128, heads=32, kv_heads=8, dtype="bf16", causal=True)
    for other in (w.with_(heads=1, kv_heads=1), w.with_(causal=False), one_wave):
        got = compare(other, H200, impl="sdpa-flash", backward=True).caveats
        assert not any("2 to 4 waves" in x or "causal backward over several heads" in x for x in got)
    # a grid says how many rows
    g = Workload(n=np.array([32768, 1024]), d=128, heads=2, kv_heads=1, dtype="bf16", causal=True)
    lines = compare(g, H200, impl="sdpa-flash").caveats
    assert any(x.startswith("1 of 2 rows: the causal grid's CTAs fill") for x in lines)


def test_schedule_caveat_of_the_cutlass_backward_on_heads_longer_than_the_slots():
    # 32k at d = 128: T_c = 256 K/V blocks of 128 > 132 slots, so CTAs start one at a time and
    # each recomputes D over the head's O and dO (not counted); 2048: T_c = 16, none
    note = "causal memory-efficient backward on heads with more K/V blocks"
    w = Workload(n=32768, d=128, heads=2, dtype="fp16", causal=True)
    assert any(note in x for x in compare(w, H200, impl="sdpa-efficient", backward=True).caveats)
    short = Workload(n=2048, d=128, heads=2, dtype="fp16", causal=True)
    for other in (short, w.with_(causal=False)):
        assert not any(note in x for x in compare(other, H200, impl="sdpa-efficient", backward=True).caveats)
    assert not any(note in x for x in compare(w, H200, impl="sdpa-efficient").caveats)  # forward only
    g = Workload(n=np.array([32768, 2048]), d=128, heads=2, dtype="fp16", causal=True)
    lines = compare(g, H200, impl="sdpa-efficient", backward=True).caveats
    assert any(x.startswith("1 of 2 rows: " + note) for x in lines)
