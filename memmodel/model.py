"""The comparison that ``memmodel compare`` prints: standard vs tiled on one workload and GPU."""

from __future__ import annotations

from dataclasses import field
from functools import cached_property
from typing import Any

import numpy as np

from . import intmath
from .caveats import fa2_uneven_caveats, softmax_version_caveats, tiled_caveat_classes
from .frozen import frozen
from .hardware import Profile
from .host import TIMING_ASSUMPTIONS, Times, algorithm_times, complete, not_modelled
from .options import Options, options_for, with_options
from .plan import l2_context, longest_plan, packed_plans, packed_traffic, plan_tiled, planned_traffic, with_mall
from .timing import AlgorithmTiming, algorithm_time, assumptions
from .traffic import l2 as l2m
from .traffic.ledger import AlgorithmTraffic
from .traffic.quant import with_kv_cast
from .traffic.standard import standard_variant
from .workload import Workload

COMPARE_SCHEMA = "memmodel.compare/1"

__all__ = ["COMPARE_SCHEMA", "Comparison", "Evaluated", "compare", "l2_context", "reference_bytes", "tiled_traffic"]


@frozen
class Evaluated:
    """An algorithm's ledger and its predicted timing."""

    traffic: AlgorithmTraffic
    timing: AlgorithmTiming
    #: the profile its host ops are timed on (:attr:`times`); None: its kernel time only
    profile: Profile | None = field(default=None, compare=False, repr=False)
    #: the implementation whose library call issues its kernels (None: the paper's algorithm, or
    #: standard attention, whose kernels are ATen ops)
    implementation: str | None = field(default=None, compare=False)
    #: its times known beforehand (a trace's, whose host ops are its recorded ops); None: :attr:`times` computes them
    known_times: Times | None = field(default=None, compare=False, repr=False)

    @cached_property
    def host_times(self) -> Times:
        """Its time in each timing mode (:mod:`memmodel.host`): the kernels', a user's timer
        around one call, calls queued back to back, a CUDA graph's replay; None in a mode whose
        figures the profile lacks (``missing`` says which)."""
        if self.known_times is not None:
            return self.known_times
        kernels = [k.time_s for k in self.timing.kernels]
        if self.profile is None:
            return not_modelled(kernels, "the host ops of this result are not modelled")
        return algorithm_times(self.traffic, kernels, self.profile, self.implementation)

    @property
    def times(self) -> Times:
        """:attr:`host_times` in every mode: a :class:`~memmodel.errors.TimingError` naming the
        first figure missing where the profile cannot give one of them (a validate record's
        ``times_error``)."""
        return complete(self.host_times)

    def time_s(self, timing: str = "kernel") -> Any:
        """Its predicted time under ``timing`` (:data:`memmodel.host.TIMINGS`; kernel: ``timing.time_s``)."""
        return self.timing.time_s if timing == "kernel" else self.host_times.of(timing)


@frozen
class Comparison:
    """Standard and tiled attention of one workload on one GPU: traffic, timing and caveats."""

    workload: Workload
    profile: Profile
    standard: Evaluated
    tiled: Evaluated
    assumptions: tuple[str, ...]
    warnings: tuple[str, ...] = ()
    #: what stands in for a missing figure or choice (print these beside the table): how much to trust it
    caveats: tuple[str, ...] = ()
    options: Options = field(default_factory=Options)
    #: reference byte counts known beforehand, or none that apply (``{}``: context parallelism);
    #: None: :attr:`bounds` computes them
    known_bounds: dict[str, Any] | None = None
    #: each caveat's class (:class:`memmodel.caveats.Caveat`), in the order of ``caveats``
    caveat_classes: tuple[str, ...] = field(default=(), compare=False)

    @cached_property
    def bounds(self) -> dict[str, Any]:
        """The reference byte counts (:func:`reference_bytes`), computed when first asked: the
        paper's count runs the tiled ledger again without L2, which a sweep never needs."""
        if self.known_bounds is not None:
            return self.known_bounds
        return reference_bytes(self.workload, self.profile, self.options)

    @property
    def algorithms(self) -> tuple[Evaluated, ...]:
        return (self.standard, self.tiled)

    def ratios(self) -> dict[str, Any]:
        """standard / tiled for HBM bytes, FLOPs and predicted time."""
        s, t = self.standard, self.tiled

        def ratio(a: Any, b: Any) -> Any:
            with np.errstate(divide="ignore", invalid="ignore"):
                out = np.asarray(intmath.to_float(a)) / np.asarray(intmath.to_float(b))
            return float(out) if out.ndim == 0 else out

        timing = self.options.timing
        return {
            "hbm_bytes": ratio(s.traffic.hbm_bytes, t.traffic.hbm_bytes),
            "flops": ratio(s.traffic.flops, t.traffic.flops),
            "predicted_time_s": ratio(s.time_s(timing), t.time_s(timing)),
        }


