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
        # special ids inside the vocabulary (the test shape has a small one)
        "bos_token_id": 151643 if vocab > 151645 else vocab - 2,
        "eos_token_id": 151645 if vocab > 151645 else vocab - 1,
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
# the 12B-class 16-bit model of llm-fp16-12b-bound (about 30 GB in bf16; fits an 80+ GB GPU)
_add(ModelSpec("qwen3-14b", "llm", _qwen3(5120, 40, 40, 8, 17408, False), "Qwen3-14B"))


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


DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "float8": 1, "fp8": 1}


def qwen3_bytes(cfg: dict, dtype: str = "bfloat16", quantization: str | None = None) -> dict[str, Any]:
    """Weight and KV-cache bytes of a Qwen3 config, from its shapes.

    ``weights``: bytes the loaded model holds, the tied embedding counted once.
    ``decode_read``: bytes one decode step must read: every linear and norm weight, and the
    embedding matrix once as the lm_head (tied) or the lm_head plus one embedding row (untied;
    the input embedding is a row lookup, not a full read).
    FP8 (vLLM ``quantization="fp8"``): linear weights of the layers 1 byte each plus one float32
    scale per linear weight; embeddings, lm_head and norms stay in ``dtype``.
    """
    n = qwen3_param_counts(cfg)
    wb = DTYPE_BYTES[dtype]
    h, L = cfg["hidden_size"], cfg["num_hidden_layers"]
    if quantization in (None, "", "none"):
        linear_b, lin_bpw, scales = n["linear"] * wb, wb, 0
    elif quantization == "fp8":
        linear_b, lin_bpw, scales = n["linear"] * 1, 1, L * 7 * 4  # q, k, v, o, gate, up, down
    else:
        raise ValueError(f"unknown quantization {quantization!r}")
    other = (n["total"] - n["linear"]) * wb  # embedding, lm_head, norms
    weights = linear_b + other + scales
    unread = 0 if cfg["tie_word_embeddings"] else (n["embedding"] - h) * wb
    kv = 2 * L * cfg["num_key_value_heads"] * cfg["head_dim"] * wb
    return {"weights": weights, "decode_read": weights - unread, "kv_per_token": kv,
            "bytes_per_linear_weight": lin_bpw, "params": n,
            "tied_embedding": "counted once; decode reads it once per token as the lm_head matmul"
            if cfg["tie_word_embeddings"] else
            "untied: lm_head read in full per token, input embedding only one row per token"}


def get(name: str) -> ModelSpec | None:
    return CATALOG.get(name)


WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".nemo")


def from_path(path: str) -> tuple[dict, str | None]:
    """A model named by a Hugging Face-style folder (or its config.json): (config, weights folder or
    None). A folder holding only its config gives dummy weights of that architecture; a folder with
    weight files gives them. Raises ValueError saying what is missing."""
    import json
    from pathlib import Path

    p = Path(path).expanduser()
    folder = p.parent if p.name == "config.json" else p
    cfg_path = folder / "config.json"
    if not cfg_path.is_file():
        raise ValueError(f"{path}: no config.json there (a model folder needs at least its config.json)")
    try:
        config = json.loads(cfg_path.read_text())
    except ValueError as exc:
        raise ValueError(f"{cfg_path}: not JSON ({exc})") from None
    if not isinstance(config, dict) or not config.get("model_type"):
        raise ValueError(f"{cfg_path}: no model_type (write the architecture's model_type, e.g. \"llama\")")
    has_weights = any(f.suffix in WEIGHT_SUFFIXES for f in folder.iterdir() if f.is_file())
    return config, (str(folder) if has_weights else None)


def family_of(config: dict) -> str | None:
    archs = config.get("architectures") or []
    if any(str(a).endswith(("ForCausalLM", "ForConditionalGeneration")) for a in archs):
        return "llm"
    return None


def names(family: str | None = None) -> list[str]:
    return sorted(n for n, s in CATALOG.items() if family is None or s.family == family)


