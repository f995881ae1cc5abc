"""Probe 8: when and where each CTA of a causal attention grid runs.

memmodel's Triton FlashAttention forward (memmodel.gpu.triton_fa, 128 × 64 tiles, d = 128, fp16,
causal; the grid is Q block fastest, then head, as FlashAttention-2's), with each program writing
its SM (``%smid``) and the global timer (``%globaltimer``, ns) when it starts and when it ends.
Shapes: 1, 2, 4, 8 and 16 heads of 16384 and of 32768 tokens (128 to 4096 CTAs: one wave to
fifteen). For each: the kernel's time (CUDA events, median of 10) and, from one more launch, every
CTA's (start, end, SM), written to ``OUT/cta_times.json``. What it answers: do CTAs start in grid
order into the slot that frees first; does a CTA's time follow its blocks; does one alone on an SM
run faster; how long is the tail against the list schedule (tests/sims/causal_tail_sim.py).

Run on the GPU machine: ``python validation/probes/h200_probe8_cta_times.py OUT``.
"""

from __future__ import annotations

import json
import math
import os
import sys

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", ".."))
from memmodel.gpu.triton_fa import _attn_fwd_inner  # noqa: E402


@triton.jit
def _now():
    return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)


@triton.jit
def _smid():
    return tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r", [], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _timed_fwd(Q, K, V, Out, Times, N, qk_scale, H, HEAD_DIM: tl.constexpr, BLOCK_Q: tl.constexpr,
               BLOCK_KV: tl.constexpr):  # fmt: skip
    t0 = _now()
    start_m = tl.program_id(0)
    h = tl.program_id(1)
    base = h.to(tl.int64) * N * HEAD_DIM
    m0 = start_m * BLOCK_Q
    offs_m = m0 + tl.arange(0, BLOCK_Q)
    offs_n = tl.arange(0, BLOCK_KV)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + base + offs_m[:, None] * HEAD_DIM + offs_d[None, :])
    m_i = tl.full([BLOCK_Q], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_Q], dtype=tl.float32)
    acc = tl.zeros([BLOCK_Q, HEAD_DIM], dtype=tl.float32)
    k_ptrs = K + base + offs_n[:, None] * HEAD_DIM + offs_d[None, :]
    v_ptrs = V + base + offs_n[:, None] * HEAD_DIM + offs_d[None, :]
    kv_end = m0 + BLOCK_Q
    full_end = ((m0 + 1) // BLOCK_KV) * BLOCK_KV
    acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, k_ptrs, v_ptrs, HEAD_DIM, HEAD_DIM, 0, full_end,
                                    offs_m, offs_n, N, qk_scale, BLOCK_KV, False, True, False)  # fmt: skip
    acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, k_ptrs + full_end * HEAD_DIM, v_ptrs + full_end * HEAD_DIM,
                                    HEAD_DIM, HEAD_DIM, full_end, kv_end, offs_m, offs_n, N, qk_scale, BLOCK_KV,
                                    True, True, False)  # fmt: skip
    acc = acc / l_i[:, None]
    tl.store(Out + base + offs_m[:, None] * HEAD_DIM + offs_d[None, :], acc.to(Out.dtype.element_ty))
    t1 = _now()
    sm = _smid()
    row = (h * tl.num_programs(0) + start_m) * 3
    tl.store(Times + row, t0)
    tl.store(Times + row + 1, t1)
    tl.store(Times + row + 2, sm.to(tl.int64))


def main(out: str) -> None:
    torch.manual_seed(0)
    d, bq, bkv = 128, 128, 64
    rows = []
    for n in (16384, 32768):
        for heads in (1, 2, 4, 8, 16):
            q, k, v = (torch.randn(heads, n, d, device="cuda", dtype=torch.float16) for _ in range(3))
            o = torch.empty_like(q)
            ctas = heads * (n // bq)
            times = torch.zeros(ctas * 3, dtype=torch.int64, device="cuda")
            grid = (n // bq, heads)
            scale = 1.4426950408889634 / math.sqrt(d)

            def launch(q=q, k=k, v=v, o=o, times=times, grid=grid, n=n, heads=heads, scale=scale):
                _timed_fwd[grid](q, k, v, o, times, n, scale, heads, HEAD_DIM=d, BLOCK_Q=bq, BLOCK_KV=bkv,
                                 num_warps=4, num_stages=2)  # fmt: skip

            for _ in range(3):
                launch()
            torch.cuda.synchronize()
            ts = []
            for _ in range(10):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                launch()
                b.record()
                torch.cuda.synchronize()
                ts.append(a.elapsed_time(b) * 1e-3)
            launch()
            torch.cuda.synchronize()
            t = times.view(ctas, 3).cpu().tolist()
            t0 = min(r[0] for r in t)
            rows.append({
                "n": n, "heads": heads, "d": d, "block_q": bq, "block_kv": bkv, "kernel_s": sorted(ts)[5],
                "ctas": [[r[0] - t0, r[1] - t0, r[2]] for r in t],
            })  # fmt: skip
            print(n, heads, ctas, sorted(ts)[5], max(r[1] for r in t) - t0, flush=True)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "cta_times.json"), "w") as f:
        json.dump(rows, f)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
