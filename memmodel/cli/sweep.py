"""``memmodel sweep``: a grid of workloads, one row per workload × algorithm."""

from __future__ import annotations

from typing import Any

import click

from .options import plot_option

#: Above this many rows the table view is refused (nobody reads it): use csv or jsonl.
MAX_TABLE_ROWS = 20_000


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


def _choices(accepted: tuple[str, ...] | None) -> Any:
    """A callback that splits repeated and comma-separated values and checks them."""

    def callback(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
        from ..errors import WorkloadError
        from ..sweep import parse_choices

        if not value:
            return ()
        if accepted is None:
            return tuple(dict.fromkeys(p.strip() for v in value for p in v.split(",") if p.strip()))
        try:
            return parse_choices(value, accepted, "")
        except WorkloadError as exc:
            raise click.BadParameter(str(exc), ctx, param) from None

    return callback


GRID = GridParam()
_SYNTAX = "N, A,B,C, START:STOP:xF or START:STOP:+S"
_DTYPES = ("fp32", "tf32", "fp16", "bf16", "fp8")


@click.command("sweep")
@click.option("--n", "n", type=GRID, required=True, metavar="GRID", help=f"Sequence lengths N: {_SYNTAX}.")
@click.option("--d", "d", type=GRID, required=True, metavar="GRID", help=f"Head dimensions d: {_SYNTAX}.")
@click.option("--batch", type=GRID, default="1", show_default=True, metavar="GRID", help="Batch sizes B.")
@click.option("--heads", type=GRID, default="1", show_default=True, metavar="GRID", help="Query heads H.")
@click.option(
    "--kv-heads", type=GRID, default=None, metavar="GRID", help="Key/value heads (default: equal to --heads)."
)
@click.option(
    "--dtype",
    multiple=True,
    callback=_choices(_DTYPES),
    metavar="LIST",
    help=f"Element types, repeated or comma-separated ({', '.join(_DTYPES)}). Default: fp32.",
)
@click.option(
    "--gpu",
    multiple=True,
    callback=_choices(None),
    metavar="LIST",
    help="Hardware profiles (names or YAML paths), repeated or comma-separated. Default: a100.",
)
@click.option(
    "--tiled",
    multiple=True,
    callback=_choices(("fa1", "fa2")),
    metavar="LIST",
    help="Tiled algorithms, repeated or comma-separated (fa1, fa2). Default: fa2.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "csv", "jsonl"]),
    default="table",
    show_default=True,
    help="A table for people (one row per workload); CSV or JSON Lines (one row per workload × algorithm).",
)
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=str),
    default=None,
    metavar="FILE",
    help="Write to FILE instead of stdout (atomically: nothing is left half-written).",
)
@click.option("--force", is_flag=True, help="Replace --output FILE if it exists.")
@plot_option
def sweep_cmd(
    *,
    n: tuple[int, ...],
    d: tuple[int, ...],
    batch: tuple[int, ...],
    heads: tuple[int, ...],
    kv_heads: tuple[int, ...] | None,
    dtype: tuple[str, ...],
    gpu: tuple[str, ...],
    tiled: tuple[str, ...],
    fmt: str,
    output: str | None,
    force: bool,
    plot: str | None,
) -> None:
    """Evaluate a grid of workloads (every combination of the options' values) with numpy:
    bytes per memory level, FLOPs, predicted time, bound and standard/tiled ratios.

    Grid syntax for --n, --d, --batch, --heads, --kv-heads: 4096 (one value), 64,128 (a list),
    512:65536:x2 (geometric, stop included), 512:4096:+512 (arithmetic); items mix: 64,96:256:+32.

    Example: memmodel sweep --n 512:131072:x2 --d 64,128 --dtype fp16 --gpu h200 --plot sweep.png
    """
    from ..errors import WorkloadError
    from ..sweep import Grid, evaluate
    from . import files, terminal

    grid = Grid(
        n=n,
        d=d,
        batch=batch,
        heads=heads,
        kv_heads=kv_heads,
        dtypes=dtype or ("fp32",),
        gpus=gpu or ("a100",),
        tiled=tiled or ("fa2",),
    )
    if fmt == "table" and grid.size > MAX_TABLE_ROWS:
        raise WorkloadError(
            f"a table of {grid.size:,} workloads is too long to read: use --format csv or jsonl (with --output FILE)"
        )
    if output:
        files.check_output(output, force)
    if plot:
        from ..report.plots import check_plot_path

        check_plot_path(plot)
    from ..hardware import load_profile

    profiles = {g: load_profile(g) for g in grid.gpus}
    with terminal.counter(grid.size, "evaluating") as advance:
        result = evaluate(grid, profiles, progress=advance)
    for line in result.notes:
        terminal.note(f"note: {line}")
    if fmt == "table":
        with files.output(output, force) as stream:
            _print_table(result, stream)
    else:
        from ..report.sweep import write_csv, write_jsonl

        writer = write_csv if fmt == "csv" else write_jsonl
        with terminal.counter(len(result), "writing") as advance, files.output(output, force) as stream:
            writer(result, stream, advance)
    if output:
        terminal.note(f"wrote {len(result):,} rows to {output}")
    if plot:
        from ..report.plots import sweep_plot

        sweep_plot(result, plot)
        terminal.note(f"wrote {plot}")


def _print_table(result: Any, stream: Any) -> None:
    from ..report.sweep import table_view
    from ..units import format_bytes, format_time
    from . import terminal

    constants, headers, rows = table_view(result)
    labels = {"kv_heads": "kv heads", "n": "N"}
    con = terminal.console(file=stream)
    con.print("[bold]Sweep[/] · " + " · ".join(f"{labels.get(k, k)} {v}" for k, v in constants.items()), soft_wrap=True)
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
    columns = [(labels.get(h, h), "right") for h in headers[:n_keys]]
    columns += [(h, "right") for h in headers[n_keys:-1]] + [(headers[-1], "left")]
    con.print(terminal.table(None, columns, formatted))
    con.print("[dim]s/t: standard / tiled (above 1: tiled moves fewer bytes, is faster)[/]", soft_wrap=True)
