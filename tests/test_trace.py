"""``memmodel trace``: the mapping rules pinned on hand-made recordings (no torch), the examples'
kernel lists, the reproduction of ``compare --standard eager``, the CLI and every bad input."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
import textwrap

import pytest

from .conftest import REPO

EXAMPLES = REPO / "examples" / "attention"


def _ref(storage, shape, dtype="float16", itemsize=2, strides=None):
    from memmodel.tracing.events import TensorRef

    if strides is None:
        acc, out = 1, []
        for n in reversed(shape):
            out.append(acc)
            acc *= n
        strides = tuple(reversed(out))
    return TensorRef(storage, tuple(shape), tuple(strides), dtype, itemsize)


def _map(events, l2="on", gpu="h200", inputs=None):
    from memmodel import load_profile
    from memmodel.plan import base_l2
    from memmodel.tracing.events import Recording
    from memmodel.tracing.kernels import map_recording

    rec = Recording(tuple(events), inputs or {}, {}, {}, {})
    return map_recording(rec, base_l2(load_profile(gpu), l2), "fp16", None)


def _event(op, args, outputs, overload="default", pass_="forward", kwargs=None, view=False):
    from memmodel.tracing.events import OpEvent

    return OpEvent(op, overload, pass_, tuple(args), kwargs or {}, tuple(outputs), view)


# --- the rules, on hand-made recordings ---------------------------------------------------


def test_a_bmm_moves_its_operands_once_per_tile_row_or_column():
    a, b, c = _ref(1, (8, 256, 64)), _ref(2, (8, 64, 512)), _ref(3, (8, 256, 512))
    (k,) = _map([_event("bmm", (a, b), (c,))], inputs={1: "q", 2: "k"}).kernels
    assert k.name == "bmm" and k.op == "gemm"
    # A: 8·256·64·2 = 262144 bytes, requested ⌈512/128⌉ = 4 times; B: 8·64·512·2 = 524288, ⌈256/128⌉ = 2 times
    assert k.bytes(level="l2", direction="read") == 4 * 262144 + 2 * 524288
    # each read from HBM once; C written: 8·256·512·2 = 2097152
    assert k.bytes(level="hbm", direction="read") == 262144 + 524288
    assert k.bytes(level="hbm", direction="write") == 2097152
    assert k.matmul_flops == 2 * 8 * 256 * 512 * 64 == 134217728


def test_a_broadcast_mask_is_requested_per_element_and_read_once_where_it_fits():
    s, mask = _ref(1, (2, 4, 256, 256)), _ref(2, (256, 256), "bool", 1)
    (k,) = _map([_event("masked_fill_", (s, mask, float("-inf")), (s,), "Scalar")]).kernels
    assert k.op == "masked_fill"
    rows = {(t.tensor, t.level): t.bytes for t in k.transfers if t.direction == "read"}
    # requested: one bool per score, 2·4·256·256 = 524288; held: 256·256 = 65536, which fits in L2
    assert rows[("t2", "l2")] == 524288 and rows[("t2", "hbm")] == 65536
    # off: every request from HBM
    (off,) = _map([_event("masked_fill_", (s, mask, float("-inf")), (s,), "Scalar")], l2="off").kernels
    assert {(t.tensor, t.level): t.bytes for t in off.transfers if t.direction == "read"}[("t2", "hbm")] == 524288


def test_what_the_previous_kernel_wrote_is_read_from_l2_where_it_fits():
    s, t = _ref(1, (1, 8, 512, 512)), _ref(2, (1, 8, 512, 512))
    events = [_event("fill_", (s, 0.0), (s,), "Scalar"), _event("mul", (s, 0.125), (t,), "Tensor")]
    fill, mul = _map(events).kernels
    assert fill.bytes(level="hbm", direction="read") == 0  # a fill reads nothing
    assert mul.op == "scale" and mul.bytes(level="hbm", direction="read") == 0  # 4 MiB: still in the L2
    assert mul.bytes(level="l2", direction="read") == 8 * 512 * 512 * 2
    _, cold = _map(events, l2="cold").kernels
    assert cold.bytes(level="hbm", direction="read") == 8 * 512 * 512 * 2


def test_an_elementwise_op_past_32_bit_offsets_launches_in_parts():
    # a bf16 tensor of 2³¹ elements (4 GiB): ATen's gpu_kernel splits it in two halves
    x, y = _ref(1, (2, 2**30), "bfloat16"), _ref(2, (2, 2**30), "bfloat16")
    (k,) = _map([_event("mul", (x, 0.5), (y,), "Tensor")]).kernels
    assert k.launches == 2
    (small,) = _map([_event("mul", (_ref(1, (4, 4)), 0.5), (_ref(2, (4, 4)),), "Tensor")]).kernels
    assert small.launches == 1


def test_views_are_free_and_unknown_ops_are_listed_with_their_shapes():
    x, v = _ref(1, (2, 3)), _ref(1, (3, 2), strides=(1, 3))
    out = _map(
        [
            _event("transpose", (x, 0, 1), (v,), "int", view=True),
            _event("native_layer_norm", (x, [3], None, None, 1e-5), (_ref(2, (2, 3)),)),
        ]
    )
    assert out.kernels == () and [o.status for o in out.ops] == ["free", "unmodelled"]
    (u,) = out.unmodelled
    assert u.op == "aten.native_layer_norm.default" and u.reason == "no rule for this op"
    assert u.shapes == ("[2, 3] float16", "-> [2, 3] float16")


def test_a_rule_is_registered_once():
    from memmodel.tracing.kernels import RULES, rule

    assert "bmm" in RULES and "_softmax_backward_data" in RULES
    with pytest.raises(ValueError, match="two rules for aten.bmm"):
        rule("bmm")(lambda m, e: None)


def test_parse_shape_reads_names_dims_and_a_dtype():
    from memmodel.errors import TraceError
    from memmodel.tracing import parse_shape

    assert parse_shape("q=1,8,1024,64") == ("q", (1, 8, 1024, 64), None)
    assert parse_shape(" mask = 1024, 1024 :BOOL") == ("mask", (1024, 1024), "bool")
    for bad, says in (
        ("q", "expected NAME=DIMS"),
        ("1q=2", "not an argument name"),
        ("q=1,x", "'x' is not a whole number"),
        ("q=1,,2", "'' is not a whole number"),
        ("q=1,0", "dims must be positive (got 0)"),
        ("q=1,-3", "dims must be positive (got -3)"),
        ("q=9223372036854775808", "larger than 9223372036854775807"),
        ("q=1:int7", "unknown dtype 'int7'"),
    ):
        with pytest.raises(TraceError, match=says.replace("(", r"\(").replace(")", r"\)")):
            parse_shape(bad)


def test_import_memmodel_stays_free_of_torch():
    import subprocess

    code = "import sys, memmodel; memmodel.trace; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == "False"


def test_without_torch_trace_says_what_to_install(run, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    r = run("trace", f"{EXAMPLES / 'sdpa.py'}:attention", "--shape", "q=1,1,8,8")
    assert r.exit_code == 1 and r.stdout == ""
    assert r.stderr.strip() == (
        "memmodel: error: memmodel trace needs torch (its CPU build is enough), which is not installed: pip install torch"
    )


# --- with torch ----------------------------------------------------------------------


def _example(name):
    spec = importlib.util.spec_from_file_location(f"_trace_example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


EAGER_CASES = [
    # gpu, batch, heads, kv heads, n, n_kv, d, dtype, causal, dropout
    ("h200", 1, 8, 8, 2048, 2048, 64, "bf16", True, False),
    ("h200", 2, 16, 16, 1024, 1024, 128, "fp16", True, True),
    ("a100", 1, 32, 32, 512, 2048, 64, "fp32", False, False),
    ("h200", 1, 32, 8, 1024, 1024, 128, "bf16", True, False),
    ("mi300x", 1, 16, 16, 2048, 2048, 128, "bf16", True, True),
]


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
@pytest.mark.parametrize("case", EAGER_CASES, ids=lambda c: "-".join(map(str, c)))
def test_trace_of_memmodels_eager_attention_is_compare_standard_eager(case, backward):
    pytest.importorskip("torch")
    from memmodel import Workload, compare, load_profile, trace

    gpu, b, h, kv, n, n_kv, d, dtype, causal, dropout = case
    profile = load_profile(gpu)
    shapes = {"q": (b, h, n, d), "k": (b, kv, n_kv, d), "v": (b, kv, n_kv, d)}
    if causal:
        shapes["mask"] = ((h // kv * n, n_kv), "bool")
    eager = _example("memmodel_eager")
    t = trace(
        eager.attention_dropout if dropout else eager.attention, shapes, dtype=dtype, backward=backward, profile=profile
    )
    w = Workload(n=n, n_kv=n_kv, d=d, batch=b, heads=h, kv_heads=kv, dtype=dtype, causal=causal, dropout=0.1 * dropout)
    std = compare(w, profile, backward=backward, standard="eager").standard
    assert t.unmodelled == ()
    # the same kernels, in the same order, of the same kinds
    assert [(k.op, k.pass_, k.kind) for k in t.traffic.kernels] == [
        (k.op, k.pass_, k.kind) for k in std.traffic.kernels
    ]
    for mine, theirs, mine_t, theirs_t in zip(
        t.traffic.kernels, std.traffic.kernels, t.timing.kernels, std.timing.kernels
    ):
        for level in ("hbm", "l2", "mall"):
            assert mine.bytes(level=level) == pytest.approx(theirs.bytes(level=level), rel=0.01), (mine.name, level)
        assert mine.flops == pytest.approx(theirs.flops, rel=0.01) and mine.launches == theirs.launches
        assert mine_t.time_s == pytest.approx(theirs_t.time_s, rel=0.01), mine.name
    assert t.traffic.hbm_bytes == pytest.approx(std.traffic.hbm_bytes, rel=0.01)
    assert t.timing.time_s == pytest.approx(std.timing.time_s, rel=0.01)


EXAMPLE_CASES = {
    "flash_benchmark": (
        {"q": (2, 1024, 4, 64), "k": (2, 1024, 4, 64), "v": (2, 1024, 4, 64)},
        # q scaled, einsum's copies of q and k into bmm's layout, S = Q Kᵀ, the mask built and added,
        # softmax, the copy of v, P V
        ["mul", "clone", "clone#2", "bmm", "full", "triu", "_to_copy", "add", "_softmax", "clone#3", "bmm#2"],
        ["bmm#3", "bmm#4", "_softmax_backward_data.mul", "_softmax_backward_data", "bmm#5", "bmm#6", "mul#2"],
    ),
    "llama_eager": (
        {
            "query": (1, 8, 1024, 128),
            "key": (1, 2, 1024, 128),
            "value": (1, 2, 1024, 128),
            "attention_mask": (1, 1, 1024, 1024),
        },
        # repeat_kv's copies of K and V, Q Kᵀ, the scaling, the additive mask, the cast to fp32,
        # the softmax, the cast back, P V, the heads moved back
        ["clone", "clone#2", "bmm", "mul", "add", "_to_copy", "_softmax", "_to_copy#2", "bmm#2", "clone#3"],
        # the gradients of P V, the casts around the fp32 softmax's backward, the scaling's, Q Kᵀ's,
        # and the group sums of dK and dV (expand's); the mask needs none (grad)
        [
            "bmm#3",
            "bmm#4",
            "_to_copy#3",
            "_softmax_backward_data.mul",
            "_softmax_backward_data",
            "_to_copy#4",
            "mul#2",
            "bmm#5",
            "bmm#6",
            "sum",
            "sum#2",
        ],
        ("query", "key", "value"),
    ),
    "gpt2_block": (
        {
            "x": (2, 1024, 768),
            "c_attn_weight": (768, 2304),
            "c_attn_bias": (2304,),
            "c_proj_weight": (768, 768),
            "c_proj_bias": (768,),
            "bias": ((1, 1, 1024, 1024), "bool"),
        },
        # the QKV projection, matmul's copies of the strided Q and K heads, Q Kᵀ, the divisor made
        # and applied, the mask's minimum made and applied with where, softmax, attention dropout,
        # the copy of V, P V, the heads merged, the output projection, the residual dropout
        [
            "addmm",
            "clone",
            "clone#2",
            "bmm",
            "full",
            "div",
            "full#2",
            "where",
            "_softmax",
            "native_dropout",
            "clone#3",
            "bmm#2",
            "clone#4",
            "addmm#2",
            "native_dropout#2",
        ],
        [
            "native_dropout_backward",
            "mm",
            "mm#2",
            "sum",
            "clone#5",
            "bmm#3",
            "bmm#4",
            "native_dropout_backward#2",
            "_softmax_backward_data.mul",
            "_softmax_backward_data",
            "scalar_tensor",
            "where#2",
            "div#2",
            "bmm#5",
            "bmm#6",
            "clone#6",
            "clone#7",
            "cat",
            "mm#3",
            "mm#4",
            "sum#2",
        ],
    ),
    "bloom_alibi": (
        {
            "q": (8, 256, 64),
            "k": (8, 256, 64),
            "v": (8, 256, 64),
            "alibi": (8, 1, 256),
            "mask": ((1, 256, 256), "bool"),
        },
        # baddbmm copies the bias, expanded, into its result and adds Q Kᵀ to it, masked_fill out of
        # place (a copy, then the fill), the casts around the fp32 softmax, P V (dropout off outside
        # training: no kernel)
        ["baddbmm.copy", "baddbmm", "clone", "masked_fill_", "_to_copy", "_softmax", "_to_copy#2", "bmm"],
        # P V's gradients, the casts around the softmax's backward, masked_fill's gradient (a copy,
        # zeroed where masked), Q Kᵀ's gradients and baddbmm's alpha applied to each
        [
            "bmm#2",
            "bmm#3",
            "_to_copy#3",
            "_softmax_backward_data.mul",
            "_softmax_backward_data",
            "_to_copy#4",
            "clone#2",
            "masked_fill_#2",
            "bmm#4",
            "mul",
            "bmm#5",
            "mul#2",
        ],
        ("q", "k", "v"),
    ),
    "t5_attention": (
        {"q": (2, 4, 256, 64), "k": (2, 4, 256, 64), "v": (2, 4, 256, 64), "position_bias": (1, 4, 256, 256)},
        # Q Kᵀ unscaled, the bias added, the fp32 softmax between its casts, P V (dropout off)
        ["bmm", "add", "_to_copy", "_softmax", "_to_copy#2", "bmm#2"],
        [
            "bmm#3",
            "bmm#4",
            "_to_copy#3",
            "_softmax_backward_data.mul",
            "_softmax_backward_data",
            "_to_copy#4",
            "bmm#5",
            "bmm#6",
        ],
        ("q", "k", "v"),
    ),
    "vit_attention": (
        {
            "x": (2, 197, 768),
            "qkv_weight": (2304, 768),
            "qkv_bias": (2304,),
            "proj_weight": (768, 768),
            "proj_bias": (768,),
        },
        # the QKV projection, Q scaled, matmul's copies of the strided Q and Kᵀ, softmax, the copy of
        # V, P V, the heads merged, the output projection
        ["addmm", "mul", "clone", "clone#2", "bmm", "_softmax", "clone#3", "bmm#2", "clone#4", "addmm#2"],
        [
            "mm",
            "mm#2",
            "sum",
            "clone#5",
            "bmm#3",
            "bmm#4",
            "_softmax_backward_data.mul",
            "_softmax_backward_data",
            "bmm#5",
            "bmm#6",
            "mul#2",
            "stack",
            "clone#6",
            "mm#3",
            "mm#4",
            "sum#2",
        ],
    ),
    "mqa_einsum": (
        {"q": (2, 8, 256, 64), "k": (2, 256, 64), "v": (2, 256, 64), "mask": ((256, 256), "bool")},
        # einsum's bmm against the one K/V head, the scale, masked_fill out of place, softmax, P V
        ["bmm", "mul", "clone", "masked_fill_", "_softmax", "bmm#2"],
        [
            "bmm#3",
            "bmm#4",
            "_softmax_backward_data.mul",
            "_softmax_backward_data",
            "clone#2",
            "masked_fill_#2",
            "mul#2",
            "bmm#5",
            "bmm#6",
        ],
    ),
    "sdpa": (
        {"q": (1, 8, 1024, 128), "k": (1, 2, 1024, 128), "v": (1, 2, 1024, 128)},
        # cuDNN's: the SDPA call's memset, then its fused kernel; in the backward its memset and kernels
        ["sdpa:cudnn_zero", "sdpa:fa2_fwd"],
        [
            "sdpa:cudnn_bwd_zero",
            "sdpa:cudnn_bwd_pre",
            "sdpa:cudnn_bwd",
            "sdpa:cudnn_bwd_dq",
            "sdpa:dk_group_sum",
            "sdpa:dv_group_sum",
        ],
    ),
}


@pytest.mark.parametrize("name", sorted(EXAMPLE_CASES))
def test_each_example_traces_to_its_kernel_list(name):
    pytest.importorskip("torch")
    from memmodel import trace

    shapes, forward, backward, *grad = EXAMPLE_CASES[name]
    fn = _example(name).attention
    t = trace(fn, shapes, dtype="bf16", profile="h200")
    assert [k.name for k in t.traffic.kernels] == forward and t.unmodelled == ()
    t = trace(fn, shapes, dtype="bf16", backward=True, profile="h200", grad=grad[0] if grad else None)
    assert [k.name for k in t.traffic.kernels] == forward + backward and t.unmodelled == ()
    assert all(k.pass_ == "backward" for k in t.traffic.kernels[len(forward) :])


def test_an_sdpa_call_is_compares_fused_model_of_pytorchs_choice():
    pytest.importorskip("torch")
    from memmodel import Workload, compare, load_profile, trace

    profile = load_profile("h200")
    shapes = {"q": (2, 16, 2048, 128), "k": (2, 16, 2048, 128), "v": (2, 16, 2048, 128)}
    t = trace(_example("sdpa").attention, shapes, dtype="bf16", backward=True, profile=profile)
    c = compare(Workload(n=2048, d=128, batch=2, heads=16, dtype="bf16", causal=True), profile, backward=True)
    (call,) = t.sdpa
    assert call.implementation == c.options.implementation == "sdpa-cudnn" and call.backward
    assert t.traffic.hbm_bytes == c.tiled.traffic.hbm_bytes
    assert t.timing.time_s == pytest.approx(c.tiled.timing.time_s)
    assert {o.status for o in t.ops} == {"sdpa"}
    from memmodel.report.trace import trace_csv_rows

    rows = trace_csv_rows(t)
    assert [r["status"] for r in rows] == ["sdpa"] * len(t.traffic.kernels) + ["total"]
    assert rows[-1]["hbm_bytes"] == c.tiled.traffic.hbm_bytes


def test_cuda_s_own_calls_are_what_is_recorded():
    """dropout is native_dropout, an fp16 softmax to fp32 is one _softmax (half to float) while a
    bf16 one casts first, and a device named in the code is taken as the CPU's."""
    pytest.importorskip("torch")
    import torch
    import torch.nn.functional as F

    from memmodel import trace

    def fn(x):
        y = F.dropout(x, 0.2)
        z = F.softmax(y, dim=-1, dtype=torch.float32)
        return z + torch.ones(x.shape[-1], device="cuda")

    ops = [k.name for k in trace(fn, {"x": (4, 256)}, dtype="fp16").traffic.kernels]
    assert ops == ["native_dropout", "_softmax", "ones", "add"]
    ops = [k.name for k in trace(fn, {"x": (4, 256)}, dtype="bf16").traffic.kernels]
    assert ops == ["native_dropout", "_to_copy", "_softmax", "ones", "add"]


