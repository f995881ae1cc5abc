"""Hardware profiles: load, validate and look up the YAML files in ``hardware/``.

A profile is a :class:`Profile`, a frozen dataclass whose fields carry their units in
their names (``bandwidth_bytes_per_s``). Every number in the YAML is written with its unit
("2039 GB/s") and may name a source; :attr:`Profile.provenance` keeps, for each field path,
the source id and note, so a printed number can be traced back to its datasheet.

Lookup (:func:`load_profile`): anything with a path separator or a ``.yaml``/``.yml``
suffix is a file; a bare name is searched in ``$MEMMODEL_HARDWARE_PATH`` (``os.pathsep``
separated folders), then the user config folder (``$XDG_CONFIG_HOME/memmodel/hardware``,
default ``~/.config/memmodel/hardware``), then the profiles bundled with memmodel.
"""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from . import units
from .errors import ProfileError
from .implementations import PROFILE_IMPLEMENTATIONS as IMPLEMENTATION_NAMES
from .interconnect import COLLECTIVES, TOPOLOGIES, Interconnect
from .traffic.l2 import CAUSAL_CURVE_DIMS, CAUSAL_CURVES

SCHEMA = "memmodel.hardware/1"

#: Dtypes with a compute peak; ``fp32`` is required, the others are optional.
COMPUTE_DTYPES = ("fp32", "tf32", "fp16", "bf16", "fp8")
#: Tiles (B_r, B_c) a profile may hold an implementation's efficiency at besides its default
#: tiles (``implementations.<name>.efficiency_<B_r>x<B_c>``)
TILE_EFFICIENCY_TILES = ((64, 64), (64, 128), (128, 64), (128, 128))
#: Dtypes with an ``mma.sync`` peak (``compute.mma_sync.<dtype>``).
MMA_SYNC_DTYPES = ("fp16", "bf16")


@dataclass(frozen=True)
class MemoryLevel:
    """A memory level shared by the whole chip (HBM, L2)."""

    name: str
    capacity_bytes: float
    bandwidth_bytes_per_s: float
    latency_s: float
    #: Capacity that one data set can use (e.g. one L2 partition's share on H100/H200).
    effective_capacity_bytes: float | None = None
    #: Bandwidth for writes, where it differs from reads (measured by calibrate)
    write_bandwidth_bytes_per_s: float | None = None

    @property
    def usable_capacity_bytes(self) -> float:
        return self.effective_capacity_bytes or self.capacity_bytes


@dataclass(frozen=True)
class Sram:
    """On-chip shared memory: figures are per SM; aggregates are derived, never stored."""

    capacity_per_sm_bytes: float
    bandwidth_per_sm_bytes_per_s: float
    latency_s: float
    sm_count: int

    @property
    def capacity_bytes(self) -> float:
        return self.capacity_per_sm_bytes * self.sm_count

    @property
    def bandwidth_bytes_per_s(self) -> float:
        return self.bandwidth_per_sm_bytes_per_s * self.sm_count


@dataclass(frozen=True)
class KernelRates:
    """What library kernels reach on this GPU, measured by ``memmodel calibrate``.

    Each figure is optional; where one is missing the time model uses the raw ceilings.
    """

    #: HBM bandwidth of cuBLAS products whose traffic is mostly reads (``PV``: an N×N operand)
    gemm_read_bytes_per_s: float | None = None
    #: HBM bandwidth of cuBLAS products whose traffic is mostly writes (``QKᵀ``: an N×N output)
    gemm_write_bytes_per_s: float | None = None
    #: bandwidth of the framework's softmax over the last dimension, by row length (many rows)
    softmax_bytes_per_s: tuple[tuple[int, float], ...] = ()
    #: time of the framework's softmax over one wave of long rows (a block per row, two per
    #: SM): no softmax kernel of fewer rows is shorter, its blocks' passes run one after another
    softmax_row_time_s: float | None = None
    #: bandwidth of the framework's elementwise kernels (``masked_fill_``, dropout)
    elementwise_bytes_per_s: float | None = None
    #: cuBLAS products over N×N_kv operands whose rows are not a multiple of 16 bytes, by head
    #: dim (one figure: the same at every head dim)
    gemm_unaligned_read_bytes_per_s: tuple[tuple[int, float], ...] = ()
    gemm_unaligned_write_bytes_per_s: tuple[tuple[int, float], ...] = ()
    #: the softmax over rows that are not a multiple of 16 bytes, by row length
    softmax_unaligned_bytes_per_s: tuple[tuple[int, float], ...] = ()
    #: the softmax over causally masked scores (−∞ above the diagonal), by row length
    softmax_masked_bytes_per_s: tuple[tuple[int, float], ...] = ()
    #: autograd's softmax gradient (``_softmax_backward_data``), by row length
    softmax_backward_bytes_per_s: tuple[tuple[int, float], ...] = ()
    #: ``native_dropout`` (P in; P' and a one-byte mask out) and its backward
    dropout_bytes_per_s: float | None = None
    dropout_backward_bytes_per_s: float | None = None
    #: the backward pass's elementwise kernels (the scale's and the mask's gradients)
    elementwise_backward_bytes_per_s: float | None = None
    #: ATen's vectorised elementwise kernel multiplying a tensor by a scalar (``s * c``)
    scale_bytes_per_s: float | None = None
    #: a device-to-device copy of a tensor (``clone``: ``cudaMemcpyAsync``)
    copy_bytes_per_s: float | None = None
    #: ATen's sum over a middle dimension (FlashAttention-2's GQA dK, dV sums)
    reduction_bytes_per_s: float | None = None

    def gemm_unaligned_read_rate(self, head_dim: Any) -> Any:
        """The unaligned ``PV``-shaped rate at ``head_dim`` (linear in log2 between measured
        head dims, clamped at the ends); None where not measured."""
        return interpolate_log2(self.gemm_unaligned_read_bytes_per_s, head_dim)

    def gemm_unaligned_write_rate(self, head_dim: Any) -> Any:
        """The unaligned ``QKᵀ``-shaped rate at ``head_dim``; None where not measured."""
        return interpolate_log2(self.gemm_unaligned_write_bytes_per_s, head_dim)

    def softmax_unaligned_rate(self, row_length: Any) -> Any:
        return interpolate_log2(self.softmax_unaligned_bytes_per_s, row_length)

    def softmax_masked_rate(self, row_length: Any) -> Any:
        return interpolate_log2(self.softmax_masked_bytes_per_s, row_length)

    def softmax_backward_rate(self, row_length: Any) -> Any:
        return interpolate_log2(self.softmax_backward_bytes_per_s, row_length)

    def softmax_rate(self, row_length: Any) -> Any:
        """Softmax bandwidth at ``row_length``: the curve, linear in log2(row length) between
        measured points, the end point's figure outside them."""
        return interpolate_log2(self.softmax_bytes_per_s, row_length)


def interpolate_log2(curve: tuple[tuple[int, float], ...], x: Any) -> Any:
    """``curve`` (sorted (x, y) points) at ``x`` (a number or an array), linear in log2(x)
    between points, the end point's value outside them; None for an empty curve."""
    if not curve:
        return None
    xs = np.log2([p[0] for p in curve])
    ys = np.array([p[1] for p in curve])
    arr = np.asarray(x)
    if arr.ndim and arr.size > _LUT_MIN_SIZE and arr.dtype.kind in "iuf":
        # a grid's column of whole numbers (head dims, mostly): the curve at each value up to
        # the largest, looked up (the same arithmetic on each value, in a fraction of the time)
        hi, lo = arr.max(), arr.min()
        if 0 <= lo and hi <= _LUT_MAX:
            whole = arr if arr.dtype.kind in "iu" else arr.astype(np.int64)
            if whole is arr or np.array_equal(whole, arr):
                table = np.interp(np.log2(np.maximum(np.arange(int(hi) + 1, dtype=np.float64), 1.0)), xs, ys)
                return table[whole]
    out = np.interp(np.log2(np.maximum(np.asarray(arr, dtype=np.float64), 1.0)), xs, ys)
    return float(out) if out.ndim == 0 else out


#: :func:`interpolate_log2` looks whole numbers up in a table for arrays longer than this, of
#: values up to the second
_LUT_MIN_SIZE, _LUT_MAX = 4096, 4096


#: What kind of figure a source gives (``sources.<id>.kind``): a vendor's datasheet or
#: whitepaper, a measurement (by whom, where, with which command), a published paper or
#: benchmark, a figure derived by a stated rule from others, or the CUDA driver's report.
SOURCE_KINDS = ("datasheet", "measured", "published", "derived", "device")


