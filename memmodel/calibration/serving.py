"""The serving kernels' own figures, fitted to the H200 serving probe's reference shapes.

FlashInfer's paged kernels and its Hopper MLA kernel are not the kernels ``calibrate`` measures:
until they have figures of their own they are timed with the figures of their design
(``Kernel.figures_from``: FlashAttention-2's for the decode and FA2-style prefill, FA3's for
the sm90 prefill and MLA). The serving probe (``validation/probes/serving_probe.py``, record
:data:`RECORD`) timed each of them with the profiler on reference shapes no check set holds;
this module fits, by the model itself, what those shapes show:

``implementations.flashinfer`` (its CUDA-core decode, the merge, the sm90 prefill)
    * ``hbm_share``: its paged loads' share of the profile's HBM rate, from the decode kernels
      of group 1 at d = 64 (bound by HBM: 1.07 GB in 264 µs);
    * ``split_efficiency``: the decode kernel's CUDA-core dot products, from group 4 at d = 128
      (bound by them: four query heads per K/V row);
    * ``split_cta_overhead``: its fixed cost per wave, from one request of 8k keys;
    * ``combine_time``: the merge kernel's fixed cost (one figure: 2.9–3.8 µs at every shape);
    * ``efficiency`` (with ``cta_overhead`` and ``masked_block_cost``): the sm90 prefill as
      FA3's figures, its efficiency scaled by one factor fitted to the chunked prefills.

``implementations.flashinfer-fa2`` (its FA2-style prefill, and decoding through the tensor cores)
    FlashAttention-2's figures (``sdpa-flash``), its efficiency scaled by one factor fitted to the
    fa2-backend chunked prefills and the tensor-core decode; the library's ``hbm_share``.

``implementations.flashmla`` (FlashInfer's Hopper MLA decode)
    ``efficiency`` and ``cta_overhead`` fitted to the four absorbed decodes, FlashInfer's
    ``hbm_share`` by the same-library rule (its loads are the same library's).

``implementations.fa3.fp8_share``
    FlashInfer's fa3-backend fp8 prefill (FA3's Hopper design, FlashInfer's tiles), which the
    FP8 cases run: its efficiency as a share of the 16-bit one, from the two fp8 prefills.

Each fit minimises the squared logarithm of predicted over measured kernel time (the profiler's
duration; the model's time less its launch term), one figure at a time (golden-section search on
the figure's logarithm), the figures of a kernel family in turn, twice. Every fit starts from the
profile without any of these figures, so it does not depend on what the profile held before.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

#: the probe's record (one JSON line a shape) and the command that made it
RECORD = "validation/h200/serving-probe/serving-probe.jsonl.gz"
COMMAND = "python3 validation/probes/serving_probe.py serving-probe.jsonl (FlashInfer 0.7.2.post1 on PYTHONPATH)"
SOURCE = "measured-serving-kernels"
TITLE = "memmodel serving-kernel probe (FlashInfer's paged decode, prefill, merge and MLA kernels; its fp8 prefill)"

#: the measured kernel each model kernel is, by the profiler's name
MEASURED = {
    "flashinfer_decode": "BatchDecodeWithPagedKVCacheKernel",
    "flashinfer_merge": "PersistentVariableLengthMergeStatesKernel",
    "flashinfer_prefill_sm90": "PrefillWithKVCacheKernel",
    "flashinfer_prefill": "BatchPrefillWithPagedKVCacheKernel",
    "flashinfer_mla": "BatchMLAPageAttentionHopperKernel",
    "fa2_fwd": "FP8PrefillWithKVCacheKernel",
}


@dataclasses.dataclass(frozen=True)
class Row:
    """One kernel of one probe shape: the case it is, the kernel FlashInfer ran for it (the
    plan the model would choose, or the one the probe forced) and its measured time."""

    case: str
    kernel: str
    measured_s: float
    #: the paged kernel family the probe ran (decode, decode_tc, prefill_sm90, prefill: fa2; "" the
    #: model's), or for flex's decode whether the probe gave a block mask (mask, no-mask)
    choice: str = ""


def _case(r: Mapping[str, Any]) -> tuple[str, str] | None:
    """(case line, forced kernel choice) of one probe line; None for lines no fit reads."""
    s = r.get("section")
    if s == "decode" and r.get("kv_dtype") == "bf16":
        shape = f"heads={r['heads']},kv_heads={r['kv_heads']},d={r['d']},n=1,n_kv={r['n_kv']},batch={r['batch']}"
        return f"impl=flashinfer,{shape},dtype=bf16,page_size={r['page_size']}", (
            "decode_tc" if r.get("tensor_cores") else "decode"
        )
    if s == "prefill":
        shape = f"heads={r['heads']},kv_heads={r['kv_heads']},d={r['d']},n={r['n']},n_kv={r['n_kv']},batch={r['batch']}"
        return f"impl=flashinfer,{shape},dtype=bf16,causal=1,page_size={r['page_size']}", (
            "prefill" if r.get("backend") == "fa2" else "prefill_sm90"
        )
    if s == "mla" and r.get("backend") in ("auto", "fa3"):
        shape = f"heads={r['heads']},kv_heads=1,d=576,d_v=512,n=1,n_kv={r['n_kv']},batch={r['batch']}"
        return f"impl=flashmla,{shape},dtype=bf16", ""
    if s == "fp8-prefill" and r.get("dtype") == "fp8":
        shape = f"heads={r['heads']},kv_heads={r['kv_heads']},d={r['d']},n={r['n']},batch=1"
        return f"impl=fa3,{shape},dtype=fp8,causal={int(bool(r['causal']))}", ""
    return None


def rows(lines: Iterable[Mapping[str, Any]]) -> list[Row]:
    """The probe's kernels the fits read, one :class:`Row` each."""
    out: list[Row] = []
    for r in lines:
        found = _case(r)
        if found is None:
            continue
        case, choice = found
        kernels = [k for k in r.get("kernels") or [] if k.get("kind") == "kernel"]
        for model_name, marker in MEASURED.items():
            us = [float(k["us"]) for k in kernels if marker in str(k.get("name", "")).split("<")[0]]
            if us and _runs(model_name, case, choice):
                out.append(Row(case, model_name, sum(us) * 1e-6, choice))
    return out


