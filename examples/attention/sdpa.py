"""A plain ``scaled_dot_product_attention`` call: memmodel models it as the fused kernel PyTorch
would choose for the GPU and dtype (``memmodel compare --impl auto``), forward and backward::

    memmodel trace examples/attention/sdpa.py:attention --gpu h200 --dtype bf16 --backward \\
        --shape q=1,16,4096,128 --shape k=1,16,4096,128 --shape v=1,16,4096,128
"""

import torch.nn.functional as F


def attention(q, k, v, causal=True, dropout_p=0.0):
    gqa = q.shape[-3] != k.shape[-3]  # fewer K/V heads: PyTorch's enable_gqa
    return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=causal, enable_gqa=gqa)
