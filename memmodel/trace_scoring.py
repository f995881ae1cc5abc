"""Scoring a trace case: the profiler's kernels against :func:`memmodel.trace`'s (plain Python).

A traced function launches whatever its ATen ops launch, so its kernels cannot be matched to
the model's by name as an implementation's can (:data:`memmodel.scoring.KERNEL_PATTERNS`).
Both sides are put in classes instead (:data:`KERNEL_CLASSES`): each measured kernel by its name
(:func:`classify_kernel`), each model kernel by what it models (:func:`model_kernel_classes`),
and the two lists are aligned in launch order so that as many pairs as possible agree
(:func:`align_classes`, a longest common subsequence). What is left over is reported: model
launches nothing measured matched (``missing``) and measured kernels the model does not list
(``extra``: memsets and copies a library issues, kernels the model lacks).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: the classes kernels are put in: GEMMs (cuBLAS, CUTLASS), softmax, reductions, elementwise ops
#: (arithmetic, copies, casts, fills, masks, dropout), memsets, memcpys, fused attention
#: kernels (FlashAttention, CUTLASS's memory-efficient ones, cuDNN, FlashInfer), Triton kernels
#: (inductor's ``triton_*``), and what none of these names
KERNEL_CLASSES = (
    "gemm",
    "softmax",
    "reduction",
    "elementwise",
    "memset",
    "memcpy",
    "attention",
    "triton",
    "other",
)

#: name patterns, tried in this order (a fused attention kernel's name may say "cutlass" or
#: "sm90_", a GEMM's never says "flash")
_CLASS_PATTERNS = (
    ("memset", re.compile(r"^Memset")),
    ("memcpy", re.compile(r"^Memcpy")),
    ("triton", re.compile(r"^triton_")),
    (
        "attention",
        re.compile(
            r"flash|fmha|cudnn|[Aa]ttention|_attn|attn_|sdpa|cutlass[FB]_|PrefillWithKVCache|"
            r"DecodeWithPagedKVCache|MergeStates"
        ),
    ),
    ("gemm", re.compile(r"gemm|gemv|nvjet|cutlass|xmma|sm\d+_|ampere_|volta_|turing_|cublas|splitKreduce|dot_kernel")),
    ("softmax", re.compile(r"softmax|SoftMax")),
    ("reduction", re.compile(r"reduce|Reduce|reduction|norm_kernel|welford|Welford")),
    (
        "elementwise",
        re.compile(
            r"elementwise|Functor|copy|Copy|[Ff]ill|mask|dropout|where|index|[Cc]at[A-Z_]|triu|tril|scatter|"
            r"gather|arange|kernel_impl"
        ),
    ),
)


def classify_kernel(name: str) -> str:
    """The class (:data:`KERNEL_CLASSES`) of a kernel as the profiler names it."""
    for cls, pattern in _CLASS_PATTERNS:
        if pattern.search(name):
            return cls
    return "other"


#: the model's kernel ops (``Kernel.op``) -> the class of the kernel measured for them
_OP_CLASSES = {
    "gemm": "gemm",
    "splitk_reduce": "gemm",
    "softmax": "softmax",
    "softmax_backward": "softmax",
    "reduction": "reduction",
    "column_reduction": "reduction",
    "scale": "elementwise",
    "masked_fill": "elementwise",
    "copy": "elementwise",
    "memcpy": "memcpy",
    "memset": "memset",
    "elementwise": "elementwise",
    "dropout": "elementwise",
    "fp8_cast": "elementwise",
    "cast": "elementwise",
    "gather": "elementwise",
    "expand": "elementwise",
    "cat": "elementwise",
}


def model_kernel_classes(name: str, op: str) -> frozenset[str]:
    """The classes a measured kernel may have to match the model's kernel ``name`` of op ``op``:
    its op's class; a fused attention call's kernels (``sdpa:...``) also "attention" (a library's
    auxiliary kernels, such as FlashAttention's dO·O and dQ conversion, carry its name), and its
    zero fill a memset. The softmax backward's first kernel (``....mul``) is an elementwise product."""
    cls = _OP_CLASSES.get(op)
    if name.split("#", 1)[0].endswith(".mul") and op == "softmax_backward":
        cls = "elementwise"
    out = {cls} if cls else set()
    if name.startswith("sdpa:"):
        out.add("attention")
        if "zero" in name:
            out.add("memset")
    return frozenset(out or {"other"})


def primary_class(name: str, op: str) -> str:
    """The class a model kernel is shown under: "attention" for a fused call's kernels, else
    its op's (the softmax backward's product: "elementwise")."""
    if name.startswith("sdpa:"):
        return "attention"
    if name.split("#", 1)[0].endswith(".mul") and op == "softmax_backward":
        return "elementwise"
    return _OP_CLASSES.get(op, "other")


def align_classes(model: Sequence[frozenset[str]], measured: Sequence[str]) -> list[tuple[int | None, int | None]]:
    """Model launches (each the classes it accepts) and measured kernels (each its class), aligned
    in order with as many matching pairs as possible (a longest common subsequence): ``(i, j)``
    pairs, ``(i, None)`` for a model launch nothing matched, ``(None, j)`` for a measured kernel
    the model does not list. Where several alignments match as many, a launch matches as early
    as it can."""
    n, m = len(model), len(measured)
    best = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        row, below = best[i], best[i + 1]
        accepts = model[i]
        for j in range(m - 1, -1, -1):
            v = below[j] if below[j] > row[j + 1] else row[j + 1]
            if measured[j] in accepts and below[j + 1] + 1 > v:
                v = below[j + 1] + 1
            row[j] = v
    out: list[tuple[int | None, int | None]] = []
    i = j = 0
    while i < n or j < m:
        if i < n and j < m and measured[j] in model[i] and best[i][j] == best[i + 1][j + 1] + 1:
            out.append((i, j))
            i, j = i + 1, j + 1
        elif j < m and (i == n or best[i][j] == best[i][j + 1]):
            out.append((None, j))
            j += 1
        else:
            out.append((i, None))
            i += 1
    return out


# ---------------------------------------------------------------------------------------
# Predictions


def trace_prediction(case: Any, profile: Any, near: Path | None = None) -> dict[str, Any]:
    """What the model predicts for a trace case (:class:`memmodel.trace_cases.TraceCase`), as a
    record's ``predicted`` holds it: :func:`memmodel.trace` of the same call (L2 on: the timing
    loop runs warm), its time per measured step (``function``, or ``forward`` and ``backward``;
    each with the profile's ``event_overhead``, as validate times a step between two events),
    its kernels in launch order (``kernels``: seconds; ``kernel_ops``, ``kernel_passes``,
    ``kernel_launches``), the ops it does not model, and the host model's times where there is one
    (``times_s``). Needs torch (the trace runs on fake CPU tensors)."""
    from .timing_modes import predicted_modes
    from .trace_cases import resolve_target
    from .tracing import load_function, trace

    fn, label = load_function(resolve_target(case, near))
    t = trace(
        fn,
        case.shape_map,
        dtype=case.dtype,
        backward=case.backward,
        profile=profile,
        l2="on",
        name=label,
        grad=list(case.grad) if case.grad is not None else None,
        config=case.config_map,
    )
    pairs = list(zip(t.traffic.kernels, t.timing.kernels))
    passes = ("forward", "backward") if case.backward else ("function",)
    event = float(profile.event_overhead_s or 0.0)
    steps: dict[str, float] = {}
    work: dict[str, dict[str, int]] = {}
    for step in passes:
        chosen = [(k, tm) for k, tm in pairs if step == "function" or k.pass_ == step]
        steps[step] = float(sum(float(tm.time_s) for _, tm in chosen)) + event
        work[step] = {
            "hbm_bytes": sum(int(k.bytes(level="hbm")) for k, _ in chosen),
            "flops": sum(int(k.flops) for k, _ in chosen),
        }
    out: dict[str, Any] = {
        "time_s": float(t.timing.time_s) + event * len(steps),
        "steps": steps,
        "kernels": {k.name: float(tm.time_s) for k, tm in pairs},
        "kernel_ops": {k.name: k.op for k, _ in pairs},
        "kernel_passes": {k.name: k.pass_ for k, _ in pairs},
        "kernel_launches": {k.name: int(k.launches) for k, _ in pairs},
        # the launch overhead in each kernel's time (its own duration, CUPTI's peer, is the rest)
        "kernel_launch_s": {k.name: float(tm.terms.get("launch", 0.0)) for k, tm in pairs},
        "step_work": work,
        "ceilings": {
            "hbm_bytes_per_s": profile.hbm.bandwidth_bytes_per_s,
            "matmul_flops_per_s": profile.peak_flops(case.dtype),
        },
        "bound": str(t.timing.bound),
        "hbm_bytes": int(t.traffic.hbm_bytes),
        "flops": int(t.traffic.flops),
        "unmodelled": [u.op for u in t.unmodelled],
        "sdpa": [c.implementation for c in t.sdpa],
    }
    out.update(predicted_modes(t))
    return out


def trace_prediction_line(case: Any, profile: Any) -> str:
    """A trace case's predictions as ``validate --predict`` prints them (commit them before
    measuring): each timed step's time (µs, L2 on, with the event overhead), the host model's
    call, queued and graph times where there is one, and the kernels' count."""
    p = trace_prediction(case, profile)
    steps = " ".join(f"{name}={t * 1e6:.1f}us" for name, t in p["steps"].items())
    modes = p.get("times_s")
    timed = " | " + " ".join(f"{m}={modes[m] * 1e6:.1f}us" for m in ("call", "queued", "graph")) if modes else ""
    launches = sum(p["kernel_launches"].values())
    return f"{case.id} {steps}{timed} | kernels {launches}, unmodelled ops {len(p['unmodelled'])}"


# ---------------------------------------------------------------------------------------
# Scores of a record's entry


def _launches(entry: dict[str, Any]) -> list[tuple[str, str]]:
    """The model's launches in order: (kernel name, op), a kernel launched n times n times."""
    predicted = entry.get("predicted") or {}
    ops = predicted.get("kernel_ops", {})
    launches = predicted.get("kernel_launches", {})
    return [
        (name, ops.get(name, "")) for name in predicted.get("kernels", {}) for _ in range(max(1, launches.get(name, 1)))
    ]


def kernel_alignment(entry: dict[str, Any]) -> list[tuple[tuple[str, str] | None, dict[str, Any] | None]]:
    """A trace entry's model launches and profiled kernels aligned (:func:`align_classes`):
    ``((name, op), measured)``, ``((name, op), None)`` (missing), ``(None, measured)`` (extra);
    empty where the case was not measured, not predicted or has no profiled kernels."""
    if entry.get("status") != "ok" or "timing" not in entry or entry.get("case", {}).get("kind") != "trace":
        return []
    measured = entry["timing"].get("profiled_kernels") or []
    model = _launches(entry)
    if not measured or not model:
        return []
    pairs = align_classes(
        [model_kernel_classes(name, op) for name, op in model], [classify_kernel(k["name"]) for k in measured]
    )
    return [(model[i] if i is not None else None, measured[j] if j is not None else None) for i, j in pairs]


def kernel_match(entry: dict[str, Any]) -> dict[str, Any] | None:
    """A trace entry's kernel list against the model's: launches the model lists and the profiler
    saw, ``matched`` (in order, by class), ``missing`` (model launches nothing matched),
    ``extra`` (measured kernels the model does not list; ``extra_memory_ops`` of them memsets
    and memcpys), and the names left over on either side; None where nothing was aligned."""
    pairs = kernel_alignment(entry)
    if not pairs:
        return None
    missing = [m[0] for m, k in pairs if m is not None and k is None]
    extra = [k for m, k in pairs if m is None and k is not None]
    return {
        "model_launches": sum(1 for m, _ in pairs if m is not None),
        "measured_kernels": sum(1 for _, k in pairs if k is not None),
        "matched": sum(1 for m, k in pairs if m is not None and k is not None),
        "missing": len(missing),
        "extra": len(extra),
        "extra_memory_ops": sum(1 for k in extra if classify_kernel(k["name"]) in ("memset", "memcpy")),
        "missing_kernels": list(dict.fromkeys(missing)),
        "extra_kernels": [{"name": k["name"], "class": classify_kernel(k["name"])} for k in extra],
    }


def trace_kernel_rows(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """Per kernel of a trace entry, in launch order: a model kernel with its class, predicted
    duration (its time less the launch overhead it holds) and the measured kernels matched to its
    launches (their CUPTI seconds summed;
    ``error`` where every launch matched), or a measured kernel the model does not list
    (``kernel`` None)."""
    pairs = kernel_alignment(entry)
    if not pairs:
        return []
    predicted = entry["predicted"]
    rows: list[dict[str, Any]] = []
    by_name: dict[str, dict[str, Any]] = {}
    for m, k in pairs:
        if m is None:
            assert k is not None
            rows.append(
                {
                    "kernel": None,
                    "class": classify_kernel(k["name"]),
                    "measured_kernel": k["name"],
                    "measured_s": k["time_s"],
                }
            )
            continue
        name, op = m
        row = by_name.get(name)
        if row is None:
            row = {
                "kernel": name,
                "class": primary_class(name, op),
                "pass": predicted.get("kernel_passes", {}).get(name, "forward"),
                # its own duration: its time in a queue less the launch overhead it holds
                "predicted_s": predicted["kernels"][name] - predicted.get("kernel_launch_s", {}).get(name, 0.0),
                "launches": 0,
                "matched_launches": 0,
                "measured_kernel": None,
                "measured_s": 0.0,
            }
            by_name[name] = row
            rows.append(row)
        row["launches"] += 1
        if k is not None:
            row["matched_launches"] += 1
            row["measured_s"] += k["time_s"]
            row["measured_kernel"] = row["measured_kernel"] or k["name"]
    for row in by_name.values():
        if row["matched_launches"] == row["launches"] and row["measured_s"] > 0:
            row["error"] = (row["predicted_s"] - row["measured_s"]) / row["measured_s"]
        if not row["matched_launches"]:
            row["measured_s"] = None
    return rows


def kernel_list_summary(entries: Sequence[dict[str, Any]]) -> dict[str, int]:
    """The kernel-list counts of :func:`kernel_match` summed over a record's trace entries
    (``cases``: those with a profiled kernel list)."""
    out = {"cases": 0, "model_launches": 0, "measured_kernels": 0, "matched": 0, "missing": 0, "extra": 0}
    out["extra_memory_ops"] = 0
    for e in entries:
        match = kernel_match(e)
        if match is None:
            continue
        out["cases"] += 1
        for key in ("model_launches", "measured_kernels", "matched", "missing", "extra", "extra_memory_ops"):
            out[key] += match[key]
    return out
