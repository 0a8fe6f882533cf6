"""Which engine, and which engine spec, an ``llm.*`` call runs on: a claim's arguments checked
(model, engine, dtype, quantization, tensor parallel, the options a claim may set), the family
picked (``engine: auto`` from the families' declared formats and ranks), and the spec built by the
family's own spec function. The same arguments always give the same spec: one shared engine."""
from __future__ import annotations

import dataclasses
import importlib
import json
import os

from ..engines import families, installed, of_kind
from ..engines.llm_specs import LLMCall
from . import Unmeasured


def engines() -> tuple[str, ...]:
    """What a claim may name as an llm.* call's engine: auto, then every family of kind "llm" (the
    built-ins and those other packages register, see docs/engines.md)."""
    return ("auto",) + tuple(of_kind("llm"))


def quants() -> tuple[str, ...]:
    """What a claim may name as a call's quantization: none, fp8, and the weight formats the LLM
    families declare as theirs (llama.cpp's GGUF q4_0, q8_0, f16)."""
    fams = families()
    return ("none", "fp8") + tuple(dict.fromkeys(q for n in of_kind("llm") for q in fams[n].formats))


DTYPES = ("bfloat16", "float16", "float32")
QUANTS = quants()


# -- arguments and engine specs ---------------------------------------------------------------
def family_for(engine: str, quant: str | None = None, preferred: str | None = None) -> str:
    """The family an llm.* call runs on. ``auto``: the family whose own weight format the call asks
    for (Family.formats: llama.cpp's GGUF), else the one the operator named (--voiceperf-llm-engine),
    else the highest ``Family.auto_rank`` installed here (in its own interpreter too, --voiceperf-python:
    vLLM, then transformers), else the lowest ranked (its "not installed" is the reason given)."""
    if engine == "auto":
        fams = [families()[n] for n in of_kind("llm")]
        for f in fams:
            if quant in f.formats:
                return f.name
        if preferred:
            return preferred
        ranked = sorted((f for f in fams if f.auto_rank > 0), key=lambda f: -f.auto_rank)
        if not ranked:
            raise Unmeasured("engine auto: no LLM family ranks for it (Family.auto_rank); name the engine")
        return next((f.name for f in ranked if installed(f.name)), ranked[-1].name)
    if engine not in engines():
        raise Unmeasured(f"engine {engine!r} is not one of {', '.join(engines())}")
    return engine


def as_int(v, what: str) -> int:
    try:
        return int(float(v))
    except (TypeError, ValueError):
        raise Unmeasured(f"{what} must be a number, got {v!r}") from None


def quant_of(q) -> str | None:
    q = "none" if q in (None, "") else str(q)
    if q not in QUANTS:
        raise Unmeasured(f"quantization {q!r} is not one of {', '.join(QUANTS)}")
    return None if q == "none" else q


# engine options a claim may set for its own calls (claim files come from pull requests: performance
# settings only; the operator's ini and command line may set any vLLM argument)
CLAIM_ENGINE_ARGS = ("enforce_eager", "max_num_seqs", "max_num_batched_tokens", "kv_cache_dtype", "block_size",
                     "gpu_memory_utilization", "enable_chunked_prefill", "async_scheduling")


def claim_engine_args(text) -> dict:
    """A call's ``engine_args`` ("enforce_eager=true,max_num_seqs=256") as a dict; values read as JSON."""
    out: dict = {}
    for item in [x.strip() for x in str(text or "").split(",") if x.strip()]:
        key, eq, val = item.partition("=")
        key = key.strip()
        if not eq or key not in CLAIM_ENGINE_ARGS:
            raise Unmeasured(f"engine_args {item!r}: a claim may set {', '.join(CLAIM_ENGINE_ARGS)} as KEY=VALUE "
                             "(other engine options: ini voiceperf_engine_args or --voiceperf-engine-arg)")
        try:
            v = json.loads(val.strip())
        except ValueError:
            v = val.strip()
        if not isinstance(v, (bool, int, float, str)):
            raise Unmeasured(f"engine_args {item!r}: the value must be a number, true/false or a word")
        out[key] = v
    return out


