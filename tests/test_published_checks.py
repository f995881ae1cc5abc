"""The held-back published checks (validation/published/checks.yaml) and their scorer
(benchmarks/published_checks.py): the file parses, every point has its fields and a cited source,
and the scorer converts and scores on the CPU. No test here looks at how well the model scores:
the checks are blind, never fitted to."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parent.parent
CHECKS = REPO / "validation" / "published" / "checks.yaml"


def _scorer():
    spec = importlib.util.spec_from_file_location("published_checks", REPO / "benchmarks" / "published_checks.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("published_checks", module)
    spec.loader.exec_module(module)
    return module


pc = _scorer()


def _point(data, pid):
    return next(p for p in data["points"] if p["id"] == pid)


def test_the_checks_file_parses_and_every_point_is_complete_and_cited():
    data = pc.load_checks(CHECKS)
    points = data["points"]
    assert len(points) >= 60
    assert len({p["gpu"] for p in points}) >= 3
    for p in points:
        for key in pc.REQUIRED:
            assert key in p, (p.get("id"), key)
        src = data["sources"][p["source"]]
        assert src["citation"].strip() and src["url"].startswith("https://"), p["id"]
        assert ("tflops" in p) or ("time_ms" in p), p["id"]
        assert p["pass"] in pc.PASSES
        assert p["dtype"] in ("fp16", "bf16", "fp8", "fp32", "tf32")
    # the provenance rule is written where a reader of the data meets it
    assert "NEVER fitted to" in CHECKS.read_text(encoding="utf-8").splitlines()[0]


def test_a_point_without_a_source_or_a_figure_is_refused(tmp_path):
    data = yaml.safe_load(CHECKS.read_text(encoding="utf-8"))
    bad = dict(data["points"][0], id="x", source="nowhere")
    data["points"] = [bad]
    path = tmp_path / "checks.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(ValueError, match=r"points\[0\] \(x\): unknown source 'nowhere'"):
        pc.load_checks(path)
    good = dict(data["points"][0], source=next(iter(data["sources"])))
    good.pop("tflops", None)
    good.pop("time_ms", None)
    data["points"] = [good]
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(ValueError, match="no published figure"):
        pc.load_checks(path)


def test_the_fa_flop_convention_pinned():
    data = pc.load_checks(CHECKS)
    p = _point(data, "a100-fa2-fb-full-d64-n2048-b8-h32-fa2paper")
    # forward + backward: 3.5 × 4 · B · N² · H · d = 3.5 × 4 · 8 · 2048² · 32 · 64 = 3.5 × 2**38 = 962072674304
    assert pc.convention_flops(p, "fa") == 962_072_674_304
    # published 162 TFLOP/s -> 962072674304 / 162e12 s = 5.93872... ms
    t, rate = pc.published(p, pc.convention_flops(p, "fa"))
    assert t == pytest.approx(5.938720e-3, rel=1e-6) and rate == 162
    causal = dict(p, causal=True, **{"pass": "backward"})
    # backward, causal: 2.5 × ½ × 4 · 8 · 2048² · 32 · 64 = 1.25 × 2**38 = 343597383680
    assert pc.convention_flops(causal, "fa") == 343_597_383_680


def test_a_point_with_vs_own_head_dim_counts_and_runs_it():
    """d_v (MLA prefill: Q·K at 192, P·V at 128): cudnn-frontend's FLOP count and memmodel's --d-v."""
    p = {"n": 4096, "d": 192, "d_v": 128, "batch": 2, "heads": 128, "causal": False, "pass": "forward"}
    # forward: 2 · B·H·N² · (d + d_v) = 2 · 2·128·4096² · 320 = 2**33 · 320 = 2748779069440
    assert pc.convention_flops(p, "fa") == 2_748_779_069_440
    # backward: 2 · B·H·N² · (3·192 + 2·128) = 2**33 · 832 = 7146825580544
    assert pc.convention_flops(dict(p, **{"pass": "backward"}), "fa") == 7_146_825_580_544
    data = pc.load_checks(CHECKS)
    base = _point(data, "h200-cudnn-fwd-full-d128-n2048-b2-h64kv8-cudnnfe")
    point = dict(base, id="x", d=192, d_v=128, heads=128, kv_heads=128, n=4096, batch=2)
    one = {**data, "points": [point]}
    [s] = pc.score(one)
    assert s.error is not None and s.not_modelled is None
    [wide] = pc.score({**data, "points": [dict(point, d_v=192)]})
    assert wide.predicted_time_s > s.predicted_time_s  # V at 192 moves more and multiplies more


def test_the_scorer_scores_one_point_and_lists_one_it_cannot_express():
    data = pc.load_checks(CHECKS)
    modelled = _point(data, "h100-sxm-fa3-fwd-full-d128-n4096-b4-h16-fa3paper")
    triton = _point(data, "h100-sxm-triton-fwd-full-d128-n4096-b4-h16-fa3paper")
    data = dict(data, points=[modelled, triton])
    scored = pc.score(data)
    assert [s.point["id"] for s in scored] == [modelled["id"], triton["id"]]  # nothing dropped
    s, t = scored
    assert s.not_modelled is None and s.predicted_time_s > 0
    flops = 4 * 4 * 4096**2 * 16 * 128  # forward, full: 4 · B · N² · H · d = 549755813888
    assert flops == 549_755_813_888
    assert s.predicted_tflops == pytest.approx(flops / s.predicted_time_s / 1e12)
    assert s.error == pytest.approx((s.predicted_time_s - flops / 638e12) / (flops / 638e12))
    assert t.error is None and "no memmodel option models 'triton'" in t.not_modelled
    rows = {(r["family"], r["impl"]): r for r in pc.summary(scored)}
    assert rows[("H100", "all")]["points"] == 2 and rows[("H100", "all")]["scored"] == 1
    assert rows[("H100", "fa3")]["median_abs_error"] == pytest.approx(abs(s.error))
    out = pc.to_json(scored)
    assert out["schema"] == "memmodel.published-checks-score/1" and len(out["points"]) == 2


def test_a_gpu_without_a_profile_is_not_modelled_with_its_reason():
    data = pc.load_checks(CHECKS)
    p = dict(data["points"][0], id="nowhere", gpu="no-such-gpu")
    (s,) = pc.score(dict(data, points=[p]))
    assert s.error is None and "no profile" in s.not_modelled and "no-such-gpu" in s.not_modelled


def test_a_proxy_is_opt_in_and_labelled():
    data = pc.load_checks(CHECKS)
    # fa4 is modelled now (--impl fa4): a published implementation without an option stands in
    data["implementations"] = dict(
        data["implementations"], fa4={"algorithm": "tiled", "impl": "fa9", "cli": "--impl fa9"}
    )
    p = next(p for p in data["points"] if p["impl"] == "fa4")
    data = dict(data, points=[p])
    (plain,) = pc.score(data)
    assert plain.error is None and plain.proxy is None and "--impl fa9" in plain.not_modelled
    (proxied,) = pc.score(data, proxies={"fa4": "fa3"})
    assert proxied.proxy == "fa3" and proxied.error is not None
    assert [r["impl"] for r in pc.summary([proxied])] == ["fa4~fa3", "all"]


def test_fa4_points_are_scored_by_fa4():
    data = pc.load_checks(CHECKS)
    points = [p for p in data["points"] if p["impl"] == "fa4" and "d_v" not in p]
    scored = pc.score(dict(data, points=points), proxies={"fa4": "fa3"})
    assert scored and all(s.not_modelled is None and s.proxy is None and s.error is not None for s in scored)
    # DeepSeek's (192, 128) heads: FA4's kernel for them is not modelled, and the point says so
    deepseek = [p for p in data["points"] if p["impl"] == "fa4" and "d_v" in p]
    refused = pc.score(dict(data, points=deepseek))
    assert refused and all("(192, 128) DeepSeek kernel is not modelled" in (s.not_modelled or "") for s in refused)


def test_aiter_points_are_scored_by_ck_and_a_proxy_does_not_replace_it():
    """AMD's kernels (``aiter`` points) map to ``--impl ck`` now that it exists: scored by it,
    with its stand-in caveat; a proxy applies only where the point's own mapping cannot run."""
    data = pc.load_checks(CHECKS)
    assert data["implementations"]["aiter"]["impl"] == "ck"
    p = next(p for p in data["points"] if p["gpu"] == "mi300x" and p["impl"] == "aiter")
    data = dict(data, points=[p])
    (plain,) = pc.score(data)
    assert plain.not_modelled is None and plain.error is not None and plain.proxy is None
    assert any("no measured efficiency for ck" in c for c in plain.caveats)
    (proxied,) = pc.score(data, proxies={"aiter": "sdpa-flash"})
    assert proxied.proxy is None and proxied.error == plain.error


