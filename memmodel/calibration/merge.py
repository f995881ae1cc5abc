"""A calibration of one implementation on its own (``memmodel calibrate --impl NAME``) merged
into a full calibration's result, so that one profile is fitted from both: the full run's
ceilings and overheads, and the implementation's reference points beside the others'. Pure:
tested on the CPU."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from ..errors import MemmodelError

#: where an implementation's reference points lie in a calibration's ``measurements``
POINT_LISTS = (("sdpa",), ("backward", "sdpa_backward"))


def merge_impl(full: Mapping[str, Any], part: Mapping[str, Any]) -> dict[str, Any]:
    """``full`` (a calibration result) with ``part``'s points (a result of ``calibrate --impl``)
    in place of any it had for that implementation; ``merged`` lists what came from where.
    Both must come from the same kind of GPU."""
    impl = part.get("impl")
    if not impl:
        raise MemmodelError("the calibration to merge names no implementation (made by 'calibrate --impl NAME')")
    got, want = (part.get("device") or {}).get("name"), (full.get("device") or {}).get("name")
    if got != want:
        raise MemmodelError(f"cannot merge a calibration of {impl} on {got!r} into one of {want!r}")
    out = copy.deepcopy(dict(full))
    m = out.setdefault("measurements", {})
    src = part.get("measurements") or {}
    for path in POINT_LISTS:
        theirs = _points(src, path)
        if theirs is None:
            continue
        holder = m
        for key in path:
            holder = holder.setdefault(key, {})
        mine = [p for p in holder.get("points", []) if p.get("impl") != impl]
        holder["points"] = mine + [p for p in theirs if p.get("impl") == impl]
    out.setdefault("merged", []).append(
        {"impl": impl, "date": part.get("date"), "command": part.get("command"), "memmodel": part.get("memmodel")}
    )
    return out


def _points(m: Mapping[str, Any], path: tuple[str, ...]) -> list[dict[str, Any]] | None:
    node: Any = m
    for key in path:
        if not isinstance(node, Mapping) or key not in node:
            return None
        node = node[key]
    points = node.get("points") if isinstance(node, Mapping) else None
    return list(points) if isinstance(points, list) else None


def cite_impl(data: dict[str, Any], part: Mapping[str, Any], key: str | None = None) -> dict[str, Any]:
    """A profile's YAML mapping (``data``) with every ``implementations.<impl>`` figure that
    cites ``measured`` citing instead a source of its own, made of ``part`` (the merged run of
    :func:`merge_impl`: its date, machine, software and command)."""
    impl = str(part.get("impl"))
    key = key or f"measured-{impl}"
    device = part.get("device") or {}
    software = ", ".join(
        f"{k.removesuffix('_version').replace('_', '-')} {v}" for k, v in device.items() if k.endswith("_version") and v
    )
    date = str(part.get("date") or "")
    source = {
        "title": f"{impl} measured on {device.get('name', '?')}, {date}, memmodel {part.get('memmodel', '?')}",
        "kind": "measured",
        "machine": str(device.get("name", "?"))
        + (f" ({device['sm_count']} SMs)" if device.get("sm_count") else "")
        + (f"; {software}" if software else ""),
        "date": date,
        "command": str(part.get("command") or f"memmodel calibrate --impl {impl} --format json"),
    }
    figures = (data.get("implementations") or {}).get(impl) or {}
    for figure in figures.values():
        if isinstance(figure, dict) and figure.get("source") == "measured":
            figure["source"] = key
    data.setdefault("sources", {})[key] = source
    return data
