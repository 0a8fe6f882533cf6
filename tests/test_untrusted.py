"""Claim files from a pull request and results files from a CI cache or artifact, written as an attacker
would: each must end in a clean error naming the file (and line or case), run no code, hang nothing,
lose no verdict, and leave the valid case beside it measured with an exit status that tells the truth.
(The YAML-level corpus of tests/hostile is test_hostile.py's.)"""
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import claim

CLI = (sys.executable, "-m", "pytest_voiceperf.cli")
VALID = claim("valid-neighbour", expect="{min: 0.5}")

# a probe that ignores its deadline (an in-process probe with an absurd argument)
SPIN_PROBE = '''
from pytest_voiceperf.probes import Measurement, probe

@probe("t.spin", outputs={"x": ""})
def spin(ctx, seconds: float = 0.0):
    import time
    t0 = time.monotonic()
    while time.monotonic() - t0 < float(seconds):
        pass
    return Measurement({"x": 1.0}, {"x": [1.0, 1.0, 1.0]})
'''


def _run(vp, *args, timeout=300):
    res = vp.runpytest_subprocess("--voiceperf", "-p", "no:cacheprovider", "--voiceperf-json", "o.json", *args,
                                  timeout=timeout)
    out = res.stdout.str() + res.stderr.str()
    assert "Traceback" not in out and "INTERNALERROR" not in out, out
    return res, out


def _results(vp, name="o.json"):
    return {r["nodeid"]: r for r in json.loads((vp.path / name).read_text())["results"]}


def _by_claim(vp, name="o.json"):
    return {r["claim"]: r for r in _results(vp, name).values()}


# -- expressions: bounded work, an error instead of a hang or a MemoryError ---------------------
BOMBS = {
    # a power of a power of a power: exponents are small constants, the result is not
    "pow-tower-metric": dict(metric="((((((m.x * 9) ** 16) ** 16) ** 16) ** 16) ** 16)"),
    "pow-tower-profile": dict(extra="profiles: {cpu: '((((((9 ** 16) ** 16) ** 16) ** 16) ** 16) ** 16) > 0'}\n"),
    "pow-tower-xfail": dict(extra="xfail: {reason: r, when: '((((((9 ** 16) ** 16) ** 16) ** 16) ** 16) ** 16) > 0'}\n"),
    # a param string times a huge number: a string of 10**16 characters
    "string-times-profile": dict(extra="params: {model: [qwen3]}\nprofiles: {cpu: 'model * 10 ** 16 == 1'}\n"),
    "string-times-metric": dict(metric="m.x * (model * 10 ** 16 == 1)",
                                extra="params: {model: [qwen3]}\n"),
    "string-negated-when": dict(extra="params: {model: [qwen3]}\nxfail: {reason: r, when: '-model > 0'}\n"),
    "exp-overflow-metric": dict(metric="exp(m.x * 1e6)"),
    "divide-by-zero": dict(metric="m.x / (m.x - m.x)"),
    "median-of-nothing": dict(metric="m.x + median()"),
    "log-of-negative": dict(metric="log(-m.x)"),
    "floor-of-inf": dict(metric="floor(m.x * inf)"),
}


def test_expression_bombs_end_as_errors_and_every_neighbour_is_measured(vp):
    for name, kw in BOMBS.items():
        (vp.path / "claims" / f"{name}.yaml").write_text(
            claim(name, metric=kw.get("metric", "m.x"), extra=kw.get("extra", "")))
    (vp.path / "claims" / "valid.yaml").write_text(VALID)
    t0 = time.monotonic()
    res = vp.runpytest_subprocess("--voiceperf", "--collect-only", "-q", timeout=60)
    assert time.monotonic() - t0 < 60 and res.ret == 0, res.stdout.str()
    res, out = _run(vp, "--voiceperf-profile", "cpu", timeout=120)
    doc = json.loads((vp.path / "o.json").read_text())
    assert doc["provenance"]["complete"] is True
    got = _by_claim(vp)
    assert got["valid-neighbour"]["outcome"] == "passed"
    for name in BOMBS:
        r = got.get(name)
        if r is None:  # a profile condition that errs keeps the case, with the error (never silently out)
            pytest.fail(f"{name}: no result ({sorted(got)})")
        assert r["outcome"] in ("error", "unmeasured", "failed"), (name, r)
        if r["outcome"] != "failed":
            assert "could not be evaluated" in r["reason"] or "divided by zero" in r["reason"], (name, r["reason"])
    assert res.ret == 1  # the errors are failures of the run


