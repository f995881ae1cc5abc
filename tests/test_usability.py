"""What a new user tripped on (issue 12), one test or more per item: sweep parity with compare,
--model, repeated options, output files, honest output and help."""

from __future__ import annotations

import csv
import io
import json
import os
import stat
from pathlib import Path

import click
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memmodel import Workload, compare, load_profile
from memmodel.cli import cli
from memmodel.options import options_for
from memmodel.sweep import Grid, evaluate

from .conftest import HARDWARE, REPO


def one_line_error(r, code: int = 2) -> str:
    assert r.exit_code == code, (r.exit_code, r.output)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("memmodel: error: "), r.stderr
    assert r.stdout == ""
    return lines[0]


def csv_rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


# ---------------------------------------------------------------------------------------
# 1. sweep parity: every workload and model option of compare is an axis


def _options(command: click.Command) -> set[str]:
    return {p.opts[0] for p in command.params if isinstance(p, click.Option)}


def test_every_compare_option_is_a_sweep_axis():
    compare_options = _options(cli.commands["compare"]) - {"--format", "--help"}
    assert compare_options <= _options(cli.commands["sweep"]), compare_options - _options(cli.commands["sweep"])


def test_sweep_decode_against_the_kv_length(run):
    r = run("sweep", "--n", "1", "--n-kv", "4096:131072:x2", "--d", "128", "--heads", "32", "--kv-heads", "8",
            "--dtype", "fp16", "--gpu", "h200", "--format", "csv")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    rows = csv_rows(r.stdout)
    assert [int(x["n_kv"]) for x in rows[::2]] == [4096 * 2**k for k in range(6)]  # 4096 · 2^0 … 2^5 = 131072
    assert {x["n"] for x in rows} == {"1"}
    profile = load_profile("h200")
    for std, til in zip(rows[::2], rows[1::2]):
        w = Workload(n=1, n_kv=int(std["n_kv"]), d=128, heads=32, kv_heads=8, dtype="fp16")
        c = compare(w, profile)
        assert int(std["hbm_bytes"]) == c.standard.traffic.hbm_bytes
        assert int(til["hbm_bytes"]) == c.tiled.traffic.hbm_bytes
        assert int(til["splits"]) == c.tiled.traffic.params["splits"]
        assert til["implementation"] == c.options.implementation == "sdpa-cudnn"  # PyTorch 2.11's choice on an H200
    # the table puts N_kv in a column and N = 1 above it
    r = run("sweep", "--n", "1", "--n-kv", "4096:131072:x2", "--d", "128", "--dtype", "fp16", "--gpu", "h200")
    assert r.exit_code == 0 and "N 1" in r.stdout.splitlines()[0] and "N_kv" in r.stdout.splitlines()[1]


def test_sweep_causal_is_a_flag_or_a_list(run):
    r = run("sweep", "--n", "1024:32768:x2", "--d", "128", "--causal", "--format", "csv")
    assert r.exit_code == 0, r.stderr
    assert {x["causal"] for x in csv_rows(r.stdout)} == {"True"} and len(csv_rows(r.stdout)) == 2 * 6  # 1024 … 32768
    r = run("sweep", "--n", "1024:32768:x2", "--d", "128", "--causal", "off,on", "--backward", "--format", "jsonl")
    assert r.exit_code == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert [x["causal"] for x in rows[::12]] == [False, True] and {x["backward"] for x in rows} == {True}
    r = run("sweep", "--n", "512", "--d", "64", "--causal", "maybe")
    assert "'maybe' is not on or off" in one_line_error(r)


def test_sweep_options_reach_every_row(run):
    args = ["sweep", "--n", "2048", "--d", "64", "--dtype", "fp16", "--gpu", "h200", "--format", "csv"]
    r = run(*args, "--l2", "on,off", "--impl", "paper,triton", "--block-q", "64", "--block-kv", "32,64",
            "--dropout", "0,0.1", "--ctas-per-sm", "1")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    rows = csv_rows(r.stdout)
    assert len(rows) == 2 * 2 * 2 * 2 * 2  # l2 × impl × block_kv × dropout, two algorithms each
    tiled = rows[1::2]
    assert {(x["l2"], x["implementation"], x["block_kv"], x["dropout"]) for x in tiled} == {
        (l2, impl, bkv, p) for l2 in ("on", "off") for impl in ("paper", "triton") for bkv in ("32", "64")
        for p in ("0.0", "0.1")
    }  # fmt: skip
    assert {x["block_q"] for x in tiled} == {"64"} and {x["ctas_per_sm"] for x in tiled} == {"1"}


