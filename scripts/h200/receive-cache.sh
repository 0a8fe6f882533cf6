#!/usr/bin/env bash
# On the device: unpack caches carried as .whl/cache/cache.tar.xz.NN (pack-cache.sh's parts) into
# VOICEPERF_CACHE, so this machine's engines start as a runner's with a kept cache would.
set -euo pipefail
root=${VOICEPERF_CACHE:-$HOME/.cache/pytest-voiceperf}
mkdir -p "$root"
cat .whl/cache/cache.tar.xz.* | xz -dc -T0 | tar -C "$root" -xf -
du -sh "$root"/*
