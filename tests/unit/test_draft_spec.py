"""What a draft is, from its config (draft_spec.spec_from_config)."""

from __future__ import annotations

import pytest
from transformers import PretrainedConfig

from tests.records import decide_positions, spec_from_config
from vllm_kimi_eagle.draft.draft_config import parse_draft_config
from vllm_kimi_eagle.fixtures import variants


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
    from vllm_kimi_eagle.draft.draft_spec import expected_tensors

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
    from vllm_kimi_eagle.draft.draft_spec import expected_tensors

    config = variants.draft_config(variants.DRAFT_VARIANTS[0])
    assert tensor in expected_tensors(spec_from_config(config))
    config["eagle_config"] = dict(config["eagle_config"], **{flag: False})
    assert tensor not in expected_tensors(spec_from_config(config))


@pytest.mark.parametrize("change, words", [
    ({"eagle_config": {"use_mtp_layernorm": True}}, "'eagle_config.use_mtp_layernorm' is true"),
    ({"hidden_act": "situ"}, "hidden_act is 'situ'"),
])
def test_fields_the_plugin_does_not_implement_are_refused_by_name(change, words):
    from vllm_kimi_eagle.draft.draft_spec import DraftConfigError

    config = variants.draft_config(variants.DRAFT_VARIANTS[0])
    if "eagle_config" in change:
        config["eagle_config"] = dict(config["eagle_config"], **change["eagle_config"])
    else:
        config.update(change)
    with pytest.raises(DraftConfigError, match=words):
        spec_from_config(config, source="draft/config.json")


def test_a_llama_draft_is_grouped_query_attention():
    from vllm_kimi_eagle.draft.draft_spec import expected_tensors, linear_weights

    spec = spec_from_config(_variant_config(variants.LLAMA_DRAFT))
    assert (spec.attention, spec.num_kv_heads, spec.head_dim) == ("gqa", 2, 64)
    tensors = expected_tensors(spec)
    assert tensors["layers.0.self_attn.k_proj.weight"] == (2 * 64, 2 * 256)
    assert "layers.0.self_attn.kv_b_proj.weight" not in tensors
    assert "layers.0.self_attn.v_proj.weight" in linear_weights(spec)


def test_positions_decision():

    base = variants.draft_config(variants.DRAFT_VARIANTS[0])
    assert not decide_positions(base, {}).nope
    k3 = _variant_config("draft-k3-nope")
    written = decide_positions(k3, {})
    assert written.nope and written.ambiguous and "AMBIGUOUS" in written.log_line()
    torchspec = decide_positions(dict(k3, _torchspec_version="0.3"), {})
    assert not torchspec.nope and "TorchSpec wrote it" in torchspec.reason
    assert not decide_positions(k3, {"VLLM_KIMI_EAGLE_DRAFT_NOPE": "off"}).nope
    assert decide_positions(base, {"VLLM_KIMI_EAGLE_DRAFT_NOPE": "on"}).nope


# ---- what mutation testing found unchecked (benchmarks/mutation_scores.py) -------------
def _base(**changes) -> dict:
    config = variants.draft_config(variants.DRAFT_VARIANTS[0])
    for key, value in changes.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    return config


def test_defaults_where_the_config_is_silent():
    spec = spec_from_config(_base(target_hidden_size=None, draft_vocab_size=None,
                                  rms_norm_eps=None, max_position_embeddings=None,
                                  hidden_act=None))
    assert spec.target_hidden_size == spec.hidden_size == 256
    assert spec.draft_vocab_size == spec.vocab_size and not spec.pruned_vocab
    assert spec.rms_norm_eps == 1e-6 and spec.logit_scale == 1.0
    assert spec.max_position_embeddings == 8192
    assert (spec.fc_norm, spec.norm_output, spec.norm_before_residual) == (False, False, False)
    assert (spec.hidden_norm, spec.final_norm, spec.nope, spec.output_gate) == \
        (True, True, False, False)
    assert spec.attention == "mla" and spec.quantization is None


