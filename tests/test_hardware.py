from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from memmodel.errors import ProfileError
from memmodel.hardware import available, load_file, load_profile, parse_profile

from .conftest import HARDWARE, REPO

REQUIRED = [
    "a100",
    "a100-40gb",
    "h100-sxm",
    "h100-pcie",
    "h200",
    "l4",
    "l40s",
    "a10",
    "rtx4090",
    "v100",
    "mi300x",
    "b200",
    # the GPUs people rent in 2026 (issue 28, item 4)
    "h20",
    "h100-nvl",
    "gb200",
    "b300",
    "gb300",
    "rtx5090",
    "rtx-pro-6000",
    "mi325x",
    "mi355x",
    # the A100's 300 W PCIe card, derived from a100 (NVIDIA's published A100 rows ran on one)
    "a100-pcie",
]
PROFILES = sorted(HARDWARE.glob("*.yaml"))


def test_every_required_profile_is_bundled():
    assert set(REQUIRED) <= set(available())


@pytest.mark.parametrize("path", PROFILES, ids=[p.stem for p in PROFILES])
def test_bundled_profile_loads_and_cites_a_source_for_every_number(path: Path):
    p = load_file(path)
    assert p.name == path.stem
    unsourced = [k for k, v in p.provenance.items() if v.source is None]
    assert unsourced == []
    assert p.sources, "a profile lists its sources"
    # SRAM is stored per SM; the aggregate is derived, never confused with it
    assert p.sram.capacity_bytes == p.sram.capacity_per_sm_bytes * p.sm_count
    assert p.hbm.capacity_bytes > p.l2.capacity_bytes > p.sram.capacity_per_sm_bytes
    assert p.sram.bandwidth_bytes_per_s > p.l2.bandwidth_bytes_per_s > p.hbm.bandwidth_bytes_per_s
    assert "fp32" in p.compute_flops_per_s


def test_a100_figures():
    p = load_profile("a100")
    # transferred from h200: 2.039 TB/s × (4.528 of its datasheet 4.8 TB/s measured) = 1.923 TB/s
    assert p.hbm.bandwidth_bytes_per_s == pytest.approx(2.039e12 * 4.528 / 4.8, rel=1e-3)
    assert p.datasheet_peak("memory.hbm.bandwidth") == 2.039e12
    assert p.l2.capacity_bytes == 40 * 2**20
    assert p.sram.capacity_per_sm_bytes == 164 * 1024
    # 108 SMs × 180.5 GB/s = 19.494 TB/s (the paper's "~19 TB/s")
    assert p.sram.bandwidth_bytes_per_s == pytest.approx(19.494e12)
    # the published BF16 MAMF (ml-engineering's table: 271.2 TFLOP/s, 0.869 of the 312 peak), FP16 the same:
    # kept over the H200's share (312 × 811.2 / 989.5 = 255.8), the datasheet peak beside it
    assert p.peak_flops("fp16") == pytest.approx(271.2e12) == p.peak_flops("bf16")
    assert p.kind_of("compute.bf16") == "published" and p.datasheet_peak("compute.bf16") == pytest.approx(312e12)
    assert p.datasheet_peak("compute.fp16") == 312e12
    assert p.rate_class == "other-architecture" and p.transferred_from == "h200"
    with pytest.raises(ProfileError, match="a100 has no fp8 compute peak"):
        p.peak_flops("fp8")


def _a100() -> dict:
    return yaml.safe_load((HARDWARE / "a100.yaml").read_text())


def _mutate(data: dict, dotted: str, value=None, delete: bool = False) -> dict:
    node = data
    keys = dotted.split(".")
    for k in keys[:-1]:
        node = node[k]
    if delete:
        del node[keys[-1]]
    else:
        node[keys[-1]] = value
    return data


