"""What the host costs a call (``memmodel calibrate``'s ``host`` step; ``validation/probes/host_probe.py``
runs it alone): the rows :mod:`memmodel.calibration.host` reads the profile's ``host.*`` and
``implementations.<name>.call_host``, ``split_call_host`` and ``backward_call_host`` figures off.

Rows, one dict per measurement, by ``section``:

* ``host``: the host's seconds to issue one call of an op, the GPU held busy by a sleeping kernel
  ahead of them so that the host never waits for it (unless the launch queue fills): ``calls``
  calls timed with ``perf_counter``, the median of 7 such loops. Views (no kernel), elementwise
  ops, reductions, copies and fills (one kernel), GEMMs (cuBLAS).
* ``sdpa``: ``scaled_dot_product_attention`` through each backend (chosen once, outside the loop:
  a user's code does not choose it per call), as ``--impl auto`` picks it, memmodel's Triton
  kernel and FlexAttention compiled, at a short prefill and a decode, forward and training step:
  host seconds, ``call_s`` (one synchronised call between two CUDA events, median of 50),
  ``queued_s`` (200 calls back to back between two events, per call), ``kernel_s`` (the same
  behind a sleeping kernel: the GPU's own time) and the profiler's kernels and memsets.
* ``autograd``: backward of a chain of ``n`` elementwise ops and of ``n`` matmuls.
* ``graph``: CUDA graphs of ``n`` tiny kernels replayed one at a time under a user's timer.
* ``call``: the plain ops again as users time them (``call_s``, ``queued_s``, ``kernel_s``).
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

DEV = "cuda"
CLOCK_HZ = 2.0e9  # the sleeping kernel's cycles are counted at the GPU's clock (an upper bound here)


def host_seconds(fn, calls: int = 100, loops: int = 7) -> float:
    """Median over ``loops`` of the host's seconds per call of ``fn``, issued behind a sleeping
    kernel long enough that the GPU never drains the queue (so the host never waits)."""
    import torch

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(5):
        fn()
    rough = (time.perf_counter() - t0) / 5
    torch.cuda.synchronize()
    out = []
    for _ in range(loops):
        torch.cuda._sleep(int(min(3 * calls * rough * CLOCK_HZ + 2e6, 2e10)))
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        out.append((time.perf_counter() - t0) / calls)
        torch.cuda.synchronize()
    return statistics.median(out)


def call_seconds(fn, reps: int = 50) -> float:
    """A user's timer: one synchronised call between two CUDA events, median of ``reps``."""
    import torch

    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e-3)
    return statistics.median(times)


def queued_seconds(fn, calls: int = 200, behind_sleep: bool = False) -> float:
    """Per call, ``calls`` calls back to back between two CUDA events; ``behind_sleep``: queued
    behind a sleeping kernel first (the GPU's own time, the host out of the way)."""
    import torch

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    if behind_sleep:
        rough = host_seconds(fn, calls=20, loops=1)
        torch.cuda._sleep(int(min(3 * calls * rough * CLOCK_HZ + 2e6, 2e10)))
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(calls):
        fn()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) * 1e-3 / calls


def kernels_of(fn) -> list[dict]:
    """The profiler's kernels, memsets and memcpys of one call, in start order (``name``, ``us``)."""
    import torch
    from torch.profiler import ProfilerActivity

    from .cupti import kernel_profile
    from .run import kernel_events

    fn()
    torch.cuda.synchronize()
    with kernel_profile(ProfilerActivity.CUDA) as prof:
        fn()
        torch.cuda.synchronize()
    return [{"name": k["name"][:160], "us": k["time_s"] * 1e6} for k in kernel_events(prof)]


# ---------------------------------------------------------------------------------------------
# the ops


def timed(fn, calls: int = 100) -> dict:
    """A call's host time, a user's timer around it, its queued and kernel paces and its kernels:
    the keys of an ``sdpa`` row."""
    return {
        "host_s": host_seconds(fn, calls=calls),
        "call_s": call_seconds(fn),
        "queued_s": queued_seconds(fn),
        "kernel_s": queued_seconds(fn, behind_sleep=True),
        "kernels": kernels_of(fn),
    }


def _t(*shape, dtype=None, grad=False):
    import torch

    return torch.randn(*shape, device=DEV, dtype=dtype or torch.bfloat16, requires_grad=grad)


