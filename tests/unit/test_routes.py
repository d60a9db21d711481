"""Every route a draft can take (the plugin's class, the hand-off to vLLM's, vLLM's asked
for with VLLM_KIMI_EAGLE_DRAFT=upstream) checks the checkpoint against its config by the
same rules, and refuses only what would be served otherwise than trained there: the draft
report (draft_report.py), as start-up and ``inspect`` read it, on tensor tables and small
safetensors files written here. Through vLLM's own config path, on every route:
tests/integration/test_route_matrix.py."""

from __future__ import annotations

import pytest
import torch
from packaging.version import Version
from safetensors.torch import save_file

from vllm_kimi_eagle.draft import checkpoint
from vllm_kimi_eagle.draft.checkpoint import TensorInfo
from vllm_kimi_eagle.draft.draft_class import IN_TREE_GAPS, LOAD
from vllm_kimi_eagle.draft.draft_config import as_record
from vllm_kimi_eagle.draft.draft_report import draft_report
from vllm_kimi_eagle.draft.draft_spec import expected_tensors, spec_from_config
from vllm_kimi_eagle.fixtures import variants

FILE = "/d/model.safetensors"
VOCAB = variants.TARGET_CONFIG["vocab_size"]
MOVED = ("vllm.x.Y takes no parameter 'prefix' any more",)  # a hand-off: the class moved
ROUTES = {"plugin": ("plugin", ()), "hand-off": ("plugin", MOVED), "upstream": ("upstream", ())}


def config(**changes) -> dict:
    found = variants.draft_config(variants.DRAFT_VARIANTS[0])
    for key, value in changes.items():
        if value is None:
            found.pop(key, None)
        else:
            found[key] = value
    return found


def table(raw: dict, drop=(), **extra) -> dict:
    spec = spec_from_config(as_record(raw))
    tensors = {name: TensorInfo(FILE, shape, "I64" if name == "d2t" else "F32")
               for name, shape in expected_tensors(spec).items()
               if name not in drop and (name != "d2t" or spec.pruned_vocab)}
    tensors.update(extra)
    return tensors


def report(raw: dict, route: str, tensors: dict | None = None, environ: dict | None = None,
           release: Version | None = None):
    asked, contract = ROUTES[route]
    return draft_report(as_record(raw, "/d/config.json"), tensors, target_layers=6,
                        target_hidden=256, target_vocab=VOCAB, can_capture_after_last=True,
                        environ=environ or {}, asked=asked, contract=contract,
                        release=release)


PRUNED = config(draft_vocab_size=variants.PRUNED_VOCAB)


@pytest.mark.parametrize("route", list(ROUTES))
def test_a_pruned_draft_without_d2t_is_refused_on_every_route(route):
    found = report(PRUNED, route, table(PRUNED, drop=("d2t",)))
    [problem] = found.problems
    assert problem.startswith("/d: tensor 'd2t' (shape [192]) is missing"), problem
    said = "vLLM's in-tree class would read draft id k as target id k"
    assert (said in problem) is (route != "plugin"), problem


@pytest.mark.parametrize("route", list(ROUTES))
def test_each_missing_tensor_says_what_vllms_class_would_do_with_it(route):
    tensors = table(config(), drop=("layers.0.self_attn.q_a_layernorm.weight",
                                    "layers.0.self_attn.o_proj.weight"),
                    **{"layers.0.self_attn.o_proj.bias": TensorInfo(FILE, (256,), "F32")})
    problems = report(config(), route, tensors).problems
    assert len(problems) == 3, problems
    norm, weight, bias = (next(p for p in problems if words in p) for words in (
        "'layers.0.self_attn.q_a_layernorm.weight' (shape", "'layers.0.self_attn.o_proj.weight'"
        " (shape", "'layers.0.self_attn.o_proj.bias' is not part"))
    in_tree = route != "plugin"
    assert ("leave its weight at 1" in norm) is in_tree
    assert ("leave it uninitialised" in weight) is in_tree
    assert ("drop it without a word" in bias) is in_tree


