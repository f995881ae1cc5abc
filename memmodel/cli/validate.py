"""``memmodel validate``: run real kernels, compare predicted with measured times and bytes."""

from __future__ import annotations

from typing import Any

import click

from ..implementations import CASE_IMPLEMENTATIONS
from .options import Command, check_outputs, choice, echo_predictions, force_option, format_option, option


@click.command("validate", cls=Command)
@option(
    "--gpu",
    default=None,
    metavar="NAME|FILE",
    help="Profile to predict with (default: the one matching the GPU found, or with --rescore the record's own; "
    "a calibrated profile is best).",
)
@option(
    "--case",
    "case_specs",
    multiple=True,
    metavar="SPEC",
    help="A case instead of the defaults, e.g. impl=sdpa-flash,n=4096,d=64,batch=4,heads=16, or a trace case as "
    "one quoted argument, 'trace FILE.py:NAME --shape ...' (repeatable).",
)
@option(
    "--cases",
    "cases_file",
    type=click.Path(dir_okay=False, exists=True),
    default=None,
    help="A file of case specs, one per line (several per line separated by spaces; # starts a comment); a line "
    "'trace FILE.py:NAME --shape NAME=DIMS ... [--dtype D] [--backward] [--grad A,B] [--config K=V]' runs your own "
    "function or module as memmodel trace takes it (docs/trace.md).",
)
@option(
    "--impl",
    "impls",
    multiple=True,
    type=choice((*CASE_IMPLEMENTATIONS, "trace")),
    help="Keep only cases of these implementations (repeatable; trace: the trace cases).",
)
@option(
    "--ncu", is_flag=True, help="Also measure HBM and L2 bytes with Nsight Compute and compare them with the model."
)
@option(
    "--ncu-metrics",
    "ncu_metrics",
    default=None,
    metavar="M1,M2,...",
    help="With --ncu: more Nsight Compute metrics to collect for every kernel (e.g. lts__t_sectors_op_red.sum, "
    "lts__t_sectors_op_atom.sum): kept in the trace beside the record, not scored.",
)
@option(
    "--placements",
    type=click.IntRange(1, 8),
    default=1,
    show_default=True,
    help="With --ncu: profile each case with its Q, K and V at this many places in memory and score the median "
    "(in the L2's capacity knee one kernel's HBM bytes move by tens of percent with its inputs' addresses "
    "alone; docs/accuracy.md).",
)
@option(
    "--reps",
    type=click.IntRange(min=20),
    default=20,
    show_default=True,
    help="Timed repetitions per case (median reported).",
)
@option(
    "--output",
    type=click.Path(path_type=str, readable=False),
    default=None,
    metavar="FILE",
    help="JSON record, rewritten after every case (always valid; gzip-compressed if FILE ends in .gz, its Nsight "
    "Compute trace too); an existing FILE is replaced only with --force.",
)
@option(
    "--host-probe/--no-host-probe",
    default=True,
    show_default=True,
    help="Measure this machine's host dispatch first (about half a minute) and predict the call, queued and graph "
    "times with it: a host's speed varies from machine to machine (the kernel times are the profile's either way).",
)
@option("--list", "list_only", is_flag=True, help="Print the cases that would run and exit (no GPU needed).")
@option(
    "--rescore",
    "rescore_path",
    type=click.Path(dir_okay=False, exists=True),
    default=None,
    help="Score an existing record (.json or .json.gz) again with --gpu's profile (no GPU needed); its .ncu.csv "
    "(or .ncu.csv.gz) beside it is used when present. More records may follow: one table, a row per record.",
)
@option(
    "--plot",
    "plot_path",
    type=click.Path(path_type=str, readable=False),
    default=None,
    metavar="FILE",
    help="Write predicted against measured (bytes, time) as PNG, SVG or PDF by FILE's suffix (needs matplotlib); "
    "an existing FILE is replaced only with --force.",
)
@option(
    "--gpus",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Run context-parallel attention (ring and Ulysses cases: scheme=ring,n=16384,d=128,...) on this many "
    "GPUs of this machine through NCCL, checked against one GPU and timed (docs/context-parallel.md).",
)
@option(
    "--device",
    "cp_device",
    type=click.Choice(["cuda", "cpu"]),
    default="cuda",
    hidden=True,
    help="With --gpus: cpu runs the workers on the CPU (gloo, math attention), for tests.",
)
@force_option
@format_option(
    ("table", "json", "markdown", "summary", "stats"),
    json="the record as JSON on stdout (as --output writes it)",
    markdown="a Markdown report: error statistics, FlashAttention speed-ups, HBM bytes and time per kernel",
    summary="Markdown: the statistics, speed-ups and HBM bytes per kernel (no times per kernel)",
    stats="Markdown: the error statistics and speed-ups only",
)
@option(
    "--predict",
    "predict_only",
    is_flag=True,
    help="Print the model's predictions for the cases (each timed step's time; each kernel's HBM reads with a "
    "cold L2) with --gpu's profile, and exit (no GPU needed): commit them before measuring.",
)
@click.argument("more_records", nargs=-1, type=click.Path(dir_okay=False, exists=True), metavar="[RECORD]...")
def validate_cmd(
    *,
    gpu: str | None,
    case_specs: tuple[str, ...],
    cases_file: str | None,
    impls: tuple[str, ...],
    ncu: bool,
    ncu_metrics: str | None,
    placements: int,
    reps: int,
    output: str | None,
    host_probe: bool,
    list_only: bool,
    predict_only: bool,
    rescore_path: str | None,
    more_records: tuple[str, ...],
    plot_path: str | None,
    force: bool,
    fmt: str,
    gpus: int,
    cp_device: str,
) -> None:
    """Run attention kernels on this machine's GPU (standard in eager PyTorch, FlashAttention
    through PyTorch SDPA, memmodel's Triton kernel), check each against float32, time it, and
    compare with the model's prediction; with --ncu also the HBM and L2 bytes."""
    from pathlib import Path

    if more_records and not rescore_path:
        raise click.UsageError(f"unexpected argument {more_records[0]!r}: records are given after --rescore")
    if more_records and (gpus > 1 or output or plot_path):
        raise click.UsageError("several records print one table: not with --gpus, --output or --plot")
    if placements > 1 and not ncu:
        raise click.UsageError("--placements needs --ncu: placements are profiled with Nsight Compute")
    extra: tuple[str, ...] = ()
    if ncu_metrics is not None:
        if not ncu:
            raise click.UsageError("--ncu-metrics needs --ncu: the metrics are Nsight Compute's")
        from ..gpu.ncu import extra_metrics

        try:
            extra = extra_metrics(ncu_metrics)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="'--ncu-metrics'") from None
    if gpus > 1 and (ncu or placements > 1):
        raise click.UsageError("--ncu and --placements profile one GPU's kernels: not with --gpus")
    if gpus > 1:
        from .multi_gpu import validate

        return validate(
            gpus=gpus,
            gpu=gpu,
            case_specs=case_specs,
            cases_file=cases_file,
            reps=reps,
            output=output,
            list_only=list_only,
            predict_only=predict_only,
            rescore_path=rescore_path,
            force=force,
            fmt=fmt,
            device=cp_device,
        )
    from ..cases import default_cases, parse_case
    from ..trace_cases import parse_trace_case, resolve_target
    from . import terminal

    cases: list[Any] = []
    for spec in case_specs:
        if spec.split(None, 1)[:1] == ["trace"]:  # a trace case, as a line of --cases gives it
            from ..errors import TraceError

            try:
                case = parse_trace_case(spec)
                resolve_target(case)
            except TraceError as exc:
                raise TraceError(f"--case: {exc}") from None
            cases.append(case)
        else:
            cases.append(parse_case(spec))
    if cases_file:
        from ..fileio import read_text
        from ..trace_cases import read_cases

        text = read_text(cases_file, what="file of case specs")
        # one or more specs per line, separated by spaces, or one trace case; '#' starts a comment
        found = read_cases(text, cases_file)
        if not found:
            from ..errors import WorkloadError

            raise WorkloadError(
                f"{cases_file}: no case in it (only blank lines or comments); a line holds case specs, e.g. "
                "impl=sdpa-flash,n=4096,d=64,dtype=bf16"
            )
        cases += found
    if not cases:
        cases = default_cases()
    if impls:
        cases = [c for c in cases if c.impl in impls]
    if list_only:
        if fmt == "json":
            terminal.print_json([c.to_dict() for c in cases])
        else:
            for c in cases:
                click.echo(c.id)
        return
    if predict_only:
        given = [name for name, on in (("--output", output), ("--plot", plot_path), ("--format", fmt != "table")) if on]
        if given:
            raise click.UsageError(
                f"--predict prints its prediction lines (redirect them to a file): not with {given[0]}"
            )
        from ..scoring import prediction_line
        from ..trace_scoring import trace_prediction_line

        echo_predictions(
            gpu, cases, lambda c, p: trace_prediction_line(c, p) if c.impl == "trace" else prediction_line(c, p)
        )
        return
    check_outputs(force=force, plot=plot_path, **{"--output": output})  # now, not after minutes of GPU work
    if rescore_path and more_records:
        _headline((rescore_path, *more_records), gpu, fmt)
        return
    if rescore_path:
        _rescore(rescore_path, gpu, output, fmt, plot_path, force)
        return
    from ..gpu.cupti import lingering_note
    from ..gpu.validate import Record, device_name, ensure_runnable, run_validation
    from ..hardware import load_profile

    lingering = lingering_note()
    if lingering:
        click.echo(f"memmodel: {lingering}", err=True)
    ensure_runnable()
    cases = _runnable(cases)
    device = device_name()
    if gpu is None:
        from ..cases import profile_for_device
        from ..errors import ProfileError

        name = profile_for_device(device)
        if name is None:
            raise ProfileError(
                f"no bundled profile matches {device!r}: run 'memmodel calibrate --output mygpu.yaml', then --gpu mygpu.yaml"
            )
        gpu = name
    profile = load_profile(gpu)
    import sys

    # trace cases: traced now, before any GPU work (a file, function or shape that cannot run fails here)
    from ..trace_scoring import trace_prediction

    predictions = {c.id: trace_prediction(c, profile) for c in cases if c.impl == "trace"}
    record = Record(Path(output) if output else None, device, profile, "memmodel " + " ".join(sys.argv[1:]))
    try:
        with terminal.progress(len(cases) * (2 if ncu else 1)) as update:
            data = run_validation(
                cases,
                profile,
                record=record,
                ncu=ncu,
                reps=reps,
                placements=placements,
                on_progress=update,
                predictions=predictions,
                host_probe=host_probe,
                ncu_metrics=extra,
            )
    except KeyboardInterrupt:
        record.save()
        raise
    _emit(data, fmt, plot_path, force)


