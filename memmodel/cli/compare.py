"""``memmodel compare``: standard vs tiled attention on one workload and GPU."""

from __future__ import annotations

from typing import Any

import click

from .options import format_option, gpu_option, tiled_options, workload_options

ROLE_LABELS = (
    ("input", "inputs (Q, K, V)"),
    ("intermediate", "intermediates (S, P)"),
    ("output", "outputs (O)"),
    ("state", "state (l, m, lse)"),
)


@click.command("compare")
@workload_options
@gpu_option()
@tiled_options
@format_option()
def compare_cmd(
    *,
    n: int,
    d: int,
    batch: int,
    heads: int,
    dtype: str,
    gpu: str,
    tiled: str,
    block_q: int | None,
    block_kv: int | None,
    fmt: str,
) -> None:
    """Bytes moved through HBM, FLOPs and predicted time of standard attention
    (S and P materialised in HBM) against tiled FlashAttention, kernel by kernel.

    Example: memmodel compare --n 4096 --d 768
    """
    from .. import compare
    from ..hardware import load_profile
    from ..workload import Workload

    profile = load_profile(gpu)
    result = compare(
        Workload(n=n, d=d, batch=batch, heads=heads, dtype=dtype),
        profile,
        tiled=tiled,
        block_q=block_q,
        block_kv=block_kv,
    )
    from . import terminal

    if fmt == "json":
        from ..report import compare_to_dict

        terminal.print_json(compare_to_dict(result))
    elif fmt == "csv":
        from ..report import COMPARE_CSV_COLUMNS, compare_csv_rows

        terminal.print_csv(COMPARE_CSV_COLUMNS, compare_csv_rows(result))
    else:
        _print_table(result)


def _print_table(result: Any) -> None:
    from ..report.compare import compare_to_dict
    from ..units import format_bytes, format_count, format_time
    from . import terminal

    data = compare_to_dict(result)
    w = data["workload"]
    con = terminal.console()
    con.print(
        f"[bold]{data['hardware']['full_name']}[/] ({data['hardware']['name']}) · "
        f"batch {w['batch']} · heads {w['heads']} · N {w['n']} · d {w['d']} · {w['dtype']}"
    )
    for alg in data["algorithms"]:
        title = (
            "Standard attention (FlashAttention paper Algorithm 0)" if alg["name"] == "standard" else _tiled_title(alg)
        )
        rows: list[Any] = []
        for kernel in alg["kernels"]:
            for t in alg["transfers"]:
                if t["kernel"] == kernel["name"]:
                    rows.append(
                        (t["kernel"], t["tensor"], t["role"], t["direction"], format_bytes(t["bytes"]), t["formula"])
                    )
            rows.append(
                (
                    "",
                    "",
                    "",
                    "",
                    f"[dim]{format_count(kernel['flops'])}[/]",
                    f"[dim]{format_time(kernel['predicted_time_s'])}, {kernel['bound']}-bound[/]",
                )
            )
            rows.append(None)
        con.print()
        con.print(f"[bold]{title}[/]", soft_wrap=True)
        con.print(
            terminal.table(
                None,
                [
                    ("kernel", "left"),
                    ("tensor", "left"),
                    ("role", "left"),
                    ("dir", "left"),
                    ("HBM", "right"),
                    ("formula", "left"),
                ],
                rows[:-1],
            )
        )
    std, til = data["algorithms"]
    ratios = data["ratios"]

    def role_row(role: str, label: str) -> tuple[str, ...]:
        a, b = std["bytes_by_role"][role], til["bytes_by_role"][role]
        return (label, format_bytes(a), format_bytes(b), _ratio(a, b))

    summary = [role_row(role, label) for role, label in ROLE_LABELS]
    summary.append(None)  # type: ignore[arg-type]
    summary += [
        (
            "HBM read",
            format_bytes(std["hbm_read_bytes"]),
            format_bytes(til["hbm_read_bytes"]),
            _ratio(std["hbm_read_bytes"], til["hbm_read_bytes"]),
        ),
        (
            "HBM write",
            format_bytes(std["hbm_write_bytes"]),
            format_bytes(til["hbm_write_bytes"]),
            _ratio(std["hbm_write_bytes"], til["hbm_write_bytes"]),
        ),
        (
            "[bold]HBM total[/]",
            f"[bold]{format_bytes(std['hbm_bytes'])}[/]",
            f"[bold]{format_bytes(til['hbm_bytes'])}[/]",
            f"[bold]{ratios['hbm_bytes']:.2f}×[/]",
        ),
        ("FLOPs", format_count(std["flops"]), format_count(til["flops"]), f"{ratios['flops']:.2f}×"),
        (
            "exp",
            format_count(std["exp_ops"], "op"),
            format_count(til["exp_ops"], "op"),
            _ratio(std["exp_ops"], til["exp_ops"]),
        ),
        ("intensity", f"{std['arithmetic_intensity']:.1f} FLOP/B", f"{til['arithmetic_intensity']:.1f} FLOP/B", ""),
        (
            "[bold]predicted time[/]",
            f"[bold]{format_time(std['predicted_time_s'])}[/]",
            f"[bold]{format_time(til['predicted_time_s'])}[/]",
            f"[bold]{ratios['predicted_time_s']:.2f}×[/]",
        ),
        ("bound by", std["bound"], til["bound"], ""),
    ]
    con.print()
    con.print("[bold]Totals[/]")
    con.print(
        terminal.table(
            None,
            [("", "left"), ("standard", "right"), (f"tiled ({til['variant']})", "right"), ("standard/tiled", "right")],
            summary,
        )
    )
    for line in data["warnings"]:
        con.print(f"[yellow]warning:[/] {line}", soft_wrap=True)


def _tiled_title(alg: dict[str, Any]) -> str:
    p = alg["params"]
    name = "FA1 (paper Algorithm 1)" if alg["variant"] == "fa1" else "FA2 (outer loop over Q blocks)"
    src = "Algorithm 1's rule" if p["blocks_from"] == "algorithm1" else "given"
    return f"Tiled attention, {name}: B_r={p['block_q']}, B_c={p['block_kv']} ({src}), T_r={p['t_r']}, T_c={p['t_c']}"


def _ratio(a: float, b: float) -> str:
    if b == 0:
        return "—" if a == 0 else "∞"
    return f"{a / b:.2f}×"
