"""The draft's config.json record (vllm_kimi_eagle/draft/draft_config.py): what it reads, where
it reads it from, and the words of each refusal. Generated malformed configs:
tests/unit/test_draft_config_properties.py."""

from __future__ import annotations

import json

import pytest

from vllm_kimi_eagle.draft.draft_config import (
    CONVENTION_KEY,
    IDS_KEY,
    NESTED_IDS,
    TOP_IDS,
    DraftConfigError,
    as_record,
    load_config_json,
    parse_draft_config,
    read_draft_config,
)

SOURCE = "/d/config.json"


def parse(**fields):
    return parse_draft_config(fields, SOURCE)


def refusal(**fields) -> str:
    with pytest.raises(DraftConfigError) as err:
        parse(**fields)
    message = str(err.value)
    assert message.startswith(SOURCE + ": ")
    return message


@pytest.mark.parametrize("fields, written", [
    ({IDS_KEY: [30, 2, 58]}, ([30, 2, 58], TOP_IDS)),
    ({"eagle_config": {IDS_KEY: [1, 29, 57]}}, ([1, 29, 57], NESTED_IDS)),
    ({IDS_KEY: [], "eagle_config": {IDS_KEY: [1, 2]}}, ([1, 2], NESTED_IDS)),
    ({IDS_KEY: [4, 2], "eagle_config": {IDS_KEY: [2, 4]}}, ([4, 2], TOP_IDS)),
    ({"eagle_config": {}}, (None, "none")),
    ({}, (None, "none")),
], ids=["top", "nested", "empty-top", "both", "empty-nested", "absent"])
def test_where_the_ids_are_read(fields, written):
    record = parse(**fields)
    assert record.written_ids == written
    assert record.id_lists == [(where, sorted(ids)) for where, ids in
                               ((TOP_IDS, fields.get(IDS_KEY)),
                                (NESTED_IDS, fields.get("eagle_config", {}).get(IDS_KEY)))
                               if ids]


@pytest.mark.parametrize("fields, convention", [
    ({CONVENTION_KEY: "Output_Of_Layer"}, ("output-of", f"config.json {CONVENTION_KEY}")),
    ({"eagle_config": {CONVENTION_KEY: "input-of"}},
     ("input-of", f"config.json eagle_config.{CONVENTION_KEY}")),
    ({CONVENTION_KEY: "auto", "eagle_config": {CONVENTION_KEY: "auto"}}, (None, "")),
    ({CONVENTION_KEY: " input_of "}, ("input-of", f"config.json {CONVENTION_KEY}")),
    ({}, (None, "")),
])
def test_the_written_convention_in_its_one_spelling(fields, convention):
    assert parse(**fields).written_convention == convention


def test_two_things_written_in_two_places_are_refused_naming_both():
    ids = refusal(**{IDS_KEY: [1, 2, 4], "eagle_config": {IDS_KEY: [2, 3, 5]}})
    assert f"{IDS_KEY} is [1, 2, 4] and {NESTED_IDS} is [2, 3, 5]" in ids
    said = refusal(**{CONVENTION_KEY: "input-of",
                      "eagle_config": {CONVENTION_KEY: "output_of"}})
    assert f"{CONVENTION_KEY} is 'input-of' and eagle_config.{CONVENTION_KEY} is " \
           "'output-of'" in said
    # The same things written twice are one reading.
    parse(**{CONVENTION_KEY: "input-of", "eagle_config": {CONVENTION_KEY: "input_of"}})


@pytest.mark.parametrize("fields, rope_type, theta", [
    ({"rope_theta": 5e4, "rope_scaling": {"type": "yarn", "factor": 32.0}}, "yarn", 5e4),
    ({"rope_parameters": {"rope_type": "default", "rope_theta": 1e4}}, "default", 1e4),
    ({"rope_parameters": {"rope_type": "yarn", "factor": 2}, "rope_theta": 5e4}, "yarn", 5e4),
    ({"rope_theta": 20000}, "default", 20000),
    ({}, "default", 10000),
])
def test_the_rope_base_and_type(fields, rope_type, theta):
    """What transformers serves (tests/unit/test_draft_rope.py compares with it)."""
    record = parse(**fields)
    assert record.rope.kind == rope_type
    assert record.config_rope_theta == theta