@dataclass(frozen=True)
class Source:
    id: str
    title: str
    url: str | None = None
    kind: str | None = None
    #: for measured figures: the machine, the date and the command that measured them
    machine: str | None = None
    date: str | None = None
    command: str | None = None


@dataclass(frozen=True)
class Provenance:
    source: str | None
    note: str | None
    text: str  # the value as written in the file
    #: the source's kind (:data:`SOURCE_KINDS`), None where the source gives none
    kind: str | None = None


@dataclass(frozen=True)
class Profile:
    name: str
    full_name: str
    vendor: str
    architecture: str
    sm_count: int
    clock_hz: float | None
    hbm: MemoryLevel
    l2: MemoryLevel
    sram: Sram
    #: dtype -> peak FLOP/s (dense). fp32 is the non-tensor rate; the others tensor-core rates.
    compute_flops_per_s: Mapping[str, float]
    #: exp() results per second on the special-function units, where known.
    exp_ops_per_s: float | None
    #: time from one kernel's end to the next one's start when launched back to back
    launch_overhead_s: float | None
    sources: Mapping[str, Source]
    provenance: Mapping[str, Provenance] = field(repr=False)
    path: Path | None = None
    origin: str = "file"
    #: what timing a step between two CUDA events adds beyond its kernels' launches (validate's
    #: steps and calibrate's references are timed so; a stream of kernels is not), None: unknown
    event_overhead_s: float | None = None
    #: dtype -> tensor-core peak of warp-level ``mma.sync`` instructions, where measured
    mma_sync_flops_per_s: Mapping[str, float] = field(default_factory=dict)
    #: ``mma.sync`` rate of an SM holding one CTA of 4 warps, as a share of its rate with two
    #: (measured by calibrate; None: not measured, taken as 1)
    mma_sync_one_cta_share: float | None = None
    kernel_rates: KernelRates = field(default_factory=KernelRates)
    #: implementation -> ((head dim, efficiency), ...): the share of the model's compute rate
    #: the implementation reached on a reference shape (measured by ``memmodel calibrate``)
    implementation_efficiency: Mapping[str, tuple[tuple[int, float], ...]] = field(default_factory=dict)
    #: implementation -> {(B_r, B_c): ((head dim, efficiency), ...)}: measured at tiles other
    #: than its defaults (our Triton kernel, whose tiles its users choose)
    implementation_tile_efficiency: Mapping[str, Mapping[tuple[int, int], tuple[tuple[int, float], ...]]] = field(
        default_factory=dict
    )
    #: implementation -> ((head dim, efficiency), ...) of its backward kernel (measured by calibrate)
    implementation_backward_efficiency: Mapping[str, tuple[tuple[int, float], ...]] = field(default_factory=dict)
    #: implementation -> ((head dim, bytes per second), ...) one CTA of its split-KV
    #: (decoding) kernel streams (a single figure: the same at every head dim)
    implementation_cta_bandwidth: Mapping[str, tuple[tuple[int, float], ...]] = field(default_factory=dict)
    #: implementation -> ((head dim, seconds), ...): what a CTA costs beyond its blocks' work
    #: (loading Q, the first K/V tile's latency, writing O), per CTA slot (measured by calibrate)
    implementation_cta_overhead: Mapping[str, tuple[tuple[int, float], ...]] = field(default_factory=dict)
    #: implementation -> ((head dim, ratio), ...): extra cost of a K/V block on the causal
    #: diagonal (masked element by element), in units of a plain block's compute
    implementation_masked_cost: Mapping[str, tuple[tuple[int, float], ...]] = field(default_factory=dict)
    #: the same two for the fused backward kernel: what a CTA costs beyond its blocks (K_j, V_j
    #: in, dK_j, dV_j out), per CTA slot, and what a diagonal block costs beyond a plain one
    implementation_backward_cta_overhead: Mapping[str, tuple[tuple[int, float], ...]] = field(default_factory=dict)
    implementation_backward_masked_cost: Mapping[str, tuple[tuple[int, float], ...]] = field(default_factory=dict)
    #: implementation -> ((head dim, scores per second), ...): what dropout adds to its fused
    #: forward (``dropout_rate``) and backward (``backward_dropout_rate``) kernels, the Philox
    #: draws and the mask, as scores per second of extra time (measured by calibrate)
    implementation_dropout_rate: Mapping[str, tuple[tuple[int, float], ...]] = field(default_factory=dict)
    implementation_backward_dropout_rate: Mapping[str, tuple[tuple[int, float], ...]] = field(default_factory=dict)
    #: implementation -> (fixed, per split) seconds of its split-KV combine kernel (calibrate's
    #: decoding references)
    implementation_combine_time: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    #: implementation -> bytes per second its combine kernel moves (partial O in, O out) beyond
    #: its fixed and per-split costs (calibrate: each kernel's own duration)
    implementation_combine_bandwidth: Mapping[str, float] = field(default_factory=dict)
    #: implementation -> ((built head dim, efficiency), ...): what a head dim no kernel is
    #: built for costs on the built one it runs at (padded columns masked), as a share
    implementation_uneven_efficiency: Mapping[str, tuple[tuple[int, float], ...]] = field(default_factory=dict)
    #: implementation -> ((head dim, efficiency), ...) of its split-KV kernel (64-row CTAs of
    #: 4 warps: not the forward kernel's tiles), from calibrate's split prefill references
    implementation_split_efficiency: Mapping[str, tuple[tuple[int, float], ...]] = field(default_factory=dict)
    #: implementation -> ((head dim, seconds), ...): what its split-KV kernel costs per wave of
    #: CTAs beyond their blocks (Q in, the first tile's latency, the partial O out)
    implementation_split_cta_overhead: Mapping[str, tuple[tuple[int, float], ...]] = field(default_factory=dict)
    #: implementation -> its forward kernel's rate once the clocks have fallen under the power
    #: limit, as a share of its rate before (calibrate: its long reference run back to back)
    implementation_sustained_share: Mapping[str, float] = field(default_factory=dict)
    #: implementation -> seconds of its kernel run back to back after which the clocks fall
    #: (the more power it draws, the sooner)
    implementation_sustained_after: Mapping[str, float] = field(default_factory=dict)
    #: compute capability ("9.0") or the AMD target ("gfx942")
    compute_capability: str | None = None
    #: the profile whose figures this one's missing ones were derived from (``derive_from``)
    derived_from: str | None = None
    #: every figure by field path, in base units (curves as tuples): what derivation reads
    figures: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)
    #: the links to other GPUs (``interconnect:``), None where the profile gives none
    interconnect: Interconnect | None = None

    def efficiency(self, implementation: str | None, head_dim: Any, tile: tuple[Any, Any] | None = None) -> Any:
        """Measured efficiency of ``implementation`` at ``head_dim`` (linear in log2 between
        the measured head dims, clamped at the ends); None where not measured. With ``tile``
        (B_r, B_c, numbers or arrays), where the profile measured the implementation at that
        tile (``efficiency_<B_r>x<B_c>``), that figure instead."""
        if implementation is None:
            return None
        out = interpolate_log2(self.implementation_efficiency.get(implementation, ()), head_dim)
        by_tile = self.implementation_tile_efficiency.get(implementation) if tile is not None else None
        if out is None or not by_tile:
            return out
        bq, bkv = (np.asarray(x) for x in tile)
        for (a, b), curve in by_tile.items():
            out = np.where((bq == a) & (bkv == b), interpolate_log2(curve, head_dim), out)
        return float(out) if np.ndim(out) == 0 else out

    @staticmethod
    def _by_head_dim(
        table: Mapping[str, tuple[tuple[int, float], ...]], implementation: str | None, head_dim: Any
    ) -> Any:
        """``implementation``'s curve in ``table`` at ``head_dim`` (linear in log2 between the
        measured head dims, clamped at the ends); None where not measured."""
        if implementation is None:
            return None
        return interpolate_log2(table.get(implementation, ()), head_dim)

    def backward_efficiency(self, implementation: str | None, head_dim: Any) -> Any:
        """Measured efficiency of ``implementation``'s backward kernel at ``head_dim``; None where not measured."""
        return self._by_head_dim(self.implementation_backward_efficiency, implementation, head_dim)

    def dropout_rate(self, implementation: str | None, head_dim: Any, backward: bool = False) -> Any:
        """Scores per second whose dropout ``implementation``'s fused forward (``backward``:
        backward) kernel pays extra time for, at ``head_dim``; None where not measured."""
        if implementation is None:
            return None
        rates = self.implementation_backward_dropout_rate if backward else self.implementation_dropout_rate
        return interpolate_log2(rates.get(implementation, ()), head_dim)

    def cta_bandwidth(self, implementation: str | None, head_dim: Any) -> Any:
        """Bytes per second one split-KV CTA of ``implementation`` streams at ``head_dim``
        (linear in log2 between measured head dims, clamped at the ends); None where not measured."""
        return self._by_head_dim(self.implementation_cta_bandwidth, implementation, head_dim)

    def cta_overhead(self, implementation: str | None, head_dim: Any) -> Any:
        """Seconds a CTA of ``implementation`` costs beyond its blocks, at ``head_dim``; None where not measured."""
        return self._by_head_dim(self.implementation_cta_overhead, implementation, head_dim)

    def uneven_efficiency(self, implementation: str | None, head_dim: Any) -> Any:
        """Share of its rate ``implementation``'s kernel for the built ``head_dim`` keeps when
        it runs a smaller head dim padded; None where not measured."""
        return self._by_head_dim(self.implementation_uneven_efficiency, implementation, head_dim)

    def split_efficiency(self, implementation: str | None, head_dim: Any) -> Any:
        """Measured efficiency of ``implementation``'s split-KV kernel at ``head_dim``; None where not measured."""
        return self._by_head_dim(self.implementation_split_efficiency, implementation, head_dim)

    def split_cta_overhead(self, implementation: str | None, head_dim: Any) -> Any:
        """Seconds a wave of ``implementation``'s split-KV CTAs costs beyond their blocks; None where not measured."""
        return self._by_head_dim(self.implementation_split_cta_overhead, implementation, head_dim)

    def sustained_share(self, implementation: str | None) -> float | None:
        """``implementation``'s forward rate under the power limit, as a share of its rate
        before the clocks fall; None where not measured (or no time to fall is known)."""
        if implementation is None or implementation not in self.implementation_sustained_after:
            return None
        return self.implementation_sustained_share.get(implementation)

    def sustained_after(self, implementation: str | None) -> float | None:
        """Seconds of ``implementation``'s kernel run back to back after which the clocks fall."""
        return self.implementation_sustained_after.get(implementation or "")

    def masked_cost(self, implementation: str | None, head_dim: Any) -> Any:
        """Extra cost of a diagonal (masked) block of ``implementation``, in plain blocks; None where not measured."""
        return self._by_head_dim(self.implementation_masked_cost, implementation, head_dim)

    def backward_cta_overhead(self, implementation: str | None, head_dim: Any) -> Any:
        """Seconds a CTA of ``implementation``'s fused backward kernel costs beyond its blocks; None where not measured."""
        return self._by_head_dim(self.implementation_backward_cta_overhead, implementation, head_dim)

    def backward_masked_cost(self, implementation: str | None, head_dim: Any) -> Any:
        """Extra cost of a diagonal block of ``implementation``'s fused backward kernel, in plain
        blocks; None where not measured."""
        return self._by_head_dim(self.implementation_backward_masked_cost, implementation, head_dim)

    @property
    def arch_family(self) -> str | None:
        """volta, ampere, ada, hopper, blackwell (NVIDIA, from the compute capability) or
        cdna3 (AMD gfx942); None where the profile does not say."""
        cap = (self.compute_capability or "").strip().lower()
        if cap.startswith("gfx94"):
            return "cdna3"
        try:
            major, minor = (int(x) for x in cap.split(".")[:2])
        except ValueError:
            return None
        if major == 7:
            return "volta" if minor < 5 else "turing"
        if major == 8:
            return "ada" if minor >= 9 else "ampere"
        if major == 9:
            return "hopper"
        if major in (10, 11, 12):
            return "blackwell"
        return None

    def kind_of(self, fpath: str) -> str | None:
        """The provenance kind of one figure (``compute.fp16``), None where unknown or absent."""
        prov = self.provenance.get(fpath)
        return prov.kind if prov is not None else None

    def peak_flops(self, dtype: str) -> float:
        """Peak dense FLOP/s for ``dtype``; a :class:`ProfileError` if the GPU has none."""
        try:
            return self.compute_flops_per_s[dtype]
        except KeyError:
            have = ", ".join(self.compute_flops_per_s)
            raise ProfileError(f"{self.name} has no {dtype} compute peak in its profile (it has {have})") from None

    def levels(self) -> dict[str, float]:
        """Bandwidth of each memory level, bytes/s (SRAM aggregated over SMs)."""
        return {
            "hbm": self.hbm.bandwidth_bytes_per_s,
            "l2": self.l2.bandwidth_bytes_per_s,
            "sram": self.sram.bandwidth_bytes_per_s,
        }


