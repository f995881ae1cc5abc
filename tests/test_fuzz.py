"""Fuzzing: hypothesis drives the CLI and the profile loader; no input may end in a traceback.

Every CLI run goes through ``MemmodelGroup.main`` (the ``run`` fixture) and must exit 0, 1
or 2, print no traceback, report a failure as exactly one line ``memmodel: error: …`` on
stderr, and on success print JSON, CSV and tables free of NaN and infinity. The options of
each command are read from click, so a new option (or a ``sweep``/``roofline`` command) is
fuzzed without touching this file.

``MEMMODEL_FUZZ_SCALE=10`` runs ten times as many examples (a nightly run); the default keeps
this file near half a minute on two cores. ``MEMMODEL_FUZZ_OUTPUT=DIR`` also writes every
run's stdout and stderr under DIR, for ``grep -r Traceback DIR``.
"""

from __future__ import annotations

import copy
import csv
import datetime
import io
import itertools
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memmodel.cli import cli
from memmodel.errors import ProfileError
from memmodel.fileio import read_json
from memmodel.hardware import parse_profile

from .conftest import HARDWARE, REPO

# numpy's overflow and invalid-value warnings would otherwise pass silently under pytest
pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")

SCALE = float(os.environ.get("MEMMODEL_FUZZ_SCALE", "1") or 1)
OUTPUT_DIR = os.environ.get("MEMMODEL_FUZZ_OUTPUT")


def fuzz_settings(examples: int) -> settings:
    return settings(
        max_examples=max(1, int(examples * SCALE)),
        deadline=None,
        database=None,
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,  # the env fixture is the same for every example
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.filter_too_much,
        ],
    )


# ---------------------------------------------------------------------------------------
# What every run must satisfy


def _refuse_constant(name: str) -> Any:
    raise AssertionError(f"JSON output holds {name}")


_NAN_WORD = re.compile(r"(?<![A-Za-z])(nan|inf|infinity)(?![A-Za-z])", re.IGNORECASE)
_counter = itertools.count()


def _record(args: list[str], result: Any) -> None:
    if OUTPUT_DIR is None:
        return
    folder = Path(OUTPUT_DIR)
    folder.mkdir(parents=True, exist_ok=True)
    n = next(_counter)
    text = f"$ memmodel {' '.join(args)}\n[exit {result.exit_code}]\n--- stdout\n{result.stdout}--- stderr\n{result.stderr}"
    (folder / f"run-{os.getpid()}-{n:06d}.txt").write_text(text, encoding="utf-8", errors="backslashreplace")


def _option_value(args: list[str], name: str) -> str | None:
    """The value click used for ``name``: the last one given."""
    value = None
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            value = args[i + 1]
        elif a.startswith(name + "="):
            value = a.split("=", 1)[1]
    return value


def check(command: tuple[str, ...], args: list[str], result: Any, *, free_text: bool = False) -> None:
    """The contract of every run, whatever the input. ``free_text``: the profile's names are
    fuzzed too, so a table may show "nan" as a name."""
    _record(args, result)
    out, err = result.stdout, result.stderr
    shown = f"memmodel {' '.join(map(repr, args))}\n[exit {result.exit_code}]\nstdout: {out[-2000:]}\nstderr: {err}"
    assert result.exit_code in (0, 1, 2), shown
    assert "Traceback" not in out + err, shown
    assert "internal error" not in err, shown  # the catch-all of MemmodelGroup.main means a bug
    lines = err.splitlines()
    if result.exit_code != 0:
        errors = [x for x in lines if x.startswith("memmodel: error: ")]
        assert errors, shown
        if command == ("hardware", "validate"):  # one line per invalid file, the rest on stdout
            assert all(x.startswith("memmodel: error: ") for x in lines), shown
        else:
            assert len(lines) == 1, shown
        return
    assert not any(x.startswith("memmodel: error") for x in lines), shown
    fmt = _option_value(args, "--format") or "table"
    if ("--help" in args or "-h" in args) and out.startswith("Usage:"):  # help wins over --format
        return
    if fmt == "json":
        json.loads(out, parse_constant=_refuse_constant)
    elif fmt == "csv":
        for row in csv.reader(io.StringIO(out)):
            bad = [c for c in row if c.strip().lower() in ("nan", "inf", "-inf", "infinity", "-infinity")]
            assert not bad, shown
    elif command[0] not in ("hardware", "validate") and not free_text:  # profile notes are free text
        assert not _NAN_WORD.search(out), shown


