"""The Kimi-cost target's layer map (fixtures/kimi_cost.py), without building it."""

from __future__ import annotations

import pytest

from vllm_kimi_eagle.fixtures import kimi_cost
from vllm_kimi_eagle.fixtures.variants import AUX_LAYER_IDS


def test_trained_layers_end_right_before_kimis_captured_ids():
    sources = kimi_cost.layer_sources()
    assert len(sources) == kimi_cost.KIMI_LAYERS == 61
    trained = [position for position, (_, identity) in enumerate(sources) if not identity]
    assert trained == list(kimi_cost.PLACEMENT)
    # The input of deep layer N is the output of the trained layer placed at N - 1: the
    # draft's trained ids (inputs of trained layers 2, 3, 5) land on Kimi's [2, 30, 58].
    deep = [kimi_cost.PLACEMENT[i - 1] + 1 for i in AUX_LAYER_IDS]
    assert deep == kimi_cost.KIMI_AUX_LAYER_IDS == [2, 30, 58]
    for n in deep:
        assert not sources[n - 1][1], f"layer {n - 1}, just before captured {n}, is an identity"
    # An identity copy of the trained layer before it; position 0 (dense) is trained.
    assert sources[0] == (0, False) and sources[2] == (1, True) and sources[31] == (3, True)
    assert sources[60] == (5, True)


def test_readings_one_layer_off_read_other_tensors():
    """An off-by-one reading must not read the same tensors as the right one: the input of
    N-1 or N+1 differs from the input of N when a trained layer lies between them."""
    sources = kimi_cost.layer_sources()

    def trained_before(n):  # trained layers whose output the input of layer n includes
        return sum(1 for position in range(n) if not sources[position][1])

    right = [trained_before(n) for n in kimi_cost.KIMI_AUX_LAYER_IDS]
    for shift in (-1, 1):
        shifted = [trained_before(n + shift) for n in kimi_cost.KIMI_AUX_LAYER_IDS]
        assert shifted != right, shift


@pytest.mark.parametrize("placement", [(1, 2, 3), (0, 5, 5), (0, 3, 2), (0, 61)])
def test_a_bad_placement_is_refused(placement):
    with pytest.raises(ValueError, match="must rise from 0"):
        kimi_cost.layer_sources(61, placement)
