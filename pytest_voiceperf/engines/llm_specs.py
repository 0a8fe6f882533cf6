"""What an ``llm.*`` call asks of an engine (:class:`LLMCall`) and the built-in LLM families' spec
functions, which turn it into the keywords their ``Engine`` is built with. Each built-in family names
its function as its ``spec``, as another package's family does (docs/engines.md): the probes hold no
engine's rules. The same call always gives the same spec (one shared engine instance)."""
from __future__ import annotations

from dataclasses import dataclass

from ..exceptions import Unmeasured


@dataclass(frozen=True)
class LLMCall:
    """An llm.* call, checked by the probe (model known, dtype and quantization among the probes'
    choices, tensor parallel only on a family that declares it and over GPUs this process sees)."""
    model: str
    config: dict | None  # the catalog's architecture (dummy weights are built from it)
    weights: str | None  # a checkpoint (--voiceperf-model NAME=PATH), None for dummy weights
    device: str  # cpu | cuda
    dtype: str
    quantization: str | None
    prefix_cache: bool  # the call repeats one prompt to show a prefix cache's effect
    tp: int  # tensor parallel size
    engine_args: dict  # the operator's options for the family, then the claim's own


def _base(call: LLMCall) -> dict:
    return {"model": call.model, "config": call.config, "weights": call.weights, "device": call.device}


def _no_engine_args(call: LLMCall, family: str) -> None:
    # the operator's options are refused on the command line for these families; these are the claim's
    if call.engine_args:
        raise Unmeasured(f"engine_args are vLLM options; this call runs on {family}")


def vllm(call: LLMCall) -> dict:
    spec = _base(call)
    if call.engine_args:
        # part of the spec: other options are another engine (and another probe call)
        spec["engine_args"] = dict(call.engine_args)
    if call.quantization not in (None, "fp8"):
        raise Unmeasured(f"vLLM runs quantization none or fp8 here, not {call.quantization!r}")
    if call.quantization == "fp8" and call.device != "cuda":
        raise Unmeasured("FP8 weights (vLLM quantization='fp8') need a CUDA GPU; this run is on the CPU")
    # one engine per model and precision: prefix caching is on (vLLM's default) for every claim; an
    # honest prefill uses distinct random prompts and is proven uncached by vLLM's own
    # num_cached_tokens == 0, the cache trap repeats one prompt on the same engine
    spec.update(dtype=call.dtype, quantization=call.quantization, prefix_caching=True)
    if call.tp > 1:
        spec["tensor_parallel_size"] = call.tp
    return spec


def transformers(call: LLMCall) -> dict:
    _no_engine_args(call, "transformers")
    if call.quantization is not None:
        raise Unmeasured(f"the transformers engine runs unquantized weights only, not {call.quantization!r}")
    if call.prefix_cache:
        raise Unmeasured("the transformers engine has no prefix cache")
    return dict(_base(call), dtype=call.dtype)


def llamacpp(call: LLMCall) -> dict:
    _no_engine_args(call, "llamacpp")
    return dict(_base(call), quant=call.quantization or "f16")
