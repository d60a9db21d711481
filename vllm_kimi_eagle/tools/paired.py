"""Two settings measured on the same requests: the paired difference, its bootstrap
confidence interval, and the verdict a user reads (which is better, by how much, or how
many requests would tell)."""

from __future__ import annotations

import math
import random
import statistics

from vllm_kimi_eagle.tools.request_metrics import percentile

LEVEL = 0.95
Z = 1.96  # the normal quantile of LEVEL, for the number of requests a difference needs
RESAMPLES = 10000


def paired_difference(a: list[float], b: list[float], resamples: int = RESAMPLES,
                      seed: int = 0) -> dict:
    """Mean of a[i] - b[i] with a percentile-bootstrap interval (LEVEL), and about how
    many pairs an interval that excludes zero needs at this spread."""
    if len(a) != len(b) or not a:
        raise ValueError(f"paired figures need the same requests on both sides and at "
                         f"least one: {len(a)} and {len(b)} found")
    diffs = [x - y for x, y in zip(a, b)]
    n = len(diffs)
    mean = sum(diffs) / n
    rng = random.Random(seed)
    means = [sum(rng.choices(diffs, k=n)) / n for _ in range(resamples)]
    tail = (1 - LEVEL) / 2 * 100
    spread = statistics.stdev(diffs) if n > 1 else 0.0
    needed = math.ceil((Z * spread / abs(mean)) ** 2) if mean and spread else None
    return {"pairs": n, "mean": round(mean, 4), "low": round(percentile(means, tail), 4),
            "high": round(percentile(means, 100 - tail), 4), "sd": round(spread, 4),
            "pairs_needed": needed}


def verdict(first: str, second: str, difference: dict, what: str) -> str:
    """One line: which side is higher in ``what`` with the interval, or that this many
    pairs cannot tell them apart and about how many could."""
    half = (difference["high"] - difference["low"]) / 2
    mean, n = difference["mean"], difference["pairs"]
    level = f"{LEVEL:.0%}, {n} requests paired"
    if difference["low"] > 0:
        return f"{first} is higher than {second} in {what} by {mean:.3f} ± {half:.3f} ({level})"
    if difference["high"] < 0:
        return f"{second} is higher than {first} in {what} by {-mean:.3f} ± {half:.3f} ({level})"
    needed = difference["pairs_needed"]
    more = (f"about {needed} are needed to tell a difference of {abs(mean):.3f}"
            if needed else "no difference was seen at all")
    return f"{first} and {second} are not distinguishable in {what} with {n} requests: {more}"
