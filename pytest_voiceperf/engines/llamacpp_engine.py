"""llama.cpp engine (llama-cpp-python) on a GGUF written here with random weights.

The GGUF is written with the ``gguf`` package from the catalog's Qwen3 shape (llama.cpp's
``qwen3`` architecture): every 2-D weight in q4_0 (random 4-bit codes with a small fp16 scale
per 32-weight block; q8_0 likewise with 8-bit codes) or f16 (random sign and mantissa, |w| in
[2^-7, 2^-6)), norms in f32, a placeholder vocabulary (256 byte
tokens and numbered tokens; no text is ever tokenized). Speed does not depend on weight
values. ``weights`` may instead point at a real GGUF file.

Timing: llama.cpp's own performance counters (``llama_perf_context``: eval time and count of
single-token decode calls, prompt-eval time and count) are the engine's figure; the caller's
``time.perf_counter`` around the same calls is the plugin's.
"""
from __future__ import annotations

import json
import os
import time

from ..exceptions import Unmeasured
from . import caches
from . import llm_common as common
from .worker import import_gguf, note_warmup, progress, warming

WARMUP_TOKENS = 8


def write_gguf(path: str, cfg: dict, quant: str = "q4_0", seed: int = 0) -> dict:
    """Write a Qwen3-architecture GGUF with random weights; returns {name: bytes} of its tensors."""
    gguf = import_gguf()
    import numpy as np

    rng = np.random.default_rng(seed)
    h, L, inter, V = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["intermediate_size"], cfg["vocab_size"]
    nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    qtype = {"q4_0": gguf.GGMLQuantizationType.Q4_0, "q8_0": gguf.GGMLQuantizationType.Q8_0,
             "f16": gguf.GGMLQuantizationType.F16}[quant]
    tmp = path + f".tmp{os.getpid()}"
    w = gguf.GGUFWriter(tmp, "qwen3")
    w.add_name("voiceperf random qwen3")
    w.add_context_length(int(cfg.get("max_position_embeddings", 40960)))
    w.add_embedding_length(h)
    w.add_block_count(L)
    w.add_feed_forward_length(inter)
    w.add_head_count(nh)
    w.add_head_count_kv(nkv)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_freq_base(float(cfg.get("rope_theta", 1e6)))
    w.add_layer_norm_rms_eps(float(cfg.get("rms_norm_eps", 1e-6)))
    w.add_file_type({"q4_0": gguf.LlamaFileType.MOSTLY_Q4_0, "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
                     "f16": gguf.LlamaFileType.MOSTLY_F16}[quant])
    # placeholder vocabulary (SentencePiece-style, with the byte tokens llama.cpp looks up)
    toks = [f"<0x{i:02X}>".encode() for i in range(256)] + [f"<t{i}>".encode() for i in range(256, V)]
    types = [gguf.TokenType.BYTE] * 256 + [gguf.TokenType.NORMAL] * (V - 256)
    w.add_tokenizer_model("llama")
    w.add_token_list(toks)
    w.add_token_scores([0.0] * V)
    w.add_token_types(types)
    w.add_bos_token_id(V - 2)
    w.add_eos_token_id(V - 1)
    sizes: dict[str, int] = {}

    # random integers straight from the generator: a normal draw per weight took 16 s of the 0.6B's
    # 26 s f16 write on the 2-core CPU, rng.bytes 12 s; rng.integers is ~20x faster than rng.bytes
    def mat(name: str, rows: int, cols: int):
        if qtype == gguf.GGMLQuantizationType.F16:
            # random sign and mantissa, exponent fixed: |w| in [2^-7, 2^-6), no zero, NaN or subnormal
            bits = rng.integers(0, 1 << 16, (rows, cols), dtype=np.uint16)
            bits &= 0x83FF  # in place: new arrays cost page faults (3 s of the embedding here)
            bits |= 8 << 10
            data = bits.view(np.float16)
            w.add_tensor(name, data)
        else:
            bs, ts = gguf.GGML_QUANT_SIZES[qtype]  # weights per block, bytes per block
            nblk = cols // bs
            blocks = rng.integers(0, 1 << 8, (rows, nblk, ts), dtype=np.uint8)
            scale = np.frombuffer(np.float16(0.002 if quant == "q4_0" else 0.0002).tobytes(), dtype=np.uint8)
            blocks[:, :, 0:2] = scale  # the fp16 block scale (first 2 bytes of each block)
            data = blocks.reshape(rows, nblk * ts)
            w.add_tensor(name, data, raw_dtype=qtype)
        sizes[name] = data.nbytes

    def vec(name: str, n: int):
        data = np.ones(n, dtype=np.float32)
        w.add_tensor(name, data)
        sizes[name] = data.nbytes

    mat("token_embd.weight", V, h)
    for i in range(L):
        p = f"blk.{i}."
        vec(p + "attn_norm.weight", h)
        mat(p + "attn_q.weight", nh * hd, h)
        mat(p + "attn_k.weight", nkv * hd, h)
        mat(p + "attn_v.weight", nkv * hd, h)
        mat(p + "attn_output.weight", h, nh * hd)
        vec(p + "attn_q_norm.weight", hd)
        vec(p + "attn_k_norm.weight", hd)
        vec(p + "ffn_norm.weight", h)
        mat(p + "ffn_gate.weight", inter, h)
        mat(p + "ffn_up.weight", inter, h)
        mat(p + "ffn_down.weight", h, inter)
    vec("output_norm.weight", h)
    if not cfg.get("tie_word_embeddings", True):
        mat("output.weight", V, h)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, path)
    return sizes


