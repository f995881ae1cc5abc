"""``memmodel sweep``: a grid of workloads, one row per workload × algorithm.

Every workload and model option of ``compare`` is an axis here, taking a list (repeated or
comma-separated) or, for integers, a range.
"""

from __future__ import annotations

from typing import Any

import click

from ..implementations import CHOICES, CLOCK_MODES, TILED_VARIANTS
from ..traffic.l2 import L2_MODES
from ..traffic.standard import STANDARD_VARIANTS
from ..workload import DTYPE_BYTES, FP8_KV_DTYPES
from .options import (
    Command,
    check_outputs,
    choice,
    force_option,
    format_option,
    gpu_list_option,
    model_attention,
    model_option,
    option,
    plot_option,
    refuse_same_names,
    timing_option,
)

#: Above this many rows the table view is refused (nobody reads it): use csv or jsonl.
MAX_TABLE_ROWS = 20_000
#: What an --output FILE's suffix says about the format.
SUFFIX_FORMATS = {".csv": "csv", ".json": "json", ".jsonl": "jsonl", ".ndjson": "jsonl"}
#: Options that are flags (on) or take a list of on/off.
SWITCHES = ("--causal", "--backward")


class SweepCommand(Command):
    """``--causal`` and ``--backward`` given bare mean ``on``; with a list (``--causal off,on``)
    they sweep both."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        out: list[str] = []
        for i, arg in enumerate(args):
            out.append(arg)
            if arg == "--":
                out += args[i + 1 :]
                break
            # bare (the next word is an option, or none): on; sweep takes no arguments, so a
            # word after it is its value, checked by its type
            if arg in SWITCHES and (i + 1 == len(args) or args[i + 1].startswith("-")):
                out.append("on")
        return super().parse_args(ctx, out)


class GridParam(click.ParamType):
    """An integer option in grid syntax: 4096 · 64,128 · 512:65536:x2 · 512:4096:+512."""

    name = "grid"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> tuple[int, ...]:
        from ..errors import WorkloadError
        from ..sweep import parse_values

        if isinstance(value, tuple):
            return value
        try:
            return parse_values(str(value), "")
        except WorkloadError as exc:
            self.fail(str(exc), param, ctx)


class ListParam(click.ParamType):
    """A comma-separated list read by one of :mod:`memmodel.sweep`'s parsers (``parse_choices``
    with ``accepted``, ``parse_switches``, ``parse_fractions``), imported only when a value is
    read: the sweep engine stays out of every other command's start-up."""

    def __init__(self, name: str, parser: str, accepted: tuple[str, ...] | None = None) -> None:
        self.name = name
        self.parser = parser
        self.accepted = accepted

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> tuple[Any, ...]:
        from .. import sweep
        from ..errors import WorkloadError

        if isinstance(value, tuple):
            return value
        parse = getattr(sweep, self.parser)
        try:
            if self.accepted is not None:
                return tuple(parse(str(value), self.accepted, ""))
            return tuple(parse(str(value), ""))
        except WorkloadError as exc:
            self.fail(str(exc), param, ctx)


def _choices(accepted: tuple[str, ...]) -> ListParam:
    return ListParam("list", "parse_choices", accepted)


def _switches() -> ListParam:
    return ListParam("on|off", "parse_switches")


def _fractions() -> ListParam:
    return ListParam("list", "parse_fractions")


def _merge(ctx: click.Context, param: click.Parameter, value: tuple[tuple[Any, ...], ...]) -> tuple[Any, ...] | None:
    """Repeated options add their values: --n 512 --n 4096:8192:x2 is 512, 4096, 8192."""
    if not value:
        return None
    return tuple(dict.fromkeys(v for group in value for v in group))


GRID = GridParam()
_SYNTAX = "N, A,B,C, START:STOP:xF or START:STOP:+S"


def _grid(flag: str, help_text: str, *, required: bool = False, default: str | None = None) -> Any:
    return option(
        flag,
        type=GRID,
        multiple=True,
        required=required,
        callback=_merge,
        metavar="GRID",
        help=help_text + (f" Default: {default}." if default else ""),
    )


