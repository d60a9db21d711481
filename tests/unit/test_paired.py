"""The paired verdict (tools/figures/paired.py) at its edges, and its interval's quantile exactly:
the simulation (test_paired_simulation.py) holds its coverage, this tells a t interval
from a z interval at the request counts where they differ."""

from __future__ import annotations

import math

import numpy as np
import pytest

from vllm_kimi_eagle.tools.figures import paired


def spread_pairs(n: int, mean: float = 0.2) -> tuple[list[float], list[float]]:
    """n pairs whose differences are ``mean`` +/- 0.1, alternating (sd known exactly)."""
    diffs = [mean + (0.1 if i % 2 else -0.1) for i in range(n)]
    return [2.0 + d for d in diffs], [2.0] * n


@pytest.mark.parametrize("n", [paired.MIN_PAIRS, 11, 30])
def test_the_interval_is_students_t_not_the_normal(n):
    a, b = spread_pairs(n)
    d = paired.paired_difference(a, b)
    diffs = [x - y for x, y in zip(a, b)]
    mean = sum(diffs) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in diffs) / (n - 1))
    from scipy import stats

    t_half = stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
    z_half = 1.959964 * sd / math.sqrt(n)
    half = (d["high"] - d["low"]) / 2
    assert half == pytest.approx(t_half, rel=2e-3)
    assert abs(half - z_half) > 0.02 * z_half  # t's tails are wider at these counts


def test_names_must_match_the_requests():
    with pytest.raises(paired.FiguresError, match="2 names for 3 requests"):
        paired.paired_difference([2.0, 2.5, float("nan")], [2.0, 2.0, 2.0], ids=["a", "b"])


def test_a_value_that_is_not_a_number_is_named():
    with pytest.raises(paired.FiguresError, match="request 'c'.*nan"):
        paired.paired_difference([2.0, 2.5, float("nan")], [2.0] * 3, ids=["a", "b", "c"])
    with pytest.raises(paired.FiguresError, match="True"):
        paired.paired_difference([True] * 10, [2.0] * 10)


def test_numpy_numbers_are_numbers():
    a = list(np.float32(2.5) + np.zeros(12, dtype=np.float32))
    b = [np.float64(2.0)] * 12
    assert paired.paired_difference(a, b)["status"] == paired.HIGHER


def test_too_few_pairs_decide_nothing_even_when_tied():
    d = paired.paired_difference([2.0], [2.0])
    assert d["status"] == paired.TOO_FEW
    assert "no verdict from 1 request;" in paired.verdict("A", "B", d, "acceptance")


def test_a_tiny_difference_is_written_as_itself():
    a = [2.0 + 0.0004 + (1e-5 if i % 2 else -1e-5) for i in range(40)]
    d = paired.paired_difference(a, [2.0] * 40)
    line = paired.verdict("A", "B", d, "acceptance")
    assert d["status"] == paired.HIGHER
    assert "by 0.0004 " in line and "0.000 " not in line, line


def test_a_level_is_written_as_it_is():
    a, b = spread_pairs(20)
    d = paired.paired_difference(a, b, level=0.9875)
    assert "98.75% interval" in paired.interval_words(d)
    assert "95% interval" in paired.interval_words(paired.paired_difference(a, b))


def test_float32_rounding_is_no_difference():
    """Figures that went through float32 differ from their float64 twins by rounding
    only: zero, while a difference a thousand times larger counts."""
    a = [float(np.float32(2.0 + i / 7)) for i in range(12)]
    b = [2.0 + i / 7 for i in range(12)]
    assert any(x != y for x, y in zip(a, b))
    assert paired.paired_difference(a, b)["status"] == paired.SAME
    assert not paired.same(3.0, 3.0 + 1e-5) and paired.same(3.0, 3.0 + 2e-6)
    assert paired.same(0.0, 1e-9) and not paired.same(0.0, 2e-9)


def test_the_requests_needed_are_the_normal_formula():
    """n = ceil(((z(1 - (1 - level) / 2) + z(power)) * sd / mean) ** 2), at least
    MIN_PAIRS: pinned at values where its exponent or its quantiles would show."""
    assert paired.needed_pairs(0.1, 0.2) == 32  # ((1.95996 + 0.84162) * 2) ** 2 = 31.4
    assert paired.needed_pairs(-0.1, 0.2) == 32
    assert paired.needed_pairs(0.1, 0.5) == 197  # 196.2
    assert paired.needed_pairs(0.1, 0.1) == paired.MIN_PAIRS  # 7.8, raised to the least
    assert paired.needed_pairs(0.1, 0.2, level=0.99) == 47  # ((2.5758 + 0.8416) * 2) ** 2
    assert paired.needed_pairs(0.1, 0.2, power=0.9) == 43  # ((1.96 + 1.2816) * 2) ** 2