# ---------------------------------------------------------------------------------------
# Schema: path -> (kind, required). Mappings not listed here are structure.

#: the measured causal re-read curves, per causal schedule and head dim (traffic.l2.CAUSAL_CURVES)
_CAUSAL_CURVE_FIELDS = tuple(
    f"memory.l2.{prefix}_d{d}" for c in CAUSAL_CURVES.values() for prefix in c.prefixes() for d in CAUSAL_CURVE_DIMS
)
_FIELDS: dict[str, tuple[units.Kind, bool]] = {
    "sm_count": ("count", True),
    "clock": ("frequency", False),
    "launch_overhead": ("time", False),
    "event_overhead": ("time", False),
    "memory.hbm.capacity": ("bytes", True),
    "memory.hbm.bandwidth": ("bandwidth", True),
    "memory.hbm.write_bandwidth": ("bandwidth", False),
    "memory.hbm.datasheet_bandwidth": ("bandwidth", False),
    "memory.hbm.latency": ("time", True),
    "memory.l2.capacity": ("bytes", True),
    "memory.l2.effective_capacity": ("bytes", False),
    "memory.l2.reuse": ("ratio", False),
    "memory.l2.wave_drift": ("ratio", False),
    "memory.l2.causal_gqa_others": ("ratio", False),
    **{f: ("ratio", False) for f in _CAUSAL_CURVE_FIELDS},
    "memory.l2.bandwidth": ("bandwidth", True),
    "memory.l2.latency": ("time", True),
    "memory.sram.capacity_per_sm": ("bytes", True),
    "memory.sram.bandwidth_per_sm": ("bandwidth", True),
    "memory.sram.latency": ("time", True),
    "compute.fp32": ("flops", True),
    "compute.tf32": ("flops", False),
    "compute.fp16": ("flops", False),
    "compute.bf16": ("flops", False),
    "compute.fp8": ("flops", False),
    "compute.exp": ("ops", False),
    **{f"compute.mma_sync.{d}": ("flops", False) for d in MMA_SYNC_DTYPES},
    "compute.mma_sync.one_cta_share": ("ratio", False),
    "kernels.gemm.read_bandwidth": ("bandwidth", False),
    "kernels.gemm.write_bandwidth": ("bandwidth", False),
    "kernels.softmax.bandwidth": ("bandwidth", False),
    "kernels.softmax.row_time": ("time", False),
    "kernels.elementwise.bandwidth": ("bandwidth", False),
    "kernels.gemm.unaligned_read_bandwidth": ("bandwidth", False),
    "kernels.gemm.unaligned_write_bandwidth": ("bandwidth", False),
    "kernels.softmax.unaligned_bandwidth": ("bandwidth", False),
    "kernels.softmax.masked_bandwidth": ("bandwidth", False),
    "kernels.softmax_backward.bandwidth": ("bandwidth", False),
    "kernels.dropout.bandwidth": ("bandwidth", False),
    "kernels.dropout_backward.bandwidth": ("bandwidth", False),
    "kernels.elementwise_backward.bandwidth": ("bandwidth", False),
    "kernels.scale.bandwidth": ("bandwidth", False),
    "kernels.copy.bandwidth": ("bandwidth", False),
    "kernels.reduction.bandwidth": ("bandwidth", False),
    **{f"implementations.{name}.efficiency": ("ratio", False) for name in IMPLEMENTATION_NAMES},
    **{
        f"implementations.{name}.efficiency_{a}x{b}": ("ratio", False)
        for name in IMPLEMENTATION_NAMES
        for a, b in TILE_EFFICIENCY_TILES
    },
    **{f"implementations.{name}.cta_bandwidth": ("bandwidth", False) for name in IMPLEMENTATION_NAMES},
    **{f"implementations.{name}.cta_overhead": ("time", False) for name in IMPLEMENTATION_NAMES},
    **{f"implementations.{name}.combine_time": ("time", False) for name in IMPLEMENTATION_NAMES},
    **{f"implementations.{name}.combine_time_per_split": ("time", False) for name in IMPLEMENTATION_NAMES},
    **{f"implementations.{name}.combine_bandwidth": ("bandwidth", False) for name in IMPLEMENTATION_NAMES},
    **{f"implementations.{name}.split_efficiency": ("ratio", False) for name in IMPLEMENTATION_NAMES},
    **{f"implementations.{name}.uneven_efficiency": ("ratio", False) for name in IMPLEMENTATION_NAMES},
    **{f"implementations.{name}.split_cta_overhead": ("time", False) for name in IMPLEMENTATION_NAMES},
    **{f"implementations.{name}.backward_efficiency": ("ratio", False) for name in IMPLEMENTATION_NAMES},
    **{f"implementations.{name}.backward_cta_overhead": ("time", False) for name in IMPLEMENTATION_NAMES},
    **{f"implementations.{name}.backward_masked_block_cost": ("ratio", False) for name in IMPLEMENTATION_NAMES},
    **{f"implementations.{name}.sustained_share": ("ratio", False) for name in IMPLEMENTATION_NAMES},
    **{f"implementations.{name}.sustained_after": ("time", False) for name in IMPLEMENTATION_NAMES},
    **{f"implementations.{name}.masked_block_cost": ("ratio", False) for name in IMPLEMENTATION_NAMES},
    **{f"implementations.{name}.dropout_rate": ("ops", False) for name in IMPLEMENTATION_NAMES},
    **{f"implementations.{name}.backward_dropout_rate": ("ops", False) for name in IMPLEMENTATION_NAMES},
    "interconnect.bandwidth": ("bandwidth", False),
    "interconnect.latency": ("time", False),
    "interconnect.peers": ("count", False),
    "interconnect.gpus_per_node": ("count", False),
    "interconnect.inter_node_bandwidth": ("bandwidth", False),
    "interconnect.inter_node_latency": ("time", False),
    **{f"interconnect.{c}_efficiency": ("ratio", False) for c in COLLECTIVES},
    "interconnect.p2p_sms": ("count", False),
    "interconnect.p2p_idle_sms": ("count", False),
}
#: Fields whose value is a curve: a mapping from a whole number (what the key means) to a value
_CURVES: dict[str, str] = {
    #: the share of a cross-wave re-read that misses in L2 against the footprint live across
    #: it (per mille of memory.l2.capacity): the L2 reuse microbenchmark (traffic/reuse.py)
    "memory.l2.reuse": "live footprint, per mille of the L2",
    #: the share of a causal FlashAttention-2 forward's K/V re-reads that miss in L2 against
    #: the K/V live (per mille of memory.l2.capacity), per head dim: one causal head measured
    #: at several lengths (memmodel.calibration.causal_reuse)
    **{f: "live K/V, per mille of the L2" for f in _CAUSAL_CURVE_FIELDS},
    #: how far the CTAs of a FlashAttention-2 wave walking K/V in lockstep drift apart per wave,
    #: as a share of the walk, by head dim (memmodel.calibration.wave_drift)
    "memory.l2.wave_drift": "head dim",
    #: the share of the L2 that other K/V heads add to a causal GQA grid's live K/V at most, by
    #: head dim (memmodel.calibration.causal_reuse.fitted_gqa_others)
    "memory.l2.causal_gqa_others": "head dim",
    "kernels.softmax.bandwidth": "row length",
    "kernels.softmax.unaligned_bandwidth": "row length",
    "kernels.gemm.unaligned_read_bandwidth": "head dim",
    "kernels.gemm.unaligned_write_bandwidth": "head dim",
    "kernels.softmax.masked_bandwidth": "row length",
    "kernels.softmax_backward.bandwidth": "row length",
    **{f"implementations.{name}.backward_efficiency": "head dim" for name in IMPLEMENTATION_NAMES},
    **{f"implementations.{name}.backward_cta_overhead": "head dim" for name in IMPLEMENTATION_NAMES},
    **{f"implementations.{name}.backward_masked_block_cost": "head dim" for name in IMPLEMENTATION_NAMES},
    **{f"implementations.{name}.efficiency": "head dim" for name in IMPLEMENTATION_NAMES},
    **{
        f"implementations.{name}.efficiency_{a}x{b}": "head dim"
        for name in IMPLEMENTATION_NAMES
        for a, b in TILE_EFFICIENCY_TILES
    },
    **{f"implementations.{name}.cta_overhead": "head dim" for name in IMPLEMENTATION_NAMES},
    **{f"implementations.{name}.cta_bandwidth": "head dim" for name in IMPLEMENTATION_NAMES},
    **{f"implementations.{name}.split_efficiency": "head dim" for name in IMPLEMENTATION_NAMES},
    **{f"implementations.{name}.uneven_efficiency": "head dim" for name in IMPLEMENTATION_NAMES},
    **{f"implementations.{name}.split_cta_overhead": "head dim" for name in IMPLEMENTATION_NAMES},
    **{f"implementations.{name}.masked_block_cost": "head dim" for name in IMPLEMENTATION_NAMES},
    **{f"implementations.{name}.dropout_rate": "head dim" for name in IMPLEMENTATION_NAMES},
    **{f"implementations.{name}.backward_dropout_rate": "head dim" for name in IMPLEMENTATION_NAMES},
    **{f"interconnect.{c}_efficiency": "message bytes" for c in COLLECTIVES},
}
#: curves whose values may be 0
_ZERO_ALLOWED = {"memory.l2.reuse", *_CAUSAL_CURVE_FIELDS}
#: curves whose values are shares of something whole (of a walk, of the L2): at most 1
_SHARES_OF_ONE = {
    "memory.l2.wave_drift": "a wave cannot drift apart by more than a whole walk a wave",
    "memory.l2.causal_gqa_others": "a share of the L2",
}
#: curves that may also be one figure (the same at every key)
_SCALAR_OR_CURVE = {
    *(f"implementations.{name}.cta_bandwidth" for name in IMPLEMENTATION_NAMES),
    "kernels.gemm.unaligned_read_bandwidth",
    "kernels.gemm.unaligned_write_bandwidth",
}
_TEXT_FIELDS = {
    "schema": False,
    "name": True,
    "full_name": True,
    "vendor": True,
    "architecture": True,
    "compute_capability": False,
    "derive_from": False,
    "library_rates_from": False,
    "interconnect.topology": False,
}
_SECTIONS = {
    "memory",
    "memory.hbm",
    "memory.l2",
    "memory.sram",
    "compute",
    "compute.mma_sync",
    "kernels",
    "kernels.gemm",
    "kernels.softmax",
    "kernels.elementwise",
    "kernels.softmax_backward",
    "kernels.dropout",
    "kernels.dropout_backward",
    "kernels.elementwise_backward",
    "kernels.scale",
    "kernels.copy",
    "kernels.reduction",
    "implementations",
    *(f"implementations.{name}" for name in IMPLEMENTATION_NAMES),
    "interconnect",
    "sources",
}
#: Largest efficiency a profile may state (a kernel faster than the model by 10× is a wrong profile)
MAX_EFFICIENCY = 10.0


