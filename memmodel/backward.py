"""The backward pass as each implementation runs it: its kernels' tiles, and which kernels.

The forward kernel's tiles (:func:`memmodel.implementations.tiles`) do not carry over: a
library's backward kernel has its own launch rule. The rules, from the sources:

* ``sdpa-flash`` (FlashAttention-2's ``flash_bwd_launch_template.h``, ``run_mha_bwd_hdim*``;
  Q rows per step kBlockM × K/V rows per CTA kBlockN, 8 warps), by the head dim d runs at
  and the shared memory one block may opt into (``cudaDevAttrMaxSharedMemoryPerBlockOptin``:
  the SM's capacity less 1 KiB on A100, H100, H200, L4):

  ====  ==============================  =========================
  d     ≥ 144 KiB per block (A100, H100)  less (sm86, sm89)
  ====  ==============================  =========================
  32    128 × 128                        128 × 128
  64    128 × 128                        64 × 128
  96    64 × 128                         64 × 128
  128   64 × 128                         64 × 64
  192   64 × 64                          64 × 64
  256   64 × 64 (≥ 144 KiB)               64 × 32 (no dropout)
  ====  ==============================  =========================

  One CTA per SM: 256 threads at close to 255 registers each fill the 64 K registers.
* ``sdpa-efficient`` (CUTLASS, ``mem_eff_attention/kernels/cutlassB.h``,
  ``dispatch_cutlassB_f16_sm80``: ``_efficient_attention_backward`` launches the first
  kernel in that list whose head-dim limit (kMaxK), dropout and shared memory pass), as
  kBlockSizeI × kBlockSizeJ: 64 × 64 for d ≤ 64 (``fmha_cutlassB_f16_aligned_64x64_k64_...``,
  seen on an H200 with torch 2.11: validation/h200/final/h200-training.ncu.csv.gz); 128 × 128
  for d ≤ 128 on GPUs with ≥ 144 KiB per block (``..._128x128_k128_...``), 64 × 64 where
  less (``..._64x64_k128_...``; sm86/sm89's 128 × 64 ``k96`` kernel is not modelled: d = 96
  runs at 128 here); above d = 128 128 × 64 (``k65536``), 64 × 64 where less shared memory. With dropout only
  the ``..._dropout_...`` kernels qualify: 64 × 64 for d ≤ 64, 128 × 128 for d ≤ 128 (64 × 64
  where less shared memory), 128 × 64 above (64 × 64). (I·J)/1024 warps; one CTA per SM
  for 128 × 128. Older builds listed 128 × 128 first for d ≤ 64: the kernel name says which ran.
* ``sdpa-cudnn``: 64 Q rows per step × 128 K/V rows per CTA at d = 64 and 128. Its kernel
  names say ``64x64xD`` (``cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_
  64x64x128_1x4x1_...``), but the L2 traffic Nsight Compute measured for those kernels is that
  of each Q block loaded once per 128 K/V rows: on the smoke run (not a validation set,
  validation/h200/2026-11-30/h200-training-smoke.ncu.csv.gz) 21.5 MB at 2 × 4 heads × 512,
  d = 128, causal, where FlashAttention-2's structure requests 20.0 MB with 64 × 128 and
  32.7 MB with 64 × 64; 4.7 MB at 2 × 4 × 256, d = 64 (4.2 MB and 7.4 MB). Above d = 128
  not seen (assumed the same); one CTA per SM.
* ``paper``, ``triton``, ``fa3``: the FlashAttention-2 paper's backward (Algorithm 2) with
  the forward's blocks (:func:`memmodel.traffic.flash.fa2_backward_kernels`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .implementations import padded_head_dim
from .traffic import l2 as l2m
from .traffic.blocks import TileContext
from .traffic.flash import fa2_backward_kernels
from .traffic.flash_backward import (
    BackwardTiles,
    backward_context,
    cudnn_backward,
    cutlass_backward,
    fa2_backward,
)
from .traffic.ledger import Kernel, param

if TYPE_CHECKING:  # pragma: no cover
    from .hardware import Profile
    from .implementations import Options
    from .workload import Workload

#: implementations whose backward kernels are modelled as the library launches them
LIBRARY_BACKWARDS = ("sdpa-flash", "sdpa-efficient", "sdpa-cudnn")
_BIG_SMEM = 144 * 1024


def smem_per_block(profile: Profile | None) -> float:
    """Shared memory one block may opt into: the SM's capacity less 1 KiB (CUDA guide, per
    compute capability); an H100-class 227 KiB without a profile."""
    if profile is None:
        return 227 * 1024.0
    return float(profile.sram.capacity_per_sm_bytes) - 1024.0


def _fa2_tiles(d: int, dropout: float, smem: float) -> tuple[int, int]:
    big = smem >= _BIG_SMEM
    if d <= 32:
        return 128, 128
    if d <= 64:
        return (128, 128) if big else (64, 128)
    if d <= 96:
        return 64, 128
    if d <= 128:
        return (64, 128) if big else (64, 64)
    if d <= 192:
        return 64, 64
    return (64, 64) if big or dropout > 0 else (64, 32)


def _efficient_tiles(d: int, smem: float) -> tuple[int, int]:
    # the same sizes with dropout (the ``_dropout`` kernels): 64 × 64, 128 × 128, 128 × 64
    big = smem >= _BIG_SMEM
    if d <= 64:
        return 64, 64
    if d <= 128:
        return (128, 128) if big else (64, 64)
    return (128, 64) if big else (64, 64)


def backward_tile_rule(impl: str, d: int, *, dropout: float = 0.0, profile: Profile | None = None) -> tuple[int, int]:
    """(Q rows per step, K/V rows per CTA) of ``impl``'s backward kernel at head dim ``d``."""
    smem = smem_per_block(profile)
    p = int(padded_head_dim(impl, d))
    if impl == "sdpa-flash":
        return _fa2_tiles(p, dropout, smem)
    if impl == "sdpa-efficient":
        return _efficient_tiles(p, smem)
    if impl == "sdpa-cudnn":
        return (64, 128)
    raise ValueError(f"{impl!r} has no library backward rule")  # pragma: no cover - callers check


