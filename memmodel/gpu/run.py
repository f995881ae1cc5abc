"""Run validation cases on a CUDA GPU: correctness check, CUDA-event timing, ncu markers.

Needs torch (and triton for the marker kernels and our own tiled kernel). Imported only by
the commands that run on a GPU.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ..cases import Case
from ..errors import RuntimeFailure

TOLERANCE = {"fp32": 2e-3, "tf32": 5e-3, "fp16": 5e-3, "bf16": 2e-2, "fp8": 6e-2}


def queue_behind_sleep(torch: Any, calls: int, host_s: float) -> bool:
    """Start a sleeping kernel long enough for the host to issue ``calls`` calls of ``host_s``
    seconds each behind it (cycles counted at up to 2.5 GHz, at most 20 G): the GPU then runs
    them back to back and CUDA events time the GPU, not the host's dispatch. False where this
    torch has no ``torch.cuda._sleep``."""
    if not hasattr(torch.cuda, "_sleep"):
        return False
    torch.cuda._sleep(int(min(2 * calls * host_s * 2.5e9 + 1e6, 2e10)))
    return True


def require_cuda() -> Any:
    try:
        import torch
    except ImportError:
        raise RuntimeFailure("this needs PyTorch with CUDA: pip install 'memmodel[gpu]'") from None
    if not torch.cuda.is_available():
        raise RuntimeFailure("no CUDA GPU is visible to PyTorch (torch.cuda.is_available() is False)")
    return torch


def _torch_dtype(torch: Any, name: str) -> Any:
    return {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[name]


def make_inputs(case: Case, seed: int = 0) -> tuple[Any, Any, Any]:
    torch = require_cuda()
    g = torch.Generator(device="cuda").manual_seed(seed)
    dt = _torch_dtype(torch, case.dtype)
    q = torch.randn(case.batch, case.heads, case.n, case.d, device="cuda", dtype=dt, generator=g)
    k = torch.randn(case.batch, case.kvh, case.nkv, case.d, device="cuda", dtype=dt, generator=g)
    v = torch.randn(case.batch, case.kvh, case.nkv, case.d, device="cuda", dtype=dt, generator=g)
    return q, k, v


# ---------------------------------------------------------------------------------------
# Implementations: each returns a list of (kernel name, callable) steps so that standard
# attention can be timed kernel by kernel; tiled implementations are one step.


def standard_steps(case: Case, q: Any, k: Any, v: Any) -> list[tuple[str, Callable[[], Any]]]:
    """Algorithm 0 in eager PyTorch: S = QKᵀ, P = softmax(S), O = PV, S and P in HBM.

    The 1/√d scale is applied to Q before (not timed). GQA: the query heads of a group are
    stacked so each K/V head is multiplied once ([B, H_kv, G·N, d] @ [B, H_kv, d, N_kv]).
    Causal: an in-place masked_fill of S between qk and softmax (a fourth kernel).
    """
    torch = require_cuda()
    g = case.heads // case.kvh
    qs = (q * (1.0 / math.sqrt(case.d))).reshape(case.batch, case.kvh, g * case.n, case.d)
    state: dict[str, Any] = {}
    steps: list[tuple[str, Callable[[], Any]]] = []

    def qk() -> Any:
        state["s"] = torch.matmul(qs, k.transpose(-1, -2))
        return state["s"]

    steps.append(("qk", qk))
    if case.causal:
        mask = torch.ones(case.n, case.nkv, device="cuda", dtype=torch.bool).triu_(1)

        def apply_mask() -> Any:
            s = state["s"].view(case.batch, case.kvh, g, case.n, case.nkv)
            return s.masked_fill_(mask, float("-inf"))

        steps.append(("mask", apply_mask))

    def softmax() -> Any:
        state["p"] = torch.softmax(state["s"], dim=-1)
        return state["p"]

    def pv() -> Any:
        state["o"] = torch.matmul(state["p"], v).reshape(case.batch, case.heads, case.n, case.d)
        return state["o"]

    steps += [("softmax", softmax), ("pv", pv)]
    return steps


def sdpa_steps(case: Case, q: Any, k: Any, v: Any) -> list[tuple[str, Callable[[], Any]]]:
    torch = require_cuda()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = {
        "sdpa-flash": SDPBackend.FLASH_ATTENTION,
        "sdpa-cudnn": SDPBackend.CUDNN_ATTENTION,
        "sdpa-efficient": SDPBackend.EFFICIENT_ATTENTION,
    }[case.impl]
    gqa = case.kvh != case.heads

    def run() -> Any:
        with sdpa_kernel([backend]):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=case.causal, enable_gqa=gqa)

    return [("attention", run)]


def triton_steps(case: Case, q: Any, k: Any, v: Any) -> list[tuple[str, Callable[[], Any]]]:
    from .triton_fa import attention

    def run() -> Any:
        return attention(q, k, v, causal=case.causal, block_q=case.block_q, block_kv=case.block_kv)

    return [("attention", run)]


def steps_for(case: Case, q: Any, k: Any, v: Any) -> list[tuple[str, Callable[[], Any]]]:
    if case.impl == "standard":
        return standard_steps(case, q, k, v)
    if case.impl == "triton":
        return triton_steps(case, q, k, v)
    return sdpa_steps(case, q, k, v)


def run_steps(steps: list[tuple[str, Callable[[], Any]]]) -> Any:
    out = None
    for _, fn in steps:
        out = fn()
    return out


# ---------------------------------------------------------------------------------------
# Correctness


def reference_rows(case: Case, q: Any, k: Any, v: Any, rows: list[int]) -> Any:
    """float32 attention of batch 0, head 0 for the given query rows."""
    torch = require_cuda()
    qi = q[0, 0, rows].float()
    kk, vv = k[0, 0].float(), v[0, 0].float()
    s = (qi @ kk.T) / math.sqrt(case.d)
    if case.causal:
        cols = torch.arange(case.nkv, device="cuda")
        s = s.masked_fill(cols[None, :] > torch.tensor(rows, device="cuda")[:, None], float("-inf"))
    return torch.softmax(s, dim=-1) @ vv


def check(case: Case, out: Any, q: Any, k: Any, v: Any) -> float:
    """Relative L2 error of rows of the output against float32; raises if over tolerance."""
    torch = require_cuda()
    if out is None or tuple(out.shape) != (case.batch, case.heads, case.n, case.d):
        raise RuntimeFailure(f"{case.id}: output shape {None if out is None else tuple(out.shape)} is wrong")
    rows = sorted(set(list(range(min(64, case.n))) + list(range(max(0, case.n - 64), case.n))))
    ref = reference_rows(case, q, k, v, rows)
    got = out[0, 0, rows].float()
    if not torch.isfinite(got).all():
        raise RuntimeFailure(f"{case.id}: output has NaN or inf")
    err = float((got - ref).norm() / ref.norm())
    if err > TOLERANCE[case.dtype]:
        raise RuntimeFailure(
            f"{case.id}: relative error {err:.2e} over the {case.dtype} tolerance {TOLERANCE[case.dtype]:.0e}"
        )
    return err


# ---------------------------------------------------------------------------------------
# Timing


def time_case(case: Case, *, reps: int = 20, warmup: int = 3) -> dict[str, Any]:
    """Median CUDA-event time of each step and of the whole, after a correctness check."""
    torch = require_cuda()
    q, k, v = make_inputs(case)
    steps = steps_for(case, q, k, v)
    out = run_steps(steps)
    err = check(case, out, q, k, v)
    # poison and re-run: every element must be written again
    if isinstance(out, torch.Tensor):
        out.fill_(float("nan"))
    out = run_steps(steps)
    check(case, out, q, k, v)
    for _ in range(warmup):
        run_steps(steps)
    torch.cuda.synchronize()
    # the host's time to issue one repetition (PyTorch's dispatch of SDPA alone is tens of µs)
    t0 = time.perf_counter()
    for _ in range(warmup):
        run_steps(steps)
    host_s = (time.perf_counter() - t0) / max(warmup, 1)
    torch.cuda.synchronize()
    # Events are recorded around every step of every repetition with no host sync in
    # between, all queued behind a sleeping kernel long enough for the host to issue every
    # repetition first: the GPU then runs them back to back and the events measure the GPU's
    # time, not the host's (a kernel shorter than its launch would otherwise wait for it).
    events = [[torch.cuda.Event(enable_timing=True) for _ in range(len(steps) + 1)] for _ in range(reps)]
    queued = queue_behind_sleep(torch, reps, host_s)
    for rep in range(reps):
        events[rep][0].record()
        for i, (_, fn) in enumerate(steps):
            fn()
            events[rep][i + 1].record()
    torch.cuda.synchronize()
    per_step: dict[str, list[float]] = {name: [] for name, _ in steps}
    totals: list[float] = []
    for rep in range(reps):
        for i, (name, _) in enumerate(steps):
            per_step[name].append(events[rep][i].elapsed_time(events[rep][i + 1]) * 1e-3)
        totals.append(events[rep][0].elapsed_time(events[rep][-1]) * 1e-3)
    del q, k, v, out
    torch.cuda.empty_cache()
    return {
        "case": case.to_dict(),
        "rel_error": err,
        "time_s": statistics.median(totals),
        "kernels": {name: statistics.median(t) for name, t in per_step.items()},
        "reps": reps,
        "host_s": host_s,
        "queued": queued,
    }


# ---------------------------------------------------------------------------------------
# Markers for ncu


_MARKERS: dict[str, Any] = {}


def _marker(name: str) -> Callable[[], None]:
    if name not in _MARKERS:
        torch = require_cuda()
        from . import markers

        buf = torch.zeros(1, device="cuda", dtype=torch.int32)
        kernel = markers.memmodel_begin if name == "begin" else markers.memmodel_end

        def launch() -> None:
            kernel[(1,)](buf)

        _MARKERS[name] = launch
    return _MARKERS[name]


def profile_pass(case: Case) -> None:
    """One run of the case's kernels between begin/end marker kernels (for ncu)."""
    torch = require_cuda()
    q, k, v = make_inputs(case)
    steps = steps_for(case, q, k, v)
    if case.impl == "triton":
        run_steps(steps)  # compile / autotune outside the markers
    torch.cuda.synchronize()
    _marker("begin")()
    run_steps(steps)
    _marker("end")()
    torch.cuda.synchronize()
    del q, k, v, steps
    torch.cuda.empty_cache()


