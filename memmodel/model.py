"""The comparison that ``memmodel compare`` prints: standard vs tiled on one workload and GPU."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from . import implementations, intmath
from .errors import WorkloadError
from .hardware import Profile
from .implementations import Options, kernel_workload, options_for, padded_head_dim, smem_reads, with_options
from .timing import AlgorithmTiming, algorithm_time, assumptions, caveats, clock_caveat
from .traffic import l2 as l2m
from .traffic.blocks import block_sizes, tile_context
from .traffic.decode import choose_splits
from .traffic.flash import fa1, fa2
from .traffic.ledger import AlgorithmTraffic
from .traffic.standard import standard_variant
from .workload import Workload

COMPARE_SCHEMA = "memmodel.compare/1"


@dataclass(frozen=True)
class Evaluated:
    """An algorithm's ledger and its predicted timing."""

    traffic: AlgorithmTraffic
    timing: AlgorithmTiming


@dataclass(frozen=True)
class Comparison:
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

        return {
            "hbm_bytes": ratio(s.traffic.hbm_bytes, t.traffic.hbm_bytes),
            "flops": ratio(s.traffic.flops, t.traffic.flops),
            "predicted_time_s": ratio(s.timing.time_s, t.timing.time_s),
        }


def l2_context(profile: Profile, mode: str, causal_schedule: str | None = None) -> l2m.L2:
    """The L2 as the traffic rules see it; with ``causal_schedule`` (an implementation's, see
    :data:`memmodel.traffic.l2.CAUSAL_CURVES`) also the profile's causal re-read curves measured
    on that schedule, where it has them."""
    from .traffic.reuse import curve_from_profile

    reuse = curve_from_profile(profile.figures.get("memory.l2.reuse"), profile.l2.capacity_bytes)

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
    return l2m.L2(
        mode,
        profile.l2.usable_capacity_bytes,
        profile.sm_count,
        profile.l2.capacity_bytes,
        reuse,
        causal=causal,
        causal_schedule=causal_schedule if causal else None,
        causal_several=several,
        causal_gqa=gqa,
        # measured on FlashAttention-2's waves. Our Triton kernel reads a long head once a wave
        # (131k and 262k tokens: within `0.2 %`); cuDNN's reads follow neither rule (reuse-check-3
        # and -4: 2.5 reads a wave at 393k, about one at 131k and 327k), and keep the wave count
        drift=profile.figures.get("memory.l2.wave_drift") if causal_schedule == "fa2" else None,
        gqa_others=profile.figures.get("memory.l2.causal_gqa_others") if causal_schedule == "fa2" else None,
        batch_rows=causal_schedule == "fa2",
    )


def tiled_traffic(
    workload: Workload,
    profile: Profile,
    options: Options,
    l2: l2m.L2 | None = None,
    *,
    backward_ctas_per_sm: int | None = None,
) -> AlgorithmTraffic:
    """The tiled algorithm's ledger; ``l2`` replaces the profile's L2 (e.g. an infinite one).

    With ``options.backward`` the forward kernel is followed by the implementation's own
    backward kernels (:func:`memmodel.backward.backward_kernels`: PyTorch's FlashAttention-2,
    CUTLASS and cuDNN kernels with their own tiles; the FA2 paper's backward with the forward's
    blocks otherwise); ``backward_ctas_per_sm`` overrides the backward kernel's occupancy."""
    impl = options.model_implementation
    # the split count follows the workload as the caller gives it (decoding: n = 1), then the
    # kernel sees it as it runs it (decoding with GQA: the group's heads as rows)
    spec = implementations.get(impl)
    prefill = bool(spec is not None and spec.splits_prefill)
    splits = (
        options.splits if options.splits is not None else choose_splits(workload, profile.sm_count, prefill=prefill)
    )
    workload = kernel_workload(workload, impl)
    blocks = block_sizes(workload, profile.sram.capacity_per_sm_bytes, options.block_q, options.block_kv)
    ctx = tile_context(
        workload,
        blocks,
        profile.sm_count,
        profile.sram.capacity_per_sm_bytes,
        options.ctas_per_sm,
        options.kv_order,
        exec_d=padded_head_dim(impl, workload.d),
        whole_tiles=impl is not None,
        smem_reads=smem_reads(impl, blocks.block_q, workload.d, workload.dropout, profile),
        tile=(options.block_q, options.block_kv)
        if impl is not None and options.block_q is not None and options.block_kv is not None
        else None,
    )
    # the causal curves measured on this implementation's schedule and walk (FA2's from the diagonal down)
    schedule = spec.causal_schedule if spec is not None and options.kv_order == "reverse" else None
    l2 = l2 or l2_context(profile, options.l2, schedule)
    if options.tiled == "fa1":
        return fa1(ctx, l2, backward=options.backward)
    if options.splits is not None:
        from .traffic.decode import split_block_kv

        blocks_kv = np.asarray(intmath.ceil_div(workload.n_kv_, split_block_kv(workload.d)))
        if np.any(blocks_kv < options.splits):
            most = int(np.min(blocks_kv))
            raise WorkloadError(
                f"--splits {options.splits} is more than the {most} K/V blocks to split: choose at most {most}"
            )
    if options.backward and not prefill:
        # training runs the plain forward kernel (it must save the logsumexp); FlashAttention-2
        # splits its training forward as any other (the combine writes the logsumexp)
        splits = 1
    forward = fa2(ctx, l2, splits=splits)
    if not options.backward:
        return forward
    from .backward import backward_kernels

    kernels, params = backward_kernels(workload, profile, options, ctx, l2, ctas_per_sm=backward_ctas_per_sm)
    return AlgorithmTraffic(
        forward.name, forward.variant, forward.kernels + tuple(kernels), {**forward.params, **params}
    )


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
    std = standard_variant(standard, workload, l2_context(profile, opts.l2), backward=opts.backward)
    til = tiled_traffic(workload, profile, opts, backward_ctas_per_sm=backward_ctas_per_sm)
    exec_d = padded_head_dim(opts.model_implementation, workload.d)  # the head dim its kernel runs at
    til_time = algorithm_time(
        til,
        profile,
        workload.dtype,
        opts.model_implementation,
        exec_d,
        kernel_workload(workload, opts.model_implementation),
        clocks=opts.clocks,
    )
    clock_line = clock_caveat(profile, opts.model_implementation, til_time.clock_share, opts.clocks)
    return Comparison(
        workload=workload,
        profile=profile,
        standard=Evaluated(std, algorithm_time(std, profile, workload.dtype, head_dim=workload.d)),
        tiled=Evaluated(til, til_time),
        assumptions=tuple(assumptions(profile) + model_assumptions(opts, standard)),
        caveats=tuple(
            list(opts.notes)
            + ([clock_line] if clock_line else [])
            + l2_knee_caveats(til, workload, profile, opts.l2)
            + schedule_caveats(til, workload, profile, opts)
            + caveats(
                profile,
                opts.model_implementation,
                workload.dtype,
                exec_d,
                tile=(til.params.get("block_q"), til.params.get("block_kv")),
            )
        ),
        warnings=tuple(capacity_warnings(workload, profile)),
        options=opts,
    )


