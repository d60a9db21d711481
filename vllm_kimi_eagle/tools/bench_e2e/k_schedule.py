"""A ``num_speculative_tokens_per_batch_size`` schedule from measured best k per
concurrency, and its verdict. Pure, but for vLLM's own validator.

vLLM keys the schedule on the number of requests the scheduler runs in a step; the bench
sets client concurrency. The mapping between the two is measured, not assumed: each
window polls the server's running requests (``vllm:num_requests_running`` in ``/metrics``)
and keeps their mean while the engine was busy (spec_metrics.mean_batch).
"""

from __future__ import annotations

import statistics

from vllm_kimi_eagle.compat import vllm_compat
from vllm_kimi_eagle.tools.bench_e2e.grid import (
    NONE,
    SCHEDULE,
    SCHEDULE_K0,
    BenchError,
    schedule_config,
)

# The schedule's last range ends here; vLLM cuts it to the server's max_num_seqs.
MAX_BATCH = 1024
# The goal: the schedule serves at this share or more of the better of no speculation and
# the best fixed k, at every concurrency (median over paired rounds).
GOAL = 0.97
# Served as written: the draft tokens per request and step that vLLM's counters show in a
# schedule window are within this of the k the schedule gives the window's batch (batches
# ramp up and drain through neighbouring ranges at a window's ends).
WRITTEN_TOLERANCE = 0.5


def served_as_written(drafted: float | None, expected: int) -> str:
    """PASS where a window drafted about the k its batch size is given, else FAIL."""
    if drafted is None:
        return "SKIP"
    return "PASS" if abs(drafted - expected) <= WRITTEN_TOLERANCE else "FAIL"


def measured_batch(windows: list[dict], config: str) -> dict[int, float]:
    """Median mean batch per concurrency over ``config``'s windows."""
    by: dict[int, list[float]] = {}
    for w in windows:
        if w["config"] == config and w.get("batch"):
            by.setdefault(w["concurrency"], []).append(w["batch"])
    return {c: round(statistics.median(v), 2) for c, v in sorted(by.items())}


def derive(best_k: dict[int, int | None], batch: dict[int, float],
           max_batch: int = MAX_BATCH) -> list[list[int]]:
    """Inclusive [start, end, k] ranges: each measured concurrency's best k (0 where no k
    beat no speculation) over the batch sizes nearest to the one it produced, boundaries
    half-way between neighbours; neighbouring ranges with the same k merged."""
    by_size: dict[int, int] = {}
    for c in sorted(c for c in best_k if c in batch):  # the same batch: the larger c decides
        by_size[max(1, round(batch[c]))] = best_k[c] or 0
    points = sorted(by_size.items())
    if not points:
        raise BenchError("no concurrency has both a best k and a measured batch size: the "
                         "grid needs windows of none and of plugin at each concurrency")
    ranges, start = [], 1
    for i, (size, k) in enumerate(points):
        end = (size + points[i + 1][0]) // 2 if i + 1 < len(points) else max_batch
        if ranges and ranges[-1][2] == k:
            ranges[-1][1] = end
        else:
            ranges.append([start, end, k])
        start = end + 1
    if ranges[-1][0] > max_batch:
        raise BenchError(f"a measured batch of {points[-1][0]} is above the schedule's "
                         f"largest batch size {max_batch}")
    return ranges


NO_DRAFT_ADVICE = ("no k beats no speculation at any concurrency: serve without a draft "
                   "(no --speculative-config, no schedule.json); the all-zero schedule would "
                   "still run the draft's forward pass every step, measured below")


def serving_config(draft: str, schedule: list[list[int]]) -> dict | None:
    """The --speculative-config that serves a schedule; None (no speculative config) for
    one that is 0 at every batch size. vLLM's proposer still runs the draft's first
    forward pass at k=0, to keep the draft's KV cache in step for when k rises again, so
    an all-zero schedule costs that pass on every step and gains nothing."""
    if max(k for _, _, k in schedule) == 0:
        return None
    return schedule_config(draft, schedule)


