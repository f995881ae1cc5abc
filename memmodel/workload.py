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
#: K/V cache element types besides the workload's dtype (``Workload.kv_dtype``): ``fp8`` is e4m3
#: (as ``--dtype fp8``), ``fp8_e5m2`` the other 8-bit format; both 1 byte
KV_DTYPE_BYTES: dict[str, int] = {**DTYPE_BYTES, "fp8_e5m2": 1}
#: the element types an FP8 K/V cache may take (``--kv-dtype``)
FP8_KV_DTYPES = ("fp8", "fp8_e5m2")
#: O's element type where the inputs are fp8: FA3, FA4, FlashInfer and aiter write it in bf16
FP8_OUT_DTYPE = "bf16"
#: Softmax statistics (l, m, logsumexp) are kept in fp32 whatever the input dtype.
STAT_BYTES = 4
#: Accumulators kept in HBM (FA2's dQ, split-KV partial outputs) are fp32.
ACC_BYTES = 4
#: a paged cache's pool per page the batch holds, where no ``kv_pool`` is given (half of it free,
#: as a serving engine's pool runs; ``memmodel validate``'s runner allocates this)
POOL_FACTOR = 2


@frozen
class Workload:
    """Multi-head attention O = softmax(QKᵀ/√d)V.

    ``n`` is the query length, ``n_kv`` the key/value length (default ``n``), ``heads``
    the query heads, ``kv_heads`` the key/value heads (default ``heads``; fewer is GQA/MQA).
    ``window`` (causal only): the keys each query sees, itself and the ``window − 1`` before it
    (a sliding window: query at key position p sees keys p − window < j ≤ p; None: all of them).
    ``seq_lens``: a packed row of documents (batch 1, n = n_kv = their sum), each attending only
    within itself (causal within each with ``causal``; a window within each too).
    ``d_v``: the head dim of V (and of O, dO, dV) where it differs from Q's and K's ``d``
    (MLA: d 192, d_v 128 in DeepSeek-V3's prefill; None, or equal to ``d``: the same).
    ``page_size`` (None: K/V contiguous): each sequence's K/V cache lives in ⌈n_kv / page_size⌉
    pages of ``page_size`` tokens, scattered in a pool and found through a block table (serving
    engines' paged KV cache: decoding with n = 1, chunked prefill with n new tokens appended to
    n_kv − n cached ones, causal bottom-right); :mod:`memmodel.traffic.paged` counts it.
    ``kv_pool`` (paged only): the pages the cache's pool holds, all requests' and the free ones
    (None: :data:`POOL_FACTOR` × the pages the batch holds, as ``memmodel validate``'s runner
    allocates); FlexAttention's decoding kernel splits the pool's length, not a request's.
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
    d_v: IntLike | None = None
    #: the K/V cache's element type (None: ``dtype``): ``fp8`` (e4m3) or ``fp8_e5m2`` with Q and
    #: O in a 16-bit ``dtype`` (an FP8 KV cache, per-tensor scales); equal to ``dtype`` is None
    kv_dtype: str | None = None
    #: O's element type (None: ``dtype``, and bf16 where ``dtype`` is fp8); set by the plan of an
    #: implementation that writes O in fp8 (cuDNN's Hopper fp8 graph)
    out_dtype: str | None = None
    page_size: int | None = None
    kv_pool: int | None = None
    #: (chunk, rows): this packed row is a batch of ``rows`` rows of chunked local attention, each
    #: split into ``chunk``-token chunks (:func:`chunked`); None: not chunked
    chunked: tuple[int, int] | None = None
    _checked: bool = field(default=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self._checked:
            return
        if self.dtype not in DTYPE_BYTES:
            raise WorkloadError(f"unknown dtype {self.dtype!r}: accepted are {', '.join(DTYPE_BYTES)}")
        _check_kv_dtype(self)
        if self.out_dtype is not None and self.out_dtype not in DTYPE_BYTES:
            raise WorkloadError(f"unknown out_dtype {self.out_dtype!r}: accepted are {', '.join(DTYPE_BYTES)}")
        values: dict[str, Any] = {}
        for name in ("n", "d", "batch", "heads", "n_kv", "kv_heads", "d_v"):
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
        if "d_v" in values and np.all(np.asarray(values["d_v"]) == np.asarray(values["d"])):
            del values["d_v"]  # V at Q's head dim: plain attention, modelled as such
            object.__setattr__(self, "d_v", None)
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
        if self.chunked is not None:
            object.__setattr__(self, "chunked", _checked_chunked(self.chunked, self.seq_lens, values))
        if self.page_size is not None:
            object.__setattr__(self, "page_size", _checked_page_size(self.page_size, self.seq_lens, self.window))
        if self.kv_pool is not None:
            object.__setattr__(self, "kv_pool", _checked_kv_pool(self.kv_pool, self.page_size, values))
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
    def kv_element_bytes(self) -> int:
        """Bytes per element of K and V as the kernel reads them (the K/V cache's: ``kv_dtype``)."""
        return KV_DTYPE_BYTES[self.kv_dtype] if self.kv_dtype is not None else self.element_bytes

    @property
    def out_dtype_(self) -> str:
        """O's element type: ``out_dtype``, else ``dtype`` (bf16 for fp8 inputs)."""
        if self.out_dtype is not None:
            return self.out_dtype
        return FP8_OUT_DTYPE if self.dtype == "fp8" else self.dtype

    @property
    def out_element_bytes(self) -> int:
        """Bytes per element of O as the forward writes it (:attr:`out_dtype_`)."""
        return DTYPE_BYTES[self.out_dtype_]

    @property
    def kv_dtype_(self) -> str:
        """The K/V element type: ``kv_dtype``, else ``dtype``."""
        return self.kv_dtype or self.dtype

    @property
    def n_kv_(self) -> IntLike:
        assert self.n_kv is not None
        return self.n_kv

    @property
    def kv_heads_(self) -> IntLike:
        assert self.kv_heads is not None
        return self.kv_heads

    @property
    def kv_pool_(self) -> IntLike:
        """A paged cache's pool in pages: ``kv_pool``, else :data:`POOL_FACTOR` × batch ·
        ⌈n_kv / page_size⌉ (0 for a contiguous cache)."""
        if self.page_size is None:
            return 0
        if self.kv_pool is not None:
            return self.kv_pool
        return intmath.mul(POOL_FACTOR, self.batch, intmath.ceil_div(self.n_kv_, self.page_size))

    @property
    def d_v_(self) -> IntLike:
        """V's (and O's) head dim: ``d_v`` where given, else ``d``."""
        return self.d if self.d_v is None else self.d_v

    @property
    def d_kv(self) -> IntLike:
        """Elements of one K row and one V row together (2·d; d + d_v with ``d_v``)."""
        return intmath.mul(2, self.d) if self.d_v is None else intmath.add(self.d, self.d_v)

    @property
    def dv_sym(self) -> str:
        """How a formula names V's head dim: ``d`` where it is Q's, ``d_v`` where it differs."""
        return "d" if self.d_v is None else "d_v"

    @property
    def is_grid(self) -> bool:
        return intmath.is_array(self.n, self.d, self.batch, self.heads, self.n_kv, self.kv_heads, self.d_v)

    # the derived sizes are computed once per workload (a grid's as read-only arrays)
    @cached_property
    def group(self) -> IntLike:
        """Query heads per K/V head (1 = MHA; heads = MQA)."""
        return intmath.kept(intmath.ceil_div(self.heads, self.kv_heads_))

    def q_bytes(self) -> IntLike:
        """Q (and O): batch · heads · n · d · element bytes."""
        return self._q_bytes

    def kv_bytes(self) -> IntLike:
        """K (and V where ``d_v`` is ``d``): batch · kv_heads · n_kv · d · element bytes."""
        return self._kv_bytes

    def v_bytes(self) -> IntLike:
        """V: batch · kv_heads · n_kv · d_v · element bytes (:meth:`kv_bytes` without ``d_v``)."""
        return self._v_bytes

    def o_bytes(self) -> IntLike:
        """O as the forward writes it (and dO): batch · heads · n · d_v · O's element bytes
        (:meth:`q_bytes` where ``d_v`` is ``d`` and O is in ``dtype``)."""
        return self._o_bytes

    @cached_property
    def _v_bytes(self) -> IntLike:
        if self.d_v is None:
            return self._kv_bytes
        return intmath.kept(intmath.mul(self.batch, self.kv_heads_, self.n_kv_, self.d_v, self.kv_element_bytes))

    @cached_property
    def _o_bytes(self) -> IntLike:
        if self.d_v is None and self.out_element_bytes == self.element_bytes:
            return self._q_bytes
        d_v = self.d if self.d_v is None else self.d_v
        return intmath.kept(intmath.mul(self.batch, self.heads, self.n, d_v, self.out_element_bytes))

    @cached_property
    def _q_bytes(self) -> IntLike:
        return intmath.kept(intmath.mul(self.batch, self.heads, self.n, self.d, self.element_bytes))

    @cached_property
    def _kv_bytes(self) -> IntLike:
        return intmath.kept(intmath.mul(self.batch, self.kv_heads_, self.n_kv_, self.d, self.kv_element_bytes))

    def documents(self) -> list[Workload]:
        """A packed row's documents, each its own workload of batch 1 (n = n_kv = its length;
        a window at least as long as one covers it whole); ``[self]`` without ``seq_lens``."""
        if self.seq_lens is None:
            return [self]
        out = []
        for length in self.seq_lens:
            window = self.window if self.window is not None and self.window < length else None
            out.append(self.with_(n=length, n_kv=length, batch=1, window=window, seq_lens=None, chunked=None))
        return out

    def with_(self, **changes: Any) -> Workload:
        if self.chunked is not None and "chunked" not in changes and changes.keys() & {"n", "batch", "seq_lens"}:
            changes["chunked"] = None  # another row: no longer the chunked batch
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
            | ({"chunk": self.chunked[0], "chunk_rows": self.chunked[1]} if self.chunked is not None else {})
            | ({"d_v": plain(self.d_v)} if self.d_v is not None else {})
            | ({"page_size": self.page_size, "kv_pool": plain(self.kv_pool_)} if self.page_size is not None else {})
            | self._fp8_dict()
        )

    def _fp8_dict(self) -> dict[str, Any]:
        """The keys only FP8 workloads have (an FP8 K/V cache, fp8 inputs): earlier outputs keep theirs."""
        out: dict[str, Any] = {}
        if self.kv_dtype is not None:
            out |= {"kv_dtype": self.kv_dtype, "kv_element_bytes": self.kv_element_bytes}
        if self.out_element_bytes != self.element_bytes or self.out_dtype is not None:
            out |= {"out_dtype": self.out_dtype_, "out_element_bytes": self.out_element_bytes}
        return out


