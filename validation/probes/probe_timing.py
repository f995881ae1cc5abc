"""What the one-kernel probes share: a median of CUDA-event timings of one call, and the kernels
the profiler (CUPTI) saw in one call. Imported by ``fp8_cast_probe.py`` and
``softmax_paths_probe.py``, run from the repository root (``python validation/probes/X.py``: this
folder is first on the path)."""

from __future__ import annotations

import statistics

import torch


def timed(fn, reps: int = 20) -> float:
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    return statistics.median(times)


def run_sections(out: str, sections) -> None:
    """Write ``out``: an ``env`` line (torch, GPU, CUDA), then each of ``sections`` (callables
    taking the open file) in turn; a section that fails leaves an ``error`` line naming it and the
    others run (what was measured is kept)."""
    import json

    with open(out, "w") as f:
        env = {"section": "env", "torch": torch.__version__, "gpu": torch.cuda.get_device_name()}
        env["cuda"] = torch.version.cuda
        f.write(json.dumps(env) + "\n")
        for part in sections:
            try:
                part(f)
            except Exception as exc:  # keep what was measured; say which part failed
                f.write(json.dumps({"section": "error", "part": part.__name__, "error": repr(exc)[:300]}) + "\n")
                print("error in", part.__name__, repr(exc)[:300], flush=True)
            torch.cuda.empty_cache()


def kernel_names(fn) -> list[dict]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [
        {"name": e.key[:200], "us": e.device_time_total / max(e.count, 1)}
        for e in prof.key_averages()
        if e.device_time_total > 0
    ]
