from __future__ import annotations

import csv
import io
import json
import os
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from memmodel import Workload, compare, load_profile
from memmodel.errors import WorkloadError
from memmodel.sweep import MAX_CONFIGURATIONS, SWEEP_COLUMNS, Grid, evaluate, parse_values

from .conftest import HARDWARE, REPO


@pytest.mark.parametrize(
    ("text", "values"),
    [
        ("4096", (4096,)),
        ("64,128", (64, 128)),
        ("512:65536:x2", (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)),
        ("512:4096:+512", (512, 1024, 1536, 2048, 2560, 3072, 3584, 4096)),
        ("512:5000:x4", (512, 2048)),  # the stop is included only when reached
        ("100:400:x1.5", (100, 150, 225, 338)),  # 100·1.5³ = 337.5, rounded
        ("64,96:256:+32,64", (64, 96, 128, 160, 192, 224, 256)),  # duplicates dropped, order kept
        (" 8 , 16 ", (8, 16)),
    ],
)
def test_grid_syntax(text, values):
    assert parse_values(text, "n") == values


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("abc", "n: cannot read 'abc' in 'abc'; use N, a list A,B,C, START:STOP:xFACTOR"),
        ("512:65536", "cannot read '512:65536'"),
        ("512:65536:y2", "cannot read '512:65536:y2'"),
        ("64,,128", "cannot read ''"),
        ("", "cannot read ''"),
        ("4096:512:x2", "must run upwards"),
        ("512:4096:x1", "factor of '512:4096:x1' must be greater than 1"),
        ("512:4096:+0", "step of '512:4096:+0' must be a positive integer"),
        ("512:4096:+1.5", "step of '512:4096:+1.5' must be a positive integer"),
        ("0", "0 in '0' is not a positive integer"),
        ("1:2000000:+1", "has more than 1,000,000 values"),
    ],
)
def test_grid_syntax_errors(text, message):
    with pytest.raises(WorkloadError, match=re.escape(message)):
        parse_values(text, "n")


def test_grid_size_limit():
    Grid(n="1:1000000:+1", d="64:640:+64", dtypes="fp16")  # 10 × 1,000,000 = the limit: accepted
    with pytest.raises(WorkloadError, match="the grid has 11,000,000 configurations .* the limit is 10,000,000"):
        Grid(n="1:1000000:+1", d="64:704:+64", dtypes="fp16")
    assert MAX_CONFIGURATIONS == 10_000_000


def test_sweep_rows_match_scalar_compare_calls():
    p = load_profile("a100")
    grid = Grid(n=(100, 1000, 4096), d=(64, 128), batch=(1, 3), heads=(8,), kv_heads=(2, 8), dtypes=("fp16", "fp32"))
    result = evaluate(grid, {"a100": p})
    rows = list(result.rows())
    assert len(rows) == 2 * grid.size == 2 * 3 * 2 * 2 * 2 * 2
    assert [r["algorithm"] for r in rows[:4]] == ["standard", "tiled", "standard", "tiled"]
    # n varies fastest, then kv_heads, heads, batch, d; then dtype
    assert [r["n"] for r in rows[:6:2]] == [100, 1000, 4096]
    for std, til in zip(rows[0::2], rows[1::2]):
        w = Workload(
            n=std["n"], d=std["d"], batch=std["batch"], heads=std["heads"], kv_heads=std["kv_heads"], dtype=std["dtype"]
        )
        one = compare(w, p)
        for row, ev in ((std, one.standard), (til, one.tiled)):
            for level in ("hbm", "l2", "sram"):
                assert row[f"{level}_read_bytes"] == ev.traffic.bytes(level=level, direction="read")
                assert row[f"{level}_write_bytes"] == ev.traffic.bytes(level=level, direction="write")
                assert row[f"{level}_bytes"] == ev.traffic.bytes(level=level)
            assert row["flops"] == ev.traffic.flops and row["exp_ops"] == ev.traffic.exp_ops
            assert row["predicted_time_s"] == pytest.approx(ev.timing.time_s, rel=1e-12)
            assert row["bound"] == ev.timing.bound
            assert row["variant"] == ev.traffic.variant
            for key, value in one.ratios().items():
                assert row[f"ratio_{key}"] == pytest.approx(value, rel=1e-12)
        assert (std["block_q"], std["block_kv"]) == (None, None)
        assert (til["block_q"], til["block_kv"]) == (
            one.tiled.traffic.params["block_q"],
            one.tiled.traffic.params["block_kv"],
        )


