"""Options shared by several commands, defined once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from ..workload import DTYPE_BYTES

F = TypeVar("F", bound=Callable[..., Any])

POSITIVE = click.IntRange(min=1)


def gpu_option(default: str | None = "a100", multiple: bool = False) -> Callable[[F], F]:
    return click.option(
        "--gpu",
        default=default if not multiple else None,
        multiple=multiple,
        metavar="NAME|FILE",
        help="Hardware profile: a bundled or user profile name (see 'memmodel hardware list') "
        f"or a path to a YAML file.{f' Default: {default}.' if default else ''}",
    )


def workload_options(func: F) -> F:
    options = [
        click.option("--n", "n", type=POSITIVE, required=True, help="Sequence length N (query length)."),
        click.option("--d", "d", type=POSITIVE, required=True, help="Head dimension d."),
        click.option("--batch", type=POSITIVE, default=1, show_default=True, help="Batch size B."),
        click.option("--heads", type=POSITIVE, default=1, show_default=True, help="Attention heads H."),
        click.option(
            "--dtype",
            type=click.Choice(list(DTYPE_BYTES)),
            default="fp32",
            show_default=True,
            help="Element type of Q, K, V, S, P, O (l, m, logsumexp stay fp32).",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def format_option(choices: tuple[str, ...] = ("table", "json", "csv")) -> Callable[[F], F]:
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(choices),
        default=choices[0],
        show_default=True,
        help="Output format: a table for people; JSON or CSV on stdout for programs.",
    )
