"""Parsing: a profile's YAML mapping, validated, into a :class:`~.profile.Profile`.

Unknown keys are refused with the closest allowed one; every number is read by
:func:`memmodel.units.parse` for its field's kind and checked against plausibility floors;
errors read ``file -> field: message`` (:func:`.schema.field_error`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from .. import units
from .interconnect import COLLECTIVES, TOPOLOGIES, Interconnect
from .profile import (
    SOURCE_KINDS,
    Curve,
    HostFigures,
    ImplementationFigures,
    KernelRates,
    MemoryLevel,
    Profile,
    Provenance,
    Source,
    Sram,
)
from .schema import (
    CEILINGS,
    COMPUTE_DTYPES,
    CURVES,
    FIELDS,
    FLOORS,
    HOST_CEILINGS,
    HOST_FIGURES,
    HOST_ZERO,
    IMPLEMENTATION_CURVES,
    IMPLEMENTATION_VALUES,
    LOADED_CLOCK_DTYPES,
    MALL_FIELDS,
    MAX_EFFICIENCY,
    MMA_SYNC_DTYPES,
    PEAK_SLACK,
    PROFILE_IMPLEMENTATIONS,
    SCALAR_OR_CURVE,
    SCHEMA,
    SECTIONS,
    SHARE_FIGURES,
    SHARES_OF_ONE,
    TEXT_FIELDS,
    TILE_EFFICIENCY_TILES,
    UNEVEN_CAUSAL_DIMS,
    ZERO_ALLOWED,
    ZERO_COSTS,
    allowed_children,
    field_error,
)


def _walk(data: Mapping[str, Any], prefix: str, where: str) -> Iterator[tuple[str, Any]]:
    """Yield (path, value) for every leaf; refuse unknown keys with a suggestion."""
    allowed = allowed_children(prefix)
    for key, value in data.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if path == "sources":  # checked by _parse_sources
            continue
        if not isinstance(key, str) or key not in allowed:
            import difflib

            hint = difflib.get_close_matches(str(key), sorted(allowed), n=1)
            extra = f" (did you mean {hint[0]!r}?)" if hint else f" (allowed: {', '.join(sorted(allowed))})"
            raise field_error(where, path, f"unknown key{extra}")
        if path in SECTIONS:
            if not isinstance(value, Mapping):
                raise field_error(where, path, "must be a mapping of fields")
            yield from _walk(value, path, where)
        else:
            yield path, value


def parse_profile(data: object, where: str = "<profile>", *, path: Path | None = None, origin: str = "file") -> Profile:
    """Validate parsed YAML and build a :class:`Profile`. ``where`` names the file in errors."""
    if not isinstance(data, Mapping):
        raise field_error(where, "", "a profile must be a YAML mapping (name:, memory:, compute:, ...)")
    sources = _parse_sources(data.get("sources"), where)
    values: dict[str, float] = {}
    curves: dict[str, Curve] = {}
    texts: dict[str, str] = {}
    provenance: dict[str, Provenance] = {}
    for fpath, raw in _walk(data, "", where):
        if fpath in TEXT_FIELDS:
            if not isinstance(raw, str) or not raw.strip():
                raise field_error(where, fpath, "must be a non-empty string")
            texts[fpath] = raw.strip()
            continue
        kind = FIELDS[fpath][0]
        source = note = None
        if fpath in CURVES and isinstance(raw, Mapping) and "value" not in raw:
            raw = {"value": raw}  # a bare curve: {64: 0.9, 128: 0.8}
        if isinstance(raw, Mapping):
            extra = set(raw) - {"value", "source", "note"}
            if extra:
                raise field_error(
                    where, fpath, f"unknown key {sorted(map(str, extra))[0]!r} (allowed: value, source, note)"
                )
            if "value" not in raw:
                raise field_error(where, fpath, "missing 'value'")
            source, note, raw = raw.get("source"), raw.get("note"), raw["value"]
            if source is not None and (not isinstance(source, str) or source not in sources):
                known = ", ".join(sources) or "none are defined under 'sources'"
                raise field_error(where, fpath, f"source {source!r} is not listed under 'sources' ({known})")
            if note is not None and not isinstance(note, str):
                raise field_error(where, fpath, "note must be a string")
        source_kind = sources[source].kind if source is not None else None
        if fpath in SCALAR_OR_CURVE and not isinstance(raw, Mapping):
            # one figure for every head dim (profiles written before it was measured per head dim)
            try:
                curves[fpath] = ((1, units.parse(raw, kind)),)
            except units.UnitError as exc:
                raise field_error(where, fpath, str(exc)) from None
            provenance[fpath] = Provenance(source=source, note=note, text=str(raw), kind=source_kind)
            continue
        if fpath in CURVES:
            curves[fpath] = _parse_curve(raw, kind, CURVES[fpath], where, fpath)
            provenance[fpath] = Provenance(source=source, note=note, text=str(raw), kind=source_kind)
            continue
        try:
            values[fpath] = 0.0 if fpath in HOST_ZERO and _zero_of(raw, kind) else units.parse(raw, kind)
        except units.UnitError as exc:
            raise field_error(where, fpath, str(exc)) from None
        provenance[fpath] = Provenance(source=source, note=note, text=str(raw), kind=source_kind)
    for fpath, (_, required) in FIELDS.items():
        if required and fpath not in values:
            raise field_error(where, fpath, f"missing (expected {units.EXAMPLES[FIELDS[fpath][0]]})")
    for fpath, required in TEXT_FIELDS.items():
        if required and fpath not in texts:
            raise field_error(where, fpath, "missing (a non-empty string)")
    if "schema" in texts and texts["schema"] != SCHEMA:
        raise field_error(where, "schema", f"{texts['schema']!r} is not supported (expected {SCHEMA!r})")

    sm_count = int(values["sm_count"])
    hbm = MemoryLevel(
        "hbm", values["memory.hbm.capacity"], values["memory.hbm.bandwidth"], values["memory.hbm.latency"]
    )
    l2 = MemoryLevel(
        "l2",
        values["memory.l2.capacity"],
        values["memory.l2.bandwidth"],
        values["memory.l2.latency"],
        values.get("memory.l2.effective_capacity"),
    )
    sram = Sram(
        values["memory.sram.capacity_per_sm"],
        values["memory.sram.bandwidth_per_sm"],
        values["memory.sram.latency"],
        sm_count,
    )
    _check_floors(where, values, provenance)
    _check_consistency(where, hbm, l2, sram)
    mall = _mall(where, values, hbm, l2)
    xcds = _xcds(where, values, provenance, mall)
    compute = {d: values[f"compute.{d}"] for d in COMPUTE_DTYPES if f"compute.{d}" in values}
    return Profile(
        name=texts["name"],
        full_name=texts["full_name"],
        vendor=texts["vendor"],
        architecture=texts["architecture"],
        sm_count=sm_count,
        clock_hz=values.get("clock"),
        hbm=hbm,
        l2=l2,
        sram=sram,
        compute_flops_per_s=compute,
        exp_ops_per_s=values.get("compute.exp"),
        launch_overhead_s=values.get("launch_overhead"),
        event_overhead_s=values.get("event_overhead"),
        sources=sources,
        provenance=provenance,
        path=path,
        origin=origin,
        mma_sync_flops_per_s={
            d: values[f"compute.mma_sync.{d}"] for d in MMA_SYNC_DTYPES if f"compute.mma_sync.{d}" in values
        },
        mma_sync_one_cta_share=values.get("compute.mma_sync.one_cta_share"),
        clock_under_load_hz=_loaded_clocks(where, values),
        kernel_rates=KernelRates(
            gemm_read_bytes_per_s=values.get("kernels.gemm.read_bandwidth"),
            gemm_write_bytes_per_s=values.get("kernels.gemm.write_bandwidth"),
            softmax_bytes_per_s=curves.get("kernels.softmax.bandwidth", ()),
            softmax_row_time_s=values.get("kernels.softmax.row_time"),
            elementwise_bytes_per_s=values.get("kernels.elementwise.bandwidth"),
            gemm_unaligned_read_bytes_per_s=curves.get("kernels.gemm.unaligned_read_bandwidth", ()),
            gemm_unaligned_write_bytes_per_s=curves.get("kernels.gemm.unaligned_write_bandwidth", ()),
            softmax_unaligned_bytes_per_s=curves.get("kernels.softmax.unaligned_bandwidth", ()),
            softmax_masked_bytes_per_s=curves.get("kernels.softmax.masked_bandwidth", ()),
            softmax_backward_bytes_per_s=curves.get("kernels.softmax_backward.bandwidth", ()),
            dropout_bytes_per_s=values.get("kernels.dropout.bandwidth"),
            dropout_backward_bytes_per_s=values.get("kernels.dropout_backward.bandwidth"),
            elementwise_backward_bytes_per_s=values.get("kernels.elementwise_backward.bandwidth"),
            scale_bytes_per_s=values.get("kernels.scale.bandwidth"),
            copy_bytes_per_s=values.get("kernels.copy.bandwidth"),
            fp8_cast_bytes_per_s=values.get("kernels.fp8_cast.bandwidth"),
            cast_bytes_per_s=values.get("kernels.cast.bandwidth"),
            gather_bytes_per_s=curves.get("kernels.gather.bandwidth", ()),
            gather_4byte_bytes_per_s=curves.get("kernels.gather.bandwidth_4byte", ()),
            expand_bytes_per_s=values.get("kernels.gather.expand_bandwidth"),
            expand_4byte_bytes_per_s=values.get("kernels.gather.expand_bandwidth_4byte"),
            cat_bytes_per_s=values.get("kernels.gather.cat_bandwidth"),
            softmax_row_floor_s=curves.get("kernels.softmax.row_floor", ()),
            softmax_row_floor_fp32_s=curves.get("kernels.softmax.row_floor_fp32", ()),
            small_vectorised_s=values.get("kernels.small.vectorised"),
            small_generic_s=values.get("kernels.small.generic"),
            small_cast_s=values.get("kernels.small.cast"),
            small_splitk_reduce_s=values.get("kernels.small.splitk_reduce"),
            small_gemm_s=values.get("kernels.small.gemm"),
            small_dropout_s=values.get("kernels.small.dropout"),
            small_reduction_s=curves.get("kernels.small.reduction", ()),
            small_reduction_fp32_s=curves.get("kernels.small.reduction_fp32", ()),
            small_column_reduction_s=curves.get("kernels.small.column_reduction", ()),
            column_reduction_bytes_per_s=values.get("kernels.reduction.column_bandwidth"),
            softmax_fp32_bytes_per_s=curves.get("kernels.softmax.fp32_bandwidth", ()),
            reduction_bytes_per_s=values.get("kernels.reduction.bandwidth"),
        ),
        implementation_figures=_implementation_figures(values, curves),
        compute_capability=texts.get("compute_capability"),
        derived_from=texts.get("derive_from"),
        transferred_from=texts.get("transfer_from") or texts.get("library_rates_from"),
        figures={**values, **curves},
        interconnect=_interconnect(where, values, curves, texts),
        mall=mall,
        l2_xcds=xcds,
        host=_host(values),
    )


def _loaded_clocks(where: str, values: Mapping[str, float]) -> dict[str, float]:
    """``clock_under_load.<dtype>``: each a clock no higher than the peak ``clock`` (which it needs:
    the light-load rule raises a kernel's clock from it toward the peak)."""
    out = {d: values[f"clock_under_load.{d}"] for d in LOADED_CLOCK_DTYPES if f"clock_under_load.{d}" in values}
    if not out:
        return out
    peak = values.get("clock")
    first = next(iter(out))
    if peak is None:
        raise field_error(where, f"clock_under_load.{first}", "needs clock (the peak engine clock) beside it")
    for dtype, hz in out.items():
        if hz > peak:
            raise field_error(
                where,
                f"clock_under_load.{dtype}",
                f"{hz / 1e6:g} MHz is above the peak clock ({peak / 1e6:g} MHz): a clock under load is at most the peak",
            )
    return out


def _host(values: Mapping[str, float]) -> HostFigures | None:
    """``host:`` as :class:`HostFigures`, None where the profile gives none of its figures."""
    given = {attr: values[f"host.{leaf}"] for leaf, attr in HOST_FIGURES.items() if f"host.{leaf}" in values}
    return HostFigures(**given) if given else None


def _mall(where: str, values: Mapping[str, float], hbm: MemoryLevel, l2: MemoryLevel) -> MemoryLevel | None:
    """``memory.mall`` (all three figures or none), between the L2 and HBM in size; None if absent."""
    given = [f for f in MALL_FIELDS if f in values]
    if not given:
        return None
    missing = [f for f in MALL_FIELDS if f not in values]
    if missing:
        raise field_error(where, missing[0], "missing: memory.mall gives capacity, bandwidth and latency")
    capacity = values["memory.mall.capacity"]
    if capacity <= l2.capacity_bytes or capacity >= hbm.capacity_bytes:
        raise field_error(
            where,
            "memory.mall.capacity",
            f"{units.format_bytes(capacity, binary=True)} is not between the L2 "
            f"({units.format_bytes(l2.capacity_bytes, binary=True)}) and HBM ({units.format_bytes(hbm.capacity_bytes)})",
        )
    if values["memory.mall.latency"] > 1e-3:
        raise field_error(where, "memory.mall.latency", "is not a plausible memory latency (under 1 ms)")
    return MemoryLevel("mall", capacity, values["memory.mall.bandwidth"], values["memory.mall.latency"])


def _xcds(
    where: str, values: Mapping[str, float], provenance: Mapping[str, Provenance], mall: MemoryLevel | None
) -> int:
    """``memory.l2.xcds``: a whole number that splits the SMs evenly, and only beside a MALL (the
    level an XCD's L2 misses go to); 1 where absent."""
    if "memory.l2.xcds" not in values:
        return 1
    text, sms = provenance["memory.l2.xcds"].text, int(values["sm_count"])
    xcds = values["memory.l2.xcds"]
    if xcds != int(xcds) or xcds < 1 or sms % int(xcds):
        raise field_error(where, "memory.l2.xcds", f"{text!r} does not split the {sms} SMs evenly")
    if mall is None and xcds > 1:
        raise field_error(where, "memory.l2.xcds", "needs memory.mall (the cache an XCD's L2 misses go to)")
    return int(xcds)


def _interconnect(
    where: str, values: Mapping[str, float], curves: Mapping[str, Any], texts: Mapping[str, str]
) -> Interconnect | None:
    """The ``interconnect:`` section, or None where the profile has none (its bandwidth is required)."""
    given = [k for k in (*values, *curves, *texts) if k.startswith("interconnect.")]
    if not given:
        return None
    if "interconnect.bandwidth" not in values:
        raise field_error(where, "interconnect.bandwidth", "missing (per GPU, per direction, e.g. 450 GB/s)")
    topology = texts.get("interconnect.topology", "switch")
    if topology not in TOPOLOGIES:
        raise field_error(where, "interconnect.topology", f"{topology!r} is not one of {', '.join(TOPOLOGIES)}")
    peers = values.get("interconnect.peers")
    if topology == "mesh" and not peers:
        raise field_error(where, "interconnect.peers", "missing: a mesh splits its bandwidth over this many peers")
    gpn = values.get("interconnect.gpus_per_node")
    return Interconnect(
        bandwidth_bytes_per_s=values["interconnect.bandwidth"],
        latency_s=values.get("interconnect.latency", 0.0),
        topology=topology,
        peers=int(peers) if peers else None,
        gpus_per_node=int(gpn) if gpn else None,
        inter_node_bandwidth_bytes_per_s=values.get("interconnect.inter_node_bandwidth"),
        inter_node_latency_s=values.get("interconnect.inter_node_latency"),
        **{f"{c}_efficiency": curves.get(f"interconnect.{c}_efficiency", ()) for c in COLLECTIVES},
        p2p_sms=int(values.get("interconnect.p2p_sms", 0)),
        p2p_idle_sms=int(values.get("interconnect.p2p_idle_sms", 0)),
    )


def _implementation_figures(
    values: Mapping[str, float], curves: Mapping[str, Curve]
) -> dict[str, ImplementationFigures]:
    """``implementations.<name>.*`` as one :class:`ImplementationFigures` per implementation
    that has any figure, in :data:`PROFILE_IMPLEMENTATIONS` order."""
    out: dict[str, ImplementationFigures] = {}
    for name in PROFILE_IMPLEMENTATIONS:
        prefix = f"implementations.{name}."
        given: dict[str, Any] = {
            attr: curves[prefix + leaf] for leaf, attr in IMPLEMENTATION_CURVES.items() if prefix + leaf in curves
        }
        given.update(
            {attr: values[prefix + leaf] for leaf, attr in IMPLEMENTATION_VALUES.items() if prefix + leaf in values}
        )
        tiles = {
            (a, b): curves[f"{prefix}efficiency_{a}x{b}"]
            for a, b in TILE_EFFICIENCY_TILES
            if f"{prefix}efficiency_{a}x{b}" in curves
        }
        if tiles:
            given["tile_efficiency"] = tiles
        uneven = {
            d: curves[f"{prefix}uneven_causal_slowdown_d{d}"]
            for d in UNEVEN_CAUSAL_DIMS
            if f"{prefix}uneven_causal_slowdown_d{d}" in curves
        }
        if uneven:
            given["uneven_causal_slowdown"] = uneven
        if prefix + "combine_time" in values or prefix + "combine_time_per_split" in values:
            given["combine_time_s"] = (
                values.get(prefix + "combine_time", 0.0),
                values.get(prefix + "combine_time_per_split", 0.0),
            )
        if given:
            out[name] = ImplementationFigures(name, **given)
    return out


def _parse_curve(raw: object, kind: units.Kind, key_name: str, where: str, fpath: str) -> Curve:
    """A curve ``{whole number: value}``, sorted by key; values checked like plain fields."""
    keys = "{64: ..., 128: ...}" if key_name == "head dim" else "{1024: ..., 4096: ...}"
    example = f"a mapping from {key_name} to {units.EXAMPLES[kind]}, e.g. {keys}"
    if not isinstance(raw, Mapping) or not raw:
        raise field_error(where, fpath, f"expected {example}")
    points = []
    for key, value in raw.items():
        if isinstance(key, bool) or not isinstance(key, int) or key < 1:
            raise field_error(
                where, fpath, f"key {key!r} is not a positive whole number ({key_name}); expected {example}"
            )
        try:
            # a miss share may be 0 (every re-read hits), so may an extra cost; other figures must be positive
            zero_ok = fpath in ZERO_ALLOWED or fpath in ZERO_COSTS
            y = 0.0 if zero_ok and _reads_as_zero(value) else units.parse(value, kind)
        except units.UnitError as exc:
            raise field_error(where, f"{fpath}.{key}", str(exc)) from None
        floor, ceiling = FLOORS.get(kind), CEILINGS.get(kind)
        if floor is not None and y < floor[0]:
            raise field_error(where, f"{fpath}.{key}", f"{value!r} is below {floor[1]}: not a plausible GPU figure")
        if ceiling is not None and y > ceiling[0]:
            raise field_error(where, f"{fpath}.{key}", f"{value!r} is above {ceiling[1]}: not a plausible GPU figure")
        if fpath.endswith("_efficiency") and fpath.startswith("interconnect.") and y > 1.0:
            raise field_error(where, f"{fpath}.{key}", f"{value!r} is above 1: a share of the link's bandwidth")
        if fpath in ZERO_ALLOWED and y > 1.0:  # a share of re-reads that miss
            raise field_error(where, f"{fpath}.{key}", f"{value!r} is above 1: a miss share is between 0 and 1")
        if fpath in SHARES_OF_ONE and y > 1.0:
            raise field_error(where, f"{fpath}.{key}", f"{value!r} is above 1: {SHARES_OF_ONE[fpath]}")
        if kind == "ratio" and y > MAX_EFFICIENCY:
            raise field_error(
                where, f"{fpath}.{key}", f"{value!r} is above {MAX_EFFICIENCY:g}: not a plausible efficiency"
            )
        points.append((key, y))
    return tuple(sorted(points))


def _zero_of(value: object, kind: units.Kind) -> bool:
    """Whether ``value`` is zero of ``kind``: ``0``, or a zero written with one of its units
    (``0 us`` for a time; a unit of another kind is refused by :func:`units.parse`)."""
    if isinstance(value, str):
        number, _, unit = value.strip().partition(" ")
        try:
            if float(number) != 0.0:
                return False
        except ValueError:
            return False
        if unit.strip():
            units.parse(f"1 {unit.strip()}", kind)  # the unit must be the field's kind's
        return True
    return _reads_as_zero(value)


def _reads_as_zero(value: object) -> bool:
    """0, or a zero written as text: bare, as a percentage or with a unit (``0 ns``)."""
    if isinstance(value, str):
        number = value.strip().removesuffix("%").strip().split(" ")[0]
        return number in ("0", "0.0")
    return value in (0, 0.0)


def _parse_sources(raw: object, where: str) -> dict[str, Source]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise field_error(where, "sources", "must map a source id to {title:, url:, kind:}")
    out = {}
    for key, entry in raw.items():
        fpath = f"sources.{key}"
        if isinstance(entry, str) and entry.strip():
            out[str(key)] = Source(str(key), entry.strip())
            continue
        if not isinstance(entry, Mapping):
            raise field_error(where, fpath, "must be a title string or {title:, url:, kind:}")
        allowed = {"title", "url", "kind", "machine", "date", "command"}
        extra = set(entry) - allowed
        if extra:
            raise field_error(
                where, fpath, f"unknown key {sorted(map(str, extra))[0]!r} (allowed: {', '.join(sorted(allowed))})"
            )
        title, url = entry.get("title"), entry.get("url")
        if not isinstance(title, str) or not title.strip():
            raise field_error(where, f"{fpath}.title", "missing (a non-empty string)")
        for name in ("url", "machine", "date", "command"):
            if entry.get(name) is not None and not isinstance(entry.get(name), str):
                raise field_error(where, f"{fpath}.{name}", "must be a string")
        kind = entry.get("kind")
        if kind is not None and kind not in SOURCE_KINDS:
            raise field_error(where, f"{fpath}.kind", f"{kind!r} is not one of {', '.join(SOURCE_KINDS)}")
        out[str(key)] = Source(
            str(key),
            title.strip(),
            url,
            kind,
            entry.get("machine"),
            None if entry.get("date") is None else str(entry.get("date")),
            entry.get("command"),
        )
    return out


#: implementation figures that are a share of a whole, by the end of their path: at most 1
_SHARES_OF_A_WHOLE = {".sustained_share": "the rate before the clocks fall", ".hbm_share": "memory.hbm.bandwidth"}


def _check_floors(where: str, values: Mapping[str, float], provenance: Mapping[str, Provenance]) -> None:
    # the datasheet peaks first: a transferred figure's error is its peak's, as the user wrote it
    for fpath, value in sorted(values.items(), key=lambda item: not item[0].startswith("datasheet.")):
        floor, ceiling = FLOORS.get(FIELDS[fpath][0]), CEILINGS.get(FIELDS[fpath][0])
        if floor is not None and value < floor[0]:
            raise field_error(
                where, fpath, f"{provenance[fpath].text!r} is below {floor[1]}: not a plausible GPU figure"
            )
        if ceiling is not None and value > ceiling[0]:
            raise field_error(
                where, fpath, f"{provenance[fpath].text!r} is above {ceiling[1]}: not a plausible GPU figure"
            )
    for fpath in SHARE_FIGURES:  # an achieved rate above its own datasheet peak
        peak = values.get(f"datasheet.{fpath}")
        if peak is None and fpath.startswith("memory.hbm."):
            peak = values.get("memory.hbm.datasheet_bandwidth")
        if peak is not None and fpath in values and values[fpath] > PEAK_SLACK * peak:
            shown = provenance.get(f"datasheet.{fpath}") or provenance["memory.hbm.datasheet_bandwidth"]
            raise field_error(
                where,
                fpath,
                f"{provenance[fpath].text!r} is more than {PEAK_SLACK:g}× its datasheet peak ({shown.text}): "
                "one of the two is wrong",
            )
        if FIELDS[fpath][0] == "ratio" and value > MAX_EFFICIENCY:  # pragma: no cover - ratios are curves
            raise field_error(where, fpath, f"{provenance[fpath].text!r} is above {MAX_EFFICIENCY:g}")
    share = values.get("compute.mma_sync.one_cta_share")
    if share is not None and share > 1:
        text = provenance["compute.mma_sync.one_cta_share"].text
        raise field_error(where, "compute.mma_sync.one_cta_share", f"{text!r} is above 1: one CTA cannot outrun two")
    for fpath, value in values.items():
        whole = next((what for end, what in _SHARES_OF_A_WHOLE.items() if fpath.endswith(end)), None)
        if whole is not None and not 0 < value <= 1:
            raise field_error(where, fpath, f"{provenance[fpath].text!r} is not in (0, 1]: a share of {whole}")
    for fpath in (f for f in values if f.endswith(".sustained_after")):
        if values[fpath] <= 0:
            raise field_error(where, fpath, f"{provenance[fpath].text!r} must be above 0")
    for fpath, (most, what) in HOST_CEILINGS.items():
        if values.get(fpath, 0.0) > most:
            raise field_error(where, fpath, f"{provenance[fpath].text!r} is not {what}")
    held = values.get("interconnect.p2p_sms")
    if held is not None and held >= values["sm_count"]:
        text = provenance["interconnect.p2p_sms"].text
        raise field_error(
            where, "interconnect.p2p_sms", f"{text!r} leaves no SM of the {values['sm_count']:g} for the compute"
        )
    idle = values.get("interconnect.p2p_idle_sms")
    if idle is not None and idle > values["sm_count"]:
        text = provenance["interconnect.p2p_idle_sms"].text
        raise field_error(where, "interconnect.p2p_idle_sms", f"{text!r} is more than the {values['sm_count']:g} SMs")
    if values["memory.sram.capacity_per_sm"] < 1024:
        text = provenance["memory.sram.capacity_per_sm"].text
        raise field_error(
            where,
            "memory.sram.capacity_per_sm",
            f"{text!r} cannot hold a tile (at least 1 KiB; GPUs have 16 KiB or more)",
        )


def _check_consistency(where: str, hbm: MemoryLevel, l2: MemoryLevel, sram: Sram) -> None:
    if l2.capacity_bytes >= hbm.capacity_bytes:
        raise field_error(
            where,
            "memory.l2.capacity",
            f"{units.format_bytes(l2.capacity_bytes)} is not smaller than HBM "
            f"({units.format_bytes(hbm.capacity_bytes)})",
        )
    if l2.effective_capacity_bytes is not None and l2.effective_capacity_bytes > l2.capacity_bytes:
        raise field_error(where, "memory.l2.effective_capacity", "is larger than memory.l2.capacity")
    if sram.capacity_per_sm_bytes * sram.sm_count > 4 * l2.capacity_bytes + hbm.capacity_bytes:
        raise field_error(
            where, "memory.sram.capacity_per_sm", "times sm_count exceeds any plausible chip"
        )  # pragma: no cover
    if sram.capacity_per_sm_bytes >= l2.capacity_bytes:
        raise field_error(
            where,
            "memory.sram.capacity_per_sm",
            f"{units.format_bytes(sram.capacity_per_sm_bytes, binary=True)} per SM is not smaller than L2 "
            f"({units.format_bytes(l2.capacity_bytes, binary=True)})",
        )
    for name, value in (("hbm", hbm.latency_s), ("l2", l2.latency_s), ("sram", sram.latency_s)):
        if value > 1e-3:
            raise field_error(
                where, f"memory.{name}.latency", f"{value * 1e9:.0f} ns is not a plausible memory latency (under 1 ms)"
            )
    if not math.isfinite(sram.bandwidth_bytes_per_s):  # pragma: no cover - parse() refuses inf
        raise field_error(where, "memory.sram.bandwidth_per_sm", "must be finite")
