"""The plugin's options: declared (command line and ini) and read back into the forms the session
takes (NAME=VALUE lists, round budgets, engine arguments, engine interpreters)."""
from __future__ import annotations

import os

import pytest

from .stats import DEFAULT_TOLERANCE


def add_options(parser) -> None:
    """Every option of the plugin, on the command line and in the ini file."""
    g = parser.getgroup("voiceperf", "voice-agent performance claims")
    g.addoption("--voiceperf", action="store_true", help="collect and measure the claim files")
    g.addoption("--voiceperf-claims", action="append", default=[], metavar="PATH",
                help="claim file or folder to run instead of the ini's voiceperf_claims (repeatable)")
    g.addoption("--voiceperf-json", metavar="PATH", help="write every result with provenance to PATH")
    g.addoption("--voiceperf-strict", action="store_true", help="an unmeasured claim fails the run")
    g.addoption("--voiceperf-device", choices=("auto", "cpu", "cuda"), default="auto",
                help="where probes run (auto: CUDA when present)")
    g.addoption("--voiceperf-profile", metavar="NAME",
                help="which cases of each claim run (claims' 'profiles'); default: cpu or cuda by device; "
                     "'full' runs every case")
    g.addoption("--voiceperf-model", action="append", default=[], metavar="NAME=PATH",
                help="name a model: real weights for a catalog name (path or hub id), or a folder holding a "
                     "config.json (dummy weights of that architecture) or a config.json and weights")
    g.addoption("--voiceperf-data", action="append", default=[], metavar="NAME=PATH",
                help="a data set a claim needs (e.g. an ASR manifest)")
    g.addoption("--voiceperf-bin", action="append", default=[], metavar="NAME=PATH",
                help="a native engine the plugin cannot install: its library or build folder "
                     "(e.g. parakeet=PATH/libparakeet.so)")
    g.addoption("--voiceperf-llm-engine", default=None, metavar="FAMILY",
                help="the engine family llm.* calls with engine 'auto' run on (vllm, transformers, or one "
                     "another package registers); default: vllm where installed, else transformers")
    g.addoption("--voiceperf-python", action="append", default=[], metavar="ENGINE=PYTHON",
                help="run an engine family's workers with the python of its own environment (repeatable)")
    g.addoption("--voiceperf-spec", action="append", default=[], metavar="KEY=VALUE",
                help="datasheet figure of this device (mem_bw, bf16_flops, fp16_flops)")
    g.addoption("--voiceperf-timeout", type=float, metavar="S", help="time limit of one claim case (seconds)")
    g.addoption("--voiceperf-threads", type=int, metavar="N",
                help="CPU threads for the probes that run in the pytest process (torch.set_num_threads)")
    g.addoption("--voiceperf-save", nargs="?", const="run", default=None, metavar="NAME",
                help="save this run's results as a baseline under .voiceperf/<machine-id>/")
    g.addoption("--voiceperf-baseline", metavar="PATH|NAME",
                help="gate this run against a saved run: fail figures that regressed significantly and "
                     "claims that passed there and fail now")
    g.addoption("--voiceperf-allow-mismatch", nargs="?", const="all", default=None, metavar="CHECK[,CHECK]",
                help="compare with a baseline from another machine: the checks to waive (gpu, cpu_model, "
                     "cpu_isa; all when none is named). Software changes are compared, never refused")
    g.addoption("--voiceperf-gate", choices=("changes", "absolute"), default=None,
                help="with a baseline: 'changes' (default, ini voiceperf_gate) fails regressions and claims "
                     "that passed in the baseline and fail now, and reports a claim that failed there too as "
                     "xfailed (known failure); 'absolute' fails every failed claim as without a baseline")
    g.addoption("--voiceperf-min-guarded", type=float, default=None, metavar="SHARE",
                help="the share of the baseline's figures this run must decide, else the gate fails "
                     "(default: ini voiceperf_min_guarded)")
    g.addoption("--voiceperf-engine-arg", action="append", default=[], metavar="FAMILY:KEY=VALUE",
                help="an engine option for every engine of a family (e.g. vllm:enforce_eager=true, "
                     "vllm:max_num_seqs=256, vllm:kv_cache_dtype=fp8); recorded in provenance")
    g.addoption("--voiceperf-llm", action="append", default=[], metavar="NAME=PATH",
                help="run the LLM claims on your own model too: NAME joins every LLM claim's model list "
                     "(PATH: a folder with config.json, and weights for real ones)")
    g.addoption("--voiceperf-gpus", metavar="all|N", help="one pytest-xdist worker per GPU")
    g.addoption("--voiceperf-resume", metavar="PATH",
                help="finish an interrupted run: skip the cases that PATH (a results file or its .partial) "
                     "already holds, and copy them into this run's results (cases that ended in 'error' run again)")
    parser.addini("voiceperf_claims", "claim files or folders", type="paths", default=[])
    parser.addini("voiceperf_claim_pattern", "regular expression a claim file's name must match under the claim "
                  "folders (a file named on the command line is always read)", default=r"\.ya?ml$")
    parser.addini("voiceperf_timeout", "time limit of one claim case in seconds (unset: 900, and a claim's own "
                  "timeout stands; set: a cap no claim can raise)", default="")
    parser.addini("voiceperf_start_timeout", "time limit of one engine start in seconds", default="600")
    parser.addini("voiceperf_ceiling_slack", "how far above a measured ceiling a figure may be", default="0.03")
    parser.addini("voiceperf_tolerance", "relative change the baseline gate tolerates (above the machine's "
                  "run-to-run noise: voiceperf repro measures it)", default=str(DEFAULT_TOLERANCE))
    parser.addini("voiceperf_alpha", "significance level of the baseline gate", default="0.05")
    parser.addini("voiceperf_gate", "with a baseline: changes (known failures do not fail the run) or absolute",
                  default="changes")
    parser.addini("voiceperf_min_guarded", "share of the baseline's figures a gated run must decide "
                  "(regressed, improved or unchanged), else it fails", default="0.8")
    parser.addini("voiceperf_baseline_missing", "a --voiceperf-baseline that does not exist yet: 'pass' (a notice; "
                  "failed claims are reported as xfailed: nothing to gate against) or 'fail' (usage error)",
                  default="pass")
    parser.addini("voiceperf_gate_max_rounds", "with a baseline: rounds a case may take until the gate decides "
                  "its figures", default="10")
    parser.addini("voiceperf_gate_round_seconds", "with a baseline: seconds the rounds added until the gate decides "
                  "may take per case", default="180")
    parser.addini("voiceperf_save_min_rounds", "rounds per timed case of a run saved with --voiceperf-save (a "
                  "baseline's rounds bound what later runs can decide; --voiceperf-rounds wins)", default="6")
    parser.addini("voiceperf_disturbed_drops", "rounds of a probe call dropped in a row as disturbed before the run "
                  "waits for a quiet machine (then, still disturbed, the call is unmeasured)", default="3")
    parser.addini("voiceperf_quiet_wait", "after voiceperf_disturbed_drops rounds of a probe dropped in a row: seconds "
                  "to wait for a quiet machine before taking them again (0: give up at once)", default="120")
    parser.addini("voiceperf_engine_args", "engine options, one per line: FAMILY:KEY=VALUE", type="linelist",
                  default=[])
    parser.addini("voiceperf_llm_engine", "the engine family llm.* calls with engine 'auto' run on "
                  "(--voiceperf-llm-engine)", default="")
    parser.addini("voiceperf_python", "engines in environments of their own, one per line: ENGINE=PYTHON "
                  "(--voiceperf-python adds to and overrides these)", type="linelist", default=[])
    parser.addini("voiceperf_llms", "your own LLMs, one per line: NAME=PATH (joins every LLM claim's models)",
                  type="linelist", default=[])
    g.addoption("--voiceperf-rounds", metavar="MIN[:MAX]",
                help="independent rounds per case: MIN before deciding, up to MAX while the interval straddles "
                     "the bound (default: ini voiceperf_min_rounds / voiceperf_max_rounds)")
    g.addoption("--voiceperf-all-figures", action="store_true",
                help="the baseline gate compares every probe output with a direction, not only the metric and "
                     "each probe's primary figure")
    parser.addini("voiceperf_min_rounds", "rounds per case before the verdict is decided", default="3")
    parser.addini("voiceperf_max_rounds", "rounds per case at most while the interval straddles the bound", default="6")
    parser.addini("voiceperf_round_seconds", "seconds the rounds added to one case may take", default="60")
    parser.addini("voiceperf_noise_floor", "the verdict's interval is at least the figure +- this fraction "
                  "(drift between runs that one run's rounds cannot show)", default="0.01")
    parser.addini("voiceperf_disturbed_cpu", "CPU cores other processes may use during a round before it is "
                  "disturbed (default 0.25, or the environment's VOICEPERF_DISTURBED_CPU)", default="")


