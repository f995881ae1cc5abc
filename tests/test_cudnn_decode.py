"""cuDNN's decode grid as the profiler saw it on the H200 (``validation/h200/cudnn-decode-probe``):
the split count, the two CTAs a split above d 128, and the combine's bytes they imply."""

from __future__ import annotations

import csv
import gzip
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from memmodel import load_profile
from memmodel.cases import parse_case
from memmodel.model import compare
from memmodel.options import options_for
from memmodel.traffic.decode import (
    choose_splits,
    cudnn_decode_resident,
    cudnn_decode_splits,
    cudnn_decode_value_ctas,
)
from memmodel.workload import Workload

from .conftest import REPO

H200 = load_profile("h200")
PROBE = REPO / "validation" / "h200" / "cudnn-decode-probe"


#: every Nsight-traced set of cuDNN decodes: (cases file, its Nsight Compute table, cases)
TRACED = {
    "grid probe": ("h200-cudnn-decode-probe.txt", PROBE / "cudnn-decode-probe.ncu.csv.gz", 12),
    "rate probe": (
        "h200-cudnn-decode-rate-probe.txt",
        REPO / "validation/h200/cudnn-decode-rate-probe/cudnn-decode-rate-probe.ncu.csv.gz",
        16,
    ),
    "groups probe": (
        "h200-cudnn-decode-groups-probe.txt",
        REPO / "validation/h200/cudnn-decode-groups-probe/cudnn-decode-groups-probe.ncu.csv.gz",
        10,
    ),
    "blind check": (
        "h200-cudnn-decode-check.txt",
        REPO / "validation/h200/final/h200-cudnn-decode-check.ncu.csv.gz",
        16,
    ),
}


def _grids(trace: Any) -> list[tuple[int, int, int]]:
    """The (x, y, z) grid of each cuDNN decode kernel launch, in the order the probe ran them."""
    with gzip.open(trace, "rt") as f:
        rows = csv.reader(line for line in f if line.startswith('"'))
        head = next(rows)
        name, grid, ident = head.index("Kernel Name"), head.index("Grid Size"), head.index("ID")
        seen: dict[str, tuple[int, int, int]] = {}
        for row in rows:
            if "flash_fprop_wmma" in row[name] and row[ident] not in seen:
                x, y, z = (int(v) for v in row[grid].strip("()").split(","))
                seen[row[ident]] = (x, y, z)
    return [seen[k] for k in sorted(seen, key=int)]


def _traced(which: str) -> list[tuple[str, tuple[int, int, int]]]:
    """(case, its decode kernel's Nsight grid) of a traced set, checked to pair one to one."""
    cases_file, trace, count = TRACED[which]
    lines = (REPO / "validation" / "cases" / cases_file).read_text().splitlines()
    cases = [line for line in lines if line.startswith("impl=sdpa-cudnn")]
    grids = _grids(trace)
    assert len(cases) == len(grids) == count
    return list(zip(cases, grids, strict=True))


