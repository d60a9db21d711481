"""What ``compare`` concludes from the answers: per setting and variant, the acceptance
distribution and its agreement with the server's counters; per pair of settings, the
paired difference; per setting, the chat template's cost; the greedy answers against the
server without a draft. Pure functions over run.py's records."""

from __future__ import annotations

from itertools import combinations

from vllm_kimi_eagle.tools import paired, request_metrics
from vllm_kimi_eagle.tools.compare.run import NO_DRAFT

LENGTH = "acceptance length per request"


def acceptances(variant: dict) -> list[request_metrics.RequestAcceptance] | None:
    """The per-request figures of a variant, or None where the responses had none."""
    figures = [r["acceptance"] for r in variant["requests"]]
    if not figures or any(f is None for f in figures):
        return None
    return [request_metrics.RequestAcceptance.from_dict(f) for f in figures]


def summary(variant: dict, k: int) -> dict:
    """Distribution, per-position acceptance and the agreement of the per-request sums
    with the /metrics window over the same requests."""
    found = acceptances(variant)
    window = variant["window"]
    if found is None:
        return {"per_request": False, "window": window}
    return {"per_request": True, "distribution": request_metrics.distribution(found, k),
            "summed": request_metrics.counters(found).summary(), "window": window,
            "consistent": request_metrics.adds_up(found, window)}


def lengths(variant: dict) -> dict[str, float]:
    """Acceptance length by request id (requests that drafted)."""
    return {r["id"]: r["acceptance"]["acceptance_length"] for r in variant["requests"]
            if r["acceptance"] and r["acceptance"]["acceptance_length"] is not None}


def compare_pair(first: dict, second: dict, names: tuple[str, str]) -> dict:
    """Paired difference in per-request acceptance length over the requests both drafted."""
    a, b = lengths(first), lengths(second)
    common = sorted(set(a) & set(b))
    if not common:
        return {"settings": list(names), "difference": None,
                "verdict": f"{names[0]} and {names[1]}: no request with per-request figures "
                           "on both"}
    difference = paired.paired_difference([a[i] for i in common], [b[i] for i in common],
                                          ids=common)
    return {"settings": list(names), "difference": difference,
            "verdict": paired.verdict(*names, difference, LENGTH)}


def comparisons(runs: dict, variant: str = "sent") -> list[dict]:
    speculative = [n for n in runs if n != NO_DRAFT and variant in runs[n]["variants"]]
    return [compare_pair(runs[a]["variants"][variant], runs[b]["variants"][variant], (a, b))
            for a, b in combinations(speculative, 2)]


def template_cost(runs: dict) -> dict:
    """Per setting: acceptance with the chat template against the same text raw."""
    return {name: compare_pair(run["variants"]["sent"], run["variants"]["raw"],
                               (f"{name} with the template", f"{name} raw"))
            for name, run in runs.items()
            if name != NO_DRAFT and "raw" in run["variants"]}


def greedy_agreement(runs: dict) -> dict:
    """Per setting and variant: greedy requests compared with the no-draft server's
    answers, and the ids of those that differ."""
    reference = runs[NO_DRAFT]["variants"]
    result = {}
    for name, run in runs.items():
        if name == NO_DRAFT:
            continue
        for variant, answers in run["variants"].items():
            expected = {r["id"]: r["text"] for r in reference[variant]["requests"]}
            greedy = [r for r in answers["requests"] if r["greedy"]]
            result[f"{name}/{variant}"] = {
                "compared": len(greedy),
                "differ": [r["id"] for r in greedy if r["text"] != expected.get(r["id"])]}
    return result


def speedups(runs: dict) -> dict:
    """Output tokens/s of each setting over the no-draft server's, per variant."""
    reference = runs[NO_DRAFT]["variants"]
    return {f"{name}/{variant}": round(v["tokens_per_s"] / reference[variant]["tokens_per_s"], 3)
            for name, run in runs.items() if name != NO_DRAFT
            for variant, v in run["variants"].items() if reference[variant]["tokens_per_s"]}
