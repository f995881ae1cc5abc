"""Timing modes (memmodel.host): the host/GPU pipeline of a call, calls queued, a CUDA graph's
replay; the host figures of a profile (parsed, refused, carried to other GPUs); the host ops of
compare's algorithms and of a trace; --timing on every command."""

from __future__ import annotations

import dataclasses
import gzip
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
    algorithm_ops,
    kernel_launches,
    stand_ins,
    times,
    user_note,
)

from .conftest import HARDWARE, REPO

US = 1e-6
#: synthetic host figures (seconds), put in place of the bundled profile's measured ones so that
#: the arithmetic pinned below is the tests' own (no launch_latency, no launch_share unless a
#: test sets them)
HOST = HostFigures(
    op_s=10 * US,
    view_s=2 * US,
    gemm_s=14 * US,
    autograd_node_s=4 * US,
    graph_launch_s=6 * US,
    graph_kernel_gap_s=0.5 * US,
)


#: an implementation's host figures (``implementations.<name>.<leaf>``)
CALL_LEAVES = ("call_host", "split_call_host", "backward_call_host")


def is_host_figure(fpath: str) -> bool:
    """Whether ``fpath`` (a profile's field path) is a host figure: ``host.*`` or a call's."""
    return fpath.startswith("host.") or (
        fpath.startswith("implementations.") and fpath.rpartition(".")[2] in CALL_LEAVES
    )


def bare(profile):
    """``profile`` without any host figure: no ``host``, no implementation's call figures (nor
    their provenance), as every profile was before the host probe was measured."""
    p = dataclasses.replace(
        profile,
        host=None,
        provenance={k: v for k, v in profile.provenance.items() if not is_host_figure(k)},
        figures={k: v for k, v in profile.figures.items() if not is_host_figure(k)},
    )
    return p.with_implementation_figures(None, **{f"{leaf}_s": None for leaf in CALL_LEAVES})


