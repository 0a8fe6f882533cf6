"""The voiceperf session: probes measured once and shared, ceilings, engines, results."""
from __future__ import annotations

import contextlib
import dataclasses
import itertools
import math
import os
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import expr, models, provenance, stats, timing
from .claims import Case
from .engines import EnginePool, allocator, caches, fresh_rounds, is_light
from .exceptions import EngineError, InvalidMeasurement, TimeLimit, Unmeasured
from .probes import Measurement, Registry, call_key, spread
from .verdict import fmt_value, judge

# which ceiling a figure is checked against: implied key -> (probe, args, output, label)
CEILINGS: dict[str, tuple[str, dict, str, str]] = {
    "read_bw": ("hw.read_bandwidth", {}, "read_bw", "measured read bandwidth"),
}


# the hardware ceilings a session measures, and the output each one gives
CEILING_OUTPUTS = {"hw.read_bandwidth": "read_bw", "hw.copy_bandwidth": "copy_bw", "hw.matmul": "flops"}
END_DRIFT = 0.05  # a ceiling measured again at the end that moved beyond this: the machine changed state
END_READINGS = 3  # the readings of an end check whose first reading moved beyond END_DRIFT


def _beyond(reading: float, session: float) -> bool:
    return bool(session) and abs(reading / session - 1) > END_DRIFT


def ceiling_for(key: str, device: str = "cuda") -> list[tuple[str, dict, str, str]]:
    """The ceilings a figure is checked against; the highest one that measures bounds it."""
    if key in CEILINGS:
        return [CEILINGS[key]]
    if key.startswith("matmul_flops:"):
        dtype = key.split(":", 1)[1]
        out = [("hw.matmul", {"dtype": dtype}, "flops", f"measured {dtype} matmul peak")]
        if device != "cuda" and dtype in ("bfloat16", "float16"):
            # a CPU without native half-precision GEMM (AVX2: torch's bfloat16 matmul 0.83 GFLOP/s) widens
            # to float32, as vLLM's CPU kernels do (4.8 GFLOP/s there): its float32 peak bounds half precision too
            out.append(("hw.matmul", {"dtype": "float32"}, "flops", "measured float32 matmul peak"))
        return out
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
    bounds: list | None = None  # [lower, upper] of the expectation, None where open
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
    # the interval verdict: round-level metric values, their confidence interval, and why
    ci: tuple[float, float] | None = None
    ci_method: str = ""
    rounds: int = 0
    round_values: list[float] = field(default_factory=list)
    rep_samples: list[float] = field(default_factory=list)  # the metric per repetition, all rounds
    decision: str = ""  # passed | failed | inconclusive (before xfail and the gate)
    modes: list | None = None
    unstable: list | None = None  # [slowest, fastest] repetition when they span 1.5x or more in this run
    disturbed: list[str] = field(default_factory=list)  # causes of the rounds dropped as disturbed
    engine_instances: int | None = None  # engine figures: how many engine instances the rounds came from
    # the first case of a group of cases sharing rounds (see VoiceperfSession.plan): the group's
    # rounds were taken in its setup, so its duration_s holds them, for every case of the group
    shared_rounds: dict | None = None
    claim_sha: str = ""  # of the claim file (see Claim.sha)

    def to_json(self) -> dict:
        d = dict(self.__dict__)
        d["spread"] = list(self.spread) if self.spread else None
        d["ci"] = list(self.ci) if self.ci else None
        return d


@dataclass
class Options:
    device: str = "auto"
    profile: str | None = None
    strict: bool = False
    json_path: str | None = None
    model_overrides: dict[str, str] = field(default_factory=dict)
    data: dict[str, str] = field(default_factory=dict)
    bins: dict[str, str] = field(default_factory=dict)  # native engines by name: library or build folder
    spec_overrides: dict[str, float] = field(default_factory=dict)
    timeout: float = 900.0
    timeout_cap: float | None = None  # --voiceperf-timeout or the ini, when the operator set one
    start_timeout: float = 600.0
    ceiling_slack: float = 0.03
    max_live_engines: int = 1
    min_rounds: int = 3
    max_rounds: int = 6
    round_seconds: float = 60.0
    noise_floor: float = 0.01  # the interval is never narrower than ±1% of the figure (run-to-run drift)
    disturbed_cpu: float = 0.25  # other processes' CPU cores above which a round is disturbed
    gate_max_rounds: int = 10  # with a baseline: rounds a case may take until the gate decides its figures
    quiet_wait: float = 120.0  # after min_rounds disturbed rounds in a row: seconds to wait for a quiet machine
    gate_round_seconds: float = 180.0  # with a baseline: seconds the rounds added for the gate may take per case
    save_min_rounds: int = 0  # a run saved as a baseline (--voiceperf-save): rounds per timed case at least
    engine_args: dict[str, dict] = field(default_factory=dict)  # engine family -> options (ini, command line)


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
    return provenance.cpu_model()


def _instance_of(spec, args: dict) -> str | None:
    """The engine instance a probe call needs ("family:key"), None in-process or where its engine_key
    cannot read the arguments (the probe itself then says so)."""
    try:
        return spec.instance(args)
    except Exception:
        return None


