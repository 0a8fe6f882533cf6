#!/usr/bin/env bash
# The gating job's steps, the same on GitHub Actions, GitLab CI or a shell:
#   1. run the claims against this runner's saved baseline `main` (none yet: a notice, the job passes);
#   2. write the gate as Markdown (job summary, pull-request comment) and the HTML/Markdown report;
#   3. on main, when the gate passed, save the run as the next baseline.
# The CI system keeps .voiceperf/ between jobs (a cache restored on every job, saved on main).
#
#   VOICEPERF_BRANCH   the branch (GitHub: github.ref_name, GitLab: CI_COMMIT_REF_NAME); main saves
#   VOICEPERF_MAIN     the branch whose runs become the baseline (default main)
#   VOICEPERF_OUT      folder for results.json, gate.md, junit.xml, report/ (default voiceperf-out)
#   VOICEPERF_PYTHON   the interpreter with pytest-voiceperf and the engines (default python)
#   VOICEPERF_SAVE_ROUNDS  rounds per case of a run on main (default 6, as --voiceperf-save takes)
#   VOICEPERF_ATTEMPTS runs in all while the gate cannot decide (default 2; 1: never measure again)
#   extra arguments    go to pytest (claims, --voiceperf-profile, --voiceperf-model, engine options)
# Exit status: pytest's (0: no regression, no claim that passed in the baseline fails now; 1: one
# did, or the gate decided too few of the baseline's figures; 4: a usage error, e.g. another GPU).
set -u
py=${VOICEPERF_PYTHON:-python}
out=${VOICEPERF_OUT:-voiceperf-out}
main=${VOICEPERF_MAIN:-main}
branch=${VOICEPERF_BRANCH:-$(git rev-parse --abbrev-ref HEAD 2>/dev/null || echo "")}
mkdir -p "$out"

# a run on main may become the baseline: its rounds bound what later runs can decide against it (with 3,
# the baseline's side of the interval has 2 degrees of freedom), so it takes as many as a saved run
rounds=()
if [ "$branch" = "$main" ]; then rounds=(--voiceperf-rounds "${VOICEPERF_SAVE_ROUNDS:-6}"); fi
# A gate that could not decide (nothing regressed, but the machine was disturbed or its ceilings moved
# since the baseline, so too few figures were compared) measures again, up to VOICEPERF_ATTEMPTS runs
# in all; a regression is never measured again. Each attempt's files stay (results-attempt1.json ...).
attempts=${VOICEPERF_ATTEMPTS:-2}
n=1
while :; do
  "$py" -m pytest --voiceperf --voiceperf-baseline "$main" --voiceperf-json "$out/results.json" \
    --junitxml "$out/junit.xml" "${rounds[@]}" "$@"
  rc=$?
  [ -f "$out/results.json" ] || break
  # the gate against the baseline this run used (the results file names it), as Markdown; exit 3: undecided
  "$py" -m pytest_voiceperf.cli compare "$out/results.json" --format markdown --fail > "$out/gate.md"
  grc=$?
  if [ "$grc" = 2 ]; then echo "voiceperf: no gate summary (see above)" > "$out/gate.md"; fi
  if [ "$grc" != 3 ] || [ "$n" -ge "$attempts" ]; then break; fi
  for f in results.json gate.md junit.xml; do mv "$out/$f" "$out/${f%.*}-attempt$n.${f##*.}"; done
  echo "voiceperf: attempt $n of $attempts left the gate undecided ($out/gate-attempt$n.md); measuring again" >&2
  n=$((n + 1))
done
if [ "$n" -gt 1 ] && [ -f "$out/gate.md" ]; then
  printf '\nAttempt %s of %s: the earlier attempts left the gate undecided (gate-attempt*.md).\n' \
    "$n" "$attempts" >> "$out/gate.md"
fi

if [ -f "$out/results.json" ]; then
  "$py" -m pytest_voiceperf.cli report "$out/results.json" -o "$out/report" > /dev/null 2>&1 \
    || echo "voiceperf: no HTML report (pip install pytest-voiceperf[report] for the plots)" >&2
  if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then cat "$out/gate.md" >> "$GITHUB_STEP_SUMMARY"; fi
  if [ "$branch" = "$main" ] && { [ "$rc" = 0 ] || [ -n "${VOICEPERF_SAVE_ANYWAY:-}" ]; }; then
    "$py" -m pytest_voiceperf.cli save "$out/results.json" --name "$main"
  fi
fi
exit "$rc"
