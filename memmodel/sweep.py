"""Sweeps: a grid of workloads evaluated with numpy, a few calls per grid, not a loop.

A grid is the cartesian product of values for ``n``, ``d``, ``batch``, ``heads`` and
``kv_heads`` (integers), times dtypes, GPUs and tiled variants. :func:`evaluate` groups it
by (GPU, dtype, tiled variant) and hands each group to :func:`memmodel.compare` as one
:class:`~memmodel.workload.Workload` whose fields are int64 arrays, in chunks of
:data:`CHUNK` configurations (arrays of that size run faster than one huge call, and the
working memory stays bounded on 10-million-configuration grids); large grids are shared
out between one process per core. The result is columnar:
one numpy array per column of :data:`SWEEP_COLUMNS`, one row per workload × algorithm.

Grid syntax (:func:`parse_values`), for each integer option::

    4096                 one value
    64,80,128            a list
    512:65536:x2         geometric: 512, 1024, ..., 65536 (stop included when reached)
    512:4096:+512        arithmetic: 512, 1024, ..., 4096
    64,96:256:+32        items mix freely; duplicates are dropped, order kept
"""

from __future__ import annotations

import itertools
import math
import mmap
import multiprocessing
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import MemmodelError, WorkloadError
from .hardware import Profile
from .traffic.ledger import DIRECTIONS, LEVELS
from .workload import DTYPE_BYTES, Workload

#: Integer axes of a grid, in the order rows are nested (the last varies fastest).
AXES = ("d", "batch", "heads", "kv_heads", "n")
#: A grid larger than this is refused: its output alone would be gigabytes.
MAX_CONFIGURATIONS = 10_000_000
#: Configurations per call to :func:`memmodel.compare`.
CHUNK = 32_768
TILED_VARIANTS = ("fa1", "fa2")

GRID_SYNTAX = "N, a list A,B,C, START:STOP:xFACTOR (geometric) or START:STOP:+STEP (arithmetic)"
_RANGE = re.compile(r"^(?P<start>[0-9]+):(?P<stop>[0-9]+):(?P<op>[x+*])(?P<step>[0-9]+(?:\.[0-9]+)?)$")


def _is_int(text: str) -> bool:
    """ASCII digits only: str.isdigit() also takes '¹' and '٣', which int() refuses or reads."""
    return text.isascii() and text.isdigit()


_MAX_VALUES = 1_000_000  # values of one axis

#: Columns of ``memmodel sweep --format csv`` (and the keys of each ``jsonl`` object), in
#: order. Stable: new columns are appended, never renamed. Ratios are standard / tiled for
#: the workload of the row, so both rows of a workload carry the same ratios.
SWEEP_COLUMNS: tuple[str, ...] = (
    "gpu",
    "dtype",
    "batch",
    "heads",
    "kv_heads",
    "n",
    "d",
    "algorithm",
    "variant",
    "block_q",
    "block_kv",
    *(name for level in LEVELS for name in (f"{level}_read_bytes", f"{level}_write_bytes", f"{level}_bytes")),
    "flops",
    "exp_ops",
    "arithmetic_intensity",
    "predicted_time_s",
    "bound",
    "ratio_hbm_bytes",
    "ratio_flops",
    "ratio_predicted_time_s",
)


def parse_values(text: str | int | Sequence[int], name: str = "value") -> tuple[int, ...]:
    """The integers that ``text`` (grid syntax, see the module doc) stands for.

    Raises :class:`WorkloadError` naming ``name`` and the accepted syntax.
    """
    if isinstance(text, (int, np.integer)) and not isinstance(text, bool):
        items: list[str] = [str(int(text))]
    elif isinstance(text, str):
        items = [part.strip() for part in text.split(",")]
    else:
        return tuple(dict.fromkeys(v for t in text for v in parse_values(t, name)))
    out: dict[int, None] = {}
    for item in items:
        for value in _item_values(item, name, text):
            if value < 1:
                raise WorkloadError(f"{_p(name)}{value} in {text!r} is not a positive integer")
            out[value] = None
            if len(out) > _MAX_VALUES:
                raise WorkloadError(f"{_p(name)}{text!r} has more than {_MAX_VALUES:,} values")
    return tuple(out)


