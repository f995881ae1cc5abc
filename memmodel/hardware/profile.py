"""A GPU as the model sees it: frozen dataclasses whose field names carry their units.

:class:`Profile` is one GPU; its figures per attention implementation are one
:class:`ImplementationFigures` each (:meth:`Profile.implementation`), empty where the profile
measured nothing. Curves are ``((key, value), ...)`` sorted by key, read by
:func:`interpolate_log2`. Where each figure comes from is :attr:`Profile.provenance`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ProfileError
from ..frozen import frozen
from .interconnect import Interconnect

#: a measured curve: ((key, value), ...) sorted by key (a head dim, a row length, ...)
Curve = tuple[tuple[int, float], ...]


#: the longest row PyTorch's warp-per-row softmax takes (``softmax_warp_forward``, PyTorch 2.7 on:
#: validation/h200/softmax-paths); longer rows run a block a row
WARP_SOFTMAX_ROWS = 2048


def _by_element(two: Any, four: Any, element_bytes: Any) -> Any:
    """``four`` where ``element_bytes`` is 4 or more, else ``two`` (each a rate, an array or None);
    the one measured where the other is None."""
    if two is None or four is None:
        return two if four is None else four
    out = np.where(np.asarray(element_bytes) >= 4, four, two)
    return float(out) if out.ndim == 0 else out


def interpolate_log2(curve: Curve, x: Any) -> Any:
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


@frozen
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


@frozen
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


@frozen
class KernelRates:
    """What library kernels reach on this GPU, measured by ``memmodel calibrate``.

    Each figure is optional; where one is missing the time model uses the raw ceilings.
    """

    #: HBM bandwidth of cuBLAS products whose traffic is mostly reads (``PV``: an N×N operand)
    gemm_read_bytes_per_s: float | None = None
    #: HBM bandwidth of cuBLAS products whose traffic is mostly writes (``QKᵀ``: an N×N output)
    gemm_write_bytes_per_s: float | None = None
    #: bandwidth of the framework's softmax over the last dimension, by row length (many rows)
    softmax_bytes_per_s: Curve = ()
    #: time of the framework's softmax over one wave of long rows (a block per row, two per
    #: SM): no softmax kernel of fewer rows is shorter, its blocks' passes run one after another
    softmax_row_time_s: float | None = None
    #: bandwidth of the framework's elementwise kernels (``masked_fill_``, dropout)
    elementwise_bytes_per_s: float | None = None
    #: cuBLAS products over N×N_kv operands whose rows are not a multiple of 16 bytes, by head
    #: dim (one figure: the same at every head dim)
    gemm_unaligned_read_bytes_per_s: Curve = ()
    gemm_unaligned_write_bytes_per_s: Curve = ()
    #: the softmax over rows that are not a multiple of 16 bytes, by row length
    softmax_unaligned_bytes_per_s: Curve = ()
    #: the softmax over causally masked scores (−∞ above the diagonal), by row length
    softmax_masked_bytes_per_s: Curve = ()
    #: autograd's softmax gradient (``_softmax_backward_data``), by row length
    softmax_backward_bytes_per_s: Curve = ()
    #: ``native_dropout`` (P in; P' and a one-byte mask out) and its backward
    dropout_bytes_per_s: float | None = None
    dropout_backward_bytes_per_s: float | None = None
    #: the backward pass's elementwise kernels (the scale's and the mask's gradients)
    elementwise_backward_bytes_per_s: float | None = None
    #: ATen's vectorised elementwise kernel multiplying a tensor by a scalar (``s * c``)
    scale_bytes_per_s: float | None = None
    #: a device-to-device copy of a tensor (``clone``: ``cudaMemcpyAsync``)
    copy_bytes_per_s: float | None = None
    #: an FP8 tensor's conversion to 16 bits (``x8.to(torch.bfloat16)``: ATen's elementwise copy
    #: across dtypes), bytes read and written; None: the elementwise rate
    fp8_cast_bytes_per_s: float | None = None
    #: ATen's sum over a middle dimension (FlashAttention-2's GQA dK, dV sums)
    reduction_bytes_per_s: float | None = None
    #: a contiguous conversion to a wider dtype (``x.to(torch.float32)`` of bf16: element by
    #: element, about half a copy's rate); None: the copy's rate
    cast_bytes_per_s: float | None = None
    #: ATen's generic elementwise kernel (an operand permuted, strided or broadcast), bytes read
    #: + written, by the run of elements its input holds contiguous in the output's order: 2-byte
    #: elements and 4-byte elements
    gather_bytes_per_s: Curve = ()
    gather_4byte_bytes_per_s: Curve = ()
    #: the same kernel copying an expanded view (a broadcast source, read once), twice the bytes
    #: written a second: 2-byte and 4-byte elements
    expand_bytes_per_s: float | None = None
    expand_4byte_bytes_per_s: float | None = None
    #: ``cat`` whose input is a strided view (``CatArrayBatchedCopy`` indexing it), twice the bytes
    #: written a second
    cat_bytes_per_s: float | None = None
    #: the softmax's time over one row a SM or fewer, by row length: 16-bit and fp32 rows
    softmax_row_floor_s: Curve = ()
    softmax_row_floor_fp32_s: Curve = ()
    #: the shortest a library kernel runs however few its bytes (its CUPTI duration at its smallest;
    #: the model adds the launch overhead): ATen's vectorised elementwise kernel (and contiguous
    #: copies, memsets), its generic one (an operand broadcast or strided), a widening cast, and
    #: cuBLAS' split-K reduction after a product of few output tiles
    small_vectorised_s: float | None = None
    small_generic_s: float | None = None
    small_cast_s: float | None = None
    small_splitk_reduce_s: float | None = None
    #: a cuBLAS product too small for its bytes to matter: its kernel's duration
    small_gemm_s: float | None = None
    #: ATen's fused dropout kernel (``native_dropout``): its duration at its smallest
    small_dropout_s: float | None = None
    #: the same of a reduction, by the elements it writes (rows of 4096 reduced): 16-bit and fp32
    small_reduction_s: Curve = ()
    small_reduction_fp32_s: Curve = ()
    #: a sum over the leading dims (a bias gradient: ATen's column reduction, another kernel than a
    #: row's sum): its fixed time by the rows it reduces, then its bytes at ``column_reduction_bytes_per_s``
    small_column_reduction_s: Curve = ()
    column_reduction_bytes_per_s: float | None = None
    #: the softmax over fp32 rows, by row length (bf16 and fp16 take ``softmax_bytes_per_s``)
    softmax_fp32_bytes_per_s: Curve = ()

    def column_reduction_time(self, rows: Any, read_bytes: Any) -> Any:
        """A sum over the leading dims of ``rows`` rows reading ``read_bytes``: its fixed time by
        the rows (linear in log2 between those measured, the ends' outside) plus the bytes at its
        rate; None without both figures."""
        if not self.small_column_reduction_s or not self.column_reduction_bytes_per_s:
            return None
        fixed = np.asarray(interpolate_log2(self.small_column_reduction_s, np.maximum(np.asarray(rows), 1)))
        out = fixed + np.asarray(read_bytes, dtype=np.float64) / self.column_reduction_bytes_per_s
        return float(out) if np.ndim(out) == 0 else out

    def expand_rate(self, element_bytes: Any) -> Any:
        """The expanded copy's rate for ``element_bytes`` (as :meth:`gather_rate`); None where
        not measured."""
        return _by_element(self.expand_bytes_per_s, self.expand_4byte_bytes_per_s, element_bytes)

    def gather_rate(self, run: Any, element_bytes: Any) -> Any:
        """The generic kernel's rate at ``run`` elements of ``element_bytes`` (4 bytes and more:
        the 4-byte curve; less: the 2-byte curve); None where not measured."""
        two = interpolate_log2(self.gather_bytes_per_s, run)
        four = interpolate_log2(self.gather_4byte_bytes_per_s, run)
        return _by_element(two, four, element_bytes)

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

    def softmax_floor(self, row_length: Any, element_bytes: Any = 2) -> Any:
        """The softmax's shortest time at ``row_length`` (:attr:`softmax_row_floor_s`; the fp32
        curve for 4-byte rows): interpolated within the warp-per-row kernel's rows (up to
        ``warp_rows``) or within the block-per-row kernel's, never across; past the curve's last row
        length, :attr:`softmax_row_time_s` (a wave of rows of 32768). None where not measured."""
        curve = self.softmax_row_floor_fp32_s if np.all(np.asarray(element_bytes) >= 4) else self.softmax_row_floor_s
        if not curve:
            return None
        warp = tuple(p for p in curve if p[0] <= WARP_SOFTMAX_ROWS) or curve
        block = tuple(p for p in curve if p[0] > WARP_SOFTMAX_ROWS) or curve
        rows = np.asarray(row_length, dtype=np.float64)
        out = np.where(rows <= WARP_SOFTMAX_ROWS, interpolate_log2(warp, rows), interpolate_log2(block, rows))
        if self.softmax_row_time_s:
            out = np.where(rows > curve[-1][0], self.softmax_row_time_s, out)
        return float(out) if out.ndim == 0 else out

    def small_floor(self, op: str, element_bytes: Any = 2, outputs: Any = 1) -> Any:
        """The floor of a library kernel of ``op`` (``Kernel.op``): what it takes beyond the launch
        overhead however few its bytes; a reduction's by the elements it writes (``outputs``) and
        its input's ``element_bytes``. None where the profile has no such figure."""
        if op == "reduction":
            curve = self.small_reduction_fp32_s if np.all(np.asarray(element_bytes) >= 4) else self.small_reduction_s
            return interpolate_log2(curve, np.maximum(np.asarray(outputs, dtype=np.float64), 1.0)) if curve else None
        return {
            "scale": self.small_vectorised_s,
            "copy": self.small_vectorised_s,
            "memcpy": self.small_vectorised_s,
            "memset": self.small_vectorised_s,
            "gather": self.small_generic_s,
            "expand": self.small_generic_s,
            "elementwise": self.small_generic_s,
            "cat": self.small_generic_s,
            "cast": self.small_cast_s,
            "splitk_reduce": self.small_splitk_reduce_s,
            "gemm": self.small_gemm_s,
            "dropout": self.small_dropout_s,
        }.get(op)

    def softmax_fp32_rate(self, row_length: Any) -> Any:
        return interpolate_log2(self.softmax_fp32_bytes_per_s, row_length)

    def softmax_rate(self, row_length: Any) -> Any:
        """Softmax bandwidth at ``row_length``: the curve, linear in log2(row length) between
        measured points, the end point's figure outside them."""
        return interpolate_log2(self.softmax_bytes_per_s, row_length)


