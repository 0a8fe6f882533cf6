"""The voiceperf session: probes measured once and shared, ceilings, engines, results."""
from __future__ import annotations

import math
import tempfile
import time

from . import expr, provenance, stats, timing, verdict
from .ceilings import Ceilings
from .claims import Case
from .context import ProbeContext, SessionBase
from .engines import interpreters
from .exceptions import EngineError, Unmeasured
from .record import ProbeRecord, ResultRecord
from .rounds import Rounds
from .scheduling import Scheduling


class VoiceperfSession(Rounds, Scheduling, Ceilings, SessionBase):
    """Created in ``pytest_sessionstart``; one per pytest process (xdist: one per worker)."""


    # -- cases ---------------------------------------------------------------------------
    def requirement_unmet(self, req: str) -> str | None:
        if req == "cuda":
            return None if self.device == "cuda" else "no CUDA device (this run is on the CPU)"
        if req == "cpu":
            return None if self.device == "cpu" else "runs on the CPU only (this run uses CUDA)"
        if req.startswith("gpus>="):
            n = int(req[6:])
            have = 0
            if self.device == "cuda":
                import torch

                have = torch.cuda.device_count()
            return None if have >= n else f"needs {n} GPUs, this worker has {have}"
        if req.startswith("module:"):
            mod = req[7:]
            return None if interpreters.module_present_anywhere(mod) else f"module {mod!r} is not installed"
        if req.startswith("weights:"):
            name = req[8:]
            return None if name in self.options.model_overrides else (
                f"trained weights absent for {name!r} (dummy weights cannot give this figure); "
                f"give them with --voiceperf-model {name}=PATH")
        if req.startswith("data:"):
            name = req[5:]
            return None if name in self.options.data else f"needs data set {name!r}; give it with --voiceperf-data {name}=PATH"
        return f"unknown requirement {req!r}"

    def run_case(self, case: Case, result: ResultRecord) -> None:
        """Measure one case; fill ``result``; raise Unmeasured / VerdictFailed / EngineError."""
        claim = case.claim.model
        result.unit = claim.unit
        result.expect = claim.expect.describe()
        result.bounds = list(claim.expect.bounds())
        result.reference = claim.reference.model_dump(exclude_none=True) if claim.reference else None
        result.kind = claim.kind
        result.tolerance = claim.tolerance
        lo, hi = claim.expect.bounds()
        result.higher_is_better = claim.higher_is_better if claim.higher_is_better is not None else (
            True if (lo is not None and hi is None) else False if (hi is not None and lo is None) else None)
        if self.device == "cuda-missing":
            raise Unmeasured("--voiceperf-device cuda was asked for, but no CUDA device is present")
        from .claims import _substitute

        for req in claim.requires:
            why = self.requirement_unmet(_substitute(req, case.params))
            if why:
                raise Unmeasured(why)
        # a claim's own timeout stands in for the default; a limit the operator set is a cap it cannot raise
        limit = min(claim.timeout or self.options.timeout, self.options.timeout_cap or math.inf)
        deadline = time.monotonic() + limit
        ctx = ProbeContext(self, deadline)
        calls = case.calls()
        names = dict(case.params)
        names.update(device=self.device, profile=self.profile)
        rc = claim.rounds
        n_min = rc.min or self.options.min_rounds
        n_max = max(n_min, rc.max or self.options.max_rounds)
        if self.options.save_min_rounds and not rc.min:
            # a saved run is a baseline: its rounds bound what any later run can decide against it
            # (3 baseline rounds leave the Welch interval a t quantile of 2 degrees of freedom)
            n_min = max(n_min, self.options.save_min_rounds)
            n_max = max(n_max, n_min)
        exact = self._exact_metric(claim.metric, calls)
        if exact:  # counts, not timings: one round decides
            n_min = n_max = 1
        budget = rc.seconds or self.options.round_seconds
        started = time.monotonic()
        n = n_min
        futility = ""
        group = self._group_of.get(id(case))
        if group in self._groups:
            result.shared_rounds = self._take_group(group, case, calls)
            started = time.monotonic()  # the case's round budget counts its own rounds
        self._case_serial += 1
        at = self._rounds_used(claim, calls, case.name)
        # a probe known not to run here first, then probes new to the case: one that cannot run here
        # ends it before shared ones run again
        held = {c.alias for c in calls if (pr := self.probed(c.probe, c.args)) is not None and pr.rounds}
        known = {c.alias for c in calls if isinstance(self._cache.get(self._key(c.probe, c.args)), Unmeasured)}
        blocks = self._blocks(sorted(calls, key=lambda c: (c.alias not in known, c.alias in held)), case.name,
                              live_first=not known)
        try:
            while True:
                # round-major within a block: round r of each of its probes before round r+1 of any.
                # Blocks (engines) run forth, then back for the next extra round, and so on: the
                # engine live after the last block's rounds takes the new round first, one start
                # fewer per extra round (llm-decode-overhead's three llama.cpp engines: 2 starts, not 3)
                for block in (blocks if (n - n_min) % 2 == 0 else blocks[::-1]):
                    for r in range(n):
                        self._case_round = (self._case_serial, r)
                        for call in block:
                            self._round_of(call, at, r, ctx)
                            if time.monotonic() > deadline:
                                raise EngineError(f"the claim's time limit of {limit:.0f}s "
                                                  "was hit")
                ev = self._evaluate(claim, calls, names, n, exact, at)
                undecided = ev["decision"] == "inconclusive" and not ev["deterministic"]
                # with a baseline, rounds also go on until each figure the gate compares is decided
                waiting = [] if ev["deterministic"] else self._gate_pending(calls, result, at, n, ev)
                if not undecided and not waiting:
                    break
                spent = time.monotonic() - started
                cap = n_max if not waiting else max(n_max, self.options.gate_max_rounds)
                limit = budget if not waiting else max(budget, self.options.gate_round_seconds)
                if n >= cap or spent > limit or time.monotonic() + spent / n > deadline:
                    break
                if undecided and not waiting:
                    hopeless = stats.futile(ev["round_values"], *claim.expect.bounds(), n_max, self._floor(claim))
                    if hopeless is not None:
                        futility = (f"; more rounds would not decide it: {n_max} rounds with this mean and spread "
                                    f"would still give {verdict.fmt_ci(hopeless, claim.unit)}")
                        break
                if undecided and n < n_max:
                    self.progress(f"{case.claim.id}: " + ("one round decides nothing" if ev["one_round"]
                                                          else f"interval {verdict.fmt_ci(ev['ci'], claim.unit)} straddles "
                                                               f"{claim.expect.describe()} after {n} rounds")
                                  + "; one more round")
                else:
                    self.progress(f"{case.claim.id}: against the baseline {', '.join(waiting)} undecided after "
                                  f"{n} rounds; one more round")
                n += 1
        finally:
            self._case_round = None
            self._record_probes(calls, result, at, n)
        verdict.conclude(result, claim, ev, n_min=n_min, n_max=n_max, budget=budget,
                         elapsed=time.monotonic() - started, futility=futility, noise_floor=self.options.noise_floor)

    def _gate_pending(self, calls, result: ResultRecord, at, n: int, ev: dict) -> list[str]:
        """The figures the baseline gate still cannot decide for this case after n rounds (a look at a
        copy of the result: nothing is recorded)."""
        if self.gate is None or self.gate.by_nodeid.get(result.nodeid) is None:
            return []
        look = result.model_copy(update={"probes": {}, "disturbed": []})
        self._record_probes(calls, look, at, n)
        verdict.fill(look, ev)
        look.outcome = "passed"
        return self.gate.pending(look)


    def _record_probes(self, calls, result: ResultRecord, at: dict[str, list[int] | None], n: int) -> None:
        for call in calls:
            pr = self.probed(call.probe, call.args)
            if pr is None:
                continue
            spec = self.registry.get(call.probe)
            result.disturbed = result.disturbed + [c for d in pr.dropped for c in d["disturbed"]
                                                   if c not in result.disturbed]
            if not pr.rounds:
                continue
            m = pr.aggregate()
            used = at.get(call.alias)
            reads = self._reads_of(pr)
            ceilings_read = self._ceilings_read(reads)
            result.probes[call.alias] = ProbeRecord(
                probe=call.probe, args=call.args, call=self._key(call.probe, call.args), values=m.values,
                samples=m.rounds, info=dict(m.info, ceilings_read=ceilings_read) if ceilings_read else m.info,
                units=dict(spec.outputs) if spec else {}, exact=sorted(spec.exact) if spec else [], reads=reads,
                first_round=used[0] if used else 0,
                rounds_used=used if used is not None else list(range(min(n, len(pr.rounds)))))
            if spec is not None and spec.engine:
                result.engine_instances = 1  # rounds reuse the session's engine instance


    def _floor(self, claim) -> float:
        """The claim's run-to-run floor of a timed figure's interval (relative), else the session's."""
        return claim.rounds.floor if claim.rounds.floor is not None else self.options.noise_floor

    def _timed_aliases(self, metric: str, calls) -> set[str]:
        """The calls whose outputs the metric reads include one not declared exact (a timing)."""
        exact = {c.alias: (spec.exact if (spec := self.registry.get(c.probe)) else frozenset()) for c in calls}
        return {a for a, out in expr.references(metric) if out not in exact.get(a, frozenset())}

    def _exact_metric(self, metric: str, calls) -> bool:
        """True when the metric reads only outputs its probes declare exact (counts of a deterministic
        computation: frames, FLOPs, bytes, calls)."""
        return bool(expr.references(metric)) and not self._timed_aliases(metric, calls)

    def _evaluate(self, claim, calls, names: dict, n: int, exact: bool, at: dict[str, list[int] | None]) -> dict:
        """The metric per round, its interval and the decision against the expectation."""
        probed = [(c.alias, self._probed(c.probe, c.args)) for c in calls]
        det = exact or all(pr.deterministic for _, pr in probed)
        rounds = 1 if det else n
        values, reps = [], []
        ms: dict = {}
        for r in range(rounds):
            ms = {}
            for a, pr in probed:
                used = at.get(a)
                ms[a] = pr.rounds[used[r] if used and r < len(used) else min(r, len(pr.rounds) - 1)]
            outs = {a: m.values for a, m in ms.items()}
            samp = {a: m.repetitions for a, m in ms.items()}
            values.append(verdict.metric_value(claim.metric, names, outs))
            reps += verdict.metric_samples(claim.metric, names, outs, samp)
        # one round (a search): the probes' own brackets, where they give them
        bracket = verdict.bracket_of(claim.metric, names, ms) if det and not exact else None
        return verdict.interval_verdict(values, reps, deterministic=det, exact=exact, bracket=bracket,
                                        floor=self._floor(claim), bounds=claim.expect.bounds())

    # -- provenance and output -----------------------------------------------------------
    def progress(self, msg: str) -> None:
        """A progress line in the terminal, also while a test's output is being captured."""
        tr = self.reporter
        if tr is None or getattr(tr, "_vp_quiet", False):
            return
        capman = tr.config.pluginmanager.getplugin("capturemanager")
        if capman is not None:
            with capman.global_and_fixture_disabled():
                tr.write_line(f"  [voiceperf] {msg}")
        else:
            tr.write_line(f"  [voiceperf] {msg}")


    def provenance(self) -> dict:
        return provenance.build(self)

    def timing_json(self) -> dict:
        """Where the time went so far (the xdist controller adds its workers' tables)."""
        own = self.timing.to_json(time.time() - self.started)
        return timing.merge([own] + self.worker_timing) if self.worker_timing else own

    def end(self) -> None:
        """The machine's state at the end (before the results file is written)."""
        self.env_end = provenance.environment(self.device)

    def scratch(self) -> str:
        """A folder for files engines hand each other (e.g. a model written by one engine and loaded by
        another), which outlives any one engine and is removed with the session."""
        if self._scratch is None:
            self._scratch = tempfile.mkdtemp(prefix="voiceperf-scratch-")
        return self._scratch

    def close(self, interrupted: bool = False) -> None:
        if self.env_end is None:
            self.end()
        self.engines.close_all(interrupted=interrupted)
        if self._scratch:
            import shutil

            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None