def _short(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else f"{text[:20]}… ({len(text)} characters)"


def _p(name: str) -> str:
    return f"{name}: " if name else ""


def _item_values(item: str, name: str, text: Any) -> Iterator[int]:
    bad = WorkloadError(f"{_p(name)}cannot read {_short(item)!r} in {_short(str(text))!r}; use {GRID_SYNTAX}")
    if len(item) > 60:  # past any GPU (and past int()'s 4300-digit limit)
        raise WorkloadError(f"{_p(name)}{_short(item)!r} is too long a number or range; sizes stop at 2^63 - 1")
    if _is_int(item):
        yield int(item)
        return
    m = _RANGE.match(item)
    if not m:
        raise bad
    start, stop, op, step_text = int(m["start"]), int(m["stop"]), m["op"], m["step"]
    if start < 1 or stop < start:
        raise WorkloadError(f"{_p(name)}range {item!r} must run upwards from a positive start (START ≤ STOP)")
    if op == "+":
        if not _is_int(step_text) or int(step_text) < 1:
            raise WorkloadError(f"{_p(name)}the step of {item!r} must be a positive integer (+512)")
        step = int(step_text)
        if (stop - start) // step + 1 > _MAX_VALUES:
            raise WorkloadError(f"{_p(name)}{text!r} has more than {_MAX_VALUES:,} values")
        yield from range(start, stop + 1, step)
        return
    factor = float(step_text)
    if not factor > 1:
        raise WorkloadError(f"{_p(name)}the factor of {item!r} must be greater than 1 (x2, x1.5)")
    if _is_int(step_text):  # exact integer powers
        value = start
        while value <= stop:
            yield value
            value *= int(step_text)
        return
    k = 0
    while True:
        value = round(start * factor**k)
        if value > stop * (1 + 1e-12):
            return
        yield value
        k += 1
        if k > _MAX_VALUES:
            raise WorkloadError(f"{_p(name)}{text!r} has more than {_MAX_VALUES:,} values")


def parse_choices(texts: str | Sequence[str], accepted: Sequence[str], name: str) -> tuple[str, ...]:
    """Comma-separated and/or repeated choices (``fp16,bf16``), each one of ``accepted``."""
    items = [texts] if isinstance(texts, str) else list(texts)
    out: dict[str, None] = {}
    for text in items:
        for part in str(text).split(","):
            part = part.strip()
            if part not in accepted:
                raise WorkloadError(f"{_p(name)}{part!r} is not one of {', '.join(accepted)}")
            out[part] = None
    if not out:
        raise WorkloadError(f"{_p(name)}give at least one of {', '.join(accepted)}")
    return tuple(out)


@dataclass(frozen=True)
class Grid:
    """The configurations of a sweep. ``kv_heads=None`` means "equal to heads" (no GQA)."""

    n: tuple[int, ...]
    d: tuple[int, ...]
    batch: tuple[int, ...] = (1,)
    heads: tuple[int, ...] = (1,)
    kv_heads: tuple[int, ...] | None = None
    dtypes: tuple[str, ...] = ("fp32",)
    gpus: tuple[str, ...] = ("a100",)
    tiled: tuple[str, ...] = ("fa2",)

    def __post_init__(self) -> None:
        for name in ("n", "d", "batch", "heads", "kv_heads"):
            values = getattr(self, name)
            if values is None:
                continue
            values = parse_values(values, name) if not isinstance(values, tuple) else values
            if not values:
                raise WorkloadError(f"{_p(name)}the grid has no values")
            if any(not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1 for v in values):
                raise WorkloadError(f"{_p(name)}values must be positive integers")
            object.__setattr__(self, name, tuple(int(v) for v in values))
        for name, accepted in (("dtypes", tuple(DTYPE_BYTES)), ("tiled", TILED_VARIANTS)):
            object.__setattr__(self, name, parse_choices(getattr(self, name), accepted, name))
        if not self.gpus:
            raise WorkloadError("gpus: give at least one GPU")
        if self.size > MAX_CONFIGURATIONS:
            raise WorkloadError(
                f"the grid has {self.size:,} configurations ({self.describe_size()}); "
                f"the limit is {MAX_CONFIGURATIONS:,}: narrow a range or take a larger step"
            )

    def axis(self, name: str) -> tuple[int, ...]:
        if name == "kv_heads" and self.kv_heads is None:
            return (0,)  # placeholder: equal to heads
        return getattr(self, name)  # type: ignore[no-any-return]

    @property
    def workloads_per_group(self) -> int:
        return math.prod(len(self.axis(a)) for a in AXES)

    @property
    def groups(self) -> list[tuple[str, str, str]]:
        """(gpu, dtype, tiled) in output order."""
        return list(itertools.product(self.gpus, self.dtypes, self.tiled))

    @property
    def size(self) -> int:
        """Workload configurations (each gives two rows: standard and tiled)."""
        return self.workloads_per_group * len(self.gpus) * len(self.dtypes) * len(self.tiled)

    def describe_size(self) -> str:
        parts = [f"{len(self.axis(a))} {a}" for a in AXES if len(self.axis(a)) > 1]
        parts += [
            f"{len(v)} {k}"
            for k, v in (("dtypes", self.dtypes), ("GPUs", self.gpus), ("tiled", self.tiled))
            if len(v) > 1
        ]
        return " × ".join(parts) or "one configuration"

    def varying(self) -> list[str]:
        """Options with more than one value, integer axes first (n first), then dtype, gpu, tiled."""
        out = [a for a in ("n", "d", "batch", "heads", "kv_heads") if len(self.axis(a)) > 1]
        out += [k for k, v in (("dtype", self.dtypes), ("gpu", self.gpus), ("tiled", self.tiled)) if len(v) > 1]
        return out

    def mesh(self) -> dict[str, np.ndarray]:
        """The integer axes of one group as flat int64 arrays (``n`` varies fastest)."""
        arrays = np.meshgrid(*(np.asarray(self.axis(a), dtype=np.int64) for a in AXES), indexing="ij")
        out = {a: arr.ravel() for a, arr in zip(AXES, arrays)}
        if self.kv_heads is None:
            out["kv_heads"] = out["heads"]
        return out


#: Text columns, stored as small integer codes into :attr:`SweepResult.categories`.
CATEGORICAL = ("gpu", "dtype", "algorithm", "variant", "bound")
#: Integer columns that are blank for some rows (stored as -1): the blocks of standard attention.
_BLANK_AS_NEGATIVE = frozenset({"block_q", "block_kv"})
ALGORITHMS = ("standard", "tiled")
VARIANTS = ("algorithm0", *TILED_VARIANTS)


@dataclass
class SweepResult:
    """Columns of :data:`SWEEP_COLUMNS` as equal-length numpy arrays, rows alternating standard, tiled.

    Text columns (:data:`CATEGORICAL`) hold integer codes into ``categories[column]``;
    :meth:`column` decodes them; ``block_q``/``block_kv`` are -1 where blank (standard rows).
    """

    grid: Grid
    columns: dict[str, np.ndarray]
    categories: dict[str, tuple[str, ...]]
    notes: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.columns["algorithm"])

    def column(self, name: str, start: int = 0, stop: int | None = None) -> np.ndarray:
        """One column with text decoded (object array of str) and blanks as-is."""
        values = self.columns[name][start:stop]
        if name in self.categories:
            return np.asarray(self.categories[name], dtype=object)[values]
        return values

    def column_lists(self, start: int = 0, stop: int | None = None) -> list[list[Any]]:
        """Columns ``start:stop`` as lists of plain values (exact ints, floats, str; None for blanks)."""
        out = []
        for name in SWEEP_COLUMNS:
            values = self.column(name, start, stop).tolist()
            if name in _BLANK_AS_NEGATIVE:
                values = [None if v < 0 else v for v in values]
            out.append(values)
        return out

    def rows(self, start: int = 0, stop: int | None = None) -> Iterator[dict[str, Any]]:
        """Rows as dicts keyed by :data:`SWEEP_COLUMNS`."""
        for values in zip(*self.column_lists(start, stop)):
            yield dict(zip(SWEEP_COLUMNS, values))


