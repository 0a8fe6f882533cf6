"""The gate and repro over results given as data: rounds, shared probes, modes, ceilings."""

import pytest

from pytest_voiceperf import stats
from pytest_voiceperf.gate import Gate


def test_compare_rounds_outcomes():
    base = [100.0, 101.0, 99.0]
    # 30% slower on every round: regressed
    assert stats.compare_rounds(base, [70.0, 70.5, 69.5], True, 0.05, 0.05).verdict == "regressed"
    # the same figure: unchanged
    assert stats.compare_rounds(base, [100.5, 99.5, 100.0], True, 0.05, 0.05).verdict == "unchanged"
    # improved is reported as improved
    assert stats.compare_rounds(base, [150.0, 151.0, 149.0], True, 0.05, 0.05).verdict == "improved"
    # lower is better: a time that grew 30% regressed
    assert stats.compare_rounds(base, [130.0, 131.0, 129.0], False, 0.05, 0.05).verdict == "regressed"
    # -8% on average but rounds spread ±10%: cannot tell whether it is beyond the 5% tolerance
    rc = stats.compare_rounds(base, [82.0, 92.0, 102.0], True, 0.05, 0.05)
    assert rc.verdict == "inconclusive" and rc.ci[0] < -0.05 < rc.ci[1]
    # one round (a results file from before rounds): untestable, says how many are needed
    rc = stats.compare_rounds([100.0], [70.0, 70.0, 70.0], True, 0.05, 0.05)
    assert rc.verdict == "untestable" and "needs 3 rounds on each side (baseline 1" in rc.note


def test_bonferroni_level_over_figures():
    a, b = [100.0, 103.0, 97.0], [87.0, 90.0, 84.0]  # about -13%, rounds spread ±3%
    one = stats.compare_rounds(a, b, True, 0.05, 0.05, n_figures=1)
    many = stats.compare_rounds(a, b, True, 0.05, 0.05, n_figures=200)
    assert one.verdict == "regressed" and many.verdict == "inconclusive"
    assert many.level == pytest.approx(0.05 / 200)


