"""CSV, JSON Lines, table and chart views of a :class:`~memmodel.sweep.SweepResult`. No rich, no click."""

from __future__ import annotations

import csv
import io
import json
import math
import multiprocessing
import os
from collections.abc import Callable
from typing import Any, TextIO

import numpy as np

from ..roofline import LEVEL_LABELS
from ..sweep import AXES, SweepResult
from . import plots

#: Rows written per batch (progress is reported per batch).
BATCH = 65_536


def write_csv(result: SweepResult, stream: TextIO, progress: Callable[[int], None] | None = None) -> None:
    """A header of the result's columns (:attr:`~memmodel.sweep.SweepResult.names`), then one line
    per row (blanks empty):
    what :func:`write_csv_rows` writes, byte for byte, formatted :data:`TEXT_BATCH` rows at a
    time by numpy (:mod:`memmodel.report.text`) instead of value by value."""
    from . import text

    cells = _csv_cells(result)
    if cells is None:  # a text the fast path does not write as csv does (not ASCII)
        write_csv_rows(result, stream, progress)
        return
    writer = csv.writer(stream, lineterminator="\n")
    writer.writerow(result.names)
    write, binary = _byte_writer(stream)
    batches = [(start, min(start + TEXT_BATCH, len(result))) for start in range(0, len(result), TEXT_BATCH)]
    workers = min(os.cpu_count() or 1, len(batches))
    fd = _file_descriptor(stream) if binary else None
    if len(result) >= PARALLEL_ROWS and workers > 1 and fd is not None and _can_fork():
        _write_in_parallel(cells, batches, fd, workers, progress)
        return
    for start, stop in batches:
        write(text.join_rows([cell(start, stop) for cell in cells]))
        if progress is not None:
            progress(stop - start)


#: Rows formatted together by :func:`write_csv` (numpy's calls cost about the same for few rows
#: as for many; a batch's text is some 10-15 MB before the padding is dropped)
TEXT_BATCH = 32_768
#: Sweeps of this many rows or more are formatted by one forked process per core, each writing
#: its batches in turn straight to the output's file descriptor.
PARALLEL_ROWS = 200_000


def _can_fork() -> bool:
    return "fork" in multiprocessing.get_all_start_methods()


def _file_descriptor(stream: TextIO) -> int | None:
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):  # io.StringIO and the like
        return None


class _Turns:
    """Forked writers' shared state: the next batch to be written, and whether one failed."""

    def __init__(self) -> None:
        ctx = multiprocessing.get_context("fork")
        self.next = ctx.Value("q", 0, lock=False)
        self.failed = ctx.Value("b", 0, lock=False)
        self.cond = ctx.Condition()


_PARALLEL: tuple[list[Callable[[int, int], np.ndarray]], list[tuple[int, int]], int, _Turns] | None = None


def _write_in_parallel(
    cells: list[Callable[[int, int], np.ndarray]],
    batches: list[tuple[int, int]],
    fd: int,
    workers: int,
    progress: Callable[[int], None] | None,
) -> None:
    """Batches formatted by forked workers, each written by its worker once every earlier one is
    (the file's bytes come in order; nothing large goes back through pipes)."""
    global _PARALLEL
    _PARALLEL = (cells, batches, fd, _Turns())
    try:
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            for size in pool.imap_unordered(_format_and_write, range(len(batches))):
                if progress is not None and size > 0:
                    progress(size)
    finally:
        _PARALLEL = None


def _format_and_write(i: int) -> int:
    """Format batch ``i`` and write it after batch ``i - 1``; its rows, or -1 where another
    batch failed (nothing is written after a failure)."""
    from . import text

    assert _PARALLEL is not None
    cells, batches, fd, turns = _PARALLEL
    start, stop = batches[i]
    try:
        data = memoryview(text.join_rows([cell(start, stop) for cell in cells]))
    except BaseException:
        with turns.cond:
            turns.failed.value = 1
            turns.cond.notify_all()
        raise
    with turns.cond:
        while turns.next.value != i and not turns.failed.value:
            turns.cond.wait()
    if turns.failed.value:
        return -1  # another worker failed: its exception is the one the parent raises
    try:
        while data:
            data = data[os.write(fd, data) :]
    except BaseException:
        with turns.cond:
            turns.failed.value = 1
            turns.cond.notify_all()
        raise
    with turns.cond:
        turns.next.value = i + 1
        turns.cond.notify_all()
    return stop - start


