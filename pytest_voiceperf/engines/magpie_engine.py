"""Magpie TTS (NeMo's ``MagpieTTSModel``), run inside the engine worker process only.

Without a checkpoint the model is built from NeMo's own classes with random weights and no
download:

- the audio codec: an ``AudioCodecModel`` of the low-frame-rate 22.05 kHz codec shape (HiFi-GAN
  encoder/decoder, 1024 samples per frame = 21.5 frames/s, 8 FSQ codebooks of 8x7x6x6 = 2016
  codes), built from a config, saved to a ``.nemo`` file (kept in the user cache, engines/caches.py, by config hash)
  and passed as ``codecmodel_path``, exactly as a trained codec would be;
- the TTS model: ``MagpieTTSModel`` of type ``decoder_ce`` (text encoder, context encoder,
  decoder with cross-attention, autoregressive local transformer) with ``frame_stacking_factor``
  from the spec, a character tokenizer (``EnglishCharsTokenizer``: no G2P dictionaries), and a
  random baked speaker-context embedding (as the released checkpoint carries one).

Generation goes through ``MagpieTTSModel.infer_batch`` (KV cache on, local transformer and
classifier-free guidance as in NeMo's inference defaults) at a fixed length: ``max_decoder_steps``
and ``min_generated_frames`` both equal the asked number of codec frames, so EOS cannot end it.
Forward hooks count base-decoder and local-transformer calls.

spec: ``model``, ``config`` (see ``models.py``), ``weights`` (a ``.nemo`` checkpoint or None),
``device``, ``frame_stacking`` (overrides the config's factor), ``threads``.
"""
from __future__ import annotations

import os
import time

from ..exceptions import Unmeasured
from . import caches
from .worker import progress, warming

DEFAULT_TEXT = "The quick brown fox jumps over the lazy dog, then it runs back home to rest."


def _layers(d: dict, **extra) -> dict:
    out = {"n_layers": d["n_layers"], "d_model": d["d_model"], "d_ffn": d["d_ffn"], "sa_n_heads": d["heads"],
           "kernel_size": d["kernel_size"], "p_dropout": 0.0, "p_dropout_out": 0.0, "apply_norm_out": True,
           "max_length_causal_mask": 2048}
    out.update(extra)
    return out


def codec_config(c: dict) -> dict:
    return {
        "sample_rate": c["sample_rate"], "samples_per_frame": c["samples_per_frame"],
        "mel_loss_l1_scale": 10.0, "mel_loss_l2_scale": 0.0, "stft_loss_scale": 10.0, "time_domain_loss_scale": 0.0,
        "commit_loss_scale": 0.0,
        "loss_resolutions": [[32, 8, 32], [64, 16, 64], [128, 32, 128], [256, 64, 256], [512, 128, 512],
                             [1024, 256, 1024]],
        "mel_loss_dims": [5, 10, 20, 40, 80, 160], "mel_loss_log_guard": 1.0, "stft_loss_log_guard": 1.0,
        "feature_loss_type": "absolute",
        "audio_encoder": {"_target_": "nemo.collections.tts.modules.audio_codec_modules.HiFiGANEncoder",
                          "down_sample_rates": c["down_sample_rates"], "encoded_dim": c["latent_dim"],
                          "base_channels": c["encoder_channels"], "activation": "lrelu"},
        "audio_decoder": {"_target_": "nemo.collections.tts.modules.audio_codec_modules.HiFiGANDecoder",
                          "up_sample_rates": c["up_sample_rates"], "input_dim": c["latent_dim"],
                          "base_channels": c["decoder_channels"], "activation": "lrelu", "output_activation": "tanh"},
        "vector_quantizer": {"_target_": "nemo.collections.tts.modules.audio_codec_modules.GroupFiniteScalarQuantizer",
                             "num_groups": c["codebooks"], "num_levels_per_group": c["levels"]},
        "generator_loss": {"_target_": "nemo.collections.tts.losses.audio_codec_loss.GeneratorSquaredLoss"},
        "discriminator_loss": {"_target_": "nemo.collections.tts.losses.audio_codec_loss.DiscriminatorSquaredLoss"},
    }


