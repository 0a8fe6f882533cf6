"""The pure verdict core: how a measured case's call ends becomes its outcome and pytest's report."""
from pytest_voiceperf.probes import EngineError, Unmeasured
from pytest_voiceperf.session import VerdictFailed
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
