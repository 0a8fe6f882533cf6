"""Probes: named measurements a claim's ``measure`` section calls.

A probe is a function ``fn(ctx, **args) -> Measurement`` registered with
:func:`probe` (or added by a plugin through the ``pytest_voiceperf_add_probes``
hook, or an installed package's ``pytest_voiceperf.probes`` entry point).
It declares its outputs (name -> unit) so claim files are checked at collection.
"""
from __future__ import annotations

import inspect
import statistics
from collections.abc import Callable, Iterable
from dataclasses import InitVar, dataclass, field
from typing import Any

from ..exceptions import DuplicateProbe, EngineError, InvalidMeasurement, Unmeasured
from ..stats import spread

__all__ = ["DuplicateProbe", "EngineError", "InvalidMeasurement", "Measurement", "ProbeSpec", "Registry",
           "Unmeasured", "call_key", "load_registry", "probe"]


@dataclass
class Measurement:
    """What one probe call gives in one round: its figures (``values``), each output's figure per
    repetition inside the round (``repetitions``: correlated, never samples of the verdict; one per
    run even with one run), what it read, and the figures it implies for the ceilings."""

    values: dict[str, float]
    repetitions: dict[str, list[float]] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    # figures the measurement implies, checked against ceilings measured in the same session:
    # {"read_bw": bytes/s} or {"matmul_flops:bfloat16": FLOP/s}
    implies: dict[str, float] = field(default_factory=dict)
    # set by a probe that can tell its own figure is not what it claims to be (e.g. the engine
    # reports prefix-cache hits in a prefill timing): the case is "unmeasured: measurement invalid"
    invalid: str | None = None
    # a one-measurement probe's own interval on an output ({"streams": (lo, hi)}: a search whose timed
    # points carry a spread); the verdict reads it where rounds cannot give one
    bracket: dict[str, tuple[float, float]] = field(default_factory=dict)
    samples: InitVar[dict[str, list[float]] | None] = None  # the former name of repetitions, still taken

    def __post_init__(self, samples: dict[str, list[float]] | None) -> None:
        if samples is not None and not self.repetitions:
            self.repetitions = samples

    @property
    def timed(self) -> bool:
        """Per-run figures for at least one output: a timed measurement, which rounds decide."""
        return any(self.repetitions.values())

    def spread(self, name: str) -> tuple[float, float] | None:
        s = self.repetitions.get(name)
        if not s or len(s) < 2:
            return None
        return spread(s)


del Measurement.samples  # type: ignore[attr-defined]  # a keyword of the constructor only: reading it is an AttributeError, not None


def summarize(samples: Iterable[float]) -> float:
    return float(statistics.median(list(samples)))


@dataclass
class ProbeSpec:
    name: str
    func: Callable[..., Measurement]
    outputs: dict[str, str]
    params: dict[str, Any]
    doc: str = ""
    engine: str | None = None  # engine family, for grouping items on one worker
    choices: dict[str, tuple] = field(default_factory=dict)  # argument -> allowed values
    # args (defaults filled in) -> which engine instance the call needs; cases that need the
    # same instance run one after the other (default: engine family and the "model" argument)
    engine_key: Callable[[dict], str] | None = None
    # outputs that are counts of a deterministic computation (frames, FLOPs, bytes, calls), not
    # timings: a metric made only of them is exact, and one round decides it
    exact: frozenset[str] = frozenset()
    # a probe without an engine that calls engine probes (pipeline.turn): args -> (probe, args) of the
    # nested call its cases sort with, so they run while that engine is live (one start, not two)
    sorts_with: Callable[[dict], tuple[str, dict]] | None = None
    # ... and (probe, args) of the nested call it makes last: that engine is still live after the case,
    # so the cases of that engine run next (one start fewer)
    ends_with: Callable[[dict], tuple[str, dict]] | None = None
    # gives one figure per run, not per-run samples (a search such as asr.streams): one round stands for
    # all. A probe with outputs not declared exact that returns no samples and is not one_figure is a
    # broken measurement (it would otherwise be decided from one round with no interval)
    one_figure: bool = False
    # argument -> (lowest, highest) a claim may give (COMMON_RANGES by argument name otherwise)
    ranges: dict[str, tuple[float, float]] = field(default_factory=dict)
    # runs no engine of its own but calls probes that do (pipeline.turn): the CPU its engines use during
    # its rounds is its own work, not another process disturbing them
    nests_engines: bool = False

    def range_of(self, arg: str) -> tuple[float, float] | None:
        return self.ranges.get(arg) or COMMON_RANGES.get(arg)

    def __call__(self, ctx, **kwargs) -> Measurement:
        return self.func(ctx, **kwargs)

    def instance(self, args: dict) -> str | None:
        """The engine instance a call with ``args`` needs ("family:key"), None for an in-process
        probe. Raises what ``engine_key`` raises on arguments it cannot read."""
        if not self.engine:
            return None
        if self.engine_key is not None:
            return f"{self.engine}:{self.engine_key({**self.params, **args})}"
        return f"{self.engine}:{args.get('model', '')}"


