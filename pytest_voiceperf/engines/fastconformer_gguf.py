"""A GGUF of a live NeMo cache-aware FastConformer-RNNT, in the layout parakeet.cpp loads.

parakeet.cpp's own converter restores a ``.nemo`` with a SentencePiece tokenizer; the plugin's
model is built in memory with a character vocabulary, so the file is written here from the model
the NeMo engine times (same weights, blank bias included). Names are NeMo's ``state_dict`` names,
settings are ``parakeet.*`` keys; the loader takes one look-ahead per file, so the model's own
streaming schedule for that look-ahead is written with it.
"""
from __future__ import annotations

import re
from typing import Any

from .worker import import_gguf

# weights parakeet.cpp feeds straight into ggml_mul_mat: the only ones it reads quantized
QUANTIZABLE = [re.compile(p) for p in (
    r"^encoder\.layers\.\d+\.feed_forward[12]\.linear[12]\.weight$",
    r"^encoder\.layers\.\d+\.self_attn\.linear_(q|k|v|out|pos)\.weight$",
    r"^encoder\.pre_encode\.out\.weight$", r"^joint\.enc\.weight$", r"^joint\.pred\.weight$")]
KEEP_PREPROCESSOR = {"preprocessor.featurizer.fb", "preprocessor.featurizer.window"}
QUANTS = ("f32", "f16", "q8_0")


def _ints(v) -> list[int]:
    return [int(x) for x in (v if isinstance(v, (list, tuple)) else [v])]


def _joint_out_index(model) -> int:
    """Index of the joint's output Linear in ``joint_net`` (parakeet.cpp expects ``joint_net.2``:
    ReLU, Dropout, Linear; a model built with dropout 0 has no Dropout module, so it is ``.1``)."""
    import torch

    mods = list(model.joint.joint_net)
    return max(i for i, m in enumerate(mods) if isinstance(m, torch.nn.Linear))


