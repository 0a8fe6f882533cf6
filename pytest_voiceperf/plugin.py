"""All pytest hooks of pytest-voiceperf (entry point ``voiceperf``).

Without ``--voiceperf`` the plugin collects nothing and imports nothing heavy.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from . import cmdline
from .exceptions import EngineError, Unmeasured
from .state import (
    FAMILY_MARKS,
    STASH_GATE,
    STASH_LOCK,
    STASH_NO_BASELINE,
    STASH_OTHER_DEVICE,
    STASH_SESSION,
    STASH_STATE,
    State,
    benchmark_json,
    check_resume,
    gate_changes,
    get_session,
    kept,
    resumed,
    user_llms,
    write_results,
)


def pytest_addhooks(pluginmanager):
    from . import hookspec

    pluginmanager.add_hookspecs(hookspec)


def pytest_addoption(parser):
    cmdline.add_options(parser)


def _enabled(config) -> bool:
    return bool(config.getoption("voiceperf", False))




@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    for m in FAMILY_MARKS:
        config.addinivalue_line("markers", f"{m}: voiceperf claims measured with {m} probes")
    config.addinivalue_line("markers", "voiceperf: a voiceperf claim case")
    if hasattr(config, "workerinput"):
        from .gpus import bind_worker

        bind_worker(config)  # before anything touches CUDA in this worker
        if config.getoption("voiceperf_gpus", None):
            config.option.loadgroup = True  # workers re-parse argv; the controller chose loadgroup
    if not _enabled(config):
        return
    state = State(config)
    config.stash[STASH_STATE] = state
    try:
        state.pattern = re.compile(config.getini("voiceperf_claim_pattern"))
    except re.error as exc:
        raise pytest.UsageError(f"ini option voiceperf_claim_pattern is not a regular expression: {exc}") from None
    config.pluginmanager.register(state, "voiceperf-state")
    if config.getoption("voiceperf_gpus", None):
        from .gpus import XdistGroups

        config.pluginmanager.register(XdistGroups(), "voiceperf-xdist-groups")
    explicit = config.getoption("voiceperf_claims")
    if explicit:
        roots = [Path(p) for p in explicit]
    else:
        roots = list(config.getini("voiceperf_claims")) or [config.rootpath / "claims"]
    state.roots = [Path(os.path.abspath(r)) for r in roots]
    named = list(config.args) if config.args_source == pytest.Config.ArgsSource.ARGS else []
    if explicit or not named:
        missing = [str(r) for r in state.roots if not r.exists()]
        if missing:
            hint = ""
            if config.inipath is None and config.rootpath != config.invocation_params.dir:
                # pytest looks for its rootdir before it knows this plugin's options: the value of an
                # option given after a space (an absolute --voiceperf-json path) reads as a test path
                hint = (f" (pytest chose {config.rootpath} as rootdir and found no ini file: an existing file "
                        "given as '--voiceperf-json /elsewhere/x.json' is taken for a test path at that point; "
                        "write --voiceperf-json=/elsewhere/x.json)")
            raise pytest.UsageError(f"voiceperf: claim path not found: {', '.join(missing)}{hint}")
        # paths named on the command line run as well as the claims (pytest --voiceperf tests/test_x.py)
        config.args[:] = list(named) + [str(r) for r in state.roots if str(r) not in named]
    else:  # only paths on the command line: they are the claims (and any Python tests) to run
        state.roots = [Path(os.path.abspath(a.split("::")[0])) for a in named]
    state.named = {Path(os.path.abspath(a.split("::")[0])) for a in named} | (
        {r for r in state.roots if r.is_file()} if explicit else set())
    if config.getoption("voiceperf_gpus") and not hasattr(config, "workerinput"):
        from .gpus import configure_xdist

        configure_xdist(config)


def pytest_collect_file(file_path: Path, parent):
    config = parent.config
    if not _enabled(config) or file_path.suffix not in (".yaml", ".yml"):
        return None
    state = config.stash[STASH_STATE]
    fp = Path(os.path.abspath(file_path))
    if not any(fp == r or r in fp.parents for r in state.roots):
        return None
    # a claim file is one whose name matches voiceperf_claim_pattern, or one named explicitly
    if fp not in state.named and not state.pattern.search(fp.name):
        return None
    from .collect import ClaimFile

    return ClaimFile.from_parent(parent, path=file_path)


def pytest_sessionstart(session):
    config = session.config
    if not _enabled(config):
        return
    from .options import Options
    from .session import VoiceperfSession

    def ini_float(name):
        try:
            return float(config.getini(name))
        except ValueError:
            raise pytest.UsageError(f"ini option {name} must be a number") from None

    resumed(config)  # a bad --voiceperf-resume file is a usage error before anything is measured
    cmdline.engine_pythons(config)
    opts = Options(
        device=config.getoption("voiceperf_device"),
        profile=config.getoption("voiceperf_profile"),
        strict=config.getoption("voiceperf_strict"),
        json_path=config.getoption("voiceperf_json"),
        model_overrides=cmdline.kv(config.getoption("voiceperf_model"), "model"),
        data=cmdline.kv(config.getoption("voiceperf_data"), "data"),
        bins=cmdline.kv(config.getoption("voiceperf_bin"), "bin"),
        spec_overrides=cmdline.kv(config.getoption("voiceperf_spec"), "spec", float),
        # the ini's default is empty: set, it is the operator's cap that a claim's own timeout cannot raise
        timeout=config.getoption("voiceperf_timeout") or (ini_float("voiceperf_timeout")
                                                          if config.getini("voiceperf_timeout") else 900.0),
        timeout_cap=config.getoption("voiceperf_timeout") or (
            ini_float("voiceperf_timeout") if config.getini("voiceperf_timeout") else None),
        start_timeout=ini_float("voiceperf_start_timeout"),
        ceiling_slack=ini_float("voiceperf_ceiling_slack"),
        round_seconds=ini_float("voiceperf_round_seconds"),
        noise_floor=ini_float("voiceperf_noise_floor"),
        disturbed_cpu=cmdline.disturbed_cpu(config),
        gate_max_rounds=int(ini_float("voiceperf_gate_max_rounds")),
        quiet_wait=ini_float("voiceperf_quiet_wait"),
        disturbed_drops=max(1, int(ini_float("voiceperf_disturbed_drops"))),
        gate_round_seconds=ini_float("voiceperf_gate_round_seconds"),
        save_min_rounds=(int(ini_float("voiceperf_save_min_rounds"))
                         if config.getoption("voiceperf_save") and not config.getoption("voiceperf_rounds") else 0),
        engine_args=cmdline.engine_args(list(config.getini("voiceperf_engine_args")) +
                                list(config.getoption("voiceperf_engine_arg"))),
        **cmdline.rounds(config),
        llm_engine=cmdline.llm_engine(config),
    )
    opts.model_overrides = {**user_llms(config), **opts.model_overrides}
    worker = getattr(config, "workerinput", {}).get("workerid")
    threads = config.getoption("voiceperf_threads")
    if threads:
        import torch

        torch.set_num_threads(threads)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    vs = VoiceperfSession(opts, config.stash[STASH_STATE].registry, config.rootpath, reporter=reporter, worker=worker)
    if reporter is not None:
        reporter._vp_quiet = config.get_verbosity() < 0
    config.stash[STASH_SESSION] = vs
    out = config.getoption("voiceperf_json")
    if out and not hasattr(config, "workerinput"):  # the controller writes the file; it holds its lock
        from .results import Busy, WriterLock

        try:
            config.stash[STASH_LOCK] = WriterLock(out).acquire()
        except Busy as exc:
            raise pytest.UsageError(f"--voiceperf-json: {exc}") from None
    baseline = config.getoption("voiceperf_baseline")
    if baseline:
        g = _load_gate(config, vs, baseline)
        if g is not None:
            config.stash[STASH_GATE] = g
            vs.gate = g














def _load_gate(config, vs, spec):
    from . import gate, provenance, storage

    mode = cmdline.gate_option(config, "voiceperf_gate", "voiceperf_gate")
    if mode not in ("changes", "absolute"):
        raise pytest.UsageError(f"ini option voiceperf_gate must be 'changes' or 'absolute', not {mode!r}")
    try:
        path, doc = storage.load(spec, config.rootpath, vs.provenance()["machine_id"])
    except FileNotFoundError as exc:
        if config.getini("voiceperf_baseline_missing") == "fail":
            raise pytest.UsageError(f"voiceperf baseline: {exc}") from None
        config.stash[STASH_NO_BASELINE] = (
            f"no baseline {spec!r} yet ({exc}): nothing was gated; this run passes softly"
            + (", and a claim that fails is reported as xfailed" if mode == "changes" else "")
            + f". Save one with --voiceperf-save {spec if os.sep not in spec else 'NAME'} "
            "(ini voiceperf_baseline_missing = fail makes this an error)")
        return None
    except ValueError as exc:
        raise pytest.UsageError(f"voiceperf baseline: {exc}") from None
    try:
        bad = provenance.machine_mismatches(doc.provenance, vs.provenance(), config.getoption("voiceperf_allow_mismatch"))
    except ValueError as exc:
        raise pytest.UsageError(f"--voiceperf-allow-mismatch: {exc}") from None
    if bad:
        raise pytest.UsageError(
            f"voiceperf baseline {path} was measured on a different machine, comparing would mislead: "
            + "; ".join(bad.values()) + f". Pass --voiceperf-allow-mismatch {','.join(bad)} to compare anyway.")
    g = gate.Gate(str(path), doc, tolerance=float(config.getini("voiceperf_tolerance")),
                  alpha=float(config.getini("voiceperf_alpha")),
                  all_figures=bool(config.getoption("voiceperf_all_figures")), mode=mode,
                  min_guarded=cmdline.gate_option(config, "voiceperf_min_guarded", "voiceperf_min_guarded", float))
    # each figure may be looked at once per round from the first decision to the gate's last round
    g.looks = max(1, max(vs.options.max_rounds, vs.options.gate_max_rounds) - vs.options.min_rounds + 1)
    return g


@pytest.hookimpl(tryfirst=True)  # before xdist's loadgroup reads the xdist_group marks
def pytest_collection_modifyitems(session, config, items):
    if not _enabled(config):
        return
    from .collect import ClaimItem, live_engine_next

    vs = get_session(config)
    profile = vs.profile if vs else (config.getoption("voiceperf_profile") or "cpu")
    keep, dropped = [], []
    if vs is not None and resumed(config):
        again = check_resume(config, vs, {it.nodeid: (it.claim.sha, it.claim.model.expect) for it in items
                                          if isinstance(it, ClaimItem)})
        tr = config.pluginmanager.get_plugin("terminalreporter")
        for line in again if tr is not None else []:
            tr.write_line(f"voiceperf resume: {line}", yellow=True)
    done = resumed(config)  # cases an interrupted run already finished
    # --voiceperf-device cuda without a GPU selects what a GPU runner would run (they go unmeasured, saying why)
    device = "cuda" if vs is not None and vs.device.startswith("cuda") else "cpu"
    for item in items:
        if isinstance(item, ClaimItem) and (not item.in_profile(profile, device) or item.nodeid in done):
            dropped.append(item)
        else:
            keep.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
        _say_other_device(config, profile, device, dropped)
    # claims that share an engine run one after the other (one engine start each)
    order = {id(it): i for i, it in enumerate(items)}
    items.sort(key=lambda it: (getattr(it, "engine_key", "") or "", order[id(it)]))
    live_engine_next(items)
    if config.getoption("voiceperf_gpus") and getattr(config.option, "loadgroup", False):
        from .gpus import group_items

        group_items(items)


def _say_other_device(config, profile: str, device: str, dropped) -> None:
    """A profile leaves out the cases of another device; say so once, not as one problem per case."""
    other = [it for it in dropped if getattr(it, "case", None) is not None and it.case.other_device(device)]
    if other:
        config.stash[STASH_OTHER_DEVICE] = (f"voiceperf: {len(other)} cases of another device left out (profile "
                                            f"{profile} on {device}; --voiceperf-profile full runs them too)")


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_json(config, benchmarks, output_json):
    if _enabled(config):
        benchmark_json(config, output_json)


def pytest_report_collectionfinish(config, start_path, items):
    return config.stash.get(STASH_OTHER_DEVICE, None)


def pytest_collection_finish(session):
    # the cases left after every deselection (-k, --lf, resume, profiles) plan their shared rounds;
    # an xdist worker does not know which of them it will run, so it takes rounds case by case
    vs = get_session(session.config)
    if vs is not None and vs.worker is None:
        from .collect import ClaimItem

        vs.plan([it.case for it in session.items if isinstance(it, ClaimItem) and not it.problem])
    g = session.config.stash.get(STASH_GATE, None)
    if g is not None:  # the multiplicity correction counts what this run compares
        g.plan([it.nodeid for it in session.items])


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    from .collect import ClaimItem, InvalidClaimItem

    if isinstance(item, (ClaimItem, InvalidClaimItem)):
        apply_verdict(item, call, outcome.get_result())


def apply_verdict(item, call, rep) -> None:
    """The case's verdict (verdict.outcome_of) and the baseline gate (Gate.apply) onto its report."""
    from .collect import InvalidClaimItem
    from .verdict import outcome_of

    exc = call.excinfo.value if call.excinfo else None
    engine_failed = call.when == "setup" and isinstance(exc, EngineError)  # ClaimItem.setup measures
    if call.when == "setup":
        item.voiceperf_setup_s = call.duration
    if call.when != "call" and not engine_failed:
        if rep.failed:
            rep.voiceperf_outcome = "error"
        return
    if isinstance(item, InvalidClaimItem) and not isinstance(exc, (EngineError, Unmeasured)):
        exc = EngineError(str(exc) if exc else "invalid claim")  # a claim file that does not load
    result = item.result
    out = outcome_of(exc, report=rep.outcome, wasxfail=getattr(rep, "wasxfail", None),
                     xfail_reason=getattr(item, "xfail_reason", None),
                     strict=item.config.getoption("voiceperf_strict"), location=item.location_str(),
                     reason=result.reason)
    result.outcome, result.reason = out.outcome, out.reason
    if out.outcome in ("unmeasured", "error") and hasattr(rep, "wasxfail"):
        del rep.wasxfail  # xfail applies to decided outcomes only
    rep.outcome = out.report
    if out.longrepr is not None:
        rep.longrepr = out.longrepr
    elif out.skip_text is not None:
        rep.longrepr = (str(item.path), item.line, out.skip_text)
    elif engine_failed:
        rep.longrepr = item.repr_failure(call.excinfo)  # the engine's log lines, not a traceback
    result.duration_s = round(call.duration + (getattr(item, "voiceperf_setup_s", 0.0) if call.when == "call" else 0.0), 3)
    g = item.config.stash.get(STASH_GATE, None)
    if g is not None:
        msg = g.apply(result, item.location_str(), item.name)
        if msg is not None:
            if rep.outcome in ("passed", "skipped"):  # a figure that got worse fails even so
                rep.outcome = "failed"
                rep.longrepr = msg
            else:
                rep.longrepr = f"{rep.longrepr}\n{msg}"
    elif (STASH_NO_BASELINE in item.config.stash and result.outcome in ("failed", "error")
          and cmdline.gate_option(item.config, "voiceperf_gate", "voiceperf_gate") == "changes"):
        result.reason = f"no baseline yet, nothing to gate against: {result.reason}"
        result.outcome = "xfailed"
    if result.outcome == "xfailed" and rep.outcome == "failed":  # a known failure (see Gate.apply)
        rep.outcome = "skipped"
        rep.wasxfail = result.reason
    rep.voiceperf_outcome = result.outcome
    rep.voiceperf = result.dump()
    rep.user_properties.append(("voiceperf_outcome", result.outcome))
    if result.value is not None:
        rep.user_properties.append(("voiceperf_value", result.value))


