"""``implementations.sdpa-flash.{,varlen_}spill_write{,_causal}``: the HBM bytes each CTA of
FlashAttention-2's forward writes beyond O and the logsumexp, by head dim: its spilled registers.

PyTorch's build of FlashAttention-2's forward holds 255 registers a thread at d = 64 and 128 and
spills (``cuobjdump -res-usage`` of ``libtorch_cuda.so``: stacks of 72 to 376 bytes a thread). The
spilled stores that miss L1 reach the L2, and most of them HBM: the probe
(:data:`RECORD`, cases ``validation/cases/h200-fa2-fwd-probe.txt``: Nsight Compute with the
local-memory counters, cold L2) measured 1.3 to 2.1 times O's bytes written at d = 128 where the
local stores missing L1 were large, and about O's where they were not. What a CTA writes so is
about one figure per kernel instantiation, whatever the CTA's length: Is_even_MN (a batch whose
lengths are multiples of the tiles) or not (a packed row, ``varlen``), causal or not, by head dim.

A kernel's measured writes are O, the logsumexp and its CTAs' spills, less what the L2 still holds
dirty when it ends (Nsight Compute flushes the L2 before each kernel and counts a kernel's writes
to DRAM while it runs): written ``W = O + lse + s · CTAs − R``. The probe ran the even causal
kernel at d = 128 at three sizes; ``s`` and ``R`` are their least-squares line. Every other
instantiation the probe ran gives its ``s = (W − O − lse + R) / CTAs`` (the median where it ran
several). ``R`` itself is a property of the measurement, not of the kernel: the model does not
count it. Fitted to this probe alone; the chunked set (``h200-chunk-check``) and the causal checks
had measured the same kernels before and are not blind for it.
"""

from __future__ import annotations

import csv
import gzip
import io
import statistics
from pathlib import Path
from typing import Any

import numpy as np

RECORD = "validation/h200/fa2-fwd-probe/ncu.csv.gz"
CASES = "validation/cases/h200-fa2-fwd-probe.txt"
#: the probe's second run: the local (sliding-window) kernels
RECORD_2 = "validation/h200/fa2-fwd-probe/ncu-2.csv.gz"
CASES_2 = "validation/cases/h200-fa2-local-probe.txt"
COMMAND = (
    "bash validation/probes/fa2_fwd_probe.sh validation/cases/h200-fa2-fwd-probe.txt (and h200-fa2-local-probe.txt)"
)
SOURCE = "measured-fa2-spills"
IMPL = "sdpa-flash"
#: the profile figures (curves by head dim, bytes a CTA) by (packed row or uneven, mask)
FIELDS = {
    (False, "causal"): "spill_write_causal",
    (False, "none"): "spill_write",
    (False, "local"): "local_spill_write",
    (True, "causal"): "varlen_spill_write_causal",
    (True, "none"): "varlen_spill_write",
    (True, "local"): "varlen_local_spill_write",
}


def _written(repo: Path, record: str) -> list[float]:
    """The DRAM bytes each flash forward kernel of a probe's Nsight Compute CSV wrote, in launch
    order (one a case: each case runs one)."""
    text = gzip.open(repo / record, "rt").read()
    rows = csv.DictReader(io.StringIO(text[text.index('"ID"') :]))
    out: dict[int, float] = {}
    for row in rows:
        if "flash_fwd_kernel" in row["Kernel Name"] and row["Metric Name"] == "dram__bytes_write.sum":
            out[int(row["ID"])] = float(row["Metric Value"].replace(",", ""))
    return [out[i] for i in sorted(out)]


def _rows(repo: Path) -> list[dict[str, Any]]:
    """Per flash forward kernel of the probes: its case, CTAs, O + lse bytes and measured writes."""
    out = []
    for record, cases_file in ((RECORD, CASES), (RECORD_2, CASES_2)):
        if (repo / record).exists():
            out += _probe_rows(repo, record, cases_file)
    return out


