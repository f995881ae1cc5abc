"""Run a function on fake tensors on the CPU and record every ATen op it dispatches (needs torch).

Two modes sit around the call, inside ``FakeTensorMode`` (tensors with shapes, strides and dtypes
but no data, so nothing is computed and no GPU is needed):

* a ``TorchFunctionMode`` (:class:`_Rewrites`) that makes the CPU dispatch what CUDA would where
  the two differ, before any ATen op runs: ``scaled_dot_product_attention`` becomes one recorded
  call (its fused kernels are the model's, :mod:`.kernels`), ``dropout`` the fused
  ``native_dropout`` CUDA runs (the CPU would draw a ``bernoulli_`` mask and multiply), an fp16
  ``softmax(..., dtype=float32)`` the ``_softmax(half_to_float=True)`` CUDA runs (the CPU casts
  first), and device arguments the CPU (fake CUDA tensors cannot run autograd without CUDA);
* a ``TorchDispatchMode`` (:class:`_Recorder`) that records each ATen op with its tensors, after
  autograd and the composite ops' decompositions: what a GPU would launch, op by op.

With ``backward``, ``torch.autograd.grad`` runs on the first output that needs a gradient, fed an
empty (fake) ``dO``, under the same modes: autograd's backward ops are recorded after the forward's,
and so are the autograd nodes the engine runs (each seen as the node running when anything is
dispatched, ATen or not; the count since the previous recorded op is the next op's ``nodes``), for
the host time of the backward (``--timing call``: :mod:`memmodel.host`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from ..errors import TraceError
from .events import OpEvent, Recording, TensorRef

#: ops that re-describe memory or allocate it: no kernel runs (besides every op torch marks a view)
ALIASES = frozenset(
    {
        "_unsafe_view",
        "alias",
        "detach",
        "empty",
        "empty_like",
        "empty_strided",
        "new_empty",
        "new_empty_strided",
        "lift_fresh",
        "sym_size",
        "sym_stride",
        "sym_numel",
        "sym_storage_offset",
        "is_same_size",
        "_reshape_alias",
    }
)

#: the user-level calls :class:`_Rewrites` handles
_SDPA = F.scaled_dot_product_attention
_SDPA_PARAMS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
_SDPA_DEFAULTS = {"attn_mask": None, "dropout_p": 0.0, "is_causal": False, "scale": None, "enable_gqa": False}
_DROPOUTS = {F.dropout: ("input", "p", "training", "inplace"), torch.dropout: ("input", "p", "train")}
_SOFTMAXES = {
    F.softmax: ("input", "dim", "_stacklevel", "dtype"),
    torch.softmax: ("input", "dim", "dtype"),
    torch.Tensor.softmax: ("input", "dim", "dtype"),
}


def _storage(t: torch.Tensor) -> int:
    from torch.multiprocessing.reductions import StorageWeakRef

    return int(StorageWeakRef(t.untyped_storage()).cdata)


class _Recorder(TorchDispatchMode):
    """Records each ATen op as an :class:`OpEvent`; keeps every tensor it saw alive, so that no
    storage id is reused within one trace."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[OpEvent] = []
        self.alive: list[torch.Tensor] = []
        self.paused = 0
        self.pass_ = "forward"
        self.calls = 0
        #: the autograd nodes seen running in the backward (kept alive: each is told apart by identity)
        self.nodes: list[Any] = []
        self.node_ids: set[int] = set()
        #: nodes begun since the last recorded op (charged to the next one)
        self.pending_nodes = 0

    def see_node(self) -> None:
        """Count the autograd node running now (in the backward), once per node."""
        if self.pass_ != "backward":
            return
        node = torch._C._current_autograd_node()
        if node is not None and id(node) not in self.node_ids:
            self.nodes.append(node)
            self.node_ids.add(id(node))
            self.pending_nodes += 1

    @contextlib.contextmanager
    def pause(self) -> Iterator[None]:
        self.paused += 1
        try:
            yield
        finally:
            self.paused -= 1

    def ref(self, t: torch.Tensor) -> TensorRef:
        self.alive.append(t)
        shape = tuple(int(n) for n in t.shape)
        strides = tuple(int(s) for s in t.stride())
        return TensorRef(_storage(t), shape, strides, str(t.dtype).removeprefix("torch."), int(t.element_size()))

    def value(self, v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            return self.ref(v)
        if isinstance(v, (list, tuple)):
            return tuple(self.value(x) for x in v)
        if isinstance(v, torch.dtype):
            return str(v).removeprefix("torch.")
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        return str(v)

    def outputs(self, out: Any) -> tuple[TensorRef, ...]:
        return tuple(self.ref(t) for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor))

    def add(self, op: str, overload: str, args: Any, kwargs: dict[str, Any], out: Any, view: bool = False) -> None:
        self.see_node()
        self.events.append(
            OpEvent(
                op,
                overload,
                self.pass_,
                tuple(self.value(a) for a in args),
                {k: self.value(v) for k, v in kwargs.items()},
                self.outputs(out),
                view,
                self.pending_nodes,
            )
        )
        self.pending_nodes = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        self.see_node()  # any dispatch, recorded or not, shows which node autograd runs
        out = func(*args, **kwargs)
        if self.paused or func.namespace != "aten":
            return out
        name = func._schema.name.removeprefix("aten::")
        self.add(name, func._overloadname, args, kwargs, out, bool(func.is_view) or name in ALIASES)
        return out


