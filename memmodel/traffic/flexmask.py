"""FlexAttention's block masks: which (Q block, K/V block) pairs of a mask its kernels visit.

``create_block_mask`` evaluates the ``mask_mod`` over the grid of sparse blocks (128 × 128 by
default) and keeps, per Q block row, two lists (``torch/nn/attention/flex_attention.py``): the
*full* blocks, where every (query, key) pair is allowed (the kernel skips the ``mask_mod``
there), and the *partial* ones, where some are (the kernel applies the ``mask_mod`` element by
element); the empty blocks are not visited at all. The backward walks the transposed lists
(``q_num_blocks``/``q_indices``: per K/V block, its Q blocks).

The masks memmodel counts, as the user writes them (query ``q``, key ``k``; ``offset = n_kv − n``
aligns the last query with the last key, bottom-right, as the paged prefill's):

* no mask (``flex_attention(q, k, v)`` without a block mask): every block full;
* causal: ``k <= q + offset``;
* a sliding window of ``W`` keys: causal and ``q + offset − k < W``;
* a packed row of documents (``seq_lens``): the same document, and causal (and windowed) within it.

Exact at block granularity: a block pair is classified from its edges (queries ``q0 … q1 − 1``,
keys ``k0 … k1 − 1``, the last block cut at the sequence's end), not sampled. A block cut by the
sequence's end is never full: ``create_block_mask`` pads the element mask to whole blocks with
False, so such a block holds disallowed pairs and is kept as partial (a decode's one query in a
128-row block: every block it visits partial).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

from ..frozen import frozen

#: ``create_block_mask``'s default sparse block (Q and K/V): ``_DEFAULT_SPARSE_BLOCK_SIZE``
SPARSE_BLOCK = 128


@frozen
class BlockCounts:
    """One head's block mask, counted: per Q block row, the full and partial K/V blocks it
    visits (``full_q``, ``partial_q``); per K/V block column, the full and partial Q blocks
    (``full_kv``, ``partial_kv``: the backward's transposed lists); and per Q block row the keys
    its visited blocks hold (``keys_q``: the K/V rows a Q block's CTA loads)."""

    full_q: np.ndarray
    partial_q: np.ndarray
    full_kv: np.ndarray
    partial_kv: np.ndarray
    keys_q: np.ndarray

    @property
    def full(self) -> int:
        return int(self.full_q.sum())

    @property
    def partial(self) -> int:
        return int(self.partial_q.sum())

    @property
    def visited(self) -> int:
        return self.full + self.partial

    @property
    def keys(self) -> int:
        """Σ over Q block rows of the keys their visited blocks hold."""
        return int(self.keys_q.sum())


def _edges(length: int, block: int) -> tuple[np.ndarray, np.ndarray]:
    """First and one-past-last index of each block of ``length`` tokens."""
    starts = np.arange(0, length, block, dtype=np.int64)
    return starts, np.minimum(starts + block, length)


def _classify(
    q0: np.ndarray, q1: np.ndarray, k0: np.ndarray, k1: np.ndarray, offset: int, causal: bool, window: int | None
) -> tuple[np.ndarray, np.ndarray]:
    """(any pair allowed, every pair allowed) for blocks of queries [q0, q1) × keys [k0, k1)
    (arrays that broadcast), under causal (``k <= q + offset``) and a window (``q + offset − k < W``)."""
    lo = q0 + offset - (k1 - 1)  # the smallest q + offset − k in the block
    hi = (q1 - 1) + offset - k0  # the largest
    if not causal:
        ones = np.ones(np.broadcast(lo, hi).shape, dtype=bool)
        return ones & (q1 > q0) & (k1 > k0), ones & (q1 > q0) & (k1 > k0)
    top = np.iinfo(np.int64).max if window is None else window - 1
    some = (hi >= 0) & (lo <= top) & (q1 > q0) & (k1 > k0)
    every = (lo >= 0) & (hi <= top) & (q1 > q0) & (k1 > k0)
    return some, every


@functools.lru_cache(maxsize=64)
def block_matrix(
    n: int,
    n_kv: int,
    causal: bool,
    window: int | None = None,
    seq_lens: Sequence[int] | None = None,
    q_block: int = SPARSE_BLOCK,
    kv_block: int = SPARSE_BLOCK,
) -> tuple[np.ndarray, np.ndarray]:
    """(visited, full) over (Q block, K/V block) pairs of one head, as ``create_block_mask`` keeps
    them for these queries, keys and mask (read-only arrays)."""
    qs, qe = _edges(n, q_block)
    ks, ke = _edges(n_kv, kv_block)
    offset = n_kv - n
    if seq_lens is None:
        some, every = _classify(qs[:, None], qe[:, None], ks[None, :], ke[None, :], offset, causal, window)
        some, every = np.broadcast_to(some, (qs.size, ks.size)), np.broadcast_to(every, (qs.size, ks.size))
    else:
        if n != n_kv or sum(seq_lens) != n:
            raise ValueError("a packed row's documents must cover its queries and keys exactly")
        some = np.zeros((qs.size, ks.size), dtype=bool)
        bounds = np.cumsum((0, *seq_lens))
        for s, e in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
            if e <= s:
                continue
            qa, qb = s // q_block, (e - 1) // q_block + 1
            ka, kb = s // kv_block, (e - 1) // kv_block + 1
            q0 = np.maximum(qs[qa:qb], s)[:, None]
            q1 = np.minimum(qe[qa:qb], e)[:, None]
            k0 = np.maximum(ks[ka:kb], s)[None, :]
            k1 = np.minimum(ke[ka:kb], e)[None, :]
            inside, _ = _classify(q0, q1, k0, k1, 0, causal, window)
            some[qa:qb, ka:kb] |= inside
        # full: the whole block pair inside one document, and full under its causal/window rule
        doc_of = np.searchsorted(bounds, np.arange(n, dtype=np.int64), side="right") - 1
        same = (doc_of[qs][:, None] == doc_of[qe - 1][:, None]) & (doc_of[ks][None, :] == doc_of[ke - 1][None, :])
        same &= doc_of[qs][:, None] == doc_of[ks][None, :]
        _, rule = _classify(qs[:, None], qe[:, None], ks[None, :], ke[None, :], 0, causal, window)
        every = same & rule & some
    # create_block_mask pads the element mask with False: a cut block is never full
    every = every & ((qe - qs) == q_block)[:, None] & ((ke - ks) == kv_block)[None, :]
    some = np.array(some, dtype=bool)
    some.flags.writeable = False
    every.flags.writeable = False
    return some, every


@functools.lru_cache(maxsize=256)
def block_counts(
    n: int,
    n_kv: int,
    causal: bool,
    window: int | None = None,
    seq_lens: Sequence[int] | None = None,
    q_block: int = SPARSE_BLOCK,
    kv_block: int = SPARSE_BLOCK,
) -> BlockCounts:
    """The block mask of one head (:class:`BlockCounts`) for these queries, keys and mask."""
    ks, ke = _edges(n_kv, kv_block)
    some, every = block_matrix(n, n_kv, causal, window, seq_lens, q_block, kv_block)
    partial = some & ~every
    keys = np.where(some, (ke - ks)[None, :], 0).sum(axis=1)
    return BlockCounts(
        full_q=every.sum(axis=1),
        partial_q=partial.sum(axis=1),
        full_kv=every.sum(axis=0),
        partial_kv=partial.sum(axis=0),
        keys_q=keys,
    )
