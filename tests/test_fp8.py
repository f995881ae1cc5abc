"""FP8 attention (``--dtype fp8``) and FP8 K/V caches (``--kv-dtype``): bytes, work, rates, refusals,
options, the sweep axis, cases and the GPU runner's CPU parts (docs/variants.md, "FP8")."""

from __future__ import annotations

import csv
import io
import itertools
from dataclasses import replace

import pytest

from memmodel import Workload, compare, load_profile
from memmodel.cases import Case, parse_case
from memmodel.errors import WorkloadError
from memmodel.implementations import (
    FA3_FP8_TILES,
    KV_DEQUANT_FLOPS,
    fa3_tiles,
    kernel_workload,
    kv_cache_path,
    tiles,
)
from memmodel.scoring import predicted_times
from memmodel.sweep import Grid, evaluate
from memmodel.timing import kernel_time

from .conftest import REPO
from .test_formulas import _symbols
from .test_formulas import evaluate as evaluate_formula

H200 = load_profile("h200")
#: Llama-3-8B decoding: 32 query heads over 8 K/V heads, d = 128
DECODE = dict(n=1, n_kv=4096, d=128, heads=32, kv_heads=8, batch=2, dtype="bf16")


def _kernel(c, name):
    return next(k for k in c.tiled.traffic.kernels if k.name == name)


def _bytes(kernel, tensor, level, direction):
    return sum(int(t.bytes) for t in kernel.transfers if (t.tensor, t.level, t.direction) == (tensor, level, direction))


# ---------------------------------------------------------------------------------------
# the workload


def test_kv_dtype_sets_the_kv_element_bytes_only():
    w = Workload(**DECODE, kv_dtype="fp8")
    assert (w.element_bytes, w.kv_element_bytes, w.out_element_bytes) == (2, 1, 2)
    assert w.kv_bytes() == 2 * 8 * 4096 * 128 * 1  # B·H_kv·N_kv·d·1 = 8,388,608
    assert w.q_bytes() == 2 * 32 * 1 * 128 * 2
    assert Workload(**DECODE, kv_dtype="fp8_e5m2").kv_element_bytes == 1
    assert Workload(**DECODE, kv_dtype="bf16").kv_dtype is None  # the dtype itself: no FP8 cache
    d = w.to_dict()
    assert (d["kv_dtype"], d["kv_element_bytes"]) == ("fp8", 1)
    assert "kv_dtype" not in Workload(**DECODE).to_dict()  # earlier outputs keep their keys


def test_fp8_inputs_write_o_in_bf16():
    w = Workload(n=1024, d=128, heads=4, dtype="fp8")
    assert (w.element_bytes, w.kv_element_bytes, w.out_element_bytes, w.out_dtype_) == (1, 1, 2, "bf16")
    assert w.o_bytes() == 4 * 1024 * 128 * 2
    assert w.to_dict()["out_dtype"] == "bf16"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (dict(kv_dtype="fp4"), "unknown kv_dtype 'fp4'"),
        (dict(kv_dtype="fp16"), "modelled in fp8 or fp8_e5m2 only"),
        (dict(kv_dtype="fp8", dtype="fp32"), "read under fp16 or bf16 Q and O"),
        (dict(kv_dtype="fp8_e5m2", dtype="fp8"), "read under fp16 or bf16 Q and O"),
    ],
)
def test_bad_kv_dtypes_are_refused(fields, message):
    with pytest.raises(WorkloadError, match=message):
        Workload(**{**DECODE, **fields})


# ---------------------------------------------------------------------------------------
# FP8 K/V caches


def test_decode_reads_an_fp8_cache_at_one_byte_and_converts_it_in_the_kernel():
    w8, w16 = Workload(**DECODE, kv_dtype="fp8"), Workload(**DECODE)
    c8, c16 = compare(w8, H200, impl="paper"), compare(w16, H200, impl="paper")
    split8, split16 = _kernel(c8, "fa2_splitkv"), _kernel(c16, "fa2_splitkv")
    # decoding with GQA: each K/V head once across the splits, 2·8·4096·128·1 = 8,388,608 bytes
    assert _bytes(split8, "K", "hbm", "read") == 8_388_608
    assert _bytes(split16, "K", "hbm", "read") == 2 * 8_388_608
    assert _bytes(split8, "Q", "hbm", "read") == _bytes(split16, "Q", "hbm", "read") == 2 * 32 * 128 * 2
    # O written by the combine in bf16: 2·32·1·128·2 = 16,384
    assert _bytes(_kernel(c8, "fa2_combine"), "O", "hbm", "write") == 16_384
    # the conversion: 5 FLOPs for each K and V element the CTAs load (8,388,608 each)
    assert int(split8.softmax_flops) - int(split16.softmax_flops) == KV_DEQUANT_FLOPS * 2 * 8_388_608
    assert float(c8.tiled.timing.time_s) < float(c16.tiled.timing.time_s)


