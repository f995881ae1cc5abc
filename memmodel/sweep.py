"""Sweeps: a grid of workloads evaluated with numpy, a few calls per grid, not a loop.

A grid is the cartesian product of

* integer axes, evaluated together as numpy arrays: ``n``, ``n_kv`` (default: equal to
  ``n``), ``d``, ``batch``, ``heads``, ``kv_heads`` (default: equal to ``heads``);
* every other option of :func:`memmodel.compare`, looped over (one call per value, since
  the model takes them as scalars): GPUs, dtypes, tiled variants, implementations
  (``impls``), ``causal``, ``backward``, L2 modes, ``dropout``, ``block_q``, ``block_kv``,
  ``splits``, ``ctas_per_sm``, and the standard-attention variant (``standard``: the paper's
  Algorithm 0/3 or eager PyTorch).

:func:`evaluate` hands each combination of the looped options (a :class:`Setting`) to
:func:`memmodel.compare` as one :class:`~memmodel.workload.Workload` whose fields are int64
arrays, in chunks of :data:`CHUNK` configurations (arrays of that size run faster than one
huge call, and the working memory stays bounded on 10-million-configuration grids); large
grids are shared out between one process per core. The model gives each row of an array what
a scalar :func:`memmodel.compare` call gives for that row (split-KV decoding beside one pass,
GQA's extra backward kernels, tiles and occupancy by head dim); the one thing an array cannot
hold is two implementations, so where ``--impl auto`` picks different kernels for different
head dims (fp32 on a Hopper GPU: the memory-efficient kernel up to d = 128, the paper's
algorithm above) those rows are evaluated apart. The result is columnar: one numpy array per
column of :data:`SWEEP_COLUMNS`, one row per workload × algorithm.

Context-parallel grids (:class:`ContextParallelGrid`, :func:`evaluate_context_parallel`) are
evaluated one configuration at a time through :func:`memmodel.parallel.context_parallel`: the
per-GPU shapes, steps and link times of a split sequence are not array arithmetic.

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
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from .errors import MemmodelError, TimingError, WorkloadError
from .frozen import frozen
from .hardware import DEFAULT_GPU, Profile
from .host import TIMINGS, check_timing
from .implementations import CHOICES, CLOCK_MODES, IMPLEMENTATIONS
from .traffic.l2 import L2_MODES
from .traffic.ledger import DIRECTIONS, LEVELS
from .traffic.standard import STANDARD_VARIANTS
from .validated import time_range
from .workload import DTYPE_BYTES, FP8_KV_DTYPES, Workload

#: Integer axes of a grid, in the order rows are nested (the last varies fastest).
AXES = ("d", "batch", "heads", "kv_heads", "n_kv", "n")
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

#: Columns of ``memmodel sweep --format csv`` (and the keys of each ``json``/``jsonl``
#: object), in order. Stable: new columns are appended, never renamed. Ratios are standard /
#: tiled for the workload of the row, so both rows of a workload carry the same ratios.
#: ``implementation``, ``splits`` and ``ctas_per_sm`` are the tiled kernel's (blank for
#: standard attention); ``standard`` is the standard-attention variant the row's ratios
#: compare against (both rows).
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
    "n_kv",
    "causal",
    "dropout",
    "backward",
    "l2",
    "implementation",
    "splits",
    "ctas_per_sm",
    "standard",
    "predicted_time_low_s",
    "predicted_time_high_s",
    "window",
    "d_v",
    "kv_dtype",
    "page_size",
    "chunk",
)
#: Columns appended under a timing other than kernel (``Grid.timing``): the mode of
#: ``predicted_time_s``, the kernels' time and the host's seconds issuing them (blank where the
#: profile has no host figures: ``graph`` needs none)
TIMING_COLUMNS: tuple[str, ...] = ("timing", "kernel_time_s", "host_time_s")


#: A column kept beside the output's under the default timing, where a GPU of the grid has host
#: figures: each row's time under ``--timing call``, for the note that says when a user's timer
#: would see markedly more than the kernels (:func:`timer_note`); never written out
CALL_COLUMN = "_call_time_s"


def sweep_columns(timing: str = "kernel") -> tuple[str, ...]:
    """The columns of a sweep under ``timing``: :data:`SWEEP_COLUMNS`, and :data:`TIMING_COLUMNS`
    under a mode other than kernel."""
    return SWEEP_COLUMNS if timing == "kernel" else (*SWEEP_COLUMNS, *TIMING_COLUMNS)


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
    """Comma-separated and/or repeated choices (``fp16,bf16``), each one of ``accepted``
    (case-insensitive: ``BF16`` is ``bf16``)."""
    items = [texts] if isinstance(texts, str) else list(texts)
    canonical = {a.lower(): a for a in accepted}
    out: dict[str, None] = {}
    for text in items:
        for part in str(text).split(","):
            part = part.strip()
            if part.lower() not in canonical:
                raise WorkloadError(f"{_p(name)}{part!r} is not one of {', '.join(accepted)}")
            out[canonical[part.lower()]] = None
    if not out:
        raise WorkloadError(f"{_p(name)}give at least one of {', '.join(accepted)}")
    return tuple(out)


_BOOLEAN_WORDS = {
    "on": True,
    "off": False,
    "true": True,
    "false": False,
    "yes": True,
    "no": False,
    "1": True,
    "0": False,
}


def parse_switches(texts: bool | str | Sequence[bool | str], name: str = "value") -> tuple[bool, ...]:
    """``on``, ``off`` or a list of both (``off,on``), repeated or comma-separated, as booleans
    (also true/false, yes/no, 1/0, and Python booleans)."""
    items = [texts] if isinstance(texts, (bool, str)) else list(texts)
    out: dict[bool, None] = {}
    for item in items:
        parts = [item] if isinstance(item, bool) else str(item).split(",")
        for part in parts:
            if isinstance(part, bool):
                out[part] = None
                continue
            key = part.strip().lower()
            if key not in _BOOLEAN_WORDS:
                raise WorkloadError(f"{_p(name)}{part.strip()!r} is not on or off (a list: off,on)")
            out[_BOOLEAN_WORDS[key]] = None
    if not out:
        raise WorkloadError(f"{_p(name)}give on, off or off,on")
    return tuple(out)


def parse_fractions(texts: float | str | Sequence[float | str], name: str = "value") -> tuple[float, ...]:
    """Numbers in [0, 1) (dropout probabilities), repeated or comma-separated: ``0,0.1``."""
    items = [texts] if isinstance(texts, (int, float, str)) else list(texts)
    out: dict[float, None] = {}
    for item in items:
        for part in str(item).split(",") if isinstance(item, str) else [item]:
            try:
                value = float(part)
            except (TypeError, ValueError):
                raise WorkloadError(f"{_p(name)}{str(part).strip()!r} is not a number in [0, 1)") from None
            if not (0.0 <= value < 1.0):  # also refuses nan
                raise WorkloadError(f"{_p(name)}{str(part).strip()!r} is not in [0, 1)")
            out[value] = None
    if not out:
        raise WorkloadError(f"{_p(name)}give at least one number in [0, 1)")
    return tuple(out)


def _optional_ints(values: Any, name: str) -> tuple[int | None, ...]:
    """``(None,)`` (the model's choice) or positive integers in grid syntax."""
    if values is None or (isinstance(values, tuple) and values == (None,)):
        return (None,)
    if isinstance(values, (list, tuple)) and None in values:
        rest = [v for v in values if v is not None]
        return (None, *(parse_values(rest, name) if rest else ()))
    return parse_values(values, name)


class Setting(NamedTuple):
    """One combination of the options a sweep loops over: one call of :func:`memmodel.compare`
    per chunk of the integer axes."""

    gpu: str
    dtype: str
    tiled: str
    impl: str
    causal: bool
    backward: bool
    l2: str
    dropout: float
    block_q: int | None
    block_kv: int | None
    splits: int | None
    ctas_per_sm: int | None
    standard: str
    #: a causal sliding window (keys each query sees; None: all of them)
    window: int | None = None
    #: V's head dim (None: d; MLA: apart from it)
    d_v: int | None = None
    #: an FP8 K/V cache (``Workload.kv_dtype``; None: K/V in the dtype)
    kv_dtype: str | None = None
    #: a paged KV cache's tokens per page (None: contiguous K/V)
    page_size: int | None = None
    #: chunked local attention's chunk (None: not chunked; :func:`memmodel.workload.chunked`)
    chunk: int | None = None
    #: one value for the whole grid (not looped): :data:`memmodel.timing.CLOCKS`
    clocks: str = "benchmark"
    #: one packed row of documents for the whole grid (not looped)
    seq_lens: tuple[int, ...] | None = None
    #: what ``predicted_time_s`` is, one value for the whole grid (not looped): :data:`memmodel.host.TIMINGS`
    timing: str = "kernel"


#: Grid fields looped over, in the order of :class:`Setting` (the last varies fastest).
LOOPS = (
    "gpus",
    "dtypes",
    "tiled",
    "impls",
    "causal",
    "backward",
    "l2",
    "dropout",
    "block_q",
    "block_kv",
    "splits",
    "ctas_per_sm",
    "standard",
    "windows",
    "d_vs",
    "kv_dtypes",
    "page_sizes",
    "chunks",
)
#: The name of each looped option as the command line and the columns say it.
OPTION_NAMES = dict(zip(LOOPS, Setting._fields))


@frozen
class Grid:
    """The configurations of a sweep. ``kv_heads=None`` means "equal to heads" (no GQA),
    ``n_kv=None`` "equal to n"; ``None`` among ``block_q``, ``block_kv``, ``splits`` and
    ``ctas_per_sm`` means the model's own choice (the implementation's tiles, FlashAttention-2's
    split heuristic, as many CTAs as fit). ``standard``: the standard-attention variants
    (:data:`~memmodel.traffic.standard.STANDARD_VARIANTS`)."""

    n: tuple[int, ...]
    d: tuple[int, ...]
    batch: tuple[int, ...] = (1,)
    heads: tuple[int, ...] = (1,)
    kv_heads: tuple[int, ...] | None = None
    dtypes: tuple[str, ...] = ("fp32",)
    gpus: tuple[str, ...] = (DEFAULT_GPU,)
    tiled: tuple[str, ...] = ("fa2",)
    n_kv: tuple[int, ...] | None = None
    impls: tuple[str, ...] = ("auto",)
    causal: tuple[bool, ...] = (False,)
    backward: tuple[bool, ...] = (False,)
    l2: tuple[str, ...] = ("on",)
    dropout: tuple[float, ...] = (0.0,)
    block_q: tuple[int | None, ...] = (None,)
    block_kv: tuple[int | None, ...] = (None,)
    splits: tuple[int | None, ...] = (None,)
    ctas_per_sm: tuple[int | None, ...] = (None,)
    standard: tuple[str, ...] = ("algorithm0",)
    #: causal sliding windows (None: full attention)
    windows: tuple[int | None, ...] = (None,)
    #: V's head dims (None: d)
    d_vs: tuple[int | None, ...] = (None,)
    #: K/V cache element types (None: the dtype; ``fp8``, ``fp8_e5m2``: an FP8 K/V cache)
    kv_dtypes: tuple[str | None, ...] = (None,)
    #: paged KV caches' tokens per page (None: contiguous K/V)
    page_sizes: tuple[int | None, ...] = (None,)
    #: chunked local attention's chunks (None: not chunked), each row chunked as
    #: :func:`memmodel.workload.chunked` runs it
    chunks: tuple[int | None, ...] = (None,)
    #: one packed row of documents for the whole grid (not looped; n is their sum, batch 1)
    seq_lens: tuple[int, ...] | None = None
    #: how long the GPU has been busy (one value for every row: :data:`memmodel.timing.CLOCKS`)
    clocks: str = "benchmark"
    #: what ``predicted_time_s`` is (one value for every row: :data:`memmodel.host.TIMINGS`)
    timing: str = "kernel"

    def __post_init__(self) -> None:
        for name in ("n", "d", "batch", "heads", "kv_heads", "n_kv"):
            values = getattr(self, name)
            if values is None:
                continue
            values = parse_values(values, name) if not isinstance(values, tuple) else values
            if not values:
                raise WorkloadError(f"{_p(name)}the grid has no values")
            if any(not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1 for v in values):
                raise WorkloadError(f"{_p(name)}values must be positive integers")
            object.__setattr__(self, name, tuple(int(v) for v in values))
        for name, accepted in (
            ("dtypes", tuple(DTYPE_BYTES)),
            ("tiled", TILED_VARIANTS),
            ("impls", CHOICES),
            ("l2", L2_MODES),
            ("standard", STANDARD_VARIANTS),
        ):
            object.__setattr__(self, name, parse_choices(getattr(self, name), accepted, name))
        if self.clocks not in CLOCK_MODES:
            raise WorkloadError(f"clocks: {self.clocks!r} is not one of {', '.join(CLOCK_MODES)}")
        check_timing(self.timing)
        object.__setattr__(self, "kv_dtypes", _kv_dtypes(self.kv_dtypes))
        for name in ("causal", "backward"):
            object.__setattr__(self, name, parse_switches(getattr(self, name), name))
        object.__setattr__(self, "dropout", parse_fractions(self.dropout, "dropout"))
        for name in ("block_q", "block_kv", "splits", "ctas_per_sm", "windows", "d_vs", "page_sizes", "chunks"):
            object.__setattr__(self, name, _optional_ints(getattr(self, name), name))
        if any(c is not None for c in self.chunks):
            for name, other in (("windows", self.windows), ("page_sizes", self.page_sizes)):
                if any(x is not None for x in other):
                    raise WorkloadError(f"chunks with {name} is not modelled: chunked attention is its own mask")
            if self.seq_lens is not None:
                raise WorkloadError("chunks with seq_lens is not modelled: chunked attention is its own mask")
            if self.causal == (False,):  # chunked attention is causal: the default mask becomes causal
                object.__setattr__(self, "causal", (True,))
            elif False in self.causal:
                raise WorkloadError("chunks: chunked attention is causal: give no --causal off beside --chunk")
        if any(w is not None for w in self.windows):
            if self.causal == (False,):  # a window is causal: the default mask becomes causal
                object.__setattr__(self, "causal", (True,))
            elif False in self.causal:
                raise WorkloadError("windows: a sliding window is causal: give no --causal off beside --window")
        if isinstance(self.gpus, str):
            object.__setattr__(self, "gpus", (self.gpus,))
        if not self.gpus:
            raise WorkloadError("gpus: give at least one GPU")
        if self.size > MAX_CONFIGURATIONS:
            raise WorkloadError(
                f"the grid has {self.size:,} configurations ({self.describe_size()}); "
                f"the limit is {MAX_CONFIGURATIONS:,}: narrow a range or take a larger step"
            )

    def axis(self, name: str) -> tuple[int, ...]:
        if name in ("kv_heads", "n_kv") and getattr(self, name) is None:
            return (0,)  # placeholder: equal to heads, to n
        return getattr(self, name)  # type: ignore[no-any-return]

    @property
    def workloads_per_group(self) -> int:
        return math.prod(len(self.axis(a)) for a in AXES)

    @property
    def groups(self) -> list[Setting]:
        """Every combination of the looped options, in output order."""
        return [
            Setting(*values, clocks=self.clocks, seq_lens=self.seq_lens, timing=self.timing)
            for values in itertools.product(*(getattr(self, name) for name in LOOPS))
        ]

    @property
    def size(self) -> int:
        """Workload configurations (each gives two rows: standard and tiled)."""
        return self.workloads_per_group * math.prod(len(getattr(self, name)) for name in LOOPS)

    def describe_size(self) -> str:
        parts = [f"{len(self.axis(a))} {a}" for a in AXES if len(self.axis(a)) > 1]
        labels = {
            "gpus": "GPUs",
            "impls": "implementations",
            "l2": "L2 modes",
            "causal": "causal",
            "tiled": "tiled",
            "standard": "standard variants",
        }
        parts += [f"{len(getattr(self, k))} {labels.get(k, k)}" for k in LOOPS if len(getattr(self, k)) > 1]
        return " × ".join(parts) or "one configuration"

    def varying(self) -> list[str]:
        """Options with more than one value, integer axes first (n first), then the looped
        ones by their command-line names (dtype, gpu, tiled, impl, causal, ...)."""
        out = [a for a in ("n", "n_kv", "d", "batch", "heads", "kv_heads") if len(self.axis(a)) > 1]
        out += [OPTION_NAMES[k] for k in LOOPS if len(getattr(self, k)) > 1]
        return out

    def mesh(self) -> dict[str, np.ndarray]:
        """The integer axes of one group as flat int64 arrays (``n`` varies fastest)."""
        arrays = np.meshgrid(*(np.asarray(self.axis(a), dtype=np.int64) for a in AXES), indexing="ij")
        out = {a: arr.ravel() for a, arr in zip(AXES, arrays)}
        if self.kv_heads is None:
            out["kv_heads"] = out["heads"]
        if self.n_kv is None:
            out["n_kv"] = out["n"]
        return out


def _kv_dtypes(values: Any) -> tuple[str | None, ...]:
    """The K/V cache axis: None (or "none": the dtype) and the FP8 cache types."""
    items = (values,) if isinstance(values, str) or values is None else tuple(values)
    out: dict[str | None, None] = {}
    for v in items:
        name = None if v is None or str(v).lower() == "none" else str(v).lower()
        if name is not None and name not in FP8_KV_DTYPES:
            raise WorkloadError(f"kv_dtypes: {v!r} is not one of none, {', '.join(FP8_KV_DTYPES)}")
        out[name] = None
    if not out:
        raise WorkloadError("kv_dtypes: the grid has no values")
    return tuple(out)


#: Codes of the ``kv_dtype`` column: blank where K/V are in the dtype, then the FP8 cache types.
KV_DTYPE_CODES = ("", *FP8_KV_DTYPES)
#: Text columns, stored as small integer codes into :attr:`SweepResult.categories`.
CATEGORICAL = (
    "gpu",
    "dtype",
    "algorithm",
    "variant",
    "bound",
    "l2",
    "implementation",
    "standard",
    "kv_dtype",
    "timing",
)
#: Integer columns that are blank for some rows (stored as -1): what only the tiled kernel has.
_BLANK_AS_NEGATIVE = frozenset({"block_q", "block_kv", "splits", "ctas_per_sm", "window", "page_size", "chunk"})
#: Columns stored as 0/1 and read as booleans.
_BOOLEAN = frozenset({"causal", "backward"})
ALGORITHMS = ("standard", "tiled")
#: Codes of the ``variant`` column (new ones appended): the standard row's variant, the tiled row's
VARIANTS = ("algorithm0", *TILED_VARIANTS, "eager", "math", "flashmla")
#: Codes of the ``implementation`` column: blank for standard attention, then the tiled kernels.
IMPLEMENTATION_CODES = ("", *IMPLEMENTATIONS)


@dataclass
class SweepResult:
    """Columns of :data:`SWEEP_COLUMNS` as equal-length numpy arrays, rows alternating standard, tiled.

    Text columns (:data:`CATEGORICAL`) hold integer codes into ``categories[column]``;
    :meth:`column` decodes them; ``block_q``, ``block_kv``, ``splits`` and ``ctas_per_sm``
    are -1 where blank (standard rows). ``notes`` say what was skipped, ``warnings`` what was
    modelled though no kernel would run it so, and ``caveats`` what stands in for a figure
    or a choice the profile and the options do not give (each once).
    """

    grid: Grid
    columns: dict[str, np.ndarray]
    categories: dict[str, tuple[str, ...]]
    notes: list[str] = field(default_factory=list)
    caveats: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.columns["algorithm"])

    @property
    def names(self) -> tuple[str, ...]:
        """Its columns, in order (:func:`sweep_columns` of the grid's timing)."""
        return sweep_columns(self.grid.timing)

    def column(self, name: str, start: int = 0, stop: int | None = None) -> np.ndarray:
        """One column with text decoded (object array of str), booleans as bool, blanks as-is."""
        values = self.columns[name][start:stop]
        if name in self.categories:
            return np.asarray(self.categories[name], dtype=object)[values]
        if name in _BOOLEAN:
            return values.astype(bool)
        return values

    def column_lists(self, start: int = 0, stop: int | None = None) -> list[list[Any]]:
        """Columns ``start:stop`` as lists of plain values (exact ints, floats, str, bool; None for blanks)."""
        out = []
        for name in self.names:
            column = self.column(name, start, stop)
            values = column.tolist()
            if name in _BLANK_AS_NEGATIVE:
                values = [None if v < 0 else v for v in values]
            elif column.dtype.kind == "f" and np.isnan(column).any():  # a blank time (no figure for it)
                values = [None if v != v else v for v in values]
            elif name in ("implementation", "kv_dtype"):
                values = [v or None for v in values]
            out.append(values)
        return out

    def rows(self, start: int = 0, stop: int | None = None) -> Iterator[dict[str, Any]]:
        """Rows as dicts keyed by :attr:`names`."""
        for values in zip(*self.column_lists(start, stop)):
            yield dict(zip(self.names, values))


