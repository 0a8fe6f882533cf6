#!/usr/bin/env bash
# On the device, nothing carried but .whl/base: doctor (and doctor --python), the shipped gate workflow
# on the GPU (scripts/h200/gate-workflow.sh), then the cuda profile's hardware claims and qwen3-0.6b
# decode claims on transformers (no vLLM here). Everything under $OUT.
set -u
. scripts/h200/install.sh > "$OUT/install.txt" 2>&1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
{ python3 -m pytest_voiceperf.cli doctor; echo "exit $?"; } > "$OUT/doctor.txt" 2>&1
{ python3 -m pytest_voiceperf.cli doctor --python "transformers=$(command -v python3)"; echo "exit $?"; } \
  > "$OUT/doctor-python.txt" 2>&1
t0=$(date +%s)
bash scripts/h200/gate-workflow.sh "$OUT/gate-workflow"
echo "gate workflow wall_s=$(( $(date +%s) - t0 ))"
timeout "${PROFILE_LIMIT:-300}" bash scripts/h200/run-claims.sh cuda-tf --voiceperf-profile cuda \
  --voiceperf-claims claims/hw --voiceperf-claims claims/llm -k "hw- or (qwen3-0.6b and decode and not fp8)" \
  > /dev/null 2>&1
echo "profile rc=$?"; tail -n 30 "$OUT/cuda-tf.log"
