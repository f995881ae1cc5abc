"""Microbenchmark: a fused attention backward kernel's time against the size of its grid.

The backward kernels of FlashAttention-2 (SDPA flash) and cuDNN run one CTA per K/V block of each
head. With the work per CTA fixed (batch 1, N and d fixed) and the heads stepped from 1 to 128,
the grid goes from a few CTAs to several waves on the chip: how the main kernel's time grows with
its CTAs says how a grid that does not fill the chip, or fills it a wave and a bit, is timed.
Reference shapes only (none is a validation case).

    python validation/probes/backward_grid_probe.py OUT.jsonl [NxD,... [HEADS,...]]

(default shapes 1024x64,2048x128 and heads 1 to 128; e.g. ``8192x128 1,2,4,8,16,24,32`` for long rows)

One JSON line per (backend, N, d, causal, heads): every kernel of the backward pass as the
profiler (CUPTI) timed it, medians of 10 backward passes.
"""

from __future__ import annotations

import json
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

HEADS = (1, 2, 4, 8, 12, 16, 17, 24, 33, 48, 64, 96, 128)
SHAPES = ((1024, 64), (2048, 128))
BACKENDS = {"sdpa-flash": SDPBackend.FLASH_ATTENTION, "sdpa-cudnn": SDPBackend.CUDNN_ATTENTION}
REPS = 10


def kernels(backend, heads: int, n: int, d: int, causal: bool) -> list[dict]:
    g = torch.Generator(device="cuda").manual_seed(heads * n + d)
    q, k, v = (
        torch.randn(1, heads, n, d, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_(True)
        for _ in range(3)
    )
    with sdpa_kernel([backend]):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        grad = torch.randn_like(out)
        for _ in range(3):  # warm-up
            torch.autograd.grad(out, (q, k, v), grad, retain_graph=True)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(REPS):
                torch.autograd.grad(out, (q, k, v), grad, retain_graph=True)
            torch.cuda.synchronize()
    by_name: dict[str, list[float]] = {}
    for e in prof.events():
        if e.device_type.name == "CUDA" and e.device_time > 0:
            by_name.setdefault(e.name[:200], []).append(e.device_time)
    return sorted(
        ({"name": name, "count": len(ts), "median_us": statistics.median(ts)} for name, ts in by_name.items()),
        key=lambda r: -r["median_us"],
    )


def main(out: str, shapes: tuple = SHAPES, heads_list: tuple = HEADS) -> None:
    with open(out, "w") as f:
        props = torch.cuda.get_device_properties(0)
        env = {"section": "env", "torch": torch.__version__, "gpu": props.name, "sm_count": props.multi_processor_count}
        f.write(json.dumps(env) + "\n")
        for name, backend in BACKENDS.items():
            for n, d in shapes:
                for causal in (False, True):
                    for heads in heads_list:
                        try:
                            ks = kernels(backend, heads, n, d, causal)
                        except RuntimeError as exc:  # recorded; the sweep goes on
                            ks = [{"error": str(exc).splitlines()[0][:200]}]
                        line = {"section": "backward", "impl": name, "n": n, "d": d, "causal": causal, "heads": heads}
                        f.write(json.dumps({**line, "kernels": ks}) + "\n")
                        f.flush()
                        main_k = ks[0]
                        print(
                            name, n, d, causal, heads, main_k.get("median_us"), main_k.get("name", "")[:60], flush=True
                        )


if __name__ == "__main__":
    shapes = tuple(tuple(int(x) for x in s.split("x")) for s in sys.argv[2].split(",")) if len(sys.argv) > 2 else SHAPES
    heads_list = tuple(int(h) for h in sys.argv[3].split(",")) if len(sys.argv) > 3 else HEADS
    main(sys.argv[1], shapes, heads_list)
