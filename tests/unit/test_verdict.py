"""The pure verdict core: how a measured case's call ends becomes its outcome and pytest's report."""
import pytest

from pytest_voiceperf import verdict
from pytest_voiceperf.exceptions import VerdictFailed
from pytest_voiceperf.probes import EngineError, Unmeasured
from pytest_voiceperf.verdict import outcome_of

LOC = "claims/a.yaml:1"


def of(exc=None, report="passed", wasxfail=None, xfail_reason=None, strict=False, reason=""):
    return outcome_of(exc, report=report, wasxfail=wasxfail, xfail_reason=xfail_reason, strict=strict,
                      location=LOC, reason=reason)


def test_passed_and_failed():
    assert of().outcome == "passed" and of().report == "passed"
    f = of(VerdictFailed("0.5 is not >= 1"), report="failed")
    assert (f.outcome, f.reason, f.report) == ("failed", "0.5 is not >= 1", "failed")
    # the reason the case recorded wins over the exception's text
    assert of(VerdictFailed("x"), report="failed", reason="regressed: y").reason == "regressed: y"


def test_unmeasured_is_a_skip_never_an_xfail_and_fails_under_strict():
    u = of(Unmeasured("inconclusive: ..."), report="skipped", wasxfail="known slow")
    assert (u.outcome, u.report, u.skip_text) == ("unmeasured", "skipped", "unmeasured: inconclusive: ...")
    s = of(Unmeasured("no CUDA device"), report="failed", strict=True)
    assert (s.outcome, s.report) == ("unmeasured", "failed")
    assert s.longrepr == f"{LOC}: unmeasured (--voiceperf-strict): no CUDA device"


def test_engine_failure_is_an_error_even_when_xfailed():
    e = of(EngineError("vllm engine died during decode"), report="skipped", wasxfail="x")
    assert (e.outcome, e.report) == ("error", "failed")


def test_xfail_applies_to_decided_outcomes():
    assert of(VerdictFailed("low"), report="skipped", wasxfail="known: CPU").outcome == "xfailed"
    assert of(report="passed", wasxfail="known: CPU").outcome == "xpassed"
    strict = of(report="failed", xfail_reason="known: CPU")  # strict xfail that passed
    assert (strict.outcome, strict.report) == ("xpassed", "failed")
    assert "unexpectedly passed (strict xfail): known: CPU" == strict.reason


def test_a_skip_by_pytest_itself_is_unmeasured():
    k = of(report="skipped", reason="")
    assert (k.outcome, k.report, k.skip_text) == ("unmeasured", "skipped", None)


def test_the_committed_claim_schema_is_the_one_the_code_produces():
    """pytest_voiceperf/claim.schema.json (for editors and CI validators) matches the claim model;
    regenerate it with: python -c 'import json; from pytest_voiceperf.claims import json_schema;
    print(json.dumps(json_schema(), indent=2))' > pytest_voiceperf/claim.schema.json"""
    import json
    from pathlib import Path

    from pytest_voiceperf import claims

    committed = json.loads((Path(claims.__file__).parent / "claim.schema.json").read_text())
    assert committed == claims.json_schema()


def test_the_committed_results_schema_is_the_one_the_code_produces():
    """pytest_voiceperf/results.schema.json (what a results file holds, for other tools) matches the
    record models the gate, the report, merge and repro read; regenerate it with:
    python -c 'from pytest_voiceperf import record; print(record.schema_text(), end="")' > pytest_voiceperf/results.schema.json"""
    from pytest_voiceperf import record

    assert record.SCHEMA_PATH.read_text() == record.schema_text()


def test_result_records_keep_unknown_fields_and_load_files_from_before_rounds():
    from pytest_voiceperf import record

    old = {"nodeid": "c.yaml::c", "claim": "c", "outcome": "passed", "value": 1.0, "samples": [1.0, 1.1],
           "probes": {"m": {"probe": "t.const", "values": {"x": 1.0}}}, "added_later": {"k": 1}}
    r = record.result(old)
    assert r.rounds is None and not r.has_rounds  # repetitions, not rounds: the gate will not compare them
    assert r.probes["m"].args == {} and r.dump()["added_later"] == {"k": 1}
    assert record.result(dict(old, rounds=3)).has_rounds
    assert record.result(dict(old, outcome="unmeasured", reason="inconclusive: ...")).kind_of_outcome == "inconclusive"
    try:
        record.results_file({"provenance": {}, "results": [{"claim": "c"}]}, "x.json")
    except ValueError as exc:
        assert "x.json: not a voiceperf results file (results.0.nodeid" in str(exc)
    else:
        raise AssertionError("a record without a node id loaded")


# -- the interval and the words, from lists of measurements ------------------------------------



def _iv(values, bounds, reps=(), **kw):
    kw = {"deterministic": False, "exact": False, "bracket": None, "floor": 0.01, **kw}
    return verdict.interval_verdict(list(values), list(reps), bounds=bounds, **kw)


def test_rounds_inside_the_bound_pass_and_straddling_rounds_are_inconclusive():
    assert _iv([0.90, 0.91, 0.905], (0.86, 0.98))["decision"] == "passed"
    assert _iv([0.70, 0.72, 0.71], (0.86, 0.98))["decision"] == "failed"
    ev = _iv([0.80, 0.95, 0.88], (0.86, 0.98))
    assert ev["decision"] == "inconclusive" and ev["ci"][0] < 0.86 < ev["ci"][1]


def test_the_interval_is_never_narrower_than_the_run_to_run_floor():
    ev = _iv([1.0, 1.0001, 0.9999], (None, 1.005))
    assert ev["ci"][1] >= 1.0 * 1.01 - 1e-9 and "floor" in ev["ci_method"] and ev["decision"] == "inconclusive"


def test_one_round_of_a_timed_figure_decides_nothing_and_counts_take_one():
    assert _iv([0.5], (None, 1.0))["decision"] == "inconclusive"
    ev = _iv([3.0], (3.0, 3.0), deterministic=True, exact=True)
    assert ev["decision"] == "passed" and ev["ci"] == (3.0, 3.0) and ev["ci_method"].startswith("exact")


def test_two_modes_widen_the_interval_over_both():
    reps = [1.0] * 10 + [2.0] * 5
    ev = _iv([1.2, 1.25, 1.3], (None, 1.5), reps=reps)
    assert ev["modes"] and ev["ci"][1] >= 2.0 and ev["decision"] == "inconclusive"


class _Claim:
    unit = "fraction"

    class expect:  # noqa: N801
        @staticmethod
        def describe():
            return "in [0.86, 0.98]"

        @staticmethod
        def bounds():
            return (0.86, 0.98)


def _conclude(values):
    from pytest_voiceperf.record import ResultRecord

    res = ResultRecord(claim="c", nodeid="n", outcome="unmeasured", rounds=0, path="p", line=1)
    ev = _iv(values, (0.86, 0.98))
    verdict.conclude(res, _Claim, ev, n_min=3, n_max=6, budget=60, elapsed=1.0, futility="", noise_floor=0.01)
    return res


def test_conclude_says_the_verdict_in_words():
    assert _conclude([0.90, 0.91, 0.905]).decision == "passed"
    with pytest.raises(VerdictFailed, match=r"is not in \[0.86, 0.98\] \(interval \[0\.\d+, 0\.\d+\], 3 rounds"):
        _conclude([0.70, 0.72, 0.71])
    with pytest.raises(Unmeasured, match=r"inconclusive: .* straddles in \[0.86, 0.98\] after 3 rounds"):
        _conclude([0.80, 0.95, 0.88])