def test_pytorchs_sdpa_reads_an_fp8_cache_after_a_cast():
    w = Workload(**DECODE, kv_dtype="fp8")
    c = compare(w, H200, impl="sdpa-cudnn")
    names = [k.name for k in c.tiled.traffic.kernels]
    assert names[:2] == ["kv_cast_k", "kv_cast_v"]
    cast = _kernel(c, "kv_cast_k")
    assert _bytes(cast, "K", "hbm", "read") == 8_388_608  # the cache, 1 byte an element
    assert _bytes(cast, "K_cast", "hbm", "write") == 16_777_216  # the copy, 2 bytes an element
    assert cast.op == "fp8_cast"  # at kernels.fp8_cast.bandwidth (the elementwise rate where none)
    # the attention kernel reads the bf16 copies as it reads bf16 K/V
    plain = compare(Workload(**DECODE), H200, impl="sdpa-cudnn")
    assert _bytes(_kernel(c, "fa2_splitkv"), "K", "l2", "read") == _bytes(
        _kernel(plain, "fa2_splitkv"), "K", "l2", "read"
    )
    # standard attention (eager matmuls) casts too
    assert [k.name for k in c.standard.traffic.kernels][:2] == ["kv_cast_k", "kv_cast_v"]
    assert any("casts them first" in line for line in c.caveats)
    assert kv_cache_path("sdpa-flash") == "cast" and kv_cache_path("paper") == "dequant"
    assert kv_cache_path("fa3") is None


def test_chunked_prefill_reads_the_cache_at_one_byte():
    shape = dict(n=2048, n_kv=16384, d=128, heads=32, kv_heads=8, dtype="bf16", causal=True)
    c8 = compare(Workload(**shape, kv_dtype="fp8"), H200, impl="paper")
    c16 = compare(Workload(**shape), H200, impl="paper")
    k8, k16 = _kernel(c8, "fa2_fwd"), _kernel(c16, "fa2_fwd")
    # the visited share of T_r · B·H·N_kv·d·e is floored once: the halves agree to a byte
    assert abs(2 * _bytes(k8, "K", "l2", "read") - _bytes(k16, "K", "l2", "read")) <= 2
    assert _bytes(k8, "Q", "l2", "read") == _bytes(k16, "Q", "l2", "read")


@pytest.mark.parametrize("impl", ["paper", "sdpa-cudnn", "sdpa-flash"])
@pytest.mark.parametrize(
    "shape", [DECODE, dict(n=300, n_kv=5000, d=64, heads=8, kv_heads=2, dtype="fp16", causal=True)]
)
def test_every_fp8_cache_formula_is_the_request_it_labels(impl, shape):
    w = Workload(**shape, kv_dtype="fp8")
    if impl == "sdpa-cudnn" and shape.get("causal"):  # a causal chunk: cuDNN does not run it so
        with pytest.raises(WorkloadError, match="causal_lower_right"):
            compare(w, H200, impl=impl)
        return
    c = compare(w, H200, impl=impl)
    checked = 0
    for alg in c.algorithms:
        for k in alg.traffic.kernels:
            cast = k.name.startswith("kv_cast")
            seen = w if alg.traffic.name == "standard" or cast else kernel_workload(w, c.options.model_implementation)
            if not cast and kv_cache_path(c.options.model_implementation) == "cast":
                seen = seen.with_(kv_dtype=None)  # the kernels after the cast read the copies
            if alg.traffic.name == "standard" and not cast:
                seen = w.with_(kv_dtype=None)
            s = _symbols(seen, alg.traffic.params, k)
            for t in k.transfers:
                if t.level == "l2":
                    assert evaluate_formula(t.formula, s) == int(t.bytes), (k.name, t.tensor, t.formula)
                    checked += 1
    assert checked >= 10


# ---------------------------------------------------------------------------------------
# FP8 forwards


