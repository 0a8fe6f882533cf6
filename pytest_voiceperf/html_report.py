"""``voiceperf report RESULTS -o DIR``: an HTML page and a Markdown file with the summary table
and matplotlib plots (roofline, every parametrized claim against its expected band, batch sweep,
TTS time vs audio length with its fit, ASR chunk table and latency per chunk), rendered through the
Jinja2 templates in ``templates/``."""
from __future__ import annotations

import math
import statistics
from pathlib import Path

from .record import ResultRecord
from .report import MARK, interval_text, row
from .results import read

COLORS = {"passed": "#1a7f37", "failed": "#cf222e", "error": "#cf222e", "xfailed": "#9a6700",
          "xpassed": "#cf222e", "unmeasured": "#6e7781"}


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"figure.dpi": 110, "font.size": 9, "axes.grid": True, "grid.alpha": 0.3})
    return plt


def _probe_entries(results: list[ResultRecord], name: str):
    """(result, probe record) for every use of probe ``name``, deduplicated by its arguments."""
    seen = set()
    for r in results:
        for p in r.probes.values():
            if p.probe != name:
                continue
            key = repr(sorted(p.args.items()))
            if key in seen:
                continue
            seen.add(key)
            yield r, p


def _ceilings(results):
    read_bw = [p.values["read_bw"] for _, p in _probe_entries(results, "hw.read_bandwidth")]
    mm = {}
    for _, p in _probe_entries(results, "hw.matmul"):
        dt = p.args.get("dtype", "bfloat16")
        mm[dt] = max(mm.get(dt, 0), p.values["flops"])
    for r in results:  # ceilings measured for checks (recorded in probe info)
        for p in r.probes.values():
            for key, c in (p.info.get("ceilings") or {}).items():
                if key == "read_bw":
                    read_bw.append(c["ceiling"])
                elif key.startswith("matmul_flops:"):
                    dt = key.split(":", 1)[1]
                    mm[dt] = max(mm.get(dt, 0), c["ceiling"])
    return (max(read_bw) if read_bw else None), mm


def plot_roofline(results, out: Path, plt):
    bw, mm = _ceilings(results)
    if not bw or not mm:
        return None
    peak = mm.get("bfloat16") or max(mm.values())
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    xs = [10 ** (i / 20) for i in range(-20, 81)]
    ax.loglog(xs, [min(peak, bw * x) for x in xs], "k-", lw=1.5, label=f"roofline: {bw / 1e9:.0f} GB/s, {peak / 1e12:.1f} TFLOP/s")
    for dt, f in mm.items():
        if f != peak:
            ax.axhline(f, color="gray", ls=":", lw=0.8)
            ax.text(xs[0], f, f" {dt} {f / 1e12:.1f} TFLOP/s", va="bottom", fontsize=7)
    pts = 0
    labelled: set[str] = set()
    points = list(_llm_points(results))
    for label, intensity, flops, marker in points:
        ax.loglog([intensity], [flops], marker, ms=6)
        # one label per text, and only when the plot is not crowded (many points: markers + legend)
        if label not in labelled and (len(points) <= 24 or label.startswith("decode")):
            ax.annotate(label, (intensity, flops), fontsize=6, xytext=(3, 3), textcoords="offset points")
            labelled.add(label)
        pts += 1
    if len(points) > 24:
        for marker, what in (("bo", "decode, 1 request"), ("g^", "batched decode"), ("rs", "prefill")):
            if any(p[3] == marker for p in points):
                ax.plot([], [], marker, label=what)
    ax.set_xlabel("arithmetic intensity (FLOP / byte read)")
    ax.set_ylabel("achieved FLOP/s")
    ax.set_title(f"Roofline from ceilings measured in this run ({pts} LLM points)")
    ax.legend(loc="lower right", fontsize=7)
    return _save(fig, out / "roofline.png", plt)


def _llm_points(results):
    """Decode, batch and prefill figures as (label, FLOP/byte, FLOP/s)."""
    for _, p in _probe_entries(results, "llm.decode"):
        v, a = p.values, p.args
        tok, wb = v.get("tok_s"), v.get("weight_bytes")
        params = v.get("params") or v.get("non_embedding_params") or p.info.get("params")
        if tok and wb and params:
            yield f"decode {a.get('model', '')}", 2 * params / wb, 2 * params * tok, "bo"
    for _, p in _probe_entries(results, "llm.batch"):
        v, a = p.values, p.args
        info = p.info
        ne = v.get("non_embedding_params")
        bpw = v.get("bytes_per_weight") or 2
        for rr in info.get("sweep") or []:
            b, tot = rr.get("batch"), rr.get("total_tok_s")
            if b and tot and ne:
                yield (f"b={b}" if b in (1, 16) or b == info.get("max_batch") else ""), 2 * b / bpw, 2 * ne * tot, "g^"
    for _, p in _probe_entries(results, "llm.prefill"):
        v, a = p.values, p.args
        fl = v.get("flops")
        n = a.get("prompt_len") or v.get("prompt_len") or 1024
        bpw = v.get("bytes_per_weight") or 2
        if fl:
            yield f"prefill {a.get('model', '')} {n}", 2 * float(n) / bpw, fl, "rs"


