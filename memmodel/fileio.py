"""Writing output files so that a reader never sees half a file and nothing is lost by accident.

:func:`write_atomic` writes to a temporary file in the destination's folder and renames it
over the destination (``os.replace``), so the destination holds either the old or the new
content, never a mix. An existing file is kept unless ``force`` is given.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from .errors import MemmodelError, RuntimeFailure


def check_writable(path: str | os.PathLike[str], *, force: bool) -> Path:
    """Fail early (before a long run) if ``path`` could not be written by :func:`write_atomic`.

    Raises :class:`MemmodelError` (exit 2) if the file exists and ``force`` is false, and
    :class:`RuntimeFailure` (exit 1) if its folder is missing or not writable.
    """
    p = Path(path)
    if p.is_dir():
        raise MemmodelError(f"{p}: is a folder; give a file name for the output")
    if p.exists() and not force:
        raise MemmodelError(f"{p}: already exists; use --force to overwrite it")
    folder = p.parent if str(p.parent) else Path(".")
    if not folder.is_dir():
        raise RuntimeFailure(f"{p}: cannot write: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise RuntimeFailure(f"{p}: cannot write: the folder {folder} is not writable")
    return p


def _default_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def write_atomic(path: str | os.PathLike[str], text: str, *, force: bool) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically: a temporary file in the same folder, then a rename.

    Without ``force`` an existing file is never replaced (checked again at the rename, so a file
    that appeared meanwhile is kept too). The new file gets the usual permissions (the umask's),
    or those of the file it replaces. Nothing is left behind on failure.
    """
    p = check_writable(path, force=force)
    folder = p.parent if str(p.parent) else Path(".")
    try:
        mode = p.stat().st_mode & 0o777
    except FileNotFoundError:
        mode = _default_mode()
    tmp: str | None = None
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{p.name}.", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        if force:
            os.replace(tmp, p)
        else:
            try:
                os.link(tmp, p)  # fails if p exists: no window in which another file is clobbered
            except FileExistsError:
                raise MemmodelError(f"{p}: already exists; use --force to overwrite it") from None
            except OSError:  # file systems without hard links: check, then rename
                if p.exists():
                    raise MemmodelError(f"{p}: already exists; use --force to overwrite it") from None
                os.replace(tmp, p)
    except OSError as exc:
        raise RuntimeFailure(f"{p}: cannot write ({exc.__class__.__name__}: {exc.strerror or exc})") from None
    finally:
        if tmp is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
    return p
