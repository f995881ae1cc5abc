"""`memmodel calibrate` on the CPU: profile writing, the knee of the L2 curve, atomic writes, the CLI.

The measurements themselves need a CUDA GPU and run on the device machine only; here a fake
measurement result stands in for them.
"""

from __future__ import annotations

import json
import math
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from memmodel.calibration import figures, plan, profile
from memmodel.errors import MemmodelError, RuntimeFailure
from memmodel.fileio import write_atomic
from memmodel.gpu import calibrate as cal
from memmodel.hardware import load_file

from .conftest import REPO

MiB = 2**20


def fake_result(**errors: str) -> dict[str, Any]:
    """What run_calibration returns on an H200, with round numbers."""
    sizes = [int(s) for s in plan.sweep_sizes(60 * MiB)]
    points = [
        {"bytes": s, "bytes_per_s": 10e12 if s <= 28 * MiB else 4.2e12, "passes": 10, "spread": 0.01} for s in sizes
    ]
    m: dict[str, Any] = {
        "hbm": {
            "buffer_bytes": 4 * 2**30,
            "read": {"rate": 4.5e12, "reps": 20},
            "write": {"rate": 4.3e12},
            "copy": {"rate": 4.2e12},
            "read_torch": {"rate": 4.1e12},
            "write_torch": {"rate": 4.25e12},
            "copy_torch": {"rate": 4.15e12},
        },
        "l2": {"rate": 10.5e12, "buffer_bytes": 15 * MiB},
        "l2_sweep": {"points": points, **plan.knee_summary(points)},
        "smem": {"rate": 30e12, "per_sm_bytes_per_s": 30e12 / 132},
        "matmul": {
            "fp16": {"rate": 750e12, "n": 8192, "method": "torch.matmul"},
            "bf16": {"rate": 780e12, "n": 8192, "method": "torch.matmul"},
            "tf32": {"rate": 380e12, "n": 8192, "method": "torch.matmul, allow_tf32=True"},
            "fp32": {"rate": 50e12, "n": 8192, "method": "torch.matmul, allow_tf32=False"},
            "fp8": {"skipped": "this torch has no torch._scaled_mm / float8_e4m3fn"},
        },
        "exp": {"rate": 3.9e12},
        "latency": {
            "l2": {"latency_s": 210e-9, "buffer_bytes": 15 * MiB},
            "dram": {"latency_s": 650e-9, "buffer_bytes": 240 * MiB},
        },
        "launch": {
            "host_per_launch_s": 12e-6,
            "min_kernel_s": 3e-6,
            "queued_per_kernel_s": 1.5e-6,
            "graph_per_kernel_s": 1.1e-6,
        },
    }
    for step in errors:
        m.pop(step, None)
    return {
        "schema": plan.SCHEMA,
        "memmodel": "0.1.0",
        "date": "2026-11-29",
        "quick": False,
        "device": {
            "name": "NVIDIA H200",
            "vendor": "NVIDIA",
            "sm_count": 132,
            "l2_bytes": 60 * MiB,
            "hbm_bytes": 143771 * MiB,
            "smem_per_sm_bytes": 228 * 1024,
            "compute_capability": "9.0",
            "clock_hz": None,
        },
        "measurements": m,
        "errors": dict(errors),
        "wall_s": 60.0,
    }


# ---------------------------------------------------------------------------------------
# The profile


def DATASHEET():  # noqa: N802 - reads like the constant it stands for
    """The H200's datasheet profile, the base its calibration carries unmeasured figures from."""
    return load_file(REPO / "validation" / "h200" / "h200-datasheet.yaml")


