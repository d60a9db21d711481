"""One measured run of ``vllm-kimi-eagle eval`` against one server: the prompt-length
check, a warm-up request, the task's requests timed between two ``/metrics`` scrapes."""

from __future__ import annotations

import json
import os
import time
from contextlib import contextmanager

from vllm_kimi_eagle.tools import spec_metrics, vllm_server
from vllm_kimi_eagle.tools.evaluation.tasks import (
    EvalError,
    answers,
    make_lm,
    refuse_scoring,
    run_lm_eval,
)
from vllm_kimi_eagle.tools.progress import say


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


def prompt_tokens(server: vllm_server.Server, model: str, context, chat: bool) -> int:
    """Prompt length of one lm-eval request as the server tokenizes it (/tokenize)."""
    if chat:
        body = {"model": model, "messages": json.loads(context.prompt),
                "add_generation_prompt": True}
    else:
        body = {"model": model, "prompt": context}
    return int(server.post("/tokenize", body)["count"])


def timed_generation(lm, server: vllm_server.Server, label: str, speculative: bool, args,
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
        say(f"[{label}] warm-up request (not measured), then {len(requests)} requests "
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


def measured_run(server: vllm_server.Server, label: str, speculative: bool, args,
                 task_manager) -> dict:
    say(f"[{label}] lm-eval {args.task} against {server.base_url} ...")
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


def server_setup(args, speculative: bool) -> tuple[list[str], dict]:
    """(arguments, environment) of a server started here; what the report shows."""
    extra = vllm_server.server_args(args.server_arg)
    if speculative:
        config = {"method": "eagle3", "model": args.draft,
                  "num_speculative_tokens": args.num_speculative_tokens}
        extra += ["--speculative-config", json.dumps(config)]
    return extra, vllm_server.default_env()


@contextmanager
def server_for(args, label: str, url: str | None, speculative: bool, out: str, run: dict):
    """A server for one run (started here unless ``url``); fills run["server_args"]."""
    if url:
        run.update(server_url=url, server_args=None, server_env=None)
        server = vllm_server.Server(url.rstrip("/"), log_path="(external)")
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
    say(f"[{label}] starting vLLM for {args.target} (log: {log}; added arguments: "
        f"{' '.join(vllm_server.server_args([])) or 'none'}; environment defaults: "
        f"{env or 'none'})")
    with vllm_server.running_server(args.target, log, None, extra, env=env,
                                    startup_timeout=args.startup_timeout) as server:
        run["server_url"] = server.base_url
        yield server
