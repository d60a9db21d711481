"""The benchmark's printout (a table per concurrency, the best k, the goal checks) and
its JSON file."""

from __future__ import annotations

import json

from vllm_kimi_eagle.tools.bench_e2e import k_schedule
from vllm_kimi_eagle.tools.bench_e2e.checks import goal_checks
from vllm_kimi_eagle.tools.bench_e2e.grid import CONFIGS, SCHEDULE_K0, bench_server_args
from vllm_kimi_eagle.tools.bench_e2e.stats import best_k, speedup_rows
from vllm_kimi_eagle.tools.engines import vllm_server
from vllm_kimi_eagle.tools.figures.speedup import CONSISTENCY_TOLERANCE


def _round_spread(rows: list[dict], k: int | None) -> str:
    """', paired per round min-max' of the row whose k is given (the best one)."""
    spread_ = next((row["per_round"] for row in rows if row["k"] == k), None)
    if not spread_ or spread_["min"] is None:
        return ""
    return f"; paired per round {spread_['min']:.2f}-{spread_['max']:.2f}x"


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
            lines.append(f"  * more than {CONSISTENCY_TOLERANCE:.0%} away from the "
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
    lines += _mechanism_lines(cells)
    lines.append("")
    for check in goal_checks(cells, windows):
        lines.append(f"{check['status']}: {check['goal']}: {check['detail']}")
    return "\n".join(lines)


def _mechanism_lines(cells: list[dict]) -> list[str]:
    """What a k schedule costs by itself: the plugin with k=0 at every batch size (the
    draft never proposes) against no speculation, per concurrency."""
    rows = [c for c in cells if c["config"] == SCHEDULE_K0 and c["speedup"] is not None]
    if not rows:
        return []
    return ["", "the k-schedule mechanism alone (k=0 at every batch size vs no speculation, "
                "tokens/s, paired per round): " + "; ".join(
                    f"k={c['measured_with_k']} c={c['concurrency']}: {c['speedup']}x "
                    f"({c['speedup_per_round']['min']}"
                    f"-{c['speedup_per_round']['max']})" for c in rows)]


def format_schedule(part: dict, rows: list[dict]) -> str:
    """The derived schedule, how concurrency mapped to batch size, and per concurrency the
    schedule against the better of no speculation and the best fixed k, and what the
    all-zero schedule costs against no speculation."""
    served = ("served as --speculative-config " + json.dumps(part["speculative_config"])
              if part["speculative_config"] is not None else "served without a draft")
    lines = ["", f"k schedule (num_speculative_tokens_per_batch_size): {part['schedule']} "
                 f"({part['validated']}); {served}",
             "  derived from the best k per concurrency " + ", ".join(
                 f"c={c}: {'none' if k is None else f'k={k}'}" for c, k in part["best_k"].items())
             + "; batch sizes the no-speculation server ran (mean running requests while "
               "busy): " +
             ", ".join(f"c={c}: {b}" for c, b in part["batch"].items())]
    if part.get("skipped"):
        lines.append(f"  {part['skipped']}")
    if not rows:
        return "\n".join(lines)
    header = ["concurrency", "batch", "schedule k", "drafted k/step", "none tok/s",
              "best fixed k",
              "fixed tok/s", "schedule tok/s", "schedule / max(none, fixed)", "rounds", "",
              "all-zero schedule / none", "rounds"]
    table = [header] + [[str(r["concurrency"]), _num(r["batch"]), str(r["schedule_k"]),
                         _num(r["drafted_k_per_step"]), _num(r["none_tok_s"]),
                         str(r["best_fixed_k"] or "none"),
                         _num(r["best_fixed_tok_s"]), _num(r["schedule_tok_s"]),
                         _num(r["schedule_over_best"]),
                         f"{_num(r['paired_min'])}-{_num(r['paired_max'])}", r["status"],
                         _num(r["all_zero_schedule_over_none"]),
                         f"{_num(r['all_zero_paired_min'])}-{_num(r['all_zero_paired_max'])}"]
                        for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    lines.append("  measured in rounds of their own (medians; a ratio is the median of the "
                 "rounds' ratios):")
    lines += ["  " + "  ".join(v.rjust(w) for v, w in zip(row, widths)) for row in table]
    same = [r for r in rows if r["schedule_over_same_fixed_k"] is not None
            and r["schedule_k"] == r["best_fixed_k"]]
    if same:
        lines.append("  the schedule against the same fixed k (the mechanism's cost where both "
                     "draft alike): " + "; ".join(
                         f"c={r['concurrency']} k={r['schedule_k']}: "
                         f"{r['schedule_over_same_fixed_k']}x" for r in same))
    zero_fail = [r for r in rows if r["status"] == "FAIL" and r["schedule_k"] == 0
                 and part["speculative_config"] is not None]
    if zero_fail:
        lines.append("  where the schedule gives k=0 it still runs the draft's forward pass "
                     "every step (the all-zero column): at " + ", ".join(
                         f"c={r['concurrency']}" for r in zero_fail) + " no speculative "
                     "config serves faster; weigh the load you expect")
    written = [r for r in rows if r["as_written"] != "SKIP"]
    if written:
        status = "PASS" if all(r["as_written"] == "PASS" for r in written) else "FAIL"
        lines.append(f"{status}: vLLM served the schedule as written: draft tokens per "
                     "request and step (its counters) within "
                     f"{k_schedule.WRITTEN_TOLERANCE} of the k the schedule gives each "
                     "batch size (" + ", ".join(
                         f"c={r['concurrency']}: {_num(r['drafted_k_per_step'])} for k="
                         f"{r['schedule_k']}" for r in written) + ")")
    status = "PASS" if all(r["status"] == "PASS" for r in rows) else "FAIL"
    lines.append(f"{status}: the schedule serves at >= {k_schedule.GOAL}x the better of no "
                 "speculation and the best fixed k at every concurrency")
    return "\n".join(lines)


def _num(value) -> str:
    return "-" if value is None else f"{value:g}"


def _spread_text(s: dict) -> str:
    if s["median"] is None:
        return "-"
    return f"{s['median']:.1f} [{s['min']:.1f}-{s['max']:.1f}]"


def write_json(path: str, grid: dict, args, cells: list[dict], windows: list[dict],
               elapsed: float, schedule: dict | None = None) -> None:
    rows = speedup_rows(cells)
    best = {str(c): dict(zip(("k", "speedup"), best_k(rs))) for c, rs in rows.items()}
    report = {
        "target": args.target, "draft": args.draft, "grid": grid,
        "server_args": bench_server_args(args.server_args, args.target_is_tiny),
        "server_env": {name: {**vllm_server.default_env(), **CONFIGS[name].env}
                       for name in grid["configs"]},
        "tokens_per_s_source": "client: completion tokens / window wall time",
        "time_per_output_token_source": "server: vllm:request_decode_time_seconds delta",
        "elapsed_s": round(elapsed, 1),
        "cells": cells,
        "best": best,
        "goals": goal_checks(cells, windows),
        "isolation": "one server measured at a time, the others frozen (SIGSTOP)",
    }
    if schedule is not None:
        report["schedule"] = {k: v for k, v in schedule.items() if k != "windows"}
        report["schedule"]["per_concurrency"] = k_schedule.summary(schedule)
    with open(path, "w") as f:
        json.dump(report, f, indent=2)
