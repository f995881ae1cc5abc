"""Measure a GPU's real ceilings and write them as a hardware profile (``memmodel calibrate``).

What is measured, and how (every time is a CUDA-event time, median of repeats after warm-up):

* HBM read, write and copy bandwidth: grid-stride Triton kernels over buffers of several GB
  (16-byte loads/stores; one program per resident slot so no SM idles in a tail), and torch's
  ``sum``/``fill_``/``copy_`` as a cross-check. Bytes = bytes read + bytes written.
* L2 bandwidth: a buffer of 1/4 of L2 read over and over by all SMs, loads cached in L2 only
  (``.cg``), so they are served by L2 and not by each SM's L1.
* L2 effective capacity: the same kernel over buffers from 8 MB to 2 × L2, each block read by a
  different SM in each pass (all over the chip); the knee where the bandwidth falls from the L2
  plateau toward its level at 2 × L2 (:func:`find_knee`). A second curve, with each block read by
  a near-neighbour program in the next pass, is kept for comparison.
* Shared-memory bandwidth: a Gluon (Triton's explicit-layout dialect) kernel whose threads
  read 16 bytes each from shared memory per iteration, all SMs, many iterations.
* Matrix products: ``torch.matmul`` at 8192³ on random normal data for fp16, bf16, tf32
  (``allow_tf32``), fp32 (TF32 off: the non-tensor rate), and fp8 through ``torch._scaled_mm``.
* exp: a Triton kernel doing thousands of ``exp2`` per element in registers.
* Latency: one warp chasing pointers (``idx = buf[idx]``) over a random cyclic permutation,
  one 128-byte line per entry, in a buffer of 1/4 of L2 (after a full warm-up pass) and in one
  of 4 × L2 (after flushing L2). Includes the loop's few instructions per step and, for DRAM,
  any TLB misses: what a dependent load costs a kernel.
* Launch overhead: host time per launch of an empty Triton kernel (and of a tiny torch op),
  the shortest kernel time through CUDA events, and per kernel in a replayed CUDA graph.

Nothing here imports torch or triton at module import: the pure parts (:func:`find_knee`,
:func:`profile_data`, :func:`profile_yaml`, :func:`resident_programs`) are used and tested on
machines without a GPU.
"""

from __future__ import annotations

import datetime
import math
import statistics
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import __version__
from ..errors import MemmodelError, RuntimeFailure
from . import calibrate_impl

SCHEMA = "memmodel.calibrate/1"
MATMUL_DTYPES = ("fp16", "bf16", "tf32", "fp32", "fp8")

#: (key, description) of each measuring step, in order; the progress bar counts them.
STEPS: tuple[tuple[str, str], ...] = (
    ("hbm", "HBM read, write, copy"),
    ("l2", "L2 bandwidth"),
    ("l2_sweep", "L2 effective capacity"),
    ("l2_split", "L2 partitions (SM groups)"),
    ("smem", "shared-memory bandwidth"),
    ("matmul", "matrix products"),
    ("exp", "exp throughput"),
    ("latency", "L2 and DRAM latency"),
    ("launch", "launch overhead"),
    ("mma_sync", "mma.sync tensor-core peak"),
    ("kernels", "library kernels: softmax, masked_fill, cuBLAS"),
    ("sdpa", "attention implementations, reference shapes"),
    (
        "backward",
        "training-step kernels: softmax backward, dropout, reductions, SDPA backward with and without dropout",
    ),
)

#: Required profile fields calibrate never measures; they come from ``--base``.
NOT_MEASURED_REQUIRED = ("memory.sram.latency",)
#: Every field calibrate never measures (the optional ones are left out without a base), with
#: every ``efficiency.*`` field: those come from traces of real kernels, not from calibrate.
NOT_MEASURED = (*NOT_MEASURED_REQUIRED, "clock")


# ---------------------------------------------------------------------------------------
# Plan: sizes and repeats


@dataclass(frozen=True)
class DeviceInfo:
    name: str
    sm_count: int
    l2_bytes: int
    hbm_bytes: int
    smem_per_sm_bytes: int | None
    capability: tuple[int, int]
    regs_per_sm: int = 65536
    max_threads_per_sm: int = 2048
    clock_hz: float | None = None
    vendor: str = "NVIDIA"
    versions: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Plan:
    warmup: int
    stream_bytes: int  # per buffer (HBM read/write/copy)
    stream_reps: int
    l2_bytes_per_call: int
    l2_reps: int
    sweep_sizes: tuple[int, ...]
    sweep_bytes_per_call: int
    sweep_reps: int
    smem_iters: int
    smem_reps: int
    matmul_n: int
    matmul_reps: int
    exp_iters: int
    exp_reps: int
    chase_steps_l2: int
    chase_steps_dram: int
    chase_reps: int
    launch_batches: int
    launch_per_batch: int
    launch_event_reps: int
    graph_kernels: int


BLOCK_BYTES = 4096 * 4  # one block of the streaming kernels: 4096 float32


