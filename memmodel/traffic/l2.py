"""The L2 between SRAM and HBM: which of a kernel's requests reach HBM.

Every read a kernel's loops request goes through L2 (level ``l2``); HBM traffic
(level ``hbm``) is what misses. The rules, stated once and used by every algorithm:

* **Compulsory**: the first touch of a tensor in a kernel reads it from HBM — unless the
  L2 mode is ``on`` and the previous kernel left it in L2 (it fits in the effective
  capacity), see :func:`carried_over`.
* **Re-reads in lockstep**: a tiled kernel re-reads a tensor (K/V per Q block in FA2; Q, O
  per K/V block in FA1; Q, dO per K/V block in the backward pass) from many thread
  blocks (CTAs). CTAs that run at the same time and share the data read it from HBM once
  (the first one misses, the others hit). Thread blocks of one head are launched next to
  each other (the grid's fastest index is the block index within a head), so one head's
  re-reads are served by ``waves = ⌈CTAs per head / concurrent CTAs⌉`` groups. Between
  waves the data is re-read from HBM unless it stayed in L2: it does when the shared
  data (one head's re-read tensor) fits in the L2's effective capacity.
* **Effective capacity** is ``memory.l2.effective_capacity`` of the profile when given
  (on H100/H200 the L2 is two partitions and data read by every SM is held in both, so
  about half the L2 serves one data set), else the whole L2.
* Writes all reach HBM eventually (write-back), whatever the mode.

Modes: ``on`` (the above), ``cold`` (each kernel starts with an empty L2, as Nsight Compute
measures by default), ``off`` (no L2 reuse at all: every request is an HBM access, the
FlashAttention paper's view).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from .. import intmath
from ..frozen import frozen
from ..hardware.schema import CAUSAL_CURVE_DIMS  # noqa: F401 - the head dims a profile's causal curves are at
from ..intmath import IntLike

L2_MODES = ("on", "cold", "off")


@frozen
class CausalCurves:
    """Where a causal schedule's measured re-read curves lie in a profile
    (``memory.l2.<prefix>_d<head dim>``) and how its grid keeps K/V live."""

    #: the curves measured on one head
    prefix: str
    #: how many heads' K/V the grid keeps live: FlashAttention-2's heads in flight ("grid"), or
    #: cuDNN's one (probe 11: 2 to 8 heads read no more than one does)
    heads: str
    #: the curves measured with several K/V heads in the grid: ((head count, prefix), ...)
    several: tuple[tuple[int, str], ...] = ()
    #: the curves measured on GQA grids (None: the head-count curves serve)
    gqa: str | None = None

    def prefixes(self) -> tuple[str, ...]:
        return (self.prefix, *(prefix for _, prefix in self.several), *((self.gqa,) if self.gqa else ()))


#: the profile's causal re-read curves of each causal schedule. FlashAttention-2's grid of several
#: heads has its own, measured at 2, 4 and 16 heads: at the same K/V live, 2 to 4 heads miss up to
#: 3 x as often as one head below 0.85 x the L2 and 16 heads about as often as one; GQA grids of
#: 1 to 8 K/V heads, 4 or 8 query heads each, follow one curve of their own (the references of
#: 2026-12-01); cuDNN keeps one head live, and its one-head curves serve, its GQA grids their own
CAUSAL_CURVES = {
    "fa2": CausalCurves(
        "causal_reuse",
        "grid",
        ((2, "causal_reuse_h2"), (4, "causal_reuse_h4"), (16, "causal_reuse_h16")),
        "causal_reuse_gqa",
    ),
    "cudnn": CausalCurves("cudnn_causal_reuse", "one", (), "cudnn_causal_reuse_gqa"),
}


@frozen
class L2:
    """How the L2 is modelled for one kernel: the mode, its effective capacity and the
    schedule figures that decide what K/V re-reads hit in it."""

    mode: str
    capacity_bytes: float  # effective capacity for one data set read by every SM
    concurrent_ctas: IntLike  # CTAs resident on the GPU at once for the kernel at hand
    total_bytes: float = 0.0  # the whole L2 (for scattered re-reads); 0 = capacity_bytes
    #: the measured cross-wave reuse curve (:class:`.reuse.ReuseCurve`); None: the step at capacity
    reuse: Any = None
    #: bytes a wave streams through L2 besides the re-read data (Q in, O out: one tile per CTA),
    #: live between two waves' uses of a line with the curve (0: none)
    streamed: IntLike = 0
    #: the measured causal re-read curves by head dim ({d: :class:`.reuse.ReuseCurve`}) of the
    #: kernel's causal schedule (:data:`CAUSAL_CURVES`), and that schedule (None: the rules of
    #: flash.tile_reread_hbm)
    causal: Any = None
    causal_schedule: str | None = None
    #: the schedule's curves measured with several K/V heads in the grid: {head count: {head dim:
    #: curve}} (None: ``causal`` serves)
    causal_several: Any = None
    #: the schedule's curves measured on GQA grids, by head dim (None: the head-count curves serve)
    causal_gqa: Any = None
    #: how far apart the CTAs of a wave that walk the same data in lockstep drift, per wave the
    #: kernel has run, as a share of the walk: ((head dim, share), ...) (``memory.l2.wave_drift``;
    #: None: they stay together)
    drift: Any = None
    #: the share of the L2 that other K/V heads add to a causal GQA grid's live K/V at most: ((head
    #: dim, share), ...) (``memory.l2.causal_gqa_others``; None: the effective capacity's share)
    gqa_others: Any = None
    #: the grid runs (Q block, batch, head), FlashAttention-2's order: the query heads of a GQA
    #: group are a row of ``batch`` heads apart (:func:`.flash.cross_head_hbm`; False: together)
    batch_rows: bool = False
    #: the XCD view (:func:`xcd_view`): the L2 is split into this many private slices, one per XCD,
    #: ``capacity_bytes`` each, and consecutive CTAs are dispatched round-robin over them; its "HBM"
    #: bytes are what misses in an XCD's L2 (the MALL's traffic). 1: one L2 for every SM
    xcds: int = 1

    def with_ctas(self, ctas: IntLike) -> L2:
        return dataclasses.replace(self, concurrent_ctas=ctas)

    def with_streamed(self, nbytes: IntLike) -> L2:
        return dataclasses.replace(self, streamed=nbytes)

    @property
    def causal_heads(self) -> str:
        """How many heads' K/V the causal schedule keeps live: "grid" or "one"."""
        return CAUSAL_CURVES[self.causal_schedule].heads if self.causal_schedule in CAUSAL_CURVES else "grid"

    @property
    def whole(self) -> float:
        return self.total_bytes or self.capacity_bytes