_SOURCES = {
    "sdpa-flash": "flash_bwd_launch_template.h",
    "sdpa-efficient": "cutlassB.h (sm80 dispatch)",
    "sdpa-cudnn": "cuDNN's L2 traffic on an H200 (its names say 64x64xD)",
}


def backward_tiles(impl: str, workload: Workload, profile: Profile | None = None) -> BackwardTiles:
    """:func:`backward_tile_rule` for every head dim of ``workload`` (a grid: per element)."""
    dropout = float(workload.dropout)
    if not workload.is_grid:
        bq, bkv = backward_tile_rule(impl, int(workload.d), dropout=dropout, profile=profile)
        return BackwardTiles(bq, bkv, 1, _SOURCES[impl])
    d = np.asarray(workload.d)
    bq = np.zeros(d.shape, dtype=np.int64)
    bkv = np.zeros(d.shape, dtype=np.int64)
    for value in np.unique(d):
        q, k = backward_tile_rule(impl, int(value), dropout=dropout, profile=profile)
        bq = np.where(d == value, q, bq)
        bkv = np.where(d == value, k, bkv)
    return BackwardTiles(bq, bkv, 1, _SOURCES[impl])


def backward_kernels(
    workload: Workload,
    profile: Profile,
    options: Options,
    forward_ctx: TileContext,
    l2: l2m.L2,
    *,
    ctas_per_sm: int | None = None,
) -> tuple[list[Kernel], dict[str, Any]]:
    """The tiled algorithm's backward kernels for ``options``' implementation, and the params
    that describe them (added to the algorithm's ``params``). ``ctas_per_sm`` overrides the
    backward kernel's occupancy (as Nsight Compute measured it)."""
    impl = options.implementation
    if options.tiled != "fa2" or impl not in LIBRARY_BACKWARDS:
        return fa2_backward_kernels(forward_ctx, l2), {"backward_tiles_from": "forward blocks (FA2 Algorithm 2)"}
    tiles = backward_tiles(impl, workload, profile)
    if ctas_per_sm is not None:
        tiles = BackwardTiles(tiles.block_q, tiles.block_kv, ctas_per_sm, tiles.source + "; CTAs/SM given")
    ctx = backward_context(workload, tiles, profile.sm_count, exec_d=padded_head_dim(impl, workload.d))
    if impl == "sdpa-flash":
        kernels = fa2_backward(workload, ctx, l2)
    elif impl == "sdpa-efficient":
        # dK, dV stay in registers where the head dim fits the Q block (per row of a grid)
        fit = (np.asarray(padded_head_dim(impl, workload.d)) <= np.asarray(tiles.block_q)) & (
            workload.element_bytes == 2
        )
        in_rf: Any = bool(fit) if fit.ndim == 0 else fit
        kernels = cutlass_backward(workload, ctx, tiles, l2, output_in_registers=in_rf)
    else:
        kernels = cudnn_backward(workload, ctx, l2)
    params = tiles.to_params()
    params["backward_block_q"] = param(ctx.blocks.block_q)
    params["backward_block_kv"] = param(ctx.blocks.block_kv)
    params["backward_concurrent_ctas"] = param(ctx.concurrent)
    return kernels, params
