"""Layer-capture convention handling: the pure decision.

Through vLLM's create_engine_config(): tests/integration/test_layer_ids_config.py; served
by real engines: tests/e2e/test_layer_ids_e2e.py.
"""

from __future__ import annotations

import pytest

from tests.records import resolve_layer_ids
from vllm_kimi_eagle.draft.draft_config import DraftConfigError
from vllm_kimi_eagle.draft.layer_ids import CONVENTION_ENV, CONVENTION_KEY, LayerIdError


KIMI_LAYERS = 61


def nested(ids, **extra):
    return {"eagle_config": {"eagle_aux_hidden_state_layer_ids": ids}, **extra}


@pytest.mark.parametrize(
    "config, convention, capture",
    [
        (nested([1, 29, 57]), "output-of", [2, 30, 58]),
        (nested([2, 30, 58]), "input-of", [2, 30, 58]),
        ({"eagle_aux_hidden_state_layer_ids": [1, 29, 57]}, "output-of", [2, 30, 58]),
        ({"eagle_aux_hidden_state_layer_ids": [2, 30, 58]}, "input-of", [2, 30, 58]),
        ({}, "vllm-default", [2, 30, 58]),
    ],
    ids=["nested-output-of", "nested-input-of", "top-output-of", "top-input-of", "absent"],
)
def test_conventions_and_sources(config, convention, capture):
    decision = resolve_layer_ids(config, KIMI_LAYERS, environ={})
    assert decision.convention == convention
    assert decision.capture_ids == capture


def test_top_level_ids_are_read_first_like_vllm_reads_them():
    config = {"eagle_aux_hidden_state_layer_ids": [2, 30, 58], **nested([58, 30, 2])}
    decision = resolve_layer_ids(config, KIMI_LAYERS, environ={})
    assert decision.source == "eagle_aux_hidden_state_layer_ids"
    assert decision.capture_ids == [2, 30, 58]


def test_two_different_id_lists_are_refused_naming_both():
    """vLLM's V1 runner reads the top level then eagle_config, V2 the top level only, and
    tools the nested list: two different lists have no one right reading."""
    config = {"eagle_aux_hidden_state_layer_ids": [2, 30, 58], **nested([1, 29, 57])}
    with pytest.raises(DraftConfigError) as err:
        resolve_layer_ids(config, KIMI_LAYERS, environ={})
    for words in ("eagle_aux_hidden_state_layer_ids is [2, 30, 58]",
                  "eagle_config.eagle_aux_hidden_state_layer_ids is [1, 29, 57]", "Keep one"):
        assert words in str(err.value)


def test_explicit_setting_beats_the_heuristic():
    # Written input-of ids that happen to start at 1: the heuristic would shift them.
    config = nested([1, 30, 58])
    assert resolve_layer_ids(config, KIMI_LAYERS, environ={}).capture_ids == [2, 31, 59]
    told = dict(config, **{CONVENTION_KEY: "input-of"})
    decision = resolve_layer_ids(told, KIMI_LAYERS, environ={})
    assert decision.capture_ids == [1, 30, 58] and "config.json" in decision.reason
    # The environment beats the config file.
    decision = resolve_layer_ids(told, KIMI_LAYERS, environ={CONVENTION_ENV: "output-of"})
    assert decision.capture_ids == [2, 31, 59] and CONVENTION_ENV in decision.reason
    # Written output-of ids that do not start at 1 get shifted only when told.
    config = nested([3, 29, 57], **{CONVENTION_KEY: "output_of_layer"})
    assert resolve_layer_ids(config, KIMI_LAYERS, environ={}).capture_ids == [4, 30, 58]


def test_log_line_says_what_was_decided():
    line = resolve_layer_ids(nested([1, 29, 57]), KIMI_LAYERS, environ={}).log_line()
    assert "[1, 29, 57]" in line and "output-of" in line and "[2, 30, 58]" in line