def test_sweep_skips_what_a_setting_cannot_run_and_says_so(run):
    r = run("sweep", "--n", "1024,4096", "--n-kv", "2048", "--d", "64", "--causal", "off,on", "--format", "csv")
    assert r.exit_code == 0, r.stderr
    assert "causal: skipped 1 of 2 workloads where n_kv < n" in r.stderr
    assert len(csv_rows(r.stdout)) == 2 * 3  # non-causal: both; causal: N = 1024 only
    r = run(
        "sweep", "--n", "1", "--n-kv", "4096", "--d", "128", "--tiled", "fa1,fa2", "--splits", "4", "--format", "csv"
    )
    assert r.exit_code == 0, r.stderr
    assert "skipped tiled fa1: splits applies to the fa2 variant" in r.stderr
    assert {x["variant"] for x in csv_rows(r.stdout)[1::2]} == {"fa2"}


@st.composite
def small_grids(draw):
    pick = lambda values, k=2: tuple(draw(st.lists(st.sampled_from(values), min_size=1, max_size=k, unique=True)))  # noqa: E731
    heads = pick((4, 8))
    return Grid(
        n=pick((1, 64, 512, 2048), 3),
        n_kv=draw(st.one_of(st.none(), st.just(pick((512, 4096))))),
        d=pick((64, 96, 128, 256)),
        batch=pick((1, 8)),
        heads=heads,
        kv_heads=pick((1, 2, 4)),
        dtypes=pick(("fp16", "fp32")),
        gpus=pick(("a100", "h200")),
        tiled=pick(("fa1", "fa2")),
        causal=pick((False, True)),
        backward=pick((False, True)),
        l2=pick(("on", "cold", "off"), 1),
        dropout=pick((0.0, 0.1), 1),
        standard=pick(("algorithm0", "eager")),
    )


PROFILES = {g: load_profile(g) for g in ("a100", "h200")}


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(grid=small_grids())
def test_every_sweep_row_is_what_compare_gives(grid):
    """The property that makes sweep a sweep of compare: whatever the grid mixes (decoding and
    prefill, head dims the auto implementation treats apart, GQA with a backward pass, the
    standard-attention variants), each row equals one scalar compare call with that row's
    workload and options: bytes exactly, times to rounding."""
    result = evaluate(grid, PROFILES, workers=1)
    rows = list(result.rows())
    for std, til in zip(rows[::2], rows[1::2]):
        w = Workload(n=std["n"], d=std["d"], batch=std["batch"], heads=std["heads"], kv_heads=std["kv_heads"],
                     n_kv=std["n_kv"], dtype=std["dtype"], causal=std["causal"], dropout=std["dropout"])  # fmt: skip
        p = PROFILES[std["gpu"]]
        options = options_for("auto", w, p, tiled=til["variant"], l2=std["l2"], backward=std["backward"])
        c = compare(w, p, options, standard=std["standard"])
        for row, ev in ((std, c.standard), (til, c.tiled)):
            for level in ("hbm", "l2", "sram"):
                for direction in ("read", "write"):
                    expected = ev.traffic.bytes(level=level, direction=direction)
                    assert row[f"{level}_{direction}_bytes"] == expected, (level, direction)
            assert row["flops"] == ev.traffic.flops and row["exp_ops"] == ev.traffic.exp_ops
            assert row["predicted_time_s"] == pytest.approx(ev.timing.time_s, rel=1e-12)
            assert row["bound"] == ev.timing.bound
            assert row["variant"] == ev.traffic.variant
        assert til["implementation"] == (c.options.implementation or "paper")
        assert til["splits"] == c.tiled.traffic.params.get("splits", 1)
        assert til["ctas_per_sm"] == c.tiled.traffic.params["ctas_per_sm"]


# ---------------------------------------------------------------------------------------
# 2. --model


def test_model_fills_heads_kv_heads_and_d_and_explicit_options_win(run):
    r = run("compare", "--model", "llama-3-8b", "--n", "4096", "--format", "json")
    assert r.exit_code == 0, r.stderr
    w = json.loads(r.stdout)["workload"]
    assert (w["heads"], w["kv_heads"], w["d"]) == (32, 8, 128)
    assert "--model llama-3-8b: 32 heads, 8 KV heads, head dim 128 (https://huggingface.co/" in r.stderr
    r = run("compare", "--model", "Llama-3-8B", "--n", "4096", "--kv-heads", "32", "--d", "64", "--format", "json")
    w = json.loads(r.stdout)["workload"]
    assert (w["heads"], w["kv_heads"], w["d"]) == (32, 32, 64)
    r = run("compare", "--model", "gemma-2-9b", "--n", "4096", "--dtype", "bf16", "--format", "json")
    assert json.loads(r.stdout)["workload"]["d"] == 256 and "sliding window" in r.stderr


