from __future__ import annotations

import csv
import dataclasses
import io
import json
import subprocess
import sys

import pytest

from memmodel import Workload, compare, load_profile
from memmodel.report.roofline import ROOFLINE_CSV_COLUMNS
from memmodel.roofline import ceilings, ridge_points, roof_of, roofline

from .conftest import HARDWARE, REPO


def test_a100_ceilings_come_from_the_profile():
    # the A100's datasheet peaks × the H200's measured shares of its own (transfer_from: h200)
    roofs = {c.name: c for c in ceilings(load_profile("a100"))}
    assert [c.name for c in roofs.values() if c.kind == "memory"] == ["hbm", "l2", "sram"]
    assert roofs["hbm"].value == 1.923e12  # 2039 GB/s × 4.528 / 4.8 = 1.9234 TB/s, to 4 digits
    assert roofs["l2"].value == 7.22e12  # 5120 B/clk × 1410 MHz (the H200 measured no L2 peak's share)
    # SRAM is aggregated: 180.5 GB/s per SM × 108 SMs = 19.494 TB/s
    assert roofs["sram"].value == pytest.approx(19.494e12)
    # FP16 and BF16 share one roof when their peaks are equal: the published BF16 MAMF, 271.2 TFLOP/s each
    assert roofs["fp16/bf16"].value == 271.2e12 and roofs["fp16/bf16"].dtypes == ("fp16", "bf16")
    assert "fp16" not in roofs and "bf16" not in roofs
    assert "fp8" not in roofs  # the A100 has no FP8 tensor cores
    assert roofs["exp"].unit == "exp/s" and roofs["exp"].value == 2.44e12  # the share is at most 1


def test_a100_ridge_points_by_hand():
    r = {(x.memory, x.compute): x.intensity for x in ridge_points(ceilings(load_profile("a100")))}
    assert r["hbm", "fp16/bf16"] == pytest.approx(141.03, abs=0.005)  # 271.2 TFLOP/s / 1.923 TB/s = 141.03 FLOP/B
    assert r["hbm", "fp32"] == pytest.approx(7.707, abs=0.001)  # 14.82 (19.5 × 50.91 / 67) / 1.923 = 7.707
    assert r["hbm", "tf32"] == pytest.approx(68.95, abs=0.005)  # 132.6 (156 × 420.3 / 494.5) / 1.923 = 68.95
    assert r["l2", "fp16/bf16"] == pytest.approx(37.56, abs=0.005)  # 271.2 / 7.22 = 37.56
    assert r["sram", "fp16/bf16"] == pytest.approx(13.91, abs=0.005)  # 271.2 / 19.494 = 13.91
    assert r["sram", "fp32"] == pytest.approx(0.7602, abs=0.0001)  # 14.82 / 19.494 = 0.7602
    assert r["hbm", "exp"] == pytest.approx(1.2688, abs=0.0001)  # 2.44 T exp/s / 1.923 TB/s = 1.2688 exp/B
    assert len(r) == 3 * 4  # 3 memory roofs × (fp32, tf32, fp16/bf16, exp)


