"""Trace cases in ``memmodel validate`` and the timing modes of every case: the case-file grammar,
the runner on the CPU, the kernel classes (pinned on kernel names the lent H200 recorded), the
order-preserving alignment, the scoring against a stand-in for the host model's Times, and a
record written by the runner scored again by ``--rescore``. GPU-only parts skip without CUDA."""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import pytest

import memmodel.gpu.run as gpu_run
from memmodel.errors import TraceError
from memmodel.fileio import read_json
from memmodel.hardware import load_profile
from memmodel.scoring import summarize_record
from memmodel.timing_modes import evaluated_times, mode_time_errors, mode_times, predicted_modes
from memmodel.trace_cases import TraceCase, case_from_dict, parse_trace_case, read_cases, resolve_target
from memmodel.trace_scoring import (
    align_classes,
    classify_kernel,
    kernel_list_summary,
    kernel_match,
    model_kernel_classes,
    trace_kernel_rows,
    trace_prediction,
)

from .conftest import REPO

H200 = load_profile("h200")
SDPA = "trace examples/attention/sdpa.py:attention --shape q=1,2,64,16 --shape k=1,2,64,16 --shape v=1,2,64,16"
EAGER = (
    "trace examples/attention/memmodel_eager.py:attention --shape q=1,2,64,16 --shape k=1,2,64,16 "
    "--shape v=1,2,64,16 --shape mask=64,64:bool --dtype fp32 --backward"
)
LLAMA = (
    "trace examples/layers/llama_decoder.py:llama3_8b --shape hidden_states=1,8,64 --config hidden=64 "
    "--config heads=4 --config kv_heads=2 --config head_dim=16 --config intermediate=128 --config max_positions=64 "
    "--dtype fp32"
)


@pytest.fixture
def cpu(monkeypatch):
    """The GPU runner's tensors on the CPU (its eager paths, the profiler's CPU activity)."""
    pytest.importorskip("torch")
    monkeypatch.setattr(gpu_run, "DEVICE", "cpu")


@pytest.fixture(autouse=True)
def _from_the_repository(monkeypatch):
    monkeypatch.chdir(REPO)  # trace cases name their files from the current folder, as memmodel trace does


# ---------------------------------------------------------------------------------------
# The grammar


def test_a_trace_line_reads_as_memmodel_trace_takes_it():
    c = parse_trace_case(
        "trace examples/attention/llama_eager.py:attention --shape query=1,32,4096,128 --shape key=1,8,4096,128 "
        "--shape=value=1,8,4096,128 --shape attention_mask=1,1,4096,4096 --dtype bf16 --backward "
        "--grad query,key,value --config 'name=a b'  # a comment"
    )
    assert c.target == "examples/attention/llama_eager.py:attention"
    assert c.path == "examples/attention/llama_eager.py" and c.function == "attention"
    assert c.shapes[0] == ("query", (1, 32, 4096, 128), None)
    assert c.shape_map["value"] == (1, 8, 4096, 128)
    assert c.dtype == "bf16" and c.backward and c.grad == ("query", "key", "value")
    assert c.config == ("name=a b",) and c.config_map == {"name": "a b"}
    assert c.id == (
        "trace/examples/attention/llama_eager.py:attention/query1x32x4096x128,key1x8x4096x128,value1x8x4096x128,"
        "attention_mask1x1x4096x4096/bf16-bwd-gradquery+key+value/name=a b"
    )
    # the canonical line reads back the same, and a record's entry gives the case again
    assert parse_trace_case(c.spec()) == c
    assert "--config 'name=a b'" in c.spec()
    d = c.to_dict()
    assert (
        d["kind"] == "trace"
        and d["impl"] == "trace"
        and d["shapes"]["query"] == {"shape": [1, 32, 4096, 128], "dtype": "bf16"}
    )
    assert case_from_dict(json.loads(json.dumps(d))) == c
    # an own dtype and the defaults
    m = parse_trace_case("trace f.py:g --shape mask=4,4:bool --config max_positions=65536")
    assert m.shape_map == {"mask": ((4, 4), "bool")} and m.dtype == "fp32" and not m.backward and m.grad is None
    assert m.config_map == {"max_positions": 65536}  # a Python literal, as trace reads it
    assert m.id == "trace/f.py:g/mask4x4:bool/fp32/max_positions=65536"


