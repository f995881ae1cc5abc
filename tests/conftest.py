from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
HARDWARE = REPO / "hardware"


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
