"""Predicted against measured: map measured kernels to the model's, and score the model.

Plain Python (no torch): everything here runs on records brought back from a GPU, so it
is tested on the CPU. How measured and predicted HBM bytes are compared:

* Nsight Compute flushes the caches before each kernel, so the model is evaluated with
  ``l2="cold"``: each kernel starts with an empty L2.
* Writes still dirty in L2 when a kernel ends are not counted by Nsight Compute as DRAM
  writes. A predicted write is therefore scored as met when the measured writes are lower
  by at most the L2's capacity: ``adjusted = measured_read + clamp(predicted_write,
  measured_write, measured_write + L2)``, and the error is ``(predicted − adjusted) /
  adjusted``. Read errors are reported on their own as well (no allowance).
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from typing import Any

from .cases import Case
from .hardware import Profile
from .model import Comparison, compare
from .options import Options, options_for
from .timing_modes import MEASURED_MODES, mode_time_errors, predicted_modes
from .traffic import l2 as l2m
from .traffic.ledger import Kernel
from .traffic.quant import CAST_KERNELS

_GEMM = r"gemm|nvjet|cutlass|sm\d+_xmma"
_GROUP_SUM = r"reduce_kernel|[Ss]um"

#: measured kernel name patterns for each model kernel, per implementation. Forward kernels
#: as Nsight Compute named them on an H200 (validation/h200/final/*.ncu.csv.gz); backward ones
#: from the libraries' sources: FlashAttention-2's ``flash_bwd_dot_do_o_kernel``,
#: ``flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel``, ``flash_bwd_convert_dq_kernel``
#: (``flash_bwd_launch_template.h``; ``pytorch_flash::`` in PyTorch), ATen's reductions
#: (``reduce_kernel``) for GQA's group sums, CUTLASS's ``fmha_cutlassB_*``, ATen's
#: ``softmax_warp_backward`` / ``cunn_SoftMaxBackward`` and the product before it (a
#: ``BinaryFunctor`` multiply), ``fused_dropout_kernel`` and the dropout backward's
#: ``masked_scale_kernel``, the ``AUnaryFunctor`` multiply by a scalar, ``masked_fill_kernel``
#: and the copy of an out-of-place ``masked_fill`` (a ``Memcpy DtoD``, which Nsight Compute
#: does not profile: matched in the CUPTI trace only).
KERNEL_PATTERNS: dict[str, dict[str, str]] = {
    "standard": {
        "qk": _GEMM,
        "scale": r"AUnaryFunctor.*MulFunctor",
        "mask": r"elementwise|masked_fill",
        "softmax": r"softmax(?!_warp_backward)|SoftMax(?!Backward)",
        "dropout": r"fused_dropout|dropout",
        "pv": _GEMM,
        "dv": _GEMM,
        "dp": _GEMM,
        "dropout_bwd": r"masked_scale",
        "softmax_bwd_mul": r"BinaryFunctor.*MulFunctor",
        "softmax_bwd": r"softmax_warp_backward|SoftMaxBackward",
        "mask_bwd_copy": r"copy|Memcpy DtoD",
        "mask_bwd": r"masked_fill",
        "scale_bwd": r"AUnaryFunctor.*MulFunctor",
        "dk": _GEMM,
        "dq": _GEMM,
    },
    "sdpa-flash": {
        "fa2_fwd": r"flash_fwd_kernel",
        "fa2_splitkv": r"splitkv_kernel",
        "fa2_combine": r"combine",
        "fa2_bwd_pre": r"flash_bwd_dot_do_o",
        "fa2_bwd": r"flash_bwd_dq_dk_dv",
        "fa2_bwd_dq": r"flash_bwd_convert_dq",
        "dk_group_sum": _GROUP_SUM,
        "dv_group_sum": _GROUP_SUM,
        "layout_copy_o": r"direct_copy",
        "layout_copy_do": r"direct_copy",
        **{f"grad_fill_{t}": r"FillFunctor" for t in "kvq"},
        **{f"grad_copy_{t}": r"direct_copy" for t in "kvq"},
    },
    "sdpa-cudnn": {
        # the generated kernels say fprop / bprop; with dropout PyTorch first launches
        # ``at::cuda::philox::unpack_cudnn``, which is none of them
        "fa2_fwd": r"fprop",
        "fa2_splitkv": r"fprop",
        "fa2_combine": r"reduction",
        "cudnn_zero": r"^Memset",
        "cudnn_bwd_zero": r"^Memset",
        "cudnn_bwd_pre": r"dot_do_o",
        "cudnn_bwd": r"bprop|dgrad|backward|bwd",
        "cudnn_bwd_dq": r"convert_dq",
        "dk_group_sum": r"reduce_head",
        "dv_group_sum": r"reduce_head",
    },
    "sdpa-efficient": {
        "fa2_fwd": r"cutlassF|fmha(?!_cutlassB)",
        "mea_bwd_zero": r"FillFunctor|fill",
        "mea_bwd": r"cutlassB|backward",
        "dk_group_sum": _GROUP_SUM,
        "dv_group_sum": _GROUP_SUM,
    },
    "triton": {"fa2_fwd": r"attn|flash|fwd", "fa2_splitkv": r"attn|flash|fwd", "fa2_combine": r"combine"},
    # flash_attn.cute's kernels are named after their classes (FlashAttentionForwardSm90, ...);
    # fp8 cases run FlashInfer's fa3-backend prefill (FP8PrefillWithKVCacheKernel, prefill_sm90.cuh)
    "fa3": {
        "fa2_fwd": r"(?i)forward|FP8PrefillWithKVCache",
        "fa2_splitkv": r"(?i)forward",
        "fa2_combine": r"(?i)combine",
        "fa3_bwd_pre": r"(?i)preprocess",
        "fa3_bwd": r"(?i)backwardsm90|backward(?!.*(pre|post)process)",
        "fa3_bwd_dq": r"(?i)postprocess",
        "fa3_bwd_dk": r"(?i)postprocess",
        "fa3_bwd_dv": r"(?i)postprocess",
    },
    # FlashInfer's JIT-built kernels keep their template names: the FA2-style prefill (and the
    # tensor-core decode) BatchPrefillWithPagedKVCacheKernel, the sm90 prefill PrefillWithKVCacheKernel
    "flashinfer": {
        "flashinfer_decode": r"BatchDecodeWithPagedKVCache",
        "flashinfer_prefill": r"BatchPrefillWithPagedKVCache",
        "flashinfer_prefill_sm90": r"(?<!Batch)PrefillWithKVCacheKernel",
        "flashinfer_merge": r"MergeStates",
    },
    # inductor names its template kernels triton_tem_*, its reductions triton_per_* / triton_red_*
    "flex": {
        "flex_decode": r"triton_tem_",
        "flex_attention": r"triton_tem_",
        "flex_reduce": r"triton_(?!tem_)",
        # the backward: Δ's reduction (triton_per_ or triton_red_), then the template
        "flex_bwd_delta": r"triton_(per|red)_",
        "flex_attention_backward": r"triton_tem_",
    },
}
# FlashInfer's Hopper MLA decode: one persistent kernel (``BatchMLAPageAttentionHopperKernel``,
# ``mla_hopper.cuh``; its merge runs in the same launch)
KERNEL_PATTERNS["flashmla"] = {"flashinfer_mla": r"(?i)MLA.*Kernel|BatchMLA"}
# PyTorch's math path (``_scaled_dot_product_attention_math``): ATen's copies for the casts and
# the K/V expansion (``repeat_interleave``: an index or copy kernel), multiplies by a scalar, the
# fp32 products (cuBLAS GEMM or GEMV), the softmax, the casts back
_COPY = r"copy|elementwise|index|Memcpy"
KERNEL_PATTERNS["sdpa-math"] = {
    "cast_q": _COPY,
    "cast_k": _COPY,
    "cast_v": _COPY,
    "scale_q": r"MulFunctor|elementwise",
    "expand_k": _COPY,
    "expand_v": _COPY,
    "scale_k": r"MulFunctor|elementwise",
    "qk": _GEMM + r"|gemv|dot",
    "softmax": r"softmax|SoftMax",
    "pv": _GEMM + r"|gemv|dot",
    "cast_o": _COPY,
    "cast_p": _COPY,
}
#: an FP8 K/V cache cast before PyTorch's SDPA (memmodel.traffic.quant): ATen's elementwise copy
#: with conversion (``k8.to(bf16)``), one a tensor
for _impl in ("sdpa-flash", "sdpa-cudnn", "sdpa-efficient"):
    KERNEL_PATTERNS[_impl] |= {name: r"elementwise|copy" for name in CAST_KERNELS}
#: model kernels a library may not launch as a kernel of their own (matched when present):
#: the CUTLASS workspace fill (only with more than one key split), cuDNN's auxiliary kernels
#: and cuDNN's memsets (which Nsight Compute, profiling kernels, does not list)
OPTIONAL_KERNELS = frozenset({"mea_bwd_zero", "cudnn_bwd_pre", "cudnn_bwd_dq", "cudnn_zero", "cudnn_bwd_zero"})
#: the fused backward kernel of each implementation (its occupancy is measured apart)
BACKWARD_MAIN = {"sdpa-flash": "fa2_bwd", "sdpa-efficient": "mea_bwd", "sdpa-cudnn": "cudnn_bwd", "fa3": "fa3_bwd"}

#: The runners' layout copies: validate and calibrate make Q, K, V as ``torch.randn(B, H, N, d)``
#: (batch × heads × N × d in memory), so the flash forward's O follows Q's layout and PyTorch's
#: flash backward makes O and dO batch × N × heads × d with ``.contiguous()`` (two copies of
#: permuted heads before its first kernel, seen in every such record with more than one head).
#: A network whose Q comes from a projection's view and transpose runs neither: the model's
#: kernel list leaves them out, and only the runners' predictions and fits count them.
LAYOUT_COPY_KERNELS = {"sdpa-flash": ("layout_copy_o", "layout_copy_do")}


def runner_layout_copies(case: Case, profile: Profile) -> dict[str, float]:
    """The seconds each of the runner's layout copies takes (:data:`LAYOUT_COPY_KERNELS`):
    read and written once, at the profile's generic elementwise rate (ATen's strided copy, as
    ``memmodel trace`` prices a copy of permuted heads), plus a launch. None for one head (the
    two layouts are one) or an implementation that copies none."""
    from .workload import DTYPE_BYTES

    names = LAYOUT_COPY_KERNELS.get(case.impl)
    rate = profile.kernel_rates.elementwise_bytes_per_s
    if not case.backward or not names or case.heads <= 1 or not rate:
        return {}
    moved = 2 * case.batch * case.heads * case.n * case.d_v_ * DTYPE_BYTES[case.dtype]
    seconds = moved / rate + float(profile.launch_overhead_s or 0.0)
    return dict.fromkeys(names, seconds)


#: The varlen runner's gradients: it hands the op packed (total, heads, d) views of one request
#: (``q.transpose(1, 2)[0]``, :func:`memmodel.gpu.run.varlen_flash_forward`), so autograd's
#: backward of that view makes each of dK, dV, dQ in the runner's layout: zeros of the tensor's
#: size, then the gradient copied into them strided (a fill and a copy each, after the op's own
#: kernels, K first: seen in every packed training step's profile). A network whose packed tensors
#: come from its projections runs none: the model's kernel list leaves them out.
RUNNER_GRAD_KERNELS = ("grad_fill_k", "grad_copy_k", "grad_fill_v", "grad_copy_v", "grad_fill_q", "grad_copy_q")


def runner_grad_kernels(case: Case, profile: Profile) -> dict[str, float]:
    """The seconds each of the varlen runner's gradient kernels takes (:data:`RUNNER_GRAD_KERNELS`):
    a fill writes the tensor once at the HBM's write rate, a copy reads and writes it at the
    profile's generic elementwise rate (strided, as the layout copies), each plus a launch. Empty
    but for a packed row's training step on FlashAttention-2."""
    from .workload import DTYPE_BYTES

    rate = profile.kernel_rates.elementwise_bytes_per_s
    if not case.backward or case.seq_lens is None or case.impl != "sdpa-flash" or not rate:
        return {}
    e = DTYPE_BYTES[case.dtype]
    size = {"q": case.n * case.heads * case.d * e, "k": case.n * case.kv_heads_ * case.d * e}
    size["v"] = case.n * case.kv_heads_ * case.d_v_ * e
    write = profile.hbm.write_bandwidth_bytes_per_s or profile.hbm.bandwidth_bytes_per_s
    launch = float(profile.launch_overhead_s or 0.0)
    out = {}
    for t in "kvq":
        out[f"grad_fill_{t}"] = size[t] / write + launch
        out[f"grad_copy_{t}"] = 2 * size[t] / rate + launch
    return out


