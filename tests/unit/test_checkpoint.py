"""The checkpoint checks (vllm_kimi_eagle/draft/checkpoint.py) on tensor tables and small
safetensors files written here: each problem it names, and what it lets through. Through
vLLM's config path: tests/integration/test_checkpoints.py."""

from __future__ import annotations

import json
import os
import struct

import pytest
import torch
from safetensors.torch import save_file

from tests.records import spec_from_config
from vllm_kimi_eagle.draft import checkpoint
from vllm_kimi_eagle.draft.checkpoint import TensorInfo
from vllm_kimi_eagle.draft.draft_spec import expected_tensors
from vllm_kimi_eagle.fixtures import variants

FILE = "/d/model.safetensors"
VOCAB = variants.TARGET_CONFIG["vocab_size"]


def config(**changes) -> dict:
    found = variants.draft_config(variants.DRAFT_VARIANTS[0])
    found.update(changes)
    return found


SPEC = spec_from_config(config())
PRUNED = spec_from_config(config(draft_vocab_size=variants.PRUNED_VOCAB))


def table(spec=SPEC, drop=(), prefix="", **extra) -> dict:
    """The tensors a checkpoint of ``spec`` holds (d2t where the vocabulary is pruned)."""
    tensors = {prefix + name: TensorInfo(FILE, shape, "I64" if name == "d2t" else "F32")
               for name, shape in expected_tensors(spec).items()
               if name not in drop and (name != "d2t" or spec.pruned_vocab)}
    tensors.update(extra)
    return tensors


def test_a_whole_checkpoint_has_no_problem():
    assert checkpoint.check_checkpoint(SPEC, table(), target_vocab=VOCAB, target_hidden=256) == []
    assert checkpoint.check_checkpoint(PRUNED, table(PRUNED), target_vocab=VOCAB) == []


def test_each_problem_names_the_tensor_the_shapes_and_the_file():
    bad = table(**{"layers.0.self_attn.q_a_proj.weight": TensorInfo(FILE, (64, 256), "F32"),
                   "fc_norm.0.weight": TensorInfo(FILE, (256,), "F32")})
    del bad["fc.weight"]
    problems = checkpoint.check_checkpoint(SPEC, bad, target_vocab=VOCAB)
    assert len(problems) == 3, problems
    shape = next(p for p in problems if "'layers.0.self_attn.q_a_proj.weight' has shape" in p)
    assert shape.startswith(FILE + ": ") and "[64, 256]" in shape and "[64, 512]" in shape
    unknown = next(p for p in problems if "tensor 'fc_norm.0.weight'" in p)
    assert "is not part of an MLA EAGLE3 draft" in unknown and "Remove it" in unknown
    missing = next(p for p in problems if "tensor 'fc.weight' (shape" in p)
    assert missing.startswith("/d: ") and "[256, 768]" in missing and "missing" in missing


def test_a_vocabulary_other_than_the_targets_is_named():
    problems = checkpoint.check_checkpoint(SPEC, table(), target_vocab=VOCAB + 1)
    assert len(problems) == 1 and f"vocab_size is {VOCAB}" in problems[0]
    assert f"{VOCAB + 1} entries" in problems[0]


def test_shared_tensors_may_be_missing_only_where_the_target_can_lend_them():
    shared = table(drop=("embed_tokens.weight", "lm_head.weight"))
    assert checkpoint.check_checkpoint(SPEC, shared, target_vocab=VOCAB, target_hidden=256) == []
    narrow = checkpoint.check_checkpoint(SPEC, shared, target_hidden=512)
    assert len(narrow) == 1 and "'embed_tokens.weight' is missing" in narrow[0]
    assert "256 != target hidden size 512" in narrow[0]
    pruned = checkpoint.check_checkpoint(
        PRUNED, table(PRUNED, drop=("lm_head.weight",)), target_vocab=VOCAB)
    assert len(pruned) == 1 and "'lm_head.weight' is missing" in pruned[0]
    assert f"{variants.PRUNED_VOCAB} entries, the target's {VOCAB}" in pruned[0]
    # Unknown target sizes: nothing can be said against sharing.
    assert checkpoint.missing_tensors(PRUNED, set(table(PRUNED, drop=("lm_head.weight",)))) == []


