"""One plan per tiled algorithm: how an implementation runs a workload on a GPU.

:func:`plan_tiled` turns (workload, profile, options) into everything the traffic rules,
the timing and the caveats read: the workload as the kernel sees it, the head dim it runs
at, its blocks and tile context, its splits, the L2 as its kernels see it and what the
rules find there (:class:`~memmodel.traffic.facts.TiledFacts`). It is built once per
comparison; nothing downstream derives these again.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import numpy as np

from . import implementations, intmath
from .errors import WorkloadError
from .frozen import frozen
from .implementations import (
    Implementation,
    fp8_tile_fields,
    kernel_workload,
    kv_cache_path,
    padded_head_dim,
    smem_reads,
)
from .intmath import IntLike
from .options import SPLITS_AUTO, Options
from .traffic import l2 as l2m
from .traffic.blocks import (
    BlockSizes,
    TileContext,
    block_sizes,
    fa2_local_loop_ctas,
    tile_context,
    tile_footprint_bytes,
)
from .traffic.decode import CUDNN_DECODE_TILE_ROWS, choose_splits, cudnn_decode_resident, cudnn_decode_value_ctas
from .traffic.facts import TiledFacts
from .traffic.flash import fa1, fa2, forward_facts
from .traffic.ledger import AlgorithmTraffic
from .traffic.quant import with_kv_cast
from .workload import Workload

if TYPE_CHECKING:  # pragma: no cover
    from .backward import BackwardPlan
    from .hardware import Profile


def base_l2(profile: Profile, mode: str) -> l2m.L2:
    """The L2 as any kernel on ``profile`` sees it in ``mode``: its capacities and its measured
    cross-wave reuse curve (``memory.l2.reuse``), no schedule's own curves."""
    from .traffic.reuse import curve_from_profile

    reuse = curve_from_profile(profile.figures.get("memory.l2.reuse"), profile.l2.capacity_bytes)
    last = profile.last_level  # the MALL where the GPU has one: its misses are the HBM traffic
    return l2m.L2(mode, last.usable_capacity_bytes, profile.sm_count, last.capacity_bytes, reuse)


def xcd_l2(profile: Profile, mode: str) -> l2m.L2 | None:
    """The L2 as one XCD's slice sees a kernel's requests on a GPU with a MALL (:mod:`.traffic.mall`);
    None where the profile has no MALL."""
    if profile.mall is None:
        return None
    return l2m.xcd_view(mode, profile.l2_slice_bytes, profile.l2_xcds, profile.sm_count)


def with_mall(traffic: AlgorithmTraffic, view: l2m.L2 | None, build: Any) -> AlgorithmTraffic:
    """``traffic`` with its ``mall`` rows: ``build(view)`` is the same ledger against the XCD view
    (:func:`xcd_l2`); ``traffic`` as it is where ``view`` is None."""
    if view is None:
        return traffic
    from .traffic.mall import with_mall as merge

    return merge(traffic, build(view))


def scheduled_l2(l2: l2m.L2, profile: Profile, causal_schedule: str | None) -> l2m.L2:
    """``l2`` with what ``causal_schedule`` (an implementation's, :data:`l2m.CAUSAL_CURVES`) adds:
    the profile's causal re-read curves measured on that schedule, where it has them, and for
    FlashAttention-2's grid its waves' drift, its GQA share and its rows of batches."""
    from .traffic.reuse import curve_from_profile

    def curves(prefix: str | None) -> dict[int, Any] | None:
        found = {
            d: c
            for d in l2m.CAUSAL_CURVE_DIMS
            if prefix
            and (c := curve_from_profile(profile.figures.get(f"memory.l2.{prefix}_d{d}"), profile.l2.capacity_bytes))
        }
        return found or None

    causal = several = gqa = None
    if causal_schedule in l2m.CAUSAL_CURVES:
        causal = curves(l2m.CAUSAL_CURVES[causal_schedule].prefix)
        found = {n: c for n, prefix in l2m.CAUSAL_CURVES[causal_schedule].several if (c := curves(prefix))}
        several = found if causal and found else None
        gqa = curves(l2m.CAUSAL_CURVES[causal_schedule].gqa) if causal else None
    fa2_grid = causal_schedule == "fa2"  # drift and the GQA share were measured on its waves
    return dataclasses.replace(
        l2,
        causal=causal,
        causal_schedule=causal_schedule if causal else None,
        causal_several=several,
        causal_gqa=gqa,
        drift=profile.figures.get("memory.l2.wave_drift") if fa2_grid else None,
        gqa_others=profile.figures.get("memory.l2.causal_gqa_others") if fa2_grid else None,
        batch_rows=fa2_grid,
    )


