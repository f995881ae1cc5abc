"""Charts drawn with matplotlib (the optional ``plot`` extra), written as PNG, SVG or PDF.

matplotlib is imported inside the functions, and only its object-oriented API is used
(no pyplot, no global state, no display needed). Standard and tiled attention differ in
marker shape and line style, never in colour alone.
"""

from __future__ import annotations

import importlib.util
import math
import os
import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import MemmodelError, MissingDependency
from ..roofline import LEVEL_LABELS, Roofline
from ..units import format_si

if TYPE_CHECKING:
    from ..sweep import SweepResult

SUFFIXES = (".png", ".svg", ".pdf")
#: Colour-blind-safe colours (Okabe–Ito), one per GPU or series.
COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")
LINESTYLES = ("-", "--", ":", "-.")
#: Marker shape per algorithm: squares for standard attention, triangles for tiled.
MARKERS = {"standard": "s", "tiled": "^"}
#: Marker fill per memory level on the roofline: the intensity a point is placed at.
FILLS = {"hbm": "full", "l2": "bottom", "sram": "none"}
MEMORY_BOUND = {"hbm", "l2", "sram"}


def check_plot_path(path: str) -> None:
    """Refuse an unknown suffix or a missing matplotlib before any work is done."""
    suffix = os.path.splitext(path)[1].lower()
    if suffix not in SUFFIXES:
        raise MemmodelError(f"--plot {path}: the suffix {suffix or '(none)'!r} is not one of {', '.join(SUFFIXES)}")
    require_matplotlib()


def require_matplotlib() -> None:
    if importlib.util.find_spec("matplotlib") is None:
        raise MissingDependency("--plot needs matplotlib, which is not installed: pip install 'memmodel[plot]'")


def _figure(width: float, height: float) -> Any:
    require_matplotlib()
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=100)


def save(fig: Any, path: str, *, force: bool = False, dpi: int = 150) -> None:
    """Write ``fig`` to ``path`` in the format its suffix names, atomically
    (:func:`memmodel.fileio.atomic_open`: an existing file only with ``force``)."""
    from ..fileio import atomic_open

    suffix = os.path.splitext(path)[1].lower()
    with atomic_open(path, force=force, binary=True) as handle:
        fig.savefig(handle, format=suffix.lstrip("."), dpi=dpi, metadata=_metadata(path))


def _metadata(path: str) -> dict[str, Any]:
    """Reproducible files: no creation date in SVG/PDF, the tool's name as creator."""
    suffix = os.path.splitext(path)[1].lower()
    if suffix == ".svg":
        return {"Date": None, "Creator": "memmodel"}
    if suffix == ".pdf":
        return {"CreationDate": None, "Creator": "memmodel"}
    return {"Software": "memmodel"}


def _si(value: float, unit: str = "") -> str:
    """Chart labels: 3 significant digits with an SI prefix up to P (``'312 TFLOP/s'``)."""
    return format_si(value, unit, 3, significant=True, largest="P")


def _log_formatter(unit: str = "") -> Any:
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _: _si(v, unit).replace(" ", "\u2009") if v >= 1 else f"{v:g}")


def _angle(ax: Any, x0: float, y0: float, x1: float, y1: float) -> float:
    """On-screen angle of the segment (x0, y0)–(x1, y1) in data coordinates, degrees."""
    (a, b), (c, d) = ax.transData.transform([(x0, y0), (x1, y1)])
    return math.degrees(math.atan2(d - b, c - a))


# ---------------------------------------------------------------------------------------
# Roofline


def roofline_plot(rooflines: Sequence[Roofline], path: str, *, force: bool = False) -> None:
    """Roofs, ridge points and kernels of one or more GPUs on one log–log chart."""
    check_plot_path(path)
    from matplotlib.lines import Line2D

    fig = _figure(9.0, 6.6)
    ax = fig.add_axes((0.085, 0.16, 0.66, 0.76))
    movable: list[tuple[str, Any]] = []  # labels moved apart before saving (_declutter)
    margin_labels: list[tuple[str, Any]] = []
    obstacles: list[tuple[Any, float, float, float]] = []  # markers labels keep off: (axes, x, y, size)
    flop_roofs = [[c for c in r.compute_ceilings if c.unit == "FLOP/s"] for r in rooflines]
    points = [p for r in rooflines for p in r.points if not p.is_total]
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
    ax.xaxis.set_major_formatter(_log_formatter())
    ax.yaxis.set_major_formatter(_log_formatter())
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
        colour, style = COLOURS[g % len(COLOURS)], LINESTYLES[g % len(LINESTYLES)]
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
                        f"{', '.join(sharing) + ': ' if several else prefix}{c.label}\n{_si(c.value, 'FLOP/s')}",
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
                f"{LEVEL_LABELS.get(m.name, m.name)} {_si(m.value, 'B/s')}",
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
        colour = COLOURS[g % len(COLOURS)]
        labels: dict[tuple[str, float, float], list[str]] = {}
        for p in r.points:
            if p.is_total:
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
                    marker=MARKERS[p.algorithm],
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
    ax.set_title("\n".join(_wrap(parts, 95)), fontsize=10, loc="left")
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
                color=COLOURS[g % len(COLOURS)],
                linestyle=LINESTYLES[g % len(LINESTYLES)],
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
    fig.text(0.085, 0.015, textwrap.fill(notes, 150), fontsize=6.5, color="#444444", va="bottom")
    _declutter(fig, margin_labels)
    _declutter(fig, movable, obstacles)
    save(fig, path, force=force)


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