def _runnable(cases: list[Any]) -> list[Any]:
    """The cases whose kernels this machine has: FlashAttention-3's and FlashInfer's MLA cases
    are left out, with one line saying why, where their package does not import (nothing left to
    run: an error)."""
    from ..errors import RuntimeFailure
    from . import terminal

    def fa3_fp8(c: Any) -> bool:  # fp8 inputs run as FlashInfer's fa3-backend prefill, not flash_attn.cute
        return c.impl == "fa3" and c.dtype == "fp8"

    for impl, needs in (
        ("fa3", lambda c: c.impl == "fa3" and not fa3_fp8(c)),
        ("fa3 fp8", fa3_fp8),
        ("flashmla", lambda c: c.impl == "flashmla"),
    ):
        if not any(needs(c) for c in cases):
            continue
        if impl == "fa3":
            from ..gpu.fa3 import missing
        elif impl == "fa3 fp8":
            from ..gpu.fp8 import flashinfer_missing as missing
        else:
            from ..gpu.mla import missing
        why = missing()
        if why is None:
            continue
        kept = [c for c in cases if not needs(c)]
        if not kept:
            raise RuntimeFailure(f"no case to run: {why}")
        terminal.warning(f"skipping {len(cases) - len(kept)} {impl} case(s): {why}")
        cases = kept
    return cases


