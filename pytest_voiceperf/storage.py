"""Saved runs: ``.voiceperf/<machine-id>/NNNN_<name>.json``, numbered as pytest-benchmark numbers
its ``.benchmarks`` files. (pytest-benchmark's ``FileStorage`` itself did not fit: it writes in
place, not atomically, and its loader expects its own ``benchmarks``/``stats`` schema.)"""
from __future__ import annotations

import re
from pathlib import Path

from .record import ResultsFile
from .results import atomic_write_text, dumps, read

ROOT = ".voiceperf"


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:60].lstrip(".") or "run"  # no '..' out of .voiceperf


def run_dir(rootdir: Path, machine_id: str) -> Path:
    return Path(rootdir) / ROOT / machine_id


def save_run(doc: dict, rootdir: Path, name: str) -> Path:
    import fcntl

    d = run_dir(rootdir, _safe(str(doc["provenance"].get("machine_id") or "unknown")))
    d.mkdir(parents=True, exist_ok=True)
    # the number is taken under a lock of the folder: two runs saving at once get two numbers
    with open(d / ".lock", "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        nums = [int(p.name[:4]) for p in d.glob("[0-9][0-9][0-9][0-9]_*.json")]
        path = d / f"{(max(nums) + 1 if nums else 1):04d}_{_safe(name)}.json"
        atomic_write_text(path, dumps(doc))
    return path


def find(spec: str, rootdir: Path, machine_id: str | None = None) -> Path:
    """A baseline given as a path, a number (``0003``), or a saved name (newest match wins)."""
    p = Path(spec)
    if p.exists() and not p.is_dir():  # a FIFO or a device named as the baseline: read() says what it is
        return p
    base = Path(rootdir) / ROOT
    machine_id = _safe(machine_id) if machine_id else None
    dirs = [base / machine_id] if machine_id and (base / machine_id).is_dir() else []
    dirs += [d for d in sorted(base.glob("*")) if d.is_dir() and d not in dirs]
    for d in dirs:
        hits = sorted(d.glob(f"{spec}_*.json")) if re.fullmatch(r"\d{4}", spec) else \
            sorted(d.glob(f"[0-9][0-9][0-9][0-9]_{_safe(spec)}.json"))
        if hits:
            return hits[-1]
    raise FileNotFoundError(f"no saved voiceperf run {spec!r} (looked for a file, and under {base})")


def load(spec: str, rootdir: Path, machine_id: str | None = None) -> tuple[Path, ResultsFile]:
    path = find(spec, rootdir, machine_id)
    return path, read(path)
