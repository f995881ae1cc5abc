"""Standard attention: FlashAttention paper (Dao et al., 2022) Algorithms 0 and 3.

Forward (Algorithm 0), one kernel per line, S and P materialised in HBM:

1. ``qk``: S = QKᵀ (scale folded into Q)      — read Q, K; write S
2. ``mask`` (causal only): S ← −∞ above the diagonal, in place — read S and the N×N_kv
   boolean mask; write S (eager PyTorch's ``masked_fill_``; the full S is still written)
3. ``softmax``: P = softmax(S)                 — read S; write P
4. ``dropout`` (dropout > 0): P ← P ⊙ Z/(1−p)   — read P; write P and the mask Z (1 B/elt)
5. ``pv``: O = PV                              — read P, V; write O

Backward (Algorithm 3), with P (and Z) saved by the forward pass:

1. ``dv``: dV = Pᵀ dO        — read P, dO; write dV
2. ``dp``: dP = dO Vᵀ        — read dO, V; write dP
3. ``dropout_bwd`` (dropout > 0): dP ← dP ⊙ Z/(1−p) — read dP, Z; write dP
4. ``ds``: dS = P ⊙ (dP − rowsum(P ⊙ dP)) — read P, dP; write dS
5. ``dq``: dQ = dS K         — read dS, K; write dQ
6. ``dk``: dK = dSᵀ Q        — read dS, Q; write dK

Matmuls are batched GEMMs with 128×128 output tiles (cuBLAS-like): an operand is requested
from L2 once per tile row/column that needs it, and read from HBM once. GQA: the
query heads of a group are stacked so each K/V head is multiplied once.
"""

from __future__ import annotations

from .. import intmath
from ..intmath import IntLike
from ..workload import Workload
from . import l2 as l2m
from .ledger import AlgorithmTraffic, Kernel, KernelBuilder

GEMM_TILE = 128


def _gemm_requests(rows: IntLike, cols: IntLike) -> tuple[IntLike, IntLike]:
    """(times the row operand is requested, times the column operand is requested)."""
    return intmath.ceil_div(cols, GEMM_TILE), intmath.ceil_div(rows, GEMM_TILE)


def _gemm_operand_hbm(unique: IntLike, requested: IntLike, tiles_per_head: IntLike, ws: IntLike, l2: l2m.L2) -> IntLike:
    """HBM reads of a GEMM operand: once, in every L2 mode.

    Off: the paper's Algorithm 0 count. On/cold: cuBLAS rasterises its output tiles so
    the tiles computed at the same time share row and column panels, whose working set
    (a few MB) stays in L2 (measured on an H200: Q and K read once by QKᵀ at 4×16×4096×64;
    up to 1.5× at 16×8192×128).
    """
    del requested, tiles_per_head, ws, l2
    return unique


