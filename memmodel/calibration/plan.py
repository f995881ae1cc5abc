"""What ``memmodel calibrate`` measures: buffer sizes and repeats for the GPU at hand
(:func:`make_plan`), the reference shapes of the library and attention kernels, and the knee
of the L2 capacity curve (:func:`find_knee`). Pure: used and tested without a GPU."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import field
from typing import Any

from ..frozen import frozen

SCHEMA = "memmodel.calibrate/1"
MATMUL_DTYPES = ("fp16", "bf16", "tf32", "fp32", "fp8")

# ---------------------------------------------------------------------------------------
# Sizes and repeats


@frozen
class DeviceInfo:
    """What the CUDA driver reports of the GPU being calibrated."""

    name: str
    sm_count: int
    l2_bytes: int
    hbm_bytes: int
    smem_per_sm_bytes: int | None
    capability: tuple[int, int]
    regs_per_sm: int = 65536
    max_threads_per_sm: int = 2048
    clock_hz: float | None = None
    vendor: str = "NVIDIA"
    versions: Mapping[str, str] = field(default_factory=dict)


@frozen
class Plan:
    """What a calibration measures and how long: buffer sizes, repetitions and sweeps."""

    warmup: int
    stream_bytes: int  # per buffer (HBM read/write/copy)
    stream_reps: int
    l2_bytes_per_call: int
    l2_reps: int
    sweep_sizes: tuple[int, ...]
    sweep_bytes_per_call: int
    sweep_reps: int
    smem_iters: int
    smem_reps: int
    matmul_n: int
    matmul_reps: int
    exp_iters: int
    exp_reps: int
    chase_steps_l2: int
    chase_steps_dram: int
    chase_reps: int
    launch_batches: int
    launch_per_batch: int
    launch_event_reps: int
    graph_kernels: int
    #: the sustained-clock step: seconds of idle GPU before each series, seconds of busy loop,
    #: series per implementation (when the clocks fall varies from one to the next)
    sustained_idle_s: float = 3.0
    sustained_busy_s: float = 0.8
    sustained_series: int = 3
    #: ``--quick``: the steps that choose their points themselves measure fewer
    quick: bool = False


BLOCK_BYTES = 4096 * 4  # one block of the streaming kernels: 4096 float32


def sweep_sizes(l2_bytes: int, *, quick: bool = False) -> tuple[int, ...]:
    """Buffer sizes for the L2 capacity sweep: 8 MB to 2 × L2, finer below L2, in whole blocks."""
    fine = l2_bytes / (8 if quick else 16)
    coarse = l2_bytes / (4 if quick else 8)
    sizes: list[float] = []
    s = 8e6
    while s < l2_bytes - fine / 2:
        sizes.append(s)
        s += fine
    s = float(l2_bytes)
    while s <= 2 * l2_bytes + 1:
        sizes.append(s)
        s += coarse
    out = sorted({max(BLOCK_BYTES, int(x) // BLOCK_BYTES * BLOCK_BYTES) for x in sizes})
    return tuple(out)


def make_plan(info: DeviceInfo, *, quick: bool = False) -> Plan:
    """Sizes that fill the GPU and repeats enough for a stable median; ``quick`` cuts both."""
    gib = 2**30
    stream = (1 if quick else 4) * gib
    stream = min(stream, int(info.hbm_bytes * 0.2) // BLOCK_BYTES * BLOCK_BYTES)  # small GPUs: 2 buffers ≤ 40 %
    return Plan(
        quick=quick,
        warmup=2 if quick else 3,
        stream_bytes=stream,
        stream_reps=5 if quick else 20,
        l2_bytes_per_call=(2 if quick else 4) * 10**9,
        l2_reps=5 if quick else 20,
        sweep_sizes=sweep_sizes(info.l2_bytes, quick=quick),
        sweep_bytes_per_call=(1 if quick else 2) * 10**9,
        sweep_reps=3 if quick else 7,
        smem_iters=4000 if quick else 15000,
        smem_reps=5 if quick else 15,
        matmul_n=8192,
        matmul_reps=4 if quick else 10,
        exp_iters=400 if quick else 1400,
        exp_reps=5 if quick else 15,
        chase_steps_l2=5000 if quick else 20000,
        chase_steps_dram=2000 if quick else 8000,
        chase_reps=3 if quick else 7,
        launch_batches=5 if quick else 20,
        launch_per_batch=100 if quick else 200,
        launch_event_reps=20 if quick else 100,
        graph_kernels=100,
        sustained_idle_s=1.5 if quick else 3.0,
        sustained_busy_s=0.5 if quick else 0.8,
        sustained_series=1 if quick else 3,
    )


def resident_programs(
    n_regs: int | None,
    num_warps: int,
    shared_bytes: int = 0,
    *,
    regs_per_sm: int = 65536,
    max_threads_per_sm: int = 2048,
    smem_per_sm: int | None = None,
    max_blocks_per_sm: int = 32,
) -> int:
    """Programs (thread blocks) of one kernel that fit on one SM at once.

    Registers are allocated per warp in units of 256 (per thread: ``n_regs`` rounded up to 8);
    without a register count only the thread limit applies. At least 1.
    """
    limits = [max_threads_per_sm // (32 * num_warps), max_blocks_per_sm]
    if n_regs:
        per_warp = math.ceil(math.ceil(n_regs / 8) * 8 * 32 / 256) * 256
        limits.append((regs_per_sm // per_warp) // num_warps)
    if shared_bytes and smem_per_sm:
        limits.append(smem_per_sm // shared_bytes)
    return max(1, min(limits))


# ---------------------------------------------------------------------------------------
# Reference shapes of the library and attention kernels (not validation cases)

#: row lengths: powers of two and 1.5 x powers of two (the library changes kernels between them)
SOFTMAX_ROWS = tuple(sorted({2**k for k in range(7, 18)} | {3 * 2**k for k in range(6, 16)}))
SOFTMAX_BYTES = 512 * 2**20
#: softmax and cuBLAS rows that are not a multiple of 8 fp16 elements (16 bytes): odd lengths
#: between the powers of two (not validation shapes)
SOFTMAX_UNALIGNED_ROWS = (129, 257, 513, 1025, 2049, 4097, 8193)
GEMM_UNALIGNED_N = 1025
#: head dims of the unaligned products: cuBLAS picks its kernel by the inner dimension too
#: (d = 80 and 96 are common and not powers of two)
GEMM_UNALIGNED_HEAD_DIMS = (64, 80, 96, 128)
#: row lengths of the causally masked softmax (square blocks): the powers of two the unmasked
#: curve has, not validation shapes' batch × heads
SOFTMAX_MASKED_ROWS = (256, 512, 1024, 2048, 4096, 8192, 16384)
GEMM_BYTES = 2**30
FEW_ROWS_LENGTH = 32768
#: reference shapes for the implementations: (batch, heads, n, d, causal), fp16; not validation
#: cases. Long (8 × 16 × 2048) at every kernel head dim: the efficiency of a block's work;
#: short (64 × 16 × 256, as many CTAs with 1/8 of the blocks each): what a CTA costs beyond
#: its blocks; long-loop (1 × 8 × 16384): a block's work with the CTA's costs spread thin;
#: causal (8 × 16 × 2048): what a block on the diagonal costs beyond a plain one.
REFERENCE_LONG = (8, 16, 2048)
REFERENCE_SHORT = (64, 16, 256)
#: long-loop (1 × 8 × 16384: few CTAs, hundreds of K/V blocks each): the rate of a block's
#: work where a CTA's fixed costs no longer count, which the two shapes above extrapolate to
REFERENCE_LOOP = (1, 8, 16384)
#: tiles our Triton kernel also runs the long-loop reference at (its users choose tiles): its
#: efficiency at each, against the model with the CTA overhead of its default tiles
TRITON_TILES = ((64, 64), (128, 64))
SDPA_HEAD_DIMS = (64, 96, 128, 256)
SDPA_FIT_HEAD_DIMS = (64, 128, 256)
SDPA_SHAPES = (
    *((*REFERENCE_LONG, d, False) for d in SDPA_HEAD_DIMS),
    *((*REFERENCE_SHORT, d, False) for d in SDPA_FIT_HEAD_DIMS),
    *((*REFERENCE_LOOP, d, False) for d in SDPA_FIT_HEAD_DIMS),
    *((*REFERENCE_LONG, d, True) for d in SDPA_FIT_HEAD_DIMS),
)
#: head dims no kernel is built for, run by the next built one with its padded columns masked
#: (FlashAttention-2's ``Is_even_K`` false): the long reference at each, against the built head
#: dim it runs at, gives what the masking costs (validation/h200/probe-4: d = 40 and 48 take
#: 1.17x as long as d = 64 on FlashAttention-2's d = 64 kernel)
UNEVEN_HEAD_DIMS = (48, 80, 112)
UNEVEN_IMPLS = ("sdpa-flash", "sdpa-cudnn", "sdpa-efficient")
#: implementations whose kernel for a head dim memmodel does not model (measured, not fitted):
#: the memory-efficient kernel above d = 128 accumulates O in global memory
SDPA_SKIP = {("sdpa-efficient", 256)}
#: decoding references, (batch, heads, kv heads, d) at two K/V lengths each: batch 1 splits
#: K/V 28 ways on 132 SMs, batch 8 four ways; the slope gives the per-CTA streaming rate, the
#: intercepts at two split counts the combine kernel's fixed and per-split cost. At each head
#: dim the kernels have (a CTA's tile, and so the bytes it keeps in flight, grows with d); the
#: lengths scale as 1/d so every head dim streams the same bytes.
DECODE_HEAD_DIMS = (64, 128, 256)
DECODE_REFERENCES = tuple(
    ((b, 32, 8, d), tuple(n * 128 // d for n in lengths))
    for d in DECODE_HEAD_DIMS
    for b, lengths in ((1, (49152, 98304)), (8, (12288, 24576)))
)
DECODE_IMPLS = ("sdpa-flash", "sdpa-cudnn")
#: split prefill references, (batch, heads, n), non-causal, fp16, at :data:`SDPA_FIT_HEAD_DIMS`:
#: FlashAttention-2 splits K/V when batch × heads × Q blocks of 64 under-fill the SMs. On 132
#: SMs, 1 × 6 × 2048 splits 4 ways (768 CTAs: three waves of short chunks), 1 × 2 × 4096 two
#: ways (256 CTAs: one wave of long chunks): the split kernel's cost per CTA and per block, and
#: the combine kernel's at 12288 and 8192 rows. Each kernel is timed on its own (CUPTI).
SPLIT_REFERENCES = ((1, 6, 2048), (1, 2, 4096))
SPLIT_IMPLS = ("sdpa-flash",)
#: the sustained-clock step (the last one: its heat would slow whatever came after it): each
#: implementation's long reference at this head dim, run back to back after an idle GPU; its
#: rate from SUSTAINED_SETTLED_FROM_S of busy time on, over its first calls' rate
SUSTAINED_IMPLS = ("sdpa-flash", "sdpa-cudnn", "sdpa-efficient", "triton")
SUSTAINED_HEAD_DIM = 128
SUSTAINED_SETTLED_FROM_S = 0.3
#: the first calls (their median is the rate before the clocks fall)
SUSTAINED_FIRST_CALLS = 5
#: three calls in a row this much slower than the first ones mark the clocks' fall
SUSTAINED_ONSET_RISE = 0.02
#: the training step's references: dropout probability, and the scores of the dropout and
#: elementwise-gradient kernels (fp16)
DROPOUT_P = 0.1
SCORES_BYTES = 512 * 2**20
#: GQA reduction reference: (batch, n_kv, kv heads, group, d), fp16 (not a validation shape)
GROUP_SUM_SHAPE = (4, 4096, 8, 4, 128)


# ---------------------------------------------------------------------------------------
# The knee of the L2 capacity curve


@frozen
class Knee:
    """Where a bandwidth-vs-size curve falls from its plateau toward its floor."""

    bytes: float | None  # None: the curve does not fall within the sizes measured
    plateau_bytes_per_s: float
    floor_bytes_per_s: float
    threshold_bytes_per_s: float
    fraction: float


def find_knee(
    sizes: Sequence[float],
    rates: Sequence[float],
    *,
    fraction: float = 0.5,
    plateau: float | None = None,
    floor: float | None = None,
) -> Knee:
    """The size at which ``rates`` falls below ``floor + fraction × (plateau − floor)``.

    ``plateau`` defaults to the median rate of the smallest quarter of sizes (at least three
    points), ``floor`` to the rate at the largest size. The
    crossing taken is the *last* one (the last point at or above the threshold and the next
    below it), interpolated linearly in size, so a noisy dip on the plateau is not mistaken for
    the knee. ``bytes`` is None when the curve never falls that far (no point after the last
    one at or above the threshold), or when plateau and floor are within a tenth of each other.
    """
    if len(sizes) != len(rates) or len(sizes) < 2:
        raise ValueError("find_knee needs at least two (size, rate) points of equal count")
    if not 0 < fraction < 1:
        raise ValueError("fraction must be between 0 and 1")
    pts = sorted(zip(sizes, rates))
    xs = [float(x) for x, _ in pts]
    ys = [float(y) for _, y in pts]
    top = statistics.median(ys[: max(3, len(ys) // 4)]) if plateau is None else float(plateau)
    bottom = ys[-1] if floor is None else float(floor)
    threshold = bottom + fraction * (top - bottom)
    knee: float | None = None
    if top > 1.1 * bottom:
        above = [i for i, y in enumerate(ys) if y >= threshold]
        if above and above[-1] < len(ys) - 1:
            j = above[-1]
            x0, x1, y0, y1 = xs[j], xs[j + 1], ys[j], ys[j + 1]
            knee = x0 + (y0 - threshold) / (y0 - y1) * (x1 - x0) if y0 != y1 else x0
    return Knee(knee, top, bottom, threshold, fraction)


#: Where a bandwidth-vs-size curve's knee is read: the last size still this share of the way from
#: its floor up to its plateau.
KNEE_FRACTION = 0.9


def knee_summary(points: Sequence[Mapping[str, float]], hbm_read: float | None = None) -> dict[str, Any]:
    """The knee (where the curve has fallen a tenth of the way to its floor) and the half-way point."""
    sizes = [pt["bytes"] for pt in points]
    rates = [pt["bytes_per_s"] for pt in points]
    knee = find_knee(sizes, rates, fraction=KNEE_FRACTION)
    half = find_knee(sizes, rates, fraction=0.5)
    return {
        "plateau_bytes_per_s": knee.plateau_bytes_per_s,
        "floor_bytes_per_s": knee.floor_bytes_per_s,
        "hbm_read_bytes_per_s": hbm_read,
        "knee_bytes": knee.bytes,
        "half_drop_bytes": half.bytes,
        "method": "Triton .cg reads by all SMs over buffers of 8 MB .. 2 x L2, each block read once per pass by a "
        f"program far from last pass's reader; knee = last size where the bandwidth is still {round(KNEE_FRACTION * 100)} % "
        "of the way from "
        "its level at 2 x L2 up to the plateau (median of the smallest quarter of sizes), interpolated",
    }