def with_host(
    profile=None, host: HostFigures | None = HOST, *, launch: float = 1.38 * US, event: float = 1.5 * US, **calls
):
    """``profile`` (default h200) stripped of its host figures (:func:`bare`), then given ``host``
    figures, a launch and an event overhead, and ``calls``: implementation -> (call_host,
    backward_call_host) seconds."""
    p = dataclasses.replace(
        bare(profile or load_profile("h200")), host=host, launch_overhead_s=launch, event_overhead_s=event
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


def test_a_launch_latency_and_a_split_launch_share_pinned():
    """host.launch_latency L = 8 us: a kernel starts L after its op issues it (start = max(G_prev,
    H_i + L)); a decode that splits K/V launches after host.split_launch_share (0.5) of its
    split_call_host (40 us), not after launch_share (0.9)."""
    host = dataclasses.replace(HOST, launch_latency_s=8 * US, launch_share=0.9, split_launch_share=0.5)
    p = with_host(host=host, sdpa_flash=(30 * US, None)).with_implementation_figures(
        "sdpa-flash", split_call_host_s=40 * US
    )
    # two ops of 10 us, kernels of 2 and 3 us: H = 10, 20
    t = times([HostOp(10 * US, (0,)), HostOp(10 * US, (1,))], [2 * US, 3 * US], p)
    # kernel 0 runs max(0, 10 + 8) = 18..20, kernel 1 max(20, 20 + 8) = 28..31
    # call = max(31, 20) + 1.5 = 32.5 us (without L: 10..12, 20..23: 24.5 us)
    assert t.call_s == approx(32.5 * US)
    assert t.queued_s == approx(20 * US)  # max(host 20, kernels 5): L delays, it takes no host time
    assert t.graph_s == approx((6 + 5 + 2 * (0.5 - 1.38)) * US)  # 9.24 us: a replay issues no op
    # a decode: sdpa-flash splits K/V (its split kernel, then the combine), one call of 40 us
    c = compare(DECODE, p, impl="sdpa-flash")
    assert [k.kind for k in c.tiled.traffic.kernels] == ["split_kv", "combine"]
    ops, _ = algorithm_ops(c.tiled.traffic, p, "sdpa-flash")
    assert len(ops) == 1 and ops[0].kernels == (0, 1)
    assert (ops[0].host_s, ops[0].launch_s) == approx((40 * US, 20 * US))
    t = times(ops, [15 * US, 3 * US], p)
    # launched at 0.5 × 40 = 20 us: kernel 0 runs max(0, 20 + 8) = 28..43, kernel 1 43..46;
    # call = max(46, H = 40) + 1.5 = 47.5 us (at launch_share 0.9: 36 + 8 = 44..59..62, 63.5 us)
    assert t.call_s == approx(47.5 * US)
    assert t.host_s == approx(40 * US) and t.queued_s == approx(40 * US)
    # the comparison's own kernel times k0, k1: 20 + 8 + k0 + k1 + 1.5 (the GPU is the later)
    k = [kt.time_s for kt in c.tiled.timing.kernels]
    assert c.tiled.times.call_s == approx(28 * US + k[0] + k[1] + 1.5 * US)


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
    assert "\n" not in line and line.startswith("--timing call: h200 gives no host figures (host.*: what issuing")
    assert "use --timing kernel" in line
    with pytest.raises(TimingError, match=r"--timing graph: h200 gives no host figures \(host\.\*"):
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
    own = compare(DECODE, p.with_implementation_figures("sdpa-cudnn", call_host_s=25 * US), impl="sdpa-cudnn")
    own = own.tiled.times
    assert own.host_s == approx(25 * US) and own.notes == ()


def test_no_call_figure_anywhere_names_the_figure_and_its_stand_ins():
    p = with_host()  # host figures, but no implementation's call_host
    tiled = compare(DECODE, p, impl="sdpa-cudnn").tiled
    t = tiled.host_times
    assert t.call_s is None and t.graph_s is not None  # a graph issues no host op
    with pytest.raises(TimingError, match="--timing call: h200 gives no implementations.sdpa-cudnn.call_host"):
        _ = tiled.times  # every mode, or the first figure missing: what a validate record scores
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
    # a decode's split kernel: its own launch alone (no memset before it, the records' profiler lists);
    # a prefill's forward: its memset's launch and its own
    assert kernel_launches(compare(DECODE, p, impl="sdpa-cudnn").tiled.traffic.kernels[0], "sdpa-cudnn") == 1.0
    prefill = Workload(n=1024, d=128, heads=8, dtype="bf16")
    fwd = next(k for k in compare(prefill, p, impl="sdpa-cudnn").tiled.traffic.kernels if k.name == "fa2_fwd")
    assert kernel_launches(fwd, "sdpa-cudnn") == 2.0


def _host_probe_record() -> list[dict]:
    """The committed record of the host microbenchmark on the lent H200, one dict a line."""
    from memmodel.calibration.host import RECORD

    with gzip.open(REPO / RECORD, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def test_the_bundled_h200_holds_the_host_figures_fitted_to_its_probe():
    """Every host figure of the bundled h200, and only those, is what memmodel.calibration.host
    fits to the committed record (at the profile's own event_overhead), as written: 4 digits;
    each cites the probe's source."""
    from memmodel.calibration.host import SOURCE, fitted

    h200 = load_profile("h200")
    found = fitted(_host_probe_record(), h200.event_overhead_s)
    assert found["host"] and found["implementations"]
    host = dataclasses.asdict(h200.host)
    fitted_host = {
        f"{name}_s" if not name.endswith("launch_share") else name: v for name, (v, _) in found["host"].items()
    }
    assert set(fitted_host) <= set(host)
    assert {k: v for k, v in host.items() if v is not None} == pytest.approx(fitted_host, rel=5e-4)
    calls = {
        name: {f"{leaf}_s": getattr(f, f"{leaf}_s") for leaf in CALL_LEAVES if getattr(f, f"{leaf}_s") is not None}
        for name, f in h200.implementation_figures.items()
    }
    fitted_calls = {
        name: {f"{leaf}_s": v for leaf, (v, _) in mine.items()} for name, mine in found["implementations"].items()
    }
    # FlashInfer's wrappers, from their own probe (memmodel.calibration.library_host): 4 digits
    from memmodel.calibration import library_host

    for row in library_host.rows(Path(__file__).resolve().parent.parent):
        leaf, _ = library_host.FIGURES[(row["impl"], row["shape"])]
        fitted_calls.setdefault(row["impl"], {})[f"{leaf}_s"] = float(f"{row['host_s']:.4g}")
    assert fitted_calls["flashmla"]["call_host_s"] == pytest.approx(28.98e-6, rel=1e-3)
    # which figures, exactly, then their values
    assert {(name, k) for name, c in calls.items() for k in c} == {
        (name, k) for name, c in fitted_calls.items() for k in c
    }
    for name, mine in fitted_calls.items():
        assert calls[name] == pytest.approx(mine, rel=5e-4), name
    # every figure cites the probe: a measured source, with its command and date
    cited = sorted(k for k in h200.provenance if is_host_figure(k))
    assert len(cited) == len(fitted_host) + sum(len(c) for c in fitted_calls.values())
    assert (
        {h200.provenance[k].source for k in cited}
        == {SOURCE, library_host.SOURCE}
        == {
            "measured-host",
            "measured-flashinfer-host",
        }
    )
    assert {k for k in cited if h200.provenance[k].source == library_host.SOURCE} == {
        "implementations.flashmla.call_host",
        "implementations.flashinfer.call_host",
        "implementations.flashinfer.split_call_host",
    }
    assert {h200.provenance[k].kind for k in cited} == {"measured"}
    source = h200.sources[SOURCE]
    assert source.date == "2026-12-03" and source.command == "python3 validation/probes/host_probe.py host-probe.jsonl"
    # so every mode has a time on the bundled profile: nothing stands in for sdpa-flash's call
    t = compare(DECODE, h200, impl="sdpa-flash").tiled.times
    assert all(t.of(mode) > 0 for mode in TIMINGS) and t.notes == ()


def test_other_gpus_carry_the_h200s_host_figures_and_its_call_figures_only_to_nvidia():
    """h100-sxm (derive_from: h200) carries every host.* figure as it is, by the rule ``same``
    (the CPU and torch set them), the gap between a graph's kernels by the same cycles, and the
    call figures; mi300x (transfer_from: h200, AMD) carries host.* with a caveat, no call figure."""
    from memmodel.hardware.derive import derive_rule

    h200, h100, mi300x = (load_profile(name) for name in ("h200", "h100-sxm", "mi300x"))
    assert h100.derived_from == "h200" and mi300x.transferred_from == "h200"
    for field in dataclasses.fields(HostFigures):
        fpath = "host." + field.name.removesuffix("_s")
        mine, theirs = getattr(h100.host, field.name), getattr(h200.host, field.name)
        if theirs is None:  # a figure the h200's microbenchmark did not measure: none to carry
            assert mine is None, fpath
            continue
        assert mine is not None, fpath
        prov = h100.provenance[fpath]
        assert prov.source == "derived" and prov.kind == "derived", fpath
        if fpath == "host.graph_kernel_gap":  # the GPU's: the same cycles at h100-sxm's clock
            assert derive_rule(fpath) == "cycles" and prov.note.startswith("the same cycles")
            assert mine == pytest.approx(theirs * h200.clock_hz / h100.clock_hz)
            continue
        assert derive_rule(fpath) == "same" and mine == theirs, fpath
        assert prov.note.startswith("from h200's host, measured 2026-12-03, carried as is: the CPU and torch set it"), (
            fpath
        )
        assert prov.note.endswith(": " + h200.provenance[fpath].text), fpath
    for name, f in h200.implementation_figures.items():
        for leaf in CALL_LEAVES:
            assert getattr(h100.implementation(name), f"{leaf}_s") == getattr(f, f"{leaf}_s"), (name, leaf)
    assert "carried as is" in h100.provenance["implementations.sdpa-flash.call_host"].note
    # another vendor: the host's figures with a caveat, no library call's
    assert mi300x.host.op_s == h200.host.op_s
    assert mi300x.provenance["host.op"].note.endswith("(NVIDIA's figure, taken the same on AMD: not measured)")
    assert not [k for k in mi300x.provenance if is_host_figure(k) and k.startswith("implementations.")]
    for f in mi300x.implementation_figures.values():
        assert (f.call_host_s, f.split_call_host_s, f.backward_call_host_s) == (None, None, None), f.name


def test_a_profile_without_host_figures_gives_the_kernel_time_and_says_so():
    """Where a profile has no host figure, the modes say so, never guess."""
    c = compare(DECODE, bare(load_profile("h200")))
    assert c.tiled.host_times.call_s is None and c.tiled.host_times.kernel_s == approx(c.tiled.timing.time_s)
    assert user_note(c.tiled.host_times, str) is None
    with pytest.raises(TimingError, match="--timing call: h200 gives no host figures"):
        _ = c.tiled.times


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


# --- the profile's host figures -----------------------------------------------------------------


def _h200_data() -> dict:
    """The bundled h200 profile's YAML without its host figures: no ``host:`` section, no
    implementation's call figures, no ``measured-host`` source (what the probe added)."""
    data = yaml.safe_load((HARDWARE / "h200.yaml").read_text())
    del data["host"], data["sources"]["measured-host"]
    for figures in data["implementations"].values():
        for leaf in CALL_LEAVES:
            figures.pop(leaf, None)
    return data


def bare_h200(folder: Path) -> Path:
    """The bundled h200 profile without host figures (:func:`_h200_data`), written to
    ``folder/h200.yaml`` (in a user's config folder it shadows the bundled profile)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "h200.yaml"
    path.write_text(yaml.safe_dump(_h200_data(), sort_keys=False))
    return path


def h200_with_host(folder: Path, name: str = "h200", **host: str) -> Path:
    """The h200 profile with the synthetic host figures (:data:`HOST`) and sdpa-flash's call
    figures in place of the measured ones, written to ``folder/NAME.yaml`` (a user's config
    folder shadows the bundled profile of that name)."""
    data = _h200_data()
    data["name"] = name
    figures = {"op": "10 us", "view": "2 us", "gemm": "14 us", "autograd_node": "4 us"}
    figures |= {"graph_launch": "6 us", "graph_kernel_gap": "500 ns", **host}
    data["host"] = {k: {"value": v, "source": "measured", "note": "test"} for k, v in figures.items() if v}
    flash = data["implementations"]["sdpa-flash"]
    flash["call_host"] = {"value": "30 us", "source": "measured"}
    flash["backward_call_host"] = {"value": "60 us", "source": "measured"}
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture
def measured_host(tmp_path: Path) -> Path:
    """h200 with the synthetic host figures, found by name before the bundled one (the other GPUs
    carry them from it)."""
    return h200_with_host(tmp_path / "config" / "memmodel" / "hardware")


@pytest.fixture
def no_host(tmp_path: Path) -> Path:
    """h200 without host figures, found by name before the bundled one."""
    return bare_h200(tmp_path / "config" / "memmodel" / "hardware")


@pytest.fixture
def bare_file(tmp_path: Path) -> Path:
    """h200 without host figures, as a file given by its path (beside ``measured_host``)."""
    return bare_h200(tmp_path / "bare")


def test_a_profiles_host_figures_are_parsed_in_seconds(measured_host):
    p = load_profile("h200")
    assert p.host == HostFigures(
        op_s=pytest.approx(10e-6),
        view_s=pytest.approx(2e-6),
        gemm_s=pytest.approx(14e-6),
        autograd_node_s=pytest.approx(4e-6),
        graph_launch_s=pytest.approx(6e-6),
        graph_kernel_gap_s=pytest.approx(0.5e-6),
    )
    flash = p.implementation("sdpa-flash")
    assert flash.call_host_s == pytest.approx(30e-6) and flash.backward_call_host_s == pytest.approx(60e-6)
    assert p.provenance["host.op"].text == "10 us" and p.provenance["host.op"].kind == "measured"


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("op", "-3 us", "host.op: '-3 us' must be a positive, finite quantity"),
        ("view", "0 us", "host.view: '0 us' must be a positive, finite quantity"),
        ("gemm", "14", "host.gemm: unit '(none)' in '14' is not a time"),
        ("op", "12 ms", "host.op: '12 ms' is not a plausible host time of one op (under 1 ms)"),
        (
            "graph_kernel_gap",
            "2 ms",
            "host.graph_kernel_gap: '2 ms' is not a plausible gap between two kernels (under 1 ms)",
        ),
    ],
)
def test_bad_host_figures_are_refused_in_one_line(tmp_path, field, value, message):
    path = h200_with_host(tmp_path, **{field: value})
    with pytest.raises(Exception) as err:
        load_file(path)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_absurd_call_figures_and_unknown_host_keys_are_refused(tmp_path):
    data = _h200_data()
    data["implementations"]["sdpa-cudnn"]["call_host"] = "0.5 s"
    path = tmp_path / "x.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(
        Exception,
        match=r"implementations.sdpa-cudnn.call_host: '0.5 s' is not a plausible host time of one library call \(under 100 ms\)",
    ):
        load_file(path)
    data = _h200_data()
    data["host"] = {"opp": "3 us"}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(Exception, match=r"host.opp: unknown key \(did you mean 'op'\?\)"):
        load_file(path)


def test_host_figures_carry_as_is_and_the_graph_gap_by_the_cycles_rule(measured_host):
    h200 = load_profile("h200")
    a100 = load_profile("a100")  # transfer_from: h200, another architecture
    h100 = load_profile("h100-sxm")  # derive_from: h200, the same architecture
    mi300x = load_profile("mi300x")  # another vendor
    for p in (a100, h100, mi300x):
        assert p.host.op_s == h200.host.op_s and p.host.autograd_node_s == h200.host.autograd_node_s
        note = p.provenance["host.op"].note
        assert note.startswith(
            "from h200's host, measured 2026-12-01, carried as is: the CPU and torch set it, not the GPU: 10 us"
        )
    # the GPU's own gap between a graph's kernels: the same cycles at this GPU's clock (1980 / 1410 MHz)
    assert a100.host.graph_kernel_gap_s == pytest.approx(0.5e-6 * 1980 / 1410, rel=1e-3)
    assert "the same cycles" in a100.provenance["host.graph_kernel_gap"].note
    # a library call's host time goes to GPUs of its vendor only
    assert a100.implementation("sdpa-flash").call_host_s == pytest.approx(30e-6)
    assert "carried as is" in a100.provenance["implementations.sdpa-flash.call_host"].note
    assert mi300x.implementation("sdpa-flash").call_host_s is None
    assert "NVIDIA's figure, taken the same on AMD" in mi300x.provenance["host.op"].note


def test_hardware_show_lists_host_figures_or_says_there_are_none(run, measured_host, bare_file):
    r = run("hardware", "show", "h200", "--format", "json")
    host = json.loads(r.stdout)["host"]
    assert host["op_s"] == pytest.approx(10e-6) and host["implementations"]["sdpa-flash"][
        "call_host_s"
    ] == pytest.approx(30e-6)
    assert "host.graph_kernel_gap" in run("hardware", "show", "h200").stdout
    bare = run("hardware", "show", "b200")  # bundled: b200 transfers from the bundled h200 (shadowed here)
    assert bare.exit_code == 0
    plain = run("hardware", "show", str(bare_file))
    assert (
        "host: none" in plain.stdout
        and json.loads(run("hardware", "show", str(bare_file), "--format", "json").stdout)["host"] is None
    )


# --- a trace's host ops -------------------------------------------------------------------------


def test_a_traces_ops_map_to_host_figures_and_autograd_nodes_pinned():
    from memmodel.tracing import host_ops
    from memmodel.tracing.kernels import OpMapping

    p = with_host(sdpa_flash=(30 * US, 60 * US))
    ops = [
        OpMapping("aten.transpose.int", "forward", "free", (), ()),
        OpMapping("aten.bmm.default", "forward", "kernel", ("bmm",), ()),
        OpMapping("aten._softmax.default", "forward", "kernel", ("_softmax",), ()),
        OpMapping("sdpa", "forward", "sdpa", ("sdpa:fa2_fwd",), (), "sdpa-flash"),
        OpMapping("aten.foo.default", "forward", "unmodelled", (), ()),
        OpMapping("aten.view.default", "backward", "free", (), (), None, 2),
        OpMapping("aten.mm.default", "backward", "kernel", ("mm",), (), None, 1),
        OpMapping("sdpa_backward", "backward", "sdpa", ("sdpa:fa2_bwd",), (), "sdpa-flash", 1),
    ]
    index = {"bmm": 0, "_softmax": 1, "sdpa:fa2_fwd": 2, "mm": 3, "sdpa:fa2_bwd": 4}
    out, notes = host_ops(ops, index, 6, p)
    seconds = [op.host_s for op in out]
    assert seconds == approx(
        [
            2 * US,  # view
            14 * US,  # bmm: a GEMM
            10 * US,  # softmax: another op
            30 * US,  # sdpa-flash's call
            10 * US,  # unmodelled: an op, its kernels unknown
            2 * US + 2 * 4 * US,  # a view after two nodes began
            14 * US + 4 * US,  # mm after one more
            60 * US,  # the fused backward: its own node is in backward_call_host
            2 * 4 * US,  # 6 nodes seen, 4 charged before ops: the last 2 close the backward
        ]
    )
    assert [op.kernels for op in out] == [(), (0,), (1,), (2,), (), (), (3,), (4,), ()]
    assert notes == ()


@pytest.mark.filterwarnings("ignore")
def test_a_traced_backward_counts_autograd_nodes_as_the_engine_runs_them():
    pytest.importorskip("torch")
    from memmodel import trace
    from memmodel.tracing import load_function

    p = with_host(sdpa_flash=(30 * US, 60 * US), sdpa_cudnn=(25 * US, 50 * US))
    shapes = {"q": (1, 8, 1024, 64), "k": (1, 8, 1024, 64), "v": (1, 8, 1024, 64)}
    fn, label = load_function("examples/attention/sdpa.py:attention")
    t = trace(fn, shapes, dtype="bf16", backward=True, profile=p, name=label)
    fused = [o for o in t.ops if o.status == "sdpa"]
    assert [(o.pass_, o.implementation) for o in fused] == [("forward", "sdpa-cudnn"), ("backward", "sdpa-cudnn")]
    assert fused[1].nodes >= 1 and t.backward_nodes >= fused[1].nodes  # its own node, and q, k, v's
    # host: the call 25, its backward 50, every other node 4 us
    assert t.times.host_s == approx(75 * US + (t.backward_nodes - 1) * 4 * US)
    assert sum(o.nodes for o in t.ops if o.pass_ == "forward") == 0
    fn, label = load_function("examples/attention/memmodel_eager.py:attention")
    eager = trace(fn, shapes, dtype="bf16", backward=True, profile=p, name=label)
    # each matmul's backward node runs two GEMMs, the softmax's one kernel: nodes outnumber neither
    backward = [o for o in eager.ops if o.pass_ == "backward"]
    assert sum(o.nodes for o in backward) <= eager.backward_nodes
    assert eager.backward_nodes >= sum(1 for o in eager.ops if o.pass_ == "forward" and o.status == "kernel")
    assert eager.times.call_s >= eager.times.kernel_s


# --- the commands ----------------------------------------------------------------------------------

COMPARE = ("compare", "--n", "1", "--n-kv", "4096", "--d", "128", "--heads", "8", "--dtype", "bf16", "--gpu", "h200")
QKV = ("--shape", "q=1,8,1024,64", "--shape", "k=1,8,1024,64", "--shape", "v=1,8,1024,64", "--dtype", "bf16")
COMMANDS = {
    "compare": COMPARE[1:],
    "roofline": COMPARE[1:],
    "sweep": ("--n", "1", "--n-kv", "1024,4096", "--d", "128", "--heads", "8", "--dtype", "bf16", "--gpu", "h200"),
    "trace": ("examples/attention/sdpa.py:attention", *QKV, "--gpu", "h200"),
}


def one_error_line(r) -> str:
    assert r.exit_code == 2, r.output
    assert r.stdout == "" and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    return lines[0]


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("timing", ["call", "queued", "graph"])
def test_every_command_takes_a_timing(run, measured_host, command, timing):
    if command == "trace":
        pytest.importorskip("torch")
    r = run(command, *COMMANDS[command], "--timing", timing)
    assert r.exit_code == 0, r.output
    assert f"timing {timing} (" in r.stdout.splitlines()[0]  # the mode in the header line
    fmt = ("--format", "jsonl") if command == "sweep" else ("--format", "json")
    r = run(command, *COMMANDS[command], "--timing", timing, *fmt)
    assert r.exit_code == 0, r.output
    if command == "sweep":
        rows = [json.loads(line) for line in r.stdout.splitlines()]
        assert {row["timing"] for row in rows} == {timing}
        for row in rows:
            assert row["predicted_time_s"] >= 0 and row["kernel_time_s"] > 0 and row["host_time_s"] > 0
            # the range: the records' errors of this timing mode (validated.json's mode_ranges)
            assert row["predicted_time_low_s"] <= row["predicted_time_s"] <= row["predicted_time_high_s"]
        return
    data = json.loads(r.stdout)
    assert data["timing"] == timing
    if command == "roofline":
        total = [p for p in data["gpus"][0]["points"] if p["kernel"] == "total"]
        assert len(total) == 2 and all(p["predicted_time_s"] > 0 for p in total)
        return
    for alg in data["algorithms"]:
        assert set(alg["predicted_times_s"]) == set(TIMINGS)
        assert alg["predicted_time_s"] == alg["predicted_times_s"][timing]
        assert alg["host_time_s"] > 0
        low, high = alg["predicted_time_range_s"]  # from this timing mode's errors in the records
        assert low <= alg["predicted_time_s"] <= high


def test_compare_json_keys_under_the_default_timing(run, measured_host, bare_file):
    data = json.loads(run(*COMPARE, "--format", "json").stdout)
    assert data["timing"] == "kernel" and data["options"]["timing"] == "kernel"
    for alg in data["algorithms"]:
        assert alg["predicted_time_s"] == alg["predicted_times_s"]["kernel"]
        assert alg["predicted_times_s"]["call"] > alg["predicted_times_s"]["kernel"]
    # a profile without host figures: the other modes null
    bare = json.loads(run(*COMPARE[:-1], str(bare_file), "--format", "json").stdout)
    assert bare["algorithms"][1]["predicted_times_s"]["call"] is None and bare["algorithms"][1]["host_time_s"] is None


def test_the_csvs_gain_timing_columns_only_under_another_mode(run, measured_host):
    kernel = run(*COMPARE, "--format", "csv").stdout.splitlines()[0].split(",")
    call = run(*COMPARE, "--format", "csv", "--timing", "call").stdout.splitlines()
    assert call[0].split(",") == [*kernel, "timing", "kernel_time_s", "host_time_s"]
    total = [line for line in call if ",total," in line and line.startswith("h200,tiled")]
    # cuDNN's decode grid, 32 splits x 8 K/V heads = 256 CTAs: its split kernel 3.735 us of HBM (16.9 MB at
    # 4.528 TB/s, over the CTAs' own rate: 66.1 kB at 51.58 GB/s, x 1.338 for the second CTA on an SM = 1.714
    # us) + 1.38 us of launch (no memset before a decode) + one wave's 3.05 us = 8.165 us, its combine
    # 2.429 + 1.38 = 3.809 us: 11.974 us of kernels
    assert len(total) == 1 and total[0].endswith(",call,1.1973683032822026e-05,2.9999999999999997e-05")
    sweep = run(*("sweep", *COMMANDS["sweep"]), "--format", "csv").stdout.splitlines()[0]
    assert "timing" not in sweep.split(",")
    timed = run(*("sweep", *COMMANDS["sweep"]), "--format", "csv", "--timing", "call").stdout.splitlines()[0]
    assert timed == sweep + ",timing,kernel_time_s,host_time_s"


def test_a_tables_call_time_is_the_pipelines(run, measured_host):
    r = run(*COMPARE, "--impl", "sdpa-flash", "--timing", "call")
    assert r.exit_code == 0
    lines = {line.split("  ")[0].strip(): line for line in r.stdout.splitlines()}
    assert "30.000 us" in lines["host time (issuing it)"]
    data = json.loads(run(*COMPARE, "--impl", "sdpa-flash", "--timing", "call", "--format", "json").stdout)
    tiled = data["algorithms"][1]
    # one call: 30 us of host, then its kernels, then the end event's 1.532 us (the h200's event_overhead)
    assert tiled["predicted_time_s"] == pytest.approx(30e-6 + tiled["predicted_times_s"]["kernel"] + 1.532e-6)
    assert f"{tiled['predicted_time_s'] * 1e6:.3f} us" in lines["predicted time, call"]


def test_the_default_timing_notes_a_users_timer_once(run, measured_host, bare_file):
    r = run(*COMPARE)
    notes = [line for line in r.stderr.splitlines() if "a user's timer" in line]
    assert notes == [
        "memmodel: a user's timer around one call sees 43.506 us (--timing call), its kernels 11.974 us: host dispatch"
    ]
    assert not any("a user's timer" in line for line in run(*COMPARE, "--timing", "call").stderr.splitlines())
    # no host figures: nothing said, nothing guessed
    bare = run(*COMPARE[:-1], str(bare_file))
    assert "a user's timer" not in bare.stderr


def test_the_stand_in_is_said_under_call_timing(run, measured_host):
    r = run(*COMPARE, "--impl", "sdpa-cudnn", "--timing", "queued")
    assert (
        "memmodel: host time of a call: h200 gives no implementations.sdpa-cudnn.call_host: sdpa-flash's call_host stands in"
        in r.stderr
    )
    assert "stands in" not in run(*COMPARE, "--impl", "sdpa-cudnn").stderr


@pytest.mark.parametrize("command", list(COMMANDS))
def test_missing_host_figures_are_one_line_and_exit_2(run, no_host, command):
    if command == "trace":
        pytest.importorskip("torch")
    line = one_error_line(run(command, *COMMANDS[command], "--timing", "call"))
    assert line.startswith("memmodel: error: --timing call: h200 gives no host figures")
    assert line.endswith("or use --timing kernel")
    graph = one_error_line(run(command, *COMMANDS[command], "--timing", "graph"))
    assert graph.startswith("memmodel: error: --timing graph: h200 gives no host figures (host.*")


def test_a_gpu_without_a_needed_call_figure_is_one_line_and_exit_2(run):
    """mi300x carries the h200's host.* figures but no library call's (another vendor's): a call
    under --timing call needs one, a graph's replay does not."""
    amd = ("compare", "--n", "1", "--n-kv", "4096", "--d", "128", "--heads", "8", "--dtype", "bf16", "--gpu", "mi300x")
    line = one_error_line(run(*amd, "--impl", "sdpa-flash", "--timing", "call"))
    assert line.startswith(
        "memmodel: error: --timing call: mi300x gives no implementations.sdpa-flash.call_host (host seconds of one "
        "call of the implementation)"
    )
    assert line.endswith("or use --timing kernel")
    assert run(*amd, "--impl", "sdpa-flash", "--timing", "graph").exit_code == 0


@pytest.mark.parametrize("command", list(COMMANDS))
def test_an_unknown_timing_is_a_usage_error(run, command):
    line = one_error_line(run(command, *COMMANDS[command], "--timing", "foo"))
    assert "Invalid value for '--timing': 'foo' is not one of 'kernel', 'call', 'queued', 'graph'" in line


def test_context_parallelism_takes_kernel_timing_only(run, measured_host):
    cp = ("--n", "8192", "--d", "128", "--heads", "8", "--dtype", "bf16", "--gpu", "h200", "--context-parallel", "2")
    for command in ("compare", "sweep"):
        line = one_error_line(run(command, *cp, "--timing", "call"))
        assert line == (
            "memmodel: error: --timing call with --context-parallel is not modelled: a step's time is its GPUs' "
            "kernels and messages (use --timing kernel)"
        )
    assert run("compare", *cp).exit_code == 0


def test_every_mode_is_in_the_help(run):
    for command in COMMANDS:
        text = " ".join(run(command, "--help").stdout.split())
        assert "--timing [kernel|call|queued|graph]" in text
        assert "profilers and benchmark loops report" in text


def test_a_default_sweep_notes_a_users_timer_once_and_writes_what_it_wrote(run, measured_host, bare_file):
    grid = ("sweep", "--n", "1,4096", "--n-kv", "1024:65536:x4", "--d", "128", "--heads", "8", "--dtype", "bf16")
    timed = run(*grid, "--gpu", "h200", "--format", "csv")
    bare = run(*grid, "--gpu", str(bare_file), "--format", "csv")
    # the call times kept for the note are never written out (the bare profile's rows name its path)
    assert timed.stdout == bare.stdout.replace(str(bare_file), "h200")
    notes = [line for line in timed.stderr.splitlines() if "a user's timer" in line]
    assert len(notes) == 1 and notes[0].startswith(
        "memmodel: a user's timer around one call sees more than the kernel time in 6 of 8 tiled rows (up to 4.7×"
    )
    assert "a user's timer" not in bare.stderr
    assert "a user's timer" not in run(*grid, "--gpu", "h200", "--timing", "call", "--format", "csv").stderr


# --- what the calibration measures beyond the spec's figures -----------------------------------


def test_a_call_that_launches_part_way_through_its_host_time_pinned():
    """A fused call of 30 us host that launches its kernels 12 us in (launch_share 0.4), then an
    op of 10 us: the kernels overlap the rest of the call's host time."""
    p = with_host()
    ops = [HostOp(30 * US, (0,), 12 * US), HostOp(10 * US, (1,))]
    t = times(ops, [20 * US, 2 * US], p)
    # kernel 0 runs 12..32; H = 30, then 40: kernel 1 runs 40..42; call = 42 + 1.5 = 43.5 us
    assert t.call_s == approx(43.5 * US)
    assert times([HostOp(30 * US, (0,)), HostOp(10 * US, (1,))], [20 * US, 2 * US], p).call_s == approx(
        (30 + 20 + 2) * US + 1.5 * US  # launched at its end: 30..50, then 50..52
    )


def test_a_decode_that_splits_takes_its_split_call_figure_and_the_launch_share():
    host = dataclasses.replace(HOST, launch_share=0.5, backward_pass_s=8 * US)
    p = with_host(host=host, sdpa_flash=(30 * US, 60 * US))
    p = p.with_implementation_figures("sdpa-flash", split_call_host_s=45 * US)
    decode = compare(DECODE, p, impl="sdpa-flash")
    assert any(k.kind == "split_kv" for k in decode.tiled.traffic.kernels)
    ops, _ = algorithm_ops(decode.tiled.traffic, p, "sdpa-flash")
    assert (ops[0].host_s, ops[0].launch_s) == (45 * US, 22.5 * US)
    prefill = Workload(n=4096, d=128, heads=8, dtype="bf16")
    ops, _ = algorithm_ops(compare(prefill, p, impl="sdpa-flash").tiled.traffic, p, "sdpa-flash")
    assert (ops[0].host_s, ops[0].launch_s) == (30 * US, 15 * US)
    # standard attention's backward: 3 nodes × 4 us and the pass's 8 us, once
    std = compare(DECODE, p, impl="sdpa-flash", backward=True).standard
    ops, _ = algorithm_ops(std.traffic, p, None)
    assert ops[3].host_s == approx(3 * 4 * US + 8 * US)
    # a grid of decodes and prefills: each row its own figure
    grid = compare(
        Workload(n=np.array([1, 4096]), n_kv=np.array([4096, 4096]), d=128, heads=8, dtype="bf16"), p, impl="sdpa-flash"
    )
    ops, _ = algorithm_ops(grid.tiled.traffic, p, "sdpa-flash")
    assert np.asarray(ops[0].host_s) == approx(np.array([45 * US, 30 * US]))


def test_the_figures_the_calibration_writes_load(tmp_path):
    """What ``memmodel calibrate``'s host step writes (values as it formats them, zeros where a
    difference clips at 0) loads: launch_latency, launch_share, backward_pass, split_call_host."""
    data = _h200_data()
    data["sources"]["measured-host"] = {"title": "host probe", "kind": "measured", "date": "2026-12-03"}

    def cite(value):
        return {"value": value, "source": "measured-host", "note": "test"}

    data["host"] = {
        "view": cite("1.9 us"),
        "op": cite("6.1 us"),
        "gemm": cite("11.2 us"),
        "launch_latency": cite("4.3 us"),
        "launch_share": cite("0.52"),
        "autograd_node": cite("0 us"),
        "backward_pass": cite("21.7 us"),
        "graph_launch": cite("7.8 us"),
        "graph_kernel_gap": cite("0 us"),
    }
    data["implementations"]["sdpa-cudnn"]["split_call_host"] = cite("55.4 us")
    path = tmp_path / "h200.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    p = load_file(path)
    assert p.host.launch_share == 0.52 and p.host.graph_kernel_gap_s == 0.0 and p.host.autograd_node_s == 0.0
    assert p.host.backward_pass_s == pytest.approx(21.7e-6) and p.host.launch_latency_s == pytest.approx(4.3e-6)
    assert p.implementation("sdpa-cudnn").split_call_host_s == pytest.approx(55.4e-6)
    data["host"]["launch_share"] = cite("1.5")
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(Exception, match=r"host.launch_share: '1.5' is not a share of a call's host time \(0 to 1\)"):
        load_file(path)
    data["host"]["launch_share"] = cite("0.52")
    data["host"]["op"] = cite("0 us")  # an op that costs the host nothing is no measurement
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(Exception, match="host.op: '0 us' must be a positive, finite quantity"):
        load_file(path)


def test_the_calibrations_host_figures_are_in_the_schema():
    """Every host figure has a field, a derive rule and a ceiling, so that calibrate writes it and
    every profile that transfers from the measured one carries it."""
    from memmodel.hardware.derive import derive_rule, host_set
    from memmodel.hardware.schema import FIELDS, HOST_CEILINGS, HOST_FIGURES

    for leaf in HOST_FIGURES:
        fpath = f"host.{leaf}"
        assert fpath in FIELDS and fpath in HOST_CEILINGS
        assert derive_rule(fpath) == ("cycles" if leaf == "graph_kernel_gap" else "same")
        assert host_set(fpath) == (leaf != "graph_kernel_gap")
    for leaf in ("call_host", "split_call_host", "backward_call_host"):
        fpath = f"implementations.sdpa-cudnn.{leaf}"
        assert fpath in FIELDS and fpath in HOST_CEILINGS and derive_rule(fpath) == "same" and host_set(fpath)


def test_a_runs_own_host_rows_replace_the_profiles_host_figures():
    """validate measures its machine's host first: a record's host rows time its calls."""
    import gzip

    from memmodel.calibration.host import fitted, with_host_figures

    path = Path(__file__).resolve().parent.parent / "validation" / "h200" / "host-probe" / "host-probe.jsonl.gz"
    rows = [json.loads(line) for line in gzip.open(path, "rt") if line.strip()]
    # a host twice as slow: every host time of every row doubled
    slow = [
        {k: (2 * v if k in ("host_s", "queued_s", "forward_host_s", "step_host_s") else v) for k, v in r.items()}
        for r in rows
    ]
    p = bare(load_profile("h200"))
    q = with_host_figures(p, slow)
    want = fitted(slow, p.event_overhead_s)
    assert (
        q.host.op_s == pytest.approx(want["host"]["op"][0]) and q.host.op_s > 1.5 * with_host_figures(p, rows).host.op_s
    )
    assert q.implementation("sdpa-flash").call_host_s == pytest.approx(
        want["implementations"]["sdpa-flash"]["call_host"][0]
    )
    assert with_host_figures(p, []) is p  # no rows: the profile as it was


def test_autograd_figures_from_host_bound_queued_chains():
    """Node costs read off queued paces of chains of 1, 4 and 16 multiplications and of views."""
    from memmodel.calibration.host import OPS, VIEWS, fitted

    rows = [{"section": "host", "class": "view", "op": o, "host_s": 2 * US} for o in VIEWS]
    for o in OPS:  # each op 10 us of host, its kernel 1 us: host-bound
        rows.append({"section": "host", "class": "op", "op": o, "host_s": 10 * US})
        rows.append(
            {"section": "call", "op": o, "queued_s": 10 * US, "kernel_s": 1 * US, "call_s": 20 * US, "kernels": [{}]}
        )
    paces = {
        ("mul", 1): (10, 100),
        ("mul", 4): (40, 220),
        ("mul", 16): (160, 700),
        ("view", 1): (12, 80),
        ("view", 16): (40, 183),
    }
    for (kind, n), (fwd, step) in paces.items():
        rows.append({"section": "autograd", "kind": kind, "n": n, "forward_host_s": 1.0, "step_host_s": 1.0,
                     "forward_queued_s": fwd * US, "step_queued_s": step * US})  # fmt: skip
    host = fitted(rows, 1.5 * US)["host"]
    # backward paces: mul 90, 180, 540 us; a node (540 − 180) / 12 = 30 us, less the op's 10
    assert host["autograd_node"][0] == pytest.approx(20 * US)
    assert host["backward_pass"][0] == pytest.approx(60 * US)  # 90 − 30
    # views: 68 and 143 us; a node (143 − 68) / 15 = 5 us, less the view's 2
    assert host["autograd_view_node"][0] == pytest.approx(3 * US)


def test_a_trace_charges_a_view_node_its_own_figure():
    pytest.importorskip("torch")
    from memmodel import trace

    def fn(x):
        return x.transpose(0, 1).contiguous() * 2.0

    p = with_host()
    t = trace(fn, {"x": (64, 64)}, dtype="bf16", backward=True, profile=p)
    cheap = dataclasses.replace(p, host=dataclasses.replace(p.host, autograd_view_node_s=0.0))
    t2 = trace(fn, {"x": (64, 64)}, dtype="bf16", backward=True, profile=cheap)
    # the nodes whose first op is a view (the transpose's and the copy's backward: views only)
    # cost 4 us of autograd_node each, none with the view figure 0
    view_nodes = sum(op.nodes for op in t.ops if op.pass_ == "backward" and op.status == "free")
    assert view_nodes == 2
    assert t.host_times.host_s - t2.host_times.host_s == pytest.approx(view_nodes * 4 * US)


def test_a_user_timers_range_comes_from_that_modes_errors():
    from memmodel.validated import _data, time_range, time_range_errors

    modes = _data()["mode_ranges"]
    assert set(modes) == {"call", "queued", "graph"}
    call = time_range_errors("measured", "call")
    assert call == modes["call"] and call["count"] >= 100
    # a prediction p with error e measures p / (1 + e): from p / (1 + high) to p / (1 + low)
    low, high = time_range("measured", 100e-6, "call")
    assert low == pytest.approx(100e-6 / (1 + call["high"])) and high == pytest.approx(100e-6 / (1 + call["low"]))
    # another class: its kernel range widened by the mode's spread about its median (factors multiply)
    kernel = time_range_errors("datasheet")
    wide = time_range_errors("datasheet", "queued")
    q = modes["queued"]
    assert wide["low"] == pytest.approx((1 + kernel["low"]) * (1 + q["low"]) / (1 + q["median"]) - 1, abs=1e-4)
    assert wide["high"] == pytest.approx((1 + kernel["high"]) * (1 + q["high"]) / (1 + q["median"]) - 1, abs=1e-4)
    assert wide["low"] <= kernel["low"] and wide["high"] >= kernel["high"]
    assert time_range_errors("measured", "kernel") == time_range_errors("measured")
