"""Engines run isolated from the pytest process, one worker process per (engine, model): what an
engine family is and which there are (``family.py``), one engine's worker process (``process.py``),
the session's engines (``pool.py``). The engine modules (``*_engine.py``) are imported only inside
a worker; a family whose modules are missing makes its claims ``unmeasured``, never an error."""
from __future__ import annotations

from .family import (
                     BUILTIN,
                     ENTRY_POINT_GROUP,
                     LLAMACPP,
                     MAGPIE,
                     NANOVLLM,
                     NEMO,
                     PARAKEET,
                     SELFTEST,
                     TRANSFORMERS,
                     VLLM,
                     VOXCPM,
                     Engine,
                     Family,
                     check_available,
                     families,
                     fresh_rounds,
                     installed,
                     is_light,
                     label,
                     of_kind,
                     packages,
)
from .pool import EnginePool
from .process import EngineProcess

__all__ = ["BUILTIN", "ENTRY_POINT_GROUP", "LLAMACPP", "MAGPIE", "NANOVLLM", "NEMO", "PARAKEET", "SELFTEST",
           "TRANSFORMERS", "VLLM", "VOXCPM", "Engine", "EnginePool", "EngineProcess", "Family", "check_available",
           "families", "fresh_rounds", "installed", "is_light", "label", "of_kind", "packages"]