def test_rotary_buffers_an_old_export_saved_are_ignored_by_both_classes():
    """vLLM's loader drops them by name and both classes rebuild them from the config."""
    buffers = {name: TensorInfo(FILE, (32,), "F32") for name in (
        "layers.0.self_attn.rotary_emb.inv_freq", "midlayer.self_attn.rotary_emb.cos_cached")}
    for route in ROUTES:
        assert report(config(), route, table(config(), **buffers)).problems == [], route


def test_the_hook_reads_d2t_values_where_the_file_is_at_hand(tmp_path):
    """Repeated target ids, ids outside the target's vocabulary: the values, read from the
    file before any weight loads, on every route."""
    spec = spec_from_config(as_record(PRUNED))
    weights = {name: torch.zeros(shape) for name, shape in expected_tensors(spec).items()
               if name != "d2t"}
    for name, d2t in {"repeated": [0] * 190 + [-1, -1], "outside": [400] * 192,
                      "right": [0] * 192}.items():
        path = tmp_path / f"{name}.safetensors"
        save_file({**weights, "d2t": torch.tensor(d2t, dtype=torch.long)}, str(path))
        tensors = checkpoint.read_safetensors_header(str(path))
        assert checkpoint.read_integers(tensors["d2t"]) == d2t
        for route in ROUTES:
            problems = report(PRUNED, route, tensors).problems
            if name == "right":
                assert problems == [], (route, problems)
                continue
            [problem] = problems
            words = {"repeated": "maps draft ids 189 and 190 (and perhaps more) to the same "
                                 "target id 189",
                     "outside": "maps draft id 112 to target id 512, outside the target "
                                "vocabulary of 512"}[name]
            assert problem.startswith(f"{path}: tensor 'd2t' {words}"), problem


def test_a_full_vocabulary_d2t_is_refused_where_vllms_class_cannot_load_it():
    """vLLM's class builds no d2t for a full vocabulary from 0.30 (it loads one on
    0.26-0.29); the plugin's class takes the identity a TorchSpec export writes."""
    tensors = table(config(), d2t=TensorInfo(FILE, (VOCAB,), "I64"))
    assert report(config(), "plugin", tensors).problems == []
    for release, refused in (("0.29.0", False), ("0.30.0", True), ("0.33.0", True),
                             ("0.34.0", True)):
        problems = report(config(), "upstream", tensors, release=Version(release)).problems
        assert bool(problems) is refused, (release, problems)
        if refused:
            assert "d2t: a draft whose vocabulary is the target's gets no d2t" in problems[0]


def test_the_rows_vllms_class_fails_to_load_refuse_the_asked_for_route_too():
    """Where vLLM's class cannot load the draft at all, asking for it is refused in one
    line saying how to serve it; where it computes otherwise, it serves with a warning."""
    for raw, words in ((config(q_lora_rank=None), "q_lora_rank: left out, transformers "
                        "makes it 1536 (kimi_k2's default)"),
                       ({**config(), "q_lora_rank": None}, "q_lora_rank (null)"),
                       (config(num_hidden_layers=None), "num_hidden_layers: left out, "
                        "transformers makes it 61")):
        upstream = report(raw, "upstream")
        assert upstream.choice.refusal is not None, raw
        assert words in upstream.choice.refusal and "Unset VLLM_KIMI_EAGLE_DRAFT" in \
            upstream.choice.refusal, upstream.choice.refusal
        assert report(raw, "plugin").problems == []
    nope = report(config(mla_use_nope=True), "upstream")
    assert nope.choice.refusal is None and nope.problems == []
    assert any(note.startswith("mla_use_nope (config.json sets mla_use_nope): it rotates")
               for note in nope.notes), nope.notes


