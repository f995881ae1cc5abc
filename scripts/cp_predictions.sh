#!/bin/sh
# Regenerate the context-parallel validation's predictions (validation/h200x2/cp-predictions.txt)
# with the bundled h200 profile, e.g. after its NCCL curves changed (scripts/update_profiles.py).
set -e
cd "$(dirname "$0")/.."
{
  echo "# Predicted before measuring, with the bundled profile h200. Command:"
  echo "#   sh scripts/cp_predictions.sh  (python3 -m memmodel validate --gpus 2 --cases validation/cases/h200x2-cp.txt --predict --gpu h200)"
  python3 -m memmodel validate --gpus 2 --cases validation/cases/h200x2-cp.txt --predict --gpu h200
} > validation/h200x2/cp-predictions.txt
