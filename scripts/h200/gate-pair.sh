#!/usr/bin/env bash
# (written 2026-12-07; not yet run: no device was lent that session)
# On the device, nothing carried but .whl/base: the same claims twice on one GPU, the second gated
# against the first (--voiceperf-save / --voiceperf-baseline), then `voiceperf compare --fail` over
# the two results files. The cuda profile's hardware claims and qwen3-0.6b decode on transformers.
# What a same-code pair gives on the GPU: exit 0 and how much of it the gate decided. Under $OUT.
set -u
. scripts/h200/install.sh > "$OUT/install.txt" 2>&1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
sel=(--voiceperf-profile cuda --voiceperf-claims claims/hw --voiceperf-claims claims/llm
     -k "hw- or (qwen3-0.6b and decode and not fp8)")
run() {  # NAME, then pytest arguments
  local name=$1 t0=$(date +%s); shift
  timeout "${RUN_LIMIT:-270}" python3 -m pytest -p pytest_voiceperf.plugin -p no:cacheprovider --voiceperf --voiceperf-device cuda \
    "${sel[@]}" --voiceperf-json "$OUT/$name.json" -rA "$@" > "$OUT/$name.log" 2>&1
  echo "$name rc=$? wall_s=$(( $(date +%s) - t0 ))" | tee -a "$OUT/summary.txt"
}
run main --voiceperf-save main
run pr --voiceperf-baseline main
python3 -m pytest_voiceperf.cli compare "$OUT/main.json" "$OUT/pr.json" --fail > "$OUT/compare.txt" 2>&1
echo "compare rc=$?" | tee -a "$OUT/summary.txt"
python3 -m pytest_voiceperf.cli compare "$OUT/main.json" "$OUT/pr.json" --format markdown > "$OUT/compare.md" 2>&1
grep -E "guarded|regressed,|what changed" "$OUT/pr.log" "$OUT/compare.txt" | tee -a "$OUT/summary.txt"
