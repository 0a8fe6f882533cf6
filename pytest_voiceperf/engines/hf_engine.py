"""transformers engine: for machines without vLLM.

Not a hand-written loop: ``model.generate`` with transformers' own static KV cache
(``cache_implementation="static"``), greedy, exactly N new tokens (``min_new_tokens`` =
``max_new_tokens``). Decoding is compiled where it pays:

- CUDA: transformers' automatic compilation of the static-cache decode step
  (``torch.compile`` with its default CompileConfig: fullgraph, ``mode="reduce-overhead"``,
  i.e. CUDA graphs);
- CPU: eager by default (``compile="auto"``). Measured on this project's 2-core CPU (0.6B shape,
  bf16, static cache): Inductor took 75 s at start plus ~50 s again for each new prompt shape,
  for 10.3 instead of 9.2 tok/s (+11%); not worth it, so the CPU decodes eagerly.
  ``compile="on"`` in the spec forces it (``CompileConfig`` with ``_compile_all_devices``);
  ``info()`` says which ran.

Random weights from the catalog's config (``AutoModelForCausalLM.from_config``) unless
``weights`` points at a checkpoint. Timing: a streamer registered with ``generate`` stamps
every token as transformers emits it (the engine's figure); the caller's clock around
``generate`` gives the plugin's figure for the same run.
"""
from __future__ import annotations

import time

from ..exceptions import Unmeasured
from . import llm_common as common
from .worker import note_warmup, progress, warming


class _Stamps:
    """A transformers streamer that timestamps each put (the prompt first, then every new token)."""

    def __init__(self, sync):
        self.t: list[float] = []
        self.n: list[int] = []
        self.sync = sync

    def put(self, value):
        self.sync()
        self.t.append(time.perf_counter())
        self.n.append(int(value.shape[-1]) if value.dim() > 1 else 1)

    def end(self):
        pass


