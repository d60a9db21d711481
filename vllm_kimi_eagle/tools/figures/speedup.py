"""A speedup from two measured runs, checked against the server's own figure.

Output tokens/s (client side) gives the speedup; the server's time per output token
(``spec_metrics.time_per_output_token_ms``) gives a second, independent one. When the two
are further apart than ``CONSISTENCY_TOLERANCE``, prefill, queueing or a busy machine
weigh in, and neither should be quoted alone.
"""

from __future__ import annotations

CONSISTENCY_TOLERANCE = 0.25


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator / denominator rounded to 3 places; None when either is missing or 0."""
    return round(numerator / denominator, 3) if numerator and denominator else None


def speedups(base: dict, spec: dict, tolerance: float = CONSISTENCY_TOLERANCE) -> dict:
    """The generation speedup and the server-side cross-check, and whether they agree.
    ``base`` and ``spec`` hold ``tokens_per_s`` and ``mean_time_per_output_token_ms``."""
    generation = ratio(spec["tokens_per_s"], base["tokens_per_s"])
    per_token = ratio(base["mean_time_per_output_token_ms"],
                      spec["mean_time_per_output_token_ms"])
    consistent = (generation is not None and per_token is not None
                  and abs(generation / per_token - 1) <= tolerance)
    return {
        "speedup_generation": generation,
        "speedup_time_per_output_token": per_token,
        "consistent": consistent,
    }
