"""Run validation cases on a CUDA GPU: correctness check, CUDA-event timing, ncu markers.

Needs torch (and triton for the marker kernels and our own tiled kernel). Imported only by
the commands that run on a GPU.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..cases import Case
from ..errors import RuntimeFailure
from .ncu import PLACEMENT_OFFSETS

#: the case implementations whose runs read a paged KV cache or FlexAttention (:mod:`.paged_run`)
PAGED_IMPLEMENTATIONS = ("flashinfer", "flex")
TOLERANCE = {"fp32": 2e-3, "tf32": 5e-3, "fp16": 5e-3, "bf16": 2e-2, "fp8": 6e-2}


def queue_behind_sleep(torch: Any, calls: int, host_s: float) -> bool:
    """Start a sleeping kernel long enough for the host to issue ``calls`` calls of ``host_s``
    seconds each behind it (cycles counted at up to 2.5 GHz, at most 20 G): the GPU then runs
    them back to back and CUDA events time the GPU, not the host's dispatch. False where this
    torch has no ``torch.cuda._sleep``."""
    if not hasattr(torch.cuda, "_sleep"):
        return False
    torch.cuda._sleep(int(min(2 * calls * host_s * 2.5e9 + 1e6, 2e10)))
    return True


def require_cuda() -> Any:
    try:
        import torch
    except ImportError:
        raise RuntimeFailure("this needs PyTorch with CUDA: pip install 'memmodel[gpu]'") from None
    if not torch.cuda.is_available():
        raise RuntimeFailure("no CUDA GPU is visible to PyTorch (torch.cuda.is_available() is False)")
    return torch


#: where the cases' tensors live: "cuda" on the GPU machine; the tests set "cpu" to run the
#: eager paths, the references and the checks on the CPU
DEVICE = "cuda"


def _torch() -> Any:
    if DEVICE == "cuda":
        return require_cuda()
    import torch

    return torch


def _torch_dtype(torch: Any, name: str) -> Any:
    return {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[name]


def make_inputs(case: Case, seed: int = 0, offset: int = 0) -> tuple[Any, Any, Any]:
    """Q, K, V of a case (standard normal, batch × heads × N × d), requiring gradients for the
    training step. ``offset`` > 0: the three lie one after another in one allocation, from
    ``offset`` bytes into it (a placement of ``validate --placements``)."""
    torch = _torch()
    if case.v_in_k and not offset:  # the absorbed MLA form: V is the first d_v of K's latent rows
        from .mla import absorbed_inputs

        return absorbed_inputs(case, torch, DEVICE, seed)
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    dt = _torch_dtype(torch, case.dtype)
    shapes = [
        (case.batch, case.heads, case.n, case.d),
        (case.batch, case.kv_heads_, case.n_kv_, case.d),
        (case.batch, case.kv_heads_, case.n_kv_, case.d_v_),  # V at its own head dim (MLA: d_v ≠ d)
    ]
    if case.impl == "fa3" and not offset:  # stored batch × N × heads × d, as FlashAttention takes them
        from .fa3 import make_qkv

        return tuple(make_qkv(torch, shapes, dtype=dt, device=DEVICE, generator=g, requires_grad=case.backward))
    if offset:
        e = torch.tensor([], dtype=dt).element_size()
        sizes = [math.prod(shape) for shape in shapes]
        pool = torch.empty(offset // e + sum(sizes), device=DEVICE, dtype=dt)
        at, views = offset // e, []
        for shape, size in zip(shapes, sizes):
            views.append(pool[at : at + size].view(shape).normal_(generator=g))
            at += size
        q, k, v = (t.detach() for t in views)  # views of the pool, leaves for autograd
    else:
        q, k, v = (torch.randn(*shape, device=DEVICE, dtype=dt, generator=g) for shape in shapes)
    if case.backward:
        for t in (q, k, v):
            t.requires_grad_(True)
    return q, k, v


def grad_output_like(out: Any, seed: int = 1) -> Any:
    """dO: standard normal with ``out``'s shape *and strides*. PyTorch's flash and CUTLASS
    backwards copy a dO whose layout differs from O's (``grad_out.contiguous()`` on the
    transposed view) — one kernel a real network does not run, since there dO arrives
    through O's own transpose."""
    torch = _torch()
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    return torch.empty_like(out).normal_(generator=g)


# ---------------------------------------------------------------------------------------
# Implementations: each returns a list of (step name, callable) so that standard attention
# can be timed kernel by kernel; tiled implementations are one step; the training step is
# two ("forward", "backward"), whatever the implementation.


class _Dropout:
    """Keeps the mask ``native_dropout`` drew, for the float32 reference."""

    mask: Any = None


def standard_steps(
    case: Case, q: Any, k: Any, v: Any, dropped: _Dropout | None = None
) -> list[tuple[str, Callable[[], Any]]]:
    """Algorithm 0 in eager PyTorch: S = QKᵀ, P = softmax(S), O = PV, S and P in HBM.

    The 1/√d scale is applied to Q before (not timed). GQA: the query heads of a group are
    stacked so each K/V head is multiplied once ([B, H_kv, G·N, d] @ [B, H_kv, d, N_kv]).
    Causal: an in-place masked_fill of S between qk and softmax (a fourth kernel). Dropout:
    ``native_dropout`` of P (output and mask) between softmax and pv.
    """
    torch = _torch()
    g = case.heads // case.kv_heads_
    qs = (q * (1.0 / math.sqrt(case.d))).reshape(case.batch, case.kv_heads_, g * case.n, case.d)
    state: dict[str, Any] = {}
    steps: list[tuple[str, Callable[[], Any]]] = []
    dropped = dropped or _Dropout()

    def qk() -> Any:
        state["s"] = torch.matmul(qs, k.transpose(-1, -2))
        return state["s"]

    steps.append(("qk", qk))
    if case.causal:
        mask = torch.ones(case.n, case.n_kv_, device=DEVICE, dtype=torch.bool).triu_(1 + causal_offset(case))

        def apply_mask() -> Any:
            s = state["s"].view(case.batch, case.kv_heads_, g, case.n, case.n_kv_)
            return s.masked_fill_(mask, float("-inf"))

        steps.append(("mask", apply_mask))

    def softmax() -> Any:
        state["p"] = torch.softmax(state["s"], dim=-1)
        return state["p"]

    steps.append(("softmax", softmax))
    if case.dropout:

        def dropout() -> Any:
            state["p"], dropped.mask = torch.native_dropout(state["p"], case.dropout, True)
            return state["p"]

        steps.append(("dropout", dropout))

    def pv() -> Any:
        state["o"] = torch.matmul(state["p"], v).reshape(case.batch, case.heads, case.n, case.d_v_)
        return state["o"]

    steps.append(("pv", pv))
    return steps


