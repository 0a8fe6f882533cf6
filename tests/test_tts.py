"""TTS probes on the real engines at test size: VoxCPM2 (voxcpm) and Magpie TTS (NeMo).

Every probe runs for real in an isolated engine worker (tiny configurations generated here,
random weights). One pytest session in a subprocess measures all VoxCPM2 probes on one engine;
the tests then read its results file.
"""
from __future__ import annotations

import importlib.util
import json
import textwrap
from pathlib import Path

import pytest

from pytest_voiceperf.stats import ONE_MEASUREMENT

ROOT = Path(__file__).resolve().parents[1]

needs_voxcpm = pytest.mark.skipif(importlib.util.find_spec("voxcpm") is None, reason="voxcpm not installed")
needs_nemo = pytest.mark.skipif(importlib.util.find_spec("nemo") is None, reason="nemo_toolkit not installed")


def claim(cid: str, measure: str, metric: str, expect: str = "{max: 1.0e9}") -> str:
    return textwrap.dedent(f"""\
        id: {cid}
        title: {cid}
        statement: test claim {cid}
        measure:
          {measure}
        metric: {metric}
        expect: {expect}
        noise: {{max_rel_spread: 1000}}
        """)


def run(pytester, claims: dict[str, str], *extra: str):
    d = pytester.path / "claims"
    d.mkdir(exist_ok=True)
    for name, text in claims.items():
        (d / f"{name}.yaml").write_text(text)
    out = pytester.path / "out.json"
    res = pytester.runpytest_subprocess("--voiceperf", "--voiceperf-claims", str(d), "--voiceperf-device", "cpu",
                                        "--voiceperf-json", str(out), "-p", "no:cacheprovider", "-v", *extra)
    doc = json.loads(out.read_text())
    return res, {r["claim"]: r for r in doc["results"]}, doc


# ---------------------------------------------------------------------------------------------
# no engine
def test_playback_model():
    from pytest_voiceperf.probes.tts import playback

    # chunks of 0.16 s arriving every 0.1 s: always early
    r = playback([0.2 + 0.1 * i for i in range(5)], [0.16] * 5)
    assert r["late"] == 0 and r["on_time_fraction"] == 1.0 and min(r["margins"]) > 0
    # every 0.2 s: the second chunk is 0.04 s late, playback stalls, then resumes from the arrival
    r = playback([0.2, 0.4, 0.6], [0.16] * 3)
    assert r["late"] == 2 and r["stall_s"] == pytest.approx(0.08)
    assert r["margins"][0] == pytest.approx(-0.04)


def test_linfit():
    from pytest_voiceperf.probes.tts import linfit

    f = linfit([1, 2, 3, 4, 5], [0.7, 1.2, 1.7, 2.2, 2.7])
    assert f["slope"] == pytest.approx(0.5) and f["intercept"] == pytest.approx(0.2) and f["r2"] == pytest.approx(1)


def test_shipped_claims_collect(pytester):
    """Every tts-* and pipeline claim of the issue ships and collects; the CPU profile picks tiny models."""
    ids = {p.stem for p in (ROOT / "claims" / "tts").glob("*.yaml")} | \
          {p.stem for p in (ROOT / "claims" / "pipeline").glob("*.yaml")}
    assert ids >= {"tts-linear-time", "tts-voxcpm-step-cost", "tts-diffusion-steps-proportional",
                   "tts-voxcpm-paper-rtf", "tts-streaming-first-audio", "tts-streaming-no-gaps",
                   "tts-magpie-frame-stacking", "pipeline-tts-dominates"}
    res = pytester.runpytest_subprocess("--voiceperf", "--voiceperf-claims", str(ROOT / "claims" / "tts"),
                                        "--voiceperf-claims", str(ROOT / "claims" / "pipeline"),
                                        "--voiceperf-device", "cpu", "--collect-only", "-q", "-p", "no:cacheprovider")
    text = res.stdout.str()
    assert "error" not in text.lower().replace("0 errors", "")
    assert "tts-linear-time[voxcpm2-tiny-pytorch]" in text and "tts-linear-time[voxcpm2-pytorch]" not in text
    # Nano-vLLM's rows are shown (unmeasured on the CPU), bf16 and optimize off only
    assert "tts-voxcpm-paper-rtf[voxcpm2-tiny-bfloat16-False-nanovllm]" in text
    assert "float32-False-nanovllm" not in text
    assert "tts-magpie-frame-stacking[magpie-tts-tiny]" in text
    assert "pipeline-tts-dominates" not in text  # CUDA only
    res = pytester.runpytest_subprocess("--voiceperf", "--voiceperf-claims", str(ROOT / "claims" / "tts"),
                                        "--voiceperf-claims", str(ROOT / "claims" / "pipeline"),
                                        "--voiceperf-profile", "cuda", "--collect-only", "-q", "-p", "no:cacheprovider")
    text = res.stdout.str()
    assert "tts-voxcpm-paper-rtf[voxcpm2-bfloat16-True-pytorch]" in text and "voxcpm2-tiny" not in text
    assert "tts-voxcpm-paper-rtf[voxcpm2-bfloat16-False-nanovllm]" in text
    assert "bfloat16-True-nanovllm" not in text and "float32-False-nanovllm" not in text
    assert "pipeline-tts-dominates[qwen3-4b]" in text


