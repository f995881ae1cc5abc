"""Chunked local attention (Llama 4's attention_chunk_size): ``--chunk``, configs' chunked layers,
``--layers all``, sweep rows and validation cases."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from memmodel import compare
from memmodel.cases import parse_case
from memmodel.cli import cli
from memmodel.errors import WorkloadError
from memmodel.flops import convention_flops
from memmodel.hardware import load_profile
from memmodel.model_shapes import from_config
from memmodel.whole_model import layer_counts
from memmodel.workload import Workload, chunked


def _w(**kw):
    base = {"n": 20000, "d": 128, "batch": 2, "heads": 32, "kv_heads": 8, "dtype": "bf16", "causal": True}
    return Workload(**(base | kw))


def _run(*args):
    return CliRunner().invoke(cli, ["-q", *args])


def test_a_prefill_is_its_chunks_packed_into_one_row():
    w, line = chunked(_w(), 8192)
    # 20000 = 8192 + 8192 + 3616 a row; two rows: six documents, 40000 tokens, batch 1
    assert w.seq_lens == (8192, 8192, 3616, 8192, 8192, 3616)
    assert (int(w.n), int(w.n_kv_), int(w.batch), w.causal, w.chunked) == (40000, 40000, 1, True, (8192, 2))
    assert "6 chunks" in line and "8192-token chunk" in line
    assert w.to_dict()["chunk"] == 8192 and w.to_dict()["chunk_rows"] == 2


def test_a_decode_reads_only_its_chunk_s_keys():
    w, line = chunked(_w(n=1, n_kv=20000), 8192)
    # the token at position 19999 sees keys 16384..19999: (20000 − 1) mod 8192 + 1 = 3616
    assert (int(w.n), int(w.n_kv_), int(w.batch), w.seq_lens, w.chunked, w.causal) == (1, 3616, 2, None, None, False)
    assert "3616 keys" in line
    w, _ = chunked(_w(n=1, n_kv=16384), 8192)  # the last key closes a chunk: a whole chunk
    assert int(w.n_kv_) == 8192
    paged, _ = chunked(_w(n=1, n_kv=20000, page_size=16), 8192)  # its chunk's pages alone
    assert (int(paged.n_kv_), paged.page_size) == (3616, 16)


def test_a_chunk_covering_every_key_is_full_causal_attention():
    w, line = chunked(_w(n=8192, causal=False), 8192)
    assert (int(w.n), w.causal, w.seq_lens, w.chunked) == (8192, True, None, None)
    assert "full causal" in line


@pytest.mark.parametrize(
    ("kw", "chunk", "message"),
    [
        ({"n": 100}, 8192, "not modelled: give a prefill"),  # 100 new tokens over a cache of 20000
        ({"window": 4096}, 8192, "chunk with window"),
        ({"n": 16384, "n_kv": None, "batch": 1, "seq_lens": (8192, 8192)}, 4096, "chunk with seq_lens"),
        ({"n": 20000, "n_kv": 40000, "page_size": 16}, 8192, "chunk with page_size"),
        ({}, 0, "positive whole number"),
        ({}, True, "positive whole number"),
    ],
)
def test_chunks_it_cannot_model_are_refused(kw, chunk, message):
    w = _w(**({"n_kv": 20000} | kw))
    with pytest.raises(WorkloadError, match=message):
        chunked(w, chunk)


def test_the_tiled_kernel_is_the_packed_row_and_standard_attention_each_row_s():
    h200 = load_profile("h200")
    w, _ = chunked(_w(), 8192)
    c = compare(w, h200, impl="sdpa-flash")
    packed = compare(w.with_(chunked=None), h200, impl="sdpa-flash")
    assert float(c.tiled.time_s("kernel")) == float(packed.tiled.time_s("kernel"))
    assert int(c.tiled.traffic.hbm_bytes) == int(packed.tiled.traffic.hbm_bytes)
    # standard attention writes each row's 20000 × 20000 scores under its mask, not the packed
    # row's 40000 × 40000: half the bytes of the packed reading at batch 2
    per_row = compare(_w(), h200, impl="sdpa-flash").standard
    assert int(c.standard.traffic.hbm_bytes) == int(per_row.traffic.hbm_bytes)
    assert int(packed.standard.traffic.hbm_bytes) > 1.9 * int(c.standard.traffic.hbm_bytes)


@settings(max_examples=60, deadline=None, report_multiple_bugs=False)
@given(
    n=st.integers(1, 70000),
    chunk=st.integers(1, 70000),
    batch=st.integers(1, 4),
)
def test_chunks_cover_every_token_once_and_never_add_work(n, chunk, batch):
    w, _ = chunked(_w(n=n, batch=batch), chunk)
    full = _w(n=n, batch=batch)
    if w.seq_lens is not None:
        assert sum(w.seq_lens) == n * batch and max(w.seq_lens) <= chunk
    assert convention_flops(w)["total"] <= convention_flops(full)["total"]


def test_llama4_configs_count_their_chunked_layers():
    base = {"num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128, "num_hidden_layers": 48}
    default = from_config(base | {"attention_chunk_size": 8192})  # every 4th layer NoPE: 48 − 12
    assert (default.chunk, default.chunk_layers) == (8192, 36)
    assert layer_counts(default) == [("global", 12, None), ("chunked", 36, 8192)]
    flags = from_config(base | {"attention_chunk_size": 8192, "no_rope_layers": [1, 1, 0] * 16})
    assert flags.chunk_layers == 32
    types = ["chunked_attention", "full_attention"] * 24
    assert from_config(base | {"attention_chunk_size": 4096, "layer_types": types}).chunk_layers == 24
    every = from_config(base | {"attention_chunk_size": 8192, "no_rope_layer_interval": 2})
    assert every.chunk_layers == 24
    with pytest.raises(WorkloadError, match="no_rope_layers: a list of 0 and 1"):
        from_config(base | {"attention_chunk_size": 8192, "no_rope_layers": [2] * 48})
    none = from_config(base | {"attention_chunk_size": 8192, "no_rope_layers": [0] * 48})
    assert (none.chunk_layers, none.note) == (0, "")


def test_compare_takes_chunk_and_says_how_it_runs_it():
    r = _run("compare", "--model", "llama-3-8b", "--n", "20000", "--batch", "2", "--chunk", "8192", "--dtype", "bf16",
             "--gpu", "h200", "--format", "json")  # fmt: skip
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["workload"]["seq_lens"] == [8192, 8192, 3616, 8192, 8192, 3616]
    assert (data["workload"]["chunk"], data["workload"]["chunk_rows"]) == (8192, 2)
    r = CliRunner().invoke(
        cli, ["compare", "--model", "llama-3-8b", "--n", "20000", "--chunk", "8192", "--gpu", "h200"]
    )
    assert "--chunk 8192: each query sees the keys of its own 8192-token chunk" in r.stderr, r.output
    for extra, message in (
        (["--n", "100", "--n-kv", "20000"], "not modelled: give a prefill"),
        (["--n", "20000", "--window", "4096"], "--chunk with a sliding window"),
        (["--seq-lens", "8192,8192"], "--chunk with --seq-lens"),
        (["--n", "20000", "--context-parallel", "2"], "--chunk with --context-parallel"),
    ):
        r = _run("compare", "--model", "llama-3-8b", "--chunk", "4096", "--dtype", "bf16", "--gpu", "h200", *extra)
        assert r.exit_code == 2 and message in r.output and "Traceback" not in r.output, r.output


def test_layers_all_counts_chunked_and_global_layers(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"text_config": {"num_attention_heads": 40, "num_key_value_heads": 8,
                                                  "head_dim": 128, "num_hidden_layers": 48,
                                                  "attention_chunk_size": 8192}}))  # fmt: skip
    args = ("compare", "--model", str(config), "--n", "32768", "--dtype", "bf16", "--gpu", "h200", "--layers", "all")
    r = _run(*args, "--format", "json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    groups = [(g["kind"], g["count"], g["chunk"]) for g in data["groups"]]
    assert groups == [("global", 12, None), ("chunked", 36, 8192)]
    times = [g["comparison"]["algorithms"][1]["predicted_time_s"] for g in data["groups"]]
    assert data["totals"]["tiled"]["predicted_time_s"] == pytest.approx(12 * times[0] + 36 * times[1], rel=1e-12)
    # chunks of 8192 over 32768 causal keys: four causal squares of 8192², a quarter of the FLOPs
    flops = [g["comparison"]["algorithms"][1]["flops"] for g in data["groups"]]
    assert flops[1] * 4 == pytest.approx(flops[0], rel=0.02) and times[1] < times[0]  # diagonal blocks whole
    table = _run(*args)
    assert table.exit_code == 0 and "chunks of 8192" in table.output, table.output


def test_sweep_rows_are_compare_s():
    r = _run("sweep", "--model", "llama-3-8b", "--n", "16384,20000", "--chunk", "8192", "--dtype", "bf16",
             "--gpu", "h200", "--impl", "sdpa-flash", "--format", "json")  # fmt: skip
    assert r.exit_code == 0, r.output
    rows = [row for row in json.loads(r.stdout) if row["algorithm"] == "tiled"]
    assert [(row["n"], row["chunk"]) for row in rows] == [(16384, 8192), (20000, 8192)]
    h200 = load_profile("h200")
    for row in rows:
        w, _ = chunked(_w(n=row["n"], batch=1), 8192)
        assert row["predicted_time_s"] == pytest.approx(float(compare(w, h200, impl="sdpa-flash").tiled.time_s()))
    r = _run("sweep", "--d", "128", "--n", "4096", "--chunk", "1024", "--window", "512", "--gpu", "h200")
    assert r.exit_code == 2 and "--chunk with a sliding window" in r.output


def test_a_chunk_case_runs_the_packed_row():
    c = parse_case("impl=flex,model=llama-3-8b,n=20000,batch=2,dtype=bf16,chunk=8192,backward=1")
    assert (c.n, c.batch, c.causal, c.seq_lens) == (40000, 1, True, (8192, 8192, 3616) * 2)
    assert parse_case("impl=flex,model=llama-3-8b,n=4096,dtype=bf16,chunk=8192").seq_lens is None
    with pytest.raises(WorkloadError, match="chunk= takes a prefill"):
        parse_case("impl=flex,model=llama-3-8b,n=1,n_kv=4096,dtype=bf16,chunk=1024")


def test_the_2026_models_bundled_with_their_layer_kinds():
    from memmodel.model_shapes import load_model

    expected = {
        "llama-4-scout": [("global", 12, None), ("chunked", 36, 8192)],  # every 4th layer NoPE, full attention
        "llama-4-maverick": [("global", 12, None), ("chunked", 36, 8192)],
        "gemma-3-27b": [("global", 10, None), ("local", 52, 1024)],  # 62 layers, every 6th global
        "gemma-3-4b": [("global", 5, None), ("local", 29, 1024)],  # 34 layers
        "gpt-oss-120b": [("global", 18, None), ("local", 18, 128)],  # alternating
        "gpt-oss-20b": [("global", 12, None), ("local", 12, 128)],
        "qwen3-235b-a22b": [("global", 94, None)],
    }
    for name, kinds in expected.items():
        assert layer_counts(load_model(name)) == kinds, name
    assert (load_model("qwen3-30b-a3b").heads, load_model("qwen3-30b-a3b").kv_heads) == (32, 4)


def test_a_decoders_decode_step_sees_every_cached_key_in_its_full_layers():
    from memmodel.model_shapes import load_model
    from memmodel.whole_model import layer_kinds

    decode = Workload(n=1, n_kv=65536, d=64, batch=32, heads=64, kv_heads=8, dtype="bf16")
    kinds = {kind: w for kind, _, w in layer_kinds(load_model("gpt-oss-120b"), decode)}
    assert kinds["global"].causal is False and (kinds["local"].causal, kinds["local"].window) == (True, 128)
    prefill = decode.with_(n=4096, n_kv=None)
    assert {kind: w.causal for kind, _, w in layer_kinds(load_model("gpt-oss-120b"), prefill)}["global"] is True
    chunks = {kind: w for kind, _, w in layer_kinds(load_model("llama-4-scout"), decode.with_(n_kv=20000))}
    assert int(chunks["chunked"].n_kv_) == 3616  # (20000 − 1) mod 8192 + 1


def test_sweep_layers_all_sums_the_chunked_layers():
    args = ["sweep", "--model", "llama-4-scout", "--n", "16384", "--dtype", "bf16", "--gpu", "h200", "--layers", "all"]
    r = CliRunner().invoke(cli, [*args, "--format", "json"])
    assert r.exit_code == 0, r.output
    assert "12 global + 36 chunked (chunk 8192) layers summed" in r.stderr
    tiled = next(row for row in json.loads(r.stdout) if row["algorithm"] == "tiled")
    h200 = load_profile("h200")
    shape = Workload(n=16384, d=128, heads=40, kv_heads=8, dtype="bf16", causal=True)
    full = float(compare(shape, h200).tiled.time_s())
    chunks = float(compare(chunked(shape, 8192)[0], h200).tiled.time_s())
    assert tiled["predicted_time_s"] == pytest.approx(12 * full + 36 * chunks, rel=1e-9)