def test_a_large_grid_is_chunked_and_still_exact():
    import memmodel.sweep as sw

    p = load_profile("a100")
    n_max = sw.CHUNK + 5000
    result = evaluate(Grid(n=f"1:{n_max}:+1", d=(64,), dtypes=("fp16",)), {"a100": p})
    assert len(result) == 2 * n_max
    for i in (0, 2 * (sw.CHUNK - 1), 2 * sw.CHUNK + 1, 2 * n_max - 1):  # around the chunk boundary
        row = next(result.rows(i, i + 1))
        one = compare(Workload(n=row["n"], d=64, dtype="fp16"), p)
        ev = one.standard if row["algorithm"] == "standard" else one.tiled
        assert row["hbm_bytes"] == ev.traffic.hbm_bytes and row["bound"] == ev.timing.bound


def test_worker_processes_give_the_same_result():
    p = {"a100": load_profile("a100"), "h200": load_profile("h200")}
    grid = Grid(n="64:65536:+64", d=(64, 128), heads=(8, 32), dtypes=("fp16", "fp32"), gpus=("a100", "h200"))
    one = evaluate(grid, p, workers=1)
    two = evaluate(grid, p, workers=2)
    for column in SWEEP_COLUMNS:
        assert np.array_equal(one.column(column), two.column(column)), column
    assert one.categories == two.categories


def test_overflowing_sizes_are_refused_not_wrapped(run):
    with pytest.raises(WorkloadError, match=r"past int64 \(9.2e18\), e.g. at n=10000000, d=128, batch=100000"):
        evaluate(Grid(n=(4096, 10_000_000), d=(128,), batch=(100_000,), dtypes=("fp16",)))
    r = run("sweep", "--n", "4096,10000000", "--batch", "100000", "--d", "128", "--dtype", "fp16")
    assert r.exit_code == 2 and "past int64" in r.stderr and r.stdout == ""


def test_sweep_csv_columns_are_stable_and_documented(run):
    r = run("sweep", "--n", "1024,4096", "--d", "64", "--dtype", "fp16", "--format", "csv")
    assert r.exit_code == 0, r.stderr
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert tuple(rows[0]) == SWEEP_COLUMNS
    assert SWEEP_COLUMNS[:11] == (
        "gpu",
        "dtype",
        "batch",
        "heads",
        "kv_heads",
        "n",
        "d",
        "algorithm",
        "variant",
        "block_q",
        "block_kv",
    )
    assert len(rows) == 4
    assert rows[0]["block_q"] == "" and rows[1]["block_q"] == "128"  # PyTorch's FlashAttention-2 at d = 64: 128×128
    assert int(rows[0]["hbm_bytes"]) == int(rows[0]["hbm_read_bytes"]) + int(rows[0]["hbm_write_bytes"])
    doc = (REPO / "docs" / "cli.md").read_text()
    section = doc[doc.index("## sweep") :]
    for column in SWEEP_COLUMNS:
        assert f"`{column}`" in section or column in section.split("```")[0], column


def test_sweep_jsonl(run):
    r = run("sweep", "--n", "512:2048:x2", "--d", "64,128", "--tiled", "fa1", "--format", "jsonl")
    assert r.exit_code == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(rows) == 3 * 2 * 2
    assert list(rows[0]) == list(SWEEP_COLUMNS)
    assert rows[0]["block_q"] is None and rows[1]["variant"] == "fa1"
    assert isinstance(rows[0]["hbm_bytes"], int)