def test_optimize_needs_cuda(pytester):
    res, results, _ = run(pytester, {"opt": claim(
        "t-opt", "syn: {probe: tts.synthesis, model: voxcpm2-tiny, optimize: true}", "syn.rtf")})
    r = results["t-opt"]
    assert r["outcome"] == "unmeasured" and "CUDA" in r["reason"]


def test_nanovllm_needs_cuda_and_says_what_it_runs(pytester):
    """Nano-vLLM's rows are unmeasured on the CPU, and its limits are said, not silently run as PyTorch."""
    res, results, _ = run(pytester, {
        "nv": claim("t-nv", "syn: {probe: tts.synthesis, model: voxcpm2-tiny, runtime: nanovllm}", "syn.rtf"),
        "nvsteps": claim("t-nvsteps", "st: {probe: tts.steps, model: voxcpm2-tiny, runtime: nanovllm}",
                         "st.fixed_share"),
        "bad": claim("t-rt", "syn: {probe: tts.synthesis, model: voxcpm2-tiny, runtime: onnx}", "syn.rtf")})
    assert results["t-nv"]["outcome"] == "unmeasured" and "needs CUDA" in results["t-nv"]["reason"]
    assert results["t-nvsteps"]["outcome"] == "unmeasured" and "step count" in results["t-nvsteps"]["reason"]
    assert results["bad"]["outcome"] == "error" and "onnx" in results["bad"]["reason"]  # a file error, named


@needs_voxcpm
def test_nanovllm_checkpoint_is_complete(tmp_path):
    """The random-weight folder Nano-vLLM loads holds every parameter of VoxCPM2 (its loader is strict),
    in the published layout, and its stop head never fires."""
    import torch
    from safetensors.torch import load_file

    from pytest_voiceperf import models
    from pytest_voiceperf.engines.nanovllm_engine import checkpoint_dir, write_checkpoint
    from pytest_voiceperf.engines.voxcpm_engine import install_torchaudio_stub

    cfg = models.get("voxcpm2-tiny").config
    d = str(tmp_path / "ck")
    out = write_checkpoint(d, cfg)
    assert sorted(p.name for p in Path(d).iterdir()) == ["audiovae.pth", "config.json", "model.safetensors",
                                                         "tokenizer.json", "tokenizer_config.json"]
    install_torchaudio_stub()
    from transformers import LlamaTokenizerFast
    from voxcpm.model.voxcpm2 import AudioVAEV2, VoxCPM2Model, VoxCPMConfig

    vcfg = VoxCPMConfig.model_validate(cfg)
    vae = AudioVAEV2(config=vcfg.audio_vae_config)
    ref = VoxCPM2Model(vcfg, LlamaTokenizerFast.from_pretrained(d), vae, None, device="cpu")
    sd = load_file(str(Path(d) / "model.safetensors"))
    want = {k for k in ref.state_dict() if not k.startswith("audio_vae.")}
    assert set(sd) == want and out["params"] == sum(v.numel() for v in sd.values())
    assert {str(v.dtype) for v in sd.values() if v.is_floating_point()} == {"torch.bfloat16"}
    assert float(sd["base_lm.layers.0.self_attn.q_proj.weight"].float().std()) > 0  # random, not zeros
    vae.load_state_dict(torch.load(str(Path(d) / "audiovae.pth"))["state_dict"])  # strict
    h = torch.randn(256, vcfg.lm_config.hidden_size) * 50
    logits = torch.nn.functional.silu(h @ sd["stop_proj.weight"].float().T + sd["stop_proj.bias"].float()) \
        @ sd["stop_head.weight"].float().T
    assert int(logits.argmax(-1).sum()) == 0  # never "stop"
    assert checkpoint_dir(cfg) == checkpoint_dir(json.loads(json.dumps(cfg)))
    assert checkpoint_dir(cfg) != checkpoint_dir(models.get("voxcpm2").config)


