"""The verdict of a case, decided here and only here: from the metric's figure per independent round to
its interval (:func:`interval_verdict`), the decision against the claim's bounds and the words a user
reads (:func:`conclude`), then the pytest outcome (:func:`outcome_of`). Pure: unit-tested from lists of
measurements (tests/unit/test_verdict.py); the session's round loop only adds rounds."""
from __future__ import annotations

import itertools
import math
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import expr, stats
from .claims import Expect
from .exceptions import Unmeasured, VerdictFailed
from .probes import spread

if TYPE_CHECKING:
    from .record import ResultRecord


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


def fill(result: ResultRecord, ev: dict) -> None:
    """The case's figure, its rounds and interval from an evaluation (interval_verdict)."""
    result.value = ev["value"]
    result.round_values = ev["round_values"]
    result.samples = ev["round_values"]
    result.rep_samples = ev["rep_samples"]
    result.rounds = ev["rounds"]
    result.ci = ev["ci"]
    result.ci_method = ev["ci_method"]
    result.modes = ev["modes"]
    result.unstable = ev["unstable"]
    result.decision = ev["decision"]


def metric_value(metric: str, names: dict, outputs: dict) -> float:
    """The claim's metric over the probes' outputs; Unmeasured when it gives no finite number."""
    try:
        v = expr.evaluate(metric, names, outputs)
    except expr.ExprError as exc:
        raise Unmeasured(f"measurement invalid: {exc}") from None
    if isinstance(v, bool):
        v = float(v)
    if not isinstance(v, (int, float)) or not math.isfinite(v):
        raise Unmeasured(f"measurement invalid: the metric gave {v!r}, not a finite number")
    return float(v)


def fmt_ci(ci, unit: str) -> str:
    if not ci:
        return "-"
    if unit == "fraction":
        return f"[{ci[0]:.3f}, {ci[1]:.3f}]"
    return f"[{fmt_value(ci[0], unit)}, {fmt_value(ci[1], unit)}]"


def bracket_of(metric: str, names: dict, ms: dict) -> tuple[float, float] | None:
    """The metric over the corners of the brackets its one-measurement probes give their outputs
    (a search's count: asr.streams), or None where none does. Each output is taken at both ends of
    its bracket, the others as measured."""
    ends = [(a, out, ms[a].bracket[out]) for a, out in sorted(expr.references(metric))
            if a in ms and out in ms[a].bracket]
    if not ends:
        return None
    got = []
    for corner in itertools.product(*[(lo, hi) for _, _, (lo, hi) in ends]):
        outs = {a: dict(m.values) for a, m in ms.items()}
        for (a, out, _), x in zip(ends, corner):
            outs[a][out] = float(x)
        try:
            got.append(metric_value(metric, names, outs))
        except Unmeasured:
            return None
    return (min(got), max(got))

def metric_samples(metric: str, names: dict, outputs: dict, samples: dict) -> list[float]:
    """The metric evaluated per run: the i-th sample of every output that has samples."""
    lengths = [len(s) for per in samples.values() for s in per.values() if s]
    if not lengths:
        return []
    n = min(lengths)
    out = []
    for i in range(n):
        vals = {a: dict(v) for a, v in outputs.items()}
        for alias, per in samples.items():
            for o, s in per.items():
                if s and o in vals[alias]:
                    vals[alias][o] = s[i]
        try:
            v = expr.evaluate(metric, names, vals)
        except expr.ExprError:
            return []
        if isinstance(v, (int, float)) and math.isfinite(v):
            out.append(float(v))
    return out