@pytest.mark.parametrize("rope, words", [
    ({"rope_type": "sideways"}, "rope type 'sideways' is not one of default"),
    ({"type": "yarn"}, "rope type 'yarn' needs a positive 'factor'"),
    ({"rope_type": "linear", "factor": 0}, "field 'rope_scaling.factor' is 0; expected a value "
                                           "greater than 0"),
    ({"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 4.5},
     "field 'rope_scaling.original_max_position_embeddings' is 4.5; expected an integer"),
])
def test_rope_scaling_is_refused_by_name(rope, words):
    assert words in refusal(rope_scaling=rope)


def test_a_default_rope_needs_no_factor():
    assert parse(rope_scaling={"rope_type": "default"}).rope.kind == "default"
    assert parse(rope_scaling={}).rope.kind == "default"


@pytest.mark.parametrize("key", ["ids", "convention"])
def test_only_the_real_keys_are_read_as_layer_ids(key):
    """A key spelled like the record's field name is an unknown key, not the ids."""
    value = [2, 30, 58] if key == "ids" else "output-of"
    record = parse(**{key: value, "eagle_config": {key: value}})
    assert record.written_ids == (None, "none")
    assert record.written_convention == (None, "")


@pytest.mark.parametrize("fields, words", [
    ({"vocab_size": 1000, "draft_vocab_size": 1001},
     "draft_vocab_size is 1001 and vocab_size is 1000: a draft vocabulary is the target's"),
    ({IDS_KEY: [2, 30, 58], "num_aux_hidden_states": 2},
     f"num_aux_hidden_states is 2 and {IDS_KEY} lists 3 layer(s) [2, 30, 58]"),
    ({"eagle_config": {IDS_KEY: [1, 29]}, "num_aux_hidden_states": 3},
     f"num_aux_hidden_states is 3 and {NESTED_IDS} lists 2 layer(s) [1, 29]"),
])
def test_sizes_that_disagree_are_refused_in_the_record(fields, words):
    assert words in refusal(**fields)


def test_sizes_at_their_bounds_are_read():
    assert parse(vocab_size=1000, draft_vocab_size=1000).draft_vocab_size == 1000
    assert parse(**{IDS_KEY: [2, 30, 58], "num_aux_hidden_states": 3}).num_aux_hidden_states == 3
    assert parse(num_aux_hidden_states=4).num_aux_hidden_states == 4  # no ids: vLLM's default


@pytest.mark.parametrize("quantization_config", [
    {"quant_method": "compressed-tensors", "config_groups": {"group_0": {
        "weights": {"type": "float", "num_bits": 4, "strategy": "tensor_group",
                    "group_size": 16, "dynamic": False},
        "input_activations": {"type": "float", "num_bits": 4, "strategy": "tensor_group",
                              "group_size": 16, "dynamic": "local"}}}},
    {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16},
    {"quant_method": "fp8", "weight_block_size": [128]},
])
def test_a_quantization_config_is_the_exporters_and_vllms_to_judge(quantization_config):
    """The record reads any object there; quantization.py reads what the class needs."""
    assert parse(quantization_config=quantization_config).quantization_config == \
        quantization_config


@pytest.mark.parametrize("fields, markers", [
    ({"eagle_config": {"parallel_draft_step": 1}}, (True, False, False)),
    ({"eagle_config": {"next_layer_regular": None}}, (True, False, False)),
    ({"_torchspec_version": "0.2"}, (False, True, False)),
    ({"_torchspec_version": None}, (False, False, False)),
    ({"architectures": ["DeepseekV3ForCausalLMEagle3"]}, (False, False, True)),
    ({"architectures": ["Eagle3DeepseekV2ForCausalLM"]}, (False, False, False)),
])
def test_training_tool_fingerprints(fields, markers):
    record = parse(**fields)
    assert (record.nested.modelopt_marker, record.torchspec_marker,
            record.specforge_marker) == markers


@pytest.mark.parametrize("fields, words", [
    ({"hidden_size": True}, "field 'hidden_size' is true; expected an integer"),
    ({"hidden_size": 0}, "field 'hidden_size' is 0; expected a value greater than 0"),
    ({"qk_nope_head_dim": -1}, "field 'qk_nope_head_dim' is -1; expected a value of at least 0"),
    ({"rms_norm_eps": "1e-6"}, "field 'rms_norm_eps' is \"1e-6\"; expected a number"),
    ({"logit_scale": float("inf")}, "field 'logit_scale' is Infinity; expected a finite number"),
    ({"fc_norm": 1}, "field 'fc_norm' is 1; expected true or false"),
    ({"hidden_act": 7}, "field 'hidden_act' is 7; expected a string"),
    ({"architectures": "Eagle3DeepseekV2ForCausalLM"},
     "field 'architectures' is \"Eagle3DeepseekV2ForCausalLM\"; expected a list"),
    ({"quantization_config": ["fp8"]}, "field 'quantization_config' is [\"fp8\"]; expected "
                                       "an object"),
    ({"eagle_config": {IDS_KEY: [2, 2]}},
     f"field 'eagle_config.{IDS_KEY}' is [2, 2]: id(s) [2] appear more than once"),
    ({CONVENTION_KEY: "middle"},
     f"field '{CONVENTION_KEY}' is \"middle\": expected one of 'output-of', 'input-of', "
     "'auto'"),
    ({"eagle_config": {"use_last_layernorm": "yes"}},
     "field 'eagle_config.use_last_layernorm' is \"yes\"; expected true or false"),
])
def test_each_refusal_names_the_field_the_value_and_what_was_expected(fields, words):
    message = refusal(**fields)
    assert words in message, message
    assert message.endswith("Fix the field in config.json, or export the draft again.")


def test_every_malformed_field_is_named_in_one_error():
    message = refusal(hidden_size="wide", kv_lora_rank="512", mla_use_nope="sometimes")
    assert message.count("; expected") == 3
    assert message.index("'hidden_size'") < message.index("'kv_lora_rank'")


def test_a_long_value_is_cut_short():
    message = refusal(hidden_act=["a" * 200])
    assert '["aaaa' in message and "..." in message and "a" * 100 not in message


@pytest.mark.parametrize("raw, words", [
    ([1, 2], "holds list [1, 2], not a JSON object"),
    ("text", 'holds str "text"'),
    (None, "holds NoneType null"),
])
def test_a_config_json_that_is_no_object(raw, words):
    with pytest.raises(DraftConfigError, match="^" + SOURCE) as err:
        parse_draft_config(raw, SOURCE)
    assert words in str(err.value)


def test_files_are_read_once_with_their_path_in_every_error(tmp_path):
    folder = tmp_path / "draft"
    folder.mkdir()
    with pytest.raises(DraftConfigError, match="config.json: not found"):
        load_config_json(str(folder))
    (folder / "config.json").write_text('{"hidden_size": 256, "vocab')
    with pytest.raises(DraftConfigError, match="not valid JSON .*truncated or corrupt"):
        read_draft_config(str(folder))
    (folder / "config.json").write_text(json.dumps({"hidden_size": 256}))
    record = read_draft_config(str(folder))
    assert record.hidden_size == 256 and record.source == str(folder / "config.json")
    assert read_draft_config(str(folder / "config.json")).source == record.source
    assert as_record(record) is record
    assert as_record({"hidden_size": 8}, "x.json").source == "x.json"


# ---- each check's whole message (what mutation testing found unchecked) ------------------
END = ". Fix the field in config.json, or export the draft again."


@pytest.mark.parametrize("fields, message", [
    ({"eagle_config": {IDS_KEY: [3, 2, 3, 2]}},
     f"field 'eagle_config.{IDS_KEY}' is [3, 2, 3, 2]: id(s) [2, 3] appear more than once; "
     "each id names one captured target layer and the draft's fc takes one state per id"),
    ({IDS_KEY: [1, 2], "eagle_config": {IDS_KEY: [1, 3]}},
     f"{IDS_KEY} is [1, 2] and {NESTED_IDS} is [1, 3]: two different id lists (vLLM reads "
     "the top-level one, tools may read the other). Keep one list, or make both the same"),
    ({CONVENTION_KEY: "auto", "eagle_config": {CONVENTION_KEY: "input-of"}},
     f"{CONVENTION_KEY} is 'auto' and eagle_config.{CONVENTION_KEY} is 'input-of': two "
     "different conventions. Keep one"),
    ({"vocab_size": 8, "draft_vocab_size": 9},
     "draft_vocab_size is 9 and vocab_size is 8: a draft vocabulary is the target's or a "
     "part of it (d2t maps each draft id to a target id). Set draft_vocab_size to the "
     "draft's lm_head rows, at most vocab_size"),
    ({IDS_KEY: [2, 5], "num_aux_hidden_states": 3},
     f"num_aux_hidden_states is 3 and {IDS_KEY} lists 2 layer(s) [2, 5]: vLLM captures one "
     "state per id and the draft's fc takes num_aux_hidden_states of them. Make them agree "
     "(fc.weight's input size is num_aux_hidden_states x the target's hidden size)"),
    ({"rope_parameters": {"type": "sideways"}},
     "field 'rope_parameters' is {\"type\": \"sideways\"}: rope type 'sideways' is not one "
     "of default, linear, dynamic, ntk, yarn, deepseek_yarn, llama3, longrope"),
    ({"architectures": ["A", 7]}, "field 'architectures[1]' is 7; expected a string"),
    ({"hidden_size": 0, "rope_theta": -1},
     "field 'hidden_size' is 0; expected a value greater than 0; field 'rope_theta' is -1; "
     "expected a value greater than 0.0"),
], ids=["repeated", "two-id-lists", "two-conventions", "draft-vocab", "aux-count",
        "rope-type", "list-item", "two-fields"])
def test_each_refusal_whole(fields, message):
    assert refusal(**fields) == f"{SOURCE}: {message}{END}"


def test_a_value_no_json_holds_is_shown_as_python_writes_it():
    with pytest.raises(DraftConfigError) as err:
        parse_draft_config((1, 2), SOURCE)
    assert str(err.value) == (f"{SOURCE}: holds tuple (1, 2), not a JSON object of config "
                              "fields; download or export the draft's config.json again.")


def test_a_value_of_80_characters_is_shown_whole_and_one_more_is_cut():
    at = "a" * 78  # 80 characters with its quotes
    assert f'is "{at}"; expected' in refusal(hidden_size=at)
    past = "a" * 79
    assert f'is "{past[:76]}...; expected' in refusal(hidden_size=past)


def test_the_file_is_config_json_where_no_path_is_given():
    for parse_it in (parse_draft_config, as_record):
        with pytest.raises(DraftConfigError, match=r"^config\.json: field 'hidden_size'"):
            parse_it({"hidden_size": 0})


def test_without_a_quantization_key_the_record_names_quantization_config():
    record = parse()
    assert (record.quantization_config, record.quantization_from) == \
        (None, "quantization_config")


def test_a_folder_is_read_through_its_config_json(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 8}))
    assert load_config_json(str(tmp_path)) == {"hidden_size": 8}
    missing = tmp_path / "empty"
    missing.mkdir()
    with pytest.raises(DraftConfigError) as err:
        load_config_json(str(missing))
    assert str(err.value) == (f"{missing / 'config.json'}: not found; a draft folder holds "
                              "its config.json next to its weights.")


