"""Terminal summary table (readable at 100 columns; -q keeps it short)."""
from __future__ import annotations

from .verdict import fmt_value

MARK = {"passed": "PASS", "failed": "FAIL", "xfailed": "XFAIL", "xpassed": "XPASS",
        "unmeasured": "UNMEAS", "error": "ERROR"}


def _ref(r: dict) -> str:
    ref = r.get("reference") or {}
    v = ref.get("value")
    return "" if v is None else str(v)


def row(r: dict) -> tuple[str, str, str, str, str, str]:
    name = r["nodeid"].split("::")[-1]
    val = fmt_value(r.get("value"), r.get("unit", "")) if r.get("value") is not None else "-"
    ci = r.get("ci")
    if ci and r.get("value") and ci[0] != ci[1]:
        rel = (ci[1] - ci[0]) / abs(r["value"]) * 100
        val += f" ±{rel / 2:.0f}%"
    margin = f"{r['margin'] * 100:+.0f}%" if r.get("margin") is not None else ""
    return (MARK.get(r["outcome"], r["outcome"]), name, val, r.get("expect", ""), margin, _ref(r))


def terminal_table(tr, results: list[dict], config) -> None:
    quiet = config.get_verbosity() < 0
    tr.write_sep("=", "voiceperf claims")
    if quiet:
        counts: dict[str, int] = {}
        for r in results:
            counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
        tr.write_line(", ".join(f"{v} {k}" for k, v in sorted(counts.items())) + _qualifiers(results))
        for r in results:
            if r["outcome"] in ("failed", "error"):
                tr.write_line(f"{MARK[r['outcome']]:<6} {r['nodeid']}: {r.get('reason', '')[:90]}")
        return
    rows = [row(r) for r in results]
    widths = [6, 46, 22, 16]
    header = ("", "claim", "measured", "expected", "margin")
    tr.write_line(_fmt(header, widths))
    for rw, r in zip(rows, results):
        kw = {"green": True} if r["outcome"] in ("passed", "xfailed") else \
             {"red": True} if r["outcome"] in ("failed", "error") else {"yellow": True}
        tr.write_line(_fmt(rw[:5], widths), **kw)
        iv = interval_text(r)
        if iv:
            tr.write_line(f"       {iv[:93]}")
        if r["outcome"] in ("unmeasured", "error", "xfailed", "failed") and r.get("reason"):
            tr.write_line(f"       -> {r['reason'][:92]}")
        if r["outcome"] == "unmeasured" and r.get("probes"):
            figs = _probe_figures(r)
            if figs:
                tr.write_line(f"       measured anyway: {figs[:80]}")
        if rw[5]:
            tr.write_line(f"       document: {rw[5][:83]}")


def _qualifiers(results: list[dict]) -> str:
    inc = sum(str(r.get("reason", "")).startswith("inconclusive") for r in results)
    dis = sum(str(r.get("reason", "")).startswith("disturbed") for r in results)
    return (f" (unmeasured: {inc} inconclusive, {dis} disturbed)" if inc or dis else "")


def interval_text(r: dict) -> str:
    """'interval [lo, hi] over N rounds' (+ modes, dropped rounds) for the summary and the report."""
    ci, n = r.get("ci"), r.get("rounds")
    if not ci or not n:
        return ""
    unit = r.get("unit", "")
    if ci[0] == ci[1]:
        txt = "exact (the figures do not vary between repetitions)" if n == 1 else f"exact over {n} rounds"
    else:
        txt = f"interval [{fmt_value(ci[0], unit)}, {fmt_value(ci[1], unit)}] over {n} rounds"
    if r.get("modes"):
        txt += "; bimodal: " + " / ".join(f"{fmt_value(m['value'], unit)} ({m['n']})" for m in r["modes"])
    elif r.get("unstable"):
        lo, hi = r["unstable"]
        txt += (f"; unstable: repetitions between {fmt_value(lo, unit)} and {fmt_value(hi, unit)} "
                "(the next run may sit elsewhere)")
    if r.get("disturbed"):
        txt += f"; {len(r['disturbed'])} disturbance cause(s), rounds dropped"
    return txt


def _probe_figures(r: dict) -> str:
    """The first output of each probe that was measured before the case became unmeasured."""
    out = []
    for alias, p in r["probes"].items():
        units = p.get("units") or {}
        for name, v in (p.get("values") or {}).items():
            if isinstance(v, (int, float)):
                out.append(f"{alias}.{name} {fmt_value(v, units.get(name, ''))}")
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
