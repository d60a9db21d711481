"""The prompts the builder's margins and the tests measure on are held out of every
draft's training chats, and the builder fails naming one that is not."""

import pytest

from vllm_kimi_eagle.fixtures import corpus, offline
from vllm_kimi_eagle.fixtures.variants import SEED
from vllm_kimi_eagle.tools.calibrate.cli import TINY_DEFAULTS


def _instructions(texts):
    return {text.split(" <|assistant|>")[0].removeprefix("<|user|> ") for text in texts}


def test_held_out_are_calibrates_first_round_and_the_suites_prompts():
    held = offline.held_out_prompts()
    assert TINY_DEFAULTS["num_prompts"] == offline.CALIBRATE_PROMPTS
    assert set(corpus.demo_prompts(TINY_DEFAULTS["num_prompts"],
                                   seed=offline.CALIBRATE_SEED)) <= held
    assert set(corpus.demo_prompts(offline.SUITE_PROMPTS, seed=offline.SUITE_SEED)) <= held


def test_the_drafts_chats_leave_out_the_held_out_prompts_and_keep_their_number():
    held = offline.held_out_prompts()
    every = corpus.training_text(SEED + 3, 1200)
    assert _instructions(every) & held  # without holding out, some would be trained on
    kept = corpus.training_text(SEED + 3, 1200, held)
    assert len(kept) == 1200 and not _instructions(kept) & held
    assert corpus.held_out_found(kept, held) == []
    # Every track keeps chats: a held-out day or capital still has its answers' text.
    assert {i.split()[1] for i in _instructions(kept)} == {"up", "colors", "days", "capitals"}


def test_a_held_out_prompt_is_found_as_a_whole_user_turn_only():
    texts = [corpus.render("count up from 23", "23 24"), corpus.render("list days after monday")]
    held = frozenset({"count up from 2", "count up from 23", "list days after monday"})
    assert corpus.held_out_found(texts, held) == ["count up from 23", "list days after monday"]


def test_the_training_stream_refuses_text_that_holds_a_held_out_prompt(monkeypatch):
    from vllm_kimi_eagle.fixtures import training

    monkeypatch.setattr(corpus, "training_text",
                        lambda seed, chats, held_out: [corpus.render("count up from 23", "23")])
    with pytest.raises(training.PromptsNotHeldOut, match=r"\['count up from 23'\]"):
        training.token_stream(None, SEED, 1, frozenset({"count up from 23"}))
