"""Hierarchical roofline: ceilings, ridge points, and the kernels of a workload placed on them.

* **Ceilings** come from the profile: one memory roof per level (HBM, L2, SRAM; aggregate
  bytes/s from :meth:`Profile.levels`) and one compute roof per peak the profile gives
  (FP32, TF32, FP16/BF16 and FP8 tensor cores; FP16 and BF16 share one roof when their
  peaks are equal), plus the special-function unit's exp rate, in exp/s.
* **Ridge points**: the intensity at which a memory roof meets a compute roof,
  peak / bandwidth (FLOP/B; exp/B for the exp unit).
* **Kernel points**: every kernel of the standard and tiled algorithms (and each
  algorithm's total) at its arithmetic intensity per level — FLOPs over the bytes that
  kernel moves at that level, ``None`` where its ledger has no bytes at the level. The
  performance a point is drawn at, its time and what bounds it are memmodel's prediction
  (:mod:`memmodel.timing`): performance = FLOPs / predicted time.

Plain Python; no plotting or terminal code here (see :mod:`memmodel.report`).
"""

from __future__ import annotations

from typing import Any

from .frozen import frozen
from .hardware import Profile
from .model import Comparison, Evaluated
from .timing import MATMUL_PEAK
from .traffic.ledger import LEVELS

#: How each memory level and compute peak is named for people.
LEVEL_LABELS = {"hbm": "HBM", "l2": "L2", "sram": "SRAM", "link": "link to a peer"}
COMPUTE_LABELS = {
    "fp32": "FP32",
    "tf32": "TF32 tensor",
    "fp16": "FP16 tensor",
    "bf16": "BF16 tensor",
    "fp16/bf16": "FP16/BF16 tensor",
    "fp8": "FP8 tensor",
    "exp": "exp (SFU)",
}
ROOFLINE_SCHEMA = "memmodel.roofline/1"

ASSUMPTIONS = (
    "A point's performance is its FLOPs (matmul + softmax; exponentials not counted) over memmodel's predicted time.",
    "Softmax FLOPs run on the FP32 units beside the tensor cores, so a matmul-bound kernel with softmax work "
    "can sit slightly above its tensor-core roof.",
    "The exp unit's roof is in exp/s; a kernel's exp ceiling in FLOP/s is that rate times its FLOPs per exp.",
    "Memory roofs are aggregate bandwidths: SRAM is the per-SM figure times the SM count.",
    "A kernel bound by 'compute' issues its matmuls, softmax and exponentials one after another "
    "(FlashAttention's fused loop): it is placed against its matmul roof, below it by the time the others take.",
    "A kernel bound by 'latency' keeps too few bytes in flight to reach the HBM bandwidth: its roof is HBM's.",
)


@frozen
class Ceiling:
    """One roof: a memory level's bandwidth or a compute unit's peak."""

    name: str  # "hbm", "l2", "sram", "fp32", "tf32", "fp16/bf16", "fp8", "exp", ...
    kind: str  # "memory" | "compute"
    value: float  # B/s for memory roofs; FLOP/s (exp/s for "exp") for compute roofs
    unit: str  # "B/s" | "FLOP/s" | "exp/s"
    dtypes: tuple[str, ...] = ()  # compute roofs: the profile's dtypes that run at this peak

    @property
    def label(self) -> str:
        return LEVEL_LABELS.get(self.name) or COMPUTE_LABELS.get(self.name, self.name)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "kind": self.kind,
            "label": self.label,
            "value": self.value,
            "unit": self.unit,
        }
        if self.kind == "compute":
            out["dtypes"] = list(self.dtypes)
        return out


@frozen
class RidgePoint:
    """Where memory roof ``memory`` meets compute roof ``compute``: intensity = peak / bandwidth."""

    memory: str
    compute: str
    intensity: float
    unit: str  # "FLOP/B", or "exp/B" for the exp unit

    def to_dict(self) -> dict[str, Any]:
        return {"memory": self.memory, "compute": self.compute, "intensity": self.intensity, "unit": self.unit}


