#!/usr/bin/env bash
# FlashAttention-3 on the lent H200: calibrate --impl fa3 (the reference shapes) and the fa3
# validation cases, in one device call, from the repository root. Needs flash-attn-4's two packed
# parts (pack-flash-attn-4): PART_A (kept from the first of two back-to-back calls) and PART_B
# (carried by this one). Results in $OUT; the validation record is written, not printed.
set -u
mkdir -p /tmp/site
if [ ! -d /tmp/site/flash_attn ]; then
  cat "${PART_A:-.fa4keep/part.aa}" "${PART_B:-.fa4b/part.ab}" | xz -d | tar -C /tmp/site -x || { echo "unpack failed"; exit 3; }
fi
export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages PYTHONUNBUFFERED=1
pip install -q --no-build-isolation --no-deps -e . > "$OUT/pip.log" 2>&1 || echo "pip install failed (see pip.log)"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
python3 -c "import importlib.metadata as m, torch; print('flash-attn-4', m.version('flash-attn-4'), 'cutlass-dsl', m.version('nvidia-cutlass-dsl'), 'torch', torch.__version__)"
timeout "${CAL_S:-260}" python3 -m memmodel calibrate --impl fa3 --format json 2> "$OUT/calibrate-fa3.log" | gzip -9n > "$OUT/calibrate-fa3.json.gz"
echo "calibrate exit ${PIPESTATUS[0]}"
timeout "${VAL_S:-280}" python3 -m memmodel validate --gpu h200 --cases validation/cases/h200-fa3-check.txt \
  --output "$OUT/h200-fa3-check.json.gz" --format json > /dev/null 2> "$OUT/validate.log"
echo "validate exit $?"
python3 - <<'PY'
import gzip, json, os
out = os.environ["OUT"]
try:
    r = json.load(gzip.open(f"{out}/calibrate-fa3.json.gz"))
except Exception as exc:
    print("no calibration JSON:", exc)
else:
    m = r["measurements"]
    for p in (m.get("sdpa") or {}).get("points", []):
        print("fwd", p["shape"], p.get("time_s"), p.get("error", ""))
    for p in ((m.get("backward") or {}).get("sdpa_backward") or {}).get("points", []):
        print("bwd", p["shape"], (p.get("backward") or {}).get("time_s"), p.get("error", ""))
    print("errors", r.get("errors"))
PY
tail -c 1500 "$OUT/validate.log"
ls -la "$OUT"