def pytest_report_teststatus(report, config):
    vo = getattr(report, "voiceperf_outcome", None)
    if vo == "unmeasured" and report.when == "call":
        # the summary line counts the two kinds of unmeasured that a re-run may change
        why = getattr(report, "voiceperf", {}).get("reason", "")
        if why.startswith("inconclusive"):
            return "inconclusive", "I", ("INCONCLUSIVE", {"yellow": True})
        if why.startswith("disturbed"):
            return "disturbed", "D", ("DISTURBED", {"yellow": True})
        return "unmeasured", "U", ("UNMEASURED", {"yellow": True})
    if vo == "error":
        return "error", "E", ("ERROR", {"red": True})
    return None


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not _enabled(config):
        return
    state = config.stash.get(STASH_STATE, None)
    if state is None or not state.results:
        return
    from .report import terminal_table

    terminal_table(terminalreporter, list(state.results.values()), config)
    vs = get_session(config)
    if vs is not None and config.get_verbosity() >= 0:
        from .timing import table_lines

        terminalreporter.write_sep("-", "voiceperf: where the time went")
        for line in table_lines(vs.timing_json()):
            terminalreporter.write_line(line)
    gate = config.stash.get(STASH_GATE, None)
    if gate is not None:
        gate.summary(terminalreporter, gate_changes(config))
    if STASH_NO_BASELINE in config.stash:
        terminalreporter.write_sep("-", "voiceperf baseline", yellow=True)
        terminalreporter.write_line(config.stash[STASH_NO_BASELINE], yellow=True, bold=True)
    if resumed(config):
        terminalreporter.write_line(f"voiceperf: {len(kept(config, state))} case(s) kept from "
                                    f"{config.getoption('voiceperf_resume')} (not run again; in the results file)")


