"""Calibration of the training step's library kernels: what the backward pass's kernels reach.

Standard attention's backward runs kernels the forward calibration does not measure, and the
fused backward kernels reach a different share of the tensor cores than the forward ones.
Measured on shapes that are not validation cases:

* ``softmax_backward``: ``torch._softmax_backward_data`` (autograd's softmax gradient: reads
  the gradient and the softmax output, writes the input's gradient), by row length, the row
  lengths and input size of the forward softmax calibration; bytes = 3 × the tensor.
* ``dropout``: ``torch.native_dropout`` (reads P, writes P' and a one-byte mask; Philox draws)
  and ``native_dropout_backward`` (reads dP' and the mask, writes dP), p = 0.1, 512 MiB of
  fp16 scores.
* ``elementwise_backward``: the gradient kernels of the scale and the mask: a multiply by a
  scalar, the copy of an out-of-place ``masked_fill``, ``masked_fill_(mask, 0)``; for
  comparison with the forward's ``masked_fill_`` rate (``kernels.elementwise.bandwidth``).
  The multiply and the copy are also profile fields of their own (``kernels.scale``,
  ``kernels.copy``): eager attention's scale, its gradient and the mask gradient's copy.
* ``reduction``: ATen's sum over a middle dimension, as FlashAttention-2's GQA backward sums
  dK and dV over the group (``at::sum_out`` of [B, N_kv, H_kv, G, d] over G).
* ``sdpa_backward``: each SDPA backend's forward and backward pass (``torch.autograd.grad``
  with the graph kept, so the backward repeats alone) on the forward calibration's reference
  shapes (8 × 16 heads × 2048 tokens at every head dim; 64 × 16 × 256, 1 × 8 × 16384 and the
  causal 8 × 16 × 2048 at the fitted ones; fp16): the fused backward kernel's efficiency, CTA
  overhead and diagonal-block cost are fitted jointly to them, as the forward's are.
* ``sdpa_dropout``: the same passes with ``dropout_p`` = 0.1 and 0 back to back, non-causal
  reference shapes: what dropout adds to each backend's fused kernels (the Philox draws of
  every score's mask element, in the forward and again in the backward, and whatever else the
  library does with dropout: other tiles, CUTLASS's ``_dropout`` backward kernels), as scores
  per second of extra time (``implementations.<name>.dropout_rate``, ``backward_dropout_rate``).

Every ``measure_*`` function takes the calibrate :class:`~memmodel.gpu.measure.Context`; the
profile fields made of these measurements are in :mod:`memmodel.calibration.figures`
(the library kernels) and :mod:`memmodel.calibration.fits` (the backward efficiency and the
dropout rates).
"""

from __future__ import annotations

from typing import Any

from ..calibration.plan import (
    DROPOUT_P,
    GROUP_SUM_SHAPE,
    REFERENCE_LONG,
    SCORES_BYTES,
    SDPA_SHAPES,
    SDPA_SKIP,
    SOFTMAX_BYTES,
    SOFTMAX_ROWS,
)
from .calibrate_impl import _backends, _best_of_three
from .measure import guard

# ---------------------------------------------------------------------------------------
# Measuring (GPU)


def measure_softmax_backward(ctx: Any, dtypes: tuple[str, ...] = ("fp16", "bf16")) -> dict[str, Any]:
    torch = ctx.torch
    out: dict[str, Any] = {}
    for dtype in dtypes:
        dt = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
        points = []
        for row in SOFTMAX_ROWS:
            rows = SOFTMAX_BYTES // (2 * row)
            y = torch.softmax(torch.randn(rows, row, device=ctx.device, dtype=dt, generator=ctx.generator(21)), -1)
            dy = torch.randn(rows, row, device=ctx.device, dtype=dt, generator=ctx.generator(22))

            def fn(dy: Any = dy, y: Any = y, dt: Any = dt) -> Any:
                return torch._softmax_backward_data(dy, y, -1, dt)

            points.append({"row": row, "rows": rows, **ctx.rate(3 * SOFTMAX_BYTES, fn)})
            del y, dy
            ctx.free()
        out[dtype] = points
    return out


