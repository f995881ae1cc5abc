"""Predicted against measured: map measured kernels to the model's, and score the model.

Plain Python (no torch): everything here runs on records brought back from a GPU, so it
is tested on the CPU. How measured and predicted HBM bytes are compared:

* Nsight Compute flushes the caches before each kernel, so the model is evaluated with
  ``l2="cold"``: each kernel starts with an empty L2.
* Writes still dirty in L2 when a kernel ends are not counted by Nsight Compute as DRAM
  writes. A predicted write is therefore scored as met when the measured writes are lower
  by at most the L2's capacity: ``adjusted = measured_read + clamp(predicted_write,
  measured_write, measured_write + L2)``, and the error is ``(predicted − adjusted) /
  adjusted``. Read errors are reported on their own as well (no allowance).
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass
from typing import Any

from .hardware import Profile
from .implementations import Options, options_for
from .model import compare
from .traffic import l2 as l2m
from .traffic.ledger import Kernel

#: measured kernel name patterns for each model kernel, per implementation
KERNEL_PATTERNS: dict[str, dict[str, str]] = {
    "standard": {
        "qk": r"gemm|nvjet|cutlass|sm\d+_xmma",
        "mask": r"elementwise|masked_fill",
        "softmax": r"softmax|SoftMax",
        "pv": r"gemm|nvjet|cutlass|sm\d+_xmma",
    },
    "sdpa-flash": {"fa2_fwd": r"flash_fwd_kernel", "fa2_splitkv": r"splitkv_kernel", "fa2_combine": r"combine"},
    "sdpa-cudnn": {"fa2_fwd": r"cudnn|sdpa", "fa2_splitkv": r"cudnn|sdpa", "fa2_combine": r"reduction"},
    "sdpa-efficient": {"fa2_fwd": r"fmha|cutlass"},
    "triton": {"fa2_fwd": r"attn|flash|fwd", "fa2_splitkv": r"attn|flash|fwd", "fa2_combine": r"combine"},
}


def case_options(case: Any, l2: str, ctas_per_sm: int | None = None, profile: Profile | None = None) -> Options:
    """How to model a measured case: its implementation (tiles, instructions, measured
    efficiency) and, when Nsight Compute reported it, the number of CTAs the kernel really
    ran per SM (its occupancy)."""
    if case.impl == "standard":
        return Options(l2=l2, implementation="paper")
    return options_for(
        case.impl,
        case.workload(),
        profile,
        block_q=case.block_q,
        block_kv=case.block_kv,
        l2=l2,
        ctas_per_sm=ctas_per_sm,
    )


def measured_ctas_per_sm(measured: list[Any], sm_count: int) -> int | None:
    """CTAs per SM of the largest measured kernel: grid / (waves per SM × SMs)."""
    best = max(measured, key=lambda k: k.metrics.get("launch__grid_size", 0), default=None)
    if best is None:
        return None
    grid = best.metrics.get("launch__grid_size", 0.0)
    waves = best.metrics.get("launch__waves_per_multiprocessor", 0.0)
    if not grid or not waves or waves != waves:
        return None
    return max(1, round(grid / (waves * sm_count)))


def predicted_kernels(case: Any, profile: Profile, l2: str = "cold", ctas_per_sm: int | None = None) -> list[Kernel]:
    c = compare(case.workload(), profile, case_options(case, l2, ctas_per_sm, profile))
    alg = c.standard if case.impl == "standard" else c.tiled
    return list(alg.traffic.kernels)


def compulsory_kernels(case: Any, profile: Profile) -> list[Kernel]:
    """The model's kernels with an infinite L2: each tensor a kernel touches, once."""
    from .model import tiled_traffic
    from .traffic.standard import standard

    opts = case_options(case, "cold", profile=profile)
    inf = l2m.L2("cold", float("inf"), profile.sm_count, float("inf"))
    if case.impl == "standard":
        return list(standard(case.workload(), inf).kernels)
    return list(tiled_traffic(case.workload(), profile, opts, inf).kernels)