def test_profile_yaml_is_a_profile_load_file_accepts(tmp_path):
    base = DATASHEET()
    path = tmp_path / "h200-calibrated.yaml"
    path.write_text(profile.profile_yaml(fake_result(), base=base, name="h200-calibrated"), encoding="utf-8")
    p = load_file(path)
    assert p.name == "h200-calibrated"
    assert p.hbm.bandwidth_bytes_per_s == 4.5e12  # reads: Triton read 4.5 beats torch sum 4.1
    # writes: Triton write 4.3 beats torch fill_ 4.25
    assert p.provenance["memory.hbm.write_bandwidth"].text == "4.3 TB/s"
    assert p.provenance["memory.hbm.write_bandwidth"].source == "measured"
    assert p.l2.bandwidth_bytes_per_s == 10.5e12
    assert p.hbm.latency_s == pytest.approx(650e-9)
    assert p.l2.latency_s == pytest.approx(210e-9)
    assert p.compute_flops_per_s["bf16"] == 780e12
    assert p.compute_flops_per_s["fp32"] == 50e12
    assert p.exp_ops_per_s == 3.9e12
    assert p.sram.bandwidth_per_sm_bytes_per_s == pytest.approx(30e12 / 132, rel=1e-3)
    # the base (h200) has an effective capacity measured with DRAM counters (30 MiB): it is kept,
    # and the bandwidth knee goes into the note
    assert p.l2.effective_capacity_bytes == 30 * MiB
    assert "bandwidth knee measured by calibrate" in p.provenance["memory.l2.effective_capacity"].note
    # from the driver
    assert p.sm_count == 132
    assert p.l2.capacity_bytes == 60 * MiB
    assert p.hbm.capacity_bytes == 143771 * MiB
    assert p.sram.capacity_per_sm_bytes == 228 * 1024
    for fpath in ("sm_count", "memory.l2.capacity", "memory.hbm.capacity", "memory.sram.capacity_per_sm"):
        assert p.provenance[fpath].source == "device"
    for fpath in ("memory.hbm.bandwidth", "compute.bf16", "launch_overhead", "event_overhead"):
        assert p.provenance[fpath].source == "measured"
    # one empty kernel between two events (3 µs) less one kernel's queued pace (1.5 µs)
    assert p.event_overhead_s == pytest.approx(1.5e-6)
    assert p.sources["measured"].title == "measured on NVIDIA H200, 2026-11-29, memmodel 0.1.0"
    assert "get_device_properties" in p.sources["device"].title
    # carried over from the base, with the base's own source
    assert p.sram.latency_s == base.sram.latency_s
    assert p.provenance["memory.sram.latency"].source == base.provenance["memory.sram.latency"].source
    assert (
        "carried over from profile h200-datasheet (not measured by calibrate)"
        in p.provenance["memory.sram.latency"].note
    )
    assert p.compute_flops_per_s["fp8"] == base.compute_flops_per_s["fp8"]  # fp8 skipped: the datasheet's
    assert "not measured in this run" in p.provenance["compute.fp8"].note
    assert p.clock_hz == base.clock_hz


def _base_without_effective_capacity():
    """The bundled h200 minus its effective capacity, so the measured knee is written."""
    import dataclasses

    base = DATASHEET()
    prov = {k: v for k, v in base.provenance.items() if k != "memory.l2.effective_capacity"}
    return dataclasses.replace(base, provenance=prov, l2=dataclasses.replace(base.l2, effective_capacity_bytes=None))


def test_effective_capacity_is_the_smallest_knee_of_the_curves():
    result = fake_result()
    sizes = [int(s) for s in plan.sweep_sizes(60 * MiB)]
    halves = [{"bytes": s, "bytes_per_s": 9e12 if s <= 19 * MiB else 4.5e12} for s in sizes]
    result["measurements"]["l2_split"] = {"curves": {"smid_half": {"points": halves, **plan.knee_summary(halves)}}}
    p = profile.profile_data(result, base=_base_without_effective_capacity())
    eff = p["memory"]["l2"]["effective_capacity"]
    # 18.88 MiB is the last point at 9 TB/s, 22.63 MiB the first at 4.5: 90 % of the way up a tenth along
    assert eff["value"] == "19.2 MiB"
    assert "%smid halves taking turns" in eff["note"] and "a different SM each pass" in eff["note"]


