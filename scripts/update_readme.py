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

Each distinct command runs once, several at a time (``--jobs N``, default: the usable CPU
cores). Where the system can fork, each command runs in a child of this process, which has
imported the command line once already: the child starts as ``python -m memmodel`` would, with
the same environment, folder and arguments, and nothing run before it. Elsewhere (or with
``--subprocess``) each command is a fresh ``python -m memmodel``. Both give the same pages.
"""

from __future__ import annotations

import locale
import os
import re
import shlex
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
MARKER = re.compile(r"(<!-- run: (?P<cmd>.+?) -->\n```text\n)(?P<body>.*?)(```)", re.S)
PLOT = re.compile(r"<!-- plot: (?P<cmd>memmodel .+?) -->")
#: ``<!-- run-md: memmodel ... -->`` ... ``<!-- end -->``: the command prints markdown, pasted as is
MARKDOWN = re.compile(r"(<!-- run-md: (?P<cmd>.+?) -->\n)(?P<body>.*?)(<!-- end -->)", re.S)
#: what every command runs under: no colour, 100 columns, no profiles from the user's search path
ENV = {"NO_COLOR": "1", "COLUMNS": "100", "TERM": "dumb"}
UNSET = ("MEMMODEL_HARDWARE_PATH",)


def pages() -> list[Path]:
    """Every page with generated blocks: the README and the docs."""
    return [README, *sorted((REPO / "docs").glob("*.md"))]


def commands(text: str) -> list[str]:
    """The commands of a page's generated blocks, in page order."""
    return [m.group("cmd") for pattern in (MARKER, MARKDOWN) for m in pattern.finditer(text)]


def _argv(cmd: str) -> list[str]:
    args = shlex.split(cmd)
    assert args[0] == "memmodel", cmd
    return args[1:]


def _tidy(text: str) -> str:
    """stdout then stderr as one text, trailing spaces and the last line's missing newline fixed."""
    return "\n".join(line.rstrip() for line in text.splitlines()) + "\n"


def run(cmd: str) -> str:
    """``cmd``'s output from a fresh ``python -m memmodel``."""
    env = {**os.environ, **ENV}
    for name in UNSET:
        env.pop(name, None)
    out = subprocess.run(
        [sys.executable, "-m", "memmodel", *_argv(cmd)], capture_output=True, text=True, env=env, cwd=REPO
    )
    return _tidy(out.stdout + out.stderr)


def _read(path: str) -> str:
    # as subprocess.run(text=True) reads a pipe: the locale's encoding, universal newlines
    with open(path, encoding=locale.getpreferredencoding(False)) as f:
        return f.read()


def _child(args: list[str], out: int, err: int) -> None:
    """In a forked child: run the command line on ``args`` with stdout and stderr on ``out``
    and ``err``, then leave without running anything of the parent's."""
    code = 1
    try:
        os.dup2(out, 1)
        os.dup2(err, 2)
        sys.argv = [str(REPO / "memmodel" / "__main__.py"), *args]
        from memmodel.cli import main as cli_main

        cli_main()
        code = 0
    except SystemExit as exc:  # as the interpreter turns it into an exit status
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code
        else:
            print(exc.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code & 0xFF)


def _run_forked(cmds: list[str], jobs: int) -> dict[str, str]:
    for name, value in ENV.items():
        os.environ[name] = value
    for name in UNSET:
        os.environ.pop(name, None)
    os.chdir(REPO)
    import memmodel.cli  # noqa: F401 - imported once here, not once per command

    outputs: dict[str, str] = {}
    running: dict[int, tuple[str, str, str]] = {}
    with tempfile.TemporaryDirectory(prefix="update-readme-") as scratch:

        def reap() -> None:  # the oldest child: waiting on its own pid leaves any other child alone
            pid = next(iter(running))
            os.waitpid(pid, 0)
            cmd, out, err = running.pop(pid)
            outputs[cmd] = _tidy(_read(out) + _read(err))

        for i, cmd in enumerate(cmds):
            while len(running) >= jobs:
                reap()
            out, err = os.path.join(scratch, f"{i}.out"), os.path.join(scratch, f"{i}.err")
            fds = [os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600) for path in (out, err)]
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                _child(_argv(cmd), *fds)
            for fd in fds:
                os.close(fd)
            running[pid] = (cmd, out, err)
        while running:
            reap()
    return outputs


def run_all(cmds: list[str], *, jobs: int | None = None, fork: bool = True) -> dict[str, str]:
    """Each distinct command of ``cmds`` -> its output, ``jobs`` at a time."""
    unique = list(dict.fromkeys(cmds))
    if jobs is None:
        jobs = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    jobs = max(1, jobs)
    if fork and hasattr(os, "fork"):
        return _run_forked(unique, jobs)
    if jobs == 1:
        return {cmd: run(cmd) for cmd in unique}
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(jobs) as pool:
        return dict(zip(unique, pool.map(run, unique)))


def render(text: str, outputs: dict[str, str] | None = None) -> str:
    """``text`` with each generated block replaced by its command's output (from ``outputs``
    where given, else run now)."""
    get = outputs.__getitem__ if outputs is not None else run
    text = MARKER.sub(lambda m: m.group(1) + get(m.group("cmd")) + m.group(4), text)
    return MARKDOWN.sub(lambda m: m.group(1) + get(m.group("cmd")) + m.group(4), text)


def _jobs(argv: list[str]) -> int | None:
    for i, a in enumerate(argv):
        if a == "--jobs" and i + 1 < len(argv):
            return int(argv[i + 1])
        if a.startswith("--jobs="):
            return int(a.split("=", 1)[1])
    return None


def main() -> int:
    check = "--check" in sys.argv
    jobs, fork = _jobs(sys.argv[1:]), "--subprocess" not in sys.argv
    texts = {page: page.read_text(encoding="utf-8") for page in pages()}
    outputs = run_all([cmd for text in texts.values() for cmd in commands(text)], jobs=jobs, fork=fork)
    stale = []
    for page, text in texts.items():
        new = render(text, outputs)
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
    plots = [m.group("cmd") for page in pages() for m in PLOT.finditer(page.read_text(encoding="utf-8"))]
    drawn = run_all(plots, jobs=jobs, fork=fork)
    for cmd in plots:
        print(f"drawing: {cmd}", file=sys.stderr)
        print(drawn[cmd], end="", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
