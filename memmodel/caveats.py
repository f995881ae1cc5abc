"""Every caveat compare prints beside its table: where a figure is only estimated, and how far
the model was off where it was checked.

The checked figures come from data: ``memmodel/data/validated.json``, written from the committed
validation records by ``scripts/update_validated.py`` (a test regenerates it and fails when it is
stale). Each caveat has a class (:class:`Caveat`); the data file gives, per class, the records
and kernels where the caveat fires and the signed errors the model makes there.
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, Any

import numpy as np

from . import implementations, intmath
from .frozen import frozen
from .timing import caveats as profile_caveats
from .timing import clock_caveat
from .traffic.reuse import ReuseCurve, step_curve
from .validated import CHECKED, checked

if TYPE_CHECKING:  # pragma: no cover
    from .plan import TiledPlan
    from .timing import AlgorithmTiming
    from .traffic.facts import TiledFacts
    from .traffic.ledger import AlgorithmTraffic


@frozen
class Caveat:
    """One caveat line and its class (``""``: a note that no check measures)."""

    cls: str
    text: str


def _on_the_h200(cls: str, lead: str) -> str:
    """``lead`` and the figures of ``cls`` (:func:`memmodel.validated.checked`), or that no
    record checks it."""
    figures = checked(cls)
    return f"{lead} {figures}" if figures else "not checked on a GPU yet"


def tiled_caveats(plan: TiledPlan, traffic: AlgorithmTraffic, timing: AlgorithmTiming) -> list[str]:
    """The caveats of a tiled algorithm planned as ``plan`` (its ledger ``traffic``, its time
    ``timing``), in the order compare prints them."""
    return [c.text for c in tiled_caveat_classes(plan, traffic, timing)]


def tiled_caveat_classes(plan: TiledPlan, traffic: AlgorithmTraffic, timing: AlgorithmTiming) -> list[Caveat]:
    """:func:`tiled_caveats` with each line's class."""
    opts, profile, facts = plan.options, plan.profile, traffic.facts
    clock_line = clock_caveat(profile, plan.implementation, timing.clock_share, opts.clocks)
    notes = [Caveat("", n) for n in opts.notes] + ([Caveat("clocks", clock_line)] if clock_line else [])
    figures = profile_caveats(
        profile,
        plan.implementation,
        plan.given.dtype,
        plan.exec_d,
        tile=(facts.blocks.block_q, facts.blocks.block_kv),
    )
    return (
        notes
        + l2_knee_caveats(plan, facts)
        + schedule_caveats(plan, traffic.variant, facts)
        + (window_caveats(plan, facts) if traffic.variant == "fa2" else [])
        + interpolated_backward_caveats(plan)
        + cudnn_decode_caveats(plan)
        + fa4_split_caveats(plan)
        + cudnn_split_caveats(plan)
        + light_load_caveats(plan, traffic)
        + flex_spill_caveats(plan)
        + flex_replay_caveats(plan)
        + [Caveat("profile", line) for line in figures]
        + [Caveat("", line) for line in fp8_caveats(plan)]
    )


#: rows of keys over which PyTorch's softmax kernel depends on its version: up to 1024 every
#: version runs the warp-per-row kernel, past 9216 the shared-memory (or global) block-per-row one
SOFTMAX_VERSIONED_ROWS = (1024, 9216)


def _own_torch(profile: Any) -> str | None:
    """The PyTorch version ("2.11") the source of ``profile``'s own softmax rates names, or None."""
    prov = profile.provenance.get("kernels.softmax.bandwidth")
    src = profile.sources.get(prov.source) if prov is not None and prov.source else None
    found = re.search(r"torch (\d+\.\d+)", getattr(src, "machine", None) or "")
    return found.group(1) if found else None


def _measuring_torch(profile: Any) -> str | None:
    """The PyTorch version ``profile``'s softmax rates were measured with, following a derived or
    transferred profile to its base; None where no source names one."""
    base = profile.derived_from or profile.transferred_from
    return _own_torch(profile) or (_base_torch(base, 1) if base else None)


