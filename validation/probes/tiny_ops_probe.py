"""Microbenchmark of ATen's small kernels queued back to back on the lent H200 (issue #30).

A decoder layer at decode runs some thirty elementwise, reduction and copy kernels over a few
thousand elements each, and cuBLAS' products of one row. Traced and measured on the H200 the layer's
kernels came out about a quarter slower than memmodel counted them, the small kernels each taking
one to three microseconds where the model had the empty kernel's launch overhead alone, and cuBLAS
adding a split-K reduction after some products that the trace did not list (validation/NOTES.md).
Each section times one thing, one factor at a time, queued as a layer queues them (behind a
sleeping kernel, so the host is not the limit):

* ``small``: the pace of one ATen op repeated back to back (kernel end to kernel end: what a layer
  of such kernels takes each), by the op's kernel family (vectorised and generic elementwise, casts,
  row reductions, ``cat``, strided copies) and its size, 1 element to 4M;
* ``mixed`` (second run): the small ops queued in turn, each launch a different kernel, against
  each repeated on its own;
* ``gemv``: ``F.linear`` of 1 to 64 rows by the projection shapes of Llama-3-8B and Qwen2.5-7B
  (and the bmm of a batch of such rows): the kernels cuBLAS runs (a split-K product and its
  reduction, or one kernel), each's CUPTI time, and the pace of the product queued back to back.

    python validation/probes/tiny_ops_probe.py OUT.jsonl [SECTION ...]

One JSON line a measurement: the op, its size, the pace (median of 5 runs of 40 queued calls,
CUDA events, behind a sleeping kernel), and the kernels the profiler saw in one call (name, CUPTI
microseconds).
"""

from __future__ import annotations

import json
import statistics
import sys

import torch
import torch.nn.functional as F
from probe_timing import kernel_names, run_sections

BF16, FP32 = torch.bfloat16, torch.float32
SIZES = (1, 256, 4096, 16384, 65536, 262144, 1 << 20, 1 << 22)  # elements of the output
REPS = 40


def pace(fn, reps: int = REPS, runs: int = 5) -> float:
    """Microseconds a call of ``fn`` adds to a queue of its calls, the host ahead of the GPU."""
    fn()
    torch.cuda.synchronize()
    values = []
    for _ in range(runs):
        torch.cuda._sleep(4_000_000)  # about 2 ms: the host queues every call before it ends
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(reps):
            fn()
        b.record()
        b.synchronize()
        values.append(a.elapsed_time(b) * 1e3 / reps)
    return statistics.median(values)


def emit(f, section: str, op: str, fn, **extra) -> None:
    row = {"section": section, "op": op, "pace_us": pace(fn), "kernels": kernel_names(fn), **extra}
    f.write(json.dumps(row) + "\n")
    f.flush()
    print(section, op, extra, f"{row['pace_us']:.3f} us", flush=True)