@pytest.mark.parametrize(
    ("dotted", "value", "delete", "message"),
    [
        ("memory.hbm.bandwidth", None, True, r"x.yaml -> memory.hbm.bandwidth: missing \(expected a bandwidth"),
        (
            "memory.hbm.bandwith",
            "1 TB/s",
            False,
            r"x.yaml -> memory.hbm.bandwith: unknown key \(did you mean 'bandwidth'\?\)",
        ),
        ("memory.hbm.bandwidth", "0 TB/s", False, r"x.yaml -> memory.hbm.bandwidth: '0 TB/s' must be a positive"),
        ("memory.hbm.bandwidth", "-2 TB/s", False, r"x.yaml -> memory.hbm.bandwidth: .* must be a positive"),
        ("memory.hbm.bandwidth", "fast", False, r"x.yaml -> memory.hbm.bandwidth: cannot read 'fast'"),
        (
            "memory.hbm.bandwidth",
            "2 TB",
            False,
            r"x.yaml -> memory.hbm.bandwidth: unit 'TB' in '2 TB' is not a bandwidth",
        ),
        ("memory.hbm.bandwidth", 2000, False, r"x.yaml -> memory.hbm.bandwidth: 2000 has no unit"),
        ("memory.hbm.bandwidth", [1, 2], False, r"x.yaml -> memory.hbm.bandwidth: expected a bandwidth"),
        ("sm_count", "many", False, r"x.yaml -> sm_count: cannot read 'many'"),
        ("sm_count", 0, False, r"x.yaml -> sm_count: 0 must be a positive"),
        ("compute.fp64", "9.7 TFLOP/s", False, r"x.yaml -> compute.fp64: unknown key"),
        ("compute", "fast", False, r"x.yaml -> compute: must be a mapping"),
        ("name", None, True, r"x.yaml -> name: missing"),
        ("name", 7, False, r"x.yaml -> name: must be a non-empty string"),
        ("schema", "memmodel.hardware/9", False, r"x.yaml -> schema: 'memmodel.hardware/9' is not supported"),
        ("memory.l2.capacity", "100 GB", False, r"x.yaml -> memory.l2.capacity: 100.0 GB is not smaller than HBM"),
        (
            "memory.sram.capacity_per_sm",
            "64 MiB",
            False,
            r"x.yaml -> memory.sram.capacity_per_sm: .* not smaller than L2",
        ),
        ("memory.l2.effective_capacity", "50 MiB", False, r"x.yaml -> memory.l2.effective_capacity: is larger than"),
        ("memory.hbm.latency", "2 s", False, r"x.yaml -> memory.hbm.latency: .* not a plausible memory latency"),
        (
            "memory.hbm.bandwidth",
            {"value": "1 TB/s", "source": "nowhere"},
            False,
            r"x.yaml -> memory.hbm.bandwidth: source 'nowhere' is not listed",
        ),
        ("memory.hbm.bandwidth", {"source": "datasheet"}, False, r"x.yaml -> memory.hbm.bandwidth: missing 'value'"),
        (
            "memory.hbm.bandwidth",
            {"value": "1 TB/s", "src": "x"},
            False,
            r"x.yaml -> memory.hbm.bandwidth: unknown key 'src'",
        ),
        ("sources.datasheet", 5, False, r"x.yaml -> sources.datasheet: must be a title string"),
        ("sources.datasheet", {"url": "x"}, False, r"x.yaml -> sources.datasheet.title: missing"),
    ],
)
def test_loader_refuses_bad_fields_naming_file_and_field(dotted, value, delete, message):
    data = _mutate(_a100(), dotted, value, delete)
    with pytest.raises(ProfileError, match=message):
        parse_profile(data, "x.yaml")


@pytest.mark.parametrize(
    ("share", "message"),
    [
        (1.2, r"'1.2' is not in \(0, 1\]: a share of memory.hbm.bandwidth"),
        (0, "must be a positive"),
        (-0.5, "positive"),
    ],
)
def test_loader_refuses_an_hbm_share_outside_zero_to_one(share, message):
    """A kernel's loads cannot stream faster than memory.hbm.bandwidth itself, nor not at all."""
    data = yaml.safe_load((HARDWARE / "h200.yaml").read_text())
    data["implementations"]["flashinfer"]["hbm_share"] = {"value": share, "source": "measured-serving-kernels"}
    with pytest.raises(ProfileError, match=r"x.yaml -> implementations.flashinfer.hbm_share: .*" + message):
        parse_profile(data, "x.yaml")
    data["implementations"]["flashinfer"]["hbm_share"] = {"value": 1.0, "source": "measured-serving-kernels"}
    assert parse_profile(data, "x.yaml").implementation("flashinfer").hbm_share == 1.0  # the whole bandwidth: allowed


def test_loader_refuses_a_file_that_is_not_a_mapping(tmp_path: Path):
    f = tmp_path / "list.yaml"
    f.write_text("- 1\n- 2\n")
    with pytest.raises(ProfileError, match=r"list.yaml: a profile must be a YAML mapping"):
        load_file(f)


def test_loader_reports_yaml_syntax_errors_with_the_line(tmp_path: Path):
    f = tmp_path / "broken.yaml"
    f.write_text("name: x\nmemory: [unclosed\n")
    with pytest.raises(ProfileError, match=r"broken.yaml: invalid YAML at line \d+"):
        load_file(f)


def test_missing_file_and_folder(tmp_path: Path):
    with pytest.raises(ProfileError, match="no such file"):
        load_file(tmp_path / "nope.yaml")
    with pytest.raises(ProfileError, match="is a folder"):
        load_file(tmp_path)


