from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

# Deterministic examples by default, so a CI run cannot fail on a case no earlier run saw;
# MEMMODEL_HYPOTHESIS=explore draws new random examples on every run (for hunting bugs).
# No deadline: the properties are about values, not speed, and on a loaded two-core machine
# (one pytest worker per core) an example's time says more about its neighbours than about it.
settings.register_profile("deterministic", derandomize=True, database=None, deadline=None)
settings.register_profile("explore", deadline=None)
settings.load_profile("explore" if os.environ.get("MEMMODEL_HYPOTHESIS") == "explore" else "deterministic")

REPO = Path(__file__).resolve().parent.parent
HARDWARE = REPO / "memmodel" / "hardware" / "profiles"

#: the longest tests (seconds each on two cores), run first: the suite runs on several workers
#: (pytest-xdist, ``--dist worksteal``), and a long test started last would leave the other
#: workers idle while it finishes. Only the order changes; a name no longer here is harmless.
LONGEST_FIRST = (
    "tests/test_readme.py::test_readme_example_output_is_generated_by_the_tool",
    "tests/test_parallel.py::test_ring_and_ulysses_match_one_gpu_on_the_cpu",
    "tests/test_fuzz.py::test_fuzz_mutated_profile_files_through_the_cli",
    "tests/test_calibrated_time.py::test_the_profiles_made_of_the_h200_calibration_are_current",
    "tests/test_traffic.py::test_tiled_never_exceeds_standard_once_n_exceeds_the_block",
    "tests/test_caveats.py::test_the_data_file_is_what_the_records_give_now",
    "tests/test_fuzz.py::test_fuzz_cli",
    "tests/test_traffic.py::test_bytes_are_monotone_in_n",
    "tests/test_traffic.py::test_bytes_are_proportional_to_dtype_size_except_fp32_statistics",
    "tests/test_parallel.py::test_calibrate_nccl_on_the_cpu",
    "tests/test_reuse.py::test_reread_with_the_curve_row_equals_scalar",
    "tests/test_fuzz.py::test_fuzz_profile_loader",
    "tests/test_fuzz.py::test_grep_finds_no_traceback_in_fuzz_outputs",
    "tests/test_fuzz.py::test_fuzz_validate_rescore_of_damaged_records",
    "tests/test_wave_drift.py::test_the_gqa_cap_fit_reproduces_the_profile",
)


def _rank(item: pytest.Item) -> int:
    name = item.nodeid.split("[", 1)[0]
    return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_rank)  # stable: every other test keeps its place


@pytest.fixture(autouse=True)
def _stable_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Stable output and no profiles from the developer's own config folders."""
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("MEMMODEL_HARDWARE_PATH", raising=False)
    monkeypatch.delenv("MEMMODEL_DEBUG", raising=False)


@pytest.fixture
def run():
    """Invoke the CLI as a user would (through MemmodelGroup.main), stdout and stderr apart."""
    from click.testing import CliRunner

    from memmodel.cli import cli

    def _run(*args: str):
        runner = CliRunner()
        return runner.invoke(cli, list(args), catch_exceptions=False)

    return _run


def profile_with_l2(field: str, value: str) -> str:
    """A minimal profile's YAML whose ``memory.l2`` carries ``field: value`` (a figure under test)."""
    return (
        "name: x\nfull_name: X\nvendor: NVIDIA\narchitecture: Hopper\nsm_count: 132\nclock: 1980 MHz\n"
        "memory:\n  hbm: {capacity: 141 GB, bandwidth: 4.8 TB/s, latency: 500 ns}\n"
        f"  l2: {{capacity: 60 MiB, bandwidth: 10 TB/s, latency: 200 ns, {field}: {value}}}\n"
        "  sram: {capacity_per_sm: 228 KiB, bandwidth_per_sm: 250 GB/s, latency: 15 ns}\n"
        "compute: {fp16: 900 TFLOP/s, fp32: 50 TFLOP/s, exp: 4 Top/s}\n"
    )
