"""The baseline gate and the voiceperf CLI, as a user runs them."""
import json
import re
import sys
from pathlib import Path

import pytest
from helpers import claim


def set_claims(p, x_a, x_b=1.0, seed=0, jitter=0.01):
    (p.path / "claims/a.yaml").write_text(claim(
        "c-rate", metric="m.rate", expect="{min: 0.1}",
        measure=f"m: {{probe: t.const, x: {x_a}, jitter: {jitter}, seed: {seed}}}"))
    (p.path / "claims/b.yaml").write_text(claim(
        "c-other", metric="m.rate", expect="{min: 0.1}",
        measure=f"m: {{probe: t.const, x: {x_b}, jitter: {jitter}, seed: {seed + 100}}}"))


def saved(p):
    return sorted((p.path / ".voiceperf").rglob("*.json"))


def test_save_numbers_runs_per_machine(vp):
    set_claims(vp, 1.0)
    vp.runpytest("--voiceperf", "--voiceperf-save", "base")
    vp.runpytest("--voiceperf", "--voiceperf-save", "again")
    files = saved(vp)
    assert [f.name for f in files] == ["0001_base.json", "0002_again.json"]
    doc = json.loads(files[0].read_text())
    assert doc["provenance"]["machine_id"] == files[0].parent.name
    assert doc["results"][0]["samples"]


def test_regression_fails_only_that_claim_with_numbers(vp):
    set_claims(vp, 1.0)
    vp.runpytest("--voiceperf", "--voiceperf-save", "base")
    set_claims(vp, 0.7, seed=1)  # c-rate got 30% slower; c-other only re-sampled
    res = vp.runpytest("--voiceperf", "--voiceperf-baseline", "base", "-v")
    out = res.stdout.str()
    assert "claims/b.yaml::c-other PASSED" in out and "claims/a.yaml::c-rate FAILED" in out
    assert "regressed against baseline" in out
    assert re.search(r"m\.rate \[tok/s\]: 0\.99\d* -> 0\.70\d* \(-29\.\d% interval \[-\d\d\.\d%, -\d\d\.\d%\], "
                     r"rounds 3 vs 3\) regressed", out), out
    assert res.ret == 1


def test_improvement_is_reported_never_failed(vp):
    set_claims(vp, 1.0)
    vp.runpytest("--voiceperf", "--voiceperf-save", "base")
    set_claims(vp, 1.5, seed=2)
    res = vp.runpytest("--voiceperf", "--voiceperf-baseline", "base")
    res.assert_outcomes(passed=2)
    res.stdout.fnmatch_lines(["IMPROVED*c-rate*+5*", "*0 regressed, 2 improved*"])


def test_noise_does_not_fail(vp):
    set_claims(vp, 1.0, seed=3, jitter=0.03)
    vp.runpytest("--voiceperf", "--voiceperf-save", "base")
    for seed in (4, 5, 6):
        set_claims(vp, 1.0, seed=seed, jitter=0.03)
        res = vp.runpytest("--voiceperf", "--voiceperf-baseline", "base")
        res.assert_outcomes(passed=2)
        res.stdout.fnmatch_lines(["*0 regressed*"])


def _edit_saved(p, fn):
    f = saved(p)[0]
    doc = json.loads(f.read_text())
    fn(doc["provenance"])
    f.write_text(json.dumps(doc))


def test_comparison_across_hardware_or_weights_is_refused(vp):
    set_claims(vp, 1.0)
    vp.runpytest("--voiceperf", "--voiceperf-save", "base")
    _edit_saved(vp, lambda prov: prov.update(device_name="NVIDIA H200"))
    res = vp.runpytest("--voiceperf", "--voiceperf-baseline", "base")
    assert res.ret == 4
    res.stderr.fnmatch_lines(["*different setup*device_name*NVIDIA H200*--voiceperf-allow-mismatch*"])
    res = vp.runpytest("--voiceperf", "--voiceperf-baseline", "base", "--voiceperf-allow-mismatch")
    res.assert_outcomes(passed=2)
    _edit_saved(vp, lambda prov: prov.update(device_name=json.loads(
        (saved(vp)[0]).read_text())["provenance"]["device_name"], models={"qwen3-tiny": {"dummy": True}}))


