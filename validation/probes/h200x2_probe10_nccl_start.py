"""When NCCL's send/recv starts beside an attention kernel, and how long the ring's exchange takes.

Probe 10 (issue 15). The kernel trace of the ring (``cp_trace.py``) shows the send/recv posted
before a step's FlashAttention-2 forward starting only in that kernel's tail: at its end for grids
of 128 and 256 CTAs, when the 16 SMs given one CTA fewer go idle for 512 CTAs. This measures, on
each GPU of the pair, with ``torch.profiler`` (NCCL's and the attention's kernels, start and
duration in µs, the last of five repetitions after a warm-up, each queued behind a sleeping
kernel so that both are ready at once):

* ``idle``: one head of ``128 · (2 · SMs − k)`` queries and keys (d = 128, bf16, not causal: one
  wave of equal CTAs, two to an SM, that leaves ``k`` SMs with one CTA), with the ring's exchange
  of 16 MiB (K and V as two tensors) posted just before it, for ``k`` from 0 to 64: when NCCL's
  kernel starts against when the attention's does, for which ``k``;
* ``alone``: the exchange alone, as one tensor and as two (the ring's K and V) and four, of 4, 16
  and 64 MiB in all: NCCL's kernel time per pattern.

Run on the two-GPU machine: ``python validation/probes/h200x2_probe10_nccl_start.py OUT_DIR``; per rank
``nccl_start.rank{R}.json``.
"""

from __future__ import annotations

import json
import os
import sys

KS = (0, 4, 8, 12, 16, 20, 24, 32, 48, 64)
ALONE_MIB = (4, 16, 64)
PARTS = (1, 2, 4)


def worker(rank: int, out: str) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29547", rank=rank, world_size=2,
                            device_id=torch.device("cuda", rank))  # fmt: skip
    sms = torch.cuda.get_device_properties(rank).multi_processor_count
    nxt = prv = 1 - rank

    def post(bufs: list, recv: list) -> list:
        ops = [dist.P2POp(dist.isend, x, nxt) for x in bufs] + [dist.P2POp(dist.irecv, x, prv) for x in recv]
        return dist.batch_isend_irecv(ops)

    def traced(fn) -> dict:
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                dist.barrier()
                torch.cuda.synchronize()
                torch.cuda._sleep(int(2e7))
                fn()
                torch.cuda.synchronize()
        ks = [
            {"name": e.name[:80], "start_us": e.time_range.start, "dur_us": e.time_range.elapsed_us()}
            for e in prof.events()
            if e.device_type == torch.autograd.DeviceType.CUDA
        ]
        ks.sort(key=lambda k: k["start_us"])
        sleeps = [i for i, k in enumerate(ks) if "sleep" in k["name"].lower() or "spin" in k["name"].lower()]
        reps = []
        for j, i0 in enumerate(sleeps):
            seg = ks[i0 : sleeps[j + 1] if j + 1 < len(sleeps) else len(ks)]
            t0 = seg[0]["start_us"] + seg[0]["dur_us"]
            reps.append([{"name": k["name"], "start_us": k["start_us"] - t0, "dur_us": k["dur_us"]} for k in seg[1:]])
        return {"reps": reps}

    result: dict = {"rank": rank, "sms": sms, "idle": [], "alone": []}
    half = 8 * 2**20 // 2  # bf16 elements of 8 MiB
    kv = [torch.randn(half, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    kv_in = [torch.empty_like(x) for x in kv]
    for k in KS:
        n = 128 * (2 * sms - k)
        q, kk, v = (torch.randn(1, 1, n, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))

        def step(q=q, kk=kk, v=v) -> None:
            reqs = post(kv, kv_in)
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                torch.nn.functional.scaled_dot_product_attention(q, kk, v)
            for r in reqs:
                r.wait()

        row = {"k": k, "n": n, **traced(step)}
        result["idle"].append(row)
        print(rank, "idle", k, flush=True)
        del q, kk, v
    for mib in ALONE_MIB:
        for parts in PARTS:
            elems = mib * 2**20 // 2 // parts
            bufs = [torch.randn(elems, device="cuda", dtype=torch.bfloat16) for _ in range(parts)]
            recv = [torch.empty_like(x) for x in bufs]

            def exchange(bufs=bufs, recv=recv) -> None:
                for r in post(bufs, recv):
                    r.wait()

            result["alone"].append({"mib": mib, "parts": parts, **traced(exchange)})
            print(rank, "alone", mib, parts, flush=True)
    with open(os.path.join(out, f"nccl_start.rank{rank}.json"), "w") as f:
        json.dump(result, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    import torch.multiprocessing as mp

    os.environ.update({"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"})
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    os.makedirs(out, exist_ok=True)
    mp.spawn(worker, args=(out,), nprocs=2, join=True)
