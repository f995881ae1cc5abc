"""``memmodel compare``: standard vs tiled attention on one workload, on one GPU or side by side on several."""

from __future__ import annotations

from typing import Any

import click

from .options import (
    WorkloadCommand,
    build_workload,
    format_option,
    gpu_list_option,
    model_options,
    option,
    pop_model_options,
    workload_options,
)
from .parallel import context_parallel_options

ROLE_LABELS = (
    ("input", "inputs (Q, K, V, dO)"),
    ("intermediate", "intermediates (S, P, …)"),
    ("output", "outputs (O, dQ, dK, dV)"),
    ("state", "state (l, m, lse, masks)"),
)


@click.command("compare", cls=WorkloadCommand)
@workload_options
@gpu_list_option(" Several GPUs: their totals in one table, a column per GPU.")
@model_options
@option(
    "--standard",
    "standard_variant",
    type=click.Choice(["algorithm0", "eager"]),
    default="algorithm0",
    show_default=True,
    help="Standard attention as the FlashAttention paper's Algorithm 0 (3 backward), or as eager PyTorch and "
    "autograd run it (scale, mask, softmax, dropout and their gradients as separate kernels).",
)
@option(
    "--layers",
    type=click.Choice(["one", "all"]),
    default="one",
    show_default=True,
    help="one: the ledger of one attention layer; all (with --model): the model's attention per step, each kind of "
    "layer (full attention, a sliding window) compared once and counted as many times as the model has it.",
)
@context_parallel_options
@format_option(
    json="JSON on stdout (several GPUs: a memmodel.compare-gpus/1 object, one compare/1 object per GPU)",
    csv="CSV on stdout: one row per kernel and a total per algorithm, with the workload's columns",
)
def compare_cmd(*, gpu: tuple[str, ...], fmt: str, standard_variant: str, layers: str, **kw: Any) -> None:
    """Bytes moved through SRAM, L2 and HBM, FLOPs and predicted time of standard attention
    (S and P materialised in HBM) against tiled FlashAttention, kernel by kernel; on several
    GPUs (--gpu a100,h200), their totals side by side.

    Example: memmodel compare --n 4096 --d 768
    """
    from .. import compare
    from ..hardware import DEFAULT_GPU, load_profile
    from ..options import options_for
    from .parallel import pop_context_parallel, run_compare

    cp, scheme, ulysses_degree = pop_context_parallel(kw)
    model = kw.get("model")
    if layers == "all":
        from ..errors import WorkloadError

        if not model:
            raise click.UsageError("--layers all needs --model (the model's layers and their kinds)")
        if cp is not None:
            raise WorkloadError("--layers all with --context-parallel is not modelled: give one layer (--layers one)")
        if len(gpu) > 1:
            raise WorkloadError("--layers all takes one --gpu (compare the GPUs one layer at a time: --layers one)")
    if cp is not None and kw.get("chunk") is not None:
        from ..errors import WorkloadError

        raise WorkloadError(
            "--chunk with --context-parallel is not modelled: context parallelism splits full attention"
        )
    workload = build_workload(kw)
    impl, opts = pop_model_options(kw)
    if layers == "all":
        return _whole_model(model, workload, gpu, impl, opts, standard_variant, fmt)
    if cp is not None:
        if workload.window is not None:
            from ..errors import WorkloadError

            raise WorkloadError(
                "--window with --context-parallel is not modelled: context parallelism splits full attention"
            )
        if workload.seq_lens is not None:
            from ..errors import WorkloadError

            raise WorkloadError("--seq-lens with --context-parallel is not modelled: give one or the other")
        if workload.d_v is not None:
            from ..errors import WorkloadError

            raise WorkloadError(
                "--d-v with --context-parallel is not modelled: context parallelism here takes one head dim"
            )
        if workload.page_size is not None:
            from ..errors import WorkloadError

            raise WorkloadError("--page-size with --context-parallel is not modelled: give one or the other")
        return run_compare(workload, gpu, impl, opts, cp, scheme, standard_variant, fmt, ulysses_degree)
    results = []
    for spec in gpu or (DEFAULT_GPU,):
        profile = load_profile(spec)
        results.append(
            compare(workload, profile, options_for(impl, workload, profile, **opts), standard=standard_variant)
        )
    notes = check_comparisons(results)
    for r in results:
        r.tiled.time_s(r.options.timing)  # a mode the profile has no figures for: one line, before any output
        r.standard.time_s(r.options.timing)
    from . import terminal

    cache = _kv_cache(model, workload)
    if fmt == "json":
        from ..report.compare import compare_gpus_to_dict, compare_to_dict

        data = compare_to_dict(results[0]) if len(results) == 1 else compare_gpus_to_dict(results)
        if cache is not None:
            data["kv_cache"] = cache
        terminal.print_json(data)
    elif fmt == "csv":
        from ..report.compare import compare_csv_columns, compare_csv_rows

        columns = compare_csv_columns(results[0].options.timing)
        terminal.print_csv(columns, [row for r in results for row in compare_csv_rows(r)])
    elif len(results) == 1:
        _print_table(results[0])
    else:
        _print_side_by_side(results)
    for line in notes:
        terminal.note(line)
    if len(results) == 1:
        timer_note(results[0].tiled.host_times, results[0].options.timing)
    if cache is not None and fmt == "table":
        from ..units import format_bytes

        terminal.note(
            f"--model {cache['model']}: K/V cache {format_bytes(cache['bytes_per_token_per_layer'])} a token a layer"
            + (
                f", {format_bytes(cache['bytes_per_token'])} a token over its {cache['layers']} layers"
                if cache["layers"]
                else ""
            )
            + f" ({cache['what']})"
        )


