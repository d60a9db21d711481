"""``vllm-kimi-eagle bench-e2e``: which num_speculative_tokens, at which concurrency.

Serves the target through vLLM's OpenAI server in up to four configurations (``CONFIGS``):
no speculation, the plugin's draft class, vLLM's in-tree class
(``VLLM_KIMI_EAGLE_DRAFT=upstream``) and the plugin with the greedy shortcut off
(``"use_local_argmax_reduction": false`` in the speculative config), for every k
(``num_speculative_tokens``) and concurrency asked for, and prints per concurrency the k
with the best speedup over no speculation, or that no k beats it.

How it is measured, the same way for every configuration:

- For one k, the servers of every configuration are alive together (the no-speculation
  server for the whole run; ``--max-servers`` splits them into groups, one after the
  other, each beside the no-speculation server); each gets the same warm-up (one batch of
  the largest concurrency). Then ``--repeats`` rounds; in each round every concurrency,
  and for each concurrency every configuration of the group and no speculation once, in
  an order rotated from round to round. So a cell's repeats are spread over its group's
  whole measurement time, interleaved with the other configurations' (``schedule``).
- One window: the same requests (greedy, ``ignore_eos``, ``--max-tokens`` each; at
  least as many requests as the concurrency, the prompts cycled), sent by
  ``concurrency`` client threads, between two ``/metrics`` scrapes.
- Output tokens/s is the client's figure: completion tokens over the window's wall time.
  Time per output token is the server's (``vllm:request_decode_time_seconds`` over the
  tokens after each request's first, ``spec_metrics.time_per_output_token_ms``).
  Acceptance length and per-position acceptance come from the window's spec-decode
  counters; a speculative window in which no draft was proposed is an error.
- A cell (configuration × k × concurrency) reports median, min and max over its repeats;
  its acceptance is pooled over the repeats' counters. Its speedup is the ratio of
  medians, its own over the no-speculation server's in the same rounds; plugin / in-tree
  is the ratio of their speedups (with one server group: of their medians).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import statistics
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field

from vllm_kimi_eagle import evaluate, serving, spec_metrics, tiny_corpus

NONE, PLUGIN, IN_TREE, NO_SHORTCUT = "none", "plugin", "in-tree", "no-shortcut"


@dataclass(frozen=True)
class Config:
    """One way of serving the target: what is added to its speculative config and env."""
    description: str
    speculative: bool
    spec_extra: dict = field(default_factory=dict)
    env: dict = field(default_factory=dict)


CONFIGS = {
    NONE: Config("no speculation", speculative=False),
    PLUGIN: Config("the plugin's draft class", True, env={"VLLM_KIMI_EAGLE_DRAFT": "plugin"}),
    IN_TREE: Config("vLLM's in-tree draft class", True, env={"VLLM_KIMI_EAGLE_DRAFT": "upstream"}),
    NO_SHORTCUT: Config("the plugin, greedy shortcut off", True,
                        spec_extra={"use_local_argmax_reduction": False},
                        env={"VLLM_KIMI_EAGLE_DRAFT": "plugin"}),
}
DEFAULTS = {"k": [1, 2, 3, 4, 5], "concurrency": [1, 4, 16], "repeats": 3, "max_tokens": 64,
            "prompts": 8, "configs": list(CONFIGS), "max_servers": None}
# --quick: a grid measured to finish in under 10 minutes on 2 loaded cores (tiny models).
QUICK = {"k": [1, 3], "concurrency": [1, 4], "repeats": 3, "max_tokens": 32, "prompts": 4,
         "configs": [NONE, PLUGIN, IN_TREE], "max_servers": 2}
# With the tiny default models (no --target) and no --server-args: eager mode starts in
# about half the time of compiled mode on a CPU.
TINY_SERVER_ARGS = ["--enforce-eager"]
GOAL_RATIO = 0.98  # the plugin's tokens/s over the in-tree class's, in every cell


class BenchError(RuntimeError):
    """A measurement that does not measure what it claims to."""


# ---- decisions (pure) --------------------------------------------------------------------
def spread(values: list[float]) -> dict:
    """Median, min and max of a cell's repeats (None when there are none)."""
    values = [v for v in values if v is not None]
    if not values:
        return {"median": None, "min": None, "max": None, "values": []}
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3), "values": [round(v, 3) for v in values]}


