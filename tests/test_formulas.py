"""Every formula in a ledger is the count it labels: the bytes a kernel requests from L2 (the
``l2`` row of a read, the stores of a write; the SRAM write is the same bytes arriving on
chip). The formula is evaluated with the workload's symbols and compared with that number."""

from __future__ import annotations

import itertools
import math
import re
from fractions import Fraction

import pytest

from memmodel import Workload, compare, load_profile
from memmodel.implementations import kernel_workload
from memmodel.traffic.blocks import visited_blocks
from memmodel.traffic.decode import split_block_kv
from memmodel.traffic.flash_backward import accumulator_head_dim

#: notes a formula may carry after its count (said for the reader, not counted)
NOTE = re.compile(
    r"\s*\((zeroed[^)]*|atomic add|per query head|once across splits|accumulate|D per CTA|V transposed in SRAM)\)"
)


def _symbols(w: Workload, params: dict, kernel) -> dict[str, int]:
    """The symbols of ``kernel``'s formulas: ``w`` is the workload as the kernel sees it
    (:func:`memmodel.implementations.kernel_workload`), blocks are its pass's."""
    backward = kernel.pass_ == "backward" and "backward_block_q" in params
    b_r = params.get("backward_block_q" if backward else "block_q", 1)
    b_c = params.get("backward_block_kv" if backward else "block_kv", 1)
    splits = params.get("splits", 1) or 1
    if kernel.name == "mea_bwd":  # the CUTLASS backward's key splits: its CTAs per head
        splits = kernel.ctas // (w.batch * w.heads)
    return {
        "B": w.batch,
        "H_kv": w.kv_heads_,
        "H": w.heads,
        "G": w.group,
        "N_kv": w.n_kv_,
        "N": w.n,
        "d_r": accumulator_head_dim(w.d),
        "d": w.d,
        "e": w.element_bytes,
        "e_kv": w.kv_element_bytes,
        "e_O": w.out_element_bytes,
        "B_r": b_r,
        "B_c": b_c,
        "B_i": b_r,
        "B_j": b_c,
        "T_r": -(-w.n // b_r),
        "T_c": -(-w.n_kv_ // b_c),
        "splits": splits,
        "visited": Fraction(visited_blocks(w.n, w.n_kv_, b_r, b_c, w.causal), -(-w.n // b_r) * -(-w.n_kv_ // b_c)),
        # the split-KV kernel's own tiles: 64 query rows, split_block_kv(d) keys
        "visited_split": Fraction(
            visited_blocks(w.n, w.n_kv_, 64, split_block_kv(w.d), w.causal),
            -(-w.n // 64) * -(-w.n_kv_ // split_block_kv(w.d)),
        ),
    }


def evaluate(formula: str, symbols: dict[str, int]) -> int:
    """``formula`` (``T_c · B·H·N·d·e · visited``, ``⌈N/B_r⌉·B_r``, ``init: …``) as a number;
    a share ``visited`` of a count is floored, as :func:`memmodel.intmath.scaled` does."""
    text = NOTE.sub("", formula.removeprefix("init: "))
    text = text.replace("·", "*").replace("−", "-").replace("⌈", "ceil(").replace("⌉", ")")
    for name in sorted(symbols, key=len, reverse=True):
        text = re.sub(rf"(?<![\w]){re.escape(name)}(?![\w])", f"S[{name!r}]", text)
    try:
        value = eval(text, {"ceil": lambda x: math.ceil(x), "S": symbols})  # noqa: S307 - our own strings
    except SyntaxError:
        return -1  # not a formula
    return math.floor(value)


H200 = load_profile("h200")
WORKLOADS = [
    dict(n=1024, d=128),
    dict(n=1000, d=80, causal=True),
    dict(n=512, n_kv=1536, d=64, heads=8, kv_heads=2, causal=True),
    dict(n=1, n_kv=8195, d=128, heads=32, kv_heads=8, batch=2),
    dict(n=777, d=256, dropout=0.1),
]
OPTIONS = [
    dict(tiled=t, l2=l2, backward=bwd, impl=impl, standard=std)
    for t, l2, bwd, impl, std in itertools.product(
        ["fa1", "fa2"],
        ["on", "off"],
        [False, True],
        ["auto", "paper", "sdpa-flash", "sdpa-efficient", "sdpa-cudnn", "triton", "fa3"],
        ["algorithm0", "eager"],
    )
]


def _cases():
    for shape, opts in itertools.product(WORKLOADS, OPTIONS):
        if opts["tiled"] == "fa1" and opts["impl"] != "paper":
            continue
        if opts["impl"] == "sdpa-cudnn" and shape.get("causal") and shape.get("n_kv", shape["n"]) != shape["n"]:
            continue  # refused: a causal chunk through cuDNN (tests/test_chunk_causal.py)
        yield shape, opts


@pytest.mark.parametrize(("shape", "opts"), list(_cases()))
def test_every_formula_is_the_request_it_labels(shape, opts):
    shape = dict(shape)
    w = Workload(dtype="fp16", causal=shape.pop("causal", False), dropout=shape.pop("dropout", 0.0), **shape)
    opts = dict(opts)
    standard = opts.pop("standard")
    # every combination here is one the model accepts: an exception is a failure, not a skip
    c = compare(w, H200, standard=standard, **opts)
    wrong = []
    checked = 0
    for alg in c.algorithms:
        params = alg.traffic.params
        seen = w if alg.traffic.name == "standard" else kernel_workload(w, c.options.model_implementation)
        for k in alg.traffic.kernels:
            s = _symbols(seen, params, k)
            for t in k.transfers:
                if t.level != "l2":
                    continue
                assert t.formula, (k.name, t.tensor)
                got = evaluate(t.formula, s)
                checked += 1
                if got != int(t.bytes):
                    wrong.append((alg.traffic.variant, k.name, t.tensor, t.direction, t.formula, got, int(t.bytes)))
    assert wrong == []
    # each algorithm has its L2 rows (at least 5 each today: Q, K, V reads, O written, ...)
    assert checked >= 5 * len(c.algorithms), checked


def test_the_evaluator_can_fail():
    s = {"B": 2, "H": 4, "N": 100, "d": 64, "e": 2, "T_c": 3, "visited": Fraction(2, 3)}
    assert evaluate("T_c · B·H·N·d·e · visited", s) == 3 * 2 * 4 * 100 * 64 * 2 * 2 // 3
    assert evaluate("init: B·H·N·d·e (zeroed)", s) == 2 * 4 * 100 * 64 * 2
    assert evaluate("B·H·⌈N/64⌉·64·4", s) == 2 * 4 * 128 * 4