def l2_context(profile: Profile, mode: str, causal_schedule: str | None = None) -> l2m.L2:
    """The L2 as the traffic rules see it (:func:`base_l2`), with ``causal_schedule``'s own
    figures (:func:`scheduled_l2`)."""
    return scheduled_l2(base_l2(profile, mode), profile, causal_schedule)


@frozen
class TiledPlan:
    """How one tiled algorithm runs one workload (or a grid of them) on one GPU."""

    #: the workload as the caller gave it, and as the kernel sees it (decoding with GQA: the
    #: group's heads as rows, :func:`memmodel.implementations.kernel_workload`)
    given: Workload
    workload: Workload
    profile: Profile
    options: Options
    #: the implementation's spec (None: the paper's algorithm)
    spec: Implementation | None
    #: the head dim the kernel runs at (its built one ≥ d)
    exec_d: IntLike
    blocks: BlockSizes
    tile: TileContext
    #: K/V splits of the forward (1: the plain kernel)
    splits: IntLike
    #: the L2 as any kernel sees it (standard attention reads this one), and as this
    #: algorithm's kernels see it (its causal schedule's curves, its drift)
    l2_base: l2m.L2
    l2: l2m.L2
    #: what the forward's rules find (knee, waves, drift, GQA row, causal live K/V)
    facts: TiledFacts
    #: the implementation's own backward kernels (None: forward only, or the paper's backward)
    backward: BackwardPlan | None = None
    #: the L2 as one XCD's slice sees the requests (:func:`xcd_l2`), for the ledger's ``mall`` rows;
    #: None where the profile has no MALL or the caller replaced the L2
    xcd: l2m.L2 | None = None
    #: an FP8 K/V cache the implementation does not read: cast to the dtype first
    #: (:mod:`memmodel.traffic.quant`), its kernels reading the copies (``workload`` has them)
    kv_cast: bool = False

    @property
    def implementation(self) -> str | None:
        """The implementation the time model applies (None for the paper's algorithm)."""
        return self.options.model_implementation


#: the architectures cuDNN's decode grid (:func:`~memmodel.traffic.decode.cudnn_decode_splits`) was
#: read on: a kernel's launch rule stays on its architecture (Blackwell's cuDNN runs kernels of its
#: own; there FlashAttention-2's heuristic stands in, as before)
CUDNN_DECODE_ARCHS = ("hopper",)


def decode_split_rule(spec: Any, profile: Profile) -> str:
    """Whose rule picks a decode's split count for implementation ``spec`` on ``profile``."""
    rule = spec.decode_splits if spec is not None else "fa2"
    return rule if rule != "cudnn" or profile.arch_family in CUDNN_DECODE_ARCHS else "fa2"


