"""``voiceperf``: list, validate, compare and report claims and results outside pytest."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .stats import DEFAULT_TOLERANCE

COMPARE_DEFAULTS = {"tolerance": DEFAULT_TOLERANCE, "alpha": 0.05, "mode": "changes", "min_guarded": 0.8}


def _claim_files(paths: list[str]) -> list[Path]:
    out = []
    for p in paths or ["claims"]:
        path = Path(p)
        if path.is_dir():
            out += sorted(q for q in path.rglob("*") if q.suffix in (".yaml", ".yml") and not q.is_dir())
        elif path.exists():
            out.append(path)
        else:
            print(f"{p}: no such file or folder", file=sys.stderr)
    return out


def _conftests(paths: list[str]) -> list[Path]:
    """The conftest.py files pytest would load for these claim paths: those of the folders from
    the current directory down to each path, and those inside a named folder."""
    cwd = Path.cwd().resolve()
    found: dict[Path, None] = {}
    for p in paths or ["claims"]:
        path = Path(p).resolve()
        if not path.exists():
            continue
        folder = path if path.is_dir() else path.parent
        chain = [folder, *folder.parents]
        if cwd in chain:
            chain = chain[: chain.index(cwd) + 1]
        else:
            chain = [folder]
        for d in reversed(chain):
            if (d / "conftest.py").is_file():
                found[d / "conftest.py"] = None
        if path.is_dir():
            for c in sorted(path.rglob("conftest.py")):
                found[c.resolve()] = None
    return list(found)


def _registry(paths: list[str] | None = None, conftest: bool = False):
    """The same registry as a pytest run over ``paths``: built-ins, installed plugins' probes
    (entry points) and, with ``conftest``, the probes conftest.py files add through
    ``pytest_voiceperf_add_probes``. Loading a conftest.py runs it: a CI job that lints a pull
    request's claims must not run the pull request's code, so it is the user's choice."""
    import importlib.util

    from .probes import DuplicateProbe, load_registry

    try:
        reg = load_registry(on_error=lambda msg: print(f"warning: {msg}", file=sys.stderr))
        found = _conftests(paths or [])
        if found and not conftest:
            print(f"note: {len(found)} conftest.py file(s) not loaded (loading runs their code): claims that use "
                  f"probes they add are reported as unknown probes; --conftest loads them ({found[0]})",
                  file=sys.stderr)
            found = []
        for i, c in enumerate(found):
            try:
                spec = importlib.util.spec_from_file_location(f"_voiceperf_conftest_{i}", c)
                assert spec is not None and spec.loader is not None
                mod = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(mod)
                hook = getattr(mod, "pytest_voiceperf_add_probes", None)
                if hook is not None:
                    hook(registry=reg)
            except DuplicateProbe:
                raise
            except Exception as exc:  # as pytest would, but one broken conftest must not stop validation
                print(f"warning: {c}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return reg
    except DuplicateProbe as exc:
        print(f"voiceperf: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def cmd_list(args) -> int:
    from .claims import ClaimError, load_claim

    reg = _registry(args.paths, args.conftest)
    bad = 0
    device = args.device or ("cuda" if args.profile == "cuda" else "cpu")
    totals = {"all": 0, "kept": 0, "other": 0, "cond": 0}
    for f in _claim_files(args.paths):
        try:
            c = load_claim(f, reg, Path.cwd())
        except ClaimError as e:
            print(f"INVALID {e.render()}")
            bad += 1
            continue
        params = ", ".join(f"{k}={v}" for k, v in c.model.params.items()) or "-"
        probes = ", ".join(sorted({call.probe for call in c.calls}))
        req = ", ".join(c.model.requires) or "-"
        print(f"{c.id}  ({f})\n    {c.model.title}\n    params: {params}\n    probes: {probes}\n"
              f"    requires: {req}\n    expect: {c.model.metric} {c.model.expect.describe()} [{c.model.unit}]")
        if args.profile:
            bad += _list_profile(c, args.profile, device, totals)
    if args.profile:
        print(f"profile {args.profile} on {device}: {totals['kept']} of {totals['all']} cases kept"
              f" ({totals['other']} of another device left out, {totals['cond']} by the claims' profile conditions)")
    return 1 if bad else 0


def _list_profile(c, profile: str, device: str, totals: dict) -> int:
    """The cases of one claim a profile keeps on a device, and why the others are left out."""
    from .expr import ExprError

    kept, out = [], []
    for case in c.cases():
        totals["all"] += 1
        try:
            keep = case.in_profile(profile, device)
        except ExprError as exc:
            print(f"    INVALID profiles.{profile} at {c.path}:{c.line('profiles', profile)}: {exc}")
            return 1
        if keep:
            kept.append(case.ident or c.id)
            totals["kept"] += 1
        elif case.other_device(device):
            out.append(f"{case.ident or c.id} ({case.other_device(device)})")
            totals["other"] += 1
        else:
            out.append(f"{case.ident or c.id} (profiles.{profile})")
            totals["cond"] += 1
    print(f"    profile {profile}: keeps {len(kept)} of {len(kept) + len(out)}: {', '.join(kept) or '-'}")
    if out:
        print(f"    left out: {', '.join(out)}")
    return 0


def cmd_validate(args) -> int:
    from .claims import ClaimError, load_claim

    reg = _registry(args.paths, args.conftest)
    ok = bad = 0
    ids: dict[str, str] = {}
    for f in _claim_files(args.paths):
        try:
            c = load_claim(f, reg, Path.cwd())
        except ClaimError as e:
            print(e.render())
            bad += 1
            continue
        where = f"{f}:{c.line('id')}"
        if c.id in ids:
            print(f"{where}: duplicate claim id {c.id!r}: it is already defined at {ids[c.id]}")
            bad += 1
            continue
        ids[c.id] = where
        ok += 1
    print(f"{ok} valid, {bad} invalid")
    return 1 if bad else 0


def cmd_compare(args) -> int:
    """The gate outside pytest. Exit 0: passed; 1 (with --fail): a figure regressed, a verdict changed
    for the worse, or too little was guarded; 2: a file cannot be read or the machines differ."""
    from . import gate, provenance
    from .results import read

    if len(args.files) > 2:
        print("voiceperf compare takes [OLD] NEW", file=sys.stderr)
        return 2
    try:
        new = read(args.files[-1])
        ran = new.provenance.gate or {}
        if len(args.files) == 1:  # the baseline this run was gated against, with the run's settings
            if not ran.get("baseline") and args.format == "markdown" and ran.get("notice"):
                print(f"## voiceperf gate: no baseline\n\n{ran['notice']}")
                return 0
            if not ran.get("baseline"):
                print(f"{args.files[0]}: this run had no baseline ({ran.get('notice') or 'no --voiceperf-baseline'}); "
                      "name one: voiceperf compare OLD NEW", file=sys.stderr)
                return 2
            for k in ("tolerance", "alpha", "mode", "min_guarded"):
                if ran.get(k) is not None and getattr(args, k) == COMPARE_DEFAULTS[k]:
                    setattr(args, k, ran[k])
        old_path = args.files[0] if len(args.files) == 2 else ran["baseline"]
        old = read(old_path)
    except (ValueError, FileNotFoundError, OSError) as exc:
        print(exc, file=sys.stderr)
        return 2
    try:
        bad = provenance.machine_mismatches(old.provenance, new.provenance, args.allow_mismatch)
    except ValueError as exc:
        print(f"--allow-mismatch: {exc}", file=sys.stderr)
        return 2
    if bad:
        print("refusing to compare runs of different machines: " + "; ".join(bad.values()) +
              f" (use --allow-mismatch {','.join(bad)} to compare anyway)", file=sys.stderr)
        return 2
    g = gate.Gate(str(old_path), old, tolerance=args.tolerance, alpha=args.alpha, all_figures=args.all_figures,
                  new_provenance=new.provenance, mode=args.mode, min_guarded=args.min_guarded)
    g.plan([r.nodeid for r in new.results])
    # the run's own record of its looks (rounds taken while the gate waited) sets the correction
    g.looks = int(ran.get("looks") or 1)
    changed = provenance.changes(old.provenance, new.provenance)
    lines = []
    for r in new.results:
        failing = r.outcome in ("failed", "error") and not r.reason.startswith("regressed")
        if r.outcome in gate.FAILED and g.known_failure(r.nodeid) and args.mode == "changes":
            g.known.append(r.nodeid)
        elif failing and args.mode == "absolute":
            g.changed_verdicts.append((r.nodeid, f"{r.outcome} (absolute mode)"))
            lines.append(f"{'FAILED':<12} {r.nodeid}  {r.reason[:200]}")
        elif failing and (change := g.verdict_change(r.nodeid, r.outcome)):
            lines.append(f"{'VERDICT':<12} {r.nodeid}  {change}: {r.reason[:200]}")
        if r.value is None and not r.probes and not r.is_disturbed:
            continue
        for c in g.check(r):
            if gate.shown(c) or args.verbose:
                lines.append(f"{c.verdict.upper():<12} {r.nodeid}  {c.text()}")
    if args.format == "markdown":
        print(g.markdown(changed))
    else:
        for line in g.header(changed) + lines:
            print(line)
        print(g.summary_line())
        print(g.guarded_line())
    if not (g.failed() and args.fail):
        return 0
    return 3 if g.undecided() else 1


def cmd_save(args) -> int:
    from .results import read
    from .storage import save_run

    try:
        doc = read(args.results)
    except (ValueError, OSError) as exc:
        print(exc, file=sys.stderr)
        return 2
    if not (doc.provenance.complete and "complete" in doc.provenance.model_fields_set):  # said so, not a default
        print(f"{args.results}: an incomplete run is not a baseline (finish it with --voiceperf-resume)", file=sys.stderr)
        return 2
    print(f"voiceperf: saved baseline {save_run(doc.dump(), Path(args.root), args.name)}")
    return 0


def cmd_merge(args) -> int:
    from .results import merge, read, write

    try:
        docs = [(p, read(p)) for p in args.results]
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    try:
        doc, notes = merge(docs, allow_mismatch=args.allow_mismatch)
    except ValueError as exc:
        print(f"refusing to merge: {exc}", file=sys.stderr)
        return 2
    for n in notes:
        print(n)
    doc.provenance.command = ("voiceperf merge " + " ".join(args.results) + f" -o {args.output}"
                                    + (" --allow-mismatch" if args.allow_mismatch else ""))
    out = write(args.output, doc)
    counts = ", ".join(f"{v} {k}" for k, v in sorted(doc.provenance.counts.items()))
    print(f"wrote {out}: {len(doc.results)} cases ({counts}) from {len(docs)} files"
          + ("" if doc.provenance.complete else "; an input was incomplete, so this file is .partial"))
    return 0


def cmd_report(args) -> int:
    from .html_report import write_report

    try:
        out = write_report(args.results, args.output)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    print(f"wrote {out['html']} and {out['markdown']} ({len(out['plots'])} plots)")
    return 0


def cmd_doctor(a) -> int:
    from . import doctor
    from .engines import interpreters

    pythons = {}
    for item in a.python:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            print(f"voiceperf doctor: --python {item}: give ENGINE=PYTHON, e.g. vllm=/venvs/vllm/bin/python",
                  file=sys.stderr)
            return 2
        pythons[name.strip()] = path.strip()
    try:
        interpreters.configure(pythons, set(doctor.ENGINES))
    except interpreters.InterpreterError as exc:
        print(f"voiceperf doctor: {exc}", file=sys.stderr)
        return 2
    return doctor.main(a.disturbed_cpu, interpreters.configured())


def cmd_export(args) -> int:
    """The results in another tool's format: pytest-benchmark (a file ``pytest-benchmark compare``
    reads), github-action-benchmark (a folder: bigger-is-better.json and smaller-is-better.json, one per
    ``tool`` setting), bencher (a BMF file for ``bencher run --adapter json``)."""
    import json

    from . import exports
    from .results import atomic_write_text, read

    try:
        doc = read(args.results)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    out = Path(args.output)
    if args.format == "github-action-benchmark":
        files = {"bigger-is-better.json": "customBiggerIsBetter", "smaller-is-better.json": "customSmallerIsBetter"}
        data = exports.github_action_benchmark(doc)
        for name, tool in files.items():
            atomic_write_text(out / name, json.dumps(data[tool], indent=1) + "\n")
        print(f"wrote {out}/bigger-is-better.json ({len(data['customBiggerIsBetter'])} figures, tool: "
              f"customBiggerIsBetter) and {out}/smaller-is-better.json ({len(data['customSmallerIsBetter'])}, "
              "tool: customSmallerIsBetter)")
        return 0
    if args.format == "bencher":
        bmf = exports.bencher(doc)
        atomic_write_text(out, json.dumps(bmf, indent=1) + "\n")
        print(f"wrote {out} ({len(bmf)} benchmarks, Bencher Metric Format)")
        return 0
    try:
        pb, skipped = exports.pytest_benchmark(doc)
    except ImportError:
        print("voiceperf export: the pytest-benchmark format needs pytest-benchmark (pip install pytest-benchmark)",
              file=sys.stderr)
        return 2
    atomic_write_text(out, json.dumps(pb, indent=1) + "\n")
    print(f"wrote {out} ({len(pb['benchmarks'])} benchmarks; durations over rounds, rates as their inverse)")
    for s in skipped:
        print(f"  left out: {s}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="voiceperf", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    conftest_help = ("load the conftest.py files pytest would load, for the probes they add (runs their code: not "
                     "for a pull request's files)")
    s = sub.add_parser("list", help="the claims, their params and what they need")
    s.add_argument("paths", nargs="*")
    s.add_argument("--profile", metavar="NAME", help="also the cases this profile keeps (cpu, cuda, full, a claim's own)")
    s.add_argument("--device", choices=("cpu", "cuda"), help="the device of that run (default: cuda for the cuda "
                                                             "profile, else cpu)")
    s.add_argument("--conftest", action="store_true", help=conftest_help)
    s.set_defaults(fn=cmd_list)
    s = sub.add_parser("validate", help="schema and expression check with file:line errors (runs no code)")
    s.add_argument("paths", nargs="+")
    s.add_argument("--conftest", action="store_true", help=conftest_help)
    s.set_defaults(fn=cmd_validate)
    s = sub.add_parser("compare", help="compare two results files as the baseline gate does (NEW alone: against "
                                       "the baseline that run was gated against, with its settings)")
    s.add_argument("files", nargs="+", metavar="[OLD] NEW")
    s.add_argument("--fail", action="store_true", help="exit 1 when a figure regressed or a verdict changed for "
                                                       "the worse; exit 3 when nothing did but less than --min-guarded "
                                                       "of the figures was decided (measure again)")
    s.add_argument("--tolerance", type=float, default=COMPARE_DEFAULTS["tolerance"])
    s.add_argument("--alpha", type=float, default=COMPARE_DEFAULTS["alpha"])
    s.add_argument("--allow-mismatch", nargs="?", const="all", default=None, metavar="CHECK[,CHECK]",
                   help="compare runs of different machines: the checks to waive (gpu, cpu_model, cpu_isa; all "
                        "when none is named)")
    s.add_argument("--mode", choices=("changes", "absolute"), default=COMPARE_DEFAULTS["mode"],
                   help="changes: a claim that failed in OLD too is a known failure, not a verdict change")
    s.add_argument("--min-guarded", type=float, default=COMPARE_DEFAULTS["min_guarded"],
                   help="the share of OLD's figures that must be decided (default 0.8)")
    s.add_argument("--format", choices=("text", "markdown"), default="text",
                   help="markdown: for a CI job summary or a pull-request comment")
    s.add_argument("--all-figures", action="store_true",
                   help="compare every probe output with a direction, not only the metric and primary figures")
    s.add_argument("-v", "--verbose", action="store_true")
    s.set_defaults(fn=cmd_compare)
    s = sub.add_parser("save", help="save a complete results file as a baseline (.voiceperf/<machine-id>/NNNN_NAME.json)")
    s.add_argument("results")
    s.add_argument("--name", default="run")
    s.add_argument("--root", default=".", help="the project folder (pytest's rootdir; default: here)")
    s.set_defaults(fn=cmd_save)
    s = sub.add_parser("merge", help="one results file from several runs of one setup (split suites)")
    s.add_argument("results", nargs="+")
    s.add_argument("-o", "--output", required=True)
    s.add_argument("--allow-mismatch", action="store_true")
    s.set_defaults(fn=cmd_merge)
    s = sub.add_parser("repro", help="run a claim set N times: verdict flips, inconclusive cases, gate false alarms")
    s.add_argument("--runs", type=int, default=2)
    s.add_argument("--out", default="voiceperf-repro", help="folder for runK.json and their logs")
    s.add_argument("--slow-run", metavar="ARGS", help="one more run with these pytest arguments, compared with the "
                                                     "first (e.g. \"--voiceperf-threads 1\"): is the slowdown caught?")
    s.add_argument("--results", nargs="+", metavar="JSON", help="analyse these results files instead of running")
    s.add_argument("--slow-results", metavar="JSON", help="with --results: the slowed run")
    s.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE)
    s.add_argument("--alpha", type=float, default=0.05)
    s.add_argument("--fail", action="store_true", help="exit 1 on a flip, a false alarm or an uncaught slowdown")
    s.add_argument("pytest_args", nargs=argparse.REMAINDER, help="-- then the pytest arguments of every run")
    s.set_defaults(fn=lambda a: __import__("pytest_voiceperf.repro", fromlist=["main"]).main(a))
    s = sub.add_parser("doctor", help="what this machine is and what would spoil a measurement, with the fixes")
    s.add_argument("--disturbed-cpu", type=float, default=0.25, help="other processes' CPU cores that disturb")
    s.add_argument("--python", action="append", default=[], metavar="ENGINE=PYTHON",
                   help="an engine in an environment of its own, as --voiceperf-python gives it")
    s.set_defaults(fn=cmd_doctor)
    s = sub.add_parser("export", help="the results for pytest-benchmark, github-action-benchmark or Bencher")
    s.add_argument("results")
    s.add_argument("--format", choices=("pytest-benchmark", "github-action-benchmark", "bencher"), required=True)
    s.add_argument("-o", "--output", required=True, help="a file (a folder for github-action-benchmark)")
    s.set_defaults(fn=cmd_export)
    s = sub.add_parser("report", help="HTML and Markdown report with plots")
    s.add_argument("results")
    s.add_argument("-o", "--output", default="voiceperf-report")
    s.set_defaults(fn=cmd_report)
    args = p.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