def causal_offset(case: Case) -> int:
    """Keys before the first query's own: N_kv − N. The model aligns causal masks bottom-right
    (the last query sees every key: a chunked prefill's new tokens are the last of the sequence);
    PyTorch's ``is_causal`` aligns them top-left, the same only where N = N_kv."""
    return max(0, case.n_kv_ - case.n)


def causal_mask_stacked(case: Case) -> Any:
    """The (G·N) × N_kv boolean mask (True above the diagonal) of a GQA group's stacked query
    rows: row r is query r mod N, aligned bottom-right (:func:`causal_offset`)."""
    torch = _torch()
    mask = torch.ones(case.n, case.n_kv_, device=DEVICE, dtype=torch.bool).triu_(1 + causal_offset(case))
    return mask.repeat(case.heads // case.kv_heads_, 1)


def eager_forward(case: Case, q: Any, k: Any, v: Any, dropped: _Dropout) -> Callable[[], Any]:
    """The forward :func:`memmodel.traffic.standard.standard_eager` models, under autograd:
    ``s = q @ kᵀ``; ``s = s * scale``; ``s.masked_fill_(mask, -inf)``; ``p = softmax(s)``;
    ``p, z = native_dropout(p)``; ``o = p @ v`` (GQA: the group's query heads stacked)."""
    torch = _torch()
    g = case.heads // case.kv_heads_
    scale = 1.0 / math.sqrt(case.d)
    mask = causal_mask_stacked(case) if case.causal else None

    def forward() -> Any:
        qs = q.reshape(case.batch, case.kv_heads_, g * case.n, case.d)
        s = torch.matmul(qs, k.transpose(-1, -2))
        s = s * scale
        if mask is not None:
            s.masked_fill_(mask, float("-inf"))
        p = torch.softmax(s, dim=-1)
        if case.dropout:
            p, dropped.mask = torch.native_dropout(p, case.dropout, True)
        return torch.matmul(p, v).reshape(case.batch, case.heads, case.n, case.d_v_)

    return forward


def sdpa_backend(case: Case) -> Any:
    from torch.nn.attention import SDPBackend

    return {
        "sdpa-flash": SDPBackend.FLASH_ATTENTION,
        "sdpa-cudnn": SDPBackend.CUDNN_ATTENTION,
        "sdpa-efficient": SDPBackend.EFFICIENT_ATTENTION,
        "sdpa-math": SDPBackend.MATH,
    }[case.impl]


def local_flash_forward(case: Case, q: Any, k: Any, v: Any) -> Callable[[], Any]:
    """FlashAttention-2's local (sliding-window) forward, as PyTorch's flash backend holds it:
    ``torch.ops.aten._flash_attention_forward`` with ``window_size_left = W − 1`` (SDPA's own
    call takes no window). The op takes batch × sequence × heads × d views and is differentiable
    (its backward, ``_flash_attention_backward``, takes the same window)."""
    torch = _torch()
    scale = 1.0 / math.sqrt(case.d)

    def run() -> Any:
        out = torch.ops.aten._flash_attention_forward(
            q.transpose(1, 2),
            k.transpose(1, 2),
            v.transpose(1, 2),
            None,
            None,
            case.n,
            case.n_kv_,
            case.dropout,
            True,
            False,
            scale=scale,
            window_size_left=case.window - 1,
            window_size_right=0,
        )[0]
        return out.transpose(1, 2)

    return run


def cu_seqlens(case: Case) -> Any:
    """A packed case's cumulative document lengths (int32, on the device): 0, L₁, L₁ + L₂, …"""
    torch = _torch()
    assert case.seq_lens is not None
    return torch.tensor([0, *itertools.accumulate(case.seq_lens)], dtype=torch.int32, device=DEVICE)


def varlen_flash_forward(case: Case, q: Any, k: Any, v: Any) -> Callable[[], Any]:
    """FlashAttention-2's varlen forward over a packed row (``case.seq_lens``), as PyTorch's
    flash backend holds it: ``torch.ops.aten._flash_attention_forward`` with packed
    (total, heads, d) views and the documents' ``cu_seqlens`` as ``cum_seq_q`` and ``cum_seq_k``
    (``flash_attn_varlen_func``; SDPA reaches it for nested jagged tensors). Each document
    attends within itself (causal within each with ``case.causal``; a window too). The op is
    differentiable (``_flash_attention_backward`` takes the same cu_seqlens)."""
    torch = _torch()
    scale = 1.0 / math.sqrt(case.d)
    cum = cu_seqlens(case)
    longest = max(case.seq_lens or (case.n,))
    window = {} if case.window is None else {"window_size_left": case.window - 1, "window_size_right": 0}

    def run() -> Any:
        out = torch.ops.aten._flash_attention_forward(
            q.transpose(1, 2)[0],
            k.transpose(1, 2)[0],
            v.transpose(1, 2)[0],
            cum,
            cum,
            longest,
            longest,
            case.dropout,
            case.causal,
            False,
            scale=scale,
            **window,
        )[0]
        return out.unsqueeze(0).transpose(1, 2)

    return run


def sdpa_forward(case: Case, q: Any, k: Any, v: Any) -> Callable[[], Any]:
    torch = _torch()
    from torch.nn.attention import sdpa_kernel

    if case.seq_lens is not None:
        return varlen_flash_forward(case, q, k, v)
    if case.window is not None:
        return local_flash_forward(case, q, k, v)

    backend = sdpa_backend(case)
    kwargs: dict[str, Any] = {"is_causal": case.causal}
    if case.causal and case.n != case.n_kv_:
        # is_causal is top-left (and flash refuses it where N ≠ N_kv): the bottom-right mask the
        # model counts, which PyTorch runs through the flash or memory-efficient kernel's own rule
        from torch.nn.attention.bias import causal_lower_right

        kwargs = {"attn_mask": causal_lower_right(case.n, case.n_kv_)}
    if case.dropout:
        kwargs["dropout_p"] = case.dropout
    if case.kv_heads_ != case.heads:
        kwargs["enable_gqa"] = True

    def run() -> Any:
        if _HELD_BACKEND.get("backend") == backend:  # chosen once around a timing loop
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, **kwargs)
        with sdpa_kernel([backend]):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, **kwargs)

    return run


