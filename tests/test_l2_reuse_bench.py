"""The L2 reuse microbenchmark: its plan (pure) and its kernel, run on the CPU through Triton's
interpreter with tiny sizes (see test_triton_fa.py for why TRITON_INTERPRET is set here)."""

from __future__ import annotations

import os
import sys
import types
from dataclasses import replace
from pathlib import Path

import pytest

from memmodel.calibration import l2_reuse as lr
from memmodel.calibration.plan import DeviceInfo, make_plan
from memmodel.gpu.ncu import MeasuredKernel, command

MiB = 2**20
L2 = 60 * MiB


def test_the_plan_spans_the_families_and_footprints_the_issue_asks_for():
    patterns = lr.make_patterns(L2)
    assert len({p.key for p in patterns}) == len(patterns)
    families = {p.family for p in patterns}
    for family in ("waves-1", "waves-2", "waves-4", "heads-4", "half", "parity", "causal-down", "causal-up"):
        assert family in families
    assert {"gqa-4-causal", "gqa-8-causal", "stream", "dq-atomic"} <= families
    assert {p.d for p in patterns} == {64, 128, 256} and {p.bm for p in patterns} == {64, 128}
    factors = sorted({p.footprint_factor for p in patterns})
    assert factors[0] == 1 / 8 and factors[-1] == 4
    for p in patterns:  # the live footprint is the factor of L2, to a tile per live head
        assert abs(lr.live_bytes(p) - p.footprint_factor * L2) <= max(1, p.heads_per_wave) * lr.tile_step_bytes(p)
        assert p.tiles >= 1 and p.kv_bytes == 2 * p.tiles * p.bn * p.d * 2
    assert len(lr.make_patterns(L2, quick=True)) < len(patterns) <= 130  # 121: with dq-store and dq-chain
    # the biggest buffer: 16 heads of 1/2 of 4 x L2 each (heads-2)
    assert lr.buffer_bytes(patterns) == pytest.approx(32 * L2, rel=0.01)


def test_requested_and_unique_bytes_are_counted_exactly():
    p = lr.Pattern("x", "x", 1.0, kv_bytes=2 * 10 * 64 * 128 * 2, kv_heads=1, q_per_kv=1, order="full", sms="all",
                   bm=128, bn=64, d=128, waves=2.0)  # fmt: skip
    assert p.tiles == 10
    step = 2 * 64 * 128 * 2  # K and V tile
    # 2 waves of 264 slots = 528 Q blocks, 10 tiles each
    assert lr.requested_bytes(p, 264) == 528 * 10 * step
    assert lr.unique_bytes(p, 264) == 10 * step
    causal = replace(p, order="causal-down")  # 10 tiles of 64 rows = 640 rows = 5 Q blocks of 128
    assert lr.ctas_per_q_head(causal, 264) == 5
    assert [lr.tiles_of_cta(causal, m) for m in range(5)] == [2, 4, 6, 8, 10]
    assert lr.requested_bytes(causal, 264) == 30 * step
    gqa = replace(causal, kv_heads=2, q_per_kv=4)
    assert lr.requested_bytes(gqa, 264) == 8 * 30 * step and lr.unique_bytes(gqa, 264) == 2 * 10 * step


def test_a_point_reads_the_reread_miss_share():
    p = lr.Pattern("x", "fam", 1.0, kv_bytes=2 * 10 * 64 * 128 * 2, kv_heads=1, q_per_kv=1, order="full", sms="all",
                   bm=128, bn=64, d=128, waves=1.0)  # fmt: skip
    step = 2 * 64 * 128 * 2
    req, uniq = 4 * 10 * step, 10 * step  # 4 slots, one wave
    pt = lr.point(p, {"slots": 4, "ctas": 4}, dram_read=uniq + 0.25 * (req - uniq), l2_bytes=req, time_s=1e-3)
    assert pt["reread_miss"] == pytest.approx(0.25)
    assert pt["hbm_over_unique"] == pytest.approx(1 + 0.25 * 3)
    assert lr.curves([pt])["fam"][0]["reread_miss"] == pytest.approx(0.25)
    assert "| fam | 1 |" in lr.summary_markdown({"points": [pt], "device": {"l2_bytes": L2}})