def magpie_config(cfg: dict, codec_path: str, frame_stacking: int) -> dict:
    lt = cfg["local_transformer"]
    return {
        "model_type": "decoder_ce", "use_text_conditioning_encoder": False,
        "context_duration_min": 5.0, "context_duration_max": 5.0,
        # frame stacking refuses the training-time attention prior and alignment loss
        "prior_scaling_factor": None, "prior_end_step": 0, "prior_scaledown_start_step": 0,
        "alignment_loss_scale": 0.0, "use_alignment_encoder": False, "cfg_unconditional_prob": 0.1,
        "embedding_dim": cfg["embedding_dim"], "codecmodel_path": codec_path,
        "local_transformer_type": "autoregressive", "local_transformer_n_layers": lt["n_layers"],
        "local_transformer_n_heads": lt["heads"], "local_transformer_hidden_dim": lt["hidden_dim"],
        "frame_stacking_factor": int(frame_stacking), "use_kv_cache_for_inference": True,
        "text_tokenizers": {"english_chars": {
            "_target_": "nemo.collections.common.tokenizers.text_to_speech.tts_tokenizers.EnglishCharsTokenizer",
            "punct": True, "apostrophe": True, "pad_with_space": False}},
        "encoder": _layers(cfg["encoder"], has_xattn=False, is_causal=True, use_learnable_pos_emb=True),
        "context_encoder": _layers(cfg["context_encoder"], has_xattn=False, is_causal=False),
        "decoder": _layers(cfg["decoder"], has_xattn=True, xa_d_memory=cfg["embedding_dim"], xa_n_heads=1,
                           is_causal=True, apply_norm_to_cond=True, use_learnable_pos_emb=True),
    }


def install_wandb_stub() -> str:
    """NeMo's magpietts module imports ``wandb`` at the top (only its training loggers use it).

    Where wandb is not installed, this worker process gets a stub module whose attributes raise.
    """
    import importlib.machinery
    import importlib.util
    import sys
    import types

    if importlib.util.find_spec("wandb") is not None:
        return "real"
    mod = types.ModuleType("wandb")
    mod.__spec__ = importlib.machinery.ModuleSpec("wandb", None)

    def _missing(name):
        if name.startswith("__"):
            raise AttributeError(name)

        def unavailable(*_a, **_k):
            raise RuntimeError(f"wandb.{name}: wandb is a stub in this pytest-voiceperf engine worker")

        return unavailable

    setattr(mod, "__getattr__", _missing)  # noqa: B010  (a module-level __getattr__, PEP 562)
    sys.modules["wandb"] = mod
    return "stub (not installed)"


