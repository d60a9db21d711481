"""``vllm-kimi-eagle compare``: the command line (see the package docstring)."""

from __future__ import annotations

import argparse
import os
import sys

from vllm_kimi_eagle.compat.vllm_compat import installed_vllm_version
from vllm_kimi_eagle.tools.compare import __doc__ as DESCRIPTION
from vllm_kimi_eagle.tools.compare import analysis, report, run, traffic
from vllm_kimi_eagle.tools.engines import vllm_server
from vllm_kimi_eagle.tools.figures import request_metrics
from vllm_kimi_eagle.tools.figures.progress import say
from vllm_kimi_eagle.tools.models import model_source


def parse_args(argv):
    p = argparse.ArgumentParser(prog="vllm-kimi-eagle compare", description=DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", help="target model (path or hub id) to serve; not with --url")
    p.add_argument("--url", action="append", default=[],
                   help="a server already running, one per setting (repeatable): NAME=URL, "
                        "e.g. k3=http://127.0.0.1:8000; no-draft=URL names the server "
                        "without a draft the greedy answers and speedups are held to. "
                        "Start them with --per-request-spec-decode-metrics summary for "
                        "per-request figures. Instead of --target, --draft and --config")
    p.add_argument("--draft", action="append", default=[],
                   help="a draft to compare (repeatable): EAGLE3 at --num-speculative-tokens, "
                        "named by its folder")
    p.add_argument("--config", action="append", default=[],
                   help="a setting to compare (repeatable): NAME=JSON, a whole "
                        "--speculative-config, or NAME=none")
    p.add_argument("--env", action="append", default=[],
                   help="an environment variable of one setting's server (repeatable): "
                        "NAME:VAR=VALUE, e.g. base:VLLM_KIMI_EAGLE_LAYER_IDS=output-of")
    p.add_argument("--num-speculative-tokens", type=int, default=3, help="k of --draft")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--prompts", help="your traffic: a JSONL of OpenAI chat requests "
                                          "(messages), completion prompts (prompt) or "
                                          "ShareGPT conversations")
    source.add_argument("--lm-eval-task", metavar="TASK",
                        help="the prompts of an lm-eval task that generates (each "
                             "document's prompt as a chat request), e.g. "
                             "gpqa_diamond_cot_zeroshot or kimi_eagle_gpqa_tiny")
    source.add_argument("--tiny-prompts", type=int, metavar="N",
                        help="N chat prompts of the tiny models' own kind (for the tiny "
                             "models only)")
    p.add_argument("--limit", type=int,
                   help="the first N requests of --prompts or --lm-eval-task")
    p.add_argument("--include-path", action="append", default=[],
                   help="a folder of your own lm-eval task YAMLs (repeatable); the "
                        "project's eval/tasks are always included")
    p.add_argument("--raw", action="store_true",
                   help="also send each chat request's text without the chat template")
    p.add_argument("--max-tokens", type=int, default=128,
                   help="tokens per answer where a request sets none (default 128)")
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--side-by-side", action="store_true",
                   help="start every server at once (the hardware for all of them is "
                        "needed) and measure each while the others are frozen; default: "
                        "one server after another")
    p.add_argument("--rounds", type=int, default=3,
                   help="with --side-by-side: the traffic sent this many times to every "
                        "server in alternating order, for tokens/s that can be compared "
                        "(median and spread per setting; default 3). Acceptance and the "
                        "pairs come from the first round")
    p.add_argument("--server-arg", action="append", default=[],
                   help="extra argument for every server (repeatable), e.g. "
                        "--server-arg=--tensor-parallel-size=8")
    p.add_argument("--startup-timeout", type=float, default=vllm_server.DEFAULT_STARTUP_TIMEOUT)
    p.add_argument("--out", default="out/compare")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error(f"--rounds {args.rounds}: at least 1")
    if args.url and (args.target or args.draft or args.config or args.env or args.side_by_side
                     or args.server_arg):
        p.error("--url compares servers already running: give no --target, --draft, "
                "--config, --env, --server-arg or --side-by-side with it")
    if not args.url and not args.target:
        p.error("give --target (the model to serve with each setting) or --url (servers "
                "already running)")
    try:
        args.settings = run.running(args.url) if args.url else run.settings(
            args.config, args.draft, args.num_speculative_tokens, args.env)
    except ValueError as err:
        p.error(str(err))
    return args


