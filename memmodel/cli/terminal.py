"""All terminal output: the rich console, tables, and the one-line error."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table


def console(stderr: bool = False) -> Console:
    width = None if sys.stdout.isatty() else int(os.environ.get("COLUMNS", "100") or 100)
    return Console(stderr=stderr, width=width, highlight=False, soft_wrap=False)


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


@contextlib.contextmanager
def progress(total: int) -> Iterator[Callable[[int, str], None]]:
    """A progress bar on stderr for ``total`` steps; yields ``update(done, description)``."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(
        TextColumn("{task.description:<28}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console(stderr=True),
    )
    with bar:
        task = bar.add_task("", total=total)

        def update(done: int, description: str) -> None:
            bar.update(task, completed=done, description=description)

        yield update
