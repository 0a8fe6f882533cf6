"""Exports over a committed results file (tests/data/results-cpu.json: five cases of a CPU run), each
read back by the tool's own reader where one is installed here."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_voiceperf import exports
from pytest_voiceperf.results import read

DATA = Path(__file__).parent / "data" / "results-cpu.json"
CLI = (sys.executable, "-m", "pytest_voiceperf.cli", "export", str(DATA))


def test_the_figures_are_what_the_gate_compares_once_each_with_their_rounds():
    figs = exports.figures(read(DATA))
    names = [f.name for f in figs]
    assert len(names) == len(set(names))
    decode = next(f for f in figs if f.name.endswith("d.tok_s"))
    assert decode.unit == "tok/s" and decode.higher_is_better is True and len(decode.rounds) >= 3
    metric = next(f for f in figs if f.name.endswith("llm-prefill-compute-fraction[qwen3-0.6b-1024]"))
    assert metric.ci is not None and metric.ci[0] <= metric.value <= metric.ci[1]


def test_pytest_benchmark_compare_reads_the_export(tmp_path):
    pytest.importorskip("pytest_benchmark")
    out = tmp_path / "0001_voiceperf.json"
    r = subprocess.run([*CLI, "--format", "pytest-benchmark", "-o", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "left out:" in r.stdout and "(fraction: not a time or a rate)" in r.stdout  # never a fake duration
    doc = json.loads(out.read_text())
    dec = next(b for b in doc["benchmarks"] if "d.tok_s" in b["name"])
    tok_s = next(f for f in exports.figures(read(DATA)) if f.name.endswith("d.tok_s"))
    assert dec["name"].endswith("[s per tok, inverse of tok/s]")
    assert dec["stats"]["data"] == pytest.approx([1 / x for x in tok_s.rounds])
    r = subprocess.run([sys.executable, "-m", "pytest_benchmark", "compare", str(out)], capture_output=True,
                       text=True, cwd=tmp_path)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert "d.tok_s [s per tok, inverse of tok/s]" in r.stdout and "Failed to load" not in r.stderr


def test_github_action_benchmark_files_one_per_tool(tmp_path):
    r = subprocess.run([*CLI, "--format", "github-action-benchmark", "-o", str(tmp_path / "gab")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    bigger = json.loads((tmp_path / "gab" / "bigger-is-better.json").read_text())
    smaller = json.loads((tmp_path / "gab" / "smaller-is-better.json").read_text())
    assert bigger and smaller
    for e in bigger + smaller:  # the action's custom tools read name, unit, value; range and extra are shown
        assert set(e) == {"name", "unit", "value", "range", "extra"} and isinstance(e["value"], float)
        assert e["range"].startswith("±")
    assert any(e["unit"] == "tok/s" for e in bigger) and all(e["unit"] != "tok/s" for e in smaller)


def test_bencher_metric_format_has_the_interval_as_bounds(tmp_path):
    out = tmp_path / "bmf.json"
    r = subprocess.run([*CLI, "--format", "bencher", "-o", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    bmf = json.loads(out.read_text())
    assert bmf
    for bench, measures in bmf.items():
        (slug, m), = measures.items()
        assert slug == slug.lower() and " " not in slug
        assert m["lower_value"] <= m["value"] <= m["upper_value"], (bench, m)


def test_with_pytest_benchmark_in_the_same_session_the_claims_join_its_json(pytester):
    """A suite with the user's own pytest-benchmark tests and voiceperf claims: --benchmark-json holds both."""
    pytest.importorskip("pytest_benchmark")
    from helpers import CONST_PROBE, claim

    pytester.makeconftest(CONST_PROBE)
    pytester.makepyfile(test_mine="def test_sum(benchmark):\n    benchmark(sum, range(1000))\n")
    pytester.mkdir("claims")
    (pytester.path / "claims" / "c.yaml").write_text(claim("c-rate", metric="m.rate", expect="{min: 0.5}"))
    res = pytester.runpytest_subprocess("--voiceperf", "--benchmark-json", "bench.json", "test_mine.py", "claims")
    res.assert_outcomes(passed=2)
    doc = json.loads((pytester.path / "bench.json").read_text())
    names = [b["fullname"] for b in doc["benchmarks"]]
    assert "test_mine.py::test_sum" in names
    mine = next(b for b in doc["benchmarks"] if b["fullname"].startswith("claims/c.yaml::c-rate"))
    assert mine["name"].endswith("[s per tok, inverse of tok/s]") and len(mine["stats"]["data"]) >= 3
    assert doc["voiceperf"]["benchmarks"] >= 1
    r = subprocess.run([sys.executable, "-m", "pytest_benchmark", "compare", "bench.json"], capture_output=True,
                       text=True, cwd=pytester.path)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert "test_sum" in r.stdout and "c-rate" in r.stdout
