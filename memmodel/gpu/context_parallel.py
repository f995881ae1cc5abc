"""Context-parallel attention on real GPUs through ``torch.distributed``: ring attention (with
the zigzag split when causal) and Ulysses, forward and backward, as :mod:`memmodel.parallel`
models them kernel for kernel.

Tensors are ``[batch, tokens, heads, head dim]`` (contiguous, the layout FlashAttention's
kernels use); the attention kernels get ``transpose(1, 2)`` views. Each block is computed by
a *backend*: :class:`Flash` (PyTorch's FlashAttention-2 kernels, ``aten._scaled_dot_product_
flash_attention`` and its backward, CUDA) or :class:`Math` (the same arithmetic in plain
torch, any device: the CPU tests run it with the gloo backend). The ring's messages are NCCL
send/recv pairs (``batch_isend_irecv``), which run on NCCL's own stream while the compute
stream works; the waits make the compute stream, not the host, wait.

Keep NVLink multicast off: :func:`safe_environment` sets ``NCCL_NVLS_ENABLE=0``,
``TORCH_SYMM_MEM_DISABLE_MULTICAST=1`` and ``NVSHMEM_DISABLE_NVLS=1`` before any process
group exists (and they pass to the processes it spawns).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

from ..parallel import step_kind

#: set before NCCL starts, in this process and every child: no NVLink SHARP/multicast
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def safe_environment() -> None:
    os.environ.update(SAFE_ENV)


@dataclass
class LinkCounter:
    """Bytes this GPU hands to the links: each send's tensor, and (P−1)/P of an all-to-all's buffer."""

    sent_bytes: int = 0
    messages: int = 0
    log: list[tuple[str, int]] = field(default_factory=list)

    def add(self, what: str, nbytes: int) -> None:
        self.sent_bytes += nbytes
        self.messages += 1
        self.log.append((what, nbytes))


# ---------------------------------------------------------------------------------------
# Block attention backends (inputs [B, n, H, d]; outputs [B, n, H, d] and lse [B, H, n] fp32)


class Math:
    """Attention in plain torch (fp32 arithmetic): the reference, and the CPU tests' kernel."""

    name = "math"

    def __init__(self, torch: Any) -> None:
        self.torch = torch

    def _scores(self, q: Any, k: Any, causal: bool, scale: float) -> Any:
        t = self.torch
        g = q.shape[2] // k.shape[2]
        qh = q.transpose(1, 2).float()
        kh = k.transpose(1, 2).float().repeat_interleave(g, dim=1)
        s = qh @ kh.transpose(-1, -2) * scale
        if causal:
            nq, nk = s.shape[-2], s.shape[-1]
            mask = t.ones(nq, nk, dtype=t.bool, device=s.device).triu(1 + nk - nq)
            s = s.masked_fill(mask, float("-inf"))
        return s, g

    def forward(self, q: Any, k: Any, v: Any, causal: bool, scale: float) -> tuple[Any, Any]:
        s, g = self._scores(q, k, causal, scale)
        lse = self.torch.logsumexp(s, dim=-1)
        p = self.torch.exp(s - lse.unsqueeze(-1))
        vh = v.transpose(1, 2).float().repeat_interleave(g, dim=1)
        out = (p @ vh).to(q.dtype).transpose(1, 2).contiguous()
        return out, lse

    def backward(
        self, do: Any, q: Any, k: Any, v: Any, out: Any, lse: Any, causal: bool, scale: float
    ) -> tuple[Any, Any, Any]:
        s, g = self._scores(q, k, causal, scale)
        p = self.torch.exp(s - lse.unsqueeze(-1))
        doh = do.transpose(1, 2).float()
        vh = v.transpose(1, 2).float().repeat_interleave(g, dim=1)
        dv = p.transpose(-1, -2) @ doh
        dp = doh @ vh.transpose(-1, -2)
        delta = (doh * out.transpose(1, 2).float()).sum(-1, keepdim=True)
        ds = p * (dp - delta)
        kh = k.transpose(1, 2).float().repeat_interleave(g, dim=1)
        dq = ds @ kh * scale
        dk = ds.transpose(-1, -2) @ q.transpose(1, 2).float() * scale
        b, hq, nk, d = dk.shape
        dk = dk.view(b, hq // g, g, nk, d).sum(2)
        dv = dv.view(b, hq // g, g, nk, d).sum(2)

        def bshd(x: Any, like: Any) -> Any:
            return x.to(like.dtype).transpose(1, 2).contiguous()

        return bshd(dq, q), bshd(dk, k), bshd(dv, v)


class Flash:
    """PyTorch's FlashAttention-2 kernels (CUDA, fp16/bf16): the forward returns the block's
    logsumexp; the backward takes the final output and logsumexp (the ring's merged ones)."""

    name = "flash"

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        #: what the forward returns for dense inputs and its backward takes back, as autograd
        #: passes them: (cum_seq_q, cum_seq_k) (undefined: not variable-length) and the RNG state
        self.dense: tuple[Any, Any] = (None, None)
        self.rng: tuple[Any, Any] | None = None

    def forward(self, q: Any, k: Any, v: Any, causal: bool, scale: float) -> tuple[Any, Any]:
        r = self.torch.ops.aten._scaled_dot_product_flash_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), 0.0, causal, False, scale=scale
        )
        if self.rng is None:
            self.dense, self.rng = (r[2], r[3]), (r[6], r[7])
        return r[0].transpose(1, 2), r[1]

    def backward(
        self, do: Any, q: Any, k: Any, v: Any, out: Any, lse: Any, causal: bool, scale: float
    ) -> tuple[Any, Any, Any]:
        t = self.torch
        if self.rng is None:  # no forward ran on this backend: dropout is off, the state unread
            self.forward(q[:, :1], k[:, :1], v[:, :1], False, scale)
        assert self.rng is not None
        dq, dk, dv = t.ops.aten._scaled_dot_product_flash_attention_backward(
            do.transpose(1, 2),
            q.transpose(1, 2),
            k.transpose(1, 2),
            v.transpose(1, 2),
            out.transpose(1, 2),
            lse,
            self.dense[0],
            self.dense[1],
            q.shape[1],
            k.shape[1],
            0.0,
            causal,
            self.rng[0],
            self.rng[1],
            scale=scale,
        )
        # [B, n, H, d] as sent over the links: contiguous (a no-op for the kernel's own layout)
        return dq.transpose(1, 2).contiguous(), dk.transpose(1, 2).contiguous(), dv.transpose(1, 2).contiguous()


