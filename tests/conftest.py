import pytest

pytest_plugins = ["pytester"]


def pytest_configure(config):
    # run the plugin under test in its own process, as a user would (torch and engine
    # modules do not survive being imported again and again in one process)
    config.option.runpytest = "subprocess"


@pytest.fixture(autouse=True, scope="session")
def _claims_tolerate_a_busy_machine():
    # the claims these tests run must not turn "disturbed" because the developer's machine is busy
    # (an editor, a build, another test run): their rounds are judged against 4 cores of other
    # load unless a test sets voiceperf_disturbed_cpu itself (tests/test_rounds.py does, with a real
    # load). Session-scoped so module fixtures that run claims see it too; a fixture, not a session
    # hook, because `pytest --voiceperf` loads this conftest as well (testpaths).
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VOICEPERF_DISTURBED_CPU", "4")
        yield


@pytest.fixture
def vp(pytester):
    """A pytester project with the deterministic t.const probe and an empty claims folder."""
    from helpers import CONST_PROBE

    pytester.makeconftest(CONST_PROBE)
    pytester.mkdir("claims")
    return pytester
