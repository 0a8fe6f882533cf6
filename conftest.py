"""This repository's own conftest.py: how to add a probe without writing a package.

A probe is a function decorated with ``@probe``; a conftest.py (or a plugin) hands it to the
run through the ``pytest_voiceperf_add_probes`` hook. A claim file then uses it by name, here
``examples/claims/host-frame-timer.yaml``:

    pytest --voiceperf --voiceperf-claims examples/claims
    voiceperf validate examples/claims      # the CLI loads the conftest.py files above the claims too

The probe measures something a streaming voice client depends on and no engine shows: a client
sends one audio frame every 20 ms, so a timer that wakes late delays audio and, late often
enough, breaks real time.
"""
import math
import statistics
import time

from pytest_voiceperf.probes import Measurement, probe


@probe("host.frame_timer", outputs={"late_p50_ms": "ms", "late_p99_ms": "ms", "frames": ""}, exact=("frames",))
def frame_timer(ctx, frame_ms: float = 20.0, frames: int = 100, reps: int = 2):
    """Wake-up lateness of a loop paced at one audio frame (sleep until the next frame's deadline):
    median and 99th percentile over ``frames`` frames, in ms after the deadline; ``reps`` passes."""
    period = float(frame_ms) / 1000.0
    p50s, p99s = [], []
    for _ in range(max(1, int(reps))):
        late: list[float] = []
        deadline = time.perf_counter() + period
        for _ in range(int(frames)):
            wait = deadline - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            late.append(max(0.0, time.perf_counter() - deadline) * 1000.0)
            deadline += period
        ordered = sorted(late)
        p50s.append(statistics.median(ordered))
        p99s.append(ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)])
    # samples: one figure per pass (a probe with samples is timed: it takes rounds)
    return Measurement({"late_p50_ms": statistics.median(p50s), "late_p99_ms": statistics.median(p99s),
                        "frames": float(frames)},
                       {"late_p50_ms": p50s, "late_p99_ms": p99s},
                       info={"frame_ms": float(frame_ms), "clock": "time.perf_counter", "sleep": "time.sleep"})


def pytest_voiceperf_add_probes(registry):
    registry.add(frame_timer.voiceperf_probe)
