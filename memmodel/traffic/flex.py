"""FlexAttention's prefill kernels over contiguous K/V (``--impl flex``): its forward and its
backward template under a block mask (no mask, causal, a sliding window, a packed row's
documents), counted block by block (:mod:`.flexmask`).

What they run (torch 2.9.1, 2.10.0, 2.11.0 wheels: ``torch/_inductor/kernel/flex/flex_attention.py``,
``templates/flex_attention.py.jinja``, ``flex_backwards.py.jinja``, ``template_heuristics/triton.py``):

* **Forward** (``triton_tem_fused_flex_attention``, from 128 query tokens; fewer run
  ``flex_decoding``, :mod:`.paged`): a grid of (⌈N / BLOCK_M⌉, B, H_q): one CTA per Q tile and
  *query* head (no GQA packing: its K/V head is ``h // G``). A CTA loads its Q tile once, then walks
  its sparse row's partial blocks (``mask_mod`` applied element by element), then its full ones,
  SPARSE_KV / BLOCK_N steps a block; each step loads a K and a V tile and runs two products. It
  writes O and the fp32 logsumexp (under grad mode, PyTorch's default). Without a block mask the
  row is one block of every key whose mask is the constant ``noop_mask``: plain steps. Where N or
  N_kv is not a multiple of 128 (``IS_DIVISIBLE`` false) every load and step checks its indices
  against the lengths: every full block's step of such a kernel is priced at ``checked_step_cost``
  more (a partial block's mask checks them with it; fitted
  to reference shapes of 2000 tokens; a first count as a partial block's step came out about two
  thirds slow on a packed row of 12,000 tokens, ``h200-variants-final``, and a plain step a fifth to
  two fifths fast at d = 64, ``h200-flex-cut-check``: docs/variants.md).
* **Backward**: a reduction kernel first (Δ = rowsum(O ∘ dO) in fp32), then one template over
  (⌈N_kv / BLOCK_N1⌉ + G·⌈N / BLOCK_M2⌉, B, H_kv) CTAs: the first ⌈N_kv / BLOCK_N1⌉ each hold one
  K/V tile and, for every query head of its group, walk the Q tiles of the transposed mask
  (``q_num_blocks``, ``q_indices``; four products a step: S = K·Qᵀ, dV += Pᵀ·dO, dPᵀ = V·dOᵀ,
  dK += dSᵀ·Q) and write dK, dV once per K/V head; the others each hold one query head's Q tile
  and walk its K/V blocks (three products: S, dP, dQ += dS·K) and write dQ. No atomics, no fills.

Tiles on sm90 (``h100_default_flex_config``, ``_get_default_config_bwd``, torch 2.10/2.11):
forward (BLOCK_M, BLOCK_N, stages, warps) fp16/bf16 (128, 128, 3, 4) at d = 64, (128, 64, 3, 8) at
128, (64, 32, 3, 4) at 256; backward (BLOCK_M1, BLOCK_N1, BLOCK_M2, BLOCK_N2) (64, 128, 128, 64),
8 warps, from d = 64 to 128. A head dim the table lacks runs its power-of-two rounding
(``QK_HEAD_DIM_ROUNDED``) with the fallback tiles.
"""

from __future__ import annotations

import heapq
from typing import Any

import numpy as np

from .. import intmath
from ..intmath import IntLike
from ..workload import STAT_BYTES, Workload
from . import l2 as l2m
from .flexmask import SPARSE_BLOCK, block_counts, block_matrix
from .ledger import FORWARD_GRID, Kernel, KernelBuilder

#: the forward's (BLOCK_M, BLOCK_N, num_stages, num_warps) on sm90 by (dtype, head dim)
FORWARD_SM90 = {
    ("fp16", 64): (128, 128, 3, 4),
    ("bf16", 64): (128, 128, 3, 4),
    ("fp16", 128): (128, 64, 3, 8),
    ("bf16", 128): (128, 64, 3, 8),
    ("fp16", 256): (64, 32, 3, 4),
    ("bf16", 256): (64, 32, 3, 4),
    ("fp32", 64): (128, 32, 3, 4),
    ("fp32", 128): (32, 64, 3, 4),
    ("fp32", 256): (32, 32, 3, 4),
}
#: any other head dim up to 256 (torch 2.10, 2.11)
FORWARD_FALLBACK = (64, 64, 3, 4)
#: the backward's (BLOCK_M1, BLOCK_N1, BLOCK_M2, BLOCK_N2, num_stages, num_warps) on sm90
BACKWARD_SM90_16BIT = {64: (64, 128, 128, 64, 3, 8), 128: (64, 128, 128, 64, 3, 8), 256: (64, 64, 64, 64, 2, 4)}
BACKWARD_SM90_SMALL = (64, 64, 64, 64, 3, 4)  # d < 64
BACKWARD_SM90_FP32 = (16, 16, 16, 16, 1, 4)
#: the bytes of shared memory one SM holds for a CTA at most (sm90: 227 KiB)
MAX_SMEM_PER_CTA = 227 * 1024
#: the registers one SM holds; Triton's kernels of 8 warps take about all of them (one CTA an SM)
REGISTERS_PER_SM = 65536
REGISTERS_PER_THREAD = 255
#: the shared memory the driver keeps back for each resident CTA (sm80 and later: 1 KiB)
RESERVED_SMEM_PER_CTA = 1024

