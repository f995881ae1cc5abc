"""Score memmodel against the held-back published attention checks (issue #28).

    python benchmarks/published_checks.py [--format table|json] [--gpu NAME] [--impl NAME] [--checks FILE]

Reads ``validation/published/checks.yaml`` (figures others published, each with its shape and
citation; never fitted to), builds each point's workload through the library
(``memmodel.compare(Workload(...), load_profile(gpu), options_for(...))`` with the options its
implementation maps to), turns the predicted time into the source's unit with the source's FLOP
convention, and prints per point the prediction against the published figure and the signed
error of the time, then per GPU family × implementation (and per GPU family) the median and
maximum of |error|. Points memmodel cannot express (a GPU without a profile, an implementation
without an option) are listed as not modelled, with the reason.

Error = (predicted time − published time) / published time: negative where memmodel is too fast.

``--proxy fa4=fa3`` (repeatable) scores an implementation memmodel cannot express with a
stand-in ``--impl``, for a look only: those rows are marked ``proxy`` and such a score is never
the record (the record is the plain command).
A benchmark, not a test: it prints figures and always exits 0 unless the data file is broken.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from memmodel import MemmodelError, Workload, compare, load_profile
from memmodel.implementations import IMPLEMENTATIONS
from memmodel.options import options_for
from memmodel.validated import VALIDATED, time_range

ROOT = Path(__file__).resolve().parent.parent
CHECKS = ROOT / "validation" / "published" / "checks.yaml"
SCHEMA = "memmodel.published-checks/1"
SCORE_SCHEMA = "memmodel.published-checks-score/1"

PASSES = ("forward", "backward", "fwd+bwd")
REQUIRED = ("id", "source", "fig", "gpu", "impl", "dtype", "batch", "heads", "kv_heads", "n", "d", "causal", "pass")
SOURCE_REQUIRED = ("citation", "url", "setup", "flops_convention", "reading")
#: families by memmodel profile name (one family per GPU today; siblings would share one)
FAMILIES = {
    "a100": "A100",
    "a100-pcie": "A100",  # the A100's 300 W PCIe card
    "h100-sxm": "H100",
    "h200": "H200",
    "b200": "B200",
    "gb200": "B200",  # the B200 of an NVL72 rack: the same GPU at another power limit
    "b300": "B300",
    "gb300": "B300",  # Blackwell Ultra in an NVL72 rack
    "mi300x": "MI300X",
    "mi355x": "MI355X",
}
#: the rate classes (memmodel.hardware.Profile.rate_class) whose time range these points give: no
#: record of ours measures a GPU of them (scripts/update_validated.py)
PUBLISHED_CLASSES = ("same-architecture", "other-architecture")
#: a time's range: from the first to the last decile of its class's errors, as for the records
RANGE_QUANTILES = (0.1, 0.9)
#: the statistics a source's loop may take of its timed calls
STATISTICS = ("mean", "median")
#: how a source timed a call: ``events``, CUDA events around it (memmodel's kernel time, launches
#: included); ``device``, the summed device time of its kernels (CUPTI through torch.profiler),
#: which no launch overhead enters
TIMERS = ("events", "device")
#: what a source's ``options`` may give an implementation (:func:`memmodel.options_for`'s): what
#: its script passed the kernel beside the shape (FA4's ``num_splits=0``: ``splits: auto``)
SOURCE_OPTIONS = frozenset({"splits"})
#: what a source's loop runs between its timed calls (its ``between``), and the probe records that
#: measured the clocks under it (``validation/probes/loop_gap_probe.py``, the pattern of that name,
#: beside the same call run back to back): ``cudnn-frontend``, new inputs by ``torch.randn``, an
#: L2-flush buffer's ``zero_()`` and a torch profiler started and stopped around each timed call;
#: ``cudnn-frontend-both``, the same with the backward run (flushed and profiled) after each forward
BETWEEN = {
    "cudnn-frontend": "validation/h200/loop-gap/loop-gap-h200-b*.jsonl.gz",
    "cudnn-frontend-both": "validation/h200/loop-gap/loop-gap-h200-b*.jsonl.gz",
}


def convention_flops(point: dict[str, Any], convention: str) -> float:
    """FLOPs of ``point`` as its source counts them. ``fa``: forward 4·N·N_kv·d per query head
    and batch element (N_kv = N unless the point gives ``n_kv``), causal ½ where the mask is
    square, backward 2.5×, forward + backward 3.5× (flash-attn's
    ``benchmarks/benchmark_flash_attention.py``; HipKittens' ``test_python.py`` and cudnn-frontend's
    benchmarks the same). A point with V's head dim apart (``d_v``) counts its products as
    cudnn-frontend's benchmark does: forward 2·scores·(d + d_v), backward 2·scores·(3·d + 2·d_v)
    (the same as the above where d_v = d)."""
    if convention != "fa":
        raise ValueError(f"unknown FLOP convention {convention!r}")
    n, n_kv = point["n"], point.get("n_kv", point["n"])
    d, d_v = point["d"], point.get("d_v", point["d"])
    window = point.get("window")
    if window is not None:
        # a sliding window of W keys (itself and the W − 1 before): Σ_i min(i + 1, W) scores a row
        w = min(int(window), n)
        scores = point["batch"] * point["heads"] * (n * w - w * (w - 1) // 2)
    else:
        halved = point["causal"] and n == n_kv
        scores = point["batch"] * n * n_kv * point["heads"] / (2 if halved else 1)
    per_pass = {"forward": d + d_v, "backward": 3 * d + 2 * d_v, "fwd+bwd": 4 * d + 3 * d_v}
    return 2 * scores * per_pass[point["pass"]]


def load_checks(path: Path = CHECKS) -> dict[str, Any]:
    """The checks file, validated: its schema, every source's fields, every point's fields, its
    source, its implementation's entry and a published figure. Raises ValueError naming the point."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if data.get("schema") != SCHEMA:
        raise ValueError(f"{path}: schema must be {SCHEMA!r}")
    sources, impls = data["sources"], data["implementations"]
    for key, src in sources.items():
        missing = [f for f in SOURCE_REQUIRED if not src.get(f)]
        if missing:
            raise ValueError(f"{path} -> sources.{key}: missing {', '.join(missing)}")
    ids: set[str] = set()
    for i, p in enumerate(data["points"]):
        where = f"{path} -> points[{i}] ({p.get('id', '?')})"
        missing = [f for f in REQUIRED if f not in p]
        if missing:
            raise ValueError(f"{where}: missing {', '.join(missing)}")
        if p["id"] in ids:
            raise ValueError(f"{where}: duplicate id")
        ids.add(p["id"])
        if p["source"] not in sources:
            raise ValueError(f"{where}: unknown source {p['source']!r}")
        if p["impl"] not in impls:
            raise ValueError(f"{where}: implementation {p['impl']!r} has no entry under implementations")
        if p["pass"] not in PASSES:
            raise ValueError(f"{where}: pass must be one of {', '.join(PASSES)}")
        if "tflops" not in p and "time_ms" not in p:
            raise ValueError(f"{where}: no published figure (tflops or time_ms)")
        if p["heads"] % p["kv_heads"]:
            raise ValueError(f"{where}: kv_heads must divide heads")
        if "n_kv" in p and not (isinstance(p["n_kv"], int) and p["n_kv"] >= 1):
            raise ValueError(f"{where}: n_kv must be a positive integer")
        if "window" in p and not (isinstance(p["window"], int) and p["window"] >= 1 and p["causal"]):
            raise ValueError(f"{where}: window must be a positive integer, on a causal point")
        if "d_v" in p and not (isinstance(p["d_v"], int) and p["d_v"] >= 1):
            raise ValueError(f"{where}: d_v must be a positive integer")
    for key, src in sources.items():
        loop = src.get("loop")
        if loop is None:
            continue
        where = f"{path} -> sources.{key}.loop"
        idle = loop.get("idle_before", [])
        for field_name in ("idle_before", "busy_before"):
            names = loop.get(field_name, [])
            if not isinstance(names, list) or any(name not in impls for name in names):
                raise ValueError(f"{where}: {field_name} must list implementations of the file ({', '.join(impls)})")
        if idle and not (isinstance(loop.get("calls"), int) and loop["calls"] > 0):
            raise ValueError(f"{where}: calls must be a positive integer where a loop starts idle")
        if not isinstance(loop.get("warmup", 0), int) or loop.get("warmup", 0) < 0:
            raise ValueError(f"{where}: warmup must be a non-negative integer")
        if loop.get("statistic", "mean") not in STATISTICS:
            raise ValueError(f"{where}: statistic must be one of {', '.join(STATISTICS)}")
        if "between" in loop and loop["between"] not in BETWEEN:
            raise ValueError(f"{where}: between must be one of {', '.join(BETWEEN)}")
    for key, src in sources.items():
        if src.get("timer", "events") not in TIMERS:
            raise ValueError(f"{path} -> sources.{key}: timer must be one of {', '.join(TIMERS)}")
        skipped = src.get("uncounted", {})
        if not isinstance(skipped, dict) or any(
            name not in impls or not isinstance(kernels, list) or not all(isinstance(k, str) for k in kernels)
            for name, kernels in skipped.items()
        ):
            raise ValueError(
                f"{path} -> sources.{key}.uncounted: a mapping of the file's implementations to lists of "
                "memmodel's kernel names"
            )
        given = src.get("options", {})
        if not isinstance(given, dict) or any(
            name not in impls or not isinstance(opts, dict) or set(opts) - SOURCE_OPTIONS
            for name, opts in given.items()
        ):
            raise ValueError(
                f"{path} -> sources.{key}.options: a mapping of the file's implementations to options "
                f"({', '.join(sorted(SOURCE_OPTIONS))})"
            )
    return data


