"""The MALL level on CDNA profiles (``memory.mall``, ``memory.l2.xcds``): the profile's figures and
their refusals, the XCD rule (round-robin dispatch: each XCD holding CTAs of a head reads its
shared data once into its own L2 slice), the ledger's mall rows, their timing term, the JSON and
text output, and that a profile without a MALL has none of it."""

from __future__ import annotations

import json

import pytest
import yaml
from click.testing import CliRunner

from memmodel import Workload, compare, load_profile
from memmodel.cli import cli as main
from memmodel.errors import ProfileError
from memmodel.hardware import parse_profile
from memmodel.options import options_for
from memmodel.traffic import l2 as l2m

MiB = 2**20


@pytest.fixture(scope="module")
def mi300x():
    return load_profile("mi300x")


def test_profiles_split_the_l2_per_xcd_and_give_the_infinity_cache_its_own_level(mi300x):
    assert mi300x.l2_xcds == 8
    assert mi300x.l2.capacity_bytes == 32 * MiB and mi300x.l2_slice_bytes == 4 * MiB  # 32 MiB / 8 XCDs
    assert mi300x.mall is not None and mi300x.mall.capacity_bytes == 256 * MiB
    assert mi300x.last_level is mi300x.mall
    # 2,048 B/clk per XCD × 8 XCDs × 2.1 GHz = 34.4 TB/s; the MALL's 17.2 TB/s peak
    assert mi300x.levels() == pytest.approx(
        {"hbm": 5.0e12, "l2": 34.4e12, "sram": 81.7152e12, "mall": 17.2e12}, rel=1e-3
    )
    h200 = load_profile("h200")
    assert h200.mall is None and h200.l2_xcds == 1 and h200.last_level is h200.l2
    assert "mall" not in h200.levels()


def _amd_yaml(**memory):
    data = yaml.safe_load(open(load_profile("mi300x").path))
    data.pop("transfer_from")
    for key, value in memory.items():
        section, field = key.split("__")
        if value is None:
            data["memory"][section].pop(field)
        else:
            data["memory"][section][field] = value
    return data


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"mall__capacity": "16 MiB"}, "mall.capacity: 16.0 MiB is not between the L2 (32.0 MiB) and HBM (192.0 GB)"),
        ({"mall__latency": None}, "memory.mall.latency: missing: memory.mall gives capacity, bandwidth and latency"),
        ({"l2__xcds": 7}, "memory.l2.xcds: '7' does not split the 304 SMs evenly"),
        ({"mall__bandwidth": "1e30 TB/s"}, "memory.mall.bandwidth: '1e30 TB/s' is above 10 PB/s"),
    ],
)
def test_bad_mall_figures_are_refused_with_one_line(change, message):
    with pytest.raises(ProfileError) as err:
        parse_profile(_amd_yaml(**change), "x.yaml")
    assert message in str(err.value) and "\n" not in str(err.value)


def test_xcds_without_a_mall_are_refused():
    data = _amd_yaml()
    data["memory"].pop("mall")
    with pytest.raises(ProfileError, match=r"memory.l2.xcds: needs memory.mall"):
        parse_profile(data, "x.yaml")


def test_round_robin_dispatch_sets_how_many_xcds_read_a_shared_tensor():
    view = l2m.xcd_view("on", 4 * MiB, 8, 304)
    assert l2m.xcds_reading(128, view) == 8  # a head of 128 CTAs lands on every XCD
    assert l2m.xcds_reading(3, view) == 3  # 3 consecutive CTAs: 3 XCDs
    assert l2m.xcds_reading(128, l2m.L2("on", 256 * MiB, 304)) == 1  # no XCD view
    # one head's 4 MiB K/V (fits a slice), requested 32 times: each of the 8 XCDs reads it once
    assert l2m.reread_hbm(4 * MiB, 32 * 4 * MiB, 32, 4 * MiB, view) == 8 * 4 * MiB
    # past the slice (8 MiB a head), once per wave per XCD: 64 CTAs of a head, 16 at once -> 4 waves
    small = l2m.xcd_view("on", 4 * MiB, 8, 16)
    assert l2m.reread_hbm(8 * MiB, 64 * 8 * MiB, 64, 8 * MiB, small) == 4 * 8 * 8 * MiB
    # a tensor the previous kernel wrote is read from the MALL, not from the reader's slice
    assert l2m.carried_over(1000, view) == 1000 and l2m.carried_over(1000, l2m.L2("on", 4 * MiB, 1)) == 0


