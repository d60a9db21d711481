"""Which reading ``calibrate`` recommends: the best offline acceptance, when it is ahead
of today's reading beyond the noise of the prompts, and when vLLM's own counters agree."""

from __future__ import annotations

# A reading beats today's when it is ahead in at least this share of the bootstrap
# samples over prompts (paired: the same resampled prompts for both).
CONFIDENCE = 0.95


def decide(rows: list[dict], current: int | None, samples: dict) -> dict:
    """The recommended row: the best offline acceptance, when it beats today's reading in at
    least CONFIDENCE of the paired bootstrap samples; else today's (a tie within noise)."""
    best = max(range(len(rows)), key=lambda i: (rows[i]["acceptance_length"], i == current))
    if current is None:
        return {"row": best, "beats_current": True,
                "why": "the plugin refuses this draft today; the best reading is the one to apply"}
    if best == current:
        return {"row": current, "beats_current": False,
                "why": "today's reading is the best measured"}
    ahead = float((samples[best] > samples[current]).mean())
    if ahead >= CONFIDENCE:
        return {"row": best, "beats_current": True,
                "why": f"ahead of today's reading in {ahead:.1%} of {len(samples[best])} "
                       "bootstrap samples over prompts"}
    return {"row": current, "beats_current": False,
            "why": f"the best reading ({rows[best]['reading']}) is ahead in only {ahead:.1%} "
                   f"of the bootstrap samples (< {CONFIDENCE:.0%}): a tie within noise, "
                   "today's reading stays"}


def recheck_online(decision: dict, rows: list[dict], current: int | None) -> dict:
    """A recommendation to change stands only if vLLM's own counters agree with it."""
    chosen = decision["row"]
    if not decision["beats_current"] or current is None:
        return decision
    ours, theirs = rows[chosen]["online"], rows[current]["online"]
    if ours["acceptance_length"] > theirs["acceptance_length"]:
        return dict(decision, why=decision["why"] + f"; online {ours['acceptance_length']} vs "
                                                    f"{theirs['acceptance_length']}")
    return {"row": current, "beats_current": False,
            "why": f"offline {rows[chosen]['reading']} led, but served by vLLM it reached "
                   f"{ours['acceptance_length']} against today's {theirs['acceptance_length']}:"
                   " today's reading stays"}
