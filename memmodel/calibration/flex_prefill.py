"""FlexAttention's prefill figures (``implementations.flex``), fitted to its own reference shapes.

flex's forward and backward templates (:mod:`memmodel.traffic.flex`) are Triton kernels of their own
design: until measured they were timed with memmodel's Triton kernel's forward figures and none for
the backward. The reference record (:data:`RECORD`, ``memmodel validate`` of
``validation/cases/h200-flex-ref.txt``: training steps without a block mask and under a causal one,
bf16, d 64 and 128, no window and no document mask) gives each kernel's time by the profiler; this
module fits, by the model itself:

* ``efficiency`` and ``backward_efficiency`` by head dim: the share of the bf16 product peak the
  templates reach, from the shapes without a mask (8 × 16 heads × 2048 tokens, 1 × 16 × 16k);
* ``cta_overhead`` and ``backward_cta_overhead`` (one figure each, every head dim): what a CTA costs
  beyond its steps, per CTA slot, from the short rows (32 × 16 heads × 512 tokens);
* ``masked_block_cost`` and ``backward_masked_block_cost`` by head dim: the extra cost of a step
  over a partial block (the ``mask_mod`` applied element by element), in plain steps, from the causal
  shapes at that head dim (one figure for both head dims, as first fitted, priced d = 64's partial
  blocks at about twice their cost: gpt-oss's 128-key windows, every step partial, came out half
  again slow in ``h200-variants-final``; docs/variants.md).

Each fit minimises the squared logarithm of predicted over measured kernel time (the model's time
less its launch term), one figure at a time by golden-section search on its logarithm
(:func:`memmodel.calibration.serving._golden`), the figures in turn, three times, from a profile
without any of them. The sliding-window and document masks are left to the checks.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any

#: the reference records and the commands that made them: the first shapes, then lengths that are
#: not multiples of 128 and the backward's GQA groups (``validation/cases/h200-flex-ref-2.txt``)
RECORD = "validation/h200/flex-probe/flex-prefill-ref.json.gz"
RECORD_2 = "validation/h200/flex-probe/flex-ref-2.json.gz"
COMMAND = (
    "python3 -m memmodel validate --gpu h200 --no-host-probe --cases validation/cases/h200-flex-ref.txt "
    "--output flex-prefill-ref.json.gz; the same with --cases validation/cases/h200-flex-ref-2.txt --ncu "
    "--output flex-ref-2.json.gz"
)
SOURCE = "measured-flex-prefill"
TITLE = "memmodel FlexAttention prefill reference shapes (its forward and backward templates)"
#: the fitted head dims (the reference shapes')
HEAD_DIMS = (64, 128)
#: the model's kernels and the profiler's names, in launch order within a training step
FORWARD, DELTA, BACKWARD = "flex_attention", "flex_bwd_delta", "flex_attention_backward"


@dataclasses.dataclass(frozen=True)
class Row:
    """One kernel of one reference case: the case's line, the model's kernel and its measured time."""

    case: str
    kernel: str
    measured_s: float
    d: int
    causal: bool
    short: bool
    #: lengths not multiples of 128 (flex's IS_DIVISIBLE false: every step bounds-checked)
    checked: bool = False
    #: the share of its head's blocks that are partial (causal: the diagonal's)
    partial_share: float = 0.0


def rows(record: Mapping[str, Any]) -> list[Row]:
    """The record's template kernels (``triton_tem_``: the forward first, then the backward)."""
    from ..cases import Case
    from ..traffic.flexmask import block_counts

    out: list[Row] = []
    for c in record.get("cases", []):
        timing = c.get("timing") or {}
        tem = [k for k in timing.get("profiled_kernels", []) if str(k.get("name", "")).startswith("triton_tem_")]
        if c.get("status") != "ok" or not tem:
            continue
        case = Case.from_dict(c["case"])
        spec = case.spec()
        short = case.n <= 512
        checked = case.n % 128 != 0 or case.n_kv_ % 128 != 0
        bc = block_counts(case.n, case.n_kv_, bool(case.causal), case.window, case.seq_lens)
        share = bc.partial / max(bc.visited, 1) if case.causal else 0.0
        args = (case.d, case.causal, short, checked, share)
        out.append(Row(spec, FORWARD, float(tem[0]["time_s"]), *args))
        if case.backward and len(tem) > 1:
            out.append(Row(spec, BACKWARD, float(tem[-1]["time_s"]), *args))
    return out