@pytest.mark.parametrize(
    "line, message",
    [
        ("trace", "give the function or module first"),
        ("trace --shape q=1", "give the function or module first"),
        ("trace attention.py --shape q=1", "expected FILE.py:NAME"),
        ("trace f.py:g --shape q=1,x", "'x' is not a whole number"),  # trace's own parse_shape
        ("trace f.py:g --shape q=1 --shape q=2", "given twice"),
        ("trace f.py:g --shape q=1:complex", "unknown dtype 'complex'"),
        ("trace f.py:g --dtype fp8", "--dtype 'fp8': accepted are fp32, fp16, bf16"),
        ("trace f.py:g --dtype fp16 --dtype bf16", "--dtype given twice"),
        ("trace f.py:g --shape q=1 --grad q", "give --backward too"),
        ("trace f.py:g --shape q=1 --backward --grad k", "--grad k: no --shape gives it"),
        ("trace f.py:g --config 1x=2", "expected KEY=VALUE"),  # trace's own parse_config
        ("trace f.py:g --config a=1 --config a=2", "--config a=... given twice"),
        ("trace f.py:g --shape", "--shape needs a value"),
        ("trace f.py:g --backward=1", "--backward takes no value"),
        ("trace f.py:g --gpu h200", "--gpu is an option of validate"),
        ("trace f.py:g --shapes q=1", "unexpected '--shapes'"),
        ("trace f.py:g 'q=1", "cannot split the line"),
        ("impl=standard,n=64,d=64", "starts with 'trace'"),
    ],
)
def test_a_bad_trace_line_is_one_line_saying_what(line, message):
    with pytest.raises(TraceError, match=message.replace("(", r"\(").replace(")", r"\)")) as info:
        parse_trace_case(line)
    assert "\n" not in str(info.value)


def test_a_cases_file_mixes_both_kinds_and_names_the_line_at_fault():
    text = f"# a comment\nimpl=standard,n=1024,d=64  impl=triton,n=2048,d=64\n\n{SDPA}   # its comment\n"
    cases = read_cases(text, "cases.txt")
    assert [c.id for c in cases] == [
        "standard/b1h1n1024d64/fp16",
        "triton/b1h1n2048d64/fp16",
        "trace/examples/attention/sdpa.py:attention/q1x2x64x16,k1x2x64x16,v1x2x64x16/fp32",
    ]
    assert isinstance(cases[2], TraceCase)
    with pytest.raises(TraceError, match=r"^cases.txt, line 2: --shape 'q=1,x'"):
        read_cases("impl=standard,n=64,d=64\ntrace f.py:g --shape q=1,x\n", "cases.txt")
    with pytest.raises(TraceError, match=r"^cases.txt, line 3: the same trace case as line 1$"):
        read_cases(f"{SDPA}\n\n{SDPA}\n", "cases.txt")
    with pytest.raises(TraceError, match=r"^cases.txt, line 1: examples/nope.py: no such file"):
        read_cases("trace examples/nope.py:f --shape q=1\n", "cases.txt")


def test_validate_lists_predicts_and_refuses_trace_cases(run, tmp_path):
    f = tmp_path / "cases.txt"
    f.write_text(f"impl=standard,n=64,d=16\n{SDPA} --dtype fp16\n")
    r = run("validate", "--cases", str(f), "--list")
    assert r.exit_code == 0, r.output
    assert r.stdout.split() == [
        "standard/b1h1n64d16/fp16",
        "trace/examples/attention/sdpa.py:attention/q1x2x64x16,k1x2x64x16,v1x2x64x16/fp16",
    ]
    r = run("validate", "--cases", str(f), "--list", "--impl", "trace")
    assert r.stdout.split() == ["trace/examples/attention/sdpa.py:attention/q1x2x64x16,k1x2x64x16,v1x2x64x16/fp16"]
    r = run("validate", "--case", SDPA, "--list", "--format", "json")
    assert json.loads(r.stdout)[0]["spec"] == parse_trace_case(SDPA).spec()
    pytest.importorskip("torch")
    r = run("validate", "--cases", str(f), "--predict", "--gpu", "h200")
    assert r.exit_code == 0, r.output
    line = r.stdout.splitlines()[2]
    assert line.startswith("trace/examples/attention/sdpa.py:attention/") and " function=" in line
    assert line.endswith("| kernels 2, unmodelled ops 0")  # sdpa's forward: cuDNN's memset, its fused kernel
    # bad input: one line, exit 2
    f.write_text("trace examples/attention/sdpa.py:attention --shape q=1,2 --l2 cold\n")
    r = run("validate", "--cases", str(f), "--list")
    assert r.exit_code == 2
    assert r.stderr.strip().splitlines() == [
        f"memmodel: error: {f}, line 1: --l2 is an option of validate (the whole run), not of a case"
    ]
    r = run("validate", "--case", "trace examples/nope.py:f --shape q=1", "--list")
    assert r.exit_code == 2 and "--case: examples/nope.py: no such file" in r.stderr


