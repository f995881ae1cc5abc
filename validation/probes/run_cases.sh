#!/usr/bin/env bash
# Run on the GPU machine (device tool), from the repository root:
#   bash validation/probes/run_cases.sh validation/cases/h200-probe.txt
# Writes env.txt, time.jsonl, ncu.csv, ncu.jsonl under $OUT (or ./out).
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
CASES=$1
export PYTHONUNBUFFERED=1
{ nvidia-smi; python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__, torch.cuda.get_device_name(), torch.cuda.get_device_properties(0))'; ncu --version; } > "$OUT/env.txt" 2>&1
MEMMODEL_CASES_FILE=$CASES timeout ${TIME_LIMIT:-200} python3 -m memmodel.gpu.run time "$OUT/time.jsonl" 2> "$OUT/time.log"
echo "time rc=$?"
MEMMODEL_CASES_FILE=$CASES timeout ${NCU_LIMIT:-300} $(python3 -c 'from memmodel.gpu.ncu import command; print(" ".join(command([])))') \
  python3 -m memmodel.gpu.run ncu "$OUT/ncu.jsonl" > "$OUT/ncu.csv" 2> "$OUT/ncu.log"
echo "ncu rc=$?"
tail -n 5 "$OUT/time.log" "$OUT/ncu.log"
