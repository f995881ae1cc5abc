"""The error catalogue of docs/errors.md, one test per row, and the conventions
the same page promises (NO_COLOR, --quiet, completion, help, exit codes).

Each row's command is run as the catalogue says (scripts/update_errors.py's runner: from the
repository root, the module in "When" hidden) and must exit with the row's code and print
exactly the row's message, one line on stderr, nothing on stdout.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from .conftest import REPO

_spec = importlib.util.spec_from_file_location("_memmodel_update_errors", REPO / "scripts" / "update_errors.py")
assert _spec is not None and _spec.loader is not None
catalogue = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = catalogue  # dataclasses look their module up
_spec.loader.exec_module(catalogue)

ROWS = catalogue.parse(catalogue.DOC.read_text(encoding="utf-8"))


@pytest.mark.parametrize("row", ROWS, ids=[r.error for r in ROWS])
def test_catalogue_entry(row):
    code, out, err = catalogue.run(row)
    assert (code, err.strip()) == (row.exit_code, row.message), "run python scripts/update_errors.py"
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("memmodel: error: ")
    assert code in (1, 2)


def test_catalogue_covers_the_issue():
    """Every error the hardening issue names has a row."""
    names = {r.error for r in ROWS}
    required = {
        "option value out of range",
        "option value past 2^63 − 1",
        "float option given NaN",
        "unknown profile name",
        "unknown profile name (typo)",
        "malformed YAML",
        "L2 larger than HBM",
        "SRAM per SM larger than L2",
        "zero bandwidth",
        "unknown source id",
        "peak for a dtype the GPU lacks",
        "output file exists",
        "output folder missing",
        "torch missing (calibrate)",
        "torch missing (validate)",
        "matplotlib missing (--plot)",
        "kv-heads not dividing heads",
        "causal with n-kv below n",
        "dropout outside [0, 1)",
        "splits below 1",
        "blocks too large for SRAM",
        # issue 12: what a new user tripped on
        "single-value option given twice",
        "group option after the command",
        "unknown model",
        "multi-head latent attention",
        "more CTAs than shared memory holds",
        "output over a device",
        "output suffix against --format",
        "plot file exists",
        "record's profile not found",
    }
    assert required <= names, sorted(required - names)
    assert "did you mean h100-sxm?" in next(r.message for r in ROWS if r.error == "unknown profile name (typo)")
    # exit 1 is for the machine (a dependency, a folder), 2 for what the user typed
    assert {r.exit_code for r in ROWS if r.when} == {1}


def test_catalogue_is_what_a_real_process_prints():
    """The in-process runner is faithful: one row through a real interpreter."""
    row = next(r for r in ROWS if r.error == "L2 larger than HBM")
    env = {**os.environ, "NO_COLOR": "1"}
    p = subprocess.run(
        [sys.executable, "-m", "memmodel", *row.command.split()[1:]], cwd=REPO, capture_output=True, text=True, env=env
    )
    assert (p.returncode, p.stderr.strip(), p.stdout) == (row.exit_code, row.message, "")


# ---------------------------------------------------------------------------------------
# Conventions


def test_no_color_means_no_escape_codes(run, monkeypatch):
    monkeypatch.setenv("FORCE_COLOR", "1")  # as on a terminal
    monkeypatch.delenv("NO_COLOR")
    assert "\x1b[" in run("compare", "--n", "4096", "--d", "64").stdout  # the test can see escapes
    monkeypatch.setenv("NO_COLOR", "1")
    for args in (["compare", "--n", "4096", "--d", "64"], ["hardware", "show", "a100"], ["hardware", "list"]):
        r = run(*args)
        assert r.exit_code == 0 and "\x1b[" not in r.stdout + r.stderr


def test_quiet_silences_progress_and_warnings_but_not_errors(run, monkeypatch):
    from memmodel.cli import terminal

    r = run("--quiet", "compare", "--n", "4096", "--d", "64", "--format", "json")
    assert r.exit_code == 0 and r.stderr == "" and json.loads(r.stdout)
    r = run("-q", "compare", "--n", "0", "--d", "64")
    assert r.exit_code == 2 and r.stderr.startswith("memmodel: error: ")
    # the helpers the commands use for stderr
    out: list[str] = []
    monkeypatch.setattr(
        sys, "stderr", type("W", (), {"write": lambda self, s: out.append(s), "flush": lambda self: None})()
    )
    terminal.set_quiet(True)
    try:
        terminal.warning("step hbm failed")
        with terminal.progress(3) as update:
            update(1, "hbm")
        assert out == []
    finally:
        terminal.set_quiet(False)
    terminal.warning("step hbm failed")
    assert out == ["memmodel: warning: step hbm failed\n"]


def test_quiet_is_reset_between_invocations(run):
    from memmodel.cli import terminal

    run("--quiet", "hardware", "list")
    run("hardware", "list")
    assert not terminal.is_quiet()


def test_shell_completion_lines_in_the_docs_work():
    doc = catalogue.DOC.read_text(encoding="utf-8")
    for shell in ("bash", "zsh", "fish"):
        assert f"_MEMMODEL_COMPLETE={shell}_source memmodel" in doc
    code = "from memmodel.cli import main; main()"
    env = {**os.environ, "_MEMMODEL_COMPLETE": "bash_source"}
    p = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, env=env)
    assert p.returncode == 0 and "_memmodel_completion()" in p.stdout
    env = {
        **os.environ,
        "_MEMMODEL_COMPLETE": "bash_complete",
        "COMP_WORDS": "memmodel compare --gpu h1",
        "COMP_CWORD": "3",
    }
    p = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, env=env)
    assert p.stdout.split() == ["plain,h100-nvl", "plain,h100-pcie", "plain,h100-sxm"]


def test_debug_flag_is_only_the_groups_own_option(run):
    """``--debug`` as an option's value, or after the command, asks for no traceback."""
    r = run("compare", "--n", "8", "--d", "8", "--l2", "--debug")
    assert r.exit_code == 2 and "'--debug' is not one of" in r.stderr
    r = run("compare", "--n", "8", "--d", "8", "--debug")
    assert r.exit_code == 2 and "No such option '--debug'" in r.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_write_error_on_stdout_is_one_line_exit_1():
    with open("/dev/full", "w") as full:
        p = subprocess.run(
            [sys.executable, "-m", "memmodel", "compare", "--n", "4096", "--d", "64"],
            cwd=REPO,
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
        )
    assert (p.returncode, p.stderr) == (1, "memmodel: error: No space left on device\n")