def _tiled_variant(rooflines: Sequence[Roofline]) -> str:
    for r in rooflines:
        for p in r.points:
            if p.algorithm == "tiled":
                return p.variant.upper()
    return "FA2"


# ---------------------------------------------------------------------------------------
# Sweep


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
    check_plot_path(path)
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
    fig = _figure(width, (2.6 if len(panels) <= 3 else 1.9) * sum(heights) + 1.0)
    axes = fig.subplots(len(panels), 1, sharex=True, gridspec_kw={"height_ratios": heights})
    longest = max((len(label) for label in series), default=0)
    title_lines = _wrap(describe({k: v for k, v in constants.items() if k != axis}), 75) or [""]
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
    movable: list[tuple[str, Any]] = []  # labels moved apart before saving (_declutter)
    seen_at: dict[tuple[int, float], int] = {}
    ends: dict[int, tuple[Any, list[tuple[float, float, str, str]]]] = {}
    for a, panel in zip(axes, panels):
        a.set_xscale("log", base=2 if _powers_of_two(x_all) else 10)
        a.set_yscale("log")
        a.grid(True, which="major", color="#dddddd", linewidth=0.6)
        a.set_axisbelow(True)
        for s_i, (label, idx) in enumerate(series.items()):
            colour = COLOURS[s_i % len(COLOURS)]
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
                                f"crossover\n{_axis_name(axis)}≈{_si(xc)}",
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
                                marker=MARKERS[alg],
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
                                f"{label or alg}: {alg} {bound[i]}→{bound[i + 1]} at {_axis_name(axis)}≈{_si(xm)}"
                            )
                else:
                    a.plot(x, y, linestyle="none", marker=MARKERS[alg], markersize=5.5 + 1.5 * wider, color=colour)
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
                                f"crossover {_axis_name(axis)}≈{_si(xc)}",
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
            a.yaxis.set_major_formatter(_log_formatter("B"))
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
    _declutter(fig, movable)
    save(fig, path, force=force)


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


def _declutter(
    fig: Any,
    labels: list[tuple[str, Any]],
    obstacles: Sequence[tuple[Any, float, float, float]] = (),
    step: float = 7.0,
) -> None:
    """Move annotations (placed in offset points) apart until no two overlap, nor one a marker
    of ``obstacles`` ((axes, x, y, size in points) in data coordinates): each keeps its place
    if it can, else the nearest free one along its direction ("x" or "y"), up and down in
    turn, up to eight steps; earlier labels keep theirs."""
    if not labels:
        return
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.transforms import Bbox

    renderer = FigureCanvasAgg(fig).get_renderer()
    placed: list[Any] = []
    for ax, x, y, size in obstacles:
        cx, cy = ax.transData.transform((x, y))
        half = size / 2 * fig.dpi / 72
        placed.append(Bbox.from_extents(cx - half, cy - half, cx + half, cy + half))
    for direction, text in labels:
        x0, y0 = text.xyann
        best = None
        for k in (0, 1, -1, 2, -2, 3, -3, 4, -4, 5, -5, 6, -6, 7, -7, 8, -8):
            text.xyann = (x0 + k * step, y0) if direction == "x" else (x0, y0 + k * step)
            box = text.get_window_extent(renderer)
            if not any(box.overlaps(other) for other in placed):
                best = box
                break
        if best is None:  # no free place near: leave it where it was asked
            text.xyann = (x0, y0)
            best = text.get_window_extent(renderer)
        placed.append(best)


def _wrap(parts: list[str], width: int, sep: str = " · ") -> list[str]:
    """``parts`` joined by ``sep`` into lines of at most ``width`` characters, never inside a part."""
    lines: list[str] = []
    for part in parts:
        if lines and len(lines[-1]) + len(sep) + len(part) <= width:
            lines[-1] += sep + part
        else:
            lines.append(part)
    return lines


def _size_formatter() -> Any:
    """Sizes as people write them: 512, 1K, 2K, ..., 128K (binary K when exact), else 1.5k."""
    from matplotlib.ticker import FuncFormatter

    def fmt(v: float, _: Any) -> str:
        if v >= 1024 and float(v).is_integer() and int(v) % 1024 == 0:
            k = int(v) // 1024
            return f"{k // 1024}M" if k % 1024 == 0 else f"{k}K"
        return _si(v).replace(" ", "")

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