def sweep_sizes(l2_bytes: int, *, quick: bool = False) -> tuple[int, ...]:
    """Buffer sizes for the L2 capacity sweep: 8 MB to 2 × L2, finer below L2, in whole blocks."""
    fine = l2_bytes / (8 if quick else 16)
    coarse = l2_bytes / (4 if quick else 8)
    sizes: list[float] = []
    s = 8e6
    while s < l2_bytes - fine / 2:
        sizes.append(s)
        s += fine
    s = float(l2_bytes)
    while s <= 2 * l2_bytes + 1:
        sizes.append(s)
        s += coarse
    out = sorted({max(BLOCK_BYTES, int(x) // BLOCK_BYTES * BLOCK_BYTES) for x in sizes})
    return tuple(out)


def make_plan(info: DeviceInfo, *, quick: bool = False) -> Plan:
    """Sizes that fill the GPU and repeats enough for a stable median; ``quick`` cuts both."""
    gib = 2**30
    stream = (1 if quick else 4) * gib
    stream = min(stream, int(info.hbm_bytes * 0.2) // BLOCK_BYTES * BLOCK_BYTES)  # small GPUs: 2 buffers ≤ 40 %
    return Plan(
        warmup=2 if quick else 3,
        stream_bytes=stream,
        stream_reps=5 if quick else 20,
        l2_bytes_per_call=(2 if quick else 4) * 10**9,
        l2_reps=5 if quick else 20,
        sweep_sizes=sweep_sizes(info.l2_bytes, quick=quick),
        sweep_bytes_per_call=(1 if quick else 2) * 10**9,
        sweep_reps=3 if quick else 7,
        smem_iters=4000 if quick else 15000,
        smem_reps=5 if quick else 15,
        matmul_n=8192,
        matmul_reps=4 if quick else 10,
        exp_iters=400 if quick else 1400,
        exp_reps=5 if quick else 15,
        chase_steps_l2=5000 if quick else 20000,
        chase_steps_dram=2000 if quick else 8000,
        chase_reps=3 if quick else 7,
        launch_batches=5 if quick else 20,
        launch_per_batch=100 if quick else 200,
        launch_event_reps=20 if quick else 100,
        graph_kernels=100,
    )


def resident_programs(
    n_regs: int | None,
    num_warps: int,
    shared_bytes: int = 0,
    *,
    regs_per_sm: int = 65536,
    max_threads_per_sm: int = 2048,
    smem_per_sm: int | None = None,
    max_blocks_per_sm: int = 32,
) -> int:
    """Programs (thread blocks) of one kernel that fit on one SM at once.

    Registers are allocated per warp in units of 256 (per thread: ``n_regs`` rounded up to 8);
    without a register count only the thread limit applies. At least 1.
    """
    limits = [max_threads_per_sm // (32 * num_warps), max_blocks_per_sm]
    if n_regs:
        per_warp = math.ceil(math.ceil(n_regs / 8) * 8 * 32 / 256) * 256
        limits.append((regs_per_sm // per_warp) // num_warps)
    if shared_bytes and smem_per_sm:
        limits.append(smem_per_sm // shared_bytes)
    return max(1, min(limits))


# ---------------------------------------------------------------------------------------
# The knee of the L2 capacity curve


@dataclass(frozen=True)
class Knee:
    """Where a bandwidth-vs-size curve falls from its plateau toward its floor."""

    bytes: float | None  # None: the curve does not fall within the sizes measured
    plateau_bytes_per_s: float
    floor_bytes_per_s: float
    threshold_bytes_per_s: float
    fraction: float


def find_knee(
    sizes: Sequence[float],
    rates: Sequence[float],
    *,
    fraction: float = 0.5,
    plateau: float | None = None,
    floor: float | None = None,
) -> Knee:
    """The size at which ``rates`` falls below ``floor + fraction × (plateau − floor)``.

    ``plateau`` defaults to the median rate of the smallest quarter of sizes (at least three
    points), ``floor`` to the rate at the largest size. The
    crossing taken is the *last* one (the last point at or above the threshold and the next
    below it), interpolated linearly in size, so a noisy dip on the plateau is not mistaken for
    the knee. ``bytes`` is None when the curve never falls that far (no point after the last
    one at or above the threshold), or when plateau and floor are within 10 % of each other.
    """
    if len(sizes) != len(rates) or len(sizes) < 2:
        raise ValueError("find_knee needs at least two (size, rate) points of equal count")
    if not 0 < fraction < 1:
        raise ValueError("fraction must be between 0 and 1")
    pts = sorted(zip(sizes, rates))
    xs = [float(x) for x, _ in pts]
    ys = [float(y) for _, y in pts]
    top = statistics.median(ys[: max(3, len(ys) // 4)]) if plateau is None else float(plateau)
    bottom = ys[-1] if floor is None else float(floor)
    threshold = bottom + fraction * (top - bottom)
    knee: float | None = None
    if top > 1.1 * bottom:
        above = [i for i, y in enumerate(ys) if y >= threshold]
        if above and above[-1] < len(ys) - 1:
            j = above[-1]
            x0, x1, y0, y1 = xs[j], xs[j + 1], ys[j], ys[j + 1]
            knee = x0 + (y0 - threshold) / (y0 - y1) * (x1 - x0) if y0 != y1 else x0
    return Knee(knee, top, bottom, threshold, fraction)


# ---------------------------------------------------------------------------------------
# Measuring (torch and triton imported inside)


Timer = Callable[[Callable[[], Any], int, int], list[float]]


def _cuda_timer(torch: Any) -> Timer:
    from .run import queue_behind_sleep

    def timer(fn: Callable[[], Any], reps: int, warmup: int) -> list[float]:
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize()
        # queue the timed calls behind a sleeping kernel that lasts longer than the host needs
        # to issue them all: a call shorter than its own dispatch is then timed at the GPU's pace
        t0 = time.perf_counter()
        fn()
        host_s = time.perf_counter() - t0
        torch.cuda.synchronize()
        queue_behind_sleep(torch, reps, host_s)
        pairs = []
        for _ in range(reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            pairs.append((start, end))
        torch.cuda.synchronize()
        return [s.elapsed_time(e) * 1e-3 for s, e in pairs]

    return timer


@dataclass
class Context:
    torch: Any
    kernels: Any
    info: DeviceInfo
    plan: Plan
    timer: Timer
    device: str = "cuda"

    def sync(self) -> None:
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def free(self) -> None:
        if self.device == "cuda":
            self.torch.cuda.synchronize()
            self.torch.cuda.empty_cache()

    def generator(self, seed: int = 0) -> Any:
        return self.torch.Generator(device=self.device).manual_seed(seed)

    def grid_for(self, kernel: Any, num_warps: int) -> int:
        """Programs for a persistent launch: every SM full, nothing left for a second wave."""
        n_regs = getattr(kernel, "n_regs", None)
        meta = getattr(kernel, "metadata", None)
        shared = int(getattr(meta, "shared", 0) or 0)
        per_sm = resident_programs(
            n_regs if isinstance(n_regs, int) else None,
            num_warps,
            shared,
            regs_per_sm=self.info.regs_per_sm,
            max_threads_per_sm=self.info.max_threads_per_sm,
            smem_per_sm=self.info.smem_per_sm_bytes,
        )
        return self.info.sm_count * per_sm


def _median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs))


def _rate(amount: float, times: Sequence[float]) -> dict[str, Any]:
    t = _median(times)
    return {"time_s": t, "rate": amount / t, "reps": len(times), "spread": (max(times) - min(times)) / t}


def _persistent_grid(ctx: Context, kernel: Any, args: tuple[Any, ...], num_warps: int, **meta: Any) -> int:
    """Compile (and run once, one program per SM), then the grid that fills every SM once."""
    compiled = kernel[(ctx.info.sm_count,)](*args, num_warps=num_warps, **meta)
    ctx.sync()
    return ctx.grid_for(compiled, num_warps)


def measure_hbm(ctx: Context) -> dict[str, Any]:
    torch, k, p = ctx.torch, ctx.kernels, ctx.plan
    n = p.stream_bytes // 4
    block, warps = 4096, 8
    x = torch.rand(n, device=ctx.device, dtype=torch.float32, generator=ctx.generator(1))
    y = torch.empty_like(x)
    out = torch.empty(ctx.info.sm_count * 64, device=ctx.device, dtype=torch.float32)
    res: dict[str, Any] = {"buffer_bytes": n * 4}

    grid = _persistent_grid(ctx, k.read_kernel, (x, out, n), warps, BLOCK=block)
    r = _rate(
        n * 4,
        ctx.timer(lambda: k.read_kernel[(grid,)](x, out, n, BLOCK=block, num_warps=warps), p.stream_reps, p.warmup),
    )
    want, got = float(x.sum(dtype=torch.float64)), float(out[:grid].sum(dtype=torch.float64))
    res["read"] = {
        **r,
        "bytes": n * 4,
        "grid": grid,
        "method": "Triton grid-stride read",
        "check_rel_error": abs(got - want) / abs(want),
    }

    grid = _persistent_grid(ctx, k.write_kernel, (y, n, 1.5), warps, BLOCK=block)
    r = _rate(
        n * 4,
        ctx.timer(lambda: k.write_kernel[(grid,)](y, n, 1.5, BLOCK=block, num_warps=warps), p.stream_reps, p.warmup),
    )
    res["write"] = {
        **r,
        "bytes": n * 4,
        "grid": grid,
        "method": "Triton grid-stride write",
        "check_ok": bool((y == 1.5).all()),
    }

    grid = _persistent_grid(ctx, k.copy_kernel, (x, y, n), warps, BLOCK=block)
    r = _rate(
        2 * n * 4,
        ctx.timer(lambda: k.copy_kernel[(grid,)](x, y, n, BLOCK=block, num_warps=warps), p.stream_reps, p.warmup),
    )
    res["copy"] = {
        **r,
        "bytes": 2 * n * 4,
        "grid": grid,
        "method": "Triton grid-stride copy (bytes read + written)",
        "check_ok": bool(torch.equal(x, y)),
    }

    res["read_torch"] = {
        **_rate(n * 4, ctx.timer(lambda: torch.sum(x), p.stream_reps, p.warmup)),
        "bytes": n * 4,
        "method": "torch.sum",
    }
    res["write_torch"] = {
        **_rate(n * 4, ctx.timer(lambda: y.fill_(2.5), p.stream_reps, p.warmup)),
        "bytes": n * 4,
        "method": "Tensor.fill_",
    }
    res["copy_torch"] = {
        **_rate(2 * n * 4, ctx.timer(lambda: y.copy_(x), p.stream_reps, p.warmup)),
        "bytes": 2 * n * 4,
        "method": "Tensor.copy_ (bytes read + written)",
    }
    return res


#: Block shift per pass of the L2 kernels: a large prime sends each block to a program far
#: away (another SM, either L2 partition) in each pass; 7 to a near neighbour.
FAR, NEAR = 7919, 7


def _cached_read(
    ctx: Context,
    buf: Any,
    out: Any,
    size: int,
    bytes_per_call: int,
    reps: int,
    *,
    cg: bool = True,
    shift: int = NEAR,
) -> dict[str, Any]:
    k = ctx.kernels
    block, warps = 4096, 8
    n_blocks = size // BLOCK_BYTES
    passes = max(1, round(bytes_per_call / (n_blocks * BLOCK_BYTES)))
    grid = _persistent_grid(ctx, k.cached_read_kernel, (buf, out, n_blocks, 2, shift), warps, BLOCK=block, CG=cg)
    amount = passes * n_blocks * BLOCK_BYTES

    def launch() -> Any:
        return k.cached_read_kernel[(grid,)](buf, out, n_blocks, passes, shift, BLOCK=block, CG=cg, num_warps=warps)

    times = ctx.timer(launch, reps, 1)
    return {
        **_rate(amount, times),
        "buffer_bytes": n_blocks * BLOCK_BYTES,
        "passes": passes,
        "bytes": amount,
        "grid": grid,
    }


def measure_l2(ctx: Context) -> dict[str, Any]:
    torch, p = ctx.torch, ctx.plan
    size = max(BLOCK_BYTES, ctx.info.l2_bytes // 4 // BLOCK_BYTES * BLOCK_BYTES)
    buf = torch.rand(size // 4, device=ctx.device, dtype=torch.float32, generator=ctx.generator(2))
    out = torch.empty(ctx.info.sm_count * 64, device=ctx.device, dtype=torch.float32)
    res = _cached_read(ctx, buf, out, size, p.l2_bytes_per_call, p.l2_reps)
    res["method"] = "Triton, all SMs re-read a buffer of 1/4 L2 (.cg loads: L2, not L1)"
    plain = _cached_read(ctx, buf, out, size, p.l2_bytes_per_call, p.l2_reps, cg=False)
    res["default_loads"] = {**plain, "method": "the same with default loads (L1 may serve some)"}
    return res


def measure_l2_sweep(ctx: Context, hbm_read: float | None = None) -> dict[str, Any]:
    torch, p = ctx.torch, ctx.plan
    biggest = max(p.sweep_sizes)
    buf = torch.rand(biggest // 4, device=ctx.device, dtype=torch.float32, generator=ctx.generator(3))
    out = torch.empty(ctx.info.sm_count * 64, device=ctx.device, dtype=torch.float32)
    curves: dict[int, list[dict[str, Any]]] = {FAR: [], NEAR: []}
    for size in p.sweep_sizes:
        for shift, points in curves.items():
            r = _cached_read(ctx, buf, out, size, p.sweep_bytes_per_call, p.sweep_reps, shift=shift)
            points.append(
                {"bytes": r["buffer_bytes"], "bytes_per_s": r["rate"], "passes": r["passes"], "spread": r["spread"]}
            )
    near = {"points": curves[NEAR], **knee_summary(curves[NEAR], hbm_read)}
    near["method"] = "as above, but in each pass a block is read by the program 7 places on from last pass's"
    return {"points": curves[FAR], **knee_summary(curves[FAR], hbm_read), "near_reader": near}


def measure_l2_split(ctx: Context) -> dict[str, Any]:
    """The capacity curve when two groups of SMs take turns over each half of the buffer.

    If the groups are the two L2 partitions and each partition keeps its own copy of what its
    SMs read, every block ends up cached twice and the knee moves to about half the L2. Which SMs
    sit on which partition is not documented, so two guesses are measured: the lower and upper
    half of the ``%smid`` values, and even and odd ``%smid``.
    """
    torch, k, p = ctx.torch, ctx.kernels, ctx.plan
    fake = ctx.device != "cuda"  # CPU interpreter: %smid is faked
    block, warps = 4096, 8
    sms = ctx.info.sm_count
    buf = torch.rand(max(p.sweep_sizes) // 4, device=ctx.device, dtype=torch.float32, generator=ctx.generator(10))
    out = torch.empty(sms * 64, device=ctx.device, dtype=torch.float32)
    counts = torch.zeros(sms * 64, device=ctx.device, dtype=torch.int32)
    rank = torch.zeros(2, device=ctx.device, dtype=torch.int32)
    table = torch.zeros(1024, device=ctx.device, dtype=torch.int32)
    first = max(2, p.sweep_sizes[0] // BLOCK_BYTES // 2)  # arguments like the timed launches': same variant
    probe = k.split_read_kernel[(sms,)](
        buf, out, counts, rank, table, first, 2, sms, 0, BLOCK=block, FAKE=fake, num_warps=warps
    )
    ctx.sync()
    grid = ctx.grid_for(probe, warps)
    per_sm = grid // sms
    ids = torch.full((sms * 32,), -1, device=ctx.device, dtype=torch.int32)
    k.sm_id_kernel[(ids.numel(),)](ids, FAKE=fake, num_warps=1)
    smids = sorted(set(int(i) for i in ids.tolist()))
    if not smids or smids[0] < 0 or smids[-1] >= table.numel():
        raise RuntimeFailure(f"unexpected %smid values {smids[:3]}..{smids[-3:]}")
    rules = {
        "smid_half": {s: int(i >= len(smids) // 2) for i, s in enumerate(smids)},
        "smid_parity": {s: s % 2 for s in smids},
    }
    curves: dict[str, Any] = {}
    for rule, groups in rules.items():
        lookup = [0] * table.numel()
        for smid, group in groups.items():
            lookup[smid] = group
        table.copy_(torch.tensor(lookup, dtype=torch.int32))
        sizes = [sum(1 for g in groups.values() if g == j) for j in (0, 1)]
        n0, n1 = per_sm * sizes[0], per_sm * sizes[1]
        points = []
        for size in p.sweep_sizes:
            n_half = max(1, size // BLOCK_BYTES // 2)
            passes = max(1, round(p.sweep_bytes_per_call / (2 * n_half * BLOCK_BYTES)))

            def launch(n_half: int = n_half, passes: int = passes, n0: int = n0, n1: int = n1) -> Any:
                rank.zero_()
                return k.split_read_kernel[(grid,)](
                    buf, out, counts, rank, table, n_half, passes, n0, n1, BLOCK=block, FAKE=fake, num_warps=warps
                )

            times = ctx.timer(launch, p.sweep_reps, 1)
            read = int(counts[:grid].sum()) * BLOCK_BYTES  # of the last launch: each launch reads the same
            t = _median(times)
            points.append(
                {
                    "bytes": 2 * n_half * BLOCK_BYTES,
                    "bytes_per_s": read / t,
                    "passes": passes,
                    "spread": (max(times) - min(times)) / t,
                    "check_every_block_once": read == passes * 2 * n_half * BLOCK_BYTES,
                }
            )
        curves[rule] = {"points": points, **knee_summary(points), "sms_per_group": sizes}
    return {
        "curves": curves,
        "grid": grid,
        "programs_per_sm": per_sm,
        "smid_count": len(smids),
        "smid_min": smids[0],
        "smid_max": smids[-1],
        "method": "two groups of SMs (by %smid) read the two halves of a buffer and swap halves each pass "
        "(.cg loads); knee as for l2_sweep",
    }


def knee_summary(points: Sequence[Mapping[str, float]], hbm_read: float | None = None) -> dict[str, Any]:
    """The knee (where the curve has fallen 10 % of the way to its floor) and the half-way point."""
    sizes = [pt["bytes"] for pt in points]
    rates = [pt["bytes_per_s"] for pt in points]
    knee = find_knee(sizes, rates, fraction=0.9)
    half = find_knee(sizes, rates, fraction=0.5)
    return {
        "plateau_bytes_per_s": knee.plateau_bytes_per_s,
        "floor_bytes_per_s": knee.floor_bytes_per_s,
        "hbm_read_bytes_per_s": hbm_read,
        "knee_bytes": knee.bytes,
        "half_drop_bytes": half.bytes,
        "method": "Triton .cg reads by all SMs over buffers of 8 MB .. 2 x L2, each block read once per pass by a "
        "program far from last pass's reader; knee = last size where the bandwidth is still 90 % of the way from "
        "its level at 2 x L2 up to the plateau (median of the smallest quarter of sizes), interpolated",
    }


def measure_smem(ctx: Context) -> dict[str, Any]:
    torch, k, p = ctx.torch, ctx.kernels, ctx.plan
    if getattr(k, "smem_read_kernel", None) is None:
        raise RuntimeFailure("this Triton has no Gluon (triton.experimental.gluon); shared memory not measured")
    rows, warps = 4, 8
    cols = 4 * 32 * warps
    probe = torch.empty(ctx.info.sm_count * cols, device=ctx.device, dtype=torch.float32)
    compiled = k.smem_read_kernel[(ctx.info.sm_count,)](probe, 4, ROWS=rows, WARPS=warps, num_warps=warps)
    ctx.sync()
    grid = ctx.grid_for(compiled, warps)
    out = torch.empty(grid * cols, device=ctx.device, dtype=torch.float32)
    iters = p.smem_iters

    def launch() -> Any:
        return k.smem_read_kernel[(grid,)](out, iters, ROWS=rows, WARPS=warps, num_warps=warps)

    times = ctx.timer(launch, p.smem_reps, p.warmup)
    amount = grid * iters * cols * 4
    offs = torch.arange(cols, device=ctx.device, dtype=torch.float64)
    expected = iters * offs + sum(i % rows for i in range(iters))
    err = float((out[:cols].double() - expected).norm() / expected.norm())
    r = _rate(amount, times)
    return {
        **r,
        "bytes": amount,
        "grid": grid,
        "per_sm_bytes_per_s": r["rate"] / ctx.info.sm_count,
        "check_rel_error": err,
        "method": "Gluon kernel: every thread reads 16 B of shared memory per iteration (ld.shared.v4), "
        f"{iters} iterations, {warps} warps per program, all SMs full",
    }


def _matmul_one(ctx: Context, dtype: str) -> dict[str, Any]:
    torch, p = ctx.torch, ctx.plan
    n = p.matmul_n
    g = ctx.generator(4)
    flop = 2 * n**3
    note = ""
    if dtype == "fp8":
        if not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
            return {"skipped": "this torch has no torch._scaled_mm / float8_e4m3fn"}
        if ctx.device == "cuda" and ctx.info.capability < (8, 9):
            major, minor = ctx.info.capability
            return {"skipped": f"compute capability {major}.{minor} has no fp8 tensor cores"}
        a = torch.randn(n, n, device=ctx.device, generator=g).to(torch.float8_e4m3fn)
        b = torch.randn(n, n, device=ctx.device, generator=g).to(torch.float8_e4m3fn).t()  # column-major
        one = torch.ones((), device=ctx.device, dtype=torch.float32)

        def fn() -> Any:
            return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

        note = "torch._scaled_mm, e4m3 x e4m3 -> bf16, unit scales"
    else:
        dt = {"fp16": torch.float16, "bf16": torch.bfloat16, "tf32": torch.float32, "fp32": torch.float32}[dtype]
        a = torch.randn(n, n, device=ctx.device, dtype=dt, generator=g)
        b = torch.randn(n, n, device=ctx.device, dtype=dt, generator=g)
        c = torch.empty(n, n, device=ctx.device, dtype=dt)

        def fn() -> Any:
            return torch.matmul(a, b, out=c)

        note = "torch.matmul" + (
            ", allow_tf32=True" if dtype == "tf32" else ", allow_tf32=False" if dtype == "fp32" else ""
        )
    out = fn()
    ctx.sync()
    m = 64
    ref = a[:m].double() @ b[:, :m].double()
    err = float((out[:m, :m].double() - ref).norm() / ref.norm())
    r = _rate(flop, ctx.timer(fn, p.matmul_reps, p.warmup))
    return {**r, "flop": flop, "n": n, "rel_error": err, "method": note + ", random normal data"}


def measure_matmul(ctx: Context) -> dict[str, Any]:
    torch = ctx.torch
    res: dict[str, Any] = {}
    old = torch.backends.cuda.matmul.allow_tf32
    try:
        for dtype in MATMUL_DTYPES:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
            try:
                res[dtype] = _matmul_one(ctx, dtype)
            except (KeyboardInterrupt, MemoryError):
                raise
            except Exception as exc:
                res[dtype] = {"error": _describe(exc)}
            ctx.free()
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.backends.cuda.matmul.allow_tf32 = old
    return res


def measure_exp(ctx: Context) -> dict[str, Any]:
    torch, k, p = ctx.torch, ctx.kernels, ctx.plan
    block, warps = 1024, 4
    probe_x = torch.rand(ctx.info.sm_count * block, device=ctx.device, generator=ctx.generator(5))
    probe_y = torch.empty_like(probe_x)
    compiled = k.exp_kernel[(ctx.info.sm_count,)](probe_x, probe_y, 2, BLOCK=block, num_warps=warps)
    ctx.sync()
    grid = ctx.grid_for(compiled, warps)
    x = torch.rand(grid * block, device=ctx.device, generator=ctx.generator(6))
    y = torch.empty_like(x)
    iters = p.exp_iters
    times = ctx.timer(lambda: k.exp_kernel[(grid,)](x, y, iters, BLOCK=block, num_warps=warps), p.exp_reps, p.warmup)
    ops = grid * block * 4 * iters
    fixed = 0.641185744504986  # x = 2^-x
    err = float((y - fixed).abs().max())
    r = _rate(ops, times)
    return {
        **r,
        "ops": ops,
        "grid": grid,
        "check_max_abs_error": err,
        "method": f"Triton tl.exp2, {4 * iters} per element in registers",
    }


def _chain(ctx: Context, nbytes: int, seed: int) -> tuple[Any, Any, int]:
    """A random cyclic permutation, one int64 entry per 128-byte line; returns (buf, state, lines)."""
    torch = ctx.torch
    stride = 16  # int64 per 128-byte line
    lines = max(2, nbytes // 128)
    perm = torch.randperm(lines, device=ctx.device, generator=ctx.generator(seed))
    nxt = torch.empty_like(perm)
    nxt[perm] = torch.roll(perm, -1)
    buf = torch.zeros(lines * stride, device=ctx.device, dtype=torch.int64)
    buf[::stride] = nxt * stride
    state = (perm[:1] * stride).clone()
    del perm, nxt
    return buf, state, lines


def _chase(ctx: Context, buf: Any, state: Any, steps: int, reps: int) -> list[float]:
    k = ctx.kernels
    return ctx.timer(lambda: k.chase_kernel[(1,)](buf, state, steps, num_warps=1), reps, 1)


def measure_latency(ctx: Context) -> dict[str, Any]:
    torch, k, p = ctx.torch, ctx.kernels, ctx.plan
    res: dict[str, Any] = {}
    # L2: 1/4 of L2, one full lap to load it, then timed laps that walk on along the cycle
    buf, state, lines = _chain(ctx, ctx.info.l2_bytes // 4, 7)
    start = int(state[0])
    k.chase_kernel[(1,)](buf, state, lines, num_warps=1)
    lap_ok = int(state[0]) == start  # one full lap of the cycle comes back to the start
    steps = p.chase_steps_l2
    t = _median(_chase(ctx, buf, state, steps, p.chase_reps))
    res["l2"] = {
        "latency_s": t / steps,
        "time_s": t,
        "steps": steps,
        "buffer_bytes": lines * 128,
        "reps": p.chase_reps,
        "check_lap_ok": lap_ok,
    }
    # DRAM: 4 x L2 (the figure) and 32 x L2 (more TLB misses), L2 flushed by writing another 3 x L2
    # first; each rep visits lines never seen before
    for key, factor, seed in (("dram", 4, 8), ("dram_large", 32, 9)):
        buf, state, lines = _chain(ctx, factor * ctx.info.l2_bytes, seed)
        scratch = torch.empty(3 * ctx.info.l2_bytes // 4, device=ctx.device, dtype=torch.float32)
        scratch.fill_(1.0)
        ctx.sync()
        del scratch
        steps = min(p.chase_steps_dram, lines // (p.chase_reps + 2))
        t = _median(_chase(ctx, buf, state, steps, p.chase_reps))
        res[key] = {
            "latency_s": t / steps,
            "time_s": t,
            "steps": steps,
            "buffer_bytes": lines * 128,
            "reps": p.chase_reps,
        }
        del buf, state
    res["method"] = (
        "Triton, one warp: idx = buf[idx] (.cg loads), random cyclic permutation with one entry per 128-byte "
        "line; L2: buffer of 1/4 L2 after a full lap; DRAM: 4 x L2 (and 32 x L2) after flushing L2, no line "
        "visited twice"
    )
    return res


def measure_launch(ctx: Context) -> dict[str, Any]:
    torch, k, p = ctx.torch, ctx.kernels, ctx.plan
    dummy = torch.zeros(1, device=ctx.device, dtype=torch.int32)

    def launch() -> Any:
        return k.empty_kernel[(1,)](dummy, num_warps=1)

    launch()
    ctx.sync()

    def host_per_launch(fn: Callable[[], Any]) -> float:
        per: list[float] = []
        for _ in range(p.launch_batches):
            ctx.sync()
            t0 = time.perf_counter()
            for _ in range(p.launch_per_batch):
                fn()
            ctx.sync()
            per.append((time.perf_counter() - t0) / p.launch_per_batch)
        return _median(per)

    res: dict[str, Any] = {
        "host_per_launch_s": host_per_launch(launch),
        "torch_op_host_per_launch_s": host_per_launch(lambda: dummy.add_(1)),
        "batches": p.launch_batches,
        "per_batch": p.launch_per_batch,
    }
    try:  # the GPU's own pace: launches queued behind a sleeping kernel, so the host is never the limit
        n = p.launch_per_batch
        cycles = int(min(3 * res["host_per_launch_s"] * n * 2.5e9 + 1e6, 2e10))
        per: list[float] = []
        for _ in range(3):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(cycles)
            start.record()
            for _ in range(n):
                launch()
            end.record()
            torch.cuda.synchronize()
            per.append(start.elapsed_time(end) * 1e-3 / n)
        res["queued_per_kernel_s"] = _median(per)
        # one kernel between two events, all queued behind a sleep: no host time in between
        one: list[tuple[Any, Any]] = []
        for _ in range(p.launch_event_reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(int(1e5))
            start.record()
            launch()
            end.record()
            one.append((start, end))
        torch.cuda.synchronize()
        res["min_kernel_s"] = _median([a.elapsed_time(b) * 1e-3 for a, b in one])
    except (KeyboardInterrupt, MemoryError):
        raise
    except Exception as exc:
        res["queued_error"] = _describe(exc)
    try:
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            launch()
        torch.cuda.current_stream().wait_stream(stream)
        with torch.cuda.graph(graph):
            for _ in range(p.graph_kernels):
                launch()
        t = _median(ctx.timer(graph.replay, 10, 2))
        res["graph_per_kernel_s"] = t / p.graph_kernels
    except (KeyboardInterrupt, MemoryError):
        raise
    except Exception as exc:
        res["graph_error"] = _describe(exc)
    res["method"] = (
        "empty Triton kernel: host wall time per launch over batches of back-to-back launches (synchronised "
        "at each end); queued = CUDA-event time of launches queued behind torch.cuda._sleep, per kernel "
        "(the GPU's pace, kernel end to next kernel end); shortest kernel = CUDA-event time around one launch "
        "queued behind a sleep (no host time between the events); "
        f"graph = replay of {p.graph_kernels} captured launches / {p.graph_kernels}"
    )
    return res


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{exc.__class__.__name__}: {text[0] if text else ''}"[:300]


def device_info(torch: Any, index: int | None = None) -> DeviceInfo:
    """What the driver reports about the current (or given) CUDA device."""
    import triton

    idx = torch.cuda.current_device() if index is None else index
    props = torch.cuda.get_device_properties(idx)
    clock_khz = getattr(props, "clock_rate", None)
    versions = {"torch": str(torch.__version__), "triton": str(triton.__version__), "cuda": str(torch.version.cuda)}
    return DeviceInfo(
        name=str(props.name),
        sm_count=int(props.multi_processor_count),
        l2_bytes=int(props.L2_cache_size),
        hbm_bytes=int(props.total_memory),
        smem_per_sm_bytes=int(getattr(props, "shared_memory_per_multiprocessor", 0) or 0) or None,
        capability=(int(props.major), int(props.minor)),
        regs_per_sm=int(getattr(props, "regs_per_multiprocessor", 0) or 65536),
        max_threads_per_sm=int(getattr(props, "max_threads_per_multi_processor", 0) or 2048),
        clock_hz=float(clock_khz) * 1e3 if clock_khz else None,
        vendor="AMD" if getattr(torch.version, "hip", None) else "NVIDIA",
        versions=versions,
    )


def require_triton() -> Any:
    try:
        import triton
    except ImportError:
        raise RuntimeFailure("this needs Triton (pip install 'memmodel[gpu]')") from None
    return triton


def make_context(*, quick: bool = False) -> Context:
    """Everything the steps need on the current CUDA device; :class:`RuntimeFailure` without torch,
    CUDA or Triton (one line saying what is needed)."""
    from .run import require_cuda

    torch = require_cuda()
    require_triton()
    from . import calibrate_kernels

    info = device_info(torch)
    return Context(torch, calibrate_kernels, info, make_plan(info, quick=quick), _cuda_timer(torch))


def _calibrate_backward() -> Any:
    from . import calibrate_backward

    return calibrate_backward


def _measure(key: str, ctx: Context, done: Mapping[str, Any]) -> dict[str, Any]:
    """Run step ``key`` of :data:`STEPS` (``done``: the steps measured before it)."""
    steps: dict[str, Callable[[], dict[str, Any]]] = {
        "hbm": lambda: measure_hbm(ctx),
        "l2": lambda: measure_l2(ctx),
        "l2_sweep": lambda: measure_l2_sweep(ctx, done.get("hbm", {}).get("read", {}).get("rate")),
        "l2_split": lambda: measure_l2_split(ctx),
        "smem": lambda: measure_smem(ctx),
        "matmul": lambda: measure_matmul(ctx),
        "exp": lambda: measure_exp(ctx),
        "latency": lambda: measure_latency(ctx),
        "launch": lambda: measure_launch(ctx),
        "mma_sync": lambda: calibrate_impl.measure_mma_sync(ctx),
        "kernels": lambda: calibrate_impl.measure_kernels(ctx),
        "sdpa": lambda: calibrate_impl.measure_sdpa(ctx),
        "backward": lambda: _calibrate_backward().measure_backward(ctx),
    }
    return steps[key]()


def run_calibration(
    *,
    quick: bool = False,
    on_step: Callable[[int, int, str], None] | None = None,
    context: Context | None = None,
) -> dict[str, Any]:
    """Run every step on the current CUDA device; a step that fails is recorded, the rest go on.

    ``on_step(done, total, description)`` is called before each step and once at the end.
    KeyboardInterrupt is not caught: the caller stops cleanly.
    """
    ctx = context if context is not None else make_context(quick=quick)
    info = ctx.info
    started = time.time()
    result: dict[str, Any] = {
        "schema": SCHEMA,
        "memmodel": __version__,
        "date": datetime.date.today().isoformat(),
        "quick": quick,
        "device": {
            "name": info.name,
            "vendor": info.vendor,
            "sm_count": info.sm_count,
            "l2_bytes": info.l2_bytes,
            "hbm_bytes": info.hbm_bytes,
            "smem_per_sm_bytes": info.smem_per_sm_bytes,
            "compute_capability": f"{info.capability[0]}.{info.capability[1]}",
            "clock_hz": info.clock_hz,
            **{f"{k}_version": v for k, v in info.versions.items()},
        },
        "measurements": {},
        "errors": {},
    }
    m, errors = result["measurements"], result["errors"]
    total = len(STEPS)
    for i, (key, description) in enumerate(STEPS):
        if on_step:
            on_step(i, total, description)
        t0 = time.time()
        try:
            m[key] = _measure(key, ctx, m)
        except (KeyboardInterrupt, MemoryError):
            raise
        except Exception as exc:  # record and go on with the other steps
            errors[key] = _describe(exc)
        try:  # the step's buffers died with its frame: hand their memory back
            ctx.free()
        except Exception:  # a dead CUDA context: the later steps will say so
            pass
        if key in m and isinstance(m[key], dict):
            m[key]["step_wall_s"] = round(time.time() - t0, 3)
    if on_step:
        on_step(total, total, "done")
    result["wall_s"] = round(time.time() - started, 3)
    return result


# ---------------------------------------------------------------------------------------
# From a result to a profile (pure)


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
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= scale:
            return f"{value / scale:.4g} {prefix}{unit}"
    return f"{value:.4g} {unit}"


def _bw(v: float) -> str:
    return _si(v, "B/s")


def _tb(v: float) -> str:
    return f"{v / 1e12:.2f} TB/s"


def _flops(v: float) -> str:
    return _si(v, "FLOP/s")


def _ns(v: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)):
        if v >= scale:
            return f"{v / scale:.4g} {unit}"
    return f"{v / 1e-12:.4g} ps"


def measured_figures(result: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """Profile field -> (value text, note) for every figure the result measured."""
    m = result.get("measurements", {})
    out: dict[str, tuple[str, str]] = {}
    hbm = m.get("hbm", {})
    named = {
        "Triton read": _num(hbm, "read", "rate"),
        "Triton write": _num(hbm, "write", "rate"),
        "Triton copy": _num(hbm, "copy", "rate"),
        "torch sum": _num(hbm, "read_torch", "rate"),
        "torch fill_": _num(hbm, "write_torch", "rate"),
        "torch copy_": _num(hbm, "copy_torch", "rate"),
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
    if lat := _num(m, "latency", "dram", "latency_s"):
        b = _num(m, "latency", "dram", "buffer_bytes") or 0
        out["memory.hbm.latency"] = (
            _ns(lat),
            f"pointer chase, one warp, random cycle over {b / 1e6:.0f} MB (4 x L2, L2 flushed); includes TLB "
            "misses and the loop's few instructions per load",
        )
    if bw := _num(m, "l2", "rate"):
        b = _num(m, "l2", "buffer_bytes") or 0
        out["memory.l2.bandwidth"] = (_bw(bw), f"all SMs re-reading {b / 1e6:.1f} MB (1/4 L2) with .cg loads")
    if lat := _num(m, "latency", "l2", "latency_s"):
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
            "smallest knee of the bandwidth-vs-size curves of buffers re-read by all SMs (the last size still 90 % "
            f"of the way up from the level at 2 x L2 to the plateau){clamp}: {name}, plateau "
            f"{_tb(_num(curve, 'plateau_bytes_per_s') or 0)}, {_tb(_num(curve, 'floor_bytes_per_s') or 0)} at "
            f"2 x L2; knees: {others}",
        )
    if per_sm := _num(m, "smem", "per_sm_bytes_per_s"):
        agg = _num(m, "smem", "rate") or 0
        out["memory.sram.bandwidth_per_sm"] = (
            _bw(per_sm),
            f"Gluon kernel reading shared memory (16 B per thread per load) on all SMs: {_tb(agg)} in all / sm_count",
        )
    mm = m.get("matmul", {})
    for dtype in MATMUL_DTYPES:
        if rate := _num(mm, dtype, "rate"):
            how = mm[dtype].get("method", "")
            out[f"compute.{dtype}"] = (_flops(rate), f"{mm[dtype].get('n', '?')}^3 matmul, {how}")
    if per := _num(m, "launch", "queued_per_kernel_s"):
        host = _num(m, "launch", "host_per_launch_s")
        graph = _num(m, "launch", "graph_per_kernel_s")
        out["launch_overhead"] = (
            _ns(per),
            "empty Triton kernels queued back to back (behind a sleeping kernel, so the host is not the limit): "
            "kernel end to next kernel end"
            + (f"; from Python the host needs {_ns(host)} per Triton launch" if host else "")
            + (f"; in a CUDA graph {_ns(graph)} per kernel" if graph else ""),
        )
    if rate := _num(m, "exp", "rate"):
        out["compute.exp"] = (_si(rate, "op/s"), "Triton tl.exp2 (MUFU.EX2) in registers, all SMs")
    peaks = {d: r for d in MATMUL_DTYPES if (r := _num(mm, d, "rate"))}
    out.update(calibrate_impl.kernel_figures(m, peaks))
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


def _parse_bytes(text: str) -> float:
    from ..units import UnitError, parse

    try:
        return parse(text, "bytes")
    except UnitError:
        return math.inf


def _slug(text: str) -> str:
    out = "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-")
    while "--" in out:
        out = out.replace("--", "-")
    return out or "gpu"


def profile_data(result: Mapping[str, Any], *, base: Any = None, name: str | None = None) -> dict[str, Any]:
    """The YAML mapping of a profile built from a calibration result.

    Measured figures cite the source ``measured``; what the driver reports cites ``device``;
    what neither gives is carried over from ``base`` (a :class:`memmodel.hardware.Profile`)
    with its own source. Raises :class:`RuntimeFailure` naming what is missing if a required
    figure has none of the three.
    """
    from ..hardware import _CURVES, _FIELDS
    from ..hardware import SCHEMA as PROFILE_SCHEMA

    device = result.get("device", {})
    dev_name = str(device.get("name") or "unknown GPU")
    date = str(result.get("date") or datetime.date.today().isoformat())
    version = str(result.get("memmodel") or __version__)
    figures: dict[str, dict[str, str]] = {}
    software = ", ".join(f"{k.removesuffix('_version')} {v}" for k, v in device.items() if k.endswith("_version") and v)
    sources: dict[str, dict[str, str]] = {
        "measured": {
            "title": f"measured on {dev_name}, {date}, memmodel {version}",
            "kind": "measured",
            "machine": dev_name
            + (f" ({device['sm_count']} SMs)" if device.get("sm_count") else "")
            + (f"; {software}" if software else ""),
            "date": date,
            "command": str(result.get("command") or "memmodel calibrate"),
        },
        "device": {
            "title": f"reported by the CUDA driver through torch.cuda.get_device_properties on {dev_name}",
            "kind": "device",
        },
    }
    for fpath, (text, note) in device_figures(result).items():
        figures[fpath] = {"value": text, "source": "device", "note": note}
    for fpath, (text, note) in measured_figures(result).items():
        figures[fpath] = {"value": text, "source": "measured", "note": note}
    knee = figures.get("memory.l2.effective_capacity")
    if knee is not None and base is not None and "memory.l2.effective_capacity" in base.provenance:
        # A bandwidth curve cannot see what FlashAttention's re-reads see: when every SM
        # reads every line, a line held in only one L2 partition is fetched again from HBM
        # at about the L2 rate, so the knee sits above the capacity those re-reads get. The
        # base's figure, measured with DRAM counters on such kernels, is kept.
        del figures["memory.l2.effective_capacity"]
        result_note = f"bandwidth knee measured by calibrate: {knee['value']} ({knee['note']})"
    else:
        result_note = ""
    if base is not None:
        for fpath, prov in base.provenance.items():
            if fpath in figures:
                continue
            entry: dict[str, Any] = {"value": _curve_value(base, fpath) if fpath in _CURVES else prov.text}
            if prov.source:
                sid = prov.source if prov.source not in ("measured", "device") else f"base-{prov.source}"
                src = base.sources.get(prov.source)
                if src is not None:
                    sources[sid] = {
                        "title": src.title,
                        **{
                            k: getattr(src, k) for k in ("url", "kind", "machine", "date", "command") if getattr(src, k)
                        },
                    }
                    entry["source"] = sid
            never = fpath in NOT_MEASURED
            why = "not measured by calibrate" if never else "not measured in this run"
            if fpath == "memory.l2.effective_capacity" and result_note:
                why = "kept over the " + result_note
            entry["note"] = f"carried over from profile {base.name} ({why})" + (f"; {prov.note}" if prov.note else "")
            figures[fpath] = entry
    figures = {f: e for f, e in figures.items() if f in _FIELDS}  # a base of an older schema
    eff, cap = figures.get("memory.l2.effective_capacity"), figures.get("memory.l2.capacity")
    if (
        eff
        and cap
        and eff.get("source") not in ("measured",)
        and _parse_bytes(eff["value"]) > _parse_bytes(cap["value"])
    ):
        del figures["memory.l2.effective_capacity"]  # the base's figure does not fit this GPU's L2
    missing = [f for f, (_, required) in _FIELDS.items() if required and f not in figures]
    if missing:
        errors = result.get("errors", {})
        why = f" (failed steps: {', '.join(f'{k}: {v}' for k, v in errors.items())})" if errors else ""
        raise RuntimeFailure(
            f"cannot write a complete profile: {', '.join(missing)} not measured{why}; "
            "give --base PROFILE (a bundled name or a YAML file) to carry them over"
        )
    arch = f"compute capability {device.get('compute_capability', '?')}"
    if base is not None and str(device.get("compute_capability", "")) in base.architecture:
        arch = base.architecture
    data: dict[str, Any] = {
        "schema": PROFILE_SCHEMA,
        "name": name or f"{_slug(dev_name.removeprefix('NVIDIA '))}-calibrated",
        "full_name": f"{dev_name} (calibrated {date})",
        "vendor": str(device.get("vendor") or "NVIDIA"),
        "architecture": arch,
    }
    capability = device.get("compute_capability") or (base.compute_capability if base is not None else None)
    if capability:
        data["compute_capability"] = str(capability)
    for top in _FIELDS:
        if "." not in top and top in figures:
            data[top] = figures[top]
    if "sm_count" in data and str(data["sm_count"]["value"]).isdigit():
        data["sm_count"] = {**data["sm_count"], "value": int(data["sm_count"]["value"])}
    for fpath in _FIELDS:  # schema order; sections nest by the dots in the field's path
        if fpath not in figures or "." not in fpath:
            continue
        *sections, leaf = fpath.split(".")
        node = data
        for section in sections:
            node = node.setdefault(section, {})
        node[leaf] = figures[fpath]
    used = {e["source"] for e in figures.values() if "source" in e}
    data["sources"] = {k: v for k, v in sources.items() if k in used}
    _add_efficiencies(data, result)
    return data


def _curve_value(base: Any, fpath: str) -> dict[int, Any]:
    """A base profile's curve as YAML values (the provenance keeps only its text)."""
    from ..hardware import _FIELDS
    from ..units import quantity

    kind = _FIELDS[fpath][0]
    return {x: quantity(y, kind) for x, y in base.figures[fpath]}


def _add_efficiencies(data: dict[str, Any], result: Mapping[str, Any]) -> None:
    """Measured implementation efficiencies, from the model on the profile built so far."""
    from ..hardware import parse_profile

    m = result.get("measurements", {})
    if (m.get("sdpa") or {}).get("points"):
        _put_figures(data, calibrate_impl.efficiency_figures(m, parse_profile(data, "<calibrated profile>")))
    if m.get("backward"):
        # the backward efficiency is the model's backward time over the measured one: made
        # with the forward figures and the backward's library kernel rates in place (the
        # forward pass is timed apart; the other backward kernels are timed by those rates)
        _put_figures(data, _calibrate_backward().backward_figures(m["backward"]))
        profile = parse_profile(data, "<calibrated profile>")
        _put_figures(data, _calibrate_backward().backward_figures(m["backward"], profile))
    sources = data.pop("sources")
    data["sources"] = sources  # sources stay last


def _put_figures(data: dict[str, Any], figures: Mapping[str, tuple[Any, str]]) -> None:
    for fpath, (value, note) in figures.items():
        *sections, leaf = fpath.split(".")
        node = data
        for section in sections:
            node = node.setdefault(section, {})
        node[leaf] = {"value": value, "source": "measured", "note": note}


def profile_yaml(result: Mapping[str, Any], *, base: Any = None, name: str | None = None) -> str:
    """The profile as YAML text, checked by the same loader ``--gpu FILE`` uses."""
    import yaml

    from ..hardware import parse_profile

    data = profile_data(result, base=base, name=name)
    device = result.get("device", {})
    header = (
        f"# Calibrated by `memmodel calibrate` on {device.get('name', '?')}, {result.get('date', '?')}, "
        f"memmodel {result.get('memmodel', __version__)}{' (--quick)' if result.get('quick') else ''}.\n"
        "# source measured: measured on this GPU; device: reported by the driver; others: carried over from --base.\n"
    )
    text = header + yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=100000, allow_unicode=True)
    try:
        parse_profile(yaml.safe_load(text), "<calibrated profile>")
    except MemmodelError as exc:  # a bug here, not the user's: say so
        raise RuntimeFailure(f"the calibrated profile does not validate ({exc})") from None
    return text


def match_bundled(device_name: str, profiles: Mapping[str, str]) -> str | None:
    """The one bundled profile (name -> full_name) whose full name starts with the device's name.

    ``NVIDIA H200`` matches ``NVIDIA H200 SXM 141GB``; dashes count as spaces; two or more
    matches, or none, give None.
    """

    def norm(text: str) -> str:
        return " ".join(text.lower().replace("-", " ").replace("_", " ").split())

    dev = norm(device_name)
    if not dev:
        return None
    hits = [n for n, full in profiles.items() if norm(full) == dev or norm(full).startswith(dev + " ")]
    return hits[0] if len(hits) == 1 else None