@functools.lru_cache(maxsize=64)
def _base_torch(name: str, depth: int) -> str | None:
    """:func:`_measuring_torch` of the profile named ``name``, loaded once per process (a base is
    named, never a path); None past two bases or where it does not load."""
    from .hardware import load_profile

    try:
        base = load_profile(name)
    except Exception:  # a base that no longer loads: no version to name
        return None
    further = base.derived_from or base.transferred_from
    return _own_torch(base) or (_base_torch(further, depth + 1) if further and depth < 2 else None)


def softmax_version_caveats(traffic: AlgorithmTraffic, profile: Any) -> list[Caveat]:
    """Standard attention's softmax over rows of 1025 to 9216 keys: timed at the rate the
    profile's PyTorch reached, whose kernel there differs by version (docs/model.md)."""
    lo, hi = SOFTMAX_VERSIONED_ROWS
    rows = [np.asarray(intmath.to_float(k.row_length)) for k in traffic.kernels if k.op == "softmax"]
    if not profile.kernel_rates.softmax_bytes_per_s or not any(np.any((r > lo) & (r <= hi)) for r in rows):
        return []
    version = _measuring_torch(profile)
    which = f"PyTorch {version}" if version else "the PyTorch its profile was measured with"
    return [
        Caveat(
            "",
            f"Standard attention's softmax over rows of {lo + 1}–{hi} keys is timed at the rate {which} reached: "
            "since PyTorch 2.7 (pull request 144679) rows of 2049–9216 run a register-cached kernel with "
            "element loads, before it block-per-row kernels with 16-byte loads ran every row past 1024, at "
            "other rates (docs/model.md, calibrated rates).",
        )
    ]


def fp8_caveats(plan: TiledPlan) -> list[str]:
    """What an FP8 workload's tiled kernel is modelled as (:func:`fp8_lines`)."""
    return fp8_lines(plan.given, plan.implementation, plan.profile)


def fp8_lines(w: Any, impl: str | None, profile: Any) -> list[str]:
    """What an FP8 workload ``w``'s tiled kernel ``impl`` is modelled as on ``profile``: the fp8
    forward, the rate rule, the path of an FP8 K/V cache (docs/variants.md, "FP8")."""
    from .implementations import FP8_FORWARD, KV_DEQUANT_FLOPS, kv_cache_path

    out: list[str] = []
    name = impl or "paper"
    if w.dtype == "fp8":
        out.append(f"--dtype fp8 as {FP8_FORWARD.get(name, name)}.")
        prov = profile.provenance.get("compute.fp8")
        kind = prov.kind if prov is not None and prov.kind else "datasheet"
        figures = profile.implementation(impl) if impl is not None else None
        if figures is not None and figures.efficiency:
            share = figures.fp8_share_at(w.d)
            field = f"implementations.{impl}.fp8_share"
            fp8_prov = profile.provenance.get(field)
            kept = (
                f" × {share:.2f}, what its fp8 kernel keeps of that at d={w.d} ({field}, "
                f"{fp8_prov.kind if fp8_prov is not None and fp8_prov.kind else 'given'}; "
                f"memmodel hardware show {profile.name} says where it comes from)"
                if share is not None
                else " (no fp8 run of it was measured)"
            )
            out.append(
                f"Same-share rule: {impl}'s fp8 products run at {profile.name}'s fp8 tensor rate (compute.fp8, {kind}) "
                f"× the share of its instructions' peak {impl} reached at fp16/bf16{kept}; "
                "its exponentials and softmax at the rates they have at bf16."
            )
        else:
            out.append(
                f"fp8 products at {profile.name}'s fp8 tensor rate (compute.fp8, {kind}); no efficiency measured."
            )
    if w.kv_dtype is not None:
        if kv_cache_path(impl, w.kv_dtype) == "cast":
            out.append(
                f"--kv-dtype {w.kv_dtype} on {name}: PyTorch's scaled_dot_product_attention takes no fp8 K/V, so a user "
                "casts them first: kernels kv_cast_k, kv_cast_v (K, V read at 1 byte, written in the dtype), then "
                f"{name} on the 16-bit copies."
            )
        elif impl == "flashinfer":
            figures = profile.implementation_figures.get("flashinfer") if profile is not None else None
            measured = figures.kv_convert_flops if figures is not None else None
            cost = (
                f"{measured:g} FP32 FLOPs each (implementations.flashinfer.kv_convert_flops; where it comes from: "
                f"memmodel hardware show {profile.name})"
                if measured is not None
                else f"{KV_DEQUANT_FLOPS} FP32 FLOPs each (the house's count; no measured cost on {name})"
            )
            out.append(
                f"--kv-dtype {w.kv_dtype}: FlashInfer's decode reads K and V at 1 byte; every thread converts what it "
                f"reads for its own query head, so each element is converted once per query head of the group, {cost}; "
                "per-tensor scales folded into the softmax scale and O."
            )
        else:
            out.append(
                f"--kv-dtype {w.kv_dtype}: K and V read at 1 byte and converted in the kernel, {KV_DEQUANT_FLOPS} FP32 "
                "FLOPs an element loaded (FlashInfer's fast_dequant_f8f16x4 by the issue-slot rule); per-tensor scales "
                "folded into the softmax scale and O."
            )
    return out


