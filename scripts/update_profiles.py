"""Regenerate the profiles memmodel builds from a calibration run, with the current model.

A calibration's implementation figures (efficiency, CTA overhead, diagonal-block cost) are
ratios of the model's time to the measured time on reference shapes, so they change when
the model does. This script rebuilds, from the run's JSON (what ``memmodel calibrate
--format json`` printed on the GPU), every profile made of it:

* ``memmodel/hardware/profiles/h200.yaml``, the bundled H200 profile (name ``h200``);
* ``validation/h200/h200-calibrated.yaml``, the same calibration under its own name,

with the implementations calibrated on their own merged in (:data:`IMPL_RUNS`: FlashAttention-3,
``memmodel calibrate --impl fa3 --format json | gzip -9n > validation/h200/fa3/calibrate-fa3.json.gz``),

each with ``validation/h200/h200-datasheet.yaml`` as ``--base``, and with the NCCL curves of
``validation/h200x2/calibrate-nccl.json`` (``memmodel calibrate --gpus 2 --format json`` on the
two-GPU machine) in its ``interconnect`` section where that file exists (the figures calibrate does
not measure: the datasheet HBM bandwidth, shared-memory latency, the L2's effective
capacity measured with Nsight Compute). On an H200 the same files come from::

    python3 -m memmodel calibrate --base validation/h200/h200-datasheet.yaml --name h200 \\
        --output memmodel/hardware/profiles/h200.yaml --format json | gzip -9n > validation/h200/calibrate.json.gz

``--check`` exits 1 if a file is stale (the test suite runs it).
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from memmodel.calibration.profile import profile_yaml  # noqa: E402
from memmodel.fileio import read_json  # noqa: E402
from memmodel.hardware import load_file  # noqa: E402

RUN = ROOT / "validation" / "h200" / "calibrate.json.gz"
BASE = ROOT / "validation" / "h200" / "h200-datasheet.yaml"
TARGETS = {
    ROOT / "memmodel" / "hardware" / "profiles" / "h200.yaml": "h200",
    ROOT / "validation" / "h200" / "h200-calibrated.yaml": None,
}


NCCL = ROOT / "validation" / "h200x2" / "calibrate-nccl.json"


L2_REUSE = ROOT / "validation" / "h200" / "l2-reuse" / "l2_reuse.json.gz"

#: implementations calibrated on their own (``memmodel calibrate --impl NAME --format json``),
#: merged into the run above before the profile is fitted, their figures citing that run
IMPL_RUNS = (ROOT / "validation" / "h200" / "fa3" / "calibrate-fa3.json.gz",)


def with_links(text: str) -> str:
    """``text`` (a profile's YAML) with the measured NCCL curves and the L2 reuse curve, where
    they were measured."""
    if not NCCL.exists() and not L2_REUSE.exists():
        return text
    import yaml

    from memmodel.calibration import l2_reuse_fit
    from memmodel.calibration.interconnect import apply

    header = "".join(line + "\n" for line in text.splitlines() if line.startswith("#"))
    data = yaml.safe_load(text)
    if L2_REUSE.exists():
        data = l2_reuse_fit.apply(data, read_json(L2_REUSE))
    from memmodel.calibration import causal_reuse

    for impl, fits in causal_reuse.FITS.items():
        for fit in fits:
            paths = [ROOT / r for r in fit.records() if (ROOT / r).exists()]
            if paths:
                record = causal_reuse.merged(read_json(path) for path in paths)
                data = causal_reuse.apply(data, record, impl, fit)
    others = [read_json(ROOT / r) for r in causal_reuse.GQA_OTHERS_RECORDS if (ROOT / r).exists()]
    if others:
        data = causal_reuse.apply_gqa_others(data, others)
    from memmodel.calibration import wave_drift

    records = [read_json(ROOT / r) for r in wave_drift.RECORDS if (ROOT / r).exists()]
    if records:
        data = wave_drift.apply(data, records)
    from memmodel.calibration import fa2_uneven

    if (ROOT / fa2_uneven.RECORD).exists():  # FlashAttention-2's uneven causal forward, from its own probe
        data = fa2_uneven.apply(data, read_json(ROOT / fa2_uneven.RECORD))
    from memmodel.calibration import column_sums

    if (ROOT / column_sums.RECORD).exists():  # ATen's column reduction (bias gradients), from its own probe
        data = column_sums.apply(data, ROOT)
    from memmodel.calibration import fa2_spills

    if (ROOT / fa2_spills.RECORD).exists():  # FlashAttention-2's forward spills, from its own probe
        data = fa2_spills.apply(data, ROOT)
    from memmodel.calibration import library_host

    if (ROOT / library_host.RECORD).exists():  # FlashInfer's wrappers' host time a call, from their own probe
        data = library_host.apply(data, ROOT)
    from memmodel.calibration import kernel_costs

    for figure, paths in kernel_costs.RECORDS.items():
        records = [read_json(ROOT / r) for r in paths if (ROOT / r).exists()]
        if records:
            data = kernel_costs.apply(data, records, figure)
    from memmodel.calibration import serving

    if (ROOT / serving.RECORD).exists():  # the serving kernels' own figures, fitted on the profile as built
        lines = [json.loads(line) for line in gzip.open(ROOT / serving.RECORD, "rt") if line.strip()]
        env = {k: v for line in lines if line.get("section") == "env" for k, v in line.items()}
        data = serving.apply(data, lines, env)
    if (ROOT / serving.FLEX_RECORD).exists():  # FlexAttention's decoding kernel, from its own probe
        lines = [json.loads(line) for line in gzip.open(ROOT / serving.FLEX_RECORD, "rt") if line.strip()]
        paged_record = ROOT / serving.FLEX_PAGED_RECORD
        paged = json.load(gzip.open(paged_record, "rt")) if paged_record.exists() else None
        many_record = ROOT / serving.FLEX_OCCUPANCY_RECORD
        many = json.load(gzip.open(many_record, "rt")) if many_record.exists() else None
        data = serving.apply_flex(data, lines, paged, many)
    from memmodel.calibration import flex_prefill

    flex_reference = flex_prefill.load(ROOT)
    if flex_reference is not None:  # FlexAttention's prefill templates, from their reference shapes
        data = flex_prefill.apply(data, flex_reference)
    from memmodel.calibration import flex_paged

    if (ROOT / flex_paged.RECORD).exists():  # flex's prefill over a paged cache, after its prefill figures
        data = flex_paged.apply(data, json.load(gzip.open(ROOT / flex_paged.RECORD, "rt")))
    from memmodel.calibration import flashinfer_fp8

    if (ROOT / flashinfer_fp8.RECORD).exists():  # FlashInfer's decode over an FP8 cache, after its own figures
        data = flashinfer_fp8.apply(data, json.load(gzip.open(ROOT / flashinfer_fp8.RECORD, "rt")))
    from memmodel.calibration import flex_template

    if (ROOT / flex_template.RECORD).exists():  # flex's forward template at a decode over a paged cache
        data = flex_template.apply(data, json.load(gzip.open(ROOT / flex_template.RECORD, "rt")))
    from memmodel.calibration import fp8_cast

    if (ROOT / fp8_cast.RECORD).exists():
        data = fp8_cast.apply(
            data, [json.loads(line) for line in gzip.open(ROOT / fp8_cast.RECORD, "rt") if line.strip()]
        )
    from memmodel.calibration import aten_paths

    if (ROOT / aten_paths.RECORD).exists():  # ATen's casts, gathers and fp32 softmax (memmodel trace)
        second = ROOT / aten_paths.RECORD_2
        data = aten_paths.apply(
            data,
            [json.loads(line) for line in gzip.open(ROOT / aten_paths.RECORD, "rt") if line.strip()],
            [json.loads(line) for line in gzip.open(second, "rt") if line.strip()] if second.exists() else None,
        )
    from memmodel.calibration import small_kernels

    if (ROOT / small_kernels.RECORD).exists():  # ATen's small kernels' floors and cuBLAS' split-K reduction
        runs = [small_kernels.RECORD, small_kernels.RECORD_3]
        data = small_kernels.apply(
            data,
            [
                json.loads(line)
                for run in runs
                if (ROOT / run).exists()
                for line in gzip.open(ROOT / run, "rt")
                if line.strip()
            ],
        )
    from memmodel.calibration import host

    if (ROOT / host.RECORD).exists():  # what issuing a call costs the host (--timing call, queued, graph)
        from memmodel.hardware.parse import parse_profile

        event = parse_profile(data, "<profile being built>").event_overhead_s or 0.0
        data = host.apply(
            data, [json.loads(line) for line in gzip.open(ROOT / host.RECORD, "rt") if line.strip()], event
        )
    from memmodel.calibration import cudnn_decode

    decode_records = cudnn_decode.load(ROOT)
    if decode_records:  # cuDNN's decode kernel's rate and fixed cost, from its probes' kernel durations
        data = cudnn_decode.apply(data, decode_records)
    from memmodel.calibration import cudnn_fp8

    fp8_lines = cudnn_fp8.load(ROOT)
    # cuDNN's fp8 forward against its bf16 one, fitted on the profile complete (its small kernels' floors too)
    if fp8_lines:
        data = cudnn_fp8.apply(data, fp8_lines)
    from memmodel.calibration import cudnn_bwd_dims

    bwd_records = cudnn_bwd_dims.load(ROOT)
    if bwd_records:  # cuDNN's backward at d 192 and with V's head dim below Q's, from its probes' kernels
        data = cudnn_bwd_dims.apply(data, bwd_records)
    if NCCL.exists():  # last: the SMs NCCL holds are fitted with the model on the profile complete
        data = apply(data, read_json(NCCL))
    return header + yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=100000, allow_unicode=True)


def with_impl_sources(text: str, parts: list[dict]) -> str:
    """``text`` (a profile's YAML) with the figures of each implementation calibrated on its own
    citing that run (:func:`memmodel.calibration.merge.cite_impl`)."""
    if not parts:
        return text
    import yaml

    from memmodel.calibration.merge import cite_impl

    header = "".join(line + "\n" for line in text.splitlines() if line.startswith("#"))
    data = yaml.safe_load(text)
    for part in parts:
        data = cite_impl(data, part)
    return header + yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=100000, allow_unicode=True)


def expected() -> dict[Path, str]:
    from memmodel.calibration.merge import merge_impl

    result = read_json(RUN)
    parts = [read_json(path) for path in IMPL_RUNS if path.exists()]
    for part in parts:
        result = merge_impl(result, part)
    base = load_file(BASE)
    return {
        path: with_impl_sources(with_links(profile_yaml(result, base=base, name=name)), parts)
        for path, name in TARGETS.items()
    }


def main(argv: list[str]) -> int:
    stale = [p for p, text in expected().items() if not p.exists() or p.read_text() != text]
    if "--check" in argv:
        for p in stale:
            print(f"{p.relative_to(ROOT)} is stale: run python scripts/update_profiles.py", file=sys.stderr)
        return 1 if stale else 0
    for p, text in expected().items():
        p.write_text(text)
    import update_profile_cache  # the parsed copies start-up reads, made of the new YAML

    return update_profile_cache.main([])


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