#: the forward's and backward's products a step, in units of one BLOCK×BLOCK product pair: the
#: CTAs' relative work per step in the backward (its K/V programs four products, its Q programs three)
KV_PROGRAM_PRODUCTS = 4
Q_PROGRAM_PRODUCTS = 3


def rounded_head_dim(d: int) -> int:
    """The head dim the tiles are built for: the next power of two (at least 16)."""
    return max(16, 1 << (int(d) - 1).bit_length())


def forward_config(dtype: str, d: int) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, num_stages, num_warps) of flex's forward on sm90."""
    if d > 256:
        return (32, 16, 3, 4) if dtype == "fp32" else (64, 32, 3, 4)
    return FORWARD_SM90.get((dtype, int(d)), FORWARD_FALLBACK)


def backward_config(dtype: str, d: int) -> tuple[int, int, int, int, int, int]:
    """(BLOCK_M1, BLOCK_N1, BLOCK_M2, BLOCK_N2, num_stages, num_warps) of flex's backward on sm90."""
    if dtype == "fp32":
        return BACKWARD_SM90_FP32
    if d < 64:
        return BACKWARD_SM90_SMALL
    return BACKWARD_SM90_16BIT[64 if d <= 64 else 128 if d <= 128 else 256]


def ctas_per_sm(threads: int, smem: int, smem_per_sm: float) -> int:
    """CTAs of ``threads`` threads and ``smem`` bytes of shared memory one SM holds (Triton's
    kernels use up to 255 registers a thread: 8 warps fill the register file; each CTA's shared
    memory and the 1 KiB the driver keeps back for it)."""
    by_regs = max(REGISTERS_PER_SM // (threads * REGISTERS_PER_THREAD), 1) if threads >= 256 else 2
    need = max(smem, 1) + RESERVED_SMEM_PER_CTA
    by_smem = max(int(min(float(smem_per_sm), 2 * MAX_SMEM_PER_CTA) // need), 1)
    return max(min(by_regs, by_smem), 1)


def forward_smem(bm: int, bn: int, stages: int, dqk: int, dv: int, e: int) -> int:
    """The forward's shared memory: its Q tile and ``stages`` buffers of K and V tiles."""
    return bm * dqk * e + stages * bn * (dqk + dv) * e


def schedule_tail(lengths: np.ndarray, slots: int) -> float:
    """The busiest slot's work over the mean slot's when CTAs of these lengths, in launch order,
    each go to the first slot that frees (greedy list scheduling): 1 for equal waves."""
    total = float(lengths.sum())
    if total <= 0 or slots <= 0:
        return 1.0
    if lengths.size <= slots:
        return float(lengths.max()) / (total / slots) if lengths.size == slots else float(lengths.max()) * slots / total
    heap = [0.0] * slots
    for x in lengths.tolist():
        heapq.heapreplace(heap, heap[0] + x)
    return max(heap) / (total / slots)


def _mask_key(w: Workload) -> tuple[bool, int | None, tuple[int, ...] | None]:
    return bool(w.causal), None if w.window is None else int(w.window), w.seq_lens


def _per_row(fn: Any, *values: Any) -> tuple[Any, ...]:
    """``fn(*ints) -> (ints..., one float)``, element by element over arrays that broadcast (each
    distinct combination once): the counts as ints or int64 arrays, the last value as floats."""
    if not any(np.ndim(v) for v in values):
        *counts, last = fn(*(int(v) for v in values))
        return (*(int(c) for c in counts), float(last))
    arrays = np.broadcast_arrays(*(np.asarray(v, dtype=np.int64) for v in values))
    flat = np.stack([a.ravel() for a in arrays], axis=1)
    rows, inverse = np.unique(flat, axis=0, return_inverse=True)
    results = [fn(*(int(x) for x in row)) for row in rows]
    shape, at = arrays[0].shape, inverse.ravel()
    counts = [
        np.asarray([r[i] for r in results], dtype=np.int64)[at].reshape(shape) for i in range(len(results[0]) - 1)
    ]
    last = np.asarray([r[-1] for r in results], dtype=np.float64)[at].reshape(shape)
    return (*counts, last)


def divisible(n: IntLike, n_kv: IntLike) -> Any:
    """flex's ``IS_DIVISIBLE``: both lengths multiples of 128 (else every load and step is bounds-checked)."""
    out = (np.asarray(n) % SPARSE_BLOCK == 0) & (np.asarray(n_kv) % SPARSE_BLOCK == 0)
    return bool(out) if out.ndim == 0 else out


def checked_steps(steps: IntLike, n: IntLike, n_kv: IntLike) -> IntLike:
    """The full-block steps that are bounds-checked: all of them where the lengths are not divisible
    (a partial block's step applies its mask element by element, the bounds with it: priced as
    partial only; priced as both, 2000-token causal references at d = 128 came out half again slow)."""
    ok = divisible(n, n_kv)
    if isinstance(ok, bool):
        return 0 if ok else steps
    return np.where(ok, 0, np.asarray(steps, dtype=np.int64))


def strided_wave_reads(batch: int, heads: int, group: int, tiles: int, concurrent: int) -> int:
    """Σ over (request, K/V head) of the waves its readers run in, for a grid whose CTA index is
    ``tile + tiles · (request + batch · query head)`` (flex's template: (⌈N/BLOCK_M⌉, B, H_q), the
    first index fastest) and ``concurrent`` CTAs at a time of equal length: the group's query heads
    are ``batch · tiles`` CTAs apart, so a group can straddle a wave boundary for some requests."""
    if batch <= 0 or heads <= 0 or tiles <= 0:
        return 0
    g = max(group, 1)
    hk, c = max(heads // g, 1), max(concurrent, 1)
    b = np.arange(batch, dtype=np.int64)[:, None, None]
    k = np.arange(hk, dtype=np.int64)[None, :, None]
    j = np.arange(g, dtype=np.int64)[None, None, :]
    start = tiles * (b + batch * (k * g + j))  # a query head's first CTA for the request
    first, last = start // c, (start + tiles - 1) // c  # its tiles are consecutive: waves first … last
    # the heads' ranges follow one another; a wave shared by two neighbouring heads counts once
    shared = (first[:, :, 1:] == last[:, :, :-1]).sum()
    return int((last - first + 1).sum() - shared)


def strided_kv_hbm(
    w: Workload, l2: l2m.L2, unique: IntLike, requested: IntLike, tiles: IntLike, per_head: IntLike
) -> IntLike:
    """HBM reads of K and V under flex's template grid: once, plus once more for every further
    wave a (request, K/V head)'s readers run in (:func:`strided_wave_reads`), each at the L2's
    cross-wave miss share for what a wave streams in between (one (request, K/V head)'s K and V
    for every group in flight, :func:`.reuse.live_footprint`); between ``unique`` and ``requested``."""
    if l2.mode == "off":
        return requested
    from .reuse import live_footprint, step_curve

    (waves, _) = _per_row(
        lambda b, h, g, t, c: (strided_wave_reads(b, h, g, t, c), 0.0),
        w.batch,
        w.heads,
        w.group,
        tiles,
        l2.concurrent_ctas,
    )
    pairs = intmath.mul(w.batch, w.kv_heads_)
    curve = l2.reuse or step_curve(l2.capacity_bytes)
    live = live_footprint(per_head, intmath.mul(tiles, w.group), l2.concurrent_ctas)
    miss = np.asarray(curve.miss_share(live), dtype=np.float64)
    u = np.asarray(intmath.to_float(unique), dtype=np.float64)
    more = np.maximum(
        np.asarray(intmath.to_float(waves), dtype=np.float64) / np.maximum(intmath.to_float(pairs), 1.0) - 1.0, 0.0
    )
    out = np.minimum(np.asarray(intmath.to_float(requested), dtype=np.float64), u * (1.0 + more * miss)).round()
    if np.ndim(out) == 0 and not intmath.is_array(unique, requested, tiles, per_head):
        return int(out)
    return out.astype(np.int64)


def has_mask(w: Workload) -> bool:
    """Whether the runner (a user) gives a block mask: causal, a window or documents."""
    return bool(w.causal) or w.window is not None or w.seq_lens is not None


def forward_kernels(w: Workload, l2: l2m.L2, sm_count: int, smem_per_sm: float) -> tuple[list[Kernel], dict]:
    """flex's forward over contiguous K/V (module docstring), per head from its block mask."""
    e = w.element_bytes
    causal, window, seq_lens = _mask_key(w)
    masked = has_mask(w)

    def plan(n: int, n_kv: int, d: int, dv: int, g: int, b: int, h: int, win: int) -> tuple[float, ...]:
        bm, bn, stages, warps = forward_config(w.dtype, d)
        bc = block_counts(n, n_kv, causal, win or None, seq_lens, SPARSE_BLOCK, SPARSE_BLOCK)
        per = SPARSE_BLOCK // bn
        tiles = -(-n // bm)
        row_of = np.arange(tiles) * bm // SPARSE_BLOCK  # the sparse row each Q tile walks
        rows = np.full(tiles, bm)  # a tile computes all its rows (those past N masked after the products)
        steps = (bc.full_q[row_of] + bc.partial_q[row_of]) * per
        if not masked:  # no block mask: one row of every key, the constant mask, plain steps
            steps = np.full(tiles, -(-n_kv // bn))
        partial = np.zeros(tiles, dtype=np.int64) if not masked else bc.partial_q[row_of] * per
        keys = np.minimum(steps * bn, n_kv) if not masked else bc.keys_q[row_of]
        occ = ctas_per_sm(
            warps * 32, forward_smem(bm, bn, stages, rounded_head_dim(d), rounded_head_dim(dv), e), smem_per_sm
        )
        lengths = np.tile(steps, b * h)  # launch order: the Q tiles of a head, head after head
        tail = schedule_tail(lengths.astype(np.float64), sm_count * occ)
        return (
            bm, bn, tiles, occ, int(steps.sum()), int(partial.sum()), int(keys.sum()), int((rows * keys).sum()), tail,
        )  # fmt: skip

    bm, bn, tiles, occ, steps, partial, keys, pairs, tail = _per_row(
        plan, w.n, w.n_kv_, w.d, w.d_v_, w.group, w.batch, w.heads, w.window or 0
    )
    bh = intmath.mul(w.batch, w.heads)
    row_k = intmath.mul(w.d, e)
    row_v = intmath.mul(w.d_v_, e)
    kv_unique_k = intmath.mul(w.batch, w.kv_heads_, w.n_kv_, row_k)
    kv_unique_v = intmath.mul(w.batch, w.kv_heads_, w.n_kv_, row_v)
    req_k = intmath.mul(bh, keys, row_k)
    req_v = intmath.mul(bh, keys, row_v)
    ctas = intmath.mul(bh, tiles)
    concurrent = intmath.minimum(ctas, intmath.mul(occ, sm_count))
    per_head = intmath.mul(w.n_kv_, intmath.add(row_k, row_v))
    # the grid runs (Q tile, batch, query head): a group's query heads a row of requests apart
    kv_hbm = strided_kv_hbm(
        w, l2.with_ctas(concurrent), intmath.add(kv_unique_k, kv_unique_v), intmath.add(req_k, req_v), tiles, per_head
    )
    share_k = intmath.scaled(kv_hbm, row_k, intmath.add(row_k, row_v))
    q = intmath.mul(bh, w.n, w.d, e)
    o = intmath.mul(bh, w.n, w.d_v_, e)
    k = KernelBuilder("flex_attention")
    k.read("Q", "input", q, q, "B·H·N·d·e")
    k.read("K", "input", req_k, share_k, "B·H·Σ_tiles keys of the visited blocks·d·e")
    k.read(
        "V",
        "input",
        req_v,
        intmath.add(kv_hbm, intmath.mul(-1, share_k)),
        "B·H·Σ_tiles keys of the visited blocks·d_v·e",
    )
    k.write("O", "output", o, "B·H·N·d_v·e")
    k.write("lse", "state", intmath.mul(bh, w.n, STAT_BYTES), "B·H·N·4 (fp32, under grad mode)")
    scores = intmath.mul(bh, pairs)
    kernel = k.build(
        matmul_flops=intmath.mul(2, scores, intmath.add(w.d, w.d_v_)),
        softmax_flops=intmath.mul(4, scores),
        exp_ops=scores,
        concurrent_ctas=concurrent,
        ctas=ctas,
        blocks=intmath.mul(bh, steps),
        diagonal_blocks=intmath.mul(bh, partial),
        checked_blocks=checked_steps(intmath.mul(bh, steps - partial), w.n, w.n_kv_),
        bytes_in_flight_per_cta=intmath.mul(2, bn, row_k),
        overlap="serial-compute",
        kind=FORWARD_GRID,
        figures_from="flex",
        figures_own="flex",
        tail=tail,
    )
    params = {
        "kernel": "flex_attention",
        "block_m": bm,
        "block_n": bn,
        "ctas_per_sm": occ,
        "sparse_block": SPARSE_BLOCK,
    }
    return [kernel], params


def kv_program_rereads(
    rows_requested: int, n: int, g: int, m1: int, n1: int, drifting: bool, concurrent: int, step_bytes: int, l2: l2m.L2
) -> float:
    """HBM reads of Q, dO, lse and Δ by the backward's K/V programs beyond the first, per unique
    byte (0: every re-read hits).

    A K/V program walks, head after head of its group, the Q tiles its column keeps (BLOCK_M1 rows a
    step); a Q tile is read by ``readers`` = rows requested / rows of the K/V programs, two steps
    apart in the first head (neighbouring K/V tiles, BLOCK_N1 / BLOCK_M1 steps). Under a causal mask
    (or a packed row's, causal within its documents) the programs' walks shrink along the diagonal
    by those steps a head, so in head h neighbours read a tile (h + 1) times that far apart; under a
    window or none they stay in step. Between two reads the ``concurrent`` CTAs each bring one step
    of data: an exposure k_h = concurrent · gap · step_bytes / L2, and the share of requests that
    miss is random replacement's fixed point (:func:`.l2.random_replacement_miss_ratio`) at
    u = 1 / readers, over the whole L2 (no fitted figure). Misses beyond the first read: the mean over
    the group's heads of x_h · readers − 1."""
    if l2.mode == "off" or rows_requested <= 0 or n <= 0:
        return 0.0 if l2.mode != "off" else max(rows_requested / max(n, 1) - 1.0, 0.0)
    readers = max(rows_requested / n, 1.0)
    if readers <= 1.0:
        return 0.0
    apart = n1 / m1
    gaps = np.asarray([apart * (h + 1) if drifting else apart for h in range(g)], dtype=np.float64)
    k = concurrent * gaps * step_bytes / max(l2.whole, 1.0)
    x = np.asarray(l2m.random_replacement_miss_ratio(np.full(g, 1.0 / readers), k), dtype=np.float64)
    return float(np.maximum(x * readers - 1.0, 0.0).mean())


#: bytes of local memory (spilled registers) a thread of the masked backward template keeps at
#: 64 < d ≤ 128 on sm90 (Triton 3.6, torch 2.11): the median stack of the masked compiles
#: ``cuobjdump -res-usage`` listed (validation/h200/flex-bwd-probe/res-usage-2.txt: 88 bytes at one
#: query head a K/V head to 1600 at a packed row of 7665 tokens, 264 under every window); none at
#: d ≤ 64 or without a mask
BACKWARD_STACK_BYTES = 264
#: the most block reads :func:`q_phase_rereads` times one by one (a longer grid: not counted)
SCHEDULE_EVENTS = 16_000_000


def schedule_reads(
    n: int, n_kv: int, mask: tuple[bool, int | None, tuple[int, ...] | None], g: int, config: tuple[int, ...]
) -> int:
    """The block reads :func:`q_phase_rereads` times for one (batch, K/V head) group: the K/V
    programs' visited blocks of their columns and the Q programs' of their rows, ``g`` heads each."""
    causal, window, seq_lens = mask
    m1, n1, m2, n2 = config[:4]
    bc = block_counts(n, n_kv, causal or window is not None, window, seq_lens)
    cols = np.arange(-(-n_kv // n1)) * n1 // SPARSE_BLOCK
    rows = np.arange(-(-n // m2)) * m2 // SPARSE_BLOCK
    return g * int((bc.full_kv + bc.partial_kv)[cols].sum() + (bc.full_q + bc.partial_q)[rows].sum())


def q_phase_rereads(
    n: int,
    n_kv: int,
    mask: tuple[bool, int | None, tuple[int, ...] | None],
    g: int,
    d: int,
    dv: int,
    e: int,
    config: tuple[int, ...],
    slots: int,
    groups: int,
    capacity: float,
    policy: str = "lru",
) -> tuple[float, float]:
    """(Q/dO, K/V) HBM reads beyond the first, per unique byte, of the template's schedule through
    an L2 of ``capacity`` bytes (LRU; ``policy="random"``, random replacement, which the flex
    backward probe's replay compares with it).

    Per (batch, K/V head) group the grid launches its K/V programs, then its Q programs (each query
    head's in turn); they are list-scheduled onto ``slots`` CTA slots, a K/V program's step costing
    :data:`KV_PROGRAM_PRODUCTS` units and a Q program's :data:`Q_PROGRAM_PRODUCTS`, the third group
    (or the last) kept as the steady state. A K/V program reads its K/V tile once and, head after
    head, the Q/dO tiles of its column (partial blocks first); a Q program its Q/dO tile once and
    the K/V tiles of its row. A read misses where the bytes the kernel brings into L2 between it and
    the read of the same tile before it (the group's compulsory reads and writes, and the misses,
    at the steady rate of all slots) pass ``capacity``. Where a group's K/V programs fill the
    slots, its Q programs run after them and re-read Q, dO, K and V across the whole K/V phase:
    from HBM where that passed more than the L2 holds. (0, 0) past :data:`SCHEDULE_EVENTS` reads."""
    if schedule_reads(n, n_kv, mask, g, config) > SCHEDULE_EVENTS:
        return 0.0, 0.0
    causal, window, seq_lens = mask
    m1, n1, m2, n2 = config[:4]
    some, every = block_matrix(n, n_kv, causal or window is not None, window, seq_lens)
    rows, cols = some.shape
    kv_cols = [p * n1 // SPARSE_BLOCK for p in range(-(-n_kv // n1))]
    q_rows = [q * m2 // SPARSE_BLOCK for q in range(-(-n // m2))]
    walk_kv = [
        np.concatenate([np.flatnonzero(some[:, c] & ~every[:, c]), np.flatnonzero(every[:, c])]) for c in kv_cols
    ]
    walk_q = [np.concatenate([np.flatnonzero(some[r] & ~every[r]), np.flatnonzero(every[r])]) for r in q_rows]
    if not walk_kv:
        return 0.0, 0.0
    per1, per2 = max(SPARSE_BLOCK // m1, 1), max(SPARSE_BLOCK // n2, 1)
    kv_len = np.asarray([v.size * per1 * g * KV_PROGRAM_PRODUCTS for v in walk_kv], dtype=np.float64)
    q_len = np.asarray([v.size * per2 * Q_PROGRAM_PRODUCTS for v in walk_q], dtype=np.float64)
    one = np.concatenate([kv_len, np.tile(q_len, g)])
    if one.sum() <= 0:
        return 0.0, 0.0
    kept = min(groups - 1, 2)
    heap = [0.0] * max(slots, 1)
    starts = np.empty(one.size * (kept + 1))
    for i, x in enumerate(np.tile(one, kept + 1).tolist()):
        t = heapq.heappop(heap)
        starts[i] = t
        heapq.heappush(heap, t + x)
    s0 = starts[kept * one.size :]
    times_q: list[np.ndarray] = []
    ids_q: list[np.ndarray] = []
    times_k: list[np.ndarray] = []
    ids_k: list[np.ndarray] = []
    for p, v in enumerate(walk_kv):
        steps = v.size * per1
        for h in range(g):
            times_q.append(s0[p] + (h * steps + np.arange(v.size) * per1) * KV_PROGRAM_PRODUCTS)
            ids_q.append(h * rows + v)
        times_k.append(s0[p : p + 1])
        ids_k.append(np.asarray([kv_cols[p]]))
    for h in range(g):
        for q, v in enumerate(walk_q):
            start = s0[len(walk_kv) + h * len(walk_q) + q]
            times_q.append(np.asarray([start]))
            ids_q.append(np.asarray([h * rows + q_rows[q]]))
            times_k.append(start + np.arange(v.size) * per2 * Q_PROGRAM_PRODUCTS)
            ids_k.append(v)
    gaps = []
    for times, ids in ((times_q, ids_q), (times_k, ids_k)):
        t, i = np.concatenate(times), np.concatenate(ids)
        order = np.lexsort((t, i))
        t, i = t[order], i[order]
        gaps.append(np.diff(t)[i[1:] == i[:-1]])
    qo_tile, kv_tile = SPARSE_BLOCK * ((d + dv) * e + 2 * STAT_BYTES), SPARSE_BLOCK * (d + dv) * e
    base = rows * g * qo_tile + cols * kv_tile + n * g * d * e + n_kv * (d + dv) * e

    def misses(passed: np.ndarray) -> float:
        if policy == "random" and capacity > 0:
            return float(np.sum(1.0 - np.exp(-passed / capacity)))
        return float(np.count_nonzero(passed > max(capacity, 0.0)))  # LRU; with no L2 every read apart in time

    xq = xk = 0.0
    for _ in range(3):  # the rate counts the misses it gives
        rate = max(slots, 1) * (base + xq * rows * g * qo_tile + xk * cols * kv_tile) / one.sum()
        xq = misses(rate * gaps[0]) / (rows * g)
        xk = misses(rate * gaps[1]) / cols
    return xq, xk


def backward_kernels(w: Workload, l2: l2m.L2, sm_count: int, smem_per_sm: float) -> tuple[list[Kernel], dict]:
    """flex's backward (module docstring): Δ's reduction, then the template of K/V and Q programs."""
    e = w.element_bytes
    causal, window, seq_lens = _mask_key(w)
    masked = has_mask(w)

    def plan(n: int, n_kv: int, d: int, dv: int, g: int, b: int, hk: int, win: int) -> tuple[float, ...]:
        m1, n1, m2, n2, _, warps = backward_config(w.dtype, d)
        bc = block_counts(n, n_kv, causal, win or None, seq_lens, SPARSE_BLOCK, SPARSE_BLOCK)
        kv_tiles, q_tiles = -(-n_kv // n1), -(-n // m2)
        col_of = np.arange(kv_tiles) * n1 // SPARSE_BLOCK
        row_of = np.arange(q_tiles) * m2 // SPARSE_BLOCK
        if masked:
            kv_steps = (bc.full_kv[col_of] + bc.partial_kv[col_of]) * (SPARSE_BLOCK // m1)
            kv_partial = bc.partial_kv[col_of] * (SPARSE_BLOCK // m1)
            q_steps = (bc.full_q[row_of] + bc.partial_q[row_of]) * (SPARSE_BLOCK // n2)
            q_partial = bc.partial_q[row_of] * (SPARSE_BLOCK // n2)
            # query rows each K/V tile's visited Q blocks hold
            q_rows = np.minimum((bc.full_kv[col_of] + bc.partial_kv[col_of]) * SPARSE_BLOCK, n)
            keys = bc.keys_q[row_of]
        else:
            kv_steps = np.full(kv_tiles, -(-n // m1))
            q_steps = np.full(q_tiles, -(-n_kv // n2))
            kv_partial = np.zeros(kv_tiles, dtype=np.int64)
            q_partial = np.zeros(q_tiles, dtype=np.int64)
            q_rows = np.full(kv_tiles, n)
            keys = np.minimum(q_steps * n2, n_kv)
        # launch order: per (batch, K/V head), its K/V programs (the group's heads each), then its Q programs
        one = np.concatenate([kv_steps * g * KV_PROGRAM_PRODUCTS, np.tile(q_steps, g) * Q_PROGRAM_PRODUCTS])
        occ = ctas_per_sm(warps * 32, 1, smem_per_sm) if warps >= 8 else 1
        tail = schedule_tail(np.tile(one, b * hk).astype(np.float64), sm_count * occ)
        steps = int(kv_steps.sum()) * g + int(q_steps.sum()) * g
        partial = int(kv_partial.sum()) * g + int(q_partial.sum()) * g
        pairs = int((m2 * keys).sum())  # (query, key) pairs the Q programs' whole tiles compute, one query head
        extra = kv_program_rereads(
            int(q_rows.sum()), n, g, m1, n1, bool(causal and not win), min(int(kv_tiles) * b * hk, sm_count * occ),
            m1 * ((d + dv) * e + 2 * STAT_BYTES), l2,
        )  # fmt: skip
        # the Q programs' re-reads after the K/V programs, through the L2 the spilled stacks leave
        slots = sm_count * occ
        stack = BACKWARD_STACK_BYTES if masked and 64 < d <= 128 else 0
        xq, xk = (
            q_phase_rereads(
                n,
                n_kv,
                (causal, win or None, seq_lens),
                g,
                d,
                dv,
                e,
                (m1, n1, m2, n2),
                slots,
                b * hk,
                float(l2.capacity_bytes) - stack * warps * 32 * slots,
            )  # fmt: skip
            if l2.mode != "off"
            else (0.0, 0.0)
        )
        ppm = [int(round(x * 1e6)) for x in (max(extra, xq), xk)]  # _per_row keeps integers: parts per million
        return (kv_tiles, q_tiles, occ, steps, partial, int(q_rows.sum()), int(keys.sum()), pairs, *ppm, tail)

    kv_tiles, q_tiles, occ, steps, partial, q_rows, keys, pairs, extra_ppm, kv_extra_ppm, tail = _per_row(
        plan, w.n, w.n_kv_, w.d, w.d_v_, w.group, w.batch, w.kv_heads_, w.window or 0
    )
    extra = np.asarray(extra_ppm, dtype=np.float64) / 1e6
    kv_extra = np.asarray(kv_extra_ppm, dtype=np.float64) / 1e6
    bh = intmath.mul(w.batch, w.heads)
    bhk = intmath.mul(w.batch, w.kv_heads_)
    q = intmath.mul(bh, w.n, w.d, e)
    o = intmath.mul(bh, w.n, w.d_v_, e)
    stat = intmath.mul(bh, w.n, STAT_BYTES)
    kernels = []
    pre = KernelBuilder("flex_bwd_delta", "backward")
    pre.read("O", "output", o, o, "B·H·N·d_v·e")
    pre.read("dO", "input", o, o, "B·H·N·d_v·e")
    pre.write("D", "state", stat, "B·H·N·4")
    kernels.append(pre.build(softmax_flops=intmath.mul(2, bh, w.n, w.d_v_), op="reduction"))

    row_qo = intmath.mul(intmath.add(w.d, w.d_v_), e)  # a query's Q and dO rows
    row_kv = intmath.mul(intmath.add(w.d, w.d_v_), e)  # a key's K and V rows
    kv_unique = intmath.mul(bhk, w.n_kv_, row_kv)
    qo_unique = intmath.mul(bh, w.n, row_qo)
    # K/V programs: their K, V once; per step a Q and a dO tile and its lse, Δ (every group head)
    qo_req = intmath.mul(bh, q_rows, intmath.add(row_qo, 2 * STAT_BYTES))
    # Q programs: Q, dO, lse, Δ once; per step a K and a V tile
    kv_req = intmath.mul(bh, keys, row_kv)
    ctas = intmath.mul(bhk, intmath.add(kv_tiles, intmath.mul(w.group, q_tiles)))
    concurrent = intmath.minimum(ctas, intmath.mul(occ, sm_count))
    # Q, dO (with lse, Δ) from HBM once, plus what the K/V programs' re-reads miss where their
    # walks drift apart (kv_program_rereads, per unique byte) or the Q programs' after the K/V
    # phase (q_phase_rereads), whichever is more; K, V once plus the Q programs' misses
    stats_q = intmath.mul(2, stat)
    qo_once = intmath.add(qo_unique, stats_q)
    qo_hbm = intmath.minimum(
        intmath.add(qo_req, qo_once),
        np.round(np.asarray(intmath.to_float(qo_once)) * (1.0 + extra)).astype(np.int64)
        if intmath.is_array(qo_once) or extra.ndim
        else int(round(float(intmath.to_float(qo_once)) * (1.0 + float(extra)))),
    )
    kv_hbm = intmath.minimum(
        intmath.add(kv_req, kv_unique),
        np.round(np.asarray(intmath.to_float(kv_unique)) * (1.0 + kv_extra)).astype(np.int64)
        if intmath.is_array(kv_unique) or kv_extra.ndim
        else int(round(float(intmath.to_float(kv_unique)) * (1.0 + float(kv_extra)))),
    )
    k = KernelBuilder("flex_attention_backward", "backward")
    k.read("Q, dO, lse, D", "input", intmath.add(qo_req, qo_unique, intmath.mul(2, stat)), qo_hbm,
           "K/V programs: Σ visited Q rows·(d + d_v)·e + 8 per query head; Q programs: B·H·N·(d + d_v)·e + 8")  # fmt: skip
    k.read("K, V", "input", intmath.add(kv_req, kv_unique), kv_hbm,
           "K/V programs: B·H_kv·N_kv·(d + d_v)·e; Q programs: B·H·Σ visited keys·(d + d_v)·e")  # fmt: skip
    k.write("dQ", "output", q, "B·H·N·d·e")
    k.write("dK", "output", intmath.mul(bhk, w.n_kv_, w.d, e), "B·H_kv·N_kv·d·e")
    k.write("dV", "output", intmath.mul(bhk, w.n_kv_, w.d_v_, e), "B·H_kv·N_kv·d_v·e")
    scores = intmath.mul(bh, pairs)
    # K/V programs: S (d), dV (d_v), dPᵀ (d_v), dK (d); Q programs: S (d), dP (d_v), dQ (d)
    flops = intmath.add(
        intmath.mul(4, scores, intmath.add(w.d, w.d_v_)), intmath.mul(2, scores, intmath.add(w.d, w.d, w.d_v_))
    )
    kernels.append(
        k.build(
            matmul_flops=flops,
            softmax_flops=intmath.mul(8, scores),
            exp_ops=intmath.mul(2, scores),
            concurrent_ctas=concurrent,
            ctas=ctas,
            blocks=intmath.mul(bhk, steps),
            diagonal_blocks=intmath.mul(bhk, partial),
            checked_blocks=checked_steps(intmath.mul(bhk, steps - partial), w.n, w.n_kv_),
            overlap="serial-compute",
            figures_from="flex",
            figures_own="flex",
            tail=tail,
        )
    )
    params = {"backward_kernel": "flex_attention_backward", "backward_ctas_per_sm": occ}
    return kernels, params