Progress = Callable[[int], None]


def evaluate(
    grid: Grid,
    profiles: Mapping[str, Profile] | None = None,
    *,
    progress: Progress | None = None,
    workers: int | None = None,
) -> SweepResult:
    """Every configuration of ``grid``: one :func:`memmodel.compare` call per group and chunk.

    Chunks are shared out between ``workers`` forked processes that write the columns in
    place (shared memory); by default one per core for grids of :data:`PARALLEL_MIN`
    configurations or more, else none. Results do not depend on it.

    ``profiles`` maps the grid's GPU names to loaded profiles (loaded by name when missing).
    ``progress`` is called with the number of configurations just evaluated. A (GPU, dtype)
    pair that cannot run (no peak for the dtype) is skipped with a note while other pairs
    remain; configurations where kv_heads does not divide heads are skipped with a note.
    """
    from .hardware import load_profile

    loaded = {g: (profiles or {}).get(g) or load_profile(g) for g in grid.gpus}
    mesh = grid.mesh()
    notes: list[str] = []
    valid = mesh["heads"] % mesh["kv_heads"] == 0
    if not valid.all():
        skipped = int((~valid).sum())
        if skipped == len(valid):
            raise WorkloadError("kv_heads must divide heads: no configuration of the grid is valid")
        notes.append(f"skipped {skipped:,} of {len(valid):,} workloads where kv_heads does not divide heads")
        mesh = {k: v[valid] for k, v in mesh.items()}
    count = len(mesh["n"])
    runnable = []
    refusals: list[MemmodelError] = []
    for gpu, dtype, tiled in grid.groups:
        try:
            loaded[gpu].peak_flops(dtype)
        except MemmodelError as exc:
            refusals.append(exc)
            if f"skipped {gpu} × {dtype}: {exc}" not in notes:
                notes.append(f"skipped {gpu} × {dtype}: {exc}")
            continue
        runnable.append((gpu, dtype, tiled))
    if not runnable:
        raise refusals[0]
    rows = 2 * count * len(runnable)
    small = max(max(grid.axis(a)) for a in AXES) < 2**31  # sizes fit int32: less memory to write
    dtypes = {**_COLUMN_DTYPES, **({c: np.int32 for c in _SMALL_INT_COLUMNS} if small else {})}
    tasks = [(g, start) for g in range(len(runnable)) for start in range(0, count, CHUNK)]
    if workers is None:
        workers = min(os.cpu_count() or 1, len(tasks)) if count * len(runnable) >= PARALLEL_MIN else 1
    parallel = workers > 1 and len(tasks) > 1 and "fork" in multiprocessing.get_all_start_methods()
    columns = _allocate(rows, dtypes, shared=parallel)
    bounds: dict[str, int] = {label: i for i, label in enumerate(BOUND_LABELS)}
    job = _Job(mesh, count, runnable, loaded, grid, columns)
    done = False
    if parallel:
        try:
            _run_parallel(job, tasks, workers, progress)
            done = True
        except _UnknownBound:  # a label outside BOUND_LABELS: codes must be assigned in order
            columns = _allocate(rows, dtypes, shared=False)
            job = _Job(mesh, count, runnable, loaded, grid, columns)
    if not done:
        for g, start in tasks:
            size = job.run(g, start, bounds)
            if progress is not None:
                progress(size)
    if progress is not None and count == 0:
        progress(0)
    categories = {
        "gpu": grid.gpus,
        "dtype": grid.dtypes,
        "algorithm": ALGORITHMS,
        "variant": VARIANTS,
        "bound": tuple(bounds),
    }
    return SweepResult(grid, columns, categories, notes)