#: the share of extra K/V reads (over one a wave) from the waves' drift past which compare says so
WAVE_DRIFT_NOTE = 0.1


def l2_knee_caveats(plan: TiledPlan, facts: TiledFacts) -> list[Caveat]:
    """Where the tiled kernel's K/V re-reads sit near the L2's capacity knee, drift apart
    across waves, or cross a GQA group's row in the knee."""
    workload, profile, l2 = plan.given, plan.profile, plan.l2_base
    flags = facts.l2_knee
    if flags is None or l2.mode == "off":
        return []
    curve = l2.reuse or step_curve(l2.capacity_bytes)
    note = knee_note(flags, curve, bool(workload.causal), facts.causal_curve or "")
    out = [note] if note else []
    drift = facts.wave_drift
    if drift is not None and np.any(np.asarray(drift) > WAVE_DRIFT_NOTE):
        arr = np.asarray(drift, dtype=np.float64)
        flags = arr > WAVE_DRIFT_NOTE
        out.append(
            Caveat(
                "wave_drift",
                f"{rows_prefix(flags)}K/V read more than once a wave as the CTAs of a long head's waves drift "
                f"apart (+{100 * float(arr[flags].max()):.0f} % over one read a wave"
                f"{' at most' if arr.size > 1 else ''}; memory.l2.wave_drift): "
                f"{_on_the_h200('wave_drift', 'on the H200 such kernels came out')} (docs/accuracy.md).",
            )
        )
    row = facts.gqa_row_bytes
    lo, hi = curve.knee
    if row is not None and np.any((np.asarray(row) >= lo) & (np.asarray(row) <= hi)):

        def span(values: Any, unit: str = "") -> str:
            low, high = float(np.min(values)), float(np.max(values))
            return f"{low:.0f}{unit}" if round(low) == round(high) else f"{low:.0f}-{high:.0f}{unit}"

        arr = np.asarray(row, dtype=np.float64)
        flags = (arr >= lo) & (arr <= hi)
        batch = np.broadcast_to(np.asarray(workload.batch), arr.shape)[flags]
        out.append(
            Caveat(
                "gqa_row",
                f"{rows_prefix(flags)}K/V re-read by a GQA group's next query head a row of {span(batch)} "
                f"batches later in FlashAttention-2's grid, that row's new data "
                f"({span(arr[flags] / 2**20, ' MiB')}) in the L2's knee ({lo / 2**20:.0f}-{hi / 2**20:.0f} MiB), "
                "where the share that misses goes from none to all: "
                f"{_on_the_h200('gqa_row', 'on the H200 such grids came out')} (docs/accuracy.md).",
            )
        )
    if l2.reuse is None and np.any(facts.l2_cross_wave if facts.l2_cross_wave is not None else False):
        out.append(
            Caveat(
                "no_reuse_curve",
                f"{profile.name} has no measured L2 reuse curve (memory.l2.reuse): K/V re-read across waves is "
                f"assumed to hit in L2 up to {l2.capacity_bytes / 2**20:.0f} MiB live and to miss past it (a step).",
            )
        )
    return out


