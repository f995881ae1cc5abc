"""BLOOM-style attention with ALiBi, as its eager code runs it: Q, K, V as ``(batch·heads, seqlen,
headdim)``, the scores made by one ``baddbmm`` that adds the ALiBi bias (``(batch·heads, 1,
keys)``, broadcast over the queries) to the scaled Q Kᵀ, the causal mask applied with
``masked_fill`` against the dtype's minimum, the softmax in fp32 and cast back, dropout (off
outside training) and ``bmm`` with V::

    memmodel trace examples/attention/bloom_alibi.py:attention --gpu h200 --dtype bf16 \\
        --shape q=32,2048,128 --shape k=32,2048,128 --shape v=32,2048,128 --shape alibi=32,1,2048 \\
        --shape mask=1,2048,2048:bool --grad q,k,v
"""

import torch
import torch.nn.functional as F


def attention(q, k, v, alibi, mask, dropout_p=0.0, training=False):
    headdim = q.shape[-1]
    scores = torch.baddbmm(alibi, q, k.transpose(1, 2), beta=1.0, alpha=headdim**-0.5)
    scores = scores.masked_fill(mask, torch.finfo(scores.dtype).min)
    probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    probs = F.dropout(probs, dropout_p, training=training)
    return torch.bmm(probs, v)