def test_sweep_standard_variants_are_an_axis(run):
    r = run("sweep", "--n", "1024,4096", "--d", "64", "--dtype", "fp16", "--causal", "--standard", "algorithm0,eager",
            "--format", "csv")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert len(rows) == 2 * 2 * 2  # N × standard, two algorithms each
    assert [(x["standard"], x["variant"]) for x in rows[::2]] == [("algorithm0", "algorithm0")] * 2 + [
        ("eager", "eager")
    ] * 2
    assert {x["standard"] for x in rows[1::2]} == {"algorithm0", "eager"}  # both rows of a workload carry it
    p = load_profile("a100")
    for std, til in zip(rows[::2], rows[1::2]):
        w = Workload(n=int(std["n"]), d=64, dtype="fp16", causal=True)
        one = compare(w, p, standard=std["standard"])
        assert int(std["hbm_bytes"]) == one.standard.traffic.hbm_bytes
        assert int(til["hbm_bytes"]) == one.tiled.traffic.hbm_bytes
        assert float(std["ratio_hbm_bytes"]) == pytest.approx(one.ratios()["hbm_bytes"], rel=1e-12)
    # eager PyTorch's separate scale and mask kernels move more than Algorithm 0's
    assert int(rows[4]["hbm_bytes"]) > int(rows[0]["hbm_bytes"])
    r = run("sweep", "--n", "1024", "--d", "64", "--standard", "eager")
    assert r.exit_code == 0 and "· standard eager" in r.stdout.splitlines()[0]
    assert "standard" not in run("sweep", "--n", "1024", "--d", "64").stdout.splitlines()[0]  # the default: unsaid
    r = run("sweep", "--n", "1024", "--d", "64", "--standard", "naive")
    assert r.exit_code == 2 and "'naive' is not one of algorithm0, eager" in r.stderr


def test_sweep_table(run):
    r = run("sweep", "--n", "512:131072:x4", "--d", "64,128", "--dtype", "fp16")
    assert r.exit_code == 0, r.stderr
    out = r.stdout
    assert out.startswith("Sweep · gpu a100 · dtype fp16 · batch 1 · heads 1 · tiled fa2")
    assert "HBM std" in out and "bound s/t" in out and "hbm/" in out
    assert len([line for line in out.splitlines() if re.match(r"\s*(64|128)\s+\d+", line)]) == 2 * 5
    # the range every time carries, once under the table: p / (1 + high) to p / (1 + low) of the
    # transferred class's errors (memmodel/data/validated.json)
    from memmodel.validated import time_range_errors

    errors = time_range_errors("other-architecture")
    low, high = 1 / (1 + errors["high"]), 1 / (1 + errors["low"])
    assert f"time: measured within {low:.2f}–{high:.2f}× of these" in out


def test_sweep_option_errors(run):
    cases = [
        (["--n", "512:x", "--d", "64"], "Invalid value for '--n': cannot read '512:x'"),
        (["--n", "512", "--d", "64:32:+1"], "Invalid value for '--d': range '64:32:+1' must run upwards"),
        (["--n", "512", "--d", "64", "--batch", "0"], "Invalid value for '--batch': 0 in '0' is not a positive"),
        (["--n", "512", "--d", "64", "--dtype", "fp16,fp64"], "Invalid value for '--dtype': 'fp64' is not one of"),
        (["--n", "512", "--d", "64", "--tiled", "fa3"], "Invalid value for '--tiled': 'fa3' is not one of fa1, fa2"),
        (["--n", "512", "--d", "64", "--gpu", "nosuch"], "unknown GPU 'nosuch'"),
        (["--n", "1:1000000:+1", "--d", "1:11:+1"], "the grid has 11,000,000 configurations"),
        (["--n", "1:100000:+1", "--d", "64"], "a table of 100,000 workloads is too long to read"),
        (["--n", "512", "--d", "64", "--dtype", "fp8"], "a100 has no fp8 compute peak"),
        (["--n", "512", "--d", "100000"], "head dimension d=100000 is too large"),
        (["--d", "64"], "Missing option '--n'"),
    ]
    for args, fragment in cases:
        r = run("sweep", *args)
        assert r.exit_code == 2, (args, r.output)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("memmodel: error: "), r.stderr
        assert fragment in lines[0], (fragment, lines[0])
        assert r.stdout == ""