def validate(schedule: list[list[int]]) -> str:
    """vLLM's own check of the schedule; what checked it. BenchError where vLLM rejects it."""
    validator = vllm_compat.dynamic_schedule_validator()
    if validator is None:
        return "not checked: this vLLM has no dynamic-speculation validator"
    try:
        validator(schedule)
    except ValueError as err:
        raise BenchError(f"vLLM rejects the derived schedule {schedule}: {err}") from err
    return f"checked with vLLM's {vllm_compat.DYNAMIC_SCHEDULE_VALIDATOR[1]}"


def k_for_batch(schedule: list[list[int]], batch: float) -> int:
    """The k the schedule gives a batch of this size (vLLM's rule, gaps and all)."""
    size, k = max(1, round(batch)), schedule[0][2]
    for start, _, range_k in schedule:
        if size >= start:
            k = range_k
    return k


def verdict(per_round: list[float]) -> tuple[float | None, str]:
    """(median of the paired per-round ratios, PASS/FAIL against GOAL)."""
    if not per_round:
        return None, "SKIP"
    median = round(statistics.median(per_round), 3)
    return median, "PASS" if median >= GOAL else "FAIL"


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def speedups_by_round(windows: list[dict], name: str) -> dict[int, float]:
    """Per round, ``name``'s tokens/s over the no-speculation window of its own server
    group and round (windows of one concurrency)."""
    by: dict[tuple[int, int], dict[str, float]] = {}
    for w in windows:
        by.setdefault((w.get("group", 0), w["round"]), {})[w["name"]] = w["tokens_per_s"]
    return {r: v[name] / v[NONE] for (_, r), v in by.items() if name in v and NONE in v}


def summary(part: dict) -> list[dict]:
    """Per concurrency, from the schedule's own rounds: no speculation, the best fixed k,
    the schedule and the all-zero schedule (median tokens/s); per round, the schedule over
    the better of no speculation and the best fixed k (the goal's figure, median), and the
    all-zero schedule over no speculation (the mechanism's cost). Each configuration is
    taken over the no-speculation window of its own round and server group, so the
    ratios hold when --max-servers put them in different groups; in one group they are
    the plain per-round ratios."""
    rows = []
    windows = part.get("windows", [])
    for c in sorted({w["concurrency"] for w in windows}):
        here = [w for w in windows if w["concurrency"] == c]
        k = part["best_k"].get(c) or None
        fixed = f"fixed-k{k}" if k else None
        schedule = speedups_by_round(here, SCHEDULE)
        fixed_k = speedups_by_round(here, fixed) if fixed else {}
        paired = [s / max(1.0, fixed_k[r]) if fixed else s for r, s in schedule.items()
                  if not fixed or r in fixed_k]
        ratio, status = verdict(paired)
        mechanism = list(speedups_by_round(here, SCHEDULE_K0).values())

        def tok_s(name):
            return _median([w["tokens_per_s"] for w in here if w["name"] == name])

        expected_k = k_for_batch(part["schedule"], part["batch"].get(c, 1))
        drafted = _median([w["k_per_step"] for w in here
                           if w["name"] == SCHEDULE and w.get("k_per_step") is not None])
        if part["speculative_config"] is None:
            drafted = None  # served without a draft: nothing to count

        rows.append({
            "concurrency": c,
            "none_tok_s": tok_s(NONE),
            "best_fixed_k": k or 0,
            "best_fixed_tok_s": tok_s(fixed),
            "schedule_tok_s": tok_s(SCHEDULE),
            "batch": part["batch"].get(c),
            "schedule_k": expected_k,
            "drafted_k_per_step": drafted,
            "as_written": served_as_written(drafted, expected_k),
            "schedule_over_best": ratio,
            "paired_min": round(min(paired), 3) if paired else None,
            "paired_max": round(max(paired), 3) if paired else None,
            "schedule_over_same_fixed_k": _median([s / fixed_k[r] for r, s in schedule.items()
                                                   if r in fixed_k]) if fixed else None,
            "all_zero_schedule_tok_s": tok_s(SCHEDULE_K0),
            "all_zero_schedule_over_none": _median(mechanism),
            "all_zero_paired_min": round(min(mechanism), 3) if mechanism else None,
            "all_zero_paired_max": round(max(mechanism), 3) if mechanism else None,
            "status": status,
        })
    return rows
