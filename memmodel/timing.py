"""Predicted time of each kernel from its ledger and a hardware profile.

Terms, each in seconds:

* ``matmul``  — matmul FLOPs at the dtype's peak (tensor cores; fp32 uses the non-tensor FP32 peak)
* ``softmax`` — other elementwise/reduction FLOPs at the FP32 peak
* ``exp``     — exponentials at the special-function-unit rate (the FP32 peak when the
  profile gives none, stated in the assumptions)
* ``hbm``, ``l2``, ``sram`` — bytes at that level over the level's bandwidth (and ``mall``, the
  bytes an XCD's L2 misses over the Infinity Cache's bandwidth, on a profile with ``memory.mall``)
* ``latency`` — Little's law: with C CTAs each keeping b bytes in flight, HBM delivers at
  most C·b / latency bytes per second; the term is HBM bytes over that rate. It binds
  when too few CTAs run (decoding with few heads).

Overlap, per kernel (``Kernel.overlap``): ``overlap`` kernels (GEMMs, elementwise) take
the largest term; ``serial-compute`` kernels (FlashAttention's fused loops, where the same
warps issue the matmuls, the exponentials and the rescaling one after another) take the
largest of memory, latency and the *sum* of the compute terms. Every kernel then pays the
profile's ``launch_overhead`` once (0 when the profile gives none). An algorithm's time
is the sum of its kernels'. On a grid, a kernel that runs for some workloads only (GQA's
dK/dV sums, the split-KV kernels; ``Kernel.present``) takes no time on the others.

Measured rates (a profile from ``memmodel calibrate``): library kernels reach less than the
raw ceilings, by amounts that depend on the kernel. Where the profile gives them, the
``hbm`` term of a kernel tagged ``op="gemm"`` uses cuBLAS' measured read and write rates,
``op="softmax"`` the framework softmax's rate at the kernel's row length (and at least the
measured time of a softmax of one wave of rows: few rows, as in decoding),
``op="elementwise"`` the elementwise rate; the last two count every byte the kernel moves
(L2 or HBM), since those kernels are limited by their own issue, not by where data sit.
Fused attention kernels of a named implementation (:mod:`memmodel.implementations`) run
their products at the peak of the instructions they use (``mma.sync`` for FlashAttention-2),
and their compute terms are divided by the implementation's measured efficiency at the
workload's head dimension, where the profile gives one. A split-KV (decoding) kernel of an
implementation with a measured ``cta_bandwidth`` has its latency term from that rate: each
CTA streams its share of K/V no faster than one CTA was measured to (Little's law with the
loaded latency and the bytes one CTA really keeps in flight, which the unloaded pointer-chase
latency and a tile per CTA overstate by about six times on an H200).

Tail (FlashAttention-2's forward kernel): the compute terms are multiplied by
:func:`cta_tail_factor`, the makespan of the kernel's CTAs on the SMs over the perfectly
balanced time. Assumption: an SM's throughput does not depend on how many of its CTA slots
are busy, so the work is balanced over SMs, not slots; CTAs are handed to SMs in grid order
(Q blocks of a head next to each other, ascending). Without causal masking every CTA does
the same work and the factor is the wave quantisation ⌈w⌉/w, w = CTAs / SMs. With causal
masking a CTA's work grows with its Q block, the last CTAs handed out are the longest, and
the kernel ends a fraction of a CTA's length after the balanced time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import field
from dataclasses import fields as dataclass_fields
from functools import cached_property, lru_cache
from typing import Any, Union

import numpy as np

from . import implementations, intmath
from .frozen import frozen
from .hardware import KernelFigures, Profile
from .hardware.derive import TRANSFERRED
from .hardware.profile import WARP_SOFTMAX_ROWS, interpolate_log2
from .hardware.schema import MMA_SYNC_NATIVE, SAME_FAMILY_SOURCE
from .intmath import IntLike
from .traffic.flex import schedule_tail
from .traffic.ledger import (
    ALL_LEVELS,
    COMBINE,
    DROPOUT,
    FORWARD_GRID,
    HEAD_GRID,
    SPLIT_KV,
    AlgorithmTraffic,
    Kernel,
    param,
)
from .validated import reference

Seconds = Union[float, np.ndarray]  # noqa: UP007
Label = Union[str, np.ndarray]  # noqa: UP007

#: dtype of the inputs -> key of the compute peak their matmuls run at
MATMUL_PEAK = {"fp32": "fp32", "tf32": "tf32", "fp16": "fp16", "bf16": "bf16", "fp8": "fp8"}


@frozen
class KernelTiming:
    """One kernel's predicted time: each term (memory levels, compute, overheads), the
    total and what bounds it."""

    name: str
    terms: dict[str, Seconds]
    time_s: Seconds
    #: what bounds the kernel; None on grids, where ``bound_index`` says it
    label: str | None
    #: Grids only: :attr:`bound` as an int array indexing ``bound_names`` (cheaper than comparing labels).
    bound_index: np.ndarray | None = field(default=None, repr=False, compare=False)
    bound_names: tuple[str, ...] = field(default=(), repr=False, compare=False)

    @cached_property
    def bound(self) -> Label:
        """What bounds the kernel: a term's name (on grids an object array of names, spelled
        out when first asked: a sweep reads ``bound_index``)."""
        return _spelled(self.label, self.bound_names, self.bound_index)


@frozen
class AlgorithmTiming:
    """An algorithm's kernels' timings, their total and what bounds it."""

    kernels: tuple[KernelTiming, ...]
    time_s: Seconds
    #: what bounds the algorithm; None on grids, where ``bound_index`` says it
    label: str | None
    #: Grids only: :attr:`bound` as an int array ``bound_index`` indexing ``bound_labels``.
    bound_labels: tuple[str, ...] = field(default=(), repr=False, compare=False)
    bound_index: np.ndarray | None = field(default=None, repr=False, compare=False)
    #: the share of its rate the forward kernel keeps under the power limit where the clocks
    #: fell (:data:`CLOCKS`; 1 where they did not), None where they did not fall anywhere
    clock_share: Seconds | None = field(default=None, compare=False)

    @cached_property
    def bound(self) -> Label:
        """What bounds the algorithm: a term's name (on grids an object array of names)."""
        return _spelled(self.label, self.bound_labels, self.bound_index)


def _spelled(label: str | None, names: tuple[str, ...], index: np.ndarray | None) -> Label:
    """A timing's bound: its label, or on a grid the names its index points at."""
    if index is None:
        assert label is not None
        return label
    return np.asarray(names, dtype=object)[index]


#: How long the GPU has been busy when a kernel runs, which decides its clocks (``--clocks``):
#: ``benchmark``, the kernel run back to back as validate and the FlashAttention benchmarks
#: time it (its forward kernels slow to the measured sustained share where the calls before
#: the median one keep the GPU busy past the implementation's ``sustained_after``); ``boost``, a short
#: burst (never throttled); ``sustained``, a long steady loop (always throttled).
CLOCKS = implementations.CLOCK_MODES
#: validate's timing: 2 checked calls, 3 warm-up calls and 3 more to time the host, then 20
#: timed back to back: the median timed call has about 16 calls of busy time before it
BENCHMARK_CALLS_BEFORE = 16


def clock_share(profile: Profile, implementation: str | None, loop_s: Any, clocks: str = "benchmark") -> Any:
    """The share of its rate ``implementation``'s forward kernel keeps in a loop whose one
    call takes ``loop_s`` (at the clocks before they fall), in ``clocks`` mode: the measured
    sustained share where the loop stays busy past its ``sustained_after``, else 1; None where
    the clocks do not fall anywhere (or the profile has no such figure)."""
    if clocks not in CLOCKS:
        raise ValueError(f"unknown clocks mode {clocks!r}: accepted are {', '.join(CLOCKS)}")
    fall = profile.implementation(implementation).clocks_fall if clocks != "boost" else None
    if fall is None or fall[0] >= 1.0:
        return None
    share, after = fall
    if clocks == "sustained":
        return share
    busy = BENCHMARK_CALLS_BEFORE * np.asarray(loop_s, dtype=np.float64) >= after
    if not np.any(busy):
        return None
    out = np.where(busy, share, 1.0)
    return float(out) if out.ndim == 0 else out


def clock_caveat(profile: Profile, implementation: str | None, share: Any, clocks: str) -> str | None:
    """One line where the model slowed ``implementation``'s forward kernel to the clocks the
    power limit leaves (``share``: :attr:`AlgorithmTiming.clock_share`)."""
    if share is None or implementation is None:
        return None
    figures = profile.implementation(implementation)
    full = figures.sustained_share
    reaction = float(figures.sustained_after_s or 0.0) * 1e3
    prov = profile.provenance.get(f"implementations.{implementation}.sustained_share")
    how = "measured" if prov is None or prov.kind == "measured" else (prov.note or prov.kind or "derived")
    if how.startswith("power-clock rule"):  # its note is long: the rule's name and where it is told
        how = "the power-clock rule from the measured GPU's share, docs/model.md"
    if clocks == "sustained":
        return (
            f"--clocks sustained: {implementation}'s forward kernel runs at {full:.3f} of its rate, the clocks "
            f"{profile.name}'s power limit leaves ({how})."
        )
    where = "" if np.ndim(share) == 0 else " (the longer workloads of the grid)"
    return (
        f"Timed as a benchmark loop{where}: the {BENCHMARK_CALLS_BEFORE} calls before the median one keep "
        f"{implementation} busy for more than the {reaction:.0f} ms after which it brings {profile.name} to its power "
        f"limit and the clocks fall: its forward kernel runs at {full:.3f} of its rate ({how}). --clocks boost "
        "for a short burst."
    )


def assumptions(profile: Profile) -> list[str]:
    out = [
        "GEMM and elementwise kernels overlap compute and memory: they take their largest term (roofline).",
        "FlashAttention kernels issue matmuls, exponentials and rescaling from the same warps: "
        "those compute terms add, and overlap memory traffic.",
        "Latency bound (Little's law): concurrent CTAs × one tile in flight each, over the HBM latency.",
        "FlashAttention-2's forward CTAs are balanced over SMs in grid order (an SM runs as fast with one CTA "
        "as with two): its compute time is the last SM's, wave quantisation and, with causal masking, "
        "the longest CTAs handed out last.",
        "Kernels run back to back: an algorithm's time is the sum of its kernels' times, "
        "each plus the profile's launch overhead.",
        "Peaks are the profile's dense figures (datasheet, or measured by 'memmodel calibrate').",
    ]
    if not any(f.sustained_after_s is not None for f in profile.implementation_figures.values()):
        out.append(
            f"{profile.name} gives no sustained-clock figures (implementations.*.sustained_share, sustained_after):"
            " kernels are timed at the clocks before the power limit lowers them" + _sustained_reference() + "."
        )
    if profile.hbm.write_bandwidth_bytes_per_s:
        out.append("HBM reads and writes take turns: the HBM term is reads/read bandwidth + writes/write bandwidth.")
    rates = profile.kernel_rates
    if rates.gemm_read_bytes_per_s or rates.gemm_write_bytes_per_s:
        out.append("Standard attention's products move HBM bytes at cuBLAS' measured read and write rates.")
    if rates.softmax_bytes_per_s:
        out.append(
            "The softmax kernel moves its bytes at the framework softmax's measured rate for its row length"
            + (
                ", and takes at least its measured time over a few rows (decoding)."
                if rates.softmax_row_time_s or rates.softmax_row_floor_s
                else "."
            )
        )
    if rates.elementwise_bytes_per_s:
        out.append("Elementwise kernels (mask, dropout) move their bytes at the measured elementwise rate.")
    if profile.mma_sync_flops_per_s:
        out.append(
            "Implementations built on mma.sync (PyTorch's FlashAttention-2, the memory-efficient kernel) "
            "run their products at the measured mma.sync peak."
        )
    return out