def test_unknown_dtype_is_a_claim_error(pytester):
    res, results, _ = run(pytester, {"bad": claim(
        "t-bad", "syn: {probe: tts.synthesis, model: voxcpm2-tiny, dtype: int8}", "syn.rtf")})
    assert [r["outcome"] for r in results.values()] == ["error"]
    assert "int8" in next(iter(results.values()))["reason"]


# ---------------------------------------------------------------------------------------------
# VoxCPM2, tiny config, really generated: one session, one engine for the three probes
@pytest.fixture(scope="module")
def voxcpm_session(tmp_path_factory):
    """Runs tts.synthesis, tts.steps and tts.streaming on voxcpm2-tiny (and the checkpoint path)."""
    if importlib.util.find_spec("voxcpm") is None:
        pytest.skip("voxcpm not installed")
    import subprocess
    import sys

    from pytest_voiceperf import models
    from pytest_voiceperf.engines.voxcpm_engine import _write_random_dir

    tmp = tmp_path_factory.mktemp("tts")
    ckpt = tmp / "ckpt"
    ckpt.mkdir()
    cfg = dict(models.get("voxcpm2-tiny").config)
    _write_random_dir(str(ckpt), cfg)
    (ckpt / "config.json").write_text(json.dumps(cfg))
    d = tmp / "claims"
    d.mkdir()
    common = "model: voxcpm2-tiny, dtype: float32"
    (d / "syn.yaml").write_text(claim(
        "t-syn", f'syn: {{probe: tts.synthesis, {common}, patches: "2,4,6,8,10", timesteps: 4, reps: 2}}',
        "syn.rtf", "{max: 100.0}"))  # a timed metric far from its bound: decided after the minimum rounds
    (d / "rtf.yaml").write_text(claim(
        "t-rtf", f"syn: {{probe: tts.rtf, {common}, patches: 6, timesteps: 4, reps: 2}}", "syn.rtf", "{max: 100.0}"))
    (d / "steps.yaml").write_text(claim(
        "t-steps", f'st: {{probe: tts.steps, {common}, timesteps: "2,4,8", patches: "2,6", reps: 2, ref_timesteps: 8}}',
        "st.fixed_share"))
    (d / "stream.yaml").write_text(claim(
        "t-stream", f"st: {{probe: tts.streaming, {common}, patches: 6, timesteps: 4, reps: 2}}",
        "st.first_chunk_s / st.whole_s", "{max: 1.0}"))
    (d / "ckpt.yaml").write_text(claim(
        "t-ckpt", 'syn: {probe: tts.synthesis, model: my-voxcpm, dtype: float32, patches: "2,3", timesteps: 2, reps: 1}',
        "syn.audio_s_per_patch", "{approx: 0.16, rel: 0.01}"))
    out = tmp / "out.json"
    proc = subprocess.run([sys.executable, "-m", "pytest", "--voiceperf", "--voiceperf-claims", str(d),
                           "--voiceperf-device", "cpu", "--voiceperf-json", str(out), "-p", "no:cacheprovider",
                           "--voiceperf-model", f"my-voxcpm={ckpt}", "-v", "--rootdir", str(tmp)],
                          cwd=tmp, capture_output=True, text=True, timeout=900)
    assert out.exists(), proc.stdout[-4000:] + proc.stderr[-2000:]
    doc = json.loads(out.read_text())
    return {r["claim"]: r for r in doc["results"]}, doc, proc.stdout


