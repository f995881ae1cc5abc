"""Derivation: the figures a profile lacks, carried over from a measured profile.

``derive_from: h200`` fills every figure a sibling of the same architecture does not give by
the rule of its field (:data:`DERIVE_RULES`); ``transfer_from: h200`` (``library_rates_from``, its
older name) gives a GPU of another architecture the measured GPU's shares of its datasheet peaks
and the figures that carry across (:func:`transfer`). Each figure's note names its rule and inputs.
Why each rule is what it is: docs/profiles.md.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from .. import units
from .profile import Profile, arch_family
from .schema import (
    DESIGN_RATIO,
    FIELDS,
    MMA_SYNC_DTYPES,
    MMA_SYNC_NATIVE,
    SAME_DESIGN,
    SAME_FAMILY,
    SAME_FAMILY_SOURCE,
    SAME_INSTRUCTION,
    SAME_INSTRUCTION_FIGURES,
    SHARE_FIGURES,
    field_error,
)

#: How each figure carries over from a base profile to a sibling of the same architecture
#: (first matching pattern wins). ``sm-clock``: per SM per clock (× SMs × clock);
#: ``clock``: per clock (× clock); ``cycles``: a fixed number of cycles (× base clock /
#: clock); ``hbm``: the same share of the datasheet HBM bandwidth; ``stream``: a library
#: kernel's rate, its time per byte split into streaming (``hbm``) and the rest (``sm-clock``,
#: :func:`stream_rate`); ``l2``: the same share of the L2; ``same``: dimensionless, or fixed in
#: nanoseconds.
DERIVE_RULES: tuple[tuple[str, str], ...] = (
    ("compute.mma_sync.one_cta_share", "same"),
    ("compute.*", "sm-clock"),
    ("memory.l2.bandwidth", "sm-clock"),
    ("memory.sram.bandwidth_per_sm", "clock"),
    ("memory.l2.latency", "cycles"),
    ("memory.sram.latency", "cycles"),
    ("kernels.softmax.row_time", "cycles"),
    ("kernels.softmax.row_floor*", "cycles"),  # times, not rates: a few rows' floor is their instructions'
    ("kernels.small.*", "cycles"),
    ("implementations.*.cta_overhead", "cycles"),
    ("implementations.*.backward_cta_overhead", "cycles"),
    ("implementations.*.split_cta_overhead", "cycles"),
    ("implementations.*.combine_time*", "cycles"),
    ("memory.hbm.bandwidth", "hbm"),
    ("memory.hbm.write_bandwidth", "hbm"),
    ("kernels.*", "stream"),
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
    ("host.graph_kernel_gap", "cycles"),
    ("host.*", "same"),
    ("implementations.*.call_host", "same"),
    ("implementations.*.split_call_host", "same"),
    ("implementations.*.backward_call_host", "same"),
    ("implementations.*.sustained_share", "power-clock"),
    ("implementations.*.sustained_after", "same"),
    ("implementations.*.efficiency", "same"),
    ("implementations.*.split_efficiency", "same"),
    ("implementations.*.uneven_efficiency", "same"),
    ("implementations.*.combine_bandwidth", "stream"),
    ("implementations.*.efficiency_*", "same"),
    ("implementations.*.uneven_causal_slowdown_d*", "same"),
    ("implementations.*.backward_efficiency", "same"),
    ("implementations.*.backward_dv_efficiency", "same"),
    ("implementations.*.backward_dv_causal_efficiency", "same"),
    ("implementations.*.backward_masked_block_cost", "same"),
    ("implementations.*.masked_block_cost", "same"),
    ("implementations.*.checked_step_cost", "same"),
    ("implementations.*.paged_step_cost", "same"),
    ("implementations.*.backward_checked_step_cost", "same"),
    ("implementations.*.local_block_cost", "same"),
    ("implementations.*.exited_cta_cost", "same"),
    ("implementations.*.local_loop_cost", "same"),
    ("implementations.*.spill_write*", "same"),
    ("implementations.*.varlen_spill_write*", "same"),
    ("implementations.*.local_spill_write", "same"),
    ("implementations.*.varlen_local_spill_write", "same"),
    ("implementations.*.dropout_rate", "sm-clock"),
    ("implementations.*.backward_dropout_rate", "sm-clock"),
    ("implementations.*.cta_bandwidth", "same"),
    ("implementations.*.hbm_share", "same"),
    ("implementations.*.fp8_share", "same"),
    ("implementations.*.block_step_time", "cycles"),
    ("implementations.*.mask_key_time", "cycles"),
    ("implementations.*.template_step_time", "cycles"),
    ("implementations.*.co_resident_cost", "same"),
    ("implementations.*.contiguous_step_share", "same"),
    ("implementations.*.kv_convert_flops", "same"),
    ("interconnect.*_efficiency", "same"),
    ("interconnect.p2p_sms", "same"),
    ("interconnect.p2p_idle_sms", "same"),
)
RULE_TEXT = {
    "sm-clock": "per SM per clock, × SMs × clock",
    "clock": "per clock, × clock",
    "cycles": "the same cycles, × base clock / clock",
    "hbm": "the same share of the datasheet HBM bandwidth",
    "stream": "time per byte split into streaming at the measured share of the datasheet HBM bandwidth and the "
    "rest per SM per clock (÷ SMs × clock)",
    "l2": "the same share of the L2",
    "same": "carried over as is",
    "power-clock": "the sustained clock scaled by the cube root of the power per SM, at most the boost clock",
}
#: The figures the host sets, not the GPU (the CPU and the PyTorch build issue the work): carried
#: to any GPU as they are (rule ``same``), their notes saying so (:func:`host_note`). The gap
#: between a replayed graph's kernels (``host.graph_kernel_gap``) is the GPU's: not among them
HOST_SET = (
    "host.op",
    "host.view",
    "host.gemm",
    "host.autograd_node",
    "host.autograd_view_node",
    "host.backward_pass",
    "host.launch_latency",
    "host.launch_share",
    "host.split_launch_share",
    "host.graph_launch",
    "implementations.*.call_host",
    "implementations.*.split_call_host",
    "implementations.*.backward_call_host",
)


def host_set(fpath: str) -> bool:
    """Whether ``fpath`` is a figure of the host (:data:`HOST_SET`), not of the GPU."""
    return any(glob_match(fpath, pattern) for pattern in HOST_SET)


def host_note(base: Profile, fpath: str, shown: str) -> str:
    """The note of a host figure carried from ``base``: whose host, measured when, and why as is."""
    return f"from {base.name}'s host, {_measured_on(base, fpath)}, carried as is: the CPU and torch set it, not the GPU: {shown}"


#: the rule ``power-clock`` stands in for where either profile lacks a TDP: ``same``
POWER_CLOCK_FALLBACK = "same"
#: What a derived profile must give itself: the inputs of the rules
_DERIVE_INPUTS = ("sm_count", "clock", "memory.hbm.datasheet_bandwidth", "memory.l2.capacity")

#: The rates of PyTorch's and cuBLAS' memory-bound library kernels (softmax, products over S,
#: elementwise, dropout, reductions): ``transfer_from`` carries them to any GPU by the ``stream``
#: rule (:func:`stream_rate`), as ``derive_from`` does
LIBRARY_FIELDS = "kernels.*"


def glob_match(text: str, pattern: str) -> bool:
    """``fnmatch.fnmatchcase`` for patterns whose only wildcard is ``*`` (it also matches
    dots), without compiling a regular expression per pattern: derivation matches every
    figure of the base profile against :data:`DERIVE_RULES` at each start-up."""
    parts = pattern.split("*")
    if len(parts) == 1:
        return text == pattern
    head, *middle, tail = parts
    if len(text) < len(head) + len(tail) or not text.startswith(head) or not text.endswith(tail):
        return False
    at, end = len(head), len(text) - len(tail)
    for part in middle:
        found = text.find(part, at, end)
        if found < 0:
            return False
        at = found + len(part)
    return True


@functools.lru_cache(maxsize=4096)
def derive_rule(fpath: str) -> str | None:
    """The rule (:data:`RULE_TEXT`'s keys) a figure carries over by; None: it does not."""
    for pattern, rule in DERIVE_RULES:
        if glob_match(fpath, pattern):
            return rule
    return None


def derive(data: Mapping[str, Any], where: str, base: Profile) -> dict[str, Any]:
    """``data`` (a profile's YAML naming ``derive_from``) with every figure it lacks derived
    from ``base`` by :data:`DERIVE_RULES`; each derived figure's note says rule and inputs."""
    cc = data.get("compute_capability")
    family = arch_family(cc if isinstance(cc, str) else None)
    if family is not None and base.arch_family is not None and family != base.arch_family:
        raise field_error(
            where,
            "derive_from",
            f"{base.name!r} is {base.arch_family}, this profile {family} (compute_capability {cc}): derive_from takes "
            "a sibling of the same architecture; for another, transfer_from",
        )
    out = _copy(data)
    inputs: dict[str, float] = {}
    for fpath in _DERIVE_INPUTS:
        value = _parsed(data, fpath, where)
        if value is None:
            raise field_error(where, fpath, f"missing: a profile that derives from {base.name!r} must give it")
        if fpath not in base.figures:
            raise field_error(where, "derive_from", f"{base.name!r} has no {fpath}, which derivation needs")
        inputs[fpath] = value
    scale = _rule_scales(base, inputs["sm_count"], inputs["clock"], inputs["memory.hbm.datasheet_bandwidth"])
    scale["l2"] = inputs["memory.l2.capacity"] / base.figures["memory.l2.capacity"]
    tdp = _parsed(data, "tdp", where)
    derived_any = False
    for fpath, value in base.figures.items():
        rule = derive_rule(fpath)
        if rule is None or _leaf(data, fpath) is not None or _same_family_figure(base, fpath):
            continue  # the same-family rule's figures are made again from this profile's own
        if fpath.startswith("interconnect.") and _leaf(data, "interconnect.bandwidth") is None:
            continue  # a part without links of its own (H100 PCIe) takes no measured link curve
        if rule == "power-clock":
            clocked = power_clock(base, float(value), inputs["sm_count"], inputs["clock"], tdp, base.kind_of(fpath))
            if clocked is not None:
                share, note = clocked
                _put(out, fpath, {"value": round(share, 4), "source": "derived", "note": note}, where)
                derived_any = True
                continue
            rule = POWER_CLOCK_FALLBACK
        prov = base.provenance.get(fpath)
        what = f"{base.name}'s {prov.text if prov else value}" + (f" ({prov.kind})" if prov and prov.kind else "")
        if rule == "stream":
            new_value = _stream_scaled(value, base, scale, FIELDS[fpath][0])
            note = f"{RULE_TEXT[rule]}{_stream_factors(scale)}: from {what}"
        else:
            factor = scale[rule]
            new_value = _scaled(value, factor, FIELDS[fpath][0])
            note = f"{RULE_TEXT[rule]}" + (f" (× {factor:.4g})" if rule != "same" else "") + f": from {what}"
        if host_set(fpath):
            note = host_note(base, fpath, prov.text if prov else str(value))
        _put(out, fpath, {"value": new_value, "source": "derived", "note": note}, where)
        derived_any = True
    if derived_any:
        sources = dict(out["sources"]) if isinstance(out.get("sources"), Mapping) else {}
        sources["derived"] = {
            "title": f"derived from profile {base.name} ({base.full_name}) by memmodel's same-architecture rules "
            "(docs/profiles.md)",
            "kind": "derived",
        }
        out["sources"] = sources
    return out


#: the exponent of the power per SM in the clock rule: dynamic power ∝ f·V², V roughly ∝ f in
#: the DVFS range, so P ∝ f³ and the clock a power limit allows ∝ (P / SM)^(1/3) (docs/model.md)
POWER_CLOCK_EXPONENT = 1.0 / 3.0


def power_clock(
    base: Profile, share: float, sm_count: float, clock: float, tdp: float | None, kind: str | None = "measured"
) -> tuple[float, str] | None:
    """The share of its boost ``clock`` a sibling of ``base`` keeps under its power limit, from
    ``base``'s ``share`` (its sustained clock over its boost clock; ``kind``: how ``base`` has it,
    measured or itself derived): ``base``'s sustained clock × ((tdp / SMs) / (base TDP / base
    SMs))^(1/3), at most the boost clock; and the note saying so. None where either TDP or
    ``base``'s clock is missing (the figure is then carried as it is)."""
    base_tdp, base_clock = base.figures.get("tdp"), base.figures.get("clock")
    if tdp is None or not base_tdp or not base_clock or not sm_count or not clock:
        return None
    per_sm = (tdp / sm_count) / (base_tdp / base.figures["sm_count"])
    base_sustained = share * base_clock
    sustained = min(clock, base_sustained * per_sm**POWER_CLOCK_EXPONENT)
    out = sustained / clock
    capped = " (capped at the boost clock)" if sustained >= clock else ""
    note = (
        f"power-clock rule: {base.name}'s {'measured ' if kind == 'measured' else ''}share {share:.3f}"
        f"{f' ({kind})' if kind not in (None, 'measured') else ''} of its {base_clock / 1e6:.0f} MHz = a sustained "
        f"{base_sustained / 1e6:.0f} MHz at {base_tdp:.0f} W over {base.figures['sm_count']:.0f} SMs; × "
        f"(({tdp:.0f} W / {sm_count:.0f} SMs) / ({base_tdp:.0f} W / {base.figures['sm_count']:.0f} SMs))^(1/3) = × "
        f"{per_sm**POWER_CLOCK_EXPONENT:.4f} -> {sustained / 1e6:.0f} MHz{capped}, over this GPU's boost "
        f"{clock / 1e6:.0f} MHz = {out:.4f} (an approximation: dynamic power ∝ f·V², V ∝ f; docs/model.md)"
    )
    return out, note


def _copy(data: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` with its sections copied, so that derived figures can be put into it."""
    out: dict[str, Any] = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in data.items()}
    for key in ("memory", "compute", "kernels", "implementations", "interconnect", "datasheet"):
        if isinstance(out.get(key), Mapping):
            out[key] = _deep_copy(out[key])
    return out


def _stream_factors(scale: Mapping[str, float]) -> str:
    """The factors the ``stream`` rule used, for a figure's note."""
    if "sm-clock" not in scale:
        return f" (no SM count or clock: the hbm rule, × {scale['hbm']:.4g})"
    return f" (HBM × {scale['hbm']:.4g}, SMs × clock × {scale['sm-clock']:.4g})"


def _rule_scales(base: Profile, sm_count: float | None, clock: float | None, hbm_datasheet: float) -> dict[str, float]:
    """The factor of each rule of :data:`RULE_TEXT` from ``base`` to a GPU of these figures
    (without SM count or clock, only the ``hbm`` and ``same`` rules)."""
    scale = {"hbm": hbm_datasheet / base.figures["memory.hbm.datasheet_bandwidth"], "same": 1.0}
    if sm_count and clock and base.figures.get("clock"):
        scale["sm-clock"] = sm_count * clock / (base.figures["sm_count"] * base.figures["clock"])
        scale["clock"] = clock / base.figures["clock"]
        scale["cycles"] = base.figures["clock"] / clock
    return scale


def stream_rate(rate: float, base_stream: float, stream: float, sm_clock: float) -> float:
    """A library kernel's rate (bytes/s) carried from a GPU where it was measured at ``rate``
    with ``base_stream`` its streaming rate (the measured HBM bandwidth) to one streaming at
    ``stream`` whose SMs × clock are ``sm_clock`` times the base's: its time per byte is the
    streaming time plus what the SMs add (issue, latency with the bytes a row keeps in flight),
    1/r = 1/stream + (1/rate − 1/base_stream) / sm_clock. A kernel at the streaming rate scales
    with the HBM; one far below it, with the SMs."""
    rest = max(1.0 / rate - 1.0 / base_stream, 0.0)
    return 1.0 / (1.0 / stream + rest / sm_clock)


def _stream_scaled(value: Any, base: Profile, scale: Mapping[str, float], kind: Any) -> Any:
    """``value`` (a rate or a curve of rates) of ``base`` by :func:`stream_rate` (the ``stream``
    rule), where the target's SMs and clock are known (``scale["sm-clock"]``); else the ``hbm`` rule."""
    if "sm-clock" not in scale or kind != "bandwidth":
        return _scaled(value, scale["hbm"], kind)
    base_stream = base.figures["memory.hbm.bandwidth"]
    stream = base_stream * scale["hbm"]

    def one(rate: float) -> float:
        return stream_rate(rate, base_stream, stream, scale["sm-clock"])

    if isinstance(value, tuple):
        return {x: units.quantity(one(y), kind) for x, y in value}
    return units.quantity(one(value), kind)


def _scaled(value: Any, factor: float, kind: Any) -> Any:
    """A base profile's figure (a number or a curve) × ``factor``, as a profile writes it."""
    if isinstance(value, tuple):  # a curve
        return {x: units.quantity(y * factor, kind) for x, y in value}
    return units.quantity(value * factor, kind)


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
            raise field_error(where, ".".join(parts[: i + 1]), "must be a mapping of fields")
    node[parts[-1]] = value


def _raw_value(raw: Any) -> Any:
    return raw.get("value") if isinstance(raw, Mapping) and "value" in raw else raw


def _deep_copy(node: Any) -> Any:
    if isinstance(node, Mapping):
        return {k: _deep_copy(v) for k, v in node.items()}
    return node


#: What ``transfer_from`` (a measured GPU of another architecture) carries, besides the shares of
#: :data:`~.schema.SHARE_FIGURES` (each datasheet peak × the share of its own peak the measured GPU
#: reaches, at most 1) and the library kernels' rates (:data:`LIBRARY_FIELDS`, the ``stream`` rule):
#: ``mma-share``: on an architecture where ``mma.sync`` is not the tensor cores' native path, the
#: share of the native rate it reaches on the measured GPU; figures fixed in time, by ``same``;
#: on a GPU of the same vendor, the implementations' and NCCL's figures by :data:`DERIVE_RULES`.
TRANSFER_SAME = ("launch_overhead", "event_overhead")
#: The figures an architecture's own kernels set, not carried to another architecture (by
#: ``transfer_from``, nor by the same-design rule): an fp8 kernel's efficiency as a share of its
#: 16-bit one. On Hopper an 8-bit ``wgmma`` takes both operands K-major from shared memory, so the
#: P·V product needs V transposed inside the kernel (FlashAttention-3, Shah et al. 2024, section 3.3;
#: Colfax Research, "Adding FP8 to FlashAttention", 2024), a cost the 16-bit kernels do not pay;
#: Blackwell's ``tcgen05.mma`` takes 8-bit operands of either majorness (PTX ISA 8.7, the
#: instruction descriptor of ``.kind::f8f6f4``: its transpose-A and transpose-B bits)
TRANSFER_ARCH_OWN = (
    "implementations.*.fp8_share",
    # one Hopper kernel's traits where V's head dim is below Q's (memmodel.calibration.cudnn_bwd_dims)
    "implementations.*.backward_dv_efficiency",
    "implementations.*.backward_dv_causal_efficiency",
)
#: The source id every transferred figure cites (its kind is ``derived``)
TRANSFERRED = "transferred"
#: The figures only a GPU of the same vendor takes (the same kernels and libraries run there)
TRANSFER_SAME_VENDOR = (
    "compute.mma_sync.one_cta_share",
    "implementations.*",
    "interconnect.*_efficiency",
    "interconnect.p2p_sms",
    "interconnect.p2p_idle_sms",
)


def _raw_kind(data: Mapping[str, Any], fpath: str) -> str | None:
    """The source kind of one figure as a profile's YAML gives it (None: no figure or no kind)."""
    raw = _leaf(data, fpath)
    sources = data.get("sources")
    if not isinstance(raw, Mapping) or not isinstance(sources, Mapping):
        return None
    sid = raw.get("source")
    src = sources.get(sid) if isinstance(sid, str) else None
    return src.get("kind") if isinstance(src, Mapping) else None


def _parsed(data: Mapping[str, Any], fpath: str, where: str, shown: str | None = None) -> float | None:
    raw = _raw_value(_leaf(data, fpath))
    if raw is None or isinstance(raw, Mapping):
        return None
    try:
        return units.parse(raw, FIELDS[fpath][0])
    except units.UnitError as exc:
        raise field_error(where, shown or fpath, str(exc)) from None


def _measured_on(base: Profile, fpath: str | None = None) -> str:
    """ "measured DATE": the date of the source of ``fpath``'s figure on ``base``; without one,
    of the source most of its measured figures cite (its calibration; the later on a tie)."""
    sources = base.sources
    prov = base.provenance.get(fpath) if fpath else None
    own = sources.get(prov.source) if prov is not None and prov.source else None
    if own is not None and own.kind == "measured" and own.date:
        return f"measured {own.date}"
    counts: dict[str, int] = {}
    for p in base.provenance.values():
        src = sources.get(p.source) if p.source else None
        if src is not None and src.kind == "measured" and src.date:
            counts[src.date] = counts.get(src.date, 0) + 1
    if not counts:
        return "measured"
    return f"measured {max(counts, key=lambda d: (counts[d], d))}"


#: Figures of the same units: fp16 and bf16 products run on the same tensor cores at the same
#: peak, so they take one share, the larger the measured GPU reached (what else differs between
#: its two measurements is the run, not the hardware)
_SAME_UNITS = {"compute.fp16": ("compute.fp16", "compute.bf16"), "compute.bf16": ("compute.fp16", "compute.bf16")}


def _measured_share(base: Profile, fpath: str) -> float | None:
    """The share of its datasheet peak ``base`` measured for a figure; None where it did not."""
    peak, value = base.datasheet_peak(fpath), base.figures.get(fpath)
    if peak is None or value is None or base.kind_of(fpath) != "measured":
        return None
    return value / peak


def _same_design(
    data: Mapping[str, Any], out: dict[str, Any], base: Profile, when: str, scale: dict[str, float], put: Any
) -> None:
    """The same-design rule (:data:`~.schema.SAME_DESIGN`): on a GPU whose compute capability an
    implementation's kernels run on, each figure it lacks from the measured GPU's figure of its
    source implementation, by that figure's own rule (:data:`DERIVE_RULES`)."""
    try:
        cap = float(str(data.get("compute_capability") or ""))
    except ValueError:
        return
    for impl, ((lo, hi), chain) in SAME_DESIGN.items():
        if not lo <= cap <= hi:
            continue
        for src, only in chain:
            prefix = f"implementations.{src}."
            for fpath, value in base.figures.items():
                if not fpath.startswith(prefix) or base.kind_of(fpath) != "measured":
                    continue
                rest = fpath[len(prefix) :]
                target = f"implementations.{impl}.{rest}"
                if (only is not None and rest not in only) or _leaf(out, target) is not None:
                    continue
                if any(glob_match(target, p) for p in TRANSFER_ARCH_OWN):
                    continue  # the measured architecture's kernels' own trait
                rule = derive_rule(target)
                rule = POWER_CLOCK_FALLBACK if rule == "power-clock" else rule
                if rule is None or rule not in scale or target not in FIELDS:
                    continue
                factor = scale[rule]
                prov = base.provenance.get(fpath)
                put(
                    target,
                    _scaled(value, factor, FIELDS[target][0]),
                    f"from {base.name}, {when}, same-design rule: {src}'s {rest} on {base.name} taken as {impl}'s "
                    f"(docs/implementations.md), {RULE_TEXT[rule]}"
                    + (f" (× {factor:.4g})" if rule != "same" else "")
                    + f": {prov.text if prov else value}",
                )


def _same_instruction(data: Mapping[str, Any], base: Profile, family: str | None, put: Any) -> None:
    """The same-instruction rule (:data:`~.schema.SAME_INSTRUCTION`): on a GPU whose native
    tensor-core path is ``mma.sync`` (``family``), transferred from one where it is not, each
    listed implementation's efficiencies are ``base``'s measured ones of its ``mma.sync`` kernel
    of the same algorithm, where the profile gives none of its own."""
    if family not in MMA_SYNC_NATIVE or base.arch_family in MMA_SYNC_NATIVE:
        return
    for impl, src in SAME_INSTRUCTION.items():
        for name in SAME_INSTRUCTION_FIGURES:
            source, target = f"implementations.{src}.{name}", f"implementations.{impl}.{name}"
            if _leaf(data, target) is not None or base.kind_of(source) != "measured" or target not in FIELDS:
                continue
            prov = base.provenance.get(source)
            put(
                target,
                _scaled(base.figures[source], 1.0, FIELDS[target][0]),
                f"from {base.name}, {_measured_on(base, source)}, same-instruction rule: {impl}'s kernels on "
                f"{family or 'this architecture'} are mma.sync kernels of FlashAttention-2's algorithm, not the "
                f"{base.arch_family or base.name} kernels measured as {impl}: {src}'s {name} on {base.name} "
                f"(docs/implementations.md): {prov.text if prov else base.figures[source]}",
            )


def _design_ratio(data: Mapping[str, Any], base: Profile, put: Any) -> None:
    """The design-ratio rule (:data:`~.schema.DESIGN_RATIO`): an implementation of another vendor
    with no efficiency of its own, forward or backward, takes as its backward efficiency the
    ratio of ``base``'s measured backward to forward efficiency of the source implementation (the
    same algorithm), at the head dims both were measured at; its forward keeps the GEMM rate."""
    for impl, src in DESIGN_RATIO.items():
        target = f"implementations.{impl}.backward_efficiency"
        if _leaf(data, target) is not None or _leaf(data, f"implementations.{impl}.efficiency") is not None:
            continue  # the profile's own figure
        fwd_path, bwd_path = f"implementations.{src}.efficiency", f"implementations.{src}.backward_efficiency"
        if base.kind_of(fwd_path) != "measured" or base.kind_of(bwd_path) != "measured":
            continue
        fwd, bwd = dict(base.figures.get(fwd_path) or ()), dict(base.figures.get(bwd_path) or ())
        ratio = tuple((d, bwd[d] / fwd[d]) for d in sorted(set(fwd) & set(bwd)) if fwd[d] > 0)
        if not ratio:
            continue
        shown = ", ".join(f"d = {d:g}: {r:.3f}" for d, r in ratio)
        put(
            target,
            _scaled(ratio, 1.0, FIELDS[target][0]),
            f"from {base.name}, {_measured_on(base, bwd_path)}, design-ratio rule: {impl}'s backward is the algorithm "
            f"of {src} (FlashAttention-2, docs/implementations.md), whose backward reaches this share of its "
            f"forward's efficiency on {base.name} ({shown}); {impl}'s forward, measured on no GPU, runs at the GEMM rate",
        )


def transfer(data: Mapping[str, Any], where: str, base: Profile) -> dict[str, Any]:
    """``data`` (a profile's YAML naming ``transfer_from``) with its achieved figures transferred
    from ``base``, a measured GPU of another architecture: each datasheet peak of
    :data:`~.schema.SHARE_FIGURES` becomes the peak × the share of its own peak ``base`` measured
    (the peak is kept under ``datasheet:``), and what ``data`` lacks is filled by the rules of
    :data:`TRANSFER_SAME`, ``mma-share``, :data:`LIBRARY_FIELDS` and, for a GPU of the same
    vendor, :data:`TRANSFER_SAME_VENDOR`. A figure ``data`` gives as measured or published
    is kept. Each transferred figure's note names the source, the date and the rule."""
    if base.rate_class != "measured":
        raise field_error(
            where, "transfer_from", f"{base.name!r} is not a measured profile ({base.rate_class}): nothing to transfer"
        )
    out = _copy(data)
    when = _measured_on(base)
    given_ds = _parsed(data, "memory.hbm.datasheet_bandwidth", where)
    if given_ds is None and _raw_kind(data, "memory.hbm.bandwidth") == "datasheet":
        given_ds = _parsed(data, "memory.hbm.bandwidth", where)
    if given_ds is None:
        raise field_error(
            where,
            "memory.hbm.datasheet_bandwidth",
            f"missing: a profile that transfers from {base.name!r} must give it",
        )
    transferred: dict[str, float] = {}
    if _leaf(data, "memory.hbm.datasheet_bandwidth") is None:
        _put(out, "memory.hbm.datasheet_bandwidth", _leaf(data, "memory.hbm.bandwidth"), where)

    def put(fpath: str, value: Any, note: str) -> None:
        _put(out, fpath, {"value": value, "source": TRANSFERRED, "note": note}, where)

    def shown(fpath: str, value: float) -> str:
        return units.quantity(value, FIELDS[fpath][0])

    for fpath in SHARE_FIGURES:
        kind = _raw_kind(data, fpath)
        own = _leaf(data, fpath)
        peak = _parsed(data, f"datasheet.{fpath}", where)
        if peak is None and fpath.startswith("memory.hbm."):
            peak = given_ds if own is None or kind == "datasheet" else None
        if kind == "datasheet":
            own_peak = _parsed(data, fpath, where)
            if peak is not None and own_peak is not None and abs(own_peak - peak) > 0.01 * peak:
                named = (
                    f"datasheet.{fpath}"
                    if _leaf(data, f"datasheet.{fpath}") is not None
                    else "memory.hbm.datasheet_bandwidth"
                )
                raise field_error(
                    where,
                    fpath,
                    f"a datasheet figure of {_raw_value(own)!r} contradicts {named} (two peaks of one figure)",
                )
            peak = own_peak if peak is None else peak
        if peak is None or (own is not None and kind != "datasheet"):
            continue  # no peak to take a share of, or the profile's own measured/published figure
        shares = {f: _measured_share(base, f) for f in _SAME_UNITS.get(fpath, (fpath,))}
        best = max((f for f in shares if shares[f] is not None), key=lambda f: shares[f] or 0.0, default=None)
        if best is None:
            continue
        b_peak, b_value = base.datasheet_peak(best), base.figures[best]
        share = min(b_value / b_peak, 1.0)
        if own is not None and _leaf(data, f"datasheet.{fpath}") is None:
            _put(out, f"datasheet.{fpath}", own, where)
        put(
            fpath,
            shown(fpath, peak * share),
            f"from {base.name}, {_measured_on(base, best)}, same-share rule: {base.name} reaches {shown(best, b_value)} of its "
            f"datasheet {shown(best, b_peak)}{f' in {best}' if best != fpath else ''} "
            f"({share:.3f}{', at most 1' if b_value > b_peak else ''}); "
            f"× this GPU's datasheet {shown(fpath, peak)}",
        )
        transferred[fpath] = peak * share
    family = arch_family(data.get("compute_capability") if isinstance(data.get("compute_capability"), str) else None)
    if family not in MMA_SYNC_NATIVE:
        for d in MMA_SYNC_DTYPES:
            fpath, native = f"compute.mma_sync.{d}", f"compute.{d}"
            b_mma, b_native = base.figures.get(fpath), base.figures.get(native)
            if _leaf(data, fpath) is not None or b_mma is None or not b_native or native not in transferred:
                continue
            share = b_mma / b_native
            put(
                fpath,
                shown(fpath, transferred[native] * share),
                f"from {base.name}, {_measured_on(base, fpath)}, mma-share rule: warp-level mma.sync reaches {share:.3f} of the native "
                f"tensor-core rate on {base.name} ({shown(fpath, b_mma)} of {shown(native, b_native)}), "
                f"taken the same on {family or 'this architecture'}",
            )
    vendor = data.get("vendor")
    same_vendor = isinstance(vendor, str) and vendor.strip().lower() == base.vendor.strip().lower()
    scale = _rule_scales(base, _parsed(data, "sm_count", where), _parsed(data, "clock", where), given_ds)
    has_links = _leaf(data, "interconnect.bandwidth") is not None
    for fpath, value in base.figures.items():
        if _leaf(data, fpath) is not None or fpath.startswith("datasheet.") or base.kind_of(fpath) != "measured":
            continue
        if any(glob_match(fpath, p) for p in TRANSFER_ARCH_OWN):
            continue  # the measured architecture's kernels' own trait
        rule = "same" if fpath in TRANSFER_SAME else derive_rule(fpath)
        if rule == "power-clock":  # one architecture's rule: across architectures carried as is
            rule = POWER_CLOCK_FALLBACK
        if fpath in TRANSFER_SAME or fpath.startswith("host."):
            pass  # every GPU: fixed times, and what the host (CPU, torch) sets; a library call's only to its vendor
        elif glob_match(fpath, LIBRARY_FIELDS) and rule in ("hbm", "stream"):
            pass  # every GPU: the library kernels' rates (the stream rule)
        elif not (same_vendor and any(glob_match(fpath, p) for p in (*TRANSFER_SAME_VENDOR, LIBRARY_FIELDS))):
            continue
        elif fpath.startswith("interconnect.") and not has_links:
            continue
        if rule is None or (rule not in scale and rule != "stream"):
            continue
        prov = base.provenance.get(fpath)
        if rule == "stream":
            new = _stream_scaled(value, base, scale, FIELDS[fpath][0])
        else:
            factor = scale[rule]
            new = _scaled(value, factor, FIELDS[fpath][0])
        caveat = "" if same_vendor else f" ({base.vendor}'s figure, taken the same on {vendor}: not measured)"
        if host_set(fpath):
            put(fpath, new, host_note(base, fpath, prov.text if prov else str(value)) + caveat)
            continue
        put(
            fpath,
            new,
            f"from {base.name}, {_measured_on(base, fpath)}, {RULE_TEXT[rule]}"
            + (_stream_factors(scale) if rule == "stream" else (f" (× {factor:.4g})" if rule != "same" else ""))
            + f": {prov.text if prov else value}{caveat}",
        )
    if same_vendor:
        _same_design(data, out, base, when, scale, put)
        _same_instruction(data, base, family, put)
    else:
        _design_ratio(data, base, put)
    sources = dict(out["sources"]) if isinstance(out.get("sources"), Mapping) else {}
    sources[TRANSFERRED] = {
        "title": f"transferred from profile {base.name} ({base.full_name}, {when}) by memmodel's rules for another "
        "architecture (docs/profiles.md)",
        "kind": "derived",
    }
    out["sources"] = sources
    return out


def _same_family_figure(profile: Profile, fpath: str) -> bool:
    """Whether ``profile``'s figure ``fpath`` is one the same-family rule gave it."""
    prov = profile.provenance.get(fpath)
    return prov is not None and prov.source == SAME_FAMILY_SOURCE


def _origin(data: Mapping[str, Any], fpath: str, base: Profile | None) -> str:
    """Where ``data``'s figure ``fpath`` was measured, in a few words ("h200 measured 2026-12-01"):
    on this GPU (its source's date), or on ``base`` where it was derived or transferred from it."""
    raw = _leaf(data, fpath)
    sid = raw.get("source") if isinstance(raw, Mapping) else None
    sources = data.get("sources") if isinstance(data.get("sources"), Mapping) else {}
    src = sources.get(sid) if isinstance(sid, str) else None
    kind = src.get("kind") if isinstance(src, Mapping) else None
    if kind == "measured":
        date = src.get("date") if isinstance(src, Mapping) else None
        return f"{data.get('name', 'this GPU')} measured" + (f" {date}" if date else "")
    if base is not None:
        return f"{base.name} {_measured_on(base, fpath)}, {'derived' if data.get('derive_from') else 'transferred'}"
    return f"{data.get('name', 'this GPU')} ({kind or 'unknown kind'})"


def same_family(data: Mapping[str, Any], base: Profile | None = None) -> dict[str, Any]:
    """``data`` (a profile's YAML, derived or transferred from ``base`` where it names one) with
    the figures :data:`~.schema.SAME_FAMILY` gives, on a GPU whose compute capability the
    implementation runs on: each implementation's figures it lacks are
    its source implementation's on this GPU, as they are (each already carries this GPU's own
    rule from its measurement). Each note says "same design family and instruction class as
    SOURCE: its measured FIELD, from GPU measured DATE", and the source's own note."""
    out: dict[str, Any] | None = None
    titles = []
    try:
        cap = float(str(data.get("compute_capability") or ""))
    except ValueError:
        cap = None  # not an NVIDIA compute capability (gfx942): no family member runs there
    for impl, (src, (lo, hi), names) in SAME_FAMILY.items():
        if cap is None or not lo <= cap <= hi:
            continue
        first = None
        for name in names:
            source, target = f"implementations.{src}.{name}", f"implementations.{impl}.{name}"
            raw = _leaf(data, source)
            if raw is None or _leaf(data, target) is not None:
                continue
            if out is None:
                out = _copy(data)
            origin = _origin(data, source, base)
            first = first or origin
            own = raw.get("note") if isinstance(raw, Mapping) else None
            note = (
                f"same design family and instruction class as {src}: its measured {name}, from {origin} "
                f"(docs/implementations.md)" + (f"; {src}'s: {own}" if own else "")
            )
            _put(out, target, {"value": _raw_value(raw), "source": SAME_FAMILY_SOURCE, "note": note}, "<same-family>")
        if first is not None:
            titles.append(
                f"same design family and instruction class as {src}: its measured efficiencies, from {first} "
                f"({impl} never measured here)"
            )
    if out is None:
        return dict(data)
    sources = dict(out["sources"]) if isinstance(out.get("sources"), Mapping) else {}
    sources[SAME_FAMILY_SOURCE] = {
        "title": "; ".join(titles) + " (docs/implementations.md)",
        "kind": "derived",
    }
    out["sources"] = sources
    return out
