from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from memmodel.errors import ProfileError
from memmodel.hardware import available, load_file, load_profile, parse_profile

from .conftest import HARDWARE

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
    assert p.hbm.bandwidth_bytes_per_s == 2.039e12
    assert p.l2.capacity_bytes == 40 * 2**20
    assert p.sram.capacity_per_sm_bytes == 164 * 1024
    # 108 SMs × 180.5 GB/s = 19.494 TB/s (the paper's "~19 TB/s")
    assert p.sram.bandwidth_bytes_per_s == pytest.approx(19.494e12)
    assert p.peak_flops("fp16") == 312e12
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
