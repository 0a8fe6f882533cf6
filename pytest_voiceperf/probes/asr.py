"""Streaming ASR probes: NVIDIA NeMo cache-aware FastConformer-RNNT in an isolated engine worker.

- ``asr.streaming_config``: what the model reports for one look-ahead (right context): chunk and
  shift sizes, cache sizes, the encoder frame from the subsampling factor, the left context.
- ``asr.stream``: a real cache-aware streaming run (NeMo's ``CacheAwareStreamingAudioBuffer`` and
  ``conformer_stream_step``): encoder frames against the offline pass, per-chunk latency, RTF,
  encoder FLOPs per new frame against the offline pass.
- ``asr.buffered``: the same clip re-encoded in overlapping windows (same left context), for the
  compute comparison.
- ``asr.streams``: (CUDA) the most concurrent streams whose step fits in the chunk duration.
- ``asr.cer``: jiwer CER over a NeMo manifest at one chunk size (trained weights only).

``chunk_ms`` is matched against the chunk sizes the model itself reports (not computed from a
formula); ``right_context`` may be given instead. Audio for timing: ``audio`` names a data set
(``--voiceperf-data NAME=WAV``) or a WAV path; by default the ``asr-audio`` data set if given,
else English speech made here with espeak-ng at 16 kHz, else (no espeak-ng) a synthetic voiced
signal, which the result says. With random weights, speed does not depend on what is said.
"""
from __future__ import annotations

import math
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from .. import stats
from . import Measurement, Unmeasured, probe

DEFAULT_MODEL = "nemotron-asr-0.6b"
SPEECH_TEXT = ("Cache aware streaming computes every encoder frame exactly once, "
               "so compute grows only with new audio.")
_made: dict[str, dict] = {}  # audio made in this process, by text


# -- arguments ---------------------------------------------------------------------------------
def _int(value, what: str) -> int | None:
    if value is None or value == "":
        return None
    try:
        return int(float(value))
    except (TypeError, ValueError):
        raise Unmeasured(f"{what} must be a number, got {value!r}") from None


def _dtype(dtype) -> str:
    """The torch dtype name a claim's ``dtype`` spells (bf16, fp32 and fp16 accepted)."""
    return {"bf16": "bfloat16", "fp32": "float32", "fp16": "float16"}.get(str(dtype), str(dtype))


def _nemo_key(args: dict) -> str:
    """One NeMo engine per model and dtype: cases sort by it, so the bfloat16 streams-per-GPU cases
    no longer sit between float32 ones (on the H200 the float32 engine started again after them)."""
    return f"{args.get('model') or DEFAULT_MODEL}:{_dtype(args.get('dtype') or 'float32')}"


def _spec(ctx, model: str, dtype: str = "float32") -> tuple[dict, dict]:
    m = ctx.model(model)
    if m["family"] not in (None, "asr"):
        raise Unmeasured(f"model {model!r} is a {m['family']} model, not an ASR model")
    if m["config"] is None and m["weights"] is None:
        raise Unmeasured(f"model {model!r} has neither a shape in the catalog nor weights")
    dtype = _dtype(dtype)
    if dtype not in ("float32", "bfloat16", "float16"):
        raise Unmeasured(f"dtype {dtype!r} is not float32, bfloat16 or float16")
    return {"model": model, "config": m["config"], "weights": m["weights"], "device": ctx.device,
            "dtype": dtype}, m


def _engine_info(ctx, spec: dict) -> dict:
    info = dict(ctx.engine("nemo", spec).info)
    keep = ("engine", "nemo_version", "torch", "model", "class", "device", "dtype", "dummy", "weights", "params",
            "weight_bytes", "n_layers", "d_model", "att_context_size_all", "decoding_note", "load_s")
    return {k: info[k] for k in keep if k in info}


