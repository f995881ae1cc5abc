"""How to model a comparison: :class:`Options` (tiled variant, blocks, L2 mode, passes, clocks,
implementation) and :func:`options_for`, the one place that turns "implementation X on this
workload and GPU" into options, from what :mod:`memmodel.implementations` says the kernel does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from . import implementations
from .errors import WorkloadError
from .frozen import frozen
from .host import check_timing
from .implementations import CHOICES, CLOCK_MODES, IMPLEMENTATIONS, TILED_VARIANTS
from .traffic.blocks import KV_ORDERS
from .traffic.l2 import L2_MODES
from .traffic.mla import TILE as MLA_PAGE_TOKENS
from .traffic.paged import FLEX_DECODE_MAX_Q

if TYPE_CHECKING:  # pragma: no cover
    from .hardware import Profile
    from .workload import Workload


#: ``Options.splits``: the implementation's own split heuristic
SPLITS_AUTO = "auto"


@frozen
class Options:
    """How to model: the tiled variant, its blocks, the L2 mode, which passes, and the
    implementation whose tiles, instructions and measured efficiency the tiled kernel takes."""

    tiled: str = "fa2"
    block_q: int | None = None
    block_kv: int | None = None
    l2: str = "on"
    backward: bool = False
    #: K/V splits of the forward: a count, ``"auto"`` (the implementation's own heuristic where
    #: it has one it runs only when asked: FA4's ``num_splits=0``), or None (its default)
    splits: int | str | None = None
    ctas_per_sm: int | None = None
    kv_order: str = "reverse"  # how a forward CTA walks its K/V blocks: FA2 "reverse", Triton "forward"
    #: how long the GPU has been busy (:data:`memmodel.timing.CLOCKS`): benchmark, boost, sustained
    clocks: str = "benchmark"
    #: the tiled algorithm's implementation (:data:`IMPLEMENTATIONS`); None: ``paper``
    implementation: str | None = None
    #: what a predicted time is (:data:`memmodel.host.TIMINGS`): the GPU's kernels (``kernel``), a
    #: user's timer around one call (``call``), calls queued back to back (``queued``), a CUDA graph
    timing: str = "kernel"
    #: notes on how the options were chosen (e.g. "auto: PyTorch runs sdpa-flash here")
    notes: tuple[str, ...] = field(default=(), compare=False)
    #: ``ctas_per_sm`` is the implementation's own (measured), not the user's: no check
    #: against the model's tile footprint applies (cuDNN's decoding kernels hold less)
    ctas_from_implementation: bool = field(default=False, compare=False)

    def __post_init__(self) -> None:
        if self.tiled not in TILED_VARIANTS:
            raise WorkloadError(f"unknown tiled variant {self.tiled!r}: accepted are {', '.join(TILED_VARIANTS)}")
        if self.l2 not in L2_MODES:
            raise WorkloadError(f"unknown L2 mode {self.l2!r}: accepted are {', '.join(L2_MODES)}")
        for name in ("splits", "ctas_per_sm"):
            value = getattr(self, name)
            if name == "ctas_per_sm" and isinstance(value, np.ndarray):  # per grid element (by head dim)
                if value.dtype.kind not in "iu" or np.any(value < 1):
                    raise WorkloadError("ctas-per-sm must be positive integers")
                continue
            if name == "splits" and value == SPLITS_AUTO:
                continue
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                accepted = f" or {SPLITS_AUTO!r}" if name == "splits" else ""
                raise WorkloadError(f"{name.replace('_', '-')} must be a positive integer{accepted} (got {value!r})")
        if self.clocks not in CLOCK_MODES:
            raise WorkloadError(f"unknown clocks mode {self.clocks!r}: accepted are {', '.join(CLOCK_MODES)}")
        check_timing(self.timing)
        if self.kv_order not in KV_ORDERS:
            raise WorkloadError(f"unknown K/V order {self.kv_order!r}: accepted are {', '.join(KV_ORDERS)}")
        if self.implementation is not None and self.implementation not in IMPLEMENTATIONS:
            raise WorkloadError(
                f"unknown implementation {self.implementation!r}: accepted are {', '.join(IMPLEMENTATIONS)}"
            )
        if self.implementation not in (None, "paper"):
            variant = IMPLEMENTATIONS[self.implementation].variant
            if self.tiled != variant:
                raise WorkloadError(
                    f"--impl {self.implementation} runs the {variant} variant: use --tiled {variant}"
                    + (
                        " (--tiled fa1 is flash-attn v1, --impl fa1, or the paper's Algorithm 1, --impl paper)"
                        if self.tiled == "fa1"
                        else ""
                    )
                )
        if self.splits is not None and self.tiled != "fa2":
            raise WorkloadError("splits applies to the fa2 variant (split-KV); use --tiled fa2")

    @property
    def model_implementation(self) -> str | None:
        """The implementation the time model applies (None for the paper's algorithm)."""
        return None if self.implementation == "paper" else self.implementation


def options_for(
    impl: str | None,
    workload: Workload,
    profile: Profile | None = None,
    *,
    tiled: str = "fa2",
    block_q: int | None = None,
    block_kv: int | None = None,
    **rest: Any,
) -> Options:
    """Model options for implementation ``impl`` (a name, ``auto`` or None for PyTorch's
    choice, ``paper`` for the paper's algorithm) running ``workload`` on ``profile``: its
    tiles (given blocks win; no longer than the sequence), K/V order and instructions.
    ``rest`` holds the other :class:`Options` fields (``l2``, ``backward``, ``splits``,
    ``ctas_per_sm``)."""
    notes: list[str] = []
    if workload.d_v is not None and tiled == "fa1":
        raise WorkloadError(
            "--tiled fa1 with --d-v (V's head dim apart from Q's) is not modelled: flash-attn v1 takes one head dim; "
            "use --tiled fa2"
        )
    impl = paged_implementation(impl, tiled, workload, profile, rest, notes)
    if workload.seq_lens is not None:
        impl = _variant_implementation(PACKED_KERNELS, impl, tiled, workload, profile, notes)
    if workload.window is not None:
        impl = _variant_implementation(WINDOW_KERNELS, impl, tiled, workload, profile, notes)
    if tiled == "fa1" and impl in (None, "auto"):
        # FA1 as flash-attn v1's kernels ran, where they run the workload; else the paper's Algorithm 1
        why_not = implementations.unsupported("fa1", workload)
        impl = "paper" if why_not else "fa1"
        if why_not:
            notes.append(f"--tiled fa1: {why_not}: showing the paper's Algorithm 1")
    if impl == "fa1":
        tiled = "fa1"  # flash-attn v1's kernels are the fa1 variant (outer loop over K/V)
    auto = impl in (None, "auto")
    if auto:
        impl, why_default = implementations.default_for(workload, profile)
        notes.append(f"--impl auto: {why_default}")
    if impl == "sdpa-cudnn" and chunk_causal(workload):
        if not auto:
            raise WorkloadError(CUDNN_CHUNK_CAUSAL)
        if not chunk_causal(workload, every=True):
            raise WorkloadError(
                "--impl auto: PyTorch runs this grid's causal chunks (fewer queries than keys) through flash "
                "attention and its other rows through cuDNN: evaluate them apart, or name one with --impl"
            )
        impl = "sdpa-flash" if workload.d_v is None else "sdpa-efficient"
        notes.append(f"--impl auto: {CUDNN_CHUNK_CAUSAL_AUTO}: {impl}")
    if impl not in IMPLEMENTATIONS:
        raise WorkloadError(f"unknown implementation {impl!r}: accepted are {', '.join(CHOICES)}")
    if impl == "paper" and (refused_fp8 := _fp8_refusal(impl, workload, profile, tiled, bool(rest.get("backward")))):
        raise WorkloadError(refused_fp8)
    if impl == "paper":
        return Options(
            tiled=tiled, block_q=block_q, block_kv=block_kv, implementation="paper", notes=tuple(notes), **rest
        )
    spec = IMPLEMENTATIONS[impl]
    if rest.get("backward") and not spec.trains:
        raise WorkloadError(f"--impl {impl} with --backward: its kernels are modelled forward only (decoding)")
    if spec.rates_from and (profile is None or profile.implementation(impl).efficiency is None):
        notes.append(
            f"--impl {impl}: no measurement of its own; its fused kernel takes {spec.rates_from}'s measured H200 "
            f"efficiency and CTA cost (both wgmma kernels; at {spec.rates_from}'s largest measured head dim), its "
            "bytes stream at the profile's HBM rate (not yet measured: docs/variants.md, MLA)"
        )
    if refused_fp8 := _fp8_refusal(impl, workload, profile, tiled, bool(rest.get("backward"))):
        raise WorkloadError(refused_fp8)
    why = implementations.unsupported(impl, workload, profile)
    if why and (refused := implementations.refusal(impl, why)):
        raise WorkloadError(refused)
    if why:
        notes.append(f"{why}: modelled anyway")
    if block_q is None or block_kv is None or workload.is_grid:
        block_q, block_kv = implementations.workload_tiles(impl, workload, profile, block_q, block_kv)
    if rest.get("ctas_per_sm") is None:
        rest["ctas_per_sm"] = implementations.workload_occupancy(impl, workload, block_q, block_kv, profile)
        rest["ctas_from_implementation"] = rest["ctas_per_sm"] is not None
    return Options(
        tiled=tiled,
        block_q=block_q,
        block_kv=block_kv,
        implementation=impl,
        kv_order=rest.pop("kv_order", None) or implementations.kv_order(impl),
        notes=tuple(notes),
        **rest,
    )


#: a causal chunk (more keys than queries, bottom-right as the model counts it) through cuDNN
CUDNN_CHUNK_CAUSAL = (
    "--impl sdpa-cudnn: a causal mask with fewer queries than keys is aligned bottom-right here (the new tokens "
    "last), which PyTorch runs only through its flash or memory-efficient kernel "
    "(torch.nn.attention.bias.causal_lower_right); cuDNN through scaled_dot_product_attention takes is_causal, "
    "aligned top-left: use --impl sdpa-flash or sdpa-efficient"
)
CUDNN_CHUNK_CAUSAL_AUTO = (
    "a causal mask with fewer queries than keys, bottom-right (torch.nn.attention.bias.causal_lower_right), runs "
    "through flash attention (the memory-efficient kernel where V's head dim is apart), not cuDNN"
)


def chunk_causal(workload: Workload, every: bool = False) -> bool:
    """Whether ``workload`` (any element of a grid; ``every``: all of them) is a causal chunk:
    causal, several queries, fewer than its keys."""
    if not workload.causal:
        return False
    n, n_kv = np.asarray(workload.n), np.asarray(workload.n_kv_)
    chunk = (n > 1) & (n != n_kv)
    return bool(np.all(chunk) if every else np.any(chunk))


def _fp8_refusal(impl: str, workload: Workload, profile: Profile | None, tiled: str, backward: bool) -> str | None:
    """Why an FP8 workload (fp8 inputs, an FP8 K/V cache) is refused on ``impl``, in one line."""
    if workload.dtype != "fp8" and workload.kv_dtype is None:
        return None
    if workload.kv_dtype is not None:
        if backward:
            return f"--kv-dtype {workload.kv_dtype}: an FP8 K/V cache is read by inference kernels: no --backward"
        if tiled == "fa1":
            return f"--kv-dtype {workload.kv_dtype}: modelled for the fa2 variant (--tiled fa2)"
    if workload.dtype == "fp8" and backward and impl == "fa3":
        return "--dtype fp8 --backward: FlashAttention-3's fp8 kernels are forward only (its backward takes fp16, bf16)"
    return implementations.fp8_refusal(impl, workload, profile)


@frozen
class VariantKernels:
    """The implementations memmodel models for one attention variant (a sliding window, a
    packed row) and what each runs, with the words its refusals and notes use."""

    option: str  # the command-line option that asks for the variant
    accepted: Mapping[str, str]  # implementation -> what runs
    amd: str  # the refusal on an AMD profile
    fa1: str  # the refusal with --tiled fa1
    refused: str  # "--impl X {refused}": what an implementation that does not model it is told
    auto: str  # why --impl auto takes sdpa-flash


#: a sliding window (``Workload.window``)
WINDOW_KERNELS = VariantKernels(
    "--window",
    {
        "sdpa-flash": "FlashAttention-2's local kernels: flash_attn_func(window_size=(W − 1, 0)), which PyTorch "
        "reaches through torch.ops.aten._flash_attention_forward(window_size_left=W − 1)",
        "flex": "FlexAttention under a sliding-window BlockMask (create_block_mask of a causal mask_mod with "
        "q − kv < W): the blocks inside the band, the mask_mod on those its edges cut",
        "paper": "the FlashAttention paper's algorithm over the blocks inside the window",
        "fa3": "FlashAttention-3's local kernels (its Hopper forward and backward as flash_attn.cute runs them, "
        "flash_attn_func(window_size=(W − 1, 0))): the blocks inside the band, the mask applied on the blocks "
        "its two edges cut, none on the blocks between",
        "fa4": "FlashAttention-4's local kernels (flash_attn.cute on SM100, flash_attn_func(window_size=(W − 1, "
        "0))): the blocks inside the band, the mask on the blocks its edges cut, no CTA pairs",
    },
    "AMD's local attention kernels (CK/aiter) are not modelled; --impl paper shows the paper's algorithm over the "
    "window's blocks",
    "flash-attn v1 (--tiled fa1) has no sliding window",
    "is not modelled with a sliding window",
    "scaled_dot_product_attention takes no window (given a mask it runs the memory-efficient kernel over every block)",
)
#: a packed row of documents (``Workload.seq_lens``)
PACKED_KERNELS = VariantKernels(
    "--seq-lens (or --chunk)",
    {
        "sdpa-flash": "FlashAttention-2's varlen kernels: flash_attn_varlen_func(cu_seqlens_q, cu_seqlens_k, ...), "
        "which PyTorch reaches through torch.ops.aten._flash_attention_forward(cum_seq_q, cum_seq_k, max_q, max_k)",
        "flex": "FlexAttention under a document BlockMask (create_block_mask of a mask_mod that keeps each "
        "document's own keys, causal within it with --causal) over the whole packed row, one launch",
        "paper": "the FlashAttention paper's algorithm on each document, one launch",
    },
    "AMD's varlen kernels (CK/aiter) are not modelled; accepted are --impl paper",
    "flash-attn v1 (--tiled fa1) is not modelled on a packed row",
    "is not modelled on a packed row",
    "PyTorch runs the flash backend for nested jagged tensors",
)
WINDOW_IMPLEMENTATIONS = WINDOW_KERNELS.accepted
PACKED_IMPLEMENTATIONS = PACKED_KERNELS.accepted


def _variant_implementation(
    v: VariantKernels, impl: str | None, tiled: str, workload: Workload, profile: Profile | None, notes: list[str]
) -> str:
    """The implementation a workload of variant ``v`` runs as: ``auto`` takes FlashAttention-2's
    kernels for it (and says why); an implementation that does not model it is refused."""
    accepted = ", ".join(v.accepted)
    if profile is not None and impl != "paper" and str(profile.arch_family or "").startswith("cdna"):
        raise WorkloadError(f"{v.option} on {profile.name}: {v.amd}")
    if tiled == "fa1":
        raise WorkloadError(f"{v.option}: {v.fa1}: accepted are --impl {accepted}")
    if impl in (None, "auto"):
        why_not = implementations.unsupported("sdpa-flash", workload, profile)
        if why_not:
            raise WorkloadError(f"{v.option}: {why_not}; memmodel models it as --impl {accepted}")
        notes.append(f"--impl auto with {v.option}: {v.auto}: showing {v.accepted['sdpa-flash']}")
        return "sdpa-flash"
    if impl not in v.accepted and impl in IMPLEMENTATIONS:
        raise WorkloadError(f"{v.option}: --impl {impl} {v.refused}: accepted are --impl {accepted}")
    return impl


#: what stands in for the paged implementations' own figures (none measured yet): each kernel is
#: timed with the measured figures of the implementation of its design (``Kernel.figures_from``)
PAGED_FIGURES = {
    "flashinfer": "its decode kernel takes sdpa-flash's split-KV figures (per-CTA streaming rate, per-wave "
    "overhead) and combine costs, its sm90 prefill fa3's measured efficiency and CTA overhead, its FA2-style "
    "prefill sdpa-flash's",
    "flex": "its decoding kernel takes sdpa-flash's split-KV figures, its forward and backward templates the raw "
    "product peak (no efficiency), its reductions the profile's library rates",
}


def paged_implementation(
    impl: str | None, tiled: str, workload: Workload, profile: Profile | None, rest: dict[str, Any], notes: list[str]
) -> str | None:
    """The implementation a paged KV cache (``Workload.page_size``) runs as, checked: ``auto`` takes
    FlashInfer's wrappers (what vLLM and SGLang run on NVIDIA GPUs); an implementation without paged
    kernels, a page size its kernels cannot take, training or FA1 are refused with one line. Without
    a page size, FlashInfer (paged wrappers only) is refused. Says what stands in for their figures."""
    paged = [n for n, spec in IMPLEMENTATIONS.items() if spec.paged]
    accepted = ", ".join(f"--impl {n}" for n in paged)
    ps = workload.page_size
    if ps is None:
        if impl in IMPLEMENTATIONS and IMPLEMENTATIONS[impl].paged_only:
            raise WorkloadError(f"--impl {impl} models FlashInfer's paged-KV wrappers: give --page-size P")
        if impl in IMPLEMENTATIONS and IMPLEMENTATIONS[impl].paged and rest.get("backward"):
            if impl != "flex":
                raise WorkloadError(f"--impl {impl} is modelled forward only: --backward is not")
            if np.any(np.asarray(workload.n) < FLEX_DECODE_MAX_Q):
                raise WorkloadError(
                    f"--impl flex --backward: below {FLEX_DECODE_MAX_Q} queries flex runs its decoding kernel, "
                    f"modelled forward only: give --n {FLEX_DECODE_MAX_Q} or more"
                )
        masked = workload.window is not None or workload.seq_lens is not None
        if impl == "flex" and masked and np.any(np.asarray(workload.n) < FLEX_DECODE_MAX_Q):
            raise WorkloadError(
                f"--impl flex with {'--window' if workload.window is not None else '--seq-lens'}: below "
                f"{FLEX_DECODE_MAX_Q} queries flex runs its decoding kernel, modelled without a window or documents: "
                f"give --n {FLEX_DECODE_MAX_Q} or more, or --impl sdpa-flash"
            )
        if impl in IMPLEMENTATIONS and IMPLEMENTATIONS[impl].paged:
            notes.append(paged_figures_note(impl, profile))
        return impl
    if tiled == "fa1":
        raise WorkloadError(f"--page-size: flash-attn v1 (--tiled fa1) has no paged kernel: accepted are {accepted}")
    if rest.get("backward"):
        raise WorkloadError(
            "--page-size with --backward is not modelled: paged KV caches are read by inference kernels"
        )
    if impl == "flashmla":
        # FlashInfer's MLA wrapper reads its latent cache through a page table of any page size; its
        # kernel walks 64-token tiles whatever the page (memmodel.traffic.mla)
        if ps != MLA_PAGE_TOKENS:
            notes.append(
                f"--impl flashmla at --page-size {ps}: its page table is counted at {ps} token{'s' if ps != 1 else ''} "
                "a page; its "
                f"figures were measured over pages of {MLA_PAGE_TOKENS} tokens (the kernel's tiles), other page "
                "sizes not measured"
            )
        return impl
    if impl in (None, "auto"):
        impl = "flashinfer"
        notes.append(
            "--impl auto with --page-size: scaled_dot_product_attention reads no paged cache; showing FlashInfer's "
            "paged wrappers (what vLLM and SGLang run on NVIDIA GPUs); --impl flex for FlexAttention's"
        )
    if impl not in IMPLEMENTATIONS:
        return impl  # options_for names what is accepted
    spec = IMPLEMENTATIONS[impl]
    if not spec.paged:
        raise WorkloadError(f"--page-size: --impl {impl} has no paged kernel: accepted are {accepted}")
    if spec.paged == "pow2-16" and (ps < 16 or ps & (ps - 1)):
        raise WorkloadError(
            f"--page-size {ps}: --impl {impl} takes powers of two from 16 (its BlockMask's KV block is the page and "
            "its Triton kernel loads a page as one tile, tl.arange and tl.dot sizes); --impl flashinfer takes any"
        )
    if profile is not None and getattr(profile, "vendor", "NVIDIA") != "NVIDIA":
        raise WorkloadError(f"--page-size on {profile.name}: --impl {impl}'s paged kernels are modelled on NVIDIA GPUs")
    if rest.get("splits") is not None:
        raise WorkloadError(
            f"--splits with --page-size: --impl {impl}'s own plan splits the K/V (not modelled as asked)"
        )
    notes.append(paged_figures_note(impl, profile))
    return impl


#: the paged implementations' own figure sets (``Kernel.figures_own``) and what still stands in
#: where a profile has them
PAGED_OWN = {
    "flashinfer": (("flashinfer", "flashinfer-fa2"), ""),
    "flex": (("flex",), ""),
}


def paged_figures_note(impl: str, profile: Profile | None) -> str:
    """What times a paged implementation's kernels on ``profile``: its own figures where the
    profile has them (and what still stands in), else the figures of their designs."""
    names, rest = PAGED_OWN[impl]
    own = [n for n in names if profile is not None and n in profile.implementation_figures]
    if not own:
        return f"--impl {impl}: no figures of its own: {PAGED_FIGURES[impl]} (not measured)"
    listed = ", ".join(f"implementations.{n}" for n in own)
    return (
        f"--impl {impl}: its kernels' own figures ({listed}; where each comes from: memmodel hardware show "
        f"{getattr(profile, 'name', '')}){rest}"
    )


def with_options(options: Options, **changes: Any) -> Options:
    """``options`` with ``changes`` (e.g. another L2 mode), validated again."""
    return replace(options, **changes)
