"""Views of a ``memmodel validate`` record: a markdown summary and a predicted-vs-measured plot."""

from __future__ import annotations

from typing import Any

from ..scoring import kernel_time_errors, mode_time_errors, step_time_error, time_errors
from ..units import format_bytes, format_percent, format_time

#: The shaded band around the plot's diagonal: predictions within this share of the measurement.
BAND = 0.15


def _rate(row: dict[str, Any], key: str, share: str, unit: str) -> str:
    from ..units import format_rate

    if key not in row:
        return ""
    return f"{format_rate(row[key], unit)} ({row[share] * 100:.0f} %)"


#: The columns of :func:`headline`: a record, its cases measured (status ok), and the model's errors.
HEADLINE_COLUMNS = (
    "record",
    "cases",
    "HBM bytes: median / max error",
    "kernel time: median / max error",
    "training step: median / max error",
)


def _median_max(st: dict[str, Any] | None) -> str:
    if not st:
        return "—"
    return f"{st['median_abs'] * 100:.1f}% / {st['max_abs'] * 100:.1f}% ({st['n']})"


#: columns :func:`headline` adds where a record measured them: summary key -> column
MODE_COLUMNS = {
    "call_time": "call time: median / max error",
    "graph_time": "graph time: median / max error",
}


def headline_columns(records: list[tuple[str, dict[str, Any]]]) -> tuple[str, ...]:
    """:data:`HEADLINE_COLUMNS`, and a column of :data:`MODE_COLUMNS` where a record has it."""
    extra = tuple(label for key, label in MODE_COLUMNS.items() if any(s.get(key) for _, s in records))
    return HEADLINE_COLUMNS + extra


def headline_rows(records: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, ...]]:
    """One row per (name, summary) of a rescored record: the cells of :func:`headline_columns`
    (errors as median / max of their absolute values, the count in brackets)."""
    modes = [key for key, label in MODE_COLUMNS.items() if label in headline_columns(records)]
    return [
        (
            name,
            str(s.get("cases", {}).get("ok", 0)),
            _median_max(s["hbm_bytes"].get("model")),
            _median_max(s.get("time")),
            _median_max(s.get("step_time")),
            *(_median_max(s.get(key)) for key in modes),
        )
        for name, s in records
    ]


def headline(records: list[tuple[str, dict[str, Any]]]) -> str:
    """A markdown table of several rescored records, a row each (``validate --rescore A B ...``)."""
    columns = headline_columns(records)
    lines = ["| " + " | ".join(columns) + " |", "| --- |" + " --- |" * (len(columns) - 1)]
    lines += ["| " + " | ".join(row) + " |" for row in headline_rows(records)]
    return "\n".join(lines) + "\n"


def kernel_list_line(s: dict[str, Any]) -> str | None:
    """The summary's kernel-list counts in a sentence, or None where no trace case has them."""
    k = s.get("kernel_list")
    if not k or not k.get("cases"):
        return None
    return (
        f"Traced kernel lists ({k['cases']} cases): {k['matched']} of {k['model_launches']} modelled launches "
        f"matched in launch order by class, {k['missing']} missing; {k['extra']} of {k['measured_kernels']} "
        f"measured kernels not in the model's list ({k['extra_memory_ops']} of them memsets and copies)."
    )


