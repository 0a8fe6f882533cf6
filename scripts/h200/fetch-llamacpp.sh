#!/usr/bin/env bash
# Here (with network): llama-cpp-python's sdist for a CUDA build on the H200, slimmed under the
# 64 MiB a device call carries (llama.cpp's vocab GGUFs, docs and benches dropped: the build reads
# none of them), with the pure-Python build backend and the runtime wheels the machine lacks.
set -euo pipefail
cd "$(dirname "$0")/../.."
ver=$(grep -i '^llama_cpp_python==' requirements/lock.txt | cut -d= -f3)
d=.whl/llamacpp; mkdir -p "$d"; tmp=$(mktemp -d)
python3 -m pip download -q --no-deps --no-binary :all: "llama_cpp_python==$ver" -d "$tmp"
tar -C "$tmp" -xzf "$tmp"/llama_cpp_python-"$ver".tar.gz
rm -rf "$tmp/llama_cpp_python-$ver"/vendor/llama.cpp/{models,docs,benches,media} "$tmp/llama_cpp_python-$ver"/docs
tar -C "$tmp" -czf "$d/llama_cpp_python-$ver-slim.tar.gz" "llama_cpp_python-$ver"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 -d "$d" \
  scikit_build_core pathspec==1.1.1 packaging==24.2 diskcache==5.6.3 gguf==0.19.0 Jinja2==3.1.6 MarkupSafe==3.0.4
rm -rf "$tmp"; du -sh "$d"