# ---------------------------------------------------------------------------------------
# Files to point options at


@pytest.fixture(autouse=True)
def _in_a_scratch_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Relative paths the fuzzer makes up (./nope.yaml, --output x.csv) land in a scratch
    folder, never in the repository."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """Paths of every sort: good and broken profiles, folders, binary junk, missing files."""
    root = tmp_path_factory.mktemp("fuzz-files")
    a100 = (HARDWARE / "a100.yaml").read_text(encoding="utf-8")
    files: dict[str, bytes] = {
        "good.yaml": a100.encode(),
        "empty.yaml": b"",
        "comment.yaml": b"# nothing here\n",
        "binary.yaml": bytes(range(256)) * 4,
        "latin1.yaml": "name: caf\xe9\n".encode("latin-1"),
        "utf16.yaml": a100.encode("utf-16"),
        "list.yaml": b"- 1\n- 2\n",
        "scalar.yaml": b"42\n",
        "syntax.yaml": b"name: [a100\nmemory: {\n",
        "tabs.yaml": b"name:\ta100\n\tmemory: 1\n",
        "python-tag.yaml": b"!!python/object/apply:os.system ['true']\n",
        "l2-over-hbm.yaml": a100.replace("capacity: {value: 40 MiB", "capacity: {value: 400 GB").encode(),
        "zero-bw.yaml": a100.replace("2039 GB/s", "0 GB/s").encode(),
        "huge-sm.yaml": a100.replace("value: 108,", f"value: {10**400},").encode(),
        "not-yaml.txt": b"\x00\x01\x02 hello",
        "cases.txt": b"impl=standard,n=256,d=64\nimpl=triton,n=512,d=64,dtype=fp16\n",
        "cases-bad.txt": b"impl=standard,n=0,d=64\nn=abc\n",
        "cases-binary.txt": bytes(range(128, 256)),
        "record.json": b'{"schema": "nope"}',
        "existing.json": b"{}",
        "unreadable.yaml": a100.encode(),
    }
    for name, data in files.items():
        (root / name).write_bytes(data)
    (root / "unreadable.yaml").chmod(0)
    (root / "folder").mkdir()
    (root / "folder.yaml").mkdir()
    (root / "readonly").mkdir()
    (root / "readonly").chmod(0o555)
    existing = [str(root / name) for name in files]
    missing = [str(root / "missing.yaml"), str(root / "no" / "such" / "dir.yaml"), "./nope.yaml", "nope.yml"]
    folders = [str(root / "folder"), str(root / "folder.yaml"), str(root), "/", "."]
    outputs = [
        str(root / "out" / "missing-folder.json"),
        str(root / "readonly" / "out.json"),
        str(root / "existing.json"),
        str(root / "folder"),
        "/proc/version",
        "/dev/full",
        str(root / "new-output.json"),
        str(root / "new-plot.png"),
    ]
    return {"existing": existing, "missing": missing, "folders": folders, "outputs": outputs}


# ---------------------------------------------------------------------------------------
# Option values

BUNDLED = sorted(p.stem for p in HARDWARE.glob("*.yaml"))
ARG_CHARS = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")
JUNK_WORDS = [
    "",
    " ",
    "0",
    "-0",
    "-1",
    "-4096",
    str(10**30),
    str(2**63),
    str(2**64 - 1),
    str(10**400),
    "1" + "0" * 5000,
    "1e3",
    "64.0",
    "64.5",
    "1e309",
    "nan",
    "NaN",
    "inf",
    "-inf",
    "Infinity",
    "0x40",
    "1_024",
    "+64",
    " 64 ",
    "６４",
    "∞",
    "💥",
    "abc",
    "ünïcödé",
    "None",
    "null",
    "[1, 2]",
    "{}",
    "--help",
    "-",
    "1,2,3",
    "1024:8192",
    "1024..4096",
]
junk = st.one_of(
    st.sampled_from(JUNK_WORDS),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.floats().map(repr),
    st.text(alphabet=ARG_CHARS, max_size=10),
)
grid_text = st.lists(st.integers(min_value=-3, max_value=70_000), min_size=1, max_size=4).map(
    lambda xs: ",".join(map(str, xs))
)


def _ints(low: int, high: int | None) -> st.SearchStrategy[str]:
    top = high if high is not None else 2**63 - 1
    common = [x for x in (1, 2, 3, 8, 16, 64, 80, 128, 256, 1024, 4096, 8192, 32768) if low <= x <= top]
    valid = st.one_of(
        st.sampled_from(common or [low]),
        st.sampled_from(common or [low]),
        st.integers(low, min(top, low + 4096)),
        st.integers(low, top),  # valid but huge: exact counts past int64, times past any GPU
    )
    return valid.map(str)


def _floats(p: click.FloatRange) -> st.SearchStrategy[str]:
    low = p.min if p.min is not None else -1e6
    high = p.max if p.max is not None else 1e6
    return st.floats(low, high, exclude_max=bool(p.max_open), exclude_min=bool(p.min_open)).map(repr)


def gpu_spec(pool: dict[str, list[str]]) -> st.SearchStrategy[str]:
    names = st.sampled_from(BUNDLED)
    return st.one_of(
        names,
        names,
        names.map(str.upper),
        names.map(lambda n: n.replace("-", "")),
        names.map(lambda n: n[:-1]),
        st.sampled_from(pool["existing"] + pool["missing"] + pool["folders"]),
        junk,
    )


def case_spec() -> st.SearchStrategy[str]:
    keys = ["impl", "n", "d", "batch", "heads", "kv_heads", "n_kv", "dtype", "causal", "block_q", "block_kv", "bogus"]
    values = st.one_of(
        st.sampled_from(["standard", "sdpa-flash", "triton", "fp16", "bf16", "fp8", "1", "0", "yes", "64", "4096"]),
        junk,
    )
    part = st.tuples(st.sampled_from(keys), values).map(lambda kv: f"{kv[0]}={kv[1]}")
    return st.one_of(st.lists(part, min_size=0, max_size=6).map(",".join), junk)


def value_strategy(param: click.Parameter, pool: dict[str, list[str]], *, bad: bool = False) -> st.SearchStrategy[str]:
    """A value the option accepts (mostly: names and paths may be wrong), or with ``bad`` junk."""
    if bad:
        return junk
    name = param.name or ""
    t = param.type
    if name in ("gpu", "base"):
        valid = gpu_spec(pool)
    elif name == "case_specs":
        valid = case_spec()
    elif isinstance(t, click.Path):
        everything = pool["existing"] + pool["missing"] + pool["folders"] + pool["outputs"]
        valid = st.sampled_from(everything)
    elif isinstance(t, click.Choice):
        valid = st.sampled_from([str(c) for c in t.choices])
    elif isinstance(t, click.IntRange):
        valid = _ints(t.min if t.min is not None else -4096, t.max)
    elif isinstance(t, click.FloatRange):
        valid = _floats(t)
    elif t == click.INT:
        valid = _ints(0, None)
    elif t == click.FLOAT:
        valid = st.floats(-1e6, 1e6).map(repr)
    else:  # free text: a name, a grid, a spec
        valid = st.one_of(st.sampled_from(BUNDLED), grid_text, st.text(alphabet=ARG_CHARS, max_size=12))
    return valid


def _commands() -> dict[tuple[str, ...], click.Command]:
    out: dict[tuple[str, ...], click.Command] = {}

    def walk(group: click.Group, prefix: tuple[str, ...]) -> None:
        for name, cmd in group.commands.items():
            if isinstance(cmd, click.Group):
                walk(cmd, prefix + (name,))
            else:
                out[prefix + (name,)] = cmd

    walk(cli, ())
    return out


#: Commands fuzzed (GPU-free), examples for each, and arguments always given.
FUZZED: dict[tuple[str, ...], tuple[int, list[str]]] = {
    ("compare",): (1200, []),
    ("hardware", "list"): (20, []),
    ("models",): (10, []),
    ("hardware", "show"): (150, []),
    ("hardware", "validate"): (150, []),
    ("validate",): (250, ["--list"]),  # --list: print the cases, no GPU
    ("sweep",): (400, []),
    ("roofline",): (400, []),
    ("trace",): (100, []),  # mostly no such file; a bad --shape, dtype or GPU first
}
PRESENT = [c for c in FUZZED if c in _commands()]


@st.composite
def invocation(draw: st.DrawFn, command: tuple[str, ...], pool: dict[str, list[str]]) -> list[str]:
    """A command line: the command, a random subset of its options in random order, maybe junk."""
    cmd = _commands()[command]
    # half the lines are all valid values (the model runs), the others have junk in some options
    junk_rate = draw(st.sampled_from([0.0, 0.0, 0.0, 0.0, 0.1, 0.2, 0.5]))

    def value(p: click.Parameter) -> str:
        return draw(value_strategy(p, pool, bad=draw(st.floats(0, 1)) < junk_rate))

    tokens: list[list[str]] = []
    for p in cmd.params:
        if isinstance(p, click.Argument):
            count = draw(st.integers(1, 3)) if p.nargs == -1 else 1
            if draw(st.integers(0, 19)) == 0:
                count = 0  # a missing argument
            for _ in range(count):
                tokens.append([value(p)])
            continue
        if not isinstance(p, click.Option) or p.name == "debug":
            continue
        # required options are nearly always there; the others one time in three
        wanted = draw(st.integers(0, 19)) != 0 if p.required else draw(st.integers(0, 2)) == 0
        if not wanted:
            continue
        if p.is_flag:
            tokens.append([p.opts[0]])
            continue
        for _ in range(draw(st.integers(1, 2)) if p.multiple else 1):
            tokens.append([p.opts[0], value(p)])
    for _ in range(draw(st.integers(0, 1))):
        if junk_rate and draw(st.integers(0, 4)) == 0:
            tokens.append([draw(st.sampled_from(["--bogus", "extra", "--n", "--format", "-x", "--"]))])
    order = draw(st.permutations(range(len(tokens)))) if tokens else []
    args: list[str] = []
    positional: list[str] = []
    for i in order:
        (positional if len(tokens[i]) == 1 and not tokens[i][0].startswith("-") else args).extend(tokens[i])
    prefix = ["--quiet"] if "quiet" in {p.name for p in cli.params} and draw(st.booleans()) else []
    fixed = FUZZED[command][1]
    return [*prefix, *command, *fixed, *args, *positional]


@pytest.mark.parametrize("command", PRESENT, ids=[" ".join(c) for c in PRESENT])
def test_fuzz_cli(run, pool, command):
    @fuzz_settings(FUZZED[command][0])
    @given(args=invocation(command, pool))
    def inner(args: list[str]) -> None:
        check(command, args, run(*args))

    inner()


# ---------------------------------------------------------------------------------------
# The profile loader

BASE = {p.stem: yaml.safe_load(p.read_text(encoding="utf-8")) for p in sorted(HARDWARE.glob("*.yaml"))}
# a calibrated profile too: its optional fields (curves, implementations) get mutated as well
CALIBRATED = REPO / "tests" / "data" / "h200-calibrated.yaml"
BASE["h200-calibrated"] = yaml.safe_load(CALIBRATED.read_text(encoding="utf-8"))
UNITS = ["B", "kB", "KB", "KiB", "MB", "MiB", "GB", "GiB", "TB", "TB/s", "GB/s", "B/s", "GiB/s", "ns", "us", "ms", "s"]
UNITS += ["MHz", "GHz", "Hz", "TFLOP/s", "TFLOPS", "GFLOP/s", "Top/s", "op/s", "TFLOP", "/s", "", "bytes", "%", "GB/ms"]
NUMBERS = [
    "0",
    "-0",
    "-5",
    "1e-300",
    "1e400",
    "1e308",
    "nan",
    "inf",
    "-inf",
    "0.0",
    "2",
    "2039",
    "1.5e3",
    ".5",
    "1_000",
]
quantity = st.tuples(
    st.one_of(st.sampled_from(NUMBERS), st.floats().map(repr), st.integers(-(10**30), 10**30).map(str)),
    st.sampled_from([" ", "", "  "]),
    st.sampled_from(UNITS),
).map("".join)
wrong_value = st.one_of(
    quantity,
    quantity,
    st.sampled_from([None, True, False, 0, -1, 1, 10**400, -(10**400), 0.5, 2**63, "", " ", "108", "a100", []]),
    st.sampled_from(["[/]", "[bold]x", "[/red] y", "[link=x]z", "\x1b[31mred", "a\nb", "🚀"]),  # markup, escapes
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.lists(st.integers(0, 9), max_size=3),
    st.dictionaries(
        st.sampled_from(["value", "source", "note", "unit", "x"]), st.sampled_from(["1 GB", 3, None]), max_size=3
    ),
    st.just(datetime.date(2024, 1, 1)),
)


def _key_paths(data: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key (of a mapping) or index (of a list) under ``data``."""
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else []
    paths: list[tuple[Any, ...]] = []
    for k, v in items:
        paths.append(prefix + (k,))
        paths.extend(_key_paths(v, prefix + (k,)))
    return paths