def caveats(
    profile: Profile,
    implementation: str | None = None,
    dtype: str = "fp16",
    head_dim: Any = None,
    tile: tuple[Any, Any] | None = None,
) -> list[str]:
    """What stands in for figures the profile lacks, for a tiled kernel of ``implementation``
    at ``head_dim`` (and ``tile``, B_r × B_c): how much to trust a time."""
    out = []
    if profile.exp_ops_per_s is None:
        out.append(f"{profile.name} gives no exp rate: exponentials are counted at the FP32 peak.")
    if profile.launch_overhead_s is None:
        out.append(f"{profile.name} gives no launch overhead: none is added.")
    impl = implementations.get(implementation)
    if impl is None:
        return out
    _, missing_peak = matmul_peak(profile, dtype, impl.instructions)
    if missing_peak:
        out.append(missing_peak)
    if impl.instructions == "mma_sync" and profile.mma_sync_one_cta_share is None:
        out.append(
            f"{profile.name} gives no compute.mma_sync.one_cta_share: an SM left with one CTA of a kernel that keeps "
            "two is taken to run at the full rate"
            + (f" (on an H200 it runs at about {one:.2f} of it)." if (one := reference("one_cta_share")) else ".")
        )
    found = implementations.forward_design(impl.name, profile, dtype, head_dim)
    if found is not None and impl.forward_design is not None:
        design, largest = found[0], impl.forward_design[2]
        out.append(
            f"{impl.name}'s forward on {profile.name} (compute capability {profile.compute_capability}) up to d "
            f"{largest} in 16 bits is taken as {design}'s design, not the Hopper kernels its own figures were "
            f"measured on: two 128-row Q tiles a CTA (cudnn-frontend's SM100 engine), {design}'s efficiency and CTA "
            "cost, O rescaled only where a row maximum moved (docs/implementations.md). Its backward, fp8 and larger "
            "head dims keep its own figures."
        )
    figures = profile.implementation(impl.name)
    transferred = bool(impl.rates_from and figures.efficiency is None)
    if transferred:
        figures = profile.implementation(str(impl.rates_from))
    measured = figures.efficiency
    if not measured and impl.paged:
        return out  # its kernels take the figures of their designs (options.PAGED_FIGURES says which)
    borrowed = profile.provenance.get(f"implementations.{impl.name}.efficiency")
    if borrowed is not None and borrowed.source == SAME_FAMILY_SOURCE:
        src = profile.sources.get(SAME_FAMILY_SOURCE)
        rule = src.title if src is not None else borrowed.note or "the same-family rule"
        out.append(
            f"{impl.name} has no figures of its own on {profile.name}: {rule}: the efficiency against the "
            "mma.sync rate, CTA overhead, masked-block cost and dropout rate, forward and backward."
        )
    if impl.variant == "fa1" and impl.name != "paper":
        sram = profile.sram
        out.append(
            f"{impl.name}'s warps split each K/V block's keys (split-K): their partial products and row statistics "
            f"summed through shared memory at every 16-row step, at {profile.name}'s "
            f"{sram.bandwidth_per_sm_bytes_per_s / 1e9:.1f} GB/s per SM (memory.sram.bandwidth_per_sm, "
            f"{profile.kind_of('memory.sram.bandwidth_per_sm') or 'unknown kind'}), and each of their barriers one "
            f"shared-memory latency ({sram.latency_s * 1e9:.1f} ns, memory.sram.latency, "
            f"{profile.kind_of('memory.sram.latency') or 'unknown kind'}): a rule, not a measurement of v1 "
            "(docs/implementations.md)."
        )
    if impl.name == "sdpa-math":
        pass  # library kernels (casts, copies, cuBLAS products, softmax) at the profile's measured rates
    elif transferred and measured:
        out.append(
            f"{impl.name} was not measured on {profile.name}: its fused kernel takes {impl.rates_from}'s measured "
            f"efficiency and CTA cost (a transferred figure, docs/variants.md, MLA)."
        )
    elif not measured and impl.name == "ck":
        key = MATMUL_PEAK[dtype]
        prov = profile.provenance.get(f"compute.{key}")
        kind = prov.kind if prov is not None and prov.kind else "datasheet"
        out.append(
            f"{profile.name} has no measured efficiency for ck (AMD's CK/aiter kernels were not measured on any "
            f"GPU): stand-in rule, its products run at {profile.name}'s dense {dtype} GEMM rate (compute.{key}, "
            f"{kind}) and its softmax at the FP32 rate, one after the other; no CTA overhead or diagonal-block cost "
            "either (docs/implementations.md)." + _design_ratio_note(profile, impl.name)
        )
    elif not measured:
        out.append(
            f"{profile.name} has no measured efficiency for {impl.name}: its kernel is modelled from its "
            "instructions alone (no CTA overhead or diagonal-block cost either)."
        )
    elif head_dim is not None:
        by_tile = figures.tile_efficiency
        if by_tile and tile is not None and np.ndim(tile[0]) == 0 and np.ndim(tile[1]) == 0 and None not in tile:
            t = (int(tile[0]), int(tile[1]))
            defaults = {implementations.tiles(impl.name, int(d), False) for d in np.ravel(np.asarray(head_dim))}
            if t not in by_tile and t not in defaults:
                out.append(
                    f"{impl.name}'s efficiency on {profile.name} was measured at its default tiles and at "
                    f"{', '.join(f'{a}x{b}' for a, b in sorted(by_tile))}: at {t[0]}x{t[1]} the default tiles' figure "
                    f"stands in{_tile_reference()}."
                )
        ds = np.asarray(head_dim)
        lo, hi = measured[0][0], measured[-1][0]
        if np.any(ds < lo) or np.any(ds > hi):
            out.append(
                f"{impl.name}'s efficiency on {profile.name} was measured at head dims {lo}–{hi}: "
                "other head dims take the nearest figure."
            )
    return out


def narrow_v_efficiency(eff: Any, figures: KernelFigures, kernel: Kernel) -> Any:
    """A fused backward's efficiency where V's head dim is below Q's (``kernel.narrow_v``):
    the kernel's own measured figure at its head dim, with the causal mask (blocks on the
    diagonal) or without, where the profile has it; ``eff`` elsewhere (element by element)."""

    def at(x: Any) -> np.ndarray:
        return np.asarray(np.nan if x is None else x, dtype=np.float64)

    masked = np.asarray(intmath.to_float(kernel.diagonal_blocks), dtype=np.float64) > 0
    own = np.where(masked, at(figures.dv_causal_efficiency), at(figures.dv_efficiency))
    use = np.asarray(kernel.narrow_v, dtype=bool) & np.isfinite(own)
    out = np.where(use, own, np.asarray(eff, dtype=np.float64))
    return float(out) if out.ndim == 0 else out


def _design_ratio_note(profile: Profile, name: str) -> str:
    """' Its backward ...' where ``profile``'s backward efficiency of ``name`` came by the
    design-ratio rule (another vendor's kernel of FlashAttention-2's algorithm), else ''."""
    fpath = f"implementations.{name}.backward_efficiency"
    prov = profile.provenance.get(fpath)
    if prov is None or "design-ratio rule" not in (prov.note or ""):
        return ""
    ratio = profile.implementation(name).backward_efficiency
    shown = ", ".join(f"{r:.2f} at d = {d:g}" for d, r in ratio)
    return (
        f" Its backward runs at the share of its forward's rate that FlashAttention-2's backward keeps on the "
        f"measured GPU ({shown}; the design-ratio rule, docs/profiles.md)."
    )


def _sustained_reference() -> str:
    """What the clocks' fall costs on the H200 (the data's reference figures), or ''."""
    lo, hi, slow = (reference(k) for k in ("sustained_after_min_s", "sustained_after_max_s", "sustained_slowdown"))
    if lo is None or hi is None or slow is None:
        return ""
    return (
        f" (on an H200 cuDNN's forward run back to back for longer than some {lo * 1e3:.0f} to {hi * 1e3:.0f} ms "
        f"takes about {100 * slow:.0f} % longer once they fall)"
    )


def _tile_reference() -> str:
    """How much slower the H200's measured other tiles ran (the data's reference figures), or ''."""
    lo, hi = reference("tile_slowdown_min"), reference("tile_slowdown_max")
    if lo is None or hi is None:
        return ""
    return f" (the measured other tiles ran {100 * lo:.0f}-{100 * hi:.0f} % slower on an H200's long loop)"


def rate_sources(profile: Profile) -> str:
    """Which kind of figures a prediction on ``profile`` rests on, in a few words."""
    kinds = {profile.kind_of(f) for f in ("compute.fp16", "compute.fp32", "memory.hbm.bandwidth")}
    if profile.derived_from:
        derived = next(
            (s.title for s in profile.sources.values() if s.kind == "derived"),
            f"derived from profile {profile.derived_from}",
        )
        if profile.base_class == "other-architecture":
            return (
                f"{derived}, whose own rates are transferred from another architecture: expect large errors "
                "(tens of percent; see docs/accuracy.md)"
            )
        if profile.base_class == "datasheet":
            return f"{derived}, whose own rates are datasheet figures: expect large errors (tens of percent)"
        return derived
    if profile.transferred_from:
        title = profile.sources.get(TRANSFERRED)
        return (
            f"{title.title if title else f'transferred from profile {profile.transferred_from}'}: expect large "
            "errors (tens of percent; see docs/accuracy.md)"
        )
    if kinds == {"measured"}:
        src = next((s for s in profile.sources.values() if s.kind == "measured"), None)
        where = f" ({src.title})" if src is not None else ""
        return f"measured{where}"
    if "measured" in kinds:
        return "partly measured, partly datasheet: expect errors of tens of percent where datasheet figures bind"
    borrowed = any(s.kind == "derived" for s in profile.sources.values())
    if borrowed:
        return (
            "datasheet and published figures, with library rates and launch overhead carried from a calibration of "
            "another GPU: expect large errors (tens of percent; see docs/accuracy.md)"
        )
    return "datasheet and published figures only: expect large errors (tens of percent; see docs/accuracy.md)"


def _where_unaligned(kernel: Kernel, aligned: Any, unaligned: Callable[[], Any]) -> Any:
    """``unaligned()`` where the kernel's rows are not 16-byte multiples (and a rate for them
    exists), ``aligned`` elsewhere (``unaligned`` is asked only where some row is)."""
    if not np.any(np.asarray(kernel.unaligned)):
        return aligned
    rate = unaligned()
    if rate is None:
        return aligned
    out = np.where(np.asarray(kernel.unaligned), rate, aligned)
    return float(out) if out.ndim == 0 else out


def _softmax_floor(out: Any, rates: Any, rows: Any, element_bytes: int) -> Any:
    """``out`` (the softmax's seconds at its rate) no shorter than its measured floor: a kernel
    of few rows takes what one row takes (``kernels.softmax.row_floor``, by row length); without
    that curve, rows past the warp kernel's take a wave of long rows (``row_time``)."""
    floor = rates.softmax_floor(rows, element_bytes)
    if floor is not None:
        out = np.maximum(out, floor)
    elif rates.softmax_row_time_s:
        out = np.where(np.asarray(rows) > WARP_SOFTMAX_ROWS, np.maximum(out, rates.softmax_row_time_s), out)
    return float(out) if np.ndim(out) == 0 else out


