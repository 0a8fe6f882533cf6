"""One pytest-xdist worker per GPU (``--voiceperf-gpus all|N``).

The controller starts N workers with ``--dist loadgroup``; every claim case is put in the
xdist group of its engine and model, so claims that share an engine run on one worker (one
engine start). Each worker binds ``CUDA_VISIBLE_DEVICES`` to its own GPU before anything
touches CUDA; results travel back in the reports and the controller writes one results file.

``VOICEPERF_FAKE_GPUS=N`` simulates N devices (for testing the scheduling on a CPU machine):
the workers are bound to fake device ids and probes still run on the CPU.
"""
from __future__ import annotations

import os

import pytest


def visible_gpus() -> list[str]:
    fake = os.environ.get("VOICEPERF_FAKE_GPUS")
    if fake:
        return [str(i) for i in range(int(fake))]
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None and env.strip():
        return [d.strip() for d in env.split(",") if d.strip()]
    try:
        import subprocess

        out = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout
        return [ln.strip() for ln in out.splitlines() if ln.strip()]
    except Exception:
        return []


def configure_xdist(config) -> None:
    """Controller side: one worker per GPU, grouped by engine."""
    if not config.pluginmanager.hasplugin("xdist"):
        raise pytest.UsageError("--voiceperf-gpus needs pytest-xdist: pip install pytest-xdist")
    want = config.getoption("voiceperf_gpus")
    gpus = visible_gpus()
    if not gpus:
        raise pytest.UsageError("--voiceperf-gpus: no GPU visible (nvidia-smi lists none)")
    if want != "all":
        try:
            n = int(want)
        except ValueError:
            raise pytest.UsageError(f"--voiceperf-gpus takes 'all' or a number, not {want!r}") from None
        if n < 1 or n > len(gpus):
            raise pytest.UsageError(f"--voiceperf-gpus {n}: {len(gpus)} GPU(s) visible")
        gpus = gpus[:n]
    config.option.numprocesses = len(gpus)
    config.option.tx = ["popen"] * len(gpus)
    config.option.dist = "loadgroup"
    config.stash[_GPUS] = gpus
    config.pluginmanager.register(_Controller(gpus), "voiceperf-gpus")


_GPUS = pytest.StashKey[list]()


class _Controller:
    def __init__(self, gpus: list[str]):
        self.gpus = gpus

    def pytest_configure_node(self, node):
        wid = node.workerinput["workerid"]  # gw0, gw1, ...
        node.workerinput["voiceperf_gpu"] = self.gpus[int(wid[2:]) % len(self.gpus)]

    def pytest_testnodedown(self, node, error):
        """A worker's engines go into the one results file's provenance."""
        from .state import get_session

        vs = get_session(node.config)
        engines = getattr(node, "workeroutput", {}).get("voiceperf_engines")
        if vs is not None and engines:
            vs.engines.started.extend(engines)
        tm = getattr(node, "workeroutput", {}).get("voiceperf_timing")
        if vs is not None and tm:
            vs.worker_timing.append(tm)


def bind_worker(config) -> None:
    """Worker side: see only this worker's GPU (before CUDA is initialised)."""
    gpu = getattr(config, "workerinput", {}).get("voiceperf_gpu")
    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
        os.environ["VOICEPERF_GPU"] = gpu


def group_items(items) -> None:
    """Mark each case with the xdist group of its engine (or of its own claim when it uses none):
    xdist's loadgroup scheduler sends every case of one ``xdist_group`` to one worker. The groups
    are known only once the claim files are read, hence marks added here, not in the files."""
    import re

    for item in items:
        claim = getattr(item, "claim", None)
        if claim is None or item.get_closest_marker("xdist_group") is not None:
            continue
        key = getattr(item, "engine_key", None) or f"claim-{claim.id}"
        item.add_marker(pytest.mark.xdist_group(name=re.sub(r"[^A-Za-z0-9_.:-]", "_", key)))


def ensure_groups(items) -> None:
    """After xdist has applied the marks: xdist 3.8 writes the ``@group`` suffix to ``item._nodeid``,
    which pytest 9 no longer reads (its node id lives in ``item._id``), so the marks would group
    nothing. Write the suffix where pytest 9 reads it, only for items xdist left without one."""
    for item in items:
        mark = item.get_closest_marker("xdist_group")
        if mark is None or "@" in item.nodeid:
            continue
        _set_nodeid(item, f"{item.nodeid}@{mark.kwargs.get('name') or (mark.args[0] if mark.args else 'default')}")


class XdistGroups:
    """Registered under ``--voiceperf-gpus``: its hook runs after xdist's (trylast)."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config, items):
        if getattr(config.option, "loadgroup", False):
            ensure_groups(items)


def _set_nodeid(item, nodeid: str) -> None:
    try:  # pytest >= 9 keeps a NodeId object (xdist 3.8's own `_nodeid` assignment misses it)
        from _pytest.nodeid import coerce_node_id

        item._id = coerce_node_id(nodeid)
    except ImportError:  # pytest < 9
        item._nodeid = nodeid
