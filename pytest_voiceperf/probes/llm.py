"""LLM decode, prefill and batching probes on real engines (vLLM, transformers, llama.cpp).

Every figure comes from an engine started in its own worker process (one per engine spec,
shared by every claim of the session). Figures are checked against the ceilings measured in
the same session: decode tokens/s x bytes read per token against ``hw.read_bandwidth``,
prefill and batched-decode FLOP/s against ``hw.matmul`` (a figure above a ceiling makes the
case unmeasured: "measurement invalid").

- ``llm.decode``: per-request decode tok/s from the engine's own timestamps (first to last
  token over generated-1 tokens), the exact generated count checked; the caller's clock on
  the same run (``tok_s_wall``) and their ratio (``agreement``); weight and KV bytes.
- ``llm.prefill``: prompt tokens / time to first token, distinct random prompts proven uncached
  by vLLM's own count (the engine runs with prefix caching on, shared with every other claim;
  ``cache: on`` repeats one prompt: the trap of the document);
  achieved FLOP/s = 2 x non-embedding parameters x tok/s.
- ``llm.batch``: concurrency sweep 1, 2, 4, ... (through ``at`` and on until total throughput
  stops rising for two doublings in a row, or ``max_batch``): per-request slowdown, total throughput, achieved FLOP/s.
- ``llm.crossover``: the batch where decode turns compute-bound, from the sweep: saturated
  total throughput / batch-1 throughput (the roofline max(bandwidth, compute) model). Every
  round gives its own figure: a later round measures again batch 1 and the batch the first
  sweep saturated at.
- ``llm.decode_fit``: per-token time = bytes / measured read bandwidth + a fixed overhead,
  across several models or precisions.

Defaults that depend on the device (``tokens=0``, ``reps=0``, ``max_batch=0``): decode 128
tokens x 5 repetitions per round on CUDA, 64 x 1 on the CPU; the batch sweep 128 tokens x 3 repetitions up
to 512 concurrent requests on CUDA (the largest captured graph), 16 tokens x 1 up to 64 on the CPU (a few minutes there).
"""
from __future__ import annotations

import json
import math
import statistics

from ..engines import families
from . import Measurement, Unmeasured, probe
from .llm_call import DTYPES, QUANTS, able, as_int, call_spec, engine_key, engines, family_for, quant_of


def _defaults(ctx, tokens: int, reps: int) -> tuple[int, int]:
    cuda = ctx.device == "cuda"
    # repetitions per round: the verdict's spread comes from rounds. On the 2-core CPU one repetition
    # of 64 tokens takes 3 s; two back to back differed by 2-17% and the rounds of the same runs by
    # as much (results/cpu/timing/): a second one averages only the noise inside a round, at twice the cost
    return (as_int(tokens, "tokens") or (128 if cuda else 64)), (as_int(reps, "reps") or (5 if cuda else 1))


def _memo(ctx, key: tuple, fn):
    """Engine results shared within the session whatever spelling of the arguments asked for them."""
    # one entry per round attempt: a later round is a new measurement on the same engine
    return ctx.session.remember("llm.calls", (getattr(ctx, "attempt", 0),) + tuple(key), fn)


def _call(ctx, fam: str, spec: dict, method: str, **kwargs) -> tuple[dict, dict]:
    """(engine result, engine info), memoized per engine spec and call for the session."""
    key = (fam, json.dumps(spec, sort_keys=True, default=str), method, json.dumps(kwargs, sort_keys=True))
    return _memo(ctx, key, lambda: (ctx.call(fam, spec, method, **kwargs), dict(ctx.engine(fam, spec).info)))


def _med(xs) -> float:
    xs = [x for x in xs if x is not None and math.isfinite(x)]
    if not xs:
        raise Unmeasured("measurement invalid: the engine returned no finite samples")
    return float(statistics.median(xs))


def _bytes(info: dict) -> tuple[float, float, float]:
    wb = info.get("weight_bytes")
    if not wb:
        raise Unmeasured("the engine could not count the model's weight bytes")
    return float(wb), float(info.get("decode_read_bytes") or wb), float(info.get("kv_bytes_per_token") or 0.0)