class ProbeContext:
    """What a probe function sees: the device, other probes, engines, models, progress."""

    def __init__(self, session: VoiceperfSession, deadline: float, round: int | None = None, attempt: int = 0):
        self.session = session
        self.deadline = deadline
        # the round being measured (None outside a round): a probe that calls another probe gets
        # that probe's figure of the same round; ``attempt`` is unique per probe call (a disturbed
        # round taken again is a new measurement, never a cached one)
        self.round = round
        self.attempt = attempt
        # the engine instance of the probe whose round this is ("family:key"; None in-process)
        self.instance: str | None = None
        # the probe calls this round read (keys), kept on the outer probe: a figure computed from a
        # ceiling read inside its round (the decode fit's read bandwidth) moves when that ceiling does
        self.reads: set[str] | None = None

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
        if self.reads is not None:
            self.reads.add(self.session._key(name, args))
        if self.round is not None:
            spec = self.session.registry.get(name)
            if spec is not None and spec.engine and _instance_of(spec, args) != self.instance:
                # an engine probe nested in another probe's round (the decode fit's model variants,
                # the pipeline's ASR/LLM/TTS) takes its first min_rounds rounds in a row while its
                # engine is live: round-major order over several engines restarted every one of them
                # each round (H200, a resumed run: four vLLM starts of 40-80 s per round of a fit).
                # On the outer probe's own engine (llm.crossover's sweep) nothing restarts: its rounds
                # stay one a round (in a row they cost two extra 1-and-16 decode pairs, ~15 s on the CPU)
                self.session.measure_round(name, args, self, max(self.round, self.session.options.min_rounds - 1))
            return self.session.measure_round(name, args, self, self.round)
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

    def engine_args(self, family: str) -> dict:
        """The user's options for the engines of ``family`` (ini voiceperf_engine_args, --voiceperf-engine-arg)."""
        return dict(self.session.options.engine_args.get(family) or {})

    def model(self, name: str) -> dict:
        """{name, family, config, weights: PATH|None, dummy: bool}; unknown names are unmeasured.

        A name is a catalog architecture, a name given with ``--voiceperf-model NAME=PATH``, or a
        path to a Hugging Face-style folder (or its config.json). A folder with only its
        config.json gives dummy weights of that architecture, one with weight files real ones."""
        spec = models.get(name)
        path = self.session.options.model_overrides.get(name)
        config = spec.config if spec else None
        weights = path
        if path is None and spec is None and ("/" in name or name.endswith(".json")):
            cand = Path(name) if Path(name).is_absolute() else self.session.rootdir / name
            path = str(cand) if cand.exists() else None
            if path is None:
                raise Unmeasured(f"model {name!r}: no such folder or config.json (relative to {self.session.rootdir})")
        if (path is not None and (spec is None or spec.family == "llm") and Path(path).exists()
                and (Path(path).is_dir() or path.endswith(".json"))):
            try:
                config, weights = models.from_path(path)
            except ValueError as exc:
                if name in self.session.options.model_overrides and spec is None:
                    config = None  # another family's checkpoint (VoxCPM, NeMo): its engine reads the folder
                else:
                    raise Unmeasured(f"model {name!r}: {exc}") from None
        if spec is None and config is None and weights is None:
            raise Unmeasured(f"unknown model {name!r}; known: {', '.join(models.names())} "
                             f"(or name a model folder: --voiceperf-model {name}=PATH, PATH holding its config.json "
                             "and, for real weights, the weights)")
        family = spec.family if spec else (models.family_of(config) if config else None)
        self.session.models_used[name] = {"weights": weights, "dummy": weights is None,
                                          "model_type": (config or {}).get("model_type"),
                                          # the architecture's scalar settings: the gate lists what changed
                                          "config": {k: v for k, v in (config or {}).items()
                                                     if isinstance(v, (int, float, str, bool))}}
        return {"name": name, "family": family, "config": config, "weights": weights, "dummy": weights is None}

    def data(self, name: str) -> str:
        path = self.session.options.data.get(name)
        if not path:
            raise Unmeasured(f"needs data set {name!r}; give it with --voiceperf-data {name}=PATH")
        return path

    def binary(self, name: str, env: str, how: str) -> str:
        """The path given with ``--voiceperf-bin NAME=PATH`` (or in ``env``); unmeasured with ``how`` when absent."""
        path = self.session.options.bins.get(name) or os.environ.get(env, "")
        if not path:
            raise Unmeasured(f"needs {name}, which no package registry has: {how}; then give "
                             f"--voiceperf-bin {name}=PATH (or set {env})")
        if not os.path.exists(path):
            raise Unmeasured(f"--voiceperf-bin {name}={path}: no such file or folder")
        return os.path.abspath(path)

    def progress(self, msg: str) -> None:
        self.session.progress(msg)