def standard(w: Workload, l2: l2m.L2, *, backward: bool = False) -> AlgorithmTraffic:
    e = w.element_bytes
    g = w.group
    bh = intmath.mul(w.batch, w.heads)
    bhk = intmath.mul(w.batch, w.kv_heads_)
    rows = intmath.mul(g, w.n)  # query rows per K/V head (grouped)
    q = intmath.mul(bh, w.n, w.d, e)  # also O, dO, dQ
    kv = intmath.mul(bhk, w.n_kv_, w.d, e)  # K or V (also dK, dV)
    q_head = intmath.mul(rows, w.d, e)
    kv_head = intmath.mul(w.n_kv_, w.d, e)
    s = intmath.mul(bh, w.n, w.n_kv_, e)  # S, P, dP, dS
    s_head = intmath.mul(rows, w.n_kv_, e)
    scores = intmath.mul(bh, w.n, w.n_kv_)
    matmul = intmath.mul(2, scores, w.d)
    tiles_s = intmath.mul(intmath.ceil_div(rows, GEMM_TILE), intmath.ceil_div(w.n_kv_, GEMM_TILE))
    tiles_o = intmath.mul(intmath.ceil_div(rows, GEMM_TILE), intmath.ceil_div(w.d, GEMM_TILE))
    tiles_kv = intmath.mul(intmath.ceil_div(w.n_kv_, GEMM_TILE), intmath.ceil_div(w.d, GEMM_TILE))
    l2_elementwise = l2.with_ctas(1)  # elementwise kernels stream heads one after another
    kernels: list[Kernel] = []

    def gemm_l2(unique: IntLike, per_tile: IntLike) -> IntLike:
        return intmath.mul(unique, per_tile)

    # --- forward -------------------------------------------------------------------
    q_req, k_req = _gemm_requests(rows, w.n_kv_)
    ws_qk = intmath.add(q_head, kv_head)
    k = KernelBuilder("qk")
    k.read("Q", "input", gemm_l2(q, q_req), _gemm_operand_hbm(q, gemm_l2(q, q_req), tiles_s, ws_qk, l2), "B·H·N·d·e")
    k.read(
        "K",
        "input",
        gemm_l2(kv, k_req),
        _gemm_operand_hbm(kv, gemm_l2(kv, k_req), tiles_s, ws_qk, l2),
        "B·H_kv·N_kv·d·e",
    )
    k.write("S", "intermediate", s, "B·H·N·N_kv·e")
    kernels.append(k.build(matmul_flops=matmul))

    if w.causal:
        mask = intmath.mul(w.n, w.n_kv_)  # one bool per score, shared by every head
        mask_req = intmath.mul(mask, bh)
        k = KernelBuilder("mask")
        k.read("S", "intermediate", s, l2m.carried_over(s, l2), "B·H·N·N_kv·e")
        k.read(
            "mask",
            "state",
            mask_req,
            l2m.reread_hbm(mask, mask_req, bh, intmath.add(mask, s_head), l2_elementwise),
            "B·H · N·N_kv·1",
        )
        k.write("S", "intermediate", s, "B·H·N·N_kv·e")
        kernels.append(k.build(softmax_flops=scores))

    k = KernelBuilder("softmax")
    k.read("S", "intermediate", s, l2m.carried_over(s, l2), "B·H·N·N_kv·e")
    k.write("P", "intermediate", s, "B·H·N·N_kv·e")
    # row max, subtract, row sum, divide: 4 FP32 ops per score; exp counted apart
    kernels.append(k.build(softmax_flops=intmath.mul(4, scores), exp_ops=scores))

    z = intmath.mul(scores, 1)  # dropout mask, 1 byte per score
    if w.dropout > 0:
        k = KernelBuilder("dropout")
        k.read("P", "intermediate", s, l2m.carried_over(s, l2), "B·H·N·N_kv·e")
        k.write("P", "intermediate", s, "B·H·N·N_kv·e")
        k.write("Z", "state", z, "B·H·N·N_kv·1")
        kernels.append(k.build(softmax_flops=intmath.mul(2, scores)))

    p_req, v_req = _gemm_requests(rows, w.d)
    ws_pv = intmath.add(s_head, kv_head)
    k = KernelBuilder("pv")
    k.read("P", "intermediate", gemm_l2(s, p_req), l2m.carried_over(s, l2), "B·H·N·N_kv·e")
    k.read(
        "V",
        "input",
        gemm_l2(kv, v_req),
        _gemm_operand_hbm(kv, gemm_l2(kv, v_req), tiles_o, ws_pv, l2),
        "B·H_kv·N_kv·d·e",
    )
    k.write("O", "output", q, "B·H·N·d·e")
    kernels.append(k.build(matmul_flops=matmul))

    # --- backward ------------------------------------------------------------------
    if backward:
        # dV = Pᵀ dO: [N_kv × G·N] @ [G·N × d]
        p_req, _ = _gemm_requests(w.n_kv_, w.d)
        k = KernelBuilder("dv", "backward")
        k.read("P", "intermediate", gemm_l2(s, p_req), s, "B·H·N·N_kv·e")
        k.read(
            "dO",
            "input",
            gemm_l2(q, intmath.ceil_div(w.n_kv_, GEMM_TILE)),
            _gemm_operand_hbm(
                q, gemm_l2(q, intmath.ceil_div(w.n_kv_, GEMM_TILE)), tiles_kv, intmath.add(s_head, q_head), l2
            ),
            "B·H·N·d·e",
        )
        k.write("dV", "output", kv, "B·H_kv·N_kv·d·e")
        kernels.append(k.build(matmul_flops=matmul))
        # dP = dO Vᵀ
        do_req, v_req = _gemm_requests(rows, w.n_kv_)
        k = KernelBuilder("dp", "backward")
        k.read(
            "dO", "input", gemm_l2(q, do_req), _gemm_operand_hbm(q, gemm_l2(q, do_req), tiles_s, ws_qk, l2), "B·H·N·d·e"
        )
        k.read(
            "V",
            "input",
            gemm_l2(kv, v_req),
            _gemm_operand_hbm(kv, gemm_l2(kv, v_req), tiles_s, ws_qk, l2),
            "B·H_kv·N_kv·d·e",
        )
        k.write("dP", "intermediate", s, "B·H·N·N_kv·e")
        kernels.append(k.build(matmul_flops=matmul))
        if w.dropout > 0:
            k = KernelBuilder("dropout_bwd", "backward")
            k.read("dP", "intermediate", s, l2m.carried_over(s, l2), "B·H·N·N_kv·e")
            k.read("Z", "state", z, z, "B·H·N·N_kv·1")
            k.write("dP", "intermediate", s, "B·H·N·N_kv·e")
            kernels.append(k.build(softmax_flops=intmath.mul(2, scores)))
        k = KernelBuilder("ds", "backward")
        k.read("P", "intermediate", s, s, "B·H·N·N_kv·e")
        k.read("dP", "intermediate", s, l2m.carried_over(s, l2), "B·H·N·N_kv·e")
        k.write("dS", "intermediate", s, "B·H·N·N_kv·e")
        # P·dP, row sum, subtract, multiply: 4 FP32 ops per score
        kernels.append(k.build(softmax_flops=intmath.mul(4, scores)))
        # dQ = dS K: [G·N × N_kv] @ [N_kv × d]
        ds_req, k_req = _gemm_requests(rows, w.d)
        k = KernelBuilder("dq", "backward")
        k.read("dS", "intermediate", gemm_l2(s, ds_req), l2m.carried_over(s, l2), "B·H·N·N_kv·e")
        k.read(
            "K",
            "input",
            gemm_l2(kv, k_req),
            _gemm_operand_hbm(kv, gemm_l2(kv, k_req), tiles_o, ws_pv, l2),
            "B·H_kv·N_kv·d·e",
        )
        k.write("dQ", "output", q, "B·H·N·d·e")
        kernels.append(k.build(matmul_flops=matmul))
        # dK = dSᵀ Q: [N_kv × G·N] @ [G·N × d]
        ds_req, _ = _gemm_requests(w.n_kv_, w.d)
        q_req = intmath.ceil_div(w.n_kv_, GEMM_TILE)
        k = KernelBuilder("dk", "backward")
        k.read("dS", "intermediate", gemm_l2(s, ds_req), s, "B·H·N·N_kv·e")
        k.read(
            "Q",
            "input",
            gemm_l2(q, q_req),
            _gemm_operand_hbm(q, gemm_l2(q, q_req), tiles_kv, intmath.add(s_head, q_head), l2),
            "B·H·N·d·e",
        )
        k.write("dK", "output", kv, "B·H_kv·N_kv·d·e")
        kernels.append(k.build(matmul_flops=matmul))

    return AlgorithmTraffic("standard", "algorithm0", tuple(kernels), params={"gemm_tile": GEMM_TILE})


def standard_forward(w: Workload, l2: l2m.L2 | None = None) -> AlgorithmTraffic:
    """Forward pass only; without ``l2`` the paper's view (every request reaches HBM)."""
    return standard(w, l2 or l2m.L2("off", 0.0, 1))