def test_every_figure_has_a_value_a_source_and_a_note():
    data = yaml.safe_load(profile.profile_yaml(fake_result(), base=DATASHEET()))
    leaves = [data["sm_count"], *data["memory"]["hbm"].values(), *data["memory"]["l2"].values()]
    leaves += [*data["memory"]["sram"].values(), *data["compute"].values()]
    for leaf in leaves:
        assert set(leaf) == {"value", "source", "note"}
        assert leaf["source"] in data["sources"]
    assert data["name"] == "h200-calibrated"  # default without a name: from the device
    assert data["full_name"] == "NVIDIA H200 (calibrated 2026-11-29)"


def test_without_write_figures_the_bandwidth_is_the_best_of_all():
    result = fake_result()
    for key in ("write", "write_torch"):
        del result["measurements"]["hbm"][key]
    data = profile.profile_data(result, base=DATASHEET())
    assert data["memory"]["hbm"]["bandwidth"]["value"] == "4.5 TB/s"
    assert "write_bandwidth" not in data["memory"]["hbm"]


def test_fields_calibrate_does_not_measure_are_carried_over(tmp_path):
    base = DATASHEET()
    path = tmp_path / "out.yaml"
    path.write_text(profile.profile_yaml(fake_result(), base=base), encoding="utf-8")
    p = load_file(path)
    assert p.sram.latency_s == base.sram.latency_s
    assert "carried over from profile h200-datasheet" in (p.provenance["memory.sram.latency"].note or "")


def test_without_a_base_the_unmeasured_required_figure_is_named():
    with pytest.raises(RuntimeFailure, match=r"memory\.sram\.latency not measured.*--base"):
        profile.profile_data(fake_result(), base=None)


def test_a_failed_step_is_carried_over_from_the_base_or_named():
    result = fake_result(l2="RuntimeError: boom")
    data = profile.profile_data(result, base=DATASHEET())
    assert data["memory"]["l2"]["bandwidth"]["value"] == "9.8 TB/s"
    assert "not measured in this run" in data["memory"]["l2"]["bandwidth"]["note"]
    with pytest.raises(RuntimeFailure, match=r"memory\.l2\.bandwidth.*failed steps: l2: RuntimeError: boom"):
        profile.profile_data(result, base=None)


def test_a_base_effective_capacity_larger_than_this_l2_is_dropped():
    result = fake_result(l2_sweep="RuntimeError: boom")
    result["device"]["l2_bytes"] = 16 * MiB  # smaller than the base's 30 MiB
    data = profile.profile_data(result, base=DATASHEET())
    assert "effective_capacity" not in data["memory"]["l2"]
    profile.profile_yaml(result, base=DATASHEET())  # and it validates


def test_values_keep_four_significant_digits_and_read_back():
    from memmodel import units

    assert figures._bw(4.5213e12) == "4.521 TB/s"
    assert figures._bw(34.4e6) == "34.4 MB/s"  # small values do not round to zero
    assert figures._flops(789.34e12) == "789.3 TFLOP/s"
    assert figures._ns(2.1e-7) == "210 ns"
    assert figures._ns(1.5e-6) == "1.5 us"
    assert units.parse(figures._si(3.9512e12, "op/s"), "ops") == 3.951e12
    assert figures._bytes_text(60 * MiB) == "60 MiB"
    assert figures._bytes_text(228 * 1024) == "228 KiB"
    assert figures._bytes_text(150_109_880_320) == "139.801 GiB"  # not a whole MiB: 3 decimals
    assert figures._bytes_text(1000) == "1000 B"


