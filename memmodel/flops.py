"""FLOPs by convention, to compare with published figures, beside the FLOPs a ledger executes.

FlashAttention's benchmarks (Dao et al., 2022, and FlashAttention-2, Dao 2023, §4.1, whose
``benchmark_flash_attention.py`` computes ``flops``) count per head, for a forward pass,
two matrix products of 2·N·N_kv·d FLOPs each, **4·N·N_kv·d**; half of it with a causal
mask; and the backward pass as **2.5 ×** the forward (five products instead of two: the
recomputation of S is not counted apart). Softmax, scaling, masking and dropout count
nothing. A paper's TFLOP/s is this count over the measured time.

What memmodel's ledgers count instead (``flops`` in its output) is what each kernel
executes: the products of every block the kernel visits (whole diagonal blocks under a
causal mask, recomputation of S in the backward), plus the softmax and elementwise
arithmetic (exponentials apart, in ``exp_ops``).

With V's head dim apart from Q's and K's (``Workload.d_v``, MLA) the two forward products are
2·N·N_kv·d (S = QKᵀ) and 2·N·N_kv·d_v (O = PV): **2·N·N_kv·(d + d_v)** per head; the backward's
five are S = QKᵀ again, dQ = dS·K and dK = dSᵀ·Q at d, dP = dO·Vᵀ and dV = Pᵀ·dO at d_v:
**2·N·N_kv·(3·d + 2·d_v)** (= 2.5 × forward where d_v = d, the convention exactly).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import intmath
from .workload import Workload

#: how the convention is stated in the output
CONVENTION = "FlashAttention benchmarks: forward 4·N·N_kv·d per head (causal: half), backward 2.5 × forward"
#: the same convention with a sliding window: the score pairs it keeps, counted exactly
WINDOW_CONVENTION = "4·d per score a query sees (a sliding window's, counted exactly) per head, backward 2.5 × forward"
#: the convention with V's head dim apart (MLA)
DV_CONVENTION = (
    "FlashAttention benchmarks' products with V's head dim apart: forward 2·N·N_kv·(d + d_v) per head "
    "(causal: half), backward 2·N·N_kv·(3·d + 2·d_v)"
)


def window_pairs(n: int, n_kv: int, window: int) -> int:
    """(query, key) pairs a causal sliding window keeps per head: query row r (key position
    p = r + n_kv − n) sees min(window, p + 1) keys; summed in closed form over p."""
    lo, hi = n_kv - n + 1, n_kv  # p + 1 over the queries
    below = max(0, min(hi, window - 1) - lo + 1)  # terms p + 1 < window: their own value
    first = lo
    last = lo + below - 1
    return (first + last) * below // 2 + window * (hi - lo + 1 - below)


def convention_flops(workload: Workload, *, backward: bool = False) -> dict[str, Any]:
    """The convention's FLOPs for ``workload``: ``forward``, ``backward`` (0 without),
    ``total``; exact integers for scalars (the causal half rounds down), float arrays for grids."""
    w = workload
    if w.seq_lens is not None:  # a packed row: the convention summed over its documents
        parts = [convention_flops(doc, backward=backward) for doc in w.documents()]
        total: dict[str, Any] = {
            key: sum((p[key] for p in parts[1:]), parts[0][key]) for key in ("forward", "backward", "total")
        }
        rules = {p["rule"] for p in parts}
        return total | {"rule": "summed over the packed row's documents: " + "; ".join(sorted(rules))}
    if w.d_v is not None:
        return _dv_convention(w, backward)
    if w.window is not None:
        pairs = window_pairs_of(w)
        fwd_w = intmath.mul(4, w.batch, w.heads, pairs, w.d)
        if intmath.is_array(fwd_w):
            fwd_a = np.asarray(fwd_w, dtype=np.float64)
            bwd_a = fwd_a * 2.5 if backward else np.zeros_like(fwd_a)
            return {"forward": fwd_a, "backward": bwd_a, "total": fwd_a + bwd_a, "rule": WINDOW_CONVENTION}
        bwd_w = int(fwd_w) * 5 // 2 if backward else 0
        return {"forward": int(fwd_w), "backward": bwd_w, "total": int(fwd_w) + bwd_w, "rule": WINDOW_CONVENTION}
    full = intmath.mul(4, w.batch, w.heads, w.n, w.n_kv_, w.d)
    if intmath.is_array(full):
        fwd: Any = np.asarray(full, dtype=np.float64) * (0.5 if w.causal else 1.0)
        bwd: Any = fwd * 2.5 if backward else np.zeros_like(fwd)
        return {"forward": fwd, "backward": bwd, "total": fwd + bwd, "rule": CONVENTION}
    fwd = int(full) // 2 if w.causal else int(full)
    bwd = fwd * 5 // 2 if backward else 0
    return {"forward": fwd, "backward": bwd, "total": fwd + bwd, "rule": CONVENTION}


def window_pairs_of(w: Workload) -> Any:
    """:func:`window_pairs` of ``w`` (per element on a grid)."""
    if not intmath.is_array(w.n, w.n_kv_):
        return window_pairs(int(w.n), int(w.n_kv_), int(w.window))
    n, nk = np.broadcast_arrays(np.asarray(w.n, dtype=np.int64), np.asarray(w.n_kv_, dtype=np.int64))
    return np.vectorize(lambda a, b: window_pairs(int(a), int(b), int(w.window)), otypes=[np.int64])(n, nk)


def _dv_convention(w: Workload, backward: bool) -> dict[str, Any]:
    """The convention with ``d_v`` ≠ d (module docstring): the score pairs (a window's counted
    exactly, causal halved) times 2·(d + d_v) forward and 2·(3·d + 2·d_v) backward."""
    fwd_per = intmath.mul(2, w.d_kv)
    bwd_per = intmath.mul(2, intmath.add(intmath.mul(3, w.d), intmath.mul(2, w.d_v_)))
    if w.window is not None:
        pairs: Any = intmath.mul(w.batch, w.heads, window_pairs_of(w))
        half = False
    else:
        pairs, half = intmath.mul(w.batch, w.heads, w.n, w.n_kv_), bool(w.causal)
    fwd_full, bwd_full = intmath.mul(pairs, fwd_per), intmath.mul(pairs, bwd_per)
    if intmath.is_array(fwd_full):
        scale = 0.5 if half else 1.0
        fwd_a = np.asarray(fwd_full, dtype=np.float64) * scale
        bwd_a = np.asarray(bwd_full, dtype=np.float64) * scale if backward else np.zeros_like(fwd_a)
        return {"forward": fwd_a, "backward": bwd_a, "total": fwd_a + bwd_a, "rule": DV_CONVENTION}
    fwd = int(fwd_full) // 2 if half else int(fwd_full)
    bwd = (int(bwd_full) // 2 if half else int(bwd_full)) if backward else 0
    return {"forward": fwd, "backward": bwd, "total": fwd + bwd, "rule": DV_CONVENTION}
