"""The ``memmodel`` command line. Commands parse options, call the library, and render.

Every failure leaves through :meth:`MemmodelGroup.main`: one line on stderr, exit code 2
for bad input, 1 for runtime failures, 130 for Ctrl-C; ``--debug`` or ``MEMMODEL_DEBUG=1``
re-raises so the traceback can go in a bug report.
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any

import click

from .. import __version__
from ..errors import MemmodelError


def _leading_options(args: list[str] | None) -> list[str]:
    """The group's own options: the arguments before the command name (``--debug`` given as
    an option's value, ``--l2 --debug``, is not a request for a traceback)."""
    argv = sys.argv[1:] if args is None else list(args)
    out = []
    for a in argv:
        if not a.startswith("-") or a == "--":
            break
        out.append(a)
    return out


def _debug_requested(args: list[str] | None) -> bool:
    return "--debug" in _leading_options(args) or os.environ.get("MEMMODEL_DEBUG", "") not in ("", "0")


class MemmodelGroup(click.Group):
    """A click group whose errors are one line, whatever raised them."""

    def main(self, args: Any = None, prog_name: str | None = None, **extra: Any) -> Any:  # type: ignore[override]
        from . import terminal

        argv = list(args) if args is not None else None
        prog_name = prog_name or "memmodel"
        debug = _debug_requested(argv)
        terminal.set_quiet(False)  # not left over from an earlier call in this process; cli() sets --quiet
        try:
            with warnings.catch_warnings():
                # numpy reports overflow and invalid values as warnings: make them errors, so that
                # no NaN or inf reaches an output and no warning text breaks the one-line rule
                warnings.simplefilter("error", RuntimeWarning)
                result = super().main(args=argv, prog_name=prog_name, standalone_mode=False, **extra)
        except click.exceptions.Exit as exc:
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            if debug:
                raise
            ctx = getattr(exc, "ctx", None)
            where = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
            terminal.error(f"{exc.format_message()}{where}")
            sys.exit(exc.exit_code)
        except click.exceptions.Abort:
            terminal.error("interrupted")
            sys.exit(130)
        except KeyboardInterrupt:
            terminal.error("interrupted")
            sys.exit(130)
        except MemmodelError as exc:
            if debug:
                raise
            terminal.error(str(exc))
            sys.exit(exc.exit_code)
        except (OverflowError, FloatingPointError, RuntimeWarning) as exc:
            if debug:
                raise
            terminal.error(f"a result is too large to compute ({exc}); use smaller sizes")
            sys.exit(2)
        except MemoryError as exc:
            if debug:
                raise
            why = str(exc).split(" for an array", 1)[0] if str(exc) else "out of memory"
            terminal.error(f"the sizes asked for need more memory than this machine has ({why}); use smaller sizes")
            sys.exit(2)
        except BrokenPipeError:
            sys.exit(0)
        except OSError as exc:  # the system refused: a full disk, stdout on /dev/full, ...
            if debug:
                raise
            where = f"{exc.filename}: " if exc.filename else ""
            terminal.error(f"{where}{exc.strerror or exc}")
            sys.exit(1)
        except Exception as exc:  # the one place that turns bugs into a line
            if debug:
                raise
            terminal.error(f"internal error: {exc.__class__.__name__}: {exc} (run again with --debug and report it)")
            sys.exit(1)
        if isinstance(result, int) and result:
            sys.exit(result)
        return result


@click.group(cls=MemmodelGroup, invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="memmodel")
@click.option("--debug", is_flag=True, help="Show the full traceback of any error (or set MEMMODEL_DEBUG=1).")
@click.option(
    "--quiet",
    "-q",
    is_flag=True,
    help="Only results on stdout and errors on stderr: no progress bars, warnings or notes.",
)
@click.pass_context
def cli(ctx: click.Context, debug: bool, quiet: bool) -> None:
    """Model the memory traffic of attention on a GPU: bytes per level, FLOPs and time,
    for standard and FlashAttention-style (tiled) algorithms."""
    from . import terminal

    terminal.set_quiet(quiet)
    if ctx.invoked_subcommand is None:
        click.echo(ctx.get_help())


#: Each command and where it lives (module of this package, attribute): a command's module is
#: imported when the command is run or listed, so ``memmodel compare`` loads no other command.
COMMANDS = {
    "calibrate": ("calibrate", "calibrate_cmd"),
    "compare": ("compare", "compare_cmd"),
    "hardware": ("hardware", "hardware_group"),
    "models": ("models", "models_cmd"),
    "roofline": ("roofline", "roofline_cmd"),
    "sweep": ("sweep", "sweep_cmd"),
    "trace": ("trace", "trace_cmd"),
    "validate": ("validate", "validate_cmd"),
}


class _Commands(dict):  # type: ignore[type-arg]
    """``cli.commands``: a command is imported the first time it is looked up (by name, or all
    of them by ``items()``, ``values()``); names and ``in`` need no import."""

    def __missing__(self, name: str) -> click.Command:
        if name not in COMMANDS:
            raise KeyError(name)
        import importlib

        module, attr = COMMANDS[name]
        command: click.Command = getattr(importlib.import_module(f"{__name__}.{module}"), attr)
        self[name] = command
        return command

    def get(self, name: str, default: Any = None) -> Any:
        return self[name] if name in self else default

    def __contains__(self, name: object) -> bool:
        return dict.__contains__(self, name) or name in COMMANDS

    def __iter__(self) -> Any:
        return iter(sorted({*dict.keys(self), *COMMANDS}))

    def __len__(self) -> int:
        return len({*dict.keys(self), *COMMANDS})

    def keys(self) -> Any:
        return list(self)

    def values(self) -> Any:
        return [self[name] for name in self]

    def items(self) -> Any:
        return [(name, self[name]) for name in self]


cli.commands = _Commands(cli.commands)


def main() -> None:
    """Console-script entry point."""
    cli.main(prog_name="memmodel")
