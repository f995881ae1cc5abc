"""The profile writer: a calibration run's result (what ``memmodel calibrate --format json``
prints) as a hardware profile, measured figures citing the run, the driver's figures citing the
driver, the rest carried over from a base profile (:func:`profile_data`, :func:`profile_yaml`).
Pure: ``scripts/update_profiles.py`` rebuilds the bundled H200 profile with it on any machine."""

from __future__ import annotations

import datetime
import math
from collections.abc import Mapping
from typing import Any

from .. import __version__
from ..errors import MemmodelError, RuntimeFailure
from ..hardware import Profile, parse_profile
from ..hardware.schema import CURVES as _CURVES
from ..hardware.schema import FIELDS as _FIELDS
from ..hardware.schema import PEAK_SLACK, SHARE_FIGURES
from ..hardware.schema import SCHEMA as PROFILE_SCHEMA
from ..units import UnitError, parse, quantity
from . import fits
from .figures import device_figures, measured_figures

#: Required profile fields calibrate never measures; they come from ``--base``.
NOT_MEASURED_REQUIRED = ("memory.sram.latency",)
#: Every field calibrate never measures (the optional ones are left out without a base), with
#: every ``efficiency.*`` field: those come from traces of real kernels, not from calibrate.
NOT_MEASURED = (*NOT_MEASURED_REQUIRED, "clock")


def _parse_bytes(text: str) -> float:
    try:
        return parse(text, "bytes")
    except UnitError:
        return math.inf


def _slug(text: str) -> str:
    out = "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-")
    while "--" in out:
        out = out.replace("--", "-")
    return out or "gpu"


