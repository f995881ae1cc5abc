"""Regenerate memmodel/data/validated.json: how far the model is off where each caveat fires.

For every record in :data:`CHECKS` (a ``memmodel validate`` record, ``X.json`` or
``X.json.gz``, with its Nsight Compute trace beside it) the record is rescored with its own
profile, as ``memmodel validate --rescore`` does; every measured case is then compared as a
user would (``memmodel compare`` with the case's implementation, L2 on), and for each caveat
class that fires there (:data:`memmodel.caveats.CHECKED`) the case's signed error is kept:
the HBM bytes of its forward or backward attention kernel, or the forward kernel's time.
The file records, per class, the records and kernels, and the median and range of those errors.

    python scripts/update_validated.py            # write the file
    python scripts/update_validated.py --check    # exit 1 if it is stale
    python scripts/update_validated.py --survey   # which classes fire in every record found

tests/test_caveats.py regenerates it and fails when it is stale.
"""

from __future__ import annotations

import gzip
import json
import statistics
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a script from a checkout
    sys.path.insert(0, str(REPO))

from memmodel.validated import CHECKED, REFERENCE, VALIDATED, VALIDATED_SCHEMA  # noqa: E402

#: the folder of the checks the figures come from: every ``memmodel validate`` record in it
#: with its trace (the references that rules were fitted to sit elsewhere and are left out)
CHECKS = "validation/h200/final"


def records(folder: str = CHECKS) -> tuple[str, ...]:
    """The records of ``folder``, as paths without .json / .json.gz, from the repository root."""
    found = {str(p.relative_to(REPO)).split(".json")[0] for p in (REPO / folder).glob("*.json*")}
    return tuple(sorted(stem for stem in found if p_ok(stem)))


def p_ok(stem: str) -> bool:
    """Whether ``stem`` has a record and a trace beside it."""
    return record_file(stem) is not None and trace_file(stem) is not None


#: classes whose error is of the backward pass (its bytes; its kernel's time where also TIMED), and of a kernel's time
BACKWARD = ("causal_backward", "mea_backward", "flex_spills")
TIMED = ("causal_tail", "fa2_uneven")
#: classes whose errors the file also gives by kind of grid
GROUPED = ("causal_curve_fa2", "causal_curve_cudnn")


def record_file(stem: str) -> Path | None:
    """The record ``stem`` names: ``stem.json`` or ``stem.json.gz``."""
    for suffix in (".json", ".json.gz"):
        path = REPO / (stem + suffix)
        if path.exists():
            return path
    return None


def _read(path: Path) -> str:
    raw = path.read_bytes()
    return (gzip.decompress(raw) if path.name.endswith(".gz") else raw).decode("utf-8")


def trace_file(stem: str) -> Path | None:
    """The Nsight Compute trace beside record ``stem``: ``stem.ncu.csv`` or ``stem.ncu.csv.gz``."""
    for suffix in (".ncu.csv", ".ncu.csv.gz"):
        path = REPO / (stem + suffix)
        if path.exists():
            return path
    return None


def measured_cases(stem: str) -> tuple[list[tuple[Any, dict[str, Any], list[Any]]], Any] | None:
    """Record ``stem``'s measured cases, each with its entry and its kernels at every placement,
    and the profile the record was scored with (None: no record or no trace)."""
    from memmodel.cases import Case
    from memmodel.cli.validate import recorded_profile
    from memmodel.gpu.ncu import parse_csv, split_placements
    from memmodel.gpu.validate import SCHEMA

    path, trace = record_file(stem), trace_file(stem)
    if path is None or trace is None:
        return None
    data = json.loads(_read(path))
    if data.get("schema") != SCHEMA:
        return None
    profile = recorded_profile(data, str(path))
    ok = [
        (Case.from_dict(e["case"]), e)
        for e in data["cases"]
        if e.get("status") == "ok" and e["case"].get("kind") != "trace"  # a traced function: no workload
    ]
    placements = int((data.get("ncu") or {}).get("placements", 1))
    groups = split_placements(parse_csv(_read(trace)), [c.id for c, _ in ok], placements)
    return [(case, entry, groups[case.id]) for case, entry in ok if case.id in groups], profile


def refused(case: Any, profile: Any) -> bool:
    """Whether the model now refuses a measured case (``validate --rescore`` lists it as refused:
    e.g. cuDNN on a causal chunk, which its runner measured with a top-left mask)."""
    from memmodel.errors import WorkloadError
    from memmodel.scoring import predicted_times

    try:
        predicted_times(case, profile)
    except WorkloadError:
        return True
    return False


