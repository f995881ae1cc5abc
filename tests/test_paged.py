"""Paged KV caches (``--page-size``) with FlashInfer's and FlexAttention's kernels."""

from __future__ import annotations

import csv
import io
import re

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from memmodel import Workload, compare, load_profile
from memmodel.cases import Case, parse_case
from memmodel.cli import cli
from memmodel.errors import WorkloadError
from memmodel.scoring import KERNEL_PATTERNS
from memmodel.traffic import paged

H200 = load_profile("h200")


def llama_decode(batch: int = 8, n_kv: int = 4096, page_size: int | None = 16, **kw) -> Workload:
    return Workload(n=1, n_kv=n_kv, batch=batch, heads=32, kv_heads=8, d=128, dtype="bf16", page_size=page_size, **kw)


def kernel(c, name):
    return next(k for k in c.tiled.traffic.kernels if k.name == name)


def tensor_bytes(k, tensor, level="hbm"):
    return sum(t.bytes for t in k.transfers if t.tensor == tensor and t.level == level and t.direction == "read")


# ---------------------------------------------------------------------------------------
# The workload


def test_page_size_checked_at_the_door():
    with pytest.raises(WorkloadError, match="page_size must be a positive whole number"):
        llama_decode(page_size=0)
    with pytest.raises(WorkloadError, match="page_size with seq_lens"):
        Workload(n=8, d=64, seq_lens=(4, 4), page_size=16)
    with pytest.raises(WorkloadError, match="sliding window"):
        Workload(n=64, n_kv=128, d=64, causal=True, window=32, page_size=16)
    # no key for contiguous workloads: earlier outputs keep their JSON
    assert "page_size" not in llama_decode(page_size=None).to_dict()
    assert llama_decode().to_dict()["page_size"] == 16


# ---------------------------------------------------------------------------------------
# FlashInfer's plan, read off its sources


def test_flashinfer_decode_tile():
    # d = 128, bf16: vec_size = max(16 / 2, 128 / 32) = 8, bdx = 16; group 4: 128 threads, bdz = 128 / 64 = 2
    t = paged.flashinfer_decode_tile(128, 4, 2)
    assert (t["bdx"], t["bdy"], t["bdz"], t["tokens_per_iter"]) == (16, 4, 2, 8)
    # one query head: 4 tokens per bdx row, bdz = 128 / 16 = 8: 4 · 1 · 8 = 32 tokens an iteration
    assert paged.flashinfer_decode_tile(128, 1, 2)["tokens_per_iter"] == 32
    # d = 64: vec 8, bdx 8; group 8: 64 threads → 128, bdz = 2; smem 2·2·1·8·2·64·2 + max(1·128·8, 2·8·2·4) = 9216
    t = paged.flashinfer_decode_tile(64, 8, 2)
    assert (t["bdx"], t["bdz"], t["smem"]) == (8, 2, 2 * 2 * 8 * 2 * 64 * 2 + 1024)
    # d 128, group 4: 128 threads at the 56 registers ncu read: 65536 / 7168 = 9 CTAs per SM (threads
    # alone would allow 16); a pair not read (group 8) at 64 assumed: 65536 / 8192 = 8
    assert paged.flashinfer_decode_ctas_per_sm(paged.flashinfer_decode_tile(128, 4, 2), 228 * 1024, 128, 4) == 9
    assert paged.flashinfer_decode_ctas_per_sm(paged.flashinfer_decode_tile(128, 8, 2), 228 * 1024, 128, 8) == 8


def test_flashinfer_decode_chunks():
    # batch 8 × 8 K/V heads = 64 CTAs < 8 · 132 = 1056: split; 4096 / 16 = 256 pages, at least 128 / 16 = 8
    # a chunk; 8 · ⌈256 / mid⌉ · 8 ≤ 1056 → ⌈256 / mid⌉ ≤ 16 → 16 pages, 16 chunks
    assert paged.flashinfer_decode_chunks(8, 8, 256, 16, 1056) == (16, 16)
    # page size 1, one request of 1024 tokens: the lower bound, 128 pages, binds: 8 chunks
    assert paged.flashinfer_decode_chunks(1, 8, 1024, 1, 1056) == (8, 128)
    # 128 requests × 8 heads = 1024 CTAs: ⌈pages / mid⌉ ≤ 1, no split
    assert paged.flashinfer_decode_chunks(128, 8, 256, 16, 1056)[0] == 1
    assert paged.flashinfer_decode_chunks(256, 8, 256, 16, 1056) == (1, 256)  # the grid is full: no search


