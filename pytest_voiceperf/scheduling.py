"""Which rounds a case uses and in which order they are taken: groups of cases sharing an engine's
rounds, blocks per engine instance, the live engine first."""
from __future__ import annotations

import time

from .context import ProbeContext, SessionBase
from .engines import is_light
from .exceptions import EngineError, Unmeasured
from .probes import Measurement


class Scheduling(SessionBase):
    """VoiceperfSession's plan of the run's rounds."""

    def plan(self, cases) -> None:
        """Rounds taken together for the cases that pair probes on one engine.

        A case pairing timed probes uses only rounds taken together (see _rounds_used), so each case
        that paired a shared probe with another one took rounds of it again (CPU default: ten such
        cases; sharing brought its 14 vLLM cases from 265 s to 195-220 s). Here the cases to run
        are grouped by the one heavy engine their timed probes need, and the first case of a group
        takes ``min_rounds`` rounds of every probe of the group's pairing cases, interleaved round
        by round (the engine live the whole time); every case of the group then uses those rounds,
        and takes further rounds only where its interval straddles its bound, of its own probes,
        together. A group is worth it when two or more cases use its probes and one of them pairs."""
        self._groups.clear()
        self._group_of.clear()
        if self.device == "cuda-missing":
            return
        from .claims import _substitute

        uses: dict[str, list[tuple[int, dict[str, tuple[str, dict]]]]] = {}  # engine -> (case, its timed calls)
        for case in cases:
            claim = case.claim.model
            try:
                if any(self.requirement_unmet(_substitute(req, case.params)) for req in claim.requires):
                    continue
                calls = case.calls()
                if self._exact_metric(claim.metric, calls):
                    continue
                reads_timed = self._timed_aliases(claim.metric, calls)
                timed = [c for c in calls if c.alias in reads_timed]
                heavy = set()
                for c in timed:
                    spec = self.registry.get(c.probe)
                    if spec is None or self._nested_engine(spec):
                        raise LookupError(c.probe)
                    inst = self._instance(c)
                    if inst is not None:
                        heavy.add(inst)
            except Exception:  # the case reports what is wrong when it runs
                continue
            if len(heavy) != 1:
                continue
            uses.setdefault(heavy.pop(), []).append((id(case), {self._key(c.probe, c.args): (c.probe, c.args)
                                                                 for c in timed}))
        for key, cs in uses.items():
            # the probes of the cases that pair: a probe only single-probe cases read needs no rounds
            # taken beside others (new ones would be measured again where it already had rounds)
            members: dict[str, tuple[str, dict, set[int]]] = {}
            for _, calls_of in cs:
                if len(calls_of) >= 2:
                    for ck, (probe, args) in calls_of.items():
                        members.setdefault(ck, (probe, args, set()))
            for cid, calls_of in cs:
                for ck in calls_of.keys() & members.keys():
                    members[ck][2].add(cid)
            users = {cid for cid, calls_of in cs if calls_of.keys() & members.keys()}
            if len(users) >= 2 and len(members) >= 2:
                self._groups[key] = members
                self._group_of.update({c: key for c in users})

    def _take_group(self, key: str, case, calls) -> dict:
        """The group's first rounds (see plan()): round r of each of its probes before round r+1 of any.
        A probe that cannot run here ends the group's rounds of its cases, not the group, and its
        cases say why (this case too: it was the crossover sweep's, the first case on the CPU, which
        had ended the group and left every other case to take its own rounds); an engine failing in
        one of this case's probes ends this case as it would alone. When no case left pairs two of
        the probes still taken, the group stops: the rest take rounds case by case, reusing earlier
        ones (on the CPU the NeMo group, paired only by asr-cpp-port-speedup's absent parakeet.cpp,
        took three new rounds of streams whose first rounds the FLOP-counting cases had taken)."""
        members = self._groups.pop(key)
        own = {self._key(c.probe, c.args) for c in calls}
        # probes of fewer cases first (a case's own probe before those it shares): a probe that cannot
        # run here ends its cases, and the probes only they use are left out before they are measured
        # (on the CPU the NeMo streams of asr-cpp-port-speedup, whose parakeet.cpp is absent: 24 s)
        live = dict(sorted(members.items(), key=lambda kv: len(kv[1][2])))
        ended: set[int] = set()
        keys_of: dict[int, set[str]] = {}
        for ck, (_, _, users) in members.items():
            for c in users:
                keys_of.setdefault(c, set()).add(ck)

        def pairing() -> bool:  # a case left that pairs two probes still taken: else each case alone
            return any(c not in ended and len(ks & live.keys()) >= 2 for c, ks in keys_of.items())
        n = self.options.min_rounds
        n_cases = len({c for _, _, cs in members.values() for c in cs})
        self.progress(f"{case.name}: rounds 1-{n} of {len(members)} probes on {key} shared by "
                      f"{n_cases} cases, taken together")
        t0 = time.monotonic()
        stopped = False
        self._case_serial += 1
        tag = f"group {self._case_serial}"
        try:
            for r in range(n):
                if stopped:
                    break
                self._case_round = (tag, r)
                for ck, (probe, args, users) in list(live.items()):
                    if not pairing():
                        stopped = True  # the cases left take their own rounds (single probes reuse any)
                        break
                    if ck not in live:
                        continue
                    ctx = ProbeContext(self, time.monotonic() + self.options.timeout)
                    try:
                        pr = self._probed(probe, args)
                        # a round of it may exist with this tag already: another member of the group
                        # reads it nested (llm.crossover's llm.batch) and took it in its own round
                        if pr.rounds and (pr.deterministic or self._case_round in pr.taken_in):
                            continue
                        self.measure_round(probe, args, ctx, len(pr.rounds))
                    except (EngineError, Unmeasured) as exc:
                        if ck in own and isinstance(exc, EngineError):
                            raise
                        ended |= users
                        for k in [k for k, (_, _, cs) in live.items() if cs <= ended]:
                            del live[k]
        finally:
            self._case_round = None
        return {"engine": key, "rounds": n, "probes": len(members), "cases": n_cases,
                "probes_left_out": len(members) - len(live), "stopped": stopped,
                "seconds": round(time.monotonic() - t0, 3)}

    def _blocks(self, order: list, name: str, live_first: bool = True) -> list[list]:
        """The case's calls grouped by when their rounds are taken: all in one block (interleaved,
        round by round) when they need no more engines than may be live at once; otherwise one block
        per engine, each taking all its rounds before the next engine starts (in-process probes in
        the first). Interleaved, each round would start every engine again: on the H200 the bf16 and
        FP8 engines of `llm-precision-speedup` started 6-8 times per case (100-144 s against 37-47 s).
        The rounds of one case are still paired round by round, taken minutes apart at most."""
        groups: dict[str | None, list] = {}
        for c in order:
            try:
                inst = self._instance(c)
            except Exception:  # the probe reports its bad arguments when it runs
                inst = None
            groups.setdefault(inst, []).append(c)
        heavy = [k for k in groups if k is not None]
        live = max(1, self.options.max_live_engines)
        if len(heavy) <= live:
            return [order]
        # the engine live now takes its rounds first (``live_first``: unless a probe known not to run
        # here leads, which ends the case before anything is measured): starting the other engine
        # first, then coming back to this one for the cases after, started each of
        # llm-precision-speedup's bf16 and FP8 engines twice on the GPU (4 extra vLLM starts, ~25 s each)
        if live_first and self.last_heavy in heavy:
            heavy.remove(self.last_heavy)
            heavy.insert(0, self.last_heavy)
        blocks = [list(groups[k]) for k in heavy]
        blocks[0][:0] = groups.get(None, [])
        self.progress(f"{name}: rounds taken one engine at a time ({len(heavy)} engines, {live} live at once)")
        return blocks

    def _instance(self, call) -> str | None:
        """The heavy engine instance the call needs; None for in-process probes and light engines
        (which stay live beside the others)."""
        spec = self.registry.get(call.probe)
        inst = spec.instance(call.args) if spec is not None else None
        if inst is not None and is_light(inst.split(":", 1)[0]):
            return None
        return inst

    def _rounds_used(self, claim, calls, name: str) -> dict[str, list[int] | None]:
        """Which rounds of each probe the case's rounds use: None, round r of the probe (it pairs with
        any round); a list, the indices of its rounds the case's first rounds use, and each round
        beyond the list a new round taken for the case (appended by _round_of).

        A metric that combines timed figures of several probes pairs their rounds; a shared probe's
        earlier rounds were taken beside other probes, maybe minutes before (a CPU decode 14% faster
        then than the case's own decode a minute later, all rounds alike: a tight interval and a
        verdict the next run reversed). So such a case reuses earlier rounds only when they were
        taken together, round by round (the same rounds of one earlier case, or of the rounds taken
        for a group of cases, see plan()); otherwise it takes its own rounds of every timed probe,
        interleaved. Outputs declared exact (counts) and probes without samples pair with any round."""
        at: dict[str, list[int] | None] = {c.alias: None for c in calls}
        if any(isinstance(self._cache.get(self._key(c.probe, c.args)), Unmeasured) for c in calls):
            return at  # the case ends at that probe
        reads_timed = self._timed_aliases(claim.metric, calls)
        timed = []
        for c in calls:
            if c.alias not in reads_timed:
                continue
            pr = self.probed(c.probe, c.args)
            if pr is not None and pr.rounds and pr.deterministic:
                continue
            timed.append((c.alias, pr))
        held = [(a, pr) for a, pr in timed if pr is not None and pr.rounds]
        if len(timed) < 2 or not held:
            return at
        for a, _ in timed:
            at[a] = []
        if len(held) == len(timed):
            # a tag can mark several rounds of a probe (an engine probe nested in another probe's
            # round takes its first rounds in a row under that round's tag): each common tag pairs
            # the last round of each probe with it, never one round twice (the CPU batch16 case
            # used the same batch round three times, an interval of zero width)
            common = list(dict.fromkeys(t for t in held[0][1].taken_in
                                        if t is not None and all(t in pr.taken_in for _, pr in held[1:])))
            if common:  # taken together: the case goes on from their common rounds
                for a, pr in held:
                    last = {t: i for i, t in enumerate(pr.taken_in)}
                    at[a] = [last[t] for t in common]
                return at
        self.progress(f"{name}: new rounds of {', '.join(a for a, _ in held)} beside the case's other probes "
                      "(their earlier rounds were taken with other probes)")
        return at

    def _round_of(self, call, at: dict[str, list[int] | None], r: int, ctx: ProbeContext) -> Measurement:
        """The case's round r of the call (see _rounds_used), taken when it does not exist yet."""
        used = at[call.alias]
        if used is None:
            return self.measure_round(call.probe, call.args, ctx, r)
        pr = self._probed(call.probe, call.args)
        if r < len(used):
            return pr.rounds[used[r]]
        m = self.measure_round(call.probe, call.args, ctx, len(pr.rounds))
        used.append(len(pr.rounds) - 1)
        return m