def test_an_unmodelled_op_is_listed_in_every_output(run, tmp_path):
    pytest.importorskip("torch")
    src = tmp_path / "norm.py"
    src.write_text("import torch.nn.functional as F\n\ndef f(x):\n    return F.layer_norm(x * 2, x.shape[-1:])\n")
    args = ("trace", f"{src}:f", "--shape", "x=4,64")
    r = run(*args)
    assert r.exit_code == 0
    assert "unmodelled: 1 ops not counted above: aten.native_layer_norm.default ([4, 64] float32" in r.stdout
    data = json.loads(run(*args, "--format", "json").stdout)
    assert [u["op"] for u in data["unmodelled"]] == ["aten.native_layer_norm.default"]
    assert [o["status"] for o in data["ops"]] == ["kernel", "unmodelled"]
    rows = run(*args, "--format", "csv").stdout.splitlines()
    assert rows[0].startswith("gpu,function,status,kernel,op,pass,") and rows[-1].split(",")[2] == "unmodelled"


def test_the_cli_prints_the_ledger_as_compare_does(run):
    pytest.importorskip("torch")
    qkv = (
        "--shape",
        "q=1,4,512,64",
        "--shape",
        "k=1,4,512,64",
        "--shape",
        "v=1,4,512,64",
        "--shape",
        "mask=512,512:bool",
    )
    target = f"{EXAMPLES / 'memmodel_eager.py'}:attention"
    r = run("trace", target, *qkv, "--dtype", "bf16", "--backward", "--gpu", "h200")
    assert r.exit_code == 0, r.stderr
    for line in ("Traced kernels: 14 kernels from 12 ATen ops", "HBM total", "predicted time", "backward: HBM"):
        assert line in r.stdout
    # the given mask is state, as compare counts masks
    assert re.search(r"^masked_fill_ +mask +state +read ", r.stdout, re.M)
    data = json.loads(run("trace", target, *qkv, "--dtype", "bf16", "--format", "json").stdout)
    assert data["schema"] == "memmodel.trace/1" and data["options"] == {
        "dtype": "bf16",
        "backward": False,
        "l2": "on",
        "timing": "kernel",
    }
    (alg,) = data["algorithms"]
    assert [k["op"] for k in alg["kernels"]] == [
        "aten.bmm.default",
        "aten.mul.Tensor",
        "aten.masked_fill_.Scalar",
        "aten._softmax.default",
        "aten.bmm.default",
    ]
    assert data["hbm_bytes"] == alg["hbm_bytes"] == sum(k["hbm_bytes"] for k in alg["kernels"])
    assert data["inputs"][3] == {"name": "mask", "shape": [512, 512], "dtype": "bool"}
    csv = run("trace", target, *qkv, "--format", "csv").stdout.splitlines()
    assert len(csv) == 1 + 5 + 1 and csv[-2].split(",")[2:4] == ["kernel", "bmm#2"] and ",total," in csv[-1]