def window_band_bytes(plan: TiledPlan, facts: TiledFacts) -> Any:
    """The K and V of one K/V head a sliding-window forward's CTAs in flight hold (bytes): the
    rows its CTAs in flight cover (at most a wave's) and the window before them, at most its
    keys. None without a window."""
    w = plan.given
    if w.window is None:
        return None
    f = lambda v: np.asarray(intmath.to_float(v), dtype=np.float64)  # noqa: E731
    rows = np.maximum(f(facts.blocks.block_q), 1.0)
    in_flight = np.minimum(np.maximum(f(facts.concurrent_ctas), 1.0), np.ceil(f(w.n) / rows)) * rows
    return np.minimum(f(w.n_kv_), in_flight + f(w.window)) * f(intmath.mul(w.d_kv, w.kv_element_bytes))


def window_caveats(plan: TiledPlan, facts: TiledFacts) -> list[Caveat]:
    """FlashAttention-2's sliding-window forward where the K/V its CTAs in flight hold
    (:func:`window_band_bytes`) reaches the L2 reuse curve's first rising point: the window rule
    counts a neighbour's request of a K/V tile as a hit a step or two after the last, which holds
    while the CTAs walk in step; once they fall out of step (a ramp of short CTAs at each head's
    start staggers every later wave), part of those requests miss (the window probe of
    docs/variants.md)."""
    w, l2 = plan.given, plan.l2_base
    if w.window is None or l2.mode == "off" or plan.options.model_implementation not in ("sdpa-flash", None):
        return []
    band = window_band_bytes(plan, facts)
    curve = l2.reuse or step_curve(l2.capacity_bytes)
    ys = np.asarray(curve.miss)
    start = float(np.asarray(curve.footprint_bytes)[max(int(np.argmax(ys > 0.0)) - 1, 0)])
    hit = np.asarray(band) >= start
    if not np.any(hit):
        return []
    return [
        Caveat(
            "window_band",
            f"{rows_prefix(hit)}the sliding window's K/V band a head's CTAs in flight hold "
            f"({float(np.max(np.asarray(band)[hit])) / 2**20:.0f} MiB{' at most' if np.size(band) > 1 else ''}) "
            f"reaches the L2's reuse knee ({start / 2**20:.0f} MiB): once the CTAs fall out of step, requests the "
            "window rule counts as hits partly miss, so the forward's HBM bytes are a lower bound; "
            + _on_the_h200("window_band", "on the H200 such kernels' HBM bytes came out")
            + ".",
        )
    ]


def cudnn_decode_caveats(plan: TiledPlan) -> list[Caveat]:
    """cuDNN's decode on an architecture its decode kernel was not read on (:data:`memmodel.plan.
    CUDNN_DECODE_ARCHS`): timed with FlashAttention-2's split count and the measured GPU's decode
    kernel's figures, neither seen there."""
    from .plan import CUDNN_DECODE_ARCHS, decode_split_rule

    w, profile = plan.given, plan.profile
    spec = implementations.get(plan.options.model_implementation)
    if spec is None or spec.decode_splits != "cudnn" or plan.options.backward:
        return []
    decoding = np.asarray(w.n) == 1
    if not np.any(decoding) or decode_split_rule(spec, profile) == "cudnn":
        return []
    arch = (profile.arch_family or profile.name).capitalize()
    read = "/".join(a.capitalize() for a in CUDNN_DECODE_ARCHS)
    return [
        Caveat(
            "",
            f"{rows_prefix(decoding)}cuDNN's decode on {arch}: its grid and rates were measured on {read} "
            f"(an sm80 decode kernel with its own split count); here FlashAttention-2's split count runs at "
            f"those rates, neither measured on {arch}.",
        )
    ]


