"""Calibration of what real kernel implementations reach, beyond the raw ceilings.

``memmodel calibrate`` measures the chip's ceilings (HBM, L2, shared memory, tensor-core
peaks). Real attention runs through library kernels that reach less, by amounts that
depend on the kernel, not on the chip alone. Each figure here is measured on shapes that
are *not* the validation cases, and stored as a named profile field:

* ``mma_sync``: the tensor-core peak of warp-level ``mma.sync`` instructions (the Ampere
  path). FlashAttention-2 (PyTorch's SDPA flash backend) and CUTLASS's memory-efficient
  kernel use it on Hopper too, where it reaches only part of the ``wgmma`` peak that
  cuBLAS' 8192³ product shows. Measured with our own Triton GEMM compiled with Triton's
  ``DISABLE_MMA_V3`` switch, checked in the PTX (``mma.sync``, no ``wgmma``).
* ``softmax``: the HBM bandwidth PyTorch's softmax reaches, by row length (the library
  picks a different kernel per row length: one warp per row up to 1024, a block per row
  above, a shared-memory variant for long rows), rows of 2^7 … 2^17 elements over a
  512 MiB input.
* ``gemm``: the HBM bandwidth cuBLAS reaches in the memory-bound products of attention:
  ``QKᵀ`` (writes an N×N output from thin operands) and ``PV`` (reads an N×N operand),
  batched to a 1 GiB N×N tensor at one N.
* ``masked_fill``: the bandwidth of an in-place ``masked_fill_`` with a broadcast mask.
* ``sdpa``: each SDPA backend's time, and memmodel's Triton kernel's at its default tiles,
  on reference shapes (8 × 16 heads × 2048 tokens, d = 64 and 128; causal d = 128 as a check).

Every function takes the calibrate :class:`~memmodel.gpu.calibrate.Context`.
"""

from __future__ import annotations

import os
from typing import Any

#: row lengths: powers of two and 1.5 x powers of two (the library changes kernels between them)
SOFTMAX_ROWS = tuple(sorted({2**k for k in range(7, 18)} | {3 * 2**k for k in range(6, 16)}))
SOFTMAX_BYTES = 512 * 2**20
#: softmax and cuBLAS rows that are not a multiple of 8 fp16 elements (16 bytes): odd lengths
#: between the powers of two (not validation shapes)
SOFTMAX_UNALIGNED_ROWS = (129, 257, 513, 1025, 2049, 4097, 8193)
GEMM_UNALIGNED_N = 1025
#: row lengths of the causally masked softmax (square blocks): the powers of two the unmasked
#: curve has, not validation shapes' batch × heads
SOFTMAX_MASKED_ROWS = (256, 512, 1024, 2048, 4096, 8192, 16384)
GEMM_BYTES = 2**30
FEW_ROWS_LENGTH = 32768
#: reference shapes for the implementations: (batch, heads, n, d, causal), fp16; not validation
#: cases. Long (8 × 16 × 2048) at every kernel head dim: the efficiency of a block's work;
#: short (64 × 16 × 256, as many CTAs with 1/8 of the blocks each): what a CTA costs beyond
#: its blocks; causal (8 × 16 × 2048): what a block on the diagonal costs beyond a plain one.
REFERENCE_LONG = (8, 16, 2048)
REFERENCE_SHORT = (64, 16, 256)
SDPA_HEAD_DIMS = (64, 96, 128, 256)
SDPA_FIT_HEAD_DIMS = (64, 128, 256)
SDPA_SHAPES = (
    *((*REFERENCE_LONG, d, False) for d in SDPA_HEAD_DIMS),
    *((*REFERENCE_SHORT, d, False) for d in SDPA_FIT_HEAD_DIMS),
    *((*REFERENCE_LONG, d, True) for d in SDPA_FIT_HEAD_DIMS),
)
#: implementations whose kernel for a head dim memmodel does not model (measured, not fitted):
#: the memory-efficient kernel above d = 128 accumulates O in global memory
SDPA_SKIP = {("sdpa-efficient", 256)}
#: decoding references, (batch, heads, kv heads, d) at two K/V lengths each: batch 1 splits
#: K/V 28 ways on 132 SMs, batch 8 four ways; the slope gives the per-CTA streaming rate, the
#: intercepts at two split counts the combine kernel's fixed and per-split cost
DECODE_REFERENCES = (((1, 32, 8, 128), (49152, 98304)), ((8, 32, 8, 128), (12288, 24576)))
DECODE_IMPLS = ("sdpa-flash", "sdpa-cudnn")


def _rate(ctx: Any, amount: float, fn: Any, reps: int = 20) -> dict[str, Any]:
    from .calibrate import _rate as rate

    return rate(amount, ctx.timer(fn, reps, ctx.plan.warmup))


# ---------------------------------------------------------------------------------------
# mma.sync peak