# the tensor sizes of a GGUF written here, kept beside it: reading them back with GGUFReader parses the
# whole 152k-token vocabulary in Python (4-9 s of every 0.6B start on the 2-core CPU)
def _sizes_path(gguf_path: str) -> str:
    return gguf_path + ".tensor-bytes.json"


def _save_sizes(gguf_path: str, sizes: dict[str, int]) -> None:
    tmp = f"{_sizes_path(gguf_path)}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(sizes, f)
    os.replace(tmp, _sizes_path(gguf_path))


def _saved_sizes(gguf_path: str) -> dict[str, int] | None:
    try:
        with open(_sizes_path(gguf_path)) as f:
            sizes = json.load(f)
    except (OSError, ValueError):
        return None
    ok = isinstance(sizes, dict) and sizes and all(isinstance(v, int) for v in sizes.values())
    return sizes if ok else None


def _tensor_bytes(path: str) -> dict[str, int]:
    gguf = import_gguf()

    r = gguf.GGUFReader(path)
    return {t.name: int(t.n_bytes) for t in r.tensors}


class Engine:
    def __init__(self, model: str, config: dict | None = None, weights: str | None = None, device: str = "cpu",
                 quant: str = "q4_0", n_ctx: int = 8192, n_threads: int = 0, seed: int = 0,
                 use_extra_bufts: bool = False, use_mmap: bool = False, **_):
        import llama_cpp

        if device == "cuda" and not llama_cpp.llama_supports_gpu_offload():
            raise Unmeasured("llama-cpp-python was built without GPU offload (the PyPI build is CPU-only); "
                             "on a GPU runner install it with CMAKE_ARGS='-DGGML_CUDA=on' to measure this claim")
        self.name, self.device, self.quant = model, device, quant
        self.config = config or {}
        self.dummy = weights is None
        t0 = time.perf_counter()
        if weights:
            path = weights
        else:
            if not config or config.get("model_type") != "qwen3":
                raise Unmeasured(f"no Qwen3 shape for {model!r} to write a GGUF from")
            # beside the model's other files in the user cache (engines/caches.py), by config
            path = os.path.join(caches.cache_dir(model, config), f"random-{quant}-seed{int(seed)}.gguf")
            if not os.path.exists(path):
                progress(f"llama.cpp: writing {model} GGUF with random {quant} weights")
                os.makedirs(os.path.dirname(path), exist_ok=True)
                tmp = f"{path}.{os.getpid()}.tmp"  # a write cut short never passes for a whole file
                written = write_gguf(tmp, config, quant, seed)
                _save_sizes(path, written)
                os.replace(tmp, path)
        self.write_s = time.perf_counter() - t0
        self.path = path
        sizes = (None if weights else _saved_sizes(path)) or _tensor_bytes(path)
        self.weight_bytes = sum(sizes.values())
        tied = "output.weight" not in sizes
        # the input embedding is a row lookup; read in full only when it doubles as the output matrix
        self.read_bytes = self.weight_bytes - (0 if tied else sizes.get("token_embd.weight", 0))
        self.tied = tied
        # llama-cpp-python's own default (half the logical CPUs); its spinning thread pool collapses
        # when other work shares the cores (2 threads on this 2-core machine under load: 6.6 tok/s,
        # 1 thread: 11.9 tok/s for the 0.6B q4_0 shape)
        self.n_threads = int(n_threads) or max((os.cpu_count() or 2) // 2, 1)
        t1 = time.perf_counter()
        # llama.cpp's CPU "extra buffer types" (weight repacking for AMX / AVX512 kernels) segfault in
        # this build on any multi-token batch of a q4_0 or q8_0 model (seen with llama-cpp-python
        # 0.3.36 on a Sapphire Rapids CPU): load without them; the plain ggml CPU kernels run
        import llama_cpp.llama_cpp as lcc

        orig = lcc.llama_model_default_params
        self.extra_bufts = bool(use_extra_bufts)
        self.use_mmap = bool(use_mmap)

        def _params():
            mp = orig()
            mp.use_extra_bufts = self.extra_bufts
            return mp

        lcc.llama_model_default_params = _params
        # llama.cpp says how many layers it put on the GPU only in its load log: read it there
        lines: list[str] = []

        @lcc.llama_log_callback
        def _log(level, text, user_data):
            lines.append(text.decode("utf-8", "replace"))

        lcc.llama_log_set(_log, None)
        try:
            # weights read into the process's own memory, not mapped from the page cache: a mapped
            # GGUF decodes at a speed that depends on the file's page-cache history (2-core VM, 0.6B
            # f16: 9.5 tok/s from a file just written, 8.3-9.2 from the same bytes written 20 min
            # earlier; read in, 9.6-10.0 from either), which flipped llm-decode-overhead between two
            # runs of one commit (results/cpu/pair-7cc4459/)
            self.llm = llama_cpp.Llama(model_path=path, n_ctx=int(n_ctx), n_batch=2048, n_ubatch=512,
                                       n_threads=self.n_threads, n_threads_batch=self.n_threads,
                                       n_gpu_layers=-1 if device == "cuda" else 0, seed=seed, verbose=False,
                                       use_mmap=self.use_mmap)
        finally:
            lcc.llama_model_default_params = orig
            from llama_cpp import _logger
            lcc.llama_log_set(_logger.llama_log_callback, None)
        import re
        found = re.findall(r"offloaded (\d+)/(\d+) layers to GPU", "".join(lines))
        self.offloaded = f"{found[-1][0]}/{found[-1][1]}" if found else None
        if device == "cuda" and found and found[-1][0] != found[-1][1]:
            raise Unmeasured(f"llama.cpp put only {self.offloaded} layers on the GPU (n_gpu_layers=-1 asked for all)")
        self.load_s = time.perf_counter() - t1
        self.vocab = self.llm.n_vocab()
        self.n_ctx = int(n_ctx)
        self.version = llama_cpp.__version__
        self._lc = llama_cpp
        cfg = self.config
        self.kv_per_token = (2 * cfg["num_hidden_layers"] * cfg["num_key_value_heads"] * cfg["head_dim"] * 2
                             if cfg else None)  # f16 KV cache (llama.cpp default)
        self._seed = 5000 + seed
        with warming():
            self.decode(tokens=4, reps=1, prompt_len=8, warmup=0)

    def info(self) -> dict:
        n = self.config and common.models.qwen3_param_counts(self.config)
        return {"engine": "llamacpp", "engine_version": self.version, "model": self.name, "gguf": self.path,
                "dummy_weights": self.dummy, "device": self.device, "quantization": self.quant,
                "weight_bytes": self.weight_bytes, "weight_bytes_source": "GGUF tensor data bytes",
                "decode_read_bytes": self.read_bytes, "kv_bytes_per_token": self.kv_per_token,
                "bytes_per_linear_weight": {"q4_0": 18 / 32, "q8_0": 34 / 32, "f16": 2}.get(self.quant),
                "params": n or None,
                "tied_embedding": ("counted once; decode reads it once per token as the output matrix" if self.tied
                                   else "untied: output matrix read per token, token_embd only one row per token"),
                "n_threads": self.n_threads, "gpu_offload": self.device == "cuda",
                "layers_offloaded": self.offloaded,  # llama.cpp's own load log: "offloaded N/M layers to GPU"
                "use_extra_bufts": self.extra_bufts, "use_mmap": self.use_mmap,
                "write_s": round(self.write_s, 2), "load_s": round(self.load_s, 2)}

    def _perf(self) -> tuple[float, int, float, int]:
        d = self._lc.llama_perf_context(self.llm.ctx)
        # llama.cpp reports max(1, count): a zero count shows as 1 with zero time
        return (d.t_eval_ms, d.n_eval if d.t_eval_ms > 0 else 0,
                d.t_p_eval_ms, d.n_p_eval if d.t_p_eval_ms > 0 else 0)

    def _argmax(self) -> int:
        import numpy as np

        return int(np.ctypeslib.as_array(self.llm._ctx.get_logits(), shape=(self.vocab,)).argmax())

    def _prompt(self, n: int) -> list[int]:
        self._seed += 1
        return common.random_prompts(1, n, self.vocab, self._seed)[0]

    def decode(self, tokens: int = 128, reps: int = 5, batch: int = 1, prompt_len: int = 32, warmup: int = 1) -> dict:
        if int(batch) != 1:
            raise Unmeasured("the llama.cpp engine here decodes one sequence at a time (batch 1)")
        tokens, reps, prompt_len = int(tokens), int(reps), int(prompt_len)
        eng, wall, e2e, ttft, gen = [], [], [], [], []
        for i in range(int(warmup) + reps):
            # a warm-up needs few tokens: each one reads every weight (no kernel is built at run time)
            n = tokens if i >= int(warmup) else min(tokens, WARMUP_TOKENS)
            if i >= int(warmup):
                progress(f"llama.cpp decode {tokens} tokens, rep {i - int(warmup) + 1}/{reps}")
            self.llm.reset()
            self._lc.llama_perf_context_reset(self.llm.ctx)
            ids = self._prompt(prompt_len)
            t0 = time.perf_counter()
            self.llm.eval(ids)
            nxt = self._argmax()  # the first generated token (greedy)
            t_first = time.perf_counter()
            e0, n0, _, _ = self._perf()
            for _ in range(n - 1):
                self.llm.eval([nxt])
                nxt = self._argmax()
            t_last = time.perf_counter()
            e1, n1, _, _ = self._perf()
            n_dec = n1 - n0
            common.check_count(n_dec + 1, n)
            if i < int(warmup):
                note_warmup(t_last - t0)
                continue
            eng.append(n_dec / ((e1 - e0) / 1000.0))
            wall.append((tokens - 1) / (t_last - t_first))
            e2e.append(t_last - t0)
            ttft.append(t_first - t0)
            gen.append(n_dec + 1)
        return {"tok_s": eng, "tok_s_wall": wall, "total_tok_s": eng, "e2e_s": e2e, "ttft_s": ttft,
                "generated": gen, "tokens": tokens, "batch": 1, "prompt_len": prompt_len,
                "timing": "engine: llama_perf_context t_eval_ms over n_eval single-token decodes; "
                          "wall: caller perf_counter first..last token"}

    def prefill(self, prompt_len: int = 1024, reps: int = 5, repeat_prompt: bool = False, warmup: int = 1) -> dict:
        prompt_len, reps = int(prompt_len), int(reps)
        if prompt_len + 1 > self.n_ctx:
            raise Unmeasured(f"prompt of {prompt_len} tokens exceeds n_ctx {self.n_ctx}")
        same = self._prompt(prompt_len)
        eng, wall = [], []
        for i in range(int(warmup) + reps):
            ids = same if repeat_prompt else self._prompt(prompt_len)
            self.llm.reset()  # no prompt cache: every prompt is computed
            self._lc.llama_perf_context_reset(self.llm.ctx)
            t0 = time.perf_counter()
            self.llm.eval(ids)
            self._argmax()  # the first token: waits for the computation and books its time
            t1 = time.perf_counter()
            _, _, pe, pn = self._perf()
            if i < int(warmup):
                note_warmup(t1 - t0)
                continue
            eng.append(prompt_len / (pe / 1000.0) if pe > 0 else float("inf"))
            wall.append(prompt_len / (t1 - t0))
        return {"tok_s": eng, "tok_s_wall": wall, "prompt_len": prompt_len, "repeat_prompt": bool(repeat_prompt),
                "timing": "engine: prompt_len / llama_perf_context t_p_eval_ms; wall: caller around eval"}

    def batch(self, concurrency: int = 16, **_) -> dict:
        if int(concurrency) != 1:
            raise Unmeasured("the llama.cpp engine here decodes one sequence at a time; use vllm for batching")
        return self.decode(**_)

    def close(self) -> None:
        try:
            self.llm.close()
        except Exception:
            pass
