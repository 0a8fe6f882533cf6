#!/usr/bin/env bash
# Here: carry the vllm wheel set (.whl/vllm, fetch-wheels.sh vllm) itself, so that the device installs
# wheels with pip under requirements/gpu-cp312.txt. A wheel is a zip of files; zipped files do not
# compress further, so each wheel is unpacked and the trees go as one xz tarball split in 55 MiB parts
# (a device call carries <= 64 MiB). repack-wheels.py on the device zips each tree back into a wheel
# of the same name and the same files (pip checks every file against the wheel's RECORD hashes).
set -euo pipefail
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
mkdir -p "$tmp/wtree"
for w in .whl/vllm/*.whl; do
  python3 -m zipfile -e "$w" "$tmp/wtree/$(basename "$w")"
done
rm -rf .whl/wparts && mkdir -p .whl/wparts
tar -C "$tmp" -cf - wtree | xz -7 -T0 | split -b 55M -d - .whl/wparts/wtree.tar.xz.
rm -rf "$tmp"
ls -la .whl/wparts