def light_load_caveats(plan: TiledPlan, traffic: AlgorithmTraffic) -> list[Caveat]:
    """Where a fused kernel busies fewer SMs than the load a profile's compute rates were measured
    under (``clock_under_load``) and the light-load rule raises its clock (:func:`memmodel.timing.
    light_load_boost`): the rule and that it is not measured."""
    from .timing import light_load_boost

    profile, dtype = plan.profile, str(plan.given.dtype)
    loaded = profile.clock_under_load_hz.get(dtype)
    if not loaded or not profile.clock_hz:
        return []
    boosts = [light_load_boost(k, profile, dtype) for k in traffic.kernels if k.overlap == "serial-compute"]
    boosts = [np.asarray(b, dtype=np.float64) for b in boosts if b is not None]
    if not boosts or not any(np.any(b > 1.0) for b in boosts):
        return []
    most = max(float(np.max(b)) for b in boosts)
    return [
        Caveat(
            "",
            f"Light load: a kernel's CTAs busy fewer of {profile.name}'s {profile.sm_count} compute units than the GEMM its "
            f"rates were measured with ({loaded / 1e6:.0f} MHz under that load, peak {profile.clock_hz / 1e6:.0f} MHz): "
            f"its clock taken to rise as power ∝ busy units × f³ allows, up to {most * loaded / 1e6:.0f} MHz "
            "(the power-clock rule, docs/model.md; no light-load clock was measured).",
        )
    ]


def cudnn_split_caveats(plan: TiledPlan) -> list[Caveat]:
    """cuDNN's SM100 forward split by its frontend planner's rule (a stand-in for its closed
    backend's choice), and its combine timed at FlashAttention-2's measured combine figures."""
    if plan.options.model_implementation != "sdpa-cudnn" or plan.options.backward:
        return []
    split = (np.asarray(plan.splits) > 1) & implementations.splits_by_forward("sdpa-cudnn", plan.blocks.block_q)
    if not np.any(split):
        return []
    most = int(np.max(np.where(split, np.asarray(plan.splits), 1)))
    return [
        Caveat(
            "",
            f"{rows_prefix(split)}cuDNN's SM100 forward fills {plan.profile.name}'s {plan.profile.sm_count} SMs "
            f"by splitting the keys (up to {most} ways) by the rule cudnn-frontend's planner applies to its open-source "
            "SM100 kernels of this design (choose_split_kv): a stand-in, since the backend's own choice is closed; its "
            "combine is timed at FlashAttention-2's measured combine figures (docs/implementations.md).",
        )
    ]


def fa4_split_caveats(plan: TiledPlan) -> list[Caveat]:
    """FA4's forward and its splits: a grid left unsplit (its default, ``num_splits=1``) where its
    heuristic would split it (``num_splits=0``, :func:`memmodel.plan.fa4_auto_splits`); a split one's
    combine, a kernel of FA4's own timed at FlashAttention-2's measured combine figures."""
    from .plan import fa4_auto_splits

    opts = plan.options
    if opts.model_implementation != "fa4" or opts.backward:
        return []
    splits = np.asarray(plan.splits)
    if np.any(splits > 1):
        return [
            Caveat(
                "",
                f"{rows_prefix(splits > 1)}FA4's split forward: its combine kernel (flash_attn.cute's "
                "_flash_attn_fwd_combine) is timed at FlashAttention-2's measured combine figures; neither its "
                "split forward nor its combine was measured.",
            )
        ]
    if opts.splits is not None:
        return []
    auto = np.asarray(fa4_auto_splits(plan.workload, plan.blocks.block_q, plan.profile))
    if not np.any(auto > 1):
        return []
    most = int(np.max(auto))
    return [
        Caveat(
            "",
            f"{rows_prefix(auto > 1)}FA4 as flash_attn_func runs it by default (num_splits=1): its CTAs fill "
            f"part of {plan.profile.name}'s {plan.profile.sm_count} SMs. Called with num_splits=0 (as "
            f"cudnn-frontend's benchmark calls it) its heuristic splits the keys up to {most} ways: --splits auto.",
        )
    ]