def server_groups(configs: list[str], max_servers: int | None) -> list[list[str]]:
    """The speculative configurations whose servers are alive together for one k.

    The no-speculation server (when asked for) is alive all the time and counts as one
    of ``max_servers`` (None: no limit, one group)."""
    speculative = [c for c in configs if CONFIGS[c].speculative]
    if not speculative:
        return [[]]
    size = len(speculative) if max_servers is None else max_servers - (NONE in configs)
    if size < 1:
        raise BenchError(f"--max-servers {max_servers} leaves no room for a speculative "
                         "server next to the no-speculation one; give 2 or more")
    return [speculative[i:i + size] for i in range(0, len(speculative), size)]


def schedule(ks: list[int], concurrencies: list[int], repeats: int, configs: list[str],
             max_servers: int | None = None) -> list[tuple[int, int, int, int, str]]:
    """The measurement order: (k, group, round, concurrency, config). k by k, server
    group by group; within a group, round by round, every concurrency, each of the group's
    configurations and no speculation once, in an order rotated by one each time."""
    order = []
    for k in ks:
        for g, group in enumerate(server_groups(configs, max_servers)):
            members = [c for c in configs if c == NONE or c in group]
            for round_ in range(repeats):
                for i, concurrency in enumerate(concurrencies):
                    shift = (round_ + i) % len(members)
                    for config in members[shift:] + members[:shift]:
                        order.append((k, g, round_, concurrency, config))
    return order


def plugin_problem(configs: list[str], environ) -> str | None:
    """Why the servers would not load the plugin although configurations need it."""
    plugins = environ.get("VLLM_PLUGINS")
    needs = [c for c in configs if c != NONE]
    if plugins is None or not needs or "kimi_eagle" in [p.strip() for p in plugins.split(",")]:
        return None
    return (f"VLLM_PLUGINS={plugins!r} keeps vLLM from loading this plugin, so configs "
            f"{', '.join(needs)} would all be vLLM without it; unset VLLM_PLUGINS or add "
            "kimi_eagle to it")


def server_config(config: str, draft: str, k: int) -> dict | None:
    """The --speculative-config of a configuration at k (None: no speculation)."""
    spec = CONFIGS[config]
    if not spec.speculative:
        return None
    return {"method": "eagle3", "model": draft, "num_speculative_tokens": k, **spec.spec_extra}


def window_problem(config: str, counters: spec_metrics.SpecCounters) -> str | None:
    """Why a window cannot stand as a figure of its configuration, if it cannot."""
    if CONFIGS[config].speculative and counters.drafts <= 0:
        return (f"{config}: no draft was proposed during the window (spec-decode counters "
                "did not move): the server does not speculate; see its log")
    if not CONFIGS[config].speculative and counters.drafts > 0:
        return f"{config}: {int(counters.drafts)} drafts in a window without speculation"
    return None


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    return round(numerator / denominator, 3) if numerator and denominator else None


def cell(config: str, k: int, concurrency: int, windows: list[dict]) -> dict:
    """One JSON object per cell from all windows of the run (``measure_window`` dicts
    with their place in the schedule). A speculative cell's speedup is its median over
    the median of the no-speculation windows of the same rounds (same k, same server
    group); the no-speculation cell of k pools its windows of every group of k. The
    server's time per output token gives a second speedup; ``consistent`` says whether the
    two agree within the eval's tolerance (``evaluate.speedups``)."""
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
        both = evaluate.speedups(
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
        "baseline_tokens_per_s": spread([w["tokens_per_s"] for w in base])["median"]
                                 if speculative else None,
        "speedup": both["speedup_generation"],
        "speedup_time_per_output_token": both["speedup_time_per_output_token"],
        "speedups_consistent": both["consistent"],
        "speedup_per_round": spread(per_round) if speculative else None,
        "acceptance_length_per_repeat": (spread([w["counters"].acceptance_length for w in mine])
                                         if speculative else None),
        **pooled.summary(),
    }


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


