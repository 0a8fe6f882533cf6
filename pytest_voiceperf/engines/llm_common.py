"""Helpers shared by the LLM engines (imported only inside engine workers)."""
from __future__ import annotations

import json
import os
import random
import statistics
import tempfile
import time

from .. import models
from ..exceptions import InvalidMeasurement, Unmeasured
from .caches import cache_dir


def model_dir(spec_model: str, config: dict | None, weights: str | None) -> str:
    """A directory vLLM/transformers can load: real weights, or one holding only config.json."""
    if weights:
        return weights
    if not config:
        raise Unmeasured(f"model {spec_model!r} has no architecture in the catalog and no weights were given")
    # the same folder for the same config every time: vLLM keys its compile cache on the model
    # path, so a fresh temp folder per start compiled again (H200: 76-78 s a start, 29-30 s with
    # a fixed folder); overridable with VOICEPERF_CACHE (default ~/.cache/pytest-voiceperf)
    text = json.dumps(config, sort_keys=True)
    d = cache_dir(spec_model, config)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "config.json")
    try:
        with open(path) as f:
            if f.read() == text:
                return d
    except OSError:
        pass
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".config.", suffix=".json")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)
    return d


def weights_config(config: dict | None, weights: str | None) -> dict | None:
    """The real checkpoint's own config.json when weights are given (bytes follow the loaded model)."""
    if weights and os.path.isfile(os.path.join(weights, "config.json")):
        try:
            with open(os.path.join(weights, "config.json")) as f:
                return json.load(f)
        except (OSError, ValueError):
            pass
    return config


def byte_counts(config: dict | None, dtype: str, quantization: str | None) -> dict:
    """Weight / KV bytes: from the config's shapes for Qwen3 (:func:`models.qwen3_bytes`), from the
    architecture built on the meta device for any other (:func:`meta_bytes`)."""
    if not config:
        return {}
    if config.get("model_type") == "qwen3":
        return models.qwen3_bytes(config, dtype, quantization)
    return meta_bytes(config, dtype, quantization)


def build_from_config(config: dict, device: str, dtype=None):
    """The transformers model of a catalog-style config (``model_type`` and its fields), built with
    random weights on ``device``; on "meta" it holds shapes only (no memory, no init)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = dict(config)
    hf_cfg = AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    with torch.device(device):
        return AutoModelForCausalLM.from_config(hf_cfg, **({} if dtype is None else {"dtype": dtype}))


def meta_bytes(config: dict, dtype: str, quantization: str | None) -> dict:
    """Weight and KV bytes of any transformers architecture, counted on its model built on the meta
    device (no memory): the parameters (a tied embedding once), the linear layers, the input and
    output embeddings. Decode reads every weight once per token, the input embedding only one row
    (untied); FP8 as in :func:`models.qwen3_bytes`. A mixture of experts reads only its active
    experts: the count says so instead of pretending."""
    import torch

    mt = config.get("model_type")
    try:
        m = build_from_config(config, "meta")
    except Exception as exc:
        return {"error": f"the architecture did not build on the meta device: {type(exc).__name__}: {exc}"[:300]}
    total = sum(p.numel() for p in m.parameters())
    emb = m.get_input_embeddings().weight
    out = m.get_output_embeddings()
    tied = out is not None and out.weight is emb
    head = 0 if (out is None or tied) else out.weight.numel()
    linear = sum(mod.weight.numel() for name, mod in m.named_modules()
                 if isinstance(mod, torch.nn.Linear) and mod is not out)
    wb = models.DTYPE_BYTES[dtype]
    layers = int(config.get("num_hidden_layers") or 0)
    if quantization in (None, "", "none"):
        linear_b, lin_bpw, scales = linear * wb, wb, 0
    elif quantization == "fp8":
        n_lin = sum(1 for mod in m.modules() if isinstance(mod, torch.nn.Linear) and mod is not out)
        linear_b, lin_bpw, scales = linear, 1, n_lin * 4
    else:
        raise ValueError(f"unknown quantization {quantization!r}")
    weights = linear_b + (total - linear) * wb + scales
    hidden = int(config.get("hidden_size") or emb.shape[1])
    unread = 0 if tied else (emb.numel() - hidden) * wb
    heads = int(config.get("num_attention_heads") or 1)
    kv_heads = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or hidden // heads)
    moe = any(k in config for k in ("num_experts", "num_local_experts", "n_routed_experts"))
    return {"weights": weights, "decode_read": weights - unread, "kv_per_token": 2 * layers * kv_heads * head_dim * wb,
            "bytes_per_linear_weight": lin_bpw,
            "params": {"total": int(total), "non_embedding": int(total - emb.numel() - head),
                       "embedding": int(emb.numel()), "lm_head": int(head), "linear": int(linear)},
            "source": f"{mt} built on the meta device (transformers)",
            "tied_embedding": "counted once; decode reads it once per token as the lm_head matmul" if tied else
            "untied: lm_head read in full per token, input embedding only one row per token",
            **({"moe": "a mixture of experts reads only its active experts per token: decode_read overcounts"}
               if moe else {})}


def meta_param_count(config: dict) -> dict:
    """Parameters of the transformers model built on the meta device (no memory, no init)."""
    t0 = time.perf_counter()
    try:
        import torch

        m = build_from_config(config, "meta")
        total = sum(p.numel() for p in m.parameters())  # parameters() yields a tied weight once
        linear = sum(mod.weight.numel() for name, mod in m.named_modules()
                     if isinstance(mod, torch.nn.Linear) and not name.endswith("lm_head"))
        return {"total": int(total), "linear": int(linear), "seconds": round(time.perf_counter() - t0, 2)}
    except Exception as exc:  # the check is informative; the config count stands without it
        return {"error": f"{type(exc).__name__}: {exc}"[:300]}


def check_counts(config: dict | None, counts: dict) -> dict:
    if not counts or not config or "params" not in counts or counts.get("source"):
        return {}  # counts from the meta model itself: nothing independent to check them against
    meta = meta_param_count(config)
    p = counts["params"]
    if "total" in meta:
        meta["agrees"] = meta["total"] == p["total"] and meta["linear"] == p["linear"]
    return meta


def random_prompts(n: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    """Distinct random token ids (ids 0..vocab-1, reserved low ids avoided)."""
    rng = random.Random(seed)
    lo = min(1000, vocab // 4)
    return [[rng.randrange(lo, vocab) for _ in range(length)] for _ in range(n)]


def check_count(got: int, want: int, what: str = "generated") -> None:
    if got != want:
        raise InvalidMeasurement(
            f"measurement invalid: the engine {what} {got} tokens where {want} were asked for; "
            "a short count makes tokens/s meaningless")


def med(xs: list[float]) -> float:
    return float(statistics.median(xs)) if xs else float("nan")