# Greedy answers can differ between batch compositions without any draft on a GPU.
BATCH_NOTE = ("; at concurrency {} the batches differ between servers, and on a GPU batch "
              "composition alone can change a greedy answer: run again with --concurrency 1 "
              "to tell that from the draft")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    target = model_source.local_folder(args.target, "--target") if args.target else \
        ", ".join(f"{s.name}={s.url}" for s in args.settings)
    try:
        if args.prompts:
            requests = traffic.read_jsonl(args.prompts, args.limit)
        elif args.lm_eval_task:
            requests = traffic.from_lm_eval_task(args.lm_eval_task, args.include_path,
                                                 args.limit)
        else:
            requests = traffic.tiny_requests(args.tiny_prompts)
    except (OSError, traffic.TrafficError) as err:
        print(f"vllm-kimi-eagle compare: {err}", file=sys.stderr)
        return 2
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    version = installed_vllm_version()
    notes = []
    if not request_metrics.supported(version):
        notes.append(report.FALLBACK.format(
            why=f"vLLM {version} has no {request_metrics.FLAG} (from {request_metrics.FROM})"))
        say(notes[-1])
    everyone = args.settings if args.url else [run.Setting(run.NO_DRAFT, None), *args.settings]
    runs = run.measure_all(everyone, target, requests, args, out, version)
    k = max([(s.speculative or {}).get("num_speculative_tokens", 1) for s in everyone]
            + [len(v["window"]["acceptance_by_position"]) for r in runs.values()
               for v in r["variants"].values()])
    if args.url and run.NO_DRAFT not in runs:
        notes.append("no --url no-draft=URL: greedy answers and speedups are not held to a "
                     "server without a draft")
    summaries = {f"{name}/{variant}": analysis.summary(figures, k)
                 for name, r in runs.items() if name != run.NO_DRAFT
                 for variant, figures in r["variants"].items()}
    notes += analysis.failures(runs)
    without = [s.name for s in args.settings if s.speculative is None]
    if without:
        notes.append(f"{', '.join(without)}: no draft, so no acceptance to pair; left out of "
                     "the comparisons (its speed is in the table)")
    for key, s in summaries.items():
        if key.split("/")[0] in without:
            continue
        if s["per_request"] and s["missing_note"]:
            notes.append(f"{key}: {s['missing_note']}")
        elif s["per_request"] and not s["consistent"]:
            notes.append(f"{key}: the per-request figures summed ({s['summed']}) differ from "
                         f"the server's counters over the same requests ({s['window']})")
        elif not s["per_request"] and request_metrics.supported(version):
            notes.append(f"{key}: " + report.FALLBACK.format(why="the responses carried none"))
    greedy = analysis.greedy_agreement(runs)
    for key, g in greedy.items():
        if g["differ"]:
            notes.append(f"{key}: {len(g['differ'])} of {g['compared']} greedy answers differ "
                         f"from the server without a draft: {', '.join(g['differ'][:8])}"
                         + (BATCH_NOTE.format(args.concurrency) if args.concurrency > 1 else ""))
    result = {
        "target": target, "requests": len(requests), "max_tokens": args.max_tokens,
        "concurrency": args.concurrency, "k": k, "vllm": str(version), "runs": runs,
        "summaries": summaries, "comparisons": analysis.comparisons(runs),
        "template_cost": analysis.template_cost(runs), "greedy": greedy,
        "by_prompt_length": {key: analysis.by_prompt_length(run["variants"][key.split("/")[1]])
                             for key in summaries
                             for run in [runs[key.split("/")[0]]]},
        "speedups": analysis.speedups(runs), "speed": analysis.speed_verdicts(runs),
        "notes": notes,
    }
    paths = report.write(result, out)
    print(report.markdown(result))
    print(f"wrote {', '.join(paths)}")
    return 0