def _right_context(ctx, spec: dict, chunk_ms, right_context) -> tuple[int, dict | None]:
    """The look-ahead whose chunk the model reports as ``chunk_ms`` (or ``right_context`` itself)."""
    rc = _int(right_context, "right_context")
    if rc is not None:
        return rc, None
    cm = _int(chunk_ms, "chunk_ms")
    if cm is None:
        raise Unmeasured("give chunk_ms or right_context")
    rows = ctx.call("nemo", spec, "chunk_table")["rows"]
    for row in rows:
        if abs(row["chunk_ms"] - cm) < 0.5:
            return row["right_context_frames"], row
    have = ", ".join(f"{r['chunk_ms']:g} ms (right context {r['right_context_frames']})" for r in rows)
    raise Unmeasured(f"the model reports no {cm} ms chunk; its look-aheads give {have}")


# -- audio -------------------------------------------------------------------------------------
def _espeak(text: str) -> dict | None:
    exe = shutil.which("espeak-ng") or shutil.which("espeak")
    if not exe:
        return None
    d = Path(tempfile.mkdtemp(prefix="voiceperf-asr-audio-"))
    raw = d / "speech-raw.wav"
    try:
        subprocess.run([exe, "-v", "en-us", "-s", "165", "-w", str(raw), text], check=True,
                       capture_output=True, timeout=60)
    except (subprocess.SubprocessError, OSError):
        return None
    sox = shutil.which("sox")
    if sox:
        out = d / "speech-16k.wav"
        try:
            subprocess.run([sox, str(raw), "-r", "16000", "-c", "1", "-b", "16", str(out)], check=True,
                           capture_output=True, timeout=60)
            return {"path": str(out), "source": f"English speech made here with {os.path.basename(exe)} "
                                                "(resampled to 16 kHz with sox)", "text": text}
        except (subprocess.SubprocessError, OSError):
            pass
    return {"path": str(raw), "source": f"English speech made here with {os.path.basename(exe)} "
                                        "(22.05 kHz, resampled to 16 kHz by the engine)", "text": text}


def _synthetic(seconds: float = 6.6) -> dict:
    """Not speech: a voiced signal (120 Hz harmonics, formant-like weights, 4 Hz syllable envelope)."""
    import wave

    import numpy as np

    sr = 16000
    t = np.arange(int(seconds * sr)) / sr
    f0 = 120 + 20 * np.sin(2 * np.pi * 0.5 * t)
    phase = 2 * np.pi * np.cumsum(f0) / sr
    sig = sum(np.sin(k * phase) * np.exp(-((k * 120 - 700) / 400) ** 2 - 0.1 * k) for k in range(1, 30))
    env = 0.5 * (1 - np.cos(2 * np.pi * 4 * t)) * (0.6 + 0.4 * np.sin(2 * np.pi * 0.3 * t))
    rng = np.random.default_rng(0)
    x = sig * env + 0.01 * rng.standard_normal(len(t))
    x = (0.3 * x / np.abs(x).max() * 32767).astype(np.int16)
    path = Path(tempfile.mkdtemp(prefix="voiceperf-asr-audio-")) / "synthetic-16k.wav"
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(sr)
        w.writeframes(x.tobytes())
    return {"path": str(path), "source": "no espeak-ng on this machine: a synthetic voiced signal (not speech; "
                                         "with random weights the compute does not depend on the content)"}


def resolve_audio(ctx, audio: str = "") -> dict:
    """{path, source}: a data set name, a WAV path, or speech made on this machine."""
    data = ctx.session.options.data
    name = str(audio or "")
    if name and name in data:
        return {"path": data[name], "source": f"--voiceperf-data {name}"}
    if name and name not in ("speech", "espeak", "synthetic"):
        # a path from a claim file (untrusted): a regular file inside the project, not /dev/zero or a
        # file elsewhere on the machine; the user's own files come with --voiceperf-data
        from ..files import Refused, check_regular

        root = ctx.session.rootdir.resolve()
        path = (root / name).resolve()
        if not path.is_relative_to(root):
            raise Unmeasured(f"audio {name!r} is outside the project ({root}); give a file elsewhere with "
                             f"--voiceperf-data NAME=WAV and name the data set")
        try:
            check_regular(path, 1 << 30, "an audio file")
        except Refused as exc:
            if exc.kind == "missing":
                raise Unmeasured(f"audio {name!r} is neither a data set (--voiceperf-data {name}=WAV) nor a file") from None
            raise Unmeasured(f"audio {name!r}: {exc}") from None
        return {"path": str(path), "source": "given WAV file"}
    if not name and "asr-audio" in data:
        return {"path": data["asr-audio"], "source": "--voiceperf-data asr-audio"}
    key = "synthetic" if name == "synthetic" else SPEECH_TEXT
    if key not in _made:
        made = None if name == "synthetic" else _espeak(SPEECH_TEXT)
        _made[key] = made or _synthetic()
    return dict(_made[key])


