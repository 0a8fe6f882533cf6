"""``voiceperf doctor``: what this machine is and what would spoil a measurement on it, before a run
(pyperf's ``system show`` is the model). Each check gives a status (ok, warn, fail, info), what it saw
and the fix. :func:`checks` is pure over the readings :func:`read_machine` takes, so each rule is
tested without the machine it is about."""
from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ENGINES = {"vllm": "vllm", "transformers": "transformers", "nemo": "nemo", "voxcpm": "voxcpm",
           "llama.cpp": "llama_cpp", "torch": "torch"}


@dataclass
class Check:
    status: str  # ok | warn | fail | info
    what: str
    fix: str = ""

    def line(self) -> str:
        return f"{self.status.upper():5} {self.what}" + (f"\n      fix: {self.fix}" if self.fix else "")


def _du(path: str, limit: int = 20000) -> int | None:
    """Bytes under ``path`` (at most ``limit`` files looked at), None when it does not exist."""
    if not os.path.isdir(path):
        return None
    total, n = 0, 0
    for dirpath, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_size
            except OSError:
                pass
            n += 1
            if n >= limit:
                return total
    return total


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def _engines(pythons: dict[str, str]) -> dict[str, bool]:
    """Which engines are installed: here, or in the python of an engine's own environment."""
    from .engines import interpreters

    out = {}
    for k, mod in ENGINES.items():
        py = pythons.get(k)
        out[k] = (bool((interpreters.inspect(py, (mod,), ()).get("modules") or {}).get(mod)) if py
                  else importlib.util.find_spec(mod) is not None)
    return out


def read_machine(pythons: dict[str, str] | None = None) -> dict[str, Any]:
    """The readings the checks judge (each None where this machine cannot say); ``pythons``: engine ->
    the python of its own environment (``--voiceperf-python``)."""
    from . import provenance
    from .disturbance import gpu_state
    from .engines import caches

    m: dict[str, Any] = {"cpu_model": provenance.cpu_model(), "cores": os.cpu_count(),
                         "governor": _read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"),
                         "engines": _engines(pythons or {}), "pythons": dict(pythons or {}),
                         "psutil": importlib.util.find_spec("psutil") is not None,
                         "pynvml": importlib.util.find_spec("pynvml") is not None,
                         "cache_root": caches.root(), "cache_bytes": _du(caches.root())}
    try:
        m["load1"] = os.getloadavg()[0]
    except OSError:
        m["load1"] = None
    m["busy"] = _busy_processes()
    m["cuda"] = None
    if m["engines"]["torch"]:
        try:
            import torch

            m["cuda"] = torch.cuda.is_available()
            if m["cuda"]:
                m["gpu_name"] = torch.cuda.get_device_name()
                free, total = torch.cuda.mem_get_info()
                m["gpu_free"], m["gpu_total"] = free, total
        except Exception as exc:  # a broken CUDA install is a finding, not a crash
            m["cuda_error"] = f"{type(exc).__name__}: {exc}"
    if m.get("cuda") and m["pynvml"]:
        m["gpu"] = gpu_state()
        # this process holds a CUDA context now (it asked torch for the free memory): not another process
        m["gpu"]["gpu_pids"] = [p for p in m["gpu"].get("gpu_pids") or [] if p != os.getpid()]
        m["persistence"] = _nvml_persistence()
    return m


def _busy_processes(window: float = 0.5) -> list[tuple[str, float]]:
    """Other processes using a CPU core's tenth or more now (name, cores)."""
    try:
        import time

        import psutil
    except ImportError:
        return []
    me = os.getpid()
    procs = {}
    for p in psutil.process_iter(["name"]):
        try:
            procs[p.pid] = (p, sum(p.cpu_times()[:2]))
        except psutil.Error:
            pass
    time.sleep(window)
    out = []
    for pid, (p, t0) in procs.items():
        if pid == me:
            continue
        try:
            used = (sum(p.cpu_times()[:2]) - t0) / window
        except psutil.Error:
            continue
        if used >= 0.1:
            out.append((f"{p.info.get('name') or '?'}[{pid}]", round(used, 2)))
    return sorted(out, key=lambda x: -x[1])


def _nvml_persistence() -> bool | None:
    from .disturbance import _nvml_handle

    nvml, h = _nvml_handle()
    if nvml is None:
        return None
    try:
        return bool(nvml.nvmlDeviceGetPersistenceMode(h))
    except Exception:
        return None


