"""Where the two-GPU records' worst cases spend their time: a kernel trace of each rank.

The cases whose wall time or speed-up the model misses most (h200x2-cp and -cp-2: ring over
4, 2 and 8 heads of 16k at d = 128, not causal; Ulysses over 4 query and 2 K/V heads of 32k,
causal), run as ``validate --gpus 2`` runs them (``memmodel.gpu.context_parallel``, queued
behind a sleeping kernel so the GPUs set the pace), under ``torch.profiler`` on both ranks,
five repetitions after a warm-up. Besides, on each rank alone: each step's attention kernel
by itself and beside an exchange of the step's K/V (the ring), the single-GPU reference.
Per rank, every GPU kernel's name, stream, start and duration (µs) goes to
``cp_trace.rank{R}.json``.

Run on the two-GPU machine: ``python validation/probes/h200x2_cp_trace.py OUT_DIR``.
"""

from __future__ import annotations

import json
import os
import sys

CASES = (
    "scheme=ring,p=2,n=16384,d=128,heads=4",
    "scheme=ring,p=2,n=16384,d=128,heads=2",
    "scheme=ring,p=2,n=16384,d=128,heads=8",
    "scheme=ulysses,p=2,n=32768,d=128,heads=4,kv_heads=2,causal=1",
)


def worker(rank: int, out: str) -> None:
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile

    from memmodel.gpu.context_parallel import backend, ring_forward, shard, ulysses_forward
    from memmodel.gpu.cp_run import _inputs
    from memmodel.gpu.run import queue_behind_sleep
    from memmodel.parallel import parse_cp_case

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29541", rank=rank, world_size=2,
                            device_id=torch.device("cuda", rank))  # fmt: skip
    attn = backend(torch, "flash")
    result = []
    for spec in CASES:
        case = parse_cp_case(spec)
        q, k, v, _ = _inputs(torch, case, "cuda")
        zig = case.scheme == "ring" and case.causal
        ql, kl, vl = (shard(torch, x, 2, rank, zig) for x in (q, k, v))
        scale = 1.0 / case.d**0.5

        def dist_fwd(case=case, ql=ql, kl=kl, vl=vl):
            if case.scheme == "ring":
                return ring_forward(torch, dist, attn, ql, kl, vl, causal=case.causal)
            return ulysses_forward(torch, dist, attn, ql, kl, vl, causal=case.causal)

        def single(case=case, q=q, k=k, v=v, scale=scale):
            return attn.forward(q, k, v, case.causal, scale)

        def step_alone(case=case, ql=ql, kl=kl, vl=vl, scale=scale):
            return attn.forward(ql, kl, vl, False, scale)

        runs = {"distributed": dist_fwd, "single_gpu": single}
        if case.scheme == "ring":
            runs["step_kernel_alone"] = step_alone
        entry = {"case": spec, "rank": rank, "runs": {}}
        for label, fn in runs.items():
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
            dist.barrier()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(5):
                    dist.barrier()
                    torch.cuda.synchronize()
                    queue_behind_sleep(torch, 1, 0.01)
                    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    a.record()
                    fn()
                    b.record()
                    torch.cuda.synchronize()
            kernels = [
                {
                    "name": e.name[:160],
                    "start_us": e.time_range.start,
                    "dur_us": e.time_range.elapsed_us(),
                    "device": e.device_index,
                }  # fmt: skip
                for e in prof.events()
                if e.device_type == torch.autograd.DeviceType.CUDA
            ]
            entry["runs"][label] = {"kernels": kernels, "event_s": a.elapsed_time(b) * 1e-3}
            print(rank, spec, label, a.elapsed_time(b), flush=True)
        result.append(entry)
    with open(os.path.join(out, f"cp_trace.rank{rank}.json"), "w") as f:
        json.dump(result, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    import torch.multiprocessing as mp

    os.environ.update({"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"})
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    os.makedirs(out, exist_ok=True)
    mp.spawn(worker, args=(out,), nprocs=2, join=True)
