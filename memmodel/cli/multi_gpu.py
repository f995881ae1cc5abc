"""``validate --gpus P`` and ``calibrate --gpus P``: context-parallel attention and NCCL curves
on several GPUs of this machine (:mod:`memmodel.gpu.cp_run`); the record and its scores
(:mod:`memmodel.parallel`), which need no GPU."""

from __future__ import annotations

import shlex
import sys
from typing import Any

import click

from ..units import format_percent

CP_RECORD_SCHEMA = "memmodel.validate-cp/1"


def _command() -> str:
    return "memmodel " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:] else "memmodel"


def read_cases(case_specs: tuple[str, ...], cases_file: str | None) -> list[str]:
    from ..parallel import parse_cp_case

    specs = list(case_specs)
    if cases_file:
        from ..fileio import read_text

        text = read_text(cases_file, what="file of case specs")
        specs += [spec for line in text.splitlines() for spec in line.split("#", 1)[0].split()]
    if not specs:
        raise click.UsageError("validate --gpus needs --cases FILE or --case SPEC (e.g. scheme=ring,n=16384,d=128)")
    for spec in specs:
        parse_cp_case(spec)  # refuse a bad spec before any GPU work
    return specs


def prediction_line(spec: str, profile: Any) -> str:
    from ..parallel import parse_cp_case, predict_case

    case = parse_cp_case(spec)
    p = predict_case(case, profile)
    bwd = f" bwd {p['backward_s'] * 1e3:.3f} ms" if p["backward_s"] is not None else ""
    return (
        f"{case.id}: wall {p['wall_s'] * 1e3:.3f} ms (fwd {p['forward_s'] * 1e3:.3f} ms{bwd}); "
        f"link {p['link_bytes']} B per GPU; one GPU {p['single_gpu_s'] * 1e3:.3f} ms; speed-up {p['speedup']:.3f}x"
    )


def score(record: dict[str, Any], profile: Any) -> dict[str, Any]:
    """Predictions with ``profile`` beside each case's measurement, and the error statistics."""
    from ..parallel import parse_cp_case, predict_case
    from ..scoring import _stats

    wall, speed = [], []
    links_equal = True
    for entry in record["cases"]:
        pred = predict_case(parse_cp_case(entry["spec"]), profile)
        entry["predicted"] = pred
        m = entry.get("measured")
        if not m:
            continue
        entry["errors"] = {
            "wall": (pred["wall_s"] - m["wall_s"]) / m["wall_s"],
            "forward": (pred["forward_s"] - m["forward_s"]) / m["forward_s"],
            "speedup": (pred["speedup"] - m["speedup"]) / m["speedup"] if m.get("speedup") else None,
            "link_bytes_equal": pred["link_bytes"] == m["link_bytes"],
        }
        if m.get("backward_s"):
            entry["errors"]["backward"] = (pred["backward_s"] - m["backward_s"]) / m["backward_s"]
        wall.append(abs(entry["errors"]["wall"]))
        if entry["errors"]["speedup"] is not None:
            speed.append(abs(entry["errors"]["speedup"]))
        links_equal &= entry["errors"]["link_bytes_equal"]
    record["profile"] = {"name": profile.name, "path": str(profile.path) if profile.path else None}
    record["summary"] = {
        "cases": len(wall),
        "wall_abs_error": _stats(wall),
        "speedup_abs_error": _stats(speed),
        "link_bytes_equal": links_equal,
        "checks_ok": bool(wall) and all(e.get("check", {}).get("ok", False) for e in record["cases"]),
    }
    return record


def emit_record(record: dict[str, Any], fmt: str) -> None:
    from . import terminal

    if fmt == "json":
        terminal.print_json(record)
        return
    if fmt in ("markdown", "summary", "stats"):
        click.echo(markdown(record), nl=False)
        return
    rows = []
    for e in record["cases"]:
        m, p, err = e.get("measured"), e.get("predicted", {}), e.get("errors", {})
        if not m:
            rows.append((e["id"], "—", "—", "—", "—", "—", e.get("error", "")))
            continue
        rows.append(
            (
                e["id"],
                f"{p['wall_s'] * 1e3:.3f} ms",
                f"{m['wall_s'] * 1e3:.3f} ms",
                format_percent(err["wall"]),
                f"{p['speedup']:.2f}× / {m['speedup']:.2f}×",
                "=" if err["link_bytes_equal"] else f"{p['link_bytes']} ≠ {m['link_bytes']}",
                f"{e['check']['max_rel_error']:.1e}",
            )
        )
    terminal.console().print(
        terminal.table(
            None,
            [
                ("case", "left"),
                ("predicted", "right"),
                ("measured", "right"),
                ("error", "right"),
                ("speed-up pred / meas", "right"),
                ("link bytes", "left"),
                ("check", "right"),
            ],
            rows,
        )
    )


def markdown(record: dict[str, Any]) -> str:
    s = record.get("summary", {})
    lines = ["| quantity | median abs error | max abs error | cases |", "| --- | --- | --- | --- |"]
    for key, label in (("wall_abs_error", "wall time"), ("speedup_abs_error", "speed-up over one GPU")):
        st = s.get(key)
        if st:
            lines.append(
                f"| {label}, memmodel | {st['median_abs'] * 100:.1f}% | {st['max_abs'] * 100:.1f}% | {st['n']} |"
            )
    lines += ["", "| case | predicted | measured | error | link bytes equal |", "| --- | --- | --- | --- | --- |"]
    for e in record["cases"]:
        if "measured" not in e:
            continue
        lines.append(
            f"| {e['id']} | {e['predicted']['wall_s'] * 1e3:.3f} ms | {e['measured']['wall_s'] * 1e3:.3f} ms | "
            f"{format_percent(e['errors']['wall'])} | {'yes' if e['errors']['link_bytes_equal'] else 'no'} |"
        )
    return "\n".join(lines) + "\n"


