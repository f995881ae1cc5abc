"""FlashInfer's CUDA-core paged decode kernel under Nsight Compute's launch statistics, on the
serving probe's reference shapes (issue #29): the registers a thread, the CTAs an SM holds and the
grid the plan launched (its K/V chunks), the figures ``memmodel.traffic.paged`` assumes
(``FLASHINFER_DECODE_REGISTERS``). Run under ncu with FlashInfer on PYTHONPATH::

    ncu --kernel-name regex:BatchDecodeWithPagedKVCache --csv --metrics launch__registers_per_thread,\\
launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem,launch__grid_size,launch__block_size,\\
launch__shared_mem_per_block_dynamic python3 validation/probes/flashinfer_occupancy_probe.py > occupancy.csv

One decode a shape, in the order of :data:`SHAPES`; the plan's chunks are the grid over B · H_kv.
"""

from __future__ import annotations

import torch

#: (query heads, K/V heads, d, batch, keys, page): the serving probe's shapes (group 4 at d 128,
#: group 1 at d 64), batch 1-96
SHAPES = (
    (32, 8, 128, 1, 8192, 16),
    (32, 8, 128, 16, 4096, 16),
    (32, 8, 128, 16, 16384, 16),
    (32, 8, 128, 96, 2048, 16),
    (16, 16, 64, 1, 8192, 16),
    (16, 16, 64, 16, 4096, 16),
)


def main() -> None:
    import flashinfer as fi

    dev, dt = "cuda", torch.bfloat16
    ws = torch.empty(128 << 20, dtype=torch.uint8, device=dev)
    g = torch.Generator().manual_seed(0)
    for hq, hk, d, b, n_kv, p in SHAPES:
        per = -(-n_kv // p)
        pool = 2 * b * per
        indices = torch.randperm(pool, generator=g)[: b * per].to(torch.int32).to(dev)
        indptr = (torch.arange(b + 1, dtype=torch.int32) * per).to(dev)
        last = torch.full((b,), n_kv - (per - 1) * p, dtype=torch.int32, device=dev)
        k = torch.randn(pool, p, hk, d, dtype=dt, device=dev)
        v = torch.randn(pool, p, hk, d, dtype=dt, device=dev)
        q = torch.randn(b, hq, d, dtype=dt, device=dev)
        wrapper = fi.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_tensor_cores=False)
        wrapper.plan(indptr, indices, last, hq, hk, d, p, q_data_type=dt, kv_data_type=dt)
        wrapper.run(q, (k, v))
        torch.cuda.synchronize()
        print(f"shape heads={hq} kv_heads={hk} d={d} batch={b} n_kv={n_kv} page={p}", flush=True)


if __name__ == "__main__":
    main()