def _matmul_key(spec: dict) -> str:
    q = spec.get("quantization")
    return "matmul_flops:float8" if q == "fp8" else f"matmul_flops:{spec.get('dtype', 'bfloat16')}"


# -- decode ------------------------------------------------------------------------------------
@probe("llm.decode", engine="llm", engine_key=engine_key,
       outputs={"tok_s": "tok/s", "tok_s_wall": "tok/s", "agreement": "ratio", "ms_per_token": "ms",
                "weight_bytes": "B", "read_bytes": "B", "kv_bytes_per_token": "B", "kv_read_bytes": "B",
                "e2e_s": "s", "ttft_s": "s", "generated": "tokens", "bytes_per_weight": "B",
                "params": "", "non_embedding_params": "", "total_tok_s": "tok/s", "tp": ""},
       exact=("weight_bytes", "read_bytes", "kv_bytes_per_token", "kv_read_bytes", "generated", "bytes_per_weight",
              "params", "non_embedding_params", "tp"),
       choices={"engine": engines(), "dtype": DTYPES, "quantization": QUANTS})
def decode(ctx, model: str = "qwen3-0.6b", engine: str = "auto", dtype: str = "bfloat16", quantization: str = "none",
           tokens: int = 0, reps: int = 0, prompt_len: int = 32, batch: int = 1, tp: int = 1, engine_args: str = ""):
    """Per-request decode tok/s (engine's own timestamps) with the caller's clock beside it.

    ``tp``: tensor parallel over that many GPUs (vLLM); each GPU then reads 1/tp of the bytes."""
    tp = as_int(tp, "tp")
    if tp < 1:
        raise Unmeasured(f"tp must be 1 or more, got {tp}")
    fam, spec, m = call_spec(ctx, model, engine, dtype, quantization, tp=tp, engine_args=engine_args)
    tokens, reps = _defaults(ctx, tokens, reps)
    prompt_len, batch = as_int(prompt_len, "prompt_len"), as_int(batch, "batch")
    ctx.progress(f"llm.decode {model} on {fam}: {tokens} tokens x {reps} reps, batch {batch}")
    r, info = _call(ctx, fam, spec, "decode", tokens=tokens, reps=reps, batch=batch, prompt_len=prompt_len)
    info = dict(info)
    wb, wread, kvt = _bytes(info)
    kv_read = kvt * (prompt_len + (tokens - 1) / 2)  # mean context over the decode phase
    read = wread + kv_read
    tok = _med(r["tok_s"])
    wall = _med(r["tok_s_wall"])
    agree = [w / e for w, e in zip(r["tok_s_wall"], r["tok_s"]) if e and w]
    ms = [1000.0 / x for x in r["tok_s"] if x]
    total, nonemb = _params(m, info)
    values = {"tok_s": tok, "tok_s_wall": wall, "agreement": _med(agree), "ms_per_token": 1000.0 / tok,
              "weight_bytes": wb, "read_bytes": read, "kv_bytes_per_token": kvt, "kv_read_bytes": kv_read,
              "e2e_s": _med(r["e2e_s"]), "ttft_s": _med(r["ttft_s"]), "generated": float(min(r["generated"])),
              "bytes_per_weight": float(info.get("bytes_per_linear_weight") or 0),
              "params": float(total), "non_embedding_params": float(nonemb),
              "total_tok_s": _med(r["total_tok_s"]), "tp": float(tp)}
    info.update(tokens=tokens, reps=reps, batch=batch, prompt_len=prompt_len, timing=r.get("timing"), tp=tp,
                preemptions=r.get("preemptions"), dummy_weights=m["dummy"],
                invalid_hint="decode reads every weight once per token; check the weight-byte count and the timing")
    return Measurement(values, {"tok_s": r["tok_s"], "tok_s_wall": r["tok_s_wall"], "agreement": agree,
                                "ms_per_token": ms, "e2e_s": r["e2e_s"]},
                       info=info, implies={"read_bw": tok * (wread + batch * kv_read) / tp})


