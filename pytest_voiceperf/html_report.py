"""``voiceperf report RESULTS -o DIR``: an HTML page and a Markdown file with the summary table
and matplotlib plots (roofline, decode bandwidth fraction per model, batch sweep, TTS time vs
audio length with its fit, ASR chunk table and latency per chunk)."""
from __future__ import annotations

import html
import math
import statistics
from pathlib import Path

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


def _probe_entries(results: list[dict], name: str):
    """(result, probe entry) for every use of probe ``name``, deduplicated by its arguments."""
    seen = set()
    for r in results:
        for p in (r.get("probes") or {}).values():
            if p.get("probe") != name:
                continue
            key = repr(sorted((p.get("args") or {}).items()))
            if key in seen:
                continue
            seen.add(key)
            yield r, p


def _ceilings(results):
    read_bw = [p["values"]["read_bw"] for _, p in _probe_entries(results, "hw.read_bandwidth")]
    mm = {}
    for _, p in _probe_entries(results, "hw.matmul"):
        dt = (p.get("args") or {}).get("dtype", "bfloat16")
        mm[dt] = max(mm.get(dt, 0), p["values"]["flops"])
    for r in results:  # ceilings measured for checks (recorded in probe info)
        for p in (r.get("probes") or {}).values():
            for key, c in ((p.get("info") or {}).get("ceilings") or {}).items():
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
        v, a = p["values"], p.get("args") or {}
        tok, wb = v.get("tok_s"), v.get("weight_bytes")
        params = v.get("params") or v.get("non_embedding_params") or (p.get("info") or {}).get("params")
        if tok and wb and params:
            yield f"decode {a.get('model', '')}", 2 * params / wb, 2 * params * tok, "bo"
    for _, p in _probe_entries(results, "llm.batch"):
        v, a = p["values"], p.get("args") or {}
        info = p.get("info") or {}
        ne = v.get("non_embedding_params")
        bpw = v.get("bytes_per_weight") or 2
        for rr in info.get("sweep") or []:
            b, tot = rr.get("batch"), rr.get("total_tok_s")
            if b and tot and ne:
                yield (f"b={b}" if b in (1, 16) or b == info.get("max_batch") else ""), 2 * b / bpw, 2 * ne * tot, "g^"
    for _, p in _probe_entries(results, "llm.prefill"):
        v, a = p["values"], p.get("args") or {}
        fl = v.get("flops")
        n = a.get("prompt_len") or v.get("prompt_len") or 1024
        bpw = v.get("bytes_per_weight") or 2
        if fl:
            yield f"prefill {a.get('model', '')} {n}", 2 * float(n) / bpw, fl, "rs"


def plot_decode_fraction(results, out: Path, plt):
    rows = [(r["params"], r) for r in results if r["claim"] == "llm-decode-bandwidth-fraction" and r.get("value") is not None]
    if not rows:
        return None

    def read_bytes(r):
        return next(((p.get("values") or {}).get("read_bytes") or 0.0
                     for _, p in _probe_entries([r], "llm.decode")), 0.0)

    rows.sort(key=lambda pr: read_bytes(pr[1]))  # smallest model first
    fig, ax = plt.subplots(figsize=(6.4, 3.2))
    labels = ["-".join(str(v) for v in p.values()) for p, _ in rows]
    vals = [r["value"] for _, r in rows]
    ax.bar(labels, vals, color=[COLORS.get(r["outcome"], "gray") for _, r in rows])
    lo, hi = 0.86, 0.98
    ax.axhspan(lo, hi, color="green", alpha=0.1, label="document: 86-98%")
    ax.set_ylabel("fraction of read bandwidth")
    ax.set_xlabel("decode tok/s x bytes read per token / measured read bandwidth", fontsize=7)
    ax.set_ylim(0, max(1.05, max(vals) * 1.1))
    ax.set_title("Decode bandwidth fraction per model")
    ax.legend(fontsize=7)
    plt.setp(ax.get_xticklabels(), rotation=20, ha="right")
    return _save(fig, out / "decode_fraction.png", plt)


def plot_batch_sweep(results, out: Path, plt):
    entries = list(_probe_entries(results, "llm.batch"))
    if not entries:
        return None
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(8.0, 3.2))
    for _, p in entries:
        sweep = (p.get("info") or {}).get("sweep") or []
        if not sweep:
            continue
        label = "-".join(str(x) for x in (p.get("args") or {}).values())[:30]
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
        info, v = p.get("info") or {}, p["values"]
        xs = info.get("audio_s") or []
        runs = info.get("times_s") or []
        if not xs or len(runs) != len(xs):
            continue
        ys = [statistics.median(t) for t in runs]
        label = f"{(p.get('args') or {}).get('model', '')} {info.get('dtype', '')} optimize={info.get('optimize', '')}"
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
        v = p["values"]
        chunk = v.get("chunk_ms") or (p.get("args") or {}).get("chunk_ms")
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
        rows = (p.get("info") or {}).get("rows") or (p.get("info") or {}).get("table")
        if rows:
            return rows
    return []