def checks(m: dict[str, Any], disturbed_cpu: float = 0.25) -> list[Check]:
    out = [Check("info", f"machine: {m.get('cpu_model') or '?'}, {m.get('cores') or '?'} CPU cores"
                         + (f", GPU {m['gpu_name']}" if m.get("gpu_name") else ", no CUDA GPU"))]
    if not m.get("psutil"):
        out.append(Check("fail", "psutil is not installed: the disturbance watch is off, rounds taken while "
                                 "another process uses the cores count as clean",
                         "pip install psutil (or pip install 'pytest-voiceperf[gpu]')"))
    gov = m.get("governor")
    if gov is None:
        out.append(Check("info", "CPU frequency governor: not exposed here (a VM or container)"))
    elif gov != "performance":
        out.append(Check("warn", f"CPU frequency governor is {gov!r}: clocks ramp during a round",
                         "sudo cpupower frequency-set -g performance (pyperf system tune does this too)"))
    else:
        out.append(Check("ok", "CPU frequency governor is 'performance'"))
    busy = [(n, c) for n, c in (m.get("busy") or []) if c >= disturbed_cpu]
    if busy:
        names = ", ".join(f"{n} {c:.2f}" for n, c in busy[:5])
        out.append(Check("warn", f"other processes use CPU cores now ({names}): their rounds would be dropped "
                                 "as disturbed", "stop them, or run where nothing else runs"))
    elif m.get("busy") is not None and m.get("psutil"):
        out.append(Check("ok", "no other process uses a quarter core or more now"))
    if m.get("cuda_error"):
        out.append(Check("fail", f"torch cannot reach CUDA: {m['cuda_error']}", "check the driver and torch's CUDA build"))
    if m.get("cuda"):
        if not m.get("pynvml"):
            out.append(Check("warn", "nvidia-ml-py is not installed: GPU throttling, clocks and other GPU "
                                     "processes are not watched", "pip install nvidia-ml-py"))
        g = m.get("gpu") or {}
        if g.get("gpu_pids"):
            out.append(Check("warn", f"other processes hold the GPU: pids {g['gpu_pids']}",
                             "stop them; a shared GPU's figures are not the GPU's"))
        reasons = [r for r in g.get("reasons_names") or [] if r not in ("GpuIdle", "ApplicationsClocksSetting")]
        if reasons:
            out.append(Check("warn", f"the GPU's clocks are held back now: {', '.join(reasons)}",
                             "let it cool, check power limits (nvidia-smi -q -d PERFORMANCE)"))
        if m.get("persistence") is False:
            out.append(Check("warn", "GPU persistence mode is off: the driver reinitialises between processes",
                             "sudo nvidia-smi -pm 1"))
        if m.get("gpu_free") is not None and m.get("gpu_total"):
            share = m["gpu_free"] / m["gpu_total"]
            out.append(Check("ok" if share > 0.9 else "warn",
                             f"GPU memory free: {m['gpu_free'] / 2**30:.1f} of {m['gpu_total'] / 2**30:.1f} GiB",
                             "" if share > 0.9 else "another process holds GPU memory: engines get less KV cache"))
    missing = [k for k, ok in (m.get("engines") or {}).items() if not ok]
    have = [k + (f" (in {m['pythons'][k]})" if k in (m.get("pythons") or {}) else "")
            for k, ok in (m.get("engines") or {}).items() if ok]
    out.append(Check("info", f"engines installed: {', '.join(have) or 'none'}"
                             + (f"; not installed: {', '.join(missing)} (their claims are unmeasured)" if missing else ""),
                     "pip install 'pytest-voiceperf[vllm]' (nemo, voxcpm, llamacpp, transformers alike)" if missing else ""))
    cb = m.get("cache_bytes")
    if cb is None or cb < 2**20:
        out.append(Check("info", f"engine caches: {m.get('cache_root')} is empty (a cold run: engines compile at "
                                 "their first start; nothing is measured then, the run takes longer)",
                         "keep VOICEPERF_CACHE between CI jobs (the shipped workflows cache it)"))
    else:
        out.append(Check("ok", f"engine caches: {m.get('cache_root')} holds {cb / 2**20:.0f} MiB (warm starts)"))
    return out


def main(disturbed_cpu: float = 0.25, pythons: dict[str, str] | None = None) -> int:
    """Print the checks; exit 1 when one failed (a run here would measure something else)."""
    found = checks(read_machine(pythons), disturbed_cpu)
    for c in found:
        print(c.line())
    return 1 if any(c.status == "fail" for c in found) else 0
