"""``voiceperf repro``: how reproducible are the verdicts and the gate on this machine?

Runs a claim set N times (separate pytest processes, so separate engine instances and host
states), or reads results files already made, and prints: decided verdicts that flipped between
runs, inconclusive and disturbed cases per run, gate false alarms between runs of the same setup
(every "regressed" there is a false alarm: nothing changed), and, with ``--slow-run ARGS``, one
more run with those pytest arguments (e.g. ``--voiceperf-threads 1``) compared with the first:
whether a real slowdown is caught.
"""
from __future__ import annotations

import shlex
import subprocess
import sys
import time
from pathlib import Path

from .record import ResultsFile, results_file
from .stats import DEFAULT_TOLERANCE

DECIDED = ("passed", "failed", "xfailed", "xpassed")


def flips(docs: list[ResultsFile]) -> list[tuple[str, list[str]]]:
    """Cases decided in at least two runs whose decided verdicts differ: (nodeid, outcomes per run)."""
    by: dict[str, list[str]] = {}
    for i, d in enumerate(docs):
        for r in d.results:
            by.setdefault(r.nodeid, ["-"] * len(docs))[i] = r.kind_of_outcome
    out = []
    for nodeid, outs in by.items():
        decided = {o for o in outs if o in DECIDED}
        if len(decided) > 1:
            out.append((nodeid, outs))
    return out


def counts(doc: ResultsFile) -> dict[str, int]:
    c: dict[str, int] = {}
    for r in doc.results:
        k = r.kind_of_outcome
        c[k] = c.get(k, 0) + 1
    return c


def gate(old: ResultsFile, new: ResultsFile, tolerance: float = DEFAULT_TOLERANCE, alpha: float = 0.05):
    from .gate import Gate

    g = Gate("old", old, tolerance=tolerance, alpha=alpha, new_provenance=new.provenance)
    for r in new.results:
        if r.value is not None or r.probes or r.is_disturbed:
            g.check(r)
    return g


def disjoint(a: ResultsFile, b: ResultsFile) -> list[tuple[str, str]]:
    """Cases of two same-setup runs whose timed intervals do not overlap: (nodeid, text). One run's
    interval then says nothing about where the next run sits: the figure depends on a state of the
    machine that the rounds of one run do not sample."""
    old = {r.nodeid: r for r in a.results}
    out = []
    for r in b.results:
        o = old.get(r.nodeid)
        if o is None or o.kind_of_outcome == "disturbed" or r.kind_of_outcome == "disturbed":
            continue
        c1, c2 = o.ci, r.ci
        if not c1 or not c2 or o.ci_method.startswith("exact") or r.ci_method.startswith("exact"):
            continue
        if c1[1] < c2[0] or c2[1] < c1[0]:
            out.append((r.nodeid, f"{o.value:.4g} [{c1[0]:.4g}, {c1[1]:.4g}] then {r.value:.4g} "
                                  f"[{c2[0]:.4g}, {c2[1]:.4g}]"))
    return out


def safe_tolerance(old: ResultsFile, new: ResultsFile, alpha: float) -> float | None:
    """The smallest gate tolerance (1% steps up to 50%) that raises no false alarm between two runs of
    the same setup: the machine's run-to-run noise as the gate sees it."""
    for pct in range(1, 51):
        g = gate(old, new, pct / 100, alpha)
        if not any(c.verdict == "regressed" for _, cs in g.seen for c in cs):
            return pct / 100
    return None


def analyze(docs: list, slow=None, tolerance: float = DEFAULT_TOLERANCE, alpha: float = 0.05) -> dict:
    docs = [results_file(d) for d in docs]
    slow = results_file(slow) if slow is not None else None
    out: dict = {"runs": len(docs), "counts": [counts(d) for d in docs], "flips": flips(docs), "false_alarms": [],
                 "tolerance": tolerance}
    for i in range(len(docs) - 1):
        g = gate(docs[i], docs[i + 1], tolerance, alpha)
        changes = sorted((abs(c.change), n, c.figure) for n, cs in g.seen for c in cs
                         if c.verdict != "untestable" and c.ci and c.ci[0] != c.ci[1] and c.change == c.change)
        out["false_alarms"].append({"pair": [i + 1, i + 2], "counts": g.counts(),
                                    "regressed": [(n, c.text()) for n, cs in g.seen for c in cs
                                                  if c.verdict == "regressed"],
                                    "changes": changes, "safe_tolerance": safe_tolerance(docs[i], docs[i + 1], alpha),
                                    "disjoint": disjoint(docs[i], docs[i + 1])})
    if slow is not None:
        g = gate(docs[0], slow, tolerance, alpha)
        out["slow"] = {"counts": g.counts(),
                       "regressed": [(n, c.text()) for n, cs in g.seen for c in cs if c.verdict == "regressed"]}
    return out


