"""Layer-capture convention handling (issue 4): the pure decision, then real vLLM configs."""

from __future__ import annotations

import pytest

import json
import os
import subprocess
import sys

from tests.helpers import (
    engine,
    probe_engine_config,
    requires_mla_engine,
    served,
    write_config_only_models,
)
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
        (nested([2, 2, 58]), {}, ["more than once", "[2, 2, 58]"]),
        (nested([2, 30, 70]), {}, ["61 layers", "[70]", CONVENTION_ENV]),
        (nested([2, 30, 61]), {"can_capture_after_last": False}, ["0.25.1", "[61]"]),
        (nested([2, 30, 58]), {"fc_in_features": 4 * 7168, "target_hidden_size": 7168},
         ["28672", "4 captured states", "3 layer ids"]),
        ({}, {"fc_in_features": 2 * 7168, "target_hidden_size": 7168},
         ["2 captured states", "vLLM default"]),
        (nested([2, 30, 58], **{CONVENTION_KEY: "middle"}), {}, ["'middle'", "output-of"]),
    ],
    ids=["duplicate", "out-of-range", "after-last-too-old", "fc-width",
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


LLAMA_DRAFT = {
    "model_type": "llama", "architectures": ["LlamaForCausalLMEagle3"], "kv_lora_rank": None,
    "q_lora_rank": None, "head_dim": 64, "num_key_value_heads": 4,
    "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 4]},
}


def test_llama_draft_for_kimi_target_gets_the_same_handling(tmp_path):
    target, draft = write_config_only_models(str(tmp_path), draft_overrides=LLAMA_DRAFT)
    assert probe_engine_config(target, draft)["top_level_layer_ids"] == [2, 3, 5]


def test_other_families_are_left_alone_unless_asked(tmp_path):
    target, draft = write_config_only_models(str(tmp_path), draft_overrides=LLAMA_DRAFT)
    with open(os.path.join(target, "config.json")) as f:
        config = json.load(f)
    llama = {k: config[k] for k in ("vocab_size", "hidden_size", "intermediate_size",
                                    "num_hidden_layers", "num_attention_heads",
                                    "num_key_value_heads", "rms_norm_eps", "max_position_embeddings")}
    with open(os.path.join(target, "config.json"), "w") as f:
        json.dump(dict(llama, model_type="llama", architectures=["LlamaForCausalLM"]), f)
    assert probe_engine_config(target, draft)["top_level_layer_ids"] is None
    asked = probe_engine_config(target, draft, env={CONVENTION_ENV: "output-of"})
    assert asked["top_level_layer_ids"] == [2, 3, 5]


def test_out_of_range_ids_fail_in_create_engine_config(tmp_path):
    overrides = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 3, 9]}}
    target, draft = write_config_only_models(str(tmp_path), draft_overrides=overrides)
    result = probe_engine_config(target, draft)
    assert "error" in result
    assert "[2, 3, 9]" in result["error"] and "6 layers" in result["error"]


# ---- end to end on the tiny trained models ---------------------------------------------
@requires_mla_engine()
def test_output_of_copy_drafts_like_input_of_copy_through_plugin(tiny):
    """The same draft written with output-of ids [1, 2, 4] and input-of ids [2, 3, 5].

    The "verbatim" run changes one variable: the same plugin (draft class, alias, MLA
    detection) is told to read the ids as vLLM does (input-of), as if it did not shift.
    """
    input_of = served(engine(tiny, "draft"))
    output_of = served(engine(tiny, "draft-output-of"))
    verbatim = served(engine(tiny, "draft-output-of", env={CONVENTION_ENV: "input-of"}))
    for run in (input_of, output_of, verbatim):
        assert run["drafts"] > 0, "no draft proposed: acceptance would compare nothing"
    assert "vLLM will capture the inputs of layers [2, 3, 5]" in output_of["_log"]
    assert "vLLM will capture the inputs of layers [1, 2, 4]" in verbatim["_log"]
    assert verbatim["draft_class"] == output_of["draft_class"]
    print(
        f"\nacceptance length: input-of copy {input_of['acceptance_length']}, "
        f"output-of copy via plugin {output_of['acceptance_length']}, "
        f"output-of copy read verbatim ({CONVENTION_ENV}=input-of) "
        f"{verbatim['acceptance_length']}"
        f"\n  by position: {input_of['acceptance_by_position']} | "
        f"{output_of['acceptance_by_position']} | {verbatim['acceptance_by_position']}"
    )
    assert output_of["acceptance_length"] == input_of["acceptance_length"]
    assert output_of["token_ids"] == input_of["token_ids"]
    # Read one layer off, the draft still runs but loses acceptance, silently.
    assert verbatim["acceptance_length"] < input_of["acceptance_length"] - 0.1


# ---- vllm-kimi-eagle inspect -------------------------------------------------------------
def inspect(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "vllm_kimi_eagle.cli", "inspect", *args],
        capture_output=True, text=True, timeout=120,
    )


def test_inspect_reports_the_decision_as_json(tiny):
    proc = inspect(os.path.join(tiny, "draft-output-of"), "--target",
                   os.path.join(tiny, "target"), "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["architecture"] == "Eagle3DeepseekV2ForCausalLM"
    assert report["model_type"] == "kimi_k2"
    assert report["layer_ids"] == [1, 2, 4]
    assert report["convention"] == "output-of"
    assert report["capture_ids"] == [2, 3, 5]
    assert report["problems"] == []
    assert report["layout"]["layer_prefix"] == "layers.0."


def test_inspect_text_report_and_layouts(tiny):
    proc = inspect(os.path.join(tiny, "draft-pruned"), "--target", os.path.join(tiny, "target"))
    assert proc.returncode == 0, proc.stderr
    assert "d2t True" in proc.stdout and "vLLM captures [2, 3, 5]" in proc.stdout
    shared = json.loads(inspect(os.path.join(tiny, "draft-shared"), "--json").stdout)
    assert shared["layout"]["embed_tokens"] is False and shared["layout"]["lm_head"] is False
    sharded = json.loads(inspect(os.path.join(tiny, "draft-sharded-bf16"), "--json").stdout)
    assert sharded["layout"]["files"] == 3 and "BF16" in sharded["layout"]["dtypes"]


def test_inspect_lists_problems_and_exits_nonzero(tiny, tmp_path):
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(os.path.join(tiny, "draft"), bad)
    config = json.loads((bad / "config.json").read_text())
    config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [2, 3, 9]
    config["fc_norm"] = True  # the checkpoint has no fc_norm weights
    (bad / "config.json").write_text(json.dumps(config))
    proc = inspect(str(bad), "--target", os.path.join(tiny, "target"), "--json")
    assert proc.returncode == 1
    problems = json.loads(proc.stdout)["problems"]
    assert any("[2, 3, 9]" in p and "6 layers" in p for p in problems), problems
    assert any("'fc_norm.0.weight'" in p and "missing" in p for p in problems), problems


# ---- issue 10: ids as each training tool meant them (pure decision) -------------------
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
          "eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 28, 56], **MODELOPT}},
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
