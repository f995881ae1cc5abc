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


def _tiles(extent: IntLike) -> IntLike:
    """Output tiles of a GEMM along one dimension."""
    return intmath.ceil_div(extent, GEMM_TILE)


def standard(w: Workload, l2: l2m.L2, *, backward: bool = False) -> AlgorithmTraffic:
    """The kernels of Algorithm 0 (and 3), with their transfers at the three levels.

    A GEMM operand is requested from L2 once per output tile along the other dimension and
    read from HBM once, in every L2 mode: cuBLAS rasterises its output tiles so those
    computed at the same time share row and column panels, whose working set (a few MB)
    stays in L2 (measured on an H200: Q and K read once by QKᵀ at 4×16×4096×64; but 1.6× at
    2×16×8192×128 and 2.9× at 1×16×16384×64, re-reads this rule misses — small beside S). S, P, dP, dS just written by the previous kernel are read from L2 when
    they fit (mode ``on``).
    """
    e = w.element_bytes
    bh = intmath.mul(w.batch, w.heads)
    rows = intmath.mul(w.group, w.n)  # query rows per K/V head (the group stacked)
    q = intmath.mul(bh, w.n, w.d, e)  # also O, dO, dQ
    kv = w.kv_bytes()  # K or V (also dK, dV)
    s = intmath.mul(bh, w.n, w.n_kv_, e)  # S, P, dP, dS
    s_head = intmath.mul(rows, w.n_kv_, e)
    scores = intmath.mul(bh, w.n, w.n_kv_)
    matmul = intmath.mul(2, scores, w.d)
    z = scores  # dropout mask, 1 byte per score
    kernels: list[Kernel] = []

    def operand(k: KernelBuilder, tensor: str, role: str, unique: IntLike, times: IntLike, formula: str) -> None:
        k.read(tensor, role, intmath.mul(unique, times), unique, formula)

    def just_written(k: KernelBuilder, tensor: str, times: IntLike = 1) -> None:
        k.read(tensor, "intermediate", intmath.mul(s, times), l2m.carried_over(s, l2), "B·H·N·N_kv·e")

    # --- forward -------------------------------------------------------------------
    k = KernelBuilder("qk")  # S = Q Kᵀ: [G·N × d] @ [d × N_kv]
    operand(k, "Q", "input", q, _tiles(w.n_kv_), "B·H·N·d·e")
    operand(k, "K", "input", kv, _tiles(rows), "B·H_kv·N_kv·d·e")
    k.write("S", "intermediate", s, "B·H·N·N_kv·e")
    kernels.append(k.build(matmul_flops=matmul, op="gemm"))

    if w.causal:
        mask = intmath.mul(w.n, w.n_kv_)  # one bool per score, shared by every head
        mask_req = intmath.mul(mask, bh)
        k = KernelBuilder("mask")
        just_written(k, "S")
        # the elementwise kernel streams the heads one after another: the mask is re-read per
        # head and stays in L2 only if it fits beside one head's S
        stream = l2.with_ctas(1)
        k.read(
            "mask",
            "state",
            mask_req,
            l2m.reread_hbm(mask, mask_req, bh, intmath.add(mask, s_head), stream),
            "B·H · N·N_kv·1",
        )
        k.write("S", "intermediate", s, "B·H·N·N_kv·e")
        kernels.append(k.build(softmax_flops=scores, op="elementwise"))

    k = KernelBuilder("softmax")
    just_written(k, "S")
    k.write("P", "intermediate", s, "B·H·N·N_kv·e")
    # row max, subtract, row sum, divide: 4 FP32 ops per score; exp counted apart
    kernels.append(
        k.build(
            softmax_flops=intmath.mul(4, scores),
            exp_ops=scores,
            op="softmax",
            rows=intmath.mul(bh, w.n),
            row_length=w.n_kv_,
        )
    )

    if w.dropout > 0:
        k = KernelBuilder("dropout")
        just_written(k, "P")
        k.write("P", "intermediate", s, "B·H·N·N_kv·e")
        k.write("Z", "state", z, "B·H·N·N_kv·1")
        kernels.append(k.build(softmax_flops=intmath.mul(2, scores), op="elementwise"))

    k = KernelBuilder("pv")  # O = P V: [G·N × N_kv] @ [N_kv × d]
    just_written(k, "P", _tiles(w.d))
    operand(k, "V", "input", kv, _tiles(rows), "B·H_kv·N_kv·d·e")
    k.write("O", "output", q, "B·H·N·d·e")
    kernels.append(k.build(matmul_flops=matmul, op="gemm"))

    # --- backward ------------------------------------------------------------------
    if backward:
        k = KernelBuilder("dv", "backward")  # dV = Pᵀ dO: [N_kv × G·N] @ [G·N × d]
        operand(k, "P", "intermediate", s, _tiles(w.d), "B·H·N·N_kv·e")
        operand(k, "dO", "input", q, _tiles(w.n_kv_), "B·H·N·d·e")
        k.write("dV", "output", kv, "B·H_kv·N_kv·d·e")
        kernels.append(k.build(matmul_flops=matmul, op="gemm"))

        k = KernelBuilder("dp", "backward")  # dP = dO Vᵀ: [G·N × d] @ [d × N_kv]
        operand(k, "dO", "input", q, _tiles(w.n_kv_), "B·H·N·d·e")
        operand(k, "V", "input", kv, _tiles(rows), "B·H_kv·N_kv·d·e")
        k.write("dP", "intermediate", s, "B·H·N·N_kv·e")
        kernels.append(k.build(matmul_flops=matmul, op="gemm"))

        if w.dropout > 0:
            k = KernelBuilder("dropout_bwd", "backward")
            just_written(k, "dP")
            k.read("Z", "state", z, z, "B·H·N·N_kv·1")
            k.write("dP", "intermediate", s, "B·H·N·N_kv·e")
            kernels.append(k.build(softmax_flops=intmath.mul(2, scores), op="elementwise"))

        k = KernelBuilder("ds", "backward")
        operand(k, "P", "intermediate", s, 1, "B·H·N·N_kv·e")
        just_written(k, "dP")
        k.write("dS", "intermediate", s, "B·H·N·N_kv·e")
        # P·dP, row sum, subtract, multiply: 4 FP32 ops per score
        kernels.append(k.build(softmax_flops=intmath.mul(4, scores), op="elementwise"))

        k = KernelBuilder("dq", "backward")  # dQ = dS K: [G·N × N_kv] @ [N_kv × d]
        just_written(k, "dS", _tiles(w.d))
        operand(k, "K", "input", kv, _tiles(rows), "B·H_kv·N_kv·d·e")
        k.write("dQ", "output", q, "B·H·N·d·e")
        kernels.append(k.build(matmul_flops=matmul, op="gemm"))

        k = KernelBuilder("dk", "backward")  # dK = dSᵀ Q: [N_kv × G·N] @ [G·N × d]
        operand(k, "dS", "intermediate", s, _tiles(w.d), "B·H·N·N_kv·e")
        operand(k, "Q", "input", q, _tiles(w.n_kv_), "B·H·N·d·e")
        k.write("dK", "output", kv, "B·H_kv·N_kv·d·e")
        kernels.append(k.build(matmul_flops=matmul, op="gemm"))

    return AlgorithmTraffic("standard", "algorithm0", tuple(kernels), params={"gemm_tile": GEMM_TILE})


def standard_forward(w: Workload, l2: l2m.L2 | None = None) -> AlgorithmTraffic:
    """Forward pass only; without ``l2`` the paper's view (every request reaches HBM)."""
    return standard(w, l2 or l2m.L2("off", 0.0, 1))
