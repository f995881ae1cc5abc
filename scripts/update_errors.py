"""Regenerate the error catalogue of docs/errors.md from the tool itself.

Each row of the table between ``<!-- errors: begin -->`` and ``<!-- errors: end -->`` is

    | Error | When | `memmodel ...` | exit code | `memmodel: error: ...` |

The first three cells are written by hand; this script runs each command from the
repository root (in process, ``NO_COLOR``, no user profiles, and with the module named in
"When" -- "torch not installed" -- hidden) and writes its exit code and the line it printed
into the last two. ``--check`` exits 1 if a row is stale; tests/test_errors.py runs every row
again, so the catalogue and the tool cannot drift apart.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a script from a checkout
    sys.path.insert(0, str(REPO))
DOC = REPO / "docs" / "errors.md"
BEGIN, END = "<!-- errors: begin -->", "<!-- errors: end -->"
HEADER = "| Error | When | Command | Exit | Message |\n|---|---|---|---|---|\n"
_CELL = re.compile(r"(?:\\\||[^|])*")


@dataclass(frozen=True)
class Row:
    error: str
    when: str
    command: str
    exit_code: int | None
    message: str

    @property
    def hidden(self) -> list[str]:
        """Modules the row runs without: "torch not installed" -> ["torch"]."""
        return re.findall(r"([\w.]+) not installed", self.when)


def _cells(line: str) -> list[str]:
    inner = line.strip()[1:-1]
    cells, pos = [], 0
    while pos <= len(inner):
        m = _CELL.match(inner, pos)
        assert m is not None
        cells.append(m.group(0).strip().replace("\\|", "|"))
        pos = m.end() + 1
    return cells


def _unquote(cell: str) -> str:
    return cell[1:-1] if len(cell) >= 2 and cell[0] == cell[-1] == "`" else cell


def parse(text: str) -> list[Row]:
    """The rows of the catalogue table."""
    body = text.split(BEGIN, 1)[1].split(END, 1)[0]
    rows = []
    for line in body.strip().splitlines()[2:]:  # after the header and the |---| line
        error, when, command, exit_code, message = _cells(line)
        rows.append(
            Row(
                error=error,
                when="" if when in ("", "—") else when,
                command=_unquote(command),
                exit_code=int(exit_code) if exit_code.strip().isdigit() else None,
                message=_unquote(message),
            )
        )
    return rows


@contextlib.contextmanager
def _without(modules: list[str]) -> Iterator[None]:
    """Make ``import name`` (and its submodules) fail as if the package were not installed."""
    saved = {k: v for k, v in sys.modules.items() if any(k == m or k.startswith(m + ".") for m in modules)}
    try:
        for name in list(saved) + modules:
            sys.modules[name] = None  # type: ignore[assignment]
        yield
    finally:
        for name in modules:
            sys.modules.pop(name, None)
        for name in list(sys.modules):
            if any(name.startswith(m + ".") for m in modules):
                sys.modules.pop(name, None)
        sys.modules.update(saved)


@contextlib.contextmanager
def _chdir(folder: Path) -> Iterator[None]:  # contextlib.chdir is Python 3.11+
    before = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


def run(row: Row) -> tuple[int, str, str]:
    """Run the row's command as a user would (through MemmodelGroup.main), from the repository
    root; returns (exit code, stdout, stderr)."""
    from click.testing import CliRunner

    from memmodel.cli import cli

    args = shlex.split(row.command)
    assert args[0] == "memmodel", row.command
    with tempfile.TemporaryDirectory() as config, _chdir(REPO), _without(row.hidden):
        env = {"NO_COLOR": "1", "COLUMNS": "100", "XDG_CONFIG_HOME": config}
        env |= {"MEMMODEL_HARDWARE_PATH": None, "MEMMODEL_DEBUG": None}  # type: ignore[dict-item]
        result = CliRunner().invoke(cli, args[1:], prog_name="memmodel", env=env)  # type: ignore[arg-type]
    return result.exit_code, result.stdout, result.stderr


def _quote(text: str) -> str:
    return "`" + text.replace("`", "'").replace("|", "\\|") + "`"


def render(text: str) -> str:
    """``text`` with every row's exit code and message as the tool prints them now."""
    lines = []
    for row in parse(text):
        code, _, err = run(row)
        message = " ".join(err.strip().splitlines())
        cells = [row.error, row.when or "—", _quote(row.command), str(code), _quote(message)]
        lines.append("| " + " | ".join(cells) + " |\n")
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    return f"{head}{BEGIN}\n{HEADER}{''.join(lines)}{END}{tail}"


def main() -> int:
    os.environ.setdefault("COLUMNS", "100")
    text = DOC.read_text(encoding="utf-8")
    new = render(text)
    if "--check" in sys.argv:
        if new != text:
            print(f"{DOC.relative_to(REPO)} is stale: run python scripts/update_errors.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
