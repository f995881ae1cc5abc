"""The split-KV path as calibrate measures it: the split kernel's own efficiency and CTA-wave
cost, the combine kernel's fixed, per-split and per-byte costs, each fitted back from times the
model itself makes, and the time model reading them (arithmetic in the comments)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memmodel.calibration import fits, plan
from memmodel.hardware import load_profile, parse_profile
from memmodel.model import compare
from memmodel.options import options_for
from memmodel.workload import Workload

from .conftest import REPO

CALIBRATED = REPO / "tests" / "data" / "h200-calibrated.yaml"


def _bare():
    """The frozen H200 calibration without its implementation figures (what calibrate's fits see)."""
    import yaml

    data = yaml.safe_load(CALIBRATED.read_text())
    data.pop("implementations", None)
    return parse_profile(data, "bare")


@given(
    a=st.floats(1e-7, 1e-5),
    b=st.floats(1e-9, 1e-6),
    xs=st.lists(st.tuples(st.floats(1, 10), st.floats(1, 100)), min_size=3, max_size=8, unique=True),
)
def test_fit_relative_recovers_exact_coefficients(a, b, xs):
    cols = [[x for x, _ in xs], [y for _, y in xs]]
    if len({round(x / y, 9) for x, y in xs}) < 2:  # the two columns must not be proportional
        return
    t = [a * x + b * y for x, y in xs]
    got = fits.fit_relative(cols, t)
    assert got == pytest.approx([a, b], rel=1e-6)


def test_fit_relative_holds_a_negative_coefficient_at_zero():
    # t = 2·x exactly; a second column that would need a negative weight to help is dropped
    cols = [[1.0, 2.0, 3.0], [3.0, 1.0, 0.5]]
    got = fits.fit_relative(cols, [2.0, 4.0, 6.0])
    assert got == pytest.approx([2.0, 0.0])


def _points(profile, o, e, c0, c1, rate):
    """Calibrate's decode and split references as the model with these figures would time them:
    step = split (waves × o + compute / e) + combine (c0 + c1·splits + bytes / rate) + two launches."""
    launch = profile.launch_overhead_s
    out = []
    for (b, h, kv, d), lengths in plan.DECODE_REFERENCES:
        for n_kv in lengths:
            w = Workload(n=1, n_kv=n_kv, d=d, batch=b, heads=h, kv_heads=kv, dtype="fp16")
            v = fits._split_view("sdpa-flash", w, profile)
            combine = c0 + c1 * v["splits"] + v["combine_bytes"] / rate
            split = v["per_cta_bytes"] / 20e9 + o
            out.append(
                {
                    "impl": "sdpa-flash",
                    "decode": [b, h, kv, n_kv, d],
                    "time_s": split + combine + 2 * launch,
                    "kernels": [
                        {"name": "pytorch_flash::flash_fwd_splitkv_kernel<>", "time_s": split},
                        {"name": "pytorch_flash::flash_fwd_splitkv_combine_kernel<>", "time_s": combine},
                    ],
                }
            )
    for b, h, n in plan.SPLIT_REFERENCES:
        for d in plan.SDPA_FIT_HEAD_DIMS:
            w = Workload(n=n, d=d, batch=b, heads=h, dtype="fp16")
            v = fits._split_view("sdpa-flash", w, profile)
            combine = c0 + c1 * v["splits"] + v["combine_bytes"] / rate
            split = v["waves"] * o + v["compute_s"] / e
            out.append(
                {
                    "impl": "sdpa-flash",
                    "split": [b, h, n, d],
                    "time_s": split + combine + 2 * launch,
                    "kernels": [
                        {"name": "pytorch_flash::flash_fwd_splitkv_kernel<>", "time_s": split},
                        {"name": "pytorch_flash::flash_fwd_splitkv_combine_kernel<>", "time_s": combine},
                    ],
                }
            )
    return out


def test_the_split_references_give_the_split_kernels_figures_back():
    bare = _bare()
    o, e, c0, c1, rate = 3e-6, 0.9, 3e-6, 0.25e-6, 3e12
    out = fits.cta_figures({"sdpa": {"points": _points(bare, o, e, c0, c1, rate)}}, bare)
    assert out["implementations.sdpa-flash.split_efficiency"][0] == {64: 0.9, 128: 0.9, 256: 0.9}
    assert out["implementations.sdpa-flash.split_cta_overhead"][0] == {64: "3 us", 128: "3 us", 256: "3 us"}
    assert out["implementations.sdpa-flash.combine_time"][0] == "3 us"
    assert out["implementations.sdpa-flash.combine_time_per_split"][0] == "0.25 us"
    assert out["implementations.sdpa-flash.combine_bandwidth"][0] == "3 TB/s"
    assert "CUPTI" in out["implementations.sdpa-flash.combine_time"][1]
    # the per-CTA rate: the slope of the split kernel between the two lengths, 20 GB/s made
    assert set(out["implementations.sdpa-flash.cta_bandwidth"][0].values()) == {"20 GB/s"}


def test_a_record_of_whole_steps_keeps_the_older_combine_fit():
    bare = _bare()
    points = [p for p in _points(bare, 3e-6, 0.9, 3e-6, 0.25e-6, 3e12) if "decode" in p]
    for p in points:
        del p["kernels"]
    out = fits.cta_figures({"sdpa": {"points": points}}, bare)
    assert "implementations.sdpa-flash.combine_bandwidth" not in out
    assert "implementations.sdpa-flash.split_efficiency" not in out
    assert "intercepts" in out["implementations.sdpa-flash.combine_time"][1]


def _with(**figures):
    import yaml

    data = yaml.safe_load(CALIBRATED.read_text())
    impl = data.setdefault("implementations", {}).setdefault("sdpa-flash", {})
    for k in [k for k in impl if k.startswith(("split_", "combine_"))]:
        del impl[k]
    impl.update(figures)
    return parse_profile(data, "x")


def _kernels(profile, w):
    c = compare(w, profile, options_for("sdpa-flash", w, profile))
    return {k.name: k for k in c.tiled.timing.kernels}, {k.name: k for k in c.tiled.traffic.kernels}


def test_the_split_kernel_pays_its_overhead_once_per_wave():
    # 1 × 6 × 2048, d = 64: 6 heads × 32 Q blocks of 64 = 192 CTAs, under 80 % of 264
    # slots: 4 splits, 768 CTAs, 264 at once: ⌈768/264⌉ = 3 waves × 2 µs = 6 µs
    w = Workload(n=2048, d=64, batch=1, heads=6, dtype="fp16")
    base = _with()
    p = _with(split_cta_overhead={"value": {64: "2 us"}, "source": "measured"})
    t0, _ = _kernels(base, w)
    t1, traffic = _kernels(p, w)
    assert int(traffic["fa2_splitkv"].ctas) == 768
    assert t1["fa2_splitkv"].terms["cta"] == pytest.approx(6e-6)
    assert t1["fa2_splitkv"].time_s == pytest.approx(t0["fa2_splitkv"].time_s + 6e-6)


def test_the_split_kernel_takes_its_own_efficiency():
    w = Workload(n=2048, d=64, batch=1, heads=6, dtype="fp16")
    base = _with()
    p = _with(split_efficiency={"value": {64: 0.5}, "source": "measured"})
    t0, _ = _kernels(base, w)
    t1, _ = _kernels(p, w)
    eff = base.implementation("sdpa-flash").efficiency_at(64)
    # compute scales by (the forward kernel's efficiency) / 0.5
    assert t1["fa2_splitkv"].terms["compute"] == pytest.approx(t0["fa2_splitkv"].terms["compute"] * eff / 0.5)


def test_the_combine_adds_its_bytes_at_its_rate():
    w = Workload(n=2048, d=64, batch=1, heads=6, dtype="fp16")
    p = _with(
        combine_time={"value": "3 us", "source": "measured"},
        combine_time_per_split={"value": "0.25 us", "source": "measured"},
        combine_bandwidth={"value": "2 TB/s", "source": "measured"},
    )
    t, traffic = _kernels(p, w)
    moved = float(traffic["fa2_combine"].bytes(level="l2"))
    # 4 splits: 3 + 4 × 0.25 = 4 µs, plus the bytes at 2 TB/s
    assert t["fa2_combine"].terms["latency"] == pytest.approx(4e-6 + moved / 2e12)
    assert moved > 12e6  # 12288 rows × 4 splits × 64 × 4 B of partial O alone: 12.6 MB


def test_the_bundled_h200_has_the_split_figures():
    h200 = load_profile("h200")
    split = h200.implementation("sdpa-flash").kernel(128, split=True)
    assert split.efficiency is not None
    assert split.split_cta_overhead_s > 0
    assert h200.implementation("sdpa-flash").combine_bandwidth_bytes_per_s is not None


def test_a_split_steps_occupancy_is_the_split_kernels_not_the_combines():
    """Nsight gives each kernel's grid and waves; the split kernel's 2 CTAs per SM set the
    model's occupancy, not the combine's 9 (its grid of 8-row CTAs is the larger)."""
    from types import SimpleNamespace

    from memmodel.cases import Case
    from memmodel.scoring import occupancies

    h200 = load_profile(str(CALIBRATED))
    case = Case(impl="sdpa-flash", n=1024, d=64, batch=1, heads=12, dtype="fp16")
    measured = [
        SimpleNamespace(
            name="void pytorch_flash::flash_fwd_splitkv_kernel<>",
            metrics={"launch__grid_size": 768.0, "launch__waves_per_multiprocessor": 2.91},
        ),
        SimpleNamespace(
            name="void pytorch_flash::flash_fwd_splitkv_combine_kernel<>",
            metrics={"launch__grid_size": 1536.0, "launch__waves_per_multiprocessor": 1.29},
        ),
    ]
    # 768 / (2.91 × 132) = 2.0; the combine's 1536 / (1.29 × 132) = 9.0
    assert occupancies(case, measured, h200) == (2, None)


def test_kernel_times_lists_each_launch_with_its_median(monkeypatch):
    """On the CPU the profiler's host ops stand in for kernels: one call of fn, each op in
    order, the median over the sessions (calibrate's decode and split references)."""
    torch = pytest.importorskip("torch")
    from memmodel.calibration.plan import DeviceInfo, make_plan
    from memmodel.gpu.measure import Context

    info = DeviceInfo("cpu", 2, 2**20, 2**30, None, (9, 0))
    ctx = Context(torch, None, info, make_plan(info, quick=True), timer=None, device="cpu")  # type: ignore[arg-type]
    a = torch.ones(64, 64)
    out = ctx.kernel_times(lambda: torch.mm(a, a).add_(1.0), sessions=3)
    names = [k["name"] for k in out]
    assert any("mm" in n for n in names) and any("add" in n for n in names)
    assert names.index(next(n for n in names if "mm" in n)) < names.index(next(n for n in names if "add" in n))
    assert all(k["time_s"] >= 0 for k in out)


def test_validate_adds_the_event_overhead_to_each_timed_step_and_compare_does_not():
    import yaml

    from memmodel.cases import Case
    from memmodel.scoring import predicted_times

    data = yaml.safe_load(CALIBRATED.read_text())
    plain = parse_profile(data, "plain")
    data["event_overhead"] = {"value": "2 us", "source": "measured"}
    timed = parse_profile(data, "timed")
    case = Case(impl="standard", n=1024, d=64, batch=2, heads=4, dtype="fp16", causal=True)
    a, b = predicted_times(case, plain), predicted_times(case, timed)
    # qk, mask, softmax, pv: four steps between events, 2 µs each; kernels stay the model's own
    assert set(b["steps"]) == {"qk", "mask", "softmax", "pv"}
    assert all(b["steps"][k] == pytest.approx(a["steps"][k] + 2e-6) for k in a["steps"])
    assert b["time_s"] == pytest.approx(a["time_s"] + 8e-6)
    assert b["kernels"] == a["kernels"]
    w = case.workload()
    assert compare(w, timed).standard.timing.time_s == compare(w, plain).standard.timing.time_s


def test_the_reference_fits_take_the_event_overhead_off_the_measured_times():
    import yaml

    data = yaml.safe_load(CALIBRATED.read_text())
    data.pop("implementations", None)
    plain = parse_profile(data, "plain")
    data["event_overhead"] = {"value": "2 us", "source": "measured"}
    timed = parse_profile(data, "timed")
    shape = (8, 16, 2048, 64, False)
    a, b = fits._fused_parts("sdpa-flash", shape, plain), fits._fused_parts("sdpa-flash", shape, timed)
    assert b["launch_s"] == pytest.approx(a["launch_s"] + 2e-6)


def test_a_causal_split_counts_the_blocks_its_chunks_see():
    """1 × 1 × 8192 causal, d = 64: 128 Q blocks of 64 rows see ⌊m/4⌋ + 1 K/V blocks of 256
    (bottom-right aligned): 4 × (1 + … + 32) = 2112 of 128 × 32 = 4096, so the split kernel's
    scores are 8192² × 2112/4096 = 34,603,008 (the unmasked 67,108,864 × 0.515625)."""
    h200 = load_profile(str(CALIBRATED))
    w = Workload(n=8192, d=64, batch=1, heads=1, dtype="fp16", causal=True)
    c = compare(w, h200, options_for("sdpa-flash", w, h200))
    split = next(k for k in c.tiled.traffic.kernels if k.kind == "split_kv")
    assert int(c.tiled.traffic.params["splits"]) == 2
    assert int(split.exp_ops) == 34_603_008
    assert int(split.blocks) == 2112
    plain = compare(dataclasses.replace(w, causal=False), h200, options_for("sdpa-flash", w, h200))
    assert int(next(k for k in plain.tiled.traffic.kernels if k.kind == "split_kv").exp_ops) == 8192 * 8192


def test_a_long_causal_head_split_in_one_wave_runs_as_long_as_its_busiest_sm():
    """The same head: 256 CTAs (Q block fastest, then split) on 132 SMs, breadth first. SM 123
    runs CTA 123 (split 0, Q block 123: 16 blocks) and CTA 255 (split 1, Q block 127: 16):
    32 block-times against 2112 / 132 = 16 balanced, a factor of 2 (measured: the causal head
    takes as long as the unmasked one, validation/h200/probe-3)."""
    from memmodel.timing import split_tail_factor

    w = Workload(n=8192, d=64, batch=1, heads=1, dtype="fp16", causal=True)
    assert split_tail_factor(w, 2, 132, 2, 0.832) == pytest.approx(2.0)
    assert split_tail_factor(dataclasses.replace(w, causal=False), 2, 132, 2, 0.832) == 1.0
    # 1 × 6 × 2048: 768 CTAs, three waves: taken as balanced
    assert split_tail_factor(Workload(n=2048, d=64, batch=1, heads=6, dtype="fp16", causal=True), 4, 132, 2, 0.8) == 1.0


@given(n=st.integers(65, 4096), heads=st.integers(1, 8), splits=st.integers(2, 8))
def test_the_split_tail_is_at_least_one_and_the_same_on_a_grid(n, heads, splits):
    import numpy as np

    from memmodel.timing import split_tail_factor

    w = Workload(n=n, d=128, batch=1, heads=heads, dtype="fp16", causal=True)
    one = split_tail_factor(w, splits, 132, 2, 0.832)
    assert one >= 1.0
    grid = Workload(n=np.array([n, n]), d=128, batch=1, heads=heads, dtype="fp16", causal=True)
    assert split_tail_factor(grid, np.array([splits, 1]), 132, 2, 0.832).tolist() == [pytest.approx(one), 1.0]


def test_a_causal_grid_of_one_wave_is_placed_breadth_first():
    """1 × 18 × 1024 causal, d = 64 (FlashAttention-2's 128 × 128 tiles): 144 CTAs on 132 SMs.
    CTA j (Q block j mod 8) and CTA 132 + j share SM j; SM 3 holds Q blocks 3 and 7 (4 and 8
    blocks): 2 × 4 shared + 4 alone at 0.832 = 12.81 block-times, against 18 × 36 / 132 =
    4.909 balanced: 2.609 (probe 4 measured 28.2 µs; the model now 27.9, was 23.9)."""
    from memmodel.timing import cta_tail_factor

    w = Workload(n=1024, d=64, batch=1, heads=18, dtype="fp16", causal=True)
    assert cta_tail_factor(w, 128, 128, 132, 2, 0.832) == pytest.approx((8 + 4 / 0.832) / (648 / 132))


def test_cta_sharing_an_sm_take_turns_by_phases():
    import numpy as np

    from memmodel.timing import _one_wave_factor

    # one SM, three CTAs of 1, 2, 3 blocks: three share for 1 block (3), two for 1 more (2),
    # the last alone at half the rate (2): 7 against 6 balanced
    assert _one_wave_factor(np.array([3.0, 2.0, 1.0]), 1, 3, 0.5) == pytest.approx(7 / 6)
    # a kernel of one CTA per SM runs them one after another
    assert _one_wave_factor(np.array([3.0, 1.0]), 1, 1, 0.5) == pytest.approx(1.0)
    # more CTAs than one wave: not this rule's
    assert _one_wave_factor(np.ones(5), 2, 2, 0.5) == 1.0
