"""What the machine was doing while a round was measured.

A round measured while something else loaded the machine is *disturbed*, not slow: its figure
is dropped (and the round taken again) instead of being judged. Watched per round:

- CPU time used by processes outside this pytest process and its descendants (the engine
  workers), summed per process with psutil, and the hypervisor's steal time (/proc/stat): above
  ``cpu_limit`` cores on average over the round (default 0.25 of one core) the round is disturbed.
  Another xdist worker is another process, so a worker measuring beside it is caught too.
- On CUDA (nvidia-ml-py): SM and memory clocks, temperature, power, the clock-event (throttle)
  reasons, and compute processes on the GPU that are not ours. Thermal or hardware slowdown and
  power-brake reasons, or another process on the GPU, make the round disturbed. The software power
  cap (SwPowerCap) is recorded but not counted: it is the card's own sustained limit under load.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

# an in-process probe's own engine workers: never tolerated above this, whatever the limit for
# other processes (a busy-polling vLLM worker cut a CPU GEMM ceiling 3.5x)
ENGINE_LIMIT = 0.25

# the shortest window over which a round's load is measured (CPU times tick at 10 ms)
MIN_WINDOW_S = 0.5
# a short round's window may start at a snapshot taken up to this long before it ended
LOOKBACK_MAX_S = 5.0
# (time, CPU seconds by pid, steal seconds, taken by an in-process probe's watch) at recent watch
# starts and stops, newest last
_snapshots: list[tuple[float, dict, float, bool]] = []


def _keep_snapshot(t: float, cpu: dict, steal: float, own_only: bool) -> None:
    _snapshots.append((t, cpu, steal, own_only))
    while _snapshots and (t - _snapshots[0][0] > LOOKBACK_MAX_S or len(_snapshots) > 64):
        _snapshots.pop(0)


def _lookback(now: float, own_only: bool) -> tuple[float, dict, float] | None:
    """The newest snapshot at least MIN_WINDOW_S and at most LOOKBACK_MAX_S before ``now``. For an
    in-process probe only back through in-process rounds: an engine round in between may have left
    the session's engines busy, which would count against it."""
    for t, cpu, steal, own in reversed(_snapshots):
        if own_only and not own:
            return None
        if MIN_WINDOW_S <= now - t <= LOOKBACK_MAX_S:
            return t, cpu, steal
    return None

# NVML clock-event reasons (nvmlClocksEventReason*)
REASONS = {0x1: "GpuIdle", 0x2: "ApplicationsClocksSetting", 0x4: "SwPowerCap", 0x8: "HwSlowdown",
           0x10: "SyncBoost", 0x20: "SwThermalSlowdown", 0x40: "HwThermalSlowdown", 0x80: "HwPowerBrakeSlowdown",
           0x100: "DisplayClockSetting"}
DISTURBING = 0x8 | 0x20 | 0x40 | 0x80


def _our_pids() -> set[int]:
    import psutil

    me = psutil.Process()
    pids = {me.pid}
    try:
        pids.update(p.pid for p in me.children(recursive=True))
    except psutil.Error:
        pass
    return pids


def tree_cpu_seconds() -> float | None:
    """User + system CPU seconds used so far by this process and its descendants (None without psutil)."""
    try:
        import psutil
    except ImportError:
        return None
    total = 0.0
    for pid in _our_pids():
        try:
            total += sum(psutil.Process(pid).cpu_times()[:2])
        except psutil.Error:
            pass
    return total


def _cpu_by_pid() -> dict[int, tuple[float, str]]:
    import psutil

    out = {}
    for p in psutil.process_iter(["name", "cpu_times"]):
        ct = p.info.get("cpu_times")
        if ct is None:
            continue
        out[p.pid] = (ct.user + ct.system, p.info.get("name") or "?")
    return out


def _steal() -> float:
    """Seconds of CPU time the hypervisor gave to other guests (all CPUs)."""
    try:
        with open("/proc/stat") as f:
            parts = f.readline().split()
        return int(parts[8]) / os.sysconf("SC_CLK_TCK") if len(parts) > 8 else 0.0
    except (OSError, ValueError, IndexError):
        return 0.0


