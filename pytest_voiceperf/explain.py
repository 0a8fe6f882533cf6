"""Why a figure moved between two runs, from the terms its probe already measured.

Pure functions over two probe records of one call (the baseline's and this run's). A decode's time
per token is read as bytes / read bandwidth + an overhead (the model of ``llm-decode-overhead``);
a prefill's as FLOPs / matmul ceiling + an overhead; any other probe lists its exact outputs (counts:
patches, steps, frames, bytes) and settings that changed. The term that moved the time most is named.
"""
from __future__ import annotations

import math
from typing import Any

# engine and probe settings worth naming when they differ (engine info and probe info keys)
SETTINGS = ("engine_version", "engine_args", "enforce_eager", "dtype", "quantization", "dummy_weights",
            "tensor_parallel", "max_model_len", "prefix_caching", "tokens", "reps", "batch", "prompt_len", "at",
            "max_batch", "steps", "chunk_ms", "batch_size", "compile", "precision")


def _fmt(v: float, unit: str) -> str:
    if unit == "B":
        for scale, name in ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
            if abs(v) >= scale:
                return f"{v / scale:.3g} {name}"
        return f"{v:.3g} B"
    if unit in ("B/s", "FLOP/s"):
        for scale, name in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M")):
            if abs(v) >= scale:
                return f"{v / scale:.3g} {name}{unit}"
        return f"{v:.3g} {unit}"
    if unit == "ms":
        return f"{v:.3g} ms"
    return f"{v:.4g}{' ' + unit if unit else ''}"


def _pct(old: float, new: float) -> str:
    return f"{(new / old - 1) * 100:+.1f}%" if old else "n/a"


def _ceiling(p: Any, prefix: str) -> float | None:
    for key, c in (p.info.get("ceilings") or {}).items():
        if key.startswith(prefix) and c.get("ceiling"):
            return float(c["ceiling"])
    return None


def _num(d: dict, key: str) -> float | None:
    v = d.get(key)
    if v is None:
        return None
    try:
        v = float(v)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) and v > 0 else None


def _time_split(old: dict, new: dict, work: str, rate: str, what: str, rate_what: str,
                work_unit: str, rate_unit: str) -> tuple[list[str], list[str], bool]:
    """Terms of t = work / rate + overhead (ms per unit) for both runs, and those that moved t most."""
    parts = [f"time per {old['per']} {_pct(old['t'], new['t'])} ({old['t']:.3g} -> {new['t']:.3g} ms)",
             f"{what} {_pct(old[work], new[work])} ({_fmt(old[work], work_unit)} -> {_fmt(new[work], work_unit)})",
             f"{rate_what} {_pct(old[rate], new[rate])} ({_fmt(old[rate], rate_unit)} -> {_fmt(new[rate], rate_unit)})"]
    o_old = old["t"] - 1e3 * old[work] / old[rate]
    o_new = new["t"] - 1e3 * new[work] / new[rate]
    parts.append(f"overhead per {old['per']} (time - {what.split(' per')[0]} / {rate_what}) {o_new - o_old:+.3g} ms "
                 f"({o_old:.3g} -> {o_new:.3g} ms)")
    # the change of the time per unit, split multiplicatively: t_new / t_old = (work ratio) x (rate ratio)^-1
    # x (the rest). The rest is the engine's time per unit of work beyond the rate (a model that grew
    # moves t with its bytes even when launches, not bandwidth, dominate: more layers, more kernels)
    lt = math.log(new["t"] / old["t"])
    contrib = {"work": math.log(new[work] / old[work]), "rate": -math.log(new[rate] / old[rate])}
    contrib["overhead"] = lt - contrib["work"] - contrib["rate"]
    named = [k for k in sorted(contrib, key=lambda k: -abs(contrib[k]))
             if contrib[k] * lt > 0 and abs(contrib[k]) >= 0.25 * abs(lt)]
    return parts, named or [max(contrib, key=lambda k: abs(contrib[k]))], lt >= 0


def _decode_terms(p: Any, tok: str, read: str | None) -> dict | None:
    v = p.values
    t = _num(v, tok)
    bw = _ceiling(p, "read_bw")
    b = _num(v, read) if read else None
    if b is None and _num(v, "read_bw_1") and t:
        b = v["read_bw_1"] / t  # the batch sweep keeps bytes x tok/s at batch 1
    if not (t and bw and b):
        return None
    return {"t": 1e3 / t, "bytes": b, "bw": bw, "per": "token"}


