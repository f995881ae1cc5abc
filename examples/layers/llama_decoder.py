"""One Llama-style transformer decoder layer, written for ``memmodel trace`` (torch only).

RMSNorm, the q/k/v/o projections (grouped-query attention: fewer K/V heads than query heads),
rotary embeddings on q and k, attention through ``F.scaled_dot_product_attention``, a SiLU-gated
MLP and the two residual adds: the layer's step as serving code runs it, kernel by kernel.

* Prefill: call it with ``hidden_states`` only; attention is causal over the prompt
  (``is_causal=True``).
* Decode: give ``k_cache`` and ``v_cache`` too, preallocated ``(batch, kv_heads, context,
  head_dim)`` tensors holding the past tokens, with the last ``N`` slots for the ``N`` new ones
  (``hidden_states`` of ``N`` tokens, usually 1). The new keys and values are written into their
  slots in place (``copy_`` into a slice, as a static cache does: serving code preallocates its
  cache and writes into it rather than concatenating a new one each step), then the queries
  attend over the whole cache. The rotary position of the new tokens follows from the cache's
  length.

The factories take keyword overrides of the configuration (``memmodel trace ... --config
max_positions=65536``) and build bf16 parameters; ``memmodel trace`` builds them on the meta
device and gives them fake tensors at ``--dtype`` (no weights are allocated).

Prefill of 4096 tokens, batch 1, on an H200::

    memmodel trace examples/layers/llama_decoder.py:llama3_8b --gpu h200 --dtype bf16 \\
        --shape hidden_states=1,4096,4096

Decode of one token at 32k context (32767 cached tokens and the new one's slot), batch 1 and 16::

    memmodel trace examples/layers/llama_decoder.py:llama3_8b --gpu h200 --dtype bf16 \\
        --shape hidden_states=1,1,4096 --shape k_cache=1,8,32768,128 --shape v_cache=1,8,32768,128

    memmodel trace examples/layers/llama_decoder.py:llama3_8b --gpu h200 --dtype bf16 \\
        --shape hidden_states=16,1,4096 --shape k_cache=16,8,32768,128 --shape v_cache=16,8,32768,128

Qwen2.5-7B: ``:qwen2_5_7b`` with hidden 3584 and 4 K/V heads (``hidden_states=1,4096,3584``,
``k_cache=1,4,32768,128``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    """x / sqrt(mean(x²) + eps) · weight, computed in fp32 and cast back before the weight."""

    def __init__(self, hidden: int, eps: float, dtype: torch.dtype) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden, dtype=dtype))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


class Rotary(nn.Module):
    """The cos and sin tables of every position, computed once (buffers); a step slices its rows."""

    def __init__(self, head_dim: int, theta: float, max_positions: int, dtype: torch.dtype) -> None:
        super().__init__()
        inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        angles = torch.outer(torch.arange(max_positions, dtype=torch.float32), inv_freq)
        angles = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos", angles.cos().to(dtype), persistent=False)
        self.register_buffer("sin", angles.sin().to(dtype), persistent=False)

    def forward(self, start: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.cos[start : start + length], self.sin[start : start + length]


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return x * cos + rotate_half(x) * sin


class DecoderLayer(nn.Module):
    """A Llama decoder layer: pre-norm attention and pre-norm SiLU-gated MLP, each with a residual."""

    def __init__(
        self,
        *,
        hidden: int,
        heads: int,
        kv_heads: int,
        head_dim: int,
        intermediate: int,
        qkv_bias: bool = False,
        rms_eps: float = 1e-5,
        rope_theta: float = 500000.0,
        max_positions: int = 131072,
        dtype: torch.dtype = torch.bfloat16,
    ) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.input_norm = RMSNorm(hidden, rms_eps, dtype)
        self.q_proj = nn.Linear(hidden, heads * head_dim, bias=qkv_bias, dtype=dtype)
        self.k_proj = nn.Linear(hidden, kv_heads * head_dim, bias=qkv_bias, dtype=dtype)
        self.v_proj = nn.Linear(hidden, kv_heads * head_dim, bias=qkv_bias, dtype=dtype)
        self.o_proj = nn.Linear(heads * head_dim, hidden, bias=False, dtype=dtype)
        self.rotary = Rotary(head_dim, rope_theta, max_positions, dtype)
        self.post_norm = RMSNorm(hidden, rms_eps, dtype)
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False, dtype=dtype)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False, dtype=dtype)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False, dtype=dtype)

    def forward(
        self,
        hidden_states: torch.Tensor,
        k_cache: torch.Tensor | None = None,
        v_cache: torch.Tensor | None = None,
    ) -> torch.Tensor:
        batch, n, _ = hidden_states.shape
        residual = hidden_states
        x = self.input_norm(hidden_states)
        q = self.q_proj(x).view(batch, n, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(batch, n, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(batch, n, self.kv_heads, self.head_dim).transpose(1, 2)
        start = 0 if k_cache is None else k_cache.shape[2] - n
        cos, sin = self.rotary(start, n)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        if k_cache is None or v_cache is None:  # prefill: causal over the prompt
            attn = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:  # decode: the new tokens into their cache slots, then attention over the whole cache
            k_cache[:, :, start:].copy_(k)
            v_cache[:, :, start:].copy_(v)
            attn = F.scaled_dot_product_attention(q, k_cache, v_cache, is_causal=n > 1, enable_gqa=True)
        out = attn.transpose(1, 2).reshape(batch, n, self.heads * self.head_dim)
        hidden_states = residual + self.o_proj(out)
        x = self.post_norm(hidden_states)
        return hidden_states + self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def llama3_8b(**overrides: object) -> DecoderLayer:
    """A Llama-3-8B layer: hidden 4096, 32 heads on 8 K/V heads of 128, MLP 14336, RoPE θ 500000."""
    config: dict[str, object] = dict(
        hidden=4096, heads=32, kv_heads=8, head_dim=128, intermediate=14336, rms_eps=1e-5, rope_theta=500000.0
    )
    config.update(overrides)
    return DecoderLayer(**config)  # type: ignore[arg-type]


def qwen2_5_7b(**overrides: object) -> DecoderLayer:
    """A Qwen2.5-7B layer: hidden 3584, 28 heads on 4 K/V heads of 128, MLP 18944, q/k/v biases."""
    config: dict[str, object] = dict(
        hidden=3584,
        heads=28,
        kv_heads=4,
        head_dim=128,
        intermediate=18944,
        qkv_bias=True,
        rms_eps=1e-6,
        rope_theta=1000000.0,
    )
    config.update(overrides)
    return DecoderLayer(**config)  # type: ignore[arg-type]