@pytest.mark.parametrize(
    "config, kwargs, words",
    [
        (nested([2, 30, 70]), {}, ["61 layers", "[70]", CONVENTION_ENV]),
        (nested([2, 30, 61]), {"can_capture_after_last": False}, ["0.25.1", "[61]"]),
        (nested([2, 30, 58]), {"fc_in_features": 4 * 7168, "target_hidden_size": 7168},
         ["28672", "4 captured states", "3 layer ids"]),
        ({}, {"fc_in_features": 2 * 7168, "target_hidden_size": 7168},
         ["2 captured states", "vLLM default"]),
    ],
    ids=["out-of-range", "after-last-too-old", "fc-width", "fc-width-default"],
)
def test_validation_errors_name_ids_layers_and_fix(config, kwargs, words):
    with pytest.raises(LayerIdError) as err:
        resolve_layer_ids(config, KIMI_LAYERS, environ={}, **kwargs)
    for word in words:
        assert word in str(err.value), str(err.value)


@pytest.mark.parametrize("config, words", [
    (nested([2, 2, 58]), ["more than once", "[2, 2, 58]"]),
    (nested([2, 30, 58], **{CONVENTION_KEY: "middle"}), ['"middle"', "'output-of'"]),
], ids=["duplicate", "bad-convention"])
def test_malformed_ids_are_refused_when_the_config_is_parsed(config, words):
    with pytest.raises(DraftConfigError) as err:
        resolve_layer_ids(config, KIMI_LAYERS, environ={})
    for word in words:
        assert word in str(err.value), str(err.value)


def test_id_equal_to_layer_count_is_fine_where_vllm_captures_after_last():
    decision = resolve_layer_ids(nested([2, 30, 61]), KIMI_LAYERS, environ={})
    assert decision.capture_ids == [2, 30, 61]


# ---- ids as each training tool meant them (pure decision) -------------------
MODELOPT = {"next_layer_regular": True, "parallel_draft_step": 1}  # its eagle_config keys
TORCHSPEC = {"_torchspec_version": "0.1.0", "model_type": "kimi_k2"}


@pytest.mark.parametrize(
    "config, prefix, tool, convention, capture",
    [
        # Model-Optimizer: output-of whatever the first id; a set in layer order.
        ({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30, 58], **MODELOPT}},
         None, "Model-Optimizer", "output-of", [3, 31, 59]),
        ({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [57, 1, 29], **MODELOPT}},
         None, "Model-Optimizer", "output-of", [2, 30, 58]),
        # SpecForge's MLA draft class name.
        ({"architectures": ["DeepseekV3ForCausalLMEagle3"], **nested([3, 29, 57])},
         None, "SpecForge", "output-of", [4, 30, 58]),
        # TorchSpec: native (midlayer.) keeps the trained ids; --vllm adds 1 for kimi_k2.
        ({**TORCHSPEC, **nested([3, 29, 57])}, "midlayer.", "TorchSpec (native export)",
         "output-of", [4, 30, 58]),
        ({**TORCHSPEC, **nested([4, 30, 58])}, "layers.0.",
         "TorchSpec (--vllm export, kimi_k2)", "input-of", [4, 30, 58]),
        ({**TORCHSPEC, "model_type": "deepseek_v3", **nested([3, 29, 57])}, "layers.0.",
         "TorchSpec (--vllm export)", "output-of", [4, 30, 58]),
    ],
    ids=["modelopt", "modelopt-unordered", "specforge", "torchspec-native",
         "torchspec-vllm-kimi", "torchspec-vllm-deepseek"],
)
def test_training_tool_fingerprint_decides(config, prefix, tool, convention, capture):
    decision = resolve_layer_ids(config, KIMI_LAYERS, layer_prefix=prefix, environ={})
    assert (decision.rule, decision.tool) == ("tool", tool)
    assert (decision.convention, decision.capture_ids) == (convention, capture)
    assert not decision.ambiguous
    assert tool in decision.log_line()


