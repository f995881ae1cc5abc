"""memmodel's own FlashAttention-2 style forward kernel, in Triton.

The point of this kernel is that memmodel, not a library heuristic, sets its tiling, so the
model's block-size predictions can be tested against it. What the model may rely on:

Grid and loop order
    One program per (Q block, batch·head): ``grid = (ceil(N / block_q), B·H)``, the Q-block
    index is ``program_id(0)``, the fastest-varying grid index, so the Q blocks of one head are
    launched next to each other (and share that head's K/V in L2 while they run).
    Each program:

    1. loads its Q block (``block_q × d``) once, into on-chip memory;
    2. loops over the K/V blocks of the kv head ``h // (H / H_kv)`` in order, ``block_kv``
       rows at a time (K and V each read once per Q block, so K/V are read
       ``ceil(N / block_q)`` times per query head from L2/HBM in total, the ``H / H_kv``
       query heads of a GQA group each reading their kv head); for each: ``S = Q Kᵀ``,
       online softmax (running max and sum in fp32, ``exp2`` with the 1/√d scale folded into
       the log2(e) factor), ``O += P V`` in an fp32 accumulator;
    3. writes O (``block_q × d``, input dtype) once and the logsumexp (fp32) once.

    Q block ``i`` is ``program_id(0) = i`` (no reordering, also not for causal load balance).
    No S or P ever goes to global memory. There is no split over K/V (no split-K reduction),
    no persistent loop, and no atomics: each program owns its output rows.

Causal masking
    Top-left aligned, as torch's ``scaled_dot_product_attention(is_causal=True)``: query row
    ``i`` sees key ``j`` iff ``j <= i``. A Q block starting at row ``m0`` visits the K/V blocks
    up to ``min(m0 + block_q, N_kv)`` only; fully masked K/V blocks are skipped (never read).
    The K/V blocks entirely below the diagonal run without mask arithmetic; only the blocks
    crossing the diagonal (and a ragged last block, when ``N_kv`` is not a multiple of
    ``block_kv``) are masked.

Tile sizes
    ``launch_config(d, dtype, causal)`` gives the defaults used when a caller passes none; they
    were picked with ``benchmarks/bench_triton_fa.py`` on an H200 (``benchmarks/NOTES-triton.md``).
    On a GPU with less shared memory per block, the unset parameters are shrunk to fit;
    ``launch_config`` with ``attention``'s arguments and ``max_smem_bytes`` says which tiling a
    run used. ``smem_bytes`` gives the shared memory a config takes.

Only the GPU commands (and the interpreter tests) import this module: it imports torch and
triton at the top, and ``import memmodel`` never imports it.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch
import triton
import triton.language as tl

from ..errors import WorkloadError
from ..implementations import TRITON_DEFAULTS, TRITON_DEFAULTS_CAUSAL

#: head dimensions the kernel accepts (the whole head is one tile: ``tl.arange`` needs a power of 2)
HEAD_DIMS = (16, 32, 64, 128, 256)

_DTYPE_NAMES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}
_DTYPE_BYTES = {"fp16": 2, "bf16": 2, "fp32": 4}

#: grid dimension 1 (batch·heads) is limited by CUDA's gridDim.y
_MAX_GRID_Y = 65535

_LOG2E = 1.4426950408889634


# ---------------------------------------------------------------------------------------
# Launch configuration

# Defaults per head dim: memmodel.implementations (pure, so compare --impl triton uses them too).
_DEFAULTS = TRITON_DEFAULTS
_DEFAULTS_CAUSAL = TRITON_DEFAULTS_CAUSAL

#: shared memory one program may take on Hopper (H100/H200: 227 KiB opt-in per block)
HOPPER_MAX_SMEM_BYTES = 232448


def _is_pow2(x: int) -> bool:
    return x > 0 and (x & (x - 1)) == 0


def _dtype_name(dtype: Any) -> str:
    if isinstance(dtype, str):
        name = dtype
    else:
        name = _DTYPE_NAMES.get(dtype, str(dtype))
    if name not in _DTYPE_BYTES:
        raise WorkloadError(f"triton kernel dtype {dtype!r} is not supported: accepted are fp16, bf16, fp32")
    return name


def _check_head_dim(d: int) -> None:
    if d not in HEAD_DIMS:
        raise WorkloadError(
            f"triton kernel head dim d={d} is not supported: accepted are {', '.join(map(str, HEAD_DIMS))}"
        )


def launch_config(
    d: int,
    dtype: Any = "fp16",
    causal: bool = False,
    *,
    block_q: int | None = None,
    block_kv: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
    max_smem_bytes: int | None = None,
) -> dict[str, int]:
    """The tiling ``attention`` runs with: ``{"block_q", "block_kv", "num_warps", "num_stages"}``.

    With only ``d``, ``dtype`` (a torch dtype or ``"fp16"``, ``"bf16"``, ``"fp32"``) and
    ``causal``: the defaults, tuned on an H200. Parameters the caller sets are kept as given; the
    others start from the defaults and, where the config needs more shared memory
    (``smem_bytes``) than ``max_smem_bytes`` (default: Hopper's 227 KiB), are shrunk in this
    order until it fits: pipeline stages down to 2, ``block_kv`` down to 32, ``block_q`` down to
    64, ``block_kv`` to 16, one stage. ``num_warps`` left unset is the default's for
    ``block_q`` ≥ 128 and 4 for smaller Q blocks. ``attention`` passes the limit of the GPU it
    runs on (``device_max_smem_bytes``) and its own arguments, so this call with the same
    arguments says which tiling a measurement used.
    """
    _check_head_dim(d)
    name = _dtype_name(dtype)
    for label, value in (("block_q", block_q), ("block_kv", block_kv)):
        if value is not None and (value < 16 or not _is_pow2(value)):
            raise WorkloadError(f"{label}={value} must be a power of 2, at least 16")
    if num_warps is not None and not (_is_pow2(num_warps) and num_warps <= 16):
        raise WorkloadError(f"num_warps={num_warps} must be 1, 2, 4, 8 or 16")
    if num_stages is not None and num_stages < 1:
        raise WorkloadError(f"num_stages={num_stages} must be at least 1")
    bq, bkv, warps, stages = (_DEFAULTS_CAUSAL if causal else _DEFAULTS)[d]
    if name == "fp32":  # 4-byte elements: half the K/V tile keeps the bytes per stage
        bkv = max(16, bkv // 2)
    bq, bkv, stages = block_q or bq, block_kv or bkv, num_stages or stages
    limit = HOPPER_MAX_SMEM_BYTES if max_smem_bytes is None else max_smem_bytes
    while smem_bytes(bq, bkv, d, name, stages) > limit:
        if num_stages is None and stages > 2:
            stages -= 1
        elif block_kv is None and bkv > 32:
            bkv //= 2
        elif block_q is None and bq > 64:
            bq //= 2
        elif block_kv is None and bkv > 16:
            bkv //= 2
        elif num_stages is None and stages > 1:
            stages -= 1
        else:
            break  # nothing left to shrink: the compiler reports what it lacks
    if num_warps is None:
        num_warps = warps if bq >= 128 else 4
    return {"block_q": bq, "block_kv": bkv, "num_warps": num_warps, "num_stages": stages}


def device_max_smem_bytes(device: Any = None) -> int | None:
    """Shared memory one program may use on ``device`` (a CUDA device), from Triton's driver;
    None under the interpreter or where the driver does not say."""
    if _INTERPRETED:
        return None
    index = torch.device(device).index if device is not None else None
    if index is None:
        index = torch.cuda.current_device()
    return _device_max_smem(index)


@functools.cache
def _device_max_smem(index: int) -> int | None:
    try:
        return int(triton.runtime.driver.active.utils.get_device_properties(index)["max_shared_mem"])
    except Exception:
        return None


def smem_bytes(block_q: int, block_kv: int, d: int, dtype: Any, num_stages: int) -> int:
    """Estimated shared memory of one program, in bytes: the Q tile plus ``num_stages`` buffers
    of the K and the V tile (Triton's software pipeline keeps one buffer per stage).

    Not counted: P (kept in registers as the A operand of the second matmul on Hopper) and
    Triton's scratch for layout conversions and reductions (which reuses these buffers). On an
    H200 with triton 3.6 this equalled the compiler's figure for all 107 fp16 configs of the
    tuning sweep (d 16 to 256; ``benchmarks/bench_triton_fa.py`` prints both).
    """
    esize = _DTYPE_BYTES[_dtype_name(dtype)]
    return block_q * d * esize + num_stages * 2 * block_kv * d * esize


# ---------------------------------------------------------------------------------------
# Kernel


@triton.jit
def _attn_fwd_inner(
    acc,
    l_i,
    m_i,
    q,
    k_ptrs,
    v_ptrs,
    stride_kn,
    stride_vn,
    lo,
    hi,
    offs_m,
    offs_n,
    n_kv,
    qk_scale,
    BLOCK_KV: tl.constexpr,
    MASKED: tl.constexpr,
    CAUSAL: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
):
    """K/V blocks [lo, hi) of one Q block; k_ptrs/v_ptrs point at row ``lo``.

    UPCAST_DOT is for Triton's interpreter only: its ``tl.dot`` multiplies bf16 operands as
    their raw uint16 bits (triton 3.9), so there bf16 tiles are widened to fp32 first, which
    gives the products the GPU's bf16 MMA gives (exact products, fp32 accumulation).
    """
    for start_n in tl.range(lo, hi, BLOCK_KV):
        start_n = tl.multiple_of(start_n, BLOCK_KV)
        if MASKED:
            cols = start_n + offs_n
            k = tl.load(k_ptrs, mask=cols[:, None] < n_kv, other=0.0)
        else:
            k = tl.load(k_ptrs)
        if UPCAST_DOT:
            qk = tl.dot(q.to(tl.float32), tl.trans(k).to(tl.float32))
        else:
            qk = tl.dot(q, tl.trans(k))
        if MASKED:
            keep = cols[None, :] < n_kv
            if CAUSAL:
                keep = keep & (cols[None, :] <= offs_m[:, None])
            qk = tl.where(keep, qk * qk_scale, float("-inf"))
            m_ij = tl.maximum(m_i, tl.max(qk, 1))
            qk = qk - m_ij[:, None]
        else:
            m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            qk = qk * qk_scale - m_ij[:, None]
        p = tl.math.exp2(qk)
        alpha = tl.math.exp2(m_i - m_ij)
        l_ij = tl.sum(p, 1)
        acc = acc * alpha[:, None]
        if MASKED:
            v = tl.load(v_ptrs, mask=cols[:, None] < n_kv, other=0.0)
        else:
            v = tl.load(v_ptrs)
        if UPCAST_DOT:
            acc = tl.dot(p.to(v.dtype).to(tl.float32), v.to(tl.float32), acc)
        else:
            acc = tl.dot(p.to(v.dtype), v, acc)
        l_i = l_i * alpha + l_ij
        m_i = m_ij
        k_ptrs += BLOCK_KV * stride_kn
        v_ptrs += BLOCK_KV * stride_vn
    return acc, l_i, m_i


@triton.jit
def _attn_fwd(
    Q,
    K,
    V,
    Out,
    LSE,
    stride_qb,
    stride_qh,
    stride_qm,
    stride_kb,
    stride_kh,
    stride_kn,
    stride_vb,
    stride_vh,
    stride_vn,
    stride_ob,
    stride_oh,
    stride_om,
    H,
    GROUP,
    N,
    N_KV,
    qk_scale,
    HEAD_DIM: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    BLOCK_KV: tl.constexpr,
    CAUSAL: tl.constexpr,
    EVEN_Q: tl.constexpr,
    EVEN_KV: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
):
    start_m = tl.program_id(0)  # Q block: fastest grid index
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    hk = h // GROUP

    q_base = Q + b.to(tl.int64) * stride_qb + h.to(tl.int64) * stride_qh
    k_base = K + b.to(tl.int64) * stride_kb + hk.to(tl.int64) * stride_kh
    v_base = V + b.to(tl.int64) * stride_vb + hk.to(tl.int64) * stride_vh
    o_base = Out + b.to(tl.int64) * stride_ob + h.to(tl.int64) * stride_oh
    lse_base = LSE + bh.to(tl.int64) * N

    m0 = start_m * BLOCK_Q
    offs_m = m0 + tl.arange(0, BLOCK_Q)
    offs_n = tl.arange(0, BLOCK_KV)
    offs_d = tl.arange(0, HEAD_DIM)

    q_ptrs = q_base + offs_m[:, None] * stride_qm + offs_d[None, :]
    if EVEN_Q:
        q = tl.load(q_ptrs)
    else:
        q = tl.load(q_ptrs, mask=offs_m[:, None] < N, other=0.0)

    m_i = tl.full([BLOCK_Q], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_Q], dtype=tl.float32)
    acc = tl.zeros([BLOCK_Q, HEAD_DIM], dtype=tl.float32)

    k_ptrs = k_base + offs_n[:, None] * stride_kn + offs_d[None, :]
    v_ptrs = v_base + offs_n[:, None] * stride_vn + offs_d[None, :]

    # K/V rows [0, full_end) need no mask; [full_end, kv_end) cross the diagonal or the ragged end.
    if CAUSAL:
        kv_end = tl.minimum(m0 + BLOCK_Q, N_KV)
        full_end = tl.minimum((m0 + 1) // BLOCK_KV, N_KV // BLOCK_KV) * BLOCK_KV
    else:
        kv_end = N_KV
        if EVEN_KV:
            full_end = N_KV
        else:
            full_end = (N_KV // BLOCK_KV) * BLOCK_KV

    acc, l_i, m_i = _attn_fwd_inner(
        acc, l_i, m_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn, 0, full_end,
        offs_m, offs_n, N_KV, qk_scale, BLOCK_KV, False, CAUSAL, UPCAST_DOT,
    )  # fmt: skip
    if CAUSAL or not EVEN_KV:
        acc, l_i, m_i = _attn_fwd_inner(
            acc, l_i, m_i, q, k_ptrs + full_end * stride_kn, v_ptrs + full_end * stride_vn,
            stride_kn, stride_vn, full_end, kv_end, offs_m, offs_n, N_KV, qk_scale, BLOCK_KV, True, CAUSAL, UPCAST_DOT,
        )  # fmt: skip

    acc = acc / l_i[:, None]
    lse = (m_i + tl.math.log2(l_i)) * 0.6931471805599453  # log2 domain -> natural log

    o_ptrs = o_base + offs_m[:, None] * stride_om + offs_d[None, :]
    if EVEN_Q:
        tl.store(o_ptrs, acc.to(Out.dtype.element_ty))
        tl.store(lse_base + offs_m, lse)
    else:
        tl.store(o_ptrs, acc.to(Out.dtype.element_ty), mask=offs_m[:, None] < N)
        tl.store(lse_base + offs_m, lse, mask=offs_m < N)


#: True under TRITON_INTERPRET=1 (the CPU tests): triton.jit then gives an InterpretedFunction
_INTERPRETED = type(_attn_fwd).__name__ == "InterpretedFunction"


# ---------------------------------------------------------------------------------------
# Entry point


def attention(
    q: Any,
    k: Any,
    v: Any,
    *,
    causal: bool = False,
    block_q: int | None = None,
    block_kv: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
    return_lse: bool = False,
) -> Any:
    """Softmax(Q Kᵀ / √d) V, FlashAttention-2 style, in one kernel launch.

    ``q`` is ``[B, H, N, d]``, ``k`` and ``v`` are ``[B, H_kv, N_kv, d]`` with ``H_kv`` dividing
    ``H`` (GQA/MQA: query head ``h`` uses kv head ``h // (H / H_kv)``); fp16, bf16 or fp32 (fp32
    dots run as tf32 on the GPU). Returns ``O`` ``[B, H, N, d]`` in the input dtype, and with
    ``return_lse`` also the logsumexp of each row of ``QKᵀ/√d`` (fp32 ``[B, H, N]``), as
    ``(O, lse)``. Unset tile parameters come from ``launch_config`` (fitted to the device's
    shared memory per block).
    """
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise WorkloadError("q, k and v must be 4-D: [batch, heads, seq, head_dim]")
    batch, heads, n, d = q.shape
    if tuple(k.shape) != tuple(v.shape):
        raise WorkloadError(f"k {tuple(k.shape)} and v {tuple(v.shape)} must have the same shape")
    kb, kv_heads, n_kv, kd = k.shape
    if kb != batch or kd != d:
        raise WorkloadError(f"k/v {tuple(k.shape)} do not match q {tuple(q.shape)} in batch or head dim")
    if kv_heads < 1 or heads % kv_heads:
        raise WorkloadError(f"kv heads ({kv_heads}) must divide query heads ({heads})")
    if q.dtype != k.dtype or q.dtype != v.dtype:
        raise WorkloadError(f"q, k and v must have one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if q.device != k.device or q.device != v.device:
        raise WorkloadError("q, k and v must be on one device")
    _check_head_dim(d)
    dtype = _dtype_name(q.dtype)
    if n < 1 or n_kv < 1 or batch < 1:
        raise WorkloadError(f"empty attention: batch {batch}, N {n}, N_kv {n_kv}")
    if batch * heads > _MAX_GRID_Y:
        raise WorkloadError(f"batch·heads = {batch * heads} is over the kernel's grid limit {_MAX_GRID_Y}")

    cfg = launch_config(
        d,
        dtype,
        causal,
        block_q=block_q,
        block_kv=block_kv,
        num_warps=num_warps,
        num_stages=num_stages,
        max_smem_bytes=device_max_smem_bytes(q.device) if q.is_cuda else None,
    )
    block_q, block_kv = cfg["block_q"], cfg["block_kv"]

    # the head dim must be contiguous (16-byte vector loads); other strides are free
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    o = torch.empty((batch, heads, n, d), dtype=q.dtype, device=q.device)
    lse = torch.empty((batch, heads, n), dtype=torch.float32, device=q.device)

    grid = (triton.cdiv(n, block_q), batch * heads)
    _attn_fwd[grid](
        q, k, v, o, lse,
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        o.stride(0), o.stride(1), o.stride(2),
        heads, heads // kv_heads, n, n_kv,
        _LOG2E / math.sqrt(d),
        HEAD_DIM=d,
        BLOCK_Q=block_q,
        BLOCK_KV=block_kv,
        CAUSAL=bool(causal),
        EVEN_Q=n % block_q == 0,
        EVEN_KV=n_kv % block_kv == 0,
        UPCAST_DOT=_INTERPRETED and dtype == "bf16",
        num_warps=cfg["num_warps"],
        num_stages=cfg["num_stages"],
    )  # fmt: skip
    return (o, lse) if return_lse else o
