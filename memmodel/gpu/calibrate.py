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
* L2 reuse by access pattern (:mod:`memmodel.gpu.l2_reuse`): attention-shaped re-reads of K/V
  tiles (waves, heads, half the SMs, causal, GQA, tile sizes) under Nsight Compute; the share
  of re-reads that miss against the footprint live across them.
* Launch overhead: host time per launch of an empty Triton kernel (and of a tiny torch op),
  the shortest kernel time through CUDA events, and per kernel in a replayed CUDA graph.
* The host's time a call (:mod:`memmodel.gpu.calibrate_host`): views, ATen ops, GEMMs, each
  attention implementation's call and training step, autograd's nodes, CUDA graph replays, and
  the same calls as a user's timer sees them (``--timing call``'s figures).

The step table (:data:`STEPS`) names each step and the function that measures it. Nothing
here imports torch or triton at module import; what does not need a GPU (the plan, the knee,
the figures and the profile writer) is in :mod:`memmodel.calibration`.
"""

from __future__ import annotations

import datetime
import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from .. import __version__
from ..calibration.plan import BLOCK_BYTES, MATMUL_DTYPES, SCHEMA, DeviceInfo, knee_summary, make_plan
from ..errors import RuntimeFailure
from ..frozen import frozen
from . import calibrate_aten, calibrate_backward, calibrate_host, calibrate_impl, l2_reuse
from .measure import Context, cuda_timer, describe, median, persistent_grid, rate

#: Block shift per pass of the L2 kernels: a large prime sends each block to a program far
#: away (another SM, either L2 partition) in each pass; 7 to a near neighbour.
FAR, NEAR = 7919, 7


def measure_hbm(ctx: Context) -> dict[str, Any]:
    torch, k, p = ctx.torch, ctx.kernels, ctx.plan
    n = p.stream_bytes // 4
    block, warps = 4096, 8
    x = torch.rand(n, device=ctx.device, dtype=torch.float32, generator=ctx.generator(1))
    y = torch.empty_like(x)
    out = torch.empty(ctx.info.sm_count * 64, device=ctx.device, dtype=torch.float32)
    res: dict[str, Any] = {"buffer_bytes": n * 4}

    grid = persistent_grid(ctx, k.read_kernel, (x, out, n), warps, BLOCK=block)
    r = rate(
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

    grid = persistent_grid(ctx, k.write_kernel, (y, n, 1.5), warps, BLOCK=block)
    r = rate(
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

    grid = persistent_grid(ctx, k.copy_kernel, (x, y, n), warps, BLOCK=block)
    r = rate(
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
        **rate(n * 4, ctx.timer(lambda: torch.sum(x), p.stream_reps, p.warmup)),
        "bytes": n * 4,
        "method": "torch.sum",
    }
    res["write_torch"] = {
        **rate(n * 4, ctx.timer(lambda: y.fill_(2.5), p.stream_reps, p.warmup)),
        "bytes": n * 4,
        "method": "Tensor.fill_",
    }
    res["copy_torch"] = {
        **rate(2 * n * 4, ctx.timer(lambda: y.copy_(x), p.stream_reps, p.warmup)),
        "bytes": 2 * n * 4,
        "method": "Tensor.copy_ (bytes read + written)",
    }
    return res


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
    grid = persistent_grid(ctx, k.cached_read_kernel, (buf, out, n_blocks, 2, shift), warps, BLOCK=block, CG=cg)
    amount = passes * n_blocks * BLOCK_BYTES

    def launch() -> Any:
        return k.cached_read_kernel[(grid,)](buf, out, n_blocks, passes, shift, BLOCK=block, CG=cg, num_warps=warps)

    times = ctx.timer(launch, reps, 1)
    return {
        **rate(amount, times),
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


def measure_l2_sweep(ctx: Context, hbm: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The L2 capacity curves; ``hbm``: the HBM step's measurements (its read rate is kept
    beside the knee)."""
    torch, p = ctx.torch, ctx.plan
    hbm_read = (hbm or {}).get("read", {}).get("rate")
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
            t = median(times)
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
    r = rate(amount, times)
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
    r = rate(flop, ctx.timer(fn, p.matmul_reps, p.warmup))
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
                res[dtype] = {"error": describe(exc)}
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
    r = rate(ops, times)
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
    t = median(_chase(ctx, buf, state, steps, p.chase_reps))
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
        t = median(_chase(ctx, buf, state, steps, p.chase_reps))
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
        return median(per)

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
        res["queued_per_kernel_s"] = median(per)
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
        res["min_kernel_s"] = median([a.elapsed_time(b) * 1e-3 for a, b in one])
    except (KeyboardInterrupt, MemoryError):
        raise
    except Exception as exc:
        res["queued_error"] = describe(exc)
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
        t = median(ctx.timer(graph.replay, 10, 2))
        res["graph_per_kernel_s"] = t / p.graph_kernels
    except (KeyboardInterrupt, MemoryError):
        raise
    except Exception as exc:
        res["graph_error"] = describe(exc)
    res["method"] = (
        "empty Triton kernel: host wall time per launch over batches of back-to-back launches (synchronised "
        "at each end); queued = CUDA-event time of launches queued behind torch.cuda._sleep, per kernel "
        "(the GPU's pace, kernel end to next kernel end); shortest kernel = CUDA-event time around one launch "
        "queued behind a sleep (no host time between the events); "
        f"graph = replay of {p.graph_kernels} captured launches / {p.graph_kernels}"
    )
    return res


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
    return Context(torch, calibrate_kernels, info, make_plan(info, quick=quick), cuda_timer(torch))


