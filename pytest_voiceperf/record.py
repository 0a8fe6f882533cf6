"""The typed results file: one record per measured case, read by the gate, the report, merge and
repro alike (``results.schema.json`` is this module's schema; a test keeps them equal).

Every field a run writes is declared here with its meaning. Files written by earlier versions
load too: what they lack takes its default (a file from before rounds has ``rounds`` None, and
the gate calls its figures untestable), and fields this version does not know are kept as they
are (``extra="allow"``), so reading and writing a file never drops anything.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

SCHEMA_VERSION = 1
SCHEMA_PATH = Path(__file__).with_name("results.schema.json")


def _figure(x: Any) -> Any:
    """A figure read from a file: a finite number or null (a string or a bool is not one: the gate and
    the statistics would fail on it far from the file that held it)."""
    if x is None:
        return None
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise ValueError(f"{str(x)[:40]!r} is not a figure (a finite number or null)")
    if x != x or x in (float("inf"), float("-inf")):
        return None  # a probe's undefined output (a fit through one point): no figure, as null in the file
    return x


def _figures(xs: Any) -> Any:
    if not isinstance(xs, list):
        raise ValueError("must be a list of figures")
    return [_figure(x) for x in xs]


class ProbeRecord(BaseModel):
    """One probe call of a case: its arguments and the figures it gave."""
    model_config = ConfigDict(extra="allow")

    probe: str = Field("", description="the probe's name, e.g. llm.decode")
    args: dict[str, Any] = Field(default_factory=dict, description="the arguments it was called with")
    call: str = Field("", description="the call's identity: name and arguments with the probe's defaults filled "
                                      "in (claims with the same call share its rounds; empty in older files)")
    values: dict[str, Any] = Field(default_factory=dict, description="output -> median of the round figures")
    samples: dict[str, list[Any]] = Field(default_factory=dict, description="output -> the round figures")
    info: dict[str, Any] = Field(default_factory=dict, description="what the probe reports beside its figures")
    units: dict[str, str] = Field(default_factory=dict, description="output -> unit")
    exact: list[str] = Field(default_factory=list, description="the outputs the probe declares exact (counts of a "
                                                             "deterministic computation): the gate compares them "
                                                             "as they are, its timings only over rounds")
    reads: list[str] = Field(default_factory=list, description="the probe calls (identities as in `call`) its "
                                                               "rounds read, directly or through other calls: the "
                                                               "gate leaves its figures alone when one of them "
                                                               "drifted during the run (empty in older files)")
    first_round: int = Field(0, description="the probe's round (0-based, of all its rounds this session) that the "
                                            "case's first round used (rounds_used[0])")
    rounds_used: list[int] | None = Field(None, description="the probe's rounds (0-based, of all its rounds this "
                                                            "session) that the case's rounds used, in order; a metric "
                                                            "pairing timed probes uses rounds taken together, round "
                                                            "by round (the same index here is the same round of the "
                                                            "case). Absent in older files: round r used "
                                                            "first_round + r")

    @field_validator("values")
    @classmethod
    def _values(cls, v: dict) -> dict:
        return {k: _figure(x) for k, x in v.items()}

    @field_validator("samples")
    @classmethod
    def _samples(cls, v: dict) -> dict:
        return {k: _figures(x) for k, x in v.items()}


class ComparisonRecord(BaseModel):
    """One figure of a case against the baseline run: the gate's comparison as a results file holds it."""
    model_config = ConfigDict(extra="allow")

    figure: str = Field("", description="metric, or ALIAS.OUTPUT [unit]")
    old: float | None = Field(None, description="the baseline's figure (geometric mean of its rounds)")
    new: float | None = Field(None, description="this run's figure")
    change: float | None = Field(None, description="new / old - 1")
    ci: list[float | None] | None = Field(None, description="interval of the relative change")
    verdict: str = Field("", description="regressed | improved | unchanged | inconclusive | untestable")
    higher_is_better: bool | None = None
    note: str = ""
    rounds: list[int | None] | None = Field(None, description="[baseline rounds, this run's rounds]")
    level: float | None = Field(None, description="the one-sided level after the correction for several figures")
    explanation: str = Field("", description="which measured term moved (regressed and improved figures)")


