#!/usr/bin/env bash
# On the device (H200), after the wheels arrived: run claim folders on CUDA and keep the results.
# usage: scripts/h200/run-claims.sh NAME [pytest args...]   -> $OUT/NAME.json, $OUT/NAME.log
set -uo pipefail
name=$1; shift
. scripts/h200/install.sh >/dev/null
export PYTHONUNBUFFERED=1 VLLM_LOGGING_LEVEL=WARNING TOKENIZERS_PARALLELISM=false
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
start=$(date +%s)
python3 -m pytest -p pytest_voiceperf.plugin -p no:cacheprovider --voiceperf --voiceperf-device cuda \
  --voiceperf-json "$OUT/$name.json" -v -rA "$@" 2>&1 | tee "$OUT/$name.log" | grep -vE "^\s*$" | tail -150
echo "wall_s=$(( $(date +%s) - start ))" | tee -a "$OUT/$name.log"