def test_what_the_config_says_is_what_the_spec_holds():
    # num_aux_hidden_states is read, not the ids' count (no ids written here; the record
    # refuses a count that differs from the ids, tests/unit/test_draft_config.py).
    unlisted = {k: v for k, v in _base()["eagle_config"].items()
                if k != "eagle_aux_hidden_state_layer_ids"}
    spec = spec_from_config(_base(eagle_config=unlisted, target_hidden_size=512,
                                  draft_vocab_size=100,
                                  rms_norm_eps=1e-5, logit_scale=0.5,
                                  max_position_embeddings=4096, use_aux_norm=True,
                                  norm_output=True, norm_before_residual=True,
                                  num_aux_hidden_states=2, mla_use_output_gate=True))
    assert (spec.target_hidden_size, spec.draft_vocab_size, spec.pruned_vocab) == (512, 100, True)
    assert (spec.rms_norm_eps, spec.logit_scale, spec.max_position_embeddings) == \
        (1e-5, 0.5, 4096)
    assert spec.fc_norm and spec.norm_output and spec.norm_before_residual
    assert spec.num_aux == 2 and spec.output_gate
    assert (spec.num_heads, spec.q_lora_rank, spec.kv_lora_rank, spec.qk_nope_head_dim,
            spec.qk_rope_head_dim, spec.v_head_dim, spec.intermediate_size) == \
        (4, 64, 512, 128, 64, 128, 512)


def test_the_number_of_captured_states_follows_the_ids():
    assert spec_from_config(_base()).num_aux == 3
    two = _base()
    two["eagle_config"] = dict(two["eagle_config"], eagle_aux_hidden_state_layer_ids=[2, 5])
    assert spec_from_config(two).num_aux == 2
    none = _base()
    none["eagle_config"] = {k: v for k, v in none["eagle_config"].items()
                            if k != "eagle_aux_hidden_state_layer_ids"}
    assert spec_from_config(none).num_aux == 3  # vLLM's default, three layers


@pytest.mark.parametrize("missing", ["hidden_size", "vocab_size", "num_attention_heads",
                                     "intermediate_size", "kv_lora_rank", "qk_nope_head_dim",
                                     "qk_rope_head_dim", "v_head_dim"])
def test_a_missing_required_field_is_named(missing):
    from vllm_kimi_eagle.draft.draft_spec import DraftConfigError

    with pytest.raises(DraftConfigError) as err:
        spec_from_config(_base(**{missing: None}), source="d/config.json")
    assert str(err.value) == (f"d/config.json: field {missing!r} is missing; an MLA EAGLE3 "
                              "draft config must set it (see the lightseekorg/kimi-k2.5-"
                              "eagle3-mla config.json).")


def test_an_unknown_architecture_is_named_with_the_known_ones():
    from vllm_kimi_eagle.draft.draft_spec import DraftConfigError

    with pytest.raises(DraftConfigError) as err:
        spec_from_config(_base(architectures=["FooForCausalLM"]), source="d/config.json")
    message = str(err.value)
    assert message.startswith("d/config.json: field 'architectures' is ['FooForCausalLM']: "
                              "'FooForCausalLM' is not an EAGLE3 draft architecture")
    assert "Eagle3DeepseekV2ForCausalLM" in message and "LlamaForCausalLMEagle3" in message
    for known in ("DeepseekV3ForCausalLM", "DeepseekV3ForCausalLMEagle3",
                  "Eagle3DeepseekV3ForCausalLM"):
        assert spec_from_config(_base(architectures=[known])).attention == "mla"
    assert spec_from_config(_base(architectures=None)).attention == "mla"