class _Sdpa(torch.autograd.Function):
    """``scaled_dot_product_attention`` as one recorded call: its output (and in the backward its
    gradients) are empty fake tensors of the right shapes; the model counts its fused kernels."""

    @staticmethod
    def forward(ctx: Any, query: Any, key: Any, value: Any, recorder: _Recorder, params: dict[str, Any]) -> Any:
        _check_sdpa(query, key, value, bool(params.get("enable_gqa")))
        with recorder.pause():
            out = _like_query(query, value.shape[-1])
        call = recorder.calls
        recorder.calls += 1
        recorder.add("sdpa", "default", (), {"query": query, "key": key, "value": value, **params, "call": call}, out)
        ctx.recorder, ctx.call = recorder, call
        ctx.save_for_backward(query, key, value)
        return out

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        recorder: _Recorder = ctx.recorder
        tensors = ctx.saved_tensors
        with recorder.pause():
            grads = tuple(torch.empty_like(t) if need else None for t, need in zip(tensors, ctx.needs_input_grad))
        recorder.add(
            "sdpa_backward", "default", (), {"grad": grad, "call": ctx.call}, [g for g in grads if g is not None]
        )
        return (*grads, None, None)


def _like_query(query: Any, dv: int) -> Any:
    """An empty output of ``query``'s shape with ``dv`` for its last dim, laid out in the order of
    query's strides, as the CUDA kernels allocate it (cuDNN's and FlashAttention-2's output follow
    the query's layout): heads split from a projection (B, N, H, d) and transposed give an output
    whose transpose back is contiguous already, so no copy follows it."""
    shape = (*query.shape[:-1], dv)
    order = sorted(range(query.dim() - 1), key=lambda i: (-query.stride(i), i))  # outermost first
    order.append(query.dim() - 1)
    stored = query.new_empty([shape[i] for i in order])
    return stored.permute([order.index(i) for i in range(query.dim())])


def _check_sdpa(query: Any, key: Any, value: Any, gqa: bool) -> None:
    """The shape rules ``scaled_dot_product_attention`` enforces (a real call would raise)."""
    if query.dim() < 2 or key.dim() != query.dim() or value.dim() != query.dim():
        raise RuntimeError(
            "scaled_dot_product_attention: query, key and value need the same number of dims (2 or more)"
        )
    if query.shape[-1] != key.shape[-1]:
        raise RuntimeError(
            f"scaled_dot_product_attention: query's head dim {query.shape[-1]} is not key's {key.shape[-1]}"
        )
    if key.shape[-2] != value.shape[-2]:
        raise RuntimeError(f"scaled_dot_product_attention: key has {key.shape[-2]} positions, value {value.shape[-2]}")
    if query.dim() >= 3:
        heads, kv_heads = query.shape[-3], key.shape[-3]
        if key.shape[-3] != value.shape[-3] or (heads != kv_heads and not (gqa and heads % kv_heads == 0)):
            raise RuntimeError(
                f"scaled_dot_product_attention: {heads} query heads on {kv_heads} key and {value.shape[-3]} value heads"
                + ("" if gqa else " (enable_gqa=False)")
            )
        if query.shape[:-3] != key.shape[:-3]:
            raise RuntimeError("scaled_dot_product_attention: query and key have different batch dims")


