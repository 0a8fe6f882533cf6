"""Engines that crash, run out of memory, hang or exit; interrupted runs; one worker per GPU."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

# a probe on the built-in selftest engine (a real worker process, no inference inside)
ENGINE_PROBE = textwrap.dedent('''
    from pytest_voiceperf.probes import Measurement, probe

    @probe("t.engine", outputs={"value": "", "pid": ""}, engine="selftest", exact=("value", "pid"))
    def eng(ctx, model: str = "a", method: str = "echo", value: float = 1.0, seconds: float = 0.0,
            mib: int = 0, start_sleep: float = 0.0, warmup_s: float = 0.0, work_s: float = 0.0,
            stop_sleep: float = 0.0):
        spec = {"model": model}
        if start_sleep:
            spec["start_sleep"] = start_sleep
        if stop_sleep:
            spec["stop_sleep"] = stop_sleep
        kw = {"echo": {"value": value, "warmup_s": warmup_s, "work_s": work_s}, "hang": {"seconds": seconds}, "fill": {"mib": mib},
              "oom": {"gib": 4096.0}}.get(method, {})
        if method == "fill_then_oom":
            ctx.call("selftest", spec, "fill", mib=mib)
            method, kw = "oom", {"gib": 4096.0}
        r = ctx.call("selftest", spec, method, **kw)
        return Measurement({"value": r.get("value", 0.0), "pid": r.get("pid", 0)},
                           info={"engine_pid": ctx.engine("selftest", spec).proc.pid})

    def pytest_voiceperf_add_probes(registry):
        registry.add(eng.voiceperf_probe)
''')


def claim(id, args, extra=""):
    return textwrap.dedent(f"""\
        id: {id}
        title: t
        statement: t
        measure:
          e: {{probe: t.engine, {args}}}
        metric: e.value
        expect: {{min: 0.5}}
        """) + extra


@pytest.fixture
def vp(pytester):
    pytester.makeconftest(ENGINE_PROBE)
    pytester.mkdir("claims")
    return pytester


def results(p, name="out.json"):
    return {r["claim"]: r for r in json.loads((p.path / name).read_text())["results"]}


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone for our purposes
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


def test_crashed_engine_is_an_error_and_the_next_claim_gets_a_fresh_engine(vp):
    (vp.path / "claims/a1.yaml").write_text(claim("a1-echo", "method: echo, value: 1.0"))
    (vp.path / "claims/a2.yaml").write_text(claim("a2-crash", "method: crash"))
    (vp.path / "claims/a3.yaml").write_text(claim("a3-echo", "method: echo, value: 2.0"))
    res = vp.runpytest("--voiceperf", "-v", "--voiceperf-json", "out.json", "-p", "no:randomly", "--junitxml", "j.xml")
    res.stdout.fnmatch_lines(["*a2-crash ERROR*", "*1 error*"])
    # JUnit: an engine failure is an <error> (the case's measurement is its fixture), a verdict is not
    import xml.etree.ElementTree as ET

    cases = {c.get("name"): c for c in ET.parse(vp.path / "j.xml").getroot().iter("testcase")}
    tags = [e.tag for e in cases["a2-crash"] if e.tag in ("error", "failure")]
    assert tags == ["error"] and "killed by SIGKILL" in cases["a2-crash"].find("error").text
    assert not [e.tag for e in cases["a1-echo"] if e.tag in ("error", "failure")]
    r = results(vp)
    assert r["a1-echo"]["outcome"] == "passed" and r["a3-echo"]["outcome"] == "passed"
    crash = r["a2-crash"]
    assert crash["outcome"] == "error" and "killed by SIGKILL" in crash["reason"]
    assert "selftest: about to crash" in res.stdout.str()  # the engine's last log lines are shown
    pid1 = r["a1-echo"]["probes"]["e"]["values"]["pid"]
    pid3 = r["a3-echo"]["probes"]["e"]["values"]["pid"]
    assert pid1 != pid3
    assert not _alive(int(pid1)) and not _alive(int(pid3))  # every engine is shut down


def test_engine_that_exits_mid_claim(vp):
    (vp.path / "claims/e.yaml").write_text(claim("exits", "method: exit"))
    (vp.path / "claims/f.yaml").write_text(claim("fine", "method: echo, value: 3.0"))
    res = vp.runpytest("--voiceperf", "--voiceperf-json", "out.json")
    r = results(vp)
    assert r["exits"]["outcome"] == "error" and "exit status 3" in r["exits"]["reason"]
    assert r["fine"]["outcome"] == "passed"
    assert res.ret == 1


def test_out_of_memory_is_an_error_and_memory_is_released(vp):
    (vp.path / "claims/o.yaml").write_text(claim("oom", "method: fill_then_oom, mib: 512"))
    (vp.path / "claims/p.yaml").write_text(claim("after-oom", "method: echo, value: 4.0"))
    res = vp.runpytest("--voiceperf", "-v", "--voiceperf-json", "out.json")
    r = results(vp)
    assert r["oom"]["outcome"] == "error"
    assert "allocate" in r["oom"]["reason"] or "memory" in r["oom"]["reason"].lower()
    assert r["after-oom"]["outcome"] == "passed"
    # the engine that held 512 MiB was killed, so its memory went back
    assert r["after-oom"]["probes"]["e"]["values"]["pid"] != 0
    res.stdout.fnmatch_lines(["*oom ERROR*"])


def test_hung_engine_hits_the_claim_time_limit(vp):
    (vp.path / "claims/h.yaml").write_text(claim("hangs", "method: hang, seconds: 600", "timeout: 3\n"))
    (vp.path / "claims/i.yaml").write_text(claim("after-hang", "method: echo, value: 5.0"))
    t0 = time.time()
    vp.runpytest("--voiceperf", "--voiceperf-json", "out.json")
    assert time.time() - t0 < 120
    r = results(vp)
    assert r["hangs"]["outcome"] == "error" and "time limit of 3s" in r["hangs"]["reason"]
    assert r["after-hang"]["outcome"] == "passed"


def test_engine_start_limit_from_ini(vp):
    vp.makeini("[pytest]\nvoiceperf_start_timeout = 2\n")
    (vp.path / "claims/s.yaml").write_text(claim("slow-start", "start_sleep: 30"))
    vp.runpytest("--voiceperf", "--voiceperf-json", "out.json")
    r = results(vp)
    assert r["slow-start"]["outcome"] == "error"
    assert "engine start hit its time limit of 2s" in r["slow-start"]["reason"]


def _ctrl_c_on():
    # a test run started as a shell's background job (`.ci/run &`) inherits SIGINT ignored, and Python
    # keeps an ignored SIGINT: the run under test gets SIGINT as a user's Ctrl-C or `timeout -s INT` sends it
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _run_and_interrupt(path, sig, wait_for="hangs"):
    cmd = [sys.executable, "-m", "pytest", "--voiceperf", "-v", "--voiceperf-json", "out.json",
           "-p", "no:cacheprovider"]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    log = open(os.path.join(path, "run.log"), "w")
    proc = subprocess.Popen(cmd, cwd=path, stdout=log, stderr=subprocess.STDOUT, text=True, env=env,
                            preexec_fn=_ctrl_c_on)
    deadline = time.time() + 90
    while time.time() < deadline:  # interrupt while the second claim's engine is busy
        with open(os.path.join(path, "run.log")) as f:
            if "starting engine selftest (b)" in f.read():
                break
        time.sleep(0.2)
    time.sleep(1.5)
    proc.send_signal(sig)
    proc.wait(timeout=60)
    log.close()
    with open(os.path.join(path, "run.log")) as f:
        return proc.returncode, f.read()


def test_interrupted_run_keeps_previous_results_and_marks_the_partial_one(vp):
    (vp.path / "claims/a.yaml").write_text(claim("first", "method: echo, value: 1.0"))
    vp.runpytest("--voiceperf", "--voiceperf-json", "out.json")
    before = (vp.path / "out.json").read_text()
    assert json.loads(before)["provenance"]["complete"] is True
    (vp.path / "claims/b.yaml").write_text(claim("hangs", "model: b, method: hang, seconds: 600"))
    code, out = _run_and_interrupt(vp.path, signal.SIGINT)
    assert code == 2, out
    assert (vp.path / "out.json").read_text() == before  # the previous file is intact
    partial = json.loads((vp.path / "out.json.partial").read_text())
    assert partial["provenance"]["complete"] is False
    assert [r["claim"] for r in partial["results"]] == ["first"]
    # a killed process leaves the previous file intact too (atomic writes, nothing half-written)
    code, _ = _run_and_interrupt(vp.path, signal.SIGKILL)
    assert code == -signal.SIGKILL
    assert (vp.path / "out.json").read_text() == before
    assert not list(vp.path.glob(".out.json.*.tmp"))


@pytest.mark.parametrize("busy", ["starting", "measuring"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_a_stopped_run_keeps_what_it_measured_and_leaves_no_engine(vp, busy, sig):
    """SIGINT while an engine is busy (starting, or inside a call): pytest is gone within 5 s and the
    partial results file holds the finished case; SIGKILL: the partial file written after each case is
    there, and the orphaned engine worker ends itself (its whole process group) within seconds."""
    import psutil

    (vp.path / "claims/a.yaml").write_text(claim("first", "method: echo, value: 1.0"))
    args = "model: b, start_sleep: 600" if busy == "starting" else "model: b, method: hang, seconds: 600"
    (vp.path / "claims/b.yaml").write_text(claim("busy", args))
    cmd = [sys.executable, "-m", "pytest", "--voiceperf", "-v", "--voiceperf-json", "out.json", "-p", "no:cacheprovider"]
    log = open(vp.path / "run.log", "w")
    proc = subprocess.Popen(cmd, cwd=vp.path, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONUNBUFFERED="1"),
                            preexec_fn=_ctrl_c_on)
    deadline = time.time() + 90
    while time.time() < deadline and "starting engine selftest (b)" not in (vp.path / "run.log").read_text():
        time.sleep(0.2)
    time.sleep(1.5)
    workers = [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
    assert workers, (vp.path / "run.log").read_text()
    t0 = time.time()
    proc.send_signal(sig)
    proc.wait(timeout=60)
    stopped = time.time() - t0
    log.close()
    out = (vp.path / "run.log").read_text()
    partial = json.loads((vp.path / "out.json.partial").read_text())
    assert partial["provenance"]["complete"] is False
    assert [r["claim"] for r in partial["results"]] == ["first"], out
    if sig == signal.SIGINT:
        assert proc.returncode == 2 and stopped < 5.0, (stopped, out)
    deadline = time.time() + 5
    while time.time() < deadline and any(_alive(p) for p in workers):
        time.sleep(0.1)
    assert not any(_alive(p) for p in workers), [p for p in workers if _alive(p)]


def test_the_run_says_where_its_time_went(vp):
    """provenance.timing: every second in one phase (engine start, warm-up, measuring, ...); the
    phases add up to the wall time; per engine instance; a table at the end of the terminal output."""
    (vp.path / "claims/a.yaml").write_text(claim("timed", "start_sleep: 1.0, warmup_s: 0.4, work_s: 0.3"))
    res = vp.runpytest("--voiceperf", "--voiceperf-json", "out.json", "--voiceperf-rounds", "3:3")
    res.assert_outcomes(passed=1)
    doc = json.loads((vp.path / "out.json").read_text())
    tm, n = doc["provenance"]["timing"], doc["results"][0]["probes"]["e"]["info"]["rounds"]
    ph = tm["by_phase"]
    assert ph["engine start"] >= 1.0  # one start (rounds reuse the engine)
    assert ph["warm-up"] == pytest.approx(n * 0.4, abs=0.25)  # reported by the engine, once per call
    assert ph["measuring"] == pytest.approx(n * 0.3, abs=0.4)
    assert sum(ph.values()) == pytest.approx(tm["wall_s"], abs=0.05)
    rows = {(r["phase"], r["engine"]): r["seconds"] for r in tm["rows"]}
    assert rows[("engine start", "selftest a")] >= 1.0
    res.stdout.fnmatch_lines(["*voiceperf: where the time went*", "phase*seconds*share*", "engine start*",
                              "engine*start*warm-up*measuring*", "selftest a*", "wall *"])


def test_an_engine_closed_to_make_room_is_timed_as_its_stop(vp):
    """One heavy engine at a time: starting b closes a, and a's stop (vLLM: engine core shutdown and
    CUDA teardown) is its own phase in the table, not 'other'."""
    (vp.path / "claims/a.yaml").write_text(claim("a-first", "model: a, stop_sleep: 1.0"))
    (vp.path / "claims/b.yaml").write_text(claim("b-second", "model: b"))
    res = vp.runpytest("--voiceperf", "--voiceperf-json", "out.json", "--voiceperf-rounds", "2:2", "-p", "no:randomly")
    res.assert_outcomes(passed=2)
    tm = json.loads((vp.path / "out.json").read_text())["provenance"]["timing"]
    rows = {(r["phase"], r["engine"]): r["seconds"] for r in tm["rows"]}
    assert 1.0 <= rows[("engine stop", "selftest a")] < 5.0
    assert tm["by_phase"]["other (collection, pytest, reporting)"] < 1.0
    assert tm["by_phase"]["watching rounds for disturbance"] > 0  # the first short round's window, at least
    res.stdout.fnmatch_lines(["engine*start*warm-up*measuring*stop*"])


def test_engines_keep_their_compile_caches_in_one_user_folder(tmp_path, monkeypatch):
    """vLLM's, inductor's, Triton's and FlashInfer's caches go under VOICEPERF_CACHE (kept between
    runs, so a second run starts warm); a cache variable the user set wins."""
    from pytest_voiceperf.engines import EngineProcess, caches

    monkeypatch.setenv("VOICEPERF_CACHE", str(tmp_path / "vc"))
    for var in caches.DIRS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "mine"))
    eng = EngineProcess("selftest", {"model": "a"}, log_dir=tmp_path, start_timeout=60)
    try:
        seen = eng.call("environ", timeout=30, names=list(caches.DIRS))
    finally:
        eng.close()
    assert seen == {"VLLM_CACHE_ROOT": str(tmp_path / "vc" / "vllm"),
                    "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "vc" / "torchinductor"),
                    "TRITON_CACHE_DIR": str(tmp_path / "mine"),
                    "FLASHINFER_WORKSPACE_BASE": str(tmp_path / "vc" / "flashinfer")}


def test_cpu_engine_workers_run_with_a_fixed_heap_policy(tmp_path, monkeypatch):
    """glibc's moving mmap/trim thresholds made a CPU timing depend on the probe before it: a CPU
    engine worker gets them fixed; a value the user set wins, a preloaded allocator is left alone,
    and a CUDA worker keeps its environment."""
    from pytest_voiceperf.engines import EngineProcess, allocator

    names = list(allocator.FIXED)
    for var in names:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.delenv("LD_PRELOAD", raising=False)

    def seen(spec):
        eng = EngineProcess("selftest", spec, log_dir=tmp_path, start_timeout=60)
        try:
            return eng.call("environ", timeout=30, names=names)
        finally:
            eng.close()

    assert seen({"model": "a", "device": "cpu"}) == {"MALLOC_MMAP_THRESHOLD_": str(32 << 20),
                                                     "MALLOC_TRIM_THRESHOLD_": str(1 << 30)}
    assert seen({"model": "a", "device": "cuda"}) == {"MALLOC_MMAP_THRESHOLD_": None, "MALLOC_TRIM_THRESHOLD_": None}
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "4096")
    assert seen({"model": "a", "device": "cpu"})["MALLOC_TRIM_THRESHOLD_"] == "4096"
    assert allocator.env({"LD_PRELOAD": "/usr/lib/libtcmalloc_minimal.so.4"}, "cpu") == {}
    assert allocator.describe({}, "cpu")["policy"] == "glibc, thresholds fixed"


def test_a_reusable_engine_worker_serves_the_next_instance_of_its_family(vp):
    """A family whose instances live in processes of their own (vLLM's engine core) starts its next
    instance in the same worker when the pool makes room: one process, two starts, both timed."""
    vp.makeconftest(ENGINE_PROBE + textwrap.dedent('''
        import dataclasses
        from pytest_voiceperf.engines import families

        # the selftest engine as a family whose worker may serve its next instance (as vLLM's)
        families()["selftest"] = dataclasses.replace(families()["selftest"], reuse_worker=True)
    '''))
    (vp.path / "claims/a.yaml").write_text(claim("first", "model: a, method: echo"))
    (vp.path / "claims/b.yaml").write_text(claim("second", "model: b, method: echo, start_sleep: 0.3"))
    res = vp.runpytest("--voiceperf", "--voiceperf-json", "out.json", "-s")
    res.assert_outcomes(passed=2)
    res.stdout.fnmatch_lines(["*starting engine selftest (b) in the worker of selftest a*"])
    r = results(vp)
    pids = {c: r[c]["probes"]["e"]["info"]["engine_pid"] for c in ("first", "second")}
    assert pids["first"] == pids["second"]
    prov = json.loads((vp.path / "out.json").read_text())["provenance"]
    started = {e["spec"]["model"]: e["info"] for e in prov["engines"]}
    assert started["b"]["worker_reused_after"] == "selftest a" and "worker_reused_after" not in started["a"]
    rows = {(row["phase"], row["engine"]): row["seconds"] for row in prov["timing"]["rows"]}
    assert rows[("engine start", "selftest b")] >= 0.3  # the second start is timed as its own


def test_an_engine_family_that_keeps_its_model_in_the_worker_gets_a_fresh_worker(vp):
    (vp.path / "claims/a.yaml").write_text(claim("first", "model: a, method: echo"))
    (vp.path / "claims/b.yaml").write_text(claim("second", "model: b, method: echo"))
    vp.runpytest("--voiceperf", "--voiceperf-json", "out.json").assert_outcomes(passed=2)
    r = results(vp)
    assert r["first"]["probes"]["e"]["info"]["engine_pid"] != r["second"]["probes"]["e"]["info"]["engine_pid"]


def test_the_provenance_says_whether_the_engine_caches_were_warm(vp, monkeypatch):
    from pytest_voiceperf.engines import caches

    for var in caches.DIRS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("VOICEPERF_CACHE", str(vp.path / "vc"))
    (vp.path / "claims/a.yaml").write_text(claim("c", "method: echo"))
    vp.runpytest("--voiceperf", "--voiceperf-json", "cold.json").assert_outcomes(passed=1)
    (vp.path / "vc" / "vllm").mkdir(parents=True)
    (vp.path / "vc" / "vllm" / "x").write_text("compiled")  # what an engine start leaves
    vp.runpytest("--voiceperf", "--voiceperf-json", "warm.json").assert_outcomes(passed=1)
    cold, warm = (json.loads((vp.path / f).read_text())["provenance"]["caches"] for f in ("cold.json", "warm.json"))
    assert cold["root"] == str(vp.path / "vc") and cold["dirs"]["VLLM_CACHE_ROOT"] == str(vp.path / "vc" / "vllm")
    assert not any(cold["warm"].values())
    assert warm["warm"] == dict(cold["warm"], VLLM_CACHE_ROOT=True)


def test_resume_finishes_an_interrupted_run_without_measuring_again(vp):
    (vp.path / "claims/a.yaml").write_text(claim("first", "method: echo, value: 1.0"))
    (vp.path / "claims/b.yaml").write_text(claim("hangs", "model: b, method: hang, seconds: 600"))
    code, out = _run_and_interrupt(vp.path, signal.SIGINT)
    assert code == 2, out
    first = json.loads((vp.path / "out.json.partial").read_text())["results"][0]
    # the user fixes what hung and finishes the run from the partial file
    (vp.path / "claims/b.yaml").write_text(claim("hangs", "model: b, method: echo, value: 2.0"))
    res = vp.runpytest("--voiceperf", "-v", "--voiceperf-json", "out.json", "--voiceperf-resume", "out.json.partial")
    res.assert_outcomes(passed=1, deselected=1)
    res.stdout.fnmatch_lines(["*1 case(s) kept from out.json.partial*"])
    assert "starting engine selftest (a)" not in res.stdout.str()  # 'first' was not measured again
    doc = json.loads((vp.path / "out.json").read_text())
    assert doc["provenance"]["complete"] is True and doc["provenance"]["resumed_from"] == "out.json.partial"
    r = {x["claim"]: x for x in doc["results"]}
    assert r["first"]["resumed"] is True and r["first"]["samples"] == first["samples"]
    assert r["hangs"]["outcome"] == "passed" and "resumed" not in r["hangs"]
    res = vp.runpytest("--voiceperf", "--voiceperf-resume", "missing.json")
    assert res.ret == 4
    res.stderr.fnmatch_lines(["*--voiceperf-resume: missing.json: cannot be read (No such file or directory)*"])


def test_one_worker_per_gpu_groups_claims_by_engine(vp, monkeypatch):
    pytest.importorskip("xdist")
    for model in ("a", "b"):
        for i in range(3):
            (vp.path / f"claims/{model}{i}.yaml").write_text(
                claim(f"{model}-{i}", f"model: {model}, method: echo, value: {1 + i}"))
    monkeypatch.setenv("VOICEPERF_FAKE_GPUS", "2")
    res = vp.runpytest("--voiceperf", "--voiceperf-gpus", "all", "--voiceperf-json", "out.json")
    res.assert_outcomes(passed=6)
    r = results(vp)
    assert len(r) == 6  # one results file holds every claim
    by_model = {}
    for rr in r.values():
        by_model.setdefault(rr["claim"][0], set()).add((rr["worker"], rr["gpu"]))
    assert all(len(v) == 1 for v in by_model.values()), by_model  # an engine's claims share a worker
    workers = {next(iter(v)) for v in by_model.values()}
    assert {w for w, _ in workers} == {"gw0", "gw1"} and {g for _, g in workers} == {"0", "1"}
    pids = {rr["claim"][0]: set() for rr in r.values()}
    for rr in r.values():
        pids[rr["claim"][0]].add(rr["probes"]["e"]["values"]["pid"])
    assert all(len(p) == 1 for p in pids.values())  # one engine start per model
    engines = json.loads((vp.path / "out.json").read_text())["provenance"]["engines"]
    assert sorted((e["spec"]["model"], e["worker"], e["gpu"]) for e in engines) == sorted(
        (m, w, g) for m, v in by_model.items() for w, g in v)  # each worker's engines, in the provenance


def test_gpus_option_needs_gpus(vp, monkeypatch):
    monkeypatch.delenv("VOICEPERF_FAKE_GPUS", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setenv("PATH", "/nonexistent")
    (vp.path / "claims/a.yaml").write_text(claim("a", "method: echo"))
    res = vp.runpytest("--voiceperf", "--voiceperf-gpus", "all")
    assert res.ret == 4
    res.stderr.fnmatch_lines(["*--voiceperf-gpus: no GPU visible*"])


# a probe that kills the real vLLM engine's worker process in the middle of a decode
KILL_VLLM = textwrap.dedent('''
    import os, signal, threading
    from pytest_voiceperf.probes import Measurement, probe
    from pytest_voiceperf.probes.llm_call import call_spec as _spec

    @probe("t.kill_vllm", outputs={"x": ""}, engine="llm", exact=("x",))
    def kill_vllm(ctx, model: str = "qwen3-tiny"):
        fam, spec, _ = _spec(ctx, model, "vllm", "bfloat16", "none")
        eng = ctx.engine(fam, spec)
        threading.Timer(2.0, os.kill, (eng.proc.pid, signal.SIGKILL)).start()
        # each rep fits in max_model_len (8192): a longer one ends short and is refused before the
        # kill on a fast machine; enough reps that the kill always lands mid-decode
        ctx.call(fam, spec, "decode", tokens=8000, reps=100000)
        return Measurement({"x": 1.0})

    def pytest_voiceperf_add_probes(registry):
        registry.add(kill_vllm.voiceperf_probe)
''')


def test_killed_vllm_worker_is_an_error_and_the_next_claim_gets_a_fresh_engine(pytester):
    pytest.importorskip("vllm")
    pytester.makeconftest(KILL_VLLM)
    pytester.mkdir("claims")
    (pytester.path / "claims/a.yaml").write_text(textwrap.dedent("""\
        id: a-killed
        title: t
        statement: t
        measure:
          k: {probe: t.kill_vllm}
        metric: k.x
        expect: {min: 0}
        """))
    (pytester.path / "claims/b.yaml").write_text(textwrap.dedent("""\
        id: b-after
        title: t
        statement: decode works again on a fresh engine
        measure:
          d: {probe: llm.decode, model: qwen3-tiny, engine: vllm, tokens: 16, reps: 2}
        metric: d.generated
        expect: {equals: 16}
        noise: {max_rel_spread: 50}
        """))
    res = pytester.runpytest("--voiceperf", "-v", "--voiceperf-json", "out.json", "-p", "no:randomly")
    r = results(pytester)
    assert r["a-killed"]["outcome"] == "error", r["a-killed"]
    assert "killed by SIGKILL" in r["a-killed"]["reason"]
    assert r["b-after"]["outcome"] == "passed", (r["b-after"], res.stdout.str()[-3000:])
    assert res.stdout.str().count("starting engine vllm") == 2


def test_a_light_engine_lives_beside_the_one_live_engine(tmp_path, monkeypatch):
    """One engine at a time holds the device; a light one (a native library behind ctypes, e.g. the
    ASR port measured against NeMo each round) stays beside it instead of restarting it every round."""
    from pytest_voiceperf import engines

    closed = []

    class FakeProcess:
        def __init__(self, family, spec, **_):
            self.family, self.alive, self.info = family, True, {}

        def close(self):
            closed.append(self.family)
            self.alive = False

    from pytest_voiceperf.engines import pool as engine_pool

    monkeypatch.setattr(engine_pool, "EngineProcess", FakeProcess)
    monkeypatch.setattr(engine_pool, "check_available", lambda family: None)
    pool = engines.EnginePool(tmp_path, start_timeout=1, max_live=1)
    nemo = pool.get("nemo", {"model": "asr"})
    port = pool.get("parakeet", {"model": "asr"})
    assert pool.get("nemo", {"model": "asr"}) is nemo and closed == []
    pool.get("vllm", {"model": "qwen3-0.6b"})  # a second heavy engine takes the heavy one's place
    assert closed == ["nemo"] and pool.get("parakeet", {"model": "asr"}) is port


def test_a_gguf_that_cannot_import_makes_its_engine_unmeasured_with_the_cause(tmp_path, monkeypatch):
    """Seen on the H200 beside vLLM: gguf imports mistral_common, which raised RuntimeError
    (pycountry missing); the llama.cpp engine says so instead of failing with a traceback."""
    from pytest_voiceperf.engines.worker import import_gguf
    from pytest_voiceperf.probes import Unmeasured

    (tmp_path / "gguf").mkdir()
    (tmp_path / "gguf" / "__init__.py").write_text(
        'raise RuntimeError(\'The `language_code` module requires "pycountry" to be installed.\')\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "gguf", raising=False)
    with pytest.raises(Unmeasured, match="gguf package could not be imported: RuntimeError: .*pycountry"):
        import_gguf()
    monkeypatch.delitem(sys.modules, "gguf", raising=False)


NESTED_PROBES = textwrap.dedent('''
    from pytest_voiceperf.probes import Measurement, probe

    @probe("t.varied", outputs={"value": ""}, engine="selftest")
    def varied(ctx, model: str = "a"):
        r = ctx.call("selftest", {"model": model}, "echo", value=1.0 + 0.01 * ctx.attempt)
        return Measurement({"value": r["value"]}, {"value": [r["value"], r["value"] * 1.01]})

    @probe("t.fit", outputs={"value": ""}, engine="selftest")
    def fit(ctx, models: str = "a,b,c"):
        vals = [ctx.probe("t.varied", model=m).values["value"] for m in models.split(",")]
        return Measurement({"value": sum(vals)}, {"value": [sum(vals)]})

    def pytest_voiceperf_add_probes(registry):
        registry.add(varied.voiceperf_probe)
        registry.add(fit.voiceperf_probe)
''')


def test_a_probe_over_several_engines_starts_each_once(pytester):
    """A fit over three engines (one live at a time) takes each engine's rounds while it is live:
    three starts, not three per round."""
    pytester.makeconftest(NESTED_PROBES)
    pytester.mkdir("claims")
    (pytester.path / "claims/f.yaml").write_text(textwrap.dedent("""\
        id: fit
        title: t
        statement: t
        measure:
          f: {probe: t.fit, models: "a,b,c"}
        metric: f.value
        expect: {min: 0.5}
        """))
    res = pytester.runpytest("--voiceperf", "--voiceperf-json", "out.json", "--voiceperf-rounds", "3:3")
    res.assert_outcomes(passed=1)
    doc = json.loads((pytester.path / "out.json").read_text())
    assert [e["spec"]["model"] for e in doc["provenance"]["engines"]] == ["a", "b", "c"]
    r = doc["results"][0]
    assert r["rounds"] == 3 and len(set(r["round_values"])) == 3  # still one figure per round


def test_a_fresh_rounds_engine_serves_each_round_of_a_call_from_its_own_process(tmp_path, monkeypatch):
    """llama.cpp's decode speed hangs on where its process's memory landed (2-core VM: six fresh
    processes 12.1-13.0 tok/s, 1-2% within each; two same-commit runs 12.3 and 14.1 tok/s). Its family
    says ``fresh_rounds``, so no engine process serves two rounds of one probe call and the rounds
    hold that spread. Two calls on one engine interleave without extra starts; another family keeps
    its one process."""
    import dataclasses

    from pytest_voiceperf import engines
    from pytest_voiceperf.context import ProbeContext
    from pytest_voiceperf.options import Options
    from pytest_voiceperf.probes import Measurement, Registry, probe
    from pytest_voiceperf.session import VoiceperfSession

    fams = dict(engines.families())
    fams["fresh"] = dataclasses.replace(engines.SELFTEST, name="fresh", fresh_rounds=True)
    monkeypatch.setattr(engines.family, "_families", fams)
    assert engines.LLAMACPP.fresh_rounds and not engines.VLLM.fresh_rounds

    def make(family):
        @probe(f"t.{family}", outputs={"t": "s"}, engine=family)
        def run(ctx, model: str = "a", value: float = 1.0):
            r = ctx.call(family, {"model": model}, "echo", value=value)
            return Measurement({"t": r["value"]}, repetitions={"t": [r["value"]]},
                               info={"pid": ctx.engine(family, {"model": model}).proc.pid})
        return run.voiceperf_probe

    reg = Registry()
    reg.add(make("fresh"))
    reg.add(make("selftest"))
    s = VoiceperfSession(Options(device="cpu"), reg, tmp_path)
    try:
        ctx = ProbeContext(s, time.monotonic() + 120)
        for r in range(3):  # two calls on one engine, their rounds interleaved (as plan() takes them)
            s.measure_round("t.fresh", {"value": 1.0}, ctx, r)
            s.measure_round("t.fresh", {"value": 2.0}, ctx, r)
        a, b = s.probed("t.fresh", {"value": 1.0}), s.probed("t.fresh", {"value": 2.0})
        pids_a = [m.info["pid"] for m in a.rounds]
        pids_b = [m.info["pid"] for m in b.rounds]
        assert len(set(pids_a)) == 3 and len(set(pids_b)) == 3, (pids_a, pids_b)
        assert pids_a == pids_b  # each new process served both calls' round: 3 starts, not 6
        assert [rec["engine_pids"] for rec in a.records] == [[p] for p in pids_a]
        assert sum(e["family"] == "fresh" for e in s.engines.started) == 3
        for r in range(3):
            s.measure_round("t.selftest", {}, ctx, r)
        assert len({m.info["pid"] for m in s.probed("t.selftest", {}).rounds}) == 1
    finally:
        s.close()
