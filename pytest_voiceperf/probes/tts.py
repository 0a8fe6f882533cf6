"""TTS probes: VoxCPM2 (the ``voxcpm`` package) and Magpie TTS (NeMo), in isolated engine workers.

- ``tts.synthesis``: whole-utterance synthesis time at fixed lengths (patch counts), a linear
  fit of time against audio seconds (slope, intercept, R^2), real-time factor, peak memory.
- ``tts.steps``: the cost of one patch at several diffusion step counts, and a fit
  ``patch time = fixed + per_step x steps``.
- ``tts.streaming``: time to the first audio chunk, and whether every later chunk arrives
  before the audio already delivered has finished playing.
- ``tts.magpie``: decoder steps per codec frame and time per decoder step of Magpie TTS.

Lengths are fixed patch counts (VoxCPM2 makes one patch of 4 latent frames = 160 ms per
autoregressive step), so a run measures exactly the audio it asked for. Arguments arrive as
written in YAML: lists are comma-separated strings ("4,8,12,16,20").
"""
from __future__ import annotations

import statistics

from . import Measurement, Unmeasured, probe

DTYPES = {"bf16": "bfloat16", "bfloat16": "bfloat16", "fp32": "float32", "float32": "float32"}


def _ints(value, what: str) -> list[int]:
    if isinstance(value, (int, float)):
        return [int(value)]
    if isinstance(value, (list, tuple)):
        return [int(v) for v in value]
    try:
        out = [int(v) for v in str(value).replace(";", ",").split(",") if v.strip()]
    except ValueError:
        raise Unmeasured(f"{what} must be integers separated by commas, got {value!r}") from None
    if not out:
        raise Unmeasured(f"{what} is empty")
    return out


def _bool(value) -> bool:
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("1", "true", "on", "yes")


def linfit(x: list[float], y: list[float]) -> dict:
    """Least-squares line y = slope x + intercept with R^2 and standard errors (scipy)."""
    from scipy import stats

    if len(set(x)) < 2:
        raise Unmeasured("a linear fit needs at least two distinct x values")
    r = stats.linregress(x, y)
    return {"slope": float(r.slope), "intercept": float(r.intercept), "r2": float(r.rvalue ** 2),
            "slope_stderr": float(r.stderr), "intercept_stderr": float(r.intercept_stderr)}


RUNTIMES = {"pytorch": "voxcpm", "nanovllm": "nanovllm"}  # runtime -> engine family


def voxcpm_spec(ctx, model: str, dtype: str, optimize, runtime: str = "pytorch", timesteps: int = 10
                ) -> tuple[str, dict]:
    """(engine family, spec) for VoxCPM2 under ``runtime``: ``pytorch`` (the voxcpm package, eager or
    torch.compile) or ``nanovllm`` (nano-vllm-voxcpm: bf16, CUDA graphs, CUDA only)."""
    m = ctx.model(model)
    if m["family"] not in (None, "tts"):
        raise Unmeasured(f"model {model!r} is a {m['family']} model, not a TTS model")
    if dtype not in DTYPES:
        raise Unmeasured(f"dtype {dtype!r} is not one of {', '.join(sorted(DTYPES))}")
    if runtime not in RUNTIMES:
        raise Unmeasured(f"runtime {runtime!r} is not one of {', '.join(RUNTIMES)}")
    if runtime == "nanovllm":
        if ctx.device != "cuda":
            raise Unmeasured("runtime nanovllm needs CUDA: Nano-vLLM VoxCPM runs flash-attn and Triton kernels "
                             "with CUDA graphs only")
        if DTYPES[dtype] != "bfloat16":
            raise Unmeasured(f"runtime nanovllm runs bfloat16 only (asked for {DTYPES[dtype]})")
        if _bool(optimize):
            raise Unmeasured("optimize is the voxcpm (PyTorch) runtime's torch.compile switch; Nano-vLLM always "
                             "captures CUDA graphs")
        return RUNTIMES[runtime], {"model": model, "config": m["config"], "weights": m["weights"], "device": ctx.device,
                            "timesteps": int(timesteps)}
    if ctx.device != "cuda" and _bool(optimize):
        raise Unmeasured("optimize=on needs CUDA: VoxCPM applies torch.compile only on a CUDA device with triton "
                         "(on the CPU it prints 'torch.compile disabled' and runs eager)")
    spec = {"model": model, "config": m["config"], "weights": m["weights"], "device": ctx.device,
            "dtype": DTYPES[dtype], "optimize": _bool(optimize)}
    return RUNTIMES[runtime], _with_threads(ctx, model, spec)


