"""Running on several GPUs: ``validate --gpus P`` (context-parallel attention checked against
single-GPU attention and timed) and ``calibrate --gpus P`` (NCCL curves), each in P processes.

:func:`launch` starts the workers with ``torch.multiprocessing.spawn`` (one per GPU, NCCL),
or runs this process as one of them when ``torchrun`` started it (``RANK``/``WORLD_SIZE`` in
the environment). Rank 0 writes the results to a JSON file the parent reads. Tests run the
same workers on the CPU (``device="cpu"``: gloo, the math backend).

A collective one rank skips hangs both: run these under ``timeout``.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from ..errors import RuntimeFailure
from .context_parallel import (
    LinkCounter,
    RingAttention,
    backend,
    hybrid_groups,
    hybrid_shard,
    ring_backward,
    ring_forward,
    safe_environment,
    shard,
    ulysses_backward,
    ulysses_forward,
)

NCCL_SCHEMA = "memmodel.calibrate-nccl/1"


def gpu_count() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def require_gpus(p: int) -> None:
    """One line and exit 1 when this machine has fewer than ``p`` GPUs."""
    have = gpu_count()
    if have < p:
        what = "no CUDA GPU" if have == 0 else f"{have} CUDA GPU" + ("s" if have > 1 else "")
        raise RuntimeFailure(f"--gpus {p} needs {p} CUDA GPUs on this machine; PyTorch sees {what}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch(target: str, world: int, config: dict[str, Any], *, partial: str | None = None) -> list[dict[str, Any]]:
    """Run worker ``target`` (a name in this module) on ``world`` ranks; rank 0's results.
    ``partial``: where rank 0 keeps its rows as they come (they survive a run cut short)."""
    safe_environment()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(partial) if partial else Path(tmp) / "results.json"
        config = {**config, "results": str(out)}
        if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # started by torchrun
            rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
            _entry(rank, target, world, {**config, "init": "env://"})
            if rank != 0:
                return []
        else:
            import torch.multiprocessing as mp

            config["init"] = f"tcp://127.0.0.1:{_free_port()}"
            try:
                mp.spawn(_entry, args=(target, world, config), nprocs=world, join=True)
            except Exception as exc:  # a worker's failure: its first line, not the spawn machinery's
                lines = [line for line in str(exc).splitlines() if line.strip()]
                raise RuntimeFailure(f"a worker failed: {lines[-1] if lines else type(exc).__name__}") from None
        if not out.exists():
            raise RuntimeFailure("the workers wrote no results")
        rows = list(json.loads(out.read_text()))
        if partial:
            out.unlink()
        return rows


def _entry(rank: int, target: str, world: int, config: dict[str, Any]) -> None:
    import warnings

    safe_environment()
    warnings.filterwarnings("ignore", category=FutureWarning)  # all_gather_into_tensor's renaming
    import torch
    import torch.distributed as dist

    device = config.get("device", "cuda")
    if device == "cuda":
        torch.cuda.set_device(rank % torch.cuda.device_count())
    dist.init_process_group(
        "nccl" if device == "cuda" else "gloo",
        init_method=config["init"],
        rank=rank,
        world_size=world,
        **({"device_id": torch.device("cuda", torch.cuda.current_device())} if device == "cuda" else {}),
    )
    try:
        globals()[target](torch, dist, rank, world, config)
    finally:
        dist.destroy_process_group()


def _save(config: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    path = Path(config["results"])
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(rows))
    tmp.replace(path)


# ---------------------------------------------------------------------------------------
# Timing


def _timer(torch: Any, dist: Any, device: str) -> Any:
    """Median seconds of ``fn`` over ``reps``, each rep the smallest over the ranks (a rank
    that starts early waits for the other at its first message: the later start is the step's)."""

    def time_it(fn: Any, reps: int, warmup: int = 2) -> float:
        for _ in range(warmup):
            fn()
        if device != "cuda":
            times = []
            for _ in range(reps):
                dist.barrier()
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
        else:
            from .run import queue_behind_sleep

            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            host_s = time.perf_counter() - t0
            torch.cuda.synchronize()
            times = []
            for _ in range(reps):
                dist.barrier()
                torch.cuda.synchronize()
                # the host issues the whole step behind a sleeping kernel: the GPUs' pace is timed
                queue_behind_sleep(torch, 1, host_s)
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                torch.cuda.synchronize()
                times.append(start.elapsed_time(end) * 1e-3)
        t = torch.tensor(times, dtype=torch.float64, device=device if device == "cuda" else "cpu")
        dist.all_reduce(t, op=dist.ReduceOp.MIN)
        return float(statistics.median(t.tolist()))

    return time_it


# ---------------------------------------------------------------------------------------
# validate --gpus P


def _inputs(torch: Any, case: Any, device: str, seed: int = 0) -> tuple[Any, Any, Any, Any]:
    """The whole sequence's Q, K, V, dO ([B, N, H, d]), the same on every rank."""
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[case.dtype]
    g = torch.Generator(device="cpu").manual_seed(seed)
    hk = case.kv_heads or case.heads

    def make(h: int) -> Any:
        return torch.randn(case.batch, case.n, h, case.d, generator=g).to(device=device, dtype=dtype)

    return make(case.heads), make(hk), make(hk), make(case.heads)


def _rel(torch: Any, a: Any, b: Any) -> float:
    a, b = a.float(), b.float()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def run_case(torch: Any, dist: Any, rank: int, world: int, case: Any, device: str, reps: int) -> dict[str, Any]:
    """Check one case against single-GPU attention, count its link bytes, time it."""
    attn = backend(torch, "flash" if device == "cuda" else "math")
    q, k, v, do = _inputs(torch, case, device)
    zig = case.scheme == "ring" and case.causal and world > 1
    if case.scheme == "hybrid":  # Ulysses inside groups of U ranks, the ring across the groups

        def cut(x: Any) -> Any:
            return hybrid_shard(torch, x, world, case.ulysses_degree, rank, case.causal)
    else:

        def cut(x: Any) -> Any:
            return shard(torch, x, world, rank, zig)

    local = [cut(x) for x in (q, k, v, do)]
    ql, kl, vl, dol = local
    counter = LinkCounter()
    kw: dict[str, Any] = {"causal": case.causal, "counter": counter}
    if case.scheme == "hybrid":
        u_group, r_group = hybrid_groups(dist, world, case.ulysses_degree)
        attn_timed = RingAttention(torch, dist, attn, r_group, None)
        attn = RingAttention(torch, dist, attn, r_group, counter)
        kw["group"] = u_group
    # the distributed pass, once, checked
    if case.scheme == "ring":
        out, lse = ring_forward(torch, dist, attn, ql, kl, vl, **kw)
        saved: Any = (out, lse)
    else:
        out, saved = ulysses_forward(torch, dist, attn, ql, kl, vl, **kw)
    grads = None
    if case.backward:
        if case.scheme == "ring":
            grads = ring_backward(torch, dist, attn, dol, ql, kl, vl, out, lse, **kw)
        else:
            grads = ulysses_backward(torch, dist, attn, dol, saved, **kw)
    sent = counter.sent_bytes
    # single-GPU attention on the whole sequence: the reference, and the time to beat
    single = backend(torch, "flash" if device == "cuda" else "math")
    ref_out, ref_lse = single.forward(q, k, v, case.causal, 1.0 / case.d**0.5)
    errors = {"out": _rel(torch, out, cut(ref_out))}
    if grads is not None:
        ref = single.backward(do, q, k, v, ref_out, ref_lse, case.causal, 1.0 / case.d**0.5)
        for name, got, want in zip(("dq", "dk", "dv"), grads, ref):
            errors[name] = _rel(torch, got, cut(want))
    err = torch.tensor([max(errors.values())], dtype=torch.float64, device=device)
    dist.all_reduce(err, op=dist.ReduceOp.MAX)
    time_it = _timer(torch, dist, device)
    scale = 1.0 / case.d**0.5
    single_f = time_it(lambda: single.forward(q, k, v, case.causal, scale), reps)
    single_b = (
        time_it(lambda: single.backward(do, q, k, v, ref_out, ref_lse, case.causal, scale), reps)
        if case.backward
        else 0.0
    )
    if case.scheme == "ring":
        fwd = time_it(lambda: ring_forward(torch, dist, attn, ql, kl, vl, causal=case.causal), reps)
        bwd = (
            time_it(lambda: ring_backward(torch, dist, attn, dol, ql, kl, vl, out, lse, causal=case.causal), reps)
            if case.backward
            else 0.0
        )
    else:
        timed_attn = attn_timed if case.scheme == "hybrid" else attn
        group = kw.get("group")
        fwd = time_it(
            lambda: ulysses_forward(torch, dist, timed_attn, ql, kl, vl, causal=case.causal, group=group), reps
        )
        bwd = (
            time_it(
                lambda: ulysses_backward(torch, dist, timed_attn, dol, saved, causal=case.causal, group=group), reps
            )
            if case.backward
            else 0.0
        )
    wall = fwd + bwd
    single = single_f + single_b
    return {
        "check": {"max_rel_error": float(err.item()), "rank0": errors, "ok": float(err.item()) < 2e-2},
        "measured": {
            "wall_s": wall,
            "forward_s": fwd,
            "backward_s": bwd if case.backward else None,
            "link_bytes": sent,
            "link_messages": counter.messages,
            "single_gpu_s": single,
            "speedup": single / wall if wall else None,
        },
    }


def validate_worker(torch: Any, dist: Any, rank: int, world: int, config: dict[str, Any]) -> None:
    from ..parallel import parse_cp_case

    device = config.get("device", "cuda")
    rows: list[dict[str, Any]] = []
    for spec in config["cases"]:
        case = parse_cp_case(spec)
        entry: dict[str, Any] = {"id": case.id, "spec": spec, "case": case.to_dict()}
        try:
            entry.update(run_case(torch, dist, rank, world, case, device, config.get("reps", 10)))
        except Exception as exc:  # one case's failure (memory) is recorded; the others still run
            entry["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
        if device == "cuda":
            torch.cuda.empty_cache()
        rows.append(entry)
        if rank == 0:
            _save(config, rows)


# ---------------------------------------------------------------------------------------
# calibrate --gpus P: NCCL curves


def nccl_sizes(quick: bool = False) -> list[int]:
    """Message sizes: 1 MiB to 1 GiB by powers of two (quick: 1 MiB to 64 MiB by powers of four)."""
    return [2**k for k in range(20, 27, 2)] if quick else [2**k for k in range(20, 31)]


def nccl_worker(torch: Any, dist: Any, rank: int, world: int, config: dict[str, Any]) -> None:
    device = config.get("device", "cuda")
    time_it = _timer(torch, dist, device)
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    curves: dict[str, list[list[float]]] = {"send_recv": [], "all_gather": [], "all_to_all": []}
    for size in config["sizes"]:
        elems = size // 2
        a = torch.empty(elems, dtype=torch.bfloat16, device=device).normal_()
        b = torch.empty_like(a)
        gathered = torch.empty(elems * world, dtype=torch.bfloat16, device=device)
        reps = 20 if size <= 2**26 else 8

        def send_recv(a: Any = a, b: Any = b, half: int = elems // 2) -> None:
            # as the ring sends a block: K and V, two buffers of half the bytes each way (NCCL
            # moves them one after the other: 16 MiB so takes 1.5 x one buffer's time on the H200)
            halves = [(a[:half], b[:half]), (a[half:], b[half:])]
            ops = [dist.P2POp(dist.isend, x, nxt) for x, _ in halves]
            ops += [dist.P2POp(dist.irecv, y, prv) for _, y in halves]
            for r in dist.batch_isend_irecv(ops):
                r.wait()

        t = time_it(send_recv, reps)
        curves["send_recv"].append([size, t, size])
        t = time_it(lambda a=a, g=gathered: dist.all_gather_into_tensor(g, a), reps)
        curves["all_gather"].append([size, t, size * (world - 1)])
        t = time_it(lambda a=a, b=b: dist.all_to_all_single(b, a), reps)
        curves["all_to_all"].append([size, t, size * (world - 1) // world])
        if device == "cuda":
            torch.cuda.empty_cache()
    overlap = _overlap(torch, dist, rank, world, time_it, device) if device == "cuda" else []
    if rank == 0:
        _save(config, [{"curves": curves, "overlap": overlap}])


#: the overlap references: FlashAttention-2 forwards (batch, heads, n, d; bf16) beside a
#: send/recv of OVERLAP_BYTES each way, one grid of many waves and one of a CTA per SM
OVERLAP_SHAPES = ((4, 8, 4096, 128), (1, 4, 4096, 128))
OVERLAP_BYTES = 16 * 2**20


def _overlap(torch: Any, dist: Any, rank: int, world: int, time_it: Any, device: str) -> list[dict[str, Any]]:
    """What an overlapped send/recv costs the attention kernel beside it: per reference shape,
    the kernel alone, the exchange alone, and the kernel with the exchange posted just before
    it (its time on the compute stream)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    nxt, prv = (rank + 1) % world, (rank - 1) % world
    a = torch.empty(OVERLAP_BYTES // 2, dtype=torch.bfloat16, device=device).normal_()
    b = torch.empty_like(a)
    rows = []
    for shape in OVERLAP_SHAPES:
        q, k, v = (torch.randn(*shape, dtype=torch.bfloat16, device=device) for _ in range(3))

        def attend(q: Any = q, k: Any = k, v: Any = v) -> Any:
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v)

        def post() -> list[Any]:
            return dist.batch_isend_irecv([dist.P2POp(dist.isend, a, nxt), dist.P2POp(dist.irecv, b, prv)])

        def exchange() -> None:
            for r in post():
                r.wait()

        def beside() -> None:
            reqs = post()  # NCCL's stream, behind the same queued sleep
            attend()  # the compute stream: the events around the call time this kernel
            for r in reqs:
                r.wait()

        rows.append(
            {
                "shape": list(shape),
                "bytes_each_way": OVERLAP_BYTES,
                "kernel_s": time_it(attend, 20),
                "exchange_s": time_it(exchange, 20),
                "kernel_beside_exchange_s": time_it(beside, 20),
            }
        )
        del q, k, v
        torch.cuda.empty_cache()
    return rows


def calibrate_nccl(world: int, *, quick: bool = False, device: str = "cuda") -> dict[str, Any]:
    """The NCCL curves of ``world`` GPUs: per collective, (bytes, seconds, bytes sent) rows."""
    import datetime

    import torch

    rows = launch("nccl_worker", world, {"sizes": nccl_sizes(quick), "device": device})
    info: dict[str, Any] = {"gpus": world, "torch_version": torch.__version__}
    if device == "cuda":
        info["name"] = torch.cuda.get_device_name(0)
        try:
            info["nccl_version"] = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception:  # pragma: no cover - torch without NCCL bindings
            pass
    return {
        "schema": NCCL_SCHEMA,
        "date": datetime.date.today().isoformat(),
        "device": info,
        "environment": {
            k: os.environ.get(k)
            for k in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")
        },
        "curves": rows[0]["curves"],
        "overlap": rows[0].get("overlap", []),
    }