class VoiceperfSession:
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
        self._cache: dict[str, Probed | Unmeasured] = {}  # probe call -> its rounds, or why it cannot run
        self.results: list[CaseResult] = []
        self.models_used: dict[str, dict] = {}
        self.gate = None  # the baseline gate (gate.Gate), when the run has one: rounds go on until it decides
        self.round_serial = 0  # rounds taken so far (what remembered engine results are tagged with)
        self._case_serial = 0
        self._case_round: tuple | None = None  # (case serial, round) whose rounds are being taken
        self.last_heavy: str | None = None  # the heavy engine instance the latest round ran on (live after it)
        # rounds taken together for several cases on one engine (see plan()): engine instance -> the
        # probe calls and the cases using each, until taken; case -> its group
        self._groups: dict[str, dict[str, tuple[str, dict, set[int]]]] = {}
        self._group_of: dict[int, str] = {}
        self._memo: dict[str, dict] = {}  # store -> key -> (round serial, value): see remember()
        self._scratch: str | None = None
        self.started = time.time()
        self.complete = False
        self.env_start = provenance.environment(self.device)
        self.env_end: dict | None = None
        self.ceilings_end: list[dict] = []
        self.timing = timing.Timing()
        self.worker_timing: list[dict] = []  # xdist controller: each worker's table
        self.static_provenance: dict = {}  # git commit, packages: computed once per session
        # whether the engines' compile caches held anything before this run filled them
        self.static_provenance["caches"] = caches.describe()
        self.static_provenance["engine_heap"] = allocator.describe(os.environ, self.device)
        self.engines = EnginePool(Path(tempfile.mkdtemp(prefix="voiceperf-logs-")),
                                  start_timeout=options.start_timeout,
                                  max_live=options.max_live_engines, progress=self.progress, timing=self.timing)

    # -- probes ----------------------------------------------------------------------------
    def measure(self, name: str, args: dict, ctx: ProbeContext) -> Measurement:
        """The probe's figure over the rounds taken so far (at least one): medians of round figures."""
        pr = self._probed(name, args)
        if not pr.rounds:
            self.measure_round(name, args, ctx, 0)
        return pr.aggregate()

    def _key(self, name: str, args: dict | None) -> str:
        """A probe call's cache key with the probe's defaults filled in: claims that spell a default
        out and claims that leave it off share one call (VoxCPM synthesis ran twice over)."""
        spec = self.registry.get(name)
        return call_key(name, {**spec.params, **(args or {})} if spec else args)

    def probed(self, name: str, args: dict) -> Probed | None:
        hit = self._cache.get(self._key(name, args))
        return hit if isinstance(hit, Probed) else None

    def _probed(self, name: str, args: dict) -> Probed:
        key = self._key(name, args)
        hit = self._cache.get(key)
        if isinstance(hit, Unmeasured):
            raise hit
        if isinstance(hit, Probed):
            return hit
        if self.registry.get(name) is None:
            raise Unmeasured(f"unknown probe {name!r}")
        pr = self._cache[key] = Probed(name, args)
        return pr

    def remember(self, store: str, key, fn):
        """``fn()`` once per ``(store, key)`` for the session: probes share engine results through it
        (a figure asked for with other spellings of its arguments). Each entry is tagged with the
        round that made it, and a dropped (disturbed) round forgets what it made."""
        memo = self._memo.setdefault(store, {})
        if key not in memo:
            memo[key] = (self.round_serial, fn())
        return memo[key][1]

    def remembers(self, store: str, key) -> bool:
        return key in self._memo.get(store, {})

    def forget_round(self, serial: int) -> None:
        for memo in self._memo.values():
            for k in [k for k, (made_by, _) in memo.items() if made_by == serial]:
                del memo[k]

    def measure_round(self, name: str, args: dict, ctx: ProbeContext, r: int) -> Measurement:
        """Round ``r`` of the probe (taking rounds until it exists; disturbed rounds are dropped and
        taken again, at most ``min_rounds`` times). A probe whose figures do not vary between
        repetitions (counts, datasheet figures) has one round, which stands for every round."""
        pr = self._probed(name, args)
        spec = self.registry.get(name)
        while len(pr.rounds) <= r and not (pr.rounds and pr.deterministic):
            # ``min_rounds`` rounds dropped in a row: the machine is disturbed now. Counted in a row, not
            # over the probe's life: a probe shared by several cases and paired again and again takes
            # many rounds, and three drops spread over a long run (the H100's hypervisor stealing 0.25-0.32
            # cores now and then) voided llm-precision-speedup[qwen3-4b] with 5 clean rounds in hand
            if pr.dropped_in_a_row >= self.options.min_rounds:
                # decide rather than give up: a load that comes and goes (a minute of another job) is
                # waited out once per probe call, then its rounds are taken again
                if not pr.waited_quiet and self.options.quiet_wait > 0:
                    pr.waited_quiet = True
                    waited = self.wait_for_quiet_machine(name, min(self.options.quiet_wait, ctx.time_left()))
                    if waited is not None:
                        pr.dropped_in_a_row = 0
                        continue
                causes = "; ".join(dict.fromkeys(c for d in pr.dropped for c in d["disturbed"]))
                raise Unmeasured(f"disturbed: {len(pr.dropped)} rounds of {name} dropped, {len(pr.rounds)} clean "
                                 f"({causes})")
            self._take_round(spec, pr, ctx)
        return pr.rounds[min(r, len(pr.rounds) - 1)]

    def wait_for_quiet_machine(self, name: str, timeout: float) -> float | None:
        """Wait until two seconds in a row pass without outside load (the rounds' own test), at most
        ``timeout`` seconds: the seconds waited, or None when the machine stayed busy."""
        from .disturbance import Watch

        self.progress(f"{name}: {self.options.min_rounds} rounds in a row dropped as disturbed; waiting up to "
                      f"{timeout:.0f} s for a quiet machine, then taking them again")
        t0 = time.monotonic()
        with self.timing.phase(timing.QUIET):
            while time.monotonic() - t0 < timeout:
                w = Watch(cpu_limit=self.options.disturbed_cpu, gpu=self.device == "cuda").start()
                time.sleep(2.0)
                if not w.stop()["disturbed"]:
                    return time.monotonic() - t0
        return None

    @staticmethod
    def _nested_engine(spec) -> bool:
        """Probes without an engine of their own that call engine probes (pipeline.turn)."""
        return spec.name.startswith("pipeline.")

    def _take_round(self, spec, pr: Probed, ctx: ProbeContext) -> None:
        from .disturbance import ENGINE_LIMIT, Watch, wait_quiet

        rctx = ProbeContext(self, ctx.deadline, round=len(pr.rounds), attempt=pr.attempts)
        rctx.instance = _instance_of(spec, pr.args)
        if rctx.instance is not None and not is_light(rctx.instance.split(":", 1)[0]):
            self.last_heavy = rctx.instance
        rctx.reads = pr.reads
        pr.attempts += 1
        self.round_serial += 1
        serial = self.round_serial
        own_only = spec.engine is None and not self._nested_engine(spec)
        # an engine process that served an earlier round of this call serves no more of them where its
        # family asks for it (Family.fresh_rounds: the process's own state would be in every round)
        for eng in self.engines.live():
            if eng.serial in pr.engine_serials:
                self.engines.retire(eng)
        handouts = self.engines.handouts
        waited = 0.0
        if own_only and self.engines.started:
            with self.timing.phase(timing.QUIET):
                waited = wait_quiet(min(self.options.disturbed_cpu, ENGINE_LIMIT))
        watch = Watch(cpu_limit=self.options.disturbed_cpu, gpu=self.device == "cuda", own_only=own_only).start()
        try:
            with self.timing.phase(timing.IN_PROCESS):  # engine starts and calls inside are their own phases
                if own_only:  # an engine call has its own time limit; code in this process has none
                    with time_limit(rctx.deadline - time.monotonic()):
                        m = spec(rctx, **pr.args)
                else:
                    m = spec(rctx, **pr.args)
        except TimeLimit:
            raise EngineError(f"probe {pr.name} ran past the case's time limit (claim timeout or "
                              f"--voiceperf-timeout) and was stopped") from None
        except Unmeasured as exc:
            if not pr.rounds:  # a probe that cannot run here says so once for the session
                self._cache[self._key(pr.name, pr.args)] = exc
            raise
        except (EngineError, KeyboardInterrupt, SystemExit):
            raise
        except MemoryError:
            raise EngineError(f"probe {pr.name} ran out of memory") from None
        except Exception as exc:  # a broken probe is an error verdict, not a crash of the run
            import traceback

            raise EngineError(f"probe {pr.name} failed: {type(exc).__name__}: {exc}",
                              "".join(traceback.format_exception(exc)[-6:])) from None
        if not isinstance(m, Measurement):
            raise TypeError(f"probe {pr.name} returned {type(m).__name__}, not Measurement")
        with self.timing.phase(timing.WATCH):  # a short round's window (and the /proc and NVML reads)
            rec = watch.stop()
        timed = sorted(set(m.values) - spec.exact)
        if timed and not spec.one_figure and not m.invalid and not m.has_samples:
            broken = InvalidMeasurement(
                f"measurement invalid: probe {pr.name} returned no samples for its timed outputs "
                f"({', '.join(timed)}): rounds decide a timed figure, one round of it decides nothing. Give the "
                f"per-run figures as Measurement(values, samples), declare the outputs that are counts in "
                f"@probe(..., exact=...), or @probe(..., one_figure=True) for a search")
            if not pr.rounds:
                self._cache[self._key(pr.name, pr.args)] = broken
            raise broken
        rec["attempt"] = pr.attempts - 1
        fresh = [e for e in self.engines.live() if e.handed_out > handouts and fresh_rounds(e.family)]
        if fresh and spec.engine:  # a probe that nests others leaves their processes to their own rounds
            rec["engine_pids"] = sorted(e.proc.pid for e in fresh)
            pr.engine_serials |= {e.serial for e in fresh}
        if waited:
            rec["waited_for_engines_s"] = round(waited, 2)
        if rec["disturbed"]:
            pr.dropped.append(rec)
            pr.dropped_in_a_row += 1
            self.forget_round(serial)
            self.progress(f"{pr.name}: round dropped, machine disturbed: {'; '.join(rec['disturbed'])}")
            return
        try:
            self.check_ceilings(pr.name, m, ctx)
        except Unmeasured as exc:  # an impossible figure voids the probe call for the session
            if not pr.rounds:
                self._cache[self._key(pr.name, pr.args)] = exc
            raise
        pr.records.append(rec)
        pr.dropped_in_a_row = 0
        pr.rounds.append(m)
        pr.taken_in.append(self._case_round)
        pr.aggregated = None

    def check_ceilings(self, name: str, m: Measurement, ctx: ProbeContext) -> None:
        """A figure above a ceiling measured in this session is a broken measurement."""
        for key, implied in m.implies.items():
            if implied is None or not math.isfinite(implied):
                continue
            found, why = [], []
            for pname, pargs, out, label in ceiling_for(key, self.device):
                try:
                    self.measure(pname, pargs, ctx)
                    # the best round: a ceiling is what the hardware can do; its rounds go with it, so
                    # that the gate can tell a machine that changed from a ceiling's own spread
                    cp = self._probed(pname, pargs)
                    found.append((cp.best(out), label, [r.values[out] for r in cp.rounds]))
                except Unmeasured as exc:
                    why.append(str(exc))
            if not found:
                m.info.setdefault("ceiling_unchecked", {})[key] = "; ".join(why)
                continue
            ceil, label, rounds = max(found, key=lambda c: c[0])
            m.info.setdefault("ceilings", {})[key] = {"implied": implied, "ceiling": ceil, "ratio": implied / ceil,
                                                      "label": label, "rounds": rounds}
            if implied > ceil * (1 + self.options.ceiling_slack):
                unit = _ceiling_unit(key)
                raise InvalidMeasurement(
                    f"measurement invalid: {name} implies {fmt_value(implied, unit)}, "
                    f"{implied / ceil:.2f}x the {label} ({fmt_value(ceil, unit)}); "
                    f"a figure above a physical ceiling is a broken measurement ({m.info.get('invalid_hint', 'check caching and timing')})")
        if m.invalid:
            below = "; ".join(f"it implies {fmt_value(c['implied'], _ceiling_unit(k))}, "
                              f"{c['ratio']:.2f}x the {c['label']}: below that ceiling, so only the engine's "
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
            mod = req[7:]
            return None if module_present(mod) else f"module {mod!r} is not installed"
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
        result.bounds = list(claim.expect.bounds())
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
        # a claim's own timeout stands in for the default; a limit the operator set is a cap it cannot raise
        limit = min(claim.timeout or self.options.timeout, self.options.timeout_cap or math.inf)
        deadline = time.monotonic() + limit
        ctx = ProbeContext(self, deadline)
        calls = case.calls()
        names = dict(case.params)
        names.update(device=self.device, profile=self.profile)
        rc = claim.rounds
        n_min = rc.min or self.options.min_rounds
        n_max = max(n_min, rc.max or self.options.max_rounds)
        if self.options.save_min_rounds and not rc.min:
            # a saved run is a baseline: its rounds bound what any later run can decide against it
            # (3 baseline rounds leave the Welch interval a t quantile of 2 degrees of freedom)
            n_min = max(n_min, self.options.save_min_rounds)
            n_max = max(n_max, n_min)
        exact = self._exact_metric(claim.metric, calls)
        if exact:  # counts, not timings: one round decides
            n_min = n_max = 1
        budget = rc.seconds or self.options.round_seconds
        started = time.monotonic()
        n = n_min
        futility = ""
        group = self._group_of.get(id(case))
        if group in self._groups:
            result.shared_rounds = self._take_group(group, case, calls)
            started = time.monotonic()  # the case's round budget counts its own rounds
        self._case_serial += 1
        at = self._rounds_used(claim, calls, case.name)
        # a probe known not to run here first, then probes new to the case: one that cannot run here
        # ends it before shared ones run again
        held = {c.alias for c in calls if (pr := self.probed(c.probe, c.args)) is not None and pr.rounds}
        known = {c.alias for c in calls if isinstance(self._cache.get(self._key(c.probe, c.args)), Unmeasured)}
        blocks = self._blocks(sorted(calls, key=lambda c: (c.alias not in known, c.alias in held)), case.name,
                              live_first=not known)
        try:
            while True:
                # round-major within a block: round r of each of its probes before round r+1 of any.
                # Blocks (engines) run forth, then back for the next extra round, and so on: the
                # engine live after the last block's rounds takes the new round first, one start
                # fewer per extra round (llm-decode-overhead's three llama.cpp engines: 2 starts, not 3)
                for block in (blocks if (n - n_min) % 2 == 0 else blocks[::-1]):
                    for r in range(n):
                        self._case_round = (self._case_serial, r)
                        for call in block:
                            self._round_of(call, at, r, ctx)
                            if time.monotonic() > deadline:
                                raise EngineError(f"the claim's time limit of {limit:.0f}s "
                                                  "was hit")
                ev = self._evaluate(claim, calls, names, n, exact, at)
                undecided = ev["decision"] == "inconclusive" and not ev["deterministic"]
                # with a baseline, rounds also go on until each figure the gate compares is decided
                waiting = [] if ev["deterministic"] else self._gate_pending(calls, result, at, n, ev)
                if not undecided and not waiting:
                    break
                spent = time.monotonic() - started
                cap = n_max if not waiting else max(n_max, self.options.gate_max_rounds)
                limit = budget if not waiting else max(budget, self.options.gate_round_seconds)
                if n >= cap or spent > limit or time.monotonic() + spent / n > deadline:
                    break
                if undecided and not waiting:
                    hopeless = stats.futile(ev["round_values"], *claim.expect.bounds(), n_max, self._floor(claim))
                    if hopeless is not None:
                        futility = (f"; more rounds would not decide it: {n_max} rounds with this mean and spread "
                                    f"would still give {_fmt_ci(hopeless, claim.unit)}")
                        break
                if undecided and n < n_max:
                    self.progress(f"{case.claim.id}: " + ("one round decides nothing" if ev["one_round"]
                                                          else f"interval {_fmt_ci(ev['ci'], claim.unit)} straddles "
                                                               f"{claim.expect.describe()} after {n} rounds")
                                  + "; one more round")
                else:
                    self.progress(f"{case.claim.id}: against the baseline {', '.join(waiting)} undecided after "
                                  f"{n} rounds; one more round")
                n += 1
        finally:
            self._case_round = None
            self._record_probes(calls, result, at, n)
        _fill(result, ev)
        if len(result.rep_samples) >= 2:
            result.spread = spread(result.rep_samples)
        result.margin = judge(ev["value"], claim.expect).margin
        ci_txt = _fmt_ci(result.ci, claim.unit)
        mode_txt = ""
        if result.modes:
            mode_txt = (" bimodal: " + " and ".join(f"{fmt_value(md['value'], claim.unit)} ({md['n']})"
                                                    for md in result.modes) + ";")
        elif result.unstable:
            mode_txt = (f" unstable: repetitions of this run between {fmt_value(result.unstable[0], claim.unit)} and "
                        f"{fmt_value(result.unstable[1], claim.unit)};")
        if ev["one_round"]:
            raise Unmeasured(f"inconclusive: {fmt_value(result.value, claim.unit)} from one round; a timed figure "
                             f"is decided by the spread between independent rounds, so it needs 2 or more "
                             f"(rounds {n_min}-{n_max} here: --voiceperf-rounds, ini voiceperf_min_rounds or the "
                             f"claim's rounds.min)")
        if ev["decision"] == "inconclusive" and ev["ci_method"] == stats.ONE_MEASUREMENT_BRACKET:
            raise Unmeasured(f"inconclusive: {fmt_value(result.value, claim.unit)} from one search, whose own bracket "
                             f"{ci_txt} (the spread of its timed points, ±{self.options.noise_floor:g} run-to-run) "
                             f"straddles {claim.expect.describe()}: the next run can land on either side")
        if ev["decision"] == "inconclusive":
            raise Unmeasured(f"inconclusive:{mode_txt} {fmt_value(result.value, claim.unit)}, interval {ci_txt} "
                             f"straddles {claim.expect.describe()} after {result.rounds} rounds "
                             f"({time.monotonic() - started:.0f} s; budget {n_max} rounds, {budget:g} s){futility}")
        if ev["decision"] == "failed":
            raise VerdictFailed(f"{fmt_value(result.value, claim.unit)} is not {claim.expect.describe()} "
                                f"(interval {ci_txt}, {result.rounds} rounds;{mode_txt or ' ' + ev['ci_method']})")

    def _gate_pending(self, calls, result: CaseResult, at, n: int, ev: dict) -> list[str]:
        """The figures the baseline gate still cannot decide for this case after n rounds (a look at a
        copy of the result: nothing is recorded)."""
        if self.gate is None or self.gate.by_nodeid.get(result.nodeid) is None:
            return []
        look = dataclasses.replace(result, probes={}, disturbed=[])
        self._record_probes(calls, look, at, n)
        _fill(look, ev)
        look.outcome = "passed"
        return self.gate.pending(look.to_json())

    def _rounds_used(self, claim, calls, name: str) -> dict[str, list[int] | None]:
        """Which rounds of each probe the case's rounds use: None, round r of the probe (it pairs with
        any round); a list, the indices of its rounds the case's first rounds use, and each round
        beyond the list a new round taken for the case (appended by _round_of).

        A metric that combines timed figures of several probes pairs their rounds; a shared probe's
        earlier rounds were taken beside other probes, maybe minutes before (a CPU decode 14% faster
        then than the case's own decode a minute later, all rounds alike: a tight interval and a
        verdict the next run reversed). So such a case reuses earlier rounds only when they were
        taken together, round by round (the same rounds of one earlier case, or of the rounds taken
        for a group of cases, see plan()); otherwise it takes its own rounds of every timed probe,
        interleaved. Outputs declared exact (counts) and probes without samples pair with any round."""
        at: dict[str, list[int] | None] = {c.alias: None for c in calls}
        if any(isinstance(self._cache.get(self._key(c.probe, c.args)), Unmeasured) for c in calls):
            return at  # the case ends at that probe
        reads_timed = self._timed_aliases(claim.metric, calls)
        timed = []
        for c in calls:
            if c.alias not in reads_timed:
                continue
            pr = self.probed(c.probe, c.args)
            if pr is not None and pr.rounds and pr.deterministic:
                continue
            timed.append((c.alias, pr))
        held = [(a, pr) for a, pr in timed if pr is not None and pr.rounds]
        if len(timed) < 2 or not held:
            return at
        for a, _ in timed:
            at[a] = []
        if len(held) == len(timed):
            # a tag can mark several rounds of a probe (an engine probe nested in another probe's
            # round takes its first rounds in a row under that round's tag): each common tag pairs
            # the last round of each probe with it, never one round twice (the CPU batch16 case
            # used the same batch round three times, an interval of zero width)
            common = list(dict.fromkeys(t for t in held[0][1].taken_in
                                        if t is not None and all(t in pr.taken_in for _, pr in held[1:])))
            if common:  # taken together: the case goes on from their common rounds
                for a, pr in held:
                    last = {t: i for i, t in enumerate(pr.taken_in)}
                    at[a] = [last[t] for t in common]
                return at
        self.progress(f"{name}: new rounds of {', '.join(a for a, _ in held)} beside the case's other probes "
                      "(their earlier rounds were taken with other probes)")
        return at

    def _round_of(self, call, at: dict[str, list[int] | None], r: int, ctx: ProbeContext) -> Measurement:
        """The case's round r of the call (see _rounds_used), taken when it does not exist yet."""
        used = at[call.alias]
        if used is None:
            return self.measure_round(call.probe, call.args, ctx, r)
        pr = self._probed(call.probe, call.args)
        if r < len(used):
            return pr.rounds[used[r]]
        m = self.measure_round(call.probe, call.args, ctx, len(pr.rounds))
        used.append(len(pr.rounds) - 1)
        return m

    def plan(self, cases) -> None:
        """Rounds taken together for the cases that pair probes on one engine.

        A case pairing timed probes uses only rounds taken together (see _rounds_used), so each case
        that paired a shared probe with another one took rounds of it again (CPU default: ten such
        cases; sharing brought its 14 vLLM cases from 265 s to 195-220 s). Here the cases to run
        are grouped by the one heavy engine their timed probes need, and the first case of a group
        takes ``min_rounds`` rounds of every probe of the group's pairing cases, interleaved round
        by round (the engine live the whole time); every case of the group then uses those rounds,
        and takes further rounds only where its interval straddles its bound, of its own probes,
        together. A group is worth it when two or more cases use its probes and one of them pairs."""
        self._groups.clear()
        self._group_of.clear()
        if self.device == "cuda-missing":
            return
        from .claims import _substitute

        uses: dict[str, list[tuple[int, dict[str, tuple[str, dict]]]]] = {}  # engine -> (case, its timed calls)
        for case in cases:
            claim = case.claim.model
            try:
                if any(self.requirement_unmet(_substitute(req, case.params)) for req in claim.requires):
                    continue
                calls = case.calls()
                if self._exact_metric(claim.metric, calls):
                    continue
                reads_timed = self._timed_aliases(claim.metric, calls)
                timed = [c for c in calls if c.alias in reads_timed]
                heavy = set()
                for c in timed:
                    spec = self.registry.get(c.probe)
                    if spec is None or self._nested_engine(spec):
                        raise LookupError(c.probe)
                    inst = self._instance(c)
                    if inst is not None:
                        heavy.add(inst)
            except Exception:  # the case reports what is wrong when it runs
                continue
            if len(heavy) != 1:
                continue
            uses.setdefault(heavy.pop(), []).append((id(case), {self._key(c.probe, c.args): (c.probe, c.args)
                                                                 for c in timed}))
        for key, cs in uses.items():
            # the probes of the cases that pair: a probe only single-probe cases read needs no rounds
            # taken beside others (new ones would be measured again where it already had rounds)
            members: dict[str, tuple[str, dict, set[int]]] = {}
            for _, calls_of in cs:
                if len(calls_of) >= 2:
                    for ck, (probe, args) in calls_of.items():
                        members.setdefault(ck, (probe, args, set()))
            for cid, calls_of in cs:
                for ck in calls_of.keys() & members.keys():
                    members[ck][2].add(cid)
            users = {cid for cid, calls_of in cs if calls_of.keys() & members.keys()}
            if len(users) >= 2 and len(members) >= 2:
                self._groups[key] = members
                self._group_of.update({c: key for c in users})

    def _take_group(self, key: str, case, calls) -> dict:
        """The group's first rounds (see plan()): round r of each of its probes before round r+1 of any.
        A probe that cannot run here ends the group's rounds of its cases, not the group, and its
        cases say why (this case too: it was the crossover sweep's, the first case on the CPU, which
        had ended the group and left every other case to take its own rounds); an engine failing in
        one of this case's probes ends this case as it would alone. When no case left pairs two of
        the probes still taken, the group stops: the rest take rounds case by case, reusing earlier
        ones (on the CPU the NeMo group, paired only by asr-cpp-port-speedup's absent parakeet.cpp,
        took three new rounds of streams whose first rounds the FLOP-counting cases had taken)."""
        members = self._groups.pop(key)
        own = {self._key(c.probe, c.args) for c in calls}
        # probes of fewer cases first (a case's own probe before those it shares): a probe that cannot
        # run here ends its cases, and the probes only they use are left out before they are measured
        # (on the CPU the NeMo streams of asr-cpp-port-speedup, whose parakeet.cpp is absent: 24 s)
        live = dict(sorted(members.items(), key=lambda kv: len(kv[1][2])))
        ended: set[int] = set()
        keys_of: dict[int, set[str]] = {}
        for ck, (_, _, users) in members.items():
            for c in users:
                keys_of.setdefault(c, set()).add(ck)

        def pairing() -> bool:  # a case left that pairs two probes still taken: else each case alone
            return any(c not in ended and len(ks & live.keys()) >= 2 for c, ks in keys_of.items())
        n = self.options.min_rounds
        n_cases = len({c for _, _, cs in members.values() for c in cs})
        self.progress(f"{case.name}: rounds 1-{n} of {len(members)} probes on {key} shared by "
                      f"{n_cases} cases, taken together")
        t0 = time.monotonic()
        stopped = False
        self._case_serial += 1
        tag = f"group {self._case_serial}"
        try:
            for r in range(n):
                if stopped:
                    break
                self._case_round = (tag, r)
                for ck, (probe, args, users) in list(live.items()):
                    if not pairing():
                        stopped = True  # the cases left take their own rounds (single probes reuse any)
                        break
                    if ck not in live:
                        continue
                    ctx = ProbeContext(self, time.monotonic() + self.options.timeout)
                    try:
                        pr = self._probed(probe, args)
                        # a round of it may exist with this tag already: another member of the group
                        # reads it nested (llm.crossover's llm.batch) and took it in its own round
                        if pr.rounds and (pr.deterministic or self._case_round in pr.taken_in):
                            continue
                        self.measure_round(probe, args, ctx, len(pr.rounds))
                    except (EngineError, Unmeasured) as exc:
                        if ck in own and isinstance(exc, EngineError):
                            raise
                        ended |= users
                        for k in [k for k, (_, _, cs) in live.items() if cs <= ended]:
                            del live[k]
        finally:
            self._case_round = None
        return {"engine": key, "rounds": n, "probes": len(members), "cases": n_cases,
                "probes_left_out": len(members) - len(live), "stopped": stopped,
                "seconds": round(time.monotonic() - t0, 3)}

    def _blocks(self, order: list, name: str, live_first: bool = True) -> list[list]:
        """The case's calls grouped by when their rounds are taken: all in one block (interleaved,
        round by round) when they need no more engines than may be live at once; otherwise one block
        per engine, each taking all its rounds before the next engine starts (in-process probes in
        the first). Interleaved, each round would start every engine again: on the H200 the bf16 and
        FP8 engines of `llm-precision-speedup` started 6-8 times per case (100-144 s against 37-47 s).
        The rounds of one case are still paired round by round, taken minutes apart at most."""
        groups: dict[str | None, list] = {}
        for c in order:
            try:
                inst = self._instance(c)
            except Exception:  # the probe reports its bad arguments when it runs
                inst = None
            groups.setdefault(inst, []).append(c)
        heavy = [k for k in groups if k is not None]
        live = max(1, self.options.max_live_engines)
        if len(heavy) <= live:
            return [order]
        # the engine live now takes its rounds first (``live_first``: unless a probe known not to run
        # here leads, which ends the case before anything is measured): starting the other engine
        # first, then coming back to this one for the cases after, started each of
        # llm-precision-speedup's bf16 and FP8 engines twice on the GPU (4 extra vLLM starts, ~25 s each)
        if live_first and self.last_heavy in heavy:
            heavy.remove(self.last_heavy)
            heavy.insert(0, self.last_heavy)
        blocks = [list(groups[k]) for k in heavy]
        blocks[0][:0] = groups.get(None, [])
        self.progress(f"{name}: rounds taken one engine at a time ({len(heavy)} engines, {live} live at once)")
        return blocks

    def _instance(self, call) -> str | None:
        """The heavy engine instance the call needs; None for in-process probes and light engines
        (which stay live beside the others)."""
        spec = self.registry.get(call.probe)
        inst = spec.instance(call.args) if spec is not None else None
        if inst is not None and is_light(inst.split(":", 1)[0]):
            return None
        return inst

    def _record_probes(self, calls, result: CaseResult, at: dict[str, list[int] | None], n: int) -> None:
        for call in calls:
            pr = self.probed(call.probe, call.args)
            if pr is None:
                continue
            spec = self.registry.get(call.probe)
            result.disturbed += [c for d in pr.dropped for c in d["disturbed"] if c not in result.disturbed]
            if not pr.rounds:
                continue
            m = pr.aggregate()
            used = at.get(call.alias)
            reads = self._reads_of(pr)
            ceilings_read = self._ceilings_read(reads)
            result.probes[call.alias] = {"probe": call.probe, "args": call.args,
                                         "call": self._key(call.probe, call.args), "values": m.values,
                                         "samples": m.samples,
                                         "info": dict(m.info, ceilings_read=ceilings_read) if ceilings_read else m.info,
                                         "units": dict(spec.outputs) if spec else {},
                                         "exact": sorted(spec.exact) if spec else [],
                                         "reads": reads,
                                         "first_round": used[0] if used else 0,
                                         "rounds_used": used if used is not None else
                                         list(range(min(n, len(pr.rounds))))}
            if spec is not None and spec.engine:
                result.engine_instances = 1  # rounds reuse the session's engine instance

    def _ceilings_read(self, reads: list[str]) -> dict[str, dict]:
        """The hardware ceilings among the calls a probe's rounds read, with this session's figure: the
        gate compares them between runs as it compares the ceilings a figure was checked against (a
        decode fit divides by the read bandwidth; on a VM whose bandwidth fell 12% its overhead rose 25%)."""
        out = {}
        for k in reads:
            hit = self._cache.get(k)
            if isinstance(hit, Probed) and hit.name in CEILING_OUTPUTS and hit.rounds:
                name = CEILING_OUTPUTS[hit.name]
                v = hit.aggregate().values.get(name)
                if isinstance(v, (int, float)) and v:
                    out[k] = {"probe": hit.name, "output": name, "value": float(v),
                              "rounds": [float(r.values[name]) for r in hit.rounds]}
        return out

    def _reads_of(self, pr: Probed) -> list[str]:
        """The probe calls a probe's rounds read, directly or through the calls they read (the
        pipeline's LLM decode, a fit's ceiling)."""
        seen: set[str] = set()
        todo = list(pr.reads)
        while todo:
            k = todo.pop()
            if k in seen:
                continue
            seen.add(k)
            hit = self._cache.get(k)
            if isinstance(hit, Probed):
                todo += hit.reads
        return sorted(seen)

    def _floor(self, claim) -> float:
        """The claim's run-to-run floor of a timed figure's interval (relative), else the session's."""
        return claim.rounds.floor if claim.rounds.floor is not None else self.options.noise_floor

    def _timed_aliases(self, metric: str, calls) -> set[str]:
        """The calls whose outputs the metric reads include one not declared exact (a timing)."""
        exact = {c.alias: (spec.exact if (spec := self.registry.get(c.probe)) else frozenset()) for c in calls}
        return {a for a, out in expr.references(metric) if out not in exact.get(a, frozenset())}

    def _exact_metric(self, metric: str, calls) -> bool:
        """True when the metric reads only outputs its probes declare exact (counts of a deterministic
        computation: frames, FLOPs, bytes, calls)."""
        return bool(expr.references(metric)) and not self._timed_aliases(metric, calls)

    def _evaluate(self, claim, calls, names: dict, n: int, exact: bool, at: dict[str, list[int] | None]) -> dict:
        """The metric per round, its interval and the decision against the expectation."""
        probed = [(c.alias, self._probed(c.probe, c.args)) for c in calls]
        det = exact or all(pr.deterministic for _, pr in probed)
        rounds = 1 if det else n
        values, reps = [], []
        ms: dict = {}
        for r in range(rounds):
            ms = {}
            for a, pr in probed:
                used = at.get(a)
                ms[a] = pr.rounds[used[r] if used and r < len(used) else min(r, len(pr.rounds) - 1)]
            outs = {a: m.values for a, m in ms.items()}
            samp = {a: m.samples for a, m in ms.items()}
            values.append(_metric(claim.metric, names, outs))
            reps += self._metric_samples(claim.metric, names, outs, samp)
        # one round (a search): the probes' own brackets, where they give them
        bracket = self._bracket(claim.metric, names, ms) if det and not exact else None
        lo, hi = claim.expect.bounds()
        value = float(statistics.median(values))
        md = unstable = None
        one_round = not det and len(values) < 2  # a timed figure with no spread between rounds
        if bracket is not None:
            ci, method = (min(bracket[0], value), max(bracket[1], value)), stats.ONE_MEASUREMENT_BRACKET
        elif det or one_round:
            ci, method = (value, value), ("exact: the metric is made of counts (frames, FLOPs, bytes, calls), "
                                          "not timings" if exact else
                                          stats.ONE_MEASUREMENT if det else stats.ONE_ROUND)
        else:
            ci = stats.interval(values) or (value, value)
            method = stats.CI_METHOD
            floor = self._floor(claim)
            if len(set(values)) == 1 and len(set(reps)) <= 1:
                method = f"exact: the figure did not vary over {len(values)} rounds"
            elif floor:  # an exact ratio of counts has no drift; a timed figure does
                wide = stats.with_floor(ci, value, floor)
                if wide != ci:
                    ci, method = wide, method + f", widened to the run-to-run floor ±{floor * 100:g}%"
            md = stats.modes(values) or stats.modes(reps)
            if md is not None:  # never one number with a small spread: the interval covers both modes
                allv = [x for g in md.groups for x in g]
                ci = (min(ci[0], min(allv)), max(ci[1], max(allv)))
                method += ", widened to cover both modes"
            else:
                unstable = stats.unstable(reps)
        return {"value": value, "round_values": values, "rep_samples": reps, "rounds": rounds, "ci": ci,
                "ci_method": method, "modes": md.to_json() if md else None, "deterministic": det,
                "unstable": list(unstable) if unstable else None,
                "decision": "inconclusive" if one_round else stats.decide(ci, lo, hi), "one_round": one_round}

    @staticmethod
    def _bracket(metric: str, names: dict, ms: dict) -> tuple[float, float] | None:
        """The metric over the corners of the brackets its one-measurement probes give their outputs
        (a search's count: asr.streams), or None where none does. Each output is taken at both ends of
        its bracket, the others as measured."""
        ends = [(a, out, ms[a].bracket[out]) for a, out in sorted(expr.references(metric))
                if a in ms and out in ms[a].bracket]
        if not ends:
            return None
        got = []
        for corner in itertools.product(*[(lo, hi) for _, _, (lo, hi) in ends]):
            outs = {a: dict(m.values) for a, m in ms.items()}
            for (a, out, _), x in zip(ends, corner):
                outs[a][out] = float(x)
            try:
                got.append(_metric(metric, names, outs))
            except Unmeasured:
                return None
        return (min(got), max(got))

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

    def recheck_ceilings(self) -> None:
        """Measure the session's ceilings once more at the end: a machine whose ceilings moved while
        the claims ran was not in one state (provenance ``ceilings_end``, ``drifted`` above 5%; the
        gate does not compare figures of a probe call whose ceiling moved beyond its tolerance).

        The engines are done by now: they stop first, so the check sees the GPU the session's own
        ceiling rounds saw, not one beside a live engine. A reading beyond 5% is confirmed with two
        more and the median decides: on an H100 one end reading of the bf16 matmul was 12.9% low while
        its n=4096 sibling, read a moment earlier, moved 0.6%, and that one reading left 15 figures
        of a same-commit pair out of the gate (results/h100/suite-5e112c8)."""
        self.engines.close_all()
        for pr in list(self._cache.values()):
            if not isinstance(pr, Probed) or pr.name not in CEILING_OUTPUTS or not pr.rounds or pr.deterministic:
                continue
            out = CEILING_OUTPUTS[pr.name]
            spec = self.registry.get(pr.name)
            if spec is None:
                continue
            entry = {"probe": pr.name, "args": pr.args, "call": self._key(pr.name, pr.args)}
            med = pr.aggregate().values[out]
            readings: list[float] = []
            try:
                for _ in range(END_READINGS):
                    with self.timing.phase(timing.CEILINGS_END):
                        m = spec(ProbeContext(self, time.monotonic() + 120, round=None, attempt=10_000), **pr.args)
                    readings.append(m.values[out])
                    if not _beyond(readings[0], med):
                        break
            except Exception as exc:  # the end check must never lose the run's results
                if not readings:
                    self.ceilings_end.append(dict(entry, error=str(exc)[:200]))
                    continue
            end = statistics.median(readings)
            change = end / med - 1 if med else None
            self.ceilings_end.append(dict(entry, output=out, session=med, end=end, readings=readings, change=change,
                                          drifted=_beyond(end, med)))

    def provenance(self) -> dict:
        return provenance.build(self)

    def timing_json(self) -> dict:
        """Where the time went so far (the xdist controller adds its workers' tables)."""
        own = self.timing.to_json(time.time() - self.started)
        return timing.merge([own] + self.worker_timing) if self.worker_timing else own

    def end(self) -> None:
        """The machine's state at the end (before the results file is written)."""
        self.env_end = provenance.environment(self.device)

    def scratch(self) -> str:
        """A folder for files engines hand each other (e.g. a model written by one engine and loaded by
        another), which outlives any one engine and is removed with the session."""
        if self._scratch is None:
            self._scratch = tempfile.mkdtemp(prefix="voiceperf-scratch-")
        return self._scratch

    def close(self, interrupted: bool = False) -> None:
        if self.env_end is None:
            self.end()
        self.engines.close_all(interrupted=interrupted)
        if self._scratch:
            import shutil

            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None


def _fill(result: CaseResult, ev: dict) -> None:
    """The case's figure, its rounds and interval from an evaluation (VoiceperfSession._evaluate)."""
    result.value = ev["value"]
    result.round_values = ev["round_values"]
    result.samples = ev["round_values"]
    result.rep_samples = ev["rep_samples"]
    result.rounds = ev["rounds"]
    result.ci = ev["ci"]
    result.ci_method = ev["ci_method"]
    result.modes = ev["modes"]
    result.unstable = ev["unstable"]
    result.decision = ev["decision"]


def _metric(metric: str, names: dict, outputs: dict) -> float:
    """The claim's metric over the probes' outputs; Unmeasured when it gives no finite number."""
    try:
        v = expr.evaluate(metric, names, outputs)
    except expr.ExprError as exc:
        raise Unmeasured(f"measurement invalid: {exc}") from None
    if isinstance(v, bool):
        v = float(v)
    if not isinstance(v, (int, float)) or not math.isfinite(v):
        raise Unmeasured(f"measurement invalid: the metric gave {v!r}, not a finite number")
    return float(v)


def _fmt_ci(ci, unit: str) -> str:
    if not ci:
        return "-"
    if unit == "fraction":
        return f"[{ci[0]:.3f}, {ci[1]:.3f}]"
    return f"[{fmt_value(ci[0], unit)}, {fmt_value(ci[1], unit)}]"


@contextlib.contextmanager
def time_limit(seconds: float):
    """Stop the code inside after ``seconds`` (SIGALRM; the main thread only, and only where no
    other handler, such as pytest-timeout's, holds the signal). An in-process probe with an absurd
    argument from a claim file ran on past its claim's timeout."""
    import signal
    import threading

    if (not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGALRM) not in (signal.SIG_DFL, signal.SIG_IGN, None)):
        yield
        return

    def fire(signum, frame):
        raise TimeLimit()

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, max(0.01, seconds))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def module_present(name: str) -> bool:
    """Is the module installed? Looked up without importing anything: ``importlib.util.find_spec('a.b')``
    imports ``a`` (a claim file's ``requires: [module:a.b]`` would run a's code), and a package that
    fails to import is absent, never an error of the case."""
    import importlib.machinery
    import importlib.util
    import sys

    if name in sys.modules:
        return True
    parts = name.split(".")
    try:
        spec = importlib.util.find_spec(parts[0])
        for i in range(1, len(parts)):
            if spec is None or not spec.submodule_search_locations:
                return False
            spec = importlib.machinery.PathFinder.find_spec(".".join(parts[: i + 1]),
                                                            list(spec.submodule_search_locations))
        return spec is not None
    except Exception:  # a broken finder or package metadata: not usable here
        return False


