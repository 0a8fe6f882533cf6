"""The results file: ``{"provenance": {...}, "results": [...]}`` (typed in :mod:`.record`),
written atomically, read as a :class:`~pytest_voiceperf.record.ResultsFile`, merged."""
from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .record import SCHEMA_VERSION, ResultRecord, ResultsFile, results_file


def document(session, results: list[dict], config=None) -> dict:
    prov = session.provenance()
    if config is not None:
        prov["command"] = "pytest " + " ".join(config.invocation_params.args)
    prov["counts"] = _counts(results)
    return {"schema_version": SCHEMA_VERSION, "provenance": prov, "results": results}


def _counts(results: list[dict]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in results:
        counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
    return counts


def write(path: str | os.PathLike, doc: dict | ResultsFile) -> Path:
    """Write atomically. An incomplete (interrupted) run goes to ``PATH.partial`` and leaves PATH intact."""
    if isinstance(doc, ResultsFile):
        doc = doc.dump()
    path = Path(path)
    if not doc["provenance"].get("complete", True):
        path = path.with_name(path.name + ".partial")
    atomic_write_text(path, dumps(doc))
    return path


def _finite_only(x):
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite_only(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite_only(v) for v in x]
    return x


def dumps(doc: dict) -> str:
    """A results document as standard JSON: a non-finite float (a probe's undefined output) is null, not
    the NaN that strict readers (jq, JavaScript, other tools' importers) refuse."""
    return json.dumps(_finite_only(doc), indent=1, default=str, allow_nan=False) + "\n"


def atomic_write_text(path: Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp's 0600 would hide a results file from the CI's other users
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


MAX_BYTES = 64 << 20  # a whole suite's file is a few MB; a baseline from a cache may be anything
MAX_DEPTH = 32  # the deepest a run writes is under 10


def _no_figure(name: str) -> None:
    """NaN and Infinity are no figure: read as null (a probe's undefined output, e.g. the spread of one
    synthesis, was written as NaN), so no comparison, verdict or resume can rest on them."""
    return None


def _finite(text: str) -> float | None:
    v = float(text)
    return None if v != v or v in (float("inf"), float("-inf")) else v  # 1e999 is no figure either


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


class Busy(Exception):
    """Another run writes this results file now."""


class WriterLock:
    """Held for a run by the one process that writes a results file (``PATH.lock``, flock): a second
    run given the same --voiceperf-json is refused at its start instead of overwriting the first's
    file and deleting its ``.partial``. The lock goes with the process, also when it is killed."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(str(path) + ".lock")
        self._f: Any = None

    def acquire(self) -> WriterLock:
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        f = open(self.path, "a+")
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.seek(0)
            who = f.read().strip()[:80]
            f.close()
            raise Busy(f"another run writes {str(self.path)[:-5]} now ({who or 'pid unknown'}); give this one "
                       "another --voiceperf-json, or wait for it") from None
        f.seek(0)
        f.truncate()
        f.write(f"pid {os.getpid()}\n")
        f.flush()
        self._f = f
        return self

    def release(self) -> None:
        if self._f is not None:
            try:
                self.path.unlink()
            except OSError:
                pass
            self._f.close()
            self._f = None


def read_text_file(path: Path, limit: int = MAX_BYTES) -> str:
    """The UTF-8 text of a regular file of at most ``limit`` bytes (files.read_regular); ValueError
    naming the file else."""
    from .files import Refused, read_regular

    try:
        data = read_regular(path, limit)
    except Refused as exc:
        raise ValueError(f"{path}: {exc}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text (byte {exc.start})") from None


def _clean(doc, path: Path):
    """Strings without control characters (they would drive the terminal that prints them), and no
    deeper than MAX_DEPTH: checked iteratively, a nesting bomb cannot overflow the stack."""
    from .textsafe import plain

    root = [doc]
    todo: list[tuple[Any, Any, int]] = [(root, 0, 0)]
    while todo:
        box, key, depth = todo.pop()
        v = box[key]
        if isinstance(v, str):
            box[key] = plain(v)
        elif isinstance(v, (dict, list)):
            if depth >= MAX_DEPTH:
                raise ValueError(f"{path}: nested more than {MAX_DEPTH} levels deep; not a voiceperf results file")
            if isinstance(v, dict):
                for k in list(v):
                    if isinstance(k, str) and plain(k) != k:
                        v[plain(k)] = v.pop(k)
                        k = plain(k)
                    todo.append((v, k, depth + 1))
            else:
                todo.extend((v, i, depth + 1) for i in range(len(v)))
    return root[0]


def read(path: str | os.PathLike) -> ResultsFile:
    """A results file as records; anything else is a ValueError naming the file (and the record)."""
    path = Path(path)
    text = read_text_file(path)
    try:
        doc = json.loads(text, parse_constant=_no_figure, parse_float=_finite)
    except RecursionError:
        raise ValueError(f"{path}: nested too deep; not a voiceperf results file") from None
    except ValueError as exc:
        raise ValueError(f"{path}: not a voiceperf results file ({exc})") from None
    if not isinstance(doc, dict) or "results" not in doc or "provenance" not in doc:
        raise ValueError(f"{path}: not a voiceperf results file (no 'provenance'/'results')")
    return results_file(_clean(doc, path), str(path))


def _engines(result: ResultRecord) -> list[str]:
    return sorted({str(p.info["engine"]) for p in result.probes.values() if p.info.get("engine")})


def merge(inputs: Sequence[tuple[str, ResultsFile | dict]], allow_mismatch: bool = False) -> tuple[ResultsFile, list[str]]:
    """One results file from several runs of one setup (a suite split over calls, jobs or GPUs).

    A case found in more than one file is taken from the most recently created run, except that
    an ``error`` never replaces a case that was measured. Every result keeps the file it came
    from (``source``); the provenance is the newest run's, with ``merged_from`` listing every
    input (path, created, commit, command, complete, counts) and ``complete`` true only when all
    inputs were. Files of different setups (``provenance.mismatches``: hardware, engine versions, dummy
    vs real weights) and a case measured by different engines in two files are a ValueError (one
    figure would silently stand for another's) unless ``allow_mismatch``. Returns the document and
    one line per replaced case.
    """
    from . import provenance

    docs = [(path, results_file(d, path)) for path, d in inputs]
    first_path, first = docs[0]
    for path, doc in docs[1:]:
        bad = provenance.mismatches(first.provenance, doc.provenance)
        if bad and not allow_mismatch:
            raise ValueError(f"{path} and {first_path} are runs of different setups: " + "; ".join(bad)
                             + " (pass --allow-mismatch to merge anyway)")
    order = sorted(range(len(docs)), key=lambda i: str(docs[i][1].provenance.created or ""))
    by_id: dict[str, ResultRecord] = {}
    notes: list[str] = []
    for i in order:
        path, doc = docs[i]
        for r in doc.results:
            r = r.model_copy(update={"source": r.source or os.path.basename(path)})
            old = by_id.get(r.nodeid)
            if old is not None:
                was, now = _engines(old), _engines(r)
                if was and now and was != now and not allow_mismatch:
                    raise ValueError(f"{r.nodeid} was measured by {', '.join(was)} in {old.source} "
                                     f"and by {', '.join(now)} in {r.source}: merge runs of one engine "
                                     "(or pass --allow-mismatch to let the newer run win)")
                if r.outcome == "error" and old.outcome != "error":
                    notes.append(f"kept {r.nodeid} from {old.source} ({old.outcome}); {r.source} has an error")
                    continue
                notes.append(f"{r.nodeid}: {r.source} ({r.outcome}) replaces {old.source} ({old.outcome})")
            by_id[r.nodeid] = r
    prov = docs[order[-1]][1].provenance.model_copy(deep=True)  # the newest run's, with the others' added
    prov.complete = all(d.provenance.complete for _, d in docs)
    prov.duration_s = round(sum(d.provenance.duration_s or 0.0 for _, d in docs), 2)
    prov.engines = [e for _, d in docs for e in d.provenance.engines]
    prov.models = {k: m for _, d in docs for k, m in d.provenance.models.items()}
    prov.merged_from = [{"path": p, **d.provenance.model_dump(mode="json", include={
        "created", "git_commit", "git_dirty", "command", "complete", "counts", "duration_s"})} for p, d in docs]
    prov.command = None
    results = list(by_id.values())
    prov.counts = _counts([r.dump() for r in results])
    return ResultsFile(schema_version=SCHEMA_VERSION, provenance=prov, results=results), notes
