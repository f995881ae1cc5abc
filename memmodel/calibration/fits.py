"""Implementation figures that compare the model with the measured: the efficiency, CTA
overhead and diagonal-block cost of each attention implementation (:func:`efficiency_figures`),
the split-KV CTA rate and combine cost (:func:`cta_figures`), and the training step's backward
efficiency and dropout rates (:func:`backward_figures`). Each runs the model on the reference
shapes of :mod:`.plan`, so it changes when the model does. Pure: tested on the CPU."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np

from ..cases import Case
from ..hardware import Profile, interpolate_log2
from ..implementations import get, padded_head_dim
from ..implementations import tiles as tiles_for
from ..model import compare
from ..options import options_for, with_options
from ..plan import decode_split_rule
from ..scoring import BACKWARD_MAIN, KERNEL_PATTERNS, _compare, case_options, predicted_kernels, runner_layout_copies
from ..timing import kernel_time
from ..workload import Workload
from .figures import _bw, _ops, backward_kernel_figures
from .plan import DROPOUT_P, REFERENCE_LONG, REFERENCE_LOOP, REFERENCE_SHORT, SPLIT_REFERENCES


def reference_case(
    impl: str, b: int, h: int, n: int, d: int, causal: bool, block: tuple[int, int] | None = None
) -> Case:
    bq, bkv = block if block is not None else (None, None)
    return Case(impl=impl, n=n, d=d, batch=b, heads=h, dtype="fp16", causal=causal, block_q=bq, block_kv=bkv)


def _fused_parts(
    impl: str, shape: tuple[int, ...], profile: Profile, block: tuple[int, int] | None = None
) -> dict[str, float]:
    """The model's view of a reference shape with no efficiency, CTA overhead or diagonal
    cost: the fused kernel's compute time C (tail included), its CTA waves F (CTAs per CTA
    slot), the share r of its blocks on the diagonal, its launch overhead, and whether
    compute bounds it."""
    b, h, n, d, causal = shape
    case = reference_case(impl, b, h, n, d, causal, block)
    # calibrate keeps the fastest of three rounds: its references ran before the clocks fell
    c = compare(case.workload(), profile, with_options(case_options(case, "on", None, profile), clocks="boost"))
    kernel = next(k for k in c.tiled.traffic.kernels if k.overlap == "serial-compute")
    t = next(k for k in c.tiled.timing.kernels if k.name == kernel.name)
    tile = (c.tiled.traffic.params["block_q"], c.tiled.traffic.params["block_kv"])
    bare = kernel_time(kernel, profile, case.dtype, impl, padded_head_dim(impl, d), None, tile)
    tail = float(t.terms["compute"]) / max(float(bare.terms["compute"]), 1e-30)
    return {
        "compute_s": float(t.terms["compute"]),
        "waves": float(np.ceil(float(kernel.ctas) / max(float(kernel.concurrent_ctas), 1.0))),
        "diagonal_share": float(kernel.diagonal_blocks) / max(float(kernel.blocks), 1.0),
        # the launch, and what the CUDA events around the timed reference add to it
        "launch_s": float(t.terms.get("launch", 0.0)) + float(profile.event_overhead_s or 0.0),
        "memory_s": max([float(v) for k, v in t.terms.items() if k in ("hbm", "l2", "sram", "latency")] or [0.0]),
        "tail": tail,
    }


def fit_reference(
    long: dict[str, float],
    short: dict[str, float] | None,
    causal: dict[str, float] | None,
    cta_s: float | None = None,
    loop: dict[str, float] | None = None,
) -> dict[str, float | None]:
    """Efficiency e, CTA overhead t (s) and diagonal cost m from the measured times of the
    reference shapes (``measured_s`` beside :func:`_fused_parts`' figures), with the model's
    fused-kernel time ``C/e·(1 + m·r) + F·t`` plus the launch:

    * the plain shapes (long, short, and the long-loop one where measured): ``T − launch =
      C·x + F·t`` for each, x = 1/e, solved for x and t by least squares on the relative
      error (exactly, with two shapes); t clamped at 0, then x from the long and long-loop
      shapes alone;
      without a short shape, ``cta_s`` (from neighbouring head dims) or 0. The long-loop shape
      (few CTAs, hundreds of K/V blocks each) pins the rate of a block's work where the CTA's
      fixed costs no longer matter, so x is not left to the two short-loop shapes;
    * causal: ``T − launch − F·t = C·x·(1 + m·r)``, solved for m (at least 0).
    """
    plain = [p for p in (long, short, loop) if p is not None]
    rows = [(p["compute_s"], p["waves"], p["measured_s"] - p["launch_s"]) for p in plain]
    t = cta_s
    if short is not None:
        # minimise Σ ((C·x + F·t)/T − 1)² over x and t: the 2×2 normal equations
        a = [(c / m, f / m) for c, f, m in rows]
        s_cc = sum(c * c for c, _ in a)
        s_cf = sum(c * f for c, f in a)
        s_ff = sum(f * f for _, f in a)
        s_c1 = sum(c for c, _ in a)
        s_f1 = sum(f for _, f in a)
        det = s_cc * s_ff - s_cf * s_cf
        if det != 0:
            t = (s_cc * s_f1 - s_cf * s_c1) / det
    clamped = t is not None and t < 0
    t = max(0.0, t or 0.0)
    if clamped:  # no overhead fits: the rate of a block's work from the shapes of long loops
        rows = [(p["compute_s"], p["waves"], p["measured_s"] - p["launch_s"]) for p in (long, loop) if p is not None]
    # x given t: least squares on the relative error over the plain shapes
    num = sum((c / m) * (1.0 - f * t / m) for c, f, m in rows)
    den = sum((c / m) ** 2 for c, _, m in rows)
    x = num / den
    if x <= 0:  # the overhead cannot explain more than the whole: no overhead
        t = 0.0
        x = sum(c / m for c, _, m in rows) / den
    m_cost = None
    if causal is not None and causal["diagonal_share"] > 0:
        tc = causal["measured_s"] - causal["launch_s"] - causal["waves"] * t
        m_cost = max(0.0, (tc / (causal["compute_s"] * x) - 1.0) / causal["diagonal_share"])
    return {"efficiency": 1.0 / x, "cta_overhead_s": t if short is not None or cta_s else None, "masked_cost": m_cost}


def efficiency_figures(m: dict[str, Any], profile: Profile) -> dict[str, tuple[Any, str]]:
    """Per implementation, by head dim: ``implementations.<name>.efficiency`` (the model's
    time of a block's work over the measured), ``cta_overhead`` (what a CTA costs beyond its
    blocks, per CTA slot) and ``masked_block_cost`` (what a diagonal block costs beyond a
    plain one), fitted jointly to the long, short and causal reference shapes
    (:func:`fit_reference`); head dims measured long only take the CTA overhead of their
    neighbours (log2-interpolated)."""
    every = [
        p for p in (m.get("sdpa") or {}).get("points", []) if p.get("time_s") and "error" not in p and "shape" in p
    ]
    points = [p for p in every if not p.get("uneven")]
    out: dict[str, tuple[Any, str]] = {}
    out.update(uneven_figures(every))
    for impl in sorted({p["impl"] for p in points}):
        mine = [p for p in points if p["impl"] == impl]

        def part(
            b: int, h: int, n: int, d: int, causal: bool, impl: str = impl, mine: list[Any] = mine
        ) -> dict[str, float] | None:
            hit = next((p for p in mine if tuple(p["shape"]) == (b, h, n, d, causal) and "block" not in p), None)
            if hit is None:
                return None
            return {**_fused_parts(impl, (b, h, n, d, causal), profile), "measured_s": hit["time_s"]}

        fits: dict[int, dict[str, Any]] = {}
        heads = sorted({int(p["shape"][3]) for p in mine})
        for d in heads:  # head dims with a short shape first: their CTA overhead serves the others
            long = part(*REFERENCE_LONG, d, False)
            short = part(*REFERENCE_SHORT, d, False)
            if long is not None and short is not None:
                loop = part(*REFERENCE_LOOP, d, False)
                fits[d] = {**fit_reference(long, short, part(*REFERENCE_LONG, d, True), loop=loop), "long": long}
        known = tuple(sorted((d, f["cta_overhead_s"]) for d, f in fits.items() if f["cta_overhead_s"] is not None))
        for d in heads:
            long = part(*REFERENCE_LONG, d, False)
            if d in fits or long is None:
                continue
            cta = interpolate_log2(known, d) if known else None
            fits[d] = {**fit_reference(long, None, part(*REFERENCE_LONG, d, True), cta), "long": long}
        if not fits:
            continue
        b, h, n = REFERENCE_LONG
        bs, hs, ns = REFERENCE_SHORT
        kinds = {tuple(p["shape"][:3]) + (bool(p["shape"][4]),) for p in mine}
        shapes = [f"{b} x {h} heads x {n} tokens"]
        if (b, h, n, True) in kinds:
            shapes.append(f"{b} x {h} x {n} causal")
        if (bs, hs, ns, False) in kinds:
            shapes.append(f"{bs} x {hs} x {ns}")
        bl, hl, nl = REFERENCE_LOOP
        if (bl, hl, nl, False) in kinds:
            shapes.append(f"{bl} x {hl} x {nl}")
        shared = (
            f"fp16, medians of CUDA-event times; fitted jointly to {', '.join(shapes)}: model time = compute / "
            "efficiency x (1 + diagonal cost x diagonal share) + CTA waves x CTA overhead + launch (least squares "
            "on the relative error over the plain shapes)"
        )
        fitted = {d: f for d, f in sorted(fits.items())}
        out[f"implementations.{impl}.efficiency"] = (
            {d: round(f["efficiency"], 3) for d, f in fitted.items()},
            f"model time (instructions of {impl}) / measured, {shared}; tail factor "
            + ", ".join(f"d={d}: {f['long']['tail']:.3f}" for d, f in fitted.items()),
        )
        cta = {
            d: f["cta_overhead_s"]
            for d, f in fitted.items()
            if f["cta_overhead_s"] is not None
            and d in {int(p["shape"][3]) for p in mine if tuple(p["shape"][:3]) == REFERENCE_SHORT}
        }
        if cta and any(v > 0 for v in cta.values()):
            out[f"implementations.{impl}.cta_overhead"] = (
                {d: f"{max(v, 1e-9) * 1e6:.4g} us" for d, v in cta.items()},
                f"seconds a CTA costs beyond its blocks' work, per CTA slot; {shared}",
            )
        out.update(_tile_figures(impl, mine, fitted, profile))
        masked = {d: f["masked_cost"] for d, f in fitted.items() if f["masked_cost"] is not None}
        if masked and any(v > 0 for v in masked.values()):
            out[f"implementations.{impl}.masked_block_cost"] = (
                {d: round(max(v, 1e-3), 3) for d, v in masked.items()},
                f"extra cost of a block on the causal diagonal, in plain blocks; {shared}",
            )
    out.update(cta_figures(m, profile))
    return out


def uneven_figures(points: list[dict[str, Any]]) -> dict[str, tuple[Any, str]]:
    """``implementations.<name>.uneven_efficiency`` by the built head dim a kernel runs at: the
    long reference's time there over its time at a head dim below it that no kernel is built for
    (points marked ``uneven``; the padded columns masked), averaged over the head dims measured
    for one built one."""
    out: dict[str, tuple[Any, str]] = {}
    b, h, n = REFERENCE_LONG
    for impl in sorted({p["impl"] for p in points if p.get("uneven")}):
        ratios: dict[int, list[tuple[int, float]]] = {}
        for p in (q for q in points if q["impl"] == impl and q.get("uneven")):
            d = int(p["shape"][3])
            built = int(padded_head_dim(impl, d))
            even = next(
                (
                    q
                    for q in points
                    if q["impl"] == impl
                    and not q.get("uneven")
                    and "block" not in q
                    and tuple(q["shape"]) == (b, h, n, built, False)
                ),
                None,
            )
            if built != d and even is not None:
                ratios.setdefault(built, []).append((d, even["time_s"] / p["time_s"]))
        if ratios:
            out[f"implementations.{impl}.uneven_efficiency"] = (
                {k: round(sum(r for _, r in v) / len(v), 3) for k, v in sorted(ratios.items())},
                f"time at the built head dim / time at a head dim it runs padded (columns masked), fp16, {b} x {h} "
                f"heads x {n} tokens, non-causal, best of three medians of CUDA-event times: "
                + "; ".join(f"d = {d} on {k}: {r:.3f}" for k, v in sorted(ratios.items()) for d, r in v),
            )
    return out


def _tile_figures(
    impl: str, mine: list[dict[str, Any]], fitted: dict[int, dict[str, Any]], profile: Profile
) -> dict[str, tuple[Any, str]]:
    """``implementations.<name>.efficiency_<B_r>x<B_c>``: the efficiency on the long-loop
    reference run at a tile other than the defaults (points with ``block``), with the CTA
    overhead fitted at the defaults: ``e = C / (T − launch − F·t)``."""
    out: dict[str, tuple[Any, str]] = {}
    tiles = sorted({tuple(p["block"]) for p in mine if "block" in p})
    bl, hl, nl = REFERENCE_LOOP
    for tile in tiles:
        by_d = {}
        for p in (q for q in mine if tuple(q.get("block") or ()) == tile):
            d = int(p["shape"][3])
            if d not in fitted:
                continue
            parts = _fused_parts(impl, tuple(p["shape"]), profile, tile)
            t = fitted[d]["cta_overhead_s"] or 0.0
            rest = p["time_s"] - parts["launch_s"] - parts["waves"] * t
            if rest > 0:
                by_d[d] = round(parts["compute_s"] / rest, 3)
        # at head dims where this tile is the default, its efficiency is the default one
        for d, f in fitted.items():
            if d not in by_d and tiles_for(impl, d, False) == tile:
                by_d[d] = round(f["efficiency"], 3)
        by_d = dict(sorted(by_d.items()))
        if by_d:
            out[f"implementations.{impl}.efficiency_{tile[0]}x{tile[1]}"] = (
                by_d,
                f"model time (instructions of {impl}, tiles {tile[0]}x{tile[1]}) / measured, fp16, medians of "
                f"CUDA-event times, {bl} x {hl} heads x {nl} tokens at these tiles, with the CTA overhead fitted "
                "at the default tiles",
            )
    return out


def fit_decode(
    points: list[tuple[int, int, float, float, float]], launch_s: float, event_s: float = 0.0
) -> dict[str, float]:
    """Per-CTA streaming rate and the combine kernel's cost from decoding references timed
    as whole steps (records without each kernel's duration).

    ``points``: (shape id, splits, K/V bytes per CTA, measured time, n_kv) for each reference
    length. Per shape, time = intercept + bytes per CTA / rate: the slope between its two
    lengths gives the rate (that of the shape with the most splits, where the per-CTA rate
    binds; with fewer splits the kernel's padded compute can bind instead). The intercept,
    less two launches and the events' overhead ``event_s``, is the combine kernel: ``combine = c0 + c1 × splits``, solved from the
    two shapes' split counts (c0, c1 at least 0; one shape: all in c1)."""
    by_shape: dict[int, list[tuple[int, int, float, float, float]]] = {}
    for p in points:
        by_shape.setdefault(p[0], []).append(p)
    fits = []
    for pts in by_shape.values():
        (_, s, x1, t1, _), (_, _, x2, t2, _) = sorted(pts, key=lambda p: p[4])[:2]
        slope = (t2 - t1) / (x2 - x1)
        fits.append((s, 1.0 / slope if slope > 0 else float("inf"), t1 - x1 * slope - 2 * launch_s - event_s, x2))
    rate = max(fits, key=lambda f: f[0])[1]  # the most splits: the regime the per-CTA rate binds in
    if len(fits) >= 2 and fits[0][0] != fits[1][0]:
        (sa, _, ia, _), (sb, _, ib, _) = fits[0], fits[1]
        c1 = max(0.0, (ia - ib) / (sa - sb))
        c0 = max(0.0, ia - c1 * sa)
    else:
        c0, c1 = 0.0, max(0.0, fits[0][2] / max(fits[0][0], 1))
    return {"cta_bandwidth": rate, "combine_s": c0, "combine_per_split_s": c1}


def fit_relative(columns: list[list[float]], measured: list[float]) -> list[float]:
    """Coefficients θ ≥ 0 of ``time = Σ θ_j · column_j`` minimising Σ (model / measured − 1)²
    (least squares on the relative error); a coefficient that comes out negative is held at 0
    and the others fitted again."""
    cols = np.asarray(columns, dtype=np.float64)
    t = np.asarray(measured, dtype=np.float64)
    free = list(range(cols.shape[0]))
    theta = np.zeros(cols.shape[0])
    while free:
        a = (cols[free] / t).T
        sol, *_ = np.linalg.lstsq(a, np.ones_like(t), rcond=None)
        if np.all(sol >= 0):
            theta[free] = sol
            break
        free = [j for j, v in zip(free, sol) if v >= 0] if np.any(sol > 0) else []
    return [float(v) for v in theta]


def _kernel_durations(impl: str, point: dict[str, Any]) -> tuple[float, float] | None:
    """The split kernel's and the combine kernel's CUPTI durations in a reference point
    (``kernels``, as calibrate records them), None where it has none or not both."""
    kernels = point.get("kernels")
    if not isinstance(kernels, list):
        return None
    pats = KERNEL_PATTERNS.get(impl, {})
    combine = [k for k in kernels if re.search(pats.get("fa2_combine", "combine"), k["name"])]
    split = [
        k
        for k in kernels
        if k not in combine and re.search(pats.get("fa2_splitkv", "splitkv"), k["name"]) and "Memset" not in k["name"]
    ]
    if len(combine) != 1 or len(split) != 1:
        return None
    return float(split[0]["time_s"]), float(combine[0]["time_s"])


def _split_view(impl: str, w: Workload, profile: Profile) -> dict[str, float] | None:
    """The model's split-KV and combine kernels of ``w``: splits, the split kernel's bytes per
    CTA it runs at once, its waves and its compute time at efficiency 1, the combine's bytes."""
    c = compare(w, profile, options_for(impl, w, profile, clocks="boost"))
    kernels = {k.kind: k for k in c.tiled.traffic.kernels}
    split, combine = kernels.get("split_kv"), kernels.get("combine")
    if split is None or combine is None:
        return None
    t = next(k for k in c.tiled.timing.kernels if k.name == split.name)
    hd = padded_head_dim(impl, int(w.d))
    eff = profile.implementation(impl).kernel(hd, split=True).efficiency or 1.0
    slots = max(float(split.concurrent_ctas), 1.0)
    return {
        "splits": float(c.tiled.traffic.params["splits"]),
        "per_cta_bytes": float(split.bytes(level="hbm")) / slots,
        "waves": float(np.ceil(float(split.ctas) / slots)),
        "compute_s": float(t.terms["compute"]) * float(eff),
        "combine_bytes": float(combine.bytes(level="l2")),
    }


def cta_figures(m: dict[str, Any], profile: Profile) -> dict[str, tuple[Any, str]]:
    """The split-KV path's figures, from the decoding references (:data:`DECODE_REFERENCES`)
    and the split prefill ones (:data:`SPLIT_REFERENCES`), each CTA's bytes counted as the time
    model counts them (FlashAttention-2's split count; cuDNN's decode grid as the profiler showed it on
    the H200, :func:`memmodel.traffic.decode.cudnn_decode_splits`; the CTAs its occupancy runs at once):

    * ``cta_bandwidth`` (bytes one split-KV CTA streams per second, by head dim): the slope of
      the split kernel's time (the step's, less the combine's) between the two lengths of the
      decoding shape with the most splits;
    * ``split_efficiency`` and ``split_cta_overhead`` (by head dim): the split kernel's time on
      the split prefill references (the step's CUDA-event time less the combine's duration and
      two launches), ``waves × overhead + compute / efficiency``, least squares on the relative
      error;
    * ``combine_time``, ``combine_time_per_split`` and ``combine_bandwidth``: the combine
      kernel's time on all of them, ``c0 + c1 × splits + bytes / rate``, the same way.

    The combine's own duration (CUPTI) where the record has them; a record of whole steps only
    (calibrations before 2026-12) gives the rate and a combine cost of ``c0 + c1 × splits`` from
    the step's intercepts (:func:`fit_decode`)."""
    out: dict[str, tuple[Any, str]] = {}
    sdpa = (m.get("sdpa") or {}).get("points", [])
    points = [p for p in sdpa if "decode" in p and p.get("time_s")]
    splits_measured = [p for p in sdpa if "split" in p and p.get("time_s") and "error" not in p]
    launch = float(profile.launch_overhead_s or 0.0)
    event = float(profile.event_overhead_s or 0.0)
    besides = 2 * launch + event  # a split step's time besides its two kernels' own
    for impl in sorted({p["impl"] for p in points}):
        by_d: dict[int, list[tuple[int, int, float, float, int]]] = {}
        shapes: dict[tuple[int, ...], int] = {}
        combine_rows: list[tuple[float, float, float]] = []  # (splits, bytes, seconds)
        per_kernel = True
        for p in sorted(
            (p for p in points if p["impl"] == impl), key=lambda p: (p["decode"][4], p["decode"][0], p["decode"][3])
        ):
            b, h, kv_heads, n_kv, d = p["decode"]
            w = Workload(n=1, n_kv=n_kv, d=d, batch=b, heads=h, kv_heads=kv_heads, dtype=p.get("dtype", "fp16"))
            view = _split_view(impl, w, profile)
            if view is None:
                continue
            durations = _kernel_durations(impl, p)
            per_kernel = per_kernel and durations is not None
            time_s = p["time_s"] - durations[1] - besides if durations is not None else p["time_s"]
            if durations is not None:
                combine_rows.append((view["splits"], view["combine_bytes"], durations[1]))
            sid = shapes.setdefault((b, h, kv_heads, d), len(shapes))
            by_d.setdefault(d, []).append((sid, int(view["splits"]), view["per_cta_bytes"], time_s, n_kv))
        fitted: dict[int, dict[str, float]] = {}
        for d, rows in by_d.items():
            ids = {r[0] for r in rows}
            if any(sum(1 for r in rows if r[0] == i) < 2 for i in ids):
                continue
            fitted[d] = fit_decode(rows, launch, 0.0 if per_kernel else event)
        if not fitted:
            continue

        def refs(d: int, by_d: dict[int, Any] = by_d, shapes: dict[tuple[int, ...], int] = shapes) -> str:
            return "; ".join(
                f"{b}x{h} heads ({kv}), n_kv {r[4]}, {r[1]} splits, {r[3] * 1e6:.1f} us"
                for r in by_d[d]
                for (b, h, kv, _) in [next(k for k, v in shapes.items() if v == r[0])]
            )

        what = (
            "the step's CUDA-event time less the combine kernel's duration (CUPTI), two launches and the events' "
            "overhead"
            if per_kernel
            else "the step's CUDA-event time"
        )
        counted = (
            "cuDNN's decode grid"
            if decode_split_rule(get(impl), profile) == "cudnn"
            else "FlashAttention-2's split count"
        )
        note = f"decoding references, fp16, {counted}, {what}, at each head dim: " + " | ".join(
            f"d = {d}: {refs(d)}" for d in sorted(fitted)
        )
        out[f"implementations.{impl}.cta_bandwidth"] = (
            {d: _bw(f["cta_bandwidth"]) for d, f in sorted(fitted.items())},
            f"per split-KV CTA, from the slope between the two lengths of the shape with the most splits; {note}",
        )
        split_rows: dict[int, list[tuple[float, float, float]]] = {}  # d -> (waves, compute, seconds)
        for p in (q for q in splits_measured if q["impl"] == impl):
            b, h, n, d = p["split"]
            durations = _kernel_durations(impl, p)
            view = _split_view(impl, Workload(n=n, d=d, batch=b, heads=h, dtype=p.get("dtype", "fp16")), profile)
            if durations is None or view is None:
                continue
            # the step less its combine kernel and two launches: the split kernel as the step
            # times it (CUDA events, as every other kernel's figures are fitted), not CUPTI's
            # duration, which leaves out what the step's second kernel adds to the gaps
            split_rows.setdefault(d, []).append(
                (view["waves"], view["compute_s"], p["time_s"] - durations[1] - besides)
            )
            combine_rows.append((view["splits"], view["combine_bytes"], durations[1]))
        split_fits = {}
        for d, rows in sorted(split_rows.items()):
            if len({r[0] for r in rows}) < 2:  # waves and blocks must vary to tell them apart
                continue
            o, x = fit_relative([[r[0] for r in rows], [r[1] for r in rows]], [r[2] for r in rows])
            if x > 0:
                split_fits[d] = (o, 1.0 / x)
        if split_fits:
            shapes_text = ", ".join(f"{b} x {h} x {n}" for b, h, n in SPLIT_REFERENCES)
            how = (
                f"split prefill references ({shapes_text}, non-causal, fp16), the step's CUDA-event time less the "
                "combine kernel's duration (CUPTI), two launches and the events' overhead: waves x overhead + "
                "compute / efficiency, least squares on the relative error"
            )
            out[f"implementations.{impl}.split_efficiency"] = (
                {d: round(e, 3) for d, (_, e) in split_fits.items()},
                f"model time of the split-KV kernel (instructions of {impl}) / measured; {how}",
            )
            if any(o > 0 for o, _ in split_fits.values()):
                out[f"implementations.{impl}.split_cta_overhead"] = (
                    {d: f"{max(o, 1e-9) * 1e6:.4g} us" for d, (o, _) in split_fits.items()},
                    f"seconds a wave of split-KV CTAs costs beyond their blocks; {how}",
                )
        if per_kernel and len({r[0] for r in combine_rows}) >= 2:
            c0, c1, y = fit_relative(
                [[1.0] * len(combine_rows), [r[0] for r in combine_rows], [r[1] for r in combine_rows]],
                [r[2] for r in combine_rows],
            )
            src = (
                f"the combine kernel's own duration (CUPTI) on {len(combine_rows)} references (decoding at every head "
                "dim and, where measured, split prefill): c0 + c1 x splits + bytes / rate, least squares on the "
                "relative error"
            )
            out[f"implementations.{impl}.combine_time"] = (f"{max(c0, 1e-9) * 1e6:.4g} us", f"c0: {src}")
            out[f"implementations.{impl}.combine_time_per_split"] = (f"{max(c1, 1e-9) * 1e6:.4g} us", f"c1: {src}")
            if y > 0:
                out[f"implementations.{impl}.combine_bandwidth"] = (_bw(1.0 / y), f"rate: {src}")
            continue
        base = fitted.get(128) or fitted[min(fitted)]
        at = 128 if 128 in fitted else min(fitted)
        out[f"implementations.{impl}.combine_time"] = (
            f"{max(base['combine_s'], 1e-9) * 1e6:.4g} us",
            f"the combine kernel's fixed cost: the intercepts less two launches, at two split counts, d = {at}; {note}",
        )
        out[f"implementations.{impl}.combine_time_per_split"] = (
            f"{max(base['combine_per_split_s'], 1e-9) * 1e6:.4g} us",
            f"the combine kernel's cost per split, d = {at}; {note}",
        )
    return out


Predict = Callable[[str, int, int, int, int, bool], Any]
#: (impl, b, h, n, d, backward) -> the scores whose dropout mask the fused kernel draws
DropoutScores = Callable[[str, int, int, int, int, bool], float]


def dropout_scores(profile: Profile) -> DropoutScores:
    """The model's ``dropout_scores`` of an implementation's fused forward (``fa2_fwd``) or
    backward kernel on a non-causal reference shape (fp16, dropout on)."""

    def scores(impl: str, b: int, h: int, n: int, d: int, backward: bool) -> float:
        case = Case(impl=impl, n=n, d=d, batch=b, heads=h, dtype="fp16", dropout=DROPOUT_P, backward=True)
        want = BACKWARD_MAIN[impl] if backward else "fa2_fwd"
        kernel = next(k for k in predicted_kernels(case, profile, "cold") if k.name == want)
        return float(kernel.dropout_scores)

    return scores


def dropout_rate_figures(m: dict[str, Any], scores: DropoutScores) -> dict[str, tuple[Any, str]]:
    """``implementations.<name>.dropout_rate`` and ``backward_dropout_rate`` by head dim: the
    scores the fused kernel draws a mask for (``scores``, the model's count) over the extra
    time of the pass with dropout (measured with and without, back to back). A head dim whose
    pass was not slower with dropout gives no figure."""
    points = [p for p in (m or {}).get("points", []) if p.get("dropout") and p.get("plain")]
    out: dict[str, tuple[Any, str]] = {}
    for impl in sorted({p["impl"] for p in points}):
        for backward, field, step in ((False, "dropout_rate", "forward"), (True, "backward_dropout_rate", "backward")):
            curve: dict[int, str] = {}
            parts = []
            for p in (q for q in points if q["impl"] == impl):
                b, h, n, d, _ = p["shape"]
                extra = p["dropout"][step]["time_s"] - p["plain"][step]["time_s"]
                if extra <= 0:
                    continue
                rate = scores(impl, b, h, n, d, backward) / extra
                curve[int(d)] = _ops(rate)
                parts.append(
                    f"d={d}: {p['plain'][step]['time_s'] * 1e6:.1f} us -> {p['dropout'][step]['time_s'] * 1e6:.1f} us"
                )
            if not curve:
                continue
            b, h, n = points[0]["shape"][:3]
            note = (
                f"{step} pass of {impl} with dropout_p = {points[0].get('p', DROPOUT_P)} against without, fp16, "
                f"{b} x {h} heads x {n} tokens, non-causal, best of three medians of CUDA-event times: scores "
                f"drawn / extra time ({'; '.join(parts)})"
            )
            out[f"implementations.{impl}.{field}"] = (dict(sorted(curve.items())), note)
    return out


def predicted_backward_s(profile: Profile) -> Predict:
    """The model's backward pass on a reference shape on ``profile`` (no efficiency yet), as
    (the fused backward kernel's compute time, the other backward kernels' time): the
    efficiency divides the first alone."""
    parts = backward_reference_parts(profile)

    def predict(impl: str, b: int, h: int, n: int, d: int, causal: bool) -> tuple[float, float]:
        got = parts(impl, b, h, n, d, causal)
        return got["compute_s"], got["other_s"]

    return predict


def backward_reference_parts(profile: Profile) -> Predict:
    """The model's view of a reference shape's backward pass with no backward efficiency, CTA
    overhead or diagonal cost (``profile`` stripped of them): the fused backward kernel's
    compute time (its launch included), the other backward kernels' time, the fused kernel's
    CTA waves (CTAs per CTA slot) and the share of its blocks on the diagonal."""
    bare = profile.with_implementation_figures(
        backward_efficiency=(), backward_cta_overhead_s=(), backward_masked_block_cost=()
    )

    def parts(impl: str, b: int, h: int, n: int, d: int, causal: bool) -> dict[str, float]:
        case = Case(impl=impl, n=n, d=d, batch=b, heads=h, dtype="fp16", causal=causal, backward=True)
        ev = _compare(case, bare, "on", None, None).tiled
        out = {"compute_s": 0.0, "other_s": 0.0, "waves": 0.0, "diagonal_share": 0.0}
        for k, t in zip(ev.traffic.kernels, ev.timing.kernels):
            if k.pass_ != "backward":
                continue
            if k.name == BACKWARD_MAIN[impl]:
                out["compute_s"] += float(t.terms["compute"]) + float(t.terms.get("launch", 0.0))
                out["waves"] = float(np.ceil(float(k.ctas) / max(float(k.concurrent_ctas), 1.0)))
                out["diagonal_share"] = float(k.diagonal_blocks) / max(float(k.blocks), 1.0)
            else:
                out["other_s"] += float(t.time_s)
        # calibrate's tensors are batch × heads × N × d: its timed backward holds the layout copies too
        out["other_s"] += sum(runner_layout_copies(case, profile).values())
        return out

    return parts


def backward_efficiency_figures(m: dict[str, Any], predict: Predict) -> dict[str, tuple[Any, str]]:
    """``implementations.<name>.backward_efficiency`` by head dim: the fused backward kernel's
    compute time in the model (``predict``, made without a backward efficiency) over the time
    it took, the measured pass less the model's other backward kernels. (The efficiency
    divides the fused kernel's compute terms alone: a ratio of whole-pass times would be off
    by the other kernels' share, and wrong where the model without it is bound by memory.)

    Where the short and long-loop reference shapes were measured too and ``predict`` gives the
    fused kernel's CTA waves and diagonal share (:func:`backward_reference_parts`), the
    efficiency, ``backward_cta_overhead`` (what a CTA costs beyond its blocks: K_j, V_j in,
    dK_j, dV_j out) and ``backward_masked_block_cost`` (what a diagonal block costs beyond a
    plain one) are fitted jointly as the forward's are (:func:`fit_reference`, the other
    kernels' time in place of the launch); else the long shape alone gives the efficiency and
    the causal shape is reported in the note as a check. ``predict`` may return a plain time
    (taken as all compute), (compute, other) or the parts' dict."""

    def parts(impl: str, shape: list[Any]) -> dict[str, float]:
        got = predict(impl, *shape)
        if isinstance(got, dict):
            return dict(got)
        compute, other = (float(got), 0.0) if not isinstance(got, tuple) else (float(got[0]), float(got[1]))
        return {"compute_s": compute, "other_s": other}

    points = [p for p in (m or {}).get("points", []) if (p.get("backward") or {}).get("time_s")]
    out: dict[str, tuple[Any, str]] = {}
    for impl in sorted({p["impl"] for p in points}):
        mine = [q for q in points if q["impl"] == impl]

        def measured(shape: tuple[int, int, int], d: int, causal: bool, mine: list[Any] = mine) -> Any:
            return next((q for q in mine if tuple(q["shape"]) == (*shape, d, causal)), None)

        def part(shape: tuple[int, int, int], d: int, causal: bool, impl: str = impl) -> dict[str, float] | None:
            q = measured(shape, d, causal)
            if q is None:
                return None
            got = parts(impl, q["shape"])
            return {**got, "launch_s": got["other_s"], "measured_s": q["backward"]["time_s"]}

        curve: dict[int, float] = {}
        cta: dict[int, float] = {}
        masked: dict[int, float] = {}
        checks = []
        heads = sorted({int(q["shape"][3]) for q in mine})
        for d in heads:  # head dims with a short shape first: their CTA overhead serves the others
            long, short = part(REFERENCE_LONG, d, False), part(REFERENCE_SHORT, d, False)
            if long is None or short is None or "waves" not in long:
                continue
            fit = fit_reference(long, short, part(REFERENCE_LONG, d, True), loop=part(REFERENCE_LOOP, d, False))
            curve[d] = round(fit["efficiency"], 3)
            cta[d] = fit["cta_overhead_s"] or 0.0
            if fit["masked_cost"] is not None:
                masked[d] = fit["masked_cost"]
        joint = bool(curve)
        known = tuple(sorted(cta.items()))
        for d in heads:
            long, causal = part(REFERENCE_LONG, d, False), part(REFERENCE_LONG, d, True)
            if d in curve or long is None:
                continue
            if joint and "waves" in long:  # the neighbours' CTA overhead, the efficiency from the long shape
                fit = fit_reference(long, None, causal, interpolate_log2(known, d))
                curve[d] = round(fit["efficiency"], 3)
                continue
            curve[d] = round(long["compute_s"] / max(long["measured_s"] - long["other_s"], 1e-12), 3)
            if causal is not None:
                checks.append((d, causal))
        if not curve:
            continue
        b, h, n = REFERENCE_LONG
        if joint:
            bs, hs, ns = REFERENCE_SHORT
            bl, hl, nl = REFERENCE_LOOP
            shared = (
                f"fp16, torch.autograd.grad with the graph kept, best of three medians of CUDA-event times; fitted "
                f"jointly to {b} x {h} heads x {n} tokens, {b} x {h} x {n} causal, {bs} x {hs} x {ns}, {bl} x {hl} x "
                f"{nl}: measured backward = the model's other backward kernels + compute / efficiency x (1 + diagonal "
                "cost x diagonal share) + CTA waves x CTA overhead (least squares on the relative error over the "
                "plain shapes)"
            )
            note = f"model compute time of the fused backward kernel (no efficiency) / measured, {shared}"
        else:
            shared = ""
            note = (
                f"model compute time of the fused backward kernel (no efficiency) / measured backward less the "
                f"model's other backward kernels, fp16, {b} x {h} heads x {n} tokens, non-causal, "
                "torch.autograd.grad with the graph kept, best of three medians of CUDA-event times"
            )
        for d, causal in checks:
            e = interpolate_log2(tuple(sorted(curve.items())), d)
            err = (causal["other_s"] + causal["compute_s"] / e - causal["measured_s"]) / causal["measured_s"]
            note += f"; check, causal d={d}: predicted with this efficiency {err * 100:+.1f}% off"
        out[f"implementations.{impl}.backward_efficiency"] = (dict(sorted(curve.items())), note)
        if joint and any(v > 0 for v in cta.values()):
            out[f"implementations.{impl}.backward_cta_overhead"] = (
                {d: f"{max(v, 1e-9) * 1e6:.4g} us" for d, v in sorted(cta.items())},
                f"seconds a CTA of the fused backward kernel costs beyond its blocks' work, per CTA slot; {shared}",
            )
        if masked and any(v > 0 for v in masked.values()):
            out[f"implementations.{impl}.backward_masked_block_cost"] = (
                {d: round(max(v, 1e-3), 3) for d, v in sorted(masked.items())},
                f"extra cost of a block on the causal diagonal in the fused backward kernel, in plain blocks; {shared}",
            )
    return out


def backward_figures(
    result: dict[str, Any],
    profile: Profile | None = None,
    predict: Predict | None = None,
    scores: DropoutScores | None = None,
) -> dict[str, tuple[Any, str]]:
    """Every profile field the backward measurements give (value, note)."""
    out = backward_kernel_figures(result)
    if predict is None and profile is not None:
        predict = backward_reference_parts(profile)
    if predict is not None:
        out.update(backward_efficiency_figures(result.get("sdpa_backward") or {}, predict))
    if scores is None and profile is not None:
        scores = dropout_scores(profile)
    if scores is not None:
        out.update(dropout_rate_figures(result.get("sdpa_dropout") or {}, scores))
    return out