def tiled_traffic(
    workload: Workload,
    profile: Profile,
    options: Options,
    l2: l2m.L2 | None = None,
    *,
    backward_ctas_per_sm: int | None = None,
) -> AlgorithmTraffic:
    """The tiled algorithm's ledger (:func:`memmodel.plan.plan_tiled`, then its traffic);
    ``l2`` replaces the profile's L2 (e.g. an infinite one); ``backward_ctas_per_sm``
    overrides the backward kernel's occupancy."""
    if workload.seq_lens is not None and options.model_implementation != "flex":
        return packed_traffic(packed_plans(workload, profile, options, l2, backward_ctas_per_sm=backward_ctas_per_sm))
    return planned_traffic(plan_tiled(workload, profile, options, l2, backward_ctas_per_sm=backward_ctas_per_sm))


def compare(
    workload: Workload,
    profile: Profile,
    options: Options | None = None,
    *,
    standard: str = "algorithm0",
    backward_ctas_per_sm: int | None = None,
    **kwargs: Any,
) -> Comparison:
    """Standard (Algorithm 0/3) and tiled attention on ``workload``, predicted on ``profile``.

    ``options`` (or keywords: ``impl`` — default ``auto``, the kernel PyTorch would run —
    and the fields of :class:`Options`: ``tiled``, ``block_q``, ``block_kv``, ``l2``,
    ``backward``, ``splits``, ``ctas_per_sm``) say how to model. ``standard`` is the
    standard-attention variant: ``algorithm0`` (the paper's Algorithms 0 and 3, scale folded
    into Q) or ``eager`` (the kernels eager PyTorch and autograd launch,
    :func:`memmodel.traffic.standard.standard_eager`). ``backward_ctas_per_sm`` overrides
    the occupancy of the tiled backward kernel (as Nsight Compute measured it).
    """
    opts = options or options_for(kwargs.pop("impl", "auto"), workload, profile, **kwargs)
    profile.peak_flops(workload.dtype)  # fail early, clearly
    if workload.seq_lens is not None and opts.model_implementation != "flex":  # a packed row: its documents' kernels
        plans = packed_plans(workload, profile, opts, backward_ctas_per_sm=backward_ctas_per_sm)
        plan = longest_plan(plans)
        til = packed_traffic(plans)
        timed_workload = workload
        standard_workload = workload.with_(seq_lens=None)  # the full row's N × N scores, masked
    else:
        plan = plan_tiled(workload, profile, opts, backward_ctas_per_sm=backward_ctas_per_sm)
        til = planned_traffic(plan)
        timed_workload = plan.workload
        standard_workload = workload
    if workload.chunked is not None:  # a chunked batch: each row's N × N scores under its chunk mask
        rows = workload.chunked[1]
        standard_workload = workload.with_(
            seq_lens=None, chunked=None, batch=rows, n=int(workload.n) // rows, n_kv=None
        )
    # an FP8 K/V cache: eager PyTorch's matmuls take no fp8 K/V, so the cast runs first (traffic.quant)
    cast_workload, standard_workload = standard_workload, standard_workload.with_(kv_dtype=None)
    std = with_kv_cast(
        with_mall(
            standard_variant(standard, standard_workload, plan.l2_base, backward=opts.backward),
            plan.xcd,
            lambda view: standard_variant(standard, standard_workload, view, backward=opts.backward),
        ),
        cast_workload,
    )
    til_time = algorithm_time(
        til, profile, workload.dtype, plan.implementation, plan.exec_d, timed_workload, clocks=opts.clocks
    )
    lines = (
        tiled_caveat_classes(plan, til, til_time)
        + fa2_uneven_caveats(workload, plan)
        + softmax_version_caveats(std, profile)
    )
    return Comparison(
        workload=workload,
        profile=profile,
        standard=Evaluated(std, algorithm_time(std, profile, workload.dtype, head_dim=workload.d), profile),
        tiled=Evaluated(til, til_time, profile, plan.implementation),
        assumptions=tuple(assumptions(profile) + model_assumptions(opts, standard) + packed_assumptions(workload)),
        caveats=tuple(c.text for c in lines),
        caveat_classes=tuple(c.cls for c in lines),
        warnings=tuple(capacity_warnings(standard_workload, profile) + fallback_warnings(opts)),
        options=opts,
    )


#: what a packed row (``Workload.seq_lens``) is modelled as
PACKED_ASSUMPTION = (
    "Packed row (--seq-lens): standard attention is the whole row's N × N scores under a block-diagonal "
    "mask (what a user who writes the document mask gets), not attention per document; the tiled kernels "
    "(FlashAttention-2's varlen) visit only each document's own blocks, tiled from its start, in one launch "
    "whose grid is the longest document's Q blocks × documents × heads (CTAs past a document's end exit at once)."
)


def packed_assumptions(workload: Workload) -> list[str]:
    return [PACKED_ASSUMPTION] if workload.seq_lens is not None else []