def _passed_probe(results: dict, claim_id: str, alias: str, log: str) -> tuple[dict, dict, dict]:
    """The probe record, values and info of a case that must have passed (the log tail if not)."""
    r = results[claim_id]
    assert r["outcome"] == "passed", log[-3000:]
    p = r["probes"][alias]
    return p, p["values"], p["info"]


@needs_voxcpm
def test_synthesis_probe(voxcpm_session):
    results, doc, log = voxcpm_session
    p, v, info = _passed_probe(results, "t-syn", "syn", log)
    assert v["points"] == 5 and v["audio_s_per_patch"] == pytest.approx(0.16)
    assert info["audio_s"] == pytest.approx([0.32, 0.64, 0.96, 1.28, 1.6])  # exactly 7,680 samples per patch
    assert v["slope"] > 0 and 0 <= v["r2"] <= 1 and 0 <= v["r2_best"] <= 1
    assert v["rtf"] > 0 and v["peak_mem_bytes"] > 0 and v["max_spread"] >= 0
    # samples: one slope per round; each round's 2 repetitions are kept in info
    assert len(p["samples"]["slope"]) == info["rounds"] >= 3 and all(len(t) == 2 for t in info["times_s"])
    assert all(len(rep["slope"]) == 2 for rep in info["repetitions"])
    # every length is warmed up in the first round; a later round of the same engine re-primes once
    assert log.count("voxcpm: warm-up at 10 patches, 4 diffusion steps") == 1
    assert log.count("voxcpm: warm-up at 2 patches, 4 diffusion steps (re-prime)") == info["rounds"] - 1
    assert info["dummy"] is True and info["engine"] == "voxcpm" and info["params"] > 1e6
    assert info["torchaudio"] == "real" or info["torchaudio"].startswith("stub")
    assert info["versions"]["voxcpm"]
    eng = [e for e in doc["provenance"]["engines"] if e["family"] == "voxcpm"]
    assert eng and eng[0]["info"]["dtype"] == "float32" and eng[0]["info"]["optimize"] is False


@needs_voxcpm
def test_rtf_probe_times_one_length(voxcpm_session):
    """tts.rtf: the real-time factor of one length, without the fit's other lengths."""
    results, _, log = voxcpm_session
    p, v, info = _passed_probe(results, "t-rtf", "syn", log)
    assert info["patches"] == [6] and v["audio_s"] == pytest.approx(0.96)
    assert v["rtf"] == pytest.approx(v["time_s"] / v["audio_s"]) and v["rtf"] > 0 and v["peak_mem_bytes"] > 0
    assert len(p["samples"]["rtf"]) == info["rounds"] >= 3
    assert "tts.rtf: voxcpm2-tiny at 6 patches" in log


@needs_voxcpm
def test_steps_probe(voxcpm_session):
    results, _, log = voxcpm_session
    r = results["t-steps"]
    assert r["outcome"] == "passed", log[-3000:]
    v, info = r["probes"]["st"]["values"], r["probes"]["st"]["info"]
    assert set(info["patch_s"]) == {"2", "4", "8"} and all(x > 0 for x in info["patch_s"].values())
    assert v["per_step_s"] > 0 and v["proportional_speedup"] == 4
    # values are medians over rounds; info is the last round's, whose figure is the last sample
    assert r["probes"]["st"]["samples"]["patch_s_ref"][-1] == pytest.approx(info["patch_s"]["8"])
    s = r["probes"]["st"]["samples"]  # per round: each round's share is its own ratio
    assert all(f == pytest.approx(a / b) for f, a, b in zip(s["fixed_share"], s["fixed_s"], s["patch_s_ref"]))
    assert info["diffusion_calls_per_patch"] == {"2": 1, "4": 3, "8": 7}


