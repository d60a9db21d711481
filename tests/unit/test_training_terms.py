"""The terms the builder adds to training so that a draft depends on each captured state
and on its rope base: the target's neighbouring layers kept apart, the draft taught to
fail on wrong captures and on wrong rope bases."""

import math

import pytest

torch = pytest.importorskip("torch")

from vllm_kimi_eagle.fixtures import distill, margins  # noqa: E402
from vllm_kimi_eagle.fixtures.target import layer_similarity  # noqa: E402
from vllm_kimi_eagle.fixtures.variants import TARGET_LAYERS, TRAINED, TRAINING  # noqa: E402


def test_wrong_captures_are_each_id_off_each_swap_and_every_id_off():
    assert distill.wrong_captures((2, 3, 5)) == [
        (1, 3, 5), (2, 4, 5), (2, 3, 4), (2, 3, 6),
        (3, 2, 5), (5, 3, 2), (2, 5, 3),
        (1, 2, 4), (3, 4, 6),
    ]
    # Ids outside the target's layers, or repeated, are no capture anyone serves.
    assert distill.wrong_captures((0, 1, TARGET_LAYERS)) == [
        (0, 2, 6), (0, 1, 5), (1, 0, 6), (6, 1, 0), (0, 6, 1)]


@pytest.mark.parametrize("draft", margins.EVERY_PART)
def test_every_capture_margin_is_a_capture_the_draft_was_taught_to_fail_on(draft):
    taught = set(distill.wrong_captures(TRAINED[draft].capture))
    measured = {m.capture for m in margins.MARGINS if m.draft == draft and m.capture}
    assert measured and measured <= taught, measured - taught


def test_the_rope_base_margin_is_a_base_the_drafts_were_taught_to_fail_on():
    assert margins.ROPE_BASE_TIMES in TRAINING["wrong_rope_bases"]
    assert all(f > 0 and f != 1 for f in TRAINING["wrong_rope_bases"])


def test_rope_base_times_changes_only_the_base_and_restores_it():
    from vllm_kimi_eagle.fixtures.reference import ReferenceDraft
    from vllm_kimi_eagle.fixtures.variants import ROPE

    draft = ReferenceDraft(distill.trained_spec("eagle3"), dict(ROPE))
    attn = draft.layers[0].self_attn
    kept = dict(attn.rope)
    with distill.rope_base_times(draft, 10.0):
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