def wait_quiet(limit: float, timeout: float = 5.0, window: float = 0.25) -> float:
    """Wait until this process's descendants (engine workers) use less than ``limit`` cores.

    An engine keeps working after its last request (vLLM's workers busy-poll their message queue
    for 1 s, seen here at 1.0 core): an in-process probe started then shares the cores with it
    (a CPU bf16 GEMM measured 268 instead of 950 GFLOP/s). Returns the seconds waited."""
    import psutil

    t0 = time.monotonic()
    me = psutil.Process()
    while time.monotonic() - t0 < timeout:
        try:
            kids = me.children(recursive=True)
        except psutil.Error:
            return time.monotonic() - t0
        if not kids:
            break
        before = {}
        for k in kids:
            try:
                before[k.pid] = sum(k.cpu_times()[:2])
            except psutil.Error:
                pass
        time.sleep(window)
        used = 0.0
        for k in kids:
            try:
                used += sum(k.cpu_times()[:2]) - before.get(k.pid, 0.0)
            except psutil.Error:
                pass
        if used / window < limit:
            break
    return time.monotonic() - t0


def _nvml_handle():
    try:
        import pynvml
    except ImportError:
        return None, None
    try:
        pynvml.nvmlInit()
        vis = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
        idx = int(vis) if vis.isdigit() else 0
        return pynvml, pynvml.nvmlDeviceGetHandleByIndex(idx)
    except Exception:
        return None, None


def gpu_state(nvml=None, handle=None) -> dict | None:
    """SM/memory clocks (MHz), temperature (C), power (W), clock-event reasons, other GPU processes."""
    if nvml is None:
        nvml, handle = _nvml_handle()
    if nvml is None or handle is None:
        return None
    out: dict = {}

    def get(key, fn, *a):
        try:
            out[key] = fn(handle, *a)
        except Exception:
            pass

    get("sm_mhz", nvml.nvmlDeviceGetClockInfo, nvml.NVML_CLOCK_SM)
    get("mem_mhz", nvml.nvmlDeviceGetClockInfo, nvml.NVML_CLOCK_MEM)
    get("temp_c", nvml.nvmlDeviceGetTemperature, nvml.NVML_TEMPERATURE_GPU)
    get("power_mw", nvml.nvmlDeviceGetPowerUsage)
    fn = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
        nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
    if fn is not None:
        get("reasons", fn)
    try:
        procs = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
        out["gpu_pids"] = sorted({int(p.pid) for p in procs})
    except Exception:
        pass
    if "power_mw" in out:
        out["power_w"] = round(out.pop("power_mw") / 1000, 1)
    if "reasons" in out:
        out["reasons_names"] = [n for bit, n in REASONS.items() if out["reasons"] & bit]
    return out


