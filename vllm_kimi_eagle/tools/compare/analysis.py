"""What ``compare`` concludes from the answers: per setting and variant, the acceptance
distribution and its agreement with the server's counters; per pair of settings, the
paired difference; per setting, the chat template's cost; the greedy answers against the
server without a draft. Pure functions over run.py's records."""

from __future__ import annotations

import statistics
from itertools import combinations

from vllm_kimi_eagle.tools.compare.run import NO_DRAFT
from vllm_kimi_eagle.tools.figures import paired, request_metrics

LENGTH = "acceptance length per request"


def answered(variant: dict) -> list[dict]:
    """The requests the server answered (a failed request has an ``error``)."""
    return [r for r in variant["requests"] if "error" not in r]


def summary(variant: dict, k: int) -> dict:
    """Distribution of the requests that carried their figures (request_metrics.reported
    says how many did not), and, where all did, the agreement of their sums with the
    /metrics window over the same requests."""
    found = request_metrics.reported(r["acceptance"] for r in answered(variant))
    window = variant["window"]
    if not found.figures:
        return {"per_request": False, "window": window}
    figures = list(found.figures)
    return {"per_request": True, "distribution": request_metrics.distribution(figures, k),
            "missing": found.missing, "missing_note": found.note(),
            "summed": request_metrics.counters(figures).summary(), "window": window,
            "consistent": request_metrics.adds_up(figures, window) if found.complete
            else None}


