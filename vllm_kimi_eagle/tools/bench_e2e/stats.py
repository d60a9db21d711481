"""From measured windows to figures: a cell's spread and speedups, the rows per
concurrency, the best k and the per-round winners. Pure functions."""

from __future__ import annotations

import statistics

from vllm_kimi_eagle.tools.bench_e2e.grid import AA, CONFIGS, IN_TREE, NONE, PLUGIN
from vllm_kimi_eagle.tools.figures import request_metrics, spec_metrics
from vllm_kimi_eagle.tools.figures.speedup import ratio, speedups


def spread(values: list[float]) -> dict:
    """Median, min and max of a cell's repeats (None when there are none)."""
    values = [v for v in values if v is not None]
    if not values:
        return {"median": None, "min": None, "max": None, "values": []}
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3), "values": [round(v, 3) for v in values]}


def window_problem(config: str, counters: spec_metrics.SpecCounters,
                   must_draft: bool | None = None) -> str | None:
    """Why a window cannot stand as a figure of its configuration, if it cannot.
    ``must_draft`` overrides the configuration's rule (None: its rule; a config with no
    entry in CONFIGS, like the k schedule, is checked only where ``must_draft`` says)."""
    if must_draft is None:
        must_draft = CONFIGS[config].must_draft if config in CONFIGS else None
    if must_draft is None:
        return None
    if must_draft and counters.drafts <= 0:
        return (f"{config}: no draft was proposed during the window (spec-decode counters "
                "did not move): the server does not speculate; see its log")
    if not must_draft and counters.drafts > 0:
        return (f"{config}: {int(counters.drafts)} drafts in a window of a configuration "
                "that must not draft")
    return None


def cell(config: str, k: int, concurrency: int, windows: list[dict]) -> dict:
    """One JSON object per cell from all windows of the run (``measure_window`` dicts
    with their place in the schedule). A speculative cell's speedup is its median over
    the median of the no-speculation windows of the same rounds (same k, same server
    group); the no-speculation cell of k pools its windows of every group of k. The
    server's time per output token gives a second speedup; ``consistent`` says whether the
    two agree within the eval's tolerance (``speedup.speedups``)."""
    mine = [w for w in windows
            if (w["config"], w["k"], w["concurrency"]) == (config, k, concurrency)]
    groups = {w["group"] for w in mine}
    base = [w for w in windows if w["config"] == NONE and w["k"] == k
            and w["concurrency"] == concurrency and w["group"] in groups]
    pooled = spec_metrics.SpecCounters()
    for w in mine:
        pooled = pooled + w["counters"]
    speculative = CONFIGS[config].speculative
    tokens_per_s = spread([w["tokens_per_s"] for w in mine])
    tpot = spread([w["tpot_ms"] for w in mine])
    partner = {(w["group"], w["round"]): w["tokens_per_s"] for w in base}
    per_round = [w["tokens_per_s"] / partner[w["group"], w["round"]] for w in mine
                 if (w["group"], w["round"]) in partner]
    both = {"speedup_generation": None, "speedup_time_per_output_token": None,
            "consistent": None}
    if speculative:
        both = speedups(
            {"tokens_per_s": spread([w["tokens_per_s"] for w in base])["median"],
             "mean_time_per_output_token_ms": spread([w["tpot_ms"] for w in base])["median"]},
            {"tokens_per_s": tokens_per_s["median"],
             "mean_time_per_output_token_ms": tpot["median"]})
    return {
        "config": config,
        "k": k if speculative else 0,
        "measured_with_k": k,
        "concurrency": concurrency,
        "repeats": len(mine),
        "requests_per_window": mine[0]["requests"] if mine else 0,
        "tokens_per_s": tokens_per_s,
        "time_per_output_token_ms": tpot,
        # Mean requests the engine sampled per step: the batch size a k schedule is keyed on.
        "batch": spread([w.get("batch") for w in mine])["median"],
        "baseline_tokens_per_s": spread([w["tokens_per_s"] for w in base])["median"]
                                 if speculative else None,
        "speedup": both["speedup_generation"],
        "speedup_time_per_output_token": both["speedup_time_per_output_token"],
        "speedups_consistent": both["consistent"],
        "speedup_per_round": spread(per_round) if speculative else None,
        "acceptance_length_per_repeat": (spread([w["counters"].acceptance_length for w in mine])
                                         if speculative else None),
        "per_request": per_request(mine, k) if speculative else None,
        **pooled.summary(),
    }


def per_request(windows: list[dict], k: int) -> dict | None:
    """The cell's requests, each with its own acceptance length (vLLM's per-request
    figures), and their distribution; requests without figures are counted in
    ``missing`` (request_metrics.reported); None where the server reported none."""
    found = request_metrics.reported(a for w in windows for a in w.get("acceptances", []))
    if not found.figures:
        return None
    figures = list(found.figures)
    return {**request_metrics.distribution(figures, k), "missing": found.missing,
            "acceptance_lengths": [a.acceptance_length for a in figures]}


