"""The profile file format (``memmodel.hardware/1``): every field's path, unit kind and whether
it is required; which fields are curves; the sections; the plausibility floors.

The names the format admits are declared here, not read from the model: which implementations
may hold figures (:data:`PROFILE_IMPLEMENTATIONS`) and which causal re-read curves exist
(:data:`CAUSAL_CURVE_PREFIXES`, :data:`CAUSAL_CURVE_DIMS`). They are part of the file format,
so a typo in a profile is refused at the door with the closest name; the model's modules
import them from here, and tests check that both sides agree.
"""

from __future__ import annotations

import functools

from ..errors import ProfileError
from ..units import Kind
from .interconnect import COLLECTIVES

SCHEMA = "memmodel.hardware/1"

#: The GPU a command models when none is named (``--gpu``)
DEFAULT_GPU = "a100"

#: Library kernels that are not an implementation of their own but have measured figures
#: (``Kernel.figures_own``): FlashInfer's FA2-style paged prefill, which ``--impl flashinfer``
#: runs beside its CUDA-core decode and (sm90) FA3-style prefill
LIBRARY_KERNEL_FIGURES: tuple[str, ...] = ("flashinfer-fa2",)
#: Implementations a profile may give measured figures for (``implementations.<name>.*``):
#: every implementation :mod:`memmodel.implementations` knows but the paper's algorithm, and
#: the library kernels of :data:`LIBRARY_KERNEL_FIGURES`
PROFILE_IMPLEMENTATIONS: tuple[str, ...] = (
    "sdpa-flash",
    "sdpa-cudnn",
    "sdpa-efficient",
    "triton",
    "fa3",
    "fa4",
    "fa1",
    "ck",
    "flashinfer",
    "flex",
    "flashmla",
    "sdpa-math",
    *LIBRARY_KERNEL_FIGURES,
)
#: the measured causal re-read curves (``memory.l2.<prefix>_d<head dim>``), of each causal
#: schedule :data:`memmodel.traffic.l2.CAUSAL_CURVES` names: FlashAttention-2's one head, its
#: grids of 2, 4 and 16 heads and its GQA grids; cuDNN's one head and its GQA grids
CAUSAL_CURVE_PREFIXES: tuple[str, ...] = (
    "causal_reuse",
    "causal_reuse_h2",
    "causal_reuse_h4",
    "causal_reuse_h16",
    "causal_reuse_gqa",
    "cudnn_causal_reuse",
    "cudnn_causal_reuse_gqa",
)
#: the head dims a causal re-read curve may be measured at
CAUSAL_CURVE_DIMS = (64, 96, 128, 256)

#: the figures of the optional memory-side cache between the L2 and HBM (``memory.mall``: AMD's
#: Infinity Cache on CDNA 3/4): all three or none
MALL_FIELDS = ("memory.mall.capacity", "memory.mall.bandwidth", "memory.mall.latency")

#: Dtypes with a compute peak; ``fp32`` is required, the others are optional.
COMPUTE_DTYPES = ("fp32", "tf32", "fp16", "bf16", "fp8")
#: the dtypes a profile may give its clock under a dense GEMM load for (``clock_under_load.<dtype>``)
LOADED_CLOCK_DTYPES = ("fp16", "bf16", "fp8")
#: Tiles (B_r, B_c) a profile may hold an implementation's efficiency at besides its default
#: tiles (``implementations.<name>.efficiency_<B_r>x<B_c>``)
TILE_EFFICIENCY_TILES = ((64, 64), (64, 128), (128, 64), (128, 128))
#: Head dims FlashAttention-2's uneven causal slowdown may be measured at
#: (``implementations.<name>.uneven_causal_slowdown_d<D>``: curves by a row's Q blocks)
UNEVEN_CAUSAL_DIMS = (64, 128)
#: Architectures whose warp-level ``mma.sync`` is their tensor cores' full rate (on Hopper and
#: Blackwell it is a slower, older path than ``wgmma``/``tcgen05``; AMD's MFMA is native)
MMA_SYNC_NATIVE = ("volta", "turing", "ampere", "ada", "cdna3", "cdna4")
#: Dtypes with an ``mma.sync`` peak (``compute.mma_sync.<dtype>``).
MMA_SYNC_DTYPES = ("fp16", "bf16")

