"""``implementations.sdpa-cudnn.fp8_share``: cuDNN's fp8 attention forward's efficiency as a share of its bf16 one.

cuDNN's ``sdpa_fp8`` graph (e4m3 Q, K, V and O, six fp32 scales in, the amax of S and O out) runs its
products on the fp8 tensor cores; without a figure of its own memmodel timed it at the bf16 kernel's
efficiency over the fp8 peak. A probe (``validation/probes/cudnn_fp8_probe.py``, record :data:`RECORD`,
its shapes and predictions committed first in ``validation/cases/h200-cudnn-fp8-probe.txt``) ran the
fp8 graph and the bf16 graph of the same shapes through the cuDNN frontend on the H200, none of them a
shape of NVIDIA's published checks.

The figure is the share that makes each fp8 kernel's predicted over measured time what the bf16
kernel's is at the same shape (least squared logarithm of the ratio of the two ratios, over the
probe's shapes): the fp8 kernel's own cost, apart from whatever the model misses of the bf16 one
there. The kernel times are the profiler's (CUPTI) durations of the attention kernel of one call.
It is a Hopper kernel's trait (an 8-bit ``wgmma`` takes V transposed: :data:`memmodel.hardware.derive.
TRANSFER_ARCH_OWN`), carried to GPUs of the same architecture and no further.
"""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

RECORD = "validation/h200/cudnn-fp8-probe/cudnn-fp8-probe.jsonl.gz"
COMMAND = (
    "python3 validation/probes/cudnn_fp8_probe.py cudnn-fp8-probe.jsonl (nvidia-cudnn-frontend 1.16.0 on PYTHONPATH)"
)
SOURCE = "measured-cudnn-fp8"
TITLE = "memmodel cuDNN fp8 attention probe (the frontend's sdpa_fp8 graph against its bf16 sdpa graph)"
#: the search range of the share
RANGE = (0.2, 1.5)
#: the model's kernel the probe's attention kernel is
KERNEL = "fa2_fwd"


def spec(row: Mapping[str, Any]) -> str:
    """The case spec of a probe row (``memmodel validate``'s, as the predictions file lists it)."""
    text = (
        f"impl=sdpa-cudnn,batch={row['batch']},heads={row['heads']},kv_heads={row['kv_heads']},"
        f"n={row['n']},d={row['d']}"
    )
    if row.get("d_v") not in (None, row["d"]):
        text += f",d_v={row['d_v']}"
    text += f",dtype={row['dtype']}"
    return text + (",causal=1" if row.get("causal") else "")


def measured_s(row: Mapping[str, Any]) -> float | None:
    """A call's seconds: CUDA events around back-to-back ``execute`` calls, the median of 15 runs
    (the GPU's pace: a call's kernels and the gaps between them). The profiler's one-call kernel
    list is kept beside it but not used: one sample, and CUPTI named the runtime-compiled kernels
    of a graph built after another was freed by the freed one's names."""
    t = row.get("time_s")
    return float(t) if t else None


def pairs(lines: Iterable[Mapping[str, Any]]) -> list[tuple[str, float, str, float]]:
    """(bf16 spec, its seconds, fp8 spec, its seconds) of each shape both graphs ran."""
    by: dict[tuple, dict[str, Mapping[str, Any]]] = {}
    for r in lines:
        if r.get("section") != "sdpa" or r.get("error") or measured_s(r) is None:
            continue
        key = (r["batch"], r["heads"], r["kv_heads"], r["n"], r["d"], r.get("d_v"), bool(r.get("causal")))
        by.setdefault(key, {})[r["dtype"]] = r
    out = []
    for found in by.values():
        if "bf16" in found and "fp8" in found:
            b, f = found["bf16"], found["fp8"]
            out.append((spec(b), float(measured_s(b) or 0), spec(f), float(measured_s(f) or 0)))
    return out


def load(root: Path) -> list[dict[str, Any]]:
    """The probe's lines (none where the record is absent)."""
    path = root / RECORD
    if not path.exists():
        return []
    return [json.loads(line) for line in gzip.open(path, "rt") if line.strip()]


def predicted_s(planned: Any, profile: Any) -> float:
    """The model's time of a planned call: its kernels (the memset and the attention kernel) with
    the launch overhead between them, as calls queued back to back run."""
    from ..timing import algorithm_time

    t = algorithm_time(
        planned.traffic, profile, planned.dtype, planned.implementation, planned.head_dim, planned.workload
    )
    return float(t.time_s)


def head_dim_of(spec_text: str) -> int:
    """The Q·K head dim of a probe spec (its ``d=``)."""
    return int(next(part for part in spec_text.split(",") if part.startswith("d="))[2:])


def fit(lines: Iterable[Mapping[str, Any]], profile: Any) -> tuple[tuple[tuple[int, float], ...], list[Any]]:
    """The share by head dim (a curve: one figure at each head dim the probe ran) and each probe
    call's (spec, predicted, measured) seconds at it; an empty curve where the probe has no pair."""
    from .serving import _golden, _planned

    found = pairs(lines)
    if not found:
        return (), []
    base = profile.with_implementation_figures("sdpa-cudnn", fp8_share=None)
    plans = {s: _planned(s, "", base) for b, _, f, _ in found for s in (b, f)}
    bf16 = {b: predicted_s(plans[b], base) / mb for b, mb, _, _ in found}

    def at(curve: tuple[tuple[int, float], ...]) -> Any:
        return base.with_implementation_figures("sdpa-cudnn", fp8_share=curve)

    curve = []
    for d in sorted({head_dim_of(b) for b, _, _, _ in found}):
        mine = [(b, f, mf) for b, _, f, mf in found if head_dim_of(b) == d]

        def loss(x: float, mine: list = mine) -> float:
            p = at(((1, math.exp(x)),))
            return sum(math.log(predicted_s(plans[f], p) / mf / bf16[b]) ** 2 for b, f, mf in mine)

        curve.append((d, float(f"{math.exp(_golden(loss, math.log(RANGE[0]), math.log(RANGE[1]))):.4g}")))
    p = at(tuple(curve))
    rows = []
    for b, mb, f, mf in found:
        rows.append((b, predicted_s(plans[b], p), mb))
        rows.append((f, predicted_s(plans[f], p), mf))
    return tuple(curve), rows


def apply(data: dict[str, Any], lines: list[Mapping[str, Any]]) -> dict[str, Any]:
    """``data`` (a profile's YAML mapping) with ``implementations.sdpa-cudnn.fp8_share`` fitted from
    the probe's ``lines`` and its source."""
    from ..hardware.parse import parse_profile
    from .serving import cite

    share, _ = fit(lines, parse_profile(data, "<profile being built>"))
    if not share:
        return data
    n = len(pairs(lines))
    figures = (data.setdefault("implementations", {})).setdefault("sdpa-cudnn", {})
    figures["fp8_share"] = {
        "value": {d: v for d, v in share},
        "source": SOURCE,
        "note": "cuDNN's fp8 attention forward (the sdpa_fp8 graph): its efficiency as a share of its bf16 one, by "
        "head dim: at each, the share that makes the fp8 call's predicted over measured time what the bf16 call's is "
        f"at the same shapes ({n} shapes, d 64 to 256, causal and not; calls queued back to back): {__name__}",
    }
    env = next((r for r in lines if r.get("section") == "env"), {})
    software = f", cuDNN {env.get('cudnn_backend', '?')}, cudnn-frontend {env.get('cudnn_frontend', '?')}"
    return cite(data, SOURCE, TITLE, RECORD, COMMAND, env, software, date="2026-12-05")
