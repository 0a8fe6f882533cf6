#!/usr/bin/env bash
# The README's commands as written, in the clean clone CI just built (DIR, its .venv made by .ci/run's
# scripts/setup-env; command 1 was run there before this script, its log is default.log): the report
# and validate commands over command 1's results, the gating recipe, the inner loop, the shipped
# workflow's script (main, an unchanged pull request, the deeper model).
set -u
cd "${DIR:?the clean clone}" || exit 1
echo "== commit $(git log --oneline | head -1)"
.venv/bin/voiceperf report results.json -o report/ > report.log 2>&1; echo "== report rc=$?"; tail -2 report.log; ls report
.venv/bin/voiceperf validate claims/ > validate.log 2>&1; echo "== validate rc=$?"; tail -1 validate.log
rm -rf .voiceperf voiceperf-out
s=$(date +%s)
.venv/bin/pytest --voiceperf --voiceperf-claims examples/claims/gate-decode.yaml -o voiceperf_tolerance=0.3 \
  --voiceperf-model team-llm=examples/models/team-llm --voiceperf-save main > gate-main.log 2>&1; echo "== gate main rc=$? $(( $(date +%s) - s )) s"; tail -2 gate-main.log
s=$(date +%s)
.venv/bin/pytest --voiceperf --voiceperf-claims examples/claims/gate-decode.yaml -o voiceperf_tolerance=0.3 \
  --voiceperf-model team-llm=examples/models/team-llm-deeper --voiceperf-baseline main --voiceperf-json gate-results.json > gate-pr.log 2>&1; echo "== gate candidate rc=$? $(( $(date +%s) - s )) s"; grep -n "REGRESSED\|guarded" gate-pr.log | head -5; tail -1 gate-pr.log
.venv/bin/voiceperf compare gate-results.json --format markdown > gate.md 2>&1; echo "== compare rc=$?"; head -14 gate.md
s=$(date +%s); ./scripts/run-tests tests/unit > unit.log 2>&1; echo "== unit rc=$? $(( $(date +%s) - s )) s"; tail -1 unit.log
rm -rf .voiceperf voiceperf-out
wf() {  # NAME BRANCH MODEL: one job of the shipped workflow's Gate step
  local s=$(date +%s)
  VOICEPERF_BRANCH=$2 VOICEPERF_PYTHON=.venv/bin/python examples/ci/voiceperf-gate.sh -p no:cacheprovider \
    --voiceperf-claims examples/claims/gate-decode.yaml -o voiceperf_tolerance=0.3 --voiceperf-model "team-llm=examples/models/$3" > "wf-$1.log" 2>&1
  echo "== workflow $1 rc=$? $(( $(date +%s) - s )) s"; grep -h "guarded\|attempt" "wf-$1.log" | head -3
  cp voiceperf-out/gate.md "wf-$1-gate.md" 2>/dev/null
}
wf main main team-llm; ls .voiceperf/*
wf same pr-1 team-llm
wf deeper pr-2 team-llm-deeper; head -16 wf-deeper-gate.md
echo "== done"
