"""The report of ``compare``: report.json (every request), report.md, report.png."""

from __future__ import annotations

import json
import os

from vllm_kimi_eagle.tools.compare.run import NO_DRAFT
from vllm_kimi_eagle.tools.figures.charts import pyplot

FALLBACK = ("no per-request figures: {why}; the acceptance shown is the server's aggregate "
            "over the window, and settings cannot be compared request by request")


def markdown(report: dict) -> str:
    lines = [f"### compare: {report['target']}, {report['requests']} requests, "
             f"{report['max_tokens']} tokens each, concurrency {report['concurrency']}", "",
             "| setting | traffic | requests | acceptance length (mean, p10 / p50 / p90) | "
             "per position | tokens/s | speedup | greedy answers as no draft |",
             "|---|---|---|---|---|---|---|---|"]
    for name, run in report["runs"].items():
        for variant, figures in run["variants"].items():
            s = report["summaries"].get(f"{name}/{variant}", {})
            d = s.get("distribution") or {}
            window = figures["window"]
            length = (f"{d['mean']} ({d['p10']} / {d['p50']} / {d['p90']})" if d.get("requests")
                      else f"{window['acceptance_length']} (aggregate)"
                      if window["drafts"] else "-")
            positions = " ".join(f"{r:.3f}" for r in window["acceptance_by_position"]) or "-"
            greedy = report["greedy"].get(f"{name}/{variant}")
            same = ("-" if greedy is None else
                    f"{greedy['compared'] - len(greedy['differ'])}/{greedy['compared']}")
            speed = report["speedups"].get(f"{name}/{variant}")
            speedup = "-" if speed is None else (
                f"{speed['median']}" if speed["rounds"] == 1 else
                f"{speed['median']} ({speed['low']}-{speed['high']}, {speed['rounds']} rounds)")
            lines.append(f"| {name} | {variant} | {len(figures['requests'])} | {length} | "
                         f"{positions} | {figures['tokens_per_s']} | {speedup} | {same} |")
    lines.append("")
    for key, buckets in report.get("by_prompt_length", {}).items():
        if buckets:
            lines.append(f"- {key} by prompt length (tokens): " + "; ".join(
                f"{b['prompt_tokens']}: {b['mean']} mean, {b['pooled']} pooled over "
                f"{b['requests']} requests" for b in buckets))
    lines += [f"- speed: {line}" for line in report.get("speed", [])]
    lines += [f"- {c['verdict']}" for c in report["comparisons"]]
    lines += [f"- template: {c['verdict']}" for c in report["template_cost"].values()]
    lines += [f"- {line}" for line in report["notes"]]
    return "\n".join(lines) + "\n"


def chart(report: dict, path: str) -> None:
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    k = report["k"]
    edges = [1 + 0.25 * i for i in range(int(k / 0.25) + 2)]
    drawn = False
    for name, run in report["runs"].items():
        for variant, figures in run["variants"].items():
            values = [r["acceptance"]["acceptance_length"] for r in figures["requests"]
                      if r["acceptance"] and r["acceptance"]["acceptance_length"] is not None]
            if values:
                left.hist(values, bins=edges, histtype="step", linewidth=2,
                          label=f"{name} ({variant})")
                drawn = True
    left.set_xlabel("acceptance length of a request")
    left.set_ylabel("requests")
    left.set_title("per-request acceptance" if drawn else "no per-request figures")
    if drawn:
        left.legend(fontsize=8)
    speculative = [(n, r) for n, r in report["runs"].items() if n != NO_DRAFT]
    width = 0.8 / max(1, sum(len(r["variants"]) for _, r in speculative))
    slot = 0
    for name, run in speculative:
        for variant, figures in run["variants"].items():
            rates = figures["window"]["acceptance_by_position"]
            right.bar([i + 1 - 0.4 + (slot + 0.5) * width for i in range(len(rates))],
                      rates, width, label=f"{name} ({variant})")
            slot += 1
    right.set_xticks(range(1, k + 1))
    right.set_ylim(0, 1)
    right.set_xlabel("draft position")
    right.set_ylabel("acceptance rate")
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write(report: dict, out: str) -> list[str]:
    paths = [os.path.join(out, n) for n in ("report.json", "report.md", "report.png")]
    with open(paths[0], "w") as f:
        json.dump(report, f, indent=2)
    with open(paths[1], "w") as f:
        f.write(markdown(report))
    chart(report, paths[2])
    return paths
