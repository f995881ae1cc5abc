"""Standard attention: FlashAttention paper (Dao et al., 2022) Algorithms 0 and 3.

Forward (Algorithm 0), one kernel per line, S and P materialised in HBM:

1. ``qk``: S = QKᵀ (scale folded into Q)      — read Q, K; write S
2. ``mask`` (causal only): S ← −∞ above the diagonal, in place — read S and the N×N_kv
   boolean mask; write S (eager PyTorch's ``masked_fill_``; the full S is still written)
3. ``softmax``: P = softmax(S)                 — read S; write P
4. ``dropout`` (dropout > 0): P ← P ⊙ Z/(1−p)   — read P; write P and the mask Z (1 B/elt)
5. ``pv``: O = PV                              — read P, V; write O

Backward (Algorithm 3), with P (and Z) saved by the forward pass:

1. ``dv``: dV = Pᵀ dO        — read P, dO; write dV
2. ``dp``: dP = dO Vᵀ        — read dO, V; write dP
3. ``dropout_bwd`` (dropout > 0): dP ← dP ⊙ Z/(1−p) — read dP, Z; write dP
4. ``ds``: dS = P ⊙ (dP − rowsum(P ⊙ dP)) — read P, dP; write dS
5. ``dq``: dQ = dS K         — read dS, K; write dQ
6. ``dk``: dK = dSᵀ Q        — read dS, Q; write dK

Matmuls are batched GEMMs with 128×128 output tiles (cuBLAS-like): an operand is requested
from L2 once per tile row/column that needs it, and read from HBM once. GQA: the
query heads of a group are stacked so each K/V head is multiplied once.

:func:`standard_eager` (variant ``eager``) is what PyTorch's eager mode and autograd really
launch for the same forward written the usual way (scale applied to S, ``masked_fill_``,
``softmax``, ``dropout``): see its docstring.
"""

from __future__ import annotations

import functools
import math
from typing import Any

from .. import intmath
from ..intmath import IntLike
from ..workload import Workload
from . import l2 as l2m
from .ledger import DROPOUT, AlgorithmTraffic, Kernel, KernelBuilder

GEMM_TILE = 128


def _requests(along: str, extents: dict[str, IntLike]) -> tuple[IntLike, str]:
    """How often a GEMM operand is requested from L2: once per output tile along ``along``
    (a symbol of ``extents``), and that count as a formula (``⌈N_kv/128⌉``)."""
    return _tiles(extents[along]), f"⌈{along}/{GEMM_TILE}⌉"


def _readers(extents: dict[str, IntLike], s: IntLike, l2: l2m.L2) -> tuple[Any, Any]:
    """The two ways a standard kernel reads: ``operand`` (an input requested once per output
    tile along one extent, :func:`_requests`, read from HBM once) and ``just_written`` (an S-sized
    intermediate the kernel before wrote, partly still in L2: :func:`l2m.carried_over`)."""

    def operand(k: KernelBuilder, tensor: str, role: str, unique: IntLike, along: str | None, formula: str) -> None:
        if along is None:
            k.read(tensor, role, unique, unique, formula)
            return
        times, times_formula = _requests(along, extents)
        k.read(tensor, role, intmath.mul(unique, times), unique, f"{times_formula} · {formula}")

    def just_written(k: KernelBuilder, tensor: str, along: str | None = None) -> None:
        times, times_formula = _requests(along, extents) if along else (1, "")
        formula = f"{times_formula} · B·H·N·N_kv·e" if along else "B·H·N·N_kv·e"
        k.read(tensor, "intermediate", intmath.mul(s, times), l2m.carried_over(s, l2), formula)

    return operand, just_written


def _tiles(extent: IntLike) -> IntLike:
    """Output tiles of a GEMM along one dimension."""
    return intmath.ceil_div(extent, GEMM_TILE)


