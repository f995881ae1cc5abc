"""ATen's small kernels and cuBLAS' split-K products (validation/h200/tiny-ops): the floors fitted
from the microbenchmark, the profile's lookups, the timing's floor term, and the trace's split-K
reduction kernels."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memmodel.calibration import small_kernels
from memmodel.hardware import load_profile
from memmodel.timing import kernel_time
from memmodel.tracing.kernels import SPLITK_MIN_INNER, splits_k
from memmodel.traffic.ledger import KernelBuilder

ROOT = Path(__file__).resolve().parents[1]
H200 = load_profile("h200")
RATES = H200.kernel_rates
LAUNCH = H200.launch_overhead_s


def lines() -> list[dict]:
    return [json.loads(line) for line in gzip.open(ROOT / small_kernels.RECORD, "rt") if line.strip()]


def test_figures_from_the_record():
    rows = lines()
    # a widening cast at 4096 to 262144 elements ran 2.016, 2.08, 2.176 and 2.368 us (CUPTI): the
    # median of the middle two, 2.128 us
    assert small_kernels.path_floor(rows, "cast") == pytest.approx(2.128e-6)
    # the fp32 mean of one row of 4096 ran 2.143 us; sixteen rows or more about 7.2 us however few
    curve = small_kernels.reduction_floor(rows, "mean last dim fp32 (reduction)")
    assert curve[1] == pytest.approx(2.143e-6) and curve[16] == pytest.approx(7.168e-6)
    assert sorted(curve) == [1, 4, 16, 64, 256]
    # the generic kernel's floor is about twice the vectorised one's
    vec, gen = (small_kernels.path_floor(rows, p) for p in ("vectorised", "generic"))
    assert vec == pytest.approx(0.928e-6) and gen == pytest.approx(1.824e-6)
    # the 22 splitKreduce kernels' durations: the median 1.6 us
    assert small_kernels.splitk_floor(rows) == pytest.approx(1.6e-6)
    # GPT-2's projections of 1 to 64 rows: 3.10, 3.01, 3.10, 3.39 and 3.74, 3.71, 3.01, 3.14 us, the
    # median of the middle two 3.12 us
    assert small_kernels.gemm_floor(rows) == pytest.approx(3.12e-6)
    assert RATES.small_floor("gemm") == pytest.approx(3.12e-6)
    # the third run: F.dropout's kernel at 1 to 65536 elements ran 1.471, 1.312, 1.407, 1.535 and
    # 1.697 us: the median 1.471 us
    third = [json.loads(line) for line in gzip.open(ROOT / small_kernels.RECORD_3, "rt") if line.strip()]
    assert small_kernels.path_floor(third, "dropout") == pytest.approx(1.471e-6)
    assert RATES.small_floor("dropout") == pytest.approx(1.471e-6)


def test_the_split_k_rule_matches_every_product_the_probe_ran():
    products = small_kernels.split_products(lines())
    # split: q/o of both models at 1 to 16 rows (3 + 3), k/v and down at every row count (4 × 4)
    assert len(products) == 40 and sum(split for *_, split in products) == 22
    for rows, inner, cols, split in products:
        assert (splits_k(1, rows, cols, inner, 132) > 1) == split, (rows, inner, cols)


def test_the_profile_carries_the_fit():
    assert RATES.small_cast_s == pytest.approx(2.128e-6)
    assert dict(RATES.small_reduction_fp32_s)[16] == pytest.approx(7.168e-6)
    assert RATES.small_floor("scale") == RATES.small_vectorised_s
    assert RATES.small_floor("gather") == RATES.small_generic_s
    assert RATES.small_floor("softmax") is None  # its own floor (kernels.softmax.row_floor)
    # a reduction's floor by the elements it writes: 4 rows of fp32 lie between 1 and 16
    assert (
        dict(RATES.small_reduction_fp32_s)[1]
        < RATES.small_floor("reduction", 4, 4)
        < RATES.small_floor("reduction", 4, 16)
    )
    assert RATES.small_floor("reduction", 2, 1) == pytest.approx(dict(RATES.small_reduction_s)[1])


def _scale_kernel(elements: int, op: str = "scale"):
    k = KernelBuilder("x", "forward")
    k.read("x", "input", elements * 2, elements * 2, "n·2")
    k.write("y", "output", elements * 2, "n·2")
    return k.build(op=op, softmax_flops=elements)


def test_a_tiny_kernel_takes_its_floor():
    # 4096 bf16 elements: 16 kB, a few nanoseconds of bandwidth: the launch overhead plus the floor
    t = kernel_time(_scale_kernel(4096), H200, "bf16")
    assert t.time_s == pytest.approx(LAUNCH + RATES.small_vectorised_s) and t.bound == "floor"
    t = kernel_time(_scale_kernel(4096, "gather"), H200, "bf16")
    assert t.time_s == pytest.approx(LAUNCH + RATES.small_generic_s)


@settings(max_examples=40, deadline=None)
@given(st.integers(min_value=1, max_value=1 << 28), st.sampled_from(["scale", "copy", "gather", "cast"]))
def test_the_floor_only_ever_lengthens_a_kernel(elements, op):
    t = kernel_time(_scale_kernel(elements, op), H200, "bf16")
    floor = RATES.small_floor(op)
    assert t.time_s >= LAUNCH + floor - 1e-15
    others = max(v for k, v in t.terms.items() if k not in ("floor", "launch"))
    assert t.time_s == pytest.approx(LAUNCH + max(others, floor))


@settings(max_examples=60, deadline=None)
@given(
    st.integers(min_value=1, max_value=4096),
    st.integers(min_value=1, max_value=65536),
    st.integers(min_value=1, max_value=65536),
    st.integers(min_value=1, max_value=8),
)
def test_splits_k_properties(rows, cols, inner, batch):
    s = splits_k(batch, rows, cols, inner, 132)
    assert s >= 1
    if batch > 1 or inner < SPLITK_MIN_INNER:
        assert s == 1
    if s > 1:
        assert 2 <= s <= inner // 256
        # more rows never make a split product of fewer tiles split more
        assert splits_k(batch, rows * 2, cols, inner, 132) <= max(s, 2)


def test_a_one_row_projection_traces_to_a_split_product_and_its_reduction():
    pytest.importorskip("torch")
    import torch.nn.functional as F

    from memmodel import trace

    def proj(x, w):
        return F.linear(x, w)

    one = trace(proj, {"x": (1, 4096), "w": (4096, 4096)}, dtype="bf16", profile="h200")
    assert [k.name for k in one.traffic.kernels] == ["mm", "mm.reduce"]
    reduce = one.traffic.kernels[1]
    # the partials: splits × 4096 fp32 read back from L2, the 4096 bf16 outputs written
    assert reduce.splits == 3 and reduce.bytes(level="l2", direction="read") == 3 * 4096 * 4
    assert one.timing.kernels[1].time_s == pytest.approx(LAUNCH + RATES.small_splitk_reduce_s)
    many = trace(proj, {"x": (64, 4096), "w": (4096, 4096)}, dtype="bf16", profile="h200")
    assert [k.name for k in many.traffic.kernels] == ["mm"]


def test_the_floors_carry_over_in_cycles_and_only_to_the_same_vendor():
    """Times, not rates: another NVIDIA GPU's floors are the H200's cycles at its own clock (the
    HBM-share rule of the library rates would shorten them on a GPU of less bandwidth); an AMD GPU
    runs other kernels and takes none."""
    for name in ("h100-sxm", "a100", "b200"):
        other = load_profile(name)
        clocks = H200.figures["clock"] / other.figures["clock"]
        assert other.kernel_rates.small_generic_s == pytest.approx(RATES.small_generic_s * clocks, rel=1e-3)
        assert other.provenance["kernels.small.generic"].kind == "derived"
    assert load_profile("mi300x").kernel_rates.small_floor("scale") is None


def test_cudnn_launches_its_memset_before_a_prefill_only():
    """Every cuDNN prefill forward of the records launched one memset before its kernel, no decode
    did (split or not: a decode's GQA group packed as rows is still a decode), every training step
    one more before its backward."""
    from memmodel import Workload, compare

    def names(**kw):
        w = Workload(n_kv=4096, heads=32, kv_heads=8, d=128, dtype="bf16", **kw)
        return [
            k.name for k in compare(w, H200, impl="sdpa-cudnn", backward=bool(kw.get("n", 1) > 1)).tiled.traffic.kernels
        ]

    assert names(n=1, batch=64) == ["fa2_splitkv"]  # its decode kernel, unsplit: no combine
    assert names(n=1, batch=1) == ["fa2_splitkv", "fa2_combine"]
    prefill = names(n=4096, batch=1)
    assert prefill[:2] == ["cudnn_zero", "fa2_fwd"] and prefill.count("cudnn_bwd_zero") == 1