def call_spec(ctx, model: str, engine: str, dtype: str, quantization, cache: bool = False,
          tp: int = 1, engine_args: str = "") -> tuple[str, dict, dict]:
    """(family, engine spec, model entry): the call checked here, the spec built by the family's own
    spec function (engines/llm_specs.py for the built-ins). The same arguments always give the same
    spec (one shared engine)."""
    m = ctx.model(model)
    if m["family"] not in (None, "llm"):
        raise Unmeasured(f"model {model!r} is a {m['family']} model, not an LLM")
    q = quant_of(quantization)
    fam = family_for(engine, q, getattr(ctx, "llm_engine", None))
    family = families()[fam]
    if tp > 1 and not family.tensor_parallel:
        raise Unmeasured(f"tensor parallel (tp {tp}) runs on {able('tensor_parallel')}, not {fam}")
    if dtype not in DTYPES:
        raise Unmeasured(f"dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    if family.torch_half_on_cpu:
        _emulated_half_check(ctx, m, dtype)
    # the operator's engine options, then the call's own: part of the spec, so other options are
    # another engine (and another probe call: engine_args is an argument)
    own = claim_engine_args(engine_args)
    if tp > 1:
        tp = _tp_check(ctx, tp)
    call = LLMCall(model, m["config"], m["weights"], ctx.device, dtype, q, bool(cache), tp,
                   {**ctx.engine_args(fam), **own})
    return fam, family_spec(fam, call), m


def able(capability: str) -> str:
    """The LLM families that declare ``capability`` (a Family flag), for a refusal's words."""
    return " or ".join(n for n in of_kind("llm") if getattr(families()[n], capability)) or "no engine here"


def family_spec(fam: str, call: LLMCall) -> dict:
    """The engine spec of a call: the family's spec function's, or the call's fields as they are when it
    has none."""
    family = families()[fam]
    if family.spec is None:
        spec = {k: v for k, v in dataclasses.asdict(call).items() if v not in (None, {}, False)}
        return spec
    mod, _, name = family.spec.partition(":")
    try:
        fn = getattr(importlib.import_module(mod), name)
    except Exception as exc:  # a broken plugin makes its calls unmeasured, never the session an error
        raise Unmeasured(f"engine {fam}: its spec function {family.spec} could not be loaded: "
                         f"{type(exc).__name__}: {exc}") from None
    spec = fn(call)
    if not isinstance(spec, dict):
        raise Unmeasured(f"engine {fam}: its spec function {family.spec} gave {type(spec).__name__}, not a dict")
    return spec


# An x86 CPU without AVX-512 has no fast half-precision path: on an AVX2-only host (2 cores) vLLM ran
# qwen3-0.6b in bfloat16 at 2.3 tok/s decode and about 5 GFLOP/s batched (float32 GEMM there: tens of
# GFLOP/s), so one 1,024-token prefill took minutes and the CPU default over an hour. Such a case is
# refused when one 1,024-token prefill would exceed EMULATED_LIMIT_FLOP (20 s at that rate).
EMULATED_RATE = 5e9
EMULATED_LIMIT_FLOP = 20 * EMULATED_RATE
NATIVE_HALF = ("avx512f", "avx512_bf16", "amx_bf16")


def _emulated_half_check(ctx, m: dict, dtype: str, isa: list[str] | None = None) -> None:
    """``isa``: the CPU's vector extensions (read from /proc/cpuinfo when not given)."""
    if ctx.device == "cuda" or dtype not in ("bfloat16", "float16") or os.environ.get("VOICEPERF_EMULATED_HALF"):
        return
    if isa is None:
        from ..provenance import cpu_isa

        isa = cpu_isa()
    if isa is None or any(f in isa for f in NATIVE_HALF) or "avx2" not in isa:
        return  # not an x86 host we know (ARM has its own half-precision units), or one with AVX-512
    cfg = m.get("config") or {}
    if cfg.get("model_type") != "qwen3":
        return
    from ..models import qwen3_param_counts

    flop = 2.0 * qwen3_param_counts(cfg)["non_embedding"] * 1024
    if flop > EMULATED_LIMIT_FLOP:
        raise Unmeasured(
            f"{dtype} is emulated on this CPU (vector extensions: {' '.join(isa)}; no AVX-512 or AMX): vLLM computed "
            f"it at about {EMULATED_RATE / 1e9:.0f} GFLOP/s on such a CPU, so one 1,024-token prefill of {m.get('name') or 'this model'} "
            f"({flop / 1e12:.2f} TFLOP) takes about {flop / EMULATED_RATE / 60:.0f} min; run it on a CPU with AVX-512 "
            "or a GPU, or set VOICEPERF_EMULATED_HALF=1 to measure it anyway")


def _tp_check(ctx, tp: int) -> int:
    """Tensor parallel over ``tp`` GPUs: they must all be visible to this pytest process."""
    if ctx.device != "cuda":
        raise Unmeasured(f"tensor parallel over {tp} GPUs needs CUDA; this run is on the CPU")
    import torch

    n = torch.cuda.device_count()
    if n < tp:
        why = (" (--voiceperf-gpus gives each worker one GPU: run tensor-parallel claims without it)"
               if os.environ.get("VOICEPERF_GPU") is not None else "")
        raise Unmeasured(f"tensor parallel over {tp} GPUs: this process sees {n}{why}")
    return tp


def engine_key(args: dict) -> str:
    """Which engine instance a call needs (cases sharing it run together)."""
    model = args.get("model")
    if model is None and args.get("variants"):
        # after every single-engine case ("~" sorts last): in one process the decodes the fit needs are
        # then already measured (memoized), so the fit starts no engine of its own
        first = str(args["variants"]).split(",")[0].split(":")
        first += ["bfloat16", "none"][len(first) - 1:]
        return f"~fit:{first[0]}:{args.get('engine', 'auto')}:{first[1] or 'bfloat16'}:{first[2] or 'none'}"
    tp = args.get("tp", 1)
    try:
        tp = int(float(tp))
    except (TypeError, ValueError):
        pass  # the probe itself reports the bad value
    return (f"{model}:{args.get('engine', 'auto')}:{args.get('dtype', 'bfloat16')}:{args.get('quantization', 'none')}"
            + ("" if tp == 1 else f":tp{tp}") + (f":{args['engine_args']}" if args.get("engine_args") else ""))
