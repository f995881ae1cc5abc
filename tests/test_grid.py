"""One arithmetic path: a grid (a workload whose fields are arrays) gives, row by row, what a
call for that row alone gives."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from memmodel import intmath


@settings(max_examples=200, deadline=None)
@given(
    value=st.integers(0, 2**62),
    num=st.integers(0, 2**40),
    den=st.integers(1, 2**40),
)
def test_scaled_floors_alike_for_scalars_and_arrays(value, num, den):
    expected = value * num // den
    if expected >= 2**63:
        with pytest.raises(OverflowError):
            intmath.scaled(np.array([value]), np.array([num]), np.array([den]))
        return
    assert intmath.scaled(value, num, den) == expected
    out = intmath.scaled(np.array([value, 0]), np.array([num, num]), np.array([den, den]))
    assert out.dtype == np.int64 and out.tolist() == [expected, 0]


def test_scaled_floors_where_rounding_would_round_up():
    # 7 · 2 / 3 = 4.67: floored to 4 for one value and for an array (rounding gave 5)
    assert intmath.scaled(7, 2, 3) == 4
    assert intmath.scaled(np.array([7]), 2, 3).tolist() == [4]
    # past 2^53 a float product loses the last bits; the split by den keeps them
    big = 2**61 + 12_345
    assert intmath.scaled(np.array([big]), 3, 4).tolist() == [big * 3 // 4]


def test_scaled_by_a_ratio_of_one_is_the_value_as_a_new_array():
    # ⌊v · n / n⌋ = v: the visited share of a kernel that visits every pair
    pairs = np.array([4, 6, 9])
    value = np.array([10, 11, 12])
    out = intmath.scaled(value, pairs, pairs)
    assert out.tolist() == [10, 11, 12] and out.dtype == np.int64 and out is not value
    assert intmath.scaled(np.array([5]), pairs, pairs).tolist() == [5, 5, 5]  # broadcast as before


@settings(max_examples=200, deadline=None)
@given(
    factors=st.lists(
        st.one_of(st.integers(0, 2**21), st.lists(st.integers(0, 2**21), min_size=3, max_size=3)),
        min_size=1,
        max_size=5,
    ),
)
def test_products_and_sums_of_scalars_and_arrays_are_exact_or_refused(factors):
    # the scalars are folded into one Python int and the arrays multiplied (added) once each:
    # the same integers as one element at a time, or OverflowError past int64
    assume(any(isinstance(f, list) for f in factors))
    args = [np.array(f, dtype=np.int64) if isinstance(f, list) else f for f in factors]
    for op, reduce in ((intmath.mul, lambda xs: np.prod(xs, dtype=object)), (intmath.add, sum)):
        expected = [int(reduce([f[i] if isinstance(f, list) else f for f in factors])) for i in range(3)]
        if max(expected) >= 2**63:
            with pytest.raises(OverflowError):
                op(*args)
            continue
        out = op(*args)
        assert out.dtype == np.int64 and out.tolist() == expected
        assert all(out is not a for a in args)


def test_overflow_bounds_read_each_array_once_and_stay_above_its_magnitude():
    a = np.array([5, 9, 2**40], dtype=np.int64)
    m = intmath._magnitude(a)
    assert 2**40 <= m < 2**41  # the bitwise or: at least the largest, below twice it
    assert intmath._magnitude(np.array([-7, 3])) == 7  # a negative element: max and min
    assert intmath._magnitude(np.array([], dtype=np.int64)) == 0
    # one array given twice counts twice in a sum's bound, read once
    big = np.array([2**62], dtype=np.int64)
    with pytest.raises(OverflowError):
        intmath.add(big, big)
    with pytest.raises(OverflowError):
        intmath.mul(big, 2)


# ---------------------------------------------------------------------------------------
# compare() on a grid, row by row

import itertools  # noqa: E402

from hypothesis import HealthCheck  # noqa: E402

from memmodel import compare, load_profile  # noqa: E402
from memmodel.errors import WorkloadError  # noqa: E402
from memmodel.implementations import default_by_head_dim, default_for  # noqa: E402
from memmodel.options import options_for  # noqa: E402
from memmodel.workload import Workload  # noqa: E402

PROFILES = {g: load_profile(g) for g in ("a100", "h200")}


def _grid(shape: dict[str, tuple[int, ...]], causal: bool) -> dict[str, np.ndarray]:
    rows = [dict(zip(shape, values)) for values in itertools.product(*shape.values())]
    rows = [r for r in rows if r["heads"] % r["kv_heads"] == 0 and (not causal or r["n_kv"] >= r["n"])]
    return {k: np.array([r[k] for r in rows], dtype=np.int64) for k in shape}


def assert_rows_are_scalar_calls(mesh, gpu, dtype, impl, *, causal=False, dropout=0.0, standard="algorithm0", **opts):
    """compare() on the grid ``mesh`` equals compare() on each of its rows: bytes at every level
    and direction, FLOPs and exponentials exactly; time to rounding; bound; the tiled params."""
    p = PROFILES[gpu]
    extra = {"dtype": dtype, "causal": causal, "dropout": dropout}
    grid = Workload(**mesh, **extra)
    cg = compare(grid, p, options_for(impl, grid, p, **opts), standard=standard)
    for i in range(len(mesh["n"])):
        w = Workload(**{k: int(v[i]) for k, v in mesh.items()}, **extra)
        cs = compare(w, p, options_for(impl, w, p, **opts), standard=standard)
        where = f"row {w.to_dict()}"
        for g, s in ((cg.standard, cs.standard), (cg.tiled, cs.tiled)):
            for level in ("hbm", "l2", "sram"):
                for direction in ("read", "write"):
                    got = np.broadcast_to(g.traffic.bytes(level=level, direction=direction), mesh["n"].shape)[i]
                    assert got == s.traffic.bytes(level=level, direction=direction), (where, g.traffic.name, level)
            assert np.broadcast_to(g.traffic.flops, mesh["n"].shape)[i] == s.traffic.flops, where
            assert np.broadcast_to(g.traffic.exp_ops, mesh["n"].shape)[i] == s.traffic.exp_ops, where
            assert np.broadcast_to(g.timing.time_s, mesh["n"].shape)[i] == pytest.approx(s.timing.time_s, rel=1e-12)
            assert np.broadcast_to(np.asarray(g.timing.bound, dtype=object), mesh["n"].shape)[i] == s.timing.bound
        for key in ("block_q", "block_kv", "ctas_per_sm", "splits", "l2_knee", "l2_cross_wave"):
            if key in cs.tiled.traffic.params:
                got = np.broadcast_to(np.asarray(cg.tiled.traffic.params[key]), mesh["n"].shape)[i]
                assert got == cs.tiled.traffic.params[key], (where, key)
        assert cg.options.implementation == cs.options.implementation


@st.composite
def grid_cases(draw):
    pick = lambda values, k=2: tuple(draw(st.lists(st.sampled_from(values), min_size=1, max_size=k, unique=True)))  # noqa: E731
    gpu = draw(st.sampled_from(("a100", "h200")))
    impl = draw(st.sampled_from(("paper", "sdpa-flash", "sdpa-cudnn", "sdpa-efficient", "triton")))
    tiled = "fa1" if impl == "paper" and draw(st.booleans()) else "fa2"
    # cuDNN takes no causal chunk (fewer queries than keys, bottom-right: tests/test_chunk_causal.py),
    # and every causal row of these meshes but n = 1 is one
    causal = draw(st.booleans()) and impl != "sdpa-cudnn"
    dtype = draw(st.sampled_from(("fp16", "fp32") if impl in ("paper", "sdpa-efficient") else ("fp16",)))
    shape = {
        "n": pick((1, 7, 64, 1000), 3),
        "n_kv": pick((512, 4096)),
        "d": pick((64, 96, 128) + ((256,) if gpu == "h200" and dtype == "fp16" else ())),
        "batch": pick((1, 8)),
        "heads": (8,),
        "kv_heads": pick((1, 2, 8)),
    }
    return dict(
        mesh=_grid(shape, causal),
        gpu=gpu,
        dtype=dtype,
        impl=impl,
        causal=causal,
        dropout=draw(st.sampled_from((0.0, 0.1))),
        standard=draw(st.sampled_from(("algorithm0", "eager"))),
        tiled=tiled,
        backward=draw(st.booleans()),
        l2=draw(st.sampled_from(("on", "cold", "off"))),
    )


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=grid_cases())
def test_a_grid_gives_every_row_what_one_workload_gives(case):
    """Decoding (split-KV, GQA packed into the K/V head's rows) beside prefill, GQA beside MHA
    in the backward pass (the dK/dV group sums), head dims whose tiles, occupancy and shared
    memory reads differ: one array call, row by row the scalar result."""
    mesh, gpu, dtype, impl = (case.pop(k) for k in ("mesh", "gpu", "dtype", "impl"))
    assume(len(mesh["n"]) > 0)  # causal needs n_kv ≥ n
    assert_rows_are_scalar_calls(mesh, gpu, dtype, impl, **case)


def test_kernels_of_some_rows_only():
    """FA2's backward on GQA and MHA rows: the dK/dV group sums run on the GQA rows only (they
    were charged to every row, ~10 % too slow); decoding rows run split-KV, the others not."""
    mesh = _grid(
        {"n": (1, 2048), "n_kv": (4096,), "d": (128,), "batch": (1,), "heads": (8,), "kv_heads": (2, 8)}, False
    )
    for impl in ("sdpa-flash", "paper"):
        assert_rows_are_scalar_calls(mesh, "h200", "fp16", impl, backward=True)
        assert_rows_are_scalar_calls(mesh, "h200", "fp16", impl)
    # the memory-efficient backward keeps dK, dV in registers up to d = 128 only; its forward
    # fixes no occupancy above d = 128
    mesh = _grid({"n": (1000,), "n_kv": (1000,), "d": (64, 256), "batch": (1,), "heads": (8,), "kv_heads": (8,)}, False)
    assert_rows_are_scalar_calls(mesh, "h200", "fp16", "sdpa-efficient", backward=True)
    # given splits: the split kernel's blocks by each row's head dim
    mesh = _grid({"n": (1,), "n_kv": (4096,), "d": (64, 256), "batch": (1,), "heads": (8,), "kv_heads": (2,)}, False)
    assert_rows_are_scalar_calls(mesh, "h200", "fp16", "sdpa-flash", splits=4)


def test_cudnn_sm100_rows_split_as_each_would_alone():
    """cuDNN on Blackwell: prefill rows at its 256-row tiles split by its own rule (the forward
    kernel's chunks and cudnn_combine) beside decoding rows (FlashAttention-2's split-KV kernel
    stands in) and rows at d 256 (128-row tiles): each row what it gives alone."""
    PROFILES.setdefault("gb200", load_profile("gb200"))
    mesh = _grid(
        {"n": (1, 985, 4096), "n_kv": (62208,), "d": (128, 256), "batch": (1,), "heads": (9,), "kv_heads": (9, 3)},
        False,
    )
    assert_rows_are_scalar_calls(mesh, "gb200", "bf16", "sdpa-cudnn")
    assert_rows_are_scalar_calls(mesh, "gb200", "bf16", "sdpa-cudnn", backward=True)


def test_auto_refuses_a_grid_of_head_dims_pytorch_runs_apart():
    p = PROFILES["h200"]
    w = Workload(n=1024, d=np.array([64, 128, 256]), dtype="fp32")
    # fp32 on a Hopper GPU: the memory-efficient kernel up to d = 128; above, its variant
    # that memmodel does not model
    assert {d: impl for d, (impl, _) in default_by_head_dim(w, p).items()} == {
        64: "sdpa-efficient",
        128: "sdpa-efficient",
        256: "paper",
    }
    with pytest.raises(WorkloadError, match=r"different kernels for the head dims of this grid \(d=64: sdpa-eff"):
        default_for(w, p)
    assert default_for(w.with_(d=np.array([64, 128])), p)[0] == "sdpa-efficient"
    assert default_for(Workload(n=1024, d=np.array([64, 256]), dtype="fp16"), p)[0] == "sdpa-cudnn"
