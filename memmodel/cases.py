"""Validation cases: which kernel on which workload. Plain data, planned on the CPU."""

from __future__ import annotations

import re
from dataclasses import asdict
from typing import Any

from .errors import WorkloadError
from .frozen import frozen
from .implementations import CASE_IMPLEMENTATIONS
from .workload import Workload


@frozen
class Case:
    """One validation case: an implementation and the shape it runs (one line of a case list)."""

    impl: str
    n: int
    d: int
    batch: int = 1
    heads: int = 1
    kv_heads: int | None = None
    n_kv: int | None = None
    dtype: str = "fp16"
    causal: bool = False
    block_q: int | None = None
    block_kv: int | None = None
    #: run the training step: forward, then backward through autograd (dQ, dK, dV)
    backward: bool = False
    #: dropout probability on P (PyTorch's ``dropout_p``; eager ``native_dropout``)
    dropout: float = 0.0
    #: a causal sliding window (keys each query sees; FlashAttention-2's local kernels, sdpa-flash only)
    window: int | None = None
    #: a packed row of documents (FlashAttention-2's varlen kernels, sdpa-flash only; n is their sum)
    seq_lens: tuple[int, ...] | None = None
    #: V's (and O's) head dim where it differs from d (MLA: 192/128 prefill, 576/512 absorbed decode)
    d_v: int | None = None
    #: an FP8 K/V cache under 16-bit Q and O (``Workload.kv_dtype``): fp8 (e4m3) or fp8_e5m2
    kv_dtype: str | None = None
    #: a paged KV cache's tokens per page (impl=flashinfer or flex; a pool of scattered pages)
    page_size: int | None = None
    #: the paged cache's pool in pages (None: the workload's default, twice the batch's pages)
    kv_pool: int | None = None

    def __post_init__(self) -> None:
        if self.impl not in CASE_IMPLEMENTATIONS:
            raise WorkloadError(
                f"unknown kernel implementation {self.impl!r}: accepted are {', '.join(CASE_IMPLEMENTATIONS)}"
            )
        object.__setattr__(self, "backward", bool(self.backward))
        try:
            object.__setattr__(self, "dropout", float(self.dropout))
        except (TypeError, ValueError):
            raise WorkloadError(f"case dropout={self.dropout!r} is not a number") from None
        if self.window is not None:
            if self.impl not in MASK_CASE_IMPLEMENTATIONS:
                raise WorkloadError(
                    f"case window={self.window}: only impl=sdpa-flash or impl=flex runs a sliding window (not {self.impl})"
                )
            if self.n != self.n_kv_:
                raise WorkloadError(f"case window={self.window}: needs n = n_kv (the windowed cases align both ways)")
            object.__setattr__(self, "causal", True)
        if self.seq_lens is not None:
            object.__setattr__(self, "seq_lens", tuple(int(x) for x in self.seq_lens))
            if self.impl not in MASK_CASE_IMPLEMENTATIONS:
                raise WorkloadError(
                    f"case seq_lens={_docs(self.seq_lens)}: only impl=sdpa-flash or impl=flex runs a packed row "
                    f"(not {self.impl})"
                )
            if self.n != sum(self.seq_lens):
                raise WorkloadError(
                    f"case seq_lens={_docs(self.seq_lens)}: n={self.n} is not their sum ({sum(self.seq_lens)})"
                )
        if self.d_v == self.d:
            object.__setattr__(self, "d_v", None)
        if self.d_v is not None and self.impl not in DV_CASE_IMPLEMENTATIONS:
            raise WorkloadError(
                f"case d_v={self.d_v}: V's head dim apart from Q's runs with impl "
                f"{', '.join(DV_CASE_IMPLEMENTATIONS)} (not {self.impl})"
            )
        if self.impl in ("flashmla", "sdpa-math") and self.backward:
            raise WorkloadError(f"case impl={self.impl}: forward only (the MLA decode kernels run no backward)")
        if self.impl == "flashmla" and (self.d, self.d_v, self.kv_heads_) != (576, 512, 1):
            raise WorkloadError(
                f"case impl=flashmla: the absorbed MLA decode shape is d=576, d_v=512, kv_heads=1 "
                f"(got d={self.d}, d_v={self.d_v}, kv_heads={self.kv_heads_})"
            )
        if self.kv_dtype == self.dtype:
            object.__setattr__(self, "kv_dtype", None)
        if self.kv_dtype is not None and self.backward:
            raise WorkloadError(
                f"case kv_dtype={self.kv_dtype}: an FP8 K/V cache is read by inference kernels: no backward"
            )
        if self.page_size is not None and self.impl not in PAGED_CASE_IMPLEMENTATIONS:
            raise WorkloadError(
                f"case page_size={self.page_size}: only impl={' or impl='.join(PAGED_CASE_IMPLEMENTATIONS)} read a "
                f"paged KV cache (not {self.impl})"
            )
        if self.page_size is None and self.impl == "flashinfer":
            raise WorkloadError("case impl=flashinfer runs FlashInfer's paged wrappers: give page_size=")
        self.workload()  # validates shapes (and dropout in [0, 1))

    @property
    def kv_heads_(self) -> int:
        """K/V heads: as given, else ``heads`` (as :attr:`Workload.kv_heads_`)."""
        return self.kv_heads or self.heads

    @property
    def n_kv_(self) -> int:
        """Keys: as given, else ``n`` (as :attr:`Workload.n_kv_`)."""
        return self.n_kv or self.n

    @property
    def id(self) -> str:
        shape = f"b{self.batch}h{self.heads}"
        if self.kv_heads_ != self.heads:
            shape += f"kv{self.kv_heads_}"
        shape += f"n{self.n}"
        if self.n_kv_ != self.n:
            shape += f"nkv{self.n_kv_}"
        shape += f"d{self.d}"
        if self.d_v is not None:
            shape += f"dv{self.d_v}"
        extra = "-causal" if self.causal else ""
        if self.window is not None:
            extra += f"-win{self.window}"
        if self.seq_lens is not None:
            extra += f"-docs{_docs(self.seq_lens)}"
        if self.page_size is not None:
            extra += f"-page{self.page_size}"
        if self.kv_pool is not None:
            extra += f"-pool{self.kv_pool}"
        if self.block_q:
            extra += f"-bq{self.block_q}bkv{self.block_kv}"
        if self.dropout:
            extra += f"-drop{self.dropout:g}"
        if self.backward:
            extra += "-bwd"
        if self.kv_dtype is not None:
            extra += f"-kv{self.kv_dtype}"
        return f"{self.impl}/{shape}/{self.dtype}{extra}"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Case:
        """The case a record's ``case`` entry (:meth:`to_dict`) holds."""
        return cls(**{k: (tuple(v) if k == "seq_lens" and v is not None else v) for k, v in data.items() if k != "id"})

    def workload(self) -> Workload:
        return Workload(
            n=self.n,
            d=self.d,
            batch=self.batch,
            heads=self.heads,
            kv_heads=self.kv_heads_,
            n_kv=self.n_kv_,
            dtype=self.dtype,
            causal=self.causal,
            dropout=self.dropout,
            window=self.window,
            seq_lens=self.seq_lens,
            d_v=self.d_v,
            kv_dtype=self.kv_dtype,
            page_size=self.page_size,
            kv_pool=self.kv_pool,
        )

    @property
    def d_v_(self) -> int:
        """V's head dim: as given, else ``d`` (as :attr:`Workload.d_v_`)."""
        return self.d if self.d_v is None else self.d_v

    @property
    def v_in_k(self) -> bool:
        """V is the first d_v elements of K's row (the absorbed MLA form: one latent cache), not a
        tensor of its own: flashmla's cases, and sdpa-math's with one K/V head and d_v < d."""
        return self.impl == "flashmla" or (
            self.impl == "sdpa-math" and self.d_v is not None and self.d_v < self.d and self.kv_heads_ == 1
        )

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if out["kv_dtype"] is None:  # a key only FP8 K/V cases have (earlier records have none)
            del out["kv_dtype"]
        if out["seq_lens"] is None:  # a key only packed cases have (earlier records have none)
            del out["seq_lens"]
        else:
            out["seq_lens"] = list(out["seq_lens"])
        if out["d_v"] is None:  # a key only cases with V's head dim apart have
            del out["d_v"]
        if out["page_size"] is None:  # a key only paged cases have
            del out["page_size"]
        if out["kv_pool"] is None:  # a key only cases with a pool of their own have
            del out["kv_pool"]
        return {"id": self.id, **out}

    def spec(self) -> str:
        """The case as :func:`parse_case` reads it (``parse_case(c.spec()) == c``)."""
        keys = (
            "impl",
            "n",
            "d",
            "d_v",
            "batch",
            "heads",
            "kv_heads",
            "n_kv",
            "dtype",
            "kv_dtype",
            "block_q",
            "block_kv",
            "window",
            "page_size",
            "kv_pool",
        )
        parts = [f"{k}={getattr(self, k)}" for k in keys if getattr(self, k) is not None]
        parts += [f"seq_lens={_docs(self.seq_lens)}"] if self.seq_lens is not None else []
        parts += ["causal=1"] if self.causal else []
        parts += [f"dropout={self.dropout:g}"] if self.dropout else []
        parts += ["backward=1"] if self.backward else []
        return ",".join(parts)

    def input_bytes(self) -> int:
        w = self.workload()
        v = 0 if self.v_in_k else int(w.v_bytes())  # the absorbed form: V is part of K's rows
        return int(w.q_bytes()) + int(w.o_bytes()) + int(w.kv_bytes()) + v