# ---------------------------------------------------------------------------------------
# Kernel classes, pinned on names the profiler recorded on the lent H200 (validation/h200/final/
# *.json.gz and serving-probe/; names over 160 characters cut there)

H200_KERNELS = {
    "gemm": [
        "nvjet_sm90_hsh_128x256_64x4_1x2_h_bz_coopA_NNN",
        "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT",
        "void cutlass::Kernel2<cutlass_75_tensorop_f16_s1688gemm_f16_128x128_nn_align1>"
        "(cutlass_75_tensorop_f16_s1688gemm_f16_128x128_nn_align1::Params)",
        "void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false, cublasGemvParamsEx<",
        "std::enable_if<!(false), void>::type internal::gemvx::kernel<int, int, float, float, float, float, false, ",
    ],
    "attention": [
        "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_cga1x1x1_kernel0_0",
        "cudnn_generated_fort_native_sdpa_sm80_flash_fprop_wmma_f16_knob_35_16x128x128_1x4x1_cga1x1x1_kernel0_0",
        "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x128_1x4x1_cga1x1x1_kernel0_0",
        "fmha_cutlassF_f16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::half_t, cutlass::arch",
        "fmha_cutlassB_bf16_aligned_128x128_k128_seqaligned_sm80(PyTorchMemEffAttention::AttentionBackwardKernel<cutlass",
        "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 32, 4, false, false, cutlass::bfloat16_t",
        "void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4",
        "void pytorch_flash::flash_bwd_convert_dq_kernel<Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, false, false,",
        "void pytorch_flash::flash_bwd_dot_do_o_kernel<true, Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, false, ",
        "void cudnn::fusion::compute_dot_do_o_specialized<true, 128>(void const*, void const*, void*, void*, unsigned int",
        "void cudnn::fusion::convert_dq_to_16bits<true>(void const*, void*, unsigned int, unsigned int, unsigned int, ",
        "void cudnn::fusion::fmha_reduce_head<true>(void const*, void*, unsigned int, unsigned int, unsigned int, unsign",
        "void cudnn::fusion::lean_reduction_kernel<false, false, false>(void*, float*, float*, float*, float*, float con",
        "kernel_cutlass_kernel_flash_attncuteflash_fwd_sm90FlashAttentionForwardSm90_object_at__tensor0000o11101213_ten",
        "void flashinfer::BatchDecodeWithPagedKVCacheKernel<(flashinfer::PosEncodingMode)0, 2u, 1u, 8u, 16u, 3u, 2u, fla",
        "void flashinfer::PersistentVariableLengthMergeStatesKernel<8u, 16u, 8u, 4u, __nv_bfloat16, __nv_bfloat16, int>(",
        "void flashinfer::PrefillWithKVCacheKernel<flashinfer::SparseCollectiveMainloop<PagedParams::AdditionalParams, f",
        "void flashinfer::mla::hopper::BatchMLAPageAttentionHopperKernel<flashinfer::mla::hopper::HopperKernelTraits<fal",
        "_attn_fwd",  # memmodel's own Triton kernel
        "at::cuda::philox::unpack_cudnn(at::PhiloxCudaState, long*, long*)",  # cuDNN's dropout seed, in its call
    ],
    "memset": ["Memset (Device)"],
    "memcpy": ["Memcpy DtoD (Device -> Device)"],
    "triton": ["triton_tem_fused_flex_attention_0", "triton_poi_fused_ones_0", "triton_per_fused_flex_attention_1"],
    "softmax": [
        "void (anonymous namespace)::softmax_warp_forward<c10::Half, c10::Half, float, 11, false, false>(c10::Half*, c1",
        "void at::native::(anonymous namespace)::cunn_SoftMaxBackwardSmem<8, c10::BFloat16, float, c10::BFloat16, at::n",
        "void at::native::(anonymous namespace)::cunn_SoftMaxForwardReg<float, float, float, at::native::(anonymous name",
    ],
    "reduction": [
        "void at::native::reduce_kernel<128, 4, at::native::ReduceOp<c10::Half, at::native::func_wrapper_t<c10::Half, at",
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<bool, at::native::func_wrapper_t<bool, at::native::",
    ],
    "elementwise": [
        "void at::native::vectorized_elementwise_kernel<8, at::native::FillFunctor<c10::Half>, std::array<char*, 1ul> >",
        "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_c",
        "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::(anonymous namespace",
        "void at::native::(anonymous namespace)::fused_dropout_kernel_vec<c10::Half, float, unsigned int, 1, 8, bool>(at",
        "void at::native::vectorized_elementwise_kernel<8, at::native::(anonymous namespace)::masked_scale_kernel<bool, c",
        "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::isneginf_kernel_impl(at::Te",
        "void at::native::vectorized_elementwise_kernel<8, at::native::bfloat16_copy_kernel_cuda(at::TensorIteratorBase&",
        "void at::native::vectorized_elementwise_kernel<8, at::native::AUnaryFunctor<c10::Half, c10::Half, c10::Half, at",
        "void at::native::vectorized_elementwise_kernel<8, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::",
        # Nsight Compute's spelling of the same kernels (validation/h200/final/*.ncu.csv.gz)
        "void at::elementwise_kernel<128, 4, void at::gpu_kernel_impl_nocast<at::<unnamed>::masked_fill_kernel(at::Tens",
    ],
}