def markdown(data: dict[str, Any], *, brief: bool = False, stats: bool = False) -> str:
    """The record as markdown; ``brief``: the summary and the bytes table only (for the docs);
    ``stats``: the error statistics and speed-ups only (for the README)."""
    s = data["summary"]
    brief = brief or stats
    lines = (
        []
        if brief
        else [
            f"# Validation on {data['device']}",
            "",
            f"memmodel {data['memmodel_version']}, profile `{data['profile']['name']}`, started {data['started']}"
            + (f", rescored {data['rescored']}" if data.get("rescored") else "")
            + ".",
            "",
            f"Command: `{data['command']}`",
            "",
            "## Summary",
            "",
        ]
    )
    lines += [
        "| quantity | median abs error | max abs error | kernels |",
        "| --- | --- | --- | --- |",
    ]
    for label, st in (
        ("HBM bytes, memmodel", s["hbm_bytes"].get("model")),
        ("HBM reads only, memmodel", s["hbm_bytes"].get("model_reads")),
        ("HBM bytes, paper's formula (no L2)", s["hbm_bytes"].get("paper")),
        ("HBM bytes, compulsory (each tensor once)", s["hbm_bytes"].get("compulsory")),
        ("HBM bytes, backward kernels, memmodel", s["hbm_bytes"].get("backward_kernels")),
        ("HBM bytes, memmodel, against each placement", s["hbm_bytes"].get("placements")),
        ("HBM bytes, spread over the placements (measured)", s["hbm_bytes"].get("placement_spread")),
        ("kernel time, memmodel", s.get("time")),
        ("training step time (forward + backward), memmodel", s.get("step_time")),
        ("time per profiled kernel (CUPTI), memmodel", s.get("kernel_time")),
        ("call time (one synchronised call, CUDA events), memmodel", s.get("call_time")),
        ("queued time per call (no synchronisation), memmodel", s.get("queued_time")),
        ("CUDA graph replay time, memmodel", s.get("graph_time")),
        ("time per traced kernel (CUPTI), memmodel", s.get("traced_kernel_time")),
    ):
        if st:
            lines.append(f"| {label} | {st['median_abs'] * 100:.1f}% | {st['max_abs'] * 100:.1f}% | {st['n']} |")
    listed = kernel_list_line(s)
    if listed:
        lines += ["", listed]
    if s["hbm_bytes"].get("placements"):
        n = s["hbm_bytes"]["placement_spread"]["n"]
        lines += [
            "",
            f"Each case profiled with its inputs at {data.get('ncu', {}).get('placements')} places in memory; "
            f"errors are against the median, and {s['hbm_bytes']['within_placements']} of {n} predictions "
            "lie within the measured range.",
        ]
    if s.get("speedups"):
        lines += ["", "| workload | FlashAttention speed-up, predicted | measured |", "| --- | --- | --- |"]
        lines += [f"| {sp['workload']} | {sp['predicted']:.2f}× | {sp['measured']:.2f}× |" for sp in s["speedups"]]
    if stats:
        return "\n".join(lines) + "\n"
    lines += (
        []
        if brief
        else [
            "",
            "## HBM bytes per kernel (Nsight Compute, caches flushed before each kernel)",
            "",
            "Errors are (predicted − measured) / measured, with measured writes credited up to the L2 size "
            "(lines still dirty in L2 when a kernel ends are not counted by Nsight Compute).",
        ]
    )
    placed = bool(s["hbm_bytes"].get("placements"))
    lines += [
        "",
        "| case | kernel | predicted | measured read + write | error | reads | paper | compulsory | CTAs/SM |"
        + (" error at each placement |" if placed else ""),
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |" + (" --- |" if placed else ""),
    ]
    for e in data["cases"]:
        for b in e.get("bytes", []):
            pred = b["predicted_hbm_read_bytes"] + b["predicted_hbm_write_bytes"]
            each = b.get("placement_errors") or []
            lines.append(
                f"| {e['case']['id']} | {b['kernel']} | {format_bytes(pred)} | "
                f"{format_bytes(b['measured_hbm_read_bytes'])} + {format_bytes(b['measured_hbm_write_bytes'])} | "
                f"{format_percent(b['error'])} | {format_percent(b['read_error'])} | {format_percent(b['paper_error'])} | {format_percent(b['compulsory_error'])} | "
                f"{e.get('measured_ctas_per_sm') or ''} |"
                + (
                    f" {format_percent(min(each))} … {format_percent(max(each))} |"
                    if placed and each
                    else " |"
                    if placed
                    else ""
                )
            )
    if brief:
        return "\n".join(lines) + "\n"
    lines += _training_sections(data)
    lines += _mode_sections(data)
    lines += _trace_sections(data)
    lines += [
        "",
        "## Time per kernel (CUDA events, median of repetitions)",
        "",
        "| case | step | predicted | measured | error | HBM achieved | compute achieved | bound |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for e in data["cases"]:
        if e.get("status") != "ok":
            lines.append(f"| {e['case']['id']} | {e.get('status')} | {e.get('reason', '')} | | | | | |")
            continue
        for t in time_errors(e):
            lines.append(
                f"| {e['case']['id']} | {t['step']} | {format_time(t['predicted_s'])} | {format_time(t['measured_s'])} | "
                f"{format_percent(t['error'])} | {_rate(t, 'achieved_hbm_bytes_per_s', 'hbm_share', 'B/s')} | "
                f"{_rate(t, 'achieved_flops_per_s', 'flops_share', 'FLOP/s')} | {e['predicted'].get('bound', '')} |"
            )
    return "\n".join(lines) + "\n"


def _cell(name: str) -> str:
    """A kernel name shortened for a markdown table cell."""
    return name[:100].replace("|", "\\|")


def _training_sections(data: dict[str, Any]) -> list[str]:
    """The training step's own tables: whole-step time, gradient checks, the time of every
    profiled kernel against the model's, and the measured kernels the model does not describe."""
    cases = [e for e in data["cases"] if e["case"].get("backward") and e["case"].get("kind") != "trace"]
    if not cases:
        return []
    lines = [
        "",
        "## Training step (forward + backward)",
        "",
        "| case | predicted | measured | error | dQ, dK, dV error vs float32 | dropout probe |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for e in cases:
        st = step_time_error(e)
        if st is None:
            lines.append(f"| {e['case']['id']} | {e.get('status')} | {e.get('reason', '')} | | | |")
            continue
        grads = e["timing"].get("grad_errors") or {}
        probe = e["timing"].get("dropout_probe") or {}
        lines.append(
            f"| {e['case']['id']} | {format_time(st['predicted_s'])} | {format_time(st['measured_s'])} | "
            f"{format_percent(st['error'])} | {', '.join(f'{v:.1e}' for v in grads.values())} | "
            f"{', '.join(f'{k} {v:.1e}' for k, v in probe.items())} |"
        )
    lines += [
        "",
        "### Time per kernel (CUPTI durations through torch.profiler, median of 3 runs)",
        "",
        "Predicted is the kernel's own duration: its time in a queue less the launch overhead (its step's",
        "time, above, holds both).",
        "",
        "| case | model kernel | measured kernel | predicted | measured | error |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for e in cases:
        for r in kernel_time_errors(e):
            name = _cell(r["measured_kernel"])
            if r["kernel"] is None:
                lines.append(f"| {e['case']['id']} | (not modelled) | {name} | | {format_time(r['measured_s'])} | |")
            else:
                lines.append(
                    f"| {e['case']['id']} | {r['kernel']} | {name} | {format_time(r['predicted_s'])} | "
                    f"{format_time(r['measured_s'])} | {format_percent(r['error'])} |"
                )
    missing = [(e["case"]["id"], k) for e in cases for k in e.get("unmodelled_kernels", [])]
    if missing:
        lines += [
            "",
            "### Measured kernels the model does not describe (Nsight Compute)",
            "",
            "| case | kernel | HBM read + write |",
            "| --- | --- | --- |",
        ]
        for cid, k in missing:
            kname = _cell(k["name"])
            lines.append(
                f"| {cid} | {kname} | {format_bytes(k['dram_read_bytes'])} + {format_bytes(k['dram_write_bytes'])} |"
            )
    return lines


#: how the reports name the timing modes a record measures beside the kernel time
MODE_LABELS = {
    "call": "one call (synchronised)",
    "queued": "queued, per call",
    "graph": "CUDA graph replay",
}


def _mode_sections(data: dict[str, Any]) -> list[str]:
    """The times a user's timer sees (call, queued, graph) against the host model's, per case,
    and the timings that failed (a CUDA graph a library cannot be captured in)."""
    rows = [(e, r) for e in data["cases"] for r in mode_time_errors(e)]
    failed = [
        (e["case"]["id"], mode, e["timing"][f"{mode}_error"])
        for e in data["cases"]
        if e.get("status") == "ok" and "timing" in e
        for mode in MODE_LABELS
        if e["timing"].get(f"{mode}_error")
    ]
    if not rows and not failed:
        return []
    lines = [
        "",
        "## Time per call (CUDA events around one call, calls queued, a CUDA graph's replay)",
        "",
        "| case | timing | predicted | measured | error |",
        "| --- | --- | --- | --- | --- |",
    ]
    for e, r in rows:
        lines.append(
            f"| {e['case']['id']} | {MODE_LABELS[r['mode']]} | {format_time(r['predicted_s'])} | "
            f"{format_time(r['measured_s'])} | {format_percent(r['error'])} |"
        )
    for cid, mode, why in failed:
        lines.append(f"| {cid} | {MODE_LABELS[mode]} | | not measured: {_cell(str(why))} | |")
    return lines


def _trace_sections(data: dict[str, Any]) -> list[str]:
    """Each traced function's kernels: the model's, in launch order, against the profiler's
    (aligned by class), and the measured kernels the model does not list."""
    from ..trace_scoring import kernel_match, trace_kernel_rows

    cases = [e for e in data["cases"] if e["case"].get("kind") == "trace"]
    if not cases:
        return []
    lines = [
        "",
        "## Traced functions (memmodel trace against the profiler's kernels)",
        "",
        "Predicted is each kernel's own duration (its time less the launch overhead), against CUPTI's.",
    ]
    for e in cases:
        lines += ["", f"### {e['case']['id']}", "", f"`{e['case'].get('spec', '')}`", ""]
        if e.get("status") != "ok":
            lines.append(f"{e.get('status')}: {e.get('reason') or e.get('refused') or ''}")
            continue
        if e.get("source_changed"):
            lines += ["The traced file has changed since it was measured.", ""]
        match = kernel_match(e)
        if match is None:
            lines.append("No profiled kernels to align.")
            continue
        lines += [
            f"{match['matched']} of {match['model_launches']} modelled launches matched, {match['missing']} missing; "
            f"{match['extra']} of {match['measured_kernels']} measured kernels not in the model's list.",
            "",
            "| model kernel | class | measured kernel | predicted | measured | error |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for r in trace_kernel_rows(e):
            measured = format_time(r["measured_s"]) if r.get("measured_s") is not None else ""
            shown = _cell(r["measured_kernel"]) if r.get("measured_kernel") else "(missing)"
            if r.get("launches", 1) > 1:
                shown += f" (x{r['matched_launches']} of {r['launches']} launches)"
            if r["kernel"] is None:
                lines.append(f"| (not modelled) | {r['class']} | {shown} | | {measured} | |")
            else:
                err = format_percent(r["error"]) if r.get("error") is not None else ""
                lines.append(
                    f"| {r['kernel']} | {r['class']} | {shown} | {format_time(r['predicted_s'])} | {measured} | {err} |"
                )
    return lines


def plot(data: dict[str, Any], path: str, *, force: bool = False) -> None:
    """Two log-log panels: HBM bytes and kernel time, predicted against measured."""
    from .plots import require_matplotlib

    require_matplotlib()
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 5), dpi=100)
    ax1, ax2 = fig.subplots(1, 2)
    markers = {"standard": "s", "sdpa-flash": "o", "sdpa-cudnn": "D", "sdpa-efficient": "v", "triton": "^"}
    seen: set[str] = set()
    for e in data["cases"]:
        impl = e["case"]["impl"]
        for b in e.get("bytes", []):
            meas = b["measured_hbm_read_bytes"] + b["measured_hbm_write_bytes"]
            pred = b["predicted_hbm_read_bytes"] + b["predicted_hbm_write_bytes"]
            paper = b["paper_hbm_bytes"]
            label = impl if impl not in seen else None
            seen.add(impl)
            ax1.scatter(meas, pred, marker=markers.get(impl, "o"), facecolors="none", edgecolors="k", label=label)
            ax1.scatter(
                meas, paper, marker="x", color="0.6", label="paper's formula (no L2)" if "paper" not in seen else None
            )
            seen.add("paper")
    for e in data["cases"]:
        impl = e["case"]["impl"]
        for t in time_errors(e):
            ax2.scatter(
                t["measured_s"], t["predicted_s"], marker=markers.get(impl, "o"), facecolors="none", edgecolors="k"
            )
    for ax, unit in ((ax1, "HBM bytes"), (ax2, "kernel time (s)")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        lo, hi = ax.get_xlim()
        lo2, hi2 = ax.get_ylim()
        lo, hi = min(lo, lo2), max(hi, hi2)
        ax.plot([lo, hi], [lo, hi], color="0.3", lw=0.8)
        ax.fill_between(
            [lo, hi],
            [lo * (1 - BAND), hi * (1 - BAND)],
            [lo * (1 + BAND), hi * (1 + BAND)],
            color="0.9",
            zorder=0,
            label=f"±{BAND * 100:.0f}%" if ax is ax1 else None,
        )
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_xlabel(f"measured {unit}")
        ax.set_ylabel(f"predicted {unit}")
        ax.grid(True, which="both", lw=0.3)
    ax1.set_title("HBM bytes per kernel (Nsight Compute)")
    ax2.set_title("Time per kernel (CUDA events)")
    ax1.legend(fontsize=8, loc="upper left")
    fig.suptitle(f"memmodel predictions on {data['device']} (profile {data['profile']['name']})")
    fig.tight_layout()
    from .plots import save

    save(fig, path, force=force)
