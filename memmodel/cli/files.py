"""Files the CLI writes: refuse to clobber, write atomically."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from typing import TextIO

import click


def check_output(path: str, force: bool) -> None:
    """Refuse an existing FILE without --force, and a folder that does not exist, before any work."""
    if os.path.isdir(path):
        raise click.BadParameter(f"{path} is a folder", param_hint="'--output'")
    if os.path.exists(path) and not force:
        raise click.BadParameter(f"{path} exists (add --force to replace it)", param_hint="'--output'")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise click.BadParameter(f"folder {folder} does not exist", param_hint="'--output'")


@contextlib.contextmanager
def output(path: str | None, force: bool) -> Iterator[TextIO]:
    """stdout, or a temporary file beside ``path`` that replaces it (os.replace) only on success."""
    if path is None:
        yield sys.stdout
        return
    check_output(path, force)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    umask = os.umask(0)
    os.umask(umask)
    try:
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the file the usual permissions
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as stream:
            yield stream
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
