"""Malformed drafts, generated (hypothesis): every config.json and safetensors header ends
in a clear refusal naming the file and the field, or in a sound reading, never in a
traceback; and a value of the wrong JSON type is never accepted.

The pipeline is the one ``inspect`` and the start-up hook share: parse the record
(``draft_config.py``), then the report (``draft_report.py``) against the base draft's
tensors and the tiny target's size."""

from __future__ import annotations

import copy
import json
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vllm_kimi_eagle import checkpoint
from vllm_kimi_eagle.draft_config import DraftConfigError, parse_draft_config
from vllm_kimi_eagle.draft_report import draft_report
from vllm_kimi_eagle.draft_spec import expected_tensors, spec_from_config
from vllm_kimi_eagle.fixtures import variants

SOURCE = "/drafts/base/config.json"
BASE = variants.draft_config(variants.DRAFT_VARIANTS[0])
TARGET = dict(target_layers=variants.TARGET_LAYERS, target_hidden=256,
              target_vocab=variants.TARGET_CONFIG["vocab_size"], can_capture_after_last=True)
# Every field of config.json the record reads, as a path into the JSON.
FIELDS = [
    ("architectures",), ("model_type",), ("hidden_size",), ("target_hidden_size",),
    ("intermediate_size",), ("num_attention_heads",), ("num_key_value_heads",),
    ("num_hidden_layers",), ("q_lora_rank",), ("kv_lora_rank",), ("qk_nope_head_dim",),
    ("qk_rope_head_dim",), ("v_head_dim",), ("vocab_size",), ("draft_vocab_size",),
    ("max_position_embeddings",), ("rms_norm_eps",), ("hidden_act",), ("logit_scale",),
    ("rope_theta",), ("rope_scaling",), ("rope_scaling", "factor"), ("rope_scaling", "type"),
    ("rope_scaling", "original_max_position_embeddings"), ("mla_use_nope",),
    ("mla_use_output_gate",), ("fc_norm",), ("norm_output",), ("norm_before_residual",),
    ("quantization_config",), ("eagle_aux_hidden_state_layer_ids",),
    ("eagle_aux_hidden_state_layer_ids_convention",), ("eagle_config",),
    ("eagle_config", "eagle_aux_hidden_state_layer_ids"),
    ("eagle_config", "use_last_layernorm"), ("eagle_config", "use_mtp_layernorm"),
]
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=4),
    max_leaves=8)


def _json_type(value) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    return {str: "string", list: "list", dict: "object", type(None): "null"}[type(value)]


def _mutated(path: tuple, value) -> dict:
    config = copy.deepcopy(BASE)
    holder = config
    for key in path[:-1]:
        holder = holder.setdefault(key, {}) if isinstance(holder.get(key), dict) else None
        if holder is None:
            return config
    holder[path[-1]] = value
    return config


def _base_tensors() -> dict:
    spec = spec_from_config(BASE, SOURCE)
    return {name: checkpoint.TensorInfo("/drafts/base/model.safetensors", shape,
                                        "I64" if name == "d2t" else "F32")
            for name, shape in expected_tensors(spec).items() if name != "d2t"}


BASE_REPORT = draft_report(parse_draft_config(BASE, SOURCE), _base_tensors(), **TARGET,
                           environ={})


def _outcome(config) -> tuple[str, object]:
    """("refused", message) or ("read", report); anything else raised fails the test."""
    try:
        record = parse_draft_config(config, SOURCE)
    except DraftConfigError as err:
        return "refused", str(err)
    return "read", draft_report(record, _base_tensors(), **TARGET, environ={})


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=st.sampled_from(FIELDS), value=JSON)
def test_a_malformed_field_is_refused_by_name_or_read_soundly(path, value):
    kind, found = _outcome(_mutated(path, value))
    if kind == "refused":
        assert found.startswith(SOURCE) and "\n" not in found.split(". Fix")[0]
        return
    # A wrong JSON type is never accepted where the base draft has a value.
    original = BASE
    for key in path:
        original = original.get(key) if isinstance(original, dict) else None
    if original is not None and value is not None:
        assert _json_type(value) == _json_type(original) or (
            _json_type(original) == "object"), (path, value)


@settings(deadline=None)
@given(path=st.sampled_from(FIELDS), value=JSON)
def test_a_reading_the_report_accepts_is_the_base_reading_or_names_a_problem(path, value):
    """What parses either serves as the base draft does, or the report says what differs
    (a tensor that no longer fits, an id out of range, ...); the fields that change the
    forward pass without changing a tensor are the ones a spec comparison shows."""
    kind, report = _outcome(_mutated(path, value))
    if kind == "refused" or report.problems:
        return
    base = BASE_REPORT
    same_ids = report.decision.capture_ids == base.decision.capture_ids
    assert same_ids or path[-1] in ("eagle_aux_hidden_state_layer_ids",
                                    "eagle_aux_hidden_state_layer_ids_convention",
                                    "eagle_config"), (path, value)


@pytest.mark.parametrize("ids", [[1.5, 2.5, 3.5], ["2", "3", "5"], [[2], [3], [5]],
                                 {"a": 2}, [True, 3, 5], [2, 2, 5]])
def test_ids_are_integers_never_truncated(ids):
    kind, message = _outcome(_mutated(("eagle_config", "eagle_aux_hidden_state_layer_ids"),
                                      ids))
    assert kind == "refused" and "eagle_aux_hidden_state_layer_ids" in message


# ---- safetensors headers ---------------------------------------------------------------
def _file(tmp_path, header: dict, data: bytes) -> str:
    raw = json.dumps(header).encode()
    path = tmp_path / "model.safetensors"
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    return str(path)


GOOD = {"fc.weight": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}}
ENTRY = st.fixed_dictionaries({}, optional={
    "dtype": st.sampled_from(["F32", "BF16", "F99", "", "I64"]) | JSON,
    "shape": st.lists(st.integers(-2, 4), max_size=3) | JSON,
    "data_offsets": st.lists(st.integers(-4, 40), min_size=2, max_size=2) | JSON,
})


@settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(entry=ENTRY | JSON, cut=st.integers(0, 24))
def test_a_malformed_header_or_a_cut_file_is_one_error_naming_the_file(tmp_path, entry, cut):
    path = _file(tmp_path, {"fc.weight": entry}, bytes(24 - cut))
    try:
        tensors = checkpoint.read_safetensors_header(path)
    except checkpoint.CheckpointError as err:
        assert str(err).startswith(path)
        return
    # What is read is sound: a known dtype, a shape, and data that is all there.
    info = tensors["fc.weight"]
    assert info.dtype in checkpoint.DTYPE_BITS and all(d >= 0 for d in info.shape)
    assert entry["data_offsets"][1] <= 24 - cut


def test_a_file_cut_in_half_is_caught_before_loading(tmp_path):
    path = _file(tmp_path, GOOD, bytes(24))
    assert checkpoint.read_safetensors_header(path)["fc.weight"].shape == (2, 3)
    whole = open(path, "rb").read()
    open(path, "wb").write(whole[: len(whole) - 12])
    with pytest.raises(checkpoint.CheckpointError, match="end past the file's data"):
        checkpoint.read_safetensors_header(path)