def model_assumptions(opts: Options, standard: str = "algorithm0") -> list[str]:
    out = {
        "on": [
            "L2 mode 'on': a tiled kernel's re-reads hit in L2 while one head's re-read data fits "
            "in the L2's effective capacity; past that, they are read from HBM once per wave of "
            "concurrently running CTAs. A tensor the previous kernel wrote is read from L2 if it fits.",
        ],
        "cold": [
            "L2 mode 'cold': each kernel starts with an empty L2 (as Nsight Compute measures by default); "
            "re-reads within a kernel follow the same rules as mode 'on'.",
        ],
        "off": ["L2 mode 'off': no L2 reuse, every request is an HBM access (the FlashAttention paper's view)."],
    }[opts.l2]
    out.append(
        "Causal masks align the last query with the last key (bottom-right); tiled kernels skip "
        "fully masked blocks, the standard path writes the full S and P."
    )
    out.append("FlashAttention regenerates the dropout mask from the RNG state: no mask bytes.")
    if opts.timing != "kernel":
        out.append(TIMING_ASSUMPTIONS[opts.timing])
    if standard == "eager":
        out.append(
            "Standard attention as eager PyTorch runs it: the scale, mask, softmax and dropout are kernels of "
            "their own" + (", and autograd's backward adds their gradients' kernels." if opts.backward else ".")
        )
    if opts.backward:
        from .backward import LIBRARY_BACKWARDS

        if opts.tiled == "fa2" and opts.implementation in LIBRARY_BACKWARDS:
            out.append(
                f"Backward: {opts.implementation}'s own kernels with its backward tiles (params backward_block_q, "
                "backward_block_kv), one CTA per SM unless measured; dQ accumulated in fp32."
            )
        else:
            out.append("Backward: the tiled algorithm's paper backward with the forward's blocks.")
    return out


def reference_bytes(workload: Workload, profile: Profile, opts: Options) -> dict[str, Any]:
    """Reference byte counts (``bounds`` in the JSON): compulsory bytes, the paper's count (no
    L2) and its lower bound."""
    w = workload
    q, kv = w.q_bytes(), w.kv_bytes()
    o, v = w.o_bytes(), w.v_bytes()  # O, dO and V, dV at V's head dim
    if opts.implementation == "flashmla":
        v = 0  # the absorbed MLA form: V is the first d_v of K's cached row, read with it
    compulsory = intmath.add(q, kv, v, o)  # read Q, K, V; write O
    if opts.backward:
        # read Q, K, V, O, dO; write dQ, dK, dV
        compulsory = intmath.add(compulsory, q, kv, v, o, o, q, kv, v)
    paper = tiled_traffic(w, profile, with_options(opts, l2="off")).hbm_bytes
    m = int(profile.sram.capacity_per_sm_bytes) // w.element_bytes
    # Theorem 2: Θ(N²d²/M) element accesses per head, M = SRAM per SM (constant taken as 1)
    n2d2 = intmath.mul(w.batch, w.heads, w.n, w.n_kv_, w.d, w.d, w.element_bytes)
    theta = intmath.ceil_div(n2d2, m)
    # Proposition 3 bounds the accesses to the slow memory from below by the same order,
    # with M the fast memory in front of it: the L2 (effective) for HBM when L2 is modelled
    m_fast = m if opts.l2 == "off" else max(1, int(profile.last_level.usable_capacity_bytes) // w.element_bytes)
    omega = intmath.ceil_div(n2d2, m_fast)
    lower = np.maximum(np.asarray(compulsory, dtype=object if not w.is_grid else np.int64), np.asarray(omega))

    def plain(v: Any) -> Any:
        if isinstance(v, np.ndarray):
            return v.item() if v.ndim == 0 else v
        return v

    return {
        "compulsory_bytes": plain(compulsory),
        "paper_bytes": plain(paper),
        "theta_bytes": plain(theta),
        "lower_bound_bytes": plain(lower),
    }


def fallback_warnings(opts: Options) -> list[str]:
    """Say where ``--impl auto`` found PyTorch falling back to its math path (``sdpa-math``)."""
    from .implementations import MATH_FALLBACK_WARNING

    return [MATH_FALLBACK_WARNING] if any(MATH_FALLBACK_WARNING in n for n in opts.notes) else []


def capacity_warnings(workload: Workload, profile: Profile) -> list[str]:
    """Say when a workload could not be held in the GPU's HBM (scalar workloads only)."""
    if workload.is_grid:
        return []
    from .units import format_bytes

    cap = profile.hbm.capacity_bytes
    tensors = intmath.add(workload.q_bytes(), workload.o_bytes(), workload.kv_bytes(), workload.v_bytes())
    s = intmath.mul(workload.batch, workload.heads, workload.n, workload.n_kv_, workload.element_bytes)
    out = []
    if tensors > cap:
        out.append(
            f"Q, K, V and O alone ({format_bytes(float(tensors))}) exceed the HBM of {profile.name} "
            f"({format_bytes(cap)}): no single GPU runs this workload as given."
        )
    elif intmath.add(tensors, s) > cap:
        out.append(
            f"standard attention's S ({format_bytes(float(s))}) does not fit beside Q, K, V, O in the HBM "
            f"of {profile.name} ({format_bytes(cap)}); only the tiled algorithm runs this workload."
        )
    return out
