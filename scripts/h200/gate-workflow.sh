#!/usr/bin/env bash
# On the device: the shipped gate workflow (examples/ci/voiceperf-gate.sh) on the GPU, run as a CI job
# runs it, in a team's repository made of examples/: main saves the baseline, an unchanged pull request,
# a pull request with the deeper model. The transformers engine on cuda (nothing carried but .whl/base).
# usage (after `. scripts/h200/install.sh`): bash scripts/h200/gate-workflow.sh OUTDIR
set -u
root=$PWD
out=${1:-/tmp/keep/gate-workflow}
mkdir -p "$out"
repo=/tmp/gwf
rm -rf "$repo" && mkdir -p "$repo/claims"
cp examples/claims/gate-decode.yaml "$repo/claims/"
cp -r examples/models "$repo/models"
cd "$repo" || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/gpu.txt"
job() {
  local name=$1 branch=$2 model=$3 t0 rc
  t0=$(date +%s)
  VOICEPERF_BRANCH=$branch VOICEPERF_PYTHON=python3 VOICEPERF_OUT="vo-$name" \
    bash "$root/examples/ci/voiceperf-gate.sh" -p pytest_voiceperf.plugin -p no:cacheprovider \
    --voiceperf-model "team-llm=models/$model" > "$out/$name.log" 2>&1
  rc=$?
  echo "$name branch=$branch model=$model rc=$rc wall_s=$(( $(date +%s) - t0 ))" >> "$out/summary.txt"
  mkdir -p "$out/vo-$name" && cp "vo-$name"/*.md "vo-$name"/*.json "$out/vo-$name/" 2>/dev/null
}
job main main team-llm
job same feature team-llm
job deeper feature team-llm-deeper
find .voiceperf -name "*.json" -exec cp {} "$out/" \; 2>/dev/null
cat "$out/summary.txt"