def test_model_from_a_hugging_face_config(run, tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"num_attention_heads": 40, "num_key_value_heads": 8, "hidden_size": 5120}))
    r = run("compare", "--model", str(config), "--n", "2048", "--format", "json")
    assert r.exit_code == 0, r.stderr
    w = json.loads(r.stdout)["workload"]
    assert (w["heads"], w["kv_heads"], w["d"]) == (40, 8, 128)  # head dim 5120 / 40 = 128
    (tmp_path / "gpt").mkdir()
    (tmp_path / "gpt" / "config.json").write_text(json.dumps({"n_head": 12, "n_embd": 768}))  # GPT-2's keys
    r = run("compare", "--model", str(tmp_path / "gpt"), "--n", "1024", "--format", "json")  # a folder
    w = json.loads(r.stdout)["workload"]
    assert (w["heads"], w["kv_heads"], w["d"]) == (12, 12, 64)  # 768 / 12 = 64
    vlm = tmp_path / "vlm.json"
    vlm.write_text(json.dumps({"text_config": {"num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 256}}))
    w = json.loads(run("compare", "--model", str(vlm), "--n", "1024", "--format", "json").stdout)["workload"]
    assert (w["heads"], w["kv_heads"], w["d"]) == (16, 4, 256)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"num_attention_heads": 12, "num_key_value_heads": 5, "head_dim": 64}))
    assert "5 key/value heads do not divide the 12 attention heads" in one_line_error(
        run("compare", "--model", str(bad), "--n", "8")
    )


def test_model_reads_multi_head_latent_attention_in_its_two_forms(run):
    # a DeepSeek-V3 config.json: prefill as every head at d = 128 + 64, d_v = 128
    r = run("compare", "--model", "tests/data/errors/mla-config.json", "--n", "4096", "--format", "json")
    assert r.exit_code == 0, r.stderr
    w = json.loads(r.stdout)["workload"]
    assert (w["heads"], w["kv_heads"], w["d"], w["d_v"]) == (128, 128, 192, 128)
    assert "prefill form" in r.stderr
    # decoding (--n-kv > --n): the absorbed form, one latent K/V head of 512 + 64, V its first 512
    r = run("compare", "--model", "deepseek-v3", "--n", "1", "--n-kv", "4096", "--dtype", "bf16", "--format", "json")
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert (data["workload"]["kv_heads"], data["workload"]["d"], data["workload"]["d_v"]) == (1, 576, 512)
    assert "absorbed form" in r.stderr
    # the cache: (512 + 64) · 2 bytes = 1152 a token a layer, × 61 layers = 70272
    assert data["kv_cache"]["bytes_per_token_per_layer"] == 1152
    assert data["kv_cache"]["bytes_per_token"] == 1152 * 61
    # a config missing one of MLA's sizes: one line naming it
    line = one_line_error(run("compare", "--model", "tests/data/errors/mla-partial-config.json", "--n", "4096"))
    assert "kv_lora_rank marks multi-head latent attention, which also needs v_head_dim" in line


def test_model_in_sweep_roofline_validate_cases_and_the_table(run):
    r = run("sweep", "--model", "qwen2.5-7b", "--n", "1024,2048", "--format", "csv")
    assert r.exit_code == 0, r.stderr
    assert {(x["heads"], x["kv_heads"], x["d"]) for x in csv_rows(r.stdout)} == {("28", "4", "128")}
    r = run("roofline", "--model", "mistral-7b", "--n", "2048", "--format", "json")
    assert r.exit_code == 0 and json.loads(r.stdout)["workload"]["kv_heads"] == 8
    r = run("validate", "--list", "--case", "model=llama-3-70b,n=4096,batch=2", "--format", "json")
    case = json.loads(r.stdout)[0]
    assert (case["heads"], case["kv_heads"], case["d"], case["batch"]) == (64, 8, 128, 2)
    r = run("models", "--format", "json")
    models = {m["name"]: m for m in json.loads(r.stdout)}
    for name in ("gpt2", "llama-3-8b", "llama-3-70b", "llama-3.1-405b", "mistral-7b", "mixtral-8x7b", "qwen2.5-7b",
                 "qwen2.5-72b", "gemma-2-9b", "gemma-2-27b"):  # fmt: skip
        assert models[name]["source"].startswith("https://huggingface.co/") and models[name]["source"].endswith(
            "config.json"
        )
    assert "gemma-2-9b" in run("models").stdout


# ---------------------------------------------------------------------------------------
# 3. Repeated options, lists of GPUs, case-insensitive choices


@pytest.mark.parametrize(
    "args",
    [
        ["compare", "--n", "4096", "--n", "8192", "--d", "64"],
        ["compare", "--n", "4096", "--d", "64", "--dtype", "fp16", "--dtype", "bf16"],
        ["roofline", "--format", "json", "--format", "csv"],
        ["hardware", "show", "a100", "--format", "json", "--format", "table"],
        ["validate", "--list", "--gpu", "a100", "--gpu", "h200"],
        ["sweep", "--n", "512", "--d", "64", "--format", "csv", "--format", "jsonl"],
    ],
)
def test_a_single_value_option_given_twice_is_refused(run, args):
    line = one_line_error(run(*args))
    assert "given 2 times" in line and "give it once" in line


def test_every_single_value_option_refuses_repetition():
    from memmodel.cli.options import Option

    def walk(group: click.Group):
        for cmd in group.commands.values():
            yield from walk(cmd) if isinstance(cmd, click.Group) else [cmd]

    for cmd in walk(cli):
        for p in cmd.params:
            if isinstance(p, click.Option) and not p.is_flag:
                assert isinstance(p, Option), f"{cmd.name} {p.opts[0]}"


def test_compare_on_several_gpus_side_by_side(run, tmp_path):
    r = run("compare", "--n", "4096", "--d", "128", "--dtype", "fp16", "--gpu", "a100", "--gpu", "h200")
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("a100 vs h200 · ")
    # each column names what its rates rest on
    header = next(line for line in lines if line.split() == ["a100", "·", "transferred", "h200", "·", "measured"])
    assert header and "standard (Algorithm 0)" in r.stdout and "tiled: speed-up over a100" in r.stdout
    # two profiles of one name are told apart by their files
    mine = tmp_path / "a100.yaml"
    mine.write_text((HARDWARE / "a100.yaml").read_text().replace("2039 GB/s", "2400 GB/s"))
    twice = run("compare", "--n", "4096", "--d", "128", "--gpu", f"a100,{mine}")
    assert twice.exit_code == 0, twice.stderr
    assert "a100 (a100.yaml) ·" in twice.stdout and "a100 (bundled) ·" in twice.stdout
    data = json.loads(run("compare", "--n", "4096", "--d", "128", "--gpu", "a100,h200", "--format", "json").stdout)
    assert data["schema"] == "memmodel.compare-gpus/1"
    assert [g["hardware"]["name"] for g in data["gpus"]] == ["a100", "h200"]
    assert {g["schema"] for g in data["gpus"]} == {"memmodel.compare/1"}
    one = json.loads(run("compare", "--n", "4096", "--d", "128", "--gpu", "h200", "--format", "json").stdout)
    assert one["schema"] == "memmodel.compare/1" and one == data["gpus"][1]  # one GPU: as always
    rows = csv_rows(run("compare", "--n", "4096", "--d", "128", "--gpu", "a100,h200", "--format", "csv").stdout)
    assert [x["gpu"] for x in rows] == ["a100"] * 6 + ["h200"] * 6  # qk, softmax, pv, total; fa2_fwd, total


def test_one_rule_for_lists_of_gpus(run):
    for command in (["compare", "--n", "1024", "--d", "64"], ["roofline"], ["sweep", "--n", "1024", "--d", "64"]):
        comma = run(*command, "--gpu", "a100,h200", "--format", "csv")
        repeated = run(*command, "--gpu", "a100", "--gpu", "h200", "--format", "csv")
        assert comma.exit_code == 0 and comma.stdout == repeated.stdout, command
        assert {x["gpu"] for x in csv_rows(comma.stdout)} == {"a100", "h200"}, command


def test_choices_are_case_insensitive(run):
    r = run(
        "compare", "--n", "1024", "--d", "64", "--dtype", "BF16", "--l2", "OFF", "--impl", "Paper", "--format", "JSON"
    )
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert (data["workload"]["dtype"], data["options"]["l2"], data["options"]["implementation"]) == (
        "bf16",
        "off",
        "paper",
    )
    r = run("sweep", "--n", "512", "--d", "64", "--dtype", "FP16,Bf16", "--tiled", "FA2", "--format", "CSV")
    assert r.exit_code == 0 and {x["dtype"] for x in csv_rows(r.stdout)} == {"fp16", "bf16"}
    assert run("hardware", "list", "--format", "JSON").exit_code == 0


def test_group_options_after_the_command_say_where_they_go(run):
    line = one_line_error(run("compare", "-q", "--n", "4096", "--d", "64"))
    assert "No such option '-q' for compare" in line and "memmodel -q compare" in line


# ---------------------------------------------------------------------------------------
# 4. Output files


def test_sweep_output_format_follows_the_suffix(run, tmp_path):
    base = ["sweep", "--n", "512,1024", "--d", "64"]
    for suffix, check in (
        (".csv", lambda t: t.startswith("gpu,dtype,")),
        (".jsonl", lambda t: [json.loads(x)["n"] for x in t.splitlines()][::2] == [512, 1024]),
        (".json", lambda t: [x["n"] for x in json.loads(t)][::2] == [512, 1024]),
        (".txt", lambda t: t.startswith("Sweep · ")),  # no format in the name: --format's, a table
    ):
        out = tmp_path / f"big{suffix}"
        r = run(*base, "-o", str(out))
        assert r.exit_code == 0 and r.stdout == "" and check(out.read_text()), suffix
    line = one_line_error(run(*base, "-o", str(tmp_path / "other.csv"), "--format", "jsonl"))
    assert "is csv by its suffix, but --format is jsonl" in line
    assert not (tmp_path / "other.csv").exists()
    r = run(*base, "-o", "-", "--format", "csv")
    assert r.exit_code == 0 and r.stdout.startswith("gpu,") and "wrote" not in r.stderr
    assert json.loads(run(*base, "--format", "json").stdout)[0]["algorithm"] == "standard"


def test_plot_and_output_share_one_overwrite_rule(run, tmp_path):
    pytest.importorskip("matplotlib")
    plot = tmp_path / "roofline.png"
    plot.write_bytes(b"old")
    line = one_line_error(run("roofline", "--plot", str(plot)))
    assert f"{plot}: already exists; use --force to overwrite it" in line and plot.read_bytes() == b"old"
    r = run("roofline", "--plot", str(plot), "--force", "--format", "json")
    assert r.exit_code == 0 and plot.read_bytes()[:4] == b"\x89PNG"
    chart = tmp_path / "sweep.svg"
    chart.write_text("old")
    assert "already exists" in one_line_error(run("sweep", "--n", "512", "--d", "64", "--plot", str(chart)))
    assert chart.read_text() == "old"


def test_force_replaces_only_regular_files(run, tmp_path):
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    for suffix, option in ((".csv", "-o"), (".png", "--plot")):
        link = tmp_path / f"link{suffix}"
        link.symlink_to(target)
        fifo = tmp_path / f"pipe{suffix}"
        os.mkfifo(fifo)
        folder = tmp_path / f"folder{suffix}"
        folder.mkdir()
        cases = [(link, "is a symbolic link, not a regular file"), (fifo, "is a named pipe, not a regular file"),
                 (folder, "is a folder")]  # fmt: skip
        if option == "-o" and os.path.exists("/dev/null"):
            cases.append((Path("/dev/null"), "is a device, not a regular file"))  # as root, --force kept it too
        for path, fragment in cases:
            line = one_line_error(run("sweep", "--n", "512", "--d", "64", option, str(path), "--force"))
            assert fragment in line, (path, option, line)
        assert link.is_symlink() and stat.S_ISFIFO(os.lstat(fifo).st_mode) and folder.is_dir()
    assert target.read_text() == "keep me"


def test_an_unwritable_folder_is_named_by_the_users_path(run, tmp_path, monkeypatch):
    import tempfile

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(tmp_path / ".out.csv.abc123.tmp"))

    monkeypatch.setattr(tempfile, "mkstemp", refuse)  # as a folder that refuses new files would
    out = tmp_path / "out.csv"
    line = one_line_error(run("sweep", "--n", "512", "--d", "64", "-o", str(out)), code=1)
    assert line == f"memmodel: error: {out}: cannot write in the folder {tmp_path} (Permission denied)"
    if os.geteuid() != 0:  # root writes anywhere
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o555)
        line = one_line_error(run("sweep", "--n", "512", "--d", "64", "-o", str(ro / "x.csv")), code=1)
        assert f"{ro / 'x.csv'}: cannot write: the folder {ro} is not writable" in line


