"""lm-eval's task index as the tools read it (built once per process: about 10 s on 2
cores): which tasks ``eval`` runs and refuses, the tiny task as lm-eval builds it, and
``compare --lm-eval-task``'s prompts. Without a server; real servers:
tests/e2e/test_evaluation_e2e.py and tests/e2e/test_compare_e2e.py."""

from __future__ import annotations

import pytest

from vllm_kimi_eagle.tools.compare import traffic
from vllm_kimi_eagle.tools.evaluation.tasks import (
    TINY_TASK,
    EvalError,
    refusal,
    task_output_types,
)


@pytest.fixture(scope="module")
def task_manager():
    """lm-eval's task index, with the project's tasks (built once: ~10 s on 2 cores)."""
    from vllm_kimi_eagle.tools.evaluation import tasks

    return tasks.task_manager()


@pytest.mark.parametrize("task, leaf, kind", [
    ("gpqa_diamond_zeroshot", "gpqa_diamond_zeroshot", "multiple_choice"),
    ("gpqa_main_n_shot", "gpqa_main_n_shot", "multiple_choice"),
    ("mmlu", "mmlu_anatomy", "multiple_choice"),  # a group of groups
    ("arc_easy", "arc_easy", "multiple_choice"),
    ("wikitext", "wikitext", "loglikelihood_rolling"),
    ("gpqa", "gpqa_diamond_zeroshot", "multiple_choice"),  # a tag mixing both kinds
])
def test_non_generating_tasks_are_refused_by_output_type(task_manager, task, leaf, kind):
    reason = refusal(task, task_output_types(task_manager, task))
    assert reason is not None, f"{task} was accepted"
    assert f"{leaf} ({kind})" in reason and "never proposes" in reason
    assert "gpqa_diamond_cot_zeroshot" in reason  # what to run instead


@pytest.mark.parametrize("task", ["gpqa_diamond_cot_zeroshot", "gpqa_main_generative_n_shot",
                                  "gsm8k", TINY_TASK])
def test_generating_tasks_are_accepted(task_manager, task):
    types = task_output_types(task_manager, task)
    assert types and set(types.values()) == {"generate_until"}
    assert refusal(task, types) is None


def test_unknown_task_says_so(task_manager):
    with pytest.raises(EvalError, match="no task, group or tag named 'gpqa_diamnd'"):
        task_output_types(task_manager, "gpqa_diamnd")


def test_the_tiny_task_asks_and_scores_as_lm_evals_gpqa_cot(task_manager):
    """The tiny task's documents, prompt, target and metrics, as lm-eval builds them: the
    same prompt, filters and metric as lm-eval's own gpqa_diamond_cot_zeroshot, choices in
    an order fixed by the question (any process, any seed), the correct one's letter as
    the target."""
    from lm_eval.tasks._yaml_loader import load_yaml

    tiny = task_manager.load([TINY_TASK])["tasks"][TINY_TASK]
    gpqa = load_yaml(task_manager.task_index["gpqa_diamond_cot_zeroshot"].yaml_path,
                     resolve_func=False)
    ours = load_yaml(task_manager.task_index[TINY_TASK].yaml_path, resolve_func=False)
    for key in ("output_type", "doc_to_text", "doc_to_target", "filter_list", "metric_list",
                "generation_kwargs", "num_fewshot"):
        assert ours[key] == gpqa[key], key
    docs = list(tiny.validation_docs())
    assert len(docs) == 12
    first = docs[0]
    assert first["choices"] == ["sunday", "tuesday", "friday", "wednesday"]
    assert tiny.doc_to_target(first) == "(B)"
    assert tiny.doc_to_text(first).startswith(
        "What is the correct answer to this question:what day comes after monday\nChoices:\n"
        "(A) sunday\n(B) tuesday\n")
    for doc in docs:
        assert doc["choices"][ord(doc["answer"][1]) - 65] == doc["Correct Answer"]


def test_an_lm_eval_tasks_prompts_are_chat_requests():
    requests = traffic.from_lm_eval_task("kimi_eagle_gpqa_tiny", [], limit=5)
    assert len(requests) == 5 and requests[0].id == "kimi_eagle_gpqa_tiny:0"
    (message,) = requests[0].messages
    assert message["role"] == "user" and message["content"].startswith(
        "What is the correct answer to this question:what day comes after monday")
    assert len(traffic.from_lm_eval_task("kimi_eagle_gpqa_tiny", [])) == 12
    with pytest.raises(traffic.TrafficError, match="gpqa_diamond_zeroshot .*never proposes"):
        traffic.from_lm_eval_task("gpqa_diamond_zeroshot", [])
    with pytest.raises(traffic.TrafficError, match="no task, group or tag named 'nope'"):
        traffic.from_lm_eval_task("nope", [])