def test_sweep_skips_what_cannot_run_and_says_so(run, tmp_path):
    r = run("sweep", "--n", "512", "--d", "64", "--heads", "8", "--kv-heads", "3,8", "--format", "csv")
    assert r.exit_code == 0
    assert "note: skipped 1 of 2 workloads where kv_heads does not divide heads" in r.stderr
    assert [row["kv_heads"] for row in csv.DictReader(io.StringIO(r.stdout))] == ["8", "8"]
    fp8 = tmp_path / "a100-fp8.yaml"
    text = (HARDWARE / "a100.yaml").read_text().replace("name: a100", "name: a100-fp8")
    fp8.write_text(text.replace("  bf16:", "  fp8: {value: 624 TFLOP/s, source: datasheet}\n  bf16:", 1))
    r = run("sweep", "--n", "512", "--d", "64", "--gpu", f"a100,{fp8}", "--dtype", "fp16,fp8", "--format", "csv")
    assert r.exit_code == 0, r.stderr
    assert "note: skipped a100 × fp8: a100 has no fp8 compute peak" in r.stderr
    groups = {(row["gpu"], row["dtype"]) for row in csv.DictReader(io.StringIO(r.stdout))}
    assert groups == {("a100", "fp16"), (str(fp8), "fp16"), (str(fp8), "fp8")}


def test_sweep_output_file_is_atomic_and_not_clobbered(run, tmp_path):
    out = tmp_path / "sweep.csv"
    args = ["sweep", "--n", "512:4096:x2", "--d", "64", "--format", "csv", "--output", str(out)]
    r = run(*args)
    assert r.exit_code == 0 and r.stdout == ""
    assert "wrote 8 rows to" in r.stderr
    first = out.read_text()
    assert first.splitlines()[0] == ",".join(SWEEP_COLUMNS) and len(first.splitlines()) == 9
    assert oct(out.stat().st_mode & 0o777) != oct(0o600)  # not mkstemp's private mode
    r = run(*args)
    assert r.exit_code == 2 and f"{out}: already exists; use --force to overwrite it" in r.stderr
    r = run("sweep", "--n", "512", "--d", "64", "--output", str(out), "--force")  # .csv: the format
    assert r.exit_code == 0 and out.read_text().startswith("gpu,") and len(out.read_text().splitlines()) == 3
    assert sorted(os.listdir(tmp_path)) == ["sweep.csv"]  # no temporary files left behind
    r = run("sweep", "--n", "512", "--d", "64", "--output", str(tmp_path / "table.txt"))
    assert r.exit_code == 0 and (tmp_path / "table.txt").read_text().startswith("Sweep · gpu a100")
    r = run("sweep", "--n", "512", "--d", "64", "--output", str(tmp_path / "no" / "such.csv"))
    assert r.exit_code == 1 and "does not exist" in r.stderr  # the machine's folders: a runtime failure


