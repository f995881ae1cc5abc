"""Validation runs of paged KV caches (``Case.page_size``): FlashInfer's paged wrappers
(``impl=flashinfer``) and FlexAttention (``impl=flex``, paged through ``PagedAttention``).

The page table is what serving engines build: each request's pages drawn at random from a pool
larger than needed (a random permutation of the pool's pages), so consecutive pages of a request
are scattered in HBM. The check gathers K/V back through the page table and compares with float32
attention on them (causal bottom-right: the new tokens are the last of the sequence).

FlashInfer is imported lazily (``RuntimeFailure`` with one line where it is missing); each of its
kernel variants compiles with nvcc on first use (17–100 s), which happens in :class:`PagedRun`'s
construction (``plan``) and the runner's first, untimed call. FlexAttention is compiled with
``torch.compile`` on the first call, also untimed.
"""

from __future__ import annotations

import math
from typing import Any

from ..cases import Case
from ..errors import RuntimeFailure
from ..traffic import paged as pm
from ..workload import POOL_FACTOR as _POOL_FACTOR

#: pages in the pool per page a case needs where it gives no kv_pool (the rest stay free, as in a
#: serving engine's pool): the workload's default
POOL_FACTOR = _POOL_FACTOR
#: FlashInfer's workspace (its examples' 128 MiB)
WORKSPACE_BYTES = 128 * 1024 * 1024


def _torch() -> Any:
    import torch

    return torch


