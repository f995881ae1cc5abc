"""Multi-head latent attention (MLA) decoding in the absorbed form, and PyTorch's math fallback.

DeepSeek-V2/V3 cache one latent row per token and layer: ``kv_lora_rank`` (512) elements of
compressed K/V and ``qk_rope_head_dim`` (64) of rotary key. Decoding absorbs the up-projections
into the query and the output, so attention runs with every query head on one K/V head of
d = 576, V being the first 512 elements of the same cached row (d_v = 512): the cache is read once,
576 elements a token, not 576 + 512.

:func:`flashinfer_mla_kernels` is FlashInfer's Hopper MLA decode as ``BatchMLAPagedAttentionWrapper``
runs it (``include/flashinfer/attention/mla_hopper.cuh`` and ``MLAPlan`` in
``include/flashinfer/attention/scheduler.cuh``, commit :data:`~memmodel.implementations.FLASHINFER_COMMIT`):

* its plan packs each request's query tokens × heads as rows; clusters of one CTA (64 rows or
  fewer a request) or two (more) each take 64 · cluster rows; there are SMs / cluster clusters;
* the K/V length a cluster takes at once is ``kv_len_limit``: the work (each request's tiles ×
  its keys) over the clusters, rounded (32, 64, 128, 192, else up to a multiple of 256); a tile
  whose keys exceed it is split into ⌈N_kv / limit⌉ chunks, each writing a partial O (the output
  dtype) and its logsumexp (fp32) for its rows;
* one persistent cooperative kernel: each CTA loads its 64 rows of Q (latent and rotary parts)
  and walks its chunk's 64-token K/V tiles (latent and rotary rows, two stages) through the page
  table, writing O directly where the tile was not split; after a grid-wide barrier the same launch
  merges the partials of the split tiles into O (``DevicePersistentMergeStates``): one ledger
  kernel, the merge's transfers in it.

Both CTAs of a cluster read the same K/V chunk at the same time (L2 requests twice, HBM once);
the query tiles of one request beyond the first (more than 128 rows: several tokens a request)
are taken to read its cache from HBM again.

Where DeepSeek's FlashMLA (commit :data:`~memmodel.implementations.FLASHMLA_COMMIT`) differs: a
grid of batch × ⌈rows/64⌉ × ``num_sm_parts`` CTAs (num_sm_parts = SMs / ⌈rows/64⌉ per K/V head)
fed by the scheduler metadata ``get_mla_metadata`` computes; page blocks of 64 tokens; partial O
and logsumexp in fp32 (``out_accum``, ``lse_accum``: batch + num_sm_parts splits); a separate
combine kernel. Not modelled apart.

:func:`math_fallback_kernels` is PyTorch's ``_scaled_dot_product_attention_math`` on such a shape
(``aten/src/ATen/native/transformers/attention.cpp``): fp16/bf16 Q, K, V cast to fp32; Q scaled;
K and V copied to every query head (``pre_process_group_query_attention_input``:
``repeat_interleave``); the copied K scaled; fp32 Q·Kᵀ; softmax; P·V; O cast back, and P cast
back too (the function returns it).
"""

from __future__ import annotations

import functools
import heapq
from typing import Any

import numpy as np

from .. import intmath
from ..intmath import IntLike
from ..workload import STAT_BYTES, Workload
from . import l2 as l2m
from .ledger import Kernel, KernelBuilder
from .standard import elementwise_launches

#: rows and tokens of FlashInfer's Hopper MLA CTA tile, and its K/V pipeline stages
TILE, STAGES = 64, 2
#: bytes of a page-table entry (int32 page indices)
INDEX_BYTES = 4


