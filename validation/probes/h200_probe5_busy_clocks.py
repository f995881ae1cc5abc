"""Probe 5: how a kernel's rate falls as the GPU stays busy (power and clock management).

Long compute-bound kernels in the records run 6-15 % below the rates calibrate measures on
references of about a millisecond, and the faster the kernel's tensor-core rate the larger
the gap (FA2 mma.sync ~340 TFLOP/s: ~-7 %; Triton wgmma ~430: ~-11 %; cuDNN ~600: ~-14 %);
memory-bound kernels show none. This probe measures it directly, on reference kernels only
(microbenchmarks, no validation case):

* each series: the GPU left idle for a few seconds, then one kernel launched back to back for
  about three seconds, a CUDA event between launches (each launch's time against the busy time
  before it); nvidia-smi samples SM clock, power and temperature every 20 ms throughout;
* kernels: cuBLAS 8192^3 fp16 and bf16 products (calibrate's matmul reference), SDPA flash,
  cuDNN and memmodel's Triton kernel on one long head (1 x 1 x 131072 x 128 fp16, none of them a
  validation case's timing being fitted: the rate against busy time is what is read), SDPA flash
  at calibrate's long reference (8 x 16 x 2048 x 128), and a 1 GiB copy (memory-bound);
* calibrate's own way of timing (3 warm-up calls, 20 timed) on the flash reference, cold and
  right after a sustained series.

Run on the GPU machine: ``python validation/probes/h200_probe5_busy_clocks.py OUT_DIR``; writes
``probe.json`` and ``smi.csv``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from memmodel.gpu.measure import cuda_timer
from memmodel.gpu.triton_fa import attention as triton_attention

OUT = sys.argv[1] if len(sys.argv) > 1 else "."
BUSY_S = float(os.environ.get("PROBE_BUSY_S", "3.0"))
IDLE_S = float(os.environ.get("PROBE_IDLE_S", "4.0"))
os.makedirs(OUT, exist_ok=True)
TIMER = cuda_timer(torch)
results: dict = {
    "started": time.time(),
    "device": torch.cuda.get_device_name(),
    "torch": torch.__version__,
    "series": [],
}

FIELDS = [
    "timestamp",
    "clocks.sm",
    "clocks.mem",
    "power.draw",
    "temperature.gpu",
    "clocks_event_reasons.sw_power_cap",
    "clocks_event_reasons.hw_slowdown",
    "clocks_event_reasons.sw_thermal_slowdown",
    "enforced.power.limit",
]


def start_smi():
    for fields in (FIELDS, FIELDS[:5]):
        q = ",".join(fields)
        ok = subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader"], capture_output=True, text=True)
        if ok.returncode == 0:
            results["smi_fields"] = fields
            f = open(os.path.join(OUT, "smi.csv"), "w")
            return subprocess.Popen(
                ["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader", "-lms", "20"],
                stdout=f,
                stderr=subprocess.STDOUT,
            )
    results["smi_fields"] = None
    return None


def save() -> None:
    with open(os.path.join(OUT, "probe.json"), "w") as f:
        json.dump(results, f, indent=1)


def sustained(name: str, fn, amount: float, unit: str) -> None:
    torch.cuda.synchronize()
    time.sleep(IDLE_S)
    fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    one = time.perf_counter() - t
    count = max(20, int(BUSY_S / max(one, 1e-5)))
    events = [torch.cuda.Event(enable_timing=True) for _ in range(count + 1)]
    wall0 = time.time()
    events[0].record()
    for i in range(count):
        fn()
        events[i + 1].record()
    torch.cuda.synchronize()
    wall1 = time.time()
    times = [events[i].elapsed_time(events[i + 1]) * 1e-3 for i in range(count)]
    results["series"].append(
        {"name": name, "amount": amount, "unit": unit, "wall_start": wall0, "wall_end": wall1, "times_s": times}
    )
    first = sorted(times[:5])[2]
    last = sorted(times[-max(5, count // 10) :])[len(times[-max(5, count // 10) :]) // 2]
    print(
        f"{name}: {count} x, first {first * 1e3:.3f} ms, last {last * 1e3:.3f} ms, ratio {first / last:.3f}", flush=True
    )
    save()


def calibrate_style(name: str, fn, amount: float) -> None:
    times = sorted(TIMER(fn, 20, 3))
    results.setdefault("calibrate_style", []).append(
        {"name": name, "amount": amount, "time_s": times[10], "times_s": times, "at": time.time()}
    )
    print(f"calibrate-style {name}: {times[10] * 1e3:.4f} ms", flush=True)
    save()


smi = start_smi()
try:
    g = torch.Generator(device="cuda").manual_seed(5)
    a16 = torch.randn(8192, 8192, device="cuda", dtype=torch.float16, generator=g)
    b16 = torch.randn(8192, 8192, device="cuda", dtype=torch.float16, generator=g)
    a_bf, b_bf = a16.bfloat16(), b16.bfloat16()
    gemm_flop = 2 * 8192**3

    q, k, v = (torch.randn(1, 1, 131072, 128, device="cuda", dtype=torch.float16, generator=g) for _ in range(3))
    long_flop = 4 * 131072 * 131072 * 128
    rq, rk, rv = (torch.randn(8, 16, 2048, 128, device="cuda", dtype=torch.float16, generator=g) for _ in range(3))
    ref_flop = 4 * 8 * 16 * 2048 * 2048 * 128
    big = torch.empty(1 << 29, device="cuda", dtype=torch.float16)
    big2 = torch.empty_like(big)

    def sdpa(backend, x, y, z):
        def fn():
            with sdpa_kernel([backend]):
                return torch.nn.functional.scaled_dot_product_attention(x, y, z)

        return fn

    flash_ref = sdpa(SDPBackend.FLASH_ATTENTION, rq, rk, rv)
    calibrate_style("flash-reference-cold", flash_ref, ref_flop)
    sustained("gemm-fp16-8192", lambda: a16 @ b16, gemm_flop, "flop")
    calibrate_style("flash-reference-after-gemm", flash_ref, ref_flop)
    sustained("flash-reference", flash_ref, ref_flop, "flop")
    calibrate_style("flash-reference-hot", flash_ref, ref_flop)
    sustained("flash-131072", sdpa(SDPBackend.FLASH_ATTENTION, q, k, v), long_flop, "flop")
    sustained("cudnn-131072", sdpa(SDPBackend.CUDNN_ATTENTION, q, k, v), long_flop, "flop")
    sustained("triton-131072-64x64", lambda: triton_attention(q, k, v, block_q=64, block_kv=64), long_flop, "flop")
    sustained("copy-1GiB", lambda: big2.copy_(big), 2 * big.numel() * 2, "byte")
    sustained("gemm-bf16-8192", lambda: a_bf @ b_bf, gemm_flop, "flop")
    sustained("cudnn-131072-again", sdpa(SDPBackend.CUDNN_ATTENTION, q, k, v), long_flop, "flop")
    calibrate_style("flash-reference-end", flash_ref, ref_flop)
finally:
    if smi is not None:
        time.sleep(0.2)
        smi.terminate()
    results["finished"] = time.time()
    save()