def xcd_view(mode: str, slice_bytes: float, xcds: int, concurrent_ctas: IntLike) -> L2:
    """The L2 as a GPU of ``xcds`` private L2 slices of ``slice_bytes`` each sees a kernel's
    requests (AMD CDNA 3/4): no measured curve of any kind (none was measured there), each CTA's
    reads served by its own XCD's slice."""
    return L2(mode, slice_bytes, concurrent_ctas, slice_bytes, xcds=xcds)


def xcds_reading(ctas_sharing: IntLike, l2: L2) -> IntLike:
    """How many XCDs read a tensor that a run of ``ctas_sharing`` consecutive CTAs shares:
    workgroups are dispatched round-robin over the XCDs (consecutive workgroup IDs go to
    different XCDs), so min(xcds, sharing, CTAs at once); 1 without the XCD view."""
    if l2.xcds <= 1:
        return 1
    return intmath.minimum(intmath.minimum(ctas_sharing, l2.xcds), intmath.maximum(l2.concurrent_ctas, 1))


def fits(working_set: IntLike, l2: L2) -> IntLike | bool:
    """True (or a boolean array) where ``working_set`` bytes stay in L2."""
    if l2.mode == "off":
        return False if not intmath.is_array(working_set) else np.zeros(np.shape(working_set), dtype=bool)
    ws = np.asarray(intmath.to_float(working_set))
    out = ws <= l2.capacity_bytes
    return bool(out) if out.ndim == 0 else out


def waves(ctas_sharing: IntLike, l2: L2) -> IntLike:
    """Groups of concurrently running CTAs that one shared tensor is read by: ⌈n / concurrent⌉."""
    return intmath.ceil_div(ctas_sharing, l2.concurrent_ctas)


def waves_spanned(groups: IntLike, per_group: IntLike, concurrent: IntLike) -> IntLike:
    """Σ over ``groups`` = G consecutive runs of ``per_group`` = T CTAs of the waves (runs of
    ``concurrent`` = C CTAs) each one overlaps: Σ_g ⌊((g+1)·T − 1)/C⌋ − ⌊g·T/C⌋ + 1.

    The sum telescopes: ⌊(x − 1)/C⌋ = ⌊x/C⌋ − 1 where C divides x (else ⌊x/C⌋), and C divides
    j·T for j = 1 … G exactly at the multiples of C / gcd(C, T), so it is
    ⌊G·T/C⌋ − ⌊G·gcd(C, T)/C⌋ + G (tests/test_variants.py checks it against the sum)."""
    g, t, c = groups, per_group, concurrent
    spanned = intmath.add(intmath.floor_div(intmath.mul(g, t), c), g)
    return spanned - intmath.floor_div(intmath.mul(g, intmath.gcd(c, t)), c)


