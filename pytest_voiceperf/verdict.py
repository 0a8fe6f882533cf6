"""From a metric value and a claim's expectation to a verdict, with margin and wording."""
from __future__ import annotations

import math
from dataclasses import dataclass

from .claims import Expect


@dataclass
class Judgement:
    ok: bool
    margin: float | None  # relative distance to the nearest bound; > 0 inside, < 0 outside
    text: str


def judge(value: float, expect: Expect) -> Judgement:
    lo, hi = expect.bounds()
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return Judgement(False, None, "no value")
    ok = (lo is None or value >= lo) and (hi is None or value <= hi)
    margins = []
    if lo is not None:
        margins.append((value - lo) / abs(lo) if lo else value - lo)
    if hi is not None:
        margins.append((hi - value) / abs(hi) if hi else hi - value)
    margin = min(margins) if margins else None
    return Judgement(ok, margin, expect.describe())


def fmt_value(value, unit: str = "") -> str:
    """Human form of a figure with SI prefixes for rates (B/s, FLOP/s, ...)."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, (int, float)) and math.isfinite(value):
        if unit in ("B/s", "FLOP/s", "B", "FLOP"):
            for p, f in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
                if abs(value) >= f:
                    return f"{value / f:.3g} {p}{unit}"
            return f"{value:.3g} {unit}"
        if unit in ("fraction",):
            return f"{value:.3f} ({value * 100:.1f}%)"
        s = f"{value:.4g}"
        return f"{s} {unit}".strip()
    return f"{value} {unit}".strip()


@dataclass
class Outcome:
    """What a measured case ends as: the result's outcome and reason, and what pytest reports."""
    outcome: str  # passed | failed | xfailed | xpassed | unmeasured | error
    reason: str
    report: str  # pytest's report outcome: passed | failed | skipped
    longrepr: str | None = None  # replaces pytest's text when set
    skip_text: str | None = None  # the skip line of an unmeasured case


def outcome_of(exc: BaseException | None, *, report: str, wasxfail: str | None, xfail_reason: str | None,
               strict: bool, location: str, reason: str = "") -> Outcome:
    """The verdict of one measured case from how its call ended (pure; the hook applies it).

    ``exc``: the exception the call raised (Unmeasured, EngineError, VerdictFailed, ...) or None;
    ``report``: pytest's outcome of the call (after its xfail handling); ``wasxfail``: pytest's xfail
    text when it applied; ``xfail_reason``: the claim's xfail when it has one; ``reason``: what the
    case already recorded. An unmeasured case is skipped (failed under --voiceperf-strict) and never
    xfailed; an engine failure is an error; xfail applies to decided outcomes only."""
    from .exceptions import EngineError, Unmeasured

    if isinstance(exc, Unmeasured):
        if strict:
            return Outcome("unmeasured", str(exc), "failed", f"{location}: unmeasured (--voiceperf-strict): {exc}")
        return Outcome("unmeasured", str(exc), "skipped", skip_text=f"unmeasured: {exc}")
    if isinstance(exc, EngineError):
        return Outcome("error", str(exc), "failed")
    if wasxfail is not None:
        return Outcome("xfailed" if report == "skipped" else "xpassed", wasxfail, report)
    if report == "failed" and exc is None and xfail_reason:
        return Outcome("xpassed", f"unexpectedly passed (strict xfail): {xfail_reason}", "failed")
    if report == "passed":
        return Outcome("passed", reason, "passed")
    if report == "failed":
        if not reason and exc is not None:
            reason = str(exc).splitlines()[0][:500] if str(exc) else type(exc).__name__
        return Outcome("failed", reason, "failed")
    return Outcome("unmeasured", reason, report)  # skipped by pytest itself (a skip mark, a fixture)