def test_a_loop_started_idle_runs_at_boost_until_the_clocks_fall():
    loop = {"warmup": 2, "calls": 100}
    # 1 ms a call at boost, 1/0.872 ms held, the clocks falling after 34.67 ms of busy time: 34.67
    # calls at boost, 2 of them warm-up, so 32.67 of the 100 timed: (32.67 × 1 + 67.33 / 0.872) / 100
    mean = pc.loop_share(1e-3, 1e-3 / 0.872, 34.67e-3, loop, idle=True)
    assert mean == pytest.approx((32.67 * 1e-3 + 67.33 * 1e-3 / 0.872) / 100)
    # started busy: held throughout; no fall measured, or no slower held time: boost
    assert pc.loop_share(1e-3, 2e-3, 34.67e-3, loop, idle=False) == 2e-3
    assert pc.loop_share(1e-3, 2e-3, None, loop, idle=True) == 1e-3
    assert pc.loop_share(1e-3, 1e-3, 1e-3, loop, idle=False) == 1e-3
    # a loop shorter than the reaction: all at boost
    assert pc.loop_share(1e-4, 2e-4, 34.67e-3, loop, idle=True) == pytest.approx(1e-4)


def test_a_loop_that_reports_the_median_takes_the_middle_call():
    # 5 timed calls after 5 warm-up, 1 ms at boost, 2 ms held, the clocks falling after 7.5 ms
    # of busy time: calls 6 and 7 at boost, call 8 half at boost (1.5 ms), calls 9 and 10 held:
    # the sorted times 1, 1, 1.5, 2, 2 ms, their median 1.5 ms (their mean would be 1.5 ms too)
    loop = {"warmup": 5, "calls": 5, "statistic": "median"}
    assert pc.loop_share(1e-3, 2e-3, 7.5e-3, loop, idle=True) == pytest.approx(1.5e-3)
    # the clocks falling after 8 ms: 1, 1, 1, 2, 2 ms: the median 1 ms, the mean 1.4 ms
    assert pc.loop_share(1e-3, 2e-3, 8e-3, loop, idle=True) == pytest.approx(1e-3)
    assert pc.loop_share(1e-3, 2e-3, 8e-3, dict(loop, statistic="mean"), idle=True) == pytest.approx(1.4e-3)
    # after 6 ms: 1, 2, 2, 2, 2 ms: the median held
    assert pc.loop_share(1e-3, 2e-3, 6e-3, loop, idle=True) == pytest.approx(2e-3)


