"""Run a trace case (:class:`memmodel.trace_cases.TraceCase`) on the GPU: the user's function or
module called with real random tensors, timed as :func:`.run.time_case` times a case.

What runs is what ``memmodel trace`` traces on fake tensors: the function called with a tensor
per ``--shape`` (by keyword), or the module it builds (built on the device, cast to ``--dtype``,
eval mode without autograd; training mode with ``--backward``), then with ``--backward``
``torch.autograd.grad`` of the first output that needs a gradient, for the floating inputs
(those ``--grad`` names) and the module's parameters, with a fixed random dO.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import TraceError
from ..trace_cases import TraceCase, resolve_target, source_digest
from . import run as _run

#: the standard deviation of the weights drawn for a parameter the module left uninitialised
#: (``torch.empty``: not finite, or garbage); the module's own initialisation is kept elsewhere
STAND_IN_STD = 0.02


def input_tensor(torch: Any, shape: tuple[int, ...], dtype: str, generator: Any, device: str) -> Any:
    """One argument's tensor, as the user's code most likely expects it:

    * floating: standard normal;
    * bool: a causal mask over its last two dims, True above the diagonal (``triu(1)``: the
      positions a query must not see, so no row is all masked), False where it has fewer dims;
    * int64, int32: 0, 1, 2, ... along the last dim (positions, or indices valid in any dim at
      least that long), the same in every row;
    * int8, uint8: uniform over the type's range (quantised values)."""
    from ..tracing.events import TORCH_NAMES

    t_dtype = getattr(torch, TORCH_NAMES.get(dtype, dtype))
    if t_dtype.is_floating_point:
        return torch.randn(*shape, generator=generator, device=device, dtype=torch.float32).to(t_dtype)
    if t_dtype == torch.bool:
        if len(shape) < 2:
            return torch.zeros(shape, dtype=torch.bool, device=device)
        rows, cols = shape[-2], shape[-1]
        mask = torch.ones(rows, cols, dtype=torch.bool, device=device).triu_(1)
        return mask.expand(shape).contiguous()
    if t_dtype in (torch.int64, torch.int32):
        line = torch.arange(shape[-1] if shape else 1, device=device, dtype=t_dtype)
        return (line.expand(shape) if shape else line[0]).contiguous()
    info = torch.iinfo(t_dtype)
    return torch.randint(info.min, info.max + 1, shape, generator=generator, device=device, dtype=t_dtype)