def test_points_agree_with_the_compare_ledger_and_timing():
    p = load_profile("a100")
    c = compare(Workload(n=4096, d=768), p)
    r = roofline(p, c)
    kernels = [x for x in r.points if not x.is_total]
    assert [(x.algorithm, x.kernel) for x in kernels] == [
        ("standard", "qk"),
        ("standard", "softmax"),
        ("standard", "pv"),
        ("tiled", "fa2_fwd"),
    ]
    ledger = [k for ev in c.algorithms for k in ev.traffic.kernels]
    timing = [k for ev in c.algorithms for k in ev.timing.kernels]
    for point, kernel, kt in zip(kernels, ledger, timing):
        assert point.flops == kernel.flops
        for level in ("hbm", "l2", "sram"):
            moved = kernel.bytes(level=level)
            assert point.bytes[level] == moved
            assert point.intensity[level] == (kernel.flops / moved if moved else None)
        assert point.time_s == kt.time_s and point.bound == kt.bound
        assert point.performance_flops_per_s == pytest.approx(kernel.flops / kt.time_s)
    qk = kernels[0]
    # 2·4096²·768 FLOPs over (Q + K + S) = 25_769_803_776 / 92_274_688 B = 279.3 FLOP/B
    assert qk.intensity["hbm"] == pytest.approx(279.27, abs=0.01)
    # fp32 matmul on the FP32 (non-tensor) peak: at the roof, 14.82 TFLOP/s (19.5 × the H200's
    # 50.91 of 67), less the launch overhead (1.38 us of 25.77 GFLOP / 14.82 TFLOP/s = 1.7389 ms)
    assert (qk.bound, qk.roof, qk.performance_flops_per_s) == (
        "matmul",
        "fp32",
        pytest.approx(14.82e12 * 1.7389e-3 / (1.7389e-3 + 1.38e-6), rel=1e-4),
    )
    softmax = kernels[1]
    # 4 FLOP per score over 2 × 4 B per score (read S, write P) = 0.5 FLOP/B, on the HBM roof
    assert softmax.intensity["hbm"] == 0.5
    assert (softmax.bound, softmax.roof) == ("hbm", "hbm")
    # 134.2 MB at the fp32 softmax's rate for rows of 4096 (2.43 TB/s on the H200, carried to the
    # A100 by the stream rule: 1.180 TB/s, tests/test_timing.py), plus a launch of 1.38 us
    moved_s = 134_217_728 / 1.180e12
    assert softmax.performance_flops_per_s == pytest.approx(0.5 * 134_217_728 / (moved_s + 1.38e-6), rel=1e-3)
    # its exp ceiling: 2.44 T exp/s × 4 FLOP per exp = 9.76 TFLOP/s
    assert softmax.exp_ceiling_flops_per_s == pytest.approx(9.76e12)
    totals = [x for x in r.points if x.is_total]
    assert totals[0].flops == c.standard.traffic.flops and totals[0].time_s == c.standard.timing.time_s
    assert totals[1].bound == c.tiled.timing.bound


def test_levels_without_bytes_have_no_intensity():
    p = load_profile("a100")
    r = roofline(p, compare(Workload(n=1024, d=64, dtype="fp16"), p))
    for point in r.points:
        for level, moved in point.bytes.items():
            assert (point.intensity[level] is None) == (moved == 0)


def test_roofs_that_bound_fp16_and_exp_bound_kernels():
    p = load_profile("a100")
    # standard qk at d = 256 in bf16: 2·N²·d FLOPs over ≈ N²·2 B of S = 256 FLOP/B > 141: matmul-bound
    r = roofline(p, compare(Workload(n=8192, d=256, batch=4, heads=16, dtype="bf16"), p))
    qk = [x for x in r.points if x.kernel == "qk"][0]
    # at the roof (the published 271.2 TFLOP/s) but for the launch overhead (1.38 us of about 4.1 ms)
    assert (qk.bound, qk.roof) == ("matmul", "fp16/bf16")
    assert qk.performance_flops_per_s == pytest.approx(271.2e12, rel=1e-3)
    # every timing term has the roof it runs against
    roofs = ceilings(p)
    assert roof_of("matmul", p, "fp16", roofs) == "fp16/bf16"
    assert roof_of("matmul", p, "tf32", roofs) == "tf32"
    assert roof_of("compute", p, "bf16", roofs) == "fp16/bf16"  # fused matmul + softmax + exp, in series
    assert roof_of("softmax", p, "fp16", roofs) == "fp32"
    assert roof_of("exp", p, "fp16", roofs) == "exp"
    assert roof_of("latency", p, "fp16", roofs) == "hbm"
    assert [roof_of(level, p, "fp16", roofs) for level in ("hbm", "l2", "sram")] == ["hbm", "l2", "sram"]
    no_exp = dataclasses.replace(p, exp_ops_per_s=None)
    assert roof_of("exp", no_exp, "fp16", ceilings(no_exp)) == "fp32"  # timed at the FP32 peak then


def test_the_fused_kernel_is_placed_against_its_matmul_roof():
    p = load_profile("a100")
    r = roofline(p, compare(Workload(n=4096, d=768), p))
    (fa2,) = [x for x in r.points if x.kernel == "fa2_fwd"]
    c = r.comparison
    assert c is not None
    assert fa2.bound == c.tiled.timing.kernels[0].bound
    if fa2.bound == "compute":
        assert fa2.roof == "fp32"  # fp32 matmuls run on the FP32 units
        assert fa2.performance_flops_per_s < 14.82e12


def test_roofline_table_shows_ceilings_ridges_chart_and_kernels(run, monkeypatch):
    r = run("roofline", "--gpu", "a100")
    assert r.exit_code == 0, r.stderr
    out = r.stdout
    for text in ("Ceilings", "Ridge points", "Kernels", "141.0", "1.9 TB/s", "271.2 TFLOP/s", "279.3", "matmul (FP32)"):
        assert text in out
    assert "N 4096 · d 768 · fp32" in out  # the documented default workload
    for columns in ("80", "200"):  # the chart is at most 80 columns wide, whatever the terminal
        monkeypatch.setenv("COLUMNS", columns)
        out = run("roofline", "--gpu", "a100").stdout
        chart = out[out.index("performance (FLOP/s)") : out.index("Kernels")]
        assert "S" in chart and "T" in chart and "+" in chart and "FP16/BF16 271T" in chart
        assert max(len(line) for line in chart.splitlines()) <= 80


