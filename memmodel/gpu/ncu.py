"""Nsight Compute: the command line we run and the parsing of its CSV.

We run ``ncu --csv --print-units base --clock-control none --metrics <METRICS>`` over a
Python process that launches a tiny kernel named ``memmodel_begin`` before each case's
measured kernels and ``memmodel_end`` after them; the kernels between belong to the case.

What ncu measures (and how the comparison accounts for it):

* By default (``--cache-control all``) ncu flushes and invalidates the caches before each
  kernel it profiles, so every kernel starts with a cold L2: its reads are compulsory
  DRAM reads, never hits on data a previous kernel left in L2.
* Writes still dirty in L2 when a kernel ends are not counted as DRAM writes of that
  kernel (they are written back later, during the next flush, which ncu does not count).
"""

from __future__ import annotations

import csv
import io
import re
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field

METRICS = (
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "lts__t_bytes.sum",
    "gpu__time_duration.sum",
    # launch statistics (no replay): how many CTAs ran at once
    "launch__grid_size",
    "launch__occupancy_limit_registers",
    "launch__occupancy_limit_shared_mem",
    "launch__waves_per_multiprocessor",
)
#: the kernels ncu profiles of a run whose cases are all of these implementations (the markers and
#: the library's own kernels; ``--kernel-name regex:``): their runners' set-up and checks launch
#: thousands of small kernels (page tables, gathers, float32 references) ncu would replay one by one
NCU_KERNELS = {
    "flashinfer": "BatchDecodeWithPagedKVCache|PrefillWithKVCache|PrefillWithPagedKVCache|MergeStates",
    "flashmla": "MLA",
}
BEGIN = "memmodel_begin"
END = "memmodel_end"
#: byte offsets at which ``validate --ncu --placements K`` places a case's Q, K and V (the first K):
#: the same kernel on the same shapes moves `17–70 %` more or fewer HBM bytes in the H200's
#: capacity knee with its inputs' addresses alone (probe 12), so one placement is one sample.
#: Sub-page and 2 MiB-page shifts, and shifts of a few MiB to tens of MiB.
PLACEMENT_OFFSETS = (
    0,
    64 << 10,
    2 << 20,
    34 << 20,
    (6 << 20) + (192 << 10),
    18 << 20,
    (11 << 20) + (4 << 10),
    50 << 20,
)


def kernel_filter(impls: list[str]) -> str | None:
    """The ``--kernel-name`` regex for a run of cases of ``impls``: None (every kernel) unless all
    of them are in :data:`NCU_KERNELS`."""
    if not impls or any(i not in NCU_KERNELS for i in impls):
        return None
    return "|".join([BEGIN, END, *sorted({NCU_KERNELS[i] for i in impls})])


#: what an extra metric's name looks like (``unit__counter.rollup``, e.g. ``lts__t_sectors_op_red.sum``;
#: ``ncu --query-metrics`` lists a GPU's): letters, digits and underscores, a double underscore after
#: the unit, dots before the rollup and suffixes
METRIC_NAME = re.compile(r"^[a-z][a-z0-9_]*__[a-z0-9_]+(\.[a-z0-9_]+)*$")