@frozen
class KernelPoint:
    """A kernel (or an algorithm's ``total``) placed on the roofline of one GPU."""

    gpu: str
    algorithm: str  # "standard" | "tiled"
    variant: str  # "algorithm0" | "fa1" | "fa2"
    kernel: str  # kernel name, or "total" for the whole algorithm
    flops: int
    exp_ops: int
    bytes: dict[str, int]  # level -> bytes read + written at that level
    intensity: dict[str, float | None]  # level -> FLOP/B, None where the level has no bytes
    time_s: float
    performance_flops_per_s: float  # FLOPs / predicted time
    bound: str  # the timing term that bounds it: matmul, softmax, exp, hbm, l2, sram
    roof: str  # the ceiling that term runs against (e.g. "fp16/bf16" for matmul in fp16)
    exp_ceiling_flops_per_s: float | None  # exp rate × FLOPs per exp; None without exps

    @property
    def is_total(self) -> bool:
        return self.kernel == "total"

    def to_dict(self) -> dict[str, Any]:
        return {
            "algorithm": self.algorithm,
            "variant": self.variant,
            "kernel": self.kernel,
            "flops": self.flops,
            "exp_ops": self.exp_ops,
            "bytes": dict(self.bytes),
            "intensity": dict(self.intensity),
            "predicted_time_s": self.time_s,
            "attainable_flops_per_s": self.performance_flops_per_s,
            "bound": self.bound,
            "roof": self.roof,
            "exp_ceiling_flops_per_s": self.exp_ceiling_flops_per_s,
        }


@frozen
class Roofline:
    """The roofline of one GPU, with the kernels of one workload on it."""

    profile: Profile
    ceilings: tuple[Ceiling, ...]
    ridge_points: tuple[RidgePoint, ...]
    points: tuple[KernelPoint, ...]
    comparison: Comparison | None = None

    def ceiling(self, name: str) -> Ceiling:
        for c in self.ceilings:
            if c.name == name:
                return c
        raise KeyError(name)

    @property
    def memory_ceilings(self) -> tuple[Ceiling, ...]:
        return tuple(c for c in self.ceilings if c.kind == "memory")

    @property
    def compute_ceilings(self) -> tuple[Ceiling, ...]:
        return tuple(c for c in self.ceilings if c.kind == "compute")

    def ridge(self, memory: str, compute: str) -> float:
        for r in self.ridge_points:
            if r.memory == memory and r.compute == compute:
                return r.intensity
        raise KeyError((memory, compute))


def ceilings(profile: Profile) -> tuple[Ceiling, ...]:
    """The profile's roofs: memory levels (slowest first), then compute peaks (FP32 first), then exp."""
    out = [Ceiling(level, "memory", bw, "B/s") for level, bw in profile.levels().items()]
    peaks = dict(profile.compute_flops_per_s)
    if "fp16" in peaks and "bf16" in peaks and peaks["fp16"] == peaks["bf16"]:
        merged: list[tuple[str, float, tuple[str, ...]]] = []
        for dtype, value in peaks.items():
            if dtype == "fp16":
                merged.append(("fp16/bf16", value, ("fp16", "bf16")))
            elif dtype != "bf16":
                merged.append((dtype, value, (dtype,)))
    else:
        merged = [(dtype, value, (dtype,)) for dtype, value in peaks.items()]
    out += [Ceiling(name, "compute", value, "FLOP/s", dtypes) for name, value, dtypes in merged]
    if profile.exp_ops_per_s is not None:
        out.append(Ceiling("exp", "compute", profile.exp_ops_per_s, "exp/s", ()))
    return tuple(out)


def ridge_points(roofs: tuple[Ceiling, ...]) -> tuple[RidgePoint, ...]:
    """Every memory roof against every compute roof: peak / bandwidth."""
    memory = [c for c in roofs if c.kind == "memory"]
    compute = [c for c in roofs if c.kind == "compute"]
    return tuple(
        RidgePoint(m.name, c.name, c.value / m.value, "exp/B" if c.unit == "exp/s" else "FLOP/B")
        for m in memory
        for c in compute
    )


