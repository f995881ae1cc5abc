"""The profile fields a calibration run's measurements give, as (value text, note): the
chip's ceilings (:func:`measured_figures`), what the driver reports (:func:`device_figures`),
the library kernels of the forward (:func:`kernel_figures`) and of the training step
(:func:`backward_kernel_figures`). Pure: tested on the CPU.

The training step's fields, and what reads them in the time model:
``kernels.softmax_backward.bandwidth`` (a curve by row length, for kernels tagged
``op="softmax_backward"``), ``kernels.dropout.bandwidth`` (``op="dropout"``),
``kernels.reduction.bandwidth`` (``op="reduction"``), ``kernels.dropout_backward.bandwidth``
and ``kernels.elementwise_backward.bandwidth`` (both ``op="elementwise"`` today: kept apart to
show whether one elementwise rate serves), ``kernels.scale.bandwidth`` (``op="scale"``) and
``kernels.copy.bandwidth`` (``op="copy"``); and, from :mod:`.fits`,
``implementations.<name>.backward_efficiency`` by head dim (the fused backward kernels,
``overlap="serial-compute"``, ``pass_="backward"``) and ``implementations.<name>.dropout_rate``
/ ``backward_dropout_rate`` by head dim (fused kernels with ``dropout_scores``: extra time =
scores / rate, added to their compute).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping
from typing import Any

from ..frozen import frozen
from ..hardware import Profile
from ..units import format_si, quantity
from .plan import (
    DROPOUT_P,
    GROUP_SUM_SHAPE,
    KNEE_FRACTION,
    MATMUL_DTYPES,
    SCORES_BYTES,
    SOFTMAX_BYTES,
    SUSTAINED_FIRST_CALLS,
    SUSTAINED_ONSET_RISE,
    SUSTAINED_SETTLED_FROM_S,
)


def _num(d: Mapping[str, Any] | None, *path: str) -> float | None:
    cur: Any = d
    for key in path:
        if not isinstance(cur, Mapping) or key not in cur:
            return None
        cur = cur[key]
    if isinstance(cur, (int, float)) and not isinstance(cur, bool) and math.isfinite(cur) and cur > 0:
        return float(cur)
    return None


def _bytes_text(n: float) -> str:
    """Exact in GiB or MiB where one divides ``n``; else from 1 GiB up GiB to 3 decimals; else KiB or B."""
    n = int(n)
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    if n >= 2**30:
        return f"{n / 2**30:.3f} GiB"
    if n >= 2**10 and n % 2**10 == 0:
        return f"{n // 2**10} KiB"
    return f"{n} B"


def _si(value: float, unit: str) -> str:
    """4 significant digits with an SI prefix: ``4.521e12, 'B/s' -> '4.521 TB/s'`` (units.parse reads it back)."""
    return format_si(value, unit, 4, significant=True, largest="P")


def _bw(v: float) -> str:
    return _si(v, "B/s")


def _tb(v: float) -> str:
    return f"{v / 1e12:.2f} TB/s"


def _flops(v: float) -> str:
    return _si(v, "FLOP/s")


def _ns(v: float) -> str:
    return format_si(v, "s", 4, significant=True, largest="", smallest="p")


# ---------------------------------------------------------------------------------------
# The figures a run measures: one table for the profile and for the CLI's table


@frozen
class Figure:
    """One figure a calibration run measures: its row in ``memmodel calibrate``'s table, the
    kind of quantity it is (how it prints), where the run's measurements hold it, and the
    base profile's figure it is shown beside (if any). :func:`measured_figures` builds the
    profile's fields from the same values (:func:`figure_values`)."""

    key: str
    label: str
    kind: str  # "bandwidth", "bytes", "flops", "ops" or "time"
    read: Callable[[Mapping[str, Any]], float | None]
    base: Callable[[Profile], float | None] | None = None


def _at(*path: str) -> Callable[[Mapping[str, Any]], float | None]:
    return lambda m: _num(m, *path)


