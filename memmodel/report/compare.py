"""JSON and CSV views of a :class:`~memmodel.model.Comparison` (schema ``memmodel.compare/1``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import __version__, intmath
from ..flops import convention_flops
from ..hardware import Profile
from ..hardware.profile import RATE_LABELS
from ..model import COMPARE_SCHEMA, Comparison, Evaluated
from ..timing import KernelTiming, rate_sources
from ..traffic.ledger import MALL, ROLES, AlgorithmTraffic, Kernel
from ..validated import time_range, time_range_errors


def _plain(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def _intensity(flops: Any, nbytes: Any) -> Any:
    b = np.asarray(intmath.to_float(nbytes))
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(b > 0, np.asarray(intmath.to_float(flops)) / np.where(b > 0, b, 1), 0.0)
    return float(out) if out.ndim == 0 else out


LEVEL_KEYS = tuple(f"{level}_{direction}_bytes" for level in ("hbm", "l2", "sram") for direction in ("read", "write"))


def _numbers(traffic: Any, flops_owner: Any) -> dict[str, Any]:
    """The numeric keys shared by algorithms and kernels."""
    levels = {
        f"{level}_{direction}_bytes": _plain(traffic.bytes(level=level, direction=direction))
        for level in ("hbm", "l2", "sram")
        for direction in ("read", "write")
    }
    if any(t.level == MALL for t in traffic.transfers):  # a GPU with a MALL (memory.mall) only
        levels.update(
            {
                f"{MALL}_{direction}_bytes": _plain(traffic.bytes(level=MALL, direction=direction))
                for direction in ("read", "write")
            }
        )
        levels[f"{MALL}_bytes"] = _plain(traffic.bytes(level=MALL))
    return {
        **levels,
        "hbm_bytes": _plain(traffic.bytes(level="hbm")),
        "l2_bytes": _plain(traffic.bytes(level="l2")),
        "sram_bytes": _plain(traffic.bytes(level="sram")),
        "bytes_by_role": {role: _plain(traffic.bytes(level="hbm", role=role)) for role in ROLES},
        "flops": _plain(flops_owner.flops),
        "matmul_flops": _plain(flops_owner.matmul_flops),
        "softmax_flops": _plain(_softmax(flops_owner)),
        "exp_ops": _plain(flops_owner.exp_ops),
        "arithmetic_intensity": _plain(_intensity(flops_owner.flops, traffic.bytes(level="hbm"))),
    }


def _softmax(owner: Any) -> Any:
    if isinstance(owner, Kernel):
        return owner.softmax_flops
    return intmath.add(*(k.softmax_flops for k in owner.kernels))


def _kernel_dict(kernel: Kernel, timing: KernelTiming) -> dict[str, Any]:
    out: dict[str, Any] = {"name": kernel.name, "pass": kernel.pass_}
    out.update(_numbers(kernel, kernel))
    out["launches"] = _plain(kernel.launches)  # more than 1: an elementwise op past 32-bit offsets
    out["predicted_time_s"] = _plain(timing.time_s)
    out["bound"] = _plain(timing.bound)
    out["time_terms_s"] = {k: _plain(v) for k, v in timing.terms.items()}
    return out


def algorithm_dict(ev: Evaluated, timing: str = "kernel") -> dict[str, Any]:
    """An algorithm's keys; ``predicted_time_s`` is its time under ``timing``
    (:data:`memmodel.host.TIMINGS`), ``predicted_times_s`` its time in every mode (null where the
    profile lacks a figure the mode needs) and ``host_time_s`` the host's seconds issuing it."""
    t = ev.traffic
    out: dict[str, Any] = {"name": t.name, "variant": t.variant, "params": {k: _plain(v) for k, v in t.params.items()}}
    out.update(_numbers(t, t))
    out["predicted_time_s"] = _plain(ev.time_s(timing))
    times = ev.host_times
    out["predicted_times_s"] = {mode: _plain(value) for mode, value in times.as_dict().items()}
    out["host_time_s"] = _plain(times.host_s)
    out["bound"] = _plain(ev.timing.bound)
    # the share of its rate the forward kernel keeps where the clocks fell under the power
    # limit (--clocks), 1.0 where they did not
    share = ev.timing.clock_share
    out["clock_share"] = 1.0 if share is None else _plain(share)
    out["kernels"] = [_kernel_dict(k, kt) for k, kt in zip(t.kernels, ev.timing.kernels)]
    out["transfers"] = [x.to_dict() for x in t.transfers]
    return out


PASSES = ("forward", "backward")