def test_capture_ids_at_the_top_level_only_size_fc_for_vllms_class():
    raw = config(eagle_config={**config()["eagle_config"],
                               "eagle_aux_hidden_state_layer_ids": None},
                 eagle_aux_hidden_state_layer_ids=[2, 5])
    raw["eagle_config"].pop("eagle_aux_hidden_state_layer_ids")
    tensors = table(raw)
    assert tensors["fc.weight"].shape == (256, 512)
    assert report(raw, "plugin", tensors).problems == []
    refused = report(raw, "upstream", tensors).choice.refusal
    assert "it lists 2 layers, and vLLM's class sizes fc for num_aux_hidden_states" in \
        refused and "(3 here)" in refused, refused
    assert "write num_aux_hidden_states: 2" in refused
    assert report({**raw, "num_aux_hidden_states": 2}, "upstream", tensors).problems == []


def test_a_default_rope_fails_vllms_class_on_the_releases_that_rewrite_it():
    raw = config(rope_scaling=None)
    for release, refused in (("0.26.0", True), ("0.27.1", True), ("0.28.0", False)):
        found = report(raw, "upstream", release=Version(release))
        assert (found.choice.refusal is not None) is refused, release
    assert [gap.releases for gap in IN_TREE_GAPS if gap.field == "the rope type (default)"] \
        == [(Version("0.26"), Version("0.27"))]
    assert all(gap.kind in (LOAD, "forward") for gap in IN_TREE_GAPS)


def test_a_nope_draft_is_not_refused_for_fields_about_rotating_its_rope():
    """A K3 NoPE draft rotates nothing as the plugin serves it: rope_interleave false,
    a partial rotary factor or a yarn attention_factor do not refuse it there. Served
    rotated (vLLM's class), they do."""
    k3 = config(mla_use_nope=True)
    for extra in ({"rope_interleave": False}, {"partial_rotary_factor": 0.5},
                  {"rope_scaling": {**k3["rope_scaling"], "attention_factor": 0.7}},
                  {"rope_scaling": {**k3["rope_scaling"], "truncate": False}},
                  {"rope_theta": None}):
        raw = {**k3, **extra}
        assert report(raw, "plugin").problems == [], extra
        hand_off = report(raw, "hand-off").problems
        assert any(f"field '{next(iter(extra))}" in p or "rope_scaling." in p
                   for p in hand_off), (extra, hand_off)
        rope = {**raw, "mla_use_nope": False}
        assert report(rope, "plugin").problems, extra


@pytest.mark.parametrize("extra, named", [
    ({"index_topk": None}, "field 'index_topk' is null"),
    ({"rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
                       "attention_factor": 0.7}}, "field 'rope_scaling.attention_factor' is 0.7"),
    ({"rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
                       "truncate": False}}, "field 'rope_scaling.truncate' is false"),
    ({"rope_scaling": {"type": "default", "mrope_section": [16, 8, 8]}},
     "field 'rope_scaling.mrope_section / mrope_interleaved / use_fope' is mrope_section"),
])
def test_what_vllms_mla_attention_serves_otherwise_is_refused_by_name(extra, named):
    problems = report({**config(), **extra}, "plugin").problems
    assert any(p.startswith(f"/d/config.json: {named}") for p in problems), problems
    truncated = {**config(), **extra}
    if "rope_scaling" in extra:
        truncated["rope_scaling"] = {k: v for k, v in extra["rope_scaling"].items()
                                     if k not in ("attention_factor", "truncate",
                                                  "mrope_section")}
        assert report(truncated, "plugin").problems == []


def test_a_llama_draft_gets_no_word_on_mla_attention():
    raw = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama",
           "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128,
           "vocab_size": 512, "num_hidden_layers": 1, "attention_bias": True,
           "rope_interleave": False}
    found = report(raw, "plugin")
    assert found.problems == [] and found.notes == [] and found.config_error is None