def test_flashinfer_prefill_plan():
    # 1024 new tokens × group 4 = 4096 packed rows > 64: 128-row tiles, 64-key tiles
    assert paged.flashinfer_fa2_tile_q(4096, 128) == 128
    assert paged.flashinfer_fa2_tile_kv(128) == 64
    assert paged.flashinfer_fa2_tile_q(7, 128) == 16  # decoding through the tensor cores, group 7
    # 32 tiles per request, 8 K/V heads: 2 · 132 / 8 = 33 ≥ 32 tiles · 1 chunk: no split
    assert paged.flashinfer_prefill_chunks(1, 8, 32, 512, 16, 132) == (1, 512)
    # one tile of one request: chunks of at least 8 pages until 33 CTAs a head: ⌈512 / mid⌉ ≤ 33 → 16 pages, 32
    assert paged.flashinfer_prefill_chunks(1, 8, 1, 512, 16, 132) == (32, 16)
    assert paged.flashinfer_fa3_tiles(128) == (128, 96) and paged.flashinfer_fa3_tiles(64) == (192, 96)


def test_flex_plan():
    # get_split_k: 132 // (1 · 8) · 2 = 32; 132 // (64 · 8) · 2 = 0 → 1
    assert paged.flex_split_kv(1, 8, 132) == 32
    assert paged.flex_split_kv(64, 8, 132) == 1
    assert paged.flex_forward_tiles("bf16", 128) == (128, 64)
    assert paged.flex_forward_tiles("fp16", 128) == (128, 128)
    assert paged.flex_forward_tiles("bf16", 96) == (128, 64)  # runs at 128


# ---------------------------------------------------------------------------------------
# Bytes


def test_flashinfer_decode_ledger():
    c = compare(llama_decode(), H200, impl="flashinfer")
    assert [k.name for k in c.tiled.traffic.kernels] == ["flashinfer_decode", "flashinfer_merge"]
    k = kernel(c, "flashinfer_decode")
    # every valid row once: 8 · 8 · 4096 · 128 · 2 = 67,108,864 bytes of K (and of V)
    assert tensor_bytes(k, "K") == tensor_bytes(k, "V") == 67_108_864
    # block table: 8 requests · 256 pages · 4 bytes = 8192 (256 sectors), requested by the 8 K/V heads
    assert tensor_bytes(k, "block_table") == 8192
    assert tensor_bytes(k, "block_table", "l2") == 8 * 8192
    # 9 CTAs an SM: 8 · ⌈256 / mid⌉ · 8 ≤ 9 · 132 = 1188 → ⌈256 / mid⌉ ≤ 18 → 15 pages, 18 chunks:
    # partial O in bf16, 8 · 32 · 18 · 128 · 2 = 1,179,648 bytes, logsumexp 8 · 32 · 18 · 4 = 18,432
    writes = {t.tensor: t.bytes for t in k.transfers if t.level == "hbm" and t.direction == "write"}
    assert writes == {"O_partial": 1_179_648, "lse_partial": 18_432}
    assert c.tiled.traffic.params["chunks"] == 18 and c.tiled.traffic.params["kv_layout"] == "NHD"
    assert k.ctas == 8 * 18 * 8  # requests · chunks · K/V heads


