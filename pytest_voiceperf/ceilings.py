"""The hardware ceilings a session measures, checks figures against, and measures again at the end."""
from __future__ import annotations

import math
import statistics
import time

from . import timing
from .context import ProbeContext, SessionBase
from .exceptions import InvalidMeasurement, Unmeasured
from .probed import Probed
from .probes import Measurement
from .verdict import fmt_value

# which ceiling a figure is checked against: implied key -> (probe, args, output, label)
CEILINGS: dict[str, tuple[str, dict, str, str]] = {
    "read_bw": ("hw.read_bandwidth", {}, "read_bw", "measured read bandwidth"),
}


# the hardware ceilings a session measures, and the output each one gives
CEILING_OUTPUTS = {"hw.read_bandwidth": "read_bw", "hw.copy_bandwidth": "copy_bw", "hw.matmul": "flops"}


END_DRIFT = 0.05  # a ceiling measured again at the end that moved beyond this: the machine changed state


END_READINGS = 3  # the readings of an end check whose first reading moved beyond END_DRIFT


def _beyond(reading: float, session: float) -> bool:
    return bool(session) and abs(reading / session - 1) > END_DRIFT


def ceiling_for(key: str, device: str = "cuda") -> list[tuple[str, dict, str, str]]:
    """The ceilings a figure is checked against; the highest one that measures bounds it."""
    if key in CEILINGS:
        return [CEILINGS[key]]
    if key.startswith("matmul_flops:"):
        dtype = key.split(":", 1)[1]
        out = [("hw.matmul", {"dtype": dtype}, "flops", f"measured {dtype} matmul peak")]
        if device != "cuda" and dtype in ("bfloat16", "float16"):
            # a CPU without native half-precision GEMM (AVX2: torch's bfloat16 matmul 0.83 GFLOP/s) widens
            # to float32, as vLLM's CPU kernels do (4.8 GFLOP/s there): its float32 peak bounds half precision too
            out.append(("hw.matmul", {"dtype": "float32"}, "flops", "measured float32 matmul peak"))
        return out
    raise KeyError(key)


def _ceiling_unit(key: str) -> str:
    return "B/s" if key == "read_bw" else "FLOP/s"


