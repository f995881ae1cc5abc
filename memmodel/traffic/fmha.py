"""FlashAttention-1 as flash-attn v1's fmha kernels run (``--impl fa1``; v1.0.9, read in
``csrc/flash_attn/src/fmha_fprop_kernel_1xN.h``, ``fmha_dgrad_kernel_1xN_loop.h`` and the
launch templates; docs/implementations.md). The paper's Algorithm 1 is :func:`.flash.fa1`.

**Forward** (grid B × H × splits, :data:`FORWARD_WARPS` warps, :data:`ROWS` = 16 query rows
a step): a CTA walks the K/V blocks of its head (B_c keys each: 256 for d ≤ 64,
128 for d = 128), loading each block once; for each it walks its Q blocks (every
splits-th 16-row block, causal: from the block's diagonal on), reading the Q block, the
previous O (fp32, ``o_tmp``) and logsumexp, and writing them back (O in the output dtype at
the Q block's last K/V block). So per head: K, V once per split; Q once per visited K/V
block; the fp32 O and the logsumexp written at every visit but the last and read at every
visit but the first (the logsumexp is written at every visit).

**Backward**, split (``num_splits_heuristic_bwd`` chose a CTA per K/V block): a ``dot(dO, O)``
kernel writes D; the main kernel (grid B × H × T_c, 8 warps) reads its K/V block once and, per
visited Q block, Q, dO, lse and D, adding its dQ into a zeroed fp32 buffer by atomics; dK, dV
written once; then ``dq.copy_(dq_tmp)``. Not split: one CTA per (batch, head) walks every K/V
block as the forward does, D computed from dO and O in its first step, the fp32 dQ read and
written back per visit as the forward's O.

L2 (``--l2 on``): what a CTA re-reads per K/V block (its rows of Q, the fp32 O or dQ, the
statistics; backward also dO) hits where the rows of the CTAs in flight fit the L2's
effective capacity; else every re-read comes from HBM. K/V blocks (and the split backward's Q
rows) shared by CTAs of one head are read from HBM once per wave those CTAs span: the CTAs
of one head sit B·H apart in the grid (batch fastest, then head, then split).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import intmath
from ..intmath import IntLike
from ..workload import ACC_BYTES, STAT_BYTES
from . import l2 as l2m
from .blocks import TileContext
from .facts import BackwardFacts, TiledFacts
from .flash import visited_share
from .ledger import HEAD_GRID, AlgorithmTraffic, Kernel, KernelBuilder, Transfer, only_where, present_kernels

#: query rows of one step of an FA1 CTA (``Cta_tile_p::M``: the ``STEP`` of every
#: ``FMHA_kernel_traits`` in ``fmha_fwd_hdim*.cu`` and ``fmha_bwd_hdim*.cu``)
ROWS = 16
#: warps of the forward CTA (they split a K/V block's keys, ``WARPS_N``: each holds a quarter
#: of K and V in registers and the 16 rows' partial P·V are summed in shared memory) and of
#: the backward CTA
FORWARD_WARPS = 4
BACKWARD_WARPS = 8


def _sub(a: IntLike, b: IntLike) -> IntLike:
    if intmath.is_array(a, b):
        return np.asarray(a, dtype=np.int64) - np.asarray(b, dtype=np.int64)
    return int(a) - int(b)


def _where(cond: Any, yes: IntLike, no: IntLike) -> IntLike:
    if isinstance(cond, np.ndarray) or intmath.is_array(yes) or intmath.is_array(no):
        out = np.where(cond, yes, no)
        return int(out) if np.ndim(out) == 0 else out.astype(np.int64)
    return yes if cond else no


def _spans(ctas_per_head: IntLike, bh: IntLike, slots: IntLike) -> IntLike:
    """Waves a head's CTAs fall into: its ``ctas_per_head`` CTAs sit B·H apart in grid order,
    so at most that many, at most the grid's waves."""
    waves = intmath.ceil_div(intmath.mul(bh, ctas_per_head), slots)
    return intmath.minimum(ctas_per_head, intmath.maximum(waves, 1))


def _visits(ctx: TileContext, nbytes: IntLike) -> IntLike:
    """``nbytes`` (a tensor over all rows) once per visited K/V block: T_c times unless causal."""
    return intmath.scaled(intmath.mul(ctx.blocks.t_c, nbytes), ctx.visited, ctx.all_pairs)


def _sram(k: KernelBuilder, tensor: str, nbytes: IntLike, formula: str) -> None:
    """A tile exchanged through shared memory only (written by each warp, read back)."""
    for direction in ("write", "read"):
        k.transfers.append(Transfer(k.name, tensor, "intermediate", "sram", direction, nbytes, formula))


