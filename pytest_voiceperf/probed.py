"""The rounds of one probe call in a session: its clean rounds, the dropped ones and their records,
and the figure over them (medians of the round figures)."""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from .probes import Measurement


@dataclass
class Aggregate:
    """A probe call's figures over its rounds: ``values`` the median of the round figures, ``rounds``
    each output's figure per round (what verdicts and the gate compare), ``info`` the last round's
    with the rounds' records."""

    values: dict[str, float]
    rounds: dict[str, list[float]] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)


class Probed:
    """The rounds of one probe call in this session (shared by every claim that makes the call)."""

    def __init__(self, name: str, args: dict):
        self.name = name
        self.args = args
        self.rounds: list[Measurement] = []
        self.records: list[dict] = []  # per clean round: wall time, other CPU load, GPU state
        self.dropped: list[dict] = []  # disturbed rounds: their records with the causes
        self.dropped_in_a_row = 0  # disturbed rounds since the last clean one
        self.waited_quiet = False  # a quiet machine was waited for once after drops in a row
        self.taken_in: list[tuple | None] = []  # per clean round: (case serial, case round) that took it
        self.attempts = 0
        self.reads: set[str] = set()  # keys of the probe calls its rounds read (ProbeContext.probe)
        self.engine_serials: set[int] = set()  # engine processes its rounds ran on (Family.fresh_rounds)
        self.aggregated: Aggregate | None = None

    @property
    def deterministic(self) -> bool:
        """A probe without repetitions (settings and datasheet figures, declared exact; or one search per
        run such as asr.streams, a verdict of "one measurement" the gate does not compare): one round
        stands for every round. Identical repetitions do not make a probe exact (all 16
        requests of one batch end together and report the same tok/s), so they still take rounds."""
        if not self.rounds:
            return False
        return not self.rounds[0].timed

    def best(self, out: str) -> float:
        return max(m.values[out] for m in self.rounds)

    def aggregate(self) -> Aggregate:
        """The figures over the rounds taken so far."""
        if self.aggregated is not None and self.aggregated.info.get("rounds") == len(self.rounds):
            return self.aggregated
        last = self.rounds[-1]
        if len(self.rounds) == 1:
            values = dict(last.values)
            per_round = {k: [v] for k, v in last.values.items()} if not self.deterministic else {}
        else:
            values, per_round = {}, {}
            for k in last.values:
                xs = [m.values[k] for m in self.rounds if k in m.values and m.values[k] is not None]
                if xs and all(isinstance(x, (int, float)) for x in xs):
                    values[k] = float(statistics.median(xs))
                    per_round[k] = [float(x) for x in xs]
                else:
                    values[k] = last.values[k]
        info = dict(last.info)
        info["rounds"] = len(self.rounds)
        info["repetitions"] = [m.repetitions for m in self.rounds]
        info["round_records"] = self.records
        if self.dropped:
            info["dropped_rounds"] = self.dropped
        self.aggregated = Aggregate(values, per_round, info)  # (a round's implies and invalid were checked in it)
        return self.aggregated
