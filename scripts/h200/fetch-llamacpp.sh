#!/usr/bin/env bash
# Here (with network): llama-cpp-python's sdist for a CUDA build on the H200, slimmed under the
# 64 MiB a device call carries (5 MB: what the build does not read is dropped), with the pure-Python
# build backend and the runtime wheels the machine lacks.
set -euo pipefail
cd "$(dirname "$0")/../.."
ver=$(grep -i '^llama_cpp_python==' requirements/lock.txt | cut -d= -f3)
d=.whl/llamacpp; mkdir -p "$d"; tmp=$(mktemp -d)
python3 -m pip download -q --no-deps --no-binary :all: "llama_cpp_python==$ver" -d "$tmp"
tar -C "$tmp" -xzf "$tmp"/llama_cpp_python-"$ver".tar.gz
# the sdist's .git (44 MB of it), llama.cpp's tests, examples, web UI, server and the other GPU backends:
# only llama + ggml (CPU, CUDA) are built
v="$tmp/llama_cpp_python-$ver"/vendor/llama.cpp
rm -rf "$tmp/llama_cpp_python-$ver"/{.git,docs} "$v"/{models,docs,benches,media,tests,examples,.github,.devops,conversion,gguf-py} \
  "$v"/tools/{ui,server}
for b in vulkan sycl opencl hexagon metal et webgpu openvino cann virtgpu musa zdnn kompute zendnn; do rm -rf "$v/ggml/src/ggml-$b"; done
tar -C "$tmp" -czf "$d/llama_cpp_python-$ver-slim.tar.gz" "llama_cpp_python-$ver"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 -d "$d" \
  scikit_build_core pathspec==1.1.1 packaging==24.2 diskcache==5.6.3 gguf==0.19.0 Jinja2==3.1.6 MarkupSafe==3.0.4
rm -rf "$tmp"; du -sh "$d"
