"""The ``sources`` entry a profile figure fitted from a validate record cites."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def put_source(data: dict[str, Any], key: str, *, title: str, machine: str, date: str, command: str) -> dict[str, Any]:
    """``data`` (a profile's YAML mapping) with ``sources[key]``: a measurement (``kind: measured``)."""
    sources = dict(data.get("sources") or {})
    sources[key] = {"title": title, "kind": "measured", "machine": machine, "date": date, "command": command}
    data["sources"] = sources
    return data


def with_record_source(
    data: dict[str, Any], key: str, title: str, where: str, record: Mapping[str, Any], command: str
) -> dict[str, Any]:
    """``data`` (a profile's YAML mapping) with ``sources[key]``: a measurement of ``record``
    (a ``memmodel validate`` record on the lent H200; its device, memmodel version and start date),
    ``title`` followed by the device and ``where`` (the records' paths), made by ``command``."""
    device = record.get("device", "GPU")
    return put_source(
        data,
        key,
        title=f"{title}, {device} ({where})",
        machine=f"lent {device} (nvidia-h200), memmodel {record.get('memmodel_version', '?')}",
        date=str(record.get("started", ""))[:10],
        command=command,
    )
