"""Engine worker: ``python -m pytest_voiceperf.engines.worker FAMILY``.

Reads JSON requests on stdin, answers one JSON line each on the original stdout.
Everything the engine prints goes to stderr (the parent's log file), so the
protocol channel stays clean. Replies: ``{"ok": true, "result": {...}}``,
``{"ok": false, "kind": "unmeasured"|"error", "error": "..."}`` and, while a call
runs, any number of ``{"progress": "..."}`` lines.
"""
from __future__ import annotations

import gc
import importlib
import json
import os
import signal
import sys
import threading
import time
import traceback
from contextlib import contextmanager
from typing import TextIO

_proto: TextIO | None = None  # the protocol channel (a private copy of the original stdout)
_warmup_s = 0.0  # seconds of the current request spent warming up (reported to the parent)


@contextmanager
def warming():
    """Engines wrap their untimed warm-up in this, so the run's timing table can tell it apart."""
    global _warmup_s
    t0 = time.perf_counter()
    try:
        yield
    finally:
        _warmup_s += time.perf_counter() - t0


def note_warmup(seconds: float) -> None:
    """For warm-up runs inside a timed loop: add their seconds."""
    global _warmup_s
    _warmup_s += max(0.0, float(seconds))


def _watch_parent() -> None:
    """A worker outlives a killed pytest (it runs in its own session, so the engine's child
    processes can be killed as one group): end the whole group when the parent is gone."""
    parent = os.getppid()
    while True:
        time.sleep(0.5)
        if os.getppid() != parent:
            try:
                os.killpg(os.getpgid(0), signal.SIGKILL)
            finally:
                os._exit(1)


def import_gguf():
    """The ``gguf`` package, or unmeasured with what stopped it: its vocabulary module imports
    ``mistral_common`` when that is importable, and a broken one (seen beside vLLM: "requires
    pycountry") raises an error that is not an ImportError."""
    try:
        import gguf
    except ImportError:
        raise
    except Exception as exc:
        from ..exceptions import Unmeasured

        raise Unmeasured(f"the gguf package could not be imported: {type(exc).__name__}: {exc} (gguf imports "
                         "mistral_common when it is installed; fix or remove that package)") from None
    return gguf


def progress(msg: str) -> None:
    """Engines call this to show progress in the pytest terminal."""
    if _proto is not None:
        _proto.write(json.dumps({"progress": msg}) + "\n")
        _proto.flush()


def _reply(obj: dict) -> None:
    assert _proto is not None
    obj["warmup_s"] = round(_warmup_s, 4)
    _proto.write(json.dumps(obj, default=_default) + "\n")
    _proto.flush()


def _default(o):
    try:
        import numpy as np
        if isinstance(o, np.generic):
            return o.item()
        if isinstance(o, np.ndarray):
            return o.tolist()
    except ImportError:
        pass
    return str(o)


def main(argv: list[str]) -> int:
    global _proto
    family = argv[1]
    module = argv[2]  # the family's Engine module (EngineProcess passes it: built-in or a plugin's)
    # keep the protocol on a private copy of stdout; the engine's prints go to stderr
    _proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    from ..exceptions import Unmeasured
    from . import Engine

    global _warmup_s
    threading.Thread(target=_watch_parent, name="voiceperf-parent-watch", daemon=True).start()
    engine = None
    for line in sys.stdin:
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        _warmup_s = 0.0
        op = msg.get("op")
        if op == "stop":
            break
        try:
            if op == "start":
                if engine is not None:  # the next instance of a reuse_worker family: the last one goes first
                    old, engine = engine, None
                    old.close()
                    del old
                    gc.collect()
                mod = importlib.import_module(module)
                engine = mod.Engine(**msg.get("spec", {}))
                if not isinstance(engine, Engine):
                    raise TypeError(f"{mod.__name__}.Engine lacks info() or close(): see pytest_voiceperf.engines.Engine")
                info = dict(engine.info())
                info.setdefault("worker_python", sys.executable)  # which environment ran it (--voiceperf-python)
                _reply({"ok": True, "result": info})
            elif op == "call":
                method = msg["method"]
                if engine is None or method.startswith("_") or not hasattr(engine, method):
                    raise AttributeError(f"engine {family} has no method {method!r}")
                result = getattr(engine, method)(**msg.get("kwargs", {}))
                _reply({"ok": True, "result": result})
            else:
                raise ValueError(f"unknown op {op!r}")
        except Unmeasured as exc:
            _reply({"ok": False, "kind": "unmeasured", "error": str(exc)})
        except BaseException as exc:  # report and keep serving; the parent decides
            traceback.print_exc()
            text = f"{type(exc).__name__}: {exc}"
            _reply({"ok": False, "kind": "error", "error": text[:2000]})
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                break
    if engine is not None and hasattr(engine, "close"):
        try:
            engine.close()
        except Exception:
            traceback.print_exc()
    return 0


if __name__ == "__main__":
    # run in the module the engines import (``from .worker import progress``), not in a second
    # copy named __main__, so progress lines and warm-up seconds reach the protocol channel
    from pytest_voiceperf.engines.worker import main as _main

    sys.exit(_main(sys.argv))
