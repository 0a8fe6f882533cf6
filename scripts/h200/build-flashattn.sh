#!/usr/bin/env bash
# On the device (H200): build flash-attn 2.8.3.post2 from the carried sdist (.whl/nanovllm) for what
# Nano-vLLM VoxCPM2 calls and nothing more, keep the wheel in /tmp/faw (it lasts while the machine is
# warm) and install it with nano-vllm-voxcpm into /tmp/site (install.sh's path).
#   - sm_90 only; bfloat16 only (VoxCPM2's runner is bf16; its VAE is fp16 convolutions, no attention);
#   - head dim 128 only (VoxCPM2's LM, local encoder and DiT share kv_channels 128);
#   - forward only: flash_attn_func, flash_attn_varlen_func (paged) and flash_attn_with_kvcache
#     (split-KV); no backward, dropout, ALiBi, softcap or sliding window.
# Anything else raises a clear error from the library instead of running a kernel that was not built.
# The full sdist build compiles 73 CUDA files for four architectures (hours on 16 cores); this is 7.
# usage: scripts/h200/build-flashattn.sh   (carry .whl/nanovllm on the first call)
set -euo pipefail
if ! ls /tmp/faw/flash_attn-*.whl >/dev/null 2>&1; then
  rm -rf /tmp/fab && mkdir -p /tmp/fab && tar -C /tmp/fab -xzf .whl/nanovllm/flash_attn-2.8.3.post2.tar.gz
  src=/tmp/fab/flash_attn-2.8.3.post2
  python3 - "$src" <<'PY'
import re, sys, pathlib
src = pathlib.Path(sys.argv[1])
sw = src / "csrc/flash_attn/src/static_switch.h"
t = sw.read_text()
t = re.sub(r"#define FP16_SWITCH\(COND, \.\.\.\).*?\}\(\)\n", (
    "#define FP16_SWITCH(COND, ...)               \\\n  [&] {                                      \\\n"
    "    TORCH_CHECK(!(COND), \"this flash-attn build (pytest-voiceperf, for VoxCPM2) has bfloat16 kernels only\"); \\\n"
    "    using elem_type = cutlass::bfloat16_t;   \\\n    return __VA_ARGS__();                    \\\n  }()\n"), t, count=1, flags=re.S)
t = re.sub(r"#define HEADDIM_SWITCH\(HEADDIM, \.\.\.\).*?\}\(\)\n", (
    "#define HEADDIM_SWITCH(HEADDIM, ...)   \\\n  [&] {                                    \\\n"
    "    TORCH_CHECK(HEADDIM > 96 && HEADDIM <= 128, \"this flash-attn build (pytest-voiceperf, for VoxCPM2) has head dim 128 only\"); \\\n"
    "    constexpr static int kHeadDim = 128; \\\n    return __VA_ARGS__();                \\\n  }()\n"), t, count=1, flags=re.S)
assert t.count("TORCH_CHECK") == 2, "static_switch.h changed upstream"
sw.write_text(t)
sp = src / "setup.py"
s = sp.read_text()
keep = [f"csrc/flash_attn/src/flash_{k}_hdim128_bf16{c}_sm80.cu" for k in ("fwd", "fwd_split", "bwd") for c in ("", "_causal")]
s, n = re.subn(r'sources=\[\s*"csrc/flash_attn/flash_api.cpp",.*?\],',
               "sources=" + repr(["csrc/flash_attn/flash_api.cpp"] + keep) + ",", s, count=1, flags=re.S)
assert n == 1, "setup.py sources list changed upstream"
flags = ["-DFLASHATTENTION_DISABLE_" + f for f in ("BACKWARD", "DROPOUT", "ALIBI", "SOFTCAP", "LOCAL")]
s = s.replace('compiler_c17_flag=["-O3", "-std=c++17"]', f'compiler_c17_flag=["-O3", "-std=c++17"] + {flags!r}', 1)
s = s.replace('"--use_fast_math",', '"--use_fast_math", ' + ", ".join(repr(f) for f in flags) + ",", 1)
sp.write_text(s)
print("patched: bf16, head dim 128, forward only;", len(keep) + 1, "sources")
PY
  nvcc --version | tail -1; nproc
  start=$(date +%s)
  (cd "$src" && FLASH_ATTENTION_FORCE_BUILD=TRUE FLASH_ATTN_CUDA_ARCHS=90 MAX_JOBS=8 NVCC_THREADS=2 \
     python3 -m pip wheel -v --no-deps --no-build-isolation --no-index -w /tmp/faw . > /tmp/faw-build.log 2>&1) \
    || { tail -60 /tmp/faw-build.log; exit 1; }
  echo "flash_attn build_s=$(( $(date +%s) - start ))"
fi
ls -la /tmp/faw
mkdir -p /tmp/site
w=.whl/nanovllm
python3 -m pip install -q --no-index --no-deps --upgrade --target /tmp/site /tmp/faw/flash_attn-*.whl \
  $( [ -d "$w" ] && ls $w/nano_vllm_voxcpm-*.whl $w/einops-*.whl $w/xxhash-*.whl ) 2>&1 | { grep -v "already exists" || true; } | tail -3
PYTHONPATH=/tmp/site python3 -c "import flash_attn, flash_attn_2_cuda; print('flash_attn', flash_attn.__version__)"
