#!/usr/bin/env bash
# The README's commands, exactly as written, from a clean clone. ONLY_LATER=1 (verify2.log, at 02829dc):
# set up, then only run-tests tests/unit and the shipped workflow (command 1 and the recipe ran at 495eaab).
set -u
dir=/tmp/verify${ONLY_LATER:+2}
rm -rf "$dir" && git clone -q /work/main "$dir" && cd "$dir"
echo "== commit $(git log --oneline | head -1)"
if [ -n "${ONLY_LATER:-}" ]; then
s=$(date +%s); ./scripts/setup-env > setup.log 2>&1; echo "== setup rc=$? $(( $(date +%s) - s )) s"
else
s=$(date +%s)
./scripts/setup-env && .venv/bin/pytest --voiceperf --voiceperf-json results.json > default.log 2>&1; echo "== command 1 rc=$? $(( $(date +%s) - s )) s"
tail -3 default.log
s=$(date +%s); .venv/bin/voiceperf report results.json -o report/ > report.log 2>&1; echo "== report rc=$? $(( $(date +%s) - s )) s"; ls report | head
.venv/bin/voiceperf validate claims/ > validate.log 2>&1; echo "== validate rc=$?"; tail -2 validate.log
s=$(date +%s)
.venv/bin/pytest --voiceperf --voiceperf-claims examples/claims/gate-decode.yaml -o voiceperf_tolerance=0.3 \
  --voiceperf-model team-llm=examples/models/team-llm --voiceperf-save main > gate-main.log 2>&1; echo "== gate main rc=$? $(( $(date +%s) - s )) s"; tail -2 gate-main.log
s=$(date +%s)
.venv/bin/pytest --voiceperf --voiceperf-claims examples/claims/gate-decode.yaml -o voiceperf_tolerance=0.3 \
  --voiceperf-model team-llm=examples/models/team-llm-deeper --voiceperf-baseline main --voiceperf-json results.json > gate-pr.log 2>&1; echo "== gate candidate rc=$? $(( $(date +%s) - s )) s"; grep -n "regressed\|bytes read per token" gate-pr.log | head -5; tail -2 gate-pr.log
.venv/bin/voiceperf compare results.json --format markdown > gate.md 2>&1; echo "== compare rc=$?"; head -20 gate.md
fi
s=$(date +%s); ./scripts/run-tests tests/unit > unit.log 2>&1; echo "== unit rc=$? $(( $(date +%s) - s )) s"; tail -1 unit.log
# the shipped workflow's script, as a job on main and then on a pull request would run it (CPU, the example claim)
rm -rf .voiceperf voiceperf-out
s=$(date +%s); VOICEPERF_BRANCH=main VOICEPERF_PYTHON=.venv/bin/python examples/ci/voiceperf-gate.sh -p no:cacheprovider --voiceperf-claims examples/claims/gate-decode.yaml -o voiceperf_tolerance=0.3 --voiceperf-model team-llm=examples/models/team-llm > wf-main.log 2>&1; echo "== workflow main rc=$? $(( $(date +%s) - s )) s"; tail -2 wf-main.log; ls .voiceperf
s=$(date +%s); VOICEPERF_BRANCH=pr-1 VOICEPERF_PYTHON=.venv/bin/python examples/ci/voiceperf-gate.sh -p no:cacheprovider --voiceperf-claims examples/claims/gate-decode.yaml -o voiceperf_tolerance=0.3 --voiceperf-model team-llm=examples/models/team-llm > wf-same.log 2>&1; echo "== workflow unchanged PR rc=$? $(( $(date +%s) - s )) s"; tail -1 wf-same.log
s=$(date +%s); VOICEPERF_BRANCH=pr-2 VOICEPERF_PYTHON=.venv/bin/python examples/ci/voiceperf-gate.sh -p no:cacheprovider --voiceperf-claims examples/claims/gate-decode.yaml -o voiceperf_tolerance=0.3 --voiceperf-model team-llm=examples/models/team-llm-deeper > wf-deeper.log 2>&1; echo "== workflow deeper-model PR rc=$? $(( $(date +%s) - s )) s"; tail -1 wf-deeper.log; head -12 voiceperf-out/gate.md
echo "== done"
