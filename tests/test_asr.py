"""Streaming ASR: the asr.* probes on a tiny cache-aware FastConformer-RNNT, really streamed with
NeMo in an engine worker, run through the plugin as a user would (small claim files)."""
import importlib.util
import json
import subprocess
import sys
import textwrap

import pytest

needs_nemo = pytest.mark.skipif(importlib.util.find_spec("nemo") is None, reason="nemo_toolkit[asr] not installed")

TINY = "fastconformer-tiny"


def claim(id, measure, metric, expect, params="", extra=""):
    text = f"id: {id}\ntitle: t\nstatement: t\n"
    if params:
        text += f"params:\n{textwrap.indent(textwrap.dedent(params).strip(), '  ')}\n"
    text += f"measure:\n{textwrap.indent(textwrap.dedent(measure).strip(), '  ')}\n"
    text += f"metric: \"{metric}\"\nexpect: {expect}\n"
    return text + textwrap.dedent(extra)


def run(p, *args):
    return p.runpytest_subprocess("--voiceperf", "--voiceperf-claims", "claims", "--voiceperf-json", "out.json",
                                  "-p", "no:cacheprovider", *args)


def outcomes(r) -> dict:
    """Counts from the summary line; unmeasured cases are their own category."""
    o = r.parseoutcomes()
    return {k: v for k, v in o.items() if k not in ("seconds", "warnings", "deselected")}


def results(p):
    return {r["nodeid"].split("::")[-1]: r for r in json.loads((p.path / "out.json").read_text())["results"]}


@pytest.fixture
def vp(pytester):
    pytester.mkdir("claims")
    return pytester


def write(p, name, text):
    (p.path / "claims" / f"{name}.yaml").write_text(text)


# -- without an engine --------------------------------------------------------------------------
def test_cer_scores_on_a_tiny_manifest(tmp_path):
    """jiwer CER per utterance, empty results counted, NeMo manifest paths relative to the manifest."""
    from pytest_voiceperf.engines.nemo_engine import cer_scores, normalize_text, read_manifest

    (tmp_path / "a").mkdir()
    lines = [{"audio_filepath": "a/1.wav", "text": "Hello, world!", "duration": 1.0},
             {"audio_filepath": str(tmp_path / "2.wav"), "text": "안녕하세요", "lang": "ko-KR"},
             {"audio_filepath": "3.wav", "text": "abcd"}]
    m = tmp_path / "m.json"
    m.write_text("\n".join(json.dumps(x, ensure_ascii=False) for x in lines) + "\n\n")
    rows = read_manifest(str(m))
    assert [r["audio_filepath"] for r in rows] == [str(tmp_path / "a/1.wav"), str(tmp_path / "2.wav"),
                                                   str(tmp_path / "3.wav")]
    assert normalize_text("Hello, World! <ko-KR>") == "hello world"
    s = cer_scores([r["text"] for r in rows], ["hello world", "", "abed"])
    assert s["per_utterance"] == [0.0, 1.0, 0.25]  # exact, empty = 1.0, one substitution in 4
    assert s["empty"] == 1 and s["n"] == 3
    assert s["cer"] == pytest.approx(1.25 / 3)
    # corpus CER: (0 + 5 deletions + 1 substitution) / (11 + 5 + 4) reference characters
    assert s["corpus_cer"] == pytest.approx(6 / 20)
    bad = tmp_path / "bad.json"
    bad.write_text('{"audio_filepath": "x.wav"}\n')
    with pytest.raises(ValueError, match="needs audio_filepath and text"):
        read_manifest(str(bad))


