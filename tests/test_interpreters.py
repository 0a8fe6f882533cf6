"""An engine in an environment of its own (--voiceperf-python ENGINE=PYTHON, ini voiceperf_python):
two environments on this machine, the pytest one and a bare one that has what the engine needs."""
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PROBE = textwrap.dedent('''
    from pytest_voiceperf.probes import Measurement, probe

    @probe("t.env", outputs={"value": ""}, engine="selftest", exact=("value",))
    def env(ctx, model: str = "a"):
        spec = {"model": model}
        r = ctx.call("selftest", spec, "echo", value=1.0)
        seen = ctx.call("selftest", spec, "environ", names=["PYTHONPATH", "VIRTUAL_ENV"])
        return Measurement({"value": r["value"]}, info={"worker_python": ctx.engine("selftest", spec).info["worker_python"],
                                                         "worker_env": seen})

    def pytest_voiceperf_add_probes(registry):
        registry.add(env.voiceperf_probe)
''')

CLAIM = textwrap.dedent("""\
    id: own-env
    title: t
    statement: the engine runs in the environment given for it
    requires: ["module:voiceperf_only_here"]
    measure:
      e: {probe: t.env}
    metric: e.value
    expect: {min: 0.5}
    """)


@pytest.fixture(scope="module")
def engine_env(tmp_path_factory) -> Path:
    """A second environment: a bare venv (no pytest, no pyyaml, no pydantic) holding one module the
    pytest environment lacks."""
    root = tmp_path_factory.mktemp("engine-env") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120)
    site = next(root.glob("lib/python*/site-packages"))
    (site / "voiceperf_only_here.py").write_text("VALUE = 1\n")
    return root / "bin" / "python"


@pytest.fixture
def vp(pytester):
    pytester.makeconftest(PROBE)
    pytester.mkdir("claims")
    (pytester.path / "claims" / "own-env.yaml").write_text(CLAIM)
    return pytester


def _results(p):
    return json.loads((p.path / "out.json").read_text())


def test_without_its_environment_the_claim_is_unmeasured(vp):
    res = vp.runpytest_subprocess("--voiceperf", "--voiceperf-json", "out.json", "-rA")
    assert res.parseoutcomes().get("unmeasured") == 1
    res.stdout.fnmatch_lines(["*module 'voiceperf_only_here' is not installed*"])


def test_the_engine_runs_in_the_python_given_for_it(vp, engine_env):
    # the engine's environment has none of the pytest environment's packages
    bare = subprocess.run([str(engine_env), "-c", "import yaml"], capture_output=True)
    assert bare.returncode != 0
    res = vp.runpytest_subprocess("--voiceperf", "--voiceperf-json", "out.json",
                                  "--voiceperf-python", f"selftest={engine_env}")
    res.assert_outcomes(passed=1)
    data = _results(vp)
    info = data["results"][0]["probes"]["e"]["info"]
    assert info["worker_python"] == str(engine_env)  # the worker says which python ran it
    # on its path only a folder holding this package, none of the pytest environment's
    assert "voiceperf-shim-" in info["worker_env"]["PYTHONPATH"] and ":" not in info["worker_env"]["PYTHONPATH"]
    assert info["worker_env"]["VIRTUAL_ENV"] is None
    own = data["provenance"]["interpreters"]["selftest"]
    assert own["python"] == str(engine_env) and own["python_version"] and own["packages"] == {}


def test_the_ini_names_the_engines_python(vp, engine_env):
    vp.makeini(f"[pytest]\nvoiceperf_python =\n    selftest={engine_env}\n")
    res = vp.runpytest_subprocess("--voiceperf", "--voiceperf-json", "out.json")
    res.assert_outcomes(passed=1)
    assert _results(vp)["provenance"]["interpreters"]["selftest"]["python"] == str(engine_env)


@pytest.mark.parametrize("arg, says", [
    ("selftest=/no/such/python", "*--voiceperf-python selftest=/no/such/python*not an executable file*"),
    ("nosuchengine=/usr/bin/python3", "*no engine family 'nosuchengine'*known:*selftest*"),
    ("selftest", "*--voiceperf-python expects NAME=VALUE*"),
])
def test_a_python_that_cannot_be_used_is_a_usage_error(vp, arg, says):
    res = vp.runpytest_subprocess("--voiceperf", "--voiceperf-python", arg)
    assert res.ret == 4
    res.stderr.fnmatch_lines([says])
    assert "Traceback" not in res.stderr.str()


def test_a_python_that_breaks_makes_the_engine_unmeasured(vp, tmp_path):
    broken = tmp_path / "python"
    broken.write_text("#!/bin/sh\necho 'this is not python' >&2\nexit 3\n")
    broken.chmod(0o755)
    (vp.path / "claims" / "own-env.yaml").write_text(CLAIM.replace('requires: ["module:voiceperf_only_here"]\n', ""))
    res = vp.runpytest_subprocess("--voiceperf", "--voiceperf-python", f"selftest={broken}", "--voiceperf-json", "out.json")
    assert res.parseoutcomes().get("unmeasured") == 1
    why = json.dumps(_results(vp)["results"][0])
    assert "engine selftest: the interpreter given for it" in why and "could not be used" in why, why
    assert "exit status 3" in why and "this is not python" in why, why