#: the share of extra K/V reads (over one a wave) from the waves' drift past which compare says so
WAVE_DRIFT_NOTE = 0.1


def l2_knee_caveats(til: AlgorithmTraffic, workload: Workload, profile: Profile, mode: str) -> list[str]:
    """A caveat where the tiled kernel's K/V re-reads sit near the L2's capacity knee (issue 14)."""
    flags = til.params.get("l2_knee")
    if flags is None or mode == "off":
        return []
    from .traffic.reuse import knee_note, step_curve

    l2 = l2_context(profile, mode)
    curve = l2.reuse or step_curve(l2.capacity_bytes)
    note = knee_note(
        flags,
        curve,
        bool(workload.causal),
        str(til.params.get("causal_curve") or ""),
    )
    out = [note] if note else []
    drift = til.params.get("wave_drift")
    if drift is not None and np.any(np.asarray(drift) > WAVE_DRIFT_NOTE):
        from .traffic.reuse import rows_prefix

        arr = np.asarray(drift, dtype=np.float64)
        flags = arr > WAVE_DRIFT_NOTE
        out.append(
            f"{rows_prefix(flags)}K/V read more than once a wave as the CTAs of a long head's waves drift apart "
            f"(+{100 * float(arr[flags].max()):.0f} % over one read a wave{' at most' if arr.size > 1 else ''}; "
            "memory.l2.wave_drift): on the H200 one long head came out within -24 % to +19 % up to 5.3 x the L2 "
            "(+81 % at 6.4 x, its placements spreading 102 %), several long heads +7 % to +22 %, d = 256 -37 % to "
            "+61 % (docs/accuracy.md)."
        )
    row = til.params.get("gqa_row_bytes")
    lo, hi = curve.knee
    if row is not None and np.any((np.asarray(row) >= lo) & (np.asarray(row) <= hi)):
        from .traffic.reuse import rows_prefix

        def span(values: Any, unit: str = "") -> str:
            low, high = float(np.min(values)), float(np.max(values))
            return f"{low:.0f}{unit}" if round(low) == round(high) else f"{low:.0f}-{high:.0f}{unit}"

        arr = np.asarray(row, dtype=np.float64)
        flags = (arr >= lo) & (arr <= hi)
        batch = np.broadcast_to(np.asarray(workload.batch), arr.shape)[flags]
        out.append(
            f"{rows_prefix(flags)}K/V re-read by a GQA group's next query head a row of {span(batch)} "
            f"batches later in FlashAttention-2's grid, that row's new data ({span(arr[flags] / 2**20, ' MiB')}) "
            "in the L2's knee "
            f"({lo / 2**20:.0f}-{hi / 2**20:.0f} MiB), where the share that misses goes from none to all: on the "
            "H200 30 such grids came out -20 % to +30 %, median 2.6 % (docs/accuracy.md)."
        )
    if l2.reuse is None and np.any(til.params.get("l2_cross_wave", False)):
        out.append(
            f"{profile.name} has no measured L2 reuse curve (memory.l2.reuse): K/V re-read across waves is "
            f"assumed to hit in L2 up to {l2.capacity_bytes / 2**20:.0f} MiB live and to miss past it (a step)."
        )
    return out