def _measured_only(curve: Curve, head_dim: Any) -> Any:
    """``curve`` at ``head_dim`` where it was measured there, NaN at another head dim of a grid,
    None where no head dim asked for is one measured (or no curve)."""
    if not curve:
        return None
    d = np.asarray(head_dim, dtype=np.float64)
    inside = np.isin(d, [x for x, _ in curve])
    if not np.any(inside):
        return None
    out = np.where(inside, np.asarray(interpolate_log2(curve, d), dtype=np.float64), np.nan)
    return float(out) if out.ndim == 0 else out


@frozen
class KernelFigures:
    """One fused kernel's measured figures at its head dim (:meth:`ImplementationFigures.kernel`):
    numbers or arrays (a grid's head dims); None where not measured or not the kernel's."""

    #: the share of the model's compute rate the kernel reaches
    efficiency: Any = None
    #: a backward kernel's where V's head dim is below Q's, without the causal mask and with it
    #: (where measured at this head dim; None elsewhere: ``efficiency`` stands)
    dv_efficiency: Any = None
    dv_causal_efficiency: Any = None
    #: what a head dim no kernel is built for keeps of the built one's rate (asked for only)
    uneven_efficiency: Any = None
    #: extra cost of a block on the causal diagonal, in plain blocks
    masked_block_cost: Any = None
    #: extra cost of every step of a kernel whose lengths are not multiples of its tiles (each
    #: load and step bounds-checked: flex's ``IS_DIVISIBLE`` false), in plain steps
    checked_step_cost: Any = None
    #: extra cost of every block a sliding-window forward visits, in plain blocks
    local_block_cost: Any = None
    #: what a CTA that exits at once costs (a packed row's grid past a document's end)
    exited_cta_cost_s: Any = None
    #: what a sliding-window forward's CTA costs beyond its blocks where it runs past its
    #: masking steps (FlashAttention-2's second loop), per CTA slot
    local_loop_cost_s: Any = None
    #: scores per second whose dropout the kernel pays extra time for
    dropout_scores_per_s: Any = None
    #: what a CTA costs beyond its blocks, per CTA slot (not split-KV kernels)
    cta_overhead_s: Any = None
    #: what one split-KV CTA streams (split-KV kernels)
    cta_bandwidth_bytes_per_s: Any = None
    #: what a wave of split-KV CTAs costs beyond their blocks (split-KV kernels)
    split_cta_overhead_s: Any = None


