"""Engines in environments of their own: ``--voiceperf-python FAMILY=PATH`` (ini ``voiceperf_python``).

vLLM, NeMo and VoxCPM pin conflicting versions of the same packages, and vLLM asks for an environment
of its own. A family given an interpreter runs its worker there: the worker is started with that
``python``, with this package on its path (a folder holding only a link to it, so nothing else of the
pytest environment leaks in) and without the pytest process's ``PYTHONPATH``/``VIRTUAL_ENV``. The
pytest process then needs none of the engines: whether a family is installed, and which versions of
the packages a run records, are asked of its interpreter (one short subprocess each, cached).

Only the standard library here: this module also runs as ``python -m`` inside an engine's
environment, which has none of the plugin's dependencies.
"""
from __future__ import annotations

import atexit
import functools
import importlib.machinery
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

_paths: dict[str, str] = {}  # family -> interpreter (absolute), as configured for this process
_shim: str | None = None
INSPECT_TIMEOUT_S = 120.0


class InterpreterError(ValueError):
    """A --voiceperf-python entry that cannot be used (the message says which and how to fix it)."""


def configure(mapping: dict[str, str], known: set[str] | None = None) -> None:
    """Set the interpreters of engine families (FAMILY -> path to a python). Each must be an
    executable file; a family name not in ``known`` is refused with the known names."""
    out = {}
    for family, path in mapping.items():
        if known is not None and family not in known:
            raise InterpreterError(f"--voiceperf-python {family}={path}: no engine family {family!r} "
                                   f"(known: {', '.join(sorted(known))})")
        p = Path(os.path.expanduser(path))
        if not p.is_absolute():
            p = Path.cwd() / p
        if not p.is_file() or not os.access(p, os.X_OK):
            raise InterpreterError(f"--voiceperf-python {family}={path}: {p} is not an executable file; give the "
                                   "python of the engine's environment, e.g. /venvs/vllm/bin/python")
        out[family] = str(p)  # not resolved: a venv's bin/python is a link, and the link is the venv
    _paths.clear()
    _paths.update(out)


def configured() -> dict[str, str]:
    return dict(_paths)


def python_of(family: str) -> str:
    return _paths.get(family, sys.executable)


def is_foreign(family: str) -> bool:
    return family in _paths


def _package_root() -> Path:
    return Path(__file__).resolve().parents[1]


def shim_dir() -> str:
    """A folder holding only a link named ``pytest_voiceperf`` to this package: put on an engine
    environment's path, it brings this package and nothing else of the pytest environment."""
    global _shim
    if _shim is None or not os.path.isdir(_shim):
        d = tempfile.mkdtemp(prefix="voiceperf-shim-")
        os.symlink(_package_root(), os.path.join(d, "pytest_voiceperf"))
        atexit.register(shutil.rmtree, d, True)
        _shim = d
    return _shim


def worker_env(family: str, env: dict) -> dict:
    """The environment of a family's worker: unchanged in this interpreter; in a foreign one, without
    what points at the pytest environment, and with this package on the path."""
    if not is_foreign(family):
        return env
    out = {k: v for k, v in env.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "__PYVENV_LAUNCHER__")}
    out["PYTHONPATH"] = shim_dir()
    out["PYTHONNOUSERSITE"] = "1"
    return out


@functools.cache
def inspect(python: str, modules: tuple[str, ...], packages: tuple[str, ...]) -> dict:
    """Ask ``python`` which of ``modules`` it has (looked up, not imported) and the versions of
    ``packages``; ``{"error": ...}`` when it cannot answer."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PYTHONPATH"] = shim_dir()
    env["PYTHONNOUSERSITE"] = "1"
    cmd = [python, "-m", "pytest_voiceperf.engines.interpreters", json.dumps({"modules": modules, "packages": packages})]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=INSPECT_TIMEOUT_S, env=env, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"error": f"{python} could not be asked ({type(exc).__name__}: {exc})"}
    try:
        return dict(json.loads(r.stdout.strip().splitlines()[-1]))
    except (ValueError, IndexError, TypeError):
        tail = (r.stderr or r.stdout).strip().splitlines()[-3:]
        return {"error": f"{python} exit status {r.returncode}: " + " | ".join(tail)}


def missing(family: str, modules: tuple[str, ...]) -> tuple[str | None, str | None]:
    """(the first module of ``modules`` the family's interpreter lacks, an error of the interpreter)."""
    if not is_foreign(family):
        return next((m for m in modules if not module_present(m)), None), None
    got = inspect(python_of(family), tuple(modules), ())
    if "error" in got:
        return None, str(got["error"])
    have = got.get("modules") or {}
    return next((m for m in modules if not have.get(m)), None), None


def module_present_anywhere(name: str) -> bool:
    """A ``requires: [module:NAME]``: installed here or in an engine's own environment."""
    if module_present(name):
        return True
    return any((inspect(py, (name,), ()).get("modules") or {}).get(name) for py in sorted(set(_paths.values())))


def provenance(packages: list[str]) -> dict:
    """family -> {python, python_version, packages} of each configured interpreter (for the results file)."""
    out = {}
    for family, py in sorted(_paths.items()):
        got = inspect(py, (), tuple(packages))
        out[family] = {"python": py, **({"error": got["error"]} if "error" in got else
                                        {"python_version": got.get("python_version"), "packages": got.get("packages") or {}})}
    return out


def module_present(name: str) -> bool:
    """Is the module installed? Looked up without importing anything: ``importlib.util.find_spec('a.b')``
    imports ``a`` (a claim file's ``requires: [module:a.b]`` would run a's code), and a package that
    fails to import is absent, never an error of the case."""
    if name in sys.modules:
        return True
    parts = name.split(".")
    try:
        spec = importlib.util.find_spec(parts[0])
        for i in range(1, len(parts)):
            if spec is None or not spec.submodule_search_locations:
                return False
            spec = importlib.machinery.PathFinder.find_spec(".".join(parts[: i + 1]),
                                                            list(spec.submodule_search_locations))
        return spec is not None
    except Exception:  # a broken finder or package metadata: not usable here
        return False


def versions(names) -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for n in names:
        try:
            out[n] = version(n)
        except PackageNotFoundError:
            pass
        except Exception:  # broken metadata: no version to record
            pass
    return out


if __name__ == "__main__":  # asked by inspect(), in the engine's environment
    import platform

    ask = json.loads(sys.argv[1])
    print(json.dumps({"python_version": platform.python_version(), "executable": sys.executable,
                      "modules": {m: module_present(m) for m in ask.get("modules", [])},
                      "packages": versions(ask.get("packages", []))}))