def schedule_caveats(til: AlgorithmTraffic, workload: Workload, profile: Profile, opts: Options) -> list[str]:
    """Caveats where FlashAttention-2's causal CTA schedule decides a figure the model only
    estimates (measured on the H200, docs/accuracy.md):

    * the forward's tail where a causal grid of several heads fills two to four waves of CTA
      slots: the last heads' longest CTAs come last, and the closed-form tail was up to
      18 % short there (probe 7, tests/sims/causal_tail_sim.py);
    * the backward's Q-side re-reads where several heads each have more K/V blocks than the GPU
      has CTA slots: the groups of CTAs start elsewhere in each head than the rule counts from
      (9-20 % more bytes measured than predicted);
    * the memory-efficient (CUTLASS) backward where a head has more K/V blocks than the GPU has
      CTA slots: the CTAs that start one at a time each recompute D over the head's O and dO,
      re-reads not counted (two heads of 32k: 29 % fewer bytes predicted than measured)."""
    from .traffic.reuse import rows_prefix

    if not bool(workload.causal) or til.variant != "fa2":
        return []
    p = til.params
    f = lambda v: np.asarray(v, dtype=np.float64)  # noqa: E731
    heads = f(intmath.mul(workload.batch, workload.heads))
    out = []
    slots = f(p.get("concurrent_ctas", profile.sm_count))
    jobs = heads * np.ceil(f(workload.n) / np.maximum(f(p["block_q"]), 1.0))
    tail = (heads >= 2) & (jobs > slots) & (jobs <= 4 * slots)
    if np.any(tail):
        out.append(
            f"{rows_prefix(tail)}the causal grid's CTAs"
            + (f" ({int(jobs)})" if np.ndim(jobs) == 0 else "")
            + " fill 2 to 4 waves of its CTA slots across several heads: its tail (the last heads' longest "
            "CTAs run last) is estimated, and the estimate came out up to 18 % short on an H200 (2 heads of "
            "32k tokens: -17 %)."
        )
    if opts.backward and "backward_block_kv" in p and opts.model_implementation in ("sdpa-flash", "sdpa-cudnn"):
        t_c = np.ceil(f(workload.n_kv_) / np.maximum(f(p["backward_block_kv"]), 1.0))
        long = (heads >= 2) & (t_c > f(p.get("backward_concurrent_ctas", profile.sm_count)))
        if np.any(long):
            out.append(
                f"{rows_prefix(long)}causal backward over several heads each longer than the GPU's CTA slots: its Q-side "
                "re-reads are counted from groups of CTAs starting at each head's first block, which they do not; on an "
                "H200 such kernels moved 9-20 % more HBM bytes than predicted."
            )
    if opts.backward and "backward_block_kv" in p and opts.model_implementation == "sdpa-efficient":
        t_c = np.ceil(f(workload.n_kv_) / np.maximum(f(p["backward_block_kv"]), 1.0))
        long = t_c > f(p.get("backward_concurrent_ctas", profile.sm_count))
        if np.any(long):
            out.append(
                f"{rows_prefix(long)}causal memory-efficient backward on heads with more K/V blocks than the GPU's CTA "
                "slots: the CTAs that start one at a time as the head's first ones finish each recompute D over all "
                "of the head's O and dO, and those re-reads are not counted; on an H200 two heads of 32k read "
                "807 MB from HBM where 439 MB are predicted."
            )
    return out


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
    compulsory = intmath.add(q, kv, kv, q)  # read Q, K, V; write O
    if opts.backward:
        # read Q, K, V, O, dO; write dQ, dK, dV
        compulsory = intmath.add(compulsory, q, kv, kv, q, q, q, kv, kv)
    paper = tiled_traffic(w, profile, with_options(opts, l2="off")).hbm_bytes
    m = int(profile.sram.capacity_per_sm_bytes) // w.element_bytes
    # Theorem 2: Θ(N²d²/M) element accesses per head, M = SRAM per SM (constant taken as 1)
    n2d2 = intmath.mul(w.batch, w.heads, w.n, w.n_kv_, w.d, w.d, w.element_bytes)
    theta = intmath.ceil_div(n2d2, m)
    # Proposition 3 bounds the accesses to the slow memory from below by the same order,
    # with M the fast memory in front of it: the L2 (effective) for HBM when L2 is modelled
    m_fast = m if opts.l2 == "off" else max(1, int(profile.l2.usable_capacity_bytes) // w.element_bytes)
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


def capacity_warnings(workload: Workload, profile: Profile) -> list[str]:
    """Say when a workload could not be held in the GPU's HBM (scalar workloads only)."""
    if workload.is_grid:
        return []
    from .units import format_bytes

    cap = profile.hbm.capacity_bytes
    tensors = intmath.add(intmath.mul(2, workload.q_bytes()), intmath.mul(2, workload.kv_bytes()))
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
