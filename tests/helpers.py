"""Shared bits for the plugin's own tests."""
import textwrap

# a conftest that adds a deterministic probe, so verdict logic can be tested exactly;
# real probes (hw.*, engines) are exercised in their own tests.
CONST_PROBE = textwrap.dedent('''
    from pytest_voiceperf.probes import Measurement, Unmeasured, probe

    @probe("t.const", outputs={"x": "", "y": "", "rate": "tok/s"})
    def const(ctx, x: float = 1.0, y: float = 2.0, spread: float = 0.0, unmeasured: str = "",
              implies_bw: float = 0.0, jitter: float = 0.0, seed: int = 0, rounds_x: str = "",
              busy_s: float = 0.0):
        """x with optional noise: ``jitter`` between repetitions (seeded per round), ``rounds_x`` the
        figure of each successive round ("0.9,1.1,1.0"; the last one repeats), ``busy_s`` of CPU work."""
        import random, statistics, time
        if unmeasured:
            raise Unmeasured(unmeasured)
        x, y = float(x), float(y)
        if rounds_x:
            xs = [float(v) for v in str(rounds_x).split(",")]
            x = xs[min(ctx.attempt, len(xs) - 1)]
            spread = spread or 0.01  # a timed figure: repetitions differ a little (median = x)
        if busy_s:
            t0 = time.process_time()
            while time.process_time() - t0 < float(busy_s):
                pass
        if jitter:
            rng = random.Random(int(seed) * 1000 + ctx.attempt)
            samples = [x * (1 + jitter * rng.gauss(0, 1)) for _ in range(9)]
        else:
            samples = [x * (1 + spread * d) for d in (-1, -0.5, 0, 0.5, 1)]
        med = statistics.median(samples)
        return Measurement({"x": med, "y": y, "rate": med}, {"x": samples, "rate": samples},
                           implies={"read_bw": float(implies_bw)} if implies_bw else {})

    def pytest_voiceperf_add_probes(registry):
        registry.add(const.voiceperf_probe)
''')


def claim(id="c-one", metric="m.x", expect="{min: 0.5}", measure="m: {probe: t.const, x: 1.0}", extra=""):
    return textwrap.dedent(f"""\
        id: {id}
        title: a test claim
        statement: x is big enough
        measure:
          {measure}
        metric: {metric}
        unit: ""
        expect: {expect}
        """) + textwrap.dedent(extra)