def test_unknown_name_suggests_the_closest(monkeypatch):
    with pytest.raises(ProfileError, match=r"unknown GPU 'a1000': did you mean a100\?"):
        load_profile("a1000")


def test_user_config_folder_and_env_path_are_searched_and_shadow_bundled(tmp_path: Path, monkeypatch):
    data = _a100()
    data["name"] = "mygpu"
    user = tmp_path / "config" / "memmodel" / "hardware"
    user.mkdir(parents=True)
    (user / "mygpu.yaml").write_text(yaml.safe_dump(data))
    assert load_profile("mygpu").origin == "user"

    env = tmp_path / "env"
    env.mkdir()
    data["full_name"] = "from env"
    (env / "mygpu.yaml").write_text(yaml.safe_dump(data))
    monkeypatch.setenv("MEMMODEL_HARDWARE_PATH", str(env))
    p = load_profile("mygpu")
    assert (p.origin, p.full_name) == ("env", "from env")


def test_a_path_is_loaded_as_a_file(tmp_path: Path):
    f = tmp_path / "copy.yaml"
    f.write_text((HARDWARE / "a100.yaml").read_text())
    assert load_profile(str(f)).name == "a100"
    assert load_profile(str(f)).origin == "file"


def test_profiles_are_frozen():
    p = load_profile("a100")
    with pytest.raises(AttributeError):
        p.sm_count = 1  # type: ignore[misc]


# ---------------------------------------------------------------------------------------
# Provenance and derivation


def test_h100_figures_derive_from_the_h200_calibration_by_the_stated_rules():
    h200, pcie, sxm = load_profile("h200"), load_profile("h100-pcie"), load_profile("h100-sxm")
    # per SM per clock: × (114 SMs × 1755 MHz) / (132 × 1980) = 0.76550
    scale = 114 * 1755e6 / (132 * 1980e6)
    assert pcie.peak_flops("fp16") == pytest.approx(h200.peak_flops("fp16") * scale, rel=1e-3)
    assert pcie.mma_sync_flops_per_s["fp16"] == pytest.approx(h200.mma_sync_flops_per_s["fp16"] * scale, rel=1e-3)
    # HBM: the H200's measured share of its 4.8 TB/s datasheet, on 2.0 TB/s (H100 PCIe) and 3.35 TB/s (SXM)
    assert pcie.hbm.bandwidth_bytes_per_s == pytest.approx(h200.hbm.bandwidth_bytes_per_s * 2.0 / 4.8, rel=1e-3)
    assert sxm.hbm.bandwidth_bytes_per_s == pytest.approx(h200.hbm.bandwidth_bytes_per_s * 3.35 / 4.8, rel=1e-3)
    # on-chip latency in cycles: × 1980 / 1755; the effective L2 as the same share: 30 MiB × 50/60 = 25 MiB
    assert pcie.l2.latency_s == pytest.approx(h200.l2.latency_s * 1980 / 1755, rel=1e-3)
    assert sxm.l2.usable_capacity_bytes == pytest.approx(25 * 2**20, rel=1e-3)
    # dimensionless: as they are
    assert {n: f.efficiency for n, f in pcie.implementation_figures.items()} == {
        n: f.efficiency for n, f in h200.implementation_figures.items()
    }
    prov = pcie.provenance["compute.fp16"]
    assert prov.kind == "derived" and "per SM per clock" in prov.note and "measured" in prov.note
    assert pcie.derived_from == "h200" and pcie.kind_of("sm_count") == "datasheet"


def test_a_users_own_calibration_improves_the_siblings(tmp_path, monkeypatch):
    import re

    text = re.sub(r"(\n  fp16: \{value: )[0-9.]+ TFLOP/s", r"\g<1>700 TFLOP/s", (HARDWARE / "h200.yaml").read_text())
    assert "fp16: {value: 700 TFLOP/s" in text
    (tmp_path / "h200.yaml").write_text(text)
    monkeypatch.setenv("MEMMODEL_HARDWARE_PATH", str(tmp_path))
    assert load_profile("h100-sxm").peak_flops("fp16") == pytest.approx(700e12, rel=1e-3)  # same SMs, clock


def test_derivation_needs_its_inputs_and_refuses_cycles(tmp_path):
    base = (HARDWARE / "h100-sxm.yaml").read_text()
    (tmp_path / "no-clock.yaml").write_text(base.replace("clock:", "# clock:", 1))
    with pytest.raises(ProfileError, match=r"no-clock.yaml -> clock: missing: a profile that derives from 'h200'"):
        load_file(tmp_path / "no-clock.yaml")
    (tmp_path / "a.yaml").write_text(base.replace("derive_from: h200", "derive_from: ./b.yaml"))
    (tmp_path / "b.yaml").write_text(base.replace("derive_from: h200", "derive_from: ./a.yaml"))
    with pytest.raises(ProfileError, match="a cycle"):
        load_file(tmp_path / "a.yaml")