def kv_len_limit(per_cluster: int) -> int:
    """``MLAPlan``'s K/V length per work item for ``per_cluster`` keys of work per cluster: 32
    up to 8, 64 up to 16, 128 up to 32, 192 up to 64, else rounded up to a multiple of 256."""
    if per_cluster <= 8:
        return 32
    if per_cluster <= 16:
        return 64
    if per_cluster <= 32:
        return 128
    if per_cluster <= 64:
        return 192
    return -(-per_cluster // 256) * 256


def flashinfer_plan(batch: int, heads: int, n: int, n_kv: int, sm_count: int) -> dict[str, int]:
    """``MLAPlan`` for ``batch`` requests of ``n`` query tokens and ``n_kv`` keys each (all alike):
    the cluster size, clusters, query tiles a request, K/V length a work item, chunks a tile (1:
    not split), and the tokens its CTAs compute (whole 64-token tiles)."""
    rows = n * heads
    cluster = 2 if rows > TILE else 1
    clusters = max(1, sm_count // cluster)
    tile_q = TILE * cluster
    tiles = -(-rows // tile_q)
    total = batch * tiles * n_kv
    limit = kv_len_limit(max(-(-total // clusters), 1))
    chunks = -(-n_kv // limit) if n_kv > limit else 1
    full, rest = divmod(n_kv, limit) if chunks > 1 else (0, n_kv)
    executed = full * (-(-limit // TILE) * TILE) + -(-rest // TILE) * TILE
    return {
        "cluster": cluster,
        "clusters": clusters,
        "tiles": tiles,
        "kv_len_limit": limit,
        "chunks": chunks,
        "executed_tokens": executed,
        "tail": cluster_tail(batch * tiles, n_kv, limit, clusters, tile_q),
    }


#: work items beyond which the plan's assignment is not replayed (its tail taken as 1): FlashInfer's
#: own bound on a plan's works (``max_total_num_works``)
MAX_WORKS = 16384


@functools.lru_cache(maxsize=4096)
def cluster_tail(tiles: int, n_kv: int, limit: int, clusters: int, tile_q: int) -> float:
    """The busiest cluster's computed tokens over the mean cluster's, as ``MLAPlan`` assigns the
    work: each query tile's K/V in chunks of ``limit`` keys (the last the rest), tile by tile,
    each chunk to the cluster of least cost so far, a chunk costing 2 · ``tile_q`` + its keys
    (``cost_function``; ``MinHeap`` in ``include/flashinfer/attention/heap.h``). A cluster walks
    its chunks one after another in whole 64-token tiles, so the launch lasts as long as its
    busiest cluster; the model's compute is the mean's. 1 past :data:`MAX_WORKS` items."""
    chunks = -(-n_kv // limit) if n_kv > limit else 1
    if tiles * chunks > MAX_WORKS or clusters < 1:
        return 1.0
    lengths = [limit] * (chunks - 1) + [n_kv - limit * (chunks - 1)]
    heap = [(0.0, i) for i in range(clusters)]
    done = [0] * clusters
    for _ in range(tiles):
        for length in lengths:
            cost, i = heapq.heappop(heap)
            heapq.heappush(heap, (cost + 2.0 * tile_q + length, i))
            done[i] += -(-length // TILE) * TILE
    mean = sum(done) / clusters
    return max(done) / mean if mean > 0 else 1.0


def plan_arrays(w: Workload, sm_count: int) -> dict[str, IntLike]:
    """:func:`flashinfer_plan` for ``w`` (per element on a grid)."""
    if not w.is_grid:
        return flashinfer_plan(int(w.batch), int(w.heads), int(w.n), int(w.n_kv_), sm_count)
    arrays = np.broadcast_arrays(*(np.asarray(x, dtype=np.int64) for x in (w.batch, w.heads, w.n, w.n_kv_)))
    keys = ("cluster", "clusters", "tiles", "kv_len_limit", "chunks", "executed_tokens", "tail")
    found = np.vectorize(
        lambda b, h, n, k: tuple(flashinfer_plan(int(b), int(h), int(n), int(k), sm_count)[x] for x in keys),
        otypes=[np.int64] * (len(keys) - 1) + [np.float64],
    )(*arrays)
    return dict(zip(keys, found))


def flashinfer_mla_kernels(w: Workload, l2: l2m.L2, sm_count: int, page_size: int = TILE) -> list[Kernel]:
    """FlashInfer's Hopper MLA decode on the absorbed workload ``w`` (heads query heads on one
    K/V head, d = 576, d_v = 512): the main phase and the merge of its one launch (module
    docstring); ``page_size`` tokens a page of the paged cache."""
    p = plan_arrays(w, sm_count)
    e = w.element_bytes
    b, h, n, n_kv = w.batch, w.heads, w.n, w.n_kv_
    rows = intmath.mul(b, h, n)  # packed query rows of the batch
    cluster, tiles, chunks = p["cluster"], p["tiles"], p["chunks"]
    split = np.asarray(chunks) > 1
    off = l2.mode == "off"
    row_kv = intmath.mul(w.d, e)  # one cached token: latent + rotary parts (V is its first d_v)
    q = intmath.mul(rows, w.d, e)
    q_req = intmath.mul(q, chunks)  # each chunk's work item loads its rows of Q again
    kv_unique = intmath.mul(b, n_kv, row_kv)
    kv_hbm = intmath.mul(kv_unique, tiles)  # a request's further query tiles read it again
    kv_req = intmath.mul(kv_hbm, cluster)  # both CTAs of a cluster load the chunk
    pages = intmath.mul(b, intmath.ceil_div(n_kv, page_size), INDEX_BYTES)
    pages_req = intmath.mul(pages, tiles, cluster)
    o = intmath.mul(rows, w.d_v_, e)  # final O (the output dtype)
    part_rows = np.where(split, np.asarray(intmath.mul(rows, chunks)), 0)
    part_rows = int(part_rows) if np.ndim(part_rows) == 0 else part_rows.astype(np.int64)
    partial_o = intmath.mul(part_rows, w.d_v_, e)
    partial_lse = intmath.mul(part_rows, STAT_BYTES)
    direct_o = np.where(split, 0, np.asarray(o))
    direct_o = int(direct_o) if np.ndim(direct_o) == 0 else direct_o.astype(np.int64)
    ctas = intmath.mul(p["clusters"], cluster)  # a persistent grid: one CTA per SM
    # whole tiles: every CTA computes 64 rows against whole 64-token tiles of its chunks
    exec_scores = intmath.mul(b, tiles, cluster, TILE, chunks_tokens(p))
    k = KernelBuilder("flashinfer_mla")
    k.read("Q", "input", q_req, q if not off else q_req, "chunks · B·H·N·(d_ckv + d_kpe)·e (latent and rotary parts)")
    k.read(
        "KV",
        "input",
        kv_req,
        kv_hbm if not off else kv_req,
        "cluster · tiles · B·N_kv·(d_ckv + d_kpe)·e (the latent cache, read once: V is its first d_v)",
    )
    k.read("page_table", "state", pages_req, pages if not off else pages_req, "cluster · tiles · B·⌈N_kv/page⌉·4")
    k.write("O", "output", direct_o, "B·H·N·d_v·e (tiles not split)")
    # the partials are read back by the same launch after its barrier: where they fit in the L2
    # they never reach HBM while it runs. A split tile writes its partial when its chunk ends; the
    # plan gives each cluster about one chunk of work (the limit is the work over the clusters), so
    # the partials are written as the launch ends and what passes through the L2 after them is the
    # K/V of the clusters' later rounds of work items, if any (one round: none)
    partials = intmath.add(partial_o, partial_lse)
    rounds = np.asarray(intmath.to_float(mla_rounds(b, p)), dtype=np.float64)
    after = np.asarray(intmath.to_float(kv_unique), dtype=np.float64) * (rounds - 1.0) / rounds
    stays = np.asarray(l2m.fits(np.asarray(intmath.to_float(partials), dtype=np.float64) + after, l2)) & (l2.xcds <= 1)
    o_hbm = np.where(stays, 0, np.asarray(partial_o))
    lse_hbm = np.where(stays, 0, np.asarray(partial_lse))
    o_hbm = int(o_hbm) if np.ndim(o_hbm) == 0 else o_hbm.astype(np.int64)
    lse_hbm = int(lse_hbm) if np.ndim(lse_hbm) == 0 else lse_hbm.astype(np.int64)
    k.write("O_partial", "intermediate", partial_o, "chunks · B·H·N·d_v·e (split tiles; the output dtype)", hbm=o_hbm)
    k.write("lse_partial", "intermediate", partial_lse, "chunks · B·H·N·4 (split tiles)", hbm=lse_hbm)
    # the merge of the split tiles' partials, after a grid-wide barrier in the same launch
    # (``DevicePersistentMergeStates``): the partials just written, read back from L2 where they fit
    k.read("O_partial", "intermediate", partial_o, o_hbm, "merge: chunks · B·H·N·d_v·e")
    k.read("lse_partial", "intermediate", partial_lse, lse_hbm, "merge: chunks · B·H·N·4")
    k.write("O", "output", intmath.add(o, intmath.mul(-1, direct_o)), "merge: B·H·N·d_v·e (split tiles)")
    return [
        k.build(
            matmul_flops=intmath.mul(2, exec_scores, w.d_kv),
            softmax_flops=intmath.add(
                intmath.mul(3, exec_scores),
                intmath.mul(rows, w.d_v_, chunks_tiles(p)),
                intmath.mul(3, part_rows, w.d_v_),  # the merge: rescale and add each partial
            ),
            exp_ops=intmath.add(exec_scores, part_rows),
            concurrent_ctas=intmath.minimum(ctas, sm_count),
            ctas=ctas,
            bytes_in_flight_per_cta=STAGES * TILE * int(np.max(np.asarray(row_kv))),
            overlap="serial-compute",
            # the merge walks each split row's chunks one after another
            merge_steps=np.where(split, np.asarray(chunks), 0) if np.ndim(split) else (int(chunks) if split else 0),
            # the launch lasts as long as its busiest cluster's chunks (the plan's greedy assignment)
            tail=p["tail"],
        )
    ]


def mla_rounds(batch: IntLike, p: dict[str, IntLike]) -> IntLike:
    """Work items a cluster walks one after another: ⌈batch · tiles · chunks / clusters⌉ (each
    request's query tiles, each split into its chunks, over the clusters)."""
    return intmath.ceil_div(intmath.mul(batch, p["tiles"], p["chunks"]), p["clusters"])


def chunks_tokens(p: dict[str, IntLike]) -> IntLike:
    """Tokens a tile's CTAs compute over all its chunks (whole 64-token tiles)."""
    return p["executed_tokens"]


def chunks_tiles(p: dict[str, IntLike]) -> IntLike:
    """64-token K/V tiles a tile's CTAs walk (O is rescaled once a tile)."""
    return intmath.ceil_div(p["executed_tokens"], TILE)


def math_fallback_kernels(w: Workload, l2: l2m.L2) -> list[Kernel]:
    """PyTorch's math path on ``w`` (module docstring), kernel by kernel: casts of fp16/bf16 Q, K,
    V to fp32, Q scaled, K and V copied to every query head (GQA/MQA), the copied K scaled, the
    fp32 products (batched GEMMs: a GEMV a head when decoding), the softmax, O and P cast back.
    K is read as cached at d, V at d_v (a view of the first d_v elements of the same row where
    the caller passes one)."""
    e = w.element_bytes
    f = 4  # fp32
    cast = e != f
    bh = intmath.mul(w.batch, w.heads)
    grouped = np.asarray(w.group) > 1
    scores = intmath.mul(bh, w.n, w.n_kv_)
    s = intmath.mul(scores, f)
    q32, k32 = intmath.mul(bh, w.n, w.d, f), intmath.mul(w.batch, w.kv_heads_, w.n_kv_, w.d, f)
    v32 = intmath.mul(w.batch, w.kv_heads_, w.n_kv_, w.d_v_, f)
    k_all = intmath.mul(bh, w.n_kv_, w.d, f)  # K at every query head
    v_all = intmath.mul(bh, w.n_kv_, w.d_v_, f)
    o32 = intmath.mul(bh, w.n, w.d_v_, f)
    kernels: list[Kernel] = []

    def elementwise(
        name: str, tensor: str, read: IntLike, written: IntLike, formula: str, op: str, **fields: Any
    ) -> None:
        k = KernelBuilder(name)
        k.read(tensor, "input", read, l2m.carried_over(read, l2) if name.startswith("scale") else read, formula)
        k.write(tensor, "intermediate", written, formula)
        kernels.append(
            k.build(
                softmax_flops=intmath.ceil_div(written, f),
                op=op,
                launches=elementwise_launches(intmath.ceil_div(written, f), f),
                **fields,
            )
        )

    if cast:
        # widening conversions run element by element (kernels.cast); V, a view of the first d_v
        # elements of K's row, through ATen's generic kernel at runs of d_v (kernels.gather)
        elementwise("cast_q", "Q", w.q_bytes(), q32, "B·H·N·d·(e→4)", "cast")
        elementwise("cast_k", "K", w.kv_bytes(), k32, "B·H_kv·N_kv·d·(e→4)", "cast")
        view = np.asarray(w.d_v_) < np.asarray(w.d)
        fields = {"run": w.d_v_, "element_bytes": f} if np.all(view) else {}
        elementwise(
            "cast_v", "V", w.v_bytes(), v32, f"B·H_kv·N_kv·{w.dv_sym}·(e→4)", "gather" if fields else "cast", **fields
        )
    elementwise("scale_q", "Q", q32, q32, "B·H·N·d·4", "scale")
    if np.any(grouped):
        # repeat_interleave: a copy of an expanded view (kernels.gather.expand_bandwidth_4byte)
        for name, tensor, small, big, formula in (
            ("expand_k", "K", k32, k_all, "B·H·N_kv·d·4 (K copied to every query head)"),
            ("expand_v", "V", v32, v_all, f"B·H·N_kv·{w.dv_sym}·4 (V copied to every query head)"),
        ):
            k = KernelBuilder(name)
            k.read(tensor, "input", small, l2m.carried_over(small, l2) if cast else small, "B·H_kv·N_kv·…·4")
            k.write(tensor, "intermediate", big, formula)
            kernels.append(
                k.build(op="expand", element_bytes=f, launches=elementwise_launches(intmath.ceil_div(big, f), f))
            )
    k_in = np.where(grouped, np.asarray(k_all), np.asarray(k32))
    k_in = int(k_in) if np.ndim(k_in) == 0 else k_in.astype(np.int64)
    v_in = np.where(grouped, np.asarray(v_all), np.asarray(v32))
    v_in = int(v_in) if np.ndim(v_in) == 0 else v_in.astype(np.int64)
    elementwise("scale_k", "K", k_in, k_in, "B·H·N_kv·d·4", "scale")
    gemm_rows = intmath.ceil_div(w.n, 128)  # output tiles along N
    qk = KernelBuilder("qk")
    qk.read("Q", "input", intmath.mul(q32, intmath.ceil_div(w.n_kv_, 128)), q32, "⌈N_kv/128⌉ · B·H·N·d·4")
    qk.read("K", "input", intmath.mul(k_in, gemm_rows), l2m.carried_over(k_in, l2), "⌈N/128⌉ · B·H·N_kv·d·4")
    qk.write("S", "intermediate", s, "B·H·N·N_kv·4")
    kernels.append(qk.build(matmul_flops=intmath.mul(2, scores, w.d), op="gemm"))
    sm = KernelBuilder("softmax")
    sm.read("S", "intermediate", s, l2m.carried_over(s, l2), "B·H·N·N_kv·4")
    sm.write("P", "intermediate", s, "B·H·N·N_kv·4")
    kernels.append(
        sm.build(
            softmax_flops=intmath.mul(4, scores),
            exp_ops=scores,
            op="softmax",
            rows=intmath.mul(bh, w.n),
            row_length=w.n_kv_,
            element_bytes=f,
        )
    )
    pv = KernelBuilder("pv")
    pv.read("P", "intermediate", intmath.mul(s, intmath.ceil_div(w.d_v_, 128)), l2m.carried_over(s, l2), "B·H·N·N_kv·4")
    pv.read("V", "input", intmath.mul(v_in, gemm_rows), v_in, f"⌈N/128⌉ · B·H·N_kv·{w.dv_sym}·4")
    pv.write("O", "intermediate", o32, f"B·H·N·{w.dv_sym}·4")
    kernels.append(pv.build(matmul_flops=intmath.mul(2, scores, w.d_v_), op="gemm"))
    if cast:
        k = KernelBuilder("cast_o")
        k.read("O", "intermediate", o32, l2m.carried_over(o32, l2), f"B·H·N·{w.dv_sym}·4")
        k.write("O", "output", w.o_bytes(), f"B·H·N·{w.dv_sym}·e")
        kernels.append(k.build(op="copy"))
        k = KernelBuilder("cast_p")  # the function returns P too, cast back
        k.read("P", "intermediate", s, l2m.carried_over(s, l2), "B·H·N·N_kv·4")
        k.write("P", "intermediate", intmath.mul(scores, e), "B·H·N·N_kv·e")
        kernels.append(k.build(op="copy"))
    return kernels
