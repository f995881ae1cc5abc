"""FP8 validation cases on the GPU: quantised inputs, the kernels that take them, their references.

What runs FP8 attention on the lent H200 (torch 2.11; no FlashAttention-3 package; FlashInfer
0.7.2.post1 and ``flash-attn-4`` can be carried there), read in the sources:

* fp8 prefill forward (``impl=fa3,dtype=fp8``): FlashInfer's ``fa3`` backend,
  ``flashinfer.single_prefill_with_kv_cache(q, k, v, scale_q, scale_k, scale_v, o_dtype=bf16,
  backend="fa3")`` on e4m3 Q, K, V (``csrc/batch_prefill_fp8_sm90.cu``,
  ``include/flashinfer/attention/hopper/quantization/``: FlashAttention-3's Hopper design, its
  producer warpgroup transposing V in shared memory; scales per head, fp32; O in bf16). One
  request a call: batch 1. ``flash_attn.cute`` (FA4's package) runs fp8 on Blackwell only, and the
  C++ FA3 (``hopper/``) is not installed there.
* fp8 K/V cache decode, PyTorch (``impl=sdpa-*,kv_dtype=fp8``): SDPA takes no fp8 K/V, so the
  cast a user runs first (``k.to(bf16) * k_scale``, the same for V) then SDPA on the copies:
  what memmodel models for those implementations (:mod:`memmodel.traffic.quant`).
* fp8 K/V cache decode, FlashInfer (``impl=flashinfer,kv_dtype=fp8``, once that implementation is
  a case kind): ``BatchDecodeWithPagedKVCacheWrapper.plan(..., q_data_type=bf16,
  kv_data_type=torch.float8_e4m3fn)`` and ``run(q, (k_cache, v_cache), k_scale=, v_scale=)``:
  e4m3 or e5m2 pages converted in the kernel (``vec_cast`` in ``vec_dtypes.cuh``); ``k_scale``
  folds into the softmax scale, a ``v_scale`` other than 1 multiplies O after the kernel (a
  kernel of its own, ``out *= v_scale`` in ``decode.py``: the cases leave it to what reads O).

References are float32 attention on the dequantised inputs (the rounding of the inputs is then
no error), checked by :func:`memmodel.gpu.run.check` at the tolerance of the case's dtype (fp8
inputs: 6e-2, e4m3 P in FA3's second product; an FP8 cache under bf16: bf16's 2e-2). Imported on the GPU machine only;
the quantisation and page tables are plain torch and are tested on the CPU.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..cases import Case
from ..errors import RuntimeFailure

#: largest finite value of each 8-bit format (torch.finfo of float8_e4m3fn, float8_e5m2)
FP8_MAX = {"fp8": 448.0, "fp8_e5m2": 57344.0}
#: pages of FlashInfer's paged K/V cache in the decode cases (tokens a page)
PAGE_SIZE = 16
#: what ``validate`` says where FlashInfer is missing
INSTALL_HINT = "FlashInfer (flashinfer-python 0.7.2; ../shared/tools/pack-flashinfer packs it for the GPU machine)"


def torch_fp8(torch: Any, name: str) -> Any:
    """The torch dtype of an 8-bit format: fp8 is e4m3 (``float8_e4m3fn``), fp8_e5m2."""
    return {"fp8": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}[name]


def quantize(torch: Any, x: Any, fmt: str = "fp8", per_head: bool = False) -> tuple[Any, Any]:
    """``x`` (batch × heads × N × d, any float dtype) as ``fmt`` with a float32 scale: per tensor
    (a 0-d tensor), or per head (``per_head``: one a head, shape [heads], batch 1), amax / the
    format's largest value, so that ``x8.float() * scale`` restores ``x`` to the format's precision."""
    dims = (0, 2, 3) if per_head else None
    amax = x.detach().abs().float().amax(dim=dims) if dims else x.detach().abs().float().amax()
    scale = torch.clamp(amax, min=1e-12) / FP8_MAX[fmt]
    shaped = scale.view(1, -1, 1, 1) if per_head else scale
    x8 = (x.detach().float() / shaped).to(torch_fp8(torch, fmt))
    return x8, scale.to(torch.float32)


def dequantize(x8: Any, scale: Any, per_head: bool = False) -> Any:
    """float32 values of a quantised tensor (:func:`quantize`)."""
    return x8.float() * (scale.view(1, -1, 1, 1) if per_head else scale)


def head0(x8: Any, scale: Any, per_head: bool = False) -> Any:
    """Batch 0's dequantised rows as a 1 × heads × N × d float32 tensor (the checks read [0, 0])."""
    return dequantize(x8[:1], scale, per_head)


def flashinfer_missing() -> str | None:
    """Why FlashInfer cannot run here, in one line; None where it imports."""
    try:
        import flashinfer  # noqa: F401
    except Exception as exc:  # ImportError, or a broken install failing at import
        text = str(exc).strip().splitlines()
        return (
            f"flashinfer does not import ({exc.__class__.__name__}: {text[0] if text else ''}): install {INSTALL_HINT}"
        )
    return None


def _require_flashinfer(case: Case) -> Any:
    why = flashinfer_missing()
    if why:
        raise RuntimeFailure(f"{case.id}: {why}")
    import flashinfer

    return flashinfer


