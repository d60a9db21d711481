"""Which reading ``calibrate`` recommends, and when it has measured enough to say so.

Readings are compared on the same prompts, with a paired bootstrap over prompts. The run
measures in rounds (more prompts each time) and stops as soon as the comparison that
matters is decided:

- today's reading measures best: it is *kept* once it is ahead of the runner-up in at
  least the confidence asked for of the resampled prompt sets;
- another reading measures best: it is *recommended* once it is ahead of today's as often;
- otherwise the run measures more prompts, and when the prompts or the time run out it
  says the comparison is *undecided*, with the interval of the difference, and keeps
  today's reading (never a silent keep).

Looking after every round would let noise decide more often than once in twenty; each
look is held to ``1 - (1 - CONFIDENCE) / looks`` so that the run as a whole does not.
"""

from __future__ import annotations

CONFIDENCE = 0.95
CHANGE, KEEP, UNDECIDED, APPLY = "change", "keep", "undecided", "apply"


def per_look(planned_looks: int) -> float:
    """The confidence each of ``planned_looks`` looks is held to."""
    return 1 - (1 - CONFIDENCE) / max(planned_looks, 1)


def _interval(difference) -> list[float]:
    import numpy as np

    return [round(float(q), 4) for q in np.quantile(difference, [0.05, 0.95])]


def decide(rows: list[dict], current: int | None, samples: dict,
           confidence: float = CONFIDENCE) -> dict:
    """The decision after one look: ``status`` (CHANGE, KEEP, UNDECIDED, or APPLY where the
    plugin refuses the draft today), the row to use, the compared pair's share of
    resampled prompt sets and the 5-95% interval of their difference, and why."""
    best = max(range(len(rows)), key=lambda i: (rows[i]["acceptance_length"], i == current))
    if current is None:
        return {"status": APPLY, "row": best, "beats_current": True, "ahead": None,
                "difference": None,
                "why": "the plugin refuses this draft today; the best reading is the one to apply"}
    if len(rows) == 1:
        return {"status": KEEP, "row": current, "beats_current": False, "ahead": 1.0,
                "difference": None, "why": "today's reading is the only candidate"}
    if best == current:
        other = max((i for i in range(len(rows)) if i != current),
                    key=lambda i: rows[i]["acceptance_length"])
        lead, trail = current, other
    else:
        lead, trail = best, current
    ahead = float((samples[lead] > samples[trail]).mean())
    difference = _interval(samples[lead] - samples[trail])
    share = (f"ahead of {rows[trail]['reading']} in {ahead:.1%} of {len(samples[lead])} "
             f"resampled prompt sets (difference {difference[0]:+.3f} to {difference[1]:+.3f})")
    if ahead >= confidence:
        status = KEEP if lead == current else CHANGE
        why = ("today's reading is the best measured, " if status == KEEP else "") + share
        return {"status": status, "row": lead, "beats_current": status == CHANGE,
                "ahead": ahead, "difference": difference, "why": why}
    return {"status": UNDECIDED, "row": current, "beats_current": False, "ahead": ahead,
            "difference": difference,
            "why": f"{rows[lead]['reading']} measures best but is {share}, short "
                   f"of {confidence:.2%}; today's reading stays. More prompts "
                   "(--max-prompts, --time-budget) would decide it"}


def online_difference(ours: dict, theirs: dict) -> dict | None:
    """The served readings' per-prompt acceptance lengths compared pair by pair (vLLM's
    per-request figures), or None where the release gives none."""
    from vllm_kimi_eagle.tools import paired

    a, b = ours.get("per_prompt"), theirs.get("per_prompt")
    if not a or not b or len(a) != len(b):
        return None
    pairs = [(x, y) for x, y in zip(a, b) if x is not None and y is not None]
    if not pairs:
        return None
    return paired.paired_difference([x for x, _ in pairs], [y for _, y in pairs])


def recheck_online(decision: dict, rows: list[dict], current: int | None) -> dict:
    """A recommendation to change stands unless vLLM's own figures contradict it: served,
    the two readings are compared prompt by prompt (a paired interval), and the change
    is withdrawn only when that interval puts today's reading ahead. Without per-request
    figures (vLLM before 0.29), the served means must agree."""
    chosen = decision["row"]
    if decision["status"] != CHANGE or current is None:
        return decision
    ours, theirs = rows[chosen]["online"], rows[current]["online"]
    served = (f"online {ours['acceptance_length']} vs {theirs['acceptance_length']}")
    difference = online_difference(ours, theirs)
    if difference is not None:
        interval = (f"served, prompt by prompt, {rows[chosen]['reading']} minus today's "
                    f"{difference['mean']:+.3f} (95% {difference['low']:+.3f} to "
                    f"{difference['high']:+.3f}, {difference['pairs']} prompts)")
        if difference["high"] >= 0:
            return dict(decision, online_difference=difference,
                        why=f"{decision['why']}; {served}; {interval}")
        return dict(decision, status=UNDECIDED, row=current, beats_current=False,
                    online_difference=difference,
                    why=f"offline {rows[chosen]['reading']} led, but {interval}: today's "
                        "reading stays")
    if ours["acceptance_length"] > theirs["acceptance_length"]:
        return dict(decision, why=f"{decision['why']}; {served}")
    return dict(decision, status=UNDECIDED, row=current, beats_current=False,
                why=f"offline {rows[chosen]['reading']} led, but served by vLLM it "
                    f"reached {ours['acceptance_length']} against today's "
                    f"{theirs['acceptance_length']}: today's reading stays")
