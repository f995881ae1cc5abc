"""``memmodel trace``: the model's ledger of the user's own PyTorch attention code.

:func:`trace` runs a function on fake tensors on the CPU (torch, no GPU), records every ATen op
it dispatches (:mod:`.record`; with ``backward``, autograd's backward ops too), maps each op to
the model's kernels (:mod:`.kernels`: GEMMs at the library's rates, elementwise ops and softmax
at streaming rates with the L2 carry-over rule, fused ``scaled_dot_product_attention`` calls
through :func:`memmodel.compare`'s tiled models) and times them on a GPU profile. An op the
model cannot count is listed in :attr:`Trace.unmodelled`, never dropped.

>>> from memmodel import trace                                  # doctest: +SKIP
>>> t = trace(fn, {"q": (1, 8, 1024, 64), "k": (1, 8, 1024, 64), "v": (1, 8, 1024, 64)},
...           dtype="bf16", backward=True, profile="h200")      # doctest: +SKIP
>>> t.traffic.hbm_bytes, t.timing.time_s                         # doctest: +SKIP

Only this package's :mod:`.record` imports torch, and only when a trace runs: ``import
memmodel`` stays free of it.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping
from functools import cached_property
from pathlib import Path
from typing import Any

from ..errors import MissingDependency, TraceError
from ..frozen import frozen
from ..traffic.ledger import AlgorithmTraffic
from .events import FLOAT_DTYPES, INPUT_DTYPES, TORCH_NAMES
from .kernels import Mapped, OpMapping, SdpaCall, Unmodelled

TRACE_SCHEMA = "memmodel.trace/1"
#: the largest dimension a shape may give (torch's sizes are int64)
MAX_DIM = 2**63 - 1

__all__ = [
    "SHARE_GROUPS",
    "TRACE_SCHEMA",
    "Input",
    "Share",
    "Trace",
    "load_function",
    "parse_config",
    "parse_shape",
    "trace",
]

#: the groups a trace's kernels are shared out among (:attr:`Trace.shares`)
SHARE_GROUPS = ("attention", "gemm", "other")


@frozen
class Share:
    """One group of a trace's kernels (:data:`SHARE_GROUPS`: the fused attention calls' kernels,
    the GEMMs, the rest: norms, elementwise ops, copies, reductions) and its part of the total."""

    group: str
    kernels: int
    time_s: float
    hbm_bytes: int
    time_share: float
    hbm_share: float


def kernel_group(kernel: Any) -> str:
    """``attention`` (a fused scaled_dot_product_attention call's kernel), ``gemm`` or ``other``."""
    if kernel.name.startswith("sdpa:"):
        return "attention"
    return "gemm" if kernel.op in ("gemm", "splitk_reduce") else "other"  # cuBLAS' split-K reduction with its product


@frozen
class Input:
    """One argument the function was called with: a fake tensor of ``shape`` and torch ``dtype``."""

    name: str
    shape: tuple[int, ...]
    dtype: str


@frozen
class Trace:
    """A traced function on one GPU: its kernels' ledger and timing, what each recorded op
    became, the fused calls and the ops the model does not count."""

    function: str
    inputs: tuple[Input, ...]
    profile: Any
    dtype: str
    backward: bool
    l2: str
    traffic: AlgorithmTraffic
    timing: Any
    ops: tuple[OpMapping, ...]
    unmodelled: tuple[Unmodelled, ...]
    sdpa: tuple[SdpaCall, ...]
    #: what the fused calls' models said about their choices (stderr beside a table)
    notes: tuple[str, ...]
    assumptions: tuple[str, ...]
    #: the autograd nodes its backward ran (:attr:`.events.Recording.backward_nodes`)
    backward_nodes: int = 0

    @property
    def times(self) -> Any:
        """:attr:`host_times` in every mode: a :class:`~memmodel.errors.TimingError` naming the
        first figure missing where the profile cannot give one of them."""
        from ..host import complete

        return complete(self.host_times)

    @cached_property
    def host_times(self) -> Any:
        """Its time in each timing mode (:class:`memmodel.host.Times`), the host issuing the
        recorded ops one by one (:func:`host_ops`); None in a mode whose figures the profile lacks."""
        from ..host import timed

        index = {k.name: i for i, k in enumerate(self.traffic.kernels)}
        impls: list[str | None] = [None] * len(index)
        for op in self.ops:
            for name in op.kernels:
                impls[index[name]] = op.implementation
        return timed(
            lambda: host_ops(self.ops, index, self.backward_nodes, self.profile, self.traffic.kernels),
            self.traffic.kernels,
            [t.time_s for t in self.timing.kernels],
            self.profile,
            impls,
        )

    @property
    def evaluated(self) -> Any:
        """The ledger and its timing as :class:`memmodel.model.Evaluated` (the report code's input)."""
        from ..model import Evaluated

        return Evaluated(self.traffic, self.timing, self.profile, known_times=self.host_times)

    @property
    def shares(self) -> tuple[Share, ...]:
        """Time and HBM bytes of the attention kernels, the GEMMs and the rest, with their shares
        of the totals (0 where a total is 0)."""
        time: dict[str, float] = dict.fromkeys(SHARE_GROUPS, 0.0)
        hbm: dict[str, int] = dict.fromkeys(SHARE_GROUPS, 0)
        count: dict[str, int] = dict.fromkeys(SHARE_GROUPS, 0)
        for k, t in zip(self.traffic.kernels, self.timing.kernels):
            g = kernel_group(k)
            time[g] += float(t.time_s)
            hbm[g] += int(k.bytes(level="hbm"))
            count[g] += 1
        total_t, total_b = sum(time.values()), sum(hbm.values())
        return tuple(
            Share(
                g,
                count[g],
                time[g],
                hbm[g],
                time[g] / total_t if total_t else 0.0,
                hbm[g] / total_b if total_b else 0.0,
            )
            for g in SHARE_GROUPS
        )

    @property
    def free_ops(self) -> int:
        """Recorded ops that launch no kernel (views, aliases, allocations)."""
        return sum(1 for op in self.ops if op.status == "free")


#: ATen's matrix products (``host.gemm`` each: cuBLAS' dispatch); ``linear`` and ``matmul`` reach
#: the recorder as these
GEMM_OPS = frozenset({"mm", "bmm", "addmm", "baddbmm", "addbmm", "addmv", "mv", "dot", "_scaled_mm"})


def host_ops(
    ops: Any, index: Mapping[str, int], backward_nodes: int, profile: Any, kernels: Any = ()
) -> tuple[tuple[Any, ...], tuple[str, ...]]:
    """The host ops of a trace's recorded ``ops`` (``index``: kernel name -> its place in the
    ledger) and the notes on what stands in for a figure; :class:`memmodel.host.MissingFigure`
    where the profile lacks one. Each recorded op is one host op:

    * a view, an alias or an allocation (status ``free``): ``host.view``;
    * a matrix product (:data:`GEMM_OPS`): ``host.gemm``; any other op that launches kernels, or
      that the model does not count (``unmodelled``): ``host.op``;
    * a fused ``scaled_dot_product_attention`` call: its implementation's ``call_host``
      (``split_call_host`` where its kernels, of ``kernels``, split K/V), its backward
      ``backward_call_host`` (or a stated stand-in's: :func:`memmodel.host.stand_ins`).

    In the backward, the autograd engine's ``host.autograd_node`` for each node it ran (each seen
    running when something was dispatched, :attr:`.events.OpEvent.nodes`) is spent before the
    first op the node dispatched; a fused call's backward node is in its ``backward_call_host``
    already, and nodes seen after the last recorded op close the backward; ``host.backward_pass``
    (where given) is spent once, before its first op. A fused forward call launches its kernels
    after ``host.launch_share`` of its host time, where the profile gives it."""
    from ..host import SPLIT_KV, Figures, HostOp

    figures = Figures(profile)
    node = figures.host("autograd_node") if backward_nodes else 0.0
    # a node whose first op is a view dispatches views only, as far as the recording tells
    view_node = getattr(profile.host, "autograd_view_node_s", None) if profile.host is not None else None
    view_node = node if view_node is None else float(view_node)
    engine = figures.backward_pass()  # once, before the backward's first op
    out: list[HostOp] = []
    charged = 0
    for op in ops:
        ids = tuple(index[name] for name in op.kernels)
        base = op.op.split(".")[1] if op.op.startswith("aten.") else op.op
        if op.status == "sdpa":
            split = any(kernels[i].kind == SPLIT_KV for i in ids) if kernels else False
            impl = None if op.implementation == "paper" else op.implementation
            seconds = figures.call(impl, op.pass_ == "backward", split=split)
        elif op.status == "free":
            seconds = figures.host("view")
        else:
            seconds = figures.host("gemm" if base in GEMM_OPS else "op")
        nodes = max(op.nodes - 1, 0) if op.status == "sdpa" and op.pass_ == "backward" else op.nodes
        charged += op.nodes
        if op.pass_ == "backward" and engine:
            seconds, engine = seconds + engine, 0.0
        launch = figures.launch(seconds) if op.status == "sdpa" and op.pass_ != "backward" else None
        out.append(HostOp(seconds + nodes * (view_node if op.status == "free" else node), ids, launch))
    if backward_nodes > charged:
        out.append(HostOp((backward_nodes - charged) * node))
    return tuple(out), tuple(figures.notes)


#: ``name=1,8,1024,64`` or ``name=1024,1024:bool``
_SHAPE = re.compile(r"^\s*(?P<name>[^=]*)=(?P<dims>[^:]*)(?::(?P<dtype>.*))?$")


def parse_shape(text: str) -> tuple[str, tuple[int, ...], str | None]:
    """``--shape q=1,8,1024,64`` -> ``("q", (1, 8, 1024, 64), None)``; a ``:DTYPE`` suffix
    (``mask=1024,1024:bool``) gives the input its own element type (:data:`.events.INPUT_DTYPES`)."""
    shown = text if len(text) <= 60 else f"{text[:40]}… ({len(text)} characters)"
    m = _SHAPE.match(text)
    if m is None:
        raise TraceError(f"--shape {shown!r}: expected NAME=DIMS, e.g. q=1,8,1024,64 (an argument of the function)")
    name = m.group("name").strip()
    if not name.isidentifier():
        raise TraceError(f"--shape {shown!r}: {name!r} is not an argument name")
    dims: list[int] = []
    for part in m.group("dims").split(","):
        part = part.strip()
        if not part.lstrip("+-").isdigit():
            raise TraceError(f"--shape {shown!r}: {part!r} is not a whole number (dims are comma-separated)")
        if len(part) > 25 or int(part) > MAX_DIM:
            raise TraceError(f"--shape {shown!r}: a dim is larger than {MAX_DIM} (2^63 - 1)")
        value = int(part)
        if value < 1:
            raise TraceError(f"--shape {shown!r}: dims must be positive (got {value})")
        dims.append(value)
    dtype = m.group("dtype")
    if dtype is not None:
        dtype = dtype.strip().lower()
        if dtype not in INPUT_DTYPES:
            raise TraceError(f"--shape {shown!r}: unknown dtype {dtype!r}: accepted are {', '.join(INPUT_DTYPES)}")
    return name, tuple(dims), dtype


def parse_config(text: str) -> tuple[str, Any]:
    """``--config max_positions=65536`` -> ``("max_positions", 65536)``: the value a Python
    literal (number, bool, None, quoted text, tuple), else the text itself."""
    import ast

    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key.isidentifier():
        shown = text if len(text) <= 60 else f"{text[:40]}… ({len(text)} characters)"
        raise TraceError(
            f"--config {shown!r}: expected KEY=VALUE, e.g. max_positions=65536 (an argument of the factory)"
        )
    try:
        return key, ast.literal_eval(value.strip())
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return key, value.strip()


def _inputs(shapes: Mapping[str, Any], dtype: str) -> dict[str, tuple[tuple[int, ...], str]]:
    """Argument name -> (shape, torch dtype name) from :func:`trace`'s ``shapes``."""
    out: dict[str, tuple[tuple[int, ...], str]] = {}
    for name, spec in shapes.items():
        own: str | None = None
        if isinstance(spec, str):
            _, dims, own = parse_shape(f"{name}={spec}")
        elif hasattr(spec, "shape") and hasattr(spec, "dtype"):  # a tensor: its shape and dtype
            dims, own = tuple(int(n) for n in spec.shape), str(spec.dtype).removeprefix("torch.")
            own = {v: k for k, v in TORCH_NAMES.items()}.get(own, own)
        elif (
            isinstance(spec, (tuple, list))
            and len(spec) == 2
            and isinstance(spec[1], str)
            and isinstance(spec[0], (tuple, list))
        ):
            dims, own = tuple(spec[0]), spec[1]
        else:
            dims = tuple(spec)
        _, dims, _ = parse_shape(f"{name}={','.join(str(d) for d in dims)}")
        if own is not None and own not in INPUT_DTYPES:
            raise TraceError(f"{name}: unknown dtype {own!r}: accepted are {', '.join(INPUT_DTYPES)}")
        chosen = own or dtype
        out[name] = (dims, TORCH_NAMES.get(chosen, chosen))
    return out


def check_arguments(fn: Callable[..., Any], names: list[str], label: str) -> None:
    """Every name is an argument of ``fn``, and every argument without a default has a shape."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    named = [p.name for p in params if p.kind in kinds]
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
    for name in names:
        if name not in named and not takes_any:
            raise TraceError(
                f"--shape {name}=...: {label} has no argument {name!r} (its arguments: {', '.join(named) or 'none'})"
            )
    for p in params:
        if p.kind in kinds and p.default is inspect.Parameter.empty and p.name not in names:
            raise TraceError(f"{label} needs its argument {p.name!r}: give --shape {p.name}=DIMS")
        if p.kind is inspect.Parameter.POSITIONAL_ONLY and p.default is inspect.Parameter.empty:
            raise TraceError(f"{label} takes {p.name!r} by position only: give it a keyword argument to trace it")


def load_function(target: str) -> tuple[Callable[..., Any], str]:
    """``FILE.py:FUNC`` -> the function and its label (``FILE.py:FUNC``): the file is imported
    as a module of its own (its folder first on the import path while it loads)."""
    path_text, sep, func = target.rpartition(":")
    if not sep or not path_text or not func:
        raise TraceError(f"{target!r}: expected FILE.py:FUNCTION (e.g. examples/attention/sdpa.py:attention)")
    path = Path(path_text)
    if not path.is_file():
        raise TraceError(f"{path_text}: no such file")
    _require_torch()
    import importlib.util
    import sys

    module_name = f"_memmodel_trace_{re.sub(r'[^0-9a-zA-Z_]', '_', path.stem)}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise TraceError(f"{path_text}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    folder = str(path.resolve().parent)
    sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:  # the user's file: one line naming it
        first = (str(exc).strip().splitlines() or [""])[0]
        raise TraceError(f"{path_text}: importing it raised {exc.__class__.__name__}: {first}") from None
    finally:
        if sys.path and sys.path[0] == folder:
            sys.path.pop(0)
    fn = getattr(module, func, None)
    if fn is None:
        found = sorted(
            n
            for n, v in vars(module).items()
            if (inspect.isfunction(v) or inspect.isclass(v)) and v.__module__ == module_name
        )
        raise TraceError(
            f"{path_text} has no function or class {func!r} (its functions and classes: {', '.join(found) or 'none'})"
        )
    if not callable(fn) or (inspect.isclass(fn) and not _module_class(fn)):
        kind = "a class, not an nn.Module subclass" if inspect.isclass(fn) else f"its type: {type(fn).__name__}"
        raise TraceError(f"{path_text}:{func} is neither a function nor an nn.Module class ({kind})")
    return fn, f"{path_text}:{func}"


def _module_class(obj: Any) -> bool:
    """An ``nn.Module`` subclass (torch imported only where ``obj`` is a class)."""
    if not inspect.isclass(obj):
        return False
    import torch

    return issubclass(obj, torch.nn.Module)


def _module_instance(obj: Any) -> bool:
    """An ``nn.Module`` already built (torch imported only where ``obj`` is not a class or function)."""
    if inspect.isclass(obj) or inspect.isfunction(obj):
        return False
    import torch

    return isinstance(obj, torch.nn.Module)


def is_module_target(fn: Any, names: list[str], config: Mapping[str, Any] | None) -> bool:
    """Whether ``fn`` gives the module to trace (an ``nn.Module`` class or instance, or a factory)
    rather than being the function traced: a factory is a function given a configuration, or one
    whose named arguments all have defaults and none of which a ``--shape`` names (a function of
    tensors takes the shapes' names). A function of no arguments is taken as a factory."""
    if _module_class(fn) or _module_instance(fn) or config:
        return True
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    params = [p for p in params if p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)]
    if any(p.default is inspect.Parameter.empty for p in params):
        return False
    return not ({p.name for p in params} & set(names))


def _gradients(grad: Any, inputs: dict[str, tuple[tuple[int, ...], str]]) -> frozenset[str] | None:
    """The inputs ``grad`` names (a name, or several), each a floating input; None: every one."""
    if grad is None:
        return None
    names = [grad] if isinstance(grad, str) else list(grad)
    floating = [k for k, (_, dtype) in inputs.items() if dtype.startswith(("float", "bfloat"))]
    for name in names:
        if name not in floating:
            raise TraceError(
                f"--grad {name}: not a floating input of the function (its floating inputs: {', '.join(floating) or 'none'})"
            )
    return frozenset(names)


def _require_torch() -> None:
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        raise MissingDependency(
            "memmodel trace needs torch (its CPU build is enough), which is not installed: pip install torch"
        )


#: what every trace's numbers rest on, beside the timing's own assumptions
TRACE_ASSUMPTIONS = (
    "Traced on fake tensors on the CPU: every ATen op the function dispatched, as CUDA would run it "
    "(scaled_dot_product_attention, dropout and an fp16 softmax to fp32 taken as CUDA's calls).",
    "Views, aliases and allocations launch no kernel; every other op is one kernel (masked_fill out of place "
    "and the softmax backward two), reading each input and writing each output once.",
    "GEMMs: 128 x 128 output tiles, each operand requested from L2 once per tile row or column and read "
    "from HBM once; an input broadcast over an elementwise op's output is re-read from HBM unless it stays "
    "in L2; a tensor the previous kernel wrote is read from L2 where it fits.",
    "scaled_dot_product_attention: memmodel's fused model of the kernel PyTorch would choose (compare --impl "
    "auto), its backward where autograd runs it.",
)


def _timing(timings: list[Any]) -> Any:
    """The kernels' times added, bound by what bounds the kernels holding most of the time."""
    from ..timing import AlgorithmTiming

    total = float(sum(float(t.time_s) for t in timings))
    by_label: dict[str, float] = {}
    for t in timings:
        by_label[str(t.bound)] = by_label.get(str(t.bound), 0.0) + float(t.time_s)
    label = max(sorted(by_label), key=lambda k: by_label[k]) if by_label else "none"
    return AlgorithmTiming(tuple(timings), total, label)


def trace(
    fn: Callable[..., Any],
    shapes: Mapping[str, Any],
    *,
    dtype: str = "fp32",
    backward: bool = False,
    profile: Any = None,
    l2: str = "on",
    name: str | None = None,
    grad: Any = None,
    config: Mapping[str, Any] | None = None,
) -> Trace:
    """Trace ``fn`` called with a fake tensor per entry of ``shapes`` (argument name -> a shape, a
    ``(shape, dtype)`` pair, ``"1,8,1024,64[:dtype]"``, or a tensor whose shape and dtype it takes),
    floating inputs at ``dtype`` (fp32, fp16, bf16), and predict its kernels on ``profile`` (a
    :class:`~memmodel.Profile`, a profile name or YAML path; default the CLI's). With ``backward``,
    autograd's backward of the first output that needs a gradient is traced too, for the gradients
    of the floating inputs named in ``grad`` (default: all of them; a mask given as a float tensor
    needs none in training). ``l2``: the L2 mode (on, cold, off), as in ``compare``.

    ``fn`` may instead build an ``nn.Module`` (:func:`is_module_target`): an ``nn.Module`` class, or
    a factory function (its arguments all defaulted, none of them named in ``shapes``), called with
    ``config`` as keyword arguments on the meta device. The module's parameters and buffers become
    fake tensors at ``dtype`` (no weights allocated) and the module is called with the ``shapes``
    as its forward's arguments, in eval mode without autograd (with ``backward``: in training mode,
    the parameters' gradients computed too)."""
    from ..hardware import DEFAULT_GPU, Profile, load_profile
    from ..traffic.l2 import L2_MODES

    if dtype not in FLOAT_DTYPES:
        raise TraceError(f"unknown dtype {dtype!r} for a trace: accepted are {', '.join(FLOAT_DTYPES)}")
    if l2 not in L2_MODES:
        raise TraceError(f"unknown L2 mode {l2!r}: accepted are {', '.join(L2_MODES)}")
    label = name or getattr(fn, "__name__", "function")
    if not callable(fn):
        raise TraceError(f"{label} is not a function")
    gpu = profile if isinstance(profile, Profile) else load_profile(profile or DEFAULT_GPU)
    inputs = _inputs(shapes, dtype)
    wanted = _gradients(grad, inputs)
    _require_torch()
    from .record import build_module, record

    if not is_module_target(fn, list(inputs), config):
        check_arguments(fn, list(inputs), label)
        rec = record(fn, inputs, backward=backward, name=label, grad=wanted)
        return _modelled(rec, label, inputs, gpu, dtype, backward, l2)
    options = dict(config or {})
    if _module_instance(fn):  # built already: its own weights are replaced by fake tensors
        if options:
            raise TraceError(f"--config: {label} is a module built already (give its class or a factory to configure)")
        module = fn
    else:
        check_config(fn, options, label)
        module = build_module(lambda: fn(**options), label)
    check_arguments(module.forward, list(inputs), f"{label}'s forward")
    rec = record(
        None, inputs, backward=backward, name=label, grad=wanted, module=module, param_dtype=TORCH_NAMES[dtype]
    )
    return _modelled(rec, label, inputs, gpu, dtype, backward, l2)


def check_config(fn: Callable[..., Any], config: Mapping[str, Any], label: str) -> None:
    """Every ``--config`` key is an argument of the factory ``fn``."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return
    named = [p.name for p in params]
    for key in config:
        if key not in named:
            raise TraceError(
                f"--config {key}=...: {label} has no argument {key!r} (its arguments: {', '.join(named) or 'none'})"
            )


def _modelled(rec: Any, label: str, inputs: dict[str, Any], gpu: Any, dtype: str, backward: bool, l2: str) -> Trace:
    """A recording's kernels on ``gpu``: mapped, MALL rows added where it has one, timed."""
    from ..model import compare
    from ..plan import base_l2, xcd_l2
    from ..timing import assumptions, kernel_time
    from ..traffic.mall import with_mall
    from ..traffic.standard import GEMM_TILE
    from .kernels import map_recording

    def fused(w: Any, impl: str, bwd: bool) -> Any:
        return compare(w, gpu, impl=impl, backward=bwd, l2=l2)

    mapped: Mapped = map_recording(rec, base_l2(gpu, l2), dtype, fused, gpu.sm_count)
    kernels = list(mapped.kernels)
    view = xcd_l2(gpu, l2)
    if view is not None:  # a GPU with a MALL: each traced kernel's rows against one XCD's slice
        seen = iter(map_recording(rec, view, dtype, None, gpu.sm_count).kernels)
        for i, timed in enumerate(mapped.timings):
            if timed is None:
                one = AlgorithmTraffic("traced", "eager", (kernels[i],))
                kernels[i] = with_mall(one, AlgorithmTraffic("traced", "eager", (next(seen),))).kernels[0]
    timings = [
        t if t is not None else kernel_time(k, gpu, dt, None, hd)
        for k, t, dt, hd in zip(kernels, mapped.timings, mapped.dtypes, mapped.head_dims)
    ]
    traffic = AlgorithmTraffic("traced", "eager", tuple(kernels), params={"gemm_tile": GEMM_TILE})
    return Trace(
        function=label,
        inputs=tuple(Input(n, s, d) for n, (s, d) in inputs.items()),
        profile=gpu,
        dtype=dtype,
        backward=backward,
        l2=l2,
        traffic=traffic,
        timing=_timing(timings),
        ops=mapped.ops,
        unmodelled=mapped.unmodelled,
        sdpa=mapped.sdpa,
        notes=mapped.notes,
        assumptions=(*TRACE_ASSUMPTIONS, *assumptions(gpu)),
        backward_nodes=rec.backward_nodes,
    )
