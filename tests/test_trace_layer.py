"""``memmodel trace`` of a whole decoder layer: an ``nn.Module`` built on the meta device, its
parameters fake, its kernels (the Llama example's GEMMs, weight reads, K/V cache reads) pinned,
the attention's share, the CLI and the bad inputs of a module target."""

from __future__ import annotations

import json
import re
import textwrap

import pytest

from .conftest import REPO

LAYER = REPO / "examples" / "layers" / "llama_decoder.py"


def _trace(name, shapes, **kw):
    pytest.importorskip("torch")
    from memmodel import trace
    from memmodel.tracing import load_function

    fn, label = load_function(f"{LAYER}:{name}")
    return trace(fn, shapes, dtype="bf16", profile="h200", name=label, **kw)


def _dims(text):
    return tuple(int(n) for n in re.match(r"\[([^\]]*)\]", text).group(1).split(","))


def _gemms(t):
    """(M, N, K) of each GEMM the trace recorded, in launch order (A [M, K] times B [K, N]; addmm: bias first)."""
    out = []
    for op in t.ops:
        if op.op.startswith(("aten.mm.", "aten.addmm.")):
            a, b = op.shapes[-3], op.shapes[-2]
            (m, k), (_, n) = _dims(a), _dims(b)
            out.append((m, n, k))
    return out


@pytest.fixture(scope="module")
def prefill():
    return _trace("llama3_8b", {"hidden_states": (1, 4096, 4096)})


def test_the_llama_layer_at_prefill_runs_seven_gemms_of_the_configs_shapes(prefill):
    # M = batch·tokens = 1·4096; q: N = 32 heads·128 = 4096; k, v: N = 8·128 = 1024; o: K = 4096;
    # gate, up: N = 14336 (the MLP), K = 4096 (hidden); down: N = 4096, K = 14336
    assert _gemms(prefill) == [
        (4096, 4096, 4096),
        (4096, 1024, 4096),
        (4096, 1024, 4096),
        (4096, 4096, 4096),
        (4096, 14336, 4096),
        (4096, 14336, 4096),
        (4096, 4096, 14336),
    ]
    gemms = [k for k in prefill.traffic.kernels if k.op == "gemm"]
    assert len(gemms) == 7
    assert gemms[0].matmul_flops == 2 * 4096 * 4096 * 4096 == 137438953472
    # down: 2·4096·4096·14336 = 481036337152
    assert gemms[-1].matmul_flops == 481036337152
    assert prefill.unmodelled == ()
    # two norms, rotary on q and k, the attention, the MLP's SiLU and product, two residual adds
    ops = [op.op for op in prefill.ops if op.status != "free"]
    assert ops.count("aten.rsqrt.default") == 2 and ops.count("aten.silu.default") == 1
    assert ops.count("aten.cat.default") == 2 and ops.count("sdpa") == 1


def _read(t, tensor, level="hbm"):
    return sum(
        tr.bytes
        for k in t.traffic.kernels
        for tr in k.transfers
        if tr.tensor == tensor and tr.level == level and tr.direction == "read"
    )


def test_a_projections_weight_is_read_from_hbm_once(prefill):
    # q_proj.weight: 4096·4096 bf16 = 4096·4096·2 = 33554432 bytes; k_proj: 1024·4096·2 = 8388608
    assert _read(prefill, "q_proj.weight") == 33554432
    assert _read(prefill, "k_proj.weight") == 8388608
    # gate: 14336·4096·2 = 117440512; the parameters are the trace's named inputs
    assert _read(prefill, "gate_proj.weight") == 117440512
    assert {"q_proj.weight", "input_norm.weight", "rotary.cos"} <= {
        tr.tensor for k in prefill.traffic.kernels for tr in k.transfers if tr.role == "input"
    }