# -- probes ------------------------------------------------------------------------------------
# the model's own settings: read, not timed
STREAMING_CONFIG_OUT = ("chunk_ms", "frame_ms", "left_context_s", "left_context_ms", "left_context_frames",
                        "right_context_frames", "chunk_frames", "chunk_mel_frames", "first_chunk_mel_frames",
                        "shift_mel_frames", "subsampling_factor", "feature_stride_ms", "pre_encode_cache_size",
                        "last_channel_cache_size", "drop_extra_pre_encoded", "valid_out_len", "lookaheads")


@probe("asr.streaming_config", engine="nemo", engine_key=_nemo_key, outputs={
    "chunk_ms": "ms", "frame_ms": "ms", "left_context_s": "s", "left_context_ms": "ms",
    "left_context_frames": "frames", "right_context_frames": "frames", "chunk_frames": "frames",
    "chunk_mel_frames": "frames", "first_chunk_mel_frames": "frames", "shift_mel_frames": "frames",
    "subsampling_factor": "", "feature_stride_ms": "ms", "pre_encode_cache_size": "frames",
    "last_channel_cache_size": "frames", "drop_extra_pre_encoded": "frames", "valid_out_len": "frames",
    "lookaheads": ""}, exact=STREAMING_CONFIG_OUT)
def streaming_config(ctx, right_context: int = 0, model: str = DEFAULT_MODEL):
    """The model's own streaming settings for one look-ahead (after set_default_att_context_size)."""
    spec, _ = _spec(ctx, model)
    rc = _int(right_context, "right_context")
    r = ctx.call("nemo", spec, "streaming_config", right_context=rc)
    info = _engine_info(ctx, spec)
    values = {k: float(r[k]) for k in ("chunk_ms", "frame_ms", "left_context_s", "left_context_frames",
                                       "right_context_frames", "chunk_frames", "chunk_mel_frames",
                                       "first_chunk_mel_frames", "shift_mel_frames", "subsampling_factor",
                                       "feature_stride_ms", "pre_encode_cache_size", "last_channel_cache_size",
                                       "drop_extra_pre_encoded", "valid_out_len")}
    values["left_context_ms"] = float(r["last_channel_cache_size"] * r["frame_ms"])
    values["lookaheads"] = float(len(info.get("att_context_size_all", [])))
    info.update({"streaming_cfg": r["streaming_cfg"], "att_context_size": r["att_context_size"],
                 "cache_last_channel_shape": r["cache_last_channel_shape"],
                 "cache_last_time_shape": r["cache_last_time_shape"],
                 "chunk_ms_from": "shift_size[1] (steady-state mel frames per step) x window_stride",
                 "frame_ms_from": "subsampling_factor x window_stride"})
    return Measurement(values, info=info)


@probe("asr.stream", engine="nemo", engine_key=_nemo_key, outputs={
    "rtf": "RTF", "latency_median_s": "s", "latency_p95_s": "s", "frames_stream": "frames",
    "frames_offline": "frames", "steps": "", "chunk_ms": "ms", "audio_s": "s",
    "flops_per_frame_stream": "FLOP", "flops_per_frame_offline": "FLOP", "flop_ratio_vs_offline": "x",
    "offline_rtf": "RTF", "rel_diff_vs_offline": "", "frames_differing_vs_offline": "frames", "threads": ""},
    exact=("frames_stream", "frames_offline", "steps", "chunk_ms", "audio_s", "flops_per_frame_stream",
           "flops_per_frame_offline", "flop_ratio_vs_offline", "threads"))