def _failing(tmp_path, body):
    src = tmp_path / "user.py"
    src.write_text(textwrap.dedent(body))
    return str(src)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("nofile.py:f", "--shape", "q=1"), "nofile.py: no such file"),
        (("{ex}", "--shape", "q=1"), "expected FILE.py:FUNCTION"),
        (("{ex}:nope",), "has no function or class 'nope' (its functions and classes: attention)"),
        (("{ex}:attention", "--shape", "q"), "--shape 'q': expected NAME=DIMS"),
        (("{ex}:attention", "--shape", "q=1,two"), "'two' is not a whole number"),
        (("{ex}:attention", "--shape", "q=1,0,4"), "dims must be positive (got 0)"),
        (("{ex}:attention", "--shape", "q=1,-4"), "dims must be positive (got -4)"),
        (("{ex}:attention", "--shape", "q=99999999999999999999999"), "larger than 9223372036854775807 (2^63 - 1)"),
        (("{ex}:attention", "--shape", "zz=1,2"), "has no argument 'zz' (its arguments: q, k, v, causal, dropout_p)"),
        (("{ex}:attention", "--shape", "q=1,2,8,4"), "needs its argument 'k': give --shape k=DIMS"),
        (("{ex}:attention", "--shape", "q=1", "--shape", "q=2"), "--shape q=... given twice"),
        (("{ex}:attention", "--shape", "q=1:int7"), "unknown dtype 'int7'"),
        (
            ("{ex}:attention", "--shape", "q=1,2,8,4", "--shape", "k=1,2,8,4", "--shape", "v=1,2,6,4"),
            "attention raised RuntimeError under fake tensors: scaled_dot_product_attention: key has 8 positions, value 6",
        ),
        (
            ("{ex}:attention", "--shape", "q=4611686018427387904,4", "--shape", "k=1", "--shape", "v=1"),
            "cannot be made: Storage size calculation overflowed",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(run, args, message):
    pytest.importorskip("torch")
    ex = str(EXAMPLES / "sdpa.py")
    r = run("trace", *(a.replace("{ex}", ex) for a in args))
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("memmodel: error: ") and message in r.stderr, r.stderr


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            "def f(x):\n    raise ValueError('no luck\\nsecond line')\n",
            "user.py:f raised ValueError under fake tensors: no luck",
        ),
        (
            "def f(x):\n    return x * float(x.sum())\n",
            "raised DataDependentOutputException under fake tensors: aten._local_scalar_dense.default (fake tensors hold "
            "shapes, not values: code that reads a value on the host cannot be traced)",
        ),
        ("import nonesuch_module\n\ndef f(x):\n    return x\n", "user.py: importing it raised ModuleNotFoundError"),
        ("def f(x):\n    return 3\n", "user.py:f returned no tensor"),
        ("f = 3\n", "user.py:f is neither a function nor an nn.Module class (its type: int)"),
    ],
)
def test_a_function_that_fails_under_fake_tensors_gets_its_own_line(run, tmp_path, body, message):
    pytest.importorskip("torch")
    r = run("trace", f"{_failing(tmp_path, body)}:f", "--shape", "x=4,4")
    assert r.exit_code == 2 and r.stdout == "" and r.stderr.count("\n") == 1
    assert r.stderr.startswith("memmodel: error: ") and message in r.stderr, r.stderr