def _round_spread(rows: list[dict], k: int | None) -> str:
    """', paired per round min-max' of the row whose k is given (the best one)."""
    spread_ = next((row["per_round"] for row in rows if row["k"] == k), None)
    if not spread_ or spread_["min"] is None:
        return ""
    return f"; paired per round {spread_['min']:.2f}-{spread_['max']:.2f}x"


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


def format_report(cells: list[dict], windows: list[dict]) -> str:
    """The printout: per concurrency a table and the best k, then the goal checks."""
    lines = []
    for concurrency, rows in speedup_rows(cells).items():
        configs = list(rows[0]["tokens_per_s"])
        lead = rows[0]["lead"]
        header = ["k", *[f"{c} tok/s" for c in configs],
                  *[f"speedup {c}" for c in rows[0]["speedup"]], "plugin/in-tree",
                  f"accept len ({lead})", *[f"TPOT ms {c}" for c in rows[0]["tpot_ms"]],
                  f"speedup by TPOT ({lead})"]
        table = [header]
        for row in rows:
            table.append([
                str(row["k"]),
                *[_spread_text(row["tokens_per_s"][c]) for c in configs],
                *[_num(row["speedup"][c]) for c in row["speedup"]],
                _num(row["plugin_over_in_tree"]), _num(row["acceptance_length"]),
                *[_num(row["tpot_ms"][c]) for c in row["tpot_ms"]],
                _num(row["speedup_tpot"]) + ("*" if row["consistent"] is False else ""),
            ])
        widths = [max(len(r[i]) for r in table) for i in range(len(header))]
        lines.append(f"\nconcurrency {concurrency} (tokens/s: median [min-max] over repeats, "
                     "client side; speedup: ratio of medians, over the no-speculation "
                     "windows of the same rounds; TPOT: the server's median time per output token)")
        lines += ["  " + "  ".join(v.rjust(w) for v, w in zip(r, widths)) for r in table]
        if any(row["consistent"] is False for row in rows):
            lines.append(f"  * more than {evaluate.CONSISTENCY_TOLERANCE:.0%} away from the "
                         "tokens/s speedup: prefill, queueing or a busy machine weigh in; "
                         "use more --prompts, --max-tokens and --repeats")
        k, speedup = best_k(rows)
        if speedup is None:
            lines.append(f"best k at concurrency {concurrency}: nothing to compare (needs "
                         "config none)")
        elif k is None:
            best_row = max((row for row in rows if row["speedup"].get(lead) is not None),
                           key=lambda row: row["speedup"][lead])
            lines.append(f"best k at concurrency {concurrency}: no k beats no speculation "
                         f"(best {lead} speedup {speedup}x at k={best_row['k']}"
                         f"{_round_spread(rows, best_row['k'])}): serve without a draft")
        else:
            lines.append(f"best k at concurrency {concurrency}: k={k} (speedup {speedup}x, "
                         f"{lead}{_round_spread(rows, k)})")
    lines.append("")
    for check in goal_checks(cells, windows):
        lines.append(f"{check['status']}: {check['goal']}: {check['detail']}")
    return "\n".join(lines)


def _num(value) -> str:
    return "-" if value is None else f"{value:g}"


def _spread_text(s: dict) -> str:
    if s["median"] is None:
        return "-"
    return f"{s['median']:.1f} [{s['min']:.1f}-{s['max']:.1f}]"