def profile_data(result: Mapping[str, Any], *, base: Profile | None = None, name: str | None = None) -> dict[str, Any]:
    """The YAML mapping of a profile built from a calibration result.

    Measured figures cite the source ``measured``; what the driver reports cites ``device``;
    what neither gives is carried over from ``base`` (a :class:`memmodel.hardware.Profile`)
    with its own source. Raises :class:`RuntimeFailure` naming what is missing if a required
    figure has none of the three.
    """
    device = result.get("device", {})
    dev_name = str(device.get("name") or "unknown GPU")
    date = str(result.get("date") or datetime.date.today().isoformat())
    version = str(result.get("memmodel") or __version__)
    figures: dict[str, dict[str, str]] = {}
    software = ", ".join(f"{k.removesuffix('_version')} {v}" for k, v in device.items() if k.endswith("_version") and v)
    sources: dict[str, dict[str, str]] = {
        "measured": {
            "title": f"measured on {dev_name}, {date}, memmodel {version}",
            "kind": "measured",
            "machine": dev_name
            + (f" ({device['sm_count']} SMs)" if device.get("sm_count") else "")
            + (f"; {software}" if software else ""),
            "date": date,
            "command": str(result.get("command") or "memmodel calibrate"),
        },
        "device": {
            "title": f"reported by the CUDA driver through torch.cuda.get_device_properties on {dev_name}",
            "kind": "device",
        },
    }
    for fpath, (text, note) in device_figures(result).items():
        figures[fpath] = {"value": text, "source": "device", "note": note}
    for fpath, (text, note) in measured_figures(result).items():
        figures[fpath] = {"value": text, "source": "measured", "note": note}
    knee = figures.get("memory.l2.effective_capacity")
    if knee is not None and base is not None and "memory.l2.effective_capacity" in base.provenance:
        # A bandwidth curve cannot see what FlashAttention's re-reads see: when every SM
        # reads every line, a line held in only one L2 partition is fetched again from HBM
        # at about the L2 rate, so the knee sits above the capacity those re-reads get. The
        # base's figure, measured with DRAM counters on such kernels, is kept.
        del figures["memory.l2.effective_capacity"]
        result_note = f"bandwidth knee measured by calibrate: {knee['value']} ({knee['note']})"
    else:
        result_note = ""

    def carried(base: Profile, fpath: str) -> dict[str, Any]:
        """``base``'s figure as a YAML entry citing its source (added to ``sources``)."""
        prov = base.provenance[fpath]
        entry: dict[str, Any] = {"value": _curve_value(base, fpath) if fpath in _CURVES else prov.text}
        if prov.source:
            sid = prov.source if prov.source not in ("measured", "device") else f"base-{prov.source}"
            src = base.sources.get(prov.source)
            if src is not None:
                sources[sid] = {
                    "title": src.title,
                    **{k: getattr(src, k) for k in ("url", "kind", "machine", "date", "command") if getattr(src, k)},
                }
                entry["source"] = sid
        return entry

    if base is not None:
        for fpath in SHARE_FIGURES:
            # the datasheet peaks of what was measured: what another GPU's share is taken of
            measured = figures.get(fpath, {}).get("source") == "measured"
            if measured and not fpath.startswith("memory.hbm.") and base.kind_of(fpath) == "datasheet":
                entry = carried(base, fpath)
                prov = base.provenance[fpath]
                entry["note"] = f"datasheet peak, from profile {base.name}" + (f"; {prov.note}" if prov.note else "")
                figures[f"datasheet.{fpath}"] = entry
        for fpath, prov in base.provenance.items():
            if fpath in figures:
                continue
            entry = carried(base, fpath)
            never = fpath in NOT_MEASURED
            why = "not measured by calibrate" if never else "not measured in this run"
            if fpath == "memory.l2.effective_capacity" and result_note:
                why = "kept over the " + result_note
            entry["note"] = f"carried over from profile {base.name} ({why})" + (f"; {prov.note}" if prov.note else "")
            figures[fpath] = entry
    figures = {f: e for f, e in figures.items() if f in _FIELDS}  # a base of an older schema
    for fpath in SHARE_FIGURES:
        # a base of another GPU (--base of an unmatched one): its datasheet peak is not this GPU's
        peak = "memory.hbm.datasheet_bandwidth" if fpath.startswith("memory.hbm.") else f"datasheet.{fpath}"
        got, ref = figures.get(fpath), figures.get(peak)
        if got and ref and got.get("source") == "measured" and ref.get("source") != "measured":
            kind = _FIELDS[fpath][0]
            try:
                contradicts = parse(got["value"], kind) > PEAK_SLACK * parse(ref["value"], kind)
            except UnitError:
                contradicts = False
            if contradicts:
                del figures[peak]
    eff, cap = figures.get("memory.l2.effective_capacity"), figures.get("memory.l2.capacity")
    if (
        eff
        and cap
        and eff.get("source") not in ("measured",)
        and _parse_bytes(eff["value"]) > _parse_bytes(cap["value"])
    ):
        del figures["memory.l2.effective_capacity"]  # the base's figure does not fit this GPU's L2
    missing = [f for f, (_, required) in _FIELDS.items() if required and f not in figures]
    if missing:
        errors = result.get("errors", {})
        why = f" (failed steps: {', '.join(f'{k}: {v}' for k, v in errors.items())})" if errors else ""
        raise RuntimeFailure(
            f"cannot write a complete profile: {', '.join(missing)} not measured{why}; "
            "give --base PROFILE (a bundled name or a YAML file) to carry them over"
        )
    arch = f"compute capability {device.get('compute_capability', '?')}"
    if base is not None and str(device.get("compute_capability", "")) in base.architecture:
        arch = base.architecture
    data: dict[str, Any] = {
        "schema": PROFILE_SCHEMA,
        "name": name or f"{_slug(dev_name.removeprefix('NVIDIA '))}-calibrated",
        "full_name": f"{dev_name} (calibrated {date})",
        "vendor": str(device.get("vendor") or "NVIDIA"),
        "architecture": arch,
    }
    capability = device.get("compute_capability") or (base.compute_capability if base is not None else None)
    if capability:
        data["compute_capability"] = str(capability)
    for top in _FIELDS:
        if "." not in top and top in figures:
            data[top] = figures[top]
    if "sm_count" in data and str(data["sm_count"]["value"]).isdigit():
        data["sm_count"] = {**data["sm_count"], "value": int(data["sm_count"]["value"])}
    for fpath in _FIELDS:  # schema order; sections nest by the dots in the field's path
        if fpath not in figures or "." not in fpath:
            continue
        *sections, leaf = fpath.split(".")
        node = data
        for section in sections:
            node = node.setdefault(section, {})
        node[leaf] = figures[fpath]
    used = {e["source"] for e in figures.values() if "source" in e}
    data["sources"] = {k: v for k, v in sources.items() if k in used}
    _add_efficiencies(data, result)
    return data