def _bound(names: tuple[str, ...], defaults: Mapping[str, Any], args: Any, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(defaults)
    out.update(zip(names, args))
    out.update(kwargs)
    return out


def _is_device(v: Any) -> bool:
    if isinstance(v, torch.device):
        return True
    if isinstance(v, str):
        try:
            torch.device(v)
        except (RuntimeError, ValueError):
            return False
        return True
    return False


class _Rewrites(TorchFunctionMode):
    """What CUDA would dispatch where the CPU's composite ops differ (module docstring)."""

    def __init__(self, recorder: _Recorder) -> None:
        super().__init__()
        self.recorder = recorder

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = dict(kwargs or {})
        if func is _SDPA:
            p = _bound(_SDPA_PARAMS, _SDPA_DEFAULTS, args, kwargs)
            params = {k: p[k] for k in _SDPA_PARAMS[3:]}
            params["attn_mask"] = self.recorder.value(p["attn_mask"])
            params["backend"] = "auto"
            return _Sdpa.apply(p["query"], p["key"], p["value"], self.recorder, params)
        if func in _DROPOUTS:
            names = _DROPOUTS[func]
            p = _bound(names, {"p": 0.5, "training": True, "train": True, "inplace": False}, args, kwargs)
            x, rate, train = p["input"], float(p["p"]), bool(p.get("training", p.get("train")))
            if train and 0.0 < rate < 1.0 and x.is_floating_point() and x.numel() > 0:
                out = torch.native_dropout(x, rate, True)[0]
                return x.copy_(out) if p.get("inplace") else out
        if func in _SOFTMAXES:
            p = _bound(_SOFTMAXES[func], {"dim": None, "dtype": None}, args, kwargs)
            x = p["input"]
            if p["dtype"] is torch.float32 and x.dtype == torch.float16 and p["dim"] is not None:
                return torch._softmax(x, p["dim"], True)
        if func in (torch.Tensor.cuda, torch.Tensor.cpu):
            return args[0]
        if func is torch.Tensor.to:
            args = tuple(a for a in args if not _is_device(a))
            kwargs.pop("device", None)
        elif kwargs.get("device") is not None:
            kwargs["device"] = "cpu"
        return func(*args, **kwargs)


def _fake_input(shape: tuple[int, ...], dtype: str, grad: bool) -> torch.Tensor:
    t = torch.empty(shape, dtype=getattr(torch, dtype))
    return t.requires_grad_(grad)


def build_module(build: Callable[[], Any], label: str) -> torch.nn.Module:
    """Call ``build`` (a module class or a factory, bound to its configuration) on the meta device:
    the module's parameters have shapes and dtypes but no memory; :func:`_fake_module` then gives
    them fake tensors."""
    try:
        with _quiet(), torch.device("meta"):
            module = build()
    except (Exception, SystemExit) as exc:  # the user's code: one line naming it
        raise TraceError(f"{label} raised {exc.__class__.__name__} building the module: {_one_line(exc)}") from None
    if not isinstance(module, torch.nn.Module):
        raise TraceError(
            f"{label} returned {type(module).__name__}, not an nn.Module (a factory returns the module to trace)"
        )
    return module


def _fake_module(module: torch.nn.Module, dtype: str, grad: bool) -> dict[str, torch.Tensor]:
    """Every parameter and buffer of ``module`` replaced by a fake tensor of its shape (inside a
    ``FakeTensorMode``), floating ones at ``dtype`` as ``module.to(dtype)`` would make them;
    parameters need a gradient where ``grad``. Name -> tensor (``q_proj.weight``)."""
    out: dict[str, torch.Tensor] = {}
    for prefix, mod in module.named_modules():
        for key, p in list(mod._parameters.items()):
            if p is None:
                continue
            t = torch.empty(tuple(p.shape), dtype=getattr(torch, dtype) if p.is_floating_point() else p.dtype)
            mod._parameters[key] = torch.nn.Parameter(t, requires_grad=grad and t.is_floating_point())
            out[f"{prefix}.{key}" if prefix else key] = mod._parameters[key]
        for key, b in list(mod._buffers.items()):
            if b is None:
                continue
            mod._buffers[key] = torch.empty(
                tuple(b.shape), dtype=getattr(torch, dtype) if b.is_floating_point() else b.dtype
            )
            out[f"{prefix}.{key}" if prefix else key] = mod._buffers[key]
    return out


def record(
    fn: Callable[..., Any] | None,
    inputs: Mapping[str, tuple[tuple[int, ...], str]],
    *,
    backward: bool = False,
    name: str | None = None,
    grad: frozenset[str] | None = None,
    module: torch.nn.Module | None = None,
    param_dtype: str = "float32",
) -> Recording:
    """Call ``fn`` with a fake tensor for each of ``inputs`` (argument name -> (shape, torch dtype
    name)), by keyword, and record what it dispatches; with ``backward``, its backward too (the
    gradients of the floating inputs named in ``grad``, every one where it is None, from the
    first output that needs one).

    With ``module`` (built by :func:`build_module`) the call is the module's: its parameters and
    buffers become fake tensors at ``param_dtype`` (named inputs of the trace: ``q_proj.weight``),
    and it runs in eval mode without autograd, or, with ``backward``, in training mode with the
    parameters' gradients computed too."""
    label = name or getattr(fn, "__name__", repr(fn))
    recorder = _Recorder()
    with FakeTensorMode():
        params: dict[str, torch.Tensor] = {}
        if module is not None:
            try:
                params = _fake_module(module, param_dtype, backward)
            except (RuntimeError, ValueError) as exc:
                raise TraceError(f"the parameters of {label} cannot be made fake: {_one_line(exc)}") from None
            module.train(backward)
            fn = module
        assert fn is not None
        try:
            fakes = {
                k: _fake_input(
                    shape, dtype, backward and dtype.startswith(("float", "bfloat")) and (grad is None or k in grad)
                )
                for k, (shape, dtype) in inputs.items()
            }
        except (RuntimeError, ValueError) as exc:
            raise TraceError(f"the inputs of {label} cannot be made: {_one_line(exc)}") from None
        in_storages = {_storage(t): k for k, t in params.items()}
        in_storages.update({_storage(t): k for k, t in fakes.items()})
        grad_mode = torch.no_grad() if module is not None and not backward else contextlib.nullcontext()
        try:
            with _quiet(), grad_mode, _Rewrites(recorder), recorder:
                result = fn(**fakes)
        except TraceError:
            raise
        except (Exception, SystemExit) as exc:  # the user's code, on fake tensors: one line naming it
            raise TraceError(_failure(label, "", exc)) from None
        leaves = [t for t in pytree.tree_leaves(result) if isinstance(t, torch.Tensor)]
        if not leaves:
            raise TraceError(f"{label} returned no tensor: nothing to trace (return the attention's output)")
        outputs = {_storage(t): ("out" if len(leaves) == 1 else f"out{i}") for i, t in enumerate(leaves)}
        grad_outputs: dict[int, str] = {}
        grad_inputs: dict[int, str] = {}
        if backward:
            wanted = [(k, t) for k, t in (*fakes.items(), *params.items()) if t.requires_grad]
            first = next((t for t in leaves if t.requires_grad and t.grad_fn is not None), None)
            if first is None or not wanted:
                raise TraceError(
                    f"--backward: no output of {label} depends on a floating input (nothing to differentiate)"
                )
            recorder.pass_ = "backward"
            with recorder.pause():
                d_out = torch.empty_like(first)
            try:
                with _quiet(), _Rewrites(recorder), recorder:
                    grads = torch.autograd.grad(first, [t for _, t in wanted], d_out, allow_unused=True)
            except (Exception, SystemExit) as exc:
                raise TraceError(_failure(label, "'s backward", exc)) from None
            grad_outputs = {_storage(d_out): "dO"}
            grad_inputs = {_storage(g): f"d{k}" for (k, _), g in zip(wanted, grads) if g is not None}
            recorder.alive += [d_out, *(g for g in grads if g is not None)]
        return Recording(
            tuple(recorder.events), in_storages, outputs, grad_outputs, grad_inputs, len(recorder.node_ids)
        )


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """While the user's code runs: what it prints goes to stderr (stdout holds results only: JSON
    and CSV stay whole), and the warnings torch gives about fake tensors are not shown, nor the
    log line its fake-tensor code writes about an op that failed (the failure is reported once)."""
    import logging
    import sys
    import warnings

    fake_log = logging.getLogger("torch._subclasses.fake_tensor")
    was = fake_log.disabled
    fake_log.disabled = True
    try:
        with contextlib.redirect_stdout(sys.stderr), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        fake_log.disabled = was


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else exc.__class__.__name__


def _failure(label: str, what: str, exc: BaseException) -> str:
    kind = exc.__class__.__name__
    hint = ""
    if "DataDependent" in kind or "DynamicOutputShape" in kind:
        hint = " (fake tensors hold shapes, not values: code that reads a value on the host cannot be traced)"
    return f"{label}{what} raised {kind} under fake tensors: {_one_line(exc)}{hint}"
