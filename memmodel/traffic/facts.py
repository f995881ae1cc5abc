"""What the traffic rules find about a tiled algorithm, typed: read by timing and the caveats.

:attr:`~.ledger.AlgorithmTraffic.params` (part of the JSON output) is written from these
fields by :meth:`TiledFacts.to_params`; code reads the fields. Values are a grid's arrays
or one workload's scalars, as the rules give them.
"""

from __future__ import annotations

from typing import Any

from ..frozen import frozen
from ..intmath import IntLike
from .blocks import BlockSizes
from .ledger import param


@frozen
class BackwardFacts:
    """The backward kernels' tiles: the library's own (``tiles``) or the forward's blocks."""

    #: where the tiles come from (``backward_tiles_from``)
    source: str
    #: the library's tiles, its CTAs per SM (None: the FA2 paper's backward with the forward's blocks)
    block_q: IntLike | None = None
    block_kv: IntLike | None = None
    ctas_per_sm: IntLike | None = None
    #: CTAs of the backward kernel resident at once
    concurrent_ctas: IntLike | None = None
    #: K/V splits of the backward (flash-attn v1: 1, or one CTA per K/V block; None: not split)
    splits: IntLike | None = None

    def to_params(self) -> dict[str, Any]:
        if self.block_q is None:
            return {"backward_tiles_from": self.source}
        return {
            "backward_block_q": param(self.block_q),
            "backward_block_kv": param(self.block_kv),
            "backward_ctas_per_sm": param(self.ctas_per_sm),
            "backward_tiles_from": self.source,
            "backward_concurrent_ctas": param(self.concurrent_ctas),
        } | ({"backward_splits": param(self.splits)} if self.splits is not None else {})


@frozen
class TiledFacts:
    """A tiled algorithm's blocks and occupancy, and where its forward's K/V re-reads sit."""

    blocks: BlockSizes
    ctas_per_sm: IntLike
    concurrent_ctas: IntLike
    #: K/V splits of the forward (FA2; None for FA1, which has none)
    splits: IntLike | None = None
    #: the forward's K/V re-reads sit near the L2's capacity knee (None: the L2 is off)
    l2_knee: Any = None
    #: a head's CTAs span more than one wave: its K/V is re-read across waves (None: L2 off)
    l2_cross_wave: Any = None
    #: what the waves' drift adds to one K/V read a wave (None: no drift modelled)
    wave_drift: Any = None
    #: the new data between two query heads of a GQA group in FA2's grid (None: no such row)
    gqa_row_bytes: Any = None
    #: the K/V a causal forward keeps live: the causal curves' axis (None: not causal)
    causal_live_bytes: Any = None
    #: the schedule whose causal curves the forward read ("" none; None: not causal)
    causal_curve: str | None = None
    #: the backward kernels' tiles (None: forward only)
    backward: BackwardFacts | None = None

    def to_params(self) -> dict[str, Any]:
        """The facts as :attr:`~.ledger.AlgorithmTraffic.params`: the JSON's keys, in its order."""
        out = {
            **self.blocks.to_params(),
            "ctas_per_sm": param(self.ctas_per_sm),
            "concurrent_ctas": param(self.concurrent_ctas),
        }
        if self.splits is not None:
            out["splits"] = param(self.splits)
        if self.l2_knee is not None:
            out["l2_knee"] = param(self.l2_knee)
            out["l2_cross_wave"] = param(self.l2_cross_wave)
        for key in ("wave_drift", "gqa_row_bytes", "causal_live_bytes"):
            value = getattr(self, key)
            if value is not None:
                out[key] = param(value)
        if self.causal_curve is not None:
            out["causal_curve"] = self.causal_curve
        if self.backward is not None:
            out.update(self.backward.to_params())
        return out