def _params(m: dict, info: dict) -> tuple[int, int]:
    p = info.get("params") or {}
    if not p and m.get("config") and m["config"].get("model_type") == "qwen3":
        from ..models import qwen3_param_counts

        p = qwen3_param_counts(m["config"])
    if not p:
        raise Unmeasured("the engine could not count the model's parameters")
    return int(p["total"]), int(p["non_embedding"])


# -- prefill -----------------------------------------------------------------------------------
@probe("llm.prefill", engine="llm", engine_key=engine_key,
       outputs={"tok_s": "tok/s", "tok_s_wall": "tok/s", "flops": "FLOP/s", "prompt_len": "tokens",
                "ttft_s": "s", "non_embedding_params": "", "cached_tokens": "tokens"},
       exact=("prompt_len", "non_embedding_params"),
       choices={"engine": engines(), "dtype": DTYPES, "quantization": QUANTS, "cache": ("off", "on")})
def prefill(ctx, model: str = "qwen3-0.6b", engine: str = "auto", dtype: str = "bfloat16", quantization: str = "none",
            prompt_len: int = 1024, reps: int = 0, cache: str = "off", engine_args: str = ""):
    """Prefill tok/s of one request (max_tokens=1) with distinct random prompts; ``cache: on`` repeats
    one prompt (the cache trap). vLLM engines run with prefix caching on for every claim, so an honest
    figure is proven uncached by the engine's own count (num_cached_tokens == 0)."""
    on = cache == "on"
    fam, spec, m = call_spec(ctx, model, engine, dtype, quantization, cache=on, engine_args=engine_args)
    _, reps = _defaults(ctx, 0, reps)
    prompt_len = as_int(prompt_len, "prompt_len")
    ctx.progress(f"llm.prefill {model} on {fam}: {prompt_len} tokens x {reps} reps"
                 + (", one repeated prompt (the prefix cache answers)" if on else ", distinct random prompts"))
    r, info = _call(ctx, fam, spec, "prefill", prompt_len=prompt_len, reps=reps, repeat_prompt=on)
    info = dict(info)
    _, nonemb = _params(m, info)
    tok = _med(r["tok_s"])
    flops = [2.0 * nonemb * x for x in r["tok_s"]]
    info.update(prompt_len=prompt_len, reps=reps, cache=cache, timing=r.get("timing"), dummy_weights=m["dummy"],
                flops_formula="2 x non-embedding parameters x prefill tok/s")
    if on:
        info["invalid_hint"] = ("prefix caching was on and the same prompt was repeated: the cache answered, "
                                "the hardware did not compute the prompt")
    values = {"tok_s": tok, "tok_s_wall": _med(r["tok_s_wall"]), "flops": 2.0 * nonemb * tok,
              "prompt_len": float(prompt_len), "ttft_s": prompt_len / tok, "non_embedding_params": float(nonemb)}
    invalid = None
    cached = r.get("cached_tokens")
    if cached is not None:  # the engine counts the prompt tokens its prefix cache answered (vLLM does)
        values["cached_tokens"] = _med(cached)
        if max(cached) > 0:
            invalid = (f"the engine served {values['cached_tokens']:.0f} of {prompt_len} prompt tokens from its "
                       "prefix cache (vLLM num_cached_tokens): the figure is the cache's speed, not prefill compute")
    return Measurement(values, {"tok_s": r["tok_s"], "flops": flops}, info=info,
                       implies={_matmul_key(spec): 2.0 * nonemb * tok}, invalid=invalid)


# -- batch sweep -------------------------------------------------------------------------------
def _row(b: int, r: dict) -> dict:
    return {"batch": b, "tok_s": _med(r["tok_s"]), "total_tok_s": _med(r["total_tok_s"]),
            "tok_s_samples": list(r["tok_s"]), "total_samples": list(r["total_tok_s"])}


