"""The statistics behind verdicts and the gate: pure functions over round-level figures.

A *round* is one call of a probe (its own warm-up and repetitions); its figure is the median of
its repetitions. Repetitions inside a round are correlated (same engine, same host state), so
every decision here uses the spread **between rounds**:

- :func:`interval`: a two-sided Student-t confidence interval of the mean of the round figures.
  Distribution-free intervals of the median need 6 rounds to reach 95% (``[min, max]`` of n
  rounds covers the median with probability 1 - 2^(1-n)); the t interval is usable from 2 rounds
  and its width follows the measured spread, so a figure far from its bound is decided early and a
  close one asks for more rounds. Bimodal figures (:func:`modes`) are widened to cover both modes.
- :func:`decide`: passed when the whole interval meets the expectation, failed when the whole
  interval violates it, otherwise inconclusive.
- :func:`compare_rounds`: the baseline gate's test, a Welch interval of the difference of mean
  log figures (a relative change), at a Bonferroni-corrected level.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

# The smallest change the gate may call a regression. Figures of one run cannot show how far the
# next run sits (same commit, same 2-core VM: unchanged figures moved up to 17.8% between runs,
# results/cpu/repro; H200 ceilings 4-13% between back-to-back runs); 5% holds only with run-level
# replication on one host. ``voiceperf repro`` prints the run-to-run changes on a machine.
DEFAULT_TOLERANCE = 0.10

CI_METHOD = "Student-t 95% interval of the mean of the round figures"
# a probe that gives one figure per run (a search such as asr.streams) without declaring it exact:
# the verdict reads that one figure; there is no interval, and the gate does not compare it as a count
ONE_MEASUREMENT = "one measurement: the probe gives one figure per run (a search), not rounds; no interval"
ONE_ROUND = "one round of a timed figure: no spread between rounds, so no interval and no verdict"
# the same, where the probe brackets its own figure (a search whose timed points carry a spread)
ONE_MEASUREMENT_BRACKET = ("one measurement: the probe gives one figure per run (a search), not rounds; "
                           "the interval is the search's own bracket")


def t_quantile(p: float, df: float) -> float:
    from scipy.stats import t

    return float(t.ppf(p, df))


def nearest_rank(values: list[float], q: float) -> float:
    """The ``q`` quantile by nearest rank (a value that occurred: latencies' p95)."""
    xs = sorted(values)
    return xs[min(len(xs) - 1, max(0, math.ceil(q * len(xs)) - 1))]


def interval(values: list[float], confidence: float = 0.95) -> tuple[float, float] | None:
    """Two-sided ``confidence`` interval of the mean of ``values`` (None with fewer than 2)."""
    xs = [float(v) for v in values]
    n = len(xs)
    if n < 2:
        return None
    m = statistics.fmean(xs)
    s = statistics.stdev(xs)
    if s == 0:
        return (m, m)
    h = _half_width(s, n, confidence)
    return (m - h, m + h)


def _half_width(s: float, n: int, confidence: float) -> float:
    """Half the Student-t ``confidence`` interval of a mean of ``n`` values with standard deviation ``s``."""
    return t_quantile(0.5 + confidence / 2, n - 1) * s / math.sqrt(n)


def with_floor(ci: tuple[float, float], value: float, floor: float) -> tuple[float, float]:
    """The interval widened to at least ``value`` ± ``floor`` (relative).

    Rounds of one run share the machine's state for minutes; between runs that state moves (H200,
    same commit: the copy/read ratio 1.003 in one run, 0.983 in the next, each run's rounds within
    ±0.2%). An interval narrower than that floor would promise more than one run can show."""
    h = abs(value) * floor
    return (min(ci[0], value - h), max(ci[1], value + h))


def futile(values: list[float], lo: float | None, hi: float | None, n_max: int, floor: float = 0.0,
           confidence: float = 0.95) -> tuple[float, float] | None:
    """The interval ``n_max`` rounds would give if the next rounds kept this mean and spread, when
    that interval still straddles the bound (more rounds cannot decide: stop for futility, as
    group-sequential tests do); None when more rounds could decide it.

    Optimistic on purpose (the spread of few rounds tends to grow, the mean to move): it stops only
    a case that even a best-case continuation leaves undecided (CPU, 2-core VM: the 560 ms ASR RTF at
    0.99 against a bound of 1, rounds 0.97-1.01, went to 5-6 rounds and stayed inconclusive)."""
    xs = [float(v) for v in values]
    n = len(xs)
    if n < 2 or n >= n_max:
        return None
    m = statistics.fmean(xs)
    h = _half_width(statistics.stdev(xs), n_max, confidence)
    proj = with_floor((m - h, m + h), m, floor)
    return proj if decide(proj, lo, hi) == "inconclusive" else None


def decide(ci: tuple[float, float], lo: float | None, hi: float | None) -> str:
    """passed | failed | inconclusive: where the whole interval lies against [lo, hi]."""
    a, b = ci
    if (lo is not None and b < lo) or (hi is not None and a > hi):
        return "failed"
    if (lo is None or a >= lo) and (hi is None or b <= hi):
        return "passed"
    return "inconclusive"


def spread(samples: list[float]) -> tuple[float, float]:
    """(q25, q75) of the samples."""
    if len(samples) < 2:
        return (samples[0], samples[0])
    q = statistics.quantiles(samples, n=4, method="inclusive")
    return (q[0], q[2])


def search_bracket(points: dict[int, tuple[float, float]], limit: float, floor: float,
                   found: int) -> tuple[int, int]:
    """(lo, hi) around ``found``, the largest size whose median time met ``limit`` in a threshold search.

    ``points``: size -> (q25, q75) of the steady step times at that size (:func:`spread`). A size surely meets
    the limit when its q75 x (1 + floor) <= limit, surely misses it when its q25 x (1 - floor) >
    limit (an infinite time: out of memory). Step time grows with the size, so ``lo`` is the largest
    size that surely meets it (0 if none) and ``hi`` one below the smallest size that surely misses
    (the largest size tried when none does). Both are over the sizes tried: one median decides a
    search, and on a host-bound step it sits within a few percent of the limit (H100, 80 ms chunks,
    one stream: 82.5 ms, so 0 streams; H200 runs 40-65 ms), where the next run can land either side."""
    sure = [b for b, (_, q75) in points.items() if q75 * (1 + floor) <= limit]
    miss = [b for b, (q25, _) in points.items() if q25 * (1 - floor) > limit]
    lo = min(max(sure, default=0), found)
    if miss:
        hi = min(miss) - 1
    else:
        hi = max(points, default=found)
    return lo, max(hi, found)


@dataclass
class Modes:
    groups: list[list[float]]

    @property
    def values(self) -> list[float]:
        return [statistics.median(g) for g in self.groups]

    def describe(self, fmt=lambda v: f"{v:.4g}", what: str = "values") -> str:
        return " and ".join(f"{fmt(statistics.median(g))} ({len(g)} {what})" for g in self.groups)

    def to_json(self) -> list[dict]:
        return [{"value": statistics.median(g), "n": len(g), "min": min(g), "max": max(g)} for g in self.groups]


def modes(values: list[float], min_gap: float = 0.10, separation: float = 1.0) -> Modes | None:
    """Two separate modes, or None.

    Split at the widest gap between sorted values; bimodal when each side holds at least two
    values, the gap is at least ``min_gap`` of the median, and at least ``separation`` times the
    wider side's own range (a single outlier is not a mode). Seen on the H200, qwen3-0.6b decode
    repetitions of one run: 0.107-0.130 (8) and 0.156-0.169 (7) of the read ceiling.
    """
    xs = sorted(float(v) for v in values if v is not None and math.isfinite(v))
    if len(xs) < 4:
        return None
    med = statistics.median(xs)
    gaps = [(xs[i + 1] - xs[i], i) for i in range(len(xs) - 1)]
    gap, i = max(gaps)
    a, b = xs[: i + 1], xs[i + 1:]
    if len(a) < 2 or len(b) < 2:
        return None
    if gap < min_gap * abs(med) or gap < separation * max(a[-1] - a[0], b[-1] - b[0]):
        return None
    return Modes([a, b])


@dataclass
class RoundComparison:
    verdict: str  # regressed | improved | unchanged | inconclusive | untestable
    change: float  # relative change of the geometric means, new/old - 1
    ci: tuple[float, float] | None  # interval of the relative change
    note: str = ""
    level: float = 0.05
    n_old: int = 0
    n_new: int = 0


def unstable(reps: list[float], factor: float = 1.5) -> tuple[float, float] | None:
    """(slowest, fastest) when the repetitions of one run span ``factor`` or more, else None.

    A figure whose repetitions move by half within minutes depends on a state of the machine the
    run does not control (H200, qwen3-0.6b decode at batch 1: repetitions of one run between 389
    and 640 tok/s, the next run's rounds all near 640: ENGINES.md, host-side mode). Its interval
    over rounds says how well this run's state was measured, not what the next run will see. Only
    for positive figures (a ratio of two values of one sign)."""
    xs = [float(v) for v in reps if v is not None and math.isfinite(v)]
    if len(xs) < 4 or min(xs) <= 0:
        return None
    lo, hi = min(xs), max(xs)
    return (lo, hi) if hi >= factor * lo else None


MIN_ROUNDS_GATE = 3


def compare_rounds(old: list[float], new: list[float], higher_is_better: bool, tolerance: float,
                   alpha: float, n_figures: int = 1) -> RoundComparison:
    """Did the figure change beyond ``tolerance``, beyond what the rounds' spread explains?

    Works on log figures (a relative change). The interval of the difference of means is a
    Welch interval at one-sided level alpha / n_figures (Bonferroni over the figures compared in
    one run). regressed: the whole interval is worse than -tolerance; improved: the whole interval
    is better than +tolerance; unchanged: the interval stays above -tolerance on the bad side (no
    regression beyond the tolerance is plausible); inconclusive: the interval straddles it.
    Needs ``MIN_ROUNDS_GATE`` positive round figures on each side, else untestable.
    """
    level = alpha / max(1, n_figures)
    o = [math.log(v) for v in old if v is not None and v > 0 and math.isfinite(v)]
    n = [math.log(v) for v in new if v is not None and v > 0 and math.isfinite(v)]
    if len(o) < MIN_ROUNDS_GATE or len(n) < MIN_ROUNDS_GATE:
        return RoundComparison("untestable", _ratio(old, new), None,
                               f"needs {MIN_ROUNDS_GATE} rounds on each side (baseline {len(o)}, this run {len(n)})",
                               level, len(o), len(n))
    d = statistics.fmean(n) - statistics.fmean(o)
    v1, v2 = statistics.variance(o) / len(o), statistics.variance(n) / len(n)
    se = math.sqrt(v1 + v2)
    if se == 0:
        lo = hi = d
    else:
        df = (v1 + v2) ** 2 / ((v1 ** 2 / (len(o) - 1) if v1 else 0) + (v2 ** 2 / (len(n) - 1) if v2 else 0))
        h = t_quantile(1 - level, df) * se
        lo, hi = d - h, d + h
    sign = 1 if higher_is_better else -1
    good_lo, good_hi = sorted((sign * lo, sign * hi))  # the log change, "better" positive
    t = math.log1p(tolerance)  # symmetric in log space: a 5% tolerance is a ratio outside [1/1.05, 1.05]
    if good_hi < -t:
        verdict = "regressed"
    elif good_lo > t:
        verdict = "improved"
    elif good_lo >= -t:
        verdict = "unchanged"
    else:
        verdict = "inconclusive"
    ci = (math.expm1(lo), math.expm1(hi))
    note = {"regressed": "", "improved": "",
            "unchanged": "no change beyond the tolerance",
            "inconclusive": "the interval of the change straddles the tolerance: more rounds would decide"}[verdict]
    return RoundComparison(verdict, math.expm1(d), ci, note, level, len(o), len(n))


def _ratio(old: list[float], new: list[float]) -> float:
    try:
        return statistics.median(new) / statistics.median(old) - 1.0
    except (statistics.StatisticsError, ZeroDivisionError):
        return float("nan")