def test_the_ncu_command_can_profile_one_kernel_alone():
    args = command(["python", "x.py"], kernel_regex="l2_reuse_kernel")
    assert args[:3] == ["ncu", "--kernel-name", "regex:l2_reuse_kernel"]
    assert args[-2:] == ["python", "x.py"]
    assert "--kernel-name" not in command(["python"])


def test_join_matches_launches_with_profiled_kernels_in_order():
    from memmodel.errors import RuntimeFailure
    from memmodel.gpu import l2_reuse as gl

    patterns = lr.make_patterns(L2, quick=True)[:2]
    log = [
        {"kind": "probe"},
        {"kind": "measure", "key": patterns[0].key, "slots": 264, "ctas": 528},
        {"kind": "measure", "key": patterns[1].key, "slots": 264, "ctas": 528},
    ]
    kernels = [MeasuredKernel(i, f"{gl.KERNEL}_0d1d", {"dram__bytes_read.sum": 1e6 * (i + 1)}) for i in range(3)]
    kernels.insert(1, MeasuredKernel(9, "other", {}))
    points = gl.join(patterns, log, kernels)
    assert [pt["key"] for pt in points] == [p.key for p in patterns]
    assert [pt["dram_read_bytes"] for pt in points] == [2e6, 3e6]
    with pytest.raises(RuntimeFailure, match="profiled 2"):
        gl.join(patterns, log, kernels[:3])
    assert len(gl.join(patterns, log, kernels[:3], partial=True)) == 1


# ---------------------------------------------------------------------------------------
# The kernel, on the CPU

_TRITON_PRELOADED = "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1"

if _TRITON_PRELOADED:  # pragma: no cover - depends on the other test modules

    def test_kernel_tests_in_a_fresh_interpreter_process():
        """The kernel tests below skip in a process where triton came in without the
        interpreter; here they run in one where it did not."""
        import subprocess

        env = {**os.environ, "TRITON_INTERPRET": "1"}
        cmd = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-rs", "-p", "no:cacheprovider", str(Path(__file__))]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
        assert "imported without the interpreter" not in proc.stdout, proc.stdout[-4000:]