def test_roofline_json_contract(run):
    r = run("roofline", "--n", "2048", "--d", "64", "--dtype", "fp16", "--format", "json")
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["schema"] == "memmodel.roofline/1"
    assert data["workload"]["n"] == 2048 and data["tiled"] == "fa2"
    assert data["options"]["l2"] == "on" and data["options"]["backward"] is False
    (gpu,) = data["gpus"]
    assert gpu["hardware"]["name"] == "a100"
    assert {c["name"] for c in gpu["ceilings"]} == {"hbm", "l2", "sram", "fp32", "tf32", "fp16/bf16", "exp"}
    ridge = {(x["memory"], x["compute"]): x for x in gpu["ridge_points"]}
    assert ridge["hbm", "fp16/bf16"]["intensity"] == pytest.approx(141.03, abs=0.005)  # 271.2 / 1.923
    assert ridge["hbm", "exp"]["unit"] == "exp/B"
    compared = json.loads(run("compare", "--n", "2048", "--d", "64", "--dtype", "fp16", "--format", "json").stdout)
    kernels = [k for alg in compared["algorithms"] for k in alg["kernels"]]
    points = [x for x in gpu["points"] if x["kernel"] != "total"]
    for point, kernel in zip(points, kernels):
        assert point["kernel"] == kernel["name"]
        assert point["flops"] == kernel["flops"]
        for level in ("hbm", "l2", "sram"):
            assert point["bytes"][level] == kernel[f"{level}_bytes"]
            expected = kernel["flops"] / kernel[f"{level}_bytes"] if kernel[f"{level}_bytes"] else None
            assert point["intensity"][level] == (pytest.approx(expected) if expected else None)
        assert point["intensity"]["hbm"] == pytest.approx(kernel["arithmetic_intensity"])
        assert point["predicted_time_s"] == kernel["predicted_time_s"]
        assert point["bound"] == kernel["bound"]
    assert data["assumptions"]


def test_roofline_csv_has_every_record(run):
    r = run("roofline", "--format", "csv")
    assert r.exit_code == 0
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert tuple(rows[0]) == ROOFLINE_CSV_COLUMNS
    kinds = [x["record"] for x in rows]
    assert kinds.count("ceiling") == 7 and kinds.count("ridge") == 12 and kinds.count("point") == 6
    ridge = next(x for x in rows if x["record"] == "ridge" and x["name"] == "hbm/fp16/bf16")
    assert float(ridge["value"]) == pytest.approx(141.03, abs=0.005)  # 271.2 TFLOP/s / 1.923 TB/s
    qk = next(x for x in rows if x["record"] == "point" and x["kernel"] == "qk")
    assert float(qk["hbm_intensity"]) == pytest.approx(279.27, abs=0.01)
    assert float(qk["l2_intensity"]) == pytest.approx(int(qk["flops"]) / int(qk["l2_bytes"]))


def test_roofline_of_two_gpus(run, tmp_path):
    faster = tmp_path / "a100-fast.yaml"
    text = (HARDWARE / "a100.yaml").read_text()
    faster.write_text(text.replace("name: a100", "name: a100-fast").replace("2039 GB/s", "3000 GB/s"))
    r = run("roofline", "--gpu", "a100", "--gpu", str(faster), "--format", "json")
    assert r.exit_code == 0, r.stderr
    gpus = json.loads(r.stdout)["gpus"]
    assert [g["hardware"]["name"] for g in gpus] == ["a100", "a100-fast"]
    ridge = {x["compute"]: x["intensity"] for x in gpus[1]["ridge_points"] if x["memory"] == "hbm"}
    assert ridge["fp16/bf16"] == pytest.approx(95.830, abs=0.001)  # 271.2 / (3.0 × 4.528 / 4.8 = 2.83)
    r = run("roofline", "--gpu", "a100", "--gpu", str(faster))
    assert r.exit_code == 0
    assert "a100-fast" in r.stdout and "a100: S standard, T tiled" in r.stdout