def test_huge_sizes_are_exact_or_refused_naming_the_option(run):
    r = run("compare", "--n", str(2**63 - 1), "--d", "64", "--format", "json")
    assert r.exit_code == 0
    data = json.loads(r.stdout, parse_constant=lambda c: pytest.fail(c))
    s_bytes = [t["bytes"] for t in data["algorithms"][0]["transfers"] if t["tensor"] == "S" and t["level"] == "hbm"]
    assert s_bytes[0] == (2**63 - 1) ** 2 * 4  # N² · 4 B, exact
    r = run("compare", "--n", "1" + "0" * 5000, "--d", "64")
    assert r.exit_code == 2 and "'--n'" in r.stderr and len(r.stderr) < 200
    r = run("compare", "--n", "4096", "--d", "64", "--batch", str(2**63))
    assert r.exit_code == 2 and "'--batch': 9223372036854775808 is larger than" in r.stderr


def test_table_numbers_past_a_million_exabytes_are_scientific():
    from memmodel.units import format_bytes, format_time

    assert format_bytes(8 * 10**42) == "8.0e+24 EB"  # not 7999999999999999.... EB
    assert format_time(1.7e49) == "1.700e+49 s"
    assert format_bytes(318_767_104) == "318.8 MB"


def test_a_numpy_overflow_is_one_line_not_a_warning_and_a_nan(run, monkeypatch):
    """numpy warns (and goes on with inf) on overflow; the CLI turns that into an error line."""
    import numpy as np

    import memmodel

    def overflowing(*args, **kwargs):
        return np.float64(1e308) * 10

    monkeypatch.setattr(memmodel, "compare", overflowing)
    r = run("compare", "--n", "64", "--d", "64", "--format", "json")
    assert (r.exit_code, r.stdout) == (2, "")
    assert r.stderr == (
        "memmodel: error: a result is too large to compute (overflow encountered in scalar multiply); use smaller sizes\n"
    )
