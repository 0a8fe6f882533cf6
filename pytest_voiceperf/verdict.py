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