def test_match_bundled_by_the_gpu_name():
    names = {"h200": "NVIDIA H200 SXM 141GB", "h100-sxm": "NVIDIA H100 SXM5 80GB", "h100-pcie": "NVIDIA H100 PCIe 80GB"}
    assert profile.match_bundled("NVIDIA H200", names) == "h200"
    assert profile.match_bundled("NVIDIA H100", names) is None  # two match: none is chosen
    assert profile.match_bundled("NVIDIA H100-SXM5-80GB", names) == "h100-sxm"  # dashes are spaces
    assert profile.match_bundled("NVIDIA H20", names) is None  # a whole word, not a prefix of one
    assert profile.match_bundled("", names) is None


# ---------------------------------------------------------------------------------------
# The knee of the L2 capacity curve


def _sigmoid(size: float, knee: float, top: float = 10e12, bottom: float = 4e12, width: float = 2 * MiB) -> float:
    return bottom + (top - bottom) / (1 + math.exp((size - knee) / width))


def test_knee_of_a_smooth_drop_is_where_it_is_half_way():
    sizes = [s * MiB for s in range(8, 121, 2)]
    rates = [_sigmoid(s, 30 * MiB) for s in sizes]
    knee = plan.find_knee(sizes, rates)
    assert knee.bytes == pytest.approx(30 * MiB, rel=0.02)
    assert knee.plateau_bytes_per_s == pytest.approx(10e12, rel=1e-2)  # median of the smallest quarter
    assert knee.floor_bytes_per_s == pytest.approx(4e12, rel=1e-3)
    # still 90 % of the way up: an earlier size
    end = plan.find_knee(sizes, rates, fraction=0.9)
    assert end.bytes < knee.bytes


def test_knee_of_a_step_is_interpolated_between_the_two_points():
    sizes = [8, 16, 24, 32, 40, 48]
    rates = [10, 10, 10, 4, 4, 4]
    # threshold 4 + 0.5 x 6 = 7: from 10 at 24 to 4 at 32, 7 is crossed half-way, at 28
    assert plan.find_knee(sizes, rates).bytes == pytest.approx(28)


def test_a_dip_on_the_plateau_is_not_the_knee():
    sizes = [8, 16, 24, 32, 40, 48, 56]
    rates = [10, 6, 10, 10, 4, 4, 4]  # one noisy point at 16
    # last point at or above 7 is 32; 10 -> 4 between 32 and 40: 7 at 36
    assert plan.find_knee(sizes, rates).bytes == pytest.approx(36)


def test_no_knee_when_the_curve_does_not_fall():
    sizes = [8, 16, 24, 32]
    assert plan.find_knee(sizes, [10, 10.2, 9.9, 10.1]).bytes is None  # flat: within 10 %
    assert plan.find_knee(sizes, [10, 10, 10, 4]).bytes == pytest.approx(28)
    assert plan.find_knee(sizes, [4, 10, 10, 10], floor=4).bytes is None  # rises: never falls below


def test_knee_points_may_come_in_any_order_and_bad_input_is_refused():
    assert plan.find_knee([32, 8, 24, 16], [4, 10, 10, 10]).bytes == pytest.approx(28)
    with pytest.raises(ValueError):
        plan.find_knee([8], [10])
    with pytest.raises(ValueError):
        plan.find_knee([8, 16], [10, 4], fraction=1.5)


def test_sweep_sizes_run_from_8_mb_to_twice_l2_in_whole_blocks():
    sizes = plan.sweep_sizes(60 * MiB)
    assert sizes[0] == 8_000_000 // plan.BLOCK_BYTES * plan.BLOCK_BYTES
    assert sizes[-1] == 120 * MiB
    assert list(sizes) == sorted(set(sizes))
    assert all(s % plan.BLOCK_BYTES == 0 for s in sizes)
    fine = [s for s in sizes if s < 60 * MiB]
    assert max(b - a for a, b in zip(fine, fine[1:])) <= 60 * MiB / 16 + plan.BLOCK_BYTES  # 3.75 MiB apart
    assert len(plan.sweep_sizes(60 * MiB, quick=True)) < len(sizes)