_SPEC = re.compile(r"^(?P<key>[a-z_]+)=(?P<value>[^,]+)$")


_KEYS = (
    "impl, model, n, d, d_v, batch, heads, kv_heads, n_kv, dtype, kv_dtype, causal, window, chunk, seq_lens, page_size, "
    "kv_pool, block_q, block_kv, dropout, backward"
)
#: implementations whose cases take d_v (V's head dim apart from Q's)
DV_CASE_IMPLEMENTATIONS = ("standard", "sdpa-cudnn", "sdpa-efficient", "sdpa-math", "flashmla")
#: the case keys that take a whole number
_INT_KEYS = (
    "n",
    "d",
    "d_v",
    "batch",
    "heads",
    "kv_heads",
    "n_kv",
    "block_q",
    "block_kv",
    "window",
    "chunk",
    "page_size",
    "kv_pool",
)
#: the case implementations that read a paged KV cache (``page_size=``)
PAGED_CASE_IMPLEMENTATIONS = ("flashinfer", "flex")
#: the implementations whose cases take a sliding window or a packed row (FlashAttention-2's local and
#: varlen kernels; FlexAttention under a block mask)
MASK_CASE_IMPLEMENTATIONS = ("sdpa-flash", "flex")


def _docs(seq_lens: tuple[int, ...]) -> str:
    """A packed row's lengths as a case spec writes them: ``8192+4096+2048``."""
    return "+".join(map(str, seq_lens))


