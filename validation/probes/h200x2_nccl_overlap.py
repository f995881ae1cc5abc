"""What an overlapped NCCL send/recv costs the attention kernel running beside it.

The ring's step on each of two GPUs is a FlashAttention-2 forward of 8192 queries over 8192 keys
(d = 128, bf16) while NCCL sends this GPU's K/V block to the other and receives the other's
(``batch_isend_irecv``, as ``memmodel.gpu.context_parallel`` does). Each GPU, for 2 and 8
heads: the kernel alone; the send/recv alone; both at once (the exchange posted first, the
kernel queued on the compute stream right after), every time a CUDA-event median of 30. If
NCCL's kernel holds some SMs while it runs, a grid of one CTA per SM runs some CTAs two to an SM
and takes longer. NCCL_DEBUG=INFO's channel lines go to stderr.

Run on the two-GPU machine: ``python validation/probes/h200x2_nccl_overlap.py OUT_DIR``.
"""

from __future__ import annotations

import json
import os
import sys


def worker(rank: int, out: str) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29533", rank=rank, world_size=2,
                            device_id=torch.device("cuda", rank))  # fmt: skip
    other = 1 - rank
    g = torch.Generator(device="cuda").manual_seed(rank)
    rows = []
    for heads in (2, 8):
        q, k, v = (torch.randn(1, heads, 8192, 128, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
        rk, rv = torch.empty_like(k), torch.empty_like(v)

        def attend(q=q, k=k, v=v):
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v)

        def exchange(k=k, v=v, rk=rk, rv=rv):
            ops = [dist.P2POp(dist.isend, x, other) for x in (k, v)]
            ops += [dist.P2POp(dist.irecv, x, other) for x in (rk, rv)]
            return dist.batch_isend_irecv(ops)

        def timed(fn, reps=30):
            for _ in range(5):
                r = fn()
            torch.cuda.synchronize()
            dist.barrier()
            times = []
            for _ in range(reps):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                dist.barrier()
                torch.cuda.synchronize()
                a.record()
                r = fn()
                b.record()
                if isinstance(r, list):
                    for w in r:
                        w.wait()
                torch.cuda.synchronize()
                times.append(a.elapsed_time(b) * 1e-3)
            return sorted(times)[len(times) // 2]

        def comm_only():
            reqs = exchange()
            for w in reqs:
                w.wait()
            return None

        def both():
            reqs = exchange()  # NCCL's stream
            attend()  # the compute stream, timed by the events around it
            return reqs

        alone = timed(attend)
        comm = timed(comm_only)
        beside = timed(both)
        rows.append({"rank": rank, "heads": heads, "n": 8192, "d": 128, "dtype": "bf16",
                     "kernel_alone_s": alone, "exchange_alone_s": comm, "kernel_beside_exchange_s": beside,
                     "bytes_each_way": 2 * k.numel() * 2})  # fmt: skip
        print(rows[-1], flush=True)
    with open(os.path.join(out, f"nccl_overlap.rank{rank}.json"), "w") as f:
        json.dump(rows, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    import torch.multiprocessing as mp

    os.environ.update({"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"})
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    os.makedirs(out, exist_ok=True)
    mp.spawn(worker, args=(out,), nprocs=2, join=True)