def run_cases(cases: Iterable[Case], mode: str, out_path: Path) -> None:
    """Entry used on the GPU machine: ``mode`` is ``time`` or ``ncu``; one JSON line per case."""
    torch = require_cuda()
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with out_path.open("a", encoding="utf-8") as out:
        for case in cases:
            t0 = time.time()
            try:
                if mode == "ncu":
                    profile_pass(case)
                    record: dict[str, Any] = {"case": case.to_dict(), "status": "ok"}
                else:
                    record = {**time_case(case), "status": "ok"}
            except torch.cuda.OutOfMemoryError as exc:
                torch.cuda.empty_cache()
                record = {
                    "case": case.to_dict(),
                    "status": "skipped",
                    "reason": f"out of GPU memory: {exc}".split("\n")[0],
                }
                if mode == "ncu":
                    _marker("begin")()
                    _marker("end")()
            except Exception as exc:  # record and go on with the rest
                torch.cuda.empty_cache()
                record = {
                    "case": case.to_dict(),
                    "status": "failed",
                    "reason": f"{exc.__class__.__name__}: {exc}"[:500],
                }
                if mode == "ncu":
                    _marker("begin")()
                    _marker("end")()
            record["wall_s"] = round(time.time() - t0, 3)
            out.write(json.dumps(record) + "\n")
            out.flush()
            print(
                json.dumps({k: record.get(k) for k in ("status", "time_s", "rel_error", "reason")} | {"id": case.id}),
                file=sys.stderr,
                flush=True,
            )


def main(argv: list[str] | None = None) -> int:
    """``python -m memmodel.gpu.run MODE OUT.jsonl CASE...`` (CASE as in parse_case)."""
    from ..cases import parse_case

    args = list(sys.argv[1:] if argv is None else argv)
    mode, out = args[0], Path(args[1])
    cases = [parse_case(a) for a in args[2:]]
    if os.environ.get("MEMMODEL_CASES_FILE"):
        cases += [parse_case(line) for line in Path(os.environ["MEMMODEL_CASES_FILE"]).read_text().split() if line]
    run_cases(cases, mode, out)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
