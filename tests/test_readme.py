from __future__ import annotations

import subprocess
import sys

from .conftest import REPO


def test_readme_example_output_is_generated_by_the_tool():
    out = subprocess.run(
        [sys.executable, "scripts/update_readme.py", "--check"], cwd=REPO, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr


def test_readme_set_up_commands_match_ci():
    readme = (REPO / "README.md").read_text()
    ci = (REPO / ".ci" / "run").read_text()
    test_command = "python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[test,interpret]' && pytest"
    assert test_command in readme
    assert test_command in ci
    assert "pip install . && memmodel compare --n 4096 --d 768" in readme