class ResultRecord(BaseModel):
    """One case of one claim: the verdict, the figure, its interval over rounds and its probes."""
    # the session fills it as the case runs (each assignment validated), the test report carries its
    # dump(), and the gate, the report, merge and repro read it back from the results file
    model_config = ConfigDict(extra="allow", validate_assignment=True)

    nodeid: str = Field(description="pytest node id: claim file :: claim id [parameters]")
    claim: str = Field("", description="the claim's id")
    outcome: str = Field(description="passed | failed | xfailed | xpassed | unmeasured | error")
    reason: str = Field("", description="why (the failure, 'inconclusive: ...', 'disturbed: ...', the engine error)")
    params: dict[str, Any] = Field(default_factory=dict)
    path: str | None = None
    line: int | None = None
    kind: str = ""
    value: float | None = Field(None, description="the metric: median of its round figures")
    unit: str = ""
    expect: str = Field("", description="the expectation in words")
    bounds: list[float | None] | None = Field(None, description="[lower, upper] of the expectation (None: open)")
    margin: float | None = None
    spread: list[float] | None = None
    samples: list[Any] = Field(default_factory=list, description="the metric per round (as round_values; a record's "
                                                                 "and a probe record's samples are round figures, "
                                                                 "never repetitions: those are rep_samples)")
    round_values: list[Any] = Field(default_factory=list, description="the metric per round")
    rep_samples: list[Any] = Field(default_factory=list, description="the metric per repetition, all rounds")
    rounds: int | None = Field(None, description="rounds taken; None in files from before rounds")
    ci: list[float] | None = Field(None, description="interval of the metric over rounds")
    ci_method: str = ""
    decision: str = ""
    modes: list[dict[str, Any]] | None = None
    unstable: list[float] | None = Field(None, description="[slowest, fastest] repetition when they span 1.5x")
    disturbed: list[str] = Field(default_factory=list, description="causes of rounds dropped as disturbed")
    higher_is_better: bool | None = None
    tolerance: float | None = None
    reference: dict[str, Any] | None = None
    probes: dict[str, ProbeRecord] = Field(default_factory=dict)
    baseline: list[ComparisonRecord] | None = Field(None, description="the case's figures against the baseline run")
    duration_s: float = 0.0
    worker: str | None = None
    gpu: str | None = None
    engine_instances: int | None = None
    shared_rounds: dict[str, Any] | None = Field(None, description="the first case of a group of cases sharing "
                                                                   "an engine's rounds: the group's first rounds "
                                                                   "were taken in its setup (its duration_s holds "
                                                                   "them): engine, rounds, probes, cases, seconds")
    source: str | None = Field(None, description="the file a merged result came from")
    claim_sha: str = Field("", description="sha256 (first 16 hex digits) of the claim file the case ran from: "
                                           "--voiceperf-resume keeps a case only while its claim file is unchanged")

    @field_validator("samples", "round_values", "rep_samples")
    @classmethod
    def _figure_lists(cls, v: list) -> list:
        return _figures(v)

    @property
    def has_rounds(self) -> bool:
        """Files written before rounds hold repetitions in ``samples``: never compared as rounds."""
        return self.rounds is not None

    @property
    def is_disturbed(self) -> bool:
        return self.reason.startswith("disturbed") or (self.outcome == "unmeasured" and bool(self.disturbed))

    @property
    def kind_of_outcome(self) -> str:
        """The outcome with unmeasured split: inconclusive, disturbed or unmeasured."""
        if self.outcome == "unmeasured" and self.reason.startswith("inconclusive"):
            return "inconclusive"
        if self.outcome == "unmeasured" and self.reason.startswith("disturbed"):
            return "disturbed"
        return self.outcome

    def dump(self) -> dict:
        return self.model_dump(mode="json")


