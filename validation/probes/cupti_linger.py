"""Does a torch.profiler session slow the host's later calls (issue #30)? validate profiles each case's
kernels (torch.profiler, CUDA activity) before it times the case's calls; if CUPTI stays attached
after the session, every later launch pays its callbacks and the call times measured are not the
ones a user sees. The same calls timed before any profiler session, after one, and after one in a
process started with ``TEARDOWN_CUPTI=1`` (Kineto's switch to finalize CUPTI when a session ends).

    python validation/probes/cupti_linger.py OUT.jsonl [LABEL]

One JSON row per (phase, call): host seconds behind a sleeping kernel, a user's synchronised call,
the queued pace.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from memmodel.gpu.calibrate_host import call_seconds, host_seconds, kernels_of, queued_seconds  # noqa: E402


def calls() -> list[tuple[str, object, object]]:
    """(name, backend or None, fn)."""
    g = torch.Generator(device="cuda").manual_seed(0)

    def t(*shape, dtype=torch.bfloat16):
        return torch.randn(*shape, device="cuda", dtype=dtype, generator=g)

    q, k, v = t(32, 12, 128, 64), t(32, 12, 128, 64), t(32, 12, 128, 64)
    qd, kd, vd = t(1, 32, 1, 128), t(1, 8, 4096, 128), t(1, 8, 4096, 128)
    x, y = t(1, 8, 128, 64), t(1, 8, 128, 64)
    a, b = t(8, 128, 64), t(8, 64, 128)
    return [
        ("sdpa-flash b32h12n128d64", SDPBackend.FLASH_ATTENTION, lambda: F.scaled_dot_product_attention(q, k, v)),
        ("sdpa-cudnn b32h12n128d64", SDPBackend.CUDNN_ATTENTION, lambda: F.scaled_dot_product_attention(q, k, v)),
        (
            "sdpa-cudnn decode b1h32kv8nkv4096d128",
            SDPBackend.CUDNN_ATTENTION,
            lambda: F.scaled_dot_product_attention(qd, kd, vd, enable_gqa=True),
        ),
        ("add", None, lambda: x + y),
        ("bmm", None, lambda: torch.bmm(a, b)),
    ]


def measure(phase: str, label: str, out) -> None:
    for name, backend, fn in calls():
        if backend is None:
            row = {"host_s": host_seconds(fn), "call_s": call_seconds(fn), "queued_s": queued_seconds(fn)}
        else:
            with sdpa_kernel([backend]):
                row = {"host_s": host_seconds(fn), "call_s": call_seconds(fn), "queued_s": queued_seconds(fn)}
        row = {"label": label, "phase": phase, "call": name, **row}
        out.write(json.dumps(row) + "\n")
        out.flush()
        print(f"{label:10s} {phase:16s} {name:40s} host {row['host_s'] * 1e6:6.1f} us  call {row['call_s'] * 1e6:6.1f}"
              f"  queued {row['queued_s'] * 1e6:6.1f}")  # fmt: skip


def main() -> None:
    path, label = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "default"
    print("TEARDOWN_CUPTI =", os.environ.get("TEARDOWN_CUPTI"), "torch", torch.__version__)
    with open(path, "a") as out:
        measure("fresh", label, out)
        kernels_of(calls()[3][2])  # one profiler session (CUDA activity), as validate runs per case
        measure("after-profiler", label, out)
        kernels_of(calls()[3][2])
        measure("after-profiler-2", label, out)


if __name__ == "__main__":
    main()
