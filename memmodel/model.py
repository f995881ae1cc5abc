"""The comparison that ``memmodel compare`` prints: standard vs tiled on one workload and GPU."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from . import intmath
from .errors import WorkloadError
from .hardware import Profile
from .timing import AlgorithmTiming, algorithm_time, assumptions
from .traffic.flash import block_sizes, fa1_forward, fa2_forward
from .traffic.ledger import AlgorithmTraffic
from .traffic.standard import standard_forward
from .workload import Workload

TILED_VARIANTS = ("fa1", "fa2")
COMPARE_SCHEMA = "memmodel.compare/1"


@dataclass(frozen=True)
class Evaluated:
    """An algorithm's ledger and its predicted timing."""

    traffic: AlgorithmTraffic
    timing: AlgorithmTiming


@dataclass(frozen=True)
class Comparison:
    workload: Workload
    profile: Profile
    standard: Evaluated
    tiled: Evaluated
    assumptions: tuple[str, ...]
    warnings: tuple[str, ...] = ()

    @property
    def algorithms(self) -> tuple[Evaluated, ...]:
        return (self.standard, self.tiled)

    def ratios(self) -> dict[str, Any]:
        """standard / tiled for HBM bytes, FLOPs and predicted time."""
        s, t = self.standard, self.tiled

        def ratio(a: Any, b: Any) -> Any:
            out = np.asarray(intmath.to_float(a)) / np.asarray(intmath.to_float(b))
            return float(out) if out.ndim == 0 else out

        return {
            "hbm_bytes": ratio(s.traffic.hbm_bytes, t.traffic.hbm_bytes),
            "flops": ratio(s.traffic.flops, t.traffic.flops),
            "predicted_time_s": ratio(s.timing.time_s, t.timing.time_s),
        }


def tiled_traffic(
    workload: Workload, profile: Profile, variant: str = "fa2", block_q: int | None = None, block_kv: int | None = None
) -> AlgorithmTraffic:
    if variant not in TILED_VARIANTS:
        raise WorkloadError(f"unknown tiled variant {variant!r}: accepted are {', '.join(TILED_VARIANTS)}")
    blocks = block_sizes(workload, profile.sram.capacity_per_sm_bytes, block_q, block_kv)
    return fa1_forward(workload, blocks) if variant == "fa1" else fa2_forward(workload, blocks)


def compare(
    workload: Workload,
    profile: Profile,
    *,
    tiled: str = "fa2",
    block_q: int | None = None,
    block_kv: int | None = None,
) -> Comparison:
    """Standard (Algorithm 0) and tiled attention on ``workload``, predicted on ``profile``."""
    profile.peak_flops(workload.dtype if workload.dtype != "fp32" else "fp32")  # fail early, clearly
    std = standard_forward(workload)
    til = tiled_traffic(workload, profile, tiled, block_q, block_kv)
    return Comparison(
        workload=workload,
        profile=profile,
        standard=Evaluated(std, algorithm_time(std, profile, workload.dtype)),
        tiled=Evaluated(til, algorithm_time(til, profile, workload.dtype)),
        assumptions=tuple(assumptions(profile)),
        warnings=tuple(capacity_warnings(workload, profile)),
    )


def capacity_warnings(workload: Workload, profile: Profile) -> list[str]:
    """Say when a workload could not be held in the GPU's HBM (scalar workloads only)."""
    if workload.is_grid:
        return []
    from .units import format_bytes

    cap = profile.hbm.capacity_bytes
    tensors = intmath.add(intmath.mul(2, workload.q_bytes()), intmath.mul(2, workload.kv_bytes()))
    s = intmath.mul(workload.batch, workload.heads, workload.n, workload.n_kv_, workload.element_bytes)
    out = []
    if tensors > cap:
        out.append(
            f"Q, K, V and O alone ({format_bytes(float(tensors))}) exceed the HBM of {profile.name} "
            f"({format_bytes(cap)}): no single GPU runs this workload as given."
        )
    elif intmath.add(tensors, s) > cap:
        out.append(
            f"standard attention's S ({format_bytes(float(s))}) does not fit beside Q, K, V, O in the HBM "
            f"of {profile.name} ({format_bytes(cap)}); only the tiled algorithm runs this workload."
        )
    return out
