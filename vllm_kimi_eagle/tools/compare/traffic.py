"""The requests ``compare`` sends: the user's JSONL, as their clients send it.

A line is one request, in one of these forms:
- an OpenAI chat request: ``{"messages": [...], ...}`` (sent to /v1/chat/completions, so
  the model's chat template applies as in production);
- a completion prompt: ``{"prompt": "..."}`` (sent to /v1/completions as it is);
- a ShareGPT-style conversation, as vLLM's benchmarks read it: ``{"conversations":
  [{"from": "human", "value": "..."}, ...]}`` (its first human turn, as a chat request).
An lm-eval task that generates gives its documents' prompts as chat requests.
Sampling parameters on a line (``max_tokens``, ``temperature``, ``top_p``, ...) are kept;
without them a request is greedy with ``--max-tokens`` tokens.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

SAMPLING_KEYS = ("max_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "stop",
                 "presence_penalty", "frequency_penalty", "repetition_penalty")


class TrafficError(ValueError):
    """A prompts file that cannot be read as requests."""


@dataclass(frozen=True)
class Request:
    """One request: chat ``messages`` or a completion ``prompt``, and its sampling."""
    id: str
    messages: tuple | None = None
    prompt: str | None = None
    sampling: dict = field(default_factory=dict)

    @property
    def greedy(self) -> bool:
        return not self.sampling.get("temperature")

    def raw_text(self) -> str:
        """The same text without the chat template: the messages' contents, one per
        line (a completion prompt is raw already)."""
        if self.prompt is not None:
            return self.prompt
        return "\n".join(str(m.get("content", "")) for m in self.messages)


def from_line(entry, where: str) -> Request:
    if not isinstance(entry, dict):
        raise TrafficError(f"{where}: a request is a JSON object, found "
                           f"{type(entry).__name__}")
    sampling = {k: entry[k] for k in SAMPLING_KEYS if k in entry}
    if "max_completion_tokens" in entry:
        sampling["max_tokens"] = entry["max_completion_tokens"]
    if isinstance(entry.get("messages"), list) and entry["messages"]:
        return Request(where, messages=tuple(entry["messages"]), sampling=sampling)
    if isinstance(entry.get("prompt"), str):
        return Request(where, prompt=entry["prompt"], sampling=sampling)
    turns = entry.get("conversations")
    if isinstance(turns, list):
        first = next((t.get("value") for t in turns
                      if isinstance(t, dict) and t.get("from") in ("human", "user")), None)
        if isinstance(first, str):
            return Request(where, messages=({"role": "user", "content": first},),
                           sampling=sampling)
    raise TrafficError(
        f"{where}: no request in keys {sorted(entry)}: expected \"messages\" (a non-empty "
        "list, an OpenAI chat request), \"prompt\" (a string, a completion) or "
        "\"conversations\" (ShareGPT-style, with a \"human\" turn)")


def read_jsonl(path: str, limit: int | None = None) -> list[Request]:
    """The requests of a JSONL file (at most ``limit``), blank lines skipped."""
    requests = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                entry = json.loads(line)
            except json.JSONDecodeError as err:
                raise TrafficError(f"{where}: not JSON ({err.msg} at column {err.colno})")
            requests.append(from_line(entry, where))
            if limit and len(requests) >= limit:
                break
    if not requests:
        raise TrafficError(f"{path}: no request in the file")
    return requests


def from_lm_eval_task(task: str, include_path: list[str], limit: int | None = None
                      ) -> list[Request]:
    """The prompts of an lm-eval task (or group) that generates, zero-shot, each as one
    user message; the project's eval/tasks are on the include path."""
    from vllm_kimi_eagle.tools.evaluation.tasks import (
        EvalError,
        refusal,
        task_manager,
        task_output_types,
    )

    try:
        manager = task_manager(include_path)
        reason = refusal(task, task_output_types(manager, task))
    except EvalError as err:
        raise TrafficError(f"--lm-eval-task {task}: {err}") from err
    if reason:
        raise TrafficError(f"--lm-eval-task {task}: {reason}")
    requests = []
    for name, loaded in sorted(manager.load([task])["tasks"].items()):
        docs = loaded.test_docs() if loaded.has_test_docs() else loaded.validation_docs()
        for number, doc in enumerate(docs):
            requests.append(Request(f"{name}:{number}", messages=(
                {"role": "user", "content": loaded.doc_to_text(doc)},)))
            if limit and len(requests) >= limit:
                return requests
    if not requests:
        raise TrafficError(f"--lm-eval-task {task}: the task has no documents")
    return requests


def tiny_requests(count: int) -> list[Request]:
    """Chat requests of the tiny models' corpus (their demo prompts; the first eight are
    the suite's, held out of the drafts' training)."""
    from vllm_kimi_eagle.fixtures import corpus

    return [Request(f"tiny:{i}", messages=({"role": "user", "content": p},))
            for i, p in enumerate(corpus.demo_prompts(count))]


def body(request: Request, model: str, raw: bool, max_tokens: int) -> tuple[str, dict]:
    """(endpoint path, JSON body) of one request as sent; ``raw`` sends a chat request's
    text to the completions endpoint, without the template."""
    common = {"model": model, "max_tokens": max_tokens, "temperature": 0.0,
              **request.sampling}
    if request.messages is not None and not raw:
        return "/v1/chat/completions", {**common, "messages": list(request.messages)}
    return "/v1/completions", {**common, "prompt": request.raw_text()}