# TTS: VoxCPM2 (voxcpm 2.0.3). The full-size config is the public openbmb/VoxCPM2 config.json
# (2,384,218,498 parameters); the tiny one keeps its structure (patch of 4 latent frames of 40 ms,
# 64-dim latents, 48 kHz output through the same VAE strides) at test size.
_VOXCPM2_ROPE = [
    0.9977997200264581, 1.014658295992452, 1.0349680404997148, 1.059429246056193, 1.0888815016813513,
    1.1243301355211495, 1.166977103606075, 1.2182568066927284, 1.2798772354275727, 1.3538666751582975,
    1.4426259039919596, 1.5489853358570191, 1.6762658237220625, 1.8283407612492941, 2.0096956085876183,
    2.225478927469756, 2.481536379650452, 2.784415934557119, 3.1413289096347365, 3.560047844772632,
    4.048719380066383, 4.615569542115128, 5.2684819496549835, 6.014438591970396, 6.858830049237097,
    7.804668263503327, 8.851768731513417, 9.99600492938444, 11.228766118181639, 12.536757560834843,
    13.902257701387796, 15.303885189125953, 16.717837610115794, 18.119465097853947, 19.484965238406907,
    20.792956681060105, 22.02571786985731, 23.16995406772833, 24.217054535738416, 25.16289275000465,
    26.007284207271347, 26.753240849586767, 27.40615325712662, 27.973003419175363, 28.461674954469114,
    28.880393889607006, 29.237306864684626, 29.540186419591297, 29.79624387177199, 30.01202719065413,
    30.193382037992453, 30.34545697551969, 30.47273746338473, 30.579096895249787, 30.66785612408345,
    30.741845563814174, 30.80346599254902, 30.85474569563567, 30.897392663720595, 30.932841297560394,
    30.962293553185553, 30.986754758742034, 31.007064503249293, 31.02392307921529,
]


