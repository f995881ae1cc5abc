"""Context parallelism: attention over a sequence split across P GPUs, per GPU and per step.

Three schemes; ring and Ulysses as ``memmodel.gpu.context_parallel`` runs them (and as the validation
measures), the hybrid of both modelled only (no runner yet: issue #31):

**Ring** (``ring``): GPU r holds N/P queries and N/P keys/values. In step i it computes its
queries against the K/V block it holds (one attention kernel, which also gives the block's
logsumexp) while it sends that block to GPU r+1 and receives the next from GPU r−1 (NCCL
send/recv on a side stream), then merges the block's output into its running output by
logsumexp (the *merge kernels*: :data:`MERGE_OPS`). P steps; the last sends nothing. Causal
attention uses the load-balanced "zigzag" split: the sequence is cut into 2P chunks and GPU r
holds chunks r and 2P−1−r, so step 0 is causal on its own N/P tokens and every later step
computes exactly half a block (all its queries against the first half of the K/V block held,
or the second half of its queries against the whole block).

The backward pass runs the ring again: each step computes a block's dQ, dK, dV with the
forward's final output and logsumexp (FlashAttention-2's backward kernel), adds dQ into the
GPU's own and dK, dV into the block's running sums, which travel around the ring with the
block and reach its owner after step P−1.

**Ulysses** (``ulysses``, DeepSpeed-Ulysses): an all-to-all re-partitions Q, K, V from N/P
tokens × all heads to all N tokens × H/P heads; each GPU runs full-sequence attention on its
heads; a second all-to-all brings O back to N/P tokens × all heads (backward: dO there, dQ,
dK, dV back). Nothing overlaps: each collective waits for the data it moves.

**Hybrid** (``hybrid``, ``--ulysses-degree U``: unified sequence parallelism, Ulysses inside a group
of U GPUs, a ring across the P/U groups): an all-to-all inside each group re-partitions Q, K, V
from N/P tokens × all heads to the group's N·U/P tokens × H/U heads; the groups then run the ring
on those heads (P/U steps, K/V blocks of N·U/P tokens; causal: zigzag over the 2·P/U chunks of the
groups), and a second all-to-all inside the group brings O back (backward: dO in, the ring's
backward, dQ, dK, dV out). U = 1 is the ring, U = P is Ulysses.

**Overlap rule** (ring): a step takes ``max(compute + merge, link start + link)``: the attention
and merge kernels run on the compute stream while the link carries the step's messages. In the
forward, the attention kernel is dispatched before NCCL's send/recv (both wait on the same point
of the compute stream) and takes the SMs: the transfer starts once ``interconnect.p2p_idle_sms``
of them hold no attention CTA (:func:`memmodel.timing.idle_share`; at the kernel's end for most
grids; validation/h200x2/probe-10). In the backward, the short first kernel leaves SMs idle, NCCL
starts in its tail and the main kernel runs on the SMs it leaves (``interconnect.p2p_sms`` held,
measured by ``calibrate --gpus``: :func:`_beside_transfer`). Ulysses adds everything. Link time
is :meth:`memmodel.hardware.Interconnect.message_time`.

Every kernel's bytes and time come from the single-GPU model (:func:`memmodel.model.compare`)
on the per-GPU shape of each step, or from :data:`MERGE_OPS`/the pack copies below with the
profile's measured elementwise and copy rates. Scalars only (no grids).
"""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Any

from .errors import WorkloadError
from .frozen import frozen
from .hardware import Profile
from .hardware.interconnect import Interconnect
from .traffic.ledger import AlgorithmTraffic, Kernel, KernelBuilder
from .workload import STAT_BYTES, Workload

SCHEMES = ("ring", "ulysses", "hybrid")

#: Step kinds of the ring (rank r, step i, holding the block of rank j = r − i mod P):
#: ``full`` (not causal), ``diagonal`` (causal, own block), ``kv_half`` (causal, j < r: all
#: queries against the first half of the block), ``q_half`` (causal, j > r: the second half
#: of the queries against the whole block)
STEP_KINDS = ("full", "diagonal", "kv_half", "q_half")


def step_kind(rank: int, step: int, p: int, causal: bool) -> str:
    if not causal:
        return "full"
    if step == 0:
        return "diagonal"
    source = (rank - step) % p
    return "kv_half" if source < rank else "q_half"


def step_shape(kind: str, n_local: int) -> tuple[int, int, bool]:
    """(query rows, key/value rows, causal) of the attention kernel of a step."""
    half = n_local // 2
    return {
        "full": (n_local, n_local, False),
        "diagonal": (n_local, n_local, True),
        "kv_half": (n_local, half, False),
        "q_half": (half, n_local, False),
    }[kind]


