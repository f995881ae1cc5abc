"""JSON and CSV views of rooflines (schema ``memmodel.roofline/1``). No rich, no click."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .. import __version__
from ..roofline import ASSUMPTIONS, ROOFLINE_SCHEMA, Roofline
from ..traffic.ledger import LEVELS
from .compare import caveats


def roofline_to_dict(rooflines: Sequence[Roofline]) -> dict[str, Any]:
    """One object: the workload, and per GPU its ceilings, ridge points and kernel points."""
    first = rooflines[0].comparison
    gpus = []
    for r in rooflines:
        p = r.profile
        gpus.append(
            {
                "hardware": {
                    "name": p.name,
                    "full_name": p.full_name,
                    "origin": p.origin,
                    "path": str(p.path) if p.path else None,
                },
                "ceilings": [c.to_dict() for c in r.ceilings],
                "ridge_points": [x.to_dict() for x in r.ridge_points],
                "points": [x.to_dict() for x in r.points],
                "warnings": list(r.comparison.warnings) if r.comparison else [],
                "caveats": caveats(r.comparison) if r.comparison else [],
            }
        )
    assumptions = list(ASSUMPTIONS)
    for r in rooflines:
        for line in r.comparison.assumptions if r.comparison else ():
            if line not in assumptions:
                assumptions.append(line)
    return {
        "schema": ROOFLINE_SCHEMA,
        "memmodel_version": __version__,
        "workload": first.workload.to_dict() if first else None,
        "tiled": first.tiled.traffic.variant if first else None,
        "options": dict(vars(first.options)) if first else None,
        "gpus": gpus,
        "assumptions": assumptions,
    }


#: Columns of ``memmodel roofline --format csv``. Each row is one record: a ``ceiling``
#: (name, kind, value, unit), a ``ridge`` point (memory, compute, value in FLOP/B or exp/B,
#: unit) or a kernel ``point`` (algorithm ... roof). Cells that do not apply are empty.
#: Stable: new columns are appended, never renamed.
ROOFLINE_CSV_COLUMNS = (
    "record",
    "gpu",
    "name",
    "kind",
    "value",
    "unit",
    "memory",
    "compute",
    "algorithm",
    "variant",
    "kernel",
    "flops",
    "exp_ops",
    *(f"{level}_bytes" for level in LEVELS),
    *(f"{level}_intensity" for level in LEVELS),
    "predicted_time_s",
    "attainable_flops_per_s",
    "bound",
    "roof",
)


def roofline_csv_rows(rooflines: Sequence[Roofline]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for r in rooflines:
        gpu = r.profile.name
        for c in r.ceilings:
            rows.append(
                {"record": "ceiling", "gpu": gpu, "name": c.name, "kind": c.kind, "value": c.value, "unit": c.unit}
            )
        for x in r.ridge_points:
            rows.append(
                {
                    "record": "ridge",
                    "gpu": gpu,
                    "name": f"{x.memory}/{x.compute}",
                    "value": x.intensity,
                    "unit": x.unit,
                    "memory": x.memory,
                    "compute": x.compute,
                }
            )
        for p in r.points:
            row: dict[str, Any] = {
                "record": "point",
                "gpu": gpu,
                "name": f"{p.algorithm}/{p.kernel}",
                "algorithm": p.algorithm,
                "variant": p.variant,
                "kernel": p.kernel,
                "flops": p.flops,
                "exp_ops": p.exp_ops,
                "predicted_time_s": p.time_s,
                "attainable_flops_per_s": p.performance_flops_per_s,
                "bound": p.bound,
                "roof": p.roof,
            }
            for level in LEVELS:
                row[f"{level}_bytes"] = p.bytes.get(level, 0)
                intensity = p.intensity.get(level)
                row[f"{level}_intensity"] = "" if intensity is None else intensity
            rows.append(row)
    return rows
