"""Standard attention: FlashAttention paper (Dao et al., 2022) Algorithm 0, three kernels.

1. ``qk``: S = QKᵀ      — read Q, K; write S (N × N_kv per head) to HBM.
2. ``softmax``: P = softmax(S) — read S; write P.
3. ``pv``: O = PV       — read P, V; write O.

Counted: every HBM read and write the algorithm states, each once. Not counted: the 1/√d
scale (folded into the matmul), and re-reads inside a matmul (a cuBLAS GEMM tiles Q/K on
chip; its HBM traffic for these shapes is close to one pass over each operand).
With GQA each query head's matmul reads its K/V head (B·H reads, not B·H_kv).
"""

from __future__ import annotations

from .. import intmath
from ..workload import Workload
from .ledger import AlgorithmTraffic, Kernel, Transfer


def standard_forward(w: Workload) -> AlgorithmTraffic:
    e = w.element_bytes
    bh = intmath.mul(w.batch, w.heads)
    qo = intmath.mul(bh, w.n, w.d, e)  # Q or O: B·H·N·d·e
    kv = intmath.mul(bh, w.n_kv_, w.d, e)  # K or V as read per query head: B·H·N_kv·d·e
    s = intmath.mul(bh, w.n, w.n_kv_, e)  # S or P: B·H·N·N_kv·e
    scores = intmath.mul(bh, w.n, w.n_kv_)  # elements of S
    matmul = intmath.mul(2, scores, w.d)  # 2·N·N_kv·d per head

    def t(kernel: str, tensor: str, role: str, direction: str, n: intmath.IntLike, formula: str) -> Transfer:
        return Transfer(kernel, tensor, role, "hbm", direction, n, formula)

    qk = Kernel(
        "qk",
        (
            t("qk", "Q", "input", "read", qo, "B·H·N·d·e"),
            t("qk", "K", "input", "read", kv, "B·H·N_kv·d·e"),
            t("qk", "S", "intermediate", "write", s, "B·H·N·N_kv·e"),
        ),
        matmul_flops=matmul,
    )
    softmax = Kernel(
        "softmax",
        (
            t("softmax", "S", "intermediate", "read", s, "B·H·N·N_kv·e"),
            t("softmax", "P", "intermediate", "write", s, "B·H·N·N_kv·e"),
        ),
        # row max, subtract, row sum, divide: 4 FP32 ops per score; exp counted apart
        softmax_flops=intmath.mul(4, scores),
        exp_ops=scores,
    )
    pv = Kernel(
        "pv",
        (
            t("pv", "P", "intermediate", "read", s, "B·H·N·N_kv·e"),
            t("pv", "V", "input", "read", kv, "B·H·N_kv·d·e"),
            t("pv", "O", "output", "write", qo, "B·H·N·d·e"),
        ),
        matmul_flops=matmul,
    )
    return AlgorithmTraffic("standard", "algorithm0", (qk, softmax, pv), params={})
