"""Trace cases: a user's own function or module as a validation case (plain data, no torch).

A line of a ``validate --cases`` file that starts with ``trace`` names a function or module the
way ``memmodel trace`` does, with the same options::

    trace examples/attention/flash_benchmark.py:attention --shape q=4,1024,16,64 \\
        --shape k=4,1024,16,64 --shape v=4,1024,16,64 --dtype fp16 --backward

``validate`` runs it on the GPU (real random tensors of those shapes) and scores what it
measured against :func:`memmodel.trace` of the same call. The options are read with trace's own
parsers (:func:`memmodel.tracing.parse_shape`, :func:`memmodel.tracing.parse_config`), so the
two grammars are one.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .errors import MemmodelError, TraceError, WorkloadError
from .frozen import frozen

#: a record entry's ``case.kind`` for a trace case (ordinary cases have no ``kind``)
TRACE_KIND = "trace"
#: the options a trace case takes (``memmodel trace``'s, less the output's: --gpu, --l2, --format)
TRACE_OPTIONS = ("--shape", "--dtype", "--backward", "--grad", "--config")
#: ``memmodel trace`` options that belong to the validate command, not to a case
_COMMAND_OPTIONS = ("--gpu", "--l2", "--format")


@frozen
class TraceCase:
    """A function or ``nn.Module`` of a user's file, called with tensors of given shapes: the
    ``memmodel trace`` command line of one ``--cases`` line. ``shapes``: (name, dims, own dtype or
    None) per argument; ``config``: the ``--config`` texts, each ``KEY=VALUE``."""

    target: str
    shapes: tuple[tuple[str, tuple[int, ...], str | None], ...]
    dtype: str = "fp32"
    backward: bool = False
    grad: tuple[str, ...] | None = None
    config: tuple[str, ...] = ()

    #: what groups cases by kind in the reports (ordinary cases: their kernel implementation)
    impl = TRACE_KIND
    kind = TRACE_KIND

    @property
    def shape_map(self) -> dict[str, Any]:
        """Argument name -> shape, or (shape, dtype) where the argument has its own dtype:
        :func:`memmodel.trace`'s ``shapes``."""
        return {name: (dims, own) if own else dims for name, dims, own in self.shapes}

    @property
    def config_map(self) -> dict[str, Any]:
        """The ``--config`` keyword arguments, each value read as ``memmodel trace`` reads it."""
        from .tracing import parse_config

        return dict(parse_config(text) for text in self.config)

    @property
    def path(self) -> str:
        """The file part of ``target`` (``examples/attention/sdpa.py``)."""
        return self.target.rpartition(":")[0]

    @property
    def function(self) -> str:
        """The name part of ``target`` (``attention``)."""
        return self.target.rpartition(":")[2]

    @property
    def id(self) -> str:
        dims = ",".join(
            f"{name}{'x'.join(map(str, shape))}" + (f":{own}" if own else "") for name, shape, own in self.shapes
        )
        extra = "-bwd" if self.backward else ""
        if self.grad is not None:
            extra += "-grad" + "+".join(self.grad)
        tail = "".join(f"/{c}" for c in self.config)
        return f"trace/{self.target}/{dims}/{self.dtype}{extra}{tail}"

    def spec(self) -> str:
        """The case as a ``--cases`` line (:func:`parse_trace_case` reads it back the same)."""
        words = ["trace", self.target]
        for name, shape, own in self.shapes:
            words += ["--shape", f"{name}={','.join(map(str, shape))}" + (f":{own}" if own else "")]
        words += ["--dtype", self.dtype]
        if self.backward:
            words.append("--backward")
        if self.grad is not None:
            words += ["--grad", ",".join(self.grad)]
        for c in self.config:
            words += ["--config", c]
        return shlex.join(words)

    def to_dict(self) -> dict[str, Any]:
        """A record's ``case`` entry: the line (``spec``, what :meth:`from_dict` reads) and its
        parts spelled out for a reader."""
        out: dict[str, Any] = {
            "id": self.id,
            "kind": TRACE_KIND,
            "impl": TRACE_KIND,
            "spec": self.spec(),
            "target": self.target,
            "shapes": {name: {"shape": list(shape), "dtype": own or self.dtype} for name, shape, own in self.shapes},
            "dtype": self.dtype,
            "backward": self.backward,
        }
        if self.grad is not None:
            out["grad"] = list(self.grad)
        if self.config:
            out["config"] = list(self.config)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TraceCase:
        """The case a record's ``case`` entry holds (read from its ``spec`` line)."""
        spec = data.get("spec")
        if not isinstance(spec, str):
            raise WorkloadError(f"trace case {data.get('id')!r} has no 'spec' line")
        return parse_trace_case(spec)


def is_trace_entry(entry: dict[str, Any]) -> bool:
    """Whether a record entry is a trace case's."""
    case = entry.get("case")
    return isinstance(case, dict) and case.get("kind") == TRACE_KIND


def case_from_dict(data: dict[str, Any]) -> Any:
    """A record's ``case`` entry as a :class:`TraceCase` or a :class:`memmodel.cases.Case`."""
    if data.get("kind") == TRACE_KIND:
        return TraceCase.from_dict(data)
    from .cases import Case

    return Case.from_dict(data)