@frozen
class ImplementationFigures:
    """What one attention implementation's kernels reach on this GPU (``implementations.<name>``
    of a profile, measured by ``memmodel calibrate``). Curves are by head dim; an empty curve
    or None: not measured (the time model then uses its instructions' rates alone)."""

    name: str = ""
    #: forward kernel: the share of the model's compute rate it reached on reference shapes
    efficiency: Curve = ()
    #: the same at tiles (B_r, B_c) other than its defaults (our Triton kernel, whose tiles its
    #: users choose): {(B_r, B_c): curve}
    tile_efficiency: Mapping[tuple[int, int], Curve] = field(default_factory=dict)
    #: its fused backward kernel's efficiency
    backward_efficiency: Curve = ()
    #: the same where V's head dim is below Q's (MLA prefill's 192 / 128), by Q's head dim, without
    #: the causal mask and with it; used only at the head dims measured
    backward_dv_efficiency: Curve = ()
    backward_dv_causal_efficiency: Curve = ()
    #: its causal forward's time where the launch is not even (FlashAttention-2's ``Is_even_MN``
    #: false: a packed row, lengths not multiples of its tiles) over the even kernel's, by the Q
    #: blocks of a row: {head dim measured: curve}
    uneven_causal_slowdown: Mapping[int, Curve] = field(default_factory=dict)
    #: its split-KV kernel's efficiency (64-row CTAs of 4 warps: not the forward kernel's tiles)
    split_efficiency: Curve = ()
    #: by the built head dim: what a head dim no kernel is built for keeps of the built one's
    #: rate (padded columns masked)
    uneven_efficiency: Curve = ()
    #: forward, backward: what a CTA costs beyond its blocks' work, per CTA slot (forward: Q in,
    #: the first K/V tile's latency, O out; backward: K_j, V_j in, dK_j, dV_j out)
    cta_overhead_s: Curve = ()
    backward_cta_overhead_s: Curve = ()
    #: what its split-KV kernel costs per wave of CTAs beyond their blocks (Q in, the first
    #: tile's latency, the partial O out)
    split_cta_overhead_s: Curve = ()
    #: forward, backward: extra cost of a K/V block on the causal diagonal (masked element by
    #: element), in units of a plain block's compute
    masked_block_cost: Curve = ()
    backward_masked_block_cost: Curve = ()
    #: forward, backward: extra cost of every step where the lengths are not multiples of the
    #: kernel's tiles (its loads and steps bounds-checked: flex's ``IS_DIVISIBLE`` false), in plain steps
    checked_step_cost: Curve = ()
    backward_checked_step_cost: Curve = ()
    #: forward with a sliding window: extra cost of every block it visits (its kernel applies
    #: the window's mask to each, ``Implementation.masks_every_local_block``), in plain blocks
    local_block_cost: Curve = ()
    #: forward with a sliding window: what a CTA costs beyond its blocks where it walks past its
    #: masking steps (FlashAttention-2's local kernel runs a second loop, the window's mask in it),
    #: per CTA slot; none where its CTAs all do or all do not (the CTA overhead holds it)
    local_loop_cost_s: Curve = ()
    #: forward, backward: what a CTA that exits at once costs, per CTA slot (a packed row's grid
    #: is sized by its longest document; those past a shorter one's end return at their start)
    exited_cta_cost_s: Curve = ()
    #: forward: HBM bytes each CTA writes beyond O and the logsumexp (its spilled registers), by
    #: head dim: the even kernel (lengths multiples of its tiles) and the uneven one (``varlen``:
    #: a packed row, or lengths that are not), causal or not
    spill_write_bytes: Curve = ()
    spill_write_causal_bytes: Curve = ()
    varlen_spill_write_bytes: Curve = ()
    varlen_spill_write_causal_bytes: Curve = ()
    #: the same of its local (sliding-window) kernels, even and not
    local_spill_write_bytes: Curve = ()
    varlen_local_spill_write_bytes: Curve = ()
    #: forward, backward: what dropout adds (the Philox draws and the mask), as scores per
    #: second of extra time
    dropout_scores_per_s: Curve = ()
    backward_dropout_scores_per_s: Curve = ()
    #: bytes per second one CTA of its split-KV (decoding) kernel streams (one figure written
    #: for every head dim is the curve ((1, rate),))
    cta_bandwidth_bytes_per_s: Curve = ()
    #: its split-KV combine kernel: (fixed, per split) seconds, None where neither is measured
    #: (a missing one of the two is 0), and the rate of the bytes it moves beyond them
    combine_time_s: tuple[float, float] | None = None
    combine_bandwidth_bytes_per_s: float | None = None
    #: the share of the profile's HBM streaming rate its kernels reach (a library's loads, issued
    #: its own way: FlashInfer's paged loads); None: the profile's rate
    hbm_share: float | None = None
    #: seconds one CTA of its split-KV kernel takes a K/V block step, by the block it loads a step
    #: (flex's BLOCK_N: the page where paged), whatever the head dim, where that decides its time
    block_step_time_s: Curve = ()
    #: the extra cost of a forward prefill step that reads K/V through a page table (flex over a
    #: paged cache), in plain steps, by the K/V block a step loads (BLOCK_N: at most the page)
    paged_step_cost: Curve = ()
    #: seconds a CTA of its decoding kernel spends per key building the default block mask in the
    #: kernel (flex_attention called without a block mask)
    mask_key_time_s: float | None = None
    #: the extra share of a decoding step's time each further CTA on its SM adds (the SM's pipes
    #: shared: flex's decoding kernel holds 4 to 10 CTAs an SM); None: none
    co_resident_cost: float | None = None
    #: its decoding kernel over contiguous K/V (the default mask built in the kernel's graph): the
    #: share of the block's step time a step takes without a page table to read (its loads'
    #: addresses known); None: the paged step's
    contiguous_step_share: float | None = None
    #: FP32-pipe FLOPs its kernel spends converting one element of an FP8 K/V cache for one query
    #: head (``Kernel.converted_elements``), at its efficiency like its other FLOPs; None: the
    #: house's count (:data:`memmodel.implementations.KV_DEQUANT_FLOPS`)
    kv_convert_flops: float | None = None
    #: seconds one CTA of its forward template takes a step when its Q tile holds a decode's few
    #: rows over a paged cache (every block partial, the page lookup element by element), by the
    #: K/V block a step loads: a latency floor under its products' rate
    template_step_time_s: Curve = ()
    #: its fp8 forward kernel's efficiency as a share of its 16-bit one, by head dim (one figure
    #: for every head dim is the curve ((1, share),); a number given here is taken so too; None or
    #: empty: the same share of the fp8 peak as of the 16-bit peak): :meth:`fp8_share_at`
    fp8_share: Any = ()
    #: its forward kernel's rate once the clocks have fallen under the power limit, as a share
    #: of its rate before, and the seconds of it run back to back after which they fall
    sustained_share: float | None = None
    sustained_after_s: float | None = None
    #: host seconds of one forward call of it from Python (all its launches, memsets and
    #: workspace), and of its backward (the autograd node included): ``--timing call``, ``queued``
    call_host_s: float | None = None
    backward_call_host_s: float | None = None
    #: host seconds of one forward call that splits K/V (a decode: the split plan, its buffers and
    #: the combine's launch); None: ``call_host_s``
    split_call_host_s: float | None = None

    def fp8_share_at(self, head_dim: Any) -> Any:
        """Its fp8 forward's share of its 16-bit efficiency at ``head_dim`` (linear in log2 between
        the head dims measured, clamped at the ends); None where not measured."""
        share = self.fp8_share
        if share is None or (isinstance(share, tuple) and not share):
            return None
        if not isinstance(share, tuple):
            return float(share)
        return interpolate_log2(share, head_dim)

    def efficiency_at(self, head_dim: Any, tile: tuple[Any, Any] | None = None) -> Any:
        """The forward efficiency at ``head_dim`` (linear in log2 between measured head dims,
        clamped at the ends); with ``tile`` (B_r, B_c, numbers or arrays), where it was measured
        at that tile, that figure instead. None where not measured."""
        out = interpolate_log2(self.efficiency, head_dim)
        by_tile = self.tile_efficiency if tile is not None else None
        if out is None or not by_tile:
            return out
        bq, bkv = (np.asarray(x) for x in tile)
        for (a, b), curve in by_tile.items():
            out = np.where((bq == a) & (bkv == b), interpolate_log2(curve, head_dim), out)
        return float(out) if np.ndim(out) == 0 else out

    def uneven_causal_factor(self, head_dim: Any, q_blocks: Any) -> Any:
        """The uneven causal forward's slowdown (:attr:`uneven_causal_slowdown`) for rows of
        ``q_blocks`` Q blocks at ``head_dim`` (numbers or arrays that broadcast): each curve linear
        in log2(Q blocks), clamped at its ends; between measured head dims linear in log2(head
        dim), below the smallest its curve; NaN above the largest (not measured). None without
        curves or where no element has a figure."""
        if not self.uneven_causal_slowdown:
            return None
        d = np.asarray(head_dim, dtype=np.float64)
        dims = sorted(self.uneven_causal_slowdown)
        at = [np.asarray(interpolate_log2(self.uneven_causal_slowdown[x], q_blocks), dtype=np.float64) for x in dims]
        out = np.full(np.broadcast_shapes(d.shape, *(a.shape for a in at)), np.nan)
        out = np.where(d <= dims[0], at[0], out)
        for lo, hi, a, b in zip(dims, dims[1:], at, at[1:]):
            share = (np.log2(np.clip(d, lo, hi)) - np.log2(lo)) / (np.log2(hi) - np.log2(lo))
            out = np.where((d > lo) & (d <= hi), a * (1.0 - share) + b * share, out)
        if np.all(np.isnan(out)):
            return None
        return float(out) if out.ndim == 0 else out

    def spill_write_bytes_at(self, head_dim: Any, *, uneven: bool, causal: bool, local: bool = False) -> Any:
        """The forward's spilled bytes a CTA writes to HBM at ``head_dim`` (a number or an array):
        the curve of its kernel (even or not; local, causal or neither) at the head dims measured,
        0 at any other (another head dim runs another kernel, its spills not measured); None
        without the curve."""
        if local:
            curve = self.varlen_local_spill_write_bytes if uneven else self.local_spill_write_bytes
        elif uneven:
            curve = self.varlen_spill_write_causal_bytes if causal else self.varlen_spill_write_bytes
        else:
            curve = self.spill_write_causal_bytes if causal else self.spill_write_bytes
        if not curve:
            return None
        dims = [x for x, _ in curve]
        d = np.asarray(head_dim, dtype=np.float64)
        inside = np.isin(d, dims)
        out = np.where(inside, np.asarray(interpolate_log2(curve, d), dtype=np.float64), 0.0)
        return float(out) if out.ndim == 0 else out

    def kernel(
        self, head_dim: Any, *, backward: bool = False, split: bool = False, tile: Any = None, uneven: bool = False
    ) -> KernelFigures:
        """The figures of one of its fused kernels at ``head_dim``: the forward (at ``tile``)
        or ``backward`` kernel, or the ``split``-KV kernel (its own efficiency where measured,
        else the forward's); ``uneven``: also the padded head dim's share."""
        at = interpolate_log2
        eff = at(self.backward_efficiency, head_dim) if backward else self.efficiency_at(head_dim, tile)
        if split:
            own = at(self.split_efficiency, head_dim)
            eff = own if own is not None else eff
        return KernelFigures(
            efficiency=eff,
            dv_efficiency=_measured_only(self.backward_dv_efficiency, head_dim) if backward else None,
            dv_causal_efficiency=_measured_only(self.backward_dv_causal_efficiency, head_dim) if backward else None,
            uneven_efficiency=at(self.uneven_efficiency, head_dim) if uneven and not backward else None,
            masked_block_cost=at(self.backward_masked_block_cost if backward else self.masked_block_cost, head_dim),
            checked_step_cost=at(self.backward_checked_step_cost if backward else self.checked_step_cost, head_dim),
            local_block_cost=None if backward else at(self.local_block_cost, head_dim),
            exited_cta_cost_s=None if split else at(self.exited_cta_cost_s, head_dim),
            local_loop_cost_s=None if backward or split else at(self.local_loop_cost_s, head_dim),
            dropout_scores_per_s=at(
                self.backward_dropout_scores_per_s if backward else self.dropout_scores_per_s, head_dim
            ),
            cta_overhead_s=None
            if split
            else at(self.backward_cta_overhead_s if backward else self.cta_overhead_s, head_dim),
            cta_bandwidth_bytes_per_s=at(self.cta_bandwidth_bytes_per_s, head_dim) if split else None,
            split_cta_overhead_s=at(self.split_cta_overhead_s, head_dim) if split else None,
        )

    @property
    def clocks_fall(self) -> tuple[float, float] | None:
        """(share of its forward rate under the power limit, seconds busy before the clocks
        fall), None unless both were measured."""
        if self.sustained_share is None or self.sustained_after_s is None:
            return None
        return self.sustained_share, self.sustained_after_s