def interpolated_backward_caveats(plan: TiledPlan) -> list[Caveat]:
    """cuDNN's fused backward at a head dim its backward efficiency is interpolated at (no
    reference ran there): one kernel's efficiency is its own, and on the H200 the interpolated
    figure at d 192 was a fifth to a third fast before the d-192 probe measured it (a non-causal
    block with V's head dim below Q's, 1.6 times a causal one: ``memmodel.calibration.cudnn_bwd_dims``).
    No record checks the caveat since: every head dim cuDNN builds is measured on the H200."""
    w, opts, profile = plan.given, plan.options, plan.profile
    if not opts.backward or opts.model_implementation != "sdpa-cudnn":
        return []
    dims = [int(d) for d, _ in profile.implementation("sdpa-cudnn").backward_efficiency]
    if not dims:
        return []
    d = np.asarray(intmath.to_float(plan.exec_d))
    hit = ~np.isin(d, np.asarray(dims, dtype=np.float64)) & (d > min(dims)) & (d < max(dims))
    hit = hit & np.ones(np.shape(w.causal), dtype=bool)  # either mask, on a grid its shape
    if not np.any(hit):
        return []
    shown = ", ".join(str(x) for x in sorted(dims))
    return [
        Caveat(
            "cudnn_backward_interpolated",
            f"{rows_prefix(hit)}cuDNN's backward at a head dim its efficiency was not measured at (interpolated "
            f"between those calibrated: {shown}): a kernel's efficiency is its own (on the H200 the interpolated "
            "figure at d 192 came out a fifth to a third fast before it was measured).",
        )
    ]


def schedule_caveats(plan: TiledPlan, variant: str, facts: TiledFacts) -> list[Caveat]:
    """Where FlashAttention-2's causal CTA schedule decides a figure the model only estimates:
    the forward's tail where a causal grid of several heads fills two to four waves of CTA
    slots; the backward's Q-side re-reads where several heads each have more K/V blocks than
    the GPU has CTA slots; the memory-efficient backward's recomputed D on such heads (the
    derivations: docs/model.md)."""
    workload, opts = plan.given, plan.options
    if not bool(workload.causal) or variant != "fa2":
        return []
    bw = facts.backward
    f = lambda v: np.asarray(v, dtype=np.float64)  # noqa: E731
    heads = f(intmath.mul(workload.batch, workload.heads))
    out = []
    slots = f(facts.concurrent_ctas)
    jobs = heads * np.ceil(f(workload.n) / np.maximum(f(facts.blocks.block_q), 1.0))
    tail = (heads >= 2) & (jobs > slots) & (jobs <= 4 * slots)
    # aiter's paired grid: equal jobs under a square mask, the tail is the wave quantisation
    tail = tail & ~implementations.paired_q_blocks(opts.model_implementation, facts.blocks.block_q)
    if np.any(tail):
        out.append(
            Caveat(
                "causal_tail",
                f"{rows_prefix(tail)}the causal grid's CTAs"
                + (f" ({int(jobs)})" if np.ndim(jobs) == 0 else "")
                + " fill 2 to 4 waves of its CTA slots across several heads: its tail (the last heads' longest "
                "CTAs run last) is estimated, and "
                + _on_the_h200("causal_tail", "on the H200 such kernels' times came out")
                + ".",
            )
        )
    library = bw is not None and bw.block_kv is not None
    if opts.backward and library and opts.model_implementation in ("sdpa-flash", "sdpa-cudnn"):
        t_c = np.ceil(f(workload.n_kv_) / np.maximum(f(bw.block_kv), 1.0))
        long = (heads >= 2) & (t_c > f(bw.concurrent_ctas))
        if np.any(long):
            out.append(
                Caveat(
                    "causal_backward",
                    f"{rows_prefix(long)}causal backward over several heads each longer than the GPU's CTA slots: its "
                    "Q-side re-reads are counted from groups of CTAs starting at each head's first block, which they "
                    "do not; " + _on_the_h200("causal_backward", "on the H200 such kernels' HBM bytes came out") + ".",
                )
            )
    if opts.backward and library and opts.model_implementation == "sdpa-efficient":
        t_c = np.ceil(f(workload.n_kv_) / np.maximum(f(bw.block_kv), 1.0))
        long = t_c > f(bw.concurrent_ctas)
        if np.any(long):
            out.append(
                Caveat(
                    "mea_backward",
                    f"{rows_prefix(long)}causal memory-efficient backward on heads with more K/V blocks than the GPU's "
                    "CTA slots: the CTAs that start one at a time as the head's first ones finish each recompute D "
                    "over all of the head's O and dO, and those re-reads are not counted; "
                    + _on_the_h200("mea_backward", "on the H200 such kernels' HBM bytes came out")
                    + ".",
                )
            )
    return out


