"""The NeMo model a catalog shape describes (config built from the asset) and how ``Engine.streams``
sizes and searches its batches: steps timed per size, doubling then bisection under a time budget."""
from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from pathlib import Path

ASSET = Path(__file__).resolve().parent.parent / "assets" / "fastconformer_rnnt_cache_aware.yaml"
BLANK_BIAS = 40.0  # added to the blank logit of a random joint (see nemo_engine's module doc)


def build_config(shape: dict | None) -> dict:
    """NeMo model config (a plain dict) from the asset and a catalog shape."""
    import yaml

    cfg = yaml.safe_load(ASSET.read_text())
    s = dict(shape or {})
    enc = cfg["encoder"]
    for k in ("n_layers", "d_model", "n_heads", "conv_kernel_size", "subsampling_factor",
              "subsampling_conv_channels", "ff_expansion_factor", "att_context_style", "subsampling"):
        if k in s:
            enc[k] = s[k]
    if "att_context_size" in s:
        enc["att_context_size"] = [list(x) for x in s["att_context_size"]]
    if "feat_in" in s:
        enc["feat_in"] = cfg["preprocessor"]["features"] = s["feat_in"]
    pred = cfg["decoder"]["prednet"]
    pred["pred_hidden"] = s.get("pred_hidden", pred["pred_hidden"])
    pred["pred_rnn_layers"] = s.get("pred_rnn_layers", pred["pred_rnn_layers"])
    cfg["joint"]["jointnet"]["joint_hidden"] = s.get("joint_hidden", cfg["joint"]["jointnet"]["joint_hidden"])
    if "labels" in s:
        cfg["labels"] = list(s["labels"])
    cfg["model_defaults"] = {"enc_hidden": enc["d_model"], "pred_hidden": pred["pred_hidden"],
                             "joint_hidden": cfg["joint"]["jointnet"]["joint_hidden"]}
    for sec in ("train_ds", "validation_ds", "test_ds", "optim", "spec_augment"):
        cfg.pop(sec, None)
    return cfg


STEPS_MIN, STEPS_MAX, STEPS_SECONDS = 8, 16, 4.0


def _steps_to_time(warm_times: list[float], chunk_s: float) -> int:
    """How many steps ``streams`` times at one size: 16 where steps are short (host-bound at small
    sizes, where a median needs many), fewer down to 8 where each step is long enough that 16 would
    take more than ~4 s (a GPU-bound batch at 1.12 s chunks steps ~1 s at 3,500 streams, steadily:
    16 steps there cost ~40 s of a case's ~80). Sized from the warm-up steps; a step over twice the
    chunk (the size misses by far) gets the minimum."""
    t = statistics.median(warm_times) if warm_times else chunk_s
    if t > 2 * chunk_s:
        return STEPS_MIN
    return max(STEPS_MIN, min(STEPS_MAX, math.ceil(STEPS_SECONDS / max(t, 1e-6))))


def largest_fitting(step_time: Callable[[int], float], chunk_s: float, max_streams: int, budget_s: float,
                    t_start: float) -> tuple[int, bool]:
    """The largest batch whose step fits in the chunk: doubling from 1, then bisection to within 1/16,
    until ``budget_s`` after ``t_start`` (then the largest found so far; the second value says so)."""
    lo, hi = 0, None
    b = 1
    budget_hit = False
    while b <= max_streams:
        if step_time(b) <= chunk_s:
            lo = b
            b *= 2
        else:
            hi = b
            break
        if time.perf_counter() - t_start > budget_s:
            budget_hit = True
            break
    if hi is None and lo >= max_streams:
        hi = lo
    if lo == 0:
        best = 0
    else:
        top = hi if hi is not None else lo
        while top - lo > max(1, lo // 16) and time.perf_counter() - t_start < budget_s:
            mid = (lo + top) // 2
            if step_time(mid) <= chunk_s:
                lo = mid
            else:
                top = mid
        best = lo
    return best, budget_hit
