"""``memmodel hardware list|sources|show|validate``: the profiles memmodel finds, where their
figures come from, one profile's figures, and a check of YAML files."""

from __future__ import annotations

from typing import Any

import click

from .options import Group, complete_profile, format_option


@click.group("hardware", cls=Group)
def hardware_group() -> None:
    """List, show and validate GPU hardware profiles."""


@hardware_group.command("list")
@format_option(("table", "json"), json="JSON on stdout, one object per profile")
def list_cmd(*, fmt: str) -> None:
    """Every profile memmodel can find: bundled, user config folder, MEMMODEL_HARDWARE_PATH.

    HBM BW and fp16 are the rates predictions use; rates says what they rest on: measured on
    the GPU, derived from a measured sibling, transferred from a measured GPU of another
    architecture (its shares of the datasheet peaks), or the datasheet as it is."""
    from ..hardware import available, load_file
    from ..hardware.profile import RATE_LABELS
    from ..units import format_bandwidth, format_bytes, format_rate
    from . import terminal

    rows: list[dict[str, Any]] = []
    for name, (origin, path) in available().items():
        try:
            p = load_file(path, origin=origin)
        except Exception as exc:  # a broken user profile must not hide the others
            rows.append({"name": name, "origin": origin, "path": str(path), "error": str(exc)})
            continue
        rows.append(
            {
                "name": name,
                "full_name": p.full_name,
                "origin": origin,
                "path": str(path),
                "hbm_bytes": p.hbm.capacity_bytes,
                "hbm_bandwidth_bytes_per_s": p.hbm.bandwidth_bytes_per_s,
                "l2_bytes": p.l2.capacity_bytes,
                "sram_per_sm_bytes": p.sram.capacity_per_sm_bytes,
                "sm_count": p.sm_count,
                "fp16_flops_per_s": p.compute_flops_per_s.get("fp16"),
                "hbm_datasheet_bandwidth_bytes_per_s": p.datasheet_peak("memory.hbm.bandwidth"),
                "fp16_datasheet_flops_per_s": p.datasheet_peak("compute.fp16"),
                "rates": p.rate_class,
            }
        )
    if fmt == "json":
        terminal.print_json(rows)
        return
    table_rows: list[tuple[Any, ...]] = []
    for r in rows:
        if "error" in r:
            invalid = terminal.markup("[red]invalid:[/] ").append(r["error"])
            table_rows.append((r["name"], invalid, "", "", "", "", "", "", r["origin"]))
            continue
        table_rows.append(
            (
                r["name"],
                r["full_name"],
                format_bytes(r["hbm_bytes"], digits=3, significant=True),
                format_bandwidth(r["hbm_bandwidth_bytes_per_s"], digits=3, significant=True),
                format_bytes(r["l2_bytes"], binary=True, digits=3, significant=True),
                f"{format_bytes(r['sram_per_sm_bytes'], binary=True, digits=3, significant=True)} × {r['sm_count']}",
                format_rate(r["fp16_flops_per_s"], digits=3, significant=True) if r["fp16_flops_per_s"] else "—",
                RATE_LABELS[r["rates"]],
                r["origin"],
            )
        )
    columns = [
        ("name", "left"),
        ("GPU", "left"),
        ("HBM", "right"),
        ("HBM BW", "right"),
        ("L2", "right"),
        ("SRAM/SM × SMs", "right"),
        ("fp16", "right"),
        ("rates", "left"),
        ("from", "left"),
    ]
    caption = None
    if {r["origin"] for r in rows} == {"bundled"}:  # the usual case: say it once
        columns.pop()
        table_rows = [row[:-1] for row in table_rows]
        caption = "all bundled with memmodel (user profiles: docs/profiles.md)"
    terminal.console().print(terminal.table(None, columns, table_rows, caption=caption))