def _fail(where: str, field_path: str, message: str) -> ProfileError:
    return ProfileError(f"{where} -> {field_path}: {message}" if field_path else f"{where}: {message}")


def _allowed_children(prefix: str) -> set[str]:
    names = set()
    for path in [*_FIELDS, *_TEXT_FIELDS, *_SECTIONS]:
        if prefix == "" and "." not in path:
            names.add(path)
        elif prefix and path.startswith(prefix + ".") and "." not in path[len(prefix) + 1 :]:
            names.add(path[len(prefix) + 1 :])
    return names


def _walk(data: Mapping[str, Any], prefix: str, where: str) -> Iterator[tuple[str, Any]]:
    """Yield (path, value) for every leaf; refuse unknown keys with a suggestion."""
    allowed = _allowed_children(prefix)
    for key, value in data.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if path == "sources":  # checked by _parse_sources
            continue
        if not isinstance(key, str) or key not in allowed:
            hint = difflib.get_close_matches(str(key), sorted(allowed), n=1)
            extra = f" (did you mean {hint[0]!r}?)" if hint else f" (allowed: {', '.join(sorted(allowed))})"
            raise _fail(where, path, f"unknown key{extra}")
        if path in _SECTIONS:
            if not isinstance(value, Mapping):
                raise _fail(where, path, "must be a mapping of fields")
            yield from _walk(value, path, where)
        else:
            yield path, value