def test_library_rates_cross_architectures_by_the_stream_rule():
    a100, h200 = load_profile("a100"), load_profile("h200")
    # the H200 streams 4.528 of its 4.8 TB/s (0.943); the A100: 0.943 × 2.039 = 1.923 TB/s, and
    # SMs × clock 108 × 1410 / (132 × 1980) = 0.5826 of the H200's. cuBLAS' read-bound product at
    # 3.955 TB/s: 1/r = 1/1.923 + (1/3.955 − 1/4.528) / 0.5826 → 1.739 TB/s (the share rule: 1.680)
    stream = 4.528e12 * 2.039 / 4.8
    rest = (1 / h200.kernel_rates.gemm_read_bytes_per_s - 1 / 4.528e12) / (108 * 1410 / (132 * 1980))
    assert a100.kernel_rates.gemm_read_bytes_per_s == pytest.approx(1 / (1 / stream + rest), rel=1e-3)
    assert a100.kernel_rates.gemm_read_bytes_per_s == pytest.approx(1.739e12, rel=1e-3)
    assert a100.provenance["kernels.gemm.read_bandwidth"].kind == "derived"
    assert "SMs × clock × 0.5826" in (a100.provenance["kernels.gemm.read_bandwidth"].note or "")
    note = a100.provenance["memory.hbm.bandwidth"].note or ""
    assert note.startswith("from h200, measured 2026-12-01, same-share rule") and "(0.943)" in note


def test_every_bundled_source_says_what_kind_of_figure_it_gives():
    from memmodel.hardware import SOURCE_KINDS, available

    for name in available():
        p = load_profile(name)
        for fpath, prov in p.provenance.items():
            assert prov.kind in SOURCE_KINDS, (name, fpath)
        measured = [s for s in p.sources.values() if s.kind == "measured"]
        assert all(s.machine and s.date and s.command for s in measured), name


def test_rates_and_caveats_say_how_much_to_trust_a_time(run):
    from memmodel.timing import caveats, rate_sources

    assert rate_sources(load_profile("h200")).startswith("measured")
    assert rate_sources(load_profile("h100-sxm")).startswith("derived from profile h200")
    assert rate_sources(load_profile("mi300x")).startswith("transferred from profile h200")
    assert "expect large errors" in rate_sources(load_profile("mi300x"))
    lines = caveats(load_profile("mi300x"), "sdpa-flash", "fp16", 128)
    # the launch overhead transfers (the same time); the exp rate is AMD's compiler's quarter rate
    assert not any("no exp rate" in line for line in lines) and not any("no launch overhead" in line for line in lines)
    assert load_profile("mi300x").exp_ops_per_s == pytest.approx(16 * 304 * 2.1e9, rel=1e-3)  # 10.21 Top/s
    # CDNA 4 doubles it (the CDNA 4 white paper; LLVM pull request 156411: gfx950 Trans32 4 -> 2): half rate
    assert load_profile("mi355x").exp_ops_per_s == pytest.approx(32 * 256 * 2.4e9, rel=1e-3)  # 19.66 Top/s
    assert any("no measured efficiency for sdpa-flash" in line for line in lines)
    mine = yaml.safe_load((HARDWARE / "mi300x.yaml").read_text())
    del mine["transfer_from"]
    del mine["datasheet"]["compute"]["exp"]
    alone = parse_profile(mine, "mi300x-alone")  # datasheet figures only
    assert "expect large errors" in rate_sources(alone) and alone.rate_class == "datasheet"
    assert any("no launch overhead" in line for line in caveats(alone, "sdpa-flash", "fp16", 128))
    assert any("no exp rate" in line for line in caveats(alone, "sdpa-flash", "fp16", 128))
    datasheet = load_file(REPO / "validation" / "h200" / "h200-datasheet.yaml")
    assert any("no mma.sync rate" in line for line in caveats(datasheet, "sdpa-flash", "fp16", 128))
    assert not any("mma.sync" in line for line in caveats(load_profile("a100"), "sdpa-flash", "fp16", 128))
    r = run("hardware", "sources", "--format", "markdown")
    assert r.exit_code == 0 and "| h100-sxm | derived from profile h200" in r.stdout
    # under the table, once per kind of profile, where its times' range comes from
    assert "The ranges, by kind of profile: measured: steps of the validation records" in r.stdout
    assert "transferred: published kernel times of GPUs of this class" in r.stdout