def _probe_rows(repo: Path, record: str, cases_file: str) -> list[dict[str, Any]]:
    from ..cases import parse_case

    lines = (repo / cases_file).read_text().splitlines()
    cases = [parse_case(x.strip()) for x in lines if x.strip() and not x.startswith("#")]
    written = _written(repo, record)
    if len(written) != len(cases):
        raise ValueError(f"{record}: {len(written)} flash forward kernels for {len(cases)} cases")
    out = []
    for case, measured in zip(cases, written):
        w = case.workload()
        block_q = 128
        docs = w.seq_lens if w.seq_lens is not None else (int(w.n),) * int(w.batch)
        ctas = sum(-(-length // block_q) for length in docs) * int(w.heads)
        even = w.seq_lens is None and int(w.n) % block_q == 0
        out.append(
            {
                "case": case.id,
                "d": int(w.d),
                "class": (not even, "local" if w.window is not None else ("causal" if w.causal else "none")),
                "ctas": ctas,
                "written": int(w.o_bytes()) + int(w.batch) * int(w.heads) * int(w.n) * 4,
                "measured": measured,
            }
        )
    return out


def fit(repo: Path) -> dict[str, Any]:
    """``{"residue": R, "figures": {field: {head dim: bytes a CTA}}, "rows": n}`` (see the module)."""
    rows = _rows(repo)
    base = [r for r in rows if r["class"] == (False, "causal") and r["d"] == 128]
    if len(base) < 2:
        raise ValueError(f"{RECORD}: the even causal kernel at d = 128 ran at fewer than two sizes")
    a = np.array([[r["ctas"], -1.0] for r in base], dtype=np.float64)
    b = np.array([r["measured"] - r["written"] for r in base], dtype=np.float64)
    (_, residue), *_ = np.linalg.lstsq(a, b, rcond=None)
    per: dict[tuple[tuple[bool, str], int], list[float]] = {}
    for r in rows:
        per.setdefault((r["class"], r["d"]), []).append((r["measured"] - r["written"] + residue) / r["ctas"])
    figures: dict[str, dict[int, float]] = {}
    for (cls, d), values in sorted(per.items()):
        figures.setdefault(FIELDS[cls], {})[d] = round(max(statistics.median(values), 0.0))
    return {"residue": float(residue), "figures": figures, "rows": len(rows)}


def apply(data: dict[str, Any], repo: Path) -> dict[str, Any]:
    """``data`` (a profile's YAML mapping) with the spill curves and their source."""
    figures = dict((data.get("implementations") or {}).get(IMPL) or {}) | profile_figures(repo)
    data.setdefault("implementations", {})[IMPL] = figures
    from .sources import put_source

    env = (repo / RECORD).parent / "env.txt"
    device = "NVIDIA H200" if "H200" in (env.read_text() if env.exists() else "") else "GPU"
    return put_source(
        data,
        SOURCE,
        title=f"memmodel FlashAttention-2 forward spill probe, {device} ({RECORD})",
        machine=f"lent {device} (nvidia-h200), torch 2.11.0+cu130, Nsight Compute 2025.3.1",
        date="2026-12-04",
        command=COMMAND,
    )


def profile_figures(repo: Path) -> dict[str, Any]:
    """The profile's ``implementations.sdpa-flash`` entries (value, source, note)."""
    result = fit(repo)
    out = {}
    for field, curve in result["figures"].items():
        out[field] = {
            "value": {d: f"{v:g} B" for d, v in sorted(curve.items())},
            "source": SOURCE,
            "note": (
                "HBM bytes each forward CTA writes beyond O and the logsumexp (its spilled registers), by head dim; "
                f"from the {result['rows']} flash forward kernels of the spill probe (Nsight Compute, cold L2), less "
                f"what the L2 held dirty at their end ({result['residue'] / 1e6:.1f} MB, fitted with the even causal "
                "kernel at three sizes): memmodel.calibration.fa2_spills"
            ),
        }
    return out