def test_comparison_across_cpus_of_other_vector_extensions_is_refused(vp):
    # one VM's "AMD EPYC" had AVX-512 on one host and only AVX2 on another: the CPU default took twice
    # as long there, so a baseline from the other host is a different setup, not a regression
    set_claims(vp, 1.0)
    vp.runpytest("--voiceperf", "--voiceperf-save", "base")
    assert isinstance(json.loads(saved(vp)[0].read_text())["provenance"]["cpu_isa"], list)
    _edit_saved(vp, lambda prov: prov.update(cpu_isa=["avx2", "fma", "avx512f", "avx512_bf16", "amx_tile"]))
    res = vp.runpytest("--voiceperf", "--voiceperf-baseline", "base")
    assert res.ret == 4
    res.stderr.fnmatch_lines(["*different setup*cpu_isa: avx2 fma avx512f avx512_bf16 amx_tile vs *"])
    # a baseline written before the field existed is compared as before
    _edit_saved(vp, lambda prov: prov.pop("cpu_isa"))
    vp.runpytest("--voiceperf", "--voiceperf-baseline", "base").assert_outcomes(passed=2)
    # a GPU run's figures do not hang on its host's vector units
    from pytest_voiceperf.gate import mismatches

    gpu = {"device": "cuda", "device_name": "NVIDIA H200"}
    assert mismatches(dict(gpu, cpu_isa=["avx2"]), dict(gpu, cpu_isa=["avx2", "avx512f"])) == []
    assert mismatches({"device": "cpu", "cpu_isa": ["avx2"]}, {"device": "cpu", "cpu_isa": ["avx2", "avx512f"]}) \
        == ["cpu_isa: avx2 vs avx2 avx512f"]
    # but on the launch speed of its host CPU (eager VoxCPM2 RTF differed 14% between two H100 leases,
    # and those files could not say whether their hosts differed):
    # another host CPU model is another setup; a file without the field is compared as before
    xeon, epyc = dict(gpu, cpu_model="Intel(R) Xeon(R) Platinum 8480+"), dict(gpu, cpu_model="AMD EPYC 9454")
    assert mismatches(xeon, epyc) == ["host cpu_model: 'Intel(R) Xeon(R) Platinum 8480+' vs 'AMD EPYC 9454'"]
    assert mismatches(xeon, dict(xeon)) == [] and mismatches(gpu, epyc) == []


def test_cpu_vector_extensions_are_read_from_cpuinfo(tmp_path):
    from pytest_voiceperf.provenance import cpu_isa

    f = tmp_path / "cpuinfo"
    f.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma bmi2 avx512f avx512_bf16 sha_ni\n")
    assert cpu_isa(str(f)) == ["avx2", "fma", "avx512f", "avx512_bf16"]
    assert cpu_isa(str(tmp_path / "absent")) is None


def test_dummy_vs_real_weights_refused(vp):
    set_claims(vp, 1.0)
    vp.runpytest("--voiceperf", "--voiceperf-save", "base")
    _edit_saved(vp, lambda prov: prov.update(models={"qwen3-tiny": {"dummy": True, "weights": None}}))
    res = vp.runpytest("--voiceperf", "--voiceperf-baseline", "base", "--voiceperf-model", "qwen3-tiny=/w")
    assert res.ret == 4
    res.stderr.fnmatch_lines(["*model qwen3-tiny: dummy weights vs real weights*"])


def test_cli_compare_list_validate(vp):
    set_claims(vp, 1.0)
    vp.runpytest("--voiceperf", "--voiceperf-json", "old.json")
    set_claims(vp, 0.5, seed=9)
    vp.runpytest("--voiceperf", "--voiceperf-json", "new.json")
    res = vp.run(sys.executable, "-m", "pytest_voiceperf.cli", "compare", "old.json", "new.json", "--fail")
    assert res.ret == 1
    res.stdout.fnmatch_lines(["REGRESSED*c-rate*metric*-49.*%*interval*rounds 3 vs 3) regressed", "*regressed, 0 improved*"])
    res = vp.run(sys.executable, "-m", "pytest_voiceperf.cli", "compare", "old.json", "old.json", "--fail")
    assert res.ret == 0
    res = vp.run(sys.executable, "-m", "pytest_voiceperf.cli", "validate", "claims")
    # t.const comes from the project's conftest.py, which the CLI loads as pytest does
    res.stdout.fnmatch_lines(["2 valid, 0 invalid"])
    (vp.path / "claims" / "a.yaml").write_text((vp.path / "claims" / "a.yaml").read_text().replace("t.const", "t.nope"))
    res = vp.run(sys.executable, "-m", "pytest_voiceperf.cli", "validate", "claims")
    res.stdout.fnmatch_lines(["claims/a.yaml:5: unknown probe 't.nope'*", "1 valid, 1 invalid"])
    assert res.ret == 1


def test_directions_of_units():
    from pytest_voiceperf.gate import direction_of_unit

    assert direction_of_unit("tok/s") is True and direction_of_unit("FLOP/s") is True
    assert direction_of_unit("s/s") is False and direction_of_unit("ms") is False  # time per second of audio
    assert direction_of_unit("fraction") is None


def test_cli_report_writes_page_and_plots(vp):
    (vp.path / "claims/hw.yaml").write_text("""\
id: hw-small
title: copy below read
statement: copy moves fewer bytes per second than a read-only sum
measure:
  rd: {probe: hw.read_bandwidth, mib: 32}
  mm: {probe: hw.matmul, dtype: bfloat16, n: 256}
metric: mm.flops / rd.read_bw
unit: FLOP/B
expect: {min: 0}
noise: {max_rel_spread: 50}
""")
    vp.runpytest("--voiceperf", "--voiceperf-json", "r.json")
    res = vp.run(sys.executable, "-m", "pytest_voiceperf.cli", "report", "r.json", "-o", "rep")
    assert res.ret == 0
    page = (vp.path / "rep/index.html").read_text()
    assert "hw-small" in page and '<img src="roofline.png"' in page
    assert (vp.path / "rep/roofline.png").stat().st_size > 10000
    assert "hw-small" in (vp.path / "rep/report.md").read_text()