def small_ops(n: int) -> tuple[dict, int, int]:
    """The ops of :func:`small` over ``n`` output elements, and the rows and columns of the 2-D ones."""
    x = torch.randn(n, device="cuda", dtype=BF16)
    y = torch.randn(n, device="cuda", dtype=BF16)
    x32 = x.float()
    cols = min(n, 4096)
    rows = max(n // cols, 1)
    m = x.view(rows, cols)
    m32 = x32.view(rows, cols)
    w = torch.randn(cols, device="cuda", dtype=BF16)
    half = torch.randn(rows, 2 * cols, device="cuda", dtype=BF16)[:, cols:]  # a strided view
    dst = torch.empty(rows, 2 * cols, device="cuda", dtype=BF16)[:, cols:]
    ops = {
        "add bf16 (vectorised)": lambda: x + y,
        "add fp32 (vectorised)": lambda: x32 + x32,
        "mul row broadcast bf16 (generic)": lambda: m * w,
        "neg strided bf16 (generic)": lambda: -half,
        "cast bf16->fp32": lambda: x.float(),
        "cast fp32->bf16": lambda: x32.to(BF16),
        "rsqrt fp32": lambda: torch.rsqrt(x32),
        "silu bf16": lambda: F.silu(x),
        "mean last dim fp32 (reduction)": lambda: m32.mean(-1, keepdim=True),
        "sum last dim bf16 (reduction)": lambda: m.sum(-1),
        "cat halves bf16": lambda: torch.cat((m, m), dim=-1),
        "copy into strided bf16": lambda: dst.copy_(m),
        "clone bf16": lambda: x.clone(),
        "dropout bf16": lambda: F.dropout(x, 0.1, training=True),
    }
    return ops, rows, cols


def small(f, only: tuple[str, ...] = ()) -> None:
    for n in SIZES:
        ops, rows, cols = small_ops(n)
        for op, fn in ops.items():
            if not only or op in only:
                emit(f, "small", op, fn, elements=n, rows=rows, cols=cols)
        del ops


def dropout(f) -> None:
    """The third run: ``F.dropout`` (ATen's ``native_dropout``: Philox draws, the output and a mask)."""
    small(f, ("dropout bf16",))


#: (name, K, N) of the projections of Llama-3-8B (hidden 4096, 8 KV heads of 128, MLP 14336) and
#: Qwen2.5-7B (hidden 3584, 4 KV heads of 128, MLP 18944)
PROJECTIONS = (
    ("llama q/o", 4096, 4096),
    ("llama k/v", 4096, 1024),
    ("llama gate/up", 4096, 14336),
    ("llama down", 14336, 4096),
    ("qwen q/o", 3584, 3584),
    ("qwen k/v", 3584, 512),
    ("qwen gate/up", 3584, 18944),
    ("qwen down", 18944, 3584),
    ("gpt2 qkv", 768, 2304),
    ("gpt2 proj", 768, 768),
)


def gemv(f) -> None:
    for name, k, n in PROJECTIONS:
        weight = torch.randn(n, k, device="cuda", dtype=BF16)
        for rows in (1, 4, 16, 64):
            x = torch.randn(rows, k, device="cuda", dtype=BF16)
            emit(f, "gemv", "linear", lambda x=x, w=weight: F.linear(x, w), projection=name, rows=rows, k=k, n=n)
            del x
        del weight
    # the bmm a decode's attention runs without a fused kernel: (B·H, 1, d) @ (B·H, d, keys)
    for bh, d, keys in ((32, 128, 4096), (32, 128, 32768), (28, 128, 32768), (64, 64, 2048)):
        q = torch.randn(bh, 1, d, device="cuda", dtype=BF16)
        kt = torch.randn(bh, d, keys, device="cuda", dtype=BF16)
        emit(f, "gemv", "bmm q.kT", lambda q=q, kt=kt: torch.bmm(q, kt), bh=bh, d=d, keys=keys)
        p = torch.randn(bh, 1, keys, device="cuda", dtype=BF16)
        v = torch.randn(bh, keys, d, device="cuda", dtype=BF16)
        emit(f, "gemv", "bmm p.v", lambda p=p, v=v: torch.bmm(p, v), bh=bh, d=d, keys=keys)
        del q, kt, p, v


def mixed(f) -> None:
    """The same ops queued in turn (each launch a different kernel, as in a layer) against each
    repeated on its own: whether a queue of different kernels paces as the sum of their own."""
    for n in (4096, 16384, 65536):
        ops, rows, cols = small_ops(n)
        fns = list(ops.values())

        def cycle(fns=fns):
            for fn in fns:
                fn()

        alone = {op: pace(fn) for op, fn in ops.items()}
        row = {
            "section": "mixed",
            "op": "cycle of the small ops",
            "elements": n,
            "ops": len(fns),
            "pace_us": pace(cycle, reps=4),
            "alone_us": alone,
            "kernels": kernel_names(cycle),
        }
        f.write(json.dumps(row) + "\n")
        f.flush()
        print(
            "mixed",
            n,
            f"{row['pace_us'] / len(fns):.3f} us a launch in turn,",
            f"{sum(alone.values()) / len(fns):.3f} alone",
            flush=True,
        )
        del ops


PARTS = {fn.__name__: fn for fn in (small, gemv, mixed, dropout)}


def main(out: str, parts: tuple[str, ...] = tuple(PARTS)) -> None:
    run_sections(out, [PARTS[p] for p in parts])


if __name__ == "__main__":
    main(sys.argv[1], tuple(sys.argv[2:]) or tuple(PARTS))
