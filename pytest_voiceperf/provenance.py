"""A results file's provenance: the tool, the machine and its state, the code, the packages, the
statistics settings and where the run's time went. Built from a voiceperf session at any point of
the run (the partial results file is written after every case). And how two runs' provenance
differ: the machine, which must match (:func:`machine_mismatches`), and the software, which is what
a gate compares (:func:`changes`)."""
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
from .record import Provenance, provenance_of


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


# -- how two runs differ -------------------------------------------------------------------------
# The machine is what must match for a fair comparison; software (engine, torch and model versions,
# weights, model configs, engine options) is what a gate compares: it is listed as what changed.
MACHINE_CHECKS = ("gpu", "cpu_model", "cpu_isa")
Prov = Provenance | dict  # a file's (typed when read) or the session's own (a dict while it runs)


def packages_match() -> list[str]:
    """What merge refuses besides the machine (one merged file stands for one software setup): torch and
    every engine family's packages."""
    return ["torch", *engine_packages()]


def machine_mismatches(old: Prov, new: Prov, allow: str | None = None) -> dict[str, str]:
    """check name (MACHINE_CHECKS) -> why the two runs' machines differ; files without a field pass.
    ``allow``: the checks waived ("gpu,cpu_model" or "all"; an unknown name is a ValueError)."""
    waived = set(MACHINE_CHECKS) if allow == "all" else {a.strip() for a in (allow or "").split(",") if a.strip()}
    if waived - set(MACHINE_CHECKS):
        raise ValueError(f"unknown check(s) {', '.join(sorted(waived - set(MACHINE_CHECKS)))}; "
                         f"the checks are {', '.join(MACHINE_CHECKS)}")
    return {k: v for k, v in _machine_mismatches(old, new).items() if k not in waived}


def _machine_mismatches(old: Prov, new: Prov) -> dict[str, str]:
    o, n = provenance_of(old), provenance_of(new)
    out = {}
    diff = [f"{k}: {getattr(o, k)!r} vs {getattr(n, k)!r}" for k in ("device_name", "device")
            if getattr(o, k) != getattr(n, k)]
    if diff:
        out["gpu"] = "; ".join(diff)
    # a GPU run's host: eager engines and short calls wait on the CPU that launches their kernels (on
    # the CPU, device_name is that model already; files from before it was recorded have none)
    if n.device != "cpu" and o.cpu_model and n.cpu_model and o.cpu_model != n.cpu_model:
        out["cpu_model"] = f"host cpu_model: {o.cpu_model!r} vs {n.cpu_model!r}"
    # on the CPU, the same CPU name on hosts of different vector extensions (a VM's "AMD EPYC" was
    # both); a GPU run's figures do not hang on its host's vector units
    if n.device == "cpu" and o.cpu_isa is not None and n.cpu_isa is not None and sorted(o.cpu_isa) != sorted(n.cpu_isa):
        out["cpu_isa"] = f"cpu_isa: {' '.join(o.cpu_isa) or '-'} vs {' '.join(n.cpu_isa) or '-'}"
    return out


def mismatches(old: Prov, new: Prov) -> list[str]:
    """Why two runs are not one setup (merge): the machine, engine versions, dummy vs real weights."""
    o, n = provenance_of(old), provenance_of(new)
    out = list(_machine_mismatches(o, n).values())
    for k in packages_match():
        if k in o.packages and k in n.packages and o.packages[k] != n.packages[k]:
            out.append(f"{k} version: {o.packages[k]} vs {n.packages[k]}")
    for name in sorted(set(o.models) & set(n.models)):
        a, b = _d(o.models[name]), _d(n.models[name])
        if bool(a.get("dummy")) != bool(b.get("dummy")):
            w = lambda m: "dummy" if m.get("dummy") else "real"  # noqa: E731
            out.append(f"model {name}: {w(a)} weights vs {w(b)} weights")
    return out


def _d(x: Any) -> dict:
    """A field that should be a mapping, from a file that may hold anything there."""
    return x if isinstance(x, dict) else {}


def _engine_key(e: dict) -> str:
    s = _d(e.get("spec"))
    return " ".join(str(x) for x in (e.get("family"), s.get("model"), s.get("dtype") or "",
                                      s.get("quantization") or "", s.get("quant") or "") if x)


# (engine versions are in the packages' lines already)
ENGINE_OPTIONS = ("engine_args", "enforce_eager", "max_num_seqs", "kv_cache_dtype",
                  "prefix_caching", "max_model_len", "compile", "precision")


def changes(old: Prov, new: Prov) -> list[str]:
    """What software changed between two runs' provenance, old -> new: packages, the code, models
    (weights and config), engine options. Shown in the gate's header and results; never refused."""
    o, n = provenance_of(old), provenance_of(new)
    out = []
    for k in sorted(set(o.packages) | set(n.packages)):
        if o.packages.get(k) != n.packages.get(k):
            out.append(f"{k} {o.packages.get(k, '-')} -> {n.packages.get(k, '-')}")
    for k in ("tool_version", "driver", "cuda"):
        was, now = getattr(o, k), getattr(n, k)
        if was and now and was != now:
            out.append(f"{k} {was} -> {now}")
    if o.git_commit and n.git_commit and o.git_commit != n.git_commit:
        out.append(f"code {o.git_commit[:10]} -> {n.git_commit[:10]}")
    for name in sorted(set(o.models) & set(n.models)):
        a, b = _d(o.models[name]), _d(n.models[name])
        if bool(a.get("dummy")) != bool(b.get("dummy")) or a.get("weights") != b.get("weights"):
            w = lambda m: "dummy weights" if m.get("dummy") else f"weights {m.get('weights')}"  # noqa: E731
            out.append(f"model {name}: {w(a)} -> {w(b)}")
        ca, cb = _d(a.get("config")), _d(b.get("config"))
        diff = [f"{k} {ca.get(k)} -> {cb.get(k)}" for k in sorted(set(ca) | set(cb)) if ca.get(k) != cb.get(k)]
        if ca and cb and diff:
            out.append(f"model {name}: " + ", ".join(diff))
    eo = {_engine_key(e): e for e in o.engines}
    for e in n.engines:
        was = eo.get(_engine_key(e))
        if was is None:
            continue
        a, b = dict(_d(was.get("info"))), dict(_d(e.get("info")))
        a.setdefault("engine_args", _d(was.get("spec")).get("engine_args"))
        b.setdefault("engine_args", _d(e.get("spec")).get("engine_args"))
        diff = [f"{k} {a.get(k)!r} -> {b.get(k)!r}" for k in ENGINE_OPTIONS if a.get(k) != b.get(k)]
        if diff:
            out.append(f"engine {_engine_key(e)}: " + ", ".join(diff))
    return list(dict.fromkeys(out))