def stream(ctx, chunk_ms: int = 0, right_context: int | None = None, model: str = DEFAULT_MODEL,
           threads: int = 1, dtype: str = "float32", audio: str = "", reps: int = 0):
    """Cache-aware streaming of one clip (NeMo's streaming buffer and conformer_stream_step).

    One untimed pass counts encoder FLOPs (FlopCounterMode) and compares the encoder output with
    the offline pass; ``reps`` timed passes give the RTF (sum of step times / audio seconds) and
    the per-chunk latencies (one conformer_stream_step: encoder plus greedy RNNT decoding;
    features are computed up front).
    """
    spec, m = _spec(ctx, model, dtype)
    rc, _ = _right_context(ctx, spec, chunk_ms, right_context)
    au = resolve_audio(ctx, audio)
    # timed passes per round (the verdict's spread comes from rounds): 3 on a GPU, 1 on the CPU, where
    # a pass takes 3-9 s and two back to back differed by 1-4% (results/cpu/timing/); the 560 ms RTF
    # near its bound is inconclusive either way, and the futility stop ends it after 3 rounds
    reps = _int(reps, "reps") or (3 if ctx.device == "cuda" else 1)
    r = ctx.call("nemo", spec, "stream", right_context=rc, audio=au["path"], threads=_int(threads, "threads") or 0,
                 reps=reps)
    keys = ("rtf", "latency_median_s", "latency_p95_s", "frames_stream", "frames_offline", "steps", "chunk_ms",
            "audio_s", "flops_per_frame_stream", "flops_per_frame_offline", "flop_ratio_vs_offline", "offline_rtf",
            "rel_diff_vs_offline", "frames_differing_vs_offline", "threads")
    values = {k: float(r[k]) for k in keys if k in r}
    info = _engine_info(ctx, spec)
    info.update({k: r[k] for k in ("att_context_size", "frames_per_step", "flop_method", "padded_s", "text",
                                   "max_abs_diff_vs_offline", "flops_per_step", "offline_encoder_s", "counts") if k in r})
    info.update({"audio": au, "latency_s": r["latency_s"], "rtf_runs": r["rtf_runs"],
                 "timing": "perf_counter around each conformer_stream_step (CUDA synchronized), features up front",
                 "offline_rtf_timing": "one offline encoder pass per clip and look-ahead, timed in the first round "
                                       "only (the same figure in every round)"})
    if m["dummy"]:
        info["weights_note"] = "random weights of the catalog shape; speed does not depend on weight values"
    return Measurement(values, repetitions={"rtf": list(r["rtf_runs"])}, info=info)


PARAKEET_HOW = ("build parakeet.cpp (github.com/mudler/parakeet.cpp: cmake -B build -DPARAKEET_SHARED=ON "
                "-DPARAKEET_BUILD_SERVER=OFF && cmake --build build -j)")


def _port(ctx, chunk_ms, right_context, model: str, quant: str, audio: str):
    """What both port probes share: the library, NeMo's spec, the look-ahead and its chunk, the clip,
    and the model written by the NeMo engine as the port's GGUF with the samples it streams."""
    library = ctx.binary("parakeet", "PARAKEET_LIBRARY", PARAKEET_HOW)
    spec, m = _spec(ctx, model, "float32")
    rc, row = _right_context(ctx, spec, chunk_ms, right_context)
    quant = str(quant or "q8_0")
    if quant not in ("f32", "f16", "q8_0"):
        raise Unmeasured(f"quant {quant!r} is not f32, f16 or q8_0 (what parakeet.cpp reads)")
    au = resolve_audio(ctx, audio)
    ex = ctx.call("nemo", spec, "export_gguf", right_context=rc, quant=quant, audio=au["path"],
                  out_dir=ctx.session.scratch())
    cm = float((row or ctx.call("nemo", spec, "streaming_config", right_context=rc))["chunk_ms"])
    port_spec = {"library": library, "model": model, "device": ctx.device}
    feed = {"gguf": ex["path"], "clip": ex["clip"], "chunk_ms": cm, "sample_rate": ex["sample_rate"]}
    return spec, m, rc, au, ex, port_spec, feed


