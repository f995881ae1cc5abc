"""``memmodel validate``: run real kernels, compare predicted with measured times and bytes."""

from __future__ import annotations

from typing import Any

import click

from ..implementations import CASE_IMPLEMENTATIONS
from .options import format_option


@click.command("validate")
@click.option(
    "--gpu",
    default=None,
    metavar="NAME|FILE",
    help="Profile to predict with (default: the one matching the GPU found; a calibrated profile is best).",
)
@click.option(
    "--case",
    "case_specs",
    multiple=True,
    metavar="SPEC",
    help="A case instead of the defaults, e.g. impl=sdpa-flash,n=4096,d=64,batch=4,heads=16 (repeatable).",
)
@click.option(
    "--cases",
    "cases_file",
    type=click.Path(dir_okay=False, exists=True),
    default=None,
    help="A file of case specs, one per line (several per line separated by spaces; # starts a comment).",
)
@click.option(
    "--impl",
    "impls",
    multiple=True,
    type=click.Choice(list(CASE_IMPLEMENTATIONS)),
    help="Keep only cases of these implementations (repeatable).",
)
@click.option(
    "--ncu", is_flag=True, help="Also measure HBM and L2 bytes with Nsight Compute and compare them with the model."
)
@click.option(
    "--reps",
    type=click.IntRange(min=20),
    default=20,
    show_default=True,
    help="Timed repetitions per case (median reported).",
)
@click.option(
    "--output",
    type=click.Path(dir_okay=False),
    default=None,
    help="JSON record, rewritten after every case (always valid).",
)
@click.option("--list", "list_only", is_flag=True, help="Print the cases that would run and exit (no GPU needed).")
@click.option(
    "--rescore",
    "rescore_path",
    type=click.Path(dir_okay=False, exists=True),
    default=None,
    help="Score an existing record again with --gpu's profile (no GPU needed); its .ncu.csv beside it is used when present.",
)
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write predicted against measured (bytes, time) as PNG, SVG or PDF (needs matplotlib).",
)
@click.option(
    "--predict",
    "predict_only",
    is_flag=True,
    help="Print the model's predictions for the cases (each timed step's time; each kernel's HBM reads with a "
    "cold L2) with --gpu's profile, and exit (no GPU needed): commit them before measuring.",
)
@format_option(("table", "json", "markdown", "summary"))
def validate_cmd(
    *,
    gpu: str | None,
    case_specs: tuple[str, ...],
    cases_file: str | None,
    impls: tuple[str, ...],
    ncu: bool,
    reps: int,
    output: str | None,
    list_only: bool,
    predict_only: bool,
    rescore_path: str | None,
    plot_path: str | None,
    fmt: str,
) -> None:
    """Run attention kernels on this machine's GPU (standard in eager PyTorch, FlashAttention
    through PyTorch SDPA, memmodel's Triton kernel), check each against float32, time it, and
    compare with the model's prediction; with --ncu also the HBM and L2 bytes."""
    from pathlib import Path

    from ..cases import default_cases, parse_case
    from . import terminal

    cases = [parse_case(s) for s in case_specs]
    if cases_file:
        from ..fileio import read_text

        text = read_text(cases_file, what="file of case specs")
        # one or more specs per line, separated by spaces; '#' starts a comment
        cases += [parse_case(spec) for line in text.splitlines() for spec in line.split("#", 1)[0].split()]
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
        from ..hardware import load_profile
        from ..validation import prediction_line

        if gpu is None:
            raise click.UsageError("--predict needs --gpu: the profile to predict with (e.g. --gpu h200)")
        profile = load_profile(gpu)
        click.echo(
            f"# predicted with profile {profile.name} ({profile.origin} {profile.full_name}), memmodel {_version()}"
        )
        for c in cases:
            click.echo(prediction_line(c, profile))
        return
    if plot_path:  # fail now, not after minutes of GPU work
        from ..fileio import check_writable
        from .options import require_module

        require_module("matplotlib", "--plot", extra="plot")
        check_writable(plot_path, force=True)
    if rescore_path:
        _rescore(rescore_path, gpu, output, fmt, plot_path)
        return
    from ..fileio import check_writable
    from ..gpu.validate import Record, device_name, ensure_runnable, run_validation
    from ..hardware import load_profile

    if output:
        check_writable(output, force=True)
    ensure_runnable()
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

    record = Record(Path(output) if output else None, device, profile, "memmodel " + " ".join(sys.argv[1:]))
    try:
        with terminal.progress(len(cases) * (2 if ncu else 1)) as update:
            data = run_validation(cases, profile, record=record, ncu=ncu, reps=reps, on_progress=update)
    except KeyboardInterrupt:
        record.save()
        raise
    _emit(data, fmt, plot_path)


