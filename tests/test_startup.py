"""What `memmodel compare` loads at start-up: only its own command."""

from __future__ import annotations

import os
import subprocess
import sys

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
    for other in ("calibrate", "hardware", "models", "roofline", "sweep", "validate"):
        assert f"memmodel.cli.{other}" not in loaded, loaded


def test_every_command_is_listed_and_loads_on_lookup(run):
    from memmodel.cli import COMMANDS, cli

    assert list(cli.commands) == sorted(COMMANDS) and len(cli.commands) == 7
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