def _tts_key(args: dict) -> str:
    """Cases on one engine instance run together: runtime, model, dtype, compile (and Nano-vLLM's steps)."""
    rt = args.get("runtime") or "pytorch"
    dtype = DTYPES.get(str(args.get("dtype")), args.get("dtype"))
    tail = f":{args.get('timesteps')}" if rt == "nanovllm" else f":{dtype}:{args.get('optimize')}"
    return f"{rt}:{args.get('model')}{tail}"


def _with_threads(ctx, model: str, spec: dict) -> dict:
    """CPU runs of a catalog model use its default torch thread count (tiny configs: 1)."""
    from .. import models

    ms = models.get(model)
    threads = ms.defaults.get("threads") if ms else None
    if threads and ctx.device == "cpu":
        spec["threads"] = int(threads)
    return spec


def _voxcpm(ctx, family: str, spec: dict, method: str, **kwargs) -> tuple[dict, dict]:
    eng = ctx.engine(family, spec)
    info = dict(eng.info)
    if spec.get("optimize") and not info.get("compiled"):
        raise Unmeasured("optimize=on was asked for, but VoxCPM did not compile (torch.compile needs CUDA and "
                         "triton; see the engine log for 'torch.compile disabled')")
    return ctx.call(family, spec, method, **kwargs), info


def _engine_info(info: dict) -> dict:
    keep = ("engine", "runtime", "model", "dummy", "weights", "device", "dtype", "param_dtypes", "optimize", "compiled",
            "params", "weight_bytes", "sample_rate", "torch_threads", "torchaudio", "versions", "cuda_device",
            "text_tokens", "timesteps", "checkpoint_written")
    return {k: info[k] for k in keep if k in info}


@probe("tts.synthesis", engine="voxcpm", engine_key=_tts_key,
       choices={"dtype": tuple(DTYPES), "runtime": tuple(RUNTIMES)}, outputs={
    "slope": "s/s", "intercept_s": "s", "r2": "", "step_s": "s", "rtf": "", "audio_s_per_patch": "s",
    "patches_per_audio_s": "1/s", "peak_mem_bytes": "B", "points": "", "max_rel_residual": "",
    "slope_best": "s/s", "intercept_best_s": "s", "r2_best": "", "max_spread": "",
}, exact=("audio_s_per_patch", "patches_per_audio_s", "points"))
def synthesis(ctx, model: str = "voxcpm2-tiny", patches: str = "4,8,12,16,20", timesteps: int = 10,
              reps: int = 3, dtype: str = "bfloat16", optimize: bool = False, runtime: str = "pytorch"):
    """Whole-utterance synthesis time at fixed patch counts; time = slope x audio seconds + intercept.

    Each length is generated once untimed, then ``reps`` passes time every length (interleaved).
    The fit (slope, intercept, r2) is over the per-length medians; ``rtf`` is the median time /
    audio at the longest length; ``step_s`` the slope per patch. ``*_best`` fit the fastest run at
    each length instead (a lower envelope, for comparison); ``max_spread`` is the largest
    (max - min) / median of the runs at any one length, a measure of how steady the host was
    (NaN with ``reps`` 1, where the session's rounds give the spread).
    """
    lengths = sorted(set(_ints(patches, "patches")))
    if len(lengths) < 2:
        raise Unmeasured("tts.synthesis needs at least two lengths")
    family, spec = voxcpm_spec(ctx, model, dtype, optimize, runtime, timesteps)
    ctx.progress(f"tts.synthesis: {model} at {lengths} patches, {timesteps} diffusion steps, {reps} rounds")
    r, info = _voxcpm(ctx, family, spec, "synthesis", patches=lengths, timesteps=int(timesteps), reps=int(reps))
    sr = r["sample_rate"]
    audio = [s / sr for s in r["samples"]]
    per_patch = [a / n for a, n in zip(audio, r["patches"])]
    if max(per_patch) - min(per_patch) > 1e-9:
        raise Unmeasured(f"measurement invalid: audio per patch differs between lengths ({per_patch})")
    med = [statistics.median(ts) for ts in r["times"]]
    fit = linfit(audio, med)
    pred = [fit["slope"] * a + fit["intercept"] for a in audio]
    max_res = max(abs(m - p) / p for m, p in zip(med, pred)) if min(pred) > 0 else float("nan")
    best = linfit(audio, [min(ts) for ts in r["times"]])
    # one run per length (reps 1: the rounds are the samples) has no run-to-run spread to report
    spread = (max((max(ts) - min(ts)) / statistics.median(ts) for ts in r["times"])
              if min(len(ts) for ts in r["times"]) >= 2 else float("nan"))
    rounds = min(len(ts) for ts in r["times"])
    per_round = [linfit(audio, [ts[i] for ts in r["times"]]) for i in range(rounds)]
    aps = per_patch[0]
    rtf = med[-1] / audio[-1]
    values = {
        "slope": fit["slope"], "intercept_s": fit["intercept"], "r2": fit["r2"], "step_s": fit["slope"] * aps,
        "rtf": rtf, "audio_s_per_patch": aps, "patches_per_audio_s": 1.0 / aps,
        "peak_mem_bytes": float(r["peak_mem_bytes"]), "points": float(len(lengths)), "max_rel_residual": max_res,
        "slope_best": best["slope"], "intercept_best_s": best["intercept"], "r2_best": best["r2"],
        "max_spread": spread,
    }
    samples = {
        "slope": [f["slope"] for f in per_round],
        "step_s": [f["slope"] * aps for f in per_round],
        "rtf": [ts[-1] / audio[-1] for ts in zip(*r["times"])][:rounds],
    }
    return Measurement(values, samples, info={
        **_synthesis_info(family, info, r, "warm-up at each length; rounds interleave the lengths; fit of the "
                                           "per-length medians (scipy.stats.linregress)"),
        "audio_s": audio, "median_s": med, "fit": fit, "fit_best": best,
    })


