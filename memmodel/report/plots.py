"""What the charts share (matplotlib: the optional ``plot`` extra): colours, markers, axis and
label helpers, and :func:`save` (PNG, SVG or PDF, written atomically). Each chart lives beside
the other views of what it draws: the roofline in :mod:`memmodel.report.roofline`, sweeps in
:mod:`memmodel.report.sweep`, predicted-vs-measured in :mod:`memmodel.report.scoring`.

matplotlib is imported inside the functions, and only its object-oriented API is used
(no pyplot, no global state, no display needed). Standard and tiled attention differ in
marker shape and line style, never in colour alone.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence
from typing import Any

from ..errors import MemmodelError, MissingDependency
from ..units import format_si

SUFFIXES = (".png", ".svg", ".pdf")
#: Colour-blind-safe colours (Okabe–Ito), one per GPU or series.
COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")
LINESTYLES = ("-", "--", ":", "-.")
#: Marker shape per algorithm: squares for standard attention, triangles for tiled.
MARKERS = {"standard": "s", "tiled": "^"}


def check_plot_path(path: str) -> None:
    """Refuse an unknown suffix or a missing matplotlib before any work is done."""
    suffix = os.path.splitext(path)[1].lower()
    if suffix not in SUFFIXES:
        raise MemmodelError(f"--plot {path}: the suffix {suffix or '(none)'!r} is not one of {', '.join(SUFFIXES)}")
    require_matplotlib()


def require_matplotlib() -> None:
    if importlib.util.find_spec("matplotlib") is None:
        raise MissingDependency("--plot needs matplotlib, which is not installed: pip install 'memmodel[plot]'")


def figure(width: float, height: float) -> Any:
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


def si(value: float, unit: str = "") -> str:
    """Chart labels: 3 significant digits with an SI prefix up to P (``'312 TFLOP/s'``)."""
    return format_si(value, unit, 3, significant=True, largest="P")


def log_formatter(unit: str = "") -> Any:
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _: si(v, unit).replace(" ", "\u2009") if v >= 1 else f"{v:g}")


def declutter(
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


def wrap(parts: list[str], width: int, sep: str = " · ") -> list[str]:
    """``parts`` joined by ``sep`` into lines of at most ``width`` characters, never inside a part."""
    lines: list[str] = []
    for part in parts:
        if lines and len(lines[-1]) + len(sep) + len(part) <= width:
            lines[-1] += sep + part
        else:
            lines.append(part)
    return lines
