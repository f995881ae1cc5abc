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
* ``validation/h200/cudnn-decode-probe/``: the earlier grid probe, shorter K/V (the L2 holds it);
* ``validation/h200/cudnn-decode-groups-probe/``: GQA groups of 16 to 96 query heads a K/V head (the
  kernel's 16-row tiles, each streaming its split's whole chunk).

The figures are those that make the model's split kernel (less its launch) fit every probe decode's
kernel duration, the least squared logarithm of predicted over measured: at each head dim a per-CTA
rate (its loads waiting on each other: one CTA streams its share of K/V no faster) beside the
profile's HBM bound, and a fixed cost a wave of CTAs pays; and one share by which a second CTA on an
SM slows each (``co_resident_cost``). With one CTA an SM the rate binds; with two at d 64 and 128 the
HBM does (a grid of 256 CTAs streams at the HBM rate calibrate measured), at d 256 the slowed rate.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

IMPL = "sdpa-cudnn"
RECORDS = (
    "validation/h200/cudnn-decode-rate-probe/cudnn-decode-rate-probe.json.gz",
    "validation/h200/cudnn-decode-probe/cudnn-decode-probe.json.gz",
    "validation/h200/cudnn-decode-groups-probe/cudnn-decode-groups-probe.json.gz",
)
COMMAND = (
    "python3 -m memmodel validate --gpu h200 --ncu --no-host-probe --cases "
    "validation/cases/h200-cudnn-decode-rate-probe.txt --output cudnn-decode-rate-probe.json.gz "
    "(and --cases validation/cases/h200-cudnn-decode-probe.txt, h200-cudnn-decode-groups-probe.txt)"
)
SOURCE = "measured-cudnn-decode"
TITLE = "memmodel cuDNN decode probes (its split-KV decode kernel's CUPTI durations by grid and length)"
#: the model's kernel the probes' decode kernel is (unsplit too: traffic.decode.split_kv_kernels, direct)
KERNEL = "fa2_splitkv"
#: the search range of the rate (bytes a second, one CTA)
RATE_RANGE = (2e9, 400e9)
#: the largest fixed cost tried (seconds a wave)
OVERHEAD_MAX = 10e-6
#: the largest share one more CTA on an SM slows each tried
CO_RESIDENT_MAX = 1.0


def load(root: Path) -> list[dict[str, Any]]:
    """The probes' records (those present)."""
    from ..fileio import read_json

    return [read_json(root / r, what="cuDNN decode probe record") for r in RECORDS if (root / r).exists()]


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


def _fit_one(times: Callable[[float], list[float]], waves: list[float], measured: list[float]) -> tuple[float, float]:
    """(rate, fixed cost) least in the squared log error of ``times(log rate)`` (the kernels' times
    without the fixed cost) plus the cost once a wave (``waves``) against ``measured``: the best cost
    at each rate tried, in closed arithmetic; the rate by golden-section search."""
    from .serving import _golden

    def best_cost(base: list[float]) -> tuple[float, float]:
        def loss(cost: float) -> float:
            return sum(math.log((b + cost * w) / m) ** 2 for b, w, m in zip(base, waves, measured, strict=True))

        cost = _golden(loss, 0.0, OVERHEAD_MAX, steps=30, scan=21)
        return loss(cost), cost

    x = _golden(lambda x: best_cost(times(x))[0], math.log(RATE_RANGE[0]), math.log(RATE_RANGE[1]), steps=20, scan=17)
    rate = float(f"{math.exp(x):.4g}")
    return rate, float(f"{best_cost(times(math.log(rate)))[1]:.3g}")


class Fit(NamedTuple):
    """The figures fitted, and each decode's (spec, predicted, measured) kernel seconds with them."""

    rates: dict[int, float]
    costs: dict[int, float]
    co_resident: float
    checked: list[tuple[str, float, float]]