def plot_bounds(results, out: Path, plt):
    """Every parametrized claim (two or more measured cases) against its expectation: one panel per
    claim, a bar per case with its interval, the expected band shaded. Nothing here knows a claim."""
    by: dict[str, list[ResultRecord]] = {}
    for r in results:
        if r.value is not None and math.isfinite(r.value):
            by.setdefault(r.claim, []).append(r)
    claims = [(c, rs) for c, rs in by.items() if len(rs) >= 2 and len({r.unit for r in rs}) == 1][:12]
    if not claims:
        return None
    fig, axes = plt.subplots(len(claims), 1, figsize=(6.4, 2.2 * len(claims)), squeeze=False)
    for ax, (claim, rs) in zip(axes[:, 0], claims):
        labels = ["-".join(str(v) for v in r.params.values())[:24] or r.nodeid.split("::")[-1][:24] for r in rs]
        vals = [r.value or 0.0 for r in rs]
        err = [[max(0.0, v - r.ci[0]) if r.ci else 0.0 for v, r in zip(vals, rs)],
               [max(0.0, r.ci[1] - v) if r.ci else 0.0 for v, r in zip(vals, rs)]]
        ax.bar(labels, vals, yerr=err, capsize=3, color=[COLORS.get(r.outcome, "gray") for r in rs])
        lo, hi = (rs[0].bounds or [None, None])[:2]
        if lo is not None or hi is not None:
            top = max([*vals, *(x for x in (lo, hi) if x is not None)]) * 1.15
            ax.axhspan(lo if lo is not None else min(0.0, *vals), hi if hi is not None else top, color="green",
                       alpha=0.1, label=f"expected: {rs[0].expect}")
            ax.legend(fontsize=6)
        ax.set_title(claim, fontsize=8)
        ax.set_ylabel(rs[0].unit or "value", fontsize=7)
        plt.setp(ax.get_xticklabels(), rotation=15, ha="right", fontsize=6)
    return _save(fig, out / "claims_vs_bounds.png", plt)


def plot_batch_sweep(results, out: Path, plt):
    entries = list(_probe_entries(results, "llm.batch"))
    if not entries:
        return None
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(8.0, 3.2))
    for _, p in entries:
        sweep = p.info.get("sweep") or []
        if not sweep:
            continue
        label = "-".join(str(x) for x in p.args.values())[:30]
        b = [s["batch"] for s in sweep]
        a1.plot(b, [s["total_tok_s"] for s in sweep], "o-", label=label)
        per = [s.get("tok_s") for s in sweep]
        if all(per):
            a2.plot(b, [x / per[0] for x in per], "o-", label=label)
    for ax in (a1, a2):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrent requests")
        ax.legend(fontsize=6)
    a1.set_ylabel("total tok/s")
    a2.set_ylabel("per-request speed vs batch 1")
    fig.suptitle("Batch sweep")
    return _save(fig, out / "batch_sweep.png", plt)


def plot_tts(results, out: Path, plt):
    entries = list(_probe_entries(results, "tts.synthesis"))
    if not entries:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 3.4))
    for _, p in entries:
        info, v = p.info, p.values
        xs = info.get("audio_s") or []
        runs = info.get("times_s") or []
        if not xs or len(runs) != len(xs):
            continue
        ys = [statistics.median(t) for t in runs]
        label = f"{p.args.get('model', '')} {info.get('dtype', '')} optimize={info.get('optimize', '')}"
        ax.plot(xs, ys, "o", label=label)
        for x, t in zip(xs, runs):
            ax.plot([x] * len(t), t, ".", color="gray", ms=2)
        b, a = v.get("slope"), v.get("intercept_s")
        if b is not None and a is not None:
            ax.plot([0, max(xs)], [a, a + b * max(xs)], "-",
                    label=f"{b:.3g} x s + {a:.3g} s (R² {v.get('r2', float('nan')):.3f})")
    ax.set_xlabel("audio length (s)")
    ax.set_ylabel("synthesis time (s)")
    ax.set_title("TTS: time vs audio length, with the linear fit")
    ax.legend(fontsize=7)
    return _save(fig, out / "tts_linear.png", plt)


