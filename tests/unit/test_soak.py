"""The soak's plan and verdicts (tools/soak/traffic.py, checks.py), without a server; the
soak itself runs in tests/e2e/test_soak_e2e.py."""

from __future__ import annotations

import dataclasses

import pytest

from vllm_kimi_eagle.tools.soak import checks, traffic
from vllm_kimi_eagle.tools.soak.client import CANCELLED, FAILED, HTTP_ERROR, OK, Outcome
from vllm_kimi_eagle.tools.soak.runner import Window


def test_plan_is_seeded_bounded_and_mixed():
    plan = traffic.plan(seed=3, requests=2000, window_size=40, greedy_windows=5,
                        max_model_len=512)
    assert plan == traffic.plan(seed=3, requests=2000, window_size=40, greedy_windows=5,
                                max_model_len=512)
    assert plan != traffic.plan(seed=4, requests=2000, window_size=40, greedy_windows=5,
                                max_model_len=512)
    assert len(plan) == 2000 and max(r.window for r in plan) == 49
    assert all(r.greedy for r in plan if r.window < 5)
    mixed = [r for r in plan if r.window >= 5]
    sampled = [r for r in mixed if not r.greedy]
    # Every feature of the mix is there, in the shares MIX asks for.
    assert 0.35 < len(sampled) / len(mixed) < 0.55
    assert any(r.n == 2 for r in sampled) and all(r.n == 1 for r in plan if r.greedy)
    assert sum(r.cancel_after is not None for r in plan) >= 100
    assert all(r.stream for r in plan if r.cancel_after is not None)
    assert any(r.stop for r in plan) and any(r.logprobs for r in plan)
    assert {r.endpoint for r in plan} == {"chat", "completions"}
    assert any(r.fill_to == 512 - r.max_tokens for r in plan)
    assert {r.kind for r in plan if r.expect_status} == {k for k, _, _ in traffic.BAD}
    assert all(traffic.MAX_TOKENS[0] <= r.max_tokens <= traffic.MAX_TOKENS[1]
               for r in plan if r.expect_status is None)


def test_fit_gives_long_prompts_exactly_their_token_count(tmp_path):
    from vllm_kimi_eagle.fixtures.tokenizer import write_tokenizer

    tokenizer = write_tokenizer(str(tmp_path))

    def count(text: str) -> int:
        return len(tokenizer(text)["input_ids"])

    plan = traffic.plan(seed=1, requests=400, window_size=40, greedy_windows=1,
                        max_model_len=512)
    fitted = traffic.fit(plan, count)
    long = [r for r in fitted if r.fill_to is not None]
    assert long and all(count(r.prompt) == r.fill_to for r in long)
    assert [r for r in fitted if r.fill_to is None] == [r for r in plan if r.fill_to is None]
    too_long = [r for r in fitted if r.kind == "bad-too-long"]
    assert too_long and all(count(r.prompt) > 512 for r in too_long)
    with pytest.raises(ValueError, match="cannot fill the context"):
        traffic.fit([dataclasses.replace(plan[0], prompt="a b", fill_to=10)], count)


def request(**changes) -> traffic.Request:
    base = traffic.Request(id=1, window=0, kind="greedy", endpoint="chat", prompt="p",
                           max_tokens=8)
    return dataclasses.replace(base, **changes)


def outcome(status=OK, tokens=(5, 6, 7), finish="length", **changes) -> Outcome:
    changes.setdefault("choices", [{"token_ids": list(tokens), "finish_reason": finish,
                                    "logprobs": False}])
    return Outcome(1, status, **changes)


@pytest.mark.parametrize("req, got, says", [
    (request(), outcome(), None),
    (request(), outcome(status=FAILED, choices=[], message="ConnectionError"), "failed"),
    (request(), outcome(status=HTTP_ERROR, choices=[], http_status=500), "http-error 500"),
    (request(), outcome(finish="abort"), "finish_reason 'abort'"),
    (request(max_tokens=2), outcome(), "3 tokens for max_tokens 2"),
    (request(n=2), outcome(), "1 choices for n=2"),
    (request(logprobs=2), outcome(), "logprobs asked for"),
    (request(), outcome(status=CANCELLED), "cancelled without being asked"),
    (request(stream=True, cancel_after=2), outcome(status=CANCELLED, finish=None), None),
    (request(kind="bad-max-tokens-0", expect_status=400, expect_word="max_tokens"),
     outcome(status=HTTP_ERROR, choices=[], http_status=400,
             message="max_tokens must be at least 1 (parameter=max_tokens)"), None),
    (request(kind="bad-max-tokens-0", expect_status=400, expect_word="max_tokens"),
     outcome(), "expected HTTP 400, got ok"),
    (request(kind="bad-too-long", expect_status=400, expect_word="input_tokens"),
     outcome(status=HTTP_ERROR, choices=[], http_status=400, message="too long"),
     "does not name 'input_tokens'"),
])
def test_answer_problem(req, got, says):
    problem = checks.answer_problem(req, got)
    assert (problem is None) if says is None else (says in problem), problem