def _leaf_values(data: Any) -> list[Any]:
    if isinstance(data, dict):
        return [x for v in data.values() for x in _leaf_values(v)]
    if isinstance(data, list):
        return [x for v in data for x in _leaf_values(v)]
    return [data]


def _typo(key: Any) -> st.SearchStrategy[Any]:
    k = str(key)
    options = [k.upper(), k + "s", k[:-1], k.replace("_", "-"), k.replace("_", ""), "sources" + k, " " + k, k + " "]
    return st.one_of(st.sampled_from(options), st.text(max_size=8), st.sampled_from([None, 1, True, "", "value"]))


@st.composite
def mutated_profile(draw: st.DrawFn) -> Any:
    """A bundled profile with 1 to 4 random mutations: keys dropped or renamed, values of the
    wrong type or unit, values moved between fields, nested structure broken."""
    return draw(mutated(BASE[draw(st.sampled_from(sorted(BASE)))]))


@st.composite
def mutated(draw: st.DrawFn, original: Any) -> Any:
    """A deep copy of ``original`` (YAML or JSON data) with 1 to 4 random mutations."""
    data: Any = copy.deepcopy(original)
    for _ in range(draw(st.integers(1, 4))):
        paths = _key_paths(data)
        op = draw(st.sampled_from(["drop", "rename", "replace", "replace", "swap", "wrap", "meta", "section", "top"]))
        if not paths or op == "top":
            if draw(st.integers(0, 3)) == 0:
                data = draw(st.sampled_from([None, [], "a100", 42, [data], {}]))
            continue
        path = draw(st.sampled_from(paths))
        parent = data
        for k in path[:-1]:
            parent = parent[k]
        key = path[-1]
        if op == "drop":
            del parent[key]
        elif op == "rename" and isinstance(parent, dict):
            parent[draw(_typo(key))] = parent.pop(key)
        elif op == "replace":
            parent[key] = draw(wrong_value)
        elif op == "swap":  # a value of another field: the wrong unit for this one
            parent[key] = copy.deepcopy(draw(st.sampled_from(_leaf_values(data))))
        elif op == "wrap":
            parent[key] = draw(st.sampled_from([[parent[key]], {"value": parent[key]}, {"value": {"value": "1 GB"}}]))
        elif op == "meta":
            if isinstance(parent[key], dict):
                field = draw(st.sampled_from(["source", "note", "value", "unit"]))
                parent[key][field] = draw(st.one_of(st.sampled_from(["nosuch", "datasheet", ""]), wrong_value))
        elif op == "section" and isinstance(parent[key], dict):
            parent[key] = draw(st.sampled_from([list(parent[key].values()), "memory", None, 3]))
    return data