def render(a: dict) -> str:
    lines = [f"voiceperf repro: {a['runs']} runs"]
    for i, c in enumerate(a["counts"], 1):
        total = sum(c.values())
        inc = c.get("inconclusive", 0)
        lines.append(f"  run {i}: " + ", ".join(f"{v} {k}" for k, v in sorted(c.items()))
                     + f"  ({inc}/{total} = {inc / max(1, total) * 100:.0f}% inconclusive)")
    lines.append(f"decided-verdict flips: {len(a['flips'])}")
    for nodeid, outs in a["flips"]:
        lines.append(f"  FLIP {nodeid}: {' / '.join(outs)}")
    fa = sum(len(p["regressed"]) for p in a["false_alarms"])
    lines.append(f"gate false alarms between runs of the same setup: {fa}")
    for p in a["false_alarms"]:
        c = p["counts"]
        lines.append(f"  run {p['pair'][0]} -> run {p['pair'][1]}: " + ", ".join(f"{v} {k}" for k, v in sorted(c.items())))
        for n, t in p["regressed"]:
            lines.append(f"    FALSE ALARM {n}: {t}")
        ch = p.get("changes") or []
        if ch:
            big = ch[-1]
            lines.append(f"    run-to-run change of the {len(ch)} timed figures compared: median {ch[len(ch) // 2][0] * 100:.1f}%, "
                         f"largest {big[0] * 100:.1f}% ({big[1].split('::')[-1]} {big[2]})")
        st = p.get("safe_tolerance")
        lines.append("    smallest tolerance without a false alarm on this pair: "
                     + (f"{st * 100:.0f}% (the gate uses {a['tolerance'] * 100:g}%)" if st is not None else "none up to 50%"))
        for n, t in p.get("disjoint") or []:
            lines.append(f"    UNSTABLE BETWEEN RUNS {n}: {t} (disjoint intervals, same setup)")
    if "slow" in a:
        s = a["slow"]
        lines.append(f"injected slowdown (run 1 -> slow run): {len(s['regressed'])} figures regressed"
                     + ("" if s["regressed"] else "  <- NOT CAUGHT"))
        for n, t in s["regressed"]:
            lines.append(f"  CAUGHT {n}: {t}")
    return "\n".join(lines)


def run_pytest(args: list[str], json_path: Path, log: Path) -> int:
    cmd = [sys.executable, "-m", "pytest", "--voiceperf", "--voiceperf-json", str(json_path), "-q", *args]
    t0 = time.monotonic()
    with open(log, "w") as f:
        f.write("$ " + shlex.join(cmd) + "\n")
        f.flush()
        rc = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT)
    print(f"  {shlex.join(cmd)}: exit {rc}, {time.monotonic() - t0:.0f} s (log {log})", flush=True)
    return rc


def main(args) -> int:
    from .results import read

    pytest_args = list(args.pytest_args or [])
    if pytest_args and pytest_args[0] == "--":
        pytest_args = pytest_args[1:]
    if args.results:
        docs = [read(p) for p in args.results]
        slow = read(args.slow_results) if args.slow_results else None
    else:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        paths = []
        for i in range(1, args.runs + 1):
            p = out / f"run{i}.json"
            run_pytest(pytest_args, p, out / f"run{i}.log")
            paths.append(p)
        docs = [read(p) for p in paths]
        slow = None
        if args.slow_run is not None:
            p = out / "slow.json"
            run_pytest(pytest_args + shlex.split(args.slow_run), p, out / "slow.log")
            slow = read(p)
    a = analyze(docs, slow, args.tolerance, args.alpha)
    print(render(a))
    bad = a["flips"] or any(p["regressed"] for p in a["false_alarms"]) or ("slow" in a and not a["slow"]["regressed"])
    return 1 if (bad and args.fail) else 0
