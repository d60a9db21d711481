"""The report of ``vllm-kimi-eagle eval``: both runs compared (answers, acceptance, the
speedup and its cross-check) as report.json, report.md and report.png."""

from __future__ import annotations

import json
import os

from vllm_kimi_eagle.tools.figures.charts import pyplot
from vllm_kimi_eagle.tools.figures.speedup import CONSISTENCY_TOLERANCE, speedups


def compare(base: dict, spec: dict) -> dict:
    disagreements = [
        {"doc": i, "without_draft": a, "with_draft": b}
        for i, (a, b) in enumerate(zip(base["answers"], spec["answers"])) if a != b
    ]
    return {
        "samples": len(base["answers"]),
        "identical_answers": not disagreements and len(base["answers"]) == len(spec["answers"]),
        "disagreements": disagreements,
        **speedups(base, spec),
    }


def speed_sentence(cmp: dict) -> str:
    if cmp["consistent"]:
        return (f"speedup {cmp['speedup_generation']}x (output tokens/s over the generation "
                f"requests; the server's time per output token agrees: "
                f"{cmp['speedup_time_per_output_token']}x).")
    return (f"no speedup headline: the figures disagree by more than "
            f"{CONSISTENCY_TOLERANCE:.0%} (output tokens/s over the generation requests "
            f"{cmp['speedup_generation']}x, server time per output token "
            f"{cmp['speedup_time_per_output_token']}x). With short answers or a busy "
            "machine the prefill and queueing weigh in tokens/s but not in time per "
            "output token; measure with more samples and longer answers.")


def write_report(report: dict, out: str) -> list[str]:
    paths = [os.path.join(out, n) for n in ("report.json", "report.md", "report.png")]
    with open(paths[0], "w") as f:
        json.dump(report, f, indent=2)
    base, spec, cmp = report["without_draft"], report["with_draft"], report["comparison"]
    metric_names = sorted(set(base["metrics"]) | set(spec["metrics"]))

    def args_cell(run):
        return "`" + " ".join(run["server_args"]) + "`" if run["server_args"] is not None \
            else f"running at {run['server_url']}"

    lines = [
        f"### {report['task']}: {report['target']} with draft {report['draft']}",
        "",
        "| | without draft | with draft |",
        "|---|---|---|",
        *[f"| {m} | {base['metrics'].get(m)} | {spec['metrics'].get(m)} |" for m in metric_names],
        f"| output tokens (generation requests) | {base['output_tokens']} | {spec['output_tokens']} |",
        f"| seconds (generation requests) | {base['seconds']} | {spec['seconds']} |",
        f"| output tokens/s | {base['tokens_per_s']} | {spec['tokens_per_s']} |",
        f"| mean time per output token (ms, server) | {base['mean_time_per_output_token_ms']} | "
        f"{spec['mean_time_per_output_token_ms']} |",
        f"| acceptance length | - | {spec['spec']['acceptance_length']} |",
        f"| acceptance by position | - | {spec['spec']['acceptance_by_position']} |",
        f"| server arguments | {args_cell(base)} | {args_cell(spec)} |",
        f"| server environment defaults | {base['server_env']} | {spec['server_env']} |",
        "",
        f"Samples: {cmp['samples']}; identical answers: {cmp['identical_answers']}; "
        f"{speed_sentence(cmp)}",
    ]
    lines += [f"- doc {d['doc']} differs" for d in cmp["disagreements"]]
    lines += per_request_lines(spec.get("per_request"))
    with open(paths[1], "w") as f:
        f.write("\n".join(lines) + "\n")
    chart(report, paths[2])
    return paths


def per_request_lines(figures: dict | None) -> list[str]:
    """The distribution of per-document acceptance, overall and by category, or the one
    line saying the server gave no per-request figures."""
    if not figures:
        return ["", "Per request: the server with the draft reported no per-request "
                    "acceptance (vLLM 0.29 or later, started with "
                    "--per-request-spec-decode-metrics summary): aggregate only."]
    def row(name, d):
        if not d["requests"]:
            return f"| {name} | 0 | - | - | - | - |"
        return (f"| {name} | {d['requests']} | {d['mean']} | {d['p10']} | {d['p50']} | "
                f"{d['p90']} |")
    check = {True: "the requests add up to the server's counters",
             False: "the requests DO NOT add up to the server's counters",
             None: f"{figures.get('missing', 0)} requests carried no figures and are left "
                   "out"}[figures["adds_up_to_counters"]]
    undrafted = [d["doc"] for d in figures["per_document"] if d["acceptance_length"] is None]
    note = [] if not undrafted else [
        "", f"{len(undrafted)} of {len(figures['per_document'])} documents (ids "
        f"{undrafted}) were answered without a draft step (an answer of one token or none): "
        "they count in the server's counters, not in the distribution."]
    return ["", f"Acceptance length per request (with the draft); {check}:", "",
            "| | requests | mean | p10 | p50 | p90 |", "|---|---|---|---|---|---|",
            row("all", figures),
            *[row(name, d) for name, d in figures["by_category"].items()], *note]


def chart(report: dict, path: str) -> None:
    plt = pyplot()
    spec = report["with_draft"]
    figures = spec.get("per_request")
    panels = 3 if figures else 2
    fig, axes = plt.subplots(1, panels, figsize=(4.5 * panels, 3.5))
    left, right = axes[0], axes[-1]
    if figures:
        histogram = figures["histogram"]
        edges = [histogram["from"] + histogram["width"] * i
                 for i in range(len(histogram["counts"]))]
        axes[1].bar(edges, histogram["counts"], width=histogram["width"], align="edge",
                    color="tab:purple")
        axes[1].set_xlabel("acceptance length of a request")
        axes[1].set_ylabel("requests")
        axes[1].set_title(f"per request: p10 {figures['p10']} / p50 {figures['p50']} / "
                          f"p90 {figures['p90']}", fontsize=9)
    rates = spec["spec"]["acceptance_by_position"]
    left.bar([str(i + 1) for i in range(len(rates))], rates, color="tab:blue")
    left.set_ylim(0, 1)
    left.set_xlabel("draft position")
    left.set_ylabel("acceptance rate")
    left.set_title(f"acceptance length {spec['spec']['acceptance_length']}")
    speeds = [report["without_draft"]["tokens_per_s"] or 0, spec["tokens_per_s"] or 0]
    right.bar(["without draft", "with draft"], speeds, color=["tab:gray", "tab:green"])
    right.set_ylabel("output tokens/s (generation requests)")
    right.set_title(report["task"])
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