def _byte_writer(stream: TextIO) -> tuple[Callable[[bytearray], Any], bool]:
    """(write, binary): a function writing ASCII bytes to ``stream``, and whether it writes them
    to the binary layer below (where the text layer would change nothing: POSIX line ends, an
    encoding that writes ASCII as ASCII; the text layer is flushed first) rather than decoded."""
    import codecs

    buffer = getattr(stream, "buffer", None)
    encoding = getattr(stream, "encoding", None)
    try:
        ascii_safe = encoding is not None and codecs.lookup(encoding).name in _ASCII_ENCODINGS
    except LookupError:
        ascii_safe = False
    if buffer is not None and ascii_safe and os.linesep == "\n":
        stream.flush()
        buffer.flush()
        return buffer.write, True
    return (lambda data: stream.write(data.decode("ascii"))), False


#: Encodings (codecs' names) that write ASCII text as its ASCII bytes
_ASCII_ENCODINGS = frozenset({"utf-8", "ascii", "latin-1", "iso8859-15", "cp1252"})


def write_csv_rows(result: SweepResult, stream: TextIO, progress: Callable[[int], None] | None = None) -> None:
    """:func:`write_csv` through :mod:`csv`, one row at a time (the reference it must equal)."""
    writer = csv.writer(stream, lineterminator="\n")
    writer.writerow(result.names)
    for start in range(0, len(result), BATCH):
        lists = result.column_lists(start, start + BATCH)
        writer.writerows(zip(*lists))
        if progress is not None:
            progress(len(lists[0]))


def _csv_field(value: str) -> str:
    """``value`` as :mod:`csv` writes it among other fields (quoted where it must be)."""
    if not value:
        return ""
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerow([value, ""])
    return buffer.getvalue()[: -len(",\n")]


#: Integer columns whose values are small enough to be looked up in a table of their texts.
_LOOKUP_LIMIT = 1 << 16


def _csv_cells(result: SweepResult) -> list[Callable[[int, int], np.ndarray]] | None:
    """Per column of the result (:attr:`~memmodel.sweep.SweepResult.names`), a function
    (start, stop) -> its cells' text
    (:mod:`memmodel.report.text` matrices); None where a category's text is not ASCII."""
    from ..sweep import _BLANK_AS_NEGATIVE, _BOOLEAN
    from . import text

    cols = result.columns
    out: list[Callable[[int, int], np.ndarray]] = []
    for name in result.names:
        values = cols[name]
        if name in result.categories or name in _BOOLEAN:
            labels = result.categories.get(name, ("False", "True"))
            fields = [_csv_field(str(label)) for label in labels]
            if not all(f.isascii() for f in fields):
                return None
            out.append(_lookup(values, text.table_text(np.arange(len(fields)), fields)))
        elif values.dtype.kind == "f":
            out.append(_floats(values, paired=name.startswith("ratio_")))
        else:
            blank = name in _BLANK_AS_NEGATIVE
            top = int(values.max()) if len(values) else 0
            low = int(values.min()) if len(values) else 0
            if top < _LOOKUP_LIMIT and low >= (-1 if blank else 0):
                table = text.int_text(np.arange(top + 1))
                if blank:  # -1: blank
                    table = np.concatenate([table, np.zeros((1, table.shape[1]), dtype=np.uint8)])
                out.append(_lookup(values, table))
            else:
                out.append(_ints(values, blank))
    return out


def _lookup(values: np.ndarray, table: np.ndarray) -> Callable[[int, int], np.ndarray]:
    """Cells looked up by value (a negative value: the table's last row)."""
    width = table.shape[1]
    rows = np.ascontiguousarray(table).view(f"V{width}").ravel()

    def cells(start: int, stop: int) -> np.ndarray:
        return rows.take(values[start:stop], mode="wrap").view(np.uint8).reshape(-1, width)

    return cells


