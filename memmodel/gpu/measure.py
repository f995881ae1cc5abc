"""What every step of ``memmodel calibrate`` shares on the GPU: the device context, the
CUDA-event timer and the rate of a timed call. torch and Triton are imported by the caller
(:func:`memmodel.gpu.calibrate.make_context`), not here."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..calibration.plan import DeviceInfo, Plan, resident_programs

Timer = Callable[[Callable[[], Any], int, int], list[float]]


def cuda_timer(torch: Any) -> Timer:
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
    """What a measurement on the GPU needs: torch, the kernels, the device, its plan and timer."""

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

    def rate(self, amount: float, fn: Callable[[], Any], reps: int = 20) -> dict[str, Any]:
        """:func:`rate` of ``amount`` over ``fn``'s times (``reps`` timed calls after the plan's warm-up)."""
        return rate(amount, self.timer(fn, reps, self.plan.warmup))

    def kernel_times(self, fn: Callable[[], Any], sessions: int = 5) -> list[dict[str, Any]]:
        """Each kernel one call of ``fn`` launches, in launch order, with its median CUPTI
        duration over ``sessions`` profiled calls (``{"name", "time_s"}``): what a step's
        CUDA-event time cannot say, how it divides between its kernels."""
        from torch.profiler import ProfilerActivity

        from .cupti import kernel_profile
        from .run import kernel_events, median_kernels

        cuda = self.device == "cuda"
        runs = []
        for _ in range(sessions):
            self.sync()
            with kernel_profile(ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU) as prof:
                fn()
                self.sync()
            runs.append(kernel_events(prof, "CUDA" if cuda else "CPU"))
        return median_kernels(runs)


def median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs))


def rate(amount: float, times: Sequence[float]) -> dict[str, Any]:
    t = median(times)
    return {"time_s": t, "rate": amount / t, "reps": len(times), "spread": (max(times) - min(times)) / t}


def persistent_grid(ctx: Context, kernel: Any, args: tuple[Any, ...], num_warps: int, **meta: Any) -> int:
    """Compile (and run once, one program per SM), then the grid that fills every SM once."""
    compiled = kernel[(ctx.info.sm_count,)](*args, num_warps=num_warps, **meta)
    ctx.sync()
    return ctx.grid_for(compiled, num_warps)


def describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{exc.__class__.__name__}: {text[0] if text else ''}"[:300]


def guard(fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    try:
        return fn()
    except (KeyboardInterrupt, MemoryError):
        raise
    except Exception as exc:  # recorded; the other measurements go on
        return {"error": str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__}
