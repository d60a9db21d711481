"""Layer-capture convention handling (issue 4): the pure decision, then real vLLM configs."""

from __future__ import annotations

import pytest

from tests.helpers import probe_engine_config, write_config_only_models
from vllm_kimi_eagle.layer_ids import (
    CONVENTION_ENV,
    CONVENTION_KEY,
    LayerIdError,
    resolve_layer_ids,
)

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


def test_top_level_ids_win_over_nested_like_vllm_reads_them():
    config = {"eagle_aux_hidden_state_layer_ids": [2, 30, 58], **nested([1, 29, 57])}
    decision = resolve_layer_ids(config, KIMI_LAYERS, environ={})
    assert decision.source == "eagle_aux_hidden_state_layer_ids"
    assert decision.capture_ids == [2, 30, 58]


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
        (nested([2, 2, 58]), {}, ["strictly increasing", "[2, 2, 58]"]),
        (nested([30, 2, 58]), {}, ["strictly increasing"]),
        (nested([2, 30, 70]), {}, ["61 layers", "[70]", CONVENTION_ENV]),
        (nested([2, 30, 61]), {"can_capture_after_last": False}, ["0.25.1", "[61]"]),
        (nested([2, 30, 58]), {"fc_in_features": 4 * 7168, "target_hidden_size": 7168},
         ["28672", "4 captured states", "3 layer ids"]),
        ({}, {"fc_in_features": 2 * 7168, "target_hidden_size": 7168},
         ["2 captured states", "vLLM default"]),
        (nested([2, 30, 58], **{CONVENTION_KEY: "middle"}), {}, ["'middle'", "output-of"]),
    ],
    ids=["duplicate", "unordered", "out-of-range", "after-last-too-old", "fc-width",
         "fc-width-default", "bad-convention"],
)
def test_validation_errors_name_ids_layers_and_fix(config, kwargs, words):
    with pytest.raises(LayerIdError) as err:
        resolve_layer_ids(config, KIMI_LAYERS, environ={}, **kwargs)
    for word in words:
        assert word in str(err.value), str(err.value)


def test_id_equal_to_layer_count_is_fine_where_vllm_captures_after_last():
    decision = resolve_layer_ids(nested([2, 30, 61]), KIMI_LAYERS, environ={})
    assert decision.capture_ids == [2, 30, 61]


# ---- through real create_engine_config() (no weights) ----------------------------------
@pytest.mark.parametrize(
    "overrides, expected",
    [
        ({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 4]}}, [2, 3, 5]),
        ({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 3, 5]}}, [2, 3, 5]),
        ({"eagle_aux_hidden_state_layer_ids": [1, 2, 4], "eagle_config": {}}, [2, 3, 5]),
    ],
    ids=["nested-output-of", "nested-input-of", "top-level-output-of"],
)
def test_engine_config_carries_resolved_top_level_ids(tmp_path, overrides, expected):
    target, draft = write_config_only_models(str(tmp_path), draft_overrides=overrides)
    result = probe_engine_config(target, draft)
    assert result["top_level_layer_ids"] == expected, result
    assert f"vLLM will capture the inputs of layers {expected}" in result["_log"]


def test_engine_config_without_plugin_keeps_ids_nested(tmp_path):
    overrides = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 4]}}
    target, draft = write_config_only_models(str(tmp_path), draft_overrides=overrides)
    assert probe_engine_config(target, draft, env={"VLLM_PLUGINS": ""})[
        "top_level_layer_ids"
    ] is None


def test_out_of_range_ids_fail_in_create_engine_config(tmp_path):
    overrides = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 3, 9]}}
    target, draft = write_config_only_models(str(tmp_path), draft_overrides=overrides)
    result = probe_engine_config(target, draft)
    assert "error" in result
    assert "[2, 3, 9]" in result["error"] and "6 layers" in result["error"]


# ---- end to end on the tiny trained models ---------------------------------------------
def test_output_of_copy_drafts_like_input_of_copy_through_plugin(tiny):
    """The same draft written with output-of ids [1, 2, 4] and input-of ids [2, 3, 5]."""
    from tests.helpers import NO_PLUGIN, engine, served

    input_of = served(engine(tiny, "draft"))
    output_of = served(engine(tiny, "draft-output-of"))
    verbatim = served(engine(tiny, "draft-output-of", env=NO_PLUGIN))
    print(
        f"\nacceptance length: input-of copy {input_of['acceptance_length']}, "
        f"output-of copy via plugin {output_of['acceptance_length']}, "
        f"output-of copy served verbatim (VLLM_PLUGINS='') {verbatim['acceptance_length']}"
        f"\n  by position: {input_of['acceptance_by_position']} | "
        f"{output_of['acceptance_by_position']} | {verbatim['acceptance_by_position']}"
    )
    assert output_of["acceptance_length"] == input_of["acceptance_length"]
    assert output_of["token_ids"] == input_of["token_ids"]
    # Served one layer off, the draft still runs but loses acceptance, silently.
    assert verbatim["acceptance_length"] < input_of["acceptance_length"] - 0.1
