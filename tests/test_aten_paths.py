"""ATen's elementwise kernel paths (validation/h200/aten-paths): the figures fitted from the
microbenchmark, the profile's lookups, and where the trace and the math fallback use them."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memmodel.calibration import aten_paths
from memmodel.hardware import load_profile
from memmodel.timing import kernel_time
from memmodel.traffic import l2 as l2m
from memmodel.traffic.mla import math_fallback_kernels
from memmodel.workload import Workload

ROOT = Path(__file__).resolve().parents[1]
H200 = load_profile("h200")
RATES = H200.kernel_rates


def lines(record: str) -> list[dict]:
    return [json.loads(line) for line in gzip.open(ROOT / record, "rt") if line.strip()]


# ---------------------------------------------------------------------------------------
# The fit


def test_figures_from_the_record():
    first, second = lines(aten_paths.RECORD), lines(aten_paths.RECORD_2)
    # bf16 -> fp32: 33.55M elements, 201.3 MB read + written in 99.6 us (2.021 TB/s); fp16 -> fp32
    # 2.047 TB/s: the median 2.034 TB/s
    assert aten_paths.cast_rate(first) == pytest.approx(2.034e12)
    # a transposed pair of bf16 (run 1): 268.4 MB in 420.5 us; runs of 256: 1.568 TB/s
    two = aten_paths.gather_curve(first, "bf16")
    assert two[1] == pytest.approx(0.6384e12) and two[256] == pytest.approx(1.568e12)
    assert sorted(two) == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    four = aten_paths.gather_curve(first, "fp32")
    assert four[512] == pytest.approx(2.561e12)
    # every run of fp32 moves more bytes a second than bf16's at the same run (fewer elements)
    assert all(four[r] > two[r] for r in two)
    # the fp32 softmax at 1024 keys: 268.4 MB in 67.0 us
    assert aten_paths.softmax_curve(first)[1024] == pytest.approx(4.004e12)
    # cat of the strided half, 4096 tokens: 2 x 16.8 MB (d 64) in 34.5 us, 2 x 33.6 MB (d 128) in
    # 70.7 us: 0.9727 and 0.9492 TB/s, the median 0.9606
    assert aten_paths.cat_rate(second) == pytest.approx(0.9606e12)
    # the warp softmax over 132 bf16 rows of 2048: 8.0 us, the longest of 1, 32 and 132 rows
    assert aten_paths.row_floor(second, "bf16")[2048] == pytest.approx(8.0e-6)


def test_the_profile_carries_the_fit():
    assert RATES.cast_bytes_per_s == pytest.approx(2.034e12)
    assert RATES.cat_bytes_per_s == pytest.approx(0.9606e12)
    assert dict(RATES.softmax_row_floor_s)[2048] == pytest.approx(8.0e-6)
    assert "measured-aten-paths" in H200.sources and "measured-aten-paths-2" in H200.sources


def test_apply_without_the_second_run_keeps_the_first_runs_figures():
    data = aten_paths.apply({}, lines(aten_paths.RECORD))
    assert set(data["kernels"]) == {"cast", "gather", "softmax"}
    assert "cat_bandwidth" not in data["kernels"]["gather"] and "row_floor" not in data["kernels"]["softmax"]
    assert aten_paths.apply({}, []) == {}


# ---------------------------------------------------------------------------------------
# Lookups


def test_gather_rate_by_element_size_and_run():
    assert RATES.gather_rate(1, 2) == pytest.approx(0.6384e12)
    assert RATES.gather_rate(1, 4) == pytest.approx(1.12e12)
    assert RATES.gather_rate(10**6, 8) == pytest.approx(2.561e12)  # past the curve: its end
    both = RATES.gather_rate(np.array([1, 1]), np.array([2, 4]))
    assert both.tolist() == pytest.approx([0.6384e12, 1.12e12])


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 1 << 20), st.sampled_from([2, 4]))
def test_gather_rate_never_exceeds_a_copy(run, element):
    assert 0 < RATES.gather_rate(run, element) < RATES.copy_bytes_per_s


def test_softmax_floor_takes_its_kernel_s_side():
    # 3000 keys run the block kernel: its 4096 figure (2.913 us), not a blend with the warp's 8 us
    assert RATES.softmax_floor(3000) == pytest.approx(2.913e-6)
    assert RATES.softmax_floor(1536) == pytest.approx(np.interp(np.log2(1536), [10, 11], [4.48e-6, 8.0e-6]))
    assert RATES.softmax_floor(2048, 4) == pytest.approx(6.753e-6)
    # past the curve: the wave of long rows (row_time, 18.85 us)
    assert RATES.softmax_floor(32768) == pytest.approx(RATES.softmax_row_time_s)


# ---------------------------------------------------------------------------------------
# Where the model uses them


def test_math_fallback_copies_take_the_generic_paths():
    w = Workload(n=1, n_kv=8192, d=576, d_v=512, batch=8, heads=16, kv_heads=1, dtype="bf16")
    ks = {k.name: k for k in math_fallback_kernels(w, l2m.L2("off", 0.0, 1))}
    assert [ks[n].op for n in ("cast_q", "cast_k", "cast_v", "expand_k", "expand_v")] == [
        "cast",
        "cast",
        "gather",
        "expand",
        "expand",
    ]
    assert ks["cast_v"].run == 512 and ks["softmax"].element_bytes == 4
    # K copied to 16 heads in fp32: 8·16·8192·576·4 = 2,415,919,104 bytes written; twice that at
    # the fp32 expanded copy's 3.041 TB/s: 1.589 ms (measured in h200-mla-check: 780 + 777 us)
    expand = kernel_time(ks["expand_k"], H200, "bf16")
    assert expand.terms["hbm"] == pytest.approx(2 * 2415919104 / 3.041e12)
    # its 2.4 GB span 2^31 bytes: ATen splits it into two launches (the record's two kernels)
    assert int(ks["expand_k"].launches) == 2 and int(ks["expand_v"].launches) == 1
    # the widening cast of K: 75.5 MB read + 151 MB written at 2.034 TB/s
    cast = kernel_time(ks["cast_k"], H200, "bf16")
    assert cast.terms["hbm"] == pytest.approx((8 * 8192 * 576 * 6) / 2.034e12)


def test_trace_classifies_copies_casts_and_cats():
    pytest.importorskip("torch")
    import torch

    from memmodel import trace

    def layer(x, k):
        up = x.float()  # a widening cast: element by element
        down = up.to(torch.bfloat16)  # narrowing: vectorised, a copy's rate
        q = x.view(1, 64, 8, 32).transpose(1, 2)  # (1, 8, 64, 32), strided
        rot = torch.cat((-q[..., 16:], q[..., :16]), dim=-1)  # cat of a strided half
        kk = k[:, :, None].expand(1, 2, 4, 64, 32).reshape(1, 8, 64, 32)  # GQA's repeat_kv
        mask = torch.triu(torch.full((64, 64), -10000.0), 1)
        s = torch.softmax(rot @ kk.transpose(-2, -1) + mask, dim=-1)
        return down, s

    t = trace(layer, {"x": (1, 64, 256), "k": (1, 2, 64, 32)}, dtype="bf16", profile="h200")
    ops = {k.name: k for k in t.traffic.kernels}
    assert ops["_to_copy"].op == "cast" and ops["_to_copy#2"].op == "copy"
    assert ops["cat"].op == "cat" and ops["cat"].run == 16
    assert ops["clone"].op == "expand"
    # the -10000 fill marks what it is added to: the softmax takes the masked curve
    assert ops["_softmax"].masked_input


def test_a_strided_head_times_a_number_takes_the_generic_path():
    pytest.importorskip("torch")
    from memmodel import trace

    def scaled(qkv):
        q = qkv.reshape(2, 197, 3, 12, 64).permute(2, 0, 3, 1, 4)[0]  # ViT's query heads: a strided view
        return q * 0.125, qkv * 0.125

    t = trace(scaled, {"qkv": (2, 197, 2304)}, dtype="bf16", profile="h200")
    ops = {k.name: k for k in t.traffic.kernels}
    # the output keeps the view's order (token, head, d): each token's 12 × 64 query elements are
    # contiguous in qkv, the next token's 3 × 768 further on: ATen's generic kernel, runs of 768
    assert (ops["mul"].op, ops["mul"].run) == ("gather", 768)
    assert ops["mul#2"].op == "scale"  # the contiguous tensor: the vectorised kernel


# ---------------------------------------------------------------------------------------
# memmodel calibrate measures them too


def test_calibrate_has_the_step_and_its_figures_reach_the_profile():
    from memmodel.calibration.figures import measured_figures
    from memmodel.gpu.calibrate import STEPS

    assert "aten_paths" in [s.key for s in STEPS]
    rows = lines(aten_paths.RECORD) + lines(aten_paths.RECORD_2)
    found = measured_figures({"measurements": {"aten_paths": {"lines": rows}}})
    assert set(aten_paths.FIRST_FIELDS + aten_paths.SECOND_FIELDS) <= set(found)
    assert found["kernels.cast.bandwidth"][0] == "2.034 TB/s"
    # one run without the second run's sections: the first six fields only
    assert set(aten_paths.figures(lines(aten_paths.RECORD))) == set(aten_paths.FIRST_FIELDS)


def test_the_step_runs_on_the_cpu_and_its_rows_fit(monkeypatch):
    torch = pytest.importorskip("torch")
    from memmodel.calibration import plan as planmod
    from memmodel.gpu import calibrate_aten
    from memmodel.gpu.measure import Context

    small = 1 << 16  # the probe's 2^27 bytes, cut for the CPU
    monkeypatch.setattr(aten_paths, "LARGE", small)
    monkeypatch.setattr(calibrate_aten, "LARGE", small)
    monkeypatch.setattr(calibrate_aten, "FLOOR_LENGTHS", (256, 4096))
    import dataclasses

    info = planmod.DeviceInfo("cpu", 4, 1 << 20, 1 << 30, None, (0, 0))
    plan = dataclasses.replace(planmod.make_plan(info, quick=True))
    assert plan.quick
    ctx = Context(torch=torch, kernels=None, info=None, plan=plan, timer=None, device="cpu")
    rows = calibrate_aten.measure_aten_paths(ctx)["lines"]
    sections = {r["section"] for r in rows}
    assert sections == {"cast", "gather", "shaped", "strided_cat", "softmax", "few_rows"}
    # every row timed by the kernels the profiler saw, bytes as the fit reads them
    assert all(r["kernels"] and r["read_bytes"] > 0 and r["write_bytes"] > 0 for r in rows)
    assert sorted(r["run"] for r in rows if r["section"] == "gather" and r["dtype"] == "bf16") == [1, 4, 32, 512]
    found = aten_paths.figures(rows)
    assert set(found) == set(aten_paths.FIRST_FIELDS + aten_paths.SECOND_FIELDS)


def test_a_bias_gradient_is_a_column_reduction():
    pytest.importorskip("torch")
    from memmodel import trace

    def grads(dout):
        return dout.sum(0), dout.sum(-1)

    t = trace(grads, {"dout": (3152, 2304)}, dtype="bf16", profile="h200")
    ops = {k.name: k for k in t.traffic.kernels}
    assert (ops["sum"].op, int(ops["sum"].rows)) == ("column_reduction", 3152)
    assert ops["sum#2"].op == "reduction"  # a row's sum: the other kernel
    rates = load_profile("h200").kernel_rates
    fixed = dict(rates.small_column_reduction_s)
    # 3152 rows measured: its fixed part plus 3152 × 2304 × 2 B at the column rate
    expected = fixed[3152] + 3152 * 2304 * 2 / rates.column_reduction_bytes_per_s
    assert rates.column_reduction_time(3152, 3152 * 2304 * 2) == pytest.approx(expected, rel=1e-12)
    assert fixed[128] < fixed[512]  # a few rows: one pass; more: the kernel's own steps