def _prefill_terms(p: Any) -> dict | None:
    v = p.values
    t, flops = _num(v, "tok_s"), _num(v, "flops")
    peak = _ceiling(p, "matmul_flops")
    if not (t and flops and peak):
        return None
    return {"t": 1e3 / t, "flops": flops / t, "peak": peak, "per": "prompt token"}


# (the time per unit went up, went down)
CAUSE = {
    ("decode", "work"): ("the model reads more bytes per token (it grew, or its precision did)",
                         "the model reads fewer bytes per token"),
    ("decode", "rate"): ("the machine's read bandwidth fell", "the machine's read bandwidth rose"),
    ("decode", "overhead"): ("the engine takes more time per byte read than the bandwidth explains (kernel "
                             "launches, graphs, attention, the host)", "the engine takes less time per byte read"),
    ("prefill", "work"): ("the model needs more FLOPs per token", "the model needs fewer FLOPs per token"),
    ("prefill", "rate"): ("the machine's matmul ceiling fell", "the machine's matmul ceiling rose"),
    ("prefill", "overhead"): ("the engine takes more time per FLOP than the matmul ceiling explains",
                              "the engine takes less time per FLOP"),
}


def explain_probe(old: Any, new: Any, output: str, tolerance: float = 0.0) -> str:
    """Why ``output`` of one probe call moved between two records (ProbeRecord-like: probe, values,
    info); '' when nothing measured says."""
    kind = ""
    parts: list[str] = []
    top: list[str] = []
    slower = True
    if new.probe == "llm.decode" and output in ("tok_s", "tok_s_wall", "ms_per_token", "total_tok_s", "e2e_s"):
        o, n = _decode_terms(old, "tok_s", "read_bytes"), _decode_terms(new, "tok_s", "read_bytes")
        if o and n:
            kind = "decode"
            parts, top, slower = _time_split(o, n, "bytes", "bw", "bytes read per token", "read bandwidth", "B", "B/s")
    elif new.probe == "llm.batch" and output in ("tok_s_1", "total_1", "read_bw_1", "slowdown"):
        o, n = _decode_terms(old, "tok_s_1", None), _decode_terms(new, "tok_s_1", None)
        if o and n:
            kind = "decode"
            parts, top, slower = _time_split(o, n, "bytes", "bw", "bytes read per token at batch 1", "read bandwidth",
                                     "B", "B/s")
    elif new.probe == "llm.prefill" and output in ("tok_s", "tok_s_wall", "flops", "ttft_s"):
        o, n = _prefill_terms(old), _prefill_terms(new)
        if o and n:
            kind = "prefill"
            parts, top, slower = _time_split(o, n, "flops", "peak", "FLOPs per token", "matmul ceiling", "", "FLOP/s")
    if not kind:
        # any other probe: its exact outputs (counts) and the outputs that moved beyond the tolerance
        for name in sorted(set(old.values) & set(new.values)):
            if name == output:
                continue
            a, b = _num(old.values, name), _num(new.values, name)
            if a is None or b is None or a == b:
                continue
            exact = name in (getattr(new, "exact", None) or [])
            if exact or abs(b / a - 1) > max(tolerance, 0.01):
                unit = (new.units or {}).get(name, "")
                parts.append(f"{name} {_pct(a, b)} ({_fmt(a, unit)} -> {_fmt(b, unit)})")
    settings = [f"{k} {old.info.get(k)!r} -> {new.info.get(k)!r}" for k in SETTINGS
                if old.info.get(k) != new.info.get(k) and (k in old.info or k in new.info)]
    text = ", ".join(parts)
    if kind:
        text += ": " + " and ".join(CAUSE[(kind, t)][0 if slower else 1] for t in top)
    if settings:
        text += ("; " if text else "") + "changed: " + ", ".join(settings)
    return text


def explain(old_record: Any, new_record: Any, figure: str, tolerance: float = 0.0) -> str:
    """Why a compared figure of a case moved: ``figure`` is a gate figure name ("metric" or
    "alias.output [unit]"). The metric is explained by each of the case's probes that moved."""
    if figure != "metric":
        alias, _, rest = figure.partition(".")
        output = rest.split(" [")[0]
        o, n = old_record.probes.get(alias), new_record.probes.get(alias)
        return explain_probe(o, n, output, tolerance) if o is not None and n is not None else ""
    out = []
    for alias, n in new_record.probes.items():
        o = old_record.probes.get(alias)
        if o is None:
            continue
        primary = next(iter(n.values), "")
        why = explain_probe(o, n, primary, tolerance)
        if why:
            out.append(f"{alias} ({n.probe}): {why}")
    return "; ".join(out)