#: bytes a row of an operand must be a multiple of for cuBLAS' and the softmax's vectorised
#: paths (16-byte loads: 8 fp16 elements)
ROW_ALIGNMENT = 16


def _aligned(kernels: list[Kernel], w: Workload) -> tuple[Kernel, ...]:
    """Mark the products and softmaxes over S-shaped tensors whose rows (N_kv elements) are
    not a multiple of 16 bytes: a ViT's 577 tokens in fp16 are 1154-byte rows."""
    import dataclasses

    import numpy as np

    off = np.asarray(np.asarray(intmath.mul(w.n_kv_, w.element_bytes)) % ROW_ALIGNMENT != 0)
    flag: Any = bool(off) if off.ndim == 0 else off
    if not np.any(off):
        return tuple(kernels)
    ops = ("gemm", "softmax", "softmax_backward")
    return tuple(dataclasses.replace(k, unaligned=flag) if k.op in ops else k for k in kernels)


def standard(w: Workload, l2: l2m.L2, *, backward: bool = False) -> AlgorithmTraffic:
    """The kernels of Algorithm 0 (and 3), with their transfers at the three levels.

    A GEMM operand is requested from L2 once per output tile along the other dimension and
    read from HBM once, in every L2 mode: cuBLAS rasterises its output tiles so those
    computed at the same time share row and column panels, whose working set (a few MB)
    stays in L2 (measured on an H200: Q and K read once by QKᵀ at 4×16×4096×64; but 1.6× at
    2×16×8192×128 and 2.9× at 1×16×16384×64, re-reads this rule misses — small beside S). S, P, dP, dS just written by the previous kernel are read from L2 when
    they fit (mode ``on``).
    """
    e = w.element_bytes
    bh = intmath.mul(w.batch, w.heads)
    rows = intmath.mul(w.group, w.n)  # query rows per K/V head (the group stacked)
    q = intmath.mul(bh, w.n, w.d, e)  # also O, dO, dQ
    kv = w.kv_bytes()  # K or V (also dK, dV)
    s = intmath.mul(bh, w.n, w.n_kv_, e)  # S, P, dP, dS
    s_head = intmath.mul(rows, w.n_kv_, e)
    scores = intmath.mul(bh, w.n, w.n_kv_)
    matmul = intmath.mul(2, scores, w.d)
    # V, O, dO, dV at V's head dim (MLA: d_v ≠ d); the products with V or dO run at it
    o, v, dv = w.o_bytes(), w.v_bytes(), w.dv_sym
    matmul_v = intmath.mul(2, scores, w.d_v_)
    z = scores  # dropout mask, 1 byte per score
    kernels: list[Kernel] = []
    operand, just_written = _readers({"N_kv": w.n_kv_, "G·N": rows, "d": w.d, dv: w.d_v_}, s, l2)

    # --- forward -------------------------------------------------------------------
    k = KernelBuilder("qk")  # S = Q Kᵀ: [G·N × d] @ [d × N_kv]
    operand(k, "Q", "input", q, "N_kv", "B·H·N·d·e")
    operand(k, "K", "input", kv, "G·N", "B·H_kv·N_kv·d·e")
    k.write("S", "intermediate", s, "B·H·N·N_kv·e")
    kernels.append(k.build(matmul_flops=matmul, op="gemm"))

    if w.causal:
        mask = intmath.mul(w.n, w.n_kv_)  # one bool per score, shared by every head
        mask_req = intmath.mul(mask, bh)
        k = KernelBuilder("mask")
        just_written(k, "S")
        # the elementwise kernel streams the heads one after another: the mask is re-read per
        # head and stays in L2 only if it fits beside one head's S
        stream = l2.with_ctas(1)
        k.read(
            "mask",
            "state",
            mask_req,
            l2m.reread_hbm(mask, mask_req, bh, intmath.add(mask, s_head), stream),
            "B·H · N·N_kv·1",
        )
        k.write("S", "intermediate", s, "B·H·N·N_kv·e")
        # ATen's 32-bit indexing split: the mask broadcast over every head (4 launches over 2 × 32 × 8192² fp16)
        launches = elementwise_launches(scores, e, bh)
        kernels.append(k.build(softmax_flops=scores, op="elementwise", launches=launches))

    k = KernelBuilder("softmax")
    just_written(k, "S")
    k.write("P", "intermediate", s, "B·H·N·N_kv·e")
    # row max, subtract, row sum, divide: 4 FP32 ops per score; exp counted apart
    kernels.append(
        k.build(
            softmax_flops=intmath.mul(4, scores),
            exp_ops=scores,
            op="softmax",
            rows=intmath.mul(bh, w.n),
            row_length=w.n_kv_,
            masked_input=w.causal,
            element_bytes=4 if w.element_bytes == 4 else 0,  # fp32 rows: their own rate
        )
    )

    if w.dropout > 0:
        k = KernelBuilder("dropout")
        just_written(k, "P")
        k.write("P", "intermediate", s, "B·H·N·N_kv·e")
        k.write("Z", "state", z, "B·H·N·N_kv·1")
        kernels.append(k.build(softmax_flops=intmath.mul(2, scores), op="elementwise", kind=DROPOUT))

    k = KernelBuilder("pv")  # O = P V: [G·N × N_kv] @ [N_kv × d_v]
    just_written(k, "P", dv)
    operand(k, "V", "input", v, "G·N", f"B·H_kv·N_kv·{dv}·e")
    k.write("O", "output", o, f"B·H·N·{dv}·e")
    kernels.append(k.build(matmul_flops=matmul_v, op="gemm"))

    # --- backward ------------------------------------------------------------------
    if backward:
        k = KernelBuilder("dv", "backward")  # dV = Pᵀ dO: [N_kv × G·N] @ [G·N × d_v]
        operand(k, "P", "intermediate", s, dv, "B·H·N·N_kv·e")
        operand(k, "dO", "input", o, "N_kv", f"B·H·N·{dv}·e")
        k.write("dV", "output", v, f"B·H_kv·N_kv·{dv}·e")
        kernels.append(k.build(matmul_flops=matmul_v, op="gemm"))

        k = KernelBuilder("dp", "backward")  # dP = dO Vᵀ: [G·N × d_v] @ [d_v × N_kv]
        operand(k, "dO", "input", o, "N_kv", f"B·H·N·{dv}·e")
        operand(k, "V", "input", v, "G·N", f"B·H_kv·N_kv·{dv}·e")
        k.write("dP", "intermediate", s, "B·H·N·N_kv·e")
        kernels.append(k.build(matmul_flops=matmul_v, op="gemm"))

        if w.dropout > 0:
            k = KernelBuilder("dropout_bwd", "backward")
            just_written(k, "dP")
            k.read("Z", "state", z, z, "B·H·N·N_kv·1")
            k.write("dP", "intermediate", s, "B·H·N·N_kv·e")
            kernels.append(k.build(softmax_flops=intmath.mul(2, scores), op="elementwise", kind=DROPOUT))

        k = KernelBuilder("ds", "backward")
        operand(k, "P", "intermediate", s, None, "B·H·N·N_kv·e")
        just_written(k, "dP")
        k.write("dS", "intermediate", s, "B·H·N·N_kv·e")
        # P·dP, row sum, subtract, multiply: 4 FP32 ops per score
        kernels.append(k.build(softmax_flops=intmath.mul(4, scores), op="elementwise"))

        k = KernelBuilder("dq", "backward")  # dQ = dS K: [G·N × N_kv] @ [N_kv × d]
        just_written(k, "dS", "d")
        operand(k, "K", "input", kv, "G·N", "B·H_kv·N_kv·d·e")
        k.write("dQ", "output", q, "B·H·N·d·e")
        kernels.append(k.build(matmul_flops=matmul, op="gemm"))

        k = KernelBuilder("dk", "backward")  # dK = dSᵀ Q: [N_kv × G·N] @ [G·N × d]
        operand(k, "dS", "intermediate", s, "d", "B·H·N·N_kv·e")
        operand(k, "Q", "input", q, "N_kv", "B·H·N·d·e")
        k.write("dK", "output", kv, "B·H_kv·N_kv·d·e")
        kernels.append(k.build(matmul_flops=matmul, op="gemm"))

    return AlgorithmTraffic("standard", "algorithm0", _aligned(kernels, w), params={"gemm_tile": GEMM_TILE})