def settings(args) -> dict:
    """The grid: the user's values, else --quick's, else the defaults."""
    base = QUICK if args.quick else DEFAULTS
    return {name: getattr(args, name) if getattr(args, name) is not None else base[name]
            for name in DEFAULTS}


def bench_server_args(user: list[str], tiny_default: bool) -> list[str]:
    """The servers' arguments: the user's, the eval's visible defaults for flags they do
    not give (--seed 0), and eager mode for the tiny models when the user gave none."""
    return evaluate.server_args(user or (TINY_SERVER_ARGS if tiny_default else []))


# ---- measuring -----------------------------------------------------------------------------
def window_requests(prompts: list[str], concurrency: int) -> list[str]:
    """The requests of one window: every prompt, cycled up to the concurrency."""
    return [prompts[i % len(prompts)] for i in range(max(len(prompts), concurrency))]


def measure_window(server: serving.Server, model: str, prompts: list[str],
                   concurrency: int, max_tokens: int) -> dict:
    requests = window_requests(prompts, concurrency)
    before = server.scrape()
    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        done = list(pool.map(lambda p: serving.chat(server, model, p, max_tokens), requests))
    seconds = time.perf_counter() - started
    window = server.scrape() - before
    tokens = sum(r["completion_tokens"] for r in done)
    return {
        "requests": len(requests),
        "output_tokens": tokens,
        "seconds": seconds,
        "tokens_per_s": tokens / seconds,
        "tpot_ms": spec_metrics.time_per_output_token_ms(window),
        "counters": spec_metrics.spec_counters(window),
    }


def warm_up(server: serving.Server, model: str, prompts: list[str], grid: dict) -> None:
    measure_window(server, model, prompts, max(grid["concurrency"]), grid["max_tokens"])


def run(args, grid: dict, out: str) -> tuple[list[dict], list[dict]]:
    """Every window of the grid; returns (cells, windows)."""
    from tqdm import tqdm

    prompts = tiny_corpus.demo_prompts(grid["prompts"])
    configs = grid["configs"]
    extra = bench_server_args(args.server_args, tiny_default=args.target_is_tiny)
    order = schedule(grid["k"], grid["concurrency"], grid["repeats"], configs,
                     grid["max_servers"])
    windows: list[dict] = []
    progress = tqdm(total=len(order), desc="bench-e2e windows", unit="window",
                    file=sys.stderr, dynamic_ncols=True)
    servers: dict[str, tuple[serving.Server, str]] = {}

    def say(message: str) -> None:
        progress.write(message, file=sys.stderr)  # tqdm.write defaults to stdout

    def start(stack: ExitStack, config: str, k: int) -> None:
        spec = server_config(config, args.draft, k)
        log = os.path.join(out, f"server-{config}" + (f"-k{k}" if spec else "") + ".log")
        env = {**serving.default_env(), **CONFIGS[config].env}
        say(f"starting {config} ({CONFIGS[config].description}"
                       + (f", k={k}" if spec else "") + f"); log {log}")
        started = time.perf_counter()
        server = stack.enter_context(serving.running_server(
            args.target, log, spec, extra, env=env, startup_timeout=args.startup_timeout))
        model = server.model_name()
        warm_up(server, model, prompts, grid)
        say(f"  {config} ready and warmed up in {time.perf_counter() - started:.0f}s")
        progress.unpause()  # the ETA is over measurement windows, not server starts
        servers[config] = (server, model)

    with ExitStack() as whole:
        if NONE in configs:
            start(whole, NONE, 0)
        for k in grid["k"]:
            for g, group in enumerate(server_groups(configs, grid["max_servers"])):
                with ExitStack() as alive:
                    for config in group:
                        start(alive, config, k)
                    for k_, g_, round_, concurrency, config in order:
                        if (k_, g_) != (k, g):
                            continue
                        progress.set_postfix_str(f"k={k} round {round_ + 1} c={concurrency} "
                                                 f"{config}")
                        server, model = servers[config]
                        w = measure_window(server, model, prompts, concurrency,
                                           grid["max_tokens"])
                        problem = window_problem(config, w["counters"])
                        if problem:
                            raise BenchError(f"{problem} (log {server.log_path})")
                        windows.append({"k": k, "group": g, "round": round_,
                                        "concurrency": concurrency, "config": config, **w})
                        progress.update()
    progress.close()
    cells = [cell(config, k, concurrency, windows)
             for k in grid["k"] for concurrency in grid["concurrency"] for config in configs]
    return cells, windows


