"""What `memmodel compare` loads at start-up: only its own command."""

from __future__ import annotations

import os
import subprocess
import sys

from hypothesis import given
from hypothesis import strategies as st

from .conftest import REPO


def test_compare_imports_no_other_command():
    code = (
        "import sys\n"
        "from memmodel.cli import cli\n"
        "try:\n"
        "    cli.main(['compare', '--n', '4096', '--d', '768'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('memmodel.cli.')), file=sys.stderr)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    loaded = eval(r.stderr.strip().splitlines()[-1])
    assert "memmodel.cli.compare" in loaded
    for other in ("calibrate", "hardware", "models", "roofline", "sweep", "trace", "validate"):
        assert f"memmodel.cli.{other}" not in loaded, loaded


def test_every_command_is_listed_and_loads_on_lookup(run):
    from memmodel.cli import COMMANDS, cli

    assert list(cli.commands) == sorted(COMMANDS) and len(cli.commands) == 8
    assert all(name in cli.commands for name in COMMANDS) and "nonesuch" not in cli.commands
    for name in COMMANDS:
        assert cli.commands[name].name == name and cli.commands.get(name) is cli.commands[name]
    assert cli.commands.get("nonesuch") is None
    r = run("--help")
    listed = [line.split()[0] for line in r.stdout.split("Commands:")[1].splitlines() if line.strip()]
    assert listed == sorted(COMMANDS)
    r = run("nonesuch")
    assert r.exit_code == 2 and "No such command 'nonesuch'" in r.stderr


def test_walking_the_commands_loads_them_all():
    from memmodel.cli import COMMANDS, cli

    items = dict(cli.commands.items())
    assert sorted(items) == sorted(COMMANDS) == list(cli.commands.keys())
    assert [c.name for c in cli.commands.values()] == sorted(COMMANDS)
    assert "list" in items["hardware"].commands  # a group's own subcommands come with it


def test_parsed_profiles_are_current():
    """Every bundled profile has a parsed copy made of its exact bytes (else start-up parses
    the YAML: correct, ~10 ms slower); scripts/update_profile_cache.py writes them."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("update_profile_cache", REPO / "scripts" / "update_profile_cache.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.stale() == []


def test_a_parsed_copy_is_the_yaml_and_is_used_only_for_its_own_bytes(tmp_path):
    import yaml

    from memmodel.hardware import load_file
    from memmodel.hardware.load import PARSED_DIR, _parsed

    path = PARSED_DIR.parent / "h200.yaml"
    text = path.read_text(encoding="utf-8")
    data = _parsed(path, text)
    # the same values of the same types (repr tells 128 from 128.0), int keys of curves kept
    assert data is not None and repr(data) == repr(yaml.load(text, Loader=yaml.CSafeLoader))
    assert set(data["kernels"]["softmax"]["bandwidth"]["value"]) >= {128, 4096}
    assert _parsed(path, text + "\n") is None  # an edited file: its YAML is parsed
    copy = tmp_path / "h200.yaml"
    copy.write_text(text.replace("full_name: NVIDIA H200", "full_name: NVIDIA H200 (mine)", 1), encoding="utf-8")
    assert _parsed(copy, copy.read_text(encoding="utf-8")) is None  # only the bundled folder's files
    assert "(mine)" in load_file(copy).full_name


def test_a_damaged_parsed_copy_falls_back_to_the_yaml(tmp_path, monkeypatch):
    import memmodel.hardware.load as load

    folder = tmp_path / "profiles"
    (folder / "_parsed").mkdir(parents=True)
    text = (load.PARSED_DIR.parent / "a100.yaml").read_text(encoding="utf-8")
    (folder / "a100.yaml").write_text(text, encoding="utf-8")
    monkeypatch.setattr(load, "PARSED_DIR", folder / "_parsed")
    assert load._parsed(folder / "a100.yaml", text) is None  # no copy
    (folder / "_parsed" / "a100.json").write_text('{"key": ', encoding="utf-8")
    assert load._parsed(folder / "a100.yaml", text) is None  # not JSON
    (folder / "_parsed" / "a100.json").write_text('{"key": "0:0", "data": {}}', encoding="utf-8")
    assert load._parsed(folder / "a100.yaml", text) is None  # made of other bytes


@given(
    text=st.text(alphabet="ab.*_", max_size=12),
    pattern=st.text(alphabet="ab.*_", max_size=8),
)
def test_glob_match_is_fnmatchcase_for_star_patterns(text, pattern):
    import fnmatch

    from memmodel.hardware.derive import glob_match

    assert glob_match(text, pattern) == fnmatch.fnmatchcase(text, pattern)
