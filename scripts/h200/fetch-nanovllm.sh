#!/usr/bin/env bash
# Here (with network): what Nano-vLLM VoxCPM needs on the H200 and the machine lacks, into
# .whl/nanovllm: nano-vllm-voxcpm (pure Python), flash-attn's sdist (PyPI has no wheel; built there
# by build-flashattn.sh), einops and xxhash. The voxcpm set (fetch-wheels.sh voxcpm) writes the
# random-weight checkpoint, so carry it too.
set -euo pipefail
cd "$(dirname "$0")/../.."
d=.whl/nanovllm; mkdir -p "$d"
# pip reads the sdist's metadata by running its setup.py, which imports torch: use the venv's (CPU)
# torch and skip the CUDA build check there (2026-12-03: in an isolated build env it failed)
FLASH_ATTENTION_SKIP_CUDA_BUILD=TRUE .venv/bin/pip download -q --no-deps --no-binary :all: --no-build-isolation \
  flash_attn==2.8.3.post2 -d "$d"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 -d "$d" \
  nano-vllm-voxcpm==2.0.5 einops==0.8.2 xxhash==4.1.0
du -sh "$d"
