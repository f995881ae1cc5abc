"""``memmodel trace``: the kernels of the user's own PyTorch attention code, traced on fake tensors."""

from __future__ import annotations

from typing import Any

import click

from ..hardware.schema import DEFAULT_GPU
from .options import Command, choice, complete_profile, format_option, option, timing_option

SHAPE_HELP = (
    "An argument of the function and its shape, NAME=DIMS (q=1,8,1024,64), repeated for each tensor argument; "
    "a :DTYPE suffix gives it its own element type (mask=1024,1024:bool; bool, int64, int32, int8, uint8, fp32, "
    "fp16, bf16). The other arguments keep their defaults."
)


@click.command("trace", cls=Command)
@click.argument("target", metavar="FILE.py:NAME")
@option("--shape", "shapes", multiple=True, metavar="NAME=DIMS[:DTYPE]", help=SHAPE_HELP)
@option(
    "--config",
    "config",
    multiple=True,
    metavar="KEY=VALUE",
    help="A keyword argument of the module factory or class NAME builds its nn.Module with (max_positions=65536), "
    "repeated; the value is read as a Python literal (a number, True, 'text'), else as text.",
)
@option(
    "--dtype",
    type=choice(["fp32", "fp16", "bf16"]),
    default="fp32",
    show_default=True,
    help="Element type of the floating tensor arguments (those without a :DTYPE of their own).",
)
@option("--backward", is_flag=True, help="Trace autograd's backward too (of the first output that needs a gradient).")
@option(
    "--grad",
    "grad",
    default=None,
    metavar="NAME[,NAME...]",
    help="With --backward: the inputs whose gradients the backward computes (default: every floating input; "
    "a float mask needs none in training: --grad query,key,value).",
)
@option(
    "--gpu",
    default=None,
    metavar="NAME|FILE",
    shell_complete=complete_profile,
    help=f"Hardware profile: a bundled or user profile name, or a path to a YAML file. Default: {DEFAULT_GPU}.",
)
@option(
    "--l2",
    "l2",
    type=choice(["on", "cold", "off"]),
    default="on",
    show_default=True,
    help="L2 reuse, as in compare: on; cold (each kernel starts with an empty L2); off (every request from HBM).",
)
@timing_option
@format_option(
    json="JSON on stdout (a memmodel.trace/1 object: the ledger as compare's algorithms, every op, the unmodelled)",
    csv="CSV on stdout: one row per kernel, a total, then one per unmodelled op",
)
def trace_cmd(
    *,
    target: str,
    shapes: tuple[str, ...],
    config: tuple[str, ...],
    dtype: str,
    backward: bool,
    grad: str | None,
    gpu: str | None,
    l2: str,
    timing: str,
    fmt: str,
) -> None:
    """Run NAME of FILE.py on fake tensors (CPU torch, no GPU), record every ATen op it
    dispatches, and print the kernels they launch as memmodel models them: bytes per level,
    FLOPs and predicted time, kernel by kernel, as compare prints them, and the shares of the
    attention kernels, the GEMMs and the rest. Fused scaled_dot_product_attention calls are
    modelled as the kernel PyTorch would choose; an op memmodel cannot model is listed, never
    dropped.

    NAME is a function of the tensors --shape gives, or builds an nn.Module: an nn.Module class,
    or a factory whose arguments none of --shape names (configured by --config). The module is
    built on the meta device, its parameters made fake tensors at --dtype (no weights are
    allocated), and its forward is called with the --shape tensors, in eval mode without
    autograd (with --backward: training mode, the parameters' gradients too).

    Example: memmodel trace examples/attention/sdpa.py:attention --shape q=1,8,4096,64
    --shape k=1,8,4096,64 --shape v=1,8,4096,64 --dtype bf16 --backward

    Example: memmodel trace examples/layers/llama_decoder.py:llama3_8b --gpu h200 --dtype bf16
    --shape hidden_states=1,4096,4096
    """
    from ..errors import TraceError
    from ..hardware import load_profile
    from ..tracing import load_function, parse_config, parse_shape, trace
    from . import terminal

    given: dict[str, Any] = {}
    for text in shapes:
        name, dims, own = parse_shape(text)
        if name in given:
            raise TraceError(f"--shape {name}=... given twice: give each argument once")
        given[name] = (dims, own) if own else dims
    options: dict[str, Any] = {}
    for text in config:
        key, value = parse_config(text)
        if key in options:
            raise TraceError(f"--config {key}=... given twice: give each key once")
        options[key] = value
    profile = load_profile(gpu or DEFAULT_GPU)
    fn, label = load_function(target)
    wanted = None
    if grad is not None:
        from .options import split_list

        if not backward:
            raise click.UsageError("--grad names the gradients of the backward: give --backward too")
        wanted = split_list(grad)
        if not wanted:
            raise TraceError("--grad: give the names of floating inputs, comma-separated (--grad q,k,v)")
    result = trace(
        fn, given, dtype=dtype, backward=backward, profile=profile, l2=l2, name=label, grad=wanted, config=options
    )
    result.host_times.of(timing)  # a mode the profile has no figures for: one line, before any output
    if fmt == "json":
        from ..report.trace import trace_to_dict

        terminal.print_json(trace_to_dict(result, timing))
    elif fmt == "csv":
        from ..report.trace import trace_csv_columns, trace_csv_rows

        terminal.print_csv(trace_csv_columns(timing), trace_csv_rows(result, timing))
    else:
        _print_table(result, timing)
    for line in result.notes:
        terminal.note(line)
    if timing in ("call", "queued"):
        for line in result.host_times.notes:
            terminal.note(line)
    from .compare import timer_note

    timer_note(result.host_times, timing)


