"""ATen's small kernels and cuBLAS' split-K reduction, from their microbenchmark: the floors of
``kernels.small``.

``validation/probes/tiny_ops_probe.py`` (record :data:`RECORD`) repeats one op back to back behind
a sleeping kernel, so the host is never the limit, and reads its pace: what each call adds to the
queue, kernel end to kernel end, the figure the model's kernel time is (the launch overhead plus
the kernel's own work). Over a few thousand elements the pace stops falling with the size: each
path has a floor. Each figure here is that pace less the profile's ``launch_overhead`` (the pace of
an empty kernel), the median over the path's ops at the sizes where no op of it moves enough bytes
to matter:

* ``kernels.small.vectorised``: the vectorised elementwise kernel (a sum, a product, ``rsqrt``,
  ``silu``, a narrowing cast, a contiguous copy), 1 to 65,536 elements;
* ``kernels.small.generic``: ATen's generic kernel (an operand broadcast or strided), 16,384 to
  262,144 elements (below, a one-row operand is contiguous and the op vectorised);
* ``kernels.small.cast``: a widening cast (bf16 to fp32, element by element), 4,096 to 262,144;
* ``kernels.small.reduction`` and ``reduction_fp32``: a sum (bf16) and a mean (fp32) over rows of
  4,096 elements, by the rows (elements written): one row's floor is short, sixteen rows or more
  take several microseconds however few (ATen spreads each long row over CTAs and combines them);
* ``kernels.small.splitk_reduce``: cuBLAS' reduction after a split-K product of few output tiles
  (``cublasLt::splitKreduce_kernel``): the product's pace less its main kernel's CUPTI time and
  one launch overhead, the median over the projections that split (which ones do:
  :func:`memmodel.tracing.kernels.splits_k`).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from typing import Any

RECORD = "validation/h200/tiny-ops/tiny-ops.jsonl.gz"
COMMAND = "python3 validation/probes/tiny_ops_probe.py tiny-ops.jsonl"
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
}
#: the reductions (op, its input's bytes an element) and the sizes their curve is read over
REDUCTIONS = (("sum last dim bf16 (reduction)", 2), ("mean last dim fp32 (reduction)", 4))
REDUCTION_UP_TO = 1 << 20


def _rows(lines: Iterable[Mapping[str, Any]], section: str) -> list[Mapping[str, Any]]:
    return [r for r in lines if r.get("section") == section and float(r.get("pace_us") or 0) > 0]


def path_floor(lines: Iterable[Mapping[str, Any]], path: str, launch_s: float) -> float | None:
    """Seconds: the median over ``path``'s ops and sizes of the pace less ``launch_s`` (never below 0)."""
    ops, low, high = PATHS[path]
    values = [
        float(r["pace_us"]) * 1e-6 - launch_s
        for r in _rows(lines, "small")
        if r.get("op") in ops and low <= int(r["elements"]) <= high
    ]
    return max(float(f"{statistics.median(values):.4g}"), 0.0) if values else None


def reduction_floor(lines: Iterable[Mapping[str, Any]], op: str, launch_s: float) -> dict[int, float]:
    """``{rows: seconds}`` of the reduction ``op`` over rows of 4096 (its pace less ``launch_s``),
    at one row (4096 elements) and more, up to :data:`REDUCTION_UP_TO` elements."""
    out: dict[int, float] = {}
    for r in _rows(lines, "small"):
        if r.get("op") == op and int(r.get("cols") or 0) == 4096 and int(r["elements"]) <= REDUCTION_UP_TO:
            out[int(r["rows"])] = max(float(f"{float(r['pace_us']) * 1e-6 - launch_s:.4g}"), 0.0)
    return dict(sorted(out.items()))


def splitk_floor(lines: Iterable[Mapping[str, Any]], launch_s: float) -> float | None:
    """Seconds: the median over the products that split (a ``splitKreduce`` kernel among theirs)
    of the pace less the main kernel's CUPTI time and ``launch_s``."""
    values = []
    for r in _rows(lines, "gemv"):
        names = [k for k in r.get("kernels") or () if "splitKreduce" not in k["name"] and "Memset" not in k["name"]]
        if len(names) == 1 and any("splitKreduce" in k["name"] for k in r["kernels"]):
            values.append(float(r["pace_us"]) * 1e-6 - float(names[0]["us"]) * 1e-6 - launch_s)
    return max(float(f"{statistics.median(values):.4g}"), 0.0) if values else None


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


def figures(lines: Iterable[Mapping[str, Any]], launch_s: float) -> dict[str, tuple[Any, str]]:
    """Profile field -> (value, note) of every ``kernels.small`` figure ``lines`` measure, each
    less the profile's launch overhead ``launch_s``."""
    lines = list(lines)
    out: dict[str, tuple[Any, str]] = {}
    tail = (
        f"the pace of the op queued back to back behind a sleeping kernel less the launch overhead "
        f"({_us(launch_s)}): memmodel.calibration.small_kernels"
    )
    texts = {
        "vectorised": "ATen's vectorised elementwise kernel (sums, products, rsqrt, silu, a narrowing cast, a clone), "
        "1 to 65536 elements, the median",
        "generic": "ATen's generic elementwise kernel (a broadcast row, a strided operand, a copy into a strided "
        "view), 16384 to 262144 elements, the median",
        "cast": "a widening cast (bf16 to fp32, element by element), 4096 to 262144 elements, the median",
    }
    for path, text in texts.items():
        value = path_floor(lines, path, launch_s)
        if value is not None:
            out[f"kernels.small.{path}"] = (_us(value), f"{text}; {tail}")
    for (op, size), key in zip(REDUCTIONS, ("reduction", "reduction_fp32")):
        curve = reduction_floor(lines, op, launch_s)
        if curve:
            what = "x.sum(-1) of bf16" if size == 2 else "x.mean(-1) of fp32"
            out[f"kernels.small.{key}"] = (
                {k: _us(v) for k, v in curve.items()},
                f"{what} rows of 4096, by rows (elements written); {tail}",
            )
    split = splitk_floor(lines, launch_s)
    if split is not None:
        out["kernels.small.splitk_reduce"] = (
            _us(split),
            "cuBLAS' splitKreduce kernel after a split-K product: F.linear of 1 to 64 rows by the projections of "
            "Llama-3-8B and Qwen2.5-7B that split, the product's pace less its main kernel's CUPTI time and the "
            f"launch overhead ({_us(launch_s)}), the median: memmodel.calibration.small_kernels",
        )
    return out


def apply(data: dict[str, Any], lines: list[Mapping[str, Any]], launch_s: float) -> dict[str, Any]:
    """``data`` (a profile's YAML mapping) with the ``kernels.small`` figures and their source."""
    from .serving import cite

    found = figures(lines, launch_s)
    if not found:
        return data
    small = data.setdefault("kernels", {}).setdefault("small", {})
    for fpath, (value, note) in found.items():
        small[fpath.rsplit(".", 1)[1]] = {"value": value, "source": SOURCE, "note": note}
    env = next((r for r in lines if r.get("section") == "env"), {})
    title = "memmodel microbenchmark of ATen's small kernels queued back to back"
    return cite(data, SOURCE, title, RECORD, COMMAND, env, date="2026-12-04")
