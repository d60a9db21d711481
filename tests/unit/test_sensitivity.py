"""The scaled norms that make a tiny draft depend on each norm (fixtures/sensitivity.py):
the draft computes the same as trained, and every scaled weight now matters."""

from __future__ import annotations

import pytest
import torch

from vllm_kimi_eagle.fixtures import sensitivity
from vllm_kimi_eagle.fixtures.variants import ROPE, TRAINED, trained_spec


def reference(trained: str):
    from vllm_kimi_eagle.fixtures.reference import ReferenceDraft

    torch.manual_seed(0)
    return ReferenceDraft(trained_spec(trained), dict(ROPE)).eval()


def run(draft, states, tokens):
    with torch.no_grad():
        return torch.stack([draft.draft_logits(out) for out, _ in draft.unroll(
            tokens[:, 1:], draft.combine(states), torch.arange(states.shape[1])[None], 3)])


@pytest.mark.parametrize("trained", ["eagle3", "eagle3.1", "eagle3-narrow",
                                     "eagle3-norm-before-residual", "eagle3-llama",
                                     "eagle3-k3-gate"])
def test_scaled_norms_compute_the_same_draft(trained):
    draft = reference(trained)
    width = draft.spec.target_hidden_size * draft.spec.num_aux
    states, tokens = torch.randn(1, 10, width), torch.randint(0, 500, (1, 13))
    before = run(draft, states, tokens)
    own = not TRAINED[trained].target_vocab_weights
    names = sensitivity.scale_norms(draft, own, seed=3)
    assert names == sensitivity.scaled_norms(draft.spec, own)
    torch.testing.assert_close(run(draft, states, tokens), before, rtol=1e-4, atol=1e-4)
    for name in names:  # every scaled norm's weight now matters
        assert (sensitivity.norm_module(draft, name).weight - 1).abs().max() > 0.5, name


def test_the_final_norm_is_scaled_only_where_its_output_reaches_the_draft_s_own_lm_head():
    assert "norm" in sensitivity.scaled_norms(reference("eagle3-narrow").spec, True)
    assert "norm" not in sensitivity.scaled_norms(reference("eagle3").spec, False)
    assert "norm" not in sensitivity.scaled_norms(reference("eagle3.1").spec, True)
    assert "hidden_norm" not in sensitivity.scaled_norms(
        reference("eagle3-norm-before-residual").spec, True)


@pytest.mark.parametrize("trained", sorted(TRAINED))
def test_draft_norms_name_every_norm_of_the_draft_once_and_how_it_matters(trained):
    """One list says which norms a draft has and how each is made to matter; the build's
    scaling, the final norm's spread start, the margins and the smoothing all read it, so
    a norm it missed would be a norm no margin promises."""
    from vllm_kimi_eagle.fixtures import distill, margins
    from vllm_kimi_eagle.fixtures.wrong_servings import EVERY_PART

    draft = reference(trained)
    own = not TRAINED[trained].target_vocab_weights
    norms = sensitivity.draft_norms(draft.spec, own)
    held = sorted(name for name, module in draft.named_modules()
                  if "norm" in type(module).__name__.lower())
    assert sorted(sensitivity.norm_module_path(n.path) for n in norms) == held
    assert {n.made_to_matter for n in norms} <= {"scaled", "spread", "left"}
    for n in norms:
        assert n.readers, n.path
    spread = [n.path for n in norms if n.made_to_matter == "spread"]
    assert spread in ([], ["norm"])
    assert distill.final_norm_spread(trained) == bool(spread)
    if trained in EVERY_PART:
        unloaded = {m.serving.part: m.minimum for m in margins.MARGINS
                    if m.draft == trained and m.serving and m.serving.kind == "unloaded"}
        assert sorted(unloaded) == sorted(n.path for n in norms)
        assert sorted(p for p, floor in unloaded.items() if floor is not None) == sorted(
            n.path for n in norms if n.made_to_matter != "left")


def test_every_block_s_factor_is_far_from_one_and_within_the_spread():
    g = torch.Generator().manual_seed(5)
    factors = sensitivity.block_factors(70, g)
    blocks = factors[::sensitivity.NORM_BLOCK]
    assert len(factors) == 70 and len(blocks) == 3
    assert torch.equal(factors[:32], blocks[0].repeat(32))  # one factor per block
    size = blocks.log().abs()
    assert (size >= torch.log(torch.tensor(sensitivity.NORM_LEAST)) - 1e-12).all(), blocks
    assert (size <= torch.log(torch.tensor(sensitivity.NORM_SPREAD)) + 1e-12).all(), blocks
    many = sensitivity.block_factors(32 * 400, g)[::32]
    up = many > 1
    assert (up[1:] != up[:-1]).all()  # up and down in turn
    assert many.log().abs().min() >= torch.log(torch.tensor(sensitivity.NORM_LEAST)) - 1e-12