def parse_profile(data: object, where: str = "<profile>", *, path: Path | None = None, origin: str = "file") -> Profile:
    """Validate parsed YAML and build a :class:`Profile`. ``where`` names the file in errors."""
    if not isinstance(data, Mapping):
        raise _fail(where, "", "a profile must be a YAML mapping (name:, memory:, compute:, ...)")
    sources = _parse_sources(data.get("sources"), where)
    values: dict[str, float] = {}
    curves: dict[str, tuple[tuple[int, float], ...]] = {}
    texts: dict[str, str] = {}
    provenance: dict[str, Provenance] = {}
    for fpath, raw in _walk(data, "", where):
        if fpath in _TEXT_FIELDS:
            if not isinstance(raw, str) or not raw.strip():
                raise _fail(where, fpath, "must be a non-empty string")
            texts[fpath] = raw.strip()
            continue
        kind = _FIELDS[fpath][0]
        source = note = None
        if fpath in _CURVES and isinstance(raw, Mapping) and "value" not in raw:
            raw = {"value": raw}  # a bare curve: {64: 0.9, 128: 0.8}
        if isinstance(raw, Mapping):
            extra = set(raw) - {"value", "source", "note"}
            if extra:
                raise _fail(where, fpath, f"unknown key {sorted(map(str, extra))[0]!r} (allowed: value, source, note)")
            if "value" not in raw:
                raise _fail(where, fpath, "missing 'value'")
            source, note, raw = raw.get("source"), raw.get("note"), raw["value"]
            if source is not None and (not isinstance(source, str) or source not in sources):
                known = ", ".join(sources) or "none are defined under 'sources'"
                raise _fail(where, fpath, f"source {source!r} is not listed under 'sources' ({known})")
            if note is not None and not isinstance(note, str):
                raise _fail(where, fpath, "note must be a string")
        source_kind = sources[source].kind if source is not None else None
        if fpath in _SCALAR_OR_CURVE and not isinstance(raw, Mapping):
            # one figure for every head dim (profiles written before it was measured per head dim)
            try:
                curves[fpath] = ((1, units.parse(raw, kind)),)
            except units.UnitError as exc:
                raise _fail(where, fpath, str(exc)) from None
            provenance[fpath] = Provenance(source=source, note=note, text=str(raw), kind=source_kind)
            continue
        if fpath in _CURVES:
            curves[fpath] = _parse_curve(raw, kind, _CURVES[fpath], where, fpath)
            provenance[fpath] = Provenance(source=source, note=note, text=str(raw), kind=source_kind)
            continue
        try:
            values[fpath] = units.parse(raw, kind)
        except units.UnitError as exc:
            raise _fail(where, fpath, str(exc)) from None
        provenance[fpath] = Provenance(source=source, note=note, text=str(raw), kind=source_kind)
    for fpath, (_, required) in _FIELDS.items():
        if required and fpath not in values:
            raise _fail(where, fpath, f"missing (expected {units.EXAMPLES[_FIELDS[fpath][0]]})")
    for fpath, required in _TEXT_FIELDS.items():
        if required and fpath not in texts:
            raise _fail(where, fpath, "missing (a non-empty string)")
    if "schema" in texts and texts["schema"] != SCHEMA:
        raise _fail(where, "schema", f"{texts['schema']!r} is not supported (expected {SCHEMA!r})")

    sm_count = int(values["sm_count"])
    hbm = MemoryLevel(
        "hbm", values["memory.hbm.capacity"], values["memory.hbm.bandwidth"], values["memory.hbm.latency"]
    )
    l2 = MemoryLevel(
        "l2",
        values["memory.l2.capacity"],
        values["memory.l2.bandwidth"],
        values["memory.l2.latency"],
        values.get("memory.l2.effective_capacity"),
    )
    sram = Sram(
        values["memory.sram.capacity_per_sm"],
        values["memory.sram.bandwidth_per_sm"],
        values["memory.sram.latency"],
        sm_count,
    )
    _check_floors(where, values, provenance)
    _check_consistency(where, hbm, l2, sram)
    compute = {d: values[f"compute.{d}"] for d in COMPUTE_DTYPES if f"compute.{d}" in values}
    return Profile(
        name=texts["name"],
        full_name=texts["full_name"],
        vendor=texts["vendor"],
        architecture=texts["architecture"],
        sm_count=sm_count,
        clock_hz=values.get("clock"),
        hbm=hbm,
        l2=l2,
        sram=sram,
        compute_flops_per_s=compute,
        exp_ops_per_s=values.get("compute.exp"),
        launch_overhead_s=values.get("launch_overhead"),
        event_overhead_s=values.get("event_overhead"),
        sources=sources,
        provenance=provenance,
        path=path,
        origin=origin,
        mma_sync_flops_per_s={
            d: values[f"compute.mma_sync.{d}"] for d in MMA_SYNC_DTYPES if f"compute.mma_sync.{d}" in values
        },
        mma_sync_one_cta_share=values.get("compute.mma_sync.one_cta_share"),
        kernel_rates=KernelRates(
            gemm_read_bytes_per_s=values.get("kernels.gemm.read_bandwidth"),
            gemm_write_bytes_per_s=values.get("kernels.gemm.write_bandwidth"),
            softmax_bytes_per_s=curves.get("kernels.softmax.bandwidth", ()),
            softmax_row_time_s=values.get("kernels.softmax.row_time"),
            elementwise_bytes_per_s=values.get("kernels.elementwise.bandwidth"),
            gemm_unaligned_read_bytes_per_s=curves.get("kernels.gemm.unaligned_read_bandwidth", ()),
            gemm_unaligned_write_bytes_per_s=curves.get("kernels.gemm.unaligned_write_bandwidth", ()),
            softmax_unaligned_bytes_per_s=curves.get("kernels.softmax.unaligned_bandwidth", ()),
            softmax_masked_bytes_per_s=curves.get("kernels.softmax.masked_bandwidth", ()),
            softmax_backward_bytes_per_s=curves.get("kernels.softmax_backward.bandwidth", ()),
            dropout_bytes_per_s=values.get("kernels.dropout.bandwidth"),
            dropout_backward_bytes_per_s=values.get("kernels.dropout_backward.bandwidth"),
            elementwise_backward_bytes_per_s=values.get("kernels.elementwise_backward.bandwidth"),
            scale_bytes_per_s=values.get("kernels.scale.bandwidth"),
            copy_bytes_per_s=values.get("kernels.copy.bandwidth"),
            reduction_bytes_per_s=values.get("kernels.reduction.bandwidth"),
        ),
        implementation_efficiency=_per_implementation(curves, "efficiency"),
        implementation_tile_efficiency={
            name: {
                (a, b): curves[f"implementations.{name}.efficiency_{a}x{b}"]
                for a, b in TILE_EFFICIENCY_TILES
                if f"implementations.{name}.efficiency_{a}x{b}" in curves
            }
            for name in IMPLEMENTATION_NAMES
            if any(f"implementations.{name}.efficiency_{a}x{b}" in curves for a, b in TILE_EFFICIENCY_TILES)
        },
        implementation_cta_bandwidth=_per_implementation(curves, "cta_bandwidth"),
        implementation_backward_efficiency=_per_implementation(curves, "backward_efficiency"),
        implementation_cta_overhead=_per_implementation(curves, "cta_overhead"),
        implementation_masked_cost=_per_implementation(curves, "masked_block_cost"),
        implementation_backward_cta_overhead=_per_implementation(curves, "backward_cta_overhead"),
        implementation_backward_masked_cost=_per_implementation(curves, "backward_masked_block_cost"),
        implementation_dropout_rate=_per_implementation(curves, "dropout_rate"),
        implementation_backward_dropout_rate=_per_implementation(curves, "backward_dropout_rate"),
        implementation_combine_time={
            name: (
                values.get(f"implementations.{name}.combine_time", 0.0),
                values.get(f"implementations.{name}.combine_time_per_split", 0.0),
            )
            for name in IMPLEMENTATION_NAMES
            if f"implementations.{name}.combine_time" in values
            or f"implementations.{name}.combine_time_per_split" in values
        },
        implementation_combine_bandwidth={
            name: values[f"implementations.{name}.combine_bandwidth"]
            for name in IMPLEMENTATION_NAMES
            if f"implementations.{name}.combine_bandwidth" in values
        },
        implementation_split_efficiency=_per_implementation(curves, "split_efficiency"),
        implementation_uneven_efficiency=_per_implementation(curves, "uneven_efficiency"),
        implementation_split_cta_overhead=_per_implementation(curves, "split_cta_overhead"),
        implementation_sustained_share={
            name: values[f"implementations.{name}.sustained_share"]
            for name in IMPLEMENTATION_NAMES
            if f"implementations.{name}.sustained_share" in values
        },
        implementation_sustained_after={
            name: values[f"implementations.{name}.sustained_after"]
            for name in IMPLEMENTATION_NAMES
            if f"implementations.{name}.sustained_after" in values
        },
        compute_capability=texts.get("compute_capability"),
        derived_from=texts.get("derive_from"),
        figures={**values, **curves},
        interconnect=_interconnect(where, values, curves, texts),
    )


