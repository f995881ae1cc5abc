"""Options the model would accept but no GPU runs: refused, or warned about.

:func:`check_comparison` looks at a finished :class:`~memmodel.model.Comparison` (one workload
or a grid) and

* refuses ``ctas_per_sm`` beyond what the SM's shared memory holds: each resident CTA keeps
  its tile, (B_r + 2·B_c)·d·e bytes, in shared memory, so ``--ctas-per-sm 1000`` on an A100
  (108,000 CTAs at once) describes no kernel;
* warns about ``splits`` on a prefill (N > 1) whose query blocks already fill the GPU:
  FlashAttention-2 splits K/V only while batch × heads × ⌈N/64⌉ CTAs fill less than
  :data:`SPLIT_FILL` of the SMs' slots (two per SM), as :func:`memmodel.traffic.decode.num_splits_heuristic` says;
  memmodel models the split as asked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .errors import WorkloadError

if TYPE_CHECKING:  # pragma: no cover
    from .hardware import Profile
    from .model import Comparison


#: The share of the CTA slots below which FlashAttention-2's heuristic splits K/V.
SPLIT_FILL = 0.8


def _first(values: np.ndarray, mask: np.ndarray) -> int:
    """The value of ``values`` (broadcast against ``mask``) at the first True of ``mask``."""
    full = np.broadcast_to(values, mask.shape)
    return int(full[mask].flat[0])


def check_comparison(c: Comparison) -> list[str]:
    """Raise :class:`WorkloadError` for options no GPU runs; return warnings (one line each)."""
    ctas_problem(c)
    w = c.workload
    splits = c.options.splits
    # FlashAttention-2's rule; auto is each implementation's own, FA4 splits any grid it is asked to
    fa2_rule = isinstance(splits, int) and c.options.model_implementation != "fa4"
    warning = splits_warning(splits, w.n, w.batch, w.heads, c.profile, grid=w.is_grid) if fa2_rule else None
    return [warning] if warning else []


def ctas_problem(c: Comparison) -> None:
    """Refuse ``ctas_per_sm`` beyond what the SM's shared memory holds (any row of a grid);
    an implementation's own occupancy (measured) is not checked."""
    given = c.options.ctas_per_sm
    if given is None or c.options.ctas_from_implementation:
        return
    w, profile, params = c.workload, c.profile, c.tiled.traffic.params
    b_r, b_c, d = np.asarray(params["block_q"]), np.asarray(params["block_kv"]), np.asarray(w.d)
    footprint = (b_r + 2 * b_c) * d * w.element_bytes
    sram = int(profile.sram.capacity_per_sm_bytes)
    fits = np.maximum(sram // np.maximum(footprint, 1), 1)
    shape = np.broadcast_shapes(fits.shape, b_r.shape, b_c.shape, d.shape)
    over = np.broadcast_to(given > fits, shape)
    if not over.any():
        return
    most = _first(fits, over)
    raise WorkloadError(
        f"--ctas-per-sm {given}: each CTA holds its tile, (B_r + 2·B_c)·d·e = {_first(footprint, over):,} bytes "
        f"(B_r={_first(b_r, over)}, B_c={_first(b_c, over)}, d={_first(d, over)}), in shared memory, and the "
        f"{sram:,} bytes per SM of {profile.name} hold {most}: choose at most {most}"
    )


def splits_warning(splits: int, n: Any, batch: Any, heads: Any, profile: Profile, *, grid: bool = False) -> str | None:
    """A warning when ``splits`` > 1 is given for a prefill whose CTAs fill the GPU already."""
    if splits <= 1:
        return None
    n_arr = np.asarray(n)
    ctas = np.asarray(batch) * np.asarray(heads) * -(-n_arr // 64)
    slots = 2 * profile.sm_count
    full = np.broadcast_to((n_arr > 1) & (ctas >= SPLIT_FILL * slots), np.broadcast_shapes(n_arr.shape, ctas.shape))
    if not full.any():
        return None
    if grid:
        where = f"{int(np.count_nonzero(full)):,} workloads with N > 1 whose batch × heads × ⌈N/64⌉ CTAs"
    else:
        where = f"N = {int(n_arr)}: batch × heads × ⌈N/64⌉ = {int(ctas):,} CTAs"
    return (
        f"--splits {splits} on a prefill ({where} already fill the {slots} CTA slots of {profile.name}): "
        f"FlashAttention-2 splits K/V only when its CTAs fill less than {round(SPLIT_FILL * 100)} % of the slots "
        "(decoding, short prefills); modelled as asked"
    )
