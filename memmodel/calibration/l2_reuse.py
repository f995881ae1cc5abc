"""The L2 reuse microbenchmark's plan and its reading (pure: planned and tested without a GPU).

Attention's tiled kernels re-read a head's K/V from every Q block (CTA) of the head; whether
a re-read is served by L2 or by HBM depends on what else was read since, which the CTA
schedule decides. The microbenchmark (:mod:`memmodel.gpu.l2_reuse`) reproduces those access
patterns without attention's arithmetic meaning:

* a buffer per *K/V head* of ``footprint`` bytes: K then V, ``tiles`` tiles of ``BN`` rows ×
  ``D`` fp16 each;
* *virtual CTAs* in grid order (fastest index: the Q block within a Q head, then the Q head;
  ``q_per_kv`` consecutive Q heads share one K/V head, as in GQA), handed out one at a time by an
  atomic counter to a fixed number of persistent programs (the *slots*: as the hardware's block
  scheduler hands the next CTA of the grid to the first slot that frees);
* each virtual CTA walks its K/V tiles in order (all of them; causal: those up to its diagonal,
  from the first up or from the diagonal down) with ``.cg`` loads (L2, not L1), and paces
  each step as attention does with two matrix products of a ``BM`` × ``D`` register tile (or,
  ``compute=False``, a plain sum: a memory-bound stream);
* slots on all SMs, or on half of them (two ``%smid`` rules, as in ``calibrate``'s L2
  partition step).

Nsight Compute measures each kernel's DRAM bytes read with a cold L2 (it flushes before every
kernel); the kernel requests an exact number of bytes (:func:`requested_bytes`) of which
``unique_bytes`` are compulsory. What the model takes from a point is the share of the
re-reads (requests beyond the first touch of each byte) that miss in L2, against the
footprint live across a re-read (:func:`live_bytes`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from ..frozen import frozen

SCHEMA = "memmodel.l2_reuse/1"
ELEMENT_BYTES = 2  # fp16
#: footprints (of the data live across a re-read) as multiples of the L2, 1/8 to 4
FACTORS = (0.125, 0.25, 0.375, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0)
FEW = (0.25, 0.5, 1.0, 2.0, 4.0)
#: causal heads up to 3 × L2 (a 4 × L2 causal head costs as much as the rest together); GQA's
#: K/V heads to 1 × L2 (8 Q heads each: a 1 × L2 K/V head is a 256k-token group)
CAUSAL_MAX = 3.0
#: chains up to 1 × L2: one CTA per tile, each reading every tile (960 tiles, 30 GB requested at 1 ×)
CHAIN_MAX = 1.0
GQA_FACTORS = (0.125, 0.25, 0.5, 1.0)
#: "chain": virtual CTA m of a head walks every tile from its own, m, on (wrapping), one CTA per
#: tile: CTAs at once sit on consecutive tiles and each tile comes back to the next CTA one step
#: later, as the memory-efficient backward's key splits walk its Q blocks
ORDERS = ("full", "causal-up", "causal-down", "chain")
SMS = ("all", "smid-half", "smid-parity")


@frozen
class Pattern:
    """One kernel launch of the microbenchmark.

    ``waves``: for ``order == "full"``, CTAs per Q head = ``waves × slots / heads_per_wave``
    (so ``heads_per_wave`` Q heads share the slots in each wave); for causal orders the Q
    blocks per head follow from the square shape (``tiles × BN / BM``) and ``waves`` is unused.
    """

    key: str
    family: str
    footprint_factor: float  # of the live footprint, × L2 (what the point is plotted against)
    kv_bytes: int  # one K/V head: K and V, 2 × tiles × BN × D × 2 bytes
    kv_heads: int
    q_per_kv: int
    order: str
    sms: str
    bm: int
    bn: int
    d: int
    compute: bool = True
    atomic: bool = False  # also an fp32 accumulator tile added per step (dQ in the backward)
    #: the accumulator tile loaded, added to and stored instead (the memory-efficient backward's dQ
    #: workspace): its lines are dirty in L2, written back to DRAM when evicted
    store: bool = False
    waves: float = 2.0
    heads_per_wave: int = 1
    per_sm: int = 2  # slots per SM wanted (fewer where fewer programs fit)

    @property
    def tiles(self) -> int:
        return self.kv_bytes // (2 * self.bn * self.d * ELEMENT_BYTES)

    @property
    def q_heads(self) -> int:
        return self.kv_heads * self.q_per_kv

    @property
    def num_warps(self) -> int:
        return 8 if self.bm >= 128 or self.d >= 256 else 4

    @property
    def maxnreg(self) -> int:
        """Registers per thread allowed, so that ``per_sm`` programs fit in 64 K registers
        (without it Triton's kernel takes 255 and one program fills an SM): 128 at 8 warps and
        2 per SM (compiles without spilling at ``num_stages`` 2 for sm_90)."""
        return min(255, 65536 // (32 * self.num_warps * self.per_sm)) // 8 * 8

    num_stages = 2  # K/V loads in flight per program (Triton's software pipeline)

    def variant(self) -> tuple[int, int, int, str, bool, bool, int, bool, bool]:
        """What selects a compiled kernel (its constexpr arguments)."""
        return (
            self.bm,
            self.bn,
            self.d,
            self.order,
            self.sms != "all",
            self.compute,
            self.per_sm,
            self.atomic,
            self.store,
        )

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "tiles": self.tiles}


def ctas_per_q_head(p: Pattern, slots: int) -> int:
    """Q blocks (virtual CTAs) per Q head: from the waves for full rows, from the square shape
    (``tiles × BN / BM`` rounded up) for causal ones; at least 1."""
    if p.order == "full":
        return max(1, round(p.waves * slots / p.heads_per_wave))
    if p.order == "chain":
        return p.tiles
    return max(1, math.ceil(p.tiles * p.bn / p.bm))


def tiles_of_cta(p: Pattern, m: int) -> int:
    """K/V tiles Q block ``m`` of a head reads: all, or up to its diagonal (causal)."""
    if p.order in ("full", "chain"):
        return p.tiles
    return min(p.tiles, math.ceil((m + 1) * p.bm / p.bn))


def tile_step_bytes(p: Pattern) -> int:
    """Bytes one step reads: a K tile and a V tile."""
    return 2 * p.bn * p.d * ELEMENT_BYTES


def requested_bytes(p: Pattern, slots: int) -> int:
    """Bytes the kernel requests from L2 (exactly what its loads ask for)."""
    m = ctas_per_q_head(p, slots)
    if p.order == "chain":  # each step also reads the CTA's own tile again
        return p.q_heads * m * p.tiles * 2 * tile_step_bytes(p)
    if p.order == "full":
        steps = m * p.tiles
    else:
        # Σ_m min(T, ⌈(m+1)·BM/BN⌉)
        steps = sum(tiles_of_cta(p, i) for i in range(m))
    return p.q_heads * steps * tile_step_bytes(p)


def unique_bytes(p: Pattern, slots: int) -> int:
    """Bytes touched at least once (the compulsory reads): every K/V head's tiles that some
    Q block reads."""
    m = ctas_per_q_head(p, slots)
    touched = max(tiles_of_cta(p, i) for i in range(m)) if p.order not in ("full", "chain") else p.tiles
    return p.kv_heads * touched * tile_step_bytes(p)


def dq_bytes(p: Pattern) -> int:
    """One K/V head's fp32 accumulator (``atomic`` and ``store`` patterns): tiles × BN × D × 4."""
    return p.tiles * p.bn * p.d * 4 if p.atomic or p.store else 0


def live_bytes(p: Pattern) -> int:
    """The footprint live across a re-read, as planned: one K/V head's bytes (and accumulator)
    times the K/V heads a wave spans (``heads_per_wave`` Q heads; Q heads of a GQA group share one)."""
    return max(1, p.heads_per_wave // p.q_per_kv) * (p.kv_bytes + dq_bytes(p))


def _kv_bytes(live: float, bn: int, d: int, atomic: bool = False) -> int:
    """K/V bytes of one head whose K/V (and accumulator, ``atomic``) make ``live`` bytes."""
    tile = 2 * bn * d * ELEMENT_BYTES
    per_tile = tile + (bn * d * 4 if atomic else 0)
    return max(1, round(live / per_tile)) * tile


def make_patterns(
    l2_bytes: int, *, quick: bool = False, only: Sequence[str] = (), factors: Sequence[float] = ()
) -> tuple[Pattern, ...]:
    """The launches, in order: families of footprints from 1/8 to 4 × L2.

    * ``waves-1/2/4``: one head, all SMs, 1, 2 or 4 full waves of Q blocks streaming the whole
      K/V (non-causal FA2 on a long head; 1 wave: re-reads within a wave only);
    * ``heads-4``, ``heads-2``: 16 heads, 4 or 2 in each wave (several heads whose K/V are live
      together);
    * ``half``/``parity``: ``waves-2`` on half the SMs (by ``%smid`` halves or parity);
    * ``causal-down`` (FA2: from the diagonal down, 128-row Q blocks) and ``causal-up``
      (memmodel's Triton kernel: from the first block up, 64-row Q blocks): one square head,
      up to 3 × L2; ``causal-down-d256``: the same at d = 256 (one slot per SM), up to 2 × L2;
    * ``gqa-4/8-causal``: 2 K/V heads of up to 1 × L2, 4 or 8 Q heads each, causal from the
      diagonal down;
    * ``tile-…``: ``waves-2`` at other tile sizes and head dims (d 64, 128, 256; BM 64, 128;
      BN 64, 128);
    * ``stream``: ``waves-2`` without the matrix products (memory-bound pacing);
    * ``dq-atomic``: ``waves-2`` adding an fp32 tile per step to the head's accumulator (the
      backward's dQ; the live footprint counts K/V and the accumulator);
    * ``dq-store``: the same tile loaded, added to and stored (the memory-efficient backward's dQ
      workspace): dirty lines, whose write-backs are the DRAM writes;
    * ``dq-chain``: ``dq-store`` in the memory-efficient backward's walk, one CTA per tile, each
      from its own tile on (``chain``), reading its own tile again each step, 128-row tiles at one
      CTA per SM: a stored tile comes back to the next CTA a step later.

    ``quick``: fewer footprints per family; ``only``: the families named (all if empty);
    ``factors``: these footprints (× L2) for every family instead of its own (the causal ones up to
    :data:`CAUSAL_MAX`): a second run that fills in a stretch of the curve, such as the knee.
    """
    L = l2_bytes
    factors_given = tuple(float(f) for f in factors)
    bad = [f for f in factors_given if not 0.0 < f <= 8.0]
    if bad:
        raise ValueError(f"footprints must lie in (0, 8] x L2, not {', '.join(f'{f:g}' for f in bad)}")
    gqa_factors = factors_given or GQA_FACTORS
    factors = factors_given or (FEW if quick else FACTORS)
    few = factors_given or ((0.25, 1.0, 4.0) if quick else FEW)
    out: list[Pattern] = []

    def add(family: str, f: float, **kw: Any) -> None:
        bn, d = kw.get("bn", 64), kw.get("d", 128)
        heads_per_wave = kw.get("heads_per_wave", 1)
        q_per_kv = kw.get("q_per_kv", 1)
        live_heads = max(1, heads_per_wave // q_per_kv)
        kv = _kv_bytes(f * L / live_heads, bn, d, kw.get("atomic", False) or kw.get("store", False))
        kw.setdefault("kv_heads", 1)
        kw.setdefault("q_per_kv", 1)
        kw.setdefault("order", "full")
        kw.setdefault("sms", "all")
        kw.setdefault("bm", 128)
        kw["bn"], kw["d"] = bn, d
        out.append(Pattern(key=f"{family}@{f:g}", family=family, footprint_factor=f, kv_bytes=kv, **kw))

    # in order of what the model needs most: a run cut short by its time budget keeps these
    for f in factors:
        add("waves-2", f, waves=2.0)
    for f in few:
        add("waves-1", f, waves=1.0)
        add("waves-4", f, waves=4.0)
    for f in factors:
        add("heads-4", f, kv_heads=16, heads_per_wave=4, waves=1.0)  # 16 heads, 4 per wave: 4 waves
    for f in few:
        add("heads-2", f, kv_heads=16, heads_per_wave=2, waves=1.0)  # 16 heads, 2 per wave: 8 waves
    for f in factors:
        if f <= CAUSAL_MAX:
            add("causal-down", f, order="causal-down")
            add("causal-up", f, order="causal-up", bm=64)
    for g in (4, 8):
        for f in gqa_factors[::2] if quick and not factors_given else gqa_factors:
            add(f"gqa-{g}-causal", f, kv_heads=2, q_per_kv=g, order="causal-down")
    for f in factors_given or (GQA_FACTORS + (2.0,) if not quick else (0.25, 1.0)):
        add("causal-down-d256", f, order="causal-down", d=256, per_sm=1)  # FA2's 128 x 64 tiles at d = 256
    for f in few:
        add("dq-atomic", f, atomic=True)
    for f in few:
        add("dq-store", f, store=True)
    for f in few:
        if f <= CHAIN_MAX:  # a chain's requests grow with the square of its tiles
            # as the 128 x 128 kernel at d = 128: a step of Q_i, dO_i (the tile), the fp32 dQ tile and
            # the CTA's own K_j, V_j: 192 KiB, 132 CTAs of it 0.41 x the L2
            add("dq-chain", f, store=True, order="chain", bn=128, per_sm=1)
    for f in factors:
        add("half", f, sms="smid-half")
    for bm, bn, d in ((128, 64, 64), (64, 64, 128), (128, 128, 128), (64, 64, 256)):
        for f in few:
            # one per SM where two do not compile without spilling (128 x 128 scores) or d = 256
            add(f"tile-{bm}x{bn}-d{d}", f, bm=bm, bn=bn, d=d, per_sm=1 if d >= 256 or bn >= 128 else 2)
    for f in few:
        add("parity", f, sms="smid-parity")
    for f in few:
        add("stream", f, compute=False)
    if only:
        unknown = set(only) - {p.family for p in out}
        if unknown:
            raise ValueError(f"no pattern family {', '.join(sorted(unknown))}")
        out = [p for p in out if p.family in only]
    return tuple(out)


def buffer_bytes(patterns: Sequence[Pattern]) -> int:
    """The one buffer every launch reads from (the largest K/V set)."""
    return max(p.kv_heads * p.kv_bytes for p in patterns)


def dq_buffer_bytes(patterns: Sequence[Pattern]) -> int:
    """The accumulator the ``atomic`` launches add to (at least one element)."""
    return max([p.kv_heads * dq_bytes(p) for p in patterns] + [4])


# ---------------------------------------------------------------------------------------
# Reading the measurements


def point(
    p: Pattern, launch: Mapping[str, Any], dram_read: float, l2_bytes: float, time_s: float, dram_write: float = 0.0
) -> dict[str, Any]:
    """One measured point: the pattern, its launch (slots, CTAs) and the DRAM bytes against
    what it requested. ``reread_miss``: the share of re-read bytes (requests beyond the first
    touch) that came from DRAM (``atomic``: the accumulator's reads count as requests too, as
    the atomics are served in L2; ``store``: its loads too). ``store`` patterns also give
    ``writeback_share``: the DRAM writes over the accumulator's stores (a dirty line written back
    when evicted, each re-load of it then a DRAM read)."""
    slots = int(launch["slots"])
    req = requested_bytes(p, slots)
    uniq = unique_bytes(p, slots)
    stored = 0
    if p.atomic or p.store:  # each step also reads (in L2) an accumulator tile of BN x D fp32
        steps = req // tile_step_bytes(p) // (2 if p.order == "chain" else 1)  # a chain reads two tiles a step
        stored = steps * p.bn * p.d * 4
        req += stored
        uniq += p.kv_heads * dq_bytes(p)
    rereads = req - uniq
    miss = (dram_read - uniq) / rereads if rereads > 0 else 0.0
    extra = {"stored_bytes": stored, "writeback_share": dram_write / stored} if p.store and stored else {}
    return {
        **p.to_dict(),
        **{k: v for k, v in launch.items() if k not in ("key",)},
        "live_bytes": live_bytes(p),
        "requested_bytes": req,
        "unique_bytes": uniq,
        "dram_read_bytes": dram_read,
        "dram_write_bytes": dram_write,
        "l2_bytes_measured": l2_bytes,
        "time_s": time_s,
        "hbm_over_unique": dram_read / uniq if uniq else float("nan"),
        "reread_miss": miss,
        **extra,
    }


def curves(points: Sequence[Mapping[str, Any]]) -> dict[str, list[dict[str, float]]]:
    """Per family, the re-read miss share against the live footprint (sorted by footprint)."""
    out: dict[str, list[dict[str, float]]] = {}
    for pt in points:
        out.setdefault(pt["family"], []).append(
            {
                "live_bytes": float(pt["live_bytes"]),
                "footprint_factor": float(pt["footprint_factor"]),
                "reread_miss": float(pt["reread_miss"]),
                "hbm_over_unique": float(pt["hbm_over_unique"]),
            }
        )
    for pts in out.values():
        pts.sort(key=lambda x: x["live_bytes"])
    return out


def summary_markdown(result: Mapping[str, Any]) -> str:
    """A Markdown table of every point (for the record's .md)."""
    dev = result.get("device", {})
    lines = [
        f"# L2 reuse microbenchmark — {dev.get('name', '?')}, {result.get('date', '?')}",
        "",
        f"L2 {dev.get('l2_bytes', 0) / 2**20:.0f} MiB, {dev.get('sm_count', '?')} SMs; {result.get('method', '')}",
        "",
        "| family | × L2 | K/V head MiB | slots | CTAs | requested MiB | unique MiB | DRAM read MiB | "
        "DRAM/unique | re-read miss | time ms |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for pt in result.get("points", []):
        lines.append(
            f"| {pt['family']} | {pt['footprint_factor']:g} | {pt['kv_bytes'] / 2**20:.1f} | {pt['slots']} | "
            f"{pt['ctas']} | {pt['requested_bytes'] / 2**20:.0f} | {pt['unique_bytes'] / 2**20:.1f} | "
            f"{pt['dram_read_bytes'] / 2**20:.1f} | {pt['hbm_over_unique']:.3f} | {pt['reread_miss']:.4f} | "
            f"{pt['time_s'] * 1e3:.2f} |"
        )
    for key, message in (result.get("errors") or {}).items():
        lines.append(f"\n- {key}: {message}")
    return "\n".join(lines) + "\n"
