"""FP8 K/V caches read by kernels that take K and V only in the dtype of Q: the cast a user runs
first (``k.to(q.dtype) * k_scale``, the same for V: PyTorch's scaled_dot_product_attention takes
no fp8 K/V), one elementwise kernel per tensor before the attention kernels, which then read the
16-bit copies (:func:`memmodel.implementations.kv_cache_path` says which kernels need it)."""

from __future__ import annotations

from .. import intmath
from ..workload import Workload
from .ledger import AlgorithmTraffic, Kernel, KernelBuilder

#: the kernels of the cast, one per tensor (ATen's elementwise copy with a scale multiply)
CAST_KERNELS = ("kv_cast_k", "kv_cast_v")


def kv_cast_kernels(w: Workload) -> list[Kernel]:
    """Cast K and V of ``w``'s FP8 cache (``w.kv_dtype``) to the dtype: each element read at
    the cache's bytes and written at the dtype's (B·H_kv·N_kv·d elements a tensor), one convert
    and one multiply by the per-tensor scale an element; none where ``w`` has no FP8 cache."""
    if w.kv_dtype is None:
        return []
    elements = intmath.mul(w.batch, w.kv_heads_, w.n_kv_, w.d)
    cached, cast = w.kv_bytes(), w.with_(kv_dtype=None).kv_bytes()
    out = []
    for name, tensor in zip(CAST_KERNELS, ("K", "V")):
        k = KernelBuilder(name)
        k.read(tensor, "input", cached, cached, "B·H_kv·N_kv·d·e_kv")
        k.write(f"{tensor}_cast", "intermediate", cast, "B·H_kv·N_kv·d·e")
        out.append(k.build(softmax_flops=intmath.mul(2, elements), op="fp8_cast"))
    return out


def with_kv_cast(traffic: AlgorithmTraffic, w: Workload) -> AlgorithmTraffic:
    """``traffic`` (computed on the 16-bit copies) with the cast of ``w``'s FP8 K/V cache first."""
    casts = kv_cast_kernels(w)
    if not casts:
        return traffic
    return AlgorithmTraffic(traffic.name, traffic.variant, (*casts, *traffic.kernels), traffic.params, traffic.facts)
