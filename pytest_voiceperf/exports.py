"""A results file in the formats other tools read: pytest-benchmark's JSON (``pytest-benchmark compare``),
github-action-benchmark's custom bigger/smaller-is-better JSON, Bencher's metric format (BMF).

Exported: what the gate compares, each once (every case's metric, each probe call's primary figure),
with its figures per independent round and the case's interval. pytest-benchmark's files hold
durations: a time (s, ms, us) goes as it is, a rate (tok/s, B/s, FLOP/s) as its inverse (seconds per
token, per byte), named so; a figure that is neither (a fraction, a ratio, a count) is left out and said
so, never passed off as a duration.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from .record import ResultsFile

TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


@dataclass
class Figure:
    name: str  # case node id, and the probe figure's alias.output for a probe's figure
    group: str  # the claim's id
    unit: str
    value: float
    rounds: list[float]  # one figure per independent round
    higher_is_better: bool | None
    ci: tuple[float, float] | None  # the case's interval (the metric's); None for a probe's figure
    outcome: str


def figures(doc: ResultsFile) -> list[Figure]:
    """Every case's metric and each probe call's primary figure (its first output with a direction; a
    call shared by several claims once), with their rounds: what the gate compares, plus a metric that
    is one probe output (named by its claim here; the gate counts that measurement once)."""
    from .gate import figures as gate_figures

    out, seen = [], set()
    for r in doc.results:
        for name, key, rounds, value, hib, _exact in gate_figures(r, once=False):
            if value is None or not math.isfinite(value):
                continue
            if key is not None:
                if key in seen:
                    continue
                seen.add(key)
            xs = [float(x) for x in rounds if isinstance(x, (int, float)) and math.isfinite(x)] or [float(value)]
            if name == "metric":
                out.append(Figure(r.nodeid, r.claim, r.unit or "", float(value), xs, hib,
                                  tuple(r.ci) if r.ci else None, r.outcome))  # type: ignore[arg-type]
            else:
                unit = name.rsplit("[", 1)[-1].rstrip("]") if name.endswith("]") else ""
                out.append(Figure(f"{r.nodeid} {name.split(' [')[0]}", r.claim, unit, float(value), xs, hib,
                                  None, r.outcome))
    return out


def _interval(f: Figure) -> tuple[float, float]:
    return f.ci if f.ci else (min(f.rounds), max(f.rounds))


def github_action_benchmark(doc: ResultsFile) -> dict[str, list[dict]]:
    """{"customBiggerIsBetter": [...], "customSmallerIsBetter": [...]}: one file per tool setting (the
    action reads one ``tool`` per file). ``range``: the half-width of the case's interval over rounds,
    or of the rounds' span for a probe's figure."""
    out: dict[str, list[dict]] = {"customBiggerIsBetter": [], "customSmallerIsBetter": []}
    for f in figures(doc):
        if f.higher_is_better is None:
            continue
        lo, hi = _interval(f)
        what = "interval" if f.ci else "rounds from"
        out["customBiggerIsBetter" if f.higher_is_better else "customSmallerIsBetter"].append(
            {"name": f.name, "unit": f.unit, "value": f.value, "range": f"±{(hi - lo) / 2:.6g}",
             "extra": f"{f.outcome}; {what} [{lo:.6g}, {hi:.6g}] over {len(f.rounds)} rounds"})
    return out


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "value"


def bencher(doc: ResultsFile) -> dict[str, dict]:
    """Bencher Metric Format: {benchmark: {measure: {value, lower_value, upper_value}}}, the interval (or
    the rounds' span) as the bounds; the measure is the unit's slug (``tok-s``, ``s``, ``fraction``)."""
    out: dict[str, dict] = {}
    for f in figures(doc):
        lo, hi = _interval(f)
        out[f.name] = {_slug(f.unit or "value"): {"value": f.value, "lower_value": lo, "upper_value": hi}}
    return out


def _as_seconds(f: Figure) -> tuple[list[float], str] | None:
    """The round figures as durations and the name's suffix, or None when the figure is not one."""
    unit = f.unit.strip()
    if unit in TIME_UNITS:
        return [x * TIME_UNITS[unit] for x in f.rounds], ""
    m = re.fullmatch(r"(.+)/s", unit)
    if m and all(x > 0 for x in f.rounds):
        return [1.0 / x for x in f.rounds], f" [s per {m.group(1)}, inverse of {unit}]"
    return None


def pytest_benchmark(doc: ResultsFile) -> tuple[dict, list[str]]:
    """pytest-benchmark's JSON (``benchmarks`` with ``stats`` over the rounds), and the figures left out."""
    from pytest_benchmark.stats import Stats  # the tool's own statistics over the rounds

    prov = doc.provenance
    benches, skipped = [], []
    for f in figures(doc):
        got = _as_seconds(f)
        if got is None:
            skipped.append(f"{f.name} ({f.unit or 'no unit'}: not a time or a rate)")
            continue
        xs, suffix = got
        st = Stats()
        for x in xs:
            st.update(x)
        stats = st.as_dict()
        stats.update(iterations=1, data=xs)
        benches.append({"group": f.group or None, "name": f.name.split("::")[-1] + suffix,
                        "fullname": f.name + suffix, "params": None, "param": None,
                        "extra_info": {"voiceperf_outcome": f.outcome, "unit": f.unit, "value": f.value,
                                       "interval": list(f.ci) if f.ci else None, "rounds": len(xs)},
                        "options": {"disable_gc": False, "timer": "voiceperf rounds", "min_rounds": len(xs),
                                    "max_time": 0, "min_time": 0, "warmup": True},
                        "stats": stats})
    machine = {"node": "", "processor": str(prov.cpu_model or ""), "machine": str(prov.device or ""),
               "python_implementation": "CPython", "python_version": str(prov.python or ""),
               "python_compiler": "", "release": "", "system": "",
               "cpu": {"brand_raw": str(prov.cpu_model or "")}, "voiceperf_device": prov.device_name}
    commit = {"id": prov.git_commit or "", "dirty": bool(prov.git_dirty), "project": "",
              "branch": "", "time": str(prov.created or "")}
    return ({"machine_info": machine, "commit_info": commit, "benchmarks": benches,
             "datetime": str(prov.created or ""), "version": _version()}, skipped)


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("pytest-benchmark")
    except Exception:
        return "5.0.0"