def test_d2t_is_needed_with_a_pruned_vocabulary_only_and_must_hold_integers():
    assert checkpoint.missing_tensors(SPEC, set(table())) == []
    missing = checkpoint.missing_tensors(PRUNED, set(table(PRUNED, drop=("d2t",))))
    assert len(missing) == 1 and "'d2t'" in missing[0]
    problem = checkpoint.tensor_problem(PRUNED, "d2t", (variants.PRUNED_VOCAB,), "F32")
    assert "dtype F32" in problem and "integer offsets" in problem
    assert checkpoint.tensor_problem(PRUNED, "d2t", (variants.PRUNED_VOCAB,), "I32") is None
    assert checkpoint.tensor_problem(PRUNED, "d2t", (variants.PRUNED_VOCAB,), torch.int64) \
        is None
    assert checkpoint.tensor_problem(SPEC, "t2d", (1, 2, 3), "F32") is None  # ignored


def test_two_names_of_one_tensor_are_a_problem():
    both = table(**{"midlayer.input_layernorm.weight": TensorInfo(FILE, (256,), "F32")})
    problems = checkpoint.check_checkpoint(SPEC, both)
    assert len(problems) == 1 and "duplicates" in problems[0]
    assert problems[0] == (
        f"{FILE}: tensor 'midlayer.input_layernorm.weight' duplicates "
        "'layers.0.input_layernorm.weight' (both map to 'layers.0.input_layernorm.weight'); "
        "keep one layer prefix, `midlayer.` or `layers.0.`.")


def test_a_quantized_linear_left_in_float_is_named():
    from vllm_kimi_eagle.fixtures.quantized import SCHEMES

    spec = spec_from_config(config(quantization_config=SCHEMES["int8-channel"](None)))
    name = "layers.0.mlp.down_proj.weight"
    shape = expected_tensors(spec)[name]
    problem = checkpoint.tensor_problem(spec, name, shape, "F32")
    assert "has dtype F32" in problem and "I8" in problem
    assert checkpoint.tensor_problem(spec, name, shape, "I8") is None
    assert checkpoint.tensor_problem(spec, "norm.weight", (256,), "F32") is None


@pytest.mark.parametrize("names, prefix", [
    (["layers.0.mlp.up_proj.weight", "fc.weight"], "layers.0."),
    (["model.midlayer.mlp.up_proj.weight"], "midlayer."),
    (["midlayer.a", "layers.0.b"], None),
    (["fc.weight"], None),
])
def test_the_layer_prefix_is_read_when_there_is_one(names, prefix):
    assert checkpoint.layer_prefix({n: TensorInfo(FILE, (1,), "F32") for n in names}) == prefix


def test_fc_width_is_read_from_the_fc_weight():
    assert checkpoint.fc_in_features(table()) == 3 * 256
    assert checkpoint.fc_in_features(table(prefix="model.")) == 3 * 256
    assert checkpoint.fc_in_features({"fc.weight": TensorInfo(FILE, (768,), "F32")}) is None
    assert checkpoint.fc_in_features({}) is None


@pytest.mark.parametrize("dtype, name", [
    ("F32", "F32"), (torch.float32, "F32"), (torch.bfloat16, "BF16"),
    (torch.float8_e4m3fn, "F8_E4M3"), (torch.int8, "I8"), ("bf16", "BF16"),
])
def test_dtype_names(dtype, name):
    assert checkpoint.dtype_name(dtype) == name


def _save(folder, name, tensors):
    os.makedirs(folder, exist_ok=True)
    save_file(tensors, os.path.join(folder, name))


def test_a_sharded_checkpoint_is_read_through_its_index(tmp_path):
    folder = str(tmp_path / "sharded")
    _save(folder, "a.safetensors", {"fc.weight": torch.zeros(2, 6)})
    _save(folder, "b.safetensors", {"norm.weight": torch.zeros(2, dtype=torch.bfloat16)})
    _save(folder, "stray.safetensors", {"x": torch.zeros(1)})  # not in the index
    with open(os.path.join(folder, checkpoint.INDEX_FILE), "w") as f:
        json.dump({"weight_map": {"fc.weight": "a.safetensors",
                                  "norm.weight": "b.safetensors"}}, f)
    found = checkpoint.read_checkpoint(folder)
    assert set(found) == {"fc.weight", "norm.weight"}
    assert found["fc.weight"] == TensorInfo(os.path.join(folder, "a.safetensors"), (2, 6), "F32")
    assert found["norm.weight"].dtype == "BF16"
    os.unlink(os.path.join(folder, "b.safetensors"))
    with pytest.raises(checkpoint.CheckpointError) as err:
        checkpoint.read_checkpoint(folder)
    assert str(err.value).startswith(
        f"{os.path.join(folder, checkpoint.INDEX_FILE)}: lists shard b.safetensors, ")


