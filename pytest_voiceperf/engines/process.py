"""One engine in its own worker process (:class:`EngineProcess`): JSON lines over stdin/stdout, the
engine's output in a log, a crash, out-of-memory, hang or exit turned into an EngineError with the
log's last lines; killing the process group releases the device memory the engine held."""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from .. import timing as _timing
from ..exceptions import EngineError, Unmeasured
from . import allocator, caches, interpreters
from .family import families, label


def _tail(path: Path, lines: int = 25) -> str:
    try:
        data = path.read_bytes()[-16000:].decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-lines:])


class EngineProcess:
    """One engine worker. Not thread-safe; one call at a time."""

    serial = 0  # the pool's number for this process, unique in a session
    handed_out = 0  # EnginePool.handouts when the pool last handed it out

    def __init__(self, family: str, spec: dict, *, log_dir: Path, start_timeout: float,
                 env: dict | None = None, progress: Callable[[str], None] | None = None,
                 timing: _timing.Timing | None = None):
        self.family = family
        self.spec = spec
        self.progress = progress or (lambda msg: None)
        self.timing = timing or _timing.Timing()
        self.label = label(family, spec)
        self.log_path = Path(tempfile.mkstemp(prefix=f"{family}-", suffix=".log", dir=log_dir)[1])
        self._log = open(self.log_path, "ab")
        penv = dict(os.environ)
        penv.update(caches.env(os.environ))  # compile and JIT caches kept between runs
        penv.update(allocator.env(os.environ, spec.get("device")))  # CPU: a heap policy that does not move with what ran before
        penv.update(env or {})
        penv = interpreters.worker_env(family, penv)  # an engine with an environment of its own gets only that
        penv["PYTHONUNBUFFERED"] = "1"
        self.proc = subprocess.Popen(
            [interpreters.python_of(family), "-m", "pytest_voiceperf.engines.worker", family, families()[family].module],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
            env=penv, start_new_session=True,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None  # both are pipes
        self._in, self._out = self.proc.stdin, self.proc.stdout
        self._buf = b""
        self.info: dict = {}
        self.last_warmup_s = 0.0
        self.env = dict(env or {})
        self.start_timeout = start_timeout
        self._start(spec)

    def _start(self, spec: dict) -> None:
        t0 = time.perf_counter()
        try:
            with self.timing.phase(_timing.ENGINE_START, self.label):
                self.info = self._request({"op": "start", "spec": spec}, timeout=self.start_timeout,
                                          what="engine start")
        except BaseException:  # a start cut short (Ctrl-C, a failure) leaves no process behind
            self.kill()
            raise
        self.info.setdefault("start_s", time.perf_counter() - t0)
        if self.last_warmup_s:
            self.info.setdefault("start_warmup_s", round(self.last_warmup_s, 2))

    def restart(self, spec: dict) -> None:
        """Close this worker's engine and start ``spec`` in the same process (Family.reuse_worker)."""
        was = self.label
        self.spec, self.label = spec, label(self.family, spec)
        self._start(spec)
        self.info["worker_reused_after"] = was

    # -- protocol -----------------------------------------------------------------------
    def call(self, method: str, timeout: float, **kwargs) -> dict:
        with self.timing.phase(_timing.MEASURING, self.label):
            out = self._request({"op": "call", "method": method, "kwargs": kwargs}, timeout=timeout, what=method)
        # the engine says how much of the call was warm-up
        self.timing.move(_timing.MEASURING, _timing.WARMUP, self.label, self.last_warmup_s)
        return out

    def _request(self, msg: dict, timeout: float, what: str) -> dict:
        if self.proc.poll() is not None:
            raise self._died(what)
        try:
            self._in.write((json.dumps(msg) + "\n").encode())
            self._in.flush()
        except (BrokenPipeError, OSError):
            raise self._died(what) from None
        deadline = time.monotonic() + timeout
        fd = self._out.fileno()
        while True:
            while b"\n" in self._buf:
                line, self._buf = self._buf.split(b"\n", 1)
                try:
                    reply = json.loads(line)
                except ValueError:
                    continue
                if "progress" in reply:
                    self.progress(str(reply["progress"]))
                    continue
                self.last_warmup_s = float(reply.get("warmup_s") or 0.0)
                if reply.get("ok"):
                    return reply.get("result") or {}
                kind = reply.get("kind", "error")
                err = reply.get("error", "unknown error")
                if kind == "unmeasured":
                    raise Unmeasured(err)
                raise EngineError(f"{self.family} {what} failed: {err}", _tail(self.log_path))
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise EngineError(f"{self.family} {what} hit its time limit of {timeout:.0f}s; the engine was killed",
                                  _tail(self.log_path))
            ready, _, _ = select.select([fd], [], [], min(left, 1.0))
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    self.proc.wait(timeout=10)
                    raise self._died(what)
                self._buf += chunk

    def _died(self, what: str) -> EngineError:
        code = self.proc.poll()
        if code is None:
            try:
                code = self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                code = None
        tail = _tail(self.log_path)
        why = f"exit status {code}"
        if code is not None and code < 0:
            try:
                why = f"killed by {signal.Signals(-code).name}"
            except ValueError:
                pass
        oom = "out of memory" in tail.lower() or "outofmemory" in tail.lower()
        self.kill()
        return EngineError(f"{self.family} engine died during {what} ({why}{', out of memory' if oom else ''})", tail)

    # -- lifecycle ----------------------------------------------------------------------
    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self, timeout: float = 10.0) -> None:
        with self.timing.phase(_timing.ENGINE_STOP, self.label):
            if self.alive:
                try:
                    self._in.write(b'{"op": "stop"}\n')
                    self._in.flush()
                    self.proc.wait(timeout=timeout)
                except (Exception, KeyboardInterrupt):  # a second Ctrl-C while stopping: kill it instead
                    pass
            self.kill()

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        else:
            # the worker is gone; its children (vLLM's engine core) may not be
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            self._log.close()
        except Exception:
            pass
