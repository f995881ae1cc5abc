"""Log–log charts drawn with characters: pure text, no dependencies, readable at 80 columns."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..roofline import LEVEL_LABELS, Roofline
from ..units import format_si

#: Characters for the roofs of the 1st, 2nd, 3rd... GPU: (memory roofs, compute roofs).
ROOF_STYLES = (("/", "─"), (".", "┄"), (":", "╌"))
#: Markers of kernels, per GPU: standard and tiled differ in shape, not only in colour.
MARKERS = ({"standard": "S", "tiled": "T"}, {"standard": "s", "tiled": "t"}, {"standard": "Q", "tiled": "F"})


def _si(value: float) -> str:
    """Decade tick labels: 0.01, 0.1, 1, 10, 100, 1k, 10k, ... 1M, 1G, 1T, 1P."""
    return format_si(value, digits=3, significant=True, sep="")


@dataclass
class Canvas:
    """A character grid over a log–log data window [10^x0, 10^x1] × [10^y0, 10^y1]."""

    width: int  # plot columns
    height: int  # plot rows
    x0: float
    x1: float
    y0: float
    y1: float

    def __post_init__(self) -> None:
        self.cells = [[" "] * self.width for _ in range(self.height)]
        self.rank = [[0] * self.width for _ in range(self.height)]

    def col(self, x: float) -> float:
        return (math.log10(x) - self.x0) / (self.x1 - self.x0) * (self.width - 1)

    def row(self, y: float) -> float:
        return (self.y1 - math.log10(y)) / (self.y1 - self.y0) * (self.height - 1)

    def put(self, c: int, r: int, char: str, rank: int) -> bool:
        if 0 <= c < self.width and 0 <= r < self.height and rank >= self.rank[r][c]:
            self.cells[r][c] = char
            self.rank[r][c] = rank
            return True
        return False

    def free(self, c: int, r: int, n: int, over: int = 1) -> bool:
        """Whether ``n`` cells from (c, r) hold nothing above rank ``over`` (1: roof lines)."""
        if not (0 <= r < self.height and 0 <= c and c + n <= self.width):
            return False
        return all(self.rank[r][c + i] <= over for i in range(n))

    def text(self, c: int, r: int, s: str, rank: int = 3, over: int = 1) -> bool:
        if not self.free(c, r, len(s), over):
            return False
        for i, ch in enumerate(s):
            self.put(c + i, r, ch, rank)
        return True

    def segment(self, xa: float, ya: float, xb: float, yb: float, char: str, rank: int = 1) -> None:
        """A straight segment in log–log space, sampled finely enough to leave no gaps."""
        ca, ra, cb, rb = self.col(xa), self.row(ya), self.col(xb), self.row(yb)
        steps = int(max(abs(cb - ca), abs(rb - ra)) * 2) + 1
        for i in range(steps + 1):
            f = i / steps
            self.put(round(ca + (cb - ca) * f), round(ra + (rb - ra) * f), char, rank)

    def lines(self, x_label: str, y_label: str, margin: int) -> list[str]:
        """The grid with decade ticks on both axes and the axis labels."""
        out = [" " * margin + y_label]
        tick_rows = {}
        for e in range(math.ceil(self.y0 - 1e-9), math.floor(self.y1 + 1e-9) + 1):
            tick_rows[round(self.row(10.0**e))] = _si(10.0**e)
        for r in range(self.height):
            label = tick_rows.get(r, "")
            axis = "┤" if label else "│"
            out.append(f"{label:>{margin - 1}} {axis}{''.join(self.cells[r])}".rstrip())
        ticks = [" "] * (self.width + 1)
        labels = [" "] * (self.width + 8)
        for e in range(math.ceil(self.x0 - 1e-9), math.floor(self.x1 + 1e-9) + 1):
            c = round(self.col(10.0**e))
            ticks[c] = "┬"
            text = _si(10.0**e)
            start = min(max(0, c - len(text) // 2), self.width - len(text))  # within the chart's width
            if all(ch == " " for ch in labels[max(0, start - 1) : start + len(text) + 1]):
                labels[start : start + len(text)] = list(text)
        out.append(" " * margin + "└" + "".join(ticks[: self.width]).replace(" ", "─"))
        out.append(" " * (margin + 1) + "".join(labels).rstrip())
        out.append(" " * (margin + 1) + f"{x_label:^{self.width}}".rstrip())
        return out


def _window(lo: float, hi: float, pad: float) -> tuple[float, float]:
    return math.floor(math.log10(lo / pad)), math.ceil(math.log10(hi * pad))


def roofline_chart(rooflines: Sequence[Roofline], width: int = 80, height: int = 20) -> str:
    """The rooflines of one or more GPUs with their kernels (at every level with bytes), as text.

    Memory roofs run from the left edge to the highest FLOP roof; FLOP roofs run from where
    they meet the fastest memory roof to the right edge; ``+`` marks ridge points. The exp
    unit (in exp/s, not FLOP/s) is left to the tables.
    """
    margin = 6
    plot_w = max(30, width - margin - 1)
    flop_roofs = [[c for c in r.compute_ceilings if c.unit == "FLOP/s"] for r in rooflines]
    points = [p for r in rooflines for p in r.points if not p.is_total]
    xs = [x for r in rooflines for x in (rp.intensity for rp in r.ridge_points if rp.unit == "FLOP/B")]
    xs += [x for p in points for x in _shown(p).values()]
    ys = [c.value for roofs in flop_roofs for c in roofs]
    ys += [p.performance_flops_per_s for p in points if p.performance_flops_per_s > 0]
    x0, x1 = _window(min(xs), max(xs), 3)
    y0, y1 = _window(min(ys), max(ys), 1.5)
    y0 = max(y0, y1 - 6)  # at most six decades: keep the roofs apart
    canvas = Canvas(plot_w, height, x0, x1, y0, y1)
    lo_x, hi_x = 10.0**x0, 10.0**x1
    for g, (r, roofs) in enumerate(zip(rooflines, flop_roofs)):
        mem_char, flop_char = ROOF_STYLES[g % len(ROOF_STYLES)]
        top = max(c.value for c in roofs)
        fastest = max(m.value for m in r.memory_ceilings)
        for c in roofs:
            canvas.segment(c.value / fastest, c.value, hi_x, c.value, flop_char)
        for m in r.memory_ceilings:
            start = max(lo_x, 10.0**y0 / m.value)
            canvas.segment(start, m.value * start, top / m.value, top, mem_char)
        for m in r.memory_ceilings:
            for c in roofs:
                canvas.put(round(canvas.col(c.value / m.value)), round(canvas.row(c.value)), "+", 2)
    taken: dict[tuple[int, int], str] = {}
    gpu_index = {r.profile.name: g for g, r in enumerate(rooflines)}
    for p in sorted(points, key=lambda p: (gpu_index[p.gpu], p.algorithm)):
        marker = MARKERS[gpu_index[p.gpu] % len(MARKERS)].get(p.algorithm, "?")
        for x in _shown(p).values():
            c, row = round(canvas.col(x)), round(canvas.row(p.performance_flops_per_s))
            while taken.get((c, row), marker) != marker:  # another marker there: step right
                c += 1
            taken[(c, row)] = marker
            canvas.put(c, row, marker, 5)
    # Labels go into free cells only: memory roof tags above their upper end (one GPU only;
    # with several the legend names them), FLOP roofs at their right end, kernel names on
    # their markers' row.
    r, roofs = rooflines[0], flop_roofs[0]
    top = max(c.value for c in roofs)
    for m in r.memory_ceilings if len(rooflines) == 1 else ():
        tag = LEVEL_LABELS.get(m.name, m.name)
        c, row = round(canvas.col(top / m.value)), round(canvas.row(top))
        for attempt in (row - 1, row - 2, row + 1):
            if canvas.text(c - len(tag) // 2, attempt, tag, over=0):
                break
    for r, roofs in zip(rooflines, flop_roofs):
        prefix = f"{r.profile.name} " if len(rooflines) > 1 else ""
        for c in roofs:
            label = f" {prefix}{c.name.upper()} {_si(c.value)} "
            row = round(canvas.row(c.value))
            for attempt in (row, row - 1, row + 1, row - 2):
                if canvas.text(canvas.width - len(label), attempt, label):
                    break
    names: dict[tuple[int, int], list[str]] = {}
    for p in points:
        shown = _shown(p)
        for level, x in shown.items():
            key = (round(canvas.col(x)), round(canvas.row(p.performance_flops_per_s)))
            tag = p.kernel if level == "hbm" else f"{p.kernel}@{level}"
            if tag not in names.setdefault(key, []):
                names[key].append(tag)
    for (c, row), tags in names.items():
        label = ",".join(tags)
        right = c + 1 + sum(1 for k in taken if k[1] == row and k[0] > c)
        canvas.text(right + 1, row, label, 4) or canvas.text(c - len(label) - 1, row, label, 4)
    lines = canvas.lines("arithmetic intensity (FLOP/byte)", "performance (FLOP/s)", margin)
    if len(rooflines) == 1:
        legend = (
            "S standard kernel · T tiled kernel (at HBM intensity) · + ridge point · / memory roof · ─ compute roof"
        )
    else:
        parts = []
        for g, r in enumerate(rooflines):
            mem, flop = ROOF_STYLES[g % len(ROOF_STYLES)]
            mk = MARKERS[g % len(MARKERS)]
            parts.append(f"{r.profile.name}: {mk['standard']} standard, {mk['tiled']} tiled, roofs {mem} {flop}")
        legend = " · ".join(
            [*parts, "kernels at HBM intensity", "+ ridge point", "memory roofs from the left: SRAM, L2, HBM"]
        )
    lines += _wrap(legend.split(" · "), " · ", width - margin - 1, " " * (margin + 1))
    return "\n".join(lines)


def _shown(point: Any) -> dict[str, float]:
    """The intensities a kernel is drawn at in text: HBM's (the first level with bytes when
    it has none). With three points per kernel 80 columns get unreadable; the table lists all."""
    for level, x in point.intensity.items():
        if x:
            return {level: x}
    return {}


def _wrap(parts: list[str], sep: str, width: int, indent: str) -> list[str]:
    """Join ``parts`` with ``sep`` into lines no wider than ``width`` (after ``indent``)."""
    lines: list[str] = []
    current = ""
    for part in parts:
        candidate = f"{current}{sep}{part}" if current else part
        if current and len(candidate) > width:
            lines.append(indent + current)
            current = part
        else:
            current = candidate
    if current:
        lines.append(indent + current)
    return lines