@pytest.mark.parametrize("cls", sorted(H200_KERNELS))
def test_h200_kernel_names_fall_in_their_class(cls):
    assert [classify_kernel(n) for n in H200_KERNELS[cls]] == [cls] * len(H200_KERNELS[cls])


def test_every_kernel_name_the_records_hold_has_a_class():
    """No kernel the profiler recorded on the H200 (every committed record's profiled kernels and
    the serving probe's) falls in no class."""
    import gzip

    names: set[str] = set()
    for path in sorted((REPO / "validation").rglob("*.json.gz")):
        data = read_json(path)
        for e in data.get("cases", []) if isinstance(data, dict) else []:
            names |= {k["name"] for k in (e.get("timing") or {}).get("profiled_kernels") or []}
    probe = REPO / "validation" / "h200" / "serving-probe" / "serving-probe.jsonl.gz"
    for line in gzip.open(probe, "rt"):
        names |= {k["name"] for k in json.loads(line).get("kernels", [])}
    assert len(names) >= 200
    assert [n for n in sorted(names) if classify_kernel(n) == "other"] == []


def test_the_model_kernels_classes():
    assert model_kernel_classes("bmm#3", "gemm") == {"gemm"}
    assert model_kernel_classes("mul", "scale") == {"elementwise"}
    assert model_kernel_classes("_softmax", "softmax") == {"softmax"}
    assert model_kernel_classes("_softmax_backward_data.mul", "softmax_backward") == {"elementwise"}  # grad ⊙ out
    assert model_kernel_classes("_softmax_backward_data", "softmax_backward") == {"softmax"}
    assert model_kernel_classes("sum", "reduction") == {"reduction"}
    assert model_kernel_classes("sdpa:fa2_fwd", "") == {"attention"}
    assert model_kernel_classes("sdpa:fa2_bwd_pre", "elementwise") == {"attention", "elementwise"}
    assert model_kernel_classes("sdpa:dk_group_sum", "reduction") == {"attention", "reduction"}  # ATen's or cuDNN's
    assert model_kernel_classes("sdpa:mea_bwd_zero", "elementwise") == {"attention", "elementwise", "memset"}
    assert model_kernel_classes("odd", "") == {"other"}


# ---------------------------------------------------------------------------------------
# Alignment


def test_alignment_keeps_the_order_and_reports_what_is_left():
    G, E, S, R = frozenset({"gemm"}), frozenset({"elementwise"}), frozenset({"softmax"}), frozenset({"reduction"})
    # every model launch found; a memset and a second copy are extra
    pairs = align_classes([G, E, S, G], ["memset", "gemm", "elementwise", "elementwise", "softmax", "gemm"])
    assert pairs == [(None, 0), (0, 1), (1, 2), (None, 3), (2, 4), (3, 5)]
    # a reduction the GPU did not run: missing, and the order holds (the last GEMM is not matched early)
    pairs = align_classes([G, S, R, G], ["gemm", "softmax", "gemm", "memset"])
    assert pairs == [(0, 0), (1, 1), (2, None), (3, 2), (None, 3)]
    # out of order: only an order-preserving subsequence matches (2 of 3), the rest either side
    pairs = align_classes([S, G, E], ["gemm", "elementwise", "softmax"])
    assert sum(1 for i, j in pairs if i is not None and j is not None) == 2
    assert [p for p in pairs if p[0] == 0] == [(0, None)]
    assert align_classes([], ["gemm"]) == [(None, 0)] and align_classes([G], []) == [(0, None)]


