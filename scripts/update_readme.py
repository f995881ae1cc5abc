"""Regenerate the example output blocks of README.md and docs/*.md from the tool itself.

A block is written as

    <!-- run: memmodel compare --n 4096 --d 768 -->
    ```text
    ...output...
    ```

and this script replaces the fenced block after each marker with the command's real
output (NO_COLOR, 100 columns, run from the repository root). ``<!-- run-md: memmodel ... -->``
... ``<!-- end -->`` pastes output that is itself markdown. ``--check`` exits 1 if any block
of any page is stale (the test suite runs it, so the pages cannot drift from the tool).

A marker ``<!-- plot: memmodel ... --plot docs/x.png --force -->`` names the command that
draws an image a page shows; without ``--check`` the script runs it again (images are not
compared by ``--check``: their bytes depend on the matplotlib version and fonts).

Prose carries no number the model computes: those live in generated blocks only.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
MARKER = re.compile(r"(<!-- run: (?P<cmd>.+?) -->\n```text\n)(?P<body>.*?)(```)", re.S)
PLOT = re.compile(r"<!-- plot: (?P<cmd>memmodel .+?) -->")
#: ``<!-- run-md: memmodel ... -->`` ... ``<!-- end -->``: the command prints markdown, pasted as is
MARKDOWN = re.compile(r"(<!-- run-md: (?P<cmd>.+?) -->\n)(?P<body>.*?)(<!-- end -->)", re.S)


def pages() -> list[Path]:
    """Every page with generated blocks: the README and the docs."""
    return [README, *sorted((REPO / "docs").glob("*.md"))]


def run(cmd: str) -> str:
    args = shlex.split(cmd)
    assert args[0] == "memmodel", cmd
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "100", "TERM": "dumb"}
    env.pop("MEMMODEL_HARDWARE_PATH", None)
    out = subprocess.run(
        [sys.executable, "-m", "memmodel", *args[1:]], capture_output=True, text=True, env=env, cwd=REPO
    )
    text = out.stdout + out.stderr
    return "\n".join(line.rstrip() for line in text.splitlines()) + "\n"


def render(text: str) -> str:
    text = MARKER.sub(lambda m: m.group(1) + run(m.group("cmd")) + m.group(4), text)
    return MARKDOWN.sub(lambda m: m.group(1) + run(m.group("cmd")) + m.group(4), text)


def main() -> int:
    check = "--check" in sys.argv
    stale = []
    for page in pages():
        text = page.read_text(encoding="utf-8")
        new = render(text)
        if new == text:
            continue
        stale.append(page.relative_to(REPO))
        if not check:
            page.write_text(new, encoding="utf-8")
    if check:
        if stale:
            names = ", ".join(map(str, stale))
            print(f"example output is stale in {names}: run python scripts/update_readme.py", file=sys.stderr)
            return 1
        return 0
    for page in pages():
        for m in PLOT.finditer(page.read_text(encoding="utf-8")):
            print(f"drawing: {m.group('cmd')}", file=sys.stderr)
            print(run(m.group("cmd")), end="", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