def _kv_cache(model: str | None, workload: Any) -> dict[str, Any] | None:
    """The K/V cache bytes per token of an MLA ``--model`` at the workload's dtype (per layer and
    over its layers), for the output; None without one (other models' outputs are as they were)."""
    if not model:
        return None
    from ..model_shapes import load_model

    shape = load_model(model)
    if shape.mla is None:
        return None
    per_layer = shape.kv_cache_bytes_per_token(workload.element_bytes)
    what = (
        f"the latent row: kv_lora_rank + qk_rope_head_dim = {shape.mla.kv_lora_rank + shape.mla.qk_rope_head_dim} "
        "elements"
        if shape.mla is not None
        else f"K and V of {shape.kv_heads} K/V heads at head dim {shape.head_dim}"
    )
    return {
        "model": shape.name,
        "dtype": workload.dtype,
        "bytes_per_token_per_layer": per_layer,
        "layers": shape.layers,
        "bytes_per_token": per_layer * shape.layers if shape.layers else None,
        "what": what,
        "form": shape.attention(workload.n, workload.n_kv).form,
    }


def timer_note(times: Any, timing: str) -> None:
    """Under the default timing, one line on stderr where a user's timer around one call would
    see more than :data:`memmodel.host.NOTE_RATIO` times the kernel time (only where the profile
    has host figures: nothing is guessed)."""
    if timing != "kernel":
        return
    from ..host import user_note
    from ..units import format_time
    from . import terminal

    line = user_note(times, format_time)
    if line is not None:
        terminal.note(line)


def timing_header(timing: str) -> str:
    """`` · timing call (...)`` for a table's header line; empty for the default."""
    from ..host import TIMING_TEXT

    return "" if timing == "kernel" else f" · timing {timing} ({TIMING_TEXT[timing]})"


def check_comparisons(results: list[Any]) -> list[str]:
    """Refuse options no GPU runs (:func:`memmodel.checks.check_comparison`); return the
    notes to print on stderr: each caveat and warning once, whichever GPU gave it."""
    from ..checks import check_comparison

    notes: dict[str, None] = {}
    for result in results:
        for line in check_comparison(result):
            notes[f"warning: {line}"] = None
    from ..report.compare import caveats

    for result in results:
        for line in caveats(result):
            notes[line] = None
    return list(notes)