#: The standard-attention variants: the paper's Algorithms 0/3, and PyTorch eager + autograd.
STANDARD_VARIANTS = ("algorithm0", "eager")

#: the largest offset (in bytes) and element count ATen's elementwise kernels index with int32
INT32_MAX = 2**31 - 1


@functools.lru_cache(maxsize=4096)
def _iterator_launches(sizes: tuple[int, ...], strides: tuple[tuple[int, ...], ...]) -> int:
    """Launches of one ATen elementwise op over an iterator of ``sizes`` (fastest dim first)
    with each operand's byte ``strides``, as ``gpu_kernel`` issues them: one when
    ``TensorIteratorBase::can_use_32bit_indexing`` (numel and every operand's largest offset
    fit an int32), else ``with_32bit_indexing``'s halves, each split again the same way, the
    split dim the one of largest extent over the operands (the slowest on a tie)."""
    numel = math.prod(sizes)
    if numel <= INT32_MAX and all(1 + sum((n - 1) * st for n, st in zip(sizes, op)) <= INT32_MAX for op in strides):
        return 1
    dim, extent = -1, -1
    for i in range(len(sizes) - 1, -1, -1):
        if sizes[i] == 0:
            continue
        for op in strides:
            if (sizes[i] - 1) * abs(op[i]) > extent:
                dim, extent = i, (sizes[i] - 1) * abs(op[i])
    if sizes[dim] < 2:  # pragma: no cover - a single element past int32 offsets
        return 1
    copy = sizes[dim] // 2
    halves = (sizes[:dim] + (copy,) + sizes[dim + 1 :], sizes[:dim] + (sizes[dim] - copy,) + sizes[dim + 1 :])
    return sum(_iterator_launches(h, strides) for h in halves)