class Engine:
    def __init__(self, model: str, config: dict | None = None, weights: str | None = None, device: str = "cpu",
                 dtype: str = "bfloat16", compile: str = "auto", max_cache_len: int = 8192, seed: int = 0, **_):
        import torch
        import transformers
        from transformers import AutoModelForCausalLM

        self.torch = torch
        self.name, self.device, self.dtype_name = model, device, dtype
        self.dtype = getattr(torch, dtype)
        self.config = config
        self.dummy = weights is None
        torch.manual_seed(seed)
        t0 = time.perf_counter()
        progress(f"transformers {transformers.__version__}: building {model} "
                 f"({'random' if self.dummy else 'real'} weights, {dtype}, {device})")
        if weights:
            self.model = AutoModelForCausalLM.from_pretrained(weights, dtype=self.dtype).to(device)
        else:
            if not config:
                raise Unmeasured(f"model {model!r} has no architecture in the catalog and no weights were given")
            self.model = common.build_from_config(config, device, self.dtype)
        self.model.eval()
        self.vocab = int(self.model.config.vocab_size)
        self.build_s = time.perf_counter() - t0
        if compile == "auto":
            compile = "on" if device == "cuda" else "off"
        self.compile = compile
        self.version = transformers.__version__
        self.max_cache_len = int(max_cache_len)
        self.counts = common.byte_counts(common.weights_config(config, weights), dtype, None)
        self.loaded = self._param_bytes()
        self._seed = 2000 + seed
        gc = self.model.generation_config
        gc.cache_implementation = "static"
        gc.do_sample = False
        gc.pad_token_id = self.model.config.eos_token_id
        if compile == "on":
            from transformers import CompileConfig

            cc = CompileConfig()
            if device != "cuda":
                cc._compile_all_devices = True
                cc.mode = "default"
            gc.compile_config = cc
        else:
            gc.disable_compile = True
        t1 = time.perf_counter()
        with warming():
            self._generate(common.random_prompts(1, 16, self.vocab, 1), 8)
        self.warmup_s = time.perf_counter() - t1
        # what really ran: transformers keeps the compiled forward on the model once it compiled one
        self.compiled = hasattr(self.model, "_compiled_call")
        if compile == "on" and not self.compiled:
            progress("transformers: compilation was asked for but generate() did not compile (eager decode)")

    def _sync(self):
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def _param_bytes(self) -> dict:
        seen, total = set(), 0
        for p in self.model.parameters():  # parameters() yields a tied weight once
            if p.data_ptr() in seen:
                continue
            seen.add(p.data_ptr())
            total += p.numel() * p.element_size()
        return {"bytes": int(total)}

    def info(self) -> dict:
        c = self.counts
        wb = c.get("weights") or self.loaded["bytes"]
        return {
            "engine": "transformers", "engine_version": self.version, "torch": self.torch.__version__,
            "model": self.name, "dummy_weights": self.dummy, "device": self.device, "dtype": self.dtype_name,
            "kv_cache": "static (cache_implementation='static')",
            "decode_compiled": self.compiled,
            "compile_mode": ("torch.compile via transformers CompileConfig (reduce-overhead: CUDA graphs)"
                             if self.compiled and self.device == "cuda" else
                             "torch.compile (Inductor, CPU)" if self.compiled else
                             "eager (compilation asked for but generate() did not compile)" if self.compile == "on" else
                             "eager (on the CPU compiling cost ~2 min per shape for +11% decode)"),
            "model_type": getattr(self.model.config, "model_type", None),
            "architectures": list(getattr(self.model.config, "architectures", None) or []),
            "weight_bytes": wb,
            "weight_bytes_source": (c.get("source") or "config shapes (qwen3)") + ", checked against the loaded model"
            if c.get("weights") else "loaded model parameters",
            "loaded_model_bytes": self.loaded["bytes"], "decode_read_bytes": c.get("decode_read", wb),
            "kv_bytes_per_token": c.get("kv_per_token"), "bytes_per_linear_weight": c.get("bytes_per_linear_weight"),
            "params": c.get("params"), "tied_embedding": c.get("tied_embedding"),
            "build_s": round(self.build_s, 2), "warmup_s": round(self.warmup_s, 2),
        }

    def _generate(self, prompts: list[list[int]], new: int) -> dict:
        torch = self.torch
        ids = torch.tensor(prompts, device=self.device)
        st = _Stamps(self._sync)
        self._sync()
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = self.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new,
                                      min_new_tokens=new, streamer=st, max_length=None)
        self._sync()
        t1 = time.perf_counter()
        gen = int(out.shape[-1] - ids.shape[-1])
        # st.t[0]: the prompt handed to the streamer; st.t[1]: first new token; st.t[-1]: last
        return {"t_call": t0, "t_return": t1, "stamps": st.t, "generated": gen}

    def decode(self, tokens: int = 128, reps: int = 5, batch: int = 1, prompt_len: int = 32, warmup: int = 1) -> dict:
        tokens, reps, batch, prompt_len = int(tokens), int(reps), int(batch), int(prompt_len)
        with warming():
            for _ in range(int(warmup)):
                self._generate(common.random_prompts(batch, prompt_len, self.vocab, self._next()), tokens)
        eng, wall, total, e2e, ttft, gen = [], [], [], [], [], []
        for i in range(reps):
            progress(f"transformers decode {tokens} tokens x {batch}, rep {i + 1}/{reps}")
            r = self._generate(common.random_prompts(batch, prompt_len, self.vocab, self._next()), tokens)
            common.check_count(r["generated"], tokens)
            s = r["stamps"]
            common.check_count(len(s) - 1, tokens, "streamed")
            rate = (tokens - 1) / (s[-1] - s[1])
            eng += [rate] * batch
            wall += [(tokens - 1) / (r["t_return"] - s[1])] * batch
            total.append(rate * batch)
            e2e += [r["t_return"] - r["t_call"]] * batch
            ttft += [s[1] - r["t_call"]] * batch
            gen += [r["generated"]] * batch
        return {"tok_s": eng, "tok_s_wall": wall, "total_tok_s": total, "e2e_s": e2e, "ttft_s": ttft,
                "generated": gen, "tokens": tokens, "batch": batch, "prompt_len": prompt_len,
                "timing": "engine: streamer stamps first..last new token; wall: caller, first token..generate return"}

    def prefill(self, prompt_len: int = 1024, reps: int = 5, repeat_prompt: bool = False, warmup: int = 1) -> dict:
        prompt_len, reps = int(prompt_len), int(reps)
        same = common.random_prompts(1, prompt_len, self.vocab, self._next())
        eng, wall = [], []
        for i in range(int(warmup) + reps):
            r = self._generate(same if repeat_prompt else common.random_prompts(1, prompt_len, self.vocab,
                                                                                self._next()), 1)
            if i < int(warmup):
                note_warmup(r["t_return"] - r["t_call"])
                continue
            s = r["stamps"]
            eng.append(prompt_len / (s[1] - s[0]))
            wall.append(prompt_len / (r["t_return"] - r["t_call"]))
        return {"tok_s": eng, "tok_s_wall": wall, "prompt_len": prompt_len, "repeat_prompt": bool(repeat_prompt),
                "timing": "engine: streamer stamp of the prompt..first token; wall: caller around generate"}

    def batch(self, concurrency: int = 16, tokens: int = 128, reps: int = 3, prompt_len: int = 32) -> dict:
        return self.decode(tokens=tokens, reps=reps, batch=concurrency, prompt_len=prompt_len)

    def _next(self) -> int:
        self._seed += 1
        return self._seed

    def close(self) -> None:
        pass