#: how the table names the groups of :attr:`memmodel.tracing.Trace.shares`
SHARE_LABELS = {
    "attention": "attention (fused sdpa)",
    "gemm": "GEMMs",
    "other": "other (norms, elementwise, copies)",
}


def _print_table(result: Any, timing: str = "kernel") -> None:
    from ..report.trace import trace_to_dict
    from ..units import format_bytes, format_count, format_time
    from . import terminal
    from .compare import _timed, ledger_table, timing_header

    data = trace_to_dict(result, timing)
    alg = data["algorithms"][0]
    con = terminal.console()
    args = ", ".join(f"{i['name']} [{', '.join(map(str, i['shape']))}] {i['dtype']}" for i in data["inputs"])
    flags = ["forward + backward" if result.backward else "forward", f"L2 {result.l2}"]
    con.print(
        f"[bold]{terminal.escape(data['hardware']['full_name'])}[/] ({terminal.escape(data['hardware']['name'])}) · "
        f"{terminal.escape(result.function)}({terminal.escape(args)}) · {' · '.join(flags)}"
        + terminal.escape(timing_header(timing)),
        soft_wrap=True,
    )
    con.print(f"[dim]rates: {terminal.escape(data['rate_sources'])}[/]", soft_wrap=True)
    con.print()
    modelled = sum(1 for o in result.ops if o.status in ("kernel", "sdpa"))
    con.print(
        f"[bold]Traced kernels[/]: {len(alg['kernels'])} kernels from {modelled} ATen ops "
        f"({result.free_ops} views and allocations launch none)",
        soft_wrap=True,
    )
    if alg["kernels"]:
        con.print(ledger_table(alg))
    by_role = alg["bytes_by_role"]
    rows: list[Any] = [
        ("HBM: inputs", format_bytes(by_role["input"])),
        ("HBM: intermediates", format_bytes(by_role["intermediate"])),
        ("HBM: outputs", format_bytes(by_role["output"])),
        ("HBM: state (masks, lse, …)", format_bytes(by_role["state"])),
        None,
        ("HBM read", format_bytes(alg["hbm_read_bytes"])),
        ("HBM write", format_bytes(alg["hbm_write_bytes"])),
        (terminal.markup("[bold]HBM total[/]"), terminal.markup(f"[bold]{format_bytes(alg['hbm_bytes'])}[/]")),
        *(
            (("MALL read", format_bytes(alg["mall_read_bytes"])), ("MALL write", format_bytes(alg["mall_write_bytes"])))
            if "mall_bytes" in alg
            else ()
        ),
        ("L2 read", format_bytes(alg["l2_read_bytes"])),
        ("L2 write", format_bytes(alg["l2_write_bytes"])),
        ("SRAM traffic", format_bytes(alg["sram_bytes"])),
        None,
        ("FLOPs", format_count(alg["flops"])),
        ("exp", format_count(alg["exp_ops"], "op")),
        *(
            (
                ("kernel time", format_time(alg["predicted_times_s"]["kernel"])),
                ("host time (issuing it)", format_time(alg["host_time_s"]) if alg["host_time_s"] is not None else "—"),
            )
            if timing != "kernel"
            else ()
        ),
        (
            terminal.markup("[bold]predicted time[/]" if timing == "kernel" else f"[bold]predicted time, {timing}[/]"),
            terminal.markup(f"[bold]{_timed(alg)}[/]"),
        ),
        ("bound by", str(alg["bound"])),
    ]
    if result.backward:
        rows.append(None)
        for pass_, entry in alg["passes"].items():
            rows.append((f"{pass_}: HBM", format_bytes(entry["hbm_bytes"])))
            rows.append((f"{pass_}: predicted time", _timed(entry)))
    con.print()
    con.print("[bold]Totals[/]")
    con.print(terminal.table(None, [("", "left"), ("traced", "right")], rows))
    con.print()
    con.print("[bold]Shares[/]")
    share_rows: list[Any] = [
        (
            SHARE_LABELS[s.group],
            str(s.kernels),
            format_time(s.time_s),
            f"{100 * s.time_share:.1f}%",
            format_bytes(s.hbm_bytes),
            f"{100 * s.hbm_share:.1f}%",
        )
        if s.kernels
        else (SHARE_LABELS[s.group], "0", "—", "—", "—", "—")
        for s in result.shares
    ]
    columns = [("", "left"), ("kernels", "right"), ("time", "right"), ("share", "right")]
    con.print(terminal.table(None, [*columns, ("HBM", "right"), ("share", "right")], share_rows))
    con.print()
    if result.unmodelled:
        listed = "; ".join(f"{u.op} ({', '.join(u.shapes)}): {u.reason}" for u in result.unmodelled)
        con.print(
            f"[yellow]unmodelled:[/] {len(result.unmodelled)} ops not counted above: {terminal.escape(listed)}",
            soft_wrap=True,
        )
    else:
        con.print("unmodelled: none (every op the function dispatched is counted or launches no kernel)")