def test_the_attention_share_is_a_part_and_its_kernel_is_the_one_compare_picks(prefill):
    from memmodel import Workload, compare, load_profile

    shares = {s.group: s for s in prefill.shares}
    assert list(shares) == ["attention", "gemm", "other"]
    assert 0 < shares["attention"].time_share < 1 and 0 < shares["attention"].hbm_share < 1
    assert sum(s.time_share for s in shares.values()) == pytest.approx(1)
    assert sum(s.hbm_share for s in shares.values()) == pytest.approx(1)
    assert sum(s.hbm_bytes for s in shares.values()) == prefill.traffic.hbm_bytes
    assert sum(s.time_s for s in shares.values()) == pytest.approx(prefill.timing.time_s)
    assert shares["gemm"].kernels == 7 and shares["attention"].kernels >= 1
    (call,) = prefill.sdpa
    w = Workload(n=4096, d=128, batch=1, heads=32, kv_heads=8, dtype="bf16", causal=True)
    assert call.workload == w
    assert call.implementation in ("sdpa-cudnn", "sdpa-flash")
    assert call.implementation == compare(w, load_profile("h200"), impl="auto").options.implementation


@pytest.mark.parametrize("batch", [1, 16])
def test_decode_reads_the_kv_cache_once_and_writes_the_new_tokens_slot(batch):
    cache = (batch, 8, 32768, 128)
    t = _trace("llama3_8b", {"hidden_states": (batch, 1, 4096), "k_cache": cache, "v_cache": cache})
    # K and V each: B·H_kv·N_kv·d·2 = B·8·32768·128·2 = B·67108864 bytes
    assert _read(t, "K") == _read(t, "V") == batch * 8 * 32768 * 128 * 2 == batch * 67108864
    (call,) = t.sdpa
    assert (call.workload.n, call.workload.n_kv, call.workload.causal) == (1, 32768, False)
    # the new key and value written into their slots: B·8·1·128·2 = B·2048 bytes each, in place
    copies = [op for op in t.ops if op.op == "aten.copy_.default"]
    assert len(copies) == 2
    written = [
        tr.bytes
        for k in t.traffic.kernels
        if k.name in {n for op in copies for n in op.kernels}
        for tr in k.transfers
        if tr.level == "hbm" and tr.direction == "write"
    ]
    assert written == [batch * 2048, batch * 2048]
    # M = the batch's tokens: each GEMM reads its whole weight for them
    assert _gemms(t)[0] == (batch, 4096, 4096) and _read(t, "q_proj.weight") == 33554432
    shares = {s.group: s for s in t.shares}
    assert 0 < shares["attention"].hbm_share < 1


def test_qwen_has_qkv_biases_and_its_own_shapes():
    t = _trace("qwen2_5_7b", {"hidden_states": (1, 4096, 3584)})
    # q: N = 28·128 = 3584; k, v: N = 4·128 = 512; MLP 18944; q/k/v with a bias: addmm
    assert _gemms(t) == [
        (4096, 3584, 3584),
        (4096, 512, 3584),
        (4096, 512, 3584),
        (4096, 3584, 3584),
        (4096, 18944, 3584),
        (4096, 18944, 3584),
        (4096, 3584, 18944),
    ]
    assert [op.op for op in t.ops if op.op.startswith("aten.addmm")] == ["aten.addmm.default"] * 3
    # the bias of k: 512·2 = 1024 bytes read
    assert _read(t, "k_proj.bias") == 1024


def test_parameters_are_fake_no_weights_are_allocated():
    # rotary tables of 2^40 positions: 2^40·128·2 bytes = 256 TiB each, were they real
    t = _trace("llama3_8b", {"hidden_states": (1, 16, 4096)}, config={"max_positions": 2**40})
    assert len(_gemms(t)) == 7


def _user(tmp_path, body):
    src = tmp_path / "user.py"
    src.write_text(textwrap.dedent(body))
    return str(src)


MODULES = """
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, width=64, p=0.1):
        super().__init__()
        self.proj = nn.Linear(width, width, bias=False)
        self.drop = nn.Dropout(p)

    def forward(self, x):
        return self.drop(self.proj(x))


class NotAModule:
    pass


def broken():
    raise ValueError("no config\\nsecond line")


def not_a_module():
    return 3


def factory(width=32):
    return Block(width)


CONSTANT = 3
built = Block(16)
"""