def _library_hbm(kernel: Kernel, profile: Profile, head_dim: Any = None) -> Seconds | None:
    """The ``hbm`` term from a calibrated library rate, or None where the profile has none."""
    rates = profile.kernel_rates
    f = intmath.to_float
    backward = kernel.pass_ == "backward"
    if kernel.op == "gemm" and (rates.gemm_read_bytes_per_s or rates.gemm_write_bytes_per_s):
        read_bw = rates.gemm_read_bytes_per_s or profile.hbm.bandwidth_bytes_per_s
        write_bw = (
            rates.gemm_write_bytes_per_s or profile.hbm.write_bandwidth_bytes_per_s or profile.hbm.bandwidth_bytes_per_s
        )

        # rows that are not 16-byte multiples: the rate measured at the head dim (the products'
        # inner or outer dimension), the mean of the measured ones where none is given
        def at_d(curve: tuple[tuple[int, float], ...], rate: Any) -> Any:
            if not curve:
                return None
            return rate(head_dim) if head_dim is not None else sum(y for _, y in curve) / len(curve)

        reads = np.asarray(f(kernel.bytes(level="hbm", direction="read")), dtype=np.float64)
        writes = np.asarray(f(kernel.bytes(level="hbm", direction="write")), dtype=np.float64)
        aligned = reads / np.asarray(read_bw) + writes / np.asarray(write_bw)
        # rows that are not 16-byte multiples: cuBLAS's older kernels, at the rate measured for the
        # product's shape (bytes read and written over the time, as calibrate measures them): Q·Kᵀ's
        # where it writes more than it reads (the scores), P·V's elsewhere
        qk = at_d(rates.gemm_unaligned_write_bytes_per_s, rates.gemm_unaligned_write_rate)
        pv = at_d(rates.gemm_unaligned_read_bytes_per_s, rates.gemm_unaligned_read_rate)
        if qk is None or pv is None or not np.any(np.asarray(kernel.unaligned)):
            out = aligned
        else:
            odd = (reads + writes) / np.where(writes >= reads, np.asarray(qk), np.asarray(pv))
            out = np.where(np.asarray(kernel.unaligned), odd, aligned)
        return float(out) if np.ndim(out) == 0 else out
    if kernel.op in ("gather", "expand", "cat"):
        # ATen's generic elementwise kernel (and cat of a strided view): bound by the elements it
        # writes, its figures twice the bytes written a second (a same-dtype copy's read + written)
        element = kernel.element_bytes or 2
        if kernel.op == "expand":
            rate = rates.expand_rate(element)
        elif kernel.op == "cat" and rates.cat_bytes_per_s:
            rate = rates.cat_bytes_per_s
        else:
            rate = rates.gather_rate(np.maximum(intmath.to_float(kernel.run), 1.0), element)
        if rate is not None:
            out = 2.0 * np.asarray(f(kernel.bytes(level="l2", direction="write")), dtype=np.float64) / rate
            return float(out) if out.ndim == 0 else out
        rate = rates.elementwise_bytes_per_s  # not measured: the generic path's one figure
        if rate is None:
            return None
        out = np.asarray(f(kernel.bytes(level="l2")), dtype=np.float64) / rate
        return float(out) if out.ndim == 0 else out
    if kernel.op == "softmax" and kernel.element_bytes == 4 and rates.softmax_fp32_bytes_per_s:
        # fp32 rows: their own curve (the warp-per-row kernel is bound by its instructions an
        # element, so fp32 moves nearly twice fp16's bytes a second)
        rows = intmath.to_float(kernel.row_length)
        out = np.asarray(f(kernel.bytes(level="l2")), dtype=np.float64) / np.asarray(rates.softmax_fp32_rate(rows))
        return _softmax_floor(out, rates, rows, 4)
    if kernel.op == "softmax" and rates.softmax_bytes_per_s:
        rows = intmath.to_float(kernel.row_length)
        if kernel.masked_input and rates.softmax_masked_bytes_per_s:
            # measured apart: the softmax over causally masked scores runs at its own rate
            rate = np.asarray(rates.softmax_masked_rate(rows), dtype=np.float64)
        else:
            rate = np.asarray(rates.softmax_rate(rows), dtype=np.float64)
            if rates.softmax_unaligned_bytes_per_s:
                rate = np.asarray(
                    _where_unaligned(kernel, rate, lambda: rates.softmax_unaligned_rate(rows)), dtype=np.float64
                )
        out = np.asarray(f(kernel.bytes(level="l2")), dtype=np.float64) / rate
        return _softmax_floor(out, rates, rows, 2)
    # the other library kernels are limited by their own issue, not by where data sit: every
    # byte they move (L2 or HBM) at their measured rate
    rate = None
    if kernel.op == "softmax_backward" and rates.softmax_backward_bytes_per_s:
        # the calibrated op (``_softmax_backward_data``) is two kernels, each moving the three
        # tensors its rate counts (the product grad·output, then the softmax backward proper):
        # each kernel moves its bytes at twice that rate
        rate = 2.0 * np.asarray(rates.softmax_backward_rate(intmath.to_float(kernel.row_length)))
    elif kernel.op == "scale" and rates.scale_bytes_per_s:
        rate = rates.scale_bytes_per_s
    elif kernel.op in ("copy", "memcpy") and rates.copy_bytes_per_s:
        rate = rates.copy_bytes_per_s
    elif kernel.op == "cast":  # a widening conversion, element by element; not measured: a copy's rate
        rate = rates.cast_bytes_per_s or rates.copy_bytes_per_s or rates.elementwise_bytes_per_s
    elif kernel.op == "masked_fill" and rates.elementwise_bytes_per_s:
        rate = rates.elementwise_bytes_per_s  # measured on masked_fill_ itself
    elif kernel.op in ("scale", "copy", "memcpy", "masked_fill"):  # no specific rate: the pass's elementwise one
        rate = (rates.elementwise_backward_bytes_per_s if backward else None) or rates.elementwise_bytes_per_s
    elif kernel.op == "fp8_cast":  # measured apart where the profile has it: not a 16-bit stream
        rate = rates.fp8_cast_bytes_per_s or rates.elementwise_bytes_per_s
    elif kernel.op == "dropout":
        rate = rates.dropout_bytes_per_s
    elif kernel.op == "column_reduction":  # a bias gradient: a fixed time by the rows, then its bytes
        timed = rates.column_reduction_time(
            intmath.to_float(kernel.rows), f(kernel.bytes(level="l2", direction="read"))
        )
        if timed is not None:
            return timed
        rate = rates.reduction_bytes_per_s
    elif kernel.op == "reduction":
        rate = rates.reduction_bytes_per_s
    elif kernel.op == "elementwise" and backward:
        specific = rates.dropout_backward_bytes_per_s if kernel.kind == DROPOUT else None
        rate = specific or rates.elementwise_backward_bytes_per_s or rates.elementwise_bytes_per_s
    elif kernel.op == "elementwise":
        rate = rates.elementwise_bytes_per_s
    if rate is None:
        return None
    out = np.asarray(f(kernel.bytes(level="l2")), dtype=np.float64) / np.asarray(rate, dtype=np.float64)
    return float(out) if out.ndim == 0 else out


def cta_tail_factor(
    workload: Any,
    block_q: IntLike,
    block_kv: IntLike,
    sm_count: int,
    ctas_per_sm: IntLike | None = None,
    one_cta_share: float | None = None,
    paired: bool = False,
) -> Any:
    """Makespan of a FlashAttention-2 forward grid over the balanced time, ≥ 1.

    An SM holding one CTA of a kernel that keeps ``ctas_per_sm`` ≥ 2 runs it at
    ``one_cta_share`` of its full rate (one CTA's 4 warps leave the tensor cores idle between
    dependent products: calibrate's register loop, ``compute.mma_sync.one_cta_share``). CTAs
    go to the SMs breadth first (one per SM before a second: validation/h200/probe-2), so
    without masking an SM given m CTAs runs ⌊m/o⌋ full groups and, if m mod o is 1, one CTA
    alone; with masking, a grid of at most one CTA per SM runs every CTA alone.

    Jobs: B·H·T_r CTAs, in grid order; CTA i of a head does ``visited(i)`` K/V blocks (T_c
    without causal masking). Handed to S = ``sm_count`` SMs as they free up (list
    scheduling), a job starts about when the work before it, less half the work in flight,
    is done: the last job (the longest, L) ends at ``(W − L)/S − L̄/2 + L``, W the total work
    and L̄ the mean length of the S jobs before it. Without masking all jobs are equal and
    the exact makespan is ⌈J/S⌉ jobs. Against an event simulation of the same schedule
    (tests/test_calibrated_time.py): close on the shapes of the H200 records, furthest off
    where causal CTAs fill about two waves (docs/model.md, "Time").

    ``paired``: a causal grid whose CTAs each take a head's Q blocks x and T_r − 1 − x
    (:func:`memmodel.implementations.pairs_causal_q_blocks`): ⌈T_r/2⌉ jobs a head, of the two
    blocks' K/V blocks together, list-scheduled in grid order (:func:`paired_causal_tail`).
    """
    if getattr(workload, "seq_lens", None) is not None:
        return packed_tail_factor(workload, block_q, block_kv, sm_count, ctas_per_sm, one_cta_share)
    if paired and workload.causal:
        return paired_causal_tail(workload, block_q, block_kv, sm_count, ctas_per_sm, one_cta_share)
    f = lambda v: np.asarray(intmath.to_float(v), dtype=np.float64)  # noqa: E731
    n, n_kv = f(workload.n), f(workload.n_kv_)
    bq, bkv = f(block_q), f(block_kv)
    t_r, t_c = np.ceil(n / bq), np.ceil(n_kv / bkv)
    s = float(sm_count)
    jobs = f(workload.batch) * f(workload.heads) * t_r
    occ = np.asarray(ctas_per_sm if ctas_per_sm is not None else 1, dtype=np.float64)
    share = float(one_cta_share) if one_cta_share else 1.0
    lone = np.where(occ >= 2, 1.0 / share, 1.0)  # the time of a CTA alone, in full-rate CTA times
    if not workload.causal:
        w = jobs / s

        def sm_time(m: Any) -> Any:  # m CTAs on one SM, o at a time
            groups = np.floor(m / np.maximum(occ, 1.0))
            rest = m - groups * np.maximum(occ, 1.0)
            return groups * np.maximum(occ, 1.0) + np.where(rest == 1, lone, rest)

        out = np.maximum(sm_time(np.ceil(w)), sm_time(np.floor(w))) / w
    else:
        from .traffic.blocks import visited_blocks

        window = workload.window
        per_head = f(visited_blocks(workload.n, workload.n_kv_, block_q, block_kv, True, window))
        total = per_head * f(workload.batch) * f(workload.heads)
        off = n_kv - n

        def visited(i: Any) -> Any:  # K/V blocks of Q block i (bottom-right aligned mask)
            last_row = np.minimum(n, (i + 1) * bq) - 1
            seen = np.minimum(t_c, np.floor((last_row + off) / bkv) + 1)
            if window is None:
                return seen
            return seen - np.floor(np.maximum(0.0, i * bq + off - window + 1) / bkv)

        last = visited(t_r - 1)
        mean_before = np.where(s >= t_r, per_head / t_r, (visited(np.maximum(t_r - s, 0)) + last) / 2)
        makespan = np.where(jobs <= s, last * lone, (total - last) / s - mean_before / 2 + last)
        out = np.maximum(1.0, makespan / (total / s))
        # one wave of up to `occ` CTAs per SM: where each CTA lands is known (grid order, Q
        # block fastest; breadth first), so the busiest SM is found exactly
        one_wave = (jobs > s) & (jobs <= s * np.maximum(occ, 1.0)) & (jobs <= MAX_PLACED_CTAS)
        if np.any(one_wave):
            args = np.broadcast_arrays(n, n_kv, bq, bkv, jobs / t_r, occ, out)
            exact = np.vectorize(
                lambda n_, nk_, bq_, bkv_, bh_, o_: _one_wave_tail(
                    int(n_), int(nk_), int(bq_), int(bkv_), int(bh_), int(sm_count), int(o_), share, window
                ),
                otypes=[np.float64],
            )(*(a[one_wave] for a in args[:6]))
            out = np.array(args[6], dtype=np.float64)
            out[one_wave] = exact
    return float(out) if np.ndim(out) == 0 else out


