"""VoxCPM2 (the ``voxcpm`` package), run inside the engine worker process only.

spec (from :mod:`pytest_voiceperf.probes.tts`):

- ``model``: catalog name (``voxcpm2`` full size, ``voxcpm2-tiny`` for CPU and tests)
- ``config``: the model's ``config.json`` content (``"architecture": "voxcpm2"``)
- ``weights``: a checkpoint directory, or None for random weights of the config's shape
- ``device``: ``cpu`` or ``cuda``; ``dtype``: ``bfloat16`` or ``float32``
- ``optimize``: ask VoxCPM for ``torch.compile`` (it only compiles on CUDA with triton;
  :meth:`Engine.info` says whether it did)

Random weights: a directory with ``config.json``, a character-level ``LlamaTokenizerFast``
(ids 101-104 are VoxCPM2's audio markers, so they are reserved) and ``model.safetensors`` /
``audiovae.safetensors`` holding one placeholder tensor. ``VoxCPM2Model.from_local`` loads with
``strict=False``, so every weight keeps its random initialisation (speed does not depend on the
values). A real checkpoint is linked into a fresh directory whose ``config.json`` differs only in
``dtype`` / ``device``.

``voxcpm`` imports ``torchaudio`` at the top of its package (only VoxCPM v1 uses it). When
torchaudio is missing or cannot load beside this torch (PyPI's torchaudio is a CUDA build), this
worker process gets a minimal stub module ``torchaudio`` whose functions raise; VoxCPM2 never calls
them. :meth:`Engine.info` reports ``torchaudio: stub`` then.

Lengths are fixed: ``min_len = max_len = N`` patches with the bad-case retry off gives exactly N
patches (4 latent frames of 40 ms = 160 ms of audio each). Every length (and step count) is
generated once untimed before it is timed; CUDA work is synchronised before every clock read.
"""
from __future__ import annotations

import copy
import importlib.machinery
import importlib.util
import json
import os
import resource
import shutil
import sys
import tempfile
import time
import types
from collections.abc import Sequence
from typing import Any

from .worker import progress, warming

DEFAULT_TEXT = "The quick brown fox jumps over the lazy dog, then it runs back home to rest."


def install_torchaudio_stub() -> str:
    """Make ``import torchaudio`` work in this process; return 'real' or 'stub (why)'."""
    why = "not installed"
    if importlib.util.find_spec("torchaudio") is not None:
        try:
            import torchaudio  # noqa: F401

            return "real"
        except Exception as exc:  # a CUDA build beside a CPU torch raises OSError / ImportError
            why = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
            for name in [m for m in sys.modules if m == "torchaudio" or m.startswith("torchaudio.")]:
                del sys.modules[name]

    def unavailable(*_a, **_k):
        raise RuntimeError("torchaudio is a stub in this pytest-voiceperf engine worker (VoxCPM2 does not use it)")

    mod: Any = types.ModuleType("torchaudio")
    mod.__spec__ = importlib.machinery.ModuleSpec("torchaudio", None)
    mod.__version__ = "0+voiceperf.stub"
    mod.load = unavailable
    mod.save = unavailable
    functional: Any = types.ModuleType("torchaudio.functional")
    functional.__spec__ = importlib.machinery.ModuleSpec("torchaudio.functional", None)
    functional.resample = unavailable
    mod.functional = functional
    sys.modules["torchaudio"] = mod
    sys.modules["torchaudio.functional"] = functional
    return f"stub ({why})"


def _char_vocab() -> dict[str, int]:
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for i in range(3, 106):  # 101-104: VoxCPM2's audio start/end and reference start/end markers
        vocab[f"<reserved_{i}>"] = i
    chars = ["\u2581"] + [chr(c) for c in range(33, 127)] + [chr(c) for c in range(0xAC00, 0xAC00 + 64)]
    for ch in chars:
        vocab.setdefault(ch, len(vocab))
    return vocab


def write_tokenizer(d: str, config: dict) -> None:
    """The character-level tokenizer random-weight VoxCPM2 folders use (ids 101-104 reserved)."""
    from transformers import LlamaTokenizerFast

    vocab = _char_vocab()
    if config["lm_config"]["vocab_size"] < len(vocab):
        raise ValueError(f"lm_config.vocab_size {config['lm_config']['vocab_size']} < tokenizer size {len(vocab)}")
    LlamaTokenizerFast(vocab=vocab, merges=[]).save_pretrained(d)


def _write_random_dir(d: str, config: dict) -> None:
    import torch
    from safetensors.torch import save_file

    write_tokenizer(d, config)
    placeholder = {"voiceperf_placeholder": torch.zeros(1)}
    save_file(placeholder, os.path.join(d, "model.safetensors"))
    save_file(placeholder, os.path.join(d, "audiovae.safetensors"))