@pytest.mark.parametrize("draft, none, says", [
    (outcome(), outcome(), None),
    (outcome(tokens=(5, 6, 9)), outcome(), "token 2: 9 vs 7"),
    (outcome(tokens=(5, 6), finish="stop"), outcome(), "finish_reason stop vs length"),
    # A cancelled stream: compared over the tokens both sides received.
    (outcome(status=CANCELLED, tokens=(5, 6, 7, 8)), outcome(tokens=(5, 6)), None),
    (outcome(status=CANCELLED, tokens=(5, 3)), outcome(), "token 1: 3 vs 6"),
])
def test_greedy_difference(draft, none, says):
    difference = checks.greedy_difference(draft, none)
    assert (difference is None) if says is None else (says in difference), difference


def window(index, server="draft", drafts=10, accepted=12, preemptions=0, drained=True):
    counters = {"drafts": drafts, "accepted_tokens": accepted,
                "acceptance_length": 1 + accepted / drafts if drafts else None}
    return Window(index, server, 1.0, preemptions, counters, drained, 0)


def test_acceptance_compares_greedy_only_windows_with_mixed_ones():
    plan = [request(window=0), request(window=1, temperature=0.8, kind="sampled")]
    near = checks.acceptance_mixed_vs_greedy(
        plan, [window(0, drafts=20, accepted=24), window(1, drafts=20, accepted=23)], 0.1)
    assert near["passed"] and "greedy-only windows 2.200, mixed windows 2.150" in near["detail"]
    far = checks.acceptance_mixed_vs_greedy(
        plan, [window(0, accepted=12), window(1, accepted=5)], 0.1)
    assert not far["passed"] and "differ by 0.700" in far["detail"]


def test_drafts_must_be_accepted_in_every_window():
    good = checks.drafts_throughout(
        [window(0), window(1, preemptions=3), window(1, "none", 0, 0)])
    assert good["passed"] and "1 with preemptions" in good["detail"]
    bad = checks.drafts_throughout([window(0), window(1, drafts=0, accepted=0)])
    assert not bad["passed"] and "window 1: 0 drafts" in bad["detail"]


def test_rss_growth_compares_the_first_and_last_thirds():
    flat = [(t, 1000) for t in range(9)]
    assert checks.rss_growth(flat) == 0
    growing = [(t, 1000 + 100 * t) for t in range(9)]
    assert checks.rss_growth(growing) == pytest.approx(1700 / 1100 - 1)
    assert checks.rss_growth([(0, 1)]) is None
    # Judged from the end of the warm-up: a server that grew while warming up, then flat.
    warming = [(t, 1000 + 500 * min(t, 3)) for t in range(12)]
    assert checks.rss_growth(warming) > 0.05 and checks.rss_growth(warming, since=3) == 0
    verdict = checks.memory_flat({"draft": growing, "none": flat}, 0.05)
    assert not verdict["passed"] and "draft grew" in verdict["detail"]
    # The server without a draft is the control: reported, not judged.
    control = checks.memory_flat({"draft": flat, "none": growing}, 0.05)
    assert control["passed"] and "none, the control +54.5%" in control["detail"]


def test_counts_ask_for_pressure_and_cancellations():
    outcomes = {"draft": {1: outcome(status=CANCELLED)}, "none": {}}
    ok = checks.counts([], outcomes, [window(0, preemptions=2)], 1, 1)
    assert ok["passed"]
    low = checks.counts([], outcomes, [window(0)], 1, 2)
    assert not low["passed"] and "--kv-blocks" in low["detail"]
    assert "1 cancellations < 2" in low["detail"]