def backend(torch: Any, name: str) -> Any:
    return Flash(torch) if name == "flash" else Math(torch)


# ---------------------------------------------------------------------------------------
# Merge (memmodel.parallel.MERGE_OPS, op for op)


def merge(torch: Any, out: Any, lse: Any, o_blk: Any, lse_blk: Any) -> None:
    """Fold a block's output (``o_blk``, ``lse_blk``) into the running ``out``, ``lse`` in place."""
    new = torch.logaddexp(lse, lse_blk)
    w = torch.exp(lse_blk - new)
    out.lerp_(o_blk, w.to(out.dtype).transpose(1, 2).unsqueeze(-1))
    lse.copy_(new)


# ---------------------------------------------------------------------------------------
# Ring


def _exchange(dist: Any, torch: Any, tensors: list[Any], group: Any, counter: LinkCounter | None, what: str) -> Any:
    """Send ``tensors`` to the next rank, receive as many from the last: (requests, received)."""
    group = group or dist.group.WORLD
    rank, p = dist.get_rank(group), dist.get_world_size(group)
    nxt, prv = dist.get_global_rank(group, (rank + 1) % p), dist.get_global_rank(group, (rank - 1) % p)
    recv = [torch.empty_like(x) for x in tensors]
    ops = [dist.P2POp(dist.isend, x, nxt, group) for x in tensors]
    ops += [dist.P2POp(dist.irecv, x, prv, group) for x in recv]
    if counter is not None:
        counter.add(what, sum(x.numel() * x.element_size() for x in tensors))
    return dist.batch_isend_irecv(ops), recv


