"""ATen's elementwise kernel paths, from their microbenchmark: what user-written attention launches
between its products.

``validation/probes/aten_paths_probe.py`` (record :data:`RECORD`) times each path one factor at a
time; each figure here is bytes read + written over the kernel's own time (CUPTI, the profiler's
kernel time of one call: a CUDA-event time of one call includes the host's dispatch), at the
probe's large size (2^27 bytes of output, far past the L2):

* ``kernels.cast.bandwidth``: a contiguous conversion to a wider dtype (bf16 or fp16 to fp32).
  ATen runs it element by element (``unrolled_elementwise_kernel`` with casting loads), at about
  half a copy's rate; the narrowing conversion is vectorised and runs at a copy's, so it keeps
  ``kernels.copy``.
* ``kernels.gather.bandwidth`` (2-byte elements) and ``kernels.gather.bandwidth_4byte``, by the
  run of elements the input holds contiguous along the output's order: ``x.permute(1, 0, 2)
  .contiguous()`` of (A, B, run) tensors. ATen's generic ``elementwise_kernel`` (any operand
  permuted, strided, broadcast or a 0-dim tensor) indexes every element; a run of one element (a
  transposed last pair) is its slowest. Broadcast products and strided clones in the same record
  run at the long-run figure within about a tenth.
* ``kernels.gather.expand_bandwidth`` and ``expand_bandwidth_4byte``: a copy of an expanded view
  (K/V copied to every query head of a group: ``k[:, :, None].expand(...).reshape(...)``), the
  median over groups of 4 and 8 and head dims 64 and 128. Its source is read once and held in the
  L2, so it runs faster than a permuted copy per element written.

* ``kernels.gather.cat_bandwidth`` (second run): ``torch.cat`` whose input is a strided view (the
  rotary halves of heads permuted from a projection), twice the bytes written a second: ATen's
  ``CatArrayBatchedCopy`` indexes such an input element by element, slower than the generic
  kernel at the same run (contiguous inputs keep a copy's rate).
* ``kernels.softmax.row_floor`` and ``row_floor_fp32`` (second run), by row length: the
  softmax's time over one row a SM or fewer (the most of its times at 1, 32 and 132 rows): a
  decode's softmax takes no less. The warp-per-row kernel's floor grows with its row (7.6 us at
  2048 bf16 keys), the block-per-row kernel's is shorter (2.6 us at 4096).

The generic kernel's figures count twice the bytes written (a same-dtype copy's bytes read +
written), which is how the model times it: by the elements it writes.

* ``kernels.softmax.fp32_bandwidth``, by row length: ``torch.softmax`` over fp32 rows. The same
  kernels as fp16's, at nearly twice the bytes a second up to 2048 keys (the warp-per-row kernel
  is bound by its instructions a row element, not by bytes); bf16 and fp16 run alike.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from typing import Any

RECORD = "validation/h200/aten-paths/aten-paths.jsonl.gz"
COMMAND = "python3 validation/probes/aten_paths_probe.py aten-paths.jsonl"
#: the second run (its last three sections)
RECORD_2 = "validation/h200/aten-paths/aten-paths-2.jsonl.gz"
COMMAND_2 = "python3 validation/probes/aten_paths_probe.py aten-paths-2.jsonl few_rows strided_cats small_sums"
#: the softmax over this many rows or fewer (one a SM) takes its floor: one row's time
FLOOR_ROWS = 132
SOURCE = "measured-aten-paths"
SOURCE_2 = "measured-aten-paths-2"
#: the probe's large size (bytes of output, or of input for the softmax): the figures' rows
LARGE = 1 << 27
#: the conversions ``kernels.cast`` is taken from
WIDENING = ("bf16->fp32", "fp16->fp32")


def kernel_rate(row: Mapping[str, Any]) -> float:
    """Bytes read + written a second over the row's kernels' CUPTI time (0 without kernels)."""
    us = sum(float(k.get("us", 0.0)) for k in row.get("kernels") or ())
    return (int(row["read_bytes"]) + int(row["write_bytes"])) / (us * 1e-6) if us > 0 else 0.0


def _large(lines: Iterable[Mapping[str, Any]], section: str) -> list[Mapping[str, Any]]:
    return [
        r
        for r in lines
        if r.get("section") == section and int(r.get("out_size") or r.get("in_size") or 0) == LARGE and kernel_rate(r)
    ]


def cast_rate(lines: Iterable[Mapping[str, Any]]) -> float | None:
    """The median rate of the widening conversions (16-bit to fp32), 4 significant digits."""
    rates = [kernel_rate(r) for r in _large(lines, "cast") if r.get("pattern") in WIDENING]
    return float(f"{statistics.median(rates):.4g}") if rates else None


def gather_curve(lines: Iterable[Mapping[str, Any]], dtype: str) -> dict[int, float]:
    """``{run: rate}`` of the permuted copies of ``dtype`` ("bf16" or "fp32")."""
    return {
        int(r["run"]): float(f"{kernel_rate(r):.4g}")
        for r in _large(lines, "gather")
        if r.get("dtype") == dtype and r.get("pattern") == "permute(1,0,2)"
    }


def expand_rate(lines: Iterable[Mapping[str, Any]], dtype: str) -> float | None:
    """Twice the bytes written a second by the expanded copies of ``dtype`` (the median)."""
    rates = [
        2 * int(r["write_bytes"]) / (sum(float(k["us"]) for k in r["kernels"]) * 1e-6)
        for r in _large(lines, "shaped")
        if r.get("pattern") == "expand kv" and r.get("dtype") == dtype
    ]
    return float(f"{statistics.median(rates):.4g}") if rates else None


def cat_rate(lines: Iterable[Mapping[str, Any]]) -> float | None:
    """Twice the bytes written a second by ``cat`` of a strided half (the largest size; the median
    over head dims)."""
    found = [
        r for r in lines if r.get("section") == "strided_cat" and r.get("pattern", "").startswith("cat(contiguous")
    ]
    if not found:
        return None
    top = max(int(r["tokens"]) for r in found)
    rates = [
        2 * int(r["write_bytes"]) / (sum(float(k["us"]) for k in r["kernels"]) * 1e-6)
        for r in found
        if int(r["tokens"]) == top
    ]
    return float(f"{statistics.median(rates):.4g}")


def row_floor(lines: Iterable[Mapping[str, Any]], dtype: str) -> dict[int, float]:
    """``{row length: seconds}``: the softmax's longest kernel time over :data:`FLOOR_ROWS` rows
    or fewer of ``dtype``."""
    out: dict[int, float] = {}
    for r in lines:
        if r.get("section") == "few_rows" and r.get("dtype") == dtype and int(r["rows"]) <= FLOOR_ROWS:
            us = sum(float(k["us"]) for k in r["kernels"])
            out[int(r["row"])] = max(out.get(int(r["row"]), 0.0), float(f"{us:.4g}") * 1e-6)
    return out


def softmax_curve(lines: Iterable[Mapping[str, Any]], dtype: str = "fp32") -> dict[int, float]:
    """``{row length: rate}`` of ``torch.softmax`` over ``dtype`` rows."""
    return {int(r["row"]): float(f"{kernel_rate(r):.4g}") for r in _large(lines, "softmax") if r.get("dtype") == dtype}


def _tb(rate: float) -> str:
    return f"{rate / 1e12:.4g} TB/s"


#: the fields the first run's sections give, and those the second run's (few_rows, strided_cats)
FIRST_FIELDS = (
    "kernels.cast.bandwidth",
    "kernels.gather.bandwidth",
    "kernels.gather.bandwidth_4byte",
    "kernels.gather.expand_bandwidth",
    "kernels.gather.expand_bandwidth_4byte",
    "kernels.softmax.fp32_bandwidth",
)
SECOND_FIELDS = ("kernels.gather.cat_bandwidth", "kernels.softmax.row_floor", "kernels.softmax.row_floor_fp32")


def figures(lines: Iterable[Mapping[str, Any]]) -> dict[str, tuple[Any, str]]:
    """Profile field -> (value, note) for every figure ``lines`` (the probe's or ``memmodel
    calibrate``'s rows) measure: the first run's six where all its sections are there, the cat and
    floor figures where theirs are."""
    lines = list(lines)
    out: dict[str, tuple[Any, str]] = {}
    note = "bytes read + written over the kernel's CUPTI time, 2^27 bytes of output: memmodel.calibration.aten_paths"
    twice = "twice the bytes written over the kernel's CUPTI time: memmodel.calibration.aten_paths"
    cast = cast_rate(lines)
    two, four = gather_curve(lines, "bf16"), gather_curve(lines, "fp32")
    soft = softmax_curve(lines)
    expand2, expand4 = expand_rate(lines, "bf16"), expand_rate(lines, "fp32")
    if cast is not None and two and four and soft and expand2 is not None and expand4 is not None:
        out["kernels.cast.bandwidth"] = (
            _tb(cast),
            f"x.to(torch.float32) of contiguous bf16 and fp16 tensors (the median), {note}",
        )
        out["kernels.gather.bandwidth"] = (
            {k: _tb(v) for k, v in sorted(two.items())},
            f"x.permute(1, 0, 2).contiguous() of bf16 (A, B, run) tensors, by run (elements), {note}",
        )
        out["kernels.gather.bandwidth_4byte"] = (
            {k: _tb(v) for k, v in sorted(four.items())},
            f"the same of fp32 tensors, by run (elements), {note}",
        )
        out["kernels.gather.expand_bandwidth"] = (
            _tb(expand2),
            f"k[:, :, None].expand(B, H_kv, g, N, d).reshape(...) of bf16 K (the median over g and d), {twice}",
        )
        out["kernels.gather.expand_bandwidth_4byte"] = (_tb(expand4), f"the same of fp32 K, {twice}")
        out["kernels.softmax.fp32_bandwidth"] = (
            {k: _tb(v) for k, v in sorted(soft.items())},
            f"torch.softmax over the last dim of fp32 rows, by row length, 2^27 bytes of input, {note}",
        )
    cat = cat_rate(lines)
    floors = {dtype: row_floor(lines, dtype) for dtype in ("bf16", "fp32")}
    if cat is not None and all(floors.values()):
        out["kernels.gather.cat_bandwidth"] = (
            _tb(cat),
            "torch.cat((-x2, x1), dim=-1) with x1 the strided half of bf16 heads permuted from a projection "
            f"(d 64 and 128, 32 heads, the most tokens measured; the median), {twice}",
        )
        for key, dtype in (("row_floor", "bf16"), ("row_floor_fp32", "fp32")):
            out[f"kernels.softmax.{key}"] = (
                {k: f"{v * 1e6:.4g} us" for k, v in sorted(floors[dtype].items())},
                f"torch.softmax over {FLOOR_ROWS} {dtype} rows or fewer (the longest of its times), by row "
                "length, the kernel's CUPTI time: memmodel.calibration.aten_paths",
            )
    return out


def _put(data: dict[str, Any], found: Mapping[str, tuple[Any, str]], fields: tuple[str, ...], source: str) -> bool:
    for fpath in fields:
        if fpath not in found:
            return False
    for fpath in fields:
        value, note = found[fpath]
        *sections, leaf = fpath.split(".")
        node = data
        for section in sections:
            node = node.setdefault(section, {})
        node[leaf] = {"value": value, "source": source, "note": note}
    return True


def apply(
    data: dict[str, Any], lines: list[Mapping[str, Any]], second: list[Mapping[str, Any]] | None = None
) -> dict[str, Any]:
    """``data`` (a profile's YAML mapping) with the first run's figures and, given its ``second``
    run's lines, the cat and softmax-floor figures; their sources."""
    from .serving import cite

    if not _put(data, figures(lines), FIRST_FIELDS, SOURCE):
        return data
    env = next((r for r in lines if r.get("section") == "env"), {})
    data = cite(data, SOURCE, "memmodel ATen elementwise-path microbenchmark", RECORD, COMMAND, env, date="2026-12-04")
    if second and _put(data, figures(second), SECOND_FIELDS, SOURCE_2):
        env2 = next((r for r in second if r.get("section") == "env"), env)
        title = "memmodel ATen elementwise-path microbenchmark, second run"
        data = cite(data, SOURCE_2, title, RECORD_2, COMMAND_2, env2, date="2026-12-04")
    return data
