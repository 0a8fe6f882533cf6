"""The interval, the sequential stop, modes, searches and expressions: the pure core of a verdict."""

import pytest

from pytest_voiceperf import stats


def test_interval_is_student_t_over_rounds():
    assert stats.interval([1.0]) is None
    assert stats.interval([2.0, 2.0, 2.0]) == (2.0, 2.0)
    lo, hi = stats.interval([0.9, 1.1, 1.0])  # mean 1, s 0.1, t(0.975, 2) = 4.303
    assert lo == pytest.approx(1 - 4.303 * 0.1 / 3 ** 0.5, abs=1e-3)
    assert hi == pytest.approx(1 + 4.303 * 0.1 / 3 ** 0.5, abs=1e-3)


def test_decide_needs_the_whole_interval():
    assert stats.decide((0.9, 1.1), 0.8, None) == "passed"
    assert stats.decide((0.5, 0.7), 0.8, None) == "failed"
    assert stats.decide((0.7, 0.9), 0.8, None) == "inconclusive"
    assert stats.decide((0.5, 0.7), None, 1.0) == "passed"
    assert stats.decide((0.86, 0.98), 0.86, 0.98) == "passed"
    assert stats.decide((0.99, 1.2), 0.86, 0.98) == "failed"
    assert stats.decide((0.90, 1.2), 0.86, 0.98) == "inconclusive"


def test_modes_found_and_outliers_are_not_modes():
    m = stats.modes([634, 633, 474, 468, 475])
    assert m is not None and [round(v) for v in m.values] == [474, 633.5] or [round(v) for v in m.values] == [474, 634]
    assert stats.modes([100, 101, 99, 100.5, 120]) is None  # one outlier is not a mode
    assert stats.modes([1.0, 1.01, 0.99, 1.02]) is None  # one cluster
    assert stats.modes([1, 2, 3]) is None  # too few to tell


def test_futility_projects_the_interval_at_the_round_budget():
    # mean on the bound: no number of rounds of this spread decides it
    assert stats.futile([0.9, 1.1, 0.9], 1.0, None, 5) is not None
    # 1.5 +- 0.14 against 1.0: three rounds straddle (t = 12.7 with one), five would not
    assert stats.futile([1.4, 1.6], 1.0, None, 5) is None
    # a run-to-run floor of 2% around 0.99 always covers a bound of 1.0
    assert stats.futile([0.99, 0.99, 0.99], None, 1.0, 6, floor=0.02) is not None
    assert stats.futile([0.99, 0.99, 0.99], None, 1.0, 6) is None
    assert stats.futile([0.9, 1.1, 0.9], 1.0, None, 3) is None  # the budget is spent anyway


def test_search_bracket_from_the_spread_of_the_timed_points():
    """(q25, q75) of each size's steady steps (stats.spread). A size surely fits when its steps' q75 (+ floor)
    is within the limit, surely misses when their q25 (- floor) is over it; the bracket runs from the
    largest sure fit to one below the smallest sure miss."""
    pts = {1: (0.070, 0.090), 2: (0.085, 0.095)}  # H100, 80 ms chunks: one stream at 82.5 ms
    assert stats.search_bracket(pts, 0.080, 0.01, found=0) == (0, 1)  # 1 straddles, 2 surely misses
    pts = {1: (0.040, 0.050), 2: (0.041, 0.052), 4: (0.078, 0.084)}
    assert stats.search_bracket(pts, 0.080, 0.01, found=2) == (2, 4)  # 4 may fit: nothing tried surely misses
    pts[8] = (0.120, 0.140)
    assert stats.search_bracket(pts, 0.080, 0.01, found=2) == (2, 7)
    pts[4] = (0.079, 0.0799)  # fits by its median (0.0795), but not surely with the 1% floor
    assert stats.search_bracket(pts, 0.080, 0.01, found=4) == (2, 7)
    assert stats.search_bracket({1: (0.1, 0.1)}, 0.080, 0.01, found=0) == (0, 0)
    inf = float("inf")
    assert stats.search_bracket({1: (0.01,) * 2, 2: (inf,) * 2}, 0.080, 0.0, found=1) == (1, 1)  # out of memory


def test_expr_references():
    from pytest_voiceperf import expr

    assert expr.references("a.x / b.y + max(a.z, 2) * n") == {("a", "x"), ("b", "y"), ("a", "z")}
    assert expr.references("1 + n") == set()


def test_probe_exact_outputs_must_be_outputs():
    from pytest_voiceperf.probes import probe

    with pytest.raises(ValueError, match="not among its outputs"):
        probe("t.bad", outputs={"a": ""}, exact=("b",))(lambda ctx: None)


def test_probes_that_read_settings_declare_them_exact():
    """Probes without repetition samples must say which outputs are exact; asr.streams' count is not."""
    from pytest_voiceperf.probes import load_registry

    reg = load_registry()
    for name in ("asr.streaming_config", "hw.datasheet", "asr.cer"):
        spec = reg.get(name)
        assert spec is not None and spec.exact == frozenset(spec.outputs), name
    assert reg.get("asr.streams").exact == frozenset({"chunk_ms"})
