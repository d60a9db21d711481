"""vllm-kimi-eagle eval: its decisions, without a server or lm-eval's task index: the
server arguments it adds, the context it needs, where its tasks come from, what it
counts per document. Which lm-eval tasks it runs: tests/integration/test_lm_eval_tasks.py;
its command line: tests/integration/test_cli_refusals.py; real servers:
tests/e2e/test_evaluation_e2e.py.
"""

from __future__ import annotations

import os

import pytest

from vllm_kimi_eagle.tools.engines.vllm_server import server_args
from vllm_kimi_eagle.tools.evaluation.measure import context_problem
from vllm_kimi_eagle.tools.evaluation.tasks import EvalError, task_folder


def test_server_arguments_are_the_users_plus_visible_defaults():
    assert server_args([]) == ["--seed", "0"]
    assert server_args(["--dtype=float32"]) == ["--seed", "0", "--dtype=float32"]
    # A value the user gave is never overridden, in either spelling.
    assert server_args(["--seed=7"]) == ["--seed=7"]
    assert server_args(["--seed", "7"]) == ["--seed", "7"]
    assert "--max-model-len" not in server_args([])


def test_context_problem_gives_the_numbers():
    assert context_problem("t", 100, 412, 512, "http://x") is None
    message = context_problem("gpqa", 900, 16384, 8192, "http://x")
    for words in ("900 tokens", "--max-tokens 16384", "17284 tokens", "max_model_len 8192",
                  "--server-arg=--max-model-len=17284", "lower --max-tokens to 7292"):
        assert words in message, message


def test_the_tasks_come_from_the_checkouts_eval_folder(tmp_path):
    """One source: in a checkout, eval/tasks; elsewhere the copy a wheel carries; neither
    is an error that says where it looked."""
    from tests.helpers import REPO

    assert task_folder() == os.path.join(REPO, "eval", "tasks")
    missing = (str(tmp_path / "a"), str(tmp_path / "b"))
    with pytest.raises(EvalError, match=r"not installed: no kimi_eagle_gpqa_tiny/.* in .*a or"):
        task_folder(missing)


def _counters(drafts: int, draft_tokens: int, accepted: int, per_position: tuple):
    """A scrape of a server's spec-decode counters over a window."""
    from vllm_kimi_eagle.tools.figures import spec_metrics

    return spec_metrics.Scrape({
        "vllm:spec_decode_num_drafts_total": {(): float(drafts)},
        "vllm:spec_decode_num_draft_tokens_total": {(): float(draft_tokens)},
        "vllm:spec_decode_num_accepted_tokens_total": {(): float(accepted)},
        "vllm:spec_decode_num_accepted_tokens_per_pos_total": {
            (("position", str(i)),): float(n) for i, n in enumerate(per_position)}})


def test_each_document_gets_its_own_responses_acceptance_and_its_category():
    """Responses recorded with their contexts (a chat context is a one-field named tuple in
    lm-eval, a plain tuple in its samples), matched to documents, by category, and checked
    against the window's counters."""
    from collections import namedtuple

    from vllm_kimi_eagle.tools.evaluation.measure import context_key, per_request
    from vllm_kimi_eagle.tools.figures import spec_metrics
    from vllm_kimi_eagle.tools.figures.request_metrics import RequestAcceptance

    JsonChatStr = namedtuple("JsonChatStr", ["prompt"])
    contexts = ['[{"role": "user", "content": "a"}]', '[{"role": "user", "content": "b"}]']
    figures = [RequestAcceptance((1, 1, 1, 1), 12), RequestAcceptance((0, 0, 2, 2), 12)]
    responses = [{"context": context_key(JsonChatStr(c)), "acceptance": a}
                 for c, a in zip(contexts[::-1], figures[::-1])]  # answered out of order
    samples = [{"doc_id": i, "doc": {"High-level domain": d}, "arguments": [((c,), {})]}
               for i, (c, d) in enumerate(zip(contexts, ("days", "capitals")))]
    window = _counters(drafts=8, draft_tokens=24, accepted=16, per_position=(7, 6, 3))
    found = per_request(responses, samples, window, k=3)
    assert [d["acceptance_length"] for d in found["per_document"]] == [2.5, 3.5]
    assert found["by_category"]["days"]["mean"] == 2.5
    assert found["by_category"]["capitals"]["mean"] == 3.5
    assert found["adds_up_to_counters"]
    assert per_request(responses, samples, spec_metrics.Scrape(), k=3)["adds_up_to_counters"] \
        is False
    missing = [dict(r, acceptance=None) for r in responses]  # a server without the flag
    assert per_request(missing, samples, window, k=3) is None


def test_documents_with_the_same_prompt_each_get_their_own_response():
    """Two documents whose prompts are the same text: each response counts once, for one
    document (matched by text, a response could be counted twice and another never). A
    response without figures is left out and counted, and the rest still count."""
    from vllm_kimi_eagle.tools.evaluation.measure import per_request
    from vllm_kimi_eagle.tools.figures import spec_metrics
    from vllm_kimi_eagle.tools.figures.request_metrics import RequestAcceptance

    same = '[{"role": "user", "content": "same"}]'
    other = '[{"role": "user", "content": "other"}]'
    responses = [{"context": same, "acceptance": RequestAcceptance((1, 1, 1, 1), 12)},
                 {"context": same, "acceptance": RequestAcceptance((0, 0, 0, 4), 12)},
                 {"context": other, "acceptance": None}]
    samples = [{"doc_id": i, "doc": {}, "arguments": [((c,), {})]}
               for i, c in enumerate((same, same, other))]
    found = per_request(responses, samples, spec_metrics.Scrape(), k=3)
    assert [(d["doc"], d["acceptance_length"]) for d in found["per_document"]] == [
        (0, 2.5), (1, 4.0)]
    assert found["missing"] == 1 and found["adds_up_to_counters"] is None


def test_a_document_answered_without_a_draft_step_is_named_not_averaged():
    """An answer of one token or none has no draft step: its figures add up to the
    counters, it stays out of the distribution, and the report says which it was (a
    category with no drafted document gets a row of dashes)."""
    from vllm_kimi_eagle.tools.evaluation.measure import per_request
    from vllm_kimi_eagle.tools.evaluation.report import per_request_lines
    from vllm_kimi_eagle.tools.figures.request_metrics import RequestAcceptance

    responses = [{"context": "a", "acceptance": RequestAcceptance((1, 1, 1, 1), 12)},
                 {"context": "b", "acceptance": RequestAcceptance((0, 0, 0, 0), 0)}]
    samples = [{"doc_id": i, "doc": {"High-level domain": d}, "arguments": [((c,), {})]}
               for i, (c, d) in enumerate(zip("ab", ("days", "capitals")))]
    window = _counters(drafts=4, draft_tokens=12, accepted=6, per_position=(3, 2, 1))
    found = per_request(responses, samples, window, k=3)
    assert found["adds_up_to_counters"] and len(found["per_document"]) == 2
    assert found["requests"] == 1 and found["by_category"]["capitals"] == {"requests": 0}
    text = "\n".join(per_request_lines(found))
    assert "| capitals | 0 | - | - | - | - |" in text
    assert "1 of 2 documents (ids [1]) were answered without a draft step" in text