def _entry(predicted, measured, **timing):
    """A trace case's record entry as the runner writes it (no step times unless given)."""
    case = parse_trace_case(SDPA).to_dict()
    return {
        "case": case,
        "status": "ok",
        "predicted": {"steps": {}, **predicted},
        "timing": {"kernels": {}, "profiled_kernels": measured, **timing},
    }


def test_kernel_match_and_rows_of_a_synthetic_trace_entry():
    predicted = {
        "kernels": {"bmm": 10e-6, "mul": 4e-6, "_softmax": 6e-6, "sum": 2e-6},
        "kernel_ops": {"bmm": "gemm", "mul": "scale", "_softmax": "softmax", "sum": "reduction"},
        "kernel_launches": {"bmm": 1, "mul": 2, "_softmax": 1, "sum": 1},
    }
    copy = "void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, float>>"
    measured = [
        {"name": "Memset (Device)", "time_s": 1e-6},
        {"name": "nvjet_sm90_tst_256x128", "time_s": 8e-6},
        {"name": copy, "time_s": 2.5e-6},
        {"name": copy, "time_s": 2.5e-6},
        {"name": "void at::native::(anonymous namespace)::cunn_SoftMaxForwardReg<float>", "time_s": 5e-6},
    ]
    e = _entry(predicted, measured)
    match = kernel_match(e)
    # launches 1 + 2 + 1 + 1 = 5 in the model; 5 measured; 4 matched; sum missing; the memset extra
    assert {k: match[k] for k in ("model_launches", "measured_kernels", "matched", "missing", "extra")} == {
        "model_launches": 5,
        "measured_kernels": 5,
        "matched": 4,
        "missing": 1,
        "extra": 1,
    }
    assert match["extra_memory_ops"] == 1 and match["missing_kernels"] == ["sum"]
    assert match["extra_kernels"] == [{"name": "Memset (Device)", "class": "memset"}]
    rows = trace_kernel_rows(e)
    assert [(r["kernel"], r["class"]) for r in rows] == [
        (None, "memset"),
        ("bmm", "gemm"),
        ("mul", "elementwise"),
        ("_softmax", "softmax"),
        ("sum", "reduction"),
    ]
    bmm, mul, softmax, total = rows[1], rows[2], rows[3], rows[4]
    assert bmm["error"] == pytest.approx(0.25)  # (10 − 8) / 8
    assert mul["measured_s"] == pytest.approx(5e-6) and mul["matched_launches"] == 2  # 2.5 + 2.5 µs, two launches
    assert mul["error"] == pytest.approx(-0.2)  # (4 − 5) / 5
    assert softmax["error"] == pytest.approx(0.2)  # (6 − 5) / 5
    assert total["measured_s"] is None and "error" not in total
    summary = kernel_list_summary([e, {**e, "status": "failed"}])  # a failed case counts nowhere
    assert summary == {
        "cases": 1,
        "model_launches": 5,
        "measured_kernels": 5,
        "matched": 4,
        "missing": 1,
        "extra": 1,
        "extra_memory_ops": 1,
    }


def test_a_trace_of_eager_attention_finds_every_kernel_the_h200_ran():
    """memmodel_eager.py traced at a training case's shape against the kernels the profiler
    recorded for that case on the H200 (validation/h200/final/h200-training.json.gz): the trace's
    11 launches (6 GEMMs, 2 scales, softmax, the softmax backward's product and proper) all
    matched in order; the 6 extras are the memsets cuBLAS issued before its GEMMs."""
    pytest.importorskip("torch")
    data = read_json(REPO / "validation" / "h200" / "final" / "h200-training.json.gz")
    (measured,) = [e for e in data["cases"] if e["case"]["id"] == "standard/b4h16n2048d128/bf16-bwd"]
    case = parse_trace_case(
        "trace examples/attention/memmodel_eager.py:attention --shape q=4,16,2048,128 --shape k=4,16,2048,128 "
        "--shape v=4,16,2048,128 --dtype bf16 --backward"
    )
    entry = {
        "case": case.to_dict(),
        "status": "ok",
        "predicted": trace_prediction(case, H200),
        "timing": {"profiled_kernels": measured["timing"]["profiled_kernels"]},
    }
    match = kernel_match(entry)
    assert (match["model_launches"], match["matched"], match["missing"]) == (11, 11, 0)
    assert (match["extra"], match["extra_memory_ops"]) == (6, 6)
    classes = [r["class"] for r in trace_kernel_rows(entry) if r["kernel"] is not None]
    assert classes == ["gemm", "elementwise", "softmax", "gemm", "gemm", "gemm"] + [
        "elementwise",
        "softmax",
        "elementwise",
        "gemm",
        "gemm",
    ]
    rows = [r for r in trace_kernel_rows(entry) if r.get("error") is not None]
    assert len(rows) == 11 and all(r["measured_s"] > 0 for r in rows)