def _print_table(result: Any) -> None:
    from ..report.compare import compare_to_dict, workload_summary
    from ..units import format_bytes, format_count
    from . import terminal

    data = compare_to_dict(result)
    con = terminal.console()
    timing = data["timing"]
    con.print(
        f"[bold]{terminal.escape(data['hardware']['full_name'])}[/] ({terminal.escape(data['hardware']['name'])}) · "
        f"{terminal.escape(workload_summary(result) + timing_header(timing))}",
        soft_wrap=True,
    )
    con.print(f"[dim]rates: {terminal.escape(data['rate_sources'])}[/]", soft_wrap=True)
    for alg in data["algorithms"]:
        con.print()
        con.print(f"[bold]{_title(alg, result.options.implementation)}[/]", soft_wrap=True)
        con.print(ledger_table(alg))
    std, til = data["algorithms"]
    ratios = data["ratios"]

    def row(label: str, key: str, fmt: Any = format_bytes, ratio: bool = True) -> tuple[str, ...]:
        a, b = std[key], til[key]
        return (label, fmt(a), fmt(b), _ratio(a, b) if ratio else "")

    def role_row(role: str, label: str) -> tuple[str, ...]:
        a, b = std["bytes_by_role"][role], til["bytes_by_role"][role]
        return (label, format_bytes(a), format_bytes(b), _ratio(a, b))

    summary: list[Any] = [(terminal.markup("[dim]HBM by role[/]"), "", "", "")]
    summary += [role_row(role, label) for role, label in ROLE_LABELS]
    summary.append(None)
    summary += [
        row("HBM read", "hbm_read_bytes"),
        row("HBM write", "hbm_write_bytes"),
        (
            terminal.markup("[bold]HBM total[/]"),
            terminal.markup(f"[bold]{format_bytes(std['hbm_bytes'])}[/]"),
            terminal.markup(f"[bold]{format_bytes(til['hbm_bytes'])}[/]"),
            terminal.markup(f"[bold]{_times(ratios['hbm_bytes'])}[/]"),
        ),
        *((row("MALL read", "mall_read_bytes"), row("MALL write", "mall_write_bytes")) if "mall_bytes" in til else ()),
        row("L2 read", "l2_read_bytes"),
        row("L2 write", "l2_write_bytes"),
        row("SRAM traffic", "sram_bytes"),
        None,
        row("FLOPs", "flops", format_count),
        row("exp", "exp_ops", lambda v: format_count(v, "op")),
        (
            "intensity (HBM)",
            f"{std['arithmetic_intensity']:.1f} FLOP/B",
            f"{til['arithmetic_intensity']:.1f} FLOP/B",
            "",
        ),
        *_timing_rows(std, til, timing),
        (
            terminal.markup("[bold]predicted time[/]" if timing == "kernel" else f"[bold]predicted time, {timing}[/]"),
            terminal.markup(f"[bold]{_timed(std)}[/]"),
            terminal.markup(f"[bold]{_timed(til)}[/]"),
            terminal.markup(f"[bold]{_times(ratios['predicted_time_s'])}[/]"),
        ),
        ("bound by", std["bound"], til["bound"], ""),
    ]
    con.print()
    con.print("[bold]Totals[/]")
    con.print(
        terminal.table(
            None,
            [("", "left"), ("standard", "right"), (f"tiled ({til['variant']})", "right"), ("standard/tiled", "right")],
            summary,
        )
    )
    if data["options"]["backward"]:
        con.print()
        con.print("[bold]By pass[/] (FLOPs by convention: forward 4·N·N_kv·d per head, causal half, backward 2.5×)")
        con.print(
            terminal.table(
                None,
                [
                    ("", "left"),
                    ("standard", "right"),
                    (f"tiled ({til['variant']})", "right"),
                    ("standard/tiled", "right"),
                ],
                _pass_rows(std, til),
            )
        )
    b = data["bounds"]
    con.print()
    con.print(
        f"[bold]Reference[/] (tiled HBM {format_bytes(til['hbm_bytes'])}): "
        f"compulsory {format_bytes(b['compulsory_bytes'])} · "
        f"paper's count, no L2 {format_bytes(b['paper_bytes'])} · lower bound max(compulsory, N²d²/M) "
        f"{format_bytes(b['lower_bound_bytes'])}",
        soft_wrap=True,
    )
    for line in data["warnings"]:
        con.print(f"[yellow]warning:[/] {terminal.escape(line)}", soft_wrap=True)


