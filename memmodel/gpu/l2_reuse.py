"""The L2 reuse microbenchmark on the GPU: ``calibrate``'s ``l2_reuse`` step (run alone by
:mod:`memmodel.gpu.l2_reuse_run`).

How: one Python process under Nsight Compute (``ncu --cache-control all``: L2 flushed before
each kernel, DRAM bytes counted per kernel, only ``l2_reuse_kernel`` profiled) launches every
pattern of :func:`memmodel.calibration.l2_reuse.make_patterns` once and logs each launch (its
slots, CTAs and the SMs its programs ran on); the parent joins the log with the profiled
kernels in launch order. Without ncu on PATH the step fails with one line (nothing to fit).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..calibration import l2_reuse as plan_mod
from ..calibration.l2_reuse import Pattern
from ..errors import RuntimeFailure
from .measure import Context, describe

KERNEL = "l2_reuse_kernel"
ORDER_CODE = {"full": 0, "causal-up": 1, "causal-down": 2, "chain": 3}


def _groups(ctx: Context, rule: str, smids: Sequence[int]) -> list[int]:
    """The group (0 works, 1 idles) of each SM id under ``rule``, as a lookup table."""
    table = [1] * 1024
    ordered = sorted(smids)
    for i, s in enumerate(ordered):
        if rule == "smid-half":
            table[s] = 0 if i < len(ordered) // 2 else 1
        elif rule == "smid-parity":
            table[s] = s % 2
        else:
            table[s] = 0
    return table


def _sm_ids(ctx: Context) -> list[int]:
    from . import calibrate_kernels as ck

    torch = ctx.torch
    if ctx.device != "cuda":  # the interpreter's fake %smid is pid mod 132: one program per SM
        return list(range(ctx.info.sm_count))
    ids = torch.full((ctx.info.sm_count * 32,), -1, device=ctx.device, dtype=torch.int32)
    ck.sm_id_kernel[(ids.numel(),)](ids, FAKE=ctx.device != "cuda", num_warps=1)
    ctx.sync()
    return sorted(set(int(i) for i in ids.tolist() if i >= 0))


def run_patterns(
    ctx: Context, patterns: Sequence[Pattern], log: list[dict[str, Any]], *, budget_s: float | None = None
) -> None:
    """Launch every pattern once (after one compile probe per kernel variant, which does no
    work), appending one entry per launch of ``l2_reuse_kernel`` to ``log`` in launch order:
    ``{"kind": "probe"}`` or ``{"kind": "measure", "key", "slots", "grid", "ctas", ...}``.
    ``budget_s``: launch no pattern after that many seconds (one ``{"kind": "stopped"}`` entry
    says which were left out)."""
    from . import l2_reuse_kernels as lk

    torch = ctx.torch
    fake = ctx.device != "cuda"
    info = ctx.info
    buf = torch.empty(plan_mod.buffer_bytes(patterns) // 2, device=ctx.device, dtype=torch.float16)
    buf.uniform_(-1, 1, generator=ctx.generator(11))
    dq = torch.zeros(plan_mod.dq_buffer_bytes(patterns) // 4, device=ctx.device, dtype=torch.float32)
    max_grid = info.sm_count * 8
    out = torch.zeros(max_grid, device=ctx.device, dtype=torch.float32)
    sms = torch.full((max_grid,), -1, device=ctx.device, dtype=torch.int32)
    counter = torch.zeros(1, device=ctx.device, dtype=torch.int32)
    smids = _sm_ids(ctx)
    tables = {
        rule: torch.tensor(_groups(ctx, rule, smids), device=ctx.device, dtype=torch.int32) for rule in plan_mod.SMS
    }
    compiled: dict[tuple[Any, ...], tuple[int, int | None]] = {}  # variant -> (programs per SM that fit, maxnreg)

    def launch(p: Pattern, grid: int, n_virtual: int, ctas: int, q_per_kv: int, tiles: int, maxnreg: int | None) -> Any:
        counter.zero_()
        return lk.l2_reuse_kernel[(grid,)](
            buf,
            out,
            sms,
            counter,
            tables[p.sms],
            dq,
            n_virtual,
            ctas,
            q_per_kv,
            tiles,
            BM=p.bm,
            BN=p.bn,
            D=p.d,
            ORDER=ORDER_CODE[p.order],
            SELECT=p.sms != "all",
            COMPUTE=p.compute,
            ATOMIC=p.atomic,
            FAKE=fake,
            STORE=p.store,
            num_warps=p.num_warps,
            num_stages=p.num_stages,
            **({"maxnreg": maxnreg} if maxnreg else {}),
        )

    started = time.monotonic()
    for i, p in enumerate(patterns):
        if budget_s is not None and time.monotonic() - started > budget_s:
            log.append({"kind": "stopped", "after_s": budget_s, "left_out": [q.key for q in patterns[i:]]})
            break
        var = (*p.variant(), p.num_warps)
        if var not in compiled:
            # a probe that does no work (no virtual CTA) compiles the variant; where the register
            # cap does not compile (another ptxas), the variant runs without it, as many per SM as fit
            entry: dict[str, Any] = {"kind": "probe", "variant": list(var), "maxnreg": p.maxnreg}
            try:
                kernel = launch(p, 1, 0, 1, p.q_per_kv, p.tiles, p.maxnreg)
            except Exception as exc:  # noqa: BLE001 - a compile failure of this variant only
                entry.update(maxnreg=None, maxnreg_error=describe(exc))
                kernel = launch(p, 1, 0, 1, p.q_per_kv, p.tiles, None)
            ctx.sync()
            log.append(entry)
            compiled[var] = (max(1, ctx.grid_for(kernel, p.num_warps) // info.sm_count), entry["maxnreg"])
        fit, maxnreg = compiled[var]
        per_sm = min(p.per_sm, fit)
        grid = info.sm_count * per_sm
        working_sms = sum(1 for s in smids if int(tables[p.sms][s]) == 0) if p.sms != "all" else info.sm_count
        slots = working_sms * per_sm
        ctas = plan_mod.ctas_per_q_head(p, slots)
        n_virtual = ctas * p.q_heads
        sms.fill_(-1)
        t0 = time.perf_counter()
        note = None
        try:
            launch(p, grid, n_virtual, ctas, p.q_per_kv, p.tiles, maxnreg)
        except Exception as exc:  # noqa: BLE001 - this specialisation does not compile with the cap
            if maxnreg is None:
                raise
            note, maxnreg = describe(exc), None
            launch(p, grid, n_virtual, ctas, p.q_per_kv, p.tiles, None)
        ctx.sync()
        wall = time.perf_counter() - t0
        placed = Counter(int(s) for s in sms[:grid].tolist() if s >= 0)
        per = Counter(placed.values())
        log.append(
            {
                "kind": "measure",
                "key": p.key,
                "slots": slots,
                "grid": grid,
                "per_sm": per_sm,
                "fit_per_sm": fit,
                "maxnreg": maxnreg,
                **({"maxnreg_error": note} if note else {}),
                "ctas": ctas,
                "virtual_ctas": n_virtual,
                "working_sms": len(placed),
                "programs_per_sm_histogram": {str(k): v for k, v in sorted(per.items())},
                "checksum_finite": bool(torch.isfinite(out[:grid]).all()),
                "host_wall_s": wall,
            }
        )


def join(
    patterns: Sequence[Pattern], log: Sequence[dict[str, Any]], kernels: Sequence[Any], *, partial: bool = False
) -> list[dict[str, Any]]:
    """The measured points: the launch log's entries matched with ncu's ``l2_reuse_kernel``
    kernels, one for one in launch order (probes dropped). ``partial``: the run stopped early,
    keep the launches both sides have."""
    log = [e for e in log if e["kind"] in ("probe", "measure")]
    ours = [k for k in kernels if KERNEL in k.name]
    if partial:
        n = min(len(ours), len(log))
        ours, log = ours[:n], log[:n]
    if len(ours) != len(log):
        raise RuntimeFailure(f"ncu profiled {len(ours)} {KERNEL} launches for {len(log)} logged")
    by_key = {p.key: p for p in patterns}
    points = []
    for entry, k in zip(log, ours):
        if entry["kind"] != "measure":
            continue
        p = by_key[entry["key"]]
        points.append(plan_mod.point(p, entry, k.dram_read_bytes, k.l2_bytes, k.time_s, k.dram_write_bytes))
    return points


def measure_l2_reuse(
    ctx: Context,
    *,
    only: Sequence[str] = (),
    raw_dir: Path | None = None,
    budget_s: float = 180.0,
    factors: Sequence[float] = (),
) -> dict[str, Any]:
    """``calibrate``'s step: the patterns under Nsight Compute in a child process (``only``:
    these families; ``factors``: these footprints for every family; ``budget_s``: the child
    launches no pattern after that many seconds). ``raw_dir``: write ncu's output (``l2_reuse.ncu.csv``), its stderr and the
    launch log there as soon as the child ends, before anything is parsed."""
    from .ncu import command, parse_csv

    if shutil.which("ncu") is None:
        raise RuntimeFailure("ncu (Nsight Compute) is not on PATH: the L2 reuse curve needs DRAM byte counts")
    from ..calibration.plan import make_plan

    quick = ctx.plan == make_plan(ctx.info, quick=True)
    patterns = plan_mod.make_patterns(ctx.info.l2_bytes, quick=quick, only=only, factors=factors)
    ctx.free()
    with tempfile.TemporaryDirectory() as tmp:
        log_path = str(Path(tmp) / "log.json")
        args = command(
            [
                sys.executable,
                "-m",
                "memmodel.gpu.l2_reuse_run",
                "--child",
                log_path,
                *(["--quick"] if quick else []),
                *(["--only", ",".join(only)] if only else []),
                *(["--factors", ",".join(f"{f:g}" for f in factors)] if factors else []),
                "--budget-s",
                str(budget_s),
            ],
            kernel_regex=KERNEL,
        )
        proc = subprocess.run(args, capture_output=True, text=True, env=dict(os.environ))
        failed = proc.returncode != 0 or "ERR_NVGPUCTRPERM" in proc.stdout + proc.stderr
        reason = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        log = json.loads(Path(log_path).read_text()) if Path(log_path).exists() else []
    if raw_dir is not None:
        (raw_dir / "l2_reuse.ncu.csv").write_text(proc.stdout)
        (raw_dir / "l2_reuse.stderr.txt").write_text(proc.stderr[-200_000:])
        (raw_dir / "l2_reuse.log.json").write_text(json.dumps(log))
    if failed and not log:
        raise RuntimeFailure(f"ncu exited {proc.returncode}: {reason[0][:300]}")
    # a child that failed part-way: the launches before the failure still count
    points = join(patterns, log, parse_csv(proc.stdout), partial=failed)
    return {
        **({"failed": f"ncu exited {proc.returncode}: {reason[0][:300]}"} if failed else {}),
        "schema": plan_mod.SCHEMA,
        "points": points,
        "curves": plan_mod.curves(points),
        "probes": [e for e in log if e["kind"] == "probe"],
        "left_out": [key for e in log if e["kind"] == "stopped" for key in e["left_out"]],
        "ncu_csv": proc.stdout,
        "method": "persistent Triton programs (slots) take virtual CTAs in grid order from an atomic counter; "
        "each reads its K/V head's tiles with .cg loads, paced by two tl.dot per step (attention's shape); "
        "DRAM bytes read by Nsight Compute (--cache-control all, --clock-control none), one launch each; "
        "re-read miss = (DRAM read - unique) / (requested - unique)",
    }