def test_ck_ledger_holds_mall_rows_between_hbm_and_the_requests(mi300x):
    w = Workload(batch=4, heads=32, kv_heads=8, n=8192, d=128, dtype="bf16")
    c = compare(w, mi300x, options_for("ck", w, mi300x, backward=True))
    fwd = c.tiled.traffic.kernels[0]

    def row(kernel, tensor, level, direction="read"):
        (t,) = [t for t in kernel.transfers if (t.tensor, t.level, t.direction) == (tensor, level, direction)]
        return t.bytes

    kv = 4 * 8 * 8192 * 128 * 2  # B·H_kv·N_kv·d·e = 67,108,864 bytes of K
    # K: requested by 4 × 32 × 32 Q-block CTAs (T_r = 8192/256 = 32 per query head): 32 × 4 = 128 per
    # K/V head, so every XCD holds some; one head's K and V (4 MiB) fit a slice: 8 reads of K into the
    # slices; the MALL (256 MiB) holds it all: HBM once
    assert row(fwd, "K", "l2") == 32 * 4 * 32 * 8192 * 128 * 2
    assert row(fwd, "K", "mall") == 8 * kv == 536_870_912
    assert row(fwd, "K", "hbm") == kv
    # Q is read once by one CTA: the same at every level
    assert row(fwd, "Q", "mall") == row(fwd, "Q", "hbm") == 4 * 32 * 8192 * 128 * 2
    main = next(k for k in c.tiled.traffic.kernels if k.name == "ck_bwd_dqdkdv")
    # the fp32 dQ accumulator: every add of a head's CTAs (on different XCDs) goes through the MALL
    assert row(main, "dQacc", "mall") == row(main, "dQacc", "l2")
    assert row(main, "dQacc", "mall", "write") == row(main, "dQacc", "l2", "write")
    # every MALL row lies between the HBM row after it and the requests (the l2 row) before it
    for k in c.tiled.traffic.kernels + c.standard.traffic.kernels:
        rows = k.transfers
        for i, t in enumerate(rows):
            if t.level == "mall":
                assert rows[i - 1].level == "l2" and rows[i + 1].level == "hbm"
                assert rows[i + 1].bytes <= t.bytes <= rows[i - 1].bytes
    # its time term: the MALL bytes at the MALL's 17.2 TB/s
    terms = c.tiled.timing.kernels[0].terms
    assert terms["mall"] == pytest.approx(fwd.bytes(level="mall") / 17.2e12)


def test_json_and_table_show_the_mall_only_where_the_profile_has_one():
    runner = CliRunner(env={"NO_COLOR": "1", "COLUMNS": "160"})
    args = ["compare", "--n", "4096", "--d", "128", "--heads", "16", "--dtype", "bf16", "--format", "json"]
    amd = json.loads(runner.invoke(main, [*args, "--gpu", "mi300x"]).stdout)
    nvidia = json.loads(runner.invoke(main, [*args, "--gpu", "h200"]).stdout)
    tiled = amd["algorithms"][1]
    assert tiled["mall_bytes"] == tiled["mall_read_bytes"] + tiled["mall_write_bytes"] > 0
    assert "mall" in tiled["kernels"][0]["time_terms_s"]
    assert not any("mall" in key for key in nvidia["algorithms"][1])
    assert not any(t["level"] == "mall" for t in nvidia["algorithms"][1]["transfers"])
    text = runner.invoke(main, ["compare", "--n", "4096", "--d", "128", "--dtype", "bf16", "--gpu", "mi300x"]).output
    assert "MALL read" in text and " MALL " in text
    text = runner.invoke(main, ["compare", "--n", "4096", "--d", "128", "--dtype", "bf16", "--gpu", "h200"]).output
    assert "MALL" not in text
