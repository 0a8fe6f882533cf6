"""The gate's pure core without pytest runs: explanations, what changed, machine checks, guarded share,
the correction for the figures this run compares and the looks at them."""
from types import SimpleNamespace

import pytest

from pytest_voiceperf.explain import explain_probe
from pytest_voiceperf.gate import Gate
from pytest_voiceperf.provenance import changes, machine_mismatches


def _decode(tok_s: float, read_bytes: float, bw: float, **info):
    return SimpleNamespace(probe="llm.decode", values={"tok_s": tok_s, "read_bytes": read_bytes},
                           info=dict({"ceilings": {"read_bw": {"ceiling": bw}}}, **info), units={}, exact=[])


def test_a_bigger_model_is_explained_by_its_bytes():
    # the H200 case: 0.6B with 36 layers instead of 28, decode 663 -> 547 tok/s
    old = _decode(663.0, 1.20e9, 4.0e12)
    new = _decode(547.0, 1.46e9, 3.985e12)
    why = explain_probe(old, new, "tok_s")
    assert why.startswith("time per token +21.2% (1.51 -> 1.83 ms), bytes read per token +21.7% (1.2 GB -> 1.46 GB), "
                          "read bandwidth -0.4%"), why
    assert why.endswith(": the model reads more bytes per token (it grew, or its precision did)"), why


def test_an_eager_engine_is_explained_by_its_overhead_and_the_option_named():
    old = _decode(663.0, 1.20e9, 4.0e12, enforce_eager=False)
    new = _decode(420.0, 1.20e9, 4.0e12, enforce_eager=True, engine_args={"enforce_eager": True})
    why = explain_probe(old, new, "tok_s")
    assert "bytes read per token +0.0%" in why and "overhead per token (time - bytes read / read bandwidth) +0.873 ms" in why, why
    assert why.split("): ")[-1].startswith("the engine takes more time per byte read than the bandwidth explains")
    assert "changed: engine_args None -> {'enforce_eager': True}, enforce_eager False -> True" in why
    # faster: the same terms, the other way
    assert "the engine takes less time per byte read" in explain_probe(new, old, "tok_s")


def test_a_probe_without_a_model_lists_its_counts_that_changed():
    old = SimpleNamespace(probe="tts.synth", values={"rtf": 0.2, "patches": 100.0, "steps": 10.0},
                          info={"steps": 10}, units={"patches": "", "steps": ""}, exact=["patches", "steps"])
    new = SimpleNamespace(probe="tts.synth", values={"rtf": 0.3, "patches": 100.0, "steps": 16.0},
                          info={"steps": 16}, units={"patches": "", "steps": ""}, exact=["patches", "steps"])
    assert explain_probe(old, new, "rtf") == "steps +60.0% (10 -> 16); changed: steps 10 -> 16"


def test_the_machine_must_match_and_software_is_listed():
    h100 = {"device": "cuda", "device_name": "NVIDIA H100", "cpu_model": "Xeon 8480"}
    assert machine_mismatches(h100, dict(h100)) == {}
    assert set(machine_mismatches(h100, dict(h100, device_name="NVIDIA H200", cpu_model="EPYC"))) == {"gpu",
                                                                                                      "cpu_model"}
    # waived by name (pytest's --voiceperf-allow-mismatch and compare's --allow-mismatch alike); a typo is refused
    h200 = dict(h100, device_name="NVIDIA H200", cpu_model="EPYC")
    assert set(machine_mismatches(h100, h200, "gpu")) == {"cpu_model"} and machine_mismatches(h100, h200, "all") == {}
    with pytest.raises(ValueError, match=r"unknown check\(s\) gpus; the checks are gpu, cpu_model, cpu_isa"):
        machine_mismatches(h100, h200, "gpus")
    old = dict(h100, packages={"vllm": "0.24.0", "torch": "2.11.0"}, driver="580.1")
    new = dict(h100, packages={"vllm": "0.25.0", "torch": "2.11.0"}, driver="590.2")
    assert changes(old, new) == ["vllm 0.24.0 -> 0.25.0", "driver 580.1 -> 590.2"]


