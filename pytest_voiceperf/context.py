"""The state of a voiceperf session, typed once (SessionBase), and what a probe function sees of it
(ProbeContext: the device, other probes, engines, models). The session is made of classes that each
hold one part of its work on that state: its probe calls and rounds (rounds.py), ceilings
(ceilings.py), the plan of the rounds (scheduling.py) and the case loop (session.py); what one calls
of another is declared in SessionBase."""
from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from . import models, provenance, timing
from .engines import EnginePool, allocator, caches
from .exceptions import EngineError, Unmeasured
from .options import Options, device_name, resolve_device
from .probed import Aggregate, Probed
from .probes import Measurement, Registry
from .record import ResultRecord


def _instance_of(spec, args: dict) -> str | None:
    """The engine instance a probe call needs ("family:key"), None in-process or where its engine_key
    cannot read the arguments (the probe itself then says so)."""
    try:
        return spec.instance(args)
    except Exception:
        return None


class ProbeContext:
    """What a probe function sees: the device, other probes, engines, models, progress."""

    def __init__(self, session: SessionBase, deadline: float, round: int | None = None, attempt: int = 0):
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
    def llm_engine(self) -> str | None:
        return self.session.options.llm_engine

    @property
    def profile(self) -> str:
        return self.session.profile

    def time_left(self) -> float:
        return max(1.0, self.deadline - time.monotonic())

    def probe(self, name: str, **args) -> Measurement | Aggregate:
        """Another probe's figures: inside a probe's round (where probes run), that call's Measurement of
        the same round; outside a round, its Aggregate over the rounds taken."""
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


class SessionBase:
    def __init__(self, options: Options, registry: Registry, rootdir: Path, reporter=None, worker: str | None = None):
        self.options = options
        self.registry = registry
        self.rootdir = Path(rootdir)
        self.reporter = reporter
        self.worker = worker
        self.device = resolve_device(options.device)
        self.device_name = device_name(self.device) if self.device != "cuda-missing" else "none"
        self.profile = options.profile or ("cuda" if self.device == "cuda" else "cpu")
        self._cache: dict[str, Probed | Unmeasured] = {}  # probe call -> its rounds, or why it cannot run
        self.results: list[ResultRecord] = []
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

    if TYPE_CHECKING:  # defined by the classes VoiceperfSession is made of
        def progress(self, msg: str) -> None: ...
        def measure(self, name: str, args: dict, ctx: ProbeContext) -> Aggregate: ...
        def _key(self, name: str, args: dict | None) -> str: ...
        def probed(self, name: str, args: dict) -> Probed | None: ...
        def _probed(self, name: str, args: dict) -> Probed: ...
        def measure_round(self, name: str, args: dict, ctx: ProbeContext, r: int) -> Measurement: ...
        @staticmethod
        def _nested_engine(spec) -> bool: ...
        def check_ceilings(self, name: str, m: Measurement, ctx: ProbeContext, r: int = 0) -> None: ...
        def requirement_unmet(self, req: str) -> str | None: ...
        def _exact_metric(self, metric: str, calls) -> bool: ...
        def _timed_aliases(self, metric: str, calls) -> set[str]: ...
