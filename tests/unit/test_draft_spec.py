"""What a draft is, from its config (draft_spec.spec_from_config)."""

from __future__ import annotations

import pytest
from transformers import PretrainedConfig

from vllm_kimi_eagle.draft_spec import spec_from_config
from vllm_kimi_eagle.fixtures import variants
from vllm_kimi_eagle.draft_config import parse_draft_config


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
    if as_object:  # how vLLM holds it, read back as the worker's fallback reads it
        config.pop("rope_scaling")
        config = PretrainedConfig(**config).to_dict()
    assert spec_from_config(config).num_aux == 2
    assert parse_draft_config(config).written_ids == \
        ([1, 2], "eagle_config.eagle_aux_hidden_state_layer_ids")


def _variant_config(name: str) -> dict:
    return variants.draft_config(next(v for v in variants.DRAFT_VARIANTS if v.name == name))


def test_kimi_k3_fields_are_read_into_the_spec():
    from vllm_kimi_eagle.draft_spec import expected_tensors

    nope = spec_from_config(_variant_config("draft-k3-nope"))
    gate = spec_from_config(_variant_config("draft-k3-gate"))
    assert nope.nope and not nope.output_gate
    assert gate.nope and gate.output_gate
    assert expected_tensors(gate)["layers.0.self_attn.g_proj.weight"] == (4 * 128, 2 * 256)
    assert "layers.0.self_attn.g_proj.weight" not in expected_tensors(nope)


@pytest.mark.parametrize("flag, tensor", [
    ("use_input_layernorm_in_first_layer", "layers.0.hidden_norm.weight"),
    ("use_last_layernorm", "norm.weight"),
])
def test_eagle_config_norm_flags_drop_their_norm(flag, tensor):
    from vllm_kimi_eagle.draft_spec import expected_tensors

    config = variants.draft_config(variants.DRAFT_VARIANTS[0])
    assert tensor in expected_tensors(spec_from_config(config))
    config["eagle_config"] = dict(config["eagle_config"], **{flag: False})
    assert tensor not in expected_tensors(spec_from_config(config))


@pytest.mark.parametrize("change, words", [
    ({"eagle_config": {"use_mtp_layernorm": True}}, "eagle_config.use_mtp_layernorm is True"),
    ({"hidden_act": "situ"}, "hidden_act is 'situ'"),
])
def test_fields_the_plugin_does_not_implement_are_refused_by_name(change, words):
    from vllm_kimi_eagle.draft_spec import DraftConfigError

    config = variants.draft_config(variants.DRAFT_VARIANTS[0])
    if "eagle_config" in change:
        config["eagle_config"] = dict(config["eagle_config"], **change["eagle_config"])
    else:
        config.update(change)
    with pytest.raises(DraftConfigError, match=words):
        spec_from_config(config, source="draft/config.json")


def test_a_llama_draft_is_grouped_query_attention():
    from vllm_kimi_eagle.draft_spec import expected_tensors, linear_weights

    spec = spec_from_config(_variant_config(variants.LLAMA_DRAFT))
    assert (spec.attention, spec.num_kv_heads, spec.head_dim) == ("gqa", 2, 64)
    tensors = expected_tensors(spec)
    assert tensors["layers.0.self_attn.k_proj.weight"] == (2 * 64, 2 * 256)
    assert "layers.0.self_attn.kv_b_proj.weight" not in tensors
    assert "layers.0.self_attn.v_proj.weight" in linear_weights(spec)


def test_positions_decision():
    from vllm_kimi_eagle.draft_positions import decide_positions

    base = variants.draft_config(variants.DRAFT_VARIANTS[0])
    assert not decide_positions(base, {}).nope
    k3 = _variant_config("draft-k3-nope")
    written = decide_positions(k3, {})
    assert written.nope and written.ambiguous and "AMBIGUOUS" in written.log_line()
    torchspec = decide_positions(dict(k3, _torchspec_version="0.3"), {})
    assert not torchspec.nope and "TorchSpec wrote it" in torchspec.reason
    assert not decide_positions(k3, {"VLLM_KIMI_EAGLE_DRAFT_NOPE": "off"}).nope
    assert decide_positions(base, {"VLLM_KIMI_EAGLE_DRAFT_NOPE": "on"}).nope