def plan_tiled(
    workload: Workload,
    profile: Profile,
    options: Options,
    l2: l2m.L2 | None = None,
    *,
    backward_ctas_per_sm: int | None = None,
    varlen: bool = False,
) -> TiledPlan:
    """The plan of ``options``' tiled algorithm on ``workload``; ``l2`` replaces the profile's
    L2 (e.g. none at all); ``backward_ctas_per_sm`` overrides the backward kernel's occupancy;
    ``varlen``: ``workload`` is one document of a varlen launch (:func:`packed_plans`)."""
    impl = options.model_implementation
    spec = implementations.get(impl)
    # the split count follows the workload as the caller gives it (decoding: n = 1), then the
    # kernel sees it as it runs it (decoding with GQA: the group's heads as rows)
    prefill = bool(spec is not None and spec.splits_prefill)
    # --splits auto: the implementation's own heuristic (FA4's, asked for); a count: that count
    given = None if options.splits == SPLITS_AUTO else options.splits
    splits: IntLike = (
        given
        if given is not None
        else choose_splits(workload, profile.sm_count, prefill=prefill, rule=decode_split_rule(spec, profile))
    )
    kernel_w = kernel_workload(workload, impl)
    kv_cast = workload.kv_dtype is not None and kv_cache_path(impl, workload.kv_dtype) == "cast"
    if kv_cast:
        kernel_w = kernel_w.with_(kv_dtype=None)  # the attention kernels read the 16-bit copies
    if workload.dtype == "fp8" and impl == "sdpa-cudnn" and workload.out_dtype is None:
        kernel_w = kernel_w.with_(out_dtype="fp8")  # cuDNN's Hopper fp8 graph writes O in fp8 (its io type)
    exec_d = padded_head_dim(impl, kernel_w.d)
    # V's head dim as the kernel runs it (padded as Q's; the MLA kernel's 512 is its own)
    exec_dv = None
    if kernel_w.d_v is not None:
        exec_dv = kernel_w.d_v if impl == "flashmla" else padded_head_dim(impl, kernel_w.d_v)
    sram = profile.sram.capacity_per_sm_bytes
    if spec is not None and not spec.sram_footprint and options.block_q is not None and options.block_kv is not None:
        # the kernel stages its tiles its own way (CK/aiter: Q in registers): no footprint check
        footprint = tile_footprint_bytes(options.block_q, options.block_kv, kernel_w)
        sram = max(float(sram), float(np.max(np.asarray(intmath.to_float(footprint)))))
    try:
        blocks = block_sizes(kernel_w, sram, options.block_q, options.block_kv)
    except WorkloadError as err:
        # an implementation's own tiles at a head dim it does not run: say that first, not only the SRAM
        why = implementations.head_dim_unsupported(impl, int(np.max(np.asarray(workload.d)))) if spec else None
        if why:
            raise WorkloadError(f"--impl {impl}: {why}; {err}, or --impl paper for the paper's algorithm") from None
        raise
    ctx = tile_context(
        kernel_w,
        blocks,
        profile.sm_count,
        profile.sram.capacity_per_sm_bytes,
        options.ctas_per_sm,
        options.kv_order,
        exec_d=exec_d,
        whole_tiles=impl is not None,
        smem_reads=smem_reads(impl, blocks.block_q, kernel_w.d, kernel_w.dropout, profile),
        tile=(options.block_q, options.block_kv)
        if impl is not None and options.block_q is not None and options.block_kv is not None
        else None,
        exec_dv=exec_dv,
        fa2_masking=("varlen" if varlen else "shape") if impl == "sdpa-flash" else None,
    )
    if kernel_w.window is not None and spec is not None and spec.masks_every_local_block:
        ctx = dataclasses.replace(ctx, local_blocks=ctx.visited)  # its forward masks every block it visits
        if impl == "sdpa-flash":  # its CTAs past their masking steps run a second loop
            ctx = dataclasses.replace(ctx, local_loop_ctas=fa2_local_loop_ctas(kernel_w, blocks))
    if impl == "sdpa-flash" and not kernel_w.dropout:
        spilled = _fa2_spill_bytes(kernel_w, blocks, profile, varlen)
        if spilled is not None:
            ctx = dataclasses.replace(ctx, spill_bytes_per_cta=spilled)
    if impl == "fa4":
        # its CTA pairs (2-CTA tcgen05) share each K/V tile load, per element on a grid
        pair = implementations.per_element(
            lambda d, rows, group: implementations.fa4_forward_pair(
                d, bool(kernel_w.causal), rows, group, kernel_w.window is not None
            ),
            exec_d,
            kernel_w.n,
            workload.group,
        )
        if np.any(np.asarray(pair) > 1):
            ctx = dataclasses.replace(ctx, cta_pair=pair)
    if decode_split_rule(spec, profile) == "cudnn" and np.any(np.asarray(workload.n) == 1):
        # cuDNN's decode above d 128: two CTAs a split, each half of O's columns (traffic.decode)
        halves = np.where(np.asarray(workload.n) == 1, np.asarray(cudnn_decode_value_ctas(exec_d)), 1)
        ctx = dataclasses.replace(ctx, value_ctas=int(halves) if halves.ndim == 0 else halves.astype(np.int64))
        decode = np.asarray(workload.n) == 1

        def as_ints(x: np.ndarray) -> Any:
            return int(x) if x.ndim == 0 else x.astype(np.int64)

        if not options.backward:
            # and at one split the same kernel, writing O itself (no combine): Nsight on the H200,
            # validation/h200/cudnn-decode-rate-probe (batch x K/V heads past half the SMs)
            ctx = dataclasses.replace(ctx, direct_decode=as_ints(decode))
        # its 16-row tiles, and its own occupancy (Nsight's limits on the H200), not the forward tile's
        per_sm = np.where(decode, np.asarray(cudnn_decode_resident(exec_d)), np.asarray(ctx.ctas_per_sm))
        ctx = dataclasses.replace(
            ctx,
            decode_tile_rows=as_ints(np.where(decode, CUDNN_DECODE_TILE_ROWS, 0)),
            ctas_per_sm=as_ints(per_sm),
            concurrent=as_ints(np.where(decode, per_sm * profile.sm_count, np.asarray(ctx.concurrent))),
        )
    fp8 = fp8_tile_fields(impl, kernel_w)  # FA3's V transpose, scale tensors, in-kernel dequantisation
    if fp8:
        ctx = dataclasses.replace(ctx, **fp8)
    base = base_l2(profile, options.l2)
    # the causal curves measured on this implementation's schedule and walk (FA2's from the diagonal down)
    schedule = spec.causal_schedule if spec is not None and options.kv_order == "reverse" else None
    used = l2 or scheduled_l2(base, profile, schedule)
    if options.tiled == "fa1" and impl == "fa1":
        fa1_splits = fa1_grid_splits(kernel_w, profile, ctx.ctas_per_sm)
        facts = TiledFacts(ctx.blocks, ctx.ctas_per_sm, ctx.concurrent, fa1_splits)
        return TiledPlan(workload, kernel_w, profile, options, spec, exec_d, blocks, ctx, fa1_splits, base, used, facts)
    if options.tiled == "fa1":
        facts = TiledFacts(ctx.blocks, ctx.ctas_per_sm, ctx.concurrent)
        return TiledPlan(workload, kernel_w, profile, options, spec, exec_d, blocks, ctx, 1, base, used, facts)
    if given is not None:
        from .traffic.decode import split_block_kv

        block = implementations.FA4_TILE if impl == "fa4" else split_block_kv(kernel_w.d)
        blocks_kv = np.asarray(intmath.ceil_div(kernel_w.n_kv_, block))
        if np.any(blocks_kv < given):
            most = int(np.min(blocks_kv))
            raise WorkloadError(f"--splits {given} is more than the {most} K/V blocks to split: choose at most {most}")
    if spec is not None and not spec.splits_kv and given is None:
        # FA4's flash_attn_func: num_splits=1 unless asked; asked for its heuristic, that
        splits = fa4_auto_splits(kernel_w, blocks.block_q, profile) if options.splits == SPLITS_AUTO else 1
    elif given is None and np.any(by_forward := implementations.splits_by_forward(impl, blocks.block_q)):
        # cuDNN's SM100 forward over prefill rows: its planner's split rule (a stand-in for its
        # backend's); a grid's decoding rows keep the decode rule's
        mine = cudnn_sm100_auto_splits(kernel_w, blocks.block_q, profile)
        splits = mine if np.all(by_forward) else np.where(by_forward, mine, splits).astype(np.int64)
    if options.backward and not prefill:
        # training runs the plain forward kernel (it must save the logsumexp); FlashAttention-2
        # splits its training forward as any other (the combine writes the logsumexp)
        splits = 1
    if intmath.is_array(splits) and np.all(np.asarray(splits) == 1):
        splits = 1
    if impl == "fa4" and np.any(np.asarray(splits) > 1):
        # a split forward runs no CTA pairs (``use_2cta_instrs`` asks ``not is_split_kv``)
        pair = np.where(np.asarray(splits) > 1, 1, np.asarray(ctx.cta_pair))
        ctx = dataclasses.replace(ctx, cta_pair=int(pair) if pair.ndim == 0 else pair.astype(np.int64))
    facts = forward_facts(ctx, used, splits)
    backward = None
    if options.backward:
        from .backward import backward_plan

        # FA4 packs GQA in its forward only (its backward sets pack_gqa = False)
        seen = workload if spec is not None and spec.packs_gqa else kernel_w
        backward = backward_plan(seen, profile, options, ctas_per_sm=backward_ctas_per_sm)
    return TiledPlan(
        workload,
        kernel_w,
        profile,
        options,
        spec,
        exec_d,
        blocks,
        ctx,
        splits,
        base,
        used,
        facts,
        backward,
        xcd_l2(profile, options.l2) if l2 is None else None,
        kv_cast,
    )


