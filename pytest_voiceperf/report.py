"""Terminal summary table (readable at 100 columns; -q keeps it short)."""
from __future__ import annotations

from .record import ResultRecord
from .record import result as as_result
from .stats import ONE_MEASUREMENT, ONE_MEASUREMENT_BRACKET
from .verdict import fmt_value

MARK = {"passed": "PASS", "failed": "FAIL", "xfailed": "XFAIL", "xpassed": "XPASS",
        "unmeasured": "UNMEAS", "error": "ERROR"}


def _ref(r: ResultRecord) -> str:
    v = (r.reference or {}).get("value")
    return "" if v is None else str(v)


def row(result: ResultRecord | dict) -> tuple[str, str, str, str, str, str]:
    r = as_result(result)
    name = r.nodeid.split("::")[-1]
    val = fmt_value(r.value, r.unit) if r.value is not None else "-"
    if r.ci and r.value and r.ci[0] != r.ci[1]:
        rel = (r.ci[1] - r.ci[0]) / abs(r.value) * 100
        val += f" ±{rel / 2:.0f}%"
    margin = f"{r.margin * 100:+.0f}%" if r.margin is not None else ""
    return (MARK.get(r.outcome, r.outcome), name, val, r.expect, margin, _ref(r))


def terminal_table(tr, results: list[ResultRecord] | list[dict], config) -> None:
    records = [as_result(r) for r in results]
    quiet = config.get_verbosity() < 0
    tr.write_sep("=", "voiceperf claims")
    if quiet:
        counts: dict[str, int] = {}
        for r in records:
            counts[r.outcome] = counts.get(r.outcome, 0) + 1
        tr.write_line(", ".join(f"{v} {k}" for k, v in sorted(counts.items())) + _qualifiers(records))
        for r in records:
            if r.outcome in ("failed", "error"):
                tr.write_line(f"{MARK[r.outcome]:<6} {r.nodeid}: {r.reason[:90]}")
        return
    widths = [6, 46, 22, 16]
    header = ("", "claim", "measured", "expected", "margin")
    tr.write_line(_fmt(header, widths))
    for r in records:
        rw = row(r)
        kw = {"green": True} if r.outcome in ("passed", "xfailed") else \
             {"red": True} if r.outcome in ("failed", "error") else {"yellow": True}
        tr.write_line(_fmt(rw[:5], widths), **kw)
        iv = interval_text(r)
        if iv:
            tr.write_line(f"       {iv[:93]}")
        if r.outcome in ("unmeasured", "error", "xfailed", "failed") and r.reason:
            tr.write_line(f"       -> {r.reason[:92]}")
        if r.outcome == "unmeasured" and r.probes:
            figs = _probe_figures(r)
            if figs:
                tr.write_line(f"       measured anyway: {figs[:80]}")
        if rw[5]:
            tr.write_line(f"       document: {rw[5][:83]}")


def _qualifiers(results: list[ResultRecord]) -> str:
    inc = sum(r.kind_of_outcome == "inconclusive" for r in results)
    dis = sum(r.reason.startswith("disturbed") for r in results)
    return (f" (unmeasured: {inc} inconclusive, {dis} disturbed)" if inc or dis else "")


def interval_text(result: ResultRecord | dict) -> str:
    """'interval [lo, hi] over N rounds' (+ modes, dropped rounds) for the summary and the report."""
    r = as_result(result)
    ci, n = r.ci, r.rounds
    if not ci or not n:
        return ""
    unit = r.unit
    if r.ci_method == ONE_MEASUREMENT:
        txt = "one measurement (a search per run: no rounds, no interval)"
    elif r.ci_method == ONE_MEASUREMENT_BRACKET:
        txt = (f"one measurement (a search per run), its own bracket [{fmt_value(ci[0], unit)}, "
               f"{fmt_value(ci[1], unit)}] from the spread of its timed points")
    elif ci[0] == ci[1]:
        txt = "exact (the figures do not vary between repetitions)" if n == 1 else f"exact over {n} rounds"
    else:
        txt = f"interval [{fmt_value(ci[0], unit)}, {fmt_value(ci[1], unit)}] over {n} rounds"
    if r.modes:
        txt += "; bimodal: " + " / ".join(f"{fmt_value(m['value'], unit)} ({m['n']})" for m in r.modes)
    elif r.unstable:
        lo, hi = r.unstable
        txt += (f"; unstable: repetitions between {fmt_value(lo, unit)} and {fmt_value(hi, unit)} "
                "(the next run may sit elsewhere)")
    if r.disturbed:
        txt += f"; {len(r.disturbed)} disturbance cause(s), rounds dropped"
    return txt


def _probe_figures(r: ResultRecord) -> str:
    """The first output of each probe that was measured before the case became unmeasured."""
    out = []
    for alias, p in r.probes.items():
        for name, v in p.values.items():
            if isinstance(v, (int, float)):
                out.append(f"{alias}.{name} {fmt_value(v, p.units.get(name, ''))}")
                break
    return ", ".join(out)


def _fmt(cols, widths) -> str:
    out = []
    for c, w in zip(cols, widths + [0]):
        c = str(c)
        if w and len(c) > w:
            c = c[: w - 1] + "~"
        out.append(c.ljust(w) if w else c)
    return " ".join(out)[:100].rstrip()