@pytest.mark.parametrize("fields, words", [
    ({}, "default (no rope block written), base 10000 (not written: transformers' default)"),
    ({"rope_scaling": {"type": "yarn", "factor": 4}, "max_position_embeddings": 4096,
      "rope_theta": 5e4},
     "yarn (rope_scaling), factor 4, original_max_position_embeddings 4096 (not written: "
     "transformers fills it from max_position_embeddings), base 50000 (rope_theta)"),
])
def test_the_served_rope_in_words(fields, words):
    assert parse(**fields).rope.words() == words


def test_two_blocks_that_leave_the_same_value_to_transformers_agree():
    """Both yarn blocks without original_max_position_embeddings get it filled alike."""
    yarn = {"rope_type": "yarn", "factor": 4.0}
    record = parse(rope_scaling=yarn, rope_parameters=yarn, max_position_embeddings=4096)
    assert record.rope_blocks == ("rope_scaling", "rope_parameters")
    assert record.rope_disagreements == []


def test_the_plugins_own_attribute_is_never_read_from_a_file():
    """The hook's decisions travel on vLLM's config object under this name; a config.json
    that carries it would stand in for them."""
    from vllm_kimi_eagle.draft.draft_config import SERVED_KEY

    message = str(pytest.raises(DraftConfigError, parse, **{SERVED_KEY: {}}).value)
    assert message.startswith(f"{SOURCE}: field {SERVED_KEY!r} is there") \
        and "Remove it from config.json" in message
    # An EAGLE wrapper's nested draft config carries it too: vLLM copies it onto the
    # wrapper, where the draft class would find it.
    nested = pytest.raises(DraftConfigError, parse, model_type="eagle",
                           model={"model_type": "kimi_k2", SERVED_KEY: {}}).value
    assert f"field {SERVED_KEY!r} is there" in str(nested)


