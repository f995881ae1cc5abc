"""A tiled kernel's blocks: their sizes (:func:`block_sizes`), which (Q block, K/V block) pairs
it visits, how many CTAs run at once, and what every tiled kernel of one workload shares
(:class:`TileContext`)."""

from __future__ import annotations

from functools import cached_property, lru_cache
from typing import Any

import numpy as np

from .. import intmath
from ..errors import WorkloadError
from ..frozen import frozen
from ..intmath import IntLike
from ..workload import Workload
from .ledger import param


def floor_sum(n: int, m: int, a: int, b: int) -> int:
    """Σ_{i=0}^{n-1} ⌊(a·i + b) / m⌋ for n ≥ 0, m ≥ 1, a ≥ 0, b ≥ 0, in O(log) steps
    (the Euclidean-like reduction of floor sums)."""
    total = 0
    while True:
        if a >= m:
            total += (n - 1) * n // 2 * (a // m)
            a %= m
        if b >= m:
            total += n * (b // m)
            b %= m
        y_max = a * n + b
        if y_max < m:
            return total
        n, b = y_max // m, y_max % m
        m, a = a, m


def floor_sum_array(n: Any, m: Any, a: Any, b: Any) -> np.ndarray:
    """:func:`floor_sum` elementwise over arrays that broadcast, with the same steps run on
    all the elements still unfinished at once (O(log) numpy passes, not a Python loop per
    element). Exact: falls back to :func:`floor_sum` per element when int64 could overflow."""
    arrays = np.broadcast_arrays(*(np.asarray(x, dtype=np.int64) for x in (n, m, a, b)))
    n, m, a, b = (x.ravel().copy() for x in arrays)
    shape = arrays[0].shape
    if n.size == 0:
        return np.zeros(shape, dtype=np.int64)
    if int(n.max()) ** 2 * (int(a.max()) + int(b.max()) + int(m.max()) + 1) >= 2**62:
        return np.vectorize(floor_sum, otypes=[np.int64])(*arrays)
    total = np.zeros(n.shape, dtype=np.int64)
    idx = np.arange(n.size)
    while idx.size:
        nn, mm, aa, bb = n[idx], m[idx], a[idx], b[idx]
        t = total[idx] + (nn - 1) * nn // 2 * (aa // mm) + nn * (bb // mm)
        aa, bb = aa % mm, bb % mm
        y = aa * nn + bb
        total[idx] = t
        going = y >= mm
        idx, y, mm, aa = idx[going], y[going], mm[going], aa[going]
        n[idx], b[idx] = y // mm, y % mm
        m[idx], a[idx] = aa, mm
    return total.reshape(shape)


def _causal_visited_scalar(n: int, n_kv: int, b_r: int, b_c: int) -> int:
    """K/V blocks visited, summed over Q blocks, with bottom-right causal alignment
    (query row r sees keys ≤ r + n_kv − n; FlashAttention ≥ 2.1's convention)."""
    t_r = -(-n // b_r)
    t_c = -(-n_kv // b_c)
    off = n_kv - n

    # full Q blocks i = 0 .. t_r-2 end at row (i+1)·b_r − 1; the last one at n − 1
    def blocks(last_row: int) -> int:
        return min(t_c, (last_row + off) // b_c + 1)

    full = t_r - 1
    # blocks(i) = ⌊((i+1)·b_r − 1 + off)/b_c⌋ + 1 until it reaches t_c at i ≥ i0
    i0 = max(0, -(-((t_c - 1) * b_c - off + 1) // b_r) - 1)
    below = min(i0, full)
    total = floor_sum(below, b_c, b_r, b_r - 1 + off) + below if below > 0 else 0
    total += (full - below) * t_c
    return total + blocks(n - 1)


def _causal_visited_array(n: Any, n_kv: Any, b_r: Any, b_c: Any) -> np.ndarray:
    """:func:`_causal_visited_scalar` elementwise, the same closed form in numpy passes
    (:func:`floor_sum_array`); element i equals the scalar result."""
    nn, nk, br, bc = np.broadcast_arrays(*(np.asarray(x, dtype=np.int64) for x in (n, n_kv, b_r, b_c)))
    t_r, t_c, off = -(-nn // br), -(-nk // bc), nk - nn
    full = t_r - 1
    i0 = np.maximum(0, -(-((t_c - 1) * bc - off + 1) // br) - 1)
    below = np.minimum(i0, full)
    # floor_sum's terms need b ≥ 0: b_r − 1 + off < 0 only with N_kv < N (queries past the keys)
    safe = (below > 0) & (br - 1 + off >= 0)
    partial = floor_sum_array(np.where(safe, below, 0), bc, br, np.where(safe, br - 1 + off, 0)) + np.where(
        safe, below, 0
    )
    out = partial + (full - below) * t_c + np.minimum(t_c, (nn - 1 + off) // bc + 1)
    odd = (below > 0) & ~safe
    if np.any(odd):  # the few elements with N_kv < N: one by one
        out[odd] = np.vectorize(_causal_visited_scalar, otypes=[np.int64])(nn[odd], nk[odd], br[odd], bc[odd])
    return out.astype(np.int64)


def band(n: int, n_kv: int, b_r: int, b_c: int, window: int) -> tuple[np.ndarray, np.ndarray]:
    """Per Q block of a sliding-window causal head (bottom-right aligned: query row r is key
    position p = r + N_kv − N and sees keys p − window < j ≤ p): the K/V blocks it visits
    (those holding a key one of its rows sees) and, of them, the blocks every one of its rows
    sees whole (no element masked). Exact, one numpy pass over the Q blocks."""
    t_r, t_c, off = -(-n // b_r), -(-n_kv // b_c), n_kv - n
    r0 = np.arange(t_r, dtype=np.int64) * b_r
    r1 = np.minimum(n, r0 + b_r) - 1
    p0, p1 = r0 + off, r1 + off
    visited = p1 // b_c - np.maximum(0, p0 - window + 1) // b_c + 1
    # whole blocks: keys from p1 − window + 1 (the last row's first) up to p0 (the first row's last);
    # a block is whole when it starts at or after the one and ends at or before the other
    first = -(-np.maximum(0, p1 - window + 1) // b_c)
    ends_by = (p0 + 1) // b_c  # blocks ending (j + 1)·B_c − 1 ≤ p0, the ragged last one apart
    ends_by = np.where(p0 >= n_kv - 1, t_c, np.minimum(ends_by, t_c - 1))
    whole = np.maximum(0, ends_by - first)
    return visited, whole


def _band_counts(n: IntLike, n_kv: IntLike, b_r: IntLike, b_c: IntLike, window: int) -> tuple[IntLike, IntLike]:
    """(visited, partly masked) (Q block, K/V block) pairs per head of a sliding window, per
    element on a grid."""

    def one(n_: int, nk_: int, br_: int, bc_: int) -> tuple[int, int]:
        visited, whole = band(int(n_), int(nk_), int(br_), int(bc_), window)
        return int(visited.sum()), int((visited - whole).sum())

    if not intmath.is_array(n, n_kv, b_r, b_c):
        return one(n, n_kv, b_r, b_c)
    arrays = np.broadcast_arrays(*(np.asarray(x, dtype=np.int64) for x in (n, n_kv, b_r, b_c)))
    visited, masked = np.vectorize(one, otypes=[np.int64, np.int64])(*arrays)
    return visited, masked


def visited_blocks(
    n: IntLike, n_kv: IntLike, b_r: IntLike, b_c: IntLike, causal: bool, window: int | None = None
) -> IntLike:
    """(Q block, K/V block) pairs a tiled kernel computes per head (``window``: a causal
    sliding window's, :func:`band`)."""
    if causal and window is not None:
        return _band_counts(n, n_kv, b_r, b_c, window)[0]
    if not causal:
        return intmath.mul(intmath.ceil_div(n, b_r), intmath.ceil_div(n_kv, b_c))
    if intmath.is_array(n, n_kv, b_r, b_c):
        return _causal_visited_array(n, n_kv, b_r, b_c)
    return _causal_visited_scalar(int(n), int(n_kv), int(b_r), int(b_c))


def _diagonal_scalar(n: int, n_kv: int, b_r: int, b_c: int) -> int:
    """Causal (Q block, K/V block) pairs that straddle the diagonal, one by one (any offset)."""
    t_r, t_c, off = -(-n // b_r), -(-n_kv // b_c), n_kv - n
    total = 0
    for i in range(t_r):
        r0, r1 = i * b_r, min(n, (i + 1) * b_r) - 1
        if r0 + off + 1 >= n_kv:  # the block's first row sees every key: nothing of it is masked
            continue
        hi = min(t_c - 1, (r1 + off) // b_c)  # last block with a key row r1 sees
        lo = max(0, (r0 + off + 1) // b_c)  # first block with a key row r0 does not see
        total += max(0, hi - lo + 1)
    return total


def diagonal_blocks(
    n: IntLike, n_kv: IntLike, b_r: IntLike, b_c: IntLike, causal: bool, window: int | None = None
) -> IntLike:
    """(Q block, K/V block) pairs per head that are partly masked (causal, bottom-right
    aligned): those holding a key the block's last row sees and one its first row does not.
    Kernels mask them element by element. 0 without causal masking.

    With N_kv ≥ N no block index leaves [0, T_c): block i (rows r0..r1) straddles
    ⌊(r1 + N_kv − N)/B_c⌋ − ⌊(r0 + N_kv − N + 1)/B_c⌋ + 1 blocks, summed in closed form
    with :func:`floor_sum` (the last, ragged Q block apart). With a sliding ``window`` also the
    blocks its left edge cuts (:func:`band`)."""
    if not causal:
        return 0
    if window is not None:
        return _band_counts(n, n_kv, b_r, b_c, window)[1]
    if intmath.is_array(n, n_kv, b_r, b_c):
        arrays = np.broadcast_arrays(*(np.asarray(x, dtype=np.int64) for x in (n, n_kv, b_r, b_c)))
        nn, nk, br, bc = arrays
        if np.any(nk < nn):
            return np.vectorize(_diagonal_scalar, otypes=[np.int64])(nn, nk, br, bc)
        off, t_r = nk - nn, -(-nn // br)
        full = t_r - 1
        hi = floor_sum_array(full, bc, br, br - 1 + off)
        lo = floor_sum_array(full, bc, br, off + 1)
        last_r0 = full * br
        last = (nn - 1 + off) // bc - (last_r0 + off + 1) // bc + 1
        last = np.where(last_r0 + off + 1 >= nk, 0, last)  # a last block of one row sees every key
        return hi - lo + full + last
    n, n_kv, b_r, b_c = int(n), int(n_kv), int(b_r), int(b_c)
    if n_kv < n:
        return _diagonal_scalar(n, n_kv, b_r, b_c)
    off, t_r = n_kv - n, -(-n // b_r)
    full = t_r - 1
    total = floor_sum(full, b_c, b_r, b_r - 1 + off) - floor_sum(full, b_c, b_r, off + 1) + full
    if full * b_r + off + 1 >= n_kv:  # a last block of one row sees every key: nothing of it is masked
        return total
    return total + (n - 1 + off) // b_c - (full * b_r + off + 1) // b_c + 1


def window_kv_bytes(w: Workload, block_kv: IntLike) -> IntLike:
    """The K (or V) bytes a sliding-window kernel of ``w`` reads at all: keys from the first
    K/V block holding a key some query sees (key n_kv − n − window + 1 on) to the last, per K/V
    head (all of them without a window, :meth:`Workload.kv_bytes`)."""
    if w.window is None:
        return w.kv_bytes()
    first_key = intmath.maximum(0, intmath.add(w.n_kv_, intmath.mul(-1, w.n), 1 - w.window))
    skipped = intmath.mul(intmath.floor_div(first_key, block_kv), block_kv)
    keys = intmath.add(w.n_kv_, -skipped)
    return intmath.kept(intmath.mul(w.batch, w.kv_heads_, keys, w.d, w.kv_element_bytes))


def as_v(w: Workload, k_bytes: IntLike) -> IntLike:
    """V's share of a count made for K (or dV's for dK; O's for Q): the same, scaled by
    d_v / d where V's head dim differs (floored; exact for counts made of whole rows). The
    L2 rules run on K and V together, so both see the same miss share."""
    if w.d_v is None:
        return k_bytes
    return intmath.scaled(k_bytes, w.d_v, w.d)


def visited_fraction(
    n: IntLike, n_kv: IntLike, b_r: IntLike, b_c: IntLike, causal: bool, window: int | None = None
) -> Any:
    total = intmath.mul(intmath.ceil_div(n, b_r), intmath.ceil_div(n_kv, b_c))
    visited = visited_blocks(n, n_kv, b_r, b_c, causal, window)
    frac = np.asarray(intmath.to_float(visited)) / np.asarray(intmath.to_float(total))
    return float(frac) if frac.ndim == 0 else frac


#: FlashAttention-2's forward and backward kernels run 4 or 8 warps with about 255
#: registers per thread, so at most 2 CTAs share an SM's 64K registers.
MAX_CTAS_PER_SM = 2


def ctas_per_sm(footprint_bytes: IntLike, sram_per_sm: float, given: int | None = None) -> IntLike:
    """CTAs resident per SM: the given figure, else as many tiles as fit the SRAM, at most
    :data:`MAX_CTAS_PER_SM`, at least 1."""
    if given is not None:
        return given
    by_smem = np.floor(sram_per_sm / np.maximum(np.asarray(intmath.to_float(footprint_bytes)), 1.0)).astype(np.int64)
    out = np.clip(by_smem, 1, MAX_CTAS_PER_SM)
    return int(out) if out.ndim == 0 else out


@frozen
class BlockSizes:
    """The tiles a tiled kernel runs (rows of Q and of K/V per block) and their counts."""

    block_q: IntLike  # B_r, rows of Q per block (after clamping to N)
    block_kv: IntLike  # B_c, rows of K/V per block (after clamping to N_kv)
    t_r: IntLike  # ⌈N / B_r⌉
    t_c: IntLike  # ⌈N_kv / B_c⌉
    source: str  # "algorithm1" or "given"
    sram_elements: IntLike  # M

    def to_params(self) -> dict[str, Any]:
        """The blocks as :attr:`~.ledger.AlgorithmTraffic.params` (a grid's as arrays)."""
        return {
            "block_q": param(self.block_q),
            "block_kv": param(self.block_kv),
            "t_r": param(self.t_r),
            "t_c": param(self.t_c),
            "blocks_from": self.source,
            "sram_elements_per_sm": param(self.sram_elements),
        }


def tile_footprint_bytes(block_q: IntLike, block_kv: IntLike, w: Workload) -> IntLike:
    """SRAM a thread block holds at once: Q_i (B_r·d), K_j and V_j (B_c·d each), in the dtype.

    O_i's accumulator and S_ij live in registers in current implementations (FA2, Triton).
    With ``d_v``: B_r·d + B_c·(d + d_v).
    """
    if w.d_v is not None:
        return intmath.mul(intmath.add(intmath.mul(block_q, w.d), intmath.mul(block_kv, w.d_kv)), w.element_bytes)
    return intmath.mul(intmath.add(block_q, intmath.mul(2, block_kv)), w.d, w.element_bytes)


def block_sizes(
    w: Workload,
    sram_bytes_per_sm: float,
    block_q: int | None = None,
    block_kv: int | None = None,
) -> BlockSizes:
    """Algorithm 1's block sizes for ``w`` on an SRAM of ``sram_bytes_per_sm``, or the given ones.

    Raises :class:`WorkloadError` when given blocks (or a head dimension) do not fit.
    """
    for name, value in (("block-q", block_q), ("block-kv", block_kv)):
        if value is None:
            continue
        if isinstance(value, np.ndarray):  # per grid element (an implementation's tiles by head dim)
            if value.dtype.kind not in "iu" or np.any(value < 1):
                raise WorkloadError(f"{name} must be positive integers")
        elif not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
            raise WorkloadError(f"{name} must be a positive integer (got {value!r})")
    m = max(1, int(sram_bytes_per_sm) // w.element_bytes)
    auto_c = intmath.ceil_div(m, intmath.mul(4, w.d))
    b_c = auto_c if block_kv is None else block_kv
    b_r = intmath.minimum(auto_c, w.d) if block_q is None else block_q
    footprint = tile_footprint_bytes(b_r, b_c, w)
    too_big = np.asarray(footprint) > sram_bytes_per_sm
    if np.any(too_big):
        fp = int(np.max(np.asarray(footprint)))
        if block_q is None and block_kv is None:
            raise WorkloadError(
                f"head dimension d={_first(w.d, too_big)} is too large: even one row of Q, K and V "
                f"({fp} bytes) exceeds the {int(sram_bytes_per_sm)} bytes of SRAM per SM"
            )
        raise WorkloadError(
            f"blocks block-q={_first(b_r, too_big)} × block-kv={_first(b_c, too_big)} need "
            f"(B_r + 2·B_c)·d·e = {fp} bytes of SRAM; the profile has {int(sram_bytes_per_sm)} "
            f"bytes per SM (choose smaller blocks)"
        )
    b_r = intmath.minimum(b_r, w.n)
    b_c = intmath.minimum(b_c, w.n_kv_)
    return BlockSizes(
        block_q=b_r,
        block_kv=b_c,
        t_r=intmath.ceil_div(w.n, b_r),
        t_c=intmath.ceil_div(w.n_kv_, b_c),
        source="algorithm1" if block_q is None and block_kv is None else "given",
        sram_elements=m,
    )


def _first(value: IntLike, mask: Any) -> int:
    arr = np.broadcast_to(np.asarray(value), np.shape(mask))
    return int(arr[mask].flat[0]) if np.ndim(mask) else int(arr)


#: the orders a kernel walks its K/V blocks in (:attr:`TileContext.kv_order`)
KV_ORDERS = ("reverse", "forward")


@frozen
class TileContext:
    """What every tiled kernel of one workload shares."""

    w: Workload
    blocks: BlockSizes
    visited: IntLike  # visited (Q block, K/V block) pairs per head
    scores: IntLike  # computed scores over all heads (≈ visited · B_r · B_c)
    ctas_per_sm: IntLike
    concurrent: IntLike  # CTAs resident at once
    kv_order: str = "reverse"  # FA2's forward CTA walks its K/V blocks from the diagonal down
    #: the work a real kernel executes: its head dim rounded up to the one it is built for,
    #: and whole tiles (a ragged last block computes a full tile); the paper's algorithm: exact
    exec_d: IntLike = 0
    #: V's head dim as the kernel runs it (0: ``exec_d``; MLA's d_v ≠ d)
    exec_dv: IntLike = 0
    exec_scores: IntLike = 0
    diagonal: IntLike = 0  # (Q block, K/V block) pairs per head on the causal diagonal
    smem_reads: IntLike = 4  # times a CTA reads each K/V tile from shared memory
    local_blocks: IntLike = 0  # blocks per head a sliding-window forward masks whole (its kernel's way)
    local_loop_ctas: IntLike = 0  # its CTAs per head that walk past their masking steps (FA2's second loop)
    #: FP8 (``memmodel.implementations.fp8_forward``): the forward transposes each V tile in
    #: shared memory (FA3's fp8 kernels), reads these fp32 scale tensors ((name, elements)
    #: pairs) and writes these fp32 amax scalars (cuDNN's fp8 graph)
    v_transpose: bool = False
    scale_tensors: tuple[tuple[str, IntLike], ...] = ()
    amax_outputs: tuple[str, ...] = ()
    #: FP32-pipe FLOPs per K/V element a kernel that reads an FP8 K/V cache spends converting it
    #: (0: none, the K/V are in the dtype); :data:`memmodel.implementations.KV_DEQUANT_FLOPS`
    dequant_flops: int = 0
    #: HBM bytes each forward CTA writes beyond O and the logsumexp: its spilled registers
    #: (PyTorch's FlashAttention-2 build, ``Implementation.spill_write_bytes_at``; 0: none counted)
    spill_bytes_per_cta: IntLike = 0
    #: CTAs of a cluster that share one load of a tile both read (FA4's CTA pairs, 2-CTA
    #: ``tcgen05``: each loads half): the forward's K and V requests, the backward's Q, dO and dQ
    #: accumulator ones divide by it (1: every CTA loads its own)
    cta_pair: IntLike = 1
    #: CTAs a split-KV split's V columns are cut across (cuDNN's decode above d 128: two, each
    #: computing half of O's columns over all of K, :data:`~.decode.CUDNN_DECODE_VALUE_CTAS`):
    #: each requests the chunk's K, and its share of V (1: one CTA a split)
    value_ctas: IntLike = 1
    #: 1 where a decode runs its split-KV kernel even unsplit (cuDNN's decode on Hopper: at one split
    #: its ``flash_fprop_wmma`` kernel writes O itself and no combine runs); 0: the plain forward
    direct_decode: IntLike = 0
    #: the query rows a CTA of a decode kernel of its own holds (cuDNN's on Hopper, 16:
    #: :data:`~.decode.CUDNN_DECODE_TILE_ROWS`), each such CTA streaming its split's whole K/V
    #: chunk; 0: FlashAttention-2's split kernel, Q blocks of 64 rows
    decode_tile_rows: IntLike = 0

    @cached_property
    def all_pairs(self) -> IntLike:
        """(Q block, K/V block) pairs per head, visited or not: T_r · T_c (``visited`` itself
        unless causal, so that a share of visited pairs is known to be all of them)."""
        return self.visited if not self.w.causal else intmath.mul(self.blocks.t_r, self.blocks.t_c)

    @property
    def exec_dv_(self) -> IntLike:
        """V's head dim as executed (``exec_d`` where V's is Q's)."""
        return self.exec_d if self.w.d_v is None or not np.any(np.asarray(self.exec_dv)) else self.exec_dv

    def matmul_forward(self, scores: IntLike) -> IntLike:
        """A forward's products over ``scores``: S = QKᵀ at d and O = PV at d_v, 2·scores·(d + d_v)
        (4·scores·d where d_v = d)."""
        if self.w.d_v is None:
            return intmath.mul(4, scores, self.exec_d)
        return intmath.mul(2, scores, intmath.add(self.exec_d, self.exec_dv_))

    def matmul_backward(self, scores: IntLike) -> IntLike:
        """A backward's five products over ``scores``: S = QKᵀ again, dQ = dS·K, dK = dSᵀ·Q at d;
        dP = dO·Vᵀ, dV = Pᵀ·dO at d_v: 2·scores·(3d + 2d_v) (10·scores·d where d_v = d)."""
        if self.w.d_v is None:
            return intmath.mul(10, scores, self.exec_d)
        return intmath.mul(2, scores, intmath.add(intmath.mul(3, self.exec_d), intmath.mul(2, self.exec_dv_)))


def tile_context(
    w: Workload,
    blocks: BlockSizes,
    sm_count: int,
    sram_per_sm: float,
    given_ctas: int | None,
    kv_order: str = "reverse",
    exec_d: IntLike | None = None,
    whole_tiles: bool = False,
    smem_reads: IntLike = 4,
    tile: tuple[IntLike, IntLike] | None = None,
    exec_dv: IntLike | None = None,
    fa2_masking: str | None = None,
) -> TileContext:
    """What the tiled kernels of ``w`` share. ``exec_d`` is the head dim a real kernel runs
    at (default ``w.d``); ``whole_tiles``: it computes whole B_r × B_c tiles, the ragged
    last ones too (real kernels; the paper's algorithm counts exact work); ``tile`` is the
    kernel's compile-time tile when the sequence is shorter than it (decoding: a 128-row tile
    for four query rows). ``fa2_masking``: the forward kernel masks as FlashAttention-2's code
    does (:func:`fa2_masked_blocks`): ``"shape"`` where the lengths decide ``Is_even_MN``,
    ``"varlen"`` for a document of a varlen launch (never even); None: the blocks the mask cuts."""
    if w.causal:
        visited = visited_blocks(w.n, w.n_kv_, blocks.block_q, blocks.block_kv, True, w.window)
    else:  # all of them, T_r · T_c, from the blocks' counts
        visited = intmath.mul(blocks.t_r, blocks.t_c)
    full = intmath.mul(w.batch, w.heads, w.n, w.n_kv_)
    if w.causal:
        scores = np.minimum(
            np.asarray(full, dtype=object if not intmath.is_array(full) else np.int64),
            np.asarray(intmath.mul(w.batch, w.heads, visited, blocks.block_q, blocks.block_kv)),
        )
        scores = int(scores) if np.ndim(scores) == 0 else scores.astype(np.int64)
    else:
        scores = full
    per_sm = ctas_per_sm(tile_footprint_bytes(blocks.block_q, blocks.block_kv, w), sram_per_sm, given_ctas)
    if kv_order not in KV_ORDERS:
        raise WorkloadError(f"unknown K/V order {kv_order!r}: accepted are {', '.join(KV_ORDERS)}")
    # a real kernel computes its compile-time tile whole (``tile``; at least the block)
    tq, tkv = tile if tile is not None else (blocks.block_q, blocks.block_kv)
    tq, tkv = intmath.maximum(tq, blocks.block_q), intmath.maximum(tkv, blocks.block_kv)
    executed = intmath.mul(w.batch, w.heads, visited, tq, tkv) if whole_tiles else scores
    return TileContext(
        w,
        blocks,
        visited,
        scores,
        per_sm,
        intmath.mul(sm_count, per_sm),
        kv_order,
        exec_d=w.d if exec_d is None else exec_d,
        exec_dv=0 if w.d_v is None else (w.d_v if exec_dv is None else exec_dv),
        exec_scores=executed,
        diagonal=_masked_blocks(w, blocks, whole_tiles)
        if fa2_masking is None or w.window is not None
        else fa2_masked_blocks(w, blocks, fa2_masking == "varlen"),
        smem_reads=smem_reads,
    )


def fa2_masked_blocks(w: Workload, blocks: BlockSizes, varlen: bool) -> IntLike:
    """(Q block, K/V block) pairs per head FlashAttention-2's forward runs through its masking
    loop (``flash_fwd_kernel.h``, ``compute_attn_1rowblock``): each CTA's first
    ``n_masking_steps`` K/V blocks (it walks them from the last), ``⌈B_r / B_c⌉`` with causal
    masking where ``Is_even_MN`` (both lengths multiples of their blocks, no ``cu_seqlens``), one
    more where not (a causal row's end may straddle a further block), and 1 without causal masking
    (the last block's keys past N_kv), however many of them the mask cuts; at most the blocks the
    CTA visits. Where the launch is even, :func:`_masked_blocks` (the mask's own, the same there)."""
    n, n_kv, b_r, b_c = w.n, w.n_kv_, blocks.block_q, blocks.block_kv
    even = (not varlen) & (np.asarray(n) % np.asarray(b_r) == 0) & (np.asarray(n_kv) % np.asarray(b_c) == 0)
    if np.all(even):
        return _masked_blocks(w, blocks, True)
    causal = bool(w.causal)
    uneven = np.vectorize(lambda a, b, c, e: _fa2_masked(int(a), int(b), int(c), int(e), causal), otypes=[np.int64])(
        n, n_kv, b_r, b_c
    )
    out = np.where(even, np.asarray(_masked_blocks(w, blocks, True)), uneven)
    return int(out) if out.ndim == 0 else out.astype(np.int64)


def fa2_local_loop_ctas(w: Workload, blocks: BlockSizes) -> IntLike:
    """CTAs per head of FlashAttention-2's sliding-window forward that visit more K/V blocks than
    its masking steps (``flash_fwd_kernel.h``: ``⌈B_r / B_c⌉ + 1`` for a local kernel, which is
    never ``Is_causal``) and so run its second loop as well; 0 without a window."""
    if w.window is None:
        return 0
    out = np.vectorize(
        lambda a, b, c, e, win: _fa2_local_loop(int(a), int(b), int(c), int(e), int(win)), otypes=[np.int64]
    )(w.n, w.n_kv_, blocks.block_q, blocks.block_kv, w.window)
    return int(out) if out.ndim == 0 else out.astype(np.int64)


@lru_cache(maxsize=4096)
def _fa2_local_loop(n: int, n_kv: int, b_r: int, b_c: int, window: int) -> int:
    """:func:`fa2_local_loop_ctas` of one launch: Q block i (rows r0..r1) visits the K/V blocks from
    ⌊(r0 + N_kv − N − (W − 1)) / B_c⌋ (at least 0) to ⌊(r1 + N_kv − N) / B_c⌋ (at most the last)."""
    t_r, t_c, off = -(-n // b_r), -(-n_kv // b_c), n_kv - n
    steps = -(-b_r // b_c) + 1
    r0 = np.arange(t_r, dtype=np.int64) * b_r
    r1 = np.minimum(r0 + b_r, n) - 1
    lo = np.maximum(r0 + off - (window - 1), 0) // b_c
    hi = np.minimum((r1 + off) // b_c, t_c - 1)
    return int(np.count_nonzero(hi - lo + 1 > steps))


@lru_cache(maxsize=4096)
def _fa2_masked(n: int, n_kv: int, b_r: int, b_c: int, causal: bool) -> int:
    """:func:`fa2_masked_blocks` of one uneven launch: Σ over Q blocks of min(visited, steps)."""
    t_r, t_c = -(-n // b_r), -(-n_kv // b_c)
    if not causal:
        return t_r * min(t_c, 1)
    steps = -(-b_r // b_c) + 1
    last_row = np.minimum((np.arange(t_r, dtype=np.int64) + 1) * b_r, n) - 1
    visited = np.clip((last_row + n_kv - n) // b_c + 1, 0, t_c)  # bottom-right: row r sees keys ≤ r + N_kv − N
    return int(np.minimum(visited, steps).sum())


def _masked_blocks(w: Workload, blocks: BlockSizes, whole_tiles: bool) -> IntLike:
    """(Q block, K/V block) pairs per head a real kernel masks element by element: those on
    the causal diagonal and, without causal masking, each Q block's last K/V block when N_kv is
    not a multiple of B_c (its keys past the end are masked: FlashAttention-2's ``Is_even_MN``
    false path). The paper's algorithm: the diagonal only."""
    diagonal = diagonal_blocks(w.n, w.n_kv_, blocks.block_q, blocks.block_kv, w.causal, w.window)
    if not whole_tiles or w.causal:
        return diagonal
    ragged = np.asarray(w.n_kv_) % np.asarray(blocks.block_kv) != 0
    out = np.where(ragged, np.asarray(blocks.t_r), 0)
    return int(out) if out.ndim == 0 else out.astype(np.int64)
