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


def workload_options(func: F | None = None, *, n: int | None = None, d: int | None = None) -> Any:
    """--n, --d, --batch, --heads, --dtype. Bare (``@workload_options``) --n and --d are required;
    ``@workload_options(n=4096, d=768)`` makes them optional with those defaults."""

    def decorate(f: F) -> F:
        options = [
            _size_option("--n", "n", n, "Sequence length N (query length)."),
            _size_option("--d", "d", d, "Head dimension d."),
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
            f = option(f)
        return f

    return decorate(func) if func is not None else decorate


def _size_option(flag: str, name: str, default: int | None, help_text: str) -> Callable[[F], F]:
    if default is None:
        return click.option(flag, name, type=POSITIVE, required=True, help=help_text)
    return click.option(flag, name, type=POSITIVE, default=default, show_default=True, help=help_text)


def tiled_options(func: F) -> F:
    """--tiled, --block-q, --block-kv: which tiled algorithm, and its blocks."""
    options = [
        click.option(
            "--tiled",
            type=click.Choice(["fa1", "fa2"]),
            default="fa2",
            show_default=True,
            help="Tiled algorithm: fa1 (paper Algorithm 1, outer loop over K/V) or fa2 (outer loop over Q).",
        ),
        click.option(
            "--block-q",
            type=POSITIVE,
            default=None,
            help="Rows of Q per block, B_r (default: Algorithm 1's min(⌈M/4d⌉, d)).",
        ),
        click.option(
            "--block-kv",
            type=POSITIVE,
            default=None,
            help="Rows of K/V per block, B_c (default: Algorithm 1's ⌈M/4d⌉).",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def plot_option(func: F) -> F:
    return click.option(
        "--plot",
        "plot",
        type=click.Path(dir_okay=False, writable=True, path_type=str),
        default=None,
        metavar="FILE",
        help="Also draw the chart to FILE; the suffix picks the format: .png, .svg or .pdf (needs matplotlib: "
        "pip install memmodel[plot]).",
    )(func)


def format_option(choices: tuple[str, ...] = ("table", "json", "csv")) -> Callable[[F], F]:
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(choices),
        default=choices[0],
        show_default=True,
        help="Output format: a table for people; JSON or CSV on stdout for programs.",
    )