def _loop_record(path: Path, b2b: list[float], idle: list[float], under: list[float], clocks: list[float]) -> None:
    import gzip
    import json

    rows = [
        {"pattern": "back-to-back", "times_ms": b2b, "clocks_mhz": [1980.0] * len(b2b)},
        {"pattern": "sleep-50", "times_ms": idle, "clocks_mhz": [1980.0] * len(idle)},
        {"pattern": "cudnn-frontend-both", "times_ms": under, "clocks_mhz": clocks},
        {"pattern": "cudnn-frontend-both-backward", "bwd_times_ms": [1.0] * 10},
    ]
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("\n".join(json.dumps(r) for r in rows) + "\n")


def test_a_loop_with_work_between_its_calls_falls_by_the_share_its_probe_saw(tmp_path, monkeypatch):
    monkeypatch.setitem(pc.BETWEEN, "cudnn-frontend-both", "rec-*.jsonl.gz")
    loop = {"between": "cudnn-frontend-both", "warmup": 5, "calls": 5, "statistic": "median"}
    # a 10 ms call: back to back 10 ms (calls 2-4), its last ten 12.5 ms: the whole fall 1 - 10/12.5 = 0.2;
    # the loop's second call 10.5 ms at the top clock: 0.5 ms extra, its boost 10.5 ms; its timed calls'
    # median 11.5 ms: 1 - 10.5/11.5 = 0.08696 of its time, over 0.2: 0.4348 of the whole fall
    _loop_record(
        tmp_path / "rec-a.jsonl.gz",
        [11.0, 10.0, 10.0, 10.0] + [12.5] * 26,
        [10.2] * 30,
        [50.0, 10.5, 11.0, 11.2, 11.3, 11.4, 11.5, 11.6, 11.5, 11.5],
        [1980.0, 1980.0] + [1800.0] * 8,
    )
    # a 40 ms call whose loop starts fallen (its second call read at 1700 MHz): the extra is taken from
    # the other record (0.5 ms); boost min(44, 40) = 40 ms + 0.5; back to back's last ten 45 ms: the whole
    # fall 1 - 40/45 = 0.1111; timed median 42 ms: 1 - 40.5/42 = 0.03571, over 0.1111: 0.3214
    _loop_record(
        tmp_path / "rec-b.jsonl.gz",
        [40.0, 44.0, 44.0, 44.0] + [45.0] * 26,
        [41.0, 40.0, 40.0, 40.0] + [40.0] * 26,
        [90.0, 43.0, 43.0, 42.0, 42.0, 42.0, 42.0, 42.0, 41.0, 41.0],
        [1700.0] * 10,
    )
    falls = pc.between_falls(loop, root=tmp_path)
    assert [t for t, _ in falls] == pytest.approx([10.5e-3, 40.5e-3])
    assert [f for _, f in falls] == pytest.approx([0.4348, 0.3214], abs=1e-4)
    # linear in the log of the call's time between them; the nearest one's beyond
    mid = math.sqrt(10.5e-3 * 40.5e-3)
    assert pc.between_share(falls, mid) == pytest.approx((0.4348 + 0.3214) / 2, abs=1e-4)
    assert pc.between_share(falls, 1e-3) == pytest.approx(0.4348, abs=1e-4)
    assert pc.between_share(falls, 1.0) == pytest.approx(0.3214, abs=1e-4)
    # the loop's time: boost + share x (held - boost), for a loop started idle; busy: held
    t = pc.loop_share(10.5e-3, 12e-3, 35e-3, loop, idle=True, falls=falls)
    assert t == pytest.approx(10.5e-3 + 0.4348 * 1.5e-3, rel=1e-4)
    assert pc.loop_share(10.5e-3, 12e-3, 35e-3, loop, idle=False, falls=falls) == 12e-3


