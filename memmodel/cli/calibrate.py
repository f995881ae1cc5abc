"""``memmodel calibrate``: measure this GPU's ceilings and write them as a profile."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

import click

from .options import Command, check_outputs, force_option, format_option, option


@click.command("calibrate", cls=Command)
@option(
    "--output",
    "-o",
    type=click.Path(path_type=str, readable=False),
    metavar="FILE.yaml",
    help="Write the measured profile here (usable as --gpu FILE); written atomically, never over an "
    "existing file without --force.",
)
@force_option
@option(
    "--base",
    metavar="NAME|FILE",
    help="Profile to carry over what calibrate does not measure (shared-memory latency, any step that "
    "fails). Default: the bundled profile whose full name starts with the GPU's name, if exactly one does.",
)
@option("--name", help="Profile name written in the YAML. Default: the output file's name.")
@option("--quick", is_flag=True, help="Smaller buffers and fewer repeats (a rougher, faster run).")
@option(
    "--gpus",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Measure the links instead: NCCL send/recv, all-gather and all-to-all from 1 MiB to 1 GiB on this many "
    "GPUs; --output writes --base (default h200) with the measured curves.",
)
@option(
    "--impl",
    "impl",
    type=click.Choice(["fa3"]),
    help="Measure only this implementation's reference shapes, forward and backward (fa3: FlashAttention-3 through "
    "the flash-attn-4 package), as JSON to merge into a full calibration's (scripts/update_profiles.py does); "
    "no profile is written.",
)
@option(
    "--device",
    "cp_device",
    type=click.Choice(["cuda", "cpu"]),
    default="cuda",
    hidden=True,
    help="With --gpus: cpu runs the workers on the CPU (gloo, math attention), for tests.",
)
@format_option(("table", "json"), json="the measurements as JSON on stdout")
def calibrate_cmd(
    *,
    output: str | None,
    force: bool,
    base: str | None,
    name: str | None,
    quick: bool,
    fmt: str,
    gpus: int = 1,
    cp_device: str = "cuda",
    impl: str | None = None,
) -> None:
    """Measure this GPU's ceilings: HBM and L2 bandwidth, L2 effective capacity, shared-memory
    bandwidth, matmul TFLOP/s per dtype, exp rate, L2 and DRAM latency, launch overhead; and
    what real kernels reach on it: the mma.sync peak, PyTorch's softmax by row length, cuBLAS'
    memory-bound products, masked_fill_, and each attention implementation (SDPA backends,
    memmodel's Triton kernel) on reference shapes, whose ratio to the model is its efficiency.

    Needs PyTorch with CUDA and Triton. Prints the figures (next to --base's, if any) and, with
    --output, writes a profile whose measured figures cite "measured on <GPU>, <date>".
    """
    if impl is not None:
        return _calibrate_impl(impl, output=output, gpus=gpus, quick=quick, fmt=fmt)
    if gpus > 1:
        from .multi_gpu import calibrate

        return calibrate(gpus=gpus, base=base, output=output, force=force, quick=quick, fmt=fmt, device=cp_device)
    from ..calibration.profile import NOT_MEASURED_REQUIRED, match_bundled, profile_data, profile_yaml
    from ..errors import MemmodelError
    from ..fileio import write_atomic
    from ..gpu import calibrate as cal
    from ..hardware import available, load_file, load_profile
    from . import terminal

    check_outputs(force=force, **{"--output": output})
    from ..gpu.cupti import lingering_note

    lingering = lingering_note("the host figures measured after the first profiler session")
    if lingering:
        click.echo(f"memmodel: {lingering}", err=True)
    base_profile = load_profile(base) if base else None
    ctx = cal.make_context(quick=quick)
    base_how = "given" if base_profile is not None else None
    if base_profile is None:
        bundled = {n: p for n, (origin, p) in available().items() if origin == "bundled"}
        names = {}
        for n, path in bundled.items():
            try:
                names[n] = load_file(path).full_name
            except MemmodelError:
                continue
        match = match_bundled(ctx.info.name, names)
        if match:
            base_profile, base_how = load_file(bundled[match], origin="bundled"), "matched by the GPU's name"
    if output and base_profile is None:
        raise MemmodelError(
            f"calibrate does not measure {', '.join(NOT_MEASURED_REQUIRED)} and no bundled profile matches "
            f"{ctx.info.name!r}: give --base PROFILE (a bundled name or a YAML file) to carry it over"
        )

    with terminal.progress(len(cal.STEPS)) as update:
        result = cal.run_calibration(quick=quick, on_step=lambda done, total, what: update(done, what), context=ctx)

    profile_name = name or (Path(output).stem if output else None)
    result["command"] = (
        "memmodel " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:] else "memmodel calibrate"
    )
    result["base"] = (
        {"name": base_profile.name, "path": str(base_profile.path) if base_profile.path else None, "how": base_how}
        if base_profile is not None
        else None
    )
    text: str | None = None
    profile_error: MemmodelError | None = None
    try:
        result["profile"] = profile_data(result, base=base_profile, name=profile_name)
        text = profile_yaml(result, base=base_profile, name=profile_name)
    except MemmodelError as exc:
        result["profile"], profile_error = None, exc
    result["output"] = output

    # the measurements go out first: a profile that cannot be written loses nothing
    if fmt == "json":
        terminal.print_json(result)
    else:
        _print_table(result, base_profile)
    for step, message in result["errors"].items():
        terminal.warning(f"step {step} failed: {message}")
    if output:
        if profile_error is not None or text is None:
            raise profile_error or MemmodelError("no profile to write")
        write_atomic(output, text, force=force)
        if fmt != "json":
            terminal.note(f"wrote {output}")
    elif profile_error is not None and fmt != "json":
        terminal.note(f"(no profile: {profile_error})")


def _calibrate_impl(impl: str, *, output: str | None, gpus: int, quick: bool, fmt: str) -> None:
    """``calibrate --impl NAME``: the implementation's reference points, as JSON or a table."""
    if output:
        raise click.UsageError(
            "--impl measures one implementation's reference shapes, not a profile: drop --output and keep the JSON "
            "(--format json), which scripts/update_profiles.py merges into a full calibration"
        )
    if gpus > 1:
        raise click.UsageError("--impl runs on one GPU: drop --gpus")
    from ..gpu import calibrate as cal
    from . import terminal

    steps = cal.IMPL_STEPS[impl]
    with terminal.progress(len(steps)) as update:
        result = cal.run_impl_calibration(impl, quick=quick, on_step=lambda done, total, what: update(done, what))
    result["command"] = "memmodel " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    if fmt == "json":
        terminal.print_json(result)
    else:
        rows = []
        for p in (result["measurements"].get("sdpa") or {}).get("points", []):
            rows.append(
                [
                    "forward",
                    " x ".join(str(x) for x in p["shape"][:4]) + (" causal" if p["shape"][4] else ""),
                    _us(p.get("time_s")),
                    p.get("error", ""),
                ]
            )
        for p in ((result["measurements"].get("backward") or {}).get("sdpa_backward") or {}).get("points", []):
            rows.append(
                [
                    "backward",
                    " x ".join(str(x) for x in p["shape"][:4]) + (" causal" if p["shape"][4] else ""),
                    _us((p.get("backward") or {}).get("time_s")),
                    p.get("error", ""),
                ]
            )
        terminal.console().print(
            terminal.table(
                f"{impl} on {result['device']['name']}",
                [("pass", "left"), ("B x H x N x d", "left"), ("time", "right"), ("error", "left")],
                rows,
            )
        )
    for step, message in result["errors"].items():
        terminal.warning(f"step {step} failed: {message}")


def _us(seconds: Any) -> str:
    return f"{seconds * 1e6:.1f} us" if seconds else "-"


def _print_table(result: dict[str, Any], base: Any) -> None:
    from ..calibration.figures import FIGURES, figure_values
    from ..units import format_bandwidth, format_bytes, format_rate, format_time
    from . import terminal

    m = result["measurements"]
    dev = result["device"]
    t = lambda v: format_time(v, digits=1)  # noqa: E731
    bw2 = lambda v: format_bandwidth(v, digits=2)  # noqa: E731
    mb = lambda v: format_bytes(v, digits=1)  # noqa: E731
    shown = {
        "bandwidth": bw2,
        "bytes": mb,
        "flops": lambda v: format_rate(v, digits=1),
        "ops": lambda v: format_rate(v, "op/s", digits=2),
        "time": t,
    }
    b = base
    values = figure_values(result)
    rows = [
        (f.label, values[f.key], shown[f.kind], f.base(b) if b is not None and f.base is not None else None)
        for f in FIGURES
    ]
    base_head = terminal.escape(b.name) if b is not None else "base"
    table_rows = []
    for label, value, fmt, ref in rows:
        table_rows.append(
            (
                label,
                fmt(value) if value else "—",
                fmt(ref) if ref else "",
                f"{value / ref * 100:.0f}%" if value and ref else "",
            )
        )
    con = terminal.console()
    how = result.get("base") or {}
    con.print(
        f"[bold]{terminal.escape(dev['name'])}[/] · {dev['sm_count']} SMs · L2 {format_bytes(dev['l2_bytes'], binary=True)} · "
        f"{result['date']} · {result['wall_s']:.0f} s{' (--quick)' if result.get('quick') else ''}"
        + (f" · base {terminal.escape(how.get('name'))} ({how.get('how')})" if how else "")
    )
    con.print(
        terminal.table(
            None,
            [("figure", "left"), ("measured", "right"), (base_head, "right"), ("measured/base", "right")],
            table_rows,
        )
    )
    sdpa = [p for p in (m.get("sdpa") or {}).get("points", []) if p.get("time_s")]
    if sdpa:
        con.print()
        con.print(
            terminal.table(
                "[bold]Attention implementations[/] on the reference shapes (fp16; time, median of CUDA events)",
                [("implementation", "left"), ("shape", "left"), ("time", "right")],
                [
                    (
                        p["impl"],
                        "b{}h{}n{}d{}{}".format(*p["shape"][:4], " causal" if p["shape"][4] else "")
                        if "shape" in p
                        else "split b{}h{}n{}d{}".format(*p["split"])
                        if "split" in p
                        else "decode b{}h{}kv{}nkv{}d{}".format(*p["decode"]),
                        t(p["time_s"]),
                    )
                    for p in sdpa
                ],
            )
        )
    sweep = m.get("l2_sweep") or {}
    split = (m.get("l2_split") or {}).get("curves") or {}
    curves = [
        ("any SM", sweep.get("points")),
        ("near SM", (sweep.get("near_reader") or {}).get("points")),
        ("smid halves", (split.get("smid_half") or {}).get("points")),
        ("smid even/odd", (split.get("smid_parity") or {}).get("points")),
    ]
    curves = [(name, pts) for name, pts in curves if pts]
    if curves:
        sizes = sorted({pt["bytes"] for _, pts in curves for pt in pts})
        by_size = [{pt["bytes"]: pt["bytes_per_s"] for pt in pts} for _, pts in curves]
        con.print()
        con.print(
            terminal.table(
                "[bold]L2 capacity sweep[/]: bandwidth of all SMs re-reading a buffer; in each pass a block is read "
                "by any SM, a near SM, or the other of two SM groups",
                [("buffer", "right")] + [(name, "right") for name, _ in curves],
                [(mb(size), *(bw2(col[size]) if size in col else "" for col in by_size)) for size in sizes],
            )
        )
