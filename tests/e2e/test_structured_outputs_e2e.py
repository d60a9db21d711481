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
# (prompt, structured_outputs, how to check the answer's text)
REQUESTS = [
    ("what is the capital of france", {"choice": CAPITALS}, lambda t: t in CAPITALS),
    ("what is the capital of italy", {"choice": CAPITALS}, lambda t: t in CAPITALS),
    ("what day comes after monday",
     {"regex": r" ?(monday|tuesday|wednesday) comes after (sunday|monday|tuesday) \."},
     lambda t: re.fullmatch(r" ?(monday|tuesday|wednesday) comes after (sunday|monday|tuesday) \.",
                            t) is not None),
    ("count up from 7", {"regex": r"( [0-9]{1,3}){6}"},
     lambda t: re.fullmatch(r"( [0-9]{1,3}){6}", t) is not None),
    ("list capitals starting with france",
     {"json": {"type": "object", "additionalProperties": False, "required": ["capital", "day"],
               "properties": {"capital": {"enum": CAPITALS}, "day": {"enum": DAYS}}}},
     lambda t: json.loads(t)["capital"] in CAPITALS and json.loads(t)["day"] in DAYS),
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
    got = {name: [answer(server, prompt, structured) for prompt, structured, _ in REQUESTS]
           for name, server in servers.items()}
    counters = servers["draft"].spec_counters() - before
    for (prompt, structured, _), none, draft in zip(REQUESTS, got["none"], got["draft"]):
        print(f"\n{list(structured)[0]:6} {prompt!r}: {draft['text']!r} "
              f"({draft['finish_reason']})")
    print(f"acceptance length under constraints {counters.acceptance_length:.3f} "
          f"({counters.drafts} drafts)")
    assert counters.drafts > 0, "no draft proposed"
    for (prompt, structured, holds), none, draft in zip(REQUESTS, got["none"], got["draft"]):
        assert draft["token_ids"] == none["token_ids"], prompt
        assert draft["finish_reason"] == "stop", (prompt, draft)
        assert holds(draft["text"]), (prompt, draft["text"])