def measure_dropout(ctx: Any) -> dict[str, Any]:
    torch = ctx.torch
    n = SCORES_BYTES // 2
    x = torch.rand(n, device=ctx.device, dtype=torch.float16, generator=ctx.generator(23))
    _, mask = torch.native_dropout(x, DROPOUT_P, True)
    fwd = ctx.rate(2 * n * 2 + n, lambda x=x: torch.native_dropout(x, DROPOUT_P, True))
    scale = 1.0 / (1.0 - DROPOUT_P)
    bwd = ctx.rate(2 * n * 2 + n, lambda x=x, mask=mask: torch.ops.aten.native_dropout_backward(x, mask, scale))
    del x, mask
    ctx.free()
    return {"p": DROPOUT_P, "bytes": SCORES_BYTES, "forward": fwd, "backward": bwd}


def measure_elementwise_backward(ctx: Any) -> dict[str, Any]:
    torch = ctx.torch
    n = 2048
    bh = SCORES_BYTES // (2 * n * n)
    s = torch.randn(bh, n, n, device=ctx.device, dtype=torch.float16, generator=ctx.generator(24))
    mask = torch.ones(n, n, device=ctx.device, dtype=torch.bool).triu(1)
    moved = 2 * s.numel() * 2
    out = {
        "n": n,
        "batch_heads": bh,
        "scale": ctx.rate(moved, lambda s=s: s * 0.125),
        "copy": ctx.rate(moved, lambda s=s: s.clone()),
        "masked_fill_zero": ctx.rate(moved + s.numel(), lambda s=s, mask=mask: s.masked_fill_(mask, 0.0)),
    }
    del s, mask
    ctx.free()
    return out


def measure_group_sum(ctx: Any) -> dict[str, Any]:
    torch = ctx.torch
    b, n_kv, kv_heads, g, d = GROUP_SUM_SHAPE
    x = torch.randn(b, n_kv, kv_heads, g, d, device=ctx.device, dtype=torch.float16, generator=ctx.generator(25))
    y = torch.empty(b, n_kv, kv_heads, d, device=ctx.device, dtype=torch.float16)
    moved = (x.numel() + y.numel()) * 2
    r = ctx.rate(moved, lambda x=x, y=y: torch.sum(x, dim=3, out=y))
    del x, y
    ctx.free()
    return {"shape": list(GROUP_SUM_SHAPE), **r}


def _sdpa_backends() -> dict[str, Any]:
    """The SDPA backends of :func:`memmodel.gpu.calibrate_impl._backends` (the backward has
    no Triton kernel)."""
    return {name: backend for name, backend in _backends().items() if backend is not None}


