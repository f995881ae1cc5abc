"""``memmodel roofline``: the hierarchical roofline of one or more GPUs, with a workload's kernels on it."""

from __future__ import annotations

from typing import Any

import click

from .options import (
    WorkloadCommand,
    build_workload,
    check_outputs,
    force_option,
    format_option,
    gpu_list_option,
    model_options,
    option,
    plot_option,
    pop_model_options,
    refuse_same_names,
    workload_options,
)


@click.command("roofline", cls=WorkloadCommand)
@workload_options(n=4096, d=768)
@gpu_list_option(" Several GPUs share one chart.")
@model_options
@option(
    "--link",
    is_flag=True,
    help="Add the link to another GPU (the profile's interconnect, per direction) as a memory roof: where "
    "context parallelism's FLOPs per byte sent cross it, the messages hide behind the compute.",
)
@plot_option
@force_option
@format_option(
    json="JSON on stdout (memmodel.roofline/1: ceilings, ridge points and kernel points per GPU)",
    csv="CSV on stdout, one row per ceiling, ridge point or kernel point",
)
def roofline_cmd(*, gpu: tuple[str, ...], plot: str | None, force: bool, fmt: str, link: bool, **kw: Any) -> None:
    """Hierarchical roofline: memory roofs (HBM, L2, SRAM), compute roofs (FP32, TF32,
    FP16/BF16, FP8, exp unit), their ridge points, and the standard and tiled kernels of a
    workload at their arithmetic intensity per level, with predicted performance and time.

    --gpu takes several GPUs (--gpu a100,h100-sxm) to compare them on one chart.

    Example: memmodel roofline --gpu a100,h100-sxm --n 4096 --d 64 --dtype fp16 --plot roofline.png
    """
    from .. import compare
    from ..hardware import DEFAULT_GPU, load_profile
    from ..roofline import roofline
    from .compare import check_comparisons

    check_outputs(force=force, plot=plot)
    from ..options import options_for

    workload = build_workload(kw, default_d=768)
    impl, opts = pop_model_options(kw)
    comparisons = []
    for spec in gpu or (DEFAULT_GPU,):
        profile = load_profile(spec)
        comparisons.append(compare(workload, profile, options_for(impl, workload, profile, **opts)))
    refuse_same_names([c.profile for c in comparisons], "roofline")
    notes = check_comparisons(comparisons)
    for c in comparisons:  # a mode the profile has no figures for: one line, before any output
        c.standard.time_s(c.options.timing), c.tiled.time_s(c.options.timing)
    rooflines = [roofline(c.profile, c, link=link) for c in comparisons]
    from . import terminal

    if fmt == "json":
        from ..report.roofline import roofline_to_dict

        terminal.print_json(roofline_to_dict(rooflines))
    elif fmt == "csv":
        from ..report.roofline import ROOFLINE_CSV_COLUMNS, roofline_csv_rows

        terminal.print_csv(ROOFLINE_CSV_COLUMNS, roofline_csv_rows(rooflines))
    else:
        _print_table(rooflines)
    if plot:
        from ..report.roofline import roofline_plot

        roofline_plot(rooflines, plot, force=force)
        terminal.note(f"wrote {plot}")
    for line in notes:
        terminal.note(line)
    if len(comparisons) == 1:
        from .compare import timer_note

        timer_note(comparisons[0].tiled.host_times, comparisons[0].options.timing)