def _list(flag: str, kind: ListParam, help_text: str, metavar: str = "LIST") -> Any:
    return option(flag, type=kind, multiple=True, callback=_merge, metavar=metavar, help=help_text)


@click.command("sweep", cls=SweepCommand)
@_grid("--n", f"Sequence lengths N (queries): {_SYNTAX}. Required unless --seq-lens gives it.")
@_grid("--n-kv", "Key/value lengths (KV cache); decode: --n 1 --n-kv 4096:131072:x2.", default="equal to N")
@_grid("--d", f"Head dimensions d: {_SYNTAX}. Required unless --model gives it.")
@_grid(
    "--d-v",
    "Head dimensions of V (and O) where they differ from d (MLA prefill: --d 192 --d-v 128).",
    default="--model's, else equal to d",
)
@model_option
@_grid("--batch", "Batch sizes B.", default="1")
@_grid("--heads", "Query heads H.", default="--model's, else 1")
@_grid("--kv-heads", "Key/value heads (GQA/MQA); each must divide --heads.", default="--model's, else equal to --heads")
@_list("--dtype", _choices(tuple(DTYPE_BYTES)), f"Element types ({', '.join(DTYPE_BYTES)}). Default: fp32.")
@_list(
    "--kv-dtype",
    _choices(("none", *FP8_KV_DTYPES)),
    "K/V cache element types: none (the dtype), fp8 (e4m3), fp8_e5m2: an FP8 K/V cache under fp16/bf16 Q and O "
    "(see 'memmodel compare --help'). Default: none.",
)
@gpu_list_option()
@_list(
    "--causal",
    _switches(),
    "Causal mask: --causal alone is on; --causal off,on sweeps both. Default: off.",
    metavar="[on|off,...]",
)
@_grid(
    "--window",
    "Causal sliding windows W (each query sees itself and the W − 1 keys before it; implies --causal).",
    default="none",
)
@_grid(
    "--chunk",
    "Chunked local attention: chunks C (each query sees the keys of its own C-token chunk up to itself; implies "
    "--causal); each row runs as 'memmodel compare --chunk' runs it (a prefill, n = n_kv, or a one-token decode).",
    default="none",
)
@_grid(
    "--page-size",
    "Paged KV caches: tokens per page P, an axis (--impl flashinfer takes any, flex powers of two from 16); "
    "see 'memmodel compare --help'.",
    default="none (contiguous K/V)",
)
@option(
    "--seq-lens",
    "seq_lens",
    default=None,
    metavar="L1,L2,...|@FILE",
    help="One packed row of documents for the whole sweep (not an axis: one set of lengths, comma-separated "
    "or @FILE), each attending only within itself; N is their sum and batch 1. See 'memmodel compare --help'.",
)
@_list("--dropout", _fractions(), "Dropout probabilities on P, each in [0, 1): 0,0.1. Default: 0.")
@_list(
    "--tiled",
    _choices(TILED_VARIANTS),
    "Tiled algorithms (fa1: flash-attn v1's kernels, or Algorithm 1 with --impl paper; fa2). Default: fa2.",
)
@_list(
    "--impl",
    _choices(CHOICES),
    f"Implementations the tiled kernel is modelled as ({', '.join(CHOICES)}; see 'memmodel compare --help'). "
    "Default: auto.",
)
@_grid("--block-q", "Rows of Q per block, B_r.", default="the implementation's")
@_grid("--block-kv", "Rows of K/V per block, B_c.", default="the implementation's")
@_list("--l2", _choices(L2_MODES), "L2 modes (on, cold, off; see 'memmodel compare --help'). Default: on.")
@option(
    "--clocks",
    type=choice(list(CLOCK_MODES)),
    default="benchmark",
    show_default=True,
    help="How long the GPU has been busy, for every row (see 'memmodel compare --help').",
)
@timing_option
@_list(
    "--backward",
    _switches(),
    "Add the backward pass: --backward alone is on; --backward off,on sweeps both. Default: off.",
    metavar="[on|off,...]",
)
@_grid("--splits", "Split-KV chunks for fa2.", default="FlashAttention-2's heuristic")
@_grid("--ctas-per-sm", "Tiled CTAs resident per SM.", default="as the tile fits SRAM, at most 2")
@_list(
    "--standard",
    _choices(STANDARD_VARIANTS),
    "Standard attention as the paper's Algorithm 0/3 (algorithm0) or as eager PyTorch and autograd run it "
    "(eager); see 'memmodel compare --help'. Default: algorithm0.",
)
@option(
    "--layers",
    type=choice(["one", "all"]),
    default="one",
    show_default=True,
    help="one: one attention layer a row; all (with --model): each row the model's attention per step, its kinds "
    "of layer (full, a sliding window) counted as the model has them (see 'memmodel compare --help').",
)
@_grid("--context-parallel", "GPUs the sequence is split over (context parallelism); see 'memmodel compare --help'.")
@_list(
    "--cp-scheme",
    _choices(("ring", "ulysses", "hybrid")),
    "Context-parallel schemes (ring, ulysses, hybrid). Default: ring.",
)
@_grid("--ulysses-degree", "With --cp-scheme hybrid: GPUs per Ulysses group (each a divisor of P).")
@format_option(
    ("table", "csv", "json", "jsonl"),
    default=None,
    table="a table for people, one row per workload (the default, unless --output's suffix says otherwise)",
    csv="CSV, one row per workload × algorithm",
    json="one JSON array of row objects",
    jsonl="JSON Lines, one object per workload × algorithm",
)
@option(
    "--output",
    "-o",
    type=click.Path(path_type=str, readable=False, allow_dash=True),
    default=None,
    metavar="FILE",
    help="Write to FILE instead of stdout (- is stdout), atomically: nothing is left half-written. The suffix "
    ".csv, .json or .jsonl picks the format (a different --format is refused).",
)
@force_option
@plot_option
def sweep_cmd(
    *,
    n: tuple[int, ...],
    n_kv: tuple[int, ...] | None,
    d: tuple[int, ...] | None,
    d_v: tuple[int, ...] | None,
    model: str | None,
    batch: tuple[int, ...] | None,
    heads: tuple[int, ...] | None,
    kv_heads: tuple[int, ...] | None,
    dtype: tuple[str, ...] | None,
    kv_dtype: tuple[str, ...] | None,
    gpu: tuple[str, ...],
    causal: tuple[bool, ...] | None,
    window: tuple[int, ...] | None,
    chunk: tuple[int, ...] | None,
    page_size: tuple[int, ...] | None,
    seq_lens: str | None,
    dropout: tuple[float, ...] | None,
    tiled: tuple[str, ...] | None,
    impl: tuple[str, ...] | None,
    block_q: tuple[int, ...] | None,
    block_kv: tuple[int, ...] | None,
    l2: tuple[str, ...] | None,
    clocks: str,
    timing: str,
    backward: tuple[bool, ...] | None,
    splits: tuple[int, ...] | None,
    ctas_per_sm: tuple[int, ...] | None,
    standard: tuple[str, ...] | None,
    context_parallel: tuple[int, ...] | None,
    cp_scheme: tuple[str, ...] | None,
    ulysses_degree: tuple[int, ...] | None,
    layers: str,
    fmt: str | None,
    output: str | None,
    force: bool,
    plot: str | None,
) -> None:
    """Evaluate a grid of workloads (every combination of the options' values) with numpy:
    bytes per memory level, FLOPs, predicted time, bound and standard/tiled ratios. Every
    workload and model option of 'memmodel compare' is an axis.

    Integer options take a grid: 4096 (one value), 64,128 (a list), 512:65536:x2 (geometric,
    stop included), 512:4096:+512 (arithmetic); items mix: 64,96:256:+32. The others take a
    list, comma-separated or repeated (--gpu a100,h200 or --gpu a100 --gpu h200).

    \b
    Examples: a causal prefill against N; decoding against the KV cache length
      memmodel sweep --n 1024:32768:x2 --d 128 --causal --dtype bf16 --gpu h200
      memmodel sweep --model llama-3-8b --n 1 --n-kv 4096:131072:x2 --dtype bf16 --gpu h200
    """
    fmt = _resolve_format(fmt, output)
    check_outputs(force=force, plot=plot, **{"--output": output})
    *shape, model_window, model_dv = model_attention(
        model, heads, kv_heads, d, window[0] if window and len(window) == 1 else None, d_v=d_v, n=n, n_kv=n_kv
    )
    heads, kv_heads, d, d_v = (_grid_of(x) for x in (*shape, model_dv))
    if model_window is not None and not window:
        window = (model_window,)
    if not d:
        raise click.UsageError(
            "Missing option '--d' (the head dimensions; or --model NAME to take it from a model).",
            click.get_current_context(silent=True),
        )
    from ..errors import WorkloadError
    from ..sweep import Grid, evaluate
    from . import terminal
    from .options import missing_n, parse_seq_lens

    lens = parse_seq_lens(seq_lens)
    if lens is not None:
        total = sum(lens)
        if n and tuple(n) != (total,):
            raise WorkloadError(
                f"--n {','.join(map(str, n))} is not the sum of --seq-lens ({total}): give one, or both equal"
            )
        if batch and tuple(batch) != (1,):
            raise WorkloadError("--seq-lens packs its documents into one row: --batch must be 1")
        if n_kv:
            raise WorkloadError("--seq-lens with --n-kv is not modelled: each document attends within itself")
        if context_parallel:
            raise WorkloadError("--seq-lens with --context-parallel is not modelled: give one or the other")
        n = (total,)
    if not n:
        raise missing_n()
    if window and causal and False in causal:
        raise WorkloadError("--window: a sliding window is causal: give no --causal off beside it")
    if kv_dtype and context_parallel and set(kv_dtype) != {"none"}:
        raise WorkloadError("--kv-dtype with --context-parallel is not modelled: context parallelism splits prefill")
    if page_size and context_parallel:
        raise WorkloadError("--page-size with --context-parallel is not modelled: give one or the other")
    if chunk and (context_parallel or lens is not None or window):
        other = (
            "--context-parallel"
            if context_parallel
            else ("--seq-lens" if lens is not None else "a sliding window (--window, or the model's)")
        )
        raise WorkloadError(f"--chunk with {other} is not modelled: chunked attention is its own mask; give one")
    if chunk and causal and False in causal:
        raise WorkloadError("--chunk: chunked attention is causal: give no --causal off beside it")
    if window and context_parallel:
        raise WorkloadError(
            "--window with --context-parallel is not modelled: context parallelism splits full attention"
        )
    if d_v and context_parallel:
        raise WorkloadError(
            "--d-v with --context-parallel is not modelled: context parallelism here takes one head dim"
        )
    if (cp_scheme or ulysses_degree) and not context_parallel:
        raise WorkloadError(f"{'--cp-scheme' if cp_scheme else '--ulysses-degree'} needs --context-parallel P")
    if ulysses_degree and "hybrid" not in (cp_scheme or ()):
        raise WorkloadError("--ulysses-degree goes with --cp-scheme hybrid (Ulysses inside groups, a ring across them)")
    if context_parallel:
        from .parallel import check_context_parallel

        check_context_parallel(context_parallel)
        if plot:
            raise WorkloadError(
                "--plot with --context-parallel is not drawn: use --output FILE.csv and plot its columns"
            )
    if context_parallel and timing != "kernel":
        from ..errors import TimingError

        raise TimingError(
            f"--timing {timing} with --context-parallel is not modelled: a step's time is its GPUs' kernels and "
            "messages (use --timing kernel)"
        )
    if context_parallel:
        from .parallel import run_sweep

        return run_sweep(
            axes={
                "n": n,
                "d": d,
                "batch": batch,
                "heads": heads,
                "kv_heads": kv_heads,
                "dtype": dtype,
                "gpu": gpu,
                "causal": causal,
                "impl": impl,
                "backward": backward,
                "p": context_parallel,
                "scheme": cp_scheme,
                "ulysses_degree": ulysses_degree,
            },
            fixed={
                "n_kv": n_kv,
                "dropout": dropout,
                "tiled": tiled,
                "block_q": block_q,
                "block_kv": block_kv,
                "l2": l2,
                "splits": splits,
                "ctas_per_sm": ctas_per_sm,
                "standard": standard,
                "clocks": (clocks,),
            },
            fmt=fmt,
            output=output,
            force=force,
        )
    values: dict[str, Any] = {
        "n_kv": n_kv,
        "batch": batch,
        "heads": heads,
        "kv_heads": kv_heads,
        "dtypes": dtype,
        "gpus": gpu,
        "causal": causal,
        "dropout": dropout,
        "tiled": tiled,
        "impls": impl,
        "block_q": block_q,
        "block_kv": block_kv,
        "l2": l2,
        "backward": backward,
        "splits": splits,
        "ctas_per_sm": ctas_per_sm,
        "standard": standard,
        "windows": window,
        "d_vs": d_v,
        "kv_dtypes": kv_dtype,
        "page_sizes": page_size,
        "chunks": chunk,
        "seq_lens": lens,
    }
    kinds: list[tuple[dict[str, Any], int]] = [({}, 1)]
    if layers == "all":
        kinds = _layer_kinds(model, window or chunk, lens, causal, context_parallel)
    grid = Grid(n=n, d=d, clocks=clocks, timing=timing, **{k: v for k, v in (values | kinds[0][0]).items() if v})
    if fmt == "table" and grid.size > MAX_TABLE_ROWS:
        raise WorkloadError(
            f"a table of {grid.size:,} workloads is too long to read: use --format csv or jsonl (with --output FILE)"
        )
    from ..hardware import load_profile

    profiles = {g: load_profile(g) for g in grid.gpus}
    refuse_same_names(list(profiles.values()), "sweep")
    with terminal.counter(grid.size * len(kinds), "evaluating") as advance:
        result = evaluate(grid, profiles, progress=advance)
        if len(kinds) > 1 or kinds[0][1] != 1:
            from ..sweep import layers_summed

            parts = [(result, kinds[0][1])]
            for changes, count in kinds[1:]:
                other = Grid(
                    n=n, d=d, clocks=clocks, timing=timing, **{k: v for k, v in (values | changes).items() if v}
                )
                parts.append((evaluate(other, profiles, progress=advance), count))
            result = layers_summed(parts)
            described = " + ".join(f"{count} {_kind_label(c)}" for c, count in kinds)
            terminal.note(f"--layers all: each row is {model}'s attention per step, {described} layers summed")
    import contextlib
    import sys

    from ..fileio import atomic_open

    to_file = output is not None and output != "-"
    target: Any = (
        atomic_open(output, force=force) if output is not None and to_file else contextlib.nullcontext(sys.stdout)
    )
    if fmt == "table":
        with target as stream:
            _print_table(result, stream)
    else:
        from ..report.sweep import write_csv, write_json, write_jsonl

        writer = {"csv": write_csv, "json": write_json, "jsonl": write_jsonl}[fmt]
        with terminal.counter(len(result), "writing") as advance, target as stream:
            writer(result, stream, advance)
    for line in result.notes:
        terminal.note(f"note: {line}")
    for line in result.warnings:
        terminal.note(f"warning: {line}")
    for line in result.caveats:
        terminal.note(line)
    from ..sweep import timer_note
    from ..units import format_time

    if (timer := timer_note(result, format_time)) is not None:
        terminal.note(timer)
    if to_file:
        terminal.note(f"wrote {len(result):,} rows to {output}")
    if plot:
        from ..report.sweep import sweep_plot

        sweep_plot(result, plot, force=force)
        terminal.note(f"wrote {plot}")