def test_link_curves_derive_only_to_parts_that_give_their_own_links():
    """The H200 pair's measured NCCL curves carry to the H100 SXM (same NVLink 4, its own
    bandwidth in its file) as they are; the H100 PCIe gives no links of its own and takes none
    (a curve without a bandwidth would not load)."""
    from memmodel.hardware import load_profile

    h200, sxm, pcie = (load_profile(n) for n in ("h200", "h100-sxm", "h100-pcie"))
    assert h200.interconnect is not None and h200.interconnect.send_recv_efficiency
    assert sxm.interconnect is not None
    assert sxm.interconnect.send_recv_efficiency == h200.interconnect.send_recv_efficiency
    assert sxm.interconnect.bandwidth_bytes_per_s == 450e9  # its own datasheet figure
    assert pcie.interconnect is None


# ---------------------------------------------------------------------------------------
# One typed figures object per implementation


def test_implementation_figures_hold_the_bundled_h200s_measured_figures():
    """Figures read off memmodel/hardware/profiles/h200.yaml (implementations.sdpa-flash, sdpa-cudnn)."""
    h200 = load_profile("h200")
    flash = h200.implementation("sdpa-flash")
    assert flash.name == "sdpa-flash"
    assert flash.efficiency == ((64, 1.094), (96, 1.135), (128, 1.066), (256, 0.868))
    # between the measured head dims linear in log2: d = 80 is (log2 80 - 6) / (log2 96 - 6) = 0.5503
    # of the way from 64 to 96: 1.094 + 0.5503 × (1.135 - 1.094) = 1.1166
    assert flash.efficiency_at(80) == pytest.approx(1.11656, abs=1e-5)
    assert flash.efficiency_at(32) == 1.094 and flash.efficiency_at(512) == 0.868  # clamped at the ends
    assert flash.clocks_fall == (0.943, pytest.approx(64.89e-3))
    assert flash.combine_time_s == (pytest.approx(2.892e-6), pytest.approx(0.2419e-6))
    assert flash.combine_bandwidth_bytes_per_s == pytest.approx(3.175e12)
    forward = flash.kernel(128)
    assert (forward.efficiency, forward.masked_block_cost) == (1.066, 0.329)
    assert forward.cta_overhead_s == pytest.approx(4.145e-6) and forward.dropout_scores_per_s == pytest.approx(2.475e12)
    assert forward.uneven_efficiency is None and forward.cta_bandwidth_bytes_per_s is None  # not asked, not split
    assert flash.kernel(96, uneven=True).uneven_efficiency == 0.917
    backward = flash.kernel(128, backward=True)
    # the backward fitted with its grid in whole waves (timing.backward_tail_factor): the diagonal cost at its floor
    assert (backward.efficiency, backward.masked_block_cost) == (0.806, 0.001)
    # fitted with calibrate's two layout copies among the other kernels (scoring.runner_layout_copies)
    assert backward.cta_overhead_s == pytest.approx(7.933e-6)
    assert backward.dropout_scores_per_s == pytest.approx(7.073e12)
    assert flash.kernel(128, backward=True, uneven=True).uneven_efficiency is None  # a forward figure
    split = flash.kernel(128, split=True)
    assert split.efficiency == 0.911  # its own (split_efficiency), not the forward kernel's 1.066
    assert split.cta_overhead_s is None and split.split_cta_overhead_s == pytest.approx(3.232e-6)
    assert split.cta_bandwidth_bytes_per_s == pytest.approx(18.24e9)
    cudnn = h200.implementation("sdpa-cudnn")
    assert cudnn.clocks_fall == (0.872, pytest.approx(34.67e-3))
    assert cudnn.kernel(128, split=True).efficiency == 0.896  # no split_efficiency: the forward kernel's
    # where each figure comes from is kept by field path, as written in the file
    prov = h200.provenance["implementations.sdpa-flash.efficiency"]
    assert prov.source == "measured" and prov.kind == "measured"
    assert h200.provenance["implementations.sdpa-cudnn.sustained_after"].text == "34.67 ms"


def test_an_implementation_a_profile_measured_nothing_of_has_empty_figures():
    mi300x = load_profile("mi300x")  # another vendor: no kernel's figures transfer
    assert "sdpa-flash" not in mi300x.implementation_figures
    empty = mi300x.implementation("sdpa-flash")
    assert empty.efficiency == () and empty.efficiency_at(128) is None and empty.clocks_fall is None
    assert set(vars(empty.kernel(128, split=True, uneven=True)).values()) == {None}
    assert load_profile("h200").implementation(None).kernel(128).efficiency is None  # the paper's algorithm


