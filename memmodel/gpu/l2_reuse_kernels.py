"""The Triton kernel of the L2 reuse microbenchmark (imported only when measuring; needs triton).

See :mod:`memmodel.calibration.l2_reuse` for the access patterns it reproduces.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def l2_reuse_kernel(
    kv_ptr,
    out_ptr,
    sm_ptr,
    counter_ptr,
    group_ptr,
    dq_ptr,
    n_virtual,
    ctas_per_q_head,
    q_per_kv,
    tiles,
    BM: tl.constexpr,
    BN: tl.constexpr,
    D: tl.constexpr,
    ORDER: tl.constexpr,  # 0: every tile; 1: causal, first tile up; 2: causal, diagonal down; 3: every tile from m on
    SELECT: tl.constexpr,  # only programs on SMs with group_ptr[smid] == 0 work
    COMPUTE: tl.constexpr,  # pace each step with attention's two matrix products
    ATOMIC: tl.constexpr,  # also add a BN x D fp32 tile into dq_ptr per step (the backward's dQ accumulator)
    FAKE: tl.constexpr = False,  # CPU interpreter: %smid is pid % 132
    STORE: tl.constexpr = False,  # ATOMIC's tile loaded, added to and stored instead: dirty lines in L2
):
    """Persistent programs take virtual CTAs in grid order from ``counter_ptr`` (zero at launch).

    Virtual CTA v is Q block ``m = v mod ctas_per_q_head`` of Q head ``v // ctas_per_q_head``,
    whose K/V head is ``q_head // q_per_kv``: K at ``kv_ptr + kv_head·2·tiles·BN·D``, V right
    after it, ``tiles`` tiles of BN × D fp16 each. It reads K and V tile by tile (``.cg``), all
    tiles or, causal, ``min(tiles, ⌈(m+1)·BM/BN⌉)`` of them. ``out_ptr[pid]``: a checksum;
    ``sm_ptr[pid]``: the program's SM, or -1 for a program that did no work.
    """
    pid = tl.program_id(0)
    if FAKE:
        sm = pid % 132
    else:
        sm = tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r,r", [pid], dtype=tl.int32, is_pure=True, pack=1)
    keep = True
    if SELECT:
        keep = tl.load(group_ptr + sm) == 0
    rows = tl.arange(0, BN)
    cols = tl.arange(0, D)
    offs = rows[:, None] * D + cols[None, :]
    tile_elems = BN * D
    if COMPUTE:
        q = (((tl.arange(0, BM)[:, None] + cols[None, :]) % 7).to(tl.float32) * 0.01).to(tl.float16)
        acc = tl.zeros([BM, D], dtype=tl.float32)
    else:
        acc = tl.zeros([BN, D], dtype=tl.float32)
    v = tl.zeros([], dtype=tl.int32) + n_virtual  # a tensor, whatever Triton specialised n_virtual to
    if keep:
        v = tl.atomic_add(counter_ptr, 1)
    while v < n_virtual:
        q_head = v // ctas_per_q_head
        m = v - q_head * ctas_per_q_head
        kv_head = q_head // q_per_kv
        base = kv_head.to(tl.int64) * (2 * tiles * tile_elems)
        n = tiles
        if ORDER == 1 or ORDER == 2:
            n = tl.minimum(tiles, ((m + 1) * BM + BN - 1) // BN)
        for t in range(n):
            tile = t
            if ORDER == 2:
                tile = n - 1 - t
            if ORDER == 3:  # the memory-efficient backward's walk: from the CTA's own tile on, wrapping
                tile = (m + t) % n
            k_at = base + tile.to(tl.int64) * tile_elems
            k = tl.load(kv_ptr + k_at + offs, cache_modifier=".cg")
            vv = tl.load(kv_ptr + k_at + tiles * tile_elems + offs, cache_modifier=".cg")
            if COMPUTE:
                s = tl.dot(q, tl.trans(k))
                acc += tl.dot(s.to(tl.float16), vv)
            else:
                acc += k.to(tl.float32) + vv.to(tl.float32)
            if ATOMIC:
                dq_at = kv_head.to(tl.int64) * (tiles * tile_elems) + tile.to(tl.int64) * tile_elems
                tl.atomic_add(dq_ptr + dq_at + offs, k.to(tl.float32), sem="relaxed")
            if ORDER == 3:  # and its own K/V tile again each step, as that kernel's CTA reads its K_j, V_j
                own_at = base + m.to(tl.int64) * tile_elems
                own = tl.load(kv_ptr + own_at + offs, cache_modifier=".cg").to(tl.float32)
                own += tl.load(kv_ptr + own_at + tiles * tile_elems + offs, cache_modifier=".cg").to(tl.float32)
                acc += tl.sum(own, axis=0)[None, :]
            if STORE:  # as the memory-efficient backward's dQ workspace: load, add, store (racy: bytes only)
                dq_at = kv_head.to(tl.int64) * (tiles * tile_elems) + tile.to(tl.int64) * tile_elems
                part = tl.load(dq_ptr + dq_at + offs, cache_modifier=".cg")
                tl.store(dq_ptr + dq_at + offs, part + k.to(tl.float32), cache_modifier=".cg")
        v = tl.atomic_add(counter_ptr, 1)
    tl.store(out_ptr + pid, tl.sum(tl.sum(acc, axis=1), axis=0))
    tl.store(sm_ptr + pid, tl.where(keep, sm, -1))