def test_backward_needs_an_output_that_depends_on_a_floating_input(run, tmp_path):
    pytest.importorskip("torch")
    src = _failing(tmp_path, "import torch\n\ndef f(x):\n    return torch.zeros(4)\n")
    r = run("trace", f"{src}:f", "--shape", "x=4", "--backward")
    assert r.exit_code == 2 and "--backward: no output of" in r.stderr and "depends on a floating input" in r.stderr


def test_atens_own_fused_kernels_are_modelled_as_the_kernel_they_name():
    pytest.importorskip("torch")
    import torch

    from memmodel import trace

    def efficient(q, k, v):
        return torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, None, True, 0.0, True)[0]

    shapes = {"q": (1, 8, 1024, 64), "k": (1, 8, 1024, 64), "v": (1, 8, 1024, 64)}
    t = trace(efficient, shapes, dtype="bf16", backward=True, profile="h200")
    assert [c.implementation for c in t.sdpa] == ["sdpa-efficient"] and t.unmodelled == ()
    assert [o.status for o in t.ops if o.status != "free"] == ["sdpa", "sdpa"]
    assert {k.pass_ for k in t.traffic.kernels} == {"forward", "backward"}


def test_what_the_function_prints_goes_to_stderr(run, tmp_path):
    pytest.importorskip("torch")
    src = _failing(tmp_path, "def f(x):\n    print('hello from f')\n    return x * 2\n")
    r = run("trace", f"{src}:f", "--shape", "x=8,8", "--format", "json")
    assert r.exit_code == 0 and json.loads(r.stdout)["function"].endswith("user.py:f")
    assert "hello from f" in r.stderr