def test_kimi_default_through_a_python_set_is_read_in_layer_order():
    ids = list({1, 63 // 2 - 1, 63 - 4})  # Model-Optimizer's default for 63 layers
    assert ids != sorted(ids)  # what Python returns here: [1, 59, 30]
    config = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": ids, **MODELOPT}}
    decision = resolve_layer_ids(config, 63, environ={})
    assert decision.capture_ids == [2, 31, 60] and decision.written == [1, 30, 59]
    assert decision.reordered_from == ids and "(a set: [1, 30, 59])" in decision.log_line()


def test_explicit_setting_beats_a_tool_fingerprint():
    config = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30, 58], **MODELOPT}}
    decision = resolve_layer_ids(config, KIMI_LAYERS, environ={CONVENTION_ENV: "input-of"})
    assert (decision.rule, decision.capture_ids) == ("explicit", [2, 30, 58])


@pytest.mark.parametrize(
    "config, capture, other, words",
    [
        # No fingerprint, ids that are neither default: sglang's reading, flagged.
        (nested([3, 29, 57]), [3, 29, 57], [4, 30, 58], []),
        (nested([1, 20, 40]), [2, 21, 41], [1, 20, 40], []),
        # TorchSpec config, tensor names unknown: its two exports disagree.
        ({**TORCHSPEC, **nested([3, 29, 57])}, [3, 29, 57], [4, 30, 58],
         ["TorchSpec", "midlayer. or layers.0."]),
        # Model-Optimizer never writes top-level ids: somebody else put these there.
        ({"eagle_aux_hidden_state_layer_ids": [3, 29, 57],
          "eagle_config": {"eagle_aux_hidden_state_layer_ids": [3, 29, 57], **MODELOPT}},
         [3, 29, 57], [4, 30, 58], ["never writes ids at the top-level"]),
    ],
    ids=["no-fingerprint-input-of", "no-fingerprint-output-of", "torchspec-layout-unknown",
         "modelopt-top-level"],
)
def test_two_plausible_readings_are_ambiguous(config, capture, other, words):
    decision = resolve_layer_ids(config, KIMI_LAYERS, environ={})
    assert decision.rule == "sglang-heuristic"
    assert decision.capture_ids == capture and decision.ambiguous_with == other
    line = decision.log_line()
    assert "AMBIGUOUS" in line and str(other) in line and CONVENTION_KEY in line
    for word in words:
        assert word in decision.reason, decision.reason


@pytest.mark.parametrize(
    "ids, capture", [([2, 30, 58], [2, 30, 58]), ([1, 29, 57], [2, 30, 58])],
    ids=["lightseekorg-published", "tools-default"],
)
def test_published_and_default_ids_are_not_ambiguous(ids, capture):
    """kimi-k2.5-eagle3-mla's nested [2, 30, 58] stays input-of, as sglang reads it."""
    decision = resolve_layer_ids(nested(ids), KIMI_LAYERS, environ={})
    assert decision.capture_ids == capture and not decision.ambiguous


def test_other_reading_out_of_range_is_not_ambiguous():
    # Output-of [4, 30, 60] would capture layer 61, past the last capturable one here.
    decision = resolve_layer_ids(nested([4, 30, 60]), KIMI_LAYERS, environ={},
                                 can_capture_after_last=False)
    assert decision.capture_ids == [4, 30, 60] and not decision.ambiguous


# ---- what mutation testing found unchecked (benchmarks/mutation_scores.py) -------------
def test_id_0_is_refused_because_vllm_cannot_capture_the_embeddings():
    with pytest.raises(LayerIdError) as err:
        resolve_layer_ids(nested([0, 3, 5], **{CONVENTION_KEY: "input-of"}), 6, environ={})
    message = str(err.value)
    assert "valid: 1..6" in message and "[0] is out of range" in message
    assert "Id 0 would be the input of layer 0, the embeddings" in message
    # Read output-of, the same ids capture layers 1, 4, 6: fine.
    assert resolve_layer_ids(nested([0, 3, 5], **{CONVENTION_KEY: "output-of"}), 6,
                             environ={}).capture_ids == [1, 4, 6]


def test_no_ids_give_vllms_default_or_say_so_without_a_target():
    known = resolve_layer_ids({}, KIMI_LAYERS, environ={})
    assert known.capture_ids == [2, 30, 58] and known.reason == "the draft config names no ids"
    assert known.rule == "vllm-default" and known.source == "none" and not known.ambiguous
    assert known.log_line() == ("draft names no layer ids; vLLM will capture its default, the "
                                "inputs of layers [2, 30, 58]")
    unknown = resolve_layer_ids({}, None, environ={})
    assert unknown.capture_ids is None
    assert unknown.log_line().endswith("the inputs of layers (2, L//2, L-3)")


