"""Regenerate the example output blocks of README.md (and of the docs pages in ``PAGES``) from the tool itself.

A block is written as

    <!-- run: memmodel compare --n 4096 --d 768 -->
    ```text
    ...output...
    ```

and this script replaces the fenced block after each marker with the command's real
output (NO_COLOR, 100 columns). ``--check`` exits 1 if any block is stale (the test suite
runs it, so the README cannot drift from the tool).

A marker ``<!-- plot: memmodel ... --plot docs/x.png -->`` names the command that draws an
image shown in the README; without ``--check`` the script runs it again (images are not
compared by ``--check``: their bytes depend on the matplotlib version and fonts).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
#: every page whose blocks are generated (the README first)
PAGES = (README, README.parent / "docs" / "training.md")
MARKER = re.compile(r"(<!-- run: (?P<cmd>.+?) -->\n```text\n)(?P<body>.*?)(```)", re.S)
PLOT = re.compile(r"<!-- plot: (?P<cmd>memmodel .+?) -->")
#: ``<!-- run-md: memmodel ... -->`` ... ``<!-- end -->``: the command prints markdown, pasted as is
MARKDOWN = re.compile(r"(<!-- run-md: (?P<cmd>.+?) -->\n)(?P<body>.*?)(<!-- end -->)", re.S)


def run(cmd: str) -> str:
    args = shlex.split(cmd)
    assert args[0] == "memmodel", cmd
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "100", "TERM": "dumb"}
    out = subprocess.run(
        [sys.executable, "-m", "memmodel", *args[1:]], capture_output=True, text=True, env=env, cwd=README.parent
    )
    text = out.stdout + out.stderr
    return "\n".join(line.rstrip() for line in text.splitlines()) + "\n"


def render(text: str) -> str:
    text = MARKER.sub(lambda m: m.group(1) + run(m.group("cmd")) + m.group(4), text)
    return MARKDOWN.sub(lambda m: m.group(1) + run(m.group("cmd")) + m.group(4), text)


def main() -> int:
    stale = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        new = render(text)
        if "--check" in sys.argv:
            if new != text:
                stale.append(page.relative_to(README.parent).as_posix())
            continue
        page.write_text(new, encoding="utf-8")
        for m in PLOT.finditer(new):
            print(f"drawing: {m.group('cmd')}", file=sys.stderr)
            run(m.group("cmd"))
    if stale:
        print(f"{', '.join(stale)}: example output is stale: run python scripts/update_readme.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