def lengths(variant: dict) -> dict[str, float]:
    """Acceptance length by request id (answered requests that drafted)."""
    return {r["id"]: r["acceptance"]["acceptance_length"] for r in answered(variant)
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


def speculates(run: dict) -> bool:
    return run.get("speculative_config") is not None


def comparisons(runs: dict, variant: str = "sent") -> list[dict]:
    """Every pair of settings that speculate (a setting without a draft has no acceptance
    to pair), on the requests both answered with figures."""
    speculative = [n for n, r in runs.items()
                   if n != NO_DRAFT and speculates(r) and variant in r["variants"]]
    return [compare_pair(runs[a]["variants"][variant], runs[b]["variants"][variant], (a, b))
            for a, b in combinations(speculative, 2)]


def template_cost(runs: dict) -> dict:
    """Per setting: acceptance with the chat template against the same text raw."""
    return {name: compare_pair(run["variants"]["sent"], run["variants"]["raw"],
                               (f"{name} with the template", f"{name} raw"))
            for name, run in runs.items()
            if name != NO_DRAFT and speculates(run) and "raw" in run["variants"]}


# Prompt lengths (tokens) the acceptance is reported by: long context is where Kimi's
# agentic traffic lives, and where a draft's acceptance decays.
PROMPT_BUCKETS = (512, 2048, 8192, 32768)


def bucket_name(tokens: int) -> str:
    low = 0
    for high in PROMPT_BUCKETS:
        if tokens <= high:
            return f"{low + 1 if low else 0}-{high}"
        low = high
    return f"{low + 1}+"


def by_prompt_length(variant: dict) -> list[dict]:
    """Per prompt-length bucket (tokens, as the server counted them): the requests with
    per-request figures, their mean acceptance length and their pooled one (the
    bucket's accepted tokens over its drafts, as vLLM's counters pool)."""
    buckets: dict[str, list[request_metrics.RequestAcceptance]] = {}
    for request in answered(variant):
        if request.get("acceptance") and request.get("prompt_tokens") is not None:
            figures = request_metrics.RequestAcceptance.from_dict(request["acceptance"])
            if figures.steps:
                buckets.setdefault(bucket_name(request["prompt_tokens"]), []).append(figures)
    order = [bucket_name(high) for high in PROMPT_BUCKETS] + \
        [f"{PROMPT_BUCKETS[-1] + 1}+"]
    found = []
    for name in sorted(buckets, key=order.index):
        figures = buckets[name]
        pooled = request_metrics.counters(figures).acceptance_length
        found.append({"prompt_tokens": name, "requests": len(figures),
                      "mean": round(statistics.fmean(f.acceptance_length for f in figures), 4),
                      "pooled": round(pooled, 4)})
    return found


def greedy_agreement(runs: dict) -> dict:
    """Per setting and variant: greedy requests compared with the no-draft server's
    answers, and the ids of those that differ (none without that server)."""
    if NO_DRAFT not in runs:
        return {}
    reference = runs[NO_DRAFT]["variants"]
    result = {}
    for name, run in runs.items():
        if name == NO_DRAFT:
            continue
        for variant, answers in run["variants"].items():
            expected = {r["id"]: r["text"] for r in answered(reference[variant])}
            greedy = [r for r in answered(answers) if r["greedy"] and r["id"] in expected]
            result[f"{name}/{variant}"] = {
                "compared": len(greedy),
                "differ": [r["id"] for r in greedy if r["text"] != expected.get(r["id"])]}
    return result


def failures(runs: dict) -> list[str]:
    """One line per setting and traffic where requests failed: how many, which, and the
    first server message."""
    lines = []
    for name, run in runs.items():
        for variant, answers in run["variants"].items():
            failed = [r for r in answers["requests"] if "error" in r]
            if failed:
                ids = ", ".join(r["id"] for r in failed[:8]) + (" ..." if len(failed) > 8 else "")
                lines.append(f"{name}/{variant}: {len(failed)} of {len(answers['requests'])} "
                             f"requests failed and are left out ({ids}); first: "
                             f"{failed[0]['id']}: {failed[0]['error']}")
    return lines


def round_speedups(runs: dict) -> dict[str, list[float]]:
    """Per setting and variant: output tokens/s over the no-draft server's in the same
    round, one figure per round (none without that server)."""
    if NO_DRAFT not in runs:
        return {}
    reference = runs[NO_DRAFT]["variants"]
    found = {}
    for name, run in runs.items():
        if name == NO_DRAFT:
            continue
        for variant, v in run["variants"].items():
            base = reference[variant].get("round_tokens_per_s", [reference[variant]["tokens_per_s"]])
            mine = v.get("round_tokens_per_s", [v["tokens_per_s"]])
            found[f"{name}/{variant}"] = [round(a / b, 3) for a, b in zip(mine, base) if b]
    return found


def speedups(runs: dict) -> dict:
    """Per setting and variant: the median of its per-round speedups, their spread, and
    how many rounds (one round: one window each, at different times)."""
    out = {}
    for key, values in round_speedups(runs).items():
        if values:
            out[key] = {"median": round(statistics.median(values), 3),
                        "low": min(values), "high": max(values), "rounds": len(values)}
    return out


def speed_verdicts(runs: dict, variant: str = "sent") -> list[str]:
    """Which setting is faster, pair by pair, only where the rounds' spreads do not
    overlap; one window each is no ranking at all."""
    found = speedups(runs)
    names = [n for n in runs if n != NO_DRAFT and f"{n}/{variant}" in found]
    lines = []
    for a, b in combinations(names, 2):
        x, y = found[f"{a}/{variant}"], found[f"{b}/{variant}"]
        if min(x["rounds"], y["rounds"]) < 2:
            lines.append(f"{a} and {b}: speed measured in one window each, at different "
                         "times: not ranked (--side-by-side --rounds 3 measures it in "
                         "alternating rounds)")
        elif x["low"] > y["high"] or y["low"] > x["high"]:
            fast, slow = (a, b) if x["low"] > y["high"] else (b, a)
            lines.append(f"{fast} is faster than {slow}: speedup {found[f'{fast}/{variant}']['median']} "
                         f"against {found[f'{slow}/{variant}']['median']}, every round apart "
                         f"({x['rounds']} rounds)")
        else:
            lines.append(f"{a} and {b}: speedups {x['median']} ({x['low']}-{x['high']}) and "
                         f"{y['median']} ({y['low']}-{y['high']}) over {x['rounds']} rounds "
                         "overlap: the spread leaves the ranking open")
    return lines