def plot_asr(results, out: Path, plt):
    entries = list(_probe_entries(results, "asr.stream"))
    if not entries:
        return None
    pts = []
    for _, p in entries:
        v = p.values
        chunk = v.get("chunk_ms") or p.args.get("chunk_ms")
        med = v.get("latency_median_s") or v.get("latency_p50_s") or v.get("step_median_s")
        p95 = v.get("latency_p95_s") or v.get("step_p95_s")
        if chunk and med:
            pts.append((float(chunk), med * 1e3, (p95 or med) * 1e3, v.get("rtf")))
    if not pts:
        return None
    pts.sort()
    fig, ax = plt.subplots(figsize=(6.4, 3.2))
    xs = [p[0] for p in pts]
    ax.plot(xs, [p[1] for p in pts], "o-", label="per-chunk latency, median")
    ax.plot(xs, [p[2] for p in pts], "s--", label="p95")
    ax.plot(xs, xs, "k:", lw=0.8, label="chunk duration (real-time budget)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("chunk (ms)")
    ax.set_ylabel("ms")
    ax.set_title("Streaming ASR: latency per chunk")
    ax.legend(fontsize=7)
    return _save(fig, out / "asr_latency.png", plt)


def _save(fig, path: Path, plt) -> str:
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path.name


def _asr_chunk_table(results) -> list[dict]:
    for _, p in _probe_entries(results, "asr.streaming_config"):
        rows = p.info.get("rows") or p.info.get("table")
        if rows:
            return rows
    return []


def _templates():
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader("pytest_voiceperf", "templates"),
                             autoescape=jinja2.select_autoescape(["html", "html.j2"]),
                             keep_trailing_newline=True, undefined=jinja2.ChainableUndefined)
    from .gate import _md

    env.filters["md"] = _md  # no Markdown, HTML or control characters from a claim or a results file
    env.globals["fmt"] = _fmt
    return env


def write_report(results_path: str, out_dir: str) -> dict:
    doc = read(results_path)
    results = doc.results
    prov = doc.provenance
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plt = _plt()
    plots = []
    for fn, title in ((plot_roofline, "Roofline"), (plot_bounds, "Claims against their expectation"),
                      (plot_batch_sweep, "Batch sweep"), (plot_tts, "TTS time vs length"),
                      (plot_asr, "ASR latency per chunk")):
        try:
            name = fn(results, out, plt)
        except Exception as exc:  # one odd figure must not lose the report
            name = None
            print(f"voiceperf report: {title} plot skipped ({type(exc).__name__}: {exc})")
        if name:
            plots.append((title, name))
    counts: dict = prov.counts
    gate: dict = prov.gate or {}
    gated = bool(gate.get("baseline"))
    rows = []
    for r in results:
        try:
            cells: tuple[str, ...] = row(r)
            iv = interval_text(r)
            if iv:  # the interval over rounds (and modes) beside the figure
                cells = (*cells[:2], f"{cells[2]}; {iv}", *cells[3:])
            if gated:
                cells = (*cells, gate_cell(r))
        except Exception as exc:  # one odd record (a file from elsewhere) is a row that says so, not a lost report
            cells = ("", r.claim or r.nodeid, f"unreadable record: {type(exc).__name__}: {exc}", "", "", "") + (
                ("",) if gated else ())
        rows.append({"mark": MARK.get(r.outcome, r.outcome), "color": COLORS.get(r.outcome, "black"),
                     "cells": cells[1:], "reason": r.reason})
    chunk_rows = _asr_chunk_table(results)
    ctx = {"prov": prov, "gated": gated, "gate": gate, "summary": ", ".join(f"{v} {k}" for k, v in sorted(counts.items())),
           "incomplete": not prov.complete, "rows": rows, "plots": plots,
           "chunk_rows": chunk_rows, "chunk_keys": list(chunk_rows[0].keys()) if chunk_rows else []}
    env = _templates()
    (out / "index.html").write_text(env.get_template("report.html.j2").render(**ctx))
    (out / "report.md").write_text(env.get_template("report.md.j2").render(**ctx))
    return {"html": str(out / "index.html"), "markdown": str(out / "report.md"), "plots": [n for _, n in plots]}


WORST = ("regressed", "inconclusive", "untestable", "improved", "unchanged")


def gate_cell(r) -> str:
    """The case against the baseline in a few words: its worst figure's verdict and change."""
    comps = [c for c in (r.baseline or []) if c.verdict in WORST]
    if not comps:
        return "-"
    c = min(comps, key=lambda c: WORST.index(c.verdict))
    ch = c.change
    pct = f" {ch * 100:+.1f}%" if ch is not None and math.isfinite(ch) else ""
    return f"{c.verdict}{pct} ({c.figure})" if len(comps) > 1 else f"{c.verdict}{pct}"


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}" if math.isfinite(v) else str(v)
    return str(v)
