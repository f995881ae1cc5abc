"""``implementations.flex.template_step_time``: how long one CTA of FlexAttention's forward template
takes a step when its Q tile holds a decode's one query row over a paged cache.

A decode whose GQA group is not a power of two runs flex's forward template, not its decoding kernel
(``_use_flex_decoding``): one CTA per (request, query head), its 128-row Q tile holding one query, and
over a paged cache every BlockMask block is partial (the query sits in a 128-row block of one row),
so each step applies the converted ``mask_mod`` (its page lookup) element by element. A probe
(``validation/cases/h200-flex-occupancy-probe.txt``, record :data:`RECORD`; predictions committed
first) measured such decodes of 24 query heads on 8 at d 64 and 128 over pages of 16 to 128: a CTA
takes about the same time a step at either head dim, growing with the keys a step loads (0.9 us at
16 keys, 2.6 us at 64, 5 us at 128), far above its products' share of the SM. The figure is that
latency, by the K/V block a step loads, each block's fitted to its own kernels (the squared logarithm
of predicted over measured kernel time, least), the other figures of the profile as built.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .serving import FLEX_OCCUPANCY_COMMAND as COMMAND
from .serving import FLEX_OCCUPANCY_RECORD as RECORD
from .serving import FLEX_OCCUPANCY_SOURCE as SOURCE

#: the search range of a step's time, seconds
RANGE = (1e-8, 1e-4)


def rows(record: Mapping[str, Any]) -> list[tuple[str, int, float]]:
    """(case spec, the K/V block its steps load, the template kernel's measured seconds) of the
    record's paged decodes that run the forward template (a group not a power of two)."""
    from ..cases import Case
    from ..traffic.paged import FLEX_SPARSE_BLOCK, flex_block_n, flex_forward_tiles, is_power_of_two

    out = []
    for c in record.get("cases", []):
        timing = c.get("timing") or {}
        tem = [k for k in timing.get("profiled_kernels", []) if str(k.get("name", "")).startswith("triton_tem_")]
        if c.get("status") != "ok" or not tem or not c["case"].get("page_size"):
            continue
        case = Case.from_dict(c["case"])
        w = case.workload()
        if is_power_of_two(int(w.group)) or int(w.n) >= FLEX_SPARSE_BLOCK:
            continue
        block = int(flex_block_n(w, flex_forward_tiles(w.dtype, w.d)[1]))
        out.append((case.spec(), block, float(tem[0]["time_s"])))
    return out


def fit(record: Mapping[str, Any], profile: Any) -> dict[int, float]:
    """``{K/V block: seconds a step}``, each block's fitted to its own kernels, the others held
    (:func:`.flex_paged.fit_by_block`)."""
    from .flex_paged import fit_by_block

    return fit_by_block(rows(record), profile, "template_step_time_s", 1e-6, RANGE)


def apply(data: dict[str, Any], record: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` (a profile's YAML mapping) with ``implementations.flex.template_step_time`` fitted
    from ``record`` and its source."""
    from ..hardware.parse import parse_profile
    from .serving import cite

    fitted = fit(record, parse_profile(data, "<profile being built>"))
    if not fitted:
        return data
    counts = {b: sum(1 for _, block, _ in rows(record) if block == b) for b in fitted}
    flex = (data.setdefault("implementations", {})).setdefault("flex", {})
    flex["template_step_time"] = {
        "value": {b: f"{v * 1e9:.4g} ns" for b, v in sorted(fitted.items())},
        "source": SOURCE,
        "note": "what one CTA of flex's forward template takes a step when its Q tile holds a decode's one query "
        "over a paged cache (every block partial), by the K/V block it loads, a floor under its products "
        f"(kernels: {', '.join(f'{b}: {n}' for b, n in sorted(counts.items()))}; groups of 3, d 64 and 128): "
        f"{__name__}",
    }
    env = {"gpu": str(record.get("device") or "NVIDIA H200"), "torch": "2.11.0+cu130"}
    return cite(data, SOURCE, "memmodel FlexAttention occupancy probe", RECORD, COMMAND, env, date="2026-12-04")