Progress = Callable[[int], None]


def _label(setting: Setting, grid: Grid) -> str:
    """The looped options that vary in ``grid``, as a note names a group: ``tiled fa1 × splits 4``."""
    parts = [f"{OPTION_NAMES[k]} {getattr(setting, OPTION_NAMES[k])}" for k in LOOPS if len(getattr(grid, k)) > 1]
    return " × ".join(parts) or "the grid"


def evaluate(
    grid: Grid,
    profiles: Mapping[str, Profile] | None = None,
    *,
    progress: Progress | None = None,
    workers: int | None = None,
) -> SweepResult:
    """Every configuration of ``grid``: one :func:`memmodel.compare` call per setting and chunk.

    Chunks are shared out between ``workers`` forked processes that write the columns in
    place (shared memory); by default one per core for grids of :data:`PARALLEL_MIN`
    configurations or more, else none. Results do not depend on it.

    ``profiles`` maps the grid's GPU names to loaded profiles (loaded by name when missing).
    ``progress`` is called with the number of configurations just evaluated. A setting that
    cannot run (no peak for the dtype; options the model refuses together, such as splits
    with fa1) is skipped with a note while others remain; so are configurations where
    kv_heads does not divide heads, where a causal mask needs n_kv ≥ n, or where fewer K/V
    blocks than ``splits`` are there to split. Options no kernel runs (more CTAs per SM than
    the shared memory holds) are refused (:func:`memmodel.checks.ctas_problem`).
    """
    from .checks import splits_warning
    from .hardware import load_profile
    from .options import options_for
    from .timing import caveats as profile_caveats
    from .traffic.decode import split_block_kv

    _keep_freed_memory()
    loaded = {g: (profiles or {}).get(g) or load_profile(g) for g in grid.gpus}
    mesh = grid.mesh()
    notes: list[str] = []
    warnings: list[str] = []
    caveats: dict[str, None] = {}

    def note(text: str) -> None:
        if text not in notes:
            notes.append(text)

    valid = mesh["heads"] % mesh["kv_heads"] == 0
    total = len(valid)
    if not valid.all():
        skipped = int((~valid).sum())
        if skipped == total:
            raise WorkloadError("kv_heads must divide heads: no configuration of the grid is valid")
        note(f"skipped {skipped:,} of {total:,} workloads where kv_heads does not divide heads")
    runnable: list[tuple[Setting, np.ndarray | None, dict[int, str]]] = []
    refusals: list[MemmodelError] = []
    representative = {k: int(v[int(np.argmax(valid))]) for k, v in mesh.items()}
    for setting in grid.groups:
        profile = loaded[setting.gpu]
        try:
            profile.peak_flops(setting.dtype)
        except MemmodelError as exc:
            refusals.append(exc)
            note(f"skipped {setting.gpu} × {setting.dtype}: {exc}")
            continue
        rows = valid
        if setting.causal:
            ok = mesh["n_kv"] >= mesh["n"]
            if not (ok | ~valid).all():
                note(
                    f"causal: skipped {int((~ok & valid).sum()):,} of {total:,} workloads where n_kv < n "
                    "(a causal mask aligns the last query with the last key: n_kv must be at least n)"
                )
            rows = rows & ok
        if setting.window is not None:
            covered = mesh["n_kv"] < setting.window
            if (covered & valid).any():
                note(
                    f"window {setting.window}: {int((covered & valid).sum()):,} of {total:,} workloads have fewer keys "
                    f"(n_kv) than the window, which covers them all: full causal attention there"
                )
        if setting.chunk is not None:
            ok = (mesh["n"] == mesh["n_kv"]) | (mesh["n"] == 1)
            if not (ok | ~valid).all():
                note(
                    f"chunk {setting.chunk}: skipped {int((~ok & valid).sum()):,} of {total:,} workloads with "
                    "1 < n < n_kv (chunked attention is modelled on a prefill, n = n_kv, or a one-token decode)"
                )
            rows = rows & ok
        if setting.splits is not None:
            ok = -(-mesh["n_kv"] // split_block_kv(mesh["d"])) >= setting.splits
            if not (ok | ~valid).all():
                note(
                    f"splits {setting.splits}: skipped {int((~ok & valid).sum()):,} of {total:,} workloads with "
                    f"fewer than {setting.splits} K/V blocks to split"
                )
            rows = rows & ok
        if not rows.any():
            continue
        impl_of_d: dict[int, str] = {}
        try:
            for d in np.unique(mesh["d"][rows]).tolist():
                r = representative
                if setting.chunk is not None:  # a row the chunk runs on
                    r = {k: int(v[int(np.argmax(rows))]) for k, v in mesh.items()}
                w = Workload(
                    n=r["n"], d=int(d), batch=r["batch"], heads=r["heads"], kv_heads=r["kv_heads"], n_kv=r["n_kv"],
                    dtype=setting.dtype, seq_lens=setting.seq_lens, d_v=setting.d_v, kv_dtype=setting.kv_dtype,
                    page_size=setting.page_size,
                )  # fmt: skip
                if setting.chunk is not None:
                    from .workload import chunked

                    w = chunked(w, setting.chunk)[0]
                if setting.window is not None:  # the implementation a window takes (a row the window fits)
                    longest = int(mesh["n_kv"][rows].max())
                    w = w.with_(n=min(int(mesh["n"][rows].min()), longest), n_kv=longest, causal=True)
                    w = w.with_(window=setting.window if setting.window < longest else None)
                opts = options_for(setting.impl, w, profile, **_option_fields(setting))
                impl_of_d[int(d)] = opts.implementation or "paper"
                if setting.timing != "kernel":  # a mode the profile has no figures for: refused at once
                    from .model import compare

                    one = compare(w, profile, opts, standard=setting.standard)
                    one.standard.time_s(setting.timing), one.tiled.time_s(setting.timing)
                    if setting.timing in ("call", "queued"):  # whose host figures stand in for another's
                        for line in one.tiled.host_times.notes:
                            caveats[line] = None
                for line in opts.notes:
                    caveats[line] = None
                if w.dtype == "fp8" or w.kv_dtype is not None:
                    from .caveats import fp8_lines

                    for line in fp8_lines(w, opts.model_implementation, profile):
                        caveats[line] = None
        except TimingError:  # the profile lacks a figure the timing needs: the sweep cannot be given so
            raise
        except MemmodelError as exc:  # options the model refuses together (splits with fa1, ...)
            refusals.append(exc)
            note(f"skipped {_label(setting, grid)}: {exc}")
            continue
        for impl in dict.fromkeys(impl_of_d.values()):
            for line in profile_caveats(profile, impl if impl != "paper" else None, setting.dtype):
                caveats[line] = None
        if setting.splits is not None:
            warning = splits_warning(
                setting.splits, mesh["n"][rows], mesh["batch"][rows], mesh["heads"][rows], profile, grid=True
            )
            if warning and warning not in warnings:
                warnings.append(warning)
        runnable.append((setting, None if rows.all() else np.flatnonzero(rows), impl_of_d))
    if not runnable:
        if refusals:
            raise refusals[0]
        raise WorkloadError("no configuration of the grid is valid (see the notes above)")
    counts = [total if idx is None else len(idx) for _, idx, _ in runnable]
    offsets = [2 * x for x in itertools.accumulate([0, *counts[:-1]])]
    rows_out = 2 * sum(counts)
    small = max(max(grid.axis(a)) for a in AXES) < 2**31  # sizes fit int32: less memory to write
    dtypes = {**_COLUMN_DTYPES, **({c: np.int32 for c in _SMALL_INT_COLUMNS} if small else {})}
    tasks = [(g, start) for g, count in enumerate(counts) for start in range(0, count, CHUNK)]
    configurations = sum(counts)
    if workers is None:
        workers = min(os.cpu_count() or 1, len(tasks)) if configurations >= PARALLEL_MIN else 1
    parallel = workers > 1 and len(tasks) > 1 and "fork" in multiprocessing.get_all_start_methods()
    hidden = (CALL_COLUMN,) if grid.timing == "kernel" and any(p.host is not None for p in loaded.values()) else ()
    names = (*sweep_columns(grid.timing), *hidden)
    columns = _allocate(rows_out, dtypes, shared=parallel, names=names)
    bound_codes: dict[str, int] = {label: i for i, label in enumerate(BOUND_LABELS)}
    job = _Job(mesh, runnable, offsets, loaded, grid, columns)
    done = False
    if parallel:
        try:
            _run_parallel(job, tasks, workers, progress)
            done = True
        except _UnknownBound:  # a label outside BOUND_LABELS: codes must be assigned in order
            columns = _allocate(rows_out, dtypes, shared=False, names=names)
            job = _Job(mesh, runnable, offsets, loaded, grid, columns)
    if not done:
        for g, start in tasks:
            size = job.run(g, start, bound_codes)
            if progress is not None:
                progress(size)
    if progress is not None and configurations == 0:
        progress(0)
    categories = {
        "gpu": grid.gpus,
        "dtype": grid.dtypes,
        "algorithm": ALGORITHMS,
        "variant": VARIANTS,
        "bound": tuple(bound_codes),
        "l2": L2_MODES,
        "implementation": IMPLEMENTATION_CODES,
        "standard": STANDARD_VARIANTS,
        "kv_dtype": KV_DTYPE_CODES,
        "timing": TIMINGS,
    }
    return SweepResult(grid, columns, categories, notes, list(caveats), warnings)


def _option_fields(setting: Setting) -> dict[str, Any]:
    """The :class:`~memmodel.options.Options` fields of ``setting`` for :func:`options_for`."""
    return {
        "tiled": setting.tiled,
        "block_q": setting.block_q,
        "block_kv": setting.block_kv,
        "l2": setting.l2,
        "backward": setting.backward,
        "splits": setting.splits,
        "ctas_per_sm": setting.ctas_per_sm,
        "clocks": setting.clocks,
        "timing": setting.timing,
    }


#: Timing terms that can bound an algorithm (memmodel.timing), coded in this order; a label
#: outside this list is coded after them (the serial path).
BOUND_LABELS = ("hbm", "l2", "sram", "latency", "matmul", "softmax", "exp", "compute", "floor")
#: Grids from this many configurations are shared out between processes (one per core).
PARALLEL_MIN = 100_000


class _UnknownBound(Exception):
    """A worker met a bound label outside BOUND_LABELS."""


@dataclass
class _Job:
    """What every chunk needs; inherited by forked workers, never pickled."""

    mesh: dict[str, np.ndarray]
    #: per setting: the setting, the mesh rows it runs (None: all), the implementation per head dim
    runnable: list[tuple[Setting, np.ndarray | None, dict[int, str]]]
    #: per setting: the first output row of its block
    offsets: list[int]
    profiles: dict[str, Profile]
    grid: Grid
    columns: dict[str, np.ndarray]

    def run(self, g: int, start: int, bound_codes: dict[str, int]) -> int:
        setting, rows, impl_of_d = self.runnable[g]
        if rows is None:
            chunk = {k: v[start : start + CHUNK] for k, v in self.mesh.items()}
        else:
            picked = rows[start : start + CHUNK]
            chunk = {k: v[picked] for k, v in self.mesh.items()}
        codes = {
            "gpu": self.grid.gpus.index(setting.gpu),
            "dtype": self.grid.dtypes.index(setting.dtype),
            "l2": L2_MODES.index(setting.l2),
            "standard": STANDARD_VARIANTS.index(setting.standard),
            "kv_dtype": KV_DTYPE_CODES.index(setting.kv_dtype or ""),
        }
        at = self.offsets[g] + 2 * start
        _evaluate_chunk(chunk, self.profiles[setting.gpu], setting, impl_of_d, codes, bound_codes, self.columns, at)
        return len(chunk["n"])


def _allocate(
    rows: int, dtypes: dict[str, Any], *, shared: bool, names: tuple[str, ...] = SWEEP_COLUMNS
) -> dict[str, np.ndarray]:
    """Output columns ``names``; ``shared``: in anonymous shared memory, written by forked workers in place."""
    out = {}
    for name in names:
        dtype = np.dtype(dtypes.get(name, np.int64))
        if shared and rows:
            buffer = mmap.mmap(-1, rows * dtype.itemsize)
            if hasattr(mmap, "MADV_HUGEPAGE"):  # Linux: fewer page faults on the first write
                buffer.madvise(mmap.MADV_HUGEPAGE)
            out[name] = np.frombuffer(buffer, dtype=dtype, count=rows)
        else:
            out[name] = np.empty(rows, dtype=dtype)
    return out


#: glibc's allocator settings (malloc.h: M_MMAP_THRESHOLD, M_TRIM_THRESHOLD) a sweep asks for:
#: blocks below 4 MiB from the heap (a chunk's temporaries; numpy asks for huge pages from
#: 4 MiB up, and such blocks, the output columns, stay mapped on their own), and up to
#: 256 MiB of freed heap kept for reuse (above a chunk's temporaries, some 30-100 MiB)
_MALLOPT = {-3: 4 << 20, -1: 256 << 20}
_allocator_set = False


def _keep_freed_memory() -> None:
    """Ask glibc's allocator (Linux) to keep the memory one chunk frees for the next.

    A chunk's temporaries are int64 and float64 arrays of :data:`CHUNK` elements (256 KiB):
    with glibc's default thresholds each is mapped and unmapped on its own, or the heap's free
    top is handed back to the system when the chunk ends, and the next chunk faults every page
    in again: some 100,000 to 400,000 page faults per million configurations, a third of a
    sweep's time on a 2-core VM. Process-wide and once; elsewhere (no glibc) nothing."""
    global _allocator_set
    if _allocator_set or not sys.platform.startswith("linux"):
        return
    _allocator_set = True
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc
        return
    for option, value in _MALLOPT.items():
        mallopt(option, value)


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


_SMALL_INT_COLUMNS = ("batch", "heads", "kv_heads", "n", "n_kv", "d", "block_q", "block_kv")
_COLUMN_DTYPES: dict[str, Any] = {
    **{c: np.int16 for c in CATEGORICAL},
    **{c: np.int8 for c in _BOOLEAN},
    "arithmetic_intensity": np.float64,
    "predicted_time_s": np.float64,
    "ratio_hbm_bytes": np.float64,
    "ratio_flops": np.float64,
    "ratio_predicted_time_s": np.float64,
    "dropout": np.float64,
    "predicted_time_low_s": np.float64,
    "predicted_time_high_s": np.float64,
    "kernel_time_s": np.float64,
    "host_time_s": np.float64,
    CALL_COLUMN: np.float64,
}


def _parts(mesh: dict[str, np.ndarray], impl_of_d: dict[int, str]) -> Iterator[tuple[np.ndarray | None, str]]:
    """The rows of a chunk one call evaluates, as (rows, or None for all; the implementation).
    The model gives every row of an array what a call for that row alone gives; only the
    implementation must be one per call, and ``--impl auto`` chooses it by head dimension."""
    impls = dict.fromkeys(impl_of_d.values())
    if len(impls) == 1:
        yield None, next(iter(impls))
        return
    for impl in impls:
        rows = np.flatnonzero(np.isin(mesh["d"], [d for d, i in impl_of_d.items() if i == impl]))
        if rows.size:
            yield rows, impl


def _evaluate_chunk(
    mesh: dict[str, np.ndarray],
    profile: Profile,
    setting: Setting,
    impl_of_d: dict[int, str],
    codes: dict[str, int],
    bound_codes: dict[str, int],
    columns: dict[str, np.ndarray],
    at: int,
) -> None:
    """Evaluate one chunk and write its rows into ``columns[at : at + 2·size]`` (standard, tiled, ...)."""
    size = len(mesh["n"])
    end = at + 2 * size
    columns["gpu"][at:end] = codes["gpu"]
    columns["dtype"][at:end] = codes["dtype"]
    columns["l2"][at:end] = codes["l2"]
    columns["causal"][at:end] = int(setting.causal)
    columns["backward"][at:end] = int(setting.backward)
    columns["dropout"][at:end] = setting.dropout
    columns["standard"][at:end] = codes["standard"]
    columns["window"][at:end] = -1 if setting.window is None else setting.window
    columns["d_v"][at:end] = np.repeat(mesh["d"], 2) if setting.d_v is None else setting.d_v
    columns["kv_dtype"][at:end] = codes["kv_dtype"]
    columns["page_size"][at:end] = -1 if setting.page_size is None else setting.page_size
    columns["chunk"][at:end] = -1 if setting.chunk is None else setting.chunk
    auto = setting.impl == "auto"
    parts = _window_parts(_parts(mesh, impl_of_d), mesh, setting.window, auto)
    for rows, impl in _chunk_parts(parts, mesh, setting, auto):
        sub = mesh if rows is None else {k: v[rows] for k, v in mesh.items()}
        if rows is None:
            std_at: Any = slice(at, end, 2)
            til_at: Any = slice(at + 1, end, 2)
        else:
            std_at = at + 2 * rows
            til_at = std_at + 1
        _evaluate_part(sub, profile, setting, impl, bound_codes, columns, std_at, til_at)


def _window_parts(
    parts: Iterator[tuple[np.ndarray | None, str]], mesh: dict[str, np.ndarray], window: int | None, auto: bool
) -> Iterator[tuple[np.ndarray | None, str]]:
    """``parts`` split where a sliding window covers every key of some rows and not of others:
    those rows are full causal attention, modelled as such (:func:`_row_window`), and with
    ``auto`` (``--impl auto``) by the kernel PyTorch runs for it, head dim by head dim."""
    for rows, impl in parts:
        if window is None:
            yield rows, impl
            continue
        idx = np.arange(len(mesh["n"])) if rows is None else rows
        covered = mesh["n_kv"][idx] <= window
        if not covered.any():
            yield rows, impl
            continue
        if not auto:
            yield (rows, impl) if covered.all() else (idx[covered], impl)
        else:
            for d in np.unique(mesh["d"][idx[covered]]):
                yield idx[covered & (mesh["d"][idx] == d)], "auto"
        if not covered.all():
            yield idx[~covered], impl


def _chunk_parts(
    parts: Iterator[tuple[np.ndarray | None, str]], mesh: dict[str, np.ndarray], setting: Setting, auto: bool
) -> Iterator[tuple[np.ndarray | None, str]]:
    """``parts`` split, under ``--impl auto``, where cuDNN would get causal chunks (fewer queries
    than keys, bottom-right): PyTorch runs those rows through flash attention (the memory-efficient
    kernel where V's head dim is apart: ``options.chunk_causal``)."""
    for rows, impl in parts:
        if not (auto and setting.causal and impl == "sdpa-cudnn"):
            yield rows, impl
            continue
        idx = np.arange(len(mesh["n"])) if rows is None else rows
        chunk = (mesh["n"][idx] > 1) & (mesh["n"][idx] != mesh["n_kv"][idx])
        if not chunk.any():
            yield rows, impl
            continue
        yield idx[chunk], "sdpa-flash" if setting.d_v is None else "sdpa-efficient"
        if not chunk.all():
            yield idx[~chunk], impl


def _row_window(window: int | None, n_kv: np.ndarray) -> int | None:
    """The window a part's workload takes: None where it covers every key (full causal)."""
    return None if window is None or bool(np.all(n_kv <= window)) else window


def _evaluate_part(
    mesh: dict[str, np.ndarray],
    profile: Profile,
    setting: Setting,
    impl: str,
    bound_codes: dict[str, int],
    columns: dict[str, np.ndarray],
    std_at: Any,
    til_at: Any,
) -> None:
    from .checks import ctas_problem
    from .model import compare
    from .options import options_for

    if setting.chunk is not None and len(mesh["n"]) > 1:  # each row its own packed row (or its chunk's keys)
        std_idx, til_idx = (np.arange(len(columns["gpu"]))[a] if isinstance(a, slice) else a for a in (std_at, til_at))
        for i in range(len(mesh["n"])):
            one = {k: v[i : i + 1] for k, v in mesh.items()}
            row_impl = "auto" if setting.impl == "auto" else impl  # a decode row and a prefill row may differ
            _evaluate_part(
                one, profile, setting, row_impl, bound_codes, columns, std_idx[i : i + 1], til_idx[i : i + 1]
            )
        return
    workload = Workload(
        n=mesh["n"],
        d=mesh["d"],
        batch=mesh["batch"],
        heads=mesh["heads"],
        kv_heads=mesh["kv_heads"],
        n_kv=mesh["n_kv"],
        dtype=setting.dtype,
        causal=setting.causal,
        dropout=setting.dropout,
        window=_row_window(setting.window, mesh["n_kv"]),
        seq_lens=setting.seq_lens,
        d_v=setting.d_v,
        kv_dtype=setting.kv_dtype,
        page_size=setting.page_size,
    )
    if setting.chunk is not None:
        from .workload import chunked

        workload = chunked(
            workload.with_(**{k: int(mesh[k][0]) for k in ("n", "d", "batch", "heads", "kv_heads", "n_kv")}),
            setting.chunk,
        )[0]
    try:
        options = options_for(impl, workload, profile, **_option_fields(setting))
        c = compare(workload, profile, options, standard=setting.standard)
    except OverflowError:
        raise WorkloadError(_overflow_message(mesh, setting.dtype)) from None
    ctas_problem(c)

    def put(name: str, standard: Any, tiled_: Any) -> None:
        """Write per-workload values of the two algorithms: s0, t0, s1, t1, ..."""
        col = columns[name]
        col[std_at] = standard
        col[til_at] = tiled_

    s, t = c.standard, c.tiled
    params = t.traffic.params
    put("algorithm", 0, 1)
    put("variant", VARIANTS.index(s.traffic.variant), VARIANTS.index(t.traffic.variant))
    for a in ("batch", "heads", "kv_heads", "n", "n_kv", "d"):
        put(a, mesh[a], mesh[a])
    put("block_q", -1, np.asarray(params["block_q"]))
    put("block_kv", -1, np.asarray(params["block_kv"]))
    put("splits", -1, np.asarray(params.get("splits", 1)))
    put("ctas_per_sm", -1, np.asarray(params["ctas_per_sm"]))
    put("implementation", 0, IMPLEMENTATION_CODES.index(c.options.implementation or "paper"))
    for level in LEVELS:
        for direction in DIRECTIONS:
            put(
                f"{level}_{direction}_bytes",
                s.traffic.bytes(level=level, direction=direction),
                t.traffic.bytes(level=level, direction=direction),
            )
        put(
            f"{level}_bytes",
            s.traffic.bytes(level=level),
            t.traffic.bytes(level=level),
        )
    put("flops", s.traffic.flops, t.traffic.flops)
    put("exp_ops", s.traffic.exp_ops, t.traffic.exp_ops)
    for name, ev in (("standard", s), ("tiled", t)):
        hbm = np.asarray(ev.traffic.hbm_bytes, dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            intensity = np.where(hbm > 0, np.asarray(ev.traffic.flops, dtype=np.float64) / hbm, 0.0)
        columns["arithmetic_intensity"][std_at if name == "standard" else til_at] = intensity
    timing = setting.timing
    put("predicted_time_s", s.time_s(timing), t.time_s(timing))
    # the ranges: the validation records' errors of the timing mode's times
    ranges = [time_range(profile.rate_class, np.asarray(ev.time_s(timing), dtype=np.float64), timing) for ev in (s, t)]
    for i, key in enumerate(("predicted_time_low_s", "predicted_time_high_s")):
        put(key, *(np.nan if r is None else r[i] for r in ranges))
    if timing != "kernel":
        put("timing", TIMINGS.index(timing), TIMINGS.index(timing))
        put("kernel_time_s", s.timing.time_s, t.timing.time_s)
        put("host_time_s", *(np.nan if ev.host_times.host_s is None else ev.host_times.host_s for ev in (s, t)))
    if CALL_COLUMN in columns:
        put(CALL_COLUMN, *(np.nan if ev.host_times.call_s is None else ev.host_times.call_s for ev in (s, t)))
    put("bound", _encode_bounds(s.timing, bound_codes), _encode_bounds(t.timing, bound_codes))
    for key, value in c.ratios().items():
        put(f"ratio_{key}", value, value)


def timer_note(result: SweepResult, unit: Callable[[float], str]) -> str | None:
    """Under the default timing, one line where a user's timer around one call of the tiled
    kernel would see more than :data:`memmodel.host.NOTE_RATIO` times its kernel time in some rows
    (``unit`` formats seconds); None where none would, or no GPU of the grid has host figures."""
    from .host import NOTE_RATIO

    if CALL_COLUMN not in result.columns or not len(result):
        return None
    call = np.asarray(result.columns[CALL_COLUMN][1::2], dtype=np.float64)
    kernel = np.asarray(result.columns["predicted_time_s"][1::2], dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(kernel > 0, call / np.where(kernel > 0, kernel, 1.0), np.nan)
    over = np.flatnonzero(ratio > NOTE_RATIO)  # NaN (no figures for that GPU) compares false
    if not over.size:
        return None
    worst = int(over[np.argmax(ratio[over])])
    return (
        f"a user's timer around one call sees more than the kernel time in {over.size:,} of {len(kernel):,} tiled "
        f"rows (up to {ratio[worst]:.1f}×: {unit(float(call[worst]))} for {unit(float(kernel[worst]))} of kernels; "
        "--timing call): host dispatch"
    )


def _encode_bounds(timing: Any, bound_codes: dict[str, int]) -> Any:
    """The timing's bound labels as codes into ``bound_codes`` (label -> code, grown as labels appear)."""
    labels = getattr(timing, "bound_labels", None)
    index = getattr(timing, "bound_index", None)
    if labels and index is not None:
        lut = np.array([bound_codes.setdefault(label, len(bound_codes)) for label in labels], dtype=np.int16)
        return lut[index]
    values = np.asarray(timing.bound, dtype=object)
    out = np.empty(values.shape, dtype=np.int16)
    for label in sorted({str(x) for x in values.ravel()}):
        out[values == label] = bound_codes.setdefault(label, len(bound_codes))
    return out


def _overflow_message(mesh: dict[str, np.ndarray], dtype: str) -> str:
    size = (
        mesh["batch"].astype(np.float64)
        * mesh["heads"]
        * mesh["n"].astype(np.float64)
        * mesh["n_kv"].astype(np.float64)
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
    for a in ("n", "n_kv", "d", "batch", "heads", "kv_heads"):
        if len(grid.axis(a)) > 1:
            return a
    return "n"


# ---------------------------------------------------------------------------------------
# Context-parallel sweeps: one scalar evaluation per configuration (the per-GPU shapes,
# steps and link times of memmodel.parallel do not run on arrays)

#: Axes of a context-parallel grid, in the order rows nest (the last varies fastest); they are
#: also the first keys of every row.
CP_AXES = (
    "n",
    "d",
    "batch",
    "heads",
    "kv_heads",
    "dtype",
    "gpu",
    "causal",
    "impl",
    "backward",
    "p",
    "scheme",
    "ulysses_degree",
)
#: What each row gives beyond its axes (per algorithm, standard then tiled).
CP_VALUES = ("algorithm", "predicted_time_s", "single_gpu_time_s", "speedup", "link_bytes", "hbm_bytes", "bound")
#: Columns of ``memmodel sweep --context-parallel --format csv``, in order.
CP_COLUMNS = (
    "gpu",
    "p",
    "scheme",
    "ulysses_degree",
    "n",
    "d",
    "batch",
    "heads",
    "kv_heads",
    "dtype",
    "causal",
    "impl",
    "backward",
    *CP_VALUES,
)


@frozen
class ContextParallelGrid:
    """The configurations of a context-parallel sweep: every combination of the axes
    (:data:`CP_AXES`; ``kv_heads`` ``None``: equal to heads), each split over ``p`` GPUs with
    ``scheme``. ``options`` are :class:`~memmodel.implementations.Options` fields with one value
    for the whole grid (``tiled``, ``block_q``, ``block_kv``, ``l2``, ``splits``,
    ``ctas_per_sm``, ``clocks``); ``standard`` the standard-attention variant."""

    n: tuple[int, ...]
    d: tuple[int, ...]
    p: tuple[int, ...]
    batch: tuple[int, ...] = (1,)
    heads: tuple[int, ...] = (1,)
    kv_heads: tuple[int | None, ...] = (None,)
    dtype: tuple[str, ...] = ("fp32",)
    gpu: tuple[str, ...] = (DEFAULT_GPU,)
    causal: tuple[bool, ...] = (False,)
    impl: tuple[str, ...] = ("auto",)
    backward: tuple[bool, ...] = (False,)
    scheme: tuple[str, ...] = ("ring",)
    #: the hybrid scheme's GPUs per Ulysses group (the other schemes take None)
    ulysses_degree: tuple[int | None, ...] = (None,)
    options: Mapping[str, Any] = field(default_factory=dict)
    standard: str = "algorithm0"

    def combinations(self) -> Iterator[dict[str, Any]]:
        """Every configuration as axis -> value, in row order (a Ulysses degree only with the
        hybrid scheme: the others once, with None)."""
        seen: set[tuple[Any, ...]] = set()
        for values in itertools.product(*(getattr(self, name) for name in CP_AXES)):
            a = dict(zip(CP_AXES, values))
            if a["scheme"] != "hybrid":
                a["ulysses_degree"] = None
            key = tuple(a.values())
            if key not in seen:
                seen.add(key)
                yield a


@dataclass
class ContextParallelSweep:
    """Rows of a context-parallel sweep, two per configuration (standard, tiled), as dicts keyed
    :data:`CP_AXES` then :data:`CP_VALUES`; ``skipped``: why configurations were left out (each
    reason once)."""

    grid: ContextParallelGrid
    rows: list[dict[str, Any]]
    skipped: list[str]


def _plain_number(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


def context_parallel_rows(result: Any) -> list[dict[str, Any]]:
    """The :data:`CP_VALUES` of a :class:`~memmodel.parallel.ParallelResult`, per algorithm:
    the wall time, one GPU's time, the speed-up, the bytes each GPU sends, GPU 0's HBM bytes and
    what bounds the wall time (``link`` or ``compute``), as ``compare --context-parallel`` gives them."""
    from .parallel import link_bound

    return [
        {
            "algorithm": alg.name,
            "predicted_time_s": _plain_number(alg.wall_time_s),
            "single_gpu_time_s": alg.single_gpu_time_s,
            "speedup": alg.speedup,
            "link_bytes": alg.link_bytes,
            "hbm_bytes": _plain_number(alg.traffic.bytes(level="hbm")),
            "bound": "link" if link_bound(alg) else "compute",
        }
        for alg in (result.standard, result.tiled)
    ]


#: the per-row columns a model's layers add up (bytes at every level, work, times)
LAYER_SUMS = tuple(
    c
    for c in SWEEP_COLUMNS
    if c.endswith("_bytes")
    or c in ("flops", "exp_ops", "predicted_time_s", "predicted_time_low_s", "predicted_time_high_s")
)


def layers_summed(parts: list[tuple[SweepResult, int]]) -> SweepResult:
    """One sweep of a model's attention per step from a sweep per kind of layer, each with its
    count: the rows' bytes, work and times are summed, count × each kind's; intensity and the
    standard/tiled ratios follow from the sums; every other column (tiles, bound, kernel) is the
    first kind's. The sweeps must be of one grid's rows in one order (only windows differ)."""
    first, _ = parts[0]
    if any(len(r) != len(first) for r, _ in parts):
        raise ValueError("sweeps of different rows cannot be summed")  # pragma: no cover - programming error
    columns = {k: v.copy() for k, v in first.columns.items()}
    for name in (*LAYER_SUMS, *(c for c in ("kernel_time_s", "host_time_s", CALL_COLUMN) if c in columns)):
        total = sum(np.asarray(r.columns[name], dtype=np.float64) * count for r, count in parts)
        columns[name] = total.astype(first.columns[name].dtype) if first.columns[name].dtype.kind in "iu" else total
    with np.errstate(divide="ignore", invalid="ignore"):
        hbm = np.asarray(columns["hbm_bytes"], dtype=np.float64)
        columns["arithmetic_intensity"] = np.where(hbm > 0, np.asarray(columns["flops"], dtype=np.float64) / hbm, 0.0)
        for ratio, name in (
            ("ratio_hbm_bytes", "hbm_bytes"),
            ("ratio_flops", "flops"),
            ("ratio_predicted_time_s", "predicted_time_s"),
        ):
            col = np.asarray(columns[name], dtype=np.float64)
            std, til = col[0::2], col[1::2]
            r = np.where(til > 0, std / np.where(til > 0, til, 1.0), np.inf)
            columns[ratio] = np.repeat(r, 2)
    columns["window"] = np.full(len(first), -1, dtype=first.columns["window"].dtype)
    notes = list(dict.fromkeys(n for r, _ in parts for n in r.notes))
    caveats = list(dict.fromkeys(c for r, _ in parts for c in r.caveats))
    warnings = list(dict.fromkeys(w for r, _ in parts for w in r.warnings))
    return SweepResult(first.grid, columns, first.categories, notes, caveats, warnings)


def evaluate_context_parallel(
    grid: ContextParallelGrid, profiles: Mapping[str, Profile] | None = None
) -> ContextParallelSweep:
    """Every configuration of ``grid`` through :func:`memmodel.parallel.context_parallel`.

    A configuration the scheme cannot split so (a sequence length the GPUs do not divide, heads
    Ulysses cannot share out) is skipped, its reason said once, while others remain; when none
    remains the first reason is raised. ``profiles`` maps GPU names to loaded profiles (loaded
    by name when missing)."""
    from .hardware import load_profile
    from .parallel import context_parallel

    loaded = dict(profiles or {})
    rows: list[dict[str, Any]] = []
    skipped: dict[str, None] = {}
    for a in grid.combinations():
        if a["gpu"] not in loaded:
            loaded[a["gpu"]] = load_profile(a["gpu"])
        w = Workload(
            n=a["n"],
            d=a["d"],
            batch=a["batch"],
            heads=a["heads"],
            kv_heads=a["kv_heads"],
            dtype=a["dtype"],
            causal=a["causal"],
        )
        try:
            r = context_parallel(
                w,
                loaded[a["gpu"]],
                a["p"],
                a["scheme"],
                impl=a["impl"],
                standard=grid.standard,
                backward=a["backward"],
                ulysses_degree=a["ulysses_degree"],
                **grid.options,
            )
        except WorkloadError as exc:  # this combination cannot be split so: said once, the others go on
            skipped.setdefault(str(exc), None)
            continue
        for values in context_parallel_rows(r):
            rows.append({**a, "kv_heads": int(w.kv_heads_), **values})
    if not rows:
        raise WorkloadError(next(iter(skipped)))
    return ContextParallelSweep(grid, rows, list(skipped))
