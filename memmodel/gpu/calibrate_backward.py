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
  shapes (8 × 16 heads × 2048 tokens, d = 64 and 128, fp16; causal d = 128 as a check).
* ``sdpa_dropout``: the same passes with ``dropout_p`` = 0.1 and 0 back to back, non-causal
  reference shapes: what dropout adds to each backend's fused kernels (the Philox draws of
  every score's mask element, in the forward and again in the backward, and whatever else the
  library does with dropout: other tiles, CUTLASS's ``_dropout`` backward kernels), as scores
  per second of extra time (``implementations.<name>.dropout_rate``, ``backward_dropout_rate``).

Every ``measure_*`` function takes the calibrate :class:`~memmodel.gpu.calibrate.Context`;
the ``*_figures`` functions turn a result into profile fields (value, note) and are pure.

Wiring (``memmodel/gpu/calibrate.py``, owned elsewhere): add a step
``("backward", "training-step kernels")`` whose measurement is :func:`measure_backward`, and
merge :func:`backward_figures` (result["backward"], profile) into the profile fields next to
``calibrate_impl.kernel_figures``. The fields it writes are read by the time model once
``memmodel/hardware.py`` knows them: ``kernels.softmax_backward.bandwidth`` (curve by row
length, for kernels tagged ``op="softmax_backward"``), ``kernels.dropout.bandwidth``
(``op="dropout"``), ``kernels.reduction.bandwidth`` (``op="reduction"``),
``kernels.dropout_backward.bandwidth`` and ``kernels.elementwise_backward.bandwidth`` (both
``op="elementwise"`` today: kept apart to show whether one elementwise rate serves), and
``implementations.<name>.backward_efficiency`` by head dim (the fused backward kernels,
``overlap="serial-compute"``, ``pass_="backward"``), ``kernels.scale.bandwidth``
(``op="scale"``), ``kernels.copy.bandwidth`` (``op="copy"``) and
``implementations.<name>.dropout_rate`` / ``backward_dropout_rate`` by head dim (fused kernels
with ``dropout_scores``: extra time = scores / rate, added to their compute).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: row lengths of the softmax backward: those of the forward calibration
from .calibrate_impl import REFERENCE_LONG, SDPA_SHAPES, SDPA_SKIP, SOFTMAX_BYTES, SOFTMAX_ROWS

DROPOUT_P = 0.1
SCORES_BYTES = 512 * 2**20
#: GQA reduction reference: (batch, n_kv, kv heads, group, d), fp16 (not a validation shape)
GROUP_SUM_SHAPE = (4, 4096, 8, 4, 128)
BACKENDS = ("sdpa-flash", "sdpa-cudnn", "sdpa-efficient")


def _rate(ctx: Any, amount: float, fn: Any, reps: int = 20) -> dict[str, Any]:
    from .calibrate import _rate as rate

    return rate(amount, ctx.timer(fn, reps, ctx.plan.warmup))


def _guard(fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    try:
        return fn()
    except (KeyboardInterrupt, MemoryError):
        raise
    except Exception as exc:  # recorded; the other measurements go on
        return {"error": str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__}


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

            points.append({"row": row, "rows": rows, **_rate(ctx, 3 * SOFTMAX_BYTES, fn)})
            del y, dy
            ctx.free()
        out[dtype] = points
    return out


def measure_dropout(ctx: Any) -> dict[str, Any]:
    torch = ctx.torch
    n = SCORES_BYTES // 2
    x = torch.rand(n, device=ctx.device, dtype=torch.float16, generator=ctx.generator(23))
    _, mask = torch.native_dropout(x, DROPOUT_P, True)
    fwd = _rate(ctx, 2 * n * 2 + n, lambda x=x: torch.native_dropout(x, DROPOUT_P, True))
    scale = 1.0 / (1.0 - DROPOUT_P)
    bwd = _rate(ctx, 2 * n * 2 + n, lambda x=x, mask=mask: torch.ops.aten.native_dropout_backward(x, mask, scale))
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
        "scale": _rate(ctx, moved, lambda s=s: s * 0.125),
        "copy": _rate(ctx, moved, lambda s=s: s.clone()),
        "masked_fill_zero": _rate(ctx, moved + s.numel(), lambda s=s, mask=mask: s.masked_fill_(mask, 0.0)),
    }
    del s, mask
    ctx.free()
    return out