def test_fa3_fp8_tiles_are_tile_size_h_element_size_1():
    # hopper/tile_size.h, tile_size_fwd_sm90(..., element_size=1)
    assert [fa3_tiles(d, False, 1) for d in (64, 96, 128, 192, 256)] == [
        (192, 160),
        (192, 128),
        (128, 224),
        (128, 160),
        (128, 128),
    ]
    assert FA3_FP8_TILES[128] == (128, 224)
    assert tiles("fa3", 128, True, dtype="fp8") == (128, 224)
    assert tiles("fa3", 128, True, dtype="bf16") == (128, 128)  # the bf16 ones are unchanged


def test_fa3_fp8_forward_ledger():
    w = Workload(n=4096, d=128, heads=32, kv_heads=8, batch=1, dtype="fp8", causal=True)
    c = compare(w, H200, impl="fa3")
    k = _kernel(c, "fa2_fwd")
    assert (c.options.block_q, c.options.block_kv) == (128, 224)
    assert _bytes(k, "Q", "hbm", "read") == 32 * 4096 * 128 * 1
    assert _bytes(k, "O", "hbm", "write") == 32 * 4096 * 128 * 2  # bf16 O
    assert _bytes(k, "lse", "hbm", "write") == 32 * 4096 * 4
    for name in ("q_descale", "k_descale", "v_descale"):
        assert _bytes(k, name, "hbm", "read") == 1 * 8 * 4  # B·H_kv fp32
    # V transposed in shared memory: the requested V bytes read and written once more there
    v_requested = _bytes(k, "V", "l2", "read")
    assert _bytes(k, "Vt", "sram", "read") == _bytes(k, "Vt", "sram", "write") == v_requested
    assert _bytes(k, "Vt", "hbm", "read") == 0 and _bytes(k, "Vt", "l2", "read") == 0
    assert any("Same-share rule" in line for line in c.caveats)


def test_cudnn_fp8_graph_writes_o_in_fp8_with_its_scales():
    w = Workload(n=4096, d=128, heads=32, batch=1, dtype="fp8")
    k = _kernel(compare(w, H200, impl="sdpa-cudnn"), "fa2_fwd")
    assert _bytes(k, "O", "hbm", "write") == 32 * 4096 * 128 * 1
    for name in ("descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o"):
        assert _bytes(k, name, "hbm", "read") == 4
    assert _bytes(k, "amax_s", "hbm", "write") == _bytes(k, "amax_o", "hbm", "write") == 4


def test_fp8_products_run_at_the_fp8_rate_times_the_bf16_share():
    # the same kernel timed as fp8 and as bf16: its products take bf16's / fp8's rate of the time
    w = Workload(n=4096, d=128, heads=32, batch=2, dtype="fp8")
    k = _kernel(compare(w, H200, impl="fa3"), "fa2_fwd")
    t8 = kernel_time(k, H200, "fp8", "fa3", head_dim=128)
    t16 = kernel_time(k, H200, "bf16", "fa3", head_dim=128)
    ratio = H200.peak_flops("bf16") / H200.peak_flops("fp8")  # measured: 1.485 PFLOP/s for fp8 on the H200
    # and the share of its 16-bit efficiency the fp8 kernel measured (implementations.fa3.fp8_share)
    share = H200.implementation("fa3").fp8_share_at(128)
    assert 0.3 < share < 1.0
    assert t8.terms["matmul"] == pytest.approx(t16.terms["matmul"] * ratio / share)
    assert 0.4 < ratio < 0.6
    # the share scales the kernel's whole compute, as its efficiency does: the exponentials too
    assert t8.terms["exp"] == pytest.approx(t16.terms["exp"] / share)


# ---------------------------------------------------------------------------------------
# refusals, through the command line


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--dtype", "fp8", "--impl", "sdpa-flash"], "sdpa-flash has no fp8 forward kernel"),
        (["--dtype", "fp8", "--impl", "triton"], "triton has no fp8 forward kernel"),
        (["--dtype", "fp8", "--impl", "fa3", "--gpu", "l40s"], "its fp8 kernels do not run there"),
        (["--dtype", "fp8", "--impl", "sdpa-cudnn", "--gpu", "l40s"], "cuDNN's fp8 attention runs on Hopper"),
        (["--dtype", "fp8", "--impl", "fa3", "--backward"], "forward only"),
        (["--dtype", "bf16", "--kv-dtype", "fp8", "--impl", "fa3"], "fa3 reads K and V in the dtype of Q"),
        (["--dtype", "bf16", "--kv-dtype", "fp8", "--backward"], "no --backward"),
        (["--kv-dtype", "fp8"], "read under fp16 or bf16 Q and O"),
        (
            ["--dtype", "bf16", "--kv-dtype", "fp8", "--context-parallel", "2"],
            "with --context-parallel is not modelled",
        ),
    ],
)
def test_fp8_refusals_are_one_line_and_exit_2(run, args, message):
    argv = ["compare", "--n", "1024", "--d", "128", "--heads", "8", *args]
    if "--gpu" not in args:
        argv += ["--gpu", "h200"]
    r = run(*argv)
    assert r.exit_code == 2, r.output
    lines = [line for line in r.stderr.splitlines() if "error" in line]
    assert len(lines) == 1 and message in lines[0], r.stderr
    assert "Traceback" not in r.output