def passes_dict(ev: Evaluated) -> dict[str, Any]:
    """Per pass (forward, backward): the numeric keys of an algorithm, its time and its kernels."""
    out: dict[str, Any] = {}
    pairs = list(zip(ev.traffic.kernels, ev.timing.kernels))
    for pass_ in PASSES:
        chosen = [(k, t) for k, t in pairs if k.pass_ == pass_]
        if not chosen:
            continue
        ledger = AlgorithmTraffic(ev.traffic.name, ev.traffic.variant, tuple(k for k, _ in chosen))
        entry: dict[str, Any] = _numbers(ledger, ledger)
        entry["predicted_time_s"] = _plain(sum((np.asarray(t.time_s, dtype=np.float64) for _, t in chosen), 0.0))
        entry["kernels"] = [k.name for k, _ in chosen]
        out[pass_] = entry
    return out


def compare_to_dict(c: Comparison) -> dict[str, Any]:
    p = c.profile
    timing = c.options.timing
    return {
        "schema": COMPARE_SCHEMA,
        "memmodel_version": __version__,
        "timing": timing,
        "hardware": {
            "name": p.name,
            "full_name": p.full_name,
            "origin": p.origin,
            "path": str(p.path) if p.path else None,
            "rates": rates_dict(p),
        },
        "workload": c.workload.to_dict(),
        "options": {
            "tiled": c.options.tiled,
            "block_q": c.options.block_q,
            "block_kv": c.options.block_kv,
            "l2": c.options.l2,
            "backward": c.options.backward,
            "splits": c.options.splits,
            "ctas_per_sm": c.options.ctas_per_sm,
            "implementation": c.options.implementation,
            "kv_order": c.options.kv_order,
            "timing": timing,
        },
        "algorithms": [_with_passes(algorithm_dict(a, timing), a, c) for a in c.algorithms],
        "ratios": {k: _plain(v) for k, v in c.ratios().items()},
        "bounds": {k: _plain(v) for k, v in c.bounds.items()},
        "assumptions": list(c.assumptions),
        "warnings": list(c.warnings),
        "caveats": caveats(c),
        "rate_sources": rate_sources(c.profile),
    }


def caveats(c: Comparison) -> list[str]:
    """What stands in for a missing figure or choice (:attr:`Comparison.caveats`: the
    implementation chosen for the user, figures the profile lacks; under the timings call and
    queued, the implementation whose host figures stand in for another's)."""
    if c.options.timing not in ("call", "queued"):  # the modes that issue host ops
        return list(c.caveats)
    return list(dict.fromkeys([*c.caveats, *(n for a in c.algorithms for n in a.host_times.notes)]))


def workload_summary(c: Comparison, *, l2: bool = True) -> str:
    """The workload and the options that change its numbers, in one line (table headings,
    plot titles): ``batch 1 · heads 32 (kv 8) · N 1 · N_kv 32768 · d 128 · fp16 · causal ·
    forward + backward · L2 on``."""
    return describe(c.workload.to_dict(), backward=c.options.backward, l2=c.options.l2 if l2 else None)


def describe(w: dict[str, Any], *, backward: bool = False, l2: str | None = None) -> str:
    """:func:`workload_summary` from a workload's dict (:meth:`Workload.to_dict`)."""
    shape = f"batch {w['batch']} · heads {w['heads']}"
    if w["kv_heads"] != w["heads"]:
        shape += f" (kv {w['kv_heads']})"
    shape += f" · N {w['n']}"
    if w["n_kv"] != w["n"]:
        shape += f" · N_kv {w['n_kv']}"
    shape += f" · d {w['d']} · {w['dtype']}"
    flags = [
        text
        for text, on in (
            ("causal", w["causal"]),
            (f"window {w.get('window')}", w.get("window") is not None),
            ("docs " + "+".join(map(str, w.get("seq_lens") or ())), w.get("seq_lens") is not None),
            (f"dropout {w['dropout']:g}", w["dropout"] > 0),
            ("forward + backward", backward),
            (f"L2 {l2}", l2 is not None),
        )
        if on
    ]
    return " · ".join([shape, *flags])


#: Schema of ``memmodel compare --gpu A,B --format json``: one compare/1 object per GPU.
COMPARE_GPUS_SCHEMA = "memmodel.compare-gpus/1"


def compare_gpus_to_dict(comparisons: list[Comparison]) -> dict[str, Any]:
    """Several GPUs, one workload: ``{"schema", "memmodel_version", "workload", "gpus": [...]}``,
    ``gpus`` holding each GPU's :func:`compare_to_dict` object, in the order given."""
    return {
        "schema": COMPARE_GPUS_SCHEMA,
        "memmodel_version": __version__,
        "workload": comparisons[0].workload.to_dict(),
        "gpus": [compare_to_dict(c) for c in comparisons],
    }


def _with_passes(out: dict[str, Any], ev: Evaluated, c: Comparison) -> dict[str, Any]:
    """Add the per-pass view and the FLOPs convention to an algorithm's dict (new keys only)."""
    conv = convention_flops(c.workload, backward=c.options.backward)
    out["flops_executed"] = out["flops"]
    out["flops_convention"] = {k: _plain(v) for k, v in conv.items()}
    out["passes"] = passes_dict(ev)
    for pass_, entry in out["passes"].items():
        entry["flops_convention"] = _plain(conv[pass_])
        entry["predicted_time_range_s"] = time_range_of(c.profile, entry["predicted_time_s"])
    # the whole's time is under the timing mode: its range from that mode's errors
    out["predicted_time_range_s"] = time_range_of(c.profile, out["predicted_time_s"], c.options.timing)
    return out


