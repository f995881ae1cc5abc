"""Context parallelism: the byte arithmetic of ring and Ulysses, the overlap rule, the CLI's
refusals, and the distributed code itself on the CPU (gloo, two processes, math attention)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from memmodel.hardware import Interconnect, load_profile
from memmodel.parallel import (
    CPCase,
    context_parallel,
    merge_bytes,
    parse_cp_case,
    step_kind,
    step_shape,
    to_dict,
)
from memmodel.workload import Workload

H200 = load_profile("h200")


def _w(**kw):
    base = {"n": 16384, "d": 128, "heads": 8, "kv_heads": 2, "dtype": "bf16"}
    return Workload(**{**base, **kw})


def test_ring_link_bytes_forward_and_backward():
    # one K/V block: 2 (K and V) · B 1 · H_kv 2 · N/P 8192 · d 128 · 2 B = 8,388,608
    fwd = context_parallel(_w(), H200, 2, "ring", impl="sdpa-flash")
    assert fwd.tiled.link_bytes == 8_388_608  # P − 1 = 1 block sent
    # backward: K/V once more (P − 1) and the running dK, dV after each of the P steps: 1 + 2
    both = context_parallel(_w(), H200, 2, "ring", impl="sdpa-flash", backward=True)
    assert both.tiled.link_bytes == 4 * 8_388_608
    # P = 4, causal (zigzag): N/P 4096 tokens, block 2 · 2 · 4096 · 128 · 2 = 4,194,304, sent 3 times
    four = context_parallel(_w(causal=True), H200, 4, "ring", impl="sdpa-flash")
    assert four.tiled.link_bytes == 3 * 4_194_304
    assert four.tiled.steps[0].kind == "diagonal"
    assert {s.kind for s in four.tiled.steps[1:]} <= {"kv_half", "q_half"}


def test_ulysses_link_bytes():
    # Q, K, V all-to-all: B·N/P·(H + 2 H_kv)·d·e = 8192 · 12 · 128 · 2 = 25,165,824, half of it leaves
    # O back: 8192 · 8 · 128 · 2 = 16,777,216, half leaves: 12,582,912 + 8,388,608 = 20,971,520
    r = context_parallel(_w(), H200, 2, "ulysses", impl="sdpa-flash")
    assert r.tiled.link_bytes == 20_971_520
    # backward adds dO (as O) and dQ, dK, dV (as Q, K, V): twice the forward
    rb = context_parallel(_w(), H200, 2, "ulysses", impl="sdpa-flash", backward=True)
    assert rb.tiled.link_bytes == 2 * 20_971_520


def test_merge_bytes():
    # m = 1000 rows, d = 64, e = 2 (bf16), statistics fp32:
    # reads  logaddexp 8m + sub 8m + exp 4m + cast 4m + lerp (2·e·m·d + e·m) + copy 4m = 286,000
    # writes logaddexp 4m + sub 4m + exp 4m + cast e·m + lerp e·m·d + copy 4m = 146,000
    assert merge_bytes(1000, 64, 2) == (286_000, 146_000)


def test_zigzag_steps_are_balanced():
    # P = 2: rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2 of 4
    assert [step_kind(r, 1, 2, True) for r in (0, 1)] == ["q_half", "kv_half"]
    assert step_kind(0, 0, 2, True) == "diagonal" and step_kind(1, 1, 2, False) == "full"
    assert step_shape("kv_half", 8192) == (8192, 4096, False)
    assert step_shape("q_half", 8192) == (4096, 8192, False)
    # each later step computes half a block: the same FLOPs on every rank
    r = context_parallel(_w(causal=True), H200, 2, "ring", impl="sdpa-flash")
    flops = {k.name: k.matmul_flops for k in r.tiled.traffic.kernels if k.name.endswith("fa2_fwd")}
    # diagonal: half of 4·8192²·128·8 = 274,877,906,944 (causal) plus the diagonal blocks' masked work;
    # q_half: 4·4096·8192·128·8 = 137,438,953,472 · 2 = 274,877,906,944
    assert flops["f1.fa2_fwd"] == 4 * 4096 * 8192 * 128 * 8


def test_overlap_rule_is_max_of_compute_and_link():
    slow = dataclasses.replace(H200, interconnect=Interconnect(bandwidth_bytes_per_s=1e9, latency_s=0.0))
    fast = dataclasses.replace(H200, interconnect=Interconnect(bandwidth_bytes_per_s=1e15, latency_s=0.0))
    # with p2p_idle_sms 1 the transfer starts once one SM is idle: at once for a grid of fewer
    # CTAs than SMs; without it (not measured) it waits for the kernel's end
    eager = dataclasses.replace(
        H200, interconnect=Interconnect(bandwidth_bytes_per_s=1e9, latency_s=0.0, p2p_idle_sms=1)
    )
    small = Workload(n=8192, d=128, heads=1, dtype="fp16")  # 4096 a GPU: 32 CTAs on 132 SMs
    for profile, w, link_bound, at_once in (
        (slow, _w(), True, False),
        (fast, _w(), False, False),
        (eager, small, True, True),
    ):
        r = context_parallel(w, profile, 2, "ring", impl="sdpa-flash")
        s0, s1 = r.tiled.steps
        # step 0 sends the block (8,388,608 B at 1 GB/s = 8.39 ms), step 1 sends nothing
        kv_block = 2 * w.kv_heads_ * (w.n // 2) * w.d * w.element_bytes  # K and V of one GPU's half
        assert s0.link_s == pytest.approx(kv_block / profile.interconnect.bandwidth_bytes_per_s)
        assert s0.link_start_s == (0.0 if at_once else s0.compute_s)
        assert s0.time_s == max(s0.compute_s + s0.merge_s, s0.link_start_s + s0.link_s)
        if link_bound:  # the transfer decides the step
            assert s0.time_s == s0.link_start_s + s0.link_s
        else:  # 8.4 MB at 1 PB/s: 8 ns after the kernel
            assert s0.time_s == pytest.approx(s0.compute_s + s0.merge_s, rel=1e-4)
        assert s1.link_s == 0 and s1.time_s == s1.compute_s + s1.merge_s
        assert r.tiled.wall_time_s == pytest.approx(s0.time_s + s1.time_s)
    # Ulysses adds: each phase's copies and link time, the attention alone
    u = context_parallel(_w(), slow, 2, "ulysses", impl="sdpa-flash")
    assert all(s.time_s == pytest.approx(s.compute_s + s.merge_s + s.link_s) for s in u.tiled.steps)


def test_measured_curve_sets_the_link_time():
    # a curve measured at 8 MiB: 40 % of 450 GB/s → 8,388,608 B take 8,388,608 / 180e9 s
    ic = Interconnect(bandwidth_bytes_per_s=450e9, latency_s=1e-5, send_recv_efficiency=((8_388_608, 0.4),))
    assert ic.message_time("send_recv", 8_388_608) == pytest.approx(8_388_608 / 180e9)
    # no curve: latency + bytes / bandwidth
    assert ic.message_time("all_to_all", 450_000) == pytest.approx(1e-5 + 1e-6)
    # a mesh splits its bandwidth over its peers
    mesh = Interconnect(bandwidth_bytes_per_s=448e9, topology="mesh", peers=7)
    assert mesh.peer_bandwidth_bytes_per_s() == 64e9


def test_one_gpu_is_the_single_gpu_time():
    r = context_parallel(_w(causal=True), H200, 1, "ring", impl="sdpa-flash", backward=True)
    assert r.tiled.wall_time_s == pytest.approx(r.tiled.single_gpu_time_s) and r.tiled.link_bytes == 0


def test_past_a_node_the_network_paces_the_ring():
    r8 = context_parallel(_w(n=65536), H200, 8, "ring", impl="sdpa-flash")
    r16 = context_parallel(_w(n=65536), H200, 16, "ring", impl="sdpa-flash")
    assert r8.tiled.steps[0].link_s < r16.tiled.steps[0].link_s * 4  # 450 GB/s vs 50 GB/s, blocks half as big
    assert any("spans nodes" in n for n in r16.notes)


def test_bundled_interconnects_cite_their_sources():
    for name, bw in (("a100", 300e9), ("h100-sxm", 450e9), ("h200", 450e9), ("b200", 900e9), ("mi300x", 448e9)):
        p = load_profile(name)
        assert p.interconnect is not None and p.interconnect.bandwidth_bytes_per_s == bw
        for key, prov in p.provenance.items():
            if key.startswith("interconnect."):
                assert prov.source and p.sources[prov.source].kind, (name, key)
    assert load_profile("mi300x").interconnect.topology == "mesh"


def test_profile_refuses_a_bad_interconnect(tmp_path):
    text = (load_profile("a100").path).read_text()
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("  topology: switch", "  topology: torus"))
    from memmodel.errors import ProfileError
    from memmodel.hardware import load_file

    with pytest.raises(ProfileError, match="interconnect.topology: 'torus' is not one of switch, mesh"):
        load_file(bad)


def test_compare_json_contract(run):
    r = run(
        "compare", "--n", "16384", "--d", "128", "--heads", "8", "--kv-heads", "2", "--dtype", "bf16", "--causal",
        "--gpu", "h200", "--impl", "sdpa-flash", "--context-parallel", "2", "--backward", "--format", "json",
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    tiled = data["algorithms"][1]
    steps = tiled["steps"]
    assert tiled["predicted_time_s"] == pytest.approx(sum(s["time_s"] for s in steps))
    assert tiled["link_bytes"] == sum(s["link_bytes"] for s in steps) == 4 * 8_388_608
    assert data["context_parallel"]["gpus"] == 2 and data["context_parallel"]["zigzag"]
    assert tiled["hbm_bytes"] == sum(k["hbm_bytes"] for k in tiled["kernels"])  # GPU 0's, per GPU
    r = run(
        "compare", "--n", "16384", "--d", "128", "--heads", "8", "--gpu", "h200", "--context-parallel", "2",
        "--cp-scheme", "ulysses",
    )  # fmt: skip
    assert r.exit_code == 0 and "all_to_all_in" in r.stdout and "wall time" in r.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--context-parallel", "0"), "--context-parallel must be 1 to 1024 GPUs (got 0)"),
        (("--cp-scheme", "ring"), "--cp-scheme needs --context-parallel P"),
        (("--context-parallel", "3", "--cp-scheme", "ulysses"), "--heads (8) must be a multiple of 3"),
        (("--context-parallel", "3", "--causal"), "--n (16384) must be a multiple of 6"),
    ],
)
def test_bad_context_parallel_input_is_one_line(run, args, message):
    r = run("compare", "--n", "16384", "--d", "128", "--heads", "8", "--gpu", "h200", *args)
    assert r.exit_code == 2 and message in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert "Traceback" not in r.stderr


def test_sweep_takes_context_parallel(run):
    r = run(
        "sweep", "--n", "16384,32768", "--d", "128", "--heads", "8", "--dtype", "bf16", "--gpu", "h200",
        "--context-parallel", "2,4", "--format", "json",
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)
    assert len(rows) == 2 * 2 * 2 and {row["p"] for row in rows} == {2, 4}


def test_validate_with_too_few_gpus_is_one_line(run):
    pytest.importorskip("torch")
    import torch

    if torch.cuda.device_count() >= 2:
        pytest.skip("this machine has two GPUs")
    r = run("validate", "--gpus", "2", "--case", "scheme=ring,n=16384,d=128")
    assert r.exit_code == 1 and r.stderr.startswith("memmodel: error: --gpus 2 needs 2 CUDA GPUs")
    assert r.stderr.count("\n") == 1


def test_cp_cases_and_predictions_file():
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    text = (root / "validation" / "cases" / "h200x2-cp.txt").read_text()
    cases = [parse_cp_case(s) for line in text.splitlines() for s in line.split("#", 1)[0].split()]
    assert len(cases) >= 8 and {c.scheme for c in cases} == {"ring", "ulysses"}
    assert min(c.n for c in cases) == 16384 and max(c.n for c in cases) == 131072
    assert {c.d for c in cases} == {64, 128} and {c.causal for c in cases} == {True, False}
    assert {c.backward for c in cases} == {True, False} and any((c.kv_heads or c.heads) != c.heads for c in cases)
    predicted = (root / "validation" / "h200x2" / "cp-predictions.txt").read_text()
    assert all(c.id in predicted for c in cases)
    with pytest.raises(Exception, match="multiple of 4"):
        CPCase("ring", n=16386, d=64, causal=True)


def test_nccl_curves_become_profile_figures():
    from memmodel.calibration.interconnect import apply, efficiencies, latency

    # t = 8 us + bytes / 400 GB/s at 1, 2, 4, 8 MiB: the line's intercept is 8 us
    rows = [[s, 8e-6 + s / 400e9, s] for s in (2**20, 2**21, 2**22, 2**23)]
    result = {"curves": {"send_recv": rows}, "device": {"name": "GPU", "gpus": 2}, "date": "2026-11-30"}
    assert latency(result) == pytest.approx(8e-6)
    # 1 MiB: 1,048,576 B / (8 us + 2.62 us) = 98.7 GB/s, / 450 GB/s = 0.2194
    assert efficiencies(result, 450e9)["send_recv"][2**20] == pytest.approx(0.2194, abs=1e-4)
    data = {"interconnect": {"bandwidth": {"value": "450 GB/s"}}, "sources": {}}
    out = apply(data, result)
    assert out["interconnect"]["send_recv_efficiency"]["source"] == "measured-nccl"
    assert out["sources"]["measured-nccl"]["kind"] == "measured"


CPU_CASES = (
    "scheme=ring,n=64,d=16,heads=4,kv_heads=2,backward=1",
    "scheme=ring,n=64,d=16,heads=2,batch=2,causal=1,backward=1",
    "scheme=ulysses,n=64,d=16,heads=4,kv_heads=2,causal=1,backward=1",
    "scheme=ulysses,n=32,d=16,heads=2,batch=2,backward=1",
)


def test_ring_and_ulysses_match_one_gpu_on_the_cpu(run, tmp_path):
    """Two processes (gloo), math attention: output and gradients as single-process attention,
    and the bytes the code sends exactly the model's."""
    pytest.importorskip("torch")
    args = [a for c in CPU_CASES for a in ("--case", c)]
    out = tmp_path / "cp.json"
    r = run("validate", "--gpus", "2", "--device", "cpu", "--gpu", "h200", "--output", str(out), *args)
    assert r.exit_code == 0, r.stderr
    record = json.loads(out.read_text())
    assert len(record["cases"]) == len(CPU_CASES)
    for case in record["cases"]:
        assert "error" not in case, case
        assert case["check"]["ok"] and case["check"]["max_rel_error"] < 1e-2, case
        assert case["measured"]["link_bytes"] == case["predicted"]["link_bytes"], case["id"]
    assert record["summary"]["link_bytes_equal"] and record["summary"]["checks_ok"]
    r = run("validate", "--gpus", "2", "--rescore", str(out), "--gpu", "h200", "--format", "markdown")
    assert r.exit_code == 0 and "| wall time, memmodel |" in r.stdout


