"""A ViT block's attention as timm's eager path writes it: one ``linear`` makes Q, K and V,
``reshape`` and ``permute`` split the heads (``unbind`` takes the three apart), Q is scaled, the
scores ``q @ kᵀ``, softmax, P V, the heads merged (``transpose`` + ``reshape``, a copy) and the
output projection. ``x`` is ``(batch, tokens, dim)``; the weights ``(3·dim, dim)`` and
``(dim, dim)``::

    memmodel trace examples/attention/vit_attention.py:attention --gpu h200 --dtype bf16 \\
        --shape x=32,197,768 --shape qkv_weight=2304,768 --shape qkv_bias=2304 \\
        --shape proj_weight=768,768 --shape proj_bias=768
"""

import torch.nn.functional as F


def attention(x, qkv_weight, qkv_bias, proj_weight, proj_bias, num_heads=12):
    batch, tokens, dim = x.shape
    headdim = dim // num_heads
    qkv = F.linear(x, qkv_weight, qkv_bias).reshape(batch, tokens, 3, num_heads, headdim).permute(2, 0, 3, 1, 4)
    q, k, v = qkv.unbind(0)
    q = q * headdim**-0.5
    attn = q @ k.transpose(-2, -1)
    attn = attn.softmax(dim=-1)
    out = (attn @ v).transpose(1, 2).reshape(batch, tokens, dim)
    return F.linear(out, proj_weight, proj_bias)