def _synthesis_info(family: str, info: dict, r: dict, how: str) -> dict:
    """What tts.synthesis and tts.rtf keep of an engine's ``synthesis`` call, and how it was timed."""
    return {
        **_engine_info(info), "patches": r["patches"], "times_s": r["times"], "timesteps": r["timesteps"],
        "peak_mem_kind": r.get("peak_mem_kind"), "peak_reserved_bytes": r.get("peak_reserved_bytes"),
        "passes": r.get("passes"),  # Nano-vLLM: GPU clocks and engine CPU seconds before and after each pass
        "method": ("whole-utterance VoxCPM.generate with min_len = max_len = patches" if family == "voxcpm" else
                   "Nano-vLLM generate with max_generate_length = patches (random weights: a stop head that "
                   "never fires), time to the last chunk") + "; " + how,
    }


@probe("tts.rtf", engine="voxcpm", engine_key=_tts_key,
       choices={"dtype": tuple(DTYPES), "runtime": tuple(RUNTIMES)},
       outputs={"rtf": "", "time_s": "s", "audio_s": "s", "peak_mem_bytes": "B"}, exact=("audio_s",))
def rtf(ctx, model: str = "voxcpm2-tiny", patches: int = 24, timesteps: int = 10, reps: int = 3,
        dtype: str = "bfloat16", optimize: bool = False, runtime: str = "pytorch"):
    """Real-time factor of whole-utterance synthesis at one length: median time / audio seconds.

    The same timed call as ``tts.synthesis`` (warm-up, then ``reps`` runs), at one length only: a
    real-time factor needs no fit, and the five shorter lengths of the fit cost about 70% of a
    synthesis round (full-size VoxCPM2 in float32 on an H200: 90 s a round).
    """
    n = _ints(patches, "patches")
    if len(n) != 1 or n[0] < 1:
        raise Unmeasured(f"tts.rtf takes one length (a positive patch count), got {patches!r}")
    family, spec = voxcpm_spec(ctx, model, dtype, optimize, runtime, timesteps)
    ctx.progress(f"tts.rtf: {model} at {n[0]} patches, {timesteps} diffusion steps, {reps} runs")
    r, info = _voxcpm(ctx, family, spec, "synthesis", patches=n, timesteps=int(timesteps), reps=int(reps))
    audio = r["samples"][0] / r["sample_rate"]
    if audio <= 0:
        raise Unmeasured("measurement invalid: the synthesis returned no audio")
    times = r["times"][0]
    med = statistics.median(times)
    return Measurement({"rtf": med / audio, "time_s": med, "audio_s": audio,
                        "peak_mem_bytes": float(r["peak_mem_bytes"])},
                       {"rtf": [t / audio for t in times], "time_s": list(times)}, info={
        **_synthesis_info(family, info, r, "warm-up at the length, then the timed runs back to back"),
        "audio_s": [audio],
    })