def _interconnect(
    where: str, values: Mapping[str, float], curves: Mapping[str, Any], texts: Mapping[str, str]
) -> Interconnect | None:
    """The ``interconnect:`` section, or None where the profile has none (its bandwidth is required)."""
    given = [k for k in (*values, *curves, *texts) if k.startswith("interconnect.")]
    if not given:
        return None
    if "interconnect.bandwidth" not in values:
        raise _fail(where, "interconnect.bandwidth", "missing (per GPU, per direction, e.g. 450 GB/s)")
    topology = texts.get("interconnect.topology", "switch")
    if topology not in TOPOLOGIES:
        raise _fail(where, "interconnect.topology", f"{topology!r} is not one of {', '.join(TOPOLOGIES)}")
    peers = values.get("interconnect.peers")
    if topology == "mesh" and not peers:
        raise _fail(where, "interconnect.peers", "missing: a mesh splits its bandwidth over this many peers")
    gpn = values.get("interconnect.gpus_per_node")
    return Interconnect(
        bandwidth_bytes_per_s=values["interconnect.bandwidth"],
        latency_s=values.get("interconnect.latency", 0.0),
        topology=topology,
        peers=int(peers) if peers else None,
        gpus_per_node=int(gpn) if gpn else None,
        inter_node_bandwidth_bytes_per_s=values.get("interconnect.inter_node_bandwidth"),
        inter_node_latency_s=values.get("interconnect.inter_node_latency"),
        **{f"{c}_efficiency": curves.get(f"interconnect.{c}_efficiency", ()) for c in COLLECTIVES},
        p2p_sms=int(values.get("interconnect.p2p_sms", 0)),
        p2p_idle_sms=int(values.get("interconnect.p2p_idle_sms", 0)),
    )


def _per_implementation(figures: Mapping[str, Any], leaf: str) -> dict[str, Any]:
    """``implementations.<name>.<leaf>`` of every implementation that has it, by name."""
    return {
        name: figures[f"implementations.{name}.{leaf}"]
        for name in IMPLEMENTATION_NAMES
        if f"implementations.{name}.{leaf}" in figures
    }


def _parse_curve(raw: object, kind: units.Kind, key_name: str, where: str, fpath: str) -> tuple[tuple[int, float], ...]:
    """A curve ``{whole number: value}``, sorted by key; values checked like plain fields."""
    keys = "{64: ..., 128: ...}" if key_name == "head dim" else "{1024: ..., 4096: ...}"
    example = f"a mapping from {key_name} to {units.EXAMPLES[kind]}, e.g. {keys}"
    if not isinstance(raw, Mapping) or not raw:
        raise _fail(where, fpath, f"expected {example}")
    points = []
    for key, value in raw.items():
        if isinstance(key, bool) or not isinstance(key, int) or key < 1:
            raise _fail(where, fpath, f"key {key!r} is not a positive whole number ({key_name}); expected {example}")
        try:
            # a miss share may be 0 (every re-read hits); other figures must be positive
            y = 0.0 if fpath in _ZERO_ALLOWED and value in (0, 0.0, "0", "0 %") else units.parse(value, kind)
        except units.UnitError as exc:
            raise _fail(where, f"{fpath}.{key}", str(exc)) from None
        floor = _FLOORS.get(kind)
        if floor is not None and y < floor[0]:
            raise _fail(where, f"{fpath}.{key}", f"{value!r} is below {floor[1]}: not a plausible GPU figure")
        if fpath in _ZERO_ALLOWED and y > 1.0:  # a share of re-reads that miss
            raise _fail(where, f"{fpath}.{key}", f"{value!r} is above 1: a miss share is between 0 and 1")
        if fpath in _SHARES_OF_ONE and y > 1.0:
            raise _fail(where, f"{fpath}.{key}", f"{value!r} is above 1: {_SHARES_OF_ONE[fpath]}")
        if kind == "ratio" and y > MAX_EFFICIENCY:
            raise _fail(where, f"{fpath}.{key}", f"{value!r} is above {MAX_EFFICIENCY:g}: not a plausible efficiency")
        points.append((key, y))
    return tuple(sorted(points))


def _parse_sources(raw: object, where: str) -> dict[str, Source]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise _fail(where, "sources", "must map a source id to {title:, url:, kind:}")
    out = {}
    for key, entry in raw.items():
        fpath = f"sources.{key}"
        if isinstance(entry, str) and entry.strip():
            out[str(key)] = Source(str(key), entry.strip())
            continue
        if not isinstance(entry, Mapping):
            raise _fail(where, fpath, "must be a title string or {title:, url:, kind:}")
        allowed = {"title", "url", "kind", "machine", "date", "command"}
        extra = set(entry) - allowed
        if extra:
            raise _fail(
                where, fpath, f"unknown key {sorted(map(str, extra))[0]!r} (allowed: {', '.join(sorted(allowed))})"
            )
        title, url = entry.get("title"), entry.get("url")
        if not isinstance(title, str) or not title.strip():
            raise _fail(where, f"{fpath}.title", "missing (a non-empty string)")
        for name in ("url", "machine", "date", "command"):
            if entry.get(name) is not None and not isinstance(entry.get(name), str):
                raise _fail(where, f"{fpath}.{name}", "must be a string")
        kind = entry.get("kind")
        if kind is not None and kind not in SOURCE_KINDS:
            raise _fail(where, f"{fpath}.kind", f"{kind!r} is not one of {', '.join(SOURCE_KINDS)}")
        out[str(key)] = Source(
            str(key),
            title.strip(),
            url,
            kind,
            entry.get("machine"),
            None if entry.get("date") is None else str(entry.get("date")),
            entry.get("command"),
        )
    return out


#: Smallest figure of each kind a profile may give: far below any GPU, but enough that a tile
#: fits in SRAM and that a time (count / rate) stays finite for any workload the CLI accepts.
_FLOORS: dict[str, tuple[float, str]] = {
    "bandwidth": (1e6, "1 MB/s"),
    "flops": (1e6, "1 MFLOP/s"),
    "ops": (1e6, "1 Mop/s"),
    "frequency": (1e6, "1 MHz"),
}


def _check_floors(where: str, values: Mapping[str, float], provenance: Mapping[str, Provenance]) -> None:
    for fpath, value in values.items():
        floor = _FLOORS.get(_FIELDS[fpath][0])
        if floor is not None and value < floor[0]:
            raise _fail(where, fpath, f"{provenance[fpath].text!r} is below {floor[1]}: not a plausible GPU figure")
        if _FIELDS[fpath][0] == "ratio" and value > MAX_EFFICIENCY:  # pragma: no cover - ratios are curves
            raise _fail(where, fpath, f"{provenance[fpath].text!r} is above {MAX_EFFICIENCY:g}")
    share = values.get("compute.mma_sync.one_cta_share")
    if share is not None and share > 1:
        text = provenance["compute.mma_sync.one_cta_share"].text
        raise _fail(where, "compute.mma_sync.one_cta_share", f"{text!r} is above 1: one CTA cannot outrun two")
    for fpath in (f for f in values if f.endswith(".sustained_share")):
        if not 0 < values[fpath] <= 1:
            text = provenance[fpath].text
            raise _fail(where, fpath, f"{text!r} is not in (0, 1]: a share of the rate before the clocks fall")
    for fpath in (f for f in values if f.endswith(".sustained_after")):
        if values[fpath] <= 0:
            raise _fail(where, fpath, f"{provenance[fpath].text!r} must be above 0")
    held = values.get("interconnect.p2p_sms")
    if held is not None and held >= values["sm_count"]:
        text = provenance["interconnect.p2p_sms"].text
        raise _fail(
            where, "interconnect.p2p_sms", f"{text!r} leaves no SM of the {values['sm_count']:g} for the compute"
        )
    idle = values.get("interconnect.p2p_idle_sms")
    if idle is not None and idle > values["sm_count"]:
        text = provenance["interconnect.p2p_idle_sms"].text
        raise _fail(where, "interconnect.p2p_idle_sms", f"{text!r} is more than the {values['sm_count']:g} SMs")
    if values["memory.sram.capacity_per_sm"] < 1024:
        text = provenance["memory.sram.capacity_per_sm"].text
        raise _fail(
            where,
            "memory.sram.capacity_per_sm",
            f"{text!r} cannot hold a tile (at least 1 KiB; GPUs have 16 KiB or more)",
        )