def iterator_launches(sizes: tuple[int, ...], strides: tuple[tuple[int, ...], ...]) -> int:
    """Launches of one ATen elementwise op over an iterator of ``sizes`` (fastest dim first, size-1
    dims dropped, dims coalesced as ``TensorIterator`` does) with each operand's byte ``strides``:
    :func:`_iterator_launches` for any iterator (:mod:`memmodel.tracing` gives it the traced tensors')."""
    return _iterator_launches(tuple(sizes), tuple(tuple(op) for op in strides))


def elementwise_launches(elements: IntLike, element_bytes: IntLike, outer: IntLike | None = None) -> IntLike:
    """Launches of an elementwise op over S-shaped tensors of ``elements`` scores (ATen's
    32-bit indexing split, :func:`_iterator_launches`). Same-shape contiguous operands
    coalesce into one dim of ``element_bytes`` stride; with ``outer`` (``masked_fill_`` with
    one mask broadcast over ``outer`` heads) the iterator keeps two dims, the mask's stride
    0 over the heads. 2 for a bf16 S of 2³¹ scores (4 GiB): halves of 2³⁰ scores, whose last
    byte offset 2³¹ − 1 fits."""

    def one(n: int, e: int, heads: int) -> int:
        if heads <= 0:
            return _iterator_launches((int(n),), ((int(e),),))
        inner = int(n) // int(heads)
        return _iterator_launches((inner, int(heads)), ((int(e), inner * int(e)), (1, 0)))

    heads = 0 if outer is None else outer
    if not intmath.is_array(elements, element_bytes, heads):
        return one(int(elements), int(element_bytes), int(heads))
    import numpy as np

    vec = np.frompyfunc(one, 3, 1)
    return np.asarray(vec(elements, element_bytes, heads), dtype=np.int64)