class CeilingEnd(BaseModel):
    """A session ceiling measured again at the end of the run (the gate leaves alone the figures of a
    call whose ceiling drifted beyond the tolerance)."""
    model_config = ConfigDict(extra="allow")

    probe: str = Field(description="the hardware probe (hw.read_bandwidth, hw.matmul)")
    args: dict[str, Any] | None = None
    call: str | None = Field(None, description="the probe call's key, as the case records name it")
    output: str | None = None
    session: float | None = Field(None, description="the session's figure (median of its rounds)")
    end: float | None = Field(None, description="the median of the readings at the end")
    readings: list[float] = Field(default_factory=list)
    change: float | None = Field(None, description="end / session - 1")
    drifted: bool = False
    error: str | None = Field(None, description="why the end reading failed (then nothing else is set)")

    @field_validator("session", "end", "change", mode="before")
    @classmethod
    def _number(cls, v: Any) -> Any:
        return _figure(v)

    @field_validator("readings", mode="before")
    @classmethod
    def _readings(cls, v: Any) -> list:
        return [x for x in _figures(v) if x is not None]


class Provenance(BaseModel):
    """Where a run's figures come from: the tool, the machine, the software, the models and engines, the
    statistics settings and the machine's state. What the gate, merge, the report and the exports read
    is typed here (a results file from a cache or an artifact is checked before any of them reads it);
    the rest (timing, environment readings, the gate's own record) is kept as written."""
    model_config = ConfigDict(extra="allow")

    tool: str | None = None
    tool_version: str | None = None
    created: str | None = Field(None, description="UTC time the file was written (ISO 8601)")
    host: str | None = None
    machine_id: str | None = Field(None, description="the baseline folder's name: OS, device, CPU or GPU model")
    platform: str | None = None
    python: str | None = None
    cpu_count: int | None = None
    cpu_isa: list[str] | None = Field(None, description="vector extensions engines use (avx2, avx512f, amx ...)")
    cpu_model: str | None = None
    device: str | None = Field(None, description="cpu or cuda")
    device_name: str | None = None
    profile: str | None = None
    complete: bool = Field(True, description="false: the run stopped early (a .partial file)")
    duration_s: float | None = None
    models: dict[str, Any] = Field(default_factory=dict, description="model name -> where its config came from")
    engines: list[dict[str, Any]] = Field(default_factory=list, description="engine instances started, with their info")
    git_commit: str | None = None
    git_dirty: bool | None = None
    packages: dict[str, str | None] = Field(default_factory=dict, description="distribution -> version (None: absent)")
    driver: str | None = None
    cuda: str | None = None
    gpu_count: int | None = None
    ceilings_end: list[CeilingEnd] = Field(default_factory=list)
    gate: dict[str, Any] | None = Field(None, description="the baseline gate of this run, when it had one")
    counts: dict[str, int] = Field(default_factory=dict, description="cases per outcome")
    command: str | None = None
    merged_from: list[dict[str, Any]] | None = None

    @field_validator("duration_s", mode="before")
    @classmethod
    def _duration(cls, v: Any) -> Any:
        return _figure(v)


def provenance_of(v: Provenance | dict | None) -> Provenance:
    """A provenance as the typed object: a session's own (a dict) or one read from a file."""
    return v if isinstance(v, Provenance) else Provenance.model_validate(v or {})


class ResultsFile(BaseModel):
    """``{"schema_version", "provenance", "results"}``: one run (or a merge of runs of one setup)."""
    model_config = ConfigDict(extra="allow")

    schema_version: int = SCHEMA_VERSION
    provenance: Provenance = Field(description="machine, packages, models, ceilings, timing, command")
    results: list[ResultRecord]

    def dump(self) -> dict:
        out = self.model_dump(mode="json")
        # the provenance as written: the fields it has (or was given since), not every default
        out["provenance"] = self.provenance.model_dump(mode="json", exclude_unset=True)
        return out


def result(r: ResultRecord | dict) -> ResultRecord:
    return r if isinstance(r, ResultRecord) else ResultRecord.model_validate(r)


def results_file(doc: ResultsFile | dict, where: str = "results") -> ResultsFile:
    """A results document as records; a malformed one is a ValueError naming the record."""
    if isinstance(doc, ResultsFile):
        return doc
    try:
        return ResultsFile.model_validate(doc)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(x) for x in err["loc"])
        raise ValueError(f"{where}: not a voiceperf results file ({loc}: {err['msg']})") from None


def schema() -> dict:
    return ResultsFile.model_json_schema()


def schema_text() -> str:
    return json.dumps(schema(), indent=1, sort_keys=True) + "\n"