def _wait(reqs: Any) -> None:
    for r in reqs:
        r.wait()


def ring_forward(
    torch: Any,
    dist: Any,
    attn: Any,
    q: Any,
    k: Any,
    v: Any,
    *,
    causal: bool,
    group: Any = None,
    scale: float | None = None,
    counter: LinkCounter | None = None,
) -> tuple[Any, Any]:
    """This rank's output and logsumexp; with ``causal`` the tokens are the zigzag chunks
    (:func:`shard`). K/V blocks go round the ring while each step computes."""
    rank, p = dist.get_rank(group), dist.get_world_size(group)
    scale = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    half = q.shape[1] // 2
    out = lse = None
    for i in range(p):
        if i < p - 1:
            reqs, (k_next, v_next) = _exchange(dist, torch, [k, v], group, counter, "kv")
        kind = step_kind(rank, i, p, causal)
        if kind == "kv_half":
            o, l_ = attn.forward(q, k[:, :half], v[:, :half], False, scale)
        elif kind == "q_half":
            o, l_ = attn.forward(q[:, half:], k, v, False, scale)
        else:
            o, l_ = attn.forward(q, k, v, kind == "diagonal", scale)
        if i == 0:
            out, lse = o, l_
        elif kind == "q_half":
            merge(torch, out[:, half:], lse[:, :, half:], o, l_)
        else:
            merge(torch, out, lse, o, l_)
        if i < p - 1:
            _wait(reqs)
            k, v = k_next, v_next
    return out, lse


def ring_backward(
    torch: Any,
    dist: Any,
    attn: Any,
    do: Any,
    q: Any,
    k: Any,
    v: Any,
    out: Any,
    lse: Any,
    *,
    causal: bool,
    group: Any = None,
    scale: float | None = None,
    counter: LinkCounter | None = None,
) -> tuple[Any, Any, Any]:
    """dQ, dK, dV of this rank's tokens: each block's gradients with the final output and
    logsumexp; dK, dV of a block travel with it and reach their owner after the last step."""
    rank, p = dist.get_rank(group), dist.get_world_size(group)
    scale = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    half = q.shape[1] // 2
    dq = dk = dv = None
    dkv_reqs: Any = None
    dkv_recv: Any = None
    for i in range(p):
        if i < p - 1:
            kv_reqs, (k_next, v_next) = _exchange(dist, torch, [k, v], group, counter, "kv")
        kind = step_kind(rank, i, p, causal)
        if kind == "kv_half":
            dq_b, dk_b, dv_b = attn.backward(do, q, k[:, :half], v[:, :half], out, lse, False, scale)
        elif kind == "q_half":
            lse_half = lse[:, :, half:].contiguous()
            dq_b, dk_b, dv_b = attn.backward(do[:, half:], q[:, half:], k, v, out[:, half:], lse_half, False, scale)
        else:
            dq_b, dk_b, dv_b = attn.backward(do, q, k, v, out, lse, kind == "diagonal", scale)
        if i == 0:
            dq, dk, dv = dq_b, dk_b, dv_b
        else:
            (dq[:, half:] if kind == "q_half" else dq).add_(dq_b)
            _wait(dkv_reqs)
            dk, dv = dkv_recv
            (dk[:, :half] if kind == "kv_half" else dk).add_(dk_b)
            (dv[:, :half] if kind == "kv_half" else dv).add_(dv_b)
        if p > 1:
            dkv_reqs, dkv_recv = _exchange(dist, torch, [dk, dv], group, counter, "dkv")
        if i < p - 1:
            _wait(kv_reqs)
            k, v = k_next, v_next
    if p > 1:
        _wait(dkv_reqs)
        dk, dv = dkv_recv
    return dq, dk, dv


# ---------------------------------------------------------------------------------------
# Ulysses