def time_range_of(profile: Profile, seconds: Any, timing: str = "kernel") -> list[Any] | None:
    """``[low, high]``: where a time predicted on ``profile`` under ``timing`` is measured, from
    the errors the validation records give its rate class and that timing mode
    (:func:`memmodel.validated.time_range`)."""
    if isinstance(seconds, list):  # a grid's times, as _plain wrote them
        seconds = np.asarray(seconds, dtype=np.float64)
    found = time_range(profile.rate_class, seconds, timing)
    return None if found is None else [_plain(found[0]), _plain(found[1])]


def rates_dict(profile: Profile) -> dict[str, Any]:
    """What a profile's rates rest on (its rate class) and the errors its times' ranges come from."""
    errors = time_range_errors(profile.rate_class)
    out: dict[str, Any] = {"class": profile.rate_class, "label": RATE_LABELS[profile.rate_class]}
    if profile.transferred_from or profile.derived_from:
        out["from"] = profile.transferred_from or profile.derived_from
    if errors is not None:
        out["time_range"] = {k: errors[k] for k in ("low", "high", "count", "basis")}
    return out


#: Columns of ``memmodel compare --format csv``: one row per kernel, then a ``total`` row
#: per algorithm, each with the workload and model options it belongs to (so rows of
#: several runs, or several GPUs, can be told apart). Stable: new columns are appended,
#: never renamed.
COMPARE_CSV_COLUMNS = (
    "gpu",
    "algorithm",
    "variant",
    "kernel",
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
    "n",
    "n_kv",
    "d",
    "batch",
    "heads",
    "kv_heads",
    "dtype",
    "causal",
    "dropout",
    "backward",
    "l2",
    "implementation",
    "predicted_time_low_s",
    "predicted_time_high_s",
    "rates",
)


#: Columns ``memmodel compare --format csv`` appends under a timing other than kernel: the mode of
#: the row's ``predicted_time_s`` (a kernel's row: kernel; a total: the mode asked), the kernels'
#: time and the host's seconds issuing them (a total's)
TIMING_CSV_COLUMNS = ("timing", "kernel_time_s", "host_time_s")


def compare_csv_columns(timing: str = "kernel") -> tuple[str, ...]:
    """The columns of ``compare --format csv`` under ``timing``."""
    return COMPARE_CSV_COLUMNS if timing == "kernel" else (*COMPARE_CSV_COLUMNS, *TIMING_CSV_COLUMNS)


def compare_csv_rows(c: Comparison) -> list[dict[str, Any]]:
    timing = c.options.timing
    rows = []
    w = c.workload.to_dict()
    context = {
        **{k: w[k] for k in ("n", "n_kv", "d", "batch", "heads", "kv_heads", "dtype", "causal", "dropout")},
        "backward": c.options.backward,
        "l2": c.options.l2,
    }
    for alg in compare_to_dict(c)["algorithms"]:
        for item in [*alg["kernels"], {**alg, "name": "total", "pass": "all"}]:
            rows.append(
                {
                    "gpu": c.profile.name,
                    "algorithm": alg["name"],
                    "variant": alg["variant"],
                    "kernel": item["name"],
                    "pass": item["pass"],
                    "hbm_read_bytes": item["hbm_read_bytes"],
                    "hbm_write_bytes": item["hbm_write_bytes"],
                    "hbm_bytes": item["hbm_bytes"],
                    **{f"{r}_bytes": item["bytes_by_role"][r] for r in ROLES},
                    "flops": item["flops"],
                    "exp_ops": item["exp_ops"],
                    "arithmetic_intensity": item["arithmetic_intensity"],
                    "predicted_time_s": item["predicted_time_s"],
                    "bound": item["bound"],
                    **{k: item[k] for k in ("l2_read_bytes", "l2_write_bytes", "sram_read_bytes", "sram_write_bytes")},
                    **context,
                    "implementation": (c.options.implementation or "paper") if alg["name"] == "tiled" else "",
                    **dict(
                        zip(
                            ("predicted_time_low_s", "predicted_time_high_s"),
                            time_range_of(c.profile, item["predicted_time_s"]) or ("", ""),
                        )
                    ),
                    "rates": c.profile.rate_class,
                }
            )
            if timing != "kernel":
                total = item["name"] == "total"
                times = alg["predicted_times_s"]
                rows[-1].update(
                    {
                        "timing": timing if total else "kernel",
                        "kernel_time_s": times["kernel"] if total else item["predicted_time_s"],
                        "host_time_s": alg["host_time_s"] if total else "",
                    }
                )
                if total:
                    rows[-1].update({"predicted_time_low_s": "", "predicted_time_high_s": ""})
    return rows
