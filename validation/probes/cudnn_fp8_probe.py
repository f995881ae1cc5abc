"""cuDNN's fp8 attention forward against its bf16 one, through the cuDNN frontend's graph API (issue #28).

memmodel times cuDNN's fp8 forward (``--impl sdpa-cudnn --dtype fp8``: the ``sdpa_fp8`` graph, e4m3 Q, K,
V and O) at its 16-bit efficiency over the fp8 tensor-core peak. PyTorch's SDPA has no fp8 path, so
``memmodel validate`` cannot run it; this probe runs both graphs itself, on shapes of its own, so the
fp8 kernel's efficiency as a share of the bf16 one (``implementations.sdpa-cudnn.fp8_share``) is
measured, not assumed. NVIDIA's published cuDNN fp8 figures stay blind checks.

    PYTHONPATH=<nvidia-cudnn-frontend> python validation/probes/cudnn_fp8_probe.py OUT.jsonl [CASES.txt]

With CASES.txt (``memmodel validate``'s case lines, ``impl=sdpa-cudnn,...,dtype=bf16|fp8``: a check set
whose predictions were committed first) it runs those shapes instead of its own.

One JSON line a shape and dtype: the graph's time a call (CUDA events around back-to-back
``execute`` calls, the median of 15 such runs), the kernels the profiler saw in one call, and for fp8
the largest relative difference of its output from the bf16 graph's (a check that it computed the
same attention). Unit scales throughout (inputs of about unit size fit e4m3's range).
"""

from __future__ import annotations

import json
import math
import statistics
import sys

import torch
from probe_timing import kernel_names  # run from validation/probes, as the other probes

SHAPES = (  # batch, heads, kv_heads, tokens, d_qk, d_v, causal
    (1, 32, 8, 4096, 128, 128, False),
    (1, 32, 8, 4096, 128, 128, True),
    (4, 16, 16, 2048, 128, 128, False),
    (1, 24, 4, 16384, 128, 128, False),
    (8, 16, 2, 1024, 128, 128, True),
    (4, 16, 16, 4096, 64, 64, False),
    (4, 16, 16, 4096, 64, 64, True),
    (2, 32, 32, 8192, 64, 64, True),
    (1, 64, 64, 4096, 192, 128, False),
    (1, 64, 64, 4096, 192, 128, True),
    (2, 32, 32, 8192, 192, 128, True),
    (1, 16, 4, 4096, 256, 256, False),
    (1, 16, 4, 4096, 256, 256, True),
)


def _stride(shape):
    b, h, s, d = shape
    return [h * s * d, s * d, d, 1]


class Graph:
    """One cuDNN SDPA forward graph (bf16 or fp8), built once, executed many times."""

    def __init__(self, cudnn, handle, dtype, b, h, hk, n, dq, dv, causal):
        self.cudnn = cudnn
        fp8 = dtype == "fp8"
        io = cudnn.data_type.FP8_E4M3 if fp8 else cudnn.data_type.BFLOAT16
        tdt = torch.float8_e4m3fn if fp8 else torch.bfloat16
        g = cudnn.pygraph(
            io_data_type=io,
            intermediate_data_type=cudnn.data_type.FLOAT,
            compute_data_type=cudnn.data_type.FLOAT,
            handle=handle,
        )
        gen = torch.Generator(device="cuda").manual_seed(0)
        shapes = {"q": (b, h, n, dq), "k": (b, hk, n, dq), "v": (b, hk, n, dv)}
        self.data = {
            name: (torch.randn(shape, device="cuda", generator=gen, dtype=torch.float32) * 0.5).to(tdt)
            for name, shape in shapes.items()
        }
        tens = {
            name: g.tensor(name=name, dim=list(t.shape), stride=_stride(t.shape), data_type=io)
            for name, t in self.data.items()
        }
        scale = 1.0 / math.sqrt(dq)
        self.out = torch.empty((b, h, n, dv), device="cuda", dtype=tdt)
        self.stats = torch.empty((b, h, n, 1), device="cuda", dtype=torch.float32)
        pack = {tens[k]: v for k, v in self.data.items()}
        if fp8:
            ones = {}
            for name in ("descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o"):
                ones[name] = g.tensor(name=name, dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=cudnn.data_type.FLOAT)
                pack[ones[name]] = torch.ones((1, 1, 1, 1), device="cuda", dtype=torch.float32)
            kwargs = dict(q=tens["q"], k=tens["k"], v=tens["v"], attn_scale=scale, use_causal_mask=causal, **ones)
            try:
                o, stats, amax_s, amax_o = g.sdpa_fp8(is_inference=False, **kwargs)
            except TypeError:
                o, stats, amax_s, amax_o = g.sdpa_fp8(generate_stats=True, **kwargs)
            for t in (amax_s, amax_o):
                t.set_output(True).set_dim([1, 1, 1, 1]).set_stride([1, 1, 1, 1]).set_data_type(cudnn.data_type.FLOAT)
                pack[t] = torch.empty((1, 1, 1, 1), device="cuda", dtype=torch.float32)
        else:
            kwargs = dict(q=tens["q"], k=tens["k"], v=tens["v"], attn_scale=scale, use_causal_mask=causal)
            try:
                o, stats = g.sdpa(is_inference=False, **kwargs)
            except TypeError:
                o, stats = g.sdpa(generate_stats=True, **kwargs)
        o.set_output(True).set_dim(list(self.out.shape)).set_stride(_stride(self.out.shape)).set_data_type(io)
        stats.set_output(True).set_dim(list(self.stats.shape)).set_stride(_stride(self.stats.shape))
        stats.set_data_type(cudnn.data_type.FLOAT)
        pack[o], pack[stats] = self.out, self.stats
        g.validate()
        g.build_operation_graph()
        g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        g.check_support()
        g.build_plans()
        self.graph, self.pack, self.handle = g, pack, handle
        self.workspace = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)

    def __call__(self):
        self.graph.execute(self.pack, self.workspace, handle=self.handle)