#: Timing terms that can bound an algorithm (memmodel.timing), coded in this order; a label
#: outside this list is coded after them (the serial path).
BOUND_LABELS = ("hbm", "l2", "sram", "latency", "matmul", "softmax", "exp", "compute")
#: Grids from this many configurations are shared out between processes (one per core).
PARALLEL_MIN = 100_000


class _UnknownBound(Exception):
    """A worker met a bound label outside BOUND_LABELS."""


@dataclass
class _Job:
    """What every chunk needs; inherited by forked workers, never pickled."""

    mesh: dict[str, np.ndarray]
    count: int
    runnable: list[tuple[str, str, str]]
    profiles: dict[str, Profile]
    grid: Grid
    columns: dict[str, np.ndarray]

    def run(self, g: int, start: int, bounds: dict[str, int]) -> int:
        gpu, dtype, tiled = self.runnable[g]
        chunk = {k: v[start : start + CHUNK] for k, v in self.mesh.items()}
        codes = {"gpu": self.grid.gpus.index(gpu), "dtype": self.grid.dtypes.index(dtype)}
        at = 2 * (g * self.count + start)
        _evaluate_chunk(chunk, self.profiles[gpu], dtype, tiled, codes, bounds, self.columns, at)
        return len(chunk["n"])


def _allocate(rows: int, dtypes: dict[str, Any], *, shared: bool) -> dict[str, np.ndarray]:
    """Output columns; ``shared``: in anonymous shared memory, written by forked workers in place."""
    out = {}
    for name in SWEEP_COLUMNS:
        dtype = np.dtype(dtypes.get(name, np.int64))
        if shared and rows:
            buffer = mmap.mmap(-1, rows * dtype.itemsize)
            out[name] = np.frombuffer(buffer, dtype=dtype, count=rows)
        else:
            out[name] = np.empty(rows, dtype=dtype)
    return out


