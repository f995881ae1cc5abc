"""The attention implementations memmodel knows: what each real kernel does (tiles, K/V order,
instruction class, occupancy) and which one PyTorch runs (:func:`default_for`);
:func:`memmodel.options.options_for` turns them into model options. Each implementation's
instructions and tiles are facts about its library's code; where each shows: docs/implementations.md.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import numpy as np

from . import intmath
from .errors import WorkloadError
from .frozen import frozen
from .traffic import fmha
from .workload import DTYPE_BYTES

#: how long the GPU has been busy when a kernel runs (:data:`memmodel.timing.CLOCKS` says more)
CLOCK_MODES = ("benchmark", "boost", "sustained")

if TYPE_CHECKING:  # pragma: no cover
    from .hardware import Profile
    from .workload import Workload

#: compute capabilities FA4's SM100 kernels run on (``arch // 10 in [10, 11]`` in ``interface.py``)
FA4_CAPABILITY = (10.0, 11.0)
#: the largest head dim of cuDNN's SM100 knob-7 forward read (``..._128x128x{64,128}``): its
#: 256-row tiles and FA4's design (:func:`cudnn_tiles`, :func:`forward_design`) stop there
CUDNN_SM100_MAX_D = 128

#: Tiled variants: FA1 (outer loop over K/V, a CTA per head) and FA2 (outer loop over Q).
TILED_VARIANTS = ("fa1", "fa2")

#: the flashinfer commit whose Hopper MLA decode (``include/flashinfer/attention/mla_hopper.cuh``,
#: ``MLAPlan`` in ``include/flashinfer/attention/scheduler.cuh``) ``flashmla`` models
FLASHINFER_COMMIT = "fb28d7242"
#: the FlashMLA commit read for where DeepSeek's kernel differs (``csrc/api/dense_decode.h``,
#: ``csrc/sm90/decode/dense/``, ``csrc/smxx/decode/combine/``)
FLASHMLA_COMMIT = "9241ae3"
#: MLA's absorbed decode shape: one latent K/V head of kv_lora_rank (512) + qk_rope_head_dim (64)
#: elements, V its first 512 (the head dims the MLA decode kernels are built for)
MLA_D, MLA_DV = 576, 512

#: the flash-attn v1 release whose kernels ``fa1`` models (``csrc/flash_attn/src/fmha_*``,
#: commit 6d48e14a6c2f551db96f0badc658a6279a929df3, 2023-07-17; docs/implementations.md)
FA1_RELEASE = "flash-attn v1.0.9"
#: the flash-attention commit whose CuTe-DSL Blackwell kernels ``fa4`` models
#: (``flash_attn/cute/flash_fwd_sm100.py``, ``flash_bwd_sm100.py``, ``interface.py``; docs/implementations.md)
FA4_COMMIT = "0251105a2fb19d2957484b7f023cd8c115286ced"


@frozen
class Implementation:
    """One fused attention kernel as it runs: its tiles, instruction class and what it supports."""

    name: str
    description: str
    #: tensor-core instructions: "mma_sync" (warp-level, Ampere-era) or "native" (the
    #: architecture's fastest: wgmma on Hopper, tcgen05 on Blackwell, mma.sync on Ampere/Ada,
    #: MFMA on CDNA), at the dtype's dense peak
    instructions: str
    #: exponentials and rescaling of one tile overlap the products of another (FA3, cuDNN)
    softmax_overlap: bool = False
    kv_order: str = "reverse"
    #: head dims the kernels are built for; d runs at the smallest one ≥ d (empty: any d)
    head_dims: tuple[int, ...] = ()
    #: largest head dim the implementation runs (None: any)
    max_head_dim: int | None = None
    #: dtypes it runs
    dtypes: tuple[str, ...] = ("fp16", "bf16")
    #: a real kernel memmodel can run and time (validate, calibrate)
    measurable: bool = True
    #: compute capabilities it runs on, as (lowest, highest) major.minor pairs (None: any)
    capability: tuple[float, float] | None = None
    #: decoding with GQA (one query row per head), the query heads of a group are packed as
    #: the rows of one Q block of their K/V head (FlashAttention-2's "seqlenq_ngroups_swapped")
    packs_gqa_decode: bool = False
    #: splits K/V across CTAs for any sequence length when batch × heads × Q blocks leave the
    #: SMs under-filled (FlashAttention-2's forward: ``set_params_splitkv`` in ``mha_fwd``),
    #: not only when decoding
    splits_prefill: bool = False
    #: launches it makes before each pass's attention kernel besides it (cuDNN: a memset,
    #: listed by PyTorch's profiler on an H200; none before a decode's split kernel), each costing a
    #: launch overhead
    extra_launches: int = 0
    #: whose measured causal re-read curves its causal forward reads (``traffic.l2.CAUSAL_CURVES``):
    #: "fa2" (grid Q block fastest, then batch, then head; each CTA walks K/V from its diagonal
    #: down: ``memory.l2.causal_reuse_d*``), "cudnn" (one head's K/V live at a time, probe 11:
    #: ``memory.l2.cudnn_causal_reuse_d*``), or None (the reuse-window rule)
    causal_schedule: str | None = None
    #: the tiled variant its kernels are (:data:`TILED_VARIANTS`): "fa2" (outer loop over Q
    #: blocks) or "fa1" (outer loop over K/V blocks: flash-attn v1)
    variant: str = "fa2"
    #: its tiles must fit Algorithm 1's Q + K + V footprint, (B_r + 2·B_c)·d·e, in an SM's
    #: shared memory; False: the kernel stages them its own way and the footprint is not checked
    #: (CK/aiter: Q in registers, K/V through the LDS in slices, :func:`ck_tiles`)
    sram_footprint: bool = True
    #: with a sliding window its forward masks every block it visits element by element, not
    #: only those the window's edges cut (FlashAttention-2: ``Mask::apply_mask`` runs whenever
    #: ``Is_local``, in ``flash_fwd_kernel.h``'s main loop too); the cost is the profile's
    #: ``local_block_cost``
    masks_every_local_block: bool = False
    #: with GQA the query heads of a group are packed as the rows of one Q block of their K/V
    #: head at every sequence length, not only decoding (FA4: ``pack_gqa`` defaults to
    #: ``qhead_per_kvhead > 1`` in ``flash_attn/cute/interface.py``); causal grids excepted here
    packs_gqa: bool = False
    #: part of the forward's exponentials are computed by a polynomial on the FMA pipe instead of
    #: the special-function units, and the softmax, correction and MMA warps issue to different
    #: pipes at once (:func:`fa4_exp_emulated_share`)
    exp_emulation: bool = False
    #: the forward rescales O only where a row's maximum grew past a threshold (FA4's correction
    #: warpgroup, ``rescale_threshold``): the per-block rescale of O is not done
    lazy_rescale: bool = False
    #: splits K/V across CTAs when decoding (FlashAttention-2's heuristic); False: one split
    #: unless ``--splits`` says otherwise (FA4's ``flash_attn_func``: ``num_splits=1``)
    splits_kv: bool = True
    #: whose rule picks the split count of a decode (one query token): "fa2" (FlashAttention-2's
    #: wave-efficiency heuristic, :func:`~memmodel.traffic.decode.num_splits_heuristic`) or
    #: "cudnn" (cuDNN's decode grid as measured, :func:`~memmodel.traffic.decode.cudnn_decode_splits`)
    decode_splits: str = "fa2"
    #: (d, d_v) pairs of a value head dim apart from Q's it runs (None: any pair within its head
    #: dims; (): V at Q's head dim only)
    value_head_dims: tuple[tuple[int, int], ...] | None = ()
    #: whose measured rates (efficiency, CTA costs) its fused kernels take, by a stated rule,
    #: where the profile measured none of its own (None: its own)
    rates_from: str | None = None
    #: its kernels run the training step (False: forward only; ``--backward`` is refused)
    trains: bool = True
    #: FP8 K/V caches (``Workload.kv_dtype``) its kernels read under 16-bit Q and O, converting
    #: each element in the kernel (:data:`KV_DEQUANT_FLOPS`); empty: none (:func:`kv_cache_path`)
    kv_dtypes: tuple[str, ...] = ()
    #: reads a paged KV cache (``Workload.page_size``) with kernels of its own, whose ledger
    #: :mod:`memmodel.traffic.paged` builds ("any": page sizes of any length; "pow2-16": powers of
    #: two from 16, the tile a Triton kernel loads per page); "" none: refused with a page size
    paged: str = ""
    #: runs only a paged KV cache (FlashInfer's paged wrappers: refused without a page size)
    paged_only: bool = False
    #: ((lowest, highest) compute capability, implementation, largest head dim): on those GPUs its
    #: 16-bit forward kernel up to that head dim is that implementation's design and takes its
    #: figures where the profile measured none of its own there (:func:`forward_design`; cuDNN on
    #: Blackwell: FA4's, at d ≤ 128)
    forward_design: tuple[tuple[float, float], str, int] | None = None


IMPLEMENTATIONS: dict[str, Implementation] = {
    "sdpa-flash": Implementation(
        "sdpa-flash",
        "PyTorch SDPA, flash backend (FlashAttention-2)",
        "mma_sync",
        head_dims=(32, 64, 96, 128, 192, 256),
        max_head_dim=256,
        capability=(8.0, 12.1),
        packs_gqa_decode=True,
        splits_prefill=True,
        causal_schedule="fa2",
        masks_every_local_block=True,
    ),
    "sdpa-cudnn": Implementation(
        "sdpa-cudnn",
        "PyTorch SDPA, cuDNN backend",
        "native",
        softmax_overlap=True,
        head_dims=(64, 128, 192, 256),
        max_head_dim=256,
        dtypes=("fp16", "bf16", "fp8"),
        capability=(8.0, 12.1),
        packs_gqa_decode=True,
        decode_splits="cudnn",
        extra_launches=1,
        causal_schedule="cudnn",
        value_head_dims=None,
        forward_design=(FA4_CAPABILITY, "fa4", CUDNN_SM100_MAX_D),
    ),
    "sdpa-efficient": Implementation(
        "sdpa-efficient",
        "PyTorch SDPA, memory-efficient backend (CUTLASS)",
        "mma_sync",
        head_dims=(64, 128),
        dtypes=("fp32", "fp16", "bf16"),
        capability=(5.0, 12.1),
        value_head_dims=None,
        # one CTA a Q block walks every key: no split-KV, no combine (measured on the H200: a
        # decode of 4096 keys runs one fmha_cutlassF kernel, validation/h200/final/h200-calls-check-cupti)
        splits_kv=False,
    ),
    "triton": Implementation(
        "triton",
        "memmodel's Triton FlashAttention-2 kernel",
        "native",
        kv_order="forward",
        head_dims=(16, 32, 64, 128, 256),
        max_head_dim=256,
    ),
    "fa3": Implementation(
        "fa3",
        "FlashAttention-3 (Hopper: wgmma, softmax overlapped with the products)",
        "native",
        softmax_overlap=True,
        head_dims=(64, 96, 128, 192, 256),
        max_head_dim=256,
        dtypes=("fp16", "bf16", "fp8"),
        capability=(9.0, 9.0),
        packs_gqa_decode=True,
        value_head_dims=((192, 128),),
    ),
    "fa4": Implementation(
        "fa4",
        "FlashAttention-4 (Blackwell: tcgen05 MMA into tensor memory, warp-specialised, part of exp2 emulated)",
        "native",
        softmax_overlap=True,
        head_dims=(*range(16, 129, 16), 256),
        max_head_dim=256,
        dtypes=("fp16", "bf16", "fp8"),
        measurable=False,
        capability=FA4_CAPABILITY,
        packs_gqa_decode=True,
        packs_gqa=True,
        exp_emulation=True,
        lazy_rescale=True,
        splits_kv=False,
    ),
    "fa1": Implementation(
        "fa1",
        f"FlashAttention-1, {FA1_RELEASE}'s fmha kernels (mma.sync; a CTA per batch × head × split, "
        "16 query rows a step)",
        "mma_sync",
        head_dims=(32, 64, 128),
        max_head_dim=128,
        measurable=False,
        capability=(7.5, 9.0),
        variant="fa1",
    ),
    "ck": Implementation(
        "ck",
        "AMD CK/aiter FMHA (aiter's fmha_v3 assembly kernels on gfx942/gfx950; CK tile kernels elsewhere)",
        "native",
        head_dims=(32, 64, 128, 256),
        max_head_dim=256,
        dtypes=("fp16", "bf16", "fp8"),
        measurable=False,
        sram_footprint=False,
    ),
    "flashinfer": Implementation(
        "flashinfer",
        "FlashInfer's paged-KV wrappers (BatchDecodeWithPagedKVCacheWrapper: CUDA-core decode kernel, split-KV "
        "and merge; BatchPrefillWithPagedKVCacheWrapper: FA3-style on sm90, FA2-style elsewhere)",
        "native",
        head_dims=(64, 128, 256),
        max_head_dim=256,
        capability=(8.0, 12.1),
        splits_kv=False,
        paged="any",
        paged_only=True,
        kv_dtypes=("fp8", "fp8_e5m2"),
    ),
    "flex": Implementation(
        "flex",
        "FlexAttention (torch.nn.attention.flex_attention compiled: one Triton template kernel; flex_decoding "
        "below 128 query rows; paged through PagedAttention's block mask)",
        "native",
        head_dims=(16, 32, 64, 128, 256),
        max_head_dim=256,
        dtypes=("fp32", "fp16", "bf16"),
        capability=(8.0, 12.1),
        splits_kv=False,
        paged="pow2-16",
    ),
    "paper": Implementation(
        "paper",
        "the FlashAttention paper's algorithm (Algorithm 1's blocks, the dtype's peak)",
        "native",
        dtypes=("fp32", "tf32", "fp16", "bf16", "fp8"),
        measurable=False,
        kv_dtypes=("fp8", "fp8_e5m2"),
        value_head_dims=None,
    ),
    "flashmla": Implementation(
        "flashmla",
        f"MLA decode in the absorbed form: FlashInfer's Hopper kernel (BatchMLAPagedAttentionWrapper, "
        f"flashinfer {FLASHINFER_COMMIT[:9]}: one persistent cooperative kernel, 64 query rows of heads × tokens per CTA, "
        "64-token K/V tiles, its own split scheduler, the merge in the same launch)",
        "native",
        softmax_overlap=True,
        head_dims=(MLA_D,),
        max_head_dim=MLA_D,
        capability=(9.0, 9.0),
        splits_kv=False,
        value_head_dims=((MLA_D, MLA_DV),),
        rates_from="fa3",
        trains=False,
    ),
    "sdpa-math": Implementation(
        "sdpa-math",
        "PyTorch SDPA, math fallback (Q, K, V cast to fp32, K and V copied to every query head, "
        "fp32 products and softmax, O cast back)",
        "native",
        dtypes=("fp32", "fp16", "bf16"),
        sram_footprint=False,
        splits_kv=False,
        value_head_dims=None,
        trains=False,
    ),
}
#: Kernels ``memmodel validate`` runs: standard attention in eager PyTorch and the measurable ones
CASE_IMPLEMENTATIONS: tuple[str, ...] = ("standard", *(n for n, i in IMPLEMENTATIONS.items() if i.measurable))
#: What ``--impl`` accepts: ``auto`` is the kernel PyTorch would run (:func:`default_for`)
CHOICES: tuple[str, ...] = ("auto", *IMPLEMENTATIONS)


def get(name: str | None) -> Implementation | None:
    return None if name is None else IMPLEMENTATIONS[name]


# Our Triton kernel's defaults per head dim, (block_q, block_kv, num_warps, num_stages),
# fp16/bf16, tuned on an H200 (docs/implementations.md); memmodel.gpu.triton_fa launches with these.
TRITON_DEFAULTS: dict[int, tuple[int, int, int, int]] = {
    16: (128, 64, 4, 3),
    32: (128, 64, 4, 3),
    64: (128, 64, 8, 3),
    128: (128, 128, 8, 3),
    256: (128, 64, 8, 2),
}
TRITON_DEFAULTS_CAUSAL: dict[int, tuple[int, int, int, int]] = {**TRITON_DEFAULTS, 128: (128, 64, 8, 3)}


def padded_head_dim(impl: str | None, d: Any) -> Any:
    """The head dim ``impl``'s kernel runs at for ``d``: the smallest of its built head dims
    ≥ d (FlashAttention-2 runs d = 80 at 96), ``d`` itself past them or for ``paper``."""
    spec = get(impl)
    if spec is None or not spec.head_dims:
        return d
    arr = np.asarray(d)
    out = arr.copy()
    for size in sorted(spec.head_dims, reverse=True):
        out = np.where(arr <= size, size, out)
    return int(out) if out.ndim == 0 else out.astype(np.int64)


def _smem_per_sm(profile: Profile | None) -> float:
    return float(profile.sram.capacity_per_sm_bytes) if profile is not None else 228 * 1024.0


def tiles(
    impl: str,
    d: int,
    causal: bool,
    block_q: int | None = None,
    block_kv: int | None = None,
    *,
    dropout: float = 0.0,
    profile: Profile | None = None,
    n_kv: int | None = None,
    dtype: str = "bf16",
    local: bool = False,
) -> tuple[int, int]:
    """(B_r, B_c) an implementation runs with at head dimension ``d`` (given blocks win;
    ``n_kv``, the keys, where the kernel's tile depends on them: None, a long sequence;
    ``local``: a sliding window, where the kernel's tile depends on it).

    * PyTorch's FlashAttention-2 (sm80 kernels, also on sm90; ``flash_fwd_launch_template.h``):
      d ≤ 64: 128×128 (128×64 with dropout); d ≤ 128: 128×64 (128×32 with dropout); d ≤ 192:
      128×64 (64×64 with dropout); d ≤ 256: 64×64 where two such CTAs fit an SM's shared
      memory (H100/H200: 228 KiB ≥ 4·d·(64 + 2·64) bytes), else 128×64 (A100).
    * memory-efficient (CUTLASS): 64×64 for d ≤ 64, 64×128 for d ≤ 128, 32×128 above.
    * cuDNN: 128×128, 128 query rows per CTA against 128 keys (its kernel names say 64 rows;
      why 128: docs/implementations.md); on Blackwell (compute capability 10.x) at d ≤ 128 in
      16 bits, 256×128 (:func:`cudnn_tiles`).
    * FlashAttention-3 (its Hopper kernels as ``flash_attn.cute`` launches them,
      ``_tile_size_fwd_sm90`` in ``flash_attn/cute/interface.py``): 192×128 for d ≤ 64;
      192×144 for d ≤ 96 (192×128 causal); 128×128 for d ≤ 192; 128×80 for d = 256. A CTA
      has one consumer warpgroup per 64 query rows and one producer warpgroup.
    * our Triton kernel: its defaults for the smallest head dim it pads ``d`` to.
    * flash-attn v1 (``fa1``): 16 query rows a step against 256 keys for d ≤ 64 (128 where
      N_kv ≤ 128), 128 keys for d = 128 (:func:`fa1_block_kv`).
    * CK/aiter (``ck``): :func:`ck_tiles`, by the dtype and the profile's architecture.
    * ``flashmla`` (FlashInfer's Hopper MLA decode): 64 packed query rows (heads × tokens) against
      64-token K/V tiles, two stages (``mla_hopper.cuh``: ``CTA_TILE_Q = CTA_TILE_KV = 64``).
    * ``sdpa-math``: cuBLAS's 128 × 128 output tiles (its products are batched GEMMs).
    """
    if block_q and block_kv:
        return block_q, block_kv
    p = padded_head_dim(impl, d)
    if impl == "fa1":
        bq, bkv = FA1_ROWS, fa1_block_kv(int(p), n_kv)
    elif impl == "sdpa-efficient":
        bq, bkv = (64, 64) if d <= 64 else ((64, 128) if d <= 128 else (32, 128))
    elif impl == "sdpa-cudnn":
        bq, bkv = cudnn_tiles(int(p), profile, dtype)
    elif impl == "flashmla":
        bq, bkv = MLA_TILE, MLA_TILE
    elif impl == "sdpa-math":
        bq, bkv = 128, 128  # cuBLAS's output tiles (the products are its batched GEMMs)
    elif impl == "fa3":
        bq, bkv = fa3_tiles(int(p), causal, DTYPE_BYTES.get(dtype, 2), local)
    elif impl == "fa4":
        bq, bkv = fa4_tiles(int(p))
    elif impl == "ck":
        # the head dim as given: the assembly kernels take 128 only (no padding), CK tile pads
        bq, bkv = ck_tiles(int(d), dtype, getattr(profile, "arch_family", None), dropout)
    elif impl == "triton":
        table = TRITON_DEFAULTS_CAUSAL if causal else TRITON_DEFAULTS
        padded = min((k for k in table if k >= d), default=max(table))
        bq, bkv = table[padded][:2]
    elif impl == "flashinfer":
        from .traffic.paged import flashinfer_fa3_tiles

        hopper = profile is None or _capability(profile) == 9.0
        bq, bkv = flashinfer_fa3_tiles(int(p)) if hopper else (128, 64)
    elif impl == "flex":
        from .traffic.paged import flex_forward_tiles

        bq, bkv = flex_forward_tiles(dtype, int(p))
    elif impl == "sdpa-flash":
        drop = dropout > 0
        if p <= 64:
            bq, bkv = (128, 64) if drop else (128, 128)
        elif p <= 128:
            bq, bkv = (128, 32) if drop else (128, 64)
        elif p <= 192:
            bq, bkv = (64, 64) if drop else (128, 64)
        else:
            two_fit = _smem_per_sm(profile) >= 4 * p * (64 + 2 * 64)
            bq, bkv = (64, 64) if two_fit else (128, 64)
    else:
        raise WorkloadError(f"{impl!r} has no tile rule: give --block-q and --block-kv")
    return block_q or bq, block_kv or bkv


def fa3_tiles(d: int, causal: bool, element_bytes: int = 2, local: bool = False) -> tuple[int, int]:
    """FlashAttention-3's forward tiles (B_r, B_c) at the head dim its kernel runs (its Hopper
    forward in ``flash_attn.cute``, fp16/bf16): 192×128 up to d = 64 (three consumer warpgroups),
    192×144 up to 96 (192×128 causal or with a sliding window), 128×128 up to 128, 128×128 up to
    192 (128×96 with a window: ``local``), 128×80 at 256 (128×64 with a window).
    fp8 (``element_bytes`` 1): the C++ FA3's ``tile_size_fwd_sm90`` with ``element_size = 1``
    (``hopper/tile_size.h`` at :data:`FA4_COMMIT`; flash_attn.cute runs fp8 on Blackwell only):
    192×160 up to d = 64, 192×128 up to 96, 128×224 up to 128, 128×160 up to 192, 128×128 at 256
    (row-major V, TMA K/V, no softcap, no sliding window)."""
    if element_bytes == 1:
        return FA3_FP8_TILES[min((k for k in FA3_FP8_TILES if k >= d), default=256)]
    if d <= 64:
        return 192, 128
    if d <= 96:
        return (192, 128) if causal or local else (192, 144)
    if d <= 128:
        return 128, 128
    if d <= 192:
        return (128, 96) if local else (128, 128)
    return (128, 64) if local else (128, 80)


#: FA3's fp8 forward tiles by the largest head dim each covers (``tile_size_fwd_sm90``,
#: ``element_size == 1``; :func:`fa3_tiles`)
FA3_FP8_TILES: dict[int, tuple[int, int]] = {
    64: (192, 160),
    96: (192, 128),
    128: (128, 224),
    192: (128, 160),
    256: (128, 128),
}


# ---------------------------------------------------------------------------------------
# FP8: which kernels run fp8 inputs and FP8 K/V caches, and what their fp8 paths add

#: FP32-pipe FLOPs per K/V element a kernel spends converting an FP8 K/V cache to 16 bits in
#: registers, by the house's issue rule (one warp instruction a lane = one issue slot = 2 FLOPs
#: of the FP32 peak, as :data:`FA4_EX2_EMULATION_FLOPS`). FlashInfer's ``fast_dequant_f8f16x4``
#: (``include/flashinfer/vec_dtypes.cuh``, e4m3 -> bf16, 4 elements): a byte permute, 7 logic
#: and shift instructions (ALU pipe) and 2 packed multiplies by the exponent bias (FMA pipe):
#: 10 slots per 4 elements = 5 FLOPs an element. The ALU pipe issues at half the FMA pipe's
#: rate on Hopper, which this count does not charge (the conversion is cheaper than it reads:
#: fp16 Q on sm90 takes one ``cvt.rn.f16x2.e4m3x2`` per 2 elements); the scale factors fold
#: into the softmax scale (K) and O's final division (V) and cost nothing per element.
KV_DEQUANT_FLOPS = 5

#: what each implementation's fp8 forward is (``--dtype fp8``), where it has one
FP8_FORWARD: dict[str, str] = {
    "fa3": "FlashAttention-3's fp8 forward (hopper/: e4m3 Q, K, V with q/k/v_descale per batch and K/V head, "
    "fp8 wgmma, V transposed in shared memory by the producer warpgroup, O in bf16, LSE fp32)",
    "fa4": "FlashAttention-4's fp8 forward (O in bf16)",
    "sdpa-cudnn": "cuDNN's sdpa_fp8 graph (e4m3 Q, K, V, O; six fp32 scale scalars in, amax of S and O out; "
    "Hopper and Blackwell data-centre GPUs)",
    "ck": "aiter's fp8 forward (fp8 in, bf16 out)",
    "paper": "the paper's algorithm at the fp8 peak (O in bf16)",
}
#: the kernels an FP8 K/V cache is read by, beside those whose spec lists ``kv_dtypes``
KV_CAST_IMPLEMENTATIONS = ("sdpa-cudnn", "sdpa-flash", "sdpa-efficient")


def fp8_refusal(impl: str, workload: Workload, profile: Profile | None = None) -> str | None:
    """The one line ``--impl impl`` is refused with for an FP8 workload it has no kernel for
    (None where it runs it): fp8 inputs (``--dtype fp8``) need an fp8 forward (:data:`FP8_FORWARD`),
    an FP8 K/V cache a kernel that reads one or PyTorch's cast in front (:func:`kv_cache_path`)."""
    if workload.dtype == "fp8":
        if impl not in FP8_FORWARD:
            have = ", ".join(FP8_FORWARD)
            return f"--dtype fp8: {impl} has no fp8 forward kernel; fp8 attention is modelled for --impl {have}"
        cap = _capability(profile)
        if impl in ("fa3", "fa4", "ck") and (why := _unsupported(impl, 0, "fp8", profile)):
            return f"--dtype fp8: {why}: its fp8 kernels do not run there"
        nvidia = getattr(profile, "vendor", "NVIDIA") == "NVIDIA"
        if impl == "sdpa-cudnn" and (not nvidia or (cap is not None and not 9.0 <= cap < 12.0)):
            return (
                f"--dtype fp8: cuDNN's fp8 attention runs on Hopper and Blackwell data-centre GPUs "
                f"(compute capability 9.0 to 11.x; {getattr(profile, 'name', '?')} is "
                f"{f'{cap:g}' if cap is not None else 'not an NVIDIA GPU'})"
            )
        if impl == "fa3" and (workload.kv_dtype or "fp8") != "fp8":
            return "--dtype fp8: FlashAttention-3's fp8 forward takes e4m3 Q, K and V"
    if workload.kv_dtype is not None and kv_cache_path(impl) is None:
        accepted = ", ".join([*KV_CAST_IMPLEMENTATIONS, *(n for n, i in IMPLEMENTATIONS.items() if i.kv_dtypes)])
        return (
            f"--kv-dtype {workload.kv_dtype}: {impl} reads K and V in the dtype of Q (FA3's fp8 forward takes Q, K, V "
            f"all e4m3: --dtype fp8); an FP8 K/V cache under {workload.dtype} Q is modelled for --impl {accepted}"
        )
    return None


def kv_cache_path(impl: str | None, kv_dtype: str | None = "fp8") -> str | None:
    """How ``impl`` reads an FP8 K/V cache: "dequant" (its kernel converts each element:
    :attr:`Implementation.kv_dtypes`), "cast" (PyTorch's SDPA takes no fp8 K/V: a user casts K
    and V to the dtype of Q first, one elementwise kernel, and the attention kernel reads the
    16-bit copies), None (it does not)."""
    spec = get(impl) if impl is not None else IMPLEMENTATIONS["paper"]
    if spec is None:
        return None
    if kv_dtype in spec.kv_dtypes:
        return "dequant"
    if spec.name in KV_CAST_IMPLEMENTATIONS:
        return "cast"
    return None


def fp8_tile_fields(impl: str | None, workload: Workload) -> dict[str, Any]:
    """What an FP8 workload's forward adds on ``impl``'s kernel (:class:`memmodel.traffic.blocks.TileContext`
    fields): FA3's in-SRAM V transpose and its per-(batch, K/V head) descale tensors, cuDNN's scale
    scalars and amax outputs, the in-kernel dequantisation of an FP8 K/V cache."""
    out: dict[str, Any] = {}
    if workload.dtype == "fp8":
        if impl == "fa3":
            count = intmath.mul(workload.batch, workload.kv_heads_)
            out["v_transpose"] = True
            out["scale_tensors"] = tuple((name, count) for name in ("q_descale", "k_descale", "v_descale"))
        elif impl == "sdpa-cudnn":
            names = ("descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o")
            out["scale_tensors"] = tuple((name, 1) for name in names)
            out["amax_outputs"] = ("amax_s", "amax_o")
    if workload.kv_dtype is not None and kv_cache_path(impl, workload.kv_dtype) == "dequant":
        out["dequant_flops"] = KV_DEQUANT_FLOPS
    return out


# ---------------------------------------------------------------------------------------
# FlashAttention-4 (FA4_COMMIT): what its SM100 kernels fix

#: rows of one tcgen05 Q tile and keys of one K/V tile of FA4's forward (``FwdConfig(128, 128)``)
FA4_TILE = 128


def fa4_tiles(d: int, rows: int | None = None) -> tuple[int, int]:
    """FA4's forward tiles (B_r, B_c) per CTA: two 128-row Q tiles (``q_stage = 2``) against
    128-key blocks up to d = 128; one Q tile where the (GQA-packed) query rows fit one
    (``q_stage = 1`` when ``seqlen_q_packgqa <= 128``), and at d = 256 (the dedicated 2-CTA
    kernel: 128 rows per CTA, 256 per pair). ``rows``: the kernel's query rows (None: many)."""
    if d > 128:
        return FA4_TILE, FA4_TILE
    one = rows is not None and rows <= FA4_TILE
    return (FA4_TILE if one else 2 * FA4_TILE), FA4_TILE


#: the most K/V splits FA4's heuristic picks (``num_splits_heuristic(..., 128)``)
FA4_MAX_SPLITS = 128


def fa4_num_splits(m_blocks: int, sm_count: int, kv_blocks: int) -> int:
    """The K/V splits FA4's forward runs when asked for its heuristic (``num_splits`` < 1:
    ``flash_attn_func(..., num_splits=0)``; its default, 1, never splits): none over 4 or fewer
    K/V blocks of 128 keys, else as many as the SMs hold of its ``m_blocks`` CTAs (batch × heads
    × Q tiles of 2 × 128 packed rows, one where they fit one), at most 128 and at most one a K/V
    block (``_get_fwd_config`` and ``num_splits_heuristic``, flash_attn/cute/interface.py,
    flash-attn-4 4.0.0b36 and FA4_COMMIT alike)."""
    if kv_blocks <= 4 or m_blocks <= 0:
        return 1
    return max(1, min(sm_count // m_blocks, FA4_MAX_SPLITS, kv_blocks))


def fa4_two_cta(d: int, causal: bool, rows: int) -> bool:
    """Whether FA4's forward runs as CTA pairs (``use_2cta_instrs``: not causal, d padded to
    128 or 192, more than two Q tiles of packed rows; always at d = 256)."""
    return d == 256 or (not causal and d in (128, 192) and rows > 2 * FA4_TILE)


def fa4_forward_pair(d: int, causal: bool, rows: int, group: int, windowed: bool) -> int:
    """CTAs that share each K/V tile load in FA4's forward: 2 where it runs as CTA pairs
    (:func:`fa4_two_cta`; ``_flash_attn_fwd`` also asks for no sliding window and, with its GQA
    packing, a group that divides the 128-row Q tile), each CTA of a pair loading half of the K/V
    tile both MMAs read (``cta_group::2``); else 1. ``rows``: the kernel's packed query rows."""
    two = fa4_two_cta(d, causal, rows) and not windowed and (d == 256 or FA4_TILE % max(group, 1) == 0)
    return 2 if two else 1


def fa4_backward_pair(d: int) -> int:
    """CTAs that share each Q and dO tile load in FA4's backward (``_flash_attn_bwd`` on SM100:
    ``use_2cta_instrs`` from head dim 128, and at 256 its dedicated kernel): 2, each loading half
    of the tile (the pair's products span its 2 × 128 keys) and adding half of the pair's one dQ
    partial; else 1."""
    return 2 if d >= 128 else 1


#: FA4's ``_TUNING_CONFIG`` (``flash_fwd_sm100.py``): (2-CTA, causal, padded d, SM103) ->
#: (``ex2_emu_freq``, ``ex2_emu_res``, ``ex2_emu_start_frg``) for 16-bit inputs
FA4_EX2_TUNING: dict[tuple[bool, bool, int, bool], tuple[int, int, int]] = {
    (True, False, 128, False): (10, 4, 1),
    (False, True, 128, False): (16, 4, 1),
    (True, False, 192, False): (16, 4, 0),
    (False, True, 192, False): (32, 4, 1),
    (True, False, 256, False): (14, 6, 0),
    (True, True, 256, False): (14, 6, 0),
}
#: FP32-pipe cost of one emulated exp2, in FLOPs of the FP32 peak: ``ex2_emulation_2`` issues per
#: pair of scores a packed add, two packed subtracts and the degree-3 polynomial's three packed
#: FMAs (six f32x2 instructions, three issue slots a score, each slot two FLOPs of the peak); its
#: fmax, shift and integer add run on the ALU pipe and are not counted
FA4_EX2_EMULATION_FLOPS = 6
#: 32-score fragments of one softmax thread's row of a 128-key block (``apply_exp2_convert``)
_FA4_FRAGMENTS = FA4_TILE // 32


def fa4_exp_emulated_share(d: int, causal: bool, rows: int, capability: float | None, gqa_packed: bool) -> float:
    """The share of FA4's forward exponentials computed by polynomial on the FMA pipe
    (``apply_exp2_convert`` in ``softmax.py``): in each 32-score fragment, the pairs at k with
    k mod freq ≥ freq − res, in the fragments from ``ex2_emu_start_frg`` to the last but one.
    None on SM103 (B300, GB300: faster native exp2, ``ex2_emu_freq = 0``), and at head dims past
    128 except the 2-CTA 192 and the 256 kernel. E.g. 2-CTA d = 128: freq 10, res 4, from
    fragment 1: 6 of 16 pairs in 2 of 4 fragments = 0.1875."""
    sm103 = capability is not None and round(capability * 10) == 103
    two_cta = fa4_two_cta(d, causal, rows)
    enabled = (d <= 128 or (d == 192 and two_cta and not causal) or d == 256) and not sm103
    if not enabled:
        return 0.0
    key = (two_cta, causal, d, False)
    freq, res, start = FA4_EX2_TUNING.get(key, (16, 4, 1))  # untuned: the kernel's defaults
    if gqa_packed and 64 < d < 256 and not causal and key not in FA4_EX2_TUNING:
        freq = 10  # pack_gqa above d = 64, not causal: the tuned figure, else 10
    pairs = sum(1 for k in range(0, 32, 2) if k % freq >= freq - res)
    fragments = sum(1 for j in range(_FA4_FRAGMENTS) if start <= j < _FA4_FRAGMENTS - 1)
    return pairs / 16 * fragments / _FA4_FRAGMENTS


# ---------------------------------------------------------------------------------------
# flash-attn v1 (FA1_RELEASE): what its launch templates and kernel traits fix

#: query rows of one step of an FA1 CTA, and the warps of its forward and backward CTAs
FA1_ROWS, FA1_FORWARD_WARPS, FA1_BACKWARD_WARPS = fmha.ROWS, fmha.FORWARD_WARPS, fmha.BACKWARD_WARPS
#: forward CTAs an SM keeps: its 128 threads hold their K and V columns in registers (the
#: traits' flags 0x08: K and V in registers, one shared-memory buffer for both), the register
#: bound of :func:`occupancy`'s FlashAttention kernels; its ≤ 48 KiB of shared memory fit more
FA1_FORWARD_CTAS = 2
#: the most K/V splits of FA1's forward: ``std::min(30, (seqlen_q + M - 1 / M))`` in
#: ``fmha_fwd_launch_template.h``, where ``1 / M`` is 0, so min(30, N + 16)
FA1_MAX_SPLITS = 30


def fa1_block_kv(d: int, n_kv: int | None = None) -> int:
    """Keys per outer step of FA1's kernels (``Cta_tile_p::N``, forward and backward): 256 for
    d ≤ 64 and 128 for d = 128 (``fmha_api.cpp``: ``blocksize_c = head_size > 64 ? 128 :
    256``); d ≤ 64 with N_kv ≤ 128 runs the 128-key kernel (``fmha_fwd_hdim64.cu``)."""
    if d > 64:
        return 128
    return 128 if n_kv is not None and n_kv <= 128 else 256


def fa1_rounded_n_kv(n_kv: int, block_kv: int) -> int:
    """The key count FA1's kernels are launched for (``max_seqlen_k`` in ``fmha_api.cpp``): 128
    up to 128, 256 up to 256, else rounded up to a multiple of ``block_kv``."""
    if n_kv <= 128:
        return 128
    if n_kv <= 256:
        return 256
    return -(-n_kv // block_kv) * block_kv


def fa1_backward_smem_bytes(d: int, block_kv: int, element_bytes: int = 2) -> int:
    """Shared memory of FA1's backward CTA (``run_fmha_bwd_loop``): two Q buffers, V once or
    twice (not held in registers: the traits' flag 0x100 at d = 128, and at d = 64 with
    256-key blocks on sm80/sm90), the fp32 dQ tile of its 8 warps, two 16-row score tiles.
    d = 128: 2·8 + 2·32 + 64 + 2·4 = 152 KiB; d = 64 (256 keys): 2·4 + 2·32 + 32 + 2·8 = 120 KiB."""
    q = FA1_ROWS * d * element_bytes * 2
    v = block_kv * d * element_bytes
    v_in_registers = not (d > 64 or (d > 32 and block_kv == 256))
    dq = FA1_ROWS * d * 4 * FA1_BACKWARD_WARPS
    s = FA1_ROWS * block_kv * 2
    return 2 * q + v * (1 if v_in_registers else 2) + dq + 2 * s


def fa1_backward_ctas(d: int, block_kv: int, profile: Profile | None = None, element_bytes: int = 2) -> int:
    """Backward CTAs an SM keeps: as many as its shared memory holds (one at d = 64 and 128 on an
    A100 or H100), no more than the forward's register bound."""
    smem = int(_smem_per_sm(profile))
    return max(1, min(FA1_FORWARD_CTAS, smem // fa1_backward_smem_bytes(d, block_kv, element_bytes)))


def _wave_efficiency(ctas: float, slots: float) -> float:
    waves = ctas / slots
    return waves / float(np.ceil(waves))


def fa1_forward_splits(batch_heads: int, n: int, sm_count: int, ctas_per_sm: int = FA1_FORWARD_CTAS) -> int:
    """Query splits of FA1's forward grid (B, H, splits; ``num_splits_heuristic_fwd``):
    the fewest splits whose waves of B·H·splits CTAs over SMs × CTAs per SM fill the last wave
    within 0.95 of the best any split count up to min(30, N + 16) reaches. A split's CTA takes
    every splits-th 16-row Q block of its head."""
    most = min(FA1_MAX_SPLITS, -(-n // FA1_ROWS) * FA1_ROWS + FA1_ROWS)
    return _fa1_splits(int(batch_heads), most, float(sm_count * ctas_per_sm))


@functools.lru_cache(maxsize=65536)
def _fa1_splits(batch_heads: int, most: int, slots: float) -> int:
    """:func:`fa1_forward_splits` once its N is only the split count it may reach (kept: a grid
    meets each B·H at every N)."""
    eff = [_wave_efficiency(batch_heads * s, slots) for s in range(1, most + 1)]
    best = max(eff)
    return next((s for s, e in enumerate(eff, 1) if e > 0.95 * best), 1)


def fa1_backward_splits(
    batch_heads: int, n_kv: int, block_kv: int, sm_count: int, ctas_per_sm: int, causal: bool
) -> int:
    """K/V splits of FA1's backward (``num_splits_heuristic_bwd``): 1 (a CTA per batch × head
    walking every K/V block) or one CTA per K/V block (``seqlen_k / blocksize_c``; dQ then
    added in fp32 by atomics), whichever fills the waves better, the split one discounted by
    1 + B_c / N_kv (causal: ½ B_c / N_kv, and always split from 10 K/V blocks on)."""
    seqlen = fa1_rounded_n_kv(n_kv, block_kv)
    slots = float(sm_count * ctas_per_sm)
    parallel = seqlen // block_kv
    if causal and parallel >= 10:
        return parallel
    discount = 1.0 + (0.5 if causal else 1.0) * block_kv / seqlen
    one = _wave_efficiency(batch_heads, slots)
    split = _wave_efficiency(batch_heads * parallel, slots) / discount
    return 1 if one >= split else parallel


#: AMD architectures aiter's assembly FMHA kernels are built for (``hsa/gfx942``, ``hsa/gfx950``)
CK_ARCHS = ("cdna3", "cdna4")


def ck_asm_forward(d: int, dtype: str, arch: str | None, dropout: float = 0.0) -> bool:
    """Whether aiter's assembly forward (``fmha_fwd_v3`` in ``csrc/cpp_itfs/mha_fwd.cu``) runs:
    bf16 (or fp8 in, bf16 out) at head dim 128 (fp8 also 256 on gfx950), no bias, no dropout,
    gfx942 or gfx950; elsewhere aiter falls back to CK tile's forward (``fmha_fwd_ck``)."""
    if arch not in CK_ARCHS or dropout > 0:
        return False
    return (dtype == "bf16" and d == 128) or (dtype == "fp8" and (d == 128 or (d == 256 and arch == "cdna4")))


def ck_asm_backward(d: int, arch: str | None, dropout: float = 0.0) -> bool:
    """Whether aiter's assembly backward (``fmha_v3_bwd``: ``odo``, ``dqdkdv``, the dQ
    conversion; ``csrc/cpp_itfs/mha_bwd.cu``) runs: fp16/bf16 on gfx942 or gfx950, no dropout,
    head dims padded to 64, 128 or 192; elsewhere CK tile's backward."""
    return arch in CK_ARCHS and dropout == 0 and d <= 192


def pairs_causal_kv_blocks(impl: str | None, d: Any, arch: str | None, dropout: float = 0.0) -> bool:
    """Whether ``impl``'s causal backward gives each workgroup two K/V blocks of a head, its
    first and its last: aiter's assembly ``dqdkdv`` launches ⌈T_c / 2⌉ workgroups a head under a
    causal mask (``gdx = (gdx + 1) / 2`` for its mask types 1 and 2 in ``fmha_v3_bwd``,
    ``csrc/cpp_itfs/mha_bwd.cu``, ROCm/aiter at e4048607a5; which blocks a workgroup pairs is
    in the assembly, taken as the forward's head and tail, :func:`pairs_causal_q_blocks`)."""
    return bool(np.all(paired_kv_blocks(impl, d, arch, dropout)))


def paired_kv_blocks(impl: str | None, d: Any, arch: str | None, dropout: float = 0.0) -> Any:
    """:func:`pairs_causal_kv_blocks` element by element over head dims ``d`` (a grid's)."""
    ds = np.asarray(d)
    if impl != "ck":
        return np.zeros(ds.shape, dtype=bool)
    return np.vectorize(lambda x: ck_asm_backward(int(x), arch, dropout), otypes=[bool])(ds)


def ck_tiles(d: int, dtype: str, arch: str | None, dropout: float = 0.0) -> tuple[int, int]:
    """CK/aiter's forward tiles (B_r, B_c) at head dim ``d`` (as given: CK tile runs it padded
    to 32, 64, 128 or 256; the assembly kernels only at 128 itself).

    * aiter's assembly kernels (``hsa/<arch>/fmha_v3_fwd/fmha_fwd.csv``, columns ts_qo × ts_kv):
      bf16 d = 128: 256 × 32 on gfx942, 256 × 64 on gfx950; fp8: 256 × 64 (gfx942), 256 × 128
      (gfx950), 256 × 64 at d = 256 (gfx950). 512 threads: 8 waves of 64, 32 query rows each.
    * CK tile (``example/ck_tile/01_fmha/codegen/ops/fmha_fwd.py``,
      ``get_fmha_fwd_tile_dict_from_dtype``; bm0 × bn0): fp16/bf16 128 × 64 up to d = 64,
      128 × 128 for d = 128 and 256 (4 waves; 2 at d = 32); fp8 the same from d = 64.

    Neither holds Algorithm 1's Q + K + V tiles in the LDS: the assembly kernels keep Q in
    registers (their code objects declare 256 VGPRs a lane and the whole LDS, 64 KiB on gfx942,
    160 KiB on gfx950, for one 512-thread workgroup a CU); CK tile's ``qr`` pipelines keep Q in
    registers and stream K and V through the LDS in 32-column slices (bk0, bk1).
    """
    if ck_asm_forward(d, dtype, arch, dropout):
        if dtype == "bf16":
            return (256, 32) if arch == "cdna3" else (256, 64)
        if d == 256:
            return 256, 64
        return (256, 64) if arch == "cdna3" else (256, 128)
    return (128, 64) if d <= 64 else (128, 128)


def pairs_causal_q_blocks(impl: str | None, block_q: Any) -> bool:
    """Whether ``impl``'s causal forward gives each workgroup two Q blocks of a head, its first
    and its last (x and T_r − 1 − x), so every workgroup of a square causal grid does the same
    work: aiter's assembly forward (its 256-row tiles, :func:`ck_tiles`) launches
    ⌈T_r / 2⌉ workgroups a head under any mask (``tg_div = 2`` in ``get_grid_dim``,
    ``csrc/cpp_itfs/mha_fwd.cu``, ROCm/aiter at e4048607a5: "merge the head and tail in seqlen_q
    direction"). CK tile's forward and every other kernel here launch one CTA a Q block."""
    return bool(np.all(paired_q_blocks(impl, block_q)))


def paired_q_blocks(impl: str | None, block_q: Any) -> Any:
    """:func:`pairs_causal_q_blocks` element by element (a grid's tiles may differ by head dim)."""
    return np.asarray(block_q) >= 256 if impl == "ck" else np.zeros(np.shape(block_q), dtype=bool)


def ck_waves(d: int, block_q: int) -> int:
    """Waves (64 lanes each) of one CK/aiter forward workgroup: 8 for the assembly kernels'
    256-row tiles (``bdx = 512`` in ``fmha_fwd_v3``), CK tile's ``F_rm`` elsewhere (4; 2 at d = 32)."""
    if block_q >= 256:
        return 8
    return 2 if d <= 32 else 4


def occupancy(impl: str, d: int, block_q: int, dropout: float = 0.0, profile: Profile | None = None) -> int | None:
    """CTAs an implementation's forward kernel keeps on an SM, where its code fixes it
    (registers, not shared memory, are the limit; read off Nsight Compute's launch statistics
    on an H200, docs/implementations.md): cuDNN 1 (its decoding kernels, 16 query rows and 4
    warps: 2); the memory-efficient kernel 4 (d ≤ 64) or 2 (d ≤ 128); FlashAttention-2 1 with
    8 warps (d = 192 without dropout; d = 256 at 128×64) and 2 with 4; our Triton kernel
    16384 / (B_r·d), its B_r × d accumulator in registers (2 at 128×64 and d = 64, 1 at
    128-row tiles and d = 128); FlashAttention-3 1 (its warpgroups ask for the SM's registers:
    240 a thread for two consumer warpgroups, 160 for three, ``flash_fwd_sm90.py``). None: the
    model's own rule (tiles that fit shared memory). CK/aiter's assembly forward 1 (its code
    objects ask for the CU's whole LDS), CK tile's None."""
    p = padded_head_dim(impl, d)
    if impl == "ck":
        return 1 if block_q >= 256 else None  # aiter's assembly kernels take a CU's whole LDS (ck_tiles)
    if impl == "sdpa-cudnn":
        return 2 if block_q <= DECODE_ROWS else 1
    if impl == "sdpa-efficient":
        return 4 if d <= 64 else (2 if d <= 128 else None)
    if impl == "sdpa-flash":
        eight_warps = (192 >= p > 128 and dropout == 0) or (p > 192 and block_q == 128)
        return 1 if eight_warps else 2
    if impl == "triton":
        return int(min(4, max(1, 16384 // max(1, block_q * p))))
    if impl in ("fa3", "fa4", "flashmla"):
        # FA4: its CTA allocates the SM's tensor memory and 512 registers a thread-slot; flashmla:
        # a persistent grid of one CTA per SM (MLAPlan: num_blks_x × num_blks_y = the SMs)
        return 1
    if impl == "fa1":
        return FA1_FORWARD_CTAS
    return None


#: Architectures whose tensor cores are fed by warp-level instructions (``mma.sync``; MFMA on
#: CDNA): each warp loads its operands from shared memory through ``ldmatrix``/``ds_read``.
WARP_LEVEL_TENSOR_CORES = ("volta", "turing", "ampere", "ada", "cdna3", "cdna4")


def smem_reads(impl: str | None, block_q: Any, d: Any, dropout: float = 0.0, profile: Profile | None = None) -> Any:
    """How many times a forward CTA reads each K/V tile from shared memory. Warp-level
    ``mma.sync`` code splits the CTA's rows over its warps and every warp reads the whole tile:
    4 (FlashAttention-2 and CUTLASS with 4 warps), 8 for FlashAttention-2's 8-warp configs,
    our Triton kernel's warp count where it compiles to ``mma.sync``. Warp-group ``wgmma`` (and
    Blackwell's ``tcgen05``) reads the tile once per 64 rows: B_r / 64. AMD's MFMA is issued per
    wave: CK/aiter's workgroup reads it once per wave (:func:`ck_waves`). The paper's algorithm: 4."""
    spec = get(impl)
    if spec is None or spec.name == "paper":
        return 4
    if spec.name == "ck":
        return per_element(lambda x, bq: ck_waves(int(padded_head_dim("ck", x)), bq), d, block_q)
    arch = getattr(profile, "arch_family", None)
    if spec.name == "fa4":  # one tcgen05 MMA of 128 rows per Q tile reads the K (V) tile once
        return np.maximum(1, np.asarray(block_q) // FA4_TILE) if np.ndim(block_q) else max(1, int(block_q) // FA4_TILE)
    if spec.instructions == "native" and arch not in WARP_LEVEL_TENSOR_CORES:
        return np.maximum(1, np.asarray(block_q) // 64) if np.ndim(block_q) else max(1, int(block_q) // 64)
    if spec.name == "sdpa-flash":
        return per_element(lambda x, bq: 8 if occupancy(spec.name, x, bq, dropout, profile) == 1 else 4, d, block_q)
    if spec.name == "triton":
        table = TRITON_DEFAULTS
        return per_head_dim(d, lambda x: table[min((k for k in table if k >= x), default=max(table))][2])
    return 4


def kv_order(impl: str | None) -> str:
    """How a forward CTA walks its K/V blocks: FlashAttention-2 from the diagonal down
    (flash_fwd_kernel.h), our Triton kernel from block 0 up."""
    spec = get(impl)
    return spec.kv_order if spec is not None else "reverse"


# ---------------------------------------------------------------------------------------
# What PyTorch runs


def _capability(profile: Profile | None) -> float | None:
    """The NVIDIA compute capability as a number (9.0); None for AMD targets or where unknown."""
    try:
        return float(getattr(profile, "compute_capability", None) or "")
    except ValueError:
        return None


#: rows of FlashInfer's Hopper MLA CTA tile and tokens of its K/V tile (``mla_hopper.cuh``)
MLA_TILE = 64

#: cuDNN's knob-7 forward on Blackwell (``cudnn_generated_oss_sdpa_sm100_flash_fprop_f16_knob_7_
#: 128x128x{64,128}``, the kernel cudnn-frontend's open-source SM100 prefill engine compiles,
#: ``include/cudnn_frontend/experimental/sm100_sdpa_prefill_engine.h`` at :data:`CUDNN_FE_COMMIT`):
#: ``Tiles_Q = 2`` Q tiles of ``TILE_M = 128`` rows per CTA, one softmax warpgroup each
CUDNN_SM100_ROWS = 256
#: the cudnn-frontend commit read for cuDNN's Blackwell forward (2026-05-08)
CUDNN_FE_COMMIT = "3929da2ef4c1dba1bb8acb68727b9134f26f40c0"


def cudnn_tiles(d: int, profile: Profile | None = None, dtype: str = "bf16") -> tuple[int, int]:
    """cuDNN's forward tiles (B_r, B_c) at padded head dim ``d``: 128×128 (its Hopper kernels,
    ``..._sm90_flash_fprop_wgmma_f16_knob_7_64x128x{d}``: two 64-row consumer warpgroups, the
    128-row tile cudnn-frontend's SM90 engine launches, ``TILE_M * 2``); on Blackwell (compute
    capability 10.x) in 16 bits at d ≤ 128, :data:`CUDNN_SM100_ROWS` × 128: its SM100 engine's
    CTA takes two 128-row Q tiles against 128-key blocks (``ctas_in_q_dim = div_up(S_q, TILE_M
    * Tiles_Q)``), so each K/V block is read once per 256 query rows. FP8 and d > 128 on
    Blackwell (no source read) keep 128×128."""
    cap = _capability(profile)
    lo, hi = FA4_CAPABILITY
    if cap is not None and lo <= cap <= hi and dtype in ("fp16", "bf16") and d <= CUDNN_SM100_MAX_D:
        return CUDNN_SM100_ROWS, 128
    return 128, 128


#: cuDNN's split rule for its SM100 forward (:func:`cudnn_sm100_splits`), as cudnn-frontend's
#: planner states it for its open-source SM100 prefill kernels (``python/cudnn/sdpa/fwd/heuristics.py``,
#: ``choose_split_kv``, pull requests 658, 675 and 692, August 2026): a split keeps at least this
#: many K/V tiles; a CTA's fixed cost, in K/V tiles of its loop; what one split's partials cost the
#: combine, per wave of its rows, in K/V tiles; and at least this much a partial, in K/V tiles
CUDNN_SPLIT_MIN_TILES = 2
CUDNN_SPLIT_CTA_COST = 21.0
CUDNN_SPLIT_COMBINE_COST = 0.1
CUDNN_SPLIT_COMBINE_FLOOR = 0.35


def cudnn_sm100_splits(ctas: int, kv_tiles: int, rows: int, sm_count: int) -> int:
    """How many K/V chunks cuDNN's SM100 forward cuts each Q tile into (1: no split), by the
    cost its frontend's planner minimises over powers of two s up to the first ≥ the SM count
    (and at most ``kv_tiles`` / :data:`CUDNN_SPLIT_MIN_TILES`): whole waves of ``ctas`` × s CTAs,
    each walking ⌈kv_tiles / s⌉ tiles plus :data:`CUDNN_SPLIT_CTA_COST`, plus s partials for the
    combine over ``rows`` output rows (S_q × H × B) at :data:`CUDNN_SPLIT_COMBINE_COST` a wave of
    them, at least :data:`CUDNN_SPLIT_COMBINE_FLOOR`; unsplit, no combine. A grid that fills the
    SMs stays whole; one under a wave splits until it fills it. cuDNN's own backend is closed: this
    is the rule NVIDIA wrote for the open-source kernels of the same design, a stand-in
    (docs/implementations.md)."""
    if ctas <= 0 or kv_tiles <= 1 or sm_count <= 0:
        return 1
    top = min(1 << max(0, (sm_count - 1).bit_length()), max(1, kv_tiles // CUDNN_SPLIT_MIN_TILES))
    combine_waves = max(1, -(-max(0, rows) // sm_count))
    per_partial = max(combine_waves * CUDNN_SPLIT_COMBINE_COST, CUDNN_SPLIT_COMBINE_FLOOR)
    best, best_cost = 1, -(-ctas // sm_count) * (kv_tiles + CUDNN_SPLIT_CTA_COST)
    s = 2
    while s <= top:
        cost = -(-ctas * s // sm_count) * (-(-kv_tiles // s) + CUDNN_SPLIT_CTA_COST) + s * per_partial
        if cost < best_cost:
            best, best_cost = s, cost
        s *= 2
    return best


def splits_by_forward(impl: str | None, block_q: Any = None) -> Any:
    """Whether ``impl``'s forward kernel takes its K/V splits itself (each CTA a chunk of its Q
    tile's keys, fp32 partials for a combine kernel) rather than FlashAttention-2's split kernel:
    FA4's, and cuDNN's SM100 kernel, on the rows its :data:`CUDNN_SM100_ROWS`-row tiles ``block_q``
    run (a bool, or a bool array on a grid whose tiles differ: its decoding rows keep theirs)."""
    if impl == "fa4":
        return True
    if impl != "sdpa-cudnn" or block_q is None:
        return False
    mine = np.asarray(block_q) == CUDNN_SM100_ROWS
    return bool(mine) if mine.ndim == 0 else mine


def forward_design(impl: str | None, profile: Profile | None, dtype: str, head_dim: Any = None) -> Any:
    """The implementation whose figures ``impl``'s 16-bit forward kernel takes on ``profile``
    (:attr:`Implementation.forward_design`) and where: (its design, the rows of ``head_dim``, the
    head dim the kernel runs, at most the design's largest: True, or a bool array on a grid)
    where the GPU's compute capability is in the design's range, the profile measured no
    efficiency of ``impl``'s own and gives the design's; None otherwise (its own figures). cuDNN's Blackwell forward is FA4's design
    (docs/implementations.md): the SM100 engine's kernel runs two softmax warpgroups (one per
    128-row Q tile), a correction warpgroup that rescales O in tensor memory only where a
    warp's row maxima moved, and MMA, load and store warps issuing ``tcgen05.mma`` into tensor
    memory, where its Hopper kernels, whose figures a Blackwell profile carries, are ``wgmma``
    warpgroups with no correction warpgroup."""
    spec = get(impl)
    if spec is None or spec.forward_design is None or dtype not in ("fp16", "bf16") or profile is None:
        return None
    (lo, hi), design, largest = spec.forward_design
    cap = _capability(profile)
    if cap is None or not lo <= cap <= hi:
        return None
    if profile.kind_of(f"implementations.{spec.name}.efficiency") == "measured":
        return None
    if profile.implementation(design).efficiency is None:
        return None
    rows = True if head_dim is None else np.asarray(head_dim) <= largest
    if not np.any(rows):
        return None
    return design, (bool(rows) if np.ndim(rows) == 0 else rows)


#: what every refusal over V's head dim says (:func:`refusal` refuses on it)
DV_REFUSED = "V's head dim"


def value_dims_unsupported(impl: str, workload: Workload) -> str | None:
    """Why ``impl`` cannot run ``workload``'s V head dim (``d_v`` ≠ d), or its MLA decode shape;
    None where it can. Each kernel's (d, d_v) pairs are read off its sources (docs/variants.md, "MLA")."""
    spec = IMPLEMENTATIONS[impl]
    d, d_v = int(np.max(np.asarray(workload.d))), workload.d_v
    if impl == "flashmla":
        # every element of a grid (a sweep broadcasts the fixed fields too)
        shape = (
            d_v is not None
            and bool(np.all(np.asarray(workload.d) == MLA_D))
            and bool(np.all(np.asarray(d_v) == MLA_DV))
            and bool(np.all(np.asarray(workload.kv_heads_) == 1))
        )
        if not shape:
            return (
                f"{impl} runs MLA's absorbed decode only: one latent K/V head, d = {MLA_D} and {DV_REFUSED} "
                f"d_v = {MLA_DV} (got d={_dims(workload.d)}, d_v={_dims(workload.d_v_)}, "
                f"kv_heads={_dims(workload.kv_heads_)})"
            )
        return None
    if d_v is None:
        return None
    dv = int(np.max(np.asarray(d_v)))
    pairs = spec.value_head_dims
    if pairs is None:
        if impl == "sdpa-cudnn" and max(d, dv) > 256:
            return f"{impl} runs {DV_REFUSED} and Q's up to 256 (got d={d}, d_v={dv})"
        return None
    if pairs and all((int(a), int(b)) in pairs for a, b in _dim_pairs(workload)):
        return None
    runs = {
        "sdpa-flash": "PyTorch's FlashAttention-2 takes Q, K and V at one head dim (check_head_dim_size_flash): "
        "PyTorch runs this shape with cuDNN (sm90, fp16/bf16) or the memory-efficient kernel: --impl sdpa-cudnn or "
        "sdpa-efficient",
        "fa1": "flash-attn v1 takes Q, K and V at one head dim: --impl sdpa-cudnn or sdpa-efficient",
        "fa3": "FlashAttention-3's kernels with V's head dim apart are built for (192, 128) (and (64, 512), not "
        "modelled)",
        "fa4": "FA4's (192, 128) DeepSeek kernel is not modelled",
        "triton": "memmodel's Triton kernel takes one head dim: --impl sdpa-cudnn or sdpa-efficient",
        "ck": "CK/aiter's kernels with V's head dim apart are not modelled: --impl paper",
    }.get(impl, "not modelled")
    return f"{impl} with {DV_REFUSED} d_v={dv} apart from d={d}: {runs}"


def _dim_pairs(workload: Workload) -> list[tuple[int, int]]:
    """The distinct (d, d_v) pairs of ``workload`` (one for a single workload)."""
    d, dv = np.broadcast_arrays(np.asarray(workload.d), np.asarray(workload.d_v_))
    return sorted({(int(a), int(b)) for a, b in zip(d.ravel().tolist(), dv.ravel().tolist())})


def _dims(value: Any) -> str:
    arr = np.asarray(value)
    return str(int(arr)) if arr.ndim == 0 else "/".join(str(x) for x in sorted({int(v) for v in arr.ravel()}))


def intmath_is_array(*values: Any) -> bool:
    return any(isinstance(v, np.ndarray) for v in values)


def unsupported(impl: str, workload: Workload, profile: Profile | None = None) -> str | None:
    """Why ``impl`` cannot run ``workload`` on ``profile`` (None where it can); on a grid, why
    it cannot run some of its rows (the largest head dim decides)."""
    why_dv = value_dims_unsupported(impl, workload)
    if why_dv is not None:
        return why_dv
    why = _unsupported(impl, int(np.max(np.asarray(workload.d))), workload.dtype, profile)
    if why is None and impl == "fa4" and float(workload.dropout) > 0:
        return f"{impl} has no dropout (flash_attn.cute's flash_attn_func takes no dropout_p)"
    return why


#: the bundled profiles FA4 runs on (compute capability 10.x; a test keeps the list true)
FA4_PROFILES = ("b200", "b300", "gb200", "gb300")


def refusal(impl: str, why: str) -> str | None:
    """The one line ``--impl impl`` is refused with, where the implementation does not run
    the workload at all (FA4 off Blackwell: no model stands in; a kernel that does not take V's
    head dim apart from Q's); None where it is modelled anyway."""
    if DV_REFUSED in why:
        return f"--impl {impl}: {why}"
    if impl in ("flashmla", "sdpa-math") and "compute capability" in why:
        return f"--impl {impl}: {why}"
    if impl != "fa4":
        return None
    if "compute capability" not in why and "NVIDIA" not in why:
        return f"--impl fa4: {why}"
    return (
        f"--impl fa4: {why}: FA4's Blackwell kernels run on compute capability 10.x ({', '.join(FA4_PROFILES)}); "
        "on Hopper the FA4 package runs FlashAttention-3's kernels: --impl fa3"
    )


def head_dim_unsupported(impl: str, d: int) -> str | None:
    """Why ``impl`` does not run head dim ``d`` (past its largest), or None."""
    spec = IMPLEMENTATIONS[impl]
    if spec.max_head_dim is not None and d > spec.max_head_dim:
        return f"{impl} runs head dims up to {spec.max_head_dim} (got d={d})"
    return None


def _unsupported(impl: str, d: int, dtype: str, profile: Profile | None) -> str | None:
    spec = IMPLEMENTATIONS[impl]
    if too_wide := head_dim_unsupported(impl, d):
        return too_wide
    if dtype not in spec.dtypes:
        return f"{impl} runs {', '.join(spec.dtypes)} (got {dtype})"
    cap = _capability(profile)
    vendor = getattr(profile, "vendor", "NVIDIA")
    if spec.capability is not None and vendor == "NVIDIA" and cap is not None:
        lo, hi = spec.capability
        if not lo <= cap <= hi:
            return f"{impl} runs on compute capability {lo:g} to {hi:g} ({getattr(profile, 'name', '?')} is {cap:g})"
    if impl in ("sdpa-cudnn", "flashinfer") and vendor != "NVIDIA":
        return f"{impl} runs on NVIDIA GPUs only"
    if impl == "fa3" and vendor != "NVIDIA":
        return f"{impl} runs on NVIDIA Hopper GPUs only"
    if impl == "fa4":
        if 128 < d < 256:
            return (
                f"{impl} runs head dims up to 128, and 256 (got d={d}; its (192, 128) DeepSeek kernel is not modelled)"
            )
        if profile is not None and vendor != "NVIDIA":
            return f"{impl} runs on NVIDIA Blackwell data-centre GPUs only"
    if impl == "ck" and profile is not None:
        if vendor != "AMD":
            return f"{impl} runs on AMD Instinct GPUs only"
        if getattr(profile, "arch_family", None) not in CK_ARCHS:
            return f"{impl}'s kernels are built for gfx942 and gfx950 (CDNA 3 and 4)"
    return None


def default_for(workload: Workload, profile: Profile | None = None) -> tuple[str, str]:
    """The fused kernel PyTorch's ``scaled_dot_product_attention`` picks for ``workload`` on
    ``profile``'s GPU, and why: the first backend in PyTorch's priority order whose
    constraints the inputs meet. Measured on an H200 with torch 2.11 (docs/implementations.md):
    cuDNN for fp16/bf16 at every head dim up to 256, causal or not, with dropout, GQA and
    decoding; the memory-efficient kernel for fp32 and d > 256. Taken the
    same on Blackwell (not measured); FlashAttention-2 first on Ampere and Ada (compute
    capability 8.x), the memory-efficient kernel on older GPUs. The memory-efficient kernel's
    variant for d > 128 accumulates O in global memory, which memmodel does not model: there,
    and for dtypes no fused kernel takes, ``paper``. On an AMD GPU (CDNA 3/4), ``ck``
    (:data:`ROCM_DEFAULT_NOTE`: PyTorch's own default there is AOTriton, which memmodel does
    not model).

    The choice depends on the head dim (and the dtype and GPU), not on the other sizes. A grid
    whose head dims PyTorch runs with different kernels is refused: evaluate its head dims
    apart (:func:`default_by_head_dim` says which kernel each gets)."""
    choices = default_by_head_dim(workload, profile)
    distinct = dict.fromkeys(choices.values())
    if len(distinct) == 1:
        return next(iter(distinct))
    kernels = ", ".join(f"d={d}: {impl}" for d, (impl, _) in choices.items())
    raise WorkloadError(
        f"--impl auto: PyTorch runs different kernels for the head dims of this grid ({kernels}); "
        "evaluate them apart, or name one with --impl"
    )


def default_by_head_dim(workload: Workload, profile: Profile | None = None) -> dict[int, tuple[str, str]]:
    """:func:`default_for` for each head dim of ``workload`` (one for a single workload)."""
    # sorted(set(...)), not np.unique: numpy's set routines cost ~20 ms to load, which a single
    # `memmodel compare` would pay at start-up
    if workload.d_v is not None:  # V's head dim apart: PyTorch's rules for (d, d_v) pairs
        gqa = bool(np.any(np.asarray(workload.group) > 1))
        return {d: _default_dv(d, dv, workload.dtype, profile, gqa) for d, dv in _dim_pairs(workload)}
    ds = sorted({int(x) for x in np.asarray(workload.d).ravel().tolist()})
    return {d: _default_one(d, workload.dtype, profile) for d in ds}


#: what ``--impl auto`` warns where PyTorch falls back to its math path (``sdpa-math``)
MATH_FALLBACK_WARNING = (
    "PyTorch's scaled_dot_product_attention falls back to its math path here (no fused backend takes this shape): "
    "Q, K and V cast to fp32, K and V copied to every query head, fp32 products and softmax; an MLA decode kernel "
    "(--impl flashmla: FlashInfer's or FlashMLA's) reads the latent cache once and costs far less"
)


def _default_dv(d: int, d_v: int, dtype: str, profile: Profile | None, gqa: bool) -> tuple[str, str]:
    """PyTorch's pick with V's head dim apart (``sdp_utils.cpp``): flash needs one head dim for
    Q, K, V (``check_head_dim_size_flash``); cuDNN takes d, d_v up to 256 at fp16/bf16 on sm90
    (measured on an H200, torch 2.11: d 192 / d_v 128 runs cuDNN's ``sm90 ... flash_fprop_wgmma``
    kernels); the memory-efficient kernel takes d ≠ d_v but no GQA (its dense constraints:
    ``check_batch_size_and_num_heads_dense<false>``), and past a head dim of 128 its variant
    accumulates O in global memory (not modelled); otherwise the math path (measured on the absorbed
    MLA decode shape: 16 query heads on one K/V head, d 576, d_v 512)."""
    if getattr(profile, "vendor", None) == "AMD":
        return "paper", "CK/aiter's kernels with V's head dim apart are not modelled: showing the paper's algorithm"
    cap = _capability(profile)
    cudnn_ok = cap is not None and cap >= 9.0 and dtype in ("fp16", "bf16") and max(d, d_v) <= 256
    if cudnn_ok and _unsupported("sdpa-cudnn", d, dtype, profile) is None:
        return "sdpa-cudnn", (
            f"PyTorch's scaled_dot_product_attention runs sdpa-cudnn for d {d} / d_v {d_v} on this GPU (its flash "
            "backend needs one head dim for Q, K and V; measured on an H200 with torch 2.11: cuDNN's sm90 "
            "flash_fprop_wgmma kernels at d 192 / d_v 128)"
        )
    if not gqa and _unsupported("sdpa-efficient", max(d, d_v), dtype, profile) is None:
        if max(d, d_v) <= 128:
            return "sdpa-efficient", (
                f"PyTorch's scaled_dot_product_attention runs sdpa-efficient for d {d} / d_v {d_v} on this GPU "
                "(cuDNN and flash do not take it)"
            )
        return "paper", (
            "PyTorch would run its memory-efficient kernel, whose variant past a head dim of 128 accumulates O in "
            "global memory (not modelled): showing the paper's algorithm instead"
        )
    return "sdpa-math", MATH_FALLBACK_WARNING


#: Why ``--impl auto`` picks ``ck`` on an AMD GPU
ROCM_DEFAULT_NOTE = (
    "PyTorch on ROCm runs scaled_dot_product_attention's flash backend: AOTriton's kernel by default, "
    "CK's FMHA (aiter's assembly kernels on gfx942/gfx950) with TORCH_ROCM_FA_PREFER_CK=1 "
    "(torch.backends.cuda.preferred_rocm_fa_library); memmodel models CK's, not AOTriton's: ck"
)


#: why ``--impl auto`` shows the paper's algorithm for fp8 inputs
FP8_AUTO_NOTE = (
    "PyTorch's scaled_dot_product_attention takes no fp8 inputs: showing the paper's algorithm at the fp8 peak "
    "(fp8 kernels: --impl fa3 on Hopper, sdpa-cudnn for cuDNN's fp8 graph, fa4 on Blackwell, ck on AMD)"
)


def _default_one(d: int, dtype: str, profile: Profile | None) -> tuple[str, str]:
    if dtype == "fp8":
        return "paper", FP8_AUTO_NOTE
    if getattr(profile, "vendor", None) == "AMD":
        why = _unsupported("ck", d, dtype, profile)
        if why is None:
            return "ck", ROCM_DEFAULT_NOTE
        # NVIDIA's kernels are not built for CDNA, and PyTorch's ROCm default (AOTriton) is not modelled
        return "paper", f"{why}; PyTorch's ROCm kernels (AOTriton) are not modelled: showing the paper's algorithm"
    cap = _capability(profile)
    order = (
        ("sdpa-cudnn", "sdpa-flash", "sdpa-efficient")
        if cap is not None and cap >= 9.0
        else (
            "sdpa-flash",
            "sdpa-efficient",
        )
    )
    for impl in order:
        if _unsupported(impl, d, dtype, profile) is None:
            if impl == "sdpa-efficient" and d > 128:
                return "paper", (
                    "PyTorch would run its memory-efficient kernel, whose variant for d > 128 accumulates O in "
                    "global memory (not modelled): showing the paper's algorithm instead"
                )
            return impl, f"PyTorch's scaled_dot_product_attention runs {impl} for this workload and GPU"
    return "paper", "no fused PyTorch kernel takes this workload: showing the paper's algorithm"


def kernel_workload(workload: Workload, impl: str | None) -> Workload:
    """The workload as ``impl``'s kernel sees it: decoding with GQA (one query row, several
    query heads per K/V head), FlashAttention-2 (``flash_api.cpp``: seqlenq_ngroups_swapped)
    and cuDNN (its decode kernels take 16-row tiles) pack the G query heads of a group as G
    rows of their K/V head's Q block: heads = K/V heads, N = G (FA4 at every length, not causal:
    N = N·G). Q, O and the logsumexp keep
    their bytes; each K/V head is read by one CTA row, not G."""
    spec = get(impl)
    if spec is None or not spec.packs_gqa_decode or workload.causal:
        return workload
    n, group = np.asarray(workload.n), np.asarray(workload.group)
    pack = ((n == 1) | spec.packs_gqa) & (group > 1)
    if not np.any(pack):
        return workload
    if not workload.is_grid:
        return workload.with_(
            n=int(workload.n) * int(workload.group), heads=int(workload.kv_heads_), n_kv=workload.n_kv_
        )
    new_n = np.where(pack, n * group, n)
    new_heads = np.where(pack, np.asarray(workload.kv_heads_), np.asarray(workload.heads))
    return workload.with_(n=new_n, heads=new_heads, n_kv=workload.n_kv_)


#: query rows of cuDNN's decoding kernels (``..._16x128x128_1x4x1_...`` for one query row per
#: head on an H200)
DECODE_ROWS = 16


def workload_tiles(
    impl: str, workload: Workload, profile: Profile | None, block_q: Any, block_kv: Any
) -> tuple[Any, Any]:
    """:func:`tiles` for every head dim of ``workload`` (a grid: per element): the kernel's
    compile-time tiles, which it computes whole even where the sequence is shorter (the
    traffic counts only the rows and keys that exist: :func:`memmodel.traffic.flash.block_sizes`
    clamps the blocks to the sequence)."""
    causal, dropout = bool(workload.causal), float(workload.dropout)
    workload = kernel_workload(workload, impl)  # decoding with GQA: the group's heads are the rows
    if impl == "fa1":  # its key block depends on the keys too (fa1_block_kv)
        bkv_fa1 = per_element(
            lambda d, n_kv: block_kv or fa1_block_kv(int(padded_head_dim(impl, d)), n_kv), workload.d, workload.n_kv_
        )
        return block_q or FA1_ROWS, bkv_fa1
    if impl == "fa4":  # one Q tile where the packed rows fit one (q_stage = 1)
        bq_fa4 = per_element(
            lambda d, n: block_q or fa4_tiles(int(padded_head_dim(impl, d)), n)[0], workload.d, workload.n
        )
        return bq_fa4, block_kv or FA4_TILE
    local = workload.window is not None

    def at(d: int) -> tuple[int, int]:
        return tiles(
            impl, d, causal, block_q, block_kv, dropout=dropout, profile=profile, dtype=workload.dtype, local=local
        )

    if not workload.is_grid:
        bq, bkv = at(int(workload.d))
        if impl == "sdpa-cudnn" and block_q is None and int(workload.n) <= DECODE_ROWS:
            bq = DECODE_ROWS
        return bq, bkv
    d = np.asarray(workload.d)
    bq_arr = np.zeros(d.shape, dtype=np.int64)
    bkv_arr = np.zeros(d.shape, dtype=np.int64)
    for value in np.unique(d):
        bq, bkv = at(int(value))
        bq_arr = np.where(d == value, bq, bq_arr)
        bkv_arr = np.where(d == value, bkv, bkv_arr)
    if impl == "sdpa-cudnn" and block_q is None:
        bq_arr = np.where(np.asarray(workload.n) <= DECODE_ROWS, DECODE_ROWS, bq_arr)
    return _scalar_if_uniform(bq_arr), _scalar_if_uniform(bkv_arr)


def per_head_dim(d: Any, fn: Any) -> Any:
    """``fn(d)`` for one head dim, or for each element of an array of them (evaluated once per
    distinct value); an array only where the values differ."""
    return per_element(fn, d)


def per_element(fn: Any, *values: Any) -> Any:
    """``fn(*values)`` for integers, or for each element of arrays that broadcast together
    (evaluated once per distinct combination): an int where the results agree, else an int64
    array; None where ``fn`` gives None everywhere (an array may not mix None and numbers)."""
    if not any(np.ndim(v) for v in values):
        return fn(*(int(v) for v in values))
    arrays = np.broadcast_arrays(*(np.asarray(v, dtype=np.int64) for v in values))
    unique, inverse = _distinct_rows([a.ravel() for a in arrays])
    results = [fn(*row) for row in unique]
    if len(set(results)) == 1:
        return results[0]
    if any(r is None for r in results):
        raise ValueError("per_element: fn gives None for some elements and a number for others")
    return np.asarray(results, dtype=np.int64)[inverse].reshape(arrays[0].shape)


#: distinct combinations :func:`_distinct_rows` finds by masking before it sorts instead
_FEW_ROWS = 32


def _distinct_rows(columns: list[np.ndarray]) -> tuple[list[tuple[int, ...]], np.ndarray]:
    """The distinct rows of equally long int64 ``columns`` (as tuples of ints) and each
    element's index among them. A grid's head dims and tiles take a handful of values, so they
    are peeled off one at a time by masking (a few passes over the columns); past
    :data:`_FEW_ROWS` of them the rest goes to ``np.unique`` (a sort)."""
    size = columns[0].size
    inverse = np.empty(size, dtype=np.int64)
    todo = np.arange(size)
    rows: list[tuple[int, ...]] = []
    while todo.size and len(rows) < _FEW_ROWS:
        row = tuple(int(c[todo[0]]) for c in columns)
        same = np.ones(todo.size, dtype=bool)
        for c, v in zip(columns, row):
            same &= c[todo] == v
        inverse[todo[same]] = len(rows)
        rows.append(row)
        todo = todo[~same]
    if todo.size:
        rest, where = np.unique(np.stack([c[todo] for c in columns], axis=1), axis=0, return_inverse=True)
        inverse[todo] = len(rows) + where.ravel()
        rows += [tuple(int(x) for x in r) for r in rest]
    return rows, inverse


def workload_occupancy(impl: str, workload: Workload, block_q: Any, block_kv: Any, profile: Profile | None) -> Any:
    """:func:`occupancy` for each head dim and tile of ``workload``, no more than the SM's
    shared memory holds tiles for. None (the model's own rule) where the implementation fixes
    none; on a grid where it fixes one for some rows only, the others get the model's rule
    (:func:`memmodel.traffic.blocks.ctas_per_sm`), so every row has what it has alone."""
    from .traffic.blocks import ctas_per_sm

    sram = int(_smem_per_sm(profile))
    e = workload.element_bytes

    def one(d: int, bq: int, bkv: int) -> int | None:
        ctas = occupancy(impl, d, bq, float(workload.dropout), profile)
        if ctas is None:
            return None
        if impl == "sdpa-cudnn" and bq <= DECODE_ROWS:
            return ctas  # read off Nsight Compute at d = 128 and 256: its K/V stages are not two whole tiles
        tile = (bq + 2 * bkv) * d * e
        return max(1, min(ctas, sram // max(tile, 1)))

    def filled(d: int, bq: int, bkv: int) -> int:
        ctas = one(d, bq, bkv)
        return ctas if ctas is not None else int(ctas_per_sm((bq + 2 * bkv) * d * e, _smem_per_sm(profile)))

    fixed = per_element(lambda *x: one(*x) or 0, workload.d, block_q, block_kv)  # 0: none fixed
    if np.ndim(fixed) == 0:
        return fixed or None
    return per_element(filled, workload.d, block_q, block_kv) if np.any(fixed == 0) else fixed


def _scalar_if_uniform(arr: np.ndarray) -> Any:
    return int(arr.flat[0]) if arr.size and arr.min() == arr.max() else arr
