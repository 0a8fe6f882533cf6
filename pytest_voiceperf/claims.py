"""The claim file format: schema (pydantic), loading with line numbers, expansion to cases.

A claim file is one YAML mapping (docs/claims.md). :func:`load_claim` returns a
:class:`Claim` or raises :class:`ClaimError` naming the file, the line and the fix.
"""
from __future__ import annotations

import collections
import hashlib
import itertools
import json
import math
import re
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from . import expr, yamlsafe

ID_RE = r"^[a-z0-9]+(-[a-z0-9]+)*$"
MAX_CASES = 256
Scalar = bool | int | float | str
KINDS = ("measured", "calculated", "vendor", "principle", "architecture")


class ClaimError(Exception):
    """A claim file that cannot be used: ``path:line: message``."""

    def __init__(self, path: Path | str, line: int | None, message: str):
        self.path = str(path)
        self.line = line
        self.message = message
        super().__init__(self.render())

    def __str__(self) -> str:
        return self.render()

    def render(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        return f"{where}: {self.message}"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", str_max_length=2000)


class Source(_Strict):
    document: str = Field(description="file name of the source document")
    section: str | None = Field(None, description="section of the document")


class Expect(_Strict):
    """What the metric must satisfy. ``min``/``max`` may be combined; the others stand alone."""

    between: tuple[float, float] | None = Field(None, description="[lo, hi], inclusive")
    min: float | None = Field(None, description="metric >= min")
    max: float | None = Field(None, description="metric <= max")
    approx: float | None = Field(None, description="metric within rel of this value")
    rel: float | None = Field(None, gt=0, description="relative tolerance for approx (default 0.1)")
    equals: float | None = Field(None, description="metric == value (for exact counts)")

    @model_validator(mode="after")
    def _one_form(self) -> Expect:
        forms = [k for k in ("between", "approx", "equals") if getattr(self, k) is not None]
        bounds = self.min is not None or self.max is not None
        if len(forms) + bool(bounds) != 1:
            raise ValueError("expect needs exactly one of: between, approx, equals, or min and/or max")
        if self.between is not None and self.between[0] > self.between[1]:
            raise ValueError(f"between: [{self.between[0]}, {self.between[1]}] has lo > hi; write [lo, hi]")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min {self.min} is above max {self.max}")
        for name in ("min", "max", "approx", "equals"):
            v = getattr(self, name)
            if v is not None and not math.isfinite(v):
                raise ValueError(f"{name} must be a finite number, not {v}")
        if self.between is not None and not all(math.isfinite(v) for v in self.between):
            raise ValueError("between bounds must be finite numbers")
        if self.rel is not None and self.approx is None:
            raise ValueError("rel only goes with approx")
        return self

    def describe(self) -> str:
        if self.between is not None:
            return f"in [{_g(self.between[0])}, {_g(self.between[1])}]"
        if self.approx is not None:
            return f"~{_g(self.approx)} ±{(self.rel or 0.1) * 100:g}%"
        if self.equals is not None:
            return f"== {_g(self.equals)}"
        parts = []
        if self.min is not None:
            parts.append(f">= {_g(self.min)}")
        if self.max is not None:
            parts.append(f"<= {_g(self.max)}")
        return " and ".join(parts)

    def bounds(self) -> tuple[float | None, float | None]:
        if self.between is not None:
            return self.between
        if self.approx is not None:
            r = self.rel or 0.1
            lo, hi = self.approx * (1 - r), self.approx * (1 + r)
            return (min(lo, hi), max(lo, hi))
        if self.equals is not None:
            return (self.equals, self.equals)
        return (self.min, self.max)


def _g(x: float) -> str:
    return f"{x:.4g}"


class Xfail(_Strict):
    reason: str = Field(description="why this case is expected to fail")
    when: str | None = Field(None, description="expression over params; absent = always")
    strict: bool = Field(True, description="an unexpected pass fails the run (default true)")


class Reference(BaseModel):
    """The document's own figures, reported beside the runner's (never asserted)."""

    model_config = ConfigDict(extra="allow")
    value: str | float | None = None
    hardware: str | None = None
    engine: str | None = None
    note: str | None = None


class MeasureCall(BaseModel):
    """``{probe: NAME, arg: value, ...}``; string values may hold ``{param}``."""

    model_config = ConfigDict(extra="allow")
    probe: str


class Noise(_Strict):
    max_rel_spread: float | None = Field(None, gt=0, description="no longer used (kept so older files load): "
                                            "verdicts come from a confidence interval over rounds; see rounds")


class Rounds(_Strict):
    """How many independent rounds decide the case (a round: the probes' warm-up and repetitions)."""

    min: int | None = Field(None, ge=1, le=50, description="rounds taken before deciding (default: ini voiceperf_min_rounds)")
    max: int | None = Field(None, ge=1, le=50, description="rounds at most while the interval straddles the bound "
                                                             "(default: ini voiceperf_max_rounds)")
    seconds: float | None = Field(None, gt=0, description="time the added rounds may take "
                                                            "(default: ini voiceperf_round_seconds)")
    floor: float | None = Field(None, ge=0, le=1, description="the interval is at least the figure ± this "
                                                                "fraction (run-to-run drift; default: ini voiceperf_noise_floor)")

    @model_validator(mode="after")
    def _order(self) -> Rounds:
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"rounds: min {self.min} is above max {self.max}")
        return self


