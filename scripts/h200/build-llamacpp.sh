#!/usr/bin/env bash
# On the device (H200): build llama-cpp-python with CUDA for sm_90 only from the carried sdist
# (.whl/llamacpp, made by fetch-llamacpp.sh), keep the wheel in /tmp/lcw (it lasts while the machine
# is warm: later calls install it without building) and install it into /tmp/site (install.sh's path).
# usage: scripts/h200/build-llamacpp.sh   (carry .whl/llamacpp on the first call)
set -euo pipefail
if ! ls /tmp/lcw/llama_cpp_python-*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/bt .whl/llamacpp/scikit_build_core-*.whl \
    .whl/llamacpp/pathspec-*.whl .whl/llamacpp/packaging-*.whl
  cmake --version | head -1; nvcc --version | tail -1; nproc
  start=$(date +%s)
  # only what the engine calls: no multimodal (mtmd) library; ggml's CUDA backend for Hopper only
  PYTHONPATH=/tmp/bt CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAVA_BUILD=off" \
    CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) python3 -m pip wheel -v --no-deps --no-build-isolation --no-index \
    -w /tmp/lcw .whl/llamacpp/llama_cpp_python-*-slim.tar.gz > /tmp/lcw-build.log 2>&1 \
    || { tail -80 /tmp/lcw-build.log; exit 1; }
  echo "build_s=$(( $(date +%s) - start ))"
  grep -E "CUDA Toolkit|CMAKE_CUDA_ARCHITECTURES|ggml-cuda|Found CUDAToolkit" /tmp/lcw-build.log | head -5 || true
fi
ls -la /tmp/lcw
w=.whl/llamacpp
mkdir -p /tmp/site
python3 -m pip install -q --no-index --no-deps --upgrade --target /tmp/site /tmp/lcw/llama_cpp_python-*.whl \
  $( [ -d "$w" ] && ls $w/diskcache-*.whl $w/gguf-*.whl $w/jinja2-*.whl $w/markupsafe-*.whl ) 2>&1 | { grep -v "already exists" || true; } | tail -3
PYTHONPATH=/tmp/site python3 -c "import llama_cpp; print('llama_cpp', llama_cpp.__version__, 'gpu offload:', llama_cpp.llama_supports_gpu_offload())"