# -- no code runs from validate or requires ---------------------------------------------------
def test_validate_does_not_run_a_pull_requests_conftest(vp, tmp_path):
    pr = vp.path / "pr"
    (pr / "claims").mkdir(parents=True)
    marker = tmp_path / "ran-conftest"
    (pr / "conftest.py").write_text(f"open({str(marker)!r}, 'w').write('pwned')\n")
    (pr / "claims" / "a.yaml").write_text(claim("pr-claim", measure="m: {probe: hw.read_bandwidth, mib: 8}",
                                                metric="m.read_bw"))
    res = vp.run(*CLI, "validate", str(pr))
    assert res.ret == 0 and not marker.exists(), res.stdout.str() + res.stderr.str()
    res.stderr.fnmatch_lines(["note: * conftest.py file(s) not loaded (loading runs their code)*"])
    res = vp.run(*CLI, "list", str(pr / "claims"))
    assert not marker.exists()
    res = vp.run(*CLI, "validate", "--conftest", str(pr))  # the user's own choice
    assert marker.exists()


def test_requires_module_looks_without_importing_and_a_broken_package_is_unmeasured(vp, tmp_path, monkeypatch):
    lib = vp.path / "lib"
    for pkg, init in (("evilpkg", "open('{m}', 'w').write('pwned')\n"), ("brokenpkg", "raise RuntimeError('boom')\n")):
        (lib / pkg).mkdir(parents=True)
        (lib / pkg / "__init__.py").write_text(init.format(m=tmp_path / f"ran-{pkg}"))
        (lib / pkg / "sub.py").write_text("")
    monkeypatch.setenv("PYTHONPATH", str(lib))
    d = vp.path / "claims"
    (d / "a.yaml").write_text(claim("needs-evil", extra="requires: ['module:evilpkg.sub']\n"))
    (d / "b.yaml").write_text(claim("needs-broken", extra="requires: ['module:brokenpkg.nope']\n"))
    (d / "c.yaml").write_text(claim("needs-missing", extra="requires: ['module:nosuchpkg.sub']\n"))
    (d / "valid.yaml").write_text(VALID)
    res, _ = _run(vp)
    got = _by_claim(vp)
    assert not (tmp_path / "ran-evilpkg").exists() and not (tmp_path / "ran-brokenpkg").exists()
    assert got["needs-evil"]["outcome"] == "passed"  # there, and found without running it
    assert got["needs-broken"]["outcome"] == "unmeasured" and "not installed" in got["needs-broken"]["reason"]
    assert got["needs-missing"]["outcome"] == "unmeasured"
    assert got["valid-neighbour"]["outcome"] == "passed" and res.ret == 0


# -- time limits and argument ranges ----------------------------------------------------------
@pytest.mark.parametrize("body, expect_in_error", [
    ("timeout: .inf\n", "timeout: Input should be less than or equal to 86400"),
    ("timeout: -1\n", "timeout: Input should be greater than 0"),
])
def test_a_claim_timeout_out_of_range_is_a_clean_error(vp, body, expect_in_error):
    (vp.path / "claims" / "t.yaml").write_text(claim("bad-timeout", extra=body))
    (vp.path / "claims" / "valid.yaml").write_text(VALID)
    res, out = _run(vp)
    got = _by_claim(vp)
    assert got["valid-neighbour"]["outcome"] == "passed"
    bad = [r for r in _results(vp).values() if r["claim"] != "valid-neighbour"]
    assert len(bad) == 1 and bad[0]["outcome"] == "error" and expect_in_error in bad[0]["reason"], bad
    assert "claims/t.yaml:" in out and res.ret == 1


