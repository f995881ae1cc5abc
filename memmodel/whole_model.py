"""A model's attention per step: each kind of layer it has (full attention, a sliding window,
chunked local attention) compared once and counted as many times as the model has such layers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .errors import WorkloadError
from .frozen import frozen
from .model_shapes import ModelShape
from .workload import Workload, chunked


@frozen
class LayerGroup:
    """The layers of one kind of a model: how many, their attention, and one of them compared."""

    kind: str  # "global" (every key it may see), "local" (a sliding window) or "chunked" (its own chunk)
    count: int
    window: int | None
    comparison: Any  # memmodel.model.Comparison
    #: the chunk of a "chunked" group (None: not chunked)
    chunk: int | None = None


def layer_counts(shape: ModelShape) -> list[tuple[str, int, int | None]]:
    """(kind, layers, span) of each kind of layer of ``shape``: its full-attention ("global")
    layers, its sliding-window ("local") ones (span: the window) and its chunked ones ("chunked",
    span: the chunk), in that order, those it has."""
    if not shape.layers:
        raise WorkloadError(f"--layers all: {shape.name} gives no layer count (num_hidden_layers)")
    window = shape.local_window if shape.local_layers else shape.window
    local = shape.local_layers if shape.local_layers else (shape.layers if shape.window else 0)
    out: list[tuple[str, int, int | None]] = []
    if shape.layers - local - shape.chunk_layers:
        out.append(("global", shape.layers - local - shape.chunk_layers, None))
    if local:
        out.append(("local", local, window))
    if shape.chunk_layers:
        out.append(("chunked", shape.chunk_layers, shape.chunk))
    return out


def layer_kinds(shape: ModelShape, workload: Workload) -> list[tuple[str, int, Workload]]:
    """(kind, layers, workload) of each kind of layer of ``shape`` on ``workload``
    (:func:`layer_counts`): its global layers as ``workload`` is (causal as it says, no window),
    its local ones causal within the model's window (full causal where the window covers every
    key). A model with windowed layers is a decoder: its global layers are causal too."""
    counts = layer_counts(shape)
    # a decoder's full-attention layers are causal; one query token sees every cached key either way
    decoding = int(np.max(np.asarray(workload.n))) == 1
    causal = bool(workload.causal) or (any(kind != "global" for kind, _, _ in counts) and not decoding)
    longest = int(max(int(np.max(np.asarray(workload.n_kv_))), 1))
    out = []
    for kind, count, window in counts:
        if kind == "global":
            out.append((kind, count, workload.with_(causal=causal, window=None)))
        elif kind == "chunked":
            assert window is not None
            out.append((kind, count, chunked(workload.with_(causal=True, window=None), window)[0]))
        else:
            w = window if window is not None and window < longest else None
            out.append((kind, count, workload.with_(causal=True, window=w)))
    return out


def whole_model(shape: ModelShape, workload: Workload, compare_one: Callable[[Workload], Any]) -> list[LayerGroup]:
    """Each kind of layer of ``shape``, compared by ``compare_one`` (a workload -> Comparison)."""
    spans = {kind: span for kind, _, span in layer_counts(shape)}
    return [
        LayerGroup(kind, count, w.window, compare_one(w), spans[kind] if kind == "chunked" else None)
        for kind, count, w in layer_kinds(shape, workload)
    ]


def totals(groups: list[LayerGroup]) -> dict[str, Any]:
    """Layers, HBM bytes, FLOPs and predicted time (under the comparisons' timing) of the model's
    attention, standard and tiled: each group's one layer times its count, summed."""
    out: dict[str, Any] = {"layers": sum(g.count for g in groups)}
    for name in ("standard", "tiled"):
        evaluated = [(g.count, getattr(g.comparison, name)) for g in groups]
        out[name] = {
            "hbm_bytes": sum(c * int(e.traffic.hbm_bytes) for c, e in evaluated),
            "flops": sum(c * int(e.traffic.flops) for c, e in evaluated),
            "predicted_time_s": sum(
                c * float(e.time_s(g.comparison.options.timing)) for (c, e), g in zip(evaluated, groups)
            ),
        }
    return out