class Ceilings(SessionBase):
    """VoiceperfSession's ceilings: a figure above its ceiling is a broken measurement."""

    def check_ceilings(self, name: str, m: Measurement, ctx: ProbeContext, r: int = 0) -> None:
        """A figure above a ceiling measured in this session is a broken measurement. Round ``r`` of a
        probe call has the ceiling's round ``r`` beside it: the ceiling takes as many rounds as the
        calls it bounds, so that the gate decides whether the machine moved between two runs from
        rounds on both sides, not from one reading each (the shipped workflow on the 2-core CI VM:
        one read-bandwidth reading per run, 16.6 and 20.4 GB/s minutes apart)."""
        for key, implied in m.implies.items():
            if implied is None or not math.isfinite(implied):
                continue
            found, why = [], []
            for pname, pargs, out, label in ceiling_for(key, self.device):
                try:
                    self.measure_round(pname, pargs, ctx, r)
                    # the best round: a ceiling is what the hardware can do; its rounds go with it, so
                    # that the gate can tell a machine that changed from a ceiling's own spread
                    cp = self._probed(pname, pargs)
                    found.append((cp.best(out), label, [r.values[out] for r in cp.rounds]))
                except Unmeasured as exc:
                    why.append(str(exc))
            if not found:
                m.info.setdefault("ceiling_unchecked", {})[key] = "; ".join(why)
                continue
            ceil, label, rounds = max(found, key=lambda c: c[0])
            m.info.setdefault("ceilings", {})[key] = {"implied": implied, "ceiling": ceil, "ratio": implied / ceil,
                                                      "label": label, "rounds": rounds}
            if implied > ceil * (1 + self.options.ceiling_slack):
                unit = _ceiling_unit(key)
                raise InvalidMeasurement(
                    f"measurement invalid: {name} implies {fmt_value(implied, unit)}, "
                    f"{implied / ceil:.2f}x the {label} ({fmt_value(ceil, unit)}); "
                    f"a figure above a physical ceiling is a broken measurement ({m.info.get('invalid_hint', 'check caching and timing')})")
        if m.invalid:
            below = "; ".join(f"it implies {fmt_value(c['implied'], _ceiling_unit(k))}, "
                              f"{c['ratio']:.2f}x the {c['label']}: below that ceiling, so only the engine's "
                              "own count shows it" for k, c in m.info.get("ceilings", {}).items())
            raise InvalidMeasurement(f"measurement invalid: {name}: {m.invalid}" + (f" ({below})" if below else ""))

    def recheck_ceilings(self) -> None:
        """Measure the session's ceilings once more at the end: a machine whose ceilings moved while
        the claims ran was not in one state (provenance ``ceilings_end``, ``drifted`` above 5%; the
        gate does not compare figures of a probe call whose ceiling moved beyond its tolerance).

        The engines are done by now: they stop first, so the check sees the GPU the session's own
        ceiling rounds saw, not one beside a live engine. A reading beyond 5% is confirmed with two
        more and the median decides: on an H100 one end reading of the bf16 matmul was 12.9% low while
        its n=4096 sibling, read a moment earlier, moved 0.6%, and that one reading left 15 figures
        of a same-commit pair out of the gate (results/h100/suite-5e112c8)."""
        self.engines.close_all()
        for pr in list(self._cache.values()):
            if not isinstance(pr, Probed) or pr.name not in CEILING_OUTPUTS or not pr.rounds or pr.deterministic:
                continue
            out = CEILING_OUTPUTS[pr.name]
            spec = self.registry.get(pr.name)
            if spec is None:
                continue
            entry = {"probe": pr.name, "args": pr.args, "call": self._key(pr.name, pr.args)}
            med = pr.aggregate().values[out]
            readings: list[float] = []
            try:
                for _ in range(END_READINGS):
                    with self.timing.phase(timing.CEILINGS_END):
                        m = spec(ProbeContext(self, time.monotonic() + 120, round=None, attempt=10_000), **pr.args)
                    readings.append(m.values[out])
                    if not _beyond(readings[0], med):
                        break
            except Exception as exc:  # the end check must never lose the run's results
                if not readings:
                    self.ceilings_end.append(dict(entry, error=str(exc)[:200]))
                    continue
            end = statistics.median(readings)
            change = end / med - 1 if med else None
            self.ceilings_end.append(dict(entry, output=out, session=med, end=end, readings=readings, change=change,
                                          drifted=_beyond(end, med)))

    def _ceilings_read(self, reads: list[str]) -> dict[str, dict]:
        """The hardware ceilings among the calls a probe's rounds read, with this session's figure: the
        gate compares them between runs as it compares the ceilings a figure was checked against (a
        decode fit divides by the read bandwidth; on a VM whose bandwidth fell 12% its overhead rose 25%)."""
        out = {}
        for k in reads:
            hit = self._cache.get(k)
            if isinstance(hit, Probed) and hit.name in CEILING_OUTPUTS and hit.rounds:
                name = CEILING_OUTPUTS[hit.name]
                v = hit.aggregate().values.get(name)
                if isinstance(v, (int, float)) and v:
                    out[k] = {"probe": hit.name, "output": name, "value": float(v),
                              "rounds": [float(r.values[name]) for r in hit.rounds]}
        return out

    def _reads_of(self, pr: Probed) -> list[str]:
        """The probe calls a probe's rounds read, directly or through the calls they read (the
        pipeline's LLM decode, a fit's ceiling)."""
        seen: set[str] = set()
        todo = list(pr.reads)
        while todo:
            k = todo.pop()
            if k in seen:
                continue
            seen.add(k)
            hit = self._cache.get(k)
            if isinstance(hit, Probed):
                todo += hit.reads
        return sorted(seen)