def fa4_auto_splits(kernel_w: Workload, block_q: IntLike, profile: Profile) -> IntLike:
    """FA4's split count when asked for its heuristic (:func:`~memmodel.implementations.fa4_num_splits`),
    per element on a grid: its CTAs (B × heads × Q tiles of ``block_q`` packed rows) against the
    K/V blocks of 128 keys it loads (a sliding window's: the window and one Q tile)."""
    loaded = kernel_w.n_kv_
    if kernel_w.window is not None:
        loaded = intmath.minimum(loaded, intmath.add(kernel_w.window, implementations.FA4_TILE))
    m_blocks = intmath.mul(kernel_w.batch, kernel_w.heads, intmath.ceil_div(kernel_w.n, block_q))
    kv_blocks = intmath.ceil_div(loaded, implementations.FA4_TILE)
    return implementations.per_element(
        lambda m, kv: implementations.fa4_num_splits(m, profile.sm_count, kv), m_blocks, kv_blocks
    )


def cudnn_sm100_auto_splits(kernel_w: Workload, block_q: IntLike, profile: Profile) -> IntLike:
    """cuDNN's SM100 forward split count (:func:`~memmodel.implementations.cudnn_sm100_splits`),
    per element on a grid: its CTAs (B × heads × Q tiles of ``block_q`` rows) against the K/V
    tiles of 128 keys, the combine over B × heads × N rows; 1 on decoding rows (N ≤ 16), which
    keep the decode rule."""
    ctas = intmath.mul(kernel_w.batch, kernel_w.heads, intmath.ceil_div(kernel_w.n, block_q))
    kv_tiles = intmath.ceil_div(kernel_w.n_kv_, 128)
    rows = intmath.mul(kernel_w.batch, kernel_w.heads, kernel_w.n)
    return implementations.per_element(
        lambda c, kv, r, n: (
            1 if n <= implementations.DECODE_ROWS else implementations.cudnn_sm100_splits(c, kv, r, profile.sm_count)
        ),
        ctas,
        kv_tiles,
        rows,
        kernel_w.n,
    )