def roof_of(bound: str, profile: Profile, dtype: str, roofs: tuple[Ceiling, ...]) -> str:
    """The ceiling that the timing term ``bound`` runs against (see :mod:`memmodel.timing`)."""
    if bound in LEVELS:
        return bound
    if bound == "latency":  # too few bytes in flight to reach HBM bandwidth (Little's law)
        return "hbm"
    if bound in ("matmul", "compute"):  # "compute": a fused kernel's matmul, softmax and exp in series
        wanted = MATMUL_PEAK[dtype]
    elif bound == "exp" and profile.exp_ops_per_s is not None:
        return "exp"
    else:  # softmax, or exp on a profile without an exp rate (timed at the FP32 peak)
        wanted = "fp32"
    for c in roofs:
        if c.kind == "compute" and wanted in c.dtypes:
            return c.name
    return wanted  # pragma: no cover - compare() has already refused a dtype without a peak


def _point(
    gpu: str,
    ev: Evaluated,
    owner: Any,
    timing: Any,
    kernel: str,
    profile: Profile,
    dtype: str,
    roofs: tuple[Ceiling, ...],
) -> KernelPoint:
    flops = int(owner.flops)
    exps = int(owner.exp_ops)
    moved = {level: int(owner.bytes(level=level)) for level in LEVELS}
    time_s = float(timing.time_s)
    bound = str(timing.bound)
    exp_rate = profile.exp_ops_per_s or profile.peak_flops("fp32")
    return KernelPoint(
        gpu=gpu,
        algorithm=ev.traffic.name,
        variant=ev.traffic.variant,
        kernel=kernel,
        flops=flops,
        exp_ops=exps,
        bytes=moved,
        intensity={level: (flops / b if b else None) for level, b in moved.items()},
        time_s=time_s,
        performance_flops_per_s=flops / time_s if time_s > 0 else 0.0,
        bound=bound,
        roof=roof_of(bound, profile, dtype, roofs),
        exp_ceiling_flops_per_s=exp_rate * flops / exps if exps else None,
    )


def kernel_points(comparison: Comparison, roofs: tuple[Ceiling, ...] | None = None) -> tuple[KernelPoint, ...]:
    """Each kernel of the standard and tiled algorithms, then each algorithm's total."""
    if comparison.workload.is_grid:
        raise ValueError("a roofline places one workload; evaluate grids with memmodel.sweep")
    profile, dtype = comparison.profile, comparison.workload.dtype
    roofs = roofs if roofs is not None else ceilings(profile)
    out = []
    mode = comparison.options.timing
    for ev in comparison.algorithms:
        for kernel, timing in zip(ev.traffic.kernels, ev.timing.kernels):
            out.append(_point(profile.name, ev, kernel, timing, kernel.name, profile, dtype, roofs))
        # the total at the comparison's timing (--timing): a user's call, say, beside its kernels
        total = ev.timing if mode == "kernel" else _Timed(ev.time_s(mode), ev.timing.bound)
        out.append(_point(profile.name, ev, _Total(ev), total, "total", profile, dtype, roofs))
    return tuple(out)


@frozen
class _Timed:
    """A time and what bounds it: an algorithm's total under a timing mode other than kernel."""

    time_s: float
    bound: Any


class _Total:
    """An algorithm seen as one kernel: its FLOPs, exps and bytes."""

    def __init__(self, ev: Evaluated) -> None:
        self._t = ev.traffic

    @property
    def flops(self) -> Any:
        return self._t.flops

    @property
    def exp_ops(self) -> Any:
        return self._t.exp_ops

    def bytes(self, **match: str) -> Any:
        return self._t.bytes(**match)


def roofline(profile: Profile, comparison: Comparison | None = None, *, link: bool = False) -> Roofline:
    """The roofline of ``profile``, with the kernels of ``comparison`` (if given) placed on it;
    ``link`` adds the interconnect's per-direction bandwidth to one peer as a memory roof
    (where the profile has one): a context-parallel step whose FLOPs per byte sent lie left of
    its ridge point cannot hide its messages behind its compute."""
    if comparison is not None and comparison.profile is not profile:
        raise ValueError("the comparison was made on another profile")
    roofs = ceilings(profile)
    if link and profile.interconnect is not None:
        roofs = (Ceiling("link", "memory", profile.interconnect.peer_bandwidth_bytes_per_s(), "B/s"), *roofs)
    points = kernel_points(comparison, roofs) if comparison is not None else ()
    return Roofline(profile, roofs, ridge_points(roofs), points, comparison)
