"""A results file's provenance: the tool, the machine and its state, the code, the packages, the
statistics settings and where the run's time went. Built from a voiceperf session at any point of
the run (the partial results file is written after every case)."""
from __future__ import annotations

import functools
import os
import platform
import re
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from . import stats
from .engines import interpreters
from .engines import packages as engine_packages


def packages() -> list[str]:
    """The distributions a results file records: torch, every engine family's own (plugins' too), pytest, numpy."""
    return list(dict.fromkeys(["torch", *engine_packages(), "pytest", "numpy"]))


def build(session: Any) -> dict:
    """The provenance of a voiceperf session (session.py; passed in, not imported: no cycle)."""
    prov: dict[str, Any] = {
        "tool": "pytest-voiceperf",
        "tool_version": _version(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": socket.gethostname(),
        "machine_id": machine_id(session.device, session.device_name),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "cpu_isa": _static(session, "cpu_isa", cpu_isa),
        "cpu_model": cpu_model(),
        "device": session.device,
        "device_name": session.device_name,
        "profile": session.profile,
        "complete": session.complete,
        "duration_s": round(time.time() - session.started, 2),
        "models": session.models_used,
        "engines": session.engines.started,
        "caches": session.static_provenance.get("caches"),
        "git_commit": _static(session, "git_commit", lambda: _git_commit(session.rootdir)),
        "git_dirty": _static(session, "git_dirty", lambda: _git_dirty(session.rootdir)),
        "worker": session.worker,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }
    prov["statistics"] = {"ci": stats.CI_METHOD, "min_rounds": session.options.min_rounds,
                          "max_rounds": session.options.max_rounds, "round_seconds": session.options.round_seconds,
                          "disturbed_cpu_cores": session.options.disturbed_cpu}
    prov["timing"] = session.timing_json()
    prov["environment_start"] = session.env_start
    prov["environment_end"] = session.env_end
    if session.ceilings_end:
        prov["ceilings_end"] = session.ceilings_end
    prov["packages"] = _static(session, "packages", lambda: interpreters.versions(packages()))
    engines_own = _static(session, "interpreters", lambda: interpreters.provenance(packages()))
    if engines_own:  # engines in environments of their own (--voiceperf-python): their versions are the run's
        prov["interpreters"] = engines_own
        prov["packages"] = merged_packages(prov["packages"], engines_own)
    if session.device == "cuda":
        try:
            import torch

            prov["cuda"] = torch.version.cuda
            prov["gpu_count"] = torch.cuda.device_count()
            prov["driver"] = _nvidia_driver()
        except Exception:
            pass
    return prov


def merged_packages(own: dict, engines_own: dict) -> dict:
    """The pytest process's package versions with those of the engines' own interpreters: a package only
    an engine's environment has is listed by its name; one at another version there as ``NAME (FAMILY)``."""
    out = dict(own)
    for family, info in sorted(engines_own.items()):
        for name, version in sorted((info.get("packages") or {}).items()):
            if name not in out:
                out[name] = version
            elif out[name] != version:
                out[f"{name} ({family})"] = version
    return out


def _static(session, key: str, fn):
    """Provenance that does not change during the run, computed once per session."""
    cache = session.static_provenance
    if key not in cache:
        cache[key] = fn()
    return cache[key]


def environment(device: str) -> dict:
    """The machine's state: load average, CPU frequency; on CUDA clocks, temperature, power, throttle reasons."""
    env: dict[str, Any] = {}
    try:
        env["loadavg"] = list(os.getloadavg())
    except OSError:
        pass
    try:
        import psutil

        f = psutil.cpu_freq()
        if f is not None:
            env["cpu_mhz"] = round(f.current)
    except Exception:
        pass
    if device == "cuda":
        from .disturbance import gpu_state

        env["gpu"] = gpu_state()
    return env


# vector extensions that decide CPU engine speed: one "AMD EPYC" VM host had AVX-512 (bfloat16 GEMM),
# another only AVX2, where torch's bfloat16 matmul ran at 0.83 GFLOP/s and vLLM's bfloat16 at about 5 GFLOP/s
ISA_FLAGS = ("avx2", "fma", "avx_vnni", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile",
             "amx_bf16", "amx_int8")


@functools.lru_cache(maxsize=4)
def cpu_isa(cpuinfo: str = "/proc/cpuinfo") -> list[str] | None:
    """The host CPU's vector extensions that engines use (Linux /proc/cpuinfo flags; None elsewhere).
    Read once per process: every LLM probe call on the CPU asks (the emulated-half-precision check)."""
    try:
        with open(cpuinfo) as f:
            for line in f:
                if line.startswith("flags"):
                    have = set(line.split(":", 1)[1].split())
                    return [x for x in ISA_FLAGS if x in have]
    except OSError:
        pass
    return None


@functools.lru_cache(maxsize=1)
def cpu_model(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The host CPU's model name (Linux /proc/cpuinfo; the platform's processor name elsewhere). A GPU
    run's launch-bound figures (eager TTS, short prefills, first tokens) hang on it too."""
    try:
        for line in Path(cpuinfo).read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_id(device: str, device_name: str) -> str:
    base = f"{platform.system()}-{device}-{device_name}"
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", base)[:80]


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("pytest-voiceperf")
    except Exception:
        return "0+unknown"


def _git_commit(root: Path) -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                              timeout=5).stdout.strip() or None
    except Exception:
        return None


def _git_dirty(root: Path) -> bool | None:
    """True when tracked files differ from git_commit (the run's code is not exactly that commit)."""
    try:
        r = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                           capture_output=True, text=True, timeout=10)
        return bool(r.stdout.strip()) if r.returncode == 0 else None
    except Exception:
        return None


def _nvidia_driver() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10).stdout
        return out.strip().splitlines()[0] if out.strip() else None
    except Exception:
        return None
