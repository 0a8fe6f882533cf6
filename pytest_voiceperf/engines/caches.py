"""Where engines keep what they build at start, between runs: one user folder.

vLLM's compiled graphs, torch inductor's and Triton's kernels, FlashInfer's JIT modules and the
model folders the plugin writes all go under VOICEPERF_CACHE (default ~/.cache/pytest-voiceperf):
a second run starts its engines warm (H200, qwen3-0.6b: 232-242 s a start with the folder empty,
42-47 s with it warm; results/h200/start-times/), one folder is what a CI runner keeps between
jobs, and deleting it gives a cold start. A variable the user set wins. The provenance records the folders and whether
each held anything when the session began; no figure is taken during a start, so a warm cache
changes how long a run takes, never what it measures.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping

# engine worker environment variable -> folder under the root
DIRS = {
    "VLLM_CACHE_ROOT": "vllm",
    "TORCHINDUCTOR_CACHE_DIR": "torchinductor",
    "TRITON_CACHE_DIR": "triton",
    "FLASHINFER_WORKSPACE_BASE": "flashinfer",  # FlashInfer appends .cache/flashinfer
}


def root(environ: Mapping[str, str] = os.environ) -> str:
    return environ.get("VOICEPERF_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "pytest-voiceperf")


def cache_dir(name: str, config: dict) -> str:
    """The folder for files written from ``config`` (a model's config.json, random weights): the
    same path for the same config, so a later run finds them (and vLLM's compile cache, keyed on
    the model path, matches)."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name).strip("._")[-60:] or "model"  # a path given as the name
    digest = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:12]
    return os.path.join(root(), "models", f"{safe}-{digest}")


def env(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The cache variables of an engine worker's environment."""
    base = root(environ)
    return {var: environ.get(var) or os.path.join(base, sub) for var, sub in DIRS.items()}


def describe(environ: Mapping[str, str] = os.environ) -> dict:
    """Provenance: the folders, which the user set, and which held anything (warm) at this moment."""
    dirs = env(environ)
    return {"root": root(environ), "dirs": dirs, "set_by_user": sorted(v for v in DIRS if environ.get(v)),
            "warm": {var: _holds_files(path) for var, path in dirs.items()}}


def _holds_files(path: str) -> bool:
    try:
        with os.scandir(path) as it:
            return any(True for _ in it)
    except OSError:
        return False
