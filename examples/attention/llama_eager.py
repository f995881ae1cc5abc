"""Llama-style eager attention as Hugging Face transformers runs it without SDPA: the K/V heads
repeated to every query head (an ``expand`` then a ``reshape``, which copies), Q Kᵀ times the
scaling, an additive mask sliced to the keys, the softmax in fp32 and cast back, dropout (off
outside training), P V, and the heads moved back (``transpose`` + ``contiguous``, a copy). The
query, key and value come in ``(batch, heads, seqlen, headdim)``; the mask is
``(batch, 1, seqlen, keys)`` at the model's dtype, and needs no gradient (``--grad``)::

    memmodel trace examples/attention/llama_eager.py:attention --gpu h200 --dtype bf16 --backward \\
        --shape query=1,32,4096,128 --shape key=1,8,4096,128 --shape value=1,8,4096,128 \\
        --shape attention_mask=1,1,4096,4096 --grad query,key,value
"""

import torch
import torch.nn.functional as F


def repeat_kv(states, groups):
    """(batch, kv_heads, seqlen, headdim) -> (batch, kv_heads · groups, seqlen, headdim)."""
    if groups == 1:
        return states
    batch, kv_heads, seqlen, headdim = states.shape
    wide = states[:, :, None, :, :].expand(batch, kv_heads, groups, seqlen, headdim)
    return wide.reshape(batch, kv_heads * groups, seqlen, headdim)


def attention(query, key, value, attention_mask=None, dropout=0.0, training=False):
    groups = query.shape[1] // key.shape[1]
    key_states = repeat_kv(key, groups)
    value_states = repeat_kv(value, groups)
    scaling = query.shape[-1] ** -0.5
    weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
    if attention_mask is not None:
        weights = weights + attention_mask[:, :, :, : key_states.shape[-2]]
    weights = F.softmax(weights, dim=-1, dtype=torch.float32).to(query.dtype)
    weights = F.dropout(weights, p=dropout, training=training)
    output = torch.matmul(weights, value_states)
    output = output.transpose(1, 2).contiguous()
    return output, weights