#: The merge of one block's output into the running one, as ``gpu.context_parallel.merge``
#: runs it (``m`` = batch × heads × merged rows, ``d`` the head dimension, ``e`` the element
#: bytes, statistics fp32): (kernel, op, bytes read, bytes written) as functions of (m, d, e).
#:   new = logaddexp(lse, lse_blk); w = exp(lse_blk − new); out.lerp_(o_blk, w.to(e)); lse.copy_(new)
MERGE_OPS: tuple[tuple[str, str, Any, Any], ...] = (
    ("merge_logaddexp", "scale", lambda m, d, e: 2 * 4 * m, lambda m, d, e: 4 * m),
    ("merge_sub", "scale", lambda m, d, e: 2 * 4 * m, lambda m, d, e: 4 * m),
    ("merge_exp", "scale", lambda m, d, e: 4 * m, lambda m, d, e: 4 * m),
    ("merge_cast", "scale", lambda m, d, e: 4 * m, lambda m, d, e: e * m),
    ("merge_lerp", "scale", lambda m, d, e: 2 * e * m * d + e * m, lambda m, d, e: e * m * d),
    ("merge_lse_copy", "copy", lambda m, d, e: 4 * m, lambda m, d, e: 4 * m),
)


def merge_bytes(m: int, d: int, e: int) -> tuple[int, int]:
    """(read, written) HBM bytes of one merge over ``m`` rows: the sum of :data:`MERGE_OPS`."""
    return sum(r(m, d, e) for _, _, r, _ in MERGE_OPS), sum(w(m, d, e) for _, _, _, w in MERGE_OPS)


def _elementwise(name: str, op: str, read: int, written: int, pass_: str, tensor: str) -> Kernel:
    return (
        KernelBuilder(name, pass_)
        .read(tensor, "intermediate", read, read, f"{name}: read")
        .write(tensor, "intermediate", written, f"{name}: write")
        .build(op=op)
    )


def merge_kernels(m: int, d: int, e: int) -> list[Kernel]:
    return [_elementwise(n, op, r(m, d, e), w(m, d, e), "forward", "O,lse") for n, op, r, w in MERGE_OPS]


def add_kernel(name: str, nbytes: int, pass_: str = "backward", tensor: str = "dQ") -> Kernel:
    """``acc.add_(x)`` over ``nbytes`` per tensor: read both, write one."""
    return _elementwise(name, "scale", 2 * nbytes, nbytes, pass_, tensor)


def copy_kernel(name: str, nbytes: int, pass_: str, tensor: str) -> Kernel:
    return _elementwise(name, "copy", nbytes, nbytes, pass_, tensor)


# ---------------------------------------------------------------------------------------
# Link times


def node_link(ic: Interconnect, p: int) -> tuple[Interconnect, bool]:
    """The link a ring step of P GPUs is paced by: the network's once the ring leaves a node."""
    if ic.gpus_per_node and p > ic.gpus_per_node:
        across = ic.across_nodes()
        if across is None:
            raise WorkloadError(
                f"--context-parallel {p} spans more than one node of {ic.gpus_per_node} GPUs and the profile "
                "gives no interconnect.inter_node_bandwidth"
            )
        return across, True
    return ic, False


def send_recv_time(ic: Interconnect, p: int, nbytes: int) -> float:
    """One ring step's message group of ``nbytes`` (each GPU sends to the next, receives from the last)."""
    link, _ = node_link(ic, p)
    return link.message_time("send_recv", nbytes)


def all_to_all_time(ic: Interconnect, p: int, buffer_bytes: int) -> float:
    """An all-to-all of ``buffer_bytes`` per GPU: (P−1)/P of it leaves the GPU. Through a switch
    the GPU's whole bandwidth carries it; in a mesh each peer's share goes over its own link;
    past one node the part bound for other nodes goes over the network at the same time."""
    if p <= 1:
        return 0.0
    chunk = buffer_bytes / p
    g = ic.gpus_per_node if ic.gpus_per_node and p > ic.gpus_per_node else p
    on_node = chunk * (g - 1)
    eff = ic.efficiency("all_to_all", buffer_bytes)
    if ic.topology == "mesh":
        per_peer = ic.peer_bandwidth_bytes_per_s()
        t_on = (ic.latency_s if eff is None else 0.0) + chunk / (per_peer * (eff or 1.0))
    else:
        t_on = (ic.latency_s if eff is None else 0.0) + on_node / (ic.bandwidth_bytes_per_s * (eff or 1.0))
    if g == p:
        return t_on
    across, _ = node_link(ic, p)
    t_off = across.latency_s + chunk * (p - g) / across.bandwidth_bytes_per_s
    return max(t_on, t_off)


# ---------------------------------------------------------------------------------------
# Results


@frozen
class Step:
    """One step of one pass on the GPU that takes longest in it."""

    pass_: str  # forward | backward
    index: int
    kind: str  # a STEP_KINDS entry, or the Ulysses phase
    compute_s: float  # attention kernels
    merge_s: float  # merge, accumulation, pack/unpack kernels
    link_bytes: int  # sent by each GPU during the step
    link_s: float
    time_s: float
    overlap: str  # "max(compute + merge, link)", "max(compute + merge, link start + link)" or "sum"
    kernels: tuple[str, ...] = ()
    #: when the step's transfer starts after the step does (it waits for the SMs it needs)
    link_start_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "pass": self.pass_,
            "index": self.index,
            "kind": self.kind,
            "compute_s": self.compute_s,
            "merge_s": self.merge_s,
            "link_bytes": self.link_bytes,
            "link_s": self.link_s,
            "time_s": self.time_s,
            "hidden_link_s": (
                max(0.0, min(self.link_start_s + self.link_s, self.compute_s + self.merge_s) - self.link_start_s)
                if self.overlap != "sum"
                else 0.0
            ),
            "link_start_s": self.link_start_s,
            "overlap": self.overlap,
            "kernels": list(self.kernels),
        }


