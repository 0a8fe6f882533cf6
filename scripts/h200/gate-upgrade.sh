#!/usr/bin/env bash
# On the device, after the wheels and vLLM parts arrived: gate an upgrade for real (issue 41).
# The LLM decode and batch claims of the cuda profile, bf16 on the 0.6B and 4B (-k "not fp8"):
#   base      no baseline; saved as the baseline `base`
#   same      the same setup against it: 0 regressed, how much decided, the wall
#   plain     the same setup without a baseline, warm like `same`: the wall the gate is measured against
#   deeper    the 0.6B with 36 layers instead of 28 (a config.json folder, dummy weights): regressed, bytes
#   eager     --voiceperf-engine-arg vllm:enforce_eager=true: regressed, per-token overhead
#   option    --voiceperf-engine-arg vllm:max_num_seqs=512 (0.6B): listed as changed, nothing slower
# Everything lands in /tmp/keep/gate (NAME.json, NAME.log, NAME.md: `voiceperf compare NAME.json --format markdown`).
set -uo pipefail
. scripts/h200/install.sh >/dev/null
export PYTHONUNBUFFERED=1 VLLM_LOGGING_LEVEL=WARNING TOKENIZERS_PARALLELISM=false
export VOICEPERF_CACHE=${VOICEPERF_CACHE:-/tmp/vpcache}
# NO_VLLM=1 (install.sh): the LLM probes run on the transformers engine
out=/tmp/keep/gate
mkdir -p "$out" /tmp/models/qwen3-0.6b-36l
rm -rf .voiceperf
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
K=${GATE_K:-0.6b and not fp8}  # which cases (pytest -k)
claims=()
for f in claims/llm/llm-decode-*.yaml claims/llm/llm-batch*.yaml; do claims+=(--voiceperf-claims "$f"); done
python3 -c "
import json; from pytest_voiceperf import models
json.dump(dict(models.get('qwen3-0.6b').config, num_hidden_layers=36), open('/tmp/models/qwen3-0.6b-36l/config.json', 'w'))"

runs=" ${GATE_RUNS:-base same eager deeper option plain} "  # which of the runs below
run() {
  local name=$1; shift
  case "$runs" in *" $name "*) ;; *) return;; esac
  local t0; t0=$(date +%s)
  echo "== $name: $*"
  python3 -m pytest -p pytest_voiceperf.plugin -p no:cacheprovider --voiceperf --voiceperf-device cuda \
    --voiceperf-json "$out/$name.json" -v -rA "${claims[@]}" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  echo "rc=$rc wall_s=$(( $(date +%s) - t0 ))" | tee -a "$out/$name.log"
  python3 -m pytest_voiceperf.cli compare "$out/$name.json" --format markdown > "$out/$name.md" 2>&1
  grep -E "^(REGRESSED|IMPROVED|INCONCLUSIVE|what changed|guarded|[0-9]+ regressed)" "$out/$name.log" | cut -c1-400
}
run base -k "$K" --voiceperf-save base
run same -k "$K" --voiceperf-baseline base
run eager -k "$K" --voiceperf-baseline base --voiceperf-engine-arg vllm:enforce_eager=true
run deeper -k "$K" --voiceperf-baseline base --voiceperf-model qwen3-0.6b=/tmp/models/qwen3-0.6b-36l
run option -k "$K" --voiceperf-baseline base --voiceperf-engine-arg vllm:max_num_seqs=512
run plain -k "$K"
echo "== all done"