def test_resident_programs():
    # 40 registers x 32 lanes = 1280 per warp (a multiple of 256); 65536 / 1280 = 51 warps; / 8 = 6 programs
    assert plan.resident_programs(40, 8) == 6
    # 32 registers: 1024 per warp, 64 warps, the thread limit too: 2048 / 256 = 8 programs
    assert plan.resident_programs(32, 8) == 8
    # 16 KiB of shared memory each, 228 KiB per SM: 14; threads allow 2048 / 128 = 16
    assert plan.resident_programs(None, 4, 16384, smem_per_sm=228 * 1024) == 14
    assert plan.resident_programs(255, 32) == 1  # never zero


# ---------------------------------------------------------------------------------------
# Atomic writes


def test_write_atomic_creates_refuses_and_overwrites_with_force(tmp_path):
    path = tmp_path / "out.yaml"
    write_atomic(path, "first\n", force=False)
    assert path.read_text() == "first\n"
    with pytest.raises(MemmodelError, match="already exists; use --force") as info:
        write_atomic(path, "second\n", force=False)
    assert info.value.exit_code == 2
    assert path.read_text() == "first\n"
    write_atomic(path, "third\n", force=True)
    assert path.read_text() == "third\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.yaml"]  # no temporary file left


def test_write_atomic_gives_the_usual_permissions(tmp_path):
    old = os.umask(0o022)
    try:
        path = write_atomic(tmp_path / "p.yaml", "x\n", force=False)
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_write_atomic_failures_are_one_error(tmp_path):
    with pytest.raises(RuntimeFailure, match="does not exist") as info:
        write_atomic(tmp_path / "missing" / "p.yaml", "x", force=True)
    assert info.value.exit_code == 1
    with pytest.raises(MemmodelError, match="is a folder"):
        write_atomic(tmp_path, "x", force=True)