@pytest.hookimpl(hookwrapper=True)
def pytest_sessionfinish(session, exitstatus):
    config = session.config
    yield
    if not _enabled(config):
        return
    vs = get_session(config)
    interrupted = int(exitstatus) == pytest.ExitCode.INTERRUPTED
    if vs is not None:
        if not interrupted:
            try:
                vs.recheck_ceilings()
            except KeyboardInterrupt:  # stopped during the end check: the results file still comes first
                interrupted = True
        vs.end()
    if hasattr(config, "workerinput"):
        # the xdist controller writes the one results file; it learns this worker's engines here
        if vs is not None:
            vs.close(interrupted=interrupted)
            if hasattr(config, "workeroutput"):
                gpu = config.workerinput.get("voiceperf_gpu")
                config.workeroutput["voiceperf_engines"] = [
                    dict(e, worker=config.workerinput.get("workerid"), gpu=gpu) for e in vs.engines.started]
                config.workeroutput["voiceperf_timing"] = vs.timing.to_json()
        return
    gate = config.stash.get(STASH_GATE, None)
    if gate is not None and not interrupted and not gate.guarded()["enough"] and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED  # too little was guarded: the gate did not hold
    state = config.stash.get(STASH_STATE, None)
    if (state is not None and session.exitstatus == 0
            and any(r.get("outcome") in ("failed", "error") for r in kept(config, state))):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED  # a failure kept from the resumed run still fails it
    # the results file first, then the engines: a busy engine must not delay (or, killed with the
    # run, lose) what was measured
    doc = write_results(config, complete=not interrupted)
    lock = config.stash.get(STASH_LOCK, None)
    if lock is not None:
        lock.release()
    if vs is not None:
        vs.close(interrupted=interrupted)
    save = config.getoption("voiceperf_save")
    if save and doc is not None and doc["provenance"]["complete"]:
        from .storage import save_run

        saved = save_run(doc, config.rootpath, save)
        tr = config.pluginmanager.get_plugin("terminalreporter")
        if tr is not None:
            tr.write_line(f"voiceperf: saved baseline {saved}")


@pytest.fixture(scope="session")
def voiceperf(request):
    """The voiceperf session for checks written in Python: ``voiceperf.probe("hw.read_bandwidth")``."""
    from .context import ProbeContext
    from .options import Options
    from .session import VoiceperfSession

    vs = get_session(request.config)
    if vs is None:
        state = request.config.stash.get(STASH_STATE, None) or State(request.config)
        vs = VoiceperfSession(Options(device=request.config.getoption("voiceperf_device"),
                             disturbed_cpu=cmdline.disturbed_cpu(request.config)), state.registry,
                     request.config.rootpath)
        request.addfinalizer(vs.close)
    import time

    class _Probes:
        session = vs
        device = vs.device

        def probe(self, name: str, **args):
            return vs.measure(name, args, ProbeContext(vs, time.monotonic() + vs.options.timeout))

    return _Probes()