# ---------------------------------------------------------------------------------------
# Timing modes against the host model's Times (a stand-in: memmodel.host is the model's side)


class StandInTimes:
    """Duck-typed as memmodel.host.Times: ``of(mode)`` and ``host_s``."""

    def __init__(self, kernel, call, queued, graph, host):
        self.values = {"kernel": kernel, "call": call, "queued": queued, "graph": graph}
        self.host_s = host

    def of(self, mode):
        return self.values[mode]


def test_the_predicted_times_come_from_one_small_function(monkeypatch):
    import memmodel.timing_modes as tm

    times = StandInTimes(40e-6, 90e-6, 60e-6, 45e-6, 70e-6)
    evaluated = SimpleNamespace(times=times)
    monkeypatch.setattr(tm, "host_model_present", lambda: False)
    assert evaluated_times(evaluated) is None and predicted_modes(evaluated) == {}  # no host model: no keys
    monkeypatch.setattr(tm, "host_model_present", lambda: True)
    assert evaluated_times(evaluated) is times
    assert mode_times(times) == {"kernel": 40e-6, "call": 90e-6, "queued": 60e-6, "graph": 45e-6}
    assert predicted_modes(evaluated) == {"times_s": mode_times(times), "host_time_s": 70e-6}

    class Refusing:
        @property
        def times(self):
            from memmodel.errors import WorkloadError

            raise WorkloadError("no host figures for this implementation")

    assert predicted_modes(Refusing()) == {"times_error": "no host figures for this implementation"}


def test_mode_errors_and_their_summary():
    predicted = {"times_s": {"kernel": 40e-6, "call": 110e-6, "queued": 60e-6, "graph": 45e-6}}
    e = _entry(predicted, [], call_time_s=100e-6, queued_time_s=50e-6, graph_error="RuntimeError: capture failed")
    rows = mode_time_errors(e)
    assert [r["mode"] for r in rows] == ["call", "queued"]  # the graph was not measured: no row
    assert rows[0]["error"] == pytest.approx(0.1)  # (110 − 100) / 100
    assert rows[1]["error"] == pytest.approx(0.2)  # (60 − 50) / 50
    assert mode_time_errors({**e, "predicted": {"steps": {}}}) == []  # no host model: no rows
    other = _entry({"times_s": {**predicted["times_s"], "call": 70e-6}}, [], call_time_s=100e-6)
    s = summarize_record({"cases": [e, other]})
    assert s["call_time"] == {"n": 2, "median_abs": pytest.approx(0.2), "max_abs": pytest.approx(0.3)}  # |0.1|, |−0.3|
    assert s["queued_time"]["n"] == 1 and "graph_time" not in s


def test_summaries_of_records_without_the_new_keys_have_none_of_them():
    measured_so = ("h200-calls-check", "h200-trace-check")  # the records that hold the new keys
    older = [
        p
        for p in sorted((REPO / "validation" / "h200" / "final").glob("h200-*.json.gz"))
        if not p.name.startswith(measured_so)
    ]
    for path in older[:6]:
        s = summarize_record(read_json(path))
        assert not {"call_time", "queued_time", "graph_time", "kernel_list", "traced_kernel_time"} & set(s), path


# ---------------------------------------------------------------------------------------
# The runner on the CPU


def test_input_tensors_are_what_attention_code_expects(cpu):
    import torch

    from memmodel.gpu.trace_run import input_tensor

    g = torch.Generator().manual_seed(0)
    mask = input_tensor(torch, (2, 3, 3), "bool", g, "cpu")
    assert mask[0].tolist() == [[False, True, True], [False, False, True], [False, False, False]]  # causal: triu(1)
    assert mask.dtype == torch.bool and mask.shape == (2, 3, 3)
    pos = input_tensor(torch, (2, 4), "int64", g, "cpu")
    assert pos.tolist() == [[0, 1, 2, 3], [0, 1, 2, 3]]
    x = input_tensor(torch, (4, 8), "bf16", g, "cpu")
    assert x.dtype == torch.bfloat16 and bool(torch.isfinite(x).all()) and float(x.float().std()) > 0.3
    q = input_tensor(torch, (1000,), "int8", g, "cpu")
    assert q.dtype == torch.int8 and int(q.min()) < -64 and int(q.max()) > 64