def host_ops() -> list[tuple[str, str, object]]:
    """(class, name, fn): every op a call of which is timed on the host."""
    import torch
    import torch.nn.functional as F

    x = _t(1, 8, 128, 64)
    y = _t(1, 8, 128, 64)
    s = _t(1, 8, 128, 128)
    m = torch.ones(128, 128, device=DEV, dtype=torch.bool).triu(1)
    a3, b3 = _t(8, 128, 64), _t(8, 64, 128)
    w = _t(256, 512)
    xl = _t(4, 512)
    xt = x.transpose(1, 2)
    return [
        ("view", "transpose", lambda: x.transpose(1, 2)),
        ("view", "view", lambda: x.view(8, 128, 64)),
        ("view", "reshape_noop", lambda: x.reshape(1, 8, 8192)),
        ("view", "unsqueeze", lambda: x.unsqueeze(0)),
        ("view", "expand", lambda: x[:, :, None].expand(1, 8, 4, 128, 64)),
        ("view", "empty", lambda: torch.empty(1, 8, 128, 64, device=DEV, dtype=torch.bfloat16)),
        ("op", "add", lambda: x + y),
        ("op", "mul_scalar", lambda: x * 0.125),
        ("op", "masked_fill", lambda: s.masked_fill(m, float("-inf"))),
        ("op", "to_fp32", lambda: x.to(torch.float32)),
        ("op", "contiguous_copy", lambda: xt.contiguous()),
        ("op", "softmax", lambda: torch.softmax(s, dim=-1)),
        ("op", "softmax_fp32", lambda: torch.softmax(s, dim=-1, dtype=torch.float32)),
        ("op", "sum", lambda: s.sum(-1)),
        ("op", "zeros_like", lambda: torch.zeros_like(x)),
        ("op", "dropout", lambda: F.dropout(s, 0.1, training=True)),
        ("gemm", "bmm", lambda: torch.bmm(a3, b3)),
        ("gemm", "matmul_4d", lambda: torch.matmul(x, x.transpose(-1, -2))),
        ("gemm", "einsum", lambda: torch.einsum("bhqd,bhkd->bhqk", x, y)),
        ("gemm", "linear", lambda: F.linear(xl, w)),
        ("gemm", "mm", lambda: torch.mm(xl, w.t())),
    ]


SDPA_BACKENDS = {
    "sdpa-flash": "FLASH_ATTENTION",
    "sdpa-cudnn": "CUDNN_ATTENTION",
    "sdpa-efficient": "EFFICIENT_ATTENTION",
    "sdpa-math": "MATH",
}
#: (label, batch, heads, kv_heads, n, n_kv, d): a short prefill and a decode
SDPA_SHAPES = (("prefill", 1, 8, 8, 128, 128, 64), ("decode", 8, 32, 8, 1, 4096, 128))


