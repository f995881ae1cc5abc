"""cuDNN's fused backward at head dims calibrate does not run: d 192 (d 160 runs its kernel) and V's
head dim below Q's (MLA prefill's 192 / 128).

``memmodel calibrate`` fits ``implementations.sdpa-cudnn.backward_efficiency`` at d 64, 96, 128 and
256; at 160 and 192 the model interpolated, and there the H200's backward ran a fifth to a quarter longer than it
said. Where V's head dim is below Q's, one efficiency a head dim cannot serve: the same kernel
(``..._flash_bprop_wgmma_f16_knob_26_64x64x192``) runs a non-causal 192 / 128 backward as long as a
192 / 192 one of the same shape, and a causal one in about a third of the non-causal one's time.

Two probes ran the kernel on the H200 (their cases and predictions committed first, :data:`RECORDS`);
this module fits, each to the bprop kernel's own durations (CUPTI, one call) there by least squared
logarithm of predicted over measured time:

* ``backward_efficiency`` at each head dim the kernels ran at (160 pads to 192) that calibrate has no
  figure for, from the rows whose V head dim is Q's;
* ``backward_dv_efficiency`` and ``backward_dv_causal_efficiency`` at that head dim, from the rows
  whose V head dim is below it, without the causal mask and with it (with the first figure in place).

A Hopper kernel's traits (:data:`memmodel.hardware.derive.TRANSFER_ARCH_OWN` for the two ``dv``
figures): GPUs of the same architecture take them, others keep their own rules. A blind set, measured
in the same device call and kept out of the fit, judges them
(``validation/cases/h200-cudnn-bwd-d192-check.txt``).
"""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

RECORDS = (
    "validation/h200/cudnn-bwd-d192-probe/cudnn-bwd-d192-probe.json.gz",
    "validation/h200/mla-bwd-probe/mla-bwd-probe.json.gz",
)
COMMAND = (
    "python3 -m memmodel validate --gpu h200 --ncu --no-host-probe --cases "
    "validation/cases/h200-cudnn-bwd-d192-probe.txt (and h200-mla-bwd-probe.txt, without --ncu)"
)
SOURCE = "measured-cudnn-bwd-dims"
TITLE = "memmodel cuDNN backward probes at head dims 160 and 192, and V's head dim below Q's"
IMPL = "sdpa-cudnn"
#: the search range of an efficiency
RANGE = (0.1, 1.5)
#: the model's kernel the probes' fused backward kernel is, and the name that finds its duration
KERNEL = "cudnn_bwd"
MEASURED = "bprop"


def rows(records: Iterable[Mapping[str, Any]]) -> list[tuple[Any, float]]:
    """(case, the fused backward kernel's seconds) of every cuDNN backward the records measured."""
    from ..cases import Case

    out = []
    for record in records:
        for c in record.get("cases", ()):
            spec = c.get("case") or {}
            if not spec.get("backward") or spec.get("impl") != IMPL or c.get("status") != "ok":
                continue
            kernels = (c.get("timing") or {}).get("profiled_kernels") or ()
            seconds = sum(float(k["time_s"]) for k in kernels if MEASURED in k.get("name", ""))
            if seconds > 0:
                out.append((Case(**{k: v for k, v in spec.items() if v is not None and k != "id"}), seconds))
    return out


def load(root: Path) -> list[dict[str, Any]]:
    """The records (none where the first is absent)."""
    if not (root / RECORDS[0]).exists():
        return []
    return [json.load(gzip.open(root / r, "rt")) for r in RECORDS if (root / r).exists()]


def _exec_d(case: Any) -> int:
    from ..implementations import padded_head_dim

    return int(padded_head_dim(IMPL, case.d))


def _narrow(case: Any) -> bool:
    from ..implementations import padded_head_dim

    return case.d_v is not None and int(padded_head_dim(IMPL, case.d_v)) < _exec_d(case)


def predicted_s(case: Any, profile: Any) -> float:
    """The model's time of the fused backward kernel of ``case`` (warm L2, as validate times it)."""
    from ..scoring import predicted_times

    return float(predicted_times(case, profile)["kernels"][KERNEL])


