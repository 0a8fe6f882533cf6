"""Where a run's time went: engine starts, warm-ups, measuring, waiting, and the rest.

Every second of the session is attributed to one phase: phases nest (an engine starts inside a
probe's round), and a nested phase's time is taken out of the one around it, so the phases add up
to the wall time; what no phase covers (collection, pytest, reporting) is ``other``.
"""
from __future__ import annotations

import time
from contextlib import contextmanager

ENGINE_START = "engine start"
WARMUP = "warm-up"
MEASURING = "measuring"
ENGINE_STOP = "engine stop"
IN_PROCESS = "measuring in process"
QUIET = "waiting for a quiet machine"
WATCH = "watching rounds for disturbance"
CEILINGS_END = "ceilings at the end"
OTHER = "other (collection, pytest, reporting)"
ORDER = (ENGINE_START, WARMUP, MEASURING, ENGINE_STOP, IN_PROCESS, QUIET, WATCH, CEILINGS_END, OTHER)


class Timing:
    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self.started = clock()
        self.seconds: dict[tuple[str, str], float] = {}  # (phase, engine label or "") -> exclusive seconds
        self._stack: list[list] = []  # [phase, engine, started, nested seconds]

    @contextmanager
    def phase(self, name: str, engine: str = ""):
        entry = [name, engine, self.clock(), 0.0]
        self._stack.append(entry)
        try:
            yield
        finally:
            self._stack.pop()
            total = self.clock() - entry[2]
            self.add(name, engine, total - entry[3])
            if self._stack:
                self._stack[-1][3] += total

    def add(self, name: str, engine: str, seconds: float) -> None:
        key = (name, engine)
        self.seconds[key] = self.seconds.get(key, 0.0) + max(0.0, seconds)

    def move(self, src: str, dst: str, engine: str, seconds: float) -> None:
        """Re-attribute part of a phase (an engine call's warm-up, reported by the engine itself)."""
        seconds = min(max(0.0, seconds), self.seconds.get((src, engine), 0.0))
        self.seconds[(src, engine)] = self.seconds.get((src, engine), 0.0) - seconds
        self.add(dst, engine, seconds)

    def to_json(self, wall: float | None = None) -> dict:
        wall = (self.clock() - self.started) if wall is None else wall
        rows = [{"phase": p, "engine": e or None, "seconds": round(s, 2)}
                for (p, e), s in sorted(self.seconds.items(), key=lambda kv: (_rank(kv[0][0]), kv[0][1]))
                if s > 0.005]
        covered = sum(self.seconds.values())
        by_phase: dict[str, float] = {}
        for (p, _), s in self.seconds.items():
            by_phase[p] = by_phase.get(p, 0.0) + s
        by_phase[OTHER] = max(0.0, wall - covered)
        return {"wall_s": round(wall, 2), "rows": rows,
                "by_phase": {p: round(by_phase[p], 2) for p in ORDER if by_phase.get(p, 0.0) > 0.005}}


def _rank(phase: str) -> int:
    return ORDER.index(phase) if phase in ORDER else len(ORDER)


def merge(docs: list[dict]) -> dict:
    """One table from several processes' (xdist workers) or runs' timing: seconds add up."""
    rows: dict[tuple[str, str | None], float] = {}
    by_phase: dict[str, float] = {}
    wall = 0.0
    for d in docs:
        if not isinstance(d, dict):
            continue
        wall = max(wall, float(d.get("wall_s") or 0.0))
        for r in d.get("rows") or []:
            k = (r["phase"], r.get("engine"))
            rows[k] = rows.get(k, 0.0) + float(r["seconds"])
        for p, s in (d.get("by_phase") or {}).items():
            by_phase[p] = by_phase.get(p, 0.0) + float(s)
    return {"wall_s": round(wall, 2),
            "rows": [{"phase": p, "engine": e, "seconds": round(s, 2)}
                     for (p, e), s in sorted(rows.items(), key=lambda kv: (_rank(kv[0][0]), kv[0][1] or ""))],
            "by_phase": {p: round(by_phase[p], 2) for p in sorted(by_phase, key=_rank)}}


def table_lines(doc: dict) -> list[str]:
    """The terminal table: per phase, then per engine (start, warm-up, measuring, stop)."""
    wall = float(doc.get("wall_s") or 0.0)
    by_phase = doc.get("by_phase") or {}
    total = sum(by_phase.values()) or 1.0
    lines = [f"{'phase':<40} {'seconds':>9} {'share':>6}"]
    for p, s in by_phase.items():
        lines.append(f"{p:<40} {s:>9.1f} {s / total * 100:>5.0f}%")
    per_engine: dict[str, dict[str, float]] = {}
    for r in doc.get("rows") or []:
        if r.get("engine"):
            per_engine.setdefault(r["engine"], {})[r["phase"]] = r["seconds"]
    if per_engine:
        lines.append(f"{'engine':<40} {'start':>9} {'warm-up':>9} {'measuring':>10} {'stop':>7}")
        for e, ph in sorted(per_engine.items(), key=lambda kv: -sum(kv[1].values())):
            lines.append(f"{e[:40]:<40} {ph.get(ENGINE_START, 0):>9.1f} {ph.get(WARMUP, 0):>9.1f} "
                         f"{ph.get(MEASURING, 0):>10.1f} {ph.get(ENGINE_STOP, 0):>7.1f}")
    lines.append(f"wall {wall:.1f} s")
    return lines