def _flag(rows: list[dict], stop_gain: float) -> bool:
    """Mark each row flat (no better than the best smaller batch by stop_gain); saturated: two flat
    doublings in a row (one flat point can be noise: seen on the H200, 4B FP8 dipped at 128 and rose again)."""
    best = None
    for row in rows:
        row["flat"] = best is not None and row["total_tok_s"] < best * (1 + stop_gain)
        best = row["total_tok_s"] if best is None else max(best, row["total_tok_s"])
    return len(rows) > 2 and rows[-1]["flat"] and rows[-2]["flat"]


def _sweep(ctx, fam, spec, tokens, reps, prompt_len, at, max_batch, stop_gain) -> tuple[list[dict], dict]:
    rows: list[dict] = []
    confirmed = False
    b = 1
    while True:
        ctx.progress(f"llm.batch {spec['model']} on {fam}: {b} concurrent requests x {tokens} tokens")
        r, info = _call(ctx, fam, spec, "batch", concurrency=b, tokens=tokens, reps=reps, prompt_len=prompt_len)
        rows.append(_row(b, r))
        saturated = _flag(rows, stop_gain)
        if saturated and b >= at and not confirmed:
            # the peak the flat points are judged against is one measurement, and a spike there ends the
            # sweep early (CPU: batch 4 read 50.6 tok/s, 8 and 16 44-49, so the sweep stopped at 16 with
            # b* = 4; other runs saturated at 32-64): it is measured once more, its figure becomes the
            # median of both, and the sweep goes on if the flat points no longer are
            confirmed = True
            peak = max(rows[:-1], key=lambda row: row["total_tok_s"])
            ctx.progress(f"llm.batch {spec['model']} on {fam}: {peak['batch']} concurrent requests again "
                         "(the peak the sweep saturated against)")
            # not through _call's memo: the same arguments in the same attempt would hand back the first figure
            again = ctx.call(fam, spec, "batch", concurrency=peak["batch"], tokens=tokens, reps=reps,
                             prompt_len=prompt_len)
            peak.update(_row(peak["batch"], {"tok_s": peak["tok_s_samples"] + list(again["tok_s"]),
                                             "total_tok_s": peak["total_samples"] + list(again["total_tok_s"])}),
                        confirmed=True)
            saturated = _flag(rows, stop_gain)
        if b >= max_batch or (b >= at and saturated):
            return rows, info
        nb = b * 2
        if b < at < nb:
            nb = at
        b = min(nb, max_batch)


def _sweep_for(ctx, model, engine, dtype, quantization, tokens, reps, prompt_len, at, max_batch, stop_gain,
               engine_args=""):
    fam, spec, m = call_spec(ctx, model, engine, dtype, quantization, engine_args=engine_args)
    if not families()[fam].batches:
        raise Unmeasured(f"the {fam} engine here decodes one sequence at a time; use {able('batches')} for batching")
    tokens = as_int(tokens, "tokens") or (128 if ctx.device == "cuda" else 16)
    reps = as_int(reps, "reps") or (3 if ctx.device == "cuda" else 1)
    at = as_int(at, "at")
    # CUDA: up to vLLM's largest captured graph (512; beyond it decode runs eagerly and the total
    # throughput falls: H200 0.6B 41,835 -> 23,114 tok/s at 1,024); a claim may ask for more
    max_batch = as_int(max_batch, "max_batch") or (512 if ctx.device == "cuda" else 64)
    max_batch = max(max_batch, at)
    prompt_len = as_int(prompt_len, "prompt_len")
    skey = (json.dumps(spec, sort_keys=True, default=str), tokens, reps, prompt_len, at, max_batch, float(stop_gain))
    later = ctx.session.remembers("llm.sweeps", skey)
    rows, info = ctx.session.remember("llm.sweeps", skey, lambda: _sweep(ctx, fam, spec, tokens, reps, prompt_len, at,
                                                                        max_batch, float(stop_gain)))
    if later:
        # a later round measures again the two batch sizes a per-request figure needs (1 and ``at``);
        # where the throughput saturates comes from the first round's sweep
        # each row keeps the first sweep's total: the saturated batch is chosen from those alone (a fresh
        # batch 1 or ``at`` beside the others' first-sweep figures would move it from round to round)
        rows = [dict(r, from_first_sweep=True, first_total_tok_s=r["total_tok_s"]) for r in rows]
        for b in sorted({1, at}):
            r, info = _call(ctx, fam, spec, "batch", concurrency=b, tokens=tokens, reps=reps, prompt_len=prompt_len)
            fresh = {"batch": b, "tok_s": _med(r["tok_s"]), "total_tok_s": _med(r["total_tok_s"]),
                     "tok_s_samples": r["tok_s"], "total_samples": r["total_tok_s"]}
            rows = [dict(row, **fresh, from_first_sweep=False) if row["batch"] == b else row for row in rows]
    return fam, spec, m, rows, info, dict(tokens=tokens, reps=reps, prompt_len=prompt_len, at=at, max_batch=max_batch,
                                          stop_gain=float(stop_gain))


