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
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import intmath
from .workload import Workload

#: how the convention is stated in the output
CONVENTION = "FlashAttention benchmarks: forward 4·N·N_kv·d per head (causal: half), backward 2.5 × forward"


def convention_flops(workload: Workload, *, backward: bool = False) -> dict[str, Any]:
    """The convention's FLOPs for ``workload``: ``forward``, ``backward`` (0 without),
    ``total``; exact integers for scalars (the causal half rounds down), float arrays for grids."""
    w = workload
    full = intmath.mul(4, w.batch, w.heads, w.n, w.n_kv_, w.d)
    if intmath.is_array(full):
        fwd: Any = np.asarray(full, dtype=np.float64) * (0.5 if w.causal else 1.0)
        bwd: Any = fwd * 2.5 if backward else np.zeros_like(fwd)
        return {"forward": fwd, "backward": bwd, "total": fwd + bwd, "rule": CONVENTION}
    fwd = int(full) // 2 if w.causal else int(full)
    bwd = fwd * 5 // 2 if backward else 0
    return {"forward": fwd, "backward": bwd, "total": fwd + bwd, "rule": CONVENTION}
