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
                     r"rounds 6 vs 3\) regressed", out), out
    assert res.ret == 1


def test_improvement_is_reported_never_failed(vp):
    set_claims(vp, 1.0)
    vp.runpytest("--voiceperf", "--voiceperf-save", "base")
    set_claims(vp, 1.5, seed=2)
    res = vp.runpytest("--voiceperf", "--voiceperf-baseline", "base")
    res.assert_outcomes(passed=2)
    res.stdout.fnmatch_lines(["IMPROVED*c-rate m.rate*+4?.?% interval*improved*", "*0 regressed, 1 improved, 1 unchanged (2 figures;*"])


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


def test_comparison_across_hardware_is_refused_by_check(vp):
    set_claims(vp, 1.0)
    vp.runpytest("--voiceperf", "--voiceperf-save", "base")
    _edit_saved(vp, lambda prov: prov.update(device_name="NVIDIA H200"))
    res = vp.runpytest("--voiceperf", "--voiceperf-baseline", "base")
    assert res.ret == 4
    res.stderr.fnmatch_lines(["*different machine*device_name*NVIDIA H200*--voiceperf-allow-mismatch gpu *"])
    # waiving another check does not waive this one; waiving it by name does
    res = vp.runpytest("--voiceperf", "--voiceperf-baseline", "base", "--voiceperf-allow-mismatch=cpu_model")
    assert res.ret == 4
    res = vp.runpytest("--voiceperf", "--voiceperf-baseline", "base", "--voiceperf-allow-mismatch=gpu")
    res.assert_outcomes(passed=2)
    res = vp.runpytest("--voiceperf", "--voiceperf-baseline", "base", "--voiceperf-allow-mismatch=gpus")
    assert res.ret == 4
    res.stderr.fnmatch_lines(["*unknown check(s) gpus; the checks are gpu, cpu_model, cpu_isa*"])


def test_comparison_across_cpus_of_other_vector_extensions_is_refused(vp):
    # one VM's "AMD EPYC" had AVX-512 on one host and only AVX2 on another: the CPU default took twice
    # as long there, so a baseline from the other host is a different setup, not a regression
    set_claims(vp, 1.0)
    vp.runpytest("--voiceperf", "--voiceperf-save", "base")
    assert isinstance(json.loads(saved(vp)[0].read_text())["provenance"]["cpu_isa"], list)
    _edit_saved(vp, lambda prov: prov.update(cpu_isa=["avx2", "fma", "avx512f", "avx512_bf16", "amx_tile"]))
    res = vp.runpytest("--voiceperf", "--voiceperf-baseline", "base")
    assert res.ret == 4
    res.stderr.fnmatch_lines(["*different machine*cpu_isa: avx2 fma avx512f avx512_bf16 amx_tile vs *"])
    # a baseline written before the field existed is compared as before
    _edit_saved(vp, lambda prov: prov.pop("cpu_isa"))
    vp.runpytest("--voiceperf", "--voiceperf-baseline", "base").assert_outcomes(passed=2)
    # a GPU run's figures do not hang on its host's vector units
    from pytest_voiceperf.provenance import mismatches

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


def test_software_changes_are_compared_and_listed_never_refused(vp):
    # a new engine version, other weights, a deeper config, other engine options: what a gate is for.
    # They are listed as what changed (old -> new), and the figures compared.
    set_claims(vp, 1.0)
    vp.runpytest("--voiceperf", "--voiceperf-save", "base")
    _edit_saved(vp, lambda prov: prov.update(packages=dict(prov["packages"], torch="0.0.1", pytest="0.0.2")))
    res = vp.runpytest("--voiceperf", "--voiceperf-baseline", "base", "--voiceperf-model", "qwen3-tiny=/w")
    res.assert_outcomes(passed=2)
    res.stdout.fnmatch_lines(["what changed: *pytest 0.0.2 -> *torch 0.0.1 -> 2.*", "*0 regressed*",
                              "guarded 2 of 2 figures (100%)"])


def _base_and_run(vp, first: dict, then: dict, *args):
    """Save a run of claims c-rate/c-other with t.const arguments ``first``, run ``then`` against it."""
    def write(kw):
        for name, cid in (("a", "c-rate"), ("b", "c-other")):
            x = kw.get(cid, 1.0)
            (vp.path / f"claims/{name}.yaml").write_text(claim(
                cid, metric="m.rate", expect="{min: 0.9}",
                measure=f"m: {{probe: t.const, x: {x}, jitter: 0.005, seed: {kw.get('seed', 0)}}}"))
    write(first)
    vp.runpytest("--voiceperf", "--voiceperf-save", "base")
    write(then)
    return vp.runpytest("--voiceperf", "--voiceperf-baseline", "base", "--voiceperf-json", "r.json", "-rxs", *args)


def test_a_known_failure_does_not_fail_the_gate_a_new_failure_does(vp):
    # c-rate fails its bound in the baseline and now (same figure): a known failure, xfailed, exit 0
    res = _base_and_run(vp, {"c-rate": 0.5}, {"c-rate": 0.5, "seed": 1})
    res.assert_outcomes(passed=1, xfailed=1)
    res.stdout.fnmatch_lines(["*known failure: failed in the baseline too*"])
    assert res.ret == 0
    doc = json.loads((vp.path / "r.json").read_text())
    assert doc["provenance"]["gate"]["known_failures"] == ["claims/a.yaml::c-rate"]
    # the same in absolute mode fails, as without a baseline
    res = vp.runpytest("--voiceperf", "--voiceperf-baseline", "base", "--voiceperf-gate", "absolute")
    res.assert_outcomes(passed=1, failed=1)


