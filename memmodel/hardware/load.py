"""Finding and reading profiles: a name or a path in, a :class:`~.profile.Profile` out.

Anything with a path separator or a ``.yaml``/``.yml`` suffix is a file; a bare name is
searched in ``$MEMMODEL_HARDWARE_PATH`` (``os.pathsep`` separated folders), then the user
config folder (``$XDG_CONFIG_HOME/memmodel/hardware``, default ``~/.config/memmodel/hardware``),
then the profiles bundled in this package (``profiles/``). Errors are :class:`ProfileError`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..errors import ProfileError
from .derive import derive, same_family, transfer
from .parse import parse_profile
from .profile import Profile
from .schema import field_error


def load_file(path: str | os.PathLike[str], origin: str = "file", _chain: tuple[str, ...] = ()) -> Profile:
    """Read and validate one YAML profile file (deriving what it lacks from ``derive_from``)."""
    import yaml  # local: keeps `import memmodel` light

    from ..fileio import read_text

    p = Path(path)
    where = str(path)
    text = read_text(path, limit=2**20, what="YAML file", error=ProfileError)  # profiles are a few kB
    try:
        data = _parsed(p, text)
        if data is None:
            # libyaml when present: the pure-Python parser alone takes ~15 ms of start-up
            data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        # say it in the pure-Python parser's words, so messages do not depend on libyaml
        exc = _python_yaml_error(yaml, text) or exc
        mark = getattr(exc, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "not valid YAML"
        raise ProfileError(f"{where}: invalid YAML{line}: {problem}") from None
    except RecursionError:
        raise ProfileError(f"{where}: invalid YAML: nested too deeply") from None
    except (ValueError, TypeError, AttributeError) as exc:  # PyYAML's constructors: 2024-13-45, !!int abc, 5000 digits
        raise ProfileError(f"{where}: invalid YAML: a value cannot be read ({_shorten(str(exc))})") from None
    if isinstance(data, Mapping):
        given = [k for k in ("derive_from", "transfer_from", "library_rates_from") if data.get(k) is not None]
        if len(given) > 1:
            raise field_error(
                where,
                given[1],
                f"give one of derive_from (a sibling of the same architecture) and transfer_from, not {' and '.join(given)}",
            )
        base = None
        if given == ["derive_from"]:
            base = _base_profile(data["derive_from"], "derive_from", where, p, _chain)
            data = derive(data, where, base)
        elif given:  # library_rates_from: the older name of transfer_from
            base = _base_profile(data[given[0]], given[0], where, p, _chain)
            data = transfer(data, where, base)
        data = same_family(data, base)
        if given == ["derive_from"]:
            return replace(parse_profile(data, where, path=p, origin=origin), base_class=base.rate_class)
    return parse_profile(data, where, path=p, origin=origin)


def _base_profile(spec: object, key: str, where: str, path: Path, chain: tuple[str, ...]) -> Profile:
    """The profile ``key`` (``derive_from``, ``library_rates_from``) names: a name on the search
    path or a file (relative to ``path``'s folder); refuses a cycle."""
    if not isinstance(spec, str) or not spec.strip():
        raise field_error(where, key, "must name a profile (e.g. h200) or a path to one")
    me = str(path.resolve())
    if me in chain or len(chain) > 8:
        raise field_error(where, key, f"{spec!r} derives, directly or not, from this profile: a cycle")
    if is_path(spec):
        spec_path = Path(spec).expanduser()
        return load_file(spec_path if spec_path.is_absolute() else path.parent / spec_path, _chain=(*chain, me))
    return load_profile(spec, _chain=(*chain, me))


#: The bundled profiles as parsed, one JSON file per YAML file (``scripts/update_profile_cache.py``
#: writes them; a test checks they are current): reading one is ~20× faster than parsing the
#: YAML, which every start-up does for the profile asked for and the one it derives from
PARSED_DIR = Path(__file__).resolve().parent / "profiles" / "_parsed"
#: A mapping with a key that is not a string (a curve's head dims) is stored as its pairs
_PAIRS = "(pairs)"


def content_key(text: str) -> str:
    """What a parsed copy of a YAML file is checked against: the CRC-32 and length of its bytes."""
    import binascii

    raw = text.encode("utf-8")
    return f"{binascii.crc32(raw):08x}:{len(raw)}"


def parsed_entry(text: str, data: Any) -> dict[str, Any]:
    """The cached form of ``data``, ``text`` parsed (what :data:`PARSED_DIR` holds)."""

    def encode(node: Any) -> Any:
        if isinstance(node, Mapping):
            if _PAIRS not in node and all(isinstance(k, str) for k in node):
                return {k: encode(v) for k, v in node.items()}
            return {_PAIRS: [[k, encode(v)] for k, v in node.items()]}
        if isinstance(node, list):
            return [encode(v) for v in node]
        if node is None or isinstance(node, (str, int, float)):  # bool is an int
            return node
        raise TypeError(f"a profile value of type {type(node).__name__} cannot be cached as JSON: {node!r}")

    return {"key": content_key(text), "data": encode(data)}


def _decode(node: dict[str, Any]) -> Any:
    return dict(node[_PAIRS]) if len(node) == 1 and _PAIRS in node else node


def _parsed(path: Path, text: str) -> Any:
    """The bundled profile ``path`` as parsed, from its cached copy if that was made of this
    very text; None otherwise (parse the YAML)."""
    if path.suffix != ".yaml" or path.resolve().parent != PARSED_DIR.parent:
        return None
    cached = PARSED_DIR / f"{path.stem}.json"
    try:
        raw = cached.read_text(encoding="utf-8")
    except OSError:
        return None
    import json

    try:
        entry = json.loads(raw, object_hook=_decode)
    except ValueError:
        return None
    if not isinstance(entry, dict) or entry.get("key") != content_key(text):
        return None
    return entry.get("data")


def _python_yaml_error(yaml: Any, text: str) -> Exception | None:
    try:
        yaml.safe_load(text)
    except yaml.YAMLError as exc:
        return exc
    except (RecursionError, ValueError, TypeError, AttributeError):
        return None
    return None


def _shorten(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def bundled_dir() -> Path:
    """Folder of the profiles shipped with memmodel (package data of this package)."""
    folder = Path(__file__).resolve().parent / "profiles"
    if folder.is_dir() and any(folder.glob("*.yaml")):
        return folder
    raise ProfileError("the bundled hardware profiles are missing from this installation")  # pragma: no cover


def user_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "memmodel" / "hardware"


def search_dirs() -> list[tuple[str, Path]]:
    """(origin, folder) in lookup order: $MEMMODEL_HARDWARE_PATH, user config, bundled."""
    dirs: list[tuple[str, Path]] = []
    for part in os.environ.get("MEMMODEL_HARDWARE_PATH", "").split(os.pathsep):
        if part.strip():
            dirs.append(("env", Path(part).expanduser()))
    dirs.append(("user", user_dir()))
    dirs.append(("bundled", bundled_dir()))
    return dirs


def available() -> dict[str, tuple[str, Path]]:
    """Profile name (file stem) -> (origin, path); earlier folders shadow later ones."""
    found: dict[str, tuple[str, Path]] = {}
    for origin, folder in search_dirs():
        if not folder.is_dir():
            continue
        for file in sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")]):
            found.setdefault(file.stem, (origin, file))
    return dict(sorted(found.items()))


def is_path(spec: str) -> bool:
    return os.sep in spec or "/" in spec or spec.endswith((".yaml", ".yml"))


def load_profile(spec: str | os.PathLike[str], _chain: tuple[str, ...] = ()) -> Profile:
    """A profile by bundled/user name (``a100``) or by path (``./mine.yaml``)."""
    text = os.fspath(spec)
    if is_path(text):
        return load_file(text, _chain=_chain)
    names = available()
    key = text.strip().lower()
    if key in names:
        origin, file = names[key]
        return load_file(file, origin=origin, _chain=_chain)
    close = _suggest(key, list(names))
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    raise ProfileError(f"unknown GPU {text!r}: {hint}known: {', '.join(names)} (or give a path to a YAML profile)")


def _suggest(key: str, names: list[str]) -> list[str]:
    """Names close to ``key``: the same but for separators (h100sxm), those it begins (h100 ->
    h100-pcie, h100-sxm), else difflib's closest."""

    def norm(text: str) -> str:
        return "".join(ch for ch in text.lower() if ch.isalnum())

    same = [n for n in names if norm(n) == norm(key)]
    if same:
        return same[:1]
    starts = [n for n in names if norm(key) and norm(n).startswith(norm(key))]
    if 0 < len(starts) <= 3:
        return starts
    import difflib

    return difflib.get_close_matches(key, names, n=1, cutoff=0.5)
