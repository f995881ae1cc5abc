"""JSON and CSV views of rooflines (schema ``memmodel.roofline/1``) and the roofline chart. No rich, no click."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from typing import Any

from .. import __version__
from ..roofline import ASSUMPTIONS, LEVEL_LABELS, ROOFLINE_SCHEMA, Roofline
from ..traffic.ledger import LEVELS
from . import plots
from .compare import caveats


def roofline_to_dict(rooflines: Sequence[Roofline]) -> dict[str, Any]:
    """One object: the workload, and per GPU its ceilings, ridge points and kernel points."""
    first = rooflines[0].comparison
    gpus = []
    for r in rooflines:
        p = r.profile
        gpus.append(
            {
                "hardware": {
                    "name": p.name,
                    "full_name": p.full_name,
                    "origin": p.origin,
                    "path": str(p.path) if p.path else None,
                },
                "ceilings": [c.to_dict() for c in r.ceilings],
                "ridge_points": [x.to_dict() for x in r.ridge_points],
                "points": [x.to_dict() for x in r.points],
                "warnings": list(r.comparison.warnings) if r.comparison else [],
                "caveats": caveats(r.comparison) if r.comparison else [],
            }
        )
    assumptions = list(ASSUMPTIONS)
    for r in rooflines:
        for line in r.comparison.assumptions if r.comparison else ():
            if line not in assumptions:
                assumptions.append(line)
    return {
        "schema": ROOFLINE_SCHEMA,
        "memmodel_version": __version__,
        "timing": first.options.timing if first else "kernel",
        "workload": first.workload.to_dict() if first else None,
        "tiled": first.tiled.traffic.variant if first else None,
        "options": dict(vars(first.options)) if first else None,
        "gpus": gpus,
        "assumptions": assumptions,
    }


#: Columns of ``memmodel roofline --format csv``. Each row is one record: a ``ceiling``
#: (name, kind, value, unit), a ``ridge`` point (memory, compute, value in FLOP/B or exp/B,
#: unit) or a kernel ``point`` (algorithm ... roof). Cells that do not apply are empty.
#: Stable: new columns are appended, never renamed.
ROOFLINE_CSV_COLUMNS = (
    "record",
    "gpu",
    "name",
    "kind",
    "value",
    "unit",
    "memory",
    "compute",
    "algorithm",
    "variant",
    "kernel",
    "flops",
    "exp_ops",
    *(f"{level}_bytes" for level in LEVELS),
    *(f"{level}_intensity" for level in LEVELS),
    "predicted_time_s",
    "attainable_flops_per_s",
    "bound",
    "roof",
)


def roofline_csv_rows(rooflines: Sequence[Roofline]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for r in rooflines:
        gpu = r.profile.name
        for c in r.ceilings:
            rows.append(
                {"record": "ceiling", "gpu": gpu, "name": c.name, "kind": c.kind, "value": c.value, "unit": c.unit}
            )
        for x in r.ridge_points:
            rows.append(
                {
                    "record": "ridge",
                    "gpu": gpu,
                    "name": f"{x.memory}/{x.compute}",
                    "value": x.intensity,
                    "unit": x.unit,
                    "memory": x.memory,
                    "compute": x.compute,
                }
            )
        for p in r.points:
            row: dict[str, Any] = {
                "record": "point",
                "gpu": gpu,
                "name": f"{p.algorithm}/{p.kernel}",
                "algorithm": p.algorithm,
                "variant": p.variant,
                "kernel": p.kernel,
                "flops": p.flops,
                "exp_ops": p.exp_ops,
                "predicted_time_s": p.time_s,
                "attainable_flops_per_s": p.performance_flops_per_s,
                "bound": p.bound,
                "roof": p.roof,
            }
            for level in LEVELS:
                row[f"{level}_bytes"] = p.bytes.get(level, 0)
                intensity = p.intensity.get(level)
                row[f"{level}_intensity"] = "" if intensity is None else intensity
            rows.append(row)
    return rows


# ---------------------------------------------------------------------------------------
# The roofline chart (matplotlib: the ``plot`` extra, imported when drawing)


#: Marker fill per memory level on the roofline: the intensity a point is placed at.
FILLS = {"hbm": "full", "l2": "bottom", "sram": "none"}


def roofline_plot(rooflines: Sequence[Roofline], path: str, *, force: bool = False) -> None:
    """Roofs, ridge points and kernels of one or more GPUs on one log–log chart."""
    plots.check_plot_path(path)
    from matplotlib.lines import Line2D

    fig = plots.figure(9.0, 6.6)
    ax = fig.add_axes((0.085, 0.16, 0.66, 0.76))
    movable: list[tuple[str, Any]] = []  # labels moved apart before saving (plots.declutter)
    margin_labels: list[tuple[str, Any]] = []
    obstacles: list[tuple[Any, float, float, float]] = []  # markers labels keep off: (axes, x, y, size)
    flop_roofs = [[c for c in r.compute_ceilings if c.unit == "FLOP/s"] for r in rooflines]
    # kernels that do no arithmetic (a fill, a copy) have no place on a log-scaled FLOP/s axis
    points = [p for r in rooflines for p in r.points if _drawable(p)]
    unplaced = sorted({p.kernel for r in rooflines for p in r.points if not p.is_total and not _drawable(p)})
    xs = [rp.intensity for r in rooflines for rp in r.ridge_points if rp.unit == "FLOP/B"]
    xs += [i for p in points for i in p.intensity.values() if i]
    ys = [c.value for roofs in flop_roofs for c in roofs] + [p.performance_flops_per_s for p in points]
    x_lo, x_hi = 10 ** math.floor(math.log10(min(xs) / 1.5)), 10 ** math.ceil(math.log10(max(xs) * 1.3))
    y_hi = 10 ** math.ceil(math.log10(max(ys) * 1.6))
    y_lo = max(10 ** math.floor(math.log10(min(ys) / 2)), y_hi / 1e6)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(x_lo, x_hi)
    ax.set_ylim(y_lo, y_hi)
    ax.xaxis.set_major_formatter(plots.log_formatter())
    ax.yaxis.set_major_formatter(plots.log_formatter())
    ax.grid(True, which="major", color="#dddddd", linewidth=0.6)
    ax.set_axisbelow(True)
    ax.set_xlabel("Arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("Performance (FLOP/s)")
    several = len(rooflines) > 1
    mem_width = {"hbm": 2.2, "l2": 1.3, "sram": 1.0}
    placed_labels: list[tuple[float, float, float, float]] = []
    # every memory roof as (log10 x from, log10 x to, log10 bandwidth), for label placement
    roof_lines = [
        (math.log10(max(x_lo, y_lo / m.value)), math.log10(max(c.value for c in roofs) / m.value), math.log10(m.value))
        for r, roofs in zip(rooflines, flop_roofs)
        for m in r.memory_ceilings
    ]
    ridges = [
        (c.value / m.value, c.value)
        for r, roofs in zip(rooflines, flop_roofs)
        for m in r.memory_ceilings
        if m.name == "hbm"
        for c in roofs
    ]
    for g, (r, roofs) in enumerate(zip(rooflines, flop_roofs)):
        colour, style = plots.COLOURS[g % len(plots.COLOURS)], plots.LINESTYLES[g % len(plots.LINESTYLES)]
        top = max(c.value for c in roofs)
        fastest = max(m.value for m in r.memory_ceilings)
        prefix = f"{r.profile.name}: " if several else ""
        for c in roofs:
            x0 = c.value / fastest
            ax.plot(
                [x0, x_hi], [c.value, c.value], color=colour, linestyle=style, linewidth=1.6 if c.value == top else 1.0
            )
            # named in the right margin, level with the roof: once for every GPU that shares it
            sharing = [q.profile.name for q, qs in zip(rooflines, flop_roofs) if any(_same(c, x) for x in qs)]
            if sharing[0] != r.profile.name:
                continue  # named with the first GPU that has it
            margin_labels.append(
                (
                    "y",
                    ax.annotate(
                        f"{', '.join(sharing) + ': ' if several else prefix}{c.label}\n{plots.si(c.value, 'FLOP/s')}",
                        (1.0, c.value),
                        xycoords=("axes fraction", "data"),
                        xytext=(5, 0),
                        textcoords="offset points",
                        ha="left",
                        va="center",
                        fontsize=7.5,
                        color=colour if len(sharing) == 1 else "#333333",
                        linespacing=1.0,
                    ),
                )
            )
        for m in r.memory_ceilings:
            x_end = top / m.value
            x_start = max(x_lo, y_lo / m.value)
            ax.plot(
                [x_start, x_end],
                [m.value * x_start, top],
                color=colour,
                linestyle=style,
                linewidth=mem_width.get(m.name, 1.0),
            )
            # label along the roof, low on it (several GPUs: staggered along their parallel roofs)
            # The first of several GPUs (the right-most roofs of a level) is labelled under its
            # roofs, the others above theirs, staggered along the lines.
            under = several and g == 0
            first = 0.12 if under else 0.08 + 0.3 * g
            fractions = [first + k * 0.04 for k in range(20)]
            lx = _clear_spot(x_start, x_end, m.value, under, fractions, points, placed_labels, ridges, roof_lines)
            ax.text(
                lx,
                m.value * lx * (1 / 1.3 if under else 1.25),
                f"{LEVEL_LABELS.get(m.name, m.name)} {plots.si(m.value, 'B/s')}",
                rotation=_angle(ax, lx, m.value * lx, lx * 10, m.value * lx * 10),
                rotation_mode="anchor",
                fontsize=7.5,
                color=colour,
                ha="left",
                va="top" if under else "bottom",
            )
        # Ridge points: every memory roof against every FLOP roof; the HBM ones annotated.
        for m in r.memory_ceilings:
            for c in roofs:
                x = c.value / m.value
                ax.plot([x], [c.value], marker="o", markersize=3.2, color=colour, zorder=4)
                if m.name == "hbm":
                    movable.append(
                        (
                            "y",
                            ax.annotate(
                                f"{x:.3g}",
                                (x, c.value),
                                xytext=(4, -9),
                                textcoords="offset points",
                                fontsize=6.5,
                                color=colour,
                            ),
                        )
                    )
    # Kernels: one marker per level with bytes (the fill says which level), joined by a thin
    # line at the kernel's performance, and one name, at the HBM marker: standard's below
    # right, tiled's above left, so coinciding kernels keep readable names. Names take the
    # GPU's colour.
    levels_seen: list[str] = []
    for g, r in enumerate(rooflines):
        colour = plots.COLOURS[g % len(plots.COLOURS)]
        labels: dict[tuple[str, float, float], list[str]] = {}
        for p in r.points:
            if not _drawable(p):
                continue
            y = p.performance_flops_per_s
            shown = {level: x for level, x in p.intensity.items() if x}
            if len(shown) > 1:
                ax.plot(
                    [min(shown.values()), max(shown.values())],
                    [y, y],
                    color=colour,
                    linewidth=0.8,
                    alpha=0.6,
                    zorder=3,
                )
            for level, x in shown.items():
                if level not in levels_seen:
                    levels_seen.append(level)
                ax.plot(
                    [x],
                    [y],
                    marker=plots.MARKERS[p.algorithm],
                    markersize=8 if p.algorithm == "standard" else 7,
                    fillstyle=FILLS.get(level, "full"),
                    color=colour,
                    markeredgecolor="black",
                    markeredgewidth=0.8,
                    linestyle="none",
                    zorder=5 if p.algorithm == "tiled" else 4.5,
                )
                obstacles.append((ax, x, y, 8.0))
            if shown:
                x = shown.get("hbm") or next(iter(shown.values()))
                key = (p.algorithm, round(math.log10(x), 2), round(math.log10(y), 2))
                labels.setdefault(key, [])
                if p.kernel not in labels[key]:
                    labels[key].append(p.kernel)
            exp_cap = p.exp_ceiling_flops_per_s
            if exp_cap and exp_cap < 3 * p.performance_flops_per_s and y_lo < exp_cap < y_hi and p.intensity.get("hbm"):
                x = p.intensity["hbm"]
                assert x is not None
                ax.plot(
                    [x / 1.6, x * 1.6],
                    [exp_cap] * 2,
                    color="#555555",
                    linewidth=1.0,
                    linestyle=(0, (1, 1)),
                )
                # right of the dash when the text fits inside the chart, else left of it
                right = x * 1.6 * 10**0.9 < x_hi
                movable.append(
                    (
                        "y",
                        ax.annotate(
                            f"exp unit cap ({p.kernel})",
                            (x * 1.6 if right else x / 1.6, exp_cap),
                            xytext=(3 if right else -3, 0),
                            textcoords="offset points",
                            fontsize=6.5,
                            color="#555555",
                            ha="left" if right else "right",
                            va="center",
                            bbox={
                                "boxstyle": "square,pad=0.05",
                                "facecolor": "white",
                                "edgecolor": "none",
                                "alpha": 0.8,
                            },
                        ),
                    )
                )
        for (alg, lx, ly), names in labels.items():
            below = alg == "standard"
            movable.append(
                (
                    "y",
                    ax.annotate(
                        ", ".join(names),
                        (10**lx, 10**ly),
                        xytext=(7, -12) if below else (-7, 7),
                        textcoords="offset points",
                        ha="left" if below else "right",
                        fontsize=7.5,
                        color="black" if not several else colour,
                        bbox={"boxstyle": "square,pad=0.1", "facecolor": "white", "edgecolor": "none", "alpha": 0.8},
                        zorder=6,
                    ),
                )
            )
    from .compare import workload_summary

    workload_of = rooflines[0].comparison
    parts = ["Roofline", " vs ".join(r.profile.name for r in rooflines)]
    if workload_of is not None:
        parts += workload_summary(workload_of).split(" · ")
    ax.set_title("\n".join(plots.wrap(parts, 95)), fontsize=10, loc="left")
    handles = [
        Line2D(
            [],
            [],
            marker="s",
            linestyle="none",
            color="white",
            markeredgecolor="black",
            markersize=8,
            label="standard (Algorithm 0) kernel",
        ),
        Line2D(
            [],
            [],
            marker="^",
            linestyle="none",
            color="white",
            markeredgecolor="black",
            markersize=8,
            label=f"tiled ({_tiled_variant(rooflines)}) kernel",
        ),
    ]
    if len(levels_seen) > 1:
        for level in levels_seen:
            handles.append(
                Line2D(
                    [],
                    [],
                    marker="o",
                    linestyle="none",
                    color="#999999",
                    markeredgecolor="black",
                    fillstyle=FILLS[level],
                    markersize=7,
                    label=f"at {LEVEL_LABELS[level]} intensity" + (" (named)" if level == "hbm" else ""),
                )
            )
    else:
        handles.append(
            Line2D(
                [],
                [],
                linestyle="none",
                label=f"placed at {LEVEL_LABELS[levels_seen[0]]} intensity" if levels_seen else "no kernels",
            )
        )
    handles.append(
        Line2D([], [], marker="o", linestyle="none", color="black", markersize=3.2, label="ridge point (HBM: FLOP/B)")
    )
    for g, r in enumerate(rooflines):
        handles.append(
            Line2D(
                [],
                [],
                color=plots.COLOURS[g % len(plots.COLOURS)],
                linestyle=plots.LINESTYLES[g % len(plots.LINESTYLES)],
                label=f"{r.profile.name} roofs",
            )
        )
    # The top-left corner of a roofline is empty (above every memory roof): the legend goes there.
    ax.legend(handles=handles, loc="upper left", fontsize=7.5, framealpha=0.9, edgecolor="#cccccc")
    notes = (
        "Performance = FLOPs / memmodel's predicted time. Memory roofs are aggregate bandwidths "
        "(SRAM = per-SM figure × SMs). The exp unit is rated in exp/s, not FLOP/s: where it caps a kernel "
        "within 3× of its performance, a dotted dash marks that cap (exp rate × the kernel's FLOPs per exp)."
    )
    if unplaced:
        notes += f" Not drawn (no FLOPs): {', '.join(unplaced)}."
    fig.text(0.085, 0.015, textwrap.fill(notes, 150), fontsize=6.5, color="#444444", va="bottom")
    plots.declutter(fig, margin_labels)
    plots.declutter(fig, movable, obstacles)
    plots.save(fig, path, force=force)


def _angle(ax: Any, x0: float, y0: float, x1: float, y1: float) -> float:
    """On-screen angle of the segment (x0, y0)–(x1, y1) in data coordinates, degrees."""
    (a, b), (c, d) = ax.transData.transform([(x0, y0), (x1, y1)])
    return math.degrees(math.atan2(d - b, c - a))


def _same(a: Any, b: Any) -> bool:
    """Two compute roofs at the same peak under the same name (one label for both)."""
    return bool(a.label == b.label and math.isclose(a.value, b.value, rel_tol=1e-9))


def _clear_spot(
    x_start: float,
    x_end: float,
    bandwidth: float,
    under: bool,
    fractions: list[float],
    points: Sequence[Any],
    placed: list[tuple[float, float, float, float]],
    ridges: Sequence[tuple[float, float]] = (),
    lines: Sequence[tuple[float, float, float]] = (),
) -> float:
    """Where along a memory roof its label covers the fewest kernel points and names, ridge
    values and other roof labels (the first such place in ``fractions`` of the roof's length).

    Shapes are compared in (u, v) = (log10 x, log10 y/x), where a roof is a constant v and a
    label along it a box about 0.5 decade long just above it (just under it when ``under``);
    text written horizontally beside a point runs down-slope there (v falls as u grows).
    ``placed`` collects the boxes of the labels placed so far.
    """
    b = math.log10(bandwidth)
    band = (b - 0.22, b - 0.02) if under else (b + 0.02, b + 0.22)
    # (u0, u1, v at u0 of the lower edge, height, slope of v in u)
    shapes = []
    for p in points:
        for x in p.intensity.values():
            if x:
                u, v = math.log10(x), math.log10(p.performance_flops_per_s / x)
                shapes.append((u - 0.06, u + 0.06, v - 0.08, 0.16, 0.0))  # the marker
                shapes.append((u + 0.05, u + 0.75, v - 0.2, 0.16, -1.0))  # its name, down-right
    for x, y in ridges:
        u, v = math.log10(x), math.log10(y / x)
        shapes.append((u - 0.03, u + 0.03, v - 0.03, 0.06, 0.0))
        shapes.append((u + 0.02, u + 0.25, v - 0.12, 0.1, -1.0))  # its value
    shapes += [(u0, u1, v0, v1 - v0, 0.0) for u0, u1, v0, v1 in placed]
    shapes += [(u0, u1, v - 0.005, 0.01, 0.0) for u0, u1, v in lines if abs(v - b) > 1e-9]
    best, best_hits = None, None
    for f in fractions:
        lx = x_start * (x_end / x_start) ** min(f, 0.9)
        x0, x1 = math.log10(lx), math.log10(lx) + 0.4
        hits = 0
        for u0, u1, v0, h, slope in shapes:
            lo, hi = max(x0, u0), min(x1, u1)
            if lo >= hi:
                continue
            # v range of the shape over the shared u range
            vs = [v0 + slope * (u - u0) for u in (lo, hi)]
            if min(vs) < band[1] and band[0] < max(vs) + h:
                hits += 1
        if best_hits is None or hits < best_hits:
            best, best_hits = lx, hits
        if hits == 0:
            break
    assert best is not None
    placed.append((math.log10(best), math.log10(best) + 0.4, *band))
    return best


def _drawable(point: Any) -> bool:
    """A kernel point the chart can place: not a total, and some FLOP/s to show."""
    return not point.is_total and point.performance_flops_per_s > 0


def _tiled_variant(rooflines: Sequence[Roofline]) -> str:
    for r in rooflines:
        for p in r.points:
            if p.algorithm == "tiled":
                return p.variant.upper()
    return "FA2"