def standard_variant(case: Case) -> str:
    """The standard-attention variant a case runs: the training step runs eager PyTorch's
    op sequence under autograd (``eager``); forward-only cases run Algorithm 0 (the scale
    applied to Q beforehand, untimed), as every earlier record did."""
    return "eager" if case.backward else "algorithm0"


def case_options(case: Case, l2: str, ctas_per_sm: int | None = None, profile: Profile | None = None) -> Options:
    """How to model a measured case: its implementation (tiles, instructions, measured
    efficiency) and, when Nsight Compute reported it, the number of CTAs the kernel really
    ran per SM (its occupancy)."""
    backward = case.backward
    if case.impl == "standard":
        return Options(l2=l2, implementation="paper", backward=backward)
    return options_for(
        case.impl,
        case.workload(),
        profile,
        block_q=case.block_q,
        block_kv=case.block_kv,
        l2=l2,
        ctas_per_sm=ctas_per_sm,
        backward=backward,
    )


def measured_ctas_per_sm(measured: list[Any], sm_count: int) -> int | None:
    """CTAs per SM of the largest measured kernel: grid / (waves per SM × SMs)."""
    best = max(measured, key=lambda k: k.metrics.get("launch__grid_size", 0), default=None)
    if best is None:
        return None
    grid = best.metrics.get("launch__grid_size", 0.0)
    waves = best.metrics.get("launch__waves_per_multiprocessor", 0.0)
    if not grid or not waves or waves != waves:
        return None
    return max(1, round(grid / (waves * sm_count)))