def _grid_of(value: Any) -> tuple[int, ...] | None:
    """A model's single value as a grid of one; grids and None as they are."""
    return (value,) if isinstance(value, int) else value


def _resolve_format(fmt: str | None, output: str | None) -> str:
    """--format, else what --output's suffix says, else table; a contradiction is refused."""
    import os

    suffix = os.path.splitext(output)[1].lower() if output not in (None, "-") else ""
    implied = SUFFIX_FORMATS.get(suffix)
    if implied and fmt and fmt != implied:
        raise click.UsageError(
            f"--output {output} is {implied} by its suffix, but --format is {fmt}: drop --format, or name the file "
            f"for {fmt}"
        )
    return fmt or implied or "table"


def _print_table(result: Any, stream: Any) -> None:
    from ..report.sweep import describe, table_view
    from ..units import format_bytes, format_time
    from . import terminal

    constants, headers, rows = table_view(result)
    con = terminal.console(file=stream)
    docs = [f"docs {'+'.join(map(str, result.grid.seq_lens))}"] if result.grid.seq_lens is not None else []
    from .compare import timing_header

    heading = " · ".join(describe(constants) + docs) + timing_header(result.grid.timing)
    con.print("[bold]Sweep[/] · " + terminal.escape(heading), soft_wrap=True)
    n_keys = len(headers) - 7
    formatted = []
    for row in rows:
        keys, (hs, ht, rb, ts, tt, rt, bound) = row[:n_keys], row[n_keys:]
        formatted.append(
            (
                *keys,
                format_bytes(hs),
                format_bytes(ht),
                f"{rb:.2f}×",
                format_time(ts, digits=1),
                format_time(tt, digits=1),
                f"{rt:.2f}×",
                bound,
            )
        )
    columns = [(h, "right") for h in headers[:-1]] + [(headers[-1], "left")]
    con.print(terminal.table(None, columns, formatted))
    con.print("[dim]s/t: standard / tiled (above 1: tiled moves fewer bytes, is faster)[/]", soft_wrap=True)
    spread = _range_factors(result)
    if spread is not None:
        con.print(
            f"[dim]time: measured within {spread[0]:.2f}–{spread[1]:.2f}× of these (the first to last decile of the "
            "errors of the profile's class, docs/accuracy.md; each row's range: --format csv or json)[/]",
            soft_wrap=True,
        )