def test_flashinfer_decode_reads_an_fp8_cache_at_a_byte_and_converts_it():
    w = llama_decode()
    c16 = compare(w, H200, impl="flashinfer")
    c8 = compare(w.with_(kv_dtype="fp8"), H200, impl="flashinfer")
    k16, k8 = kernel(c16, "flashinfer_decode"), kernel(c8, "flashinfer_decode")
    # every valid row once at a byte an element: 8 · 8 · 4096 · 128 · 1 = 33,554,432 bytes of K (and V)
    assert tensor_bytes(k8, "K") == tensor_bytes(k8, "V") == 33_554_432
    # Q, O stay bf16: the same bytes; the dot products the same (8 · 32 · 4096 scores, 4 · 128 + 4 each)
    assert tensor_bytes(k8, "Q") == tensor_bytes(k16, "Q")
    scores = 8 * 32 * 4096
    assert k16.softmax_flops == k8.softmax_flops == scores * (4 * 128 + 4)
    # every thread converts what it reads for its own query head: K and V, 2 · 8 · 32 · 4096 · 128
    assert k16.converted_elements == 0 and k8.converted_elements == 2 * scores * 128
    # its tile is built for 1-byte loads: vec_size = max(16 / 1, 128 / 32) = 16, bdx = 8
    assert paged.flashinfer_decode_tile(128, 4, 1)["bdx"] == 8
    assert c8.tiled.traffic.params["kv_element_bytes"] == 1


def test_the_fp8_conversion_is_timed_at_the_measured_cost_an_element():
    # group 8 (64 heads on 8), 16 requests of 8192 keys: bound by the dot products on CUDA cores. The
    # conversion adds converted · kv_convert_flops FLOPs beside them, at the same efficiency
    w = llama_decode(batch=16, n_kv=8192).with_(heads=64)
    w8 = w.with_(kv_dtype="fp8")
    scores = 16 * 64 * 8192
    for per in (0.5, 2.0):
        p = H200.with_implementation_figures("flashinfer", kv_convert_flops=per)
        t16 = next(k for k in compare(w, p, impl="flashinfer").tiled.timing.kernels if k.name == "flashinfer_decode")
        t8 = next(k for k in compare(w8, p, impl="flashinfer").tiled.timing.kernels if k.name == "flashinfer_decode")
        dots = scores * (4 * 128 + 4)
        assert t8.terms["softmax"] == pytest.approx(t16.terms["softmax"] * (dots + per * 2 * scores * 128) / dots)
    # without a figure of its own, the house's count: KV_DEQUANT_FLOPS an element
    from memmodel.implementations import KV_DEQUANT_FLOPS

    bare = H200.with_implementation_figures("flashinfer", kv_convert_flops=None)
    t16 = next(k for k in compare(w, bare, impl="flashinfer").tiled.timing.kernels if k.name == "flashinfer_decode")
    t8 = next(k for k in compare(w8, bare, impl="flashinfer").tiled.timing.kernels if k.name == "flashinfer_decode")
    dots = scores * (4 * 128 + 4)
    assert t8.terms["softmax"] == pytest.approx(
        t16.terms["softmax"] * (dots + KV_DEQUANT_FLOPS * 2 * scores * 128) / dots
    )


def test_an_fp8_cache_decode_says_how_its_conversions_are_counted(run):
    out = run(
        "compare", "--n", "1", "--n-kv", "4096", "--batch", "8", "--heads", "32", "--kv-heads", "8", "--d", "128",
        "--dtype", "bf16", "--kv-dtype", "fp8", "--page-size", "16", "--impl", "flashinfer", "--gpu", "h200",
    )  # fmt: skip
    assert out.exit_code == 0, out.stderr
    assert "converted once per query head of the group" in out.stderr
    assert "implementations.flashinfer.kv_convert_flops" in out.stderr


def test_the_fp8_conversion_fit_and_the_profile_agree():
    import gzip
    import json
    from pathlib import Path

    from memmodel.calibration import flashinfer_fp8

    record = json.load(gzip.open(Path(__file__).resolve().parent.parent / flashinfer_fp8.RECORD, "rt"))
    # the probe's 10 FP8 decodes (groups 1, 2, 4, 8 at d 64 and 128; group 4 also at 4 and 64 requests)
    assert len(flashinfer_fp8.rows(record)) == 10
    bundled = H200.implementation("flashinfer").kv_convert_flops
    assert flashinfer_fp8.fit(record, H200) == pytest.approx(bundled, rel=0.02)
    assert 0.1 < bundled < 5