def fa1_grid_splits(w: Workload, profile: Profile, ctas_per_sm: IntLike) -> IntLike:
    """The query splits of flash-attn v1's forward grid (B × H × splits) on ``profile``
    (:func:`~memmodel.implementations.fa1_forward_splits`), per element on a grid."""
    return implementations.per_element(
        lambda bh, n, occ: implementations.fa1_forward_splits(bh, n, profile.sm_count, occ),
        intmath.mul(w.batch, w.heads),
        w.n,
        ctas_per_sm,
    )


def fa1_backward_grid(w: Workload, profile: Profile, block_kv: IntLike) -> tuple[IntLike, IntLike]:
    """flash-attn v1's backward on ``profile``: its CTAs per SM (shared memory) and its K/V
    splits (:func:`~memmodel.implementations.fa1_backward_splits`), per element on a grid."""
    e = w.element_bytes
    ctas = implementations.per_element(
        lambda d, bkv: implementations.fa1_backward_ctas(int(padded_head_dim("fa1", d)), bkv, profile, e),
        w.d,
        block_kv,
    )
    splits = implementations.per_element(
        lambda bh, n_kv, bkv, occ: implementations.fa1_backward_splits(
            bh, n_kv, bkv, profile.sm_count, occ, bool(w.causal)
        ),
        intmath.mul(w.batch, w.heads),
        w.n_kv_,
        block_kv,
        ctas,
    )
    return ctas, splits


def planned_traffic(plan: TiledPlan) -> AlgorithmTraffic:
    """The tiled algorithm's ledger as ``plan`` says: the forward kernels and, with the
    options' backward, the implementation's own backward kernels (the paper's otherwise); on a
    GPU with a MALL, with its ``mall`` rows (:mod:`.traffic.mall`)."""
    return with_mall(_planned_traffic(plan), plan.xcd, lambda view: _planned_traffic(_viewed(plan, view)))