def measure_group_sum(ctx: Any) -> dict[str, Any]:
    torch = ctx.torch
    b, nkv, hkv, g, d = GROUP_SUM_SHAPE
    x = torch.randn(b, nkv, hkv, g, d, device=ctx.device, dtype=torch.float16, generator=ctx.generator(25))
    y = torch.empty(b, nkv, hkv, d, device=ctx.device, dtype=torch.float16)
    moved = (x.numel() + y.numel()) * 2
    r = _rate(ctx, moved, lambda x=x, y=y: torch.sum(x, dim=3, out=y))
    del x, y
    ctx.free()
    return {"shape": list(GROUP_SUM_SHAPE), **r}


def measure_sdpa_backward(ctx: Any) -> dict[str, Any]:
    """Forward and backward time of each SDPA backend on the reference shapes."""
    torch = ctx.torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = {
        "sdpa-flash": SDPBackend.FLASH_ATTENTION,
        "sdpa-cudnn": SDPBackend.CUDNN_ATTENTION,
        "sdpa-efficient": SDPBackend.EFFICIENT_ATTENTION,
    }
    points: list[dict[str, Any]] = []
    for b, h, n, d, causal in (s for s in SDPA_SHAPES if tuple(s[:3]) == REFERENCE_LONG):
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

                fwd = min((_rate(ctx, flop, forward) for _ in range(3)), key=lambda r: r["time_s"])
                bwd = min((_rate(ctx, 5 * flop // 2, backward) for _ in range(3)), key=lambda r: r["time_s"])
                point.update(forward=fwd, backward=bwd)
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
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = {
        "sdpa-flash": SDPBackend.FLASH_ATTENTION,
        "sdpa-cudnn": SDPBackend.CUDNN_ATTENTION,
        "sdpa-efficient": SDPBackend.EFFICIENT_ATTENTION,
    }
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
                        "forward": min((_rate(ctx, scores, forward) for _ in range(3)), key=lambda r: r["time_s"]),
                        "backward": min((_rate(ctx, scores, backward) for _ in range(3)), key=lambda r: r["time_s"]),
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
        out[key] = _guard(lambda fn=fn: fn(ctx))
        ctx.free()
    return out


# ---------------------------------------------------------------------------------------
# From measurements to profile fields (pure: tested on the CPU)


def _bw(v: float) -> str:
    from .calibrate import _bw as bw

    return bw(v)


def softmax_backward_figures(m: dict[str, Any]) -> dict[str, tuple[Any, str]]:
    """``kernels.softmax_backward.bandwidth``: bytes (gradient and output read, gradient
    written) over the time, by row length, fp16 and bf16 averaged."""
    by_row: dict[int, list[float]] = {}
    for dtype in ("fp16", "bf16"):
        for p in (m or {}).get(dtype, []) or []:
            if p.get("rate"):
                by_row.setdefault(int(p["row"]), []).append(float(p["rate"]))
    if not by_row:
        return {}
    curve = {row: _bw(sum(v) / len(v)) for row, v in sorted(by_row.items())}
    return {
        "kernels.softmax_backward.bandwidth": (
            curve,
            "torch._softmax_backward_data over the last dimension, bytes: gradient and softmax output "
            f"read, gradient written, {SOFTMAX_BYTES // 2**20} MiB tensors, fp16 and bf16 averaged, by row length",
        )
    }


def dropout_figures(m: dict[str, Any]) -> dict[str, tuple[Any, str]]:
    """``kernels.dropout.bandwidth`` (native_dropout) and ``kernels.dropout_backward.bandwidth``
    (native_dropout_backward): tensor bytes read and written, the one-byte mask included."""
    out: dict[str, tuple[Any, str]] = {}
    if not m or "error" in m:
        return out
    size = f"{m.get('bytes', SCORES_BYTES) // 2**20} MiB of fp16 scores, p = {m.get('p', DROPOUT_P)}"
    fwd, bwd = m.get("forward") or {}, m.get("backward") or {}
    if fwd.get("rate"):
        out["kernels.dropout.bandwidth"] = (
            _bw(fwd["rate"]),
            f"torch.native_dropout, {size}; bytes: P read, P' written, bool mask written",
        )
    if bwd.get("rate"):
        out["kernels.dropout_backward.bandwidth"] = (
            _bw(bwd["rate"]),
            f"native_dropout_backward, {size}; bytes: dP' and the mask read, dP written",
        )
    return out


def elementwise_backward_figures(m: dict[str, Any]) -> dict[str, tuple[Any, str]]:
    """``kernels.elementwise_backward.bandwidth``: the mean of the scale's gradient (a multiply),
    the copy and the ``masked_fill_(mask, 0)`` of the mask's gradient; each listed in the note."""
    if not m or "error" in m:
        return {}
    parts = {k: m[k]["rate"] for k in ("scale", "copy", "masked_fill_zero") if (m.get(k) or {}).get("rate")}
    if not parts:
        return {}
    mean = sum(parts.values()) / len(parts)
    size = f"fp16 scores {m.get('batch_heads')} x {m.get('n')}^2 (512 MiB), bytes read + written"
    out = {
        "kernels.elementwise_backward.bandwidth": (
            _bw(mean),
            f"{size}: " + ", ".join(f"{k} {_bw(v)}" for k, v in parts.items()),
        )
    }
    if "scale" in parts:
        out["kernels.scale.bandwidth"] = (
            _bw(parts["scale"]),
            f"s * 0.125 (ATen's vectorised multiply by a scalar), {size}",
        )
    if "copy" in parts:
        out["kernels.copy.bandwidth"] = (_bw(parts["copy"]), f"s.clone() (a device-to-device copy), {size}")
    return out


def reduction_figures(m: dict[str, Any]) -> dict[str, tuple[Any, str]]:
    """``kernels.reduction.bandwidth``: ATen's sum over the group dimension (GQA dK, dV)."""
    if not m or not m.get("rate"):
        return {}
    b, nkv, hkv, g, d = m.get("shape", GROUP_SUM_SHAPE)
    return {
        "kernels.reduction.bandwidth": (
            _bw(m["rate"]),
            f"torch.sum over dim 3 of fp16 [{b}, {nkv}, {hkv}, {g}, {d}] (FlashAttention-2's GQA dK/dV sum), "
            "bytes read + written",
        )
    }


Predict = Callable[[str, int, int, int, int, bool], Any]
#: (impl, b, h, n, d, backward) -> the scores whose dropout mask the fused kernel draws
DropoutScores = Callable[[str, int, int, int, int, bool], float]


def dropout_scores(profile: Any) -> DropoutScores:
    """The model's ``dropout_scores`` of an implementation's fused forward (``fa2_fwd``) or
    backward kernel on a non-causal reference shape (fp16, dropout on)."""

    def scores(impl: str, b: int, h: int, n: int, d: int, backward: bool) -> float:
        from ..cases import Case
        from ..validation import BACKWARD_MAIN, predicted_kernels

        case = Case(impl=impl, n=n, d=d, batch=b, heads=h, dtype="fp16", dropout=DROPOUT_P, backward=True)
        want = BACKWARD_MAIN[impl] if backward else "fa2_fwd"
        kernel = next(k for k in predicted_kernels(case, profile, "cold") if k.name == want)
        return float(kernel.dropout_scores)

    return scores


def dropout_rate_figures(m: dict[str, Any], scores: DropoutScores) -> dict[str, tuple[Any, str]]:
    """``implementations.<name>.dropout_rate`` and ``backward_dropout_rate`` by head dim: the
    scores the fused kernel draws a mask for (``scores``, the model's count) over the extra
    time of the pass with dropout (measured with and without, back to back). A head dim whose
    pass was not slower with dropout gives no figure."""
    points = [p for p in (m or {}).get("points", []) if p.get("dropout") and p.get("plain")]
    out: dict[str, tuple[Any, str]] = {}
    for impl in sorted({p["impl"] for p in points}):
        for backward, field, step in ((False, "dropout_rate", "forward"), (True, "backward_dropout_rate", "backward")):
            curve: dict[int, str] = {}
            parts = []
            for p in (q for q in points if q["impl"] == impl):
                b, h, n, d, _ = p["shape"]
                extra = p["dropout"][step]["time_s"] - p["plain"][step]["time_s"]
                if extra <= 0:
                    continue
                rate = scores(impl, b, h, n, d, backward) / extra
                curve[int(d)] = _ops(rate)
                parts.append(
                    f"d={d}: {p['plain'][step]['time_s'] * 1e6:.1f} us -> {p['dropout'][step]['time_s'] * 1e6:.1f} us"
                )
            if not curve:
                continue
            b, h, n = points[0]["shape"][:3]
            note = (
                f"{step} pass of {impl} with dropout_p = {points[0].get('p', DROPOUT_P)} against without, fp16, "
                f"{b} x {h} heads x {n} tokens, non-causal, best of three medians of CUDA-event times: scores "
                f"drawn / extra time ({'; '.join(parts)})"
            )
            out[f"implementations.{impl}.{field}"] = (dict(sorted(curve.items())), note)
    return out


def _ops(v: float) -> str:
    from ..units import quantity

    return quantity(v, "ops")


def predicted_backward_s(profile: Any) -> Predict:
    """The model's backward pass on a reference shape on ``profile`` (no efficiency yet), as
    (the fused backward kernel's compute time, the other backward kernels' time): the
    efficiency divides the first alone."""

    def predict(impl: str, b: int, h: int, n: int, d: int, causal: bool) -> tuple[float, float]:
        from ..cases import Case
        from ..validation import BACKWARD_MAIN, _compare

        case = Case(impl=impl, n=n, d=d, batch=b, heads=h, dtype="fp16", causal=causal, backward=True)
        ev = _compare(case, profile, "on", None, None).tiled
        compute = other = 0.0
        for k, t in zip(ev.traffic.kernels, ev.timing.kernels):
            if k.pass_ != "backward":
                continue
            if k.name == BACKWARD_MAIN[impl]:
                compute += float(t.terms["compute"]) + float(t.terms.get("launch", 0.0))
            else:
                other += float(t.time_s)
        return compute, other

    return predict


def backward_efficiency_figures(m: dict[str, Any], predict: Predict) -> dict[str, tuple[Any, str]]:
    """``implementations.<name>.backward_efficiency`` by head dim: the fused backward kernel's
    compute time in the model (``predict``, made without a backward efficiency) over the time
    it took, the measured pass less the model's other backward kernels, on the non-causal
    reference shapes; the causal shape is reported in the note as a check. (The efficiency
    divides the fused kernel's compute terms alone: a ratio of whole-pass times would be off
    by the other kernels' share, and wrong where the model without it is bound by memory.)
    ``predict`` may return a plain time (taken as all compute)."""
    from ..hardware import interpolate_log2

    def parts(impl: str, shape: list[Any]) -> tuple[float, float]:
        got = predict(impl, *shape)
        return (float(got), 0.0) if not isinstance(got, tuple) else (float(got[0]), float(got[1]))

    points = [p for p in (m or {}).get("points", []) if (p.get("backward") or {}).get("time_s")]
    out: dict[str, tuple[Any, str]] = {}
    for impl in sorted({p["impl"] for p in points}):
        curve: dict[int, float] = {}
        checks = []
        for p in (q for q in points if q["impl"] == impl and tuple(q["shape"][:3]) == REFERENCE_LONG):
            compute, other = parts(impl, p["shape"])
            if p["shape"][4]:
                checks.append((p, compute, other))
            else:
                curve[int(p["shape"][3])] = round(compute / max(p["backward"]["time_s"] - other, 1e-12), 3)
        if not curve:
            continue
        b, h, n = points[0]["shape"][:3]
        note = (
            f"model compute time of the fused backward kernel (no efficiency) / measured backward less the model's "
            f"other backward kernels, fp16, {b} x {h} heads x {n} tokens, non-causal, torch.autograd.grad with the "
            "graph kept, best of three medians of CUDA-event times"
        )
        for p, compute, other in checks:
            e = interpolate_log2(tuple(sorted(curve.items())), p["shape"][3])
            err = (other + compute / e - p["backward"]["time_s"]) / p["backward"]["time_s"]
            note += f"; check, causal d={p['shape'][3]}: predicted with this efficiency {err:+.1%} off"
        out[f"implementations.{impl}.backward_efficiency"] = (dict(sorted(curve.items())), note)
    return out


def backward_figures(
    result: dict[str, Any],
    profile: Any = None,
    predict: Predict | None = None,
    scores: DropoutScores | None = None,
) -> dict[str, tuple[Any, str]]:
    """Every profile field the backward measurements give (value, note)."""
    out: dict[str, tuple[Any, str]] = {}
    out.update(softmax_backward_figures(result.get("softmax_backward") or {}))
    out.update(dropout_figures(result.get("dropout") or {}))
    out.update(elementwise_backward_figures(result.get("elementwise_backward") or {}))
    out.update(reduction_figures(result.get("reduction") or {}))
    if predict is None and profile is not None:
        predict = predicted_backward_s(profile)
    if predict is not None:
        out.update(backward_efficiency_figures(result.get("sdpa_backward") or {}, predict))
    if scores is None and profile is not None:
        scores = dropout_scores(profile)
    if scores is not None:
        out.update(dropout_rate_figures(result.get("sdpa_dropout") or {}, scores))
    return out