@probe("tts.steps", engine="voxcpm", engine_key=_tts_key,
       choices={"dtype": tuple(DTYPES), "runtime": tuple(RUNTIMES)}, outputs={
    "per_step_s": "s", "fixed_s": "s", "fixed_share": "", "r2": "", "patch_s_ref": "s", "speedup": "",
    "proportional_speedup": "", "speedup_vs_proportional": "",
})
def steps(ctx, model: str = "voxcpm2-tiny", timesteps: str = "2,5,10,20", patches: str = "4,16",
          reps: int = 3, ref_timesteps: int = 10, dtype: str = "bfloat16", optimize: bool = False,
          runtime: str = "pytorch"):
    """Cost of one patch at several diffusion step counts; fit patch_s = fixed_s + per_step_s x steps.

    The cost of one patch is the slope between two lengths (``patches``: short,long) of whole-utterance
    synthesis, so per-utterance costs cancel. ``fixed_share`` is fixed_s / patch time at
    ``ref_timesteps``: 0 when a patch costs exactly in proportion to the step count.
    ``speedup`` is patch time at the most steps / at the fewest; ``proportional_speedup`` the step ratio.
    """
    ts = sorted(set(_ints(timesteps, "timesteps")))
    lengths = sorted(set(_ints(patches, "patches")))
    if len(ts) < 2 or len(lengths) != 2:
        raise Unmeasured("tts.steps needs at least two step counts and exactly two lengths (short,long)")
    ref = int(ref_timesteps) if int(ref_timesteps) in ts else ts[-1]
    if runtime == "nanovllm":
        raise Unmeasured("runtime nanovllm: Nano-vLLM fixes the diffusion step count when its server starts, so "
                         "a step sweep would start one server per count (not offered)")
    family, spec = voxcpm_spec(ctx, model, dtype, optimize, runtime)
    ctx.progress(f"tts.steps: {model} at {ts} diffusion steps, {lengths} patches, {reps} rounds")
    r, info = _voxcpm(ctx, family, spec, "steps", timesteps=ts, patches=lengths, reps=int(reps))
    dn = lengths[1] - lengths[0]
    # r["times"][i][j]: runs at timesteps ts[i], length lengths[j]
    patch_med = [(statistics.median(tt[1]) - statistics.median(tt[0])) / dn for tt in r["times"]]
    fit = linfit([float(t) for t in ts], patch_med)
    i_ref = ts.index(ref)
    rounds = min(len(x) for tt in r["times"] for x in tt)
    per_round = []
    for k in range(rounds):
        pp = [(tt[1][k] - tt[0][k]) / dn for tt in r["times"]]
        f = linfit([float(t) for t in ts], pp)
        f["patch_ref"] = pp[i_ref]
        per_round.append(f)
    speedup = patch_med[-1] / patch_med[0]
    prop = ts[-1] / ts[0]
    values = {
        "per_step_s": fit["slope"], "fixed_s": fit["intercept"],
        "fixed_share": fit["intercept"] / patch_med[i_ref], "r2": fit["r2"], "patch_s_ref": patch_med[i_ref],
        "speedup": speedup, "proportional_speedup": prop, "speedup_vs_proportional": speedup / prop,
    }
    samples = {
        "per_step_s": [f["slope"] for f in per_round],
        "patch_s_ref": [f["patch_ref"] for f in per_round],
    }
    return Measurement(values, samples, info={
        **_engine_info(info), "timesteps": ts, "patches": lengths, "ref_timesteps": ref,
        "patch_s": dict(zip(map(str, ts), patch_med)), "times_s": r["times"], "fit": fit,
        # per-round fixed shares (not samples: a share near 0 has no meaningful relative spread)
        "fixed_share_per_round": [f["intercept"] / f["patch_ref"] for f in per_round],
        "diffusion_calls_per_patch": {str(t): max(t - 1, 0) for t in ts},
        "method": "per-patch cost = (median time at the long length - at the short) / patch difference, "
                  "whole-utterance VoxCPM.generate, warm-up at every (length, steps); linear fit over steps",
    })


