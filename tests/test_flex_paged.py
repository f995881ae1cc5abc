"""flex's prefill over a paged cache: the page-table step's measured cost (memmodel.calibration.flex_paged)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from memmodel.calibration import flex_paged
from memmodel.hardware import load_profile
from memmodel.model import compare
from memmodel.workload import Workload

ROOT = Path(__file__).resolve().parents[1]
H200 = load_profile("h200")


def record() -> dict:
    return json.load(gzip.open(ROOT / flex_paged.RECORD, "rt"))


def test_rows_are_the_probes_paged_prefills_by_their_block():
    rows = flex_paged.rows(record())
    # three shapes at pages of 16, two at 64, one at 128; flex's BLOCK_N at d 128 is 64, so a page
    # of 128 still loads 64-key blocks
    assert sorted(b for _, b, _ in rows) == [16, 16, 16, 64, 64, 64]
    assert all(m > 0 for _, _, m in rows)


def test_the_fit_and_the_profile_agree():
    fitted = flex_paged.fit(record(), H200)
    assert fitted == {16: pytest.approx(1.243, rel=0.02), 64: pytest.approx(0.2874, rel=0.02)}
    assert dict(H200.implementation("flex").paged_step_cost) == {16: 1.243, 64: 0.2874}


def _kernel(w: Workload, profile=H200):
    (k,) = [k for k in compare(w, profile, impl="flex").tiled.timing.kernels if k.name == "flex_attention"]
    return k


def test_a_paged_prefill_pays_it_and_a_decode_does_not():
    prefill = Workload(n=512, n_kv=6144, d=128, batch=2, heads=32, kv_heads=8, dtype="bf16", causal=True, page_size=16)
    bare = H200.with_implementation_figures("flex", paged_step_cost=())
    with_cost, without = _kernel(prefill), _kernel(prefill, bare)
    # every step paged: its products, softmax and exps scale by 1 + 1.243 (BLOCK_N 16: the page);
    # the CTAs' fixed cost does not
    for term in ("matmul", "softmax", "exp"):
        assert with_cost.terms[term] == pytest.approx(without.terms[term] * 2.243, rel=1e-6)
    assert with_cost.terms["cta"] == pytest.approx(without.terms["cta"])
    decode = Workload(n=1, n_kv=8192, d=128, batch=8, heads=32, kv_heads=8, dtype="bf16", page_size=16)
    assert compare(decode, H200, impl="flex").tiled.timing.time_s == pytest.approx(
        compare(decode, bare, impl="flex").tiled.timing.time_s
    )


def test_apply_writes_the_figure_and_its_source():
    import yaml

    from memmodel.hardware.parse import parse_profile

    data = yaml.safe_load((ROOT / "memmodel/hardware/profiles/h200.yaml").read_text())
    del data["implementations"]["flex"]["paged_step_cost"]
    out = flex_paged.apply(data, record())
    assert out["implementations"]["flex"]["paged_step_cost"]["source"] == flex_paged.SOURCE
    assert flex_paged.SOURCE in out["sources"]
    assert parse_profile(out, "<test>").implementation("flex").paged_step_cost
