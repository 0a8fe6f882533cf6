#!/usr/bin/env bash
# Here: install the vllm wheel set (fetch-wheels.sh vllm) for cp312 into a tree, pack it as xz and
# split it into parts of at most 55 MiB (one device call carries <= 64 MiB with the checkout, which is ~6.5 MiB).
# The installed tree compresses better than the wheels (zip) and needs no pip run on the device.
set -euo pipefail
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
python3 -m pip install -q --no-deps --no-compile --no-index --target "$tmp/vsite" --python-version 3.12 \
  --implementation cp --only-binary=:all: --platform manylinux_2_28_x86_64 --platform manylinux_2_31_x86_64 \
  --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 .whl/vllm/*.whl
rm -rf "$tmp/vsite/bin"
rm -rf .whl/parts && mkdir -p .whl/parts
tar -C "$tmp" -cf - vsite | xz -7 -T0 | split -b 55M -d - .whl/parts/vsite.tar.xz.
rm -rf "$tmp"
ls -la .whl/parts