def merged(first: Mapping[str, Any], second: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One record of the reference cases: the first record's, and of the second's (``h200-flex-ref-2.txt``)
    those its header gives the time figures, the lengths that are not multiples of 128 (its other
    rows probe the backward's HBM bytes, not fitted here)."""
    out = dict(first)
    extra = []
    for c in (second or {}).get("cases", []):
        n, n_kv = int(c["case"]["n"]), int(c["case"].get("n_kv") or c["case"]["n"])
        if n % 128 or n_kv % 128:
            extra.append(c)
    out["cases"] = [*first.get("cases", []), *extra]
    return out


def load(root: Any) -> dict[str, Any] | None:
    """The reference records under ``root`` (a repository path), merged; None without the first."""
    import gzip
    import json
    from pathlib import Path

    first, second = Path(root) / RECORD, Path(root) / RECORD_2
    if not first.exists():
        return None
    read = lambda p: json.load(gzip.open(p, "rt"))  # noqa: E731
    return merged(read(first), read(second) if second.exists() else None)


def _planned(spec: str, profile: Any) -> Any:
    """A case's ledger and how it is timed (:class:`memmodel.calibration.serving._Planned`),
    with its training step's backward."""
    from ..cases import parse_case
    from ..options import options_for
    from ..plan import plan_tiled, planned_traffic
    from .serving import _Planned

    case = parse_case(spec)
    w = case.workload()
    plan = plan_tiled(w, profile, options_for("flex", w, profile, backward=case.backward))
    return _Planned(planned_traffic(plan), w.dtype, plan.implementation, plan.exec_d, plan.workload)


def _plain(r: Row) -> bool:
    return not r.causal and not r.short and not r.checked


def _checked_row(r: Row) -> bool:
    return r.checked and not r.causal


def _masked_row(r: Row) -> bool:
    return r.causal and not r.checked


def _per_dim(
    name: str, kernel: str, keep: Callable[[Row], bool], bounds: tuple[float, float]
) -> tuple[tuple[str, Callable[[Row], bool], tuple[float, float]], ...]:
    """One figure per fitted head dim (``name_64``, ``name_128``): ``kernel``'s rows at that head dim that ``keep`` takes."""
    return tuple((f"{name}_{d}", lambda r, d=d: r.kernel == kernel and r.d == d and keep(r), bounds) for d in HEAD_DIMS)


#: (figure, the rows it is fitted to, its search range), fitted in this order
FIGURES: tuple[tuple[str, Callable[[Row], bool], tuple[float, float]], ...] = (
    *_per_dim("efficiency", FORWARD, _plain, (0.1, 1.5)),
    *_per_dim("backward_efficiency", BACKWARD, _plain, (0.05, 1.5)),
    *_per_dim("checked_step_cost", FORWARD, _checked_row, (1e-3, 4.0)),
    *_per_dim("backward_checked_step_cost", BACKWARD, _checked_row, (1e-3, 4.0)),
    ("cta_overhead", lambda r: r.kernel == FORWARD and r.short, (1e-8, 3e-5)),
    ("backward_cta_overhead", lambda r: r.kernel == BACKWARD and r.short, (1e-8, 6e-5)),
    *_per_dim("masked_block_cost", FORWARD, _masked_row, (1e-3, 4.0)),
    *_per_dim("backward_masked_block_cost", BACKWARD, _masked_row, (1e-3, 4.0)),
)


#: the extra costs fitted by head dim (in plain steps; unfitted, next to nothing)
COSTS = ("masked_block_cost", "backward_masked_block_cost", "checked_step_cost", "backward_checked_step_cost")


def figures_of(f: Mapping[str, float]) -> dict[str, Any]:
    """:class:`~memmodel.hardware.profile.ImplementationFigures` fields of the fitted figures ``f``."""
    curve = lambda name, unset=1.0: tuple((d, f.get(f"{name}_{d}", unset)) for d in HEAD_DIMS)  # noqa: E731
    one = lambda v: ((1, v),)  # noqa: E731  (one figure for every head dim)
    return {
        "efficiency": curve("efficiency"),
        "backward_efficiency": curve("backward_efficiency"),
        "cta_overhead_s": one(f.get("cta_overhead", 1e-8)),
        "backward_cta_overhead_s": one(f.get("backward_cta_overhead", 1e-8)),
        **{name: curve(name, 1e-3) for name in COSTS},
    }


def bare(profile: Any) -> Any:
    """``profile`` with flex's prefill figures removed (its decode figures kept)."""
    cleared = {k: () for k in figures_of({})}
    return profile.with_implementation_figures("flex", **cleared)


def fit(record: Mapping[str, Any], profile: Any) -> tuple[dict[str, float], list[tuple[Row, float]]]:
    """The fitted figures (keys of :data:`FIGURES`) and every row with its predicted time at them."""
    from .serving import _golden, predicted

    base = bare(profile)
    found = rows(record)
    plans = {r.case: _planned(r.case, base) for r in found}
    fitted: dict[str, float] = {}

    def at(values: Mapping[str, float]) -> Any:
        return base.with_implementation_figures("flex", **figures_of(values))

    def loss(name: str, keep: Callable[[Row], bool], value: float) -> float:
        p = at({**fitted, name: value})
        return sum(math.log(predicted(plans[r.case], r.kernel, p) / r.measured_s) ** 2 for r in found if keep(r))

    for _ in range(3):
        for name, keep, (lo, hi) in FIGURES:
            if any(keep(r) for r in found):
                x = _golden(lambda x, n=name, k=keep: loss(n, k, math.exp(x)), math.log(lo), math.log(hi))
                fitted[name] = float(f"{math.exp(x):.4g}")
    p = at(fitted)
    return fitted, [(r, predicted(plans[r.case], r.kernel, p)) for r in found]


def apply(data: dict[str, Any], record: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` (a profile's YAML) with ``implementations.flex``'s prefill figures fitted from the
    reference ``record``, each with its note, and the record cited."""
    from ..hardware.parse import parse_profile
    from .serving import cite

    found = rows(record)
    if not found:
        return data
    fitted, _ = fit(record, parse_profile(data, "<profile being built>"))
    counts = {name: sum(1 for r in found if keep(r)) for name, keep, _ in FIGURES}
    figures = dict((data.get("implementations") or {}).get("flex") or {})
    where = f"fitted to flex's reference shapes (validation/cases/h200-flex-ref.txt, -ref-2.txt): {__name__}"

    def put(field: str, value: Any, what: str, name: str) -> None:
        if name.endswith("_64"):  # a figure by head dim: its kernels at each
            stem = name[: -len("_64")]
            n = ", ".join(f"d {d}: {counts[f'{stem}_{d}']}" for d in HEAD_DIMS if f"{stem}_{d}" in counts)
        else:
            n = str(counts[name])
        figures[field] = {"value": value, "source": SOURCE, "note": f"{what}; kernels ({n}), {where}"}

    put(
        "efficiency",
        {d: fitted[f"efficiency_{d}"] for d in HEAD_DIMS if f"efficiency_{d}" in fitted},
        "the share of the product peak flex's forward template reaches (no block mask)",
        "efficiency_64",
    )
    put(
        "backward_efficiency",
        {d: fitted[f"backward_efficiency_{d}"] for d in HEAD_DIMS if f"backward_efficiency_{d}" in fitted},
        "the share of the product peak flex's backward template reaches (no block mask)",
        "backward_efficiency_64",
    )
    put(
        "cta_overhead",
        {1: f"{fitted['cta_overhead'] * 1e6:.4g} us"},
        "what a forward CTA costs beyond its steps, per CTA slot",
        "cta_overhead",
    )
    put(
        "backward_cta_overhead",
        {1: f"{fitted['backward_cta_overhead'] * 1e6:.4g} us"},
        "what a backward CTA costs beyond its steps, per CTA slot",
        "backward_cta_overhead",
    )
    put(
        "masked_block_cost",
        {d: fitted[f"masked_block_cost_{d}"] for d in HEAD_DIMS if f"masked_block_cost_{d}" in fitted},
        "the extra cost of a forward step over a partial block (its mask_mod element by element), in plain steps, by head dim",
        "masked_block_cost_64",
    )
    put(
        "backward_masked_block_cost",
        {
            d: fitted[f"backward_masked_block_cost_{d}"]
            for d in HEAD_DIMS
            if f"backward_masked_block_cost_{d}" in fitted
        },
        "the extra cost of a backward step over a partial block, in plain steps, by head dim",
        "backward_masked_block_cost_64",
    )
    put(
        "checked_step_cost",
        {d: fitted[f"checked_step_cost_{d}"] for d in HEAD_DIMS if f"checked_step_cost_{d}" in fitted},
        "the extra cost of every forward step where a length is not a multiple of 128 (IS_DIVISIBLE false: loads "
        "and steps bounds-checked), in plain steps, by head dim",
        "checked_step_cost_64",
    )
    put(
        "backward_checked_step_cost",
        {
            d: fitted[f"backward_checked_step_cost_{d}"]
            for d in HEAD_DIMS
            if f"backward_checked_step_cost_{d}" in fitted
        },
        "the same for every backward step, by head dim",
        "backward_checked_step_cost_64",
    )
    data.setdefault("implementations", {})["flex"] = figures
    env = {"gpu": record.get("device", "GPU"), "torch": (record.get("environment") or {}).get("torch", "?")}
    return cite(data, SOURCE, TITLE, RECORD, COMMAND, env, date="2026-12-03")