def _runs(kernel: str, case: str, choice: str) -> bool:
    if case.startswith("impl=fa3"):
        return kernel == "fa2_fwd"
    if case.startswith("impl=flashmla"):
        return kernel == "flashinfer_mla"
    names = {
        "decode": ("flashinfer_decode", "flashinfer_merge"),
        "decode_tc": ("flashinfer_prefill", "flashinfer_merge"),
        "prefill": ("flashinfer_prefill", "flashinfer_merge"),
        "prefill_sm90": ("flashinfer_prefill_sm90",),
    }
    return kernel in names.get(choice, ())


@dataclasses.dataclass
class _Planned:
    """What one row's time needs that the figures do not change: its ledger and how it is timed."""

    traffic: Any
    dtype: str
    implementation: str | None
    head_dim: Any
    workload: Any


def _planned(case: str, choice: str, profile: Any) -> _Planned:
    from ..cases import parse_case
    from ..options import options_for
    from ..plan import plan_tiled, planned_traffic
    from ..traffic import paged
    from ..traffic.ledger import AlgorithmTraffic

    w = parse_case(case).workload()
    impl = case.split(",")[0].split("=")[1]
    plan = plan_tiled(w, profile, options_for(impl, w, profile))
    traffic = planned_traffic(plan)
    if choice in ("decode_tc", "prefill"):  # forced: the probe ran FlashInfer's FA2-style kernel
        kernels, params = paged.flashinfer_fa2_kernels(
            plan.workload, plan.l2, profile.sm_count, decode=choice == "decode_tc"
        )
        traffic = AlgorithmTraffic("tiled", "fa2", tuple(kernels), params, facts=plan.facts)
    return _Planned(traffic, w.dtype, plan.implementation, plan.exec_d, plan.workload)


def predicted(planned: _Planned, kernel: str, profile: Any) -> float:
    """The model's time of ``kernel`` in ``planned`` on ``profile``, less its launch term."""
    from ..timing import algorithm_time

    t = algorithm_time(
        planned.traffic, profile, planned.dtype, planned.implementation, planned.head_dim, planned.workload
    )
    k = next(k for k in t.kernels if k.name == kernel)
    return float(k.time_s) - float(k.terms.get("launch", 0.0))


