#!/usr/bin/env bash
# On the device: send the engines' build caches back (compile caches are what a runner keeps between
# jobs; the model folders, random weights and GGUF files, are rebuilt from their configs and stay).
# usage: scripts/h200/pack-cache.sh [MAX_MIB]  -> $OUT/cache.tar.xz.NN (15 MiB parts), or nothing when
# the packed caches exceed MAX_MIB (default 44: what comes back beside the results files)
set -uo pipefail
root=${VOICEPERF_CACHE:-$HOME/.cache/pytest-voiceperf}
max=${1:-44}
du -sh "$root"/* 2>/dev/null
tar -C "$root" --exclude=./models -cf - . | xz -6 -T0 > /tmp/cache.tar.xz
size=$(( $(stat -c %s /tmp/cache.tar.xz) / 1048576 ))
echo "packed caches: ${size} MiB"
if [ "$size" -le "$max" ]; then
  split -b 15M -d /tmp/cache.tar.xz "$OUT/cache.tar.xz."
else
  echo "over ${max} MiB: not sent back"
fi
