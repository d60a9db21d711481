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