@dataclass
class Watch:
    """Started before a round, :meth:`stop` after it: the causes of disturbance, if any."""

    cpu_limit: float = 0.25
    gpu: bool = False
    # an in-process probe (no engine): this process alone is the measurement, so the session's
    # engine workers count as load beside it (an idle engine that spins takes cores from a GEMM)
    own_only: bool = False
    t0: float = 0.0
    cpu0: dict = field(default_factory=dict)
    steal0: float = 0.0
    gpu0: dict | None = None
    ok: bool = True

    def start(self) -> Watch:
        try:
            self.cpu0 = _cpu_by_pid()
        except Exception:  # psutil missing or /proc unreadable: nothing to watch, say so in the record
            self.ok = False
        self.steal0 = _steal()
        self.gpu0 = gpu_state() if self.gpu else None
        self.t0 = time.monotonic()
        if self.ok:
            _keep_snapshot(self.t0, self.cpu0, self.steal0, self.own_only)
        return self

    def stop(self) -> dict:
        elapsed = time.monotonic() - self.t0
        rec: dict = {"wall_s": round(elapsed, 3)}
        # CPU times come in clock ticks (10 ms): over a round of milliseconds one tick reads as many
        # cores. A short round is watched over at least MIN_WINDOW_S that holds it (dividing a short
        # round's load by 0.5 s instead hid a busy loop on the other core: 0.06 of 1.0 core during a
        # 66 ms bf16 matmul round, whose figure came out at a third): from an earlier snapshot where
        # one is recent, else from its start on, waiting out the rest (0.5 s after each of the 141
        # short rounds was 37 s of an 881 s H100 run). An in-process probe looks back only through
        # in-process rounds: after an engine round the session's engine workers may still have been
        # busy, and they count against it (see below)
        t0, cpu0, steal0 = self.t0, self.cpu0, self.steal0
        if elapsed < MIN_WINDOW_S:
            snap = _lookback(time.monotonic(), self.own_only) if self.ok else None
            if snap is not None:
                t0, cpu0, steal0 = snap
                rec["window_from"] = "a snapshot before the round"
            else:
                time.sleep(MIN_WINDOW_S - elapsed)
        wall = time.monotonic() - t0
        rec["window_s"] = round(wall, 3)
        causes: list[str] = []
        if self.ok:
            ours = {os.getpid()} if self.own_only else _our_pids()
            engines = _our_pids() - {os.getpid()} if self.own_only else set()
            cpu1 = _cpu_by_pid()
            _keep_snapshot(time.monotonic(), cpu1, _steal(), self.own_only)
            others: list[tuple[float, int, str]] = []
            for pid, (t1, name) in cpu1.items():
                if pid in ours:
                    continue
                c0 = cpu0.get(pid, (0.0, name))[0] if pid in cpu0 else 0.0
                d = t1 - c0
                if d > 0:
                    others.append((d, pid, name))
            other = sum(d for d, _, _ in others)
            rec["other_cpu_cores"] = round(other / wall, 3)
            own_engines = sum(d for d, pid, _ in others if pid in engines)
            if own_engines / wall > min(self.cpu_limit, ENGINE_LIMIT) and other / wall <= self.cpu_limit:
                causes.append(f"this session's engine workers used {own_engines / wall:.2f} CPU cores beside "
                              f"an in-process probe (limit {min(self.cpu_limit, ENGINE_LIMIT):g})")
            top = sorted(others, reverse=True)[:3]
            rec["other_top"] = [f"{name}[{pid}] {d / wall:.2f}" for d, pid, name in top if d / wall >= 0.01]
            if other / wall > self.cpu_limit:
                causes.append(f"other processes used {other / wall:.2f} CPU cores (limit {self.cpu_limit:g}; "
                              + ", ".join(rec["other_top"]) + ")")
        else:
            rec["other_cpu_cores"] = None
        steal = (_steal() - steal0) / wall
        rec["steal_cores"] = round(steal, 3)
        if steal > self.cpu_limit:
            causes.append(f"the hypervisor stole {steal:.2f} CPU cores (other guests)")
        if self.gpu:
            g1 = gpu_state()
            rec["gpu_start"], rec["gpu_end"] = self.gpu0, g1
            for g in (self.gpu0, g1):
                if g and g.get("reasons", 0) & DISTURBING:
                    causes.append("GPU throttled: " + ",".join(n for b, n in REASONS.items()
                                                               if g["reasons"] & b & DISTURBING))
                    break
            ours = _our_pids()
            foreign = sorted({p for g in (self.gpu0, g1) if g for p in g.get("gpu_pids", []) if p not in ours})
            # a process in a container may not see the pids of the host's GPU processes; only
            # pids that exist in our view and are not ours count as another user of the GPU
            foreign = [p for p in foreign if _exists(p)]
            if foreign:
                causes.append(f"other processes on the GPU: {foreign}")
        rec["disturbed"] = causes
        return rec


def _exists(pid: int) -> bool:
    try:
        import psutil

        return psutil.pid_exists(pid)
    except ImportError:
        return False