@pytest.mark.parametrize("path", PROFILES, ids=[p.stem for p in PROFILES])
def test_implementation_figures_are_the_profiles_figures_by_field(path: Path):
    """Every ``implementations.<name>.<field>`` of a bundled profile lands in its figures object,
    in base units, and nothing else does."""
    from memmodel.hardware.schema import IMPLEMENTATION_CURVES, IMPLEMENTATION_VALUES

    p = load_file(path)
    seen = set()
    for name, fig in p.implementation_figures.items():
        for leaf, attr in {**IMPLEMENTATION_CURVES, **IMPLEMENTATION_VALUES}.items():
            fpath = f"implementations.{name}.{leaf}"
            assert getattr(fig, attr) == p.figures.get(fpath, () if leaf in IMPLEMENTATION_CURVES else None), fpath
            seen |= {fpath} & set(p.figures)
        for (a, b), curve in fig.tile_efficiency.items():
            assert curve == p.figures[f"implementations.{name}.efficiency_{a}x{b}"]
            seen.add(f"implementations.{name}.efficiency_{a}x{b}")
        for d, curve in fig.uneven_causal_slowdown.items():
            assert curve == p.figures[f"implementations.{name}.uneven_causal_slowdown_d{d}"]
            seen.add(f"implementations.{name}.uneven_causal_slowdown_d{d}")
        if fig.combine_time_s is not None:
            fixed, per_split = fig.combine_time_s
            assert fixed == p.figures.get(f"implementations.{name}.combine_time", 0.0)
            assert per_split == p.figures.get(f"implementations.{name}.combine_time_per_split", 0.0)
            seen |= {f"implementations.{name}.combine_time", f"implementations.{name}.combine_time_per_split"}
    assert seen >= {f for f in p.figures if f.startswith("implementations.")}


def test_a_copy_with_other_implementation_figures():
    h200 = load_profile("h200")
    bare = h200.with_implementation_figures(backward_efficiency=())
    assert all(f.backward_efficiency == () for f in bare.implementation_figures.values())
    assert bare.implementation("sdpa-flash").efficiency == h200.implementation("sdpa-flash").efficiency
    one = h200.with_implementation_figures("fa3", efficiency=((128, 0.5),))
    # the copy's one point holds at every head dim; the bundled profile keeps its measured 1.074 at d = 256
    assert (
        one.implementation("fa3").efficiency_at(256) == 0.5 and h200.implementation("fa3").efficiency_at(256) == 1.074
    )


def test_the_names_the_schema_admits_are_the_models():
    """The hardware package declares the implementations and causal curves a profile may hold
    (it imports nothing of the model); the model's own lists must be the same."""
    from memmodel.hardware.schema import CAUSAL_CURVE_DIMS, CAUSAL_CURVE_PREFIXES, PROFILE_IMPLEMENTATIONS
    from memmodel.implementations import IMPLEMENTATIONS
    from memmodel.traffic import l2

    assert PROFILE_IMPLEMENTATIONS == (*(n for n in IMPLEMENTATIONS if n != "paper"), "flashinfer-fa2")
    assert CAUSAL_CURVE_PREFIXES == tuple(p for c in l2.CAUSAL_CURVES.values() for p in c.prefixes())
    assert l2.CAUSAL_CURVE_DIMS is CAUSAL_CURVE_DIMS


def test_one_default_gpu(run):
    """The GPU a command models when none is named is defined once (the hardware package's)."""
    import json

    from memmodel.hardware import DEFAULT_GPU
    from memmodel.sweep import Grid

    assert DEFAULT_GPU == "a100" and DEFAULT_GPU in available()
    assert Grid(n=(1024,), d=(64,)).gpus == (DEFAULT_GPU,)
    assert (
        json.loads(run("compare", "--n", "256", "--d", "64", "--format", "json").stdout)["hardware"]["name"] == "a100"
    )
    assert "Default: a100." in " ".join(run("compare", "--help").stdout.split())


def test_the_wheel_holds_the_bundled_profiles(tmp_path: Path):
    """``pip install .`` ships every profile of memmodel/hardware/profiles/ as package data, and
    the installed package finds them by name."""
    import shutil
    import subprocess
    import sys
    import zipfile

    pytest.importorskip("setuptools")
    src = tmp_path / "src"
    shutil.copytree(REPO / "memmodel", src / "memmodel", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    cmd = [sys.executable, "-m", "pip", "wheel", str(src), "-w", str(tmp_path / "dist"), "--no-deps"]
    subprocess.run([*cmd, "--no-build-isolation", "-q"], check=True, capture_output=True)
    (wheel,) = (tmp_path / "dist").glob("memmodel-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    bundled = {f"memmodel/hardware/profiles/{p.name}" for p in PROFILES}
    # 22 = the 12 profiles before issue 28 + its 9 + the A100 PCIe (REQUIRED names every one)
    assert len(bundled) == len(REQUIRED) == 22 and bundled <= names
    zipfile.ZipFile(wheel).extractall(tmp_path / "site")
    code = "from memmodel.hardware import available, bundled_dir; print(bundled_dir(), len(available()))"
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path / "site")},
        capture_output=True,
        text=True,
    )
    assert out.stdout.split() == [str(tmp_path / "site" / "memmodel" / "hardware" / "profiles"), "22"], out.stderr