def _check_consistency(where: str, hbm: MemoryLevel, l2: MemoryLevel, sram: Sram) -> None:
    if l2.capacity_bytes >= hbm.capacity_bytes:
        raise _fail(
            where,
            "memory.l2.capacity",
            f"{units.format_bytes(l2.capacity_bytes)} is not smaller than HBM "
            f"({units.format_bytes(hbm.capacity_bytes)})",
        )
    if l2.effective_capacity_bytes is not None and l2.effective_capacity_bytes > l2.capacity_bytes:
        raise _fail(where, "memory.l2.effective_capacity", "is larger than memory.l2.capacity")
    if sram.capacity_per_sm_bytes * sram.sm_count > 4 * l2.capacity_bytes + hbm.capacity_bytes:
        raise _fail(
            where, "memory.sram.capacity_per_sm", "times sm_count exceeds any plausible chip"
        )  # pragma: no cover
    if sram.capacity_per_sm_bytes >= l2.capacity_bytes:
        raise _fail(
            where,
            "memory.sram.capacity_per_sm",
            f"{units.format_bytes(sram.capacity_per_sm_bytes, binary=True)} per SM is not smaller than L2 "
            f"({units.format_bytes(l2.capacity_bytes, binary=True)})",
        )
    for name, value in (("hbm", hbm.latency_s), ("l2", l2.latency_s), ("sram", sram.latency_s)):
        if value > 1e-3:
            raise _fail(
                where, f"memory.{name}.latency", f"{value * 1e9:.0f} ns is not a plausible memory latency (under 1 ms)"
            )
    if not math.isfinite(sram.bandwidth_bytes_per_s):  # pragma: no cover - parse() refuses inf
        raise _fail(where, "memory.sram.bandwidth_per_sm", "must be finite")


# ---------------------------------------------------------------------------------------
# Derivation: a sibling's figures from a measured profile of the same architecture

#: How each figure carries over from a base profile to a sibling of the same architecture
#: (first matching pattern wins). ``sm-clock``: per SM per clock (× SMs × clock);
#: ``clock``: per clock (× clock); ``cycles``: a fixed number of cycles (× base clock /
#: clock); ``hbm``: the same share of the datasheet HBM bandwidth; ``l2``: the same share of
#: the L2; ``same``: dimensionless, or fixed in nanoseconds.
DERIVE_RULES: tuple[tuple[str, str], ...] = (
    ("compute.mma_sync.one_cta_share", "same"),
    ("compute.*", "sm-clock"),
    ("memory.l2.bandwidth", "sm-clock"),
    ("memory.sram.bandwidth_per_sm", "clock"),
    ("memory.l2.latency", "cycles"),
    ("memory.sram.latency", "cycles"),
    ("kernels.softmax.row_time", "cycles"),
    ("implementations.*.cta_overhead", "cycles"),
    ("implementations.*.backward_cta_overhead", "cycles"),
    ("implementations.*.split_cta_overhead", "cycles"),
    ("implementations.*.combine_time*", "cycles"),
    ("memory.hbm.bandwidth", "hbm"),
    ("memory.hbm.write_bandwidth", "hbm"),
    ("kernels.*", "hbm"),
    ("memory.l2.effective_capacity", "l2"),
    ("memory.l2.reuse", "same"),
    ("memory.l2.wave_drift", "same"),
    ("memory.l2.causal_gqa_others", "same"),
    ("memory.l2.causal_reuse_d*", "same"),
    ("memory.l2.causal_reuse_h*_d*", "same"),
    ("memory.l2.causal_reuse_gqa_d*", "same"),
    ("memory.l2.cudnn_causal_reuse_d*", "same"),
    ("memory.l2.cudnn_causal_reuse_gqa_d*", "same"),
    ("memory.hbm.latency", "same"),
    ("launch_overhead", "same"),
    ("event_overhead", "same"),
    ("implementations.*.sustained_share", "same"),
    ("implementations.*.sustained_after", "same"),
    ("implementations.*.efficiency", "same"),
    ("implementations.*.split_efficiency", "same"),
    ("implementations.*.uneven_efficiency", "same"),
    ("implementations.*.combine_bandwidth", "hbm"),
    ("implementations.*.efficiency_*", "same"),
    ("implementations.*.backward_efficiency", "same"),
    ("implementations.*.backward_masked_block_cost", "same"),
    ("implementations.*.masked_block_cost", "same"),
    ("implementations.*.dropout_rate", "sm-clock"),
    ("implementations.*.backward_dropout_rate", "sm-clock"),
    ("implementations.*.cta_bandwidth", "same"),
    ("interconnect.*_efficiency", "same"),
    ("interconnect.p2p_sms", "same"),
    ("interconnect.p2p_idle_sms", "same"),
)
RULE_TEXT = {
    "sm-clock": "per SM per clock, × SMs × clock",
    "clock": "per clock, × clock",
    "cycles": "the same cycles, × base clock / clock",
    "hbm": "the same share of the datasheet HBM bandwidth",
    "l2": "the same share of the L2",
    "same": "carried over as is",
}
#: What a derived profile must give itself: the inputs of the rules
_DERIVE_INPUTS = ("sm_count", "clock", "memory.hbm.datasheet_bandwidth", "memory.l2.capacity")


def derive_rule(fpath: str) -> str | None:
    # fnmatch.fnmatchcase's answer for patterns whose one wildcard is "*", without compiling a
    # regular expression per pattern at every start-up (the leftmost match of each piece between
    # stars, in order, is a match if any is)
    for pattern, rule in DERIVE_RULES:
        if "?" in pattern or "[" in pattern:
            import fnmatch

            if fnmatch.fnmatchcase(fpath, pattern):
                return rule
            continue
        if "*" not in pattern:
            if fpath == pattern:
                return rule
            continue
        first, *middle, last = pattern.split("*")
        if len(fpath) < len(first) + len(last) or not fpath.startswith(first) or not fpath.endswith(last):
            continue
        at, end = len(first), len(fpath) - len(last)
        for piece in middle:
            found = fpath.find(piece, at, end)
            if found < 0:
                break
            at = found + len(piece)
        else:
            return rule
    return None


def _leaf(data: Mapping[str, Any], fpath: str) -> Any:
    node: Any = data
    for part in fpath.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _put(data: dict[str, Any], fpath: str, value: Any, where: str) -> None:
    parts = fpath.split(".")
    node = data
    for i, part in enumerate(parts[:-1]):
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise _fail(where, ".".join(parts[: i + 1]), "must be a mapping of fields")
    node[parts[-1]] = value


def _raw_value(raw: Any) -> Any:
    return raw.get("value") if isinstance(raw, Mapping) and "value" in raw else raw


#: What ``library_rates_from`` carries across architectures: the rates of PyTorch's and
#: cuBLAS' memory-bound library kernels (softmax, products over S, elementwise, dropout,
#: reductions), as the same share of the datasheet HBM bandwidth
LIBRARY_FIELDS = "kernels.*"