@frozen
class ParallelAlgorithm:
    """One algorithm (standard or tiled) run context-parallel: GPU 0's kernels, the steps, the wall time."""

    name: str
    traffic: AlgorithmTraffic  # GPU 0's kernels over all steps, named "s<i>.<kernel>"
    kernel_times: tuple[Any, ...]  # KernelTiming of each
    steps: tuple[Step, ...]
    wall_time_s: float
    link_bytes: int  # sent by each GPU over the whole run
    single_gpu_time_s: float

    @property
    def speedup(self) -> float:
        return self.single_gpu_time_s / self.wall_time_s if self.wall_time_s else float("inf")

    def pass_time(self, pass_: str) -> float:
        return sum(s.time_s for s in self.steps if s.pass_ == pass_)


@frozen
class ParallelResult:
    """Standard and tiled attention split over ``p`` GPUs by one context-parallel scheme."""

    workload: Workload
    profile: Profile
    p: int
    scheme: str
    standard: ParallelAlgorithm
    tiled: ParallelAlgorithm
    single: Any  # the single-GPU Comparison
    per_gpu: Any  # a Comparison of GPU 0's kernels (its times the wall times)
    notes: tuple[str, ...] = field(default=())
    #: the hybrid scheme's GPUs per Ulysses group (None for ring and Ulysses)
    ulysses_degree: int | None = None


def check(workload: Workload, p: int, scheme: str, ulysses_degree: int | None = None) -> None:
    """Refuse what the scheme cannot split, in one line."""
    if scheme not in SCHEMES:
        raise WorkloadError(f"unknown --cp-scheme {scheme!r}: accepted are {', '.join(SCHEMES)}")
    if p < 1:
        raise WorkloadError(f"--context-parallel must be at least 1 (got {p})")
    if ulysses_degree is not None and scheme != "hybrid":
        raise WorkloadError("--ulysses-degree goes with --cp-scheme hybrid (Ulysses inside groups, a ring across them)")
    if scheme == "hybrid":
        u = ulysses_degree
        if u is None:
            raise WorkloadError("--cp-scheme hybrid needs --ulysses-degree U (the GPUs of one Ulysses group)")
        if u < 1 or p % u:
            raise WorkloadError(f"--ulysses-degree {u} must divide --context-parallel {p} (groups of U GPUs)")
        for what, h in (("--heads", workload.heads), ("--kv-heads", workload.kv_heads_)):
            if not workload.is_grid and int(h) % u:
                raise WorkloadError(
                    f"--cp-scheme hybrid splits heads over its {u} GPUs of a group: {what} ({h}) must be a "
                    f"multiple of {u}"
                )
        if not workload.is_grid:
            step = 2 * p if workload.causal and p // u > 1 else p
            if int(workload.n) % step:
                raise WorkloadError(
                    f"--cp-scheme hybrid over {p} GPUs{' (zigzag across its groups)' if step > p else ''}: "
                    f"--n ({int(workload.n)}) must be a multiple of {step}"
                )
        scheme = "ring"  # and the ring's own conditions on the whole sequence
    if workload.is_grid:
        raise WorkloadError("--context-parallel takes one workload, not a grid")
    if workload.n_kv_ != workload.n:
        raise WorkloadError("--context-parallel splits one sequence: --n-kv must equal --n")
    if workload.dropout:
        raise WorkloadError("--context-parallel is modelled without dropout")
    n = int(workload.n)
    if scheme == "ulysses":
        for what, h in (("--heads", workload.heads), ("--kv-heads", workload.kv_heads_)):
            if int(h) % p:
                raise WorkloadError(
                    f"--cp-scheme ulysses splits heads over {p} GPUs: {what} ({h}) must be a multiple of {p}"
                )
        if n % p:
            raise WorkloadError(f"--n ({n}) must be a multiple of --context-parallel ({p})")
    elif workload.causal and p > 1:
        if n % (2 * p):
            raise WorkloadError(
                f"causal ring attention splits the sequence into 2P = {2 * p} chunks (zigzag): "
                f"--n ({n}) must be a multiple of {2 * p}"
            )
    elif n % p:
        raise WorkloadError(f"--n ({n}) must be a multiple of --context-parallel ({p})")