#: the per-implementation fields that are curves by head dim, and the
#: :class:`~memmodel.hardware.profile.ImplementationFigures` field each fills
IMPLEMENTATION_CURVES: dict[str, str] = {
    "efficiency": "efficiency",
    "backward_efficiency": "backward_efficiency",
    "backward_dv_efficiency": "backward_dv_efficiency",
    "backward_dv_causal_efficiency": "backward_dv_causal_efficiency",
    "cta_bandwidth": "cta_bandwidth_bytes_per_s",
    "cta_overhead": "cta_overhead_s",
    "masked_block_cost": "masked_block_cost",
    "local_block_cost": "local_block_cost",
    "exited_cta_cost": "exited_cta_cost_s",
    "local_loop_cost": "local_loop_cost_s",
    "backward_cta_overhead": "backward_cta_overhead_s",
    "backward_masked_block_cost": "backward_masked_block_cost",
    "checked_step_cost": "checked_step_cost",
    "backward_checked_step_cost": "backward_checked_step_cost",
    "dropout_rate": "dropout_scores_per_s",
    "backward_dropout_rate": "backward_dropout_scores_per_s",
    "uneven_efficiency": "uneven_efficiency",
    "split_efficiency": "split_efficiency",
    "split_cta_overhead": "split_cta_overhead_s",
    "block_step_time": "block_step_time_s",
    "paged_step_cost": "paged_step_cost",
    "template_step_time": "template_step_time_s",
    "spill_write": "spill_write_bytes",
    "spill_write_causal": "spill_write_causal_bytes",
    "varlen_spill_write": "varlen_spill_write_bytes",
    "varlen_spill_write_causal": "varlen_spill_write_causal_bytes",
    "local_spill_write": "local_spill_write_bytes",
    "varlen_local_spill_write": "varlen_local_spill_write_bytes",
    "fp8_share": "fp8_share",
}
#: the per-CTA spill writes (:data:`IMPLEMENTATION_CURVES`): bytes, used only at the head dims measured
SPILL_CURVES = (
    "spill_write",
    "spill_write_causal",
    "varlen_spill_write",
    "varlen_spill_write_causal",
    "local_spill_write",
    "varlen_local_spill_write",
)
#: the per-implementation fields that are one figure, and the field each fills
IMPLEMENTATION_VALUES: dict[str, str] = {
    "combine_bandwidth": "combine_bandwidth_bytes_per_s",
    "sustained_share": "sustained_share",
    "sustained_after": "sustained_after_s",
    "hbm_share": "hbm_share",
    "mask_key_time": "mask_key_time_s",
    "co_resident_cost": "co_resident_cost",
    "contiguous_step_share": "contiguous_step_share",
    "kv_convert_flops": "kv_convert_flops",
    "call_host": "call_host_s",
    "split_call_host": "split_call_host_s",
    "backward_call_host": "backward_call_host_s",
}
#: the host's figures (``host.<leaf>``: times, but the two launch shares) and the
#: :class:`~memmodel.hardware.profile.HostFigures` field each fills: what issuing work costs the
#: CPU and PyTorch (eager, from Python), and what a CUDA graph's replay costs
#: (``memmodel.host``: the timing modes call, queued and graph)
HOST_FIGURES: dict[str, str] = {
    "op": "op_s",
    "view": "view_s",
    "gemm": "gemm_s",
    "autograd_node": "autograd_node_s",
    "autograd_view_node": "autograd_view_node_s",
    "backward_pass": "backward_pass_s",
    "launch_latency": "launch_latency_s",
    "launch_share": "launch_share",
    "split_launch_share": "split_launch_share",
    "graph_launch": "graph_launch_s",
    "graph_kernel_gap": "graph_kernel_gap_s",
}
#: host figures a measurement may find to be 0 (differences of two timings, clipped at 0)
HOST_ZERO = frozenset(
    {
        "host.autograd_node",
        "host.autograd_view_node",
        "host.backward_pass",
        "host.launch_latency",
        "host.launch_share",
        "host.split_launch_share",
        "host.graph_kernel_gap",
    }
)
#: Largest host figure a profile may give, by field, and what a larger one is not: far above any
#: CPU's dispatch (a few to some tens of microseconds an op, tens to hundreds a library call), so a
#: slip of units (12 ms for 12 us) is refused at the door
HOST_CEILINGS: dict[str, tuple[float, str]] = {
    **{f"host.{leaf}": (1e-3, "a plausible host time of one op (under 1 ms)") for leaf in ("op", "view", "gemm")},
    "host.autograd_node": (1e-3, "a plausible host time of one backward node (under 1 ms)"),
    "host.autograd_view_node": (1e-3, "a plausible host time of one backward node (under 1 ms)"),
    "host.backward_pass": (1e-2, "a plausible host time of a backward pass's start and end (under 10 ms)"),
    "host.launch_latency": (1e-3, "a plausible launch latency (under 1 ms)"),
    "host.launch_share": (1.0, "a share of a call's host time (0 to 1)"),
    "host.split_launch_share": (1.0, "a share of a call's host time (0 to 1)"),
    "host.graph_launch": (1e-3, "a plausible graph replay overhead (under 1 ms)"),
    "host.graph_kernel_gap": (1e-3, "a plausible gap between two kernels (under 1 ms)"),
    **{
        f"implementations.{name}.{leaf}": (0.1, "a plausible host time of one library call (under 100 ms)")
        for name in PROFILE_IMPLEMENTATIONS
        for leaf in ("call_host", "split_call_host", "backward_call_host")
    },
}

