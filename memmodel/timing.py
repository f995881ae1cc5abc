"""Predicted time of each kernel from its ledger and a hardware profile.

Each kernel has one time term per unit that could bound it:

* ``matmul``  — matmul FLOPs at the dtype's peak (tensor cores; fp32 uses the non-tensor FP32 peak)
* ``softmax`` — other elementwise/reduction FLOPs at the FP32 peak
* ``exp``     — exponentials at the special-function-unit rate (the FP32 peak when the
  profile gives none, stated in the assumptions)
* ``hbm``, ``l2``, ``sram`` — bytes at that level over the level's bandwidth

Within a kernel the units overlap, so the kernel takes the largest term and is *bound* by
it (the roofline assumption). Kernels run one after another, so an algorithm takes the
sum of its kernels' times.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

import numpy as np

from . import intmath
from .hardware import Profile
from .traffic.ledger import LEVELS, AlgorithmTraffic, Kernel

Seconds = Union[float, np.ndarray]  # noqa: UP007
Label = Union[str, np.ndarray]  # noqa: UP007

#: dtype of the inputs -> key of the compute peak their matmuls run at
MATMUL_PEAK = {"fp32": "fp32", "tf32": "tf32", "fp16": "fp16", "bf16": "bf16", "fp8": "fp8"}


@dataclass(frozen=True)
class KernelTiming:
    name: str
    terms: dict[str, Seconds]
    time_s: Seconds
    bound: Label
    #: Grids only: ``bound`` as an int array indexing ``list(terms)`` (cheaper than comparing labels).
    bound_index: np.ndarray | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class AlgorithmTiming:
    kernels: tuple[KernelTiming, ...]
    time_s: Seconds
    bound: Label
    #: Grids only: ``bound`` as an int array ``bound_index`` indexing ``bound_labels``.
    bound_labels: tuple[str, ...] = field(default=(), repr=False, compare=False)
    bound_index: np.ndarray | None = field(default=None, repr=False, compare=False)


def assumptions(profile: Profile) -> list[str]:
    out = [
        "Within a kernel compute units and memory levels overlap: a kernel takes its largest term (roofline).",
        "Kernels run back to back: an algorithm's time is the sum of its kernels' times.",
        "Peaks are the profile's dense figures; no launch overhead or latency term.",
    ]
    if profile.exp_ops_per_s is None:
        out.append(f"{profile.name} gives no exp rate: exponentials are counted at the FP32 peak.")
    return out


def kernel_time(kernel: Kernel, profile: Profile, dtype: str) -> KernelTiming:
    terms: dict[str, Seconds] = {
        "matmul": intmath.to_float(kernel.matmul_flops) / profile.peak_flops(MATMUL_PEAK[dtype]),
        "softmax": intmath.to_float(kernel.softmax_flops) / profile.peak_flops("fp32"),
        "exp": intmath.to_float(kernel.exp_ops) / (profile.exp_ops_per_s or profile.peak_flops("fp32")),
    }
    bandwidth = profile.levels()
    for level in LEVELS:
        moved = kernel.bytes(level=level)
        if isinstance(moved, np.ndarray) or moved:
            terms[level] = intmath.to_float(moved) / bandwidth[level]
    names = list(terms)
    stacked = np.broadcast_arrays(*(np.asarray(v, dtype=np.float64) for v in terms.values()))
    table = np.stack(stacked)
    time = table.max(axis=0)
    index = table.argmax(axis=0)
    if time.ndim == 0:
        return KernelTiming(kernel.name, terms, float(time), names[int(index)])
    return KernelTiming(kernel.name, terms, time, np.asarray(names, dtype=object)[index], index)


def _labels(k: KernelTiming) -> set[str]:
    """The labels that bound ``k`` somewhere (on grids, found from the index, not the labels)."""
    if k.bound_index is None:
        return {str(x) for x in np.ravel(np.asarray(k.bound, dtype=object))}
    names = list(k.terms)
    return {names[i] for i in np.flatnonzero(np.bincount(k.bound_index.ravel(), minlength=len(names)))}


def _bound_by(k: KernelTiming, label: str) -> object:
    """Where ``k`` is bound by ``label``: a bool (array)."""
    if k.bound_index is None:
        return np.asarray(k.bound, dtype=object) == label
    names = list(k.terms)
    return k.bound_index == names.index(label) if label in names else False


def algorithm_time(algorithm: AlgorithmTraffic, profile: Profile, dtype: str) -> AlgorithmTiming:
    kernels = tuple(kernel_time(k, profile, dtype) for k in algorithm.kernels)
    total = sum((np.asarray(k.time_s, dtype=np.float64) for k in kernels), np.float64(0.0))
    # The algorithm is bound by what bounds the kernels that take most of its time.
    labels = sorted(set().union(*(_labels(k) for k in kernels)))
    share = np.stack(
        [
            sum(
                (np.where(_bound_by(k, label), k.time_s, 0.0) for k in kernels),
                np.float64(0.0),
            )
            * np.ones_like(total)
            for label in labels
        ]
    )
    best = share.argmax(axis=0)
    if np.ndim(total) == 0:
        return AlgorithmTiming(kernels, float(total), labels[int(best)])
    return AlgorithmTiming(kernels, total, np.asarray(labels, dtype=object)[best], tuple(labels), best)