BATCH_OUT = {"tok_s_1": "tok/s", "tok_s_at": "tok/s", "slowdown": "fraction", "total_1": "tok/s",
             "total_at": "tok/s", "gain": "x", "flops_at": "FLOP/s", "flops_max": "FLOP/s", "total_max": "tok/s",
             "batch_max_run": "", "bytes_per_weight": "B", "non_embedding_params": "", "read_bw_1": "B/s"}


@probe("llm.batch", engine="llm", engine_key=engine_key, outputs=BATCH_OUT,
       choices={"engine": engines(), "dtype": DTYPES, "quantization": QUANTS})
def batch(ctx, model: str = "qwen3-0.6b", engine: str = "auto", dtype: str = "bfloat16", quantization: str = "none",
          at: int = 16, max_batch: int = 0, tokens: int = 0, reps: int = 0, prompt_len: int = 32,
          stop_gain: float = 0.1, engine_args: str = ""):
    """Concurrency sweep 1, 2, 4, ... through ``at``, then on until two doublings in a row beat the best by < stop_gain."""
    fam, spec, m, rows, info, used = _sweep_for(ctx, model, engine, dtype, quantization, tokens, reps, prompt_len,
                                                at, max_batch, stop_gain, engine_args)
    info = dict(info)
    wb, wread, kvt = _bytes(info)
    _, nonemb = _params(m, info)
    by = {r["batch"]: r for r in rows}
    r1, ra = by[1], by[used["at"]]
    best = max(rows, key=lambda r: r["total_tok_s"])
    kv_read = kvt * (as_int(prompt_len, "prompt_len") + (used["tokens"] - 1) / 2)
    implied_bw = max(r["tok_s"] * (wread + r["batch"] * kv_read) for r in rows)
    values = {"tok_s_1": r1["tok_s"], "tok_s_at": ra["tok_s"], "slowdown": r1["tok_s"] / ra["tok_s"] - 1,
              "total_1": r1["total_tok_s"], "total_at": ra["total_tok_s"],
              "gain": ra["total_tok_s"] / r1["total_tok_s"], "flops_at": 2.0 * nonemb * ra["total_tok_s"],
              "flops_max": 2.0 * nonemb * best["total_tok_s"], "total_max": best["total_tok_s"],
              "batch_max_run": float(rows[-1]["batch"]),
              "bytes_per_weight": float(info.get("bytes_per_linear_weight") or 0),
              "non_embedding_params": float(nonemb), "read_bw_1": r1["tok_s"] * (wread + kv_read)}
    info.update(used, sweep=[{k: v for k, v in r.items()} for r in rows], dummy_weights=m["dummy"],
                flops_formula="2 x non-embedding parameters x total decode tok/s",
                slowdown_formula="per-request tok/s at 1 / at `at` - 1")
    samples = {"slowdown": [r1["tok_s"] / x - 1 for x in ra["tok_s_samples"] if x]}
    return Measurement(values, samples, info=info,
                       implies={"read_bw": implied_bw, _matmul_key(spec): values["flops_max"]})


def _first_total(row: dict) -> float:
    return row.get("first_total_tok_s", row["total_tok_s"])