def _voxcpm2(hidden, layers, heads, kv_heads, kv_channels, inter, vocab, res_layers, local_dim, local_ffn,
             local_heads, local_layers, vae_enc, vae_dec, rope=None, max_length=8192):
    # the local encoder and the diffusion transformer reuse the LM's RoPE table: same kv_channels
    rope = rope or [1.0 + i / (kv_channels // 2) for i in range(kv_channels // 2)]
    return {
        "architecture": "voxcpm2",
        "lm_config": {
            "bos_token_id": 1, "eos_token_id": 2, "hidden_size": hidden, "intermediate_size": inter,
            "max_position_embeddings": 32768, "num_attention_heads": heads, "num_hidden_layers": layers,
            "num_key_value_heads": kv_heads, "rms_norm_eps": 1e-05, "rope_theta": 10000, "kv_channels": kv_channels,
            "rope_scaling": {"type": "longrope", "long_factor": list(rope), "short_factor": list(rope),
                             "original_max_position_embeddings": 32768},
            "vocab_size": vocab, "use_mup": False, "scale_emb": 12, "dim_model_base": 256, "scale_depth": 1.4,
        },
        "patch_size": 4,
        "feat_dim": 64,
        "scalar_quantization_latent_dim": 512,
        "scalar_quantization_scale": 9,
        "residual_lm_num_layers": res_layers,
        "residual_lm_no_rope": True,
        "encoder_config": {"hidden_dim": local_dim, "ffn_dim": local_ffn, "num_heads": local_heads,
                           "num_layers": local_layers, "kv_channels": kv_channels},
        "dit_config": {"hidden_dim": local_dim, "ffn_dim": local_ffn, "num_heads": local_heads,
                       "num_layers": local_layers, "kv_channels": kv_channels, "mean_mode": False,
                       "cfm_config": {"sigma_min": 1e-06, "solver": "euler", "t_scheduler": "log-norm",
                                      "inference_cfg_rate": 2.0}},
        "audio_vae_config": {"encoder_dim": vae_enc, "encoder_rates": [2, 5, 8, 8], "latent_dim": 64,
                             "decoder_dim": vae_dec, "decoder_rates": [8, 6, 5, 2, 2, 2],
                             "sr_bin_boundaries": [20000, 30000, 40000], "sample_rate": 16000,
                             "out_sample_rate": 48000},
        "max_length": max_length,
        "device": "cuda",
        "dtype": "bfloat16",
    }


_add(ModelSpec("voxcpm2", "tts",
               _voxcpm2(2048, 28, 16, 2, 128, 6144, 73448, 8, 1024, 4096, 16, 12, 128, 2048, rope=_VOXCPM2_ROPE),
               "VoxCPM2 (openbmb/VoxCPM2 config; 2.38B parameters; 160 ms of audio per patch)",
               defaults={"engine": "voxcpm", "audio_s_per_patch": 0.16}))
_add(ModelSpec("voxcpm2-tiny", "tts",
               _voxcpm2(256, 4, 4, 2, 64, 768, 512, 2, 128, 512, 2, 2, 16, 128, max_length=1024),
               "VoxCPM2 architecture at test size (same patch, latent and VAE strides; a few M parameters)",
               # one torch thread: test-size kernels gain nothing from a second one (measured) and a
               # shared 2-core runner then keeps a core for the rest
               defaults={"engine": "voxcpm", "audio_s_per_patch": 0.16, "threads": 1}))


# ASR: cache-aware streaming FastConformer-RNNT (NeMo), built by engines/nemo_engine.py from
# assets/fastconformer_rnnt_cache_aware.yaml with these shapes. Nemotron-3.5-ASR-Streaming-0.6B:
# 24 layers, d_model 1024, 8 heads, conv kernel 9, 128 mel features, 8x subsampling, 2-layer LSTM
# prediction net of 640, joint 640, multi-lookahead [[56,0],[56,1],[56,3],[56,6],[56,13]]
# (617,251,357 parameters with a 28-character vocabulary; the real tokenizer differs).
_ASR_LOOKAHEADS = [[56, 0], [56, 1], [56, 3], [56, 6], [56, 13]]


def _fastconformer(layers, d_model, heads, conv_channels, pred_hidden, pred_layers, joint_hidden, feat_in=128):
    return {"n_layers": layers, "d_model": d_model, "n_heads": heads, "conv_kernel_size": 9, "feat_in": feat_in,
            "subsampling": "dw_striding", "subsampling_factor": 8, "subsampling_conv_channels": conv_channels,
            "ff_expansion_factor": 4, "att_context_style": "chunked_limited",
            "att_context_size": [list(a) for a in _ASR_LOOKAHEADS],
            "pred_hidden": pred_hidden, "pred_rnn_layers": pred_layers, "joint_hidden": joint_hidden}


_add(ModelSpec("nemotron-asr-0.6b", "asr", _fastconformer(24, 1024, 8, 256, 640, 2, 640),
               "Nemotron-3.5-ASR-Streaming-0.6B shape (cache-aware FastConformer-RNNT, 617M parameters)",
               defaults={"engine": "nemo"}))
_add(ModelSpec("fastconformer-tiny", "asr", _fastconformer(2, 64, 2, 32, 64, 1, 64),
               "cache-aware FastConformer-RNNT at test size (same look-aheads and 8x subsampling; 0.3M parameters)",
               defaults={"engine": "nemo"}))


# TTS: Magpie TTS (NeMo MagpieTTSModel, decoder_ce). Dimensions as observed in the public
# nvidia/magpie_tts_multilingual_357m checkpoint (text encoder 6 x 768, context encoder 2 layers,
# decoder 12 x 768 with one cross-attention head, a 1-layer local transformer of 256) and NeMo's
# low-frame-rate 22.05 kHz codec (1024 samples = 46.4 ms per frame, 8 FSQ codebooks of 2016).
# frame_stacking_factor 2: two codec frames per base-decoder step (the document's claim).
def _magpie(d, enc_layers, ctx_layers, dec_layers, heads, ffn, lt_layers, lt_dim, codec_dec, codec_enc):
    return {
        "embedding_dim": d,
        "encoder": {"n_layers": enc_layers, "d_model": d, "d_ffn": ffn, "heads": heads, "kernel_size": 3},
        "context_encoder": {"n_layers": ctx_layers, "d_model": d, "d_ffn": ffn, "heads": heads, "kernel_size": 3},
        "decoder": {"n_layers": dec_layers, "d_model": d, "d_ffn": ffn, "heads": heads, "kernel_size": 1},
        "local_transformer": {"n_layers": lt_layers, "heads": 1, "hidden_dim": lt_dim},
        "frame_stacking_factor": 2,
        "context_frames": 110,
        "speakers": 5,
        "codec": {"sample_rate": 22050, "samples_per_frame": 1024, "down_sample_rates": [2, 2, 4, 8, 8],
                  "up_sample_rates": [8, 8, 4, 2, 2], "latent_dim": 32, "encoder_channels": codec_enc,
                  "decoder_channels": codec_dec, "codebooks": 8, "levels": [8, 7, 6, 6]},
    }


_add(ModelSpec("magpie-tts-multilingual", "tts", _magpie(768, 6, 2, 12, 12, 3072, 1, 256, 1024, 48),
               "Magpie TTS Multilingual shape (NeMo decoder_ce; about 0.3B parameters without the codec)",
               defaults={"engine": "magpie"}))
_add(ModelSpec("magpie-tts-tiny", "tts", _magpie(128, 2, 1, 2, 4, 512, 1, 64, 64, 16),
               "Magpie TTS architecture at test size (same codec frame rate and codebooks)",
               defaults={"engine": "magpie", "threads": 1}))
