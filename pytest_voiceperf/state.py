"""The plugin's state in one pytest process, below the hooks (plugin.py) and the items (collect.py):
typed stash keys, the collection-time state, the voiceperf session, resumed cases and the results
file. Nothing here imports plugin.py, so the hooks and the items share it without an import cycle."""
from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .gate import Gate  # noqa: F401  (named in a string below: the stash key's type)
    from .probes import Registry
    from .session import VoiceperfSession

FAMILY_MARKS = ("hw", "llm", "asr", "tts", "pipeline")


class State:
    """Collection-time state of the plugin in one pytest process."""

    def __init__(self, config: pytest.Config):
        self.config = config
        self.roots: list[Path] = []
        self.ids: dict[str, str] = {}  # claim id -> "file:line" of its first definition
        self._registry: Registry | None = None
        self.results: dict[str, dict] = {}  # nodeid -> result (filled from reports)
        self.named: set[Path] = set()  # files named on the command line or in --voiceperf-claims
        self.pattern: re.Pattern = re.compile(r"\.ya?ml$")  # ini voiceperf_claim_pattern

    def pytest_runtest_logreport(self, report):
        """Results arrive as reports, so the xdist controller sees every worker's."""
        data = getattr(report, "voiceperf", None)
        if data is not None and (report.when == "call" or (report.when == "setup" and report.failed)):
            self.results[report.nodeid] = data
            if self.config.getoption("voiceperf_json") and not hasattr(self.config, "workerinput"):
                write_results(self.config, complete=False)  # a run stopped at any point keeps what it measured

    @property
    def registry(self) -> Registry:
        if self._registry is None:
            from .probes import DuplicateProbe, load_registry

            def warn(msg: str) -> None:  # a broken third-party plugin must not stop the run
                self.config.issue_config_time_warning(pytest.PytestWarning(msg), 2)

            try:
                reg = load_registry(on_error=warn)
                self.config.hook.pytest_voiceperf_add_probes(registry=reg)  # conftest.py and plugins
            except DuplicateProbe as exc:
                raise pytest.UsageError(f"voiceperf: {exc}") from None
            self._registry = reg
        return self._registry


STASH_SESSION = pytest.StashKey["VoiceperfSession"]()
STASH_STATE = pytest.StashKey[State]()
STASH_GATE = pytest.StashKey["Gate"]()
STASH_NO_BASELINE = pytest.StashKey[str]()  # the notice when --voiceperf-baseline names no saved run yet
STASH_LOCK = pytest.StashKey[Any]()  # the results file's WriterLock, held by the process that writes it
STASH_OTHER_DEVICE = pytest.StashKey[str]()  # the line saying how many cases of another device a profile left out


def gate_changes(config: pytest.Config) -> list[str]:
    """What software changed between the baseline and this run (old -> new), for the gate's header."""
    g = config.stash.get(STASH_GATE, None)
    vs = get_session(config)
    if g is None or vs is None:
        return []
    from .provenance import changes

    return changes(g.provenance, vs.provenance())


def user_llms(config: pytest.Config) -> dict[str, str]:
    """--voiceperf-llm and ini voiceperf_llms: name -> path. Each joins the model list of every claim
    whose model feeds an LLM probe, and names its folder as --voiceperf-model does."""
    out = {}
    for item in list(config.getini("voiceperf_llms")) + list(config.getoption("voiceperf_llm", None) or []):
        name, eq, path = item.partition("=")
        if not eq or not name.strip() or not path.strip():
            raise pytest.UsageError(f"--voiceperf-llm expects NAME=PATH, got {item!r}")
        out[name.strip()] = path.strip()
    return out


def get_session(config: pytest.Config) -> VoiceperfSession | None:
    return config.stash.get(STASH_SESSION, None)


_RESUME = pytest.StashKey[dict[str, dict[str, Any]]]()


def resumed(config) -> dict:
    """nodeid -> result of the cases an earlier (interrupted) run finished (--voiceperf-resume)."""
    path = config.getoption("voiceperf_resume", None)
    if not path:
        return {}
    if _RESUME not in config.stash:
        from . import results

        try:
            doc = results.read(path)
        except ValueError as exc:
            raise pytest.UsageError(f"--voiceperf-resume: {exc}") from None
        config.stash[_RESUME_DOC] = doc
        config.stash[_RESUME] = {r.nodeid: r.dump() for r in doc.results if r.outcome != "error"}
    return config.stash[_RESUME]


_RESUME_DOC = pytest.StashKey[Any]()