#: the SDPA backend :func:`held_backend` has chosen around a timing loop ("backend": SDPBackend)
_HELD_BACKEND: dict[str, Any] = {}


@contextlib.contextmanager
def held_backend(case: Case) -> Iterator[None]:
    """Choose an SDPA case's backend once, around a loop of calls, as a user's code does: entering
    ``sdpa_kernel`` costs the host about 31 us a call on its own (validation/h200/host-probe/),
    which a user who sets it once, or calls SDPA as ``--impl auto`` does, never pays."""
    if not case.impl.startswith("sdpa-") or case.seq_lens is not None or case.window is not None:
        yield
        return
    from torch.nn.attention import sdpa_kernel

    backend = sdpa_backend(case)
    with sdpa_kernel([backend]):
        _HELD_BACKEND["backend"] = backend
        try:
            yield
        finally:
            _HELD_BACKEND.pop("backend", None)


def sdpa_steps(case: Case, q: Any, k: Any, v: Any) -> list[tuple[str, Callable[[], Any]]]:
    return [("attention", sdpa_forward(case, q, k, v))]


def triton_steps(case: Case, q: Any, k: Any, v: Any) -> list[tuple[str, Callable[[], Any]]]:
    from .triton_fa import attention

    def run() -> Any:
        return attention(q, k, v, causal=case.causal, block_q=case.block_q, block_kv=case.block_kv)

    return [("attention", run)]


def fa3_steps(case: Case, q: Any, k: Any, v: Any) -> list[tuple[str, Callable[[], Any]]]:
    from .fa3 import forward

    return [("attention", forward(q, k, v, causal=case.causal))]


def steps_for(case: Case, q: Any, k: Any, v: Any) -> list[tuple[str, Callable[[], Any]]]:
    if case.impl == "flashmla":
        raise RuntimeFailure(f"{case.id}: flashmla runs through CaseRun (its paged cache and plan)")
    if case.impl == "standard":
        return standard_steps(case, q, k, v)
    if case.impl == "triton":
        return triton_steps(case, q, k, v)
    if case.impl == "fa3":
        return fa3_steps(case, q, k, v)
    if case.impl == "flex":  # contiguous K/V (a paged cache runs through PagedRun)
        from .paged_run import flex_forward

        return [("attention", flex_forward(case, q, k, v))]
    return sdpa_steps(case, q, k, v)


def fused_forward(case: Case, q: Any, k: Any, v: Any) -> Callable[[], Any]:
    """The forward call of a fused implementation, differentiable (the training step's)."""
    if case.impl == "fa3":
        from .fa3 import forward

        return forward(q, k, v, causal=case.causal)
    if case.impl == "flex":
        from .paged_run import flex_forward

        return flex_forward(case, q, k, v)
    return sdpa_forward(case, q, k, v)


def run_steps(steps: list[tuple[str, Callable[[], Any]]]) -> Any:
    out = None
    for _, fn in steps:
        out = fn()
    return out


