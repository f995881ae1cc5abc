"""Calibration of ATen's own elementwise kernel paths: what user-written attention launches between
its products (``memmodel trace``, PyTorch's math path).

The same measurements as the H200's microbenchmark (``validation/probes/aten_paths_probe.py``), in
its rows' format, so :func:`memmodel.calibration.aten_paths.figures` fits both: a widening cast, a
permuted copy by the run its input is read in (2- and 4-byte elements), an expanded view's copy,
``cat`` of a strided half, the fp32 softmax by row length, and the softmax's time over one row a SM
or fewer. Each time is the kernels' own (CUPTI, the median of a few profiled calls): a CUDA-event
time of one call holds the host's dispatch. ``--quick`` measures fewer runs and row lengths.
"""

from __future__ import annotations

from typing import Any

from ..calibration.aten_paths import FLOOR_ROWS, LARGE, WIDENING

#: runs (elements) of the permuted copies; ``--quick``: fewer
RUNS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
QUICK_RUNS = (1, 4, 32, 512)
#: row lengths of the fp32 softmax curve and of the floors
SOFTMAX_ROWS = (64, 128, 256, 512, 1024, 2048, 4096, 8192)
QUICK_SOFTMAX_ROWS = (256, 1024, 2048, 4096, 8192)
FLOOR_LENGTHS = (256, 1024, 2048, 4096, 8192)


def measure_aten_paths(ctx: Any) -> dict[str, Any]:
    """The rows :func:`memmodel.calibration.aten_paths.figures` takes (``{"lines": [...]}``)."""
    torch = ctx.torch
    quick = ctx.plan.quick
    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
    lines: list[dict[str, Any]] = []

    def row(section: str, pattern: str, fn: Any, read: int, written: int, **extra: Any) -> None:
        kernels = ctx.kernel_times(fn, sessions=3)
        lines.append(
            {
                "section": section,
                "pattern": pattern,
                "read_bytes": int(read),
                "write_bytes": int(written),
                "kernels": [{"name": k["name"][:200], "us": k["time_s"] * 1e6} for k in kernels],
                **extra,
            }
        )

    def randn(*shape: int, dtype: str = "bf16") -> Any:
        return torch.randn(*shape, device=ctx.device, dtype=dtypes[dtype], generator=ctx.generator(41))

    for pattern in WIDENING:  # widening casts: bf16 or fp16 -> fp32
        src = pattern.split("->")[0]
        n = LARGE // 4
        x = randn(n, dtype=src)
        row("cast", pattern, lambda x=x: x.to(torch.float32), 2 * n, 4 * n, out_size=LARGE)
        del x
        ctx.free()
    for dtype, e in (("bf16", 2), ("fp32", 4)):  # permuted copies by run
        n = LARGE // e
        for run in QUICK_RUNS if quick else RUNS:
            rest = n // run
            a = 1 << ((rest.bit_length() - 1) // 2)
            x = randn(a, rest // a, run, dtype=dtype)
            row("gather", "permute(1,0,2)", lambda x=x: x.permute(1, 0, 2).contiguous(), LARGE, LARGE, dtype=dtype,
                run=run, out_size=LARGE)  # fmt: skip
            del x
            ctx.free()
        # K of 4 K/V heads copied to groups of 8 query heads (d 128), as repeat_kv writes it
        tokens = LARGE // (e * 32 * 128)
        k = randn(4, 4, tokens // 4, 128, dtype=dtype)

        def expand(k: Any = k) -> Any:
            b, h, n_kv, d = k.shape
            return k[:, :, None].expand(b, h, 8, n_kv, d).reshape(b, h * 8, n_kv, d)

        row("shaped", "expand kv", expand, LARGE // 8, LARGE, d=128, group=8, dtype=dtype, out_size=LARGE)
        del k
        ctx.free()
    for d in (64, 128):  # cat of a strided half: the rotary halves of permuted heads
        tokens = 4096
        x = randn(1, tokens, 32, d).transpose(1, 2)
        half, neg = x[..., : d // 2], (-x[..., d // 2 :]).contiguous()
        out = 2 * half.numel() * 2
        row("strided_cat", "cat(contiguous, strided half)", lambda a=half, b=neg: torch.cat((b, a), dim=-1), out, out,
            d=d, tokens=tokens)  # fmt: skip
        del x, half, neg
        ctx.free()
    for length in QUICK_SOFTMAX_ROWS if quick else SOFTMAX_ROWS:  # the fp32 softmax curve
        x = randn(LARGE // (4 * length), length, dtype="fp32")
        row("softmax", "softmax last dim", lambda x=x: torch.softmax(x, -1), LARGE, LARGE, dtype="fp32", row=length,
            in_size=LARGE)  # fmt: skip
        del x
        ctx.free()
    for dtype in ("bf16", "fp32"):  # the softmax over one row a SM or fewer
        for length in FLOOR_LENGTHS:
            for rows in (1, FLOOR_ROWS):
                x = randn(rows, length, dtype=dtype)
                size = x.numel() * x.element_size()
                row("few_rows", "softmax last dim", lambda x=x: torch.softmax(x, -1), size, size, dtype=dtype,
                    row=length, rows=rows)  # fmt: skip
                del x
    ctx.free()
    return {"lines": lines}