class TraceRun:
    """A trace case's inputs on the device and the steps that run it once: ``function`` (the
    call), or ``forward`` then ``backward`` (``torch.autograd.grad``, no ``.grad`` accumulated).
    ``run()`` runs the steps; the call's output is kept in ``output``."""

    def __init__(self, case: TraceCase, seed: int = 0, near: Path | None = None) -> None:
        from ..tracing import check_arguments, is_module_target, load_function

        torch = _run._torch()
        device = _run.DEVICE
        self.case = case
        target = resolve_target(case, near)
        self.source_sha256 = source_digest(target.rpartition(":")[0])
        fn, label = load_function(target)
        names = [name for name, _, _ in case.shapes]
        generator = torch.Generator(device=device).manual_seed(seed)
        dtype = getattr(torch, {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}[case.dtype])
        self.inputs = {
            name: input_tensor(torch, shape, own or case.dtype, generator, device) for name, shape, own in case.shapes
        }
        self.module: Any = None
        config = case.config_map
        if is_module_target(fn, names, config):
            self.module = self._build(torch, fn, config, label, dtype, device, seed)
            self.module.train(case.backward)  # as memmodel trace runs it
            check_arguments(self.module.forward, names, f"{label}'s forward")
            self.call: Callable[..., Any] = self.module
        else:
            check_arguments(fn, names, label)
            self.call = fn
        self.label = label
        self.params: list[Any] = []
        if case.backward:
            floating = [n for n, t in self.inputs.items() if t.is_floating_point()]
            wanted = [n for n in floating if case.grad is None or n in case.grad]
            for name in wanted:
                self.inputs[name].requires_grad_(True)
            self.wanted = [self.inputs[n] for n in wanted]
            if self.module is not None:
                self.params = [p for p in self.module.parameters() if p.is_floating_point() and p.requires_grad]
                self.wanted += self.params
            if not self.wanted:
                raise TraceError(f"--backward: {label} has no floating input to differentiate")
        self.state: dict[str, Any] = {}
        self.output: Any = None
        if case.backward:
            self.steps = [("forward", self._forward), ("backward", self._backward)]
        else:
            self.steps = [("function", self._forward)]

    @staticmethod
    def _build(torch: Any, fn: Any, config: dict[str, Any], label: str, dtype: Any, device: str, seed: int) -> Any:
        """The module on the device at ``dtype``: built by the class or factory with ``config``
        under a fixed seed (its own random initialisation), or an instance moved there."""
        from ..tracing import check_config

        if isinstance(fn, torch.nn.Module):
            if config:
                raise TraceError(f"--config: {label} is a module built already (give its class or a factory)")
            module = fn
        else:
            check_config(fn, config, label)
            torch.manual_seed(seed)
            try:
                with torch.device(device):
                    module = fn(**config)
            except Exception as exc:  # the user's code: one line naming it
                first = (str(exc).strip().splitlines() or [""])[0]
                raise TraceError(f"{label} raised {exc.__class__.__name__} building the module: {first}") from None
            if not isinstance(module, torch.nn.Module):
                raise TraceError(f"{label} returned {type(module).__name__}, not an nn.Module")
        module = module.to(device=device, dtype=dtype)
        with torch.no_grad():
            for p in module.parameters():
                if p.is_floating_point() and not bool(torch.isfinite(p).all()):
                    p.normal_(0.0, STAND_IN_STD)
        return module

    def _forward(self) -> Any:
        torch = _run._torch()
        if self.module is not None and not self.case.backward:
            with torch.no_grad():
                out = self.call(**self.inputs)
        else:
            out = self.call(**self.inputs)
        self.state["out"] = out
        self.output = out
        return out

    def _first(self, out: Any) -> Any:
        """The first output that needs a gradient (what ``memmodel trace --backward`` differentiates)."""
        from torch.utils import _pytree as pytree

        torch = _run._torch()
        for t in pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.requires_grad and t.grad_fn is not None:
                return t
        raise TraceError(
            f"--backward: no output of {self.label} depends on a floating input (nothing to differentiate)"
        )

    def prepare(self) -> None:
        """dO for the backward: standard normal with the differentiated output's shape and strides."""
        if self.case.backward and "do" not in self.state:
            torch = _run._torch()
            first = self._first(self._forward())
            g = torch.Generator(device=_run.DEVICE).manual_seed(1)
            self.state["do"] = torch.empty_like(first).normal_(generator=g)
            self.state.pop("out", None)

    def _backward(self) -> Any:
        torch = _run._torch()
        first = self._first(self.state.pop("out"))
        grads = torch.autograd.grad(first, self.wanted, self.state["do"], allow_unused=True)
        self.state["grads"] = grads
        return grads

    def run(self) -> Any:
        self.prepare()
        out = None
        for _, fn in self.steps:
            out = fn()
        return out

    def finite(self) -> bool:
        """Whether every floating tensor of the last output is finite."""
        from torch.utils import _pytree as pytree

        torch = _run._torch()
        leaves = [t for t in pytree.tree_leaves(self.output) if isinstance(t, torch.Tensor) and t.is_floating_point()]
        return all(bool(torch.isfinite(t.detach()).all()) for t in leaves)


def time_trace_case(case: TraceCase, *, reps: int = 20, warmup: int = 3, near: Path | None = None) -> dict[str, Any]:
    """A trace case measured as :func:`.run.time_case` measures a case: the GPU's time of each
    step (``kernels``) and of the whole (``time_s``), queued behind a sleeping kernel; the
    profiler's kernels in launch order (``profiled_kernels``: names and CUPTI durations, memsets
    and copies as it reports them); the call, queued and CUDA-graph times (:func:`.run.call_times`)."""
    torch = _run._torch()
    t0 = time.perf_counter()
    run = TraceRun(case, near=near)
    run.run()  # the first call: lazy initialisation, autotuning, compilation
    first_s = time.perf_counter() - t0
    result: dict[str, Any] = {"case": case.to_dict(), "output_finite": run.finite(), "first_call_s": first_s}
    if run.source_sha256:
        result["source_sha256"] = run.source_sha256
    measured = _run.measure_run(run, reps=reps, warmup=warmup)
    del run
    if _run.DEVICE == "cuda":
        torch.cuda.empty_cache()
    return {**result, **measured}