@probe("asr.port", engine="parakeet", outputs={
    "rtf": "RTF", "latency_median_s": "s", "latency_p95_s": "s", "audio_s": "s", "feeds": "", "threads": "",
    "gguf_bytes": "B"}, exact=("audio_s", "feeds", "threads", "gguf_bytes"))
def port(ctx, chunk_ms: int = 0, right_context: int | None = None, model: str = DEFAULT_MODEL,
         threads: int = 1, quant: str = "q8_0", audio: str = "", reps: int = 0):
    """The same cache-aware streaming run on parakeet.cpp, a C++/ggml port: the NeMo engine writes
    the model it times (same weights) at this look-ahead as a GGUF (``quant``: f32, f16 or q8_0 of
    the matmul weights) with the exact samples it streams; the port is fed them one chunk per call
    through its streaming C API. RTF = (feed + finalize seconds) / audio seconds."""
    spec, m, _, au, ex, port_spec, feed = _port(ctx, chunk_ms, right_context, model, quant, audio)
    reps = _int(reps, "reps") or (3 if ctx.device == "cuda" else 1)
    r = ctx.call("parakeet", port_spec, "stream", threads=_int(threads, "threads") or 0, reps=reps, **feed)
    values = {k: float(r[k]) for k in ("rtf", "latency_median_s", "latency_p95_s", "audio_s", "feeds", "threads")}
    values["gguf_bytes"] = float(ex["file_bytes"])
    info = dict(ctx.engine("parakeet", port_spec).info)
    info.update({"gguf": {k: ex[k] for k in ("quant", "tensors", "quantized", "tensor_bytes", "file_bytes",
                                            "att_context", "streaming_cfg", "write_s")},
                 "nemo": _engine_info(ctx, spec), "audio": au, "rtf_runs": r["rtf_runs"], "text": r["text"],
                 "piece_samples": r["piece_samples"],
                 "timing": "perf_counter around each parakeet_capi_stream_feed (one chunk of samples, log-mel "
                           "included) and the final parakeet_capi_stream_finalize"})
    if m["dummy"]:
        info["weights_note"] = "the NeMo engine's random weights, written as they are timed there"
    return Measurement(values, repetitions={"rtf": list(r["rtf_runs"])}, info=info)


@probe("asr.port_agreement", engine="parakeet", outputs={"cer_vs_nemo": "fraction", "chars_nemo": "",
                                                         "chars_port": ""},
       exact=("cer_vs_nemo", "chars_nemo", "chars_port"))
def port_agreement(ctx, chunk_ms: int = 0, right_context: int | None = None, model: str = DEFAULT_MODEL,
                   quant: str = "q8_0", audio: str = ""):
    """Do the port and NeMo say the same thing? Trained weights only: the CER of the port's streamed
    transcript of the clip against NeMo's (same model, look-ahead and samples; ``asr.cer``'s scoring)."""
    if ctx.model(model)["dummy"]:
        raise Unmeasured(f"transcript agreement needs trained weights (random weights decode to blanks): "
                         f"--voiceperf-model {model}=PATH.nemo")
    spec, _, rc, au, ex, port_spec, feed = _port(ctx, chunk_ms, right_context, model, quant, audio)
    hyp = ctx.call("parakeet", port_spec, "transcript", **feed)["text"]
    a = ctx.call("nemo", spec, "agreement", right_context=rc, audio=au["path"], text=hyp)
    return Measurement({"cer_vs_nemo": a["cer"], "chars_nemo": float(len(a["reference"])),
                        "chars_port": float(len(a["hypothesis"]))},
                       info={"nemo_text": a["reference"], "port_text": a["hypothesis"], "audio": au,
                             "quant": ex["quant"], "normalization": "asr.cer's: NFC, lower case, <tags> and "
                                                                   "punctuation removed, spaces collapsed"})