def _compare(case: Case, profile: Profile, l2: str, ctas_per_sm: int | None, backward_ctas: int | None) -> Comparison:
    return compare(
        case.workload(),
        profile,
        case_options(case, l2, ctas_per_sm, profile),
        standard=standard_variant(case),
        backward_ctas_per_sm=backward_ctas,
    )


def predicted_kernels(
    case: Case,
    profile: Profile,
    l2: str = "cold",
    ctas_per_sm: int | None = None,
    backward_ctas_per_sm: int | None = None,
) -> list[Kernel]:
    c = _compare(case, profile, l2, ctas_per_sm, backward_ctas_per_sm)
    alg = c.standard if case.impl == "standard" else c.tiled
    return list(alg.traffic.kernels)


def compulsory_kernels(case: Case, profile: Profile) -> list[Kernel]:
    """The model's kernels with an infinite L2: each tensor a kernel touches, once."""
    from .model import tiled_traffic
    from .traffic.standard import standard_variant as variant

    opts = case_options(case, "cold", profile=profile)
    inf = l2m.L2("cold", float("inf"), profile.sm_count, float("inf"))
    if case.impl == "standard":
        return list(variant(standard_variant(case), case.workload(), inf, backward=opts.backward).kernels)
    return list(tiled_traffic(case.workload(), profile, opts, inf).kernels)