@dataclass
class Scored:
    """One point: the prediction and its error, or why memmodel cannot express it."""

    point: dict[str, Any]
    published_time_s: float
    published_tflops: float
    predicted_time_s: float | None = None
    predicted_tflops: float | None = None
    error: float | None = None
    not_modelled: str | None = None
    caveats: list[str] = field(default_factory=list)
    #: the stand-in ``--impl`` scored in place of the point's own (``--proxy``), else None
    proxy: str | None = None
    #: whether the published time lies in the range memmodel gives the prediction (its
    #: profile's rate class: memmodel.validated.time_range); None where it gives none
    in_range: bool | None = None
    #: the profile's rate class (measured, same-architecture, other-architecture, datasheet)
    rate_class: str | None = None
    #: whether the published time lies in the range its class would have without this GPU
    #: family's own points (leave one family out: the range a GPU nobody measured gets; the
    #: measured class's range comes from our records alone, so there it is ``in_range``)
    blind_in_range: bool | None = None

    @property
    def family(self) -> str:
        return FAMILIES.get(self.point["gpu"], self.point["gpu"])


def published(point: dict[str, Any], flops: float) -> tuple[float, float]:
    """(time in s, TFLOP/s) as published: a time where the source gives one, else from its rate."""
    if "time_ms" in point:
        t = point["time_ms"] / 1e3
        return t, point.get("tflops", flops / t / 1e12)
    return flops / (point["tflops"] * 1e12), float(point["tflops"])


