"""The shipped CI workflow's steps (examples/ci/voiceperf-gate.sh), run as a CI job runs them, on the CPU:
main saves a baseline, an unchanged pull request passes, a slower model fails with the figure and the
term that moved in the gate's Markdown."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "ci" / "voiceperf-gate.sh"
WORKFLOWS = [ROOT / "examples" / "ci" / "github-actions.yml", ROOT / "examples" / "ci" / "gitlab-ci.yml"]


def _project(tmp_path: Path) -> Path:
    """A team's repository: the shipped gate claim and the team's model folders (examples/)."""
    p = tmp_path / "repo"
    (p / "claims").mkdir(parents=True)
    shutil.copy(ROOT / "examples" / "claims" / "gate-decode.yaml", p / "claims")
    for name in ("team-llm", "team-llm-deeper"):
        shutil.copytree(ROOT / "examples" / "models" / name, p / "models" / name)
    # a 2-core CI VM: its read bandwidth moves 20-30% between rounds and runs (22.6-31.2 GB/s seen in one
    # run), and a ceiling that moves beyond the tolerance during a run makes its figures untestable
    (p / "pytest.ini").write_text("[pytest]\nvoiceperf_round_seconds = 120\nvoiceperf_tolerance = 0.3\n")
    return p


def _job(repo: Path, branch: str, model: str) -> tuple[int, str, str]:
    """One CI job: the workflow's Gate step (the script), with the job's environment."""
    out = repo / "voiceperf-out"
    shutil.rmtree(out, ignore_errors=True)
    env = dict(os.environ, VOICEPERF_BRANCH=branch, VOICEPERF_PYTHON=sys.executable,
               GITHUB_STEP_SUMMARY=str(repo / "summary.md"))
    # the gate as shipped: a round beside other load is dropped and taken again (the other tests run
    # with 4 cores of load tolerated; here a round at a third of the speed, beside another process,
    # left the baseline's interval too wide for an unchanged pull request to be decided)
    env.pop("VOICEPERF_DISTURBED_CPU", None)
    r = subprocess.run(["bash", str(SCRIPT), "-p", "no:cacheprovider", "--voiceperf-model", f"team-llm=models/{model}"],
                       cwd=repo, env=env, capture_output=True, text=True, timeout=900)
    md = (out / "gate.md").read_text() if (out / "gate.md").exists() else ""
    # each job's files kept apart (a failure's message names the attempts the gate could not decide)
    earlier = "".join(f"\n--- {p.name}\n{p.read_text()}" for p in sorted(out.glob("gate-attempt*.md")))
    shutil.copytree(out, repo / f"voiceperf-out-{branch}-{model}", dirs_exist_ok=True)
    return r.returncode, r.stdout + r.stderr + earlier, md


def test_the_workflows_call_the_script_the_test_runs():
    import re
    import tomllib

    import yaml

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for wf in WORKFLOWS:
        text = wf.read_text()
        assert isinstance(yaml.safe_load(text), dict), wf  # a file GitHub or GitLab can read
        assert "examples/ci/voiceperf-gate.sh" in text, wf
        # what it installs is what the README's CUDA runner does, from files of this repository
        for path in re.findall(r"(?:-r |^\s*(?:run: |- )?)((?:requirements|examples)/[\w./-]+)", text, re.M):
            assert (ROOT / path).exists(), (wf, path)
        for extra in re.findall(r'-e "\.\[(\w+)\]"', text):
            assert extra in extras, (wf, extra)
        assert "--voiceperf-python vllm=.venv-vllm/bin/python" in text, wf


@pytest.mark.skipif(shutil.which("bash") is None, reason="the script is bash")
def test_the_shipped_gate_passes_main_and_an_unchanged_pr_and_fails_a_slower_model(tmp_path):
    repo = _project(tmp_path)
    # main, first job ever: no baseline yet, a notice, exit 0, and the run becomes the baseline
    rc, log, md = _job(repo, "main", "team-llm")
    assert rc == 0, log
    assert "no baseline 'main' yet" in log and "## voiceperf gate: no baseline" in md
    saved = sorted((repo / ".voiceperf").rglob("*_main.json"))
    assert len(saved) == 1, log
    # a run on main takes a saved run's rounds (3 left the baseline's side 2 degrees of freedom and an
    # unchanged pull request undecided in one CI run: 78.8, 77.0, 92.7 tok/s)
    assert json.loads(saved[0].read_text())["results"][0]["rounds"] == 6
    # a pull request that changes nothing: passes, and the gate decided its figures
    rc, log, md = _job(repo, "feature", "team-llm")
    assert rc == 0, log + md
    assert "## voiceperf gate: passed" in md and "### Regressed" not in md
    assert "guarded 1 of 1 figures" in md, md  # metric d.tok_s: one figure
    assert len(sorted((repo / ".voiceperf").rglob("*_main.json"))) == 1  # a pull request saves nothing
    # a pull request with a deeper model (12 layers instead of 4): fails, and says which term moved
    rc, log, md = _job(repo, "feature", "team-llm-deeper")
    assert rc == 1, log + md
    assert "## voiceperf gate: FAILED" in md
    assert "### Regressed" in md and "d.tok\\_s \\[tok/s\\]" in md, md
    assert "bytes read per token +" in md, md
    assert "model team-llm: num\\_hidden\\_layers 4 -> 12" in md, md
    assert (repo / "summary.md").read_text().count("## voiceperf gate") == 3


STUB = """#!/usr/bin/env bash
# stands in for the interpreter: pytest writes a results file and exits $PYTEST_RC; compare prints a
# gate and exits with the next of $COMPARE_CODES (3: undecided)
echo "$*" >> calls.log
if [ "$2" = pytest ]; then echo '{}' > voiceperf-out/results.json; echo junit > voiceperf-out/junit.xml; exit "$PYTEST_RC"; fi
if [ "$3" = compare ]; then
  n=$(grep -c ' compare ' calls.log); codes=($COMPARE_CODES); echo "## voiceperf gate: attempt $n"; exit "${codes[$((n - 1))]}"
