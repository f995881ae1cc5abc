"""flex's forward template at a decode over a paged cache (a GQA group that is not a power of two):
its occupancy with the paged shared memory, its step latency (``implementations.flex.template_step_time``)
and the probe it is fitted to."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from memmodel import Workload, compare, load_profile
from memmodel.calibration import flex_template
from memmodel.traffic import paged

ROOT = Path(__file__).resolve().parent.parent
H200 = load_profile("h200")


def record():
    with gzip.open(ROOT / flex_template.RECORD, "rt") as f:
        return json.load(f)


def _kernel(w: Workload, profile=H200):
    (k,) = [k for k in compare(w, profile, impl="flex").tiled.timing.kernels if k.name == "flex_attention"]
    return k


@pytest.mark.parametrize(
    ("d", "block_n", "is_paged", "ctas"),
    [
        # d 64: 4 warps, (128, 128) tiles; Q 128·64·2 = 16,384 + 3 stages · 128 · 128 · 2 = 98,304: 114,688
        # bytes, with the driver's 1 KiB 115,712: two in 233,472; paged, 16 · 128 = 2,048 bytes more:
        # 117,760, one (Nsight Compute: 116,736 bytes, one CTA an SM)
        (64, 128, False, 2),
        (64, 128, True, 1),
        # pages of 64: 16,384 + 3 · 64 · 128 · 2 + 1,024 = 66,560 bytes (as measured): the registers' two
        (64, 64, True, 2),
        # d 128: 8 warps take the register file, one CTA an SM at any page
        (128, 64, True, 1),
        (128, 16, True, 1),
    ],
)
def test_the_templates_ctas_an_sm(d, block_n, is_paged, ctas):
    assert paged.flex_forward_ctas_per_sm("bf16", 2, d, block_n, is_paged, 233472) == ctas


def test_a_decode_over_a_paged_cache_waits_its_steps_one_after_another():
    # 8 requests, 24 query heads on 8 (a group of 3: the forward template), d 128, pages of 64: one CTA
    # per (request, head), 192, one an SM: two waves of 132; each walks 8192 / 64 = 128 steps of 4 us,
    # 1.024 ms, longer than its products (about 0.62 ms)
    w = Workload(n=1, n_kv=8192, batch=8, heads=24, kv_heads=8, d=128, dtype="bf16", page_size=64)
    p = H200.with_implementation_figures("flex", template_step_time_s=((16, 2e-6), (64, 4e-6)))
    k = _kernel(w, p)
    assert k.terms["latency"] == pytest.approx(2 * 128 * 4e-6)
    assert k.label == "latency"
    # pages of 16: 512 steps, at the figure for 16 keys
    assert _kernel(w.with_(page_size=16), p).terms["latency"] == pytest.approx(2 * 512 * 2e-6)
    # a prefill's tiles are full of queries, and contiguous K/V has no block mask (plain steps): the figure
    # does not apply
    bare = H200.with_implementation_figures("flex", template_step_time_s=())
    for other in (w.with_(n=512, causal=True), w.with_(page_size=None)):
        assert _kernel(other, p).time_s == pytest.approx(_kernel(other, bare).time_s, rel=1e-12)
    assert _kernel(w, p).time_s > _kernel(w, bare).time_s


def test_the_probe_rows_are_the_paged_decodes_of_a_group_of_three():
    rows = flex_template.rows(record())
    # d 64: pages of 16, 32, 64 (batch 4, 8, 40), 128 (BLOCK_N 128); d 128: 16, 32, 64 (three), 128 (BLOCK_N 64)
    assert sorted(b for _, b, _ in rows) == [16, 16, 32, 32] + [64] * 7 + [128]
    assert all(m > 0 for _, _, m in rows)


def test_the_fit_and_the_profile_agree():
    fitted = flex_template.fit(record(), H200)
    bundled = dict(H200.implementation("flex").template_step_time_s)
    assert set(fitted) == set(bundled) == {16, 32, 64, 128}
    assert fitted == {b: pytest.approx(v, rel=0.02) for b, v in bundled.items()}
    # the latency grows with the keys a step loads: about 1 us at 16, 2.7 at 64, 5 at 128
    assert bundled[16] < bundled[32] < bundled[64] < bundled[128]
    assert 0.8e-6 < bundled[16] < 1.2e-6 and 4e-6 < bundled[128] < 6e-6


def test_apply_writes_the_figure_and_its_source():
    import yaml

    from memmodel.hardware.parse import parse_profile

    data = yaml.safe_load((ROOT / "memmodel/hardware/profiles/h200.yaml").read_text())
    del data["implementations"]["flex"]["template_step_time"]
    out = flex_template.apply(data, record())
    assert out["implementations"]["flex"]["template_step_time"]["source"] == flex_template.SOURCE
    assert flex_template.SOURCE in out["sources"]
    assert parse_profile(out, "<test>").implementation("flex").template_step_time_s


def test_compare_names_the_ctas_the_paged_kernels_hold(run):
    # the header's "CTAs at once" is the kernel's own: the template at d 128 holds one CTA an SM (132),
    # flex's decoding kernel over pages of 16 ten (1320), FlashInfer's decode at group 4, d 128 nine (1188)
    cases = [
        (["--heads", "24", "--impl", "flex", "--page-size", "64"], "132 CTAs at once"),
        (["--heads", "32", "--impl", "flex", "--page-size", "16"], "1320 CTAs at once"),
        (["--heads", "32", "--impl", "flashinfer", "--page-size", "16"], "1188 CTAs at once"),
    ]
    for args, want in cases:
        out = run(
            "compare", "--n", "1", "--n-kv", "8192", "--batch", "8", "--kv-heads", "8", "--d", "128",
            "--dtype", "bf16", "--gpu", "h200", *args,
        )  # fmt: skip
        assert out.exit_code == 0, out.stderr
        assert want in out.stdout