def _rescore(path: str, *, gpu: str | None, output: str | None, force: bool, fmt: str) -> None:
    """A record of ``validate --gpus`` scored again with ``gpu``'s profile (else the one it names)."""
    import json

    from ..errors import WorkloadError
    from ..fileio import read_json, write_atomic
    from ..hardware import load_profile

    saved = read_json(
        path, what="validation record", not_json=f"{path} is not a JSON record of validate --gpus", error=WorkloadError
    )
    if not isinstance(saved, dict) or saved.get("schema") != CP_RECORD_SCHEMA:
        raise WorkloadError(f"{path} is not a {CP_RECORD_SCHEMA} record (validate --gpus writes those)")
    profile = load_profile(gpu or saved.get("profile", {}).get("name") or "h200")
    record = score(saved, profile)
    if output:
        write_atomic(output, json.dumps(record, indent=1) + "\n", force=force)
    emit_record(record, fmt)


def validate(
    *,
    gpus: int,
    gpu: str | None,
    case_specs: tuple[str, ...],
    cases_file: str | None,
    reps: int,
    output: str | None,
    list_only: bool,
    predict_only: bool,
    rescore_path: str | None,
    force: bool,
    fmt: str,
    device: str = "cuda",
) -> None:
    import datetime
    import json

    from .. import __version__
    from ..fileio import write_atomic
    from ..hardware import load_profile

    if rescore_path:
        _rescore(rescore_path, gpu=gpu, output=output, force=force, fmt=fmt)
        return
    specs = read_cases(case_specs, cases_file)
    if list_only:
        from ..parallel import parse_cp_case

        for spec in specs:
            click.echo(parse_cp_case(spec).id)
        return
    if predict_only:
        from .options import echo_predictions

        echo_predictions(gpu, specs, prediction_line)
        return
    from .options import check_outputs

    check_outputs(force=force, **{"--output": output})
    from ..gpu import cp_run
    from ..gpu.context_parallel import SAFE_ENV

    if device == "cuda":
        cp_run.require_gpus(gpus)
    profile = load_profile(gpu or "h200")
    record: dict[str, Any] = {
        "schema": CP_RECORD_SCHEMA,
        "memmodel_version": __version__,
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": _command(),
        "gpus": gpus,
        "environment": dict(SAFE_ENV),
    }
    if device == "cuda":
        import torch

        record["device"] = torch.cuda.get_device_name(0)
        record["torch_version"] = torch.__version__
    record["cases"] = cp_run.launch(
        "validate_worker",
        gpus,
        {"cases": specs, "reps": reps, "device": device},
        partial=f"{output}.partial" if output else None,
    )
    record = score(record, profile)
    if output:
        write_atomic(output, json.dumps(record, indent=1) + "\n", force=force)
    emit_record(record, fmt)


def calibrate(
    *, gpus: int, base: str | None, output: str | None, force: bool, quick: bool, fmt: str, device: str = "cuda"
) -> None:
    import yaml

    from ..calibration.interconnect import apply, efficiencies, latency
    from ..fileio import read_text, write_atomic
    from ..gpu import cp_run
    from ..hardware import load_profile
    from ..units import format_bytes, format_time
    from . import terminal
    from .options import check_outputs

    check_outputs(force=force, **{"--output": output})
    if device == "cuda":
        cp_run.require_gpus(gpus)
    profile = load_profile(base or "h200")
    if profile.interconnect is None or profile.path is None:
        raise click.UsageError(f"--base {profile.name} has no interconnect section to calibrate")
    result = cp_run.calibrate_nccl(gpus, quick=quick, device=device)
    result["command"] = _command()
    data = yaml.safe_load(read_text(profile.path, what="YAML file"))
    data = apply(data, result)
    if output:
        from ..hardware import parse_profile

        text = yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=100000, allow_unicode=True)
        parse_profile(yaml.safe_load(text), "<calibrated profile>")
        write_atomic(output, text, force=force)
    if fmt == "json":
        terminal.print_json(result)
        return
    bw = profile.interconnect.bandwidth_bytes_per_s
    eff = efficiencies(result, bw)
    rows = []
    for name, points in eff.items():
        for size, share in points.items():
            row = next(r for r in result["curves"][name] if int(r[0]) == size)
            rows.append(
                (
                    name,
                    format_bytes(size, binary=True),
                    format_time(row[1]),
                    f"{row[2] / row[1] / 1e9:.1f} GB/s",
                    f"{share:.3f}",
                )
            )
    terminal.console().print(
        terminal.table(
            None,
            [
                ("collective", "left"),
                ("message", "right"),
                ("time", "right"),
                ("sent/time", "right"),
                ("of link", "right"),
            ],
            rows,
        )
    )
    lat = latency(result)
    if lat is not None:
        terminal.note(f"latency (intercept of the smallest send/recv messages): {format_time(lat)}")