def _emit(data: dict[str, Any], fmt: str, plot_path: str | None, force: bool) -> None:
    from . import terminal

    if plot_path:
        from ..report.scoring import plot

        plot(data, plot_path, force=force)
    if fmt == "json":
        terminal.print_json(data)
    elif fmt in ("markdown", "summary", "stats"):
        from ..report.scoring import markdown

        click.echo(markdown(data, brief=fmt == "summary", stats=fmt == "stats"), nl=False)
    else:
        _print_table(data)


def _headline(paths: tuple[str, ...], gpu: str | None, fmt: str) -> None:
    """Several records rescored, one row each: their error statistics side by side."""
    from ..report.scoring import headline, headline_columns, headline_rows
    from . import terminal

    rows = [(record_name(path), _rescored(path, gpu)["summary"]) for path in paths]
    if fmt == "json":
        terminal.print_json([{"record": path, "summary": s} for path, (_, s) in zip(paths, rows)])
    elif fmt == "table":
        terminal.console().print(
            terminal.table(
                None,
                [(c, "left" if i == 0 else "right") for i, c in enumerate(headline_columns(rows))],
                headline_rows(rows),
            )
        )
    else:
        click.echo(headline(rows), nl=False)


def record_name(path: str) -> str:
    """A record's name as tables show it: its file name without ``.json`` or ``.json.gz``."""
    from pathlib import Path

    name = Path(path).name.removesuffix(".gz")
    return name.removesuffix(".json")


