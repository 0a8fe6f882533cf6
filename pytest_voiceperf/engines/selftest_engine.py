"""A built-in engine for testing the worker machinery itself: crashes, hangs, OOM.

It is not a stand-in for any inference engine; no claim in ``claims/`` uses it.
"""
from __future__ import annotations

import os
import signal
import time

from .worker import progress, warming


class Engine:
    def __init__(self, model: str = "none", fail_start: bool = False, start_sleep: float = 0.0,
                 stop_sleep: float = 0.0, **_):
        if start_sleep:
            time.sleep(start_sleep)
        if fail_start:
            raise RuntimeError("engine refused to start (fail_start)")
        self.model = model
        self.pid = os.getpid()
        self.hog: list = []
        self.stop_sleep = stop_sleep

    def info(self) -> dict:
        return {"engine": "selftest", "pid": self.pid, "model": self.model}

    def close(self) -> None:
        self.hog.clear()
        time.sleep(self.stop_sleep)

    def echo(self, value: float = 1.0, n: int = 5, warmup_s: float = 0.0, work_s: float = 0.0) -> dict:
        progress(f"echo {value}")
        with warming():
            time.sleep(warmup_s)
        time.sleep(work_s)
        return {"value": value, "samples": [value] * n, "pid": self.pid}

    def environ(self, names: tuple = ()) -> dict:
        """The worker's own environment variables (what the parent gave the engine)."""
        return {n: os.environ.get(n) for n in names}

    def crash(self) -> dict:
        print("selftest: about to crash", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        return {}

    def exit(self, code: int = 3) -> dict:
        print("selftest: exiting", flush=True)
        os._exit(code)

    def hang(self, seconds: float = 3600) -> dict:
        time.sleep(seconds)
        return {}

    def oom(self, device: str = "cpu", gib: float = 4096.0) -> dict:
        """Ask for far more memory than exists; the allocator's error is the engine's error."""
        import torch

        print(f"selftest: allocating {gib} GiB on {device}", flush=True)
        self.hog.append(torch.empty(int(gib * 2**30), dtype=torch.uint8, device=device))
        return {}

    def fill(self, device: str = "cpu", mib: int = 256) -> dict:
        import torch

        self.hog.append(torch.ones(mib * 2**20, dtype=torch.uint8, device=device))
        return {"held_mib": sum(t.numel() for t in self.hog) / 2**20, "pid": self.pid}