def _viewed(plan: TiledPlan, view: l2m.L2) -> TiledPlan:
    """``plan`` with the XCD view as its L2 (and the forward's findings there)."""
    facts = plan.facts
    if not (plan.options.tiled == "fa1"):
        facts = dataclasses.replace(forward_facts(plan.tile, view, plan.splits), backward=plan.facts.backward)
    return dataclasses.replace(plan, l2_base=view, l2=view, facts=facts, xcd=None)


def _planned_traffic(plan: TiledPlan) -> AlgorithmTraffic:
    options = plan.options
    if plan.implementation in ("flashmla", "sdpa-math"):
        return _mla_traffic(plan)
    if plan.spec is not None and plan.spec.paged:
        return paged_traffic(plan)
    if options.tiled == "fa1" and plan.implementation == "fa1":
        from .traffic.fmha import fa1_kernels

        bwd_ctas, bwd_splits = (
            fa1_backward_grid(plan.workload, plan.profile, plan.blocks.block_kv) if options.backward else (1, 1)
        )
        return fa1_kernels(
            plan.tile,
            plan.l2,
            splits=plan.splits,
            backward=options.backward,
            backward_splits=bwd_splits,
            backward_ctas_per_sm=bwd_ctas,
            sm_count=plan.profile.sm_count,
        )
    if options.tiled == "fa1":
        return fa1(plan.tile, plan.l2, backward=options.backward)
    # FA4 and cuDNN's SM100 kernel split K/V with the forward kernel itself (each CTA a chunk), not
    # FA2's split kernel
    own = implementations.splits_by_forward(plan.implementation, plan.blocks.block_q)
    combine = "cudnn_combine" if plan.implementation == "sdpa-cudnn" else "fa4_combine"
    forward = fa2(plan.tile, plan.l2, splits=plan.splits, facts=plan.facts, split_by_forward=own, combine=combine)
    cudnn = plan.implementation == "sdpa-cudnn"
    if cudnn:  # the SDPA call's memsets before cuDNN's kernels
        from .traffic.flash_backward import with_cudnn_memsets

        prefill = np.asarray(plan.given.n) > 1  # the user's rows (GQA packs a decode's group as rows)
        forward = dataclasses.replace(forward, kernels=tuple(with_cudnn_memsets(list(forward.kernels), [], prefill)[0]))
    if plan.kv_cast:
        forward = with_kv_cast(forward, plan.given)
    if not options.backward:
        return forward
    from .backward import backward_kernels

    kernels, found = backward_kernels(plan)
    if cudnn:
        from .traffic.flash_backward import with_cudnn_memsets

        kernels = with_cudnn_memsets([], list(kernels))[1]
    facts = dataclasses.replace(plan.facts, backward=found)
    return AlgorithmTraffic(
        forward.name, forward.variant, forward.kernels + tuple(kernels), facts.to_params(), facts=facts
    )


def paged_kernel_choice(plan: TiledPlan) -> str:
    """Which of its kernels a paged implementation runs the plan's workload with: FlashInfer
    ``decode`` (one query token: its CUDA-core kernel where it is built for the group size),
    ``decode_tc`` (one token, other groups: the tensor-core path, FA2-style), ``prefill_sm90``
    (FA3-style, sm90, fp16/bf16 at its head dims) or ``prefill`` (FA2-style); flex ``decode``
    (fewer than 128 query rows and a power-of-two group: ``_use_flex_decoding``) or ``forward``.
    A grid that mixes two is refused: evaluate them apart."""
    from .traffic import paged

    w, impl = plan.workload, plan.implementation
    n, g, d = (np.asarray(x) for x in (w.n, w.group, plan.exec_d))
    if impl == "flashinfer":
        decode = n == 1
        groups = np.isin(g, paged.FLASHINFER_DECODE_GROUPS)
        hopper = implementations._capability(plan.profile) == 9.0
        fa3 = hopper & np.isin(d, paged.FLASHINFER_FA3_HEAD_DIMS) & (w.dtype in ("fp16", "bf16"))
        choice = np.where(decode, np.where(groups, "decode", "decode_tc"), np.where(fa3, "prefill_sm90", "prefill"))
        if w.kv_dtype is not None and np.any(choice != "decode"):
            raise WorkloadError(
                f"--kv-dtype {w.kv_dtype} with --impl flashinfer: an FP8 K/V cache is modelled in its CUDA-core decode "
                f"(--n 1, groups {', '.join(map(str, paged.FLASHINFER_DECODE_GROUPS))}); its tensor-core decode and "
                "prefill kernels over an FP8 cache are not"
            )
    else:
        pow2 = (g & (g - 1)) == 0
        choice = np.where((n < paged.FLEX_DECODE_MAX_Q) & pow2, "decode", "forward")
    kinds = sorted({str(x) for x in np.ravel(choice)})
    if len(kinds) > 1:
        raise WorkloadError(
            f"--impl {impl}: this grid runs different kernels ({', '.join(kinds)}): evaluate decoding "
            "(--n 1) and prefill apart"
        )
    return kinds[0]