class ClaimModel(_Strict):
    id: str = Field(pattern=ID_RE, max_length=120, description="unique kebab-case id")
    title: str
    source: Source | None = None
    statement: str
    kind: Literal["measured", "calculated", "vendor", "principle", "architecture"] = "measured"
    params: dict[str, list[Scalar]] = Field(default_factory=dict, description="lists expand to a cartesian product")
    measure: dict[str, str | MeasureCall] = Field(description="alias -> probe name or {probe: name, args...}")
    metric: str = Field(description="safe expression over alias.output, params and math functions")
    unit: str = ""
    expect: Expect
    requires: list[str] = Field(default_factory=list, description="cuda, cpu, gpus>=N, module:NAME, weights:MODEL, data:NAME")
    xfail: Xfail | None = None
    reference: Reference | None = None
    profiles: dict[str, str] = Field(default_factory=dict, description="profile -> expression selecting the cases it runs")
    timeout: float | None = Field(None, gt=0, le=86400, description="seconds for one case (default: ini "
                                  "voiceperf_timeout; a limit the operator sets is a cap)")
    marks: list[str] = Field(default_factory=list)
    noise: Noise = Field(default_factory=Noise)
    rounds: Rounds = Field(default_factory=Rounds)
    higher_is_better: bool | None = Field(None, description="direction for the baseline gate (default: from expect)")
    tolerance: float | None = Field(None, ge=0, description="relative change the gate tolerates (default: ini)")

    @field_validator("params")
    @classmethod
    def _params_nonempty(cls, v: dict) -> dict:
        for name, values in v.items():
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
                raise ValueError(f"param name {name!r} must be an identifier")
            if not values:
                raise ValueError(f"param {name!r} is an empty list; give at least one value")
            if len(values) > 64:
                raise ValueError(f"param {name!r} has {len(values)} values; at most 64")
        total = math.prod(len(x) for x in v.values()) if v else 1
        if total > MAX_CASES:
            raise ValueError(f"params expand to {total} cases; at most {MAX_CASES} per claim")
        return v

    @field_validator("measure")
    @classmethod
    def _aliases(cls, v: dict) -> dict:
        if not v:
            raise ValueError("measure is empty; name at least one probe")
        for alias in v:
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", alias):
                raise ValueError(f"alias {alias!r} must be an identifier")
        return v

    @field_validator("marks")
    @classmethod
    def _marks(cls, v: list) -> list:
        for m in v:
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", m):
                raise ValueError(f"mark {m!r} must be an identifier")
        return v


def json_schema() -> dict:
    schema = ClaimModel.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "pytest-voiceperf claim"
    return schema


@dataclass
class ProbeCall:
    alias: str
    probe: str
    args: dict[str, Any]  # may hold "{param}" templates
    line: int | None