@pytest.mark.skipif(_TRITON_PRELOADED, reason="triton imported without the interpreter: run in a fresh process")
def test_the_kernel_reads_exactly_the_planned_tiles_on_the_cpu(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    from memmodel.gpu import l2_reuse as gl
    from memmodel.gpu.measure import Context

    info = DeviceInfo("cpu", 2, 1 * MiB, 2**30, None, (9, 0))
    ctx = Context(torch, None, info, make_plan(info, quick=True), timer=None, device="cpu")  # type: ignore[arg-type]
    base = dict(kv_heads=1, q_per_kv=1, sms="all", bm=64, bn=16, d=64, compute=False, per_sm=1)
    tile = 2 * 16 * 64 * 2
    patterns = [
        lr.Pattern("full", "full", 1.0, kv_bytes=3 * tile, order="full", waves=1.0, **base),
        lr.Pattern("down", "down", 1.0, kv_bytes=8 * tile, order="causal-down", **base),
        lr.Pattern("gqa", "gqa", 1.0, kv_bytes=4 * tile, order="causal-up", **{**base, "kv_heads": 2, "q_per_kv": 2}),
        lr.Pattern("half", "half", 1.0, kv_bytes=2 * tile, order="full", waves=2.0, **{**base, "sms": "smid-half"}),
        lr.Pattern("dot", "dot", 1.0, kv_bytes=2 * tile, order="full", waves=1.0, **{**base, "compute": True}),
    ]
    log: list[dict] = []
    monkeypatch.setattr(ctx, "sync", lambda: None)
    gl.run_patterns(ctx, patterns, log)
    assert [e["kind"] for e in log].count("probe") == 5
    measured = {e["key"]: e for e in log if e["kind"] == "measure"}
    assert measured["full"]["slots"] == 2 and measured["full"]["ctas"] == 2
    assert measured["half"]["slots"] == 1 and measured["half"]["ctas"] == 2 and measured["half"]["working_sms"] == 1
    assert measured["down"]["ctas"] == 2  # 8 tiles of 16 rows = 128 rows = 2 Q blocks of 64
    assert measured["gqa"]["virtual_ctas"] == 4 * 1
    assert all(e["checksum_finite"] for e in measured.values())
    stopped: list[dict] = []
    gl.run_patterns(ctx, patterns, stopped, budget_s=-1.0)  # out of time before the first
    assert stopped == [{"kind": "stopped", "after_s": -1.0, "left_out": [p.key for p in patterns]}]


def test_the_kernel_checksum_is_the_sum_of_the_tiles_read(monkeypatch):
    """With the plain sum (no matrix products) the checksum is Σ over the tiles each virtual CTA
    read: the access pattern itself, checked against a sum written in torch."""
    if _TRITON_PRELOADED:
        pytest.skip("triton imported without the interpreter")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    from memmodel.gpu import l2_reuse_kernels as lk

    bn, d, tiles = 16, 64, 5
    for order, code in (("full", 0), ("causal-up", 1), ("causal-down", 2)):
        kv_heads, q_per_kv, ctas, bm = 2, 2, 3, 32
        buf = torch.randn(kv_heads * 2 * tiles * bn * d).to(torch.float16)
        out = torch.zeros(4)
        sms = torch.zeros(4, dtype=torch.int32)
        counter = torch.zeros(1, dtype=torch.int32)
        group = torch.zeros(1024, dtype=torch.int32)
        n_virtual = ctas * kv_heads * q_per_kv
        dq = torch.zeros(kv_heads * tiles * bn * d)
        lk.l2_reuse_kernel[(4,)](buf, out, sms, counter, group, dq, n_virtual, ctas, q_per_kv, tiles,
                                 BM=bm, BN=bn, D=d, ORDER=code, SELECT=False, COMPUTE=False, ATOMIC=True,
                                 FAKE=True, num_warps=4)  # fmt: skip
        heads = buf.float().view(kv_heads, 2, tiles, bn * d).sum(-1)  # per head, K/V, tile
        want = want_dq = 0.0
        for v in range(n_virtual):
            qh, m = divmod(v, ctas)
            p = lr.Pattern("x", "x", 1, kv_bytes=2 * tiles * bn * d * 2, kv_heads=kv_heads, q_per_kv=q_per_kv,
                           order=order, sms="all", bm=bm, bn=bn, d=d)  # fmt: skip
            n = lr.tiles_of_cta(p, m)
            want += float(heads[qh // q_per_kv, :, :n].sum())
            want_dq += float(heads[qh // q_per_kv, 0, :n].sum())  # each K tile read added once
        assert float(out.sum()) == pytest.approx(want, rel=1e-3, abs=1e-2), order
        assert float(dq.sum()) == pytest.approx(want_dq, rel=1e-3, abs=1e-2), order
        assert int(counter) == n_virtual + 4  # every program's last take is past the end


def _one_program_storing(monkeypatch, *, order: int, ctas: int, bn: int, d: int, tiles: int):
    """One program of the ``STORE`` kernel over ``ctas`` virtual CTAs of one K/V head, through
    Triton's interpreter (skips without it): (K/V buffer, accumulator, checksums)."""
    if _TRITON_PRELOADED:
        pytest.skip("triton imported without the interpreter")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    from memmodel.gpu import l2_reuse_kernels as lk

    buf = torch.randn(2 * tiles * bn * d).to(torch.float16)
    dq = torch.zeros(tiles * bn * d)
    out, sms = torch.zeros(1), torch.zeros(1, dtype=torch.int32)
    counter, group = torch.zeros(1, dtype=torch.int32), torch.zeros(1024, dtype=torch.int32)
    lk.l2_reuse_kernel[(1,)](buf, out, sms, counter, group, dq, ctas, ctas, 1, tiles,
                             BM=32, BN=bn, D=d, ORDER=order, SELECT=False, COMPUTE=False, ATOMIC=False,
                             FAKE=True, STORE=True, num_warps=4)  # fmt: skip
    return buf, dq, out


def torch_allclose(a, b) -> bool:
    import torch

    return bool(torch.allclose(a, b, rtol=1e-3, atol=1e-2))


def test_the_store_variant_loads_adds_and_stores_the_accumulator(monkeypatch):
    """``STORE``: the accumulator tile loaded, added to and stored per step (dirty lines, as the
    memory-efficient backward's dQ workspace). One program, so no race: the accumulator ends as the
    sum of the K tiles each virtual CTA read, as the atomic variant's does."""
    bn, d, tiles, ctas = 16, 64, 5, 3
    buf, dq, _ = _one_program_storing(monkeypatch, order=0, ctas=ctas, bn=bn, d=d, tiles=tiles)
    k_tiles = buf.float().view(2, tiles, bn * d)[0]
    assert torch_allclose(dq.view(tiles, bn * d), ctas * k_tiles)


def test_the_chain_walks_every_tile_from_its_own_on(monkeypatch):
    """``ORDER`` 3 (``chain``, the memory-efficient backward's walk): virtual CTA m reads tiles m,
    m + 1, … wrapping; with ``STORE`` every CTA adds each K tile once into its accumulator tile, so
    the accumulator ends as (CTAs) × K, whatever the order; the checksum is every tile per CTA."""
    from memmodel.gpu import l2_reuse as gl

    assert gl.ORDER_CODE["chain"] == 3
    bn, d, tiles = 16, 64, 5
    buf, dq, out = _one_program_storing(monkeypatch, order=3, ctas=tiles, bn=bn, d=d, tiles=tiles)
    k_tiles = buf.float().view(2, tiles, bn * d)
    assert torch_allclose(dq.view(tiles, bn * d), tiles * k_tiles[0])
    # the checksum: every tile once per CTA, plus its own tile (K and V) each step, summed over its
    # BN rows and added to each of the BN rows of the sum: tiles · (1 + BN) · Σ
    assert float(out.sum()) == pytest.approx(tiles * (1 + bn) * float(k_tiles.sum()), rel=1e-3, abs=1e-1)
    # the plan: one CTA per tile, each reading all of them and its own again at each step
    p = next(p for p in lr.make_patterns(L2, only=("dq-chain",)) if p.footprint_factor == 0.5)
    assert p.order == "chain" and p.store and p.bn == 128 and lr.ctas_per_q_head(p, 132) == p.tiles
    assert lr.requested_bytes(p, 132) == p.tiles * p.tiles * 2 * lr.tile_step_bytes(p)


def test_a_store_point_gives_the_share_of_stores_written_back():
    # dq-store at 0.5 x L2: K/V and accumulator 30 MiB together; each step stores a BN x D fp32 tile
    p = next(p for p in lr.make_patterns(L2, only=("dq-store",)) if p.footprint_factor == 0.5)
    assert p.store and not p.atomic and lr.live_bytes(p) == pytest.approx(0.5 * L2, rel=0.01)
    launch = {"slots": 264, "ctas": 528}
    steps = lr.requested_bytes(p, 264) // lr.tile_step_bytes(p)  # 528 CTAs x every tile
    stored = steps * p.bn * p.d * 4
    unique = lr.unique_bytes(p, 264) + p.kv_heads * lr.dq_bytes(p)  # K, V and the accumulator, once
    pt = lr.point(p, launch, dram_read=2.0 * unique, l2_bytes=0.0, time_s=1e-3, dram_write=stored / 10)
    assert pt["stored_bytes"] == stored and pt["writeback_share"] == pytest.approx(0.1)
    assert pt["unique_bytes"] == unique
    chain = next(q for q in lr.make_patterns(L2, only=("dq-chain",)) if q.footprint_factor == 0.5)
    # a chain step reads two K/V tiles (the walk's and the CTA's own) and stores one fp32 tile
    one = lr.point(chain, {"slots": 132, "ctas": chain.tiles}, 1.0, 0.0, 1e-3, 0.0)
    assert one["stored_bytes"] == chain.tiles * chain.tiles * chain.bn * chain.d * 4
    plain = next(q for q in lr.make_patterns(L2, only=("waves-2",)) if q.footprint_factor == 0.5)
    assert "writeback_share" not in lr.point(plain, launch, 1.0, 0.0, 1e-3, 0.0)


def test_the_runner_writes_few_files_and_keeps_the_raw_output_when_parsing_fails(tmp_path, monkeypatch):
    """``python -m memmodel.gpu.l2_reuse_run --out DIR``: the record, the table and the raw data
    (at most 8 files); a measurement that fails is one line in the record, not a traceback."""
    import json
    import subprocess as sp

    from memmodel.gpu import l2_reuse as gl
    from memmodel.gpu import l2_reuse_run as run

    info = DeviceInfo("NVIDIA H200", 132, L2, 2**37, 228 * 1024, (9, 0))
    ctx = types.SimpleNamespace(info=info, plan=make_plan(info), free=lambda: None)
    monkeypatch.setattr(run, "make_context", lambda quick=False: ctx)
    monkeypatch.setattr(gl.shutil, "which", lambda name: "/usr/bin/ncu")
    patterns = lr.make_patterns(L2, only=("waves-1",))
    log = [{"kind": "probe"}] + [{"kind": "measure", "key": p.key, "slots": 264, "ctas": 264} for p in patterns]
    header = '"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"\n'
    rows = "".join(
        f'"{i}","l2_reuse_kernel","dram__bytes_read.sum","byte","{1e6 * (i + 1):.0f}"\n' for i in range(len(log))
    )

    def fake_run(args, **kw):
        assert args[0] == "ncu" and "regex:l2_reuse_kernel" in args and args[-4:-2] == ["--only", "waves-1"]
        Path(args[args.index("--child") + 1]).write_text(json.dumps(log))
        return sp.CompletedProcess(args, 0, stdout="==PROF== noise\n" + header + rows, stderr="")

    monkeypatch.setattr(gl.subprocess, "run", fake_run)
    assert run.main(["--out", str(tmp_path / "out"), "--only", "waves-1"]) == 0
    files = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert len(files) <= 8 and {"l2_reuse.json", "l2_reuse.md", "l2_reuse.ncu.csv"} <= set(files)
    record = json.loads((tmp_path / "out" / "l2_reuse.json").read_text())
    assert [pt["key"] for pt in record["points"]] == [p.key for p in patterns]
    assert record["points"][0]["dram_read_bytes"] == 2e6 and "ncu_csv" not in record
    assert record["device"]["l2_bytes"] == L2 and record["errors"] == {}

    # ncu's output that cannot be read: the raw output is kept, the error is one line
    monkeypatch.setattr(
        gl.subprocess, "run", lambda args, **kw: sp.CompletedProcess(args, 0, stdout="garbage", stderr="")
    )
    assert run.main(["--out", str(tmp_path / "bad"), "--only", "waves-1"]) == 1
    bad = json.loads((tmp_path / "bad" / "l2_reuse.json").read_text())
    assert "NcuParseError" in bad["errors"]["l2_reuse"]
    assert (tmp_path / "bad" / "l2_reuse.ncu.csv").read_text() == "garbage"


def test_an_unknown_family_is_refused():
    with pytest.raises(ValueError, match="no pattern family nope"):
        lr.make_patterns(L2, only=("nope",))


def test_factors_measure_every_family_at_the_footprints_given():
    # the knee run of 2026-12-01 (validation/h200/l2-reuse-knee): 9 simple families x 6 footprints
    families = ("waves-2", "waves-4", "half", "parity", "stream")
    knee = (0.4, 0.425, 0.45, 0.475, 0.55, 0.625)
    patterns = lr.make_patterns(L2, only=families, factors=knee)
    assert len(patterns) == 5 * 6 and {p.family for p in patterns} == set(families)
    assert sorted({p.footprint_factor for p in patterns}) == list(knee)
    # 0.55 x 60 MiB = 33 MiB of K/V head: 264 tiles of 64 rows x 128 x 2 bytes, K and V
    p = next(p for p in patterns if p.family == "waves-2" and p.footprint_factor == 0.55)
    assert p.kv_bytes == 33 * MiB and p.tiles == 33 * MiB // (2 * 64 * 128 * 2) == 1056
    # causal families stop at CAUSAL_MAX; GQA and d = 256 take the footprints given too
    causal = lr.make_patterns(L2, only=("causal-down", "gqa-4-causal"), factors=(0.5, 3.5))
    assert {(p.family, p.footprint_factor) for p in causal} == {
        ("causal-down", 0.5),
        ("gqa-4-causal", 0.5),
        ("gqa-4-causal", 3.5),
    }


@pytest.mark.parametrize("bad", [0.0, -1.0, 9.0, float("nan")])
def test_footprints_outside_the_range_are_refused(bad):
    with pytest.raises(ValueError, match=r"footprints must lie in \(0, 8\] x L2"):
        lr.make_patterns(L2, factors=(0.5, bad))


@pytest.mark.parametrize("arg", ["0,2", "abc", "0.5,,nan"])
def test_the_runner_refuses_bad_factors_before_any_gpu_work(arg, capsys, tmp_path):
    from memmodel.gpu import l2_reuse_run as run

    out = tmp_path / "never-created"  # a folder it could create: refused first, it is not
    with pytest.raises(SystemExit) as exc:
        run.main(["--out", str(out), "--factors", arg])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("python -m memmodel.gpu.l2_reuse_run: error: --factors")
    assert not out.exists()


_COMPILE = r"""
import os, re, subprocess, sys, tempfile
import triton, triton.compiler as tc
from triton.backends.compiler import GPUTarget
from memmodel.calibration import l2_reuse as lr
from memmodel.calibration.plan import resident_programs
from memmodel.gpu import l2_reuse_kernels as lk
from memmodel.gpu.l2_reuse import ORDER_CODE

tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
sig = {n: "*fp16" if n == "kv_ptr" else "*fp32" if n == "out_ptr" else "*i32" for n in
       ("kv_ptr", "out_ptr", "sm_ptr", "counter_ptr", "group_ptr", "dq_ptr")}
sig.update({n: "i32" for n in ("n_virtual", "ctas_per_q_head", "q_per_kv", "tiles")})
sig.update({n: "constexpr" for n in ("BM", "BN", "D", "ORDER", "SELECT", "COMPUTE", "ATOMIC", "FAKE", "STORE")})
families = sys.argv[1].split(",")
for p in [p for p in lr.make_patterns(60 * 2**20) if p.family in families and p.footprint_factor == 1.0]:
    consts = dict(BM=p.bm, BN=p.bn, D=p.d, ORDER=ORDER_CODE[p.order], SELECT=p.sms != "all", COMPUTE=p.compute,
                  ATOMIC=p.atomic, FAKE=False, STORE=p.store)
    k = triton.compile(tc.ASTSource(fn=lk.l2_reuse_kernel, signature=sig, constexprs=consts),
                       target=GPUTarget("cuda", 90, 32),
                       options=dict(num_warps=p.num_warps, maxnreg=p.maxnreg, num_stages=p.num_stages))
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(k.asm["cubin"]); f.flush()
        usage = subprocess.run([tool, "--dump-resource-usage", f.name], capture_output=True, text=True).stdout
    regs, local = (int(x) for x in re.search(r"REG:(\d+).*?LOCAL:(\d+)", usage).groups())
    fit = resident_programs(regs, p.num_warps, k.metadata.shared, smem_per_sm=228 * 1024)
    print(p.family, regs, local, fit, p.per_sm, "wgmma" in k.asm["ptx"])
"""


def test_the_kernel_compiles_for_sm90_at_the_planned_occupancy_without_spilling():
    """Compiled for an H100/H200 (sm_90) on the CPU with Triton's own ptxas: the register cap
    lets ``per_sm`` programs share an SM, nothing spills to local memory, and the products are
    Hopper's ``wgmma``. A fresh process: ``TRITON_INTERPRET`` must be off to compile."""
    import subprocess

    pytest.importorskip("triton")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run(
        [sys.executable, "-c", _COMPILE, "waves-2,causal-down-d256,stream,dq-atomic,dq-store,dq-chain"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    if proc.returncode != 0 and (
        "ptxas" in proc.stderr and "not found" in proc.stderr or "No such file" in proc.stderr
    ):
        pytest.skip("no ptxas/cuobjdump in this Triton")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line.split() for line in proc.stdout.splitlines()]
    assert {r[0] for r in rows} == {"waves-2", "causal-down-d256", "stream", "dq-atomic", "dq-store", "dq-chain"}
    for family, regs, local, fit, per_sm, wgmma in rows:
        assert local == "0" and int(fit) == int(per_sm), (family, regs, fit)
        assert wgmma == str(family != "stream")