def _rescore(path: str, gpu: str | None, output: str | None, fmt: str, plot_path: str | None, force: bool) -> None:
    import json

    from ..errors import MemmodelError
    from ..fileio import for_file, write_atomic

    new = _rescored(path, gpu)
    if output:
        write_atomic(output, for_file(output, json.dumps(new, indent=1, allow_nan=False) + "\n"), force=force)
    damaged = (KeyError, IndexError, TypeError, ValueError, AttributeError)
    try:
        _emit(new, fmt, plot_path, force)
    except damaged as exc:
        raise MemmodelError(f"{path}: cannot print this record ({exc.__class__.__name__}: {exc})") from None


def _rescored(path: str, gpu: str | None) -> dict[str, Any]:
    """The record at ``path`` scored again with ``gpu``'s profile (else the one it names)."""
    from pathlib import Path

    from ..errors import MemmodelError
    from ..fileio import read_json
    from ..gpu.validate import SCHEMA, rescore
    from ..hardware import load_profile

    data = read_json(path, what="validate record")
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise MemmodelError(f"{path}: not a memmodel validate record (schema {SCHEMA})")
    problem = _record_problem(data, need_profile=gpu is None)
    if problem:
        raise MemmodelError(f"{path}: not a complete validate record: {problem}")
    ncu_csv = ncu_trace(Path(path))
    profile = load_profile(gpu) if gpu else recorded_profile(data, path)
    # a record edited by hand or damaged: the fields _record_problem does not check are read
    # deep inside rescoring and printing; say which file is at fault, not "internal error"
    damaged = (KeyError, IndexError, TypeError, ValueError, AttributeError)
    try:
        return rescore(data, ncu_csv, profile, near=Path(path))
    except damaged as exc:
        raise MemmodelError(f"{path}: cannot rescore this record ({exc.__class__.__name__}: {exc})") from None


def ncu_trace(record: Any) -> str | None:
    """The Nsight Compute CSV beside a record ``R.json`` or ``R.json.gz``: ``R.ncu.csv``, or
    gzip-compressed ``R.ncu.csv.gz`` (raw traces run to megabytes), or None."""
    from ..fileio import read_text, sibling

    csv_path = sibling(record, ".ncu.csv")
    gz = csv_path.with_name(csv_path.name + ".gz")
    for trace in (csv_path, gz):
        if trace.exists():
            return read_text(trace, what="Nsight Compute CSV", limit=256 * 2**20)
    return None


def recorded_profile(data: dict[str, Any], record: str) -> Any:
    """The profile a record was scored with: its path as recorded (relative to the folder it
    was measured from), found from here, beside the record or in a folder above it (the
    repository the record sits in); else a bundled or user profile of its name."""
    from pathlib import Path

    from ..errors import ProfileError
    from ..hardware import available, load_file, load_profile

    recorded = data.get("profile") or {}
    name = recorded.get("name") if isinstance(recorded, dict) else None
    saved = recorded.get("path") if isinstance(recorded, dict) else None
    if isinstance(saved, str) and saved:
        where = Path(saved)
        folder = Path(record).resolve().parent
        candidates = [where] if where.is_absolute() else [where, *(up / where for up in (folder, *folder.parents))]
        for candidate in candidates:
            if candidate.is_file():
                return load_file(candidate)
    if isinstance(name, str) and name.strip().lower() in available():
        return load_profile(name)
    shown = f"{name} ({saved})" if saved else str(name)
    raise ProfileError(
        f"{record} was scored with the profile {shown}, which is found neither from here nor beside the record: "
        "give it with --gpu PATH (or --gpu NAME for another profile)"
    )


def _record_problem(data: dict[str, Any], *, need_profile: bool) -> str | None:
    """What a record lacks that rescoring and printing read, or None."""
    if need_profile and not (isinstance(data.get("profile"), dict) and isinstance(data["profile"].get("name"), str)):
        return "no profile.name (give --gpu)"
    for key in ("device", "memmodel_version"):
        if not isinstance(data.get(key), str):
            return f"no {key!r}"
    cases = data.get("cases")
    if not isinstance(cases, list):
        return "no 'cases' list"
    for i, entry in enumerate(cases):
        if not (
            isinstance(entry, dict) and isinstance(entry.get("case"), dict) and isinstance(entry["case"].get("id"), str)
        ):
            return f"cases[{i}] has no case.id"
        bad = _bad_time(entry.get("timing"), f"cases[{i}].timing")
        if bad:
            return bad
    return None


