#!/usr/bin/env bash
# Download (here, with network) the cp312 wheels the H200 machine lacks, into .whl/<set>/.
# Sets: base (the plugin's own needs), nemo, voxcpm, vllm. Lists: scripts/h200/wheels-*.txt
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
for set in "$@"; do
  mkdir -p ".whl/$set"
  grep -v '^#' "scripts/h200/wheels-$set.txt" | grep . | while read -r f; do
    [ -e ".whl/$set/$f" ] && continue
    name=$(echo "$f" | cut -d- -f1); ver=$(echo "$f" | cut -d- -f2)
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_26_x86_64 \
      --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
      --platform manylinux_2_31_x86_64 --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 \
      -d ".whl/$set" "$name==$ver" 2>&1 | grep -v "is ignored" || true
    # a pure-Python wheel PyPI does not have (antlr4 4.9.3, only an sdist there): build it here
    case "$f" in *-py3-none-any.whl) [ -e ".whl/$set/$f" ] || .venv/bin/pip wheel -q --no-deps \
      "$(echo "$name" | tr _ -)==$ver" -w ".whl/$set" 2>&1 | grep -v "is ignored" || true;; esac
  done
  du -sh ".whl/$set"
done