def write(model, path: str, att_context: list[int], quant: str = "q8_0") -> dict[str, Any]:
    """Write ``model`` at look-ahead ``att_context`` ([left, right]) to ``path``; returns what was written."""
    gguf = import_gguf()
    import numpy as np

    if quant not in QUANTS:
        raise ValueError(f"quant {quant!r} is not one of {', '.join(QUANTS)}")
    cfg = model.cfg
    enc_cfg = cfg.encoder
    enc = model.encoder
    feat = model.preprocessor.featurizer
    labels = [str(x) for x in (cfg.get("labels") or getattr(model.decoder, "vocabulary", None) or [])]
    if not labels and hasattr(model, "tokenizer"):
        tok = model.tokenizer
        labels = [tok.ids_to_tokens([i])[0] for i in range(int(tok.vocab_size))]
    if not labels:
        raise ValueError("the model has neither labels nor a tokenizer")
    enc.set_default_att_context_size([int(x) for x in att_context])
    sc = enc.streaming_cfg

    w = gguf.GGUFWriter(path, "parakeet")
    w.add_string("general.name", f"voiceperf {type(model).__name__} att_context {list(att_context)}")
    w.add_string("parakeet.arch", "rnnt")
    u32 = {"feat_in": enc_cfg.feat_in, "d_model": enc_cfg.d_model, "n_layers": enc_cfg.n_layers,
           "n_heads": enc_cfg.n_heads, "ff_dim": int(enc_cfg.d_model) * int(enc_cfg.get("ff_expansion_factor", 4)),
           "conv_kernel": enc_cfg.conv_kernel_size, "subsampling_factor": enc_cfg.subsampling_factor,
           "subsampling_conv_channels": enc_cfg.subsampling_conv_channels,
           "pos_emb_max_len": enc_cfg.get("pos_emb_max_len", 5000)}
    for k, v in u32.items():
        w.add_uint32(f"parakeet.encoder.{k}", int(v))
    w.add_string("parakeet.encoder.conv_norm_type", str(enc_cfg.get("conv_norm_type", "batch_norm")))
    w.add_bool("parakeet.encoder.xscaling", bool(enc_cfg.get("xscaling", True)))
    w.add_bool("parakeet.encoder.use_bias", bool(enc_cfg.get("use_bias", True)))
    w.add_int32("parakeet.encoder.att_context_left", int(att_context[0]))
    w.add_int32("parakeet.encoder.att_context_right", int(att_context[-1]))
    w.add_string("parakeet.encoder.att_context_style", str(enc_cfg.get("att_context_style", "regular")))
    w.add_bool("parakeet.encoder.causal_downsampling", bool(enc_cfg.get("causal_downsampling", False)))
    w.add_bool("parakeet.encoder.conv_causal", enc_cfg.get("conv_context_size") == "causal")
    for k in ("chunk_size", "shift_size", "pre_encode_cache_size"):
        w.add_array(f"parakeet.streaming.{k}", _ints(getattr(sc, k)))
    for k in ("cache_drop_size", "last_channel_cache_size", "valid_out_len", "drop_extra_pre_encoded"):
        w.add_int32(f"parakeet.streaming.{k}", int(getattr(sc, k)))
    w.add_uint32("parakeet.preprocessor.sample_rate", int(getattr(feat, "sample_rate", 16000)))
    for k, attr in (("n_mels", "nfilt"), ("n_fft", "n_fft"), ("win_length", "win_length"),
                    ("hop_length", "hop_length")):
        w.add_uint32(f"parakeet.preprocessor.{k}", int(getattr(feat, attr)))
    pre = getattr(feat, "preemph", None)
    w.add_float32("parakeet.preprocessor.preemph", float(pre) if pre is not None else 0.0)
    w.add_float32("parakeet.preprocessor.mag_power", float(getattr(feat, "mag_power", 2.0)))
    w.add_string("parakeet.preprocessor.normalize", str(getattr(feat, "normalize", "per_feature")))
    lzg = getattr(feat, "log_zero_guard_value", None)
    w.add_float32("parakeet.preprocessor.log_zero_guard", float(lzg) if isinstance(lzg, (int, float)) else 2 ** -24)
    w.add_uint32("parakeet.vocab_size", len(labels))
    w.add_uint32("parakeet.blank_id", len(labels))  # blank is the last class (blank_as_pad)
    w.add_array("parakeet.tokenizer.pieces", labels)
    pred = cfg.decoder.prednet
    w.add_uint32("parakeet.decoder.pred_hidden", int(pred.pred_hidden))
    w.add_uint32("parakeet.decoder.pred_rnn_layers", int(pred.get("pred_rnn_layers", 1)))
    jn = cfg.joint.jointnet
    w.add_uint32("parakeet.joint.joint_hidden", int(jn.joint_hidden))
    w.add_string("parakeet.joint.activation", str(jn.get("activation", "relu")))
    greedy = (cfg.get("decoding") or {}).get("greedy") or {}
    w.add_uint32("parakeet.decoding.max_symbols", int(greedy.get("max_symbols", 10) or 10))

    out_idx = _joint_out_index(model)
    qtype = {"f16": gguf.GGMLQuantizationType.F16, "q8_0": gguf.GGMLQuantizationType.Q8_0}.get(quant)
    n = quantized = nbytes = 0
    for name, t in model.state_dict().items():
        if name.startswith("preprocessor.") and name not in KEEP_PREPROCESSOR:
            continue
        a = np.ascontiguousarray(t.detach().float().cpu().numpy(), dtype=np.float32)
        if a.ndim == 0:
            continue
        name = name.replace(f"joint.joint_net.{out_idx}.", "joint.joint_net.2.")
        # ggml blocks along the last torch axis (ggml's ne[0])
        if (qtype is not None and a.ndim == 2 and min(a.shape) >= 32 and a.shape[-1] % 32 == 0
                and any(p.match(name) for p in QUANTIZABLE)):
            raw = gguf.quantize(a, qtype)
            w.add_tensor(name, raw, raw_shape=raw.shape, raw_dtype=qtype)
            quantized += 1
            nbytes += raw.nbytes
        else:
            w.add_tensor(name, a)
            nbytes += a.nbytes
        n += 1
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return {"path": path, "quant": quant, "tensors": n, "quantized": quantized, "tensor_bytes": nbytes,
            "att_context": [int(x) for x in att_context], "labels": len(labels),
            "streaming_cfg": {k: _ints(getattr(sc, k)) for k in ("chunk_size", "shift_size", "pre_encode_cache_size")}}