def _check_profile(p: Any) -> None:
    numbers = [
        p.hbm.capacity_bytes,
        p.hbm.bandwidth_bytes_per_s,
        p.hbm.latency_s,
        p.l2.capacity_bytes,
        p.l2.bandwidth_bytes_per_s,
        p.l2.latency_s,
        p.sram.capacity_per_sm_bytes,
        p.sram.bandwidth_per_sm_bytes_per_s,
        p.sram.latency_s,
        p.sram.capacity_bytes,
        p.sram.bandwidth_bytes_per_s,
        *p.compute_flops_per_s.values(),
    ]
    assert all(isinstance(x, (int, float)) and math.isfinite(x) and x > 0 for x in numbers), p
    assert p.sm_count >= 1
    assert p.hbm.capacity_bytes > p.l2.capacity_bytes > p.sram.capacity_per_sm_bytes
    assert "fp32" in p.compute_flops_per_s
    rates = p.kernel_rates
    optional = [
        *p.mma_sync_flops_per_s.values(),
        *(y for f in p.implementation_figures.values() for _, y in f.cta_bandwidth_bytes_per_s),
        *(y for f in p.implementation_figures.values() for _, y in f.efficiency),
        *(y for _, y in rates.softmax_bytes_per_s),
        *(
            x
            for x in (
                rates.gemm_read_bytes_per_s,
                rates.gemm_write_bytes_per_s,
                rates.softmax_row_time_s,
                rates.elementwise_bytes_per_s,
            )
            if x is not None
        ),
    ]
    assert all(isinstance(x, (int, float)) and math.isfinite(x) and x > 0 for x in optional), p
    curves = [rates.softmax_bytes_per_s, *(f.efficiency for f in p.implementation_figures.values() if f.efficiency)]
    assert all(c and all(isinstance(k, int) and k >= 1 for k, _ in c) for c in curves if c), p