def _range_factors(result: Any) -> tuple[float, float] | None:
    """The factors a sweep's time ranges put around its times (one per profile class and timing
    mode, so the same on every row), or None where the rows carry no range."""
    import numpy as np

    t = np.asarray(result.column("predicted_time_s"), dtype=np.float64)
    lo = np.asarray(result.column("predicted_time_low_s"), dtype=np.float64)
    hi = np.asarray(result.column("predicted_time_high_s"), dtype=np.float64)
    ok = np.isfinite(lo) & np.isfinite(hi) & (t > 0)
    if not ok.any():
        return None
    return float(lo[ok][0] / t[ok][0]), float(hi[ok][0] / t[ok][0])


def _layer_kinds(
    model: str | None, window: Any, lens: Any, causal: Any, context_parallel: Any
) -> list[tuple[dict[str, Any], int]]:
    """``--layers all``: the grid changes of each kind of the model's layers and its count
    (:func:`memmodel.whole_model.layer_counts`)."""
    from ..errors import WorkloadError
    from ..model_shapes import load_model
    from ..whole_model import layer_counts

    if not model:
        raise click.UsageError("--layers all needs --model (the model's layers and their kinds)")
    if window or lens or context_parallel:
        raise WorkloadError(
            "--layers all takes the model's windows and chunks: give no --window, --chunk, --seq-lens or "
            "--context-parallel"
        )
    counts = layer_counts(load_model(model))
    decoder = (True,) if any(kind != "global" for kind, _, _ in counts) else causal
    return [
        (
            {
                "causal": decoder if kind == "global" else (True,),
                "windows": (span if kind == "local" else None,),
                "chunks": (span if kind == "chunked" else None,),
            },
            count,
        )
        for kind, count, span in counts
    ]


def _kind_label(changes: dict[str, Any]) -> str:
    """``--layers all``'s name of a kind of layer from its grid changes."""
    if changes["chunks"][0]:
        return f"chunked (chunk {changes['chunks'][0]})"
    return f"local (window {changes['windows'][0]})" if changes["windows"][0] else "global"