def test_every_output_path_is_checked_before_any_work(run, tmp_path):
    r = run("roofline", "--plot", str(tmp_path / "nodir" / "x.png"))
    assert "the folder" in one_line_error(r, code=1)  # no table printed first
    out = tmp_path / "ok.csv"
    r = run("sweep", "--n", "512", "--d", "64", "-o", str(out), "--plot", str(tmp_path / "nodir" / "x.png"))
    assert r.exit_code == 1 and not out.exists()
    if os.path.isdir("/proc/self"):  # a folder no file can be made in, whatever access() says (as root: yes)
        line = one_line_error(run("sweep", "--n", "512", "--d", "64", "-o", str(out), "--plot", "/proc/x.png"), code=1)
        assert line.startswith("memmodel: error: /proc/x.png: cannot write") and not out.exists()
    same = tmp_path / "same.png"
    line = one_line_error(
        run("sweep", "--n", "512", "--d", "64", "-o", str(same), "--format", "csv", "--plot", str(same))
    )
    assert "name the same file" in line


def test_one_atomic_writer():
    """Only memmodel/fileio.py makes temporary files and renames them over outputs."""
    offenders = []
    for path in (REPO / "memmodel").rglob("*.py"):
        text = path.read_text()
        if path.name != "fileio.py" and any(x in text for x in ("os.replace(", "mkstemp(", ".savefig(path")):
            offenders.append(str(path.relative_to(REPO)))
    assert offenders == []
    assert not (REPO / "memmodel" / "cli" / "files.py").exists()


