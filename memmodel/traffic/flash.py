"""Tiled (FlashAttention-style) attention: FA1 (paper Algorithm 1) and FA2.

Block sizes follow Algorithm 1: with M the SRAM per SM in elements,
B_c = ⌈M / 4d⌉ and B_r = min(B_c, d); or they are given. T_r = ⌈N / B_r⌉ query blocks,
T_c = ⌈N_kv / B_c⌉ key/value blocks.

FA1 (outer loop over K/V blocks, inner over Q blocks): K and V are read once; Q, O, l and m
are read, and O, l, m written, once per outer step (T_c times), after O, l, m are
initialised in HBM (Algorithm 1, line 2).

FA2 (outer loop over Q blocks, inner over K/V blocks): Q is read once, K and V once per Q
block (T_r times), O and the logsumexp written once.

These are the algorithms' own requests with no cache between SRAM and HBM — the paper's
view. l, m and logsumexp are fp32.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import intmath
from ..errors import WorkloadError
from ..intmath import IntLike
from ..workload import STAT_BYTES, Workload
from .ledger import AlgorithmTraffic, Kernel, Transfer


@dataclass(frozen=True)
class BlockSizes:
    block_q: IntLike  # B_r, rows of Q per block (after clamping to N)
    block_kv: IntLike  # B_c, rows of K/V per block (after clamping to N_kv)
    t_r: IntLike  # ⌈N / B_r⌉
    t_c: IntLike  # ⌈N_kv / B_c⌉
    source: str  # "algorithm1" or "given"
    sram_elements: IntLike  # M

    def to_dict(self) -> dict[str, Any]:
        def plain(v: Any) -> Any:
            return v.tolist() if isinstance(v, np.ndarray) else v

        return {
            "block_q": plain(self.block_q),
            "block_kv": plain(self.block_kv),
            "t_r": plain(self.t_r),
            "t_c": plain(self.t_c),
            "blocks_from": self.source,
            "sram_elements_per_sm": plain(self.sram_elements),
        }


def tile_footprint_bytes(block_q: IntLike, block_kv: IntLike, w: Workload) -> IntLike:
    """SRAM a thread block holds at once: Q_i (B_r·d), K_j and V_j (B_c·d each), in the dtype.

    O_i's accumulator and S_ij live in registers in current implementations (FA2, Triton).
    """
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
    m = int(sram_bytes_per_sm) // w.element_bytes
    auto_c = intmath.ceil_div(m, intmath.mul(4, w.d))
    b_c = auto_c if block_kv is None else block_kv
    b_r = intmath.minimum(auto_c, w.d) if block_q is None else block_q
    for name, value in (("block-q", block_q), ("block-kv", block_kv)):
        if value is not None and (not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1):
            raise WorkloadError(f"{name} must be a positive integer (got {value!r})")
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


def _hbm(kernel: str, tensor: str, role: str, direction: str, n: IntLike, formula: str) -> Transfer:
    return Transfer(kernel, tensor, role, "hbm", direction, n, formula)


def fa2_forward(w: Workload, blocks: BlockSizes) -> AlgorithmTraffic:
    e = w.element_bytes
    bh = intmath.mul(w.batch, w.heads)
    qo = intmath.mul(bh, w.n, w.d, e)
    kv_once = intmath.mul(bh, w.n_kv_, w.d, e)
    kv = intmath.mul(blocks.t_r, kv_once)
    lse = intmath.mul(bh, w.n, STAT_BYTES)
    scores = intmath.mul(bh, w.n, w.n_kv_)
    name = "fa2_fwd"
    kernel = Kernel(
        name,
        (
            _hbm(name, "Q", "input", "read", qo, "B·H·N·d·e"),
            _hbm(name, "K", "input", "read", kv, "T_r · B·H·N_kv·d·e"),
            _hbm(name, "V", "input", "read", kv, "T_r · B·H·N_kv·d·e"),
            _hbm(name, "O", "output", "write", qo, "B·H·N·d·e"),
            _hbm(name, "lse", "state", "write", lse, "B·H·N·4"),
        ),
        matmul_flops=intmath.mul(4, scores, w.d),
        # per score: running max, subtract, sum (3); per K/V block: rescale O (N·d);
        # at the end: divide O by l (N·d)
        softmax_flops=intmath.add(
            intmath.mul(3, scores), intmath.mul(bh, w.n, w.d, blocks.t_c), intmath.mul(bh, w.n, w.d)
        ),
        # one exp per score, plus exp(m_old − m_new) per row per K/V block
        exp_ops=intmath.add(scores, intmath.mul(bh, w.n, blocks.t_c)),
    )
    return AlgorithmTraffic("tiled", "fa2", (kernel,), params=blocks.to_dict())


def fa1_forward(w: Workload, blocks: BlockSizes) -> AlgorithmTraffic:
    e = w.element_bytes
    bh = intmath.mul(w.batch, w.heads)
    qo = intmath.mul(bh, w.n, w.d, e)
    kv = intmath.mul(bh, w.n_kv_, w.d, e)
    stat = intmath.mul(bh, w.n, STAT_BYTES)
    per_step_qo = intmath.mul(blocks.t_c, qo)
    per_step_stat = intmath.mul(blocks.t_c, stat)
    scores = intmath.mul(bh, w.n, w.n_kv_)
    name = "fa1_fwd"
    kernel = Kernel(
        name,
        (
            _hbm(name, "O", "output", "write", qo, "init: B·H·N·d·e"),
            _hbm(name, "l", "state", "write", stat, "init: B·H·N·4"),
            _hbm(name, "m", "state", "write", stat, "init: B·H·N·4"),
            _hbm(name, "K", "input", "read", kv, "B·H·N_kv·d·e"),
            _hbm(name, "V", "input", "read", kv, "B·H·N_kv·d·e"),
            _hbm(name, "Q", "input", "read", per_step_qo, "T_c · B·H·N·d·e"),
            _hbm(name, "O", "output", "read", per_step_qo, "T_c · B·H·N·d·e"),
            _hbm(name, "l", "state", "read", per_step_stat, "T_c · B·H·N·4"),
            _hbm(name, "m", "state", "read", per_step_stat, "T_c · B·H·N·4"),
            _hbm(name, "O", "output", "write", per_step_qo, "T_c · B·H·N·d·e"),
            _hbm(name, "l", "state", "write", per_step_stat, "T_c · B·H·N·4"),
            _hbm(name, "m", "state", "write", per_step_stat, "T_c · B·H·N·4"),
        ),
        matmul_flops=intmath.mul(4, scores, w.d),
        # per score: block max, subtract, block sum (3); per K/V block: the O update
        # diag(l_new)⁻¹(diag(l)·e^{m−m_new}·O + e^{m̃−m_new}·P̃V) costs 3 ops per element of O
        softmax_flops=intmath.add(intmath.mul(3, scores), intmath.mul(3, bh, w.n, w.d, blocks.t_c)),
        # one exp per score, plus two per row per K/V block (e^{m−m_new}, e^{m̃−m_new})
        exp_ops=intmath.add(scores, intmath.mul(2, bh, w.n, blocks.t_c)),
    )
    return AlgorithmTraffic("tiled", "fa1", (kernel,), params=blocks.to_dict())
