"""``implementations.flashmla.call_host`` and ``implementations.flashinfer.call_host`` /
``split_call_host``: what one call of FlashInfer's planned wrappers costs the host, from their own
probe (:data:`RECORD`, ``validation/probes/flashinfer_host_probe.py``): the wrapper's ``run`` timed
as :mod:`memmodel.gpu.calibrate_host` times PyTorch's calls (the median host seconds a call, issued
behind a sleeping kernel), at the profile's reference shapes: the MLA decode (batch 8 × 128 heads,
4096 keys), the paged decode (the ``split_call_host`` shape) and the paged prefill (the
``call_host`` shape). Without them a profile stands PyTorch's FlashAttention-2 call in, and says so.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

RECORD = "validation/h200/flashinfer-host/flashinfer-host.jsonl.gz"
COMMAND = (
    "python3 validation/probes/flashinfer_host_probe.py flashinfer-host.jsonl (FlashInfer 0.7.2.post1 on PYTHONPATH)"
)
SOURCE = "measured-flashinfer-host"

#: (implementation, the probe's shape) -> the figure it sets, and what the note says of the call
FIGURES = {
    ("flashmla", "decode"): ("call_host", "one absorbed MLA decode (batch 8, 128 heads, 4096 keys, bf16)"),
    ("flashinfer", "decode"): (
        "split_call_host",
        "one paged decode (batch 8, 32 heads on 8, 4096 keys, d 128, pages of 16)",
    ),
    ("flashinfer", "prefill"): ("call_host", "one paged prefill (batch 1, 8 heads, 128 tokens, d 64, pages of 16)"),
}


def rows(repo: Path) -> list[dict[str, Any]]:
    """The probe's measured calls (``section: host`` with ``host_s``)."""
    out = []
    for line in gzip.open(repo / RECORD, "rt"):
        row = json.loads(line)
        if row.get("section") == "host" and "host_s" in row:
            out.append(row)
    return out


def apply(data: dict[str, Any], repo: Path) -> dict[str, Any]:
    """``data`` (a profile's YAML mapping) with the wrappers' host figures and their source."""
    found = rows(repo)
    implementations = data.setdefault("implementations", {})
    for row in found:
        key = (row["impl"], row["shape"])
        if key not in FIGURES:
            continue
        leaf, what = FIGURES[key]
        figures = dict(implementations.get(row["impl"]) or {})
        figures[leaf] = {
            "value": f"{row['host_s'] * 1e6:.4g} us",
            "source": SOURCE,
            "note": f"host time of {what}: the planned wrapper's run, median host seconds a call behind a sleeping "
            "kernel: memmodel.calibration.library_host",
        }
        implementations[row["impl"]] = figures
    if not found:
        return data
    from .sources import put_source

    return put_source(
        data,
        SOURCE,
        title=f"memmodel FlashInfer host probe (its wrappers' run per call), NVIDIA H200 ({RECORD})",
        machine="lent NVIDIA H200 (nvidia-h200), torch 2.11.0+cu130, FlashInfer 0.7.2.post1",
        date="2026-12-04",
        command=COMMAND,
    )