@pytest.mark.parametrize("args, words", [
    ("{probe: hw.read_bandwidth, reps: 1.0e12}", "reps: 1000000000000.0 is out of range: hw.read_bandwidth takes reps from 0 to 1000"),
    ("{probe: hw.read_bandwidth, mib: 1.0e9}", "is out of range: hw.read_bandwidth takes mib from 0 to 65536"),
    ("{probe: hw.matmul, n: 1000000}", "is out of range: hw.matmul takes n from 0 to 32768"),
    ("{probe: hw.read_bandwidth, reps: -5}", "is out of range"),
    ("{probe: llm.decode, model: qwen3-0.6b, tokens: 100000000}", "is out of range: llm.decode takes tokens"),
])
def test_probe_arguments_out_of_range_are_refused_at_collection(vp, args, words):
    (vp.path / "claims" / "r.yaml").write_text(claim("bad-range", measure=f"m: {args}", metric="'1'"))
    res = vp.run(*CLI, "validate", "claims")
    assert res.ret == 1 and words in res.stdout.str(), res.stdout.str()
    assert "claims/r.yaml:5:" in res.stdout.str()


def test_an_in_process_probe_is_stopped_at_the_case_time_limit_and_the_operator_caps_the_claim(vp):
    vp.makeconftest(vp.path.joinpath("conftest.py").read_text() + SPIN_PROBE.replace(
        "def spin", "def spin").replace("@probe", "@probe") + "\n\ndef pytest_voiceperf_add_probes(registry):\n"
        "    registry.add(const.voiceperf_probe)\n    registry.add(spin.voiceperf_probe)\n")
    d = vp.path / "claims"
    (d / "own.yaml").write_text(claim("spins-own-limit", measure="m: {probe: t.spin, seconds: 600}",
                                      extra="timeout: 3\n"))
    (d / "cap.yaml").write_text(claim("spins-asks-more", measure="m: {probe: t.spin, seconds: 600}",
                                      extra="timeout: 3000\n"))
    (d / "valid.yaml").write_text(VALID)
    t0 = time.monotonic()
    res, out = _run(vp, "--voiceperf-timeout", "4", timeout=200)
    wall = time.monotonic() - t0
    got = _by_claim(vp)
    for name in ("spins-own-limit", "spins-asks-more"):
        assert got[name]["outcome"] == "error" and "ran past the case's time limit" in got[name]["reason"], got[name]
    assert got["valid-neighbour"]["outcome"] == "passed" and res.ret == 1
    assert wall < 60, wall  # two spins of 600 s each, stopped at 3 and 4 s


# -- case ids ---------------------------------------------------------------------------------
def test_params_that_read_alike_get_their_own_ids_and_no_verdict_is_lost(vp):
    (vp.path / "claims" / "d.yaml").write_text(claim(
        "alike", metric="m.x * (1 if tag == 'a b' else 0)", extra="params: {tag: ['a b', 'a_b', 'a?b']}\n"))
    res, _ = _run(vp)
    got = _results(vp)
    assert sorted(got) == ["claims/d.yaml::alike[a_b0]", "claims/d.yaml::alike[a_b1]", "claims/d.yaml::alike[a_b2]"]
    assert sorted(r["outcome"] for r in got.values()) == ["failed", "failed", "passed"]
    res.assert_outcomes(passed=1, failed=2)