#: Implementations whose figures a profile of another architecture takes from the measured
#: GPU's figures of the same design (``transfer_from``'s same-design rule): on a GPU of these
#: compute capabilities, each (source implementation, its figures; None: all) in turn fills what
#: is still missing. FA4's Blackwell kernels are FA3's design (warp-specialised producer and
#: consumers, softmax overlapped with the products) on tcgen05: FA3's measured figures first;
#: the clocks under the power limit, which FA3 has none of, from cuDNN's forward (the same
#: design, the same dense tensor-core load)
SAME_DESIGN: dict[str, tuple[tuple[float, float], tuple[tuple[str, tuple[str, ...] | None], ...]]] = {
    "fa4": ((10.0, 11.0), (("fa3", None), ("sdpa-cudnn", ("sustained_share", "sustained_after")))),
}

#: Implementations whose efficiencies the measured GPU gives for kernels of its native tensor-core
#: path (wgmma on a Hopper GPU) and that run, on an architecture whose native path is mma.sync
#: (Ampere, Ada: :data:`MMA_SYNC_NATIVE`), kernels of that class instead (``transfer_from``'s
#: same-instruction rule): there they take the efficiencies of the measured GPU's ``mma.sync``
#: kernel of the same algorithm (FlashAttention-2's: sdpa-flash), never their own wgmma kernels',
#: and are timed as it is, the softmax after the products (no asynchronous warpgroup MMA to
#: overlap them with: ``memmodel.timing``). cuDNN's sm80 kernels, Triton's and FlexAttention's
#: code for sm80 are all FlashAttention-2's algorithm on mma.sync.
SAME_INSTRUCTION: dict[str, str] = {"sdpa-cudnn": "sdpa-flash", "triton": "sdpa-flash", "flex": "sdpa-flash"}
#: the figures the same-instruction rule takes: the fused kernels' efficiencies against the
#: instruction's rate (their other figures, in seconds and bytes, keep their own rules)
SAME_INSTRUCTION_FIGURES = ("efficiency", "backward_efficiency", "uneven_efficiency")