def standard_eager(w: Workload, l2: l2m.L2, *, backward: bool = False) -> AlgorithmTraffic:
    """Standard attention as eager PyTorch runs it, and the kernels autograd adds for its backward.

    The forward, as usually written (``s = q @ k.transpose(-2, -1)``; ``s = s * scale``;
    ``s.masked_fill_(mask, -inf)``; ``p = softmax(s, -1)``; ``p = dropout(p)``; ``o = p @ v``),
    one kernel per line, each S-sized tensor written to HBM:

    1. ``qk`` (GEMM): S = Q Kᵀ                       — read Q, K; write S
    2. ``scale``: S ← S · 1/√d (a new tensor)          — read S; write S
    3. ``mask`` (causal): ``masked_fill_`` in place    — read S and the boolean mask; write S.
       The mask is one (G·N) × N_kv tensor (the query heads of a GQA group stacked), shared
       by every batch and K/V head; an out-of-place ``masked_fill`` would add a copy of S.
    4. ``softmax``: P = softmax(S)                     — read S; write P (kept for the backward)
    5. ``dropout`` (p > 0): ``native_dropout``          — read P; write P' and the mask Z (bool)
    6. ``pv`` (GEMM): O = P' V                         — read P', V; write O

    Backward, in the order autograd runs it (a matmul's second operand's gradient first:
    ``BmmBackward0`` computes mat2's gradient before self's):

    7. ``dv``: dV = P'ᵀ dO; 8. ``dp``: dP' = dO Vᵀ
    9. ``dropout_bwd`` (p > 0): ``native_dropout_backward``, dP = dP' ⊙ Z/(1−p) — read dP', Z
    10. ``softmax_bwd_mul``, 11. ``softmax_bwd``: ``_softmax_backward_data`` is two kernels
        (ATen's ``softmax_backward_cuda_out``: ``Tensor tmp = grad * output``, then
        ``host_softmax_backward`` on tmp): T = dP ⊙ P — read dP and P, write T; then
        dS = T − P · rowsum(T) — read T and P, write dS
    12. ``mask_bwd_copy``, 13. ``mask_bwd`` (causal): masked_fill's gradient is
        ``grad.masked_fill(mask, 0)``, out of place: a copy of dS (a device-to-device
        ``cudaMemcpyAsync``, no kernel), then ``masked_fill_``
    14. ``scale_bwd``: dS ← dS · 1/√d (mul's gradient)
    15. ``dk``: dK = dSᵀ Q; 16. ``dq``: dQ = dS K

    The elementwise kernels (scale, mask, dropout's backward, the softmax gradient's product
    and their gradients) run through ATen's ``gpu_kernel``, which indexes with int32: over
    tensors of more than 2³¹ − 1 bytes it launches the op in parts
    (:func:`elementwise_launches`; ``Kernel.launches``), e.g. twice over a bf16 S of 2³¹
    scores. The softmax, dropout (64-bit indices there) and the copy stay one launch.

    GQA as in Algorithm 0: the query heads of a group stacked ([B, H_kv, G·N, d]), so the
    products and their gradients are per K/V head (no K/V expansion, no reduction).
    """
    e = w.element_bytes
    bh = intmath.mul(w.batch, w.heads)
    rows = intmath.mul(w.group, w.n)
    q = intmath.mul(bh, w.n, w.d, e)
    kv = w.kv_bytes()
    s = intmath.mul(bh, w.n, w.n_kv_, e)
    scores = intmath.mul(bh, w.n, w.n_kv_)
    matmul = intmath.mul(2, scores, w.d)
    # V, O, dO, dV at V's head dim (MLA: d_v ≠ d); the products with V or dO run at it
    o, v, dv = w.o_bytes(), w.v_bytes(), w.dv_sym
    matmul_v = intmath.mul(2, scores, w.d_v_)
    z = scores  # native_dropout's mask: one bool per score
    f_s = "B·H·N·N_kv·e"
    kernels: list[Kernel] = []
    operand, just_written = _readers({"N_kv": w.n_kv_, "G·N": rows, "d": w.d, dv: w.d_v_}, s, l2)

    def causal_mask(k: KernelBuilder) -> None:
        # one bool per (stacked query row, key); re-read per batch and K/V head, from L2 when
        # it fits beside one head's S (an elementwise kernel streams the heads in order)
        unique = intmath.mul(rows, w.n_kv_)
        requested = scores
        groups = intmath.mul(w.batch, w.kv_heads_)
        k.read(
            "mask",
            "state",
            requested,
            l2m.reread_hbm(
                unique, requested, groups, intmath.add(unique, intmath.mul(rows, w.n_kv_, e)), l2.with_ctas(1)
            ),
            "B·H_kv · G·N·N_kv·1",
        )

    # launches of an elementwise op over S (ATen's 32-bit indexing split); masked_fill_ with
    # the mask broadcast over the batch and K/V heads
    parts = elementwise_launches(scores, e)
    mask_parts = elementwise_launches(scores, e, intmath.mul(w.batch, w.kv_heads_))

    def elementwise(name: str, tensor: str, pass_: str, flops: IntLike, op: str, launches: IntLike = 1) -> None:
        k = KernelBuilder(name, pass_)
        just_written(k, tensor)
        if op == "masked_fill":
            causal_mask(k)
        k.write(tensor, "intermediate", s, f_s)
        kernels.append(k.build(softmax_flops=flops, op=op, launches=launches))

    # --- forward -------------------------------------------------------------------
    k = KernelBuilder("qk")
    operand(k, "Q", "input", q, "N_kv", "B·H·N·d·e")
    operand(k, "K", "input", kv, "G·N", "B·H_kv·N_kv·d·e")
    k.write("S", "intermediate", s, f_s)
    kernels.append(k.build(matmul_flops=matmul, op="gemm"))
    elementwise("scale", "S", "forward", scores, "scale", parts)
    if w.causal:
        elementwise("mask", "S", "forward", scores, "masked_fill", mask_parts)
    k = KernelBuilder("softmax")
    just_written(k, "S")
    k.write("P", "intermediate", s, f_s)
    kernels.append(
        k.build(
            softmax_flops=intmath.mul(4, scores),
            exp_ops=scores,
            op="softmax",
            rows=intmath.mul(bh, w.n),
            row_length=w.n_kv_,
            masked_input=w.causal,
            element_bytes=4 if w.element_bytes == 4 else 0,  # fp32 rows: their own rate
        )
    )
    p_used = "P"
    if w.dropout > 0:
        k = KernelBuilder("dropout")
        just_written(k, "P")
        k.write("P'", "intermediate", s, f_s)
        k.write("Z", "state", z, "B·H·N·N_kv·1")
        # per score: a uniform draw compared with p, and the scale 1/(1 − p); the Philox
        # draws themselves are integer work (4 numbers per 10-round call) not counted here
        kernels.append(k.build(softmax_flops=intmath.mul(2, scores), op="dropout", kind=DROPOUT))
        p_used = "P'"
    k = KernelBuilder("pv")
    just_written(k, p_used, dv)
    operand(k, "V", "input", v, "G·N", f"B·H_kv·N_kv·{dv}·e")
    k.write("O", "output", o, f"B·H·N·{dv}·e")
    kernels.append(k.build(matmul_flops=matmul_v, op="gemm"))

    if backward:
        k = KernelBuilder("dv", "backward")  # dV = P'ᵀ dO
        operand(k, p_used, "intermediate", s, dv, f_s)
        operand(k, "dO", "input", o, "N_kv", f"B·H·N·{dv}·e")
        k.write("dV", "output", v, f"B·H_kv·N_kv·{dv}·e")
        kernels.append(k.build(matmul_flops=matmul_v, op="gemm"))

        k = KernelBuilder("dp", "backward")  # dP' = dO Vᵀ
        operand(k, "dO", "input", o, "N_kv", f"B·H·N·{dv}·e")
        operand(k, "V", "input", v, "G·N", f"B·H_kv·N_kv·{dv}·e")
        k.write("dP", "intermediate", s, f_s)
        kernels.append(k.build(matmul_flops=matmul_v, op="gemm"))

        if w.dropout > 0:
            k = KernelBuilder("dropout_bwd", "backward")
            just_written(k, "dP")
            k.read("Z", "state", z, z, "B·H·N·N_kv·1")
            k.write("dP", "intermediate", s, f_s)
            kernels.append(
                k.build(softmax_flops=intmath.mul(2, scores), op="elementwise", launches=parts, kind=DROPOUT)
            )

        # _softmax_backward_data: T = dP ⊙ P (1 op per score), then dS = T − P·rowsum(T)
        # (row sum, multiply, subtract: 3); both are timed by the op's calibrated rate
        for name, grad, out, flops in (("softmax_bwd_mul", "dP", "T", 1), ("softmax_bwd", "T", "dS", 3)):
            k = KernelBuilder(name, "backward")
            just_written(k, grad)
            operand(k, "P", "intermediate", s, None, f_s)
            k.write(out, "intermediate", s, f_s)
            kernels.append(
                k.build(
                    softmax_flops=intmath.mul(flops, scores),
                    op="softmax_backward",
                    rows=intmath.mul(bh, w.n),
                    row_length=w.n_kv_,
                    launches=parts if name == "softmax_bwd_mul" else 1,
                )
            )
        if w.causal:
            elementwise("mask_bwd_copy", "dS", "backward", 0, "memcpy")  # a contiguous clone: cudaMemcpyAsync
            elementwise("mask_bwd", "dS", "backward", scores, "masked_fill", mask_parts)
        elementwise("scale_bwd", "dS", "backward", scores, "scale", parts)

        k = KernelBuilder("dk", "backward")  # dK = dSᵀ Q
        just_written(k, "dS", "d")
        operand(k, "Q", "input", q, "N_kv", "B·H·N·d·e")
        k.write("dK", "output", kv, "B·H_kv·N_kv·d·e")
        kernels.append(k.build(matmul_flops=matmul, op="gemm"))

        k = KernelBuilder("dq", "backward")  # dQ = dS K
        operand(k, "dS", "intermediate", s, "d", f_s)
        operand(k, "K", "input", kv, "G·N", "B·H_kv·N_kv·d·e")
        k.write("dQ", "output", q, "B·H·N·d·e")
        kernels.append(k.build(matmul_flops=matmul, op="gemm"))

    return AlgorithmTraffic("standard", "eager", _aligned(kernels, w), params={"gemm_tile": GEMM_TILE})


def standard_variant(variant: str, w: Workload, l2: l2m.L2, *, backward: bool = False) -> AlgorithmTraffic:
    """The ledger of standard attention's ``variant`` (:data:`STANDARD_VARIANTS`)."""
    if variant == "eager":
        return standard_eager(w, l2, backward=backward)
    if variant == "algorithm0":
        return standard(w, l2, backward=backward)
    from ..errors import WorkloadError

    raise WorkloadError(f"unknown standard variant {variant!r}: accepted are {', '.join(STANDARD_VARIANTS)}")


def standard_forward(w: Workload, l2: l2m.L2 | None = None) -> AlgorithmTraffic:
    """Forward pass only; without ``l2`` the paper's view (every request reaches HBM)."""
    return standard(w, l2 or l2m.L2("off", 0.0, 1))