def ledger_table(alg: dict[str, Any]) -> Any:
    """The per-kernel ledger of one algorithm's dict (:func:`memmodel.report.compare.algorithm_dict`):
    a row per tensor a kernel moves (L2 and HBM bytes, the count's formula), then the kernel's
    SRAM bytes, FLOPs, time and bound; ``trace`` prints its ledger with it too."""
    from ..units import format_bytes, format_count, format_time
    from . import terminal

    has_mall = "mall_bytes" in alg  # the Infinity Cache's column, on a profile with memory.mall
    rows: list[Any] = []
    by_kernel: dict[str, list[dict[str, Any]]] = {}
    for t in alg["transfers"]:
        by_kernel.setdefault(t["kernel"], []).append(t)
    for kernel in alg["kernels"]:
        seen: dict[tuple[str, str, str], dict[str, Any]] = {}
        for t in by_kernel.get(kernel["name"], ()):
            if t["level"] == "sram":
                continue
            key = (t["tensor"], t["role"], t["direction"])
            entry = seen.setdefault(key, {"l2": 0, "mall": 0, "hbm": 0, "formula": t["formula"]})
            entry[t["level"]] += t["bytes"]
        for (tensor, role, direction), entry in seen.items():
            mall = (format_bytes(entry["mall"]),) if has_mall else ()
            rows.append(
                (
                    kernel["name"],
                    tensor,
                    role,
                    direction,
                    format_bytes(entry["l2"]),
                    *mall,
                    format_bytes(entry["hbm"]),
                    entry["formula"],
                )
            )
        tag = f"{kernel['pass']}: " if kernel["pass"] != "forward" else ""
        rows.append(
            (
                "",
                "",
                "",
                "",
                *(("",) if has_mall else ()),
                terminal.markup(f"[dim]SRAM {format_bytes(kernel['sram_bytes'])}[/]"),
                terminal.markup(f"[dim]{format_count(kernel['flops'])}[/]"),
                terminal.markup(f"[dim]{tag}{format_time(kernel['predicted_time_s'])}, {kernel['bound']}-bound[/]"),
            )
        )
        rows.append(None)
    return terminal.table(
        None,
        [
            ("kernel", "left"),
            ("tensor", "left"),
            ("role", "left"),
            ("dir", "left"),
            ("L2", "right"),
            *((("MALL", "right"),) if has_mall else ()),
            ("HBM", "right"),
            ("count", "left"),
        ],
        rows[:-1],
    )


def _timing_rows(std: dict[str, Any], til: dict[str, Any], timing: str) -> list[tuple[str, ...]]:
    """Under a timing other than kernel: the kernels' time and the host's, before the chosen mode's."""
    if timing == "kernel":
        return []
    from ..units import format_time

    def cell(entry: dict[str, Any], key: str) -> str:
        value = entry["predicted_times_s"]["kernel"] if key == "kernel" else entry["host_time_s"]
        return "—" if value is None else format_time(value)

    return [
        ("kernel time", cell(std, "kernel"), cell(til, "kernel"), ""),
        ("host time (issuing it)", cell(std, "host"), cell(til, "host"), ""),
    ]


def _timed(entry: dict[str, Any]) -> str:
    """An algorithm's (or pass's) predicted time with the range it is likely measured in."""
    from ..units import format_time_range

    low, high = entry.get("predicted_time_range_s") or (None, None)
    return format_time_range(entry["predicted_time_s"], low, high)


