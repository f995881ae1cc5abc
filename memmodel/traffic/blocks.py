"""Which (Q block, K/V block) pairs a tiled kernel visits, and how many CTAs run at once."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import intmath
from ..intmath import IntLike


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


_causal_visited_vec = np.vectorize(_causal_visited_scalar, otypes=[np.int64])


def visited_blocks(n: IntLike, n_kv: IntLike, b_r: IntLike, b_c: IntLike, causal: bool) -> IntLike:
    """(Q block, K/V block) pairs a tiled kernel computes per head."""
    t_r = intmath.ceil_div(n, b_r)
    t_c = intmath.ceil_div(n_kv, b_c)
    if not causal:
        return intmath.mul(t_r, t_c)
    if intmath.is_array(n, n_kv, b_r, b_c):
        return _causal_visited_vec(n, n_kv, b_r, b_c)
    return _causal_visited_scalar(int(n), int(n_kv), int(b_r), int(b_c))


def _diagonal_scalar(n: int, n_kv: int, b_r: int, b_c: int) -> int:
    """Causal (Q block, K/V block) pairs that straddle the diagonal, one by one (any offset)."""
    t_r, t_c, off = -(-n // b_r), -(-n_kv // b_c), n_kv - n
    total = 0
    for i in range(t_r):
        r0, r1 = i * b_r, min(n, (i + 1) * b_r) - 1
        hi = min(t_c - 1, (r1 + off) // b_c)  # last block with a key row r1 sees
        lo = max(0, (r0 + off + 1) // b_c)  # first block with a key row r0 does not see
        total += max(0, hi - lo + 1)
    return total


def diagonal_blocks(n: IntLike, n_kv: IntLike, b_r: IntLike, b_c: IntLike, causal: bool) -> IntLike:
    """(Q block, K/V block) pairs per head that are partly masked (causal, bottom-right
    aligned): those holding a key the block's last row sees and one its first row does not.
    Kernels mask them element by element. 0 without causal masking.

    With N_kv ≥ N no block index leaves [0, T_c): block i (rows r0..r1) straddles
    ⌊(r1 + N_kv − N)/B_c⌋ − ⌊(r0 + N_kv − N + 1)/B_c⌋ + 1 blocks, summed in closed form
    with :func:`floor_sum` (the last, ragged Q block apart)."""
    if not causal:
        return 0
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
        return hi - lo + full + last
    n, n_kv, b_r, b_c = int(n), int(n_kv), int(b_r), int(b_c)
    if n_kv < n:
        return _diagonal_scalar(n, n_kv, b_r, b_c)
    off, t_r = n_kv - n, -(-n // b_r)
    full = t_r - 1
    total = floor_sum(full, b_c, b_r, b_r - 1 + off) - floor_sum(full, b_c, b_r, off + 1) + full
    return total + (n - 1 + off) // b_c - (full * b_r + off + 1) // b_c + 1


def visited_fraction(n: IntLike, n_kv: IntLike, b_r: IntLike, b_c: IntLike, causal: bool) -> Any:
    total = intmath.mul(intmath.ceil_div(n, b_r), intmath.ceil_div(n_kv, b_c))
    frac = np.asarray(intmath.to_float(visited_blocks(n, n_kv, b_r, b_c, causal))) / np.asarray(intmath.to_float(total))
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
