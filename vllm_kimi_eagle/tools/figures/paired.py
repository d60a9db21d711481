"""Two settings measured on the same requests: whether one is higher, by how much, or how
many requests would tell. The one place compare, calibrate and eval get a verdict from.

The statistic is the mean of the per-request differences ``a[i] - b[i]``; its interval is
the paired t interval at ``LEVEL`` (``scipy.stats.t``). Per-request acceptance lengths are
bounded (1 to k + 1), skewed and full of ties (a short request drafts a few steps: 2.0,
2.5, 3.0 again and again), so the mean of a few dozen differences is close to normal and
the t interval keeps its level there; a percentile bootstrap has no coverage at all from
one or two requests and too little at ten, and BCa breaks down where every resample ties.
``tests/unit/test_paired_simulation.py`` draws requests of that shape with no difference
and with a known one, and holds the interval's coverage and its false verdicts to the
level.

The rules:

- at least ``MIN_PAIRS`` pairs, or no verdict (it says how many are needed);
- two figures that differ by no more than float32 rounding (``REL_TOLERANCE`` of the
  larger, at least ``TOLERANCE``) differ by zero: float noise is not a difference;
- a figure that is not a finite number is refused, naming the request;
- the interval is written as its two ends (a skewed interval is not "± half");
- where the interval holds zero, the requests needed are those that would find the mean
  difference seen here with ``POWER`` (two-sided, at ``LEVEL``), or no count where the
  mean difference is within ``TOLERANCE`` of zero or would need more than ``MAX_NEEDED``.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

LEVEL = 0.95
POWER = 0.80
MIN_PAIRS = 10
TOLERANCE = 1e-9
# A few float32 roundings of figures around 1 to 10 (its epsilon is 1.2e-7).
REL_TOLERANCE = 1e-6
MAX_NEEDED = 100_000
# What a difference is: the settings' names in order, where it goes.
HIGHER, LOWER, UNDECIDED, SAME, TOO_FEW = "higher", "lower", "undecided", "same", "too-few"


class FiguresError(ValueError):
    """Figures a verdict cannot be drawn from (names the request and the value)."""


def _checked(a: Sequence[float], b: Sequence[float], ids: Sequence | None) -> list[float]:
    if len(a) != len(b):
        raise FiguresError(f"paired figures need the same requests on both sides: "
                           f"{len(a)} and {len(b)} found")
    names = list(ids) if ids is not None else list(range(len(a)))
    if len(names) != len(a):
        raise FiguresError(f"paired figures need one name per request: {len(names)} names "
                           f"for {len(a)} requests")
    for side, values in (("first", a), ("second", b)):
        for name, value in zip(names, values):
            if not is_finite_number(value):
                raise FiguresError(f"request {name!r}: its figure on the {side} side is "
                                   f"{value!r}, not a finite number; leave that request out "
                                   "of the pairs")
    return [0.0 if same(x, y) else float(x - y) for x, y in zip(a, b)]


def same(x: float, y: float) -> bool:
    """Whether two figures differ by no more than rounding."""
    return abs(x - y) <= max(TOLERANCE, REL_TOLERANCE * max(abs(x), abs(y)))


def is_finite_number(value) -> bool:
    """A real number (Python's or numpy's, not a bool) that is finite."""
    return (isinstance(value, numbers.Real) and not isinstance(value, bool)
            and math.isfinite(float(value)))


def figure(value: float) -> str:
    """A difference in words: three decimals, or two significant digits below 0.001, so
    that a difference is never written as 0.000."""
    return f"{value:.3f}" if value == 0 or abs(value) >= 0.001 else f"{value:.2g}"


def level_words(level: float) -> str:
    """95%, 98.75%: a level as it is, never rounded to another."""
    return f"{level * 100:.4f}".rstrip("0").rstrip(".") + "%"


def _significant(value: float) -> float:
    return float(f"{value:.4g}")


def needed_pairs(mean: float, sd: float, level: float = LEVEL, power: float = POWER
                 ) -> int | None:
    """Pairs that find a mean difference ``mean`` at spread ``sd`` with ``power``
    (two-sided, at ``level``, normal approximation); None where there is no difference to
    find or it would take more than MAX_NEEDED."""
    from statistics import NormalDist

    if abs(mean) <= TOLERANCE or sd <= TOLERANCE:
        return None
    z = NormalDist().inv_cdf
    n = math.ceil(((z(1 - (1 - level) / 2) + z(power)) * sd / abs(mean)) ** 2)
    return max(n, MIN_PAIRS) if n <= MAX_NEEDED else None


def paired_difference(a: Sequence[float], b: Sequence[float], ids: Sequence | None = None,
                      level: float = LEVEL) -> dict:
    """The paired difference of ``a`` over ``b``: ``pairs``, ``mean``, the interval
    ``low``/``high`` at ``level`` (None below MIN_PAIRS), ``sd``, ``status`` (HIGHER: a
    above b; LOWER; UNDECIDED; SAME on every request; TOO_FEW) and ``pairs_needed``."""
    from scipy import stats

    diffs = _checked(a, b, ids)
    n = len(diffs)
    mean = sum(diffs) / n if n else 0.0
    if abs(mean) <= TOLERANCE:
        mean = 0.0
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1)) if n > 1 else 0.0
    result = {"pairs": n, "mean": _significant(mean), "sd": _significant(sd), "level": level,
              "low": None, "high": None, "min_pairs": MIN_PAIRS,
              "pairs_needed": needed_pairs(mean, sd, level)}
    if n < MIN_PAIRS:
        return dict(result, status=TOO_FEW)
    if all(d == 0.0 for d in diffs):
        return dict(result, status=SAME, low=0.0, high=0.0, pairs_needed=None)
    half = stats.t.ppf(1 - (1 - level) / 2, n - 1) * sd / math.sqrt(n)
    low, high = mean - half, mean + half
    return dict(result, status=status_of(low, high), low=_significant(low),
                high=_significant(high))


def status_of(low: float, high: float) -> str:
    """The verdict of an interval: higher only where it lies wholly above zero, lower only
    wholly below; an end at zero decides nothing."""
    return HIGHER if low > 0 else LOWER if high < 0 else UNDECIDED


def interval_words(difference: dict, negated: bool = False) -> str:
    """"95% interval 0.010 to 0.634" (``negated``: of the opposite difference, its ends
    negated and swapped)."""
    low, high = difference["low"], difference["high"]
    if negated:
        low, high = -high, -low
    return f"{level_words(difference['level'])} interval {figure(low)} to {figure(high)}"


def verdict(first: str, second: str, difference: dict, what: str) -> str:
    """One line a user can act on: which is higher in ``what``, by how much, with the
    interval's two ends; or why no verdict, and what would give one."""
    n, mean, status = difference["pairs"], difference["mean"], difference["status"]
    paired = f"{n} requests paired"
    if status == SAME:
        return f"{first} and {second} gave the same {what} on every one of {n} requests"
    if status == TOO_FEW:
        return (f"{first} against {second} in {what}: no verdict from {n} request"
                f"{'s' if n != 1 else ''}; at least {difference['min_pairs']} are needed "
                f"(mean difference so far {'+' if mean > 0 else ''}{figure(mean)})")
    if status == HIGHER:
        return (f"{first} is higher than {second} in {what} by {figure(mean)} "
                f"({interval_words(difference)}, {paired})")
    if status == LOWER:
        return (f"{second} is higher than {first} in {what} by {figure(-mean)} "
                f"({interval_words(difference, negated=True)}, {paired})")
    needed = difference["pairs_needed"]
    if needed is None:
        more = ("no difference on average: the requests' differences cancel"
                if mean == 0 else f"a difference of {figure(abs(mean))} is too small to tell "
                f"apart with any practical number of requests")
    else:
        more = (f"about {needed} requests would find a difference of {figure(abs(mean))} "
                f"{POWER:.0%} of the time")
    return (f"{first} and {second} are not distinguishable in {what} with {n} requests "
            f"(difference {'+' if mean > 0 else ''}{figure(mean)}, "
            f"{interval_words(difference)}): {more}")