def test_an_explicit_convention_is_never_ambiguous_and_says_who_set_it():
    decision = resolve_layer_ids(nested([3, 29, 57], **{CONVENTION_KEY: "input-of"}),
                                 KIMI_LAYERS, environ={})
    assert (decision.rule, decision.ambiguous, decision.tool) == ("explicit", False, None)
    assert decision.reason == f"set by config.json {CONVENTION_KEY}"
    env = resolve_layer_ids(nested([3, 29, 57]), KIMI_LAYERS, environ={CONVENTION_ENV: "auto"})
    assert env.rule == "sglang-heuristic"  # "auto" states nothing


def test_a_convention_against_the_tool_that_wrote_the_ids_is_refused_naming_both():
    config = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30, 58], **MODELOPT},
              CONVENTION_KEY: "input-of"}
    with pytest.raises(LayerIdError) as err:
        resolve_layer_ids(config, KIMI_LAYERS, environ={})
    message = str(err.value)
    for words in (f"config.json {CONVENTION_KEY} says 'input-of'",
                  "the ids in eagle_config.eagle_aux_hidden_state_layer_ids were written by "
                  "Model-Optimizer (eagle_config holds", "which writes them output-of",
                  f"set {CONVENTION_ENV}=input-of when serving", "vllm-kimi-eagle calibrate"):
        assert words in message, (words, message)
    # The same statement as the tool's, or the environment's: no conflict.
    agreeing = dict(config, **{CONVENTION_KEY: "output-of"})
    assert resolve_layer_ids(agreeing, KIMI_LAYERS, environ={}).capture_ids == [3, 31, 59]
    told = resolve_layer_ids(config, KIMI_LAYERS, environ={CONVENTION_ENV: "input-of"})
    assert told.capture_ids == [2, 30, 58] and CONVENTION_ENV in told.reason
    # Where the tool's exports disagree (TorchSpec, headers unread), nothing contradicts.
    torchspec = {**TORCHSPEC, **nested([3, 29, 57]), CONVENTION_KEY: "input-of"}
    assert resolve_layer_ids(torchspec, KIMI_LAYERS, environ={}).capture_ids == [3, 29, 57]


@pytest.mark.parametrize("config, prefix, reason", [
    (nested([1, 20, 40]), None, "first id is 1, the training tools' convention"),
    (nested([3, 20, 40]), None, "first id is not 1, vLLM's convention"),
    (nested([1, 29, 57]), None, "; they are the training tools' default ids (1, L//2-1, L-4)"),
    (nested([2, 30, 58]), None, "; they are vLLM's default ids (2, L//2, L-3)"),
    ({**TORCHSPEC, **nested([3, 29, 57])}, None,
     "; TorchSpec wrote this config, but its exports differ in convention and the "
     "checkpoint's tensor names (midlayer. or layers.0.) were not read"),
])
def test_the_reason_says_why(config, prefix, reason):
    decision = resolve_layer_ids(config, KIMI_LAYERS, layer_prefix=prefix, environ={})
    assert reason in decision.reason, decision.reason
    assert decision.reason in decision.log_line()


def test_a_tool_read_through_two_exports_is_named_once():
    """A TorchSpec draft whose tensor prefix was read is one export, named in full."""
    decision = resolve_layer_ids({**TORCHSPEC, **nested([3, 29, 57])}, KIMI_LAYERS,
                                 layer_prefix="midlayer.", environ={})
    assert decision.tool == "TorchSpec (native export)"
    assert "written by TorchSpec (native export): _torchspec_version and midlayer." \
        in decision.reason


def test_the_other_reading_out_of_range_only_where_capture_after_last_is_missing():
    # Output-of [4, 30, 60] captures layer 61 = the layer count: fine from vLLM 0.25.1.
    decision = resolve_layer_ids(nested([4, 30, 60]), KIMI_LAYERS, environ={})
    assert decision.ambiguous and decision.ambiguous_with == [5, 31, 61]