@hardware_group.command("sources")
@format_option(
    ("table", "json", "markdown"),
    json="JSON on stdout: per profile, its figures by kind",
    markdown="a Markdown table (docs/profiles.md is made of it)",
)
def sources_cmd(*, fmt: str) -> None:
    """Per profile, which figures are measured, derived (from a sibling), transferred (from a
    measured GPU of another architecture), published or datasheet, what its predictions rest on
    and how far its times are from measured ones, and which figures the time model misses
    (reported as caveats)."""
    from ..hardware import SOURCE_KINDS, available, load_file
    from ..hardware.derive import TRANSFERRED
    from ..hardware.profile import RATE_LABELS
    from ..implementations import default_for
    from ..timing import caveats, rate_sources
    from ..validated import time_range_errors
    from ..workload import Workload
    from . import terminal

    rows: list[dict[str, Any]] = []
    for name, (origin, path) in available().items():
        try:
            p = load_file(path, origin=origin)
        except Exception as exc:  # a broken user profile must not hide the others
            rows.append({"name": name, "error": str(exc)})
            continue
        by_kind: dict[str, list[str]] = {k: [] for k in (*SOURCE_KINDS, "transferred", "unstated")}
        for fpath, prov in p.provenance.items():
            # a figure transferred from a measured GPU of another architecture is derived, by its own rules
            kind = "transferred" if prov.source == TRANSFERRED else prov.kind
            by_kind[kind or "unstated"].append(fpath)
        dtype = "bf16" if "bf16" in p.compute_flops_per_s else "fp16"
        impl, _ = default_for(Workload(n=4096, d=128, dtype=dtype), p)
        missing = caveats(p, impl if impl != "paper" else None, dtype, 128)
        errors = time_range_errors(p.rate_class)
        rows.append(
            {
                "name": name,
                "rates": rate_sources(p),
                "rate_class": p.rate_class,
                "time_range": errors,
                "figures": by_kind,
                "default_impl": impl,
                "caveats": missing,
            }
        )
    if fmt == "json":
        terminal.print_json(rows)
        return
    kinds = ("measured", "derived", "transferred", "published", "datasheet", "device")
    header = [
        "GPU",
        "its times rest on",
        "measured / predicted time (first–last decile)",
        *kinds,
        "caveats (bf16 or fp16, d 128, the kernel PyTorch runs)",
    ]
    table = []
    for r in rows:
        if "error" in r:
            table.append([r["name"], f"invalid: {r['error']}", *[""] * (len(header) - 2)])
            continue
        counts = [str(len(r["figures"][k])) if r["figures"][k] else "—" for k in kinds]
        notes = "; ".join(c.split(":")[0] for c in r["caveats"]) or "none"
        ranged = r["time_range"]
        spread = f"{1 / (1 + ranged['high']):.2f}–{1 / (1 + ranged['low']):.2f}" if ranged else "—"
        table.append([r["name"], r["rates"], spread, *counts, f"{r['default_impl']}: {notes}"])
    # where each class's range comes from, once (the records, or published kernel times)
    bases = {r["rate_class"]: r["time_range"] for r in rows if r.get("time_range")}
    footnote = [
        f"{RATE_LABELS[cls]}: {ranged['basis']}"
        + (f" ({ranged['count']} errors)" if ranged.get("count") and not ranged.get("families") else "")
        for cls, ranged in sorted(bases.items(), key=lambda kv: list(RATE_LABELS).index(kv[0]))
    ]
    if fmt == "markdown":
        click.echo("| " + " | ".join(header) + " |")
        click.echo("| " + " | ".join("---" for _ in header) + " |")
        for row in table:
            click.echo("| " + " | ".join(x.replace("|", "\\|") for x in row) + " |")
        if footnote:
            click.echo("\nThe ranges, by kind of profile: " + "; ".join(footnote) + ".")
        return
    con = terminal.console()
    con.print(terminal.table(None, [(h, "left") for h in header], [tuple(r) for r in table]))
    for line in footnote:
        con.print(f"[dim]{terminal.escape(line)}[/]", soft_wrap=True)