def _result(nodeid, rounds, probe_rounds=None, **kw):
    # the metric (per round) and a probe figure it is computed from: two measurements (a metric that is
    # the probe figure itself is one: test_a_metric_that_is_one_probe_output_is_one_figure)
    r = {"nodeid": nodeid, "claim": nodeid, "value": sorted(rounds)[len(rounds) // 2], "samples": rounds,
         "rounds": len(rounds), "higher_is_better": True, "outcome": "passed", "reason": "", "disturbed": [],
         "probes": {"m": {"probe": "t.const", "args": {"x": 1}, "values": {"rate": rounds[0]},
                          "samples": {"rate": probe_rounds or [x / 10 for x in rounds]}, "units": {"x": "", "rate": "tok/s"}}}}
    r.update(kw)
    return r


def test_gate_untestable_on_a_file_from_before_rounds_and_on_disturbed():
    legacy = _result("a", [100.0, 100.0, 100.0])
    del legacy["rounds"]  # samples of a file from before rounds are repetitions, not rounds
    g = Gate("base.json", {"results": [legacy]}, tolerance=0.05, alpha=0.05)
    comps = g.check(_result("a", [50.0, 50.0, 50.0]))
    assert {c.verdict for c in comps} == {"untestable"}
    assert "baseline 0" in comps[0].note
    g = Gate("base.json", {"results": [_result("a", [100.0, 100.0, 100.0])]}, tolerance=0.05, alpha=0.05)
    dist = _result("a", [50.0, 50.0, 50.0], outcome="unmeasured", reason="disturbed: other processes used 1 core",
                   disturbed=["other processes used 1 core"])
    comps = g.check(dist)
    assert comps and all(c.verdict == "untestable" and c.note.startswith("disturbed") for c in comps)
    assert "untestable: disturbed" in g.summary_line() and "0 regressed" in g.summary_line()


def test_gate_compares_a_shared_probe_once():
    base = {"results": [_result("a", [100.0] * 3), _result("b", [100.0] * 3)]}
    g = Gate("base.json", base, tolerance=0.05, alpha=0.05)
    assert g.n_figures == 3  # two metrics + one shared probe figure
    g.check(_result("a", [60.0] * 3))
    g.check(_result("b", [60.0] * 3))
    figs = [c.figure for _, comps in g.seen for c in comps]
    assert figs.count("m.rate [tok/s]") == 1 and figs.count("metric") == 2


def test_a_metric_that_is_one_probe_output_is_one_figure():
    # gate-decode's metric is d.tok_s: the metric's rounds are the probe figure's rounds. Counted twice, it
    # halved every figure's level (alpha/16 over 8 looks, not alpha/8) and "guarded 2 of 2" was one figure
    from pytest_voiceperf.exports import figures as exported
    from pytest_voiceperf.record import results_file

    same = lambda rounds: _result("a", rounds, probe_rounds=rounds)  # noqa: E731
    base = same([100.0, 101.0, 99.0, 100.5, 99.5, 100.0])
    base["probes"]["m"]["values"]["rate"] = base["value"]
    g = Gate("base.json", {"results": [base]}, tolerance=0.1, alpha=0.05)
    assert g.n_figures == 1
    slow = same([70.0, 70.5, 69.5])
    slow["probes"]["m"]["values"]["rate"] = slow["value"]
    comps = g.check(slow)
    assert [(c.figure, c.verdict) for c in comps] == [("m.rate [tok/s]", "regressed")]
    assert (g.guarded()["guarded"], g.guarded()["offered"]) == (1, 1)
    # a metric computed from the figure (another measurement: other rounds) is a figure of its own
    g = Gate("base.json", {"results": [_result("a", [100.0, 101.0, 99.0])]}, tolerance=0.1, alpha=0.05)
    assert g.n_figures == 2
    # exports name both (the claim's metric is what a benchmark dashboard shows)
    doc = results_file({"provenance": {}, "results": [base]})
    assert [f.name for f in exported(doc)].count("a") == 1 and len(exported(doc)) == 2


def test_gate_compares_one_call_once_whatever_its_arguments_spelling():
    # a claim that spells a default out and one that leaves it off share one probe call in the
    # session, which records its identity ("call"); the gate counts and compares it once
    def res(nodeid, rounds, args):
        r = _result(nodeid, rounds)
        r["probes"]["m"].update(args=args, call='t.const{"x": 1, "y": 0}')
        return r

    base = {"results": [res("a", [100.0] * 3, {"x": 1}), res("b", [100.0] * 3, {"x": 1, "y": 0})]}
    g = Gate("base.json", base, tolerance=0.05, alpha=0.05)
    assert g.n_figures == 3
    g.check(res("a", [60.0] * 3, {"x": 1}))
    g.check(res("b", [60.0] * 3, {"x": 1, "y": 0}))
    assert [c.figure for _, comps in g.seen for c in comps].count("m.rate [tok/s]") == 1


def _metric_verdict(old, new_rounds, tolerance):
    g = Gate("base.json", {"results": [old]}, tolerance=tolerance, alpha=0.05)
    comps = [c for c in g.check(_result("a", new_rounds)) if c.figure == "metric"]
    assert len(comps) == 1
    return comps[0].verdict, comps[0].note


# H200, qwen3-0.6b decode at batch 1: one run's repetitions between 389 and 640 tok/s
@pytest.mark.parametrize("kind,flag,tolerance", [
    ("bimodal", {"modes": [{"value": 590.0, "n": 1}, {"value": 632.0, "n": 10}]}, 0.01),
    ("unstable", {"rep_samples": [389.0, 640.0, 620.0, 600.0, 610.0, 400.0]}, 0.05),
])
def test_gate_does_not_call_a_mode_switch_regressed(kind, flag, tolerance):
    """A bimodal or unstable baseline: ten rounds of this run in the slow state and one in the fast
    give means that differ significantly, but the runs share both states, so the run merely sat in
    the other one more often. Regressed only when every round is below every baseline round."""
    slow = 590.0 if kind == "bimodal" else 470.0
    old = _result("a", [632.0] * 10 + [slow], **flag)
    verdict, note = _metric_verdict(old, [slow] * 10 + [633.0], tolerance)
    assert verdict == "inconclusive" and f"{kind} figure" in note
    assert _metric_verdict(old, [300.0, 301.0, 299.0], tolerance)[0] == "regressed"


def test_unstable_repetitions_span_one_and_a_half_times():
    assert stats.unstable([389.0, 640.0, 403.0, 410.0, 620.0]) == (389.0, 640.0)
    assert stats.unstable([100.0, 120.0, 110.0, 140.0]) is None  # spans 1.4x: noisy, not unstable
    assert stats.unstable([-0.1, 0.2, 0.1, 0.3]) is None  # a difference near zero has no ratio
    assert stats.unstable([1.0, 2.0, 3.0]) is None  # too few to tell
    # a steady baseline (repetitions within 1.35x) has no such guard: the same switch is regressed
    steady = _result("a", [632.0] * 10 + [470.0], rep_samples=[630.0, 635.0, 632.0, 470.0])
    assert _metric_verdict(steady, [470.0] * 10 + [633.0], 0.05)[0] == "regressed"


def test_repro_says_the_run_to_run_noise_and_figures_unstable_between_runs():
    from pytest_voiceperf import repro

    def doc(*results):
        return {"provenance": {}, "results": list(results)}

    a1 = _result("a", [100.0, 101.0, 99.0], ci=[98.0, 102.0], ci_method="Student-t")
    a2 = _result("a", [91.0, 91.5, 90.5], ci=[89.0, 93.0], ci_method="Student-t")  # -9%, tight rounds
    a = repro.analyze([doc(a1), doc(a2)], tolerance=0.05)
    pair = a["false_alarms"][0]
    assert pair["regressed"]  # at 5% the gate calls the shift of the run's state a regression
    st = pair["safe_tolerance"]
    assert 0.05 < st < 0.10  # ... and needs more than 5% on this pair
    assert [n for n, _ in pair["disjoint"]] == ["a"]
    text = repro.render(a)
    assert f"smallest tolerance without a false alarm on this pair: {st * 100:.0f}% (the gate uses 5%)" in text
    assert "UNSTABLE BETWEEN RUNS a: 100 [98, 102] then 91 [89, 93]" in text
    assert not repro.analyze([doc(a1), doc(a2)])["false_alarms"][0]["regressed"]  # the default 10%


def test_repro_counts_flips_false_alarms_and_a_caught_slowdown():
    from pytest_voiceperf import repro

    def doc(*results):
        return {"provenance": {}, "results": list(results)}

    a1 = _result("a", [100.0, 101.0, 99.0])
    b1 = _result("b", [10.0, 10.1, 9.9], outcome="failed")
    a2 = _result("a", [100.5, 99.5, 100.0])
    b2 = _result("b", [10.0, 10.1, 9.9], outcome="passed")  # a decided verdict that flipped
    inc = _result("a", [99.0, 100.0, 101.0], outcome="unmeasured", reason="inconclusive: ...")
    slow = doc(_result("a", [50.0, 50.5, 49.5]), b2)
    a = repro.analyze([doc(a1, b1), doc(a2, b2), doc(inc, b2)], slow)
    assert [n for n, _ in a["flips"]] == ["b"]
    assert a["counts"][2] == {"inconclusive": 1, "passed": 1}
    assert all(not p["regressed"] for p in a["false_alarms"])
    assert [n for n, _ in a["slow"]["regressed"]] == ["a", "a"]  # metric and the probe's figure
    text = repro.render(a)
    assert "decided-verdict flips: 1" in text and "FLIP b: failed / passed / passed" in text
    assert "gate false alarms between runs of the same setup: 0" in text and "CAUGHT a" in text


def test_gate_does_not_compare_figures_of_a_ceiling_that_drifted_during_the_run():
    old = _result("a", [100.0, 101.0, 99.0])
    new = _result("a", [80.0, 80.5, 79.5])
    drift = {"ceilings_end": [{"probe": "t.const", "args": {"x": 1}, "change": 0.11}]}
    g = Gate("base.json", {"results": [old]}, tolerance=0.05, alpha=0.05, new_provenance=drift)
    comps = g.check(new)
    assert comps and all(c.verdict == "untestable" for c in comps)
    assert "this run: t.const {'x': 1} moved +11.0% when measured again at the end of the run" in comps[0].note
    still = {"ceilings_end": [{"probe": "t.const", "args": {"x": 1}, "change": 0.01}]}
    g = Gate("base.json", {"results": [old]}, tolerance=0.05, alpha=0.05, new_provenance=still)
    assert [c.verdict for c in g.check(new)] == ["regressed", "regressed"]


def test_gate_does_not_compare_figures_when_their_ceiling_differs_between_the_runs():
    # two days on the 2-core VM: bf16 matmul 886 and 796 GFLOP/s, every engine slower with it
    def run(rounds, ceiling):
        r = _result("a", rounds)
        r["probes"]["m"]["info"] = {"ceilings": {"matmul_flops:bfloat16": {
            "implied": 2.5e11, "ceiling": ceiling, "ratio": 2.5e11 / ceiling, "label": "measured bfloat16 matmul peak"}}}
        return r

    old, slow = run([100.0, 101.0, 99.0], 8.86e11), [80.0, 80.5, 79.5]
    g = Gate("base.json", {"results": [old]}, tolerance=0.05, alpha=0.05)
    comps = g.check(run(slow, 7.96e11))
    assert comps and {c.verdict for c in comps} == {"untestable"}
    assert comps[0].note == ("the machine changed between the runs: its measured bfloat16 matmul peak was "
                             "8.86e+11 in the baseline and 7.96e+11 in this run (-10.2%)")
    assert g.counts() == {"untestable: machine changed": 2}
    g = Gate("base.json", {"results": [old]}, tolerance=0.05, alpha=0.05)
    assert [c.verdict for c in g.check(run(slow, 8.70e11))] == ["regressed", "regressed"]  # -1.8%: compared


def _read_bw(rounds, bw):
    """Case "a" whose decode figure was checked against the read bandwidth measured in rounds ``bw``."""
    r = _result("a", rounds)
    r["probes"]["m"]["info"] = {"ceilings": {"read_bw": {
        "implied": 6e9, "ceiling": max(bw), "ratio": 6e9 / max(bw), "label": "measured read bandwidth",
        "rounds": bw}}}
    return r


def test_a_ceiling_that_moved_within_its_own_spread_is_not_a_machine_that_changed():
    # the shipped workflow on the 2-core CI VM: read bandwidth best rounds 30.8 then 25.6 GB/s (-17%) in two
    # runs minutes apart, 30.5 GB/s read again at the end of the second; tolerance 0.3 -- the case's two
    # figures were left untestable and the unchanged pull request failed the gate (guarded 0 of 2)
    old = _read_bw([100.0, 101.0, 99.0, 100.5, 99.5, 100.0], [30.8e9, 22.6e9, 27.0e9])
    g = Gate("base.json", {"results": [old]}, tolerance=0.15, alpha=0.05)
    assert {c.verdict for c in g.check(_read_bw([99.0, 100.0, 101.0], [25.6e9, 19.0e9, 23.5e9]))} == {"unchanged"}
    # the same move in tight rounds is decided: the machine changed, the figures are not compared
    old = _read_bw([100.0, 101.0, 99.0], [30.8e9, 30.6e9, 30.7e9])
    g = Gate("base.json", {"results": [old]}, tolerance=0.15, alpha=0.05)
    comps = g.check(_read_bw([80.0, 80.5, 79.5], [25.6e9, 25.5e9, 25.4e9]))
    assert {c.verdict for c in comps} == {"untestable"}
    assert comps[0].note.startswith("the machine changed between the runs: its measured read bandwidth was "
                                    "3.08e+10 in the baseline and 2.56e+10 in this run (-16.9%), interval [")


def test_a_gate_left_undecided_by_the_machine_says_why_and_is_not_a_regression():
    # the shipped workflow on the CI VM (stop 48): an unchanged pull request, both figures untestable
    # because the read bandwidth moved, and the job summary said only "2 untestable: machine changed"
    old = _read_bw([100.0, 101.0, 99.0], [30.8e9, 30.6e9, 30.7e9])
    g = Gate("base.json", {"results": [old]}, tolerance=0.15, alpha=0.05, min_guarded=0.8)
    g.plan(["a"])
    g.check(_read_bw([100.0, 100.5, 99.5], [20.6e9, 20.5e9, 20.4e9]))
    assert g.failed() and g.undecided()
    md = g.markdown()
    assert "### Untestable (2)" in md
    assert "the machine changed between the runs: its measured read bandwidth was 3.08e+10 in the baseline and " \
           "2.06e+10 in this run (-33.1%)" in md
    # a regression beside it is no longer undecided: measuring again would not undo it
    def other(rounds):
        r = _result("b", rounds)
        r["probes"]["m"]["args"] = {"x": 2}
        return r

    g = Gate("base.json", {"results": [old, other([100.0, 101.0, 99.0])]}, tolerance=0.15, alpha=0.05, min_guarded=0.8)
    g.plan(["a", "b"])
    g.check(_read_bw([100.0, 100.5, 99.5], [20.6e9, 20.5e9, 20.4e9]))
    g.check(other([70.0, 70.5, 69.5]))
    assert g.failed() and not g.undecided()
    # decided and unchanged: passed, not undecided
    g = Gate("base.json", {"results": [old]}, tolerance=0.15, alpha=0.05, min_guarded=0.8)
    g.plan(["a"])
    g.check(_read_bw([100.0, 100.5, 99.5], [30.6e9, 30.5e9, 30.9e9]))
    assert not g.failed() and not g.undecided() and "Untestable" not in g.markdown()


def test_a_machine_that_moved_the_other_way_cannot_explain_a_change():
    # the shipped workflow on an EPYC CI VM: the candidate with 12 layers decoded 47.8 -> 29.8 tok/s while
    # the read bandwidth rose 19.5 -> 29.7 GB/s (+52%, decided over its rounds): a faster machine does not
    # make a slower engine, so the slowdown stands; the same slowdown on a slower machine is untestable
    base = _read_bw([47.0, 48.5, 47.8], [19.4e9, 19.6e9, 19.5e9])
    faster, slower = [29.6e9, 29.8e9, 29.7e9], [12.9e9, 13.0e9, 13.1e9]
    g = Gate("base.json", {"results": [base]}, tolerance=0.3, alpha=0.05)
    comps = g.check(_read_bw([29.5, 30.1, 29.8], faster))
    assert [c.verdict for c in comps] == ["regressed", "regressed"]
    assert "the machine was faster in this run (its measured read bandwidth was 1.96e+10 in the baseline" in comps[0].note
    assert comps[0].note.endswith("over its rounds): it cannot explain this change")
    g = Gate("base.json", {"results": [base]}, tolerance=0.3, alpha=0.05)
    assert {c.verdict for c in g.check(_read_bw([29.5, 30.1, 29.8], slower))} == {"untestable"}
    # unchanged on a faster machine may hide a slower engine: not compared
    g = Gate("base.json", {"results": [base]}, tolerance=0.3, alpha=0.05)
    assert {c.verdict for c in g.check(_read_bw([47.5, 48.0, 47.2], faster))} == {"untestable"}
    # a speedup on a slower machine stands
    g = Gate("base.json", {"results": [base]}, tolerance=0.3, alpha=0.05)
    assert {c.verdict for c in g.check(_read_bw([80.0, 81.0, 80.5], slower))} == {"improved"}


def test_the_gate_compares_exact_figures_as_they_are():
    from pytest_voiceperf.gate import compare_result

    def res(v):
        return {"nodeid": "x", "value": v, "samples": [v], "rounds": 1, "higher_is_better": False,
                "ci_method": "exact: the metric is made of counts (frames, FLOPs, bytes, calls), not timings",
                "outcome": "passed", "probes": {}}

    assert [c.verdict for c in compare_result(res(100.0), res(100.0), 0.05, 0.05)] == ["unchanged"]
    assert [c.verdict for c in compare_result(res(100.0), res(120.0), 0.05, 0.05)] == ["regressed"]
    assert [c.verdict for c in compare_result(res(100.0), res(80.0), 0.05, 0.05)] == ["improved"]
    timed = dict(res(100.0), ci_method="one round")
    assert [c.verdict for c in compare_result(timed, timed, 0.05, 0.05)] == ["untestable"]


def test_a_one_round_timing_beside_counts_is_not_compared_as_a_count():
    """A case decided by counts takes one round; its probe's timing from that round is not a count.
    Same code twice on the CPU: asr.buffered's RTF 0.81 -> 0.91 was gated "regressed" as an exact
    figure, because a probe without repetition samples was taken as deterministic."""
    from pytest_voiceperf.gate import compare_result

    def run(rtf):
        return {"nodeid": "x", "value": 3.0, "samples": [3.0], "rounds": 1, "higher_is_better": True,
                "ci_method": "exact: the metric is made of counts (frames, FLOPs, bytes, calls), not timings",
                "outcome": "passed", "probes": {"buf": {
                    "probe": "asr.buffered", "values": {"rtf": rtf, "window_s": 4.64},
                    "samples": {"rtf": [rtf], "window_s": [4.64]}, "exact": ["window_s"],
                    "units": {"rtf": "RTF", "window_s": "s"}}}}

    got = {c.figure: c for c in compare_result(run(0.81), run(0.91), 0.1, 0.05, all_figures=True)}
    assert got["metric"].verdict == "unchanged"
    assert got["buf.rtf [RTF]"].verdict == "untestable"  # one round of a timing: nothing to compare
    changed = run(0.81)
    changed["probes"]["buf"]["values"]["window_s"] = changed["probes"]["buf"]["samples"]["window_s"][0] = 5.5
    got = {c.figure: c for c in compare_result(run(0.81), changed, 0.1, 0.05, all_figures=True)}
    assert got["buf.window_s [s]"].verdict == "regressed"  # declared exact: compared as it is, one round
