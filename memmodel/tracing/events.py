"""What a trace records: the tensors an op touches and the ops, as plain data (no torch).

:mod:`.record` fills these in while the user's function runs on fake tensors; :mod:`.kernels`
turns them into the model's kernels. Keeping the two apart keeps the mapping rules testable
without torch, and lets any other recorder (an ``nn.Module``'s forward, a captured graph) feed
the same rules.
"""

from __future__ import annotations

import math
from typing import Any

from ..frozen import frozen

#: torch dtype names -> the model's dtype names (the others are traced but timed at the trace's dtype)
MODEL_DTYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float8_e4m3fn": "fp8"}
#: the floating dtypes an input may take from ``--dtype`` (the model's names)
FLOAT_DTYPES = ("fp32", "fp16", "bf16")
#: what a ``--shape name=dims:DTYPE`` suffix may name: the model's float names and torch's others
INPUT_DTYPES = (*FLOAT_DTYPES, "bool", "int64", "int32", "int8", "uint8")
#: the model's dtype names -> torch's
TORCH_NAMES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


@frozen
class TensorRef:
    """A tensor an op reads or writes: its storage (an id shared by every view of it), shape,
    strides (in elements) and element type (torch's name and bytes per element)."""

    storage: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: str
    itemsize: int

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def unique_elements(self) -> int:
        """Elements held in memory: a broadcast (stride-0) dimension holds one."""
        if self.numel == 0:
            return 0
        return math.prod(n for n, st in zip(self.shape, self.strides) if st != 0)

    @property
    def nbytes(self) -> int:
        """Bytes of memory the tensor covers (each element once)."""
        return self.unique_elements * self.itemsize

    @property
    def model_dtype(self) -> str | None:
        return MODEL_DTYPES.get(self.dtype)

    def describe(self) -> str:
        """``[2, 8, 1024, 64] bfloat16``"""
        return f"[{', '.join(map(str, self.shape))}] {self.dtype}"


@frozen
class OpEvent:
    """One ATen op the function dispatched, in order: its name (``bmm``), overload, pass, its
    arguments (tensors as :class:`TensorRef`, the rest as plain values) and its outputs.

    ``view``: the op only re-describes memory (a view, an alias, an allocation): no kernel.
    The recorder also emits two events of its own: ``sdpa`` (a ``scaled_dot_product_attention``
    call, its arguments by name in ``kwargs`` and its call number in ``kwargs["call"]``) and
    ``sdpa_backward`` (its backward: ``kwargs["call"]`` and the gradients as outputs)."""

    op: str
    overload: str
    pass_: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    outputs: tuple[TensorRef, ...]
    view: bool = False
    #: in the backward: the autograd nodes the engine began running since the previous recorded op,
    #: up to this one (its own node among them where it is the first op of its node)
    nodes: int = 0

    @property
    def qualified(self) -> str:
        return f"aten.{self.op}.{self.overload}" if self.op not in ("sdpa", "sdpa_backward") else self.op

    def tensors(self) -> list[TensorRef]:
        """The tensor arguments, positional then keyword (lists of tensors flattened)."""
        found: list[TensorRef] = []

        def visit(value: Any) -> None:
            if isinstance(value, TensorRef):
                found.append(value)
            elif isinstance(value, (list, tuple)):
                for v in value:
                    visit(v)

        for value in (*self.args, *self.kwargs.values()):
            visit(value)
        return found

    def shapes(self) -> list[str]:
        """Each tensor argument and output, described (for ops listed as unmodelled)."""
        return [t.describe() for t in self.tensors()] + [f"-> {t.describe()}" for t in self.outputs]


@frozen
class Recording:
    """A traced call: the ops in order, and which storages hold the function's inputs (by
    argument name), its outputs, the gradients it was given (``dO``) and those it returned."""

    events: tuple[OpEvent, ...]
    inputs: dict[int, str]
    outputs: dict[int, str]
    #: storages of the gradients fed to the backward (one per output differentiated)
    grad_outputs: dict[int, str]
    #: storages of the gradients the backward returned (one per input differentiated)
    grad_inputs: dict[int, str]
    #: the autograd nodes the backward ran, each seen as the node running when something was
    #: dispatched (an ATen op or not: a node that dispatches nothing at all is not seen)
    backward_nodes: int = 0