def derive(data: Mapping[str, Any], where: str, base: Profile, *, library_only: bool = False) -> dict[str, Any]:
    """``data`` (a profile's YAML naming ``derive_from``) with every figure it lacks derived
    from ``base`` by :data:`DERIVE_RULES`; each derived figure's note says rule and inputs.
    ``library_only`` (``library_rates_from``, another architecture): only the library kernels'
    rates (:data:`LIBRARY_FIELDS`), by the HBM rule; the datasheet HBM bandwidth is
    ``memory.hbm.datasheet_bandwidth`` or, in a datasheet profile, ``memory.hbm.bandwidth``."""
    import fnmatch

    out: dict[str, Any] = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in data.items()}
    for key in ("memory", "compute", "kernels", "implementations", "interconnect"):
        if isinstance(out.get(key), Mapping):
            out[key] = _deep_copy(out[key])
    needed = ("memory.hbm.datasheet_bandwidth",) if library_only else _DERIVE_INPUTS
    key_name = "library_rates_from" if library_only else "derive_from"
    inputs: dict[str, float] = {}
    for fpath in needed:
        given, raw = fpath, _raw_value(_leaf(data, fpath))
        if raw is None and library_only:
            given, raw = "memory.hbm.bandwidth", _raw_value(_leaf(data, "memory.hbm.bandwidth"))
        if raw is None:
            raise _fail(where, fpath, f"missing: a profile that derives from {base.name!r} must give it")
        try:
            inputs[fpath] = units.parse(raw, _FIELDS[fpath][0])
        except units.UnitError as exc:
            raise _fail(where, given, str(exc)) from None
    for fpath in needed:
        if fpath not in base.figures:
            raise _fail(where, key_name, f"{base.name!r} has no {fpath}, which derivation needs")
    hbm = inputs["memory.hbm.datasheet_bandwidth"] / base.figures["memory.hbm.datasheet_bandwidth"]
    if library_only:
        scale = {"hbm": hbm}
    else:
        scale = {
            "sm-clock": inputs["sm_count"] * inputs["clock"] / (base.figures["sm_count"] * base.figures["clock"]),
            "clock": inputs["clock"] / base.figures["clock"],
            "cycles": base.figures["clock"] / inputs["clock"],
            "hbm": hbm,
            "l2": inputs["memory.l2.capacity"] / base.figures["memory.l2.capacity"],
            "same": 1.0,
        }
    derived_any = False
    for fpath, value in base.figures.items():
        rule = derive_rule(fpath)
        if library_only and not (fnmatch.fnmatchcase(fpath, LIBRARY_FIELDS) and rule == "hbm"):
            continue
        if rule is None or _leaf(data, fpath) is not None:
            continue
        if fpath.startswith("interconnect.") and _leaf(data, "interconnect.bandwidth") is None:
            continue  # a part without links of its own (H100 PCIe) takes no measured link curve
        kind = _FIELDS[fpath][0]
        factor = scale[rule]
        prov = base.provenance.get(fpath)
        what = f"{base.name}'s {prov.text if prov else value}" + (f" ({prov.kind})" if prov and prov.kind else "")
        if isinstance(value, tuple):  # a curve
            new: Any = {x: units.quantity(y * factor, kind) for x, y in value}
        else:
            new = units.quantity(value * factor, kind)
        note = f"{RULE_TEXT[rule]}" + (f" (× {factor:.4g})" if rule != "same" else "") + f": from {what}"
        _put(out, fpath, {"value": new, "source": "derived", "note": note}, where)
        derived_any = True
    if derived_any:
        sources = dict(out["sources"]) if isinstance(out.get("sources"), Mapping) else {}
        sources["derived"] = {
            "title": (
                f"library kernel rates carried from profile {base.name} ({base.full_name}) across architectures, "
                "as the same share of the datasheet HBM bandwidth (docs/profiles.md)"
                if library_only
                else f"derived from profile {base.name} ({base.full_name}) by memmodel's same-architecture rules "
                "(docs/profiles.md)"
            ),
            "kind": "derived",
        }
        out["sources"] = sources
    return out


def _deep_copy(node: Any) -> Any:
    if isinstance(node, Mapping):
        return {k: _deep_copy(v) for k, v in node.items()}
    return node


# ---------------------------------------------------------------------------------------
# Files and lookup


def load_file(path: str | os.PathLike[str], origin: str = "file", _chain: tuple[str, ...] = ()) -> Profile:
    """Read and validate one YAML profile file (deriving what it lacks from ``derive_from``)."""
    import yaml  # local: keeps `import memmodel` light

    from .fileio import read_text

    p = Path(path)
    where = str(path)
    text = read_text(path, limit=2**20, what="YAML file", error=ProfileError)  # profiles are a few kB
    try:
        # libyaml when present: the pure-Python parser alone takes ~15 ms of start-up
        data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        # say it in the pure-Python parser's words, so messages do not depend on libyaml
        exc = _python_yaml_error(yaml, text) or exc
        mark = getattr(exc, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "not valid YAML"
        raise ProfileError(f"{where}: invalid YAML{line}: {problem}") from None
    except RecursionError:
        raise ProfileError(f"{where}: invalid YAML: nested too deeply") from None
    except (ValueError, TypeError, AttributeError) as exc:  # PyYAML's constructors: 2024-13-45, !!int abc, 5000 digits
        raise ProfileError(f"{where}: invalid YAML: a value cannot be read ({_shorten(str(exc))})") from None
    for key, library_only in (("derive_from", False), ("library_rates_from", True)):
        if isinstance(data, Mapping) and data.get(key) is not None:
            base = _base_profile(data[key], key, where, p, _chain)
            data = derive(data, where, base, library_only=library_only)
    return parse_profile(data, where, path=p, origin=origin)


def _base_profile(spec: object, key: str, where: str, path: Path, chain: tuple[str, ...]) -> Profile:
    """The profile ``key`` (``derive_from``, ``library_rates_from``) names: a name on the search
    path or a file (relative to ``path``'s folder); refuses a cycle."""
    if not isinstance(spec, str) or not spec.strip():
        raise _fail(where, key, "must name a profile (e.g. h200) or a path to one")
    me = str(path.resolve())
    if me in chain or len(chain) > 8:
        raise _fail(where, key, f"{spec!r} derives, directly or not, from this profile: a cycle")
    if is_path(spec):
        spec_path = Path(spec).expanduser()
        return load_file(spec_path if spec_path.is_absolute() else path.parent / spec_path, _chain=(*chain, me))
    return load_profile(spec, _chain=(*chain, me))


def _python_yaml_error(yaml: Any, text: str) -> Exception | None:
    try:
        yaml.safe_load(text)
    except yaml.YAMLError as exc:
        return exc
    except (RecursionError, ValueError, TypeError, AttributeError):
        return None
    return None


def _shorten(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def bundled_dir() -> Path:
    """Folder of the profiles shipped with memmodel (in the wheel or the source tree)."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "profiles", here.parent / "hardware"):
        if candidate.is_dir() and any(candidate.glob("*.yaml")):
            return candidate
    raise ProfileError("the bundled hardware profiles are missing from this installation")  # pragma: no cover


def user_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "memmodel" / "hardware"


def search_dirs() -> list[tuple[str, Path]]:
    """(origin, folder) in lookup order: $MEMMODEL_HARDWARE_PATH, user config, bundled."""
    dirs: list[tuple[str, Path]] = []
    for part in os.environ.get("MEMMODEL_HARDWARE_PATH", "").split(os.pathsep):
        if part.strip():
            dirs.append(("env", Path(part).expanduser()))
    dirs.append(("user", user_dir()))
    dirs.append(("bundled", bundled_dir()))
    return dirs


def available() -> dict[str, tuple[str, Path]]:
    """Profile name (file stem) -> (origin, path); earlier folders shadow later ones."""
    found: dict[str, tuple[str, Path]] = {}
    for origin, folder in search_dirs():
        if not folder.is_dir():
            continue
        for file in sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")]):
            found.setdefault(file.stem, (origin, file))
    return dict(sorted(found.items()))


def is_path(spec: str) -> bool:
    return os.sep in spec or "/" in spec or spec.endswith((".yaml", ".yml"))


def load_profile(spec: str | os.PathLike[str], _chain: tuple[str, ...] = ()) -> Profile:
    """A profile by bundled/user name (``a100``) or by path (``./mine.yaml``)."""
    text = os.fspath(spec)
    if is_path(text):
        return load_file(text, _chain=_chain)
    names = available()
    key = text.strip().lower()
    if key in names:
        origin, file = names[key]
        return load_file(file, origin=origin, _chain=_chain)
    close = _suggest(key, list(names))
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    raise ProfileError(f"unknown GPU {text!r}: {hint}known: {', '.join(names)} (or give a path to a YAML profile)")


def _suggest(key: str, names: list[str]) -> list[str]:
    """Names close to ``key``: the same but for separators (h100sxm), those it begins (h100 ->
    h100-pcie, h100-sxm), else difflib's closest."""

    def norm(text: str) -> str:
        return "".join(ch for ch in text.lower() if ch.isalnum())

    same = [n for n in names if norm(n) == norm(key)]
    if same:
        return same[:1]
    starts = [n for n in names if norm(key) and norm(n).startswith(norm(key))]
    if 0 < len(starts) <= 3:
        return starts
    return difflib.get_close_matches(key, names, n=1, cutoff=0.5)