class Engine:
    def __init__(self, model: str = "magpie-tts-tiny", config: dict | None = None, weights: str | None = None,
                 device: str = "cpu", frame_stacking: int | None = None, threads: int = 0,
                 text: str = DEFAULT_TEXT, **_):
        t_start = time.perf_counter()
        self.wandb = install_wandb_stub()
        try:
            import torch
            from nemo.collections.tts.models import AudioCodecModel
            from nemo.collections.tts.models.magpietts import MagpieTTSModel
            from omegaconf import OmegaConf
        except Exception as exc:  # NeMo's TTS collection needs extra packages (lhotse, wandb, ...)
            raise Unmeasured(f"NeMo's Magpie TTS cannot be imported ({type(exc).__name__}: {exc}); "
                             "pip install 'nemo_toolkit[tts]'") from None
        if threads:
            torch.set_num_threads(int(threads))
        torch.manual_seed(0)
        self.torch = torch
        self.model_name = model
        self.device = device
        self.dummy = weights is None
        self.text = text
        if weights:
            progress(f"magpie: restoring {weights}")
            m = MagpieTTSModel.restore_from(weights, map_location=device)
            if frame_stacking and int(frame_stacking) != int(m.frame_stacking_factor):
                raise Unmeasured(f"the checkpoint {weights} has frame_stacking_factor {m.frame_stacking_factor}, "
                                 f"not {frame_stacking}")
        else:
            if not config:
                raise ValueError(f"no config for model {model!r} and no weights")
            fs = int(frame_stacking or config.get("frame_stacking_factor", 1))
            ccfg = codec_config(config["codec"])
            codec_path = os.path.join(caches.cache_dir("magpie-codec", ccfg), "codec.nemo")
            if not os.path.exists(codec_path):
                os.makedirs(os.path.dirname(codec_path), exist_ok=True)
                progress("magpie: building a random-weight audio codec (.nemo)")
                codec = AudioCodecModel(OmegaConf.create(ccfg))
                tmp = codec_path + f".{os.getpid()}.tmp"
                codec.save_to(tmp)
                os.replace(tmp, codec_path)
                del codec
            progress(f"magpie: building {model} (random weights, frame stacking {fs}) on {device}")
            m = MagpieTTSModel(OmegaConf.create(magpie_config(config, codec_path, fs)))
            T, D, n = int(config.get("context_frames", 110)), int(config["embedding_dim"]), int(config.get("speakers", 5))
            m.baked_context_embedding = torch.nn.Embedding(n, T * D)
            m._baked_embedding_T = torch.tensor(T)
            m._baked_embedding_D = torch.tensor(D)
            m.baked_context_embedding_len = torch.full((n,), T, dtype=torch.long)
        self.m = m.to(device).eval()
        self.fs = int(self.m.frame_stacking_factor)
        self.calls = {"decoder": 0, "local_transformer": 0}
        self.m.decoder.register_forward_hook(lambda *a: self._count("decoder"))
        if hasattr(self.m, "local_transformer"):
            self.m.local_transformer.register_forward_hook(lambda *a: self._count("local_transformer"))
        self.codec_s = 0.0
        helper = self.m._codec_helper
        orig = helper.codes_to_audio

        def timed_codes_to_audio(*a, **k):
            self._sync()
            t0 = time.perf_counter()
            out = orig(*a, **k)
            self._sync()
            self.codec_s += time.perf_counter() - t0
            return out

        helper.codes_to_audio = timed_codes_to_audio
        self.start_s = time.perf_counter() - t_start

    def _count(self, key):
        self.calls[key] += 1

    def _sync(self):
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def _batch(self):
        torch = self.torch
        tok = list(self.m.tokenizer.encode(self.text, self.m.tokenizer.tokenizer_names[0])) + [self.m.eos_id]
        return {"text": torch.tensor([tok], dtype=torch.long, device=self.device),
                "text_lens": torch.tensor([len(tok)], dtype=torch.long, device=self.device)}

    def _run(self, frames: int, use_cfg: bool) -> dict:
        ip = self.m.inference_parameters
        ip.max_decoder_steps = int(frames)
        ip.min_generated_frames = int(frames)  # EOS is forbidden until then: a fixed length
        self.calls.update(decoder=0, local_transformer=0)
        self.codec_s = 0.0
        batch = self._batch()
        self._sync()
        t0 = time.perf_counter()
        out = self.m.infer_batch(batch, use_cfg=use_cfg, use_local_transformer_for_inference=True)
        self._sync()
        total = time.perf_counter() - t0
        return {"total_s": total, "codec_s": self.codec_s, "decoder_calls": self.calls["decoder"],
                "lt_calls": self.calls["local_transformer"], "frames": int(out.predicted_codes_lens.max().item()),
                "samples": int(out.predicted_audio_lens.max().item())}

    def synthesis(self, frames: int = 40, reps: int = 3, use_cfg: bool = True) -> dict:
        progress(f"magpie: warm-up at {frames} codec frames")
        with warming():
            self._run(frames, use_cfg)
        runs = []
        for r in range(int(reps)):
            progress(f"magpie: run {r + 1}/{reps} at {frames} codec frames")
            runs.append(self._run(frames, use_cfg))
        return {"runs": runs, "frames_asked": int(frames), "frame_stacking": self.fs,
                "sample_rate": int(self.m.output_sample_rate),
                "samples_per_frame": int(self.m.codec_model_samples_per_frame)}

    def info(self) -> dict:
        torch = self.torch
        m = self.m
        total = sum(p.numel() for p in m.parameters())
        codec = sum(p.numel() for p in m._codec_model.parameters())
        return {
            "engine": "magpie", "model": self.model_name, "class": type(m).__name__, "dummy": self.dummy,
            "weights": "random (config shape)" if self.dummy else "checkpoint", "device": self.device,
            "frame_stacking": self.fs, "model_type": m.model_type, "num_codebooks": m.num_audio_codebooks,
            "codebook_size": m.codebook_size, "sample_rate": int(m.output_sample_rate),
            "samples_per_frame": int(m.codec_model_samples_per_frame),
            "params": total - codec, "codec_params": codec,
            "decoder_params": sum(p.numel() for p in m.decoder.parameters()),
            "kv_cache": bool(m.use_kv_cache_for_inference), "text": self.text, "wandb": self.wandb,
            "torch_threads": torch.get_num_threads(),
            "versions": {"nemo_toolkit": _dist_version("nemo_toolkit"), "torch": torch.__version__},
            "cuda_device": torch.cuda.get_device_name() if self.device == "cuda" else None,
            "start_s": self.start_s,
        }

    def close(self):
        pass


def _dist_version(name: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:
        return None
