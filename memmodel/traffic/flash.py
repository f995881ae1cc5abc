"""Tiled (FlashAttention-style) attention: FA1 (paper Algorithms 1 and 4) and FA2.

Block sizes follow Algorithm 1: with M the SRAM per SM in elements,
B_c = ⌈M / 4d⌉ and B_r = min(B_c, d); or they are given. T_r = ⌈N / B_r⌉ query blocks,
T_c = ⌈N_kv / B_c⌉ key/value blocks.

**FA1** (Algorithm 1; one CTA per head, outer loop over K/V blocks, inner over Q blocks):
K and V are requested once; Q, O, l, m are requested, and O, l, m written, once per outer
step (T_c times), after O, l, m are initialised in HBM. Backward (Algorithm 4): K, V once;
Q, O, dO, dQ, l, m requested and dQ written once per outer step; dK, dV written once.

**FA2** (grid = Q blocks × heads, the Q blocks of one head next to each other; each CTA
loops over K/V blocks): Q requested once, K and V once per Q block (T_r times), O and the
logsumexp written once. Backward (grid = K/V blocks × heads): K, V once; Q, dO, lse and
D = rowsum(dO ⊙ O) once per K/V block; dQ accumulated in fp32 by atomic adds in L2, then
converted; dK, dV written once (per query head with GQA, then summed over the group).

Causal: only the (Q block, K/V block) pairs on or below the diagonal are visited
(bottom-right alignment). Dropout: FlashAttention regenerates the mask from the RNG state,
so it adds no bytes. l, m and logsumexp are fp32. HBM reads follow :mod:`.l2`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from .. import intmath
from ..frozen import frozen
from ..intmath import IntLike
from ..workload import ACC_BYTES, STAT_BYTES, Workload
from . import l2 as l2m
from .blocks import BlockSizes, TileContext, as_v, tile_context, window_kv_bytes
from .decode import combine_kernel, split_kv_kernels
from .facts import TiledFacts
from .ledger import (
    FORWARD_GRID,
    HEAD_GRID,
    AlgorithmTraffic,
    Kernel,
    KernelBuilder,
    Transfer,
    only_where,
    param,
    present_kernels,
)

# ---------------------------------------------------------------------------------------
# FA2


def visited_share(w: Workload) -> str:
    """The formula's factor for a count a causal kernel makes only over the (Q block, K/V
    block) pairs it visits (``intmath.scaled`` by visited / all pairs, floored)."""
    return " · visited" if w.causal else ""


def fa2_forward_kernel(
    ctx: TileContext,
    l2: l2m.L2,
    name: str = "fa2_fwd",
    *,
    streams_q: bool = True,
    facts: TiledFacts | None = None,
    splits: IntLike = 1,
) -> Kernel:
    """The FlashAttention-2-style forward kernel; ``facts`` (:func:`forward_facts`): the waves'
    drift, the GQA row and the causal live K/V, where the caller found them already. ``splits``
    (> 1: FA4's split forward): each Q tile's K/V in that many chunks, a CTA each, writing partial
    O and logsumexp in fp32 for a combine kernel."""
    w, b = ctx.w, ctx.blocks
    e, ekv = w.element_bytes, w.kv_element_bytes  # Q, O rows; K/V rows (an FP8 K/V cache: 1 byte)
    bh = intmath.mul(w.batch, w.heads)
    q = intmath.mul(bh, w.n, w.d, e)
    kv_unique = w.kv_bytes()
    kv_pair = intmath.mul(w.n_kv_, w.d_kv, ekv)  # one head's K and V (2·N_kv·d·e; N_kv·(d + d_v)·e)
    visited, pairs = ctx.visited, ctx.all_pairs
    # each query head's CTAs request its K/V head once per Q block, for the visited blocks
    kv_req = intmath.scaled(intmath.mul(b.t_r, bh, w.n_kv_, w.d, ekv), visited, pairs)
    l2c = _forward_l2(ctx, l2, streams_q)
    sharing = intmath.mul(w.group, b.t_r)  # CTAs of one K/V head, launched together
    if w.window is not None:
        kv_unique = window_kv_bytes(w, b.block_kv)
        kv_hbm = window_reread_hbm(
            ctx,
            l2c,
            kv_unique,
            kv_req,
            heads_sharing=w.group,
            head_ws=kv_pair,
            blocks=b.t_r,
            rows=b.block_q,
            length=w.n_kv_,
            row_bytes=intmath.mul(w.d_kv, ekv),
            step_bytes=intmath.mul(b.block_kv, w.d_kv, ekv),
        )
        # past batch 1 a GQA group's query heads are a batch of Q blocks apart in launch order
        row = gqa_row_bytes(ctx, l2c) if facts is None else facts.gqa_row_bytes
        kv_hbm = cross_head_hbm(ctx, l2c, kv_hbm, kv_unique, kv_req, row)
        return _fa2_forward_ledger(ctx, name, q, kv_req, kv_hbm, splits)
    kv_hbm = tile_reread_hbm(
        kv_unique,
        kv_req,
        sharing,
        kv_pair,
        w.causal,
        l2c,
        intmath.mul(w.batch, w.kv_heads_),
        reuse=_fa2_causal_reuse(ctx, l2c) if w.causal else None,
    )
    if not w.causal:
        drift = facts.wave_drift if facts is not None else None  # None: found here
        kv_hbm = wave_drift_hbm(ctx, l2c, kv_hbm, kv_req, sharing, kv_pair, drift)
    if w.causal and l2c.causal and l2c.mode != "off":
        # the measured causal curve: re-reads as the L2 thrashes at the K/V the heads in flight
        # keep live. One head is the curve's own reference pattern: the curve alone, and so is a
        # schedule that keeps one head's K/V live at a time (cuDNN, probe 11). With several, the
        # larger of it and the window rule above, whose evictions come from other heads' data
        # streaming through (many short heads: 1.3-1.5 x the unique K/V measured)
        live = facts.causal_live_bytes if facts is not None else None
        thrash = causal_curve_hbm(ctx, l2c, kv_unique, kv_req, live)
        one = (np.asarray(intmath.mul(w.batch, w.heads)) == 1) | (l2c.causal_heads == "one")
        kv_hbm = np.where(one, thrash, np.maximum(np.asarray(kv_hbm), thrash))
        kv_hbm = int(kv_hbm) if np.ndim(kv_hbm) == 0 else kv_hbm.astype(np.int64)
    row = gqa_row_bytes(ctx, l2c) if facts is None else facts.gqa_row_bytes
    kv_hbm = cross_head_hbm(ctx, l2c, kv_hbm, kv_unique, kv_req, row)
    return _fa2_forward_ledger(ctx, name, q, kv_req, kv_hbm, splits)


def at_most(hbm: IntLike, requested: IntLike, cta_pair: IntLike) -> IntLike:
    """``hbm`` no more than ``requested`` where CTA pairs halved the requests (``cta_pair`` > 1:
    a pair's half-tile loads bring in no more than they ask for); as it is elsewhere."""
    pairs = np.asarray(cta_pair)
    if not np.any(pairs > 1):
        return hbm
    capped = intmath.minimum(hbm, requested)
    if pairs.ndim == 0:
        return capped
    out = np.where(pairs > 1, np.asarray(capped), np.asarray(hbm))
    return out.astype(np.int64)


def pair_note(cta_pair: IntLike, shared: str) -> str:
    """The ledger formula's suffix where CTA pairs share each load of ``shared`` (''
    where none do)."""
    pairs = np.asarray(cta_pair)
    if not np.any(pairs > 1):
        return ""
    where = "" if np.all(pairs > 1) else " where pairs run"
    return f" / 2 (CTA pairs: each loads half of a {shared} tile{where})"


def _fa2_forward_ledger(
    ctx: TileContext, name: str, q: IntLike, kv_req: IntLike, kv_hbm: IntLike, splits: IntLike = 1
) -> Kernel:
    """The forward kernel's ledger, its K/V's HBM reads found. Where CTA pairs share each K/V
    tile (:attr:`TileContext.cta_pair`) each CTA requests half of it: the L2 and shared-memory
    bytes halve, the HBM reads (the K/V each request brings in) at most what is requested.
    ``splits`` > 1: a CTA per chunk of each Q tile's K/V, O and the logsumexp in fp32 partials."""
    w, b = ctx.w, ctx.blocks
    ekv = w.kv_element_bytes
    bh = intmath.mul(w.batch, w.heads)
    visited = ctx.visited
    kv_req = intmath.ceil_div(kv_req, ctx.cta_pair)
    kv_hbm = at_most(kv_hbm, kv_req, ctx.cta_pair)
    paired = pair_note(ctx.cta_pair, "K/V")
    # the K_j, V_j tiles are read from shared memory ``smem_reads`` times per CTA: by every
    # warp (mma.sync: 4 warps, each its own rows) or by every warp group (wgmma: 64 rows each)
    k = KernelBuilder(name)
    k.read("Q", "input", q, q, "B·H·N·d·e")
    e_kv = "e_kv" if ekv != w.element_bytes else "e"  # the K/V cache's element bytes
    k.read(
        "K",
        "input",
        kv_req,
        kv_hbm,
        f"T_r · B·H·N_kv·d·{e_kv}" + visited_share(w) + paired,
        intmath.mul(ctx.smem_reads, kv_req),
    )
    k.read(
        "V",
        "input",
        as_v(w, kv_req),
        as_v(w, kv_hbm),
        f"T_r · B·H·N_kv·{w.dv_sym}·{e_kv}" + visited_share(w) + paired,
        intmath.mul(ctx.smem_reads, as_v(w, kv_req)),
    )
    if ctx.v_transpose:
        # FA3's fp8 forward: the producer warpgroup transposes each V tile in shared memory (LDSM.T
        # from the tile TMA wrote, STSM into a second buffer) before the P·V product reads it
        formula = f"T_r · B·H·N_kv·{w.dv_sym}·{e_kv}" + visited_share(w) + " (V transposed in SRAM)"
        k.transfers += [
            Transfer(name, "Vt", "intermediate", "sram", rw, as_v(w, kv_req), formula) for rw in ("read", "write")
        ]
    for name, count in ctx.scale_tensors:
        # fp32 scale factors: FA3's q/k/v_descale (batch × K/V heads each), cuDNN's scalars
        nbytes = intmath.mul(count, STAT_BYTES)
        k.read(name, "input", nbytes, nbytes, "B·H_kv·4" if name.endswith("_descale") else "4")
    split = np.asarray(splits) > 1
    o, lse = w.o_bytes(), intmath.mul(bh, w.n, STAT_BYTES)
    if split.any():
        o, lse = (intmath.kept(np.where(split, 0, np.asarray(x)).astype(np.int64)) for x in (o, lse))
    if not split.all():
        k.write(
            "O",
            "output",
            o,
            f"B·H·N·{w.dv_sym}·e_O" if w.out_element_bytes != w.element_bytes else f"B·H·N·{w.dv_sym}·e",
        )
        k.write("lse", "state", lse, "B·H·N·4")
    if split.any():
        partial_o = intmath.mul(bh, splits, w.n, w.d_v_, ACC_BYTES)
        partial_lse = intmath.mul(bh, splits, w.n, STAT_BYTES)
        if not split.all():
            partial_o, partial_lse = (
                np.where(split, np.asarray(x), 0).astype(np.int64) for x in (partial_o, partial_lse)
            )
        k.write("O_partial", "intermediate", partial_o, f"B·H·splits·N·{w.dv_sym}·4")
        k.write("lse_partial", "intermediate", partial_lse, "B·H·splits·N·4")
    if np.any(np.asarray(ctx.spill_bytes_per_cta) > 0):
        # spilled registers a CTA writes back (PyTorch's FlashAttention-2 build: measured per CTA)
        k.write("spills", "state", intmath.mul(bh, b.t_r, ctx.spill_bytes_per_cta), "B·H·T_r·spill (measured)")
    for name in ctx.amax_outputs:  # cuDNN's fp8 graph: the amax of S and of O, one fp32 each
        k.write(name, "state", STAT_BYTES, "4")
    t_c_visited = intmath.ceil_div(visited, b.t_r)
    scores = ctx.exec_scores  # as executed: whole tiles, the kernel's head dims
    d = ctx.exec_dv_  # the O updates run at V's head dim
    # each split normalises its own partial O (the combine rescales them)
    softmax = intmath.add(intmath.mul(3, scores), intmath.mul(bh, w.n, d, intmath.add(t_c_visited, splits)))
    if ctx.dequant_flops:
        # an FP8 K/V cache converted in the kernel: every K and V element each CTA loads
        softmax = intmath.add(softmax, intmath.mul(ctx.dequant_flops, 2, intmath.ceil_div(kv_req, ekv)))
    return k.build(
        matmul_flops=ctx.matmul_forward(scores),
        # per score: running max, subtract, sum (3); per K/V block: rescale O (N·d); at the
        # end divide O by l (N·d)
        softmax_flops=softmax,
        rescale_flops=intmath.mul(bh, w.n, d, t_c_visited),
        exp_ops=intmath.add(scores, intmath.mul(bh, w.n, t_c_visited)),
        concurrent_ctas=intmath.minimum(ctx.concurrent, intmath.mul(bh, b.t_r, splits)),
        bytes_in_flight_per_cta=intmath.mul(b.block_kv, w.d_kv, ekv),
        overlap="serial-compute",
        ctas=intmath.mul(bh, b.t_r, splits),
        blocks=intmath.mul(bh, visited),
        diagonal_blocks=intmath.mul(bh, ctx.diagonal),
        local_blocks=intmath.mul(bh, ctx.local_blocks),
        loop_ctas=intmath.mul(bh, ctx.local_loop_ctas),
        # with dropout the kernel draws a mask element for every score of its tiles
        dropout_scores=scores if w.dropout > 0 else 0,
        kind=FORWARD_GRID,
    )


def gqa_row_bytes(ctx: TileContext, l2: l2m.L2) -> Any:
    """The row of new data between two query heads of a GQA group in FlashAttention-2's grid with
    batch > 1 (B · 2·(N_kv + N)·d·e, :func:`cross_head_hbm`), 0 on a grid's other rows; None where
    no row has one (batch 1, no GQA, another kernel's grid, the L2 off)."""
    w = ctx.w
    batched = (_floats(w.batch) > 1.0) & (_floats(w.group) > 1.0)
    if not l2.batch_rows or l2.mode == "off" or not np.any(batched):
        return None
    row = _floats(
        intmath.mul(
            w.batch,
            w.d_kv,
            intmath.add(intmath.mul(w.n_kv_, w.kv_element_bytes), intmath.mul(w.n, w.element_bytes)),
        )
    )
    return np.where(batched, row, 0.0)


#: points of the midpoint rule over a K/V head's blocks in :func:`cross_head_hbm`
_CROSS_HEAD_POINTS = 8


def cross_head_hbm(
    ctx: TileContext, l2: l2m.L2, hbm: IntLike, unique: IntLike, requested: IntLike, row: Any = None
) -> IntLike:
    """HBM reads of K (or V) of a forward whose grid runs (Q block, batch, head) (``l2.batch_rows``:
    FlashAttention-2's), with the re-reads of a GQA group's query heads where batch B > 1: ``hbm``
    plus (G − 1) · ``unique`` · the mean over the K/V head's blocks of max(0, m_x − m), at most
    ``requested``; m_x the cross-wave miss share at the row of new data between two query heads of
    a group (``row``, :func:`gqa_row_bytes`, found here where None). Causal, only the blocks the
    previous query head has stopped reading count. No fitted figure; the derivation is in
    docs/model.md ("Re-reads across a GQA group's query heads")."""
    w, b = ctx.w, ctx.blocks
    if row is None:
        row = gqa_row_bytes(ctx, l2)
    if row is None:
        return hbm
    from .reuse import step_curve

    batched = row > 0.0  # batch > 1 and GQA
    curve = l2.reuse or step_curve(l2.capacity_bytes)
    batch = _floats(w.batch)
    u, r, h = _floats(unique), _floats(requested), _floats(hbm)
    m = np.clip((h - u) / np.maximum(r - u, 1.0), 0.0, 1.0)
    gain = np.maximum(0.0, np.asarray(curve.miss_share(row), dtype=np.float64) - m)
    if w.causal:  # the share of the head's blocks the previous query head has stopped reading
        conc = np.maximum(_floats(l2.concurrent_ctas), 1.0)
        span, t_c = np.maximum(_floats(ctx.visited), 1.0) / conc, _floats(b.t_c)
        gone = np.zeros(np.broadcast(span, t_c, batch).shape)
        for k in range(_CROSS_HEAD_POINTS):
            x = (k + 0.5) / _CROSS_HEAD_POINTS
            gone = gone + ((batch - 1.0) * span + span * x * x > (1.0 - x) * t_c)
        gain = gain * gone / _CROSS_HEAD_POINTS
    extra = (_floats(w.group) - 1.0) * u * gain
    out = np.where(batched, np.minimum(r, np.round(h + extra)), h)
    if np.ndim(out) == 0 and not intmath.is_array(hbm, unique, requested):
        return int(out)
    return out.astype(np.int64)


def forward_drift(ctx: TileContext, l2: l2m.L2) -> Any:
    """What the waves' drift adds to one K/V read a wave of the (non-causal) forward
    (:func:`wave_drift_extra` at its K/V heads' CTAs and K and V); None where it adds nothing."""
    if ctx.w.causal or not l2.drift or l2.mode == "off":
        return None
    w = ctx.w
    sharing, ws = intmath.mul(w.group, ctx.blocks.t_r), intmath.mul(w.n_kv_, w.d_kv, w.kv_element_bytes)
    return wave_drift_extra(ctx, _forward_l2(ctx, l2), sharing, ws)


def _forward_l2(ctx: TileContext, l2: l2m.L2, streams_q: bool = True) -> l2m.L2:
    """The L2 as the forward's K/V re-reads see it: the kernel's CTAs at once, and (``streams_q``)
    each CTA of a wave reading its Q tile and writing its O tile and logsumexp once."""
    w = ctx.w
    l2c = l2.with_ctas(ctx.concurrent)
    if streams_q:
        # Q at d, O at d_v: (d + d_v) elements a row, as K and V's
        stream = per_wave_stream(ctx, ctx.blocks.block_q, intmath.add(intmath.mul(w.d_kv, w.element_bytes), STAT_BYTES))
        l2c = l2c.with_streamed(stream)
    return l2c


def per_wave_stream(ctx: TileContext, rows: IntLike, bytes_per_row: IntLike) -> IntLike:
    """Bytes the CTAs of one wave stream through L2 once each (``rows`` rows of
    ``bytes_per_row`` per CTA): live between two waves' uses of a re-read line."""
    return intmath.mul(ctx.concurrent, rows, bytes_per_row)


def _floats(value: IntLike) -> np.ndarray:
    """``value`` as float64 (a 0-d array for a scalar): for the real-valued rules below."""
    return np.asarray(intmath.to_float(value), dtype=np.float64)


def _fa2_causal_reuse(ctx: TileContext, l2: l2m.L2) -> Any:
    """Exposure ``k`` of a causal FA2 forward kernel's K/V blocks between two uses: C CTAs at once
    request C blocks a step over a reuse window of max(0, (lag + gap) / sharing heads − 1) steps
    (the dispatch gap, FlashAttention-2's walk from the diagonal down, a GQA group's query heads in
    flight), over the K/V blocks the effective L2 holds. Derivation: docs/model.md ("Causal re-reads
    within a head")."""
    w, b = ctx.w, ctx.blocks
    conc = np.maximum(_floats(l2.concurrent_ctas), 1.0)
    visited = np.maximum(_floats(ctx.visited), 1.0)
    t_r, t_c = _floats(b.t_r), _floats(b.t_c)
    gap = visited / t_r / conc
    lag = _floats(b.block_q) / _floats(b.block_kv) if ctx.kv_order == "reverse" else 0.0
    in_flight = 1.0 + conc * t_c / visited
    sharing_heads = np.clip(in_flight / _floats(w.batch), 1.0, _floats(w.group))
    window = np.maximum(0.0, (lag + gap) / sharing_heads - 1.0)
    block_bytes = _floats(intmath.mul(b.block_kv, w.d_kv, w.kv_element_bytes))
    return conc * window * block_bytes / max(l2.capacity_bytes, 1.0)


def drift_share(waves: Any, drift: Any) -> Any:
    """The mean spread of a wave's CTAs over a kernel of ``waves`` waves, as a share of their walk:
    the spread grows by ``drift`` a wave (a CTA slot runs a little faster or slower than another,
    and the CTA that replaces one starts where it left off in time) up to a whole walk, so its mean
    over the waves is ``drift·K/2`` while ``drift·K`` ≤ 1 and ``1 − 1/(2·drift·K)`` past that."""
    spread = np.maximum(_floats(waves), 0.0) * _floats(drift)
    with np.errstate(divide="ignore"):
        return np.where(spread <= 1.0, spread / 2.0, 1.0 - 0.5 / np.maximum(spread, 1.0))


def wave_drift_hbm(
    ctx: TileContext,
    l2: l2m.L2,
    hbm: IntLike,
    requested: IntLike,
    sharing: IntLike,
    ws: IntLike,
    extra: Any = None,
) -> IntLike:
    """HBM reads of a tensor that the CTAs of a non-causal wave walk in lockstep (K/V in the
    forward), with the re-reads their drift adds: ``hbm`` times ``1 + f·live/L2``, f the wave's mean
    spread (:func:`drift_share` at ``l2.drift``, the profile's ``memory.l2.wave_drift``) and live the
    data one wave walks, the extra reads missing at the cross-wave share at ``live``. ``extra``: the
    drift's share (:func:`wave_drift_extra`) where the caller found it already; ``hbm`` unchanged
    where the profile has no drift. FlashAttention-2 alone (docs/model.md, "Waves that drift apart")."""
    if not l2.drift or l2.mode == "off":
        return hbm
    if extra is None:
        extra = wave_drift_extra(ctx, l2, sharing, ws)
    out = np.minimum(_floats(requested), np.round(_floats(hbm) * (1.0 + extra)))
    if np.ndim(out) == 0 and not intmath.is_array(hbm, requested, sharing, ws, l2.concurrent_ctas):
        return int(out)
    return out.astype(np.int64)


def wave_drift_extra(ctx: TileContext, l2: l2m.L2, sharing: IntLike, ws: IntLike) -> Any:
    """The share of reads a wave's drift adds to one read a wave (``f·live/L2·miss``, see
    :func:`wave_drift_hbm`); 0 where the profile has no drift or the L2 is off."""
    if not l2.drift or l2.mode == "off":
        return np.zeros(np.shape(_floats(ws)))
    from ..hardware import interpolate_log2
    from .reuse import live_footprint, step_curve

    conc = np.maximum(_floats(l2.concurrent_ctas), 1.0)
    ctas = _floats(intmath.mul(ctx.w.batch, ctx.w.heads, ctx.blocks.t_r))
    live = np.asarray(live_footprint(ws, sharing, conc), dtype=np.float64)
    drift = interpolate_log2(l2.drift, _floats(ctx.exec_d))
    # the blocks a laggard re-reads miss as a later wave's re-reads do: at the measured cross-wave
    # share at the data live across a wave (none where it stays in L2: one head of 32k at d = 128)
    curve = l2.reuse or step_curve(l2.capacity_bytes)
    miss = np.asarray(curve.miss_share(live + _floats(l2.streamed)), dtype=np.float64)
    return drift_share(ctas / conc, drift) * live / max(l2.whole, 1.0) * miss


def causal_live_bytes(ctx: TileContext, l2: l2m.L2) -> Any:
    """The K/V a causal FlashAttention-2 forward keeps live while it re-reads (bytes): the axis of
    the profile's ``memory.l2.causal_reuse_d*`` curves, measured on one head, where it is that
    head's K and V. It averages the K/V heads touched over the kernel's dispatch spans (a GQA
    group's query heads are ``batch`` heads apart in FA2's grid; cuDNN's schedule keeps one K/V
    head live), scaled so one head maps to its K and V; a batched GQA grid counts its own K/V head
    and at most ``l2.gqa_others`` of the L2 for the others. Derivation: docs/model.md ("The K/V a
    causal forward keeps live")."""
    w, b = ctx.w, ctx.blocks
    conc = np.maximum(_floats(l2.concurrent_ctas), 1.0)
    span = np.maximum(_floats(ctx.visited), 1.0) / conc
    t_c, g = _floats(b.t_c), _floats(w.group)
    if l2.causal_heads == "grid":
        h_kv = _floats(intmath.mul(w.batch, w.kv_heads_))
        # the grid runs (Q block, batch, head): a K/V head's G query heads are ``batch`` heads apart,
        # so it is touched over (G − 1)·batch + 1 heads' dispatch spans
        reach = (g - 1.0) * _floats(w.batch) + 1.0
    else:  # cuDNN's schedule keeps one K/V head live at a time (probe 11): H_kv = 1 for it
        h_kv, reach = np.float64(1.0), g
    live = np.minimum(h_kv, h_kv * (reach * span - span / 2.0 + t_c) / (h_kv * g * span + t_c))
    one = (span / 2.0 + t_c) / (span + t_c)
    head = _floats(intmath.mul(w.n_kv_, w.d_kv, w.element_bytes))  # one K/V head's K and V
    live = live / one * head
    if l2.causal_heads == "grid":  # a batched GQA grid: its own K/V head and the others' share at most
        from ..hardware import interpolate_log2

        others = l2.capacity_bytes
        if l2.gqa_others:
            others = interpolate_log2(l2.gqa_others, _floats(ctx.exec_d)) * l2.whole
        live = np.where((g > 1.0) & (_floats(w.batch) > 1.0), np.minimum(live, head + others), live)
    return live


def causal_curve_hbm(ctx: TileContext, l2: l2m.L2, unique: IntLike, requested: IntLike, live: Any = None) -> Any:
    """HBM reads of K (or V) of a causal forward by the profile's causal curves measured on its
    schedule, at the head dim nearest the kernel's: the first read of every byte, plus the re-reads
    (requested − unique) times the curve's miss share at :func:`causal_live_bytes` (``live``, found
    here where None). One head reads the one-head curves; a grid of k K/V heads the curves measured
    at about k heads (interpolated in log count and log share); a GQA grid its own curves where the
    profile has them; past a curve's end at least random replacement's ``1 − L2 / live``, scaled to
    meet the curve. Details: docs/model.md ("Causal re-read curves")."""
    if live is None:
        live = causal_live_bytes(ctx, l2)
    miss = _curve_share(live, ctx.exec_d, l2.causal, l2.whole)
    if l2.causal_several:
        kv_heads = _floats(intmath.mul(ctx.w.batch, ctx.w.kv_heads_))
        counts = [1, *sorted(l2.causal_several)]
        logs = [np.log(np.maximum(miss, 1e-9))]
        for n in counts[1:]:
            # the count's curve at its nearest head dim, relative to the one-head curve there, on the
            # kernel's own one-head curve (the same where that head dim has both; d = 96 has one head's)
            several = l2.causal_several[n]
            log_several = np.log(np.maximum(_curve_share(live, ctx.exec_d, several, l2.whole), 1e-9))
            one_there = {dim: l2.causal[dim] for dim in several if dim in l2.causal} or l2.causal
            other = _nearest_dim(ctx.exec_d, one_there) != _nearest_dim(ctx.exec_d, l2.causal)
            if np.any(other):  # elsewhere the one-head curve there is the kernel's own: the ratio is 1
                ratio = log_several - np.log(np.maximum(_curve_share(live, ctx.exec_d, one_there, l2.whole), 1e-9))
                log_several = np.where(other, logs[0] + ratio, log_several)
            logs.append(log_several)
        at = np.log(np.clip(kv_heads, 1.0, counts[-1]))
        out = logs[-1] + 0.0 * at
        for i in range(len(counts) - 1):  # linear in log count between the measured counts
            lo, hi = np.log(counts[i]), np.log(counts[i + 1])
            t = (at - lo) / (hi - lo)
            out = np.where((at >= lo) & (at <= hi), logs[i] + t * (logs[i + 1] - logs[i]), out)
        miss = np.where(kv_heads > 1, np.exp(out), miss)
    if l2.causal_gqa:  # GQA grids follow a curve of their own, whatever their count of K/V heads
        # where it was measured at the kernel's head dim (the nearest of the one-head curves');
        # at others the head-count curves serve (d = 64's GQA grids read far less than d = 128's)
        nearest = _nearest_dim(ctx.exec_d, l2.causal)
        measured = np.isin(nearest, np.asarray(sorted(l2.causal_gqa), dtype=np.float64))
        gqa = _curve_share(live, ctx.exec_d, l2.causal_gqa, l2.whole)
        miss = np.where((_floats(ctx.w.group) > 1) & measured, gqa, miss)
    u, r = _floats(unique), _floats(requested)
    return np.minimum(r, u + np.maximum(r - u, 0.0) * miss).round()


def _nearest_dim(exec_d: IntLike, dims: Any) -> Any:
    """The head dim of ``dims`` nearest ``exec_d`` in the logarithm (the lower one on a tie):
    below the geometric mean of two neighbours the lower, past it the upper."""
    grid = np.asarray(sorted(dims), dtype=np.float64)
    between = np.sqrt(grid[:-1] * grid[1:])
    return grid[np.searchsorted(between, np.asarray(_floats(exec_d)), side="left")]


def _curve_share(live: Any, exec_d: IntLike, curves: dict[int, Any], whole: float) -> Any:
    """The miss share at ``live`` on the curve (of ``curves``, by head dim) nearest ``exec_d``."""
    dims = sorted(curves)
    nearest = _nearest_dim(exec_d, dims)
    miss = np.zeros(np.shape(live))
    for dim in dims:
        if not np.any(nearest == dim):  # no row reads this head dim's curve
            continue
        curve = curves[dim]
        share = _log_interp(live, curve)
        end, last = curve.footprint_bytes[-1], curve.miss[-1]
        floor = 1.0 - whole / np.maximum(live, 1.0)  # random replacement's share
        at_end = 1.0 - whole / max(end, 1.0)
        # past its last point a curve follows random replacement's share, scaled down to meet the
        # curve where the curve ends below it
        scale = min(1.0, last / at_end) if at_end > 0.0 else 1.0
        past = np.maximum(last, floor * scale)
        share = np.where(live > end, past, share)
        miss = np.where(nearest == dim, share, miss)
    return miss


def _log_interp(x: Any, curve: Any) -> Any:
    """The curve's miss share at ``x``, linear in its logarithm between points (the share rises
    about exponentially up to the L2's size); below the first point it keeps falling at the first
    segment's rate; past the last it stays."""
    xs = np.asarray(curve.footprint_bytes, dtype=np.float64)
    ys = np.log(np.maximum(np.asarray(curve.miss, dtype=np.float64), 1e-6))
    x = _floats(x)
    out = np.interp(x, xs, ys)
    if xs.size > 1:  # below the first point the share keeps falling at the first segment's rate
        slope = (ys[1] - ys[0]) / max(xs[1] - xs[0], 1.0)
        out = np.where(x < xs[0], ys[0] - slope * (xs[0] - x), out)
    return np.exp(out)


def tile_reread_hbm(
    unique: IntLike,
    requested: IntLike,
    sharing: IntLike,
    ws: IntLike,
    causal: bool,
    l2: l2m.L2,
    groups: IntLike = 1,
    reuse: Any = None,
) -> IntLike:
    """HBM reads of a tensor re-read by ``sharing`` consecutive CTAs per head: K/V once per Q
    block in the forward; Q, dO, lse, D and the dQ accumulator once per K/V block in the backward.

    Non-causal: the CTAs of a wave sweep it in lockstep (:func:`.l2.reread_hbm`). Causal, where
    one head's data fits the effective capacity: with ``reuse`` (FA2's forward exposure,
    :func:`_fa2_causal_reuse`) random replacement over the blocks' reuse windows; without it the
    heads in flight over the capacity, a lead fitted to two forward measurements. Causal past the
    capacity: a share (whole L2) / ws of the requests hits. Derivation: docs/model.md ("Causal
    re-reads within a head")."""
    base = l2m.reread_hbm(unique, requested, sharing, ws, l2, groups)
    if not causal or l2.mode == "off":
        return base
    if l2.xcds > 1:  # the XCD view: every XCD holding CTAs of a head reads its data once
        unique = intmath.minimum(requested, intmath.mul(unique, l2m.xcds_reading(sharing, l2)))
    ws_f = np.maximum(_floats(ws), 1.0)
    ok = _floats(ws) <= l2.capacity_bytes
    if reuse is not None:
        share = _floats(unique) / np.maximum(_floats(requested), 1.0)
        miss = l2m.random_replacement_miss_ratio(share, reuse, where=ok)  # (used only where it fits)
        fitting = np.maximum(_floats(unique), _floats(requested) * miss)
    else:
        heads = np.minimum(_floats(groups), 1.0 + 2.0 * _floats(l2.concurrent_ctas) / np.maximum(_floats(sharing), 1.0))
        fitting = np.minimum(_floats(requested), _floats(unique) * np.maximum(1.0, heads * ws_f / l2.capacity_bytes))
    single_wave = np.asarray(l2m.waves(sharing, l2)) <= 1
    hit = np.minimum(1.0, l2.whole / ws_f)
    spread = np.maximum(_floats(unique), _floats(requested) * (1.0 - hit))
    out = np.where(ok, fitting, np.where(single_wave, _floats(base), spread)).round()
    if np.ndim(out) == 0:
        return int(out)
    return out.astype(np.int64)


def window_reread_hbm(
    ctx: TileContext,
    l2: l2m.L2,
    unique: IntLike,
    requested: IntLike,
    *,
    heads_sharing: IntLike,
    head_ws: IntLike,
    blocks: IntLike,
    rows: IntLike,
    length: IntLike,
    row_bytes: IntLike,
    step_bytes: IntLike,
) -> IntLike:
    """HBM reads of a tensor a sliding-window grid re-reads within a band: each K/V tile (the
    forward; the Q-side tiles in the backward) is requested by the ``window``'s worth of blocks
    after it, neighbours in launch order, by each of ``heads_sharing`` query heads in turn. One
    head is ``blocks`` CTAs of ``rows`` rows over ``length`` keys (queries, backward) of
    ``row_bytes`` each; a CTA requests ``step_bytes`` a step; ``ctx.concurrent`` run at once.

    A tile's first request is compulsory; each further head's first misses at the L2's share for
    one head's data (``head_ws``: the head passes through between two heads' uses). CTAs of one
    wave walk in step, so a neighbour asks for the tile one step later (between: one step of
    the CTAs in flight, no new Q tile) and hits at that footprint's share; where a head's CTAs straddle two
    waves (``blocks`` / concurrent times a head, on average) the later wave re-reads the window
    it shares with the earlier one (the window's rows of this tensor), at the share of what a wave
    brings in (the heads in flight, each its rows and window; at batch 1 a GQA group's query heads
    in flight hold their K/V head once). The L2's measured reuse curve where the profile has one,
    else the step at its effective capacity; between ``unique`` and ``requested``. No fitted figure
    (docs/model.md, "Sliding windows")."""
    if l2.mode == "off":
        return requested
    from .reuse import step_curve

    curve = l2.reuse or step_curve(l2.capacity_bytes)
    share = lambda ws: np.asarray(curve.miss_share(ws), dtype=np.float64)  # noqa: E731
    streamed = _floats(l2.streamed)  # the Q tiles a wave's CTAs load as they start (not between two steps)
    w = ctx.w
    u, r = _floats(unique), _floats(requested)
    g = np.maximum(_floats(heads_sharing), 1.0)
    conc, per_head = np.maximum(_floats(ctx.concurrent), 1.0), np.maximum(_floats(blocks), 1.0)
    in_flight = np.minimum(conc, per_head) * _floats(rows)  # rows of one head in flight
    window = np.minimum(_floats(w.window), _floats(length))
    # the tensors a wave holds: one per head in flight; at batch 1 the ``heads_sharing`` query heads of a
    # GQA group are launched one after another and share one (FlashAttention-2's grid is Q block, batch,
    # head: past batch 1 the heads in flight are other batches' and hold their own)
    held = np.where(_floats(w.batch) == 1.0, g, 1.0)
    wave_ws = (
        np.maximum(1.0, conc / per_head / held) * np.minimum(_floats(length), in_flight + window) * _floats(row_bytes)
    )
    heads = _floats(intmath.mul(w.batch, w.heads))
    # a straddling head re-reads its window of this tensor: its own bytes a row (``row_bytes`` is what
    # a row holds of every tensor the tiles carry, for the working set), u over its heads' rows
    own_row = u * g / np.maximum(heads * _floats(length), 1.0)
    boundary = np.minimum(heads * (per_head / conc) * window * own_row, np.maximum(r - g * u, 0.0))
    within = np.maximum(r - g * u - boundary, 0.0)
    extra = (
        (g - 1.0) * u * share(_floats(head_ws) + streamed)
        + boundary * share(wave_ws + streamed)
        + within * share(conc * _floats(step_bytes))
    )
    out = np.clip(u + extra, u, np.maximum(r, u)).round()
    if np.ndim(out) == 0 and not intmath.is_array(unique, requested, heads_sharing, head_ws, blocks, rows):
        return int(out)
    return out.astype(np.int64)


def fa2_backward_kernels(ctx: TileContext, l2: l2m.L2) -> list[Kernel]:
    w, b = ctx.w, ctx.blocks
    e = w.element_bytes
    bh = intmath.mul(w.batch, w.heads)
    q = intmath.mul(bh, w.n, w.d, e)  # Q, dQ (and O, dO where d_v = d)
    o, dv = w.o_bytes(), w.dv_sym  # O, dO at V's head dim
    stat = intmath.mul(bh, w.n, STAT_BYTES)  # lse, D
    dq_acc = intmath.mul(bh, w.n, w.d, ACC_BYTES)
    kv_q_heads = intmath.mul(bh, w.n_kv_, w.d, e)  # K or V as read (and dK, dV as written) per query head
    v_q_heads = as_v(w, kv_q_heads)
    visited, pairs = ctx.visited, ctx.all_pairs
    l2c = l2.with_ctas(ctx.concurrent).with_streamed(per_wave_stream(ctx, b.block_kv, intmath.mul(2, w.d_kv, e)))
    kernels = []

    pre = KernelBuilder("fa2_bwd_pre", "backward")
    pre.read("O", "output", o, o, f"B·H·N·{dv}·e")
    pre.read("dO", "input", o, o, f"B·H·N·{dv}·e")
    pre.write("D", "state", stat, "B·H·N·4")
    pre.write("dQacc", "state", dq_acc, "B·H·N·d·4 (zeroed)")
    kernels.append(pre.build(softmax_flops=intmath.mul(2, bh, w.n, w.d_v_)))

    # main kernel: CTAs over K/V blocks; each re-reads its head's Q, dO, lse, D per visited block
    req = lambda nbytes: intmath.scaled(intmath.mul(b.t_c, nbytes), visited, pairs)  # noqa: E731
    ws = intmath.add(intmath.mul(w.n, w.d_kv, e), intmath.mul(w.n, w.d, ACC_BYTES), intmath.mul(2, w.n, STAT_BYTES))
    sharing = b.t_c
    main = KernelBuilder("fa2_bwd", "backward")
    main.read("K", "input", kv_q_heads, w.kv_bytes(), "B·H·N_kv·d·e")
    main.read("V", "input", v_q_heads, w.v_bytes(), f"B·H·N_kv·{dv}·e")
    for tensor, role, nbytes, formula in (
        ("Q", "input", q, "B·H·N·d·e"),
        ("dO", "input", o, f"B·H·N·{dv}·e"),
        ("lse", "state", stat, "B·H·N·4"),
        ("D", "state", stat, "B·H·N·4"),
    ):
        main.read(
            tensor,
            role,
            req(nbytes),
            tile_reread_hbm(nbytes, req(nbytes), sharing, ws, w.causal, l2c, bh),
            "T_c · " + formula + visited_share(w),
        )
    # atomic adds to dQacc happen in L2: requests T_c times; HBM: read once, write back once if it fits
    acc_req = req(dq_acc)
    acc_hbm = tile_reread_hbm(dq_acc, acc_req, sharing, ws, w.causal, l2c, bh)
    main.read("dQacc", "state", acc_req, acc_hbm, f"T_c · B·H·N·d·4 (atomic add){visited_share(w)}")
    main.write("dQacc", "state", acc_req, f"T_c · B·H·N·d·4 (atomic add){visited_share(w)}", hbm=acc_hbm)
    main.write("dK", "output", kv_q_heads, "B·H·N_kv·d·e")
    main.write("dV", "output", v_q_heads, f"B·H·N_kv·{dv}·e")
    kernels.append(
        main.build(
            # recompute S = QKᵀ, then dV += PᵀdO, dP = dO Vᵀ, dQ += dS K, dK += dSᵀQ: 5 matmuls
            # (2·scores·(3d + 2d_v) with V's head dim apart)
            matmul_flops=intmath.mul(10, ctx.scores, w.d)
            if w.d_v is None
            else intmath.mul(2, ctx.scores, intmath.add(intmath.mul(3, w.d), intmath.mul(2, w.d_v))),
            # dS = P ⊙ (dP − D): 2 per score; scale: 1
            softmax_flops=intmath.mul(3, ctx.scores),
            exp_ops=ctx.scores,
            concurrent_ctas=intmath.minimum(ctx.concurrent, intmath.mul(bh, b.t_c)),
            bytes_in_flight_per_cta=intmath.mul(b.block_q, w.d_kv, e),
            overlap="serial-compute",
        )
    )

    conv = KernelBuilder("fa2_bwd_dq", "backward")
    conv.read("dQacc", "state", dq_acc, l2m.carried_over(dq_acc, l2), "B·H·N·d·4")
    conv.write("dQ", "output", q, "B·H·N·d·e")
    kernels.append(conv.build(softmax_flops=intmath.mul(bh, w.n, w.d)))

    kv = w.kv_bytes()
    red = KernelBuilder("dkdv_group_sum", "backward")
    red.read("dK", "output", kv_q_heads, l2m.carried_over(kv_q_heads, l2), "B·H·N_kv·d·e")
    red.read("dV", "output", v_q_heads, l2m.carried_over(v_q_heads, l2), f"B·H·N_kv·{dv}·e")
    red.write("dK", "output", kv, "B·H_kv·N_kv·d·e")
    red.write("dV", "output", w.v_bytes(), f"B·H_kv·N_kv·{dv}·e")
    # GQA only (on a grid: the rows with a group of query heads per K/V head)
    summed = only_where(red.build(softmax_flops=intmath.mul(bh, w.n_kv_, w.d_kv)), np.asarray(w.group) > 1)
    return kernels + present_kernels(summed)


# ---------------------------------------------------------------------------------------
# FA1


@frozen
class _Fa1:
    """What FA1's forward and backward kernels share: one CTA per head, whose re-read
    tensors (``per_head`` bytes of one head's rows) stay in L2 if the heads in flight fit."""

    q: IntLike  # Q (O, dO, dQ): B·H·N·d·e
    kv: IntLike  # K or V as requested per query head
    stat: IntLike  # l or m: B·H·N·4
    heads_in_flight: IntLike
    fits: Any
    steps_num: IntLike
    steps_den: IntLike
    t_c: IntLike

    def steps(self, nbytes: IntLike) -> IntLike:
        """``nbytes`` once per visited outer step (T_c times unless causal)."""
        return intmath.scaled(intmath.mul(self.t_c, nbytes), self.steps_num, self.steps_den)

    def hbm(self, unique: IntLike, requested: IntLike) -> IntLike:
        if isinstance(self.fits, np.ndarray):
            return np.where(self.fits, unique, requested)
        return unique if self.fits else requested


def _fa1(ctx: TileContext, l2: l2m.L2, row_tensors: int) -> _Fa1:
    w = ctx.w
    e = w.element_bytes
    bh = intmath.mul(w.batch, w.heads)
    heads = intmath.minimum(bh, ctx.concurrent)
    per_head = intmath.add(intmath.mul(row_tensors, w.n, w.d, e), intmath.mul(2, w.n, STAT_BYTES))
    visited, pairs = ctx.visited, ctx.all_pairs
    return _Fa1(
        q=intmath.mul(bh, w.n, w.d, e),
        kv=intmath.mul(bh, w.n_kv_, w.d, e),
        stat=intmath.mul(bh, w.n, STAT_BYTES),
        heads_in_flight=heads,
        fits=l2m.fits(intmath.mul(heads, per_head), l2),
        steps_num=visited,
        steps_den=pairs,
        t_c=ctx.blocks.t_c,
    )


def fa1_forward_kernel(ctx: TileContext, l2: l2m.L2) -> Kernel:
    w, b = ctx.w, ctx.blocks
    e = w.element_bytes
    bh = intmath.mul(w.batch, w.heads)
    plan = _fa1(ctx, l2, 2)  # Q and O re-read per outer step
    q, kv, stat, steps, hbm, heads_in_flight = plan.q, plan.kv, plan.stat, plan.steps, plan.hbm, plan.heads_in_flight
    visited = plan.steps_num

    q_steps, stat_steps = steps(q), steps(stat)  # Q and O; l and m: once per visited outer step
    k = KernelBuilder("fa1_fwd")
    k.write("O", "output", q, "init: B·H·N·d·e", hbm=hbm(0, q))
    k.write("l", "state", stat, "init: B·H·N·4", hbm=hbm(0, stat))
    k.write("m", "state", stat, "init: B·H·N·4", hbm=hbm(0, stat))
    k.read("K", "input", kv, w.kv_bytes() if l2.mode != "off" else kv, "B·H·N_kv·d·e", intmath.mul(4, kv))
    k.read("V", "input", kv, w.kv_bytes() if l2.mode != "off" else kv, "B·H·N_kv·d·e", intmath.mul(4, kv))
    k.read("Q", "input", q_steps, hbm(q, q_steps), f"T_c · B·H·N·d·e{visited_share(w)}")
    k.read("O", "output", q_steps, hbm(0, q_steps), f"T_c · B·H·N·d·e{visited_share(w)}")
    k.read("l", "state", stat_steps, hbm(0, stat_steps), f"T_c · B·H·N·4{visited_share(w)}")
    k.read("m", "state", stat_steps, hbm(0, stat_steps), f"T_c · B·H·N·4{visited_share(w)}")
    k.write("O", "output", q_steps, f"T_c · B·H·N·d·e{visited_share(w)}", hbm=hbm(q, q_steps))
    k.write("l", "state", stat_steps, f"T_c · B·H·N·4{visited_share(w)}", hbm=hbm(stat, stat_steps))
    k.write("m", "state", stat_steps, f"T_c · B·H·N·4{visited_share(w)}", hbm=hbm(stat, stat_steps))
    t_c_visited = intmath.ceil_div(visited, b.t_r)
    return k.build(
        matmul_flops=intmath.mul(4, ctx.scores, w.d),
        # per score: block max, subtract, block sum (3); per K/V block: the O update
        # diag(l_new)⁻¹(diag(l)·e^{m−m_new}·O + e^{m̃−m_new}·P̃V) costs 3 ops per element of O
        softmax_flops=intmath.add(intmath.mul(3, ctx.scores), intmath.mul(3, bh, w.n, w.d, t_c_visited)),
        # one exp per score, plus two per row per K/V block (e^{m−m_new}, e^{m̃−m_new})
        exp_ops=intmath.add(ctx.scores, intmath.mul(2, bh, w.n, t_c_visited)),
        concurrent_ctas=heads_in_flight,
        bytes_in_flight_per_cta=intmath.mul(2, b.block_kv, w.d, e),
        overlap="serial-compute",
        kind=HEAD_GRID,
    )


def fa1_backward_kernel(ctx: TileContext, l2: l2m.L2) -> Kernel:
    w, b = ctx.w, ctx.blocks
    e = w.element_bytes
    bh = intmath.mul(w.batch, w.heads)
    plan = _fa1(ctx, l2, 4)  # Q, O, dO and dQ re-read per outer step
    q, kv, stat, steps, hbm, heads_in_flight = plan.q, plan.kv, plan.stat, plan.steps, plan.hbm, plan.heads_in_flight

    k = KernelBuilder("fa1_bwd", "backward")
    k.write("dQ", "output", q, "init: B·H·N·d·e", hbm=hbm(0, q))
    k.read("K", "input", kv, w.kv_bytes() if l2.mode != "off" else kv, "B·H·N_kv·d·e")
    k.read("V", "input", kv, w.kv_bytes() if l2.mode != "off" else kv, "B·H·N_kv·d·e")
    for tensor, role, nbytes, formula in (
        ("Q", "input", q, "B·H·N·d·e"),
        ("O", "output", q, "B·H·N·d·e"),
        ("dO", "input", q, "B·H·N·d·e"),
        ("l", "state", stat, "B·H·N·4"),
        ("m", "state", stat, "B·H·N·4"),
    ):
        k.read(tensor, role, steps(nbytes), hbm(nbytes, steps(nbytes)), "T_c · " + formula + visited_share(w))
    k.read("dQ", "output", steps(q), hbm(0, steps(q)), f"T_c · B·H·N·d·e{visited_share(w)}")
    k.write("dQ", "output", steps(q), f"T_c · B·H·N·d·e{visited_share(w)}", hbm=hbm(q, steps(q)))
    k.write("dK", "output", kv, "B·H·N_kv·d·e")
    k.write("dV", "output", kv, "B·H·N_kv·d·e")
    return k.build(
        matmul_flops=intmath.mul(10, ctx.scores, w.d),
        softmax_flops=intmath.add(intmath.mul(3, ctx.scores), intmath.mul(2, bh, w.n, w.d, b.t_c)),
        exp_ops=ctx.scores,
        concurrent_ctas=heads_in_flight,
        bytes_in_flight_per_cta=intmath.mul(2, b.block_kv, w.d, e),
        overlap="serial-compute",
        kind=HEAD_GRID,
    )


# ---------------------------------------------------------------------------------------
# Entry points


def _given_or_no_l2(l2: l2m.L2 | None) -> l2m.L2:
    """``l2``, or none at all (the paper's view: every request reaches HBM)."""
    return l2 or l2m.L2("off", 0.0, 1)


def forward_facts(ctx: TileContext, l2: l2m.L2, splits: IntLike = 1) -> TiledFacts:
    """What FA2's forward rules find on ``ctx`` and ``l2``: the blocks and occupancy, and where
    the K/V re-reads sit (knee, waves, drift, GQA row, causal live K/V), found once."""
    facts = TiledFacts(ctx.blocks, ctx.ctas_per_sm, ctx.concurrent, splits)
    if l2.mode == "off" or ctx.w.window is not None:
        return facts  # a sliding window's re-reads follow their own rule (window_reread_hbm), no curve's
    causal = bool(ctx.w.causal)
    found = {
        "l2_knee": _knee(ctx, l2),
        # a head's CTAs span more than one wave: its K/V is re-read across waves
        "l2_cross_wave": np.asarray(intmath.mul(ctx.w.group, ctx.blocks.t_r)) > np.asarray(ctx.concurrent),
        "wave_drift": forward_drift(ctx, l2),
        "gqa_row_bytes": gqa_row_bytes(ctx, l2),
        # the axis of the causal re-read curves (memory.l2.causal_reuse_d*)
        "causal_live_bytes": causal_live_bytes(ctx, l2.with_ctas(ctx.concurrent)) if causal else None,
    }
    # one workload's values as Python scalars, a grid's as arrays (as params holds them)
    found = {k: None if v is None else param(v) for k, v in found.items()}
    # the forward's re-reads came from the measured curves: of which schedule ("" if none)
    return dataclasses.replace(facts, **found, causal_curve=(l2.causal_schedule or "") if causal else None)


def fa2(
    ctx: TileContext,
    l2: l2m.L2,
    *,
    backward: bool = False,
    splits: IntLike = 1,
    facts: TiledFacts | None = None,
    split_by_forward: Any = False,
    combine: str = "fa4_combine",
) -> AlgorithmTraffic:
    """FA2's forward (split-KV where ``splits`` > 1) and, with ``backward``, the paper's backward;
    ``facts``: :func:`forward_facts` where the caller has them. ``split_by_forward``: the forward
    kernel itself takes the splits, each CTA a chunk of its Q tile's K/V, its partial results in
    fp32 for a combine kernel named ``combine`` (FA4's ``num_splits``; cuDNN's SM100 split), in place
    of FlashAttention-2's split kernel; a bool array on a grid: those rows so, the others as
    FlashAttention-2's."""
    if intmath.is_array(splits) and np.all(np.asarray(splits) == 1):
        splits = 1
    if facts is None:
        facts = forward_facts(ctx, l2, splits)
    by_forward = np.asarray(split_by_forward, dtype=bool)
    if by_forward.any() and not by_forward.all() and np.any(np.asarray(splits) > 1):
        # a grid whose rows split two ways: the forward's own where it takes them, FA2's kernels elsewhere
        split = np.asarray(splits) > 1
        own, other = split & by_forward, split & ~by_forward
        direct = np.asarray(ctx.direct_decode).astype(bool) & ~split
        split_kernel, fa2_combine = split_kv_kernels(ctx, l2, splits, direct=direct)
        reduce = combine_kernel(ctx.w, l2, splits, combine, figures_from="sdpa-flash")
        forward_splits = np.where(own, np.asarray(splits), 1).astype(np.int64)
        kernels = present_kernels(
            only_where(fa2_forward_kernel(ctx, l2, facts=facts, splits=forward_splits), ~(other | direct)),
            only_where(split_kernel, other | direct),
            only_where(fa2_combine, other),
            only_where(reduce, own),
        )
        if backward:
            kernels += fa2_backward_kernels(ctx, l2)
        return AlgorithmTraffic("tiled", "fa2", tuple(kernels), params=facts.to_params(), facts=facts)
    if by_forward.all() and np.any(np.asarray(splits) > 1):
        kernels = [fa2_forward_kernel(ctx, l2, facts=facts, splits=splits)]
        reduce = combine_kernel(ctx.w, l2, splits, combine, figures_from="sdpa-flash")
        split = np.asarray(splits) > 1
        kernels += present_kernels(reduce if not split.ndim or split.all() else only_where(reduce, split))
        if backward:
            kernels += fa2_backward_kernels(ctx, l2)
        return AlgorithmTraffic("tiled", "fa2", tuple(kernels), params=facts.to_params(), facts=facts)
    # a decode whose split-KV kernel runs unsplit too (cuDNN's on Hopper): that kernel, no combine
    direct = np.asarray(ctx.direct_decode).astype(bool) & (np.asarray(splits) == 1)
    if intmath.is_array(splits) or direct.ndim:
        # a grid: the rows of one split count run the split-KV kernels, the others the plain one
        split = np.asarray(splits) > 1
        split_kernel, combine = split_kv_kernels(ctx, l2, splits, direct=direct)
        kernels = present_kernels(
            only_where(fa2_forward_kernel(ctx, l2, facts=facts), ~(split | direct)),
            only_where(split_kernel, split | direct),
            only_where(combine, split),
        )
    elif int(splits) > 1:
        kernels = split_kv_kernels(ctx, l2, splits)
    elif direct:
        kernels = split_kv_kernels(ctx, l2, splits, direct=True)[:1]
    else:
        kernels = [fa2_forward_kernel(ctx, l2, facts=facts)]
    if backward:
        kernels += fa2_backward_kernels(ctx, l2)
    return AlgorithmTraffic("tiled", "fa2", tuple(kernels), params=facts.to_params(), facts=facts)


def _knee(ctx: TileContext, l2: l2m.L2) -> Any:
    """Where the forward's K/V re-reads sit near the L2's capacity knee (:func:`.reuse.poorly_modelled`)."""
    from .reuse import poorly_modelled, step_curve

    w = ctx.w
    curve = l2.reuse or step_curve(l2.capacity_bytes)
    ws = intmath.mul(w.n_kv_, w.d_kv, w.kv_element_bytes)
    return poorly_modelled(ws, intmath.mul(w.group, ctx.blocks.t_r), ctx.concurrent, w.causal, curve)


def fa1(ctx: TileContext, l2: l2m.L2, *, backward: bool = False) -> AlgorithmTraffic:
    kernels = [fa1_forward_kernel(ctx, l2)]
    if backward:
        kernels.append(fa1_backward_kernel(ctx, l2))
    facts = TiledFacts(ctx.blocks, ctx.ctas_per_sm, ctx.concurrent)
    return AlgorithmTraffic("tiled", "fa1", tuple(kernels), params=facts.to_params(), facts=facts)


def fa2_forward(
    w: Workload, blocks: BlockSizes, l2: l2m.L2 | None = None, *, sm_count: int = 1, sram_per_sm: float = 0.0
) -> AlgorithmTraffic:
    """FA2 forward alone; without ``l2`` the paper's view (every request reaches HBM)."""
    ctx = tile_context(w, blocks, sm_count, sram_per_sm or 1.0, 1)
    return fa2(ctx, _given_or_no_l2(l2))


def fa1_forward(
    w: Workload, blocks: BlockSizes, l2: l2m.L2 | None = None, *, sm_count: int = 1, sram_per_sm: float = 0.0
) -> AlgorithmTraffic:
    """FA1 forward alone; without ``l2`` the paper's view (every request reaches HBM)."""
    ctx = tile_context(w, blocks, sm_count, sram_per_sm or 1.0, 1)
    return fa1(ctx, _given_or_no_l2(l2))