# -- what reaches a terminal or a page --------------------------------------------------------
@pytest.mark.parametrize("title, what", [
    ("\"red \\e[31mALERT\\e[0m\"", "U+001B"),
    ("\"bell \\a\"", "U+0007"),
    ("\"reversed \\u202Egnp.exe\"", "U+202E"),
    ("\"carriage \\r return\"", "U+000D"),
])
def test_control_characters_in_claim_text_are_a_clean_error(vp, title, what):
    text = claim("ctl").replace("title: a test claim", f"title: {title}")
    (vp.path / "claims" / "ctl.yaml").write_text(text)
    (vp.path / "claims" / "valid.yaml").write_text(VALID)
    res, out = _run(vp)
    assert "\x1b[31mALERT" not in out
    bad = [r for r in _results(vp).values() if r["claim"] != "valid-neighbour"]
    assert bad[0]["outcome"] == "error" and what in bad[0]["reason"] and "remove it" in bad[0]["reason"], bad
    assert "claims/ctl.yaml:2" in out and res.ret == 1
    assert _by_claim(vp)["valid-neighbour"]["outcome"] == "passed"


MARKDOWN = "'# owned ![x](http://evil.example/p.png) <img src=x onerror=alert(1)> | cell | [link](http://e.x)'"


def test_markdown_in_claim_text_and_results_files_stays_inside_its_cell(vp):
    text = claim("md-claim", expect="{min: 5}").replace("title: a test claim", f"title: {MARKDOWN}")
    (vp.path / "claims" / "md.yaml").write_text(text)
    _run(vp)
    doc = json.loads((vp.path / "o.json").read_text())
    doc["provenance"]["device_name"] = "# heading <script>x</script>"
    doc["results"][0]["reason"] = "\x1b[2J\x1b[31m| forged | cell ![i](http://evil.example/i.png)"
    (vp.path / "o.json").write_text(json.dumps(doc))
    res = vp.run(*CLI, "report", "o.json", "-o", "rep")
    assert res.ret == 0, res.stderr.str()
    md = (vp.path / "rep" / "report.md").read_text()
    # escaped, they show as text: no raw HTML, image or link, and no escape code
    assert not re.search(r"(?<!\\)<(script|img)|(?<!\\)\]\(http", md) and "\x1b" not in md, md
    assert not any(line.startswith("# heading") or line.startswith("# owned") for line in md.splitlines())
    res = vp.run(*CLI, "compare", "o.json", "o.json", "--format", "markdown")
    assert "\x1b" not in res.stdout.str() and not re.search(r"(?<!\\)<script", res.stdout.str())
    res = vp.run(*CLI, "compare", "o.json", "o.json")
    assert "\x1b" not in res.stdout.str() + res.stderr.str()


# -- results, baseline and resume files -------------------------------------------------------
def _good_results(vp) -> dict:
    (vp.path / "claims" / "valid.yaml").write_text(VALID)
    vp.runpytest_subprocess("--voiceperf", "--voiceperf-json", "good.json")
    return json.loads((vp.path / "good.json").read_text())


def _hostile_results(good: dict, tmp: Path) -> dict[str, Path]:
    """name -> a results file an attacker could leave in a cache or an artifact."""
    out = {}

    def put(name, text):
        p = tmp / f"{name}.json"
        p.write_bytes(text if isinstance(text, bytes) else text.encode())
        out[name] = p

    g = json.dumps(good)
    put("nan-value", g.replace('"value": ', '"value": NaN, "was": ', 1))
    put("infinity-sample", g.replace('"samples": [', '"samples": [Infinity, ', 1))
    put("huge-float", g.replace('"value": ', '"value": 1e999, "was": ', 1))
    bad = json.loads(g)
    bad["results"][0]["samples"] = ["fast", "faster", "fastest"]
    put("string-samples", json.dumps(bad))
    bad = json.loads(g)
    bad["results"][0]["probes"]["m"]["values"]["x"] = {"nested": True}
    put("object-figure", json.dumps(bad))
    put("deep-nesting", '{"provenance": {}, "results": ' + "[" * 200000 + "]" * 200000 + "}")
    put("not-utf8", b"\xff\xfe" + g.encode("utf-16-le"))
    put("no-provenance", json.dumps({"results": []}))
    put("results-not-a-list", json.dumps({"provenance": {}, "results": {"a": 1}}))
    bad = json.loads(g)
    del bad["results"][0]["nodeid"]
    put("record-without-nodeid", json.dumps(bad))
    put("huge-int", g.replace('"value": ', '"value": ' + "9" * 5000 + ', "was": ', 1))
    big = tmp / "oversize.json"
    with open(big, "wb") as f:
        f.truncate(65 * 1024 * 1024)  # sparse: the size check must refuse it before reading
    out["oversize"] = big
    fifo = tmp / "fifo.json"
    os.mkfifo(fifo)
    out["fifo"] = fifo
    link = tmp / "dev-zero.json"
    link.symlink_to("/dev/zero")
    out["dev-zero"] = link
    return out