def fa1_forward_kernel(ctx: TileContext, l2: l2m.L2, splits: IntLike) -> Kernel:
    w, b = ctx.w, ctx.blocks
    e = w.element_bytes
    bh = intmath.mul(w.batch, w.heads)
    q = intmath.mul(bh, w.n, w.d, e)
    acc = intmath.mul(bh, w.n, w.d, ACC_BYTES)  # the fp32 O between K/V blocks
    stat = intmath.mul(bh, w.n, STAT_BYTES)
    # a split past the head's Q blocks returns before it loads anything (N = 16: one CTA a head)
    splits = intmath.minimum(splits, b.t_r)
    ctas = intmath.mul(bh, splits)
    slots = intmath.minimum(ctx.concurrent, ctas)
    # the rows of the CTAs in flight, each with its Q, fp32 O and logsumexp
    rows = intmath.mul(slots, intmath.ceil_div(w.n, splits))
    fits = l2m.fits(intmath.mul(rows, intmath.add(intmath.mul(w.d, e), intmath.mul(w.d, ACC_BYTES), STAT_BYTES)), l2)
    kv_req = intmath.mul(splits, bh, w.n_kv_, w.d, e)  # every split's CTA loads every K/V block
    kv_hbm = (
        kv_req
        if l2.mode == "off"
        else intmath.mul(w.kv_bytes(), _spans(splits, bh, intmath.maximum(ctx.concurrent, 1)))
    )
    kv_hbm = intmath.minimum(kv_hbm, kv_req)
    q_req, stat_w = _visits(ctx, q), _visits(ctx, stat)
    acc_rw, stat_r = _sub(_visits(ctx, acc), acc), _sub(stat_w, stat)  # all visits but one per row
    v = visited_share(w)
    k = KernelBuilder("fa1_fwd")
    for tensor in ("K", "V"):
        k.read(tensor, "input", kv_req, kv_hbm, "splits · B·H·N_kv·d·e", kv_req)  # into registers once
    # every warp reads the CTA's 16 query rows from shared memory
    k.read("Q", "input", q_req, _where(fits, q, q_req), f"T_c · B·H·N·d·e{v}", intmath.mul(FORWARD_WARPS, q_req))
    k.read("O", "state", acc_rw, _where(fits, 0, acc_rw), f"(T_c − 1) · B·H·N·d·4{v}")
    k.read("lse", "state", stat_r, _where(fits, 0, stat_r), f"(T_c − 1) · B·H·N·4{v}")
    k.write("O", "state", acc_rw, f"(T_c − 1) · B·H·N·d·4{v}", hbm=_where(fits, intmath.minimum(acc, acc_rw), acc_rw))
    k.write("O", "output", q, "B·H·N·d·e")
    k.write("lse", "state", stat_w, f"T_c · B·H·N·4{v}", hbm=_where(fits, stat, stat_w))
    # the 4 warps' partial P·V products (each warp holds a quarter of the keys) summed in shared memory
    _sram(k, "O", intmath.mul(FORWARD_WARPS, _visits(ctx, acc)), f"{FORWARD_WARPS} · T_c · B·H·N·d·4{v}")
    row_steps = intmath.mul(bh, b.block_q, ctx.visited)  # (query row, K/V block) pairs, whole 16-row tiles
    scores, d = ctx.exec_scores, ctx.exec_d
    return k.build(
        matmul_flops=intmath.mul(4, scores, d),
        # per score: max, subtract, sum (3); per row and K/V block: sum the 4 warps' partial
        # products (3 adds an element), rescale the previous O and divide by the sum (2)
        softmax_flops=intmath.add(intmath.mul(3, scores), intmath.mul(5, row_steps, d)),
        # one exp per score; per row and K/V block the previous max's exp and the logsumexp's log
        exp_ops=intmath.add(scores, intmath.mul(2, row_steps)),
        concurrent_ctas=slots,
        bytes_in_flight_per_cta=intmath.mul(2, b.block_kv, w.d, e),
        overlap="serial-compute",
        ctas=ctas,
        blocks=intmath.mul(bh, ctx.visited),
        diagonal_blocks=intmath.mul(bh, ctx.diagonal),
        dropout_scores=scores if w.dropout > 0 else 0,
        kind=HEAD_GRID,
    )


def fa1_backward_kernels(
    ctx: TileContext, l2: l2m.L2, splits: IntLike, ctas_per_sm: IntLike, sm_count: int
) -> list[Kernel]:
    """The backward's kernels: split (``splits`` > 1, one CTA per K/V block) or not; on a grid
    the rows of each kind run their own kernels."""
    split = np.asarray(splits) > 1
    if np.ndim(split) == 0:
        return (
            _split_backward(ctx, l2, ctas_per_sm, sm_count)
            if split
            else [_plain_backward(ctx, l2, ctas_per_sm, sm_count)]
        )
    return present_kernels(
        only_where(_plain_backward(ctx, l2, ctas_per_sm, sm_count), ~split),
        *(only_where(k, split) for k in _split_backward(ctx, l2, ctas_per_sm, sm_count)),
    )