@dataclass
class KernelScore:
    case: str
    kernel: str
    measured_name: str
    measured_read: float
    measured_write: float
    measured_l2: float
    predicted_read: float
    predicted_write: float
    predicted_l2: float
    paper_read: float
    paper_write: float
    compulsory_read: float
    compulsory_write: float
    l2_capacity: float

    def _adjusted(self, write: float) -> float:
        credit = min(max(write, self.measured_write), self.measured_write + self.l2_capacity)
        return self.measured_read + credit

    @staticmethod
    def _err(pred: float, meas: float) -> float:
        return (pred - meas) / meas if meas > 0 else (0.0 if pred == 0 else float("inf"))

    @property
    def error(self) -> float:
        return self._err(self.predicted_read + self.predicted_write, self._adjusted(self.predicted_write))

    @property
    def read_error(self) -> float:
        return self._err(self.predicted_read, self.measured_read)

    @property
    def paper_error(self) -> float:
        return self._err(self.paper_read + self.paper_write, self._adjusted(self.paper_write))

    @property
    def compulsory_error(self) -> float:
        return self._err(self.compulsory_read + self.compulsory_write, self._adjusted(self.compulsory_write))

    @property
    def l2_error(self) -> float:
        return self._err(self.predicted_l2, self.measured_l2)

    def to_dict(self) -> dict[str, Any]:
        return {
            "case": self.case,
            "kernel": self.kernel,
            "measured_kernel": self.measured_name,
            "measured_hbm_read_bytes": self.measured_read,
            "measured_hbm_write_bytes": self.measured_write,
            "measured_l2_bytes": self.measured_l2,
            "predicted_hbm_read_bytes": self.predicted_read,
            "predicted_hbm_write_bytes": self.predicted_write,
            "predicted_l2_bytes": self.predicted_l2,
            "paper_hbm_bytes": self.paper_read + self.paper_write,
            "compulsory_hbm_bytes": self.compulsory_read + self.compulsory_write,
            "error": self.error,
            "read_error": self.read_error,
            "paper_error": self.paper_error,
            "compulsory_error": self.compulsory_error,
            "l2_error": self.l2_error,
        }


def match_kernels(impl: str, model: list[Kernel], measured: list[Any]) -> list[tuple[Kernel, Any]]:
    """Pair each model kernel with the next measured kernel whose name fits, in launch order.
    Measured kernels that fit no model kernel (fills, copies) are skipped."""
    patterns = KERNEL_PATTERNS[impl]
    pairs = []
    i = 0
    for k in model:
        pattern = re.compile(patterns.get(k.name, r"$^"))
        while i < len(measured) and not pattern.search(measured[i].name):
            i += 1
        if i == len(measured):
            raise ValueError(f"no measured kernel for model kernel {k.name!r} ({impl})")
        pairs.append((k, measured[i]))
        i += 1
    return pairs


def score_case(case: Any, measured: list[Any], profile: Profile) -> list[KernelScore]:
    occupancy = None if case.impl == "standard" else measured_ctas_per_sm(measured, profile.sm_count)
    model = predicted_kernels(case, profile, "cold", occupancy)
    paper = predicted_kernels(case, profile, "off")
    comp = compulsory_kernels(case, profile)
    out = []
    for (k, m), p, c in zip(match_kernels(case.impl, model, measured), paper, comp):
        out.append(
            KernelScore(
                case=case.id,
                kernel=k.name,
                measured_name=m.name,
                measured_read=m.dram_read_bytes,
                measured_write=m.dram_write_bytes,
                measured_l2=m.l2_bytes,
                predicted_read=float(k.bytes(level="hbm", direction="read")),
                predicted_write=float(k.bytes(level="hbm", direction="write")),
                predicted_l2=float(k.bytes(level="l2")),
                paper_read=float(p.bytes(level="hbm", direction="read")),
                paper_write=float(p.bytes(level="hbm", direction="write")),
                compulsory_read=float(c.bytes(level="hbm", direction="read")),
                compulsory_write=float(c.bytes(level="hbm", direction="write")),
                l2_capacity=profile.l2.capacity_bytes,
            )
        )
    return out


def summary(scores: list[KernelScore]) -> dict[str, Any]:
    def stats(values: list[float]) -> dict[str, float]:
        a = [abs(v) for v in values]
        return {"median_abs": statistics.median(a), "max_abs": max(a)} if a else {"median_abs": 0.0, "max_abs": 0.0}

    return {
        "kernels": len(scores),
        "model": stats([s.error for s in scores]),
        "model_reads": stats([s.read_error for s in scores]),
        "paper": stats([s.paper_error for s in scores]),
        "compulsory": stats([s.compulsory_error for s in scores]),
    }


# ---------------------------------------------------------------------------------------
# Time


