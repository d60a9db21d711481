"""What a draft is, from its config (draft_spec.spec_from_config)."""

from __future__ import annotations

import pytest
from transformers import PretrainedConfig

from vllm_kimi_eagle.draft_spec import spec_from_config
from vllm_kimi_eagle.fixtures import variants
from vllm_kimi_eagle.layer_ids import written_ids


def _empty_top_level_nested_ids(ids: list[int]) -> dict:
    """The tiny draft's config.json with ``[]`` at the top level and ``ids`` nested."""
    config = variants.draft_config(variants.DRAFT_VARIANTS[0])
    config["eagle_aux_hidden_state_layer_ids"] = []
    config["eagle_config"] = dict(config["eagle_config"], eagle_aux_hidden_state_layer_ids=ids)
    return config


@pytest.mark.parametrize("as_object", [False, True], ids=["config.json", "PretrainedConfig"])
def test_empty_top_level_ids_count_the_nested_ones(as_object):
    """An empty top-level list is absent, as vLLM's runners treat it: the nested ids give
    the number of captured states (2 here, not the default 3) and the ids themselves."""
    config = _empty_top_level_nested_ids([1, 2])
    if as_object:  # how vLLM holds it (the rope fields do not matter here)
        config.pop("rope_scaling")
        config = PretrainedConfig(**config)
    assert spec_from_config(config).num_aux == 2
    assert written_ids(config) == ([1, 2], "eagle_config.eagle_aux_hidden_state_layer_ids")
