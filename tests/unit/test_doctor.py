"""voiceperf doctor's rules, over readings given as data (no machine needed), and the command here."""
import subprocess
import sys

from pytest_voiceperf.doctor import checks

BASE = {"cpu_model": "Intel Xeon", "cores": 16, "governor": "performance", "psutil": True, "pynvml": True,
        "busy": [], "engines": {"vllm": True, "torch": True}, "cache_root": "/c", "cache_bytes": 5 << 30,
        "cuda": True, "gpu_name": "NVIDIA H100", "gpu": {"gpu_pids": [], "reasons_names": ["GpuIdle"]},
        "persistence": True, "gpu_free": 79 << 30, "gpu_total": 80 << 30}


def _by(m, **kw):
    return {c.what.split(":")[0]: c for c in checks(dict(m, **kw))}


def test_a_quiet_gpu_machine_has_no_warning():
    assert {c.status for c in checks(BASE)} <= {"ok", "info"}


def test_each_thing_that_spoils_a_measurement_is_named_with_its_fix():
    found = checks(dict(BASE, governor="powersave", busy=[("make[12]", 1.5)], persistence=False,
                        gpu={"gpu_pids": [4242], "reasons_names": ["GpuIdle", "HwSlowdown", "SwThermalSlowdown"]},
                        gpu_free=20 << 30, pynvml=True, cache_bytes=None, engines={"vllm": False, "torch": True}))
    text = "\n".join(c.line() for c in found)
    assert "governor is 'powersave'" in text and "cpupower frequency-set -g performance" in text
    assert "make[12] 1.50" in text
    assert "pids [4242]" in text and "HwSlowdown, SwThermalSlowdown" in text and "GpuIdle" not in text
    assert "nvidia-smi -pm 1" in text and "GPU memory free: 20.0 of 80.0 GiB" in text
    assert "not installed: vllm" in text and "is empty (a cold run" in text
    assert sum(c.status == "warn" for c in found) == 6


def test_a_missing_psutil_fails_the_doctor():
    found = checks(dict(BASE, psutil=False))
    assert [c for c in found if c.status == "fail" and "disturbance watch is off" in c.what]


def test_the_command_runs_here():
    r = subprocess.run([sys.executable, "-m", "pytest_voiceperf.cli", "doctor"], capture_output=True, text=True)
    assert r.returncode in (0, 1) and "machine:" in r.stdout and "Traceback" not in r.stderr, r.stderr


def test_an_engine_in_its_own_environment_is_asked_there(tmp_path):
    # the pytest environment here lacks no engine the test can rely on; a python without transformers can
    # stand in: a venv without site packages has none
    import venv

    venv.create(tmp_path / "bare", with_pip=False)
    bare = str(tmp_path / "bare" / "bin" / "python")
    r = subprocess.run([sys.executable, "-m", "pytest_voiceperf.cli", "doctor", "--python", f"transformers={bare}"],
                       capture_output=True, text=True)
    line = next(x for x in r.stdout.splitlines() if "engines installed" in x)
    assert "not installed:" in line and "transformers" in line.split("not installed:")[1], line
    r = subprocess.run([sys.executable, "-m", "pytest_voiceperf.cli", "doctor", "--python", "vllm=/no/python"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "/no/python is not an executable file" in r.stderr and "Traceback" not in r.stderr


def test_own_environment_engines_are_named_with_their_python():
    found = checks(dict(BASE, engines={"vllm": True, "torch": True}, pythons={"vllm": "/venvs/vllm/bin/python"}))
    assert any("vllm (in /venvs/vllm/bin/python)" in c.what for c in found)