def test_cer_unmeasured_without_weights_or_manifest(vp):
    """CER of random weights means nothing: unmeasured with the reason, without starting an engine."""
    m = f"c: {{probe: asr.cer, chunk_ms: 80, model: {TINY}, manifest: ko}}"
    write(vp, "cer", claim("asr-t-cer", m, "c.cer", "{max: 0.1}"))
    write(vp, "cer-req", claim("asr-t-cer-req", m, "c.cer", "{max: 0.1}",
                               extra=f'requires: ["weights:{TINY}", "data:ko"]\n'))
    r = run(vp)
    assert outcomes(r) == {"unmeasured": 2}
    res = results(vp)
    assert "CER needs trained weights" in res["asr-t-cer"]["reason"]
    assert "trained weights absent" in res["asr-t-cer-req"]["reason"]
    # weights given but no manifest: the data set is named in the reason
    (vp.path / "w.nemo").write_bytes(b"")
    r = run(vp, "--voiceperf-model", f"{TINY}=w.nemo")
    res = results(vp)
    assert "--voiceperf-data ko=PATH" in res["asr-t-cer"]["reason"]
    assert "needs data set 'ko'" in res["asr-t-cer-req"]["reason"]


def test_streams_unmeasured_on_cpu(vp):
    write(vp, "streams", claim("asr-t-streams", f"s: {{probe: asr.streams, chunk_ms: 80, model: {TINY}}}",
                               "s.streams", "{min: 1}"))
    r = run(vp, "--voiceperf-device", "cpu")
    assert outcomes(r) == {"unmeasured": 1}
    assert "needs a CUDA GPU" in results(vp)["asr-t-streams"]["reason"]


# -- the tiny model, really streamed ------------------------------------------------------------
@needs_nemo
def test_streaming_config_chunk_table(vp):
    """The model's own streaming config: chunk = (right + 1) x 80 ms, 56 frames = 4.48 s, 80 ms frames."""
    write(vp, "table", claim(
        "asr-t-table", f'cfg: {{probe: asr.streaming_config, right_context: "{{rc}}", model: {TINY}}}',
        "abs(cfg.chunk_ms - (rc + 1) * 80) + abs(cfg.left_context_ms - 4480)", "{equals: 0}",
        params="rc: [0, 1, 3, 6, 13]"))
    write(vp, "frame", claim("asr-t-frame", f"cfg: {{probe: asr.streaming_config, right_context: 0, model: {TINY}}}",
                             "cfg.frame_ms", "{equals: 80}"))
    write(vp, "missing", claim("asr-t-missing", f"cfg: {{probe: asr.streaming_config, right_context: 2, model: {TINY}}}",
                               "cfg.chunk_ms", "{min: 0}"))
    r = run(vp)
    assert outcomes(r) == {"passed": 6, "unmeasured": 1}
    res = results(vp)
    p = res["asr-t-table[13]"]["probes"]["cfg"]
    assert p["values"]["chunk_ms"] == 1120 and p["values"]["first_chunk_mel_frames"] == 105
    assert p["values"]["left_context_s"] == pytest.approx(4.48)
    assert p["info"]["streaming_cfg"]["shift_size"] == [105, 112]
    assert p["info"]["cache_last_channel_shape"] == [2, 1, 56, 64]
    assert "no look-ahead of 2 frames" in res["asr-t-missing"]["reason"]
    assert "0, 1, 3, 6, 13" in res["asr-t-missing"]["reason"]


