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
rate; cuDNN overlaps its exponentials with the products, faster than the serial model) is a
measured per-implementation efficiency, ``implementations.<name>.efficiency`` in the profile,
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
