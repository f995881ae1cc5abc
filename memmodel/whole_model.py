"""A model's attention per step: each kind of layer it has (full attention, a sliding window)
compared once and counted as many times as the model has such layers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .errors import WorkloadError
from .frozen import frozen
from .model_shapes import ModelShape
from .workload import Workload


@frozen
class LayerGroup:
    """The layers of one kind of a model: how many, their attention, and one of them compared."""

    kind: str  # "global" (every key it may see) or "local" (a sliding window)
    count: int
    window: int | None
    comparison: Any  # memmodel.model.Comparison


def layer_kinds(shape: ModelShape, workload: Workload) -> list[tuple[str, int, Workload]]:
    """(kind, layers, workload) of each kind of layer of ``shape`` on ``workload``: its global
    layers as ``workload`` is (causal as it says, no window), its local ones causal within the
    model's window (full causal where the window covers every key). A model with windowed
    layers is a decoder: its global layers are causal too."""
    if not shape.layers:
        raise WorkloadError(f"--layers all: {shape.name} gives no layer count (num_hidden_layers)")
    window = shape.local_window if shape.local_layers else shape.window
    local = shape.local_layers if shape.local_layers else (shape.layers if shape.window else 0)
    glob = shape.layers - local
    causal = bool(workload.causal) or local > 0
    out = []
    if glob:
        out.append(("global", glob, workload.with_(causal=causal, window=None)))
    if local:
        longest = int(max(int(workload.n_kv_), 1))
        w = window if window is not None and window < longest else None
        out.append(("local", local, workload.with_(causal=True, window=w)))
    return out


def whole_model(shape: ModelShape, workload: Workload, compare_one: Callable[[Workload], Any]) -> list[LayerGroup]:
    """Each kind of layer of ``shape``, compared by ``compare_one`` (a workload -> Comparison)."""
    return [LayerGroup(kind, count, w.window, compare_one(w)) for kind, count, w in layer_kinds(shape, workload)]


def totals(groups: list[LayerGroup]) -> dict[str, Any]:
    """Layers, HBM bytes, FLOPs and predicted time of the model's attention, standard and tiled:
    each group's one layer times its count, summed."""
    out: dict[str, Any] = {"layers": sum(g.count for g in groups)}
    for name in ("standard", "tiled"):
        evaluated = [(g.count, getattr(g.comparison, name)) for g in groups]
        out[name] = {
            "hbm_bytes": sum(c * int(e.traffic.hbm_bytes) for c, e in evaluated),
            "flops": sum(c * int(e.traffic.flops) for c, e in evaluated),
            "predicted_time_s": sum(c * float(e.timing.time_s) for c, e in evaluated),
        }
    return out