def column_heads(data: list[dict[str, Any]]) -> list[str]:
    """One head per GPU of a several-GPU table: its name and what its rates rest on
    (``a100 · transferred``); two profiles of one name are told apart by their files."""
    from pathlib import Path

    names = [d["hardware"]["name"] for d in data]

    def where(hw: dict[str, Any], full: bool) -> str:
        if hw["origin"] == "bundled" or not hw["path"]:
            return str(hw["origin"])
        return str(hw["path"]) if full else Path(hw["path"]).name

    heads = []
    for d, name in zip(data, names):
        hw = d["hardware"]
        if names.count(name) > 1:
            same = [where(o["hardware"], False) for o in data if o["hardware"]["name"] == name]
            name = f"{name} ({where(hw, same.count(where(hw, False)) > 1)})"
        heads.append(f"{name} · {hw['rates']['label']}")
    return heads


def _print_side_by_side(results: list[Any]) -> None:
    """Several GPUs: one table of totals, a column per GPU; standard, tiled and their ratios in turn."""
    from ..report.compare import compare_to_dict, workload_summary
    from ..units import format_bytes, format_count
    from . import terminal

    data = [compare_to_dict(r) for r in results]
    con = terminal.console()
    names = [d["hardware"]["name"] for d in data]
    timing = results[0].options.timing
    con.print(
        f"[bold]{terminal.escape(' vs '.join(names))}[/] · "
        f"{terminal.escape(workload_summary(results[0]) + timing_header(timing))}",
        soft_wrap=True,
    )

    def cells(i: int, fmt: Any, key: str) -> list[str]:
        return [fmt(d["algorithms"][i][key]) for d in data]

    def section(i: int) -> list[Any]:
        return [
            ("  HBM read", *cells(i, format_bytes, "hbm_read_bytes")),
            ("  HBM write", *cells(i, format_bytes, "hbm_write_bytes")),
            (terminal.markup("  [bold]HBM total[/]"), *cells(i, format_bytes, "hbm_bytes")),
            ("  L2 traffic", *cells(i, format_bytes, "l2_bytes")),
            ("  SRAM traffic", *cells(i, format_bytes, "sram_bytes")),
            ("  FLOPs", *cells(i, format_count, "flops")),
            ("  intensity (FLOP/B)", *cells(i, lambda v: f"{v:.1f}", "arithmetic_intensity")),
            (
                terminal.markup("  [bold]predicted time[/]" + ("" if timing == "kernel" else f"[bold], {timing}[/]")),
                *[_timed(d["algorithms"][i]) for d in data],
            ),
            ("  bound by", *cells(i, str, "bound")),
        ]

    first = results[0].tiled.time_s(timing)
    rows: list[Any] = [
        (terminal.markup("[bold]standard (Algorithm 0)[/]"), *[""] * len(data)),
        *section(0),
        None,
        (terminal.markup("[bold]tiled[/]"), *[""] * len(data)),
        ("  kernel", *[r.options.implementation or "paper" for r in results]),
        ("  blocks", *[_blocks(r) for r in results]),
        *section(1),
        None,
        (terminal.markup("[bold]standard / tiled[/]"), *[""] * len(data)),
        ("  HBM bytes", *[_times(d["ratios"]["hbm_bytes"]) for d in data]),
        ("  time", *[_times(d["ratios"]["predicted_time_s"]) for d in data]),
        None,
        (f"tiled: speed-up over {names[0]}", *[_times(first / r.tiled.time_s(timing)) for r in results]),
    ]
    con.print()
    con.print(terminal.table(None, [("", "left"), *((head, "right") for head in column_heads(data))], rows))
    for d in data:
        for line in d["warnings"]:
            con.print(f"[yellow]warning:[/] {terminal.escape(line)}", soft_wrap=True)


