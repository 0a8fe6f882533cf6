"""An LLM engine family from another package, installed beside the plugin (its own dist-info and entry
point), serves the shipped llm.* claims without a change to pytest-voiceperf."""
import json
from pathlib import Path

CLAIMS = Path(__file__).resolve().parents[1] / "claims" / "llm"

FAMILY = '''
from pytest_voiceperf.engines import Family
from pytest_voiceperf.exceptions import Unmeasured

FAMILY = Family("toyllm", "toyllm_engine", ("numpy",), "pip install toyllm", kind="llm", spec="toyllm_family:spec",
                engine_args=True)


def spec(call):
    if call.quantization is not None:
        raise Unmeasured(f"toyllm runs unquantized weights only, not {call.quantization!r}")
    return {"model": call.model, "dtype": call.dtype, "mib": int(call.engine_args.get("mib", 640))}
'''

# a toy, but a real measurement: each token reads the whole weight array once, stamped per token. The
# array is larger than the read-bandwidth probe's buffer (512 MiB on a CPU) and than the VM's L3 (260 MiB):
# 24 MiB summed from L3 at 25.2 GB/s, above the 23.4 GB/s measured ceiling (unmeasured: "measurement invalid")
ENGINE = '''
import time

import numpy as np


class Engine:
    def __init__(self, model, dtype="bfloat16", mib=640):
        self.model, self.dtype = model, dtype
        self.w = np.random.default_rng(1).standard_normal(mib * 2**20 // 8)

    def info(self):
        n = int(self.w.size)
        return {"engine": "toyllm", "model": self.model, "weight_bytes": int(self.w.nbytes),
                "params": {"total": n, "non_embedding": n}}

    def decode(self, tokens=64, reps=1, batch=1, prompt_len=32):
        eng, wall, e2e, ttft, gen = [], [], [], [], []
        for _ in range(int(reps)):
            t0 = time.perf_counter()
            stamps = []
            for _ in range(int(tokens)):
                float(self.w.sum())
                stamps.append(time.perf_counter())
            t1 = time.perf_counter()
            eng.append((tokens - 1) / (stamps[-1] - stamps[0]))
            wall.append((tokens - 1) / (t1 - stamps[0]))
            e2e.append(t1 - t0)
            ttft.append(stamps[0] - t0)
            gen.append(int(tokens))
        return {"tok_s": eng, "tok_s_wall": wall, "total_tok_s": eng, "e2e_s": e2e, "ttft_s": ttft, "generated": gen}

    def close(self):
        pass
'''


def _install(tmp_path, monkeypatch):
    site = tmp_path / "site"
    dist = site / "toyllm-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toyllm\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[pytest_voiceperf.engines]\ntoyllm = toyllm_family:FAMILY\n")
    (site / "toyllm_family.py").write_text(FAMILY)
    (site / "toyllm_engine.py").write_text(ENGINE)
    monkeypatch.setenv("PYTHONPATH", str(site))


def test_an_installed_llm_family_serves_the_shipped_claims(pytester, tmp_path, monkeypatch):
    _install(tmp_path, monkeypatch)
    pytester.runpytest("--voiceperf", "--voiceperf-claims", str(CLAIMS), "--voiceperf-llm-engine", "toyllm",
                       "--voiceperf-json", "o.json", "-k", "decode-timing-agrees and qwen3-0.6b", "-p", "no:cacheprovider")
    doc = json.loads((pytester.path / "o.json").read_text())
    (r,) = [x for x in doc["results"] if x["claim"] == "llm-decode-timing-agrees"]
    assert r["probes"]["d"]["info"]["engine"] == "toyllm", (r["outcome"], r["reason"])
    assert r["rounds"] >= 2 and r["ci"], r
    assert r["outcome"] in ("passed", "failed") or r["reason"].startswith("inconclusive"), r["reason"]


def test_a_claim_names_the_installed_family_and_its_spec_function_refuses_what_it_cannot_run(
        pytester, tmp_path, monkeypatch):
    _install(tmp_path, monkeypatch)
    (pytester.path / "claims").mkdir()
    (pytester.path / "claims" / "toy.yaml").write_text("""\
id: toy-fp8
title: the toy engine has no FP8
statement: a family's spec function refuses what it cannot run
kind: measured
measure:
  d: {probe: llm.decode, model: qwen3-0.6b, engine: toyllm, quantization: fp8}
metric: d.tok_s
unit: tok/s
expect: {min: 1}
""")
    res = pytester.runpytest("--voiceperf", "--voiceperf-claims", "claims", "-rA", "-p", "no:cacheprovider")
    res.stdout.fnmatch_lines(["*toyllm runs unquantized weights only, not 'fp8'*"])
    res = pytester.runpytest("--voiceperf", "--voiceperf-claims", "claims", "--voiceperf-llm-engine", "nemo")
    assert res.ret == 4 and "does not serve llm.* calls" in res.stderr.str()
