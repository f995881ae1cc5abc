"""A GPT-2 style block's attention, as GPT-2's eager attention runs it: the fused QKV projection
(``addmm``, GPT-2's Conv1D), the heads split by views, Q Kᵀ divided by √d (a 0-dim tensor), the
causal mask applied with ``where`` against the dtype's minimum (a boolean ``bias`` buffer sliced
to the sequence), softmax, attention dropout, P V, the heads merged (a copy), the output
projection and the residual dropout. ``x`` is ``(batch, seqlen, embed)``; the weights are
``(embed, 3·embed)`` and ``(embed, embed)``; ``bias`` is the model's ``(1, 1, max_len, max_len)``
mask::

    memmodel trace examples/attention/gpt2_block.py:attention --gpu h200 --dtype bf16 --backward \\
        --shape x=8,1024,768 --shape c_attn_weight=768,2304 --shape c_attn_bias=2304 \\
        --shape c_proj_weight=768,768 --shape c_proj_bias=768 --shape bias=1,1,1024,1024:bool
"""

import torch
import torch.nn.functional as F


def attention(x, c_attn_weight, c_attn_bias, c_proj_weight, c_proj_bias, bias, n_head=12, dropout_p=0.1):
    batch, seqlen, embed = x.shape
    qkv = torch.addmm(c_attn_bias, x.view(-1, embed), c_attn_weight).view(batch, seqlen, 3 * embed)
    q, k, v = qkv.split(embed, dim=2)

    def heads(t):
        return t.view(batch, seqlen, n_head, embed // n_head).permute(0, 2, 1, 3)

    q, k, v = heads(q), heads(k), heads(v)
    w = torch.matmul(q, k.transpose(-1, -2))
    w = w / torch.full([], v.size(-1) ** 0.5, dtype=w.dtype, device=w.device)
    causal = bias[:, :, :seqlen, :seqlen]
    lowest = torch.full([], torch.finfo(w.dtype).min, dtype=w.dtype, device=w.device)
    w = torch.where(causal, w, lowest)
    w = F.softmax(w, dim=-1)
    w = F.dropout(w, dropout_p, training=True)
    y = torch.matmul(w, v)
    y = y.permute(0, 2, 1, 3).contiguous().view(batch, seqlen, embed)
    y = torch.addmm(c_proj_bias, y.view(-1, embed), c_proj_weight).view(batch, seqlen, embed)
    return F.dropout(y, dropout_p, training=True)
