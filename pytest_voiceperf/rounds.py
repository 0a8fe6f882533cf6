"""The rounds of a probe call: taken, watched for disturbance, dropped, remembered, aggregated."""
from __future__ import annotations

import contextlib
import time

from . import timing
from .context import ProbeContext, SessionBase, _instance_of
from .engines import fresh_rounds, is_light
from .exceptions import EngineError, InvalidMeasurement, TimeLimit, Unmeasured
from .probed import Aggregate, Probed
from .probes import Measurement, call_key


@contextlib.contextmanager
def time_limit(seconds: float):
    """Stop the code inside after ``seconds`` (SIGALRM; the main thread only, and only where no
    other handler, such as pytest-timeout's, holds the signal). An in-process probe with an absurd
    argument from a claim file ran on past its claim's timeout."""
    import signal
    import threading

    if (not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGALRM) not in (signal.SIG_DFL, signal.SIG_IGN, None)):
        yield
        return

    def fire(signum, frame):
        raise TimeLimit()

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, max(0.01, seconds))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)




class Rounds(SessionBase):
    """VoiceperfSession's probe calls and their rounds (one Probed per call, shared by the claims)."""

    # -- probes ----------------------------------------------------------------------------
    def measure(self, name: str, args: dict, ctx: ProbeContext) -> Aggregate:
        """The probe's figure over the rounds taken so far (at least one): medians of round figures."""
        pr = self._probed(name, args)
        if not pr.rounds:
            self.measure_round(name, args, ctx, 0)
        return pr.aggregate()

    def _key(self, name: str, args: dict | None) -> str:
        """A probe call's cache key with the probe's defaults filled in: claims that spell a default
        out and claims that leave it off share one call (VoxCPM synthesis ran twice over)."""
        spec = self.registry.get(name)
        return call_key(name, {**spec.params, **(args or {})} if spec else args)

    def probed(self, name: str, args: dict) -> Probed | None:
        hit = self._cache.get(self._key(name, args))
        return hit if isinstance(hit, Probed) else None

    def _probed(self, name: str, args: dict) -> Probed:
        key = self._key(name, args)
        hit = self._cache.get(key)
        if isinstance(hit, Unmeasured):
            raise hit
        if isinstance(hit, Probed):
            return hit
        if self.registry.get(name) is None:
            raise Unmeasured(f"unknown probe {name!r}")
        pr = self._cache[key] = Probed(name, args)
        return pr

    def remember(self, store: str, key, fn):
        """``fn()`` once per ``(store, key)`` for the session: probes share engine results through it
        (a figure asked for with other spellings of its arguments). Each entry is tagged with the
        round that made it, and a dropped (disturbed) round forgets what it made."""
        memo = self._memo.setdefault(store, {})
        if key not in memo:
            memo[key] = (self.round_serial, fn())
        return memo[key][1]

    def remembers(self, store: str, key) -> bool:
        return key in self._memo.get(store, {})

    def forget_round(self, serial: int) -> None:
        for memo in self._memo.values():
            for k in [k for k, (made_by, _) in memo.items() if made_by == serial]:
                del memo[k]

    def measure_round(self, name: str, args: dict, ctx: ProbeContext, r: int) -> Measurement:
        """Round ``r`` of the probe (taking rounds until it exists; disturbed rounds are dropped and
        taken again, ``disturbed_drops`` in a row at most, then again after a wait for a quiet machine).
        A probe whose figures do not vary between repetitions (counts, datasheet figures) has one
        round, which stands for every round."""
        pr = self._probed(name, args)
        spec = self.registry.get(name)
        while len(pr.rounds) <= r and not (pr.rounds and pr.deterministic):
            # ``disturbed_drops`` rounds dropped in a row: the machine is disturbed now. Counted in a row, not
            # over the probe's life: a probe shared by several cases and paired again and again takes
            # many rounds, and three drops spread over a long run (the H100's hypervisor stealing 0.25-0.32
            # cores now and then) voided llm-precision-speedup[qwen3-4b] with 5 clean rounds in hand
            if pr.dropped_in_a_row >= self.options.disturbed_drops:
                # decide rather than give up: a load that comes and goes (a minute of another job) is
                # waited out once per probe call, then its rounds are taken again
                if not pr.waited_quiet and self.options.quiet_wait > 0:
                    pr.waited_quiet = True
                    waited = self.wait_for_quiet_machine(name, min(self.options.quiet_wait, ctx.time_left()))
                    if waited is not None:
                        pr.dropped_in_a_row = 0
                        continue
                causes = "; ".join(dict.fromkeys(c for d in pr.dropped for c in d["disturbed"]))
                raise Unmeasured(f"disturbed: {len(pr.dropped)} rounds of {name} dropped, {len(pr.rounds)} clean "
                                 f"({causes})")
            self._take_round(spec, pr, ctx)
        return pr.rounds[min(r, len(pr.rounds) - 1)]

    def wait_for_quiet_machine(self, name: str, timeout: float) -> float | None:
        """Wait until two seconds in a row pass without outside load (the rounds' own test), at most
        ``timeout`` seconds: the seconds waited, or None when the machine stayed busy."""
        from .disturbance import Watch

        self.progress(f"{name}: {self.options.disturbed_drops} rounds in a row dropped as disturbed; waiting up to "
                      f"{timeout:.0f} s for a quiet machine, then taking them again")
        t0 = time.monotonic()
        with self.timing.phase(timing.QUIET):
            while time.monotonic() - t0 < timeout:
                w = Watch(cpu_limit=self.options.disturbed_cpu, gpu=self.device == "cuda").start()
                time.sleep(2.0)
                if not w.stop()["disturbed"]:
                    return time.monotonic() - t0
        return None

    @staticmethod
    def _nested_engine(spec) -> bool:
        """Probes without an engine of their own that call engine probes (they declare nests_engines)."""
        return bool(getattr(spec, "nests_engines", False))

    def _take_round(self, spec, pr: Probed, ctx: ProbeContext) -> None:
        from .disturbance import ENGINE_LIMIT, Watch, wait_quiet

        rctx = ProbeContext(self, ctx.deadline, round=len(pr.rounds), attempt=pr.attempts)
        rctx.instance = _instance_of(spec, pr.args)
        if rctx.instance is not None and not is_light(rctx.instance.split(":", 1)[0]):
            self.last_heavy = rctx.instance
        rctx.reads = pr.reads
        pr.attempts += 1
        self.round_serial += 1
        serial = self.round_serial
        own_only = spec.engine is None and not self._nested_engine(spec)
        # an engine process that served an earlier round of this call serves no more of them where its
        # family asks for it (Family.fresh_rounds: the process's own state would be in every round)
        for eng in self.engines.live():
            if eng.serial in pr.engine_serials:
                self.engines.retire(eng)
        handouts = self.engines.handouts
        waited = 0.0
        if own_only and self.engines.started:
            with self.timing.phase(timing.QUIET):
                waited = wait_quiet(min(self.options.disturbed_cpu, ENGINE_LIMIT))
        watch = Watch(cpu_limit=self.options.disturbed_cpu, gpu=self.device == "cuda", own_only=own_only).start()
        try:
            with self.timing.phase(timing.IN_PROCESS):  # engine starts and calls inside are their own phases
                if own_only:  # an engine call has its own time limit; code in this process has none
                    with time_limit(rctx.deadline - time.monotonic()):
                        m = spec(rctx, **pr.args)
                else:
                    m = spec(rctx, **pr.args)
        except TimeLimit:
            raise EngineError(f"probe {pr.name} ran past the case's time limit (claim timeout or "
                              f"--voiceperf-timeout) and was stopped") from None
        except Unmeasured as exc:
            if not pr.rounds:  # a probe that cannot run here says so once for the session
                self._cache[self._key(pr.name, pr.args)] = exc
            raise
        except (EngineError, KeyboardInterrupt, SystemExit):
            raise
        except MemoryError:
            raise EngineError(f"probe {pr.name} ran out of memory") from None
        except Exception as exc:  # a broken probe is an error verdict, not a crash of the run
            import traceback

            raise EngineError(f"probe {pr.name} failed: {type(exc).__name__}: {exc}",
                              "".join(traceback.format_exception(exc)[-6:])) from None
        if not isinstance(m, Measurement):
            raise TypeError(f"probe {pr.name} returned {type(m).__name__}, not Measurement")
        with self.timing.phase(timing.WATCH):  # a short round's window (and the /proc and NVML reads)
            rec = watch.stop()
        timed = sorted(set(m.values) - spec.exact)
        if timed and not spec.one_figure and not m.invalid and not m.timed:
            broken = InvalidMeasurement(
                f"measurement invalid: probe {pr.name} returned no samples for its timed outputs "
                f"({', '.join(timed)}): rounds decide a timed figure, one round of it decides nothing. Give the "
                f"per-run figures as Measurement(values, repetitions), declare the outputs that are counts in "
                f"@probe(..., exact=...), or @probe(..., one_figure=True) for a search")
            if not pr.rounds:
                self._cache[self._key(pr.name, pr.args)] = broken
            raise broken
        rec["attempt"] = pr.attempts - 1
        fresh = [e for e in self.engines.live() if e.handed_out > handouts and fresh_rounds(e.family)]
        if fresh and spec.engine:  # a probe that nests others leaves their processes to their own rounds
            rec["engine_pids"] = sorted(e.proc.pid for e in fresh)
            pr.engine_serials |= {e.serial for e in fresh}
        if waited:
            rec["waited_for_engines_s"] = round(waited, 2)
        if rec["disturbed"]:
            pr.dropped.append(rec)
            pr.dropped_in_a_row += 1
            self.forget_round(serial)
            self.progress(f"{pr.name}: round dropped, machine disturbed: {'; '.join(rec['disturbed'])}")
            return
        try:
            self.check_ceilings(pr.name, m, ctx, len(pr.rounds))
        except Unmeasured as exc:  # an impossible figure voids the probe call for the session
            if not pr.rounds:
                self._cache[self._key(pr.name, pr.args)] = exc
            raise
        pr.records.append(rec)
        pr.dropped_in_a_row = 0
        pr.rounds.append(m)
        pr.taken_in.append(self._case_round)
        pr.aggregated = None