@pytest.mark.parametrize(
    "shape",
    [
        ["--n", "1", "--heads", "64", "--kv-heads", "4"],  # group 16: the tensor-core decode
        ["--n", "128", "--heads", "32", "--kv-heads", "8", "--causal"],  # a chunked prefill
    ],
)
def test_flashinfer_refuses_an_fp8_cache_outside_its_cuda_core_decode(shape):
    rest = ["--d", "128", "--n-kv", "4096", "--batch", "8", "--dtype", "bf16", "--kv-dtype", "fp8"]
    out = CliRunner().invoke(
        cli, ["compare", *shape, *rest, "--page-size", "16", "--impl", "flashinfer", "--gpu", "h200"]
    )
    assert out.exit_code == 2
    assert "an FP8 K/V cache is modelled in its CUDA-core decode" in out.output


def test_no_split_no_merge():
    c = compare(llama_decode(batch=128), H200, impl="flashinfer")
    assert [k.name for k in c.tiled.traffic.kernels] == ["flashinfer_decode"]
    writes = {t.tensor for t in c.tiled.traffic.kernels[0].transfers if t.level == "hbm" and t.direction == "write"}
    assert writes == {"O"}


@settings(max_examples=40, deadline=None)
@given(n_kv=st.integers(1, 20000), page=st.sampled_from([16, 32, 64, 128, 256]))
def test_partial_last_page(n_kv, page):
    """FlashInfer masks its loads at the sequence's end (a partial page reads its valid rows);
    flex loads the last page whole (the mask_mod masks its tail)."""
    w = llama_decode(batch=2, n_kv=n_kv, page_size=page)
    fi = kernel(compare(w, H200, impl="flashinfer"), "flashinfer_decode")
    fx = kernel(compare(w, H200, impl="flex"), "flex_decode")
    row = 2 * 8 * 128 * 2  # two requests · 8 K/V heads · one row of d · e
    assert tensor_bytes(fi, "K") == n_kv * row
    assert tensor_bytes(fx, "K") == -(-n_kv // page) * page * row
    assert (tensor_bytes(fx, "K") == tensor_bytes(fi, "K")) == (n_kv % page == 0)


@settings(max_examples=25, deadline=None)
@given(page=st.sampled_from([1, 2, 8, 16, 64, 256]), n_kv=st.integers(256, 65536))
def test_scatter_is_not_charged(page, n_kv):
    """Pages only add the block table: FlashInfer's K/V bytes do not depend on the page size, and
    the time never falls below the HBM bytes at the measured bandwidth."""
    w = llama_decode(batch=4, n_kv=n_kv, page_size=page)
    c = compare(w, H200, impl="flashinfer")
    k = kernel(c, "flashinfer_decode")
    assert tensor_bytes(k, "K") == 4 * 8 * n_kv * 256
    table = tensor_bytes(k, "block_table")
    assert table == -(-(4 * -(-n_kv // page) * 4) // 32) * 32
    assert c.tiled.timing.time_s >= c.tiled.traffic.hbm_bytes / H200.hbm.bandwidth_bytes_per_s


def test_kernels_each_path_takes():
    qwen = Workload(n=1, n_kv=8192, batch=4, heads=28, kv_heads=4, d=128, dtype="bf16", page_size=16)
    # group 7: FlashInfer's decode kernel is not built for it: the tensor-core (prefill) kernel
    names = [k.name for k in compare(qwen, H200, impl="flashinfer").tiled.traffic.kernels]
    assert names[0] == "flashinfer_prefill"
    # flex decoding needs a power-of-two group: the forward kernel runs
    assert [k.name for k in compare(qwen, H200, impl="flex").tiled.traffic.kernels] == ["flex_attention"]
    chunk = Workload(n=1024, n_kv=8192, heads=32, kv_heads=8, d=128, dtype="bf16", causal=True, page_size=16)
    assert [k.name for k in compare(chunk, H200, impl="flashinfer").tiled.traffic.kernels] == [
        "flashinfer_prefill_sm90"
    ]
    a100 = [k.name for k in compare(chunk, load_profile("a100"), impl="flashinfer").tiled.traffic.kernels]
    assert a100[0] == "flashinfer_prefill"  # FA2-style off sm90


def test_chunked_prefill_sees_its_cache():
    """Causal bottom-right: 512 new tokens on a 3584-token cache see every cached key."""
    w = Workload(n=512, n_kv=4096, heads=32, kv_heads=8, d=128, dtype="bf16", causal=True, page_size=64)
    c = compare(w, H200, impl="flashinfer")
    k = c.tiled.traffic.kernels[0]
    # 4 tiles of 128 rows, each sees 3584 + 128·(i + 1) keys: Σ = 4·3584 + 128·10 = 15,616 keys per query head
    assert k.matmul_flops == 4 * 32 * 128 * 15_616 * 128
    # the K/V of a (request, head) pair is 2 MiB: it stays in L2 between tiles, read once
    assert tensor_bytes(k, "K") == 8 * 4096 * 256


def test_grid_mixing_decode_and_prefill_refused():
    w = Workload(n=np.array([1, 512]), n_kv=4096, heads=32, kv_heads=8, d=128, dtype="bf16", causal=True, page_size=16)
    with pytest.raises(WorkloadError, match="evaluate decoding"):
        compare(w, H200, impl="flashinfer")


def test_grid_agrees_with_scalars():
    n_kv = np.array([1024, 4096, 32768])
    batch = np.array([[1], [64]])
    g = compare(llama_decode(batch=batch, n_kv=n_kv), H200, impl="flashinfer")
    for i, b in enumerate((1, 64)):
        for j, n in enumerate((1024, 4096, 32768)):
            one = compare(llama_decode(batch=b, n_kv=n), H200, impl="flashinfer")
            assert int(np.asarray(g.tiled.traffic.hbm_bytes)[i, j]) == one.tiled.traffic.hbm_bytes
            assert np.asarray(g.tiled.timing.time_s)[i, j] == pytest.approx(one.tiled.timing.time_s)


def test_contiguous_outputs_unchanged():
    """A workload without a page size takes the same path as before (the rescored records check
    the rest): the implementations memmodel had see no paged kernel."""
    w = llama_decode(page_size=None)
    names = [k.name for k in compare(w, H200).tiled.traffic.kernels]
    assert not any("flashinfer" in n or "flex" in n for n in names)


# ---------------------------------------------------------------------------------------
# The command line


def run(*args: str):
    return CliRunner().invoke(cli, list(args))


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--impl", "sdpa-cudnn", "--page-size", "16"], "has no paged kernel: accepted are --impl flashinfer"),
        (["--impl", "flex", "--page-size", "48"], "takes powers of two from 16"),
        (["--impl", "flashinfer"], "give --page-size P"),
        (["--page-size", "16", "--context-parallel", "2"], "--page-size with --context-parallel"),
        (["--page-size", "16", "--tiled", "fa1"], "flash-attn v1"),
    ],
)
def test_refusals_exit_2(extra, message):
    r = run("compare", "--n", "1", "--n-kv", "4096", "--d", "128", "--dtype", "bf16", "--gpu", "h200", *extra)
    assert r.exit_code == 2, r.output
    assert message in r.output
    assert "Traceback" not in r.output


def test_compare_json_carries_the_plan():
    r = run("compare", "--model", "llama-3-8b", "--n", "1", "--n-kv", "8192", "--batch", "16", "--dtype", "bf16",
            "--gpu", "h200", "--page-size", "16", "--format", "json")  # fmt: skip
    assert r.exit_code == 0, r.output
    import json

    data = json.loads(r.stdout)
    tiled = data["algorithms"][1]
    assert data["workload"]["page_size"] == 16
    assert tiled["params"]["kernel"] == "decode (CUDA cores)"
    assert "flashinfer's paged wrappers" in r.output.lower()


def test_sweep_page_size_axis():
    r = run("sweep", "--model", "llama-3-8b", "--n", "1", "--n-kv", "4096,16384", "--dtype", "bf16", "--gpu", "h200",
            "--impl", "flashinfer", "--page-size", "1,16,64", "--format", "csv")  # fmt: skip
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert sorted({row["page_size"] for row in rows}) == ["1", "16", "64"]
    tiled = [row for row in rows if row["algorithm"] == "tiled"]
    assert {row["implementation"] for row in tiled} == {"flashinfer"}
    # the K/V bytes do not move with the page size; the block table does (4 bytes a page)
    by_page = {row["page_size"]: int(row["hbm_bytes"]) for row in tiled if row["n_kv"] == "16384"}
    assert by_page["1"] > by_page["16"] > by_page["64"]


def test_sweep_without_page_size_has_a_blank_column():
    r = run("sweep", "--n", "1024", "--d", "64", "--format", "csv")
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert {row["page_size"] for row in rows} == {""}


# ---------------------------------------------------------------------------------------
# Validation cases and the runner


def test_cases_take_page_size():
    c = parse_case("impl=flashinfer,model=llama-3-8b,n=1,n_kv=4096,batch=8,dtype=bf16,page_size=16")
    assert c.page_size == 16 and c.id == "flashinfer/b8h32kv8n1nkv4096d128/bf16-page16"
    assert parse_case(c.spec()) == c
    assert Case.from_dict(c.to_dict()) == c
    assert "page_size" not in parse_case("impl=sdpa-flash,n=1024,d=64").to_dict()
    with pytest.raises(WorkloadError, match="only impl=flashinfer or impl=flex"):
        parse_case("impl=sdpa-flash,n=1,n_kv=4096,d=128,dtype=bf16,page_size=16")
    with pytest.raises(WorkloadError, match="give page_size="):
        parse_case("impl=flashinfer,n=1,n_kv=4096,d=128,dtype=bf16")


def test_case_file_parses_and_predicts():
    from pathlib import Path

    from memmodel.scoring import case_options

    lines = [
        line
        for line in Path("validation/cases/h200-paged-check.txt").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    cases = [parse_case(line) for line in lines]
    assert len(cases) >= 16
    assert {c.impl for c in cases} == {"flashinfer", "flex"}
    assert {1, 16, 64} <= {c.page_size for c in cases}
    for c in cases:  # every case has a prediction (none refused)
        opts = case_options(c, "cold", profile=H200)
        compare(c.workload(), H200, opts)


def test_ncu_names_match_the_model():
    fi = KERNEL_PATTERNS["flashinfer"]
    assert re.search(fi["flashinfer_decode"], "void flashinfer::BatchDecodeWithPagedKVCacheKernel<(flashinfer::P")
    assert re.search(fi["flashinfer_merge"], "void flashinfer::PersistentVariableLengthMergeStatesKernel<8u, 16u")
    # the names the serving probe's profiler saw (validation/h200/serving-probe/README.md): the sm90
    # prefill is PrefillWithKVCacheKernel, the FA2-style one BatchPrefillWithPagedKVCacheKernel
    sm90 = "void flashinfer::PrefillWithKVCacheKernel<flashinfer::SparseCollectiveMainloop<PagedParams"
    fa2 = "void flashinfer::BatchPrefillWithPagedKVCacheKernel<true, flashinfer::KernelTraits<"
    assert re.search(fi["flashinfer_prefill_sm90"], sm90) and not re.search(fi["flashinfer_prefill_sm90"], fa2)
    assert re.search(fi["flashinfer_prefill"], fa2)
    fx = KERNEL_PATTERNS["flex"]
    assert re.search(fx["flex_attention"], "triton_tem_fused_flex_attention_0")
    assert re.search(fx["flex_reduce"], "triton_per_fused_1") and not re.search(fx["flex_reduce"], "triton_tem_x")


torch = pytest.importorskip("torch")


@pytest.fixture
def on_cpu(monkeypatch):
    from memmodel.gpu import run as gpu_run

    monkeypatch.setattr(gpu_run, "DEVICE", "cpu")


def test_page_table_scatters_and_gathers_back(on_cpu):
    from memmodel.gpu import paged_run

    pt = paged_run.page_table(batch=3, n_kv=100, page_size=16, seed=1)
    # 7 pages a request (the last holds 100 − 96 = 4 tokens), from a pool of 2 · 21 = 42
    assert pt["pool_pages"] == 42 and pt["pages_per_request"] == 7
    assert pt["indptr"].tolist() == [0, 7, 14, 21] and pt["last_page_len"].tolist() == [4, 4, 4]
    pages = pt["indices"].tolist()
    assert len(set(pages)) == 21 and pages != sorted(pages)  # distinct, scattered
    k = torch.randn(3, 2, 100, 8)
    pool = paged_run.scatter_nhd(k, pt, 16)
    assert tuple(pool.shape) == (42, 16, 2, 8)
    assert torch.equal(paged_run.gather_nhd(pool, pt, 100), k)
    # request 1's token 20 sits on its second page, offset 4, in NHD (page, token, head, d)
    page = int(pt["table"][1, 1])
    assert torch.equal(pool[page, 4], k[1, :, 20])
    cache = paged_run.scatter_flex(k, pt, 16)
    assert tuple(cache.shape) == (1, 2, 42 * 16, 8)
    assert torch.equal(paged_run.gather_flex(cache, pt, 100, 16), k)


def test_reference_is_bottom_right_causal(on_cpu):
    from memmodel.gpu import paged_run

    case = Case(impl="flex", n=3, n_kv=5, d=4, heads=2, kv_heads=1, dtype="fp32", causal=True)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, h, n, 4, generator=g) for h, n in ((2, 3), (1, 5), (1, 5)))
    ref = paged_run.reference(case, q, k, v)
    # the last query sees every key, the first the first 3 (5 − 3 + 0 + 1)
    for i, seen in enumerate((3, 4, 5)):
        s = q[0, 1, i] @ k[0, 0, :seen].T / 2.0
        assert torch.allclose(ref[1, i], torch.softmax(s, -1) @ v[0, 0, :seen], atol=1e-6)
    out = ref.unsqueeze(0)
    assert paged_run.check(case, out, q, k, v, 1e-5) < 1e-6
    with pytest.raises(Exception, match="relative error"):
        paged_run.check(case, out + 1.0, q, k, v, 1e-5)


def test_check_takes_the_requests_the_reference_holds(on_cpu):
    # the FP8 cache cases' reference holds request 0 alone (dequantised): the check compares that one
    from memmodel.gpu import paged_run

    case = Case(impl="flashinfer", n=1, n_kv=5, d=4, batch=3, heads=2, kv_heads=1, dtype="fp32", page_size=16)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, h, n, 4, generator=g) for h, n in ((2, 1), (1, 5), (1, 5)))
    out = paged_run.reference(case, q, k, v).unsqueeze(0).expand(3, -1, -1, -1)
    assert paged_run.check(case, out, q, k, v, 1e-5) < 1e-6
    with pytest.raises(Exception, match="relative error"):
        paged_run.check(case, out + 1.0, q, k, v, 1e-5)


