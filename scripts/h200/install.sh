#!/usr/bin/env bash
# On the device: install the carried wheel sets into /tmp/site (and vllm from /tmp/parts when all
# parts arrived). Source it: `. scripts/h200/install.sh`.
set -u
mkdir -p /tmp/site
for set in base nemo voxcpm; do
  [ -d ".whl/$set" ] && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
      --upgrade --target /tmp/site .whl/$set/*.whl 2>&1 | grep -v "already exists" | tail -3
done
if ls /tmp/parts/vllm.tar.* >/dev/null 2>&1 && [ ! -d /tmp/vsite/vllm ]; then
  mkdir -p /tmp/vwhl /tmp/vsite
  cat /tmp/parts/vllm.tar.* | tar -C /tmp/vwhl -xf - && \
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/vsite \
      /tmp/vwhl/vllm/*.whl 2>&1 | tail -3
fi
export PYTHONPATH="$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
[ -d /tmp/vsite/vllm ] && export PYTHONPATH="$PYTHONPATH:/tmp/vsite"
# voxcpm imports torchaudio at the top; the image's torchaudio matches its torch, keep it
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python3 -c "import pytest_voiceperf, pydantic, simpleeval; print('voiceperf ok')"
