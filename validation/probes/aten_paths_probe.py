"""Microbenchmark of ATen's elementwise kernel paths on the lent H200 (issue #30: what the user wrote).

User-written attention launches ATen's own kernels between the products: casts of the scores to
fp32 and back, copies of permuted heads, ``cat`` for the rotary halves, sums for the gradients of
biases and GQA heads, softmax in fp32. memmodel priced them at two rates (a contiguous copy, a
masked fill with a broadcast mask); ``memmodel trace`` against the profiler showed each kind off
in its own direction (validation/NOTES.md). Each section times one path, one factor at a time:

* ``cast``: ``x.to(dtype)`` of a contiguous tensor, each direction (bf16/fp16 -> fp32, fp32 ->
  bf16/fp16), against a same-dtype ``clone``;
* ``gather``: ``x.permute(1, 0, 2).contiguous()`` of an (A, B, r) tensor: the output is written
  in order, the input read in runs of r elements (r = 1 is a transposed pair of dims);
* ``shaped``: the copies attention code makes: heads split and merged, the last pair transposed,
  K/V expanded to every query head (a broadcast source), a cast of a strided view;
* ``cat``: ``torch.cat`` of two halves along the last dim (rotary), along dim 0, ``stack``;
* ``reduce``: ``sum`` over rows (bias gradients), over the last dim, over a GQA group;
* ``binary``: a tensor times a broadcast row or column, times a 0-dim tensor, plus a same-shape
  tensor;
* ``softmax``: ``torch.softmax`` over the last dim by row length, fp16, bf16 and fp32 in and out.

Two sizes a pattern: 2^27 bytes of output (far past the 60 MB L2, the figure) and 2^23 (an
L2-sized tensor, as small traced kernels are).

    python validation/probes/aten_paths_probe.py OUT.jsonl [SECTION ...]

Sections (the first run took the first seven): casts, gathers, shaped, cats, reductions, binaries,
softmaxes; then few_rows (the softmax over fewer rows than fill the GPU, by rows and length),
strided_cats (``cat`` of the rotary halves of permuted heads), small_sums (bias-gradient and norm
sizes); softmax_inputs (the softmax over masked and unmasked scores as attention code leaves them).

One JSON line a measurement: the bytes read (each input once) and written, the median of 20
CUDA-event timings, the kernels the profiler saw in one call.
"""

from __future__ import annotations

import json
import sys

import torch
from probe_timing import kernel_names, run_sections, timed

BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32
SIZES = (1 << 27, 1 << 23)  # output bytes
NAMES = {BF16: "bf16", FP16: "fp16", FP32: "fp32"}


def nbytes(*ts: torch.Tensor) -> int:
    """Bytes of each tensor's distinct storage span (a broadcast or strided view: its base's extent)."""
    total = 0
    for t in ts:
        if t.dim() == 0:
            total += t.element_size()
            continue
        span = 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride()) if s > 0)
        total += span * t.element_size()
    return total


def emit(f, section: str, pattern: str, fn, inputs, out_bytes: int, **extra) -> None:
    us = timed(fn)
    read = nbytes(*inputs)
    row = {
        "section": section,
        "pattern": pattern,
        "read_bytes": read,
        "write_bytes": out_bytes,
        "time_us": us,
        "bytes_per_s": (read + out_bytes) / (us * 1e-6),
        "kernels": kernel_names(fn),
        **extra,
    }
    f.write(json.dumps(row) + "\n")
    f.flush()
    print(section, pattern, extra, f"{us:.2f} us", f"{row['bytes_per_s'] / 1e12:.3f} TB/s", flush=True)


def casts(f) -> None:
    for out_bytes in SIZES:
        for src, dst in ((BF16, FP32), (FP16, FP32), (FP32, BF16), (FP32, FP16), (BF16, BF16), (FP32, FP32)):
            n = out_bytes // torch.empty((), dtype=dst).element_size()
            x = torch.randn(n, device="cuda", dtype=FP32).to(src)
            fn = (lambda x=x: x.clone()) if src == dst else (lambda x=x, d=dst: x.to(d))
            emit(f, "cast", f"{NAMES[src]}->{NAMES[dst]}", fn, [x], out_bytes, elements=n, out_size=out_bytes)
            del x