def test_amd_profiles_keep_their_published_gemm_rates_and_transfer_the_rest():
    """The CDNA 3/4 dense GEMM rates are published microbenchmarks (AMD's hipBLASLt MAF blog for
    MI300X and MI325X, the MAMF table for MI355X): the transfer keeps them, keeps the datasheet
    peak beside them, and gives the H200's share only where nothing is published."""
    mi300x, mi325x, mi355x = (load_profile(n) for n in ("mi300x", "mi325x", "mi355x"))
    assert mi300x.figures["compute.bf16"] == pytest.approx(708e12)  # MAF BF16 at 1207 MHz
    assert mi300x.figures["compute.fp16"] == pytest.approx(654e12)
    assert mi300x.figures["compute.fp8"] == pytest.approx(1273e12)
    assert mi300x.kind_of("compute.bf16") == "published"
    # 708 / 1307.4 = 0.5415 of the datasheet peak, far below the H200's 811.2 / 989.5 = 0.820
    assert mi300x.figures["compute.bf16"] / mi300x.datasheet_peak("compute.bf16") == pytest.approx(0.5415, abs=1e-4)
    assert mi325x.figures["compute.bf16"] == pytest.approx(843e12) and mi325x.kind_of("compute.fp8") == "published"
    assert mi355x.figures["compute.bf16"] == pytest.approx(1565e12) == mi355x.figures["compute.fp16"]
    # no published FP8 or FP32 figure: the H200's shares of the datasheet peaks,
    # FP8 5033.2 × 1485 / 1979 = 3776.8 TFLOP/s; FP32 157.3 × 50.91 / 67 = 119.5 TFLOP/s
    assert mi355x.kind_of("compute.fp8") == "derived" and mi355x.figures["compute.fp8"] == pytest.approx(
        3.777e15, rel=1e-3
    )
    assert mi355x.figures["compute.fp32"] == pytest.approx(119.5e12, rel=1e-3)
    assert mi355x.datasheet_peak("compute.fp8") == pytest.approx(5033.2e12)
    # the HBM stream share stays the H200's (no CDNA 3/4 stream figure published in reach): 5.3 × 0.943
    assert mi300x.kind_of("memory.hbm.bandwidth") == "derived"
    assert mi300x.figures["memory.hbm.bandwidth"] == pytest.approx(5.3e12 * 4.528 / 4.8, rel=2e-3)


def test_an_fp8_kernels_share_stays_on_its_architecture():
    """An fp8 kernel's efficiency as a share of its 16-bit one is a Hopper kernel's trait (an 8-bit
    wgmma takes V transposed): a Hopper sibling takes it as is, a Blackwell GPU neither by transfer
    nor, for FA4, by the same-design rule from FA3."""
    h200 = load_profile("h200")
    share = h200.implementation("fa3").fp8_share_at(128)
    assert share is not None and 0.3 < share < 1.0
    assert load_profile("h100-sxm").implementation("fa3").fp8_share_at(128) == share
    for name in ("b200", "gb300"):
        blackwell = load_profile(name)
        assert all(f.fp8_share_at(128) is None for f in blackwell.implementation_figures.values())
        assert "implementations.fa4.fp8_share" not in blackwell.figures


def test_stream_rule_keeps_a_latency_bound_kernel_on_a_gpu_of_the_same_sms():
    from memmodel.hardware.derive import stream_rate

    h100, h200 = load_profile("h100-sxm"), load_profile("h200")
    # PyTorch's softmax over 8192 keys: 1.075 TB/s on the H200, well under its 4.528 TB/s
    # stream. The H100 SXM has the H200's 132 SMs at 1980 MHz and 3.35 of its 4.8 TB/s:
    # 1/r = 1/(4.528 × 3.35/4.8) + (1/1.075 − 1/4.528) → 0.975 TB/s, where the same share of
    # the HBM gave 1.075 × 3.35/4.8 = 0.750
    base = dict(h200.kernel_rates.softmax_bytes_per_s)[8192]
    carried = dict(h100.kernel_rates.softmax_bytes_per_s)[8192]
    assert carried == pytest.approx(1 / (1 / (4.528e12 * 3.35 / 4.8) + 1 / base - 1 / 4.528e12), rel=1e-3)
    assert carried == pytest.approx(stream_rate(base, 4.528e12, 4.528e12 * 3.35 / 4.8, 1.0), rel=1e-4)
    assert carried == pytest.approx(0.975e12, rel=2e-3)


