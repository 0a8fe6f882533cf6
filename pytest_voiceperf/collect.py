"""Claim files become pytest items: ``pytest.File`` -> one ``pytest.Item`` per case."""
from __future__ import annotations

import os

import pytest

from . import expr
from .claims import Case, Claim, ClaimError, load_claim
from .exceptions import EngineError, Unmeasured, VerdictFailed
from .record import ResultRecord
from .state import user_llms
from .verdict import fmt_value


def _state(config):
    from .state import STASH_STATE

    return config.stash[STASH_STATE]


class ClaimFile(pytest.File):
    def collect(self):
        state = _state(self.config)
        # a conftest.py beside the claims can add probes (loaded before this file is collected)
        self.ihook.pytest_voiceperf_add_probes(registry=state.registry)
        try:
            claim = load_claim(self.path, state.registry, self.config.rootpath)
        except ClaimError as err:
            err.path = self.nodeid  # the path as the user typed it, relative to rootdir
            yield InvalidClaimItem.from_parent(self, name=self.path.stem, error=err)
            return
        first = state.ids.get(claim.id)
        if first is not None:
            dup = ClaimError(self.nodeid, claim.line("id"),
                             f"duplicate claim id {claim.id!r}: it is already defined at {first}; give this one another id")
            yield InvalidClaimItem.from_parent(self, name=claim.id, error=dup)
            return
        state.ids[claim.id] = f"{self.nodeid}:{claim.line('id')}"
        for case in claim.cases(tuple(user_llms(self.config))):
            yield ClaimItem.from_parent(self, name=case.name, claim=claim, case=case)


def _nested_instance(registry, call, which: str) -> str:
    """The engine instance of the nested call (``which``: ``sorts_with`` or ``ends_with``) that an
    engine-less probe declares for ``call``, "" where it declares none."""
    spec = registry.get(call.probe)
    nested = getattr(spec, which, None) if spec is not None and not spec.engine else None
    if nested is None:
        return ""
    try:
        name, args = nested({**spec.params, **call.args})
        inner = registry.get(name)
        return (inner.instance(args) or "") if inner is not None and inner.engine else ""
    except Exception:  # the probe reports its bad arguments when it runs
        return ""


def _family(probe_name: str) -> str:
    return probe_name.split(".", 1)[0]