def test_the_h200_loop_gap_records_give_no_fall_at_short_calls_and_part_of_it_at_long_ones():
    loop = {"between": "cudnn-frontend-both", "warmup": 5, "calls": 5, "statistic": "median"}
    falls = pc.between_falls(loop)
    # validation/h200/loop-gap/: calls of about 3.9, 13.4 and 52.4 ms (a training forward, 0.5 ms above
    # the plain call); the forward in NVIDIA's loop keeps most of its clocks at the shortest
    assert [round(t * 1e3, 1) for t, _ in falls] == [3.9, 13.4, 52.4]
    assert falls[0][1] < 0.1 and all(0.45 < f < 0.65 for _, f in falls[1:])


def test_a_loop_names_only_known_work_between_its_calls(tmp_path):
    data = yaml.safe_load(CHECKS.read_text(encoding="utf-8"))
    data["sources"]["cudnn-frontend-llama31"]["loop"]["between"] = "a nap"
    bad = tmp_path / "checks.yaml"
    bad.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(ValueError, match="between must be one of cudnn-frontend, cudnn-frontend-both"):
        pc.load_checks(bad)


def test_the_cudnn_frontend_points_are_cudnn_and_flash_attn_4_on_h200_gb200_and_gb300():
    data = pc.load_checks(CHECKS)
    src = data["sources"]["cudnn-frontend-llama31"]
    assert src["loop"] == {
        "warmup": 5,
        "calls": 5,
        "statistic": "median",
        "between": "cudnn-frontend-both",
        "idle_before": ["cudnn", "fa4", "fa4-sm90"],
    }
    points = [p for p in data["points"] if p["source"] == "cudnn-frontend-llama31"]
    # 3 GPUs x 5 lengths x 2 masks: cuDNN bf16 forward and backward, its fp8 forward, and
    # flash-attn-4 bf16 forward and backward = 5 points each: 150
    assert len(points) == 150
    assert {p["gpu"] for p in points} == {"h200", "gb200", "gb300"}
    assert {p["impl"] for p in points if p["gpu"] == "h200"} == {"cudnn", "fa4-sm90"}
    assert {p["impl"] for p in points if p["gpu"] == "gb200"} == {"cudnn", "fa4"}
    assert data["implementations"]["fa4-sm90"]["impl"] == "fa3"
    one = _point(data, "h200-cudnn-fwd-causal-d128-n32768-b2-h64kv8-cudnnfe")
    # the CSV's row: 56.813 ms, 619 TFLOP/s = 4 x 2 x 32768^2 x 64 x 128 / 2 / 56.813 ms
    (scored,) = pc.score(dict(data, points=[one]))
    assert scored.published_time_s == pytest.approx(56.813e-3)
    assert scored.published_tflops == pytest.approx(619.3, abs=0.1)
    assert scored.family == "H200" and scored.error is not None
    (gb,) = pc.score(dict(data, points=[_point(data, "gb200-fa4-bwd-full-d128-n8192-b2-h64kv8-cudnnfe")]))
    assert gb.family == "B200" and gb.not_modelled is None
    (ultra,) = pc.score(dict(data, points=[_point(data, "gb300-cudnn-fwd-full-d128-n4096-b2-h64kv8-fp8-cudnnfe")]))
    assert ultra.family == "B300" and ultra.error is not None