def _ints(values: np.ndarray, blank: bool) -> Callable[[int, int], np.ndarray]:
    from . import text

    def cells(start: int, stop: int) -> np.ndarray:
        v = values[start:stop]
        if not blank:
            return text.int_text(v)
        out = text.int_text(np.maximum(v, 0))
        out[v < 0] = 0
        return out

    return cells


def _distinct(v: np.ndarray) -> np.ndarray:
    """float_text(v), formatting each distinct value once where fewer than half are distinct
    (a sweep's intensities and ratios repeat across batch sizes and heads)."""
    from . import text

    distinct, index = np.unique(v, return_inverse=True)
    if 2 * len(distinct) > len(v):
        return text.float_text(v)
    cells = np.ascontiguousarray(text.float_text(distinct))
    width = cells.shape[1]
    return cells.view(f"V{width}").ravel().take(index).view(np.uint8).reshape(-1, width)


def _floats(values: np.ndarray, *, paired: bool) -> Callable[[int, int], np.ndarray]:
    """Doubles as repr() writes them; ``paired``: both rows of a workload usually hold the same
    value (the ratios), so where they do each pair is formatted once."""
    from . import text

    def cells(start: int, stop: int) -> np.ndarray:
        v = values[start:stop]
        blank = np.isnan(v)
        if blank.any():  # a time the profile has no figure for: an empty cell
            out = np.array(formatted(np.where(blank, 0.0, v)))
            out[blank] = 0
            return out
        return formatted(v)

    def formatted(v: np.ndarray) -> np.ndarray:
        if len(v) and v.min() == v.max():
            one = text.float_text(v[:1])
            return np.broadcast_to(one, (len(v), one.shape[1]))
        if paired and len(v) % 2 == 0 and np.array_equal(v[0::2], v[1::2]):
            return np.repeat(_distinct(v[0::2]), 2, axis=0)
        return _distinct(v)

    return cells


def write_jsonl(result: SweepResult, stream: TextIO, progress: Callable[[int], None] | None = None) -> None:
    """One JSON object per row, keyed by the result's columns (blanks are null)."""
    dumps = json.JSONEncoder(allow_nan=False, separators=(", ", ": ")).encode
    for start in range(0, len(result), BATCH):
        lists = result.column_lists(start, start + BATCH)
        stream.write("".join(dumps(dict(zip(result.names, values))) + "\n" for values in zip(*lists)))
        if progress is not None:
            progress(len(lists[0]))


def write_json(result: SweepResult, stream: TextIO, progress: Callable[[int], None] | None = None) -> None:
    """One JSON array of row objects, keyed as :func:`write_jsonl`'s (written row by row)."""
    dumps = json.JSONEncoder(allow_nan=False, separators=(", ", ": ")).encode
    stream.write("[")
    first = True
    for start in range(0, len(result), BATCH):
        lists = result.column_lists(start, start + BATCH)
        text = ",\n".join(dumps(dict(zip(result.names, values))) for values in zip(*lists))
        if text:
            stream.write(("\n" if first else ",\n") + text)
            first = False
        if progress is not None:
            progress(len(lists[0]))
    stream.write("\n]\n" if not first else "]\n")


