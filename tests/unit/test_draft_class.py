"""Which class serves a draft (vllm_kimi_eagle/draft/draft_class.py), read through the draft
report as the hook and inspect read it: every quantization config real exporters write
(tests/data), under every value of the switches that decide it."""

from __future__ import annotations

import json
import os

import pytest

from vllm_kimi_eagle.draft.draft_config import QUANT_FILE, as_record
from vllm_kimi_eagle.draft.draft_report import draft_report
from vllm_kimi_eagle.fixtures import variants

EXPORTS = json.load(open(os.path.join(os.path.dirname(__file__), os.pardir, "data",
                                      "exporter_quantization_configs.json")))["configs"]
# The schemes the plugin's class loads (tests/unit/test_quantization.py reads their fields).
LOADED_BY_THE_PLUGIN = {"ct-0.17-w8a8-int8", "ct-0.9-w8a8-int8", "deepseek-v3-fp8-block",
                        "transformers-finegrained-fp8"}
NOPE_ON = {"VLLM_KIMI_EAGLE_DRAFT_NOPE": "on"}
SWITCHES = [({}, "plugin"), (NOPE_ON, "plugin"), ({}, "upstream"), (NOPE_ON, "upstream")]


def config(extra: dict | None = None) -> dict:
    return variants.draft_config(variants.DRAFT_VARIANTS[0]) | (extra or {})


def written(export: dict) -> dict:
    key = export["config_key"]
    return {("quantization_config" if key == QUANT_FILE else key): export["quantization_config"]}


def report(raw: dict, environ: dict | None = None, asked: str = "plugin",
           tensors: dict | None = None, contract: tuple[str, ...] = ()):
    return draft_report(as_record(raw, "d/config.json"), tensors, target_layers=6,
                        target_hidden=None, target_vocab=None, can_capture_after_last=True,
                        environ=environ or {}, asked=asked, contract=contract)


@pytest.mark.parametrize("environ,asked", SWITCHES,
                         ids=["default", "nope-on", "upstream", "upstream-nope-on"])
@pytest.mark.parametrize("export", EXPORTS, ids=[e["name"] for e in EXPORTS])
def test_every_exporters_config_is_served_by_a_class_or_refused_for_vllms_gap(
        export, environ, asked):
    found = report(config(written(export)), environ, asked)
    choice = found.choice
    if asked == "upstream":  # the user's choice, for every draft
        assert (choice.ours, choice.refusal) == (False, None)
        assert choice.why == "VLLM_KIMI_EAGLE_DRAFT=upstream"
        assert found.problems == []
        return
    if export["name"] in LOADED_BY_THE_PLUGIN:
        assert choice.ours and choice.refusal is None
        assert found.problems == []
        return
    assert not choice.ours
    assert "which the plugin's class does not load" in choice.why
    assert found.spec.quantization.words in choice.why
    if environ:  # NoPE: vLLM's class would rotate the rope dims
        assert choice.refusal.startswith("d/config.json: neither draft class serves this draft")
        assert "mla_use_nope (set by VLLM_KIMI_EAGLE_DRAFT_NOPE" in choice.refusal
        assert found.problems == [choice.refusal]
    else:
        assert choice.refusal is None and found.problems == []
        assert "vLLM's class serves everything this draft needs" in choice.why


OTHER = written(next(e for e in EXPORTS if e["name"] == "ct-0.17-nvfp4"))
GAPS = {
    "mla_use_nope": ({"mla_use_nope": True}, None),
    "mla_use_output_gate": ({"mla_use_output_gate": True}, None),
    "eagle_config.use_input_layernorm_in_first_layer": (
        {"eagle_config": {"use_input_layernorm_in_first_layer": False}}, None),
    "eagle_config.use_last_layernorm": ({"eagle_config": {"use_last_layernorm": False}}, None),
    "use_aux_norm": ({"use_aux_norm": True}, None),
    "field 'rope_scaling.type' is 'linear'": (
        {"rope_scaling": {"type": "linear", "factor": 4.0}}, None),
    "tensor names": ({}, ["model.layers.0.self_attn.o_proj.weight"]),
}


@pytest.mark.parametrize("field", list(GAPS))
def test_a_draft_that_needs_the_plugins_class_is_refused_naming_the_field(field):
    extra, names = GAPS[field]
    from vllm_kimi_eagle.draft.checkpoint import TensorInfo

    tensors = {name: TensorInfo("d/model.safetensors", (1,), "BF16") for name in names or ()}
    found = report(config(extra | OTHER), tensors=tensors or None)
    assert found.choice.refusal is not None, found.choice
    assert f"vLLM's in-tree class would serve it wrong: {field}" in found.choice.refusal
    assert "compressed-tensors" in found.choice.refusal  # why the plugin's class cannot
    # The same draft unquantized: the plugin's class serves it, nothing refused.
    plain = report(config(extra), tensors=tensors or None)
    assert plain.choice.ours and plain.choice.refusal is None


def test_a_written_fc_norm_wins_over_use_aux_norm():
    found = report(config({"use_aux_norm": True, "fc_norm": True} | OTHER))
    assert found.choice.refusal is None and not found.choice.ours


def test_where_the_contract_does_not_hold_vllms_class_serves_or_the_gap_is_named():
    moved = ("vllm.x.Y takes no parameter 'prefix' any more",)
    found = report(config(), contract=moved)
    assert not found.choice.ours and found.choice.refusal is None
    assert found.choice.why.startswith("what the plugin's class builds on moved in this "
                                       "vLLM: vllm.x.Y takes no parameter 'prefix'")
    nope = report(config({"mla_use_nope": True}), contract=moved)
    assert "mla_use_nope (config.json sets mla_use_nope)" in nope.choice.refusal


def test_the_rope_is_not_refused_for_vllms_class_but_noted():
    """A linear rope is refused for the plugin's class where the dims are rotated; with
    vLLM's class the plugin's reading of the config is a note, not a refusal, in inspect as
    at start-up (which raises nothing for vLLM's class)."""
    raw = config({"rope_scaling": {"type": "linear", "factor": 4.0}})
    ours = report(raw)
    assert ours.choice.ours and any("'rope_scaling.type' is 'linear'" in p
                                    for p in ours.problems)
    theirs = report(raw, asked="upstream")
    assert theirs.problems == [] and "'rope_scaling.type' is 'linear'" in theirs.notes[0]


def test_a_llama_draft_is_never_the_plugins():
    raw = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama",
           "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128,
           "vocab_size": 512, "num_hidden_layers": 1}
    found = report(raw)
    assert not found.choice.ours and found.choice.refusal is None


@pytest.mark.parametrize("environ,act,asked", [
    ({}, True, "plugin"),
    ({"VLLM_KIMI_EAGLE_DRAFT": "upstream"}, True, "upstream"),
    ({"VLLM_KIMI_EAGLE": "0"}, True, "off"),
    ({}, False, "off"),  # a vLLM release the plugin leaves alone
    ({"VLLM_KIMI_EAGLE_DRAFT": "sideways"}, True, "plugin"),  # unreadable: the default
])
def test_the_class_asked_for_follows_every_switch(environ, act, asked):
    from vllm_kimi_eagle.draft.draft_class import asked_class

    assert asked_class(environ, act) == asked


def test_where_the_plugin_does_not_act_vllms_class_serves_and_nothing_is_refused():
    found = report(config({"mla_use_nope": True} | OTHER), asked="off")
    assert (found.choice.ours, found.choice.refusal) == (False, None)
    assert found.choice.why.startswith("the plugin does not act (VLLM_KIMI_EAGLE=0")
    assert found.problems == []
