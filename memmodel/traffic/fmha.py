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
from .ledger import HEAD_GRID, AlgorithmTraffic, Kernel, KernelBuilder, only_where, present_kernels

#: query rows of one step of an FA1 CTA (``Cta_tile_p::M``: the ``STEP`` of every
#: ``FMHA_kernel_traits`` in ``fmha_fwd_hdim*.cu`` and ``fmha_bwd_hdim*.cu``)
ROWS = 16
#: warps of the forward CTA (they split a K/V block's keys, ``WARPS_N``: each holds a quarter
#: of K and V in registers and the 16 rows' partial P·V are summed in shared memory) and of
#: the backward CTA
FORWARD_WARPS = 4
BACKWARD_WARPS = 8

# CTA-wide barriers (``__syncthreads``) of v1's loops, counted in the source:
#: per 16-row step of the forward (``device_1xN_``): the row maximum's reduction across the warps
#: (``Softmax::reduce_max`` → ``reduce_``) and the one after the warps store their partial P·V
#: (``smem_o.store``), before any reads them back
FORWARD_STEP_BARRIERS = 2
#: per K/V block a forward CTA visits: after the K, Q, V tiles are committed to shared memory,
#: two around K's commit into the buffer V shared (``SHARE_SMEM_FOR_K_AND_V``), and one at its
#: first step (``l < step_stride``); one more after the first K/V block (``if (!Is_first)``)
FORWARD_BLOCK_BARRIERS = 4
#: per 16-row step of the backward (``compute_dq_dk_dv_1xN_one_iter``): before the warps store
#: their partial dQ (``smem_dq.store``) and after the dK product, before it is read back
BACKWARD_STEP_BARRIERS = 2
#: per K/V block a backward CTA visits: after the tiles are committed and the two of the epilogue
#: (dV, dK through shared memory); one more after the first K/V block. The two around K's
#: commit where v1 shares K's and V's buffer (``0x08u`` traits: sm86/sm89 and N_kv = 128 at
#: d = 64) are not counted: the model keeps sm80's traits (``0x100u``)
BACKWARD_BLOCK_BARRIERS = 3


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


def _steps(ctx: TileContext) -> IntLike:
    """(16-row step, K/V block) pairs over all heads: each is one step of one CTA."""
    return intmath.mul(ctx.w.batch, ctx.w.heads, ctx.visited)


def _barriers(ctx: TileContext, ctas: IntLike, per_step: int, per_block: int) -> IntLike:
    """CTA-wide barriers of a kernel summed over its CTAs: ``per_step`` at every 16-row step,
    ``per_block`` at every K/V block a CTA visits and one more at each after its first. Every
    CTA is taken to visit every K/V block (a causal CTA skips a block only where none of its
    rows reach it: the last rows' few)."""
    t_c = ctx.blocks.t_c
    visits = intmath.mul(ctas, t_c)
    later = intmath.mul(ctas, _sub(t_c, 1))
    return intmath.add(intmath.mul(per_step, _steps(ctx)), intmath.mul(per_block, visits), later)


def _partials(k: KernelBuilder, ctx: TileContext, tensor: str, warps: int) -> None:
    """The split-K sum of a product whose inner dimension (the K/V block's keys) the CTA's
    ``warps`` split (``Smem_tile_o``: each warp stores its 16 rows × d fp32 partial, then each
    thread reads its elements of every warp's and adds them): per step ``warps`` · 16 · d · 4
    bytes each way, d as the kernel runs it."""
    per_way = intmath.mul(warps, _steps(ctx), ctx.blocks.block_q, ctx.exec_d, ACC_BYTES)
    k.exchange(tensor, per_way, per_way, f"{warps} · B_r·d·4 · B·H·T_r·T_c{visited_share(ctx.w)} (d as run)")


