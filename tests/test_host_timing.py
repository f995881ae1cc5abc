"""Timing modes (memmodel.host): the host/GPU pipeline of a call, calls queued, a CUDA graph's
replay; the host figures of a profile (parsed, refused, carried to other GPUs); the host ops of
compare's algorithms and of a trace; --timing on every command."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from memmodel import Workload, compare
from memmodel.errors import TimingError
from memmodel.hardware import HostFigures, load_file, load_profile
from memmodel.host import (
    TIMINGS,
    HostOp,
    Times,
    algorithm_ops,
    kernel_launches,
    stand_ins,
    times,
    user_note,
)

from .conftest import HARDWARE

US = 1e-6
#: synthetic host figures (seconds): no bundled profile has measured ones yet
HOST = HostFigures(
    op_s=10 * US,
    view_s=2 * US,
    gemm_s=14 * US,
    autograd_node_s=4 * US,
    graph_launch_s=6 * US,
    graph_kernel_gap_s=0.5 * US,
)


def with_host(
    profile=None, host: HostFigures | None = HOST, *, launch: float = 1.38 * US, event: float = 1.5 * US, **calls
):
    """``profile`` (default h200) with ``host`` figures, a launch and an event overhead, and
    ``calls``: implementation -> (call_host, backward_call_host) seconds."""
    p = dataclasses.replace(
        profile or load_profile("h200"), host=host, launch_overhead_s=launch, event_overhead_s=event
    )
    for name, (fwd, bwd) in calls.items():
        p = p.with_implementation_figures(name.replace("_", "-"), call_host_s=fwd, backward_call_host_s=bwd)
    return p


def approx(x):
    return pytest.approx(x, rel=1e-12, abs=1e-18)


# --- the pipeline ------------------------------------------------------------------------


def test_a_host_bound_call_pinned():
    """Three ops of 10 us host each, one kernel each (2, 3, 4 us): the GPU waits for the host."""
    p = with_host()
    ops = [HostOp(10 * US, (0,)), HostOp(10 * US, (1,)), HostOp(10 * US, (2,))]
    t = times(ops, [2 * US, 3 * US, 4 * US], p)
    # H = 10, 20, 30; kernel 0 runs 10..12, kernel 1 20..23, kernel 2 30..34
    # call = max(G_last 34, H_total 30) + event 1.5 = 35.5 us
    assert t.call_s == approx(35.5 * US)
    assert t.kernel_s == approx(9 * US)  # 2 + 3 + 4
    assert t.host_s == approx(30 * US)
    assert t.queued_s == approx(30 * US)  # max(host 30, kernels 9)
    # graph: 6 + Σ(t_i - 1.38 + 0.5) = 6 + 9 - 3 × 0.88 = 12.36 us
    assert t.graph_s == approx(12.36 * US)


def test_a_gpu_bound_call_pinned():
    """Three ops of 1 us host each, kernels of 20, 30, 40 us: the host runs ahead."""
    p = with_host()
    ops = [HostOp(1 * US, (0,)), HostOp(1 * US, (1,)), HostOp(1 * US, (2,))]
    t = times(ops, [20 * US, 30 * US, 40 * US], p)
    # kernel 0 runs 1..21 (issued at H = 1), kernel 1 21..51 (H = 2), kernel 2 51..91 (H = 3)
    # call = max(91, 3) + 1.5 = 92.5 us
    assert t.call_s == approx(92.5 * US)
    assert t.queued_s == approx(90 * US)  # max(host 3, kernels 90)
    # graph: 6 + 90 - 3 × (1.38 - 0.5) = 93.36 us
    assert t.graph_s == approx(93.36 * US)


def test_a_view_and_an_op_of_two_kernels_pinned():
    """A view (host, no kernel), then one op launching two kernels, then a GEMM: a kernel waits
    for its whole op; launches count for the graph (kernel 1 launches twice)."""
    p = with_host()
    ops = [HostOp(2 * US), HostOp(10 * US, (0, 1)), HostOp(14 * US, (2,))]
    t = times(ops, [5 * US, 6 * US, 1 * US], p, launches=[1, 2, 1])
    # H: 2, 12, 26; kernel 0 runs 12..17, kernel 1 17..23, kernel 2 26..27
    # call = max(27, 26) + 1.5 = 28.5; graph = 6 + 12 + 4 launches × (0.5 - 1.38) = 14.48
    assert t.call_s == approx(28.5 * US)
    assert t.host_s == approx(26 * US)
    assert t.graph_s == approx(14.48 * US)


def test_every_kernel_is_launched_by_one_op():
    p = with_host()
    with pytest.raises(ValueError, match="each of the 2 kernels once"):
        times([HostOp(US, (0,))], [US, US], p)
    with pytest.raises(ValueError):
        times([HostOp(US, (0,)), HostOp(US, (0, 1))], [US, US], p)


def test_times_of_a_mode_and_unknown_modes():
    t = times([HostOp(10 * US, (0,))], [2 * US], with_host())
    assert [t.of(m) for m in TIMINGS] == [t.kernel_s, t.call_s, t.queued_s, t.graph_s]
    assert t.as_dict() == {"kernel": t.kernel_s, "call": t.call_s, "queued": t.queued_s, "graph": t.graph_s}
    with pytest.raises(TimingError, match="unknown timing 'foo': accepted are kernel, call, queued, graph"):
        t.of("foo")


def test_without_host_figures_the_modes_say_which_figure_is_missing():
    p = with_host(host=None)
    t = times(None, [2 * US], p, missing="host.gemm")
    assert t.kernel_s == approx(2 * US)
    assert t.call_s is t.queued_s is t.graph_s is t.host_s is None
    with pytest.raises(TimingError) as err:
        t.of("call")
    line = str(err.value)
    assert "\n" not in line and line.startswith("--timing call: h200 gives no host figures (host.gemm first")
    assert "use --timing kernel" in line
    with pytest.raises(TimingError, match="--timing graph: h200 gives no host figures .host.graph_launch"):
        t.of("graph")
    # one figure missing among others: that figure named
    partial = with_host(host=dataclasses.replace(HOST, graph_kernel_gap_s=None))
    with pytest.raises(TimingError, match="gives no host.graph_kernel_gap .GPU seconds between kernels"):
        times([HostOp(US, (0,))], [US], partial).of("graph")


SECONDS = st.floats(min_value=0.0, max_value=1e-2, allow_nan=False)


@st.composite
def pipelines(draw):
    """Ops (host seconds, kernels each) over kernels of drawn times, in launch order."""
    kernel_times = draw(st.lists(SECONDS, min_size=1, max_size=8))
    cuts = sorted(draw(st.sets(st.integers(1, len(kernel_times)), max_size=len(kernel_times))))
    bounds = [0, *[c for c in cuts if c < len(kernel_times)], len(kernel_times)]
    ops = [HostOp(draw(SECONDS), tuple(range(a, b))) for a, b in zip(bounds, bounds[1:])]
    views = draw(st.lists(st.tuples(st.integers(0, len(ops)), SECONDS), max_size=3))
    for at, h in sorted(views, reverse=True):
        ops.insert(at, HostOp(h))
    return ops, kernel_times


@given(pipelines(), SECONDS, SECONDS)
def test_properties_of_the_pipeline(pipeline, gap, graph_launch):
    ops, kernel_times = pipeline
    launch = 1.38 * US
    host = dataclasses.replace(HOST, graph_kernel_gap_s=min(gap, launch) or 1e-12, graph_launch_s=graph_launch)
    t = times(ops, [k + launch for k in kernel_times], with_host(host=host, launch=launch))
    eps = 1e-15
    assert t.call_s >= t.kernel_s - eps  # the kernels run one after another within a call
    assert t.call_s >= t.host_s - eps
    assert t.queued_s == max(t.host_s, t.kernel_s)
    assert t.call_s >= t.queued_s - eps  # one call at a time is never faster than calls queued
    # the graph replaces each launch overhead by a smaller gap: not slower while its launch is small
    if graph_launch <= len(kernel_times) * (launch - host.graph_kernel_gap_s):
        assert t.graph_s <= t.kernel_s + eps


@given(st.lists(st.tuples(pipelines(), pipelines()), min_size=1, max_size=4))
def test_a_grid_is_the_scalar_path_row_by_row(rows):
    """Kernel and host times as arrays (a grid's rows) give, row by row, the scalar results."""
    shape = rows[0][0]
    n_ops, n_kernels = len(shape[0]), len(shape[1])
    usable = [(a, b) for a, b in rows if len(a[0]) == n_ops and len(a[1]) == n_kernels]
    kernels = [tuple(op.kernels) for op in shape[0]]
    grid_rows = []
    for (ops, ktimes), _ in usable:
        if [tuple(op.kernels) for op in ops] != kernels:
            continue
        grid_rows.append(([op.host_s for op in ops], ktimes))
    p = with_host()
    host = np.array([r[0] for r in grid_rows])  # rows × ops
    kern = np.array([r[1] for r in grid_rows])  # rows × kernels
    grid = times([HostOp(host[:, i], k) for i, k in enumerate(kernels)], list(kern.T), p)
    for r, (hs, ks) in enumerate(grid_rows):
        one = times([HostOp(h, k) for h, k in zip(hs, kernels)], ks, p)
        for mode in (*TIMINGS, "host"):
            assert np.asarray(getattr(grid, f"{mode}_s"))[r] == pytest.approx(getattr(one, f"{mode}_s"), abs=1e-18)


# --- the host ops of compare's algorithms -----------------------------------------------------


DECODE = Workload(n=1, n_kv=4096, d=128, heads=8, dtype="bf16")


def test_standard_attention_is_one_aten_op_per_kernel_and_autograd_nodes_before_its_backward():
    p = with_host()
    c = compare(DECODE, p, impl="sdpa-flash", backward=True)
    ops, notes = algorithm_ops(c.standard.traffic, p, None)
    kernels = c.standard.traffic.kernels
    forward = [k for k in kernels if k.pass_ == "forward"]
    assert [k.op for k in forward] == ["gemm", "softmax", "gemm"]  # Algorithm 0: S = QKᵀ, P, O = PV
    # forward: gemm 14, softmax 10, gemm 14; then 3 nodes × 4 us; then each backward kernel
    assert [op.host_s for op in ops[:4]] == approx([14 * US, 10 * US, 14 * US, 12 * US])
    assert ops[3].kernels == ()
    backward = [(op.host_s, kernels[op.kernels[0]].op) for op in ops[4:]]
    assert all(h == (14 * US if kind == "gemm" else 10 * US) for h, kind in backward)
    assert sorted(i for op in ops for i in op.kernels) == list(range(len(kernels)))
    assert notes == ()


def test_a_tiled_call_is_one_op_a_pass_timed_by_its_call_host():
    p = with_host(sdpa_flash=(30 * US, 60 * US))
    c = compare(DECODE, p, impl="sdpa-flash", backward=True)
    ops, notes = algorithm_ops(c.tiled.traffic, p, "sdpa-flash")
    kernels = c.tiled.traffic.kernels
    assert [op.host_s for op in ops] == [30 * US, 60 * US]
    assert {kernels[i].pass_ for i in ops[0].kernels} == {"forward"}
    assert {kernels[i].pass_ for i in ops[1].kernels} == {"backward"}
    assert notes == ()
    t = c.tiled.times
    # forward: the call's 30 us host, then its kernels; backward: 60 us more host, then its kernels
    fwd = sum(c.tiled.timing.kernels[i].time_s for i in ops[0].kernels)
    bwd = sum(c.tiled.timing.kernels[i].time_s for i in ops[1].kernels)
    assert t.call_s == approx(max(30 * US + fwd, 90 * US) + bwd + 1.5 * US)
    assert t.host_s == approx(90 * US)


def test_an_implementation_without_call_figures_takes_a_stated_stand_in():
    assert stand_ins("sdpa-cudnn") == ("sdpa-cudnn", "sdpa-flash")
    assert stand_ins("flashmla") == ("flashmla", "fa3", "sdpa-flash")  # its rates' design first
    assert stand_ins("fa4") == ("fa4", "fa3", "sdpa-cudnn", "sdpa-flash")  # the same-design rule's chain
    assert stand_ins("fa1") == ("fa1", "sdpa-flash")  # the same-family rule's source
    assert stand_ins(None) == stand_ins("paper") == ("sdpa-flash",)
    p = with_host(sdpa_flash=(30 * US, 60 * US))
    c = compare(DECODE, p, impl="sdpa-cudnn")
    assert c.tiled.times.host_s == approx(30 * US)
    assert c.tiled.times.notes == (
        "host time of a call: h200 gives no implementations.sdpa-cudnn.call_host: sdpa-flash's call_host stands in",
    )
    paper = compare(DECODE, p, impl="paper").tiled.times
    assert paper.notes == (
        "host time of a call: the paper's algorithm is no library's call: sdpa-flash's call_host stands in",
    )
    own = compare(DECODE, with_host(p, sdpa_cudnn=(25 * US, None)), impl="sdpa-cudnn").tiled.times
    assert own.host_s == approx(25 * US) and own.notes == ()


def test_no_call_figure_anywhere_names_the_figure_and_its_stand_ins():
    p = with_host()  # host figures, but no implementation's call_host
    t = compare(DECODE, p, impl="sdpa-cudnn").tiled.times
    assert t.call_s is None and t.graph_s is not None  # a graph issues no host op
    with pytest.raises(TimingError) as err:
        t.of("queued")
    assert str(err.value).startswith(
        "--timing queued: h200 gives no implementations.sdpa-cudnn.call_host (host seconds of one call of the "
        "implementation), nor sdpa-flash's, which stand in"
    )


def test_the_math_fallback_dispatches_its_aten_ops_one_by_one():
    p = with_host()
    c = compare(DECODE, p, impl="sdpa-math")
    ops, _ = algorithm_ops(c.tiled.traffic, p, "sdpa-math")
    kernels = c.tiled.traffic.kernels
    assert len(ops) == len(kernels)
    assert [op.host_s for op in ops] == [14 * US if k.op == "gemm" else 10 * US for k in kernels]


def test_an_fp8_cache_cast_is_the_users_op_before_the_call():
    p = with_host(sdpa_flash=(30 * US, None))
    w = Workload(n=1, n_kv=4096, d=128, heads=8, dtype="bf16", kv_dtype="fp8")
    c = compare(w, p, impl="sdpa-flash")
    ops, _ = algorithm_ops(c.tiled.traffic, p, "sdpa-flash")
    names = [k.name for k in c.tiled.traffic.kernels]
    assert names[:2] == ["kv_cast_k", "kv_cast_v"]
    assert [(op.host_s, op.kernels) for op in ops[:2]] == [(10 * US, (0,)), (10 * US, (1,))]
    assert ops[2].host_s == 30 * US and ops[2].kernels == tuple(range(2, len(names)))


def test_launches_are_what_the_time_model_pays_launch_overhead_for():
    p = with_host()
    for impl in ("sdpa-cudnn", "sdpa-flash"):
        c = compare(DECODE, p, impl=impl, backward=False)
        for k, kt in zip(c.tiled.traffic.kernels, c.tiled.timing.kernels):
            n = kernel_launches(k, impl)
            assert kt.terms.get("launch", 0.0) == approx(n * p.launch_overhead_s)
    assert kernel_launches(compare(DECODE, p, impl="sdpa-cudnn").tiled.traffic.kernels[0], "sdpa-cudnn") == 2.0


def test_the_bundled_profiles_have_no_host_figures_yet():
    """No profile is given host figures until they are measured: the modes say so, never guess."""
    for path in sorted(HARDWARE.glob("*.yaml")):
        p = load_file(path)
        assert p.host is None, path.name
        assert all(f.call_host_s is None for f in p.implementation_figures.values()), path.name
    c = compare(DECODE, load_profile("h200"))
    assert c.tiled.times.call_s is None and c.tiled.times.kernel_s == approx(c.tiled.timing.time_s)
    assert user_note(c.tiled.times, str) is None


def test_a_comparisons_timing_option_sets_its_ratio_and_assumptions():
    p = with_host(sdpa_flash=(30 * US, 60 * US))
    kernel = compare(DECODE, p, impl="sdpa-flash")
    call = compare(DECODE, p, impl="sdpa-flash", timing="call")
    assert call.ratios()["predicted_time_s"] == approx(call.standard.times.call_s / call.tiled.times.call_s)
    assert kernel.ratios()["predicted_time_s"] == approx(kernel.standard.timing.time_s / kernel.tiled.timing.time_s)
    assert any(line.startswith("Timing 'call'") for line in call.assumptions)
    assert not any(line.startswith("Timing") for line in kernel.assumptions)
    with pytest.raises(TimingError, match="unknown timing 'wall'"):
        compare(DECODE, p, timing="wall")


def test_a_grid_comparison_times_every_row_as_one_workload_alone():
    p = with_host(sdpa_flash=(30 * US, 60 * US))
    ns = np.array([1, 512, 4096, 16384], dtype=np.int64)
    grid = compare(
        Workload(n=ns, n_kv=np.full(4, 4096, dtype=np.int64), d=128, heads=8, dtype="bf16"),
        p,
        impl="sdpa-flash",
        backward=True,
    )
    for i, n in enumerate(ns.tolist()):
        one = compare(Workload(n=n, n_kv=4096, d=128, heads=8, dtype="bf16"), p, impl="sdpa-flash", backward=True)
        for name in ("standard", "tiled"):
            g, o = getattr(grid, name).times, getattr(one, name).times
            for mode in (*TIMINGS, "host"):
                assert np.asarray(getattr(g, f"{mode}_s"))[i] == pytest.approx(getattr(o, f"{mode}_s"), rel=1e-9), (
                    name,
                    mode,
                    n,
                )


def test_the_note_names_a_users_timer_only_past_the_ratio():
    p = with_host()
    slow = times([HostOp(40 * US, (0,))], [8 * US], p)
    assert user_note(slow, lambda s: f"{s * 1e6:.1f} us") == (
        "a user's timer around one call sees 49.5 us (--timing call), its kernels 8.0 us: host dispatch"
    )
    fast = times([HostOp(1 * US, (0,))], [100 * US], p)  # 102.5 us: within 1.1 × 100
    assert user_note(fast, str) is None