@dataclass
class KernelScore:
    """One modelled kernel against the kernel measured for it: bytes and time, both sides."""

    case: str
    kernel: str
    measured_name: str
    measured_read: float
    measured_write: float
    measured_l2: float
    predicted_read: float
    predicted_write: float
    predicted_l2: float
    paper_read: float
    paper_write: float
    compulsory_read: float
    compulsory_write: float
    l2_capacity: float
    pass_: str = "forward"

    def _adjusted(self, write: float) -> float:
        credit = min(max(write, self.measured_write), self.measured_write + self.l2_capacity)
        return self.measured_read + credit

    @staticmethod
    def _err(pred: float, meas: float) -> float:
        return (pred - meas) / meas if meas > 0 else (0.0 if pred == 0 else float("inf"))

    @property
    def error(self) -> float:
        return self._err(self.predicted_read + self.predicted_write, self._adjusted(self.predicted_write))

    @property
    def read_error(self) -> float:
        return self._err(self.predicted_read, self.measured_read)

    @property
    def paper_error(self) -> float:
        return self._err(self.paper_read + self.paper_write, self._adjusted(self.paper_write))

    @property
    def compulsory_error(self) -> float:
        return self._err(self.compulsory_read + self.compulsory_write, self._adjusted(self.compulsory_write))

    @property
    def l2_error(self) -> float:
        return self._err(self.predicted_l2, self.measured_l2)

    def to_dict(self) -> dict[str, Any]:
        return {
            "case": self.case,
            "kernel": self.kernel,
            "measured_kernel": self.measured_name,
            "measured_hbm_read_bytes": self.measured_read,
            "measured_hbm_write_bytes": self.measured_write,
            "measured_l2_bytes": self.measured_l2,
            "predicted_hbm_read_bytes": self.predicted_read,
            "predicted_hbm_write_bytes": self.predicted_write,
            "predicted_l2_bytes": self.predicted_l2,
            "paper_hbm_bytes": self.paper_read + self.paper_write,
            "compulsory_hbm_bytes": self.compulsory_read + self.compulsory_write,
            "error": self.error,
            "read_error": self.read_error,
            "paper_error": self.paper_error,
            "compulsory_error": self.compulsory_error,
            "l2_error": self.l2_error,
            "pass": self.pass_,
        }


def match_kernels(impl: str, model: list[Kernel], measured: list[Any]) -> list[tuple[Kernel, Any]]:
    """Pair each model kernel with the next measured kernel whose name fits, in launch order.
    Measured kernels that fit no model kernel (fills, copies) are skipped."""
    patterns = KERNEL_PATTERNS[impl]
    pairs = []
    i = 0
    for k in model:
        pattern = re.compile(patterns.get(k.name, r"$^"))
        if k.name in OPTIONAL_KERNELS:  # where the list holds none (a memset in Nsight Compute's), skipped
            found = next((j for j in range(i, len(measured)) if pattern.search(measured[j].name)), None)
            if found is None:
                continue
        while i < len(measured) and not pattern.search(measured[i].name):
            i += 1
        if i == len(measured):
            raise ValueError(f"no measured kernel for model kernel {k.name!r} ({impl})")
        pairs.append((k, measured[i]))
        i += 1
    return pairs


def align_kernels(impl: str, names: list[str], measured: list[Any]) -> list[tuple[str | None, Any]]:
    """The model's kernels (``names``, in launch order) and the measured ones, aligned in order
    so that as many pairs as possible match by name pattern (a longest common subsequence):
    ``(name, kernel)`` pairs, ``(name, None)`` for a model kernel nothing matched, ``(None,
    kernel)`` for a measured kernel the model does not describe (fills, copies, or a kernel
    the model lacks). Unlike :func:`match_kernels` a missing kernel does not stop the rest:
    used for the training step, where one run should show every kernel at once."""
    patterns = KERNEL_PATTERNS[impl]
    regex = [re.compile(patterns.get(n, r"$^")) for n in names]
    # a kernel a library launches for sure counts twice an optional one (cuDNN's auxiliary
    # kernels must not take the main kernel's match)
    weight = [1 if n in OPTIONAL_KERNELS else 2 for n in names]
    n, m = len(names), len(measured)
    ok = [[bool(regex[i].search(measured[j].name)) for j in range(m)] for i in range(n)]
    best = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            best[i][j] = max(best[i + 1][j], best[i][j + 1], best[i + 1][j + 1] + weight[i] if ok[i][j] else 0)
    out: list[tuple[str | None, Any]] = []
    i = j = 0
    while i < n or j < m:
        if i < n and j < m and ok[i][j] and best[i][j] == best[i + 1][j + 1] + weight[i]:
            out.append((names[i], measured[j]))
            i, j = i + 1, j + 1
        elif j < m and (i == n or best[i][j] == best[i][j + 1]):
            out.append((None, measured[j]))  # a kernel the model does not describe
            j += 1
        else:
            out.append((names[i], None))  # a model kernel nothing measured matches
            i += 1
    return out