def _bad_time(value: Any, where: str, is_time: bool = False) -> str | None:
    """The first measured time under ``where`` that is not a finite number of seconds ≥ 0 (NaN,
    infinite, negative, a string, true), as a message; None where all are. Times are the keys
    ending in ``_s`` and the values of a ``kernels`` mapping."""
    import math

    if is_time:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0
        return (
            None
            if ok or value is None
            else f"{where}: {value!r} is not a time (a finite number of seconds, at least 0)"
        )
    if isinstance(value, dict):
        for key, item in value.items():
            found = _bad_time(item, f"{where}.{key}", is_time=str(key).endswith("_s") or where.endswith(".kernels"))
            if found:
                return found
    elif isinstance(value, list):
        for j, item in enumerate(value):
            found = _bad_time(item, f"{where}[{j}]")
            if found:
                return found
    return None


def _print_table(data: dict[str, Any]) -> None:
    from ..report.scoring import kernel_list_line
    from ..scoring import mode_time_errors, time_errors
    from ..trace_scoring import kernel_match
    from ..units import format_bytes, format_percent, format_time
    from . import terminal

    con = terminal.console()
    e = terminal.escape
    con.print(
        f"[bold]{e(data['device'])}[/] · profile {e(data['profile']['name'])} · memmodel {e(data['memmodel_version'])}"
    )
    rows = []
    for e in data["cases"]:
        cid = e["case"]["id"]
        if e.get("status") != "ok":
            rows.append((cid, e.get("status", "?"), str(e.get("reason", ""))[:60], "", "", "", ""))
            continue
        for t in time_errors(e):
            rows.append(
                (
                    cid,
                    t["step"],
                    format_time(t["predicted_s"]),
                    format_time(t["measured_s"]),
                    format_percent(t["error"]),
                    "",
                    "",
                )
            )
        for t in mode_time_errors(e):
            rows.append(
                (
                    cid,
                    f"{t['mode']} time",
                    format_time(t["predicted_s"]),
                    format_time(t["measured_s"]),
                    format_percent(t["error"]),
                    "",
                    "",
                )
            )
        match = kernel_match(e)
        if match is not None:
            counts = f"{match['matched']}/{match['model_launches']} matched"
            rows.append((cid, "kernel list", counts, f"{match['measured_kernels']} measured", "", "", ""))
        for b in e.get("bytes", []):
            meas = b["measured_hbm_read_bytes"] + b["measured_hbm_write_bytes"]
            pred = b["predicted_hbm_read_bytes"] + b["predicted_hbm_write_bytes"]
            rows.append(
                (
                    cid,
                    f"{b['kernel']} bytes",
                    format_bytes(pred),
                    format_bytes(meas),
                    format_percent(b["error"]),
                    format_percent(b["paper_error"]),
                    format_percent(b["compulsory_error"]),
                )
            )
    con.print(
        terminal.table(
            None,
            [
                ("case", "left"),
                ("kernel", "left"),
                ("predicted", "right"),
                ("measured", "right"),
                ("error", "right"),
                ("paper", "right"),
                ("compulsory", "right"),
            ],
            rows,
        )
    )
    s = data["summary"]
    con.print()
    for label, key in (
        ("HBM bytes, model", "model"),
        ("HBM bytes, paper's formula", "paper"),
        ("HBM bytes, compulsory", "compulsory"),
    ):
        st = s["hbm_bytes"].get(key)
        if st:
            con.print(
                f"{label}: median |error| {st['median_abs'] * 100:.1f}%, max {st['max_abs'] * 100:.1f}% over {st['n']} kernels"
            )
    if s.get("time"):
        st = s["time"]
        con.print(
            f"time: median |error| {st['median_abs'] * 100:.1f}%, max {st['max_abs'] * 100:.1f}% over {st['n']} kernels"
        )
    for key, label in (
        ("call_time", "call time"),
        ("queued_time", "queued time per call"),
        ("graph_time", "CUDA graph replay time"),
        ("traced_kernel_time", "time per traced kernel"),
    ):
        st = s.get(key)
        if st:
            con.print(
                f"{label}: median |error| {st['median_abs'] * 100:.1f}%, max {st['max_abs'] * 100:.1f}% over {st['n']}"
            )
    listed = kernel_list_line(s)
    if listed:
        con.print(listed)
    for sp in s.get("speedups", []):
        con.print(
            f"speedup of FlashAttention over standard, {sp['workload']}: predicted {sp['predicted']:.2f}×, measured {sp['measured']:.2f}×"
        )