NO_FIGURE = ("nan-value", "infinity-sample", "huge-float")  # read as null: no figure to rest anything on


def test_non_finite_figures_are_read_as_no_figure_and_guard_nothing(vp, tmp_path):
    good = _good_results(vp)
    files = _hostile_results(good, tmp_path)
    from pytest_voiceperf.results import read

    assert read(files["nan-value"]).results[0].value is None
    assert read(files["huge-float"]).results[0].value is None
    assert read(files["infinity-sample"]).results[0].samples[0] is None
    for name in NO_FIGURE:
        for cmd in (("compare", str(files[name]), "good.json", "--fail"), ("report", str(files[name]), "-o", "r")):
            res = vp.run(*CLI, *cmd, timeout=30)
            out = res.stdout.str() + res.stderr.str()
            assert res.ret in (0, 1, 3) and "Traceback" not in out and " nan" not in out.lower(), (name, out[-600:])
    # and a run never writes them: a probe's undefined output is null in its file (strict JSON readers)
    from pytest_voiceperf.results import dumps

    assert json.loads(dumps({"x": float("nan"), "y": [float("inf"), 1.0]})) == {"x": None, "y": [None, 1.0]}


def test_hostile_results_files_are_clean_errors_in_every_command(vp, tmp_path):
    good = _good_results(vp)
    files = {k: v for k, v in _hostile_results(good, tmp_path).items() if k not in NO_FIGURE}
    assert len(files) >= 11
    seen = 0
    for name, path in files.items():
        for cmd in (("compare", str(path), "good.json", "--fail"), ("compare", "good.json", str(path)),
                    ("report", str(path), "-o", str(tmp_path / f"rep-{name}")), ("save", str(path), "--name", "x"),
                    ("merge", str(path), "good.json", "-o", str(tmp_path / "m.json"))):
            res = vp.run(*CLI, *cmd, timeout=30)
            err = res.stdout.str() + res.stderr.str()
            assert res.ret == 2, (name, cmd, res.ret, err[-800:])
            assert "Traceback" not in err and path.name in err, (name, cmd, err[-800:])
            seen += 1
        assert not (tmp_path / f"rep-{name}").exists(), name  # no empty report folder
        assert not (vp.path / ".voiceperf").exists(), name  # nothing saved
    assert seen == len(files) * 5


@pytest.mark.parametrize("option", ["--voiceperf-baseline", "--voiceperf-resume"])
def test_a_hostile_baseline_or_resume_file_is_a_usage_error_before_anything_runs(vp, tmp_path, option):
    good = _good_results(vp)
    files = _hostile_results(good, tmp_path)
    for name in ("string-samples", "object-figure", "deep-nesting", "fifo", "dev-zero", "oversize"):
        res = vp.runpytest_subprocess("--voiceperf", f"{option}={files[name]}", timeout=60)
        err = res.stdout.str() + res.stderr.str()
        assert res.ret == 4 and files[name].name in err, (name, res.ret, err[-600:])
        assert "Traceback" not in err and "INTERNALERROR" not in err, (name, err[-600:])


