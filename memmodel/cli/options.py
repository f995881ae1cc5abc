"""Options shared by several commands, defined once."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar

import click

from ..implementations import CHOICES
from ..workload import DTYPE_BYTES

F = TypeVar("F", bound=Callable[..., Any])

#: The largest value an integer option takes. Byte and FLOP counts are exact Python ints at
#: any size, but no GPU holds a dimension past int64, and times (floats) must stay finite.
MAX_INT = 2**63 - 1


class PositiveInt(click.IntRange):
    """An integer in [1, 2^63 - 1], refused past that with a message naming the option."""

    name = "integer"

    def __init__(self) -> None:
        super().__init__(min=1)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and len(value.strip()) > 40:  # do not echo a 5000-digit value back
            text = value.strip()
            shown = f"{text[:12]}… ({len(text)} characters)"
            if text.lstrip("+").isdigit():
                self.fail(f"{shown} is larger than {MAX_INT} (2^63 - 1)", param, ctx)
            self.fail(f"{shown} is not a valid integer", param, ctx)
        number = super().convert(value, param, ctx)
        if number > MAX_INT:
            self.fail(f"{number} is larger than {MAX_INT} (2^63 - 1)", param, ctx)
        return number


class FiniteFloatRange(click.FloatRange):
    """click's FloatRange refusing ``nan`` (which passes any range: every comparison with it is false)."""

    name = "number"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if math.isnan(number):
            self.fail(f"{value!r} is not a number; expected {self._describe_range()}", param, ctx)
        return number


POSITIVE = PositiveInt()


def gpu_option(default: str | None = "a100", multiple: bool = False) -> Callable[[F], F]:
    return click.option(
        "--gpu",
        default=default if not multiple else None,
        multiple=multiple,
        metavar="NAME|FILE",
        shell_complete=complete_profile,
        help="Hardware profile: a bundled or user profile name (see 'memmodel hardware list') "
        f"or a path to a YAML file.{f' Default: {default}.' if default else ''}",
    )


def complete_profile(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
    """Shell completion: profile names, or files once the word looks like a path."""
    from click.shell_completion import CompletionItem

    from ..hardware import available, is_path

    if is_path(incomplete) or incomplete.startswith("."):
        return [CompletionItem(incomplete, type="file")]
    return [CompletionItem(name) for name in available() if name.startswith(incomplete.lower())]


def workload_options(func: F | None = None, *, n: int | None = None, d: int | None = None) -> Any:
    """--n, --d, --batch, --heads, --dtype, --kv-heads, --n-kv, --causal, --dropout.

    Bare (``@workload_options``) --n and --d are required; ``@workload_options(n=4096,
    d=768)`` makes them optional with those defaults.
    """
    if func is None:
        return lambda f: _workload_options(f, n, d)
    return _workload_options(func, n, d)


def _size_option(flag: str, name: str, default: int | None, help_text: str) -> Callable[[F], F]:
    if default is None:
        return click.option(flag, name, type=POSITIVE, required=True, help=help_text)
    return click.option(flag, name, type=POSITIVE, default=default, show_default=True, help=help_text)


def _workload_options(func: F, n: int | None, d: int | None) -> F:
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
        click.option(
            "--kv-heads",
            type=POSITIVE,
            default=None,
            help="Key/value heads (GQA/MQA); must divide --heads. Default: --heads.",
        ),
        click.option(
            "--n-kv",
            type=POSITIVE,
            default=None,
            help="Key/value length (KV cache); default --n. Decode: --n 1 --n-kv 32768.",
        ),
        click.option(
            "--causal",
            is_flag=True,
            help="Causal mask: tiled kernels skip masked blocks; standard still writes full S, P.",
        ),
        click.option(
            "--dropout",
            type=FiniteFloatRange(0.0, 1.0, max_open=True),
            default=0.0,
            show_default=True,
            help="Dropout probability on P: extra passes and a mask for standard; none for tiled (RNG regenerated).",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def model_options(func: F) -> F:
    """How to model: tiled variant, blocks, L2, passes. Shared by compare and the roofline."""
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
            help="Rows of Q per block, B_r (default: the implementation's; Algorithm 1's min(⌈M/4d⌉, d) for paper).",
        ),
        click.option(
            "--block-kv",
            type=POSITIVE,
            default=None,
            help="Rows of K/V per block, B_c (default: the implementation's; Algorithm 1's ⌈M/4d⌉ for paper).",
        ),
        click.option(
            "--l2",
            "l2",
            type=click.Choice(["on", "cold", "off"]),
            default="on",
            show_default=True,
            help="L2 reuse: on; cold (each kernel starts with an empty L2, as Nsight Compute measures); "
            "off (the paper's view).",
        ),
        click.option("--backward", is_flag=True, help="Add the backward pass: totals cover the training step."),
        click.option(
            "--splits",
            type=POSITIVE,
            default=None,
            help="Split-KV chunks for fa2 (default: FlashAttention-2's heuristic).",
        ),
        click.option(
            "--ctas-per-sm",
            type=POSITIVE,
            default=None,
            help="Tiled CTAs resident per SM (default: as the tile fits SRAM, at most 2).",
        ),
        click.option(
            "--impl",
            "impl",
            type=click.Choice(list(CHOICES)),
            default="auto",
            show_default=True,
            help="Model the tiled algorithm as this implementation: its tiles and K/V order (unless --block-q/"
            "--block-kv say otherwise), its tensor-core instructions and, where the profile has it, its measured "
            "efficiency. auto: the kernel PyTorch's scaled_dot_product_attention runs for this GPU and dtype; "
            "paper: the FlashAttention paper's algorithm (Algorithm 1's blocks, the dtype's peak).",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def build_workload(kw: dict[str, Any]) -> Any:
    """Pop the workload options out of a command's keyword arguments into a Workload."""
    from ..workload import Workload

    return Workload(
        n=kw.pop("n"),
        d=kw.pop("d"),
        batch=kw.pop("batch"),
        heads=kw.pop("heads"),
        dtype=kw.pop("dtype"),
        kv_heads=kw.pop("kv_heads"),
        n_kv=kw.pop("n_kv"),
        causal=kw.pop("causal"),
        dropout=kw.pop("dropout"),
    )


def pop_model_options(kw: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Pop the model options: ``--impl`` (default ``auto``: the kernel PyTorch would run) and
    the :class:`~memmodel.implementations.Options` fields. Give both to
    :func:`memmodel.implementations.options_for` with the workload and each GPU's profile."""
    opts = {k: kw.pop(k) for k in ("tiled", "block_q", "block_kv", "l2", "backward", "splits", "ctas_per_sm")}
    return kw.pop("impl", None) or "auto", opts


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


def require_module(module: str, purpose: str, *, extra: str) -> None:
    """Fail at once, exit 1, if an optional dependency is missing (before any long work)."""
    import importlib

    from ..errors import MissingDependency

    try:
        importlib.import_module(module)
    except ImportError:
        raise MissingDependency(
            f"{purpose} needs {module}, which is not installed: pip install 'memmodel[{extra}]'"
        ) from None