def playback(arrivals: list[float], durations: list[float]) -> dict:
    """Play chunks as they arrive: playback starts with the first chunk and stalls when a chunk is late.

    A later chunk is on time when it arrives before the audio already delivered has finished playing.
    Returns per-chunk margins (s, negative = late), the late count and the total stall.
    """
    play_end = arrivals[0] + durations[0]
    margins, stall = [], 0.0
    for t, d in zip(arrivals[1:], durations[1:]):
        margin = play_end - t
        margins.append(margin)
        if margin < 0:
            stall += -margin
            play_end = t
        play_end += d
    late = sum(1 for m in margins if m < 0)
    return {"margins": margins, "late": late, "stall_s": stall,
            "on_time_fraction": (1 - late / len(margins)) if margins else 1.0}


@probe("tts.streaming", engine="voxcpm", engine_key=_tts_key,
       choices={"dtype": tuple(DTYPES), "runtime": tuple(RUNTIMES)}, outputs={
    "first_chunk_s": "s", "whole_s": "s", "first_share": "", "audio_s": "s", "chunk_s": "s", "chunk_audio_s": "s",
    "chunk_rtf": "", "rtf": "", "late_chunks": "", "on_time_fraction": "", "min_margin_s": "s", "stall_s": "s",
    "no_gaps": "",
})
def streaming(ctx, model: str = "voxcpm2-tiny", patches: int = 20, timesteps: int = 10, reps: int = 3,
              dtype: str = "bfloat16", optimize: bool = False, runtime: str = "pytorch"):
    """Streaming synthesis (VoxCPM.generate_streaming, one chunk per patch): time to the first chunk,
    and per chunk whether it arrives before the audio delivered so far has finished playing.

    ``late_chunks`` is the most late chunks of any run, ``on_time_fraction`` the worst run's share of
    on-time chunks, ``chunk_rtf`` the median time between chunks / audio per chunk.
    """
    n = int(patches)
    if n < 2:
        raise Unmeasured("tts.streaming needs at least two patches")
    family, spec = voxcpm_spec(ctx, model, dtype, optimize, runtime, timesteps)
    ctx.progress(f"tts.streaming: {model}, {n} patches, {timesteps} diffusion steps, {reps} runs")
    r, info = _voxcpm(ctx, family, spec, "streaming", patches=n, timesteps=int(timesteps), reps=int(reps))
    sr = r["sample_rate"]
    per_run = []
    for run in r["runs"]:
        arr = run["arrivals"]
        dur = [s / sr for s in run["sizes"]]
        if len(arr) != n:
            raise Unmeasured(f"measurement invalid: asked for {n} patches, the stream gave {len(arr)} chunks")
        pb = playback(arr, dur)
        gaps = [b - a for a, b in zip(arr, arr[1:])]
        per_run.append({"first": arr[0], "whole": arr[-1], "audio": sum(dur), "chunk_s": statistics.median(gaps),
                        "chunk_audio": statistics.median(dur), **pb})
    audio = statistics.median(p["audio"] for p in per_run)
    first = statistics.median(p["first"] for p in per_run)
    whole = statistics.median(p["whole"] for p in per_run)
    chunk_s = statistics.median(p["chunk_s"] for p in per_run)
    chunk_audio = statistics.median(p["chunk_audio"] for p in per_run)
    late = max(p["late"] for p in per_run)
    values = {
        "first_chunk_s": first, "whole_s": whole, "first_share": first / whole, "audio_s": audio,
        "chunk_s": chunk_s, "chunk_audio_s": chunk_audio, "chunk_rtf": chunk_s / chunk_audio, "rtf": whole / audio,
        "late_chunks": float(late), "on_time_fraction": min(p["on_time_fraction"] for p in per_run),
        "min_margin_s": min(min(p["margins"]) for p in per_run), "stall_s": max(p["stall_s"] for p in per_run),
        "no_gaps": 1.0 if late == 0 else 0.0,
    }
    samples = {
        "first_chunk_s": [p["first"] for p in per_run],
        "whole_s": [p["whole"] for p in per_run],
    }
    return Measurement(values, samples, info={
        **_engine_info(info), "patches": n, "timesteps": r["timesteps"],
        "arrivals_s": [run["arrivals"] for run in r["runs"]],
        "chunk_samples": [run["sizes"] for run in r["runs"]],
        "margins_s": [p["margins"] for p in per_run],
        "chunk_rtf_per_run": [p["chunk_s"] / p["chunk_audio"] for p in per_run],
        "late_per_run": [p["late"] for p in per_run],
        "on_time": [[m >= 0 for m in p["margins"]] for p in per_run],
        "method": ("VoxCPM.generate_streaming" if family == "voxcpm" else "Nano-vLLM generate (one chunk per patch)")
                  + ", warm-up run at the same length; playback starts when the first "
                  "chunk arrives and stalls while a chunk is late",
    })