def _gemm_d64(kind: str) -> Callable[[Mapping[str, Any]], float | None]:
    def read(m: Mapping[str, Any]) -> float | None:
        points = ((m.get("kernels") or {}).get("gemm") or {}).get(kind, [])
        point = next((p for p in points if p.get("d") == 64 and p.get("dtype") == "fp16"), None)
        return _num(point, "rate")

    return read


def _softmax_row(row: int) -> Callable[[Mapping[str, Any]], float | None]:
    def read(m: Mapping[str, Any]) -> float | None:
        points = ((m.get("kernels") or {}).get("softmax") or {}).get("fp16", [])
        return next((_num(p, "rate") for p in points if p.get("row") == row and p.get("rate")), None)

    return read


def _softmax_one_wave(m: Mapping[str, Any]) -> float | None:
    few = [p for p in ((m.get("kernels") or {}).get("softmax") or {}).get("few_rows", []) if p.get("rows_per_sm") == 2]
    return _num(few[0], "time_s") if few else None


def _masked_fill_mean(m: Mapping[str, Any]) -> float | None:
    rates = [p["rate"] for p in ((m.get("kernels") or {}).get("masked_fill") or {}).get("points", []) if p.get("rate")]
    return sum(rates) / len(rates) if rates else None


def _hbm(b: Profile) -> float | None:
    return b.hbm.bandwidth_bytes_per_s


FIGURES: tuple[Figure, ...] = (
    Figure("hbm_read", "HBM read (Triton)", "bandwidth", _at("hbm", "read", "rate"), _hbm),
    Figure("hbm_write", "HBM write (Triton)", "bandwidth", _at("hbm", "write", "rate"), _hbm),
    Figure("hbm_copy", "HBM copy, read + write (Triton)", "bandwidth", _at("hbm", "copy", "rate"), _hbm),
    Figure("hbm_read_torch", "HBM read (torch sum)", "bandwidth", _at("hbm", "read_torch", "rate"), _hbm),
    Figure("hbm_write_torch", "HBM write (torch fill_)", "bandwidth", _at("hbm", "write_torch", "rate"), _hbm),
    Figure("hbm_copy_torch", "HBM copy (torch copy_)", "bandwidth", _at("hbm", "copy_torch", "rate"), _hbm),
    Figure("l2", "L2 read, 1/4 of L2", "bandwidth", _at("l2", "rate"), lambda b: b.l2.bandwidth_bytes_per_s),
    Figure(
        "l2_knee",
        "L2 knee, any SM each pass",
        "bytes",
        _at("l2_sweep", "knee_bytes"),
        lambda b: b.l2.effective_capacity_bytes,
    ),
    Figure("l2_knee_near", "L2 knee, near SM each pass", "bytes", _at("l2_sweep", "near_reader", "knee_bytes")),
    Figure(
        "l2_knee_halves",
        "L2 knee, smid halves in turn",
        "bytes",
        _at("l2_split", "curves", "smid_half", "knee_bytes"),
    ),
    Figure(
        "l2_knee_parity",
        "L2 knee, even/odd smid in turn",
        "bytes",
        _at("l2_split", "curves", "smid_parity", "knee_bytes"),
    ),
    Figure("smem", "shared memory, all SMs", "bandwidth", _at("smem", "rate"), lambda b: b.sram.bandwidth_bytes_per_s),
    *(
        Figure(
            f"matmul_{dtype}",
            f"matmul {dtype}",
            "flops",
            _at("matmul", dtype, "rate"),
            lambda b, dtype=dtype: b.compute_flops_per_s.get(dtype),
        )
        for dtype in MATMUL_DTYPES
    ),
    *(
        Figure(f"mma_sync_{dtype}", f"mma.sync {dtype} (Triton, no wgmma)", "flops", _at("mma_sync", dtype, "rate"))
        for dtype in ("fp16", "bf16")
    ),
    Figure("gemm_qk_d64", "cuBLAS Q·Kᵀ-shaped, d=64", "bandwidth", _gemm_d64("qk")),
    Figure("gemm_pv_d64", "cuBLAS P·V-shaped, d=64", "bandwidth", _gemm_d64("pv")),
    *(
        Figure(f"softmax_{row}", f"softmax, rows of {row} (fp16)", "bandwidth", _softmax_row(row))
        for row in (1024, 4096, 32768)
    ),
    Figure("softmax_wave", "softmax, two rows of 32768 per SM", "time", _softmax_one_wave),
    Figure("masked_fill", "masked_fill_ (with its mask)", "bandwidth", _masked_fill_mean),
    Figure("exp", "exp2", "ops", _at("exp", "rate"), lambda b: b.exp_ops_per_s),
    Figure("l2_latency", "L2 latency", "time", _at("latency", "l2", "latency_s"), lambda b: b.l2.latency_s),
    Figure("dram_latency", "DRAM latency", "time", _at("latency", "dram", "latency_s"), lambda b: b.hbm.latency_s),
    Figure("dram_latency_large", "DRAM latency, 32 x L2 buffer", "time", _at("latency", "dram_large", "latency_s")),
    Figure("launch_host", "launch, host per launch", "time", _at("launch", "host_per_launch_s")),
    Figure(
        "launch",
        "launch, queued per kernel",
        "time",
        _at("launch", "queued_per_kernel_s"),
        lambda b: b.launch_overhead_s,
    ),
    Figure("launch_min", "shortest kernel (events)", "time", _at("launch", "min_kernel_s")),
    Figure("launch_graph", "per kernel in a CUDA graph", "time", _at("launch", "graph_per_kernel_s")),
)


