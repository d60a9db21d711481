"""One planned request sent with the real ``openai`` client, and what came back.

Token ids come from vLLM's ``return_token_ids`` extension (whole lists, or deltas in a
stream), so greedy answers are compared token for token, not as text. A streamed request
with ``cancel_after`` closes its connection after that many chunks with tokens, the way a
client that goes away does; vLLM then aborts it.
"""

from __future__ import annotations

import dataclasses
import time

from vllm_kimi_eagle.tools.figures import request_metrics
from vllm_kimi_eagle.tools.soak.traffic import Request

OK, CANCELLED, HTTP_ERROR, FAILED = "ok", "cancelled", "http-error", "failed"


@dataclasses.dataclass
class Outcome:
    """What one server did with one request."""

    id: int
    status: str                         # OK, CANCELLED, HTTP_ERROR or FAILED
    choices: list[dict] = dataclasses.field(default_factory=list)
    http_status: int | None = None
    message: str = ""
    seconds: float = 0.0
    # vLLM's per-request figures (a non-streamed, single-choice request on a server that
    # reports them), as RequestAcceptance.as_dict() keeps them; else None
    acceptance: dict | None = None

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def _arguments(request: Request, model: str) -> dict:
    """The openai client's keyword arguments for ``request``."""
    body: dict = {"return_token_ids": True}
    if request.top_k is not None:
        body["top_k"] = request.top_k
    args = dict(model=request.model or model, max_tokens=request.max_tokens,
                temperature=request.temperature, n=request.n, stream=request.stream,
                extra_body=body)
    args.update({name: value for name, value in (("top_p", request.top_p),
                                                  ("seed", request.seed)) if value is not None})
    if request.stop:
        args["stop"] = list(request.stop)
    if request.endpoint == "chat":
        args["messages"] = [{"role": "user", "content": request.prompt}]
        if request.logprobs is not None:
            args.update(logprobs=True, top_logprobs=request.logprobs)
    else:
        args["prompt"] = request.prompt
        if request.logprobs is not None:
            args["logprobs"] = request.logprobs
    return args


def _extra(item, name: str):
    """A vLLM field the openai types do not declare (kept in ``model_extra``)."""
    return (getattr(item, "model_extra", None) or {}).get(name)


def _has_logprobs(choice) -> bool:
    return getattr(choice, "logprobs", None) is not None


async def send(client, model: str, request: Request) -> Outcome:
    """Send ``request`` to the server behind ``client`` (openai.AsyncOpenAI)."""
    import openai

    endpoint = client.chat.completions if request.endpoint == "chat" else client.completions
    started = time.perf_counter()
    try:
        response = await endpoint.create(**_arguments(request, model))
        if request.stream:
            outcome = await _read_stream(response, request)
        else:
            outcome = Outcome(request.id, OK, choices=[
                {"token_ids": list(_extra(c, "token_ids") or []),
                 "finish_reason": c.finish_reason, "logprobs": _has_logprobs(c)}
                for c in sorted(response.choices, key=lambda c: c.index)])
            found = request_metrics.from_response({"metrics": _extra(response, "metrics")})
            if found is not None:
                outcome.acceptance = found.as_dict()
    except openai.APIStatusError as err:
        outcome = Outcome(request.id, HTTP_ERROR, http_status=err.status_code,
                          message=str(err)[:500])
    except (openai.APIError, OSError) as err:
        outcome = Outcome(request.id, FAILED, message=f"{type(err).__name__}: {err}"[:500])
    outcome.seconds = round(time.perf_counter() - started, 3)
    return outcome


async def _read_stream(stream, request: Request) -> Outcome:
    choices: dict[int, dict] = {}
    chunks_with_tokens = 0
    async for chunk in stream:
        for choice in chunk.choices:
            entry = choices.setdefault(choice.index, {"token_ids": [], "finish_reason": None,
                                                      "logprobs": False})
            delta = _extra(choice, "token_ids") or []
            entry["token_ids"] += list(delta)
            entry["logprobs"] |= _has_logprobs(choice)
            if choice.finish_reason is not None:
                entry["finish_reason"] = choice.finish_reason
            chunks_with_tokens += bool(delta)
        if request.cancel_after is not None and chunks_with_tokens >= request.cancel_after:
            await stream.close()
            return Outcome(request.id, CANCELLED, choices=[choices[i] for i in sorted(choices)])
    return Outcome(request.id, OK, choices=[choices[i] for i in sorted(choices)])