def chunked(w: Workload, chunk: Any) -> tuple[Workload, str]:
    """Chunked local attention (Llama 4's ``attention_chunk_size``): each query sees the keys of
    its own ``chunk``-token chunk up to itself, as the workload its kernels run, and a line saying
    how. Serving engines split each sequence into its chunks (vLLM's local attention: "virtual
    batches" through FlashAttention's varlen kernel; FlexAttention's chunk mask keeps the same
    blocks), so a prefill (n = n_kv) is a packed row of the batch's chunks (``seq_lens``, batch 1)
    and a one-token decode reads only its chunk's keys (n_kv = the keys of its chunk so far).
    A chunk as long as the keys is full causal attention (``w``, made causal)."""
    if isinstance(chunk, bool) or not isinstance(chunk, (int, np.integer)) or chunk < 1:
        raise WorkloadError(f"chunk must be a positive whole number of tokens (got {chunk!r})")
    chunk = int(chunk)
    fields = {"n": w.n, "n_kv": w.n_kv_, "batch": w.batch}
    if any(np.ndim(v) for v in fields.values()):
        raise WorkloadError("chunk takes one n, n_kv and batch (not a grid of them)")
    n, n_kv, batch = (int(v) for v in fields.values())
    # a paged cache is read a chunk's pages at a time in a decode (below); not modelled in a prefill
    others = (("window", w.window), ("seq_lens", w.seq_lens), ("page_size", w.page_size if n > 1 else None))
    for name, other in others:
        if other is not None:
            raise WorkloadError(
                f"chunk with {name} is not modelled: chunked attention is its own mask; give one or the other"
            )
    base = w.with_(causal=True)
    if chunk >= n_kv:
        return base, f"chunk {chunk}: every key ({n_kv}) lies in the first chunk: full causal attention"
    if n == n_kv:
        row = [chunk] * (n // chunk) + ([n % chunk] if n % chunk else [])
        lens = tuple(row * batch)
        return (
            base.with_(n=n * batch, n_kv=None, batch=1, seq_lens=lens, chunked=(chunk, batch)),
            f"chunk {chunk}: each query sees the keys of its own {chunk}-token chunk; the batch's {len(lens)} chunks "
            f"run as one packed row of documents (as vLLM runs chunked local attention through a varlen kernel)",
        )
    if n == 1:  # one query sees every key of its chunk so far: no mask left to apply
        last = (n_kv - 1) % chunk + 1
        return (
            w.with_(n_kv=last, causal=False),
            f"chunk {chunk}: the decoded token sees the {last} keys of its own chunk (of the {n_kv} cached), "
            "all its kernels read",
        )
    raise WorkloadError(
        f"chunk with {n} new tokens over {n_kv} keys is not modelled: give a prefill (n = n_kv) or a one-token decode (n = 1)"
    )


def _check_kv_dtype(w: Workload) -> None:
    """``kv_dtype``: an FP8 cache under 16-bit Q and O, or the dtype itself (then None)."""
    kv = w.kv_dtype
    if kv is None:
        return
    if kv not in KV_DTYPE_BYTES:
        raise WorkloadError(f"unknown kv_dtype {kv!r}: accepted are {', '.join(FP8_KV_DTYPES)} (or the dtype itself)")
    if kv == w.dtype:
        object.__setattr__(w, "kv_dtype", None)
        return
    if kv not in FP8_KV_DTYPES:
        raise WorkloadError(
            f"kv_dtype {kv} with dtype {w.dtype}: a K/V cache other than the dtype is modelled in "
            f"{' or '.join(FP8_KV_DTYPES)} only"
        )
    if w.dtype not in ("fp16", "bf16"):
        raise WorkloadError(
            f"kv_dtype {kv} with dtype {w.dtype}: an FP8 K/V cache is read under fp16 or bf16 Q and O "
            "(--dtype fp8 makes Q, K and V all fp8)"
        )


def _checked_chunked(raw: Any, seq_lens: tuple[int, ...] | None, values: dict[str, Any]) -> tuple[int, int]:
    """(chunk, rows) of a chunked batch packed into one row (:func:`chunked`)."""
    try:
        chunk, rows = (int(x) for x in raw)
    except (TypeError, ValueError):
        raise WorkloadError(f"chunked must be (chunk, rows), two positive whole numbers (got {raw!r})") from None
    if chunk < 1 or rows < 1:
        raise WorkloadError(f"chunked must be (chunk, rows), two positive whole numbers (got {raw!r})")
    n = int(values["n"])
    if seq_lens is None or n % rows or any(x > chunk for x in seq_lens):
        raise WorkloadError(
            f"chunked {raw!r}: the packed row must be {rows} equal rows split into chunks of at most {chunk} (seq_lens)"
        )
    return chunk, rows


def _checked_page_size(raw: Any, seq_lens: Any, window: Any) -> int:
    """A paged KV cache's tokens per page (which kernels take which sizes: :mod:`memmodel.options`)."""
    if isinstance(raw, bool) or not isinstance(raw, (int, np.integer)) or raw < 1:
        raise WorkloadError(f"page_size must be a positive whole number of tokens (got {raw!r})")
    if seq_lens is not None:
        raise WorkloadError("page_size with seq_lens is not modelled: a paged cache holds each request's K/V apart")
    if window is not None:
        raise WorkloadError("page_size with a sliding window is not modelled yet: give one or the other")
    return int(raw)


def _checked_kv_pool(raw: Any, page_size: int | None, values: dict[str, Any]) -> int:
    """A paged cache's pool in pages: at least the pages the batch holds."""
    if isinstance(raw, bool) or not isinstance(raw, (int, np.integer)) or raw < 1:
        raise WorkloadError(f"kv_pool must be a positive whole number of pages (got {raw!r})")
    if page_size is None:
        raise WorkloadError("kv_pool is the pool of a paged KV cache: give page_size as well")
    held = intmath.mul(values["batch"], intmath.ceil_div(values["n_kv"], page_size))
    most = int(np.max(np.asarray(held)))
    if int(raw) < most:
        raise WorkloadError(
            f"kv_pool {int(raw)} pages cannot hold the batch's {most} (batch · ⌈n_kv / page_size⌉): give at least {most}"
        )
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