class CaseRun:
    """A case's inputs and the steps that run it once: the kernels of the forward pass
    (forward-only cases), or ``forward`` then ``backward`` (``torch.autograd.grad`` of O with
    a fixed dO, so no ``.grad`` is accumulated: the training step's attention kernels only)."""

    def __init__(self, case: Case, seed: int = 0, offset: int = 0) -> None:
        if case.dtype == "fp8" or case.kv_dtype is not None:
            self._init_fp8(case, seed, offset)
            return
        if case.impl == "triton" and (case.backward or case.dropout):
            raise RuntimeFailure(f"{case.id}: memmodel's Triton kernel has no backward pass and no dropout")
        if case.impl == "fa3" and (case.dropout or case.block_q or case.block_kv):
            raise RuntimeFailure(f"{case.id}: FlashAttention-3's kernels run no dropout and their own tiles")
        self.case = case
        self.dropped = _Dropout()
        self.state: dict[str, Any] = {}
        if case.impl == "flashmla":  # FlashInfer's MLA decode over a paged latent cache
            from .mla import FlashInferMLA

            if offset:
                raise RuntimeFailure(f"{case.id}: flashmla's paged cache takes no placement offset")
            self.mla = FlashInferMLA(case, _torch(), DEVICE, seed)
            self.q, self.k, self.v = self.mla.q, self.mla.k, self.mla.v
            self.steps = [("attention", self.mla.run)]
            return
        self.q, self.k, self.v = make_inputs(case, seed, offset)
        if case.impl == "flashinfer" or case.page_size is not None:
            from .paged_run import PagedRun

            paged = PagedRun(case, self.q, self.k, self.v, seed)
            self.k, self.v = paged.k, paged.v  # K/V as the page table addresses them (the check's)
            self.steps = [("attention", paged.step)]
            return
        if not case.backward:
            if case.impl == "standard":
                self.steps = standard_steps(case, self.q, self.k, self.v, self.dropped)
            else:
                self.steps = steps_for(case, self.q, self.k, self.v)
            return
        forward = (
            eager_forward(case, self.q, self.k, self.v, self.dropped)
            if case.impl == "standard"
            else fused_forward(case, self.q, self.k, self.v)
        )
        self._forward = forward
        self.steps = [("forward", self._run_forward), ("backward", self._run_backward)]

    def _init_fp8(self, case: Case, seed: int, offset: int) -> None:
        """An FP8 case (fp8 inputs, an FP8 K/V cache): standard normal inputs in 16 bits, quantised
        (:mod:`memmodel.gpu.fp8`); ``q``, ``k``, ``v`` are the dequantised batch-0 tensors the check
        compares against (float32 attention on what the kernel really read)."""
        from . import fp8

        if case.backward or case.dropout or case.block_q or case.block_kv:
            raise RuntimeFailure(f"{case.id}: the FP8 cases run the forward alone, no dropout, the kernels' own tiles")
        plain = replace(
            case,
            impl="sdpa-flash",
            dtype="bf16" if case.dtype == "fp8" else case.dtype,
            kv_dtype=None,
            page_size=None,  # the inputs alone: a paged case lays its pages out itself
            kv_pool=None,
        )
        q, k, v = make_inputs(plain, seed, offset)
        inputs = fp8.Fp8Inputs(case, q, k, v)
        if case.dtype == "fp8":
            if case.impl != "fa3":
                raise RuntimeFailure(f"{case.id}: fp8 inputs run as impl=fa3 (FlashInfer's fa3-backend fp8 prefill)")
            self.steps = fp8.prefill_steps(case, inputs)
        elif case.impl == "flashinfer":
            self.steps = fp8.decode_steps(case, inputs)
        elif case.impl.startswith("sdpa-"):
            self.steps = fp8.cast_steps(case, inputs, lambda q_, k_, v_: sdpa_forward(case, q_, k_, v_)())
        else:
            raise RuntimeFailure(
                f"{case.id}: an FP8 K/V cache runs as impl=sdpa-* (cast, then SDPA) or impl=flashinfer"
            )
        self.case = case
        self.fp8 = inputs
        self.q, self.k, self.v = inputs.reference
        self.dropped = _Dropout()
        self.state = {}

    def _run_forward(self) -> Any:
        self.state["out"] = self._forward()
        return self.state["out"]

    def _run_backward(self) -> Any:
        torch = _torch()
        out = self.state.pop("out")
        self.state["grads"] = torch.autograd.grad(out, (self.q, self.k, self.v), self.do)
        self.state["last_out"] = out.detach()
        return self.state["grads"]

    def prepare(self) -> None:
        """Make dO with the forward output's strides, from a forward without autograd."""
        if self.case.backward and "do" not in self.state:
            torch = _torch()
            with torch.no_grad():
                self.state["do"] = grad_output_like(self._forward())

    @property
    def do(self) -> Any:
        return self.state["do"]

    def run(self) -> Any:
        self.prepare()
        return run_steps(self.steps)

    @property
    def output(self) -> Any:
        return self.state.get("last_out")


# ---------------------------------------------------------------------------------------
# Correctness


def _keep(dropped: _Dropout) -> Any:
    """The dropout mask ``native_dropout`` drew for batch 0, K/V head 0: (G·N) × N_kv, the
    group's query rows stacked (None without dropout)."""
    return None if dropped.mask is None else dropped.mask[0, 0]


def reference_rows(case: Case, q: Any, k: Any, v: Any, rows: list[int], keep: Any = None) -> Any:
    """float32 attention of batch 0, head 0 for the given query rows; ``keep`` (N × N_kv bool,
    head 0's rows) applies a dropout mask drawn by the kernel."""
    torch = _torch()
    qi = q[0, 0, rows].detach().float()
    kk, vv = k[0, 0].detach().float(), v[0, 0].detach().float()
    s = (qi @ kk.T) / math.sqrt(case.d)
    if case.causal or case.seq_lens is not None:
        s = s.masked_fill(hidden_keys(case, torch.tensor(rows, device=DEVICE)), float("-inf"))
    p = torch.softmax(s, dim=-1)
    if keep is not None:
        p = p * keep[rows].float() / (1.0 - case.dropout)
    return p @ vv


def hidden_keys(case: Case, rows: Any) -> Any:
    """(rows × N_kv) bool: the keys each query row does not see: past it (causal), before its
    window, or (a packed row) in another document."""
    torch = _torch()
    cols = torch.arange(case.n_kv_, device=DEVICE)
    r = rows[:, None]
    hidden = torch.zeros(len(rows), case.n_kv_, dtype=torch.bool, device=DEVICE)
    if case.seq_lens is not None:  # each document attends within itself
        doc = torch.repeat_interleave(
            torch.arange(len(case.seq_lens), device=DEVICE), torch.tensor(case.seq_lens, device=DEVICE)
        )
        hidden = hidden | (doc[None, :] != doc[rows][:, None])
    if case.causal:  # bottom-right (windowed and packed cases have n = n_kv: offset 0)
        hidden = hidden | (cols[None, :] > r + causal_offset(case))
        if case.window is not None:
            hidden = hidden | (cols[None, :] <= r - case.window)
    return hidden


def _check_rows(case: Case) -> list[int]:
    rows = set(range(min(64, case.n))) | set(range(max(0, case.n - 64), case.n))
    for start in itertools.accumulate(case.seq_lens or (), initial=0):  # each document's first and last rows
        rows |= {r for r in range(start - 8, start + 8) if 0 <= r < case.n}
    return sorted(rows)


def check(case: Case, out: Any, q: Any, k: Any, v: Any, keep: Any = None) -> float:
    """Relative L2 error of rows of the output against float32; raises if over tolerance."""
    if case.impl in PAGED_IMPLEMENTATIONS and case.page_size is not None:  # two requests' rows, bottom-right
        from .paged_run import check as paged_check

        return paged_check(case, out, q, k, v, TOLERANCE[case.dtype])
    torch = _torch()
    if out is None or tuple(out.shape) != (case.batch, case.heads, case.n, case.d_v_):
        raise RuntimeFailure(f"{case.id}: output shape {None if out is None else tuple(out.shape)} is wrong")
    rows = _check_rows(case)
    ref = reference_rows(case, q, k, v, rows, keep)
    got = out[0, 0, rows].detach().float()
    if not torch.isfinite(got).all():
        raise RuntimeFailure(f"{case.id}: output has NaN or inf")
    err = float((got - ref).norm() / ref.norm())
    if err > TOLERANCE[case.dtype]:
        raise RuntimeFailure(
            f"{case.id}: relative error {err:.2e} over the {case.dtype} tolerance {TOLERANCE[case.dtype]:.0e}"
        )
    return err