def launch_names(kernels: list[Kernel]) -> list[str]:
    """The model's kernel names in launch order, each as many times as it is launched
    (``Kernel.launches``: ATen's elementwise ops over tensors past 32-bit offsets)."""
    return [k.name for k in kernels for _ in range(max(1, int(k.launches)))]


def _merge(parts: list[Any]) -> Any:
    """One measured kernel from the launches of one model kernel: bytes and times summed,
    the first launch's name (with the count) and launch statistics."""
    if len(parts) == 1:
        return parts[0]
    name = f"{parts[0].name} (x{len(parts)} launches)"
    if hasattr(parts[0], "metrics"):
        from types import SimpleNamespace

        summed = ("dram__bytes_read.sum", "dram__bytes_write.sum", "lts__t_bytes.sum", "gpu__time_duration.sum")
        metrics = dict(parts[0].metrics)
        for key in summed:
            if key in metrics:
                metrics[key] = sum(p.metrics.get(key, 0.0) for p in parts)
        first = parts[0]
        return SimpleNamespace(
            id=first.id,
            name=name,
            metrics=metrics,
            dram_read_bytes=metrics.get("dram__bytes_read.sum", 0.0),
            dram_write_bytes=metrics.get("dram__bytes_write.sum", 0.0),
            l2_bytes=metrics.get("lts__t_bytes.sum", 0.0),
            time_s=metrics.get("gpu__time_duration.sum", 0.0) * 1e-9,
        )
    from types import SimpleNamespace

    return SimpleNamespace(name=name, time_s=sum(p.time_s for p in parts))


def align_launches(impl: str, kernels: list[Kernel], measured: list[Any]) -> list[tuple[str | None, Any]]:
    """:func:`align_kernels` with each model kernel as many times as it is launched, then one
    pair per model kernel with its matched launches merged (:func:`_merge`); None where none
    matched. Measured kernels no model kernel describes stay ``(None, kernel)``."""
    slots: list[tuple[str | None, list[Any]]] = []
    parts: dict[str, list[Any]] = {}
    for name, m in align_kernels(impl, launch_names(kernels), measured):
        if name is None:
            slots.append((None, [m]))
            continue
        if name not in parts:
            parts[name] = []
            slots.append((name, parts[name]))
        if m is not None:
            parts[name].append(m)
    return [(name, (_merge(ms) if ms else None) if name is not None else ms[0]) for name, ms in slots]


@dataclass
class CaseScores:
    """A case's byte scores, and what the alignment left over."""

    scores: list[KernelScore]
    #: measured kernels no model kernel describes
    unmatched: list[Any] = field(default_factory=list)
    #: model kernels no measured kernel matched (optional ones included)
    missing: list[str] = field(default_factory=list)
    ctas_per_sm: int | None = None
    backward_ctas_per_sm: int | None = None


def occupancies(case: Case, measured: list[Any], profile: Profile) -> tuple[int | None, int | None]:
    """CTAs per SM of the forward and of the backward fused kernel, as measured. Forward-only
    cases: of the largest measured kernel (as every earlier record was scored)."""
    if case.impl == "standard":
        return None, None
    kernels = predicted_kernels(case, profile, "cold")
    pairs = dict((n, k) for n, k in align_launches(case.impl, kernels, measured) if n is not None and k is not None)
    if not case.backward:
        # the attention kernel's, not a split step's combine (whose grid of few-row CTAs is
        # often the larger, at several times the occupancy)
        main = pairs.get("fa2_fwd") or pairs.get("fa2_splitkv")
        return measured_ctas_per_sm([main] if main is not None else measured, profile.sm_count), None
    fwd = pairs.get("fa2_fwd")
    bwd = pairs.get(BACKWARD_MAIN.get(case.impl, ""))
    return (
        measured_ctas_per_sm([fwd], profile.sm_count) if fwd is not None else None,
        measured_ctas_per_sm([bwd], profile.sm_count) if bwd is not None else None,
    )


def _score(case: Case, k: Kernel, m: Any, p: Kernel, c: Kernel, profile: Profile) -> KernelScore:
    return KernelScore(
        case=case.id,
        kernel=k.name,
        measured_name=m.name,
        measured_read=m.dram_read_bytes,
        measured_write=m.dram_write_bytes,
        measured_l2=m.l2_bytes,
        predicted_read=float(k.bytes(level="hbm", direction="read")),
        predicted_write=float(k.bytes(level="hbm", direction="write")),
        predicted_l2=float(k.bytes(level="l2")),
        paper_read=float(p.bytes(level="hbm", direction="read")),
        paper_write=float(p.bytes(level="hbm", direction="write")),
        compulsory_read=float(c.bytes(level="hbm", direction="read")),
        compulsory_write=float(c.bytes(level="hbm", direction="write")),
        l2_capacity=profile.l2.capacity_bytes,
        pass_=k.pass_,
    )