@needs_nemo
def test_stream_frames_latency_rtf_flops(vp):
    """Cache-aware streaming with NeMo's buffer: offline frame count, latencies, RTF, FLOPs per frame."""
    st = f'st: {{probe: asr.stream, chunk_ms: "{{chunk_ms}}", model: {TINY}, threads: 1, reps: 2}}'
    write(vp, "frames", claim("asr-t-frames", st, "st.frames_stream - st.frames_offline", "{equals: 0}",
                              params="chunk_ms: [80, 1120]"))
    write(vp, "flops", claim("asr-t-flops", st, "st.flops_per_frame_stream / st.flops_per_frame_offline",
                             "{max: 1.1}", params="chunk_ms: [80, 1120]"))
    write(vp, "rtf", claim("asr-t-rtf", st, "st.rtf", "{max: 1000}", params="chunk_ms: [80, 1120]"))
    write(vp, "nochunk", claim("asr-t-nochunk", f"st: {{probe: asr.stream, chunk_ms: 100, model: {TINY}}}",
                               "st.rtf", "{max: 100}"))
    write(vp, "synthetic", claim("asr-t-synth", f"st: {{probe: asr.stream, chunk_ms: 1120, model: {TINY}, "
                                                "audio: synthetic, reps: 1}", "st.rtf", "{max: 100}"))
    run(vp)
    res = results(vp)
    for c in (80, 1120):
        r = res[f"asr-t-frames[{c}]"]
        assert r["outcome"] == "passed", r
        st = r["probes"]["st"]
        v, info = st["values"], st["info"]
        assert v["frames_stream"] == v["frames_offline"] > 50
        assert v["chunk_ms"] == c and v["steps"] == len(info["frames_per_step"])
        assert 0 < v["latency_median_s"] <= v["latency_p95_s"] and v["rtf"] > 0
        # a metric of counts takes one round; the timed metric on the same call takes rounds, the
        # exact counts taken once per engine and reused (the counting passes are slow)
        assert r["rounds"] == 1 and r["ci_method"].startswith("exact: the metric is made of counts")
        timed = res[f"asr-t-rtf[{c}]"]["probes"]["st"]
        assert len(timed["info"]["rtf_runs"]) == 2 and len(timed["samples"]["rtf"]) == timed["info"]["rounds"] >= 3
        assert all(len(rep["rtf"]) == 2 for rep in timed["info"]["repetitions"])
        assert timed["info"]["counts"] == "exact counts reused from this engine's first call"
        assert timed["values"]["frames_stream"] == v["frames_stream"]
        assert info["dummy"] is True and "blank logit" in info["decoding_note"]
        assert "FlopCounterMode" in info["flop_method"]
        if c == 1120:  # 14 new frames per step, and the streamed encoder output equals the offline one
            assert info["frames_per_step"][1] == 14
            assert v["rel_diff_vs_offline"] < 1e-4
    # per new frame, streaming costs more than offline: the cached frames are re-projected every step
    f80 = res["asr-t-flops[80]"]
    f1120 = res["asr-t-flops[1120]"]
    assert f80["outcome"] == "failed" and f80["value"] > f1120["value"] > 1.0
    assert "reports no 100 ms chunk" in res["asr-t-nochunk"]["reason"]
    synth = res["asr-t-synth"]["probes"]["st"]["info"]["audio"]["source"]
    assert "synthetic voiced signal" in synth
    speech = res["asr-t-frames[80]"]["probes"]["st"]["info"]["audio"]["source"]
    assert ("espeak" in speech) or ("synthetic" in speech)


FLOP_CHECK = """
import json, sys, wave
import numpy as np
from pytest_voiceperf import models
from pytest_voiceperf.engines import nemo_engine
path = sys.argv[1]
a = (np.random.default_rng(0).standard_normal(16000 * 8) * 3000).astype(np.int16)
with wave.open(path, "wb") as w:
    w.setnchannels(1); w.setsampwidth(2); w.setframerate(16000); w.writeframes(a.tobytes())
eng = nemo_engine.Engine("fastconformer-tiny", config=models.get("fastconformer-tiny").config)
out = {}
for rc in (1, 13):
    buf = eng._prepare(rc, path, 1)[-1]
    memo = eng._stream_once(buf, count_flops=True)["flops"]
    calls = iter(range(10**6))
    nemo_engine._shape_signature = lambda a, k: next(calls)  # every step its own count
    every = eng._stream_once(buf, count_flops=True)["flops"]
    out[rc] = [memo, every]
print("RESULT" + json.dumps(out))
"""


@needs_nemo
def test_flops_counted_once_per_step_shape_equal_counting_every_step(tmp_path):
    """FLOPs are counted once per distinct shape of a streaming step's inputs (counting is slow);
    every step's count equals the count of a pass that counts every step."""
    r = subprocess.run([sys.executable, "-c", FLOP_CHECK, str(tmp_path / "noise.wav")], capture_output=True,
                       text=True, timeout=600)
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT")]
    assert line, r.stdout[-2000:] + r.stderr[-3000:]
    for rc, (memo, every) in json.loads(line[0][6:]).items():
        assert memo == every and len(every) > 5 and all(f > 0 for f in every), rc
        assert len(set(every)) < len(every)  # steps share shapes: the memo saves passes