def test_a_device_timed_source_leaves_the_launches_out_and_a_decode_counts_its_keys():
    data = pc.load_checks(CHECKS)
    assert data["sources"]["cudnn-frontend-decode"]["timer"] == "device"
    one = _point(data, "h200-cudnn-decode-llama31-d128-kv32k-b8-h64kv8-cudnnfe")
    # 4 x 8 x 1 x 32768 x 64 x 128 = 8.59e12 FLOP (no causal half: one query row) in 0.250238 ms
    assert pc.convention_flops(one, "fa") == 4 * 8 * 32768 * 64 * 128
    (device,) = pc.score(dict(data, points=[one]))
    assert device.published_tflops == pytest.approx(34.33, abs=0.01)
    events = dict(data, sources=dict(data["sources"]))
    events["sources"]["cudnn-frontend-decode"] = {
        k: v for k, v in data["sources"]["cudnn-frontend-decode"].items() if k != "timer"
    }
    (evented,) = pc.score(dict(events, points=[one]))
    # the split-KV kernel (one launch: no memset before a decode, unlike sdpa-cudnn's prefill) and its
    # combine (one): two of the H200's launch overheads apart
    gap = evented.predicted_time_s - device.predicted_time_s
    profile = pc.load_profile("h200")
    assert gap == pytest.approx(2 * profile.launch_overhead_s, rel=1e-6)


