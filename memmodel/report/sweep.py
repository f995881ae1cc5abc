"""CSV, JSON Lines and table views of a :class:`~memmodel.sweep.SweepResult`. No rich, no click."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from typing import Any, TextIO

import numpy as np

from ..sweep import AXES, SWEEP_COLUMNS, SweepResult

#: Rows written per batch (progress is reported per batch).
BATCH = 65_536


def write_csv(result: SweepResult, stream: TextIO, progress: Callable[[int], None] | None = None) -> None:
    """A header of :data:`~memmodel.sweep.SWEEP_COLUMNS`, then one line per row (blanks empty)."""
    writer = csv.writer(stream, lineterminator="\n")
    writer.writerow(SWEEP_COLUMNS)
    for start in range(0, len(result), BATCH):
        lists = result.column_lists(start, start + BATCH)
        writer.writerows(zip(*lists))
        if progress is not None:
            progress(len(lists[0]))


def write_jsonl(result: SweepResult, stream: TextIO, progress: Callable[[int], None] | None = None) -> None:
    """One JSON object per row, keyed by :data:`~memmodel.sweep.SWEEP_COLUMNS` (blanks are null)."""
    dumps = json.JSONEncoder(allow_nan=False, separators=(", ", ": ")).encode
    for start in range(0, len(result), BATCH):
        lists = result.column_lists(start, start + BATCH)
        stream.write("".join(dumps(dict(zip(SWEEP_COLUMNS, values))) + "\n" for values in zip(*lists)))
        if progress is not None:
            progress(len(lists[0]))


def table_view(result: SweepResult) -> tuple[dict[str, str], list[str], list[list[Any]]]:
    """The sweep for people: one row per workload, standard and tiled side by side.

    Returns (constants, headers, rows): options with one value across the sweep go into
    ``constants`` (shown once above the table) instead of a column each. Cells are raw
    values; the CLI formats them.
    """
    cols = result.columns
    std = slice(0, None, 2)
    til = slice(1, None, 2)
    keys = ["gpu", "dtype", "batch", "heads", "kv_heads", "d", "n"]
    varying = []
    constants = {}
    for key in keys:
        values = result.column(key)[std]
        if len(values) and np.all(values == values[0]):
            constants[key] = str(values[0])
        else:
            varying.append(key)
    variants = set(result.column("variant")[til].tolist())
    constants["tiled"] = ",".join(sorted(variants))
    if "kv_heads" in constants and constants.get("heads") == constants["kv_heads"]:
        del constants["kv_heads"]
    headers = [*varying, "HBM std", "HBM tiled", "s/t", "time std", "time tiled", "s/t", "bound s/t"]
    rows = []
    lists = {k: result.column(k).tolist() for k in varying}
    hbm = cols["hbm_bytes"].tolist()
    time = cols["predicted_time_s"].tolist()
    bound = result.column("bound").tolist()
    ratio_b = cols["ratio_hbm_bytes"].tolist()
    ratio_t = cols["ratio_predicted_time_s"].tolist()
    for i in range(0, len(result), 2):
        rows.append(
            [
                *(lists[k][i] for k in varying),
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


__all__ = ["AXES", "BATCH", "table_view", "write_csv", "write_jsonl"]
