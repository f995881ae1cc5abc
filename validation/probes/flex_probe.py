"""FlexAttention's decoding kernel on the lent H200, one factor at a time (issue #29, item 3): batch
at 8k keys, keys at batch 8, the BlockMask's block size at batch 8 × 8k (a page of 16, 64 or 128
tokens), Llama-3-8B's attention (32 query heads over 8 K/V heads, d 128, bf16, one query token).
Each shape is compiled afresh (``torch._dynamo.reset()``: no shape runs past dynamo's recompile
limit into the eager path), then timed and profiled as ``serving_probe.py`` does.

    python validation/probes/flex_probe.py OUT.jsonl
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serving_probe import BF16, DEV, emit, run_case  # noqa: E402

SHAPES = (
    *((b, 8192, None) for b in (1, 2, 4, 8, 16, 32, 64)),
    *((8, n, None) for n in (2048, 4096, 16384, 32768)),
    *((8, 8192, blk) for blk in (16, 64, 128)),
)


def main(out: str) -> None:
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    with open(out, "a") as fh:
        emit(fh, {"section": "env", "torch": torch.__version__, "gpu": torch.cuda.get_device_name()})
        for batch, n_kv, block in SHAPES:
            torch._dynamo.reset()
            flex = torch.compile(flex_attention, dynamic=False)
            shape = dict(impl="flex-decode", batch=batch, heads=32, kv_heads=8, n=1, n_kv=n_kv, d=128, dtype="bf16")
            shape["block_size"] = block

            def build(batch=batch, n_kv=n_kv, block=block, flex=flex):
                q = torch.randn(batch, 32, 1, 128, device=DEV, dtype=BF16)
                k = torch.randn(batch, 8, n_kv, 128, device=DEV, dtype=BF16)
                v = torch.randn(batch, 8, n_kv, 128, device=DEV, dtype=BF16)
                if block is None:
                    return lambda: flex(q, k, v, enable_gqa=True)
                mask = create_block_mask(
                    lambda b, h, q_idx, kv_idx: kv_idx >= 0, None, None, 1, n_kv, device=DEV, BLOCK_SIZE=block
                )
                return lambda: flex(q, k, v, block_mask=mask, enable_gqa=True)

            run_case(fh, "flex-decode", shape, build)


if __name__ == "__main__":
    main(sys.argv[1])
