"""``memmodel validate`` on a GPU: time the cases, optionally measure bytes with ncu, score.

The record (``--output FILE.json``) is rewritten atomically after every case, so it is
valid JSON at any moment and keeps every finished case when a run fails or is interrupted.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import __version__
from ..cases import Case
from ..errors import RuntimeFailure, WorkloadError
from ..fileio import for_file, sibling, write_atomic
from ..hardware import Profile
from ..scoring import predicted_times, score_case_detail, summarize_record
from ..trace_cases import TraceCase, is_trace_entry, resolve_target, source_digest
from ..trace_scoring import trace_prediction

SCHEMA = "memmodel.validate/1"


def profile_entry(profile: Profile) -> dict[str, Any]:
    """What a record says of its profile: the name, and the path relative to the current folder
    where the profile lies inside it (a bundled profile of the repository a record is measured
    from: ``memmodel/hardware/profiles/h200.yaml``, not the measuring machine's absolute path), so that the record
    finds it again from another checkout."""
    if profile.path is None:
        return {"name": profile.name, "path": None}
    path = Path(profile.path)
    if path.is_absolute():
        try:
            path = path.resolve().relative_to(Path.cwd().resolve())
        except ValueError:  # outside the current folder: as it is
            pass
    return {"name": profile.name, "path": path.as_posix()}


class Record:
    def __init__(self, path: Path | None, device: str, profile: Profile, command: str) -> None:
        self.path = path
        self.data: dict[str, Any] = {
            "schema": SCHEMA,
            "memmodel_version": __version__,
            "device": device,
            "profile": profile_entry(profile),
            "started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "command": command,
            "cases": [],
            "summary": {},
        }

    def case(self, case_id: str) -> dict[str, Any]:
        for c in self.data["cases"]:
            if c["case"]["id"] == case_id:
                return c
        raise KeyError(case_id)

    def save(self) -> None:
        self.data["summary"] = summarize_record(self.data)
        if self.path is not None:
            text = json.dumps(self.data, indent=1, allow_nan=False, default=_nan_safe) + "\n"
            write_atomic(self.path, for_file(self.path, text), force=True)

    def trace_path(self) -> Path | None:
        """Where the raw Nsight Compute trace goes: beside the record, compressed as it is."""
        if self.path is None:
            return None
        return sibling(self.path, ".ncu.csv.gz" if self.path.name.endswith(".gz") else ".ncu.csv")


def _nan_safe(value: Any) -> Any:  # pragma: no cover - only for unexpected types
    return str(value)


def run_validation(
    cases: list[Any],
    profile: Profile,
    *,
    record: Record,
    ncu: bool,
    reps: int,
    placements: int = 1,
    on_progress: Callable[[int, str], None] | None = None,
    predictions: dict[str, dict[str, Any]] | None = None,
    host_probe: bool = False,
    ncu_metrics: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Time every case on the GPU (and with ``ncu`` measure the bytes of the ordinary ones),
    each entry saved in ``record`` as it finishes. Trace cases are predicted by
    :func:`memmodel.trace_scoring.trace_prediction`, or taken from ``predictions`` (case id ->
    prediction) where the caller traced them already. ``host_probe``: measure this machine's
    host dispatch first (:mod:`.calibrate_host`, kept in the record's ``host_probe``) and predict
    the call, queued and graph times with it (the kernel times are the profile's either way).
    ``ncu_metrics``: Nsight Compute metrics collected beside the bytes (kept in the raw trace)."""
    from .paged_run import grouped
    from .run import require_cuda, time_case
    from .trace_run import time_trace_case

    torch = require_cuda()
    cases = grouped(cases)  # the paged cases by kernel variant: each compiles once (nvcc, Triton)
    total = len(cases) * (2 if ncu else 1)
    done = 0
    bundled = profile
    if host_probe:
        # this machine's host first: call, queued and graph times are predicted with its figures
        from ..calibration.host import with_host_figures
        from .calibrate_host import measure_host

        if on_progress:
            on_progress(done, "host dispatch")
        try:
            rows = measure_host(skip=("flex",))["rows"]
        except Exception as exc:  # the host probe is a help: its failure keeps the bundled figures
            record.data["host_probe"] = {"error": f"{exc.__class__.__name__}: {exc}"[:300]}
        else:
            record.data["host_probe"] = {"rows": rows}
            profile = with_host_figures(profile, rows)
        record.save()
    for case in cases:
        if on_progress:
            on_progress(done, f"time {case.impl}")
        if isinstance(case, TraceCase):
            given = (predictions or {}).get(case.id) if profile is bundled else None
            predicted = given or trace_prediction(case, profile)
        else:
            predicted = predicted_times(case, profile)
        entry: dict[str, Any] = {"case": case.to_dict(), "predicted": predicted}
        try:
            if isinstance(case, TraceCase):
                entry["timing"] = time_trace_case(case, reps=reps)
            else:
                entry["timing"] = time_case(case, reps=reps)
            entry["status"] = "ok"
        except torch.cuda.OutOfMemoryError as exc:
            torch.cuda.empty_cache()
            entry.update(status="skipped", reason=f"out of GPU memory: {str(exc).splitlines()[0]}")
        except Exception as exc:  # a wrong or failing kernel is a failure, recorded
            torch.cuda.empty_cache()
            entry.update(status="failed", reason=f"{exc.__class__.__name__}: {exc}"[:500])
        record.data["cases"].append(entry)
        record.save()
        done += 1
    if ncu:
        if on_progress:
            on_progress(done, "Nsight Compute")
        profiled = [c for c in cases if isinstance(c, Case) and record.case(c.id)["status"] == "ok"]
        measure_bytes(profiled, profile, record, placements, ncu_metrics)
    if on_progress:
        on_progress(total, "done")
    record.save()
    return record.data


def measure_bytes(
    cases: list[Case], profile: Profile, record: Record, placements: int = 1, metrics: tuple[str, ...] = ()
) -> None:
    """One ncu process over all cases, each profiled with its inputs at ``placements``
    placements; scores attached to each case's entry. ``metrics``: collected beside the bytes,
    kept in the raw trace beside the record and listed in its ``ncu.metrics``."""
    from .ncu import NcuParseError, command, kernel_filter, parse_csv, split_placements

    if shutil.which("ncu") is None:
        record.data["ncu"] = {"status": "unavailable", "reason": "ncu (Nsight Compute) is not on PATH"}
        record.save()
        return
    with tempfile.TemporaryDirectory() as tmp:
        cases_file = Path(tmp) / "cases.txt"
        cases_file.write_text("\n".join(c.spec() for c in cases) + "\n")
        env = {**os.environ, "MEMMODEL_CASES_FILE": str(cases_file), "MEMMODEL_PLACEMENTS": str(placements)}
        args = command(
            [sys.executable, "-m", "memmodel.gpu.run", "ncu", str(Path(tmp) / "ncu.jsonl")],
            kernel_regex=kernel_filter([c.impl for c in cases]),
            metrics=metrics,
        )
        proc = subprocess.run(args, capture_output=True, text=True, env=env)
        if proc.returncode != 0 or "ERR_NVGPUCTRPERM" in proc.stdout + proc.stderr:
            reason = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            record.data["ncu"] = {"status": "failed", "reason": f"ncu exited {proc.returncode}: {reason[0][:300]}"}
            record.save()
            return
        trace = record.trace_path()
        if trace is not None:  # keep the raw trace beside the record, for re-analysis
            write_atomic(trace, for_file(trace, proc.stdout), force=True)
        try:
            groups = split_placements(parse_csv(proc.stdout), [c.id for c in cases], placements)
        except NcuParseError as exc:
            record.data["ncu"] = {"status": "failed", "reason": str(exc)}
            record.save()
            return
    record.data["ncu"] = {"status": "ok", "metrics": [*_metrics(), *metrics], "placements": placements}
    for case in cases:
        entry = record.case(case.id)
        score_placements(entry, case, groups[case.id], profile)
        if placements > 1:
            entry["ncu_placements"] = [[_kernel_dict(k) for k in run] for run in groups[case.id]]
    record.save()


def _kernel_dict(k: Any) -> dict[str, Any]:
    return {
        "name": k.name,
        "dram_read_bytes": k.dram_read_bytes,
        "dram_write_bytes": k.dram_write_bytes,
        "l2_bytes": k.l2_bytes,
        "time_s": k.time_s,
    }


def score_placements(entry: dict[str, Any], case: Case, runs: list[list[Any]], profile: Profile) -> None:
    """Score a case's kernels at the median over its placements (``runs``: the measured kernels
    of each), each byte row also giving the HBM bytes error at every placement
    (``placement_errors``); ``ncu_kernels``: the medians."""
    from .ncu import median_kernels

    try:
        measured = median_kernels(runs)
        entry["ncu_kernels"] = [_kernel_dict(k) for k in measured]
        score_entry(entry, case, measured, profile)
        if len(runs) > 1:  # each placement's kernels as the median has them (one-off launches left out)
            names = {k.name for k in measured}
            each = [score_case_detail(case, [k for k in run if k.name in names], profile).scores for run in runs]
            for i, row in enumerate(entry["bytes"]):
                row["placement_errors"] = [scores[i].error for scores in each]
    except ValueError as exc:  # NcuParseError included: placements that launched different kernels
        entry["bytes_error"] = str(exc)


def score_entry(entry: dict[str, Any], case: Case, measured: list[Any], profile: Profile) -> None:
    """Attach a case's byte scores (and, for fused kernels, the measured occupancy and the
    predictions made with it) to its record entry. The training step also lists the measured
    kernels the model does not describe (``unmodelled_kernels``) and the model kernels nothing
    measured matched (``missing_kernels``); raises ValueError where a forward case's kernels
    do not match (recorded as ``bytes_error``)."""
    detail = score_case_detail(case, measured, profile)
    entry["bytes"] = [s.to_dict() for s in detail.scores]
    if case.impl != "standard":
        entry["measured_ctas_per_sm"] = detail.ctas_per_sm
    if case.backward:
        entry["unmodelled_kernels"] = [
            {
                "name": k.name,
                "dram_read_bytes": k.dram_read_bytes,
                "dram_write_bytes": k.dram_write_bytes,
                "time_s": k.time_s,
            }
            for k in detail.unmatched
        ]
        entry["missing_kernels"] = detail.missing
        if case.impl != "standard":
            entry["measured_backward_ctas_per_sm"] = detail.backward_ctas_per_sm
    if case.impl != "standard":
        entry["predicted"] = predicted_times(case, profile, detail.ctas_per_sm, detail.backward_ctas_per_sm)


def _metrics() -> tuple[str, ...]:
    from .ncu import METRICS

    return METRICS


def device_name() -> str:
    from .run import require_cuda

    torch = require_cuda()
    return str(torch.cuda.get_device_name())


def ensure_runnable() -> None:
    """Fail with one line before any work if torch/CUDA are missing."""
    from .run import require_cuda

    require_cuda()
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) == "":
        raise RuntimeFailure("CUDA_VISIBLE_DEVICES is empty: no GPU to validate on")


