#!/usr/bin/env bash
# On the device: install the carried wheel sets into /tmp/site (and vllm from /tmp/parts when all
# parts arrived). Source it: `. scripts/h200/install.sh`.
set -u
mkdir -p /tmp/site
for set in base nemo voxcpm; do
  [ -d ".whl/$set" ] && [ ! -e "/tmp/site/.done-$set" ] && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
      --upgrade --target /tmp/site .whl/$set/*.whl 2>&1 | grep -v "already exists" | tail -3 && touch "/tmp/site/.done-$set"
done
# vllm arrives as parts of an xz tarball of an already installed tree (prepare-parts.sh): unpack it
if ls /tmp/parts/vsite.tar.xz.* >/dev/null 2>&1 && [ ! -d /tmp/vsite/vllm ]; then
  if command -v xz >/dev/null; then
    cat /tmp/parts/vsite.tar.xz.* | xz -dc -T0 | tar -C /tmp -xf -
  else
    cat /tmp/parts/vsite.tar.xz.* | python3 -c "import lzma,sys,tarfile; tarfile.open(fileobj=lzma.open(sys.stdin.buffer),mode='r|').extractall('/tmp')"
  fi
fi
# (sourced again in one shell: drop what an earlier sourcing put on the path)
PYTHONPATH=$(printf %s "${PYTHONPATH:-}" | tr : '\n' | grep -v -x -e "$PWD" -e /tmp/site -e /tmp/vsite | paste -sd: -)
export PYTHONPATH="$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
# NO_VLLM=1 leaves vllm off the path: the LLM probes then run on the transformers engine
# (seen 2026-11-29: without this clean-up a second sourcing with NO_VLLM=1 kept vllm on the path)
[ -d /tmp/vsite/vllm ] && [ -z "${NO_VLLM:-}" ] && export PYTHONPATH="$PYTHONPATH:/tmp/vsite"
# voxcpm imports torchaudio at the top; the image's torchaudio matches its torch, keep it
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python3 -c "import pytest_voiceperf, pydantic, simpleeval; print('voiceperf ok')"
python3 - <<'PY'
import importlib.metadata as md
for n in ("vllm", "nemo_toolkit", "voxcpm", "transformers", "torch"):
    try:
        print(n, md.version(n))
    except md.PackageNotFoundError:
        print(n, "not installed")
PY