@probe("asr.buffered", engine="nemo", engine_key=_nemo_key, outputs={
    "rtf": "RTF", "latency_median_s": "s", "latency_p95_s": "s", "flops_per_frame": "FLOP",
    "flops_per_frame_steady": "FLOP", "flop_ratio_vs_offline": "x", "window_s": "s", "steps": "",
    "chunk_ms": "ms"}, exact=("flops_per_frame", "flops_per_frame_steady", "flop_ratio_vs_offline", "window_s",
                              "steps", "chunk_ms"))
def buffered(ctx, chunk_ms: int = 0, right_context: int | None = None, model: str = DEFAULT_MODEL,
             threads: int = 1, dtype: str = "float32", audio: str = "", reps: int = 1):
    """Buffered streaming: every chunk, the last (left context + chunk) of features is re-encoded from
    scratch with the same model and the chunk's new frames kept; FLOPs counted as for asr.stream."""
    spec, _ = _spec(ctx, model, dtype)
    rc, _ = _right_context(ctx, spec, chunk_ms, right_context)
    au = resolve_audio(ctx, audio)
    r = ctx.call("nemo", spec, "buffered", right_context=rc, audio=au["path"],
                 threads=_int(threads, "threads") or 0, reps=_int(reps, "reps") or 1)
    values = {"rtf": r["rtf"], "latency_median_s": r["latency_median_s"], "latency_p95_s": r["latency_p95_s"],
              "flops_per_frame": r["flops_per_frame_buffered"], "flops_per_frame_steady": r["flops_per_frame_steady"],
              "flop_ratio_vs_offline": r["flop_ratio_vs_offline"], "window_s": r["window_s"],
              "steps": float(r["steps"]), "chunk_ms": r["chunk_ms"]}
    info = _engine_info(ctx, spec)
    info.update({"audio": au, "method": r["method"], "rtf_runs": r["rtf_runs"],
                 "flops_offline": r["flops_offline"], "frames_offline": r["frames_offline"]})
    # the RTF keeps its samples even from one repetition: a probe without samples is deterministic
    # (one round stands for every round, and the gate compares its outputs as counts)
    return Measurement({k: float(v) for k, v in values.items()}, repetitions={"rtf": list(r["rtf_runs"])}, info=info)


# one search per run (doubling, then bisecting on a timed criterion): its count is a timing's outcome,
# not a count of a deterministic computation, so only chunk_ms is declared exact
@probe("asr.streams", engine="nemo", engine_key=_nemo_key, outputs={"streams": "streams", "step_s": "s", "chunk_ms": "ms"},
       exact=("chunk_ms",), one_figure=True)