# ---- output --------------------------------------------------------------------------------
def write_json(path: str, grid: dict, args, cells: list[dict], windows: list[dict],
               elapsed: float) -> None:
    rows = speedup_rows(cells)
    best = {str(c): dict(zip(("k", "speedup"), best_k(rs))) for c, rs in rows.items()}
    report = {
        "target": args.target, "draft": args.draft, "grid": grid,
        "server_args": bench_server_args(args.server_args, args.target_is_tiny),
        "server_env": {name: {**serving.default_env(), **CONFIGS[name].env}
                       for name in grid["configs"]},
        "tokens_per_s_source": "client: completion tokens / window wall time",
        "time_per_output_token_source": "server: vllm:request_decode_time_seconds delta",
        "elapsed_s": round(elapsed, 1),
        "cells": cells,
        "best": best,
        "goals": goal_checks(cells, windows),
    }
    with open(path, "w") as f:
        json.dump(report, f, indent=2)


def write_png(path: str, cells: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    rows = speedup_rows(cells)
    lead = next(iter(rows.values()))[0]["lead"] if rows else None
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for k in sorted({c["k"] for c in cells if c["config"] == lead}):
        pooled = [c for c in cells if c["config"] == lead and c["k"] == k]
        drafts = sum(c["drafts"] for c in pooled)
        if not drafts:
            continue
        rates = [sum(c["acceptance_by_position"][i] * c["drafts"] for c in pooled) / drafts
                 for i in range(k)]
        left.plot(range(1, k + 1), rates, marker="o", label=f"k={k}")
    left.set_ylim(0, 1.05)
    left.set_xlabel("draft position")
    left.set_ylabel("acceptance rate")
    left.set_title(f"acceptance by position ({lead}, all concurrencies)")
    left.legend(fontsize="small")
    for concurrency, rs in rows.items():
        points = [(row["k"], row["speedup"].get(row["lead"])) for row in rs]
        points = [(k, s) for k, s in points if s is not None]
        if points:
            right.plot(*zip(*points), marker="o", label=f"concurrency {concurrency}")
    right.axhline(1.0, color="gray", linestyle="--", linewidth=1)
    right.set_xlabel("num_speculative_tokens (k)")
    right.set_ylabel("speedup vs no speculation (tokens/s)")
    right.set_title(f"speedup ({lead})")
    right.legend(fontsize="small")
    for axis in (left, right):
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ---- command line --------------------------------------------------------------------------
def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError as err:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}") from err
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def _positive(text: str) -> int:
    values = _int_list(text)
    if len(values) != 1:
        raise argparse.ArgumentTypeError(f"expected one positive integer, got {text!r}")
    return values[0]


def _config_list(text: str) -> list[str]:
    names = [v.strip() for v in text.split(",") if v.strip()]
    unknown = [n for n in names if n not in CONFIGS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown config(s) {unknown or text!r}; choose from "
                                         f"{', '.join(CONFIGS)}")
    return [n for n in CONFIGS if n in names]  # a fixed order: none first


