from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

# Deterministic examples by default, so a CI run cannot fail on a case no earlier run saw;
# MEMMODEL_HYPOTHESIS=explore draws new random examples on every run (for hunting bugs).
settings.register_profile("deterministic", derandomize=True, database=None)
settings.register_profile("explore")
settings.load_profile("explore" if os.environ.get("MEMMODEL_HYPOTHESIS") == "explore" else "deterministic")

REPO = Path(__file__).resolve().parent.parent
HARDWARE = REPO / "memmodel" / "hardware" / "profiles"


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