def test_sweep_plot(run, tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "sweep.png"
    r = run("sweep", "--n", "64:16384:x2", "--d", "256,512", "--plot", str(out), "--format", "csv")
    assert r.exit_code == 0, r.stderr
    assert out.stat().st_size > 10_000 and out.read_bytes()[:4] == b"\x89PNG"
    from memmodel.report.sweep import _crossings

    # ratio 0.5 → 2 between x = 1 and x = 4 crosses 1 at x = 2 (midway in log–log)
    assert _crossings(np.array([1, 4]), np.array([0.5, 2.0])) == [pytest.approx(2.0)]
    assert _crossings(np.array([1, 2, 4]), np.array([2.0, 3.0, 4.0])) == []


def test_sweep_plot_errors(run, tmp_path, monkeypatch):
    r = run("sweep", "--n", "512", "--d", "64", "--plot", str(tmp_path / "chart.gif"))
    assert r.exit_code == 2 and "is not one of .png, .svg, .pdf" in r.stderr
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    r = run("sweep", "--n", "512", "--d", "64", "--plot", str(tmp_path / "chart.png"))
    assert r.exit_code == 1  # the environment lacks it: a runtime failure, not a usage error
    assert (
        r.stderr == "memmodel: error: --plot needs matplotlib, which is not installed: pip install 'memmodel[plot]'\n"
    )
    assert r.stdout == ""  # refused before any work


# ---------------------------------------------------------------------------------------
# Context-parallel sweeps: one engine, rows as compare --context-parallel gives them


def test_context_parallel_sweep_rows_equal_compare_per_row():
    from memmodel.parallel import context_parallel, to_dict
    from memmodel.sweep import CP_AXES, CP_VALUES, ContextParallelGrid, evaluate_context_parallel

    grid = ContextParallelGrid(
        n=(4096,), d=(64,), p=(2, 4), heads=(8,), kv_heads=(4,), gpu=("h200",),
        causal=(False, True), backward=(False, True), scheme=("ring", "ulysses"), dtype=("bf16",),
    )  # fmt: skip
    sweep = evaluate_context_parallel(grid)
    # 2 p × 2 causal × 2 backward × 2 schemes = 16 runs (ulysses splits 8 query and 4 K/V heads
    # over 2 or 4 GPUs: none is skipped), two rows each
    assert len(sweep.rows) == 16 * 2 and sweep.skipped == []
    assert all(list(row) == list(CP_AXES) + list(CP_VALUES) for row in sweep.rows)
    profile = load_profile("h200")
    for k, combo in enumerate(grid.combinations()):
        w = Workload(n=combo["n"], d=64, heads=8, kv_heads=combo["kv_heads"], dtype="bf16", causal=combo["causal"])
        data = to_dict(context_parallel(w, profile, combo["p"], combo["scheme"], backward=combo["backward"]))
        for alg, row in zip(data["algorithms"], sweep.rows[2 * k : 2 * k + 2]):
            assert row["algorithm"] == alg["name"] and row["kv_heads"] == 4
            assert {key: row[key] for key in CP_AXES if key != "kv_heads"} == {
                key: v for key, v in combo.items() if key != "kv_heads"
            }
            for key in CP_VALUES[1:]:
                assert row[key] == alg[key] and type(row[key]) is type(alg[key]), (key, row[key], alg[key])


def test_context_parallel_sweep_skips_what_cannot_be_split():
    from memmodel.sweep import ContextParallelGrid, evaluate_context_parallel

    # n = 1002 is no multiple of 4 (ring over 4 GPUs); 6 heads are no multiple of 4 (ulysses)
    sweep = evaluate_context_parallel(
        ContextParallelGrid(n=(1002, 4096), d=(64,), p=(4,), heads=(6,), gpu=("h200",), scheme=("ring", "ulysses"))
    )
    assert [(r["n"], r["scheme"]) for r in sweep.rows[::2]] == [(4096, "ring")]
    assert sweep.rows[0]["kv_heads"] == 6  # not given: as many as query heads
    assert sweep.skipped == [
        "--n (1002) must be a multiple of --context-parallel (4)",
        "--cp-scheme ulysses splits heads over 4 GPUs: --heads (6) must be a multiple of 4",
    ]
    with pytest.raises(WorkloadError, match="multiple of --context-parallel"):
        evaluate_context_parallel(ContextParallelGrid(n=(1002,), d=(64,), p=(4,), gpu=("h200",)))


def test_context_parallel_sweep_csv_is_the_engine_rows(run):
    from memmodel.sweep import CP_COLUMNS, ContextParallelGrid, evaluate_context_parallel

    r = run(
        "sweep", "--n", "8192,16384", "--d", "128", "--heads", "8", "--gpu", "h200", "--context-parallel", "2",
        "--cp-scheme", "ring,ulysses", "--tiled", "fa2", "--l2", "off", "--format", "csv",
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert r.stdout.splitlines()[0] == ",".join(CP_COLUMNS)
    expected = evaluate_context_parallel(
        ContextParallelGrid(
            n=(8192, 16384),
            d=(128,),
            p=(2,),
            heads=(8,),
            gpu=("h200",),
            scheme=("ring", "ulysses"),
            options={"tiled": "fa2", "l2": "off", "clocks": "benchmark"},
        )  # fmt: skip
    ).rows
    assert rows == [{k: "" if row[k] is None else str(row[k]) for k in CP_COLUMNS} for row in expected]
    # --l2 off reaches the model: the tiled kernel reads K/V from HBM for every Q block, not through L2
    default = evaluate_context_parallel(
        ContextParallelGrid(n=(8192,), d=(128,), p=(2,), heads=(8,), gpu=("h200",))
    ).rows
    assert default[1]["hbm_bytes"] != expected[1]["hbm_bytes"]


# ---------------------------------------------------------------------------------------
# CSV formatted by numpy: byte for byte what the csv module writes


def _texts(matrix: np.ndarray) -> list[str]:
    return [row.tobytes().replace(b"\0", b"").decode() for row in matrix]


@hsettings(max_examples=300)
@given(st.lists(st.floats(allow_nan=True, allow_infinity=True, width=64), min_size=1, max_size=50))
def test_float_text_is_repr(values):
    from memmodel.report.text import float_text

    assert _texts(float_text(np.array(values, dtype=np.float64))) == [repr(float(v)) for v in values]


def test_float_text_is_repr_where_layouts_change():
    from memmodel.report.text import float_text

    # repr's layout changes at 1e-4 / 1e-5 and 1e15 / 1e16; powers of two have a narrower gap
    # below; the shortest digits of 0.1 are one where 17 would be 0.10000000000000001
    edges = [0.0, -0.0, 0.1, 0.3, 1.0, 2.5, 1e-4, 1e-5, 9.999999999999999e-05, 1e15, 1e16, 9.999999999999998e15]
    edges += [123456789012345678.0, 1.7976931348623157e308, 5e-324, 2.2250738585072014e-308, 1e22, 1e23]
    rng = np.random.default_rng(7)
    values = np.concatenate(
        [
            np.array(edges),
            2.0 ** np.arange(-60, 80),
            10.0 ** np.arange(-15, 45),
            np.nextafter(10.0 ** np.arange(-12, 40), 0),
            np.nextafter(10.0 ** np.arange(-12, 40), np.inf),
            rng.random(20_000) * 10.0 ** rng.integers(-14, 44, 20_000),
            rng.integers(0, 2**63, 20_000, dtype=np.int64).view(np.float64),  # any bits: nan, inf, subnormals too
            np.round(rng.random(5_000) * 1000, 3),
        ]
    )
    assert _texts(float_text(values)) == [repr(v) for v in values.tolist()]


@given(st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1), min_size=1, max_size=50))
def test_int_text_is_str(values):
    from memmodel.report.text import int_text

    assert _texts(int_text(np.array(values, dtype=np.int64))) == [str(v) for v in values]


