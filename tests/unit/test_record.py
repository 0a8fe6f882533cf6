"""The results file's records over a committed file (tests/data/results-cpu.json: five cases of a CPU
run): read, written and read again unchanged; a hostile figure named; the record the session fills."""
import json
from pathlib import Path

import pytest

from pytest_voiceperf.record import ProbeRecord, ResultRecord, results_file

DATA = Path(__file__).parent.parent / "data" / "results-cpu.json"


def test_a_committed_results_file_reads_and_writes_back_unchanged():
    doc = json.loads(DATA.read_text())
    rf = results_file(doc, str(DATA))
    assert len(rf.results) == 5 and all(r.has_rounds for r in rf.results)
    again = json.loads(json.dumps(rf.dump()))
    for before, after in zip(doc["results"], again["results"]):
        assert {k: v for k, v in after.items() if k in before} == before
    assert results_file(again).dump() == rf.dump()


def test_a_provenance_of_the_wrong_shape_is_named_and_one_that_fits_is_kept_as_written():
    # a cached baseline is hostile: the gate reads packages, ceilings_end, complete before it compares
    doc = json.loads(DATA.read_text())
    read = results_file(doc)
    assert read.provenance.packages["torch"] == doc["provenance"]["packages"]["torch"]  # typed
    assert read.dump()["provenance"] == doc["provenance"]  # and written back as it was: nothing added or dropped
    for field, bad, where in (("packages", 5, "provenance.packages"),
                              ("complete", "maybe", "provenance.complete"),
                              ("ceilings_end", [{"probe": "hw.matmul", "change": "big"}], "provenance.ceilings_end.0.change"),
                              ("engines", {"vllm": 1}, "provenance.engines")):
        hostile = dict(doc, provenance=dict(doc["provenance"], **{field: bad}))
        with pytest.raises(ValueError, match=rf"^cache.json: not a voiceperf results file \({where.replace('.', '[.]')}: "):
            results_file(hostile, "cache.json")


def test_a_figure_that_is_not_a_number_is_named_with_its_record():
    doc = json.loads(DATA.read_text())
    doc["results"][2]["samples"][0] = "fast"
    with pytest.raises(ValueError, match=r"^cache.json: not a voiceperf results file \(results\.2\.samples: .*'fast' "
                                         r"is not a figure"):
        results_file(doc, "cache.json")


def test_the_record_the_session_fills_is_typed_on_assignment():
    r = ResultRecord(claim="c", nodeid="claims/c.yaml::c", outcome="unmeasured", rounds=0)
    r.ci = (0.8, 0.9)  # the interval module gives tuples; the record holds lists
    r.spread = (0.8, 0.9)
    r.probes["d"] = ProbeRecord(probe="llm.decode", values={"tok_s": float("nan")}, samples={"tok_s": [1.0, 2.0]})
    assert r.ci == [0.8, 0.9] and r.spread == [0.8, 0.9]
    assert r.probes["d"].values == {"tok_s": None}  # an undefined output is no figure
    with pytest.raises(ValueError):
        r.rounds = "three"
    assert r.dump()["ci"] == [0.8, 0.9] and r.dump()["rounds"] == 0


def test_the_gate_comparisons_of_a_record_are_typed_and_a_hostile_one_is_named():
    doc = json.loads(DATA.read_text())
    doc["results"][0]["baseline"] = [{"figure": "metric", "old": 134.0, "new": 50.15, "change": -0.6257,
                                      "ci": [-0.717, -0.555], "verdict": "regressed", "higher_is_better": True,
                                      "rounds": [6, 3], "explanation": "bytes read per token +158%"}]
    c = results_file(doc).results[0].baseline[0]
    assert (c.verdict, c.rounds, c.ci) == ("regressed", [6, 3], [-0.717, -0.555])
    doc["results"][0]["baseline"][0]["old"] = "$(rm -rf /)"
    with pytest.raises(ValueError, match=r"^cache.json: not a voiceperf results file \(results\.0\.baseline\.0\.old: "):
        results_file(doc, "cache.json")