#: relative L2 error allowed on dQ, dK, dV against float32 (products of many 16-bit roundings)
GRAD_TOLERANCE = {"fp32": 1e-2, "tf32": 3e-2, "fp16": 3e-2, "bf16": 8e-2, "fp8": 0.2}


def reference_grads(case: Case, q: Any, k: Any, v: Any, do: Any, keep: Any = None) -> tuple[Any, Any, Any]:
    """float32 dQ (query heads 0..G−1 of batch 0), dK and dV (K/V head 0 of batch 0) of
    attention with dO ``do``; ``keep`` ((G·N) × N_kv bool, the group's rows stacked) is the
    dropout mask the kernel drew. Rows in chunks, so a 16k × 16k head fits."""
    torch = _torch()
    g = case.heads // case.kv_heads_
    scale = 1.0 / math.sqrt(case.d)
    qf = q[0, :g].detach().float()
    kf, vf = k[0, 0].detach().float(), v[0, 0].detach().float()
    dof = do[0, :g].detach().float()
    dq = torch.zeros_like(qf)
    dk = torch.zeros_like(kf)
    dv = torch.zeros_like(vf)
    chunk = max(1, min(case.n, 2**25 // max(1, case.n_kv_)))
    for h in range(g):
        for r0 in range(0, case.n, chunk):
            r1 = min(case.n, r0 + chunk)
            s = (qf[h, r0:r1] @ kf.T) * scale
            if case.causal or case.seq_lens is not None:
                s = s.masked_fill(hidden_keys(case, torch.arange(r0, r1, device=DEVICE)), float("-inf"))
            p = torch.softmax(s, dim=-1)
            z = None if keep is None else keep[h * case.n + r0 : h * case.n + r1].float() / (1.0 - case.dropout)
            pd = p if z is None else p * z
            dv += pd.T @ dof[h, r0:r1]
            dp = dof[h, r0:r1] @ vf.T
            if z is not None:
                dp = dp * z
            ds = p * (dp - (p * dp).sum(dim=-1, keepdim=True))
            dq[h, r0:r1] = (ds @ kf) * scale
            dk += (ds.T @ qf[h, r0:r1]) * scale
    return dq, dk, dv


def check_grads(case: Case, grads: Any, q: Any, k: Any, v: Any, do: Any, keep: Any = None) -> dict[str, float]:
    """Relative L2 errors of dQ, dK, dV (batch 0, the first K/V head's group) against float32;
    raises if one is over :data:`GRAD_TOLERANCE` or not finite."""
    torch = _torch()
    g = case.heads // case.kv_heads_
    shapes = [tuple(t.shape) for t in grads]
    want = [
        (case.batch, case.heads, case.n, case.d),
        (case.batch, case.kv_heads_, case.n_kv_, case.d),
        (case.batch, case.kv_heads_, case.n_kv_, case.d_v_),
    ]
    if shapes != want:
        raise RuntimeFailure(f"{case.id}: gradient shapes {shapes}, expected {want}")
    refs = reference_grads(case, q, k, v, do, keep)
    got = (grads[0][0, :g], grads[1][0, 0], grads[2][0, 0])
    errors = {}
    for name, x, ref in zip(("dq", "dk", "dv"), got, refs):
        x = x.detach().float()
        if not torch.isfinite(x).all():
            raise RuntimeFailure(f"{case.id}: {name} has NaN or inf")
        errors[name] = float((x - ref).norm() / ref.norm().clamp_min(1e-30))
    worst = max(errors, key=lambda n: errors[n])
    if errors[worst] > GRAD_TOLERANCE[case.dtype]:
        raise RuntimeFailure(
            f"{case.id}: {worst} relative error {errors[worst]:.2e} over the {case.dtype} gradient tolerance "
            f"{GRAD_TOLERANCE[case.dtype]:.0e}"
        )
    return errors


def dropout_probe(case: Case) -> dict[str, float]:
    """Dropout of a fused kernel, checked exactly on a small probe of the same implementation,
    dtype, head dim, mask and group (batch 1, N = N_kv = d): with V = I the output *is* the
    dropped P', so O divided by the output without dropout (P) reveals the kernel's mask;
    the float32 reference with that mask must then reproduce O, dQ, dK and dV (the backward
    regenerates the forward's mask). The kernels themselves keep their mask internal."""
    torch = _torch()
    n, g = case.d, case.heads // case.kv_heads_
    probe = Case(
        impl=case.impl,
        n=n,
        d=case.d,
        heads=g,
        kv_heads=1,
        dtype=case.dtype,
        causal=case.causal,
        dropout=case.dropout,
        backward=True,
    )
    q, k, _ = make_inputs(probe, seed=3)
    dt = _torch_dtype(torch, case.dtype)
    v = torch.eye(n, device=DEVICE, dtype=dt).reshape(1, 1, n, n).clone().requires_grad_(True)
    out = sdpa_forward(probe, q, k, v)()
    do = grad_output_like(out, seed=4)
    grads = torch.autograd.grad(out, (q, k, v), do)
    with torch.no_grad():
        plain = sdpa_forward(replace(probe, dropout=0.0), q, k, v)().float()
    dropped = out.detach().float()
    tiny = 1e-6
    # kept entries come out as P / (1 − p), dropped ones as 0; where P itself is ~0 either
    # reading is harmless (it contributes nothing)
    keep = (dropped > 0.5 * plain / (1.0 - case.dropout)) | (plain <= tiny)
    keep_rows = keep[0].reshape(g * n, n)
    rate = float(1.0 - keep[plain > tiny].float().mean())
    ref_out = torch.stack(
        [reference_rows(replace(probe, heads=1), q[:, h : h + 1], k, v, list(range(n)), keep[0, h]) for h in range(g)]
    )
    out_err = float((dropped[0] - ref_out).norm() / ref_out.norm())
    errors = {"out": out_err, "drop_rate": rate}
    errors.update(check_grads(probe, grads, q, k, v, do, keep_rows))
    if out_err > TOLERANCE[case.dtype] * 4:
        raise RuntimeFailure(f"{case.id}: dropout probe output off by {out_err:.2e} from its own mask")
    return errors


def check_run(case: Case, run: CaseRun) -> dict[str, Any]:
    """The correctness checks of a case after one run; raises :class:`RuntimeFailure`."""
    if not case.backward:
        return {}
    keep = _keep(run.dropped)
    result: dict[str, Any] = {}
    if case.dropout and case.impl != "standard":
        # the kernel's mask is internal: the output is checked against its expectation (the
        # output without dropout) loosely, the mask itself exactly on a probe
        result["dropout_probe"] = dropout_probe(case)
        result["rel_error"] = None
    else:
        head_keep = None if keep is None else keep[: case.n]
        result["rel_error"] = check(case, run.output, run.q, run.k, run.v, head_keep)
        result["grad_errors"] = check_grads(case, run.state["grads"], run.q, run.k, run.v, run.do, keep)
    if "grad_errors" not in result:
        torch = _torch()
        for name, x in zip(("dq", "dk", "dv"), run.state["grads"]):
            if not torch.isfinite(x).all():
                raise RuntimeFailure(f"{case.id}: {name} has NaN or inf")
    return result


# ---------------------------------------------------------------------------------------
# Per-kernel times (CUPTI, through torch.profiler)


def kernel_events(prof: Any, device: str = "CUDA") -> list[dict[str, Any]]:
    """The device kernels (and copies, fills) a profiler session recorded, in start order:
    ``{"name", "time_s"}`` from CUPTI's start and end stamps. ``device`` "CPU" reads the
    host ops instead (tests on a machine without a GPU)."""
    results = getattr(getattr(prof, "profiler", None), "kineto_results", None)
    events = []
    if results is not None:
        for e in results.events():
            if str(e.device_type()).split(".")[-1] != device:
                continue
            start = e.start_ns() if hasattr(e, "start_ns") else e.start_us() * 1e3
            dur = e.duration_ns() if hasattr(e, "duration_ns") else e.duration_us() * 1e3
            events.append((start, e.name(), dur * 1e-9))
    else:  # pragma: no cover - older profiler API
        for e in prof.events():
            if str(e.device_type).split(".")[-1] != device:
                continue
            events.append((e.time_range.start, e.name, e.time_range.elapsed_us() * 1e-6))
    events.sort(key=lambda x: x[0])
    return [{"name": name, "time_s": t} for _, name, t in events]


def median_kernels(runs: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per kernel position, the median time over runs that launched the same kernels (the
    runs whose name sequence is the most common); the first run's list if none agree."""
    if not runs:
        return []
    keys = [tuple(k["name"] for k in r) for r in runs]
    common = max(set(keys), key=keys.count)
    same = [r for r, key in zip(runs, keys) if key == common]
    return [{"name": name, "time_s": statistics.median(r[i]["time_s"] for r in same)} for i, name in enumerate(common)]


def profile_kernels(run: Any, reps: int = 3) -> list[dict[str, Any]]:
    """Each kernel of one run of the case, with its median CUPTI duration over ``reps`` runs
    (each in its own profiler session). Kernel durations do not depend on how the host
    issued them, so no sleeping kernel is needed here."""
    torch = _torch()
    from torch.profiler import ProfilerActivity

    from .cupti import kernel_profile

    activity = ProfilerActivity.CUDA if DEVICE == "cuda" else ProfilerActivity.CPU
    runs = []
    for _ in range(reps):
        if DEVICE == "cuda":
            torch.cuda.synchronize()
        with kernel_profile(activity) as prof:
            run.run()
            if DEVICE == "cuda":
                torch.cuda.synchronize()
        runs.append(kernel_events(prof, "CUDA" if DEVICE == "cuda" else "CPU"))
    return median_kernels(runs)


# ---------------------------------------------------------------------------------------
# Timing


def time_case(case: Case, *, reps: int = 20, warmup: int = 3) -> dict[str, Any]:
    """Median CUDA-event time of each step and of the whole, after a correctness check, and
    each kernel's CUPTI duration (``profiled_kernels``); then the times a user's timer sees
    (:func:`call_times`: one synchronised call, calls queued back to back, a CUDA graph's replay)."""
    torch = require_cuda()
    run = CaseRun(case)
    out = run.run()
    extra: dict[str, Any] = {}
    if case.backward:
        extra = check_run(case, run)
        err = extra.pop("rel_error", None)
    else:
        keep = None if run.dropped.mask is None else _keep(run.dropped)[: case.n]
        if case.dropout and case.impl != "standard":
            extra["dropout_probe"] = dropout_probe(replace(case, backward=True))
            err = None
            if isinstance(out, torch.Tensor) and not torch.isfinite(out).all():
                raise RuntimeFailure(f"{case.id}: output has NaN or inf")
        else:
            err = check(case, out, run.q, run.k, run.v, keep)
        # poison and re-run: every element must be written again
        if isinstance(out, torch.Tensor):
            out.fill_(float("nan"))
        out = run.run()
        keep = None if run.dropped.mask is None else _keep(run.dropped)[: case.n]
        if err is not None:
            check(case, out, run.q, run.k, run.v, keep)
        elif isinstance(out, torch.Tensor) and not torch.isfinite(out).all():
            raise RuntimeFailure(f"{case.id}: output not rewritten (NaN left) after a second run")
    with held_backend(case):  # a user chooses the backend once, not per call
        measured = measure_run(run, reps=reps, warmup=warmup)
    del run, out
    torch.cuda.empty_cache()
    return {"case": case.to_dict(), "rel_error": err, **extra, **measured}


def measure_run(run: Any, *, reps: int, warmup: int) -> dict[str, Any]:
    """What validate records of a run (a case's :class:`CaseRun` or a trace case's): the
    profiler's kernels (``profiled_kernels``; a profiler failure kept as ``profiler_error``), the
    GPU's time of each step and of the whole, queued behind sleeping kernels sized to the kernels
    counted (:func:`step_times`), and the call, queued and graph times (:func:`call_times`)."""
    out: dict[str, Any] = {}
    try:
        profiled = profile_kernels(run)
    except Exception as exc:  # the profiler is a bonus: its failure keeps the timing
        profiled = []
        out["profiler_error"] = f"{exc.__class__.__name__}: {exc}"[:300]
    timed = step_times(run, reps=reps, warmup=warmup, launches=max(len(profiled), 1))
    modes = call_times(run, reps=max(CALL_REPS, reps), warmup=warmup)
    return {
        **out,
        "time_s": timed["time_s"],
        "kernels": timed["kernels"],
        "profiled_kernels": profiled,
        "reps": reps,
        "host_s": timed["host_s"],
        "queued": timed["queued"],
        **modes,
    }


class Stamp:
    """A point in time on the device's clock: a CUDA event (recorded in the stream), or on the
    CPU (:data:`DEVICE` "cpu", the tests) the host's ``perf_counter``."""

    def __init__(self, torch: Any) -> None:
        self.event = torch.cuda.Event(enable_timing=True) if DEVICE == "cuda" else None
        self.at = 0.0

    def record(self) -> None:
        if self.event is not None:
            self.event.record()
        else:
            self.at = time.perf_counter()

    def seconds_to(self, later: Stamp) -> float:
        """Seconds from this stamp to ``later`` (both recorded, the device synchronised)."""
        if self.event is not None:
            return float(self.event.elapsed_time(later.event)) * 1e-3
        return later.at - self.at


def _sync(torch: Any) -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


#: the most launches queued behind one sleeping kernel: past the launch queue's depth the host
#: waits for the GPU, and repetitions issued after the sleep time the host instead (measured on
#: the H200: 16 tiny kernels a repetition behind one sleep came out host-bound,
#: validation/h200/host-probe/)
QUEUED_LAUNCHES = 400


def step_times(run: Any, *, reps: int = 20, warmup: int = 3, launches: int = 1) -> dict[str, Any]:
    """The GPU's time of each step of ``run`` (``run.steps``: (name, callable) pairs; ``run.run()``
    runs them all) and of the whole: CUDA events around every step of ``reps`` repetitions,
    queued behind sleeping kernels (:func:`queue_behind_sleep`), as many repetitions behind each
    as keep its queue within :data:`QUEUED_LAUNCHES` (``launches``: kernels, memsets and copies
    one repetition launches); medians. ``host_s``: the host's time to issue one repetition."""
    torch = _torch()
    steps = run.steps
    for _ in range(warmup):
        run.run()
    _sync(torch)
    # the host's time to issue one repetition (PyTorch's dispatch of SDPA alone is tens of µs)
    t0 = time.perf_counter()
    for _ in range(warmup):
        run.run()
    host_s = (time.perf_counter() - t0) / max(warmup, 1)
    _sync(torch)
    # Events are recorded around every step of every repetition with no host sync in
    # between, all queued behind a sleeping kernel long enough for the host to issue every
    # repetition first: the GPU then runs them back to back and the events measure the GPU's
    # time, not the host's (a kernel shorter than its launch would otherwise wait for it).
    events = [[Stamp(torch) for _ in range(len(steps) + 1)] for _ in range(reps)]
    batch = max(1, min(reps, QUEUED_LAUNCHES // max(launches, 1)))
    queued = True
    for first in range(0, reps, batch):
        last = min(first + batch, reps)
        queued = (queue_behind_sleep(torch, last - first, host_s) if DEVICE == "cuda" else False) and queued
        for rep in range(first, last):
            events[rep][0].record()
            for i, (_, fn) in enumerate(steps):
                fn()
                events[rep][i + 1].record()
        _sync(torch)
    per_step: dict[str, list[float]] = {name: [] for name, _ in steps}
    totals: list[float] = []
    for rep in range(reps):
        for i, (name, _) in enumerate(steps):
            per_step[name].append(events[rep][i].seconds_to(events[rep][i + 1]))
        totals.append(events[rep][0].seconds_to(events[rep][-1]))
    return {
        "time_s": statistics.median(totals),
        "kernels": {name: statistics.median(t) for name, t in per_step.items()},
        "host_s": host_s,
        "queued": queued,
    }


#: the fewest calls each of :func:`call_times`'s timings takes its median (or mean) over
CALL_REPS = 30


def call_times(run: Any, *, reps: int = CALL_REPS, warmup: int = 3) -> dict[str, Any]:
    """What a user's timer sees of ``run.run()`` (inputs preallocated, after ``warmup`` calls, no
    sleeping kernel ahead), each timing apart, each failure kept as one line (``MODE_error``) with
    the others:

    * ``call_time_s``: the median of ``reps`` calls, each synchronised and between two CUDA
      events (``synchronize(); start.record(); run(); end.record(); synchronize()``);
    * ``queued_time_s``: ``reps`` calls issued back to back with no synchronisation, CUDA events
      around the whole loop, divided by ``reps``;
    * ``graph_time_s``: the call captured once in a CUDA graph (after warm-up calls on a side
      stream), then the median of ``reps`` replays, each synchronised and between two events.
    """
    out: dict[str, Any] = {}
    for mode, timing in (("call", _one_call), ("queued", _queued_calls), ("graph", _graph_replays)):
        try:
            out.update(timing(run, reps, warmup))
        except Exception as exc:  # one timing lost, the others kept
            out[f"{mode}_error"] = _one_line(exc)
            _recover()
    return out


def _one_line(exc: BaseException) -> str:
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"{exc.__class__.__name__}: {first}"[:300]


def _recover() -> None:
    """After a failed timing: drop what it left allocated (a failure here is the next case's)."""
    torch = _torch()
    try:
        _sync(torch)
        if DEVICE == "cuda":
            torch.cuda.empty_cache()
    except Exception:  # a sticky CUDA error: the next case reports it
        pass


def _one_call(run: Any, reps: int, warmup: int) -> dict[str, Any]:
    torch = _torch()
    for _ in range(warmup):
        run.run()
    start, end = Stamp(torch), Stamp(torch)
    samples = []
    for _ in range(reps):
        _sync(torch)
        start.record()
        run.run()
        end.record()
        _sync(torch)
        samples.append(start.seconds_to(end))
    return {"call_time_s": statistics.median(samples), "call_reps": reps}


def _queued_calls(run: Any, reps: int, warmup: int) -> dict[str, Any]:
    torch = _torch()
    for _ in range(warmup):
        run.run()
    start, end = Stamp(torch), Stamp(torch)
    _sync(torch)
    start.record()
    for _ in range(reps):
        run.run()
    end.record()
    _sync(torch)
    return {"queued_time_s": start.seconds_to(end) / reps, "queued_calls": reps}


def _graph_replays(run: Any, reps: int, warmup: int) -> dict[str, Any]:
    if DEVICE != "cuda":
        raise RuntimeFailure("CUDA graphs need a CUDA device (this run is on the CPU)")
    torch = _torch()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the capturing stream, as CUDA graph capture asks
        for _ in range(max(warmup, 3)):
            run.run()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            run.run()
        for _ in range(warmup):
            graph.replay()
        start, end = Stamp(torch), Stamp(torch)
        samples = []
        for _ in range(reps):
            torch.cuda.synchronize()
            start.record()
            graph.replay()
            end.record()
            torch.cuda.synchronize()
            samples.append(start.seconds_to(end))
    finally:
        del graph
    return {"graph_time_s": statistics.median(samples), "graph_reps": reps}


# ---------------------------------------------------------------------------------------
# Markers for ncu


_MARKERS: dict[str, Any] = {}


def _marker(name: str) -> Callable[[], None]:
    if name not in _MARKERS:
        torch = require_cuda()
        from . import markers

        buf = torch.zeros(1, device="cuda", dtype=torch.int32)
        kernel = markers.memmodel_begin if name == "begin" else markers.memmodel_end

        def launch() -> None:
            kernel[(1,)](buf)

        _MARKERS[name] = launch
    return _MARKERS[name]


def profile_pass(case: Case, offset: int = 0) -> None:
    """One run of the case's kernels between begin/end marker kernels (for ncu), its inputs
    placed ``offset`` bytes into their allocation. Outside the markers: the inputs, dO (from a
    forward without autograd) and, for our Triton kernel and FlashAttention-3, a run that compiles them."""
    torch = require_cuda()
    run = CaseRun(case, offset=offset)
    run.prepare()
    if case.impl in ("triton", "fa3", "flashmla", *PAGED_IMPLEMENTATIONS) or case.kv_dtype is not None:
        run.run()  # compile (Triton: autotune; FlashAttention's CuTe kernels: JIT) outside the markers
    torch.cuda.synchronize()
    _marker("begin")()
    run.run()
    _marker("end")()
    torch.cuda.synchronize()
    del run
    torch.cuda.empty_cache()


def placements() -> int:
    """How many placements of its inputs each case is profiled at (``validate --placements``,
    passed to the profiled process as ``MEMMODEL_PLACEMENTS``)."""
    return int(os.environ.get("MEMMODEL_PLACEMENTS", "1"))


def run_cases(cases: Iterable[Case], mode: str, out_path: Path) -> None:
    """Entry used on the GPU machine: ``mode`` is ``time`` or ``ncu``; one JSON line per case."""
    torch = require_cuda()
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with out_path.open("a", encoding="utf-8") as out:
        for case in cases:
            t0 = time.time()
            marked = 0  # ncu: marked runs of this case so far (each placement is one)
            try:
                if mode == "ncu":
                    for offset in PLACEMENT_OFFSETS[: placements()]:
                        profile_pass(case, offset)
                        marked += 1
                    record: dict[str, Any] = {"case": case.to_dict(), "status": "ok"}
                else:
                    record = {**time_case(case), "status": "ok"}
            except torch.cuda.OutOfMemoryError as exc:
                torch.cuda.empty_cache()
                record = {
                    "case": case.to_dict(),
                    "status": "skipped",
                    "reason": f"out of GPU memory: {exc}".split("\n")[0],
                }
                if mode == "ncu":  # an empty run for each placement left, to keep the cases aligned
                    for _ in range(placements() - marked):
                        _marker("begin")()
                        _marker("end")()
            except Exception as exc:  # record and go on with the rest
                torch.cuda.empty_cache()
                record = {
                    "case": case.to_dict(),
                    "status": "failed",
                    "reason": f"{exc.__class__.__name__}: {exc}"[:500],
                }
                if mode == "ncu":  # an empty run for each placement left, to keep the cases aligned
                    for _ in range(placements() - marked):
                        _marker("begin")()
                        _marker("end")()
            record["wall_s"] = round(time.time() - t0, 3)
            out.write(json.dumps(record) + "\n")
            out.flush()
            print(
                json.dumps({k: record.get(k) for k in ("status", "time_s", "rel_error", "reason")} | {"id": case.id}),
                file=sys.stderr,
                flush=True,
            )


def main(argv: list[str] | None = None) -> int:
    """``python -m memmodel.gpu.run MODE OUT.jsonl CASE...`` (CASE as in parse_case)."""
    from ..cases import parse_case

    args = list(sys.argv[1:] if argv is None else argv)
    mode, out = args[0], Path(args[1])
    cases = [parse_case(a) for a in args[2:]]
    if os.environ.get("MEMMODEL_CASES_FILE"):
        cases += [parse_case(line) for line in Path(os.environ["MEMMODEL_CASES_FILE"]).read_text().split() if line]
    run_cases(cases, mode, out)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
