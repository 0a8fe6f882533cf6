"""VoxCPM2 served by Nano-vLLM (the ``nano-vllm-voxcpm`` package), run inside the engine worker only.

spec (from :mod:`pytest_voiceperf.probes.tts`, ``runtime: nanovllm``):

- ``model``, ``config``, ``weights``: as for the ``voxcpm`` engine (a checkpoint folder, or None for
  random weights of the config's shape)
- ``timesteps``: the diffusion step count; Nano-vLLM fixes it when the server starts, so it is part
  of the spec (one server per step count)

Nano-vLLM runs bfloat16 on CUDA only (flash-attn kernels, Triton, CUDA graphs): the probes ask
nothing else of it. It serves from its own process (``SyncVoxCPM2ServerPool``); chunks arrive here
as numpy arrays, so the clock reads after each chunk see finished GPU work.

Random weights: unlike ``voxcpm`` (which loads with ``strict=False``), Nano-vLLM's loader needs every
parameter in ``model.safetensors`` and the VAE in ``audiovae.pth``. The folder is written once from
the ``voxcpm`` package's own model (the layout of the published checkpoint), with random values, and
kept in the plugin's cache folder under a name derived from the config (4.6 GB for the full model).
One change to the random values: the stop head is set so that it never says stop, so every request
generates exactly ``max_generate_length`` patches (what the ``voxcpm`` engine gets from
``min_len = max_len``). A real checkpoint is used as it is; then the length is the model's own.
"""
from __future__ import annotations

import copy
import json
import os
import shutil
import time
from typing import Any

from ..disturbance import gpu_state, tree_cpu_seconds
from .caches import cache_dir
from .voxcpm_engine import DEFAULT_TEXT, _dist_version, install_torchaudio_stub, write_tokenizer
from .worker import progress, warming

CHECKPOINT_VERSION = 1  # bump when the written folder changes


def checkpoint_dir(config: dict) -> str:
    return cache_dir(f"voxcpm2-nanovllm-v{CHECKPOINT_VERSION}", config)


