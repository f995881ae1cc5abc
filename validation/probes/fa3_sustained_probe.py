"""FlashAttention-3's clocks under the power limit on the H200, as ``memmodel calibrate`` measures the SDPA backends'.

``calibrate``'s sustained step (``memmodel.gpu.calibrate_impl.measure_sustained``) times each backend's long
reference forward (8 x 16 heads x 2048 tokens, d 128, fp16) back to back for a busy spell after an idle one,
a CUDA event between calls; ``calibrate --impl fa3`` has no such step, so FlashAttention-3 has no
``sustained_share``. This runs the same series for FlashAttention-3's Hopper kernels (``flash_attn.cute``'s
SM90 path, the package ``../shared/tools/pack-flash-attn-4`` packs) and, as a control of the same minutes on
the same machine, for PyTorch's cuDNN backend, taking turns, and writes the record in the sustained step's form
(``{"sustained": {"series": [...]}}``, read by ``memmodel.calibration.figures.power_figures``):

    PYTHONPATH=<flash-attn-4 site> python3 fa3_sustained_probe.py OUT.json [SERIES] [BUSY_S] [IDLE_S]

Defaults as calibrate's: 3 series of 0.8 s busy after 3 s idle; then one series of each of 4 s busy.
"""

from __future__ import annotations

import json
import sys
import time

SHAPE = (8, 16, 2048, 128)  # memmodel.calibration.plan.REFERENCE_LONG at SUSTAINED_HEAD_DIM


def main(argv: list[str]) -> int:
    import torch

    out = argv[0]
    series = int(argv[1]) if len(argv) > 1 else 3
    busy = float(argv[2]) if len(argv) > 2 else 0.8
    idle = float(argv[3]) if len(argv) > 3 else 3.0
    b, h, n, d = SHAPE
    g = torch.Generator(device="cuda").manual_seed(29)
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.float16, generator=g) for _ in range(3))
    calls = {}
    try:
        from flash_attn.cute import flash_attn_func

        qt, kt, vt = (x.transpose(1, 2).contiguous() for x in (q, k, v))  # (batch, seqlen, heads, d)
        calls["fa3"] = lambda: flash_attn_func(qt, kt, vt, causal=False)
    except Exception as exc:  # recorded: the cuDNN control still runs
        print(f"fa3: {exc}", file=sys.stderr)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def cudnn() -> object:
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v)

    calls["sdpa-cudnn"] = cudnn
    record: dict = {
        "env": {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(), "shape": list(SHAPE)},
        "sustained": {"series": []},
    }

    def one(impl: str, fn, repeat: int, busy_s: float) -> None:
        entry = {"impl": impl, "shape": list(SHAPE), "idle_s": idle, "series": repeat, "busy_target_s": busy_s}
        try:
            fn()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            count = max(20, int(busy_s / max(time.perf_counter() - t0, 1e-5)))
            time.sleep(idle)
            events = [torch.cuda.Event(enable_timing=True) for _ in range(count + 1)]
            events[0].record()
            for i in range(count):
                fn()
                events[i + 1].record()
            torch.cuda.synchronize()
            entry["times_s"] = [events[i].elapsed_time(events[i + 1]) * 1e-3 for i in range(count)]
        except Exception as exc:
            entry["error"] = str(exc).splitlines()[0][:200]
        record["sustained"]["series"].append(entry)
        with open(out, "w") as f:  # kept as it goes: a failure later leaves what was measured
            json.dump(record, f)
        t = entry.get("times_s") or [0]
        print(
            f"{impl} series {repeat} busy {busy_s}: {len(t)} calls, first {t[0] * 1e3:.3f} ms, last {t[-1] * 1e3:.3f} ms"
        )

    for repeat in range(series):
        for impl, fn in calls.items():
            one(impl, fn, repeat, busy)
    for impl, fn in calls.items():
        one(impl, fn, series, 4.0)
    time.sleep(idle)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