def test_auto_shows_the_paper_for_fp8(run):
    r = run("compare", "--n", "1024", "--d", "128", "--dtype", "fp8", "--gpu", "h200", "--format", "json")
    assert r.exit_code == 0, r.stderr
    assert "takes no fp8 inputs" in r.stderr


def test_compare_json_carries_the_kv_dtype(run):
    import json

    r = run(
        "compare", "--n", "1", "--n-kv", "4096", "--d", "128", "--heads", "32", "--kv-heads", "8",
        "--dtype", "bf16", "--kv-dtype", "fp8", "--gpu", "h200", "--impl", "paper", "--format", "json",
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    assert (d["workload"]["kv_dtype"], d["workload"]["kv_element_bytes"]) == ("fp8", 1)


# ---------------------------------------------------------------------------------------
# the sweep axis


def test_sweep_kv_dtype_axis():
    g = Grid(n=(1,), n_kv=(4096, 8192), d=(128,), heads=(32,), kv_heads=(8,), dtypes=("bf16",), gpus=("h200",),
             impls=("paper",), kv_dtypes=("none", "fp8"))  # fmt: skip
    r = evaluate(g)
    kv = r.column("kv_dtype").tolist()
    assert kv == ["", "", "", "", "fp8", "fp8", "fp8", "fp8"]
    rows = list(r.rows())
    assert rows[0]["kv_dtype"] is None and rows[4]["kv_dtype"] == "fp8"
    # the same workload's tiled row: the cache read at half the bytes
    assert rows[1]["n_kv"] == rows[5]["n_kv"] == 4096
    assert rows[5]["hbm_read_bytes"] < rows[1]["hbm_read_bytes"]
    assert any("converted in the kernel" in c for c in r.caveats)
    with pytest.raises(WorkloadError, match="kv_dtypes: 'fp4'"):
        Grid(n=(1,), d=(128,), kv_dtypes=("fp4",))


def test_sweep_cli_kv_dtype_column(run):
    r = run(
        "sweep", "--n", "1", "--n-kv", "4096", "--d", "128", "--heads", "32", "--kv-heads", "8", "--dtype", "bf16",
        "--kv-dtype", "none,fp8", "--gpu", "h200", "--format", "csv",
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert [row["kv_dtype"] for row in rows] == ["", "", "fp8", "fp8"]


# ---------------------------------------------------------------------------------------
# cases and their predictions


def test_case_kv_dtype_spec_id_and_record_key():
    c = parse_case("impl=sdpa-cudnn,model=llama-3-8b,batch=8,n=1,n_kv=8192,dtype=bf16,kv_dtype=fp8")
    assert c.id == "sdpa-cudnn/b8h32kv8n1nkv8192d128/bf16-kvfp8"
    assert parse_case(c.spec()) == c
    assert Case.from_dict(c.to_dict()) == c
    assert c.to_dict()["kv_dtype"] == "fp8"
    assert "kv_dtype" not in parse_case("n=64,d=64").to_dict()  # earlier records have no such key
    with pytest.raises(WorkloadError, match="no backward"):
        parse_case("n=64,d=64,dtype=bf16,kv_dtype=fp8,backward=1")


def test_cast_cases_predict_the_casts_as_their_own_steps():
    c = parse_case("impl=sdpa-cudnn,model=llama-3-8b,batch=8,n=1,n_kv=8192,dtype=bf16,kv_dtype=fp8")
    p = predicted_times(c, H200)
    assert list(p["steps"]) == ["kv_cast_k", "kv_cast_v", "attention"]
    event = float(H200.event_overhead_s or 0.0)
    assert sum(p["steps"].values()) == pytest.approx(p["time_s"])
    assert p["steps"]["kv_cast_k"] == pytest.approx(p["kernels"]["kv_cast_k"] + event)
    # its HBM bytes: the cache at 1 byte in, the copy at 2 out: 8·8·8192·128·(1 + 2) = 201,326,592
    assert p["step_work"]["kv_cast_k"]["hbm_bytes"] == 8 * 8 * 8192 * 128 * 3


def test_the_fp8_check_cases():
    text = (REPO / "validation" / "cases" / "h200-fp8-check.txt").read_text()
    cases = [parse_case(spec) for line in text.splitlines() for spec in line.split("#", 1)[0].split()]
    assert len(cases) >= 8
    prefill = [c for c in cases if c.dtype == "fp8"]
    decode = [c for c in cases if c.kv_dtype == "fp8" and c.n == 1]
    assert {c.n for c in prefill} >= {2048, 16384}
    assert {c.batch for c in decode} >= {1, 64} and {c.n_kv for c in decode} >= {4096, 32768}
    for c in cases:  # each is predicted without a refusal but the cuDNN chunk (measured top-left)
        if c.impl == "sdpa-cudnn" and c.causal and c.n != c.n_kv_:
            with pytest.raises(WorkloadError, match="causal_lower_right"):
                predicted_times(c, H200)
            continue
        assert predicted_times(c, H200)["time_s"] > 0


# ---------------------------------------------------------------------------------------
# the GPU runner, on the CPU

torch = pytest.importorskip("torch")


def test_quantize_round_trips_within_the_formats_precision():
    from memmodel.gpu.fp8 import dequantize, quantize

    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 4, 64, 32, generator=g)
    for fmt, rel in (("fp8", 0.07), ("fp8_e5m2", 0.13)):  # 3 and 2 mantissa bits: 2^-4, 2^-3 at most
        x8, s = quantize(torch, x, fmt)
        assert x8.dtype == {"fp8": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}[fmt]
        err = float((dequantize(x8, s) - x).norm() / x.norm())
        assert 0 < err < rel
    x8, s = quantize(torch, x, "fp8", per_head=True)
    assert s.shape == (4,)
    assert float(dequantize(x8, s, per_head=True).abs().amax()) == pytest.approx(float(x.abs().amax()), rel=1e-6)


def test_an_fp8_cache_scatters_into_the_pool_exactly():
    # the FP8 decode cases lay their pages out as the 16-bit paged cases do (a pool twice the batch's
    # pages, each request's drawn from a permutation): scattered through bf16, which holds every e4m3
    # and e5m2 value exactly, and back to fp8
    from memmodel.gpu.fp8 import quantize
    from memmodel.gpu.paged_run import gather_nhd, page_table, scatter_nhd

    k = torch.randn(3, 2, 40, 8)
    for fmt in ("fp8", "fp8_e5m2"):
        k8, _ = quantize(torch, k, fmt)
        pt = page_table(batch=3, n_kv=40, page_size=16, seed=2)  # 3 pages a request, 18 in the pool
        pool = scatter_nhd(k8.to(torch.bfloat16), pt, 16).to(k8.dtype)
        assert pool.dtype == k8.dtype and pool.shape == (18, 16, 2, 8)
        assert torch.equal(gather_nhd(pool.to(torch.bfloat16), pt, 40), k8.to(torch.bfloat16))


def test_cast_steps_match_the_dequantised_reference():
    from memmodel.gpu import run as gpu_run
    from memmodel.gpu.fp8 import Fp8Inputs, cast_steps

    case = parse_case("impl=sdpa-flash,batch=2,heads=4,kv_heads=2,n=1,n_kv=300,d=64,dtype=bf16,kv_dtype=fp8")
    old = gpu_run.DEVICE
    gpu_run.DEVICE = "cpu"
    try:
        q, k, v = gpu_run.make_inputs(replace(case, kv_dtype=None))
        inputs = Fp8Inputs(case, q, k, v)

        def attention(q_, k_, v_):
            g = case.heads // case.kv_heads_
            return torch.nn.functional.scaled_dot_product_attention(
                q_, k_.repeat_interleave(g, 1), v_.repeat_interleave(g, 1)
            )

        steps = cast_steps(case, inputs, attention)
        assert [name for name, _ in steps] == ["kv_cast_k", "kv_cast_v", "attention"]
        out = gpu_run.run_steps(steps)
        assert gpu_run.check(case, out, *inputs.reference) < 2e-2
    finally:
        gpu_run.DEVICE = old


def test_a_paged_fp8_decode_case_makes_its_inputs_before_it_needs_flashinfer():
    # the FP8 cases draw their inputs as an unpaged bf16 case would (a paged sdpa-flash case is refused:
    # the first device run of the FP8 cache set failed there); FlashInfer is the next thing it needs
    pytest.importorskip("torch")
    from memmodel.errors import RuntimeFailure
    from memmodel.gpu import run as gpu_run

    case = parse_case(
        "impl=flashinfer,batch=2,heads=4,kv_heads=2,n=1,n_kv=300,d=64,dtype=bf16,kv_dtype=fp8,page_size=16"
    )
    old = gpu_run.DEVICE
    gpu_run.DEVICE = "cpu"
    try:
        try:
            import flashinfer  # noqa: F401
        except ImportError:
            with pytest.raises(RuntimeFailure, match="flashinfer"):
                gpu_run.CaseRun(case)
        else:  # pragma: no cover - FlashInfer installed: it needs CUDA
            pytest.skip("FlashInfer is installed here: the decode itself needs a GPU")
    finally:
        gpu_run.DEVICE = old


def test_fp8_cases_refuse_what_the_runner_cannot_run():
    from memmodel.errors import RuntimeFailure
    from memmodel.gpu import run as gpu_run

    old = gpu_run.DEVICE
    gpu_run.DEVICE = "cpu"
    try:
        with pytest.raises(RuntimeFailure, match="fp8 inputs run as impl=fa3"):
            gpu_run.CaseRun(parse_case("impl=sdpa-cudnn,n=64,d=64,dtype=fp8"))
        with pytest.raises(RuntimeFailure, match="impl=sdpa-\\* \\(cast, then SDPA\\)"):
            gpu_run.CaseRun(parse_case("impl=triton,n=1,n_kv=64,d=64,dtype=bf16,kv_dtype=fp8"))
    finally:
        gpu_run.DEVICE = old


def test_combinations_the_model_accepts_all_have_bytes():
    # every accepted (implementation, dtype, K/V cache) combination on the H200 gives a ledger
    for impl, dtype, kv in itertools.product(
        ["paper", "fa3", "sdpa-cudnn", "sdpa-flash"], ["bf16", "fp8"], [None, "fp8"]
    ):
        if dtype == "fp8" and kv is not None:
            continue
        w = Workload(n=512, d=128, heads=8, dtype=dtype, kv_dtype=kv)
        try:
            c = compare(w, H200, impl=impl)
        except WorkloadError:
            assert (dtype == "fp8" and impl == "sdpa-flash") or (kv is not None and impl == "fa3")
            continue
        assert int(c.tiled.traffic.hbm_bytes) > 0


def test_validate_gates_fp8_fa3_cases_on_flashinfer_not_on_flash_attn(monkeypatch, capsys):
    """fa3 cases at fp8 run through FlashInfer's fa3-backend prefill: flash_attn.cute missing
    leaves them in (and drops only the bf16 fa3 case), FlashInfer missing drops them."""
    from memmodel.cases import parse_case
    from memmodel.cli import validate
    from memmodel.gpu import fa3, fp8

    cases = [
        parse_case("impl=fa3,n=1024,d=128,heads=32,kv_heads=8,dtype=fp8,causal=1"),
        parse_case("impl=fa3,n=1024,d=64"),
        parse_case("impl=sdpa-flash,n=1024,d=64"),
    ]
    monkeypatch.setattr(fa3, "missing", lambda: "flash_attn.cute does not import")
    monkeypatch.setattr(fp8, "flashinfer_missing", lambda: None)
    kept = validate._runnable(cases)
    assert [(c.impl, c.dtype) for c in kept] == [("fa3", "fp8"), ("sdpa-flash", "fp16")]
    assert "skipping 1 fa3 case(s)" in capsys.readouterr().err
    monkeypatch.setattr(fa3, "missing", lambda: None)
    monkeypatch.setattr(fp8, "flashinfer_missing", lambda: "flashinfer does not import")
    kept = validate._runnable(cases)
    assert [(c.impl, c.dtype) for c in kept] == [("fa3", "fp16"), ("sdpa-flash", "fp16")]
    assert "skipping 1 fa3 fp8 case(s): flashinfer does not import" in capsys.readouterr().err