def parse_trace_case(text: str) -> TraceCase:
    """``trace FILE.py:NAME --shape q=1,8,1024,64 ... [--dtype D] [--backward] [--grad a,b]
    [--config k=v]``, as ``memmodel trace`` takes it (quoted as a shell would; ``#`` starts a
    comment). Raises :class:`TraceError` (one line) on anything else."""
    from .tracing import parse_config, parse_shape
    from .tracing.events import FLOAT_DTYPES

    try:
        words = shlex.split(text, comments=True)
    except ValueError as exc:  # an unclosed quote
        raise TraceError(f"cannot split the line as a shell would: {exc}") from None
    if not words or words[0] != "trace":
        raise TraceError("a trace case starts with 'trace' (trace FILE.py:NAME --shape NAME=DIMS ...)")
    if len(words) < 2 or words[1].startswith("-"):
        raise TraceError("trace: give the function or module first, as FILE.py:NAME")
    target = words[1]
    path, sep, name = target.rpartition(":")
    if not sep or not path or not name:
        raise TraceError(f"{target!r}: expected FILE.py:NAME (e.g. examples/attention/sdpa.py:attention)")
    shapes: dict[str, tuple[tuple[int, ...], str | None]] = {}
    config: dict[str, str] = {}
    dtype: str | None = None
    backward = False
    grad: tuple[str, ...] | None = None
    rest = words[2:]
    i = 0
    while i < len(rest):
        word = rest[i]
        option, eq, inline = word.partition("=")
        if option in _COMMAND_OPTIONS:
            raise TraceError(f"{option} is an option of validate (the whole run), not of a case")
        if option not in TRACE_OPTIONS:
            raise TraceError(f"unexpected {word!r}: a trace case takes {', '.join(TRACE_OPTIONS)}")
        if option == "--backward":
            if eq:
                raise TraceError("--backward takes no value")
            backward = True
            i += 1
            continue
        if eq:
            value = inline
            i += 1
        else:
            if i + 1 >= len(rest):
                raise TraceError(f"{option} needs a value")
            value = rest[i + 1]
            i += 2
        if option == "--shape":
            arg, dims, own = parse_shape(value)
            if arg in shapes:
                raise TraceError(f"--shape {arg}=... given twice: give each argument once")
            shapes[arg] = (dims, own)
        elif option == "--config":
            key, _ = parse_config(value)
            if key in config:
                raise TraceError(f"--config {key}=... given twice: give each key once")
            config[key] = value.strip()
        elif option == "--dtype":
            if dtype is not None:
                raise TraceError("--dtype given twice")
            if value not in FLOAT_DTYPES:
                raise TraceError(f"--dtype {value!r}: accepted are {', '.join(FLOAT_DTYPES)}")
            dtype = value
        else:  # --grad
            if grad is not None:
                raise TraceError("--grad given twice")
            grad = tuple(x.strip() for x in value.split(",") if x.strip())
            if not grad:
                raise TraceError("--grad: give the names of floating inputs, comma-separated (--grad q,k,v)")
    if grad is not None and not backward:
        raise TraceError("--grad names the gradients of the backward: give --backward too")
    if grad is not None:
        unknown = [g for g in grad if g not in shapes]
        if unknown:
            raise TraceError(f"--grad {unknown[0]}: no --shape gives it (the gradients are of --shape inputs)")
    return TraceCase(
        target=target,
        shapes=tuple((arg, dims, own) for arg, (dims, own) in shapes.items()),
        dtype=dtype or "fp32",
        backward=backward,
        grad=grad,
        config=tuple(f"{key}={value.partition('=')[2].strip()}" for key, value in config.items()),
    )


def read_cases(text: str, source: str) -> list[Any]:
    """The cases of a ``--cases`` file: each line either a trace case (it starts with ``trace``,
    :func:`parse_trace_case`) or one or more ordinary case specs separated by spaces; ``#`` starts
    a comment. A line that cannot be read raises a one-line error naming ``source`` and the line."""
    from .cases import parse_case

    out: list[tuple[Any, int]] = []  # each case and the line it was read from
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        where = f"{source}, line {number}"
        if stripped.split(None, 1)[:1] == ["trace"]:
            try:
                case = parse_trace_case(stripped)
                resolve_target(case)  # the file is there (from the current folder, as trace reads it)
                out.append((case, number))
            except MemmodelError as exc:
                raise TraceError(f"{where}: {exc}") from None
            continue
        for spec in line.split("#", 1)[0].split():
            out.append((parse_case(spec), number))
    seen: dict[str, int] = {}
    for case, number in out:
        if isinstance(case, TraceCase):
            first = seen.setdefault(case.id, number)
            if first != number:
                raise TraceError(f"{source}, line {number}: the same trace case as line {first}")
    return [case for case, _ in out]


def resolve_target(case: TraceCase, near: Path | None = None) -> str:
    """``case.target`` with its file found: as written, from the current folder; else (a record
    rescored from elsewhere) beside ``near`` or in a folder above it. Raises a one-line error
    where the file is nowhere."""
    path = Path(case.path)
    if path.is_absolute() or path.is_file() or near is None:
        if not path.is_file():
            raise TraceError(f"{case.path}: no such file (the function of trace case {case.id})")
        return case.target
    folder = near.resolve() if near.is_dir() else near.resolve().parent
    for up in (folder, *folder.parents):
        if (up / path).is_file():
            return f"{(up / path).as_posix()}:{case.function}"
    raise TraceError(
        f"{case.path}: no such file, from here nor from the record's folder or above it (trace case {case.id})"
    )


def source_digest(path: str) -> str | None:
    """SHA-256 of a traced file's text (a record keeps it: a rescore says when the file changed)."""
    import hashlib

    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def trace_cases(cases: Iterable[Any]) -> list[TraceCase]:
    """The trace cases among ``cases``."""
    return [c for c in cases if isinstance(c, TraceCase)]
