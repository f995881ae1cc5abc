"""The attention workload: shapes and dtype, scalars or numpy arrays (a grid in one call)."""

from __future__ import annotations

from dataclasses import field, replace
from functools import cached_property
from typing import Any

import numpy as np

from . import intmath
from .errors import WorkloadError
from .frozen import frozen
from .intmath import IntLike

#: Bytes per element of Q, K, V, S, P, O for each supported dtype.
DTYPE_BYTES: dict[str, int] = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1}
#: Softmax statistics (l, m, logsumexp) are kept in fp32 whatever the input dtype.
STAT_BYTES = 4
#: Accumulators kept in HBM (FA2's dQ, split-KV partial outputs) are fp32.
ACC_BYTES = 4


@frozen
class Workload:
    """Multi-head attention O = softmax(QKᵀ/√d)V.

    ``n`` is the query length, ``n_kv`` the key/value length (default ``n``), ``heads``
    the query heads, ``kv_heads`` the key/value heads (default ``heads``; fewer is GQA/MQA).
    ``window`` (causal only): the keys each query sees, itself and the ``window − 1`` before it
    (a sliding window: query at key position p sees keys p − window < j ≤ p; None: all of them).
    ``seq_lens``: a packed row of documents (batch 1, n = n_kv = their sum), each attending only
    within itself (causal within each with ``causal``; a window within each too).
    ``page_size`` (None: K/V contiguous): each sequence's K/V cache lives in ⌈n_kv / page_size⌉
    pages of ``page_size`` tokens, scattered in a pool and found through a block table (serving
    engines' paged KV cache: decoding with n = 1, chunked prefill with n new tokens appended to
    n_kv − n cached ones, causal bottom-right); :mod:`memmodel.traffic.paged` counts it.
    Integer fields may be numpy arrays that broadcast together.
    """

    n: IntLike
    d: IntLike
    batch: IntLike = 1
    heads: IntLike = 1
    dtype: str = "fp32"
    n_kv: IntLike | None = None
    kv_heads: IntLike | None = None
    causal: bool = False
    dropout: float = 0.0
    window: int | None = None
    seq_lens: tuple[int, ...] | None = None
    page_size: int | None = None
    _checked: bool = field(default=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self._checked:
            return
        if self.dtype not in DTYPE_BYTES:
            raise WorkloadError(f"unknown dtype {self.dtype!r}: accepted are {', '.join(DTYPE_BYTES)}")
        values: dict[str, Any] = {}
        for name in ("n", "d", "batch", "heads", "n_kv", "kv_heads"):
            raw = getattr(self, name)
            if raw is None:
                continue
            try:
                value = intmath.as_int(raw, name)
            except TypeError as exc:
                raise WorkloadError(f"{name}: {exc}") from None
            if np.any(np.asarray(value) < 1):
                raise WorkloadError(f"{name} must be a positive integer (got {_show(value)})")
            values[name] = value
        values.setdefault("n_kv", values["n"])
        values.setdefault("kv_heads", values["heads"])
        if np.any(np.asarray(values["heads"]) % np.asarray(values["kv_heads"]) != 0):
            raise WorkloadError(
                f"kv_heads ({_show(values['kv_heads'])}) must divide heads ({_show(values['heads'])})"
                + _divisors_hint(values["heads"])
            )
        if self.causal and np.any(np.asarray(values["n_kv"]) < np.asarray(values["n"])):
            raise WorkloadError(
                f"causal attention with n_kv ({_show(values['n_kv'])}) < n ({_show(values['n'])}) is undefined: "
                "causal masking aligns the last query with the last key, so n_kv must be at least n"
            )
        if self.window is not None:
            window = self.window
            if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or window < 1:
                raise WorkloadError(f"window must be a positive whole number of keys (got {window!r})")
            if not self.causal:
                raise WorkloadError(
                    "a sliding window is causal (each query sees itself and the keys before it): give causal as well"
                )
            longest = int(np.max(np.asarray(values["n_kv"])))
            if int(window) > longest:
                raise WorkloadError(
                    f"window {int(window)} is longer than the {longest} keys (n_kv): "
                    f"give at most {longest}, or no window for full causal attention"
                )
            # a window as long as every key sequence is full causal attention (and modelled as such)
            object.__setattr__(self, "window", None if int(window) == longest else int(window))
        if self.seq_lens is not None:
            object.__setattr__(self, "seq_lens", _checked_seq_lens(self.seq_lens, values))
        if self.page_size is not None:
            object.__setattr__(self, "page_size", _checked_page_size(self.page_size, self.seq_lens, self.window))
        try:
            dropout = float(self.dropout)
        except (TypeError, ValueError):
            raise WorkloadError(f"dropout must be a number in [0, 1) (got {self.dropout!r})") from None
        if not (0.0 <= dropout < 1.0):
            raise WorkloadError(f"dropout must be in [0, 1) (got {self.dropout!r})")
        for name, value in values.items():
            object.__setattr__(self, name, value)
        object.__setattr__(self, "dropout", dropout)
        object.__setattr__(self, "causal", bool(self.causal))
        object.__setattr__(self, "_checked", True)

    # Derived sizes ---------------------------------------------------------------------
    @property
    def element_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def n_kv_(self) -> IntLike:
        assert self.n_kv is not None
        return self.n_kv

    @property
    def kv_heads_(self) -> IntLike:
        assert self.kv_heads is not None
        return self.kv_heads

    @property
    def is_grid(self) -> bool:
        return intmath.is_array(self.n, self.d, self.batch, self.heads, self.n_kv, self.kv_heads)

    # the derived sizes are computed once per workload (a grid's as read-only arrays)
    @cached_property
    def group(self) -> IntLike:
        """Query heads per K/V head (1 = MHA; heads = MQA)."""
        return intmath.kept(intmath.ceil_div(self.heads, self.kv_heads_))

    def q_bytes(self) -> IntLike:
        """Q (and O): batch · heads · n · d · element bytes."""
        return self._q_bytes

    def kv_bytes(self) -> IntLike:
        """One of K or V: batch · kv_heads · n_kv · d · element bytes."""
        return self._kv_bytes

    @cached_property
    def _q_bytes(self) -> IntLike:
        return intmath.kept(intmath.mul(self.batch, self.heads, self.n, self.d, self.element_bytes))

    @cached_property
    def _kv_bytes(self) -> IntLike:
        return intmath.kept(intmath.mul(self.batch, self.kv_heads_, self.n_kv_, self.d, self.element_bytes))

    def documents(self) -> list[Workload]:
        """A packed row's documents, each its own workload of batch 1 (n = n_kv = its length;
        a window at least as long as one covers it whole); ``[self]`` without ``seq_lens``."""
        if self.seq_lens is None:
            return [self]
        out = []
        for length in self.seq_lens:
            window = self.window if self.window is not None and self.window < length else None
            out.append(self.with_(n=length, n_kv=length, batch=1, window=window, seq_lens=None))
        return out

    def with_(self, **changes: Any) -> Workload:
        return replace(self, _checked=False, **changes)

    def to_dict(self) -> dict[str, Any]:
        def plain(v: IntLike | None) -> Any:
            return v.tolist() if isinstance(v, np.ndarray) else v

        return (
            {
                "batch": plain(self.batch),
                "heads": plain(self.heads),
                "kv_heads": plain(self.kv_heads),
                "n": plain(self.n),
                "n_kv": plain(self.n_kv),
                "d": plain(self.d),
                "dtype": self.dtype,
                "element_bytes": self.element_bytes,
                "causal": self.causal,
                "window": self.window,
                "dropout": self.dropout,
            }
            | ({"seq_lens": list(self.seq_lens)} if self.seq_lens is not None else {})
            | ({"page_size": self.page_size} if self.page_size is not None else {})
        )


def _checked_page_size(raw: Any, seq_lens: Any, window: Any) -> int:
    """A paged KV cache's tokens per page (which kernels take which sizes: :mod:`memmodel.options`)."""
    if isinstance(raw, bool) or not isinstance(raw, (int, np.integer)) or raw < 1:
        raise WorkloadError(f"page_size must be a positive whole number of tokens (got {raw!r})")
    if seq_lens is not None:
        raise WorkloadError("page_size with seq_lens is not modelled: a paged cache holds each request's K/V apart")
    if window is not None:
        raise WorkloadError("page_size with a sliding window is not modelled yet: give one or the other")
    return int(raw)


def _checked_seq_lens(raw: Any, values: dict[str, Any]) -> tuple[int, ...]:
    """A packed row's document lengths, checked against the workload's other sizes."""
    try:
        lens = tuple(intmath.as_int(x, "seq_lens") for x in raw)
    except TypeError as exc:
        raise WorkloadError(f"seq_lens: {exc}") from None
    if not lens or any(isinstance(x, np.ndarray) or x < 1 for x in lens):
        raise WorkloadError("seq_lens must be one or more positive whole numbers of tokens")
    total = sum(lens)
    if np.any(np.asarray(values["batch"]) != 1):
        raise WorkloadError(
            f"seq_lens packs its documents into one row: batch must be 1 (got {_show(values['batch'])})"
        )
    if np.any(np.asarray(values["n"]) != total):
        raise WorkloadError(f"n ({_show(values['n'])}) must equal the sum of seq_lens ({total})")
    if np.any(np.asarray(values["n_kv"]) != np.asarray(values["n"])):
        raise WorkloadError(
            f"seq_lens with n_kv ({_show(values['n_kv'])}) ≠ n ({total}) is not modelled: each document "
            "attends within itself (decoding a packed batch is out of scope)"
        )
    return lens


def _divisors_hint(heads: IntLike) -> str:
    """``: one of 1, 2, 4, 8`` for a scalar with few divisors, else nothing."""
    if isinstance(heads, np.ndarray) or heads > 10**6:
        return ""
    divisors = [k for k in range(1, heads + 1) if heads % k == 0]
    return f": one of {', '.join(map(str, divisors))}" if len(divisors) <= 12 else ""


def _show(value: IntLike) -> str:
    if isinstance(value, np.ndarray):
        flat = value.ravel()
        return str(int(flat.min())) if flat.size else "[]"
    return str(value)
