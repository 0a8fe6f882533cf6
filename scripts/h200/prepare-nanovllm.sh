#!/usr/bin/env bash
# On the device (H200), first call of a Nano-vLLM VoxCPM2 session (carry .whl/base .whl/voxcpm
# .whl/nanovllm): write the random-weight VoxCPM2 checkpoint (the plugin's cache folder) while
# flash-attn builds (build-flashattn.sh). Then: scripts/h200/run-claims.sh NAME --voiceperf-claims claims/tts -k nanovllm
set -uo pipefail
. scripts/h200/install.sh >/dev/null
start=$(date +%s)
# llama-cpp-python's CUDA build alongside when its sdist was carried (build-llamacpp.sh; nothing here is timed)
lc=""; [ -d .whl/llamacpp ] && { bash scripts/h200/build-llamacpp.sh > /tmp/lc.log 2>&1 & lc=$!; }
python3 - > /tmp/ckpt.log 2>&1 <<'PY' &
import time
from pytest_voiceperf import models
from pytest_voiceperf.engines.nanovllm_engine import checkpoint_dir, write_checkpoint
cfg = models.get("voxcpm2").config
t = time.perf_counter()
print(checkpoint_dir(cfg), write_checkpoint(checkpoint_dir(cfg), cfg, device="cuda"), round(time.perf_counter() - t, 1), "s")
PY
ck=$!
bash scripts/h200/build-flashattn.sh; rc=$?
wait $ck; echo "checkpoint rc=$? after $(( $(date +%s) - start )) s"; tail -3 /tmp/ckpt.log
[ -n "$lc" ] && { wait $lc; echo "llama-cpp-python build rc=$? after $(( $(date +%s) - start )) s"; tail -4 /tmp/lc.log; }
[ $rc -eq 0 ] || exit $rc
# the engine itself is tried by run-claims.sh (Nano-vLLM spawns its server, which re-imports __main__:
# a `python3 -` smoke test here could not start it; the plugin's worker runs as a module and can)