def predicted_times(case: Any, profile: Profile, ctas_per_sm: int | None = None) -> dict[str, Any]:
    """The model's times for a case (L2 on: the timing loop runs warm), per measured step."""
    c = compare(case.workload(), profile, case_options(case, "on", ctas_per_sm, profile))
    ev = c.standard if case.impl == "standard" else c.tiled
    kernels = {k.name: float(k.time_s) for k in ev.timing.kernels}
    steps = kernels if case.impl == "standard" else {"attention": float(ev.timing.time_s)}
    if case.impl == "standard":
        work = {k.name: (int(k.bytes(level="hbm")), int(k.flops)) for k in ev.traffic.kernels}
    else:
        work = {"attention": (int(ev.traffic.hbm_bytes), int(ev.traffic.flops))}
    return {
        "time_s": float(ev.timing.time_s),
        "steps": steps,
        "kernels": kernels,
        "step_work": {name: {"hbm_bytes": b, "flops": f} for name, (b, f) in work.items()},
        "ceilings": {
            "hbm_bytes_per_s": profile.hbm.bandwidth_bytes_per_s,
            "matmul_flops_per_s": profile.peak_flops(case.dtype),
        },
        "bound": str(ev.timing.bound),
        "hbm_bytes": int(ev.traffic.hbm_bytes),
        "flops": int(ev.traffic.flops),
    }


def prediction_line(case: Any, profile: Profile) -> str:
    """One case's predictions as committed before measuring: each timed step's time (µs,
    L2 on, the model's own occupancy) and each kernel's HBM reads (bytes, L2 cold, as Nsight
    Compute measures)."""
    times = predicted_times(case, profile)["steps"]
    reads = {k.name: int(k.bytes(level="hbm", direction="read")) for k in predicted_kernels(case, profile, "cold")}
    steps = " ".join(f"{name}={t * 1e6:.1f}us" for name, t in times.items())
    return f"{case.id} {steps} | hbm_read " + " ".join(f"{name}={b}" for name, b in reads.items())


def time_errors(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """Per measured step: predicted vs measured time, error, achieved rates."""
    if entry.get("status") != "ok" or "timing" not in entry:
        return []
    pred = entry["predicted"]["steps"]
    out = []
    for step, measured in entry["timing"]["kernels"].items():
        if step not in pred or measured <= 0:
            continue
        row = {
            "step": step,
            "predicted_s": pred[step],
            "measured_s": measured,
            "error": (pred[step] - measured) / measured,
        }
        work = entry["predicted"].get("step_work", {}).get(step)
        ceilings = entry["predicted"].get("ceilings")
        if work and ceilings:
            # achieved rates: the model's HBM bytes and FLOPs over the measured time, and their
            # share of the profile's ceilings
            row["achieved_hbm_bytes_per_s"] = work["hbm_bytes"] / measured
            row["achieved_flops_per_s"] = work["flops"] / measured
            row["hbm_share"] = row["achieved_hbm_bytes_per_s"] / ceilings["hbm_bytes_per_s"]
            row["flops_share"] = row["achieved_flops_per_s"] / ceilings["matmul_flops_per_s"]
        out.append(row)
    return out


def _stats(values: list[float]) -> dict[str, float] | None:
    a = [abs(v) for v in values if v == v and abs(v) != float("inf")]
    if not a:
        return None
    return {"n": len(a), "median_abs": statistics.median(a), "max_abs": max(a)}


def summarize_record(data: dict[str, Any]) -> dict[str, Any]:
    """Median and max |error| of bytes (model, paper, compulsory) and of time, over all kernels."""
    byte_rows = [b for e in data.get("cases", []) for b in e.get("bytes", [])]
    time_rows = [t for e in data.get("cases", []) for t in time_errors(e)]
    statuses: dict[str, int] = {}
    for e in data.get("cases", []):
        statuses[e.get("status", "?")] = statuses.get(e.get("status", "?"), 0) + 1
    speedups = []
    by_workload: dict[str, dict[str, dict[str, Any]]] = {}
    for e in data.get("cases", []):
        if e.get("status") != "ok":
            continue
        key = str(e["case"]["id"]).split("/", 1)[-1]
        by_workload.setdefault(key, {})[e["case"]["impl"]] = e
    for key, impls in by_workload.items():
        if "standard" in impls and "sdpa-flash" in impls:
            s, t = impls["standard"], impls["sdpa-flash"]
            measured = s["timing"]["time_s"] / t["timing"]["time_s"]
            predicted = s["predicted"]["time_s"] / t["predicted"]["time_s"]
            speedups.append({"workload": key, "predicted": predicted, "measured": measured})
    return {
        "cases": statuses,
        "hbm_bytes": {
            "model": _stats([b["error"] for b in byte_rows]),
            "model_reads": _stats([b["read_error"] for b in byte_rows]),
            "paper": _stats([b["paper_error"] for b in byte_rows]),
            "compulsory": _stats([b["compulsory_error"] for b in byte_rows]),
        },
        "time": _stats([t["error"] for t in time_rows]),
        "speedups": speedups,
    }
