#!/usr/bin/env bash
# On the device (H200), first call of a Nano-vLLM VoxCPM2 session (carry .whl/base .whl/voxcpm
# .whl/nanovllm): write the random-weight VoxCPM2 checkpoint (the plugin's cache folder) while
# flash-attn builds (build-flashattn.sh), then start the engine once and time two short requests.
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
export PYTHONPATH="$PYTHONPATH"
python3 - <<'PY' 2>&1 | grep -vE "^\s*$" | tail -30
import time, json
t = time.perf_counter()
from pytest_voiceperf import models
from pytest_voiceperf.engines.nanovllm_engine import Engine
e = Engine(model="voxcpm2", config=models.get("voxcpm2").config, device="cuda", timesteps=10)
print("start_s", round(time.perf_counter() - t, 1))
for n in (4, 24, 24):
    a, s = e._stream(n)
    print(n, "patches:", len(s), "chunks,", sum(s), "samples, first", round(a[0], 3), "s, whole", round(a[-1], 3), "s, RTF",
          round(a[-1] / (sum(s) / e.sample_rate), 3))
print(json.dumps({k: v for k, v in e.info().items() if k not in ("text",)}, default=str)[:1500])
e.close()
PY