def context_parallel(
    workload: Workload,
    profile: Profile,
    p: int,
    scheme: str = "ring",
    *,
    impl: str = "auto",
    standard: str = "algorithm0",
    ulysses_degree: int | None = None,
    **options: Any,
) -> ParallelResult:
    """``workload`` (the whole sequence) on ``p`` GPUs of ``profile`` with ``scheme``
    (``hybrid``: Ulysses over groups of ``ulysses_degree`` GPUs, a ring across the groups);
    ``options`` are :class:`memmodel.options.Options` fields (``backward`` adds the
    backward ring)."""
    from .model import compare

    check(workload, p, scheme, ulysses_degree)
    timing = options.get("timing", "kernel")
    if timing != "kernel":
        from .errors import TimingError
        from .host import check_timing

        check_timing(timing)
        raise TimingError(
            f"--timing {timing} with --context-parallel is not modelled: a step's time is its GPUs' kernels and "
            "messages (use --timing kernel)"
        )
    if workload.kv_dtype is not None:
        raise WorkloadError(
            f"--kv-dtype {workload.kv_dtype} with --context-parallel is not modelled: context parallelism splits a "
            "prefill's sequence over GPUs, not a decode's FP8 cache"
        )
    if profile.interconnect is None and p > 1:
        raise WorkloadError(f"{profile.name} has no interconnect section: context parallelism needs its links")
    from .options import options_for

    backward = bool(options.get("backward"))
    cache: dict[tuple[Any, ...], Any] = {}

    def run(w: Workload, sms: int | None = None) -> Any:
        """The single-GPU model of a per-GPU shape; with ``sms``, on that many SMs (the ones an
        overlapped transfer leaves the kernels)."""
        key = (w.n, w.n_kv_, w.heads, w.kv_heads_, w.causal, sms)
        if key not in cache:
            prof = profile if sms is None else dataclasses.replace(profile, sm_count=sms)
            cache[key] = compare(w, prof, options_for(impl, w, prof, **options), standard=standard)
        return cache[key]

    single = run(workload)
    if scheme == "ring":
        algs = [_ring(workload, profile, p, run, which, backward) for which in ("standard", "tiled")]
    elif scheme == "hybrid":
        assert ulysses_degree is not None
        algs = [_hybrid(workload, profile, p, ulysses_degree, run, which, backward) for which in ("standard", "tiled")]
    else:
        algs = [_ulysses(workload, profile, p, run, which, backward) for which in ("standard", "tiled")]
    results = []
    for which, (kernels, timings, steps, link) in zip(("standard", "tiled"), algs):
        ev = getattr(single, which)
        traffic = AlgorithmTraffic(ev.traffic.name, ev.traffic.variant, tuple(kernels), dict(ev.traffic.params))
        wall = sum(s.time_s for s in steps)
        results.append(
            ParallelAlgorithm(which, traffic, tuple(timings), tuple(steps), wall, link, float(ev.timing.time_s))
        )
    per_gpu = _as_comparison(single, results)
    return ParallelResult(
        workload, profile, p, scheme, results[0], results[1], single, per_gpu, _notes(profile, p), ulysses_degree
    )


def _notes(profile: Profile, p: int) -> tuple[str, ...]:
    ic = profile.interconnect
    out = []
    if ic is not None and p > 1:
        if not ic.send_recv_efficiency:
            out.append(
                f"{profile.name} has no measured NCCL curve: each message takes latency + bytes / link bandwidth "
                "(optimistic for mid-size messages; memmodel calibrate --gpus 2 measures the curve)"
            )
        if not ic.p2p_sms:
            out.append(
                f"{profile.name} gives no interconnect.p2p_sms: a ring step's transfer is taken to leave every SM "
                "to the attention beside it (NCCL's send/recv held 6 of an H200's 132; memmodel calibrate --gpus 2 "
                "measures it)"
            )
        if not ic.p2p_idle_sms:
            out.append(
                f"{profile.name} gives no interconnect.p2p_idle_sms: a ring step's transfer is taken to start when the "
                "forward kernel beside it ends (on an H200 it starts once 32 SMs are idle; probe 10 measures it)"
            )
        if ic.gpus_per_node and p > ic.gpus_per_node:
            out.append(f"P = {p} spans nodes of {ic.gpus_per_node} GPUs: modelled only, never validated")
        elif p > 2:
            out.append(f"P = {p}: modelled only (validated at P = 2)")
    return tuple(out)


def _renamed(kernel: Kernel, prefix: str) -> Kernel:
    name = f"{prefix}.{kernel.name}"
    return dataclasses.replace(
        kernel, name=name, transfers=tuple(dataclasses.replace(t, kernel=name) for t in kernel.transfers)
    )


def _attention(
    run: Any, w: Workload, which: str, pass_: str, sms: int | None = None
) -> tuple[list[Kernel], list[Any], float]:
    """The attention kernels of one pass on a per-GPU shape, their timings and their total time
    (with ``sms``: on that many SMs)."""
    c = run(w, sms)
    ev = getattr(c, which)
    pairs = [(k, t) for k, t in zip(ev.traffic.kernels, ev.timing.kernels) if k.pass_ == pass_]
    return [k for k, _ in pairs], [t for _, t in pairs], float(sum(float(t.time_s) for _, t in pairs))


def _beside_transfer(run: Any, w: Workload, which: str, pass_: str, alone_s: float, link_s: float, sms: int) -> float:
    """The step's attention time with a transfer of ``link_s`` beside it, whose NCCL kernel
    leaves the attention ``sms`` SMs while it runs (:func:`beside_transfer_time`)."""
    _, _, fewer_s = _attention(run, w, which, pass_, sms)
    ctas, per_sm = fused_grid(run(w))
    return beside_transfer_time(ctas, per_sm, alone_s, fewer_s, link_s, sms)


