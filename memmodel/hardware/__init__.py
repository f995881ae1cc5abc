"""GPU hardware profiles: YAML files in, frozen dataclasses out.

A leaf of memmodel: it knows the file format and the GPU, nothing of the model (traffic,
timing, implementations import it, never the reverse). Modules: :mod:`.profile` (the
dataclasses, units in their field names), :mod:`.schema` (the fields, their kinds and the
names the format admits), :mod:`.parse` (YAML mapping -> :class:`Profile`, validated),
:mod:`.derive` (a sibling's missing figures from a measured profile), :mod:`.load` (lookup by
name or path), :mod:`.interconnect` (the links between GPUs). The bundled profiles are the
package data in ``profiles/``; the format is described in docs/profiles.md.
"""

from __future__ import annotations

from ..errors import ProfileError
from .derive import DERIVE_RULES, LIBRARY_FIELDS, RULE_TEXT, derive_rule
from .interconnect import COLLECTIVES, TOPOLOGIES, Interconnect
from .load import available, bundled_dir, is_path, load_file, load_profile, search_dirs, user_dir
from .parse import parse_profile
from .profile import (
    SOURCE_KINDS,
    Curve,
    HostFigures,
    ImplementationFigures,
    KernelFigures,
    KernelRates,
    MemoryLevel,
    Profile,
    Provenance,
    Source,
    Sram,
    interpolate_log2,
)
from .schema import (
    CAUSAL_CURVE_DIMS,
    CAUSAL_CURVE_PREFIXES,
    COMPUTE_DTYPES,
    DEFAULT_GPU,
    MAX_EFFICIENCY,
    MMA_SYNC_DTYPES,
    PROFILE_IMPLEMENTATIONS,
    SCHEMA,
    TILE_EFFICIENCY_TILES,
)

__all__ = [
    "CAUSAL_CURVE_DIMS",
    "CAUSAL_CURVE_PREFIXES",
    "COLLECTIVES",
    "COMPUTE_DTYPES",
    "DEFAULT_GPU",
    "DERIVE_RULES",
    "LIBRARY_FIELDS",
    "MAX_EFFICIENCY",
    "MMA_SYNC_DTYPES",
    "PROFILE_IMPLEMENTATIONS",
    "RULE_TEXT",
    "SCHEMA",
    "SOURCE_KINDS",
    "TILE_EFFICIENCY_TILES",
    "TOPOLOGIES",
    "Curve",
    "HostFigures",
    "ImplementationFigures",
    "Interconnect",
    "KernelFigures",
    "KernelRates",
    "MemoryLevel",
    "Profile",
    "ProfileError",
    "Provenance",
    "Source",
    "Sram",
    "available",
    "bundled_dir",
    "derive_rule",
    "interpolate_log2",
    "is_path",
    "load_file",
    "load_profile",
    "parse_profile",
    "search_dirs",
    "user_dir",
]