def test_the_python_api_checks_its_arguments_and_takes_shapes_in_several_forms():
    pytest.importorskip("torch")
    import torch

    from memmodel import load_profile, trace
    from memmodel.errors import ProfileError, TraceError

    def f(x, mask):
        return x.masked_fill(mask, 0.0)

    with pytest.raises(TraceError, match="unknown dtype 'fp8' for a trace: accepted are fp32, fp16, bf16"):
        trace(f, {"x": (4, 4), "mask": ((4, 4), "bool")}, dtype="fp8")
    with pytest.raises(TraceError, match="unknown L2 mode 'warm'"):
        trace(f, {"x": (4, 4)}, l2="warm")
    with pytest.raises(ProfileError):
        trace(f, {"x": (4, 4)}, profile="no-such-gpu")
    with pytest.raises(TraceError, match="f needs its argument 'mask'"):
        trace(f, {"x": (4, 4)})
    forms = [
        {"x": (4, 16), "mask": ((4, 16), "bool")},
        {"x": "4,16", "mask": "4,16:bool"},
        {"x": torch.empty(4, 16), "mask": torch.empty(4, 16, dtype=torch.bool)},
    ]
    traced = [trace(f, shapes, profile=load_profile("h200")) for shapes in forms]
    assert {t.traffic.hbm_bytes for t in traced} == {traced[0].traffic.hbm_bytes}
    assert [i.dtype for i in traced[0].inputs] == ["float32", "bool"]
    # masked_fill out of place: the clone, then masked_fill_ (x 4·16·4 bytes, the mask 4·16)
    assert [k.name for k in traced[0].traffic.kernels] == ["clone", "masked_fill_"]