@hardware_group.command("show")
@click.argument("name", shell_complete=complete_profile)
@format_option(("table", "json"), json="JSON on stdout: every figure with its unit in the key, and its source")
def show_cmd(*, name: str, fmt: str) -> None:
    """Every figure of one profile (NAME or a YAML path), with units and its source."""
    from ..hardware import load_profile
    from ..units import format_bandwidth, format_bytes, format_rate, format_time
    from . import terminal

    p = load_profile(name)
    derived = {
        "sram.aggregate_capacity": format_bytes(p.sram.capacity_bytes, binary=True),
        "sram.aggregate_bandwidth": format_bandwidth(p.sram.bandwidth_bytes_per_s),
    }
    if fmt == "json":
        terminal.print_json(
            {
                "name": p.name,
                "full_name": p.full_name,
                "vendor": p.vendor,
                "architecture": p.architecture,
                "origin": p.origin,
                "path": str(p.path) if p.path else None,
                "sm_count": p.sm_count,
                "clock_hz": p.clock_hz,
                "hbm": {
                    "capacity_bytes": p.hbm.capacity_bytes,
                    "bandwidth_bytes_per_s": p.hbm.bandwidth_bytes_per_s,
                    "latency_s": p.hbm.latency_s,
                },
                "l2": {
                    "capacity_bytes": p.l2.capacity_bytes,
                    "effective_capacity_bytes": p.l2.effective_capacity_bytes,
                    "bandwidth_bytes_per_s": p.l2.bandwidth_bytes_per_s,
                    "latency_s": p.l2.latency_s,
                },
                "sram": {
                    "capacity_per_sm_bytes": p.sram.capacity_per_sm_bytes,
                    "bandwidth_per_sm_bytes_per_s": p.sram.bandwidth_per_sm_bytes_per_s,
                    "latency_s": p.sram.latency_s,
                    "capacity_bytes": p.sram.capacity_bytes,
                    "bandwidth_bytes_per_s": p.sram.bandwidth_bytes_per_s,
                },
                "compute_flops_per_s": dict(p.compute_flops_per_s),
                "exp_ops_per_s": p.exp_ops_per_s,
                "interconnect": p.interconnect.describe() if p.interconnect is not None else None,
                "host": _host_dict(p),
                "provenance": {
                    k: {"value": v.text, "source": v.source, "note": v.note} for k, v in p.provenance.items()
                },
                "sources": {k: {"title": s.title, "url": s.url} for k, s in p.sources.items()},
            }
        )
        return
    con = terminal.console()
    e = terminal.escape
    con.print(
        f"[bold]{e(p.full_name)}[/] ({e(p.name)}) · {e(p.vendor)} {e(p.architecture)} · from {p.origin}: {e(p.path)}"
    )
    rows = []
    for key, prov in p.provenance.items():
        rows.append((key, prov.text, prov.source or terminal.markup("[red]none[/]"), prov.note or ""))
    rows.append(None)
    for key, value in derived.items():
        rows.append((key, value, "derived", "per-SM figure × sm_count"))
    con.print(terminal.table(None, [("field", "left"), ("value", "right"), ("source", "left"), ("note", "left")], rows))
    if p.host is None:
        con.print(f"[dim]{e(NO_HOST_FIGURES)}[/]", soft_wrap=True)
    con.print()
    con.print(
        terminal.table(
            "[bold]Sources[/]",
            [("id", "left"), ("title", "left"), ("url", "left")],
            [(s.id, s.title, s.url or "") for s in p.sources.values()],
        )
    )
    _ = (format_rate, format_time)


#: what ``hardware show`` says of a profile without ``host:`` figures
NO_HOST_FIGURES = (
    "host: none (what issuing work costs the CPU and torch): --timing call, queued and graph need them "
    "(host.op, host.view, host.gemm, host.autograd_node, host.graph_launch, host.graph_kernel_gap)"
)


def _host_dict(p: Any) -> dict[str, Any] | None:
    """``host:`` in seconds by field (each key's unit in its name), None where the profile has none;
    each implementation's call figures beside them."""
    if p.host is None and not any(f.call_host_s or f.backward_call_host_s for f in p.implementation_figures.values()):
        return None
    from dataclasses import asdict

    out: dict[str, Any] = asdict(p.host) if p.host is not None else {}
    out["implementations"] = {
        name: {"call_host_s": f.call_host_s, "backward_call_host_s": f.backward_call_host_s}
        for name, f in p.implementation_figures.items()
        if f.call_host_s is not None or f.backward_call_host_s is not None
    }
    return out


@hardware_group.command("validate")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=str))
def validate_cmd(*, files: tuple[str, ...]) -> None:
    """Check YAML profiles; print one line per file; exit 2 if any is invalid."""
    from ..errors import ProfileError
    from ..hardware import load_file
    from . import terminal

    bad = 0
    for f in files:
        try:
            p = load_file(f)
        except ProfileError as exc:
            bad += 1
            terminal.error(str(exc))
            continue
        unsourced = [k for k, v in p.provenance.items() if v.source is None]
        note = f" ({len(unsourced)} figures without a source: {', '.join(unsourced)})" if unsourced else ""
        click.echo(f"ok: {f} ({p.name}, {p.full_name}){note}")
    if bad:
        raise SystemExit(2)