def parse_case(text: str) -> Case:
    """``impl=sdpa-flash,n=4096,d=64,batch=4,heads=16,dtype=fp16,causal=1`` (training step:
    ``backward=1``, with dropout ``dropout=0.1``); ``model=NAME`` (or a config.json) gives
    heads, kv_heads and d where the spec does not. ``chunk=C`` (chunked local attention, a causal
    prefill) is run as :func:`memmodel.workload.chunked` models it: the batch's chunks as one packed
    row (``seq_lens``, batch 1)."""
    fields: dict[str, Any] = {}
    model = None
    for part in text.split(","):
        m = _SPEC.match(part.strip())
        if not m:
            raise WorkloadError(f"cannot read case part {part!r} in {text!r}: expected key=value, e.g. n=4096")
        key, value = m["key"], m["value"]
        if key in ("impl", "dtype", "kv_dtype"):
            fields[key] = value
        elif key == "model":
            model = value
        elif key == "seq_lens":
            items = value.split("+")
            if not all(x.isascii() and x.isdigit() and int(x) > 0 for x in items):
                raise WorkloadError(f"case seq_lens={value!r}: expected positive lengths joined by +, e.g. 8192+4096")
            fields[key] = tuple(int(x) for x in items)
            fields.setdefault("n", sum(fields[key]))
        elif key in ("causal", "backward"):
            fields[key] = _flag(key, value)
        elif key == "dropout":
            try:
                fields[key] = float(value)
            except ValueError:
                raise WorkloadError(f"case dropout={value!r} is not a number") from None
        elif key in _INT_KEYS:
            try:
                fields[key] = int(value)
            except ValueError:
                raise WorkloadError(f"case {key}={value!r} is not an integer") from None
            if abs(fields[key]) > 2**63 - 1:
                raise WorkloadError(f"case {key}={value}: past int64 (at most {2**63 - 1})")
        else:
            raise WorkloadError(f"unknown case key {key!r}: accepted are {_KEYS}")
    if model is not None:
        from .model_shapes import load_model

        shape = load_model(model)
        att = shape.attention(fields.get("n"), fields.get("n_kv"))  # MLA: its prefill or absorbed decode form
        for key, value in (("heads", att.heads), ("kv_heads", att.kv_heads), ("d", att.d), ("d_v", att.d_v)):
            if value is not None:
                fields.setdefault(key, value)
    if "n" not in fields or "d" not in fields:
        raise WorkloadError(f"case {text!r} needs at least n= and d=")
    fields.setdefault("impl", "sdpa-flash")
    if "chunk" in fields:
        fields = _chunked_fields(fields, text)
    return Case(**fields)