def why_not_modelled(point: dict[str, Any], mapping: dict[str, Any] | None) -> str | None:
    if mapping is None:
        return f"no memmodel option models {point['impl']!r}"
    impl = mapping.get("impl")
    if impl is not None and impl not in IMPLEMENTATIONS:
        return f"memmodel has no {mapping.get('cli', impl)} (implementations: {', '.join(IMPLEMENTATIONS)})"
    return None


def _statistic(times: Sequence[float], name: str) -> float:
    return float(statistics.median(times) if name == "median" else statistics.fmean(times))


def between_falls(loop: dict[str, Any], root: Path = ROOT) -> list[tuple[float, float]]:
    """(a call's time at boost in s, the share of its back-to-back fall the loop's timed calls show)
    for each probe record of the host work ``loop["between"]`` names (:data:`BETWEEN`), by call
    length. Sorted by call time; [] without records. In each record:

    * the boost time is the faster of the back-to-back calls' 2nd to 4th and the ``sleep-50``
      calls' (50 ms of idle between calls: a call long enough to fall within itself keeps its
      boost time there, not back to back), its median;
    * the whole fall is that against the median of the last ten back-to-back calls;
    * the loop's calls may cost more than the plain call at the same clocks (a training forward,
      which keeps what its backward needs): that extra is the loop's second call less the boost
      time, where the clock read after that call is the record's highest; the median over the
      records where it is, added to every record's boost time;
    * the share seen is the loop's ``statistic`` of its timed calls (after ``warmup``) against
      that boost time, over the whole fall, within [0, 1]."""
    import gzip

    warmup, calls, stat = int(loop.get("warmup", 0)), int(loop["calls"]), loop.get("statistic", "mean")
    read = []
    for path in sorted(root.glob(BETWEEN[loop["between"]])):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            rows = {r["pattern"]: r for r in map(json.loads, f) if "pattern" in r}
        b2b, idle, under = (rows[k] for k in ("back-to-back", "sleep-50", loop["between"]))
        times = under["times_ms"]
        if len(times) < warmup + calls:
            raise ValueError(f"{path}: {len(times)} calls, the loop times {warmup} + {calls}")
        boost = min(statistics.median(b2b["times_ms"][1:4]), statistics.median(idle["times_ms"][1:4]))
        whole = 1.0 - boost / statistics.median(b2b["times_ms"][-10:])
        top = max(c for r in rows.values() for c in r.get("clocks_mhz") or [0] if c)
        extra = times[1] - boost if (under.get("clocks_mhz") or [None, None])[1] == top else None
        read.append((boost, whole, times[warmup : warmup + calls], extra))
    extras = [e for *_, e in read if e is not None]
    extra = statistics.median(extras) if extras else 0.0
    out = []
    for boost, whole, timed, _ in read:
        start = boost + extra
        seen = 1.0 - start / _statistic(timed, stat)
        out.append((start / 1e3, min(max(seen / whole, 0.0), 1.0) if whole > 0 else 0.0))
    return sorted(out)