@needs_nemo
def test_buffered_costs_more_than_cache_aware(vp):
    measure = f"""\
        st: {{probe: asr.stream, chunk_ms: 160, model: {TINY}, reps: 1}}
        buf: {{probe: asr.buffered, chunk_ms: 160, model: {TINY}}}"""
    write(vp, "buf", claim("asr-t-buf", measure, "buf.flops_per_frame_steady / st.flops_per_frame_stream",
                           "{min: 1.0}"))
    r = run(vp)
    assert outcomes(r) == {"passed": 1}
    res = results(vp)["asr-t-buf"]
    b = res["probes"]["buf"]["values"]
    assert b["window_s"] == pytest.approx(4.48 + 0.16)
    assert b["flop_ratio_vs_offline"] > 1 and b["rtf"] > 0 and b["steps"] > 10
    assert res["value"] > 1.5
    # one repetition still leaves the RTF a timing (the gate compares it over rounds, not as a count)
    assert res["probes"]["buf"]["samples"]["rtf"] == [b["rtf"]] and "window_s" in res["probes"]["buf"]["exact"]


def _tiny_nemo(where):
    """tiny.nemo: the tiny model saved untrained (given weights, no blank bias), and two noise clips."""
    script = textwrap.dedent(f"""
        import sys, numpy as np, soundfile as sf
        from omegaconf import OmegaConf
        import nemo.collections.asr as nemo_asr
        from pytest_voiceperf import models
        from pytest_voiceperf.engines.nemo_engine import build_config
        m = nemo_asr.models.EncDecRNNTModel(cfg=OmegaConf.create(build_config(models.get("{TINY}").config)))
        m.save_to("tiny.nemo")
        rng = np.random.default_rng(0)
        for i in range(2):
            sf.write(f"u{{i}}.wav", (0.1 * rng.standard_normal(16000 * (2 + i))).astype("float32"), 16000)
    """)
    subprocess.run([sys.executable, "-c", script], cwd=where, check=True, capture_output=True, timeout=300)


@needs_nemo
@pytest.mark.slow
def test_cer_with_a_real_nemo_file(vp):
    """A .nemo file given with --voiceperf-model (the tiny model saved untrained): manifest streamed per
    chunk size, jiwer CER with empty results counted."""
    _tiny_nemo(vp.path)
    (vp.path / "m.json").write_text('{"audio_filepath": "u0.wav", "text": "hello"}\n'
                                    '{"audio_filepath": "u1.wav", "text": "world", "lang": "en"}\n')
    write(vp, "cer", claim("asr-t-cer", f'c: {{probe: asr.cer, chunk_ms: "{{chunk_ms}}", model: {TINY}, manifest: m}}',
                           "c.cer", "{min: 0}", params="chunk_ms: [80, 1120]"))
    r = run(vp, "--voiceperf-model", f"{TINY}=tiny.nemo", "--voiceperf-data", "m=m.json")
    assert outcomes(r) == {"passed": 2}
    for c in (80, 1120):
        p = results(vp)[f"asr-t-cer[{c}]"]["probes"]["c"]
        v = p["values"]
        assert v["n"] == 2 and v["chunk_ms"] == c and v["languages"] == 1
        assert v["cer"] >= 0 and 0 <= v["empty"] <= 2
        assert p["info"]["dummy"] is False and len(p["info"]["per_utterance"]) == 2


# -- the C++/ggml port (parakeet.cpp) -----------------------------------------------------------
PORT = f"""\
    nemo: {{probe: asr.stream, chunk_ms: "{{chunk_ms}}", model: {TINY}, threads: 1}}
    port: {{probe: asr.port, chunk_ms: "{{chunk_ms}}", model: {TINY}, threads: 1, quant: "{{quant}}"}}"""