def parse_args(argv):
    p = argparse.ArgumentParser(prog="vllm-kimi-eagle bench-e2e", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", help="target model (default: the tiny target)")
    p.add_argument("--draft", help="draft model (default: the tiny draft)")
    p.add_argument("--k", type=_int_list, help=f"num_speculative_tokens values (default "
                   f"{','.join(map(str, DEFAULTS['k']))})")
    p.add_argument("--concurrency", type=_int_list, help="client concurrencies (default "
                   f"{','.join(map(str, DEFAULTS['concurrency']))})")
    p.add_argument("--repeats", type=_positive, help=f"interleaved repeats per cell (default "
                   f"{DEFAULTS['repeats']})")
    p.add_argument("--max-tokens", type=_positive, help=f"output tokens per request (default "
                   f"{DEFAULTS['max_tokens']})")
    p.add_argument("--prompts", type=_positive, help=f"distinct prompts per window (default "
                   f"{DEFAULTS['prompts']})")
    p.add_argument("--configs", type=_config_list,
                   help=f"subset of {','.join(CONFIGS)} (default all)")
    p.add_argument("--max-servers", type=_positive,
                   help="servers alive at once, the no-speculation one included (default: "
                        "all configurations of one k together; --quick: 2). Configurations "
                        "not alive together are compared through their speedups over no "
                        "speculation, each measured in its own interleaved rounds")
    p.add_argument("--server-args", type=shlex.split, default=[],
                   help="arguments for every server, e.g. \"--tensor-parallel-size 8 "
                        "--trust-remote-code\"; the command adds only --seed 0 unless you "
                        "give --seed (and --enforce-eager for the tiny models when you give "
                        "none)")
    p.add_argument("--startup-timeout", type=float, default=serving.DEFAULT_STARTUP_TIMEOUT,
                   help=f"seconds each server may take to become healthy (default "
                        f"{serving.DEFAULT_STARTUP_TIMEOUT})")
    p.add_argument("--quick", action="store_true",
                   help=f"a small grid (k {QUICK['k']}, concurrency {QUICK['concurrency']}, "
                        f"{QUICK['repeats']} repeats, configs {','.join(QUICK['configs'])}); "
                        "values you give still win")
    p.add_argument("--out", default="out/bench-e2e")
    args = p.parse_args(argv)
    if bool(args.target) != bool(args.draft):
        p.error("give both --target and --draft, or neither (the tiny models)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    started = time.perf_counter()
    args.target_is_tiny = not args.target
    if args.target_is_tiny:
        from vllm_kimi_eagle import tiny_models

        folder = tiny_models.ensure_tiny_models()
        args.target, args.draft = os.path.join(folder, "target"), os.path.join(folder, "draft")
    grid = settings(args)
    problem = plugin_problem(grid["configs"], os.environ)
    if problem:
        print(f"vllm-kimi-eagle bench-e2e: {problem}", file=sys.stderr)
        return 2
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    print(f"bench-e2e: {args.target} with {args.draft}; k {grid['k']}, concurrency "
          f"{grid['concurrency']}, {grid['repeats']} repeats, {grid['prompts']} prompts x "
          f"{grid['max_tokens']} tokens, configs {','.join(grid['configs'])}, servers at once: "
          f"{grid['max_servers'] or 'all of one k'}; server args: "
          f"{' '.join(bench_server_args(args.server_args, args.target_is_tiny))}",
          file=sys.stderr, flush=True)
    # A killed benchmark stops its servers (they run in sessions of their own): SIGTERM
    # becomes SystemExit, which unwinds through every running_server.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        cells, windows = run(args, grid, out)
    except (BenchError, serving.ServerError) as err:
        print(f"vllm-kimi-eagle bench-e2e: {err}", file=sys.stderr)
        return 2
    elapsed = time.perf_counter() - started
    json_path, png_path = os.path.join(out, "bench-e2e.json"), os.path.join(out, "bench-e2e.png")
    write_json(json_path, grid, args, cells, windows, elapsed)
    write_png(png_path, cells)
    print(format_report(cells, windows))
    print(f"\nwrote {json_path}, {png_path}; elapsed {elapsed:.0f}s")
    return 0