@functools.cache
def _cached_falls(between: str, warmup: int, calls: int, statistic: str) -> tuple[tuple[float, float], ...]:
    loop = {"between": between, "warmup": warmup, "calls": calls, "statistic": statistic}
    return tuple(between_falls(loop))


def _falls(loop: dict[str, Any]) -> tuple[tuple[float, float], ...] | None:
    """:func:`between_falls` of ``loop`` (read once a run), None for a loop without ``between``."""
    if "between" not in loop:
        return None
    return _cached_falls(loop["between"], int(loop.get("warmup", 0)), int(loop["calls"]), loop.get("statistic", "mean"))


def between_share(falls: Sequence[tuple[float, float]], call_s: float) -> float:
    """The share of a call's fall :func:`between_falls` gives at ``call_s``: linear in the call
    time's logarithm between the measured lengths, the nearest one's beyond them."""
    if not falls:
        raise ValueError("no probe record measured the clocks under this loop")
    xs = [math.log(t) for t, _ in falls]
    return float(np.interp(math.log(call_s), xs, [f for _, f in falls]))


def loop_share(
    boost_s: float,
    sustained_s: float,
    after_s: float | None,
    loop: dict[str, Any],
    idle: bool,
    falls: Sequence[tuple[float, float]] | None = None,
) -> float:
    """The time of one timed call of a source's loop as the source reports it (``loop``:
    ``warmup`` calls, then ``calls`` timed back to back, their ``statistic``: the mean, as
    torch.utils.benchmark's ``Timer.timeit``, or the median), from its time at the boost clocks
    and at the clocks the power limit leaves: a loop started ``idle`` (the source sleeps before
    it) runs at boost until ``after_s`` of busy time, then at the sustained clocks; one started
    right after other timed loops (``busy_before``) at the sustained clocks throughout. A loop
    with host work between its calls (``between``; ``falls``, :func:`between_falls`) started
    idle falls by the share of the whole fall its probe saw at this call's length."""
    if after_s is None or sustained_s <= boost_s:
        return boost_s
    if not idle:
        return sustained_s
    if falls is not None:
        return boost_s + between_share(falls, boost_s) * (sustained_s - boost_s)
    calls = int(loop["calls"])
    at_boost = min(max(after_s / boost_s - int(loop.get("warmup", 0)), 0.0), float(calls))
    if loop.get("statistic", "mean") == "median":
        # the calls in order: the whole ones at boost, the one the clocks fall in (its share at
        # boost), the rest held; the boost calls are the fastest, so this is the sorted list
        whole = int(at_boost)
        times = [boost_s] * whole
        if whole < calls:
            part = at_boost - whole
            times.append(part * boost_s + (1.0 - part) * sustained_s)
            times += [sustained_s] * (calls - whole - 1)
        return float(statistics.median(times))
    return (at_boost * boost_s + (calls - at_boost) * sustained_s) / calls


def _by_pass(c: Any, algorithm: str, device: bool = False, uncounted: Sequence[str] = ()) -> dict[str, float]:
    """Seconds of each pass; ``device``: each kernel's own, without its launch overhead (what a
    source timing the summed device time of the kernels sees); ``uncounted``: memmodel's kernels
    the source's timer leaves out (a kernel-name filter that passes no memset, say)."""
    ev = c.standard if algorithm == "standard" else c.tiled
    out = {"forward": 0.0, "backward": 0.0}
    for kernel, timing in zip(ev.traffic.kernels, ev.timing.kernels):
        if kernel.name in uncounted:
            continue
        launch = float(timing.terms.get("launch", 0.0)) if device else 0.0
        out[kernel.pass_] += float(timing.time_s) - launch
    return out


