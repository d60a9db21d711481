"""The benchmark's goal checks, each PASS, FAIL or SKIP with its figures."""

from __future__ import annotations

from collections import Counter

from vllm_kimi_eagle.tools.bench_e2e.stats import best_k, round_winners, speedup_rows

GOAL_RATIO = 0.98  # the plugin's tokens/s over the in-tree class's, in every cell


def goal_checks(cells: list[dict], windows: list[dict]) -> list[dict]:
    """The issue's two goal figures, each PASS, FAIL or SKIP with the numbers."""
    checks = []
    rows = speedup_rows(cells)
    ratios = [(c, row["k"], row["plugin_over_in_tree"]) for c, rs in rows.items() for row in rs
              if row["plugin_over_in_tree"] is not None]
    if ratios:
        worst = min(ratios, key=lambda item: item[2])
        failing = [f"k={k} c={c}: {r}" for c, k, r in ratios if r < GOAL_RATIO]
        checks.append({
            "goal": f"plugin >= {GOAL_RATIO}x in-tree tokens/s in every cell",
            "status": "FAIL" if failing else "PASS",
            "detail": (f"{len(ratios)} cells, lowest {worst[2]} (k={worst[1]}, concurrency "
                       f"{worst[0]})" + (f"; below: {', '.join(failing)}" if failing else "")),
        })
    else:
        checks.append({"goal": f"plugin >= {GOAL_RATIO}x in-tree", "status": "SKIP",
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