@pytest.mark.parametrize("text, words", [
    ('{"weight_map": {"fc.weight": "a.safet', "not valid JSON"),
    ("\xff\xfe", "not valid JSON"),
    ("[]", "field 'weight_map' is missing"),
    ('{"metadata": {}}', "field 'weight_map' is missing"),
    ('{"weight_map": {}}', "field 'weight_map' is {}"),
    ('{"weight_map": {"fc.weight": 3}}', 'field \'weight_map\' is {"fc.weight": 3}'),
    ('{"weight_map": ["a.safetensors"]}', "field 'weight_map' is [\"a.safetensors\"]"),
    ('{"weight_map": {"fc.weight": "../other/a.safetensors"}}',
     "names shard(s) ['../other/a.safetensors'] outside the draft's folder"),
    ('{"weight_map": {"fc.weight": "/etc/a.safetensors"}}', "outside the draft's folder"),
], ids=["truncated", "not-utf8", "list", "no-map", "empty-map", "number", "map-as-list",
        "parent-folder", "absolute"])
def test_a_corrupt_index_is_one_error_naming_it(tmp_path, text, words):
    folder = str(tmp_path)
    _save(folder, "a.safetensors", {"fc.weight": torch.zeros(2, 6)})
    index = os.path.join(folder, checkpoint.INDEX_FILE)
    with open(index, "w", encoding="latin-1") as f:
        f.write(text)
    with pytest.raises(checkpoint.CheckpointError) as err:
        checkpoint.read_checkpoint(folder)
    assert str(err.value).startswith(index + ": ") and words in str(err.value), str(err.value)


def test_a_folder_without_weights_and_unlisted_files(tmp_path):
    with pytest.raises(checkpoint.CheckpointError, match="no .safetensors file"):
        checkpoint.read_checkpoint(str(tmp_path))
    _save(str(tmp_path), "z.safetensors", {"b": torch.zeros(1)})
    _save(str(tmp_path), "a.safetensors", {"a": torch.zeros(1)})
    assert checkpoint.checkpoint_files(str(tmp_path)) == \
        [str(tmp_path / "a.safetensors"), str(tmp_path / "z.safetensors")]