def test_the_requests_needed_at_their_edges():
    from statistics import NormalDist

    z = NormalDist().inv_cdf(0.975) + NormalDist().inv_cdf(0.8)
    at_most = math.sqrt(paired.MAX_NEEDED - 0.5) / z  # sd/mean giving MAX_NEEDED exactly
    assert paired.needed_pairs(1.0, at_most) == paired.MAX_NEEDED
    assert paired.needed_pairs(1.0, math.sqrt(paired.MAX_NEEDED + 0.5) / z) is None
    assert paired.needed_pairs(paired.TOLERANCE, 1.0) is None
    assert paired.needed_pairs(2 * paired.TOLERANCE, 1.0) is None  # more than MAX_NEEDED
    assert paired.needed_pairs(0.1, paired.TOLERANCE) is None
    assert paired.needed_pairs(0.1, 2 * paired.TOLERANCE) == paired.MIN_PAIRS


def test_the_spread_is_the_sample_deviation():
    """sd divides by n - 1: differences 0.1 and 0.3 alternating over 10 pairs."""
    a, b = spread_pairs(10)
    d = paired.paired_difference(a, b)
    assert d["mean"] == pytest.approx(0.2) and d["sd"] == pytest.approx(
        math.sqrt(10 * 0.01 / 9), rel=1e-3)
    assert paired.paired_difference([2.5], [2.0])["sd"] == 0.0  # one pair: no spread


def test_the_least_pairs_give_a_verdict_and_one_fewer_none():
    a, b = spread_pairs(paired.MIN_PAIRS)
    assert paired.paired_difference(a, b)["status"] == paired.HIGHER
    assert paired.paired_difference(a[:-1], b[:-1])["status"] == paired.TOO_FEW


def test_an_end_at_zero_decides_nothing():
    assert paired.status_of(0.0, 1.0) == paired.UNDECIDED
    assert paired.status_of(1e-12, 1.0) == paired.HIGHER
    assert paired.status_of(-1.0, 0.0) == paired.UNDECIDED
    assert paired.status_of(-1.0, -1e-12) == paired.LOWER


def test_a_difference_is_written_to_three_decimals_from_a_thousandth():
    assert paired.figure(0.001) == "0.001" and paired.figure(0.00099) == "0.00099"
    assert paired.figure(-0.001) == "-0.001" and paired.figure(0.0) == "0.000"


def test_a_bad_figure_says_its_side():
    with pytest.raises(paired.FiguresError, match="on the first side is inf, not a finite "
                       "number; leave that request out of the pairs"):
        paired.paired_difference([float("inf")], [2.0])
    with pytest.raises(paired.FiguresError, match="on the second side"):
        paired.paired_difference([2.0], [float("nan")])


def test_every_field_of_a_difference():
    a = [2.2 + (0.5 if i % 2 else -0.5) for i in range(12)]
    b = [2.0] * 12
    d = paired.paired_difference(a, b, level=0.99)
    assert set(d) == {"pairs", "mean", "sd", "level", "low", "high", "min_pairs",
                      "pairs_needed", "status"}
    assert d["pairs_needed"] == paired.needed_pairs(0.2, d["sd"], 0.99) != \
        paired.needed_pairs(0.2, d["sd"])
    same = paired.paired_difference([2.0] * 12, [2.0] * 12)
    assert (same["status"], same["low"], same["high"], same["pairs_needed"]) == \
        (paired.SAME, 0.0, 0.0, None)
    empty = paired.paired_difference([], [])
    assert (empty["status"], empty["mean"], empty["sd"]) == (paired.TOO_FEW, 0.0, 0.0)
    two = paired.paired_difference([2.1, 2.3], [2.0, 2.0])
    assert two["sd"] == pytest.approx(math.sqrt(0.02), rel=1e-3)  # 4 significant digits
    assert paired.needed_pairs(paired.TOLERANCE, 2 * paired.TOLERANCE) is None


def test_each_verdict_in_words_with_its_sign():
    up, down = spread_pairs(12, 0.5), spread_pairs(12, -0.5)
    higher = paired.verdict("A", "B", paired.paired_difference(*up), "acceptance")
    assert higher.startswith("A is higher than B in acceptance by 0.500 (95% interval ")
    lower_d = paired.paired_difference(*down)
    lower = paired.verdict("A", "B", lower_d, "acceptance")
    assert lower.startswith("B is higher than A in acceptance by 0.500 (95% interval "
                            f"{paired.figure(-lower_d['high'])} to "
                            f"{paired.figure(-lower_d['low'])}, 12 requests paired)")
    for mean, sign in ((0.5, "+0.500"), (-0.5, "-0.500"), (0.0, "0.000")):
        few = paired.paired_difference([2.0 + mean] * 3, [2.0] * 3)
        assert f"(mean difference so far {sign})" in paired.verdict("A", "B", few, "x")
    cancel = paired.paired_difference([2.1, 1.9] * 6, [2.0] * 12)
    assert "no difference on average: the requests' differences cancel" in \
        paired.verdict("A", "B", cancel, "x")
    close = paired.paired_difference([2.3, 1.9] * 6, [2.0] * 12)
    assert "(difference +0.100, 95% interval" in paired.verdict("A", "B", close, "x")
    below = paired.paired_difference([2.1, 1.7] * 6, [2.0] * 12)
    assert "(difference -0.100, 95% interval" in paired.verdict("A", "B", below, "x")