def test_ambiguity_advice_names_both_settings():
    advice = resolve_layer_ids(nested([3, 29, 57]), KIMI_LAYERS, environ={}).log_line()
    assert f'"{CONVENTION_KEY}": "output-of" to its config.json' in advice
    assert f"{CONVENTION_ENV}=output-of" in advice
    assert f'to keep this reading without this warning, "{CONVENTION_KEY}": "input-of"' in advice
    assert "read as output-of-layer they would capture [4, 30, 58]" in advice


def test_the_fc_width_check_needs_both_sizes_and_a_whole_multiple():
    ok = resolve_layer_ids(nested([2, 30, 58]), KIMI_LAYERS, environ={},
                           fc_in_features=3 * 7168, target_hidden_size=7168)
    assert ok.capture_ids == [2, 30, 58]
    assert resolve_layer_ids(nested([2, 30, 58]), KIMI_LAYERS, environ={},
                             fc_in_features=4 * 7168).capture_ids == [2, 30, 58]
    with pytest.raises(LayerIdError, match="1.5 captured states"):
        resolve_layer_ids(nested([2, 30, 58]), KIMI_LAYERS, environ={},
                          fc_in_features=3 * 7168 // 2, target_hidden_size=7168)


def test_default_ids():
    from vllm_kimi_eagle.draft.layer_ids import tools_default_ids, vllm_default_ids

    assert vllm_default_ids(61) == [2, 30, 58] and tools_default_ids(61) == [1, 29, 57]
    assert tools_default_ids(6) == [1, 2]  # a set: L//2-1 and L-4 are both 2


# ---- the range of capture ids at its bounds: exactly at, one past ----------------------
def _input_of(ids: list[int]) -> dict:
    """Ids stated input-of: what is written is what vLLM captures."""
    return nested(ids, **{CONVENTION_KEY: "input-of"})


@pytest.mark.parametrize("after_last, highest", [(True, 6), (False, 5)],
                         ids=["after-last", "no-after-last"])
def test_the_highest_capture_id_is_the_layer_count_only_where_vllm_captures_after_last(
        after_last, highest):
    at = resolve_layer_ids(_input_of([1, 3, highest]), 6, can_capture_after_last=after_last,
                           environ={})
    assert at.capture_ids == [1, 3, highest]
    with pytest.raises(LayerIdError) as err:
        resolve_layer_ids(_input_of([1, 3, highest + 1]), 6,
                          can_capture_after_last=after_last, environ={})
    message = str(err.value)
    assert f"(valid: 1..{highest}); [{highest + 1}] is out of range." in message, message
    # The hint about vLLM 0.25.1 is for the id after the last layer only.
    assert ("Capturing after the last layer (id 6) needs vLLM 0.25.1" in message) == \
        (not after_last), message


def test_the_lowest_capture_id_is_1():
    assert resolve_layer_ids(_input_of([1, 3, 5]), 6, environ={}).capture_ids == [1, 3, 5]
    with pytest.raises(LayerIdError, match=r"\(valid: 1\.\.6\); \[0\] is out of range"):
        resolve_layer_ids(_input_of([0, 3, 5]), 6, environ={})


def test_every_id_out_of_range_is_named_and_only_those():
    with pytest.raises(LayerIdError) as err:
        resolve_layer_ids(_input_of([0, 1, 6, 7]), 6, environ={})
    message = str(err.value)
    assert "[0, 7] is out of range. Id 0 would be the input of layer 0" in message, message
    assert "0.25.1" not in message


def test_past_the_highest_without_capture_after_last_names_only_the_layer_count():
    """Id 7 of 6 layers is past the range on any vLLM: no hint about 0.25.1 for it."""
    with pytest.raises(LayerIdError) as err:
        resolve_layer_ids(_input_of([1, 3, 7]), 6, can_capture_after_last=False, environ={})
    assert "[7] is out of range." in str(err.value) and "0.25.1" not in str(err.value)


def test_an_unknown_target_checks_no_range():
    decision = resolve_layer_ids(_input_of([0, 3, 99]), None, environ={})
    assert decision.capture_ids == [0, 3, 99]
    # Nor the other reading's: both stay plausible.
    assert resolve_layer_ids(nested([3, 29, 57]), None, environ={}).ambiguous_with == \
        [4, 30, 58]


def test_the_other_reading_at_the_highest_id_is_still_plausible():
    # Output-of [4, 30, 60] captures layer 61: past the range without capture-after-last
    # (test_other_reading_out_of_range_is_not_ambiguous); [4, 30, 59] captures 60, in it.
    decision = resolve_layer_ids(nested([3, 29, 59]), KIMI_LAYERS, environ={},
                                 can_capture_after_last=False)
    assert decision.ambiguous_with == [4, 30, 60]


def test_the_fc_width_at_one_state_more_or_one_feature_more_is_refused():
    at = dict(fc_in_features=3 * 8, target_hidden_size=8)
    assert resolve_layer_ids(nested([2, 30, 58]), KIMI_LAYERS, environ={}, **at).capture_ids \
        == [2, 30, 58]
    for fc_in, words in ((4 * 8, "4 captured states"), (2 * 8, "2 captured states"),
                         (3 * 8 + 1, "3.125 captured states")):
        with pytest.raises(LayerIdError, match=words):
            resolve_layer_ids(nested([2, 30, 58]), KIMI_LAYERS, environ={},
                              fc_in_features=fc_in, target_hidden_size=8)


def test_both_hints_where_id_0_and_the_id_after_the_last_layer_are_out_of_range():
    with pytest.raises(LayerIdError) as err:
        resolve_layer_ids(_input_of([0, 3, 6]), 6, can_capture_after_last=False, environ={})
    assert "[0, 6] is out of range. Capturing after the last layer (id 6) needs vLLM 0.25.1 " \
        "or newer. Id 0 would be the input of layer 0" in str(err.value), str(err.value)


@pytest.mark.parametrize("config, tool, reason", [
    (nested([1, 29, 57]), None, "first id is 1, the training tools' convention; they are "
                                "the training tools' default ids (1, L//2-1, L-4)"),
    (nested([2, 30, 58]), None, "first id is not 1, vLLM's convention; they are vLLM's "
                                "default ids (2, L//2, L-3)"),
    ({"eagle_aux_hidden_state_layer_ids": [3, 29, 57],
      "eagle_config": {"eagle_aux_hidden_state_layer_ids": [3, 29, 57], **MODELOPT}},
     "Model-Optimizer", "first id is not 1, vLLM's convention; Model-Optimizer wrote this "
                        "config but never writes ids at the top-level"),
])
def test_the_heuristics_reason_whole_and_the_tool_it_names(config, tool, reason):
    decision = resolve_layer_ids(config, KIMI_LAYERS, environ={})
    assert (decision.tool, decision.reason) == (tool, reason)
    assert decision.reordered_from is None  # written in layer order


def test_a_tool_whose_exports_agree_is_named_without_the_export():
    """TorchSpec's two exports of a deepseek_v3 draft both write output-of: one tool."""
    decision = resolve_layer_ids({**TORCHSPEC, "model_type": "deepseek_v3",
                                  **nested([3, 29, 57])}, KIMI_LAYERS, environ={})
    assert (decision.rule, decision.tool, decision.capture_ids) == \
        ("tool", "TorchSpec", [4, 30, 58])


def test_the_fc_width_refusal_names_the_ids_and_their_capture():
    with pytest.raises(LayerIdError) as err:
        resolve_layer_ids(nested([1, 29, 57]), KIMI_LAYERS, environ={},
                          fc_in_features=4 * 8, target_hidden_size=8)
    assert "3 layer ids are given ([1, 29, 57] [2, 30, 58])" in str(err.value)
    with pytest.raises(LayerIdError) as err:
        resolve_layer_ids({}, None, environ={}, fc_in_features=4 * 8, target_hidden_size=8)
    assert "3 layer ids are given (vLLM default (2, L//2, L-3))" in str(err.value)
