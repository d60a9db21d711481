"""``vllm-kimi-eagle eval``: lm-eval accuracy and acceptance, with and without the draft.

Runs one lm-eval task against vLLM's OpenAI server twice, without speculation and with
it (servers started here from model paths, or given as base URLs), and reports:
accuracy both ways (lm-eval's metrics) and per-sample agreement of the generated answers;
acceptance length and per-position acceptance from two ``/metrics`` scrapes around the
speculative run; output tokens/s and mean time per output token both ways. Writes
``report.json``, ``report.md`` and ``report.png`` into the output folder.

Default task: ``gpqa_diamond_cot_zeroshot`` (generative). The multiple-choice GPQA
tasks score log-likelihoods with one token and never run the draft: they are refused.
Offline, ``--task kimi_eagle_gpqa_tiny`` is a small GPQA-format task of our own
(``eval_data/gpqa_tiny.jsonl``) that reuses lm-eval's GPQA template.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from contextlib import ExitStack, contextmanager

from vllm_kimi_eagle import serving, spec_metrics

DEFAULT_TASK = "gpqa_diamond_cot_zeroshot"
TINY_TASK = "kimi_eagle_gpqa_tiny"
TINY_DATA = os.path.join(os.path.dirname(__file__), "eval_data", "gpqa_tiny.jsonl")
SERVER_ARGS = ["--max-model-len", "1024", "--seed", "0"]
GENERATION_TOKENS = "vllm:generation_tokens"
DECODE_TIME = "vllm:request_decode_time_seconds"


class EvalError(ValueError):
    """An evaluation that cannot measure what it is asked to."""


def refuse_non_generative(task: str) -> None:
    """Multiple-choice GPQA tasks never run the draft: refuse them, saying why."""
    if task.startswith("gpqa") and not re.search(r"cot|generative", task):
        raise EvalError(
            f"task {task!r} is a multiple-choice GPQA task: lm-eval scores it by the "
            "log-likelihood of each choice (one token per request, max_tokens=1), so the "
            "draft never proposes a token and neither accuracy nor acceptance says "
            "anything about speculation. Use a generative task: gpqa_diamond_cot_zeroshot "
            "(default), gpqa_*_cot_n_shot or gpqa_*_generative_n_shot."
        )


def tiny_task_yaml(folder: str) -> str:
    """Write the offline GPQA-format task (lm-eval's template, our data) into folder."""
    import lm_eval

    template = os.path.join(os.path.dirname(lm_eval.__file__), "tasks", "gpqa",
                            "cot_zeroshot", "_gpqa_cot_zeroshot_yaml")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{TINY_TASK}.yaml")
    with open(path, "w") as f:
        f.write(
            f"include: {template}\n"
            f"task: {TINY_TASK}\n"
            "tag: null\n"
            "dataset_path: json\n"
            "dataset_name: null\n"
            "dataset_kwargs:\n"
            "  data_files:\n"
            f"    train: {TINY_DATA}\n"
        )
    return folder


def histogram(text: str, name: str) -> tuple[float, float]:
    """(sum, count) of a histogram in a /metrics scrape, summed over its label sets."""
    total = count = 0.0
    for line in text.splitlines():
        if line.startswith(name + "_sum"):
            total += float(line.split()[-1])
        elif line.startswith(name + "_count"):
            count += float(line.split()[-1])
    return total, count


def time_per_output_token_ms(before: str, after: str) -> float | None:
    """Mean decode time per generated token after the first, per request, in ms."""
    decode_sum, requests = (a - b for a, b in zip(histogram(after, DECODE_TIME),
                                                   histogram(before, DECODE_TIME)))
    tokens = counter(after, GENERATION_TOKENS) - counter(before, GENERATION_TOKENS)
    decoded = tokens - requests  # each request's first token comes from the prefill
    return round(1000 * decode_sum / decoded, 3) if decoded > 0 else None


def counter(text: str, name: str) -> float:
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith(name + "_total") and not line.startswith(name + "_total_created"))


