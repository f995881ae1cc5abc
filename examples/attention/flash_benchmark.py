"""Standard attention as the FlashAttention repository's benchmarks time it, in two forms.

``benchmark_baseline`` is the baseline of ``benchmarks/benchmark_flash_attention.py`` (the FA2
paper's and README's "PyTorch" bars): Q, K and V packed as ``qkv`` ``(batch, seqlen, 3, heads,
headdim)``, Q and Kᵀ moved into ``bmm``'s layout (copies), the scores made by one ``baddbmm`` into
a fresh buffer with the scale as its ``alpha`` (no separate scaling kernel), a causal mask built as
``triu`` of a -10000 matrix in fp32, cast and added, softmax, dropout (none at p = 0), and P V as an
``einsum`` (V copied into its layout)::

    memmodel trace examples/attention/flash_benchmark.py:benchmark_baseline --gpu h100-sxm --dtype fp16 \
        --backward --shape qkv=2,8192,3,32,64

``attention`` is the same with Q, K and V apart, in ``(batch, seqlen, heads, headdim)``, both
products as ``einsum`` and the scale applied to Q::

    memmodel trace examples/attention/flash_benchmark.py:attention --gpu h200 --dtype bf16 --backward \
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


def benchmark_baseline(qkv, causal=True, dropout_p=0.0):
    batch, seqlen, _, heads, headdim = qkv.shape
    q, k, v = qkv.unbind(dim=2)
    q = q.transpose(1, 2).reshape(batch * heads, seqlen, headdim)
    k = k.permute(0, 2, 3, 1).reshape(batch * heads, headdim, seqlen)
    buffer = torch.empty(batch * heads, seqlen, seqlen, dtype=qkv.dtype, device=qkv.device)
    scores = torch.baddbmm(buffer, q, k, beta=0, alpha=1.0 / math.sqrt(headdim)).view(batch, heads, seqlen, seqlen)
    if causal:
        mask = torch.triu(torch.full((seqlen, seqlen), -10000.0, device=scores.device), 1)
        scores = scores + mask.to(dtype=scores.dtype)
    attention = torch.softmax(scores, dim=-1)
    attention = F.dropout(attention, dropout_p)
    out = torch.einsum("bhts,bshd->bthd", attention, v)
    return out.to(dtype=qkv.dtype)