class Probed:
    """The rounds of one probe call in this session (shared by every claim that makes the call)."""

    def __init__(self, name: str, args: dict):
        self.name = name
        self.args = args
        self.rounds: list[Measurement] = []
        self.records: list[dict] = []  # per clean round: wall time, other CPU load, GPU state
        self.dropped: list[dict] = []  # disturbed rounds: their records with the causes
        self.dropped_in_a_row = 0  # disturbed rounds since the last clean one
        self.waited_quiet = False  # a quiet machine was waited for once after drops in a row
        self.taken_in: list[tuple | None] = []  # per clean round: (case serial, case round) that took it
        self.attempts = 0
        self.reads: set[str] = set()  # keys of the probe calls its rounds read (ProbeContext.probe)
        self.engine_serials: set[int] = set()  # engine processes its rounds ran on (Family.fresh_rounds)
        self.aggregated: Measurement | None = None

    @property
    def deterministic(self) -> bool:
        """A probe without samples (settings and datasheet figures, declared exact; or one search per
        run such as asr.streams, a verdict of "one measurement" the gate does not compare): one round
        stands for every round. Identical repetitions do not make a probe exact (all 16
        requests of one batch end together and report the same tok/s), so they still take rounds."""
        if not self.rounds:
            return False
        return not self.rounds[0].has_samples

    def best(self, out: str) -> float:
        return max(m.values[out] for m in self.rounds)

    def aggregate(self) -> Measurement:
        """values: median of the round figures; samples: the round figures (what verdicts and the gate use)."""
        if self.aggregated is not None and self.aggregated.info.get("rounds") == len(self.rounds):
            return self.aggregated
        last = self.rounds[-1]
        if len(self.rounds) == 1:
            values = dict(last.values)
            samples = {k: [v] for k, v in last.values.items()} if not self.deterministic else {}
        else:
            values, samples = {}, {}
            for k in last.values:
                xs = [m.values[k] for m in self.rounds if k in m.values and m.values[k] is not None]
                if xs and all(isinstance(x, (int, float)) for x in xs):
                    values[k] = float(statistics.median(xs))
                    samples[k] = [float(x) for x in xs]
                else:
                    values[k] = last.values[k]
        info = dict(last.info)
        info["rounds"] = len(self.rounds)
        info["repetitions"] = [m.samples for m in self.rounds]
        info["round_records"] = self.records
        if self.dropped:
            info["dropped_rounds"] = self.dropped
        self.aggregated = Measurement(values, samples, info, dict(last.implies), last.invalid)
        return self.aggregated


def _ceiling_unit(key: str) -> str:
    return "B/s" if key == "read_bw" else "FLOP/s"
