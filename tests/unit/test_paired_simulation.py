"""The paired verdict (tools/figures/paired.py) proven on simulated requests with a known answer.

Each simulated request has its own difficulty (a per-position acceptance rate drawn from a
Beta distribution, shared by both settings: the pairing) and its own length in tokens;
each setting serves it step by step, accepting draft positions in a row with that rate
(the second setting's rate shifted by ``delta``), until the request's tokens are written.
Its acceptance length is 1 + accepted / steps, as vLLM reports it: bounded by k + 1,
skewed, and tied across requests (a short request takes a few steps). The true mean
difference is that of a very large draw.

At the request counts the docs recommend, identical settings must be called different at
most about 5% of the time, and the interval must cover the true difference about 95% of
the time (binomial margins for the number of simulated runs).
"""

from __future__ import annotations

import numpy as np
import pytest

from vllm_kimi_eagle.tools.figures import paired

K = 3
RUNS = 400
# Three standard errors of a 5% rate over RUNS runs, and of 95%.
FALSE_VERDICTS_AT_MOST = 0.05 + 3 * (0.05 * 0.95 / RUNS) ** 0.5
COVERAGE_WITHIN = (0.95 - 3 * (0.05 * 0.95 / RUNS) ** 0.5, 0.95 + 3 * (0.05 * 0.95 / RUNS) ** 0.5)
# The counts docs/your-traffic.md recommends (and the verdict's minimum).
REQUEST_COUNTS = (paired.MIN_PAIRS, 30, 100)


def simulate(rng, requests: int, delta: float, steps_cap: int = 96):
    """Per-request acceptance lengths of two settings on the same requests."""
    rate = rng.beta(4, 3, size=requests)  # mean 0.57: a draft accepting 2.3 on average
    tokens = rng.integers(8, 160, size=requests)

    def serve(p):
        p = np.clip(p, 0.0, 1.0)[:, None, None]
        success = rng.random((requests, steps_cap, K)) < p
        accepted = np.cumprod(success, axis=2).sum(axis=2)  # in a row, per step
        written = np.cumsum(accepted + 1, axis=1)
        counted = (written - (accepted + 1)) < tokens[:, None]  # steps before the end
        return 1 + (accepted * counted).sum(1) / counted.sum(1)

    return serve(rate + delta), serve(rate)


def true_difference(delta: float, draws: int = 200_000, chunk: int = 20_000) -> float:
    rng = np.random.default_rng(12345)
    total = 0.0
    for _ in range(draws // chunk):
        first, second = simulate(rng, chunk, delta)
        total += float((first - second).sum())
    return total / draws


def run_many(n: int, delta: float, seed: int):
    rng = np.random.default_rng(seed)
    for _ in range(RUNS):
        a, b = simulate(rng, n, delta)
        yield paired.paired_difference(a.tolist(), b.tolist())


@pytest.mark.parametrize("n", REQUEST_COUNTS)
def test_identical_settings_are_called_different_about_5_percent_of_the_time(n):
    results = list(run_many(n, 0.0, seed=n))
    false = sum(r["status"] in (paired.HIGHER, paired.LOWER) for r in results) / RUNS
    print(f"\nn={n}: identical settings called different in {false:.1%} of {RUNS} runs")
    assert false <= FALSE_VERDICTS_AT_MOST


@pytest.mark.parametrize("n", REQUEST_COUNTS)
def test_the_interval_covers_a_known_difference_at_its_level(n):
    delta = 0.06
    truth = true_difference(delta)
    results = list(run_many(n, delta, seed=1000 + n))
    covered = sum(r["low"] <= truth <= r["high"] for r in results) / RUNS
    found = sum(r["status"] == paired.HIGHER for r in results) / RUNS
    print(f"\nn={n}: true difference {truth:.4f}; covered in {covered:.1%}, found higher in "
          f"{found:.1%} of {RUNS} runs")
    low, high = COVERAGE_WITHIN
    assert low <= covered <= high


def test_the_count_the_verdict_asks_for_finds_the_difference_at_the_stated_power():
    """The requests needed for a difference at a spread (what an undecided verdict names,
    from its own estimates) find it about POWER of the time when those are the truth."""
    delta = 0.015
    rng = np.random.default_rng(99)
    first, second = simulate(rng, 200_000 // 10, delta)
    truth = true_difference(delta)
    spread = float((first - second).std(ddof=1))
    needed = paired.needed_pairs(truth, spread)
    results = list(run_many(needed, delta, seed=8))
    found = sum(r["status"] == paired.HIGHER for r in results) / RUNS
    print(f"\ntrue difference {truth:.4f}, spread {spread:.3f}: {needed} requests needed; "
          f"found in {found:.1%} of {RUNS} runs (stated {paired.POWER:.0%})")
    margin = 3 * (paired.POWER * (1 - paired.POWER) / RUNS) ** 0.5
    assert paired.POWER - margin <= found <= paired.POWER + margin
