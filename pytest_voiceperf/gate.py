"""The baseline gate: did a figure get worse than in a saved run, beyond its noise?

Figures are compared round against round (a round: one probe call with its own warm-up and
repetitions; repetitions inside a round are correlated and never counted as samples). For each
figure, :func:`pytest_voiceperf.stats.compare_rounds` builds a Welch interval of the change of the
mean log figure at one-sided level alpha / m, m = the figures the baseline offers for comparison
(Bonferroni), and calls it:

- **regressed**: the whole interval is worse than the tolerance (claim ``tolerance`` or ini
  ``voiceperf_tolerance``): the run fails;
- **unchanged**: no change beyond the tolerance is plausible;
- **inconclusive**: the interval straddles the tolerance (more rounds would decide);
- **improved**: reported, never failed;
- **untestable**: fewer than 3 rounds on a side (a file from before rounds has one), or a side
  was measured on a disturbed machine (``untestable: disturbed``), or a ceiling the case's
  probes were checked against (bf16 matmul, read bandwidth: measured in each session) moved beyond
  the tolerance between the two runs, decided over the ceiling's rounds where both runs recorded
  them (``untestable: machine changed``; counts are still compared).

Compared by default: the claim's metric (when its direction is known) and each probe's primary
figure (its first declared output with a direction: rates up, times down), each probe call once
per run however many claims share it. ``all_figures`` compares every output with a direction.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from . import stats
from .explain import explain
from .probes import call_key
from .record import ComparisonRecord, Provenance, ResultRecord, ResultsFile, provenance_of, results_file
from .record import result as as_result
from .stats import MIN_ROUNDS_GATE, compare_rounds

HIGHER = ("tok/s", "B/s", "FLOP/s", "streams", "x")
LOWER = ("s", "ms", "rtf", "RTF")


@dataclass
class Comparison:
    figure: str
    old: float
    new: float
    change: float  # relative change of the geometric mean of the rounds, new/old - 1
    ci: list | None  # interval of the relative change
    verdict: str  # regressed | improved | unchanged | inconclusive | untestable
    higher_is_better: bool
    note: str = ""
    rounds: list | None = None  # [baseline rounds, this run's rounds]
    level: float | None = None  # the one-sided level after the correction for several figures
    explanation: str = ""  # which measured term moved (regressed and improved figures)

    def text(self) -> str:
        ci = (f" interval [{self.ci[0] * 100:+.1f}%, {self.ci[1] * 100:+.1f}%]" if self.ci else "")
        rounds = f", rounds {self.rounds[0]} vs {self.rounds[1]}" if self.rounds else ""
        note = f": {self.note}" if self.note else ""
        why = f"; why: {self.explanation}" if self.explanation else ""
        return (f"{self.figure}: {self.old:.4g} -> {self.new:.4g} ({_pct(self.change)}{ci}{rounds}) "
                f"{self.verdict}{note}{why}")


def _pct(x: float) -> str:
    return f"{x * 100:+.1f}%" if x is not None and math.isfinite(x) else "n/a"


def direction_of_unit(unit: str) -> bool | None:
    u = (unit or "").strip()
    if u.split("/")[0].strip() in ("s", "ms"):  # seconds per audio second, ms per token: lower is better
        return False
    if u in HIGHER or u.endswith("/s"):
        return True
    if u in LOWER:
        return False
    return None


Figure = tuple[str, "str | None", list, "float | None", bool, bool]


def figures(result: ResultRecord | dict, all_figures: bool = False, once: bool = True) -> list[Figure]:
    """(figure name, dedup key or None, round values, value, higher_is_better, exact) this result
    offers; exact: a count or a figure that does not vary (compared as it is, without rounds).
    ``once``: a metric that is one of the figures offered (``metric: d.tok_s``: the same rounds, the
    same direction) is left out, so one measurement is one figure for the correction and the count of
    what is guarded; the probe's figure stays (it carries the call's key, shared between claims)."""
    r = as_result(result)
    out: list[Figure] = []
    hib = r.higher_is_better
    rounds_ok = r.has_rounds  # a file from before rounds holds repetitions: never compared as rounds
    metric: Figure | None = None
    if hib is not None and r.value is not None:
        exact = rounds_ok and r.ci_method.startswith("exact")
        metric = ("metric", None, list(r.samples) if rounds_ok else [], r.value, hib, exact)
    for alias, p in r.probes.items():
        names = [n for n in p.units if direction_of_unit(p.units[n]) is not None and n in p.values]
        if not all_figures:
            names = names[:1]
        for name in names:
            key = f"{_call(p)}.{name}"
            # only an output its probe declares exact (a count, a setting) is compared as it is; one
            # figure of a timed search (asr.streams' bisection: 256 then 576 streams, same code) is not
            exact = rounds_ok and name in p.exact
            out.append((f"{alias}.{name} [{p.units[name]}]", key, list(p.samples.get(name) or []) if rounds_ok else [],
                        p.values.get(name), bool(direction_of_unit(p.units[name])), exact))
    if metric is not None and not (once and any(_same(metric, f) for f in out)):
        out.insert(0, metric)
    return out


def _same(a: Figure, b: Figure) -> bool:
    """Two figures that are one measurement: the same rounds (at least one), value and direction."""
    return bool(a[2]) and a[2] == b[2] and a[3] == b[3] and a[4] == b[4]


def drifted(provenance: Provenance | dict | None, tolerance: float) -> dict[str, str]:
    """Probe calls whose ceiling, measured again at the end of the run, moved beyond the tolerance:
    probe key -> why. The machine changed state during that run (seen on the H200: bf16 matmul
    643 TFLOP/s in a run's rounds, +9% when re-measured 5 s later), so its figures cannot be gated."""
    out = {}
    for c in provenance_of(provenance).ceilings_end:
        if c.change is not None and abs(c.change) > tolerance:
            key = c.call or call_key(c.probe, c.args)
            out[key] = f"{c.probe} {c.args or ''} moved {c.change * 100:+.1f}% when measured again at the end of the run"
    return out


def machine_changed(old: ResultRecord, new: ResultRecord, tolerance: float) -> tuple[str, int]:
    """Why a case's timed figures cannot be compared between the two runs, or '', and which way the
    machine moved (+1 faster, -1 slower, 0 both or neither): a ceiling its probes were checked against
    (the same hardware probe, measured in each session) moved beyond the tolerance between the runs.
    The machine was faster or slower, which no code change of the engine explains (2-core VM, two days:
    bf16 matmul 886 and 796 GFLOP/s, and every engine 12-24% slower with it, llama.cpp's untouched decode
    included). The ceiling's own claim (hw-*) still compares it."""
    out, ways = [], set()
    for alias, p in new.probes.items():
        q = old.probes.get(alias)
        if q is None:
            continue
        # the ceilings its figures were checked against, and those its rounds read (a fit that
        # divides by the read bandwidth)
        for kind, fig in (("ceilings", "ceiling"), ("ceilings_read", "value")):
            for key, c in (p.info.get(kind) or {}).items():
                d = (q.info.get(kind) or {}).get(key)
                if not d or not d.get(fig) or not c.get(fig):
                    continue
                ch = c[fig] / d[fig] - 1.0
                if abs(ch) <= tolerance:
                    continue
                what = (f"its {c.get('label') or key}" if kind == "ceilings" else
                        f"the {c.get('probe') or key} its rounds read")
                seen = f"{what} was {d[fig]:.4g} in the baseline and {c[fig]:.4g} in this run ({ch * 100:+.1f}%)"
                # with the ceiling's rounds on both sides, the move must be decided beyond the tolerance
                # (a 2-core VM's read bandwidth: best rounds 30.8 and 25.6 GB/s in two runs minutes apart,
                # 30.5 GB/s when read again at the end of the second)
                ro, rn = _numbers(d.get("rounds")), _numbers(c.get("rounds"))
                if len(ro) >= stats.MIN_ROUNDS_GATE and len(rn) >= stats.MIN_ROUNDS_GATE:
                    rc = stats.compare_rounds(ro, rn, True, tolerance, MACHINE_ALPHA)
                    if rc.verdict not in ("regressed", "improved") or rc.ci is None:
                        continue
                    seen += f", interval [{rc.ci[0] * 100:+.1f}%, {rc.ci[1] * 100:+.1f}%] over its rounds"
                out.append(seen)
                ways.add(1 if ch > 0 else -1)
    return "; ".join(dict.fromkeys(out)), (ways.pop() if len(ways) == 1 else 0)


MACHINE_ALPHA = 0.05  # one-sided level at which a ceiling's rounds say the machine moved between the runs


def _numbers(xs) -> list[float]:
    return [float(x) for x in xs if isinstance(x, (int, float)) and not isinstance(x, bool)] if isinstance(xs, list) else []


def compare_result(old: ResultRecord | dict, new: ResultRecord | dict, tolerance: float, alpha: float,
                   n_figures: int = 1, all_figures: bool = False, seen: set | None = None,
                   drift_old: dict | None = None, drift_new: dict | None = None) -> list[Comparison]:
    old, new = as_result(old), as_result(new)
    out = []
    tol = float(new.tolerance) if new.tolerance is not None else tolerance
    old_figs = {f[0]: f for f in figures(old, all_figures)}  # the same case's figure by alias and output
    disturbed = new.is_disturbed or old.is_disturbed
    changed, moved = machine_changed(old, new, tol)  # the same for every timed figure of the case
    keys = dict.fromkeys(_probe_keys(new) + _probe_keys(old))  # the calls the case's figures come from
    for name, key, rounds_new, v_new, hib, exact_new in figures(new, all_figures):
        of = old_figs.get(name)
        if of is None or of[3] is None or v_new is None:
            continue
        if key is not None and seen is not None:
            if key in seen:
                continue  # a probe call shared by several claims is compared once per run
            seen.add(key)
        if disturbed:
            side = "this run" if new.is_disturbed else "the baseline"
            out.append(Comparison(name, of[3], v_new, _rel(of[3], v_new), None, "untestable", hib,
                                  f"disturbed: {side} measured it on a disturbed machine"))
            continue
        drift = [f"{side}: {d[k]}" for side, d in (("baseline", drift_old), ("this run", drift_new)) if d
                 for k in keys if k in d]
        if drift:
            out.append(Comparison(name, of[3], v_new, _rel(of[3], v_new), None, "untestable", hib,
                                  "disturbed: " + "; ".join(dict.fromkeys(drift))))
            continue
        if exact_new and of[5]:  # counts: any change beyond the tolerance is real, no rounds needed
            ch = _rel(of[3], v_new)
            better = ch if hib else -ch
            verdict = ("regressed" if better < -tol else "improved" if better > tol else "unchanged")
            out.append(Comparison(name, of[3], v_new, ch, [ch, ch], verdict, hib,
                                  "exact figure (a count, or one that does not vary): compared as it is"))
            continue
        rc = compare_rounds(of[2], rounds_new, hib, tol, alpha, n_figures)
        if rc.verdict == "regressed" and (_unsteady(old) or _unsteady(new)):
            # a bimodal or unstable figure: one run may simply have sat in another state. Regressed
            # only when every round of this run is worse than every baseline round beyond the tolerance
            worst_old = min(of[2]) if hib else max(of[2])
            best_new = max(rounds_new) if hib else min(rounds_new)
            sep = best_new < worst_old / (1 + tol) if hib else best_new > worst_old * (1 + tol)
            if not sep:
                rc.verdict, rc.note = "inconclusive", f"{_unsteady(old) or _unsteady(new)} figure: the rounds of the two runs overlap"
        if changed:
            # a machine that got faster cannot explain a slowdown (nor a slower one a speedup): such a
            # change stands, understated if anything; any other is left untestable (the move may have
            # made it, or hidden a real change: a faster machine under a slower engine reads unchanged)
            if (rc.verdict, moved) in (("regressed", 1), ("improved", -1)):
                rc.note = (f"{rc.note}; " if rc.note else "") + (
                    f"the machine was {'faster' if moved > 0 else 'slower'} in this run ({changed}): it cannot "
                    "explain this change")
            else:
                out.append(Comparison(name, of[3], v_new, _rel(of[3], v_new), None, "untestable", hib,
                                      "the machine changed between the runs: " + changed))
                continue
        out.append(Comparison(name, of[3], v_new, rc.change if rc.ci else _rel(of[3], v_new),
                              list(rc.ci) if rc.ci else None, rc.verdict, hib, rc.note,
                              [rc.n_old, rc.n_new], rc.level))
    return out


def _unsteady(r: ResultRecord) -> str:
    """'bimodal' or 'unstable' (repetitions of one run spanning 1.5x, also found in files written
    before the flag existed), else ''."""
    if r.modes:
        return "bimodal"
    if r.unstable or stats.unstable(r.rep_samples):
        return "unstable"
    return ""


def _call(p) -> str:
    """A probe call's identity as the session keyed it (defaults filled in); files from before it was
    recorded: the arguments as written."""
    return p.call or call_key(p.probe, p.args)


def _probe_keys(r: ResultRecord) -> list[str]:
    """The probe calls a case's figures come from: its own, and those its probes read inside their
    rounds (a ceiling the decode fit divides by)."""
    return list(dict.fromkeys(k for p in r.probes.values() for k in [_call(p), *p.reads]))


def _rel(old: float, new: float) -> float:
    return (new / old - 1.0) if old else (math.inf if new else 0.0)


GUARDED = ("regressed", "improved", "unchanged")  # decided figures: the gate guards them
FAILED = ("failed", "xfailed", "error")


@dataclass
class Gate:
    baseline_path: str
    baseline: ResultsFile | dict  # a results document (a dict is read as one)
    tolerance: float
    alpha: float
    all_figures: bool = False
    new_provenance: Provenance | dict | None = None  # this run's, when known (compare); the baseline's is in the file
    mode: str = "changes"  # changes: a claim that failed in the baseline too does not fail the run; absolute
    min_guarded: float = 0.0  # the share of the offered figures that must be decided, else the gate fails
    looks: int = 1  # how many times a figure may be tested while rounds are added (alpha is split over them)
    by_nodeid: dict[str, ResultRecord] = field(default_factory=dict)
    seen: list = field(default_factory=list)  # (nodeid, [Comparison])
    figure_keys: set = field(default_factory=set)
    n_figures: int = 1
    offered: dict = field(default_factory=dict)  # figure key -> nodeid: what the baseline offers this run
    changed_verdicts: list = field(default_factory=list)  # (nodeid, "passed -> failed")
    known: list = field(default_factory=list)  # nodeids of failures the baseline had too (changes mode)

    def __post_init__(self):
        doc = (self.baseline if isinstance(self.baseline, ResultsFile)
               else results_file(dict({"provenance": {}}, **self.baseline), self.baseline_path))
        self.baseline = doc
        self.by_nodeid = {r.nodeid: r for r in doc.results}
        self.plan(list(self.by_nodeid))
        self.drift_old = drifted(doc.provenance, self.tolerance)
        self.drift_new = drifted(self.new_provenance, self.tolerance)

    def plan(self, nodeids: list[str]) -> None:
        """The figures this run compares: those the baseline offers for the cases it runs (shared probe
        calls counted once). Their number is the multiplicity correction's m (Bonferroni over the
        figures compared in this run, not over the whole baseline)."""
        self.offered = {}
        for nid in nodeids:
            r = self.by_nodeid.get(nid)
            if r is None:
                continue
            figs = [(name, key) for name, key, _, value, _, _ in figures(r, self.all_figures) if value is not None]
            if not figs and r.is_disturbed:
                figs = [("metric", None)]  # a disturbed baseline case offers its figure all the same: unguarded
            for name, key in figs:
                self.offered.setdefault(key or f"{nid}::{name}", nid)
        self.n_figures = max(1, len(self.offered))

    @property
    def provenance(self) -> Provenance:
        """The baseline's."""
        return results_file(self.baseline, self.baseline_path).provenance

    @property
    def correction(self) -> int:
        """The level's divisor: figures x looks (each look at a figure while rounds are added is one more test)."""
        return self.n_figures * max(1, self.looks)

    def _compare(self, new: ResultRecord, seen: set) -> list[Comparison]:
        old = self.by_nodeid.get(new.nodeid)
        if old is None or (not old.probes and not new.is_disturbed):
            return []
        comps = compare_result(old, new, self.tolerance, self.alpha, self.correction, self.all_figures,
                               seen, self.drift_old, self.drift_new)
        for c in comps:
            if c.verdict in ("regressed", "improved"):
                c.explanation = explain(old, new, c.figure, self.tolerance)
        return comps

    def pending(self, result: ResultRecord | dict) -> list[str]:
        """The figures of a case still undecided (inconclusive) against the baseline, as a look while
        its rounds go on: nothing is recorded."""
        return [c.figure for c in self._compare(as_result(result), set(self.figure_keys))
                if c.verdict == "inconclusive"]

    def check(self, result: ResultRecord | dict) -> list[Comparison]:
        new = as_result(result)
        if new.nodeid not in self.by_nodeid:
            return []
        comps = self._compare(new, self.figure_keys)
        old = self.by_nodeid[new.nodeid]
        if not comps and new.is_disturbed and old.value is not None:
            comps = [Comparison("metric", old.value, math.nan, math.nan, None, "untestable",
                                bool(True if old.higher_is_better is None else old.higher_is_better),
                                "disturbed: " + "; ".join(new.disturbed or [new.reason]))]
        self.seen.append((new.nodeid, comps))
        return comps

    def known_failure(self, nodeid: str) -> str | None:
        """The baseline's outcome when the case failed (or errored) there too, else None."""
        old = self.by_nodeid.get(nodeid)
        return old.outcome if old is not None and old.outcome in FAILED else None

    def verdict_change(self, nodeid: str, outcome: str) -> str | None:
        """'passed -> failed' when a case that did not fail in the baseline fails now (a regression of
        the verdict, whatever the figures); a known failure, or a case new to this run: None."""
        old = self.by_nodeid.get(nodeid)
        if old is None or outcome not in ("failed", "error") or old.outcome in FAILED:
            return None
        change = f"{old.kind_of_outcome} -> {outcome}"
        self.changed_verdicts.append((nodeid, change))
        return change

    def apply(self, result, location: str, name: str) -> str | None:
        """Compare a finished case (its ResultRecord) with the baseline: its ``baseline`` field is filled;
        a regressed figure turns the case failed; in ``changes`` mode a failure the baseline had too is
        a known failure (xfailed). Returns the report text when it regressed."""
        if not ((result.probes or result.disturbed) and
                result.outcome in ("passed", "failed", "xpassed", "unmeasured")):
            comps = []
        else:
            comps = self.check(result)
        result.baseline = [ComparisonRecord(**c.__dict__) for c in comps]
        regressed = [c for c in comps if c.verdict == "regressed"]
        if not regressed:
            was = self.known_failure(result.nodeid)
            change = self.verdict_change(result.nodeid, result.outcome)
            if self.mode == "changes" and result.outcome in FAILED and was:
                self.known.append(result.nodeid)
                result.reason = (f"known failure: {was} in the baseline too ({self.baseline_path}), so the gate "
                                 f"does not fail it (--voiceperf-gate absolute does): {result.reason}")
                result.outcome = "xfailed"
            elif change:
                result.reason = f"verdict changed: {change}: {result.reason}"
            return None
        text = "\n".join("  " + c.text() for c in regressed)
        result.outcome = "failed"
        result.reason = "regressed: " + "; ".join(c.text() for c in regressed)
        return (f"{location}: claim {name} regressed against baseline {self.baseline_path}\n{text}\n"
                f"  (the whole interval of the change between rounds is beyond the {self.tolerance * 100:g}% "
                f"tolerance; alpha {self.alpha:g} over {self.n_figures} figures x {self.looks} looks)")

    def counts(self) -> dict[str, int]:
        c: dict[str, int] = {}
        for _, comps in self.seen:
            for x in comps:
                k = ("untestable: disturbed" if x.note.startswith("disturbed") else
                     "untestable: machine changed" if x.note.startswith("the machine changed") else x.verdict)
                c[k] = c.get(k, 0) + 1
        return c

    def guarded(self) -> dict:
        """How much of what the baseline offers this run was decided: guarded (regressed, improved,
        unchanged) of offered, and why the rest was not (inconclusive, untestable, or not compared)."""
        decided, why = 0, {}  # type: tuple[int, dict[str, int]]
        by_design = 0  # figures this run itself gives once (a search's one figure a run): never testable
        for _, comps in self.seen:
            for x in comps:
                if x.verdict in GUARDED:
                    decided += 1
                elif x.verdict == "untestable" and x.rounds and x.rounds[1] < MIN_ROUNDS_GATE and x.rounds[1] <= 1:
                    by_design += 1
                else:
                    k = x.verdict + (": " + x.note.split(":")[0] if x.verdict == "untestable" and x.note else "")
                    why[k] = why.get(k, 0) + 1
        offered = max(len(self.offered) - by_design, decided + sum(why.values()))
        missing = offered - decided - sum(why.values())
        if missing > 0:
            why["not compared (case not measured or not run)"] = missing
        share = decided / offered if offered else 1.0
        return {"guarded": decided, "offered": offered, "share": round(share, 4), "not_guarded": why,
                "one_figure_per_run": by_design, "min_guarded": self.min_guarded, "enough": share >= self.min_guarded}

    def guarded_line(self) -> str:
        g = self.guarded()
        why = "; ".join(f"{n} {k}" for k, n in g["not_guarded"].items())
        line = f"guarded {g['guarded']} of {g['offered']} figures ({g['share'] * 100:.0f}%)" + (f"; {why}" if why else "")
        if g["one_figure_per_run"]:
            line += f"; besides, {g['one_figure_per_run']} figures this run gives once (a search: no rounds to compare)"
        if not g["enough"]:
            line += (f". FAILED: below the {self.min_guarded * 100:g}% the gate needs (ini voiceperf_min_guarded): "
                     "a baseline or run that leaves most figures undecided does not pass as a gate")
        return line

    def summary_line(self) -> str:
        c = self.counts()
        order = ("regressed", "improved", "unchanged", "inconclusive", "untestable", "untestable: disturbed",
                 "untestable: machine changed")
        parts = ", ".join(f"{c.get(k, 0)} {k}" for k in order if c.get(k) or k in ("regressed", "improved"))
        return (f"{parts} ({sum(c.values())} figures; tolerance {self.tolerance * 100:g}%, alpha {self.alpha:g} "
                f"over {self.n_figures} figures x {self.looks} looks: Welch interval of the change between rounds)")

    def failed(self) -> bool:
        return bool(self.counts().get("regressed") or self.changed_verdicts) or not self.guarded()["enough"]

    def undecided(self) -> bool:
        """Failed only because too few figures were decided (the machine disturbed or changed, a case not
        measured): nothing regressed and no verdict changed, so measuring again may decide it."""
        return self.failed() and not (self.counts().get("regressed") or self.changed_verdicts)

    def header(self, changed: list[str]) -> list[str]:
        lines = [f"baseline {self.baseline_path} ({self.provenance.created or '?'}, "
                 f"commit {(self.provenance.git_commit or '?')[:10]}); mode {self.mode}"]
        lines.append("what changed: " + ("; ".join(changed) if changed else "nothing recorded (same software)"))
        return lines

    def to_json(self, changed: list[str] | None = None) -> dict:
        return {"baseline": self.baseline_path, "mode": self.mode, "tolerance": self.tolerance, "alpha": self.alpha,
                "figures": self.n_figures, "looks": self.looks, "counts": self.counts(), **self.guarded(),
                "changed": changed or [], "verdict_changes": [list(x) for x in self.changed_verdicts],
                "known_failures": self.known, "failed": self.failed(),
                "regressed": [dict(c.__dict__, nodeid=n) for n, comps in self.seen for c in comps
                              if c.verdict == "regressed"]}

    def markdown(self, changed: list[str] | None = None) -> str:
        """The gate for a CI job summary or a pull-request comment."""
        rows = [(n, c) for n, comps in self.seen for c in comps]
        lines = [f"## voiceperf gate: {'FAILED' if self.failed() else 'passed'}", "",
                 f"Baseline {_md(self.baseline_path)} (commit "
                 f"{_md((self.provenance.git_commit or '?')[:10])}), mode **{self.mode}**, "
                 f"tolerance {self.tolerance * 100:g}%, alpha {self.alpha:g} over {self.n_figures} figures x "
                 f"{self.looks} looks.", "",
                 f"**{_md(self.guarded_line())}**", "", "**What changed:** " +
                 ("; ".join(_md(c) for c in changed) if changed else "nothing recorded (same software)."), ""]
        c = self.counts()
        lines += [", ".join(f"{n} {k}" for k, n in sorted(c.items())) or "no figure compared", ""]
        for title, want in (("Regressed", "regressed"), ("Improved", "improved"), ("Undecided", "inconclusive"),
                            ("Untestable", "untestable")):
            sel = [(n, x) for n, x in rows if x.verdict == want]
            if not sel:
                continue
            lines += [f"### {title} ({len(sel)})", "", "| case | figure | baseline | now | change | interval | why |",
                      "|---|---|---|---|---|---|---|"]
            for n, x in sel:
                ci = f"[{x.ci[0] * 100:+.1f}%, {x.ci[1] * 100:+.1f}%]" if x.ci else ""
                lines.append(f"| {_md(n.split('::')[-1])} | {_md(x.figure)} | {x.old:.4g} | {x.new:.4g} | "
                             f"{_pct(x.change)} | {ci} | {_md(x.explanation or x.note)} |")
            lines.append("")
        if self.changed_verdicts:
            lines += [f"### Verdicts that changed ({len(self.changed_verdicts)})", ""]
            lines += [f"- {_md(n.split('::')[-1])}: {_md(ch)}" for n, ch in self.changed_verdicts] + [""]
        if self.known:
            lines += [f"Known failures (failed in the baseline too, not failing this gate): {len(self.known)}", ""]
        return "\n".join(lines)

    def summary(self, tr, changed: list[str] | None = None) -> None:
        tr.write_sep("-", f"voiceperf baseline {self.baseline_path}")
        for line in self.header(changed or []):
            tr.write_line(line)
        for nodeid, comps in self.seen:
            for c in comps:
                if shown(c):
                    tr.write_line(f"{c.verdict.upper():<12} {nodeid.split('::')[-1]} {c.text()}",
                                  red=c.verdict == "regressed", green=c.verdict == "improved")
        tr.write_line(self.summary_line())
        g = self.guarded()
        tr.write_line(self.guarded_line(), red=not g["enough"], bold=not g["enough"])


def shown(c: Comparison) -> bool:
    """A figure the gate's summary lists with its why: all but the unchanged (an untestable one says what
    kept it from being compared: a disturbed run, a ceiling that moved between the runs)."""
    return c.verdict != "unchanged"


def _md(text: str) -> str:
    """A table cell: no Markdown or HTML from a claim or a results file reaches the page."""
    from .textsafe import plain

    out = " ".join(plain(str(text)).split())
    for ch in "\\`*_[]<|#!":  # '<' keeps raw HTML out; '>' alone starts nothing inside a line
        out = out.replace(ch, "\\" + ch)
    return out