@frozen
class HostFigures:
    """What issuing work costs the host (``host:`` of a profile): the CPU and the PyTorch build set
    these, not the GPU, except the gap between a replayed graph's kernels. Seconds; None where the
    profile gives none. Read by :mod:`memmodel.host` (the timing modes call, queued and graph)."""

    #: one ATen op that launches a kernel (elementwise, reduction, softmax, copy, fill), eager, from Python
    op_s: float | None = None
    #: one ATen op that launches nothing (a view, a transpose, a reshape without copy, an allocation)
    view_s: float | None = None
    #: one matmul (mm, bmm, linear: cuBLAS) from Python
    gemm_s: float | None = None
    #: the autograd engine's seconds per backward node, beyond the ops the node dispatches
    autograd_node_s: float | None = None
    #: the same for a node that dispatches only views (a transpose's, a reshape's backward); None:
    #: ``autograd_node_s``
    autograd_view_node_s: float | None = None
    #: what a backward pass costs the host once, beyond its nodes (the engine's start, the gradients' return)
    backward_pass_s: float | None = None
    #: how much later a kernel starts after its launch than an event recorded in its place: what a
    #: user's timer sees beyond the host's dispatch and the kernel where the GPU waits on the host
    launch_latency_s: float | None = None
    #: the share of a fused call's host time spent before its kernels launch (None: all of it)
    launch_share: float | None = None
    #: the same for a call that splits K/V (a decode: its split plan and buffers come before its
    #: launches, more of its host time after them); None: ``launch_share``
    split_launch_share: float | None = None
    #: CUDA-event time of replaying a one-kernel graph, less that kernel's time
    graph_launch_s: float | None = None
    #: GPU seconds between two kernels inside a replayed graph (in place of ``launch_overhead``)
    graph_kernel_gap_s: float | None = None