def fired(case: Any, profile: Any) -> tuple[str, ...]:
    """The caveat classes ``memmodel compare`` gives for ``case`` (its implementation, L2 on)."""
    from memmodel.model import compare
    from memmodel.scoring import case_options, standard_variant

    if case.impl == "standard":
        return ()
    c = compare(case.workload(), profile, case_options(case, "on", profile=profile), standard=standard_variant(case))
    return c.caveat_classes


def group(case: Any) -> str:
    """The kind of grid a case is, for the classes given by group."""
    w = case.workload()
    if int(w.group) > 1:
        return "GQA grids"
    return "one head" if int(w.batch) * int(w.heads) == 1 else "several heads"


def error_of(case: Any, entry: dict[str, Any], runs: list[Any], profile: Any, cls: str) -> tuple[str, float] | None:
    """(kernel, signed error) of ``cls`` on a measured case, scored now as a rescoring does:
    the HBM bytes of the pass's largest kernel (measured) against the median over the
    placements, or the forward kernel's time; None where the record has none."""
    from memmodel.gpu.ncu import median_kernels
    from memmodel.scoring import kernel_time_errors, predicted_times, score_case_detail

    if cls in TIMED:
        now = {**entry, "predicted": predicted_times(case, profile)}
        timed_pass = "backward" if cls in BACKWARD else "forward"
        rows = [r for r in kernel_time_errors(now) if r.get("kernel") and r.get("pass") == timed_pass]
        if not rows:
            return None
        top = max(rows, key=lambda r: r["measured_s"])
        return top["kernel"], float(top["error"])
    wanted = "backward" if cls in BACKWARD else "forward"
    try:
        scores = score_case_detail(case, median_kernels(runs), profile).scores
    except ValueError:  # placements that launched different kernels: no byte score
        return None
    rows = [s for s in scores if s.pass_ == wanted]
    if not rows:
        return None
    top = max(rows, key=lambda s: s.measured_read + s.measured_write)
    return top.kernel, float(top.error)


def _stats(errors: list[float]) -> dict[str, Any]:
    return {
        "count": len(errors),
        "median": round(statistics.median(errors), 4),
        "min": round(min(errors), 4),
        "max": round(max(errors), 4),
    }


def collect(stems: tuple[str, ...] | None = None) -> dict[str, list[dict[str, Any]]]:
    """Per caveat class: the (record, case, group, kernel, error) rows where it fires."""
    rows: dict[str, list[dict[str, Any]]] = {cls: [] for cls in CHECKED}
    for stem in records() if stems is None else stems:
        got = measured_cases(stem)
        if got is None:
            raise SystemExit(f"{stem}: no record or no Nsight Compute trace beside it")
        cases, profile = got
        for case, entry, runs in cases:
            if refused(case, profile):
                continue
            for cls in dict.fromkeys(fired(case, profile)):
                if cls not in CHECKED:
                    continue
                found = error_of(case, entry, runs, profile, cls)
                if found is None or found[1] != found[1]:
                    continue
                rows[cls].append(
                    {"record": stem, "case": case.id, "group": group(case), "kernel": found[0], "error": found[1]}
                )
    return rows