#: Columns of the table view that describe the workload and options, in the order they appear
#: (as columns when they vary, else once above the table), with their labels.
TABLE_KEYS = {
    "gpu": "gpu",
    "dtype": "dtype",
    "kv_dtype": "KV cache",
    "batch": "batch",
    "heads": "heads",
    "kv_heads": "kv heads",
    "d": "d",
    "n_kv": "N_kv",
    "n": "N",
    "variant": "tiled",
    "implementation": "impl",
    "causal": "causal",
    "backward": "backward",
    "l2": "L2",
    "dropout": "dropout",
    "block_q": "B_r",
    "block_kv": "B_c",
    "splits": "splits",
    "ctas_per_sm": "CTAs/SM",
    "standard": "standard",
    "window": "window",
    "chunk": "chunk",
    "page_size": "page",
}
#: Keys whose -1 is "none" (no window, no chunks, contiguous K/V): left out while every row has none.
NONE_AS_NEGATIVE = frozenset({"window", "chunk", "page_size"})
#: Keys that only the tiled rows carry.
TILED_KEYS = frozenset({"variant", "implementation", "block_q", "block_kv", "splits", "ctas_per_sm"})
#: Shown only when the sweep varies them (they follow from the others otherwise).
SWEPT_ONLY = {"block_q": "block_q", "block_kv": "block_kv", "splits": "splits", "ctas_per_sm": "ctas_per_sm"}
#: The order of columns that vary: options first, then the integer axes (N last, as rows nest).
COLUMN_ORDER = (
    "gpu",
    "dtype",
    "kv_dtype",
    "standard",
    "variant",
    "implementation",
    "causal",
    "backward",
    "l2",
    "dropout",
    "block_q",
    "block_kv",
    "splits",
    "ctas_per_sm",
    "window",
    "chunk",
    "page_size",
    "batch",
    "heads",
    "kv_heads",
    "d",
    "n_kv",
    "n",
)


def describe(constants: dict[str, Any]) -> list[str]:
    """The constants of a sweep as people read them: ``gpu h200``, ``heads 32 (kv 8)``,
    ``causal``, ``forward + backward``, ``dropout 0.1``, ``L2 on``, ``standard eager`` (defaults
    that change nothing, such as no dropout or the paper's standard attention, are left out)."""
    out = []
    c = dict(constants)
    for key, value in c.items():
        if key == "kv_heads":
            continue
        if key == "heads" and "kv_heads" in c and c["kv_heads"] != value:
            out.append(f"heads {value} (kv {c['kv_heads']})")
        elif key == "causal":
            out += ["causal"] if value else []
        elif key == "backward":
            out += ["forward + backward"] if value else []
        elif key == "dropout":
            out += [f"dropout {value:g}"] if value else []
        elif key == "standard":
            out += [f"standard {value}"] if value != "algorithm0" else []
        elif key == "kv_dtype":
            out += [f"KV cache {value}"] if value else []
        else:
            out.append(f"{TABLE_KEYS.get(key, key)} {value}")
    if "kv_heads" in c and "heads" not in c:
        out.append(f"kv heads {c['kv_heads']}")
    return out


def split_keys(result: SweepResult) -> tuple[dict[str, Any], list[str], dict[str, np.ndarray]]:
    """(constants, varying, values): the :data:`TABLE_KEYS` with one value across the sweep
    (key -> value), those with several (in :data:`COLUMN_ORDER`), and every key's values, one
    per workload (the tiled row's for what only the tiled kernel has). ``kv_heads`` is left
    out where it equals ``heads``, ``n_kv`` where it equals ``n``, and the tiled kernel's
    blocks, splits and CTAs per SM unless the sweep varies them."""
    std = slice(0, None, 2)
    til = slice(1, None, 2)
    swept = set(result.grid.varying())
    values = {k: result.column(k)[til if k in TILED_KEYS else std] for k in TABLE_KEYS}
    constants: dict[str, Any] = {}
    varying = []
    for key in TABLE_KEYS:
        if key in SWEPT_ONLY and SWEPT_ONLY[key] not in swept:
            continue
        v = values[key]
        if key == "kv_heads" and np.array_equal(v, values["heads"]):
            continue
        if key == "n_kv" and np.array_equal(v, values["n"]):
            continue
        if key in NONE_AS_NEGATIVE and np.all(v == -1):
            continue
        if len(v) and np.all(v == v[0]):
            constants[key] = v[0].item() if hasattr(v[0], "item") else v[0]
        else:
            varying.append(key)
    varying.sort(key=COLUMN_ORDER.index)
    return constants, varying, values


