"""Probe 12: how much does one kernel's HBM traffic vary with where its inputs sit?

Run on the GPU machine, from the repository root, under Nsight Compute (one process per
repetition; each process gets its own physical pages):

    for p in 1 2 3; do
      ncu --csv --print-units base --clock-control none --cache-control all \\
          --kernel-name regex:'flash_fwd_kernel|flash_fprop|_attn_fwd' \\
          --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,gpu__time_duration.sum \\
          python3 validation/probes/h200_probe12_knee_repeat.py $OUT/order-$p.json > $OUT/ncu-$p.csv
    done

Each case's Q, K and V are views into one pool filled once, placed at several byte offsets
(``OFFSETS``); one forward per offset, in the order written to the JSON file. Nsight Compute
flushes the L2 before every kernel, so each launch starts cold: any difference between the
launches of one case is the L2's response to the addresses (its hashing of physical addresses
to slices and sets), not to what ran before. ``analyse.py`` reads the files back.
"""

from __future__ import annotations

import json
import sys

import torch

from memmodel.cases import parse_case
from memmodel.gpu.run import sdpa_backend

CASES = [
    # causal FlashAttention-2, one head, in the knee (the model's curve points and misses)
    "impl=sdpa-flash,batch=1,heads=1,n=86016,d=128,causal=1",
    "impl=sdpa-flash,batch=1,heads=1,n=90112,d=128,causal=1",
    "impl=sdpa-flash,batch=1,heads=1,n=104448,d=128,causal=1",
    # causal FlashAttention-2, several heads and GQA, in the knee
    "impl=sdpa-flash,batch=1,heads=4,n=40960,d=128,causal=1",
    "impl=sdpa-flash,batch=1,heads=32,kv_heads=8,n=49152,d=128,causal=1,dtype=bf16",
    "impl=sdpa-flash,batch=1,heads=6,n=24576,d=256,causal=1",
    "impl=sdpa-flash,batch=1,heads=8,n=16384,d=128,causal=1",
    # cuDNN causal, one head
    "impl=sdpa-cudnn,batch=1,heads=1,n=114688,d=128,causal=1,dtype=bf16",
    "impl=sdpa-cudnn,batch=1,heads=1,n=229376,d=64,causal=1",
    # non-causal heads larger than the L2, several heads; a control that fits
    "impl=sdpa-flash,batch=1,heads=1,n=524288,d=128",
    "impl=sdpa-flash,batch=1,heads=4,n=65536,d=64",
    "impl=sdpa-flash,batch=1,heads=1,n=32768,d=128",
    # our Triton kernel, one causal head of 262k
    "impl=triton,batch=1,heads=1,n=262144,d=128,causal=1,block_q=64,block_kv=64",
]
OFFSETS = [0, 64 << 10, 2 << 20, 34 << 20]  # bytes into the pool
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def views(case, offset: int):
    dt = DTYPES[case.dtype]
    e = torch.tensor([], dtype=dt).element_size()
    shapes = [
        (case.batch, case.heads, case.n, case.d),
        (case.batch, case.kv_heads_, case.n_kv_, case.d),
        (case.batch, case.kv_heads_, case.n_kv_, case.d),
    ]
    sizes = [a * b * c * d for a, b, c, d in shapes]
    pool = torch.empty(sum(sizes) + max(OFFSETS) // e, device="cuda", dtype=dt)
    pool.normal_()
    out, at = [], offset // e
    for shape, size in zip(shapes, sizes):
        out.append(pool[at : at + size].view(shape))
        at += size
    return pool, out


def forward(case, q, k, v):
    if case.impl == "triton":
        from memmodel.gpu.triton_fa import attention

        return attention(q, k, v, causal=case.causal, block_q=case.block_q, block_kv=case.block_kv)
    from torch.nn.attention import sdpa_kernel

    kwargs = {"is_causal": case.causal}
    if case.kv_heads_ != case.heads:
        kwargs["enable_gqa"] = True
    with sdpa_kernel([sdpa_backend(case)]):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, **kwargs)


def main() -> int:
    order = []
    for spec in CASES:
        case = parse_case(spec)
        for offset in OFFSETS:
            pool, (q, k, v) = views(case, offset)
            forward(case, q, k, v)
            torch.cuda.synchronize()
            order.append({"case": case.id, "offset": offset, "pool": pool.data_ptr()})
            del pool, q, k, v
            with open(sys.argv[1], "w") as f:  # kept after every launch
                json.dump(order, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