def _backward_flops(ctx: TileContext) -> dict[str, IntLike]:
    w, b = ctx.w, ctx.blocks
    bh = intmath.mul(w.batch, w.heads)
    row_steps = intmath.mul(bh, b.block_q, ctx.visited)
    scores, d = ctx.exec_scores, ctx.exec_d
    return {
        # recompute S = QKᵀ, dP = dO Vᵀ, dV += PᵀdO, dQ = dS K, dK += dSᵀQ: 5 products
        "matmul_flops": intmath.mul(10, scores, d),
        # per score: exp's scale and subtract, dS = P ⊙ (dP − D) (3); per row and K/V block the
        # 8 warps' partial dQ summed in shared memory and added to the running dQ (8 an element)
        "softmax_flops": intmath.add(intmath.mul(3, scores), intmath.mul(8, row_steps, d)),
        "exp_ops": scores,
        "blocks": intmath.mul(bh, ctx.visited),
        "diagonal_blocks": intmath.mul(bh, ctx.diagonal),
        "dropout_scores": scores if w.dropout > 0 else 0,
    }


def _plain_backward(ctx: TileContext, l2: l2m.L2, ctas_per_sm: IntLike, sm_count: int) -> Kernel:
    w, b = ctx.w, ctx.blocks
    e = w.element_bytes
    bh = intmath.mul(w.batch, w.heads)
    q = intmath.mul(bh, w.n, w.d, e)
    acc = intmath.mul(bh, w.n, w.d, ACC_BYTES)
    stat = intmath.mul(bh, w.n, STAT_BYTES)
    kv = intmath.mul(bh, w.n_kv_, w.d, e)
    slots = intmath.minimum(intmath.mul(sm_count, ctas_per_sm), bh)
    row = intmath.add(intmath.mul(2, w.d, e), intmath.mul(w.d, ACC_BYTES), intmath.mul(2, STAT_BYTES))
    fits = l2m.fits(intmath.mul(slots, w.n, row), l2)
    v = visited_share(w)
    k = KernelBuilder("fa1_bwd", "backward")
    kv_hbm = w.kv_bytes() if l2.mode != "off" else kv
    k.read("K", "input", kv, kv_hbm, "B·H·N_kv·d·e")
    k.read("V", "input", kv, kv_hbm, "B·H·N_kv·d·e")
    k.read("O", "output", q, q, "B·H·N·d·e (first K/V block: D = rowsum(dO ⊙ O))")
    k.write("D", "state", stat, "B·H·N·4")
    for tensor, role, nbytes, formula in (
        ("Q", "input", q, "B·H·N·d·e"),
        ("dO", "input", q, "B·H·N·d·e"),
        ("lse", "state", stat, "B·H·N·4"),
    ):
        req = _visits(ctx, nbytes)
        k.read(tensor, role, req, _where(fits, nbytes, req), f"T_c · {formula}{v}")
    d_req = _visits(ctx, stat)
    # D is read right after the first K/V block wrote it: from L2 there, later ones as the rest
    d_hbm = d_req if l2.mode == "off" else _where(fits, 0, _sub(d_req, stat))
    k.read("D", "state", d_req, d_hbm, f"T_c · B·H·N·4{v}")
    acc_rw = _sub(_visits(ctx, acc), acc)
    k.read("dQ", "state", acc_rw, _where(fits, 0, acc_rw), f"(T_c − 1) · B·H·N·d·4{v}")
    k.write("dQ", "state", acc_rw, f"(T_c − 1) · B·H·N·d·4{v}", hbm=_where(fits, intmath.minimum(acc, acc_rw), acc_rw))
    k.write("dQ", "output", q, "B·H·N·d·e")
    k.write("dK", "output", kv, "B·H·N_kv·d·e")
    k.write("dV", "output", kv, "B·H·N_kv·d·e")
    _sram(k, "dQ", intmath.mul(BACKWARD_WARPS, _visits(ctx, acc)), f"{BACKWARD_WARPS} · T_c · B·H·N·d·4{v}")
    return k.build(
        **_backward_flops(ctx),
        concurrent_ctas=slots,
        bytes_in_flight_per_cta=intmath.mul(2, b.block_kv, w.d, e),
        overlap="serial-compute",
        ctas=bh,
        kind=HEAD_GRID,
    )


