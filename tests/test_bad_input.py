"""Every kind of bad claim file gives a clear file:line message; the other claims still run."""
import json
import sys

import pytest
from helpers import CONST_PROBE, claim

GOOD = claim("c-good")

BAD = {
    # name: (file content (str or bytes), expected line, words the message must hold)
    "malformed.yaml": ("id: x\ntitle: [unclosed\n", 3, "malformed YAML"),
    "list.yaml": ("- id: x\n- title: y\n", 1, "must be a mapping"),
    "unknown-key.yaml": (GOOD.replace("c-good", "c-uk") + "colour: blue\n", 9, "unknown key 'colour'"),
    "missing.yaml": ("id: c-miss\ntitle: t\nstatement: s\nmeasure:\n  m: t.const\nexpect: {min: 1}\n", 1,
                     "missing required key 'metric'"),
    "unknown-probe.yaml": (claim("c-up", measure="m: {probe: t.nothing}"), 5, "unknown probe 't.nothing'"),
    "unknown-output.yaml": (claim("c-uo", metric="m.z * 2"), 6, "outputs are rate, x, y"),
    "bad-expr.yaml": (claim("c-be", metric="m.x +* )"), 6, "not a valid expression"),
    "attr.yaml": (claim("c-at", metric="m.x.__class__"), 6, "attribute access"),
    "import.yaml": (claim("c-im", metric="__import__('os').system('touch pwned')"), 6, "only abs"),
    "non-numeric.yaml": (claim("c-nn", expect="{min: lots}"), 8, "expect.min"),
    "lo-gt-hi.yaml": (claim("c-lh", expect="{between: [0.98, 0.86]}"), 8, "lo > hi"),
    "dup-a.yaml": (claim("c-dup"), 1, None),
    "dup-b.yaml": (claim("c-dup"), 1, "duplicate claim id 'c-dup'"),
    "empty.yaml": ("", 1, "the file is empty"),
    "binary.yaml": (b"\x00\x01\x02\xff\xfe binary", 1, "binary file"),
    "empty-param.yaml": (claim("c-ep", extra="params:\n  model: []\n"), 9, "empty list"),
    "python-tag.yaml": ("id: !!python/object/apply:os.system ['touch pwned']\n", 1, "not allowed"),
    "bad-template.yaml": (claim("c-bt", measure="m: {probe: t.const, x: '{nope.__class__}'}"), 5,
                          "only plain {param}"),
    "bad-arg.yaml": (claim("c-ba", measure="m: {probe: t.const, colour: 3}"), 5, "takes no argument 'colour'"),
}


@pytest.fixture
def run(pytester):
    pytester.makeconftest(CONST_PROBE)
    d = pytester.mkdir("claims")
    (d / "good.yaml").write_text(GOOD)
    for name, (content, _, _) in BAD.items():
        if isinstance(content, bytes):
            (d / name).write_bytes(content)
        else:
            (d / name).write_text(content)
    res = pytester.runpytest("--voiceperf", "-v", "--voiceperf-json", "out.json")
    return pytester, res


def test_each_bad_file_is_named_with_line_and_the_good_claim_still_runs(run):
    pytester, res = run
    out = res.stdout.str()
    assert "Traceback" not in out
    assert "INTERNALERROR" not in out
    assert not (pytester.path / "pwned").exists()
    res.stdout.fnmatch_lines(["claims/good.yaml::c-good PASSED*"])
    for name, (_, line, words) in BAD.items():
        if words is None:
            continue
        expected = f"claims/{name}:{line}: "
        matching = [ln for ln in out.splitlines() if expected in ln and "invalid claim file" in ln]
        assert matching, f"no 'invalid claim file: {expected}...' line for {name}"
        assert any(words in ln for ln in matching), f"{name}: {matching}"
    doc = json.loads((pytester.path / "out.json").read_text())
    outcomes = {r["nodeid"].split("::")[0]: r["outcome"] for r in doc["results"]}
    assert outcomes["claims/good.yaml"] == "passed"
    assert outcomes["claims/dup-b.yaml"] == "error"
    assert sum(1 for o in outcomes.values() if o == "error") == len(BAD) - 1
    assert res.ret == 1


def test_validate_cli_reports_the_same_errors(pytester):
    pytester.makeconftest(CONST_PROBE)
    d = pytester.mkdir("claims")
    (d / "lo-gt-hi.yaml").write_text(BAD["lo-gt-hi.yaml"][0])
    (d / "hw.yaml").write_text(claim("c-hw", measure="m: hw.read_bandwidth", metric="m.read_bw"))
    res = pytester.run(sys.executable, "-m", "pytest_voiceperf.cli", "validate", str(d))
    assert res.ret == 1
    res.stdout.fnmatch_lines(["*claims/lo-gt-hi.yaml:8: *lo > hi*", "*1 valid, 1 invalid*"])
    assert "Traceback" not in res.stdout.str() + res.stderr.str()


def test_an_absolute_results_path_after_a_space_gets_a_hint(pytester, tmp_path_factory):
    """pytest picks its rootdir before it knows the plugin's options, so the value of
    '--voiceperf-json /elsewhere/x.json', once that file exists (the second run), reads as a test path
    there and the claims are looked for in /elsewhere: the error says so and how to write it."""
    pytester.makeconftest(CONST_PROBE)
    (pytester.mkdir("claims") / "good.yaml").write_text(GOOD)
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    (elsewhere / "x.json").write_text("{}")  # a second run to the same file: pytest sees an existing path
    res = pytester.runpytest_subprocess("--voiceperf", "--voiceperf-json", str(elsewhere / "x.json"))
    err = res.stderr.str()
    assert res.ret == pytest.ExitCode.USAGE_ERROR and "claim path not found" in err
    assert "--voiceperf-json=/elsewhere/x.json" in err
    res = pytester.runpytest_subprocess("--voiceperf", f"--voiceperf-json={elsewhere / 'x.json'}")
    assert res.ret == 0 and (elsewhere / "x.json").exists()
