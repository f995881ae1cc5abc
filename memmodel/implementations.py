"""The attention implementations memmodel knows, and what the time model needs from each.

The traffic of a tiled kernel follows from its tiles and grid order; its *time* also depends
on which tensor-core instructions it issues. On Hopper, warp-group ``wgmma`` reaches the
dense peak cuBLAS shows, while the warp-level ``mma.sync`` of Ampere-era kernels reaches
less (measured by ``memmodel calibrate`` as ``compute.mma_sync.<dtype>``). Which one a
library uses is a fact about its code, kept here with where it shows:

* ``sdpa-flash``: PyTorch's FlashAttention-2 kernels are its sm80 code path, built on
  ``mma.sync`` (SM80 MMA atoms) and run unchanged on sm90 (their names carry no sm90 tag;
  FlashAttention-3 is the Hopper rewrite, Shah et al. 2024, arXiv:2407.08608, §1).
* ``sdpa-efficient``: CUTLASS's memory-efficient kernels, named ``..._sm80`` on an H200
  (validation/h200/final/h200-default.ncu.csv), also ``mma.sync``.
* ``sdpa-cudnn``: cuDNN's fused attention, built for the GPU it runs on (``wgmma`` on sm90).
* ``triton``: memmodel's own Triton kernel; Triton emits ``wgmma`` for ``tl.dot`` on sm90.

What no instruction class explains (CUTLASS's kernel runs at about half the ``mma.sync``
rate; cuDNN, and our Triton kernel at d = 64, overlap exponentials with the products, faster
than the serial model) is a measured per-implementation efficiency, ``implementations.<name>.efficiency`` in the profile,
by head dimension, from ``memmodel calibrate`` on reference shapes that are not validation
cases. Without it, an implementation is modelled from its instructions alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from .hardware import IMPLEMENTATION_NAMES


@dataclass(frozen=True)
class Implementation:
    name: str
    description: str
    #: "mma_sync" or "peak" (the dtype's dense tensor-core peak)
    instructions: str


IMPLEMENTATIONS: dict[str, Implementation] = {
    "sdpa-flash": Implementation("sdpa-flash", "PyTorch SDPA, flash backend (FlashAttention-2)", "mma_sync"),
    "sdpa-cudnn": Implementation("sdpa-cudnn", "PyTorch SDPA, cuDNN backend", "peak"),
    "sdpa-efficient": Implementation("sdpa-efficient", "PyTorch SDPA, memory-efficient backend (CUTLASS)", "mma_sync"),
    "triton": Implementation("triton", "memmodel's Triton FlashAttention-2 kernel", "peak"),
}
assert tuple(IMPLEMENTATIONS) == IMPLEMENTATION_NAMES


def get(name: str | None) -> Implementation | None:
    return None if name is None else IMPLEMENTATIONS[name]


# Our Triton kernel's defaults per head dim, (block_q, block_kv, num_warps, num_stages),
# fp16/bf16. Tuned on an H200 (triton 3.6, batch 4, 16 heads, N 4096;
# benchmarks/NOTES-triton.md): the fastest config of the sweep, except d=128 causal, where
# 128×128 spills registers and 128×64 is as fast. memmodel.gpu.triton_fa launches with these.
TRITON_DEFAULTS: dict[int, tuple[int, int, int, int]] = {
    16: (128, 64, 4, 3),
    32: (128, 64, 4, 3),
    64: (128, 64, 8, 3),
    128: (128, 128, 8, 3),
    256: (128, 64, 8, 2),
}
TRITON_DEFAULTS_CAUSAL: dict[int, tuple[int, int, int, int]] = {**TRITON_DEFAULTS, 128: (128, 64, 8, 3)}


def tiles(impl: str, d: int, causal: bool, block_q: int | None = None, block_kv: int | None = None) -> tuple[int, int]:
    """(B_r, B_c) an implementation runs with at head dimension ``d`` (given blocks win).

    PyTorch's FlashAttention-2 (sm80 kernels, also on sm90): 128×128 for d ≤ 64, 128×64 for
    d ≤ 128 (its kernel traits), 128×32 above; memory-efficient (CUTLASS): 64×64 (its kernel
    name); cuDNN: 128×128 assumed; our Triton kernel: its defaults for the smallest head dim
    it pads ``d`` to (fp16/bf16).
    """
    if block_q and block_kv:
        return block_q, block_kv
    if impl == "sdpa-efficient":
        bq, bkv = 64, 64
    elif impl == "sdpa-cudnn":
        bq, bkv = 128, 128
    elif impl == "triton":
        table = TRITON_DEFAULTS_CAUSAL if causal else TRITON_DEFAULTS
        padded = min((k for k in table if k >= d), default=max(table))
        bq, bkv = table[padded][:2]
    elif d <= 64:
        bq, bkv = 128, 128
    elif d <= 128:
        bq, bkv = 128, 64
    else:
        bq, bkv = 128, 32
    return block_q or bq, block_kv or bkv


def kv_order(impl: str | None) -> str:
    """How a forward CTA walks its K/V blocks: FlashAttention-2 from the diagonal down
    (flash_fwd_kernel.h), our Triton kernel from block 0 up."""
    return "forward" if impl == "triton" else "reverse"