#: Implementations of another vendor that run FlashAttention-2's algorithm and were measured on
#: no GPU (``transfer_from``'s design-ratio rule): their forward runs at the profile's GEMM rate
#: (no efficiency figure), and their backward at the ratio of backward to forward efficiency the
#: measured GPU's kernels of that algorithm reach, by head dim. What makes a backward slower per
#: product FLOP than its forward (P recomputed, dS formed element by element, dQ accumulated
#: across programs, five products over four) is the algorithm's, not the vendor's. CK/aiter's
#: backward is FlashAttention-2's kernels (docs/implementations.md): sdpa-flash's ratio
DESIGN_RATIO: dict[str, str] = {"ck": "sdpa-flash"}

#: Implementations never measured here whose figures every profile takes from another
#: implementation's on the same GPU (the same-family rule, :func:`~.derive.same_family`): the
#: source, the compute capabilities it runs on and the figures it gives. flash-attn v1 (``fa1``) is FlashAttention-2's forerunner on
#: the same instruction class (``mma.sync``), by the same author, with the same Philox dropout:
#: sdpa-flash's (FlashAttention-2's sm80 kernels) efficiencies against the ``mma.sync`` rate,
#: CTA overheads, masked-block costs and dropout rates. What v1 does that FlashAttention-2 does
#: not (its warps' split-K exchange) is modelled apart (``memmodel.traffic.fmha``)
SAME_FAMILY: dict[str, tuple[str, tuple[float, float], tuple[str, ...]]] = {
    "fa1": (
        "sdpa-flash",
        (7.5, 9.0),  # the compute capabilities v1 runs on (memmodel.implementations: fa1)
        (
            "efficiency",
            "backward_efficiency",
            "cta_overhead",
            "backward_cta_overhead",
            "masked_block_cost",
            "backward_masked_block_cost",
            "dropout_rate",
            "backward_dropout_rate",
        ),
    ),
}
#: the source id every figure of the same-family rule cites (its kind is ``derived``)
SAME_FAMILY_SOURCE = "same-family"

_NAMES = PROFILE_IMPLEMENTATIONS
#: the measured causal re-read curves, per prefix and head dim
CAUSAL_CURVE_FIELDS = tuple(f"memory.l2.{prefix}_d{d}" for prefix in CAUSAL_CURVE_PREFIXES for d in CAUSAL_CURVE_DIMS)

