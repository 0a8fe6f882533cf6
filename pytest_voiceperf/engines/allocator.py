"""A fixed heap policy for CPU engine workers, so a timing does not depend on the probe before it.

glibc's malloc raises its mmap threshold to the largest block freed so far and trims the top of
the heap when much of it is free. Whether a large tensor then comes from the heap or from fresh
pages that fault in on first touch depends on what the process ran before. Seen on the 2-core EPYC
VM (vLLM CPU, qwen3-0.6b bf16, no warm-up at the measured length): a 2,048-token prefill ran at
110 tok/s after a 16-request batch and 118-133 after a 1,024-token prefill; with the thresholds
fixed, 126-134 either way (results/cpu/allocator/). vLLM's own advice on the CPU is tcmalloc in
LD_PRELOAD, which keeps freed memory too: a user who preloads an allocator, or sets these
variables, keeps theirs. CUDA workers are left as they are (their large buffers live on the GPU).
"""
from __future__ import annotations

from collections.abc import Mapping

# 32 MiB is glibc's largest mmap threshold on 64-bit; setting it also stops the threshold moving
FIXED = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 30)}
PRELOADED = ("tcmalloc", "jemalloc", "mimalloc")


def _preloaded(environ: Mapping[str, str]) -> str:
    """LD_PRELOAD when it names an allocator of its own, else ''."""
    preload = environ.get("LD_PRELOAD", "")
    return preload if any(a in preload for a in PRELOADED) else ""


def env(environ: Mapping[str, str], device: str | None) -> dict[str, str]:
    """The allocator variables of an engine worker's environment (none on CUDA or with a preloaded allocator)."""
    if device == "cuda" or _preloaded(environ):
        return {}
    return {k: environ.get(k) or v for k, v in FIXED.items()}


def describe(environ: Mapping[str, str], device: str | None) -> dict:
    """Provenance: which heap policy the CPU engine workers ran with."""
    fixed = env(environ, device)
    preload = _preloaded(environ)
    policy = "glibc, thresholds fixed" if fixed else f"preloaded: {preload}" if preload else "as inherited"
    return {"policy": policy, **fixed}
