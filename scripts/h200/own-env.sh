#!/usr/bin/env bash
# On the device: a GPU user's path with vLLM in an environment of its own (issue 44).
#   own-env.sh setup     wheel parts (/tmp/wparts, receive with carry .whl/wparts/...) -> /tmp/wheels; a venv
#                        for vLLM installed with pip from those wheels under requirements/gpu-cp312.txt;
#                        the pytest process is the image's python with the plugin's base wheels, no vLLM
#   own-env.sh run NAME [pytest args]   the cuda profile with --voiceperf-python vllm=/tmp/venv-vllm/bin/python
# Everything it writes goes to $OUT (and /tmp/keep, which lives while the machine is warm).
set -uo pipefail
keep=/tmp/keep; mkdir -p "$keep"
export PYTHONUNBUFFERED=1 VLLM_LOGGING_LEVEL=WARNING TOKENIZERS_PARALLELISM=false
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
venv=/tmp/venv-vllm
case "$1" in
setup)
  t0=$(date +%s)
  if [ ! -d /tmp/wheels ]; then
    cat /tmp/wparts/wtree.tar.xz.* | xz -dc -T0 | tar -C /tmp -xf - || exit 1
    python3 scripts/h200/repack-wheels.py /tmp/wtree /tmp/wheels || exit 1
  fi
  echo "wheels ready $(( $(date +%s) - t0 )) s"
  # the image's python is itself a venv holding torch: the engine's venv sees its packages through a .pth
  # (what --system-site-packages gives on a runner whose torch is installed system-wide); pip comes from
  # the image (`pip --python`), so the venv needs no ensurepip
  python3 -m venv --without-pip "$venv"
  img=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  own=$("$venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  echo "$img" > "$own/_image_site.pth"
  PIP=(python3 -m pip --python "$venv/bin/python")
  if ! "${PIP[@]}" --version >/dev/null 2>&1; then  # a pip before 22.3 has no --python: the venv's own pip
    python3 -m venv "$venv" && PIP=("$venv/bin/python" -m pip)
  fi
  t1=$(date +%s)
  # a lock file, installed as one: exact pins, no resolution (pip-sync's way). vLLM 0.24.0's metadata
  # cannot be resolved against the torch stack it runs on here (pip check below lists where)
  "${PIP[@]}" install --no-index --no-deps --find-links /tmp/wheels --find-links .whl/base \
    -r requirements/gpu-cp312.txt > "$keep/install-vllm.log" 2>&1
  echo "pip install rc=$? $(( $(date +%s) - t1 )) s"; tail -3 "$keep/install-vllm.log"
  "${PIP[@]}" check > "$keep/pip-check.txt" 2>&1; echo "pip check rc=$?"; tail -5 "$keep/pip-check.txt"
  "${PIP[@]}" freeze --all > "$keep/freeze-vllm-env.txt" 2>/dev/null
  # the lock: what vLLM and the plugin reach through their declared requirements, at the installed versions
  "$venv/bin/python" - > "$keep/gpu-cp312.lock.txt" <<'PY'
import importlib.metadata as md, re
from packaging.requirements import Requirement
norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()
dists = {norm(d.metadata["Name"]): d for d in md.distributions()}
todo, seen = ["vllm", "pydantic", "simpleeval", "jiwer", "pyyaml", "psutil", "nvidia-ml-py"], set()
while todo:
    n = todo.pop()
    if n in seen or n not in dists:
        continue
    seen.add(n)
    for r in dists[n].requires or []:
        r = Requirement(r)
        if r.marker is None or r.marker.evaluate({"extra": ""}):
            todo.append(norm(r.name))
print("# CPython 3.12, manylinux x86_64, CUDA 13: the vLLM environment that ran on the lent GPU, locked")
print("# install: pip install --no-deps -r requirements/gpu-cp312.txt (see docs/engines.md)")
for n in sorted(seen):
    print(f"{dists[n].metadata['Name']}=={dists[n].version}")
PY
  echo "lock: $(grep -c == "$keep/gpu-cp312.lock.txt") packages"
  # does what the engine's environment imports match the constraints?
  python3 - "$keep/freeze-vllm-env.txt" requirements/gpu-cp312.txt > "$keep/constraints-check.txt" <<'PY'
import re, sys
norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()
def pins(path):
    out = {}
    for line in open(path):
        line = line.split("#")[0].strip()
        if "==" in line:
            n, v = line.split("==", 1)
            out[norm(n)] = v.strip()
    return out
have, want = pins(sys.argv[1]), pins(sys.argv[2])
bad = {n: (v, have.get(n)) for n, v in want.items() if have.get(n) != v}
print(f"{len(want)} constraints, {len(want) - len(bad)} match the environment, {len(bad)} differ")
for n, (v, h) in sorted(bad.items()):
    print(f"  {n}: constraint {v}, environment {h}")
PY
  cat "$keep/constraints-check.txt" | head -30
  "$venv/bin/python" -c "import vllm, torch; print('engine env: vllm', vllm.__version__, 'torch', torch.__version__)"
  # the pytest process: the image's python, the plugin's own needs (.whl/base), no vLLM
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/base/*.whl 2>&1 | grep -v "already exists" | tail -2
  export PYTHONPATH="$PWD:/tmp/site"
  python3 -c "import importlib.util as u; print('pytest process: vllm', 'present' if u.find_spec('vllm') else 'absent')"
  python3 -m pytest_voiceperf.cli doctor > "$keep/doctor.txt" 2>&1; echo "doctor rc=$?"
  cat "$keep/doctor.txt"
  cp "$keep"/*.txt "$keep"/*.log "$OUT"/ 2>/dev/null;;
run)
  name=$2; shift 2
  export PYTHONPATH="$PWD:/tmp/site"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  t0=$(date +%s)
  python3 -m pytest -p pytest_voiceperf.plugin -p no:cacheprovider --voiceperf --voiceperf-device cuda \
    --voiceperf-profile cuda --voiceperf-python "vllm=$venv/bin/python" --voiceperf-json "$keep/$name.json" \
    -v -rA "$@" > "$keep/$name.log" 2>&1
  echo "== $name rc=$? wall_s=$(( $(date +%s) - t0 ))" | tee -a "$keep/$name.log"
  grep -E "PASSED|FAILED|UNMEASURED|XFAIL|ERROR" "$keep/$name.log" | grep "::" | cut -c1-150 | tail -40
  sed -n '/where the time went/,/^wall/p' "$keep/$name.log"
  tail -2 "$keep/$name.log"
  cp "$keep/$name".* "$OUT"/ 2>/dev/null;;
ab)
  # the same cases, the engine in its own environment (A) and in the pytest process's (B), alternating on
  # one machine: does an environment of its own change the figures?
  shift; site=$("$venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  for i in 1 2; do
    for mode in own same; do
      if [ $mode = own ]; then
        PYTHONPATH="$PWD:/tmp/site" python3 -m pytest -p pytest_voiceperf.plugin -p no:cacheprovider --voiceperf \
          --voiceperf-device cuda --voiceperf-profile cuda --voiceperf-python "vllm=$venv/bin/python" \
          --voiceperf-json "$keep/ab-$mode-$i.json" -q "$@" > "$keep/ab-$mode-$i.log" 2>&1
      else
        PYTHONPATH="$PWD:/tmp/site:$site" python3 -m pytest -p pytest_voiceperf.plugin -p no:cacheprovider --voiceperf \
          --voiceperf-device cuda --voiceperf-profile cuda \
          --voiceperf-json "$keep/ab-$mode-$i.json" -q "$@" > "$keep/ab-$mode-$i.log" 2>&1
      fi
      echo "== ab $mode $i rc=$? $(tail -1 "$keep/ab-$mode-$i.log")"
      python3 -c "
import json,sys; d=json.load(open(sys.argv[1]))
print('   engine python:', {k: v.get('python') for k, v in (d.get('provenance', {}).get('interpreters') or {}).items()} or 'the pytest process')
for r in d['results']: print('  ', r['outcome'], r['nodeid'].split('::')[1], r.get('value'), r.get('ci'))" "$keep/ab-$mode-$i.json"
      cp "$keep/ab-$mode-$i".* "$OUT"/
    done
  done;;
esac
