"""Transfer records and the ledgers that sum them.

Every byte memmodel reports is a :class:`Transfer`; every total is a sum of transfers, so
any printed number can be traced to the records (and the formulas) behind it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import field, replace
from functools import cached_property, reduce
from typing import Any

import numpy as np

from .. import intmath
from ..frozen import frozen
from ..intmath import IntLike

ROLES = ("input", "intermediate", "output", "state")
LEVELS = ("hbm", "l2", "sram")
#: the memory-side cache between the L2 and HBM (AMD's Infinity Cache): a ledger holds its rows
#: only on a profile that has one (``memory.mall``); its bytes are what misses in the L2 (an XCD's
#: slice), and the HBM rows what misses in it
MALL = "mall"
#: every level a transfer may name, from HBM up
ALL_LEVELS = ("hbm", MALL, "l2", "sram")
DIRECTIONS = ("read", "write")


@frozen
class Transfer:
    """``bytes`` moved for ``tensor`` by ``kernel`` at memory ``level`` in ``direction``.

    ``formula`` is the count the kernel requests from L2 ("T_r · B·H·N_kv·d·e"), in every
    row, standard or tiled: the ``l2`` bytes of a read (also the SRAM write of the bytes
    arriving) and the stores of a write, in the symbols of the workload as the kernel sees it
    (B, H, H_kv, G, N, N_kv, d, e; T_r, T_c, B_r, B_c: the pass's blocks; ``visited``: the
    share of block pairs a causal kernel visits, floored). The HBM row of the same transfer is
    what of it misses in L2. ``tests/test_formulas.py`` evaluates every formula against it.
    """

    kernel: str
    tensor: str
    role: str
    level: str
    direction: str
    bytes: IntLike
    formula: str = ""

    def __post_init__(self) -> None:
        if self.role not in ROLES:  # pragma: no cover - programming error
            raise ValueError(f"role {self.role!r} not in {ROLES}")
        if self.level not in ALL_LEVELS:  # pragma: no cover
            raise ValueError(f"level {self.level!r} not in {ALL_LEVELS}")
        if self.direction not in DIRECTIONS:  # pragma: no cover
            raise ValueError(f"direction {self.direction!r} not in {DIRECTIONS}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "kernel": self.kernel,
            "tensor": self.tensor,
            "role": self.role,
            "level": self.level,
            "direction": self.direction,
            "bytes": _plain(self.bytes),
            "formula": self.formula,
        }


def _plain(value: Any) -> Any:
    return value.tolist() if isinstance(value, np.ndarray) else value


def param(value: Any) -> Any:
    """A value for :attr:`AlgorithmTraffic.params`: a Python scalar for one workload (numpy's
    scalars and 0-d arrays converted), a grid's array as it is (a sweep reads it as an array;
    JSON writers list it)."""
    if isinstance(value, np.generic) or (isinstance(value, np.ndarray) and value.ndim == 0):
        return value.item()
    return value


def total(transfers: Iterable[Transfer], **match: str) -> IntLike:
    """Sum of ``bytes`` over the transfers whose fields equal every ``match`` value."""
    selected = [t.bytes for t in transfers if all(getattr(t, k) == v for k, v in match.items())]
    return intmath.add(*selected) if selected else 0


#: :attr:`Kernel.kind`: FlashAttention-2's forward grid (a CTA per Q block and head: its CTA tail
#: and its tile's efficiency apply)
FORWARD_GRID = "forward_grid"
#: FA1's kernels: one CTA per (batch, head), B·H equal jobs on the SMs (their tail applies)
HEAD_GRID = "head_grid"
#: one split of a split-KV forward: its CTAs stream their K/V chunks (the implementation's
#: measured CTA rate and the split kernel's own tail apply)
SPLIT_KV = "split_kv"
#: merges the splits (the implementation's measured fixed and per-split cost)
COMBINE = "combine"
#: applies a dropout mask stored in HBM (standard attention; its backward's measured rate)
DROPOUT = "dropout"
KINDS = ("", FORWARD_GRID, HEAD_GRID, SPLIT_KV, COMBINE, DROPOUT)

#: the (level, direction) pairs a ledger keeps its byte sums by
SUM_KEYS = tuple((level, direction) for level in ALL_LEVELS for direction in DIRECTIONS)


def _matching(sums: dict[tuple[Any, Any], IntLike], match: dict[str, str]) -> IntLike | None:
    """:func:`total` from the sums by (level, direction) where ``match`` names no other field
    (the sums are exact integers: how they are grouped does not change them), else None. A
    level's sum (both directions), a direction's or the whole is added once and kept in
    ``sums`` under ``(level or None, direction or None)``."""
    if not match.keys() <= {"level", "direction"}:
        return None
    key = (match.get("level"), match.get("direction"))
    if key not in sums:
        picked = [sums[k] for k in SUM_KEYS if key[0] in (None, k[0]) and key[1] in (None, k[1])]
        sums[key] = intmath.kept(intmath.add(*picked))
    return sums[key]


@frozen
class Kernel:
    """One kernel launch (or one fused loop nest) with its FLOPs and transfers.

    ``matmul_flops`` are 2·m·n·k per matrix product (tensor cores for 16-bit and 8-bit
    dtypes and tf32); ``softmax_flops`` the other elementwise and reduction arithmetic
    (max, subtract, sum, divide, rescale) on the FP32 units; ``exp_ops`` the exponentials,
    which run on the special-function units and are not included in ``flops``.
    """

    name: str
    transfers: tuple[Transfer, ...]
    matmul_flops: IntLike = 0
    softmax_flops: IntLike = 0
    exp_ops: IntLike = 0
    #: of ``softmax_flops``, the rescaling of O after each K/V block (fused forward kernels)
    rescale_flops: IntLike = 0
    pass_: str = "forward"
    #: CTAs resident at once (for the latency bound); 0 = unknown / not latency-limited
    concurrent_ctas: IntLike = 0
    #: bytes one CTA keeps in flight from HBM (one tile load); 0 = unknown
    bytes_in_flight_per_cta: IntLike = 0
    #: "overlap": every term overlaps (roofline max); "serial-compute": matmul, exp and
    #: softmax arithmetic are issued by the same warps one after another (their times
    #: add) and overlap memory traffic
    overlap: str = "overlap"
    #: what kind of library kernel this is, for the measured rates a calibrated profile gives
    #: (:class:`memmodel.hardware.KernelRates`): "gemm", "softmax", "elementwise", "fp8_cast", ...; "" (none)
    op: str = ""
    #: row-wise kernels (softmax): rows and elements per row
    rows: IntLike = 0
    row_length: IntLike = 0
    #: fused attention kernels: CTAs launched, (Q block, K/V block) pairs computed over all
    #: heads, and those of them on the causal diagonal (masked element by element)
    ctas: IntLike = 0
    blocks: IntLike = 0
    diagonal_blocks: IntLike = 0
    #: a backward kernel whose V head dim is below Q's as it runs them (MLA prefill's 192 / 128;
    #: an array on a grid): such kernels may run at an efficiency of their own
    narrow_v: Any = False
    #: blocks a sliding-window forward masks element by element besides the diagonal's
    local_blocks: IntLike = 0
    #: steps bounds-checked because the lengths are not multiples of the kernel's tiles (flex's
    #: ``IS_DIVISIBLE`` false: every step of the kernel)
    checked_blocks: IntLike = 0
    #: of ``ctas``, those that exit at once (a packed row's grid past a shorter document's end)
    exited_ctas: IntLike = 0
    #: of ``ctas``, those of a sliding-window forward that walk past their masking steps
    #: (FlashAttention-2's local kernel: its second loop)
    loop_ctas: IntLike = 0
    #: library kernels over N×N_kv tensors whose rows are not a multiple of 16 bytes (N_kv·e):
    #: cuBLAS and the softmax lose their vectorised paths (a bool, or a bool array on grids)
    unaligned: Any = False
    #: launches the kernel's work is issued as: ATen splits an elementwise op whose tensors
    #: span more than 2³¹ − 1 bytes into launches that each fit 32-bit offsets
    #: (:func:`memmodel.traffic.standard.elementwise_launches`); the transfers are their total
    launches: IntLike = 1
    #: scores whose dropout mask this fused kernel draws (Philox) or regenerates; 0 without dropout
    dropout_scores: IntLike = 0
    #: split-KV kernels: the number of K/V splits (the combine kernel reduces over them)
    splits: IntLike = 0
    #: what the kernel is, where its timing differs from its transfers' and FLOPs' (one of
    #: :data:`KINDS`; "" nothing special)
    kind: str = ""
    #: a softmax over scores a causal mask has set to −∞ (half of each row on average)
    masked_input: bool = False
    #: ATen's generic elementwise kernel (``op`` "gather" or "expand"): the run of elements its
    #: inputs hold contiguous in the output's order (the shortest), and bytes an element of its
    #: output; the softmax (``op`` "softmax"): 4 for fp32 rows, 0 for the dtype's
    run: IntLike = 0
    element_bytes: IntLike = 0
    #: a reduction (``op`` "reduction"): the elements it writes (ATen's reduction of a few long
    #: rows takes longer than its bytes say: ``kernels.small.reduction``)
    outputs: IntLike = 0
    #: a persistent kernel's merge after its grid barrier that walks a row's partial results one
    #: after another (FlashInfer's MLA decode): its dependent steps, each an L2 round trip
    merge_steps: IntLike = 0
    #: of ``blocks``, the steps that read K/V through a page table (a paged prefill's, all of them)
    paged_blocks: IntLike = 0
    #: fused kernels whose warps split a product's inner dimension (flash-attn v1's split-K): the
    #: shared-memory bytes the warps write and read back to sum their partial results, summed over
    #: the CTAs (the sum of the kernel's exchange transfers, :meth:`KernelBuilder.exchange`), and
    #: the CTA-wide barriers they wait at; both issued by the warps between their products
    exchange_bytes: IntLike = 0
    barriers: IntLike = 0
    #: times each CTA pays the fixed costs of a CTA (its tiles' first loads and their latency,
    #: its results' stores): 1, or for flash-attn v1 the K/V blocks it visits, since v1 runs its
    #: loop's prologue and epilogue again for every K/V block (``device_1xN_``,
    #: ``compute_dq_dk_dv_1xN_one_iter``: one call per block)
    cta_passes: IntLike = 1
    #: grids: the rows this kernel runs on (a bool array; see :func:`only_where`); on the
    #: others it moves and computes nothing and takes no time. One workload: True (a kernel
    #: that does not run is not in the ledger)
    present: Any = True
    #: the implementation whose instructions and measured figures time this kernel, where it is a
    #: library's kernel of another's design (a paged serving kernel, :mod:`.paged`); "" the
    #: algorithm's own implementation
    figures_from: str = ""
    #: the profile's figures of the library kernel itself (``implementations.<name>``, measured
    #: on the kernel's own reference runs), used where the profile has them in place of
    #: ``figures_from``'s (whose instructions it keeps); "" none of its own
    figures_own: str = ""
    #: a library's split-KV kernel: the K/V block its CTAs load a step (flex's BLOCK_N), for a
    #: per-CTA step time measured by block (``implementations.<name>.block_step_time``); 0 none
    kv_block: IntLike = 0
    #: a decode's split-KV CTAs of one (split, K/V head), each holding some of the group's query rows
    #: and streaming the split's whole K/V chunk (cuDNN's decode past 16 heads a group); 1: one
    row_tiles: IntLike = 1
    #: the bytes one CTA of such a kernel loads a step (flex: BLOCK_N rows of K and of V), paid at
    #: the implementation's per-CTA rate (``implementations.<name>.cta_bandwidth``) beside the
    #: block's step time; 0 none
    step_bytes: IntLike = 0
    #: keys each CTA walks before its blocks to build the default block mask inside the kernel's
    #: graph (flex_attention called without one); 0 none
    mask_keys: IntLike = 0
    #: elements of an FP8 K/V cache converted in registers, each once for every query head that
    #: reads it (FlashInfer's CUDA-core decode: ``cast_load`` per thread of its group), at the
    #: implementation's cost an element (``implementations.<name>.kv_convert_flops``); 0 none
    converted_elements: IntLike = 0
    #: a split-KV kernel timed by its steps: the K/V block steps of its busiest CTA (flex's
    #: TILE_KV, a share of the K tensor's length, capped at the request's keys, over BLOCK_N)
    cta_steps: IntLike = 0
    #: a library kernel timed by its own figures whose CTAs differ in length (flex's block masks):
    #: the busiest slot's work over the mean slot's as its CTAs are scheduled (1: even waves)
    tail: Any = 1.0

    @cached_property
    def flops(self) -> IntLike:
        return intmath.kept(intmath.add(self.matmul_flops, self.softmax_flops))

    @cached_property
    def sums(self) -> dict[tuple[Any, Any], IntLike]:
        """Bytes by (level, direction) (:data:`SUM_KEYS`), each transfer added once (and the
        sums :meth:`bytes` added from them)."""
        return {key: intmath.kept(total(self.transfers, level=key[0], direction=key[1])) for key in SUM_KEYS}

    def bytes(self, **match: str) -> IntLike:
        out = _matching(self.sums, match)
        return total(self.transfers, **match) if out is None else out


#: Kernel fields that count work (zeroed where a kernel does not run)
_COUNTS = (
    "matmul_flops",
    "softmax_flops",
    "exp_ops",
    "ctas",
    "blocks",
    "diagonal_blocks",
    "local_blocks",
    "loop_ctas",
    "checked_blocks",
    "rows",
    "exchange_bytes",
    "barriers",
)


def only_where(kernel: Kernel, rows: Any) -> Kernel | None:
    """``kernel`` where it runs: on the rows of a grid where ``rows`` is true (a kernel that
    exists for some workloads and not others, such as GQA's dK/dV group sums or the split-KV
    kernels). None where it runs on no row (or ``rows`` is false), the kernel unchanged where
    it runs on every one; else its transfers and counts are zeroed on the other rows and
    ``present`` says where it runs, so each row sums what a ledger of that workload alone
    holds."""
    mask = np.asarray(rows, dtype=bool)
    if not mask.any():
        return None
    if mask.all():
        return kernel
    import dataclasses

    def zeroed(value: Any) -> Any:
        return np.where(mask, np.asarray(value, dtype=np.int64), 0)

    transfers = tuple(dataclasses.replace(t, bytes=zeroed(t.bytes)) for t in kernel.transfers)
    counts = {name: zeroed(getattr(kernel, name)) for name in _COUNTS}
    present = mask if np.ndim(kernel.present) == 0 else mask & np.asarray(kernel.present, dtype=bool)
    return dataclasses.replace(kernel, transfers=transfers, present=present, **counts)


def present_kernels(*kernels: Kernel | None) -> list[Kernel]:
    """The kernels that run on some row (:func:`only_where` gives None for the others)."""
    return [k for k in kernels if k is not None]


class KernelBuilder:
    """Collects one kernel's transfers at the three levels.

    For a read: ``l2`` bytes are the loads the loops request, ``hbm`` the part that
    misses in L2, ``sram`` the bytes the compute then reads on chip (at least the
    ``l2`` bytes; more where a tile held in shared memory is read by several warps).
    The bytes arriving on chip are also counted as SRAM writes. For a write: ``l2``
    bytes are the stores, ``hbm`` the write-backs, and the same bytes staged on chip.
    """

    def __init__(self, name: str, pass_: str = "forward") -> None:
        self.name = name
        self.pass_ = pass_
        self.transfers: list[Transfer] = []
        self._exchanged: list[IntLike] = []

    def read(
        self, tensor: str, role: str, l2: IntLike, hbm: IntLike, formula: str, sram: IntLike | None = None
    ) -> KernelBuilder:
        self.transfers += [
            Transfer(self.name, tensor, role, "sram", "write", l2, formula),
            Transfer(self.name, tensor, role, "sram", "read", l2 if sram is None else sram, formula),
            Transfer(self.name, tensor, role, "l2", "read", l2, formula),
            Transfer(self.name, tensor, role, "hbm", "read", hbm, formula),
        ]
        return self

    def write(self, tensor: str, role: str, l2: IntLike, formula: str, hbm: IntLike | None = None) -> KernelBuilder:
        self.transfers += [
            Transfer(self.name, tensor, role, "sram", "write", l2, formula),
            Transfer(self.name, tensor, role, "l2", "write", l2, formula),
            Transfer(self.name, tensor, role, "hbm", "write", l2 if hbm is None else hbm, formula),
        ]
        return self

    def exchange(self, tensor: str, written: IntLike, read: IntLike, formula: str) -> KernelBuilder:
        """Partial results the warps exchange through shared memory: ``written`` bytes stored,
        ``read`` loaded back; SRAM rows only, their sum added to :attr:`Kernel.exchange_bytes`."""
        self.transfers.append(Transfer(self.name, tensor, "intermediate", "sram", "write", written, formula))
        self.transfers.append(Transfer(self.name, tensor, "intermediate", "sram", "read", read, formula))
        self._exchanged += [written, read]
        return self

    def build(self, **fields: Any) -> Kernel:
        if self._exchanged and "exchange_bytes" not in fields:
            fields["exchange_bytes"] = intmath.add(*self._exchanged)
        return Kernel(self.name, tuple(self.transfers), pass_=self.pass_, **fields)


@frozen
class AlgorithmTraffic:
    """The ledger of one algorithm on one workload: its kernels, in launch order."""

    name: str  # "standard" | "tiled"
    variant: str  # "algorithm0" | "fa1" | "fa2"
    kernels: tuple[Kernel, ...]
    params: dict[str, Any] = field(default_factory=dict)
    #: what the traffic rules found, typed (:class:`.facts.TiledFacts`; None for standard
    #: attention): code reads these, ``params`` is their JSON view
    facts: Any = field(default=None, compare=False)

    @property
    def transfers(self) -> tuple[Transfer, ...]:
        return tuple(t for k in self.kernels for t in k.transfers)

    @cached_property
    def sums(self) -> dict[tuple[Any, Any], IntLike]:
        """Bytes by (level, direction) (:data:`SUM_KEYS`): the kernels' sums added (and the
        sums :meth:`bytes` added from them)."""
        return {key: intmath.kept(intmath.add(*(k.sums[key] for k in self.kernels))) for key in SUM_KEYS}

    def bytes(self, **match: str) -> IntLike:
        out = _matching(self.sums, match)
        return total(self.transfers, **match) if out is None else out

    @property
    def hbm_read_bytes(self) -> IntLike:
        return self.bytes(level="hbm", direction="read")

    @property
    def hbm_write_bytes(self) -> IntLike:
        return self.bytes(level="hbm", direction="write")

    @property
    def hbm_bytes(self) -> IntLike:
        return self.bytes(level="hbm")

    @cached_property
    def flops(self) -> IntLike:
        return intmath.kept(intmath.add(*(k.flops for k in self.kernels)))

    @cached_property
    def matmul_flops(self) -> IntLike:
        return intmath.kept(intmath.add(*(k.matmul_flops for k in self.kernels)))

    @cached_property
    def exp_ops(self) -> IntLike:
        return intmath.kept(intmath.add(*(k.exp_ops for k in self.kernels)))


#: Kernel fields a packed row's documents add (:func:`merged_kernels`); the others are the
#: same in every document's ledger, or the largest is kept
_ADDED = (
    "matmul_flops",
    "softmax_flops",
    "exp_ops",
    "rescale_flops",
    "blocks",
    "diagonal_blocks",
    "local_blocks",
    "loop_ctas",
    "checked_blocks",
    "rows",
    "dropout_scores",
    "exchange_bytes",
    "barriers",
)
_LARGEST = ("concurrent_ctas", "bytes_in_flight_per_cta", "launches", "splits", "row_length")


def merged_kernels(
    ledgers: list[tuple[Kernel, ...]], slots: Any = None, counts: list[int] | None = None
) -> tuple[Kernel, ...]:
    """One kernel per name over ledgers of one launch's parts (a packed row's documents): the
    transfers of each (tensor, role, level, direction) and the work added; ``ctas`` is the
    grid's, documents × the longest document's (a grid sized by its longest sequence, whose CTAs
    past a shorter one's end exit at once). ``counts``: the documents each ledger holds (a batch
    of documents of one length; default one each). ``slots`` (a kernel -> the CTAs the GPU holds
    of it at once): the merged launch runs that many of its CTAs at once (each part alone may
    fill fewer)."""
    names: list[str] = []
    by_name: dict[str, list[Kernel]] = {}
    docs: dict[str, list[int]] = {}
    for i, kernels in enumerate(ledgers):
        for k in kernels:
            if k.name not in by_name:
                names.append(k.name)
                by_name[k.name] = []
                docs[k.name] = []
            by_name[k.name].append(k)
            docs[k.name].append(1 if counts is None else counts[i])
    out = []
    for name in names:
        parts = by_name[name]
        rows: dict[tuple[str, str, str, str], list[Transfer]] = {}
        for k in parts:
            for t in k.transfers:
                rows.setdefault((t.tensor, t.role, t.level, t.direction), []).append(t)
        transfers = tuple(
            replace(
                ts[0],
                bytes=intmath.kept(intmath.add(*(t.bytes for t in ts))),
                formula=f"Σ documents: {ts[0].formula}" if ts[0].formula else "",
            )
            for ts in rows.values()
        )
        changes: dict[str, Any] = {f: intmath.kept(intmath.add(*(getattr(k, f) for k in parts))) for f in _ADDED}
        for f in _LARGEST:
            changes[f] = reduce(intmath.maximum, (getattr(k, f) for k in parts))
        largest = reduce(intmath.maximum, (intmath.floor_div(k.ctas, c) for k, c in zip(parts, docs[name])))
        changes["ctas"] = intmath.kept(intmath.mul(sum(1 if counts is None else c for c in counts), largest))
        changes["exited_ctas"] = intmath.kept(
            intmath.add(changes["ctas"], intmath.mul(-1, intmath.add(*(k.ctas for k in parts))))
        )
        held = slots(parts[0]) if slots is not None else None
        if held is not None:  # one launch of all the parts' CTAs: as many at once as the GPU holds
            changes["concurrent_ctas"] = intmath.maximum(
                changes["concurrent_ctas"], intmath.minimum(held, changes["ctas"])
            )
        present = parts[0].present
        for k in parts[1:]:
            present = (
                np.logical_or(present, k.present)
                if (np.ndim(present) or np.ndim(k.present))
                else (present or k.present)
            )
        changes["present"] = present
        out.append(replace(parts[0], transfers=transfers, **changes))
    return tuple(out)
