"""What a measurement can end in, on the ground floor: every layer (engines, probes, the session, the
verdict, the gate) imports these from here and from nothing above it. Plugins may import them from
``pytest_voiceperf.probes`` too, where they are re-exported."""
from __future__ import annotations


class Unmeasured(Exception):
    """The case cannot be measured here; the message is the reason (a verdict, not a skip)."""


class InvalidMeasurement(Unmeasured):
    """The figure was obtained but is physically impossible (above a measured ceiling) or broken."""


class EngineError(Exception):
    """The engine crashed, ran out of memory, hung or exited; carries its last log lines."""

    def __init__(self, message: str, log_tail: str = ""):
        super().__init__(message)
        self.log_tail = log_tail


class DuplicateProbe(ValueError):
    """Two different functions register the same probe name."""


class TimeLimit(BaseException):
    """An in-process probe ran past its case's deadline (a BaseException: a probe's own
    ``except Exception`` must not swallow it)."""


class VerdictFailed(AssertionError):
    """The measured value is outside the claim's expectation."""