def fit(records: Iterable[Mapping[str, Any]], profile: Any) -> Fit:
    """The rate and the fixed cost by head dim, and the share one more CTA on an SM slows each
    (one figure: where two CTAs share an SM at d 64 and 128 the HBM binds, so only d 256's grids
    tell it); empty where the records hold no decode."""
    from .serving import _golden, _planned, predicted

    found = rows(records)
    if not found:
        return Fit({}, {}, 0.0, [])
    plans = {spec: _planned(spec, "", profile) for spec, _, _ in found}
    dims = sorted({d for _, d, _ in found})

    def at(rate: Mapping[int, float], cost: Mapping[int, float], co: float) -> Any:
        return profile.with_implementation_figures(
            IMPL,
            cta_bandwidth_bytes_per_s=tuple(sorted(rate.items())),
            split_cta_overhead_s=tuple(sorted(cost.items())),
            co_resident_cost=co or None,
        )

    def figures(co: float) -> tuple[dict[int, float], dict[int, float]]:
        rates: dict[int, float] = {}
        costs: dict[int, float] = {}
        for d in dims:
            mine = [(s, m) for s, dd, m in found if dd == d]

            def times(x: float, mine: list = mine, d: int = d) -> list[float]:
                p = at({**rates, d: math.exp(x)}, {**costs, d: 0.0}, co)
                return [predicted(plans[s], KERNEL, p) for s, _ in mine]

            # the waves each kernel pays the fixed cost for: what a microsecond of it adds
            once = at({**rates, d: RATE_RANGE[1]}, {**costs, d: 1e-6}, co)
            waves = [
                (predicted(plans[s], KERNEL, once) - t) / 1e-6
                for (s, _), t in zip(mine, times(math.log(RATE_RANGE[1])))
            ]
            rates[d], costs[d] = _fit_one(times, waves, [m for _, m in mine])
        return rates, costs

    def total(co: float) -> float:
        p = at(*figures(co), co)
        return sum(math.log(predicted(plans[s], KERNEL, p) / m) ** 2 for s, _, m in found)

    co = float(f"{_golden(total, 0.0, CO_RESIDENT_MAX, steps=8, scan=5):.3g}")
    rates, costs = figures(co)
    p = at(rates, costs, co)
    return Fit(rates, costs, co, [(s, predicted(plans[s], KERNEL, p), m) for s, _, m in found])


def apply(data: dict[str, Any], records: list[Mapping[str, Any]]) -> dict[str, Any]:
    """``data`` (a profile's YAML mapping) with the three figures fitted from ``records`` and their source."""
    from ..hardware.parse import parse_profile
    from .serving import cite

    found = fit(records, parse_profile(data, "<profile being built>"))
    if not found.rates:
        return data
    worst = max(abs(p / m - 1.0) for _, p, m in found.checked)
    how = (
        f"fitted jointly with the decode kernel's other two figures to its CUPTI durations in {len(found.checked)} "
        f"cuDNN decodes (least squared log error, the launch aside; largest miss {worst:.0%}): {__name__}"
    )
    figures = (data.setdefault("implementations", {})).setdefault(IMPL, {})
    figures["cta_bandwidth"] = {
        "value": {d: f"{v / 1e9:.4g} GB/s" for d, v in sorted(found.rates.items())},
        "source": SOURCE,
        "note": "per CTA of cuDNN's decode kernel (its grid: traffic.decode.cudnn_decode_splits), the bytes of K/V it "
        "streams a second alone on its SM, beside the HBM bound; " + how,
    }
    figures["split_cta_overhead"] = {
        "value": {d: f"{v * 1e6:.4g} us" for d, v in sorted(found.costs.items())},
        "source": SOURCE,
        "note": "the fixed cost each wave of cuDNN's decode CTAs pays beyond its loads; " + how,
    }
    if found.co_resident:
        figures["co_resident_cost"] = {
            "value": found.co_resident,
            "source": SOURCE,
            "note": "the share each further CTA of cuDNN's decode on an SM slows every CTA there (one figure for every "
            "head dim: only d 256's grids of two CTAs an SM are not bound by the HBM); " + how,
        }
    env = {"gpu": "NVIDIA H200", "torch": "2.11.0+cu130"}
    return cite(data, SOURCE, TITLE, ", ".join(RECORDS), COMMAND, env, date="2026-12-05")