def exchange_start_share(c: Any, w: Workload, profile: Profile) -> float:
    """The share of a ring step's forward kernel after which the send/recv posted beside it
    starts: NCCL's kernel, ready when the attention is, finds the SMs taken (the attention
    kernel is dispatched first) and starts once ``interconnect.p2p_idle_sms`` of them hold no
    attention CTA (:func:`memmodel.timing.idle_share`); a profile without the figure waits for
    the kernel's end. ``c`` is the comparison of the step's shape ``w``."""
    from . import implementations
    from .timing import idle_share

    ic = profile.interconnect
    params = c.tiled.traffic.params
    need = ic.p2p_idle_sms if ic is not None and ic.p2p_idle_sms else profile.sm_count
    spec = implementations.get(c.options.implementation)
    share = profile.mma_sync_one_cta_share if spec is not None and spec.instructions == "mma_sync" else None
    return idle_share(
        w,
        int(params["block_q"]),
        int(params["block_kv"]),
        profile.sm_count,
        int(params.get("ctas_per_sm") or 1),
        share,
        need,
        paired=implementations.pairs_causal_q_blocks(c.options.implementation, int(params["block_q"])),
    )


def fused_grid(c: Any) -> tuple[float, float]:
    """(CTAs of the fused attention kernels, CTAs per SM they keep) of a comparison's tiled
    algorithm: what :func:`beside_transfer_time` places."""
    ctas = sum(float(k.ctas) for k in c.tiled.traffic.kernels if k.overlap == "serial-compute")
    return ctas, float(c.tiled.traffic.params.get("ctas_per_sm") or 1)


def beside_transfer_time(
    ctas: float, ctas_per_sm: float, alone_s: float, fewer_s: float, link_s: float, sms: int
) -> float:
    """An attention kernel's time with a transfer of ``link_s`` beside it that leaves it ``sms``
    SMs, from its time alone and on ``sms`` SMs. A grid whose ``ctas`` all fit the slots of
    ``sms`` SMs at once (``ctas_per_sm`` each) is placed at launch and keeps that placement to
    its end: its time on ``sms`` SMs. A grid of several waves is slowed only while the SMs are
    held: by ``min(link, alone)`` × (its time on ``sms`` SMs / alone − 1). Both rules together
    match calibrate's overlap references (:func:`memmodel.calibration.interconnect.p2p_sms`)."""
    if ctas and ctas <= ctas_per_sm * sms:
        return fewer_s
    if alone_s <= 0:
        return alone_s
    return alone_s + min(link_s, alone_s) * (fewer_s / alone_s - 1.0)


