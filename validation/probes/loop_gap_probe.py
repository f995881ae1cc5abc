"""Do the clocks fall when a loop's timed calls are separated by host work? (issue 28)

memmodel's sustained-clock figures (``implementations.NAME.sustained_share`` and ``sustained_after``) were
measured on calls run back to back: after about 35 ms of busy time cuDNN's forward runs at 0.872 of its rate.
A published source's loop (``validation/published/checks.yaml``, ``loop:``) is scored as if the busy time of
its timed calls added up, whatever runs between them. cudnn-frontend's benchmark script makes new inputs,
zeroes a 256 MiB L2-flush buffer and starts a torch profiler before each timed call, and NVIDIA's A100 PCIe
and GB200 rows show no fall where the model has one. This probe times, on one GPU, after 3 s of idle each:

* ``back-to-back``: the call repeated with nothing between (the reference: the fall as calibrate measures it);
* ``sleep-G``: the call, then ``time.sleep(G ms)``, for G in 2, 5, 10, 20, 50;
* ``cudnn-frontend``: ten iterations as that script runs them with ``--profile_pass fwd``: ``torch.randn``
  inputs, the flush buffer's ``zero_()``, ``torch.profiler.profile(activities=[CUDA])`` around the call,
  ``torch.cuda.synchronize()``;
* ``cudnn-frontend-both``: ten iterations as NVIDIA's published configs run it (``profile_pass="both"`` in
  ``benchmark/attention_training/configs/*.py``): inputs that need gradients and a random ``dO``, then the flush
  and the profiled forward, then the flush again and the profiled backward (``out.backward(dO)``), each
  synchronised; its line adds ``bwd_times_ms``, the backward's CUDA-event times.

Each call is PyTorch's cuDNN attention forward (bf16, non-causal) of ``SHAPE`` (about 13 ms on an H200), timed
with CUDA events; the host's wall time from one call's end to the next one's start is the gap. A record line
per pattern: ``{"pattern", "gap_ms", "times_ms", "gaps_ms", "clocks_mhz"}`` (the SM clock after each call where
``torch.cuda.clock_rate`` answers).

What the model as it is predicts (written before any run): every pattern falls as ``back-to-back`` does, to
0.872 of the first calls' rate from the third or fourth call on (3 × 13 ms of busy time past 35 ms), gaps or
not.

For ``cudnn-frontend-both`` (added 2026-12-05 after the H100 run, before any run of it; the published-check
scorer as it is, ``loop_share``): the timed forwards (iterations 6–10) run at the whole back-to-back fall
where five warm-up forwards pass ``sustained_after`` (35 ms: calls of 13 and 50 ms), at boost where they do
not (3 ms calls); the backward never slows (no backward kernel has a sustained share).

    python3 validation/probes/loop_gap_probe.py OUT.jsonl [BATCH]

``BATCH`` (default 4) sets the call's length: 1 about 3 ms, 4 about 13 ms, 16 about 50 ms on an H200.
"""

from __future__ import annotations

import json
import sys
import time

#: batch, heads, tokens, head dim: one call of about 13 ms on an H200 (4·B·H·N²·d = 8.8 TFLOP)
SHAPE = (4, 64, 8192, 128)
CALLS = 30
IDLE_S = 3.0
GAPS_MS = (2, 5, 10, 20, 50)
FLUSH_BYTES = 256 * 2**20


def main(argv: list[str]) -> int:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    out = argv[0]
    b, h, n, d = SHAPE
    if len(argv) > 1:
        b = int(argv[1])
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")

    def call(q: object, k: object, v: object) -> object:
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v)

    def clock() -> float | None:
        try:
            return float(torch.cuda.clock_rate())
        except Exception:  # no NVML here: the times say it
            return None

    def timed(fn) -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)

    call(q, k, v)  # the cuDNN graph built before any timed pattern
    torch.cuda.synchronize()
    rows = []

    def pattern(name: str, gap_ms: float | None, step) -> None:
        time.sleep(IDLE_S)
        times, gaps, clocks = [], [], []
        last_end = None
        for _ in range(CALLS if gap_ms is not None else 10):
            t0 = time.perf_counter()
            times.append(step())
            t1 = time.perf_counter()
            if last_end is not None:
                gaps.append(1e3 * (t0 - last_end) + max(0.0, 1e3 * (t1 - t0) - times[-1]))
            last_end = t1
            clocks.append(clock())
            if gap_ms:
                time.sleep(gap_ms / 1e3)
        row = {"pattern": name, "gap_ms": gap_ms, "times_ms": times, "gaps_ms": gaps, "clocks_mhz": clocks}
        rows.append(row)
        with open(out, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
        print(name, " ".join(f"{t:.2f}" for t in times), file=sys.stderr)

    pattern("back-to-back", 0.0, lambda: timed(lambda: call(q, k, v)))
    for g in GAPS_MS:
        pattern(f"sleep-{g}", float(g), lambda: timed(lambda: call(q, k, v)))

    def cudnn_frontend_iteration() -> float:
        qi, ki, vi = (torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2) for _ in range(3))
        flush.zero_()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]):
            t = timed(lambda: call(qi, ki, vi))
            torch.cuda.synchronize()
        return t

    pattern("cudnn-frontend", None, cudnn_frontend_iteration)

    bwd_times: list[float] = []

    def cudnn_frontend_both() -> float:
        qi, ki, vi = (
            torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16, requires_grad=True).transpose(1, 2)
            for _ in range(3)
        )
        d_out = torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16)
        flush.zero_()
        outs: list = []
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]):
            t = timed(lambda: outs.append(call(qi, ki, vi)))
            torch.cuda.synchronize()
        flush.zero_()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]):
            bwd_times.append(timed(lambda: outs[0].backward(d_out)))
            torch.cuda.synchronize()
        return t

    pattern("cudnn-frontend-both", None, cudnn_frontend_both)
    with open(out, "a", encoding="utf-8") as f:
        f.write(json.dumps({"pattern": "cudnn-frontend-both-backward", "bwd_times_ms": bwd_times}) + "\n")
    env = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(), "shape": [b, h, n, d]}
    with open(out, "a", encoding="utf-8") as f:
        f.write(json.dumps({"env": env}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
