#!/usr/bin/env bash
# On the H200 (one call per run): the reproducibility check of issue "reproducible verdicts": the hw
# claims and the qwen3-0.6b / qwen3-1.7b decode and batch claims (bf16), one separate pytest run per
# call. Results stay in /tmp/repro (kept while the machine is warm) and are copied to $OUT; a run cut
# by its time limit (SIGINT -> NAME.json.partial) is finished by calling again with the same NAME.
# usage: scripts/h200/repro.sh NAME SECONDS   (K=EXPR and CLAIMS="a.yaml b" narrow the set)
set -uo pipefail
name=$1; secs=$2
. scripts/h200/install.sh >/tmp/install.log 2>&1
tail -4 /tmp/install.log
export VLLM_CACHE_ROOT=/tmp/vllm-cache TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-cache VOICEPERF_CACHE=/tmp/voiceperf-cache
export PYTHONUNBUFFERED=1 VLLM_LOGGING_LEVEL=WARNING TOKENIZERS_PARALLELISM=false
mkdir -p /tmp/repro
resume=()
[ -e "/tmp/repro/$name.json.partial" ] && resume=(--voiceperf-resume "/tmp/repro/$name.json.partial")
claims=()
for c in ${CLAIMS:-claims/hw claims/llm/llm-decode-bandwidth-fraction.yaml claims/llm/llm-decode-roofline.yaml \
         claims/llm/llm-decode-timing-agrees.yaml claims/llm/llm-batch16-slowdown.yaml \
         claims/llm/llm-batch16-compute-share.yaml}; do claims+=(--voiceperf-claims "$c"); done
t0=$(date +%s)
timeout -s INT -k 20 "$secs" python3 -m pytest -p pytest_voiceperf.plugin -p no:cacheprovider --voiceperf \
  --voiceperf-device cuda "${claims[@]}" -k "${K:-hw- or ((qwen3-0.6b or qwen3-1.7b) and not fp8)}" \
  --voiceperf-json "/tmp/repro/$name.json" "${resume[@]}" -v > "/tmp/repro/$name.log" 2>&1
echo "== $name rc=$? wall_s=$(( $(date +%s) - t0 ))" | tee -a "/tmp/repro/$name.log"
grep -E "PASSED|FAILED|UNMEASURED|INCONCLUSIVE|DISTURBED|XFAIL|XPASS|ERROR" "/tmp/repro/$name.log" | grep "::" | cut -c1-150
grep -E "^(PASS|FAIL|UNMEAS|XFAIL|XPASS|ERROR) |interval|bimodal|->" "/tmp/repro/$name.log" | cut -c1-140 | tail -60
tail -2 "/tmp/repro/$name.log"
cp /tmp/repro/"$name".* "$OUT"/ 2>/dev/null
ls -la "$OUT"
