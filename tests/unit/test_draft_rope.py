"""The rope the record reads is the rope transformers builds, and so the one vLLM serves:
each rope shape a config.json can take goes through transformers' AutoConfig and the
record, and the two must agree; two places that give the rope differently are one
problem naming both; a rope type vLLM's MLA attention would rewrite is refused."""

from __future__ import annotations

import json

import pytest

from tests.records import spec_from_config
from vllm_kimi_eagle.draft.draft_config import DraftConfigError, parse_draft_config
from vllm_kimi_eagle.fixtures import variants

YARN = {"factor": 4.0, "original_max_position_embeddings": 1024, "beta_fast": 32.0,
        "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0}
# name -> the rope fields of a config.json (the rest is the tiny draft's).
SHAPES = {
    "rope_scaling only": {"rope_scaling": {"type": "yarn", **YARN}, "rope_theta": 50000.0},
    "rope_parameters only": {"rope_parameters": {"rope_type": "default", "rope_theta": 20000.0}},
    "both agreeing": {"rope_scaling": {"rope_type": "yarn", **YARN},
                      "rope_parameters": {"rope_type": "yarn", **YARN},
                      "rope_theta": 50000.0},
    "both disagreeing": {"rope_scaling": {"type": "yarn", **YARN},
                         "rope_parameters": {"rope_type": "default", "rope_theta": 20000.0},
                         "rope_theta": 50000.0},
    "base in the block only": {"rope_scaling": {"type": "yarn", **YARN, "rope_theta": 30000.0}},
    "base at the top only": {"rope_theta": 40000.0},
    "base at the top and in the block": {
        "rope_parameters": {"rope_type": "default", "rope_theta": 20000.0},
        "rope_theta": 50000.0},
    "base nowhere": {},
    "type spelled type": {"rope_scaling": {"type": "yarn", **YARN}},
    "type spelled rope_type": {"rope_scaling": {"rope_type": "yarn", **YARN}},
    "type and rope_type disagreeing": {"rope_scaling": {"type": "default", "rope_type": "yarn",
                                                        **YARN}},
    "yarn without original_max_position_embeddings": {
        "rope_scaling": {"type": "yarn", "factor": 4.0}, "max_position_embeddings": 4096},
    "empty rope_scaling beside rope_parameters": {
        "rope_scaling": {}, "rope_parameters": {"rope_type": "yarn", **YARN}},
}
# Shapes that give one fact twice with two values, and the words of the problem.
DISAGREEING = {
    "both disagreeing": ["rope_scaling gives yarn (rope_scaling)", "base 50000 (rope_theta)",
                         "rope_parameters gives default (rope_parameters)",
                         "base 20000 (rope_parameters.rope_theta)",
                         "transformers, and so vLLM, serves rope_scaling"],
    "base at the top and in the block": ["rope_theta is 50000 and rope_parameters.rope_theta "
                                         "is 20000", "transformers serves 20000"],
    "type and rope_type disagreeing": ["rope_scaling.type is 'default' and "
                                       "rope_scaling.rope_type is 'yarn'"],
}


def _config(shape: dict) -> dict:
    config = variants.draft_config(variants.DRAFT_VARIANTS[0])
    for key in ("rope_scaling", "rope_parameters", "rope_theta"):
        config.pop(key, None)
    # deepseek_v3: transformers' own class for kimi_k2 (the plugin's alias registers the
    # same class under that name in vLLM processes).
    return {**config, "model_type": "deepseek_v3", **shape}


def _transformers_rope(tmp_path, config: dict) -> dict:
    from transformers import AutoConfig

    (tmp_path / "config.json").write_text(json.dumps(config))
    return dict(AutoConfig.from_pretrained(str(tmp_path)).rope_parameters)


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_the_record_reads_the_rope_transformers_builds(tmp_path, name):
    config = _config(SHAPES[name])
    built = _transformers_rope(tmp_path, config)
    rope = parse_draft_config(config, "d/config.json").rope
    assert rope.kind == built["rope_type"], (name, built)
    assert rope.theta == built["rope_theta"], (name, built)
    assert rope.factor == built.get("factor"), (name, built)
    assert rope.original_max_position_embeddings == \
        built.get("original_max_position_embeddings"), (name, built)


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_two_places_that_disagree_are_one_problem_naming_both(name):
    config = _config(SHAPES[name])
    record = parse_draft_config(config, "d/config.json")
    if name not in DISAGREEING:
        assert record.rope_disagreements == [], name
        spec_from_config(record)
        return
    [problem] = record.rope_disagreements
    for words in DISAGREEING[name]:
        assert words in problem, (words, problem)
    with pytest.raises(DraftConfigError, match="^d/config.json: ") as err:
        spec_from_config(record)
    assert problem in str(err.value)


def test_a_base_that_differs_by_a_little_is_a_disagreement():
    config = _config({"rope_parameters": {"rope_type": "default", "rope_theta": 50000.0},
                      "rope_theta": 50000.5})
    assert len(parse_draft_config(config).rope_disagreements) == 1
    same = _config({"rope_parameters": {"rope_type": "default", "rope_theta": 50000.0},
                    "rope_theta": 50000})
    assert parse_draft_config(same).rope_disagreements == []


def test_what_transformers_fills_in_is_said():
    config = _config(SHAPES["yarn without original_max_position_embeddings"])
    rope = parse_draft_config(config).rope
    assert (rope.original_max_position_embeddings, rope.original_max_filled) == (4096, True)
    assert "original_max_position_embeddings 4096 (not written: transformers fills it from " \
           "max_position_embeddings)" in rope.words()
    assert "base 10000 (not written: transformers' default)" in rope.words()
    written = parse_draft_config(_config(SHAPES["type spelled type"])).rope
    assert not written.original_max_filled and "transformers fills" not in written.words()


@pytest.mark.parametrize("kind", ["linear", "dynamic", "ntk", "llama3"])
def test_a_rope_type_vllms_mla_attention_rewrites_is_refused(kind):
    config = _config({"rope_scaling": {"type": kind, "factor": 4.0}})
    with pytest.raises(DraftConfigError) as err:
        spec_from_config(config, "d/config.json")
    assert f"field 'rope_scaling.type' is {kind!r}" in str(err.value)
    assert "serves every other rope type as DeepSeek YaRN" in str(err.value)


@pytest.mark.parametrize("shape", [
    {"rope_scaling": {"type": "yarn", **YARN}},
    {"rope_scaling": {"type": "deepseek_yarn", **YARN}},
    {"rope_parameters": {"rope_type": "default", "rope_theta": 1e4}},
    {},
])
def test_the_rope_types_vllms_mla_attention_builds_are_served(shape):
    spec_from_config(_config(shape))


def test_a_nope_draft_rotates_nothing_so_its_rope_type_is_not_refused():
    spec = spec_from_config(_config({"rope_scaling": {"type": "linear", "factor": 4.0},
                                     "mla_use_nope": True}))
    assert spec.nope


def test_a_value_one_block_leaves_out_is_vllms_default_there():
    """rope_parameters that copies rope_scaling and spells out vLLM's defaults is one rope;
    a value that differs from the default is a second rope, named with both values."""
    short = {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024}
    spelled = {"rope_type": "yarn", **YARN}  # YARN: beta_fast 32, beta_slow 1, mscale 1, ...
    same = _config({"rope_scaling": short, "rope_parameters": dict(spelled, mscale_all_dim=0)})
    assert parse_draft_config(same).rope_disagreements == []
    spec_from_config(same)
    other = _config({"rope_scaling": short,
                     "rope_parameters": dict(spelled, mscale_all_dim=0, mscale=0.707)})
    [problem] = parse_draft_config(other).rope_disagreements
    assert "two different ropes (mscale 1 against 0.707; transformers" in problem, problem


@pytest.mark.parametrize("environ, ours, refused", [
    ({}, True, False),  # NoPE as written, the plugin's class: the rope is never rotated
    ({"VLLM_KIMI_EAGLE_DRAFT_NOPE": "off"}, True, True),  # served with RoPE
    ({}, False, True),  # vLLM's class rotates every draft
])
def test_a_rope_type_is_refused_where_it_will_be_rotated_as_served(environ, ours, refused):
    """The refusal reads the positions decision and the class that serves, not config.json's
    mla_use_nope alone: a draft served with RoPE is refused for a rope vLLM rewrites,
    whatever the config says."""
    from vllm_kimi_eagle.draft.draft_config import as_record
    from vllm_kimi_eagle.draft.draft_report import draft_report

    config = as_record(_config({"rope_scaling": {"type": "linear", "factor": 4.0},
                                "mla_use_nope": True}), "d/config.json")
    report = draft_report(config, None, target_layers=6, target_hidden=None,
                          target_vocab=None, can_capture_after_last=True, environ=environ,
                          asked="plugin" if ours else "upstream")
    assert (report.config_error is not None) is refused
    if refused:
        assert "'rope_scaling.type' is 'linear'" in str(report.config_error)