def _both_csv(result) -> tuple[str, str]:
    from memmodel.report.sweep import write_csv, write_csv_rows

    fast, rows = io.StringIO(), io.StringIO()
    write_csv(result, fast)
    write_csv_rows(result, rows)
    return fast.getvalue(), rows.getvalue()


@hsettings(max_examples=12, deadline=None)
@given(
    n=st.lists(st.integers(1, 70_000), min_size=1, max_size=6, unique=True),
    d=st.lists(st.sampled_from([32, 64, 80, 96, 128, 256]), min_size=1, max_size=2, unique=True),
    heads=st.lists(st.sampled_from([1, 4, 8, 32]), min_size=1, max_size=2, unique=True),
    kv=st.sampled_from([None, (1,), (1, 4)]),
    batch=st.lists(st.integers(1, 64), min_size=1, max_size=2, unique=True),
    dtypes=st.lists(st.sampled_from(["fp16", "bf16", "fp32"]), min_size=1, max_size=2, unique=True),
    gpus=st.lists(st.sampled_from(["a100", "h200"]), min_size=1, max_size=2, unique=True),
    causal=st.sampled_from([(False,), (True,), (False, True)]),
    backward=st.sampled_from([(False,), (True,)]),
    dropout=st.sampled_from([(0.0,), (0.0, 0.1)]),
    tiled=st.sampled_from([("fa2",), ("fa1", "fa2")]),
    impls=st.sampled_from([("auto",), ("paper",), ("sdpa-flash",)]),
    splits=st.sampled_from([(None,), (None, 2)]),
    standard=st.sampled_from([("algorithm0",), ("algorithm0", "eager")]),
)
def test_vectorised_csv_equals_the_row_writer(
    n, d, heads, kv, batch, dtypes, gpus, causal, backward, dropout, tiled, impls, splits, standard
):
    from memmodel.errors import MemmodelError

    try:
        grid = Grid(
            n=tuple(n), d=tuple(d), heads=tuple(heads), kv_heads=kv, batch=tuple(batch), dtypes=tuple(dtypes),
            gpus=tuple(gpus), causal=causal, backward=backward, dropout=dropout, tiled=tiled, impls=impls,
            splits=splits, standard=standard,
        )  # fmt: skip
        result = evaluate(grid, workers=1)
    except MemmodelError:
        return  # a grid the model refuses as a whole (tested elsewhere)
    fast, rows = _both_csv(result)
    assert fast == rows
    assert fast.count("\n") == len(result) + 1