class Engine:
    def __init__(self, model: str = "voxcpm2-tiny", config: dict | None = None, weights: str | None = None,
                 device: str = "cpu", dtype: str = "bfloat16", optimize: bool = False, threads: int = 0,
                 text: str = DEFAULT_TEXT, **_):
        t_start = time.perf_counter()
        os.environ.setdefault("TQDM_DISABLE", "1")  # VoxCPM's per-patch tqdm bar (read when tqdm is imported)
        import torch
        import transformers  # noqa: F401  (before the stub, so its availability checks see the real state)

        self.torchaudio = install_torchaudio_stub()
        import voxcpm
        from voxcpm import VoxCPM

        if threads:
            torch.set_num_threads(int(threads))
        torch.manual_seed(0)
        self.torch = torch
        self.model = model
        self.device = device
        self.dummy = weights is None
        self.optimize = bool(optimize)
        self.text = text
        self._warmed: set[tuple[bool, int, int]] = set()  # (streamed, patches, diffusion steps) run once
        self.voxcpm_version = getattr(voxcpm, "__version__", None) or _dist_version("voxcpm")
        if device == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("device cuda asked for, but torch.cuda.is_available() is False")

        self.dir = tempfile.mkdtemp(prefix="voiceperf-voxcpm-")
        if weights:
            with open(os.path.join(weights, "config.json"), encoding="utf-8") as f:
                cfg = json.load(f)
            for name in os.listdir(weights):
                if name != "config.json":
                    os.symlink(os.path.abspath(os.path.join(weights, name)), os.path.join(self.dir, name))
        else:
            if not config:
                raise ValueError(f"no config for model {model!r} and no weights")
            cfg = copy.deepcopy(config)
            _write_random_dir(self.dir, cfg)
        if cfg.get("architecture", "voxcpm").lower() != "voxcpm2":
            raise ValueError(f"config architecture {cfg.get('architecture')!r} is not voxcpm2")
        cfg["dtype"] = dtype
        cfg["device"] = device
        with open(os.path.join(self.dir, "config.json"), "w", encoding="utf-8") as f:
            json.dump(cfg, f)
        self.config = cfg

        progress(f"voxcpm: building {model} ({'random' if self.dummy else 'real'} weights, {dtype}, "
                 f"optimize={'on' if optimize else 'off'}) on {device}")
        self.vox = VoxCPM(voxcpm_model_path=self.dir, zipenhancer_model_path=None, enable_denoiser=False,
                          optimize=self.optimize, device=device)
        self.tts = self.vox.tts_model
        self.sample_rate = int(self.tts.sample_rate)
        fs = self.tts.base_lm.forward_step
        self.compiled = bool(getattr(fs, "_torchdynamo_orig_callable", None) or "compile" in type(fs).__name__.lower()
                             or hasattr(self.tts, "_feat_encoder_raw"))
        self.start_s = time.perf_counter() - t_start

    # -- helpers ---------------------------------------------------------------------------
    def _sync(self):
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def _kw(self, patches: int, timesteps: int) -> dict:
        return dict(min_len=int(patches), max_len=int(patches), inference_timesteps=int(timesteps),
                    retry_badcase=False, retry_badcase_ratio_threshold=1e9, cfg_value=2.0)

    def _whole(self, patches: int, timesteps: int) -> tuple[float, int]:
        self._sync()
        t0 = time.perf_counter()
        wav = self.vox.generate(self.text, **self._kw(patches, timesteps))
        self._sync()
        return time.perf_counter() - t0, int(wav.shape[-1])

    def _stream(self, patches: int, timesteps: int) -> tuple[list[float], list[int]]:
        """Arrival time (s from the call) and sample count of every chunk."""
        arrivals, sizes = [], []
        self._sync()
        t0 = time.perf_counter()
        for chunk in self.vox.generate_streaming(self.text, **self._kw(patches, timesteps)):
            self._sync()  # the chunk is already on the CPU (numpy); nothing of it is left running
            arrivals.append(time.perf_counter() - t0)
            sizes.append(int(chunk.shape[-1]))
        return arrivals, sizes

    def _warm_up(self, shapes: list[tuple[int, int]], stream: bool = False) -> None:
        """Each (patches, diffusion steps) shape once per engine, whole or streamed (with ``optimize`` a
        new shape compiles); a later call whose shapes were all run before re-primes once, at its
        shortest shape cut to 4 patches (on the CPU a warm-up at every length took 2 s of each 11 s round)."""
        new = [sh for sh in shapes if (stream, *sh) not in self._warmed]
        n0, t0 = min(shapes)
        for n, t in new or [(min(n0, 4), t0)]:
            progress(f"voxcpm: {'streaming ' if stream else ''}warm-up at {n} patches, {t} diffusion steps"
                     + ("" if new else " (re-prime)"))
            with warming():
                (self._stream if stream else self._whole)(n, t)
        self._warmed.update((stream, *sh) for sh in new)

    def _reset_peak(self):
        if self.device == "cuda":
            self.torch.cuda.reset_peak_memory_stats()

    def _peak(self) -> dict:
        if self.device == "cuda":
            return {"peak_mem_bytes": int(self.torch.cuda.max_memory_allocated()),
                    "peak_reserved_bytes": int(self.torch.cuda.max_memory_reserved()),
                    "peak_mem_kind": "torch.cuda.max_memory_allocated during the timed runs"}
        return {"peak_mem_bytes": int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024,
                "peak_mem_kind": "process peak RSS (CPU; includes loading)"}

    # -- measurements ----------------------------------------------------------------------
    def synthesis(self, patches: list[int], timesteps: int = 10, reps: int = 3) -> dict:
        """Whole-utterance time at each length; rounds interleave the lengths."""
        patches = [int(n) for n in patches]
        self._warm_up([(n, int(timesteps)) for n in patches])
        self._reset_peak()
        times: dict[int, list[float]] = {n: [] for n in patches}
        samples = {}
        for r in range(int(reps)):
            progress(f"voxcpm: synthesis round {r + 1}/{reps} over {len(patches)} lengths")
            for n in patches:
                t, s = self._whole(n, timesteps)
                times[n].append(t)
                samples[n] = s
        out = {"patches": patches, "times": [times[n] for n in patches], "samples": [samples[n] for n in patches],
               "sample_rate": self.sample_rate, "timesteps": int(timesteps)}
        out.update(self._peak())
        return out

    def steps(self, timesteps: list[int], patches: Sequence[int] = (4, 16), reps: int = 3) -> dict:
        """Whole-utterance time at two lengths for each diffusion step count.

        The per-patch cost is the time difference between the two lengths divided by the patch
        difference (the fit's slope): per-utterance costs (text prefill, set-up) cancel out.
        """
        timesteps = [int(t) for t in timesteps]
        patches = [int(n) for n in patches]
        self._warm_up([(n, t) for t in timesteps for n in patches])
        times: dict[tuple[int, int], list[float]] = {(t, n): [] for t in timesteps for n in patches}
        for r in range(int(reps)):
            progress(f"voxcpm: steps round {r + 1}/{reps} over {timesteps} steps")
            for t in timesteps:
                for n in patches:
                    times[(t, n)].append(self._whole(n, t)[0])
        return {"timesteps": timesteps, "patches": patches,
                "times": [[times[(t, n)] for n in patches] for t in timesteps], "sample_rate": self.sample_rate}

    def streaming(self, patches: int = 20, timesteps: int = 10, reps: int = 3) -> dict:
        n = int(patches)
        self._warm_up([(n, int(timesteps))], stream=True)
        runs = []
        for _r in range(int(reps)):
            arrivals, sizes = self._stream(n, timesteps)
            runs.append({"arrivals": arrivals, "sizes": sizes})
        return {"patches": n, "timesteps": int(timesteps), "runs": runs, "sample_rate": self.sample_rate}

    # -- description -----------------------------------------------------------------------
    def info(self) -> dict:
        torch = self.torch
        tts = self.tts
        parts = {}
        for name in ("base_lm", "residual_lm", "feat_encoder", "feat_decoder", "audio_vae"):
            mod = getattr(tts, "_feat_encoder_raw", None) if name == "feat_encoder" and hasattr(tts, "_feat_encoder_raw") \
                else getattr(tts, name, None)
            if mod is not None:
                parts[name] = sum(p.numel() for p in mod.parameters())
        total = sum(p.numel() for p in tts.parameters())
        weight_bytes = sum(p.numel() * p.element_size() for p in tts.parameters())
        dtypes = sorted({str(p.dtype).replace("torch.", "") for p in tts.base_lm.parameters()})
        return {
            "engine": "voxcpm",
            "model": self.model,
            "architecture": "voxcpm2",
            "dummy": self.dummy,
            "weights": "random (config shape)" if self.dummy else "checkpoint",
            "device": self.device,
            "dtype": self.config.get("dtype"),
            "param_dtypes": dtypes,
            "optimize": self.optimize,
            "compiled": self.compiled,
            "params": total,
            "params_by_part": parts,
            "weight_bytes": weight_bytes,
            "sample_rate": self.sample_rate,
            "patch_size": int(self.config.get("patch_size", 4)),
            "text": self.text,
            "text_tokens": len(tts.text_tokenizer(self.text)),
            "torch_threads": torch.get_num_threads(),
            "torchaudio": self.torchaudio,
            "versions": {"voxcpm": self.voxcpm_version, "torch": torch.__version__,
                         "transformers": _dist_version("transformers")},
            "cuda_device": torch.cuda.get_device_name() if self.device == "cuda" else None,
            "start_s": self.start_s,
        }

    def close(self):
        shutil.rmtree(self.dir, ignore_errors=True)


def _dist_version(name: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:
        return None