def measure_sdpa_backward(ctx: Any) -> dict[str, Any]:
    """Forward and backward time of each SDPA backend on the reference shapes (the forward
    calibration's: long at every head dim; short, long-loop and causal at the fitted ones)."""
    torch = ctx.torch
    from torch.nn.attention import sdpa_kernel

    backends = _sdpa_backends()
    points: list[dict[str, Any]] = []
    for b, h, n, d, causal in SDPA_SHAPES:
        g = ctx.generator(26)
        qkv = [
            torch.randn(b, h, n, d, device=ctx.device, dtype=torch.float16, generator=g).requires_grad_(True)
            for _ in range(3)
        ]
        for name, backend in backends.items():
            if (name, d) in SDPA_SKIP:
                continue
            point: dict[str, Any] = {"impl": name, "shape": [b, h, n, d, causal], "dtype": "fp16"}
            try:

                def forward(backend: Any = backend, causal: bool = causal, qkv: list[Any] = qkv) -> Any:
                    with sdpa_kernel([backend]):
                        return torch.nn.functional.scaled_dot_product_attention(*qkv, is_causal=causal)

                out = forward()
                do = torch.empty_like(out).normal_(generator=ctx.generator(27))
                flop = 4 * b * h * n * n * d // (2 if causal else 1)

                def backward(out: Any = out, do: Any = do, qkv: list[Any] = qkv) -> Any:
                    return torch.autograd.grad(out, qkv, do, retain_graph=True)

                point.update(
                    forward=_best_of_three(ctx, flop, forward), backward=_best_of_three(ctx, 5 * flop // 2, backward)
                )
                del out, do
            except Exception as exc:  # a backend this build or GPU lacks: recorded
                point["error"] = str(exc).splitlines()[0][:200]
            points.append(point)
        del qkv
        ctx.free()
    return {"points": points, "flop": "forward 4·B·H·N²·d (halved when causal), backward 2.5 × forward"}


def measure_sdpa_dropout(ctx: Any) -> dict[str, Any]:
    """Forward and backward time of each SDPA backend with ``dropout_p`` = DROPOUT_P and 0, on
    the non-causal reference shapes: each pair timed back to back, best of three medians."""
    torch = ctx.torch
    from torch.nn.attention import sdpa_kernel

    backends = _sdpa_backends()
    points: list[dict[str, Any]] = []
    for b, h, n, d, causal in (s for s in SDPA_SHAPES if tuple(s[:3]) == REFERENCE_LONG and not s[4]):
        g = ctx.generator(28)
        qkv = [
            torch.randn(b, h, n, d, device=ctx.device, dtype=torch.float16, generator=g).requires_grad_(True)
            for _ in range(3)
        ]
        for name, backend in backends.items():
            if (name, d) in SDPA_SKIP:
                continue
            point: dict[str, Any] = {"impl": name, "shape": [b, h, n, d, causal], "dtype": "fp16", "p": DROPOUT_P}
            try:
                for key, p in (("dropout", DROPOUT_P), ("plain", 0.0)):

                    def forward(backend: Any = backend, p: float = p, qkv: list[Any] = qkv) -> Any:
                        with sdpa_kernel([backend]):
                            return torch.nn.functional.scaled_dot_product_attention(*qkv, dropout_p=p)

                    out = forward()
                    do = torch.empty_like(out).normal_(generator=ctx.generator(29))

                    def backward(out: Any = out, do: Any = do, qkv: list[Any] = qkv) -> Any:
                        return torch.autograd.grad(out, qkv, do, retain_graph=True)

                    scores = b * h * n * n
                    point[key] = {
                        "forward": _best_of_three(ctx, scores, forward),
                        "backward": _best_of_three(ctx, scores, backward),
                    }
                    del out, do
            except Exception as exc:  # a backend without dropout on this build or GPU: recorded
                point["error"] = str(exc).splitlines()[0][:200]
            points.append(point)
        del qkv
        ctx.free()
    return {"points": points, "rate": "scores per second (B·H·N²) over each pass's time"}


def measure_backward(ctx: Any) -> dict[str, Any]:
    """Every measurement above; a failing one is recorded and the others go on."""
    steps = (
        ("softmax_backward", measure_softmax_backward),
        ("dropout", measure_dropout),
        ("elementwise_backward", measure_elementwise_backward),
        ("reduction", measure_group_sum),
        ("sdpa_backward", measure_sdpa_backward),
        ("sdpa_dropout", measure_sdpa_dropout),
    )
    out: dict[str, Any] = {}
    for key, fn in steps:
        out[key] = guard(lambda fn=fn: fn(ctx))
        ctx.free()
    return out


def measure_fa3_backward(ctx: Any) -> dict[str, Any]:
    """FlashAttention-3's forward and backward pass (``torch.autograd.grad`` with the graph
    kept) on the reference shapes, as points of ``sdpa_backward`` (``impl`` "fa3"), each
    pass's kernels with their CUPTI durations besides."""
    from . import fa3
    from .calibrate_impl import _kernel_times

    torch = ctx.torch
    points: list[dict[str, Any]] = []
    for b, h, n, d, causal in SDPA_SHAPES:
        point: dict[str, Any] = {"impl": "fa3", "shape": [b, h, n, d, causal], "dtype": "fp16"}
        try:
            qkv = fa3.make_qkv(
                torch,
                [(b, h, n, d)] * 3,
                dtype=torch.float16,
                device=ctx.device,
                generator=ctx.generator(26),
                requires_grad=True,
            )
            forward = fa3.forward(*qkv, causal=causal)
            out = forward()
            do = torch.empty_like(out).normal_(generator=ctx.generator(27))
            flop = 4 * b * h * n * n * d // (2 if causal else 1)

            def backward(out: Any = out, do: Any = do, qkv: list[Any] = qkv) -> Any:
                return torch.autograd.grad(out, qkv, do, retain_graph=True)

            point.update(
                forward=_best_of_three(ctx, flop, forward), backward=_best_of_three(ctx, 5 * flop // 2, backward)
            )
            point["backward"]["kernels"] = _kernel_times(ctx, backward)
            del out, do, qkv
        except Exception as exc:  # a head dim this build refuses: recorded
            point["error"] = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        points.append(point)
        ctx.free()
    return {"points": points, "flop": "forward 4·B·H·N²·d (halved when causal), backward 2.5 × forward"}