def table_view(result: SweepResult) -> tuple[dict[str, Any], list[str], list[list[Any]]]:
    """The sweep for people: one row per workload, standard and tiled side by side.

    Returns (constants, headers, rows): options with one value across the sweep go into
    ``constants`` (shown once above the table, :func:`describe`) instead of a column each;
    ``kv_heads`` is left out where it equals ``heads``, ``n_kv`` where it equals ``n``, and
    the tiled kernel's blocks, splits and CTAs per SM unless the sweep varies them. Cells are
    raw values; the CLI formats them.
    """
    cols = result.columns
    constants, varying, values = split_keys(result)
    headers = [*(TABLE_KEYS[k] for k in varying), "HBM std", "HBM tiled", "s/t", "time std", "time tiled", "s/t"]
    headers.append("bound s/t")
    rows = []
    lists = {k: ["none" if k in NONE_AS_NEGATIVE and x == -1 else x for x in values[k].tolist()] for k in varying}
    hbm = cols["hbm_bytes"].tolist()
    time = cols["predicted_time_s"].tolist()
    bound = result.column("bound").tolist()
    ratio_b = cols["ratio_hbm_bytes"].tolist()
    ratio_t = cols["ratio_predicted_time_s"].tolist()
    for j, i in enumerate(range(0, len(result), 2)):
        rows.append(
            [
                *(_cell(lists[k][j]) for k in varying),
                hbm[i],
                hbm[i + 1],
                ratio_b[i],
                time[i],
                time[i + 1],
                ratio_t[i],
                f"{bound[i]}/{bound[i + 1]}",
            ]
        )
    return constants, headers, rows


def _cell(value: Any) -> Any:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:g}"
    return value


__all__ = ["AXES", "BATCH", "describe", "table_view", "write_csv", "write_csv_rows", "write_json", "write_jsonl"]


# ---------------------------------------------------------------------------------------
# Charts of a sweep (matplotlib: the ``plot`` extra, imported when drawing)


MEMORY_BOUND = {"hbm", "l2", "sram"}


def _crossings(x: np.ndarray, ratio: np.ndarray) -> list[float]:
    """x where log(ratio) changes sign between neighbours (interpolated in log–log)."""
    out = []
    lr = np.log(ratio)
    for i in range(len(x) - 1):
        a, b = lr[i], lr[i + 1]
        if a == 0:
            out.append(float(x[i]))
        elif a * b < 0:
            f = a / (a - b)
            out.append(float(np.exp(np.log(x[i]) + f * (np.log(x[i + 1]) - np.log(x[i])))))
    return out


