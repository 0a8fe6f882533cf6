"""The session's engines (:class:`EnginePool`): one live engine process per family and spec, one heavy
engine at a time on the device (a light one beside it), retired and restarted as the cases ask."""
from __future__ import annotations

import json
from pathlib import Path

from .. import timing as _timing
from .family import check_available, families, is_light
from .process import EngineProcess


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
