"""What PyTorch's scaled_dot_product_attention runs on this GPU: the backend it picks
(``torch._fused_sdp_choice``) and the kernels it launches (names carry FlashAttention-2's
tile traits), for the inputs memmodel's ``--impl auto`` rule covers. Prints one JSON line
per input. Needs a CUDA GPU.

    python3 validation/probes/explore_sdpa.py > sdpa-choice.jsonl
"""

from __future__ import annotations

import json

import torch
from torch.nn.attention import SDPBackend

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
# (batch, heads, kv heads, n, n_kv, d, dtype, causal, dropout)
INPUTS = [
    (4, 16, 16, 1024, 1024, 64, "fp16", False, 0.0),
    (4, 16, 16, 1024, 1024, 64, "fp16", False, 0.1),
    (4, 16, 16, 1024, 1024, 80, "fp16", True, 0.0),
    (4, 16, 16, 1024, 1024, 96, "bf16", False, 0.0),
    (4, 16, 16, 1024, 1024, 128, "bf16", True, 0.0),
    (4, 16, 16, 1024, 1024, 128, "fp16", False, 0.1),
    (4, 16, 16, 1024, 1024, 192, "bf16", False, 0.0),
    (4, 16, 16, 1024, 1024, 256, "bf16", True, 0.0),
    (4, 16, 16, 1024, 1024, 64, "fp32", False, 0.0),
    (4, 16, 16, 1024, 1024, 512, "fp16", False, 0.0),
    (2, 32, 8, 2048, 2048, 128, "bf16", True, 0.0),
    (8, 32, 8, 1, 8192, 128, "bf16", False, 0.0),
    (32, 16, 16, 257, 257, 64, "fp16", False, 0.0),
]


def kernels(fn) -> list[str]:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


def main() -> None:
    for b, h, hk, n, nk, d, dt, causal, p in INPUTS:
        dtype = DTYPES[dt]
        q = torch.randn(b, h, n, d, device="cuda", dtype=dtype)
        k = torch.randn(b, hk, nk, d, device="cuda", dtype=dtype)
        v = torch.randn(b, hk, nk, d, device="cuda", dtype=dtype)
        gqa = hk != h
        row = {"input": [b, h, hk, n, nk, d, dt, causal, p], "device": torch.cuda.get_device_name()}
        try:
            kq, kv = (k, v) if not gqa else (k.repeat_interleave(h // hk, 1), v.repeat_interleave(h // hk, 1))
            choice = torch._fused_sdp_choice(q, kq, kv, None, p, causal)
            row["choice"] = SDPBackend(choice).name
        except Exception as exc:  # an input no check accepts
            row["choice_error"] = str(exc).splitlines()[0][:200]

        def run(q=q, k=k, v=v, causal=causal, p=p, gqa=gqa) -> None:
            torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, dropout_p=p, enable_gqa=gqa)

        try:
            run()
            row["kernels"] = kernels(run)
        except Exception as exc:
            row["run_error"] = str(exc).splitlines()[0][:200]
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