_JOB: _Job | None = None  # set in the parent just before forking the workers


def _work(task: tuple[int, int]) -> int:
    assert _JOB is not None
    fixed = {label: i for i, label in enumerate(BOUND_LABELS)}
    size = _JOB.run(*task, fixed)
    if len(fixed) > len(BOUND_LABELS):
        raise _UnknownBound
    return size


def _run_parallel(job: _Job, tasks: list[tuple[int, int]], workers: int, progress: Progress | None) -> None:
    global _JOB
    _JOB = job
    try:
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            for size in pool.imap_unordered(_work, tasks):
                if progress is not None:
                    progress(size)
    finally:
        _JOB = None


_SMALL_INT_COLUMNS = ("batch", "heads", "kv_heads", "n", "d", "block_q", "block_kv")
_COLUMN_DTYPES: dict[str, Any] = {
    **{c: np.int16 for c in CATEGORICAL},
    "arithmetic_intensity": np.float64,
    "predicted_time_s": np.float64,
    "ratio_hbm_bytes": np.float64,
    "ratio_flops": np.float64,
    "ratio_predicted_time_s": np.float64,
}


def _evaluate_chunk(
    mesh: dict[str, np.ndarray],
    profile: Profile,
    dtype: str,
    tiled: str,
    codes: dict[str, int],
    bounds: dict[str, int],
    columns: dict[str, np.ndarray],
    at: int,
) -> None:
    """Evaluate one chunk and write its rows into ``columns[at : at + 2·size]`` (standard, tiled, ...)."""
    from .model import compare

    workload = Workload(
        n=mesh["n"], d=mesh["d"], batch=mesh["batch"], heads=mesh["heads"], kv_heads=mesh["kv_heads"], dtype=dtype
    )
    try:
        c = compare(workload, profile, tiled=tiled)
    except OverflowError:
        raise WorkloadError(_overflow_message(mesh, dtype)) from None
    size = len(mesh["n"])
    end = at + 2 * size

    def put(name: str, standard: Any, tiled_: Any) -> None:
        """Interleave per-workload values of the two algorithms: s0, t0, s1, t1, ..."""
        col = columns[name][at:end]
        col[0::2] = standard
        col[1::2] = tiled_

    s, t = c.standard, c.tiled
    columns["gpu"][at:end] = codes["gpu"]
    columns["dtype"][at:end] = codes["dtype"]
    put("algorithm", 0, 1)
    put("variant", VARIANTS.index(s.traffic.variant), VARIANTS.index(t.traffic.variant))
    for a in ("batch", "heads", "kv_heads", "n", "d"):
        put(a, mesh[a], mesh[a])
    put("block_q", -1, np.asarray(t.traffic.params["block_q"]))
    put("block_kv", -1, np.asarray(t.traffic.params["block_kv"]))
    for level in LEVELS:
        for direction in DIRECTIONS:
            put(
                f"{level}_{direction}_bytes",
                s.traffic.bytes(level=level, direction=direction),
                t.traffic.bytes(level=level, direction=direction),
            )
        columns[f"{level}_bytes"][at:end] = (
            columns[f"{level}_read_bytes"][at:end] + columns[f"{level}_write_bytes"][at:end]
        )
    put("flops", s.traffic.flops, t.traffic.flops)
    put("exp_ops", s.traffic.exp_ops, t.traffic.exp_ops)
    hbm = columns["hbm_bytes"][at:end]
    with np.errstate(divide="ignore", invalid="ignore"):
        columns["arithmetic_intensity"][at:end] = np.where(hbm > 0, columns["flops"][at:end] / hbm, 0.0)
    put("predicted_time_s", s.timing.time_s, t.timing.time_s)
    put("bound", _bound_codes(s.timing, bounds), _bound_codes(t.timing, bounds))
    for key, value in c.ratios().items():
        put(f"ratio_{key}", value, value)


