"""The catalog of the documents' models, as architectures.

Without trained weights a model is built with random ("dummy") weights of the real
shape: speed does not depend on weight values. ``--voiceperf-model NAME=PATH_OR_ID``
points a name at real weights; results record which was used.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


def _qwen3(hidden, layers, heads, kv_heads, inter, tied, head_dim=128, vocab=151936):
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "intermediate_size": inter,
        "vocab_size": vocab,
        "tie_word_embeddings": tied,
        "max_position_embeddings": 40960,
        "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-6,
        "hidden_act": "silu",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "torch_dtype": "bfloat16",
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "use_cache": True,
    }


@dataclass(frozen=True)
class ModelSpec:
    name: str
    family: str  # llm | asr | tts
    config: dict[str, Any]
    doc: str = ""
    defaults: dict[str, Any] = field(default_factory=dict)


CATALOG: dict[str, ModelSpec] = {}


def _add(spec: ModelSpec) -> None:
    CATALOG[spec.name] = spec


# LLMs: public Qwen3 dimensions (hidden, layers, heads, kv heads, intermediate, tied)
_add(ModelSpec("qwen3-tiny", "llm", _qwen3(256, 4, 4, 2, 768, True, head_dim=64, vocab=8192),
               "Qwen3 architecture at test size (about 6M parameters)"))
_add(ModelSpec("qwen3-0.6b", "llm", _qwen3(1024, 28, 16, 8, 3072, True), "Qwen3-0.6B"))
_add(ModelSpec("qwen3-1.7b", "llm", _qwen3(2048, 28, 16, 8, 6144, True), "Qwen3-1.7B"))
_add(ModelSpec("qwen3-4b", "llm", _qwen3(2560, 36, 32, 8, 9728, True), "Qwen3-4B(-Instruct-2507)"))
_add(ModelSpec("qwen3-8b", "llm", _qwen3(4096, 36, 32, 8, 12288, False), "Qwen3-8B"))


def qwen3_param_counts(cfg: dict) -> dict[str, int]:
    """Parameter counts from the config's shapes (the tied embedding counted once)."""
    h, L, inter, V = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["intermediate_size"], cfg["vocab_size"]
    hd, nh, nkv = cfg["head_dim"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    attn = h * nh * hd + 2 * h * nkv * hd + nh * hd * h + 2 * hd  # q, k, v, o, q_norm, k_norm
    mlp = 3 * h * inter
    layer = attn + mlp + 2 * h
    body = L * layer + h  # final norm
    emb = V * h
    head = 0 if cfg["tie_word_embeddings"] else V * h
    return {"total": body + emb + head, "non_embedding": body, "embedding": emb, "lm_head": head,
            "linear": L * (attn - 2 * hd + mlp)}


def get(name: str) -> ModelSpec | None:
    return CATALOG.get(name)


def names(family: str | None = None) -> list[str]:
    return sorted(n for n, s in CATALOG.items() if family is None or s.family == family)