#: What kind of figure a source gives (``sources.<id>.kind``): a vendor's datasheet or
#: whitepaper, a measurement (by whom, where, with which command), a published paper or
#: benchmark, a figure derived by a stated rule from others, or the CUDA driver's report.
SOURCE_KINDS = ("datasheet", "measured", "published", "derived", "device")


@frozen
class Source:
    """One entry of a profile's ``sources:``: where figures come from, and of what kind."""

    id: str
    title: str
    url: str | None = None
    kind: str | None = None
    #: for measured figures: the machine, the date and the command that measured them
    machine: str | None = None
    date: str | None = None
    command: str | None = None


@frozen
class Provenance:
    """Where one figure of a profile came from: its source, note and the value as written."""

    source: str | None
    note: str | None
    text: str  # the value as written in the file
    #: the source's kind (:data:`SOURCE_KINDS`), None where the source gives none
    kind: str | None = None


#: A profile's :attr:`Profile.rate_class` in one word, for column heads and lists
RATE_LABELS = {
    "measured": "measured",
    "same-architecture": "derived",
    "other-architecture": "transferred",
    "datasheet": "datasheet",
}


def arch_family(compute_capability: str | None) -> str | None:
    """volta, turing, ampere, ada, hopper, blackwell (an NVIDIA compute capability such as
    ``"9.0"``), cdna3 or cdna4 (an AMD target such as ``"gfx942"``); None for others."""
    cap = (compute_capability or "").strip().lower()
    if cap.startswith("gfx94"):
        return "cdna3"
    if cap.startswith("gfx95"):
        return "cdna4"
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