def pair_head_tail(lengths: np.ndarray) -> np.ndarray:
    """One head's CTA lengths (in launch order) when CTA x takes blocks x and T − 1 − x (the
    middle one alone when T is odd): ⌈T/2⌉ jobs."""
    t = lengths.size
    x = np.arange(-(-t // 2))
    partner = t - 1 - x
    return lengths[x] + np.where(partner != x, lengths[partner], 0.0)


def paired_lengths(n: int, n_kv: int, b_r: int, b_c: int, heads: int, window: int | None = None) -> np.ndarray:
    """K/V blocks of each CTA of a causal grid whose CTA x takes a head's Q blocks x and
    T_r − 1 − x (:func:`pair_head_tail`), in launch order: x fastest, then batch and head."""
    return np.tile(pair_head_tail(_causal_lengths(n, n_kv, b_r, b_c, 1, window=window)), heads)


@lru_cache(maxsize=65536)
def _paired_tail(
    n: int, n_kv: int, b_r: int, b_c: int, heads: int, sm_count: int, occ: int, share: float, window: int | None
) -> float:
    lengths = paired_lengths(n, n_kv, b_r, b_c, 1, window)
    jobs = lengths.size * heads
    if np.all(lengths == lengths[0]):  # a square grid: equal jobs, the wave quantisation
        return float(equal_jobs_tail(jobs, sm_count, occ, share))
    if jobs > MAX_SCHEDULED_CTAS:  # many waves of near-equal jobs: the balanced time
        return 1.0
    return _jobs_tail(np.tile(lengths, heads), sm_count, occ, share)


def paired_causal_tail(
    workload: Any,
    block_q: IntLike,
    block_kv: IntLike,
    sm_count: int,
    ctas_per_sm: IntLike | None = None,
    one_cta_share: float | None = None,
) -> Any:
    """:func:`cta_tail_factor` of a causal grid of paired Q blocks (:func:`paired_lengths`):
    under a square mask the K/V blocks of Q blocks x and T_r − 1 − x add to (T_r + 1)·B_r/B_c
    for every x, so the tail is the wave quantisation of ⌈T_r/2⌉·B·H equal jobs; otherwise the
    jobs are placed one by one (one wave) or list-scheduled in grid order."""
    f = lambda v: np.asarray(intmath.to_float(v), dtype=np.float64)  # noqa: E731
    occ = np.asarray(ctas_per_sm if ctas_per_sm is not None else 1, dtype=np.float64)
    share = float(one_cta_share) if one_cta_share else 1.0
    args = np.broadcast_arrays(
        f(workload.n), f(workload.n_kv_), f(block_q), f(block_kv), f(workload.batch) * f(workload.heads), occ
    )
    window = workload.window
    out = np.vectorize(
        lambda n_, nk_, bq_, bkv_, bh_, o_: _paired_tail(
            int(n_), int(nk_), int(bq_), int(bkv_), int(bh_), int(sm_count), max(int(o_), 1), share, window
        ),
        otypes=[np.float64],
    )(*args)
    return float(out) if np.ndim(out) == 0 else out


def packed_lengths(
    seq_lens: tuple[int, ...], b_r: int, b_c: int, heads: int, causal: bool, window: int | None = None
) -> np.ndarray:
    """K/V blocks of each CTA of FlashAttention-2's varlen grid in launch order: Q block fastest
    (⌈max length / B_r⌉ of them per document), then document, then head; a CTA past its
    document's end does none (it exits at once). Each document is tiled from its own start."""
    t_max = -(-max(seq_lens) // b_r)
    per_doc = []
    for length in seq_lens:
        own = np.zeros(t_max, dtype=np.float64)
        t_r, t_c = -(-length // b_r), -(-length // b_c)
        if causal:
            w = window if window is not None and window < length else None
            own[:t_r] = _causal_lengths(length, length, b_r, b_c, 1, window=w)
        else:
            own[:t_r] = t_c
        per_doc.append(own)
    return np.tile(np.concatenate(per_doc), heads)


@lru_cache(maxsize=4096)
def _packed_tail(
    seq_lens: tuple[int, ...],
    b_r: int,
    b_c: int,
    heads: int,
    causal: bool,
    window: int | None,
    sm_count: int,
    occ: int,
    share: float,
) -> float:
    lengths = packed_lengths(seq_lens, b_r, b_c, heads, causal, window)
    return _jobs_tail(lengths[lengths > 0], sm_count, occ, share)


def _jobs_tail(lengths: np.ndarray, sm_count: int, occ: int, share: float) -> float:
    """Makespan over the balanced time of CTAs of these lengths in grid order: placed one by one
    within one wave (:func:`_one_wave_factor`), else list-scheduled, each next CTA going to the
    SM that frees up first."""
    if float(lengths.sum()) <= 0:
        return 1.0
    if lengths.size <= sm_count * max(occ, 1) and lengths.size <= MAX_PLACED_CTAS:
        return _one_wave_factor(lengths, sm_count, occ, share)
    return max(1.0, schedule_tail(lengths.astype(np.float64), sm_count))


def packed_tail_factor(
    workload: Any,
    block_q: IntLike,
    block_kv: IntLike,
    sm_count: int,
    ctas_per_sm: IntLike | None = None,
    one_cta_share: float | None = None,
) -> Any:
    """:func:`cta_tail_factor` of a packed row (``Workload.seq_lens``): its CTAs' real lengths
    (:func:`packed_lengths`; documents of very different lengths make CTAs of very different
    work), placed CTA by CTA within one wave, else handed to the SMs as they free up."""
    share = float(one_cta_share) if one_cta_share else 1.0
    args = np.broadcast_arrays(
        *(np.asarray(x, dtype=np.int64) for x in (block_q, block_kv, workload.heads, ctas_per_sm or 1))
    )
    out = np.vectorize(
        lambda bq, bkv, h, o: _packed_tail(
            tuple(workload.seq_lens),
            int(bq),
            int(bkv),
            int(h),
            bool(workload.causal),
            workload.window,
            int(sm_count),
            int(o),
            share,
        ),
        otypes=[np.float64],
    )(*args)
    return float(out) if np.ndim(out) == 0 else out


def idle_share(
    workload: Any,
    block_q: int,
    block_kv: int,
    sm_count: int,
    ctas_per_sm: int | None,
    one_cta_share: float | None,
    idle_sms: int,
    paired: bool = False,
) -> float:
    """The share of a FlashAttention-2 forward grid's time after which ``idle_sms`` of the SMs
    hold none of its CTAs (1.0: not before its end): when a kernel waiting on another stream
    for that many free SMs (NCCL's send/recv, ``interconnect.p2p_idle_sms``) can start.

    Without masking the CTAs are equal and land breadth first, each next one as a slot frees
    (validation/h200/probe-8), so an SM ends up with ⌊J/S⌋ or ⌈J/S⌉ of the J CTAs; the
    S·⌈J/S⌉ − J SMs given one fewer finish first, at the time of :func:`cta_tail_factor`'s
    SM with that many (a last CTA alone at ``one_cta_share``), and are idle from then on; with
    J < S, S − J SMs are idle from the start. With masking the SMs run dry one by one after the
    last CTA starts: taken to be at the balanced time (total work / S), 1 / the tail factor
    (``paired``: of a grid whose CTAs take two Q blocks each, :func:`paired_causal_tail`).

    Example (H200, 132 SMs, 2 CTAs/SM, one CTA alone at 0.83): 4 heads of 8192 at d = 128 are
    4 · 64 = 256 CTAs: 8 SMs get one (not 16 or more: 1.0); 8 heads are 512 CTAs: 16 SMs get 3,
    the others 4, so they idle at (2 + 1/0.83) / 4 = 0.80 of the kernel.
    """
    s = int(sm_count)
    need = max(int(idle_sms), 1)
    if need > s:
        return 1.0
    if workload.causal:
        tail = cta_tail_factor(workload, block_q, block_kv, s, ctas_per_sm, one_cta_share, paired=paired)
        return float(min(1.0, 1.0 / max(float(tail), 1.0)))
    jobs = int(workload.batch) * int(workload.heads) * -(-int(workload.n) // int(block_q))
    lo, hi = jobs // s, -(-jobs // s)
    fewer = s * hi - jobs  # SMs given lo CTAs (0 when every SM gets the same)
    if hi == lo or fewer < need:
        return 1.0
    occ = max(int(ctas_per_sm or 1), 1)
    lone = 1.0 / float(one_cta_share) if occ >= 2 and one_cta_share else 1.0

    def sm_time(m: int) -> float:  # m CTAs on one SM, occ at a time
        groups, rest = divmod(m, occ)
        return groups * occ + (lone if rest == 1 else rest)

    return sm_time(lo) / sm_time(hi)


#: the most CTAs whose placement on the SMs is worked out one by one (one wave of a GPU with
#: many SMs, or many CTAs per SM given by hand); past it, the list-scheduling estimate
MAX_PLACED_CTAS = 8192


def equal_jobs_tail(ctas: IntLike, sm_count: int, ctas_per_sm: IntLike = 1, one_cta_share: float | None = None) -> Any:
    """Makespan over the balanced time of ``ctas`` equal CTAs on ``sm_count`` SMs holding
    ``ctas_per_sm`` each, ≥ 1 (:func:`cta_tail_factor` without masking: CTAs handed out breadth
    first, an SM left with one CTA of a kernel that keeps two runs it at ``one_cta_share``)."""
    jobs = np.asarray(intmath.to_float(ctas), dtype=np.float64)
    occ = np.maximum(np.asarray(intmath.to_float(ctas_per_sm), dtype=np.float64), 1.0)
    share = float(one_cta_share) if one_cta_share else 1.0
    lone = np.where(occ >= 2, 1.0 / share, 1.0)
    w = np.maximum(jobs, 1.0) / float(sm_count)

    def sm_time(m: Any) -> Any:
        groups = np.floor(m / occ)
        rest = m - groups * occ
        return groups * occ + np.where(rest == 1, lone, rest)

    out = np.maximum(1.0, np.maximum(sm_time(np.ceil(w)), sm_time(np.floor(w))) / w)
    return float(out) if out.ndim == 0 else out


#: the most CTAs a masked backward grid is list-scheduled for (:func:`backward_tail_factor`);
#: a larger grid is many waves of short jobs, whose tail is taken as none
MAX_SCHEDULED_CTAS = 65536


def _backward_lengths(n: int, n_kv: int, b_r: int, b_c: int, window: int | None) -> np.ndarray:
    """Q blocks (``b_r`` rows) each K/V block (``b_c`` keys) of one head is seen by under a
    bottom-right aligned causal mask (and a sliding ``window``), in launch order."""
    t_c = -(-n_kv // b_c)
    off = n_kv - n
    j = np.arange(t_c)
    first_row = np.maximum(0, j * b_c - off)
    last_row = np.full(t_c, n - 1)
    if window is not None:
        last_row = np.minimum(last_row, (j + 1) * b_c - 2 - off + window)
    first, last = first_row // b_r, last_row // b_r
    return np.where(last_row >= first_row, last - first + 1, 0).astype(np.float64)


def _scheduled_tail(lengths: np.ndarray, repeats: int, slots: int) -> float:
    """The list-scheduled makespan of ``repeats`` copies of ``lengths`` on ``slots`` CTA slots
    over the balanced time, ≥ 1; 1 past :data:`MAX_SCHEDULED_CTAS` CTAs or without work."""
    if len(lengths) * repeats > MAX_SCHEDULED_CTAS or repeats < 1:
        return 1.0
    return max(1.0, schedule_tail(np.tile(np.asarray(lengths, dtype=np.float64), repeats), slots))


def _packed_backward_tail(workload: Any, block_q: IntLike, block_kv: IntLike, sm_count: int, occ: Any) -> Any:
    """:func:`backward_tail_factor` of a packed row (``Workload.seq_lens``): the varlen backward's
    grid is the longest document's K/V blocks × documents × heads, K/V block fastest; a document's
    CTAs walk its own Q blocks (causal or not), those past its end exit at once (no work)."""
    docs = tuple(int(x) for x in workload.seq_lens)
    window = workload.window

    def one(b_r: float, b_c: float, o: float) -> float:
        b_r, b_c = int(b_r), int(b_c)
        t_c = max(-(-d // b_c) for d in docs)
        per_head = []
        for d in docs:
            if workload.causal or window is not None:
                own = _backward_lengths(d, d, b_r, b_c, window)
            else:
                own = np.full(-(-d // b_c), float(-(-d // b_r)))
            per_head.append(np.concatenate([own, np.zeros(t_c - len(own))]))
        return _scheduled_tail(np.concatenate(per_head), int(workload.heads) * int(workload.batch), int(sm_count * o))

    args = np.broadcast_arrays(
        np.asarray(intmath.to_float(block_q), dtype=np.float64),
        np.asarray(intmath.to_float(block_kv), dtype=np.float64),
        np.asarray(occ, dtype=np.float64),
    )
    out = np.vectorize(one, otypes=[np.float64])(*args)
    return float(out) if np.ndim(out) == 0 else out


def backward_tail_factor(
    workload: Any,
    kernel: Kernel,
    block_q: IntLike,
    block_kv: IntLike,
    sm_count: int,
    ctas_per_sm: IntLike | None = None,
    one_cta_share: float | None = None,
    paired: Any = False,
) -> Any:
    """Makespan of a FlashAttention-2-style backward grid over the balanced time, ≥ 1: one CTA
    per K/V block (``block_kv`` keys) of each head, walking the Q blocks (``block_q`` rows) that
    see it, launched K/V block fastest. Measured on the H200 (validation/h200/backward-grid),
    FlashAttention-2's and cuDNN's backward kernels take whole waves: without a mask the time
    steps with ⌈CTAs / slots⌉ (:func:`equal_jobs_tail`, at any grid size). Under a causal mask
    (or a window) the CTAs differ, a head's first K/V block seen by every Q block and its last by
    one: the CTAs are list-scheduled in launch order on the chip's CTA slots (at most
    :data:`MAX_SCHEDULED_CTAS`; larger grids are taken to have no tail). ``paired``: each CTA
    takes a head's K/V blocks j and T_c − 1 − j under a causal mask
    (:func:`memmodel.implementations.paired_kv_blocks`, element by element): ⌈T_c/2⌉ jobs a head."""
    f = lambda v: np.asarray(intmath.to_float(v), dtype=np.float64)  # noqa: E731
    jobs = f(kernel.ctas)
    occ = np.maximum(np.asarray(ctas_per_sm if ctas_per_sm is not None else 1, dtype=np.float64), 1.0)
    if getattr(workload, "seq_lens", None) is not None:
        return _packed_backward_tail(workload, block_q, block_kv, sm_count, occ)
    masked = bool(np.any(np.asarray(workload.causal))) or workload.window is not None
    if not masked:
        return equal_jobs_tail(jobs, sm_count, occ, one_cta_share)

    def one(n: float, n_kv: float, b_r: float, b_c: float, ctas: float, o: float, pair: bool, window: Any) -> float:
        lengths = _backward_lengths(int(n), int(n_kv), int(b_r), int(b_c), None if window is None else int(window))
        repeats = int(round(ctas / max(len(lengths), 1)))
        if pair and window is None:
            lengths = pair_head_tail(lengths)
        return _scheduled_tail(lengths, repeats, int(sm_count * o))

    window = workload.window
    args = np.broadcast_arrays(
        f(workload.n), f(workload.n_kv_), f(block_q), f(block_kv), jobs, occ, np.asarray(paired, dtype=bool)
    )
    out = np.vectorize(lambda *a: one(*a, window), otypes=[np.float64])(*args)
    return float(out) if np.ndim(out) == 0 else out


def _causal_lengths(
    n: int, n_kv: int, b_r: int, b_c: int, heads: int, splits: int = 1, window: int | None = None
) -> np.ndarray:
    """K/V blocks of each CTA of a causal grid in launch order: Q block fastest, then the split
    (``splits`` chunks of K/V per Q block, each clipped at the diagonal and, with a sliding
    ``window``, at its left edge), then batch and head."""
    t_r, t_c = -(-n // b_r), -(-n_kv // b_c)
    per_split = -(-t_c // splits)
    k = np.arange(heads * t_r * splits)
    m, s = k % t_r, (k // t_r) % splits
    last_row = np.minimum(n, (m + 1) * b_r) - 1
    visible = np.minimum(t_c, (last_row + n_kv - n) // b_c + 1)
    first = np.zeros_like(visible) if window is None else np.maximum(0, m * b_r + n_kv - n - window + 1) // b_c
    lo, hi = np.maximum(first, s * per_split), np.minimum(visible, (s + 1) * per_split)
    return np.maximum(hi - lo, 0).astype(np.float64)


def _one_wave_factor(lengths: np.ndarray, sm_count: int, occ: int, share: float) -> float:
    """Makespan over the balanced time of one wave of CTAs of these lengths (in blocks), ≥ 1:
    SM j runs CTAs j, j + S, j + 2S, … (breadth first); the CTAs on an SM share its full rate
    while two or more run, the last one alone runs at ``share`` of it (a kernel that keeps
    one CTA per SM runs its CTAs one after another at the full rate)."""
    total = float(lengths.sum())
    if total <= 0 or lengths.size > sm_count * max(occ, 1):
        return 1.0
    k = -(-lengths.size // sm_count)
    table = np.zeros(k * sm_count)
    table[: lengths.size] = lengths
    per_sm = np.sort(table.reshape(k, sm_count), axis=0)  # each column: one SM's CTAs, shortest first
    if occ < 2:
        busiest = float(per_sm.sum(axis=0).max())
    else:
        steps = np.diff(per_sm, axis=0, prepend=0.0)
        running = (k - np.arange(k))[:, None].astype(np.float64)
        busiest = float(np.where(running >= 2, steps * running, steps / share).sum(axis=0).max())
    return max(1.0, busiest / (total / sm_count))


@lru_cache(maxsize=65536)
def _one_wave_tail(
    n: int, n_kv: int, b_r: int, b_c: int, heads: int, sm_count: int, occ: int, share: float, window: int | None = None
) -> float:
    """:func:`cta_tail_factor` of one causal grid of one wave, placed CTA by CTA (kept: a sweep
    meets the same shapes again in every dtype and setting it loops over)."""
    return _one_wave_factor(_causal_lengths(n, n_kv, b_r, b_c, heads, window=window), sm_count, occ, share)


@lru_cache(maxsize=65536)
def _split_tail_scalar(
    n: int, n_kv: int, bh: int, splits: int, bc: int, sm_count: int, occ: int, share: float, window: int | None = None
) -> float:
    """:func:`split_tail_factor` of one causal split prefill (kept, as :func:`_one_wave_tail`)."""
    jobs = bh * -(-n // 64) * splits
    if jobs > sm_count * max(occ, 1) or jobs > MAX_PLACED_CTAS:  # more than one wave: balanced
        return 1.0
    return _one_wave_factor(_causal_lengths(n, n_kv, 64, bc, bh, splits, window), sm_count, occ, share)


def split_tail_factor(
    workload: Any, splits: IntLike, sm_count: int, ctas_per_sm: IntLike | None, one_cta_share: float | None
) -> Any:
    """Makespan of a causal split prefill's one wave over the balanced time, ≥ 1 (1 elsewhere).

    FlashAttention-2's split kernel clips each CTA's chunk of K/V blocks at the diagonal, so
    causal CTAs differ in length, and with one wave (at most ``ctas_per_sm`` per SM) the
    kernel lasts as long as its busiest SM: CTAs in grid order (Q block fastest, then split,
    then head) handed out breadth first, two sharing an SM at its full rate, one alone at
    ``one_cta_share`` of it. A long causal head split two ways runs as long as unmasked
    (validation/h200/probe-3: 1 × 1 × 8192, 71.9 µs causal, 72.3 µs not). Longer grids are
    taken as balanced (lists of short CTAs level out)."""
    from .traffic.decode import split_block_kv

    w = workload
    share = float(one_cta_share) if one_cta_share else 1.0
    occ = ctas_per_sm if ctas_per_sm is not None else 2
    if not bool(w.causal):
        return 1.0
    args = np.broadcast_arrays(
        *(
            np.asarray(x, dtype=np.int64)
            for x in (w.n, w.n_kv_, intmath.mul(w.batch, w.heads), splits, split_block_kv(w.d), occ)
        )
    )
    todo = (args[0] > 1) & (args[3] > 1)
    if args[0].ndim == 0:
        if not bool(todo):
            return 1.0
        return _split_tail_scalar(*(int(a) for a in args[:5]), sm_count, int(args[5]), share, w.window)
    out = np.ones(args[0].shape, dtype=np.float64)
    if todo.any():
        out[todo] = np.vectorize(
            lambda n, nk, bh, sp, bc, o: _split_tail_scalar(
                int(n), int(nk), int(bh), int(sp), int(bc), sm_count, int(o), share, w.window
            ),
            otypes=[np.float64],
        )(*(a[todo] for a in args))
    return out


#: the compute terms of split-K warps' exchange (:func:`exchange_terms`)
EXCHANGE_TERMS = ("exchange", "barrier")


def exchange_terms(kernel: Kernel, profile: Profile) -> dict[str, Seconds]:
    """What a fused kernel's warps spend summing partial results through shared memory
    (flash-attn v1's split-K, :attr:`Kernel.exchange_bytes` and :attr:`Kernel.barriers`), in
    seconds before its tail: ``exchange``, the bytes stored and loaded back at the SMs'
    shared-memory bandwidth (``memory.sram.bandwidth_per_sm`` × SMs; bank conflicts and partly
    filled wavefronts not counted); ``barrier``, each barrier one shared-memory latency
    (``memory.sram.latency``: the loads after it wait for the stores before it), paid by its CTA's
    slot (the barriers over the concurrent CTAs). Empty where the kernel exchanges nothing."""
    out: dict[str, Seconds] = {}
    moved = np.asarray(intmath.to_float(kernel.exchange_bytes), dtype=np.float64)
    if np.any(moved > 0):
        t = moved / profile.sram.bandwidth_bytes_per_s
        out["exchange"] = float(t) if t.ndim == 0 else t
    waits = np.asarray(intmath.to_float(kernel.barriers), dtype=np.float64)
    if np.any(waits > 0):
        slots = np.maximum(np.asarray(intmath.to_float(kernel.concurrent_ctas), dtype=np.float64), 1.0)
        t = waits * profile.sram.latency_s / slots
        out["barrier"] = float(t) if t.ndim == 0 else t
    return out


#: what a figure a kernel lacks stands for (:func:`_figures_where`): an efficiency or share of 1,
#: a rate without limit, otherwise no cost
_NO_FIGURE = {
    "efficiency": 1.0,
    "dv_efficiency": np.nan,
    "dv_causal_efficiency": np.nan,
    "uneven_efficiency": 1.0,
    "dropout_scores_per_s": np.inf,
    "cta_bandwidth_bytes_per_s": np.inf,
}


def _figures_where(rows: Any, theirs: KernelFigures, own: KernelFigures) -> KernelFigures:
    """``theirs`` on ``rows`` (a bool array), ``own`` elsewhere: a grid whose rows take two
    implementations' figures; a figure one of them lacks stands in as :data:`_NO_FIGURE` says."""
    out: dict[str, Any] = {}
    for f in dataclass_fields(KernelFigures):
        a, b = getattr(theirs, f.name), getattr(own, f.name)
        if a is None and b is None:
            out[f.name] = None
            continue
        none = _NO_FIGURE.get(f.name, 0.0)
        out[f.name] = np.where(rows, none if a is None else a, none if b is None else b)
    return KernelFigures(**out)


def matmul_peak(profile: Profile, dtype: str, instructions: str) -> tuple[float, str | None]:
    """The products' rate for ``instructions`` ("mma_sync" or "native"), and a caveat where
    it stands in for a figure the profile lacks."""
    key = MATMUL_PEAK[dtype]
    if instructions == "mma_sync" and key in profile.mma_sync_flops_per_s:
        return profile.mma_sync_flops_per_s[key], None
    peak = profile.peak_flops(key)
    if instructions == "mma_sync" and profile.arch_family not in MMA_SYNC_NATIVE:
        return peak, (
            f"{profile.name} gives no mma.sync rate for {dtype}: FlashAttention-2-style kernels' products are "
            f"counted at the dense peak, which warp-level mma.sync does not reach on {profile.arch_family or 'this GPU'}"
            + (f" (on an H200: {100 * share:.0f} % of it)" if (share := reference("mma_sync_share")) else "")
            + ". Expect these times to be too short."
        )
    return peak, None


def kernel_time(
    kernel: Kernel,
    profile: Profile,
    dtype: str,
    implementation: str | None = None,
    head_dim: IntLike | None = None,
    tail: Any = None,
    tile: tuple[Any, Any] | None = None,
    uneven: Any = None,
    clock: Any = None,
    exp_emulated: Any = None,
    own: str = "",
) -> KernelTiming:
    """``implementation`` (with the workload's ``head_dim``) applies to the fused attention
    kernels (``overlap="serial-compute"``): their instructions' peak, whether the softmax
    overlaps the products, and the measured efficiency (at ``tile``, where the profile
    measured it there), CTA overhead and cost of diagonal blocks; ``tail``
    (:func:`cta_tail_factor`) multiplies their compute terms; ``clock``
    (:func:`clock_share`) divides a forward kernel's compute terms; ``exp_emulated`` (FA4's
    forward: :func:`memmodel.implementations.fa4_exp_emulated_share`) is the share of the
    exponentials computed on the FMA pipe (term ``exp_fma``) instead of the special-function units."""
    fused = kernel.overlap == "serial-compute"
    impl = implementations.get(implementation) if fused else None
    peak, _ = matmul_peak(profile, dtype, impl.instructions if impl else "native")
    forward = kernel.pass_ != "backward"
    fp32 = profile.peak_flops("fp32")
    softmax_flops = intmath.to_float(kernel.softmax_flops)
    if np.any(np.asarray(kernel.converted_elements) > 0):
        # an FP8 cache converted in registers: the implementation's measured cost an element, else the
        # house's count (the issue-slot rule), on the FP32 pipe with its other FLOPs
        mine = profile.implementation_figures.get(kernel.figures_own) if kernel.figures_own else None
        per = mine.kv_convert_flops if mine is not None and mine.kv_convert_flops is not None else None
        per = implementations.KV_DEQUANT_FLOPS if per is None else per
        softmax_flops = softmax_flops + intmath.to_float(kernel.converted_elements) * per
    # a forward kernel of another implementation's design on this GPU, on the rows of head dims it
    # covers (cuDNN's on Blackwell up to d 128: FA4's)
    found = (
        implementations.forward_design(implementation, profile, dtype, head_dim)
        if impl is not None and forward and kernel.kind == FORWARD_GRID
        else None
    )
    design, design_rows = found if found is not None else (None, False)
    design_spec = implementations.get(design)
    if impl is not None and impl.lazy_rescale and forward:
        # O is rescaled only where a row's maximum jumps past the threshold: taken as never
        softmax_flops = softmax_flops - intmath.to_float(kernel.rescale_flops)
    elif design_spec is not None and design_spec.lazy_rescale:
        rescaled_o = np.where(design_rows, np.asarray(intmath.to_float(kernel.rescale_flops), dtype=np.float64), 0.0)
        softmax_flops = softmax_flops - (float(rescaled_o) if rescaled_o.ndim == 0 else rescaled_o)
    exps = intmath.to_float(kernel.exp_ops)
    emulate = impl is not None and impl.exp_emulation and forward and exp_emulated is not None
    share = np.asarray(exp_emulated, dtype=np.float64) if emulate else 0.0
    compute: dict[str, Seconds] = {
        "matmul": intmath.to_float(kernel.matmul_flops) / peak,
        "softmax": softmax_flops / fp32,
        "exp": exps * (1.0 - share) / (profile.exp_ops_per_s or fp32),
    }
    if emulate:
        compute["exp_fma"] = exps * share * implementations.FA4_EX2_EMULATION_FLOPS / fp32
    hd = intmath.to_float(head_dim) if head_dim is not None else None
    split = kernel.kind == SPLIT_KV
    # what the profile measured of the implementation, read once: for a fused kernel its figures
    # at the head dim (each pass's own, as calibrate fitted them; a split-KV kernel its own
    # efficiency where measured), for a combine kernel its fixed and per-split costs
    # an implementation with no figures of its own takes another's by its stated rule (flashmla: FA3's)
    measured = profile.implementation(implementation)
    if own and _covers(profile.implementation_figures.get(own), kernel):
        measured = profile.implementation_figures[own]
    elif impl is not None and impl.rates_from and measured.efficiency is None:
        measured = profile.implementation(impl.rates_from)
    elif design is not None and np.all(design_rows):
        measured = profile.implementation(design)
    if impl and hd is not None:
        figures = measured.kernel(hd, backward=not forward, split=split, tile=tile, uneven=uneven is not None)
        if design is not None and not np.all(design_rows):  # a grid: the design's rows take its figures
            theirs = profile.implementation(design).kernel(hd, backward=False, split=split, tile=tile, uneven=False)
            figures = _figures_where(design_rows, theirs, figures)
    else:
        figures = KernelFigures()
    eff, masked, local = figures.efficiency, figures.masked_block_cost, figures.local_block_cost
    if eff is not None and not forward and np.any(np.asarray(kernel.narrow_v)):
        eff = narrow_v_efficiency(eff, figures, kernel)
    fp8_share = measured.fp8_share_at(hd if hd is not None else 128) if dtype == "fp8" else None
    if eff is not None and forward and fp8_share is not None:
        # measured: its fp8 kernel keeps this share of its 16-bit efficiency (scales, e4m3 layouts), by head dim
        eff = eff * fp8_share
    masked_columns = figures.uneven_efficiency
    if eff is not None and masked_columns is not None and np.any(uneven):
        # a head dim no kernel is built for: the built one's kernel, its padded columns masked
        eff = np.where(uneven, np.asarray(eff) * masked_columns, eff)
        eff = float(eff) if np.ndim(eff) == 0 else eff
    scale = np.asarray(1.0 / eff if eff is not None else 1.0) * (tail if tail is not None else 1.0)
    slowed = clock is not None and fused and forward  # the clocks the power limit leaves
    if slowed:
        scale = scale / np.asarray(clock, dtype=np.float64)
    boost = light_load_boost(kernel, profile, dtype) if fused else None
    if boost is not None:  # fewer SMs busy than the measured load: faster clocks
        scale = scale / boost
    if masked is not None and np.any(np.asarray(kernel.diagonal_blocks) > 0):
        # a diagonal block costs 1 + masked plain blocks (the mask is applied element by element)
        blocks = np.maximum(np.asarray(intmath.to_float(kernel.blocks), dtype=np.float64), 1.0)
        scale = scale * (1.0 + masked * np.asarray(intmath.to_float(kernel.diagonal_blocks)) / blocks)
    checked = figures.checked_step_cost is not None and np.any(np.asarray(kernel.checked_blocks) > 0)
    if checked:
        # a bounds-checked step (lengths not multiples of the tiles) costs 1 + checked plain steps
        blocks = np.maximum(np.asarray(intmath.to_float(kernel.blocks), dtype=np.float64), 1.0)
        cost = figures.checked_step_cost * np.asarray(intmath.to_float(kernel.checked_blocks))
        scale = scale * (1.0 + cost / blocks)
    paged_cost = measured.paged_step_cost if measured is not None else ()
    paged = bool(paged_cost) and np.any(np.asarray(kernel.paged_blocks) > 0)
    if paged:
        # measured: a step through the page table costs 1 + paged plain steps, by the K/V block
        # it loads (pages smaller than flex's block make its steps small and many)
        blocks = np.maximum(np.asarray(intmath.to_float(kernel.blocks), dtype=np.float64), 1.0)
        per = np.asarray(interpolate_log2(paged_cost, np.asarray(intmath.to_float(kernel.kv_block))))
        scale = scale * (1.0 + per * np.asarray(intmath.to_float(kernel.paged_blocks)) / blocks)
    windowed = local is not None and np.any(np.asarray(kernel.local_blocks) > 0)
    if windowed:
        # a sliding-window forward's every block costs 1 + local plain blocks (its mask, applied to each)
        blocks = np.maximum(np.asarray(intmath.to_float(kernel.blocks), dtype=np.float64), 1.0)
        scale = scale * (1.0 + local * np.asarray(intmath.to_float(kernel.local_blocks)) / blocks)
    rescaled = slowed or boost is not None
    if eff is not None or tail is not None or masked is not None or rescaled or windowed or checked or paged:
        compute = {k: np.asarray(v, dtype=np.float64) * scale for k, v in compute.items()}
        compute = {k: float(v) if v.ndim == 0 else v for k, v in compute.items()}
    if fused:
        # split-K warps (flash-attn v1): their shared-memory exchange and barriers, issued by the
        # same warps between their products; at the shared memory's own rates (no efficiency or
        # masked-block cost: measured on kernels that do neither), the CTAs' tail and clocks apply
        exchange = exchange_terms(kernel, profile)
        if exchange:
            xs = np.asarray(tail if tail is not None else 1.0, dtype=np.float64)
            if clock is not None and forward:
                xs = xs / np.asarray(clock, dtype=np.float64)
            if boost is not None:
                xs = xs / boost
            for key, value in exchange.items():
                out = np.asarray(value, dtype=np.float64) * xs
                compute[key] = float(out) if out.ndim == 0 else out
    terms: dict[str, Seconds] = dict(compute)
    drop_rate = figures.dropout_scores_per_s
    if drop_rate is not None and np.any(np.asarray(kernel.dropout_scores) > 0):
        # measured: the extra time of the pass with dropout (Philox draws, the mask) per score
        # drawn, issued by the same warps as the products: it adds to the compute
        extra = np.asarray(intmath.to_float(kernel.dropout_scores), dtype=np.float64) / drop_rate
        terms["dropout"] = float(extra) if extra.ndim == 0 else extra
    overhead = figures.cta_overhead_s
    if overhead is not None and np.any(np.asarray(kernel.ctas) > 0):
        # each CTA's fixed costs (forward: Q in, the first K/V tile's latency, O out; backward:
        # K, V in, dK, dV out), once per CTA the busiest slot runs (the waves rounded up)
        slots = np.maximum(np.asarray(intmath.to_float(kernel.concurrent_ctas), dtype=np.float64), 1.0)
        cta = np.ceil(np.asarray(intmath.to_float(kernel.ctas), dtype=np.float64) / slots) * overhead
        if np.any(np.asarray(kernel.cta_passes) != 1):  # flash-attn v1: again at every K/V block
            cta = cta * np.asarray(intmath.to_float(kernel.cta_passes), dtype=np.float64)
        exit_cost = figures.exited_cta_cost_s
        if exit_cost is not None and np.any(np.asarray(kernel.exited_ctas) > 0):
            # CTAs that exit at once cost their start alone (measured), not a whole CTA's fixed costs
            ctas = np.maximum(np.asarray(intmath.to_float(kernel.ctas), dtype=np.float64), 1.0)
            exited = np.asarray(intmath.to_float(kernel.exited_ctas), dtype=np.float64)
            cta = cta * ((ctas - exited) + exited * (exit_cost / overhead)) / ctas
        loop_cost = figures.local_loop_cost_s
        if loop_cost is not None and np.any(np.asarray(kernel.loop_ctas) > 0):
            # measured: a sliding-window CTA that runs past its masking steps costs this much more,
            # per CTA slot (FlashAttention-2's second loop), for its share of the waves
            ctas = np.maximum(np.asarray(intmath.to_float(kernel.ctas), dtype=np.float64), 1.0)
            looped = np.asarray(intmath.to_float(kernel.loop_ctas), dtype=np.float64) / ctas
            cta = cta + np.ceil(ctas / slots) * looped * loop_cost
        terms["cta"] = float(cta) if cta.ndim == 0 else cta
    bandwidth = profile.levels()  # the MALL only where the profile has one (its bytes: traffic.mall)
    for level in ALL_LEVELS:
        if level not in bandwidth:
            continue
        moved = kernel.bytes(level=level)
        if not (isinstance(moved, np.ndarray) or moved):
            continue
        library = _library_hbm(kernel, profile, hd) if level == "hbm" else None
        write_bw = profile.hbm.write_bandwidth_bytes_per_s if level == "hbm" else None
        if library is not None:
            terms[level] = library
        elif write_bw:
            reads = intmath.to_float(kernel.bytes(level=level, direction="read"))
            writes = intmath.to_float(kernel.bytes(level=level, direction="write"))
            terms[level] = reads / bandwidth[level] + writes / write_bw
        else:
            terms[level] = intmath.to_float(moved) / bandwidth[level]
        if level == "hbm" and library is None and measured.hbm_share is not None:
            # measured: the implementation's own loads reach this share of the profile's rate
            terms[level] = terms[level] / measured.hbm_share
    in_flight = np.asarray(intmath.to_float(intmath.mul(kernel.concurrent_ctas, kernel.bytes_in_flight_per_cta)))
    cta_rate = figures.cta_bandwidth_bytes_per_s
    by_block = measured.block_step_time_s
    if split and by_block and np.any(np.asarray(kernel.kv_block) > 0) and np.any(np.asarray(kernel.cta_steps) > 0):
        # measured: one CTA's time a K/V block step by the block it loads (flex: the page), whatever
        # its bytes (its loads wait on each other); the busiest CTA's steps, once per wave of the
        # CTAs that find blocks
        step = interpolate_log2(by_block, np.asarray(intmath.to_float(kernel.kv_block), dtype=np.float64))
        share = measured.contiguous_step_share
        if share is not None and np.any(np.asarray(kernel.mask_keys) > 0):
            # measured: over contiguous K/V (the kernel builds its default mask) a step reads no page
            # table first, and takes this share of the block's step time
            step = np.where(np.asarray(kernel.mask_keys) > 0, step * share, step)
        if cta_rate is not None and np.any(np.asarray(kernel.step_bytes) > 0):
            # measured with it: the step's K/V loads at one CTA's rate (d 128 steps load twice d 64's)
            step = step + np.asarray(intmath.to_float(kernel.step_bytes), dtype=np.float64) / cta_rate
        slots = np.maximum(np.asarray(intmath.to_float(kernel.concurrent_ctas), dtype=np.float64), 1.0)
        working = np.asarray(intmath.to_float(kernel.ctas), dtype=np.float64) - np.asarray(
            intmath.to_float(kernel.exited_ctas), dtype=np.float64
        )
        if measured.co_resident_cost:
            # measured: each further CTA on the busiest SM of a wave slows every step by this share
            sharing = np.ceil(np.minimum(np.maximum(working, 1.0), slots) / float(profile.sm_count))
            step = step * (1.0 + measured.co_resident_cost * (sharing - 1.0))
        lat = np.ceil(working / slots) * np.asarray(intmath.to_float(kernel.cta_steps), dtype=np.float64) * step
        terms["latency"] = float(lat) if np.ndim(lat) == 0 else lat
    elif (
        not split
        and measured is not None
        and measured.template_step_time_s
        and np.any(np.asarray(kernel.cta_steps) > 0)
        and np.any(np.asarray(kernel.kv_block) > 0)
    ):
        # measured: a forward template's CTA holding a decode's few query rows over a paged cache
        # takes at least this long a step, by the K/V block it loads, once per wave
        step = interpolate_log2(measured.template_step_time_s, np.asarray(intmath.to_float(kernel.kv_block)))
        slots = np.maximum(np.asarray(intmath.to_float(kernel.concurrent_ctas), dtype=np.float64), 1.0)
        waves = np.ceil(np.asarray(intmath.to_float(kernel.ctas), dtype=np.float64) / slots)
        lat = waves * np.asarray(intmath.to_float(kernel.cta_steps), dtype=np.float64) * np.asarray(step)
        terms["latency"] = float(lat) if np.ndim(lat) == 0 else lat
    elif cta_rate is not None:
        # measured: one split-KV CTA streams K/V at this rate (its loads wait on each other)
        ctas = np.asarray(intmath.to_float(kernel.concurrent_ctas), dtype=np.float64)
        hbm = np.asarray(intmath.to_float(kernel.bytes(level="hbm")))
        # each of a (split, K/V head)'s row tiles streams the whole chunk
        hbm = hbm * np.asarray(intmath.to_float(kernel.row_tiles), dtype=np.float64)
        # in whole waves: each CTA's share of the bytes, once for every wave of the grid
        total = np.maximum(np.asarray(intmath.to_float(kernel.ctas), dtype=np.float64), ctas)
        with np.errstate(divide="ignore", invalid="ignore"):
            waves = np.ceil(total / np.where(ctas > 0, ctas, 1.0))
            lat = np.where(ctas > 0, hbm / np.where(total > 0, total, 1.0) * waves / cta_rate, 0.0)
        if measured.co_resident_cost:
            # measured: each further CTA on an SM slows every CTA there by this share
            sharing = np.ceil(np.maximum(ctas, 1.0) / float(profile.sm_count))
            lat = lat * (1.0 + measured.co_resident_cost * (sharing - 1.0))
        terms["latency"] = float(lat) if lat.ndim == 0 else lat
    elif np.any(in_flight > 0):
        hbm = np.asarray(intmath.to_float(kernel.bytes(level="hbm")))
        with np.errstate(divide="ignore", invalid="ignore"):
            lat = np.where(in_flight > 0, hbm / np.where(in_flight > 0, in_flight, 1.0) * profile.hbm.latency_s, 0.0)
        terms["latency"] = float(lat) if lat.ndim == 0 else lat
    if kernel.kind == COMBINE and measured.combine_time_s is not None:
        # measured: a fixed cost, one per split (each combine CTA walks the splits in turn)
        # and, where measured, the bytes it moves at its own rate
        fixed, per_split = measured.combine_time_s
        lat = fixed + per_split * np.asarray(intmath.to_float(kernel.splits), dtype=np.float64)
        rate = measured.combine_bandwidth_bytes_per_s
        if rate:
            lat = lat + np.asarray(intmath.to_float(kernel.bytes(level="l2")), dtype=np.float64) / rate
        terms["latency"] = float(lat) if lat.ndim == 0 else lat
    if not fused:
        floor = profile.kernel_rates.small_floor(kernel.op, kernel.element_bytes or 2, kernel.outputs or 1)
        if floor is not None:
            # measured: ATen's small kernels and cuBLAS' run at least this long (their CUPTI
            # duration at their smallest) however few bytes they move
            terms["floor"] = float(floor) if np.ndim(floor) == 0 else np.asarray(floor, dtype=np.float64)
    split_overhead = figures.split_cta_overhead_s
    candidates = {k: v for k, v in terms.items() if not (fused and k in (*compute, "cta", "dropout"))}
    if fused:
        arr = {k: np.asarray(v, dtype=np.float64) for k, v in compute.items()}
        if impl is not None and impl.exp_emulation:
            # FA4: MMA, softmax and correction warps issue to the tensor cores, the special-function
            # units and the FMA pipe at once; the pipes overlap, the busiest one bounds
            fma = arr["softmax"] + (arr["exp_fma"] if "exp_fma" in arr else 0.0)
            total = np.maximum(arr["matmul"], np.maximum(arr["exp"], fma))
        elif impl is not None and impl.softmax_overlap and profile.arch_family not in MMA_SYNC_NATIVE:
            # one tile's softmax runs while another tile's products do (FlashAttention-3, cuDNN); on
            # an mma.sync architecture there is no asynchronous warpgroup MMA to overlap them with:
            # its kernels are timed as FlashAttention-2's (the same-instruction rule, docs/profiles.md)
            total = np.maximum(arr["matmul"], arr["exp"] + arr["softmax"])
        else:
            total = arr["matmul"] + arr["exp"] + arr["softmax"]
        for key in EXCHANGE_TERMS:
            if key in arr:
                total = total + arr[key]
        if "cta" in terms:
            total = total + np.asarray(terms["cta"], dtype=np.float64)
        if "dropout" in terms:
            total = total + np.asarray(terms["dropout"], dtype=np.float64)
        candidates["compute"] = total
        terms["compute"] = total if np.ndim(total) else float(total)
    key_time = measured.mask_key_time_s
    if key_time is not None and np.any(np.asarray(kernel.mask_keys) > 0):
        # measured: each wave of CTAs walks the request's keys to build the default block mask,
        # beside its own steps (the longer of the two bounds the wave: flex_decoding without a mask)
        slots = np.maximum(np.asarray(intmath.to_float(kernel.concurrent_ctas), dtype=np.float64), 1.0)
        waves = np.ceil(np.asarray(intmath.to_float(kernel.ctas), dtype=np.float64) / slots)
        mask = waves * np.asarray(intmath.to_float(kernel.mask_keys), dtype=np.float64) * key_time
        terms["mask"] = float(mask) if np.ndim(mask) == 0 else mask
        candidates["mask"] = terms["mask"]
    names = list(candidates)
    largest, index = _largest(list(candidates.values()))
    launches = np.asarray(intmath.to_float(kernel.launches), dtype=np.float64)
    # the launches the implementation makes before its attention kernel (cuDNN's memset): none before a
    # decode's split kernel (the records' profiler lists none)
    extra = impl.extra_launches if impl is not None and kernel.kind != SPLIT_KV else 0
    launch = (profile.launch_overhead_s or 0.0) * (launches + extra)
    launch = float(launch) if np.ndim(launch) == 0 else launch
    time = largest + launch
    if np.any(launch):
        terms["launch"] = launch
    if split_overhead is not None:
        # measured: each wave of split-KV CTAs pays its fixed costs before and after whatever
        # bounds its blocks (short chunks: these costs are much of the kernel)
        slots = np.maximum(np.asarray(intmath.to_float(kernel.concurrent_ctas), dtype=np.float64), 1.0)
        waves = np.ceil(np.asarray(intmath.to_float(kernel.ctas), dtype=np.float64) / slots)
        cta = waves * split_overhead
        terms["cta"] = float(cta) if np.ndim(cta) == 0 else cta
        time = time + cta
    if np.any(np.asarray(kernel.merge_steps) > 0) and profile.l2.latency_s:
        # after the grid barrier each row's partials are merged one after another, a dependent
        # L2 load each (FlashInfer's DevicePersistentMergeStates): the L2 latency a step
        merge = np.asarray(intmath.to_float(kernel.merge_steps), dtype=np.float64) * profile.l2.latency_s
        terms["merge"] = float(merge) if np.ndim(merge) == 0 else merge
        time = time + merge
    if np.ndim(kernel.present):  # a grid's rows where the kernel does not run: no time
        time = np.where(kernel.present, time, 0.0)
    if time.ndim == 0:
        return KernelTiming(kernel.name, terms, float(time), names[int(index)])
    return KernelTiming(kernel.name, terms, time, None, index, tuple(names))


def light_load_boost(kernel: Kernel, profile: Profile, dtype: str) -> Any:
    """How much faster than its measured rate a fused kernel computes on a GPU whose compute rates
    were measured at a clock under a load that fills it (``clock_under_load``, AMD's MAF GEMMs):
    a grid of fewer CTAs than SMs busies a share u of them, and the power they draw at the loaded
    clock lets the clock rise, by the power-clock rule (power ∝ busy SMs × f³, as
    :func:`memmodel.hardware.derive.power_clock` carries a GPU's clocks to a sibling's power per
    SM), to the loaded clock × u^(−1/3), at most the peak clock. None where the profile gives no
    such clock for ``dtype`` or the grid fills every SM (the last wave of a larger grid is not
    counted)."""
    loaded = profile.clock_under_load_hz.get(dtype)
    if not loaded or not profile.clock_hz:
        return None
    from .hardware.derive import POWER_CLOCK_EXPONENT

    ctas = np.asarray(intmath.to_float(kernel.ctas), dtype=np.float64)
    busy = np.clip(ctas / float(profile.sm_count), 1e-9, 1.0)
    if not np.any(busy < 1.0):
        return None
    out = np.minimum(float(profile.clock_hz) / loaded, busy ** (-POWER_CLOCK_EXPONENT))
    out = np.where(ctas > 0, out, 1.0)
    return float(out) if out.ndim == 0 else out


def _covers(figures: Any, kernel: Kernel) -> bool:
    """Whether a library kernel's own figures (``Kernel.figures_own``) measure it: a split-KV
    kernel where they hold any split-KV figure, a combine kernel its time, another fused kernel
    its efficiency (else the figures of its design time it: flex's forward takes the Triton
    kernel's while only flex's decoding kernel is measured)."""
    if figures is None:
        return False
    if kernel.kind == SPLIT_KV:
        return bool(
            figures.split_efficiency
            or figures.cta_bandwidth_bytes_per_s
            or figures.block_step_time_s
            or figures.split_cta_overhead_s
            or figures.mask_key_time_s is not None
            or figures.hbm_share is not None
        )
    if kernel.kind == COMBINE:
        return figures.combine_time_s is not None
    return bool(figures.efficiency)


def fa4_emulated(workload: Any, profile: Profile) -> Any:
    """The share of FA4's forward exponentials emulated on the FMA pipe for ``workload`` (per
    element on a grid): :func:`memmodel.implementations.fa4_exp_emulated_share` at the head dim
    the kernel runs and the query rows it sees (GQA packed)."""
    kw = implementations.kernel_workload(workload, "fa4")
    packed = bool(np.any(np.asarray(kw.n) != np.asarray(workload.n)))
    cap = implementations._capability(profile)
    # a sliding window runs its local kernel, which flash_attn.cute does not count as causal
    # (_resolve_causal_local_window: causal False, local True)
    causal = bool(workload.causal) and workload.window is None

    def one(d: int, rows: int) -> float:
        p = int(implementations.padded_head_dim("fa4", d))
        return implementations.fa4_exp_emulated_share(p, causal, rows, cap, packed)

    if not kw.is_grid:
        return one(int(kw.d), int(kw.n))
    d, rows = np.broadcast_arrays(np.asarray(kw.d), np.asarray(kw.n))
    return np.vectorize(one, otypes=[np.float64])(d, rows)


def _largest(values: list[Any]) -> tuple[Any, np.ndarray]:
    """The largest of ``values`` (floats or arrays that broadcast), element by element, and the
    index of the first one that reaches it: the ``max(axis=0)`` and ``argmax(axis=0)`` of their
    stacked table, without stacking it (numpy's argmax along the first axis of a wide table
    walks it column by column, some 20 times slower than comparing its rows)."""
    rows = [np.asarray(v, dtype=np.float64) for v in values]
    top = rows[0]
    for row in rows[1:]:
        top = np.maximum(top, row)
    if np.isnan(top).any():  # argmax points at the first nan, which no comparison finds
        table = np.stack(np.broadcast_arrays(*rows))
        return table.max(axis=0), table.argmax(axis=0)
    # the first row that reaches the top: the count of the rows before it, which all fall short
    index = np.zeros(np.shape(top), dtype=np.uint8)  # fewer than 256 terms
    short = np.ones(np.shape(top), dtype=bool)
    for row in rows[:-1]:
        short &= row != top
        index += short
    return top, index.astype(np.intp)


def _labels(k: KernelTiming) -> set[str]:
    """The labels that bound ``k`` somewhere (on grids, found from the index, not the labels)."""
    if k.bound_index is None:
        return {str(x) for x in np.ravel(np.asarray(k.bound, dtype=object))}
    names = k.bound_names
    return {names[i] for i in np.flatnonzero(np.bincount(k.bound_index.ravel(), minlength=len(names)))}


def _bound_by(k: KernelTiming, label: str) -> object:
    """Where ``k`` is bound by ``label``: a bool (array)."""
    if k.bound_index is None:
        return np.asarray(k.bound, dtype=object) == label
    names = k.bound_names
    return k.bound_index == names.index(label) if label in names else False


#: the implementations that run FlashAttention-2's forward code, whose uneven causal kernel
#: (``Is_even_MN`` false) has its own measured slowdown (``implementations.<impl>.uneven_causal_slowdown_d<D>``)
FA2_FORWARD_CODE = ("sdpa-flash",)


def uneven_causal_slowdown(
    workload: Any, profile: Profile, implementation: str | None, head_dim: Any, block_q: Any, block_kv: Any
) -> Any:
    """How much longer FlashAttention-2's causal forward takes where its launch is not
    ``Is_even_MN`` (a packed row's ``cu_seqlens``; lengths not multiples of its tiles) than the
    even kernel would, as the profile measured it by a row's Q blocks
    (:meth:`ImplementationFigures.uneven_causal_factor`): a packed row's documents each at
    their own, weighted by the blocks each visits. None where no row's launch is uneven, or not
    causal, windowed, or the profile has no figure; 1 on rows that take none (even, or a head dim
    never measured)."""
    if implementation not in FA2_FORWARD_CODE or workload.window is not None or not bool(np.all(workload.causal)):
        return None
    figures = profile.implementation_figures.get(implementation)
    if figures is None or not figures.uneven_causal_slowdown or head_dim is None:
        return None
    bq, bkv = np.asarray(block_q), np.asarray(block_kv)
    if workload.seq_lens is not None:
        lengths = np.asarray(workload.seq_lens, dtype=np.int64)
        rows = -(-lengths // int(np.max(bq)))
        slow = figures.uneven_causal_factor(np.asarray(head_dim)[..., None], rows)
        if slow is None:
            return None
        work = rows * (rows + 1) / 2.0  # a causal document's visited blocks, in Q-block pairs
        out = np.sum(np.where(np.isnan(slow), 1.0, slow) * work, axis=-1) / max(float(np.sum(work)), 1.0)
        return float(out) if np.ndim(out) == 0 else out
    n, n_kv = np.asarray(workload.n), np.asarray(workload.n_kv_)
    even = (n % bq == 0) & (n_kv % bkv == 0)
    if np.all(even):
        return None
    slow = figures.uneven_causal_factor(head_dim, -(-n // bq))
    if slow is None:
        return None
    out = np.where(even | np.isnan(slow), 1.0, slow)
    return float(out) if out.ndim == 0 else out


def algorithm_time(
    algorithm: AlgorithmTraffic,
    profile: Profile,
    dtype: str,
    implementation: str | None = None,
    head_dim: IntLike | None = None,
    workload: Any = None,
    clocks: str = "boost",
) -> AlgorithmTiming:
    """With ``workload``, FlashAttention-2's forward kernel pays its CTA tail; ``clocks``
    (:data:`CLOCKS`) says how long the GPU has been busy, which decides whether the forward
    kernels run at the clocks the power limit leaves (:func:`clock_share`)."""
    tail = split_tail = None
    spec = implementations.get(implementation)
    # an SM left with one CTA of mma.sync code runs it at this share of its rate
    share = profile.mma_sync_one_cta_share if spec is not None and spec.instructions == "mma_sync" else None
    facts = algorithm.facts  # a tiled algorithm's blocks, occupancy and splits (None: standard)
    if workload is not None and algorithm.variant == "fa2":
        occupancy = param(facts.ctas_per_sm)
        jobs = workload
        by_forward = implementations.splits_by_forward(spec.name if spec is not None else None, facts.blocks.block_q)
        if np.any(by_forward) and np.any(np.asarray(param(facts.splits)) > 1):
            # FA4's (cuDNN's SM100) split forward: a CTA per (Q tile, K/V chunk), each its Q tile's work / splits
            own = np.where(by_forward, np.asarray(param(facts.splits)), 1)
            jobs = workload.with_(batch=intmath.mul(workload.batch, int(own) if own.ndim == 0 else own))
        grid = (jobs, np.asarray(facts.blocks.block_q), np.asarray(facts.blocks.block_kv), profile.sm_count)
        tail = cta_tail_factor(*grid, occupancy, share)
        paired = implementations.paired_q_blocks(implementation, facts.blocks.block_q)
        if np.any(paired):  # aiter's causal grid (a grid's tiles differ by head dim: element by element)
            tail = np.where(paired, cta_tail_factor(*grid, occupancy, share, paired=True), tail)
            tail = float(tail) if np.ndim(tail) == 0 else tail
        if any(k.kind == SPLIT_KV and not k.figures_from for k in algorithm.kernels):
            split_tail = split_tail_factor(workload, param(facts.splits), profile.sm_count, occupancy, share)
        slow = uneven_causal_slowdown(
            workload, profile, implementation, head_dim, facts.blocks.block_q, facts.blocks.block_kv
        )
        if slow is not None:  # measured: the uneven kernel's instruction-fetch stalls (docs/variants.md)
            tail = np.asarray(tail if tail is not None else 1.0) * slow
            tail = float(tail) if np.ndim(tail) == 0 else tail
    fa1_tails: dict[int, Any] = {}  # by kernel (id)
    if workload is not None and algorithm.variant == "fa1" and implementation == "fa1":
        # flash-attn v1: each kernel's CTAs (B·H·splits forward; B·H or B·H·T_c backward) as
        # equal jobs on the SMs at the kernel's CTAs per SM
        for k in algorithm.kernels:
            if k.kind == HEAD_GRID:
                occ = param(facts.backward.ctas_per_sm) if k.pass_ == "backward" else param(facts.ctas_per_sm)
                fa1_tails[id(k)] = equal_jobs_tail(k.ctas, profile.sm_count, occ, share)
    elif workload is not None and algorithm.variant == "fa1":
        # FA1 launches one CTA per (batch, head): B·H equal jobs on the SMs
        jobs = np.asarray(intmath.to_float(intmath.mul(workload.batch, workload.heads)), dtype=np.float64)
        w = jobs / float(profile.sm_count)
        out = np.ceil(w) / w
        tail = float(out) if out.ndim == 0 else out
    # the forward kernel's tiles: an implementation measured at other tiles than its defaults
    # (our Triton kernel) runs at its efficiency there
    tile = (param(facts.blocks.block_q), param(facts.blocks.block_kv)) if algorithm.variant == "fa2" else None
    uneven = None
    if workload is not None and head_dim is not None:
        uneven = np.asarray(workload.d) != np.asarray(head_dim)
        uneven = bool(uneven) if uneven.ndim == 0 else uneven

    emulated = None
    if workload is not None and spec is not None and spec.exp_emulation:
        emulated = fa4_emulated(workload, profile)

    backward_facts = getattr(facts, "backward", None) if facts is not None else None

    def backward_tail(k: Kernel) -> Any:
        """The tail of a FlashAttention-2-style fused backward kernel (CTA per K/V block), or None."""
        if (
            workload is None
            or algorithm.variant != "fa2"
            or backward_facts is None
            or backward_facts.block_q is None
            or k.pass_ != "backward"
            or k.overlap != "serial-compute"
            or k.kind != ""
            or implementation == "flex"
        ):
            return None
        return backward_tail_factor(
            workload,
            k,
            param(backward_facts.block_q),
            param(backward_facts.block_kv),
            profile.sm_count,
            param(backward_facts.ctas_per_sm),
            share,
            paired=implementations.paired_kv_blocks(
                implementation, workload.d, getattr(profile, "arch_family", None), float(workload.dropout)
            ),
        )

    def timed(k: Kernel, clock: Any = None) -> KernelTiming:
        if k.figures_from:  # a library kernel of another's design: its figures and its own tail, not FA2's
            own_tail = None if np.all(np.asarray(k.tail) == 1.0) else k.tail
            return kernel_time(
                k, profile, dtype, k.figures_from, head_dim, own_tail, None, uneven, clock, own=k.figures_own
            )
        found = (
            fa1_tails[id(k)]
            if id(k) in fa1_tails
            else (
                tail
                if k.kind in (FORWARD_GRID, HEAD_GRID)
                else (split_tail if k.kind == SPLIT_KV else backward_tail(k))
            )
        )
        if found is None and not np.all(np.asarray(k.tail) == 1.0):
            found = k.tail  # a library's persistent kernel: its own plan's busiest worker (MLA)
        return kernel_time(
            k,
            profile,
            dtype,
            implementation,
            head_dim,
            found,
            tile if k.kind == FORWARD_GRID else None,
            uneven,
            clock,
            emulated if k.kind == FORWARD_GRID else None,
        )

    kernels = tuple(timed(k) for k in algorithm.kernels)
    total = sum((np.asarray(k.time_s, dtype=np.float64) for k in kernels), np.float64(0.0))
    clock = clock_share(profile, implementation, total, clocks) if clocks != "boost" else None
    if clock is not None:
        # the loop keeps the GPU busy past the power limit's reaction: its forward kernels run
        # at the clocks left (the backward's efficiency was measured so: it stays)
        kernels = tuple(
            timed(k, clock) if k.overlap == "serial-compute" and k.pass_ != "backward" else t
            for k, t in zip(algorithm.kernels, kernels)
        )
        total = sum((np.asarray(k.time_s, dtype=np.float64) for k in kernels), np.float64(0.0))
    # The algorithm is bound by what bounds the kernels that take most of its time.
    labels = sorted(set().union(*(_labels(k) for k in kernels)))
    _, best = _largest(
        [
            sum(
                (np.where(_bound_by(k, label), k.time_s, 0.0) for k in kernels),
                np.float64(0.0),
            )
            * np.ones_like(total)
            for label in labels
        ]
    )
    if np.ndim(total) == 0:
        return AlgorithmTiming(kernels, float(total), labels[int(best)], clock_share=clock)
    return AlgorithmTiming(kernels, total, None, tuple(labels), best, clock_share=clock)
