"""MLA decoding in the absorbed form on the GPU: FlashInfer's ``BatchMLAPagedAttentionWrapper``
(``impl=flashmla`` cases) over a paged latent cache, and the inputs of the absorbed shape for
PyTorch's math fallback (``impl=sdpa-math``).

The cache is paged as serving engines keep it: a pool of 64-token pages (``ckv``: the 512 latent
elements of each token, ``kpe``: its 64 rotary ones), each request's pages scattered over the pool
by a seeded permutation, listed in ``kv_indices`` (``kv_indptr``: where each request's pages
start). FlashInfer is imported only when a case runs (a clear error where it is missing).
"""

from __future__ import annotations

import math
from typing import Any

from ..cases import Case
from ..errors import RuntimeFailure

#: tokens of one page of the latent cache (FlashInfer's Hopper MLA kernel reads 64-token tiles;
#: FlashMLA requires page_block_size == 64)
PAGE_SIZE = 64
#: the float workspace FlashInfer's MLA plan splits its partial outputs into (its examples' 128 MB)
WORKSPACE_BYTES = 128 * 1024 * 1024
#: the latent (compressed K/V) and rotary parts of one cached row
CKV, KPE = 512, 64


def import_flashinfer() -> Any:
    """``flashinfer``, or one clear line where it is not installed."""
    try:
        import flashinfer
    except ImportError:
        raise RuntimeFailure(
            "impl=flashmla needs FlashInfer (flashinfer-python, 0.7.x; its Hopper MLA kernel JIT-compiles on first "
            "use): not importable here"
        ) from None
    return flashinfer


def missing() -> str | None:
    """Why FlashInfer's MLA kernel cannot run here, in one line; None where it can."""
    try:
        import_flashinfer()
    except RuntimeFailure as exc:
        return str(exc)
    return None


def page_table(batch: int, n_kv: int, seed: int = 0, page_size: int = PAGE_SIZE) -> dict[str, Any]:
    """A paged cache's tables for ``batch`` requests of ``n_kv`` tokens (plain lists, CPU): each
    request's ⌈n_kv / page⌉ pages drawn from one pool by a seeded permutation (scattered, as an
    engine's allocator leaves them after requests come and go). ``kv_indices[kv_indptr[b] :
    kv_indptr[b + 1]]`` are request b's pages in order."""
    import random

    per_request = -(-n_kv // page_size)
    pages = batch * per_request
    order = list(range(pages))
    random.Random(seed).shuffle(order)
    return {
        "pages": pages,
        "kv_indptr": [b * per_request for b in range(batch + 1)],
        "kv_indices": order,
        "kv_len": [n_kv] * batch,
        "page_size": page_size,
    }


def gather_request(torch: Any, pool: Any, indices: list[int], n_kv: int) -> Any:
    """One request's rows of a paged pool ([pages, page, width]) in token order: [n_kv, width]."""
    idx = torch.tensor(indices, device=pool.device, dtype=torch.long)
    return pool.index_select(0, idx).reshape(-1, pool.shape[-1])[:n_kv]


class FlashInferMLA:
    """One ``impl=flashmla`` case: FlashInfer's wrapper planned once (not timed) and run. ``q``,
    ``k``, ``v`` are request 0's query ([1, H, n, 576]) and its latent cache gathered in token order
    ([1, 1, n_kv, 576]; V its first 512), for the float32 reference."""

    def __init__(self, case: Case, torch: Any, device: str, seed: int = 0) -> None:
        if (case.d, case.d_v, case.kv_heads_) != (CKV + KPE, CKV, 1):
            raise RuntimeFailure(f"{case.id}: flashmla runs d=576, d_v=512 on one latent K/V head")
        flashinfer = import_flashinfer()
        self.case = case
        dt = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(case.dtype)
        if dt is None:
            raise RuntimeFailure(f"{case.id}: flashmla runs fp16 or bf16")
        g = torch.Generator(device=device).manual_seed(seed)
        b, h, n, n_kv = case.batch, case.heads, case.n, case.n_kv_
        table = page_table(b, n_kv, seed)
        self.table = table
        self.q_nope = torch.randn(b * n, h, CKV, device=device, dtype=dt, generator=g)
        self.q_pe = torch.randn(b * n, h, KPE, device=device, dtype=dt, generator=g)
        self.ckv = torch.randn(table["pages"], PAGE_SIZE, CKV, device=device, dtype=dt, generator=g)
        self.kpe = torch.randn(table["pages"], PAGE_SIZE, KPE, device=device, dtype=dt, generator=g)
        i32 = torch.int32
        qo_indptr = torch.arange(0, b + 1, device=device, dtype=i32) * n
        kv_indptr = torch.tensor(table["kv_indptr"], device=device, dtype=i32)
        kv_indices = torch.tensor(table["kv_indices"], device=device, dtype=i32)
        kv_len = torch.tensor(table["kv_len"], device=device, dtype=i32)
        workspace = torch.empty(WORKSPACE_BYTES, dtype=torch.int8, device=device)
        self.wrapper = flashinfer.mla.BatchMLAPagedAttentionWrapper(workspace, backend="auto")
        self.scale = 1.0 / math.sqrt(case.d)
        self.wrapper.plan(qo_indptr, kv_indptr, kv_indices, kv_len, h, CKV, KPE, PAGE_SIZE, False, self.scale, dt, dt)
        # request 0 as BHND tensors, for the reference
        first = table["kv_indices"][table["kv_indptr"][0] : table["kv_indptr"][1]]
        latent = torch.cat(
            [gather_request(torch, self.ckv, first, n_kv), gather_request(torch, self.kpe, first, n_kv)], -1
        )
        self.q = torch.cat([self.q_nope[:n], self.q_pe[:n]], -1).transpose(0, 1).unsqueeze(0)  # [1, H, n, 576]
        self.k = latent[None, None]  # [1, 1, n_kv, 576]
        self.v = self.k[..., :CKV]

    def run(self) -> Any:
        out = self.wrapper.run(self.q_nope, self.q_pe, self.ckv, self.kpe)  # [B·n, H, 512]
        c = self.case
        return out.view(c.batch, c.n, c.heads, CKV).transpose(1, 2)  # [B, H, n, 512], a view


def absorbed_inputs(case: Case, torch: Any, device: str, seed: int = 0) -> tuple[Any, Any, Any]:
    """Q, K, V of the absorbed MLA shape for PyTorch's SDPA: Q [B, H, n, d], the latent cache K
    [B, 1, n_kv, d], V its first d_v elements (a view, as a model's code passes it)."""
    dt = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[case.dtype]
    g = torch.Generator(device=device).manual_seed(seed)
    q = torch.randn(case.batch, case.heads, case.n, case.d, device=device, dtype=dt, generator=g)
    k = torch.randn(case.batch, case.kv_heads_, case.n_kv_, case.d, device=device, dtype=dt, generator=g)
    return q, k, k[..., : case.d_v_]
