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
from rich.text import Text

_quiet = False


def set_quiet(quiet: bool) -> None:
    """``--quiet``: keep stderr for errors only (no progress bars, warnings or notes)."""
    global _quiet
    _quiet = bool(quiet)


def is_quiet() -> bool:
    return _quiet


def console(stderr: bool = False) -> Console:
    """A rich console for stdout (results) or stderr (notes; silent under ``--quiet``).
    Styled only on a terminal (or with ``FORCE_COLOR``); never with ``NO_COLOR`` set."""
    try:
        columns = int(os.environ.get("COLUMNS", "100") or 100)
    except ValueError:
        columns = 100
    width = None if sys.stdout.isatty() else max(columns, 20)
    plain = os.environ.get("NO_COLOR", "") != ""  # no-color.org; rich would still write bold
    return Console(
        stderr=stderr,
        width=width,
        highlight=False,
        soft_wrap=False,
        quiet=stderr and _quiet,
        **({"color_system": None} if plain else {}),
    )


def error(message: str) -> None:
    """One line on stderr, no markup interpretation, never a traceback."""
    text = " ".join(str(message).split())
    sys.stderr.write(f"memmodel: error: {text}\n")
    sys.stderr.flush()


def warning(message: str) -> None:
    """One line on stderr, unless ``--quiet``."""
    if _quiet:
        return
    text = " ".join(str(message).split())
    sys.stderr.write(f"memmodel: warning: {text}\n")
    sys.stderr.flush()


def note(message: str) -> None:
    """A remark for people on stderr (``wrote FILE``), unless ``--quiet``."""
    if not _quiet:
        console(stderr=True).print(message, markup=False, highlight=False, soft_wrap=True)


def table(
    title: str | None, columns: Sequence[tuple[str, str]], rows: Iterable[Sequence[Any]], caption: str | None = None
) -> Table:
    """``columns`` is a list of (header, justify); a row of ``None`` starts a new section.
    Cells are plain text unless made with :func:`markup`."""
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
            t.add_row(*(x if isinstance(x, Text) else Text(str(x)) for x in row))
    return t


def markup(text: str) -> Text:
    """A table cell with rich markup (``[bold]…[/]``); any other cell is shown as it is, so a
    profile's note or a file name holding ``[/]`` is printed, not interpreted."""
    return Text.from_markup(text)


def escape(text: object) -> str:
    """``text`` made safe to put inside a markup string given to ``console().print``."""
    from rich.markup import escape as _escape

    return _escape(str(text))


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
    """A progress bar on stderr for ``total`` steps; yields ``update(done, description)``.
    Under ``--quiet`` nothing is drawn."""
    if _quiet:
        yield lambda done, description: None
        return
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