# ---------------------------------------------------------------------------------------
# 5. Honest output and help


def test_roofline_and_sweep_print_the_caveats(run, tmp_path):
    # a user's CDNA 3 profile that gives no exp rate (the bundled one gives AMD's compiler's)
    mine = yaml.safe_load((HARDWARE / "mi300x.yaml").read_text())
    del mine["datasheet"]["compute"]["exp"]
    no_exp = tmp_path / "mi300x.yaml"
    no_exp.write_text(yaml.safe_dump(mine))
    r = run("roofline", "--gpu", f"{no_exp},a100", "--format", "json")
    assert r.exit_code == 0 and "mi300x gives no exp rate" in r.stderr
    gpus = json.loads(r.stdout)["gpus"]
    assert "mi300x gives no exp rate: exponentials are counted at the FP32 peak." in gpus[0]["caveats"]
    assert not any("launch overhead" in line for line in gpus[0]["caveats"] + gpus[1]["caveats"])  # the H200's
    # an implementation the profile has measured nothing for: said, in the notes and the JSON
    datasheet = str(REPO / "validation" / "h200" / "h200-datasheet.yaml")
    args = ("compare", "--n", "4096", "--d", "128", "--dtype", "fp16", "--impl", "sdpa-flash")
    r = run(*args, "--gpu", datasheet, "--format", "json")
    uncalibrated = "h200-datasheet has no measured efficiency for sdpa-flash"
    assert uncalibrated in r.stderr and any(uncalibrated in line for line in json.loads(r.stdout)["caveats"])
    assert "gives no mma.sync rate for fp16" in r.stderr  # Hopper: mma.sync code runs below the peak
    calibrated = str(REPO / "validation" / "h200" / "h200-calibrated.yaml")
    r = run("compare", "--n", "4096", "--d", "128", "--dtype", "fp16", "--gpu", calibrated)
    assert "no measured" not in r.stderr
    r = run("sweep", "--n", "4096", "--d", "128", "--dtype", "fp16", "--impl", "sdpa-flash", "--gpu", datasheet)
    assert r.stderr.count(uncalibrated) == 1
    r = run(
        "sweep", "--n", "512:4096:x2", "--d", "64,128", "--gpu", str(no_exp), "--dtype", "fp16,bf16", "--format", "csv"
    )
    notes = r.stderr.splitlines()
    assert notes.count("memmodel: mi300x gives no exp rate: exponentials are counted at the FP32 peak.") == 1  # once
    assert any("--impl auto:" in line for line in notes)