def test_cli_merge_joins_a_split_suite_and_refuses_mixed_engines(vp):
    """A suite split over jobs (or device calls) becomes one file for the report and the gate."""
    set_claims(vp, 1.0)
    vp.runpytest("--voiceperf", "--voiceperf-json", "one.json", "-k", "c-rate")
    vp.runpytest("--voiceperf", "--voiceperf-json", "two.json", "-k", "c-other")
    vp.runpytest("--voiceperf", "--voiceperf-json", "again.json", "-k", "c-rate")
    cli = (sys.executable, "-m", "pytest_voiceperf.cli")
    res = vp.run(*cli, "merge", "one.json", "two.json", "again.json", "-o", "all.json")
    assert res.ret == 0, res.stderr.str()
    res.stdout.fnmatch_lines(["*c-rate: again.json (passed) replaces one.json (passed)",
                              "wrote all.json: 2 cases (2 passed) from 3 files"])
    doc = json.loads((vp.path / "all.json").read_text())
    assert {r["claim"]: r["source"] for r in doc["results"]} == {"c-rate": "again.json", "c-other": "two.json"}
    assert [m["path"] for m in doc["provenance"]["merged_from"]] == ["one.json", "two.json", "again.json"]
    assert doc["provenance"]["command"] == "voiceperf merge one.json two.json again.json -o all.json"
    assert doc["provenance"]["complete"] is True
    assert vp.run(*cli, "compare", "all.json", "again.json").ret == 0  # the gate reads it
    # runs of another machine are refused, as the gate refuses them
    gpu = json.loads((vp.path / "two.json").read_text())
    gpu["provenance"]["device_name"] = "NVIDIA H200"
    (vp.path / "gpu.json").write_text(json.dumps(gpu))
    res = vp.run(*cli, "merge", "one.json", "gpu.json", "-o", "mixed.json")
    assert res.ret == 2 and not (vp.path / "mixed.json").exists()
    res.stderr.fnmatch_lines(["refusing to merge: gpu.json and one.json are runs of different setups: device_name*"])
    # the same case measured by two engines: one figure must not silently stand for the other
    other = json.loads((vp.path / "again.json").read_text())
    for r in other["results"]:
        r["probes"] = {"m": {"info": {"engine": "transformers"}}}
    (vp.path / "tf.json").write_text(json.dumps(other))
    for r in doc["results"]:
        r["probes"] = {"m": {"info": {"engine": "vllm"}}}
    (vp.path / "all.json").write_text(json.dumps(doc))
    res = vp.run(*cli, "merge", "all.json", "tf.json", "-o", "bad.json")
    assert res.ret == 2 and not (vp.path / "bad.json").exists()
    res.stderr.fnmatch_lines(["refusing to merge: *c-rate* measured by vllm in again.json and by transformers in tf.json*"])


# -- every results file kept in the repository still loads ------------------------------------
ROOT = Path(__file__).resolve().parents[1]
KEPT = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "results").rglob("*.json*")
              if p.suffix in (".json", ".partial") and "report" not in p.parts)


@pytest.mark.parametrize("path", KEPT)
def test_kept_results_files_load_in_compare_report_and_merge(path, tmp_path):
    """Files written by every earlier version (before rounds, with rounds, partial ones) load in the
    gate, the report and merge; comparing a file with itself never finds a regression."""
    from pytest_voiceperf import gate, html_report, results

    doc = results.read(ROOT / path)
    g = gate.Gate(path, doc, tolerance=0.05, alpha=0.05)
    for r in doc.results:
        assert all(c.verdict != "regressed" for c in g.check(r)), r.nodeid
    merged, _ = results.merge([(path, doc), (path, doc)])
    assert len(merged.results) == len({r.nodeid for r in doc.results})
    out = html_report.write_report(str(ROOT / path), str(tmp_path / "report"))
    assert Path(out["html"]).exists() and Path(out["markdown"]).exists()


def test_every_real_time_factor_is_lower_is_better_for_the_gate():
    # the ASR probes declared their RTF in "x" (a speed-up's unit, higher is better): a slower
    # streaming pass was reported "improved" (results/cpu: buffered RTF 0.80 -> 1.22)
    from pytest_voiceperf.gate import direction_of_unit
    from pytest_voiceperf.probes import load_registry

    reg = load_registry()
    rtf = {(n, o): u for n in reg.names() for o, u in reg.get(n).outputs.items() if "rtf" in o}
    assert rtf and not [k for k, u in rtf.items() if direction_of_unit(u) is True]
    assert direction_of_unit(reg.get("asr.stream").outputs["rtf"]) is False