def _mma_kernel() -> Any:
    import triton
    import triton.language as tl

    @triton.jit
    def mma_sync_matmul(a_ptr, b_ptr, c_ptr, n, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        """C = A·B for n×n row-major A, B, C (n a multiple of the tiles), grouped tile order."""
        pid = tl.program_id(0)
        tiles_n = n // BN
        group = 8 * tiles_n
        first_m = (pid // group) * 8
        pid_m = first_m + (pid % group) % 8
        pid_n = (pid % group) // 8
        rm = pid_m * BM + tl.arange(0, BM)
        rn = pid_n * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        a = a_ptr + rm[:, None] * n + rk[None, :]
        b = b_ptr + rk[:, None] * n + rn[None, :]
        acc = tl.zeros([BM, BN], tl.float32)
        for _ in range(0, n, BK):
            acc += tl.dot(tl.load(a), tl.load(b))
            a += BK
            b += BK * n
        tl.store(c_ptr + rm[:, None] * n + rn[None, :], acc.to(c_ptr.dtype.element_ty))

    return mma_sync_matmul


#: (BM, BN, BK, warps, stages) tried; the best is kept
MMA_CONFIGS = ((128, 128, 64, 4, 3), (128, 256, 64, 8, 3), (256, 128, 64, 8, 3), (128, 128, 32, 4, 4))


def _mma_one(ctx: Any, kernel: Any, dtype: str) -> dict[str, Any]:
    torch = ctx.torch
    n = ctx.plan.matmul_n
    dt = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
    g = ctx.generator(11)
    a = torch.randn(n, n, device=ctx.device, dtype=dt, generator=g)
    b = torch.randn(n, n, device=ctx.device, dtype=dt, generator=g)
    c = torch.empty(n, n, device=ctx.device, dtype=dt)
    ref = a[:64].double() @ b[:, :64].double()
    tries: list[dict[str, Any]] = []
    for bm, bn, bk, warps, stages in MMA_CONFIGS:
        grid = ((n // bm) * (n // bn),)
        meta = {"BM": bm, "BN": bn, "BK": bk, "num_warps": warps, "num_stages": stages}
        try:
            compiled = kernel[grid](a, b, c, n, **meta)
            ctx.sync()
        except Exception as exc:  # a configuration that does not fit (shared memory): the next one
            tries.append({"config": [bm, bn, bk, warps, stages], "error": str(exc).splitlines()[0][:200]})
            continue
        ptx = compiled.asm.get("ptx", "")
        err = float((c[:64, :64].double() - ref).norm() / ref.norm())
        r = _rate(ctx, 2 * n**3, lambda grid=grid, meta=meta: kernel[grid](a, b, c, n, **meta), reps=10)
        tries.append(
            {
                "config": [bm, bn, bk, warps, stages],
                **r,
                "ptx_mma_sync": "mma.sync" in ptx,
                "ptx_wgmma": "wgmma" in ptx,
                "rel_error": err,
            }
        )
    ok = [t for t in tries if "rate" in t and t["ptx_mma_sync"] and not t["ptx_wgmma"] and t["rel_error"] < 1e-2]
    best = max(ok, key=lambda t: t["rate"], default=None)
    out: dict[str, Any] = {"n": n, "tries": tries}
    if best is None:
        out["skipped"] = "no configuration compiled to mma.sync alone with a correct result"
    else:
        out.update(rate=best["rate"], best=best["config"])
    return out


def measure_mma_sync(ctx: Any, dtypes: tuple[str, ...] = ("fp16", "bf16")) -> dict[str, Any]:
    """Best of :data:`MMA_CONFIGS` per dtype, n³ products of n = the plan's matmul size."""
    if ctx.device == "cuda" and ctx.info.capability < (8, 0):
        major, minor = ctx.info.capability
        return {"skipped": f"compute capability {major}.{minor} has no 16-bit mma.sync"}
    kernel = _mma_kernel()
    old = os.environ.get("DISABLE_MMA_V3")
    os.environ["DISABLE_MMA_V3"] = "1"  # read by Triton's compiler at each compile
    try:
        out: dict[str, Any] = {
            "method": "memmodel's Triton GEMM with DISABLE_MMA_V3=1 (PTX checked: mma.sync, no wgmma)"
        }
        for dtype in dtypes:
            out[dtype] = _mma_one(ctx, kernel, dtype)
            ctx.free()
        return out
    finally:
        if old is None:
            os.environ.pop("DISABLE_MMA_V3", None)
        else:
            os.environ["DISABLE_MMA_V3"] = old


# ---------------------------------------------------------------------------------------
# PyTorch softmax, masked_fill; cuBLAS memory-bound products


def measure_softmax(ctx: Any, dtypes: tuple[str, ...] = ("fp16", "bf16")) -> dict[str, Any]:
    torch = ctx.torch
    out: dict[str, Any] = {}
    for dtype in dtypes:
        dt = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
        points = []
        for row in SOFTMAX_ROWS:
            rows = SOFTMAX_BYTES // (2 * row)
            x = torch.randn(rows, row, device=ctx.device, dtype=dt, generator=ctx.generator(12))
            y = torch.empty_like(x)
            r = _rate(ctx, 2 * SOFTMAX_BYTES, lambda x=x, y=y: torch.softmax(x, dim=-1, out=y))
            points.append({"row": row, "rows": rows, **r})
            del x, y
        out[dtype] = points
        ctx.free()
    # rows that are not a multiple of 16 bytes (a ViT's 577 tokens): no vectorised path
    unaligned = []
    for row in SOFTMAX_UNALIGNED_ROWS:
        rows = SOFTMAX_BYTES // (2 * row)
        x = torch.randn(rows, row, device=ctx.device, dtype=torch.float16, generator=ctx.generator(18))
        y = torch.empty_like(x)
        r = _rate(ctx, 2 * x.numel() * 2, lambda x=x, y=y: torch.softmax(x, dim=-1, out=y))
        unaligned.append({"row": row, "rows": rows, **r})
        del x, y
    out["unaligned"] = unaligned
    ctx.free()
    # causally masked scores (−∞ above the diagonal, as eager attention's masked_fill_ leaves
    # them): square N × N blocks of fp16, rows of N
    masked = []
    for row in SOFTMAX_MASKED_ROWS:
        heads = SOFTMAX_BYTES // (2 * row * row)
        x = torch.randn(heads, row, row, device=ctx.device, dtype=torch.float16, generator=ctx.generator(20))
        x.masked_fill_(torch.ones(row, row, device=ctx.device, dtype=torch.bool).triu_(1), float("-inf"))
        y = torch.empty_like(x)
        r = _rate(ctx, 2 * x.numel() * 2, lambda x=x, y=y: torch.softmax(x, dim=-1, out=y))
        masked.append({"row": row, "rows": heads * row, **r})
        del x, y
    out["masked"] = masked
    ctx.free()
    # few rows: the parallelism a small softmax has (decode: batch × heads rows)
    few = []
    for per_sm in (1, 2, 4, 8, 16):
        rows, row = per_sm * ctx.info.sm_count, FEW_ROWS_LENGTH
        x = torch.randn(rows, row, device=ctx.device, dtype=torch.float16, generator=ctx.generator(13))
        y = torch.empty_like(x)
        r = _rate(ctx, 2 * x.numel() * 2, lambda x=x, y=y: torch.softmax(x, dim=-1, out=y), reps=200)
        few.append({"row": row, "rows": rows, "rows_per_sm": per_sm, **r})
        del x, y
    out["few_rows"] = few
    ctx.free()
    return out


def measure_kernels(ctx: Any) -> dict[str, Any]:
    """The library kernels of standard attention: softmax, masked_fill_, cuBLAS products."""
    out: dict[str, Any] = {}
    for name, fn in (("softmax", measure_softmax), ("masked_fill", measure_masked_fill), ("gemm", measure_gemm)):
        try:
            out[name] = fn(ctx)
        except (KeyboardInterrupt, MemoryError):
            raise
        except Exception as exc:  # recorded; the other kernels go on
            out[name] = {"error": str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__}
        ctx.free()
    return out


def measure_masked_fill(ctx: Any) -> dict[str, Any]:
    torch = ctx.torch
    out = []
    for n in (1024, 4096):
        bh = GEMM_BYTES // (2 * n * n)
        s = torch.randn(bh, n, n, device=ctx.device, dtype=torch.float16, generator=ctx.generator(14))
        mask = torch.ones(n, n, device=ctx.device, dtype=torch.bool).triu(1)
        # bytes as the model counts them: S read and written, the broadcast mask read per head
        moved = 2 * s.numel() * 2 + s.numel()
        r = _rate(ctx, moved, lambda s=s, mask=mask: s.masked_fill_(mask, float("-inf")))
        out.append({"n": n, "batch_heads": bh, **r})
        del s, mask
        ctx.free()
    return {"points": out}


def measure_gemm(ctx: Any) -> dict[str, Any]:
    """cuBLAS batched products shaped like attention's, at N = 2048 (not a validation N)."""
    torch = ctx.torch
    n = 2048
    bh = GEMM_BYTES // (2 * n * n)
    out: dict[str, Any] = {"n": n, "batch_heads": bh, "qk": [], "pv": []}
    for dtype in ("fp16", "bf16"):
        dt = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
        for d in (32, 64, 128, 256):
            g = ctx.generator(15)
            q = torch.randn(bh, n, d, device=ctx.device, dtype=dt, generator=g)
            k = torch.randn(bh, n, d, device=ctx.device, dtype=dt, generator=g)
            s = torch.empty(bh, n, n, device=ctx.device, dtype=dt)
            o = torch.empty(bh, n, d, device=ctx.device, dtype=dt)
            moved = 2 * (2 * bh * n * d + bh * n * n)
            flop = 2 * bh * n * n * d
            r = _rate(ctx, moved, lambda q=q, k=k, s=s: torch.matmul(q, k.transpose(-1, -2), out=s))
            out["qk"].append({"dtype": dtype, "d": d, "bytes": moved, "flop": flop, **r})
            r = _rate(ctx, moved, lambda s=s, k=k, o=o: torch.matmul(s, k, out=o))
            out["pv"].append({"dtype": dtype, "d": d, "bytes": moved, "flop": flop, **r})
            del q, k, s, o
            ctx.free()
    # rows of N_kv that are not a multiple of 16 bytes: cuBLAS leaves its vectorised kernels
    n = GEMM_UNALIGNED_N
    bh = GEMM_BYTES // (2 * n * n)
    out.update(unaligned_n=n, unaligned_batch_heads=bh, qk_unaligned=[], pv_unaligned=[])
    for d in (64, 128):
        g = ctx.generator(19)
        q = torch.randn(bh, n, d, device=ctx.device, dtype=torch.float16, generator=g)
        k = torch.randn(bh, n, d, device=ctx.device, dtype=torch.float16, generator=g)
        s = torch.empty(bh, n, n, device=ctx.device, dtype=torch.float16)
        o = torch.empty(bh, n, d, device=ctx.device, dtype=torch.float16)
        moved = 2 * (2 * bh * n * d + bh * n * n)
        flop = 2 * bh * n * n * d
        r = _rate(ctx, moved, lambda q=q, k=k, s=s: torch.matmul(q, k.transpose(-1, -2), out=s))
        out["qk_unaligned"].append({"dtype": "fp16", "d": d, "bytes": moved, "flop": flop, **r})
        r = _rate(ctx, moved, lambda s=s, k=k, o=o: torch.matmul(s, k, out=o))
        out["pv_unaligned"].append({"dtype": "fp16", "d": d, "bytes": moved, "flop": flop, **r})
        del q, k, s, o
        ctx.free()
    return out


# ---------------------------------------------------------------------------------------
# SDPA backends on a reference shape


def measure_sdpa(ctx: Any) -> dict[str, Any]:
    """Each SDPA backend and memmodel's Triton kernel (its default tiles) on the reference shapes."""
    torch = ctx.torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = {
        "sdpa-flash": SDPBackend.FLASH_ATTENTION,
        "sdpa-cudnn": SDPBackend.CUDNN_ATTENTION,
        "sdpa-efficient": SDPBackend.EFFICIENT_ATTENTION,
        "triton": None,
    }
    out: list[dict[str, Any]] = []
    for b, h, n, d, causal in SDPA_SHAPES:
        g = ctx.generator(16)
        qkv = [torch.randn(b, h, n, d, device=ctx.device, dtype=torch.float16, generator=g) for _ in range(3)]
        ref = _reference(torch, qkv, causal)
        for name, backend in backends.items():
            if (name, d) in SDPA_SKIP:
                continue

            def fn(backend: Any = backend, causal: bool = causal, qkv: list[Any] = qkv) -> Any:
                if backend is None:
                    from .triton_fa import attention

                    return attention(*qkv, causal=causal)
                with sdpa_kernel([backend]):
                    return torch.nn.functional.scaled_dot_product_attention(*qkv, is_causal=causal)

            point: dict[str, Any] = {"impl": name, "shape": [b, h, n, d, causal], "dtype": "fp16"}
            try:
                err = float((fn().float() - ref).abs().max())
                flop = 4 * b * h * n * n * d // (2 if causal else 1)
                # three rounds of 20, the fastest median kept: one round can catch the GPU
                # below its clocks (seen: 470 to 515 µs for the same kernel across runs)
                rounds = [_rate(ctx, flop, fn) for _ in range(3)]
                best = min(rounds, key=lambda r: r["time_s"])
                point.update(best, max_abs_error=err, round_times_s=[r["time_s"] for r in rounds])
            except Exception as exc:  # a backend this build or GPU lacks: recorded, the others go on
                point["error"] = str(exc).splitlines()[0][:200]
            out.append(point)
        ctx.free()
    for impl in DECODE_IMPLS:
        out += _measure_decode(ctx, backends[impl], impl)
    return {"points": out, "flop": "4·B·H·N²·d (halved when causal)"}


def _measure_decode(ctx: Any, backend: Any, impl: str) -> list[dict[str, Any]]:
    torch = ctx.torch
    from torch.nn.attention import sdpa_kernel

    out = []
    for (b, h, hkv, d), lengths in DECODE_REFERENCES:
        for nkv in lengths:
            g = ctx.generator(17)
            q = torch.randn(b, h, 1, d, device=ctx.device, dtype=torch.float16, generator=g)
            k, v = (torch.randn(b, hkv, nkv, d, device=ctx.device, dtype=torch.float16, generator=g) for _ in range(2))

            def fn(q: Any = q, k: Any = k, v: Any = v) -> Any:
                with sdpa_kernel([backend]):
                    return torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)

            point: dict[str, Any] = {"impl": impl, "decode": [b, h, hkv, nkv, d], "dtype": "fp16"}
            try:
                point.update(_rate(ctx, 2 * b * hkv * nkv * d * 2, fn, reps=100))
            except Exception as exc:  # a build without GQA in SDPA: recorded
                point["error"] = str(exc).splitlines()[0][:200]
            out.append(point)
            ctx.free()
    return out


def _reference(torch: Any, qkv: list[Any], causal: bool) -> Any:
    """float32 attention of the first batch entry's first head, broadcast-compared above."""
    q, k, v = (t.float() for t in qkv)
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal:
        n = s.shape[-1]
        s = s.masked_fill(torch.ones(n, n, device=s.device, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


# ---------------------------------------------------------------------------------------
# From measurements to profile fields (pure: tested on the CPU)


def _fmt_bw(v: float) -> str:
    from .calibrate import _bw

    return _bw(v)


def kernel_figures(m: dict[str, Any], peaks: dict[str, float]) -> dict[str, tuple[Any, str]]:
    """Profile field -> (value, note) from the ``mma_sync`` and ``kernels`` measurements.

    ``peaks``: the measured dense peaks by dtype, to keep only the products whose FLOPs take
    under half the time of their bytes at 4 TB/s (memory-bound: the rate is then cuBLAS' HBM
    rate, not its arithmetic).
    """
    out: dict[str, tuple[Any, str]] = {}
    mma = m.get("mma_sync") or {}
    for dtype in ("fp16", "bf16"):
        point = mma.get(dtype) or {}
        if point.get("rate"):
            bm, bn, bk, warps, stages = point.get("best", ["?"] * 5)
            out[f"compute.mma_sync.{dtype}"] = (
                f"{point['rate'] / 1e12:.1f} TFLOP/s",
                f"{point.get('n', '?')}^3 product, {mma.get('method', 'Triton, mma.sync')}; best tiles "
                f"{bm}x{bn}x{bk}, {warps} warps, {stages} stages",
            )
    k = m.get("kernels") or {}
    gemm = k.get("gemm") or {}
    for kind, fpath, what in (
        ("pv", "kernels.gemm.read_bandwidth", "P·V-shaped products (read an N x N operand)"),
        ("qk", "kernels.gemm.write_bandwidth", "Q·K^T-shaped products (write an N x N output)"),
    ):
        pts = [
            p
            for p in gemm.get(kind, [])
            if p.get("rate") and p["flop"] / peaks.get(p["dtype"], float("inf")) < 0.5 * p["bytes"] / 4e12
        ]
        if pts:
            rates = sorted(p["rate"] for p in pts)
            mid = (
                rates[len(rates) // 2] if len(rates) % 2 else (rates[len(rates) // 2 - 1] + rates[len(rates) // 2]) / 2
            )
            ds = sorted({p["d"] for p in pts})
            out[fpath] = (
                _fmt_bw(mid),
                f"median of {len(pts)} cuBLAS batched {what}, torch.matmul, N = {gemm.get('n')}, "
                f"{gemm.get('batch_heads')} heads, d in {ds}, fp16 and bf16, memory-bound ones only: "
                + ", ".join(_fmt_bw(r) for r in rates),
            )
    for kind, fpath, what in (
        ("pv_unaligned", "kernels.gemm.unaligned_read_bandwidth", "P·V-shaped"),
        ("qk_unaligned", "kernels.gemm.unaligned_write_bandwidth", "Q·K^T-shaped"),
    ):
        pts = [p for p in gemm.get(kind, []) if p.get("rate")]
        if pts:
            rates = sorted(p["rate"] for p in pts)
            out[fpath] = (
                _fmt_bw(sum(rates) / len(rates)),
                f"mean of {len(pts)} cuBLAS batched {what} products with rows of N = {gemm.get('unaligned_n')} fp16 "
                f"(not a multiple of 16 bytes), {gemm.get('unaligned_batch_heads')} heads, d in "
                f"{sorted({p['d'] for p in pts})}: " + ", ".join(_fmt_bw(r) for r in rates),
            )
    soft = k.get("softmax") or {}
    masked = [p for p in soft.get("masked", []) if p.get("rate")]
    if masked:
        out["kernels.softmax.masked_bandwidth"] = (
            {int(p["row"]): _fmt_bw(p["rate"]) for p in sorted(masked, key=lambda p: p["row"])},
            "torch.softmax over causally masked fp16 scores (−inf above the diagonal of square N × N blocks), "
            f"bytes read + written over the time, inputs of {SOFTMAX_BYTES // 2**20} MiB, by row length",
        )
    odd = [p for p in soft.get("unaligned", []) if p.get("rate")]
    if odd:
        out["kernels.softmax.unaligned_bandwidth"] = (
            {int(p["row"]): _fmt_bw(p["rate"]) for p in sorted(odd, key=lambda p: p["row"])},
            "torch.softmax over rows that are not a multiple of 16 bytes (odd lengths), fp16, bytes read + written "
            f"over the time, inputs of {SOFTMAX_BYTES // 2**20} MiB, by row length",
        )
    by_row: dict[int, list[float]] = {}
    for dtype in ("fp16", "bf16"):
        for p in soft.get(dtype, []):
            if p.get("rate"):
                by_row.setdefault(int(p["row"]), []).append(p["rate"])
    if by_row:
        curve = {row: _fmt_bw(sum(v) / len(v)) for row, v in sorted(by_row.items())}
        out["kernels.softmax.bandwidth"] = (
            curve,
            "torch.softmax over the last dimension, bytes read + written over the time, inputs of "
            f"{SOFTMAX_BYTES // 2**20} MiB, fp16 and bf16 averaged, by row length",
        )
    few = [p for p in soft.get("few_rows", []) if p.get("rate")]
    # one wave: PyTorch's block-per-row kernel runs 1024-thread blocks, two per SM
    wave = next((p for p in few if p.get("rows_per_sm") == 2), None)
    if wave:
        out["kernels.softmax.row_time"] = (
            f"{wave['time_s'] * 1e6:.2f} us",
            f"torch.softmax of {wave['rows']} rows (two per SM: one wave of its 1024-thread blocks) of "
            f"{wave['row']} fp16, median of 200; with "
            + ", ".join(f"{p['rows_per_sm']}: {p['time_s'] * 1e6:.1f} us" for p in few if p is not wave)
            + " rows per SM",
        )
    fill = [p for p in (k.get("masked_fill") or {}).get("points", []) if p.get("rate")]
    if fill:
        rates = [p["rate"] for p in fill]
        out["kernels.elementwise.bandwidth"] = (
            _fmt_bw(sum(rates) / len(rates)),
            "in-place masked_fill_ of fp16 scores with a broadcast N x N bool mask (N = "
            + ", ".join(str(p["n"]) for p in fill)
            + "), 1 GiB of scores; bytes: scores read + written, mask read per head: "
            + ", ".join(_fmt_bw(r) for r in rates),
        )
    return out


def reference_case(impl: str, b: int, h: int, n: int, d: int, causal: bool) -> Any:
    from ..cases import Case

    return Case(impl=impl, n=n, d=d, batch=b, heads=h, dtype="fp16", causal=causal)


def _fused_parts(impl: str, shape: tuple[int, ...], profile: Any) -> dict[str, float]:
    """The model's view of a reference shape with no efficiency, CTA overhead or diagonal
    cost: the fused kernel's compute time C (tail included), its CTA waves F (CTAs per CTA
    slot), the share r of its blocks on the diagonal, its launch overhead, and whether
    compute bounds it."""
    from ..implementations import padded_head_dim
    from ..model import compare
    from ..timing import kernel_time
    from ..validation import case_options

    b, h, n, d, causal = shape
    case = reference_case(impl, b, h, n, d, causal)
    c = compare(case.workload(), profile, case_options(case, "on", None, profile))
    kernel = next(k for k in c.tiled.traffic.kernels if k.overlap == "serial-compute")
    t = next(k for k in c.tiled.timing.kernels if k.name == kernel.name)
    bare = kernel_time(kernel, profile, case.dtype, impl, padded_head_dim(impl, d), None)
    tail = float(t.terms["compute"]) / max(float(bare.terms["compute"]), 1e-30)
    return {
        "compute_s": float(t.terms["compute"]),
        "waves": float(kernel.ctas) / max(float(kernel.concurrent_ctas), 1.0),
        "diagonal_share": float(kernel.diagonal_blocks) / max(float(kernel.blocks), 1.0),
        "launch_s": float(t.terms.get("launch", 0.0)),
        "memory_s": max([float(v) for k, v in t.terms.items() if k in ("hbm", "l2", "sram", "latency")] or [0.0]),
        "tail": tail,
    }


def fit_reference(
    long: dict[str, float], short: dict[str, float] | None, causal: dict[str, float] | None, cta_s: float | None = None
) -> dict[str, float | None]:
    """Efficiency e, CTA overhead t (s) and diagonal cost m from the measured times of the
    reference shapes (``measured_s`` beside :func:`_fused_parts`' figures), with the model's
    fused-kernel time ``C/e·(1 + m·r) + F·t`` plus the launch:

    * long and short: ``T − launch = C·x + F·t`` twice, x = 1/e; solved for x and t (t
      clamped at 0, then x from the long shape alone); without a short shape, ``cta_s``
      (from neighbouring head dims) or 0;
    * causal: ``T − launch − F·t = C·x·(1 + m·r)``, solved for m (at least 0).
    """
    tl, cl, fl = long["measured_s"] - long["launch_s"], long["compute_s"], long["waves"]
    t = cta_s
    if short is not None:
        ts, cs, fs = short["measured_s"] - short["launch_s"], short["compute_s"], short["waves"]
        det = cl * fs - cs * fl
        if det != 0:
            t = (cl * ts - cs * tl) / det
    t = max(0.0, t or 0.0)
    x = (tl - fl * t) / cl
    if x <= 0:  # the overhead cannot explain more than the whole: no overhead
        t, x = 0.0, tl / cl
    m = None
    if causal is not None and causal["diagonal_share"] > 0:
        tc = causal["measured_s"] - causal["launch_s"] - causal["waves"] * t
        m = max(0.0, (tc / (causal["compute_s"] * x) - 1.0) / causal["diagonal_share"])
    return {"efficiency": 1.0 / x, "cta_overhead_s": t if short is not None or cta_s else None, "masked_cost": m}


def efficiency_figures(m: dict[str, Any], profile: Any) -> dict[str, tuple[Any, str]]:
    """Per implementation, by head dim: ``implementations.<name>.efficiency`` (the model's
    time of a block's work over the measured), ``cta_overhead`` (what a CTA costs beyond its
    blocks, per CTA slot) and ``masked_block_cost`` (what a diagonal block costs beyond a
    plain one), fitted jointly to the long, short and causal reference shapes
    (:func:`fit_reference`); head dims measured long only take the CTA overhead of their
    neighbours (log2-interpolated)."""
    from ..hardware import interpolate_log2

    points = [
        p for p in (m.get("sdpa") or {}).get("points", []) if p.get("time_s") and "error" not in p and "shape" in p
    ]
    out: dict[str, tuple[Any, str]] = {}
    for impl in sorted({p["impl"] for p in points}):
        mine = [p for p in points if p["impl"] == impl]

        def part(
            b: int, h: int, n: int, d: int, causal: bool, impl: str = impl, mine: list[Any] = mine
        ) -> dict[str, float] | None:
            hit = next((p for p in mine if tuple(p["shape"]) == (b, h, n, d, causal)), None)
            if hit is None:
                return None
            return {**_fused_parts(impl, (b, h, n, d, causal), profile), "measured_s": hit["time_s"]}

        fits: dict[int, dict[str, Any]] = {}
        heads = sorted({int(p["shape"][3]) for p in mine})
        for d in heads:  # head dims with a short shape first: their CTA overhead serves the others
            long = part(*REFERENCE_LONG, d, False)
            short = part(*REFERENCE_SHORT, d, False)
            if long is not None and short is not None:
                fits[d] = {**fit_reference(long, short, part(*REFERENCE_LONG, d, True)), "long": long}
        known = tuple(sorted((d, f["cta_overhead_s"]) for d, f in fits.items() if f["cta_overhead_s"] is not None))
        for d in heads:
            long = part(*REFERENCE_LONG, d, False)
            if d in fits or long is None:
                continue
            cta = interpolate_log2(known, d) if known else None
            fits[d] = {**fit_reference(long, None, part(*REFERENCE_LONG, d, True), cta), "long": long}
        if not fits:
            continue
        b, h, n = REFERENCE_LONG
        bs, hs, ns = REFERENCE_SHORT
        kinds = {tuple(p["shape"][:3]) + (bool(p["shape"][4]),) for p in mine}
        shapes = [f"{b} x {h} heads x {n} tokens"]
        if (b, h, n, True) in kinds:
            shapes.append(f"{b} x {h} x {n} causal")
        if (bs, hs, ns, False) in kinds:
            shapes.append(f"{bs} x {hs} x {ns}")
        shared = (
            f"fp16, medians of CUDA-event times; fitted jointly to {', '.join(shapes)}: model time = compute / "
            "efficiency x (1 + diagonal cost x diagonal share) + CTA waves x CTA overhead + launch"
        )
        fitted = {d: f for d, f in sorted(fits.items())}
        out[f"implementations.{impl}.efficiency"] = (
            {d: round(f["efficiency"], 3) for d, f in fitted.items()},
            f"model time (instructions of {impl}) / measured, {shared}; tail factor "
            + ", ".join(f"d={d}: {f['long']['tail']:.3f}" for d, f in fitted.items()),
        )
        cta = {
            d: f["cta_overhead_s"]
            for d, f in fitted.items()
            if f["cta_overhead_s"] is not None
            and d in {int(p["shape"][3]) for p in mine if tuple(p["shape"][:3]) == REFERENCE_SHORT}
        }
        if cta and any(v > 0 for v in cta.values()):
            out[f"implementations.{impl}.cta_overhead"] = (
                {d: f"{max(v, 1e-9) * 1e6:.4g} us" for d, v in cta.items()},
                f"seconds a CTA costs beyond its blocks' work, per CTA slot; {shared}",
            )
        masked = {d: f["masked_cost"] for d, f in fitted.items() if f["masked_cost"] is not None}
        if masked and any(v > 0 for v in masked.values()):
            out[f"implementations.{impl}.masked_block_cost"] = (
                {d: round(max(v, 1e-3), 3) for d, v in masked.items()},
                f"extra cost of a block on the causal diagonal, in plain blocks; {shared}",
            )
    out.update(cta_figures(m, profile))
    return out


def fit_decode(points: list[tuple[int, int, float, float, float]], launch_s: float) -> dict[str, float]:
    """Per-CTA streaming rate and the combine kernel's cost from decoding references.

    ``points``: (shape id, splits, K/V bytes per CTA, measured time, n_kv) for each reference
    length. Per shape, time = intercept + bytes per CTA / rate: the slope between its two
    lengths gives the rate (that of the shape with the most splits, where the per-CTA rate
    binds; with fewer splits the kernel's padded compute can bind instead). The intercept,
    less two launches, is the combine kernel: ``combine = c0 + c1 × splits``, solved from the
    two shapes' split counts (c0, c1 at least 0; one shape: all in c1)."""
    by_shape: dict[int, list[tuple[int, int, float, float, float]]] = {}
    for p in points:
        by_shape.setdefault(p[0], []).append(p)
    fits = []
    for pts in by_shape.values():
        (_, s, x1, t1, _), (_, _, x2, t2, _) = sorted(pts, key=lambda p: p[4])[:2]
        slope = (t2 - t1) / (x2 - x1)
        fits.append((s, 1.0 / slope if slope > 0 else float("inf"), t1 - x1 * slope - 2 * launch_s, x2))
    rate = max(fits, key=lambda f: f[0])[1]  # the most splits: the regime the per-CTA rate binds in
    if len(fits) >= 2 and fits[0][0] != fits[1][0]:
        (sa, _, ia, _), (sb, _, ib, _) = fits[0], fits[1]
        c1 = max(0.0, (ia - ib) / (sa - sb))
        c0 = max(0.0, ia - c1 * sa)
    else:
        c0, c1 = 0.0, max(0.0, fits[0][2] / max(fits[0][0], 1))
    return {"cta_bandwidth": rate, "combine_s": c0, "combine_per_split_s": c1}


def cta_figures(m: dict[str, Any], profile: Any) -> dict[str, tuple[Any, str]]:
    """``implementations.<name>.cta_bandwidth`` (bytes one split-KV CTA streams per second)
    and ``combine_time``/``combine_time_per_split`` (the combine kernel) from the decoding
    references (:data:`DECODE_REFERENCES`, :func:`fit_decode`), each CTA's bytes counted as
    the time model counts them (FlashAttention-2's split count; cuDNN's own split is not
    public: assumed the same; the CTAs its occupancy runs at once)."""
    from ..implementations import options_for
    from ..model import compare
    from ..workload import Workload

    out: dict[str, tuple[Any, str]] = {}
    points = [p for p in (m.get("sdpa") or {}).get("points", []) if "decode" in p and p.get("time_s")]
    launch = float(profile.launch_overhead_s or 0.0)
    for impl in sorted({p["impl"] for p in points}):
        rows = []
        shapes: dict[tuple[int, ...], int] = {}
        for p in sorted((p for p in points if p["impl"] == impl), key=lambda p: (p["decode"][0], p["decode"][3])):
            b, h, hkv, nkv, d = p["decode"]
            w = Workload(n=1, n_kv=nkv, d=d, batch=b, heads=h, kv_heads=hkv, dtype=p.get("dtype", "fp16"))
            # the bytes each CTA streams as the model counts them: the split kernel's HBM bytes
            # over the CTAs it runs at once (its occupancy), as the time model divides them
            c = compare(w, profile, options_for(impl, w, profile))
            split = next((k for k in c.tiled.traffic.kernels if k.name == "fa2_splitkv"), None)
            if split is None:
                continue
            splits = int(c.tiled.traffic.params["splits"])
            per_cta = float(split.bytes(level="hbm")) / max(float(split.concurrent_ctas), 1.0)
            sid = shapes.setdefault((b, h, hkv, d), len(shapes))
            rows.append((sid, splits, per_cta, p["time_s"], nkv))
        if len({r[0] for r in rows}) < 1 or any(sum(1 for r in rows if r[0] == s) < 2 for s in {r[0] for r in rows}):
            continue
        fit = fit_decode(rows, launch)
        refs = "; ".join(
            f"{b}x{h} heads ({hkv} K/V), n_kv {r[4]}, {r[1]} splits, {r[3] * 1e6:.1f} us"
            for r, (b, h, hkv, _) in ((r, next(k for k, v in shapes.items() if v == r[0])) for r in rows)
        )
        note = f"decoding references, d = 128, fp16, FlashAttention-2's split count: {refs}"
        out[f"implementations.{impl}.cta_bandwidth"] = (
            _fmt_bw(fit["cta_bandwidth"]),
            f"per split-KV CTA, from the slope between the two lengths of the shape with the most splits; {note}",
        )
        out[f"implementations.{impl}.combine_time"] = (
            f"{max(fit['combine_s'], 1e-9) * 1e6:.4g} us",
            f"the combine kernel's fixed cost: the intercepts less two launches, at two split counts; {note}",
        )
        out[f"implementations.{impl}.combine_time_per_split"] = (
            f"{max(fit['combine_per_split_s'], 1e-9) * 1e6:.4g} us",
            f"the combine kernel's cost per split; {note}",
        )
    return out