@dataclass
class Case:
    """One parametrized instance of a claim (one pytest item)."""

    claim: Claim
    params: dict[str, Any]
    ident: str  # e.g. "qwen3-0.6b-bf16"
    # a user's model added to the claim (--voiceperf-llm): the claim's own first model stands in for it
    # where the claim's conditions (profiles) name models
    stand_in: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.claim.id}[{self.ident}]" if self.ident else self.claim.id

    def names(self, device: str = "cpu", profile: str = "cpu") -> dict:
        """What a claim's conditions (xfail when, profiles) may name: the params, device and profile."""
        names = dict(self.params, **self.stand_in)
        names.setdefault("device", device)
        names.setdefault("profile", profile)
        return names

    def other_device(self, device: str) -> str | None:
        """Why the case belongs to a run on another device (its claim requires cpu or cuda), None if not."""
        req = self.claim.model.requires
        if device == "cuda" and "cpu" in req:
            return "runs on the CPU only"
        if device == "cpu" and "cuda" in req:
            return "needs CUDA"
        return None

    def in_profile(self, profile: str, device: str) -> bool:
        """Does the profile keep this case on this device? ``full`` keeps every case; the others leave out
        the cases of another device, then apply the claim's own condition for the profile. Raises
        expr.ExprError when that condition cannot be evaluated."""
        if profile == "full":
            return True
        if self.other_device(device):
            return False
        cond = self.claim.model.profiles.get(profile)
        return True if cond is None else bool(expr.evaluate(cond, self.names(device, profile)))

    def calls(self) -> list[ProbeCall]:
        out = []
        for call in self.claim.calls:
            args = {k: _substitute(v, self.params) for k, v in call.args.items()}
            out.append(ProbeCall(call.alias, call.probe, args, call.line))
        return out


@dataclass
class Claim:
    model: ClaimModel
    path: Path
    lines: yamlsafe.Loaded
    calls: list[ProbeCall] = field(default_factory=list)
    sha: str = ""  # of the file's bytes: a resumed case is kept only while its claim file is unchanged

    @property
    def id(self) -> str:
        return self.model.id

    def line(self, *keys) -> int:
        return self.lines.line_of(tuple(keys)) or 1

    def takes_llms(self) -> bool:
        """A claim whose ``model`` param feeds an LLM probe: the user's own LLMs can join its list."""
        return "model" in self.model.params and any(
            c.probe.startswith("llm.") and c.args.get("model") == "{model}" for c in self.calls)

    def cases(self, llms: tuple[str, ...] = ()) -> list[Case]:
        """Its cases; ``llms``: the user's own LLMs, added to the model list of a claim that takes them."""
        params = dict(self.model.params)
        own = [m for m in llms if m not in params.get("model", [])] if self.takes_llms() else []
        if own:
            params["model"] = [*params["model"], *own]
        names = list(params)
        out = []
        for combo in itertools.product(*(params[n] for n in names)):
            values = dict(zip(names, combo))
            ident = "-".join(_ident(v) for v in combo)
            stand = {"model": self.model.params["model"][0]} if values.get("model") in own else {}
            out.append(Case(self, values, ident, stand))
        # values that read alike ("a b" and "a_b", 1 and 1.0) must not share an id: one result would
        # overwrite the other in the results file, the gate and resume. Numbered as pytest's
        # parametrize numbers its duplicate ids (a_b0, a_b1)
        seen = collections.Counter(c.ident for c in out)
        count: collections.Counter = collections.Counter()
        for c in out:
            if seen[c.ident] > 1:
                base = c.ident
                c.ident = f"{base}{count[base]}"
                count[base] += 1
        return out or [Case(self, {}, "")]


def _ident(v: Any) -> str:
    s = str(v)
    return re.sub(r"[^A-Za-z0-9_.+=-]", "_", s)[:60]


_FIELD_RE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _substitute(value: Any, params: dict[str, Any]) -> Any:
    """Replace ``{param}`` in string args. A string that is exactly ``{param}`` keeps the param's type."""
    if not isinstance(value, str):
        return value
    whole = _FIELD_RE.fullmatch(value)
    if whole:
        return params[whole.group(1)]
    return _FIELD_RE.sub(lambda m: str(params[m.group(1)]), value)


def _check_template(value: Any, params: set[str]) -> None:
    if not isinstance(value, str):
        if isinstance(value, (dict, list)):
            raise ValueError("probe arguments must be numbers, strings or booleans")
        return
    # only {name} fields; no format specs, attribute or index access
    try:
        parsed = list(string.Formatter().parse(value))
    except ValueError as exc:
        raise ValueError(f"bad template {value!r}: {exc}; write {{{{ and }}}} for literal braces") from None
    for _, fname, spec, conv in parsed:
        if fname is None:
            continue
        if fname not in params or spec or conv:
            raise ValueError(f"{value!r} uses {{{fname}}}, but only plain {{param}} with a param of this claim "
                             f"({', '.join(sorted(params)) or 'none'}) can be substituted")