def test_the_record_travels_as_json_and_comes_back_as_it_was():
    """vLLM's draft config carries the record to the engine's worker as JSON; what the
    record set from config.json's raw keys (fingerprints, rope blocks, where the
    quantization was read) comes back with it, and nothing is derived again."""
    from vllm_kimi_eagle.draft.draft_config import record_from_json, record_json

    record = parse(**{"_torchspec_version": "0.2", "rope_theta": 50000,
                      "rope_parameters": {"rope_type": "default", "rope_theta": 50000.0},
                      "compression_config": {"quant_method": "compressed-tensors"},
                      "eagle_config": {"parallel_draft_step": 1, IDS_KEY: [2, 30, 58]},
                      CONVENTION_KEY: "output_of", "hidden_size": 256})
    back = record_from_json(record_json(record))
    assert back == record and back.source == SOURCE
    assert (back.torchspec_marker, back.nested.modelopt_marker, back.rope_blocks,
            back.quantization_from, back.written_ids, back.written_convention) == \
        (True, True, ("rope_parameters",), "compression_config", ([2, 30, 58], NESTED_IDS),
         ("output-of", f"config.json {CONVENTION_KEY}"))
    # Derived again from the JSON, the fingerprints would be lost: they are not keys of it.
    assert parse_draft_config(json.loads(record_json(record))).torchspec_marker is False