def _bound_codes(timing: Any, bounds: dict[str, int]) -> Any:
    """The timing's bound labels as codes into ``bounds`` (label -> code, grown as labels appear)."""
    labels = getattr(timing, "bound_labels", None)
    index = getattr(timing, "bound_index", None)
    if labels and index is not None:
        lut = np.array([bounds.setdefault(label, len(bounds)) for label in labels], dtype=np.int16)
        return lut[index]
    values = np.asarray(timing.bound, dtype=object)
    out = np.empty(values.shape, dtype=np.int16)
    for label in sorted({str(x) for x in values.ravel()}):
        out[values == label] = bounds.setdefault(label, len(bounds))
    return out


def _overflow_message(mesh: dict[str, np.ndarray], dtype: str) -> str:
    size = (
        mesh["batch"].astype(np.float64)
        * mesh["heads"]
        * mesh["n"].astype(np.float64) ** 2
        * mesh["d"]
        * DTYPE_BYTES[dtype]
    )
    i = int(np.argmax(size))
    where = ", ".join(f"{a}={int(mesh[a][i])}" for a in ("n", "d", "batch", "heads"))
    return (
        f"the grid reaches byte or FLOP counts past int64 (9.2e18), e.g. at {where} ({dtype}); "
        "narrow the ranges, or use 'memmodel compare' (exact at any size) for single workloads"
    )


def swept_axis(grid: Grid) -> str:
    """The variable a plot puts on its x axis: the first integer axis with several values."""
    for a in ("n", "d", "batch", "heads", "kv_heads"):
        if len(grid.axis(a)) > 1:
            return a
    return "n"