def test_a_claim_that_passed_in_the_baseline_and_fails_now_fails_the_gate(vp):
    # 0.95 -> 0.85: within the 10% tolerance (no figure regressed), but the verdict went passed -> failed
    res = _base_and_run(vp, {"c-rate": 0.95}, {"c-rate": 0.88, "seed": 1})
    res.assert_outcomes(passed=1, failed=1)
    res.stdout.fnmatch_lines(["*verdict changed: passed -> failed*"])
    res = vp.run(sys.executable, "-m", "pytest_voiceperf.cli", "compare", "r.json", "--format", "markdown")
    assert "### Verdicts that changed (1)" in res.stdout.str() and "c-rate: passed -> failed" in res.stdout.str()


def test_a_baseline_that_was_all_disturbed_cannot_switch_the_gate_off(vp):
    set_claims(vp, 1.0)
    vp.runpytest("--voiceperf", "--voiceperf-json", "old.json")
    doc = json.loads((vp.path / "old.json").read_text())
    for r in doc["results"]:  # every record of the baseline says disturbed, nothing measured
        r.update(outcome="unmeasured", reason="disturbed: other processes used 2 cores", probes={},
                 disturbed=["other processes used 2 cores"], value=None, samples=[], round_values=[])
    (vp.path / "old.json").write_text(json.dumps(doc))
    set_claims(vp, 0.5, seed=9)  # 2x slower
    vp.runpytest("--voiceperf", "--voiceperf-json", "new.json")
    res = vp.run(sys.executable, "-m", "pytest_voiceperf.cli", "compare", "old.json", "new.json", "--fail")
    assert res.ret == 3  # undecided: nothing regressed, too little compared
    res.stdout.fnmatch_lines(["guarded 0 of 2 figures (0%); 2 not compared*FAILED: below the 80% *"])
    res = vp.runpytest("--voiceperf", "--voiceperf-baseline", str(vp.path / "old.json"))
    assert res.ret == 1
    res.stdout.fnmatch_lines(["guarded 0 of 2 figures*FAILED*"])


def test_a_missing_baseline_is_a_notice_and_passes_softly_unless_asked(vp):
    set_claims(vp, 0.05)  # c-rate fails its bound: on a first run nothing is known to gate against
    res = vp.runpytest("--voiceperf", "--voiceperf-baseline", "main", "--voiceperf-json", "r.json")
    assert res.ret == 0
    res.assert_outcomes(passed=1, xfailed=1)
    res.stdout.fnmatch_lines(["*no baseline 'main' yet*nothing was gated*--voiceperf-save main*"])
    assert json.loads((vp.path / "r.json").read_text())["provenance"]["gate"]["baseline"] is None
    res = vp.runpytest("--voiceperf", "--voiceperf-baseline", "main", "-o", "voiceperf_baseline_missing=fail")
    assert res.ret == 4
    res.stderr.fnmatch_lines(["*no saved voiceperf run 'main'*"])


def test_rounds_go_on_until_the_gate_decides(vp):
    # the claim's bound (>= 0.1) is decided after 3 rounds; against the baseline the first rounds
    # (1.0, 0.9, 1.1) leave the change undecided, so rounds go on until the interval is decided
    (vp.path / "claims/a.yaml").write_text(claim("c-rate", metric="m.rate", expect="{min: 0.1}",
                                                  measure="m: {probe: t.const, x: 1.0, spread: 0.002}"))
    vp.runpytest("--voiceperf", "--voiceperf-save", "base")
    (vp.path / "claims/a.yaml").write_text(claim("c-rate", metric="m.rate", expect="{min: 0.1}", measure=(
        'm: {probe: t.const, rounds_x: "1.0,0.9,1.1,1.0", spread: 0.002}')))
    res = vp.runpytest("--voiceperf", "--voiceperf-baseline", "base", "--voiceperf-json", "r.json", "-v")
    res.stdout.fnmatch_lines(["*against the baseline m.rate ?tok/s? undecided after 3 rounds; one more round*"])
    r = json.loads((vp.path / "r.json").read_text())["results"][0]
    assert 3 < r["rounds"] < 10
    assert {c["verdict"] for c in r["baseline"]} == {"unchanged"}, r["baseline"]
    assert res.ret == 0


def test_cli_compare_list_validate(vp):
    set_claims(vp, 1.0)
    vp.runpytest("--voiceperf", "--voiceperf-json", "old.json")
    set_claims(vp, 0.5, seed=9)
    vp.runpytest("--voiceperf", "--voiceperf-json", "new.json")
    res = vp.run(sys.executable, "-m", "pytest_voiceperf.cli", "compare", "old.json", "new.json", "--fail")
    assert res.ret == 1
    # the metric is m.rate itself: one figure a case (the probe's, named by its output)
    res.stdout.fnmatch_lines(["REGRESSED*c-rate*m.rate*-49.*%*interval*rounds 3 vs 3) regressed; why: *x -49.*",
                              "*regressed, 0 improved*", "guarded 2 of 2 figures (100%)"])
    res = vp.run(sys.executable, "-m", "pytest_voiceperf.cli", "compare", "old.json", "old.json", "--fail")
    assert res.ret == 0
    res = vp.run(sys.executable, "-m", "pytest_voiceperf.cli", "validate", "--conftest", "claims")
    # t.const comes from the project's conftest.py, which the CLI loads as pytest does when asked
    res.stdout.fnmatch_lines(["2 valid, 0 invalid"])
    (vp.path / "claims" / "a.yaml").write_text((vp.path / "claims" / "a.yaml").read_text().replace("t.const", "t.nope"))
    res = vp.run(sys.executable, "-m", "pytest_voiceperf.cli", "validate", "--conftest", "claims")
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
              if p.suffix in (".json", ".partial") and not {"report", "exports"} & set(p.parts))  # exports: other tools' formats


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