def test_grad_names_the_gradients_the_backward_computes(run):
    pytest.importorskip("torch")
    target = f"{EXAMPLES / 'llama_eager.py'}:attention"
    shapes = ["--shape", "query=1,4,256,64", "--shape", "key=1,2,256,64", "--shape", "value=1,2,256,64"]
    shapes += ["--shape", "attention_mask=1,1,256,256"]
    every = json.loads(run("trace", target, *shapes, "--backward", "--format", "json").stdout)
    some = json.loads(
        run("trace", target, *shapes, "--backward", "--grad", "query,key,value", "--format", "json").stdout
    )
    # the additive mask's gradient: the scores' gradient summed over the heads, 1·4·256·256·4 bytes read (fp32)
    (extra,) = [k for k in every["algorithms"][0]["kernels"] if k["name"] == "sum"][:1]
    assert extra["l2_read_bytes"] == 4 * 256 * 256 * 4 and extra["hbm_write_bytes"] == 256 * 256 * 4
    assert len(every["algorithms"][0]["kernels"]) == len(some["algorithms"][0]["kernels"]) + 1
    r = run("trace", target, *shapes, "--backward", "--grad", "query,attention_mask,nope")
    assert (
        r.exit_code == 2
        and "--grad nope: not a floating input of the function (its floating inputs: query, " in r.stderr
    )
    r = run("trace", target, *shapes, "--grad", "query")
    assert r.exit_code == 2 and "--grad names the gradients of the backward: give --backward too" in r.stderr