def _chunked_fields(fields: dict[str, Any], text: str) -> dict[str, Any]:
    """A ``chunk=`` case's fields as its kernels run it (:func:`memmodel.workload.chunked`): the
    batch's chunks as one packed row."""
    from .workload import Workload, chunked

    chunk = fields.pop("chunk")
    n = fields["n"]
    if "seq_lens" in fields or "window" in fields or fields.get("n_kv", n) != n:
        raise WorkloadError(f"case {text!r}: chunk= takes a prefill (n_kv = n) with no window= or seq_lens=")
    w, _ = chunked(Workload(n=n, d=fields["d"], batch=fields.get("batch", 1), causal=True), chunk)
    fields.pop("n_kv", None)
    return (
        fields
        | {"causal": True, "n": int(w.n), "batch": int(w.batch)}
        | ({"seq_lens": w.seq_lens} if w.seq_lens is not None else {})
    )


def _flag(key: str, value: str) -> bool:
    if value.lower() in ("1", "true", "yes"):
        return True
    if value.lower() in ("0", "false", "no"):
        return False
    raise WorkloadError(f"case {key}={value!r} is not a flag: use 1 or 0")


def default_cases(*, with_triton: bool = True) -> list[Case]:
    """The default validation set: fills an H100/H200-class GPU, runs in about 2 minutes.

    N from 1k to 16k and one long sequence whose K/V (one head) exceed the L2, d 64 and 128,
    fp16 and bf16, causal on and off, GQA, decode; standard attention in eager PyTorch,
    FlashAttention-2 through PyTorch's SDPA (and its cuDNN and memory-efficient backends),
    and our Triton kernel at several tile sizes.
    """
    specs = [
        # standard attention (S, P in HBM)
        "impl=standard,batch=16,heads=16,n=1024,d=64",
        "impl=standard,batch=4,heads=16,n=4096,d=64",
        "impl=standard,batch=2,heads=16,n=8192,d=128,dtype=bf16",
        "impl=standard,batch=1,heads=16,n=16384,d=64",
        "impl=standard,batch=4,heads=32,kv_heads=8,n=2048,d=128",
        "impl=standard,batch=8,heads=32,kv_heads=8,n=1,n_kv=32768,d=128",
        # FlashAttention-2 (PyTorch SDPA, flash backend)
        "impl=sdpa-flash,batch=16,heads=16,n=1024,d=64",
        "impl=sdpa-flash,batch=4,heads=16,n=4096,d=64",
        "impl=sdpa-flash,batch=4,heads=16,n=4096,d=128",
        "impl=sdpa-flash,batch=2,heads=16,n=8192,d=128,dtype=bf16",
        "impl=sdpa-flash,batch=1,heads=16,n=16384,d=64",
        "impl=sdpa-flash,batch=4,heads=16,n=4096,d=128,causal=1",
        "impl=sdpa-flash,batch=1,heads=16,n=16384,d=128,dtype=bf16,causal=1",
        "impl=sdpa-flash,batch=4,heads=32,kv_heads=8,n=4096,d=128",
        "impl=sdpa-flash,batch=8,heads=32,kv_heads=8,n=1,n_kv=32768,d=128",
        "impl=sdpa-flash,batch=1,heads=1,n=131072,d=128",
        # PyTorch's other SDPA backends, where the build has them
        "impl=sdpa-cudnn,batch=4,heads=16,n=4096,d=64",
        "impl=sdpa-efficient,batch=4,heads=16,n=4096,d=64",
    ]
    if with_triton:
        specs += [
            "impl=triton,batch=4,heads=16,n=4096,d=64,block_q=128,block_kv=64",
            "impl=triton,batch=4,heads=16,n=4096,d=64,block_q=64,block_kv=64",
            "impl=triton,batch=4,heads=16,n=4096,d=128,block_q=128,block_kv=64",
            "impl=triton,batch=4,heads=16,n=4096,d=128,causal=1,block_q=128,block_kv=64",
            "impl=triton,batch=1,heads=1,n=131072,d=128,block_q=128,block_kv=64",
            "impl=triton,batch=1,heads=1,n=131072,d=128,block_q=64,block_kv=64",
        ]
    return [parse_case(s) for s in specs]


