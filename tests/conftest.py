import os

import pytest

pytest_plugins = ["pytester"]


# C extensions the tests import in this process (through the plugin's helpers: CER, linear fits,
# random checkpoints). Pytester snapshots sys.modules when a test starts and drops whatever the test
# imported when it ends, so the next test imports them a second time into the same interpreter:
# torch then fails with "SystemError: bad call flags", numpy warns that it was reloaded, and the
# process ends in a segfault while collecting garbage. Imported once here, before any Pytester
# exists, they are in every snapshot and stay.
HEAVY = ("numpy", "scipy.stats", "torch", "safetensors.torch", "transformers", "jiwer")


def _import_the_plugin():
    # The same snapshot keeps the package ``pytest_voiceperf`` (the entry point loads it) but drops the
    # submodules a test imported, while the package's attributes still point at them: the next test's
    # ``from pytest_voiceperf import results`` then imports record.py again beside a gate.py bound to the
    # dropped copy, and isinstance(doc, ResultsFile) fails. All 44 modules import in ~0.3 s (the engines
    # themselves are imported lazily, inside the worker).
    import importlib
    import pkgutil

    import pytest_voiceperf

    for m in pkgutil.walk_packages(pytest_voiceperf.__path__, "pytest_voiceperf."):
        importlib.import_module(m.name)


def pytest_configure(config):
    # run the plugin under test in its own process, as a user would
    config.option.runpytest = "subprocess"
    if not config.getoption("voiceperf", False):  # `pytest --voiceperf` loads this conftest too
        import importlib

        for name in HEAVY:
            try:
                importlib.import_module(name)
            except ImportError:
                pass
        _import_the_plugin()


@pytest.fixture(autouse=True, scope="session")
def _claims_tolerate_a_busy_machine():
    # the claims these tests run must not turn "disturbed" because the developer's machine is busy
    # (an editor, a build, another test run): their rounds are judged against 4 cores of other
    # load unless a test sets voiceperf_disturbed_cpu itself (tests/test_rounds.py does, with a real
    # load). Session-scoped so module fixtures that run claims see it too; a fixture, not a session
    # hook, because `pytest --voiceperf` loads this conftest as well (testpaths).
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VOICEPERF_DISTURBED_CPU", "4")
        # the pytest runs these tests start load the pytest plugins of every installed package; two of the
        # lock's (hypothesis, hydra-core) cost 1.2 s of each run's 1.8 s start on the 2-core VM, and no
        # test uses them
        addopts = os.environ.get("PYTEST_ADDOPTS", "")
        mp.setenv("PYTEST_ADDOPTS", f"{addopts} -p no:hypothesispytest -p no:hydra_pytest".strip())
        yield


@pytest.fixture
def vp(pytester):
    """A pytester project with the deterministic t.const probe and an empty claims folder."""
    from helpers import CONST_PROBE

    pytester.makeconftest(CONST_PROBE)
    pytester.mkdir("claims")
    return pytester