def figure_values(result: Mapping[str, Any]) -> dict[str, float | None]:
    """Every figure of :data:`FIGURES` (by key) a run's result holds; None where it has none."""
    m = result.get("measurements", {})
    return {f.key: f.read(m) for f in FIGURES}


def measured_figures(result: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """Profile field -> (value text, note) for every figure the result measured."""
    m = result.get("measurements", {})
    v = figure_values(result)
    out: dict[str, tuple[str, str]] = {}
    hbm = m.get("hbm", {})
    named = {
        "Triton read": v["hbm_read"],
        "Triton write": v["hbm_write"],
        "Triton copy": v["hbm_copy"],
        "torch sum": v["hbm_read_torch"],
        "torch fill_": v["hbm_write_torch"],
        "torch copy_": v["hbm_copy_torch"],
    }
    have = {k: v for k, v in named.items() if v}
    size = _num(hbm, "buffer_bytes")
    how = f"buffers of {_bytes_text(size) if size else '?'}; medians of CUDA-event times"
    detail = ", ".join(f"{k} {_tb(v)}" for k, v in have.items())
    reads = {k: v for k, v in have.items() if k in ("Triton read", "torch sum")}
    writes = {k: v for k, v in have.items() if k in ("Triton write", "torch fill_")}
    if reads and writes:  # reads and writes apart: the time model charges each at its own rate
        r_best, w_best = max(reads, key=lambda k: reads[k]), max(writes, key=lambda k: writes[k])
        out["memory.hbm.bandwidth"] = (
            _bw(reads[r_best]),
            f"reads: best of {', '.join(f'{k} {_tb(v)}' for k, v in reads.items())}: {r_best}; {how}. All figures: "
            f"{detail} (copies count bytes read + written; a copy runs below the separate read and write rates)",
        )
        out["memory.hbm.write_bandwidth"] = (
            _bw(writes[w_best]),
            f"writes: best of {', '.join(f'{k} {_tb(v)}' for k, v in writes.items())}: {w_best}; {how}",
        )
    elif have:
        best = max(have, key=lambda k: have[k])
        out["memory.hbm.bandwidth"] = (
            _bw(have[best]),
            f"best of {detail} (copies count bytes read + written): {best}; {how}",
        )
    if lat := v["dram_latency"]:
        b = _num(m, "latency", "dram", "buffer_bytes") or 0
        out["memory.hbm.latency"] = (
            _ns(lat),
            f"pointer chase, one warp, random cycle over {b / 1e6:.0f} MB (4 x L2, L2 flushed); includes TLB "
            "misses and the loop's few instructions per load",
        )
    if bw := v["l2"]:
        b = _num(m, "l2", "buffer_bytes") or 0
        out["memory.l2.bandwidth"] = (_bw(bw), f"all SMs re-reading {b / 1e6:.1f} MB (1/4 L2) with .cg loads")
    if lat := v["l2_latency"]:
        b = _num(m, "latency", "l2", "buffer_bytes") or 0
        out["memory.l2.latency"] = (
            _ns(lat),
            f"pointer chase, one warp, random cycle over {b / 1e6:.1f} MB (1/4 L2) after a full lap; includes the "
            "loop's few instructions per load",
        )
    knees = {
        name: curve
        for name, curve in (
            ("a different SM each pass", m.get("l2_sweep", {})),
            ("%smid halves taking turns", m.get("l2_split", {}).get("curves", {}).get("smid_half", {})),
            ("even/odd %smid taking turns", m.get("l2_split", {}).get("curves", {}).get("smid_parity", {})),
        )
        if _num(curve, "knee_bytes")
    }
    if knees:
        name = min(knees, key=lambda n: _num(knees[n], "knee_bytes") or math.inf)
        curve = knees[name]
        knee = _num(curve, "knee_bytes") or 0.0
        cap = _num(result, "device", "l2_bytes")
        clamp = ""
        if cap and knee > cap:
            knee, clamp = cap, " (clamped to the L2 capacity)"
        others = "; ".join(f"{n}: {(_num(c, 'knee_bytes') or 0) / 2**20:.1f} MiB" for n, c in knees.items())
        out["memory.l2.effective_capacity"] = (
            f"{math.floor(knee / 2**20 * 10) / 10:.1f} MiB",  # rounded down: never above the capacity
            "smallest knee of the bandwidth-vs-size curves of buffers re-read by all SMs (the last size still "
            f"{round(KNEE_FRACTION * 100)} % "
            f"of the way up from the level at 2 x L2 to the plateau){clamp}: {name}, plateau "
            f"{_tb(_num(curve, 'plateau_bytes_per_s') or 0)}, {_tb(_num(curve, 'floor_bytes_per_s') or 0)} at "
            f"2 x L2; knees: {others}",
        )
    if per_sm := _num(m, "smem", "per_sm_bytes_per_s"):
        agg = v["smem"] or 0
        out["memory.sram.bandwidth_per_sm"] = (
            _bw(per_sm),
            f"Gluon kernel reading shared memory (16 B per thread per load) on all SMs: {_tb(agg)} in all / sm_count",
        )
    mm = m.get("matmul", {})
    for dtype in MATMUL_DTYPES:
        if rate := v[f"matmul_{dtype}"]:
            how = mm[dtype].get("method", "")
            out[f"compute.{dtype}"] = (_flops(rate), f"{mm[dtype].get('n', '?')}^3 matmul, {how}")
    if per := v["launch"]:
        host, graph = v["launch_host"], v["launch_graph"]
        out["launch_overhead"] = (
            _ns(per),
            "empty Triton kernels queued back to back (behind a sleeping kernel, so the host is not the limit): "
            "kernel end to next kernel end"
            + (f"; from Python the host needs {_ns(host)} per Triton launch" if host else "")
            + (f"; in a CUDA graph {_ns(graph)} per kernel" if graph else ""),
        )
    if per and (shortest := v["launch_min"]) and shortest > per:
        out["event_overhead"] = (
            _ns(shortest - per),
            f"what timing a step between two CUDA events adds beyond its kernels' queued pace: one empty Triton "
            f"kernel between two events, queued behind a sleeping kernel ({_ns(shortest)}), less one kernel's "
            f"queued pace ({_ns(per)}); validate's steps and calibrate's references are timed this way, a "
            "stream of kernels is not",
        )
    if rate := v["exp"]:
        out["compute.exp"] = (_si(rate, "op/s"), "Triton tl.exp2 (MUFU.EX2) in registers, all SMs")
    peaks = {d: r for d in MATMUL_DTYPES if (r := v[f"matmul_{d}"])}
    out.update(kernel_figures(m, peaks))
    if lines := (m.get("aten_paths") or {}).get("lines"):
        from . import aten_paths

        out.update(aten_paths.figures(lines))
    out.update(power_figures(m))
    if rows := (m.get("host") or {}).get("rows"):
        from . import host

        event = (shortest - per) if per and (shortest := v["launch_min"]) and shortest > per else 0.0
        out.update(host.figures(rows, event))
    return out


def device_figures(result: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """Profile field -> (value text, note) for what the driver reports."""
    d = result.get("device", {})
    out: dict[str, tuple[str, str]] = {}
    if v := _num(d, "sm_count"):
        out["sm_count"] = (str(int(v)), "cudaDeviceProp.multiProcessorCount")
    if v := _num(d, "clock_hz"):
        out["clock"] = (f"{v / 1e6:.0f} MHz", "cudaDeviceProp.clockRate (maximum clock)")
    if v := _num(d, "hbm_bytes"):
        out["memory.hbm.capacity"] = (
            _bytes_text(v),
            f"cudaDeviceProp.totalGlobalMem = {int(v)} bytes (what the driver makes usable)",
        )
    if v := _num(d, "l2_bytes"):
        out["memory.l2.capacity"] = (_bytes_text(v), "cudaDeviceProp.l2CacheSize")
    if v := _num(d, "smem_per_sm_bytes"):
        out["memory.sram.capacity_per_sm"] = (_bytes_text(v), "cudaDeviceProp.sharedMemPerMultiprocessor")
    return out


def kernel_figures(m: dict[str, Any], peaks: dict[str, float]) -> dict[str, tuple[Any, str]]:
    """Profile field -> (value, note) from the ``mma_sync`` and ``kernels`` measurements.

    ``peaks``: the measured dense peaks by dtype, to keep only the products whose FLOPs take
    under half the time of their bytes at 4 TB/s (memory-bound: the rate is then cuBLAS' HBM
    rate, not its arithmetic).
    """
    out: dict[str, tuple[Any, str]] = {}
    mma = m.get("mma_sync") or {}
    for dtype in ("fp16", "bf16"):
        point = mma.get(dtype) or {}
        if point.get("rate"):
            bm, bn, bk, warps, stages = point.get("best", ["?"] * 5)
            out[f"compute.mma_sync.{dtype}"] = (
                f"{point['rate'] / 1e12:.1f} TFLOP/s",
                f"{point.get('n', '?')}^3 product, {mma.get('method', 'Triton, mma.sync')}; best tiles "
                f"{bm}x{bn}x{bk}, {warps} warps, {stages} stages",
            )
    one = mma.get("one_cta") or {}
    if one.get("share"):
        a, b = one["ctas_1"], one["ctas_2"]
        out["compute.mma_sync.one_cta_share"] = (
            round(one["share"], 3),
            f"mma.sync rate with one CTA of {one.get('warps', 4)} warps per SM over two: a register-resident loop "
            f"of {'x'.join(str(x) for x in one.get('tile', []))} products (no memory traffic), "
            f"{a['ctas']} CTAs {a['rate'] / 1e12:.1f} TFLOP/s, {b['ctas']} CTAs {b['rate'] / 1e12:.1f} TFLOP/s",
        )
    k = m.get("kernels") or {}
    gemm = k.get("gemm") or {}
    for kind, fpath, what in (
        ("pv", "kernels.gemm.read_bandwidth", "P·V-shaped products (read an N x N operand)"),
        ("qk", "kernels.gemm.write_bandwidth", "Q·K^T-shaped products (write an N x N output)"),
    ):
        pts = [
            p
            for p in gemm.get(kind, [])
            if p.get("rate") and p["flop"] / peaks.get(p["dtype"], float("inf")) < 0.5 * p["bytes"] / 4e12
        ]
        if pts:
            rates = sorted(p["rate"] for p in pts)
            mid = (
                rates[len(rates) // 2] if len(rates) % 2 else (rates[len(rates) // 2 - 1] + rates[len(rates) // 2]) / 2
            )
            ds = sorted({p["d"] for p in pts})
            out[fpath] = (
                _bw(mid),
                f"median of {len(pts)} cuBLAS batched {what}, torch.matmul, N = {gemm.get('n')}, "
                f"{gemm.get('batch_heads')} heads, d in {ds}, fp16 and bf16, memory-bound ones only: "
                + ", ".join(_bw(r) for r in rates),
            )
    for kind, fpath, what in (
        ("pv_unaligned", "kernels.gemm.unaligned_read_bandwidth", "P·V-shaped"),
        ("qk_unaligned", "kernels.gemm.unaligned_write_bandwidth", "Q·K^T-shaped"),
    ):
        pts = [p for p in gemm.get(kind, []) if p.get("rate")]
        if pts:
            by_d: dict[int, list[float]] = {}
            for p in pts:
                by_d.setdefault(int(p["d"]), []).append(p["rate"])
            out[fpath] = (
                {d: _bw(sum(r) / len(r)) for d, r in sorted(by_d.items())},
                f"cuBLAS batched {what} products with rows of N = {gemm.get('unaligned_n')} fp16 (not a multiple of "
                f"16 bytes), {gemm.get('unaligned_batch_heads')} heads, by head dim (the mean of the dtypes at each): "
                + ", ".join(f"d = {p['d']} {p['dtype']}: {_bw(p['rate'])}" for p in pts),
            )
    soft = k.get("softmax") or {}
    masked = [p for p in soft.get("masked", []) if p.get("rate")]
    if masked:
        out["kernels.softmax.masked_bandwidth"] = (
            {int(p["row"]): _bw(p["rate"]) for p in sorted(masked, key=lambda p: p["row"])},
            "torch.softmax over causally masked fp16 scores (−inf above the diagonal of square N × N blocks), "
            f"bytes read + written over the time, inputs of {SOFTMAX_BYTES // 2**20} MiB, by row length",
        )
    odd = [p for p in soft.get("unaligned", []) if p.get("rate")]
    if odd:
        out["kernels.softmax.unaligned_bandwidth"] = (
            {int(p["row"]): _bw(p["rate"]) for p in sorted(odd, key=lambda p: p["row"])},
            "torch.softmax over rows that are not a multiple of 16 bytes (odd lengths), fp16, bytes read + written "
            f"over the time, inputs of {SOFTMAX_BYTES // 2**20} MiB, by row length",
        )
    by_row: dict[int, list[float]] = {}
    for dtype in ("fp16", "bf16"):
        for p in soft.get(dtype, []):
            if p.get("rate"):
                by_row.setdefault(int(p["row"]), []).append(p["rate"])
    if by_row:
        curve = {row: _bw(sum(v) / len(v)) for row, v in sorted(by_row.items())}
        out["kernels.softmax.bandwidth"] = (
            curve,
            "torch.softmax over the last dimension, bytes read + written over the time, inputs of "
            f"{SOFTMAX_BYTES // 2**20} MiB, fp16 and bf16 averaged, by row length",
        )
    few = [p for p in soft.get("few_rows", []) if p.get("rate")]
    # one wave: PyTorch's block-per-row kernel runs 1024-thread blocks, two per SM
    wave = next((p for p in few if p.get("rows_per_sm") == 2), None)
    if wave:
        out["kernels.softmax.row_time"] = (
            f"{wave['time_s'] * 1e6:.2f} us",
            f"torch.softmax of {wave['rows']} rows (two per SM: one wave of its 1024-thread blocks) of "
            f"{wave['row']} fp16, median of 200; with "
            + ", ".join(f"{p['rows_per_sm']}: {p['time_s'] * 1e6:.1f} us" for p in few if p is not wave)
            + " rows per SM",
        )
    fill = [p for p in (k.get("masked_fill") or {}).get("points", []) if p.get("rate")]
    if fill:
        rates = [p["rate"] for p in fill]
        out["kernels.elementwise.bandwidth"] = (
            _bw(sum(rates) / len(rates)),
            "in-place masked_fill_ of fp16 scores with a broadcast N x N bool mask (N = "
            + ", ".join(str(p["n"]) for p in fill)
            + "), 1 GiB of scores; bytes: scores read + written, mask read per head: "
            + ", ".join(_bw(r) for r in rates),
        )
    return out


def softmax_backward_figures(m: dict[str, Any]) -> dict[str, tuple[Any, str]]:
    """``kernels.softmax_backward.bandwidth``: bytes (gradient and output read, gradient
    written) over the time, by row length, fp16 and bf16 averaged."""
    by_row: dict[int, list[float]] = {}
    for dtype in ("fp16", "bf16"):
        for p in (m or {}).get(dtype, []) or []:
            if p.get("rate"):
                by_row.setdefault(int(p["row"]), []).append(float(p["rate"]))
    if not by_row:
        return {}
    curve = {row: _bw(sum(v) / len(v)) for row, v in sorted(by_row.items())}
    return {
        "kernels.softmax_backward.bandwidth": (
            curve,
            "torch._softmax_backward_data over the last dimension, bytes: gradient and softmax output "
            f"read, gradient written, {SOFTMAX_BYTES // 2**20} MiB tensors, fp16 and bf16 averaged, by row length",
        )
    }


def dropout_figures(m: dict[str, Any]) -> dict[str, tuple[Any, str]]:
    """``kernels.dropout.bandwidth`` (native_dropout) and ``kernels.dropout_backward.bandwidth``
    (native_dropout_backward): tensor bytes read and written, the one-byte mask included."""
    out: dict[str, tuple[Any, str]] = {}
    if not m or "error" in m:
        return out
    size = f"{m.get('bytes', SCORES_BYTES) // 2**20} MiB of fp16 scores, p = {m.get('p', DROPOUT_P)}"
    fwd, bwd = m.get("forward") or {}, m.get("backward") or {}
    if fwd.get("rate"):
        out["kernels.dropout.bandwidth"] = (
            _bw(fwd["rate"]),
            f"torch.native_dropout, {size}; bytes: P read, P' written, bool mask written",
        )
    if bwd.get("rate"):
        out["kernels.dropout_backward.bandwidth"] = (
            _bw(bwd["rate"]),
            f"native_dropout_backward, {size}; bytes: dP' and the mask read, dP written",
        )
    return out


def elementwise_backward_figures(m: dict[str, Any]) -> dict[str, tuple[Any, str]]:
    """``kernels.elementwise_backward.bandwidth``: the mean of the scale's gradient (a multiply),
    the copy and the ``masked_fill_(mask, 0)`` of the mask's gradient; each listed in the note."""
    if not m or "error" in m:
        return {}
    parts = {k: m[k]["rate"] for k in ("scale", "copy", "masked_fill_zero") if (m.get(k) or {}).get("rate")}
    if not parts:
        return {}
    mean = sum(parts.values()) / len(parts)
    size = f"fp16 scores {m.get('batch_heads')} x {m.get('n')}^2 (512 MiB), bytes read + written"
    out = {
        "kernels.elementwise_backward.bandwidth": (
            _bw(mean),
            f"{size}: " + ", ".join(f"{k} {_bw(v)}" for k, v in parts.items()),
        )
    }
    if "scale" in parts:
        out["kernels.scale.bandwidth"] = (
            _bw(parts["scale"]),
            f"s * 0.125 (ATen's vectorised multiply by a scalar), {size}",
        )
    if "copy" in parts:
        out["kernels.copy.bandwidth"] = (_bw(parts["copy"]), f"s.clone() (a device-to-device copy), {size}")
    return out


def reduction_figures(m: dict[str, Any]) -> dict[str, tuple[Any, str]]:
    """``kernels.reduction.bandwidth``: ATen's sum over the group dimension (GQA dK, dV)."""
    if not m or not m.get("rate"):
        return {}
    b, n_kv, kv_heads, g, d = m.get("shape", GROUP_SUM_SHAPE)
    return {
        "kernels.reduction.bandwidth": (
            _bw(m["rate"]),
            f"torch.sum over dim 3 of fp16 [{b}, {n_kv}, {kv_heads}, {g}, {d}] (FlashAttention-2's GQA dK/dV sum), "
            "bytes read + written",
        )
    }


def _ops(v: float) -> str:
    return str(quantity(v, "ops"))


def backward_kernel_figures(result: Mapping[str, Any]) -> dict[str, tuple[Any, str]]:
    """The library kernels of the training step (the ``backward`` step's measurements)."""
    out: dict[str, tuple[Any, str]] = {}
    out.update(softmax_backward_figures(result.get("softmax_backward") or {}))
    out.update(dropout_figures(result.get("dropout") or {}))
    out.update(elementwise_backward_figures(result.get("elementwise_backward") or {}))
    out.update(reduction_figures(result.get("reduction") or {}))
    return out


def settle(times: list[float]) -> dict[str, float] | None:
    """What one sustained series says: ``times`` of calls run back to back from an idle GPU.
    The rate before the clocks fall is the median of the first calls; the settled one, the
    median from :data:`SUSTAINED_SETTLED_FROM_S` of busy time on; ``onset_s``, the busy time
    before the first of three calls in a row :data:`SUSTAINED_ONSET_RISE` slower than the
    first ones (None where none are). None where the series is too short to settle."""
    if len(times) < SUSTAINED_FIRST_CALLS + 3 or min(times) <= 0:
        return None
    first = statistics.median(times[:SUSTAINED_FIRST_CALLS])
    busy, onset, settled = 0.0, None, []
    slow = [t > first * (1 + SUSTAINED_ONSET_RISE) for t in times]
    for i, t in enumerate(times):
        if onset is None and all(slow[i : i + 3]) and i + 3 <= len(times):
            onset = busy
        if busy >= SUSTAINED_SETTLED_FROM_S:
            settled.append(t)
        busy += t
    if len(settled) < 3:
        return None
    after = statistics.median(settled)
    return {"first_s": first, "settled_s": after, "share": first / after, "onset_s": onset, "busy_s": busy}


def power_figures(m: Mapping[str, Any]) -> dict[str, tuple[Any, str]]:
    """``implementations.<name>.sustained_share`` (at most 1) and, where its clocks fell in at
    least half its series, ``sustained_after`` (the busy time before they did), each the
    median over the implementation's series in the sustained step."""
    series = (m.get("sustained") or {}).get("series") or []
    out: dict[str, tuple[Any, str]] = {}
    by_impl: dict[str, list[tuple[dict[str, Any], dict[str, float]]]] = {}
    for s in series:
        got = settle(s.get("times_s") or [])
        if got is not None:
            by_impl.setdefault(s["impl"], []).append((s, got))
    for impl, runs in by_impl.items():
        b, h, n, d = runs[0][0]["shape"]
        shares = [g["share"] for _, g in runs]
        share = min(1.0, statistics.median(shares))
        how = (
            f"its forward kernel ({b} x {h} heads x {n} tokens, d = {d}, fp16) run back to back for "
            f"{statistics.median(g['busy_s'] for _, g in runs):.1f} s after {runs[0][0].get('idle_s', 0):g} s of idle "
            f"GPU, CUDA events between calls, {len(runs)} series"
        )
        out[f"implementations.{impl}.sustained_share"] = (
            round(share, 3),
            f"{how}: median over the series of the first {SUSTAINED_FIRST_CALLS} calls' time over the median call's "
            f"from {SUSTAINED_SETTLED_FROM_S:g} s on (the clocks the power limit leaves): "
            + ", ".join(f"{x:.3f}" for x in shares),
        )
        onsets = [g["onset_s"] for _, g in runs if g["onset_s"] is not None and g["share"] < 1 - SUSTAINED_ONSET_RISE]
        if onsets and 2 * len(onsets) >= len(runs):
            out[f"implementations.{impl}.sustained_after"] = (
                _ns(statistics.median(onsets)),
                f"{how}: median over the series whose clocks fell of the busy time before three calls in a row ran "
                f"{SUSTAINED_ONSET_RISE * 100:.0f}% slower than the first {SUSTAINED_FIRST_CALLS} (the clocks fall sooner the "
                "more power a kernel draws): " + ", ".join(f"{t * 1e3:.0f} ms" for t in onsets),
            )
    return out
