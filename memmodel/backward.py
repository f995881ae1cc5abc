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
  kBlockSizeI × kBlockSizeJ: 64 × 64 for d ≤ 64; 128 × 128 for d ≤ 128 on GPUs with ≥ 144 KiB
  per block, 64 × 64 where less (sm86/sm89's 128 × 64 ``k96`` kernel is not modelled: d = 96
  runs at 128 here); above d = 128 128 × 64, 64 × 64 where less shared memory. With dropout
  only the ``..._dropout_...`` kernels qualify: the same sizes. (I·J)/1024 warps; one CTA per
  SM for 128 × 128. The kernel name Nsight Compute records says which ran.
* ``sdpa-cudnn``: 64 Q rows per step × 128 K/V rows per CTA at d = 64 and 128, one CTA per SM.
  Its kernel names say ``64x64xD``, but the L2 traffic measured for them is that of each Q
  block loaded once per 128 K/V rows (docs/model.md, "Backward tiles"). Above d = 128 assumed
  the same.
* ``fa3`` (FlashAttention-3's Hopper backward as ``flash_attn.cute`` launches it,
  ``_tile_size_bwd_sm90`` in ``flash_attn/cute/interface.py``; a CTA per K/V block, two
  consumer warpgroups and a producer, one CTA per SM): 128 × 128 for d ≤ 64; 64 × 128 for
  d ≤ 96; 80 × 128 for d ≤ 128 (64 × 128 causal); 64 × 96 for d ≤ 192; 64 × 48 at d = 256.
  Its kernels are FlashAttention-2's (a dO·O preprocess, dQ accumulated in fp32 by atomic
  adds, a conversion); with GQA every query head adds its dK, dV into fp32 accumulators of
  its K/V head, converted after (:func:`memmodel.traffic.flash_backward.fa3_backward`).
* ``fa4`` (FlashAttention-4's Blackwell backward, ``_flash_attn_bwd`` in
  ``flash_attn/cute/interface.py`` and ``flash_bwd_sm100.py``): 128 × 128 at every head dim,
  one CTA per K/V block, CTA pairs (2-CTA tcgen05 MMA) from d = 128, each CTA of a pair loading
  half of the Q and dO tiles and adding half of the pair's one dQ partial; FA3's kernels under
  FA4's names (:func:`memmodel.traffic.flash_backward.fa4_backward`).
* ``ck`` (CK/aiter): aiter's assembly backward (``fmha_v3_bwd`` in ``csrc/cpp_itfs/mha_bwd.cu``;
  fp16/bf16, no dropout or bias, head dims padded to 64, 128 or 192; tiles from
  ``hsa/<arch>/fmha_v3_bwd/fmha_bwd_dqdkdv.csv``, Q rows per step ts_qo × K/V rows per
  workgroup ts): 32 × 192 for d ≤ 64; 16 × 192 for d ≤ 128 on gfx942, 16 × 256 on gfx950;
  16 × 64 for d ≤ 192. Elsewhere (d = 256, dropout) CK tile's backward
  (``fmha_bwd.py``, ``get_fmha_bwd_dq_dk_dv_tile_ppl_dict_from_dtype``): 32 × 128 for d ≤ 64,
  16 × 128 for d ≤ 128, 16 × 64 above. 256 threads (4 waves) a workgroup, one per K/V block,
  batch and query head. Its kernels are FlashAttention-2's: a dO·O pre-kernel (``odo``), the
  dQ/dK/dV kernel adding dQ into an fp32 accumulator (the ``a32`` kernels; ``a16`` ones
  accumulate in bf16, not modelled), a dQ conversion; with GQA dK, dV per query head summed
  over the group by ``at::sum_out`` (``csrc/py_itfs_cu/asm_mha_bwd.cu``), FlashAttention-2's
  own structure (:func:`ck_backward`).
* ``paper``, ``triton``: the FlashAttention-2 paper's backward (Algorithm 2) with
  the forward's blocks (:func:`memmodel.traffic.flash.fa2_backward_kernels`).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import numpy as np