def sweep_plot(result: SweepResult, path: str, *, force: bool = False) -> None:
    """Bytes per level, predicted time and standard/tiled ratios against the swept variable."""
    plots.check_plot_path(path)
    from matplotlib.lines import Line2D

    from ..sweep import swept_axis
    from .sweep import describe, split_keys

    grid = result.grid
    axis = swept_axis(grid)
    constants, varying, values = split_keys(result)
    series_keys = [k for k in varying if k != axis]
    cols = {k: result.column(k) for k in ("variant", "bound")}
    std = np.arange(0, len(result), 2)
    til = std + 1
    parts = [[_series_part(k, v) for v in values[k].tolist()] for k in series_keys]
    labels = [" · ".join(p[j] for p in parts) for j in range(len(std))]
    series: dict[str, np.ndarray] = {}
    for label in dict.fromkeys(labels):
        series[label] = std[np.asarray([lb == label for lb in labels])]
    levels = [lv for lv in ("hbm", "l2", "sram") if np.any(result.columns[f"{lv}_bytes"] > 0)]
    panels = [*(f"{lv}_bytes" for lv in levels), "predicted_time_s", "ratio"]
    heights = [1.0] * (len(panels) - 1) + [0.75]
    width = 8.6
    fig = plots.figure(width, (2.6 if len(panels) <= 3 else 1.9) * sum(heights) + 1.0)
    axes = fig.subplots(len(panels), 1, sharex=True, gridspec_kw={"height_ratios": heights})
    longest = max((len(label) for label in series), default=0)
    title_lines = plots.wrap(describe({k: v for k, v in constants.items() if k != axis}), 75) or [""]
    title_lines[0] = f"memmodel sweep over {_axis_name(axis)}: {title_lines[0]}"
    fig.subplots_adjust(
        left=0.11,
        right=min(0.87, 1 - (0.25 + 0.056 * longest) / width),
        top=1 - (0.4 + 0.17 * len(title_lines)) / fig.get_figheight(),
        bottom=0.55 / fig.get_figheight() + 0.02,
        hspace=0.12,
    )
    x_all = result.columns[axis][std]
    fig.suptitle("\n".join(title_lines), x=0.11, ha="left", fontsize=10)
    transitions: list[str] = []
    movable: list[tuple[str, Any]] = []  # labels moved apart before saving (plots.declutter)
    seen_at: dict[tuple[int, float], int] = {}
    ends: dict[int, tuple[Any, list[tuple[float, float, str, str]]]] = {}
    for a, panel in zip(axes, panels):
        a.set_xscale("log", base=2 if _powers_of_two(x_all) else 10)
        a.set_yscale("log")
        a.grid(True, which="major", color="#dddddd", linewidth=0.6)
        a.set_axisbelow(True)
        for s_i, (label, idx) in enumerate(series.items()):
            colour = plots.COLOURS[s_i % len(plots.COLOURS)]
            # earlier series are drawn wider, so a later one lying on top leaves them visible
            wider = len(series) - 1 - s_i
            order = idx[np.argsort(result.columns[axis][idx], kind="stable")]
            x = result.columns[axis][order]
            if panel == "ratio":
                rb = result.columns["ratio_hbm_bytes"][order]
                rt = result.columns["ratio_predicted_time_s"][order]
                width, size = 1.4 + 1.0 * wider, 3.5 + 1.5 * wider
                a.plot(x, rb, color=colour, linestyle="-", linewidth=width, marker="o", markersize=size, label=label)
                a.plot(
                    x, rt, color=colour, linestyle=":", linewidth=width, marker="D", markersize=size, fillstyle="none"
                )
                for xc in sorted(set(_crossings(x, rb) + _crossings(x, rt))):
                    a.axvline(xc, color=colour, linewidth=0.8, linestyle=(0, (2, 2)))
                    movable.append(
                        (
                            "y",
                            a.annotate(
                                f"crossover\n{_axis_name(axis)}≈{plots.si(xc)}",
                                (xc, 1.0),
                                xytext=(4, 6),
                                textcoords="offset points",
                                fontsize=7,
                                color=colour,
                            ),
                        )
                    )
                continue
            for alg, rows in (("standard", order), ("tiled", order + 1)):
                y = result.columns[panel][rows].astype(np.float64)
                bound = cols["bound"][rows]
                memory_bound = np.array([b in MEMORY_BOUND for b in bound])
                linestyle = "-" if alg == "standard" else "--"
                a.plot(x, y, color=colour, linestyle=linestyle, linewidth=1.4 + 1.0 * wider)
                if panel == "predicted_time_s":
                    # filled marker: memory-bound; hollow: compute-bound
                    for mask, fill in ((memory_bound, "full"), (~memory_bound, "none")):
                        if mask.any():
                            a.plot(
                                x[mask],
                                y[mask],
                                linestyle="none",
                                marker=plots.MARKERS[alg],
                                markersize=5.5 + 1.5 * wider,
                                color=colour,
                                fillstyle=fill,
                                markeredgecolor=colour,
                            )
                    for i in range(len(x) - 1):
                        if bound[i] != bound[i + 1]:
                            xm = math.sqrt(float(x[i]) * float(x[i + 1]))
                            a.axvline(xm, color=colour, linewidth=0.7, linestyle=(0, (1, 2)))
                            # named along the line, from the top of the panel down (side by side
                            # when several changes fall between the same two points)
                            nth = seen_at.setdefault((id(a), round(xm, 6)), 0)
                            seen_at[(id(a), round(xm, 6))] += 1
                            movable.append(
                                (
                                    "x",
                                    a.annotate(
                                        f"{alg}: {bound[i]}→{bound[i + 1]}",
                                        (xm, 1.0),
                                        xycoords=("data", "axes fraction"),
                                        xytext=(2 + 10 * nth, -3),
                                        textcoords="offset points",
                                        rotation=90,
                                        ha="left",
                                        va="top",
                                        fontsize=6.5,
                                        color=colour,
                                        bbox={
                                            "boxstyle": "square,pad=0.05",
                                            "facecolor": "white",
                                            "edgecolor": "none",
                                            "alpha": 0.8,
                                        },
                                    ),
                                )
                            )
                            transitions.append(
                                f"{label or alg}: {alg} {bound[i]}→{bound[i + 1]} at {_axis_name(axis)}≈{plots.si(xm)}"
                            )
                else:
                    a.plot(
                        x, y, linestyle="none", marker=plots.MARKERS[alg], markersize=5.5 + 1.5 * wider, color=colour
                    )
            # name the series at its right end (placed below, apart from each other)
            if panel != "ratio" and label:
                ends.setdefault(id(a), (a, []))[1].append(
                    (float(x[-1]), float(result.columns[panel][order[-1]]), label, colour)
                )
            if panel != "ratio":
                for xc in _crossings(
                    x,
                    result.columns[panel][order].astype(np.float64)
                    / result.columns[panel][order + 1].astype(np.float64),
                ):
                    yc = float(
                        np.interp(
                            np.log(xc), np.log(x.astype(np.float64)), result.columns[panel][order].astype(np.float64)
                        )
                    )
                    a.plot([xc], [yc], marker="o", markersize=11, fillstyle="none", color=colour, linestyle="none")
                    movable.append(
                        (
                            "y",
                            a.annotate(
                                f"crossover {_axis_name(axis)}≈{plots.si(xc)}",
                                (xc, yc),
                                xytext=(8, -12),
                                textcoords="offset points",
                                fontsize=7,
                                color=colour,
                            ),
                        )
                    )
        if panel == "ratio":
            a.axhline(1.0, color="black", linewidth=0.9)
            a.set_ylabel("standard / tiled\n(above 1×: tiled wins)")
            lo, hi = a.get_ylim()
            lo, hi = min(lo, 0.5), max(hi, 2.0) * 1.15
            a.set_ylim(lo, hi)
            a.yaxis.set_major_formatter(_ratio_formatter())
            # minor labels (2×, 5×, ...) only while they have room
            a.yaxis.set_minor_formatter(_ratio_formatter(minor=True) if hi / lo < 200 else _ratio_formatter(none=True))
        elif panel == "predicted_time_s":
            a.set_ylabel("predicted time")
            a.yaxis.set_major_formatter(_time_formatter())
        else:
            level = panel.split("_")[0]
            a.set_ylabel(f"{LEVEL_LABELS[level]} bytes")
            a.yaxis.set_major_formatter(plots.log_formatter("B"))
    axes[-1].set_xlabel(
        {
            "n": "sequence length N",
            "n_kv": "key/value length N_kv (KV cache)",
            "d": "head dimension d",
            "kv_heads": "key/value heads",
        }.get(axis, axis)
    )
    axes[-1].xaxis.set_major_formatter(_size_formatter())
    for a, items in ends.values():
        _end_labels(fig, a, items)
    handles = [
        Line2D([], [], color="black", linestyle="-", marker="s", markersize=5, label=_standard_label(constants)),
        Line2D(
            [],
            [],
            color="black",
            linestyle="--",
            marker="^",
            markersize=5,
            label=f"tiled ({', '.join(sorted(set(cols['variant'][til].tolist()))).upper()})",
        ),
        Line2D([], [], color="black", linestyle="none", marker="^", markersize=5, label="time: memory-bound"),
        Line2D(
            [],
            [],
            color="black",
            linestyle="none",
            marker="^",
            markersize=5,
            fillstyle="none",
            label="time: compute-bound",
        ),
        Line2D([], [], color="black", linestyle="-", marker="o", markersize=3.5, label="ratio of HBM bytes"),
        Line2D(
            [], [], color="black", linestyle=":", marker="D", markersize=3.5, fillstyle="none", label="ratio of time"
        ),
    ]
    # Curves rise to the right: the top-left corner of the first panel is free for the legend.
    axes[0].legend(handles=handles, loc="upper left", fontsize=7, framealpha=0.9, edgecolor="#cccccc", ncol=2)
    if not transitions:
        bounds = {
            alg: "/".join(sorted(set(cols["bound"][rows].tolist())))
            for alg, rows in (("standard", std), ("tiled", til))
        }
        axes[-2].text(
            0.99,
            0.04,
            f"same bound at every point: standard {bounds['standard']}, tiled {bounds['tiled']}",
            transform=axes[-2].transAxes,
            fontsize=7,
            ha="right",
            va="bottom",
            color="#444444",
        )
    plots.declutter(fig, movable)
    plots.save(fig, path, force=force)