@needs_nemo
def test_gguf_of_the_timed_model_in_parakeet_layout(tmp_path):
    """The NeMo engine writes the model it times as parakeet.cpp's GGUF: NeMo's tensor names with the
    joint's output layer where the port looks for it, the character labels as pieces, the model's
    own streaming schedule for the look-ahead, the matmul weights (only) in q8_0."""
    import gguf
    import numpy as np

    from pytest_voiceperf import models
    from pytest_voiceperf.engines.nemo_engine import Engine

    eng = Engine(model=TINY, config=models.get(TINY).config)
    wav = tmp_path / "a.wav"
    import soundfile as sf
    sf.write(wav, (0.1 * np.random.default_rng(0).standard_normal(16000)).astype("float32"), 16000)
    try:
        out = eng.export_gguf(right_context=1, quant="q8_0", audio=str(wav), out_dir=str(tmp_path))
        r = gguf.GGUFReader(out["path"])
        kv = {f.name: f for f in r.fields.values()}

        def val(k):
            f = kv[k]
            if f.types[0] == gguf.GGUFValueType.ARRAY:
                if f.types[-1] == gguf.GGUFValueType.STRING:
                    return [bytes(f.parts[i]).decode() for i in f.data]
                return [int(f.parts[i][0]) for i in f.data]
            if f.types[0] == gguf.GGUFValueType.STRING:
                return bytes(f.parts[-1]).decode()
            return f.parts[-1][0].item()

        labels = list(eng.model.cfg.labels)
        assert val("parakeet.arch") == "rnnt" and val("parakeet.vocab_size") == len(labels) == val("parakeet.blank_id")
        assert val("parakeet.tokenizer.pieces") == labels
        assert val("parakeet.encoder.att_context_right") == 1 and val("parakeet.encoder.conv_causal") == 1
        assert val("parakeet.encoder.conv_norm_type") == "layer_norm"
        eng.enc.set_default_att_context_size([int(x) for x in out["att_context"]])
        assert val("parakeet.streaming.chunk_size") == [int(x) for x in eng.enc.streaming_cfg.chunk_size]
        tensors = {t.name: t for t in r.tensors}
        assert "joint.joint_net.2.weight" in tensors and not any(".joint_net.1." in n for n in tensors)
        state = eng.model.state_dict()
        q = [n for n, t in tensors.items() if t.tensor_type == gguf.GGMLQuantizationType.Q8_0]
        assert q and all(".self_attn.linear_" in n or "feed_forward" in n or n in (
            "encoder.pre_encode.out.weight", "joint.enc.weight", "joint.pred.weight") for n in q)
        # f32 tensors are the model's own values (the joint output with its blank bias)
        bias = np.asarray(tensors["joint.joint_net.2.bias"].data)
        assert np.array_equal(bias, state["joint.joint_net.1.bias"].numpy())
        assert out["quantized"] == len(q) and out["tensors"] == len(tensors)
        clip = np.load(out["clip"])
        assert out["clip_s"] == len(clip) / 16000 and len(clip) >= 16000
    finally:
        eng.close()


@needs_nemo
def test_port_claim_unmeasured_without_the_library(vp, monkeypatch):
    monkeypatch.delenv("PARAKEET_LIBRARY", raising=False)
    write(vp, "port", claim("asr-t-port", PORT, "nemo.rtf / port.rtf", "{min: 1.0}",
                            params="chunk_ms: [1120]\nquant: [q8_0]"))
    r = run(vp)
    assert outcomes(r) == {"unmeasured": 1}
    reason = results(vp)["asr-t-port[1120-q8_0]"]["reason"]
    assert "--voiceperf-bin parakeet=PATH" in reason and "PARAKEET_SHARED=ON" in reason
    r = run(vp, "--voiceperf-bin", "parakeet=nowhere/libparakeet.so")
    assert "no such file or folder" in results(vp)["asr-t-port[1120-q8_0]"]["reason"]


needs_parakeet = pytest.mark.skipif(not __import__("os").environ.get("PARAKEET_LIBRARY"),
                                    reason="parakeet.cpp is built by the user: set PARAKEET_LIBRARY to its .so")