def test_the_flash_benchmarks_packed_baseline_traces_as_its_benchmark_runs():
    pytest.importorskip("torch")
    from memmodel import trace

    fn = _example("flash_benchmark").benchmark_baseline
    t = trace(fn, {"qkv": (2, 1024, 3, 4, 64)}, dtype="fp16", backward=True, profile="h100-sxm")
    # Q and Kᵀ copied into bmm's layout, baddbmm (the scale its alpha: no scaling kernel), the
    # mask built in fp32, cast and added, softmax, V copied for einsum's bmm, P V; backward: P V's
    # gradients, softmax's, baddbmm's (each times alpha), and dQ, dK, dV stacked into dqkv
    assert [k.name for k in t.traffic.kernels] == [
        "clone",
        "clone#2",
        "baddbmm",
        "full",
        "triu",
        "_to_copy",
        "add",
        "_softmax",
        "clone#3",
        "bmm",
        "bmm#2",
        "bmm#3",
        "_softmax_backward_data.mul",
        "_softmax_backward_data",
        "bmm#4",
        "mul",
        "bmm#5",
        "mul#2",
        "stack",
    ]
    assert t.unmodelled == ()
    # the scores: 2 x 4 heads x 1024 x 1024 fp16 = 16 MiB, written by baddbmm
    baddbmm = next(k for k in t.traffic.kernels if k.name == "baddbmm")
    writes = sum(x.bytes for x in baddbmm.transfers if x.level == "hbm" and x.direction == "write")
    assert writes == 2 * 4 * 1024 * 1024 * 2


def test_a_large_product_takes_cublas_large_tiles_and_dense_arithmetic_the_vectorised_rate():
    pytest.importorskip("torch")
    import torch

    from memmodel import trace

    def layer(x, w, y):
        return torch.mm(x, w) + y  # a projection, then a residual add of the same shape

    t = trace(layer, {"x": (4096, 4096), "w": (4096, 4096), "y": (4096, 4096)}, dtype="bf16", profile="h200")
    mm, add = t.traffic.kernels
    reads = {x.tensor: x.bytes for x in mm.transfers if x.level == "l2" and x.direction == "read"}
    a = 4096 * 4096 * 2  # 32 MiB each operand
    # 256 x 128 output tiles: A requested once per tile column (4096 / 128 = 32), B once per tile
    # row (4096 / 256 = 16)
    assert reads == {"x": 32 * a, "w": 16 * a}
    # every tensor of the add has the output's shape: ATen's vectorised kernel, the scale rate
    assert add.op == "scale"

    def attention_shaped(q, k):
        return q @ k.transpose(-1, -2)  # inner dimension 64: 128 x 128 tiles, as before

    t = trace(attention_shaped, {"q": (1, 4, 1024, 64), "k": (1, 4, 1024, 64)}, dtype="bf16", profile="h200")
    bmm = next(k for k in t.traffic.kernels if k.op == "gemm")
    q_bytes = 4 * 1024 * 64 * 2
    q_reads = [x.bytes for x in bmm.transfers if x.level == "l2" and x.direction == "read" and x.tensor == "q"]
    assert q_reads == [8 * q_bytes]  # ⌈1024 / 128⌉ = 8 tile columns