def gathers(f) -> None:
    for out_bytes in SIZES:
        for dtype in (BF16, FP32):
            e = torch.empty((), dtype=dtype).element_size()
            n = out_bytes // e
            for r in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512):
                rest = n // r
                a = 1 << ((rest.bit_length() - 1) // 2)
                b = rest // a
                x = torch.randn(a, b, r, device="cuda", dtype=dtype)
                fn = lambda x=x: x.permute(1, 0, 2).contiguous()  # noqa: E731
                emit(f, "gather", "permute(1,0,2)", fn, [x], out_bytes, dtype=NAMES[dtype], run=r, run_bytes=r * e,
                     shape=[a, b, r], out_size=out_bytes)  # fmt: skip
                del x


def shaped(f) -> None:
    for out_bytes in SIZES:
        for d in (64, 128):
            e = 2
            tokens = out_bytes // (e * 32 * d)  # 32 heads
            b, n = (8, tokens // 8) if tokens >= 64 else (1, tokens)
            x = torch.randn(b, n, 32, d, device="cuda", dtype=BF16)  # (B, N, H, d): a projection's heads
            emit(f, "shaped", "split heads", lambda x=x: x.transpose(1, 2).contiguous(), [x], out_bytes, d=d,
                 dtype="bf16", out_size=out_bytes)  # fmt: skip
            y = x.transpose(1, 2).contiguous()  # (B, H, N, d)
            emit(f, "shaped", "merge heads", lambda y=y: y.transpose(1, 2).contiguous(), [y], out_bytes, d=d,
                 dtype="bf16", out_size=out_bytes)  # fmt: skip
            emit(f, "shaped", "transpose last pair", lambda y=y: y.transpose(-2, -1).contiguous(), [y], out_bytes,
                 d=d, dtype="bf16", out_size=out_bytes)  # fmt: skip
            qkv = torch.randn(b, n, 3, 32, d, device="cuda", dtype=BF16)
            emit(f, "shaped", "qkv permute(2,0,3,1,4)", lambda t=qkv: t.permute(2, 0, 3, 1, 4).contiguous(), [qkv],
                 3 * out_bytes, d=d, dtype="bf16", out_size=3 * out_bytes)  # fmt: skip
            del x, y, qkv
            for dtype in (BF16, FP32):
                for g in (4, 8):
                    ee = torch.empty((), dtype=dtype).element_size()
                    kv_tokens = out_bytes // (ee * 32 * d)
                    kb, kn = (4, kv_tokens // 4) if kv_tokens >= 16 else (1, kv_tokens)
                    k = torch.randn(kb, 32 // g, kn, d, device="cuda", dtype=dtype)

                    def expand(k=k, g=g):
                        bb, hk, nn, dd = k.shape
                        return k[:, :, None].expand(bb, hk, g, nn, dd).reshape(bb, hk * g, nn, dd)

                    emit(f, "shaped", "expand kv", expand, [k], out_bytes, d=d, group=g, dtype=NAMES[dtype],
                         out_size=out_bytes)  # fmt: skip
                    del k
        # MLA's latent row: V is its first 512 of 576 elements, cast to fp32 (the math path)
        rows = out_bytes // (512 * 4)
        lat = torch.randn(rows, 576, device="cuda", dtype=BF16)
        emit(f, "shaped", "cast strided view", lambda t=lat: t[:, :512].to(FP32), [lat[:, :512]], out_bytes,
             dtype="bf16->fp32", out_size=out_bytes)  # fmt: skip
        emit(f, "shaped", "clone strided view", lambda t=lat: t[:, :512].clone(), [lat[:, :512]], out_bytes // 2,
             dtype="bf16", out_size=out_bytes // 2)  # fmt: skip
        del lat


def cats(f) -> None:
    for out_bytes in SIZES:
        for half in (32, 64, 128):
            m = out_bytes // (2 * half * 2)
            a = torch.randn(m, half, device="cuda", dtype=BF16)
            b = torch.randn(m, half, device="cuda", dtype=BF16)
            emit(f, "cat", "cat last dim", lambda a=a, b=b: torch.cat((a, b), dim=-1), [a, b], out_bytes, half=half,
                 dtype="bf16", out_size=out_bytes)  # fmt: skip
            del a, b
        m = out_bytes // (2 * 4096 * 2)
        a = torch.randn(m, 4096, device="cuda", dtype=BF16)
        b = torch.randn(m, 4096, device="cuda", dtype=BF16)
        emit(f, "cat", "cat dim 0", lambda a=a, b=b: torch.cat((a, b), dim=0), [a, b], out_bytes, dtype="bf16",
             out_size=out_bytes)  # fmt: skip
        c = torch.randn(m, 4096, device="cuda", dtype=BF16)
        emit(f, "cat", "stack 3", lambda a=a, b=b, c=c: torch.stack((a, b, c)), [a, b, c], 3 * out_bytes // 2,
             dtype="bf16", out_size=3 * out_bytes // 2)  # fmt: skip
        del a, b, c


def reductions(f) -> None:
    for in_bytes in SIZES:
        for cols in (768, 2304, 4096):
            rows = in_bytes // (cols * 2)
            x = torch.randn(rows, cols, device="cuda", dtype=BF16)
            emit(f, "reduce", "sum rows (dim 0)", lambda x=x: x.sum(0), [x], cols * 2, cols=cols, rows=rows,
                 dtype="bf16", in_size=in_bytes)  # fmt: skip
            emit(f, "reduce", "sum last dim", lambda x=x: x.sum(-1), [x], rows * 2, cols=cols, rows=rows,
                 dtype="bf16", in_size=in_bytes)  # fmt: skip
            del x
        for g in (4, 8):
            tokens = in_bytes // (32 * 128 * 2)
            x = torch.randn(tokens, 32 // g, g, 128, device="cuda", dtype=BF16)
            emit(f, "reduce", "sum group (dim 2)", lambda x=x: x.sum(2), [x], in_bytes // g, group=g, dtype="bf16",
                 in_size=in_bytes)  # fmt: skip
            del x


def binaries(f) -> None:
    for out_bytes in SIZES:
        for dtype in (BF16, FP32):
            e = torch.empty((), dtype=dtype).element_size()
            cols = 4096
            rows = out_bytes // (cols * e)
            x = torch.randn(rows, cols, device="cuda", dtype=dtype)
            row = torch.randn(cols, device="cuda", dtype=dtype)
            col = torch.randn(rows, 1, device="cuda", dtype=dtype)
            zero = torch.tensor(8.0, device="cuda", dtype=dtype)
            y = torch.randn(rows, cols, device="cuda", dtype=dtype)
            for name, fn, ins in (
                ("times row", lambda x=x, w=row: x * w, [x, row]),
                ("times column", lambda x=x, c=col: x * c, [x, col]),
                ("divided by 0-dim", lambda x=x, z=zero: x / z, [x, zero]),
                ("times number", lambda x=x: x * 0.125, [x]),
                ("plus same shape", lambda x=x, y=y: x + y, [x, y]),
            ):
                emit(f, "binary", name, fn, ins, out_bytes, dtype=NAMES[dtype], out_size=out_bytes)
            del x, y, row, col


def softmaxes(f) -> None:
    for in_bytes in SIZES:
        for dtype in (FP16, BF16, FP32):
            e = torch.empty((), dtype=dtype).element_size()
            for length in (64, 128, 197, 256, 512, 1024, 2048, 4096, 8192):
                rows = in_bytes // (length * e)
                x = torch.randn(rows, length, device="cuda", dtype=dtype)
                emit(f, "softmax", "softmax last dim", lambda x=x: torch.softmax(x, -1), [x], in_bytes,
                     dtype=NAMES[dtype], row=length, rows=rows, in_size=in_bytes)  # fmt: skip
                del x


def few_rows(f) -> None:
    """The softmax over fewer rows than fill the GPU (decoding): its time by rows and length."""
    for dtype in (BF16, FP32):
        for length in (256, 1024, 2048, 4096, 8192):
            for rows in (1, 32, 132, 264, 1056, 2112, 4224, 8448):
                x = torch.randn(rows, length, device="cuda", dtype=dtype)
                emit(f, "few_rows", "softmax last dim", lambda x=x: torch.softmax(x, -1), [x], x.numel() * x.element_size(),
                     dtype=NAMES[dtype], row=length, rows=rows)  # fmt: skip
                del x


def strided_cats(f) -> None:
    """``cat`` of a strided view: the rotary halves of heads permuted from a projection's output."""
    for d in (64, 128):
        for tokens in (1, 512, 4096):
            x = torch.randn(1, tokens, 32, d, device="cuda", dtype=BF16).transpose(1, 2)  # (1, H, N, d), strided
            x1, x2 = x[..., : d // 2], x[..., d // 2 :]
            out = 2 * x1.numel() * 2
            emit(f, "strided_cat", "cat(-x2, x1) of permuted heads", lambda a=x1, b=x2: torch.cat((-b, a), dim=-1),
                 [x1, x2], out, d=d, tokens=tokens)  # fmt: skip
            n2 = (-x2).contiguous()
            emit(f, "strided_cat", "cat(contiguous, strided half)", lambda a=x1, b=n2: torch.cat((b, a), dim=-1),
                 [x1, n2], out, d=d, tokens=tokens, run=d // 2)  # fmt: skip
            del x, x1, x2, n2


def small_sums(f) -> None:
    """Sums the size of a bias gradient and a norm's statistics: few outputs from many rows."""
    for rows, cols in ((512, 768), (2048, 768), (8192, 768), (2048, 2304), (8192, 2304), (4096, 4096), (16384, 4096)):
        x = torch.randn(rows, cols, device="cuda", dtype=BF16)
        emit(f, "small_sum", "sum rows (dim 0)", lambda x=x: x.sum(0), [x], cols * 2, rows=rows, cols=cols)
        emit(f, "small_sum", "sum last dim", lambda x=x: x.sum(-1), [x], rows * 2, rows=rows, cols=cols)
        x32 = x.float()
        emit(f, "small_sum", "mean last dim fp32", lambda x=x32: x.pow(2).mean(-1, keepdim=True), [x32], rows * 4,
             rows=rows, cols=cols)  # fmt: skip
        del x, x32


def softmax_inputs(f) -> None:
    """The softmax over scores as attention code leaves them: plain, with an additive finite mask
    (the FlashAttention benchmark's −10000 triu), a ``where`` to the dtype's lowest (GPT-2), −inf
    (``masked_fill``), and straight from a batched product; bf16, rows of 197 to 2048 keys."""
    for n in (197, 512, 1024, 2048):
        bh = max(1, (1 << 26) // (n * n * 2))
        x = torch.randn(bh, n, n, device="cuda", dtype=BF16)
        size = x.numel() * 2
        causal = torch.ones(n, n, device="cuda", dtype=torch.bool).tril()
        inputs = {
            "plain": x,
            "additive -10000": x + torch.triu(torch.full((n, n), -10000.0, device="cuda"), 1).to(BF16),
            "where lowest": torch.where(causal, x, torch.tensor(torch.finfo(BF16).min, device="cuda", dtype=BF16)),
            "masked -inf": x.masked_fill(~causal, float("-inf")),
        }
        q = torch.randn(bh, n, 64, device="cuda", dtype=BF16)
        inputs["from bmm"] = q @ q.transpose(1, 2)
        for name, t in inputs.items():
            emit(f, "softmax_inputs", name, lambda t=t: torch.softmax(t, -1), [t], size, row=n, rows=bh * n)
        del x, inputs, q, causal


PARTS = {
    f.__name__: f
    for f in (
        casts,
        gathers,
        shaped,
        cats,
        reductions,
        binaries,
        softmaxes,
        few_rows,
        strided_cats,
        small_sums,
        softmax_inputs,
    )
}
#: the first run's sections (validation/h200/aten-paths/aten-paths.jsonl.gz)
FIRST = ("casts", "gathers", "shaped", "cats", "reductions", "binaries", "softmaxes")


def main(out: str, parts: tuple[str, ...] = FIRST) -> None:
    run_sections(out, [PARTS[p] for p in parts])


if __name__ == "__main__":
    main(sys.argv[1], tuple(sys.argv[2:]) or FIRST)