def per_call(fn, target_s: float = 2e-3, runs: int = 15) -> float:
    """Seconds a call: ``inner`` calls back to back between two events (enough for ``target_s``),
    the median of ``runs``."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    fn()
    b.record()
    b.synchronize()
    one = max(a.elapsed_time(b) * 1e-3, 1e-6)
    inner = max(1, min(200, int(target_s / one)))
    times = []
    for _ in range(runs):
        a.record()
        for _ in range(inner):
            fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e-3 / inner)
    return statistics.median(times)


def shapes_of(path: str) -> tuple:
    """The (batch, heads, kv_heads, tokens, d_qk, d_v, causal) shapes of a cases file's lines, in order."""
    out = []
    for line in open(path):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        f = dict(part.split("=", 1) for part in line.split(","))
        d = int(f["d"])
        heads = int(f.get("heads", 1))
        shape = (
            int(f.get("batch", 1)),
            heads,
            int(f.get("kv_heads", heads)),
            int(f["n"]),
            d,
            int(f.get("d_v", d)),
            f.get("causal", "0") in ("1", "true", "True"),
        )
        if shape not in out:
            out.append(shape)
    return tuple(out)


def main(out: str, shapes: tuple = SHAPES) -> None:
    torch.zeros(1, device="cuda")  # the CUDA context (and PyTorch's libcudnn) before the frontend's
    import cudnn

    handle = cudnn.create_handle()
    cudnn.set_stream(handle=handle, stream=torch.cuda.current_stream().cuda_stream)
    with open(out, "w") as f:
        env = {
            "section": "env",
            "torch": torch.__version__,
            "gpu": torch.cuda.get_device_name(),
            "cuda": torch.version.cuda,
            "cudnn_frontend": getattr(cudnn, "__version__", "?"),
            "cudnn_backend": cudnn.backend_version(),
        }
        f.write(json.dumps(env) + "\n")
        for b, h, hk, n, dq, dv, causal in shapes:
            row = {
                "section": "sdpa",
                "batch": b,
                "heads": h,
                "kv_heads": hk,
                "n": n,
                "d": dq,
                "d_v": dv,
                "causal": causal,
            }
            ref = None
            for dtype in ("bf16", "fp8"):
                line = {**row, "dtype": dtype}
                try:
                    g = Graph(cudnn, handle, dtype, b, h, hk, n, dq, dv, causal)
                    line["time_s"] = per_call(g)
                    line["kernels"] = kernel_names(g)
                    if dtype == "bf16":
                        ref = g.out.float()
                    elif ref is not None:
                        line["max_rel_diff"] = float((g.out.float() - ref).abs().max() / ref.abs().max())
                    del g
                except Exception as exc:  # keep the other shapes; say what failed
                    line["error"] = repr(exc)[:400]
                f.write(json.dumps(line) + "\n")
                f.flush()
                print(json.dumps({k: v for k, v in line.items() if k != "kernels"}), flush=True)
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main(
        sys.argv[1] if len(sys.argv) > 1 else "cudnn-fp8-probe.jsonl",
        shapes_of(sys.argv[2]) if len(sys.argv) > 2 else SHAPES,
    )
