"""All terminal output: the console, tables, progress bars and the one-line error.

On a terminal everything goes through rich. Elsewhere (pipes, files, the README
generator, tests) rich would print the same characters without any styling, so
:class:`PlainConsole` writes them itself, character for character as rich lays them out
— and hands anything it cannot lay out identically (a line or a table wider than the
width, which rich would wrap) to rich. This keeps rich's ~40 ms of import and first
render out of the start-up of commands whose output is read by programs.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TextIO

_quiet = False


def set_quiet(quiet: bool) -> None:
    """``--quiet``: keep stderr for errors only (no progress bars, warnings or notes)."""
    global _quiet
    _quiet = bool(quiet)


def is_quiet() -> bool:
    return _quiet


def _no_color() -> bool:
    return os.environ.get("NO_COLOR", "") != ""  # no-color.org: rich would still write bold


class Markup(str):
    """A table cell written in rich markup (``[bold]…[/]``); every other cell is shown as it
    is, so a profile's note or a file name holding ``[/]`` is printed, not interpreted."""

    def append(self, text: object) -> Markup:
        return Markup(str(self) + escape(text))


def markup(text: str) -> Markup:
    return Markup(text)


_ESCAPE = re.compile(r"(\\*)(\[[a-z#/@][^[]*?])")


def escape(text: object) -> str:
    """``text`` made safe to put inside markup (rich's own escaping rule)."""

    def repl(m: re.Match[str]) -> str:
        backslashes, tag = m.groups()
        return f"{backslashes}{backslashes}\\{tag}"

    return _ESCAPE.sub(repl, str(text))


#: rich's markup tags, as rich.markup finds them: [bold], [/], [dim], [red], [/bold] ...
_TAG = re.compile(r"\[([a-z#/@][^\[]*?)\]")
#: Text that rich would not print as is: escapes, emoji codes (:smile:), wide characters.
_UNSAFE = re.compile(r"\\|:[a-z0-9_+-]+:")
#: The wide characters, from U+1100 up (compiled when first needed: ~1 ms of start-up)
_WIDE = r"[\u1100-\u115f\u2e80-\ua4cf\uac00-\ud7a3\uf900-\ufaff\ufe30-\ufe4f\uff00-\uffee\U0001f000-\U0010ffff]"


def _plain_text(markup: str) -> str | None:
    """``markup`` without its tags, or None when rich would print something else."""
    if _UNSAFE.search(markup) or (markup and _may_be_wide(max(markup), markup) and re.search(_WIDE, markup)):
        return None
    return _TAG.sub("", markup)


def _may_be_wide(top: str, text: str) -> bool:
    """Whether ``text`` (whose largest character is ``top``) can hold a wide character: one from
    U+2E80 up, or a Hangul jamo (U+1100-U+115F). Tables print arrows, … and ⌈⌉ (U+2000s), which
    are narrow: the wide-character expression is not even compiled for them."""
    return top >= "\u2e80" or (top >= "\u1100" and any("\u1100" <= ch <= "\u115f" for ch in text))


class PlainText(str):
    """Text to print as is: no markup, no wrapping (text charts)."""

    def __rich__(self) -> Any:
        from rich.text import Text

        return Text(str(self), no_wrap=True, overflow="ignore")


def _cell(value: object) -> str:
    return str(value) if isinstance(value, Markup) else escape(value)


class TextTable:
    """A table laid out like ``rich.table.Table(box=None, pad_edge=False)``; rich renders it on terminals."""

    def __init__(
        self,
        title: str | None,
        columns: Sequence[tuple[str, str]],
        rows: Iterable[Sequence[Any] | None],
        caption: str | None = None,
    ) -> None:
        self.title = title
        self.caption = caption
        self.columns = list(columns)
        self.rows: list[list[str] | None] = [None if r is None else [_cell(x) for x in r] for r in rows]

    def __rich__(self) -> Any:
        from rich.table import Table

        t = Table(
            title=self.title,
            caption=self.caption,
            title_justify="left",
            caption_justify="left",
            header_style="bold",
            pad_edge=False,
            box=None,
        )
        for header, justify in self.columns:
            t.add_column(header, justify=justify)  # type: ignore[arg-type]
        for row in self.rows:
            if row is None:
                t.add_section()
            else:
                t.add_row(*row)
        return t

    def plain_lines(self, width: int) -> list[str] | None:
        """The lines rich would print at ``width`` columns without styles, or None if rich would wrap."""
        if self.caption is not None:
            return None
        header = [_plain_text(h) for h, _ in self.columns]
        body = [[_plain_text(c) for c in row] for row in self.rows if row is not None]
        if any(x is None for x in header) or any(x is None for row in body for x in row):
            return None
        if any(len(row) != len(header) for row in body) or any("\n" in str(x) for x in header):
            return None
        cells: list[list[str]] = [header, *body]  # type: ignore[list-item]
        if any("\n" in c for row in cells for c in row):
            return None
        widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
        total = sum(widths) + 2 * (len(widths) - 1)
        if total > width:
            return None
        justify = [j for _, j in self.columns]
        lines = []
        if self.title is not None:
            title = _plain_text(self.title)
            if title is None or len(title) > total or "\n" in title:
                return None
            lines.append(title.ljust(total))
        for row in cells:
            parts = [
                c.rjust(w) if j == "right" else c.center(w) if j == "center" else c.ljust(w)
                for c, w, j in zip(row, widths, justify)
            ]
            lines.append("  ".join(parts))
        if any(j == "center" for j in justify):
            return None  # rich splits odd centring padding its own way: let it
        return lines


