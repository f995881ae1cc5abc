"""``implementations.sdpa-cudnn.cta_bandwidth`` and ``split_cta_overhead``: cuDNN's decode kernel's rate.

PyTorch's cuDNN SDPA at one query token runs an sm80 ``flash_fprop_wmma`` kernel on Hopper, one CTA
per (split, K/V head, request), on cuDNN's own grid (:func:`memmodel.traffic.decode.cudnn_decode_splits`;
at one split the same kernel writes O itself). The calibration's decoding references fitted its
per-CTA rate at two CTAs an SM over K/V the warm L2 held, where the aggregate, not the CTA, binds: one
request over one or two K/V heads then came out up to 2.7 times too slow. Two probes, their shapes and
predictions committed first, measured the kernel with the profiler (CUPTI durations, the warm timing
loop of ``memmodel validate``):

* ``validation/h200/cudnn-decode-rate-probe/``: K/V far past the L2, grids of 64, 128 and 256 CTAs,
  d 64, 128 and 256, and unsplit grids;
* ``validation/h200/cudnn-decode-probe/``: the earlier grid probe, shorter K/V (the L2 holds it).

At each head dim the two figures are those that make the model's split kernel (less its launch) fit
every probe decode's kernel duration: the least squared logarithm of predicted over measured, a
per-CTA rate (its loads waiting on each other: one CTA streams its share of K/V no faster) beside the
profile's HBM bound, and a fixed cost a wave of CTAs pays. With one CTA an SM the rate binds; with two
the HBM does (a d 128 or d 64 grid of 256 CTAs streams at the HBM rate measured by calibrate).
"""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

IMPL = "sdpa-cudnn"
RECORDS = (
    "validation/h200/cudnn-decode-rate-probe/cudnn-decode-rate-probe.json.gz",
    "validation/h200/cudnn-decode-probe/cudnn-decode-probe.json.gz",
)
COMMAND = (
    "python3 -m memmodel validate --gpu h200 --ncu --no-host-probe --cases "
    "validation/cases/h200-cudnn-decode-rate-probe.txt --output cudnn-decode-rate-probe.json.gz "
    "(and --cases validation/cases/h200-cudnn-decode-probe.txt)"
)
SOURCE = "measured-cudnn-decode"
TITLE = "memmodel cuDNN decode probes (its split-KV decode kernel's CUPTI durations by grid and length)"
#: the model's kernel the probes' decode kernel is (unsplit too: traffic.decode.split_kv_kernels, direct)
KERNEL = "fa2_splitkv"
#: the search range of the rate (bytes a second, one CTA)
RATE_RANGE = (2e9, 400e9)
#: the largest fixed cost tried (seconds a wave)
OVERHEAD_MAX = 10e-6


def load(root: Path) -> list[dict[str, Any]]:
    """The probes' records (those present)."""
    return [json.load(gzip.open(root / r, "rt")) for r in RECORDS if (root / r).exists()]


def rows(records: Iterable[Mapping[str, Any]]) -> list[tuple[str, int, float]]:
    """(case spec, head dim, the decode kernel's CUPTI seconds) of each cuDNN decode the records
    timed: the one kernel of a call that is neither the combine nor a memset."""
    from ..cases import Case

    out = []
    for record in records:
        for c in record.get("cases", []):
            case = c.get("case") or {}
            if c.get("status") != "ok" or case.get("impl") != IMPL or case.get("n") != 1:
                continue
            kernels = [
                k
                for k in (c.get("timing") or {}).get("profiled_kernels", [])
                if "fprop" in str(k.get("name")) and k.get("time_s")
            ]
            if len(kernels) != 1:
                continue
            out.append((Case.from_dict(case).spec(), int(case["d"]), float(kernels[0]["time_s"])))
    return out


def _fit_one(loss: Callable[[float, float], float]) -> tuple[float, float]:
    """(rate, fixed cost) least in ``loss(log rate, cost)``: the best rate at each cost tried, the
    cost by golden-section search over those bests."""
    from .serving import _golden

    best: dict[float, float] = {}

    def rate_at(cost: float) -> float:
        if cost not in best:
            best[cost] = _golden(
                lambda x: loss(x, cost), math.log(RATE_RANGE[0]), math.log(RATE_RANGE[1]), steps=16, scan=17
            )
        return best[cost]

    cost = float(f"{_golden(lambda c: loss(rate_at(c), c), 0.0, OVERHEAD_MAX, steps=12, scan=9):.3g}")
    return float(f"{math.exp(rate_at(cost)):.4g}"), cost


def fit(
    records: Iterable[Mapping[str, Any]], profile: Any
) -> tuple[dict[int, float], dict[int, float], list[tuple[str, float, float]]]:
    """The rate and the fixed cost by head dim, and each decode's (spec, predicted, measured)
    kernel seconds with them; empty where the records hold no decode."""
    from .serving import _planned, predicted

    found = rows(records)
    if not found:
        return {}, {}, []
    plans = {spec: _planned(spec, "", profile) for spec, _, _ in found}
    rates: dict[int, float] = {}
    costs: dict[int, float] = {}

    def at(rate: Mapping[int, float], cost: Mapping[int, float]) -> Any:
        return profile.with_implementation_figures(
            IMPL,
            cta_bandwidth_bytes_per_s=tuple(sorted(rate.items())),
            split_cta_overhead_s=tuple(sorted(cost.items())),
        )

    for d in sorted({d for _, d, _ in found}):
        mine = [(s, m) for s, dd, m in found if dd == d]

        def loss(x: float, cost: float, mine: list = mine, d: int = d) -> float:
            p = at({**rates, d: math.exp(x)}, {**costs, d: cost})
            return sum(math.log(predicted(plans[s], KERNEL, p) / m) ** 2 for s, m in mine)

        rates[d], costs[d] = _fit_one(loss)
    p = at(rates, costs)
    return rates, costs, [(s, predicted(plans[s], KERNEL, p), m) for s, _, m in found]


def apply(data: dict[str, Any], records: list[Mapping[str, Any]]) -> dict[str, Any]:
    """``data`` (a profile's YAML mapping) with the two figures fitted from ``records`` and their source."""
    from ..hardware.parse import parse_profile
    from .serving import cite

    rates, costs, checked = fit(records, parse_profile(data, "<profile being built>"))
    if not rates:
        return data
    n = len(checked)
    worst = max(abs(p / m - 1.0) for _, p, m in checked)
    how = (
        f"fitted jointly with the other figure at each head dim to the split kernel's CUPTI durations of {n} cuDNN "
        f"decodes (least squared log error, the kernel's launch aside; largest miss {worst:.0%}): {__name__}"
    )
    figures = (data.setdefault("implementations", {})).setdefault(IMPL, {})
    figures["cta_bandwidth"] = {
        "value": {d: f"{v / 1e9:.4g} GB/s" for d, v in sorted(rates.items())},
        "source": SOURCE,
        "note": "per CTA of cuDNN's decode kernel (its grid: traffic.decode.cudnn_decode_splits), the bytes of K/V it "
        "streams a second beside the HBM bound; " + how,
    }
    figures["split_cta_overhead"] = {
        "value": {d: f"{v * 1e6:.4g} us" for d, v in sorted(costs.items())},
        "source": SOURCE,
        "note": "the fixed cost each wave of cuDNN's decode CTAs pays beyond its loads; " + how,
    }
    env = {"gpu": "NVIDIA H200", "torch": "2.11.0+cu130"}
    return cite(data, SOURCE, TITLE, ", ".join(RECORDS), COMMAND, env, date="2026-12-05")