def test_a_windowed_point_counts_its_band_and_says_what_memmodel_cannot_express():
    data = pc.load_checks(CHECKS)
    one = _point(data, "h200-cudnn-fwd-window128-d64-n32768-b2-h128-cudnnfe")
    # 4 x 2 x 128 x 64 x (32768 x 128 - 128 x 127 / 2) = 2.7435e11 FLOP in 2.030 ms: 135.1 TFLOP/s,
    # the CSV's "135.000" (its count rounds the same)
    assert pc.convention_flops(one, "fa") == 4 * 2 * 128 * 64 * (32768 * 128 - 128 * 127 // 2)
    (scored,) = pc.score(dict(data, points=[one]))
    assert scored.published_tflops == pytest.approx(135.15, abs=0.01)
    assert scored.not_modelled is not None and "sliding window" in scored.not_modelled


def test_a_bad_timer_or_n_kv_is_refused(tmp_path):
    data = yaml.safe_load(CHECKS.read_text(encoding="utf-8"))
    data["sources"]["cudnn-frontend-decode"]["timer"] = "wall"
    path = tmp_path / "checks.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(ValueError, match=r"sources\.cudnn-frontend-decode: timer must be one of events, device"):
        pc.load_checks(path)
    data["sources"]["cudnn-frontend-decode"]["timer"] = "device"
    data["points"][-1]["n_kv"] = 0
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(ValueError, match="n_kv must be a positive integer"):
        pc.load_checks(path)
    data["points"][-1].pop("n_kv")
    decode = next(i for i, q in enumerate(data["points"]) if q["source"] == "cudnn-frontend-decode")
    data["points"][decode]["window"] = 128  # a decode point, not causal
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(ValueError, match="window must be a positive integer, on a causal point"):
        pc.load_checks(path)
    data["points"][decode].pop("window")
    data["points"][decode]["d_v"] = 0
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(ValueError, match="d_v must be a positive integer"):
        pc.load_checks(path)


def test_the_fa3_papers_cudnn_loop_starts_idle_and_its_fa2_keeps_the_default_clocks():
    data = pc.load_checks(CHECKS)
    loop = data["sources"]["fa3-paper-h100-fwd-fp16"]["loop"]
    assert "cudnn" in loop["idle_before"] and "fa2" not in loop["idle_before"] + loop.get("busy_before", [])
    cudnn = _point(data, "h100-sxm-cudnn-fwd-full-d128-n8192-b2-h16-fa3paper")
    fa2 = _point(data, "h100-sxm-fa2-fwd-full-d128-n8192-b2-h16-fa3paper")
    with_loop, default = pc.score(dict(data, points=[cudnn, fa2]))
    bare = dict(data, sources={k: {f: v for f, v in s.items() if f != "loop"} for k, s in data["sources"].items()})
    cudnn_bare, fa2_bare = pc.score(dict(bare, points=[cudnn, fa2]))
    # cuDNN's 100 calls of about 1.7 ms: about 18 at boost after the 2 warm-up, the rest at 0.872
    assert with_loop.predicted_time_s > cudnn_bare.predicted_time_s * 1.05
    assert default.predicted_time_s == fa2_bare.predicted_time_s


def test_a_bad_loop_is_refused_with_its_source(tmp_path):
    data = yaml.safe_load(CHECKS.read_text(encoding="utf-8"))
    data["sources"]["fa3-paper-h100-fwd-fp16"]["loop"]["idle_before"] = ["nonesuch"]
    path = tmp_path / "checks.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(ValueError, match=r"sources\.fa3-paper-h100-fwd-fp16\.loop: idle_before must list"):
        pc.load_checks(path)
    data["sources"]["fa3-paper-h100-fwd-fp16"]["loop"] = {"calls": 5, "statistic": "mode"}
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(ValueError, match="statistic must be one of mean, median"):
        pc.load_checks(path)
    data["sources"]["fa3-paper-h100-fwd-fp16"]["loop"] = {"idle_before": ["cudnn"]}
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(ValueError, match="calls must be a positive integer"):
        pc.load_checks(path)


def test_a_weighted_quantile_sits_each_value_at_the_middle_of_its_weight():
    # equal weights: 4 values at 1/8, 3/8, 5/8, 7/8; the median halfway between 2 and 3
    assert pc.weighted_quantile([4.0, 1.0, 3.0, 2.0], [1.0] * 4, 0.5) == pytest.approx(2.5)
    # the 0.1 quantile lies below the first midpoint (1/8): the smallest value
    assert pc.weighted_quantile([1.0, 2.0, 3.0, 4.0], [1.0] * 4, 0.1) == 1.0
    # weights 3 and 1: midpoints at 3/8 and 7/8; q = 0.5 is a quarter of the way: 0 + 0.25 · 4 = 1
    assert pc.weighted_quantile([0.0, 4.0], [3.0, 1.0], 0.5) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        pc.weighted_quantile([1.0], [0.0], 0.5)


@pytest.mark.parametrize(
    ("extra", "median"),
    [
        (0, 0.5),  # A's 0.0 at 1/4, B's 1.0 at 3/4: halfway
        # B's eight points weigh 1/8 each: A's 0.0 at 1/4, B's first 1.0 at (1 + 1/16) / 2 = 0.53125;
        # q = 0.5 lies 0.25 / 0.28125 of the way. With a weight per point it would be 1.0
        (7, 0.25 / 0.28125),
    ],
)
def test_a_class_range_weighs_every_family_the_same_and_leaves_one_out(extra, median):
    # family A: one error 0.0; family B: 1 + extra errors of 1.0; each family weighs one half
    by_family = {"A": [0.0], "B": [1.0] * (1 + extra)}
    r = pc.class_range(by_family)
    assert r["median"] == pytest.approx(median)
    assert r["low"] == 0.0 and r["high"] == 1.0  # the deciles lie past both midpoints (1/4, 3/4)
    assert r["count"] == 2 + extra and r["families"] == {"A": 1, "B": 1 + extra}
    # leaving B out: A's error alone
    assert pc.class_range(by_family, exclude="B")["median"] == 0.0
    assert pc.class_range({"A": [0.1]}, exclude="A") is None


def test_a_derived_or_transferred_profile_takes_its_range_from_the_published_points():
    from memmodel.validated import time_range_errors

    for cls in pc.PUBLISHED_CLASSES:
        errors = time_range_errors(cls)
        assert errors["count"] > 0, cls
        assert "validation/published/checks.yaml" in errors["basis"]
        assert errors["low"] < errors["median"] < errors["high"]
    # the measured class keeps our records alone
    assert "validation records" in time_range_errors("measured")["basis"]


def test_each_family_is_judged_by_the_range_the_others_give():
    data = pc.load_checks()
    points = [p for p in data["points"] if p["gpu"] == "mi300x"][:8] + [
        p for p in data["points"] if p["gpu"] == "a100" and p["impl"] == "fa2"
    ][:8]
    scored = pc.score({**data, "points": points})
    by = pc.class_errors(scored)["other-architecture"]
    assert set(by) == {"A100", "MI300X"}
    for s in scored:
        if s.error is None:
            continue
        other = pc.class_range(by, exclude=s.family)
        assert set(other["families"]) == {"A100", "MI300X"} - {s.family}
        t = s.predicted_time_s
        inside = t / (1 + other["high"]) <= s.published_time_s <= t / (1 + other["low"])
        assert s.blind_in_range is inside


errors_ = st.lists(st.floats(min_value=-0.9, max_value=3.0, allow_nan=False), min_size=1, max_size=12)


@given(st.dictionaries(st.sampled_from(["A100", "B200", "MI300X", "MI355X"]), errors_, min_size=1, max_size=4))
def test_a_class_range_lies_within_its_errors_in_order(by_family):
    r = pc.class_range(by_family)
    values = [v for e in by_family.values() for v in e]
    assert min(values) <= r["low"] <= r["median"] <= r["high"] <= max(values)
    assert r["count"] == len(values)
    for family in by_family:
        left = {f: e for f, e in by_family.items() if f != family}
        assert pc.class_range(by_family, exclude=family) == (pc.class_range(left) if left else None)


def test_a_run_can_take_one_source_and_refuses_one_the_file_lacks():
    data = pc.load_checks(CHECKS)
    scored = pc.score(data, source="cudnn-frontend-ardit-a100pcie")
    # the autoregressive DiT on the A100 PCIe: cuDNN and flash-attn 2 at five query lengths
    assert len(scored) == 10 and {s.point["source"] for s in scored} == {"cudnn-frontend-ardit-a100pcie"}
    with pytest.raises(ValueError, match="unknown source 'nowhere'"):
        pc.score(data, source="nowhere")
    with pytest.raises(SystemExit) as exit_:
        pc.main(["--source", "nowhere"])
    assert exit_.value.code == 2


def test_a_sources_options_reach_its_implementation_and_bad_ones_are_refused(tmp_path):
    data = pc.load_checks(CHECKS)
    # cudnn-frontend's benchmark passes flash-attn-4 num_splits=0 (its split heuristic): 9 heads of
    # 4 Q tiles = 36 CTAs split 4 ways on the GB200's 148 SMs, against FA4's own default of one
    assert data["sources"]["cudnn-frontend-ardit"]["options"] == {"fa4": {"splits": "auto"}}
    one = _point(data, "gb200-fa4-fwd-full-d128-n1024-kv62208-b1-h9-ardit-cudnnfe")
    (split,) = pc.score(dict(data, points=[one]))
    plain = dict(data, sources=dict(data["sources"]))
    plain["sources"]["cudnn-frontend-ardit"] = {
        k: v for k, v in data["sources"]["cudnn-frontend-ardit"].items() if k != "options"
    }
    (unsplit,) = pc.score(dict(plain, points=[one]))
    assert split.predicted_time_s < 0.5 * unsplit.predicted_time_s
    raw = yaml.safe_load(CHECKS.read_text(encoding="utf-8"))
    path = tmp_path / "checks.yaml"
    for bad in ({"fa4": {"tiles": 3}}, {"nope": {"splits": "auto"}}, ["splits"]):
        raw["sources"]["cudnn-frontend-ardit"]["options"] = bad
        path.write_text(yaml.safe_dump(raw), encoding="utf-8")
        with pytest.raises(ValueError, match=r"sources\.cudnn-frontend-ardit\.options: a mapping"):
            pc.load_checks(path)


def test_kernels_a_sources_timer_does_not_count_are_left_out_and_bad_lists_refused(tmp_path):
    data = pc.load_checks(CHECKS)
    # cudnn-frontend's name filters pass no "Memset (Device)": cuDNN's forward memset (cudnn_zero) is
    # not in its points, and nothing else is
    assert data["sources"]["cudnn-frontend-llama31"]["uncounted"] == {"cudnn": ["cudnn_zero", "cudnn_bwd_zero"]}
    one = _point(data, "h200-cudnn-fwd-causal-d128-n2048-b2-h64kv8-cudnnfe")
    (left_out,) = pc.score(dict(data, points=[one]))
    counted = dict(data, sources=dict(data["sources"]))
    counted["sources"]["cudnn-frontend-llama31"] = {
        k: v for k, v in data["sources"]["cudnn-frontend-llama31"].items() if k != "uncounted"
    }
    (whole,) = pc.score(dict(counted, points=[one]))
    # the memset's own time under the device timer: its 2.308 us on the H200 less the 1.38 us launch
    assert whole.predicted_time_s - left_out.predicted_time_s == pytest.approx(0.928e-6, rel=0.01)
    raw = yaml.safe_load(CHECKS.read_text(encoding="utf-8"))
    path = tmp_path / "checks.yaml"
    for bad in ({"cudnn": "cudnn_zero"}, {"nope": ["cudnn_zero"]}, ["cudnn_zero"]):
        raw["sources"]["cudnn-frontend-llama31"]["uncounted"] = bad
        path.write_text(yaml.safe_dump(raw), encoding="utf-8")
        with pytest.raises(ValueError, match=r"sources\.cudnn-frontend-llama31\.uncounted: a mapping"):
            pc.load_checks(path)


def test_the_fa3_papers_standard_forward_is_traced_as_its_script_wrote_it():
    data = pc.load_checks(CHECKS)
    traced = data["implementations"]["standard"]["trace"]
    assert "fa3-paper-h100-fwd-fp16" in traced["sources"]  # attention_pytorch, forward only
    assert "fa3-paper-h100-bwd-fp16-d128" not in traced["sources"]  # no script of the time: --standard eager
    one = _point(data, "h100-sxm-standard-fwd-full-d64-n512-b32-h32-fa3paper")
    (scored,) = pc.score(dict(data, points=[one]))
    assert scored.not_modelled is None and scored.predicted_time_s > 0
