"""The results file: ``{"provenance": {...}, "results": [...]}``, written atomically."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

SCHEMA_VERSION = 1


def document(session, results: list[dict], config=None) -> dict:
    prov = session.provenance()
    if config is not None:
        prov["command"] = "pytest " + " ".join(config.invocation_params.args)
    counts: dict[str, int] = {}
    for r in results:
        counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
    prov["counts"] = counts
    return {"schema_version": SCHEMA_VERSION, "provenance": prov, "results": results}


def write(path: str | os.PathLike, doc: dict) -> Path:
    """Write atomically. An incomplete (interrupted) run goes to ``PATH.partial`` and leaves PATH intact."""
    path = Path(path)
    if not doc["provenance"].get("complete", True):
        path = path.with_name(path.name + ".partial")
    atomic_write_text(path, json.dumps(doc, indent=1, default=str) + "\n")
    return path


def atomic_write_text(path: Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def read(path: str | os.PathLike) -> dict:
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a voiceperf results file ({exc})") from None
    if not isinstance(doc, dict) or "results" not in doc or "provenance" not in doc:
        raise ValueError(f"{path}: not a voiceperf results file (no 'provenance'/'results')")
    return doc
