"""The host's figures (``host.*``, ``implementations.<name>.call_host`` and its kin): what issuing a
call costs the CPU, fitted to the microbenchmark ``validation/probes/host_probe.py`` (record
:data:`RECORD`), measured on the lent H200's host.

How each figure is read off the probe (every one a median, so no single row decides it):

* **a host time** is the smaller of two measurements of the same thing: calls issued behind a
  sleeping kernel (``host_s``: the host never waits for the GPU, unless the launch queue fills, which
  inflates it for launches with large parameters such as cuBLAS') and calls back to back with no
  sleep (``queued_s``: the host's pace wherever it is slower than the GPU's, which holds where the
  queued pace is past the kernels' own by :data:`HOST_BOUND`);
* ``host.view``: ops that launch nothing (transpose, view, reshape, unsqueeze, empty);
* ``host.op``: ATen ops that launch one kernel (add, scalar mul, cast, copy, softmax, sum, dropout);
* ``host.gemm``: one cuBLAS GEMM (bmm, mm, linear);
* ``host.launch_latency``: how much later a kernel starts after its launch than an event recorded
  in its place would: a user's timer around one op, less the op's host time, its kernel and the
  profile's ``event_overhead`` (single-kernel ops);
* ``host.launch_share``: the share of a fused call's host time (SDPA, Triton, FlexAttention) spent
  before its kernels launch: its user-timed call, less the latency, kernels and event overhead,
  over its host time (clipped to [0, 1]), at a short prefill (it launches at its end);
  ``host.split_launch_share`` the same at a decode that splits K/V (about halfway);
* ``implementations.<name>.call_host``: one forward call, as a user calls it (cuDNN through
  ``--impl auto``, which takes it on the H200; the others with the backend chosen once, outside the
  loop), at a short prefill; ``split_call_host`` the same at a decode (a split-KV kernel and its
  combine: the split plan and its buffers); ``backward_call_host``: a training step's host time
  less its forward's (``torch.autograd.grad``, the engine's start included);
* ``host.backward_pass`` and ``host.autograd_node``: a backward of a chain of 1 and of 4
  elementwise ops: the cost a node (less the op it dispatches) and what is left at one node.
* ``host.graph_launch``, ``host.graph_kernel_gap``: CUDA graphs of 1–64 tiny kernels replayed one
  at a time under a user's timer: a straight line's intercept, and its slope less the kernel.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from typing import Any

RECORD = "validation/h200/host-probe/host-probe.jsonl.gz"
COMMAND = "python3 validation/probes/host_probe.py host-probe.jsonl"
SOURCE = "measured-host"
DATE = "2026-12-03"

VIEWS = ("transpose", "view", "reshape_noop", "unsqueeze", "empty")
OPS = ("add", "mul_scalar", "to_fp32", "contiguous_copy", "softmax", "sum", "dropout")
GEMMS = ("bmm", "mm", "linear")
#: probe rows -> implementations: (implementation, the row's impl, shape) for one forward call
CALLS = (
    ("sdpa-flash", "sdpa-flash", "prefill"),
    ("sdpa-cudnn", "auto", "prefill"),
    ("sdpa-efficient", "sdpa-efficient", "prefill"),
    ("triton", "triton", "prefill"),
    ("flex", "flex", "prefill"),
)
SPLIT_CALLS = (("sdpa-flash", "sdpa-flash"), ("sdpa-cudnn", "auto"), ("flex", "flex"))
BACKWARD_CALLS = ("sdpa-flash", "sdpa-cudnn", "sdpa-efficient")
#: a queued pace this far past the kernels' own is the host's
HOST_BOUND = 1.05


def host_time(row: Mapping[str, Any], kernel_s: float | None = None) -> float:
    """The host's seconds a call: the behind-sleep measurement, or the queued pace where that is
    smaller and the host's (past the kernels' own by :data:`HOST_BOUND`)."""
    host = float(row["host_s"])
    queued = row.get("queued_s")
    kernel = kernel_s if kernel_s is not None else row.get("kernel_s")
    if queued is not None and kernel is not None and float(queued) > HOST_BOUND * float(kernel):
        return min(host, float(queued))
    return host


def _sig(x: float) -> float:
    return float(f"{x:.4g}")


def fitted(lines: Iterable[Mapping[str, Any]], event_overhead_s: float) -> dict[str, Any]:
    """Every figure the probe's ``lines`` give (seconds; ``launch_share`` a ratio), with the rows
    each was read off: ``{"host": {name: (value, rows)}, "implementations": {impl: {name: (value,
    rows)}}}``; figures without rows are left out."""
    rows = list(lines)
    by = {(r.get("section"), r.get("op")): r for r in rows if r.get("section") in ("host", "call")}
    out: dict[str, Any] = {"host": {}, "implementations": {}}

    def median_of(values: list[float], label: str) -> None:
        if values:
            out["host"][label] = (_sig(statistics.median(values)), len(values))

    median_of(
        [float(by["host", o]["host_s"]) for o in VIEWS if ("host", o) in by and "host_s" in by["host", o]], "view"
    )
    for label, names in (("op", OPS), ("gemm", GEMMS)):
        values = []
        for o in names:
            h, c = by.get(("host", o)), by.get(("call", o))
            if h is None or c is None or "host_s" not in h or "queued_s" not in c:
                continue
            values.append(host_time({**h, "queued_s": c["queued_s"]}, float(c["kernel_s"])))
        median_of(values, label)
    latency = []
    for o in OPS + GEMMS:
        h, c = by.get(("host", o)), by.get(("call", o))
        if h is None or c is None or "call_s" not in c or len(c.get("kernels", [])) != 1:
            continue
        host = host_time({**h, "queued_s": c["queued_s"]}, float(c["kernel_s"]))
        latency.append(float(c["call_s"]) - host - float(c["kernel_s"]) - event_overhead_s)
    median_of(latency, "launch_latency")

    sdpa = {
        (r["impl"], r["shape"], bool(r["backward"])): r for r in rows if r.get("section") == "sdpa" and "host_s" in r
    }
    if "launch_latency" in out["host"]:
        lat = out["host"]["launch_latency"][0]
        shares: dict[str, list[float]] = {"launch_share": [], "split_launch_share": []}
        for (impl, shape, backward), r in sdpa.items():
            if backward or impl == "sdpa-math" or (impl == "triton" and shape == "decode"):
                continue
            share = (float(r["call_s"]) - lat - float(r["kernel_s"]) - event_overhead_s) / host_time(r)
            key = "split_launch_share" if shape == "decode" else "launch_share"
            shares[key].append(min(max(share, 0.0), 1.0))
        for key, found in shares.items():
            if found:
                out["host"][key] = (_sig(statistics.median(found)), len(found))
    impls: dict[str, dict[str, tuple[float, int]]] = out["implementations"]
    for impl, row_impl, shape in CALLS:
        r = sdpa.get((row_impl, shape, False))
        if r is not None:
            impls.setdefault(impl, {})["call_host"] = (_sig(host_time(r)), 1)
    for impl, row_impl in SPLIT_CALLS:
        r = sdpa.get((row_impl, "decode", False))
        if r is not None:
            impls.setdefault(impl, {})["split_call_host"] = (_sig(host_time(r)), 1)
    for impl in BACKWARD_CALLS:
        fwd, step = sdpa.get((impl, "prefill", False)), sdpa.get((impl, "prefill", True))
        if fwd is not None and step is not None:
            impls.setdefault(impl, {})["backward_call_host"] = (_sig(host_time(step) - host_time(fwd)), 1)

    chains = {(r.get("kind"), r["n"]): r for r in rows if r.get("section") == "autograd"}
    if all(("mul", n) in chains for n in (1, 4, 16)) and "step_queued_s" in chains["mul", 16] and "op" in out["host"]:
        # host-bound paces of calls queued back to back (behind a sleeping kernel a backward's
        # launches can fill the queue): a node of a chain of 4 to 16 multiplications, and of views
        def backward(kind: str, n: int) -> float:
            r = chains[kind, n]
            return float(r["step_queued_s"]) - float(r["forward_queued_s"])

        per_node = (backward("mul", 16) - backward("mul", 4)) / 12
        out["host"]["autograd_node"] = (_sig(max(per_node - out["host"]["op"][0], 0.0)), 2)
        out["host"]["backward_pass"] = (_sig(max(backward("mul", 1) - per_node, 0.0)), 2)
        if all(("view", n) in chains for n in (1, 16)) and "view" in out["host"]:
            per_view = (backward("view", 16) - backward("view", 1)) / 15
            out["host"]["autograd_view_node"] = (_sig(max(per_view - out["host"]["view"][0], 0.0)), 2)
    elif ("mul", 1) in chains and ("mul", 4) in chains and "op" in out["host"]:
        bwd = {n: float(chains["mul", n]["step_host_s"]) - float(chains["mul", n]["forward_host_s"]) for n in (1, 4)}
        per_node = (bwd[4] - bwd[1]) / 3
        out["host"]["autograd_node"] = (_sig(per_node - out["host"]["op"][0]), 2)
        out["host"]["backward_pass"] = (_sig(bwd[1] - per_node), 2)

    graphs = sorted(
        (int(r["n"]), float(r["replay_call_s"]), r.get("kernel_us")) for r in rows if r.get("section") == "graph"
    )
    if len(graphs) >= 2 and graphs[0][2]:
        ns = [g[0] for g in graphs]
        ts = [g[1] for g in graphs]
        mean_n, mean_t = statistics.fmean(ns), statistics.fmean(ts)
        slope = sum((n - mean_n) * (t - mean_t) for n, t in zip(ns, ts)) / sum((n - mean_n) ** 2 for n in ns)
        out["host"]["graph_launch"] = (_sig(mean_t - slope * mean_n), len(graphs))
        out["host"]["graph_kernel_gap"] = (_sig(max(slope - float(graphs[0][2]) * 1e-6, 0.0)), len(graphs))
    return out


NOTES = {
    "view": "an ATen op that launches nothing (transpose, view, reshape, unsqueeze, empty), from Python: "
    "the median host time a call of {n}",
    "op": "an ATen op that launches one kernel (add, scalar mul, cast, copy, softmax, sum, dropout), from Python: "
    "the median host time a call of {n} (the smaller of calls behind a sleeping kernel and the host-bound queued pace)",
    "gemm": "one cuBLAS GEMM (bmm, mm, linear), from Python: the median host time a call of {n} (the queued pace: "
    "behind a sleeping kernel cuBLAS' launches fill the queue and the host waits)",
    "launch_latency": "how much later a kernel starts after its launch than an event recorded in its place (a user's "
    "timer around one op, less the op's host time, its kernel and event_overhead): median of {n} single-kernel ops",
    "launch_share": "the share of a fused call's host time spent before its kernels launch (its user-timed call, less "
    "launch_latency, its kernels and event_overhead, over its host time, clipped to [0, 1]): median of {n} SDPA, "
    "Triton and FlexAttention calls at a short prefill",
    "split_launch_share": "the same for a call that splits K/V: median of {n} SDPA and FlexAttention decodes (they "
    "launch about halfway through their host time: more of it comes after their launches)",
    "autograd_node": "the autograd engine's host time a backward node, beyond the op it dispatches: a backward of "
    "a chain of 4 elementwise ops against 1",
    "autograd_view_node": "the autograd engine's host time a backward node that dispatches only a view, beyond the "
    "view: a backward of a chain of 16 transposes against 1, host-bound queued paces",
    "backward_pass": "the host time a backward pass (torch.autograd.grad) costs at one node, beyond the node: "
    "the engine's start and the gradients' return",
    "graph_launch": "a user's timer around one replay of a CUDA graph, less its kernels: the intercept of a "
    "straight line through graphs of 1 to 64 tiny kernels ({n} graphs)",
    "graph_kernel_gap": "what a kernel inside a replayed graph costs beyond its own time: the slope of that line "
    "less the tiny kernel's CUPTI time",
}
IMPL_NOTES = {
    "call_host": "host time of one forward call at a short prefill (batch 1, 8 heads, 128 tokens, d 64, bf16)",
    "split_call_host": "host time of one forward decode that splits K/V (batch 8, 32 heads on 8, 4096 keys, d 128, "
    "bf16: the split plan, its buffers and the combine's launch)",
    "backward_call_host": "host time of a training step's backward at the short prefill (torch.autograd.grad of the "
    "call's output: the engine's start and the backward node), the step's less the forward's",
}


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.4g} us" if seconds >= 1e-6 or seconds == 0 else f"{seconds * 1e9:.4g} ns"


def figures(lines: Iterable[Mapping[str, Any]], event_overhead_s: float) -> dict[str, tuple[str, str]]:
    """The figures as ``memmodel calibrate`` writes them: dotted profile path -> (value, note)."""
    rows = list(lines)
    found = fitted(rows, event_overhead_s)
    env = next((r for r in rows if r.get("section") == "env"), {})
    where = f"; host CPU {env.get('cpu', '?')}, Python {env.get('python', '?')}, torch {env.get('torch', '?')}"
    out: dict[str, tuple[str, str]] = {}
    for name, (value, n) in found["host"].items():
        shown = f"{value:.4g}" if name.endswith("launch_share") else _us(value)
        out[f"host.{name}"] = (shown, NOTES[name].format(n=n) + where)
    for impl, mine in found["implementations"].items():
        for name, (value, _) in mine.items():
            out[f"implementations.{impl}.{name}"] = (_us(value), IMPL_NOTES[name] + where)
    return out


def apply(data: dict[str, Any], lines: list[Mapping[str, Any]], event_overhead_s: float) -> dict[str, Any]:
    """``data`` (a profile's YAML mapping) with the host figures the probe's ``lines`` give, each
    citing :data:`SOURCE`."""
    found = fitted(lines, event_overhead_s)
    if not found["host"] and not found["implementations"]:
        return data
    env = next((r for r in lines if r.get("section") == "env"), {})
    where = f"; host CPU {env.get('cpu', '?')}, Python {env.get('python', '?')}: memmodel.calibration.host"
    host = dict(data.get("host") or {})
    for name, (value, n) in found["host"].items():
        shown = f"{value:.4g}" if name.endswith("launch_share") else _us(value)
        host[name] = {"value": shown, "source": SOURCE, "note": NOTES[name].format(n=n) + where}
    data["host"] = host
    impls = data.setdefault("implementations", {})
    for impl, figures in found["implementations"].items():
        mine = dict(impls.get(impl) or {})
        for name, (value, _) in figures.items():
            mine[name] = {"value": _us(value), "source": SOURCE, "note": IMPL_NOTES[name] + where}
        impls[impl] = mine
    from .serving import cite

    return cite(data, SOURCE, "memmodel host microbenchmark", RECORD, COMMAND, env, date=DATE)


def with_host_figures(profile: Any, rows: Iterable[Mapping[str, Any]]) -> Any:
    """``profile`` with the host figures ``rows`` (the host step's, :mod:`memmodel.gpu.calibrate_host`)
    give in place of its own, each implementation's call figures too; what the rows do not
    measure stays the profile's. A validate run measures its own host first: a host's dispatch
    varied two- to threefold between the lent machines, so call times are scored with the host
    figures of the machine that ran them."""
    import dataclasses

    from ..hardware.profile import HostFigures

    found = fitted(list(rows), float(profile.event_overhead_s or 0.0))
    if not found["host"] and not found["implementations"]:
        return profile
    fields = {f"{name}_s" if not name.endswith("launch_share") else name: v for name, (v, _) in found["host"].items()}
    base = profile.host or HostFigures()
    out = dataclasses.replace(profile, host=dataclasses.replace(base, **fields))
    for impl, figures in found["implementations"].items():
        out = out.with_implementation_figures(impl, **{f"{name}_s": v for name, (v, _) in figures.items()})
    return out
