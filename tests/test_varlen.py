"""Packed variable-length batches (``--seq-lens``): one row of documents, each attending only
within itself, as FlashAttention-2's varlen kernels run it."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from memmodel import Workload
from memmodel.cases import Case, parse_case
from memmodel.cli import cli
from memmodel.errors import WorkloadError
from memmodel.flops import convention_flops
from memmodel.hardware import load_profile
from memmodel.model import compare, tiled_traffic
from memmodel.options import options_for
from memmodel.timing import packed_lengths

H200 = load_profile("h200")
DOCS = (8192, 4096, 2048)


def _brute(seq_lens: tuple[int, ...], b_r: int, b_c: int, causal: bool) -> tuple[int, int]:
    """(visited, partly masked) block pairs of a packed row, element by element: blocks are tiled
    from each document's start (none straddles two), a pair is visited when some row of its Q
    block sees some key of its K/V block (same document; causal: key ≤ row)."""
    visited = masked = 0
    for length in seq_lens:
        for i in range(-(-length // b_r)):
            rows = range(i * b_r, min(length, (i + 1) * b_r))
            for j in range(-(-length // b_c)):
                keys = range(j * b_c, min(length, (j + 1) * b_c))
                seen = [not causal or k <= r for r in rows for k in keys]
                visited += any(seen)
                masked += any(seen) and not all(seen)
    return visited, masked


def _forward(seq_lens: tuple[int, ...], b_r: int, b_c: int, causal: bool, heads: int = 1):
    w = Workload(n=sum(seq_lens), d=16, heads=heads, dtype="fp16", causal=causal, seq_lens=seq_lens)
    opts = options_for("paper", w, H200, block_q=b_r, block_kv=b_c)
    return tiled_traffic(w, H200, opts).kernels[0]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(1, 150), min_size=1, max_size=5),
    st.sampled_from([16, 32, 64]),
    st.sampled_from([16, 64, 128]),
    st.booleans(),
)
def test_visited_and_masked_blocks_are_each_document_s_own(lens, b_r, b_c, causal):
    kernel = _forward(tuple(lens), b_r, b_c, causal)
    visited, masked = _brute(tuple(lens), min(b_r, max(lens)), min(b_c, max(lens)), causal)
    # the paper's algorithm clamps its blocks to each document; brute force with the longest's
    # clamp agrees only where no document is shorter than a block: compare per document instead
    per_doc = [_brute((n,), min(b_r, n), min(b_c, n), causal) for n in lens]
    assert kernel.blocks == sum(v for v, _ in per_doc)
    if causal:
        assert kernel.diagonal_blocks == sum(m for _, m in per_doc)
    if all(n >= max(b_r, b_c) for n in lens):
        assert (kernel.blocks, kernel.diagonal_blocks if causal else 0) == (visited, masked if causal else 0)


def test_pinned_grid_blocks_and_flops():
    w = Workload(n=sum(DOCS), d=128, heads=32, kv_heads=8, dtype="bf16", causal=True, seq_lens=DOCS)
    c = compare(w, H200, impl="sdpa-flash")
    fwd = c.tiled.traffic.kernels[0]
    # grid: ⌈8192/128⌉ Q blocks × 3 documents × 32 heads = 64 · 3 · 32 = 6144 CTAs (1024 + 1536 exit at once)
    assert fwd.ctas == 6144
    # causal, B_r = 128, B_c = 64, L a multiple of 128: Q block i visits 2(i + 1) blocks, T(T + 1) in all:
    # (64·65 + 32·33 + 16·17) · 32 heads = (4160 + 1056 + 272) · 32 = 175616
    assert fwd.blocks == 175616
    # run through FlashAttention-2's masking loop: a varlen launch is never Is_even_MN, so each CTA
    # masks ⌈128/64⌉ + 1 = 3 blocks (Q block 0 visits only 2): per document of T Q blocks 2 + 3(T − 1),
    # (191 + 95 + 47) · 32 heads = 10656 (the two blocks each diagonal cuts would be 7168)
    assert fwd.diagonal_blocks == 10656
    # FLOPs by convention, summed over documents: 4·L²·d/2 per head = 2 · 128 · 32 · (8192² + 4096² + 2048²)
    assert convention_flops(w)["forward"] == 2 * 128 * 32 * (8192**2 + 4096**2 + 2048**2) == 721_554_505_728
    # Q and O are the row's tokens once: 14336 · 32 · 128 · 2 bytes each
    q = [t for t in fwd.transfers if t.tensor == "Q" and t.level == "hbm"][0]
    assert q.bytes == 14336 * 32 * 128 * 2


def test_the_grid_s_ctas_past_a_document_s_end_do_nothing():
    # B_r = 128, B_c = 64, causal: 256 tokens are Q blocks of 2 and 4 K/V blocks; 128 tokens one of 2,
    # then a CTA past its end (0); two heads repeat the documents
    assert packed_lengths((256, 128), 128, 64, 2, True).tolist() == [2, 4, 2, 0] * 2
    assert packed_lengths((256, 100), 128, 64, 1, False).tolist() == [4, 4, 2, 0]


def test_one_document_is_the_plain_workload():
    for causal in (False, True):
        plain = Workload(n=8192, d=128, heads=32, kv_heads=8, dtype="bf16", causal=causal)
        one = plain.with_(seq_lens=(8192,))
        a, b = compare(plain, H200, impl="sdpa-flash"), compare(one, H200, impl="sdpa-flash")
        # the same bytes but the spills: a packed row runs the kernel that is not Is_even_MN, whose
        # CTAs spill their own measured bytes (64 Q blocks × 32 heads = 2048 CTAs)
        spills = [
            sum(int(t.bytes) for t in c.tiled.traffic.kernels[0].transfers if t.tensor == "spills" and t.level == "hbm")
            for c in (a, b)
        ]
        figures = H200.implementation("sdpa-flash")
        assert spills == [
            2048 * round(figures.spill_write_bytes_at(128, uneven=u, causal=causal)) for u in (False, True)
        ]
        assert a.tiled.traffic.hbm_bytes - spills[0] == b.tiled.traffic.hbm_bytes - spills[1]
        assert a.tiled.traffic.kernels[0].ctas == b.tiled.traffic.kernels[0].ctas
        assert a.standard.traffic.hbm_bytes == b.standard.traffic.hbm_bytes
        assert b.tiled.timing.time_s == pytest.approx(a.tiled.timing.time_s, rel=0.02)


def test_packing_moves_fewer_bytes_than_the_full_row_and_standard_sees_the_full_row():
    packed = Workload(n=sum(DOCS), d=128, heads=32, kv_heads=8, dtype="bf16", causal=True, seq_lens=DOCS)
    full = packed.with_(seq_lens=None)
    p, f = compare(packed, H200, impl="sdpa-flash"), compare(full, H200, impl="sdpa-flash")
    assert p.tiled.traffic.kernels[0].blocks < f.tiled.traffic.kernels[0].blocks
    assert p.tiled.timing.time_s < f.tiled.timing.time_s
    # standard attention: the whole row's N × N scores under the block-diagonal mask
    assert p.standard.traffic.hbm_bytes == f.standard.traffic.hbm_bytes
    assert any("block-diagonal" in a for a in p.assumptions)


def test_a_window_composes_within_each_document():
    w = Workload(n=12288, d=128, heads=8, dtype="bf16", causal=True, window=4096, seq_lens=(8192, 4096))
    docs = w.documents()
    assert [(d.n, d.window) for d in docs] == [(8192, 4096), (4096, None)]  # 4096 keys: the window covers them
    c = compare(w, H200, impl="sdpa-flash")
    parts = [compare(d, H200, impl="sdpa-flash").tiled.traffic.kernels[0].blocks for d in docs]
    assert c.tiled.traffic.kernels[0].blocks == sum(parts)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"batch": 2}, "batch must be 1"),
        ({"n": 100}, "must equal the sum of seq_lens (12288)"),
        ({"n_kv": 20000}, "decoding a packed batch is out of scope"),
        ({"seq_lens": (8192, 0)}, "positive whole numbers"),
    ],
)
def test_the_workload_checks_its_documents(changes, message):
    kw = {"n": 12288, "d": 64, "seq_lens": (8192, 4096)} | changes
    with pytest.raises(WorkloadError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Workload(**kw)


def _cli(*args: str):
    return CliRunner().invoke(cli, list(args))


def test_cli_takes_seq_lens_names_them_and_picks_sdpa_flash(tmp_path):
    base = ["compare", "--d", "128", "--heads", "32", "--kv-heads", "8", "--dtype", "bf16", "--gpu", "h200", "--causal"]
    r = _cli(*base, "--seq-lens", "8192,4096,2048")
    assert r.exit_code == 0, r.output
    assert "N 14336" in r.output and "docs 8192+4096+2048" in r.output
    assert "PyTorch runs the flash backend for nested jagged tensors" in r.output
    lens = tmp_path / "lens.txt"
    lens.write_text("8192\n4096, 2048\n\n# a comment\n")
    j = _cli(*base, "--seq-lens", f"@{lens}", "--format", "json")
    assert j.exit_code == 0, j.output
    out = json.loads(j.stdout)
    assert out["workload"]["seq_lens"] == [8192, 4096, 2048] and out["workload"]["n"] == 14336
    plain = json.loads(_cli(*base, "--n", "14336", "--format", "json").stdout)
    assert "seq_lens" not in plain["workload"]  # earlier outputs keep their keys


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--seq-lens", "8192,4096", "--n", "8192"], "--n 8192 is not the sum of --seq-lens (12288)"),
        (["--seq-lens", "8192,4096", "--batch", "2"], "--batch must be 1"),
        (["--seq-lens", "8192,4096", "--impl", "sdpa-cudnn"], "accepted are --impl sdpa-flash, flex, paper"),
        (["--seq-lens", "8192,4096", "--impl", "fa3"], "accepted are --impl sdpa-flash, flex, paper"),
        (["--seq-lens", "8192,4096", "--n-kv", "20000"], "out of scope"),
        (["--seq-lens", "8192,x"], "'x' is not a positive whole number"),
        (["--seq-lens", "8192,¹"], "is not a positive whole number"),
        (["--seq-lens", "@/nonexistent/lens.txt"], "cannot read it"),
        (["--seq-lens", "8192,4096", "--context-parallel", "2"], "--seq-lens with --context-parallel"),
    ],
)
def test_cli_refuses_what_it_cannot_model_with_one_line(extra, message):
    r = _cli("compare", "--d", "128", "--dtype", "bf16", "--gpu", "h200", *extra)
    assert r.exit_code == 2
    assert message in r.output and len(r.output.strip().splitlines()) == 1 and "Traceback" not in r.output


def test_sweep_takes_one_set_of_lengths_and_its_rows_are_compare_s_numbers():
    r = _cli(
        "sweep", "--seq-lens", "8192,4096,2048", "--d", "64,128", "--heads", "32", "--kv-heads", "8",
        "--dtype", "bf16", "--gpu", "h200", "--causal", "--format", "jsonl",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    tiled = [row for row in rows if row["algorithm"] == "tiled"]
    for row in tiled:
        w = Workload(n=14336, d=row["d"], heads=32, kv_heads=8, dtype="bf16", causal=True, seq_lens=DOCS)
        c = compare(w, H200, impl="sdpa-flash")
        assert row["hbm_bytes"] == c.tiled.traffic.hbm_bytes
        assert row["predicted_time_s"] == pytest.approx(c.tiled.timing.time_s, rel=1e-9)
    bad = _cli("sweep", "--seq-lens", "8192,4096", "--n", "1024:4096:x2", "--d", "64")
    assert bad.exit_code == 2 and "is not the sum of --seq-lens (12288)" in bad.output


def test_roofline_takes_seq_lens():
    r = _cli("roofline", "--seq-lens", "4096,2048", "--d", "128", "--dtype", "bf16", "--gpu", "h200", "--causal")
    assert r.exit_code == 0, r.output


def test_packed_cases_round_trip_and_refuse_other_kernels():
    c = parse_case("impl=sdpa-flash,heads=32,kv_heads=8,d=128,dtype=bf16,causal=1,seq_lens=4096+2048+1024+1024")
    assert c.n == 8192 and c.seq_lens == (4096, 2048, 1024, 1024)
    assert c.id == "sdpa-flash/b1h32kv8n8192d128/bf16-causal-docs4096+2048+1024+1024"
    assert parse_case(c.spec()) == c
    assert Case.from_dict(json.loads(json.dumps(c.to_dict()))) == c
    assert c.workload().seq_lens == c.seq_lens
    assert "seq_lens" not in parse_case("impl=sdpa-flash,n=4096,d=64").to_dict()  # earlier records' keys
    with pytest.raises(WorkloadError, match="only impl=sdpa-flash or impl=flex runs a packed row"):
        parse_case("impl=sdpa-cudnn,d=64,seq_lens=1024+1024")
    with pytest.raises(WorkloadError, match="is not their sum"):
        parse_case("impl=sdpa-flash,n=4096,d=64,seq_lens=1024+1024")


@pytest.mark.parametrize("name", ["h200-varlen-check", "h200-varlen-check-2"])
def test_the_varlen_check_cases_plan_and_their_predictions_name_them(name):
    """Each set's predictions, committed before it ran, name its cases one by one (they are
    history: the model has moved since the first set was measured, so they are not re-made)."""
    from .conftest import REPO

    r = _cli("validate", "--list", "--cases", str(REPO / f"validation/cases/{name}.txt"))
    assert r.exit_code == 0, r.output
    ids = [line.split()[0] for line in r.stdout.splitlines() if line.startswith("sdpa-flash/")]
    kept = (REPO / f"validation/h200/{name.removeprefix('h200-')}-predictions.txt").read_text().splitlines()
    predicted = [line.split()[0] for line in kept if line.startswith("sdpa-flash/")]
    assert len(ids) >= 11 and predicted == ids


def test_packed_lengths_tails_differ_with_mixed_lengths():
    # one long document among short ones leaves the long one's CTAs to finish alone
    from memmodel.timing import packed_tail_factor

    mixed = Workload(n=8192, d=128, heads=8, dtype="bf16", causal=True, seq_lens=(7168,) + (64,) * 16)
    even = Workload(n=8192, d=128, heads=8, dtype="bf16", causal=True, seq_lens=(1024,) * 8)
    assert packed_tail_factor(mixed, 128, 64, 132, 2, 0.8) >= packed_tail_factor(even, 128, 64, 132, 2, 0.8)
    assert np.isfinite(packed_tail_factor(mixed, np.array([128, 64]), 64, 132, 2, 0.8)).all()


@pytest.mark.parametrize(
    ("packed", "causal", "masked"),
    [
        # 128 documents of 512 at d 64 (128 × 128 tiles), causal: Q blocks visit 1, 2, 3, 4 blocks and
        # mask min(visited, ⌈128/128⌉ + 1 = 2): (1 + 2 + 2 + 2) · 128 = 896; the same tokens as a batch
        # of 128 (Is_even_MN): one block a Q block, 4 · 128 = 512
        (True, True, 896),
        (False, True, 512),
        # without causal masking a varlen CTA still masks its last block (the keys past its document):
        # 4 · 128 = 512; the even batch none
        (True, False, 512),
        (False, False, 0),
    ],
)
def test_fa2_forward_masks_as_its_code_does(packed, causal, masked):
    """flash_fwd_kernel.h: n_masking_steps = 1 without causal masking, ⌈B_r/B_c⌉ where Is_even_MN and
    causal, one more where not (cu_seqlens or lengths that are not multiples of the blocks)."""
    shape = dict(n=512 * 128, seq_lens=(512,) * 128) if packed else dict(n=512, batch=128)
    w = Workload(d=64, heads=1, dtype="bf16", causal=causal, **shape)
    assert compare(w, H200, impl="sdpa-flash").tiled.traffic.kernels[0].diagonal_blocks == masked


def test_fa2_forward_masking_of_lengths_not_multiples_of_its_blocks():
    # N = 1000 at d 128 (B_r = 128, B_c = 64), causal: Q block i's last row 128(i + 1) − 1 (999 for the
    # last) sees ⌊row / 64⌋ + 1 = 2, 4, …, 14, 16 blocks; each masks min(visited, ⌈128/64⌉ + 1 = 3):
    # 2 + 3 · 7 = 23 a head, · 64 · 2 heads = 2944 (a batch that fills the GPU: no split-KV)
    w = Workload(n=1000, d=128, heads=2, batch=64, dtype="bf16", causal=True)
    assert compare(w, H200, impl="sdpa-flash").tiled.traffic.kernels[0].diagonal_blocks == 2944
    # cuDNN's kernel is not FlashAttention-2's code: the blocks the mask cuts, one a Q block of its
    # 128 × 128 tiles, 8 a head, · 128 = 1024
    (main,) = [k for k in compare(w, H200, impl="sdpa-cudnn").tiled.traffic.kernels if k.name == "fa2_fwd"]
    assert main.diagonal_blocks == 1024


def _probe_record(rows):
    """A varlen probe record: (d, heads, kv heads, length, docs, packed, causal, seconds) per case."""
    cases = []
    for d, h, kv, length, count, packed, causal, t in rows:
        case = {"impl": "sdpa-flash", "d": d, "heads": h, "kv_heads": kv, "causal": causal, "dtype": "bf16"}
        case |= (
            {"n": length * count, "batch": 1, "seq_lens": [length] * count} if packed else {"n": length, "batch": count}
        )
        cases.append({"case": case, "timing": {"kernels": {"attention": t}}})
    return {"cases": cases, "device": "NVIDIA H200", "started": "2026-12-04T00:25:00+00:00"}


def test_the_uneven_causal_slowdown_is_each_packed_row_over_its_batched_twin():
    from memmodel.calibration import fa2_uneven

    record = _probe_record(
        [
            (64, 32, 8, 512, 32, True, True, 3.3e-4),  # over 2.2e-4: 1.5
            (64, 32, 8, 512, 32, False, True, 2.2e-4),
            (64, 64, 8, 512, 32, True, True, 6.4e-4),  # over 4.0e-4: 1.6; the median of 1.5 and 1.6: 1.55
            (64, 64, 8, 512, 32, False, True, 4.0e-4),
            (64, 32, 8, 300, 50, True, True, 1.0e-4),  # no twin: left out
            (64, 32, 8, 512, 32, True, False, 2.7e-4),  # not causal: left out
            (64, 32, 8, 512, 32, False, False, 2.6e-4),
            (128, 32, 8, 1024, 16, True, True, 6.0e-4),  # ⌈1024/128⌉ = 8 Q blocks: 6.0 / 5.0 = 1.2
            (128, 32, 8, 1024, 16, False, True, 5.0e-4),
        ]
    )
    assert fa2_uneven.fitted(record) == {64: {4: 1.55}, 128: {8: 1.2}}
    data = fa2_uneven.apply({"implementations": {"sdpa-flash": {}}}, record)
    figure = data["implementations"]["sdpa-flash"]["uneven_causal_slowdown_d64"]
    assert figure["value"] == {4: 1.55} and figure["source"] == fa2_uneven.SOURCE
    assert data["sources"][fa2_uneven.SOURCE]["date"] == "2026-12-04"


def test_the_uneven_causal_factor_interpolates_by_q_blocks_and_head_dim():
    import dataclasses

    from memmodel.hardware.profile import ImplementationFigures

    f = dataclasses.replace(
        ImplementationFigures("sdpa-flash"),
        uneven_causal_slowdown={64: ((1, 1.0), (4, 1.5)), 128: ((1, 1.0), (4, 1.3))},
    )
    # linear in log2(Q blocks): 2 blocks is halfway from 1 to 4 → 1.25 at d 64, 1.15 at d 128
    assert f.uneven_causal_factor(64, 2) == pytest.approx(1.25)
    assert f.uneven_causal_factor(128, 2) == pytest.approx(1.15)
    # clamped at the curve's ends; below the smallest head dim its curve
    assert f.uneven_causal_factor(32, 64) == pytest.approx(1.5)
    # d 96 sits log2(96/64) = 0.585 of the way from 64 to 128: 1.5 − 0.585 · 0.2 = 1.383 at 4 blocks
    assert f.uneven_causal_factor(96, 4) == pytest.approx(1.5 - 0.2 * np.log2(1.5))
    assert f.uneven_causal_factor(256, 4) is None  # never measured there
    assert ImplementationFigures("sdpa-flash").uneven_causal_factor(64, 4) is None


@pytest.mark.parametrize(
    ("shape", "expected"),
    [
        # d 64, documents of 512 (4 Q blocks): the H200 profile's figure at 4 blocks
        (dict(n=2048, seq_lens=(512,) * 4, d=64), ("d64", 4)),
        # documents of 128 and 512 (1 and 4 Q blocks), weighted by the blocks each visits (1 and 10)
        (dict(n=640, seq_lens=(128, 512), d=64), "mixed"),
        # a batch of 1000 tokens at d 128 (not a multiple of 128): its 8 Q blocks
        (dict(n=1000, batch=8, d=128), ("d128", 8)),
        (dict(n=1024, batch=8, d=128), None),  # even: the batched kernel
        (dict(n=2048, seq_lens=(512,) * 4, d=256), None),  # not measured at 256
    ],
)
def test_the_uneven_causal_slowdown_a_workload_takes(shape, expected):
    from memmodel.timing import uneven_causal_slowdown

    w = Workload(heads=8, dtype="bf16", causal=True, **shape)
    curves = H200.implementation_figures["sdpa-flash"].uneven_causal_slowdown
    got = uneven_causal_slowdown(w, H200, "sdpa-flash", w.d, 128, 64 if w.d == 128 else 128)
    if expected is None:
        assert got is None
    elif expected == "mixed":
        c = dict(curves[64])
        assert got == pytest.approx((c[1] * 1 + c[4] * 10) / 11)
    else:
        assert got == pytest.approx(dict(curves[int(expected[0][1:])])[expected[1]])
    # not causal, windowed, or another implementation: none
    assert uneven_causal_slowdown(w.with_(causal=False), H200, "sdpa-flash", w.d, 128, 64) is None
    assert uneven_causal_slowdown(w, H200, "sdpa-cudnn", w.d, 128, 64) is None


def test_the_varlen_runner_s_view_gradients_are_counted_in_its_predictions():
    """validate's varlen runner hands the op views of one request (q.transpose(1, 2)[0]): autograd
    makes dK, dV, dQ in its layout with a fill and a strided copy each, after the op's kernels."""
    from memmodel.scoring import RUNNER_GRAD_KERNELS, predicted_times, runner_grad_kernels

    docs = "+".join(["512"] * 32)
    case = parse_case(
        f"impl=sdpa-flash,heads=32,kv_heads=8,d=64,n=16384,dtype=bf16,causal=1,backward=1,seq_lens={docs}"
    )
    got = runner_grad_kernels(case, H200)
    assert tuple(got) == RUNNER_GRAD_KERNELS
    launch = H200.launch_overhead_s
    # dQ: 16384 tokens · 32 heads · 64 · 2 bytes = 67,108,864; dK, dV: 8 heads, 16,777,216 each
    assert got["grad_fill_q"] == pytest.approx(67_108_864 / 4.528e12 + launch)  # written once at the HBM rate
    assert got["grad_copy_k"] == pytest.approx(2 * 16_777_216 / 1.889e12 + launch)  # read + written, strided
    p = predicted_times(case, H200)
    assert list(p["kernels"])[-6:] == list(RUNNER_GRAD_KERNELS)  # after every kernel of the backward
    assert all(p["kernel_passes"][n] == "backward" for n in RUNNER_GRAD_KERNELS)
    # none for a batch or a forward
    batch = parse_case("impl=sdpa-flash,heads=32,d=64,n=512,batch=8,dtype=bf16,backward=1")
    forward = parse_case(f"impl=sdpa-flash,heads=32,kv_heads=8,d=64,n=16384,dtype=bf16,causal=1,seq_lens={docs}")
    assert runner_grad_kernels(batch, H200) == {} and runner_grad_kernels(forward, H200) == {}