@given(
    rate=st.floats(0.05, 1.0),
    hbm=st.floats(0.05, 4.0),
    sm_clock=st.floats(0.1, 4.0),
)
def test_stream_rule_properties(rate, hbm, sm_clock):
    from memmodel.hardware.derive import stream_rate

    base_stream = 1.0
    # the same GPU: the rate itself
    assert stream_rate(rate, base_stream, base_stream, 1.0) == pytest.approx(rate)
    out = stream_rate(rate, base_stream, hbm, sm_clock)
    # never above the target's stream, nor above the SM side's carried limit
    assert out <= hbm * (1 + 1e-12)
    rest = 1 / rate - 1 / base_stream
    if rest > 0:
        assert out <= sm_clock / rest * (1 + 1e-12)
    # more HBM or more SMs × clock never slows it
    assert stream_rate(rate, base_stream, hbm * 1.5, sm_clock) >= out
    assert stream_rate(rate, base_stream, hbm, sm_clock * 1.5) >= out


def test_an_mma_sync_gpu_takes_flashattention_2s_efficiencies_for_kernels_measured_with_wgmma():
    """The same-instruction rule: cuDNN, Triton and flex were measured on the H200 as wgmma
    kernels; on an Ampere or Ada GPU their kernels are mma.sync ones of FlashAttention-2's
    algorithm, so they take sdpa-flash's measured efficiencies there, and keep their own on
    Hopper (derived) and Blackwell (transferred, not an mma.sync architecture)."""
    h200 = load_profile("h200")
    flash = h200.implementation("sdpa-flash")
    for name in ("a100", "l40s", "rtx4090"):
        p = load_profile(name)
        for impl in ("sdpa-cudnn", "triton", "flex"):
            figures = p.implementation(impl)
            assert figures.efficiency == flash.efficiency, (name, impl)
            assert "same-instruction rule" in p.provenance[f"implementations.{impl}.efficiency"].note
        assert p.implementation("sdpa-cudnn").backward_efficiency == flash.backward_efficiency
        # at d = 128: sdpa-flash's 1.066, not cuDNN's own 0.896 (its H200 wgmma kernels)
        assert dict(p.implementation("sdpa-cudnn").efficiency)[128] == pytest.approx(1.066)
    for name in ("h100-sxm", "b200"):
        cudnn = load_profile(name).implementation("sdpa-cudnn")
        assert cudnn.efficiency == h200.implementation("sdpa-cudnn").efficiency, name


def test_on_an_mma_sync_gpu_cudnns_softmax_follows_its_products():
    """cuDNN overlaps one tile's softmax with another's products on Hopper (asynchronous wgmma);
    on an A100 its kernels are timed as FlashAttention-2's: the compute terms add up."""
    from memmodel import Workload, compare
    from memmodel.options import options_for

    w = Workload(batch=2, heads=16, n=4096, d=128, dtype="bf16")
    for name, serial in (("a100", True), ("h100-sxm", False)):
        p = load_profile(name)
        k = compare(w, p, options_for("sdpa-cudnn", w, p)).tiled.timing.kernels[-1]
        t = k.terms
        added = t["matmul"] + t["exp"] + t["softmax"] + t.get("cta", 0.0)
        overlapped = max(t["matmul"], t["exp"] + t["softmax"]) + t.get("cta", 0.0)
        assert t["compute"] == pytest.approx(added if serial else overlapped, rel=1e-9), name
        assert added > overlapped  # the two rules differ here


def test_a_profile_derived_from_a_transferred_one_rests_on_what_its_base_rests_on():
    """a100-pcie derives from a100, itself transferred from the H200: its times take the
    other-architecture class's range, and its rates line says why; a sibling of the measured H200
    stays same-architecture."""
    pcie = load_profile("a100-pcie")
    assert (pcie.derived_from, pcie.base_class, pcie.rate_class) == ("a100", "other-architecture", "other-architecture")
    assert load_profile("h100-pcie").rate_class == "same-architecture"
    # the power-clock rule from a100's cuDNN share (the H200's 0.872, carried over):
    # 0.872 × ((300 W / 108) / (400 W / 108))^(1/3) = 0.872 × 0.90856 = 0.7923
    assert pcie.implementation("sdpa-cudnn").clocks_fall[0] == pytest.approx(0.7923, abs=1e-4)
    # HBM at a100's share of its datasheet bandwidth: 1.923 / 2.039 of 1935 GB/s = 1.825 TB/s
    assert pcie.figures["memory.hbm.bandwidth"] == pytest.approx(1.825e12, rel=2e-3)
    note = pcie.provenance["implementations.sdpa-cudnn.sustained_share"].note
    assert "a100's share 0.872 (derived)" in note and "measured" not in note