def _pydantic_message(err: dict) -> str:
    loc = ".".join(str(p) for p in err["loc"] if not isinstance(p, int) or True)
    typ = err["type"]
    msg = err["msg"]
    if typ == "extra_forbidden":
        return f"unknown key {loc!r}; remove it or check its spelling (see claim.schema.json)"
    if typ == "missing":
        return f"missing required key {loc!r}"
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    return f"{loc}: {msg}" if loc else msg


def _read_claim_bytes(path: Path, within: Path | None) -> bytes:
    """The file's bytes (files.read_regular: a regular file of at most MAX_FILE_BYTES, checked before
    reading), and not through a link that leads out of ``within``."""
    from .files import Refused, check_regular, read_regular

    try:
        check_regular(path, yamlsafe.MAX_FILE_BYTES, "a claim file")
        if within is not None and path.is_symlink():
            target = path.resolve()
            if not target.is_relative_to(Path(within).resolve()):
                raise ClaimError(path, None, f"a link to {target}, outside the project ({within}); copy the claim "
                                             "in instead")
        return read_regular(path, yamlsafe.MAX_FILE_BYTES, "a claim file")
    except Refused as exc:
        raise ClaimError(path, 1 if exc.kind == "oversize" else None, str(exc)) from None


def load_claim(path: Path, probe_registry, within: Path | None = None) -> Claim:
    """Read, validate and statically check one claim file (``within``: the project folder that a
    link may not lead out of)."""
    path = Path(path)
    raw = _read_claim_bytes(path, within)
    try:
        loaded = yamlsafe.load(raw)
    except yamlsafe.YamlError as exc:
        raise ClaimError(path, exc.line, exc.message) from None
    data = loaded.data
    bad = _unsafe_text(data)
    if bad:
        keys, where = bad
        raise ClaimError(path, loaded.line_of(keys) or loaded.line_of(keys[:-1]) or 1,
                         f"{'.'.join(map(str, keys)) or 'the file'}: a control or bidirectional character ({where}); "
                         "claim text is printed to terminals and pages: remove it")
    if not isinstance(data, dict):
        kind = "a list" if isinstance(data, list) else f"a {type(data).__name__}"
        raise ClaimError(path, loaded.line_of(()), f"a claim file must be a mapping of keys (id, title, ...), not {kind}")
    try:
        model = ClaimModel.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(p for p in err["loc"] if isinstance(p, (str, int)))
        # pydantic loc for unions carries member names: keep only the path present in the file
        path_loc = []
        node = data
        for p in loc:
            if isinstance(node, dict) and p in node:
                path_loc.append(p)
                node = node[p]
            elif isinstance(node, list) and isinstance(p, int) and p < len(node):
                path_loc.append(p)
                node = node[p]
            elif isinstance(p, str) and p in ("between", "min", "max", "approx", "rel", "equals") and isinstance(node, dict):
                continue
        line = loaded.line_of(tuple(path_loc))
        more = f" (and {len(exc.errors()) - 1} more problem(s))" if len(exc.errors()) > 1 else ""
        e2 = dict(err)
        e2["loc"] = tuple(path_loc) if path_loc else err["loc"]
        raise ClaimError(path, line, _pydantic_message(e2) + more) from None

    claim = Claim(model=model, path=path, lines=loaded, sha=hashlib.sha256(raw).hexdigest()[:16])
    param_names = set(model.params)

    # measure: probe names, arguments, templates
    aliases: dict[str, set[str]] = {}
    for alias, spec in model.measure.items():
        line = loaded.line_of(("measure", alias))
        if isinstance(spec, str):
            pname, args = spec, {}
        else:
            pname = spec.probe
            args = {k: v for k, v in (spec.model_extra or {}).items()}
        probe = probe_registry.get(pname)
        if probe is None:
            known = ", ".join(sorted(probe_registry.names()))
            raise ClaimError(path, line, f"unknown probe {pname!r} for alias {alias!r}; known probes: {known}")
        for k, v in args.items():
            try:
                _check_template(v, param_names)
            except ValueError as exc:
                raise ClaimError(path, loaded.line_of(("measure", alias, k)), f"measure.{alias}.{k}: {exc}") from None
        unknown = set(args) - set(probe.params)
        if unknown:
            raise ClaimError(path, loaded.line_of(("measure", alias, sorted(unknown)[0])),
                             f"probe {pname!r} takes no argument {sorted(unknown)[0]!r}; it takes: "
                             f"{', '.join(sorted(probe.params)) or 'nothing'}")
        for k, v in args.items():
            values = [v]
            if isinstance(v, str) and _FIELD_RE.search(v):  # check every substituted value
                values = [_substitute(v, dict(zip(model.params, combo)))
                          for combo in itertools.product(*model.params.values())]
            for val in values:
                problem = check_arg(probe, k, val)
                if problem:
                    raise ClaimError(path, loaded.line_of(("measure", alias, k)), f"measure.{alias}.{k}: {problem}")
        aliases[alias] = set(probe.outputs)
        claim.calls.append(ProbeCall(alias, pname, args, line))

    names = param_names | {"device", "profile"}
    try:
        expr.check(model.metric, names=names, aliases=aliases, what="metric")
    except expr.ExprError as exc:
        raise ClaimError(path, loaded.line_of(("metric",)), str(exc)) from None
    if model.xfail and model.xfail.when is not None:
        try:
            expr.check(model.xfail.when, names=names, what="xfail.when")
        except expr.ExprError as exc:
            raise ClaimError(path, loaded.line_of(("xfail", "when")), str(exc)) from None
    for prof, cond in model.profiles.items():
        try:
            expr.check(cond, names=names, what=f"profiles.{prof}")
        except expr.ExprError as exc:
            raise ClaimError(path, loaded.line_of(("profiles", prof)), str(exc)) from None
    for i, req in enumerate(model.requires):
        if not _REQ_RE.match(req.split("{")[0] if "{" in req else req) and not _REQ_RE.match(req):
            raise ClaimError(path, loaded.line_of(("requires", i)) or loaded.line_of(("requires",)),
                             f"unknown requirement {req!r}; use cuda, cpu, gpus>=N, module:NAME, weights:MODEL or data:NAME")
        try:
            _check_template(req, param_names)
        except ValueError as exc:
            raise ClaimError(path, loaded.line_of(("requires",)), str(exc)) from None
    return claim