def _blocks(result: Any) -> str:
    """``128×64`` (B_r × B_c of the tiled kernel), with its split-KV chunks if any."""
    p = result.tiled.traffic.params
    splits = p.get("splits")
    return f"{p['block_q']}×{p['block_kv']}" + (f", {splits} splits" if splits not in (1, None) else "")


def _pass_rows(std: dict[str, Any], til: dict[str, Any]) -> list[Any]:
    from ..units import format_bytes, format_count, format_time

    rows: list[Any] = []
    for pass_ in ("forward", "backward"):
        a, b = std["passes"].get(pass_), til["passes"].get(pass_)
        if not a or not b:
            continue
        rows += [
            (
                f"{pass_}: HBM",
                format_bytes(a["hbm_bytes"]),
                format_bytes(b["hbm_bytes"]),
                _ratio(a["hbm_bytes"], b["hbm_bytes"]),
            ),
            (
                f"{pass_}: FLOPs executed",
                format_count(a["flops"]),
                format_count(b["flops"]),
                _ratio(a["flops"], b["flops"]),
            ),
            (
                f"{pass_}: FLOPs, convention",
                format_count(a["flops_convention"]),
                format_count(b["flops_convention"]),
                "",
            ),
            (
                f"{pass_}: predicted time",
                format_time(a["predicted_time_s"]),
                format_time(b["predicted_time_s"]),
                _ratio(a["predicted_time_s"], b["predicted_time_s"]),
            ),
            None,
        ]
    return rows[:-1]


def _title(alg: dict[str, Any], implementation: str | None = None) -> str:
    if alg["name"] == "standard":
        backward = any(k["pass"] == "backward" for k in alg["kernels"])
        if alg["variant"] == "eager":
            return "Standard attention as eager PyTorch runs it" + (" (with autograd's backward)" if backward else "")
        return "Standard attention (FlashAttention paper Algorithm 0" + (", Algorithm 3 backward)" if backward else ")")
    p = alg["params"]
    if alg["variant"] == "fa1":
        name = "FA1 (paper Algorithm 1)" if implementation in (None, "paper") else "FA1 (outer loop over K/V blocks)"
    else:
        name = "FA2 (outer loop over Q blocks)"
    if implementation:
        from ..implementations import IMPLEMENTATIONS

        name += f" as {IMPLEMENTATIONS[implementation].description}"
    src = "Algorithm 1's rule" if p["blocks_from"] == "algorithm1" else "given"
    extra = f", {p['splits']} splits" if p.get("splits", 1) not in (1, None) else ""
    return (
        f"Tiled attention, {name}: B_r={p['block_q']}, B_c={p['block_kv']} ({src}), T_r={p['t_r']}, T_c={p['t_c']}, "
        f"{p['concurrent_ctas']} CTAs at once{extra}"
    )


def _ratio(a: float, b: float) -> str:
    if b == 0:
        return "—" if a == 0 else "∞"
    return _times(a / b)


def _times(x: float) -> str:
    """``12.34×``; scientific past a million, where a float's last digits are noise."""
    return f"{x:.2f}×" if abs(x) < 1e6 else f"{x:.2e}×"