def test_without_q_lora_the_query_is_one_projection():
    from vllm_kimi_eagle.draft.draft_spec import expected_tensors, linear_weights

    spec = spec_from_config(_base(q_lora_rank=None))
    tensors = expected_tensors(spec)
    assert spec.q_lora_rank is None
    assert tensors["layers.0.self_attn.q_proj.weight"] == (4 * (128 + 64), 2 * 256)
    assert "layers.0.self_attn.q_a_proj.weight" not in tensors
    assert "layers.0.self_attn.q_proj.weight" in linear_weights(spec)
    assert "layers.0.self_attn.q_a_proj.weight" not in linear_weights(spec)


def test_every_tensor_of_the_base_draft_and_its_shape():
    from vllm_kimi_eagle.draft.draft_spec import expected_tensors

    tensors = expected_tensors(spec_from_config(_base(fc_norm=True)))
    attn = "layers.0.self_attn."
    assert tensors == {
        "embed_tokens.weight": (512, 256), "layers.0.input_layernorm.weight": (256,),
        "layers.0.hidden_norm.weight": (256,), "layers.0.post_attention_layernorm.weight": (256,),
        attn + "o_proj.weight": (256, 4 * 128), "layers.0.mlp.gate_proj.weight": (512, 256),
        "layers.0.mlp.up_proj.weight": (512, 256), "layers.0.mlp.down_proj.weight": (256, 512),
        "fc.weight": (256, 3 * 256), "norm.weight": (256,), "lm_head.weight": (512, 256),
        attn + "kv_a_proj_with_mqa.weight": (512 + 64, 512), attn + "kv_a_layernorm.weight": (512,),
        attn + "kv_b_proj.weight": (4 * (128 + 128), 512), attn + "q_a_proj.weight": (64, 512),
        attn + "q_a_layernorm.weight": (64,), attn + "q_b_proj.weight": (4 * (128 + 64), 64),
        "fc_norm.0.weight": (256,), "fc_norm.1.weight": (256,), "fc_norm.2.weight": (256,),
        "d2t": (512,),
    }


@pytest.mark.parametrize("name, canonical", [
    ("model.midlayer.self_attn.o_proj.weight", "layers.0.self_attn.o_proj.weight"),
    ("midlayer.hidden_norm.weight", "layers.0.hidden_norm.weight"),
    ("model.fc.weight", "fc.weight"),
    ("lm_head.weight", "lm_head.weight"),
    ("layers.0.mlp.up_proj.weight", "layers.0.mlp.up_proj.weight"),
])
def test_canonical_names(name, canonical):
    from vllm_kimi_eagle.draft.draft_spec import canonical_name

    assert canonical_name(name) == canonical


def test_expected_dtype_only_for_quantized_linears():
    from vllm_kimi_eagle.draft.draft_spec import expected_dtype
    from vllm_kimi_eagle.fixtures.quantized import SCHEMES

    plain = spec_from_config(_base())
    assert expected_dtype(plain, "fc.weight") is None
    fp8 = spec_from_config(_base(quantization_config=SCHEMES["fp8-block"]((64, 128))))
    assert expected_dtype(fp8, "fc.weight") == "F8_E4M3"
    assert expected_dtype(fp8, "lm_head.weight") is None
    assert expected_dtype(fp8, "layers.0.self_attn.q_proj.weight") is None  # not in this draft


# ---- each check at its edge -------------------------------------------------------------
@pytest.mark.parametrize("fc_norm, use_aux_norm, served", [
    (True, True, True), (False, False, False), (None, True, True), (False, None, False),
    (None, None, False), (True, False, None), (False, True, None),
])
def test_fc_norm_and_use_aux_norm_must_agree_where_both_are_written(fc_norm, use_aux_norm,
                                                                    served):
    from vllm_kimi_eagle.draft.draft_spec import DraftConfigError

    config = _base(fc_norm=fc_norm, use_aux_norm=use_aux_norm)
    if served is not None:
        assert spec_from_config(config).fc_norm is served
        return
    with pytest.raises(DraftConfigError) as err:
        spec_from_config(config, source="d/config.json")
    assert f"fc_norm is {str(fc_norm).lower()} and use_aux_norm is " \
           f"{str(use_aux_norm).lower()}: two answers" in str(err.value)