def score_case_detail(case: Case, measured: list[Any], profile: Profile) -> CaseScores:
    """Byte scores of every matched kernel; for the training step (``case.backward``) through
    :func:`align_kernels`, with the kernels left unmatched on either side."""
    if not case.backward:
        return CaseScores(score_case(case, measured, profile), ctas_per_sm=occupancies(case, measured, profile)[0])
    fwd_ctas, bwd_ctas = occupancies(case, measured, profile)
    model = {k.name: k for k in predicted_kernels(case, profile, "cold", fwd_ctas, bwd_ctas)}
    paper = {k.name: k for k in predicted_kernels(case, profile, "off")}
    comp = {k.name: k for k in compulsory_kernels(case, profile)}
    out = CaseScores([], ctas_per_sm=fwd_ctas, backward_ctas_per_sm=bwd_ctas)
    for name, m in align_launches(case.impl, list(model.values()), measured):
        if name is None:
            out.unmatched.append(m)
        elif m is None:
            out.missing.append(name)
        else:
            out.scores.append(_score(case, model[name], m, paper[name], comp[name], profile))
    return out


def score_case(case: Case, measured: list[Any], profile: Profile) -> list[KernelScore]:
    if case.backward:
        return score_case_detail(case, measured, profile).scores
    occupancy = None if case.impl == "standard" else measured_ctas_per_sm(measured, profile.sm_count)
    model = predicted_kernels(case, profile, "cold", occupancy)
    paper = {k.name: k for k in predicted_kernels(case, profile, "off")}
    comp = {k.name: k for k in compulsory_kernels(case, profile)}
    return [
        _score(case, k, m, paper[k.name], comp[k.name], profile) for k, m in match_kernels(case.impl, model, measured)
    ]


def summary(scores: list[KernelScore]) -> dict[str, Any]:
    def stats(values: list[float]) -> dict[str, float]:
        a = [abs(v) for v in values]
        return {"median_abs": statistics.median(a), "max_abs": max(a)} if a else {"median_abs": 0.0, "max_abs": 0.0}

    return {
        "kernels": len(scores),
        "model": stats([s.error for s in scores]),
        "model_reads": stats([s.read_error for s in scores]),
        "paper": stats([s.paper_error for s in scores]),
        "compulsory": stats([s.compulsory_error for s in scores]),
    }


# ---------------------------------------------------------------------------------------
# Time


def predicted_times(
    case: Case, profile: Profile, ctas_per_sm: int | None = None, backward_ctas_per_sm: int | None = None
) -> dict[str, Any]:
    """The model's times for a case (L2 on: the timing loop runs warm), per measured step:
    standard attention's kernels, a fused kernel's ``attention``, or for the training step
    its ``forward`` and ``backward`` passes (their kernels in ``kernels``, in launch order).
    Each step's time includes the profile's ``event_overhead`` (validate times every step
    between two CUDA events); ``kernels`` are the model's own (CUPTI durations' peers)."""
    c = _compare(case, profile, "on", ctas_per_sm, backward_ctas_per_sm)
    ev = c.standard if case.impl == "standard" else c.tiled
    pairs = list(zip(ev.traffic.kernels, ev.timing.kernels))
    kernels = {k.name: float(t.time_s) for k, t in pairs}
    if case.backward:
        work: dict[str, tuple[int, int]] = {}
        steps: dict[str, float] = {}
        for pass_ in ("forward", "backward"):
            chosen = [(k, t) for k, t in pairs if k.pass_ == pass_]
            steps[pass_] = float(sum(float(t.time_s) for _, t in chosen))
            work[pass_] = (
                sum(int(k.bytes(level="hbm")) for k, _ in chosen),
                sum(int(k.flops) for k, _ in chosen),
            )
        copies = runner_layout_copies(case, profile)
        if copies:  # the runner's tensors' layout: two copies the backward step times, launched first
            first = next(i for i, (k, _) in enumerate(pairs) if k.pass_ == "backward")
            names = list(kernels)
            kernels = {n: kernels[n] for n in names[:first]} | copies | {n: kernels[n] for n in names[first:]}
            steps["backward"] += sum(copies.values())
        grads = runner_grad_kernels(case, profile)
        if grads:  # the varlen runner's view gradients: after every kernel of the backward
            kernels |= grads
            steps["backward"] += sum(grads.values())
    elif case.impl == "standard":
        steps = kernels
        work = {k.name: (int(k.bytes(level="hbm")), int(k.flops)) for k in ev.traffic.kernels}
    else:
        steps = {"attention": float(ev.timing.time_s)}
        work = {"attention": (int(ev.traffic.hbm_bytes), int(ev.traffic.flops))}
        casts = [(k, t) for k, t in pairs if k.name in CAST_KERNELS]
        if casts:  # an FP8 K/V cache cast before the kernel: validate times each cast as its own step
            steps = {k.name: float(t.time_s) for k, t in casts} | {
                "attention": float(ev.timing.time_s) - sum(float(t.time_s) for _, t in casts)
            }
            work = {k.name: (int(k.bytes(level="hbm")), int(k.flops)) for k, _ in casts} | {
                "attention": (
                    int(ev.traffic.hbm_bytes) - sum(int(k.bytes(level="hbm")) for k, _ in casts),
                    int(ev.traffic.flops) - sum(int(k.flops) for k, _ in casts),
                )
            }
    # each step is timed between two CUDA events, which add their own overhead to it (a
    # stream of kernels does not pay it: compare leaves it out)
    event = float(profile.event_overhead_s or 0.0)
    steps = {name: t + event for name, t in steps.items()}
    out = {
        "time_s": float(ev.timing.time_s)
        + sum(runner_layout_copies(case, profile).values())
        + sum(runner_grad_kernels(case, profile).values())
        + event * len(steps),
        "steps": steps,
        "kernels": kernels,
        "step_work": {name: {"hbm_bytes": b, "flops": f} for name, (b, f) in work.items()},
        "ceilings": {
            "hbm_bytes_per_s": profile.hbm.bandwidth_bytes_per_s,
            "matmul_flops_per_s": profile.peak_flops(case.dtype),
        },
        "bound": str(ev.timing.bound),
        "hbm_bytes": int(ev.traffic.hbm_bytes),
        "flops": int(ev.traffic.flops),
    }
    out.update(predicted_modes(ev))
    # an elementwise op over a tensor past 32-bit offsets is several launches, each profiled apart
    out["kernel_launches"] = {k.name: int(k.launches) for k in ev.traffic.kernels}
    copies = runner_layout_copies(case, profile) | runner_grad_kernels(case, profile)
    # the launch overhead in each kernel's time: its own duration, CUPTI's peer, is the rest
    launch = float(profile.launch_overhead_s or 0.0)
    out["kernel_launch_s"] = {k.name: float(t.terms.get("launch", 0.0)) for k, t in pairs} | {
        name: launch for name in copies
    }
    if copies and isinstance(out.get("times_s"), dict):  # every timing mode runs them
        out["times_s"] = {mode: t + sum(copies.values()) for mode, t in out["times_s"].items()}
    if case.backward:
        from .flops import convention_flops

        out["kernel_passes"] = {k.name: k.pass_ for k in ev.traffic.kernels} | dict.fromkeys(copies, "backward")
        conv = convention_flops(case.workload(), backward=True)
        out["flops_convention"] = {"forward": conv["forward"], "backward": conv["backward"], "total": conv["total"]}
    return out


