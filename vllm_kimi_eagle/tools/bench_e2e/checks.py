"""The benchmark's goal checks, each PASS, FAIL or SKIP with its figures."""

from __future__ import annotations

from collections import Counter

from vllm_kimi_eagle.tools.bench_e2e.stats import aa_check, best_k, round_winners, speedup_rows

# The plugin's tokens/s over the in-tree class's, in every cell: the same math on the
# same inputs (identical acceptance), so only the measurement's noise may separate them.
GOAL_RANGE = (0.98, 1.02)
AA_TOLERANCE = 0.05  # two servers of one configuration, in one run


def goal_checks(cells: list[dict], windows: list[dict]) -> list[dict]:
    """The benchmark's goal figures, each PASS, FAIL or SKIP with the numbers."""
    checks = []
    aa = aa_check(windows, AA_TOLERANCE)
    if aa:
        checks.append({
            "goal": f"A/A: a second no-speculation server within {AA_TOLERANCE:.0%} of the "
                    "first at every concurrency",
            "status": "PASS" if all(a["status"] == "PASS" for a in aa) else "FAIL",
            "detail": "; ".join(f"c={a['concurrency']}: {a['ratio']} (rounds "
                                f"{a['paired_min']}-{a['paired_max']})" for a in aa),
        })
    rows = speedup_rows(cells)
    ratios = [(c, row["k"], row["plugin_over_in_tree"]) for c, rs in rows.items() for row in rs
              if row["plugin_over_in_tree"] is not None]
    low, high = GOAL_RANGE
    if ratios:
        worst = max(ratios, key=lambda item: abs(item[2] - 1))
        failing = [f"k={k} c={c}: {r}" for c, k, r in ratios if not low <= r <= high]
        checks.append({
            "goal": f"plugin / in-tree tokens/s within {low}-{high} in every cell",
            "status": "FAIL" if failing else "PASS",
            "detail": (f"{len(ratios)} cells, furthest {worst[2]} (k={worst[1]}, concurrency "
                       f"{worst[0]})" + (f"; outside: {', '.join(failing)}" if failing else "")),
        })
    else:
        checks.append({"goal": f"plugin / in-tree within {low}-{high}", "status": "SKIP",
                       "detail": "needs configs plugin and in-tree"})
    for concurrency, rs in rows.items():
        lead = rs[0]["lead"]
        recommended, _ = best_k(rs)
        winners = round_winners(windows, concurrency, lead) if lead else []
        if not winners:
            checks.append({"goal": f"recommended k is the measured best (concurrency "
                                   f"{concurrency})", "status": "SKIP",
                           "detail": "needs config none and a speculative config"})
            continue
        tally = Counter(winners)
        top = max(tally.values())
        status = "PASS" if tally.get(recommended, 0) == top else "FAIL"
        checks.append({
            "goal": f"recommended k is the measured best (concurrency {concurrency})",
            "status": status,
            "detail": (f"recommended {_k_name(recommended)} by median speedup; best in each "
                       f"round (paired with no speculation; a tie counts as best): "
                       f"{', '.join(_k_name(w) for w in winners)}"),
        })
    return checks


def _k_name(k: int | None) -> str:
    return "no speculation" if k is None else f"k={k}"
