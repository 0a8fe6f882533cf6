"""Extension points of pytest-voiceperf (as pytest-benchmark's ``hookspec.py``).

Add probes from a ``conftest.py`` or a plugin::

    from pytest_voiceperf.probes import Measurement, probe

    @probe("my.echo_latency", outputs={"latency_s": "s"})
    def echo_latency(ctx, n: int = 10):
        samples = [...]
        return Measurement({"latency_s": median(samples)}, {"latency_s": samples})

    def pytest_voiceperf_add_probes(registry):
        registry.add(echo_latency.voiceperf_probe)

An installed package does the same through the ``pytest_voiceperf.probes`` entry point group
(each entry point names a module whose ``@probe`` functions are added), as the built-in probes
do; such probes are also seen by the ``voiceperf`` CLI (``validate``, ``list``). A name defined
twice is an error.
"""
import pytest


@pytest.hookspec
def pytest_voiceperf_add_probes(registry):
    """Add probes to ``registry`` (a :class:`pytest_voiceperf.probes.Registry`)."""