def prediction_line(case: Case, profile: Profile) -> str:
    """One case's predictions as committed before measuring: each timed step's time (µs,
    L2 on, the model's own occupancy), the host model's call, queued and graph times where the
    profile has host figures, and each kernel's HBM reads (bytes, L2 cold, as Nsight Compute
    measures)."""
    predicted = predicted_times(case, profile)
    reads = {k.name: int(k.bytes(level="hbm", direction="read")) for k in predicted_kernels(case, profile, "cold")}
    steps = " ".join(f"{name}={t * 1e6:.1f}us" for name, t in predicted["steps"].items())
    modes = predicted.get("times_s")
    timed = " | " + " ".join(f"{m}={modes[m] * 1e6:.1f}us" for m in ("call", "queued", "graph")) if modes else ""
    return f"{case.id} {steps}{timed} | hbm_read " + " ".join(f"{name}={b}" for name, b in reads.items())


def time_errors(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """Per measured step: predicted vs measured time, error, achieved rates."""
    if entry.get("status") != "ok" or "timing" not in entry:
        return []
    pred = entry["predicted"]["steps"]
    out = []
    for step, measured in entry["timing"]["kernels"].items():
        if step not in pred or measured <= 0:
            continue
        row = {
            "step": step,
            "predicted_s": pred[step],
            "measured_s": measured,
            "error": (pred[step] - measured) / measured,
        }
        work = entry["predicted"].get("step_work", {}).get(step)
        ceilings = entry["predicted"].get("ceilings")
        if work and ceilings:
            # achieved rates: the model's HBM bytes and FLOPs over the measured time, and their
            # share of the profile's ceilings
            row["achieved_hbm_bytes_per_s"] = work["hbm_bytes"] / measured
            row["achieved_flops_per_s"] = work["flops"] / measured
            row["hbm_share"] = row["achieved_hbm_bytes_per_s"] / ceilings["hbm_bytes_per_s"]
            row["flops_share"] = row["achieved_flops_per_s"] / ceilings["matmul_flops_per_s"]
        out.append(row)
    return out


def step_time_error(entry: dict[str, Any]) -> dict[str, Any] | None:
    """The training step's whole time (forward + backward), predicted against measured."""
    if entry.get("status") != "ok" or "timing" not in entry or not entry["case"].get("backward"):
        return None
    if entry["case"].get("kind") == "trace":  # its steps are scored as kernel time (time_errors)
        return None
    measured = entry["timing"].get("time_s", 0.0)
    if measured <= 0:
        return None
    predicted = entry["predicted"]["time_s"]
    return {"predicted_s": predicted, "measured_s": measured, "error": (predicted - measured) / measured}


def kernel_time_errors(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """Per kernel of a profiled step (CUPTI durations from torch.profiler): the model's kernel
    it aligns with (:func:`align_kernels`), its predicted duration (its time less the launch
    overhead it holds) against the measured one. Measured kernels
    no model kernel describes come as rows with ``kernel`` None (their time counts nowhere
    else: a kernel the model misses)."""
    if entry.get("status") != "ok" or "timing" not in entry or entry["case"].get("kind") == "trace":
        return []  # a trace case's kernels are aligned by class (memmodel.trace_scoring)
    profiled = entry["timing"].get("profiled_kernels")
    if not profiled:
        return []
    from types import SimpleNamespace

    # a kernel's own duration: its time in a queue less the launch overhead it holds (records
    # rescored before the launch overhead was kept apart compare the whole time)
    launch_s = entry["predicted"].get("kernel_launch_s", {})
    predicted = {n: t - launch_s.get(n, 0.0) for n, t in entry["predicted"].get("kernels", {}).items()}
    passes = entry["predicted"].get("kernel_passes", {})
    launches = entry["predicted"].get("kernel_launches", {})
    measured = [SimpleNamespace(name=k["name"], time_s=k["time_s"]) for k in profiled]
    model = [SimpleNamespace(name=n, launches=launches.get(n, 1)) for n in predicted]
    rows = []
    for name, m in align_launches(entry["case"]["impl"], model, measured):  # type: ignore[arg-type]
        if m is None:
            continue
        row: dict[str, Any] = {"kernel": name, "measured_kernel": m.name, "measured_s": m.time_s}
        if name is not None:
            row["predicted_s"] = predicted[name]
            row["pass"] = passes.get(name, "forward")
            row["error"] = (predicted[name] - m.time_s) / m.time_s if m.time_s > 0 else float("inf")
        rows.append(row)
    return rows


def _stats(values: list[float]) -> dict[str, float] | None:
    a = [abs(v) for v in values if v == v and abs(v) != float("inf")]
    if not a:
        return None
    return {"n": len(a), "median_abs": statistics.median(a), "max_abs": max(a)}


def placement_spread(errors: list[float]) -> float:
    """How far apart one kernel's measured HBM bytes lie over its placements, as the largest
    over the smallest minus one, from the prediction's errors against each (e = p/m − 1, so
    m = p/(1 + e))."""
    return (1.0 + max(errors)) / (1.0 + min(errors)) - 1.0


def summarize_record(data: dict[str, Any]) -> dict[str, Any]:
    """Median and max |error| of bytes (model, paper, compulsory) and of time, over all kernels."""
    byte_rows = [b for e in data.get("cases", []) for b in e.get("bytes", [])]
    time_rows = [t for e in data.get("cases", []) for t in time_errors(e)]
    statuses: dict[str, int] = {}
    for e in data.get("cases", []):
        statuses[e.get("status", "?")] = statuses.get(e.get("status", "?"), 0) + 1
    speedups = []
    by_workload: dict[str, dict[str, dict[str, Any]]] = {}
    for e in data.get("cases", []):
        if e.get("status") != "ok":
            continue
        key = str(e["case"]["id"]).split("/", 1)[-1]
        by_workload.setdefault(key, {})[e["case"]["impl"]] = e
    for key, impls in by_workload.items():
        if "standard" in impls and "sdpa-flash" in impls:
            s, t = impls["standard"], impls["sdpa-flash"]
            measured = s["timing"]["time_s"] / t["timing"]["time_s"]
            predicted = s["predicted"]["time_s"] / t["predicted"]["time_s"]
            speedups.append({"workload": key, "predicted": predicted, "measured": measured})
    out = {
        "cases": statuses,
        "hbm_bytes": {
            "model": _stats([b["error"] for b in byte_rows]),
            "model_reads": _stats([b["read_error"] for b in byte_rows]),
            "paper": _stats([b["paper_error"] for b in byte_rows]),
            "compulsory": _stats([b["compulsory_error"] for b in byte_rows]),
        },
        "time": _stats([t["error"] for t in time_rows]),
        "speedups": speedups,
    }
    placed = [b for b in byte_rows if b.get("placement_errors")]
    if placed:  # profiled at several placements of the inputs (validate --placements)
        out["hbm_bytes"]["placements"] = _stats([x for b in placed for x in b["placement_errors"]])
        out["hbm_bytes"]["placement_spread"] = _stats([placement_spread(b["placement_errors"]) for b in placed])
        out["hbm_bytes"]["within_placements"] = sum(
            min(b["placement_errors"]) <= 0 <= max(b["placement_errors"]) for b in placed
        )
    # the times a user's timer sees, and the traced functions (keys only where measured)
    cases = data.get("cases", [])
    for mode in MEASURED_MODES:
        rows = [r for e in cases for r in mode_time_errors(e) if r["mode"] == mode]
        if rows:
            out[f"{mode}_time"] = _stats([r["error"] for r in rows])
    if any(e.get("case", {}).get("kind") == "trace" for e in cases):
        from .trace_scoring import kernel_list_summary, trace_kernel_rows

        out["kernel_list"] = kernel_list_summary(cases)
        out["traced_kernel_time"] = _stats(
            [r["error"] for e in cases for r in trace_kernel_rows(e) if r.get("error") is not None]
        )
    # the training step (keys added for records with backward cases)
    if any(e.get("case", {}).get("backward") and e["case"].get("kind") != "trace" for e in cases):
        backward_rows = [b for b in byte_rows if b.get("pass") == "backward"]
        steps = [x for x in (step_time_error(e) for e in cases) if x is not None]
        kernel_rows = [r for e in cases for r in kernel_time_errors(e) if r.get("kernel") is not None]
        out["hbm_bytes"]["backward_kernels"] = _stats([b["error"] for b in backward_rows])
        out["step_time"] = _stats([x["error"] for x in steps])
        out["kernel_time"] = _stats([r["error"] for r in kernel_rows])
    return out
