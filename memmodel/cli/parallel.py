"""``--context-parallel P`` and ``--cp-scheme``: the options and the report of
:mod:`memmodel.parallel`, shared by ``compare`` and ``sweep``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from .options import choice, option

F = TypeVar("F", bound=Callable[..., Any])


def context_parallel_options(func: F) -> F:
    func = option(
        "--ulysses-degree",
        "ulysses_degree",
        type=int,
        default=None,
        metavar="U",
        help="With --cp-scheme hybrid: the GPUs of one Ulysses group (U divides P; the ring runs across the P/U groups).",
    )(func)
    func = option(
        "--cp-scheme",
        "cp_scheme",
        type=choice(["ring", "ulysses", "hybrid"]),
        default=None,
        help="With --context-parallel: ring (K/V blocks passed around a ring, merged by logsumexp; "
        "causal: load-balanced zigzag; the default), ulysses (all-to-all over heads) or hybrid (Ulysses inside "
        "groups of --ulysses-degree GPUs, a ring across the groups).",
    )(func)
    return option(
        "--context-parallel",
        "context_parallel",
        type=int,
        default=None,
        metavar="P",
        help="Split the sequence over P GPUs (context parallelism): per GPU, each step's kernels and bytes, "
        "the bytes sent over the links, compute and link time and their overlap; the time is the wall time.",
    )(func)


#: the most GPUs --context-parallel splits a sequence over (the step's per-GPU ledger is P × P
#: messages: past this a run takes minutes and gigabytes)
MAX_CONTEXT_PARALLEL = 1024


def check_context_parallel(values: Any) -> None:
    """Each P of ``values`` (one or a grid's) is 1 to :data:`MAX_CONTEXT_PARALLEL`, or a usage error."""
    from ..errors import WorkloadError

    for p in [values] if isinstance(values, int) else list(values or ()):
        if p < 1 or p > MAX_CONTEXT_PARALLEL:
            raise WorkloadError(f"--context-parallel must be 1 to {MAX_CONTEXT_PARALLEL} GPUs (got {p})")


def pop_context_parallel(kw: dict[str, Any]) -> tuple[int | None, str, int | None]:
    """(P, scheme, Ulysses degree) from a command's keyword arguments; --cp-scheme or
    --ulysses-degree without P is a usage error."""
    from ..errors import WorkloadError

    p, scheme = kw.pop("context_parallel", None), kw.pop("cp_scheme", None)
    u = kw.pop("ulysses_degree", None)
    if p is None:
        if scheme is not None or u is not None:
            raise WorkloadError(
                f"{'--cp-scheme' if scheme is not None else '--ulysses-degree'} needs --context-parallel P"
            )
        return None, "ring", None
    check_context_parallel(p)
    return p, scheme or "ring", u


def run_compare(
    workload: Any,
    gpus: tuple[str, ...],
    impl: str,
    opts: dict[str, Any],
    p: int,
    scheme: str,
    standard: str,
    fmt: str,
    ulysses_degree: int | None = None,
) -> None:
    from ..errors import WorkloadError
    from ..hardware import DEFAULT_GPU, load_profile
    from ..parallel import context_parallel, to_dict
    from . import terminal

    if len(gpus) > 1:
        raise WorkloadError("--context-parallel takes one --gpu")
    profile = load_profile(gpus[0] if gpus else DEFAULT_GPU)
    result = context_parallel(
        workload, profile, p, scheme, impl=impl, standard=standard, ulysses_degree=ulysses_degree, **opts
    )
    data = to_dict(result)
    if fmt == "json":
        terminal.print_json(data)
    elif fmt == "csv":
        terminal.print_csv(_CSV, _csv_rows(data))
    else:
        _print(result, data)
    for line in [*data["caveats"], *data["context_parallel"]["notes"]]:
        terminal.note(line)


_CSV = (
    "algorithm",
    "pass",
    "step",
    "kind",
    "compute_s",
    "merge_s",
    "link_bytes",
    "link_s",
    "time_s",
    "overlap",
)


def _csv_rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for alg in data["algorithms"]:
        for s in alg["steps"]:
            rows.append({"algorithm": alg["name"], "step": s["index"], **{k: s[k] for k in _CSV if k in s}})
    return rows


def _print(result: Any, data: dict[str, Any]) -> None:
    from ..report.compare import workload_summary
    from ..units import format_bytes, format_count, format_time
    from . import terminal

    con = terminal.console()
    cp = data["context_parallel"]
    ic = cp["interconnect"]
    scheme = cp["scheme"] + (f" (Ulysses groups of {cp['ulysses_degree']})" if cp.get("ulysses_degree") else "")
    scheme += " (zigzag, load-balanced)" if cp["zigzag"] else ""
    con.print(
        f"[bold]{terminal.escape(data['hardware']['full_name'])}[/] × {cp['gpus']} · {scheme} · "
        f"{terminal.escape(workload_summary(result.single))}",
        soft_wrap=True,
    )
    if ic:
        curve = "measured NCCL curve" if ic["send_recv_efficiency"] else "no measured curve: latency + bytes/bandwidth"
        con.print(
            f"[dim]link: {format_bytes(ic['peer_bandwidth_bytes_per_s'])}/s per direction to a peer, "
            f"{ic['topology']}, latency {format_time(ic['latency_s'])}, {curve}[/]",
            soft_wrap=True,
        )
    for alg, par in zip(data["algorithms"], (result.standard, result.tiled)):
        con.print()
        con.print(f"[bold]{alg['name']}[/] ({alg['variant']}): steps on the slowest GPU of each step")
        rows = []
        for s in alg["steps"]:
            rows.append(
                (
                    s["pass"],
                    str(s["index"]),
                    s["kind"],
                    _t(s["compute_s"]),
                    _t(s["merge_s"]),
                    format_bytes(s["link_bytes"]),
                    _t(s["link_s"]),
                    _t(s["hidden_link_s"]),
                    format_time(s["time_s"]),
                )
            )
        con.print(
            terminal.table(
                None,
                [
                    ("pass", "left"),
                    ("step", "right"),
                    ("kind", "left"),
                    ("compute", "right"),
                    ("merge/copy", "right"),
                    ("sent", "right"),
                    ("link", "right"),
                    ("hidden", "right"),
                    ("step time", "right"),
                ],
                rows,
            )
        )
        krows = [
            (
                k["name"],
                format_bytes(k["hbm_read_bytes"]),
                format_bytes(k["hbm_write_bytes"]),
                format_bytes(k["l2_bytes"]),
                format_bytes(k["sram_bytes"]),
                format_count(k["flops"]),
                format_time(k["predicted_time_s"]),
            )
            for k in alg["kernels"]
        ]
        con.print(
            terminal.table(
                None,
                [
                    ("GPU 0 kernel", "left"),
                    ("HBM read", "right"),
                    ("HBM write", "right"),
                    ("L2", "right"),
                    ("SRAM", "right"),
                    ("FLOPs", "right"),
                    ("time", "right"),
                ],
                krows,
            )
        )
        con.print(
            f"per GPU: HBM {format_bytes(alg['hbm_bytes'])} · sent {format_bytes(alg['link_bytes'])} · "
            f"[bold]wall time {format_time(alg['predicted_time_s'])}[/] · one GPU {format_time(par.single_gpu_time_s)}"
            f" · speed-up {par.speedup:.2f}× · {alg['bound']}-bound",
            soft_wrap=True,
        )
    _ = click


def _t(seconds: float) -> str:
    from ..units import format_time

    return format_time(seconds) if seconds else "—"


def run_sweep(*, axes: dict[str, Any], fixed: dict[str, Any], fmt: str, output: str | None, force: bool) -> None:
    """``sweep --context-parallel``: the options with one value for the whole grid are checked
    here, the grid is evaluated by :func:`memmodel.sweep.evaluate_context_parallel`, and its
    rows (one per workload × algorithm) are written in ``fmt``."""
    import contextlib
    import json
    import sys

    from ..errors import WorkloadError
    from ..fileio import atomic_open
    from ..sweep import CP_COLUMNS, ContextParallelGrid, evaluate_context_parallel
    from . import terminal

    for key, values in fixed.items():
        if values and len(values) > 1:
            raise WorkloadError(f"--{key.replace('_', '-')} takes one value with --context-parallel")
    one = {k: (v[0] if v else None) for k, v in fixed.items()}
    if one["n_kv"] is not None or one["dropout"]:
        raise WorkloadError("--context-parallel splits one sequence without dropout: leave out --n-kv and --dropout")
    keys = ("tiled", "block_q", "block_kv", "l2", "splits", "ctas_per_sm", "clocks")
    grid = ContextParallelGrid(
        **{k: v for k, v in axes.items() if v},
        options={k: one[k] for k in keys if one.get(k) is not None},
        standard=one["standard"] or "algorithm0",
    )
    sweep = evaluate_context_parallel(grid)
    rows, skipped = sweep.rows, sweep.skipped
    to_file = output is not None and output != "-"
    target: Any = atomic_open(output, force=force) if to_file else contextlib.nullcontext(sys.stdout)
    with target as stream:
        if fmt == "json":
            stream.write(json.dumps(rows, indent=1) + "\n")
        elif fmt == "jsonl":
            stream.writelines(json.dumps(r) + "\n" for r in rows)
        elif fmt == "csv":
            import csv

            writer = csv.DictWriter(stream, CP_COLUMNS, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(rows)
        else:
            from ..units import format_bytes, format_time

            con = terminal.console(file=stream)
            fixed_axes = [
                f"{k} {axes[k][0]}"
                for k in ("gpu", "batch", "heads", "kv_heads", "dtype", "causal", "impl", "backward")
                if axes[k] and len(axes[k]) == 1
            ]
            con.print(
                "[bold]Sweep · context parallel[/] · "
                + terminal.escape(" · ".join(fixed_axes))
                + " (time: wall time of the distributed pass per GPU group)",
                soft_wrap=True,
            )
            cols = ("p", "scheme", "n", "d", "algorithm")
            hybrid = any(r.get("ulysses_degree") for r in rows)

            def scheme_of(r: dict[str, Any], c: str) -> str:  # the hybrid's Ulysses degree beside it
                return f"{r[c]} U={r['ulysses_degree']}" if c == "scheme" and r.get("ulysses_degree") else str(r[c])

            table = [
                (
                    *(scheme_of(r, c) if hybrid else str(r[c]) for c in cols),
                    format_time(r["predicted_time_s"], digits=1),
                    format_time(r["single_gpu_time_s"], digits=1),
                    f"{r['speedup']:.2f}×",
                    format_bytes(r["link_bytes"]),
                    r["bound"],
                )
                for r in rows
            ]
            headers = ["P", "scheme", "N", "d", "alg", "time", "1 GPU", "speed-up", "sent", "bound"]
            con.print(terminal.table(None, [(h, "right") for h in headers], table))
    for line in skipped:
        terminal.note(f"skipped where {line}")
    if to_file:
        terminal.note(f"wrote {len(rows):,} rows to {output}")
