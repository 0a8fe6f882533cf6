"""Whole-pipeline probe: one spoken turn through the three engines, each measured by its own probe.

``pipeline.turn`` composes (and shares, through the session cache) the engines' probes:

- ASR: ``asr.stream`` on the utterance (cache-aware streaming; compute time = its RTF x audio seconds);
- LLM: ``llm.decode`` for a reply of ``reply_tokens`` tokens (time = tokens / decode tok/s), plus
  ``llm.prefill`` of the prompt when that probe exists;
- TTS: ``tts.rtf`` of the reply's audio (whole-utterance time at the reply's exact patch count;
  the reply is ``reply_tokens x audio_s_per_token`` seconds of speech). One length is all the turn
  needs: a fit over a second, shorter length (what it timed before) cost a third more synthesis per
  round, the largest share of the pipeline's rounds on a GPU (full-size VoxCPM2: 107 s of 306 s).

The shares are of the summed compute time of the three stages for the turn. Outputs it relies on:
``asr.stream``: rtf, audio_s (args model, chunk_ms, reps); ``llm.decode``: tok_s (args model, engine,
tokens, reps, dtype; weight_bytes and hw.read_bandwidth for the bandwidth share); ``llm.prefill``:
tok_s (arg prompt_len; only when prompt_tokens > 0); ``tts.rtf``: rtf, audio_s.
"""
from __future__ import annotations

import math

from . import Measurement, Unmeasured, probe


def _accepts(ctx, name: str, args: dict) -> dict:
    """Keep only the arguments the registered probe takes (its signature may differ)."""
    spec = ctx.session.registry.get(name)
    if spec is None:
        raise Unmeasured(f"pipeline.turn needs probe {name!r}, which is not registered (not installed?)")
    return {k: v for k, v in args.items() if k in spec.params and v is not None}


def _out(m: Measurement, probe_name: str, *names: str) -> float:
    for n in names:
        if n in m.values and m.values[n] is not None and math.isfinite(float(m.values[n])):
            return float(m.values[n])
    raise Unmeasured(f"pipeline.turn needs output {' or '.join(names)} of {probe_name}; it reported "
                     f"{', '.join(sorted(m.values)) or 'nothing'}")


def _llm_call(a: dict) -> tuple[str, dict]:
    """The turn's LLM decode (the call it makes, less tokens and reps): its cases sort beside that
    engine's own cases, so the engine starts once."""
    return "llm.decode", {"model": a.get("llm_model"), "engine": a.get("llm_engine") or "auto",
                          **({"dtype": a["llm_dtype"]} if a.get("llm_dtype") else {})}


def _tts_call(a: dict) -> tuple[str, dict]:
    """The turn's reply synthesis (less its length and runs), its last stage: that engine is live after
    the case, and the TTS engine's own cases run next."""
    return "tts.rtf", {"model": a["tts_model"], "timesteps": int(a["tts_timesteps"]), "dtype": a["tts_dtype"]}


