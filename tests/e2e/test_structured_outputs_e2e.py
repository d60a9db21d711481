"""Structured outputs with the draft: choice, regex and JSON-schema requests on vLLM's
OpenAI server give, greedy and in float32, the no-draft server's tokens, and the answers
hold to their constraint. The tiny tokenizer spells words with their space and has byte
tokens for printable ASCII (vllm_kimi_eagle/fixtures/tokenizer.py), so vLLM's grammar
engine can match any string. The servers are the e2e files' shared pair
(tests/e2e/conftest.py)."""

from __future__ import annotations

import json
import re

import pytest

pytestmark = pytest.mark.engine

CAPITALS = ["paris", "rome", "madrid", "berlin"]
DAYS = ["monday", "tuesday", "wednesday", "thursday"]


def _json_holds(text: str, finished: bool) -> bool:
    """The JSON request's answer: a whole object of the schema, or, where the answer ran to
    max_tokens (JSON allows any run of whitespace between tokens, and a tiny target may
    write one to the end), the start of one: without its whitespace, a prefix of an object
    the schema allows."""
    if finished:
        answer = json.loads(text)
        return answer["capital"] in CAPITALS and answer["day"] in DAYS
    written = re.sub(r"\s", "", text)
    return any(f'{{"capital":"{c}","day":"{d}"}}'.startswith(written)
               or f'{{"day":"{d}","capital":"{c}"}}'.startswith(written)
               for c in CAPITALS for d in DAYS)


# (prompt, structured_outputs, whether its grammar bounds the answer's length, how to
# check the answer's text given whether it finished)
REQUESTS = [
    ("what is the capital of france", {"choice": CAPITALS}, True,
     lambda t, finished: t in CAPITALS),
    ("what is the capital of italy", {"choice": CAPITALS}, True,
     lambda t, finished: t in CAPITALS),
    ("what day comes after monday",
     {"regex": r" ?(monday|tuesday|wednesday) comes after (sunday|monday|tuesday) \."}, True,
     lambda t, finished: re.fullmatch(
         r" ?(monday|tuesday|wednesday) comes after (sunday|monday|tuesday) \.", t) is not None),
    ("count up from 7", {"regex": r"( [0-9]{1,3}){6}"}, True,
     lambda t, finished: re.fullmatch(r"( [0-9]{1,3}){6}", t) is not None),
    ("list capitals starting with france",
     {"json": {"type": "object", "additionalProperties": False, "required": ["capital", "day"],
               "properties": {"capital": {"enum": CAPITALS}, "day": {"enum": DAYS}}}}, False,
     _json_holds),
]


def answer(server, prompt: str, structured: dict) -> dict:
    body = {"model": server.model_name(), "messages": [{"role": "user", "content": prompt}],
            "temperature": 0.0, "max_tokens": 64, "return_token_ids": True,
            "structured_outputs": structured}
    choice = server.post("/v1/chat/completions", body)["choices"][0]
    return {"text": choice["message"]["content"], "token_ids": choice["token_ids"],
            "finish_reason": choice["finish_reason"]}


def test_structured_outputs_with_the_draft_are_the_no_draft_servers(shared_servers):
    servers = shared_servers
    before = servers["draft"].spec_counters()
    got = {name: [answer(server, prompt, structured) for prompt, structured, _, _ in REQUESTS]
           for name, server in servers.items()}
    counters = servers["draft"].spec_counters() - before
    for (prompt, structured, _, _), none, draft in zip(REQUESTS, got["none"], got["draft"]):
        print(f"\n{list(structured)[0]:6} {prompt!r}: {draft['text']!r} "
              f"({draft['finish_reason']})")
    print(f"acceptance length under constraints {counters.acceptance_length:.3f} "
          f"({counters.drafts} drafts)")
    assert counters.drafts > 0, "no draft proposed"
    for (prompt, _, bounded, holds), none, draft in zip(REQUESTS, got["none"], got["draft"]):
        assert draft["token_ids"] == none["token_ids"], prompt
        assert draft["finish_reason"] == none["finish_reason"], prompt
        finished = draft["finish_reason"] == "stop"
        assert finished or (not bounded and draft["finish_reason"] == "length"), (prompt, draft)
        assert holds(draft["text"], finished), (prompt, draft["text"])