class Registry:
    def __init__(self):
        self._probes: dict[str, ProbeSpec] = {}

    def add(self, spec: ProbeSpec) -> None:
        """Add a probe; the same name from a different function is an error (never a silent overwrite)."""
        old = self._probes.get(spec.name)
        if old is not None and old.func is not spec.func:
            raise DuplicateProbe(f"probe {spec.name!r} is defined twice: in {_where(old.func)} and in "
                                 f"{_where(spec.func)}; rename one of them")
        self._probes[spec.name] = spec

    def get(self, name: str) -> ProbeSpec | None:
        return self._probes.get(name)

    def names(self) -> list[str]:
        return sorted(self._probes)

    def __iter__(self):
        return iter(self._probes.values())


def _where(fn) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', '?')}"


# The ranges a claim file may give the built-in probes' numeric arguments, by name (0: the probe picks).
# A claim file is untrusted: `reps: 1e12` or `mib: 1e9` would run for days or take all memory.
COMMON_RANGES: dict[str, tuple[float, float]] = {
    "reps": (0, 1000), "tts_reps": (0, 1000), "tokens": (0, 65536), "reply_tokens": (1, 65536),
    "prompt_len": (1, 262144), "prompt_tokens": (0, 262144), "batch": (1, 4096), "max_batch": (0, 4096),
    "at": (1, 4096), "tp": (1, 64), "n": (0, 32768), "mib": (0, 65536), "chunk_ms": (0, 60000),
    "asr_chunk_ms": (0, 60000), "threads": (1, 1024), "max_streams": (1, 1 << 20), "limit": (0, 1e6),
    "right_context": (0, 10000), "frames": (1, 1e6), "frame_stacking": (1, 64), "patches": (1, 100000),
    "timesteps": (1, 1000), "ref_timesteps": (1, 1000), "tts_timesteps": (1, 1000), "stop_gain": (0, 10),
    "usable_cer": (0, 1), "audio_s_per_token": (0, 100), "frame_ms": (0.1, 10000),
}


def probe(name: str, *, outputs: dict[str, str], engine: str | None = None, choices: dict | None = None,
          engine_key: Callable[[dict], str] | None = None, exact: Iterable[str] = (),
          sorts_with: Callable[[dict], tuple[str, dict]] | None = None,
          ends_with: Callable[[dict], tuple[str, dict]] | None = None, one_figure: bool = False,
          ranges: dict[str, tuple[float, float]] | None = None, nests_engines: bool = False):
    """Decorator: declare a probe. Its keyword parameters (with defaults) are the claim's arguments."""

    def wrap(fn):
        sig = inspect.signature(fn)
        params = {
            p.name: (None if p.default is inspect.Parameter.empty else p.default)
            for p in list(sig.parameters.values())[1:]
        }
        unknown = set(exact) - set(outputs)
        if unknown:
            raise ValueError(f"probe {name}: exact outputs {sorted(unknown)} are not among its outputs")
        fn.voiceperf_probe = ProbeSpec(name, fn, dict(outputs), params, inspect.getdoc(fn) or "", engine,
                                       {k: tuple(v) for k, v in (choices or {}).items()}, engine_key,
                                       frozenset(exact), sorts_with, ends_with, bool(one_figure),
                                       {k: (float(lo), float(hi)) for k, (lo, hi) in (ranges or {}).items()},
                                       bool(nests_engines))
        return fn

    return wrap


def call_key(name: str, args: dict | None) -> str:
    """One probe call's identity (probe name and arguments): the session's cache key, the gate's
    key for a figure shared by several claims and for a ceiling that drifted."""
    import json

    return name + json.dumps(args, sort_keys=True, default=str)


def collect(module) -> list[ProbeSpec]:
    return [obj.voiceperf_probe for obj in vars(module).values() if hasattr(obj, "voiceperf_probe")]


ENTRY_POINT_GROUP = "pytest_voiceperf.probes"
# the built-in probe modules, also registered under ENTRY_POINT_GROUP in pyproject.toml (one path
# for built-ins and plugins); listed here too for a source checkout that was never installed
BUILTIN_MODULES = (
    "pytest_voiceperf.probes.hw",
    "pytest_voiceperf.probes.llm",
    "pytest_voiceperf.probes.asr",
    "pytest_voiceperf.probes.tts",
    "pytest_voiceperf.probes.pipeline",
)


def load_registry(on_error=None) -> Registry:
    """Every probe of every module registered under the ``pytest_voiceperf.probes`` entry point
    group (the built-ins are registered there by this package): the one registry of pytest runs and
    the CLI. A plugin module that fails to load is reported through ``on_error(message)`` (or
    raised); a name defined twice is a :class:`DuplicateProbe`."""
    import importlib
    from importlib.metadata import entry_points

    reg = Registry()
    modules = {m: m for m in BUILTIN_MODULES}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        modules.setdefault(ep.value, f"{ep.value} (entry point {ep.name!r} of {getattr(ep.dist, 'name', '?')})")
    for modname, label in modules.items():
        try:
            mod = importlib.import_module(modname)
        except Exception as exc:  # a broken plugin must not take the built-ins down with it
            if on_error is None:
                raise
            on_error(f"voiceperf probes {label}: {type(exc).__name__}: {exc}")
            continue
        for spec in collect(mod):
            reg.add(spec)
    return reg
