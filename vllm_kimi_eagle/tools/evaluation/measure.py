"""One measured run of ``vllm-kimi-eagle eval`` against one server: the prompt-length
check, a warm-up request, the task's requests timed between two ``/metrics`` scrapes."""

from __future__ import annotations

import contextvars
import json
import os
import time
from contextlib import contextmanager

from vllm_kimi_eagle.compat.vllm_compat import installed_vllm_version
from vllm_kimi_eagle.tools.engines import vllm_server
from vllm_kimi_eagle.tools.evaluation.tasks import (
    EvalError,
    answers,
    make_lm,
    refuse_scoring,
    run_lm_eval,
)
from vllm_kimi_eagle.tools.figures import request_metrics, spec_metrics
from vllm_kimi_eagle.tools.figures.progress import say

# GPQA's column of the question's field; a task whose documents have it is also reported
# by it (the tiny task writes it too).
CATEGORY = "High-level domain"


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
                  exported: bool, over: str = "a warm-up request") -> str | None:
    """Whether a server speculates as its role says, judged over ``over`` (the counters'
    difference ``warmup``)."""
    drafts = spec_metrics.spec_counters(warmup).drafts
    if speculative and not exported:
        return (f"the server at {url} exports no vllm:spec_decode_* counters on /metrics: "
                "it runs no draft. Give --spec-url a server started with "
                "--speculative-config (and without --disable-log-stats).")
    if speculative and drafts <= 0:
        return (f"the speculative-decoding counters of the server at {url} did not move "
                f"during {over}: it proposed no draft token. Check its "
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
        warmup = before - before_warmup
        # A warm-up answer too short to draft from (the model ends at once) shows nothing
        # yet: the measured requests must then draft.
        judge_later = speculative and exported and spec_metrics.spec_counters(warmup).drafts <= 0
        problem = None if judge_later else speed_problem(server.base_url, speculative, warmup,
                                                         exported)
        if problem:
            raise EvalError(problem)
        record["responses"] = []  # from here on: the measured requests only
        started = time.perf_counter()
        results = generate(requests, disable_tqdm=disable_tqdm)
        record["seconds"] = time.perf_counter() - started
        after = server.scrape()
        if judge_later:
            problem = speed_problem(server.base_url, speculative, after - before_warmup,
                                    exported, over="the warm-up and the measured requests")
            if problem:
                raise EvalError(problem)
        record["window"] = after - before
        record["requests"] = len(requests)
        record["longest_prompt_tokens"] = max(lengths)
        record["max_model_len"] = max_model_len
        return results

    lm.generate_until = generate_until
    record_responses(lm, record)


def record_responses(lm, record: dict) -> None:
    """Keep each response's own acceptance with the context it answered, in
    record["responses"] (while that list exists). lm-eval's API model hands a response
    to ``parse_generations`` without its request when requests run concurrently, so the
    calls that send one mark their task's context first."""
    sending = contextvars.ContextVar("vllm_kimi_eagle_contexts", default=None)
    model_call, amodel_call, parse = lm.model_call, lm.amodel_call, lm.parse_generations

    def marked_model_call(*args, messages, **kwargs):
        token = sending.set(messages)
        try:
            return model_call(*args, messages=messages, **kwargs)
        finally:
            sending.reset(token)

    async def marked_amodel_call(*args, messages, **kwargs):
        token = sending.set(messages)
        try:
            return await amodel_call(*args, messages=messages, **kwargs)
        finally:
            sending.reset(token)

    def parse_generations(outputs, **kwargs):
        if "responses" in record:
            answers = outputs if isinstance(outputs, list) else [outputs]
            contexts = kwargs.get("contexts") or sending.get() or []
            record["responses"].append({
                "context": context_key(contexts[0]) if len(contexts) == 1 else None,
                "acceptance": request_metrics.from_response(answers[0])
                if len(answers) == 1 else None})
        return parse(outputs=outputs, **kwargs)

    lm.model_call, lm.amodel_call = marked_model_call, marked_amodel_call
    lm.parse_generations = parse_generations


def context_key(context) -> str:
    """A request's context as text: a chat context is lm-eval's JsonChatStr, a named tuple
    of the messages' JSON, which a sample keeps as a plain tuple."""
    return context[0] if isinstance(context, tuple) else context


def sample_context(sample: dict) -> str:
    """The context of a sample's (first) request: lm-eval keeps a sample's arguments as
    a list of argument tuples in memory and writes them as gen_args_N/arg_M to files."""
    arguments = sample["arguments"]
    if isinstance(arguments, dict):
        return arguments["gen_args_0"]["arg_0"]
    return arguments[0][0]


def per_request(responses: list[dict], samples: list[dict], window: spec_metrics.Scrape,
                k: int) -> dict | None:
    """Each document's own acceptance (its response's), their distribution overall and by
    CATEGORY, and whether they add up to the server's counters over the window (where
    every response carried them: request_metrics.reported); None where none did."""
    reported = request_metrics.reported(r["acceptance"] for r in responses)
    found: dict[str, list] = {}  # each context's responses, in the order they came
    for r in responses:
        if r["acceptance"] is not None and r["context"] is not None:
            found.setdefault(r["context"], []).append(r["acceptance"])
    if not found:
        return None
    docs = {}
    for sample in sorted(samples, key=lambda s: s["doc_id"]):
        waiting = found.get(context_key(sample_context(sample)))
        if waiting and sample["doc_id"] not in docs:  # each response to one document
            docs[sample["doc_id"]] = (sample["doc"].get(CATEGORY), waiting.pop(0))
    if not docs:
        return None
    every = [a for _, a in docs.values()]
    categories = sorted({c for c, _ in docs.values() if c is not None})
    return {
        **request_metrics.distribution(every, k),
        "adds_up_to_counters": request_metrics.adds_up(
            list(reported.figures), spec_metrics.spec_counters(window).summary())
        if reported.complete else None,
        "missing": reported.missing,
        "by_category": {c: request_metrics.distribution(
            [a for cat, a in docs.values() if cat == c], k) for c in categories},
        "per_document": [{"doc": d, "category": c, "histogram": list(a.histogram),
                          "acceptance_length": a.acceptance_length}
                         for d, (c, a) in sorted(docs.items())],
    }


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
        "per_request": per_request(record.get("responses", []), samples, window,
                                   args.num_speculative_tokens) if speculative else None,
    }


def server_setup(args, speculative: bool) -> tuple[list[str], dict]:
    """(arguments, environment) of a server started here; what the report shows."""
    extra = vllm_server.server_args(args.server_arg)
    if speculative:
        config = {"method": "eagle3", "model": args.draft,
                  "num_speculative_tokens": args.num_speculative_tokens}
        extra += ["--speculative-config", json.dumps(config)]
        extra += request_metrics.server_args(True, installed_vllm_version())
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
