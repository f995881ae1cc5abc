"""``implementations.sdpa-flash.uneven_causal_slowdown_d<D>``: how much longer FlashAttention-2's
causal forward takes when its launch is not ``Is_even_MN``, by the Q blocks of a row.

A packed row (``cu_seqlens``) or lengths that are not multiples of the tiles run another
instantiation of the forward kernel (``Is_even_MN`` false: predicated loads, one more masking
step, the row and column compared in each). On the H200 that kernel stalls on instruction fetch
(Nsight Compute: ``smsp__warps_issue_stalled_no_instruction`` two to five times the even
kernel's at documents of 512 and 1024 tokens, for at most a fifth more instructions) over rows of a few
blocks, and not over rows of one block or of many. No rule of the model gives that, so it is
measured: the varlen probe (:data:`RECORD`, ``validation/cases/h200-varlen-probe.txt``) times the
causal varlen forward over equal documents of 128 to 4096 tokens against the same documents as a
batch (the even kernel), at d 64 and 128, bf16; the figure at a row of T Q blocks (T = ⌈length /
128⌉) is the median over its head counts of the varlen time over the batched time, at least 1:
the uneven kernel does all the even one does and more (at 32 blocks, d 128, the probe timed it a
little faster, which the figure does not take).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

RECORD = "validation/h200/varlen-probe/varlen-probe.json.gz"
COMMAND = (
    "python3 -m memmodel validate --gpu h200 --no-host-probe --cases validation/cases/h200-varlen-probe.txt "
    "--output varlen-probe.json"
)
SOURCE = "measured-varlen-probe"
IMPL = "sdpa-flash"
#: the head dims the probe measured (``implementations.<impl>.uneven_causal_slowdown_d<D>``)
HEAD_DIMS = (64, 128)
#: the Q block of FlashAttention-2's forward at those head dims (rows a CTA holds)
BLOCK_Q = 128


def _key(c: Mapping[str, Any]) -> tuple[int, int, int, int, int]:
    """(d, heads, K/V heads, document length, documents) of a varlen case or its batched twin."""
    docs = c.get("seq_lens")
    length = int(docs[0]) if docs else int(c["n"])
    count = len(docs) if docs else int(c["batch"])
    return int(c["d"]), int(c["heads"]), int(c.get("kv_heads") or c["heads"]), length, count


def pairs(record: Mapping[str, Any]) -> list[tuple[int, int, float]]:
    """(d, Q blocks a row, varlen time / batched time) for every causal varlen case of equal
    documents whose batched twin the record holds."""
    times: dict[tuple[bool, tuple[int, ...]], float] = {}
    for entry in record.get("cases", []):
        c = entry.get("case", {})
        t = ((entry.get("timing") or {}).get("kernels") or {}).get("attention")
        if c.get("impl") != IMPL or not c.get("causal") or c.get("window") or c.get("backward") or not t:
            continue
        docs = c.get("seq_lens")
        if docs and len(set(docs)) != 1:
            continue
        times[(bool(docs), _key(c))] = float(t)
    out = []
    for (packed, key), t in times.items():
        twin = times.get((False, key))
        if packed and twin:
            d, _, _, length, _ = key
            out.append((d, -(-length // BLOCK_Q), t / twin))
    return sorted(out)


def fitted(record: Mapping[str, Any]) -> dict[int, dict[int, float]]:
    """{head dim: {Q blocks a row: slowdown}} (3 decimals): the median over head counts."""
    by: dict[tuple[int, int], list[float]] = {}
    for d, blocks, ratio in pairs(record):
        by.setdefault((d, blocks), []).append(ratio)
    out: dict[int, dict[int, float]] = {}
    for (d, blocks), ratios in sorted(by.items()):
        out.setdefault(d, {})[blocks] = round(max(1.0, statistics.median(ratios)), 3)
    return out


def apply(data: dict[str, Any], record: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` (a profile's YAML mapping) with the slowdown curves and their source."""
    curves = fitted(record)
    if not curves:
        return data
    figures = dict((data.get("implementations") or {}).get(IMPL) or {})
    counts = {d: sum(1 for x, _, _ in pairs(record) if x == d) for d in curves}
    for d, curve in curves.items():
        figures[f"uneven_causal_slowdown_d{d}"] = {
            "value": curve,
            "source": SOURCE,
            "note": f"its causal forward's time where the launch is not Is_even_MN over the even kernel's, by the Q "
            f"blocks of a row (rows of 128 to 4096 tokens); the median over head counts of {counts[d]} packed rows of "
            "equal documents against the same documents as a batch (bf16, CUDA-event medians), at least 1: "
            "memmodel.calibration.fa2_uneven",
        }
    data.setdefault("implementations", {})[IMPL] = figures
    from .sources import with_record_source

    title = "memmodel varlen probe (FlashAttention-2's forward, packed against batched)"
    return with_record_source(data, SOURCE, title, RECORD, record, COMMAND)