@pytest.mark.parametrize("route", list(ROUTES))
def test_a_draft_without_its_own_lm_head_is_said_to_borrow_the_targets(route):
    own_embedding = report(config(), route, table(config(), drop=("lm_head.weight",)))
    assert own_embedding.problems == []
    assert "served with the target's LM head" in own_embedding.head_note
    assert "its head was very likely trained too" in own_embedding.head_note
    shared = report(config(), route, table(config(), drop=("lm_head.weight",
                                                           "embed_tokens.weight")))
    assert "very likely" not in shared.head_note
    assert report(config(), route, table(config())).head_note is None


def test_a_scheme_only_vllm_loads_has_each_linear_layer_checked_not_its_format():
    """W4A16 and NVFP4 are handed to vLLM's class, which checks their packed weights and
    scales; the plugin checks everything else and that each Linear layer has tensors."""
    raw = config(quantization_config={
        "quant_method": "compressed-tensors", "format": "pack-quantized",
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
            "type": "int", "num_bits": 4, "strategy": "group", "group_size": 32}}}})
    plain = table(config())
    packed = {}
    for name, info in plain.items():
        if name.endswith("proj.weight") or name == "fc.weight":
            stem = name.removesuffix("weight")
            packed[stem + "weight_packed"] = TensorInfo(FILE, (info.shape[0], 1), "I32")
            packed[stem + "weight_scale"] = TensorInfo(FILE, (info.shape[0], 1), "BF16")
        else:
            packed[name] = info
    found = report(raw, "plugin", packed)
    assert not found.choice.ours and found.problems == [], found.problems
    del packed["layers.0.mlp.down_proj.weight_packed"], packed["layers.0.mlp.down_proj.weight_scale"]
    [problem] = report(raw, "plugin", packed).problems
    assert "'layers.0.mlp.down_proj.weight' (shape [256, 512]) is missing" in problem
    assert "vLLM's in-tree class would leave it uninitialised" in problem


def test_the_reference_multiplies_the_logits_by_logit_scale_as_vllm_does():
    import dataclasses

    from vllm_kimi_eagle.fixtures.reference import ReferenceDraft

    spec = spec_from_config(as_record(config()))
    rope = {"rope_type": "default", "rope_theta": 10000.0}
    torch.manual_seed(0)
    plain = ReferenceDraft(spec, rope)
    scaled = ReferenceDraft(dataclasses.replace(spec, logit_scale=2.0), rope)
    scaled.load_state_dict(plain.state_dict())
    out = torch.randn(3, spec.hidden_size)
    torch.testing.assert_close(scaled.draft_logits(out), 2.0 * plain.draft_logits(out))


def test_the_docs_print_the_in_tree_rows_as_the_code_has_them():
    import os

    from vllm_kimi_eagle.draft.draft_class import gaps_table

    docs = open(os.path.join(os.path.dirname(__file__), "..", "..", "docs",
                             "checkpoints.md")).read()
    assert gaps_table() in docs, "paste draft_class.gaps_table() into docs/checkpoints.md"


def test_vllms_class_is_held_to_the_checkpoint_its_own_reading_expects():
    """vLLM's class reads fc_norm alone: a config that says fc_norm false and
    use_aux_norm true, its checkpoint without fc norms, loads as vLLM's class reads it
    (the two fields' disagreement a note); with the norms and use_aux_norm alone, it
    cannot load them."""
    raw = config(fc_norm=False, use_aux_norm=True)
    upstream = report(raw, "upstream", table(config()))
    assert upstream.problems == [], upstream.problems
    assert any("fc_norm is false and use_aux_norm is true" in n for n in upstream.notes)
    assert report(raw, "plugin", table(config())).problems  # the plugin's class refuses it
    with_norms = config(use_aux_norm=True)
    refused = report(with_norms, "upstream", table(with_norms)).choice.refusal
    assert refused and "use_aux_norm: it reads fc_norm only" in refused
