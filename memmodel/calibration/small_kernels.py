"""ATen's small kernels and cuBLAS' split-K reduction, from their microbenchmark: the floors of
``kernels.small``.

``validation/probes/tiny_ops_probe.py`` (record :data:`RECORD`) runs each op at 1 to 4M elements,
its kernels' CUPTI durations read by the profiler. Over a few thousand elements a kernel's duration
stops falling with its size: each path has a floor. The model times a kernel as the launch overhead
plus its own duration (every library rate is fitted to CUPTI durations, as the softmax's floor over
a few rows is), so each figure here is a CUPTI duration, the median over the path's ops at the sizes
where no op of it moves enough bytes to matter:

* ``kernels.small.vectorised``: the vectorised elementwise kernel (a sum, a product, ``rsqrt``,
  ``silu``, a narrowing cast, a contiguous copy), 1 to 65,536 elements;
* ``kernels.small.generic``: ATen's generic kernel (an operand broadcast or strided), 16,384 to
  262,144 elements (below, a one-row operand is contiguous and the op vectorised);
* ``kernels.small.cast``: a widening cast (bf16 to fp32, element by element), 4,096 to 262,144;
* ``kernels.small.reduction`` and ``reduction_fp32``: a sum (bf16) and a mean (fp32) over rows of
  4,096 elements, by the rows (elements written): one row's floor is short, sixteen rows or more
  take several microseconds however few (ATen spreads each long row over CTAs and combines them);
* ``kernels.small.dropout`` (third run, :data:`RECORD_3`): ``F.dropout``'s kernel (ATen's fused
  dropout: Philox draws, the output and its mask), 1 to 65,536 elements;
* ``kernels.small.gemm``: a cuBLAS product too small for its bytes to matter (GPT-2's projections
  of 1 to 64 rows, 1.2 and 3.5 MB of weights: the probe's smallest), its main kernel;
* ``kernels.small.splitk_reduce``: cuBLAS' reduction after a split-K product of few output tiles
  (``cublasLt::splitKreduce_kernel``), the median over the projections that split (which ones do:
  :func:`memmodel.tracing.kernels.splits_k`).

The same ops repeated back to back pace about half a microsecond under the launch overhead plus
their duration (the probe's ``pace_us``: a queue of one tiny kernel hides part of each launch); in a
layer's queue of different kernels each adds the launch overhead (validation/h200/tiny-ops/README.md).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from typing import Any

RECORD = "validation/h200/tiny-ops/tiny-ops.jsonl.gz"
COMMAND = "python3 validation/probes/tiny_ops_probe.py tiny-ops.jsonl"
#: the third run: dropout's kernel
RECORD_3 = "validation/h200/tiny-ops/tiny-ops-3.jsonl.gz"
SOURCE = "measured-small-kernels"

#: the probe's ops of each path, and the sizes (elements) its floor is read at
PATHS: dict[str, tuple[tuple[str, ...], int, int]] = {
    "vectorised": (
        (
            "add bf16 (vectorised)",
            "add fp32 (vectorised)",
            "cast fp32->bf16",
            "rsqrt fp32",
            "silu bf16",
            "clone bf16",
        ),
        1,
        65536,
    ),
    "generic": (
        ("mul row broadcast bf16 (generic)", "neg strided bf16 (generic)", "copy into strided bf16"),
        16384,
        262144,
    ),
    "cast": (("cast bf16->fp32",), 4096, 262144),
    "dropout": (("dropout bf16",), 1, 65536),
}
#: the reductions (op, its input's bytes an element) and the sizes their curve is read over
REDUCTIONS = (("sum last dim bf16 (reduction)", 2), ("mean last dim fp32 (reduction)", 4))
REDUCTION_UP_TO = 1 << 20


def _rows(lines: Iterable[Mapping[str, Any]], section: str) -> list[Mapping[str, Any]]:
    return [r for r in lines if r.get("section") == section and float(r.get("pace_us") or 0) > 0]


def _cupti_s(row: Mapping[str, Any]) -> float:
    """Seconds: the CUPTI durations of the row's kernels, summed."""
    return sum(float(k["us"]) for k in row.get("kernels") or ()) * 1e-6


def path_floor(lines: Iterable[Mapping[str, Any]], path: str) -> float | None:
    """Seconds: the median over ``path``'s ops and sizes of their kernels' CUPTI duration."""
    ops, low, high = PATHS[path]
    values = [_cupti_s(r) for r in _rows(lines, "small") if r.get("op") in ops and low <= int(r["elements"]) <= high]
    return float(f"{statistics.median(values):.4g}") if values else None


def reduction_floor(lines: Iterable[Mapping[str, Any]], op: str) -> dict[int, float]:
    """``{rows: seconds}`` of the reduction ``op`` over rows of 4096 (its CUPTI duration), at one
    row (4096 elements) and more, up to :data:`REDUCTION_UP_TO` elements."""
    out: dict[int, float] = {}
    for r in _rows(lines, "small"):
        if r.get("op") == op and int(r.get("cols") or 0) == 4096 and int(r["elements"]) <= REDUCTION_UP_TO:
            out[int(r["rows"])] = float(f"{_cupti_s(r):.4g}")
    return dict(sorted(out.items()))