def sdpa_fns(backend: str, shape: tuple, backward: bool):
    """(fn, context): one forward (or forward + backward) call through ``backend``."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    _, b, h, hk, n, nk, d = shape
    q = _t(b, h, n, d, grad=backward)
    k = _t(b, hk, nk, d, grad=backward)
    v = _t(b, hk, nk, d, grad=backward)
    gqa = h != hk
    do = _t(b, h, n, d)
    ctx = sdpa_kernel([getattr(SDPBackend, SDPA_BACKENDS[backend])])

    def fwd():
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=gqa)

    def step():
        o = F.scaled_dot_product_attention(q, k, v, enable_gqa=gqa)
        return torch.autograd.grad(o, (q, k, v), do)

    return (step if backward else fwd), ctx


def measure_host(ctx: Any = None, on_row: Any = None, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """Every row (see the module's docstring); ``on_row(row)`` is called as each is measured;
    ``skip``: implementations not to time (``flex``: its compilation takes tens of seconds)."""
    import torch
    import torch.nn.functional as F

    from .cupti import teardown_setting

    rows: list[dict[str, Any]] = []

    def emit(row: dict[str, Any]) -> None:
        rows.append(row)
        if on_row is not None:
            on_row(row)

    emit(
        {
            "section": "env",
            "torch": torch.__version__,
            "gpu": torch.cuda.get_device_name(),
            "cudnn": torch.backends.cudnn.version(),
            "python": sys.version.split()[0],
            "cpu": _cpu(),
            "teardown_cupti": teardown_setting(),  # what the profiler sessions run with
        },
    )
    # 1. plain ops on the host
    for cls, name, fn in host_ops():
        try:
            emit({"section": "host", "class": cls, "op": name, "host_s": host_seconds(fn)})
        except Exception as exc:  # one op's failure keeps the rest
            emit({"section": "host", "class": cls, "op": name, "error": f"{type(exc).__name__}: {exc}"[:200]})
    # the context manager a validate case enters per call, on its own
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def ctx_only():
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            pass

    t0 = time.perf_counter()
    for _ in range(2000):
        ctx_only()
    emit(
        {
            "section": "host",
            "class": "python",
            "op": "sdpa_kernel_context",
            "host_s": (time.perf_counter() - t0) / 2000,
        }
    )

    # 2. fused attention calls: host, call, queued, kernel times, kernels
    for backend in SDPA_BACKENDS:
        for shape in SDPA_SHAPES:
            for backward in (False, True):
                if backend == "sdpa-math" and backward:
                    continue
                row = {
                    "section": "sdpa",
                    "impl": backend,
                    "shape": shape[0],
                    "dims": list(shape[1:]),
                    "backward": backward,
                }
                try:
                    fn, ctx = sdpa_fns(backend, shape, backward)
                    with ctx:
                        row.update(timed(fn, calls=50 if backward else 100))
                except Exception as exc:
                    row["error"] = f"{type(exc).__name__}: {exc}"[:300]
                emit(row)
    # auto (no context): what a user's plain call picks
    for shape in SDPA_SHAPES:
        row = {"section": "sdpa", "impl": "auto", "shape": shape[0], "dims": list(shape[1:]), "backward": False}
        try:
            _, b, h, hk, n, nk, d = shape
            q, k, v = _t(b, h, n, d), _t(b, hk, nk, d), _t(b, hk, nk, d)
            fn = lambda q=q, k=k, v=v, g=h != hk: F.scaled_dot_product_attention(q, k, v, enable_gqa=g)  # noqa: E731
            row.update(timed(fn))
        except Exception as exc:
            row["error"] = f"{type(exc).__name__}: {exc}"[:300]
        emit(row)
    # memmodel's Triton kernel and FlexAttention (compiled)
    for impl in (i for i in ("triton", "flex") if i not in skip):
        for shape in SDPA_SHAPES:
            if impl == "triton" and shape[0] == "decode":
                continue
            row = {"section": "sdpa", "impl": impl, "shape": shape[0], "dims": list(shape[1:]), "backward": False}
            try:
                _, b, h, hk, n, nk, d = shape
                q, k, v = _t(b, h, n, d), _t(b, hk, nk, d), _t(b, hk, nk, d)
                if impl == "triton":
                    from .triton_fa import attention

                    fn = lambda q=q, k=k, v=v: attention(q, k, v)  # noqa: E731
                else:
                    from torch.nn.attention.flex_attention import flex_attention

                    flex = torch.compile(flex_attention, dynamic=False)
                    fn = lambda q=q, k=k, v=v, g=h != hk, flex=flex: flex(q, k, v, enable_gqa=g)  # noqa: E731
                row.update(timed(fn))
            except Exception as exc:
                row["error"] = f"{type(exc).__name__}: {exc}"[:300]
            emit(row)

    # 3. autograd: backward of a chain of n elementwise ops, of n views and of n matmuls, the
    # host's time behind a sleeping kernel and, host-bound, the pace of calls queued back to back
    # (a backward's many launches can fill the launch queue behind the sleep)
    for n in (1, 4, 16):
        for kind in ("mul", "view", "matmul"):
            x = _t(1, 8, 128, 64, grad=True)
            wt = _t(64, 64)

            def chain(x=x, n=n, kind=kind, wt=wt):
                y = x
                for _ in range(n):
                    y = y * 1.01 if kind == "mul" else (y.transpose(1, 2) if kind == "view" else y @ wt)
                return y * 1.0 if kind == "view" else y

            y = chain()
            g = torch.ones_like(y)

            def fwd(chain=chain):
                return chain()

            def step(chain=chain, x=x, g=g):
                return torch.autograd.grad(chain(), (x,), g)

            emit(
                {
                    "section": "autograd",
                    "kind": kind,
                    "n": n,
                    "forward_host_s": host_seconds(fwd, calls=50),
                    "step_host_s": host_seconds(step, calls=30),
                    "step_call_s": call_seconds(step),
                    "forward_queued_s": queued_seconds(fwd, calls=100),
                    "step_queued_s": queued_seconds(step, calls=100),
                    "kernels": kernels_of(step),
                },
            )

    # 4. CUDA graphs of n tiny kernels
    x = torch.zeros(1024, device=DEV)
    tiny = lambda x=x: x.add_(1.0)  # noqa: E731
    kernel_us = statistics.median(k["us"] for k in kernels_of(tiny)) if kernels_of(tiny) else None
    for n in (1, 4, 16, 64):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                tiny()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(n):
                tiny()
        emit(
            {
                "section": "graph",
                "n": n,
                "replay_call_s": call_seconds(g.replay),
                "replay_host_s": host_seconds(g.replay, calls=50),
                "replay_queued_s": queued_seconds(g.replay),
                "kernel_us": kernel_us,
                "eager_call_s": call_seconds(lambda n=n, tiny=tiny: [tiny() for _ in range(n)]),
                "eager_kernel_s": queued_seconds(lambda n=n, tiny=tiny: [tiny() for _ in range(n)], behind_sleep=True),
            },
        )

    # 5. plain ops as a user times them (references for the pipeline)
    for cls, name, fn in host_ops():
        if cls == "view":
            continue
        try:
            emit(
                {
                    "section": "call",
                    "class": cls,
                    "op": name,
                    "call_s": call_seconds(fn),
                    "queued_s": queued_seconds(fn),
                    "kernel_s": queued_seconds(fn, behind_sleep=True),
                    "kernels": kernels_of(fn),
                },
            )
        except Exception as exc:
            emit({"section": "call", "class": cls, "op": name, "error": f"{type(exc).__name__}: {exc}"[:200]})
    return {"rows": rows}


def _cpu() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "?"
