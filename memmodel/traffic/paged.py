"""Paged KV caches (``Workload.page_size``) with the serving kernels that read them: FlashInfer's
paged wrappers (``--impl flashinfer``) and FlexAttention (``--impl flex``).

A paged cache holds each request's K/V in ⌈n_kv / P⌉ pages of P tokens, anywhere in a pool,
found through a block table (int32 page indices per request, with ``indptr`` and
``last_page_len``). Decoding has n = 1 query token per request; chunked prefill appends n new
tokens to the n_kv − n cached ones (causal, bottom-right aligned).

What the kernels do (FlashInfer: flashinfer-ai/flashinfer at commit
fb28d7242b3506a2348265962041acc1fb56cca4, 2026-08-22, version 0.6.18 nightly: the lead's 0.7.2 may
differ in detail; torch: ``torch/_inductor/kernel/flex/flex_decoding.py``, ``flex_attention.py``,
``template_heuristics/triton.py`` and ``torch/nn/attention/experimental/_paged_attention.py``):

* FlashInfer's layout is its default, ``kv_layout="NHD"``: a page is [P, H_kv, d], so one
  token's row of one head (d·e bytes) is the contiguous unit whatever P is. Its kernels gather
  K/V row by row through the page table with predicated ``cp.async`` (decode:
  ``cp_async::pred_load`` against ``chunk_size``; the sm90 prefill's ``cp_async_zfill`` against
  ``kv_len``): a partial last page reads only its valid tokens.
* FlexAttention's paged cache (``PagedAttention``) is [1, H_kv, pages·P, d]: a page of one head
  is P·d·e contiguous bytes, the BlockMask's KV block is the page (``convert_logical_block_mask``
  refuses any other), and the kernel loads whole blocks: a partial last page is read whole (the
  mask_mod masks its tail).

Counted: K/V at the rows the kernels load, each row in 32-byte sectors; the block table and the
plan's metadata as reads; Q, O and the split partials. Scattered pages cost no bytes here: a load
is a token row (FlashInfer) or a page (flex) either way, so the model charges no time for
scattering either (what DRAM row-buffer locality and TLB reach would add is not modelled); the
params say how many separate contiguous chunks a head's K/V is read in (``kv_chunks``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from .. import intmath
from ..intmath import IntLike
from ..workload import ACC_BYTES, STAT_BYTES, Workload
from . import l2 as l2m
from .flex import checked_steps, strided_kv_hbm
from .ledger import COMBINE, SPLIT_KV, Kernel, KernelBuilder

#: bytes of one DRAM sector: the granularity of every load
SECTOR_BYTES = 32
#: bytes of one page index (int32) and of ``indptr`` / ``last_page_len`` entries
INDEX_BYTES = 4

#: FlashInfer's decode kernel runs these GQA group sizes (``DISPATCH_GQA_GROUP_SIZE`` in
#: ``include/flashinfer/utils.cuh``); other groups go through the tensor-core (prefill) kernel,
#: as serving engines call it (vLLM, SGLang: ``use_tensor_cores`` when the group is over 4)
FLASHINFER_DECODE_GROUPS = (1, 2, 3, 4, 6, 8)
#: head dims of FlashInfer's sm90 (FA3-style) prefill kernels (``is_fa3_prefill_head_dim_supported``)
FLASHINFER_FA3_HEAD_DIMS = (64, 128, 256)
#: registers per thread of FlashInfer's CUDA-core decode kernel by (head dim, GQA group): each
#: pair is its own template instance, whose registers nvcc chooses (not in the source). Read by
#: Nsight Compute's launch statistics on the H200 (0.7.2.post1, bf16, the serving probe's shapes:
#: ``validation/h200/serving-probe/occupancy.csv.gz``): 56 at d 128, group 4 (9 CTAs of 128
#: threads an SM), 68 at d 64, group 1; the other pairs 64 assumed (8 CTAs an SM)
FLASHINFER_DECODE_REGISTERS = {(128, 4): 56, (64, 1): 68}
FLASHINFER_DECODE_REGISTERS_OTHER = 64
#: FlashInfer's prefill plan takes 2 CTAs per SM as its grid (``PrefillPlanImpl``: num_blocks_per_sm = 2)
FLASHINFER_PREFILL_CTAS_PER_SM = 2
#: flex decoding's BLOCK_N on sm90 (``get_flex_decode_configs``: FlexDecodeConfig(64, 3, 2))
FLEX_DECODE_BLOCK_N = 64
#: CTAs of flex's decoding kernel (2 warps) one SM holds on sm90, set by the registers Triton gives
#: its compiled kernel (each SM quarter holds 16 K registers, whole warps), read off Nsight Compute's
#: launch statistics on the H200 (torch 2.11; the flex occupancy probe and h200-decode-check):
#: contiguous K/V (the block mask built in the graph) by head dim, 128 registers a thread at d 64,
#: 184 at 128; paged by (head dim, BLOCK_N): 96 registers at (128, 16), at most 128 at (128, 32),
#: 178-231 at BLOCK_N 64. A head dim or block not read takes the nearest read (d 64's smaller
#: blocks d 128's: fewer registers with smaller blocks)
FLEX_DECODE_CTAS_PER_SM_CONTIGUOUS = {64: 8, 128: 4}
FLEX_DECODE_CTAS_PER_SM_PAGED = {16: 10, 32: 8, 64: 4}
#: flex's forward tiles on sm90 by (dtype, head dim): (BLOCK_M, BLOCK_N, num_stages, num_warps)
#: (``h100_default_flex_config``; (128, 64, 3, 4) for the others; d > 256: (64, 32, 3, 4))
FLEX_FORWARD_SM90 = {
    ("fp32", 64): (128, 32),
    ("fp32", 128): (32, 64),
    ("fp32", 256): (32, 32),
    ("bf16", 64): (128, 128),
    ("bf16", 128): (128, 64),
    ("bf16", 256): (64, 32),
    ("fp16", 64): (128, 128),
    ("fp16", 128): (128, 128),
    ("fp16", 256): (64, 32),
}
#: the sparse block size of a BlockMask (``create_block_mask``'s default), the Q side of flex's blocks
FLEX_SPARSE_BLOCK = 128
#: flex runs its decoding kernel below this many query tokens (``_use_flex_decoding``)
FLEX_DECODE_MAX_Q = 128


def is_power_of_two(x: int) -> bool:
    return x >= 1 and x & (x - 1) == 0


def _next_power_of_two(x: int) -> int:
    return 1 if x <= 1 else 1 << (int(x) - 1).bit_length()


# ---------------------------------------------------------------------------------------
# What each kernel's plan decides (one request shape at a time: integers)


def flashinfer_decode_tile(d: int, group: int, e: int) -> dict[str, int]:
    """FlashInfer's decode tile (``BatchDecodeWithPagedKVCacheDispatched``, ``decode.cuh``):
    ``vec_size = max(16 / e, d / 32)`` elements a thread loads, ``bdx = d / vec_size`` threads
    per row, ``bdy`` = the group's query heads, ``bdz`` rows of them to fill 128 threads;
    ``tile_size_per_bdx`` tokens each (4 for one query head, 2 at fp8, 1 with GQA); tokens per
    iteration = tile · bdy · bdz; two shared-memory stages on sm80+."""
    vec = max(16 // e, d // 32)
    bdx = max(1, d // vec)
    threads = max(128, bdx * group)
    bdz = max(1, threads // (bdx * group))
    tile = 1 if group > 1 else (2 if e == 1 else 4)
    stages = 2
    smem = 2 * stages * tile * group * bdz * d * e + max(tile * threads * 8, 2 * group * bdz * 4)
    return {
        "bdx": bdx,
        "bdy": group,
        "bdz": bdz,
        "tokens_per_iter": tile * group * bdz,
        "threads": threads,
        "stages": stages,
        "smem": smem,
    }


def flashinfer_decode_ctas_per_sm(tile: dict[str, int], smem_per_sm: float, head_dim: int = 128, group: int = 4) -> int:
    """CTAs of the decode kernel per SM (``cudaOccupancyMaxActiveBlocksPerMultiprocessor``): the
    smallest of 2048 threads, 64 K registers at :data:`FLASHINFER_DECODE_REGISTERS` a thread,
    the shared memory and 32 CTAs."""
    threads = tile["threads"]
    regs = FLASHINFER_DECODE_REGISTERS.get((int(head_dim), int(group)), FLASHINFER_DECODE_REGISTERS_OTHER)
    by_regs = 65536 // (regs * threads)
    return max(1, min(2048 // threads, by_regs, int(smem_per_sm) // max(tile["smem"], 1), 32))


def flashinfer_decode_chunks(batch: int, kv_heads: int, pages: int, page_size: int, max_grid: int) -> tuple[int, int]:
    """(chunks per request, pages per chunk) of FlashInfer's decode plan
    (``BatchDecodeWithPagedKVCacheWorkEstimationDispatched``): no split where batch · H_kv CTAs
    fill ``max_grid`` (CTAs per SM × SMs); else the fewest pages per chunk, at least
    max(128 / P, 1), whose chunks fit the grid
    (``PartitionPagedKVCacheBinarySearchMinNumPagePerBatch``, every request alike)."""
    if batch * kv_heads >= max_grid:
        return 1, max(pages, 1)
    low, high = max(128 // page_size, 1), pages
    while low < high:
        mid = (low + high) // 2
        if batch * -(-pages // mid) * kv_heads > max_grid:
            low = mid + 1
        else:
            high = mid
    return -(-max(pages, 1) // low), low


def flashinfer_fa2_tile_q(packed_rows: int, d: int) -> int:
    """The FA2-style prefill kernel's query tile (``FA2DetermineCtaTileQ``, ``utils.cuh``): 128
    packed rows past 64 (d < 256), 64 past 16, else 16."""
    if packed_rows > 64 and d < 256:
        return 128
    return 64 if packed_rows > 16 else 16


def flashinfer_fa2_tile_kv(tile_q: int) -> int:
    """Its K/V tile: NUM_MMA_KV × 16 × NUM_WARPS_KV (``BatchPrefillWithPagedKVCacheDispatched``):
    128-row tiles 4 × 16 × 1 (registers: 8 / NUM_MMA_Q); 64 rows 8 × 16 × 1; 16 rows take four
    K/V warps, 2 × 16 × 4 assumed (the shared memory decides there)."""
    return {128: 64, 64: 128}.get(tile_q, 128)


def flashinfer_prefill_chunks(
    batch: int, kv_heads: int, tiles_q: int, pages: int, page_size: int, sm_count: int
) -> tuple[int, int]:
    """(chunks per request, pages per chunk) of the FA2-style prefill plan
    (``PrefillSplitQOKVIndptr`` with ``PrefillBinarySearchKVChunkSize``): the fewest pages per
    chunk, at least max(128 / P, 1), that keep batch · Q tiles · chunks within
    2 · SMs / H_kv; split where that is fewer pages than a request has."""
    limit = (FLASHINFER_PREFILL_CTAS_PER_SM * sm_count) // kv_heads
    low, high = max(128 // page_size, 1), max(pages, 1)
    while low < high:
        mid = (low + high) // 2
        if batch * tiles_q * -(-max(pages, 1) // mid) > limit:
            low = mid + 1
        else:
            high = mid
    if low >= max(pages, 1):
        return 1, max(pages, 1)
    return -(-max(pages, 1) // low), low


def flashinfer_fa3_tiles(d: int) -> tuple[int, int]:
    """The sm90 paged prefill's (CTA_Q, CTA_KV) (``hopper/prefill_sm90.cuh``,
    ``BatchPrefillWithPagedKVCacheDispatched``): 192 × 96 at d = 64, 128 × 96 at 128, 128 × 32 at 256."""
    return {64: (192, 96), 128: (128, 96)}.get(d, (128, 32))


def flex_split_kv(batch: int, kv_heads: int, sm_count: int) -> int:
    """flex decoding's SPLIT_KV (``get_split_k``): SMs // (B · H_kv) · 2, at least 1."""
    return max(sm_count // max(batch * kv_heads, 1) * 2, 1)


def flex_decode_ctas_per_sm(d: int, block_n: int, paged: bool) -> int:
    """CTAs of flex's decoding kernel an SM holds (:data:`FLEX_DECODE_CTAS_PER_SM_CONTIGUOUS`,
    :data:`FLEX_DECODE_CTAS_PER_SM_PAGED`): by the head dim contiguous, by BLOCK_N paged."""
    table = FLEX_DECODE_CTAS_PER_SM_PAGED if paged else FLEX_DECODE_CTAS_PER_SM_CONTIGUOUS
    key = int(block_n) if paged else int(d)
    return table[min(table, key=lambda k: (abs(math.log2(k) - math.log2(max(key, 1))), k))]


def flex_tile_kv(kv_len: IntLike, split: IntLike, block_n: IntLike) -> IntLike:
    """flex decoding's TILE_KV: ⌈⌈KV_LEN / SPLIT_KV⌉ / BLOCK_N⌉ · BLOCK_N tokens a split covers."""
    return intmath.mul(intmath.ceil_div(intmath.ceil_div(kv_len, split), block_n), block_n)


def flex_working_splits(tokens: IntLike, tile: IntLike, split: IntLike) -> IntLike:
    """The splits that find K/V blocks: ⌈tokens / TILE_KV⌉, at most SPLIT_KV (the others exit)."""
    return intmath.minimum(intmath.ceil_div(tokens, tile), split)


def flex_forward_tiles(dtype: str, d: int) -> tuple[int, int]:
    """flex_attention's forward (BLOCK_M, BLOCK_N) on sm90 (:data:`FLEX_FORWARD_SM90`)."""
    if d > 256:
        return (64, 32)
    key = min((k for k in (64, 128, 256) if k >= d), default=256)
    return FLEX_FORWARD_SM90.get((dtype, key), (128, 64))


# ---------------------------------------------------------------------------------------
# The ledgers


def _each(fn: Any, *values: Any) -> tuple[Any, ...]:
    """``fn(*ints) -> tuple of ints`` for integers, or element by element over arrays that
    broadcast (each distinct combination once): a tuple of ints or of int64 arrays."""
    if not any(np.ndim(v) for v in values):
        return tuple(int(x) for x in fn(*(int(v) for v in values)))
    arrays = np.broadcast_arrays(*(np.asarray(v, dtype=np.int64) for v in values))
    flat = np.stack([a.ravel() for a in arrays], axis=1)
    rows, inverse = np.unique(flat, axis=0, return_inverse=True)
    results = np.asarray([fn(*(int(x) for x in row)) for row in rows], dtype=np.int64)
    return tuple(results[:, i][inverse.ravel()].reshape(arrays[0].shape) for i in range(results.shape[1]))


def row_bytes(d: IntLike, e: int) -> IntLike:
    """Bytes one token's row of one head occupies as loaded: d·e in 32-byte sectors."""
    return intmath.mul(intmath.ceil_div(intmath.mul(d, e), SECTOR_BYTES), SECTOR_BYTES)


def pages(w: Workload) -> IntLike:
    """⌈n_kv / P⌉ pages per request."""
    assert w.page_size is not None
    return intmath.ceil_div(w.n_kv_, w.page_size)


def _sectors(nbytes: IntLike) -> IntLike:
    return intmath.mul(intmath.ceil_div(nbytes, SECTOR_BYTES), SECTOR_BYTES)


def _outputs(
    k: KernelBuilder, o: IntLike, partial_o: IntLike, partial_lse: IntLike, chunks: IntLike, fo: str, fl: str
) -> None:
    """O where the kernel does not split; its chunks' partial O and logsumexp where it does (a
    grid: each where it applies, 0 elsewhere)."""
    split = np.asarray(chunks) > 1
    if not intmath.is_array(chunks):
        if split:
            k.write("O_partial", "intermediate", partial_o, fo)
            k.write("lse_partial", "intermediate", partial_lse, fl)
        else:
            k.write("O", "output", o, "B·H·N·d·e")
        return
    k.write("O", "output", np.where(split, 0, np.asarray(o)), "B·H·N·d·e (where not split)")
    k.write("O_partial", "intermediate", np.where(split, np.asarray(partial_o), 0), fo)
    k.write("lse_partial", "intermediate", np.where(split, np.asarray(partial_lse), 0), fl)


def _page_table(k: KernelBuilder, w: Workload, requests: IntLike, readers: IntLike, chunks: IntLike) -> None:
    """The block table (int32 page indices, one request's contiguous) and indptr / last_page_len,
    read by every K/V head's CTAs (L2), from HBM once; the plan's per-CTA request and K/V-tile
    indices beside them."""
    table = intmath.mul(w.batch, pages(w), INDEX_BYTES)
    k.read("block_table", "state", intmath.mul(table, readers), _sectors(table), "B·⌈N_kv/P⌉·4 (page indices)")
    meta = intmath.mul(intmath.add(intmath.mul(2, w.batch), 1, intmath.mul(2, requests, chunks)), INDEX_BYTES)
    k.read("indptr", "state", meta, _sectors(meta), "(2B + 1 + 2·B·chunks)·4 (indptr, last_page_len, plan)")


def flashinfer_decode_kernels(w: Workload, l2: l2m.L2, sm_count: int, smem_per_sm: float) -> tuple[list[Kernel], dict]:
    """FlashInfer's ``BatchDecodeWithPagedKVCacheWrapper`` (CUDA cores; ``use_tensor_cores=False``):
    ``BatchDecodeWithPagedKVCacheKernel`` on a grid of (requests × chunks, H_kv) CTAs, each the
    group's query heads against one chunk of one request's K/V (every valid row read once), and
    where the plan split, ``PersistentVariableLengthMergeStatesKernel`` over the chunks' partial
    O (in the output dtype: the kernel's ``tmp_v`` is ``DTypeO``) and logsumexp (fp32). An FP8
    cache (``Workload.kv_dtype``) is read at a byte an element and converted in registers by every
    thread that reads it (``cast_load`` in ``compute_qk`` and ``update_local_state``: once for each
    query head of the group, ``Kernel.converted_elements``), its tile built for the 1-byte loads
    (``vec_size`` 16 / sizeof(DTypeKV))."""
    e, ekv = w.element_bytes, w.kv_element_bytes
    ps = int(w.page_size or 1)

    def plan(d: int, g: int, b: int, hk: int, nkv: int) -> tuple[int, ...]:
        tile = flashinfer_decode_tile(d, g, ekv)
        per_sm = flashinfer_decode_ctas_per_sm(tile, smem_per_sm, d, g)
        chunks, chunk_pages = flashinfer_decode_chunks(b, hk, -(-nkv // ps), ps, per_sm * sm_count)
        return chunks, chunk_pages, per_sm, tile["tokens_per_iter"], tile["stages"], tile["threads"]

    chunks, chunk_pages, per_sm, tokens_iter, stages, _ = _each(plan, w.d, w.group, w.batch, w.kv_heads_, w.n_kv_)
    bh = intmath.mul(w.batch, w.heads)
    q = intmath.mul(bh, w.n, w.d, e)
    kv = intmath.mul(w.batch, w.kv_heads_, w.n_kv_, row_bytes(w.d, ekv))
    ctas = intmath.mul(w.batch, chunks, w.kv_heads_)
    split = np.asarray(chunks) > 1
    k = KernelBuilder("flashinfer_decode")
    k.read("Q", "input", intmath.mul(q, chunks), q, "B·H·d·e · chunks (each chunk's CTA its group's rows)")
    k.read("K", "input", kv, kv, "B·H_kv·N_kv·⌈d·e/32⌉·32 (valid rows only)")
    k.read("V", "input", kv, kv, "B·H_kv·N_kv·⌈d·e/32⌉·32 (valid rows only)")
    _page_table(k, w, w.batch, w.kv_heads_, chunks)
    partial_o = intmath.mul(bh, chunks, w.d, e)
    partial_lse = intmath.mul(bh, chunks, STAT_BYTES)
    _outputs(k, q, partial_o, partial_lse, chunks, "B·H·chunks·d·e", "B·H·chunks·4")
    scores = intmath.mul(bh, w.n_kv_)
    dots = intmath.add(intmath.mul(4, scores, w.d), intmath.mul(4, scores))  # dot products on CUDA cores
    converted = intmath.mul(2, scores, w.d) if w.kv_dtype is not None else 0  # K and V, per query head
    decode = k.build(
        softmax_flops=dots,
        converted_elements=converted,
        exp_ops=scores,
        concurrent_ctas=intmath.minimum(ctas, intmath.mul(per_sm, sm_count)),
        ctas=ctas,
        bytes_in_flight_per_cta=intmath.mul(2, stages, tokens_iter, row_bytes(w.d, ekv)),
        overlap="serial-compute",
        splits=chunks,
        kind=SPLIT_KV,
        figures_from="sdpa-flash",
        figures_own="flashinfer",
    )
    kernels = [decode]
    if np.any(split):
        c = KernelBuilder("flashinfer_merge")
        c.read("O_partial", "intermediate", partial_o, l2m.carried_over(partial_o, l2), "B·H·chunks·d·e")
        c.read("lse_partial", "intermediate", partial_lse, l2m.carried_over(partial_lse, l2), "B·H·chunks·4")
        c.write("O", "output", q, "B·H·d·e")
        merge = c.build(
            softmax_flops=intmath.mul(3, bh, chunks, w.d),
            exp_ops=intmath.mul(bh, chunks),
            splits=chunks,
            kind=COMBINE,
            figures_from="sdpa-flash",
            figures_own="flashinfer",
            present=split if intmath.is_array(chunks) else True,
        )
        kernels.append(merge)
    params = {
        "kernel": "decode (CUDA cores)",
        "page_size": ps,
        "kv_element_bytes": ekv,
        "kv_layout": "NHD",
        "chunks": chunks,
        "chunk_pages": chunk_pages,
        "ctas_per_sm": per_sm,
        "concurrent_ctas": intmath.mul(per_sm, sm_count),  # the kernel's own, not the plan's generic rule
        "tokens_per_iteration": tokens_iter,
        "kv_chunks": intmath.mul(w.batch, w.kv_heads_, w.n_kv_),
    }
    return kernels, params


def _causal_visible(n: IntLike, n_kv: IntLike, causal: bool, rows_per_tile: IntLike, tiles: IntLike) -> IntLike:
    """Σ over a request's Q tiles of the keys the tile's rows see (bottom-right causal: tile i of
    ``rows_per_tile`` query tokens sees n_kv − n + its last row + 1 keys, at most n_kv)."""
    if not causal:
        return intmath.mul(tiles, n_kv)

    def one(n: int, nkv: int, r: int, t: int) -> tuple[int]:
        return (sum(min(nkv, nkv - n + min((i + 1) * r, n)) for i in range(t)),)

    return _each(one, n, n_kv, rows_per_tile, tiles)[0]


def _prefill_kernel(
    name: str,
    w: Workload,
    l2: l2m.L2,
    *,
    tile_q_rows: IntLike,
    tile_kv: IntLike,
    packed: bool,
    chunks: IntLike,
    concurrent: IntLike,
    figures_from: str,
    figures_own: str,
    kv_tokens: IntLike,
    bc_visible_blocks: Any,
    whole_tiles: bool = False,
    partial_blocks: IntLike | None = None,
    checked_blocks: IntLike = 0,
    strided_grid: bool = False,
) -> tuple[Kernel, IntLike, IntLike]:
    """One paged prefill kernel: Q tiles of ``tile_q_rows`` rows (GQA packed: the group's heads'
    rows of one token together, one CTA row per K/V head; else one per query head) against the
    request's K/V (causal: what each tile sees), in ``chunks`` K/V chunks; K/V re-read by the Q
    tiles of one (request, K/V head) through L2 by the house's re-read rule. Returns the kernel,
    its partial O bytes and partial logsumexp bytes (0 where it does not split).
    ``partial_blocks``: the steps over partial blocks per CTA row (Σ over its tiles), where the
    kernel's block mask says (else one a tile on the causal diagonal); ``checked_blocks``: its
    bounds-checked steps per CTA row (flex's, where a length is not a multiple of 128);
    ``strided_grid``: the grid runs (Q tile, request, query head), flex's, so a group's query heads
    are a row of requests apart (:func:`.flex.strided_kv_hbm`)."""
    e = w.element_bytes
    g = w.group
    rows = intmath.mul(w.n, g) if packed else w.n  # query rows of one CTA row
    tiles = intmath.ceil_div(rows, tile_q_rows)
    tokens_per_tile = intmath.floor_div(tile_q_rows, g) if packed else tile_q_rows
    tokens_per_tile = intmath.maximum(tokens_per_tile, 1)
    cta_rows = intmath.mul(w.batch, w.kv_heads_) if packed else intmath.mul(w.batch, w.heads)
    visible = _causal_visible(w.n, kv_tokens, bool(w.causal), tokens_per_tile, tiles)  # keys, Σ over tiles
    row = row_bytes(w.d, e)
    kv_requested = intmath.mul(cta_rows, visible, row)  # each CTA row (Q tile) reads what it sees
    kv_unique = intmath.mul(w.batch, w.kv_heads_, kv_tokens, row)
    readers = tiles if packed else intmath.mul(tiles, g)  # CTAs sharing one (request, K/V head)'s K/V
    per_head = intmath.mul(kv_tokens, row, 2)
    if not strided_grid:
        kv_hbm = l2m.reread_hbm(
            intmath.mul(kv_unique, 2),
            intmath.mul(kv_requested, 2),
            intmath.mul(readers, chunks),
            per_head,
            l2.with_ctas(concurrent),
            intmath.mul(w.batch, w.kv_heads_),
        )
    else:  # flex's grid: a request's query heads of one group are a row of requests apart
        kv_hbm = strided_kv_hbm(
            w, l2.with_ctas(concurrent), intmath.mul(kv_unique, 2), intmath.mul(kv_requested, 2), tiles, per_head
        )
    half = intmath.floor_div(kv_hbm, 2)
    bh = intmath.mul(w.batch, w.heads)
    q = intmath.mul(bh, w.n, w.d, e)
    k = KernelBuilder(name)
    k.read("Q", "input", intmath.mul(q, chunks), q, "B·H·N·d·e · chunks")
    k.read("K", "input", kv_requested, half, "Σ_tiles visible keys · ⌈d·e/32⌉·32 per CTA row")
    k.read("V", "input", kv_requested, half, "Σ_tiles visible keys · ⌈d·e/32⌉·32 per CTA row")
    _page_table(k, w, intmath.mul(w.batch, tiles), intmath.mul(w.kv_heads_ if packed else w.heads, tiles), chunks)
    split = np.asarray(chunks) > 1
    partial_o = intmath.mul(bh, chunks, w.n, w.d, e)
    partial_lse = intmath.mul(bh, chunks, w.n, STAT_BYTES)
    _outputs(k, q, partial_o, partial_lse, chunks, "B·H·chunks·N·d·e", "B·H·chunks·N·4")
    scores_kept = intmath.mul(cta_rows, visible, tokens_per_tile, g if packed else 1)
    # FLOPs by the house's convention over the (query, key) pairs the tiles compute: the tiles
    # each compute their rows against the keys they see
    # (``whole_tiles``: flex's template computes every row of its BLOCK_M tile, those past the
    # queries masked after the products, so a tile of fewer queries costs a whole tile's work)
    scores = scores_kept if whole_tiles else intmath.minimum(scores_kept, intmath.mul(bh, w.n, kv_tokens))
    ctas = intmath.mul(cta_rows, tiles, chunks)
    kernel = k.build(
        matmul_flops=intmath.mul(4, scores, w.d),
        softmax_flops=intmath.mul(4, scores),
        exp_ops=scores,
        concurrent_ctas=intmath.minimum(ctas, concurrent),
        ctas=ctas,
        blocks=intmath.mul(cta_rows, bc_visible_blocks),
        diagonal_blocks=intmath.mul(cta_rows, partial_blocks)
        if partial_blocks is not None
        else (intmath.mul(cta_rows, tiles) if w.causal else 0),
        checked_blocks=intmath.mul(cta_rows, checked_blocks),
        bytes_in_flight_per_cta=intmath.mul(2, tile_kv, row),
        overlap="serial-compute",
        splits=chunks,
        figures_from=figures_from,
        figures_own=figures_own,
    )
    return kernel, partial_o if np.any(split) else 0, partial_lse if np.any(split) else 0


def _merge(name: str, w: Workload, l2: l2m.L2, partial_o: IntLike, partial_lse: IntLike, chunks: IntLike) -> Kernel:
    e = w.element_bytes
    bh = intmath.mul(w.batch, w.heads)
    c = KernelBuilder(name)
    c.read("O_partial", "intermediate", partial_o, l2m.carried_over(partial_o, l2), "B·H·chunks·N·d·e")
    c.read("lse_partial", "intermediate", partial_lse, l2m.carried_over(partial_lse, l2), "B·H·chunks·N·4")
    c.write("O", "output", intmath.mul(bh, w.n, w.d, e), "B·H·N·d·e")
    split = np.asarray(chunks) > 1
    return c.build(
        softmax_flops=intmath.mul(3, bh, chunks, w.n, w.d),
        exp_ops=intmath.mul(bh, chunks, w.n),
        splits=chunks,
        kind=COMBINE,
        figures_from="sdpa-flash",
        figures_own="flashinfer",
        present=split if split.ndim else True,
    )


def flashinfer_fa2_kernels(w: Workload, l2: l2m.L2, sm_count: int, *, decode: bool) -> tuple[list[Kernel], dict]:
    """FlashInfer's FA2-style paged prefill (``BatchPrefillWithPagedKVCacheKernel``, ``prefill.cuh``,
    mma.sync): chunked prefill off sm90, and decoding through the tensor cores
    (``use_tensor_cores=True``, the query rows of a group packed). Q tiles of packed rows per K/V
    head, the plan's K/V chunks (``PrefillPlan``), a merge where it splits."""
    ps = int(w.page_size or 1)

    def plan(n: int, g: int, d: int, b: int, hk: int, nkv: int) -> tuple[int, ...]:
        tq = flashinfer_fa2_tile_q(n * g, d)
        tiles = -(-(n * g) // tq)
        chunks, chunk_pages = flashinfer_prefill_chunks(b, hk, tiles, -(-nkv // ps), ps, sm_count)
        return tq, flashinfer_fa2_tile_kv(tq), chunks, chunk_pages, tiles

    tq, tkv, chunks, chunk_pages, tiles = _each(plan, w.n, w.group, w.d, w.batch, w.kv_heads_, w.n_kv_)
    concurrent = FLASHINFER_PREFILL_CTAS_PER_SM * sm_count
    blocks = intmath.mul(tiles, intmath.ceil_div(w.n_kv_, tkv))
    kernel, po, pl = _prefill_kernel(
        "flashinfer_prefill",
        w,
        l2,
        tile_q_rows=tq,
        tile_kv=tkv,
        packed=True,
        chunks=chunks,
        concurrent=concurrent,
        figures_from="sdpa-flash",
        figures_own="flashinfer-fa2",
        kv_tokens=w.n_kv_,
        bc_visible_blocks=blocks,
    )
    kernels = [kernel]
    if np.any(np.asarray(chunks) > 1):
        kernels.append(_merge("flashinfer_merge", w, l2, po, pl, chunks))
    params = {
        "kernel": "decode (tensor cores: prefill kernel, fa2)" if decode else "prefill (fa2)",
        "page_size": ps,
        "kv_layout": "NHD",
        "cta_tile_q": tq,
        "cta_tile_kv": tkv,
        "chunks": chunks,
        "chunk_pages": chunk_pages,
        "kv_chunks": intmath.mul(w.batch, w.kv_heads_, w.n_kv_),
    }
    return kernels, params


def flashinfer_fa3_kernels(w: Workload, l2: l2m.L2, sm_count: int) -> tuple[list[Kernel], dict]:
    """FlashInfer's sm90 paged prefill (``hopper/prefill_sm90.cuh``, wgmma, warp-specialised): a
    persistent grid of one CTA per SM (``PrefillSM90Plan``) that walks (query head, request, Q
    tile) work items, heaviest first; no GQA packing, no K/V split, no merge."""
    ps = int(w.page_size or 1)
    tq, tkv = _each(lambda d: flashinfer_fa3_tiles(d), w.d)
    tiles = intmath.ceil_div(w.n, tq)
    kernel, _, _ = _prefill_kernel(
        "flashinfer_prefill_sm90",
        w,
        l2,
        tile_q_rows=tq,
        tile_kv=tkv,
        packed=False,
        chunks=1,
        concurrent=sm_count,
        figures_from="fa3",
        figures_own="flashinfer",
        kv_tokens=w.n_kv_,
        bc_visible_blocks=intmath.mul(tiles, intmath.ceil_div(w.n_kv_, tkv)),
    )
    params = {
        "kernel": "prefill (fa3, sm90)",
        "page_size": ps,
        "kv_layout": "NHD",
        "cta_tile_q": tq,
        "cta_tile_kv": tkv,
        "chunks": 1,
        "kv_chunks": intmath.mul(w.batch, w.kv_heads_, w.n_kv_),
    }
    return [kernel], params


def flex_kv_tokens(w: Workload) -> IntLike:
    """Tokens of K/V flex loads per request: whole pages (⌈n_kv / P⌉·P) in a paged cache, the
    valid keys in a contiguous one (its loads are masked at the sequence's end)."""
    if w.page_size is None:
        return w.n_kv_
    return intmath.mul(pages(w), w.page_size)


def flex_block_n(w: Workload, config_n: IntLike) -> IntLike:
    """flex's BLOCK_N: the config's, no more than the BlockMask's KV block (the page, when paged)."""
    if w.page_size is None:
        return config_n
    return intmath.minimum(config_n, w.page_size)


def flex_decode_kernels(w: Workload, l2: l2m.L2, sm_count: int) -> tuple[list[Kernel], dict]:
    """FlexAttention's decoding template (``flex_decoding``): a grid of (⌈n·G / BLOCK_M⌉,
    B·H_kv, SPLIT_KV) CTAs, the group's query heads packed as the rows of a BLOCK_M tile
    (max(next power of two of n·G, 16)), each split a share of the kept K/V blocks, writing fp32
    partials (acc, row max, row sum); inductor's reduction over the splits then writes O.

    A split's share is TILE_KV = ⌈⌈KV_LEN / SPLIT_KV⌉ / BLOCK_N⌉ · BLOCK_N tokens of the K
    tensor's length KV_LEN (``flex_decoding.py``'s template), taken from the request's list of
    kept blocks in order: contiguous, KV_LEN is the request's keys and every split works; paged,
    K is the whole pool (1 × H_kv × pages·P × d), so only the first ⌈tokens / TILE_KV⌉ splits find
    blocks and the rest exit at once (:func:`flex_working_splits`)."""
    e = w.element_bytes
    split, bm = _each(
        lambda b, hk, n, g: (flex_split_kv(b, hk, sm_count), max(_next_power_of_two(n * g), 16)),
        w.batch,
        w.kv_heads_,
        w.n,
        w.group,
    )
    bn = flex_block_n(w, FLEX_DECODE_BLOCK_N)
    (per_sm,) = _each(lambda d, b: (flex_decode_ctas_per_sm(d, b, w.page_size is not None),), w.d, bn)
    tokens = flex_kv_tokens(w)
    kv_len = w.n_kv_ if w.page_size is None else intmath.mul(w.kv_pool_, w.page_size)
    tile = flex_tile_kv(kv_len, split, bn)
    splits = flex_working_splits(tokens, tile, split)
    row = row_bytes(w.d, e)
    kv = intmath.mul(w.batch, w.kv_heads_, tokens, row)
    bh = intmath.mul(w.batch, w.heads)
    q = intmath.mul(bh, w.n, w.d, e)
    m_blocks = intmath.ceil_div(intmath.mul(w.n, w.group), bm)
    k = KernelBuilder("flex_decode")
    k.read("Q", "input", intmath.mul(q, split), q, "B·H·N·d·e · SPLIT_KV")
    k.read("K", "input", intmath.mul(kv, m_blocks), kv, "B·H_kv·(⌈N_kv/P⌉·P)·⌈d·e/32⌉·32 (whole pages)")
    k.read("V", "input", intmath.mul(kv, m_blocks), kv, "B·H_kv·(⌈N_kv/P⌉·P)·⌈d·e/32⌉·32 (whole pages)")
    if w.page_size is not None:
        table = intmath.mul(w.batch, pages(w), INDEX_BYTES)
        k.read(
            "block_table",
            "state",
            intmath.mul(table, w.kv_heads_),
            _sectors(table),
            "B·⌈N_kv/P⌉·4 (the BlockMask's kv_indices)",
        )
    acc = intmath.mul(bh, split, w.n, w.d, ACC_BYTES)
    ml = intmath.mul(2, bh, split, w.n, STAT_BYTES)
    k.write("acc_partial", "intermediate", acc, "B·SPLIT_KV·H·N·d·4")
    k.write("ml_partial", "intermediate", ml, "2·B·SPLIT_KV·H·N·4")
    scores = intmath.mul(bh, w.n, w.n_kv_)
    ctas = intmath.mul(m_blocks, w.batch, w.kv_heads_, split)
    decode = k.build(
        matmul_flops=intmath.mul(4, scores, w.d),
        softmax_flops=intmath.mul(4, scores),
        exp_ops=scores,
        concurrent_ctas=intmath.minimum(ctas, intmath.mul(per_sm, sm_count)),
        ctas=ctas,
        exited_ctas=intmath.mul(m_blocks, w.batch, w.kv_heads_, split - splits),
        cta_steps=intmath.ceil_div(intmath.minimum(tile, tokens), bn),
        bytes_in_flight_per_cta=intmath.mul(2, 3, bn, row),
        overlap="serial-compute",
        splits=split,
        kind=SPLIT_KV,
        figures_from="sdpa-flash",
        figures_own="flex",
        kv_block=bn,
        step_bytes=intmath.mul(2, bn, row),
        # contiguous: the runner (a user) calls flex_attention without a block mask, which the
        # compiled graph then builds, each CTA walking the request's keys
        mask_keys=tokens if w.page_size is None else 0,
    )
    r = KernelBuilder("flex_reduce")
    r.read("acc_partial", "intermediate", acc, l2m.carried_over(acc, l2), "B·SPLIT_KV·H·N·d·4")
    r.read("ml_partial", "intermediate", ml, l2m.carried_over(ml, l2), "2·B·SPLIT_KV·H·N·4")
    r.write("O", "output", q, "B·H·N·d·e")
    reduce = r.build(
        softmax_flops=intmath.mul(3, bh, split, w.n, w.d), exp_ops=intmath.mul(bh, split, w.n), op="elementwise"
    )
    params = {
        "kernel": "flex_decoding",
        "page_size": w.page_size,
        "ctas_per_sm": per_sm,
        "concurrent_ctas": intmath.mul(per_sm, sm_count),  # the kernel's own, not the plan's generic rule
        "split_kv": split,
        "splits_with_blocks": splits,
        "tile_kv": tile,
        "block_m": bm,
        "block_n": bn,
        "kv_chunks": intmath.mul(w.batch, w.kv_heads_, pages(w))
        if w.page_size is not None
        else intmath.mul(w.batch, w.kv_heads_),
    }
    return [decode, reduce], params


def flex_forward_steps(w: Workload, block_m: IntLike, block_n: IntLike) -> tuple[IntLike, IntLike]:
    """(steps, steps over partial blocks), Σ over one (request, query head)'s Q tiles, of flex's
    forward template as the runner calls it: paged, under the BlockMask ``create_block_mask``
    makes of the logical mask (bottom-right causal, else every key) at (128, page) blocks, each
    block page / BLOCK_N steps: a block cut by the sequence's end is partial, so a decode's
    (one query in a 128-row block) are all partial and apply the converted ``mask_mod`` (its
    page lookup) element by element (:mod:`.flexmask`); contiguous without a mask, plain steps."""
    from .flexmask import block_counts

    causal = bool(w.causal)
    paged = w.page_size is not None

    def one(n: int, n_kv: int, p: int, bm: int, bn: int) -> tuple[int, int]:
        if not paged and not causal:
            return -(-n // bm) * -(-n_kv // bn), 0
        kv_block = p if paged else FLEX_SPARSE_BLOCK
        bc = block_counts(n, n_kv, causal, None, None, FLEX_SPARSE_BLOCK, kv_block)
        per = max(kv_block // bn, 1)
        row_of = np.arange(-(-n // bm)) * bm // FLEX_SPARSE_BLOCK  # the sparse row each Q tile walks
        visited = int((bc.full_q + bc.partial_q)[row_of].sum())
        return visited * per, int(bc.partial_q[row_of].sum()) * per

    return _each(one, w.n, w.n_kv_, w.page_size or 0, block_m, block_n)


def flex_forward_ctas_per_sm(dtype: str, e: int, d: int, block_n: int, paged: bool, smem_per_sm: float) -> int:
    """CTAs of flex's forward template an SM holds (:func:`.flex.ctas_per_sm`: its warps and its
    shared memory, a Q tile and three stages of K and V tiles of BLOCK_N rows), paged with
    16 bytes more a K/V row of a block (Nsight Compute on the H200: 256 to 2048 bytes more at
    BLOCK_N 16 to 128), which at d 64 and pages of 128 leaves room for one CTA, not two."""
    from .flex import ctas_per_sm, forward_config, forward_smem, rounded_head_dim

    bm, _, stages, warps = forward_config(dtype, d)
    p = rounded_head_dim(d)
    smem = forward_smem(bm, block_n, stages, p, p, e)
    return ctas_per_sm(warps * 32, smem + (16 * block_n if paged else 0), smem_per_sm)


def flex_forward_kernels(w: Workload, l2: l2m.L2, sm_count: int, smem_per_sm: float) -> tuple[list[Kernel], dict]:
    """FlexAttention's forward template (``triton_tem_fused_flex_attention``): a CTA per
    (BLOCK_M query rows, query head), each walking the K/V blocks its BlockMask row keeps
    (causal: those on or below the diagonal; the mask_mod runs on the partial ones only). Under
    one BlockMask row (fewer queries than its 128-row block: a decode) every block is partial
    and each CTA walks its steps one after another: ``cta_steps`` (its latency a step:
    ``implementations.flex.template_step_time``)."""
    bm, bn_conf = _each(lambda d: flex_forward_tiles(w.dtype, d), w.d)
    bn = flex_block_n(w, bn_conf)
    tokens = flex_kv_tokens(w)
    steps, partial = flex_forward_steps(w, bm, bn)
    (ctas_per_sm,) = _each(
        lambda d, b: (flex_forward_ctas_per_sm(w.dtype, w.element_bytes, d, b, w.page_size is not None, smem_per_sm),),
        w.d,
        bn,
    )
    concurrent = intmath.mul(ctas_per_sm, sm_count)
    kernel, _, _ = _prefill_kernel(
        "flex_attention",
        w,
        l2,
        tile_q_rows=bm,
        tile_kv=bn,
        packed=False,
        chunks=1,
        concurrent=concurrent,
        figures_from="triton",
        figures_own="flex",
        kv_tokens=tokens,
        bc_visible_blocks=steps,
        whole_tiles=True,
        partial_blocks=partial,
        strided_grid=True,
        # IS_DIVISIBLE over the query length and K's: the pool's (pages·P) where paged
        checked_blocks=checked_steps(
            intmath.add(steps, intmath.mul(-1, partial)),
            w.n,
            w.n_kv_ if w.page_size is None else intmath.mul(w.kv_pool_, w.page_size),
        ),
    )
    if w.page_size is not None:
        # a prefill's every step reads K/V through the page table (its measured extra cost,
        # implementations.flex.paged_step_cost, is a prefill's: a decode's steps, through the
        # same template, are bound by their loads and take none)
        prefill = np.asarray(w.n) > 1
        paged = np.where(prefill, np.asarray(kernel.blocks), 0)
        one_row = np.asarray(w.n) < FLEX_SPARSE_BLOCK  # one partial BlockMask row: a decode's steps
        walk = np.where(one_row, np.asarray(steps), 0)
        kernel = dataclasses.replace(
            kernel,
            kv_block=bn,
            paged_blocks=int(paged) if paged.ndim == 0 else paged,
            cta_steps=int(walk) if walk.ndim == 0 else walk,
        )
    params = {
        "kernel": "flex_attention",
        "page_size": w.page_size,
        "ctas_per_sm": ctas_per_sm,
        "concurrent_ctas": concurrent,  # the template's own, not the plan's generic rule
        "block_m": bm,
        "block_n": bn,
        "kv_chunks": intmath.mul(w.batch, w.kv_heads_, pages(w))
        if w.page_size is not None
        else intmath.mul(w.batch, w.kv_heads_),
    }
    return [kernel], params