@probe("pipeline.turn", sorts_with=_llm_call, ends_with=_tts_call, nests_engines=True, outputs={
    "asr_s": "s", "llm_s": "s", "tts_s": "s", "total_s": "s", "asr_share": "", "llm_share": "", "tts_share": "",
    "utterance_s": "s", "reply_audio_s": "s", "reply_tokens": "tokens", "llm_bw_fraction": "",
})
def turn(ctx, asr_model: str = "nemotron-asr-0.6b", asr_chunk_ms: int = 560, llm_model: str = "qwen3-4b",
         llm_engine: str = "auto", reply_tokens: int = 32, prompt_tokens: int = 0, tts_model: str = "voxcpm2",
         audio_s_per_token: float = 0.3, tts_timesteps: int = 10, tts_dtype: str = "bfloat16",
         llm_dtype: str = "", reps: int = 3, tts_reps: int = 0):
    """One spoken turn: ASR of the utterance, an LLM reply of ``reply_tokens`` tokens, TTS of the reply.

    ``audio_s_per_token`` converts the reply to speech seconds (0.3 s: about 0.75 words per token at
    150 words per minute); the TTS runs at the nearest whole number of 160 ms patches.
    ``prompt_tokens`` > 0 adds the prefill of a prompt of that length (``llm.prefill``).
    ``tts_reps`` (0: ``reps``) sets the synthesis runs per round apart: one full-size run is seconds
    long, and the rounds, not the runs inside one, are what decide.
    """
    reply_tokens = int(reply_tokens)
    if reply_tokens < 1:
        raise Unmeasured("reply_tokens must be at least 1")
    # The LLM stage first: its cases sort beside the LLM's own (see _llm_call), whose engine is live
    # then; the ASR and TTS stages are the same calls for every LLM, measured once for the session.
    name, llm_call = _llm_call({"llm_model": llm_model, "llm_engine": llm_engine, "llm_dtype": llm_dtype})
    llm_args = _accepts(ctx, name, {**llm_call, "tokens": reply_tokens, "reps": int(reps)})
    ctx.progress(f"pipeline.turn: LLM {llm_model}, {reply_tokens} reply tokens")
    dec = ctx.probe(name, **llm_args)
    tok_s = _out(dec, "llm.decode", "tok_s")
    llm_s = reply_tokens / tok_s
    prefill_s = 0.0
    if int(prompt_tokens) > 0:
        pre_args = _accepts(ctx, "llm.prefill", {"model": llm_model, "engine": llm_engine,
                                                 "prompt_len": int(prompt_tokens), "dtype": llm_dtype or None})
        if "prompt_len" not in pre_args:
            raise Unmeasured("llm.prefill takes no prompt_len argument; pipeline.turn cannot size the prompt")
        pre = ctx.probe("llm.prefill", **pre_args)
        prefill_s = int(prompt_tokens) / _out(pre, "llm.prefill", "tok_s")
        llm_s += prefill_s
    bw_fraction = float("nan")
    if "weight_bytes" in dec.values:
        try:
            rd = ctx.probe("hw.read_bandwidth")
            bw_fraction = tok_s * float(dec.values["weight_bytes"]) / rd.values["read_bw"]
        except Unmeasured:
            pass
    # ASR of the user's utterance
    asr_args = _accepts(ctx, "asr.stream", {"model": asr_model, "chunk_ms": int(asr_chunk_ms), "reps": int(reps)})
    ctx.progress(f"pipeline.turn: ASR {asr_model} at {asr_chunk_ms} ms chunks")
    asr = ctx.probe("asr.stream", **asr_args)
    utter_s = _out(asr, "asr.stream", "audio_s")
    asr_s = _out(asr, "asr.stream", "rtf") * utter_s
    # TTS of the reply at its own length
    from .. import models

    ms = models.get(tts_model)
    aps = float(ms.defaults.get("audio_s_per_patch", 0.16)) if ms else 0.16
    patches = max(2, round(reply_tokens * float(audio_s_per_token) / aps))
    ctx.progress(f"pipeline.turn: TTS {tts_model}, {patches} patches")
    name, tts_call = _tts_call({"tts_model": tts_model, "tts_timesteps": tts_timesteps, "tts_dtype": tts_dtype})
    syn = ctx.probe(name, **tts_call, patches=patches, reps=int(tts_reps) or int(reps))
    reply_audio = _out(syn, "tts.rtf", "audio_s")
    tts_s = _out(syn, "tts.rtf", "rtf") * reply_audio
    total = asr_s + llm_s + tts_s
    values = {
        "asr_s": asr_s, "llm_s": llm_s, "tts_s": tts_s, "total_s": total, "asr_share": asr_s / total,
        "llm_share": llm_s / total, "tts_share": tts_s / total, "utterance_s": utter_s,
        "reply_audio_s": reply_audio, "reply_tokens": float(reply_tokens), "llm_bw_fraction": bw_fraction,
    }
    # per-run shares where every stage has per-run samples; else the round's own share (one run of the
    # reply's synthesis per round): a timed figure, never a probe without samples, which the session
    # would take for a search and decide from one round with no interval
    samples = {"tts_share": [values["tts_share"]]}
    a_runs = asr.repetitions.get("rtf") or []
    d_runs = dec.repetitions.get("tok_s") or []
    t_runs = syn.repetitions.get("rtf") or []
    n = min(len(a_runs), len(d_runs), len(t_runs))
    if n >= 2:
        shares = []
        for i in range(n):
            a = a_runs[i] * utter_s
            lm = reply_tokens / d_runs[i] + prefill_s
            t = t_runs[i] * reply_audio
            shares.append(t / (a + lm + t))
        samples["tts_share"] = shares
    return Measurement(values, samples, info={
        "asr": {"probe": "asr.stream", "args": asr_args, "values": asr.values},
        "llm": {"probe": "llm.decode", "args": llm_args, "values": dec.values, "prefill_s": prefill_s},
        "tts": {"probe": "tts.rtf", "patches": patches, "values": syn.values,
                "engine": {k: syn.info.get(k) for k in ("model", "dummy", "dtype", "device", "params")}},
        "audio_s_per_token": float(audio_s_per_token),
        "method": "sum of the three stages' compute time for one turn: ASR streaming compute (RTF x utterance), "
                  "LLM decode of the reply (tokens / tok/s, + prefill), TTS whole-utterance synthesis of the reply",
    })
