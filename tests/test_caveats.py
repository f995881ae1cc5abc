"""The caveats quote checked figures from data (memmodel/data/validated.json), which the
records regenerate; no string literal of the model's modules names a record."""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import json
from pathlib import Path

import pytest

import memmodel.validated as validated
from memmodel.hardware import load_profile
from memmodel.model import compare
from memmodel.workload import Workload

REPO = Path(__file__).resolve().parent.parent
H200 = load_profile("h200")
#: a batched GQA grid whose row of new data (4 · 2·(8192 + 8192)·128·2 B = 32 MiB) sits in the L2's knee
ROW = Workload(n=8192, d=128, heads=32, kv_heads=8, batch=4, dtype="bf16", causal=True)


def _script():
    spec = importlib.util.spec_from_file_location("update_validated", REPO / "scripts" / "update_validated.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_data_file_is_what_the_records_give_now():
    script = _script()
    fresh = script.render(script.generate())
    assert validated.VALIDATED.read_text(encoding="utf-8") == fresh, "run python scripts/update_validated.py"


def test_every_checked_class_has_figures_from_the_records():
    data = json.loads(validated.VALIDATED.read_text(encoding="utf-8"))
    assert data["schema"] == validated.VALIDATED_SCHEMA
    assert set(data["classes"]) == set(validated.CHECKED)
    for cls, entry in data["classes"].items():
        assert entry["count"] == len(entry["cases"]) > 0, cls
        errors = sorted(e for _, _, e in entry["cases"])
        assert entry["min"] == errors[0] and entry["max"] == errors[-1], cls
        assert all(r.startswith("validation/") for r in entry["records"]), cls
    assert set(data["reference"]) == set(validated.REFERENCE)
    # the bundled H200 profile: mma.sync 453.4 of the dense 782 TFLOP/s at fp16 = 0.5798
    assert data["reference"]["mma_sync_share"] == 0.5798


@pytest.fixture
def fake(monkeypatch):
    def use(content):
        monkeypatch.setattr(validated, "_data", lambda: content)

    return use


def _row_caveat() -> str:
    c = compare(ROW, H200, impl="sdpa-flash")
    (line,) = [t for t, cls in zip(c.caveats, c.caveat_classes) if cls == "gqa_row"]
    return line


def test_a_caveat_quotes_the_data_file(fake):
    fake(
        {
            "schema": validated.VALIDATED_SCHEMA,
            "classes": {"gqa_row": {"count": 7, "median": 0.0123, "min": -0.25, "max": 0.5}},
        }
    )
    # -0.25 → -25 %, 0.5 → +50 %, median 0.0123 → +1.2 %
    assert "on the H200 such grids came out -25 % to +50 %, median +1.2 %, 7 kernels (docs" in _row_caveat()
    fake(
        {
            "schema": validated.VALIDATED_SCHEMA,
            "classes": {"gqa_row": {"count": 2, "median": -0.0004, "min": -0.004, "max": 0.3}},
        }
    )
    assert "came out 0 % to +30 %, median 0.0 %, 2 kernels" in _row_caveat()  # no "-0 %"
    fake({})
    assert "not checked on a GPU yet" in _row_caveat()


def test_the_row_caveat_gives_the_records_figures():
    entry = validated.validated()["gqa_row"]
    expected = (
        f"{100 * entry['min']:+.0f} % to {100 * entry['max']:+.0f} %, median {100 * entry['median']:+.1f} %, "
        f"{entry['count']} kernels"
    )
    assert expected in _row_caveat()


def test_profile_caveats_quote_the_reference_figures(fake):
    from memmodel.timing import caveats, matmul_peak

    bare = dataclasses.replace(H200, mma_sync_flops_per_s={}, mma_sync_one_cta_share=None)
    fake({"schema": validated.VALIDATED_SCHEMA, "reference": {"mma_sync_share": 0.5, "one_cta_share": 0.77}})
    _, line = matmul_peak(bare, "fp16", "mma_sync")
    assert line is not None and "(on an H200: 50 % of it). Expect" in line
    assert any("(on an H200 it runs at about 0.77 of it)." in x for x in caveats(bare, "sdpa-flash", "fp16", 128))
    fake({})  # no data: the sentence ends without a figure
    _, line = matmul_peak(bare, "fp16", "mma_sync")
    assert "on an H200" not in line and line.endswith("hopper. Expect these times to be too short.")


#: the modules of the model, whose string literals name no record (percentages anywhere in
#: memmodel/ are tests/test_architecture.py's check)
OWN = [
    "memmodel/model.py",
    "memmodel/plan.py",
    "memmodel/caveats.py",
    "memmodel/validated.py",
    "memmodel/backward.py",
    "memmodel/roofline.py",
    "memmodel/flops.py",
    "memmodel/workload.py",
    *sorted(str(p.relative_to(REPO)) for p in (REPO / "memmodel" / "traffic").glob("*.py")),
]


@pytest.mark.parametrize("path", OWN)
def test_the_model_names_no_record(path):
    """The records are data, named in memmodel/data/validated.json, not in the model's strings."""
    tree = ast.parse((REPO / path).read_text(encoding="utf-8"))
    paths = [
        n.lineno
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and "validation/" in n.value
    ]
    assert paths == []


@pytest.mark.parametrize(("n", "fires"), [(1024, False), (1025, True), (4096, True), (9216, True), (9217, False)])
def test_the_softmax_version_caveat_fires_over_the_rows_whose_kernel_changed_in_pytorch_2_7(n, fires):
    """PyTorch 2.7 (pull request 144679) changed the softmax kernel over rows of 1025–9216 keys:
    standard attention there says whose rate it is timed at, named from the profile's source
    (the bundled H200's calibration ran torch 2.11.0; a derived profile names its base's)."""
    from memmodel import Workload, compare, load_profile

    for gpu in ("h200", "h100-sxm"):
        c = compare(Workload(batch=1, heads=4, n=n, d=64, dtype="fp16"), load_profile(gpu))
        lines = [t for t in c.caveats if "softmax over rows of 1025–9216" in t]
        assert len(lines) == int(fires)
        if fires:
            assert "PyTorch 2.11 reached" in lines[0] and "pull request 144679" in lines[0]


@pytest.mark.parametrize(
    ("d", "window", "backward", "fires"),
    [(128, 4096, True, True), (96, 4096, True, True), (64, 4096, True, False), (128, None, True, False),
     (128, 4096, False, False), (256, 4096, True, False)],
)  # fmt: skip
def test_flex_backward_says_its_template_spills_at_head_dims_65_to_128(d, window, backward, fires):
    """The flex probe's compiles (torch 2.11): the masked backward at d = 128 keeps 255 registers
    a thread and a stack, at 64 none; without a mask (no mask_mod) it does not spill either; d 96
    runs its rounding, 128. The caveat quotes the records' figures."""
    w = Workload(n=16384, d=d, heads=32, kv_heads=8, dtype="bf16", causal=window is not None, window=window)
    c = compare(w, H200, impl="flex", backward=backward)
    lines = [t for t, cls in zip(c.caveats, c.caveat_classes) if cls == "flex_spills"]
    assert len(lines) == int(fires)
    if fires:
        entry = validated.validated()["flex_spills"]
        assert f"{entry['count']} kernels" in lines[0] and "spills registers" in lines[0]


def test_flex_backward_says_where_its_schedule_is_not_replayed(monkeypatch):
    """Past SCHEDULE_EVENTS block reads a K/V head the Q programs' re-reads are not counted, and
    compare says its bytes are a lower bound; 16k causal tokens at a group of 4 read 2 · 4 ·
    (128 · 129 / 2) = 66,048 blocks."""
    from memmodel.traffic import flex

    w = Workload(n=16384, d=128, heads=32, kv_heads=8, dtype="bf16", causal=True)
    assert flex.schedule_reads(16384, 16384, (True, None, None), 4, flex.backward_config("bf16", 128)) == 66_048

    def said() -> list[str]:
        return [t for t in compare(w, H200, impl="flex", backward=True).caveats if "not replayed" in t]

    assert said() == []
    monkeypatch.setattr(flex, "SCHEDULE_EVENTS", 66_047)
    assert len(said()) == 1 and "lower bound" in said()[0]
    assert [t for t in compare(w, H200, impl="flex").caveats if "not replayed" in t] == []  # forward alone


@pytest.mark.parametrize(
    ("shape", "impl", "fires"),
    [
        (dict(n=2048, seq_lens=(512,) * 4, causal=True), "sdpa-flash", True),  # a packed row: cu_seqlens
        (dict(n=1000, batch=16, causal=True), "sdpa-flash", True),  # not a multiple of the tiles
        (dict(n=1024, batch=16, causal=True), "sdpa-flash", False),  # the even kernel
        (dict(n=16384, seq_lens=(8192, 8192), causal=True), "sdpa-flash", False),  # rows past 4096 tokens
        (dict(n=2048, seq_lens=(512,) * 4, causal=False), "sdpa-flash", False),  # no causal masking
        (dict(n=1000, batch=16, causal=True), "sdpa-cudnn", False),  # not FlashAttention-2's code
    ],
)
def test_the_uneven_fa2_forward_says_so(shape, impl, fires):
    """FlashAttention-2's causal forward whose launch is not Is_even_MN: the caveat names the
    kernel and quotes the records' errors where it fires."""
    w = Workload(d=64, heads=16, dtype="bf16", **shape)
    c = compare(w, H200, impl=impl)
    lines = [t for t, cls in zip(c.caveats, c.caveat_classes) if cls == "fa2_uneven"]
    assert len(lines) == int(fires)
    if fires:
        entry = validated.validated()["fa2_uneven"]
        assert "Is_even_MN false" in lines[0] and f"{entry['count']} kernels" in lines[0]


@pytest.mark.parametrize(
    ("n", "window", "d", "impl", "fires"),
    [
        (65536, 16384, 128, "sdpa-flash", True),  # (264 · 128 + 16384) · 512 B = 25.7 MB ≥ 23.6 MB
        (65536, 8192, 128, "sdpa-flash", False),  # (33792 + 8192) · 512 B = 21.5 MB
        (65536, 32768, 64, "sdpa-flash", False),  # capped at the head: 65536 · 256 B = 16.8 MB
        (16384, 16384, 128, "sdpa-flash", False),  # the head's 16384 keys: 8.4 MB
        (65536, 16384, 128, "flex", False),  # not FlashAttention-2's local kernel
    ],
)
def test_a_long_windows_band_in_the_l2s_knee_says_its_bytes_are_a_lower_bound(n, window, d, impl, fires):
    """The window probe (validation/h200/final/h200-window-reuse-probe): one head's CTAs in flight
    (264 at d 128, 128 query rows each) and the window before them hold the K/V band; from the
    reuse curve's first rising point (375 per mille of 60 MiB = 23.6 MB) the forward's requests the
    window rule counts as hits partly miss. The caveat quotes the records' figures."""
    w = Workload(n=n, d=d, heads=4, dtype="bf16", causal=True, window=window)
    c = compare(w, H200, impl=impl)
    lines = [t for t, cls in zip(c.caveats, c.caveat_classes) if cls == "window_band"]
    assert len(lines) == int(fires)
    if fires:
        entry = validated.validated()["window_band"]
        assert f"{entry['count']} kernels" in lines[0] and "lower bound" in lines[0]
        assert "(24 MiB)" in lines[0]  # 25.7 MB = 24.5 MiB


@pytest.mark.parametrize(
    ("gpu", "d", "d_v", "causal", "backward", "impl", "fires"),
    [
        ("a100", 192, 128, False, True, "sdpa-cudnn", True),  # MLA prefill's dims: interpolated between 128 and 256
        ("a100", 192, 192, True, True, "sdpa-cudnn", True),  # either mask
        ("h200", 192, 128, False, True, "sdpa-cudnn", False),  # measured there (the d-192 probe)
        ("h200", 160, 160, True, True, "sdpa-cudnn", False),  # runs the d-192 kernel, measured
        ("a100", 128, 128, False, True, "sdpa-cudnn", False),  # a calibrated head dim
        ("a100", 192, 128, False, False, "sdpa-cudnn", False),  # the forward
        ("a100", 192, 192, False, True, "sdpa-flash", False),  # not cuDNN's kernel
    ],
)
def test_cudnns_backward_at_an_interpolated_head_dim_says_so(gpu, d, d_v, causal, backward, impl, fires):
    """cuDNN's backward at a head dim its profile did not measure (the A100's curve, from FlashAttention-2's
    kernels by the same-instruction rule, has 64, 96, 128 and 256; the H200's has 192 since the d-192 probe)
    says its efficiency is interpolated and names the head dims."""
    w = Workload(n=2048, batch=2, heads=16, d=d, d_v=d_v, dtype="bf16", causal=causal)
    c = compare(w, load_profile(gpu), impl=impl, backward=backward)
    lines = [t for t, cls in zip(c.caveats, c.caveat_classes) if cls == "cudnn_backward_interpolated"]
    assert len(lines) == int(fires)
    if fires:
        assert "64, 96, 128, 256" in lines[0] and "d 192" in lines[0]