def test_resume_keeps_only_what_this_machine_and_these_claim_files_would_give(vp):
    d = vp.path / "claims"
    (d / "a.yaml").write_text(claim("keeps-a", expect="{min: 0.5}"))
    (d / "b.yaml").write_text(claim("fails-b", expect="{min: 5}"))
    vp.runpytest_subprocess("--voiceperf", "--voiceperf-json", "first.json")
    first = json.loads((vp.path / "first.json").read_text())
    # another machine: refused
    other = json.loads(json.dumps(first))
    other["provenance"]["device_name"] = "Some Other CPU"
    (vp.path / "other.json").write_text(json.dumps(other))
    res = vp.runpytest_subprocess("--voiceperf", "--voiceperf-resume", "other.json")
    assert res.ret == 4 and "a run of another machine or setup" in res.stderr.str() + res.stdout.str()
    # a kept failure fails the resumed run (it used to exit 0)
    keep_fail = json.loads(json.dumps(first))
    keep_fail["results"] = [r for r in keep_fail["results"] if r["claim"] == "fails-b"]
    (vp.path / "kf.json").write_text(json.dumps(keep_fail))
    res, out = _run(vp, "--voiceperf-resume", "kf.json")
    got = _by_claim(vp)
    assert got["fails-b"]["outcome"] == "failed" and got["fails-b"].get("resumed") is True
    assert got["keeps-a"]["outcome"] == "passed" and res.ret == 1
    # a forged pass (a value below its bound), and a case whose claim file changed since: measured again
    forged = json.loads(json.dumps(first))
    fb = next(r for r in forged["results"] if r["claim"] == "fails-b")
    fb["outcome"] = "passed"
    (vp.path / "forged.json").write_text(json.dumps(forged))
    (d / "a.yaml").write_text(claim("keeps-a", expect="{min: 0.6}"))
    res, out = _run(vp, "--voiceperf-resume", "forged.json")
    assert "claims/b.yaml::fails-b: measured again (passed does not follow from its interval" in out, out
    assert "claims/a.yaml::keeps-a: measured again (its claim file changed since" in out, out
    got = _by_claim(vp)
    assert not got["fails-b"].get("resumed") and got["fails-b"]["outcome"] == "failed" and res.ret == 1


# -- files and paths --------------------------------------------------------------------------
def test_claim_files_that_are_devices_links_out_or_oversize_are_clean_errors(vp, tmp_path):
    d = vp.path / "claims"
    (d / "zero.yaml").symlink_to("/dev/zero")
    outside = tmp_path / "outside.yaml"
    outside.write_text(claim("from-outside"))
    (d / "out.yaml").symlink_to(outside)
    (d / "big.yaml").write_text(claim("big") + "# " + "x" * 300_000 + "\n")
    (d / "valid.yaml").write_text(VALID)
    res = vp.run(*CLI, "validate", "--conftest", "claims", timeout=30)
    out = res.stdout.str()
    assert res.ret == 1, out
    assert "claims/zero.yaml: not a regular file" in out
    assert "claims/out.yaml: a link to" in out and "outside the project" in out
    assert "claims/big.yaml:1: file is" in out and "1 valid, 3 invalid" in out
    res, out = _run(vp, timeout=60)
    got = _results(vp)
    assert got["claims/valid.yaml::valid-neighbour"]["outcome"] == "passed"
    assert {n.split("::")[0] for n, r in got.items() if r["outcome"] == "error"} >= {"claims/out.yaml",
                                                                                     "claims/big.yaml"}


# -- two runs at once, file modes ---------------------------------------------------------------
def test_a_second_run_writing_the_same_results_file_is_refused(vp):
    from pytest_voiceperf.results import WriterLock

    (vp.path / "claims" / "valid.yaml").write_text(VALID)
    lock = WriterLock(vp.path / "o.json").acquire()  # a run that writes o.json now
    try:
        res = vp.runpytest_subprocess("--voiceperf", "--voiceperf-json", "o.json")
        assert res.ret == 4 and "another run writes" in res.stderr.str() + res.stdout.str()
        assert not (vp.path / "o.json").exists()
    finally:
        lock.release()
    res = vp.runpytest_subprocess("--voiceperf", "--voiceperf-json", "o.json")
    assert res.ret == 0 and not (vp.path / "o.json.lock").exists()


