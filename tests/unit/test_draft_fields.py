"""The table of config fields that shape a draft (draft_fields.FIELDS), tried row by row on
the tiny base draft's config.json with a value other than the default:
- a refused field is refused where start-up and ``inspect`` read the draft, for the
  plugin's class and for the hand-off to vLLM's, in one line naming the field;
- an honoured field changes what the plugin serves (its spec, rope, ids or positions);
- a field said to have no effect changes none of that and raises no problem.
Every key the fixture configs and the exporters' templates write is in the table."""

from __future__ import annotations

import copy
import json

import pytest

from tests import records
from vllm_kimi_eagle.draft import draft_fields
from vllm_kimi_eagle.draft.draft_config import DraftConfigError, parse_draft_config
from vllm_kimi_eagle.draft.draft_fields import FIELDS, HONOURED, NO_EFFECT, REFUSED
from vllm_kimi_eagle.draft.draft_report import draft_report
from vllm_kimi_eagle.fixtures import trainer_exports, variants

SOURCE = "d/config.json"


def _base() -> dict:
    return variants.draft_config(variants.DRAFT_VARIANTS[0])


def _patched(example: dict) -> dict:
    """The base draft's config with the example written in (eagle_config merged)."""
    config = _base()
    for key, value in example.items():
        if value == draft_fields.LEFT_OUT:
            config.pop(key, None)
        elif key == "eagle_config":
            config["eagle_config"] = {**config.get("eagle_config", {}), **value}
        else:
            config[key] = copy.deepcopy(value)
    return config


def _served(raw: dict) -> tuple:
    """What the plugin serves of a config.json: its spec (or the refusal), its rope, its
    written ids, its positions."""
    try:
        config = parse_draft_config(raw, SOURCE)
    except DraftConfigError as err:
        return ("refused", str(err))
    try:
        spec = records.spec_from_config(config)
    except DraftConfigError as err:
        spec = str(err)
    return (spec, config.rope.words(), config.config_rope_theta, config.written_ids,
            records.decide_positions(config, {}).nope, config.unwritten)


def _report(raw: dict, asked: str, contract: tuple[str, ...] = ()):
    return draft_report(parse_draft_config(raw, SOURCE), None, target_layers=6,
                        target_hidden=256, target_vocab=512, can_capture_after_last=True,
                        environ={}, asked=asked, contract=contract)


def _problems(raw: dict, asked: str) -> list[str]:
    return _report(raw, asked).problems


def _rows(action: str) -> list:
    return [pytest.param(rule, id=rule.field) for rule in FIELDS if rule.action == action]


def test_the_base_draft_carries_no_refused_field():
    assert draft_fields.refusals(_base()) == ()
    assert _problems(_base(), "plugin") == [] and _problems(_base(), "upstream") == []


@pytest.mark.parametrize("rule", _rows(REFUSED))
def test_a_refused_field_is_refused_by_either_class_naming_it(rule):
    """The plugin's class refuses it; so does the hand-off to vLLM's class (here: a vLLM
    whose classes moved under the plugin's); with VLLM_KIMI_EAGLE_DRAFT=upstream, where
    the user asked for vLLM's class as it is, it is a note (start-up logs it too)."""
    raw = _patched(rule.example)
    named = f"field {rule.name!r} is "
    assert rule.found(raw) is not None, rule.example
    with pytest.raises(DraftConfigError, match=named.replace(".", r"\.")):
        records.spec_from_config(parse_draft_config(raw, SOURCE))
    for report in (_report(raw, "plugin"), _report(raw, "plugin", ("a class moved",))):
        assert any(named in line for line in report.problems), report.problems
    upstream = _report(raw, "upstream")
    assert upstream.problems == [] and any(named in line for line in upstream.notes)


@pytest.mark.parametrize("rule", _rows(HONOURED))
def test_an_honoured_field_changes_what_is_served(rule):
    assert _served(_patched(rule.example)) != _served(_patched(rule.against)), rule.example


@pytest.mark.parametrize("rule", _rows(NO_EFFECT))
def test_a_field_of_no_effect_changes_nothing_served(rule):
    raw = _patched(rule.example)
    assert _served(raw) == _served(_base()), rule.example
    assert _problems(raw, "plugin") == [], rule.example


def test_a_window_switched_off_is_no_window():
    raw = _patched({"sliding_window": 16, "use_sliding_window": False})
    assert draft_fields.refusals(raw) == ()
    assert draft_fields.refusals(_patched({"sliding_window": 0})) == ()
    assert draft_fields.refusals(_patched({"sliding_window": None})) == ()
    # RTP-LLM's windowed drafts write the window alone: it applies.
    assert draft_fields.refusals(_patched({"sliding_window": 2048}))