def _emit(data: dict[str, Any], fmt: str, plot_path: str | None) -> None:
    from . import terminal

    if plot_path:
        from ..report.validation import plot

        plot(data, plot_path)
    if fmt == "json":
        terminal.print_json(data)
    elif fmt in ("markdown", "summary"):
        from ..report.validation import markdown

        click.echo(markdown(data, brief=fmt == "summary"), nl=False)
    else:
        _print_table(data)


def _rescore(path: str, gpu: str | None, output: str | None, fmt: str, plot_path: str | None) -> None:
    import json
    from pathlib import Path

    from ..errors import MemmodelError
    from ..fileio import read_text, write_atomic
    from ..gpu.validate import SCHEMA, rescore
    from ..hardware import load_profile

    try:
        data = json.loads(read_text(path, what="validate record"))
    except json.JSONDecodeError as exc:
        raise MemmodelError(f"{path}: not JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise MemmodelError(f"{path}: not a memmodel validate record (schema {SCHEMA})")
    problem = _record_problem(data, need_profile=gpu is None)
    if problem:
        raise MemmodelError(f"{path}: not a complete validate record: {problem}")
    csv_path = Path(path).with_suffix(".ncu.csv")
    ncu_csv = read_text(csv_path, what="Nsight Compute CSV") if csv_path.exists() else None
    recorded = data.get("profile") or {}
    if gpu is None and isinstance(recorded, dict) and recorded.get("path") and Path(str(recorded["path"])).is_file():
        gpu = str(recorded["path"])
    profile = load_profile(gpu or (recorded.get("name") if isinstance(recorded, dict) else None) or "")
    # a record edited by hand or damaged: the fields _record_problem does not check are read
    # deep inside rescoring and printing; say which file is at fault, not "internal error"
    damaged = (KeyError, IndexError, TypeError, ValueError, AttributeError)
    try:
        new = rescore(data, ncu_csv, profile)
    except damaged as exc:
        raise MemmodelError(f"{path}: cannot rescore this record ({exc.__class__.__name__}: {exc})") from None
    if output:
        write_atomic(output, json.dumps(new, indent=1, allow_nan=False) + "\n", force=True)
    try:
        _emit(new, fmt, plot_path)
    except damaged as exc:
        raise MemmodelError(f"{path}: cannot print this record ({exc.__class__.__name__}: {exc})") from None


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
    return None


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x * 100:+.1f}%"


def _print_table(data: dict[str, Any]) -> None:
    from ..units import format_bytes, format_time
    from ..validation import time_errors
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
                (cid, t["step"], format_time(t["predicted_s"]), format_time(t["measured_s"]), _pct(t["error"]), "", "")
            )
        for b in e.get("bytes", []):
            meas = b["measured_hbm_read_bytes"] + b["measured_hbm_write_bytes"]
            pred = b["predicted_hbm_read_bytes"] + b["predicted_hbm_write_bytes"]
            rows.append(
                (
                    cid,
                    f"{b['kernel']} bytes",
                    format_bytes(pred),
                    format_bytes(meas),
                    _pct(b["error"]),
                    _pct(b["paper_error"]),
                    _pct(b["compulsory_error"]),
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
    for sp in s.get("speedups", []):
        con.print(
            f"speedup of FlashAttention over standard, {sp['workload']}: predicted {sp['predicted']:.2f}×, measured {sp['measured']:.2f}×"
        )


def _version() -> str:
    from .. import __version__

    return __version__