#: head dims (as run) at which flex's masked backward template spills registers on the H200
#: (torch 2.11, Triton 3.6: 255 registers a thread and a stack of 88 to 1600 bytes at 128; none at
#: 64; validation/h200/flex-bwd-probe/)
FLEX_SPILL_DIMS = (65, 128)


def flex_spill_caveats(plan: TiledPlan) -> list[Caveat]:
    """FlexAttention's masked backward at head dims 65 to 128: its template spills registers to
    local memory; the median stack's share of the L2 is counted (:func:`memmodel.traffic.flex.
    q_phase_rereads`), what of the spilled traffic reaches HBM is not (the flex backward probe of
    docs/variants.md, "Left as measured")."""
    w, opts = plan.given, plan.options
    if opts.model_implementation != "flex" or not opts.backward:
        return []
    from .traffic.flex import has_mask

    lo, hi = FLEX_SPILL_DIMS
    d = np.asarray(intmath.to_float(plan.exec_d))
    hit = (d >= lo) & (d <= hi) & bool(has_mask(w))
    if not np.any(hit):
        return []
    return [
        Caveat(
            "flex_spills",
            f"{rows_prefix(hit)}flex's masked backward at this head dim spills registers (measured on the H200: "
            "255 registers a thread and a stack of 88 to 1600 bytes, most where N is not a multiple of 128); the "
            "model takes the median stack's share of the L2 from the Q programs' re-reads, but not the spilled "
            "traffic that reaches HBM nor a larger stack's share; "
            + _on_the_h200("flex_spills", "on the H200 such kernels' HBM bytes came out")
            + ".",
        )
    ]


def flex_replay_caveats(plan: TiledPlan) -> list[Caveat]:
    """FlexAttention's backward on a grid too long to replay (:data:`memmodel.traffic.flex.
    SCHEDULE_EVENTS` block reads, a head's K/V and Q programs' walks together): its Q programs'
    re-reads after the K/V programs are not counted, so its HBM bytes are a lower bound."""
    w, opts = plan.given, plan.options
    if opts.model_implementation != "flex" or not opts.backward:
        return []
    from .traffic.flex import SCHEDULE_EVENTS, backward_config, schedule_reads

    causal = bool(np.all(w.causal))

    def reads(n: int, n_kv: int, d: int, window: int, group: int) -> int:
        mask = (causal, window or None, w.seq_lens)
        return schedule_reads(n, n_kv, mask, group, backward_config(w.dtype, d))

    count = np.vectorize(reads, otypes=[np.int64])(w.n, w.n_kv_, w.d, w.window or 0, w.group)
    hit = count > SCHEDULE_EVENTS
    if not np.any(hit):
        return []
    return [
        Caveat(
            "",
            f"{rows_prefix(hit)}flex's backward over this many blocks (more than {SCHEDULE_EVENTS:,} block reads "
            "a K/V head) is not replayed: its Q programs' re-reads after the K/V programs are not counted, "
            "so its HBM bytes are a lower bound",
        )
    ]


#: the lengths (documents, or the sequence) over which FlashAttention-2's uneven causal forward was
#: measured slower than its even kernel on the H200: more than one Q block, at most 4096 tokens
FA2_UNEVEN_LENGTHS = (129, 4096)


