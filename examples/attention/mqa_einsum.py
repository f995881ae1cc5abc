"""Multi-query attention written with ``einsum`` (one K/V head shared by every query head, as
Falcon-7B and PaLM use it): Q ``(batch, heads, seqlen, headdim)``, K and V ``(batch, keys,
headdim)``; the scores ``einsum("bhqd,bkd->bhqk")`` scaled, a causal mask (a boolean
``(seqlen, keys)`` matrix) applied with ``masked_fill``, softmax, and ``einsum("bhqk,bkd->bhqd")``.
Decoding: one query token against the cache (no mask)::

    memmodel trace examples/attention/mqa_einsum.py:attention --gpu h200 --dtype bf16 \\
        --shape q=16,71,1,64 --shape k=16,2048,64 --shape v=16,2048,64
"""

import math

import torch


def attention(q, k, v, mask=None):
    scores = torch.einsum("bhqd,bkd->bhqk", q, k) * (1.0 / math.sqrt(q.shape[-1]))
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return torch.einsum("bhqk,bkd->bhqd", probs, v)
