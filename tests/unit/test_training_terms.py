"""The terms the builder adds to training so that a draft depends on each captured state
and on its rope base: the target's neighbouring layers kept apart, the draft taught to
fail on wrong captures and on wrong rope bases."""

import math

import pytest

torch = pytest.importorskip("torch")

from vllm_kimi_eagle.fixtures import distill, margins  # noqa: E402
from vllm_kimi_eagle.fixtures import wrong_servings as ws  # noqa: E402
from vllm_kimi_eagle.fixtures.target import layer_similarity  # noqa: E402
from vllm_kimi_eagle.fixtures.variants import (  # noqa: E402
    TARGET_LAYERS,
    TRAINED,
    TRAINING,
    trained_spec,
)


def test_wrong_captures_are_each_id_off_each_swap_and_every_id_off():
    assert distill.wrong_captures((2, 3, 5)) == [
        (1, 3, 5), (2, 4, 5), (2, 3, 4), (2, 3, 6),
        (3, 2, 5), (5, 3, 2), (2, 5, 3),
        (1, 2, 4), (3, 4, 6),
    ]
    # Ids outside the target's layers, or repeated, are no capture anyone serves.
    assert distill.wrong_captures((0, 1, TARGET_LAYERS)) == [
        (0, 2, 6), (0, 1, 5), (1, 0, 6), (6, 1, 0), (0, 6, 1)]


@pytest.mark.parametrize("draft", ws.EVERY_PART)
def test_every_capture_margin_is_a_capture_the_draft_was_taught_to_fail_on(draft):
    taught = set(distill.wrong_captures(TRAINED[draft].capture))
    measured = {ws.capture_read(m.serving, TRAINED[draft].capture) for m in margins.MARGINS
                if m.draft == draft and m.serving and m.serving.kind == "capture"}
    assert measured and measured <= taught, measured - taught


def test_every_attention_margin_is_a_serving_the_drafts_were_taught_to_fail_on():
    for margin in margins.MARGINS:
        if margin.serving and margin.serving.kind in ("rope_base", "served_with_rope"):
            nope = trained_spec(margin.draft).nope
            assert margin.serving in ws.taught_attentions(nope), margin.name
    assert ws.named("rope_base").part == ws.ROPE_BASE_TIMES
    assert all(s.part > 0 and s.part != 1 for s in ws.taught_attentions(nope=False))


def test_training_serves_the_attention_wrong_as_the_registry_says():
    from vllm_kimi_eagle.fixtures.reference import ReferenceDraft
    from vllm_kimi_eagle.fixtures.variants import ROPE

    rotated = ReferenceDraft(trained_spec("eagle3"), dict(ROPE))
    (wrong,) = distill.wrong_attentions(rotated)
    attn = rotated.layers[0].self_attn
    kept = dict(attn.rope)
    with wrong(rotated):
        assert attn.rope["rope_theta"] == kept["rope_theta"] * ws.ROPE_BASE_TIMES
    nope = ReferenceDraft(trained_spec("eagle3-k3-nope"), dict(ROPE))
    (wrong,) = distill.wrong_attentions(nope)
    with wrong(nope):
        assert not nope.layers[0].self_attn.spec.nope
    assert nope.layers[0].self_attn.spec.nope


def test_rope_base_times_changes_only_the_base_and_restores_it():
    from vllm_kimi_eagle.fixtures.reference import ReferenceDraft
    from vllm_kimi_eagle.fixtures.variants import ROPE

    draft = ReferenceDraft(trained_spec("eagle3"), dict(ROPE))
    attn = draft.layers[0].self_attn
    kept = dict(attn.rope)
    with ws.rope_base_times(draft, 10.0):
        assert attn.rope == dict(kept, rope_theta=kept["rope_theta"] * 10.0)
    assert attn.rope == kept


def test_layer_similarity_counts_only_what_exceeds_the_ceiling_from_id_1_on():
    a = torch.tensor([[[1.0, 0.0]]])
    b = torch.tensor([[[0.0, 1.0]]])
    # Id 0 equal to id 1 costs nothing; ids 1, 2, 3 alternate, orthogonal.
    assert layer_similarity([a, a, b, a], 0.7).item() == 0.0
    same = layer_similarity([b, a, a, a], 0.7).item()
    assert same == pytest.approx(2 * 0.3)
    tilted = torch.tensor([[[1.0, 1.0]]])  # cosine 1/sqrt(2) with a
    assert layer_similarity([b, a, tilted], 0.7).item() == pytest.approx(
        1 / math.sqrt(2) - 0.7, abs=1e-6)


def test_unlikelihood_is_minus_log_one_minus_the_label_probability():
    logits = torch.log(torch.tensor([[0.5, 0.25, 0.25], [0.9, 0.05, 0.05]]))
    labels = torch.tensor([0, 1])
    expected = -(math.log(0.5) + math.log(0.95)) / 2
    assert distill.unlikelihood(logits, labels).item() == pytest.approx(expected, rel=1e-5)
    sure = torch.tensor([[0.0, 50.0]])
    assert math.isfinite(distill.unlikelihood(sure, torch.tensor([1])).item())


def test_the_drafts_whose_final_norm_starts_spread_are_those_it_cannot_be_scaled_on():
    from vllm_kimi_eagle.fixtures.sensitivity import scaled_norms

    for name, trained in TRAINED.items():
        spec = trained_spec(name)
        scaled = "norm" in scaled_norms(spec, not trained.target_vocab_weights)
        assert distill.final_norm_spread(name) == (spec.final_norm and not scaled), name
    assert distill.final_norm_spread("eagle3") and distill.final_norm_spread("eagle3.1")
    assert not distill.final_norm_spread("eagle3-narrow")  # scaled: its own LM head


@pytest.mark.parametrize("name, kind", [("eagle3", "lm_head"), ("eagle3.1", "norm_output"),
                                        ("eagle3-narrow", None)])
def test_a_new_drafts_final_norm_starts_at_the_factors_of_its_kind(name, kind):
    """Blocks of 32 channels, each in [least, spread] or its inverse, up and down in turn;
    seeded, so every build starts from the same weights."""
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    from vllm_kimi_eagle.fixtures.variants import TARGET_CONFIG

    config = DeepseekV3Config(**{k: v for k, v in TARGET_CONFIG.items()
                                 if k not in ("architectures", "model_type")})
    target = DeepseekV3ForCausalLM(config)
    weight = distill.new_draft(target, name).norm.weight.detach()
    if kind is None:
        assert torch.equal(weight, torch.ones_like(weight))
        return
    least, spread = TRAINING["final_norm_init"][kind]
    blocks = weight.view(-1, 32)
    assert torch.equal(blocks, blocks[:, :1].expand_as(blocks))
    sizes = blocks[:, 0].log().abs()
    assert sizes.min() >= math.log(least) - 1e-6 and sizes.max() <= math.log(spread) + 1e-6
    up = blocks[:, 0] > 1
    assert torch.equal(up[1:], ~up[:-1])
    assert torch.equal(weight, distill.new_draft(target, name).norm.weight.detach())
