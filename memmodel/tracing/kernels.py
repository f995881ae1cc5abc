"""The model's kernels for a traced function's ATen ops (:class:`.events.Recording`): the rules.

Each recorded op becomes one of:

* **free**: a view (``view``, ``transpose``, ``expand``, ``permute``, ``unsqueeze``, ``slice``,
  ``split`` ...), an alias (``detach``, ``_unsafe_view``) or an allocation (``empty*``): no kernel;
* **kernels**, with the transfers the standard-attention ledgers count (:mod:`..traffic.standard`):

  - *GEMMs* (``mm``, ``bmm``, ``addmm``, ``baddbmm``; ``matmul`` and ``einsum`` arrive as these,
    with the copies their reshapes materialise as ``clone``): C[b, m, n] = A[b, m, k] · B[b, k, n]
    with 128 × 128 output tiles, A requested from L2 once per tile column (⌈n/128⌉ times) and B
    once per tile row (⌈m/128⌉), each read from HBM once; 2·b·m·n·k FLOPs; ``op="gemm"`` (the
    profile's cuBLAS rates);
  - *elementwise* ops (arithmetic, ``masked_fill``, ``where``, casts, copies, fills): each input
    read, the output written, once. An input broadcast over the output (a mask shared by every
    head) is requested once per output element and re-read from HBM unless it stays in L2 beside
    what the kernel streams between two uses of it (:func:`..traffic.l2.reread_hbm`). An op whose
    tensors pass 2³¹ − 1 bytes launches in parts (ATen's 32-bit indexing,
    :func:`..traffic.standard.iterator_launches`). ``op`` is ``scale`` (a tensor times a number),
    ``masked_fill``, ``copy`` (``clone``, ``copy_``, ``_to_copy``), ``dropout`` or ``elementwise``;
    ``masked_fill`` out of place is a ``clone`` and a ``masked_fill_`` (ATen's own decomposition);
  - *softmax* (``_softmax``, ``_log_softmax``; ``op="softmax"``, 4 FLOPs and an exp per score)
    and its backward ``_softmax_backward_data``, two kernels as ATen's CUDA code runs it (the
    product grad ⊙ output, then the softmax backward proper);
  - *dropout* (``native_dropout``: the output and a bool mask written) and its backward;
  - *reductions* (``sum``, ``amax`` ...: ``op="reduction"``).

  A tensor the previous kernel wrote is read from L2 where it fits (:func:`..traffic.l2.carried_over`).
* **sdpa**: a ``scaled_dot_product_attention`` call (or one of ATen's ``_scaled_dot_product_*``
  kernels): memmodel's fused model of the kernel PyTorch would choose (``--impl auto``'s rule; an
  ``_scaled_dot_product_*`` op names its own), through :func:`..model.compare`: its tiled kernels
  and their timing, forward where the call is, backward where autograd runs its backward;
* **unmodelled**: any other op, listed with its shapes, never dropped.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from ..errors import MemmodelError
from ..frozen import frozen
from ..traffic import l2 as l2m
from ..traffic.ledger import DROPOUT, Kernel, KernelBuilder
from ..traffic.standard import GEMM_TILE, ROW_ALIGNMENT, iterator_launches
from ..workload import Workload
from .events import OpEvent, Recording, TensorRef

#: the kernel statuses an op may end as (:attr:`OpMapping.status`)
STATUSES = ("kernel", "free", "sdpa", "unmodelled")


@frozen
class Unmodelled:
    """An op the trace saw and the model does not count: listed in every output, never dropped."""

    op: str
    pass_: str
    shapes: tuple[str, ...]
    reason: str


@frozen
class OpMapping:
    """What one recorded op became (:data:`STATUSES`) and the names of its kernels."""

    op: str
    pass_: str
    status: str
    kernels: tuple[str, ...]
    shapes: tuple[str, ...]
    #: a fused call's (``sdpa``) implementation, as its model ran it ("paper": the paper's algorithm)
    implementation: str | None = None
    #: in the backward: the autograd nodes begun before it since the op before (:attr:`.events.OpEvent.nodes`)
    nodes: int = 0


@frozen
class SdpaCall:
    """A ``scaled_dot_product_attention`` call as the fused model ran it: the workload, the
    implementation (PyTorch's choice, or the one an ``_scaled_dot_product_*`` op names) and the
    notes the model gave on the choice."""

    call: int
    workload: Workload
    implementation: str
    backward: bool
    notes: tuple[str, ...]


@frozen
class Mapped:
    """The kernels of a recording in launch order, with what each needs to be timed: a fused
    call's kernels come timed (their implementation's figures), the others are timed alone at
    their ``dtype`` (``head_dims``: a GEMM's smallest extent, for the unaligned-rows rates)."""

    kernels: tuple[Kernel, ...]
    timings: tuple[Any, ...]
    dtypes: tuple[str, ...]
    head_dims: tuple[int | None, ...]
    ops: tuple[OpMapping, ...]
    unmodelled: tuple[Unmodelled, ...]
    sdpa: tuple[SdpaCall, ...]
    notes: tuple[str, ...]


class _NotModelled(Exception):
    """Raised by a rule for an op it cannot count: the op is listed with ``reason``."""


Rule = Callable[["_Mapper", OpEvent], None]
#: op name (ATen's, without the overload) -> its rule
RULES: dict[str, Rule] = {}


def rule(*names: str) -> Callable[[Rule], Rule]:
    """Register a rule for ATen ops ``names``; an op given two rules is an error."""

    def register(fn: Rule) -> Rule:
        for name in names:
            if name in RULES:
                raise ValueError(f"two rules for aten.{name}")
            RULES[name] = fn
        return fn

    return register


def _tiles(extent: int, tile: int = GEMM_TILE) -> int:
    return -(-extent // tile)


#: the output tile cuBLAS runs a large product with (rows × columns): the H200's dense
#: projections ran nvjet_sm90_tst_256x128 and 320x128 kernels (validation/h200/final/
#: h200-trace-check), Ampere's cuBLAS its 256x128 kernels; attention-shaped products (an inner
#: or output dimension of a head dim) keep GEMM_TILE's 128 × 128, which the standard kernels'
#: validation measured
LARGE_GEMM_TILE = (256, 128)
#: a product takes LARGE_GEMM_TILE where its rows, columns and inner dimension all pass this
LARGE_GEMM_FROM = 256
#: cuBLAS splits a product's inner dimension over CTAs, and adds a reduction kernel after it,
#: where its output tiles (SPLITK_TILE rows × columns) are fewer than the SMs times its inner
#: dimension over SPLITK_INNER, and that dimension is SPLITK_MIN_INNER or more: read off the
#: H200's one-row to 64-row projections (validation/h200/tiny-ops: Llama-3-8B's and Qwen2.5-7B's
#: q, k, v, o, gate, up and down, GPT-2's; 40 products, each kernel list as the profiler saw it).
#: Products of a batch (bmm) were measured at decode shapes only, none split: taken as never
SPLITK_TILE = (32, 64)
SPLITK_INNER = 8192
SPLITK_MIN_INNER = 2048


def splits_k(batch: int, rows: int, cols: int, inner: int, sm_count: int) -> int:
    """The splits of a product's inner dimension cuBLAS runs (:data:`SPLITK_TILE`; 1: none, no
    reduction kernel; a batch of products: none); where it splits, enough to fill the SMs (at least
    2, at most one split a 256 of the inner dimension): the reduction's bytes."""
    if batch != 1 or inner < SPLITK_MIN_INNER or sm_count <= 0:
        return 1
    tiles = _tiles(rows, SPLITK_TILE[0]) * _tiles(cols, SPLITK_TILE[1])
    if tiles * SPLITK_INNER >= sm_count * inner:
        return 1
    return max(2, min(-(-sm_count // tiles), inner // 256))


def _dims(ref: TensorRef) -> str:
    """``8·1024·64·2``: the tensor's elements held in memory, times bytes per element."""
    held = [n for n, st in zip(ref.shape, ref.strides) if st != 0] or [1]
    return "·".join(str(n) for n in (*held, ref.itemsize))


def _aligned(ref: TensorRef, shape: tuple[int, ...]) -> list[int]:
    """``ref``'s strides (elements) over the dims of ``shape`` it broadcasts to: 0 where it is
    broadcast (a missing dim, a size-1 dim against a larger one, or a stride-0 dim)."""
    pad = len(shape) - ref.ndim
    out = []
    for d, n in enumerate(shape):
        if d < pad:
            out.append(0)
            continue
        own = ref.shape[d - pad]
        out.append(0 if own == 1 and n != 1 else ref.strides[d - pad])
    return out


def launches(out: TensorRef, inputs: list[TensorRef]) -> int:
    """Launches of an elementwise op writing ``out`` from ``inputs`` (ATen's 32-bit indexing
    split): the iterator's dims ordered fastest first by the output's strides, size-1 dims dropped,
    neighbours coalesced where every operand's strides allow, then
    :func:`..traffic.standard.iterator_launches`."""
    operands = [out, *(t for t in inputs if t.ndim > 0)]
    strides = [[s * t.itemsize for s in _aligned(t, out.shape)] for t in operands]
    order = sorted((d for d in range(out.ndim) if out.shape[d] > 1), key=lambda d: (abs(out.strides[d]), -d))
    if not order:
        return 1
    sizes = [out.shape[order[0]]]
    st = [[s[order[0]]] for s in strides]
    for d in order[1:]:
        if all(s[d] == op[-1] * sizes[-1] for s, op in zip(strides, st)):
            sizes[-1] *= out.shape[d]
        else:
            sizes.append(out.shape[d])
            for s, op in zip(strides, st):
                op.append(s[d])
    return iterator_launches(tuple(sizes), tuple(tuple(op) for op in st))


def _row_bytes(ref: TensorRef) -> int:
    """Bytes of one row of ``ref`` as stored (its unit-stride dim, else its last)."""
    unit = [n for n, st in zip(ref.shape, ref.strides) if st == 1]
    return (unit[-1] if unit else (ref.shape[-1] if ref.shape else 1)) * ref.itemsize


class _Launch:
    """One kernel being built: its reads and writes under the trace's L2 rules."""

    def __init__(self, mapper: _Mapper, op: str, pass_: str) -> None:
        self.m = mapper
        self.name = mapper.kernel_name(op)
        self.k = KernelBuilder(self.name, pass_)
        self.written: set[int] = set()

    def read(
        self, ref: TensorRef, *, tiles: int | None = None, over: TensorRef | None = None, tile: int = GEMM_TILE
    ) -> None:
        """Read ``ref``: as a GEMM operand requested once per output tile of ``tile`` along the
        other operand's ``tiles`` extent, or as an elementwise input broadcast ``over`` the output."""
        m, e = self.m, ref.itemsize
        tensor, role = m.name(ref.storage), m.role(ref)
        unique = ref.nbytes
        if ref.ndim == 0:  # a number in a tensor: one load
            self.k.read(tensor, role, e, e, f"{e}")
            return
        if over is not None and over.numel > ref.unique_elements and ref.unique_elements > 0:
            aligned = _aligned(ref, over.shape)
            requested = over.numel * e
            groups = -(-over.numel // ref.unique_elements)
            last = max((d for d, (st, n) in enumerate(zip(aligned, over.shape)) if st == 0 and n > 1), default=-1)
            inner = range(last + 1, len(over.shape))
            held = math.prod(over.shape[d] for d in inner if aligned[d] != 0) * e
            streamed = math.prod(over.shape[d] for d in inner) * over.itemsize
            hbm = l2m.reread_hbm(unique, requested, groups, held + streamed, m.l2.with_ctas(1))
            self.k.read(tensor, role, requested, hbm, f"{groups} · {_dims(ref)}")
            return
        hbm = l2m.carried_over(unique, m.l2) if ref.storage in m.last_written else unique
        if tiles is not None:
            requested = ref.numel * e * _tiles(tiles, tile)
            self.k.read(tensor, role, requested, hbm, f"⌈{tiles}/{tile}⌉ · {_dims(ref)}")
            return
        self.k.read(tensor, role, unique, hbm, _dims(ref))

    def write(self, ref: TensorRef) -> None:
        nbytes = ref.numel * ref.itemsize
        self.k.write(self.m.name(ref.storage), self.m.role(ref), nbytes, "·".join(map(str, (*ref.shape, ref.itemsize))))
        self.written.add(ref.storage)

    def done(self, op: str, dtype: str | None = None, head_dim: int | None = None, **fields: Any) -> str:
        self.m.add(self.k.build(op=op, **fields), None, dtype or self.m.dtype, head_dim, self.written)
        return self.name


class _Mapper:
    """Walks a recording's ops in order and builds their kernels (module docstring)."""

    def __init__(
        self, rec: Recording, l2: l2m.L2, dtype: str, sdpa: Callable[..., Any] | None, sm_count: int = 0
    ) -> None:
        self.rec = rec
        self.l2 = l2
        #: the GPU's SMs (cuBLAS' split-K rule, :func:`splits_k`; 0: no product is split)
        self.sm_count = sm_count
        self.dtype = dtype
        #: runs a fused call: (workload, implementation, backward) -> its Comparison (None: skip)
        self.sdpa = sdpa
        self.names: dict[int, str] = {**rec.inputs, **rec.outputs, **rec.grad_outputs, **rec.grad_inputs}
        self.inputs = set(rec.inputs) | set(rec.grad_outputs)
        self.outputs = set(rec.outputs) | set(rec.grad_inputs)
        self.temporaries = 0
        self.named = 0
        self.used: dict[str, int] = {}
        self.last_written: set[int] = set()
        self.masked: set[int] = set()
        self.kernels: list[Kernel] = []
        self.timings: list[Any] = []
        self.dtypes: list[str] = []
        self.head_dims: list[int | None] = []
        self.ops: list[OpMapping] = []
        self.unmodelled: list[Unmodelled] = []
        self.calls: list[SdpaCall] = []
        self.notes: list[str] = []
        self.comparisons: dict[int, Any] = {}
        self.sdpa_events = _sdpa_calls(rec.events)
        self.backward_calls = {call for call, pass_, _ in self.sdpa_events.values() if pass_ == "backward"}

    # --- names -----------------------------------------------------------------------
    def name(self, storage: int) -> str:
        if storage not in self.names:
            self.named += 1
            self.names[storage] = f"t{self.named}"
        return self.names[storage]

    def role(self, ref: TensorRef) -> str:
        if ref.dtype == "bool":  # masks, given or drawn (dropout's): state, as compare counts them
            return "state"
        if ref.storage in self.inputs:
            return "input"
        if ref.storage in self.outputs:
            return "output"
        return "intermediate"

    def kernel_name(self, op: str) -> str:
        self.used[op] = self.used.get(op, 0) + 1
        return op if self.used[op] == 1 else f"{op}#{self.used[op]}"

    def temporary(self, like: TensorRef, dtype: str | None = None, itemsize: int | None = None) -> TensorRef:
        """A tensor a kernel writes and the next reads, inside one ATen op (contiguous)."""
        self.temporaries += 1
        strides, acc = [], 1
        for n in reversed(like.shape):
            strides.append(acc)
            acc *= n
        storage = -self.temporaries
        return TensorRef(storage, like.shape, tuple(reversed(strides)), dtype or like.dtype, itemsize or like.itemsize)

    # --- kernels ---------------------------------------------------------------------
    def launch(self, op: str, e: OpEvent) -> _Launch:
        return _Launch(self, op, e.pass_)

    def add(self, kernel: Kernel, timing: Any, dtype: str, head_dim: int | None, written: set[int]) -> None:
        self.kernels.append(kernel)
        self.timings.append(timing)
        self.dtypes.append(dtype)
        self.head_dims.append(head_dim)
        self.last_written = set(written)

    def run(self) -> Mapped:
        for i, e in enumerate(self.rec.events):
            before = len(self.kernels)
            shapes = tuple(e.shapes())
            if i in self.sdpa_events:
                status = self._fused(e, *self.sdpa_events[i])
            elif e.view:
                status = "free"
            elif e.op in RULES:
                try:
                    RULES[e.op](self, e)
                    status = "kernel"
                except _NotModelled as exc:
                    status = self._unmodelled(e, str(exc))
            else:
                status = self._unmodelled(e, "no rule for this op")
            names = tuple(k.name for k in self.kernels[before:])
            impl = None
            if status == "sdpa" and i in self.sdpa_events:
                c = self.comparisons.get(self.sdpa_events[i][0])
                impl = (c.options.implementation or "paper") if c is not None else None
            self.ops.append(OpMapping(e.qualified, e.pass_, status, names, shapes, impl, e.nodes))
        return Mapped(
            tuple(self.kernels),
            tuple(self.timings),
            tuple(self.dtypes),
            tuple(self.head_dims),
            tuple(self.ops),
            tuple(self.unmodelled),
            tuple(self.calls),
            tuple(dict.fromkeys(self.notes)),
        )

    def _unmodelled(self, e: OpEvent, reason: str) -> str:
        self.unmodelled.append(Unmodelled(e.qualified, e.pass_, tuple(e.shapes()), reason))
        return "unmodelled"

    def _fused(self, e: OpEvent, call: int, pass_: str, params: dict[str, Any]) -> str:
        """A fused attention call: its kernels from the model (forward here, backward at its
        backward's event)."""
        if pass_ == "backward":
            c = self.comparisons.get(call)
            if c is not None:
                self._fused_kernels(c, "backward", call, e)
            self.last_written = {t.storage for t in e.outputs}
            return "sdpa" if c is not None else self._unmodelled(e, "its forward was not modelled")
        try:
            w, impl, notes = _sdpa_workload(params)
        except _NotModelled as exc:
            self.last_written = {t.storage for t in e.outputs}
            return self._unmodelled(e, str(exc))
        backward = call in self.backward_calls
        if self.sdpa is None:  # a second pass (the XCD view): the fused kernels are kept from the first
            self.last_written = {t.storage for t in e.outputs}
            return "sdpa"
        try:
            c = self.sdpa(w, impl, backward)
        except MemmodelError as exc:
            self.last_written = {t.storage for t in e.outputs}
            return self._unmodelled(e, str(exc))
        self.comparisons[call] = c
        implementation = c.options.implementation or "paper"
        label = f"sdpa call {len(self.calls) + 1}"
        found = list(dict.fromkeys([*notes, *c.warnings, *c.caveats]))
        self.calls.append(SdpaCall(call, w, implementation, backward, tuple(found)))
        self.notes += [f"{label} ({implementation}): {n}" for n in found]
        mask = params.get("attn_mask")
        if isinstance(mask, TensorRef):
            self.unmodelled.append(
                Unmodelled(
                    "sdpa attn_mask",
                    e.pass_,
                    (mask.describe(),),
                    f"{label} reads an explicit attn_mask ({mask.nbytes} bytes held) inside its fused kernel: "
                    "not counted",
                )
            )
        self._fused_kernels(c, "forward", call, e)
        return "sdpa"

    def _fused_kernels(self, c: Any, pass_: str, call: int, e: OpEvent) -> None:
        written = {t.storage for t in e.outputs}
        for kernel, timing in zip(c.tiled.traffic.kernels, c.tiled.timing.kernels):
            if kernel.pass_ != pass_:
                continue
            name = self.kernel_name(f"sdpa:{kernel.name}")
            renamed = dataclasses.replace(
                kernel, name=name, transfers=tuple(dataclasses.replace(t, kernel=name) for t in kernel.transfers)
            )
            self.add(renamed, dataclasses.replace(timing, name=name), c.workload.dtype, c.workload.d, written)


# --- fused attention ------------------------------------------------------------------

#: ATen's fused attention kernels: name -> (backend, the positions of dropout_p, is_causal and the
#: mask in its schema; None: it takes none)
SDPA_OPS = {
    "_scaled_dot_product_flash_attention": ("sdpa-flash", 3, 4, None),
    "_scaled_dot_product_efficient_attention": ("sdpa-efficient", 5, 6, 3),
    "_scaled_dot_product_cudnn_attention": ("sdpa-cudnn", 5, 6, 3),
    "_scaled_dot_product_flash_attention_for_cpu": ("auto", 3, 4, None),
}


def _sdpa_calls(events: tuple[OpEvent, ...]) -> dict[int, tuple[int, str, dict[str, Any]]]:
    """Event index -> (call, pass, parameters) of each fused attention call and its backward:
    the recorder's own ``sdpa`` events, and ATen's ``_scaled_dot_product_*`` ops (a backward op
    paired with the latest unpaired forward of its kind)."""
    out: dict[int, tuple[int, str, dict[str, Any]]] = {}
    open_calls: dict[str, list[int]] = {}
    numbered = 0
    for i, e in enumerate(events):
        if e.op == "sdpa":
            out[i] = (int(e.kwargs["call"]), "forward", dict(e.kwargs))
        elif e.op == "sdpa_backward":
            out[i] = (int(e.kwargs["call"]), "backward", {})
        elif e.op in SDPA_OPS:
            backend, drop, causal, mask = SDPA_OPS[e.op]
            args = e.args
            params = {
                "query": args[0],
                "key": args[1],
                "value": args[2],
                "dropout_p": args[drop] if len(args) > drop else e.kwargs.get("dropout_p", 0.0),
                "is_causal": args[causal] if len(args) > causal else e.kwargs.get("is_causal", False),
                "attn_mask": (args[mask] if mask is not None and len(args) > mask else e.kwargs.get("attn_mask")),
                "enable_gqa": True,
                "backend": backend,
            }
            numbered += 1
            call = -numbered
            open_calls.setdefault(e.op, []).append(call)
            out[i] = (call, "forward", params)
        elif e.op.endswith("_backward") and e.op.removesuffix("_backward") in SDPA_OPS:
            pending = open_calls.get(e.op.removesuffix("_backward"))
            if pending:
                out[i] = (pending.pop(), "backward", {})
    return out


def _sdpa_workload(p: dict[str, Any]) -> tuple[Workload, str, list[str]]:
    """The workload and implementation of a fused call, and notes on how they were read."""
    q, k, v = p["query"], p["key"], p["value"]
    if not all(isinstance(t, TensorRef) and t.ndim >= 2 for t in (q, k, v)):
        raise _NotModelled("query, key and value must be tensors of two dims or more")
    dtype = q.model_dtype
    if dtype not in ("fp32", "fp16", "bf16") or k.dtype != q.dtype or v.dtype != q.dtype:
        raise _NotModelled(f"a fused call on {q.dtype}, {k.dtype}, {v.dtype} tensors is not modelled")
    heads = q.shape[-3] if q.ndim >= 3 else 1
    kv_heads = k.shape[-3] if k.ndim >= 3 else 1
    batch = math.prod(q.shape[:-3]) if q.ndim > 3 else 1
    mask = p.get("attn_mask")
    causal = bool(p.get("is_causal")) and not isinstance(mask, TensorRef)
    notes = []
    n, n_kv = q.shape[-2], k.shape[-2]
    if causal and n != n_kv:
        notes.append(
            f"is_causal with {n} queries and {n_kv} keys: PyTorch aligns the mask top-left, the model bottom-right"
        )
        if n_kv < n:
            raise _NotModelled(f"is_causal with fewer keys ({n_kv}) than queries ({n}) is not modelled")
    try:
        w = Workload(
            n=n,
            d=q.shape[-1],
            batch=batch,
            heads=heads,
            kv_heads=kv_heads,
            n_kv=n_kv,
            d_v=v.shape[-1],
            dtype=dtype,
            causal=causal,
            dropout=float(p.get("dropout_p") or 0.0),
        )
    except MemmodelError as exc:
        raise _NotModelled(str(exc)) from None
    impl = str(p.get("backend", "auto"))
    if isinstance(mask, TensorRef) and impl == "auto":
        from ..implementations import unsupported

        if unsupported("sdpa-efficient", w) is None:
            impl = "sdpa-efficient"
            notes.append("an explicit attn_mask rules out PyTorch's flash kernel: modelled as sdpa-efficient")
    return w, impl, notes


# --- the rules ------------------------------------------------------------------------


@rule("mm", "bmm", "addmm", "baddbmm")
def _gemm(m: _Mapper, e: OpEvent) -> None:
    if e.op in ("mm", "bmm"):
        a, b, bias, beta = e.args[0], e.args[1], None, 0
    else:
        bias, a, b = e.args[:3]
        beta = e.kwargs.get("beta", e.args[3] if len(e.args) > 3 else 1)
    out = e.outputs[0]
    if not (a.model_dtype and b.model_dtype):
        raise _NotModelled(f"a product of {a.dtype} and {b.dtype} tensors: no GEMM rate for it")
    rows, inner = a.shape[-2], a.shape[-1]
    cols = b.shape[-1]
    batch = out.numel // max(rows * cols, 1)
    added = isinstance(bias, TensorRef) and beta != 0
    # addmm of a bias row at beta 1 adds it in cuBLASLt's epilogue; otherwise (baddbmm, a 2-D
    # bias, another beta) ATen first copies the bias, expanded, into the result, and cuBLAS reads
    # that back as C (beta · C + A · B)
    epilogue = added and e.op == "addmm" and bias.ndim == 1 and beta == 1
    if added and not epilogue:
        c = m.launch(f"{e.op}.copy", e)
        expanded = TensorRef(bias.storage, out.shape, tuple(_aligned(bias, out.shape)), bias.dtype, bias.itemsize)
        c.read(bias, over=out)
        c.write(out)
        _copied(c, expanded, out)
    k = m.launch(e.op, e)
    # a large dense product (a projection, an MLP): cuBLAS' large output tiles, A requested once
    # per tile column, B once per tile row; attention-shaped products keep 128 × 128
    large = min(rows, cols, inner) > LARGE_GEMM_FROM
    tile_rows, tile_cols = LARGE_GEMM_TILE if large else (GEMM_TILE, GEMM_TILE)
    k.read(a, tiles=cols, tile=tile_cols)
    k.read(b, tiles=rows, tile=tile_rows)
    if epilogue:
        k.read(bias, over=out)
    elif added:
        k.read(out)  # C: the bias the copy wrote
    splits = splits_k(batch, rows, cols, inner, m.sm_count)
    partials = m.temporary(out, "float32", 4) if splits > 1 else None
    if partials is not None:  # fp32 partial products, one set a split, summed by a second kernel
        partials = dataclasses.replace(
            partials, shape=(splits, *partials.shape), strides=(partials.numel, *partials.strides)
        )
    k.write(partials if partials is not None else out)
    unaligned = any(_row_bytes(t) % ROW_ALIGNMENT for t in (a, b, out))
    k.done(
        "gemm",
        a.model_dtype,
        min(rows, cols, inner),
        matmul_flops=2 * batch * rows * cols * inner,
        unaligned=unaligned,
    )
    if partials is not None:
        r = m.launch(f"{e.op}.reduce", e)
        r.read(partials)
        r.write(out)
        r.done("splitk_reduce", softmax_flops=partials.numel, splits=splits)


def _elementwise(
    m: _Mapper, e: OpEvent, op: str, flops: int = 1, exp: bool = False, read: bool = True, kind: str = "", **fields: Any
) -> None:
    out = e.outputs[0]
    inputs: list[TensorRef] = []
    seen = set()
    for t in e.tensors() if read else []:
        key = (t.storage, t.shape, t.strides)
        if key not in seen:
            seen.add(key)
            inputs.append(t)
    k = m.launch(e.op, e)
    for t in inputs:
        k.read(t, over=out)
    k.write(out)
    if any(t.storage in m.masked for t in inputs):
        m.masked.add(out.storage)
    k.done(
        op,
        softmax_flops=flops * out.numel,
        exp_ops=out.numel if exp else 0,
        launches=launches(out, inputs),
        kind=kind,
        **fields,
    )


def _run(ref: TensorRef, out: TensorRef) -> int:
    """Elements ``ref`` holds contiguous in ``out``'s order (fastest dim first, size-1 dims
    dropped): the run ATen's generic kernel reads it in. An operand broadcast along the fastest dim
    (a column, a number) is one value a run: ``out``'s elements (it does not limit)."""
    aligned = _aligned(ref, out.shape)
    order = sorted((d for d in range(out.ndim) if out.shape[d] > 1), key=lambda d: (abs(out.strides[d]), -d))
    if not order or aligned[order[0]] == 0:
        return max(out.numel, 1)
    run, expected = 1, 1
    for d in order:
        if aligned[d] != expected:
            break
        run *= out.shape[d]
        expected *= out.shape[d]
    return run


#: ops of one multiply-or-add per element (and their in-place forms)
ARITHMETIC = (
    "add", "sub", "rsub", "mul", "div", "neg", "abs", "reciprocal", "sqrt", "rsqrt", "pow", "maximum",
    "minimum", "clamp", "clamp_min", "clamp_max", "relu", "gelu", "silu", "sigmoid", "tanh", "sign",
    "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_not", "bitwise_and",
    "bitwise_or", "bitwise_not", "lerp", "addcmul", "addcdiv", "where",
)  # fmt: skip
#: ops of one exponential (or logarithm) per element, on the special-function units
TRANSCENDENTAL = ("exp", "exp2", "expm1", "log", "log2", "log1p", "sin", "cos")


def _same_layout(t: TensorRef, out: TensorRef) -> bool:
    """Whether ``t`` walks ``out``'s elements in ``out``'s order: the same strides on every dim of
    more than one element, once broadcast to ``out``'s shape. Size-one dims do not count (ATen's
    iterator drops them), so a bias row over a one-token batch, or a head transposed across a
    single position, keeps the vectorised kernel."""
    aligned = _aligned(t, out.shape)
    return all(a == s for a, s, n in zip(aligned, out.strides, out.shape) if n > 1)


@rule(*ARITHMETIC, *(f"{n}_" for n in ARITHMETIC if n != "where"))
def _arithmetic(m: _Mapper, e: OpEvent) -> None:
    """A tensor times a number, or any arithmetic whose tensors all have the output's shape and
    layout, runs ATen's vectorised elementwise kernel (``vectorized_elementwise_kernel``: the
    profile's ``kernels.scale`` rate, measured on a multiply by a number); an operand broadcast or
    strided against the output takes its generic path (``elementwise_kernel``: the
    ``kernels.elementwise`` rate, measured on ``masked_fill_`` with a broadcast mask)."""
    tensors = [t for t in e.tensors() if t.ndim > 0]
    out = e.outputs[0]
    # a number given as a 0-dim tensor (GPT-2's divisor) is an operand of its own: ATen's generic
    # path (measured on the H200: 1.7 TB/s, against 4.1 for a Python number)
    zero_dim = any(t.ndim == 0 for t in e.tensors())
    # a tensor times a number: vectorised where the tensor walks the output's layout (a strided
    # view, such as one of a packed QKV's heads, takes the generic path as any strided operand)
    scale = e.op.rstrip("_") in ("mul", "div") and len(tensors) == 1 and not zero_dim and _same_layout(tensors[0], out)
    dense = all(_same_layout(t, out) for t in tensors) and e.op != "where" and not zero_dim
    if e.op == "where" and e.args and isinstance(e.args[0], TensorRef) and e.args[0].dtype == "bool":
        m.masked.add(e.outputs[0].storage)
    if scale or dense:
        _elementwise(m, e, "scale")
        return
    # the generic path: timed by the elements it writes at the run its inputs are read in
    # (kernels.gather, measured by run on the H200: validation/h200/aten-paths)
    _elementwise(
        m, e, "gather", run=min((_run(t, out) for t in tensors), default=out.numel), element_bytes=out.itemsize
    )


@rule(*TRANSCENDENTAL, *(f"{n}_" for n in TRANSCENDENTAL))
def _transcendental(m: _Mapper, e: OpEvent) -> None:
    _elementwise(m, e, "elementwise", flops=0, exp=True)


@rule("masked_fill_")
def _masked_fill_(m: _Mapper, e: OpEvent) -> None:
    value = e.args[2] if len(e.args) > 2 else None
    if isinstance(value, TensorRef) or (isinstance(value, (int, float)) and value < -1e3):
        m.masked.add(e.outputs[0].storage)  # scores set to −∞ (or far below): a masked softmax input
    _elementwise(m, e, "masked_fill")


@rule("masked_fill")
def _masked_fill(m: _Mapper, e: OpEvent) -> None:
    """Out of place: ATen clones ``self`` (contiguous), then runs ``masked_fill_`` on the copy."""
    source, out = e.args[0], e.outputs[0]
    k = m.launch("clone", e)
    k.read(source, over=out)
    k.write(out)
    _copied(k, source, out)
    inplace = dataclasses.replace(e, op="masked_fill_", args=(out, *e.args[1:]))
    _masked_fill_(m, inplace)


@rule("_to_copy", "clone", "copy_", "lift_fresh_copy")
def _copy(m: _Mapper, e: OpEvent) -> None:
    out = e.outputs[0]
    source = e.args[1] if e.op == "copy_" else e.args[0]
    k = m.launch(e.op, e)
    k.read(source, over=out)
    k.write(out)
    if source.storage in m.masked:
        m.masked.add(out.storage)
    _copied(k, source, out)


def _copied(k: _Launch, source: TensorRef, out: TensorRef) -> None:
    """Finish a copy of ``source`` into ``out``. A copy of a permuted, transposed or expanded view
    gathers: ATen's generic elementwise path, timed by the run its source is read in
    (kernels.gather: 0.64 TB/s for a transposed last pair of bf16, 1.56 for runs of 128 elements
    and more, against 4.2 for a contiguous copy) or, for an expanded view, at the expanded copy's
    rate; a contiguous conversion to a wider dtype runs element by element (kernels.cast, about
    half a copy's rate): validation/h200/aten-paths."""
    plain = source.dtype == out.dtype and _contiguous(source) and _contiguous(out)
    gather = source.strides != out.strides and source.shape == out.shape and not _contiguous(source)
    n = launches(out, [source])
    if gather:
        expanded = any(st == 0 and size > 1 for size, st in zip(source.shape, source.strides))
        op = "expand" if expanded else "gather"
        k.done(op, softmax_flops=0, launches=n, run=_run(source, out), element_bytes=out.itemsize)
    elif source.itemsize < out.itemsize:
        k.done("cast", softmax_flops=0, launches=1 if _contiguous(source) and _contiguous(out) else n)
    elif plain:  # ATen copies same-dtype contiguous tensors with cudaMemcpyAsync: a DtoD memcpy
        k.done("memcpy", softmax_flops=0, launches=1)
    else:
        k.done("copy", softmax_flops=0, launches=n)


def _contiguous(t: TensorRef) -> bool:
    acc = 1
    for n, st in zip(reversed(t.shape), reversed(t.strides)):
        if n != 1 and st != acc:
            return False
        acc *= n
    return True


@rule(
    "full", "full_like", "zeros", "zeros_like", "ones", "ones_like", "new_zeros", "new_ones", "new_full",
    "fill_", "zero_", "scalar_tensor", "arange",
)  # fmt: skip
def _fill(m: _Mapper, e: OpEvent) -> None:
    _elementwise(m, e, "elementwise", flops=0, read=False)
    # a tensor filled far below any score (the FlashAttention benchmark's −10000 mask, made with
    # ``full`` then ``triu``): what it is added to is a masked softmax input
    value = next((a for a in e.args if isinstance(a, (int, float)) and not isinstance(a, bool)), None)
    if value is not None and value < -1e3:
        m.masked.add(e.outputs[0].storage)


@rule("triu", "tril", "triu_", "tril_")
def _triangle(m: _Mapper, e: OpEvent) -> None:
    _elementwise(m, e, "elementwise")


@rule("_softmax", "_log_softmax")
def _softmax(m: _Mapper, e: OpEvent) -> None:
    x, out = e.args[0], e.outputs[0]
    dim = int(e.args[1]) % max(x.ndim, 1)
    row = x.shape[dim] if x.ndim else 1
    k = m.launch(e.op, e)
    k.read(x)
    k.write(out)
    k.done(
        "softmax",
        softmax_flops=4 * x.numel,  # row max, subtract, row sum, divide; exp counted apart
        exp_ops=x.numel,
        rows=x.numel // max(row, 1),
        row_length=row,
        masked_input=x.storage in m.masked,
        unaligned=bool(row * x.itemsize % ROW_ALIGNMENT),
        element_bytes=4 if x.itemsize == 4 and out.itemsize == 4 else 0,
    )


@rule("_softmax_backward_data", "_log_softmax_backward_data")
def _softmax_backward(m: _Mapper, e: OpEvent) -> None:
    """Two kernels, as ATen's CUDA code runs it: T = grad ⊙ output, then the backward proper
    (grad_input = T − output · rowsum(T)) reading T and the output."""
    grad, output, out = e.args[0], e.args[1], e.outputs[0]
    dim = int(e.args[2]) % max(grad.ndim, 1)
    row = grad.shape[dim] if grad.ndim else 1
    rows = grad.numel // max(row, 1)
    unaligned = bool(row * grad.itemsize % ROW_ALIGNMENT)
    product = m.temporary(grad)
    k = m.launch(f"{e.op}.mul", e)
    k.read(grad)
    k.read(output)
    k.write(product)
    k.done(
        "softmax_backward",
        softmax_flops=grad.numel,
        rows=rows,
        row_length=row,
        launches=launches(product, [grad, output]),
        unaligned=unaligned,
    )
    k = m.launch(e.op, e)
    k.read(product)
    k.read(output)
    k.write(out)
    k.done("softmax_backward", softmax_flops=3 * grad.numel, rows=rows, row_length=row, unaligned=unaligned)


@rule("native_dropout")
def _dropout(m: _Mapper, e: OpEvent) -> None:
    x = e.args[0]
    train = e.args[2] if len(e.args) > 2 else e.kwargs.get("train", True)
    if not train:
        raise _NotModelled("native_dropout outside training (train=False)")
    k = m.launch(e.op, e)
    k.read(x)
    for t in e.outputs:
        k.write(t)
    # per score: a uniform draw compared with p, and the scale 1/(1 − p) (the Philox draws are
    # integer work, not counted)
    k.done("dropout", softmax_flops=2 * x.numel, kind=DROPOUT)


@rule("native_dropout_backward")
def _dropout_backward(m: _Mapper, e: OpEvent) -> None:
    _elementwise(m, e, "elementwise", flops=2, kind=DROPOUT)


#: reductions: one add (or compare) per element read
REDUCTIONS = ("sum", "mean", "amax", "amin", "max", "min", "prod", "logsumexp", "argmax", "argmin", "var", "std")


@rule(*REDUCTIONS)
def _reduction(m: _Mapper, e: OpEvent) -> None:
    x = e.args[0]
    if not isinstance(x, TensorRef):
        raise _NotModelled("a reduction of no tensor")
    k = m.launch(e.op, e)
    k.read(x)
    for t in e.outputs:
        k.write(t)
    out = e.outputs[0]
    if e.op == "sum" and _over_leading_dims(x, out):  # a bias gradient: ATen's column reduction
        k.done("column_reduction", softmax_flops=x.numel, element_bytes=x.itemsize, rows=x.numel // out.numel)
        return
    k.done("reduction", softmax_flops=x.numel, element_bytes=x.itemsize, outputs=out.numel)


def _over_leading_dims(x: TensorRef, out: TensorRef) -> bool:
    """Whether a sum of contiguous ``x`` into ``out`` keeps its last dim and reduces leading ones
    (``dO.sum(0)`` of a linear layer's bias gradient), which ATen runs as a column reduction."""
    kept = [n for n in out.shape if n > 1]
    return (
        _contiguous(x)
        and x.numel > out.numel > 1
        and x.shape[-1] > 1
        and bool(kept)
        and kept[-1] == x.shape[-1]
        and x.numel // out.numel > 1
        and out.numel == math.prod(n for n in x.shape[x.ndim - len(kept) :])
    )


@rule("cat", "stack")
def _concatenate(m: _Mapper, e: OpEvent) -> None:
    """Each input copied into its slice of the output: read once, the output written once."""
    out = e.outputs[0]
    parts = [t for t in e.tensors()]
    k = m.launch(e.op, e)
    for t in parts:
        k.read(t)
    k.write(out)
    # contiguous inputs: a copy's rate (3.1-4.1 TB/s measured, by the width of the slices); an
    # input that is a strided view (the rotary halves of permuted heads) is indexed element by
    # element (kernels.gather.cat_bandwidth)
    strided = [t for t in parts if t.ndim and not _contiguous(t)]
    if strided:
        run = min(_inner_run(t) for t in strided)
        k.done("cat", softmax_flops=0, run=run, element_bytes=out.itemsize)
        return
    k.done("copy", softmax_flops=0)


def _inner_run(t: TensorRef) -> int:
    """Elements ``t`` holds contiguous in its own order (last dim first)."""
    run = 1
    for n, st in zip(reversed(t.shape), reversed(t.strides)):
        if n == 1:
            continue
        if st != run:
            break
        run *= n
    return run


def map_recording(
    rec: Recording,
    l2: l2m.L2,
    dtype: str,
    sdpa: Callable[[Workload, str, bool], Any] | None,
    sm_count: int = 0,
) -> Mapped:
    """The kernels of ``rec`` against ``l2`` (timed at ``dtype`` where no tensor says otherwise);
    ``sdpa(workload, implementation, backward)`` runs a fused call through the model (None: a
    second pass, the fused kernels left out); ``sm_count``: the GPU's SMs (products of few output
    tiles split their inner dimension, :func:`splits_k`; 0: none)."""
    return _Mapper(rec, l2, dtype, sdpa, sm_count).run()
