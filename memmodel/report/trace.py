"""JSON and CSV views of a :class:`~memmodel.tracing.Trace` (schema ``memmodel.trace/1``).

The traced ledger is one algorithm (``name`` ``traced``) with the keys of ``memmodel compare``'s
algorithms (:func:`.compare.algorithm_dict`: the byte sums by level and role, FLOPs, predicted
time, its kernels and transfers, by pass), each kernel naming the ATen op it came from (``op``);
beside it, every recorded op and what it became, the fused calls and the unmodelled ops.
"""

from __future__ import annotations

from typing import Any

from .. import __version__
from ..host import TIMING_ASSUMPTIONS
from ..timing import rate_sources
from ..traffic.ledger import ROLES
from .compare import algorithm_dict, passes_dict, rates_dict, time_range_of


def kernel_ops(t: Any) -> dict[str, Any]:
    """Kernel name -> the recorded op it came from (``aten.bmm.default``, ``sdpa``)."""
    return {name: op for op in t.ops for name in op.kernels}


def traced_algorithm(t: Any, timing: str = "kernel") -> dict[str, Any]:
    """The traced ledger as one of compare's algorithms, its kernels naming their ops; its
    ``predicted_time_s`` under ``timing`` (:data:`memmodel.host.TIMINGS`)."""
    ev = t.evaluated
    alg = algorithm_dict(ev, timing)
    ops = kernel_ops(t)
    for k in alg["kernels"]:
        source = ops.get(k["name"])
        k["op"] = source.op if source is not None else ""
        k["status"] = source.status if source is not None else "kernel"  # kernel, or sdpa: a fused call's
    alg["passes"] = passes_dict(ev)
    for entry in alg["passes"].values():
        entry["predicted_time_range_s"] = time_range_of(t.profile, entry["predicted_time_s"])
    alg["predicted_time_range_s"] = time_range_of(t.profile, alg["predicted_time_s"], timing)
    return alg


def trace_to_dict(t: Any, timing: str = "kernel") -> dict[str, Any]:
    """The trace's JSON object; ``predicted_time_s`` under ``timing``, ``predicted_times_s`` in
    every mode (null where the profile lacks a figure), ``host_time_s`` the host's seconds."""
    from ..tracing import TRACE_SCHEMA

    p = t.profile
    alg = traced_algorithm(t, timing)
    return {
        "schema": TRACE_SCHEMA,
        "memmodel_version": __version__,
        "timing": timing,
        "hardware": {
            "name": p.name,
            "full_name": p.full_name,
            "origin": p.origin,
            "path": str(p.path) if p.path else None,
            "rates": rates_dict(p),
        },
        "function": t.function,
        "inputs": [{"name": i.name, "shape": list(i.shape), "dtype": i.dtype} for i in t.inputs],
        "options": {"dtype": t.dtype, "backward": t.backward, "l2": t.l2, "timing": timing},
        "hbm_bytes": alg["hbm_bytes"],
        "flops": alg["flops"],
        "predicted_time_s": alg["predicted_time_s"],
        "predicted_times_s": alg["predicted_times_s"],
        "host_time_s": alg["host_time_s"],
        "bound": alg["bound"],
        "algorithms": [alg],
        "ops": [
            {
                "op": o.op,
                "pass": o.pass_,
                "status": o.status,
                "kernels": list(o.kernels),
                "shapes": list(o.shapes),
                **({"implementation": o.implementation} if o.implementation else {}),
                **({"autograd_nodes": o.nodes} if o.pass_ == "backward" else {}),
            }
            for o in t.ops
        ],
        "backward_nodes": t.backward_nodes,
        "shares": [
            {
                "group": s.group,
                "kernels": s.kernels,
                "time_s": s.time_s,
                "time_share": s.time_share,
                "hbm_bytes": s.hbm_bytes,
                "hbm_share": s.hbm_share,
            }
            for s in t.shares
        ],
        "free_ops": t.free_ops,
        "unmodelled": [
            {"op": u.op, "pass": u.pass_, "shapes": list(u.shapes), "reason": u.reason} for u in t.unmodelled
        ],
        "sdpa_calls": [
            {
                "implementation": c.implementation,
                "backward": c.backward,
                "workload": c.workload.to_dict(),
                "notes": list(c.notes),
            }
            for c in t.sdpa
        ],
        "notes": list(t.notes) + (list(t.host_times.notes) if timing in ("call", "queued") else []),
        "assumptions": list(t.assumptions) + ([TIMING_ASSUMPTIONS[timing]] if timing != "kernel" else []),
        "rate_sources": rate_sources(p),
    }


