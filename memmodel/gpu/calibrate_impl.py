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

Every function takes the calibrate :class:`~memmodel.gpu.measure.Context`; the reference
shapes are in :mod:`memmodel.calibration.plan`, the profile fields made of these
measurements in :mod:`memmodel.calibration.figures` and :mod:`memmodel.calibration.fits`.
"""

from __future__ import annotations

import os
from typing import Any

from ..calibration.plan import (
    DECODE_IMPLS,
    DECODE_REFERENCES,
    FEW_ROWS_LENGTH,
    GEMM_BYTES,
    GEMM_UNALIGNED_HEAD_DIMS,
    GEMM_UNALIGNED_N,
    REFERENCE_LONG,
    REFERENCE_LOOP,
    SDPA_FIT_HEAD_DIMS,
    SDPA_SHAPES,
    SDPA_SKIP,
    SOFTMAX_BYTES,
    SOFTMAX_MASKED_ROWS,
    SOFTMAX_ROWS,
    SOFTMAX_UNALIGNED_ROWS,
    SPLIT_IMPLS,
    SPLIT_REFERENCES,
    SUSTAINED_HEAD_DIM,
    SUSTAINED_IMPLS,
    TRITON_TILES,
    UNEVEN_HEAD_DIMS,
    UNEVEN_IMPLS,
)

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
        r = ctx.rate(2 * n**3, lambda grid=grid, meta=meta: kernel[grid](a, b, c, n, **meta), reps=10)
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


def _dot_loop_kernel() -> Any:
    import triton
    import triton.language as tl

    @triton.jit
    def dot_loop(a_ptr, out_ptr, iters, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        """``iters`` products of one register-resident BM×BK by BK×BN pair, accumulated."""
        pid = tl.program_id(0)
        rm = tl.arange(0, BM)
        rn = tl.arange(0, BN)
        rk = tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * BK + rk[None, :])
        b = tl.load(a_ptr + rk[:, None] * BN + rn[None, :])
        acc = tl.zeros([BM, BN], tl.float32)
        for _ in range(iters):
            acc = tl.dot(a, b, acc)
        tl.store(out_ptr + pid * BM * BN + rm[:, None] * BN + rn[None, :], acc)

    return dot_loop


#: the register loop's tiles and warps: FlashAttention-2's CTA shape (4 warps, 128 rows)
DOT_TILE, DOT_WARPS, DOT_ITERS = (128, 128, 64), 4, 4096


def measure_one_cta(ctx: Any) -> dict[str, Any]:
    """The tensor cores' rate with one CTA of 4 warps on every SM against two, products only
    (a register-resident loop of ``mma.sync``; no memory traffic): what an SM left with one
    CTA of a kernel that keeps two (the last wave's stragglers, grids of one CTA per SM)
    reaches. Compiled with ``DISABLE_MMA_V3=1`` (the caller sets it), PTX checked."""
    torch = ctx.torch
    kernel = _dot_loop_kernel()
    bm, bn, bk = DOT_TILE
    sms = ctx.info.sm_count
    a = torch.randn(bm * bk * 4, device=ctx.device, dtype=torch.float16, generator=ctx.generator(19)) * 0.01
    out = torch.empty(2 * sms * bm * bn, device=ctx.device, dtype=torch.float32)
    res: dict[str, Any] = {"tile": list(DOT_TILE), "warps": DOT_WARPS, "iters": DOT_ITERS}
    for per_sm in (1, 2):
        grid = (per_sm * sms,)

        def launch(grid: tuple[int, ...] = grid) -> Any:
            return kernel[grid](a, out, DOT_ITERS, BM=bm, BN=bn, BK=bk, num_warps=DOT_WARPS, num_stages=1)

        compiled = launch()
        ctx.sync()
        ptx = compiled.asm.get("ptx", "") if hasattr(compiled, "asm") else ""
        r = ctx.rate(2 * bm * bn * bk * DOT_ITERS * grid[0], launch, reps=10)
        res[f"ctas_{per_sm}"] = {**r, "ctas": grid[0], "ptx_mma_sync": "mma.sync" in ptx, "ptx_wgmma": "wgmma" in ptx}
    one, two = res["ctas_1"], res["ctas_2"]
    if one["ptx_mma_sync"] and not one["ptx_wgmma"] and two["ptx_mma_sync"] and not two["ptx_wgmma"]:
        res["share"] = one["rate"] / two["rate"]
    else:
        res["skipped"] = "the loop did not compile to mma.sync alone"
    return res


def measure_mma_sync(ctx: Any, dtypes: tuple[str, ...] = ("fp16", "bf16")) -> dict[str, Any]:
    """Best of :data:`MMA_CONFIGS` per dtype, n³ products of n = the plan's matmul size; and
    :func:`measure_one_cta`."""
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
        try:
            out["one_cta"] = measure_one_cta(ctx)
        except Exception as exc:  # recorded: the peaks above stand
            out["one_cta"] = {"error": str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__}
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
            r = ctx.rate(2 * SOFTMAX_BYTES, lambda x=x, y=y: torch.softmax(x, dim=-1, out=y))
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
        r = ctx.rate(2 * x.numel() * 2, lambda x=x, y=y: torch.softmax(x, dim=-1, out=y))
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
        r = ctx.rate(2 * x.numel() * 2, lambda x=x, y=y: torch.softmax(x, dim=-1, out=y))
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
        r = ctx.rate(2 * x.numel() * 2, lambda x=x, y=y: torch.softmax(x, dim=-1, out=y), reps=200)
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
        r = ctx.rate(moved, lambda s=s, mask=mask: s.masked_fill_(mask, float("-inf")))
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
            r = ctx.rate(moved, lambda q=q, k=k, s=s: torch.matmul(q, k.transpose(-1, -2), out=s))
            out["qk"].append({"dtype": dtype, "d": d, "bytes": moved, "flop": flop, **r})
            r = ctx.rate(moved, lambda s=s, k=k, o=o: torch.matmul(s, k, out=o))
            out["pv"].append({"dtype": dtype, "d": d, "bytes": moved, "flop": flop, **r})
            del q, k, s, o
            ctx.free()
    # rows of N_kv that are not a multiple of 16 bytes: cuBLAS leaves its vectorised kernels
    n = GEMM_UNALIGNED_N
    bh = GEMM_BYTES // (2 * n * n)
    out.update(unaligned_n=n, unaligned_batch_heads=bh, qk_unaligned=[], pv_unaligned=[])
    for d in GEMM_UNALIGNED_HEAD_DIMS:
        g = ctx.generator(19)
        q = torch.randn(bh, n, d, device=ctx.device, dtype=torch.float16, generator=g)
        k = torch.randn(bh, n, d, device=ctx.device, dtype=torch.float16, generator=g)
        s = torch.empty(bh, n, n, device=ctx.device, dtype=torch.float16)
        o = torch.empty(bh, n, d, device=ctx.device, dtype=torch.float16)
        moved = 2 * (2 * bh * n * d + bh * n * n)
        flop = 2 * bh * n * n * d
        r = ctx.rate(moved, lambda q=q, k=k, s=s: torch.matmul(q, k.transpose(-1, -2), out=s))
        out["qk_unaligned"].append({"dtype": "fp16", "d": d, "bytes": moved, "flop": flop, **r})
        r = ctx.rate(moved, lambda s=s, k=k, o=o: torch.matmul(s, k, out=o))
        out["pv_unaligned"].append({"dtype": "fp16", "d": d, "bytes": moved, "flop": flop, **r})
        del q, k, s, o
        ctx.free()
    return out


# ---------------------------------------------------------------------------------------
# SDPA backends on a reference shape


def _backends() -> dict[str, Any]:
    """Implementation name -> its SDPA backend (None: memmodel's Triton kernel)."""
    from torch.nn.attention import SDPBackend

    return {
        "sdpa-flash": SDPBackend.FLASH_ATTENTION,
        "sdpa-cudnn": SDPBackend.CUDNN_ATTENTION,
        "sdpa-efficient": SDPBackend.EFFICIENT_ATTENTION,
        "triton": None,
    }


def _attention_call(torch: Any, backend: Any, qkv: list[Any], causal: bool) -> Any:
    """A call of one forward: ``backend``'s SDPA (None: memmodel's Triton kernel, its default tiles)."""
    from torch.nn.attention import sdpa_kernel

    def fn() -> Any:
        if backend is None:
            from .triton_fa import attention

            return attention(*qkv, causal=causal)
        with sdpa_kernel([backend]):
            return torch.nn.functional.scaled_dot_product_attention(*qkv, is_causal=causal)

    return fn


def measure_sdpa(ctx: Any) -> dict[str, Any]:
    """Each SDPA backend and memmodel's Triton kernel (its default tiles) on the reference shapes."""
    torch = ctx.torch
    backends = _backends()
    out: list[dict[str, Any]] = []
    for b, h, n, d, causal in SDPA_SHAPES:
        g = ctx.generator(16)
        qkv = [torch.randn(b, h, n, d, device=ctx.device, dtype=torch.float16, generator=g) for _ in range(3)]
        ref = _reference(torch, qkv, causal)
        for name, backend in backends.items():
            if (name, d) in SDPA_SKIP:
                continue
            fn = _attention_call(torch, backend, qkv, causal)

            point: dict[str, Any] = {"impl": name, "shape": [b, h, n, d, causal], "dtype": "fp16"}
            try:
                err = float((fn().float() - ref).abs().max())
                flop = 4 * b * h * n * n * d // (2 if causal else 1)
                point.update(_best_of_three(ctx, flop, fn), max_abs_error=err)
            except Exception as exc:  # a backend this build or GPU lacks: recorded, the others go on
                point["error"] = str(exc).splitlines()[0][:200]
            out.append(point)
        ctx.free()
    out += _measure_triton_tiles(ctx)
    out += _measure_uneven(ctx, backends)
    for impl in DECODE_IMPLS:
        out += _measure_decode(ctx, backends[impl], impl)
    for impl in SPLIT_IMPLS:
        out += _measure_split(ctx, backends[impl], impl)
    return {"points": out, "flop": "4·B·H·N²·d (halved when causal)"}


def _best_of_three(ctx: Any, flop: float, fn: Any) -> dict[str, Any]:
    """Three rounds of :meth:`Context.rate`, the fastest median kept (one round can catch the
    GPU below its clocks: seen, 470 to 515 µs for the same kernel across runs), with every
    round's time."""
    rounds = [ctx.rate(flop, fn) for _ in range(3)]
    best = min(rounds, key=lambda r: r["time_s"])
    return {**best, "round_times_s": [r["time_s"] for r in rounds]}


def _measure_uneven(ctx: Any, backends: dict[str, Any]) -> list[dict[str, Any]]:
    """The long reference at head dims no kernel is built for (:data:`UNEVEN_HEAD_DIMS`),
    points marked ``uneven``: what masking the padded columns costs each implementation."""
    torch = ctx.torch
    b, h, n = REFERENCE_LONG
    out: list[dict[str, Any]] = []
    for d in UNEVEN_HEAD_DIMS:
        g = ctx.generator(19)
        qkv = [torch.randn(b, h, n, d, device=ctx.device, dtype=torch.float16, generator=g) for _ in range(3)]
        ref = _reference(torch, qkv, False)
        for impl in UNEVEN_IMPLS:
            fn = _attention_call(torch, backends[impl], qkv, False)
            point: dict[str, Any] = {"impl": impl, "shape": [b, h, n, d, False], "uneven": True, "dtype": "fp16"}
            try:
                err = float((fn().float() - ref).abs().max())
                point.update(_best_of_three(ctx, 4 * b * h * n * n * d, fn), max_abs_error=err)
            except Exception as exc:  # a head dim a backend refuses: recorded
                point["error"] = str(exc).splitlines()[0][:200]
            out.append(point)
        ctx.free()
    return out


def _measure_triton_tiles(ctx: Any) -> list[dict[str, Any]]:
    """Our Triton kernel on the long-loop reference at :data:`TRITON_TILES` besides its
    defaults (``block`` in the point): its efficiency at the tiles its users may choose."""
    from ..implementations import tiles
    from .triton_fa import attention

    torch = ctx.torch
    b, h, n = REFERENCE_LOOP
    out: list[dict[str, Any]] = []
    for d in SDPA_FIT_HEAD_DIMS:
        g = ctx.generator(16)
        qkv = [torch.randn(b, h, n, d, device=ctx.device, dtype=torch.float16, generator=g) for _ in range(3)]
        ref = _reference(torch, qkv, False)
        for bq, bkv in TRITON_TILES:
            if (bq, bkv) == tiles("triton", d, False):
                continue

            def fn(qkv: list[Any] = qkv, bq: int = bq, bkv: int = bkv) -> Any:
                return attention(*qkv, block_q=bq, block_kv=bkv)

            point: dict[str, Any] = {
                "impl": "triton",
                "shape": [b, h, n, d, False],
                "block": [bq, bkv],
                "dtype": "fp16",
            }
            try:
                err = float((fn().float() - ref).abs().max())
                point.update(_best_of_three(ctx, 4 * b * h * n * n * d, fn), max_abs_error=err)
            except Exception as exc:  # a tile that does not fit this GPU: recorded
                point["error"] = str(exc).splitlines()[0][:200]
            out.append(point)
        ctx.free()
    return out


def _measure_decode(ctx: Any, backend: Any, impl: str) -> list[dict[str, Any]]:
    torch = ctx.torch
    from torch.nn.attention import sdpa_kernel

    out = []
    for (b, h, kv_heads, d), lengths in DECODE_REFERENCES:
        for n_kv in lengths:
            g = ctx.generator(17)
            q = torch.randn(b, h, 1, d, device=ctx.device, dtype=torch.float16, generator=g)
            k, v = (
                torch.randn(b, kv_heads, n_kv, d, device=ctx.device, dtype=torch.float16, generator=g) for _ in range(2)
            )

            def fn(q: Any = q, k: Any = k, v: Any = v) -> Any:
                with sdpa_kernel([backend]):
                    return torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)

            point: dict[str, Any] = {"impl": impl, "decode": [b, h, kv_heads, n_kv, d], "dtype": "fp16"}
            try:
                point.update(ctx.rate(2 * b * kv_heads * n_kv * d * 2, fn, reps=100))
                point["kernels"] = _kernel_times(ctx, fn)
            except Exception as exc:  # a build without GQA in SDPA: recorded
                point["error"] = str(exc).splitlines()[0][:200]
            out.append(point)
            ctx.free()
    return out


def _kernel_times(ctx: Any, fn: Any) -> list[dict[str, Any]] | str:
    """Each kernel's CUPTI duration, or why the profiler could not give them (the step's
    time is kept either way)."""
    try:
        return ctx.kernel_times(fn)
    except Exception as exc:  # the profiler is a bonus: its failure keeps the timing
        return f"{exc.__class__.__name__}: {exc}"[:200]


def _measure_split(ctx: Any, backend: Any, impl: str) -> list[dict[str, Any]]:
    """The split prefill references (:data:`SPLIT_REFERENCES`): the step's CUDA-event time
    and each kernel's CUPTI duration (the split kernel and the combine)."""
    torch = ctx.torch
    out = []
    for b, h, n in SPLIT_REFERENCES:
        for d in SDPA_FIT_HEAD_DIMS:
            g = ctx.generator(18)
            qkv = [torch.randn(b, h, n, d, device=ctx.device, dtype=torch.float16, generator=g) for _ in range(3)]
            ref = _reference(torch, qkv, False)
            fn = _attention_call(torch, backend, qkv, False)
            point: dict[str, Any] = {"impl": impl, "split": [b, h, n, d], "dtype": "fp16"}
            try:
                point["max_abs_error"] = float((fn().float() - ref).abs().max())
                point.update(ctx.rate(4 * b * h * n * n * d, fn, reps=100))
                point["kernels"] = _kernel_times(ctx, fn)
            except Exception as exc:  # recorded; the others go on
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
# Clocks under the power limit


def measure_sustained(ctx: Any) -> dict[str, Any]:
    """Each implementation's long reference (:data:`SUSTAINED_HEAD_DIM`) run back to back for
    the plan's busy seconds after its idle seconds (the GPU's clocks back up), a CUDA event
    between calls: how its rate falls as the power limit lowers the clocks
    (:func:`memmodel.calibration.figures.settle` reads the series). The last step: its heat
    would slow whatever ran after it."""
    import time

    torch = ctx.torch
    b, h, n = REFERENCE_LONG
    d = SUSTAINED_HEAD_DIM
    g = ctx.generator(29)
    qkv = [torch.randn(b, h, n, d, device=ctx.device, dtype=torch.float16, generator=g) for _ in range(3)]
    backends = _backends()
    series: list[dict[str, Any]] = []
    # the implementations take turns, series after series: a drift of the GPU's state over the
    # step spreads over all of them
    for repeat in range(ctx.plan.sustained_series):
        for impl in SUSTAINED_IMPLS:
            fn = _attention_call(torch, backends[impl], qkv, False)
            entry: dict[str, Any] = {
                "impl": impl,
                "shape": [b, h, n, d],
                "idle_s": ctx.plan.sustained_idle_s,
                "series": repeat,
            }
            try:
                fn()  # compiled, planned and warm before the GPU idles
                ctx.sync()
                t0 = time.perf_counter()
                fn()
                ctx.sync()
                calls = max(20, int(ctx.plan.sustained_busy_s / max(time.perf_counter() - t0, 1e-5)))
                time.sleep(ctx.plan.sustained_idle_s)
                events = [torch.cuda.Event(enable_timing=True) for _ in range(calls + 1)]
                events[0].record()
                for i in range(calls):
                    fn()
                    events[i + 1].record()
                ctx.sync()
                entry["times_s"] = [events[i].elapsed_time(events[i + 1]) * 1e-3 for i in range(calls)]
            except Exception as exc:  # a backend this build or GPU lacks: recorded, the others go on
                entry["error"] = str(exc).splitlines()[0][:200]
            series.append(entry)
    time.sleep(ctx.plan.sustained_idle_s)  # leave the GPU as cool as it was found
    return {"series": series}


# ---------------------------------------------------------------------------------------
# FlashAttention-3 (flash_attn.cute), on its own: ``memmodel calibrate --impl fa3``


def measure_fa3(ctx: Any) -> dict[str, Any]:
    """FlashAttention-3's forward on the reference shapes the SDPA backends run
    (:data:`SDPA_SHAPES`), as points of the ``sdpa`` step (``impl`` "fa3"): the same fits
    then give its efficiency, CTA overhead and diagonal-block cost."""
    from . import fa3

    torch = ctx.torch
    out: list[dict[str, Any]] = []
    for b, h, n, d, causal in SDPA_SHAPES:
        shapes = [(b, h, n, d)] * 3
        qkv = fa3.make_qkv(torch, shapes, dtype=torch.float16, device=ctx.device, generator=ctx.generator(16))
        fn = fa3.forward(*qkv, causal=causal)
        point: dict[str, Any] = {"impl": "fa3", "shape": [b, h, n, d, causal], "dtype": "fp16"}
        try:
            err = float((fn().float() - _reference(torch, qkv, causal)).abs().max())
            flop = 4 * b * h * n * n * d // (2 if causal else 1)
            point.update(_best_of_three(ctx, flop, fn), max_abs_error=err)
            point["kernels"] = _kernel_times(ctx, fn)
        except Exception as exc:  # a head dim this build refuses: recorded, the others go on
            point["error"] = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        out.append(point)
        del qkv, fn
        ctx.free()
    return {"points": out, "flop": "4·B·H·N²·d (halved when causal)"}