def page_table(
    batch: int, n_kv: int, page_size: int, seed: int = 0, device: Any = "cpu", pool_pages: int | None = None
) -> dict[str, Any]:
    """A pool of ``pool_pages`` (None: ``POOL_FACTOR`` × the pages the batch needs) and, per request, ⌈n_kv / P⌉ of them
    drawn from a random permutation of the pool: ``indices`` (int32, the requests' pages one after
    another), ``indptr`` (int32, B + 1), ``last_page_len`` (int32, B: tokens on each last page),
    ``pool_pages`` and ``table`` (B × pages, int64, the same indices per request)."""
    torch = _torch()
    per = -(-n_kv // page_size)
    pool = max(1, POOL_FACTOR * batch * per) if pool_pages is None else int(pool_pages)
    if pool < batch * per:
        raise RuntimeFailure(f"a pool of {pool} pages cannot hold the batch's {batch * per}")
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(pool, generator=g)[: batch * per]
    table = perm.reshape(batch, per).to(torch.int64)
    last = n_kv - (per - 1) * page_size
    dev = device
    return {
        "pool_pages": pool,
        "pages_per_request": per,
        "table": table.to(dev),
        "indices": perm.to(torch.int32).to(dev),
        "indptr": (torch.arange(batch + 1, dtype=torch.int32) * per).to(dev),
        "last_page_len": torch.full((batch,), last, dtype=torch.int32).to(dev),
    }


def token_slots(table: Any, n_kv: int, page_size: int) -> Any:
    """B × n_kv (int64): the pool slot (page · P + offset) of each request's tokens."""
    torch = _torch()
    pos = torch.arange(n_kv, device=table.device)
    return table[:, pos // page_size] * page_size + pos % page_size


def scatter_nhd(k: Any, pt: dict[str, Any], page_size: int) -> Any:
    """K (or V), B × H_kv × n_kv × d, written into a FlashInfer NHD pool (pages × P × H_kv × d)."""
    torch = _torch()
    b, hk, n_kv, d = k.shape
    pool = torch.zeros(pt["pool_pages"] * page_size, hk, d, dtype=k.dtype, device=k.device)
    slots = token_slots(pt["table"], n_kv, page_size)
    pool[slots.reshape(-1)] = k.transpose(1, 2).reshape(b * n_kv, hk, d)
    return pool.view(pt["pool_pages"], page_size, hk, d)


def gather_nhd(pool: Any, pt: dict[str, Any], n_kv: int) -> Any:
    """The K (or V) a FlashInfer NHD pool holds for each request, back as B × H_kv × n_kv × d."""
    pages, p, hk, d = pool.shape
    slots = token_slots(pt["table"], n_kv, p)
    flat = pool.reshape(pages * p, hk, d)
    b = slots.shape[0]
    return flat[slots.reshape(-1)].reshape(b, n_kv, hk, d).transpose(1, 2)


def scatter_flex(k: Any, pt: dict[str, Any], page_size: int) -> Any:
    """K (or V) written into FlexAttention's paged cache (1 × H_kv × pool·P × d), as
    ``PagedAttention.assign`` lays it out."""
    torch = _torch()
    b, hk, n_kv, d = k.shape
    cache = torch.zeros(1, hk, pt["pool_pages"] * page_size, d, dtype=k.dtype, device=k.device)
    slots = token_slots(pt["table"], n_kv, page_size)
    cache[0][:, slots.reshape(-1)] = k.permute(1, 0, 2, 3).reshape(hk, b * n_kv, d)
    return cache


def gather_flex(cache: Any, pt: dict[str, Any], n_kv: int, page_size: int) -> Any:
    """The K (or V) FlexAttention's paged cache holds, back as B × H_kv × n_kv × d."""
    slots = token_slots(pt["table"], n_kv, page_size)
    b = slots.shape[0]
    hk, d = cache.shape[1], cache.shape[3]
    return cache[0][:, slots.reshape(-1)].reshape(hk, b, n_kv, d).permute(1, 0, 2, 3)


def reference(case: Case, q: Any, k: Any, v: Any, batch: int = 0) -> Any:
    """float32 attention of one request (all heads, every query row): H × n × d; causal
    bottom-right (query i sees keys up to n_kv − n + i), GQA by repeating K/V heads."""
    torch = _torch()
    g = case.heads // case.kv_heads_
    qf = q[batch].detach().float()
    kf = k[batch].detach().float().repeat_interleave(g, dim=0)
    vf = v[batch].detach().float().repeat_interleave(g, dim=0)
    s = qf @ kf.transpose(-1, -2) / math.sqrt(case.d)
    if case.causal:
        rows = torch.arange(case.n, device=s.device)[:, None] + (case.n_kv_ - case.n)
        s = s.masked_fill(torch.arange(case.n_kv_, device=s.device)[None, :] > rows, float("-inf"))
    return torch.softmax(s, dim=-1) @ vf


def check(case: Case, out: Any, q: Any, k: Any, v: Any, tolerance: float) -> float:
    """Relative L2 error of the first and last requests' outputs against :func:`reference` on the
    K/V gathered back through the page table (the first alone where ``q``, ``k``, ``v`` hold one
    request: the FP8 cache cases' dequantised reference); raises over ``tolerance``."""
    torch = _torch()
    want = (case.batch, case.heads, case.n, case.d)
    if out is None or tuple(out.shape) != want:
        raise RuntimeFailure(f"{case.id}: output shape {None if out is None else tuple(out.shape)}, expected {want}")
    worst = 0.0
    held = min(case.batch, int(q.shape[0]), int(k.shape[0]), int(v.shape[0]))
    for b in sorted({0, held - 1}):
        ref = reference(case, q, k, v, b)
        got = out[b].detach().float()
        if not torch.isfinite(got).all():
            raise RuntimeFailure(f"{case.id}: output has NaN or inf")
        worst = max(worst, float((got - ref).norm() / ref.norm()))
    if worst > tolerance:
        raise RuntimeFailure(f"{case.id}: relative error {worst:.2e} over the {case.dtype} tolerance {tolerance:.0e}")
    return worst


def _flashinfer() -> Any:
    try:
        import flashinfer
    except ImportError:
        raise RuntimeFailure(
            "impl=flashinfer needs FlashInfer (0.7.x): unpack it from /work/shared/tools/pack-flashinfer's archive "
            "onto the Python path"
        ) from None
    return flashinfer


class PagedRun:
    """One paged case's page table, pool and planned call: ``step()`` runs the kernels once and
    returns O as B × H × n × d; ``k`` and ``v`` are the K/V gathered back through the table."""

    def __init__(self, case: Case, q: Any, k: Any, v: Any, seed: int = 0) -> None:
        if case.backward or case.dropout:
            raise RuntimeFailure(f"{case.id}: the paged kernels are run forward only, without dropout")
        self.case, self.q = case, q
        if case.impl == "flashinfer":
            self._flashinfer(k, v, seed)
        elif case.impl == "flex":
            self._flex(k, v, seed)
        else:  # pragma: no cover - Case refuses it
            raise RuntimeFailure(f"{case.id}: {case.impl} has no paged kernel")

    # FlashInfer ---------------------------------------------------------------------------
    def _flashinfer(self, k: Any, v: Any, seed: int) -> None:
        case = self.case
        torch = _torch()
        fi = _flashinfer()
        p = int(case.page_size or 1)
        dev = self.q.device
        pt = page_table(case.batch, case.n_kv_, p, seed, dev, case.kv_pool)
        self.pt = pt
        k_pool, v_pool = scatter_nhd(k, pt, p), scatter_nhd(v, pt, p)
        self.k, self.v = gather_nhd(k_pool, pt, case.n_kv_), gather_nhd(v_pool, pt, case.n_kv_)
        workspace = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=dev)
        dt = k.dtype
        g = case.heads // case.kv_heads_
        b, h, n, d = case.batch, case.heads, case.n, case.d
        if n == 1:
            tensor_cores = g not in pm.FLASHINFER_DECODE_GROUPS  # as vLLM and SGLang choose for larger groups
            wrapper = fi.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD", use_tensor_cores=tensor_cores)
            wrapper.plan(
                pt["indptr"], pt["indices"], pt["last_page_len"], h, case.kv_heads_, d, p,
                q_data_type=dt, kv_data_type=dt,
            )  # fmt: skip
            q_nhd = self.q[:, :, 0, :].contiguous()  # B × H × d

            def step() -> Any:
                return wrapper.run(q_nhd, (k_pool, v_pool)).reshape(b, h, 1, d)
        else:
            wrapper = fi.BatchPrefillWithPagedKVCacheWrapper(workspace, "NHD")
            qo_indptr = (torch.arange(b + 1, dtype=torch.int32) * n).to(dev)
            wrapper.plan(
                qo_indptr, pt["indptr"], pt["indices"], pt["last_page_len"], h, case.kv_heads_, d, p,
                causal=case.causal, q_data_type=dt, kv_data_type=dt,
            )  # fmt: skip
            q_tok = self.q.transpose(1, 2).reshape(b * n, h, d).contiguous()

            def step() -> Any:
                return wrapper.run(q_tok, (k_pool, v_pool)).reshape(b, n, h, d).transpose(1, 2)

        self.step = step

    # FlexAttention ------------------------------------------------------------------------
    def _flex(self, k: Any, v: Any, seed: int) -> None:
        case = self.case
        torch = _torch()
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        offset = case.n_kv_ - case.n

        def mask_mod(b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
            return q_idx + offset >= kv_idx  # bottom-right causal (the new tokens are the last)

        dev = self.q.device
        compiled = _compiled_flex(flex_attention, dev.type == "cuda")
        gqa = case.heads != case.kv_heads_
        kernel_options: dict[str, Any] = {}
        if case.page_size is None:
            self.k, self.v = k, v
            mask = create_block_mask(mask_mod, case.batch, 1, case.n, case.n_kv_, device=dev) if case.causal else None

            def step() -> Any:
                return compiled(self.q, self.k, self.v, block_mask=mask, enable_gqa=gqa)

            self.step = step
            return
        from torch.nn.attention.experimental._paged_attention import PagedAttention

        p = int(case.page_size)
        pt = page_table(case.batch, case.n_kv_, p, seed, dev, case.kv_pool)
        self.pt = pt
        paged = PagedAttention(pt["pool_pages"], p, case.batch, device=dev)
        # its allocator hands out pages from the end of ``empty_pages``: give it the table's order
        rows = pt["table"].tolist()  # request 0 takes the last entries, in order, then request 1, ...
        used = {x for row in rows for x in row}
        paged.empty_pages = [x for x in range(pt["pool_pages"]) if x not in used] + [
            x for row in reversed(rows) for x in row
        ]
        for b in range(case.batch):
            paged.reserve(torch.tensor(b, device=dev), torch.tensor(case.n_kv_, device=dev))
        k_cache, v_cache = scatter_flex(k, pt, p), scatter_flex(v, pt, p)
        self.k, self.v = gather_flex(k_cache, pt, case.n_kv_, p), gather_flex(v_cache, pt, case.n_kv_, p)
        logical = create_block_mask(
            mask_mod if case.causal else (lambda b, h, q_idx, kv_idx: kv_idx >= 0),
            case.batch, 1, case.n, case.n_kv_, device=dev, BLOCK_SIZE=(pm.FLEX_SPARSE_BLOCK, p),
        )  # fmt: skip
        # the valid keys of each request (a partial last page's tail is masked): torch's later releases
        # take them as ``kv_len``, earlier ones read the lengths ``reserve`` kept
        import inspect

        extra = {}
        if "kv_len" in inspect.signature(paged.convert_logical_block_mask).parameters:
            extra["kv_len"] = torch.full((case.batch,), case.n_kv_, dtype=torch.int64, device=dev)
        mask = paged.convert_logical_block_mask(logical, **extra)
        decode = (
            case.n < pm.FLEX_DECODE_MAX_Q and (case.heads // case.kv_heads_) & (case.heads // case.kv_heads_ - 1) == 0
        )
        if not decode:
            _, block_n = pm.flex_forward_tiles(case.dtype, case.d)
            if p < block_n:  # the forward's BLOCK_N must divide the page (the BlockMask's KV block)
                kernel_options["BLOCK_N"] = p

        self.paged = paged

        def step() -> Any:
            return compiled(self.q, k_cache, v_cache, block_mask=mask, enable_gqa=gqa, kernel_options=kernel_options)

        self.step = step


def flex_mask_mod(case: Case, device: Any = "cpu") -> Any:
    """The ``mask_mod`` a user writes for the case: None without a mask; causal (bottom-right
    aligned: the last query sees the last key); with a window, the W keys up to the query's own;
    over a packed row, the query's own document (causal within it with ``case.causal``)."""
    if not (case.causal or case.window is not None or case.seq_lens is not None):
        return None
    torch = _torch()
    offset = case.n_kv_ - case.n
    window = case.window
    doc = None
    if case.seq_lens is not None:  # each token's document
        lengths = torch.tensor(case.seq_lens, dtype=torch.int64)
        doc = torch.repeat_interleave(torch.arange(len(case.seq_lens), dtype=torch.int32), lengths).to(device)

    def mask_mod(b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
        keep = q_idx + offset >= kv_idx if case.causal else kv_idx >= 0
        if window is not None:
            keep = keep & (q_idx + offset - kv_idx < window)
        if doc is not None:
            keep = keep & (doc[q_idx] == doc[kv_idx])
        return keep

    return mask_mod


def flex_forward(case: Case, q: Any, k: Any, v: Any) -> Any:
    """flex_attention compiled over contiguous K/V under the case's block mask (built once, outside
    the timed call, as a user does: ``create_block_mask`` at its default 128 × 128 blocks);
    differentiable (its backward is flex's backward template)."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    compiled = _compiled_flex(flex_attention, q.device.type == "cuda")
    mod = flex_mask_mod(case, q.device)
    mask = None if mod is None else create_block_mask(mod, None, None, case.n, case.n_kv_, device=q.device)
    gqa = case.heads != case.kv_heads_

    def run() -> Any:
        return compiled(q, k, v, block_mask=mask, enable_gqa=gqa)

    return run


_COMPILED: dict[str, Any] = {}


def _compiled_flex(flex_attention: Any, cuda: bool) -> Any:
    """flex_attention under ``torch.compile`` on a GPU (one compiled function; it recompiles per
    shape); its eager path on the CPU (the tests)."""
    if not cuda:
        return flex_attention
    if "flex" not in _COMPILED:
        # one recompilation a shape: past dynamo's limit (8 by default) it would run the rest of
        # the cases eagerly (flex's unfused reference path), not the kernels they measure
        config = _torch()._dynamo.config
        for name in ("recompile_limit", "cache_size_limit"):
            if hasattr(config, name):
                setattr(config, name, max(int(getattr(config, name)), 256))
        _COMPILED["flex"] = _torch().compile(flex_attention, dynamic=False)
    return _COMPILED["flex"]


def group_key(case: Case) -> tuple[Any, ...]:
    """What decides which compiled kernel variant a paged case runs: the runner orders cases by
    it so that each FlashInfer (nvcc) or flex (Triton) variant is compiled once, its cases
    together."""
    decode = case.n == 1
    return (case.impl, case.dtype, case.d, case.heads // case.kv_heads_, decode, case.causal, case.page_size or 0)


def grouped(cases: list[Case]) -> list[Case]:
    """``cases`` with the paged ones ordered by :func:`group_key` (stable), after the others."""
    plain = [c for c in cases if c.impl not in ("flashinfer", "flex")]
    paged = [c for c in cases if c.impl in ("flashinfer", "flex")]
    return plain + sorted(paged, key=group_key)