def predict(
    point: dict[str, Any],
    mapping: dict[str, Any],
    profile: Any,
    loop: dict[str, Any] | None = None,
    timer: str = "events",
    given: dict[str, Any] | None = None,
    uncounted: Sequence[str] = (),
) -> tuple[float, list[str]]:
    """memmodel's time (s) of ``point``'s pass with the options its implementation maps to. With
    its source's ``loop`` (how the source timed it), the forward kernels' clocks are the loop's
    (:func:`loop_share`); else memmodel's default (``--clocks benchmark``). ``timer`` (the
    source's, :data:`TIMERS`): ``device`` leaves the launch overheads out. ``given``: options
    the source's script passed the implementation (its ``options``, e.g. FA4's split heuristic).
    ``uncounted``: memmodel's kernels the source's timer does not count (its ``uncounted``)."""
    device = timer == "device"
    w = Workload(
        n=point["n"],
        n_kv=point.get("n_kv"),
        window=point.get("window"),
        d=point["d"],
        d_v=point.get("d_v"),
        batch=point["batch"],
        heads=point["heads"],
        kv_heads=point["kv_heads"],
        dtype=point["dtype"],
        causal=point["causal"],
    )
    backward = point["pass"] != "forward"
    traced = mapping.get("trace")
    if traced and point["source"] in traced["sources"]:
        return predict_traced(point, traced, profile, backward)
    impl = mapping.get("impl") or "auto"
    opts = options_for(impl, w, profile, tiled=mapping.get("tiled", "fa2"), backward=backward, **(given or {}))
    standard = mapping.get("standard", "algorithm0")
    c = compare(w, profile, opts, standard=standard)
    by_pass = _by_pass(c, mapping["algorithm"], device, uncounted)
    idle = loop is not None and point["impl"] in loop.get("idle_before", ())
    if loop is not None and (idle or point["impl"] in loop.get("busy_before", ())):
        boost = _by_pass(
            compare(w, profile, replace(opts, clocks="boost"), standard=standard),
            mapping["algorithm"],
            device,
            uncounted,
        )
        held = _by_pass(
            compare(w, profile, replace(opts, clocks="sustained"), standard=standard),
            mapping["algorithm"],
            device,
            uncounted,
        )
        fall = profile.implementation(opts.implementation).clocks_fall if opts.implementation else None
        after = float(fall[1]) if fall is not None and fall[1] is not None else None
        by_pass = {
            "forward": loop_share(boost["forward"], held["forward"], after, loop, idle, _falls(loop)),
            "backward": boost["backward"],
        }
    t = by_pass["forward"] + by_pass["backward"] if point["pass"] == "fwd+bwd" else by_pass[point["pass"]]
    return t, list(c.caveats)


def predict_traced(
    point: dict[str, Any], traced: dict[str, Any], profile: Any, backward: bool
) -> tuple[float, list[str]]:
    """memmodel's time (s) of ``point``'s pass as ``memmodel trace`` of the function its source
    timed (``traced["target"]``, FILE.py:NAME under the repository) counts it: its one input
    ``qkv`` packed ``(batch, seqlen, 3, heads, headdim)``."""
    from memmodel.tracing import load_function
    from memmodel.tracing import trace as run_trace

    if traced.get("input") != "qkv" or point["kv_heads"] != point["heads"]:
        raise MemmodelError(f"{traced['target']} takes packed qkv of equal heads only")
    fn, _ = load_function(str(ROOT / traced["target"]))
    shape = (point["batch"], point["n"], 3, point["heads"], point["d"])

    def call(qkv: Any) -> Any:
        return fn(qkv, causal=point["causal"])

    t = run_trace(call, {"qkv": shape}, dtype=point["dtype"], backward=backward, profile=profile)
    by_pass = {"forward": 0.0, "backward": 0.0}
    for kernel, timing in zip(t.traffic.kernels, t.timing.kernels):
        by_pass[kernel.pass_] += float(timing.time_s)
    total = by_pass["forward"] + by_pass["backward"] if point["pass"] == "fwd+bwd" else by_pass[point["pass"]]
    return total, list(t.notes)


