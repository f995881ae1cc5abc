"""Sliding-window (local) causal attention: the blocks a kernel visits, the pairs it keeps,
the options that take a window and those that refuse it."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from memmodel import Workload
from memmodel.cli import cli
from memmodel.errors import WorkloadError
from memmodel.flops import convention_flops, window_pairs
from memmodel.hardware import load_profile
from memmodel.model import compare
from memmodel.traffic.blocks import band, diagonal_blocks, visited_blocks, window_kv_bytes

from .conftest import REPO


def _brute(n: int, n_kv: int, b_r: int, b_c: int, window: int) -> tuple[int, int]:
    """(visited, partly masked) pairs, element by element."""
    off, visited, masked = n_kv - n, 0, 0
    for i in range(-(-n // b_r)):
        rows = range(i * b_r, min(n, (i + 1) * b_r))
        for j in range(-(-n_kv // b_c)):
            seen = [r + off - window < k <= r + off for r in rows for k in range(j * b_c, min(n_kv, (j + 1) * b_c))]
            visited += any(seen)
            masked += any(seen) and not all(seen)
    return visited, masked


shapes = st.tuples(
    st.integers(1, 160), st.integers(0, 90), st.sampled_from([5, 16, 32, 64]), st.sampled_from([7, 16, 64, 128])
)


@settings(max_examples=150, deadline=None)
@given(shapes, st.data())
def test_the_band_is_what_the_mask_keeps(shape, data):
    n, extra, b_r, b_c = shape
    n_kv = n + extra
    window = data.draw(st.integers(1, n_kv))
    visited, whole = band(n, n_kv, b_r, b_c, window)
    assert (int(visited.sum()), int((visited - whole).sum())) == _brute(n, n_kv, b_r, b_c, window)
    assert window_pairs(n, n_kv, window) == sum(min(window, r + n_kv - n + 1) for r in range(n))


@settings(max_examples=100, deadline=None)
@given(shapes)
def test_a_window_over_every_key_visits_what_causal_visits(shape):
    n, extra, b_r, b_c = shape
    n_kv = n + extra
    assert visited_blocks(n, n_kv, b_r, b_c, True, n_kv) == visited_blocks(n, n_kv, b_r, b_c, True)
    assert diagonal_blocks(n, n_kv, b_r, b_c, True, n_kv) == diagonal_blocks(n, n_kv, b_r, b_c, True)
    grid = diagonal_blocks(np.array([n, n]), np.array([n_kv, n_kv]), b_r, b_c, True)
    assert grid.tolist() == [diagonal_blocks(n, n_kv, b_r, b_c, True)] * 2


def test_a_last_q_block_of_one_row_masks_nothing():
    # N 129 over 128-row blocks: the last Q block is row 128 alone, which sees every key (N_kv 200:
    # keys 0..199, its own position 199): of block 1 (keys 128..199) nothing is masked. The diagonal
    # blocks are Q block 0's two (K/V block 0 on its diagonal, block 1 partly seen: rows 0..127 at
    # positions 71..198 see keys up to 71..198) = 2
    assert diagonal_blocks(129, 200, 128, 128, True) == 2
    # decoding one causal query against a ragged cache: nothing masked
    assert diagonal_blocks(1, 1000, 128, 128, True) == 0


def test_pinned_counts():
    # N 4096, 128 × 128 blocks, window 1024 = 8 blocks: Q block i visits min(i + 1, 9) K/V blocks,
    # 1 + ... + 8 + 24 · 9 = 252 of the causal 528; partly masked: the 32 diagonal blocks and the
    # 24 blocks the window's left edge cuts (i ≥ 8)
    assert visited_blocks(4096, 4096, 128, 128, True, 1024) == 252
    assert visited_blocks(4096, 4096, 128, 128, True) == 528
    assert diagonal_blocks(4096, 4096, 128, 128, True, 1024) == 56
    grid = visited_blocks(np.array([4096, 8192]), np.array([4096, 8192]), 128, 128, True, 1024)
    assert grid.tolist() == [252, 540]  # 8192: 36 + 56 · 9
    # decoding one query against 32768 keys with window 4096 reads the last 4096 keys only:
    # 1 (batch) · 8 (K/V heads) · 4096 · 128 · 2 bytes
    w = Workload(n=1, n_kv=32768, d=128, heads=32, kv_heads=8, dtype="bf16", causal=True, window=4096)
    assert window_kv_bytes(w, 128) == 8 * 4096 * 128 * 2
    # a window not on a block edge reads from the block holding its first key: key 32768 − 4000
    # = 28768 lies in block 224 (28672), so 32768 − 28672 = 4096 keys
    w = w.with_(window=4001)
    assert window_kv_bytes(w, 128) == 8 * 4096 * 128 * 2


def test_flops_by_convention_count_the_pairs_a_window_keeps():
    w = Workload(n=4096, d=128, heads=2, dtype="bf16", causal=True, window=1024)
    # pairs per head: 1 + 2 + ... + 1023 + 1024 · (4096 − 1023) = 523776 + 3146752 = 3670528
    assert window_pairs(4096, 4096, 1024) == 3670528
    assert convention_flops(w, backward=True)["forward"] == 4 * 2 * 3670528 * 128
    assert convention_flops(w, backward=True)["backward"] == 4 * 2 * 3670528 * 128 * 5 // 2


def test_the_workload_checks_its_window():
    with pytest.raises(WorkloadError, match="causal"):
        Workload(n=1024, d=64, window=256)
    with pytest.raises(WorkloadError, match="longer than the 1024 keys"):
        Workload(n=1024, d=64, causal=True, window=2048)
    with pytest.raises(WorkloadError, match="positive whole number"):
        Workload(n=1024, d=64, causal=True, window=0)
    assert Workload(n=1024, d=64, causal=True, window=1024).window is None  # every key: full causal
    assert Workload(n=1024, d=64, causal=True, window=256).to_dict()["window"] == 256


def test_a_window_moves_fewer_bytes_and_takes_less_time_than_full_causal():
    h200 = load_profile("h200")
    full = compare(Workload(n=16384, d=128, batch=2, heads=32, kv_heads=8, dtype="bf16", causal=True), h200)
    local = compare(
        Workload(n=16384, d=128, batch=2, heads=32, kv_heads=8, dtype="bf16", causal=True, window=1024), h200
    )
    assert local.options.implementation == "sdpa-flash"  # auto: FlashAttention-2's local kernels
    assert any("takes no window" in note for note in local.options.notes)
    assert local.tiled.traffic.flops < full.tiled.traffic.flops / 5
    assert local.tiled.timing.time_s < full.tiled.timing.time_s / 3
    k_hbm = [t.bytes for k in local.tiled.traffic.kernels for t in k.transfers if t.tensor == "K" and t.level == "hbm"]
    # at least the unique K (2 · 8 · 16384 · 128 · 2 bytes), at most what the CTAs request
    assert (
        67_108_864
        <= k_hbm[0]
        <= [t.bytes for k in local.tiled.traffic.kernels for t in k.transfers if t.tensor == "K" and t.level == "l2"][0]
    )


def _run(*args: str):
    return CliRunner().invoke(cli, list(args))


def test_cli_window_implies_causal_and_says_so():
    r = _run("compare", "--n", "4096", "--d", "128", "--dtype", "bf16", "--gpu", "h200", "--window", "1024")
    assert r.exit_code == 0, r.output
    assert "causal · window 1024" in r.output.splitlines()[0]
    r = _run(
        "compare",
        "--n",
        "4096",
        "--d",
        "128",
        "--dtype",
        "bf16",
        "--gpu",
        "h200",
        "--window",
        "1024",
        "--format",
        "json",
    )
    assert json.loads(r.stdout)["workload"]["window"] == 1024


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--window", "8192"], "window 8192 is longer than the 4096 keys"),
        (["--window", "1024", "--impl", "sdpa-cudnn"], "--impl sdpa-cudnn is not modelled with a sliding window"),
        (["--window", "1024", "--tiled", "fa1"], "flash-attn v1 (--tiled fa1) has no sliding window"),
        (["--window", "0"], "--window"),
        (["--window", "1024", "--gpu", "mi300x"], "AMD's local attention kernels (CK/aiter) are not modelled"),
    ],
)
def test_cli_refuses_what_it_cannot_model_with_one_line(extra, message):
    r = _run("compare", "--n", "4096", "--d", "128", "--dtype", "bf16", "--gpu", "h200", *extra)
    assert r.exit_code == 2
    assert message in r.output and "Traceback" not in r.output
    assert len([line for line in r.output.splitlines() if line.strip()]) <= 2


def test_sweep_rows_are_compare_s_numbers():
    r = _run(
        "sweep", "--n", "8192", "--d", "128", "--heads", "32", "--kv-heads", "8", "--dtype", "bf16", "--gpu", "h200",
        "--window", "1024,8192", "--format", "json",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    rows = [row for row in json.loads(r.stdout) if row["algorithm"] == "tiled"]
    assert [row["window"] for row in rows] == [1024, 8192]
    h200 = load_profile("h200")
    for row, window in zip(rows, (1024, None)):
        c = compare(Workload(n=8192, d=128, heads=32, kv_heads=8, dtype="bf16", causal=True, window=window), h200)
        assert row["hbm_bytes"] == c.tiled.traffic.hbm_bytes
        assert row["predicted_time_s"] == pytest.approx(c.tiled.timing.time_s, rel=1e-12)
    r = _run("sweep", "--n", "4096", "--d", "128", "--window", "1024", "--causal", "off", "--dtype", "bf16")
    assert r.exit_code == 2 and "causal" in r.output


def _config(**extra):
    return {"num_attention_heads": 32, "num_key_value_heads": 8, "hidden_size": 4096, "num_hidden_layers": 32, **extra}


def test_configs_windows_are_used_or_refused_never_ignored():
    from memmodel.model_shapes import from_config

    assert from_config(_config(sliding_window=4096)).window == 4096  # Mistral-7B v0.1: every layer
    assert from_config(_config(sliding_window=4096, use_sliding_window=False)).window is None  # Qwen2 default
    assert from_config(_config(sliding_window=None)).window is None
    mixed = from_config(_config(sliding_window=512, layer_types=["sliding_attention", "full_attention"] * 16))
    assert (mixed.window, mixed.local_layers, mixed.global_layers, mixed.local_window) == (None, 16, 16, 512)
    assert "16 of its 32 layers" in mixed.note and "--window 512" in mixed.note and "--layers all" in mixed.note
    gemma3 = from_config(_config(sliding_window=1024, sliding_window_pattern=6, num_hidden_layers=48))
    assert (gemma3.local_layers, gemma3.global_layers) == (40, 8)  # every 6th layer global: 48 − 8
    llama4 = from_config(_config(attention_chunk_size=8192))  # Llama 4: every 4th layer NoPE, full attention
    assert (llama4.chunk, llama4.chunk_layers, llama4.window, llama4.local_layers) == (8192, 24, None, 0)
    assert "24 of its 32 layers" in llama4.note and "--chunk 8192" in llama4.note


def test_cli_takes_the_model_s_window_where_it_applies(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(_config(sliding_window=4096)))
    r = _run("compare", "--model", str(config), "--n", "16384", "--dtype", "bf16", "--gpu", "h200")
    assert r.exit_code == 0, r.output
    assert "window 4096" in r.output and "--window 4096" in r.output
    # shorter than the window: every key is in it, full causal attention
    r = _run("compare", "--model", str(config), "--n", "2048", "--dtype", "bf16", "--gpu", "h200")
    assert r.exit_code == 0, r.output
    head = [line for line in r.output.splitlines() if line.startswith("NVIDIA")][0]
    assert "causal" in head and "window" not in head
    r = _run("compare", "--model", str(config), "--n", "16384", "--window", "1024", "--dtype", "bf16", "--gpu", "h200")
    assert "window 1024" in r.output  # the option wins


def test_window_cases_round_trip_and_refuse_other_kernels():
    from memmodel.cases import parse_case

    case = parse_case("impl=sdpa-flash,batch=1,heads=32,kv_heads=8,n=8192,d=128,dtype=bf16,window=4096,backward=1")
    assert case.causal and case.window == 4096
    assert case.id == "sdpa-flash/b1h32kv8n8192d128/bf16-causal-win4096-bwd"
    assert parse_case(case.spec()) == case
    assert case.workload().window == 4096
    with pytest.raises(WorkloadError, match="only impl=sdpa-flash or impl=flex runs a sliding window"):
        parse_case("impl=sdpa-cudnn,n=4096,d=64,window=512")
    with pytest.raises(WorkloadError, match="n = n_kv"):
        parse_case("impl=sdpa-flash,n=1,n_kv=4096,d=64,window=512")


def test_the_local_block_cost_is_fitted_from_its_reference_record():
    from memmodel.calibration import kernel_costs
    from memmodel.fileio import read_json

    records = [read_json(str(REPO / path)) for path in kernel_costs.RECORDS["local_block_cost"]]
    assert len(kernel_costs._rows(records[0], "sdpa-flash")) == 8  # 4 head dims x 2 shapes
    # the bundled profile holds the fit of that record (scripts/update_profiles.py)
    fitted = kernel_costs.fitted(records)
    assert set(fitted) == {64, 96, 128, 256}
    assert dict(load_profile("h200").implementation("sdpa-flash").local_block_cost) == fitted
    # the cost moves only windowed forwards: a causal forward's time is the same with it or without
    h200 = load_profile("h200")
    plain = h200.with_implementation_figures("sdpa-flash", local_block_cost=())
    w = Workload(n=8192, d=64, heads=16, dtype="fp16", causal=True)
    assert compare(w, h200).tiled.timing.time_s == compare(w, plain).tiled.timing.time_s
    local = w.with_(window=512)
    assert compare(local, h200).tiled.timing.time_s > compare(local, plain).tiled.timing.time_s
    # with the window probe (its CTAs on both sides of the masking steps at d 64) the loop's cost is
    # fitted with it there, 0 at the others (their CTAs all on one side)
    assert len(kernel_costs._rows(records[1], "sdpa-flash")) == 13  # 9 windows at d 64, 4 at d 128
    both = kernel_costs.fitted_local(records)
    assert both[64][1] == pytest.approx(5.685e-6, rel=1e-3) and both[64][0] == pytest.approx(0.477, abs=1e-3)
    assert [both[d][1] for d in (96, 128, 256)] == [None, None, None]
    loop = load_profile("h200").implementation("sdpa-flash").kernel(64).local_loop_cost_s
    assert loop == pytest.approx(both[64][1])
    assert load_profile("h200").implementation("sdpa-flash").kernel(128).local_loop_cost_s == 0.0


def test_fa2_local_ctas_past_their_masking_steps():
    from memmodel.traffic.blocks import BlockSizes, fa2_local_loop_ctas

    # B_r = B_c = 128 (d 64): 2 masking steps; a Q block sees the W keys before each row, its
    # 128 rows span ⌈(W + 127) / 128⌉ K/V blocks when aligned: W = 128 → 2 (none past), 192 → 3
    b = BlockSizes(128, 128, 256, 256, "given", 0)
    w = Workload(n=32768, d=64, heads=64, kv_heads=8, dtype="bf16", causal=True, window=128)
    assert fa2_local_loop_ctas(w, b) == 0
    # 192: every Q block but the first two (they start at key 0: 1 and 2 blocks)
    assert fa2_local_loop_ctas(w.with_(window=192), b) == 256 - 2
    # B_c = 64 (d 128): 3 masking steps; W = 128 spans 4 blocks from the second Q block on (the first: 2)
    b64 = BlockSizes(128, 64, 256, 512, "given", 0)
    assert fa2_local_loop_ctas(w.with_(d=128), b64) == 256 - 1
    assert fa2_local_loop_ctas(w.with_(window=None), b) == 0
    # the kernel counts them over batch × heads, and only a window's forward pays for them
    h200 = load_profile("h200")
    k = compare(w.with_(window=192), h200, impl="sdpa-flash").tiled.traffic.kernels[-1]
    assert k.loop_ctas == 64 * 254
    slow = compare(w.with_(window=192), h200, impl="sdpa-flash").tiled.timing.time_s
    free = compare(
        w.with_(window=192), h200.with_implementation_figures("sdpa-flash", local_loop_cost_s=()), impl="sdpa-flash"
    ).tiled.timing.time_s
    # ⌈16384 / 264⌉ = 63 waves, 16256 of 16384 CTAs past their steps, 5.685 us each: 355.4 us
    assert slow - free == pytest.approx(63 * 16256 / 16384 * 5.685e-6, rel=1e-3)


def test_whole_model_counts_each_kind_of_layer():
    from memmodel.model_shapes import MODELS
    from memmodel.whole_model import layer_kinds, totals, whole_model

    w = Workload(n=16384, d=256, heads=16, kv_heads=8, dtype="bf16")
    kinds = layer_kinds(MODELS["gemma-2-9b"], w)
    # Gemma 2 9B: 42 layers, every other one local within 4096 tokens; a decoder: global layers causal
    assert [(k, n, x.causal, x.window) for k, n, x in kinds] == [("global", 21, True, None), ("local", 21, True, 4096)]
    # Llama 3 8B: 32 layers of full attention, as the workload says (not causal here)
    assert [(k, n, x.causal) for k, n, x in layer_kinds(MODELS["llama-3-8b"], w.with_(d=128))] == [
        ("global", 32, False)
    ]
    # Mistral 7B: every layer local; shorter than its window: full causal
    short = layer_kinds(MODELS["mistral-7b"], Workload(n=2048, d=128, heads=32, kv_heads=8, dtype="bf16"))
    assert [(k, n, x.window, x.causal) for k, n, x in short] == [("local", 32, None, True)]
    h200 = load_profile("h200")
    groups = whole_model(MODELS["gemma-2-9b"], w, lambda x: compare(x, h200))
    total = totals(groups)
    one = [g.comparison.tiled.timing.time_s for g in groups]
    assert total["layers"] == 42
    assert total["tiled"]["predicted_time_s"] == pytest.approx(21 * one[0] + 21 * one[1], rel=1e-12)
    assert total["tiled"]["hbm_bytes"] == sum(g.count * int(g.comparison.tiled.traffic.hbm_bytes) for g in groups)


def test_cli_layers_all():
    r = _run("compare", "--model", "gemma-2-9b", "--n", "16384", "--dtype", "bf16", "--gpu", "h200", "--layers", "all")
    assert r.exit_code == 0, r.output
    assert "gemma-2-9b, 42 layers" in r.output and "window 4096" in r.output and "total" in r.output
    r = _run(
        "compare", "--model", "gemma-2-9b", "--n", "16384", "--dtype", "bf16", "--gpu", "h200", "--layers", "all",
        "--format", "json",
    )  # fmt: skip
    data = json.loads(r.stdout)
    assert data["schema"] == "memmodel.compare-model/1" and data["layers"] == 42
    assert [(g["kind"], g["count"], g["window"]) for g in data["groups"]] == [("global", 21, None), ("local", 21, 4096)]
    tiled = [g["comparison"]["algorithms"][1]["predicted_time_s"] for g in data["groups"]]
    assert data["totals"]["tiled"]["predicted_time_s"] == pytest.approx(21 * tiled[0] + 21 * tiled[1], rel=1e-12)
    r = _run(
        "compare", "--model", "gemma-2-9b", "--n", "16384", "--dtype", "bf16", "--gpu", "h200", "--layers", "all",
        "--format", "csv",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[0] == "kind,count,window,algorithm,hbm_bytes,flops,predicted_time_s,layers_time_s,chunk"
    assert [line.split(",")[:4] for line in lines[1:]] == [
        ["global", "21", "", "standard"],
        ["global", "21", "", "tiled"],
        ["local", "21", "4096", "standard"],
        ["local", "21", "4096", "tiled"],
    ]
    assert float(lines[4].split(",")[7]) == pytest.approx(tiled[1] * 21, rel=1e-9)
    for extra, message in (
        ([], "--layers all needs --model"),
        (["--model", "gemma-2-9b", "--gpu", "a100"], "--layers all takes one --gpu"),
        (["--model", "gemma-2-9b", "--context-parallel", "2"], "--layers all with --context-parallel"),
    ):
        r = _run("compare", "--n", "4096", "--d", "128", "--dtype", "bf16", "--gpu", "h200", "--layers", "all", *extra)
        assert r.exit_code == 2 and message in r.output and "Traceback" not in r.output


def test_sweep_layers_all_rows_are_compare_s_totals():
    r = _run(
        "sweep", "--model", "gemma-2-9b", "--n", "4096,16384", "--dtype", "bf16", "--gpu", "h200", "--layers", "all",
        "--format", "json",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    assert "21 global + 21 local (window 4096)" in r.stderr
    for n in (4096, 16384):
        c = _run(
            "compare", "--model", "gemma-2-9b", "--n", str(n), "--dtype", "bf16", "--gpu", "h200", "--layers", "all",
            "--format", "json",
        )  # fmt: skip
        totals = json.loads(c.stdout)["totals"]
        std, til = [row for row in rows if row["n"] == n]
        assert til["hbm_bytes"] == totals["tiled"]["hbm_bytes"]
        assert til["predicted_time_s"] == pytest.approx(totals["tiled"]["predicted_time_s"], rel=1e-9)
        assert std["predicted_time_s"] == pytest.approx(totals["standard"]["predicted_time_s"], rel=1e-9)
        assert til["ratio_predicted_time_s"] == pytest.approx(std["predicted_time_s"] / til["predicted_time_s"])
    for extra, message in (
        (["--d", "128"], "--layers all needs --model"),
        (["--model", "gemma-2-9b", "--window", "1024"], "--layers all takes the model's windows"),
    ):
        r = _run("sweep", "--n", "4096", "--dtype", "bf16", "--gpu", "h200", "--layers", "all", *extra)
        assert r.exit_code == 2 and message in r.output and "Traceback" not in r.output


def test_a_straddling_head_re_reads_its_window_at_the_tensors_own_bytes():
    """Gemma-2-style local layer (1 x 16 query heads over 8 K/V heads, N 8192, d 256, window 4096,
    bf16) on the H200: each Q-side tensor of the backward is re-read by at most the share its own
    rows give, not at the bytes a row holds of every Q-side tensor (the logsumexp, 4 bytes a row of
    the 2056 the tiles carry, came out 28 x its 0.5 MB before)."""
    from memmodel.cases import parse_case
    from memmodel.scoring import predicted_kernels

    case = parse_case("impl=sdpa-flash,batch=1,heads=16,kv_heads=8,n=8192,d=256,dtype=bf16,window=4096,backward=1")
    main = next(k for k in predicted_kernels(case, load_profile("h200")) if k.name == "fa2_bwd")
    hbm = {t.tensor: t.bytes for t in main.transfers if t.level == "hbm" and t.direction == "read"}
    lse = 16 * 8192 * 4  # 0.52 MB, read once at least
    q = 16 * 8192 * 256 * 2  # 67.1 MB
    assert lse <= hbm["lse"] <= 2 * lse and q <= hbm["Q"] <= 2 * q
    # the same re-read share for every Q-side tensor: the lse's is Q's
    assert hbm["lse"] / lse == pytest.approx(hbm["Q"] / q, rel=0.01)
    # the forward at batch 1: the query heads in flight (two of one group) hold one K/V head, so K is
    # read little past once (33.6 MB unique)
    fwd = next(k for k in predicted_kernels(case, load_profile("h200")) if k.name == "fa2_fwd")
    k_hbm = next(t.bytes for t in fwd.transfers if t.level == "hbm" and t.tensor == "K")
    assert 8 * 8192 * 256 * 2 <= k_hbm <= 1.25 * 8 * 8192 * 256 * 2


def test_the_causal_mask_counts_atens_split_launches():
    # 2 x 32 x 8192^2 fp16 scores (8 GiB) with a mask broadcast over the heads: offsets past 2^31 - 1
    # bytes split the iterator by heads, 64 -> 32 -> 16 heads of 134 MB (the last byte 2^31 - 1): 4 launches
    from memmodel.cases import parse_case
    from memmodel.scoring import predicted_kernels

    case = parse_case("impl=standard,batch=2,heads=32,n=8192,d=64,dtype=fp16,causal=1")
    mask = next(k for k in predicted_kernels(case, load_profile("h200")) if k.name == "mask")
    assert mask.launches == 4
    small = parse_case("impl=standard,batch=2,heads=32,n=4096,d=64,dtype=fp16,causal=1")
    assert next(k for k in predicted_kernels(small, load_profile("h200")) if k.name == "mask").launches == 1


def _l2_read(c, kernel, tensor):
    (t,) = [
        t
        for t in c.tiled.traffic.transfers
        if t.kernel == kernel and t.tensor == tensor and t.direction == "read" and t.level == "l2"
    ]
    return t.bytes


def test_fa3_and_fa4_run_their_local_kernels_over_the_band():
    h200, b200 = load_profile("h200"), load_profile("b200")
    # d 128, 1024 rows, a 128-key window: FA3's 128 x 128 tiles; Q block i (rows 128i..128i+127)
    # sees keys 128i-127..128i+127: blocks i-1 and i (block 0 alone for i = 0), 1 + 7 x 2 = 15
    # visited, each cut by an edge (all masked); K requested 15 x 128 keys x 128 x 2 bytes = 491,520
    w = Workload(n=1024, d=128, dtype="bf16", causal=True, window=128)
    c = compare(w, h200, impl="fa3")
    assert _l2_read(c, "fa2_fwd", "K") == 15 * 128 * 128 * 2
    (fwd,) = [k for k in c.tiled.traffic.kernels if k.name == "fa2_fwd"]
    assert fwd.diagonal_blocks == 15
    # FA4: its 256-row CTAs (two Q tiles) over the same band, with no CTA pairs (local)
    c4 = compare(w.with_(batch=4, heads=32), b200, impl="fa4")
    (t,) = [t for t in c4.tiled.traffic.transfers if t.kernel == "fa2_fwd" and t.tensor == "K" and t.level == "l2"]
    assert "CTA pairs" not in t.formula
    # the whole causal grid visits far more: windows cut FA3's K requests
    assert _l2_read(compare(w.with_(window=None), h200, impl="fa3"), "fa2_fwd", "K") > 2 * _l2_read(c, "fa2_fwd", "K")


@pytest.mark.parametrize(("d", "tile"), [(64, (192, 128)), (96, (192, 128)), (192, (128, 96)), (256, (128, 64))])
def test_fa3_takes_its_local_tiles(d, tile):
    # flash_attn.cute _tile_size_fwd_sm90(is_local=True): 192 x 128 to d 96, 128 x 96 to 192, 128 x 64 at 256
    from memmodel.implementations import workload_tiles

    assert (
        workload_tiles("fa3", Workload(n=8192, d=d, dtype="bf16", causal=True, window=1024), None, None, None) == tile
    )


def test_fa4_local_kernel_takes_the_non_causal_exp_tuning():
    from memmodel.implementations import fa4_exp_emulated_share
    from memmodel.timing import fa4_emulated

    b200 = load_profile("b200")
    w = Workload(n=8192, d=64, batch=2, heads=16, dtype="bf16", causal=True, window=1024)
    # flash_attn.cute resolves window_size=(W - 1, 0) to local, not causal: its tuning key is not causal
    assert fa4_emulated(w, b200) == fa4_exp_emulated_share(64, False, 8192, 10.0, False)