class Fp8Inputs:
    """A case's quantised tensors (what the kernel reads), their scales, and the dequantised
    batch-0 tensors the check compares against (:attr:`reference`)."""

    def __init__(self, case: Case, q: Any, k: Any, v: Any) -> None:
        import torch

        self.case = case
        if case.dtype == "fp8":  # fp8 inputs: Q, K, V e4m3, scales per head (FlashInfer's fp8 prefill)
            self.per_head = True
            self.q8, self.sq = quantize(torch, q, "fp8", per_head=True)
            self.k8, self.sk = quantize(torch, k, "fp8", per_head=True)
            self.v8, self.sv = quantize(torch, v, "fp8", per_head=True)
            self.reference = (
                head0(self.q8, self.sq, True),
                head0(self.k8, self.sk, True),
                head0(self.v8, self.sv, True),
            )
        else:  # an FP8 K/V cache under 16-bit Q: per-tensor scales
            fmt = case.kv_dtype or "fp8"
            self.per_head = False
            self.k8, self.sk = quantize(torch, k, fmt)
            self.v8, self.sv = quantize(torch, v, fmt)
            self.q8, self.sq = q, None
            # the cast path folds the scales out of the timed kernels: k_scale into Q (as FlashInfer
            # folds it into the softmax scale), v_scale into whatever reads O; the kernels then
            # compute O / v_scale, which the reference computes too (V not multiplied by its scale)
            self.q_scaled = (q.float() * self.sk).to(q.dtype)
            self.reference = (q[:1], head0(self.k8, self.sk), self.v8[:1].float())


def prefill_steps(case: Case, inputs: Fp8Inputs) -> list[tuple[str, Callable[[], Any]]]:
    """``impl=fa3,dtype=fp8``: FlashInfer's fa3-backend fp8 prefill on batch 1, O in bf16, as
    batch × heads × N × d."""
    import torch

    flashinfer = _require_flashinfer(case)
    if case.batch != 1:
        raise RuntimeFailure(
            f"{case.id}: the fp8 prefill cases run one request (batch 1: single_prefill_with_kv_cache)"
        )
    major = torch.cuda.get_device_capability()[0] if torch.cuda.is_available() else 0
    if major != 9:
        raise RuntimeFailure(f"{case.id}: FlashInfer's fp8 prefill (its fa3 backend) runs on Hopper (sm90) only")
    q = inputs.q8[0].transpose(0, 1).contiguous()  # N × heads × d (NHD)
    k = inputs.k8[0].transpose(0, 1).contiguous()
    v = inputs.v8[0].transpose(0, 1).contiguous()

    def run() -> Any:
        out = flashinfer.single_prefill_with_kv_cache(
            q,
            k,
            v,
            scale_q=inputs.sq,
            scale_k=inputs.sk,
            scale_v=inputs.sv,
            o_dtype=torch.bfloat16,
            causal=case.causal,
            backend="fa3",
        )
        return out.transpose(0, 1).unsqueeze(0)  # 1 × heads × N × d

    return [("attention", run)]


def cast_steps(
    case: Case, inputs: Fp8Inputs, attention: Callable[[Any, Any, Any], Any]
) -> list[tuple[str, Callable[[], Any]]]:
    """``impl=sdpa-*,kv_dtype=fp8``: the cast of K and V to the dtype of Q (one elementwise copy
    each: ``kv_cast_k``, ``kv_cast_v``), then ``attention(q, k, v)`` on the copies; the scales
    are folded out of the timed kernels (:class:`Fp8Inputs`), so O comes out divided by v_scale."""
    dt = inputs.q8.dtype
    state: dict[str, Any] = {}

    def cast_k() -> Any:
        state["k"] = inputs.k8.to(dt)
        return state["k"]

    def cast_v() -> Any:
        state["v"] = inputs.v8.to(dt)
        return state["v"]

    def attend() -> Any:
        return attention(inputs.q_scaled, state["k"], state["v"])

    return [("kv_cast_k", cast_k), ("kv_cast_v", cast_v), ("attention", attend)]


def decode_steps(case: Case, inputs: Fp8Inputs) -> list[tuple[str, Callable[[], Any]]]:
    """``impl=flashinfer,kv_dtype=fp8``: FlashInfer's paged decode (N = 1, its CUDA-core kernel)
    reading an FP8 cache of the case's pages (:data:`PAGE_SIZE` where it gives none) scattered over
    a pool as the 16-bit paged cases' (:func:`memmodel.gpu.paged_run.page_table`), Q and O in the
    dtype, per-tensor k/v scales."""
    import torch

    from .paged_run import page_table as pool_table
    from .paged_run import scatter_nhd

    flashinfer = _require_flashinfer(case)
    if case.n != 1:
        raise RuntimeFailure(f"{case.id}: the FP8 K/V decode cases run one query row (n=1)")
    device = inputs.k8.device
    p = int(case.page_size or PAGE_SIZE)
    table = pool_table(case.batch, case.n_kv_, p, 0, device, case.kv_pool)
    # scattered through 16 bits (every e4m3/e5m2 value is exact there), the pool back in fp8
    k_pages = scatter_nhd(inputs.k8.to(torch.bfloat16), table, p).to(inputs.k8.dtype)
    v_pages = scatter_nhd(inputs.v8.to(torch.bfloat16), table, p).to(inputs.v8.dtype)
    workspace = torch.empty(128 * 1024 * 1024, dtype=torch.uint8, device=device)
    wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD", use_tensor_cores=False)
    wrapper.plan(
        table["indptr"],
        table["indices"],
        table["last_page_len"],
        case.heads,
        case.kv_heads_,
        case.d,
        p,
        q_data_type=inputs.q8.dtype,
        kv_data_type=torch_fp8(torch, case.kv_dtype or "fp8"),
    )
    q = inputs.q8[:, :, 0].contiguous()  # batch × heads × d
    k_scale = float(inputs.sk)  # folded into the softmax scale; v_scale left to what reads O (no extra kernel)

    def run() -> Any:
        out = wrapper.run(q, (k_pages, v_pages), k_scale=k_scale)
        return out.unsqueeze(2)  # batch × heads × 1 × d

    return [("attention", run)]
