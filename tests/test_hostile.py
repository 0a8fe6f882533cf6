"""The hostile corpus (tests/hostile, made by make_hostile_corpus.py) in one session."""
import json
import shutil
from pathlib import Path

HOSTILE = Path(__file__).parent / "hostile"

VALID = """\
id: valid-beside-hostile
title: a valid claim
statement: reading memory works
measure:
  m: {probe: hw.read_bandwidth, mib: 8}
metric: m.read_bw
unit: B/s
expect: {min: 1.0e6}
noise: {max_rel_spread: 50}
"""


def test_corpus_is_large_enough():
    assert len(list(HOSTILE.glob("*.yaml"))) >= 100


def test_every_hostile_file_is_a_clean_error_and_the_valid_claim_runs(pytester):
    d = pytester.mkdir("claims")
    for f in HOSTILE.glob("*.yaml"):
        shutil.copy(f, d / f.name)
    (d / "valid.yaml").write_text(VALID)
    res = pytester.runpytest("--voiceperf", "-q", "--voiceperf-json", "out.json", "-p", "no:randomly")
    out = res.stdout.str() + res.stderr.str()
    assert "Traceback" not in out and "INTERNALERROR" not in out
    doc = json.loads((pytester.path / "out.json").read_text())
    by_file = {}
    for r in doc["results"]:
        by_file.setdefault(r["nodeid"].split("::")[0], []).append(r)
    assert [r["outcome"] for r in by_file.pop("claims/valid.yaml")] == ["passed"]
    names = {f.name for f in HOSTILE.glob("*.yaml")}
    assert {k.split("/")[-1] for k in by_file} == names
    for f, rs in by_file.items():
        assert [r["outcome"] for r in rs] == ["error"], (f, rs)
        reason = rs[0]["reason"]
        assert reason.startswith(f + ":"), (f, reason)          # names the file (and line)
        assert "Traceback" not in reason and len(reason) < 800, (f, reason)
    # no side effect: no payload ran, the claim files are untouched, nothing reached outside
    assert not any(p.name.startswith("pwned") for p in pytester.path.rglob("*"))
    assert not any(p.name.startswith("pwned") for p in Path.cwd().glob("*"))
    assert sorted(p.name for p in d.iterdir()) == sorted(names | {"valid.yaml"})