@fuzz_settings(1500)
@given(data=mutated_profile())
def test_fuzz_profile_loader(data):
    """parse_profile accepts a valid profile or raises ProfileError naming the file; nothing else."""
    try:
        p = parse_profile(data, "fuzz.yaml")
    except ProfileError as exc:
        assert str(exc).startswith("fuzz.yaml"), str(exc)
        return
    _check_profile(p)


@fuzz_settings(200)
@given(data=mutated_profile(), dtype=st.sampled_from(["fp32", "fp16", "fp8"]), fmt=st.sampled_from(["table", "json"]))
def test_fuzz_mutated_profile_files_through_the_cli(run, tmp_path, data, dtype, fmt):
    """The same mutations written as YAML files, through hardware validate/show and compare --gpu."""
    path = tmp_path / "mutated.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    for args in (
        ["hardware", "validate", str(path)],
        ["hardware", "show", str(path), "--format", fmt],
        ["compare", "--n", "512", "--d", "64", "--dtype", dtype, "--gpu", str(path), "--format", fmt],
        ["compare", "--n", "1", "--n-kv", "4096", "--d", "64", "--heads", "8", "--kv-heads", "2", "--dtype", dtype]
        + ["--gpu", str(path), "--impl", "sdpa-flash", "--format", fmt],
    ):
        check(tuple(args[:2]) if args[0] == "hardware" else ("compare",), args, run(*args), free_text=True)