def test_the_refusals_travel_with_the_record():
    from vllm_kimi_eagle.draft.draft_config import record_from_json, record_json

    config = parse_draft_config(_patched({"sliding_window": 16}), SOURCE)
    assert config.field_refusals
    assert record_from_json(record_json(config)).field_refusals == config.field_refusals


def _export_keys() -> set[str]:
    """The keys of every fixture draft config and of each exporter's template."""
    keys = set()
    for variant in variants.DRAFT_VARIANTS:
        if variant.export is None:
            keys |= _all_keys(variants.draft_config(variant))
    for writer in trainer_exports.WRITERS.values():
        config, _, _ = writer({}, _base(), variants.TARGET_CONFIG, variants.AUX_LAYER_IDS)
        keys |= _all_keys(config)
    return keys


def _all_keys(config: dict) -> set[str]:
    keys = set(config)
    for block in ("eagle_config", *draft_fields.ROPE_BLOCKS):
        if isinstance(config.get(block), dict):
            keys |= set(config[block])
    return keys


def test_every_key_the_exporters_write_is_in_the_table():
    missing = sorted(_export_keys() - draft_fields.covered_keys())
    assert not missing, f"add a row to draft_fields.FIELDS (or NOT_READ) for {missing}"


def test_the_docs_print_the_table_as_the_code_has_it():
    import os

    docs = open(os.path.join(os.path.dirname(__file__), "..", "..", "docs",
                             "checkpoints.md")).read()
    assert draft_fields.table() in docs, "paste draft_fields.table() into docs/checkpoints.md"


def test_a_refusal_line_names_the_value_found():
    [line] = draft_fields.refusals(_patched({"index_topk": 2048}))
    assert line.startswith("field 'index_topk' is 2048: ")
    [line] = draft_fields.refusals(_patched({"rope_interleave": False}), rope_only=True)
    assert line.startswith("field 'rope_interleave' is false: the draft was trained"), line
    assert line.count("false") == 1, line  # the value once, then why
    assert draft_fields.refusals(_patched({"rope_interleave": False})) == ()
    [line] = draft_fields.refusals(_patched({"index_topk": None}))
    assert line.startswith("field 'index_topk' is null: "), line


@pytest.mark.parametrize("raw_change, gap", [
    ({"num_hidden_layers": None}, "num_hidden_layers (null): vLLM's class cannot build"),
    ({"num_hidden_layers": "left out"},
     "num_hidden_layers: left out, transformers makes it 61 (kimi_k2's default)"),
    ({"q_lora_rank": "left out"},
     "q_lora_rank: left out, transformers makes it 1536 (kimi_k2's default)"),
])
def test_a_field_transformers_fills_otherwise_stops_the_hand_off(raw_change, gap):
    """Where transformers reads a field otherwise than the plugin's record (left out or
    null), the plugin's class serves the record; the hand-off to vLLM's class, which builds
    from transformers' value, is refused naming the field. A null q_lora_rank is a gap of
    its own: vLLM's class cannot load a draft without one."""
    raw = _base()
    for key, value in raw_change.items():
        if value == "left out":
            raw.pop(key)
        else:
            raw[key] = value
    assert _report(raw, "plugin").problems == []
    handed = _report(raw, "plugin", ("a class moved",)).problems
    assert any(gap in line for line in handed), handed
    raw["q_lora_rank"] = None
    if "q_lora_rank" in raw_change:
        assert _report(raw, "plugin").problems == []
        handed = _report(raw, "plugin", ("a class moved",)).problems
        assert any("q_lora_rank (null): its weight loader renames" in line
                   for line in handed), handed


@pytest.mark.parametrize("patch, named", [
    ({"sliding_window": "16"}, "'sliding_window' is \"16\"; expected an integer"),
    ({"attention_bias": "yes"}, "'attention_bias' is \"yes\"; expected true or false"),
    ({"layer_types": "sliding_attention"}, "'layer_types' is \"sliding_attention\""),
    ({"rope_scaling": {"type": "yarn", "factor": 4.0, "rope_dim": "32"}},
     "'rope_scaling.rope_dim' is \"32\"; expected an integer"),
    ({"eagle_config": {"parallel_draft_step": 1.5}},
     "'eagle_config.parallel_draft_step' is 1.5; expected an integer"),
])
def test_a_refused_field_of_the_wrong_type_is_refused_by_name(patch, named):
    """refusals reads the raw keys; the record types them first, so a malformed value
    is one error naming the file and the field, never a window read as none."""
    with pytest.raises(DraftConfigError, match=f"^{SOURCE}: field "):
        parse_draft_config(_patched(patch), SOURCE)
    with pytest.raises(DraftConfigError) as err:
        parse_draft_config(_patched(patch), SOURCE)
    assert named in str(err.value), str(err.value)
