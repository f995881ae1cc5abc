"""Cross-wave re-reads from the measured L2 reuse curve.

A tiled kernel's CTAs that run at once (a *wave*) and read the same data in lockstep read it
from HBM once; the next wave re-reads it. Whether that re-read hits depends on the bytes read
between the two uses, the *live footprint*: one head's re-read data times the heads a wave spans
(``max(1, C / sharing)``). The profile's ``memory.l2.reuse`` curve (footprint per mille of the
L2 → miss share, measured by :mod:`memmodel.calibration.l2_reuse`) gives the share that misses;
without it a step at the effective capacity (:func:`step_curve`).

    HBM = unique + (waves − 1 per head) · unique · miss(live)       (never more than requested)

Everything here is numpy elementwise: element i of a grid equals the scalar result."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import intmath
from ..frozen import frozen
from ..intmath import IntLike

#: the measured knee is flagged from this share of its first rising point to this multiple
#: of its last (near it the miss share moves from 0 to 1 in a few tens of percent of footprint)
KNEE_MARGIN = (0.8, 1.25)


@frozen
class ReuseCurve:
    """Miss share of a cross-wave re-read against the live footprint (bytes)."""

    footprint_bytes: tuple[float, ...]
    miss: tuple[float, ...]
    measured: bool = True

    def miss_share(self, live_bytes: IntLike) -> Any:
        """The share of a cross-wave re-read that misses at ``live_bytes`` (scalar or array)."""
        x = np.asarray(intmath.to_float(live_bytes), dtype=np.float64)
        out = np.interp(x, self.footprint_bytes, self.miss)
        if not self.measured:  # the step: miss past the capacity, not at it
            out = np.where(x <= self.footprint_bytes[0], 0.0, 1.0)
        return float(out) if np.ndim(out) == 0 else out

    @property
    def knee(self) -> tuple[float, float]:
        """Footprints (bytes) between which the miss share is neither 0 nor 1, widened by
        :data:`KNEE_MARGIN`: where a prediction is uncertain."""
        xs, ys = np.asarray(self.footprint_bytes), np.asarray(self.miss)
        rising = np.nonzero((ys > 0.0) & (ys < 1.0))[0]
        lo_i = max(int(rising[0]) - 1, 0) if rising.size else max(int(np.argmax(ys > 0.0)) - 1, 0)
        hi_i = int(rising[-1]) + 1 if rising.size else int(np.argmax(ys >= 1.0))
        return float(xs[lo_i]) * KNEE_MARGIN[0], float(xs[min(hi_i, xs.size - 1)]) * KNEE_MARGIN[1]


def step_curve(capacity_bytes: float) -> ReuseCurve:
    """Today's rule where no curve was measured: every re-read hits up to ``capacity_bytes``
    (the profile's effective capacity), none past it."""
    c = max(float(capacity_bytes), 1.0)
    return ReuseCurve((c, c * (1 + 1e-9)), (0.0, 1.0), measured=False)


def curve_from_profile(points: Any, l2_capacity_bytes: float) -> ReuseCurve | None:
    """The profile's ``memory.l2.reuse`` points ((per mille, miss), ...) as a curve; None if absent."""
    if not points:
        return None
    xs = tuple(float(k) / 1000.0 * l2_capacity_bytes for k, _ in points)
    ys = tuple(min(1.0, max(0.0, float(v))) for _, v in points)
    return ReuseCurve(xs, ys)


def live_footprint(ws: IntLike, sharing: IntLike, concurrent: IntLike) -> Any:
    """Bytes read between two waves' uses of one line: ``ws`` (one head's re-read data) times
    the heads a wave spans, ``max(1, C / sharing)``."""
    heads = np.maximum(1.0, _f(concurrent) / np.maximum(_f(sharing), 1.0))
    return _f(ws) * heads


def cross_wave_hbm(unique: IntLike, per_wave: IntLike, requested: IntLike, live: Any, curve: ReuseCurve) -> IntLike:
    """HBM bytes of a tensor read once per wave (``per_wave`` bytes in all, ``unique`` once):
    the first read, plus each later wave's re-read times its miss share; at most ``requested``."""
    miss = np.asarray(curve.miss_share(live))
    u = _f(unique)
    out = np.minimum(_f(requested), u + np.maximum(_f(per_wave) - u, 0.0) * miss).round()
    if np.ndim(out) == 0 and not intmath.is_array(unique, per_wave, requested):
        return int(out)
    return out.astype(np.int64)


def near_knee(live: Any, curve: ReuseCurve) -> Any:
    """True (or a boolean array) where ``live`` bytes sit near the curve's knee."""
    lo, hi = curve.knee
    x = _f(live)
    out = (x >= lo) & (x <= hi)
    return bool(out) if np.ndim(out) == 0 else out


def _f(value: IntLike) -> np.ndarray:
    return np.asarray(intmath.to_float(value), dtype=np.float64)


def poorly_modelled(ws: IntLike, sharing: IntLike, concurrent: IntLike, causal: bool, curve: ReuseCurve) -> Any:
    """Where the K/V re-reads of a tiled kernel sit in a regime the model handles poorly: not
    causal, a head's CTAs spanning more than one wave with the live footprint near the curve's
    knee (the miss share goes from 0 to 1 there, so a small error in the footprint or the occupancy
    moves the HBM bytes by up to a factor of the waves); causal, one head's re-read data at or past
    the knee's start, where CTAs of different lengths drift apart."""
    live = live_footprint(ws, sharing, concurrent)
    lo, _ = curve.knee
    if causal:
        out = _f(ws) >= lo
    else:
        out = np.asarray(near_knee(live, curve)) & (_f(sharing) > _f(concurrent))
    return bool(out) if np.ndim(out) == 0 else out