def test_write_atomic_replaces_in_one_step(tmp_path, monkeypatch):
    """The old content stays whole until os.replace; a failure before it leaves it untouched."""
    path = tmp_path / "p.yaml"
    path.write_text("old\n")

    def broken(src: str, dst: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(RuntimeFailure, match="cannot write.*No space left"):
        write_atomic(path, "new\n", force=True)
    assert path.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.yaml"]


def test_the_one_writer_syncs_before_it_renames_and_names_only_the_users_path(tmp_path, monkeypatch):
    """The strictest of the two writers there were: data on disk (fsync) before the rename; a
    failure names the path the user gave, never the hidden temporary file; a symbolic link or a
    device is refused even with force; an existing file only with force (every output: sweep -o,
    --plot, calibrate --output, validate --output)."""
    from memmodel.fileio import atomic_open

    events = []
    real_fsync, real_link = os.fsync, os.link
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(os, "link", lambda a, b: (events.append("link"), real_link(a, b))[1])
    path = tmp_path / "p.json"
    write_atomic(path, "x\n", force=False)
    assert events == ["fsync", "link"]  # no clobbering without force: link fails if the file exists

    def full(fd: int) -> None:
        raise OSError(28, "No space left on device", str(tmp_path / ".p.json.abc.tmp"))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(RuntimeFailure) as info:
        with atomic_open(path, force=True) as handle:
            handle.write("y\n")
    assert str(info.value) == f"{path}: cannot write (No space left on device)" and ".tmp" not in str(info.value)
    assert path.read_text() == "x\n" and sorted(p.name for p in tmp_path.iterdir()) == ["p.json"]
    link = tmp_path / "link.json"
    link.symlink_to(path)
    with pytest.raises(MemmodelError, match="is a symbolic link, not a regular file"):
        write_atomic(link, "z\n", force=True)
    assert path.read_text() == "x\n"


# ---------------------------------------------------------------------------------------
# The command


def _one_error_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("memmodel: error: ")
    assert "Traceback" not in result.stderr
    return lines[0]


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


@pytest.mark.skipif(_has_cuda(), reason="a CUDA GPU is visible here")
def test_calibrate_without_cuda_is_one_line_and_exit_1(run):
    result = run("calibrate")
    assert result.exit_code == 1
    line = _one_error_line(result)
    assert "CUDA" in line  # "this needs PyTorch with CUDA ..." or "no CUDA GPU is visible ..."
    assert result.stdout == ""


def test_an_existing_output_is_refused_before_measuring(run, tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("keep\n")
    result = run("calibrate", "--output", str(path))
    assert result.exit_code == 2
    assert "already exists; use --force" in _one_error_line(result)
    assert path.read_text() == "keep\n"


def test_an_unknown_base_is_refused(run):
    result = run("calibrate", "--base", "h2000")
    assert result.exit_code == 2
    assert "did you mean h200" in _one_error_line(result)


class _FakeInfo:
    name = "NVIDIA H200"


class _FakeContext:
    info = _FakeInfo()


@pytest.fixture
def fake_gpu(monkeypatch):
    """calibrate with the measuring replaced by fake_result()."""
    calls: dict[str, Any] = {}

    def run_calibration(*, quick=False, on_step=None, context=None):
        calls["quick"] = quick
        for i, step in enumerate(cal.STEPS):
            on_step(i, len(cal.STEPS), step.description)
        on_step(len(cal.STEPS), len(cal.STEPS), "done")
        return fake_result()

    monkeypatch.setattr(cal, "make_context", lambda quick=False: _FakeContext())
    monkeypatch.setattr(cal, "run_calibration", run_calibration)
    return calls


def test_calibrate_writes_a_profile_and_shows_the_figures(run, tmp_path, fake_gpu):
    path = tmp_path / "h200-mine.yaml"
    result = run("calibrate", "--output", str(path), "--quick")
    assert result.exit_code == 0, result.stderr
    assert fake_gpu["quick"] is True
    assert "base h200 (matched by the GPU's name)" in result.stdout
    assert "HBM read (Triton)" in result.stdout and "4.50 TB/s" in result.stdout
    assert "L2 capacity sweep" in result.stdout
    assert f"wrote {path}" in result.stderr
    p = load_file(path)
    assert p.name == "h200-mine"
    assert p.hbm.bandwidth_bytes_per_s == 4.5e12
    # a second run does not overwrite it, --force does
    again = run("calibrate", "--output", str(path))
    assert again.exit_code == 2
    forced = run("calibrate", "--output", str(path), "--force", "--name", "other", "--format", "json")
    assert forced.exit_code == 0, forced.stderr
    assert load_file(path).name == "other"
    data = json.loads(forced.stdout)  # JSON alone on stdout
    assert data["output"] == str(path)
    assert data["profile"]["name"] == "other"
    assert 26 * MiB < data["measurements"]["l2_sweep"]["knee_bytes"] < 28 * MiB
    assert data["base"] == {"name": "h200", "path": data["base"]["path"], "how": "matched by the GPU's name"}


def test_one_figures_table_feeds_the_profile_and_the_cli_table(run, fake_gpu):
    """Each figure of FIGURES is a row of the CLI's table, and the profile's figures are made of
    the same values: what the table shows is what the profile holds."""
    from memmodel.units import parse

    result = run("calibrate")
    assert result.exit_code == 0, result.stderr
    for figure in figures.FIGURES:
        assert figure.label in result.stdout
    values = figures.figure_values(fake_result())
    written = figures.measured_figures(fake_result())
    for key, field, kind in (
        ("hbm_read", "memory.hbm.bandwidth", "bandwidth"),  # the best read: Triton's 4.5 TB/s
        ("hbm_write", "memory.hbm.write_bandwidth", "bandwidth"),
        ("l2", "memory.l2.bandwidth", "bandwidth"),
        ("l2_latency", "memory.l2.latency", "time"),
        ("dram_latency", "memory.hbm.latency", "time"),
        ("matmul_bf16", "compute.bf16", "flops"),
        ("exp", "compute.exp", "ops"),
        ("launch", "launch_overhead", "time"),
    ):
        assert parse(written[field][0], kind) == pytest.approx(values[key], rel=1e-3)


def test_calibrate_with_an_unmatched_gpu_needs_a_base_to_write(run, tmp_path, fake_gpu, monkeypatch):
    monkeypatch.setattr(_FakeInfo, "name", "Imaginary GPU 9000")
    path = tmp_path / "x.yaml"
    result = run("calibrate", "--output", str(path))
    assert result.exit_code == 2
    assert "memory.sram.latency" in _one_error_line(result) and "--base" in result.stderr
    assert not path.exists()
    ok = run("calibrate", "--output", str(path), "--base", "h100-sxm")
    assert ok.exit_code == 0, ok.stderr
    assert load_file(path).provenance["memory.sram.latency"].note.startswith("carried over from profile h100-sxm")
    shown = run("calibrate")  # no output: the figures alone, with no base to compare
    assert shown.exit_code == 0
    assert "HBM read (Triton)" in shown.stdout and "base (" not in shown.stdout


def test_ctrl_c_stops_cleanly_and_writes_nothing(run, tmp_path, monkeypatch):
    def interrupted(*, quick=False, on_step=None, context=None):
        on_step(0, len(cal.STEPS), cal.STEPS[0].description)
        raise KeyboardInterrupt

    monkeypatch.setattr(cal, "make_context", lambda quick=False: _FakeContext())
    monkeypatch.setattr(cal, "run_calibration", interrupted)
    path = tmp_path / "p.yaml"
    result = run("calibrate", "--output", str(path))
    assert result.exit_code == 130
    assert "interrupted" in result.stderr.splitlines()[-1]
    assert not path.exists()
    assert list(tmp_path.iterdir()) == []


def test_the_gpu_modules_import_without_torch_or_triton():
    code = (
        "import sys; import memmodel.gpu.calibrate, memmodel.cli.calibrate, memmodel.fileio; "
        "print(' '.join(m for m in ('torch', 'triton') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=Path(__file__).parent.parent
    )
    assert out.stdout.strip() == ""


def test_every_step_is_measured_by_its_function(monkeypatch):
    """STEPS is the one table of steps: each names a measuring function of the GPU code, and
    run_calibration runs each in order, keeps its measurements under its key and hands it the
    measurements of the earlier steps it uses."""
    import dataclasses
    import types

    keys = [step.key for step in cal.STEPS]
    assert len(set(keys)) == len(keys)
    for i, step in enumerate(cal.STEPS):
        assert step.measure.__module__.startswith("memmodel.gpu.") and step.measure.__name__.startswith("measure_")
        assert all(used in keys[:i] for used in step.uses), step.key
    calls: list[tuple[str, dict[str, Any]]] = []

    def fake(key):
        def measure(ctx, **used):
            calls.append((key, used))
            return {"measured": key}

        return measure

    monkeypatch.setattr(cal, "STEPS", tuple(dataclasses.replace(s, measure=fake(s.key)) for s in cal.STEPS))
    info = plan.DeviceInfo("fake", 132, 60 * 2**20, 2**37, 228 * 1024, (9, 0))
    ctx = types.SimpleNamespace(info=info, free=lambda: None)
    result = cal.run_calibration(context=ctx)
    assert result["errors"] == {}
    assert [key for key, _ in calls] == keys
    assert {k: v["measured"] for k, v in result["measurements"].items()} == {k: k for k in keys}
    assert list(dict(calls)["l2_sweep"]) == ["hbm"] and dict(calls)["l2_sweep"]["hbm"]["measured"] == "hbm"