def _end_labels(fig: Any, ax: Any, items: list[tuple[float, float, str, str]]) -> None:
    """Series names right of their last point, pushed apart vertically so none overlap, and
    kept within the panel's height (a stack that would rise above it is moved down)."""
    gap = 10.0  # points between label baselines
    scale = 72.0 / fig.dpi
    bottom, top = (v * scale for v in ax.get_window_extent().intervaly)
    placed: list[list[Any]] = []
    for x, y, label, colour in sorted(items, key=lambda t: t[1]):
        py = ax.transData.transform((x, y))[1] * scale
        want = py if not placed else max(py, placed[-1][0] + gap)
        placed.append([want, py, x, y, label, colour])
    if placed and placed[-1][0] > top - gap / 2:
        shift = placed[-1][0] - (top - gap / 2)
        for item in placed:
            item[0] -= shift
        floor = bottom + gap / 2  # too many to fit: squeeze them between the floor and the top
        if placed[0][0] < floor and len(placed) > 1:
            step = (top - gap / 2 - floor) / (len(placed) - 1)
            for k, item in enumerate(placed):
                item[0] = floor + k * step
    for want, py, x, y, label, colour in placed:
        ax.annotate(
            label,
            (x, y),
            xytext=(8, want - py),
            textcoords="offset points",
            fontsize=7.5,
            color=colour,
            va="center",
            annotation_clip=False,
        )