@pytest.mark.parametrize("which", list(TRACED))
def test_the_rule_and_the_model_give_every_grid_nsight_saw(which):
    for case, (x, y, z) in _traced(which):
        w = parse_case(case).workload()
        group = w.heads // w.kv_heads_
        tiles = -(-group // 16)
        assert (y, z) == (w.kv_heads_ * tiles, w.batch), case  # Nsight's y: K/V heads x 16-row tiles
        splits = cudnn_decode_splits(w.batch, w.kv_heads_, w.n_kv_, H200.sm_count, group)
        assert splits * cudnn_decode_value_ctas(w.d) == x, case  # x: the splits' CTAs
        kernel = next(k for k in compare(w, H200, options_for("sdpa-cudnn", w, H200)).tiled.traffic.kernels)
        assert kernel.ctas == x * y * z and kernel.row_tiles == tiles, case


def test_unsplit_grids_are_the_same_decode_kernel():
    # batch x K/V heads 16 x 8 and 64 x 2 pass half the SMs: one split, the same decode kernel
    pairs = _traced("rate probe")
    assert [g for c, g in pairs if "batch=16," in c or "batch=64," in c] == [(1, 8, 16), (2, 2, 64)]


def test_the_pinned_grids():
    # 132 SMs: a target of 256 CTAs (2 a SM, a power of two), splits at most 64, one 128-key tile each
    assert cudnn_decode_splits(1, 2, 8192, 132) == 64  # 256 / 2 = 128 > 64: the cap
    assert cudnn_decode_splits(1, 2, 2048, 132) == 16  # 2048 / 128 tiles
    assert cudnn_decode_splits(8, 2, 8192, 132) == 16  # 256 / 16
    assert cudnn_decode_splits(128, 2, 2048, 132) == 1
    assert cudnn_decode_splits(1, 8, 100, 132) == 1  # not one whole tile: no split
    assert cudnn_decode_splits(1, 8, 65536, 108) == 16  # 108 SMs: 216 -> a target of 128, / 8
    # grids of our other H200 records' decodes (Nsight Compute): (batch, K/V heads) -> splits
    for (b, hk), want in {(6, 8): 4, (8, 8): 4, (16, 4): 4, (16, 2): 8, (4, 8): 8, (1, 8): 32}.items():
        assert cudnn_decode_splits(b, hk, 4096, 132) == want, (b, hk)
    for b, hk in ((12, 8), (24, 4), (16, 8), (32, 8)):  # 96 to 256 pairs: past half the SMs, one split
        assert cudnn_decode_splits(b, hk, 65536, 132) == 1
    assert (cudnn_decode_value_ctas(128), cudnn_decode_value_ctas(256)) == (1, 2)


@given(
    batch=st.integers(1, 512),
    kv_heads=st.integers(1, 64),
    n_kv=st.integers(1, 1 << 20),
    sms=st.integers(16, 200),
)
def test_splits_are_powers_of_two_that_fill_at_most_the_target(batch, kv_heads, n_kv, sms):
    s = cudnn_decode_splits(batch, kv_heads, n_kv, sms)
    assert s >= 1 and s & (s - 1) == 0
    if s > 1:
        assert batch * kv_heads * 2 <= sms
        target = 1 << ((2 * sms).bit_length() - 1)
        assert s * batch * kv_heads <= target and s <= target // 4 and n_kv >= 128 * s


def test_cudnn_decodes_take_its_rule_and_flash_keeps_fa2s():
    w = Workload(n=1, n_kv=8192, d=256, batch=1, heads=32, kv_heads=2, dtype="bf16")
    assert choose_splits(w, 132, rule="cudnn") == 64
    assert choose_splits(w, 132) != 64  # FlashAttention-2's wave heuristic
    c = compare(w, H200, options_for("sdpa-cudnn", w, H200))
    split = next(k for k in c.tiled.traffic.kernels if k.kind == "split_kv")
    combine = next(k for k in c.tiled.traffic.kernels if k.kind == "combine")
    assert int(split.ctas) == 64 * 2 * 2  # splits × K/V heads × two value CTAs
    # the combine reads each split's partial O once, fp32: 64 · 32 heads · 256 · 4 B, and its lse 64 · 32 · 4 B
    reads = sum(
        t.bytes
        for t in c.tiled.traffic.transfers
        if t.kernel == combine.name and t.level == "l2" and t.direction == "read"
    )
    assert reads == 64 * 32 * 256 * 4 + 64 * 32 * 4
    # L2 serves K once to each value CTA: twice K's bytes, V's once (2 · 8192 · 256 · 2 B per K/V head)
    k_req = sum(
        t.bytes for t in c.tiled.traffic.transfers if t.kernel == split.name and t.level == "l2" and t.tensor == "K"
    )
    v_req = sum(
        t.bytes for t in c.tiled.traffic.transfers if t.kernel == split.name and t.level == "l2" and t.tensor == "V"
    )
    assert (k_req, v_req) == (2 * 2 * 8192 * 256 * 2, 2 * 8192 * 256 * 2)


@pytest.mark.parametrize("d", [64, 128])
def test_at_and_below_d_128_one_cta_a_split(d):
    w = Workload(n=1, n_kv=8192, d=d, batch=1, heads=16, kv_heads=2, dtype="bf16")
    c = compare(w, H200, options_for("sdpa-cudnn", w, H200))
    split = next(k for k in c.tiled.traffic.kernels if k.kind == "split_kv")
    assert int(split.ctas) == 64 * 2


def test_an_unsplit_cudnn_decode_is_its_decode_kernel_writing_o_itself():
    # 64 requests over 2 K/V heads, d 256, 4096 keys: one split, two CTAs a (request, K/V head) each
    # computing half of O's columns over all of K (Nsight: grid (2, 2, 64), no lean_reduction_kernel)
    w = Workload(n=1, n_kv=4096, d=256, heads=16, kv_heads=2, batch=64, dtype="bf16")
    (kernel,) = compare(w, H200, options_for("sdpa-cudnn", w, H200)).tiled.traffic.kernels
    assert kernel.name == "fa2_splitkv" and kernel.ctas == 2 * 2 * 64
    kv = 64 * 2 * 4096 * 256 * 2  # K (and V) of every request, once from HBM: 268,435,456 bytes each
    reads = {t.tensor: t.bytes for t in kernel.transfers if t.level == "l2" and t.direction == "read"}
    assert reads["K"] == 2 * kv and reads["V"] == kv  # each CTA requests all of K, half of V
    writes = {t.tensor: t.bytes for t in kernel.transfers if t.level == "hbm" and t.direction == "write"}
    assert writes == {"O": 64 * 16 * 256 * 2, "lse": 64 * 16 * 4}
    # the measured kernel (CUPTI, validation/h200/cudnn-decode-rate-probe): 154.7 us
    t = next(k for k in compare(w, H200, options_for("sdpa-cudnn", w, H200)).tiled.timing.kernels)
    assert float(t.time_s) - float(t.terms["launch"]) == pytest.approx(154.7e-6, rel=0.10)


def test_a_grid_runs_the_split_kernels_and_the_unsplit_one_row_by_row():
    import numpy as np

    w = Workload(n=1, n_kv=4096, d=256, heads=16, kv_heads=2, batch=np.array([1, 64]), dtype="bf16")
    kernels = {k.name: k for k in compare(w, H200, options_for("sdpa-cudnn", w, H200)).tiled.traffic.kernels}
    assert set(kernels) == {"fa2_splitkv", "fa2_combine"}
    # row 0: 32 splits (4096 / 128 keys) x 2 K/V heads x 2 value CTAs; row 1: (2, 2, 64) unsplit
    assert list(kernels["fa2_splitkv"].ctas) == [32 * 2 * 2, 2 * 2 * 64]
    assert list(np.asarray(kernels["fa2_combine"].present)) == [True, False]
    one = Workload(n=1, n_kv=4096, d=256, heads=16, kv_heads=2, batch=64, dtype="bf16")
    (alone,) = compare(one, H200, options_for("sdpa-cudnn", one, H200)).tiled.traffic.kernels
    assert int(np.asarray(kernels["fa2_splitkv"].bytes(level="hbm"))[1]) == int(alone.bytes(level="hbm"))


def test_the_decode_rate_is_fitted_to_the_probes_kernel_durations():
    from memmodel.calibration import cudnn_decode

    found = cudnn_decode.rows(cudnn_decode.load(REPO))
    assert len(found) == 16 + 12 + 10  # every cuDNN decode of the three probes with one decode kernel
    figures = H200.implementation_figures["sdpa-cudnn"]
    rates = dict(figures.cta_bandwidth_bytes_per_s)
    assert set(rates) == {64, 128, 256} and H200.provenance["implementations.sdpa-cudnn.cta_bandwidth"].source == (
        cudnn_decode.SOURCE
    )
    # one CTA an SM, d 128: 64 CTAs read 134 MB in 43.4 us (CUPTI), ~2.1 MB a CTA: about 50 GB/s each,
    # three times the 18 GB/s the calibration's two-CTA references gave
    assert 45e9 < rates[128] < 60e9
    spec = "impl=sdpa-cudnn,batch=1,heads=8,kv_heads=1,n=1,n_kv=262144,d=128,dtype=bf16"
    from memmodel.calibration.serving import _planned, predicted

    assert predicted(_planned(spec, "", H200), "fa2_splitkv", H200) == pytest.approx(43.4e-6, rel=0.05)


def test_pinned_grids_of_groups_past_the_tile():
    # pinned: 40 requests x 3 tiles = 120 units, 240 > 132 SMs: unsplit; 16 x 3 = 48: 256 / 48 -> 4
    assert cudnn_decode_splits(40, 1, 8192, 132, 40) == 1 and cudnn_decode_splits(16, 1, 8192, 132, 40) == 4
    assert cudnn_decode_splits(16, 1, 8192, 132, 16) == 16  # one tile: 256 / 16


def test_each_tile_requests_the_whole_chunk():
    # 32 heads over 1 K/V head, one request, 32768 keys, d 128: two 16-row tiles of 64 splits each read
    # the split's K and V: L2 requests twice the 16.8 MB of K/V, HBM once
    w = Workload(n=1, n_kv=32768, d=128, heads=32, kv_heads=1, dtype="bf16")
    kernel = compare(w, H200, options_for("sdpa-cudnn", w, H200)).tiled.traffic.kernels[0]
    kv = 32768 * 128 * 2  # 8,388,608 bytes of K (and of V)
    reads = {t.tensor: (t.level, t.bytes) for t in kernel.transfers if t.direction == "read" and t.level == "l2"}
    assert reads["K"][1] == reads["V"][1] == 2 * kv
    hbm = {t.tensor: t.bytes for t in kernel.transfers if t.direction == "read" and t.level == "hbm"}
    assert hbm["K"] == hbm["V"] == kv


def test_the_decode_kernels_own_occupancy_and_no_memset_launch():
    from memmodel.host import kernel_launches

    assert [cudnn_decode_resident(d) for d in (64, 128, 256)] == [4, 2, 2]
    assert list(cudnn_decode_resident(np.array([48, 96, 256]))) == [4, 2, 2]
    w = Workload(n=1, n_kv=8192, d=64, heads=16, kv_heads=4, batch=8, dtype="bf16")
    split, combine = compare(w, H200, options_for("sdpa-cudnn", w, H200)).tiled.traffic.kernels
    # 8 x 4 units: 256 / 32 = 8 splits, 256 CTAs, 4 an SM at d 64: all 256 at once (528 slots)
    assert split.ctas == 256 and split.concurrent_ctas == 256
    assert kernel_launches(split, "sdpa-cudnn") == 1.0 and kernel_launches(combine, "sdpa-cudnn") == 1.0
    prefill = Workload(n=2048, d=64, heads=16, batch=8, dtype="bf16")
    fwd = next(
        k
        for k in compare(prefill, H200, options_for("sdpa-cudnn", prefill, H200)).tiled.traffic.kernels
        if k.name == "fa2_fwd"
    )
    assert kernel_launches(fwd, "sdpa-cudnn") == 2.0  # its memset's launch before it


def test_a_cudnn_decode_off_hopper_says_what_it_borrows(run):
    args = ("compare", "--n", "1", "--n-kv", "8192", "--d", "128", "--heads", "32", "--kv-heads", "8")
    args += ("--impl", "sdpa-cudnn", "--dtype", "bf16", "--gpu")
    b200 = run(*args, "b200")
    assert b200.exit_code == 0
    (line,) = [x for x in b200.stderr.splitlines() if "cuDNN's decode on" in x]
    assert "cuDNN's decode on Blackwell: its grid and rates were measured on Hopper" in line
    # where its grid was read (Hopper: the H200 and the H100s derived from it), nothing borrowed
    for gpu in ("h200", "h100-sxm"):
        assert "cuDNN's decode on" not in run(*args, gpu).stderr
    # a prefill is not a decode
    prefill = run("compare", "--n", "4096", *args[3:], "b200")
    assert prefill.exit_code == 0 and "cuDNN's decode on" not in prefill.stderr