def _all_to_all(dist: Any, torch: Any, send: Any, group: Any, counter: LinkCounter | None, what: str) -> Any:
    p = dist.get_world_size(group)
    recv = torch.empty_like(send)
    if counter is not None:
        counter.add(what, send.numel() * send.element_size() * (p - 1) // p)
    dist.all_to_all_single(recv, send, group=group)
    return recv


def ulysses_forward(
    torch: Any,
    dist: Any,
    attn: Any,
    q: Any,
    k: Any,
    v: Any,
    *,
    causal: bool,
    group: Any = None,
    scale: float | None = None,
    counter: LinkCounter | None = None,
) -> tuple[Any, Any]:
    """This rank's output and what the backward needs (the head group's full-sequence Q, K,
    V, output and logsumexp)."""
    p = dist.get_world_size(group)
    scale = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    b, n, h, d = q.shape
    hq, hk = h // p, k.shape[2] // p
    send = q.new_empty(p, b, n, hq + 2 * hk, d)
    for lo, x, hx in ((0, q, hq), (hq, k, hk), (hq + hk, v, hk)):
        send[:, :, :, lo : lo + hx].copy_(x.view(b, n, p, hx, d).permute(2, 0, 1, 3, 4))
    recv = _all_to_all(dist, torch, send, group, counter, "qkv")

    def seq(lo: int, hi: int) -> Any:  # [B, P·n, heads, d]: a view when batch is 1
        return recv[:, :, :, lo:hi].permute(1, 0, 2, 3, 4).reshape(b, p * n, hi - lo, d)

    qf, kf, vf = seq(0, hq), seq(hq, hq + hk), seq(hq + hk, hq + 2 * hk)
    o, lse = attn.forward(qf, kf, vf, causal, scale)
    send_o = o.reshape(b, p, n, hq, d).permute(1, 0, 2, 3, 4).contiguous()
    recv_o = _all_to_all(dist, torch, send_o, group, counter, "o")
    out = recv_o.permute(1, 2, 0, 3, 4).reshape(b, n, h, d)
    return out, (qf, kf, vf, o, lse)


def ulysses_backward(
    torch: Any,
    dist: Any,
    attn: Any,
    do: Any,
    saved: Any,
    *,
    causal: bool,
    group: Any = None,
    scale: float | None = None,
    counter: LinkCounter | None = None,
) -> tuple[Any, Any, Any]:
    qf, kf, vf, o, lse = saved
    p = dist.get_world_size(group)
    scale = scale if scale is not None else 1.0 / math.sqrt(qf.shape[-1])
    b, n, h, d = do.shape
    hq, hk = qf.shape[2], kf.shape[2]
    send = do.view(b, n, p, hq, d).permute(2, 0, 1, 3, 4).contiguous()
    recv = _all_to_all(dist, torch, send, group, counter, "do")
    dof = recv.permute(1, 0, 2, 3, 4).reshape(b, p * n, hq, d)
    dq, dk, dv = attn.backward(dof, qf, kf, vf, o, lse, causal, scale)
    send = do.new_empty(p, b, n, hq + 2 * hk, d)
    for lo, x, hx in ((0, dq, hq), (hq, dk, hk), (hq + hk, dv, hk)):
        send[:, :, :, lo : lo + hx].copy_(x.reshape(b, p, n, hx, d).permute(1, 0, 2, 3, 4))
    recv = _all_to_all(dist, torch, send, group, counter, "dqkv")

    def back(lo: int, hx: int) -> Any:
        return recv[:, :, :, lo : lo + hx].permute(1, 2, 0, 3, 4).reshape(b, n, p * hx, d)

    return back(0, hq), back(hq, hk), back(hq + hk, hk)


class RingAttention:
    """The ring over ``group`` as an attention backend (``forward``, ``backward``), for the hybrid
    scheme: Ulysses inside a group hands each GPU the group's tokens of its heads, and this runs
    the ring across the groups on them."""

    def __init__(self, torch: Any, dist: Any, attn: Any, group: Any, counter: LinkCounter | None) -> None:
        self.torch, self.dist, self.attn, self.group, self.counter = torch, dist, attn, group, counter

    def forward(self, q: Any, k: Any, v: Any, causal: bool, scale: float) -> tuple[Any, Any]:
        q, k, v = (x.contiguous() for x in (q, k, v))  # Ulysses' views of its buffer; sends take whole tensors
        return ring_forward(
            self.torch, self.dist, self.attn, q, k, v, causal=causal, group=self.group, scale=scale,
            counter=self.counter,
        )  # fmt: skip

    def backward(
        self, do: Any, q: Any, k: Any, v: Any, out: Any, lse: Any, causal: bool, scale: float
    ) -> tuple[Any, Any, Any]:
        do, q, k, v, out = (x.contiguous() for x in (do, q, k, v, out))
        return ring_backward(
            self.torch, self.dist, self.attn, do, q, k, v, out, lse, causal=causal, group=self.group, scale=scale,
            counter=self.counter,
        )  # fmt: skip


def hybrid_groups(dist: Any, world: int, u: int) -> tuple[Any, Any]:
    """(this rank's Ulysses group, its ring group): ranks g·U … g·U + U − 1 form group g; the ring
    joins the ranks of one place m in every group. Every rank creates every group, in one order."""
    rank = dist.get_rank()
    mine_u = mine_r = None
    for g in range(world // u):
        grp = dist.new_group(list(range(g * u, (g + 1) * u)))
        if rank // u == g:
            mine_u = grp
    for m in range(u):
        grp = dist.new_group(list(range(m, world, u)))
        if rank % u == m:
            mine_r = grp
    return mine_u, mine_r


def hybrid_shard_index(n: int, p: int, u: int, rank: int, causal: bool) -> list[tuple[int, int]]:
    """The tokens rank ``rank`` (place m of group g) holds in the hybrid scheme: the m-th of U
    equal pieces of its group's tokens (the ring's shard of group g among P/U: zigzag chunks g and
    2·P/U − 1 − g when causal), so that Ulysses' all-to-all, which lays the group's pieces side by
    side, hands each GPU its group's tokens in the ring's order."""
    r, g, m = p // u, rank // u, rank % u
    ranges = shard_index(n, r, g, causal and r > 1)
    tokens = [t for a, b in ranges for t in range(a, b)]
    size = len(tokens) // u
    mine = tokens[m * size : (m + 1) * size]
    out: list[tuple[int, int]] = []
    for t in mine:
        if out and out[-1][1] == t:
            out[-1] = (out[-1][0], t + 1)
        else:
            out.append((t, t + 1))
    return out


def hybrid_shard(torch: Any, x: Any, p: int, u: int, rank: int, causal: bool) -> Any:
    """This rank's tokens of ``x`` ([B, N, H, d]) in the hybrid scheme, contiguous."""
    parts = [x[:, a:b] for a, b in hybrid_shard_index(x.shape[1], p, u, rank, causal)]
    return torch.cat(parts, dim=1).contiguous() if len(parts) > 1 else parts[0].contiguous()


# ---------------------------------------------------------------------------------------
# Sharding the sequence


def shard_index(n: int, p: int, rank: int, zigzag: bool) -> list[tuple[int, int]]:
    """The token ranges rank ``rank`` holds: one N/P range, or (zigzag) chunks r and 2P−1−r of 2P."""
    if not zigzag:
        size = n // p
        return [(rank * size, (rank + 1) * size)]
    c = n // (2 * p)
    return [(rank * c, (rank + 1) * c), ((2 * p - 1 - rank) * c, (2 * p - rank) * c)]


def shard(torch: Any, x: Any, p: int, rank: int, zigzag: bool) -> Any:
    """This rank's tokens of ``x`` ([B, N, H, d]), contiguous."""
    parts = [x[:, a:b] for a, b in shard_index(x.shape[1], p, rank, zigzag)]
    return torch.cat(parts, dim=1).contiguous() if len(parts) > 1 else parts[0].contiguous()