def paged_traffic(plan: TiledPlan) -> AlgorithmTraffic:
    """A paged implementation's ledger (:mod:`memmodel.traffic.paged`): the kernels
    :func:`paged_kernel_choice` picks, with the plan's facts and the kernels' own plan as params."""
    from .traffic import paged

    w, profile, l2 = plan.workload, plan.profile, plan.l2
    sms = profile.sm_count
    choice = paged_kernel_choice(plan)
    if plan.implementation == "flashinfer":
        if choice == "decode":
            kernels, params = paged.flashinfer_decode_kernels(w, l2, sms, profile.sram.capacity_per_sm_bytes)
        elif choice == "prefill_sm90":
            kernels, params = paged.flashinfer_fa3_kernels(w, l2, sms)
        else:
            kernels, params = paged.flashinfer_fa2_kernels(w, l2, sms, decode=choice == "decode_tc")
    elif choice == "decode":
        kernels, params = paged.flex_decode_kernels(w, l2, sms)
    elif w.page_size is None:  # contiguous K/V under its block mask (none, causal, a window, documents)
        from .traffic import flex

        smem = profile.sram.capacity_per_sm_bytes
        kernels, params = flex.forward_kernels(w, l2, sms, smem)
        if plan.options.backward:
            more, found = flex.backward_kernels(w, l2, sms, smem)
            kernels, params = kernels + more, params | found
    else:
        kernels, params = paged.flex_forward_kernels(w, l2, sms, profile.sram.capacity_per_sm_bytes)
    out = plan.facts.to_params() | {k: v for k, v in params.items() if v is not None}
    return AlgorithmTraffic("tiled", "fa2", tuple(kernels), out, facts=plan.facts)


def _fa2_spill_bytes(w: Workload, blocks: Any, profile: Profile, varlen: bool) -> Any:
    """The bytes each CTA of FlashAttention-2's forward writes to HBM from its spilled registers
    (the instantiation's curve: even or not; local, causal or neither; None where the profile has none). A
    packed row (``varlen``) or lengths that are not multiples of the tiles run the kernel that is
    not ``Is_even_MN`` (``flash_fwd_launch_template.h``)."""
    figures = profile.implementation("sdpa-flash")
    if figures is None:
        return None
    bq, bkv = np.asarray(blocks.block_q), np.asarray(blocks.block_kv)
    # the probe ran PyTorch's own tiles (d ≤ 64: 128 × 128; to 128: 128 × 64): other tiles, another kernel
    own = (bq == 128) & (bkv == np.where(np.asarray(w.d) <= 64, 128, 64))
    uneven = np.asarray(varlen | (np.asarray(w.n) % bq != 0) | (np.asarray(w.n_kv_) % bkv != 0))
    local = w.window is not None  # the local kernel (Is_local)
    even_b = figures.spill_write_bytes_at(w.d, uneven=False, causal=bool(w.causal), local=local)
    uneven_b = figures.spill_write_bytes_at(w.d, uneven=True, causal=bool(w.causal), local=local)
    if even_b is None and uneven_b is None:
        return None
    picked = np.where(uneven, 0.0 if uneven_b is None else uneven_b, 0.0 if even_b is None else even_b)
    out = np.where(own, picked, 0.0)
    return np.rint(out).astype(np.int64) if np.ndim(out) else int(round(float(out)))


