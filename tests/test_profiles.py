"""Profiles leave out the cases of another device (a claim that requires cpu or cuda), and
`voiceperf list --profile` shows which cases a profile keeps, without running anything."""
import re
from pathlib import Path

from pytest_voiceperf.cli import main

CLAIMS = str(Path(__file__).resolve().parents[1] / "claims")


def _list(capsys, *args):
    assert main(["list", *args]) == 0
    return capsys.readouterr().out


def test_the_cuda_profile_leaves_out_cpu_only_cases(capsys):
    out = _list(capsys, "--profile", "cuda", CLAIMS)
    block = out.split("asr-cpu-realtime  (", 1)[1].split("\n\n", 1)[0]
    assert "keeps 0 of 20" in block and "runs on the CPU only" in block
    kept, total, other = map(int, re.search(r"profile cuda on cuda: (\d+) of (\d+) cases kept \((\d+) of another", out).groups())
    assert 0 < kept < total and other > 0


def test_the_cpu_profile_leaves_out_cuda_only_cases_and_full_keeps_all(capsys):
    out = _list(capsys, "--profile", "cpu", CLAIMS)
    assert "(needs CUDA)" in out and "runs on the CPU only" not in out
    full = _list(capsys, "--profile", "full", CLAIMS)
    kept, total = map(int, re.search(r"profile full on cpu: (\d+) of (\d+) cases kept", full).groups())
    assert kept == total


def test_a_device_given_overrides_the_profiles_own(capsys):
    out = _list(capsys, "--profile", "cuda", "--device", "cpu", CLAIMS)
    assert "profile cuda on cpu:" in out and "(needs CUDA)" in out