def reread_hbm(
    unique: IntLike, requested: IntLike, ctas_sharing: IntLike, working_set: IntLike, l2: L2, groups: IntLike = 1
) -> IntLike:
    """HBM bytes for a tensor of ``unique`` bytes that a kernel requests ``requested`` bytes of.

    ``groups`` runs of ``ctas_sharing`` consecutive CTAs each share one ``working_set``
    (one head's K/V, say); ``unique`` is summed over the groups. Off: every request.
    Else: once if it fits in L2, else once for every wave of concurrently running CTAs a
    run overlaps (a run that straddles a wave boundary is read in both waves); never more
    than requested.
    """
    if l2.mode == "off":
        return requested
    if l2.xcds > 1:  # each XCD that holds CTAs of a run reads the run's data into its own slice
        unique = intmath.mul(unique, xcds_reading(ctas_sharing, l2))
    if l2.reuse is not None:
        from .reuse import cross_wave_hbm, live_footprint

        n_waves = waves_spanned(groups, ctas_sharing, l2.concurrent_ctas)
        live = intmath.to_float(live_footprint(working_set, ctas_sharing, l2.concurrent_ctas)) + np.asarray(
            intmath.to_float(l2.streamed), dtype=np.float64
        )
        return cross_wave_hbm(unique, intmath.scaled(unique, n_waves, groups), requested, live, l2.reuse)
    ok = fits(working_set, l2)
    if isinstance(ok, np.ndarray) and intmath.is_array(groups, ctas_sharing, l2.concurrent_ctas):
        # waves only matter where the working set does not fit: count them there alone
        *factors, ok_b = np.broadcast_arrays(
            *(np.asarray(x, dtype=np.int64) for x in (groups, ctas_sharing, l2.concurrent_ctas)), ok
        )
        n_waves = np.ones(ok_b.shape, dtype=np.int64)
        if not ok_b.all():
            need = ~ok_b
            n_waves[need] = waves_spanned(*(f[need] for f in factors))
    else:
        n_waves = waves_spanned(groups, ctas_sharing, l2.concurrent_ctas)
    per_wave = intmath.scaled(unique, n_waves, groups)
    if not intmath.is_array(unique, requested, ctas_sharing, working_set, n_waves) and not isinstance(ok, np.ndarray):
        return min(int(requested), int(unique) if ok else int(per_wave))
    return np.minimum(np.asarray(requested, dtype=np.int64), np.where(ok, unique, per_wave))


def random_replacement_miss_ratio(unique_share: IntLike, exposure: IntLike, where: Any = None) -> Any:
    """Share of a re-read tensor's block requests that miss in an L2 with random replacement.

    Each block's first request misses (a share ``unique_share`` = unique / requested of all
    requests); a later request hits if the block survived since its previous request. With
    random replacement a resident line survives one insertion with probability 1 − 1/S
    (S lines), so it survives the ``x · exposure`` insertions that happen in between
    (``x`` the miss share, ``exposure`` = concurrent requests between two uses, over S) with
    probability exp(−x · exposure). The miss share is the fixed point of

        x = u + (1 − u) · (1 − exp(−k · x)),   u = unique_share, k = exposure,

    its one root in [u, 1] (f(u) ≥ 0 ≥ f(1), f concave), found by bisection (vectorised: scalars and arrays alike).
    ``k·(1 − u) < 1`` keeps ``x ≈ u / (1 − k·(1 − u))`` small; near ``k = 1`` the re-reads
    feed on themselves (each miss evicts lines others still need).

    ``where`` (a boolean array): the elements a caller uses; the others are not solved for and
    come out 0 (the 60 bisection steps are most of a causal sweep's time).
    """
    u = np.clip(np.asarray(intmath.to_float(unique_share), dtype=np.float64), 0.0, 1.0)
    k = np.maximum(np.asarray(intmath.to_float(exposure), dtype=np.float64), 0.0)
    u, k = np.broadcast_arrays(u, k)
    if where is not None:
        rows = np.broadcast_to(np.asarray(where, dtype=bool), u.shape)
        out = np.zeros(u.shape)
        if rows.any():
            out[rows] = random_replacement_miss_ratio(u[rows], k[rows])
        return float(out) if out.ndim == 0 else out
    lo, hi = u.copy(), np.ones_like(u)
    rate, stay = -k, 1.0 - u  # the same in every step
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        above = u + stay * -np.expm1(rate * mid) < mid  # f(mid) < 0: the root is below mid
        hi = np.where(above, mid, hi)
        lo = np.where(above, lo, mid)
    x = np.where(k == 0.0, u, hi)
    return float(x) if x.ndim == 0 else x


def carried_over(nbytes: IntLike, l2: L2) -> IntLike:
    """HBM read bytes of a tensor the previous kernel just wrote: 0 if it is still in L2 (mode on).
    The XCD view: all of it (the CTA that reads a tile is not, in general, on the XCD that wrote
    it: its slice of the L2 does not hold it; the MALL does)."""
    if l2.mode != "on" or l2.xcds > 1:
        return nbytes
    ok = fits(nbytes, l2)
    if isinstance(ok, np.ndarray):
        return np.where(ok, 0, nbytes)
    return 0 if ok else nbytes
