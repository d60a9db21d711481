"""Which reading ``calibrate`` recommends, and when it has measured enough to say so. One
rule on every vLLM release (docs/layer-ids.md, "Decision"):

1. **Offline, per prompt: one figure picks and judges.** Each reading's offline
   acceptance length per prompt (its own positions pooled) is the unit: the prompt is
   what varies independently (tokens of one prompt share its text), and a draft trained
   on a reading beats the others on most prompts, short or long, so the mean over prompts
   is the figure that answers "which reading was it trained on"; a pooled figure would
   let a few long prompts decide. The reading with the highest mean leads; it is compared
   prompt by prompt with today's reading (or, where today's leads, today's with the
   runner-up) by ``tools/figures/paired.py``, the verdict compare gives too: a paired t interval.
   The lead is the best of several readings, so the interval is held to the level shared
   among the comparisons it was picked from, ``1 - (1 - level) / (readings - 1)``
   (Bonferroni). Today's reading is *kept* once it is higher than the runner-up; another
   reading is *recommended* once it is higher than today's; otherwise the run measures
   more prompts, and when the prompts or the time run out the comparison is *undecided*
   and today's reading stays (never a silent keep). Looking after every round would let
   noise decide more often than once in twenty: each look's level is held to
   ``1 - (1 - CONFIDENCE) / looks`` first.
2. **Served, a check.** A recommendation is served by vLLM beside today's reading on the
   same prompts; it stands unless vLLM's counters, pooled over those prompts, give today's
   reading the higher acceptance length. Every release has those counters, so the same
   data gives the same verdict on every release; vLLM's per-request figures (0.29 on)
   are reported beside it and decide nothing.
"""

from __future__ import annotations

from vllm_kimi_eagle.tools.figures import paired

CONFIDENCE = 0.95
CHANGE, KEEP, UNDECIDED, APPLY = "change", "keep", "undecided", "apply"


def per_look(planned_looks: int) -> float:
    """The confidence each of ``planned_looks`` looks is held to."""
    return 1 - (1 - CONFIDENCE) / max(planned_looks, 1)


def _pairs(per_prompt: dict, lead: int, trail: int) -> tuple[list[float], list[float], list]:
    """The two readings' per-prompt lengths over the prompts both scored."""
    both = [p for p, (x, y) in enumerate(zip(per_prompt[lead], per_prompt[trail]))
            if x is not None and y is not None]
    return ([per_prompt[lead][p] for p in both], [per_prompt[trail][p] for p in both],
            [f"prompt {p}" for p in both])


def per_prompt_means(per_prompt: dict[int, list]) -> dict[int, float]:
    """Each reading's mean offline acceptance length per prompt, over the prompts every
    reading scored: the figure that picks the lead (and, paired, judges it)."""
    scored = [p for p in range(len(next(iter(per_prompt.values()))))
              if all(values[p] is not None for values in per_prompt.values())]
    return {i: sum(values[p] for p in scored) / len(scored) if scored else float("-inf")
            for i, values in per_prompt.items()}


def among(confidence: float, readings: int) -> float:
    """The level of one comparison of a lead picked among ``readings`` readings."""
    return 1 - (1 - confidence) / max(readings - 1, 1)


def decide(rows: list[dict], current: int | None, per_prompt: dict[int, list],
           confidence: float = CONFIDENCE) -> dict:
    """The decision after one look: ``status`` (CHANGE, KEEP, UNDECIDED, or APPLY where the
    plugin refuses the draft today), the row to use, the paired ``difference`` of the
    compared readings (lead minus trail, at ``confidence`` shared among the readings) and
    why, in words."""
    means = per_prompt_means(per_prompt)
    best = max(range(len(rows)), key=lambda i: (means[i], i == current))
    if current is None:
        return {"status": APPLY, "row": best, "beats_current": True, "difference": None,
                "why": "the plugin refuses this draft today; the best reading is the one to apply"}
    if len(rows) == 1:
        return {"status": KEEP, "row": current, "beats_current": False, "difference": None,
                "why": "today's reading is the only candidate"}
    if best == current:
        trail = max((i for i in range(len(rows)) if i != current), key=lambda i: means[i])
        lead = current
    else:
        lead, trail = best, current
    difference = paired.paired_difference(*_pairs(per_prompt, lead, trail),
                                          level=among(confidence, len(rows)))
    line = paired.verdict(rows[lead]["reading"], rows[trail]["reading"], difference,
                          "offline acceptance length per prompt")
    if difference["status"] == paired.HIGHER:
        status = KEEP if lead == current else CHANGE
        why = ("today's reading is the best measured: " if status == KEEP else "") + line
        return {"status": status, "row": lead, "beats_current": status == CHANGE,
                "difference": difference, "why": why}
    more = more_prompts(difference)
    return {"status": UNDECIDED, "row": current, "beats_current": False,
            "difference": difference, "final": more is None,
            "why": f"{line}; today's reading stays. " + (
                f"About {more} prompts (--max-prompts, --time-budget) would decide it"
                if more is not None else cannot_decide_words(difference))}


def more_prompts(difference: dict) -> int | None:
    """The prompts that would decide an undecided comparison, or None where no number
    would: the two readings equal on every prompt, or their differences cancelling out
    (or needing more than paired.MAX_NEEDED prompts)."""
    if difference["status"] == paired.SAME:
        return None
    if difference["status"] == paired.TOO_FEW:
        return max(difference["pairs_needed"] or 0, difference["min_pairs"])
    return difference["pairs_needed"]


def cannot_decide_words(difference: dict) -> str:
    if difference["status"] == paired.SAME:
        return ("The two readings score the same on every prompt: this draft does not "
                "depend on what sets them apart, and no number of prompts would decide it")
    if difference["mean"] == 0:
        return ("Their per-prompt differences cancel out (mean 0): more prompts would not "
                "decide it")
    return (f"Their difference ({paired.figure(difference['mean'])} per prompt) is too "
            f"small for any number of prompts up to {paired.MAX_NEEDED} to decide it")


def online_difference(ours: dict, theirs: dict) -> dict | None:
    """The served readings' per-prompt acceptance lengths compared pair by pair (vLLM's
    per-request figures, 0.29 on), for the report; None where the release gives none."""
    a, b = ours.get("per_prompt"), theirs.get("per_prompt")
    if not a or not b or len(a) != len(b):
        return None
    pairs = [(x, y) for x, y in zip(a, b) if x is not None and y is not None]
    if not pairs:
        return None
    return paired.paired_difference([x for x, _ in pairs], [y for _, y in pairs])


def recheck_online(decision: dict, rows: list[dict], current: int | None) -> dict:
    """A recommendation to change stands unless, served by vLLM on the same prompts, today's
    reading reaches the higher acceptance length (the counters, pooled): the same rule on
    every release. vLLM's per-request paired difference, where it gives one, is kept in
    the decision for the report and decides nothing."""
    chosen = decision["row"]
    if decision["status"] != CHANGE or current is None:
        return decision
    ours, theirs = rows[chosen]["online"], rows[current]["online"]
    decision = dict(decision, online_difference=online_difference(ours, theirs))
    served = (f"served by vLLM on the same prompts, {rows[chosen]['reading']} "
              f"{ours['acceptance_length']} against today's {theirs['acceptance_length']}")
    if ours["acceptance_length"] >= theirs["acceptance_length"]:
        return dict(decision, why=f"offline: {decision['why']}; {served}")
    return dict(decision, status=UNDECIDED, row=current, beats_current=False,
                why=f"offline: {decision['why']}; but {served}: today's reading stays")