#: device name (as torch reports it) -> bundled profile (None: none fits, say so); the first
#: fragment the name contains wins, so a part's longer names come before the shorter names they
#: contain (GB200 before B200, H200 before H20, H100 NVL and PCIe before H100, L40 before L4)
DEVICE_PROFILES: tuple[tuple[str, str | None], ...] = (
    ("H200", "h200"),
    ("H20", "h20"),
    ("H100 NVL", "h100-nvl"),
    ("H100 PCIe", "h100-pcie"),
    ("H100", "h100-sxm"),
    ("A100-SXM4-40GB", "a100-40gb"),
    ("A100-PCIE-40GB", "a100-40gb"),
    ("A100 80GB PCIe", "a100-pcie"),
    ("A100-PCIE-80GB", "a100-pcie"),
    ("A100", "a100"),
    ("L40S", "l40s"),
    ("L40", None),  # the L40: neither the L40S (higher tensor rates and clocks) nor the 72 W L4
    ("L4", "l4"),
    ("A10", "a10"),
    ("RTX 4090", "rtx4090"),
    ("RTX 5090", "rtx5090"),
    ("RTX PRO 6000", "rtx-pro-6000"),
    ("V100", "v100"),
    ("MI300X", "mi300x"),
    ("MI325X", "mi325x"),
    ("MI355X", "mi355x"),
    ("GB200", "gb200"),
    ("B200", "b200"),
    ("GB300", "gb300"),
    ("B300", "b300"),
)


def profile_for_device(name: str) -> str | None:
    for fragment, profile in DEVICE_PROFILES:
        if fragment.lower() in name.lower():
            return profile
    return None
