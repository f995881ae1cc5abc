"""FlashAttention-2's forward writes its spilled registers (``memmodel.calibration.fa2_spills``),
and a packed row's documents of one length run as a batch."""

from __future__ import annotations

import pytest

from memmodel import Workload, compare
from memmodel.calibration.fa2_spills import fit
from memmodel.hardware import load_profile

from .conftest import REPO

H200 = load_profile("h200")


def _spills(c) -> int:
    return sum(
        int(t.bytes) for k in c.tiled.traffic.kernels for t in k.transfers if t.tensor == "spills" and t.level == "hbm"
    )


def test_the_fit_reads_the_probe_and_gives_the_profile_s_figures():
    result = fit(REPO)
    # the even causal kernel at d = 128 at three sizes: what the L2 holds dirty at the end, tens of MB
    assert result["rows"] == 16 and 15e6 < result["residue"] < 40e6
    figures = H200.implementation("sdpa-flash")
    for field, attr in (
        ("spill_write_causal", "spill_write_causal_bytes"),
        ("varlen_spill_write_causal", "varlen_spill_write_causal_bytes"),
    ):
        assert dict(getattr(figures, attr)) == {d: float(v) for d, v in result["figures"][field].items()}
    # the packed row's kernel spills several times the even one's at d = 128, causal
    assert figures.spill_write_bytes_at(128, uneven=True, causal=True) > 3 * figures.spill_write_bytes_at(
        128, uneven=False, causal=True
    )


def test_each_forward_cta_writes_its_spills():
    w = Workload(n=8192, d=128, batch=4, heads=40, kv_heads=8, dtype="bf16", causal=True)
    per_cta = H200.implementation("sdpa-flash").spill_write_bytes_at(128, uneven=False, causal=True)
    # 4 × 40 heads × 64 Q blocks of 128 = 10240 CTAs
    assert _spills(compare(w, H200, impl="sdpa-flash")) == 10240 * round(per_cta)
    # 8000 is not a multiple of 128: the uneven kernel's figure, 63 Q blocks a head
    uneven = H200.implementation("sdpa-flash").spill_write_bytes_at(128, uneven=True, causal=True)
    assert _spills(compare(w.with_(n=8000), H200, impl="sdpa-flash")) == 4 * 40 * 63 * round(uneven)


@pytest.mark.parametrize(
    ("changes", "impl"),
    [
        ({}, "sdpa-cudnn"),  # another kernel
        ({"dropout": 0.1}, "sdpa-flash"),  # the dropout kernel: not measured
        ({"d": 256}, "sdpa-flash"),  # another head dim's kernel: not measured
    ],
)
def test_kernels_the_probe_did_not_run_count_no_spills(changes, impl):
    w = Workload(n=8192, d=128, batch=2, heads=16, dtype="bf16", causal=True).with_(**changes)
    assert _spills(compare(w, H200, impl=impl)) == 0


def test_a_packed_row_of_equal_documents_reads_as_a_batch_does():
    docs = Workload(n=32768, d=128, heads=40, kv_heads=8, dtype="bf16", causal=True, seq_lens=(8192,) * 4)
    batch = Workload(n=8192, d=128, batch=4, heads=40, kv_heads=8, dtype="bf16", causal=True)
    p, b = compare(docs, H200, impl="sdpa-flash"), compare(batch, H200, impl="sdpa-flash")
    reads = [c.tiled.traffic.bytes(level="hbm", direction="read") for c in (p, b)]
    assert reads[0] == reads[1]  # the four documents' K/V share the L2 as the batch's rows do
    k = p.tiled.traffic.kernels[0]
    assert (int(k.ctas), int(k.exited_ctas)) == (4 * 40 * 64, 0)  # documents × the longest one's CTAs
    mixed = Workload(n=8192 + 3 * 1024, d=128, heads=8, dtype="bf16", causal=True, seq_lens=(1024, 8192, 1024, 1024))
    k = compare(mixed, H200, impl="sdpa-flash").tiled.traffic.kernels[0]
    # 4 documents × 64 Q blocks × 8 heads launched, 64 + 3 × 8 of them a head run
    assert (int(k.ctas), int(k.exited_ctas)) == (4 * 64 * 8, 4 * 64 * 8 - (64 + 3 * 8) * 8)


def test_the_local_kernel_writes_its_own_spills():
    w = Workload(n=8192, d=128, batch=2, heads=16, dtype="bf16", causal=True, window=1024)
    per_cta = H200.implementation("sdpa-flash").spill_write_bytes_at(128, uneven=False, causal=True, local=True)
    assert per_cta > 0  # the probe's second run measured it
    # 2 × 16 heads × 64 Q blocks = 2048 CTAs
    assert _spills(compare(w, H200, impl="sdpa-flash")) == 2048 * round(per_cta)
