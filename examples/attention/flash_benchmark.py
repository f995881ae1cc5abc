"""Standard attention as the FlashAttention repository's benchmarks write their PyTorch baseline:
Q, K, V in the ``(batch, seqlen, heads, headdim)`` layout, the products as ``einsum`` (whose
permutes materialise as copies before each ``bmm``), the scale applied to Q, a causal mask built
as ``triu`` of a -10000 matrix and added, softmax, dropout::

    memmodel trace examples/attention/flash_benchmark.py:attention --gpu h200 --dtype bf16 --backward \\
        --shape q=2,4096,16,64 --shape k=2,4096,16,64 --shape v=2,4096,16,64
"""

import math

import torch
import torch.nn.functional as F


def attention(q, k, v, causal=True, dropout_p=0.0):
    seqlen, headdim = q.shape[1], q.shape[-1]
    scores = torch.einsum("bthd,bshd->bhts", q * (1.0 / math.sqrt(headdim)), k)
    if causal:
        mask = torch.triu(torch.full((seqlen, seqlen), -10000.0, device=scores.device), 1)
        scores = scores + mask.to(dtype=scores.dtype)
    attention = torch.softmax(scores, dim=-1)
    attention = F.dropout(attention, dropout_p)
    out = torch.einsum("bhts,bshd->bthd", attention, v)
    return out.to(dtype=q.dtype)