#: Schema: path -> (kind, required). Mappings not listed here are structure. Its order is the
#: order calibrate writes a profile in.
FIELDS: dict[str, tuple[Kind, bool]] = {
    "sm_count": ("count", True),
    "clock": ("frequency", False),
    #: the board's power limit (TDP) as its datasheet gives it: the clock rule under the power limit
    "tdp": ("power", False),
    #: the engine clock the compute rates were measured at, under a dense GEMM load that fills the
    #: GPU, by dtype (AMD's MAF table: 1207 MHz bf16 on the MI300X, of its 2100 MHz peak): a kernel
    #: that busies fewer SMs/CUs runs faster clocks (the light-load rule, memmodel.timing)
    **{f"clock_under_load.{d}": ("frequency", False) for d in LOADED_CLOCK_DTYPES},
    "launch_overhead": ("time", False),
    "event_overhead": ("time", False),
    **{f"host.{leaf}": ("ratio" if leaf.endswith("launch_share") else "time", False) for leaf in HOST_FIGURES},
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
    **{f: ("ratio", False) for f in CAUSAL_CURVE_FIELDS},
    "memory.l2.bandwidth": ("bandwidth", True),
    "memory.l2.latency": ("time", True),
    "memory.l2.xcds": ("count", False),
    "memory.mall.capacity": ("bytes", False),
    "memory.mall.bandwidth": ("bandwidth", False),
    "memory.mall.latency": ("time", False),
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
    "kernels.fp8_cast.bandwidth": ("bandwidth", False),
    "kernels.cast.bandwidth": ("bandwidth", False),
    "kernels.gather.bandwidth": ("bandwidth", False),
    "kernels.gather.bandwidth_4byte": ("bandwidth", False),
    "kernels.gather.expand_bandwidth": ("bandwidth", False),
    "kernels.gather.expand_bandwidth_4byte": ("bandwidth", False),
    "kernels.gather.cat_bandwidth": ("bandwidth", False),
    "kernels.softmax.row_floor": ("time", False),
    "kernels.softmax.row_floor_fp32": ("time", False),
    "kernels.softmax.fp32_bandwidth": ("bandwidth", False),
    "kernels.small.vectorised": ("time", False),
    "kernels.small.generic": ("time", False),
    "kernels.small.cast": ("time", False),
    "kernels.small.splitk_reduce": ("time", False),
    "kernels.small.gemm": ("time", False),
    "kernels.small.dropout": ("time", False),
    "kernels.small.reduction": ("time", False),
    "kernels.small.reduction_fp32": ("time", False),
    "kernels.small.column_reduction": ("time", False),
    "kernels.reduction.bandwidth": ("bandwidth", False),
    "kernels.reduction.column_bandwidth": ("bandwidth", False),
    **{f"implementations.{name}.efficiency": ("ratio", False) for name in _NAMES},
    **{
        f"implementations.{name}.efficiency_{a}x{b}": ("ratio", False)
        for name in _NAMES
        for a, b in TILE_EFFICIENCY_TILES
    },
    **{
        f"implementations.{name}.uneven_causal_slowdown_d{d}": ("ratio", False)
        for name in _NAMES
        for d in UNEVEN_CAUSAL_DIMS
    },
    **{f"implementations.{name}.cta_bandwidth": ("bandwidth", False) for name in _NAMES},
    **{f"implementations.{name}.cta_overhead": ("time", False) for name in _NAMES},
    **{f"implementations.{name}.combine_time": ("time", False) for name in _NAMES},
    **{f"implementations.{name}.combine_time_per_split": ("time", False) for name in _NAMES},
    **{f"implementations.{name}.combine_bandwidth": ("bandwidth", False) for name in _NAMES},
    **{f"implementations.{name}.split_efficiency": ("ratio", False) for name in _NAMES},
    **{f"implementations.{name}.uneven_efficiency": ("ratio", False) for name in _NAMES},
    **{f"implementations.{name}.split_cta_overhead": ("time", False) for name in _NAMES},
    **{f"implementations.{name}.backward_efficiency": ("ratio", False) for name in _NAMES},
    #: its fused backward's efficiency where V's head dim is below Q's (MLA prefill's 192 / 128), by Q's
    #: head dim, without the causal mask and with it: in place of ``backward_efficiency`` there
    **{f"implementations.{name}.backward_dv_efficiency": ("ratio", False) for name in _NAMES},
    **{f"implementations.{name}.backward_dv_causal_efficiency": ("ratio", False) for name in _NAMES},
    **{f"implementations.{name}.backward_cta_overhead": ("time", False) for name in _NAMES},
    **{f"implementations.{name}.backward_masked_block_cost": ("ratio", False) for name in _NAMES},
    **{f"implementations.{name}.sustained_share": ("ratio", False) for name in _NAMES},
    **{f"implementations.{name}.sustained_after": ("time", False) for name in _NAMES},
    **{f"implementations.{name}.hbm_share": ("ratio", False) for name in _NAMES},
    **{f"implementations.{name}.fp8_share": ("ratio", False) for name in _NAMES},
    **{f"implementations.{name}.block_step_time": ("time", False) for name in _NAMES},
    **{f"implementations.{name}.mask_key_time": ("time", False) for name in _NAMES},
    **{f"implementations.{name}.template_step_time": ("time", False) for name in _NAMES},
    **{f"implementations.{name}.co_resident_cost": ("ratio", False) for name in _NAMES},
    **{f"implementations.{name}.contiguous_step_share": ("ratio", False) for name in _NAMES},
    **{f"implementations.{name}.kv_convert_flops": ("ratio", False) for name in _NAMES},
    **{f"implementations.{name}.call_host": ("time", False) for name in _NAMES},
    **{f"implementations.{name}.split_call_host": ("time", False) for name in _NAMES},
    **{f"implementations.{name}.backward_call_host": ("time", False) for name in _NAMES},
    **{f"implementations.{name}.masked_block_cost": ("ratio", False) for name in _NAMES},
    **{f"implementations.{name}.checked_step_cost": ("ratio", False) for name in _NAMES},
    **{f"implementations.{name}.paged_step_cost": ("ratio", False) for name in _NAMES},
    **{f"implementations.{name}.backward_checked_step_cost": ("ratio", False) for name in _NAMES},
    **{f"implementations.{name}.local_block_cost": ("ratio", False) for name in _NAMES},
    **{f"implementations.{name}.exited_cta_cost": ("time", False) for name in _NAMES},
    **{f"implementations.{name}.local_loop_cost": ("time", False) for name in _NAMES},
    **{f"implementations.{name}.{leaf}": ("bytes", False) for name in _NAMES for leaf in SPILL_CURVES},
    **{f"implementations.{name}.dropout_rate": ("ops", False) for name in _NAMES},
    **{f"implementations.{name}.backward_dropout_rate": ("ops", False) for name in _NAMES},
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
#: The figures a profile measures that have a datasheet peak: transfer by rule (``transfer_from``)
#: gives a GPU without them the share of its peak that the profile it transfers from measured.
SHARE_FIGURES: tuple[str, ...] = (
    "memory.hbm.bandwidth",
    "memory.hbm.write_bandwidth",
    "memory.l2.bandwidth",
    *(f"compute.{d}" for d in COMPUTE_DTYPES),
    "compute.exp",
)
#: A measured profile's datasheet peaks (``datasheet:``, the same paths), what shares are taken of
FIELDS.update({f"datasheet.{f}": (FIELDS[f][0], False) for f in SHARE_FIGURES})
#: Fields whose value is a curve: a mapping from a whole number (what the key means) to a value
#: (what each curve measures: docs/profiles.md)
CURVES: dict[str, str] = {
    "memory.l2.reuse": "live footprint, per mille of the L2",
    **{f: "live K/V, per mille of the L2" for f in CAUSAL_CURVE_FIELDS},
    "memory.l2.wave_drift": "head dim",
    "memory.l2.causal_gqa_others": "head dim",
    "kernels.softmax.bandwidth": "row length",
    "kernels.softmax.unaligned_bandwidth": "row length",
    "kernels.gemm.unaligned_read_bandwidth": "head dim",
    "kernels.gemm.unaligned_write_bandwidth": "head dim",
    "kernels.softmax.masked_bandwidth": "row length",
    "kernels.softmax_backward.bandwidth": "row length",
    "kernels.softmax.fp32_bandwidth": "row length",
    "kernels.softmax.row_floor": "row length",
    "kernels.softmax.row_floor_fp32": "row length",
    "kernels.small.reduction": "elements written",
    "kernels.small.reduction_fp32": "elements written",
    "kernels.small.column_reduction": "rows reduced",
    "kernels.gather.bandwidth": "run (elements)",
    "kernels.gather.bandwidth_4byte": "run (elements)",
    **{
        f"implementations.{name}.{leaf}": "K/V block"
        if leaf in ("block_step_time", "paged_step_cost", "template_step_time")
        else "head dim"
        for leaf in IMPLEMENTATION_CURVES
        for name in _NAMES
    },
    **{f"implementations.{name}.efficiency_{a}x{b}": "head dim" for name in _NAMES for a, b in TILE_EFFICIENCY_TILES},
    **{
        f"implementations.{name}.uneven_causal_slowdown_d{d}": "Q blocks a row"
        for name in _NAMES
        for d in UNEVEN_CAUSAL_DIMS
    },
    **{f"interconnect.{c}_efficiency": "message bytes" for c in COLLECTIVES},
}
#: curves whose values may be 0
ZERO_ALLOWED = {"memory.l2.reuse", *CAUSAL_CURVE_FIELDS}
#: extra costs that may be 0 (nothing extra measured), not capped at 1
ZERO_COSTS = {f"implementations.{name}.{cost}" for name in _NAMES for cost in ("local_block_cost", "local_loop_cost")}
#: curves whose values are shares of something whole (of a walk, of the L2): at most 1
SHARES_OF_ONE = {
    "memory.l2.wave_drift": "a wave cannot drift apart by more than a whole walk a wave",
    "memory.l2.causal_gqa_others": "a share of the L2",
}
#: curves that may also be one figure (the same at every key)
SCALAR_OR_CURVE = {
    *(f"implementations.{name}.cta_bandwidth" for name in _NAMES),
    *(f"implementations.{name}.fp8_share" for name in _NAMES),
    "kernels.gemm.unaligned_read_bandwidth",
    "kernels.gemm.unaligned_write_bandwidth",
}
#: text fields -> required
TEXT_FIELDS = {
    "schema": False,
    "name": True,
    "full_name": True,
    "vendor": True,
    "architecture": True,
    "compute_capability": False,
    "derive_from": False,
    "transfer_from": False,
    "library_rates_from": False,
    "interconnect.topology": False,
}
SECTIONS = {
    "host",
    "clock_under_load",
    "memory",
    "memory.hbm",
    "memory.l2",
    "memory.mall",
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
    "kernels.fp8_cast",
    "kernels.cast",
    "kernels.gather",
    "kernels.reduction",
    "kernels.small",
    "implementations",
    *(f"implementations.{name}" for name in _NAMES),
    "interconnect",
    "datasheet",
    "datasheet.memory",
    "datasheet.memory.hbm",
    "datasheet.memory.l2",
    "datasheet.compute",
    "sources",
}
#: Largest efficiency a profile may state (a kernel faster than the model by 10× is a wrong profile)
MAX_EFFICIENCY = 10.0
#: Smallest figure of each kind a profile may give: far below any GPU, but enough that a tile
#: fits in SRAM and that a time (count / rate) stays finite for any workload the CLI accepts.
FLOORS: dict[str, tuple[float, str]] = {
    "bandwidth": (1e6, "1 MB/s"),
    "flops": (1e6, "1 MFLOP/s"),
    "ops": (1e6, "1 Mop/s"),
    "frequency": (1e6, "1 MHz"),
}


#: Largest figure of each kind a profile may give: far above any GPU of 2026 (GB300's dense FP4 is
#: 15 PFLOP/s, its HBM 8 TB/s; a B200's SRAM, aggregated, about 40 TB/s), so a slip of units or
#: exponent (1e30 TFLOP/s) is refused at the door rather than making every time zero.
CEILINGS: dict[str, tuple[float, str]] = {
    "bandwidth": (1e16, "10 PB/s"),
    "flops": (1e18, "1 EFLOP/s"),
    "ops": (1e18, "1 Eop/s"),
    "frequency": (1e10, "10 GHz"),
    "bytes": (1e15, "1 PB"),
    "count": (1e6, "1000000"),
}
#: A measured figure may exceed its datasheet peak by this much (a clock above the one the
#: peak is quoted at); beyond it, the profile contradicts itself
PEAK_SLACK = 1.25


def field_error(where: str, field_path: str, message: str) -> ProfileError:
    """The one error of a profile: ``file -> field: message``."""
    return ProfileError(f"{where} -> {field_path}: {message}" if field_path else f"{where}: {message}")


@functools.cache
def allowed_children(prefix: str) -> frozenset[str]:
    """The keys a mapping at ``prefix`` may hold (``""``: the top level)."""
    names = set()
    for path in [*FIELDS, *TEXT_FIELDS, *SECTIONS]:
        if prefix == "" and "." not in path:
            names.add(path)
        elif prefix and path.startswith(prefix + ".") and "." not in path[len(prefix) + 1 :]:
            names.add(path[len(prefix) + 1 :])
    return frozenset(names)