@pytest.mark.parametrize("suffix", [".png", ".svg", ".pdf"])
def test_roofline_plot_files(run, tmp_path, suffix):
    pytest.importorskip("matplotlib")
    out = tmp_path / f"roofline{suffix}"
    r = run("roofline", "--n", "4096", "--d", "64", "--dtype", "fp16", "--plot", str(out))
    assert r.exit_code == 0, r.stderr
    assert out.stat().st_size > 1000
    assert f"wrote {out}" in r.stderr
    head = out.read_bytes()[:8]
    assert head.startswith({".png": b"\x89PNG", ".svg": b"<?xml", ".pdf": b"%PDF"}[suffix])


def test_roofline_plot_leaves_out_kernels_without_flops(run, tmp_path, monkeypatch):
    """The memory-efficient backward's workspace fill does no arithmetic: it has no place on a
    log FLOP/s axis (it used to end the command with 'math domain error'); the chart says so."""
    matplotlib = pytest.importorskip("matplotlib")
    monkeypatch.setitem(matplotlib.rcParams, "svg.fonttype", "none")  # text as text, to be read back
    out = tmp_path / "train.svg"
    r = run("roofline", "--n", "4096", "--d", "128", "--gpu", "a100,h200", "--causal", "--backward", "--plot", str(out))
    assert r.exit_code == 0, r.stderr
    assert "mea_bwd_zero" in r.stdout  # still in the table
    assert "mea_bwd_zero." in out.read_text()  # only the chart's note names it (the label says mea_bwd)


def test_plot_errors(run, tmp_path, monkeypatch):
    r = run("roofline", "--plot", str(tmp_path / "chart.jpg"))
    assert r.exit_code == 2 and "is not one of .png, .svg, .pdf" in r.stderr
    assert r.stdout == ""  # refused before any work
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    r = run("roofline", "--plot", str(tmp_path / "chart.png"))
    assert r.exit_code == 1  # the environment lacks it: a runtime failure, not a usage error
    assert (
        r.stderr == "memmodel: error: --plot needs matplotlib, which is not installed: pip install 'memmodel[plot]'\n"
    )


def test_roofline_loads_no_matplotlib_without_plot():
    code = (
        "import sys; from click.testing import CliRunner; from memmodel.cli import cli; "
        "r = CliRunner().invoke(cli, ['roofline']); assert r.exit_code == 0, r.output; "
        "print('matplotlib' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == "False"


def test_roofline_workload_and_tiled_options(run):
    r = run(
        "roofline",
        "--n",
        "256",
        "--d",
        "64",
        "--batch",
        "2",
        "--heads",
        "3",
        "--dtype",
        "fp16",
        "--tiled",
        "fa1",
        "--impl",
        "paper",
        "--block-q",
        "64",
        "--block-kv",
        "128",
        "--l2",
        "off",
        "--format",
        "json",
    )
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["tiled"] == "fa1"
    assert (data["workload"]["batch"], data["workload"]["heads"]) == (2, 3)
    fa1 = [p for p in data["gpus"][0]["points"] if p["kernel"] == "fa1_fwd"][0]
    # the hand count of tests/test_traffic.py (305_152 B for one head, the paper's view), × B·H = 6
    assert fa1["bytes"]["hbm"] == 6 * 305_152
    r = run("roofline", "--block-q", "4096", "--block-kv", "4096", "--d", "128", "--dtype", "fp16")
    assert r.exit_code == 2 and "choose smaller blocks" in r.stderr
    r = run("roofline", "--dtype", "fp8")
    assert r.exit_code == 2 and "a100 has no fp8 compute peak" in r.stderr


def test_roofline_takes_the_model_options_of_compare(run):
    args = ["--n", "1", "--n-kv", "32768", "--d", "128", "--heads", "32", "--kv-heads", "8", "--dtype", "bf16"]
    args += ["--gpu", "a100", "--l2", "cold", "--splits", "4", "--ctas-per-sm", "1"]
    r = run("roofline", *args, "--format", "json")
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["options"]["splits"] == 4 and data["options"]["l2"] == "cold"
    compared = json.loads(run("compare", *args, "--format", "json").stdout)
    kernels = [k["name"] for alg in compared["algorithms"] for k in alg["kernels"]]
    points = [p for p in data["gpus"][0]["points"] if p["kernel"] != "total"]
    assert [p["kernel"] for p in points] == kernels  # split-KV decode: fa2_splitkv and fa2_combine
    r = run("roofline", "--n", "1024", "--d", "64", "--dtype", "fp16", "--causal", "--dropout", "0.1", "--backward")
    assert r.exit_code == 0, r.stderr
    assert "fa2_bwd" in r.stdout