def test_call_times_count_their_calls_and_keep_a_failure_apart(cpu):
    class Counting:
        calls = 0

        def run(self):
            self.calls += 1

    run = Counting()
    out = gpu_run.call_times(run, reps=30, warmup=3)
    assert out["call_reps"] == 30 and out["queued_calls"] == 30
    assert out["call_time_s"] >= 0 and out["queued_time_s"] >= 0
    assert out["graph_error"] == "RuntimeFailure: CUDA graphs need a CUDA device (this run is on the CPU)"
    assert run.calls == (3 + 30) + (3 + 30)  # warm-up and timed calls of the call and the queued timings

    class Failing(Counting):
        def run(self):
            super().run()
            if self.calls > 5:
                raise RuntimeError("out of luck\nsecond line")

    out = gpu_run.call_times(Failing(), reps=30, warmup=3)
    assert out["call_error"] == "RuntimeError: out of luck" and out["queued_error"] == "RuntimeError: out of luck"
    assert "call_time_s" not in out


def test_a_function_case_runs_forward_and_backward_on_the_cpu(cpu):
    import torch

    from memmodel.gpu.trace_run import TraceRun, time_trace_case

    run = TraceRun(parse_trace_case(EAGER))
    assert [name for name, _ in run.steps] == ["forward", "backward"]
    grads = run.run()
    assert [tuple(g.shape) for g in grads] == [(1, 2, 64, 16)] * 3  # dq, dk, dv (the bool mask takes none)
    assert run.finite() and run.inputs["mask"].dtype == torch.bool
    timed = time_trace_case(parse_trace_case(EAGER), reps=20)
    assert set(timed["kernels"]) == {"forward", "backward"} and timed["time_s"] > 0
    assert timed["call_reps"] == 30 and timed["queued_calls"] == 30 and "graph_error" in timed
    assert timed["profiled_kernels"] and timed["output_finite"] is True
    assert len(timed["source_sha256"]) == 64


def test_a_module_case_is_built_cast_and_run_on_the_cpu(cpu):
    import torch

    from memmodel.gpu.trace_run import TraceRun

    run = TraceRun(parse_trace_case(LLAMA.replace("--dtype fp32", "--dtype bf16")))
    assert run.module is not None and not run.module.training  # eval mode, as trace runs it forward
    assert {p.dtype for p in run.module.parameters()} == {torch.bfloat16}
    assert run.module.rotary.cos.dtype == torch.bfloat16  # floating buffers cast too
    out = run.run()
    assert out.shape == (1, 8, 64) and out.dtype == torch.bfloat16 and run.finite()
    train = TraceRun(parse_trace_case(LLAMA + " --backward"))
    assert train.module.training and len(train.wanted) == 1 + len(list(train.module.parameters()))
    grads = train.run()
    assert grads[0].shape == (1, 8, 64)
    with pytest.raises(TraceError, match="has no argument 'x'"):
        TraceRun(parse_trace_case(LLAMA.replace("hidden_states=", "x=")))


# ---------------------------------------------------------------------------------------
# A record written by the runner, scored again by --rescore


def _record(tmp_path, lines):
    """A record as validate writes it, its trace cases run on the CPU."""
    from memmodel.gpu.trace_run import time_trace_case
    from memmodel.gpu.validate import Record

    path = tmp_path / "rec.json"
    record = Record(path, "cpu (test)", H200, "memmodel validate --cases cases.txt")
    for line in lines:
        case = parse_trace_case(line)
        entry = {"case": case.to_dict(), "predicted": trace_prediction(case, H200)}
        entry["timing"] = time_trace_case(case, reps=20)
        entry["status"] = "ok"
        record.data["cases"].append(entry)
        record.save()
    return path


@pytest.fixture
def stand_in_host(monkeypatch):
    """The host model's Times on Trace and Evaluated, as memmodel.host will give them: a
    stand-in whose call time is twice the kernel time and whose graph time is the kernel time."""
    import memmodel.timing_modes as tm
    from memmodel.model import Evaluated
    from memmodel.tracing import Trace

    def times(self):
        k = float(self.timing.time_s)
        return StandInTimes(k, 2 * k, 1.5 * k, k, k)

    monkeypatch.setattr(tm, "host_model_present", lambda: True)
    monkeypatch.setattr(Trace, "times", property(times), raising=False)
    monkeypatch.setattr(Evaluated, "times", property(times), raising=False)


