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


def write_json(result: SweepResult, stream: TextIO, progress: Callable[[int], None] | None = None) -> None:
    """One JSON array of row objects, keyed as :func:`write_jsonl`'s (written row by row)."""
    dumps = json.JSONEncoder(allow_nan=False, separators=(", ", ": ")).encode
    stream.write("[")
    first = True
    for start in range(0, len(result), BATCH):
        lists = result.column_lists(start, start + BATCH)
        text = ",\n".join(dumps(dict(zip(SWEEP_COLUMNS, values))) for values in zip(*lists))
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
}
#: Keys that only the tiled rows carry.
TILED_KEYS = frozenset({"variant", "implementation", "block_q", "block_kv", "splits", "ctas_per_sm"})
#: Shown only when the sweep varies them (they follow from the others otherwise).
SWEPT_ONLY = {"block_q": "block_q", "block_kv": "block_kv", "splits": "splits", "ctas_per_sm": "ctas_per_sm"}
#: The order of columns that vary: options first, then the integer axes (N last, as rows nest).
COLUMN_ORDER = (
    "gpu",
    "dtype",
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
    lists = {k: values[k].tolist() for k in varying}
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


__all__ = ["AXES", "BATCH", "describe", "table_view", "write_csv", "write_json", "write_jsonl"]