def extra_metrics(text: str) -> tuple[str, ...]:
    """``--ncu-metrics`` (comma-separated metric names) as a tuple, each checked against
    :data:`METRIC_NAME`, the ones :data:`METRICS` collects already left out; ValueError naming
    the first that is not a metric name."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise ValueError("no metric names: give one or more, comma-separated (e.g. lts__t_sectors_op_red.sum)")
    for name in names:
        if not METRIC_NAME.match(name):
            raise ValueError(
                f"{name[:60]!r} is not an Nsight Compute metric name (unit__counter.rollup, e.g. "
                "lts__t_sectors_op_red.sum; ncu --query-metrics lists them)"
            )
    return tuple(dict.fromkeys(n for n in names if n not in METRICS))


def command(
    python_args: list[str],
    *,
    cache_control: str = "all",
    kernel_regex: str | None = None,
    metrics: tuple[str, ...] = (),
) -> list[str]:
    """The ncu command line over ``python_args``; ``kernel_regex``: profile only the kernels
    whose function name matches it; ``metrics``: collected beside :data:`METRICS`."""
    return [
        "ncu",
        *(["--kernel-name", f"regex:{kernel_regex}"] if kernel_regex else []),
        "--csv",
        "--print-units",
        "base",
        "--clock-control",
        "none",
        "--cache-control",
        cache_control,
        "--metrics",
        ",".join((*METRICS, *metrics)),
        *python_args,
    ]


@dataclass
class MeasuredKernel:
    """One kernel launch as Nsight Compute traced it: its name and metrics."""

    id: int
    name: str
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def dram_read_bytes(self) -> float:
        return self.metrics.get("dram__bytes_read.sum", 0.0)

    @property
    def dram_write_bytes(self) -> float:
        return self.metrics.get("dram__bytes_write.sum", 0.0)

    @property
    def l2_bytes(self) -> float:
        return self.metrics.get("lts__t_bytes.sum", 0.0)

    @property
    def time_s(self) -> float:
        # gpu__time_duration is in ns with --print-units base ("nsecond")
        return self.metrics.get("gpu__time_duration.sum", 0.0) * 1e-9


class NcuParseError(ValueError):
    pass


def _number(text: str) -> float:
    cleaned = text.replace(",", "").strip()
    if cleaned in ("", "n/a", "N/A"):
        return float("nan")
    return float(cleaned)


def parse_csv(text: str) -> list[MeasuredKernel]:
    """Kernels in launch order from ncu's ``--csv`` output (lines before the header ignored)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise NcuParseError('no ncu CSV header (a line starting with "ID") in the output')
    reader = csv.DictReader(io.StringIO("\n".join(lines[start:])))
    kernels: dict[int, MeasuredKernel] = {}
    for row in reader:
        try:
            kid = int(row["ID"])
            name = row["Kernel Name"]
            metric = row["Metric Name"]
            value = row["Metric Value"]
        except (KeyError, TypeError, ValueError) as exc:
            raise NcuParseError(f"unexpected ncu CSV row: {row!r}") from exc
        k = kernels.setdefault(kid, MeasuredKernel(kid, name))
        try:
            k.metrics[metric] = _number(value)
        except ValueError as exc:
            raise NcuParseError(f"kernel {kid} {metric}: not a number: {value!r}") from exc
    return [kernels[i] for i in sorted(kernels)]


def split_by_marker(kernels: Iterable[MeasuredKernel], case_ids: list[str]) -> dict[str, list[MeasuredKernel]]:
    """The kernels between each begin/end marker pair, under the cases in launch order."""
    groups: list[list[MeasuredKernel]] = []
    current: list[MeasuredKernel] | None = None
    for k in kernels:
        if BEGIN in k.name:
            if current is not None:
                raise NcuParseError(f"kernel {k.id}: a begin marker inside an open case")
            current = []
        elif END in k.name:
            if current is None:
                raise NcuParseError(f"kernel {k.id}: an end marker without a begin marker")
            groups.append(current)
            current = None
        elif current is not None:
            current.append(k)
    if len(groups) != len(case_ids):
        raise NcuParseError(f"found {len(groups)} marked cases in the ncu output for {len(case_ids)} cases run")
    return dict(zip(case_ids, groups))


def split_placements(
    kernels: Iterable[MeasuredKernel], case_ids: list[str], placements: int
) -> dict[str, list[list[MeasuredKernel]]]:
    """The kernels of each case at each placement of its inputs: ``placements`` marked runs per
    case, one after another (``memmodel.gpu.run.profile_pass``)."""
    runs = list(split_by_marker(kernels, [f"{c}#{p}" for c in case_ids for p in range(placements)]).values())
    return {c: runs[i * placements : (i + 1) * placements] for i, c in enumerate(case_ids)}


def median_kernels(runs: list[list[MeasuredKernel]]) -> list[MeasuredKernel]:
    """One run's kernels with each metric the median over ``runs`` (the placements of one case,
    which launch the same kernels in the same order). A kernel that only some placements
    launched is left out: the first run of a process can add a one-off launch (PyTorch's flash
    forward fills an int buffer once: the references of 2026-12-01)."""
    if not runs:
        return []
    common = set.intersection(*({k.name for k in run} for run in runs))
    runs = [[k for k in run if k.name in common] for run in runs]
    first = runs[0]
    for run in runs[1:]:
        if [k.name for k in run] != [k.name for k in first]:
            raise NcuParseError(
                f"the placements of one case launched different kernels ({len(first)} and {len(run)}): not comparable"
            )
    out = []
    for i, k in enumerate(first):
        metrics = {}
        for metric in k.metrics:
            metrics[metric] = statistics.median(run[i].metrics.get(metric, float("nan")) for run in runs)
        out.append(MeasuredKernel(k.id, k.name, metrics))
    return out