from .frozen import frozen
from .implementations import ck_asm_backward, fa4_backward_pair, padded_head_dim, per_element
from .traffic.blocks import TileContext
from .traffic.facts import BackwardFacts
from .traffic.flash import fa2_backward_kernels
from .traffic.flash_backward import (
    BackwardTiles,
    backward_context,
    ck_backward,
    cudnn_backward,
    cutlass_backward,
    fa2_backward,
    fa3_backward,
    fa4_backward,
)
from .traffic.ledger import Kernel

if TYPE_CHECKING:  # pragma: no cover
    from .hardware import Profile
    from .options import Options
    from .plan import TiledPlan
    from .workload import Workload

#: implementations whose backward kernels are modelled as the library launches them
LIBRARY_BACKWARDS = ("sdpa-flash", "sdpa-efficient", "sdpa-cudnn", "fa3", "fa4", "ck")
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


def fa3_backward_tiles(d: int, causal: bool) -> tuple[int, int]:
    """FlashAttention-3's backward tiles (Q rows per step, K/V rows per CTA) at the head dim
    its kernel runs (module docstring)."""
    if d <= 64:
        return 128, 128
    if d <= 96:
        return 64, 128
    if d <= 128:
        return (64, 128) if causal else (80, 128)
    if d <= 192:
        return 64, 96
    return 64, 48


def ck_backward_tiles(d: int, dropout: float = 0.0, arch: str | None = None) -> tuple[int, int]:
    """CK/aiter's backward tiles (Q rows per step, K/V rows per workgroup) at head dim ``d``
    on ``arch`` (cdna3: gfx942, cdna4: gfx950; module docstring)."""
    if ck_asm_backward(d, arch, dropout):  # aiter's assembly kernels
        if d <= 64:
            return 32, 192
        if d <= 128:
            return (16, 192) if arch == "cdna3" else (16, 256)
        return 16, 64
    if d <= 64:  # CK tile
        return 32, 128
    return (16, 128) if d <= 128 else (16, 64)


def backward_tile_rule(
    impl: str, d: int, *, dropout: float = 0.0, profile: Profile | None = None, causal: bool = False
) -> tuple[int, int]:
    """(Q rows per step, K/V rows per CTA) of ``impl``'s backward kernel at head dim ``d``."""
    smem = smem_per_block(profile)
    p = int(padded_head_dim(impl, d))
    if impl == "sdpa-flash":
        return _fa2_tiles(p, dropout, smem)
    if impl == "sdpa-efficient":
        return _efficient_tiles(p, smem)
    if impl == "sdpa-cudnn":
        return (64, 128)
    if impl == "fa3":
        return fa3_backward_tiles(p, causal)
    if impl == "fa4":
        return 128, 128  # flash_attn.cute _flash_attn_bwd on SM100: m_block_size = n_block_size = 128
    if impl == "ck":
        return ck_backward_tiles(int(d), dropout, getattr(profile, "arch_family", None))
    raise ValueError(f"{impl!r} has no library backward rule")  # pragma: no cover - callers check


_SOURCES = {
    "sdpa-flash": "flash_bwd_launch_template.h",
    "sdpa-efficient": "cutlassB.h (sm80 dispatch)",
    "sdpa-cudnn": "cuDNN's L2 traffic on an H200 (its names say 64x64xD)",
    "fa3": "flash_attn.cute _tile_size_bwd_sm90",
    "fa4": "flash_attn.cute _flash_attn_bwd, SM100 (128 x 128; CTA pairs from d = 128)",
    "ck": "aiter hsa/<arch>/fmha_v3_bwd/fmha_bwd_dqdkdv.csv (CK tile fmha_bwd.py where no assembly kernel runs)",
}