def _saturated(rows: list[dict]) -> tuple[dict, bool]:
    """(the row of the saturated batch b*, whether this round measured it). b* is where the first sweep's
    total peaked, in every round: a round's crossover is its own total at b* over its own at batch 1."""
    best = max(rows, key=_first_total)
    return best, not best.get("from_first_sweep", False)


def _ratios(top: list, one: list) -> list[float]:
    """The crossover per repetition: the i-th total at b* over the i-th at batch 1."""
    return [t / o for t, o in zip(top, one) if t and o]


@probe("llm.crossover", engine="llm", engine_key=engine_key,
       outputs={"crossover": "requests", "saturated_at": "requests", "gain_last": "fraction",
                "bytes_per_weight": "B", "flops_max": "FLOP/s", "total_1": "tok/s", "total_max": "tok/s"},
       exact=("saturated_at", "bytes_per_weight"),
       choices={"engine": engines(), "dtype": DTYPES, "quantization": QUANTS})
def crossover(ctx, model: str = "qwen3-0.6b", engine: str = "auto", dtype: str = "bfloat16",
              quantization: str = "none", at: int = 16, max_batch: int = 0, tokens: int = 0, reps: int = 0,
              prompt_len: int = 32, stop_gain: float = 0.1, engine_args: str = ""):
    """Measured compute crossover: saturated total decode throughput / batch-1 throughput (same sweep as llm.batch).

    Round 0 reads the full sweep; a later round measures again the saturated batch the first sweep found
    (llm.batch's later round measures only 1 and ``at``), so each round gives its own figure."""
    bm = ctx.probe("llm.batch", model=model, engine=engine, dtype=dtype, quantization=quantization, at=at,
                   max_batch=max_batch, tokens=tokens, reps=reps, prompt_len=prompt_len, stop_gain=stop_gain,
                   engine_args=engine_args)
    rows = bm.info["sweep"]
    if len(rows) < 2:
        raise Unmeasured("the sweep has a single batch size")
    # whether the sweep saturated is the first sweep's finding (a later round does not sweep)
    gain_last = _first_total(rows[-1]) / _first_total(rows[-2]) - 1
    if not rows[-1]["flat"]:
        raise Unmeasured(
            f"the sweep did not reach the compute crossover: total throughput still rose {gain_last * 100:.0f}% "
            f"from {rows[-2]['batch']} to {rows[-1]['batch']} concurrent requests (max_batch "
            f"{bm.info['max_batch']}); raise max_batch")
    fam, spec, _ = call_spec(ctx, model, engine, dtype, quantization, engine_args=engine_args)
    best, fresh = _saturated(rows)
    one = next(r for r in rows if r["batch"] == 1)
    measured = [r["batch"] for r in rows if not r.get("from_first_sweep", False)]
    if not fresh:  # b* is neither 1 nor ``at``: this round measures it, as the sweep did
        b = best["batch"]
        ctx.progress(f"llm.crossover {model} on {fam}: {b} concurrent requests x {bm.info['tokens']} tokens "
                     "(the saturated batch of the first sweep)")
        # not through _call's memo: it is keyed by attempt number, and a sweep taken again after a dropped
        # round at that number would hand back its own b* figure instead of this round's
        r = ctx.call(fam, spec, "batch", concurrency=b, tokens=bm.info["tokens"], reps=bm.info["reps"],
                     prompt_len=bm.info["prompt_len"])
        best = {"batch": b, "total_tok_s": _med(r["total_tok_s"]), "total_samples": r["total_tok_s"]}
        measured.append(b)
    total_max = best["total_tok_s"]
    flops_max = 2.0 * bm.values["non_embedding_params"] * total_max
    values = {"crossover": total_max / one["total_tok_s"], "saturated_at": float(best["batch"]),
              "gain_last": gain_last, "bytes_per_weight": bm.values["bytes_per_weight"],
              "flops_max": flops_max, "total_1": one["total_tok_s"], "total_max": total_max}
    info = {k: v for k, v in bm.info.items() if k not in ("ceilings",)}
    info["crossover_formula"] = ("roofline max(weight read, compute): throughput grows with the batch until it "
                                 "saturates; crossover batch = saturated total tok/s / batch-1 tok/s")
    info.update(measured_batches=sorted(measured), saturated_from="first sweep")
    samples = {"crossover": _ratios(best["total_samples"], one["total_samples"]),
               "total_1": list(one["total_samples"]), "total_max": list(best["total_samples"])}
    # b* measured here is a new figure: checked against the matmul ceiling as the sweep's are
    return Measurement(values, samples, info=info, implies={_matmul_key(spec): flops_max})


