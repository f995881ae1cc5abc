"""Reading input files and writing output files, so that a reader never sees half a file and
nothing is lost by accident.

Every output memmodel writes (``sweep -o``, every ``--plot``, ``calibrate --output``,
``validate --output``) goes through :func:`atomic_open` (or :func:`write_atomic`): a temporary
file in the destination's folder, renamed over the destination (``os.replace``), so it holds
either the old or the new content, never a mix. One rule for all of them: an existing file is
kept unless ``force`` is given, and only a regular file is ever replaced (never a symbolic
link, a device or a folder). :func:`check_writable` applies the same rule before any work.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from .errors import MemmodelError, RuntimeFailure


def read_text(
    path: str | os.PathLike[str],
    *,
    limit: int = 16 * 2**20,
    what: str = "file",
    error: type[MemmodelError] = MemmodelError,
    compressed: bool | None = None,
) -> str:
    """The UTF-8 text of an input file, at most ``limit`` bytes (``/dev/zero`` never ends);
    ``compressed``: a gzip file, ``limit`` bytes once decompressed (None: when the name ends
    in ``.gz``).

    Raises ``error`` (exit 2), naming the file, if it is missing, a folder, unreadable, not
    gzip (``compressed``), too large or not UTF-8.
    """
    p = os.fspath(path)  # named as the user wrote it
    if compressed is None:
        compressed = p.endswith(".gz")
    opener: Any = open
    not_gzip: tuple[type[BaseException], ...] = ()
    if compressed:  # gzip only where needed: plain profiles are read at every start-up
        import gzip
        import zlib

        opener, not_gzip = gzip.open, (gzip.BadGzipFile, EOFError, zlib.error)
    try:
        with opener(p, "rb") as handle:
            raw = handle.read(limit + 1)
    except FileNotFoundError:
        raise error(f"{p}: no such file") from None
    except IsADirectoryError:
        raise error(f"{p}: is a folder, not a {what}") from None
    except not_gzip:
        raise error(f"{p}: not a gzip file (a compressed {what} was expected)") from None
    except OSError as exc:
        raise error(f"{p}: cannot read ({exc.strerror or exc})") from None
    if len(raw) > limit:
        once = " once decompressed" if compressed else ""
        raise error(f"{p}: larger than {limit // 2**20} MiB{once}, not a {what}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{p}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None


def read_json(
    path: str | os.PathLike[str],
    *,
    limit: int = 16 * 2**20,
    what: str = "JSON file",
    error: type[MemmodelError] = MemmodelError,
    not_json: str | None = None,
) -> Any:
    """The parsed content of a JSON file, ``X.json`` or gzip-compressed ``X.json.gz`` (the
    one way memmodel reads a record: ``validate --rescore``, the calibration fits, the tests).

    Raises ``error`` (exit 2), naming the file, for what :func:`read_text` refuses and for
    text that is not JSON (``not_json``, if given, is that message).
    """
    import json

    text = read_text(path, limit=limit, what=what, error=error)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(not_json or f"{os.fspath(path)}: not JSON (line {exc.lineno}: {exc.msg})") from None
    except RecursionError:
        raise error(not_json or f"{os.fspath(path)}: not a record memmodel reads (its JSON nests too deep)") from None


def for_file(path: str | os.PathLike[str], text: str) -> str | bytes:
    """``text`` as it is written to ``path``: gzip-compressed (reproducibly: no name, no time)
    when the name ends in ``.gz``, else as it is."""
    if not os.fspath(path).endswith(".gz"):
        return text
    import gzip

    return gzip.compress(text.encode("utf-8"), compresslevel=9, mtime=0)


def sibling(path: str | os.PathLike[str], suffix: str) -> Path:
    """The file beside a record with ``suffix`` for the record's own (``R.json`` or
    ``R.json.gz`` with ``.ncu.csv`` gives ``R.ncu.csv``)."""
    p = Path(path)
    name = p.name.removesuffix(".gz")
    stem = name[: -len(".json")] if name.endswith(".json") else Path(name).stem
    return p.with_name(stem + suffix)


#: What a path is, when it is not a regular file: memmodel replaces none of these.
_NOT_A_FILE = (
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISCHR, "a device"),
    (stat.S_ISBLK, "a device"),
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISSOCK, "a socket"),
)


def _kind(p: Path) -> str | None:
    """None if nothing is at ``p``; "file" for a regular file; else what is there."""
    try:
        mode = os.lstat(p).st_mode  # the link itself, not what it points to
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise RuntimeFailure(f"{p}: cannot write ({exc.strerror or exc})") from None
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "folder"
    return next((what for test, what in _NOT_A_FILE if test(mode)), "not a regular file")


def _refuse(p: Path, kind: str | None, force: bool) -> None:
    if kind == "folder":
        raise MemmodelError(f"{p}: is a folder; give a file name for the output")
    if kind not in (None, "file"):
        raise MemmodelError(f"{p}: is {kind}, not a regular file; memmodel writes and replaces only regular files")
    if kind == "file" and not force:
        raise MemmodelError(f"{p}: already exists; use --force to overwrite it")


def check_writable(path: str | os.PathLike[str], *, force: bool) -> Path:
    """Fail early (before a long run) if ``path`` could not be written by :func:`atomic_open`.

    Raises :class:`MemmodelError` (exit 2) for a folder, for anything but a regular file (a
    symbolic link, a device such as ``/dev/null``, a named pipe: never replaced, even with
    ``force``) and for an existing file without ``force``; :class:`RuntimeFailure` (exit 1)
    if its folder is missing or not writable. Messages name ``path`` as given.
    """
    p = Path(path)
    _refuse(p, _kind(p), force)
    folder = p.parent
    if not folder.is_dir():
        raise RuntimeFailure(f"{p}: cannot write: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise RuntimeFailure(f"{p}: cannot write: the folder {folder} is not writable")
    try:  # what access() cannot tell (it answers yes to root, and for /proc): make a file there
        import tempfile

        fd, probe = tempfile.mkstemp(dir=folder, prefix=f".{p.name}.", suffix=".tmp")
    except OSError as exc:
        raise RuntimeFailure(f"{p}: cannot write in the folder {folder} ({exc.strerror or exc})") from None
    os.close(fd)
    os.unlink(probe)
    return p


def _default_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike[str], *, force: bool, binary: bool = False) -> Iterator[IO[Any]]:
    """A file to write ``path``'s new content into: a temporary file in the same folder,
    renamed over ``path`` when the block ends without an exception (the one way memmodel
    writes files: results, plots, profiles, records).

    A reader sees the old content or the new, never a mix. Without ``force`` an existing file
    is never replaced (checked again at the rename, so a file that appeared meanwhile is kept
    too); with it, only a regular file is (checked again at the rename). The new file gets the
    usual permissions (the umask's), or those of the file it replaces. Nothing is left behind
    on failure, and every error names ``path``, not the temporary file.
    """
    p = check_writable(path, force=force)
    try:
        mode = p.stat().st_mode & 0o777
    except FileNotFoundError:
        mode = _default_mode()
    tmp: str | None = None
    try:
        import tempfile

        fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        if force:
            _refuse(p, _kind(p), force)  # something other than a file may have appeared since the check
            os.replace(tmp, p)
        else:
            try:
                os.link(tmp, p)  # fails if p exists: no window in which another file is clobbered
            except FileExistsError:
                raise MemmodelError(f"{p}: already exists; use --force to overwrite it") from None
            except OSError:  # file systems without hard links: check, then rename
                _refuse(p, _kind(p), force)
                os.replace(tmp, p)
    except OSError as exc:
        raise RuntimeFailure(f"{p}: cannot write ({exc.strerror or exc})") from None
    finally:
        if tmp is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)


def write_atomic(path: str | os.PathLike[str], data: str | bytes, *, force: bool) -> Path:
    """Write ``data`` (text as UTF-8, or bytes) to ``path`` through :func:`atomic_open`."""
    with atomic_open(path, force=force, binary=isinstance(data, bytes)) as handle:
        handle.write(data)
    return Path(path)
