"""All terminal output: the rich console, tables, and the one-line error."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TextIO

from rich.console import Console
from rich.table import Table


def console(stderr: bool = False, file: TextIO | None = None) -> Console:
    stream = file if file is not None else (sys.stderr if stderr else sys.stdout)
    tty = stream.isatty()
    width = None if tty else int(os.environ.get("COLUMNS", "100") or 100)
    if file is not None and not tty:
        return Console(file=file, width=width, highlight=False, soft_wrap=False, no_color=True, color_system=None)
    return Console(stderr=stderr, file=file, width=width, highlight=False, soft_wrap=False)


@contextlib.contextmanager
def progress(total: int, description: str, delay_s: float = 0.5) -> Iterator[Callable[[int], None]]:
    """A progress bar on stderr for work of ``total`` units; yields ``advance(units)``.

    The bar appears only when stderr is a terminal and the work is still running after
    ``delay_s`` seconds, so quick runs and pipes print nothing.
    """
    if not sys.stderr.isatty() or total <= 0:
        yield lambda units: None
        return
    import time

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    start = time.monotonic()
    state: dict[str, Any] = {"done": 0, "bar": None, "task": None}

    def advance(units: int) -> None:
        state["done"] += units
        if state["bar"] is None and time.monotonic() - start >= delay_s:
            bar = Progress(
                TextColumn(f"{description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                console=console(stderr=True),
                transient=True,
            )
            bar.start()
            state["bar"], state["task"] = bar, bar.add_task(description, total=total)
        if state["bar"] is not None:
            state["bar"].update(state["task"], completed=state["done"])

    try:
        yield advance
    finally:
        if state["bar"] is not None:
            state["bar"].stop()


def width() -> int:
    """Columns to draw in: the terminal's, or $COLUMNS (default 100) when not a terminal."""
    return console().width


def plain(text: str) -> Any:
    """``text`` printed as is (no markup, no wrapping): for text charts."""
    from rich.text import Text

    return Text(text, no_wrap=True, overflow="ignore")


def note(message: str) -> None:
    """A line for people on stderr (never mixed into JSON/CSV on stdout)."""
    sys.stderr.write(f"memmodel: {message}\n")
    sys.stderr.flush()


def error(message: str) -> None:
    """One line on stderr, no markup interpretation, never a traceback."""
    text = " ".join(str(message).split())
    sys.stderr.write(f"memmodel: error: {text}\n")
    sys.stderr.flush()


def table(
    title: str | None, columns: Sequence[tuple[str, str]], rows: Iterable[Sequence[Any]], caption: str | None = None
) -> Table:
    """``columns`` is a list of (header, justify)."""
    t = Table(
        title=title,
        caption=caption,
        title_justify="left",
        caption_justify="left",
        header_style="bold",
        pad_edge=False,
        box=None,
    )
    for header, justify in columns:
        t.add_column(header, justify=justify)  # type: ignore[arg-type]
    for row in rows:
        if row is None:
            t.add_section()
        else:
            t.add_row(*(str(x) for x in row))
    return t


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, allow_nan=False) + "\n")


def print_csv(columns: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> None:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: row.get(k, "") for k in columns})
    sys.stdout.write(buffer.getvalue())