@pytest.mark.parametrize("entry, words", [
    ({"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, None),
    ({"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}, "hold 4 bytes"),
    ({"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}, "not ordered"),
    ({"dtype": "F32", "shape": [2], "data_offsets": [0, 16]}, "end past the file"),
    ({"dtype": "F32", "shape": [2], "data_offsets": ["0", 8]}, "not two integers"),
    ({"dtype": "F32", "shape": [2], "data_offsets": [0, 8, 9]}, "not two integers"),
    ({"dtype": "F32", "shape": [2]}, "not two integers"),
    ({"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}, "non-negative integers"),
    ({"dtype": "F32", "shape": [True], "data_offsets": [0, 8]}, "non-negative integers"),
    ({"dtype": "F99", "shape": [2], "data_offsets": [0, 8]}, "dtype 'F99'"),
    ({"dtype": "F4", "shape": [3], "data_offsets": [0, 2]}, None),  # 12 bits: 2 bytes
    ("F32", "not an object"),
])
def test_header_entries(entry, words):
    problem = checkpoint._entry_problem(entry, data_size=8)
    if words is None:
        assert problem is None
    else:
        assert words in problem, problem


def test_without_the_files_size_only_dtype_and_shape_are_checked():
    assert checkpoint._entry_problem({"dtype": "F32", "shape": [2]}, data_size=None) is None
    tensors = checkpoint.header_tensors(
        {"__metadata__": {"format": "pt"}, "w": {"dtype": "I8", "shape": [3, 1]}}, FILE)
    assert tensors == {"w": TensorInfo(FILE, (3, 1), "I8")}


@pytest.mark.parametrize("content", [b"", b"\x05\x00", b"\xff" * 8 + b"{}",
                                     b"\x02\x00\x00\x00\x00\x00\x00\x00[]",
                                     b"\x03\x00\x00\x00\x00\x00\x00\x00{x}"])
def test_an_unreadable_header_is_one_error_naming_the_file(tmp_path, content):
    path = tmp_path / "model.safetensors"
    path.write_bytes(content)
    with pytest.raises(checkpoint.CheckpointError) as err:
        checkpoint.read_safetensors_header(str(path))
    assert str(err.value).startswith(str(path)) and "download or export it again" in str(err.value)


# ---- each check at its edge: exactly at, one past --------------------------------------
@pytest.mark.parametrize("entry, words", [
    ({"dtype": "F32", "shape": [0], "data_offsets": [8, 8]}, None),  # empty, at the end
    ({"dtype": "F32", "shape": [0, 3], "data_offsets": [0, 0]}, None),
    ({"dtype": "F32", "shape": [-1], "data_offsets": [0, 0]}, "non-negative integers"),
    ({"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}, None),  # ends at the data's end
    ({"dtype": "F32", "shape": [1], "data_offsets": [5, 9]}, "end past the file's data"),
    ({"dtype": "F32", "shape": [1], "data_offsets": [-1, 3]}, "not ordered"),
    ({"dtype": "F32", "shape": [1], "data_offsets": [5, 4]}, "not ordered"),
    ({"dtype": "F32", "shape": [1], "data_offsets": [0, 3]}, "hold 3 bytes"),
    ({"dtype": "F32", "shape": [1], "data_offsets": [0, 5]}, "hold 5 bytes"),
    ({"dtype": "F4", "shape": [4], "data_offsets": [0, 2]}, None),  # 16 bits: 2 bytes
    ({"dtype": "F6_E2M3", "shape": [1], "data_offsets": [0, 1]}, None),  # 6 bits: 1 byte
    ({"dtype": "F4", "shape": [5], "data_offsets": [0, 2]}, "takes 3"),  # 20 bits: 3 bytes
    ({"dtype": "F32", "shape": [2, 1], "data_offsets": [0, 8]}, None),
    ({"dtype": "F32", "shape": [], "data_offsets": [0, 4]}, None),  # a scalar: one element
])
def test_header_entries_at_their_edges(entry, words):
    problem = checkpoint._entry_problem(entry, data_size=8)
    if words is None:
        assert problem is None, problem
    else:
        assert words in problem, problem


def test_the_byte_count_names_the_shape_and_dtype():
    problem = checkpoint._entry_problem({"dtype": "BF16", "shape": [3], "data_offsets": [0, 4]},
                                        data_size=8)
    assert problem == "data_offsets [0, 4] hold 4 bytes, but shape [3] of BF16 takes 6"


def _with_length(tmp_path, length: int, raw: bytes):
    path = tmp_path / "model.safetensors"
    path.write_bytes(struct.pack("<Q", length) + raw)
    return str(path)


def test_a_header_that_fills_the_file_is_read_and_one_byte_more_is_not(tmp_path):
    assert checkpoint.read_safetensors_header(_with_length(tmp_path, 2, b"{}")) == {}
    with pytest.raises(checkpoint.CheckpointError, match="header length is corrupt"):
        checkpoint.read_safetensors_header(_with_length(tmp_path, 3, b"{}"))
    # A length prefix of 7 bytes, one short of the 8 safetensors writes.
    short = tmp_path / "short.safetensors"
    short.write_bytes(b"\x02\x00\x00\x00\x00\x00\x00")
    with pytest.raises(checkpoint.CheckpointError, match="header length is corrupt"):
        checkpoint.read_safetensors_header(str(short))


def test_the_data_after_the_header_bounds_the_offsets(tmp_path):
    header = json.dumps({"w": {"dtype": "F32", "shape": [1],
                               "data_offsets": [0, 4]}}).encode()
    whole = _with_length(tmp_path, len(header), header + bytes(4))
    assert checkpoint.read_safetensors_header(whole)["w"].shape == (1,)
    cut = _with_length(tmp_path, len(header), header + bytes(3))
    with pytest.raises(checkpoint.CheckpointError, match=r"\(3 bytes after the header\)"):
        checkpoint.read_safetensors_header(cut)


def test_a_long_weight_map_is_cut_at_80_characters(tmp_path):
    def refusal(weight_map) -> str:
        index = tmp_path / checkpoint.INDEX_FILE
        index.write_text(json.dumps({"weight_map": weight_map}))
        with pytest.raises(checkpoint.CheckpointError) as err:
            checkpoint.index_shards(str(index))
        return str(err.value)

    at = [1] * 25 + [111]  # json.dumps: exactly 80 characters
    assert len(json.dumps(at)) == 80 and f"is {json.dumps(at)}; expected" in refusal(at)
    past = [1] * 25 + [1111]  # 81 characters: 77 and "..."
    assert f"is {json.dumps(past)[:77]}...; expected" in refusal(past)


def test_d2t_of_unknown_dtype_is_checked_for_its_shape_only():
    assert checkpoint.tensor_problem(PRUNED, "d2t", (variants.PRUNED_VOCAB,), None) is None
    wrong = checkpoint.tensor_problem(PRUNED, "d2t", (variants.PRUNED_VOCAB + 1,), None)
    assert f"has shape [{variants.PRUNED_VOCAB + 1}]" in wrong


def test_an_ignored_tensor_under_two_names_is_no_duplicate():
    both = table(t2d=TensorInfo(FILE, (3,), "I64"),
                 **{"model.t2d": TensorInfo(FILE, (3,), "I64")})
    assert checkpoint.check_checkpoint(SPEC, both) == []


def test_a_checkpoint_without_tensors_names_each_missing_one_without_a_folder():
    problems = checkpoint.check_checkpoint(SPEC, {})
    assert problems and all(p.startswith("?: tensor ") for p in problems)
    assert len(problems) == len(set(expected_tensors(SPEC)) - {
        "embed_tokens.weight", "lm_head.weight", "d2t"})


def test_shared_tensors_at_the_targets_sizes_need_no_copy():
    """Missing embed_tokens and lm_head are shared exactly where the sizes are equal."""
    shared = set(table(drop=("embed_tokens.weight", "lm_head.weight")))
    assert checkpoint.missing_tensors(SPEC, shared, target_vocab=SPEC.draft_vocab_size,
                                      target_hidden=SPEC.hidden_size) == []
    off = checkpoint.missing_tensors(SPEC, shared, target_vocab=SPEC.draft_vocab_size + 1,
                                     target_hidden=SPEC.hidden_size + 1)
    assert [p.split(" is missing")[0] for p in off] == ["tensor 'embed_tokens.weight'",
                                                         "tensor 'lm_head.weight'"]


@pytest.mark.parametrize("content, words", [
    (b"\x05\x00", "its header length is corrupt"),
    (b"\x03\x00\x00\x00\x00\x00\x00\x00{x}", "its header JSON is corrupt"),
    (b"\x02\x00\x00\x00\x00\x00\x00\x00[]", "its header JSON is corrupt"),
])
def test_an_unreadable_header_says_which_part_is_corrupt(tmp_path, content, words):
    path = tmp_path / "model.safetensors"
    path.write_bytes(content)
    with pytest.raises(checkpoint.CheckpointError) as err:
        checkpoint.read_safetensors_header(str(path))
    assert f"({len(content)} bytes; {words})" in str(err.value), str(err.value)


def test_an_entry_that_is_no_object_and_offsets_that_do_not_start_at_0():
    assert checkpoint._entry_problem("F32", data_size=8) == \
        "its header entry is str, not an object"
    assert checkpoint._entry_problem({"dtype": "F32", "shape": [2], "data_offsets": [4, 5]},
                                     data_size=8) == \
        "data_offsets [4, 5] hold 1 bytes, but shape [2] of F32 takes 8"


def test_dtypes_are_checked_through_the_whole_checkpoint():
    """check_checkpoint hands each tensor's dtype on: a float d2t is named there too."""
    tensors = table(PRUNED, d2t=TensorInfo(FILE, (variants.PRUNED_VOCAB,), "F32"))
    problems = checkpoint.check_checkpoint(PRUNED, tensors)
    assert len(problems) == 1 and "tensor 'd2t' has dtype F32" in problems[0]


def test_a_missing_lm_head_the_target_lends_hides_no_later_missing_tensor():
    missing = checkpoint.missing_tensors(
        SPEC, set(table(drop=("lm_head.weight", "layers.0.self_attn.kv_b_proj.weight"))))
    assert len(missing) == 1 and "'layers.0.self_attn.kv_b_proj.weight'" in missing[0]
