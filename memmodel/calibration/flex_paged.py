"""``implementations.flex.paged_step_cost``: what a FlexAttention prefill step costs more when it reads
K/V through a page table.

Over a paged cache (PyTorch's ``PagedAttention``: the BlockMask's K/V block is the page) flex's
forward template takes BLOCK_N no larger than the page, and every step gathers its keys through the
page table. A probe (``validation/cases/h200-flex-paged-prefill-probe.txt``, record :data:`RECORD`;
predictions committed first) measured chunked prefills of Llama 3 8B's heads over paged caches of
16, 64 and 128 tokens a page and over the same caches contiguous: pages of 64 and 128 run a few
percent above the contiguous kernel, pages of 16 nearly twice it (eight times the steps, each too
small to hide its loads). The figure is the extra cost of a step, in plain steps, by the K/V block
a step loads, each fitted to that page size's kernels (the squared logarithm of predicted over
measured kernel time, least), the other figures of the profile as built.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

RECORD = "validation/h200/flex-probe/flex-paged-prefill-probe.json.gz"
COMMAND = (
    "python3 -m memmodel validate --gpu h200 --no-host-probe --cases "
    "validation/cases/h200-flex-paged-prefill-probe.txt --output flex-paged-prefill-probe.json"
)
SOURCE = "measured-flex-paged-prefill"
#: the search range of a step's extra cost, in plain steps
RANGE = (1e-3, 8.0)


def rows(record: Mapping[str, Any]) -> list[tuple[str, int, float]]:
    """(case spec, the K/V block its steps load, the template kernel's measured seconds) of the
    record's paged prefills."""
    from ..cases import Case
    from ..traffic.paged import flex_block_n, flex_forward_tiles

    out = []
    for c in record.get("cases", []):
        timing = c.get("timing") or {}
        tem = [k for k in timing.get("profiled_kernels", []) if str(k.get("name", "")).startswith("triton_tem_")]
        if c.get("status") != "ok" or not tem or not c["case"].get("page_size"):
            continue
        case = Case.from_dict(c["case"])
        w = case.workload()
        block = int(flex_block_n(w, flex_forward_tiles(w.dtype, w.d)[1]))
        out.append((case.spec(), block, float(tem[0]["time_s"])))
    return out


def fit(record: Mapping[str, Any], profile: Any) -> dict[int, float]:
    """``{K/V block: extra cost}``, each block's fitted to its own kernels, the others held."""
    return fit_by_block(rows(record), profile, "paged_step_cost", 0.0, RANGE)


def fit_by_block(
    found: list[tuple[str, int, float]], profile: Any, field: str, start: float, bounds: tuple[float, float]
) -> dict[int, float]:
    """``implementations.flex``'s curve ``field`` by the K/V block a step loads, ``{block: value}``:
    each block's value fitted to its own rows (case spec, block, the template kernel's measured
    seconds; the squared logarithm of predicted over measured, least, searched in ``bounds``), the
    other blocks' held, twice round from ``start``; the profile's other figures as given."""
    from .flex_prefill import _planned
    from .serving import _golden, predicted

    if not found:
        return {}
    base = profile.with_implementation_figures("flex", **{field: ()})
    plans = {spec: _planned(spec, base) for spec, _, _ in found}
    fitted = {block: start for _, block, _ in found}

    def loss(block: int, value: float) -> float:
        curve = tuple(sorted({**fitted, block: value}.items()))
        p = base.with_implementation_figures("flex", **{field: curve})
        return sum(math.log(predicted(plans[s], "flex_attention", p) / m) ** 2 for s, b, m in found if b == block)

    for _ in range(2):
        for block in sorted(fitted):
            x = _golden(lambda x, b=block: loss(b, math.exp(x)), math.log(bounds[0]), math.log(bounds[1]))
            fitted[block] = float(f"{math.exp(x):.4g}")
    return fitted


def apply(data: dict[str, Any], record: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` (a profile's YAML mapping) with ``implementations.flex.paged_step_cost`` fitted
    from ``record`` and its source."""
    from ..hardware.parse import parse_profile
    from .serving import cite

    fitted = fit(record, parse_profile(data, "<profile being built>"))
    if not fitted:
        return data
    counts = {b: sum(1 for _, block, _ in rows(record) if block == b) for b in fitted}
    flex = (data.setdefault("implementations", {})).setdefault("flex", {})
    flex["paged_step_cost"] = {
        "value": dict(sorted(fitted.items())),
        "source": SOURCE,
        "note": "the extra cost of a forward step through the page table, in plain steps, by the K/V block it loads "
        f"(kernels: {', '.join(f'{b}: {n}' for b, n in sorted(counts.items()))}), fitted to flex's paged chunked "
        f"prefills against the same caches contiguous: {__name__}",
    }
    env = {"gpu": str(record.get("device") or "NVIDIA H200"), "torch": "2.11.0+cu130"}
    return cite(data, SOURCE, "memmodel FlexAttention paged-prefill probe", RECORD, COMMAND, env, date="2026-12-04")