def _statistics(k: KernelBuilder, ctx: TileContext) -> None:
    """The forward's row statistics summed across its :data:`FORWARD_WARPS` warps per step
    (``Smem_tile_reduce``; ``fmha/softmax.h``): for the maximum each warp stores its 16 rows'
    (one float a row) and, after a barrier, each thread reads two rows' floats of every warp
    (``reduce_``) and later, where the O sum needs them, its d/(8·warps) rows' again
    (``reduce_max_after_sync_``); the sum stored likewise and read once; the previous block's
    logsumexp (``Smem_softmax_sum``, after the first K/V block) stored by every warp and read
    once. Per step, W warps and 32·W threads: max 64·W written, 256·W + 16·d read; sum 64·W
    written, 16·d read; previous logsumexp 64·W written, 16·d read."""
    w_ = FORWARD_WARPS
    steps = _steps(ctx)
    later = _sub(steps, intmath.mul(ctx.w.batch, ctx.w.heads, ctx.blocks.t_r))  # every step but a row's first
    row = intmath.mul(16, ctx.exec_d)  # the 32·W threads' d/(8·W) rows, a float each
    store = 16 * w_ * STAT_BYTES
    k.exchange(
        "m",
        intmath.mul(store, steps),
        intmath.mul(steps, intmath.add(256 * w_, row)),
        "per step: 64·W written, 256·W + 16·d read",
    )
    k.exchange("l", intmath.mul(store, steps), intmath.mul(steps, row), "per step: 64·W written, 16·d read")
    k.exchange(
        "lse",
        intmath.mul(store, later),
        intmath.mul(later, row),
        "per step after a row's first: 64·W written, 16·d read",
    )


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
    # the 4 warps' partial P·V products (each warp holds a quarter of the keys) and the rows'
    # statistics summed in shared memory, at every step
    _partials(k, ctx, "O", FORWARD_WARPS)
    _statistics(k, ctx)
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
        diagonal_blocks=_masked_blocks(ctx),
        dropout_scores=scores if w.dropout > 0 else 0,
        barriers=_barriers(ctx, ctas, FORWARD_STEP_BARRIERS, FORWARD_BLOCK_BARRIERS),
        cta_passes=b.t_c,  # its loop's prologue (K, V, Q in) at every K/V block
        kind=HEAD_GRID,
    )


def _masked_blocks(ctx: TileContext) -> IntLike:
    """The blocks masked score by score: with causal masking every block v1 visits, not only
    those on the diagonal (``softmax.apply_mask(mask)`` runs at every step, and ``Mask::is_valid``
    compares each score's key with its query there). Without it v1 still compares every key with
    the sequence's end (one compare a score, against the causal mask's two): not counted."""
    return intmath.mul(ctx.w.batch, ctx.w.heads, ctx.visited) if ctx.w.causal else 0


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
        "diagonal_blocks": _masked_blocks(ctx),
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
    _partials(k, ctx, "dQ", BACKWARD_WARPS)  # the 8 warps' partial dQ = dS·K (each holds an eighth of the keys)
    return k.build(
        **_backward_flops(ctx),
        concurrent_ctas=slots,
        bytes_in_flight_per_cta=intmath.mul(2, b.block_kv, w.d, e),
        overlap="serial-compute",
        ctas=bh,
        barriers=_barriers(ctx, bh, BACKWARD_STEP_BARRIERS, BACKWARD_BLOCK_BARRIERS),
        cta_passes=b.t_c,  # K_j, V_j in and dK_j, dV_j out at every K/V block
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
    _partials(main, ctx, "dQ", BACKWARD_WARPS)
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
            barriers=_split_barriers(ctx),
            kind=HEAD_GRID,
        ),
        conv.build(op="elementwise"),
    ]


def _split_barriers(ctx: TileContext) -> IntLike:
    """The split backward's barriers: a CTA per K/V block, each visiting its one block (one
    more on all but the first block's, as :func:`_barriers` counts a CTA walking them all)."""
    bh = intmath.mul(ctx.w.batch, ctx.w.heads)
    return _barriers(ctx, bh, BACKWARD_STEP_BARRIERS, BACKWARD_BLOCK_BARRIERS)


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