def _size_formatter() -> Any:
    """Sizes as people write them: 512, 1K, 2K, ..., 128K (binary K when exact), else 1.5k."""
    from matplotlib.ticker import FuncFormatter

    def fmt(v: float, _: Any) -> str:
        if v >= 1024 and float(v).is_integer() and int(v) % 1024 == 0:
            k = int(v) // 1024
            return f"{k // 1024}M" if k % 1024 == 0 else f"{k}K"
        return plots.si(v).replace(" ", "")

    return FuncFormatter(fmt)


def _ratio_formatter(minor: bool = False, none: bool = False) -> Any:
    from matplotlib.ticker import FuncFormatter

    def fmt(v: float, _: Any) -> str:
        if none or (minor and not any(math.isclose(v, m) for m in (0.5, 2, 3, 5, 20, 50))):
            return ""
        return f"{v:g}×"

    return FuncFormatter(fmt)


def _standard_label(constants: dict[str, Any]) -> str:
    """The legend's name for the standard rows: the variant when the sweep has one."""
    variant = str(constants.get("standard", ""))
    return {"algorithm0": "standard (Algorithm 0)", "eager": "standard (eager PyTorch)"}.get(variant, "standard")


def _axis_name(axis: str) -> str:
    return {"n": "N", "n_kv": "N_kv", "kv_heads": "kv heads"}.get(axis, axis)


def _powers_of_two(x: np.ndarray) -> bool:
    v = np.unique(x)
    return len(v) > 1 and bool(np.all((v & (v - 1)) == 0))


def _time_formatter() -> Any:
    from matplotlib.ticker import FuncFormatter

    from ..units import format_time

    return FuncFormatter(lambda v, _: format_time(v, digits=0) if v > 0 else "0")


def _series_part(key: str, value: Any) -> str:
    """One option of a series' name: ``a100``, ``bf16``, ``causal``, ``d=128``, ``L2 cold``."""
    if key in ("gpu", "dtype", "implementation", "variant"):
        return str(value)
    if key == "causal":
        return "causal" if value else "non-causal"
    if key == "backward":
        return "fwd + bwd" if value else "fwd"
    if key == "l2":
        return f"L2 {value}"
    if key == "standard":
        return f"standard {value}"
    if key == "dropout":
        return f"dropout {value:g}"
    from .sweep import TABLE_KEYS

    return f"{TABLE_KEYS.get(key, key)}={value}"
