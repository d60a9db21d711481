"""``vllm-kimi-eagle eval``: lm-eval accuracy, acceptance and speedup, with and without the draft.

Runs one lm-eval task against vLLM's OpenAI server twice, without speculation and with
it (servers started here from model paths, or given as URLs), and reports: accuracy both
ways (lm-eval's metrics) and per-sample agreement of the generated answers; acceptance
length and per-position acceptance; output tokens/s and time per output token both
ways, and the speedup. Writes ``report.json``, ``report.md`` and ``report.png``.

How the speed is measured, the same way in both runs: once lm-eval has built the
task's requests, one warm-up request (the task's first, with the same settings) goes to
the server; then ``/metrics`` is scraped, every request of the task is sent (the timed
window: generation requests only, none of lm-eval's setup), and ``/metrics`` is scraped
again. ``speedup_generation`` is the ratio of output tokens/s over that window; the
server's own time per output token (``vllm:request_decode_time_seconds`` over the
tokens after each request's first) gives ``speedup_time_per_output_token``, an
independent figure. When the two are more than 25% apart the report says so and prints
no headline speedup.

Only tasks that generate run the draft: a task whose lm-eval ``output_type`` is not
``generate_until`` (multiple choice, log-likelihood) is refused, with the reason.
Offline, ``--task kimi_eagle_gpqa_tiny`` is a small GPQA-format task of our own
(``eval_data/gpqa_tiny.jsonl``) that reuses lm-eval's GPQA template.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from contextlib import contextmanager

from vllm_kimi_eagle import serving, spec_metrics

DEFAULT_TASK = "gpqa_diamond_cot_zeroshot"
TINY_TASK = "kimi_eagle_gpqa_tiny"
TINY_DATA = os.path.join(os.path.dirname(__file__), "eval_data", "gpqa_tiny.jsonl")
# What the command adds to the servers it starts, each only when the user's
# --server-arg does not give that flag itself (the report lists the final arguments).
DEFAULT_SERVER_ARGS = (("--seed", "0"),)
GENERATING = "generate_until"
# Two speedup figures further apart than this are reported as inconsistent.
CONSISTENCY_TOLERANCE = 0.25


class EvalError(ValueError):
    """An evaluation that cannot measure what it is asked to."""


# ---- decisions (pure) --------------------------------------------------------------------
def refusal(task: str, output_types: dict[str, str]) -> str | None:
    """Why ``task`` (its leaf tasks' lm-eval output types) cannot measure speculation.

    None is a Python-defined task that builds its request types in code: the LM guard
    (``refuse_scoring``) catches those when lm-eval asks for a log-likelihood."""
    silent = {name: kind for name, kind in sorted(output_types.items())
              if kind not in (GENERATING, None)}
    if not silent:
        return None
    listed = ", ".join(f"{name} ({kind})" for name, kind in list(silent.items())[:8])
    more = f" and {len(silent) - 8} more" if len(silent) > 8 else ""
    return (
        f"task {task!r} includes tasks that do not generate: {listed}{more}. lm-eval "
        "scores those by log-likelihoods (of given answers, or of a text) and generates "
        "no token, so the draft never proposes a token and neither accuracy nor "
        "acceptance says anything about speculation. Use a task whose output_type is "
        f"{GENERATING}, e.g. gpqa_diamond_cot_zeroshot (default), gpqa_*_cot_n_shot, "
        "gpqa_*_generative_n_shot or gsm8k."
    )


def flag_name(arg: str) -> str | None:
    return arg.split("=", 1)[0] if arg.startswith("--") else None


def server_args(user: list[str], defaults=DEFAULT_SERVER_ARGS) -> list[str]:
    """The user's server arguments, preceded by each default whose flag they do not give."""
    given = {flag_name(a) for a in user}
    added = [part for flag, value in defaults if flag not in given for part in (flag, value)]
    return added + list(user)


def context_problem(task: str, longest_prompt: int, max_tokens: int, max_model_len: int,
                    url: str) -> str | None:
    """Why the server cannot hold the task's longest prompt plus max_tokens, if it cannot."""
    needed = longest_prompt + max_tokens
    if needed <= max_model_len:
        return None
    return (
        f"the longest prompt of {task} is {longest_prompt} tokens; with --max-tokens "
        f"{max_tokens} a request needs {needed} tokens, but the server at {url} has "
        f"max_model_len {max_model_len}, so vLLM would cut answers short or reject them. "
        f"Serve with --server-arg=--max-model-len={needed} (or more), or lower --max-tokens "
        f"to {max(max_model_len - longest_prompt, 0)}."
    )


def speedups(base: dict, spec: dict, tolerance: float = CONSISTENCY_TOLERANCE) -> dict:
    """The generation speedup and the server-side cross-check, and whether they agree."""
    def ratio(numerator, denominator):
        return round(numerator / denominator, 3) if numerator and denominator else None

    generation = ratio(spec["tokens_per_s"], base["tokens_per_s"])
    per_token = ratio(base["mean_time_per_output_token_ms"],
                      spec["mean_time_per_output_token_ms"])
    consistent = (generation is not None and per_token is not None
                  and abs(generation / per_token - 1) <= tolerance)
    return {
        "speedup_generation": generation,
        "speedup_time_per_output_token": per_token,
        "consistent": consistent,
        "speedup_tokens_per_s": generation,  # the key of earlier reports
    }


def speed_problem(url: str, speculative: bool, warmup: spec_metrics.Scrape,
                  exported: bool) -> str | None:
    """Whether a server speculates as its role says, judged over a warm-up request."""
    drafts = spec_metrics.spec_counters(warmup).drafts
    if speculative and not exported:
        return (f"the server at {url} exports no vllm:spec_decode_* counters on /metrics: "
                "it runs no draft. Give --spec-url a server started with "
                "--speculative-config (and without --disable-log-stats).")
    if speculative and drafts <= 0:
        return (f"the speculative-decoding counters of the server at {url} did not move "
                "during a warm-up request: it proposed no draft token. Check its "
                "--speculative-config and its log.")
    if not speculative and drafts > 0:
        return (f"the server at {url} proposed {int(drafts)} drafts during a warm-up "
                "request: it speculates. Give --base-url a server without "
                "--speculative-config.")
    return None


# ---- lm-eval -------------------------------------------------------------------------------
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


def task_output_types(task_manager, task: str) -> dict[str, str]:
    """lm-eval's output_type of every leaf task under ``task`` (a task, group or tag),
    read from the task index: no dataset is loaded. None: a Python task that does not
    declare it (its requests are built in code)."""
    from lm_eval.tasks._index import Kind
    from lm_eval.tasks._yaml_loader import load_yaml

    index = task_manager.task_index
    result: dict[str, str] = {}

    def visit(name: str, inline: dict | None = None) -> None:
        entry = index.get(name)
        if entry is None and inline is None:
            raise EvalError(f"lm-eval has no task, group or tag named {name!r} (lm-eval "
                            "--tasks list shows them; a local task needs its YAML folder)")
        config = {**((entry.cfg if entry else None) or {}), **(inline or {})}
        kind = entry.kind if entry else Kind.TASK
        if kind is Kind.TAG:
            for member in sorted(entry.tags):
                visit(member)
        elif kind is Kind.GROUP:
            for member in config.get("task", []):
                if isinstance(member, dict):
                    visit(member.get("task", name), member)
                else:
                    visit(member)
        elif kind is Kind.PY_TASK:
            task_class = load_yaml(entry.yaml_path, resolve_func=True)["class"]
            result[name] = config.get("output_type") or getattr(task_class, "OUTPUT_TYPE", None)
        else:
            result[name] = config.get("output_type", GENERATING)

    visit(task)
    return result


def make_lm(base_url: str, model: str, args):
    """lm-eval's API model for a running server."""
    from lm_eval.api.registry import get_model

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
    return get_model(args.model_type).create_from_arg_obj(model_args)


def refuse_scoring(lm, task: str) -> None:
    """Make the LM refuse log-likelihood requests (a task that does not generate)."""
    def refuse(requests, *args, **kwargs):
        raise EvalError(refusal(task, {f"{task} (its requests)": requests[0].request_type}))

    lm.loglikelihood = lm.loglikelihood_rolling = refuse


def prompt_tokens(server: serving.Server, model: str, context, chat: bool) -> int:
    """Prompt length of one lm-eval request as the server tokenizes it (/tokenize)."""
    if chat:
        body = {"model": model, "messages": json.loads(context.prompt),
                "add_generation_prompt": True}
    else:
        body = {"model": model, "prompt": context}
    return int(server.post("/tokenize", body)["count"])


def timed_generation(lm, server: serving.Server, label: str, speculative: bool, args,
                     record: dict) -> None:
    """Wrap lm.generate_until: check lengths, warm up, scrape, time the requests, scrape."""
    generate = lm.generate_until
    model = server.model_name()
    chat = args.model_type == "local-chat-completions"

    def generate_until(requests, disable_tqdm: bool = False):
        contexts = {req.args[0] for req in requests}
        lengths = [prompt_tokens(server, model, c, chat) for c in contexts]
        max_model_len = server.max_model_len(model)
        problem = context_problem(args.task, max(lengths), args.max_tokens, max_model_len,
                                  server.base_url)
        if problem:
            raise EvalError(problem)
        _say(f"[{label}] warm-up request (not measured), then {len(requests)} requests "
             f"at concurrency {args.concurrency}")
        before_warmup = server.scrape()
        exported = spec_metrics.has_spec_counters(before_warmup)
        generate(requests[:1], disable_tqdm=True)
        before = server.scrape()
        problem = speed_problem(server.base_url, speculative, before - before_warmup, exported)
        if problem:
            raise EvalError(problem)
        started = time.perf_counter()
        results = generate(requests, disable_tqdm=disable_tqdm)
        record["seconds"] = time.perf_counter() - started
        record["window"] = server.scrape() - before
        record["requests"] = len(requests)
        record["longest_prompt_tokens"] = max(lengths)
        record["max_model_len"] = max_model_len
        return results

    lm.generate_until = generate_until


def run_lm_eval(lm, args, task_manager):
    """One lm-eval run; returns (metrics of the task, samples)."""
    import lm_eval

    results = lm_eval.simple_evaluate(
        model=lm,
        tasks=[args.task],
        limit=args.limit,
        log_samples=True,
        apply_chat_template=args.model_type == "local-chat-completions",
        gen_kwargs={"max_gen_toks": args.max_tokens, "temperature": 0.0, "do_sample": False},
        task_manager=task_manager,
        # No request cache: a cached answer never reaches the server, so the run it came
        # from would be measured instead of this one.
        use_cache=None,
        random_seed=0,
        numpy_random_seed=0,
        torch_random_seed=0,
    )
    return results["results"][args.task], results["samples"][args.task]


def measured_run(server: serving.Server, label: str, speculative: bool, args,
                 task_manager) -> dict:
    _say(f"[{label}] lm-eval {args.task} against {server.base_url} ...")
    lm = make_lm(server.base_url, server.model_name(), args)
    record: dict = {}
    timed_generation(lm, server, label, speculative, args, record)
    refuse_scoring(lm, args.task)
    metrics, samples = run_lm_eval(lm, args, task_manager)
    window = record["window"]
    tokens = window.total(spec_metrics.GENERATION_TOKENS)
    seconds = record["seconds"]
    return {
        "metrics": {k: v for k, v in metrics.items() if isinstance(v, (int, float))},
        "answers": answers(samples),
        "requests": record["requests"],
        "finished_requests": int(window.total(spec_metrics.FINISHED_REQUESTS)),
        "longest_prompt_tokens": record["longest_prompt_tokens"],
        "max_model_len": record["max_model_len"],
        "output_tokens": int(tokens),
        "seconds": round(seconds, 3),
        "tokens_per_s": round(tokens / seconds, 2) if seconds else None,
        "mean_time_per_output_token_ms": spec_metrics.time_per_output_token_ms(window),
        "spec": spec_metrics.spec_counters(window).summary(),
    }


def answers(samples: list[dict]) -> list[str]:
    """The generated answer per document (lm-eval logs one sample per filter: keep one)."""
    by_doc = {}
    for sample in samples:
        response = (sample.get("resps") or [[""]])[0]
        by_doc.setdefault(sample["doc_id"], response[0] if isinstance(response, list) else response)
    return [by_doc[doc] for doc in sorted(by_doc)]


# ---- servers -------------------------------------------------------------------------------
def server_setup(args, speculative: bool) -> tuple[list[str], dict]:
    """(arguments, environment) of a server started here; what the report shows."""
    extra = server_args(args.server_arg)
    if speculative:
        config = {"method": "eagle3", "model": args.draft,
                  "num_speculative_tokens": args.num_speculative_tokens}
        extra += ["--speculative-config", json.dumps(config)]
    return extra, serving.default_env()


@contextmanager
def server_for(args, label: str, url: str | None, speculative: bool, out: str, run: dict):
    """A server for one run (started here unless ``url``); fills run["server_args"]."""
    if url:
        run.update(server_url=url, server_args=None, server_env=None)
        server = serving.Server(url.rstrip("/"), log_path="(external)")
        try:
            server.get("/health", timeout=10)
        except OSError as err:
            raise EvalError(f"no vLLM server answers at {url} ({err}); start it first") from err
        try:
            yield server
        except OSError as err:
            raise EvalError(f"the server at {url} stopped answering ({err}); see its log") from err
        return
    extra, env = server_setup(args, speculative)
    log = os.path.join(out, f"server-{label}.log")
    run.update(server_args=extra, server_env=env)
    _say(f"[{label}] starting vLLM for {args.target} (log: {log}; added arguments: "
         f"{' '.join(server_args([])) or 'none'}; environment defaults: {env or 'none'})")
    with serving.running_server(args.target, log, None, extra, env=env,
                                startup_timeout=args.startup_timeout) as server:
        run["server_url"] = server.base_url
        yield server


# ---- report --------------------------------------------------------------------------------
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
    right.set_ylabel("output tokens/s (generation requests)")
    right.set_title(report["task"])
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ---- command line --------------------------------------------------------------------------
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
                        "--server-arg=--tensor-parallel-size=8; the command itself adds "
                        f"only {' '.join(server_args([]))}, unless you give that flag")
    p.add_argument("--startup-timeout", type=float, default=serving.DEFAULT_STARTUP_TIMEOUT,
                   help="seconds a started server may take to become healthy "
                        f"(default {serving.DEFAULT_STARTUP_TIMEOUT})")
    p.add_argument("--out", default="out/eval")
    args = p.parse_args(argv)
    for url, role in ((args.base_url, "--base-url"), (args.spec_url, "--spec-url")):
        if not url and not args.target:
            p.error(f"give --target (and --draft) so that servers are started here, or "
                    f"{role} of a running server")
    if not args.spec_url and not args.draft:
        p.error("give --draft (the server with speculation is started here) or --spec-url")
    if args.limit is not None and args.limit >= 1:
        args.limit = int(args.limit)
    args.tokenizer = args.tokenizer or args.target
    return args


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    include_path = tiny_task_yaml(os.path.join(out, "tasks")) if args.task == TINY_TASK else None
    try:
        from lm_eval.tasks import TaskManager

        _say(f"reading lm-eval's task index for {args.task} ...")
        task_manager = TaskManager(include_path=include_path)
        reason = refusal(args.task, task_output_types(task_manager, args.task))
        if reason:
            raise EvalError(reason)
        runs = {}
        for label, url, speculative in (("without_draft", args.base_url, False),
                                         ("with_draft", args.spec_url, True)):
            run: dict = {}
            with server_for(args, label, url, speculative, out, run) as server:
                run.update(measured_run(server, label, speculative, args, task_manager))
            runs[label] = run
    except (EvalError, serving.ServerError) as err:
        print(f"vllm-kimi-eagle eval: {err}", file=sys.stderr)
        return 2
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
