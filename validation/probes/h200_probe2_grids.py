"""Probe 2: what sets a fused attention kernel's rate when the grid does not fill the chip
evenly — clocks, CTAs per SM, SMs left idle, many CTAs reading one head's K/V — and the
decoding references at d = 64 and 256.

Reference shapes only (none is a validation case): FlashAttention-2 (SDPA flash) with k
CTAs of fixed work, either all on one head (one K/V read by every CTA) or one per head; a
register-only tensor-core loop on k CTAs (mma.sync and wgmma); memmodel's Triton kernel on
one long head against the same work spread over heads; and calibrate's decoding references
at every head dim (``memmodel.gpu.calibrate_impl._measure_decode``).

Run on the GPU machine: ``python validation/probes/h200_probe2_grids.py OUT_DIR``. Writes
``probe.json`` (CUDA-event times, medians of repeats after warm-up, with the wall-clock window
of each) and ``smi.csv`` (nvidia-smi samples of SM clock, power and temperature every 20 ms
while it runs), so each time can be read against the clock the chip ran at.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import torch
import triton
import triton.language as tl

from memmodel.gpu.measure import cuda_timer  # noqa: E402

TIMER = cuda_timer(torch)
OUT = sys.argv[1] if len(sys.argv) > 1 else "."
os.makedirs(OUT, exist_ok=True)
results: dict = {"started": time.time(), "device": torch.cuda.get_device_name(), "runs": []}


def save() -> None:
    with open(os.path.join(OUT, "probe.json"), "w") as f:
        json.dump(results, f, indent=1)


def timed(fn, reps: int = 20, warmup: int = 3) -> dict:
    """calibrate's timer (the timed calls queued behind a sleeping kernel, so a short call is
    timed at the GPU's pace), with the wall-clock window of the timed calls."""
    t0 = time.time()
    times = sorted(TIMER(fn, reps, warmup))
    return {
        "time_s": times[len(times) // 2],
        "min_s": times[0],
        "max_s": times[-1],
        "wall": [t0, time.time()],
        "reps": reps,
    }


def record(kind: str, **kw) -> None:
    results["runs"].append({"kind": kind, **kw})
    print(kind, {k: v for k, v in kw.items() if k != "wall"}, flush=True)
    save()


def guarded(label: str, fn, *args, **kw) -> None:
    """Run one measurement; a failure is recorded and the probe goes on."""
    try:
        fn(*args, **kw)
    except Exception as exc:  # recorded, not fatal
        record("error", label=label, error=str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__)
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


smi = None
try:
    q = "timestamp,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu,clocks_event_reasons.active"
    probe = subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader"], capture_output=True, text=True)
    if probe.returncode != 0:
        q = "timestamp,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu"
    results["smi_fields"] = q
    smi = subprocess.Popen(
        ["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader,nounits", "-lms", "20"],
        stdout=open(os.path.join(OUT, "smi.csv"), "w"),
        stderr=subprocess.DEVNULL,
    )
except OSError as exc:
    results["smi_error"] = str(exc)

try:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    F = torch.nn.functional.scaled_dot_product_attention
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(0)

    # --- A. FlashAttention-2 (and cuDNN) with k CTAs of fixed work --------------------------
    def sdpa_case(backend, name, d, k, layout, rows, n_kv):
        if layout == "one-head":  # k Q blocks of one head: every CTA reads the same K/V
            q = torch.randn(1, 1, rows * k, d, device=dev, dtype=torch.bfloat16, generator=g)
            kv = [torch.randn(1, 1, n_kv, d, device=dev, dtype=torch.bfloat16, generator=g) for _ in range(2)]
        else:  # one Q block per head: each CTA its own K/V
            q = torch.randn(1, k, rows, d, device=dev, dtype=torch.bfloat16, generator=g)
            kv = [torch.randn(1, k, n_kv, d, device=dev, dtype=torch.bfloat16, generator=g) for _ in range(2)]

        def fn():
            with sdpa_kernel([backend]):
                return F(q, kv[0], kv[1])

        r = timed(fn)
        record("sdpa", impl=name, d=d, ctas=k, layout=layout, q_rows=rows, n_kv=n_kv,
               flop=4 * rows * k * n_kv * d, **r)  # fmt: skip

    for d, rows in ((128, 128), (64, 128)):
        for layout in ("one-head", "per-head"):
            for k in (16, 33, 66, 99, 132, 198, 264, 396, 528):
                guarded(
                    f"flash {d} {layout} {k}",
                    sdpa_case,
                    SDPBackend.FLASH_ATTENTION,
                    "sdpa-flash",
                    d,
                    k,
                    layout,
                    rows,
                    16384,
                )
    for layout in ("one-head", "per-head"):
        for k in (33, 66, 132, 264):
            guarded(
                f"cudnn {layout} {k}", sdpa_case, SDPBackend.CUDNN_ATTENTION, "sdpa-cudnn", 128, k, layout, 128, 16384
            )
    torch.cuda.empty_cache()

    # --- B. tensor cores only: a register-resident loop of dots on k CTAs ------------------
    def section_b():
        @triton.jit
        def dot_loop(a_ptr, out_ptr, iters, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, MODE: tl.constexpr):
            pid = tl.program_id(0)
            rm = tl.arange(0, BM)
            rn = tl.arange(0, BN)
            rk = tl.arange(0, BK)
            a = tl.load(a_ptr + rm[:, None] * BK + rk[None, :])
            b = tl.load(a_ptr + rk[:, None] * BN + rn[None, :])
            acc = tl.zeros([BM, BN], tl.float32)
            for _ in range(iters):
                acc = tl.dot(a, b, acc)
            tl.store(out_ptr + pid * BM * BN + rm[:, None] * BN + rn[None, :], acc)

        BM, BN, BK = 128, 128, 64
        a = torch.randn(BM * BK * 4, device=dev, dtype=torch.float16, generator=g) * 0.01
        out = torch.empty(528 * BM * BN, device=dev, dtype=torch.float32)
        for mode in ("mma_sync", "wgmma"):
            if mode == "mma_sync":
                os.environ["DISABLE_MMA_V3"] = "1"
            else:
                os.environ.pop("DISABLE_MMA_V3", None)
            iters = 4096
            for k in (16, 33, 66, 99, 132, 264):
                fn = lambda k=k, it=iters, m=mode: dot_loop[(k,)](
                    a, out, it, BM=BM, BN=BN, BK=BK, MODE=m, num_warps=4, num_stages=1
                )  # noqa: E731,E501
                c = fn()
                ptx = c.asm.get("ptx", "")
                r = timed(fn)
                record("dots", mode=mode, ctas=k, iters=iters, flop=2 * BM * BN * BK * iters * k,
                       ptx_wgmma="wgmma" in ptx, ptx_mma_sync="mma.sync" in ptx, **r)  # fmt: skip
            # sustained: 132 CTAs, ~2.5 s of back-to-back launches, each rep's time kept
            fn = lambda it=iters * 8, m=mode: dot_loop[(132,)](
                a, out, it, BM=BM, BN=BN, BK=BK, MODE=m, num_warps=4, num_stages=1
            )  # noqa: E731,E501
            fn()
            torch.cuda.synchronize()
            one = timed(fn, reps=3, warmup=0)["time_s"]
            reps = max(10, int(2.5 / max(one, 1e-6)))
            ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
            t0 = time.time()
            for x, y in ev:
                x.record()
                fn()
                y.record()
            torch.cuda.synchronize()
            record("dots-sustained", mode=mode, ctas=132, iters=iters * 8, flop=2 * BM * BN * BK * iters * 8 * 132,
                   times_s=[x.elapsed_time(y) * 1e-3 for x, y in ev], wall=[t0, time.time()])  # fmt: skip
        os.environ.pop("DISABLE_MMA_V3", None)
        time.sleep(1.0)  # let the clocks settle

    guarded("section B", section_b)

    # --- C. memmodel's Triton kernel: one long head against the same work over many heads ----
    from memmodel.gpu.triton_fa import attention

    def tri(name, b, h, h_kv, n, n_kv, d, bq, bkv, causal=False):
        q = torch.randn(b, h, n, d, device=dev, dtype=torch.float16, generator=g)
        k_, v_ = (torch.randn(b, h_kv, n_kv, d, device=dev, dtype=torch.float16, generator=g) for _ in range(2))
        r = timed(lambda: attention(q, k_, v_, causal=causal, block_q=bq, block_kv=bkv), reps=10, warmup=2)
        record("triton", name=name, shape=[b, h, h_kv, n, n_kv, d], block=[bq, bkv], causal=causal,
               flop=4 * b * h * n * n_kv * d // (2 if causal else 1), **r)  # fmt: skip
        torch.cuda.empty_cache()

    for bq in (64, 128):
        guarded("triton", tri, "one-head-131k", 1, 1, 1, 131072, 131072, 128, bq, 64)
        guarded("triton", tri, "64-heads-q2k-kv131k", 1, 64, 64, 2048, 131072, 128, bq, 64)
        guarded("triton", tri, "gqa64-q2k-kv131k", 1, 64, 1, 2048, 131072, 128, bq, 64)
        guarded("triton", tri, "64-heads-4k", 4, 16, 16, 4096, 4096, 128, bq, 64)
        guarded("triton", tri, "one-head-65k-d64", 1, 1, 1, 65536, 65536, 64, bq, 64)
        guarded("triton", tri, "8-heads-q8k-kv65k-d64", 1, 8, 8, 8192, 65536, 64, bq, 64)

    # --- D. calibrate's decoding references at every head dim -------------------------------
    def section_d():
        from memmodel.gpu import calibrate_impl
        from memmodel.gpu.calibrate import make_context

        ctx = make_context()
        for impl, backend in (("sdpa-flash", SDPBackend.FLASH_ATTENTION), ("sdpa-cudnn", SDPBackend.CUDNN_ATTENTION)):
            for p in calibrate_impl._measure_decode(ctx, backend, impl):
                record("decode", **p)

    guarded("section D", section_d)
finally:
    results["finished"] = time.time()
    save()
    if smi is not None:
        smi.terminate()