def score(
    data: dict[str, Any],
    *,
    gpu: str | None = None,
    impl: str | None = None,
    source: str | None = None,
    proxies: dict[str, str] | None = None,
) -> list[Scored]:
    """Score every point (those of ``gpu`` / ``impl`` / ``source`` if given). ``proxies`` maps a
    published implementation to a stand-in memmodel ``--impl`` used where its own mapping cannot be
    run. A filter leaves the other families out of each family's blind range as well."""
    if source is not None and source not in data["sources"]:
        raise ValueError(f"unknown source {source!r}: the file has {', '.join(data['sources'])}")
    out: list[Scored] = []
    profiles: dict[str, Any] = {}
    for point in data["points"]:
        if (gpu and point["gpu"] != gpu) or (impl and point["impl"] != impl) or (source and point["source"] != source):
            continue
        src = data["sources"][point["source"]]
        flops = convention_flops(point, src["flops_convention"])
        t_pub, r_pub = published(point, flops)
        s = Scored(point, t_pub, r_pub)
        mapping = data["implementations"][point["impl"]]
        if proxies and point["impl"] in proxies and why_not_modelled(point, mapping):
            s.proxy = proxies[point["impl"]]
            mapping = {"algorithm": "tiled", "impl": s.proxy}
        if point["gpu"] not in profiles:
            try:
                profiles[point["gpu"]] = load_profile(point["gpu"])
            except MemmodelError as e:
                profiles[point["gpu"]] = str(e).split(":")[0]  # "unknown GPU 'mi355x'"
        profile = profiles[point["gpu"]]
        reasons = [r for r in (why_not_modelled(point, mapping),) if r]
        if isinstance(profile, str):
            reasons.append(f"no profile ({profile})")
        if reasons:
            s.not_modelled = "; ".join(reasons)
        else:
            assert mapping is not None
            try:
                given = src.get("options", {}).get(point["impl"])
                skip = src.get("uncounted", {}).get(point["impl"], ())
                t, s.caveats = predict(
                    point, mapping, profile, src.get("loop"), src.get("timer", "events"), given, skip
                )
            except MemmodelError as e:
                s.not_modelled = f"memmodel refuses it: {e}"
            else:
                s.predicted_time_s = t
                s.predicted_tflops = flops / t / 1e12
                s.error = (t - t_pub) / t_pub
                s.rate_class = profile.rate_class
                span = time_range(profile.rate_class, t)
                s.in_range = None if span is None else bool(span[0] <= t_pub <= span[1])
        out.append(s)
    _blind_ranges(out)
    return out


