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


def p2p_sms(result: Mapping[str, Any], profile: Any) -> tuple[int, list[tuple[float, float]]] | None:
    """The SMs NCCL's send/recv holds beside the compute, from calibrate's overlap references:
    the count (1 to 32) whose rule (:func:`memmodel.parallel.beside_transfer_time`, with the
    single-GPU model on ``profile`` of the references alone and on fewer SMs) best matches the
    measured (kernel beside the exchange) / (kernel alone), least squares; with the
    (measured, modelled) ratios at that count. None where none was measured."""
    import dataclasses

    from ..model import compare
    from ..parallel import beside_transfer_time, fused_grid
    from ..workload import Workload

    rows = [r for r in result.get("overlap", []) if r.get("kernel_s", 0) > 0 and r.get("exchange_s", 0) > 0]
    if not rows:
        return None
    sms = profile.sm_count

    def model(shape: list[int], count: int) -> tuple[float, float, float]:
        """(the forward kernel's CTAs, its CTAs per SM, the time) on ``count`` SMs."""
        b, h, n, d = shape
        prof = dataclasses.replace(profile, sm_count=count)
        c = compare(Workload(n=n, d=d, batch=b, heads=h, dtype="bf16"), prof, impl="sdpa-flash", clocks="boost")
        return (*fused_grid(c), float(c.tiled.timing.time_s))

    best: tuple[float, int, list[tuple[float, float]]] | None = None
    for held in range(1, 33):
        pairs = []
        for r in rows:
            ctas, per_sm, alone = model(r["shape"], sms)
            _, _, fewer = model(r["shape"], sms - held)
            beside = beside_transfer_time(ctas, per_sm, alone, fewer, r["exchange_s"], sms - held)
            pairs.append((r["kernel_beside_exchange_s"] / r["kernel_s"], beside / alone))
        err = sum((m - p) ** 2 for m, p in pairs)
        if best is None or err < best[0]:
            best = (err, held, pairs)
    assert best is not None
    return best[1], best[2]


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
        "send_recv": "each GPU sends two buffers of half the bytes (the ring's K and V) to the next and receives two from the last (batch_isend_irecv)",
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
    from ..hardware import parse_profile

    held = p2p_sms(result, parse_profile(data, "<profile>")) if result.get("overlap") else None
    if held is not None:
        count, pairs = held
        rows = result.get("overlap", [])
        detail = "; ".join(
            f"{'x'.join(map(str, r['shape']))}: {r['kernel_s'] * 1e6:.1f} us alone, "
            f"{r['kernel_beside_exchange_s'] * 1e6:.1f} us beside a {r['exchange_s'] * 1e6:.1f} us exchange "
            f"(x{m:.3f}; modelled x{p:.3f})"
            for r, (m, p) in zip(rows, pairs)
        )
        ic["p2p_sms"] = {
            "value": count,
            "source": "measured-nccl",
            "note": "SMs NCCL's send/recv holds beside the compute: the count whose rule (one-wave grids run on the "
            "SMs left, longer ones lose them while the exchange runs) best matches FlashAttention-2 forwards "
            f"(batch x heads x N x d, bf16) beside an exchange of {format_bytes(rows[0]['bytes_each_way'], binary=True)} "
            f"each way, least squares on the slow-down; {how}: {detail}",
        }
    return data