def _captured_figures(monkeypatch):
    import memmodel.report.plots as plots

    figures = []
    monkeypatch.setattr(plots, "save", lambda fig, path, **kw: figures.append(fig))
    return figures


def test_plot_titles_name_the_whole_workload(run, monkeypatch, tmp_path):
    pytest.importorskip("matplotlib")
    figures = _captured_figures(monkeypatch)
    r = run("roofline", "--model", "llama-3-8b", "--n", "4096", "--causal", "--backward", "--dtype", "bf16",
            "--plot", str(tmp_path / "r.png"), "--format", "json")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    title = figures[-1].axes[0].get_title(loc="left")
    for part in ("heads 32 (kv 8)", "d 128", "bf16", "causal", "forward + backward", "L2 on"):
        assert part in title, (part, title)
    r = run("sweep", "--model", "llama-3-8b", "--n", "1024:8192:x2", "--causal", "--backward", "--dtype", "bf16",
            "--gpu", "a100,h200", "--plot", str(tmp_path / "s.png"), "--format", "csv")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    title = figures[-1]._suptitle.get_text().replace("\n", " · ")
    for part in ("heads 32 (kv 8)", "d 128", "causal", "forward + backward"):
        assert part in title, (part, title)


def test_plot_labels_do_not_overlap(run, monkeypatch, tmp_path):
    pytest.importorskip("matplotlib")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.text import Annotation

    figures = _captured_figures(monkeypatch)
    assert run("roofline", "--gpu", "a100,h100-sxm,h200", "--n", "4096", "--d", "64", "--dtype", "fp16", "--batch",
               "4", "--heads", "16", "--plot", str(tmp_path / "r.png"), "--format", "json").exit_code == 0  # fmt: skip
    assert run("sweep", "--n", "512:131072:x2", "--d", "64,128", "--dtype", "fp16", "--gpu", "h200",
               "--plot", str(tmp_path / "s.png"), "--format", "csv").exit_code == 0  # fmt: skip
    for fig in figures:
        renderer = FigureCanvasAgg(fig).get_renderer()
        for ax in fig.axes:
            boxes = [t.get_window_extent(renderer) for t in ax.texts if isinstance(t, Annotation) and t.get_text()]
            clashes = [(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1 :] if a.overlaps(b)]
            assert clashes == []