def interval_verdict(values: list[float], reps: list[float], *, deterministic: bool, exact: bool,
                     bracket: tuple[float, float] | None, floor: float, bounds: tuple) -> dict:
    """The decision from the metric's figure per independent round (``values``) and per repetition
    (``reps``): its interval, how it was made, the modes or instability, and passed, failed or
    inconclusive against ``bounds`` (lower, upper; None where open). ``deterministic``: one round
    stands for all (counts, a setting, one search); ``exact``: the metric reads only counts;
    ``bracket``: a search's own bracket of the metric; ``floor``: the run-to-run floor (relative)
    below which a timed figure's interval is never narrowed."""
    det = deterministic
    rounds = 1 if det else len(values)
    lo, hi = bounds
    value = float(statistics.median(values))
    md = unstable = None
    one_round = not det and len(values) < 2  # a timed figure with no spread between rounds
    if bracket is not None:
        ci, method = (min(bracket[0], value), max(bracket[1], value)), stats.ONE_MEASUREMENT_BRACKET
    elif det or one_round:
        ci, method = (value, value), ("exact: the metric is made of counts (frames, FLOPs, bytes, calls), "
                                      "not timings" if exact else
                                      stats.ONE_MEASUREMENT if det else stats.ONE_ROUND)
    else:
        ci = stats.interval(values) or (value, value)
        method = stats.CI_METHOD
        if len(set(values)) == 1 and len(set(reps)) <= 1:
            method = f"exact: the figure did not vary over {len(values)} rounds"
        elif floor:  # an exact ratio of counts has no drift; a timed figure does
            wide = stats.with_floor(ci, value, floor)
            if wide != ci:
                ci, method = wide, method + f", widened to the run-to-run floor ±{floor * 100:g}%"
        md = stats.modes(values) or stats.modes(reps)
        if md is not None:  # never one number with a small spread: the interval covers both modes
            allv = [x for g in md.groups for x in g]
            ci = (min(ci[0], min(allv)), max(ci[1], max(allv)))
            method += ", widened to cover both modes"
        else:
            unstable = stats.unstable(reps)
    return {"value": value, "round_values": values, "rep_samples": reps, "rounds": rounds, "ci": ci,
            "ci_method": method, "modes": md.to_json() if md else None, "deterministic": det,
            "unstable": list(unstable) if unstable else None,
            "decision": "inconclusive" if one_round else stats.decide(ci, lo, hi), "one_round": one_round}


def conclude(result, claim, ev: dict, *, n_min: int, n_max: int, budget: float, elapsed: float, futility: str,
             noise_floor: float) -> None:
    """Fill the case's result from its evaluation and say the verdict: return when it passed, raise
    VerdictFailed when it failed and Unmeasured (inconclusive) with the wording a user reads."""
    fill(result, ev)
    if len(result.rep_samples) >= 2:
        result.spread = list(spread(result.rep_samples))
    result.margin = judge(ev["value"], claim.expect).margin
    ci_txt = fmt_ci(result.ci, claim.unit)
    mode_txt = ""
    if result.modes:
        mode_txt = (" bimodal: " + " and ".join(f"{fmt_value(md['value'], claim.unit)} ({md['n']})"
                                                for md in result.modes) + ";")
    elif result.unstable:
        mode_txt = (f" unstable: repetitions of this run between {fmt_value(result.unstable[0], claim.unit)} and "
                    f"{fmt_value(result.unstable[1], claim.unit)};")
    if ev["one_round"]:
        raise Unmeasured(f"inconclusive: {fmt_value(result.value, claim.unit)} from one round; a timed figure "
                         f"is decided by the spread between independent rounds, so it needs 2 or more "
                         f"(rounds {n_min}-{n_max} here: --voiceperf-rounds, ini voiceperf_min_rounds or the "
                         f"claim's rounds.min)")
    if ev["decision"] == "inconclusive" and ev["ci_method"] == stats.ONE_MEASUREMENT_BRACKET:
        raise Unmeasured(f"inconclusive: {fmt_value(result.value, claim.unit)} from one search, whose own bracket "
                         f"{ci_txt} (the spread of its timed points, ±{noise_floor:g} run-to-run) "
                         f"straddles {claim.expect.describe()}: the next run can land on either side")
    if ev["decision"] == "inconclusive":
        raise Unmeasured(f"inconclusive:{mode_txt} {fmt_value(result.value, claim.unit)}, interval {ci_txt} "
                         f"straddles {claim.expect.describe()} after {result.rounds} rounds "
                         f"({elapsed:.0f} s; budget {n_max} rounds, {budget:g} s){futility}")
    if ev["decision"] == "failed":
        raise VerdictFailed(f"{fmt_value(result.value, claim.unit)} is not {claim.expect.describe()} "
                            f"(interval {ci_txt}, {result.rounds} rounds;{mode_txt or ' ' + ev['ci_method']})")