class PlainConsole:
    """Prints like rich's Console on a non-terminal (no styles), without importing rich."""

    def __init__(self, file: TextIO, width: int) -> None:
        self.file = file
        self.width = width
        self._rich: Any = None

    def print(self, *objects: Any, soft_wrap: bool = False) -> None:
        if not objects:
            self.file.write("\n")
            return
        (obj,) = objects
        lines: list[str] | None = None
        if isinstance(obj, PlainText):
            lines = [str(obj)] if soft_wrap else None
            if lines is None and all(len(line) <= self.width for line in str(obj).split("\n")):
                lines = str(obj).split("\n")
        elif isinstance(obj, str):
            text = _plain_text(obj)
            if text is not None and (soft_wrap or all(len(line) <= self.width for line in text.split("\n"))):
                lines = text.split("\n")
        elif isinstance(obj, TextTable):
            lines = obj.plain_lines(self.width)
        if lines is None:
            self.rich().print(obj, soft_wrap=soft_wrap)
            return
        self.file.write("".join(line + "\n" for line in lines))

    def rich(self) -> Any:
        """The rich console this one stands in for (for what it cannot print itself)."""
        if self._rich is None:
            from rich.console import Console

            self._rich = Console(
                file=self.file, width=self.width, highlight=False, soft_wrap=False, no_color=True, color_system=None
            )
        return self._rich


def _columns() -> int:
    try:
        return max(int(os.environ.get("COLUMNS", "100") or 100), 20)
    except ValueError:
        return 100


def console(stderr: bool = False, file: TextIO | None = None) -> Any:
    """rich's Console on a terminal; elsewhere a :class:`PlainConsole` of $COLUMNS (default 100).
    A stderr console prints nothing under ``--quiet``; nothing is styled with ``NO_COLOR``."""
    stream = file if file is not None else (sys.stderr if stderr else sys.stdout)
    if stderr and _quiet:
        return PlainConsole(io.StringIO(), _columns())
    forced = os.environ.get("FORCE_COLOR", "") != "" and not _no_color()
    if not stream.isatty() and not forced:
        return PlainConsole(stream, _columns())
    from rich.console import Console

    return Console(
        stderr=stderr,
        file=file,
        width=None if stream.isatty() else _columns(),
        highlight=False,
        soft_wrap=False,
        **({"color_system": None} if _no_color() else {}),
    )


def rich_console(stderr: bool = False) -> Any:
    """Always rich (progress bars); silent under ``--quiet`` on stderr."""
    from rich.console import Console

    return Console(
        stderr=stderr,
        highlight=False,
        soft_wrap=False,
        quiet=stderr and _quiet,
        **({"color_system": None} if _no_color() else {}),
    )


@contextlib.contextmanager
def counter(total: int, description: str, delay_s: float = 0.5) -> Iterator[Callable[[int], None]]:
    """A progress bar on stderr for work of ``total`` units; yields ``advance(units)``.

    The bar appears only when stderr is a terminal and the work is still running after
    ``delay_s`` seconds, so quick runs and pipes print nothing.
    """
    if _quiet or not sys.stderr.isatty() or total <= 0:
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
                console=rich_console(stderr=True),
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


def plain(text: str) -> PlainText:
    """``text`` printed as is (no markup, no wrapping): for text charts."""
    return PlainText(text)


def note(message: str) -> None:
    """A line for people on stderr (never mixed into JSON/CSV on stdout); none under ``--quiet``."""
    if _quiet:
        return
    sys.stderr.write(f"memmodel: {message}\n")
    sys.stderr.flush()


def warning(message: str) -> None:
    """One line on stderr, unless ``--quiet``."""
    if _quiet:
        return
    text = " ".join(str(message).split())
    sys.stderr.write(f"memmodel: warning: {text}\n")
    sys.stderr.flush()


def error(message: str) -> None:
    """One line on stderr, no markup interpretation, never a traceback."""
    text = " ".join(str(message).split())
    sys.stderr.write(f"memmodel: error: {text}\n")
    sys.stderr.flush()


def table(
    title: str | None,
    columns: Sequence[tuple[str, str]],
    rows: Iterable[Sequence[Any] | None],
    caption: str | None = None,
) -> TextTable:
    """``columns`` is a list of (header, justify); a ``None`` row starts a new section."""
    return TextTable(title, columns, rows, caption)


def print_json(data: Any) -> None:
    import json

    sys.stdout.write(json.dumps(data, indent=2, allow_nan=False) + "\n")


def print_csv(columns: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> None:
    import csv

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
        console=rich_console(stderr=True),
    )
    with bar:
        task = bar.add_task("", total=total)

        def update(done: int, description: str) -> None:
            bar.update(task, completed=done, description=description)

        yield update