def run_lm_eval(base_url: str, model: str, args, include_path: str | None):
    """One lm-eval run against a running server; returns (results dict, samples)."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    endpoint = "chat/completions" if args.model_type == "local-chat-completions" else "completions"
    model_args = {
        "model": model,
        "base_url": f"{base_url}/v1/{endpoint}",
        "num_concurrent": args.concurrency,
        "max_retries": 3,
        "tokenized_requests": False,
    }
    if args.model_type == "local-completions" and args.tokenizer:
        model_args["tokenizer"] = args.tokenizer
    results = lm_eval.simple_evaluate(
        model=args.model_type,
        model_args=model_args,
        tasks=[args.task],
        limit=args.limit,
        log_samples=True,
        apply_chat_template=args.model_type == "local-chat-completions",
        gen_kwargs={"max_gen_toks": args.max_tokens, "temperature": 0.0, "do_sample": False},
        task_manager=TaskManager(include_path=include_path),
        # No request cache: a cached answer never reaches the server, so the run it came
        # from would be measured instead of this one.
        use_cache=None,
        random_seed=0,
        numpy_random_seed=0,
        torch_random_seed=0,
    )
    return results["results"][args.task], results["samples"][args.task]


def measured_run(server: serving.Server, label: str, args, include_path) -> dict:
    model = server.model_name()
    before = server.get("/metrics")
    started = time.time()
    print(f"[{label}] lm-eval {args.task} against {server.base_url} ...", file=sys.stderr,
          flush=True)
    metrics, samples = run_lm_eval(server.base_url, model, args, include_path)
    seconds = time.time() - started
    after = server.get("/metrics")
    tokens = counter(after, GENERATION_TOKENS) - counter(before, GENERATION_TOKENS)
    spec = spec_metrics.from_prometheus(after) - spec_metrics.from_prometheus(before)
    return {
        "metrics": {k: v for k, v in metrics.items() if isinstance(v, (int, float))},
        "answers": answers(samples),
        "output_tokens": int(tokens),
        "seconds": round(seconds, 2),
        "tokens_per_s": round(tokens / seconds, 2) if seconds else None,
        "mean_time_per_output_token_ms": time_per_output_token_ms(before, after),
        "spec": spec.summary(),
    }


def answers(samples: list[dict]) -> list[str]:
    """The generated answer per document (lm-eval logs one sample per filter: keep one)."""
    by_doc = {}
    for sample in samples:
        response = (sample.get("resps") or [[""]])[0]
        by_doc.setdefault(sample["doc_id"], response[0] if isinstance(response, list) else response)
    return [by_doc[doc] for doc in sorted(by_doc)]


@contextmanager
def server_for(args, label: str, url: str | None, speculative: bool, out: str):
    if url:
        yield serving.Server(url.rstrip("/"), log_path="(external)")
        return
    config = None
    if speculative:
        config = {"method": "eagle3", "model": args.draft,
                  "num_speculative_tokens": args.num_speculative_tokens}
    log = os.path.join(out, f"server-{label}.log")
    print(f"[{label}] starting vLLM for {args.target} (log: {log})", file=sys.stderr, flush=True)
    with serving.running_server(args.target, log, config, SERVER_ARGS + args.server_arg) as s:
        yield s


def compare(base: dict, spec: dict) -> dict:
    disagreements = [
        {"doc": i, "without_draft": a, "with_draft": b}
        for i, (a, b) in enumerate(zip(base["answers"], spec["answers"])) if a != b
    ]
    speedup = (spec["tokens_per_s"] / base["tokens_per_s"]
               if spec["tokens_per_s"] and base["tokens_per_s"] else None)
    return {
        "samples": len(base["answers"]),
        "identical_answers": not disagreements and len(base["answers"]) == len(spec["answers"]),
        "disagreements": disagreements,
        "speedup_tokens_per_s": round(speedup, 3) if speedup else None,
    }


def write_report(report: dict, out: str) -> list[str]:
    paths = [os.path.join(out, n) for n in ("report.json", "report.md", "report.png")]
    with open(paths[0], "w") as f:
        json.dump(report, f, indent=2)
    base, spec, cmp = report["without_draft"], report["with_draft"], report["comparison"]
    metric_names = sorted(set(base["metrics"]) | set(spec["metrics"]))
    lines = [
        f"### {report['task']}: {report['target']} with draft {report['draft']}",
        "",
        "| | without draft | with draft |",
        "|---|---|---|",
        *[f"| {m} | {base['metrics'].get(m)} | {spec['metrics'].get(m)} |" for m in metric_names],
        f"| output tokens/s | {base['tokens_per_s']} | {spec['tokens_per_s']} |",
        f"| mean time per output token (ms) | {base['mean_time_per_output_token_ms']} | "
        f"{spec['mean_time_per_output_token_ms']} |",
        f"| acceptance length | - | {spec['spec']['acceptance_length']} |",
        f"| acceptance by position | - | {spec['spec']['acceptance_by_position']} |",
        "",
        f"Samples: {cmp['samples']}; identical answers: {cmp['identical_answers']}; "
        f"speedup (tokens/s): {cmp['speedup_tokens_per_s']}.",
    ]
    lines += [f"- doc {d['doc']} differs" for d in cmp["disagreements"]]
    with open(paths[1], "w") as f:
        f.write("\n".join(lines) + "\n")
    _chart(report, paths[2])
    return paths


def _chart(report: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    spec = report["with_draft"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.5))
    rates = spec["spec"]["acceptance_by_position"]
    left.bar([str(i + 1) for i in range(len(rates))], rates, color="tab:blue")
    left.set_ylim(0, 1)
    left.set_xlabel("draft position")
    left.set_ylabel("acceptance rate")
    left.set_title(f"acceptance length {spec['spec']['acceptance_length']}")
    speeds = [report["without_draft"]["tokens_per_s"] or 0, spec["tokens_per_s"] or 0]
    right.bar(["without draft", "with draft"], speeds, color=["tab:gray", "tab:green"])
    right.set_ylabel("output tokens/s")
    right.set_title(report["task"])
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def parse_args(argv):
    p = argparse.ArgumentParser(prog="vllm-kimi-eagle eval", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", help="target model (path or hub id) to serve")
    p.add_argument("--draft", help="draft model to serve with it")
    p.add_argument("--base-url", help="URL of a running server WITHOUT speculation")
    p.add_argument("--spec-url", help="URL of a running server WITH the draft")
    p.add_argument("--task", default=DEFAULT_TASK)
    p.add_argument("--model-type", default="local-chat-completions",
                   choices=["local-chat-completions", "local-completions"])
    p.add_argument("--tokenizer", help="tokenizer for local-completions (default: target)")
    p.add_argument("--limit", type=float, default=None, help="samples (or fraction)")
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--num-speculative-tokens", type=int, default=3)
    p.add_argument("--server-arg", action="append", default=[],
                   help="extra argument for started servers (repeatable), e.g. "
                        "--server-arg=--tensor-parallel-size=8")
    p.add_argument("--out", default="out/eval")
    args = p.parse_args(argv)
    if not (args.base_url and args.spec_url) and not (args.target and args.draft):
        p.error("give --target and --draft (servers are started here), "
                "or --base-url and --spec-url of two running servers")
    if args.limit is not None and args.limit >= 1:
        args.limit = int(args.limit)
    args.tokenizer = args.tokenizer or args.target
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        refuse_non_generative(args.task)
    except EvalError as err:
        print(f"vllm-kimi-eagle eval: {err}", file=sys.stderr)
        return 2
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    include_path = tiny_task_yaml(os.path.join(out, "tasks")) if args.task == TINY_TASK else None
    runs = {}
    for label, url, speculative in (("without_draft", args.base_url, False),
                                     ("with_draft", args.spec_url, True)):
        with ExitStack() as stack:
            server = stack.enter_context(server_for(args, label, url, speculative, out))
            runs[label] = measured_run(server, label, args, include_path)
    report = {
        "task": args.task, "target": args.target or args.base_url,
        "draft": args.draft or args.spec_url, "model_type": args.model_type,
        "limit": args.limit, "concurrency": args.concurrency, "max_tokens": args.max_tokens,
        **runs, "comparison": compare(runs["without_draft"], runs["with_draft"]),
    }
    paths = write_report(report, out)
    with open(paths[1]) as f:
        print(f.read())
    print(f"wrote {', '.join(paths)}")
    return 0
