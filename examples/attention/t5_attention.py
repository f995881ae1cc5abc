"""T5-style attention, as its eager code runs it: no scaling of Q Kᵀ (T5 folds it into its
weights), a learned relative position bias ``(1, heads, seqlen, keys)`` added to the scores and
broadcast over the batch, the softmax in fp32 and cast back (``.float()`` then ``type_as``),
dropout, P V. Q, K, V come as ``(batch, heads, seqlen, headdim)``; cross-attention gives K and V
the encoder's length. The bias needs no gradient here (``--grad``)::

    memmodel trace examples/attention/t5_attention.py:attention --gpu h200 --dtype bf16 \\
        --shape q=8,12,512,64 --shape k=8,12,512,64 --shape v=8,12,512,64 \\
        --shape position_bias=1,12,512,512 --grad q,k,v
"""

import torch
import torch.nn.functional as F


def attention(q, k, v, position_bias, dropout_p=0.1, training=False):
    scores = torch.matmul(q, k.transpose(3, 2))
    scores = scores + position_bias
    weights = F.softmax(scores.float(), dim=-1).type_as(scores)
    weights = F.dropout(weights, p=dropout_p, training=training)
    return torch.matmul(weights, v)