def kv(items: list[str], what: str, convert=str) -> dict:
    out = {}
    for item in items:
        if "=" not in item:
            raise pytest.UsageError(f"--voiceperf-{what} expects NAME=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        try:
            out[k.strip()] = convert(v.strip())
        except ValueError:
            raise pytest.UsageError(f"--voiceperf-{what} {item!r}: {v!r} is not a number") from None
    return out


def engine_pythons(config) -> None:
    """--voiceperf-python / ini voiceperf_python: each engine family's interpreter, checked now."""
    from .engines import families, interpreters

    pythons = {**kv(list(config.getini("voiceperf_python")), "python"), **kv(config.getoption("voiceperf_python"), "python")}
    try:
        interpreters.configure(pythons, known=set(families()))
    except interpreters.InterpreterError as exc:
        raise pytest.UsageError(str(exc)) from None


def llm_engine(config) -> str | None:
    """--voiceperf-llm-engine / ini voiceperf_llm_engine: an engine family that serves llm.* calls."""
    from .engines import families, of_kind

    name = (config.getoption("voiceperf_llm_engine") or config.getini("voiceperf_llm_engine") or "").strip()
    if not name:
        return None
    if name not in of_kind("llm"):
        known = families()
        why = (f"engine family {name!r} does not serve llm.* calls (kind {known[name].kind!r})" if name in known
               else f"no engine family {name!r}")
        raise pytest.UsageError(f"--voiceperf-llm-engine {name}: {why}; the LLM families here: {', '.join(of_kind('llm'))}")
    return name


def disturbed_cpu(config) -> float:
    v = config.getini("voiceperf_disturbed_cpu") or os.environ.get("VOICEPERF_DISTURBED_CPU") or "0.25"
    try:
        return float(v)
    except ValueError:
        raise pytest.UsageError(f"voiceperf_disturbed_cpu must be a number of CPU cores, got {v!r}") from None


def rounds(config) -> dict:
    def as_int(v, what):
        try:
            n = int(v)
        except ValueError:
            raise pytest.UsageError(f"{what} must be a whole number of rounds, got {v!r}") from None
        if n < 1:
            raise pytest.UsageError(f"{what} must be 1 or more, got {n}")
        return n

    lo = as_int(config.getini("voiceperf_min_rounds"), "ini voiceperf_min_rounds")
    hi = as_int(config.getini("voiceperf_max_rounds"), "ini voiceperf_max_rounds")
    opt = config.getoption("voiceperf_rounds")
    if opt:
        a, _, b = str(opt).partition(":")
        lo = as_int(a, "--voiceperf-rounds MIN")
        hi = as_int(b, "--voiceperf-rounds MAX") if b else max(hi, lo)
    if lo > hi:
        raise pytest.UsageError(f"voiceperf rounds: min {lo} is above max {hi}")
    return {"min_rounds": lo, "max_rounds": hi}


def _engine_arg_families() -> list[str]:
    """The families that take the operator's engine options (Family.engine_args: vLLM's LLM(...)
    arguments, and those of a plugin family that declares it)."""
    from .engines import families

    return [n for n, f in families().items() if f.engine_args]


PLUGIN_DECIDES = ("model", "load_format", "skip_tokenizer_init", "tokenizer")


def engine_args(items: list[str]) -> dict[str, dict]:
    """FAMILY:KEY=VALUE items -> {family: {key: value}}; values are read as JSON where they parse
    (true, 256, 0.9, {"level": 0}), else kept as text (fp8)."""
    import json

    out: dict[str, dict] = {}
    for item in items:
        fam, sep, kv = item.partition(":")
        key, eq, val = kv.partition("=")
        if not sep or not eq or not fam.strip() or not key.strip():
            raise pytest.UsageError(f"voiceperf engine option {item!r}: expected FAMILY:KEY=VALUE "
                                    "(e.g. vllm:enforce_eager=true)")
        takes = _engine_arg_families()
        if fam.strip() not in takes:
            raise pytest.UsageError(f"voiceperf engine option {item!r}: options are taken for the "
                                    f"{', '.join(takes)} engine(s), not {fam.strip()!r}")
        if key.strip() in PLUGIN_DECIDES:
            raise pytest.UsageError(f"voiceperf engine option {item!r}: {key.strip()} is the plugin's to set "
                                    "(the model and its weights come from --voiceperf-model / --voiceperf-llm)")
        try:
            v = json.loads(val.strip())
        except ValueError:
            v = val.strip()
        out.setdefault(fam.strip(), {})[key.strip()] = v
    return out


def gate_option(config, opt: str, ini: str, convert=str):
    v = config.getoption(opt)
    if v is None:
        v = config.getini(ini)
    try:
        return convert(v)
    except ValueError:
        raise pytest.UsageError(f"ini option {ini} has a bad value {v!r}") from None