def packed_plans(
    workload: Workload,
    profile: Profile,
    options: Options,
    l2: l2m.L2 | None = None,
    *,
    backward_ctas_per_sm: int | None = None,
) -> list[TiledPlan]:
    """A packed row's plans, one per document (``Workload.seq_lens``): FlashAttention-2's varlen
    kernels tile each sequence from its own start (``block_info.h``: every CTA offsets Q, K, V
    by ``cu_seqlens[b]``), so no block straddles two documents; prefill never splits K/V there
    (``flash_api.cpp`` ``mha_varlen_fwd``: split-KV only for decoding or a paged cache)."""
    opts = dataclasses.replace(options, splits=1) if options.tiled == "fa2" else options
    return [
        plan_tiled(doc, profile, opts, l2, backward_ctas_per_sm=backward_ctas_per_sm, varlen=True)
        for doc in _same_length_batches(workload.documents())
    ]


def _same_length_batches(docs: list[Workload]) -> list[Workload]:
    """A packed row's documents with those of one length as one batch (in order of first
    appearance): the varlen grid (Q blocks × documents × heads) runs them as a batched launch
    runs its rows, so their K/V share the L2 as a batch's do."""
    counts: dict[int, int] = {}
    first: dict[int, Workload] = {}
    for doc in docs:
        length = int(doc.n)
        counts[length] = counts.get(length, 0) + 1
        first.setdefault(length, doc)
    return [first[length].with_(batch=count) for length, count in counts.items()]


def packed_traffic(plans: list[TiledPlan]) -> AlgorithmTraffic:
    """One launch per kernel over a packed row: each document's ledger (:func:`packed_plans`),
    their transfers and work added kernel by kernel. The grid is ⌈max length / B⌉ CTAs per
    document and head (``flash_fwd_launch_template.h``, ``flash_bwd_launch_template.h``), so a
    kernel launches documents × its longest document's CTAs; those past their document's end
    exit at once (``flash_fwd_kernel.h``, ``flash_bwd_kernel.h``) and cost only their start."""
    from .traffic.ledger import merged_kernels

    ledgers = [planned_traffic(p) for p in plans]
    longest = max(range(len(plans)), key=lambda i: int(np.max(np.asarray(plans[i].workload.n))))
    first = ledgers[longest]
    counts = [int(np.max(np.asarray(p.workload.batch))) for p in plans]  # documents of each length
    params = dict(first.params) | {"documents": sum(counts)}
    big = plans[longest]
    forward_slots = big.tile.concurrent
    backward_slots = big.backward.tile.concurrent if big.backward is not None else forward_slots

    def slots(kernel: Any) -> Any:  # the CTAs the GPU holds at once of the fused kernels (not the library ones)
        if kernel.op or not np.any(np.asarray(kernel.ctas) > 0):
            return None
        return backward_slots if kernel.pass_ == "backward" else forward_slots

    return AlgorithmTraffic(
        first.name, first.variant, merged_kernels([lg.kernels for lg in ledgers], slots, counts), params, first.facts
    )


def longest_plan(plans: list[TiledPlan]) -> TiledPlan:
    """The plan of a packed row's longest document (its tiles, occupancy and caveats)."""
    return max(plans, key=lambda p: int(np.max(np.asarray(p.workload.n))))


def _mla_traffic(plan: TiledPlan) -> AlgorithmTraffic:
    """The absorbed MLA decode kernel (FlashInfer's Hopper kernel) or PyTorch's math fallback
    (:mod:`.traffic.mla`): their own ledgers, not a tiled loop's."""
    from .traffic.ledger import param
    from .traffic.mla import TILE as MLA_TILE
    from .traffic.mla import flashinfer_mla_kernels, math_fallback_kernels, plan_arrays

    w = plan.workload
    if plan.implementation == "sdpa-math":
        kernels = math_fallback_kernels(w, plan.l2_base)
        params = plan.facts.to_params() | {"gemm_tile": 128}
        return AlgorithmTraffic("tiled", "math", tuple(kernels), params=params, facts=plan.facts)
    kernels = flashinfer_mla_kernels(w, plan.l2, plan.profile.sm_count, w.page_size or MLA_TILE)
    found = {f"mla_{k}": param(v) for k, v in plan_arrays(w, plan.profile.sm_count).items()}
    return AlgorithmTraffic(
        "tiled", "flashmla", tuple(kernels), params=plan.facts.to_params() | found, facts=plan.facts
    )