def test_a_broadcast_operand_keeps_the_generic_elementwise_rate():
    pytest.importorskip("torch")

    from memmodel import trace

    def norm(x, r):
        return x * r  # r (4096, 1) broadcast over the columns

    t = trace(norm, {"x": (4096, 4096), "r": (4096, 1)}, dtype="fp32", profile="h200")
    (mul,) = t.traffic.kernels
    # ATen's generic kernel; r is one value a row, so x's run (all of it) sets the rate
    assert mul.op == "gather" and mul.run == 4096 * 4096 and mul.element_bytes == 4
    # twice the 67.1 MB written at the 4-byte gather curve's longest run (2.561 TB/s): 52.41 us,
    # plus the launch (1.38 us); the trace-check record measured this kernel at 49.98 us
    (timed,) = t.timing.kernels
    assert timed.time_s == pytest.approx(2 * 4096 * 4096 * 4 / 2.561e12 + 1.38e-6, rel=1e-3)


def test_gathers_and_zero_dim_operands_take_the_generic_elementwise_path():
    pytest.importorskip("torch")
    import torch

    from memmodel import trace

    def heads(x):
        merged = x.permute(0, 2, 1, 3).contiguous()  # a copy of a permuted view: a gather
        copied = x.clone()  # a contiguous copy
        divisor = torch.full([], 8.0, dtype=x.dtype, device=x.device)  # a 0-dim tensor, not a number
        return merged, copied, x / divisor, x * 0.125

    t = trace(heads, {"x": (2, 64, 4, 32)}, dtype="bf16", profile="h200")
    ops = {k.name: k for k in t.traffic.kernels}
    # the permuted copy reads runs of 32 elements (d); the 0-dim divisor limits nothing: x's run
    # the contiguous clone: ATen's cudaMemcpyAsync, a device-to-device memcpy
    assert (ops["clone"].op, ops["clone"].run) == ("gather", 32) and ops["clone#2"].op == "memcpy"
    assert (ops["div"].op, ops["div"].run) == ("gather", 2 * 64 * 4 * 32) and ops["mul"].op == "scale"
    assert ops["clone"].element_bytes == 2


def test_sdpas_output_follows_the_querys_layout():
    """cuDNN and FlashAttention-2 allocate O in the order of Q's strides: heads split from a
    projection and transposed come back contiguous when transposed again (no copy); heads given
    contiguous (B, H, N, d) need one."""
    pytest.importorskip("torch")
    import torch.nn.functional as F

    from memmodel import trace

    def from_projection(x):
        q = x.view(2, 256, 8, 64).transpose(1, 2)  # (B, H, N, d) over (B, N, H, d) memory
        return F.scaled_dot_product_attention(q, q, q).transpose(1, 2).contiguous()

    def from_heads(q):
        return F.scaled_dot_product_attention(q, q, q).transpose(1, 2).contiguous()

    t = trace(from_projection, {"x": (2, 256, 512)}, dtype="bf16", profile="h200")
    assert not any(k.name.startswith("clone") for k in t.traffic.kernels)
    t = trace(from_heads, {"q": (2, 8, 256, 64)}, dtype="bf16", profile="h200")
    assert [k.op for k in t.traffic.kernels if k.name.startswith("clone")] == ["gather"]


def test_size_one_dims_keep_the_vectorised_kernel():
    """ATen's iterator drops dims of one element: a bias row over a one-token batch, or two heads
    tensors that differ only in the stride of a one-position dim, run the vectorised kernel (as the
    decode layers' profiles show: vectorized_elementwise_kernel); a row broadcast over real rows
    takes the generic one."""
    pytest.importorskip("torch")
    from memmodel import trace

    def ops(x, w, h):
        return x * w, h.transpose(1, 2) + h.transpose(1, 2).contiguous()

    t = trace(ops, {"x": (1, 1, 4096), "w": (4096,), "h": (1, 1, 32, 128)}, dtype="bf16", profile="h200")
    ops_by = {k.name: k.op for k in t.traffic.kernels}
    assert ops_by["mul"] == "scale" and ops_by["add"] == "scale"
    t = trace(lambda x, w: x * w, {"x": (2, 8, 4096), "w": (8, 1)}, dtype="bf16", profile="h200")
    assert [k.op for k in t.traffic.kernels] == ["gather"]