fi
exit 0
"""


@pytest.mark.skipif(shutil.which("bash") is None, reason="the script is bash")
@pytest.mark.parametrize("codes,attempts,runs", [
    ("3 0", "", 2),    # undecided, then decided: measured again once
    ("3 3", "", 2),    # undecided twice: stops after the default 2 attempts, still failing
    ("1", "", 1),      # regressed: never measured again
    ("0", "", 1),      # passed
    ("3", "1", 1),     # VOICEPERF_ATTEMPTS=1: never measured again
])
def test_the_shipped_gate_measures_again_only_when_it_could_not_decide(tmp_path, codes, attempts, runs):
    stub = tmp_path / "py"
    stub.write_text(STUB)
    stub.chmod(0o755)
    (tmp_path / "voiceperf-out").mkdir()
    env = dict(os.environ, VOICEPERF_BRANCH="feature", VOICEPERF_PYTHON=str(stub), PYTEST_RC="1",
               COMPARE_CODES=codes, VOICEPERF_ATTEMPTS=attempts or "2")
    r = subprocess.run(["bash", str(SCRIPT)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    calls = (tmp_path / "calls.log").read_text().splitlines()
    assert sum(c.startswith("-m pytest ") for c in calls) == runs, calls
    assert r.returncode == 1  # the last attempt's pytest status
    out = tmp_path / "voiceperf-out"
    md = (out / "gate.md").read_text()
    assert f"gate: attempt {runs}" in md
    if runs == 2:
        assert (out / "results-attempt1.json").exists() and (out / "gate-attempt1.md").exists()
        assert "Attempt 2 of 2: the earlier attempts left the gate undecided" in md
        assert "attempt 1 of 2 left the gate undecided" in r.stderr
    else:
        assert not list(out.glob("*-attempt*")) and "Attempt" not in md
