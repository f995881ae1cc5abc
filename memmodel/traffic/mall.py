"""The MALL level: what misses in an XCD's L2 on a GPU with a memory-side cache (AMD CDNA 3/4).

On MI300X-class GPUs the L2 is split into one slice per XCD (each XCD's CUs see only their own
4 MB) and a 256 MB Infinity Cache (the MALL, *memory attached last level*) sits in front of HBM,
shared by all of them. A ledger on such a profile has four levels: the loops' requests (``l2``),
what misses in the requesting XCD's slice (``mall``), what misses in the MALL (``hbm``), and the
LDS (``sram``). The traffic rules run twice with the same plan:

* against the MALL as the last level before HBM (the L2 the rules see has the MALL's capacity):
  their HBM rows are the ledger's HBM rows;
* against the *XCD view* (:func:`.l2.xcd_view`: one slice's capacity, no measured curve, and a
  tensor shared by a run of consecutive CTAs read once by each XCD holding some of them, since
  workgroups are dispatched round-robin over the XCDs): their HBM rows are the MALL rows.

:func:`with_mall` puts the second ledger's HBM rows into the first as ``mall`` rows, each between
its HBM row (a byte the MALL misses was missed by the L2 first) and its ``l2`` row (the requests).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from .ledger import MALL, AlgorithmTraffic, Kernel, Transfer


def _between(value: Any, low: Any, high: Any) -> Any:
    out = np.minimum(np.maximum(np.asarray(value, dtype=np.int64), np.asarray(low, dtype=np.int64)), high)
    if np.ndim(out) == 0 and not any(isinstance(v, np.ndarray) for v in (value, low, high)):
        return int(out)
    return np.asarray(out, dtype=np.int64)


def _kernel_with_mall(kernel: Kernel, view: Kernel) -> Kernel:
    if kernel.name != view.name or len(kernel.transfers) != len(view.transfers):  # pragma: no cover
        raise ValueError(f"the XCD view's kernel {view.name!r} does not match {kernel.name!r}")
    out: list[Transfer] = []
    before: Transfer | None = None
    for t, v in zip(kernel.transfers, view.transfers, strict=True):
        if (t.tensor, t.level, t.direction) != (v.tensor, v.level, v.direction):  # pragma: no cover
            raise ValueError(f"the XCD view's transfers of {kernel.name!r} do not match")
        if t.level == "hbm":
            # what the requesting XCD's slice misses: at least what the MALL misses, at most the
            # requests (the ``l2`` row a builder writes just before each HBM row)
            same = before is not None and (before.level, before.tensor, before.direction) == (
                "l2",
                t.tensor,
                t.direction,
            )
            high = before.bytes if same and before is not None else v.bytes
            out.append(dataclasses.replace(t, level=MALL, bytes=_between(v.bytes, t.bytes, high)))
        out.append(t)
        before = t
    return dataclasses.replace(kernel, transfers=tuple(out))


def with_mall(traffic: AlgorithmTraffic, view: AlgorithmTraffic) -> AlgorithmTraffic:
    """``traffic`` (the rules against the MALL as the last level) with a ``mall`` row beside each
    HBM row, from ``view`` (the same rules against the XCD view: module docstring)."""
    if len(traffic.kernels) != len(view.kernels):  # pragma: no cover - the same plan
        raise ValueError("the XCD view has other kernels")
    kernels = tuple(_kernel_with_mall(k, v) for k, v in zip(traffic.kernels, view.kernels, strict=True))
    return dataclasses.replace(traffic, kernels=kernels)
