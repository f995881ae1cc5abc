"""Timing modes: what a timer sees around attention, beside the GPU's own kernel time.

The time model (:mod:`memmodel.timing`) predicts each kernel's time, queued back to back with
the profile's ``launch_overhead`` between kernels: what a profiler and a long benchmark loop
report (``kernel``, the default). A user's timer sees more, or less:

* ``call``: CUDA events around one call, synchronising after it. The host issues the call's ATen
  ops one after another (op i takes h_i host seconds, its kernels issued when it is done:
  H_i = h_1 + … + h_i); the start event runs on the GPU when the host records it, and a kernel
  ``host.launch_latency`` (L) later after its op issues it than an event would (measured on the
  H200: about 8 us, the same for every ATen op and GEMM): kernel k of op i starts at
  max(G_{k-1}, H_i + L) and ends at G_k = start + t_k; the end event is recorded when the call
  returns: call = max(G_last, H_total) + ``event_overhead``.
* ``queued``: calls issued back to back without synchronising (a Python loop, then one sync):
  whichever is slower sets the pace, max(host total, kernel total) a call.
* ``graph``: one replay of a CUDA graph of the call, CUDA-event timed: ``host.graph_launch``,
  then each kernel's time with its launch overhead replaced by ``host.graph_kernel_gap`` per
  launch.

:func:`times` is the arithmetic, on numbers or on a grid's arrays alike; :func:`algorithm_ops`
lists the host ops of an algorithm of :func:`memmodel.compare` (standard attention: one ATen op
per kernel; a tiled library call: one op per pass, timed by the implementation's ``call_host``).
Where a profile lacks a figure a mode needs, that mode's time is None and :meth:`Times.of` says
which figure in one line: nothing is invented.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import field
from typing import TYPE_CHECKING, Any, Union

import numpy as np

from .errors import TimingError
from .frozen import frozen

if TYPE_CHECKING:  # pragma: no cover
    from .hardware import Profile

Seconds = Union[float, np.ndarray]  # noqa: UP007

#: The timing modes (``--timing``), the default first
TIMINGS = ("kernel", "call", "queued", "graph")
#: What each mode measures, in a few words (help texts, headers)
TIMING_TEXT = {
    "kernel": "the GPU's time, kernels queued back to back (what profilers and benchmark loops report)",
    "call": "a user's timer around one call: CUDA events, synchronising after each call",
    "queued": "a call's share of calls issued back to back without synchronising",
    "graph": "one replay of a CUDA graph of the call, CUDA-event timed",
}
#: What a time under each mode but ``kernel`` rests on (a comparison's assumptions)
TIMING_ASSUMPTIONS = {
    "call": "Timing 'call': one call between CUDA events, synchronised: the host issues each op after the one "
    "before (its profile's host seconds), a kernel starts when its op is issued and the kernel before it is "
    "done, and the end event waits for the host's return; plus the profile's event overhead.",
    "queued": "Timing 'queued': calls issued back to back without synchronising: the host's seconds a call or "
    "its kernels' time, whichever is longer.",
    "graph": "Timing 'graph': one replay of a CUDA graph of the call: the profile's graph launch, then each kernel "
    "with the graph's gap between kernels in place of the launch overhead; no host op is issued.",
}
#: A default-timing run names the call time on stderr where it is more than this many times the kernel time
NOTE_RATIO = 1.1

#: What each host figure is, for the line that says a profile lacks it
FIGURE_TEXT = {
    "host.op": "host seconds to issue one ATen op that launches a kernel",
    "host.view": "host seconds of one ATen op that launches nothing",
    "host.gemm": "host seconds to issue one matmul",
    "host.autograd_node": "the autograd engine's seconds per backward node",
    "host.graph_launch": "what replaying a CUDA graph adds",
    "host.graph_kernel_gap": "GPU seconds between kernels in a replayed graph",
    "call_host": "host seconds of one call of the implementation",
    "backward_call_host": "host seconds of the implementation's backward",
}


@frozen
class HostOp:
    """One op the host issues: its host seconds and the kernels it launches (indices into the
    algorithm's kernels, in launch order; none for a view). A grid's ``host_s`` may be an array
    (zero on the rows where the op is not issued)."""

    host_s: Seconds
    kernels: tuple[int, ...] = ()
    #: the host seconds into the op at which its kernels are issued (a fused call's share before
    #: its launches: ``host.launch_share``); None: at its end
    launch_s: Seconds | None = None


@frozen
class Times:
    """An algorithm's time in each timing mode (:data:`TIMINGS`) and the host's total: numbers,
    or arrays on a grid; None where the profile lacks a figure the mode needs (``missing`` says
    which, in one line)."""

    kernel_s: Seconds
    call_s: Seconds | None
    queued_s: Seconds | None
    graph_s: Seconds | None
    host_s: Seconds | None
    #: mode -> why its time is None (the figure the profile lacks)
    missing: Mapping[str, str] = field(default_factory=dict, compare=False)
    #: what stands in for a figure (an implementation timed by another's call_host)
    notes: tuple[str, ...] = field(default=(), compare=False)

    def of(self, timing: str) -> Seconds:
        """The time under ``timing``; a :class:`~memmodel.errors.TimingError` naming the missing
        figure where the profile cannot give it."""
        check_timing(timing)
        value = getattr(self, f"{timing}_s")
        if value is None:
            raise TimingError(self.missing.get(timing) or f"--timing {timing}: not modelled here")
        return value  # type: ignore[no-any-return]

    def as_dict(self) -> dict[str, Seconds | None]:
        """Mode -> time (None where a figure is missing): the JSON's ``predicted_times_s``."""
        return {mode: getattr(self, f"{mode}_s") for mode in TIMINGS}


def complete(t: Times) -> Times:
    """``t`` where it has a time in every mode, else a :class:`TimingError` naming the first
    figure missing (call's, then queued's, then graph's)."""
    for mode in TIMINGS[1:]:
        if getattr(t, f"{mode}_s") is None:
            raise TimingError(t.missing.get(mode) or f"--timing {mode}: not modelled here")
    return t


def check_timing(timing: str) -> str:
    """``timing`` if it is one of :data:`TIMINGS`, else a one-line :class:`TimingError`."""
    if timing not in TIMINGS:
        raise TimingError(f"unknown timing {timing!r}: accepted are {', '.join(TIMINGS)}")
    return timing


def _plain(value: Any) -> Seconds:
    """A float, or an array of a grid's rows (a copy where ``value`` is a read-only broadcast)."""
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim == 0:
        return float(arr)
    return arr if arr.flags.writeable else arr.copy()


def times(
    ops: Sequence[HostOp] | None,
    kernel_times: Sequence[Seconds],
    profile: Profile,
    *,
    launches: Sequence[Any] | None = None,
    missing: str | None = None,
    notes: Sequence[str] = (),
) -> Times:
    """The times of an algorithm whose kernels take ``kernel_times`` (in launch order, each with
    its launch overhead, as :func:`memmodel.timing.kernel_time` gives them), issued by the host
    as ``ops``, on ``profile``: the pipeline of the module docstring. ``launches``: the launches
    of each kernel (default 1): its ``launch_overhead`` share, and the graph gaps it pays in a
    replay. An op's kernels are issued at its end, or ``launch_s`` into it where given. ``ops``
    None: the profile lacks the host figure ``missing`` (``host.gemm``) the ops need, so call,
    queued and the host total are None. Numbers or arrays (a grid) alike."""
    t = [np.asarray(x, dtype=np.float64) for x in kernel_times]
    kernel = sum(t, np.float64(0.0))
    gone: dict[str, str] = {}
    call = queued = host = None
    if ops is None:
        gone = {mode: missing_line(mode, profile, missing or "host.op") for mode in ("call", "queued")}
    else:
        seen = sorted(i for op in ops for i in op.kernels)
        if seen != list(range(len(t))):
            raise ValueError(f"the host ops launch kernels {seen}, not each of the {len(t)} kernels once")
        # L: how much later a kernel starts after its launch than an event recorded in its place
        latency = (profile.host.launch_latency_s if profile.host is not None else None) or 0.0
        issued: Any = np.float64(0.0)  # H: the host's cursor since the start event was recorded
        gpu: Any = np.float64(0.0)  # G: when the GPU is done with the kernels issued so far
        for op in ops:
            start = issued
            issued = issued + np.asarray(op.host_s, dtype=np.float64)
            launch = issued if op.launch_s is None else start + np.asarray(op.launch_s, dtype=np.float64)
            for i in op.kernels:
                gpu = np.maximum(gpu, launch + latency) + t[i]
        event = profile.event_overhead_s or 0.0
        shape = np.broadcast(gpu, issued, kernel).shape  # a grid's: every mode an array of its rows
        call = _plain(np.broadcast_to(np.maximum(gpu, issued) + event, shape))
        queued = _plain(np.broadcast_to(np.maximum(issued, kernel), shape))
        host = _plain(np.broadcast_to(issued, shape))
    graph = None
    figures = profile.host
    if figures is None or figures.graph_launch_s is None or figures.graph_kernel_gap_s is None:
        name = "host.graph_launch" if figures is None or figures.graph_launch_s is None else "host.graph_kernel_gap"
        gone["graph"] = missing_line("graph", profile, name)
    else:
        counts = [np.float64(1.0)] * len(t) if launches is None else [np.asarray(n, np.float64) for n in launches]
        step = figures.graph_kernel_gap_s - (profile.launch_overhead_s or 0.0)
        graph = _plain(figures.graph_launch_s + kernel + step * sum(counts, np.float64(0.0)))
    return Times(_plain(kernel), call, queued, graph, host, gone, tuple(dict.fromkeys(notes)))


def not_modelled(kernel_times: Sequence[Seconds], why: str) -> Times:
    """The kernel time alone, every other mode None with ``why`` (a result whose host ops are
    not modelled: context parallelism's steps)."""
    kernel = _plain(sum((np.asarray(x, dtype=np.float64) for x in kernel_times), np.float64(0.0)))
    return Times(kernel, None, None, None, None, {mode: f"--timing {mode}: {why}" for mode in TIMINGS[1:]})


def missing_line(timing: str, profile: Profile, figure: str) -> str:
    """The one line that says ``profile`` lacks ``figure`` (``host.gemm``, or an implementation's
    ``implementations.NAME.call_host``), which ``--timing timing`` needs; where the profile has
    no host figure at all, that it has none."""
    source = profile.transferred_from or profile.derived_from
    also = f", nor does {source}, which it is carried from" if source else ""
    if source and figure.startswith("implementations."):  # a library's call: carried within a vendor only
        also = f" (a library call's host time is carried from {source} only to GPUs of its vendor)"
    if profile.host is None:
        named = "no host figures (host.*: what issuing work costs the CPU and torch)"
    else:
        what = FIGURE_TEXT.get(figure) or FIGURE_TEXT.get(figure.rpartition(".")[2], "")
        named = f"no {figure} ({what})"
        if figure.startswith("implementations."):  # a call's figure: its stand-ins lack it too
            others = stand_ins(figure.split(".")[1])[1:]
            named += f", nor {' nor '.join(others)}'s, which stand in" if others else ""
    return (
        f"--timing {timing}: {profile.name} gives {named}{also}; give them in a profile of your own "
        "(docs/profiles.md, host figures) or use --timing kernel"
    )


class MissingFigure(Exception):
    """A host figure the profile lacks (internal: :func:`times` then gives None, and the line)."""

    def __init__(self, figure: str) -> None:
        super().__init__(figure)
        self.figure = figure


class Figures:
    """A profile's host figures, each asked for by name: a missing one raises :class:`MissingFigure`.
    An implementation without its own call figures takes a stated stand-in (:meth:`call`)."""

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self.notes: list[str] = []

    def host(self, leaf: str) -> float:
        """``host.<leaf>`` (op, view, gemm, autograd_node)."""
        found = getattr(self.profile.host, f"{leaf}_s", None) if self.profile.host is not None else None
        if found is None:
            raise MissingFigure(f"host.{leaf}")
        return float(found)

    def backward_pass(self) -> float:
        """``host.backward_pass``, what a backward pass costs once beyond its nodes; 0 where the
        profile does not give it (a refinement: the nodes' own figure is required)."""
        found = self.profile.host.backward_pass_s if self.profile.host is not None else None
        return float(found or 0.0)

    def launch(self, call_s: Seconds, split: Any = False) -> Seconds | None:
        """When a fused forward call of ``call_s`` host seconds launches its kernels: the profile's
        ``host.launch_share`` of it (``host.split_launch_share`` where ``split``: a decode that
        splits K/V; on a grid, the rows where it does); None (at its end) where the profile gives
        neither."""
        host = self.profile.host
        share = host.launch_share if host is not None else None
        if share is None:
            return None
        split_share = host.split_launch_share if host is not None and host.split_launch_share is not None else share
        return _plain(np.where(split, split_share, share) * call_s) if np.any(split) else share * call_s

    def call(self, implementation: str | None, backward: bool = False, split: bool = False) -> float:
        """One call of ``implementation`` (its backward with ``backward``; ``split``: a forward
        that splits K/V, a decode, timed by ``split_call_host`` where given, else as any call): its
        own figure, else the first of its stand-ins (:func:`stand_ins`) that has one, with a note."""
        leaf = "backward_call_host" if backward else "call_host"
        chain = stand_ins(implementation)
        for name in chain:
            figures = self.profile.implementation(name)
            value = figures.split_call_host_s if split and not backward else None
            value = getattr(figures, f"{leaf}_s") if value is None else value
            if value is None:
                continue
            if name != implementation:
                what = f"host time of a{' backward' if backward else ''} call"
                own = (
                    f"{self.profile.name} gives no implementations.{implementation}.{leaf}"
                    if implementation and implementation != "paper"
                    else "the paper's algorithm is no library's call"
                )
                self.notes.append(f"{what}: {own}: {name}'s {leaf} stands in")
            return float(value)
        raise MissingFigure(f"implementations.{chain[0]}.{leaf}")


def stand_ins(implementation: str | None) -> tuple[str, ...]:
    """Whose ``call_host`` times a call of ``implementation``, in order: its own; the design whose
    rates it takes (``rates_from``), its same-design and same-family sources; then sdpa-flash's
    (PyTorch's FlashAttention-2 call: the common case, and what the paper's algorithm is timed as)."""
    from .hardware.schema import SAME_DESIGN, SAME_FAMILY
    from .implementations import get

    chain = [implementation] if implementation and implementation != "paper" else []
    spec = get(chain[0]) if chain else None
    if spec is not None and spec.rates_from:
        chain.append(spec.rates_from)
    if implementation in SAME_DESIGN:
        chain += [src for src, _ in SAME_DESIGN[implementation][1]]
    if implementation in SAME_FAMILY:
        chain.append(SAME_FAMILY[implementation][0])
    chain.append("sdpa-flash")
    return tuple(dict.fromkeys(chain))


def kernel_launches(kernel: Any, implementation: str | None) -> Any:
    """The launches a kernel of the ledger makes (its own, and for a fused attention kernel the
    ones its implementation adds before it: cuDNN's memset), zero on a grid's rows where it does
    not run: the count :func:`memmodel.timing.kernel_time` pays a ``launch_overhead`` for."""
    from .implementations import get
    from .traffic.ledger import SPLIT_KV

    fused = kernel.overlap == "serial-compute"
    # cuDNN's memset comes before its attention kernel, not before its decode's split kernel
    spec = get(kernel.figures_from or implementation) if fused and kernel.kind != SPLIT_KV else None
    n = np.asarray(kernel.launches, dtype=np.float64) + (spec.extra_launches if spec is not None else 0)
    if np.ndim(kernel.present):
        n = np.where(kernel.present, n, 0.0)
    return float(n) if np.ndim(n) == 0 else n


def _issued(kernel: Any, seconds: float) -> Seconds:
    """``seconds`` of host time where ``kernel`` runs (a grid's rows where it does not: none)."""
    if np.ndim(kernel.present):
        return np.where(kernel.present, seconds, 0.0)
    return seconds


#: kernels the user's own code launches before a library call (not part of it): the FP8 K/V cast
_USER_OPS = ("fp8_cast",)
#: the kind of a split-KV kernel (:data:`memmodel.traffic.ledger.SPLIT_KV`): its call splits K/V
SPLIT_KV = "split_kv"


def _eager(kernels: Sequence[Any], indices: Sequence[int], figures: Figures) -> list[HostOp]:
    """One ATen op per kernel: a matmul's ``host.gemm``, any other kernel's ``host.op``."""
    return [
        HostOp(_issued(kernels[i], figures.host("gemm" if kernels[i].op == "gemm" else "op")), (i,)) for i in indices
    ]


def algorithm_ops(
    traffic: Any, profile: Profile, implementation: str | None
) -> tuple[tuple[HostOp, ...], tuple[str, ...]]:
    """The host ops of an algorithm of :func:`memmodel.compare` (its ledger, ``traffic``) and the
    notes on what stands in for a figure; :class:`MissingFigure` where the profile lacks one.

    * standard attention (``traffic.name == "standard"``): each kernel is one ATen op (a matmul's
      ``host.gemm``, any other's ``host.op``; views are not in its ledger and not counted); with
      the backward pass, the autograd engine runs one node per forward kernel (each is one
      differentiable op), its ``host.autograd_node`` each (and ``host.backward_pass`` once, where
      given) spent before the first backward kernel;
    * tiled attention: one library call a pass, its kernels launched by it, timed by the
      implementation's ``call_host`` (forward; ``split_call_host`` where it splits K/V, a decode)
      and ``backward_call_host`` (backward, its autograd node included), or a stand-in's
      (:func:`stand_ins`, said in the notes); a forward call launches its kernels after
      ``host.launch_share`` of its host time where the profile gives it (else at its end); the
      FP8 K/V cast before it is the user's own op (``host.op``); PyTorch's math fallback
      (``sdpa-math``) dispatches its ATen ops one by one, timed so unless the profile has its own
      call figure.
    """
    figures = Figures(profile)
    kernels = list(traffic.kernels)
    forward = [i for i, k in enumerate(kernels) if k.pass_ != "backward"]
    backward = [i for i, k in enumerate(kernels) if k.pass_ == "backward"]
    ops: list[HostOp] = []
    eager = traffic.name == "standard" or (
        implementation == "sdpa-math" and profile.implementation("sdpa-math").call_host_s is None
    )
    if eager:
        ops += _eager(kernels, forward, figures)
        if backward:
            nodes = sum(
                (np.asarray(_issued(kernels[i], 1.0)) for i in forward if kernels[i].op not in _USER_OPS),
                np.float64(0.0),
            )
            engine = nodes * figures.host("autograd_node") + figures.backward_pass()
            ops.append(HostOp(_plain(engine)))
            ops += _eager(kernels, backward, figures)
        return tuple(ops), tuple(figures.notes)
    user = [i for i in forward if kernels[i].op in _USER_OPS]
    ops += _eager(kernels, user, figures)
    library = [i for i in forward if i not in user]
    if library:
        call: Seconds = figures.call(implementation)
        split = [kernels[i].present for i in library if kernels[i].kind == SPLIT_KV]
        splits: Any = False
        if split:  # a decode that splits K/V (on a grid: the rows where it does)
            splits = np.logical_or.reduce([np.asarray(p, dtype=bool) for p in split])
            call = _plain(np.where(splits, figures.call(implementation, split=True), call))
        ops.append(HostOp(call, tuple(library), figures.launch(call, splits)))
    if backward:
        ops.append(HostOp(figures.call(implementation, backward=True), tuple(backward)))
    return tuple(ops), tuple(figures.notes)


def algorithm_times(
    traffic: Any, kernel_times: Sequence[Seconds], profile: Profile, implementation: str | None
) -> Times:
    """:func:`times` of an algorithm of :func:`memmodel.compare`: its ops by
    :func:`algorithm_ops` (None, and the line, where the profile lacks a figure they need)."""
    return timed(
        lambda: algorithm_ops(traffic, profile, implementation), traffic.kernels, kernel_times, profile, implementation
    )


def timed(
    build: Callable[[], tuple[tuple[HostOp, ...], tuple[str, ...]]],
    kernels: Sequence[Any],
    kernel_times: Sequence[Seconds],
    profile: Profile,
    implementation: str | None | Sequence[str | None] = None,
) -> Times:
    """:func:`times` of ``kernels`` issued as ``build()`` lists them (a missing figure makes call
    and queued None, with the line); ``implementation`` (one, or one per kernel) gives each
    kernel's launches."""
    per_kernel = implementation if isinstance(implementation, (list, tuple)) else [implementation] * len(kernels)
    launches = [kernel_launches(k, impl) for k, impl in zip(kernels, per_kernel)]
    try:
        ops, notes = build()
    except MissingFigure as exc:
        return times(None, kernel_times, profile, launches=launches, missing=exc.figure)
    return times(ops, kernel_times, profile, launches=launches, notes=notes)


def user_note(t: Times, unit: Callable[[float], str]) -> str | None:
    """With the default timing: one line where a user's timer around one call would see more
    than :data:`NOTE_RATIO` times the kernel time (``unit`` formats seconds), naming why; None
    elsewhere (no host figures, a grid, or a call close to its kernels)."""
    if t.call_s is None or np.ndim(t.call_s) or np.ndim(t.kernel_s) or not t.kernel_s:
        return None
    call, kernel = float(t.call_s), float(t.kernel_s)
    if call <= NOTE_RATIO * kernel:
        return None
    bound = t.host_s is not None and float(t.host_s) >= kernel
    why = "host dispatch" if bound else "host dispatch before the first kernel, and the end event"
    return f"a user's timer around one call sees {unit(call)} (--timing call), its kernels {unit(kernel)}: {why}"
