"""Bad input a fuzzing pass found getting through (2026-12-05): each now ends in one line naming it and
what is accepted, exit 2 (a usage error) and never an internal error."""

from __future__ import annotations

import pytest


def _one_error_line(r, code: int = 2) -> str:
    assert r.exit_code == code, r.stdout + r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("memmodel: error: ")
    assert "internal error" not in r.stderr and "Traceback" not in r.stderr
    return r.stderr


@pytest.mark.parametrize(
    "args",
    [
        # 2**62 tokens under a window or in chunks: its blocks' arrays would take exbibytes
        ("compare", "--n", str(2**62), "--d", "64", "--causal", "--window", "4096", "--dtype", "bf16"),
        ("compare", "--n", str(2**62), "--d", "64", "--chunk", "4096", "--dtype", "bf16"),
    ],
)
def test_a_size_past_this_machines_memory_is_refused(run, args):
    assert "need more memory than this machine has" in _one_error_line(run(*args))


def test_a_record_nested_past_pythons_limit_is_refused(run, tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    assert "nests too deep" in _one_error_line(run("validate", "--rescore", str(deep)))


@pytest.mark.parametrize("p", ["0", "1025", str(2**31)])
def test_context_parallel_takes_1_to_1024_gpus(run, p):
    err = _one_error_line(run("compare", "--n", "4096", "--d", "64", "--context-parallel", p))
    assert "--context-parallel must be 1 to 1024 GPUs" in err and f"(got {p})" in err
    if int(p) > 0:  # sweep's grid refuses a P below 1 as it reads the grid
        err = _one_error_line(run("sweep", "--n", "4096", "--d", "64", "--context-parallel", f"2,{p}"))
        assert "--context-parallel must be 1 to 1024 GPUs" in err


def test_sweep_refuses_a_plot_it_would_not_draw(run, tmp_path):
    err = _one_error_line(
        run("sweep", "--n", "4096,8192", "--d", "64", "--context-parallel", "2", "--plot", str(tmp_path / "p.png"))
    )
    assert "--plot with --context-parallel" in err and not (tmp_path / "p.png").exists()


def test_trace_names_a_function_that_calls_sys_exit(run, tmp_path):
    pytest.importorskip("torch")
    src = tmp_path / "quits.py"
    src.write_text("import sys\n\ndef f(q):\n    sys.exit(3)\n", encoding="utf-8")
    err = _one_error_line(run("trace", f"{src}:f", "--shape", "q=1,4"))
    assert "SystemExit" in err and "f" in err
    at_import = tmp_path / "exits.py"
    at_import.write_text("import sys\nsys.exit(0)\n\ndef f(q):\n    return q\n", encoding="utf-8")
    err = _one_error_line(run("trace", f"{at_import}:f", "--shape", "q=1,4"))
    assert "importing it raised SystemExit" in err


@pytest.mark.parametrize("text", ["", "# only a comment\n\n"])
def test_a_cases_file_with_no_case_is_refused(run, tmp_path, text):
    cases = tmp_path / "cases.txt"
    cases.write_text(text, encoding="utf-8")
    err = _one_error_line(run("validate", "--list", "--cases", str(cases)))
    assert f"{cases}: no case in it" in err


@pytest.mark.parametrize("extra", [("--output", "pred.json"), ("--plot", "pred.png"), ("--format", "json")])
def test_predict_refuses_options_it_would_ignore(run, tmp_path, extra):
    flag, value = extra
    args = ["validate", "--predict", "--gpu", "h200", "--case", "impl=sdpa-flash,n=4096,d=64,dtype=bf16"]
    err = _one_error_line(run(*args, flag, str(tmp_path / value) if flag != "--format" else value))
    assert f"not with {flag}" in err and not list(tmp_path.iterdir())


@pytest.mark.parametrize("value", [str(2**63), str(10**40)])
def test_a_case_integer_past_int64_is_refused(run, value):
    err = _one_error_line(run("validate", "--list", "--case", f"impl=sdpa-flash,n={value},d=64"))
    assert f"case n={value}: past int64" in err


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-1.0", "true", '"3"'])
def test_a_record_whose_measured_time_is_not_a_time_is_refused(run, tmp_path, value):
    import gzip
    import json

    from .conftest import REPO

    record = json.load(gzip.open(REPO / "validation/h200/cudnn-bwd-d192-check/cudnn-bwd-d192-check.json.gz"))
    record["cases"][0]["timing"]["kernels"]["forward"] = "__X__"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(record).replace('"__X__"', value), encoding="utf-8")
    err = _one_error_line(run("validate", "--rescore", str(bad)))
    assert "cases[0].timing.kernels.forward" in err and "is not a time" in err


def test_derive_from_takes_a_sibling_of_the_same_architecture(run, tmp_path):
    profile = tmp_path / "ampere.yaml"
    profile.write_text(
        "name: my-ampere\nfull_name: test\nderive_from: h200\ncompute_capability: '8.0'\n"
        "sm_count: {value: 108, source: ds}\nclock: {value: 1410 MHz, source: ds}\n"
        "memory:\n  hbm: {datasheet_bandwidth: {value: 2 TB/s, source: ds}, capacity: {value: 80 GB, source: ds}}\n"
        "  l2: {capacity: {value: 40 MB, source: ds}}\nsources:\n  ds: {title: datasheet, kind: datasheet}\n",
        encoding="utf-8",
    )
    err = _one_error_line(run("hardware", "validate", str(profile)))
    assert "derive_from: 'h200' is hopper, this profile ampere" in err and "transfer_from" in err