@needs_voxcpm
def test_streaming_probe(voxcpm_session):
    results, _, log = voxcpm_session
    r = results["t-stream"]
    assert r["outcome"] == "passed", log[-3000:]
    v, info = r["probes"]["st"]["values"], r["probes"]["st"]["info"]
    assert len(info["arrivals_s"]) == 2 and all(len(a) == 6 for a in info["arrivals_s"])
    assert all(s == [7680] * 6 for s in info["chunk_samples"])
    assert all(len(m) == 5 for m in info["margins_s"])  # one verdict per later chunk
    assert v["chunk_audio_s"] == pytest.approx(0.16) and v["audio_s"] == pytest.approx(0.96)
    assert 0 < v["first_chunk_s"] < v["whole_s"] and 0 <= v["on_time_fraction"] <= 1
    assert v["no_gaps"] == (1.0 if v["late_chunks"] == 0 else 0.0)


@needs_voxcpm
def test_checkpoint_dir_through_voiceperf_model(voxcpm_session):
    results, doc, log = voxcpm_session
    r = results["t-ckpt"]
    assert r["outcome"] == "passed", log[-3000:]
    assert r["rounds"] == 1  # audio per patch is a count of samples: exact, one round
    assert r["probes"]["syn"]["info"]["dummy"] is False
    assert doc["provenance"]["models"]["my-voxcpm"]["dummy"] is False


# ---------------------------------------------------------------------------------------------
# Magpie TTS (NeMo's MagpieTTSModel), tiny config
@needs_nemo
def test_magpie_probe_frame_stacking(pytester):
    res, results, doc = run(pytester, {
        "fs2": claim("t-fs2", "mag: {probe: tts.magpie, model: magpie-tts-tiny, frame_stacking: 2, frames: 8, reps: 1}",
                     "mag.steps_per_frame", "{approx: 0.5, rel: 0.01}"),
        "fs1": claim("t-fs1", "mag: {probe: tts.magpie, model: magpie-tts-tiny, frame_stacking: 1, frames: 8, reps: 1}",
                     "mag.steps_per_frame", "{approx: 1.0, rel: 0.01}"),
    })
    for cid, fs in (("t-fs2", 2), ("t-fs1", 1)):
        r = results[cid]
        assert r["outcome"] == "passed", res.stdout.str()[-3000:]
        v, info = r["probes"]["mag"]["values"], r["probes"]["mag"]["info"]
        assert info["frame_stacking"] == fs and info["class"] == "MagpieTTSModel" and info["dummy"] is True
        assert v["lt_calls_per_step"] == 8 * fs  # 8 codebooks per stacked frame
        assert v["frame_audio_s"] == pytest.approx(1024 / 22050) and v["step_s"] > 0
        assert info["runs"][0]["frames"] == 8 and info["runs"][0]["samples"] == 8 * 1024


# ---------------------------------------------------------------------------------------------
# the pipeline: ASR + LLM + TTS engines at test size
@pytest.mark.slow
@pytest.mark.skipif(any(importlib.util.find_spec(m) is None for m in ("voxcpm", "nemo", "vllm")),
                    reason="needs voxcpm, nemo and vllm")
def test_pipeline_turn(pytester):
    res, results, _ = run(pytester, {"turn": claim(
        "t-turn", "turn: {probe: pipeline.turn, asr_model: fastconformer-tiny, asr_chunk_ms: 560, "
                  "llm_model: qwen3-tiny, reply_tokens: 8, tts_model: voxcpm2-tiny, tts_timesteps: 4, "
                  "tts_dtype: float32, reps: 2, tts_reps: 1}",
        "turn.tts_share", "{between: [0, 1]}")}, "--voiceperf-timeout", "1500")
    r = results["t-turn"]
    assert r["outcome"] == "passed", res.stdout.str()[-4000:]
    # one synthesis run per round leaves no per-run shares, and still the turn is timed: decided by
    # the spread of its rounds, not as a one-figure search
    assert r["rounds"] >= 3 and r["ci_method"] != ONE_MEASUREMENT and r["ci"][0] < r["ci"][1]
    v, per_round = r["probes"]["turn"]["values"], r["probes"]["turn"]["samples"]
    # each round's three shares add up to one (the values are medians over rounds, output by output)
    assert all(a + b + c == pytest.approx(1) for a, b, c in
               zip(per_round["asr_share"], per_round["llm_share"], per_round["tts_share"]))
    assert v["asr_s"] > 0 and v["llm_s"] > 0 and v["tts_s"] > 0
    assert v["reply_audio_s"] == pytest.approx(round(8 * 0.3 / 0.16) * 0.16)