def test_results_files_honour_the_umask_and_saves_at_once_get_their_own_numbers(vp, tmp_path):
    from pytest_voiceperf.storage import save_run

    (vp.path / "claims" / "valid.yaml").write_text(VALID)
    env = dict(os.environ)
    r = subprocess.run(["sh", "-c", f"umask 022 && {sys.executable} -m pytest --voiceperf -p no:cacheprovider "
                        "--voiceperf-json o.json"], cwd=vp.path, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-500:]
    assert oct((vp.path / "o.json").stat().st_mode & 0o777) == "0o644"
    doc = json.loads((vp.path / "o.json").read_text())
    paths: list = []
    threads = [threading.Thread(target=lambda: paths.append(save_run(doc, tmp_path, "main"))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({p.name for p in paths}) == 8, sorted(p.name for p in paths)
    hostile = dict(doc, provenance=dict(doc["provenance"], machine_id="../../../etc"))
    p = save_run(hostile, tmp_path, "../../x")
    assert p.resolve().is_relative_to((tmp_path / ".voiceperf").resolve()), p


def test_an_audio_path_from_a_claim_stays_inside_the_project(tmp_path):
    from types import SimpleNamespace

    from pytest_voiceperf.probes import Unmeasured
    from pytest_voiceperf.probes.asr import resolve_audio

    (tmp_path / "clip.wav").write_bytes(b"RIFF")
    ctx = SimpleNamespace(session=SimpleNamespace(rootdir=tmp_path, options=SimpleNamespace(data={})))
    assert resolve_audio(ctx, "clip.wav")["path"] == str(tmp_path / "clip.wav")
    for name, words in (("/etc/passwd", "outside the project"), ("../../etc/passwd", "outside the project"),
                        ("nothing.wav", "neither a data set")):
        with pytest.raises(Unmeasured, match=words):
            resolve_audio(ctx, name)
    (tmp_path / "zero.wav").symlink_to("/dev/zero")
    with pytest.raises(Unmeasured, match="outside the project"):
        resolve_audio(ctx, "zero.wav")
    os.mkfifo(tmp_path / "fifo.wav")
    with pytest.raises(Unmeasured, match="not a regular file"):
        resolve_audio(ctx, "fifo.wav")


UNDEFINED_PROBE = '''
from pytest_voiceperf.probes import Measurement, probe

@probe("t.undefined", outputs={"x": "", "fit_ms": "ms"})
def undefined(ctx):
    return Measurement({"x": 1.0, "fit_ms": float("inf")},
                       {"x": [1.0, 1.0, 1.0], "fit_ms": [float("inf"), float("nan"), 2.0]})
'''


def test_a_probes_undefined_output_is_null_in_the_file_and_the_run_reports(vp):
    # a decode fit through too few points gave inf, a synthesis spread NaN: the table at the end of the
    # run read them back through the record type and the run ended without its summary
    vp.makeconftest(vp.path.joinpath("conftest.py").read_text().replace(
        "def pytest_voiceperf_add_probes(registry):", UNDEFINED_PROBE + "\n\ndef pytest_voiceperf_add_probes(registry):\n"
        "    registry.add(undefined.voiceperf_probe)"))
    (vp.path / "claims" / "u.yaml").write_text(claim("undefined-beside", measure="m: {probe: t.undefined}"))
    res, out = _run(vp)
    assert res.ret == 0 and "voiceperf claims" in out and "PASS   undefined-beside" in out, out[-1500:]
    text = (vp.path / "o.json").read_text()
    assert "NaN" not in text and "Infinity" not in text
    p = _by_claim(vp)["undefined-beside"]["probes"]["m"]
    assert p["values"]["fit_ms"] is None and set(p["samples"]["fit_ms"]) == {None}  # one per round
