"""Standard attention written the way memmodel's ``--standard eager`` ledger counts it.

One line per kernel of :func:`memmodel.traffic.standard.standard_eager`: ``S = Q Kᵀ``, ``S · 1/√d``,
``masked_fill_`` with a boolean mask, ``softmax``, ``dropout``, ``P V``; autograd adds their
gradients. A GQA group's query heads are stacked as rows of one K/V head (the ledger's layout),
so the mask is ``(G·N) × N_kv``. ``memmodel trace`` of it reproduces ``memmodel compare
--standard eager`` (tests/test_trace.py checks it)::

    memmodel trace examples/attention/memmodel_eager.py:attention --dtype bf16 --backward \\
        --shape q=1,16,4096,64 --shape k=1,16,4096,64 --shape v=1,16,4096,64 \\
        --shape mask=4096,4096:bool
"""

import math

import torch


def attention(q, k, v, mask=None, dropout_p=0.0):
    batch, heads, n, d = q.shape
    kv_heads = k.shape[1]
    if heads != kv_heads:  # GQA: the group's query heads as rows of its K/V head (a view)
        q = q.reshape(batch, kv_heads, heads // kv_heads * n, d)
    s = q @ k.transpose(-2, -1)
    s = s * (1.0 / math.sqrt(d))
    if mask is not None:
        s.masked_fill_(mask, float("-inf"))
    p = torch.softmax(s, dim=-1)
    if dropout_p > 0:
        p = torch.nn.functional.dropout(p, dropout_p)
    o = p @ v
    return o.reshape(batch, heads, n, v.shape[-1])


def attention_dropout(q, k, v, mask=None):
    """The same with dropout 0.1 on P (compare --dropout 0.1)."""
    return attention(q, k, v, mask, dropout_p=0.1)