@frozen
class Profile:
    """One GPU: its memory levels, compute rates, measured kernel and implementation
    figures, and where each came from (``load_profile`` builds it from YAML)."""

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
    #: dtype -> the engine clock (Hz) its compute rate was measured at under a GEMM load that
    #: fills the GPU (``clock_under_load.<dtype>``), where the profile gives it: the light-load rule
    clock_under_load_hz: Mapping[str, float] = field(default_factory=dict)
    #: ``mma.sync`` rate of an SM holding one CTA of 4 warps, as a share of its rate with two
    #: (measured by calibrate; None: not measured, taken as 1)
    mma_sync_one_cta_share: float | None = None
    kernel_rates: KernelRates = field(default_factory=KernelRates)
    #: implementation name -> its figures, for the implementations the profile gives figures of
    #: (:meth:`implementation` answers for the others too)
    implementation_figures: Mapping[str, ImplementationFigures] = field(default_factory=dict)
    #: compute capability ("9.0") or the AMD target ("gfx942")
    compute_capability: str | None = None
    #: the profile whose figures this one's missing ones were derived from (``derive_from``)
    derived_from: str | None = None
    #: that profile's :attr:`rate_class` (set where the profile is loaded): a sibling derived
    #: from a transferred or datasheet-only profile rests on what its base rests on
    base_class: str | None = None
    #: the measured profile of another architecture whose shares of the datasheet peaks this
    #: one's achieved figures are (``transfer_from``)
    transferred_from: str | None = None
    #: every figure by field path, in base units (curves as tuples): what derivation reads
    figures: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)
    #: the links to other GPUs (``interconnect:``), None where the profile gives none
    interconnect: Interconnect | None = None
    #: the memory-side cache between the L2 and HBM (``memory.mall``: AMD's Infinity Cache), None
    #: where the GPU has none: then the L2 is the last level before HBM
    mall: MemoryLevel | None = None
    #: private L2 slices (``memory.l2.xcds``: AMD's XCDs): the CUs are split evenly over them and
    #: each slice of ``l2.capacity / l2_xcds`` serves its own CUs only; 1: one L2 for every SM
    l2_xcds: int = 1
    #: what issuing work costs the host (``host:``), None where the profile gives no host figure
    host: HostFigures | None = None

    def implementation(self, name: str | None) -> ImplementationFigures:
        """The figures the profile gives of implementation ``name``; an empty one where it
        gives none (or for None: the paper's algorithm)."""
        found = self.implementation_figures.get(name or "")
        return found if found is not None else ImplementationFigures(name or "")

    def with_implementation_figures(self, name: str | None = None, **changes: Any) -> Profile:
        """A copy whose figures of implementation ``name`` (None: of every implementation it
        has) are replaced by ``changes`` (:class:`ImplementationFigures` fields)."""
        figures = dict(self.implementation_figures)
        for key in [name] if name is not None else list(figures):
            figures[key] = dataclasses.replace(self.implementation(key), **changes)
        return dataclasses.replace(self, implementation_figures=figures)

    @property
    def arch_family(self) -> str | None:
        """volta, ampere, ada, hopper, blackwell (NVIDIA, from the compute capability) or
        cdna3 (AMD gfx942); None where the profile does not say."""
        return arch_family(self.compute_capability)

    @property
    def rate_class(self) -> str:
        """What this profile's rates rest on, the classes a time's range is taken from:
        ``measured`` (calibrated on this GPU), ``same-architecture`` (derived from a measured
        sibling), ``other-architecture`` (a measured GPU's shares of the datasheet peaks),
        ``datasheet`` (the datasheet peaks as they are). A profile derived from a sibling that is
        itself transferred or datasheet-only rests on what the sibling rests on."""
        if self.derived_from:
            return self.base_class if self.base_class in ("other-architecture", "datasheet") else "same-architecture"
        if self.transferred_from:
            return "other-architecture"
        if self.kind_of("memory.hbm.bandwidth") == "measured":
            return "measured"
        return "datasheet"

    def datasheet_peak(self, fpath: str) -> float | None:
        """The datasheet peak of a :data:`~.schema.SHARE_FIGURES` figure (``datasheet:``, or
        the figure itself where its source is a datasheet); None where the profile gives none."""
        given = self.figures.get(f"datasheet.{fpath}")
        if given is None and fpath in ("memory.hbm.bandwidth", "memory.hbm.write_bandwidth"):
            given = self.figures.get("memory.hbm.datasheet_bandwidth")
        if given is None and self.kind_of(fpath) == "datasheet":
            given = self.figures.get(fpath)
        return given

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

    @property
    def last_level(self) -> MemoryLevel:
        """The cache in front of HBM, whose misses are HBM traffic: the MALL where the profile
        has one, else the L2."""
        return self.mall if self.mall is not None else self.l2

    @property
    def l2_slice_bytes(self) -> float:
        """What one XCD's L2 holds (the whole L2 where it is not split)."""
        return self.l2.capacity_bytes / self.l2_xcds

    def levels(self) -> dict[str, float]:
        """Bandwidth of each memory level, bytes/s (SRAM aggregated over SMs; the MALL only
        where the profile has one)."""
        out = {
            "hbm": self.hbm.bandwidth_bytes_per_s,
            "l2": self.l2.bandwidth_bytes_per_s,
            "sram": self.sram.bandwidth_bytes_per_s,
        }
        if self.mall is not None:
            out["mall"] = self.mall.bandwidth_bytes_per_s
        return out