def test_broken_profiles_on_the_search_path(run, pool, monkeypatch):
    """Profiles found by name ($MEMMODEL_HARDWARE_PATH): broken ones are listed as invalid
    (the others still shown) and refused by name with one line."""
    folder = str(Path(pool["existing"][0]).parent)
    monkeypatch.setenv("MEMMODEL_HARDWARE_PATH", folder)
    names = sorted(p.stem for p in Path(folder).iterdir() if p.suffix in (".yaml", ".yml"))
    for fmt in ("table", "json"):
        args = ["hardware", "list", "--format", fmt]
        r = run(*args)
        check(("hardware", "list"), args, r)
        assert "a100" in r.stdout
        if fmt == "table":
            assert "invalid:" in r.stdout
        else:
            assert any("error" in row for row in json.loads(r.stdout))
    for name in names:
        for args in (["compare", "--n", "256", "--d", "64", "--gpu", name], ["hardware", "show", name]):
            check(tuple(args[:2]) if args[0] == "hardware" else ("compare",), args, run(*args))


RECORD = REPO / "validation" / "h200" / "run-2" / "h200-validate.json.gz"


def test_the_record_to_damage_is_there():
    """The record the next test damages: a missing file fails here, it does not skip the fuzz."""
    assert RECORD.is_file(), f"{RECORD.relative_to(REPO)} is gone: point RECORD at a validate record"
    assert read_json(RECORD)["cases"]