def _split_backward(ctx: TileContext, l2: l2m.L2, ctas_per_sm: IntLike, sm_count: int) -> list[Kernel]:
    w, b = ctx.w, ctx.blocks
    e = w.element_bytes
    bh = intmath.mul(w.batch, w.heads)
    q = intmath.mul(bh, w.n, w.d, e)
    acc = intmath.mul(bh, w.n, w.d, ACC_BYTES)
    stat = intmath.mul(bh, w.n, STAT_BYTES)
    kv = intmath.mul(bh, w.n_kv_, w.d, e)
    v = visited_share(w)

    zero = KernelBuilder("fa1_bwd_dq_zero", "backward")
    zero.write("dQacc", "state", acc, "B·H·N·d·4 (zeroed)")
    dot = KernelBuilder("fa1_bwd_dot", "backward")
    dot.read("dO", "input", q, q, "B·H·N·d·e")
    dot.read("O", "output", q, q, "B·H·N·d·e")
    dot.write("D", "state", stat, "B·H·N·4")

    ctas = intmath.mul(bh, b.t_c)
    slots = intmath.minimum(intmath.mul(sm_count, ctas_per_sm), ctas)
    spans = _spans(b.t_c, bh, slots)  # waves holding CTAs of one head: each reads its rows from HBM
    main = KernelBuilder("fa1_bwd", "backward")
    kv_hbm = w.kv_bytes() if l2.mode != "off" else kv
    main.read("K", "input", kv, kv_hbm, "B·H·N_kv·d·e")
    main.read("V", "input", kv, kv_hbm, "B·H·N_kv·d·e")
    for tensor, role, nbytes, formula in (
        ("Q", "input", q, "B·H·N·d·e"),
        ("dO", "input", q, "B·H·N·d·e"),
        ("lse", "state", stat, "B·H·N·4"),
        ("D", "state", stat, "B·H·N·4"),
        ("dQacc", "state", acc, "B·H·N·d·4 (atomic add)"),
    ):
        req = _visits(ctx, nbytes)
        hbm = req if l2.mode == "off" else intmath.minimum(req, intmath.mul(nbytes, spans))
        main.read(tensor, role, req, hbm, f"T_c · {formula}{v}")
        if tensor == "dQacc":  # the adds happen in L2, on lines fetched and written back once a wave
            main.write("dQacc", "state", req, f"T_c · {formula}{v}", hbm=hbm)
    main.write("dK", "output", kv, "B·H·N_kv·d·e")
    main.write("dV", "output", kv, "B·H·N_kv·d·e")
    _sram(main, "dQ", intmath.mul(BACKWARD_WARPS, _visits(ctx, acc)), f"{BACKWARD_WARPS} · T_c · B·H·N·d·4{v}")
    conv = KernelBuilder("fa1_bwd_dq", "backward")
    conv.read("dQacc", "state", acc, l2m.carried_over(acc, l2), "B·H·N·d·4")
    conv.write("dQ", "output", q, "B·H·N·d·e")
    return [
        zero.build(op="elementwise"),
        dot.build(softmax_flops=intmath.mul(2, bh, w.n, w.d)),
        main.build(
            **_backward_flops(ctx),
            concurrent_ctas=slots,
            bytes_in_flight_per_cta=intmath.mul(2, b.block_q, w.d, e),
            overlap="serial-compute",
            ctas=ctas,
            kind=HEAD_GRID,
        ),
        conv.build(op="elementwise"),
    ]


def fa1_kernels(
    ctx: TileContext,
    l2: l2m.L2,
    *,
    splits: IntLike,
    backward: bool = False,
    backward_splits: IntLike = 1,
    backward_ctas_per_sm: IntLike = 1,
    sm_count: int = 1,
) -> AlgorithmTraffic:
    """flash-attn v1's forward and, with ``backward``, its backward kernels."""
    kernels = [fa1_forward_kernel(ctx, l2, splits)]
    if backward:
        kernels += fa1_backward_kernels(ctx, l2, backward_splits, backward_ctas_per_sm, sm_count)
    found = None
    if backward:
        bh = intmath.mul(ctx.w.batch, ctx.w.heads)
        ctas = _where(np.asarray(backward_splits) > 1, intmath.mul(bh, ctx.blocks.t_c), bh)
        found = BackwardFacts(
            "flash-attn v1",
            ctx.blocks.block_q,
            ctx.blocks.block_kv,
            backward_ctas_per_sm,
            intmath.minimum(intmath.mul(sm_count, backward_ctas_per_sm), ctas),
            backward_splits,
        )
    facts = TiledFacts(ctx.blocks, ctx.ctas_per_sm, ctx.concurrent, splits, backward=found)
    return AlgorithmTraffic("tiled", "fa1", tuple(kernels), params=facts.to_params(), facts=facts)
