#!/usr/bin/env bash
# Here: pack the vllm wheel set into parts of at most 56 MiB (one device call carries <= 64 MiB).
set -euo pipefail
cd "$(dirname "$0")/../.."
rm -rf .whl/parts && mkdir -p .whl/parts
tar -C .whl -cf - vllm | split -b 56M -d - .whl/parts/vllm.tar.
ls -la .whl/parts