def test_a_module_class_runs_in_eval_mode_and_in_training_with_backward(run, tmp_path):
    pytest.importorskip("torch")
    src = _user(tmp_path, MODULES)
    r = run("trace", f"{src}:Block", "--shape", "x=8,64", "--format", "json")
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    ops = [o["op"] for o in data["ops"] if o["status"] != "free"]
    assert ops == ["aten.mm.default"]  # eval: dropout is the identity
    r = run("trace", f"{src}:Block", "--shape", "x=8,128", "--config", "width=128", "--backward", "--format", "json")
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    ops = [o["op"] for o in data["ops"] if o["status"] != "free"]
    assert "aten.native_dropout.default" in ops
    # forward, then dx and dW: three products of 8 × 128 by 128 × 128
    assert ops.count("aten.mm.default") == 3
    tensors = {t["tensor"] for t in data["algorithms"][0]["transfers"]}
    assert {"proj.weight", "dproj.weight", "dx"} <= tensors


def test_a_factory_with_config(run, tmp_path):
    pytest.importorskip("torch")
    src = _user(tmp_path, MODULES)
    r = run("trace", f"{src}:factory", "--shape", "x=8,48", "--config", "width=48", "--format", "json")
    assert r.exit_code == 0, r.stderr
    (mm,) = [o for o in json.loads(r.stdout)["ops"] if o["op"] == "aten.mm.default"]
    assert mm["shapes"] == ["[8, 48] float32", "[48, 48] float32", "-> [8, 48] float32"]


def test_a_module_built_already_has_its_weights_replaced_by_fake_ones(run, tmp_path):
    pytest.importorskip("torch")
    src = _user(tmp_path, MODULES)
    r = run("trace", f"{src}:built", "--shape", "x=4,16", "--format", "json")
    assert r.exit_code == 0, r.stderr
    reads = {t["tensor"]: t["bytes"] for t in json.loads(r.stdout)["algorithms"][0]["transfers"] if t["level"] == "hbm"}
    assert reads["proj.weight"] == 16 * 16 * 4  # fp32: 16·16·4 = 1024 bytes
    r = run("trace", f"{src}:built", "--shape", "x=4,16", "--config", "width=8")
    assert r.exit_code == 2 and "is a module built already" in r.stderr


def test_the_cli_prints_the_ledger_and_the_shares(run):
    pytest.importorskip("torch")
    args = ("trace", f"{LAYER}:llama3_8b", "--gpu", "h200", "--dtype", "bf16", "--shape", "hidden_states=1,512,4096")
    r = run(*args)
    assert r.exit_code == 0, r.stderr
    assert "Traced kernels" in r.stdout and "q_proj.weight" not in r.stderr
    assert "Shares" in r.stdout and "attention (fused sdpa)" in r.stdout and "GEMMs" in r.stdout
    assert "unmodelled: none" in r.stdout
    data = json.loads(run(*args, "--format", "json").stdout)
    shares = {s["group"]: s for s in data["shares"]}
    assert sum(s["hbm_bytes"] for s in shares.values()) == data["hbm_bytes"]
    assert 0 < shares["attention"]["time_share"] < 1
    csv = run(*args, "--format", "csv").stdout.splitlines()
    assert ",total," in csv[-1]


X = ("--shape", "x=4,64")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("{src}:CONSTANT", *X), "user.py:CONSTANT is neither a function nor an nn.Module class (its type: int)"),
        (("{src}:NotAModule", *X), "is neither a function nor an nn.Module class (a class, not an nn.Module subclass)"),
        (("{src}:broken", *X), "user.py:broken raised ValueError building the module: no config"),
        (("{src}:not_a_module", *X), "user.py:not_a_module returned int, not an nn.Module"),
        (
            ("{src}:factory", "--config", "depth=2", *X),
            "user.py:factory has no argument 'depth' (its arguments: width)",
        ),
        (("{src}:factory", "--config", "width", *X), "--config 'width': expected KEY=VALUE"),
        (("{src}:factory", "--config", "width=1", "--config", "width=2", *X), "--config width=... given twice"),
        (("{src}:Block",), "user.py:Block's forward needs its argument 'x': give --shape x=DIMS"),
        (("{src}:Block", "--shape", "y=4,64"), "user.py:Block's forward has no argument 'y'"),
        (
            ("{src}:Block", "--shape", "x=4,63"),
            "user.py:Block raised RuntimeError under fake tensors: a and b must have same reduction dim",
        ),
    ],
)
def test_bad_module_targets_are_one_line_and_exit_2(run, tmp_path, args, message):
    pytest.importorskip("torch")
    src = _user(tmp_path, MODULES)
    r = run("trace", *(a.replace("{src}", src) for a in args))
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("memmodel: error: ") and message in r.stderr, r.stderr