@needs_nemo
@needs_parakeet
def test_port_transcribes_what_nemo_transcribes_on_given_weights(vp):
    """Given weights (the tiny model saved untrained: no blank bias, so both engines emit symbols),
    the port's streamed transcript is compared with NeMo's character by character; with the
    catalog's random weights the agreement claim says it needs trained ones."""
    _tiny_nemo(vp.path)
    a = f'a: {{probe: asr.port_agreement, chunk_ms: 1120, model: {TINY}, quant: "{{quant}}", audio: u1.wav}}'
    write(vp, "agree", claim("asr-t-agree", a, "a.cer_vs_nemo", "{max: 1}", params="quant: [f32, q8_0]"))
    run(vp, "--voiceperf-model", f"{TINY}=tiny.nemo")
    res = results(vp)
    for q in ("f32", "q8_0"):
        v = res[f"asr-t-agree[{q}]"]["probes"]["a"]["values"]
        assert v["chars_nemo"] > 10 and v["chars_port"] > 0, res[f"asr-t-agree[{q}]"]["probes"]["a"]["info"]
    # f32: the same network in another runtime says what NeMo says
    assert res["asr-t-agree[f32]"]["value"] <= 0.05
    run(vp)
    assert "needs trained weights" in results(vp)["asr-t-agree[f32]"]["reason"]


@needs_nemo
@needs_parakeet
def test_port_streams_the_same_model_and_samples(vp):
    write(vp, "port", claim("asr-t-port", PORT, "nemo.rtf / port.rtf", "{min: 0}",
                            params="chunk_ms: [160, 1120]\nquant: [q8_0, f32]"))
    run(vp)
    res = results(vp)
    for c in (160, 1120):
        for q in ("q8_0", "f32"):
            r = res[f"asr-t-port[{c}-{q}]"]
            assert r["outcome"] == "passed", r["reason"]
            port, nemo = r["probes"]["port"], r["probes"]["nemo"]
            assert port["values"]["audio_s"] == nemo["values"]["audio_s"]
            assert port["values"]["threads"] == nemo["values"]["threads"] == 1
            assert port["info"]["gguf"]["quant"] == q and port["values"]["rtf"] > 0
            assert (port["info"]["gguf"]["quantized"] > 0) == (q == "q8_0")


def test_cases_of_one_nemo_engine_run_together(pytester):
    # the cuda profile's bfloat16 streams-per-GPU cases sat between float32 ones: on the H200 the
    # float32 engine started again after them (results/h200/rest-profile/)
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "claims" / "asr"
    res = pytester.runpytest("--voiceperf", "--voiceperf-claims", str(root), "--voiceperf-profile", "cuda",
                             "--voiceperf-device", "cuda", "--collect-only", "-q")
    ids = [line.split("::")[-1] for line in res.outlines if "::" in line]
    bf16 = [i for i, n in enumerate(ids) if n.startswith("asr-streams-per-gpu")]
    fp32 = [i for i, n in enumerate(ids) if n.startswith(("asr-cache-aware", "asr-chunk-table", "asr-frame-80ms"))]
    assert bf16 and fp32 and (max(bf16) < min(fp32) or min(bf16) > max(fp32))


def test_streams_times_fewer_steps_only_where_steps_are_long():
    """asr.streams times 16 steps where they are short (host-bound, small sizes) and down to 8 where
    16 would take over ~4 s; a size whose step misses the chunk by far gets the minimum."""
    from pytest_voiceperf.engines.nemo_engine import STEPS_MAX, STEPS_MIN, _steps_to_time

    assert _steps_to_time([0.06, 0.07, 0.05], 0.08) == STEPS_MAX == 16
    assert _steps_to_time([0.30, 0.31, 0.29], 0.32) == 14          # ceil(4 / 0.30)
    assert _steps_to_time([1.0, 1.1, 0.9], 1.12) == STEPS_MIN == 8
    assert _steps_to_time([0.5, 0.5], 0.08) == STEPS_MIN           # over twice the chunk
    assert _steps_to_time([], 0.32) == 13                          # nothing timed: sized by the chunk