#: Columns of ``memmodel trace --format csv``: a row per kernel (``status`` kernel or sdpa), a
#: ``total`` row, then a row per unmodelled op (its shapes and why, no numbers). Stable: new
#: columns are appended, never renamed.
TRACE_CSV_COLUMNS = (
    "gpu",
    "function",
    "status",
    "kernel",
    "op",
    "pass",
    "hbm_read_bytes",
    "hbm_write_bytes",
    "hbm_bytes",
    "input_bytes",
    "intermediate_bytes",
    "output_bytes",
    "state_bytes",
    "flops",
    "exp_ops",
    "arithmetic_intensity",
    "predicted_time_s",
    "bound",
    "l2_read_bytes",
    "l2_write_bytes",
    "sram_read_bytes",
    "sram_write_bytes",
    "launches",
    "dtype",
    "backward",
    "l2",
    "shapes",
    "reason",
)


def trace_csv_columns(timing: str = "kernel") -> tuple[str, ...]:
    """The columns of ``trace --format csv`` under ``timing`` (others than kernel: compare's
    :data:`~.compare.TIMING_CSV_COLUMNS` appended)."""
    from .compare import TIMING_CSV_COLUMNS

    return TRACE_CSV_COLUMNS if timing == "kernel" else (*TRACE_CSV_COLUMNS, *TIMING_CSV_COLUMNS)


def trace_csv_rows(t: Any, timing: str = "kernel") -> list[dict[str, Any]]:
    alg = traced_algorithm(t, timing)
    context = {"gpu": t.profile.name, "function": t.function, "dtype": t.dtype, "backward": t.backward, "l2": t.l2}
    numbers = (
        "hbm_read_bytes",
        "hbm_write_bytes",
        "hbm_bytes",
        "flops",
        "exp_ops",
        "arithmetic_intensity",
        "predicted_time_s",
        "bound",
        "l2_read_bytes",
        "l2_write_bytes",
        "sram_read_bytes",
        "sram_write_bytes",
    )
    rows = []
    for item in [*alg["kernels"], {**alg, "name": "total", "pass": "all", "op": "", "launches": "", "status": "total"}]:
        status = item["status"]
        rows.append(
            {
                **{c: "" for c in TRACE_CSV_COLUMNS},
                **context,
                "status": status,
                "kernel": item["name"],
                "op": item["op"],
                "pass": item["pass"],
                **{k: item[k] for k in numbers},
                **{f"{r}_bytes": item["bytes_by_role"][r] for r in ROLES},
                "launches": item.get("launches", ""),
            }
        )
        if timing != "kernel":
            total = status == "total"
            rows[-1].update(
                {
                    "timing": timing if total else "kernel",
                    "kernel_time_s": alg["predicted_times_s"]["kernel"] if total else item["predicted_time_s"],
                    "host_time_s": alg["host_time_s"] if total else "",
                }
            )
    for u in t.unmodelled:
        rows.append(
            {
                **{c: "" for c in TRACE_CSV_COLUMNS},
                **context,
                "status": "unmodelled",
                "kernel": u.op,
                "op": u.op,
                "pass": u.pass_,
                "shapes": "; ".join(u.shapes),
                "reason": u.reason,
            }
        )
    return rows
