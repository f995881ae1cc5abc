"""One plan per tiled algorithm (memmodel.plan): built once per comparison, its typed facts the
ledger's params, timing free of kernel-name switches."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

import memmodel.model as model
import memmodel.plan as plan_module
from memmodel.hardware import load_profile
from memmodel.model import compare
from memmodel.options import options_for
from memmodel.plan import plan_tiled, planned_traffic
from memmodel.traffic.ledger import DROPOUT, FORWARD_GRID, HEAD_GRID, SPLIT_KV
from memmodel.workload import Workload

H200 = load_profile("h200")
REPO = Path(__file__).resolve().parent.parent

GQA_BATCHED = Workload(n=8192, d=128, heads=32, kv_heads=8, batch=4, dtype="bf16", causal=True)
TRAINING = Workload(n=4096, d=128, heads=16, dtype="bf16")
DECODE = Workload(n=1, n_kv=32768, d=128, heads=32, kv_heads=8, batch=16, dtype="bf16")


def _counting(monkeypatch, module, name):
    calls = []
    real = getattr(module, name)

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


@pytest.mark.parametrize(
    ("w", "kw"),
    [(GQA_BATCHED, {"impl": "sdpa-flash"}), (TRAINING, {"impl": "sdpa-flash", "backward": True}), (DECODE, {})],
)
def test_compare_plans_once(monkeypatch, w, kw):
    plans = _counting(monkeypatch, model, "plan_tiled")
    views = _counting(monkeypatch, plan_module, "kernel_workload")
    l2s = _counting(monkeypatch, plan_module, "base_l2")
    padded = _counting(monkeypatch, plan_module, "padded_head_dim")
    compare(w, H200, **kw)
    # one plan: the kernel's workload, its head dim and the L2 derived once for standard and tiled
    assert (len(plans), len(views), len(l2s), len(padded)) == (1, 1, 1, 1)


def test_the_facts_are_the_params_of_a_batched_gqa_grid():
    t = compare(GQA_BATCHED, H200, impl="sdpa-flash").tiled.traffic
    f = t.facts
    assert f.to_params() == t.params
    # T_r = 8192 / 128 = 64, T_c = 8192 / 64 = 128; 132 SMs × 2 CTAs = 264 at once
    assert (f.blocks.block_q, f.blocks.block_kv, f.blocks.t_r, f.blocks.t_c) == (128, 64, 64, 128)
    assert (f.ctas_per_sm, f.concurrent_ctas, f.splits) == (2, 264, 1)
    # the row between two query heads of a group: 4 batches · 2·(8192 + 8192)·128·2 B = 32 MiB
    assert f.gqa_row_bytes == 32 * 2**20 == t.params["gqa_row_bytes"]
    assert f.causal_curve == "fa2" and f.causal_live_bytes == t.params["causal_live_bytes"]
    assert f.l2_knee is False and f.l2_cross_wave is False and f.wave_drift is None
    assert list(t.params)[-3:] == ["gqa_row_bytes", "causal_live_bytes", "causal_curve"]  # the JSON's order


def test_the_facts_of_a_training_step_carry_the_backward_tiles():
    t = compare(TRAINING, H200, impl="sdpa-flash", backward=True).tiled.traffic
    b = t.facts.backward
    assert t.facts.to_params() == t.params
    # FlashAttention-2's backward at d = 128 with ≥ 144 KiB per block: 64 × 128, one CTA per SM (132)
    assert (b.block_q, b.block_kv, b.ctas_per_sm, b.concurrent_ctas) == (64, 128, 1, 132)
    assert b.source == t.params["backward_tiles_from"] == "flash_bwd_launch_template.h"
    assert t.facts.wave_drift == t.params["wave_drift"] > 0


def test_decoding_plans_the_kernel_workload_and_its_splits():
    opts = options_for("sdpa-flash", DECODE, H200)
    p = plan_tiled(DECODE, H200, opts)
    # FlashAttention-2 packs the group's 32 / 8 = 4 query heads as the rows of a K/V head
    assert (p.workload.n, p.workload.heads, p.given.n) == (4, 8, 1)
    assert p.exec_d == 128 and p.splits == 2 and p.facts.splits == 2
    t = planned_traffic(p)
    assert t.params["splits"] == 2 and [k.kind for k in t.kernels] == [SPLIT_KV, "combine"]
    # cuDNN (what auto picks): 16 × 8 = 128 (batch, K/V head) pairs pass half of 132 SMs: one split,
    # as the zero-shot record's Nsight grid (1, 8, 16) shows, of the same decode kernel, which then
    # writes O itself: no combine (validation/h200/cudnn-decode-rate-probe, batch 16 and 64)
    auto = plan_tiled(DECODE, H200, options_for("auto", DECODE, H200))
    assert auto.options.model_implementation == "sdpa-cudnn" and auto.splits == 1
    (kernel,) = planned_traffic(auto).kernels
    assert kernel.kind == SPLIT_KV and kernel.ctas == 16 * 8
    written = {t.tensor: t.role for t in kernel.transfers if t.level == "hbm" and t.direction == "write"}
    assert written == {"O": "output", "lse": "state"}


def test_fa1_facts_have_no_splits():
    w = Workload(n=4096, d=64, heads=8, dtype="fp16", causal=True)
    t = compare(w, H200, impl="paper", tiled="fa1").tiled.traffic
    # Algorithm 1: B_c = ⌈116736 / (4·64)⌉ = 456, B_r = min(456, 64) = 64; T_c = ⌈4096 / 456⌉ = 9
    assert (t.facts.blocks.block_q, t.facts.blocks.block_kv, t.facts.blocks.t_c) == (64, 456, 9)
    assert t.facts.splits is None and "splits" not in t.params and t.facts.to_params() == t.params
    assert {k.kind for k in t.kernels} == {HEAD_GRID}


def test_grid_facts_are_the_grid_params():
    w = Workload(
        n=np.array([1024, 8192, 32768]),
        d=128,
        heads=np.array([8, 32, 4]),
        kv_heads=np.array([8, 8, 4]),
        batch=np.array([1, 4, 1]),
        dtype="bf16",
    )
    t = compare(w, H200, impl="sdpa-flash").tiled.traffic
    for key, value in t.facts.to_params().items():
        assert np.array_equal(np.asarray(value), np.asarray(t.params[key])), key


def test_kernels_carry_their_kind():
    t = compare(TRAINING, H200, impl="sdpa-flash").tiled.traffic
    assert [k.kind for k in t.kernels] == [FORWARD_GRID]
    eager = compare(
        Workload(n=512, d=64, heads=2, dropout=0.1), H200, impl="sdpa-flash", backward=True, standard="eager"
    )
    assert [k.name for k in eager.standard.traffic.kernels if k.kind == DROPOUT] == ["dropout", "dropout_bwd"]


def test_timing_compares_no_kernel_name():
    """Timing reads a kernel's kind, never its name: no comparison has ``<x>.name`` on a side."""
    tree = ast.parse((REPO / "memmodel" / "timing.py").read_text())
    named = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(isinstance(s, ast.Attribute) and s.attr == "name" and _kernelish(s.value) for s in sides):
                named.append(node.lineno)
    assert named == []


def _kernelish(value: ast.expr) -> bool:
    """``k.name``, ``kernel.name``: a kernel's name (a profile's or an implementation's is fine)."""
    return isinstance(value, ast.Name) and value.id in ("k", "kernel", "kt")


def test_the_ast_check_finds_a_name_switch():
    bad = ast.parse('if k.name == "fa2_fwd":\n    pass\nx = "dropout" in kernel.name\n')
    found = [
        n.lineno
        for n in ast.walk(bad)
        if isinstance(n, ast.Compare)
        and any(
            isinstance(s, ast.Attribute) and s.attr == "name" and _kernelish(s.value) for s in [n.left, *n.comparators]
        )
    ]
    assert found == [1, 3]