def test_flex_on_cpu_runs_the_paged_cache(on_cpu):
    """FlexAttention's eager path on the CPU through PagedAttention's block mask: the runner's
    page table and allocator order agree, and the output matches the reference."""
    from memmodel.gpu import paged_run
    from memmodel.gpu.run import CaseRun, check

    case = Case(impl="flex", n=1, n_kv=40, d=16, batch=2, heads=4, kv_heads=2, dtype="fp32", page_size=16)
    try:
        r = CaseRun(case)
        out = r.run()
    except Exception as exc:  # flex's CPU path needs what this torch build has
        pytest.skip(f"flex_attention does not run on this CPU build: {exc}")
    assert check(case, out, r.q, r.k, r.v) < 1e-4
    assert paged_run.group_key(case)[0] == "flex"


def test_cases_grouped_by_variant():
    from memmodel.gpu.paged_run import grouped

    cases = [
        parse_case("impl=flashinfer,n=1,n_kv=4096,d=128,heads=32,kv_heads=8,dtype=bf16,page_size=16"),
        parse_case("impl=sdpa-flash,n=1024,d=64"),
        parse_case("impl=flashinfer,n=1,n_kv=4096,d=64,heads=32,kv_heads=8,dtype=bf16,page_size=16"),
        parse_case("impl=flashinfer,n=1,n_kv=8192,d=128,heads=32,kv_heads=8,dtype=bf16,page_size=16"),
    ]
    out = grouped(cases)
    assert out[0].impl == "sdpa-flash"
    assert [c.d for c in out[1:]] == [64, 128, 128]  # the two d = 128 variants together


