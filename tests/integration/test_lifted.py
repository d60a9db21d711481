"""The lifted models (fixtures/lifted.py) and their negative controls (fixtures/controls.py)
at the suite's small width, offline: the lifted target and drafts compute the tiny ones'
function, and every control loses acceptance, so that ``kimi-width`` (the same
construction at Kimi's width, served) can fail on each part a draft class reads."""

from __future__ import annotations

import json
import os

import pytest
import torch

from vllm_kimi_eagle.fixtures import controls as ctl
from vllm_kimi_eagle.fixtures import corpus, lifted, margins, offline
from vllm_kimi_eagle.fixtures.variants import TRAINED
from vllm_kimi_eagle.tools.kimi_width.lifted_verdicts import LEAST_DROP


@pytest.fixture(scope="module")
def small(tiny, tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("lifted") / "small")
    ctl.write_models(tiny, folder, lifted.SMALL, dtype=torch.float32)
    return folder


@pytest.fixture(scope="module")
def models(tiny, small):
    """(tiny target, lifted target, the suite's prompts' greedy generations)."""
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast.from_pretrained(os.path.join(tiny, "target"))
    tiny_target = offline.load_target_folder(os.path.join(tiny, "target"))
    wide_target = offline.load_target_folder(os.path.join(small, "target"))
    generations = []
    with torch.no_grad():
        for instruction in corpus.demo_prompts(offline.SUITE_PROMPTS, seed=offline.SUITE_SEED):
            ids = tokenizer(corpus.render(instruction), add_special_tokens=False)["input_ids"]
            seq = tiny_target.generate(torch.tensor([ids]), max_new_tokens=64, do_sample=False,
                                       pad_token_id=tokenizer.pad_token_id)[0]
            generations.append((len(ids), seq))
    return tiny_target, wide_target, generations


@pytest.fixture(scope="module")
def right(small, models):
    """Each lifted draft's acceptance as served right, and its reference model."""
    _, wide_target, generations = models
    out = {}
    for draft in lifted.DRAFTS:
        reference = offline.load_draft_folder(os.path.join(small, draft.name), wide_target)
        capture = TRAINED[draft.trained].capture
        out[draft.name] = (acceptance(wide_target, reference, generations, capture), reference)
    return out


def acceptance(target, draft, generations, capture) -> float:
    return offline.served_acceptance(target, draft, generations, capture)


def test_the_lifted_target_computes_the_tiny_targets_function(models):
    tiny_target, wide_target, generations = models
    with torch.no_grad():
        for _, seq in generations:
            tiny_logits = tiny_target(input_ids=seq[None]).logits[0]
            wide_logits = wide_target(input_ids=seq[None]).logits[0]
            vocab = tiny_logits.shape[-1]
            assert wide_logits.shape[-1] == lifted.SMALL.vocab
            torch.testing.assert_close(wide_logits[:, :vocab], tiny_logits, atol=1e-3, rtol=1e-3)
            # the added tokens' logits are 0, and never win
            assert wide_logits[:, vocab:].abs().max() == 0
            assert tiny_logits.max(-1).values.min() > 1.0


@pytest.mark.parametrize("draft", lifted.DRAFTS, ids=lifted.DRAFT_NAMES)
def test_each_lifted_draft_is_accepted_as_its_tiny_draft(tiny, models, right, draft):
    tiny_target, _, generations = models
    capture = TRAINED[draft.trained].capture
    as_tiny = acceptance(tiny_target, offline.load_draft_folder(
        os.path.join(tiny, draft.source), tiny_target), generations, capture)
    as_lifted = right[draft.name][0]
    print(f"\n{draft.name}: {as_lifted:.4f} lifted, {as_tiny:.4f} tiny")
    assert as_tiny > 2.3
    assert abs(as_lifted - as_tiny) < 1e-3


@pytest.mark.parametrize("control", ctl.CONTROLS, ids=ctl.CONTROL_NAMES)
def test_each_control_loses_acceptance(small, models, right, control):
    """The change applied to the reference models, and (where the control is a folder)
    the folder as written, read back: both lose more than LEAST_DROP."""
    _, wide_target, generations = models
    draft = lifted.draft_named(control.draft)
    capture = TRAINED[draft.trained].capture
    as_right, reference = right[draft.name]
    with ctl.applied(control, wide_target, reference, capture) as (served, ids):
        wrong = acceptance(wide_target, served, generations, ids)
    print(f"\n{control.name} ({control.what}): {wrong:.4f} against {as_right:.4f} right")
    assert as_right - wrong > LEAST_DROP
    if control.folder:
        written = offline.load_draft_folder(os.path.join(small, control.folder), wide_target)
        with open(os.path.join(small, control.folder, "config.json")) as f:
            ids = json.load(f)["eagle_config"][ctl.IDS_KEY]
        assert acceptance(wide_target, written, generations, tuple(ids)) == pytest.approx(
            wrong, abs=1e-6)


def test_the_permuted_drafts_own_embedding_and_head_are_not_the_targets(small):
    """What makes the two sharing controls bite: vLLM shares a draft's tensor that equals
    the target's; a permuted draft's never do."""
    from safetensors import safe_open

    with safe_open(os.path.join(small, "target", "model.safetensors"), "pt") as f:
        target = {n: f.get_tensor(n) for n in ("model.embed_tokens.weight", "lm_head.weight")}
    folder = os.path.join(small, ctl.EAGLE31)
    with safe_open(os.path.join(folder, lifted.EMBED_FILE), "pt") as f:
        embed = f.get_tensor("embed_tokens.weight")
    with safe_open(os.path.join(folder, lifted.HEAD_FILE), "pt") as f:
        head = f.get_tensor("lm_head.weight")
    assert embed.shape == target["model.embed_tokens.weight"].shape
    assert not torch.equal(embed, target["model.embed_tokens.weight"])
    assert not torch.equal(head, target["lm_head.weight"])


def test_inspect_reads_every_lifted_folder_without_problems(small):
    """What vLLM's start-up reads of each draft and control (config, headers, the links to
    the large files): no problem, the wide sizes."""
    from vllm_kimi_eagle.tools.inspect_draft import inspect_draft

    folders = lifted.DRAFT_NAMES + tuple(c.folder for c in ctl.CONTROLS if c.folder)
    for name in folders:
        report = inspect_draft(os.path.join(small, name), os.path.join(small, "target"))
        assert report["problems"] == [], (name, report["problems"])
        assert report["mla"]["hidden_size"] == lifted.SMALL.hidden, name
        assert report["target"]["vocab_size"] == lifted.SMALL.vocab, name