def streams(ctx, chunk_ms: int = 0, right_context: int | None = None, model: str = DEFAULT_MODEL,
            dtype: str = "bfloat16", audio: str = "", max_streams: int = 8192):
    """(CUDA) The largest number of concurrent streams whose median step stays within the chunk duration
    (doubling, then bisecting)."""
    if ctx.device != "cuda":
        raise Unmeasured("concurrent streams per GPU needs a CUDA GPU (this run is on the CPU)")
    spec, _ = _spec(ctx, model, dtype)
    rc, _ = _right_context(ctx, spec, chunk_ms, right_context)
    au = resolve_audio(ctx, audio)
    r = ctx.call("nemo", spec, "streams", right_context=rc, audio=au["path"],
                 max_streams=_int(max_streams, "max_streams") or 8192,
                 budget_s=max(30.0, min(150.0, ctx.time_left() * 0.5)))
    info = _engine_info(ctx, spec)
    floor = ctx.session.options.noise_floor
    quart = {int(b): (q[0], q[1]) for b, q in (r.get("step_quartiles_s") or {}).items()}
    bracket = stats.search_bracket(quart, r["chunk_ms"] / 1000.0, floor, int(r["streams"])) if quart else None
    # a size that ran out of device memory (step inf): where the bracket's top is such a size, the
    # count is bounded by memory here, not by step time (seen on an H100 late in a whole-profile run:
    # 3,200 streams at 1.12 s out of memory, 3,584 fitting in time on a fresh engine)
    oom = sorted(int(b) for b, t in (r.get("step_s") or {}).items() if not math.isfinite(float(t)))
    if oom:
        ctx.progress(f"asr.streams: out of device memory from {oom[0]} streams; the count is bounded by memory there")
    info.update({"audio": au, "step_s_by_streams": r["step_s"], "capped": r["capped"], "gpu": r["gpu"],
                 "out_of_memory_from": oom[0] if oom else None,
                 "budget_hit": r["budget_hit"], "steps_timed": r["steps_timed"],
                 "step_quartiles_s_by_streams": r.get("step_quartiles_s"),
                 "method": "identical streams batched in NeMo's buffer; median conformer_stream_step time "
                           "(first step dropped) against the chunk duration; doubling, then bisecting",
                 "bracket": None if bracket is None else {
                     "streams": list(bracket),
                     "how": f"over the sizes tried: a size surely fits when its steps' q75 x (1 + {floor:g}) is "
                            f"within the chunk, surely misses when their q25 x (1 - {floor:g}) is over it"}})
    return Measurement({"streams": float(r["streams"]), "step_s": float(r["step_s_at_best"] or 0.0),
                        "chunk_ms": float(r["chunk_ms"])}, info=info,
                       bracket={} if bracket is None else {"streams": (float(bracket[0]), float(bracket[1]))})


@probe("asr.cer", engine="nemo", engine_key=_nemo_key, outputs={
    "cer": "fraction", "corpus_cer": "fraction", "empty": "utterances", "n": "utterances",
    "languages": "", "languages_usable": "", "chunk_ms": "ms"},
    exact=("cer", "corpus_cer", "empty", "n", "languages", "languages_usable", "chunk_ms"))  # greedy decoding
def cer(ctx, chunk_ms: int = 0, right_context: int | None = None, model: str = DEFAULT_MODEL,
        manifest: str = "asr-manifest", dtype: str = "float32", limit: int = 0, usable_cer: float = 0.15):
    """Character error rate (jiwer) of streamed transcripts over a NeMo manifest at one chunk size:
    the mean of per-utterance CERs (an empty transcript counts 1.0 and is counted in ``empty``), and
    the corpus CER. With a ``lang`` (or ``language``/``locale``) field per line, ``languages_usable``
    counts the languages whose mean CER is at most ``usable_cer``."""
    spec, m = _spec(ctx, model, dtype)
    if m["dummy"]:
        raise Unmeasured(f"CER needs trained weights: {model!r} has random weights here "
                         f"(give them with --voiceperf-model {model}=PATH.nemo)")
    path = ctx.session.options.data.get(str(manifest))
    if path is None:
        if os.path.exists(str(manifest)):
            path = str(manifest)
        else:
            raise Unmeasured(f"CER needs a NeMo manifest (audio_filepath, text per line): "
                             f"give it with --voiceperf-data {manifest}=PATH")
    rc, _ = _right_context(ctx, spec, chunk_ms, right_context)
    r = ctx.call("nemo", spec, "cer", manifest=path, right_context=rc, limit=_int(limit, "limit") or 0,
                 usable_cer=float(usable_cer))
    info = _engine_info(ctx, spec)
    info.update({"manifest": path, "per_utterance": r["per_utterance"], "hypotheses": r["hypotheses"],
                 "references": r["references"], "normalization": r["normalization"],
                 "per_language": r.get("per_language", {}), "usable_cer": float(usable_cer)})
    return Measurement({"cer": r["cer"], "corpus_cer": r["corpus_cer"], "empty": float(r["empty"]),
                        "n": float(r["n"]), "languages": float(r.get("languages", 0)),
                        "languages_usable": float(r.get("languages_usable", 0)), "chunk_ms": float(r["chunk_ms"])},
                       info=info)