def _whole_model(
    model: str, workload: Any, gpu: tuple[str, ...], impl: str, opts: dict[str, Any], standard: str, fmt: str
) -> None:
    """``--layers all``: the model's attention per step, a row per kind of layer."""
    from .. import compare
    from ..hardware import DEFAULT_GPU, load_profile
    from ..model_shapes import load_model
    from ..options import options_for
    from ..whole_model import totals, whole_model
    from . import terminal

    shape = load_model(model)
    profile = load_profile(gpu[0] if gpu else DEFAULT_GPU)
    groups = whole_model(
        shape, workload, lambda w: compare(w, profile, options_for(impl, w, profile, **opts), standard=standard)
    )
    notes = check_comparisons([g.comparison for g in groups])
    total = totals(groups)  # a mode the profile has no figures for: one line, before any output
    if fmt == "json":
        from ..report.compare import compare_to_dict

        terminal.print_json(
            {
                "schema": "memmodel.compare-model/1",
                "model": shape.name,
                "layers": total["layers"],
                "groups": [
                    {
                        "kind": g.kind,
                        "count": g.count,
                        "window": g.window,
                        "chunk": g.chunk,
                        "comparison": compare_to_dict(g.comparison),
                    }
                    for g in groups
                ],
                "totals": {k: v for k, v in total.items() if k != "layers"},
            }
        )
    elif fmt == "csv":
        columns = (
            "kind", "count", "window", "algorithm", "hbm_bytes", "flops", "predicted_time_s", "layers_time_s", "chunk"
        )  # fmt: skip
        rows = [
            dict(
                zip(
                    columns,
                    (
                        g.kind,
                        g.count,
                        "" if g.window is None else g.window,
                        name,
                        int(getattr(g.comparison, name).traffic.hbm_bytes),
                        int(getattr(g.comparison, name).traffic.flops),
                        float(getattr(g.comparison, name).time_s(g.comparison.options.timing)),
                        g.count * float(getattr(g.comparison, name).time_s(g.comparison.options.timing)),
                        "" if g.chunk is None else g.chunk,
                    ),
                )
            )
            for g in groups
            for name in ("standard", "tiled")
        ]
        terminal.print_csv(columns, rows)
    else:
        _print_whole_model(shape, profile, groups, total)
    for line in notes:
        terminal.note(line)


def _print_whole_model(shape: Any, profile: Any, groups: list[Any], total: dict[str, Any]) -> None:
    from ..report.compare import workload_summary
    from ..units import format_bytes, format_time, format_time_range
    from ..validated import time_range
    from . import terminal

    first = groups[0].comparison
    timing = first.options.timing
    con = terminal.console()
    con.print(
        f"[bold]{terminal.escape(profile.full_name)}[/] ({terminal.escape(profile.name)}) · "
        f"{terminal.escape(workload_summary(first))} · {terminal.escape(shape.name)}, {total['layers']} layers"
        + terminal.escape(timing_header(timing)),
        soft_wrap=True,
    )
    from ..report.compare import compare_to_dict

    con.print(f"[dim]rates: {terminal.escape(compare_to_dict(first)['rate_sources'])}[/]", soft_wrap=True)
    con.print()
    passes = "forward + backward" if first.options.backward else "forward"
    con.print(f"[bold]Attention of the whole model, one {passes} pass[/] (standard, tiled: one layer)", soft_wrap=True)

    def ranged(seconds: float) -> str:
        span = time_range(profile.rate_class, seconds, timing)
        return format_time_range(seconds, *(span if span is not None else (None, None)))

    rows = []
    for g in groups:
        attention = "full causal" if g.comparison.workload.causal else "full"
        if g.window is not None:
            attention = f"window {g.window}"
        if g.chunk is not None:
            attention = f"chunks of {g.chunk}"
        s, t = g.comparison.standard, g.comparison.tiled
        rows.append(
            (
                g.kind,
                attention,
                g.comparison.options.implementation or "paper",
                str(g.count),
                format_time(float(s.time_s(timing))),
                format_time(float(t.time_s(timing))),
                format_bytes(g.count * int(t.traffic.hbm_bytes)),
                ranged(g.count * float(t.time_s(timing))),
            )
        )
    rows.append(
        (
            "total",
            "",
            "",
            str(total["layers"]),
            "",
            "",
            format_bytes(total["tiled"]["hbm_bytes"]),
            ranged(total["tiled"]["predicted_time_s"]),
        )
    )
    con.print(
        terminal.table(
            None,
            [
                ("layers", "left"),
                ("attention", "left"),
                ("tiled kernel", "left"),
                ("count", "right"),
                ("standard", "right"),
                ("tiled", "right"),
                ("tiled HBM, all", "right"),
                ("tiled, all", "right"),
            ],
            rows,
        )
    )
    con.print(
        f"[dim]standard attention, all {total['layers']} layers: {format_time(total['standard']['predicted_time_s'])}[/]",
        soft_wrap=True,
    )