#: the figure sets these fits write, and the one figure of fa3's
OWN = ("flashinfer", "flashinfer-fa2", "flashmla")


def bare(profile: Any) -> Any:
    """``profile`` without any figure these fits write."""
    figures = {k: v for k, v in profile.implementation_figures.items() if k not in OWN}
    if "fa3" in figures:
        figures["fa3"] = dataclasses.replace(figures["fa3"], fp8_share=None)
    return dataclasses.replace(profile, implementation_figures=figures)


def _scaled(curve: Any, factor: float) -> tuple[tuple[int, float], ...]:
    return tuple((d, v * factor) for d, v in curve)


def _golden(loss: Callable[[float], float], lo: float, hi: float, steps: int = 24, scan: int = 33) -> float:
    """The argument in [lo, hi] (a logarithm) where ``loss`` is least: the best of ``scan``
    evenly spaced points (a figure past which the time stops moving leaves a plateau that a
    bracketing search alone can wander onto), then golden-section search between its neighbours."""
    xs = [lo + (hi - lo) * i / (scan - 1) for i in range(scan)]
    values = [loss(x) for x in xs]
    i = min(range(scan), key=lambda j: (values[j], j))
    a, b = xs[max(i - 1, 0)], xs[min(i + 1, scan - 1)]
    g = (math.sqrt(5.0) - 1.0) / 2.0
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = loss(c), loss(d)
    for _ in range(steps):
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = loss(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = loss(d)
    return (a + b) / 2.0


#: each fitted figure: (its name, the rows' kernels it is fitted to, its search range)
FIGURES: tuple[tuple[str, tuple[str, ...], tuple[float, float]], ...] = (
    ("hbm_share", ("flashinfer_decode",), (0.5, 1.2)),
    ("split_efficiency", ("flashinfer_decode",), (0.05, 2.0)),
    ("split_cta_overhead", ("flashinfer_decode",), (1e-8, 2e-5)),
    ("combine_time", ("flashinfer_merge",), (1e-8, 2e-5)),
    ("sm90_factor", ("flashinfer_prefill_sm90",), (0.2, 2.0)),
    ("fa2_factor", ("flashinfer_prefill",), (0.2, 2.0)),
    ("mla_efficiency", ("flashinfer_mla",), (0.05, 2.0)),
    ("mla_cta_overhead", ("flashinfer_mla",), (1e-8, 5e-5)),
    ("fp8_share", ("fa2_fwd",), (0.2, 1.5)),
)
#: where a figure is read only from some of its kernel's rows: the decode's HBM share from the
#: HBM-bound group-1 shapes with many waves, its efficiency from group 4, its wave cost from batch 1
SUBSETS: dict[str, Callable[[Row], bool]] = {
    "hbm_share": lambda r: "kv_heads=16" in r.case and ",batch=1," not in r.case,
    "split_efficiency": lambda r: "kv_heads=8" in r.case and ",batch=1," not in r.case,
    "split_cta_overhead": lambda r: ",batch=1," in r.case,
}


def with_figures(profile: Any, f: Mapping[str, float]) -> Any:
    """``profile`` (:func:`bare`) with the fitted figures ``f`` (keys of :data:`FIGURES`) written
    as the profile's figures would be (:func:`figures`)."""
    figures = dict(profile.implementation_figures)
    for name, fields in figures_of(profile, f).items():
        base = figures.get(name) or profile.implementation(name)
        figures[name] = dataclasses.replace(base, name=name, **fields)
    return dataclasses.replace(profile, implementation_figures=figures)


def figures_of(profile: Any, f: Mapping[str, float]) -> dict[str, dict[str, Any]]:
    """{figure set: {ImplementationFigures field: value}} of the fitted figures ``f``."""
    fa3, fa2 = profile.implementation("fa3"), profile.implementation("sdpa-flash")
    one = lambda v: ((1, v),)  # noqa: E731  (one figure for every head dim)
    share = f.get("hbm_share", 1.0)
    return {
        "flashinfer": {
            "hbm_share": share,
            "split_efficiency": one(f.get("split_efficiency", 1.0)),
            "split_cta_overhead_s": one(f.get("split_cta_overhead", 1e-8)),
            "combine_time_s": (f.get("combine_time", 1e-8), 0.0),
            "efficiency": _scaled(fa3.efficiency, f.get("sm90_factor", 1.0)),
            "cta_overhead_s": fa3.cta_overhead_s,
            "masked_block_cost": fa3.masked_block_cost,
        },
        "flashinfer-fa2": {
            "hbm_share": share,
            "efficiency": _scaled(fa2.efficiency, f.get("fa2_factor", 1.0)),
            "cta_overhead_s": fa2.cta_overhead_s,
            "masked_block_cost": fa2.masked_block_cost,
        },
        "flashmla": {
            "hbm_share": share,
            "efficiency": one(f.get("mla_efficiency", 1.0)),
            "cta_overhead_s": one(f.get("mla_cta_overhead", 1e-8)),
        },
        "fa3": {"fp8_share": f.get("fp8_share", 1.0)},
    }


def fit(lines: Iterable[Mapping[str, Any]], profile: Any) -> tuple[dict[str, float], list[tuple[Row, float]]]:
    """The fitted figures (keys of :data:`FIGURES`) and every row with its predicted time at them."""
    base = bare(profile)
    found = rows(lines)
    plans = {(r.case, r.choice): _planned(r.case, r.choice, base) for r in found}
    fitted: dict[str, float] = {}

    def loss(name: str, kernels: tuple[str, ...], value: float) -> float:
        at = with_figures(base, {**fitted, name: value})
        keep = SUBSETS.get(name, lambda r: True)
        chosen = [r for r in found if r.kernel in kernels and keep(r)]
        return sum(math.log(predicted(plans[(r.case, r.choice)], r.kernel, at) / r.measured_s) ** 2 for r in chosen)

    for _ in range(2):
        for name, kernels, (lo, hi) in FIGURES:
            if not any(r.kernel in kernels for r in found):
                continue
            x = _golden(lambda x, n=name, k=kernels: loss(n, k, math.exp(x)), math.log(lo), math.log(hi))
            fitted[name] = float(f"{math.exp(x):.4g}")
    at = with_figures(base, fitted)
    return fitted, [(r, predicted(plans[(r.case, r.choice)], r.kernel, at)) for r in found]


def _yaml_value(field: str, value: Any) -> Any:
    """One fitted field as the profile's YAML writes it."""
    if field == "combine_time_s":
        return f"{value[0] * 1e6:.4g} us"
    if isinstance(value, tuple):
        unit = " us" if field.endswith("_s") else ""
        scale = 1e6 if unit else 1.0
        return {d: (f"{v * scale:.4g}{unit}" if unit else float(f"{v:.4g}")) for d, v in value}
    return float(f"{value:.4g}")


#: the YAML key of each field these fits write
KEYS = {
    "hbm_share": "hbm_share",
    "fp8_share": "fp8_share",
    "split_efficiency": "split_efficiency",
    "split_cta_overhead_s": "split_cta_overhead",
    "combine_time_s": "combine_time",
    "efficiency": "efficiency",
    "cta_overhead_s": "cta_overhead",
    "masked_block_cost": "masked_block_cost",
}
NOTES = {
    ("flashinfer", "hbm_share"): "its paged loads' share of memory.hbm.bandwidth, fitted to {hbm_share_rows} "
    "HBM-bound CUDA-core decodes (group 1, d 64)",
    ("flashinfer", "split_efficiency"): "its CUDA-core decode's dot products (one figure, every head dim), fitted "
    "to {split_efficiency_rows} decodes of group 4 at d 128",
    ("flashinfer", "split_cta_overhead"): "its decode's fixed cost per wave, fitted to {split_cta_overhead_rows} "
    "decodes of one request",
    ("flashinfer", "combine_time"): "PersistentVariableLengthMergeStatesKernel's time (one figure), fitted to "
    "{combine_time_rows} merges",
    ("flashinfer", "efficiency"): "its sm90 prefill: fa3's efficiency x {sm90_factor}, the factor fitted to "
    "{sm90_factor_rows} paged chunked prefills",
    ("flashinfer", "cta_overhead"): "its sm90 prefill: fa3's (same design), not fitted here",
    ("flashinfer", "masked_block_cost"): "its sm90 prefill: fa3's (same design), not fitted here",
    ("flashinfer-fa2", "hbm_share"): "FlashInfer's (implementations.flashinfer.hbm_share): the same library's loads",
    ("flashinfer-fa2", "efficiency"): "sdpa-flash's efficiency x {fa2_factor}, the factor fitted to "
    "{fa2_factor_rows} fa2-backend chunked prefills and tensor-core decodes",
    ("flashinfer-fa2", "cta_overhead"): "sdpa-flash's (FlashAttention-2's design), not fitted here",
    ("flashinfer-fa2", "masked_block_cost"): "sdpa-flash's (FlashAttention-2's design), not fitted here",
    ("flashmla", "hbm_share"): "FlashInfer's (implementations.flashinfer.hbm_share): the same library's loads",
    ("flashmla", "efficiency"): "FlashInfer's Hopper MLA decode (one figure), fitted to {mla_efficiency_rows} "
    "absorbed decodes",
    ("flashmla", "cta_overhead"): "FlashInfer's Hopper MLA decode (one figure), fitted to {mla_cta_overhead_rows} "
    "absorbed decodes",
    ("fa3", "fp8_share"): "FlashInfer's fa3-backend fp8 prefill (what the FP8 cases run): its efficiency as a "
    "share of the 16-bit one, fitted to {fp8_share_rows} fp8 prefills",
}


def _counts(found: list[Row]) -> dict[str, int]:
    out = {}
    for name, kernels, _ in FIGURES:
        keep = SUBSETS.get(name, lambda r: True)
        out[f"{name}_rows"] = sum(1 for r in found if r.kernel in kernels and keep(r))
    return out


def apply(data: dict[str, Any], lines: list[Mapping[str, Any]], env: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``data`` (a profile's YAML mapping) with the figures fitted from the probe's ``lines``
    and their source."""
    from ..hardware.parse import parse_profile

    found = rows(lines)
    if not found:
        return data
    profile = parse_profile(data, "<profile being built>")
    fitted, _ = fit(lines, profile)
    words = {**fitted, **_counts(found)}
    implementations = data.setdefault("implementations", {})
    for name, fields in figures_of(bare(profile), fitted).items():
        figures = dict(implementations.get(name) or {})
        for field, value in fields.items():
            if value is None or value == ():  # a figure the design's set does not have
                continue
            key = KEYS[field]
            note = NOTES[(name, key)].format(**words)
            figures[key] = {"value": _yaml_value(field, value), "source": SOURCE, "note": note + ": " + __name__}
        implementations[name] = figures
    env = env or {}
    return cite(data, SOURCE, TITLE, RECORD, COMMAND, env, f", FlashInfer {env.get('flashinfer', '?')}")


def cite(
    data: dict[str, Any],
    source: str,
    title: str,
    record: str,
    command: str,
    env: Mapping[str, Any],
    software: str = "",
    date: str = "2026-12-02",
) -> dict[str, Any]:
    """``data`` with ``sources.<source>``: a measurement on the lent H200 of ``record`` (its
    ``env`` line: the GPU and torch; ``software``: what else ran), made by ``command`` on ``date``."""
    from .sources import put_source

    gpu = env.get("gpu", "GPU")
    return put_source(
        data,
        source,
        title=f"{title}, {gpu} ({record})",
        machine=f"lent {gpu} (nvidia-h200), torch {env.get('torch', '?')}{software}",
        date=date,
        command=command,
    )


# ---------------------------------------------------------------------------------------
# FlexAttention's decoding kernel (``implementations.flex``), from its own probe

#: the flex decode probe (``validation/probes/flex_probe.py``): one factor at a time
FLEX_RECORD = "validation/h200/flex-probe/flex-probe.jsonl.gz"
FLEX_COMMAND = "python3 validation/probes/flex_probe.py flex-probe.jsonl"
FLEX_SOURCE = "measured-flex-decode"
FLEX_PAGED_SOURCE = "measured-flex-paged-decode"


#: the paged flex probe: ``memmodel validate`` of ``validation/cases/h200-flex-paged-probe.txt``
FLEX_PAGED_RECORD = "validation/h200/flex-probe/flex-paged-probe.json.gz"
FLEX_PAGED_COMMAND = (
    "python3 -m memmodel validate --gpu h200 --cases validation/cases/h200-flex-paged-probe.txt "
    "--output flex-paged-probe.json.gz"
)


#: the flex occupancy probe (many CTAs an SM): its paged decodes through the decoding kernel are rows
#: too (``paged-many``): batch 16 to 128, 256 to 1024 CTAs, 1 to 4 an SM
FLEX_OCCUPANCY_RECORD = "validation/h200/flex-occupancy/flex-occupancy-probe.json.gz"
FLEX_OCCUPANCY_COMMAND = (
    "python3 -m memmodel validate --gpu h200 --cases validation/cases/h200-flex-occupancy-probe.txt "
    "--output flex-occupancy-probe.json.gz"
)
FLEX_OCCUPANCY_SOURCE = "measured-flex-occupancy"


def flex_rows(
    lines: Iterable[Mapping[str, Any]], paged: Mapping[str, Any] | None = None, many: Mapping[str, Any] | None = None
) -> list[Row]:
    """The probes' decoding kernels (the template kernel, ``triton_tem_``): the flex probe's
    without a block mask (contiguous, ``no-mask``), the paged probe's record (``paged``) and the
    occupancy probe's paged decodes of a power-of-two group (``many``: ``paged-many``). The
    flex probe's decodes with a full BlockMask over contiguous K/V are not rows: their K tensor is
    one request's keys (every split works), a layout no workload describes."""
    out: list[Row] = []
    for r in lines:
        if r.get("section") != "flex-decode" or not r.get("kernels") or r.get("block_size"):
            continue
        us = [float(k["us"]) for k in r["kernels"] if str(k.get("name", "")).startswith("triton_tem_")]
        if not us:
            continue
        case = (
            f"impl=flex,heads={r['heads']},kv_heads={r['kv_heads']},d={r['d']},n=1,n_kv={r['n_kv']},"
            f"batch={r['batch']},dtype={r['dtype']}"
        )
        out.append(Row(case, "flex_decode", sum(us) * 1e-6, "no-mask"))
    from ..cases import Case

    for c in (paged or {}).get("cases", []):
        timing = c.get("timing") or {}
        us = [float(k["time_s"]) for k in timing.get("profiled_kernels", []) if k["name"].startswith("triton_tem_")]
        if c.get("status") != "ok" or not us:
            continue
        spec = Case.from_dict(c["case"]).spec()
        out.append(Row(spec, "flex_decode", sum(us), "paged"))
    for c in (many or {}).get("cases", []):
        timing = c.get("timing") or {}
        us = [float(k["time_s"]) for k in timing.get("profiled_kernels", []) if k["name"].startswith("triton_tem_")]
        case = Case.from_dict(c["case"])
        group = int(case.workload().group)
        if c.get("status") != "ok" or not us or group & (group - 1):
            continue
        out.append(Row(case.spec(), "flex_decode", sum(us), "paged-many" if c["case"].get("page_size") else "no-mask"))
    return out


def _page(r: Row) -> int:
    return int(r.case.split("page_size=")[1].split(",")[0]) if "page_size=" in r.case else 0


#: (figure, the rows it is fitted to, its search range): a CTA's time a step of 64 keys (pages of
#: 64 and 128, which flex loads as 64) and of 16 beside what its K/V loads add at one CTA's rate
#: (fitted together: d 128's steps load twice d 64's), then the default mask's cost a key
FLEX_FIGURES: tuple[tuple[str, Callable[[Row], bool], tuple[float, float]], ...] = (
    ("step_64", lambda r: r.choice.startswith("paged") and _page(r) >= 64, (1e-8, 1e-4)),
    ("step_16", lambda r: r.choice.startswith("paged") and _page(r) == 16, (1e-8, 1e-4)),
    ("step_bandwidth", lambda r: r.choice.startswith("paged"), (1e8, 1e13)),
    ("co_resident", lambda r: r.choice.startswith("paged"), (1e-4, 4.0)),
    ("contiguous_share", lambda r: r.choice == "no-mask", (0.05, 2.0)),
    ("mask_key_time", lambda r: r.choice == "no-mask", (1e-12, 1e-6)),
)
#: the figures fitted together (in turns, each on its rows, until they settle), before the rest
FLEX_JOINT = ("step_64", "step_16", "step_bandwidth", "co_resident")
#: then, with those held, the contiguous decodes' two, together in turns the same way
FLEX_CONTIGUOUS = ("contiguous_share", "mask_key_time")
FLEX_ROUNDS = 8


def _flex_figures(f: Mapping[str, float]) -> dict[str, Any]:
    out = {
        "block_step_time_s": ((16, f.get("step_16", 1e-6)), (64, f.get("step_64", 1e-6))),
        "mask_key_time_s": f.get("mask_key_time", 1e-12),
    }
    if "step_bandwidth" in f:
        out["cta_bandwidth_bytes_per_s"] = ((1, f["step_bandwidth"]),)
    if "co_resident" in f:
        out["co_resident_cost"] = f["co_resident"]
    if "contiguous_share" in f:
        out["contiguous_step_share"] = f["contiguous_share"]
    return out


def fit_flex(
    lines: Iterable[Mapping[str, Any]],
    profile: Any,
    paged: Mapping[str, Any] | None = None,
    many: Mapping[str, Any] | None = None,
) -> tuple[dict[str, float], list[tuple[Row, float]]]:
    """``implementations.flex``'s decode figures (keys of :data:`FLEX_FIGURES`) and every row
    with its predicted time at them (the profile's flex figures removed first). The step times
    and the per-CTA rate (:data:`FLEX_JOINT`) are fitted in turns, least squares on the log
    ratio, starting from the rate's top (loads free); then the mask's cost a key."""
    base = dataclasses.replace(
        profile, implementation_figures={k: v for k, v in profile.implementation_figures.items() if k != "flex"}
    )
    found = flex_rows(lines, paged, many)
    plans = {r.case: _planned(r.case, "", base) for r in found}
    fitted: dict[str, float] = {}

    def at(values: Mapping[str, float]) -> Any:
        return base.with_implementation_figures("flex", **_flex_figures(values))

    def loss(name: str, keep: Callable[[Row], bool], value: float) -> float:
        p = at({**fitted, name: value})
        chosen = [r for r in found if keep(r)]
        return sum(math.log(predicted(plans[r.case], r.kernel, p) / r.measured_s) ** 2 for r in chosen)

    def fit(name: str, keep: Callable[[Row], bool], lo: float, hi: float) -> None:
        x = _golden(lambda x, n=name, k=keep: loss(n, k, math.exp(x)), math.log(lo), math.log(hi))
        fitted[name] = float(f"{math.exp(x):.4g}")

    joint = [f for f in FLEX_FIGURES if f[0] in FLEX_JOINT and any(f[1](r) for r in found)]
    if joint:
        fitted["step_bandwidth"] = next(hi for name, _, (_, hi) in FLEX_FIGURES if name == "step_bandwidth")
        fitted["co_resident"] = next(lo for name, _, (lo, _) in FLEX_FIGURES if name == "co_resident")
        for _ in range(FLEX_ROUNDS):
            for name, keep, (lo, hi) in joint:
                fit(name, keep, lo, hi)
    second = [f for f in FLEX_FIGURES if f[0] in FLEX_CONTIGUOUS and any(f[1](r) for r in found)]
    if second:
        fitted["contiguous_share"] = 1.0  # the paged step's, to start
        for _ in range(FLEX_ROUNDS):
            for name, keep, (lo, hi) in second:
                fit(name, keep, lo, hi)
    for name, keep, (lo, hi) in FLEX_FIGURES:
        if name not in FLEX_JOINT + FLEX_CONTIGUOUS and any(keep(r) for r in found):
            fit(name, keep, lo, hi)
    p = at(fitted)
    return fitted, [(r, predicted(plans[r.case], r.kernel, p)) for r in found]


def apply_flex(
    data: dict[str, Any],
    lines: list[Mapping[str, Any]],
    paged: Mapping[str, Any] | None = None,
    many: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``data`` with ``implementations.flex.block_step_time``, ``cta_bandwidth``,
    ``co_resident_cost`` and ``mask_key_time`` fitted from the flex probe's ``lines``, the paged
    probe's record ``paged`` and the occupancy probe's ``many``, and their sources."""
    from ..hardware.parse import parse_profile

    found = flex_rows(lines, paged, many)
    if not found:
        return data
    fitted, _ = fit_flex(lines, parse_profile(data, "<profile being built>"), paged, many)
    env = next((r for r in lines if r.get("section") == "env"), {})
    counts = {name: sum(1 for r in found if keep(r)) for name, keep, _ in FLEX_FIGURES}
    figures = dict((data.get("implementations") or {}).get("flex") or {})
    figures.pop("block_cta_bandwidth", None)
    if "step_64" in fitted:
        figures["block_step_time"] = {
            "value": {16: f"{fitted['step_16'] * 1e9:.4g} ns", 64: f"{fitted['step_64'] * 1e9:.4g} ns"},
            "source": FLEX_PAGED_SOURCE,
            "note": "what one CTA of flex's decoding kernel takes a K/V block step (BLOCK_N: the page where paged, "
            "at most 64) beside its loads (cta_bandwidth); fitted with it to "
            f"{counts['step_64']} paged decodes with pages of 64 and 128 and {counts['step_16']} of 16 (batch 1-128, "
            f"d 64 and 128, pools of two and eight times the batch's pages): {__name__}",
        }
        if "co_resident" in fitted:
            figures["co_resident_cost"] = {
                "value": fitted["co_resident"],
                "source": FLEX_OCCUPANCY_SOURCE,
                "note": "the extra share of a decoding step's time each further CTA on the busiest SM of a wave adds "
                "(the kernel holds 4 to 10 CTAs an SM: memmodel.traffic.paged.flex_decode_ctas_per_sm); fitted with "
                f"block_step_time to the {counts['co_resident']} paged decodes, batch 1-128 (256-1024 CTAs): "
                f"{__name__}",
            }
        if "step_bandwidth" in fitted:
            figures["cta_bandwidth"] = {
                "value": f"{fitted['step_bandwidth'] / 1e9:.4g} GB/s",
                "source": FLEX_PAGED_SOURCE,
                "note": "the rate one CTA of flex's decoding kernel loads a step's K/V rows at (2 x BLOCK_N rows of "
                "d x e bytes), beside the block's step time; one figure for every head dim, fitted with "
                f"block_step_time to the {counts['step_bandwidth']} paged decodes (d 128's steps take longer "
                f"than d 64's at pages of 64 and more): {__name__}",
            }
    if "contiguous_share" in fitted:
        figures["contiguous_step_share"] = {
            "value": fitted["contiguous_share"],
            "source": FLEX_SOURCE,
            "note": "the share of the block's step time a step of flex's decoding kernel takes over contiguous K/V (no "
            "page table to read first); fitted with mask_key_time, in turns, to "
            f"{counts['contiguous_share']} decodes without a mask (d 64 and 128, batch 1-128, 2k-32k keys): {__name__}",
        }
    figures["mask_key_time"] = {
        "value": f"{fitted['mask_key_time'] * 1e9:.4g} ns",
        "source": FLEX_SOURCE,
        "note": "what a CTA of flex's decoding kernel spends a key building the default block mask (flex_attention "
        f"called without one), each wave, beside its steps; fitted to {counts['mask_key_time']} decodes without a "
        f"mask (batch 1-128, 2k-32k keys): {__name__}",
    }
    data.setdefault("implementations", {})["flex"] = figures
    data = cite(data, FLEX_SOURCE, "memmodel FlexAttention decode probe", FLEX_RECORD, FLEX_COMMAND, env)
    if "step_64" in fitted and paged is not None:
        paged_env = {"gpu": paged.get("device", "GPU"), "torch": env.get("torch", "?")}
        title = "memmodel FlexAttention paged decode probe"
        data = cite(data, FLEX_PAGED_SOURCE, title, FLEX_PAGED_RECORD, FLEX_PAGED_COMMAND, paged_env)
    if "co_resident" in fitted and many is not None:
        many_env = {"gpu": many.get("device", "GPU"), "torch": env.get("torch", "?")}
        title = "memmodel FlexAttention occupancy probe"
        record, command = FLEX_OCCUPANCY_RECORD, FLEX_OCCUPANCY_COMMAND
        data = cite(data, FLEX_OCCUPANCY_SOURCE, title, record, command, many_env, date="2026-12-04")
    return data