def test_vectorised_csv_blanks_categories_and_a_quoted_name(tmp_path):
    import shutil

    from memmodel.report.sweep import write_csv

    # a profile whose name needs quoting in CSV ("a100,copy"), read from a path
    path = tmp_path / "a100,copy.yaml"
    shutil.copy(HARDWARE / "a100.yaml", path)
    grid = Grid(n=(512, 4096), d=(64,), gpus=(str(path), "a100"), block_q=(None, 64), splits=(None, 2))
    result = evaluate(grid, {str(path): load_profile(str(path)), "a100": load_profile("a100")}, workers=1)
    fast, rows = _both_csv(result)
    assert fast == rows and '"' in fast and ",," in fast  # quoted GPU; blank standard-row blocks
    out = io.StringIO()
    write_csv(result, out)
    assert out.getvalue() == rows


def test_large_csv_written_by_workers_equals_the_row_writer(tmp_path, monkeypatch):
    from memmodel.report import sweep as report

    monkeypatch.setattr(report, "PARALLEL_ROWS", 1)
    monkeypatch.setattr(report, "TEXT_BATCH", 1000)  # 4100 N × 2 d × 2 rows = 16,400 rows: 17 batches in turn
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    calls = []
    parallel = report._write_in_parallel
    monkeypatch.setattr(report, "_write_in_parallel", lambda *a: calls.append(1) or parallel(*a))
    result = evaluate(Grid(n="64:262400:+64", d=(64, 128), dtypes=("fp16",), gpus=("h200",)), workers=1)
    path = tmp_path / "sweep.csv"
    with open(path, "w", encoding="utf-8", newline="") as f:
        report.write_csv(result, f)
    assert calls == [1]
    rows = io.StringIO()
    report.write_csv_rows(result, rows)
    assert path.read_text() == rows.getvalue()