def write_checkpoint(d: str, config: dict, device: str = "cpu", seed: int = 0) -> dict:
    """Write a complete random-weight VoxCPM2 checkpoint folder (published layout) into ``d``.

    Written into a sibling folder and renamed at the end, so a half-written folder is never used."""
    import torch
    from safetensors.torch import save_file

    install_torchaudio_stub()
    from transformers import LlamaTokenizerFast
    from voxcpm.model.voxcpm2 import AudioVAEV2, VoxCPM2Model, VoxCPMConfig

    tmp = d + f".part-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    cfg = copy.deepcopy(config)
    write_tokenizer(tmp, cfg)
    with open(os.path.join(tmp, "config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f)
    torch.manual_seed(seed)
    vcfg = VoxCPMConfig.model_validate(cfg)
    tok = LlamaTokenizerFast.from_pretrained(tmp)
    with torch.device(device):
        vae = AudioVAEV2(config=vcfg.audio_vae_config)
        model = VoxCPM2Model(vcfg, tok, vae, None, device=device)
    sd = {k: v for k, v in model.state_dict().items() if not k.startswith("audio_vae.")}
    hidden = vcfg.lm_config.hidden_size
    with torch.no_grad():
        # a stop head that never fires: stop_proj's output is ~1 (tiny weights, bias 1), so SiLU is
        # positive; row 0 ("go on") positive, row 1 ("stop") negative
        g = torch.Generator(device="cpu").manual_seed(seed + 1)
        sd["stop_proj.weight"] = (torch.rand(hidden, hidden, generator=g) - 0.5) * 1e-4
        sd["stop_proj.bias"] = torch.ones(hidden)
        w = torch.rand(2, hidden, generator=g) + 0.1
        w[1] = -w[1]
        sd["stop_head.weight"] = w
    lm = {k: v.detach().to("cpu", torch.bfloat16).contiguous() for k, v in sd.items() if v.is_floating_point()}
    lm.update({k: v.detach().cpu().contiguous() for k, v in sd.items() if not v.is_floating_point()})
    save_file(lm, os.path.join(tmp, "model.safetensors"))
    vsd = {k: v.detach().float().cpu().contiguous() for k, v in vae.state_dict().items()}
    torch.save({"state_dict": vsd}, os.path.join(tmp, "audiovae.pth"))
    params = sum(v.numel() for v in sd.values())
    del model, vae
    shutil.rmtree(d, ignore_errors=True)
    os.rename(tmp, d)
    return {"params": params, "bytes": sum(os.path.getsize(os.path.join(d, n)) for n in os.listdir(d))}


class Engine:
    def __init__(self, model: str = "voxcpm2", config: dict | None = None, weights: str | None = None,
                 device: str = "cuda", timesteps: int = 10, text: str = DEFAULT_TEXT,
                 max_num_seqs: int = 16, gpu_memory_utilization: float = 0.3, **_):
        t_start = time.perf_counter()
        import torch

        if device != "cuda" or not torch.cuda.is_available():
            raise RuntimeError("Nano-vLLM VoxCPM runs on CUDA only (flash-attn, Triton, CUDA graphs)")
        import flash_attn
        import nanovllm_voxcpm
        from nanovllm_voxcpm import VoxCPM

        self.torch = torch
        self.model = model
        self.device = device
        self.timesteps = int(timesteps)
        self.text = text
        self.dummy = weights is None
        self.written: dict | None = None
        if weights:
            path = weights
        else:
            if not config:
                raise ValueError(f"no config for model {model!r} and no weights")
            path = checkpoint_dir(config)
            if not os.path.exists(os.path.join(path, "model.safetensors")):
                os.makedirs(os.path.dirname(path), exist_ok=True)
                progress(f"nanovllm: writing a random-weight {model} checkpoint to {path}")
                t0 = time.perf_counter()
                self.written = write_checkpoint(path, config, device="cuda")
                self.written["seconds"] = round(time.perf_counter() - t0, 1)
                torch.cuda.empty_cache()
        with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
            self.config = json.load(f)
        if str(self.config.get("architecture", "")).lower() != "voxcpm2":
            raise ValueError(f"config architecture {self.config.get('architecture')!r} is not voxcpm2")
        self.path = path
        self.versions = {"nano-vllm-voxcpm": getattr(nanovllm_voxcpm, "__version__", None)
                         or _dist_version("nano-vllm-voxcpm"),
                         "flash_attn": getattr(flash_attn, "__version__", None), "torch": torch.__version__,
                         "transformers": _dist_version("transformers")}
        progress(f"nanovllm: starting the server for {model} ({'random' if self.dummy else 'real'} weights, "
                 f"{self.timesteps} diffusion steps)")
        dev = torch.cuda.current_device()
        free, total = torch.cuda.mem_get_info()
        self.used_before = total - free
        self.gpu_memory_utilization = float(gpu_memory_utilization)
        self.server = VoxCPM.from_pretrained(model=path, inference_timesteps=self.timesteps,
                                             max_num_seqs=int(max_num_seqs), max_model_len=4096,
                                             gpu_memory_utilization=float(gpu_memory_utilization),
                                             enforce_eager=False, devices=[dev])
        info = self.server.get_model_info()
        self.sample_rate = int(info["output_sample_rate"])
        self.patch_size = int(info["patch_size"])
        self.start_s = time.perf_counter() - t_start

    # -- helpers ---------------------------------------------------------------------------
    def _stream(self, patches: int) -> tuple[list[float], list[int]]:
        """Arrival time (s from the call) and sample count of every chunk (one chunk per patch)."""
        arrivals, sizes = [], []
        t0 = time.perf_counter()
        for chunk in self.server.generate(target_text=self.text, max_generate_length=int(patches),
                                          temperature=1.0, cfg_value=2.0):
            arrivals.append(time.perf_counter() - t0)
            sizes.append(int(getattr(chunk, "shape", [len(chunk)])[-1]))
        return arrivals, sizes

    def _device_used(self) -> int:
        free, total = self.torch.cuda.mem_get_info()
        return int(total - free - self.used_before)

    @staticmethod
    def _pass_state() -> dict:
        """GPU clocks and clock-event reasons, and the CPU seconds this engine's process tree (its
        Nano-vLLM server included) has used, read after each pass: on the H200 some passes took 2x at
        every length with nothing flagged; these say next time whether the clock or the host moved."""
        return {"cpu_s": tree_cpu_seconds(), "gpu": gpu_state()}

    def _whole(self, patches: int) -> tuple[float, int]:
        arrivals, sizes = self._stream(patches)
        if self.dummy and len(sizes) != int(patches):
            raise RuntimeError(f"asked for {patches} patches, got {len(sizes)} chunks (the stop head fired?)")
        return arrivals[-1], sum(sizes)

    def _check_timesteps(self, timesteps: int) -> None:
        if int(timesteps) != self.timesteps:
            raise ValueError(f"this Nano-vLLM server runs {self.timesteps} diffusion steps, asked for {timesteps}")

    # -- measurements (the voxcpm engine's methods and result shapes) -------------------------
    def synthesis(self, patches: list[int], timesteps: int = 10, reps: int = 3) -> dict:
        self._check_timesteps(timesteps)
        patches = [int(n) for n in patches]
        for n in patches:
            progress(f"nanovllm: warm-up at {n} patches")
            with warming():
                self._whole(n)
        used = self._device_used()
        times: dict[int, list[float]] = {n: [] for n in patches}
        samples = {}
        passes = [self._pass_state()]
        for r in range(int(reps)):
            progress(f"nanovllm: synthesis round {r + 1}/{reps} over {len(patches)} lengths")
            for n in patches:
                t, s = self._whole(n)
                times[n].append(t)
                samples[n] = s
            used = max(used, self._device_used())
            passes.append(self._pass_state())
        return {"passes": passes, "patches": patches, "times": [times[n] for n in patches], "samples": [samples[n] for n in patches],
                "sample_rate": self.sample_rate, "timesteps": self.timesteps, "peak_mem_bytes": used,
                "peak_mem_kind": "device memory in use after each round minus before the server started "
                                 "(cudaMemGetInfo): Nano-vLLM serves from its own process and reserves "
                                 f"gpu_memory_utilization={self.gpu_memory_utilization} of the GPU for its KV cache "
                                 "up front, so this is its reservation, not the model's need"}

    def streaming(self, patches: int = 20, timesteps: int = 10, reps: int = 3) -> dict:
        self._check_timesteps(timesteps)
        n = int(patches)
        progress(f"nanovllm: streaming warm-up at {n} patches")
        with warming():
            self._stream(n)
        runs = []
        for _r in range(int(reps)):
            arrivals, sizes = self._stream(n)
            runs.append({"arrivals": arrivals, "sizes": sizes})
        return {"patches": n, "timesteps": self.timesteps, "runs": runs, "sample_rate": self.sample_rate}

    def info(self) -> dict:
        from safetensors import safe_open

        params = 0
        weight_bytes = 0
        dtypes: set[str] = set()
        with safe_open(os.path.join(self.path, "model.safetensors"), "pt", "cpu") as f:
            for k in f.keys():
                sl = f.get_slice(k)
                n = 1
                for s in sl.get_shape():
                    n *= int(s)
                params += n
                dt = str(sl.get_dtype())
                dtypes.add(dt)
                weight_bytes += n * {"BF16": 2, "F16": 2, "F32": 4, "I64": 8}.get(dt, 4)
        return {
            "engine": "nanovllm",
            "runtime": "nano-vllm-voxcpm",
            "model": self.model,
            "architecture": "voxcpm2",
            "dummy": self.dummy,
            "weights": "random (config shape), stop head that never fires" if self.dummy else "checkpoint",
            "checkpoint": self.path,
            "checkpoint_written": self.written,
            "device": self.device,
            "dtype": "bfloat16",
            "param_dtypes": sorted(d.lower() for d in dtypes),
            "optimize": False,
            "compiled": "CUDA graphs (enforce_eager=False)",
            "params": params,
            "weight_bytes": weight_bytes,
            "sample_rate": self.sample_rate,
            "patch_size": self.patch_size,
            "timesteps": self.timesteps,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "text": self.text,
            "versions": self.versions,
            "cuda_device": self.torch.cuda.get_device_name(),
            "start_s": self.start_s,
        }

    def close(self):
        server: Any = getattr(self, "server", None)
        if server is not None:
            server.stop()