def _unsafe_text(data: Any) -> tuple[tuple, str] | None:
    """The first key path whose string (or key) holds a control or bidi character, and where in it."""
    from .textsafe import first_unsafe

    todo: list[tuple[tuple, Any]] = [((), data)]
    while todo:
        keys, v = todo.pop()
        if isinstance(v, str):
            where = first_unsafe(v)
            if where:
                return keys, where
        elif isinstance(v, dict):
            for k, x in v.items():
                where = first_unsafe(k) if isinstance(k, str) else None
                if where:
                    return keys + (k,), where
                todo.append((keys + (k,), x))
        elif isinstance(v, list):
            todo.extend((keys + (i,), x) for i, x in enumerate(v))
    return None


def check_arg(probe, name: str, value: Any) -> str | None:
    """Type and choice check of one probe argument against the probe's declared defaults/choices."""
    choices = getattr(probe, "choices", {}).get(name)
    if choices is not None and value not in choices:
        return f"{value!r} is not one of {', '.join(map(repr, choices))} (probe {probe.name})"
    default = probe.params.get(name)
    if isinstance(default, bool):
        if not isinstance(value, bool):
            return f"{value!r} must be true or false"
    elif isinstance(default, (int, float)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"{value!r} must be a number"
        if isinstance(value, float) and not math.isfinite(value):
            return f"{value!r} must be a finite number"
        if abs(value) > 1e15:
            return f"{value!r} is out of range"
        rng = probe.range_of(name) if hasattr(probe, "range_of") else None
        if rng is not None and not rng[0] <= value <= rng[1]:
            return f"{value!r} is out of range: {probe.name} takes {name} from {rng[0]:g} to {rng[1]:g}"
    elif isinstance(default, str):
        if not isinstance(value, str):
            return f"{value!r} must be a string"
    return None


_REQ_RE = re.compile(r"^(cuda|cpu|gpus>=\d+|module:[A-Za-z0-9_.]+|weights:[A-Za-z0-9_.{}-]+|data:[A-Za-z0-9_.{}-]+)$")


def write_schema(path: Path) -> None:
    path.write_text(json.dumps(json_schema(), indent=2) + "\n")