def backward_tiles(impl: str, workload: Workload, profile: Profile | None = None) -> BackwardTiles:
    """:func:`backward_tile_rule` for every head dim of ``workload`` (a grid: per element)."""
    dropout, causal = float(workload.dropout), bool(workload.causal)
    if not workload.is_grid:
        bq, bkv = backward_tile_rule(impl, int(workload.d), dropout=dropout, profile=profile, causal=causal)
        return BackwardTiles(bq, bkv, 1, _SOURCES[impl])
    d = np.asarray(workload.d)
    bq = np.zeros(d.shape, dtype=np.int64)
    bkv = np.zeros(d.shape, dtype=np.int64)
    for value in np.unique(d):
        q, k = backward_tile_rule(impl, int(value), dropout=dropout, profile=profile, causal=causal)
        bq = np.where(d == value, q, bq)
        bkv = np.where(d == value, k, bkv)
    return BackwardTiles(bq, bkv, 1, _SOURCES[impl])


@frozen
class BackwardPlan:
    """A library's own backward kernels: its tiles, their tile context, and (CUTLASS) where
    dK and dV stay in registers."""

    tiles: BackwardTiles
    tile: TileContext
    output_in_registers: Any = False


def backward_plan(
    workload: Workload, profile: Profile, options: Options, *, ctas_per_sm: int | None = None
) -> BackwardPlan | None:
    """The backward kernels' plan for ``options``' implementation on ``workload`` (as the kernel
    sees it); None where the FA2 paper's backward with the forward's blocks runs.
    ``ctas_per_sm`` overrides the backward kernel's occupancy (as Nsight Compute measured it)."""
    impl = options.implementation
    if options.tiled != "fa2" or impl not in LIBRARY_BACKWARDS:
        return None
    tiles = backward_tiles(impl, workload, profile)
    if ctas_per_sm is not None:
        tiles = BackwardTiles(tiles.block_q, tiles.block_kv, ctas_per_sm, tiles.source + "; CTAs/SM given")
    exec_d = padded_head_dim(impl, workload.d)
    ctx = backward_context(workload, tiles, profile.sm_count, exec_d=exec_d)
    if impl == "fa4":
        # its CTA pairs from d = 128 share each Q and dO tile load and the dQ partial
        pair = per_element(fa4_backward_pair, exec_d)
        if np.any(np.asarray(pair) > 1):
            ctx = dataclasses.replace(ctx, cta_pair=pair)
    in_rf: Any = False
    if impl == "sdpa-efficient":
        # dK, dV stay in registers where the head dim fits the Q block (per row of a grid)
        fit = (np.asarray(exec_d) <= np.asarray(tiles.block_q)) & (workload.element_bytes == 2)
        in_rf = bool(fit) if fit.ndim == 0 else fit
    return BackwardPlan(tiles, ctx, in_rf)


def backward_kernels(plan: TiledPlan) -> tuple[list[Kernel], BackwardFacts]:
    """The tiled algorithm's backward kernels as ``plan`` says, and their tiles."""
    w, l2, impl = plan.workload, plan.l2, plan.options.implementation
    if plan.spec is not None and plan.spec.packs_gqa:
        w = plan.given  # FA4 packs GQA in its forward only (its backward: pack_gqa = False)
    bw = plan.backward
    if bw is None:
        return fa2_backward_kernels(plan.tile, l2), BackwardFacts("forward blocks (FA2 Algorithm 2)")
    if impl == "sdpa-flash":
        kernels = fa2_backward(w, bw.tile, l2)
    elif impl == "sdpa-efficient":
        kernels = cutlass_backward(w, bw.tile, bw.tiles, l2, output_in_registers=bw.output_in_registers)
    elif impl == "fa3":
        kernels = fa3_backward(w, bw.tile, l2)
    elif impl == "fa4":
        kernels = fa4_backward(w, bw.tile, l2)
    elif impl == "ck":
        kernels = ck_backward(w, bw.tile, l2)
    else:
        kernels = cudnn_backward(w, bw.tile, l2)
    found = BackwardFacts(
        bw.tiles.source, bw.tile.blocks.block_q, bw.tile.blocks.block_kv, bw.tiles.ctas_per_sm, bw.tile.concurrent
    )
    return kernels, found