def _rec(nodeid, rounds, probe_rounds=None, **kw):
    r = {"nodeid": nodeid, "claim": nodeid, "value": sorted(rounds)[len(rounds) // 2], "samples": rounds,
         "rounds": len(rounds), "higher_is_better": True, "outcome": "passed", "reason": "", "disturbed": [],
         "probes": {"m": {"probe": "t.const", "call": f"t.const{nodeid}", "values": {"rate": rounds[0]},
                          "samples": {"rate": probe_rounds or [x / 10 for x in rounds]}, "units": {"rate": "tok/s"}}}}
    r.update(kw)
    return r


def test_the_correction_counts_what_this_run_compares_not_the_whole_baseline():
    base = {"results": [_rec(f"c{i}", [100.0, 101.0, 99.0]) for i in range(30)]}
    g = Gate("b.json", base, tolerance=0.10, alpha=0.05)
    assert g.n_figures == 60
    g.plan(["c0"])  # this run compares one case: its metric and its probe's figure
    assert g.n_figures == 2
    slow = g.check(_rec("c0", [80.0, 81.0, 79.5]))
    assert [c.verdict for c in slow] == ["regressed", "regressed"]
    assert slow[0].level == 0.05 / 2
    g.looks = 8  # rounds added while the gate waits: each look is one more test of the figure
    assert g.correction == 16


def test_the_guarded_share_fails_a_gate_that_decided_too_little():
    base = {"results": [_rec("a", [100.0, 100.5, 99.5]), _rec("b", [100.0, 100.5, 99.5])]}
    g = Gate("b.json", base, tolerance=0.10, alpha=0.05, min_guarded=0.8)
    g.plan(["a", "b"])
    g.check(_rec("a", [100.0, 100.2, 99.8]))
    assert g.guarded()["guarded"] == 2 and g.guarded()["offered"] == 4
    assert not g.guarded()["enough"] and g.failed()
    assert "guarded 2 of 4 figures (50%); 2 not compared (case not measured or not run). FAILED" in g.guarded_line()
    g.check(_rec("b", [100.0, 100.2, 99.8]))
    assert g.guarded()["enough"] and not g.failed()


def test_known_failures_and_verdict_changes():
    base = {"results": [_rec("a", [100.0] * 3, outcome="failed"), _rec("b", [100.0] * 3)]}
    g = Gate("b.json", base, tolerance=0.10, alpha=0.05)
    assert g.known_failure("a") == "failed" and g.known_failure("b") is None
    assert g.verdict_change("a", "failed") is None
    assert g.verdict_change("b", "failed") == "passed -> failed"
    assert g.verdict_change("b", "unmeasured") is None and g.verdict_change("new", "failed") is None
    assert g.failed()


def test_engine_options_a_claim_may_set_and_those_it_may_not():
    import pytest

    from pytest_voiceperf.probes import Unmeasured
    from pytest_voiceperf.probes.llm_call import claim_engine_args

    assert claim_engine_args("enforce_eager=true, max_num_seqs=256,kv_cache_dtype=fp8") == {
        "enforce_eager": True, "max_num_seqs": 256, "kv_cache_dtype": "fp8"}
    assert claim_engine_args("") == {}
    # a pull request's claim cannot reach options that load code or name files
    for bad in ("trust_remote_code=true", "model=/etc", "enforce_eager", 'max_num_seqs={"a": 1}'):
        with pytest.raises(Unmeasured):
            claim_engine_args(bad)


def test_the_operators_engine_options_are_parsed_and_checked():
    import pytest

    from pytest_voiceperf.cmdline import engine_args

    assert engine_args(["vllm:enforce_eager=true", "vllm:max_num_seqs=256", 'vllm:compilation_config={"level": 0}']) \
        == {"vllm": {"enforce_eager": True, "max_num_seqs": 256, "compilation_config": {"level": 0}}}
    for bad in ("enforce_eager=true", "vllm:enforce_eager", "nemo:x=1", "vllm:model=/x"):
        with pytest.raises(pytest.UsageError):
            engine_args([bad])


def test_a_figure_this_run_gives_once_is_not_held_against_the_gate_but_named():
    # a search (asr.streams) gives one figure a run: no rounds to compare, by design of the probe
    base = {"results": [_rec("a", [100.0, 100.5, 99.5]), _rec("s", [256.0])]}
    g = Gate("b.json", base, tolerance=0.10, alpha=0.05, min_guarded=0.8)
    g.plan(["a", "s"])
    g.check(_rec("a", [100.0, 100.2, 99.8]))
    g.check(_rec("s", [576.0]))
    assert g.guarded()["one_figure_per_run"] == 2 and g.guarded()["offered"] == 2 and g.guarded()["enough"]
    assert g.guarded_line() == ("guarded 2 of 2 figures (100%); besides, 2 figures this run gives once (a search: "
                                "no rounds to compare)")
    # a baseline that says one round where this run took three cannot switch the gate off
    g = Gate("b.json", {"results": [_rec("a", [100.0])]}, tolerance=0.10, alpha=0.05, min_guarded=0.8)
    g.plan(["a"])
    g.check(_rec("a", [100.0, 100.2, 99.8]))
    assert g.guarded()["guarded"] == 0 and not g.guarded()["enough"]