@frozen
class Step:
    """One measuring step: its key in the result's ``measurements``, what the progress bar
    says, the function that measures it, and the earlier steps whose measurements it takes
    (as keyword arguments of the same names)."""

    key: str
    description: str
    measure: Callable[..., dict[str, Any]]
    uses: tuple[str, ...] = ()


#: Every measuring step, in order; the progress bar counts them.
STEPS: tuple[Step, ...] = (
    Step("hbm", "HBM read, write, copy", measure_hbm),
    Step("l2", "L2 bandwidth", measure_l2),
    Step("l2_sweep", "L2 effective capacity", measure_l2_sweep, uses=("hbm",)),
    Step("l2_split", "L2 partitions (SM groups)", measure_l2_split),
    Step("l2_reuse", "L2 reuse by access pattern (Nsight Compute)", l2_reuse.measure_l2_reuse),
    Step("smem", "shared-memory bandwidth", measure_smem),
    Step("matmul", "matrix products", measure_matmul),
    Step("exp", "exp throughput", measure_exp),
    Step("latency", "L2 and DRAM latency", measure_latency),
    Step("launch", "launch overhead", measure_launch),
    Step("mma_sync", "mma.sync tensor-core peak", calibrate_impl.measure_mma_sync),
    Step("kernels", "library kernels: softmax, masked_fill, cuBLAS", calibrate_impl.measure_kernels),
    Step(
        "aten_paths", "ATen's elementwise paths: casts, gathers, cat, fp32 softmax", calibrate_aten.measure_aten_paths
    ),
    Step("sdpa", "attention implementations, reference shapes", calibrate_impl.measure_sdpa),
    Step(
        "backward",
        "training-step kernels: softmax backward, dropout, reductions, SDPA backward with and without dropout",
        calibrate_backward.measure_backward,
    ),
    Step(
        "sustained",
        "clocks under the power limit (each implementation busy for a second)",
        calibrate_impl.measure_sustained,
    ),
    Step(
        "host",
        "the host's time a call: views, ops, GEMMs, each attention implementation, autograd, CUDA graphs",
        calibrate_host.measure_host,
    ),
)


def run_calibration(
    *,
    quick: bool = False,
    on_step: Callable[[int, int, str], None] | None = None,
    context: Context | None = None,
    steps: tuple[Step, ...] | None = None,
) -> dict[str, Any]:
    """Run every step (of ``steps``; default :data:`STEPS`) on the current CUDA device; a step
    that fails is recorded, the rest go on.

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
    steps = STEPS if steps is None else steps
    total = len(steps)
    for i, step in enumerate(steps):
        key = step.key
        if on_step:
            on_step(i, total, step.description)
        t0 = time.time()
        try:
            m[key] = step.measure(ctx, **{used: m.get(used) for used in step.uses})
        except (KeyboardInterrupt, MemoryError):
            raise
        except Exception as exc:  # record and go on with the other steps
            errors[key] = describe(exc)
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


#: implementations ``calibrate --impl`` measures on their own (kernels outside PyTorch), and
#: the steps each runs, keyed as a full calibration keys them
IMPL_STEPS: dict[str, tuple[Step, ...]] = {
    "fa3": (
        Step("sdpa", "FlashAttention-3 forward, reference shapes", calibrate_impl.measure_fa3),
        Step(
            "backward",
            "FlashAttention-3 forward and backward, reference shapes",
            lambda ctx: {"sdpa_backward": calibrate_backward.measure_fa3_backward(ctx)},
        ),
    ),
}


#: the packages whose version an implementation's own calibration records (beside torch's)
IMPL_PACKAGES: dict[str, tuple[str, ...]] = {"fa3": ("flash-attn-4", "nvidia-cutlass-dsl")}


def _package_versions(names: tuple[str, ...]) -> dict[str, str]:
    """``{"<name>_version": version}`` of each installed distribution (underscores for dashes)."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in names:
        try:
            out[f"{name.replace('-', '_')}_version"] = version(name)
        except PackageNotFoundError:
            continue
    return out


def run_impl_calibration(
    impl: str,
    *,
    quick: bool = False,
    on_step: Callable[[int, int, str], None] | None = None,
    context: Context | None = None,
) -> dict[str, Any]:
    """One implementation's reference shapes alone (:data:`IMPL_STEPS`): a calibration result
    whose ``sdpa`` and ``backward`` measurements hold only its points, with ``impl`` naming it,
    to merge into a full calibration's (:func:`memmodel.calibration.merge.merge_impl`)."""
    from .fa3 import missing

    if impl == "fa3" and (why := missing()) is not None:
        raise RuntimeFailure(why)
    steps = IMPL_STEPS[impl]
    ctx = context if context is not None else make_context(quick=quick)
    started = time.time()
    result = run_calibration(quick=quick, context=ctx, steps=steps, on_step=on_step)
    result["impl"] = impl
    result["device"].update(_package_versions(IMPL_PACKAGES.get(impl, ())))
    result["wall_s"] = round(time.time() - started, 3)
    return result