def test_validate_rescore_works_from_any_folder(run, tmp_path, monkeypatch):
    record = REPO / "validation" / "h200" / "final" / "h200-default.json.gz"
    monkeypatch.chdir(tmp_path)
    r = run("validate", "--rescore", str(record), "--format", "stats")
    assert r.exit_code == 0, r.stderr
    assert r.stdout.startswith("| quantity | median abs error |") and "FlashAttention speed-up" in r.stdout
    r = run("validate", "--rescore", str(record), "--format", "json")
    assert json.loads(r.stdout)["profile"]["name"] == "h200-calibrated"
    line = one_line_error(
        run("validate", "--rescore", str(REPO / "tests" / "data" / "errors" / "record-elsewhere.json"))
    )
    assert "give it with --gpu PATH" in line


def test_help_texts_match_the_choices(run):
    def walk(group: click.Group, path=()):
        for name, cmd in group.commands.items():
            yield from walk(cmd, (*path, name)) if isinstance(cmd, click.Group) else [((*path, name), cmd)]

    for path, cmd in walk(cli):
        for p in cmd.params:
            if isinstance(p, click.Option) and p.name == "fmt":
                for choice in p.type.choices:
                    assert f"{choice}:" in p.help, (path, choice)
                if "csv" not in p.type.choices:
                    assert "CSV" not in p.help, path
    help_text = run("validate", "--help").stdout
    assert "markdown:" in help_text and "summary:" in help_text and "stats:" in help_text


def test_hardware_list_peaks_to_three_significant_digits(run):
    rows = {line.split()[0]: line for line in run("hardware", "list").stdout.splitlines()[1:]}
    # the rates predictions use: b200's and a100's published BF16 MAMF (1745 and 271.2 TFLOP/s, 3 digits:
    # 1.75 PFLOP/s and 271 TFLOP/s); a100's 2.039 TB/s × the H200's share 0.943 = 1.92 TB/s
    assert "1.75 PFLOP/s" in rows["b200"] and "271 TFLOP/s" in rows["a100"] and "1.92 TB/s" in rows["a100"]
    assert rows["a100"].split()[-1] == "transferred" and rows["h200"].split()[-1] == "measured"
    assert "derived" in rows["h100-sxm"]
    data = {r["name"]: r for r in json.loads(run("hardware", "list", "--format", "json").stdout)}
    assert (
        data["a100"]["hbm_datasheet_bandwidth_bytes_per_s"] == 2.039e12
        and data["a100"]["rates"] == "other-architecture"
    )


def test_compare_csv_carries_the_workload_columns(run):
    r = run("compare", "--n", "1", "--n-kv", "8192", "--d", "128", "--heads", "32", "--kv-heads", "8", "--batch", "2",
            "--dtype", "fp16", "--gpu", "h200", "--format", "csv")  # fmt: skip
    rows = csv_rows(r.stdout)
    for key, value in (("n", "1"), ("n_kv", "8192"), ("d", "128"), ("batch", "2"), ("heads", "32"), ("kv_heads", "8"),
                       ("dtype", "fp16"), ("causal", "False"), ("gpu", "h200")):  # fmt: skip
        assert {x[key] for x in rows} == {value}, key
    assert [x["implementation"] for x in rows if x["kernel"] == "total"] == ["", "sdpa-cudnn"]  # auto on an H200


def test_more_ctas_than_shared_memory_holds_is_refused(run):
    line = one_line_error(run("compare", "--n", "4096", "--d", "128", "--dtype", "fp16", "--ctas-per-sm", "1000"))
    # a 128×64 tile at d = 128 in fp16: (128 + 2·64) · 128 · 2 = 65,536 bytes; 167,936 // 65,536 = 2 fit the A100
    assert "(B_r + 2·B_c)·d·e = 65,536 bytes" in line and "choose at most 2" in line
    assert run("compare", "--n", "4096", "--d", "128", "--dtype", "fp16", "--ctas-per-sm", "2").exit_code == 0
    line = one_line_error(run("sweep", "--n", "512", "--d", "64,128", "--dtype", "fp16", "--ctas-per-sm", "1000"))
    assert "choose at most" in line


