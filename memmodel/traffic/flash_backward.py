"""The backward pass of fused attention kernels as libraries launch them.

Each function takes the backward kernel's own tiles (:class:`BackwardTiles`; which tiles a
library picks is a fact about the library, kept in :mod:`memmodel.backward`) and returns the
kernels of the backward pass in launch order, their transfers at the three levels and their
FLOPs: FlashAttention-2 as PyTorch ships it (:func:`fa2_backward`: a dO·O preprocess, the main
kernel over K/V blocks with dQ accumulated in fp32 by atomic adds, a conversion, GQA's group
sums), the memory-efficient CUTLASS kernel (:func:`cutlass_backward`: one kernel, a CTA per K/V
block, dQ through an fp32 workspace under a lock) and cuDNN (:func:`cudnn_backward`: closed
source, modelled with FlashAttention-2's structure). What the sources say, kernel by kernel:
docs/model.md ("Backward kernels as the libraries launch them")."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import intmath
from ..frozen import frozen
from ..intmath import IntLike
from ..workload import ACC_BYTES, STAT_BYTES, Workload
from . import l2 as l2m
from .blocks import BlockSizes, TileContext, as_v, tile_context
from .flash import at_most, pair_note, per_wave_stream, tile_reread_hbm, visited_share, window_reread_hbm
from .ledger import Kernel, KernelBuilder, only_where, param, present_kernels

#: ``flash_api.cpp``: sequence lengths of the D and dQ-accumulator buffers round up to 128
SEQ_ROUND = 128


@frozen
class BackwardTiles:
    """A backward kernel's tiles: Q rows per step (``block_q``, kBlockM / kBlockSizeI), K/V
    rows per CTA (``block_kv``, kBlockN / kBlockSizeJ), CTAs resident per SM, and where the
    figures come from."""

    block_q: IntLike
    block_kv: IntLike
    ctas_per_sm: IntLike = 1
    source: str = ""

    def to_params(self) -> dict[str, Any]:
        return {
            "backward_block_q": param(self.block_q),
            "backward_block_kv": param(self.block_kv),
            "backward_ctas_per_sm": param(self.ctas_per_sm),
            "backward_tiles_from": self.source,
        }


def backward_context(
    w: Workload, tiles: BackwardTiles, sm_count: int, exec_d: IntLike | None = None, whole_tiles: bool = True
) -> TileContext:
    """The visited (Q block, K/V block) pairs and resident CTAs of a backward kernel: the same
    pairs a forward kernel with these tiles visits (the causal test ``j·B_c ≤ (i+1)·B_r − 1 +
    N_kv − N`` is symmetric in which loop is outer). A library kernel executes whole tiles at
    the head dim it is built for (``exec_d``)."""
    bq = intmath.minimum(tiles.block_q, w.n)
    bkv = intmath.minimum(tiles.block_kv, w.n_kv_)
    blocks = BlockSizes(
        block_q=bq,
        block_kv=bkv,
        t_r=intmath.ceil_div(w.n, bq),
        t_c=intmath.ceil_div(w.n_kv_, bkv),
        source="given",
        sram_elements=0,
    )
    return tile_context(w, blocks, sm_count, 1.0, tiles.ctas_per_sm, exec_d=exec_d, whole_tiles=whole_tiles)


def causal_leader_share(ctx: TileContext, l2: l2m.L2, step_bytes: IntLike) -> Any:
    """HBM reads of a causal FA2 backward kernel's Q side (Q, dO, lse, D, the dQ accumulator)
    as a multiple of their unique bytes, from the kernel's schedule: 1 + Σ_{g ≥ 1} W(g·C) ·
    miss(footprint_g) / W(0), where a head's CTAs run in groups of C (T_c > C) and each group's
    leader re-reads the blocks the group before it read a gap earlier; 1 wherever a head's CTAs fit
    in the slots. Groups are counted from each head's first CTA (with several long heads they start
    elsewhere: an approximation). None where the L2 is off. Derivation: docs/model.md ("The causal
    backward's Q side")."""
    from .reuse import step_curve

    b, w = ctx.blocks, ctx.w
    conc = np.maximum(np.asarray(intmath.to_float(l2.concurrent_ctas), dtype=np.float64), 1.0)
    t_r = np.asarray(intmath.to_float(b.t_r), dtype=np.float64)
    t_c = np.asarray(intmath.to_float(b.t_c), dtype=np.float64)
    bq = np.asarray(intmath.to_float(b.block_q), dtype=np.float64)
    bkv = np.asarray(intmath.to_float(b.block_kv), dtype=np.float64)
    shift = np.asarray(intmath.to_float(w.n), dtype=np.float64) - np.asarray(
        intmath.to_float(w.n_kv_), dtype=np.float64
    )
    step = np.asarray(intmath.to_float(step_bytes), dtype=np.float64)

    def lifetime(j: Any) -> Any:
        return t_r - np.clip(np.floor((j * bkv + shift) / bq), 0.0, t_r)

    if l2.mode == "off":
        return None  # every request reaches HBM
    if not np.isfinite(l2.capacity_bytes):
        return 1.0
    curve = l2.reuse or step_curve(l2.capacity_bytes)
    groups = np.ceil(t_c / conc)
    first = np.maximum(lifetime(0.0), 1.0)
    extra = np.zeros(np.broadcast(t_r, t_c, conc, step, first).shape)
    for g in range(1, int(np.max(groups)) if groups.size else 1):
        lead = g * conc
        here = g < groups
        if not np.any(here):
            break
        gap = lifetime(lead - 1.0)
        # the group before ran in lockstep (even g − 1: one block a step) or as a chain of CTAs
        # B_c/B_r steps apart (odd g − 1: its C CTAs sweep r·(C − 1) blocks more than the gap)
        ratio = bkv / bq
        blocks = gap if (g - 1) % 2 == 0 else np.minimum(t_r, gap + ratio * (conc - 1.0))
        miss = np.asarray(curve.miss_share(blocks * step))
        extra = extra + np.where(here, lifetime(lead) * miss, 0.0)
    share = 1.0 + extra / first
    return float(share) if share.ndim == 0 else share


#: points of the quadrature over a draining group's CTAs (:func:`workspace_round_trip_share`)
_DRAIN_POINTS = 32


def workspace_round_trip_share(
    ctx: TileContext, l2: l2m.L2, splits: IntLike, step_bytes: IntLike, kv_step_bytes: IntLike
) -> Any:
    """The share of the CUTLASS backward's dQ-workspace stores that the L2 writes back to HBM
    before the next CTA loads the tile again: each such store costs its tile once more in HBM
    writes and once more in HBM reads. None where the L2 is off (every request reaches HBM).

    CUTLASS's CTAs walk the Q blocks up from their own (``kernel_backward.h``), one block apart,
    so a tile stored by one CTA is loaded by the next a step later, with every resident CTA's step
    (``step_bytes``) live in between: the dirty tile misses at the measured cross-wave share at that
    footprint (``memory.l2.reuse``; the step at the effective capacity without it). Causal, the
    CTAs that start one at a time as a head's first ones drain see fewer steps live (docs/model.md,
    "The memory-efficient backward's dQ workspace")."""
    from .reuse import step_curve

    if l2.mode == "off":
        return None
    if not np.isfinite(l2.capacity_bytes):
        return 0.0
    b, w = ctx.blocks, ctx.w
    curve = l2.reuse or step_curve(l2.capacity_bytes)
    raw = (l2.concurrent_ctas, splits, b.t_r, b.t_c, b.block_kv, b.block_q, step_bytes, kv_step_bytes)
    floats = [np.asarray(intmath.to_float(v), dtype=np.float64) for v in raw]
    conc, split, t_r, t_c, bkv, bq, step, kv_step = np.broadcast_arrays(*floats)
    conc = np.maximum(conc, 1.0)
    ratio = bkv / bq  # Q blocks the diagonal moves per K/V block
    ctas = np.asarray(intmath.to_float(intmath.mul(w.batch, w.heads)), dtype=np.float64) * split
    steady = np.asarray(curve.miss_share(np.minimum(conc, ctas) * step), dtype=np.float64)
    shape = np.broadcast(steady, conc).shape
    conc, split, t_r, t_c, ratio, step, kv_step, steady = (
        np.broadcast_to(x, shape) for x in (conc, split, t_r, t_c, ratio, step, kv_step, steady)
    )
    share = steady.astype(np.float64)
    long = bool(w.causal) & (t_c > conc) & (split >= t_c)
    if np.any(long):

        def lifetime(j: Any) -> Any:
            return t_r - np.clip(np.floor(j * ratio), 0.0, t_r)

        full = np.asarray(curve.miss_share(conc * step), dtype=np.float64)
        at = (np.arange(_DRAIN_POINTS) + 0.5) / _DRAIN_POINTS  # u / n_g at the quadrature points
        misses = np.zeros(shape)
        pairs = np.zeros(shape)
        groups = np.ceil(t_c / conc)
        for g in range(int(np.max(np.where(long, groups, 0.0)))):
            first = g * conc
            n_g = np.clip(t_c - first, 0.0, conc)
            w_min = lifetime(first + n_g - 1.0)
            group_pairs = np.where(n_g > 0, n_g * (lifetime(first) + w_min) / 2.0, 0.0)
            pairs = pairs + group_pairs
            if g % 2:
                continue  # a convoy: its re-loads follow the CTA before it closely
            u = n_g[..., None] * at  # the group's CTAs still running as it drains
            live = u * step[..., None] + (conc[..., None] - u) * kv_step[..., None]
            ramp = np.asarray(curve.miss_share(live), dtype=np.float64)
            drain = np.sum(u * ramp, axis=-1) / np.maximum(np.sum(u, axis=-1), 1e-12)
            full_pairs = n_g * w_min
            misses = misses + np.where(n_g > 0, full_pairs * full + (group_pairs - full_pairs) * drain, 0.0)
        share = np.where(long, misses / np.maximum(pairs, 1.0), share)
    share = np.where(split > 1, share, 0.0)
    return float(share) if share.ndim == 0 else share


def round_up(x: IntLike, m: IntLike) -> IntLike:
    return intmath.mul(intmath.ceil_div(x, m), m)


def accumulator_head_dim(d: IntLike) -> IntLike:
    """d_r of ``flash_api.cpp``: d rounded up to a multiple of 32 (of 64 above 128)."""
    return (
        np.where(np.asarray(d) <= 128, round_up(d, 32), round_up(d, 64))
        if intmath.is_array(d)
        else (round_up(d, 32) if d <= 128 else round_up(d, 64))
    )


def _narrow_v(ctx: TileContext) -> Any:
    """Whether V's head dim is below Q's as the kernel runs them (on a grid, element by element)."""
    if ctx.w.d_v is None:
        return False
    narrow = np.asarray(intmath.to_float(ctx.exec_dv_)) < np.asarray(intmath.to_float(ctx.exec_d))
    return bool(narrow) if narrow.ndim == 0 else narrow


def _dropout_flops(w: Workload, scores: IntLike) -> IntLike:
    # regenerating the mask: per score a compare and the 1/(1 − p) scale
    return intmath.mul(2, scores) if w.dropout > 0 else 0


# ---------------------------------------------------------------------------------------
# FlashAttention-2 (PyTorch's copy)


def fa2_backward(w: Workload, ctx: TileContext, l2: l2m.L2) -> list[Kernel]:
    """The kernels of FlashAttention-2's backward as PyTorch launches them (module docstring)."""
    b = ctx.blocks
    e = w.element_bytes
    bh = intmath.mul(w.batch, w.heads)
    q = intmath.mul(bh, w.n, w.d, e)  # Q, dQ (and O, dO where d_v = d)
    o, dv = w.o_bytes(), w.dv_sym  # O, dO at V's head dim
    d_r = accumulator_head_dim(w.d)
    rows_q = intmath.mul(b.t_r, b.block_q)  # rows the Q-block grids cover
    stat = intmath.mul(bh, w.n, STAT_BYTES)  # lse (written by the forward), D as read
    d_written = intmath.mul(bh, rows_q, STAT_BYTES)
    acc = intmath.mul(bh, rows_q, d_r, ACC_BYTES)
    kv_q_heads = intmath.mul(bh, w.n_kv_, w.d, e)  # K or V per query head (dK, dV as written)
    visited, pairs = ctx.visited, ctx.all_pairs
    # each CTA of a wave reads its K, V tiles and writes dK, dV once: live across a wave
    l2c = l2.with_ctas(ctx.concurrent).with_streamed(per_wave_stream(ctx, b.block_kv, intmath.mul(2, w.d_kv, e)))
    kernels = []

    pre = KernelBuilder("fa2_bwd_pre", "backward")
    pre.read("O", "output", o, o, f"B·H·N·{dv}·e")
    pre.read("dO", "input", o, o, f"B·H·N·{dv}·e")
    pre.write("D", "state", d_written, "B·H·⌈N/B_r⌉·B_r·4")
    pre.write("dQacc", "state", acc, "B·H·⌈N/B_r⌉·B_r·d_r·4 (zeroed)")
    # per element of dO: multiply and add
    kernels.append(pre.build(softmax_flops=intmath.mul(2, bh, w.n, w.d_v_), op="elementwise"))

    req = lambda nbytes: intmath.scaled(intmath.mul(b.t_c, nbytes), visited, pairs)  # noqa: E731
    # CTA pairs (FA4 from d = 128): each CTA of a pair loads half of the Q and dO tiles and adds
    # half of the pair's one dQ partial; both load the row statistics
    paired = lambda nbytes: intmath.ceil_div(req(nbytes), ctx.cta_pair)  # noqa: E731
    halved = pair_note(ctx.cta_pair, "Q, dO or dQ")
    # a head's Q side: Q (d) and dO (d_v) rows, the dQ accumulator, lse and D
    per_head = intmath.add(
        intmath.mul(w.n, w.d_kv, e), intmath.mul(w.n, d_r, ACC_BYTES), intmath.mul(2, w.n, STAT_BYTES)
    )
    share = None
    row_bytes = intmath.add(intmath.mul(w.d_kv, e), intmath.mul(d_r, ACC_BYTES), 2 * STAT_BYTES)
    if w.causal and w.window is None:
        share = causal_leader_share(ctx, l2c, intmath.mul(b.block_q, row_bytes))

    def q_side_hbm(unique: IntLike, requested: IntLike) -> IntLike:
        if w.window is not None:  # a K/V block's queries lie in the window after it
            return window_reread_hbm(
                ctx,
                l2c,
                unique,
                requested,
                heads_sharing=1,
                head_ws=per_head,
                blocks=b.t_c,
                rows=b.block_kv,
                length=w.n,
                row_bytes=row_bytes,
                step_bytes=intmath.mul(b.block_q, row_bytes),
            )
        if share is None:  # not causal, or L2 off
            return tile_reread_hbm(unique, requested, b.t_c, per_head, w.causal, l2c, bh)
        unique = intmath.mul(unique, l2m.xcds_reading(b.t_c, l2c))  # the XCD view: each XCD reads it
        out = np.minimum(np.asarray(intmath.to_float(requested)), np.asarray(intmath.to_float(unique)) * share).round()
        return int(out) if np.ndim(out) == 0 and not intmath.is_array(unique, requested) else out.astype(np.int64)

    main = KernelBuilder("fa2_bwd", "backward")
    kv_hbm = _gqa_kv_hbm(w, kv_q_heads, per_head, l2c)
    main.read("K", "input", kv_q_heads, kv_hbm, "B·H·N_kv·d·e (per query head)")
    main.read("V", "input", as_v(w, kv_q_heads), as_v(w, kv_hbm), f"B·H·N_kv·{dv}·e (per query head)")
    suffix = " · visited" if w.causal else ""
    for tensor, role, nbytes, formula, shared in (
        ("Q", "input", q, "B·H·N·d·e", True),
        ("dO", "input", o, f"B·H·N·{dv}·e", True),
        ("lse", "state", stat, "B·H·N·4", False),
        ("D", "state", stat, "B·H·N·4", False),
    ):
        asked = paired(nbytes) if shared else req(nbytes)
        main.read(
            tensor,
            role,
            asked,
            at_most(q_side_hbm(nbytes, req(nbytes)), asked, ctx.cta_pair),
            f"T_c · {formula}{suffix}" + (halved if shared else ""),
        )
    # dQ_i += dS K_j by atomicAdd: every visited pair adds a B_r × d_r fp32 tile in L2; the
    # accumulator is read from HBM on first touch and written back once
    acc_req = paired(intmath.mul(bh, w.n, d_r, ACC_BYTES))
    acc_hbm = q_side_hbm(acc, acc_req)
    if l2c.xcds > 1 and l2c.mode != "off":
        # the XCD view: a head's CTAs (one per K/V block) sit on different XCDs, round-robin, and add
        # into the same dQ tiles at the same step: each add finds its line in another XCD's slice,
        # whose write-back and re-fetch go through the MALL (docs/model.md, "The MALL level")
        acc_hbm = acc_req
    acc_hbm = at_most(acc_hbm, acc_req, ctx.cta_pair)
    main.read("dQacc", "state", acc_req, acc_hbm, f"T_c · B·H·N·d_r·4 (atomic add){suffix}{halved}")
    main.write("dQacc", "state", acc_req, f"T_c · B·H·N·d_r·4 (atomic add){suffix}{halved}", hbm=acc_hbm)
    main.write("dK", "output", kv_q_heads, "B·H·N_kv·d·e")
    main.write("dV", "output", as_v(w, kv_q_heads), f"B·H·N_kv·{dv}·e")
    scores = ctx.exec_scores  # as executed: whole tiles, the kernel's head dims
    kernels.append(
        main.build(
            # recompute S = QKᵀ, then dV += PᵀdO, dP = dO Vᵀ, dQ += dS K, dK += dSᵀQ: 5 products
            # (2·scores·(3d + 2d_v): :meth:`TileContext.matmul_backward`)
            matmul_flops=ctx.matmul_backward(scores),
            # P = exp(S·scale − lse): scale and subtract; dS = P ⊙ (dP − D): 2
            softmax_flops=intmath.add(intmath.mul(4, scores), _dropout_flops(w, scores)),
            exp_ops=scores,
            concurrent_ctas=intmath.minimum(ctx.concurrent, intmath.mul(bh, b.t_c)),
            bytes_in_flight_per_cta=intmath.mul(b.block_q, w.d_kv, e),
            overlap="serial-compute",
            ctas=intmath.mul(bh, b.t_c),
            blocks=intmath.mul(bh, visited),
            diagonal_blocks=intmath.mul(bh, ctx.diagonal),
            dropout_scores=scores if w.dropout > 0 else 0,  # the forward's mask, drawn again
            narrow_v=_narrow_v(ctx),
        )
    )

    conv = KernelBuilder("fa2_bwd_dq", "backward")
    conv.read("dQacc", "state", acc, l2m.carried_over(acc, l2), "B·H·⌈N/B_r⌉·B_r·d_r·4")
    conv.write("dQ", "output", q, "B·H·N·d·e")
    kernels.append(conv.build(softmax_flops=intmath.mul(bh, w.n, w.d), op="elementwise"))
    return kernels + group_sum_kernels(w, l2)


def _gqa_kv_hbm(w: Workload, requested: IntLike, per_head: IntLike, l2: l2m.L2) -> IntLike:
    """HBM reads of K (or V) by a backward grid (K/V blocks × batch × query heads) that
    requests ``requested`` bytes of it: every request with L2 off; else once per K/V head
    when it stays in L2 from one query head of its group to the next, which runs ``batch``
    heads later (a CTA's own re-reads of its K/V tile always hit), once per query head if not."""
    if l2.mode == "off":
        return requested
    kv = w.kv_bytes()
    if np.all(np.asarray(w.group) == 1):
        return intmath.minimum(requested, kv)
    kv_q_heads = intmath.mul(w.batch, w.heads, w.n_kv_, w.d, w.element_bytes)
    kv_pair = intmath.mul(w.n_kv_, w.d_kv, w.element_bytes)  # one head's K and V
    between = intmath.mul(w.batch, intmath.add(per_head, kv_pair))
    ok = l2m.fits(between, l2)
    if isinstance(ok, np.ndarray):
        return np.minimum(np.asarray(requested), np.where(ok, kv, kv_q_heads))
    return min(int(requested), int(kv if ok else kv_q_heads))


def group_sum_kernels(w: Workload, l2: l2m.L2) -> list[Kernel]:
    """GQA: ``at::sum_out`` of the per-query-head dK (then dV) over the group (``mha_bwd``)."""
    grouped = np.asarray(w.group) > 1  # on a grid, the rows with GQA
    if not grouped.any():
        return []
    e = w.element_bytes
    out = []
    for tensor, d, sym in (("dK", w.d, "d"), ("dV", w.d_v_, w.dv_sym)):  # dV at V's head dim
        expanded = intmath.mul(w.batch, w.heads, w.n_kv_, d, e)
        kv = w.kv_bytes() if tensor == "dK" else w.v_bytes()
        k = KernelBuilder(f"{tensor.lower()}_group_sum", "backward")
        k.read(tensor, "output", expanded, l2m.carried_over(expanded, l2), f"B·H·N_kv·{sym}·e (per query head)")
        k.write(tensor, "output", kv, f"B·H_kv·N_kv·{sym}·e")
        out.append(k.build(softmax_flops=intmath.mul(w.batch, w.heads, w.n_kv_, d), op="reduction"))
    return present_kernels(*(only_where(k, grouped) for k in out))


# ---------------------------------------------------------------------------------------
# Memory-efficient attention (CUTLASS)


def cutlass_splits(w: Workload, tiles: BackwardTiles, output_in_registers: Any = True) -> IntLike:
    """Key splits of the CUTLASS backward (``_efficient_attention_backward``'s heuristic): one
    per K/V block; one when batch × heads ≥ 256 CTAs already and N_kv ≤ 2 K/V blocks; at most
    200 / (batch × heads) (at least 1) when dK/dV need fp32 staging (d above the Q block;
    ``output_in_registers`` false, or false on some rows of a grid)."""
    t_c = intmath.ceil_div(w.n_kv_, tiles.block_kv)
    bh = intmath.mul(w.batch, w.heads)
    one = np.logical_and(np.asarray(bh) >= 256, np.asarray(w.n_kv_) <= 2 * np.asarray(tiles.block_kv))
    splits = np.where(one, 1, np.asarray(t_c))
    staged = np.maximum(1, np.minimum(splits, 200 // np.asarray(bh)))
    splits = np.where(np.asarray(output_in_registers, dtype=bool), splits, staged)
    return int(splits) if splits.ndim == 0 else splits.astype(np.int64)


def cutlass_backward(
    w: Workload, ctx: TileContext, tiles: BackwardTiles, l2: l2m.L2, output_in_registers: Any = True
) -> list[Kernel]:
    """The memory-efficient (CUTLASS) backward as PyTorch launches it (module docstring).
    ``output_in_registers``: dK, dV held in registers (a bool, or per row of a grid)."""
    b = ctx.blocks
    e = w.element_bytes
    bh = intmath.mul(w.batch, w.heads)
    q = intmath.mul(bh, w.n, w.d, e)  # Q, dQ
    o, dv = w.o_bytes(), w.dv_sym  # O, dO at V's head dim
    stat = intmath.mul(bh, w.n, STAT_BYTES)
    kv_q_heads = intmath.mul(bh, w.n_kv_, w.d, e)
    splits = cutlass_splits(w, tiles, output_in_registers)
    visited, pairs = ctx.visited, ctx.all_pairs
    l2c = l2.with_ctas(ctx.concurrent).with_streamed(per_wave_stream(ctx, b.block_kv, intmath.mul(2, w.d_kv, e)))
    # the dQ workspace: per head ⌈N/B_i⌉ · ⌈d/B_j⌉ tiles of B_i × B_j fp32 (plus a 16-byte lock)
    acc_cols = round_up(w.d, b.block_kv)
    tiles_q = intmath.mul(b.t_r, intmath.ceil_div(w.d, b.block_kv))
    workspace = intmath.mul(
        bh, intmath.add(intmath.mul(b.t_r, b.block_q, acc_cols, ACC_BYTES), intmath.mul(16, tiles_q))
    )
    many = np.asarray(splits) > 1
    kernels = []
    if np.any(many):  # on a grid, only on the rows with more than one split
        z = KernelBuilder("mea_bwd_zero", "backward")
        z.write("dQacc", "state", workspace, "B·H·⌈N/B_i⌉·⌈d/B_j⌉·(B_i·B_j·4 + 16) (zeroed; a lock per tile)")
        kernels += present_kernels(only_where(z.build(op="elementwise"), many))

    pair = lambda nbytes: intmath.scaled(intmath.mul(b.t_c, nbytes), visited, pairs)  # noqa: E731
    # a head's Q side: Q (d), O and dO (d_v), the dQ workspace, lse and D
    per_head = intmath.add(
        intmath.mul(w.n, intmath.add(w.d, intmath.mul(2, w.d_v_)), e),
        intmath.mul(w.n, acc_cols, ACC_BYTES),
        intmath.mul(2, w.n, STAT_BYTES),
    )
    reread = lambda unique, requested: tile_reread_hbm(unique, requested, b.t_c, per_head, w.causal, l2c, bh)  # noqa: E731
    main = KernelBuilder("mea_bwd", "backward")
    v = visited_share(w)
    # every CTA computes D for all the queries of its head: reads O and dO, writes D
    delta_req = intmath.mul(splits, o)
    main.read("O", "output", delta_req, reread(o, delta_req), f"splits · B·H·N·{dv}·e (D per CTA)")
    main.read(
        "dO",
        "input",
        intmath.add(delta_req, pair(intmath.mul(2, o))),
        reread(o, intmath.add(delta_req, pair(intmath.mul(2, o)))),
        f"(splits + 2·T_c{v}) · B·H·N·{dv}·e",
    )
    main.write("D", "state", intmath.mul(splits, stat), "splits · B·H·N·4", hbm=stat)
    main.read("Q", "input", pair(intmath.mul(2, q)), reread(q, pair(intmath.mul(2, q))), f"2·T_c · B·H·N·d·e{v}")
    for tensor, nbytes in (("lse", stat), ("D", stat)):
        main.read(tensor, "state", pair(nbytes), reread(nbytes, pair(nbytes)), f"T_c · B·H·N·4{v}")
    # K_j stays in shared memory for S; V_j (for dP) and K_j (for dQ) are loaded again per pair
    kv_pairs = intmath.scaled(intmath.mul(b.t_r, kv_q_heads), visited, pairs)
    k_req = intmath.add(kv_q_heads, kv_pairs)
    main.read("K", "input", k_req, _gqa_kv_hbm(w, k_req, per_head, l2c), f"(1 + T_r{v}) · B·H·N_kv·d·e")
    main.read(
        "V",
        "input",
        as_v(w, kv_pairs),
        as_v(w, _gqa_kv_hbm(w, kv_pairs, per_head, l2c)),
        f"T_r · B·H·N_kv·{dv}·e{v}",
    )
    # dQ partials: per pair a B_i × ⌈d/B_j⌉·B_j fp32 tile loaded, added to and stored
    # (``kernel_backward.h``: with key splits every pair loads the zeroed workspace tile; one
    # split loads all but the first key block's; the last contribution to a Q block writes dQ
    # instead of storing)
    contributions = pair(intmath.mul(bh, w.n, acc_cols, ACC_BYTES))
    first = intmath.mul(bh, w.n, acc_cols, ACC_BYTES)
    partial = "B·H·N·⌈d/B_j⌉·B_j·4"
    if intmath.is_array(contributions, first, splits):
        stored = np.maximum(0, np.asarray(contributions) - np.asarray(first))
        loaded = np.where(np.asarray(splits) > 1, np.asarray(contributions), stored)
        loaded_formula = f"T_c{v} · {partial} (with key splits; one split: T_c{v} − 1)"
    else:
        stored = max(0, int(contributions) - int(first))
        loaded = int(contributions) if int(splits) > 1 else stored
        loaded_formula = f"T_c{v} · {partial}" if int(splits) > 1 else f"(T_c{v} − 1) · {partial}"
    loaded_hbm = tile_reread_hbm(workspace, loaded, b.t_c, per_head, w.causal, l2c, bh)
    stored_hbm = tile_reread_hbm(workspace, stored, b.t_c, per_head, w.causal, l2c, bh)
    # the round trip: a stored tile the L2 writes back before the next CTA loads it, one step
    # later (:func:`workspace_round_trip_share`); per step a CTA touches Q_i, dO_i, lse_i, D_i,
    # the tile and its own K_j, V_j
    kv_step = intmath.mul(b.block_kv, w.d_kv, e)
    step = intmath.add(
        intmath.mul(b.block_q, intmath.add(intmath.mul(w.d_kv, e), 2 * STAT_BYTES)),
        intmath.mul(b.block_q, acc_cols, ACC_BYTES),
        intmath.mul(16, intmath.ceil_div(w.d, b.block_kv)),
        kv_step,
    )
    trip = workspace_round_trip_share(ctx, l2c, splits, step, kv_step)
    if trip is not None:
        written_back = np.asarray(intmath.to_float(stored), dtype=np.float64) * np.asarray(trip)
        loaded_hbm = _at_least(loaded_hbm, workspace, written_back, loaded)
        stored_hbm = _at_least(stored_hbm, workspace, written_back, stored)
    spilled = (float(w.dropout) > 0.0) & (np.asarray(b.block_q) >= 128)
    if np.any(spilled):
        # with dropout the 128 × 128 kernel (kApplyDropout: a Zij tile in shared memory, the RNG
        # state in registers) spills about 1.6× the stack of its plain variant (sm_90: 288
        # against 176 bytes per thread), and its local-memory lines crowd the workspace tiles
        # out of L2: every tile load and store goes to HBM (Nsight Compute on an H200, 4 × 8 ×
        # 4096 at d = 128: the extra writes equal the stores, the extra reads 71 % of the
        # loads). The 64 × 64 kernel (d ≤ 64) with dropout moves no such extra (the records).
        loaded_hbm = _where(spilled, loaded, loaded_hbm)
        stored_hbm = _where(spilled, stored, stored_hbm)
    main.read("dQacc", "state", loaded, loaded_hbm, loaded_formula)
    main.write("dQacc", "state", stored, f"(T_c{v} − 1) · {partial}", hbm=stored_hbm)
    main.write("dQ", "output", q, "B·H·N·d·e")
    if np.ndim(output_in_registers) and not np.all(output_in_registers) and np.any(output_in_registers):
        # a grid, some rows each way: the accumulation's reads are zero where dK, dV stay in registers
        in_rf = np.asarray(output_in_registers, dtype=bool)
        kv_acc = intmath.scaled(intmath.mul(b.t_r, kv_q_heads), visited, pairs)
        for tensor in ("dK", "dV"):
            sym, acc_t, unique_t = (
                ("d", kv_acc, kv_q_heads) if tensor == "dK" else (dv, as_v(w, kv_acc), as_v(w, kv_q_heads))
            )
            acc_rows = np.where(in_rf, 0, acc_t)
            main.read(
                tensor, "output", acc_rows, np.where(in_rf, 0, unique_t), f"T_r · B·H·N_kv·{sym}·e (accumulate){v}"
            )
            main.write(tensor, "output", np.where(in_rf, unique_t, acc_t), f"B·H·N_kv·{sym}·e or T_r · …", hbm=unique_t)
    elif np.all(output_in_registers):
        main.write("dK", "output", kv_q_heads, "B·H·N_kv·d·e")
        main.write("dV", "output", as_v(w, kv_q_heads), f"B·H·N_kv·{dv}·e")
    else:  # accumulated in global memory: read and written per visited pair
        kv_acc = intmath.scaled(intmath.mul(b.t_r, kv_q_heads), visited, pairs)
        for tensor in ("dK", "dV"):
            sym, acc_t, unique_t = (
                ("d", kv_acc, kv_q_heads) if tensor == "dK" else (dv, as_v(w, kv_acc), as_v(w, kv_q_heads))
            )
            main.read(tensor, "output", acc_t, unique_t, f"T_r · B·H·N_kv·{sym}·e (accumulate){v}")
            main.write(tensor, "output", acc_t, f"T_r · B·H·N_kv·{sym}·e (accumulate){v}", hbm=unique_t)
    scores = ctx.exec_scores
    kernels.append(
        main.build(
            matmul_flops=ctx.matmul_backward(scores),
            softmax_flops=intmath.add(
                intmath.mul(4, scores), intmath.mul(2, splits, bh, w.n, w.d_v_), _dropout_flops(w, scores)
            ),
            exp_ops=scores,
            concurrent_ctas=intmath.minimum(ctx.concurrent, intmath.mul(bh, splits)),
            bytes_in_flight_per_cta=intmath.mul(b.block_q, w.d_kv, e),
            overlap="serial-compute",
            ctas=intmath.mul(bh, splits),
            blocks=intmath.mul(bh, visited),
            diagonal_blocks=intmath.mul(bh, ctx.diagonal),
            dropout_scores=scores if w.dropout > 0 else 0,  # Z_ij drawn again per pair (curand Philox)
        )
    )
    return kernels + group_sum_kernels(w, l2)


# ---------------------------------------------------------------------------------------
# cuDNN


#: cuDNN's memsets (a few bytes each, no work: launched by the SDPA call before its fused
#: kernels): one before a prefill's forward kernel, none before a decode's split kernels, one
#: before the backward's; seen in every cuDNN case of the H200's validation records (their
#: profiled kernels: 165 prefill forwards with one, 30 decodes with none, 33 training steps with two)
CUDNN_ZERO = "cudnn_zero"
CUDNN_BWD_ZERO = "cudnn_bwd_zero"


def cudnn_memset(name: str, pass_: str) -> Kernel:
    """One of cuDNN's memsets (:data:`CUDNN_ZERO`): a launch that writes a few bytes."""
    k = KernelBuilder(name, pass_)
    k.write("flags", "state", 4, "4")  # a few bytes: what it zeroes is not public
    return k.build(op="memset")


def with_cudnn_memsets(
    forward: list[Kernel], backward: list[Kernel], prefill: Any = True
) -> tuple[list[Kernel], list[Kernel]]:
    """cuDNN's kernels with its memsets (:data:`CUDNN_ZERO`): before the forward kernel of a
    prefill (``prefill``: more than one query row; on a grid, the rows where it holds and the
    kernel runs), before the backward's first kernel."""
    out = []
    for k in forward:
        if k.name == "fa2_fwd":
            rows = np.asarray(prefill, dtype=bool) & np.asarray(k.present, dtype=bool)
            out.extend(present_kernels(only_where(cudnn_memset(CUDNN_ZERO, k.pass_), rows)))
        out.append(k)
    return out, ([cudnn_memset(CUDNN_BWD_ZERO, "backward"), *backward] if backward else [])


def cudnn_backward(w: Workload, ctx: TileContext, l2: l2m.L2) -> list[Kernel]:
    """cuDNN's fused flash backward, modelled with FlashAttention-2's kernels (module docstring):
    the same ledgers under cuDNN's names; with GQA, K/V read as :func:`_gqa_kv_reads` measured,
    dK and dV written per query head and then summed over the group (``fmha_reduce_head``)."""
    renamed = {"fa2_bwd_pre": "cudnn_bwd_pre", "fa2_bwd": "cudnn_bwd", "fa2_bwd_dq": "cudnn_bwd_dq"}
    out = []
    for k in fa2_backward(w.with_(kv_heads=w.heads) if _has_groups(w) else w, ctx, l2):
        if k.name not in renamed:
            continue
        name = renamed[k.name]
        transfers = tuple(_rename(t, name) for t in k.transfers)
        if k.name == "fa2_bwd" and _has_groups(w):
            transfers = _gqa_kv_reads(w, transfers, l2)
        out.append(
            Kernel(
                name,
                transfers,
                matmul_flops=k.matmul_flops,
                softmax_flops=k.softmax_flops,
                exp_ops=k.exp_ops,
                pass_=k.pass_,
                concurrent_ctas=k.concurrent_ctas,
                bytes_in_flight_per_cta=k.bytes_in_flight_per_cta,
                overlap=k.overlap,
                op=k.op,
                ctas=k.ctas,
                blocks=k.blocks,
                diagonal_blocks=k.diagonal_blocks,
                dropout_scores=k.dropout_scores,
                narrow_v=k.narrow_v,
            )
        )
    return out + group_sum_kernels(w, l2)


# ---------------------------------------------------------------------------------------
# FlashAttention-3 (its Hopper kernels in flash_attn.cute)


def fa3_backward(w: Workload, ctx: TileContext, l2: l2m.L2, prefix: str = "fa3") -> list[Kernel]:
    """FlashAttention-3's Hopper backward: FlashAttention-2's three kernels (a dO·O
    preprocess, the main kernel over K/V blocks adding dQ into an fp32 accumulator, its
    conversion) under FA3's names. With GQA the query heads of a group add their dK, dV into
    fp32 accumulators of their K/V head and a conversion writes them out: modelled as the
    per-query-head dK, dV FlashAttention-2 writes and a pass that reads them and writes the
    K/V heads' (``fa3_bwd_dk``, ``fa3_bwd_dv``: the bytes a conversion of the accumulators
    would move at 2-byte elements, the atomics' extra L2 traffic not counted)."""
    renamed = {"fa2_bwd_pre": f"{prefix}_bwd_pre", "fa2_bwd": f"{prefix}_bwd", "fa2_bwd_dq": f"{prefix}_bwd_dq"}
    out = []
    grouped = _has_groups(w)
    for k in fa2_backward(w.with_(kv_heads=w.heads) if grouped else w, ctx, l2):
        if k.name not in renamed:
            continue
        name = renamed[k.name]
        transfers = tuple(_rename(t, name) for t in k.transfers)
        if k.name == "fa2_bwd" and grouped:
            transfers = tuple(_rename(t, name) for t in _gqa_kv_main(w, k.transfers, l2))
        out.append(_renamed_kernel(k, name, transfers))
    for k in group_sum_kernels(w, l2):
        name = f"{prefix}_bwd_" + k.name.split("_")[0]  # dk_group_sum -> fa3_bwd_dk
        out.append(_renamed_kernel(k, name, tuple(_rename(t, name) for t in k.transfers)))
    return out


def fa4_backward(w: Workload, ctx: TileContext, l2: l2m.L2) -> list[Kernel]:
    """FlashAttention-4's Blackwell backward (``flash_bwd_sm100.py`` and its pre- and
    postprocess kernels): the same kernels as :func:`fa3_backward` under FA4's names (a dO·O
    preprocess writing dpsum and the logsumexp in log2, the main kernel over 128-key blocks adding
    dQ into an fp32 accumulator, its conversion; with GQA fp32 dK, dV accumulators per K/V head
    and their conversion: ``pack_gqa`` is off in its backward)."""
    return fa3_backward(w, ctx, l2, prefix="fa4")


# ---------------------------------------------------------------------------------------
# CK/aiter (AMD)

#: FlashAttention-2's backward kernels under aiter's names (``mha_bwd.cu``: the odo pre-kernel,
#: dqdkdv, the dq conversion)
CK_BACKWARD_NAMES = {"fa2_bwd_pre": "ck_bwd_odo", "fa2_bwd": "ck_bwd_dqdkdv", "fa2_bwd_dq": "ck_bwd_dq_convert"}


def ck_backward(w: Workload, ctx: TileContext, l2: l2m.L2) -> list[Kernel]:
    """CK/aiter's backward: FlashAttention-2's kernels (:func:`fa2_backward`: dO·O, the kernel
    over K/V blocks adding dQ into an fp32 accumulator, its conversion, and with GQA the
    per-query-head dK, dV summed over the group, as aiter's ``at::sum_out`` does) under aiter's
    names, with ``ctx`` holding its own tiles."""
    out = []
    for k in fa2_backward(w, ctx, l2):
        name = CK_BACKWARD_NAMES.get(k.name, k.name)
        transfers = tuple(_rename(t, name) for t in k.transfers)
        if k.name == "fa2_bwd_pre":
            # aiter zeroes the fp32 dQ accumulator with a kernel of its own, not in odo: mha_bwd.cu
            # allocates it through workspace_alloc(dq_acc_bytes, zero_init=true), which asm_mha_bwd.cu
            # answers with torch::zeros (a fill kernel); its a32 layout is seqlen_q × hdim_q fp32 per
            # query head, unpadded (mha_bwd.cu, "ASM dq_accum layout")
            out.append(_ck_dq_zero(w))
            transfers = tuple(t for t in transfers if t.tensor != "dQacc")
        out.append(k if name == k.name and k.name != "fa2_bwd_pre" else _renamed_kernel(k, name, transfers))
    return out


def _ck_dq_zero(w: Workload) -> Kernel:
    """``torch::zeros`` of aiter's fp32 dQ accumulator: B·H·N·d·4 bytes written."""
    z = KernelBuilder("ck_bwd_dq_zero", "backward")
    z.write("dQacc", "state", intmath.mul(w.batch, w.heads, w.n, w.d, ACC_BYTES), "B·H·N·d·4 (zeroed)")
    return z.build(op="elementwise")


def _gqa_kv_main(w: Workload, transfers: tuple[Any, ...], l2: l2m.L2) -> tuple[Any, ...]:
    """The main kernel's K/V reads with GQA as FlashAttention-2's own grid makes them
    (:func:`_gqa_kv_hbm`: once per K/V head where it stays in L2 across its group)."""
    from dataclasses import replace

    kv_q_heads = intmath.mul(w.batch, w.heads, w.n_kv_, w.d, w.element_bytes)
    per_head = intmath.mul(w.n, w.d_kv, w.element_bytes)
    hbm = _gqa_kv_hbm(w, kv_q_heads, per_head, l2)
    return tuple(
        replace(t, bytes=hbm if t.tensor == "K" else as_v(w, hbm))
        if t.tensor in ("K", "V") and t.level == "hbm" and t.direction == "read"
        else t
        for t in transfers
    )


def _renamed_kernel(k: Kernel, name: str, transfers: tuple[Any, ...]) -> Kernel:
    from dataclasses import replace

    return replace(k, name=name, transfers=transfers)


def _has_groups(w: Workload) -> bool:
    return not np.all(np.asarray(w.group) == 1)


def _rename(t: Any, name: str) -> Any:
    from dataclasses import replace

    return replace(t, kernel=name)


def _gqa_kv_reads(w: Workload, transfers: tuple[Any, ...], l2: l2m.L2) -> tuple[Any, ...]:
    """K/V read from HBM (G + 1)/2 times per K/V head, at most as often as FlashAttention-2's
    structure reads it (every request with L2 off). Measured, not derived: cuDNN's kernel is closed
    source, and its GQA backward's K/V bytes follow this count (docs/model.md, "cuDNN's GQA backward")."""
    from dataclasses import replace

    times = (np.asarray(w.group, dtype=np.float64) + 1.0) / 2.0
    out = []
    for t in transfers:
        if t.tensor in ("K", "V") and t.level == "hbm" and l2.mode != "off":
            kv = w.kv_bytes() if t.tensor == "K" else w.v_bytes()
            reads = np.minimum(np.asarray(t.bytes, dtype=np.float64), np.asarray(kv, dtype=np.float64) * times).round()
            t = replace(t, bytes=int(reads) if reads.ndim == 0 else reads.astype(np.int64))
        out.append(t)
    return tuple(out)


def _at_least(hbm: IntLike, unique: IntLike, extra: Any, requested: IntLike) -> IntLike:
    """``hbm``, or ``unique`` + ``extra`` where more, never more than ``requested``: an int
    where all are scalars, else an int64 array."""
    f = lambda v: np.asarray(intmath.to_float(v), dtype=np.float64)  # noqa: E731
    out = np.minimum(f(requested), np.maximum(f(hbm), (f(unique) + np.asarray(extra)).round()))
    if np.ndim(out) == 0 and not intmath.is_array(hbm, unique, requested):
        return int(out)
    return out.astype(np.int64)


def _where(mask: Any, a: IntLike, b: IntLike) -> IntLike:
    """``a`` where ``mask``, else ``b``: an int where all are scalars, else an int64 array."""
    if not (np.ndim(mask) or intmath.is_array(a, b)):
        return a if bool(mask) else b
    return np.where(mask, np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64))