def rescore(data: dict[str, Any], ncu_csv: str | None, profile: Profile, *, near: Path | None = None) -> dict[str, Any]:
    """Score a record again (no GPU): new predictions from ``profile`` for the measured times
    and, given the record's Nsight Compute trace, for the measured bytes. Trace cases are traced
    again (:func:`rescore_trace_entry`; their files found from here, else from ``near``, the
    record's path, or a folder above it)."""
    from .ncu import parse_csv, split_placements

    out = {**data, "profile": profile_entry(profile)}
    out["rescored"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    rows = (data.get("host_probe") or {}).get("rows")
    if rows:  # the run measured its machine's host: its call times are scored with those figures
        from ..calibration.host import with_host_figures

        profile = with_host_figures(profile, rows)
    cases = []
    ok_cases = [Case.from_dict(e["case"]) for e in data["cases"] if e.get("status") == "ok" and not is_trace_entry(e)]
    placements = int((data.get("ncu") or {}).get("placements", 1))
    groups = split_placements(parse_csv(ncu_csv), [c.id for c in ok_cases], placements) if ncu_csv else {}
    for entry in data["cases"]:
        entry = dict(entry)
        if is_trace_entry(entry):
            cases.append(rescore_trace_entry(entry, profile, near))
            continue
        case = Case.from_dict(entry["case"])
        try:
            entry["predicted"] = predicted_times(case, profile)
        except WorkloadError as exc:  # the model refuses it now (e.g. a kernel PyTorch cannot run so)
            entry.update(status="refused", refused=str(exc), predicted={})
            for key in ("time_error", "bytes", "bytes_error"):
                entry.pop(key, None)
            cases.append(entry)
            continue
        if case.id in groups:
            entry.pop("bytes_error", None)
            score_placements(entry, case, groups[case.id], profile)
        cases.append(entry)
    out["cases"] = cases
    out["summary"] = summarize_record(out)
    return out


def rescore_trace_entry(entry: dict[str, Any], profile: Profile, near: Path | None = None) -> dict[str, Any]:
    """A trace case's entry predicted again: its function traced with the model as it is now
    (:func:`memmodel.trace_scoring.trace_prediction`). A case the model cannot trace now (its
    file gone, a shape it refuses) is ``refused``, with the reason, as a refused ordinary case
    is; ``source_changed`` where the traced file is no longer the one measured."""
    from ..errors import TraceError

    entry = dict(entry)
    for key in ("refused", "source_changed"):
        entry.pop(key, None)
    try:
        case = TraceCase.from_dict(entry["case"])
        target = resolve_target(case, near)
        entry["predicted"] = trace_prediction(case, profile, near)
    except (TraceError, WorkloadError) as exc:
        entry["predicted"] = {}
        entry["refused"] = str(exc)
        if entry.get("status") == "ok":
            entry["status"] = "refused"
        return entry
    measured = (entry.get("timing") or {}).get("source_sha256")
    if measured and measured != source_digest(target.rpartition(":")[0]):
        entry["source_changed"] = True
    return entry