def _ring(
    workload: Workload, profile: Profile, p: int, run: Any, which: str, backward: bool
) -> tuple[list[Kernel], list[Any], list[Step], int]:
    from .timing import kernel_time

    w = workload
    e = w.element_bytes
    b, h, hk, d = int(w.batch), int(w.heads), int(w.kv_heads_), int(w.d)
    n_local = int(w.n) // p
    ic = profile.interconnect
    kv_msg = 2 * b * hk * n_local * d * e  # K and V of one block
    out_kernels: list[Kernel] = []
    out_times: list[Any] = []
    steps: list[Step] = []
    link_total = 0

    def local(kind: str) -> Workload:
        nq, nkv, causal = step_shape(kind, n_local)
        return w.with_(n=nq, n_kv=nkv, causal=causal)

    def timed(kernels: list[Kernel]) -> tuple[list[Any], float]:
        ts = [kernel_time(k, profile, w.dtype) for k in kernels]
        return ts, float(sum(float(t.time_s) for t in ts))

    def step_work(
        kind: str, i: int, pass_: str, link_s: float, held: int
    ) -> tuple[list[Kernel], list[Any], float, list[Kernel], list[Any], float, float]:
        """One rank's attention in step ``i`` (its kernels, timings, time), the merge or
        gradient kernels after it (the same), and when the step's transfer starts."""
        att_k, att_t, att_s = _attention(run, local(kind), which, pass_)
        start_s = 0.0
        if link_s > 0 and which == "tiled" and pass_ == "forward":
            # the attention kernel takes the SMs first: the transfer waits for its tail
            start_s = att_s * exchange_start_share(run(local(kind)), local(kind), profile)
        elif held and which == "tiled":  # the eager baseline's products are not placed this way: left as they are
            att_s = _beside_transfer(run, local(kind), which, pass_, att_s, link_s, profile.sm_count - held)
        nq, nkv, _ = step_shape(kind, n_local)
        extra: list[Kernel] = []
        if i > 0 and pass_ == "forward":
            extra = merge_kernels(b * h * nq, d, e)
        elif i > 0:
            # the second half's logsumexp made contiguous for the backward kernel
            extra = [copy_kernel("lse_half", b * h * nq * STAT_BYTES, pass_, "lse")] if kind == "q_half" else []
            extra.append(add_kernel("acc_dQ", b * h * nq * d * e, tensor="dQ"))
            extra += [add_kernel(f"acc_{t}", b * hk * nkv * d * e, tensor=t) for t in ("dK", "dV")]
        ex_t, ex_s = timed(extra)
        return att_k, att_t, att_s, extra, ex_t, ex_s, start_s

    passes = ("forward", "backward") if backward else ("forward",)
    for pass_ in passes:
        for i in range(p):
            sent = 0
            if i < p - 1:
                sent += kv_msg
            if pass_ == "backward" and i > 0:
                sent += kv_msg  # the running dK, dV of the block held in step i − 1
            assert ic is not None or p == 1
            link_s = 0.0
            if sent:
                assert ic is not None
                link_s = send_recv_time(ic, p, kv_msg) * (sent // kv_msg)
            # NCCL's send/recv kernel holds SMs while it runs beside the step's attention
            held = ic.p2p_sms if ic is not None and sent else 0
            worst: tuple[float, float, float, list[Kernel], list[Any], str] | None = None
            # the ranks of a step run a handful of shapes (step_kind): each is modelled once
            by_kind: dict[str, tuple[list[Kernel], list[Any], float, list[Kernel], list[Any], float, float]] = {}
            for rank in range(p):
                kind = step_kind(rank, i, p, w.causal)
                if kind not in by_kind:
                    by_kind[kind] = step_work(kind, i, pass_, link_s, held)
                att_k, att_t, att_s, extra, ex_t, ex_s, start_s = by_kind[kind]
                # the send/recv ends on both GPUs together: the step ends when the slower one is done
                if worst is None or max(att_s + ex_s, start_s + link_s) > max(worst[0] + worst[1], worst[2] + link_s):
                    worst = (att_s, ex_s, start_s, att_k + extra, att_t + ex_t, kind)
                if rank == 0:
                    out_kernels += [_renamed(k, f"{pass_[0]}{i}") for k in att_k + extra]
                    out_times += att_t + ex_t
            assert worst is not None
            link_total += sent
            compute_s, merge_s, start_s = worst[0], worst[1], worst[2]
            steps.append(
                Step(
                    pass_,
                    i,
                    worst[5],
                    compute_s,
                    merge_s,
                    sent,
                    link_s,
                    max(compute_s + merge_s, start_s + link_s),
                    "max(compute + merge, link start + link)" if start_s > 0 else "max(compute + merge, link)",
                    tuple(k.name for k in worst[3]),
                    start_s,
                )
            )
        if pass_ == "backward" and p > 1:
            assert ic is not None
            t = send_recv_time(ic, p, kv_msg)
            link_total += kv_msg
            steps.append(Step(pass_, p, "dkv_home", 0.0, 0.0, kv_msg, t, t, "sum", ()))
    return out_kernels, out_times, steps, link_total


def ulysses_kernels(w: Workload, p: int, pass_: str) -> tuple[list[Kernel], list[Kernel], int, int]:
    """(kernels before the attention, after it, bytes of the first all-to-all's buffer, of the
    second's) on each GPU, as ``gpu.context_parallel.ulysses`` runs them."""
    e = w.element_bytes
    b, h, hk, d = int(w.batch), int(w.heads), int(w.kv_heads_), int(w.d)
    n_local = int(w.n) // p
    q = b * n_local * h * d * e  # Q (or O, dO, dQ) held by one GPU, any layout
    kv = b * n_local * hk * d * e
    qkv = q + 2 * kv
    tag = pass_[0]
    if pass_ == "forward":
        before = [copy_kernel(f"{tag}.pack_{t}", nb, pass_, t) for t, nb in (("Q", q), ("K", kv), ("V", kv))]
        if b > 1:  # tokens from P GPUs side by side: one copy per tensor (a view when batch is 1)
            before += [copy_kernel(f"{tag}.unpack_{t}", nb, pass_, t) for t, nb in (("Q", q), ("K", kv), ("V", kv))]
        after = []
        if b > 1:
            after.append(copy_kernel(f"{tag}.pack_O", q, pass_, "O"))
        after.append(copy_kernel(f"{tag}.unpack_O", q, pass_, "O"))
        return before, after, qkv, q
    before = [copy_kernel(f"{tag}.pack_dO", q, pass_, "dO")]
    if b > 1:
        before.append(copy_kernel(f"{tag}.unpack_dO", q, pass_, "dO"))
    after = [copy_kernel(f"{tag}.pack_{t}", nb, pass_, t) for t, nb in (("dQ", q), ("dK", kv), ("dV", kv))]
    after += [copy_kernel(f"{tag}.unpack_{t}", nb, pass_, t) for t, nb in (("dQ", q), ("dK", kv), ("dV", kv))]
    return before, after, q, qkv


def _ulysses(
    workload: Workload, profile: Profile, p: int, run: Any, which: str, backward: bool
) -> tuple[list[Kernel], list[Any], list[Step], int]:
    w = workload
    local = w.with_(heads=int(w.heads) // p, kv_heads=int(w.kv_heads_) // p)
    out_kernels: list[Kernel] = []
    out_times: list[Any] = []
    steps: list[Step] = []
    link_total = 0
    for pass_ in ("forward", "backward") if backward else ("forward",):
        before, after, buf1, buf2 = ulysses_kernels(w, p, pass_)
        att_k, att_t, att_s = _attention(run, local, which, pass_)
        for phase, kernels, buf in (
            ("all_to_all_in", before, buf1),
            ("attention", None, 0),
            ("all_to_all_out", after, buf2),
        ):
            if kernels is None:
                out_kernels += [_renamed(k, pass_[0]) for k in att_k]
                out_times += att_t
                steps.append(
                    Step(pass_, len(steps), phase, att_s, 0.0, 0, 0.0, att_s, "sum", tuple(k.name for k in att_k))
                )
                continue
            step, ts = _all_to_all_step(profile, w.dtype, pass_, len(steps), phase, kernels, buf, p)
            link_total += step.link_bytes
            out_kernels += kernels
            out_times += ts
            steps.append(step)
    return out_kernels, out_times, steps, link_total


def _all_to_all_step(
    profile: Profile, dtype: str, pass_: str, index: int, phase: str, kernels: list[Kernel], buf: int, p: int
) -> tuple[Step, list[Any]]:
    """One all-to-all over ``p`` GPUs of a ``buf``-byte buffer with its pack copies ``kernels``:
    the step (copies, then the exchange, nothing overlapped) and the copies' timings."""
    from .timing import kernel_time

    ic = profile.interconnect
    ts = [kernel_time(k, profile, dtype) for k in kernels]
    copy_s = float(sum(float(t.time_s) for t in ts))
    link_s = all_to_all_time(ic, p, buf) if ic is not None and p > 1 else 0.0
    names = tuple(k.name for k in kernels)
    return Step(pass_, index, phase, 0.0, copy_s, buf * (p - 1) // p, link_s, copy_s + link_s, "sum", names), ts


def _hybrid(
    workload: Workload, profile: Profile, p: int, u: int, run: Any, which: str, backward: bool
) -> tuple[list[Kernel], list[Any], list[Step], int]:
    """Ulysses inside groups of ``u`` GPUs, the ring across the ``p // u`` groups (module docstring):
    per pass, the group's all-to-all in, the ring's steps on H/U heads, the all-to-all out."""
    w = workload
    r = p // u
    heads = w.with_(heads=int(w.heads) // u, kv_heads=int(w.kv_heads_) // u)
    ring_k, ring_t, ring_steps, link_total = _ring(heads, profile, r, run, which, backward)
    out_kernels: list[Kernel] = []
    out_times: list[Any] = []
    steps: list[Step] = []
    for pass_ in ("forward", "backward") if backward else ("forward",):
        # the group's share of the sequence, N·U/P tokens, split over its U GPUs as Ulysses splits N
        before, after, buf1, buf2 = ulysses_kernels(w.with_(n=int(w.n) // r), u, pass_)
        phases: list[tuple[str, list[Kernel] | None, int]] = [("all_to_all_in", before, buf1), ("ring", None, 0)]
        phases.append(("all_to_all_out", after, buf2))
        for phase, kernels, buf in phases:
            if kernels is None:
                for k, t in zip(ring_k, ring_t):
                    if k.pass_ == pass_ or (pass_ == "forward" and k.pass_ != "backward"):
                        out_kernels.append(k)
                        out_times.append(t)
                for st in ring_steps:
                    if st.pass_ == pass_:
                        steps.append(dataclasses.replace(st, index=len(steps)))
                continue
            if u == 1:
                continue  # groups of one GPU: no all-to-all (the ring)
            step, ts = _all_to_all_step(profile, w.dtype, pass_, len(steps), phase, kernels, buf, u)
            link_total += step.link_bytes
            out_kernels += kernels
            out_times += ts
            steps.append(step)
    return out_kernels, out_times, steps, link_total


def _as_comparison(single: Any, results: list[ParallelAlgorithm]) -> Any:
    """A Comparison of GPU 0's kernels whose algorithm times are the wall times: what the
    compare report prints and ``compare_to_dict`` turns into JSON."""
    from .model import Comparison, Evaluated
    from .timing import AlgorithmTiming

    evs = []
    for alg in results:
        bound = "link" if link_bound(alg) else "compute"
        evs.append(Evaluated(alg.traffic, AlgorithmTiming(alg.kernel_times, alg.wall_time_s, bound)))
    return Comparison(
        workload=single.workload,
        profile=single.profile,
        standard=evs[0],
        tiled=evs[1],
        assumptions=single.assumptions,
        warnings=(),
        caveats=single.caveats,
        options=single.options,
        known_bounds={},
    )


def link_bound(alg: ParallelAlgorithm) -> bool:
    """The link sets the pace where its exposed time is the larger part of the wall time."""
    exposed = sum((s.time_s - s.compute_s - s.merge_s) if s.overlap != "sum" else s.link_s for s in alg.steps)
    return exposed > 0.5 * alg.wall_time_s


def to_dict(result: ParallelResult) -> dict[str, Any]:
    """``memmodel compare --context-parallel`` JSON: ``compare/1`` for GPU 0 (times: wall
    times), with ``link_bytes`` per algorithm and the steps."""
    from .report.compare import compare_to_dict

    data = compare_to_dict(result.per_gpu)
    for entry, alg in zip(data["algorithms"], (result.standard, result.tiled)):
        entry["link_bytes"] = alg.link_bytes
        entry["single_gpu_time_s"] = alg.single_gpu_time_s
        entry["speedup"] = alg.speedup
        entry["forward_time_s"] = alg.pass_time("forward")
        if any(s.pass_ == "backward" for s in alg.steps):
            entry["backward_time_s"] = alg.pass_time("backward")
        entry["steps"] = [s.to_dict() for s in alg.steps]
    ic = result.profile.interconnect
    data["context_parallel"] = {
        "gpus": result.p,
        "scheme": result.scheme,
        "ulysses_degree": result.ulysses_degree,
        "zigzag": result.scheme in ("ring", "hybrid") and bool(result.workload.causal),
        "per_gpu": "byte and FLOP keys are GPU 0's over the whole run; predicted_time_s is the wall time",
        "interconnect": ic.describe() if ic is not None else None,
        "notes": list(result.notes),
    }
    data["assumptions"] = list(data["assumptions"]) + [
        "Context parallel: ring steps take max(compute + merge, link), their attention on the SMs an "
        "overlapped send/recv leaves; Ulysses' all-to-alls do not overlap.",
        "Merge, accumulation and pack kernels run at the profile's elementwise (scale) and copy rates.",
    ]
    return data


# ---------------------------------------------------------------------------------------
# Validation cases: plain data, planned on the CPU

CP_CASE_KEYS = ("scheme", "p", "batch", "heads", "kv_heads", "n", "d", "dtype", "causal", "backward", "ulysses_degree")


@frozen
class CPCase:
    """One context-parallel validation case: ``scheme=ring,p=2,n=16384,d=128,heads=8,causal=1``."""

    scheme: str
    n: int
    d: int
    p: int = 2
    batch: int = 1
    heads: int = 1
    kv_heads: int | None = None
    dtype: str = "bf16"
    causal: bool = False
    backward: bool = False
    #: the hybrid scheme's GPUs per Ulysses group
    ulysses_degree: int | None = None

    def __post_init__(self) -> None:
        if self.dtype not in ("fp16", "bf16"):
            raise WorkloadError(f"context-parallel case dtype {self.dtype!r}: fp16 or bf16 (FlashAttention's)")
        check(self.workload(), self.p, self.scheme, self.ulysses_degree)

    def workload(self) -> Workload:
        return Workload(
            n=self.n,
            d=self.d,
            batch=self.batch,
            heads=self.heads,
            kv_heads=self.kv_heads or self.heads,
            dtype=self.dtype,
            causal=self.causal,
        )

    @property
    def id(self) -> str:
        kv = f"kv{self.kv_heads}" if self.kv_heads and self.kv_heads != self.heads else ""
        extra = ("-causal" if self.causal else "") + ("-bwd" if self.backward else "")
        scheme = f"{self.scheme}{self.p}" + (f"u{self.ulysses_degree}" if self.ulysses_degree else "")
        return f"{scheme}/b{self.batch}h{self.heads}{kv}n{self.n}d{self.d}/{self.dtype}{extra}"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def parse_cp_case(spec: str) -> CPCase:
    """``key=value`` pairs separated by commas (:data:`CP_CASE_KEYS`)."""
    fields: dict[str, Any] = {}
    for part in spec.split(","):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in CP_CASE_KEYS:
            raise WorkloadError(
                f"context-parallel case {spec!r}: {part!r} is not key=value with a key of {', '.join(CP_CASE_KEYS)}"
            )
        value = value.strip()
        if key in ("scheme", "dtype"):
            fields[key] = value
        elif key in ("causal", "backward"):
            if value not in ("0", "1", "true", "false"):
                raise WorkloadError(f"context-parallel case {spec!r}: {key} is 0 or 1")
            fields[key] = value in ("1", "true")
        else:
            try:
                fields[key] = int(value)
            except ValueError:
                raise WorkloadError(f"context-parallel case {spec!r}: {key}={value!r} is not a whole number") from None
    for key in ("scheme", "n", "d"):
        if key not in fields:
            raise WorkloadError(f"context-parallel case {spec!r}: missing {key}=")
    return CPCase(**fields)


def predict_case(case: CPCase, profile: Profile, impl: str = "sdpa-flash") -> dict[str, Any]:
    """The model's figures for a case, as its record holds them (the tiled algorithm: the
    code runs FlashAttention-2's kernels). The two-GPU runner waits on a barrier and
    synchronises before every repetition, so its GPUs idle between calls and no benchmark loop
    of back-to-back calls builds up to the power limit: its clocks are modelled as before they
    fall (``clocks="boost"``)."""
    r = context_parallel(
        case.workload(),
        profile,
        case.p,
        case.scheme,
        impl=impl,
        backward=case.backward,
        clocks="boost",
        ulysses_degree=case.ulysses_degree,
    )
    t = r.tiled
    return {
        "wall_s": t.wall_time_s,
        "forward_s": t.pass_time("forward"),
        "backward_s": t.pass_time("backward") if case.backward else None,
        "link_bytes": t.link_bytes,
        "single_gpu_s": t.single_gpu_time_s,
        "speedup": t.speedup,
    }