def write_report(results_path: str, out_dir: str) -> dict:
    doc = read(results_path)
    results = doc["results"]
    prov = doc["provenance"]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plt = _plt()
    plots = []
    for fn, title in ((plot_roofline, "Roofline"), (plot_decode_fraction, "Decode bandwidth fraction"),
                      (plot_batch_sweep, "Batch sweep"), (plot_tts, "TTS time vs length"),
                      (plot_asr, "ASR latency per chunk")):
        try:
            name = fn(results, out, plt)
        except Exception as exc:  # one odd figure must not lose the report
            name = None
            print(f"voiceperf report: {title} plot skipped ({type(exc).__name__}: {exc})")
        if name:
            plots.append((title, name))
    counts = prov.get("counts") or {}
    summary = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
    head = ["", "claim", "measured", "expected", "margin", "reference"]
    md = ["# voiceperf report", "", f"{prov.get('device_name')} ({prov.get('device')}), profile "
          f"{prov.get('profile')}, {prov.get('created')}, commit {str(prov.get('git_commit'))[:10]}", "",
          f"**{summary}**" + ("" if prov.get("complete", True) else " (INCOMPLETE RUN)"), "",
          "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    trs = []
    for r in results:
        cells = row(r)
        iv = interval_text(r)
        if iv:  # the interval over rounds (and modes) beside the figure
            cells = (*cells[:2], f"{cells[2]}; {iv}", *cells[3:])
        md.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
        reason = html.escape(r.get("reason") or "")
        color = COLORS.get(r["outcome"], "black")
        tds = "".join(f"<td>{html.escape(str(c))}</td>" for c in cells[1:])
        trs.append(f'<tr><td style="color:{color};font-weight:bold">{MARK.get(r["outcome"], r["outcome"])}</td>{tds}'
                   f'<td class="why">{reason}</td></tr>')
    chunk_rows = _asr_chunk_table(results)
    chunk_html = ""
    if chunk_rows:
        keys = list(chunk_rows[0].keys())
        chunk_html = ("<h2>ASR chunk table (from the model's streaming config)</h2><table><tr>" +
                      "".join(f"<th>{html.escape(k)}</th>" for k in keys) + "</tr>" +
                      "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(r.get(k)))}</td>" for k in keys) + "</tr>"
                              for r in chunk_rows) + "</table>")
        md += ["", "## ASR chunk table", "", "| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
        md += ["| " + " | ".join(_fmt(r.get(k)) for k in keys) + " |" for r in chunk_rows]
    for title, name in plots:
        md += ["", f"## {title}", "", f"![{title}]({name})"]
    imgs = "".join(f'<figure><img src="{n}" alt="{html.escape(t)}"><figcaption>{html.escape(t)}</figcaption></figure>'
                   for t, n in plots)
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>voiceperf report</title>
<style>body{{font:14px/1.4 system-ui,sans-serif;margin:24px;max-width:1200px;color:#1f2328}}
table{{border-collapse:collapse;font-size:12px;width:100%}}
td,th{{border-bottom:1px solid #d0d7de;padding:3px 6px;text-align:left;vertical-align:top}}
th{{background:#f6f8fa}}td.why{{color:#57606a;font-size:11px;max-width:380px}}
figure{{display:inline-block;margin:8px;vertical-align:top}}img{{max-width:560px;border:1px solid #d0d7de}}
.meta{{color:#57606a}}</style></head><body>
<h1>voiceperf report</h1>
<p class="meta">{html.escape(str(prov.get('device_name')))}
 ({html.escape(str(prov.get('device')))}) · profile {html.escape(str(prov.get('profile')))}
 · {html.escape(str(prov.get('created')))} · commit {html.escape(str(prov.get('git_commit'))[:10])}
 · {html.escape(str(prov.get('packages', {})))}</p>
<h2>{html.escape(summary)}{'' if prov.get('complete', True) else ' (INCOMPLETE RUN)'}</h2>
<table><tr><th></th><th>claim</th><th>measured</th><th>expected</th><th>margin</th><th>reference</th><th>reason</th></tr>
{''.join(trs)}</table>
{chunk_html}
<h2>Plots</h2>{imgs or '<p>No figure in these results has a plot.</p>'}
</body></html>"""
    (out / "index.html").write_text(page)
    (out / "report.md").write_text("\n".join(md) + "\n")
    return {"html": str(out / "index.html"), "markdown": str(out / "report.md"), "plots": [n for _, n in plots]}


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}" if math.isfinite(v) else str(v)
    return str(v)