def generate(stems: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The data file's content."""
    classes: dict[str, Any] = {}
    for cls, rows in collect(stems).items():
        entry: dict[str, Any] = {"what": CHECKED[cls]}
        if rows:
            entry.update(_stats([r["error"] for r in rows]))
            entry["records"] = sorted({r["record"] for r in rows})
            entry["kernels"] = sorted({r["kernel"] for r in rows})
            if cls in GROUPED:
                names = [g for g in ("one head", "several heads", "GQA grids") if any(r["group"] == g for r in rows)]
                entry["groups"] = {g: _stats([r["error"] for r in rows if r["group"] == g]) for g in names}
            entry["cases"] = [[r["record"].rsplit("/", 1)[-1], r["case"], round(r["error"], 4)] for r in rows]
        else:
            entry["count"] = 0
        classes[cls] = entry
    return {
        "schema": VALIDATED_SCHEMA,
        "about": "signed errors (predicted / measured - 1) where each caveat fires; scripts/update_validated.py",
        "reference": reference_figures(),
        "classes": classes,
        "time_ranges": time_ranges(),
        "mode_ranges": mode_ranges(),
    }


#: the profile the datasheet class is measured with: the H200's datasheet figures alone
DATASHEET_PROFILE = "validation/h200/h200-datasheet.yaml"
#: the share of the measured errors a time's range covers: from the first to the last decile
RANGE_DECILES = (1, 9)


def validate_records(folder: str = CHECKS) -> Any:
    """``(stem, path, data)`` of every validate record in ``folder``, in name order."""
    from memmodel.gpu.validate import SCHEMA

    for stem in sorted({str(p.relative_to(REPO)).split(".json")[0] for p in (REPO / folder).glob("*.json*")}):
        path = record_file(stem)
        if path is None:
            continue
        data = json.loads(_read(path))
        if data.get("schema") == SCHEMA:
            yield stem, path, data


def step_errors(profile_of: Any, folder: str = CHECKS) -> tuple[list[float], list[str]]:
    """The signed errors (predicted / measured - 1) of every measured step (a forward, a
    backward, a whole training step, a standard kernel) of the records of ``folder``, with each
    record's own profile (``profile_of(data, path)``) as ``validate --rescore`` would, and the
    records that gave some."""
    from memmodel.cases import Case
    from memmodel.scoring import predicted_times, time_errors

    errors: list[float] = []
    used: list[str] = []
    for stem, path, data in validate_records(folder):
        profile = profile_of(data, str(path))
        before = len(errors)
        for entry in data["cases"]:
            if entry.get("status") != "ok" or "timing" not in entry or entry["case"].get("kind") == "trace":
                continue  # a traced function is no workload of the time model's classes
            case = Case.from_dict(entry["case"])
            if refused(case, profile):
                continue
            now = {**entry, "predicted": predicted_times(case, profile)}
            errors.extend(r["error"] for r in time_errors(now) if r["error"] == r["error"])
        if len(errors) > before:
            used.append(stem)
    return errors, used


def time_ranges() -> dict[str, Any]:
    """How far a time of each rate class (:attr:`memmodel.hardware.Profile.rate_class`) is
    from what is measured: the first and last decile of the signed errors. ``measured``: the
    validation records with the profile they were measured with; ``datasheet``: the same
    records with the H200's datasheet figures alone. No record of ours measures a GPU of the two
    classes between (``same-architecture``, derived; ``other-architecture``, transferred): their
    ranges come from the published kernel times held back as blind checks
    (``validation/published/``, scored by ``benchmarks/published_checks.py`` with the model as it
    is), every GPU family weighing the same; a class none of whose GPUs is published takes the
    datasheet class's spread about its median (the transfer rules take the measured shares,
    which removes the datasheet's bias but not the spread), kept as ``stand_in`` either way.
    The published points judge the model, never fit it: they size the range its times carry."""
    from memmodel.cli.validate import recorded_profile
    from memmodel.hardware import load_file

    datasheet = load_file(REPO / DATASHEET_PROFILE)
    out: dict[str, Any] = {}
    for cls, profile_of, basis in (
        ("measured", recorded_profile, "steps of the validation records, each with the profile it was measured with"),
        ("datasheet", lambda data, path: datasheet, f"the same steps predicted with {DATASHEET_PROFILE} alone"),
    ):
        errors, used = step_errors(profile_of)
        deciles = statistics.quantiles(errors, n=10)
        lo, hi = deciles[RANGE_DECILES[0] - 1], deciles[RANGE_DECILES[1] - 1]
        out[cls] = {
            "low": round(lo, 4),
            "median": round(statistics.median(errors), 4),
            "high": round(hi, 4),
            "count": len(errors),
            "records": len(used),
            "basis": basis,
        }
    ds = out["datasheet"]
    centred = {k: round((1 + ds[k]) / (1 + ds["median"]) - 1, 4) for k in ("low", "high")}
    stand_in = {
        **centred,
        "median": 0.0,
        "count": 0,
        "records": 0,
        "basis": "no GPU of this class measured: the datasheet class's spread about its median stands in",
    }
    checks = published_checks()
    errors = checks.class_errors(checks.score(checks.load_checks()))
    for cls in checks.PUBLISHED_CLASSES:
        found = checks.class_range(errors.get(cls, {}))
        if found is None:
            out[cls] = {**stand_in, "stand_in": stand_in}
            continue
        families = ", ".join(f"{f} {n}" for f, n in found["families"].items())
        out[cls] = {
            **{k: round(found[k], 4) for k in ("low", "median", "high")},
            "count": found["count"],
            "records": 0,
            "families": found["families"],
            "basis": f"published kernel times of GPUs of this class held back as blind checks ({PUBLISHED}: "
            f"{families}), every family weighing the same; never fitted to",
            "stand_in": stand_in,
        }
    return out


#: the published kernel times that size the derived and transferred classes' ranges
PUBLISHED = "validation/published/checks.yaml"


def published_checks() -> Any:
    """benchmarks/published_checks.py as a module (the scorer of :data:`PUBLISHED`)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("published_checks", REPO / "benchmarks" / "published_checks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("published_checks", module)
    spec.loader.exec_module(module)
    return module


def mode_errors(folder: str = CHECKS) -> tuple[dict[str, list[float]], list[str]]:
    """The signed errors of each timing a user's timer sees (``call``, ``queued``, ``graph``) of
    every case of the records of ``folder`` that measured them, each record rescored as
    ``validate --rescore`` scores it (its own profile, its machine's host figures), and the
    records that gave some."""
    from memmodel.cli.validate import _rescored
    from memmodel.timing_modes import MEASURED_MODES, mode_time_errors

    errors: dict[str, list[float]] = {mode: [] for mode in MEASURED_MODES}
    used: list[str] = []
    for stem, path, data in validate_records(folder):
        if not any("call_time_s" in (e.get("timing") or {}) for e in data.get("cases", ())):
            continue
        found = [r for e in _rescored(str(path), None)["cases"] for r in mode_time_errors(e)]
        for r in found:
            if r["error"] == r["error"]:
                errors[r["mode"]].append(r["error"])
        if found:
            used.append(stem)
    return errors, used


def mode_ranges() -> dict[str, Any]:
    """How far a time under each of a user's timings is from what is measured: the first and
    last decile of that mode's signed errors in the records (:func:`mode_errors`)."""
    errors, used = mode_errors()
    out: dict[str, Any] = {}
    for mode, values in errors.items():
        if len(values) < 10:
            continue
        deciles = statistics.quantiles(values, n=10)
        out[mode] = {
            "low": round(deciles[RANGE_DECILES[0] - 1], 4),
            "median": round(statistics.median(values), 4),
            "high": round(deciles[RANGE_DECILES[1] - 1], 4),
            "count": len(values),
            "records": len(used),
            "basis": f"{mode} times of the validation records that measured them, each with its machine's host figures",
        }
    return out


def reference_figures() -> dict[str, float]:
    """The bundled H200 profile's figures that caveats quote (:data:`memmodel.validated.REFERENCE`)."""
    from memmodel import implementations
    from memmodel.hardware import load_profile

    p = load_profile("h200")
    figures = p.implementation_figures
    shares = [f.clocks_fall[0] for i in implementations.IMPLEMENTATIONS if (f := p.implementation(i)).clocks_fall]
    after = [f.sustained_after_s for f in figures.values() if f.sustained_after_s is not None]
    slower = []
    for impl, fig in figures.items():
        default = dict(fig.efficiency)
        for tile, curve in fig.tile_efficiency.items():
            for d, eff in curve:
                if implementations.tiles(impl, d, False) != tile and d in default:
                    slower.append(default[d] / eff - 1.0)
    out = {
        "mma_sync_share": p.mma_sync_flops_per_s["fp16"] / p.peak_flops("fp16"),
        "one_cta_share": p.mma_sync_one_cta_share,
        "sustained_slowdown": max(1.0 / s - 1.0 for s in shares),
        "sustained_after_min_s": min(after),
        "sustained_after_max_s": max(after),
        "tile_slowdown_min": min(slower),
        "tile_slowdown_max": max(slower),
    }
    assert out.keys() == REFERENCE.keys()
    return {k: round(float(v), 4) for k, v in out.items()}


def render(content: dict[str, Any]) -> str:
    return json.dumps(content, indent=1) + "\n"


def survey(folder: str = "validation") -> None:
    """Which classes fire in every validate record under ``folder`` (all of validation/ by default)."""
    stems = sorted({str(p.relative_to(REPO)).split(".json")[0] for p in (REPO / folder).rglob("*.json*")})
    for stem in stems:
        if not p_ok(stem) or measured_cases(stem) is None:
            continue
        counts = {cls: len(r) for cls, r in collect((stem,)).items() if r}
        print(stem, counts or "-", flush=True)


def main() -> int:
    if "--survey" in sys.argv:
        survey()
        return 0
    text = render(generate())
    if "--check" in sys.argv:
        if not VALIDATED.exists() or VALIDATED.read_text(encoding="utf-8") != text:
            print(f"{VALIDATED.relative_to(REPO)} is stale: run python scripts/update_validated.py", file=sys.stderr)
            return 1
        return 0
    VALIDATED.parent.mkdir(exist_ok=True)
    VALIDATED.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