def test_splits_on_a_prefill_that_fills_the_gpu_is_warned_about(run):
    r = run("compare", "--n", "4096", "--d", "128", "--heads", "16", "--dtype", "fp16", "--splits", "4")
    # 1 · 16 · ⌈4096/64⌉ = 1024 CTAs fill the A100's 2 · 108 = 216 slots
    assert r.exit_code == 0 and "warning: --splits 4 on a prefill (N = 4096" in r.stderr and "1,024 CTAs" in r.stderr
    r = run("compare", "--n", "1", "--n-kv", "32768", "--d", "128", "--dtype", "fp16", "--splits", "4")
    assert r.exit_code == 0 and "warning" not in r.stderr  # decoding: what split-KV is for
    r = run("sweep", "--n", "1,4096", "--n-kv", "4096", "--d", "128", "--heads", "16", "--dtype", "fp16",
            "--splits", "4", "--format", "csv")  # fmt: skip
    assert r.exit_code == 0 and r.stderr.count("warning: --splits 4 on a prefill") == 1


# ---------------------------------------------------------------------------------------
# 7. Start-up


def test_the_cli_starts_without_the_sweep_engine_or_plotting():
    """compare's cold start stays within 1.5× of importing numpy, yaml, click and rich
    (benchmarks/bench_startup.py measures it): the command line loads no sweep engine
    (multiprocessing), no matplotlib and no rich until a command needs them."""
    import subprocess
    import sys

    code = (
        "import sys; from memmodel.cli import cli; "
        "print(sorted(m for m in ('memmodel.sweep', 'multiprocessing', 'matplotlib', 'rich', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == "[]"


def test_an_implementations_own_occupancy_is_not_refused_as_if_the_user_gave_it(run):
    # cuDNN's decoding kernel runs 2 CTAs per SM at d = 256 (Nsight Compute); the model's tile
    # check, (B_r + 2·B_c)·d·e = (2 + 2·128)·256·2 = 132,096 bytes, holds 1 in 233,472: that
    # check is for a --ctas-per-sm the user gives, not for the implementation's own figure
    args = ("compare", "--n", "1", "--n-kv", "8192", "--batch", "16", "--heads", "8", "--kv-heads", "4",
            "--d", "256", "--dtype", "bf16", "--gpu", "h200", "--impl", "sdpa-cudnn")  # fmt: skip
    assert run(*args).exit_code == 0
    assert "choose at most 1" in one_line_error(run(*args, "--ctas-per-sm", "2"))
    r = run("sweep", "--n", "1", "--n-kv", "8192", "--d", "128,256", "--heads", "8", "--kv-heads", "4",
            "--dtype", "bf16", "--gpu", "h200", "--impl", "sdpa-cudnn")  # fmt: skip
    assert r.exit_code == 0, r.output


def test_plain_text_is_only_used_for_what_rich_prints_as_is():
    from memmodel.cli.terminal import _plain_text

    assert _plain_text("qk [bold]Q[/bold] ⌈N/128⌉ · B×H") == "qk Q ⌈N/128⌉ · B×H"  # narrow symbols pass
    for unsafe in ("日本", "a 😀", "ᄀ", ":smile:", "a\\b"):  # wide (from U+1100), emoji codes, escapes
        assert _plain_text(unsafe) is None, unsafe
    assert _plain_text("") == ""


def test_two_profiles_of_one_name_are_refused_where_rows_could_not_tell_them_apart(run, tmp_path):
    mine = tmp_path / "a100.yaml"
    mine.write_text((HARDWARE / "a100.yaml").read_text())
    for command in (["sweep", "--n", "1024", "--d", "64"], ["roofline"]):
        r = run(*command, "--gpu", f"a100,{mine}")
        assert r.exit_code == 2, command
        assert r.stderr.strip().splitlines()[-1] == (
            f"memmodel: error: --gpu: two profiles are named 'a100' (bundled and {mine}), which {command[0]}'s rows "
            "would not tell apart: give one another name (name: in its YAML)"
        )
    other = tmp_path / "mine.yaml"
    other.write_text((HARDWARE / "a100.yaml").read_text().replace("name: a100", "name: a100-mine"))
    assert run("sweep", "--n", "1024", "--d", "64", "--gpu", f"a100,{other}").exit_code == 0
