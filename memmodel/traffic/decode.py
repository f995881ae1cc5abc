"""Split-KV attention (Flash-Decoding): K/V cut into ``splits`` chunks processed by
separate CTAs, each writing a partial O (fp32) and logsumexp; a combine kernel reduces them.

Used by FA2 when the heuristic below (or ``--splits``) gives more than one split, which
happens when batch × heads × Q blocks cannot fill the GPU: decoding (n = 1) and short
prefills. For n = 1 with GQA the query heads of a group are processed as the rows of one
Q block ("ngroups swapped"), so each K/V head is requested once, not once per query head.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import intmath
from ..intmath import IntLike
from ..workload import ACC_BYTES, STAT_BYTES, Workload
from . import l2 as l2m
from .blocks import TileContext, as_v, diagonal_blocks, visited_blocks, window_kv_bytes
from .ledger import COMBINE, SPLIT_KV, Kernel, KernelBuilder


def split_block_kv(d: IntLike) -> IntLike:
    """K/V rows per block in FA2's split-KV kernels: 256 for d ≤ 64, 128 for d ≤ 128, else 64
    (for each element of an array of head dims)."""
    if intmath.is_array(d):
        arr = np.asarray(d)
        return np.where(arr <= 64, 256, np.where(arr <= 128, 128, 64)).astype(np.int64)
    return 256 if d <= 64 else (128 if d <= 128 else 64)


def num_splits_heuristic(work_ctas: int, sm_slots: int, kv_blocks: int, max_splits: int = 128) -> int:
    """Smallest split count whose wave efficiency is within 0.85 of the best.

    ``work_ctas`` = batch × heads × Q blocks; ``sm_slots`` = SMs × 2. With enough CTAs to fill
    0.8 of the slots, 1. Split counts that give the same chunk length as one fewer split are
    skipped. The wave efficiency of s splits is w / ⌈w⌉ with w = work·s / slots (FlashAttention-2's
    rule for its split-KV path, as its sources document it)."""
    if work_ctas >= 0.8 * sm_slots:
        return 1
    limit = min(max_splits, sm_slots, kv_blocks)
    if limit <= 1:
        return 1

    def eligible(s: int) -> bool:
        return s == 1 or -(-kv_blocks // s) != -(-kv_blocks // (s - 1))

    eff = {}
    for s in range(1, limit + 1):
        if eligible(s):
            waves = work_ctas * s / sm_slots
            eff[s] = waves / float(np.ceil(waves))
    best = max(eff.values())
    return next(s for s in sorted(eff) if eff[s] >= 0.85 * best)


#: cuDNN's decode grid, read off the profiler on the H200 (``validation/h200/cudnn-decode-probe``:
#: PyTorch's cuDNN SDPA at one query token runs an sm80 ``flash_fprop_wmma`` kernel, 16 query rows
#: by 128 keys a tile, on a grid of (CTAs of the splits, K/V heads, batch), and
#: ``lean_reduction_kernel`` as its combine). Its twelve grids, d 128 and 256, batch 1 to 128, 2k to
#: 32k keys, and the decodes of our other H200 records (batch × K/V heads 8 to 256, d 64 to 256), all
#: follow one rule: no split once batch × K/V heads pass half the SMs (96 and 128 run one split, 64
#: run four); else the splits fill a target of this many CTAs per SM (rounded down to a power of two:
#: 256 on 132 SMs), at most a quarter of that target, each split at least one tile of
#: :data:`CUDNN_DECODE_TILE_KEYS` keys, every count a power of two (48 pairs take 4). That the target
#: follows the SM count is assumed (one GPU measured).
CUDNN_DECODE_CTAS_PER_SM = 2
CUDNN_DECODE_TILE_KEYS = 128
#: the query rows a CTA of cuDNN's decode holds: a GQA group of more heads runs that many CTAs a
#: (split, K/V head), each over the split's whole K/V chunk, and counts as that many units in the
#: grid rule (``validation/h200/cudnn-decode-groups-probe``: 17 to 32 heads over one K/V head run
#: grid (64, 2, 1), 40 heads three, 96 heads six; Nsight's y is K/V heads x these tiles)
CUDNN_DECODE_TILE_ROWS = 16
#: above d 128 each split runs as two CTAs, each computing half of O's columns over all of K: the
#: grid has twice the splits, the combine reads the partial O of the splits alone (half what two CTAs
#: a split would write), and L2 serves K twice (its requests, measured by Nsight Compute, about 1.85
#: times the K/V bytes where d 128's are 1.55); at batch 128 a grid of 2 with no combine
CUDNN_DECODE_VALUE_CTAS = 2


def _pow2_floor(x: float) -> int:
    """The largest power of two ≤ ``x`` (1 below 2)."""
    return 1 << (int(x).bit_length() - 1) if x >= 2 else 1


def cudnn_decode_splits(batch: int, kv_heads: int, n_kv: int, sm_count: int, group: int = 1) -> int:
    """cuDNN's split count of a decode (:data:`CUDNN_DECODE_CTAS_PER_SM`): on 132 SMs, 64 for one
    request over 2 K/V heads and 8k keys, 16 for 8 requests, 4 for 32, 1 for 48 and more; a group
    of more query heads than a tile's rows counts each (K/V head, tile) (:data:`CUDNN_DECODE_TILE_ROWS`)."""
    units = batch * kv_heads * -(-max(group, 1) // CUDNN_DECODE_TILE_ROWS)
    if units * 2 > sm_count:
        return 1
    target = _pow2_floor(sm_count * CUDNN_DECODE_CTAS_PER_SM)
    fill = _pow2_floor(target / max(units, 1))
    return max(1, min(fill, _pow2_floor(n_kv / CUDNN_DECODE_TILE_KEYS), target // 4))


#: CTAs of cuDNN's decode kernel an SM holds at once, by head dim (Nsight Compute's occupancy limits on
#: the H200, ``validation/h200/cudnn-decode-rate-probe``: 4 at d 64, 2 at d 128 and 256)
CUDNN_DECODE_RESIDENT = ((64, 4), (128, 2))


def cudnn_decode_resident(d: IntLike) -> IntLike:
    """CTAs of cuDNN's decode kernel an SM holds at once at head dim ``d`` (:data:`CUDNN_DECODE_RESIDENT`:
    4 up to d 64, 2 above)."""
    small, large = CUDNN_DECODE_RESIDENT[0][1], CUDNN_DECODE_RESIDENT[1][1]
    if intmath.is_array(d):
        return np.where(np.asarray(d) <= CUDNN_DECODE_RESIDENT[0][0], small, large).astype(np.int64)
    return small if d <= CUDNN_DECODE_RESIDENT[0][0] else large


def cudnn_decode_value_ctas(d: IntLike) -> IntLike:
    """CTAs each split of cuDNN's decode runs as (:data:`CUDNN_DECODE_VALUE_CTAS` above d 128)."""
    if intmath.is_array(d):
        return np.where(np.asarray(d) > 128, CUDNN_DECODE_VALUE_CTAS, 1).astype(np.int64)
    return CUDNN_DECODE_VALUE_CTAS if d > 128 else 1


def choose_splits(
    w: Workload, sm_count: int, block_q: int = 64, *, prefill: bool = False, rule: str = "fa2"
) -> IntLike:
    """FA2's split count for ``w``: decoding (n = 1) always takes the heuristic; with ``prefill``
    (PyTorch's FlashAttention-2, whose forward entry point applies the same rule to every sequence
    length when dropout is off) so does n > 1, counting its Q blocks of 64 rows. 1 otherwise (give
    ``splits`` to model another kernel's split-KV prefill). With ``rule="cudnn"`` a decode takes
    cuDNN's grid instead (:func:`cudnn_decode_splits`)."""

    def one(b: int, h: int, hk: int, n: int, nkv: int, d: int, drop: float) -> int:
        if n != 1 and not (prefill and drop == 0.0):
            return 1
        if rule == "cudnn" and n == 1:
            return cudnn_decode_splits(b, hk, nkv, sm_count, h // hk if h > hk else 1)
        rows, heads = (h // hk, hk) if (h > hk and n == 1) else (n, h)
        return num_splits_heuristic(b * heads * -(-rows // block_q), sm_count * 2, -(-nkv // int(split_block_kv(d))))

    drop = float(w.dropout)
    if w.is_grid:
        arrays = np.broadcast_arrays(*(np.asarray(x) for x in (w.batch, w.heads, w.kv_heads_, w.n, w.n_kv_, w.d)))
        out = np.ones(arrays[0].shape, dtype=np.int64)
        # decoding rows, and (split prefill) the prefill rows whose B·H·Q blocks fill under
        # 80 % of the slots: the only ones the heuristic can split
        candidates = arrays[3] == 1
        if prefill and drop == 0.0:
            candidates |= arrays[0] * arrays[1] * -(-arrays[3] // block_q) < 0.8 * sm_count * 2
        if candidates.any():
            out[candidates] = np.vectorize(lambda *a: one(*a, drop), otypes=[np.int64])(
                *(a[candidates] for a in arrays)
            )
        return out
    return one(int(w.batch), int(w.heads), int(w.kv_heads_), int(w.n), int(w.n_kv_), int(w.d), drop)


def _where(rows: np.ndarray, x: IntLike) -> np.ndarray:
    """``x`` on ``rows`` of a grid, 0 elsewhere."""
    return np.where(rows, np.asarray(x), 0).astype(np.int64)


def _where_not(rows: np.ndarray, x: IntLike) -> IntLike:
    """``x`` off ``rows`` (0 on them; 0 where every row is one)."""
    if rows.all():
        return 0
    return np.where(rows, 0, np.asarray(x)).astype(np.int64)


def split_kv_kernels(ctx: TileContext, l2: l2m.L2, splits: IntLike, direct: Any = False) -> list[Kernel]:
    """The split-KV kernel and its combine. ``direct`` (true, or true on rows of a grid): the
    split kernel runs unsplit and writes O and the logsumexp itself (cuDNN's decode at one split);
    its partials are then none, and the combine runs on no such row (the caller drops it)."""
    w = ctx.w
    e, ekv = w.element_bytes, w.kv_element_bytes  # Q rows; K/V rows (an FP8 K/V cache: 1 byte)
    bh = intmath.mul(w.batch, w.heads)
    q = intmath.mul(bh, w.n, w.d, e)
    swapped = np.asarray(w.n) == 1
    kv_unique = window_kv_bytes(w, split_block_kv(w.d))  # a sliding window's keys only
    # each (Q block of 64 rows, split) CTA requests its K/V chunk: per query head, once per
    # Q block; with n = 1 and GQA the group's heads are one Q block of the K/V head
    # causal: a CTA walks only the blocks of its chunk its rows see (FlashAttention-2's split
    # kernel clips each chunk at the diagonal; a chunk wholly above it exits at once)
    bc = split_block_kv(w.d)
    q_blocks = intmath.ceil_div(w.n, 64)
    visited = visited_blocks(w.n, w.n_kv_, 64, bc, bool(w.causal), w.window)
    all_blocks = intmath.mul(q_blocks, intmath.ceil_div(w.n_kv_, bc))
    heads = np.where(swapped, np.asarray(intmath.mul(w.batch, w.kv_heads_)), np.asarray(bh))
    rows = np.where(swapped, np.asarray(intmath.mul(w.group, w.n)), np.asarray(w.n))  # Q rows per CTA row
    # the CTAs of one (split, head) by the query rows each holds: FlashAttention-2's Q blocks of 64;
    # a decode kernel's own tile (cuDNN's: 16 rows, ``decode_tile_rows``), each such CTA requesting
    # the split's whole K/V chunk for its rows
    own = np.asarray(ctx.decode_tile_rows)
    tile = np.where(own > 0, own, 64)
    row_ctas = (-(-rows // tile)).astype(np.int64)
    row_tiles = np.where(own > 0, row_ctas, 1).astype(np.int64)
    kv_per_q_head = intmath.scaled(
        intmath.mul(bh, w.n_kv_, w.d, ekv, np.where(own > 0, row_ctas, np.asarray(q_blocks)).astype(np.int64)),
        visited,
        all_blocks,
    )
    kv_req = np.where(swapped, np.asarray(kv_unique) * row_tiles, np.asarray(kv_per_q_head))
    kv_req = int(kv_req) if np.ndim(kv_req) == 0 else kv_req.astype(np.int64)
    dv = w.dv_sym  # V, the partial O and O at V's head dim
    partial_o = intmath.mul(bh, splits, w.n, w.d_v_, ACC_BYTES)
    partial_lse = intmath.mul(bh, splits, w.n, STAT_BYTES)
    direct = np.asarray(direct, dtype=bool)
    if direct.any():
        partial_o, partial_lse = (_where_not(direct, x) for x in (partial_o, partial_lse))
    k = KernelBuilder("fa2_splitkv")
    k.read("Q", "input", q, q, "B·H·N·d·e")
    # decoding: each K/V head once across the splits; a split prefill: once per Q block of 64
    # rows of each query head (a grid mixing both is labelled by its prefill rows)
    e_kv = "e_kv" if ekv != e else "e"  # the K/V cache's element bytes
    kv_formula = (
        f"B·H_kv·N_kv·d·{e_kv} (once across splits)"
        if np.all(swapped | (np.asarray(w.n) == 1))
        else f"⌈N/64⌉ · B·H·N_kv·d·{e_kv}" + (" · visited_split" if w.causal else "")
    )
    halves = ctx.value_ctas  # cuDNN's decode above d 128: each of a split's CTAs requests all of K
    k_req = intmath.mul(kv_req, halves) if np.any(np.asarray(halves) > 1) else kv_req
    if np.any(np.asarray(halves) > 1):
        kv_formula = f"{kv_formula} · value CTAs"
    k.read("K", "input", k_req, kv_unique if l2.mode != "off" else k_req, kv_formula)
    kv_formula = kv_formula.replace(" · value CTAs", "")
    v_formula = kv_formula.replace("·d·e", f"·{dv}·e")
    k.read("V", "input", as_v(w, kv_req), as_v(w, kv_unique if l2.mode != "off" else kv_req), v_formula)
    if not direct.all():
        k.write("O_partial", "intermediate", partial_o, f"B·H·splits·N·{dv}·4")
        k.write("lse_partial", "intermediate", partial_lse, "B·H·splits·N·4")
    if direct.any():
        o_direct, lse_direct = w.o_bytes(), intmath.mul(bh, w.n, STAT_BYTES)
        if not direct.all():
            o_direct, lse_direct = (_where(direct, x) for x in (o_direct, lse_direct))
        k.write("O", "output", o_direct, f"B·H·N·{dv}·e_O" if w.out_element_bytes != e else f"B·H·N·{dv}·e")
        k.write("lse", "state", lse_direct, "B·H·N·4")
    scores = intmath.scaled(intmath.mul(bh, w.n, w.n_kv_), visited, all_blocks)
    softmax = intmath.mul(4, scores)
    if ctx.dequant_flops:  # an FP8 K/V cache converted in the kernel: every K and V element loaded
        softmax = intmath.add(softmax, intmath.mul(ctx.dequant_flops, 2, intmath.ceil_div(kv_req, ekv)))
    ctas = intmath.mul(
        heads.astype(np.int64) if heads.ndim else int(heads),
        splits,
        row_ctas if row_ctas.ndim else int(row_ctas),
        halves,
    )
    # S = QKᵀ once per value CTA of a split (each needs every score of its rows), PV once in all
    products = intmath.add(intmath.mul(2, scores, w.d, halves), intmath.mul(2, scores, w.d_v_))
    split = k.build(
        matmul_flops=products,
        softmax_flops=softmax,
        exp_ops=scores,
        concurrent_ctas=intmath.minimum(ctas, ctx.concurrent),
        ctas=ctas,
        blocks=intmath.mul(bh, visited),
        diagonal_blocks=intmath.mul(bh, diagonal_blocks(w.n, w.n_kv_, 64, bc, bool(w.causal), w.window)),
        # the split kernel masks a window's every block as the forward does (flash_fwd_splitkv_kernel)
        local_blocks=intmath.mul(bh, visited) if np.any(np.asarray(ctx.local_blocks) > 0) else 0,
        bytes_in_flight_per_cta=intmath.mul(split_block_kv(w.d), w.d_kv, ekv),
        overlap="serial-compute",
        kind=SPLIT_KV,
        row_tiles=row_tiles if row_tiles.ndim else int(row_tiles),
    )
    return [split, combine_kernel(w, l2, splits, partial_o=partial_o, partial_lse=partial_lse)]


def combine_kernel(
    w: Workload,
    l2: l2m.L2,
    splits: IntLike,
    name: str = "fa2_combine",
    *,
    partial_o: IntLike | None = None,
    partial_lse: IntLike | None = None,
    figures_from: str = "",
) -> Kernel:
    """The kernel that reduces a split-KV kernel's fp32 partial O and logsumexp (``splits`` of
    each, the L2 still holding what it can of them) into O and the logsumexp. ``figures_from``:
    the implementation whose measured combine figures time it, where it is another's kernel."""
    bh = intmath.mul(w.batch, w.heads)
    dv = w.dv_sym
    if partial_o is None:
        partial_o = intmath.mul(bh, splits, w.n, w.d_v_, ACC_BYTES)
    if partial_lse is None:
        partial_lse = intmath.mul(bh, splits, w.n, STAT_BYTES)
    c = KernelBuilder(name)
    c.read("O_partial", "intermediate", partial_o, l2m.carried_over(partial_o, l2), f"B·H·splits·N·{dv}·4")
    c.read("lse_partial", "intermediate", partial_lse, l2m.carried_over(partial_lse, l2), "B·H·splits·N·4")
    o = w.o_bytes()
    c.write("O", "output", o, f"B·H·N·{dv}·e_O" if w.out_element_bytes != w.element_bytes else f"B·H·N·{dv}·e")
    c.write("lse", "state", intmath.mul(bh, w.n, STAT_BYTES), "B·H·N·4")
    return c.build(
        softmax_flops=intmath.mul(3, bh, splits, w.n, w.d_v_),
        exp_ops=intmath.mul(bh, splits, w.n),
        splits=splits,
        kind=COMBINE,
        figures_from=figures_from,
    )
