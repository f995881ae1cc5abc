"""The times a user's timer sees, as a validate record scores them (plain Python, no torch).

``memmodel validate`` measures each case in four timing modes (``memmodel.host.TIMINGS``):
the GPU's time of the kernels queued back to back (``kernel``, what every record holds), one
synchronised call (``call``), calls queued without synchronising (``queued``) and one replay of a
CUDA graph of the call (``graph``). The model's times for the last three come from its host model
(``memmodel.host``: ``Evaluated.times``, ``Trace.times``), looked up lazily so that scoring runs
the same, without those rows, where this memmodel has none.
"""

from __future__ import annotations

from typing import Any

#: the timing modes a prediction is scored in (``memmodel.host.TIMINGS``): the GPU's time of
#: the kernels queued back to back, one synchronised call, calls queued without synchronising,
#: one replay of a CUDA graph of the call
TIMING_MODES = ("kernel", "call", "queued", "graph")
#: the modes a validate record measures beside the kernel time (its ``MODE_time_s`` keys)
MEASURED_MODES = ("call", "queued", "graph")


def host_model_present() -> bool:
    """Whether this memmodel has the host model (``memmodel.host``: the call, queued and graph
    times); looked up, not imported, so that scoring runs the same without it."""
    import importlib.util

    return importlib.util.find_spec(f"{__package__}.host") is not None


def evaluated_times(evaluated: Any) -> Any:
    """The model's :class:`memmodel.host.Times` of an evaluated algorithm or a trace (its
    ``times``), or None where this memmodel has no host model."""
    return evaluated.times if host_model_present() else None


def mode_times(times: Any) -> dict[str, float]:
    """A Times (anything with ``of(mode)``) as ``{mode: seconds}`` over :data:`TIMING_MODES`."""
    return {mode: float(times.of(mode)) for mode in TIMING_MODES}


def predicted_modes(evaluated: Any) -> dict[str, Any]:
    """The keys a prediction gains from the host model: ``times_s`` (:func:`mode_times`) and
    ``host_time_s``; ``times_error`` where the model refuses; nothing without a host model."""
    from .errors import MemmodelError

    try:
        times = evaluated_times(evaluated)
    except MemmodelError as exc:
        return {"times_error": str(exc)}
    if times is None:
        return {}
    out: dict[str, Any] = {"times_s": mode_times(times)}
    host = getattr(times, "host_s", None)
    if host is not None:
        out["host_time_s"] = float(host)
    return out


def mode_time_errors(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """Per timing mode a case measured (``call_time_s``, ``queued_time_s``, ``graph_time_s``) and
    the model predicts (``predicted.times_s``): predicted against measured time and the error."""
    if entry.get("status") != "ok" or "timing" not in entry:
        return []
    predicted = (entry.get("predicted") or {}).get("times_s") or {}
    rows = []
    for mode in MEASURED_MODES:
        measured = entry["timing"].get(f"{mode}_time_s")
        if measured is None or measured <= 0 or predicted.get(mode) is None:
            continue
        p = float(predicted[mode])
        rows.append({"mode": mode, "predicted_s": p, "measured_s": measured, "error": (p - measured) / measured})
    return rows