def test_calibrate_nccl_on_the_cpu(run, tmp_path, monkeypatch):
    pytest.importorskip("torch")
    from memmodel.gpu import cp_run

    monkeypatch.setattr(cp_run, "nccl_sizes", lambda quick=False: [2**20, 2**21])
    out = tmp_path / "links.yaml"
    r = run("calibrate", "--gpus", "2", "--device", "cpu", "--base", "h200", "--output", str(out))
    assert r.exit_code == 0, r.stderr
    p = load_profile(str(out))
    assert [x for x, _ in p.interconnect.send_recv_efficiency] == [2**20, 2**21]
    assert p.kind_of("interconnect.all_to_all_efficiency") == "measured"


def test_gpu_ring_on_two_gpus():
    torch = pytest.importorskip("torch")
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA GPUs")
    from memmodel.gpu.cp_run import launch

    rows = launch("validate_worker", 2, {"cases": ["scheme=ring,n=4096,d=64,heads=4,causal=1,backward=1"], "reps": 20})
    assert rows[0]["check"]["ok"]


def test_to_dict_keeps_the_compare_keys():
    data = to_dict(context_parallel(_w(), H200, 2, "ring", impl="sdpa-flash"))
    for key in ("schema", "hardware", "workload", "algorithms", "ratios"):
        assert key in data
    for alg in data["algorithms"]:
        for key in ("hbm_read_bytes", "hbm_write_bytes", "hbm_bytes", "flops", "predicted_time_s", "link_bytes"):
            assert key in alg


def test_roofline_shows_the_link_as_a_roof(run):
    r = run("roofline", "--gpu", "h200", "--n", "4096", "--d", "128", "--dtype", "bf16", "--link", "--format", "json")
    assert r.exit_code == 0, r.stderr
    roofs = {c["name"]: c for c in json.loads(r.stdout)["gpus"][0]["ceilings"]}
    # NVLink 4: 900 GB/s bidirectional = 450 GB/s per direction
    assert roofs["link"] == {"name": "link", "kind": "memory", "label": "link to a peer", "value": 450e9, "unit": "B/s"}
    r = run("roofline", "--gpu", "h200", "--n", "4096", "--d", "128", "--format", "json")
    assert "link" not in {c["name"] for c in json.loads(r.stdout)["gpus"][0]["ceilings"]}
