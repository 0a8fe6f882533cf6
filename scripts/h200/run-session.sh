#!/usr/bin/env bash
# On the H200 (one call): install the carried wheels, then run claim folders on CUDA, each bounded
# by a wall-clock limit; a limit hit interrupts pytest (SIGINT), which still writes NAME.json.partial.
# usage: scripts/h200/run-session.sh "NAME:SECONDS:claims/dir[,claims/dir2]:extra pytest args" ...
# NO_VLLM=1 scripts/h200/run-session.sh ... runs the LLM claims on the transformers engine instead.
set -uo pipefail
. scripts/h200/install.sh >/tmp/install.log 2>&1
tail -7 /tmp/install.log
# compiled graphs kept while the machine is warm: a later call's engines start faster
export VLLM_CACHE_ROOT=/tmp/vllm-cache TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-cache
export PYTHONUNBUFFERED=1 VLLM_LOGGING_LEVEL=WARNING TOKENIZERS_PARALLELISM=false
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader
for spec in "$@"; do
  IFS=: read -r name secs dirs extra <<<"$spec"
  args=()
  for d in ${dirs//,/ }; do args+=(--voiceperf-claims "$d"); done
  t0=$(date +%s)
  timeout -s INT -k 20 "$secs" python3 -m pytest -p pytest_voiceperf.plugin -p no:cacheprovider --voiceperf \
    --voiceperf-device cuda "${args[@]}" --voiceperf-json "$OUT/$name.json" -v $extra > "$OUT/$name.log" 2>&1
  echo "== $name rc=$? wall_s=$(( $(date +%s) - t0 ))" | tee -a "$OUT/$name.log"
  grep -E "PASSED|FAILED|UNMEASURED|XFAIL|XPASS|ERROR" "$OUT/$name.log" | grep "::" | cut -c1-150 | tail -40
  tail -3 "$OUT/$name.log"
done