def _curve_value(base: Profile, fpath: str) -> dict[int, Any]:
    """A base profile's curve as YAML values (the provenance keeps only its text)."""
    kind = _FIELDS[fpath][0]
    return {x: quantity(y, kind) for x, y in base.figures[fpath]}


def _add_efficiencies(data: dict[str, Any], result: Mapping[str, Any]) -> None:
    """Measured implementation efficiencies, from the model on the profile built so far."""
    m = result.get("measurements", {})
    if (m.get("sdpa") or {}).get("points"):
        _put_figures(data, fits.efficiency_figures(m, parse_profile(data, "<calibrated profile>")))
    if m.get("backward"):
        # the backward efficiency is the model's backward time over the measured one: made
        # with the forward figures and the backward's library kernel rates in place (the
        # forward pass is timed apart; the other backward kernels are timed by those rates)
        _put_figures(data, fits.backward_figures(m["backward"]))
        profile = parse_profile(data, "<calibrated profile>")
        _put_figures(data, fits.backward_figures(m["backward"], profile))
    sources = data.pop("sources")
    data["sources"] = sources  # sources stay last


def _put_figures(data: dict[str, Any], figures: Mapping[str, tuple[Any, str]]) -> None:
    for fpath, (value, note) in figures.items():
        *sections, leaf = fpath.split(".")
        node = data
        for section in sections:
            node = node.setdefault(section, {})
        node[leaf] = {"value": value, "source": "measured", "note": note}


def profile_yaml(result: Mapping[str, Any], *, base: Profile | None = None, name: str | None = None) -> str:
    """The profile as YAML text, checked by the same loader ``--gpu FILE`` uses."""
    import yaml

    data = profile_data(result, base=base, name=name)
    device = result.get("device", {})
    header = (
        f"# Calibrated by `memmodel calibrate` on {device.get('name', '?')}, {result.get('date', '?')}, "
        f"memmodel {result.get('memmodel', __version__)}{' (--quick)' if result.get('quick') else ''}.\n"
        "# source measured: measured on this GPU; device: reported by the driver; others: carried over from --base.\n"
    )
    text = header + yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=100000, allow_unicode=True)
    try:
        parse_profile(yaml.safe_load(text), "<calibrated profile>")
    except MemmodelError as exc:  # a bug here, not the user's: say so
        raise RuntimeFailure(f"the calibrated profile does not validate ({exc})") from None
    return text


def match_bundled(device_name: str, profiles: Mapping[str, str]) -> str | None:
    """The one bundled profile (name -> full_name) whose full name starts with the device's name.

    ``NVIDIA H200`` matches ``NVIDIA H200 SXM 141GB``; dashes count as spaces; two or more
    matches, or none, give None.
    """

    def norm(text: str) -> str:
        return " ".join(text.lower().replace("-", " ").replace("_", " ").split())

    dev = norm(device_name)
    if not dev:
        return None
    hits = [n for n, full in profiles.items() if norm(full) == dev or norm(full).startswith(dev + " ")]
    return hits[0] if len(hits) == 1 else None
