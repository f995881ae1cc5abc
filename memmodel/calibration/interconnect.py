"""The NCCL curves ``memmodel calibrate --gpus P`` measures, as profile figures (pure: no GPU).

Each curve row is (message bytes, seconds, bytes each GPU sent). The efficiency at a size is
``sent / seconds / bandwidth``, ``bandwidth`` the profile's per-direction link figure (the
datasheet's); the latency is the intercept of a straight line through the smallest sizes'
times. :func:`apply` writes them into a profile's YAML mapping, citing the run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import RuntimeFailure
from ..units import format_bytes, quantity


def efficiencies(result: Mapping[str, Any], bandwidth: float) -> dict[str, dict[int, float]]:
    """Collective -> {message bytes: share of ``bandwidth``}."""
    out: dict[str, dict[int, float]] = {}
    for name, rows in result.get("curves", {}).items():
        points = {}
        for size, seconds, sent in rows:
            if seconds > 0 and sent > 0:
                points[int(size)] = float(f"{sent / seconds / bandwidth:.4g}")
        if points:
            out[name] = points
    return out


def latency(result: Mapping[str, Any], points: int = 4) -> float | None:
    """Seconds at zero bytes: the least-squares line through the smallest ``points`` send/recv times."""
    rows = sorted(result.get("curves", {}).get("send_recv", []))[:points]
    if len(rows) < 2:
        return None
    xs = [float(r[2]) for r in rows]
    ys = [float(r[1]) for r in rows]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return None
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return max(my - slope * mx, 0.0)


def overlap_cost(result: Mapping[str, Any]) -> float | None:
    """The median over the overlap references of (kernel beside the exchange − kernel alone) /
    exchange alone, at least 0.001 (a ratio figure is positive); None where none was measured
    (the curves of earlier versions)."""
    shares = sorted(
        (r["kernel_beside_exchange_s"] - r["kernel_s"]) / r["exchange_s"]
        for r in result.get("overlap", [])
        if r.get("exchange_s", 0) > 0
    )
    if not shares:
        return None
    mid = len(shares) // 2
    median = shares[mid] if len(shares) % 2 else (shares[mid - 1] + shares[mid]) / 2
    return round(max(median, 0.001), 3)


def apply(data: dict[str, Any], result: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` (a profile's YAML mapping with ``interconnect.bandwidth``) with the measured
    curves and latency in place, citing the source ``measured-nccl``."""
    from ..units import parse

    ic = data.get("interconnect")
    if not isinstance(ic, dict) or "bandwidth" not in ic:
        raise RuntimeFailure("the base profile has no interconnect.bandwidth to measure the NCCL curves against")
    raw = ic["bandwidth"]["value"] if isinstance(ic["bandwidth"], Mapping) else ic["bandwidth"]
    bandwidth = parse(raw, "bandwidth")
    device = result.get("device", {})
    gpus = device.get("gpus", 2)
    how = (
        f"NCCL through torch.distributed on {gpus} x {device.get('name', 'GPU')}, bf16 buffers, medians of CUDA-event "
        f"times (each rep the fastest rank), NVLink SHARP/multicast off"
    )
    what = {
        "send_recv": "each GPU sends a buffer to the next and receives one from the last (batch_isend_irecv)",
        "all_gather": "all_gather_into_tensor; sent = (P - 1) x the buffer",
        "all_to_all": "all_to_all_single; sent = (P - 1) / P of the buffer",
    }
    for name, points in efficiencies(result, bandwidth).items():
        rows = {int(r[0]): r for r in result["curves"][name]}
        detail = ", ".join(
            f"{format_bytes(s, binary=True)}: {rows[s][2] / rows[s][1] / 1e9:.1f} GB/s" for s in sorted(points)
        )
        ic[f"{name}_efficiency"] = {
            "value": dict(sorted(points.items())),
            "source": "measured-nccl",
            "note": f"bytes sent / time / {raw} by message bytes; {what[name]}; {how}: {detail}",
        }
    cost = overlap_cost(result)
    if cost is not None:
        rows = result.get("overlap", [])
        detail = "; ".join(
            f"{'x'.join(map(str, r['shape']))}: {r['kernel_s'] * 1e6:.1f} us alone, "
            f"{r['kernel_beside_exchange_s'] * 1e6:.1f} us beside a {r['exchange_s'] * 1e6:.1f} us exchange"
            for r in rows
        )
        ic["overlap_cost"] = {
            "value": cost,
            "source": "measured-nccl",
            "note": "share of an overlapped send/recv's time the attention kernel beside it loses: median over "
            f"FlashAttention-2 forwards (batch x heads x N x d, bf16) of (beside - alone) / the exchange alone, "
            f"{format_bytes(rows[0]['bytes_each_way'], binary=True)} each way; {how}: {detail}",
        }
    lat = latency(result)
    if lat:
        ic["latency"] = {
            "value": quantity(lat, "time"),
            "source": "measured-nccl",
            "note": "intercept of a straight line through the send/recv times of the four smallest messages "
            "(1-8 MiB); the curves already hold it",
        }
    sources = dict(data.get("sources") or {})
    sources["measured-nccl"] = {
        "title": f"NCCL curves measured on {gpus} x {device.get('name', 'GPU')}, {result.get('date', '?')}",
        "kind": "measured",
        "machine": f"{gpus} x {device.get('name', 'GPU')}; torch {device.get('torch_version', '?')}, "
        f"NCCL {device.get('nccl_version', '?')}",
        "date": str(result.get("date", "")),
        "command": str(result.get("command") or "memmodel calibrate --gpus 2"),
    }
    data["sources"] = sources
    return data