def check_resume(config, vs, claims: dict) -> list[str]:
    """The resume file must be a run of this machine and setup, and each kept case must come from
    its claim file as it is now, with a verdict its own interval gives under the claim's bounds (a
    file from another machine made a case passed with a value below its bound, nothing measured).
    A case that does not hold is measured again. Raises UsageError for another machine or setup;
    returns one line per case measured again. ``claims``: nodeid -> (claim sha, Expect)."""
    from . import provenance

    done = resumed(config)
    if not done:
        return []
    path = config.getoption("voiceperf_resume")
    doc = config.stash[_RESUME_DOC]
    bad = provenance.mismatches(doc.provenance, vs.provenance())
    if bad:
        raise pytest.UsageError(f"--voiceperf-resume {path}: a run of another machine or setup ("
                                + "; ".join(bad) + "); resume only a run that stopped here, or run without it")
    again = []
    for nid, r in list(done.items()):
        why = _kept_does_not_hold(r, claims.get(nid))
        if why:
            del done[nid]
            again.append(f"{nid}: measured again ({why})")
    return again


def _kept_does_not_hold(r: dict, claim) -> str:
    if claim is None:
        return ""  # not collected in this run: kept in the file as it was, never judged here
    sha, expect = claim
    if not r.get("claim_sha") or r["claim_sha"] != sha:
        return "its claim file changed since, or the file does not say which it ran from"
    outcome = r.get("outcome")
    if outcome not in ("passed", "failed", "xfailed", "xpassed"):
        return ""
    lo, hi = expect.bounds()
    ci = r.get("ci") or ([r["value"], r["value"]] if r.get("value") is not None else None)
    if not ci or len(ci) != 2 or any(not isinstance(x, (int, float)) for x in ci):
        return f"{outcome} without a figure"
    inside = (lo is None or ci[0] >= lo) and (hi is None or ci[1] <= hi)
    outside = (lo is not None and ci[1] < lo) or (hi is not None and ci[0] > hi)
    if outcome in ("passed", "xpassed") and not inside or outcome in ("failed", "xfailed") and not outside:
        return f"{outcome} does not follow from its interval [{ci[0]:.4g}, {ci[1]:.4g}] and the claim's bounds"
    return ""


def kept(config, state) -> list[dict]:
    """The resumed cases this run did not measure again (they go into its results file)."""
    ran = {r.get("nodeid") for r in state.results.values()}
    return [dict(r, resumed=True) for n, r in resumed(config).items() if n not in ran]


def write_results(config, complete: bool) -> dict | None:
    """The results document; written to --voiceperf-json (PATH.partial while the run is not complete;
    a complete run removes the partial file it wrote on the way)."""
    state = config.stash.get(STASH_STATE, None)
    vs = get_session(config)
    if state is None or vs is None:  # vs is None: sessionstart stopped on a usage error, nothing measured
        return None
    from . import results

    vs.complete = complete
    doc = results.document(vs, kept(config, state) + list(state.results.values()), config)
    if resumed(config):
        doc["provenance"]["resumed_from"] = config.getoption("voiceperf_resume")
    g = config.stash.get(STASH_GATE, None)
    if g is not None:
        doc["provenance"]["gate"] = g.to_json(gate_changes(config))
    elif STASH_NO_BASELINE in config.stash:
        doc["provenance"]["gate"] = {"baseline": None, "notice": config.stash[STASH_NO_BASELINE]}
    path = config.getoption("voiceperf_json")
    if path:
        results.write(path, doc)
        partial = Path(str(path) + ".partial")
        if complete and partial.exists():
            partial.unlink()
    return doc


def benchmark_json(config, output_json: dict) -> None:
    """pytest-benchmark in the same session writes its JSON (``--benchmark-json``, ``--benchmark-autosave``):
    voiceperf's figures join its ``benchmarks`` as ``voiceperf export --format pytest-benchmark`` writes them
    (durations over the rounds; the figures that are not a time or a rate listed under ``voiceperf.left_out``)."""
    state = config.stash.get(STASH_STATE, None)
    vs = get_session(config)
    if state is None or vs is None or hasattr(config, "workerinput"):
        return
    from . import exports, results
    from .record import results_file

    doc = results.document(vs, kept(config, state) + list(state.results.values()), config)
    data, left_out = exports.pytest_benchmark(results_file(doc))
    output_json.setdefault("benchmarks", []).extend(data["benchmarks"])
    output_json["voiceperf"] = {"benchmarks": len(data["benchmarks"]), "left_out": left_out}