@probe("tts.magpie", engine="magpie", outputs={
    "steps_per_frame": "", "frames_per_step": "", "step_s": "s", "frame_s": "s", "rtf": "", "audio_s": "s",
    "frame_audio_s": "s", "codec_s": "s", "lt_calls_per_step": "", "params": "",
}, exact=("steps_per_frame", "frames_per_step", "audio_s", "frame_audio_s", "lt_calls_per_step", "params"))
def magpie(ctx, model: str = "magpie-tts-tiny", frame_stacking: int = 2, frames: int = 40, reps: int = 3,
           use_cfg: bool = True):
    """Magpie TTS (NeMo MagpieTTSModel.infer_batch) at a fixed number of codec frames.

    ``steps_per_frame`` counts base-decoder forward calls (a forward hook) per codec frame produced;
    ``step_s`` is the generation time without the codec decode per decoder step; ``rtf`` the whole
    time / audio seconds.
    """
    m = ctx.model(model)
    if m["family"] not in (None, "tts"):
        raise Unmeasured(f"model {model!r} is a {m['family']} model, not a TTS model")
    fs = int(frame_stacking)
    n = int(frames)
    if n < 4 or n % fs:
        raise Unmeasured(f"frames must be at least 4 and a multiple of frame_stacking ({fs}); got {n}")
    spec = _with_threads(ctx, model, {"model": model, "config": m["config"], "weights": m["weights"],
                                      "device": ctx.device, "frame_stacking": fs})
    ctx.progress(f"tts.magpie: {model}, frame stacking {fs}, {n} codec frames, {reps} runs")
    r = ctx.call("magpie", spec, "synthesis", frames=n, reps=int(reps), use_cfg=_bool(use_cfg))
    info = dict(ctx.engine("magpie", spec).info)
    runs = r["runs"]
    for run in runs:
        if run["frames"] != n:
            raise Unmeasured(f"measurement invalid: asked for {n} codec frames, the model produced {run['frames']}")
    spf = [run["decoder_calls"] / run["frames"] for run in runs]
    step = [(run["total_s"] - run["codec_s"]) / run["decoder_calls"] for run in runs]
    frame_audio = r["samples_per_frame"] / r["sample_rate"]
    audio = [run["samples"] / r["sample_rate"] for run in runs]
    rtf = [run["total_s"] / a for run, a in zip(runs, audio)]
    med = statistics.median
    values = {
        "steps_per_frame": med(spf), "frames_per_step": 1.0 / med(spf), "step_s": med(step),
        "frame_s": med((run["total_s"] - run["codec_s"]) / run["frames"] for run in runs),
        "rtf": med(rtf), "audio_s": med(audio), "frame_audio_s": frame_audio,
        "codec_s": med(run["codec_s"] for run in runs),
        "lt_calls_per_step": med(run["lt_calls"] / run["decoder_calls"] for run in runs),
        "params": float(info.get("params", float("nan"))),
    }
    keep = ("engine", "model", "class", "dummy", "weights", "device", "frame_stacking", "model_type", "num_codebooks",
            "codebook_size", "sample_rate", "samples_per_frame", "params", "codec_params", "decoder_params",
            "kv_cache", "torch_threads", "versions", "cuda_device", "wandb")
    return Measurement(values, {"step_s": step, "rtf": rtf}, info={
        **{k: info[k] for k in keep if k in info}, "runs": runs, "frames": n, "use_cfg": _bool(use_cfg),
        "method": "MagpieTTSModel.infer_batch (KV cache, local transformer, CFG), max_decoder_steps = "
                  "min_generated_frames = frames; forward hooks count decoder calls; warm-up run first",
    })
