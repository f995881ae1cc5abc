"""The hybrid context-parallel scheme (``--cp-scheme hybrid --ulysses-degree U``): Ulysses inside
groups of U GPUs, the ring across the P/U groups."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from memmodel import Workload, load_profile
from memmodel.cli import cli
from memmodel.errors import WorkloadError
from memmodel.parallel import context_parallel, parse_cp_case, predict_case, ulysses_kernels

H200 = load_profile("h200")


def run(w: Workload, p: int, scheme: str, u: int | None = None, backward: bool = False):
    return context_parallel(w, H200, p, scheme, impl="sdpa-flash", backward=backward, ulysses_degree=u).tiled


@pytest.mark.parametrize("causal", [False, True])
def test_its_ends_are_the_ring_and_ulysses(causal):
    w = Workload(n=65536, heads=32, kv_heads=8, d=128, dtype="bf16", causal=causal)
    for backward in (False, True):
        ring, uly = run(w, 8, "ring", backward=backward), run(w, 8, "ulysses", backward=backward)
        one, all_ = run(w, 8, "hybrid", 1, backward), run(w, 8, "hybrid", 8, backward)
        assert one.wall_time_s == pytest.approx(ring.wall_time_s)
        assert one.link_bytes == ring.link_bytes
        assert all_.wall_time_s == pytest.approx(uly.wall_time_s)
        assert all_.link_bytes == uly.link_bytes


def test_its_link_bytes_are_the_groups_ring_and_all_to_alls():
    # P = 8, U = 2: the ring over 4 groups on 16 query / 4 K/V heads, plus two all-to-alls inside a
    # group of 2, each sending half its buffer (forward: Q, K, V in; O out)
    w = Workload(n=65536, heads=32, kv_heads=8, d=128, dtype="bf16", causal=True)
    hybrid = run(w, 8, "hybrid", 2)
    ring = run(w.with_(heads=16, kv_heads=4), 4, "ring")
    _, _, buf_in, buf_out = ulysses_kernels(w.with_(n=65536 // 4), 2, "forward")
    # Q in: 1·8192·32·128·2 = 67,108,864 B; K, V: 16,777,216 each; O out as Q
    assert (buf_in, buf_out) == (67_108_864 + 2 * 16_777_216, 67_108_864)
    assert hybrid.link_bytes == ring.link_bytes + buf_in // 2 + buf_out // 2
    kinds = [s.kind for s in hybrid.steps]
    assert kinds[0] == "all_to_all_in" and kinds[-1] == "all_to_all_out"
    assert len(kinds) == 4 + 2  # four ring steps between the all-to-alls


def test_refusals_are_one_line():
    w = Workload(n=65536, heads=32, kv_heads=8, d=128, dtype="bf16", causal=True)
    with pytest.raises(WorkloadError, match="needs --ulysses-degree"):
        context_parallel(w, H200, 8, "hybrid")
    with pytest.raises(WorkloadError, match="must divide --context-parallel 8"):
        context_parallel(w, H200, 8, "hybrid", ulysses_degree=3)
    with pytest.raises(WorkloadError, match="goes with --cp-scheme hybrid"):
        context_parallel(w, H200, 8, "ring", ulysses_degree=2)
    with pytest.raises(WorkloadError, match=r"--kv-heads \(2\) must be a multiple of 4"):
        context_parallel(w.with_(kv_heads=2), H200, 8, "hybrid", ulysses_degree=4)
    runner = CliRunner()
    base = ["compare", "--n", "65536", "--heads", "32", "--d", "128", "--gpu", "h200", "--context-parallel", "8"]
    for extra, words in (
        (["--cp-scheme", "hybrid"], "needs --ulysses-degree"),
        (["--cp-scheme", "hybrid", "--ulysses-degree", "3"], "must divide"),
        (["--cp-scheme", "ulysses", "--ulysses-degree", "2"], "goes with --cp-scheme hybrid"),
    ):
        out = runner.invoke(cli, [*base, *extra])
        assert out.exit_code == 2 and words in out.output, out.output
        assert len(out.output.strip().splitlines()) == 1
    out = runner.invoke(cli, ["compare", "--n", "4096", "--d", "128", "--gpu", "h200", "--ulysses-degree", "2"])
    assert out.exit_code == 2 and "needs --context-parallel" in out.output


def test_cli_and_cases():
    runner = CliRunner()
    out = runner.invoke(
        cli,
        ["-q", "compare", "--n", "131072", "--heads", "32", "--kv-heads", "8", "--d", "128", "--dtype", "bf16",
         "--causal", "--gpu", "h200", "--context-parallel", "8", "--cp-scheme", "hybrid", "--ulysses-degree", "4"],
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    assert "hybrid (Ulysses groups of 4)" in out.output
    case = parse_cp_case("scheme=hybrid,p=8,ulysses_degree=2,n=262144,d=128,heads=32,kv_heads=8,causal=1,backward=1")
    assert case.id == "hybrid8u2/b1h32kv8n262144d128/bf16-causal-bwd"
    found = predict_case(case, H200)
    assert found["wall_s"] > 0 and found["backward_s"] > found["forward_s"]


HYBRID_CPU_CASES = (
    "scheme=hybrid,p=4,ulysses_degree=2,n=128,d=16,heads=4,kv_heads=2,causal=1,backward=1",
    "scheme=hybrid,p=4,ulysses_degree=2,n=64,d=16,heads=2,batch=2,backward=1",
)


def test_hybrid_matches_one_gpu_on_the_cpu(tmp_path):
    """Four processes (gloo), math attention: the hybrid's output and gradients as single-process
    attention, and the bytes its code sends exactly the model's."""
    pytest.importorskip("torch")
    out = tmp_path / "cp.json"
    args = [a for c in HYBRID_CPU_CASES for a in ("--case", c)]
    r = CliRunner().invoke(
        cli, ["validate", "--gpus", "4", "--device", "cpu", "--gpu", "h200", "--output", str(out), *args]
    )
    assert r.exit_code == 0, r.output
    import json

    record = json.loads(out.read_text())
    for case in record["cases"]:
        assert "error" not in case, case
        assert case["check"]["ok"] and case["check"]["max_rel_error"] < 1e-2, case
        assert case["measured"]["link_bytes"] == case["predicted"]["link_bytes"], case["id"]


def test_sweep_takes_the_ulysses_degree_as_an_axis():
    runner = CliRunner()
    out = runner.invoke(
        cli,
        ["-q", "sweep", "--n", "65536", "--d", "128", "--heads", "32", "--kv-heads", "8", "--dtype", "bf16",
         "--gpu", "h200", "--causal", "--context-parallel", "8", "--cp-scheme", "ring,hybrid",
         "--ulysses-degree", "2,4", "--format", "csv"],
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    rows = [line.split(",") for line in out.output.strip().splitlines()]
    header, body = rows[0], rows[1:]
    at = header.index("ulysses_degree")
    # the ring once (no degree), the hybrid at 2 and at 4: three configurations, two algorithms each
    assert sorted({(r[header.index("scheme")], r[at]) for r in body}) == [
        ("hybrid", "2"),
        ("hybrid", "4"),
        ("ring", ""),
    ]
    assert len(body) == 6
    bad = runner.invoke(cli, ["sweep", "--n", "65536", "--d", "128", "--gpu", "h200", "--context-parallel", "8",
                              "--ulysses-degree", "2"])  # fmt: skip
    assert bad.exit_code == 2 and "goes with --cp-scheme hybrid" in bad.output