def test_library_kernels_name_figures_a_profile_can_hold():
    """Every paged kernel's own figures (``Kernel.figures_own``) are under a name a profile may
    hold (``implementations.<name>``)."""
    from memmodel.hardware import load_profile
    from memmodel.hardware.schema import PROFILE_IMPLEMENTATIONS
    from memmodel.model import compare
    from memmodel.workload import Workload

    h200 = load_profile("h200")
    shapes = [
        ("flashinfer", Workload(batch=16, heads=32, kv_heads=8, n=1, n_kv=4096, d=128, dtype="bf16", page_size=16)),
        ("flashinfer", Workload(batch=16, heads=28, kv_heads=4, n=1, n_kv=4096, d=128, dtype="bf16", page_size=16)),
        ("flex", Workload(batch=8, heads=32, kv_heads=8, n=1, n_kv=8192, d=128, dtype="bf16", page_size=16)),
    ]
    owns = set()
    for impl, w in shapes:
        for k in compare(w, h200, impl=impl).tiled.traffic.kernels:
            if k.figures_from:
                assert k.figures_own in PROFILE_IMPLEMENTATIONS, k.name
                owns.add(k.figures_own)
    assert owns == {"flashinfer", "flashinfer-fa2", "flex"}


def test_own_figures_time_a_library_kernel_where_the_profile_has_them():
    """FlashInfer's merge takes ``implementations.flashinfer.combine_time`` where the profile
    gives it, and sdpa-flash's (its design's) where not."""
    from memmodel.calibration.serving import bare
    from memmodel.hardware import load_profile
    from memmodel.model import compare
    from memmodel.workload import Workload

    w = Workload(batch=16, heads=32, kv_heads=8, n=1, n_kv=4096, d=128, dtype="bf16", page_size=16)
    h200 = bare(load_profile("h200"))  # the bundled profile without FlashInfer's fitted figures
    assert "flashinfer" not in h200.implementation_figures

    def merge(profile):
        timing = compare(w, profile, impl="flashinfer").tiled.timing
        return next(k for k in timing.kernels if k.name == "flashinfer_merge")

    fixed, per_split = h200.implementation("sdpa-flash").combine_time_s
    rate = h200.implementation("sdpa-flash").combine_bandwidth_bytes_per_s
    before = merge(h200).terms["latency"]
    assert before > fixed  # sdpa-flash's c0 + c1 · splits + bytes / rate
    # own figures: 3 us fixed, nothing per split or per byte -> the latency term is 3 us exactly
    own = h200.with_implementation_figures("flashinfer", combine_time_s=(3e-6, 0.0))
    assert merge(own).terms["latency"] == pytest.approx(3e-6)
    assert rate and per_split  # the fallback really used sdpa-flash's three figures


def test_the_output_says_which_figures_time_a_paged_kernel():
    from memmodel.calibration.serving import bare
    from memmodel.options import paged_figures_note

    assert "implementations.flashinfer, implementations.flashinfer-fa2" in paged_figures_note("flashinfer", H200)
    assert "memmodel hardware show h200" in paged_figures_note("flashinfer", H200)
    assert "no figures of its own" in paged_figures_note("flashinfer", bare(H200))
    # flex: its own figures, decode and prefill
    assert "Triton" not in paged_figures_note("flex", H200) and "implementations.flex" in paged_figures_note(
        "flex", H200
    )