def lead_config(configs: list[str]) -> str | None:
    """The configuration whose k is recommended: the plugin, else the first speculative."""
    speculative = [c for c in configs if CONFIGS[c].speculative]
    return PLUGIN if PLUGIN in speculative else (speculative[0] if speculative else None)


def speedup_rows(cells: list[dict]) -> dict[int, list[dict]]:
    """Per concurrency, one row per k: median tokens/s of each configuration, speedups
    over no speculation measured in the same rounds, plugin / in-tree (the ratio of
    their speedups: with one server group, the ratio of their medians), acceptance."""
    configs = list(dict.fromkeys(c["config"] for c in cells))
    lead = lead_config(configs)
    rows: dict[int, list[dict]] = {}
    for concurrency in sorted({c["concurrency"] for c in cells}):
        for k in sorted({c["measured_with_k"] for c in cells}):
            here = {c["config"]: c for c in cells
                    if (c["measured_with_k"], c["concurrency"]) == (k, concurrency)}
            speedup = {name: here[name]["speedup"] for name in configs
                       if CONFIGS[name].speculative and name in here}
            row = {"k": k, "tokens_per_s": {name: here[name]["tokens_per_s"]
                                            for name in configs if name in here},
                   "speedup": speedup,
                   "plugin_over_in_tree": ratio(speedup.get(PLUGIN), speedup.get(IN_TREE)),
                   "acceptance_length": here[lead]["acceptance_length"] if lead in here else None,
                   "tpot_ms": {name: here[name]["time_per_output_token_ms"]["median"]
                               for name in (NONE, lead) if name in here},
                   "speedup_tpot": here[lead]["speedup_time_per_output_token"]
                                   if lead in here else None,
                   "consistent": here[lead]["speedups_consistent"] if lead in here else None,
                   "per_round": here[lead]["speedup_per_round"] if lead in here else None,
                   "lead": lead}
            rows.setdefault(concurrency, []).append(row)
    return rows


def best_k(rows: list[dict]) -> tuple[int | None, float | None]:
    """The k whose lead configuration has the highest median speedup; None when no k
    beats no speculation (speedup <= 1) or nothing was compared."""
    scored = [(row["speedup"].get(row["lead"]), row["k"]) for row in rows]
    scored = [(s, k) for s, k in scored if s is not None]
    if not scored:
        return None, None
    speedup, k = max(scored, key=lambda sk: (sk[0], -sk[1]))
    return (k if speedup > 1 else None), speedup


def round_winners(windows: list[dict], concurrency: int, lead: str) -> list[int | None]:
    """Per round, the k whose lead configuration beat no speculation the most in that
    round (paired: the same round of the same k's servers); None when none beat it."""
    paired: dict[tuple[int, int, int], dict[str, float]] = {}
    for w in windows:
        if w["concurrency"] == concurrency:
            key = (w["round"], w["k"], w["group"])
            paired.setdefault(key, {})[w["config"]] = w["tokens_per_s"]
    winners = []
    for round_ in sorted({r for r, _, _ in paired}):
        scores = [(tps[lead] / tps[NONE], k) for (r, k, _), tps in sorted(paired.items())
                  if r == round_ and lead in tps and NONE in tps]
        if scores:
            speedup, k = max(scores, key=lambda sk: (sk[0], -sk[1]))
            winners.append(k if speedup > 1 else None)
    return winners


def aa_check(windows: list[dict], tolerance: float = 0.05) -> list[dict]:
    """The same configuration measured twice in one run (no speculation, two servers):
    per concurrency the ratio of medians and the paired per-round range; PASS within
    ``tolerance``."""
    checks = []
    for c in sorted({w["concurrency"] for w in windows if w["config"] == AA}):
        pairs: dict[tuple, dict[str, float]] = {}
        for w in windows:
            if w["concurrency"] == c and w["config"] in (NONE, AA):
                pairs.setdefault((w["k"], w["group"], w["round"]), {})[w["config"]] = \
                    w["tokens_per_s"]
        paired = [p[AA] / p[NONE] for p in pairs.values() if AA in p and NONE in p]
        medians = [spread([w["tokens_per_s"] for w in windows if w["concurrency"] == c
                           and w["config"] == name])["median"] for name in (NONE, AA)]
        r = ratio(medians[1], medians[0])
        checks.append({"concurrency": c, "ratio": r,
                       "paired_min": round(min(paired), 3) if paired else None,
                       "paired_max": round(max(paired), 3) if paired else None,
                       "rounds": len(paired),
                       "status": "PASS" if r is not None and abs(r - 1) <= tolerance
                       else "FAIL"})
    return checks