def _fitted(loss: Any) -> float:
    from .serving import _golden

    return float(f"{math.exp(_golden(loss, math.log(RANGE[0]), math.log(RANGE[1]))):.4g}")


def fit(found: list[tuple[Any, float]], profile: Any) -> tuple[dict[str, dict[int, float]], list[Any]]:
    """The figures by head dim (``backward_efficiency``: only the head dims new to the profile;
    ``backward_dv_efficiency``, ``backward_dv_causal_efficiency``) and each row's (case,
    predicted, measured) seconds with them."""
    plain = {int(d): e for d, e in profile.implementation(IMPL).backward_efficiency}
    out: dict[str, dict[int, float]] = {"backward_efficiency": {}, "backward_dv_efficiency": {}}
    out["backward_dv_causal_efficiency"] = {}

    def with_plain(extra: Mapping[int, float]) -> Any:
        curve = tuple(sorted((plain | dict(extra)).items()))
        return profile.with_implementation_figures(IMPL, backward_efficiency=curve)

    def loss_of(mine: list[tuple[Any, float]], build: Any) -> Any:
        def loss(x: float) -> float:
            p = build(math.exp(x))
            return sum(math.log(predicted_s(c, p) / m) ** 2 for c, m in mine)

        return loss

    for d in sorted({_exec_d(c) for c, _ in found} - set(plain)):
        mine = [(c, m) for c, m in found if _exec_d(c) == d and not _narrow(c)]
        if mine:
            out["backward_efficiency"][d] = _fitted(loss_of(mine, lambda e, d=d: with_plain({d: e})))
    base = with_plain(out["backward_efficiency"])
    for d in sorted({_exec_d(c) for c, _ in found if _narrow(c)}):
        for name, causal in (("backward_dv_efficiency", False), ("backward_dv_causal_efficiency", True)):
            mine = [(c, m) for c, m in found if _exec_d(c) == d and _narrow(c) and bool(c.causal) == causal]
            if not mine:
                continue

            def build(e: float, name: str = name, d: int = d) -> Any:
                return base.with_implementation_figures(IMPL, **{name: ((d, e),)})

            out[name][d] = _fitted(loss_of(mine, build))
    final = base.with_implementation_figures(
        IMPL,
        **{k: tuple(sorted(v.items())) for k, v in out.items() if k != "backward_efficiency" and v},
    )
    return out, [(c, predicted_s(c, final), m) for c, m in found]


def apply(data: dict[str, Any], records: list[Mapping[str, Any]]) -> dict[str, Any]:
    """``data`` (a profile's YAML mapping) with the figures :func:`fit` gives from ``records``, cited."""
    from ..hardware.parse import parse_profile
    from .serving import cite

    found = rows(records)
    if not found:
        return data
    figures, each = fit(found, parse_profile(data, "<profile being built>"))
    mine = (data.setdefault("implementations", {})).setdefault(IMPL, {})
    n = len(each)
    added = figures["backward_efficiency"]
    if added:
        entry = mine["backward_efficiency"]
        entry["value"] = dict(sorted({**entry["value"], **added}.items()))
        shown = ", ".join(f"d = {d}: {e:g}" for d, e in added.items())
        entry["note"] = (
            f"{entry['note']}; {shown} fitted to the fused kernel's CUPTI durations in {n} backwards of the "
            f"probes {', '.join(RECORDS)} (V's head dim Q's; d 160 runs the d-192 kernel): {__name__}"
        )
    for name, what in (("backward_dv_efficiency", "without"), ("backward_dv_causal_efficiency", "with")):
        if figures[name]:
            mine[name] = {
                "value": dict(figures[name]),
                "source": SOURCE,
                "note": f"its fused backward's efficiency where V's head dim is below Q's (192 / 128), {what} the "
                "causal mask: fitted to the kernel's CUPTI durations in those backwards of the probes (least squared "
                f"logarithm; the d-192 efficiency in place): {__name__}",
            }
    env = {"gpu": "NVIDIA H200", "torch": "2.11.0+cu130"}
    return cite(data, SOURCE, TITLE, RECORDS[0], COMMAND, env, ", cuDNN 9.19", date="2026-12-05")