def weighted_quantile(values: list[float], weights: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` where each counts ``weights`` times: each value sits at
    the middle of its share of the total weight, linear in between (equal weights: the
    midpoint rule, n values at (i + 1/2) / n)."""
    if not values or len(values) != len(weights) or any(w <= 0 for w in weights):
        raise ValueError("weighted_quantile takes as many positive weights as values, at least one")
    pairs = sorted(zip(values, weights))
    total = sum(w for _, w in pairs)
    at, cum = [], 0.0
    for _, w in pairs:
        at.append((cum + w / 2) / total)
        cum += w
    if q <= at[0]:
        return pairs[0][0]
    for i in range(1, len(at)):
        if q <= at[i]:
            t = (q - at[i - 1]) / (at[i] - at[i - 1])
            return pairs[i - 1][0] + t * (pairs[i][0] - pairs[i - 1][0])
    return pairs[-1][0]


def class_errors(scored: list[Scored]) -> dict[str, dict[str, list[float]]]:
    """The signed errors of the scored points (no proxy) of each class in
    :data:`PUBLISHED_CLASSES`, by GPU family."""
    out: dict[str, dict[str, list[float]]] = {}
    for s in scored:
        if s.error is None or s.proxy or s.rate_class not in PUBLISHED_CLASSES:
            continue
        out.setdefault(s.rate_class, {}).setdefault(s.family, []).append(s.error)
    return out


def class_range(by_family: dict[str, list[float]], exclude: str | None = None) -> dict[str, Any] | None:
    """A class's time range from its families' errors (``exclude``'s left out): the first
    decile, median and last decile with every family weighing the same however many points it
    has (a GPU nobody measured is one more family, not one more point), the count and the
    points per family; None where no family is left."""
    families = {f: e for f, e in sorted(by_family.items()) if f != exclude and e}
    if not families:
        return None
    values = [v for e in families.values() for v in e]
    weights = [1.0 / len(e) for e in families.values() for _ in e]
    low, high = (weighted_quantile(values, weights, q) for q in RANGE_QUANTILES)
    return {
        "low": low,
        "median": weighted_quantile(values, weights, 0.5),
        "high": high,
        "count": len(values),
        "families": {f: len(e) for f, e in families.items()},
    }


def _stand_in(rate_class: str) -> dict[str, Any] | None:
    """The range memmodel gives a class none of whose GPUs is measured or published: the
    datasheet class's spread about its median, as validated.json keeps it."""
    try:
        data = json.loads(VALIDATED.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    entry = data.get("time_ranges", {}).get(rate_class, {})
    stand_in = entry.get("stand_in") or (entry if not entry.get("count") else None)
    return stand_in if stand_in and "low" in stand_in and "high" in stand_in else None


def _blind_ranges(scored: list[Scored]) -> None:
    """Set each scored point's ``blind_in_range``: its class's range from the other families'
    points (:func:`class_range` leaving its own out; the stand-in where none is left)."""
    errors = class_errors(scored)
    for s in scored:
        if s.error is None or s.predicted_time_s is None:
            continue
        if s.rate_class not in PUBLISHED_CLASSES:
            s.blind_in_range = s.in_range
            continue
        span = class_range(errors.get(s.rate_class, {}), exclude=s.family) or _stand_in(s.rate_class)
        if span is None:
            continue
        t = s.predicted_time_s
        s.blind_in_range = bool(t / (1.0 + span["high"]) <= s.published_time_s <= t / (1.0 + span["low"]))


def summary(scored: list[Scored], *, by_pass: bool = False) -> list[dict[str, Any]]:
    """Per GPU family × implementation, then per family (implementation ``all``): points scored,
    not modelled, median and max |error| and the median signed error. ``by_pass``: per family ×
    implementation × pass instead (``impl`` reads ``fa3 forward``)."""
    groups: dict[tuple[str, str], list[Scored]] = {}
    for s in scored:
        if by_pass:
            name = s.point["impl"] + (f"~{s.proxy}" if s.proxy else "")
            groups.setdefault((s.family, f"{name} {s.point['pass']}"), []).append(s)
            continue
        name = s.point["impl"] + (f"~{s.proxy}" if s.proxy else "")
        groups.setdefault((s.family, name), []).append(s)
        groups.setdefault((s.family, "all"), []).append(s)
    rows = []
    order = list(dict.fromkeys(FAMILIES.values()))
    for (family, impl), items in sorted(
        groups.items(), key=lambda kv: (order.index(kv[0][0]) if kv[0][0] in order else 99, kv[0][1] == "all", kv[0][1])
    ):
        errs = [s.error for s in items if s.error is not None]
        rows.append(
            {
                "family": family,
                "impl": impl,
                "points": len(items),
                "scored": len(errs),
                "not_modelled": len(items) - len(errs),
                "median_abs_error": statistics.median(abs(e) for e in errs) if errs else None,
                "max_abs_error": max(abs(e) for e in errs) if errs else None,
                "median_signed_error": statistics.median(errs) if errs else None,
                # the share in the range a GPU of this family gets with its own points left out
                "in_range": (
                    sum(bool(s.blind_in_range) for s in items if s.blind_in_range is not None)
                    / max(1, sum(s.blind_in_range is not None for s in items))
                    if any(s.blind_in_range is not None for s in items)
                    else None
                ),
            }
        )
    return rows


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:+.1f}%"


def _abs_pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def print_table(scored: list[Scored], *, filtered: bool = False) -> None:
    head = f"{'id':<58} {'pass':<8} {'published':>13} {'predicted':>13} {'error':>8}"
    print(head)
    print("-" * len(head))
    for s in scored:
        if s.error is None:
            continue
        flag = " (T)" if s.point.get("reading") == "transcription" else ""
        flag += f" proxy --impl {s.proxy}" if s.proxy else ""
        print(
            f"{s.point['id']:<58} {s.point['pass']:<8} {s.published_tflops:>7.0f} TF/s {s.predicted_tflops:>7.0f} TF/s "
            f"{_pct(s.error):>8}{flag}"
        )
    print("\n(T): value from a third-party transcription of the figure (reading: transcription)")
    if any(s.proxy for s in scored):
        print("proxy: scored with a stand-in option (--proxy), not the implementation itself; never the record")
    print()
    reasons: dict[str, list[str]] = {}
    for s in scored:
        if s.not_modelled:
            reasons.setdefault(f"{s.point['gpu']} {s.point['impl']}: {s.not_modelled}", []).append(s.point["id"])
    if reasons:
        print("Not modelled:")
        for reason, ids in reasons.items():
            print(f"  {len(ids):>3} points  {reason}")
        print()
    _print_summary(summary(scored))
    print("\nBy pass:")
    _print_summary(summary(scored, by_pass=True))
    print(
        "\nin range: the published time inside the range memmodel gives the prediction, that range taken from the"
        " class's other GPU families (a derived or transferred profile's range comes from these points: each family"
        " is judged by the others'; the measured H200's from our records alone)"
        + (" — this run is filtered: the ranges come from the points shown only" if filtered else "")
    )
    errors = class_errors(scored)
    for cls in PUBLISHED_CLASSES:
        r = class_range(errors.get(cls, {}))
        if r is not None:
            fams = ", ".join(f"{f} {n}" for f, n in r["families"].items())
            print(
                f"{cls} range from these points: {_pct(r['low'])} to {_pct(r['high'])}, median {_pct(r['median'])}"
                f" ({fams}; every family weighs the same)"
            )


def _print_summary(rows: list[dict[str, Any]]) -> None:
    print(
        f"{'family':<8} {'impl':<26} {'points':>6} {'scored':>6} {'median |err|':>13} {'max |err|':>10} {'median err':>11}"
        f" {'in range':>9}"
    )
    for r in rows:
        print(
            f"{r['family']:<8} {r['impl']:<26} {r['points']:>6} {r['scored']:>6} {_abs_pct(r['median_abs_error']):>13} "
            f"{_abs_pct(r['max_abs_error']):>10} {_pct(r['median_signed_error']):>11} {_abs_pct(r['in_range']):>9}"
        )


def to_json(scored: list[Scored]) -> dict[str, Any]:
    import memmodel

    return {
        "schema": SCORE_SCHEMA,
        "memmodel_version": memmodel.__version__,
        "points": [
            {
                "id": s.point["id"],
                "gpu": s.point["gpu"],
                "family": s.family,
                "impl": s.point["impl"],
                "pass": s.point["pass"],
                "source": s.point["source"],
                "reading": s.point.get("reading", "figure-label"),
                "published_time_s": s.published_time_s,
                "published_tflops": s.published_tflops,
                "predicted_time_s": s.predicted_time_s,
                "predicted_tflops": s.predicted_tflops,
                "error": s.error,
                "published_in_range": s.in_range,
                "published_in_blind_range": s.blind_in_range,
                "rate_class": s.rate_class,
                "not_modelled": s.not_modelled,
                "proxy": s.proxy,
                "caveats": s.caveats,
            }
            for s in scored
        ],
        "summary": summary(scored),
        "summary_by_pass": summary(scored, by_pass=True),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checks", type=Path, default=CHECKS, help="checks file (default: %(default)s)")
    ap.add_argument("--format", choices=("table", "json"), default="table")
    ap.add_argument("--gpu", help="only this GPU (profile name as in the file, e.g. h100-sxm)")
    ap.add_argument("--impl", help="only this published implementation (e.g. fa3, cudnn, standard)")
    ap.add_argument(
        "--source", help="only this source's points (a key of the file's sources, e.g. cudnn-frontend-wan22)"
    )
    ap.add_argument(
        "--proxy",
        action="append",
        default=[],
        metavar="IMPL=OPTION",
        help="score published implementation IMPL, where memmodel cannot express it, with --impl OPTION "
        "(e.g. fa4=fa3); marked proxy, never the record",
    )
    args = ap.parse_args(argv)
    proxies = {}
    for item in args.proxy:
        name, sep, option = item.partition("=")
        if not sep or not name or not option:
            ap.error(f"--proxy takes IMPL=OPTION, got {item!r}")
        proxies[name] = option
    data = load_checks(args.checks)
    if args.source is not None and args.source not in data["sources"]:
        ap.error(f"unknown source {args.source!r}: the file has {', '.join(data['sources'])}")
    scored = score(data, gpu=args.gpu, impl=args.impl, source=args.source, proxies=proxies)
    if args.format == "json":
        json.dump(to_json(scored), sys.stdout, indent=1)
        print()
    else:
        print_table(scored, filtered=any((args.gpu, args.impl, args.source)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