def fa2_uneven_caveats(workload: Any, plan: TiledPlan) -> list[Caveat]:
    """FlashAttention-2's causal forward where its launch is not ``Is_even_MN`` (a packed row's
    ``cu_seqlens``, or lengths that are not multiples of its tiles): that kernel stalls on fetching
    its instructions over short and middling rows, timed by the slowdown the varlen probe measured
    (docs/variants.md, "Packed variable-length batches"); the records' errors where it fires."""
    opts = plan.options
    from .timing import FA2_FORWARD_CODE

    if (
        opts.model_implementation not in FA2_FORWARD_CODE
        or not bool(np.all(workload.causal))
        or workload.window is not None
    ):
        return []
    lo, hi = FA2_UNEVEN_LENGTHS
    bq, bkv = (int(np.max(np.asarray(x))) for x in (plan.tile.blocks.block_q, plan.tile.blocks.block_kv))
    if workload.seq_lens is not None:
        lengths = np.asarray(workload.seq_lens)
    else:
        n, n_kv = np.asarray(workload.n), np.asarray(workload.n_kv_)
        even = (n % bq == 0) & (n_kv % bkv == 0)
        lengths = np.where(even, 0, n)
    if not np.any((lengths >= lo) & (lengths <= hi)):
        return []
    return [
        Caveat(
            "fa2_uneven",
            "FlashAttention-2's causal forward runs its uneven kernel here (Is_even_MN false: "
            + ("a packed row's cu_seqlens" if workload.seq_lens is not None else "lengths not multiples of its tiles")
            + "), which on the H200 stalls on instruction fetch over rows of a few blocks: its time takes the slowdown "
            "measured against the even kernel on equal documents, by the row's Q blocks (the profile's "
            "uneven_causal_slowdown; lengths not multiples of the tiles take the packed rows'); "
            + _on_the_h200("fa2_uneven", "on the H200 such kernels' times came out")
            + ".",
        )
    ]


def rows_prefix(flags: Any) -> str:
    """'k of n rows: ' where a caveat holds on some rows of a grid; '' for one workload."""
    arr = np.asarray(flags, dtype=bool)
    return f"{int(arr.sum())} of {arr.size} rows: " if arr.size > 1 else ""


def knee_note(flags: Any, curve: ReuseCurve, causal: bool, causal_curve: str = "") -> Caveat | None:
    """A caveat where ``flags`` (from :func:`memmodel.traffic.reuse.poorly_modelled`) holds anywhere;
    else None. ``causal_curve``: the schedule ("fa2", "cudnn") whose measured causal curves the
    causal re-reads were read from, whose checked errors the note gives instead."""
    arr = np.asarray(flags, dtype=bool)
    if not arr.any():
        return None
    lo, hi = curve.knee
    where = rows_prefix(arr)
    cls = f"causal_curve_{causal_curve}"
    if causal and cls in CHECKED:
        what = (
            "causal K/V re-reads with a head's K/V at or past the L2's capacity knee "
            f"({lo / 2**20:.0f} MiB): read from the measured causal curve, whose miss share rises 2-3 x per "
            f"tenth of the L2 there ({_on_the_h200(cls, 'on the H200:')}; docs/accuracy.md)"
        )
    elif causal:
        cls = "knee_causal"
        what = (
            "causal K/V re-reads with a head's K/V at or past the L2's capacity knee "
            f"({lo / 2**20:.0f} MiB): the HBM bytes of the tiled kernel are uncertain by a factor "
            "(measured 1.2-90 x the unique K/V on the H200's microbenchmark; the model's causal rule does not follow it)"
        )
    else:
        cls = "knee_waves"
        what = (
            f"K/V re-read across waves near the L2's capacity knee ({lo / 2**20:.0f}-{hi / 2**20:.0f} MiB "
            "live): the HBM bytes of the tiled kernel move steeply with the footprint there"
        )
    basis = "" if curve.measured else " (no measured memory.l2.reuse curve: a step at the effective capacity assumed)"
    return Caveat(cls, f"{where}{what}{basis}.")