@fuzz_settings(60)
@given(data=st.data(), fmt=st.sampled_from(["table", "json", "markdown"]))
def test_fuzz_validate_rescore_of_damaged_records(run, tmp_path, data, fmt):
    """``validate --rescore`` (no GPU) of a record with keys dropped, renamed or of the wrong type."""
    record = read_json(RECORD)
    record = data.draw(mutated(record))
    path = tmp_path / "record.json"
    path.write_text(json.dumps(record, default=str), encoding="utf-8")
    args = ["validate", "--rescore", str(path), "--format", fmt]
    check(("validate",), args, run(*args))


@fuzz_settings(150)
@given(
    name=st.sampled_from(sorted(BASE)),
    cut=st.floats(0, 1),
    junk_bytes=st.binary(max_size=12),
    drop_line=st.integers(0, 80),
)
def test_fuzz_corrupted_profile_bytes(run, tmp_path, name, cut, junk_bytes, drop_line):
    """Profile files with bytes inserted, a line removed, or cut short: malformed YAML, non-UTF-8."""
    raw = (CALIBRATED if name == "h200-calibrated" else HARDWARE / f"{name}.yaml").read_bytes()
    lines = raw.splitlines(keepends=True)
    if drop_line < len(lines):
        del lines[drop_line]
    raw = b"".join(lines)
    at = int(len(raw) * cut)
    raw = raw[:at] + junk_bytes + raw[at:]
    path = tmp_path / "corrupt.yaml"
    path.write_bytes(raw)
    for args in (["hardware", "validate", str(path)], ["compare", "--n", "256", "--d", "64", "--gpu", str(path)]):
        check(tuple(args[:2]) if args[0] == "hardware" else ("compare",), args, run(*args))


# ---------------------------------------------------------------------------------------
# The "Done when": grep the outputs of a fuzz batch for tracebacks


def test_grep_finds_no_traceback_in_fuzz_outputs(run, pool, tmp_path):
    """A fuzz batch (in process and as real processes) writes every output to files;
    ``grep -r Traceback`` over them finds nothing."""
    folder = tmp_path / "outputs"
    folder.mkdir()
    seen: list[tuple[list[str], Any]] = []

    @fuzz_settings(150)
    @given(command=st.sampled_from(PRESENT), data=st.data())
    def batch(command: tuple[str, ...], data: st.DataObject) -> None:
        args = data.draw(invocation(command, pool))
        result = run(*args)
        seen.append((args, result))
        check(command, args, result)

    batch()
    for i, (args, result) in enumerate(seen):
        text = f"$ memmodel {' '.join(args)}\n{result.stdout}\n{result.stderr}"
        (folder / f"cli-{i:04d}.txt").write_text(text, encoding="utf-8", errors="backslashreplace")
    # real processes: what an interpreter prints at exit never reaches CliRunner
    bad_profile = next(p for p in pool["existing"] if p.endswith("binary.yaml"))
    for i, args in enumerate(
        [
            [],
            ["compare", "--n", str(10**30), "--d", "64", "--format", "json"],
            ["compare", "--n", "nan", "--d", "64"],
            ["compare", "--n", "64", "--d", "64", "--gpu", bad_profile],
            ["hardware", "validate", bad_profile, str(HARDWARE / "a100.yaml")],
            ["hardware", "show", "h100"],
        ]
    ):
        p = subprocess.run([sys.executable, "-m", "memmodel", *args], capture_output=True, cwd=REPO, timeout=60)
        assert p.returncode in (0, 1, 2), (args, p.stderr)
        (folder / f"proc-{i:02d}.txt").write_bytes(p.stdout + b"\n" + p.stderr)
    grep = shutil.which("grep")
    if grep:
        found = subprocess.run([grep, "-r", "-l", "Traceback", str(folder)], capture_output=True, text=True)
        assert found.returncode == 1, found.stdout  # 1: no line matched
    assert not [f for f in folder.iterdir() if b"Traceback" in f.read_bytes()]
    assert len(list(folder.iterdir())) >= len(seen) + 6


def test_fuzzed_commands_exist():
    """The fuzz covers compare, hardware and validate --list at least (sweep/roofline when present)."""
    assert {("compare",), ("hardware", "show"), ("hardware", "validate"), ("validate",)} <= set(PRESENT)
