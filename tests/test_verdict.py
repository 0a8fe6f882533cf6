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
