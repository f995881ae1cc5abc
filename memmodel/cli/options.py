"""Options shared by several commands, defined once, and the rules every option follows.

* An option that takes one value refuses to be given twice (``--n 4096 --n 8192`` is a usage
  error, exit 2), instead of keeping the last: :class:`Option`, used through :func:`option`
  and by every command (:class:`Command`).
* Choices are case-insensitive (``--dtype BF16``, ``--format JSON``): :func:`choice`.
* A list of GPUs is written ``--gpu a,b`` or ``--gpu a --gpu b``, in every command that
  takes several: :func:`gpu_list_option`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click

from ..hardware.schema import DEFAULT_GPU
from ..host import TIMINGS
from ..implementations import CHOICES, CLOCK_MODES
from ..workload import DTYPE_BYTES, FP8_KV_DTYPES

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


class SplitsParam(click.ParamType):
    """``--splits``: a positive integer or ``auto`` (the implementation's own heuristic)."""

    name = "integer|auto"

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "N|auto"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            return value
        text = str(value).strip()
        if text.lower() == "auto":
            return "auto"
        if not text.lstrip("+").isdigit() or int(text) < 1:
            shown = f"{text[:12]}… ({len(text)} characters)" if len(text) > 40 else repr(text)
            self.fail(
                f"{shown} is neither a positive integer nor auto (the implementation's own heuristic)", param, ctx
            )
        return POSITIVE.convert(text, param, ctx)


SPLITS = SplitsParam()


class Option(click.Option):
    """A click option that refuses to be given twice when it takes one value.

    click keeps the last of ``--n 4096 --n 8192``; here the parser collects every occurrence
    and :meth:`consume_value` refuses more than one. Flags (given twice they mean the same),
    counts and options that take several values (``multiple=True``) behave as in click.
    """

    def _single(self) -> bool:
        return not (self.multiple or self.count or self.is_flag) and self.nargs == 1

    def add_to_parser(self, parser: Any, ctx: click.Context) -> None:
        if not self._single():
            super().add_to_parser(parser, ctx)
            return
        parser.add_option(obj=self, opts=self.opts, dest=self.name, action="append", nargs=self.nargs)

    def consume_value(self, ctx: click.Context, opts: Any) -> Any:
        value, source = super().consume_value(ctx, opts)
        if self._single() and isinstance(value, list):
            if len(value) > 1:
                shown = ", then ".join(repr(v) if v == "" else str(v) for v in value[:3])
                hint = getattr(ctx.command, "repeat_hint", "")
                raise click.UsageError(
                    f"Option '{self.opts[0]}' given {len(value)} times ({shown}): give it once{hint}", ctx
                )
            value = value[0]
        return value, source


#: ``@option(...)``: ``click.option`` with :class:`Option` (refuses a single value given twice).
option = functools.partial(click.option, cls=Option)


class Command(click.Command):
    """A command whose options follow this module's rules, and whose "no such option" error
    says where the group's own options (``-q``, ``--debug``) go."""

    #: appended to "give it once" when a single-value option is repeated
    repeat_hint = ""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:  # a plain click.option here would silently keep the last value
            if type(param) is click.Option and not param.is_flag:
                raise TypeError(f"{self.name} {param.opts[0]}: declare it with memmodel.cli.options.option")

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.NoSuchOption as exc:
            if exc.option_name in GROUP_OPTIONS:
                name = exc.option_name
                raise click.UsageError(
                    f"No such option '{name}' for {self.name}: it is an option of memmodel itself, "
                    f"given before the command (memmodel {name} {self.name} ...)",
                    ctx,
                ) from None
            raise


#: Options of the ``memmodel`` group, given before the command.
GROUP_OPTIONS = ("-q", "--quiet", "--debug", "--version")


class WorkloadCommand(Command):
    """compare and roofline: one workload at a time; sweep takes lists."""

    repeat_hint = " (to model several values, use 'memmodel sweep', which takes lists and ranges)"


class Group(click.Group):
    """A command group whose commands are :class:`Command`."""

    command_class = Command


def choice(choices: Sequence[str]) -> click.Choice:
    """A case-insensitive choice: ``BF16`` and ``bf16`` are both ``bf16``."""
    return click.Choice(list(choices), case_sensitive=False)


def split_list(values: Sequence[str] | str | None) -> tuple[str, ...]:
    """``("a,b", "c")`` -> ``("a", "b", "c")``: repeated and comma-separated values, blanks
    dropped, duplicates dropped, order kept."""
    if values is None:
        return ()
    items = [values] if isinstance(values, str) else list(values)
    return tuple(dict.fromkeys(part.strip() for v in items for part in str(v).split(",") if part.strip()))


def _gpu_list(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    gpus = split_list(value)
    if value and not gpus:
        raise click.BadParameter("give a profile name or a YAML path", ctx, param)
    return gpus


def gpu_list_option(help_extra: str = "") -> Callable[[F], F]:
    """``--gpu``: one or more profiles, repeated or comma-separated (the same rule everywhere).
    The command receives a tuple, empty when none was given (then :data:`DEFAULT_GPU`)."""
    return option(
        "--gpu",
        multiple=True,
        callback=_gpu_list,
        metavar="NAME|FILE[,...]",
        shell_complete=complete_profile,
        help="Hardware profile: a bundled or user profile name (see 'memmodel hardware list') or a path to a YAML "
        f"file; several GPUs repeated (--gpu a100 --gpu h200) or comma-separated (--gpu a100,h200).{help_extra} "
        f"Default: {DEFAULT_GPU}.",
    )


def complete_profile(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
    """Shell completion: profile names, or files once the word looks like a path."""
    from click.shell_completion import CompletionItem

    from ..hardware import available, is_path

    head, comma, word = incomplete.rpartition(",")  # --gpu a100,h1: complete the last of the list
    if is_path(word) or word.startswith("."):
        return [CompletionItem(incomplete, type="file")]
    return [CompletionItem(head + comma + name) for name in available() if name.startswith(word.lower())]


def workload_options(func: F | None = None, *, n: int | None = None, d: int | None = None) -> Any:
    """--n, --d, --model, --batch, --heads, --dtype, --kv-heads, --n-kv, --causal, --window, --dropout.

    Bare (``@workload_options``) --n is required, and --d unless --model gives it;
    ``@workload_options(n=4096, d=768)`` makes them optional with those defaults (--model's
    head dimension before d's). :func:`build_workload` turns them into a Workload.
    """
    if func is None:
        return lambda f: _workload_options(f, n, d)
    return _workload_options(func, n, d)


MODEL_HELP = (
    "Take --heads, --kv-heads and --d from a model: a bundled name (llama-3-8b, llama-3-70b, llama-3.1-405b, "
    "mistral-7b, mixtral-8x7b, qwen2.5-7b, gemma-2-9b, gpt2, ...; see docs/models.md) or a Hugging Face "
    "config.json. Options given explicitly win."
)


KV_DTYPE_HELP = (
    "An FP8 K/V cache under fp16/bf16 Q and O: K and V read at 1 byte (fp8 is e4m3; fp8_e5m2), per-tensor scales. "
    "Kernels that take no fp8 K/V (PyTorch's SDPA) run after a cast. Default: --dtype."
)


def kv_dtype_option(func: F) -> F:
    return option("--kv-dtype", "kv_dtype", type=choice(list(FP8_KV_DTYPES)), default=None, help=KV_DTYPE_HELP)(func)


def model_option(func: F) -> F:
    return option("--model", "model", default=None, metavar="NAME|FILE", help=MODEL_HELP)(func)


def _workload_options(func: F, n: int | None, d: int | None) -> F:
    options = [
        option(
            "--n",
            "n",
            type=POSITIVE,
            default=None,
            help="Sequence length N (query length). Required unless --seq-lens gives it.",
        )
        if n is None
        else option("--n", "n", type=POSITIVE, default=n, show_default=True, help="Sequence length N (query length)."),
        option(
            "--d",
            "d",
            type=POSITIVE,
            default=None,
            help="Head dimension d."
            + (" Required unless --model gives it." if d is None else f" Default: --model's, else {d}."),
        ),
        option(
            "--d-v",
            "d_v",
            type=POSITIVE,
            default=None,
            help="Head dimension of V (and O, dO, dV) where it differs from d (MLA prefill: --d 192 --d-v 128). "
            "Default: --model's, else --d.",
        ),
        model_option,
        option("--batch", type=POSITIVE, default=1, show_default=True, help="Batch size B."),
        option("--heads", type=POSITIVE, default=None, help="Attention heads H. Default: --model's, else 1."),
        option(
            "--dtype",
            type=choice(list(DTYPE_BYTES)),
            default="fp32",
            show_default=True,
            help="Element type of Q, K, V, S, P, O (l, m, logsumexp stay fp32; fp8: e4m3 Q, K, V, O in bf16 but for cuDNN's fp8 graph).",
        ),
        kv_dtype_option,
        option(
            "--kv-heads",
            type=POSITIVE,
            default=None,
            help="Key/value heads (GQA/MQA); must divide --heads. Default: --model's, else --heads.",
        ),
        option(
            "--n-kv",
            type=POSITIVE,
            default=None,
            help="Key/value length (KV cache); default --n. Decode: --n 1 --n-kv 32768.",
        ),
        option(
            "--causal",
            is_flag=True,
            help="Causal mask: tiled kernels skip masked blocks; standard still writes full S, P.",
        ),
        option(
            "--window",
            type=POSITIVE,
            default=None,
            metavar="W",
            help="Sliding window: each query sees itself and the W − 1 keys before it (implies --causal); "
            "tiled kernels visit only the blocks inside it. Default: --model's where every layer has one.",
        ),
        option(
            "--chunk",
            type=POSITIVE,
            default=None,
            metavar="C",
            help="Chunked local attention (Llama 4's attention_chunk_size): each query sees the keys of its own "
            "C-token chunk up to itself (implies --causal). A prefill runs as the chunks packed into one row "
            "(varlen kernels), a one-token decode over its chunk's keys.",
        ),
        option(
            "--dropout",
            type=FiniteFloatRange(0.0, 1.0, max_open=True),
            default=0.0,
            show_default=True,
            help="Dropout probability on P: extra passes and a mask for standard; none for tiled (RNG regenerated).",
        ),
        seq_lens_option,
        page_size_option,
    ]
    for decorate in reversed(options):
        func = decorate(func)
    return func


PAGE_SIZE_HELP = (
    "Paged KV cache: each request's K/V in pages of P tokens scattered in a pool, read through a block table "
    "(serving engines: vLLM 16, SGLang 1 or 64). Decode: --n 1 --n-kv L; chunked prefill: --n new tokens, "
    "--n-kv cached + new, --causal. Taken by --impl flashinfer (any P) and flex (powers of two from 16)."
)


def page_size_option(func: F) -> F:
    return option("--page-size", "page_size", type=POSITIVE, default=None, metavar="P", help=PAGE_SIZE_HELP)(func)


TIMING_HELP = (
    "What a predicted time is. kernel (the default: the GPU's own time, what profilers and benchmark loops "
    "report): the kernels queued back to back; call: what a user's timer sees around one call (CUDA events, "
    "synchronising after each call): each op's host dispatch pipelined with the kernels, plus the end event; "
    "queued: a call's share of calls issued back to back without synchronising (the host's time or the kernels', "
    "whichever is longer); graph: one replay of a CUDA graph of the call (no host dispatch). call, queued and "
    "graph need the profile's host figures (host.*, implementations.NAME.call_host: docs/profiles.md)."
)


def timing_option(func: F) -> F:
    """``--timing``: what a predicted time is (:data:`memmodel.host.TIMINGS`), the same in every command."""
    return option(
        "--timing", "timing", type=choice(list(TIMINGS)), default="kernel", show_default=True, help=TIMING_HELP
    )(func)


def model_options(func: F) -> F:
    """How to model: tiled variant, blocks, L2, passes. Shared by compare and the roofline."""
    options = [
        option(
            "--tiled",
            type=choice(["fa1", "fa2"]),
            default="fa2",
            show_default=True,
            help="Tiled algorithm: fa1 (outer loop over K/V: flash-attn v1's kernels, as --impl fa1; with --impl "
            "paper the FlashAttention paper's Algorithm 1) or fa2 (outer loop over Q).",
        ),
        option(
            "--block-q",
            type=POSITIVE,
            default=None,
            help="Rows of Q per block, B_r (default: the implementation's; Algorithm 1's min(⌈M/4d⌉, d) for paper).",
        ),
        option(
            "--block-kv",
            type=POSITIVE,
            default=None,
            help="Rows of K/V per block, B_c (default: the implementation's; Algorithm 1's ⌈M/4d⌉ for paper).",
        ),
        option(
            "--l2",
            "l2",
            type=choice(["on", "cold", "off"]),
            default="on",
            show_default=True,
            help="L2 reuse: on; cold (each kernel starts with an empty L2, as Nsight Compute measures); "
            "off (the paper's view).",
        ),
        option("--backward", is_flag=True, help="Add the backward pass: totals cover the training step."),
        option(
            "--clocks",
            "clocks",
            type=choice(list(CLOCK_MODES)),
            default="benchmark",
            show_default=True,
            help="How long the GPU has been busy, which decides its clocks under the power limit: benchmark (run "
            "back to back as validate and the FlashAttention benchmarks time it: a loop long enough slows to the "
            "measured sustained clocks); boost (a short burst); sustained (a long steady loop, e.g. training).",
        ),
        option(
            "--splits",
            type=SPLITS,
            default=None,
            help="K/V splits of the forward (split-KV): a count, or auto for the implementation's own heuristic "
            "(FA4: flash_attn_func's num_splits=0; its default, 1, never splits). Default: FlashAttention-2's "
            "heuristic for fa2 and sdpa-flash, none for fa4.",
        ),
        option(
            "--ctas-per-sm",
            type=POSITIVE,
            default=None,
            help="Tiled CTAs resident per SM (default: as the tile fits SRAM, at most 2).",
        ),
        option(
            "--impl",
            "impl",
            type=choice(CHOICES),
            default="auto",
            show_default=True,
            help="Model the tiled algorithm as this implementation: its tiles and K/V order (unless --block-q/"
            "--block-kv say otherwise), its tensor-core instructions and, where the profile has it, its measured "
            "efficiency. auto: the kernel PyTorch's scaled_dot_product_attention runs for this GPU and dtype; "
            "fa1: FlashAttention-1 as flash-attn v1's kernels ran (implies --tiled fa1); "
            "paper: the FlashAttention paper's algorithm (Algorithm 1's blocks, the dtype's peak).",
        ),
        timing_option,
    ]
    for decorate in reversed(options):
        func = decorate(func)
    return func


def apply_model(model: str | None, heads: Any, kv_heads: Any, d: Any) -> tuple[Any, Any, Any]:
    """``--model``'s heads, KV heads and head dimension where the options leave them out (None);
    says on stderr what was taken from where, and what the model has that memmodel does not model."""
    return model_shape(model, heads, kv_heads, d)[:3]


def model_shape(model: str | None, heads: Any, kv_heads: Any, d: Any, window: Any = None) -> tuple[Any, Any, Any, Any]:
    """:func:`apply_model` and the window: ``--model``'s where every layer has one and
    ``--window`` is not given."""
    return model_attention(model, heads, kv_heads, d, window)[:4]


def model_attention(
    model: str | None,
    heads: Any,
    kv_heads: Any,
    d: Any,
    window: Any = None,
    *,
    d_v: Any = None,
    n: Any = None,
    n_kv: Any = None,
) -> tuple[Any, Any, Any, Any, Any]:
    """:func:`model_shape` and V's head dim: (heads, kv_heads, d, window, d_v), ``--model``'s
    where not given; an MLA model's form by ``n`` and ``n_kv`` (:meth:`ModelShape.attention`)."""
    if not model:
        return heads, kv_heads, d, window, d_v
    from ..model_shapes import load_model
    from . import terminal

    shape = load_model(model)
    terminal.note(f"--model {shape.summary()}")
    attention = shape.attention(n, n_kv)
    if attention.note:
        terminal.note(f"--model {shape.name}: {attention.note}")
    elif shape.note:
        terminal.note(f"--model {shape.name}: {shape.note}")
    if shape.window is not None and window is None:
        terminal.note(
            f"--model {shape.name}: every layer attends within a {shape.window}-token sliding window: --window {shape.window}"
        )
        window = shape.window
    return (
        attention.heads if heads is None else heads,
        attention.kv_heads if kv_heads is None else kv_heads,
        attention.d if d is None else d,
        window,
        attention.d_v if d_v is None else d_v,
    )


SEQ_LENS_HELP = (
    "A packed row of documents, each attending only within itself (causal within each with --causal): "
    "lengths comma-separated (8192,4096,2048) or @FILE (one a line, or comma-separated). N is their sum; "
    "batch 1. Modelled as FlashAttention-2's varlen kernels (--impl sdpa-flash) or --impl paper."
)


def seq_lens_option(func: F) -> F:
    return option("--seq-lens", "seq_lens", default=None, metavar="L1,L2,...|@FILE", help=SEQ_LENS_HELP)(func)


def parse_seq_lens(text: str | None) -> tuple[int, ...] | None:
    """``--seq-lens``: lengths comma-separated, or ``@FILE`` holding them one a line or
    comma-separated (blank lines and ``#`` comments skipped)."""
    from ..errors import WorkloadError

    if text is None:
        return None
    source = "--seq-lens"
    if text.startswith("@"):
        path = text[1:]
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        except OSError as exc:
            raise WorkloadError(f"--seq-lens @{path}: cannot read it ({exc.strerror or exc})") from None
        source = f"--seq-lens @{path}"
    items = [x.strip() for line in text.splitlines() for x in line.split("#")[0].split(",")]
    items = [x for x in items if x]
    if not items:
        raise WorkloadError(f"{source}: no lengths given")
    out = []
    for x in items:
        if not (x.isascii() and x.isdigit()) or int(x) < 1:
            raise WorkloadError(f"{source}: {x!r} is not a positive whole number of tokens")
        out.append(int(x))
    return tuple(out)


def packed_n(n: int | None, seq_lens: tuple[int, ...] | None, batch: int) -> int | None:
    """--n as a packed row has it: the sum of --seq-lens (--n, if given, must equal it; batch 1)."""
    from ..errors import WorkloadError

    if seq_lens is None:
        return n
    total = sum(seq_lens)
    ctx = click.get_current_context(silent=True)
    if ctx is not None and ctx.get_parameter_source("n") == click.core.ParameterSource.DEFAULT:
        n = None  # a command's default length (roofline's) gives way to the documents'
    if n is not None and n != total:
        raise WorkloadError(f"--n {n} is not the sum of --seq-lens ({total}): give one, or both equal")
    if batch != 1:
        raise WorkloadError(f"--seq-lens packs its documents into one row: --batch must be 1 (got {batch})")
    return total


def missing_n() -> click.ClickException:
    """Click's own error for a missing --n (it is required unless --seq-lens gives it)."""
    ctx = click.get_current_context(silent=True)
    param = next((p for p in ctx.command.params if p.name == "n"), None) if ctx is not None else None
    return click.MissingParameter(ctx=ctx, param=param)


def build_workload(kw: dict[str, Any], default_d: int | None = None) -> Any:
    """Pop the workload options (and ``--model``) out of a command's keyword arguments into a
    Workload; ``default_d`` is the head dimension when neither --d nor --model gives one."""
    from ..workload import Workload

    seq_lens = parse_seq_lens(kw.pop("seq_lens", None))
    kw["n"] = packed_n(kw.get("n"), seq_lens, kw["batch"])
    if kw["n"] is None:
        raise missing_n()
    given = kw.pop("window", None)
    heads, kv_heads, d, window, d_v = model_attention(
        kw.pop("model", None),
        kw.pop("heads"),
        kw.pop("kv_heads"),
        kw.pop("d"),
        given,
        d_v=kw.pop("d_v", None),
        n=kw["n"],
        n_kv=kw.get("n_kv"),
    )
    windowed = window is not None  # a window, the model's or the option's, is causal
    if given is None and window is not None and window >= (kw["n_kv"] or kw["n"]):
        window = None  # the model's window covers every key: full causal attention
    d = d if d is not None else default_d
    if d is None:
        raise click.UsageError(
            "Missing option '--d' (the head dimension; or --model NAME to take it from a model).",
            click.get_current_context(silent=True),
        )
    workload = Workload(
        n=kw.pop("n"),
        d=d,
        batch=kw.pop("batch"),
        heads=heads if heads is not None else 1,
        dtype=kw.pop("dtype"),
        kv_dtype=kw.pop("kv_dtype", None),
        kv_heads=kv_heads,
        n_kv=kw.pop("n_kv"),
        causal=kw.pop("causal") or windowed,
        dropout=kw.pop("dropout"),
        window=window,
        seq_lens=seq_lens,
        d_v=d_v,
        page_size=kw.pop("page_size", None),
    )
    chunk = kw.pop("chunk", None)
    if chunk is None:
        return workload
    from ..workload import chunked
    from . import terminal

    if window is not None or seq_lens is not None:
        from ..errors import WorkloadError

        other = "--seq-lens" if seq_lens is not None else "a sliding window (--window, or the model's)"
        raise WorkloadError(f"--chunk with {other} is not modelled: chunked attention is its own mask; give one")
    workload, line = chunked(workload, chunk)
    terminal.note(f"--{line}")
    return workload


def pop_model_options(kw: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Pop the model options: ``--impl`` (default ``auto``: the kernel PyTorch would run) and
    the :class:`~memmodel.options.Options` fields. Give both to
    :func:`memmodel.options.options_for` with the workload and each GPU's profile."""
    opts = {
        k: kw.pop(k)
        for k in ("tiled", "block_q", "block_kv", "l2", "backward", "splits", "ctas_per_sm", "clocks", "timing")
    }
    return kw.pop("impl", None) or "auto", opts


def plot_option(func: F) -> F:
    return option(
        "--plot",
        "plot",
        type=click.Path(path_type=str, readable=False),
        default=None,
        metavar="FILE",
        help="Also draw the chart to FILE; the suffix picks the format: .png, .svg or .pdf (needs matplotlib: "
        "pip install memmodel[plot]). An existing FILE is replaced only with --force.",
    )(func)


def force_option(func: F) -> F:
    return option(
        "--force",
        is_flag=True,
        help="Replace output files that exist (only regular files: never a link, a device or a folder).",
    )(func)


def check_outputs(*, force: bool, plot: str | None = None, **files: str | None) -> None:
    """Before any work: every output file (``files``: option name -> path; ``-`` is stdout)
    could be written under the one rule of :func:`memmodel.fileio.check_writable`, and the
    plot's suffix and matplotlib are there. Two outputs may not share a path."""
    import os

    from ..errors import MemmodelError
    from ..fileio import check_writable

    paths = {name: path for name, path in files.items() if path not in (None, "-")}
    if plot is not None:
        from ..report.plots import check_plot_path

        check_plot_path(plot)
        paths["--plot"] = plot
    seen: dict[str, str] = {}
    for name, path in paths.items():
        assert path is not None
        key = os.path.realpath(path)
        if key in seen:
            raise MemmodelError(f"{seen[key]} and {name} name the same file ({path}): give them different files")
        seen[key] = name
        check_writable(path, force=force)


#: What each output format is, for the help of --format.
FORMATS = {
    "table": "a table for people",
    "json": "JSON on stdout",
    "csv": "CSV on stdout",
    "jsonl": "JSON Lines on stdout (one object per line)",
}


def format_option(
    choices: tuple[str, ...] = ("table", "json", "csv"), *, default: str | None = "", **described: str
) -> Callable[[F], F]:
    """``--format`` (case-insensitive), its help listing what each choice prints;
    ``described`` gives or overrides a choice's description."""
    text = "; ".join(f"{c}: {described.get(c) or FORMATS[c]}" for c in choices)
    return option(
        "--format",
        "fmt",
        type=choice(choices),
        default=choices[0] if default == "" else default,
        show_default=default == "",
        help=f"Output format. {text}.",
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


def echo_predictions(gpu: str | None, items: Sequence[Any], line: Callable[[Any, Any], str]) -> None:
    """``validate --predict``: the header naming profile and version, then one line per case
    (``line(case, profile)``), the form every committed ``*-predictions.txt`` has."""
    from .. import __version__
    from ..hardware import load_profile

    if gpu is None:
        raise click.UsageError("--predict needs --gpu: the profile to predict with (e.g. --gpu h200)")
    profile = load_profile(gpu)
    click.echo(
        f"# predicted with profile {profile.name} ({profile.origin} {profile.full_name}), memmodel {__version__}"
    )
    for item in items:
        click.echo(line(item, profile))


def refuse_same_names(profiles: Sequence[Any], command: str) -> None:
    """Rows of several GPUs carry each GPU's name: two profiles of one name (a bundled one and
    a user's copy, say) would be told apart by nothing, so they are refused (``compare`` tells
    them apart by their files instead)."""
    from ..errors import ProfileError

    seen: dict[str, Any] = {}
    for p in profiles:
        other = seen.setdefault(p.name, p)
        if other is not p and other.path != p.path:
            where = [str(x.path) if x.origin != "bundled" else "bundled" for x in (other, p)]
            raise ProfileError(
                f"--gpu: two profiles are named {p.name!r} ({' and '.join(where)}), which {command}'s rows would "
                "not tell apart: give one another name (name: in its YAML)"
            )