class ClaimItem(pytest.Item):
    def __init__(self, *, claim: Claim, case: Case, **kw):
        super().__init__(**kw)
        self.claim = claim
        self.case = case
        self.line = claim.line("id")
        self.result = ResultRecord(claim=claim.id, nodeid=self.nodeid, outcome="unmeasured", rounds=0,
                                   params=dict(case.params), path=str(claim.path), line=self.line,
                                   claim_sha=claim.sha)
        families = {_family(c.probe) for c in claim.calls}
        from .state import FAMILY_MARKS

        for fam in families & set(FAMILY_MARKS):
            self.add_marker(fam)
        self.add_marker("voiceperf")
        for m in claim.model.marks:
            self.add_marker(m)
        # a claim mistake found here (an xfail or profile condition that cannot be evaluated, an
        # engine_key that fails) makes this case an error naming file:line, never a silent default
        self.problem: str | None = None
        self._verdict: BaseException | None = None  # how the measurement in setup() ended, raised by runtest()
        xf = claim.model.xfail
        self.xfail_reason = None
        if xf is not None:
            when = True
            if xf.when:
                try:
                    when = bool(expr.evaluate(xf.when, self._names()))
                except expr.ExprError as exc:
                    when = False
                    self.problem = (f"{self._at('xfail', 'when')}: xfail when {xf.when!r} cannot be evaluated for "
                                    f"{dict(case.params)}: {exc}; it may use the claim's params, device and profile")
            if when:
                self.xfail_reason = xf.reason
                self.add_marker(pytest.mark.xfail(reason=xf.reason, strict=xf.strict, raises=VerdictFailed))
        self.engine_key = self._engine_key()
        self.leaves_live = self._nested_key("ends_with")

    def _names(self, device: str = "cpu", profile: str = "cpu") -> dict:
        return self.case.names(device, profile)

    def _nested_key(self, which: str) -> str:
        """The engine instance of a nested call an engine-less probe declares (``sorts_with``: the one
        its cases sort with; ``ends_with``: the one it leaves live), "" where none."""
        state = _state(self.config)
        for call in self.case.calls():
            key = _nested_instance(state.registry, call, which)
            if key:
                return key
        return ""

    def _engine_key(self) -> str:
        """Cases measured by the same engine and model sort together (and share an xdist group)."""
        state = _state(self.config)
        for call in self.case.calls():
            spec = state.registry.get(call.probe)
            key = _nested_instance(state.registry, call, "sorts_with")
            if key:
                return key
            if spec is not None and spec.engine:
                try:
                    return spec.instance(call.args) or ""
                except Exception as exc:
                    self.problem = self.problem or (
                        f"{self._at('measure')}: probe {call.probe} cannot name the engine for arguments "
                        f"{call.args}: {type(exc).__name__}: {exc}; check the argument types")
                    return f"{spec.engine}:{call.args.get('model', '')}"
        return ""

    def in_profile(self, profile: str, device: str) -> bool:
        try:
            return self.case.in_profile(profile, device)
        except expr.ExprError as exc:  # kept, and an error that says why (never silently in or out)
            cond = self.claim.model.profiles.get(profile)
            self.problem = self.problem or (f"{self._at('profiles', profile)}: profiles.{profile} {cond!r} cannot be "
                                            f"evaluated for {dict(self.case.params)}: {exc}")
            return True

    def _at(self, *keys: str) -> str:
        return f"{self.nodeid.split('::')[0]}:{self.claim.line(*keys)}"

    def location_str(self) -> str:
        return f"{self.nodeid.split('::')[0]}:{self.line}"

    def setup(self):
        """Measure the case. The measurement is the case's fixture: an engine that fails here (start,
        crash, out of memory, time limit) is a setup error, as JUnit and pytest report an error; a
        verdict (passed, failed, unmeasured) is raised by the call."""
        from .state import get_session

        if self.problem:
            raise EngineError(self.problem)  # a mistake in the claim file: an error, not a verdict
        vs = get_session(self.config)
        try:
            vs.run_case(self.case, self.result)
        except EngineError:
            raise
        except Exception as exc:  # Unmeasured, VerdictFailed: the call phase reports them
            self._verdict = exc
        finally:
            self.result.worker = vs.worker
            self.result.gpu = os.environ.get("VOICEPERF_GPU") or os.environ.get("CUDA_VISIBLE_DEVICES")
            self._set_properties()

    def runtest(self):
        if self._verdict is not None:
            raise self._verdict

    def _set_properties(self):
        r = self.result
        if r.value is not None:
            self.user_properties.append(("value", r.value))
            self.user_properties.append(("unit", r.unit))

    def repr_failure(self, excinfo):
        exc = excinfo.value
        r = self.result
        head = f"{self.location_str()}: claim {self.claim.id}"
        if self.case.ident:
            head += f" [{self.case.ident}]"
        lines = [head, f"  statement: {self.claim.model.statement}"]
        if isinstance(exc, VerdictFailed):
            lines.append(f"  measured:  {fmt_value(r.value, r.unit)}" + _spread_text(r))
            lines.append(f"  expected:  {r.expect}" + (f"   margin {r.margin * 100:+.1f}%" if r.margin is not None else ""))
            lines.append(f"  failed:    {exc}")
        elif isinstance(exc, EngineError):
            lines.append(f"  engine error: {exc}")
            if exc.log_tail:
                lines.append("  engine's last log lines:")
                lines.extend("    " + ln for ln in exc.log_tail.splitlines()[-15:])
        elif isinstance(exc, Unmeasured):
            lines.append(f"  unmeasured: {exc}")
        else:
            if self.config.getoption("verbose") > 1 or not isinstance(exc, (AssertionError,)):
                return super().repr_failure(excinfo)
            lines.append(f"  {exc}")
        if r.reference:
            lines.append(f"  reference: {_ref_text(r.reference)}")
        for alias, p in r.probes.items():
            vals = ", ".join(f"{k}={v:.4g}" if isinstance(v, (int, float)) else f"{k}={v}" for k, v in p.values.items())
            lines.append(f"  {alias} = {p.probe}({_args(p.args)}): {vals}")
        return "\n".join(lines)

    def reportinfo(self):
        return self.path, self.line - 1, f"claim {self.name}"


def _args(args: dict) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in args.items())


def _spread_text(r: ResultRecord) -> str:
    if r.spread:
        # the spread is of the repetitions (all rounds); the interval that decides is of the rounds
        return (f"  (IQR of {len(r.rep_samples)} repetitions {fmt_value(r.spread[0], r.unit)} .. "
                f"{fmt_value(r.spread[1], r.unit)}; interval over {r.rounds} rounds)")
    return ""


def _ref_text(ref: dict) -> str:
    return "; ".join(f"{k}: {v}" for k, v in ref.items())


class InvalidClaimItem(pytest.Item):
    """A claim file that cannot be used: one item whose verdict is ``error`` with file:line."""

    def __init__(self, *, error: ClaimError, **kw):
        super().__init__(**kw)
        self.error = error
        self.line = error.line or 1
        self.xfail_reason = None
        self.result = ResultRecord(claim=self.name, nodeid=self.nodeid, outcome="unmeasured", rounds=0,
                                   path=error.path, line=self.line)
        self.add_marker("voiceperf")

    def setup(self):
        raise EngineError(self.error.render())  # an error (file:line: what is wrong), not a verdict

    def runtest(self):
        raise self.error

    def repr_failure(self, excinfo):
        return f"invalid claim file: {self.error.render()}"

    def location_str(self) -> str:
        return f"{self.error.path}:{self.line}"

    def reportinfo(self):
        return self.path, self.line - 1, f"invalid claim file {self.path.name}"


def live_engine_next(items: list) -> None:
    """Items sorted by engine: after a group whose last case leaves another engine live (a pipeline case
    ends on its TTS stage), that engine's group runs next instead of in its sorted place."""
    groups: dict[str, list] = {}
    for it in items:
        groups.setdefault(getattr(it, "engine_key", "") or "", []).append(it)
    out: list = []
    placed: set[str] = set()
    for start in groups:
        key: str | None = start
        while key is not None and key in groups and key not in placed:
            placed.add(key)
            out.extend(groups[key])
            key = getattr(groups[key][-1], "leaves_live", "") or None
    items[:] = out