def splitk_floor(lines: Iterable[Mapping[str, Any]]) -> float | None:
    """Seconds: the median CUPTI duration of the ``splitKreduce`` kernels of the products that split."""
    values = [
        float(k["us"]) * 1e-6
        for r in _rows(lines, "gemv")
        for k in r.get("kernels") or ()
        if "splitKreduce" in k["name"]
    ]
    return float(f"{statistics.median(values):.4g}") if values else None


#: the probe's products small enough for their kernel's duration to be its floor
SMALL_PRODUCTS = ("gpt2 qkv", "gpt2 proj")


def gemm_floor(lines: Iterable[Mapping[str, Any]]) -> float | None:
    """Seconds: the median CUPTI duration of the main kernel of :data:`SMALL_PRODUCTS`."""
    values = [
        float(k["us"]) * 1e-6
        for r in _rows(lines, "gemv")
        if r.get("projection") in SMALL_PRODUCTS
        for k in r.get("kernels") or ()
        if "splitKreduce" not in k["name"] and "Memset" not in k["name"]
    ]
    return float(f"{statistics.median(values):.4g}") if values else None


def split_products(lines: Iterable[Mapping[str, Any]]) -> list[tuple[int, int, int, bool]]:
    """``(rows, inner, columns, split)`` of each ``F.linear`` the probe ran: whether cuBLAS ran a
    split-K product (a reduction kernel after it)."""
    return [
        (int(r["rows"]), int(r["k"]), int(r["n"]), any("splitKreduce" in k["name"] for k in r["kernels"]))
        for r in _rows(lines, "gemv")
        if r.get("op") == "linear"
    ]


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.4g} us"


def figures(lines: Iterable[Mapping[str, Any]]) -> dict[str, tuple[Any, str]]:
    """Profile field -> (value, note) of every ``kernels.small`` figure ``lines`` measure."""
    lines = list(lines)
    out: dict[str, tuple[Any, str]] = {}
    tail = "the kernels' CUPTI duration (the model adds the launch overhead): memmodel.calibration.small_kernels"
    texts = {
        "vectorised": "ATen's vectorised elementwise kernel (sums, products, rsqrt, silu, a narrowing cast, a clone), "
        "1 to 65536 elements, the median",
        "generic": "ATen's generic elementwise kernel (a broadcast row, a strided operand, a copy into a strided "
        "view), 16384 to 262144 elements, the median",
        "cast": "a widening cast (bf16 to fp32, element by element), 4096 to 262144 elements, the median",
        "dropout": "F.dropout(x, 0.1) (ATen's fused dropout kernel: Philox draws, the output and its mask), 1 to "
        "65536 elements, the median (the probe's third run)",
    }
    for path, text in texts.items():
        value = path_floor(lines, path)
        if value is not None:
            out[f"kernels.small.{path}"] = (_us(value), f"{text}; {tail}")
    for (op, size), key in zip(REDUCTIONS, ("reduction", "reduction_fp32")):
        curve = reduction_floor(lines, op)
        if curve:
            what = "x.sum(-1) of bf16" if size == 2 else "x.mean(-1) of fp32"
            out[f"kernels.small.{key}"] = (
                {k: _us(v) for k, v in curve.items()},
                f"{what} rows of 4096, by rows (elements written); {tail}",
            )
    gemm = gemm_floor(lines)
    if gemm is not None:
        out["kernels.small.gemm"] = (
            _us(gemm),
            "a cuBLAS product too small for its bytes to matter: F.linear of 1 to 64 rows by GPT-2's projections "
            "(768 to 2304 and 768 columns), its main kernel's CUPTI duration, the median: "
            "memmodel.calibration.small_kernels",
        )
    split = splitk_floor(lines)
    if split is not None:
        out["kernels.small.splitk_reduce"] = (
            _us(split),
            "cuBLAS' splitKreduce kernel after a split-K product: F.linear of 1 to 64 rows by the projections of "
            "Llama-3-8B and Qwen2.5-7B that split, its CUPTI duration, the median: memmodel.calibration.small_kernels",
        )
    return out


def apply(data: dict[str, Any], lines: list[Mapping[str, Any]]) -> dict[str, Any]:
    """``data`` (a profile's YAML mapping) with the ``kernels.small`` figures and their source."""
    from .serving import cite

    found = figures(lines)
    if not found:
        return data
    small = data.setdefault("kernels", {}).setdefault("small", {})
    for fpath, (value, note) in found.items():
        small[fpath.rsplit(".", 1)[1]] = {"value": value, "source": SOURCE, "note": note}
    env = next((r for r in lines if r.get("section") == "env"), {})
    title = "memmodel microbenchmark of ATen's small kernels queued back to back"
    return cite(data, SOURCE, title, RECORD, COMMAND, env, date="2026-12-04")