def test_a_runner_record_round_trips_through_rescore(cpu, run, tmp_path, monkeypatch, stand_in_host):
    path = _record(tmp_path, [EAGER, SDPA])
    written = read_json(path)
    assert written["schema"] == "memmodel.validate/1" and written["summary"]["cases"] == {"ok": 2}
    (e, _) = written["cases"]
    assert e["case"]["kind"] == "trace" and e["predicted"]["steps"].keys() == {"forward", "backward"}
    assert e["predicted"]["times_s"]["call"] == pytest.approx(2 * e["predicted"]["times_s"]["kernel"])
    for fmt in ("json", "markdown", "summary", "stats", "table"):
        r = run("validate", "--rescore", str(path), "--format", fmt)
        assert r.exit_code == 0, r.output
    r = run("validate", "--rescore", str(path), "--format", "json")
    new = json.loads(r.stdout)
    s = new["summary"]
    assert s["cases"] == {"ok": 2} and s["kernel_list"]["cases"] == 2
    assert s["call_time"]["n"] == 2 and s["queued_time"]["n"] == 2 and "graph_time" not in s  # no graph on the CPU
    assert s["time"]["n"] == 3  # forward and backward of one case, the call of the other
    assert new["cases"][0]["predicted"]["kernels"] == written["cases"][0]["predicted"]["kernels"]
    md = run("validate", "--rescore", str(path), "--format", "markdown").stdout
    assert "## Traced functions" in md and "| call time (one synchronised call, CUDA events), memmodel |" in md
    assert "not measured: RuntimeFailure: CUDA graphs need a CUDA device" in md
    assert "Traced kernel lists (2 cases)" in run("validate", "--rescore", str(path), "--format", "stats").stdout
    two = run("validate", "--rescore", str(path), str(path), "--format", "summary").stdout
    assert "call time: median / max error" in two.splitlines()[0] and "graph time" not in two


def test_rescore_finds_the_traced_file_beside_the_record_and_says_when_it_changed(cpu, run, tmp_path, monkeypatch):
    from memmodel.gpu.validate import rescore

    folder = tmp_path / "repo"
    (folder / "records").mkdir(parents=True)
    shutil.copy(REPO / "examples" / "attention" / "sdpa.py", folder / "fn.py")
    monkeypatch.chdir(folder)
    line = "trace fn.py:attention --shape q=1,2,64,16 --shape k=1,2,64,16 --shape v=1,2,64,16"
    path = _record(folder / "records", [line])
    data = read_json(path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # fn.py is not here: found from the record's folder, above it
    new = rescore(data, None, H200, near=path)
    assert new["cases"][0]["status"] == "ok" and "source_changed" not in new["cases"][0]
    (folder / "fn.py").write_text((folder / "fn.py").read_text() + "\n# edited\n")
    assert rescore(data, None, H200, near=path)["cases"][0]["source_changed"] is True
    (folder / "fn.py").unlink()
    gone = rescore(data, None, H200, near=path)["cases"][0]
    assert gone["status"] == "refused" and gone["refused"].startswith("fn.py: no such file")
    assert summarize_record({"cases": [gone]})["cases"] == {"refused": 1}
    r = run("validate", "--rescore", str(path))
    assert r.exit_code == 0 and "refused" in r.stdout


def test_resolve_target_as_written_or_above_the_record(tmp_path, monkeypatch):
    case = parse_trace_case(SDPA)
    assert resolve_target(case) == case.target  # from the current folder (the repository)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TraceError, match="no such file"):
        resolve_target(case)
    found = resolve_target(case, REPO / "validation" / "h200" / "final" / "h200-default.json.gz")
    assert found == f"{(REPO / 'examples/attention/sdpa.py').as_posix()}:attention"


# ---------------------------------------------------------------------------------------
# On a GPU


def _cuda() -> bool:
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return bool(torch.cuda.is_available())


@pytest.mark.skipif(not _cuda(), reason="needs a CUDA GPU")
def test_a_trace_case_on_the_gpu_records_every_timing():
    from memmodel.gpu.trace_run import time_trace_case

    case = parse_trace_case(EAGER.replace("fp32", "fp16"))
    out = time_trace_case(case, reps=20)
    assert out["call_time_s"] > 0 and out["queued_time_s"] > 0 and out["queued"] is True
    assert out.get("graph_time_s", 0) > 0 or out.get("graph_error")
    assert any(classify_kernel(k["name"]) == "gemm" for k in out["profiled_kernels"])