def test_eagle_config_use_mtp_layernorm_false_is_served():
    config = _base()
    config["eagle_config"] = dict(config["eagle_config"], use_mtp_layernorm=False)
    assert spec_from_config(config).attention == "mla"


def test_an_mla_rope_type_written_as_rope_type_is_named_so():
    from vllm_kimi_eagle.draft.draft_spec import DraftConfigError

    config = _base(rope_scaling=None, rope_parameters={"rope_type": "linear", "factor": 2.0})
    with pytest.raises(DraftConfigError, match="field 'rope_parameters.rope_type' is 'linear'"):
        spec_from_config(config)


def test_a_llama_draft_serves_any_rope_type_vllm_builds():
    """vLLM's Llama draft builds each rope type as written: only MLA's are refused."""
    config = _variant_config(variants.LLAMA_DRAFT)
    config["rope_parameters"] = {"rope_type": "linear", "factor": 2.0}
    assert spec_from_config(config).attention == "gqa"


def test_a_llama_draft_without_head_dim_or_kv_heads_takes_its_attentions():
    config = {k: v for k, v in _variant_config(variants.LLAMA_DRAFT).items()
              if k not in ("head_dim", "num_key_value_heads")}
    spec = spec_from_config(config)
    assert (spec.head_dim, spec.num_kv_heads, spec.qk_rope_head_dim, spec.v_head_dim) == \
        (256 // 4, 4, 64, 64)
    assert (spec.q_lora_rank, spec.kv_lora_rank, spec.qk_nope_head_dim) == (None, 0, 0)


def test_an_output_gate_is_a_linear_layer():
    from vllm_kimi_eagle.draft.draft_spec import linear_weights

    gate = spec_from_config(_variant_config("draft-k3-gate"))
    assert "layers.0.self_attn.g_proj.weight" in linear_weights(gate)
    assert "layers.0.self_attn.g_proj.weight" not in linear_weights(spec_from_config(_base()))


def test_only_the_leading_prefixes_are_renamed():
    from vllm_kimi_eagle.draft.draft_spec import canonical_name

    assert canonical_name("lm_head.model.weight") == "lm_head.model.weight"
    assert canonical_name("fc.midlayer.weight") == "fc.midlayer.weight"


def test_the_eagle_config_norms_are_there_unless_the_config_says_otherwise():
    config = _base()
    config["eagle_config"] = {k: v for k, v in config["eagle_config"].items()
                              if k not in ("use_input_layernorm_in_first_layer",
                                           "use_last_layernorm")}
    spec = spec_from_config(config)
    assert spec.hidden_norm is True and spec.final_norm is True


def test_every_tensor_of_the_llama_draft_and_its_shape():
    from vllm_kimi_eagle.draft.draft_spec import expected_tensors

    spec = spec_from_config(_variant_config(variants.LLAMA_DRAFT))
    attn = "layers.0.self_attn."
    assert {k: v for k, v in expected_tensors(spec).items() if k.startswith(attn)} == {
        attn + "q_proj.weight": (4 * 64, 2 * 256), attn + "k_proj.weight": (2 * 64, 2 * 256),
        attn + "v_proj.weight": (2 * 64, 2 * 256), attn + "o_proj.weight": (256, 4 * 64)}
    assert type(spec.head_dim) is int


def test_the_linear_weights_of_the_base_draft():
    from vllm_kimi_eagle.draft.draft_spec import linear_weights

    layer = "layers.0."
    assert linear_weights(spec_from_config(_base())) == ["fc.weight"] + [
        layer + name for name in (
            "self_attn.q_a_proj.weight", "self_attn.q_b_proj.weight",
            "self_attn.kv_a_proj_with_mqa.weight", "self_attn.kv_b_proj.weight",
            "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
            "mlp.down_proj.weight")]