# -- decode time model -------------------------------------------------------------------------
@probe("llm.decode_fit", engine="llm", engine_key=engine_key,
       outputs={"overhead_ms": "ms", "max_rel_residual": "fraction", "fit_bw": "B/s", "fit_overhead_ms": "ms",
                "n_points": "", "read_bw": "B/s"},
       choices={"engine": engines()})
def decode_fit(ctx, variants: str = "qwen3-0.6b,qwen3-1.7b,qwen3-4b", engine: str = "auto", tokens: int = 0,
               reps: int = 0, prompt_len: int = 32):
    """Per-token time = bytes read / measured read bandwidth + one fixed overhead, over several models.

    ``variants``: comma-separated ``model[:dtype[:quantization]]`` (q4_0, q8_0 and f16 run on llama.cpp
    when ``engine`` is auto). ``overhead_ms``: the mean of
    (time per token - bytes / read bandwidth); ``max_rel_residual``: the worst relative error of
    that one-overhead model on any variant; ``fit_bw``/``fit_overhead_ms``: a free least-squares
    line time = bytes / fit_bw + overhead (for comparison with the measured bandwidth).
    """
    pts = []
    for v in [s.strip() for s in str(variants).split(",") if s.strip()]:
        parts = v.split(":")
        args = {"model": parts[0], "engine": engine, "tokens": tokens, "reps": reps, "prompt_len": prompt_len}
        if len(parts) > 1 and parts[1]:
            args["dtype"] = parts[1]
        if len(parts) > 2 and parts[2]:
            args["quantization"] = parts[2]
            if engine == "auto" and family_for(engine, quant_of(parts[2])) == "llamacpp":
                # named as a claim on that engine names it, so the decode is the one already measured
                args["engine"] = "llamacpp"
        d = ctx.probe("llm.decode", **args)
        pts.append({"variant": v, "bytes": d.values["read_bytes"], "t": 1.0 / d.values["tok_s"],
                    "tok_s": d.values["tok_s"], "engine": d.info.get("engine")})
    if len({round(p["bytes"]) for p in pts}) < 2:
        raise Unmeasured("a fixed per-token overhead cannot be told apart from bandwidth time with one size: "
                         "give two or more variants of different weight bytes")
    bw = ctx.probe("hw.read_bandwidth").values["read_bw"]
    over = [p["t"] - p["bytes"] / bw for p in pts]
    o = statistics.fmean(over)
    resid = max(abs(p["t"] - (p["bytes"] / bw + o)) / p["t"] for p in pts)
    n = len(pts)
    mx = statistics.fmean(p["bytes"] for p in pts)
    my = statistics.fmean(p["t"] for p in pts)
    sxx = sum((p["bytes"] - mx) ** 2 for p in pts)
    slope = sum((p["bytes"] - mx) * (p["t"] - my) for p in pts) / sxx
    icpt = my - slope * mx
    for p, ov in zip(pts, over):
        p["overhead_ms"] = ov * 1000
    values = {"overhead_ms": o * 1000, "max_rel_residual": resid, "fit_bw": 1.0 / slope if slope > 0 else float("inf"),
              "fit_overhead_ms": icpt * 1000, "n_points": float(n), "read_bw": bw}
    # one figure per round (a fit on that round's decodes): the rounds give its interval
    return Measurement(values, {"max_rel_residual": [resid], "overhead_ms": [o * 1000]},
                       info={"points": pts, "model": "t = bytes / read_bw + overhead"})