def _print_table(rooflines: list[Any]) -> None:
    from ..report.compare import workload_summary
    from ..report.textchart import roofline_chart
    from ..roofline import LEVEL_LABELS
    from ..traffic.ledger import LEVELS
    from ..units import format_bandwidth, format_rate, format_time
    from . import terminal
    from .compare import timing_header

    con = terminal.console()
    gpus = " vs ".join(f"{r.profile.full_name} ({r.profile.name})" for r in rooflines)
    timing = rooflines[0].comparison.options.timing
    con.print(
        f"[bold]Roofline[/] · {terminal.escape(gpus)} · "
        f"{terminal.escape(workload_summary(rooflines[0].comparison) + timing_header(timing))}",
        soft_wrap=True,
    )

    # Ceilings: one row per roof, one column per GPU.
    names: list[tuple[str, str, str]] = []
    for r in rooflines:
        for c in r.ceilings:
            if (c.name, c.kind, c.label) not in names:
                names.append((c.name, c.kind, c.label))
    rows = []
    for name, kind, label in names:
        cells = []
        for r in rooflines:
            try:
                c = r.ceiling(name)
            except KeyError:
                cells.append("—")
                continue
            if c.unit == "B/s":
                cells.append(format_bandwidth(c.value))
            elif c.unit == "exp/s":
                cells.append(format_rate(c.value, "op/s"))
            else:
                cells.append(format_rate(c.value))
        rows.append((label, kind, *cells))
    con.print()
    con.print("[bold]Ceilings[/]")
    con.print(
        terminal.table(
            None,
            [("roof", "left"), ("kind", "left"), *((r.profile.name, "right") for r in rooflines)],
            rows,
        )
    )

    # Ridge points: rows (GPU, memory level), columns compute roofs.
    computes: list[str] = []
    for r in rooflines:
        for c in r.compute_ceilings:
            if c.name not in computes:
                computes.append(c.name)
    rows = []
    for r in rooflines:
        for m in r.memory_ceilings:
            cells = []
            for name in computes:
                try:
                    cells.append(f"{r.ridge(m.name, name):.1f}")
                except KeyError:
                    cells.append("—")
            rows.append(((r.profile.name,) if len(rooflines) > 1 else ()) + (LEVEL_LABELS[m.name], *cells))
    headers = [("exp/B" if name == "exp" else name, "right") for name in computes]
    con.print()
    con.print(
        "[bold]Ridge points[/] (FLOP/B at which a memory roof meets a compute roof; exp/B for the exp unit)",
        soft_wrap=True,
    )
    con.print(
        terminal.table(
            None,
            [*((("gpu", "left"),) if len(rooflines) > 1 else ()), ("memory", "left"), *headers],
            rows,
        )
    )

    con.print()
    con.print(terminal.plain(roofline_chart(rooflines, width=min(terminal.width(), 80))))

    # Kernel points.
    rows = []
    for r in rooflines:
        for p in r.points:
            one = sum(1 for q in r.points if q.algorithm == "tiled") == 2
            if p.is_total and p.algorithm == "tiled" and one and timing == "kernel":
                continue  # the tiled algorithm is one kernel: its total repeats it
            intensities = [f"{p.intensity[lv]:.1f}" if p.intensity[lv] is not None else "—" for lv in LEVELS]
            label = p.kernel if timing == "kernel" else f"{p.kernel}, {timing}"
            kernel = terminal.markup(f"[dim]{terminal.escape(label)}[/]") if p.is_total else p.kernel
            rows.append(
                ((r.profile.name,) if len(rooflines) > 1 else ())
                + (
                    p.algorithm if p.algorithm == "standard" else f"tiled ({p.variant})",
                    kernel,
                    *intensities,
                    format_rate(p.performance_flops_per_s),
                    format_time(p.time_s),
                    f"{p.bound} ({_roof_label(r, p.roof)})" if p.bound != p.roof else _roof_label(r, p.roof),
                )
            )
        if len(rooflines) > 1:
            rows.append(None)
    if rows and rows[-1] is None:
        rows.pop()
    con.print()
    con.print(
        "[bold]Kernels[/] (intensity I in FLOP/B per level; — where the ledger has no bytes at that level)",
        soft_wrap=True,
    )
    con.print(
        terminal.table(
            None,
            [
                *((("gpu", "left"),) if len(rooflines) > 1 else ()),
                ("algorithm", "left"),
                ("kernel", "left"),
                *((f"I {LEVEL_LABELS[lv]}", "right") for lv in LEVELS),
                ("attainable", "right"),
                ("time", "right"),
                ("bound by", "left"),
            ],
            rows,
        )
    )
    for r in rooflines:
        for line in r.comparison.warnings:
            con.print(f"[yellow]warning:[/] {line}", soft_wrap=True)


def _roof_label(r: Any, name: str) -> str:
    """Short roof names for the table: HBM, L2, SRAM, FP32, FP16/BF16, EXP ..."""
    from ..roofline import LEVEL_LABELS

    return LEVEL_LABELS.get(name, name.upper())
