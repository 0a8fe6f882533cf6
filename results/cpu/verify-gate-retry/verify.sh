#!/usr/bin/env bash
# The README's gating recipe, run-tests tests/unit and the shipped workflow script, exactly as written,
# in the clean clone CI just built (DIR, its .venv made by .ci/run's scripts/setup-env).
set -u
cd "${DIR:?the clean clone}" || exit 1
echo "== commit $(git log --oneline | head -1)"
rm -rf .voiceperf voiceperf-out results.json
s=$(date +%s)
.venv/bin/pytest --voiceperf --voiceperf-claims examples/claims/gate-decode.yaml -o voiceperf_tolerance=0.3 \
  --voiceperf-model team-llm=examples/models/team-llm --voiceperf-save main > gate-main.log 2>&1; echo "== gate main rc=$? $(( $(date +%s) - s )) s"; tail -2 gate-main.log
s=$(date +%s)
.venv/bin/pytest --voiceperf --voiceperf-claims examples/claims/gate-decode.yaml -o voiceperf_tolerance=0.3 \
  --voiceperf-model team-llm=examples/models/team-llm-deeper --voiceperf-baseline main --voiceperf-json results.json > gate-pr.log 2>&1; echo "== gate candidate rc=$? $(( $(date +%s) - s )) s"; grep -n "REGRESSED\|guarded" gate-pr.log | head -5; tail -1 gate-pr.log
.venv/bin/voiceperf compare results.json --format markdown > gate.md 2>&1; echo "== compare rc=$?"; head -14 gate.md
s=$(date +%s); ./scripts/run-tests tests/unit > unit.log 2>&1; echo "== unit rc=$? $(( $(date +%s) - s )) s"; tail -1 unit.log
rm -rf .voiceperf voiceperf-out
s=$(date +%s); VOICEPERF_BRANCH=main VOICEPERF_PYTHON=.venv/bin/python examples/ci/voiceperf-gate.sh -p no:cacheprovider --voiceperf-claims examples/claims/gate-decode.yaml -o voiceperf_tolerance=0.3 --voiceperf-model team-llm=examples/models/team-llm > wf-main.log 2>&1; echo "== workflow main rc=$? $(( $(date +%s) - s )) s"; tail -2 wf-main.log; ls .voiceperf
s=$(date +%s); VOICEPERF_BRANCH=pr-1 VOICEPERF_PYTHON=.venv/bin/python examples/ci/voiceperf-gate.sh -p no:cacheprovider --voiceperf-claims examples/claims/gate-decode.yaml -o voiceperf_tolerance=0.3 --voiceperf-model team-llm=examples/models/team-llm > wf-same.log 2>&1; echo "== workflow unchanged PR rc=$? $(( $(date +%s) - s )) s"; grep -h "guarded\|attempt" wf-same.log | head -3; ls voiceperf-out
s=$(date +%s); VOICEPERF_BRANCH=pr-2 VOICEPERF_PYTHON=.venv/bin/python examples/ci/voiceperf-gate.sh -p no:cacheprovider --voiceperf-claims examples/claims/gate-decode.yaml -o voiceperf_tolerance=0.3 --voiceperf-model team-llm=examples/models/team-llm-deeper > wf-deeper.log 2>&1; echo "== workflow deeper-model PR rc=$? $(( $(date +%s) - s )) s"; grep -h "guarded\|attempt" wf-deeper.log | head -3; head -16 voiceperf-out/gate.md
echo "== done"
