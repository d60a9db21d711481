"""Malformed drafts, generated (hypothesis): every config.json and safetensors header ends
in a clear refusal naming the file and the field, or in a sound reading, never in a
traceback; and a value of the wrong JSON type is never accepted.

The pipeline is the one ``inspect`` and the start-up hook share: parse the record
(``draft_config.py``), then the report (``draft_report.py``) against the base draft's
tensors and the tiny target's size.

The fields are the record's own (its models' fields, read from the classes), so a field
added to the record is generated here without an edit; each field gets its own examples
(the suite's profile, tests/unit/conftest.py), so none is left to chance. Each bounded
field is also tried at its bound and one past it, the bounds written here by hand."""

from __future__ import annotations

import copy
import json
import math
import re
import struct
import types
import typing
from typing import Annotated, Any

import annotated_types
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from tests.records import spec_from_config
from vllm_kimi_eagle.draft import checkpoint
from vllm_kimi_eagle.draft.draft_config import (
    CONVENTION_VALUES,
    IDS_KEY,
    MODELOPT_KEYS,
    QUANTIZATION_KEYS,
    ROPE_TYPES,
    TORCHSPEC_KEY,
    DraftConfig,
    DraftConfigError,
    parse_draft_config,
)
from vllm_kimi_eagle.draft.draft_report import draft_report
from vllm_kimi_eagle.draft.draft_spec import expected_tensors
from vllm_kimi_eagle.fixtures import variants

SOURCE = "/drafts/base/config.json"
BASE = variants.draft_config(variants.DRAFT_VARIANTS[0])
TARGET = dict(target_layers=variants.TARGET_LAYERS, target_hidden=256,
              target_vocab=variants.TARGET_CONFIG["vocab_size"], can_capture_after_last=True)
# The record's fields that it sets itself from the raw keys, never read under their name.
SET_FROM_RAW_KEYS = frozenset({"source", "torchspec_marker", "modelopt_marker",
                               "rope_blocks", "quantization_from", "field_refusals",
                               "rope_refusals", "unwritten"})


def _model_in(annotation) -> type[BaseModel] | None:
    """The record model a field holds (RopeScaling in ``RopeScaling | None``), if one."""
    for arg in (annotation, *typing.get_args(annotation)):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None


def _record_fields(model: type[BaseModel] = DraftConfig, under: tuple = ()) -> dict:
    """Every field of the record as a path into config.json (its alias where it has one)
    -> its annotation, the nested models' fields too."""
    found = {}
    for name, info in model.model_fields.items():
        if name in SET_FROM_RAW_KEYS:
            continue
        path = (*under, info.alias or name)
        found[path] = info.annotation
        if _model_in(info.annotation):
            found.update(_record_fields(_model_in(info.annotation), path))
    return found


# Keys the record reads into a field of another name: the older spellings of the
# quantization config (into quantization_config), and the training tools' fingerprints
# (into the markers; any value, or presence alone, counts).
RAW_KEYS = {
    **{(key,): DraftConfig.model_fields["quantization_config"].annotation
       for key in QUANTIZATION_KEYS[1:]},
    (TORCHSPEC_KEY,): Any,
    **{("eagle_config", key): Any for key in MODELOPT_KEYS},
}
TYPES = {**_record_fields(), **RAW_KEYS}
FIELDS = list(TYPES)
FIELD_IDS = [".".join(path) for path in FIELDS]
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=4),
    max_leaves=8)
# Values next to a field's edge: around a bound, an integer written as a float or a
# string, a float that is no number, the words the record knows and near spellings.
NEAR = (st.integers(-2, 3) | st.integers(-2, 3).map(float) | st.integers(-2, 3).map(str)
        | st.sampled_from([1.5, -0.5, 1e-300, math.inf, -math.inf, math.nan])
        | st.sampled_from(ROPE_TYPES + CONVENTION_VALUES + ("Output_Of_Layer", "YARN", ""))
        | st.lists(st.integers(-1, 7) | st.integers(-1, 7).map(float), max_size=4))
VALUES = JSON | NEAR


def _json_type(value) -> str:
    """The JSON type of a decoded value, integers told apart from other numbers."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    return {float: "float", str: "string", list: "array", dict: "object",
            type(None): "null"}[type(value)]


# The JSON types a scalar annotation takes: a float field takes an integer, as JSON does.
SCALAR_TYPES = {bool: {"boolean"}, int: {"integer"}, float: {"integer", "float"},
                str: {"string"}}


def _fits(value, annotation) -> bool:
    """Whether an accepted value has the JSON type of the field's annotation (a number
    field: finite), the items of a list included."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is Any:
        return True
    if origin is Annotated:
        return _fits(value, args[0])
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, arg) for arg in args)
    if annotation is type(None):
        return value is None
    if origin is list:
        return isinstance(value, list) and all(_fits(item, args[0]) for item in value)
    if origin is dict or _model_in(annotation):
        return isinstance(value, dict)
    return _json_type(value) in SCALAR_TYPES[annotation] and (
        not isinstance(value, float) or math.isfinite(value))


def _names(message: str, path: tuple) -> bool:
    """Whether a refusal names the field at ``path``: by its whole path, or (a block's own
    check, such as a rope block's type) by the block and the key in words."""
    def named(words):
        return re.search(rf"(?<![\w.]){re.escape(words)}(?!\w)", message) is not None

    if named(".".join(path)):
        return True
    *block, key = path
    return bool(block) and f"field '{'.'.join(block)}'" in message \
        and named(key.replace("_", " "))


def _write(config: dict, path: tuple, value) -> dict:
    """``config`` with the field at ``path`` set to ``value``; a block it does not write
    is written holding that field alone."""
    holder = config
    for key in path[:-1]:
        holder = holder.setdefault(key, {})
    holder[path[-1]] = value
    return config


def _mutated(path: tuple, value) -> dict:
    """The base draft's config.json with one field set."""
    return _write(copy.deepcopy(BASE), path, value)


def _base_tensors() -> dict:
    spec = spec_from_config(BASE, SOURCE)
    return {name: checkpoint.TensorInfo("/drafts/base/model.safetensors", shape,
                                        "I64" if name == "d2t" else "F32")
            for name, shape in expected_tensors(spec).items() if name != "d2t"}


BASE_REPORT = draft_report(parse_draft_config(BASE, SOURCE), _base_tensors(), **TARGET,
                           environ={})


def _parsed(config) -> tuple[str, object]:
    """("refused", message) or ("read", record); anything else raised fails the test."""
    try:
        return "read", parse_draft_config(config, SOURCE)
    except DraftConfigError as err:
        return "refused", str(err)


# ---- the fields generated are the record's ---------------------------------------------
def _models_in(record: BaseModel, under: tuple = ()):
    """(path, model) for the record and every model it holds, found by value."""
    yield under, record
    for name, value in record:
        if isinstance(value, BaseModel):
            yield from _models_in(value, (*under, type(record).model_fields[name].alias
                                          or name))


def test_every_field_of_the_record_is_generated():
    """Walked on a parsed record (each block written), not on the annotations that made
    FIELDS: a field the walk of the classes misses fails here."""
    record = parse_draft_config(_mutated(("rope_parameters", "rope_type"), "default"))
    models = dict(_models_in(record))
    assert set(models) == {(), ("eagle_config",), ("rope_scaling",), ("rope_parameters",)}
    for under, model in models.items():
        for name, info in type(model).model_fields.items():
            if name not in SET_FROM_RAW_KEYS:
                assert (*under, info.alias or name) in FIELDS, (under, name)


def _another(value):
    """A JSON value of the type of a record's value, and not equal to it."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + "-written"
    return [*value, "written"]


def test_the_fields_left_out_are_set_from_the_raw_keys_never_read():
    """Each written in config.json under its own name changes nothing: leaving them out
    of FIELDS hides no field the file sets."""
    base = parse_draft_config(BASE, SOURCE)
    written, left_out = copy.deepcopy(BASE), set()
    for under, model in _models_in(base):
        for name in SET_FROM_RAW_KEYS & set(type(model).model_fields):
            _write(written, (*under, name), _another(getattr(model, name)))
            left_out.add(name)
    assert left_out == SET_FROM_RAW_KEYS
    assert parse_draft_config(written, SOURCE).model_dump() == base.model_dump()


def _wrong_type(annotation):
    """A value of no JSON type the field takes: an array for an object, else an object."""
    return [1] if _fits({}, annotation) else {"wrong": 1}


@pytest.mark.parametrize("path", [p for p in FIELDS if TYPES[p] is not Any],
                         ids=[i for p, i in zip(FIELDS, FIELD_IDS) if TYPES[p] is not Any])
def test_each_field_is_read_where_it_is_generated(path):
    """A value of the wrong type at each generated path is refused naming that path: the
    generated value reaches the field, the base's block or not."""
    kind, message = _parsed(_mutated(path, _wrong_type(TYPES[path])))
    assert kind == "refused" and _names(message, path), message


# ---- generated values, every field -----------------------------------------------------
@pytest.mark.parametrize("path", FIELDS, ids=FIELD_IDS)
@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=VALUES)
@example(value=2.0)
@example(value=1.5)
@example(value="2")
@example(value=True)
@example(value=math.nan)
def test_a_malformed_field_is_refused_by_name_or_read_soundly(path, value):
    kind, found = _parsed(_mutated(path, value))
    if kind == "refused":
        assert found.startswith(SOURCE) and "\n" not in found.split(". Fix")[0]
        assert _names(found, path), (path, found)
        return
    # What is read has the field's JSON type: an integer field never took a float.
    assert _fits(value, TYPES[path]), (path, value)


# Fields that change which layers are captured without a problem to name: the ids, their
# convention, and the training tools' fingerprints (layer_ids.TOOL_EXPORTS).
READING_FIELDS = ("eagle_aux_hidden_state_layer_ids",
                  "eagle_aux_hidden_state_layer_ids_convention", "eagle_config",
                  "architectures", TORCHSPEC_KEY, *MODELOPT_KEYS)


# A report costs a parse, a spec and a layer-id decision: a third of the profile's
# examples per field keeps the file near 30 s in the suite.
@pytest.mark.parametrize("path", FIELDS, ids=FIELD_IDS)
@settings(deadline=None, max_examples=max(1, settings().max_examples // 3))
@given(value=VALUES)
def test_a_reading_the_report_accepts_is_the_base_reading_or_names_a_problem(path, value):
    """What parses either serves as the base draft does, or the report says what differs
    (a tensor that no longer fits, an id out of range, ...); the fields that change the
    forward pass without changing a tensor are the ones a spec comparison shows."""
    kind, record = _parsed(_mutated(path, value))
    if kind == "refused":
        return
    report = draft_report(record, _base_tensors(), **TARGET, environ={})
    if report.problems:
        return
    same_ids = report.decision.capture_ids == BASE_REPORT.decision.capture_ids
    assert same_ids or path[-1] in READING_FIELDS, (path, value)


@pytest.mark.parametrize("ids", [[1.5, 2.5, 3.5], ["2", "3", "5"], [[2], [3], [5]],
                                 {"a": 2}, [True, 3, 5], [2, 2, 5], [2.0, 3.0, 5.0]])
def test_ids_are_integers_never_truncated(ids):
    kind, message = _parsed(_mutated(("eagle_config", "eagle_aux_hidden_state_layer_ids"),
                                     ids))
    assert kind == "refused" and "eagle_config.eagle_aux_hidden_state_layer_ids" in message


# ---- each bounded field at its bound, written by hand -----------------------------------
# path -> (the value just past the bound, refused; the value at it, accepted). Written
# here, not read from the record, so that a bound moved by one fails.
INT_ABOVE_0 = (0, 1)
NUMBER_ABOVE_0 = (0.0, 5e-324)  # the smallest positive float
LIMITS = {
    **{(name,): INT_ABOVE_0 for name in (
        "hidden_size", "target_hidden_size", "intermediate_size", "num_attention_heads",
        "num_key_value_heads", "head_dim", "num_hidden_layers", "q_lora_rank",
        "kv_lora_rank", "qk_rope_head_dim", "v_head_dim", "vocab_size", "draft_vocab_size",
        "num_aux_hidden_states", "max_position_embeddings", "index_topk",
        "parallel_draft_step")},
    ("qk_nope_head_dim",): (-1, 0),
    ("sliding_window",): (-1, 0),
    **{(name,): NUMBER_ABOVE_0 for name in ("rms_norm_eps", "logit_scale", "rope_theta",
                                            "partial_rotary_factor")},
    **{(block, name): limit for block in ("rope_scaling", "rope_parameters")
       for name, limit in (("rope_theta", NUMBER_ABOVE_0), ("factor", NUMBER_ABOVE_0),
                           ("original_max_position_embeddings", INT_ABOVE_0),
                           ("partial_rotary_factor", NUMBER_ABOVE_0),
                           ("rope_dim", INT_ABOVE_0), ("mrope_section", ([-1], [0])))},
    (IDS_KEY,): ([-1], [0]),
    ("eagle_config", IDS_KEY): ([-1], [0]),
}


def _bound(annotation) -> bool:
    """Whether a field's annotation sets a lower bound (gt/ge), on the items of a list too."""
    for arg in typing.get_args(annotation):
        metadata = getattr(arg, "metadata", ())
        if any(isinstance(m, (annotated_types.Gt, annotated_types.Ge)) for m in metadata) \
                or _bound(arg):
            return True
    return False


def test_every_bounded_field_has_its_bound_written_here():
    assert set(LIMITS) == {path for path, annotation in TYPES.items() if _bound(annotation)}


@pytest.mark.parametrize("path", LIMITS, ids=[".".join(p) for p in LIMITS])
def test_a_bound_moved_by_one_is_seen(path):
    past, at = LIMITS[path]
    field = ".".join(path)
    assert _parsed(_write({}, path, at))[0] == "read"
    kind, message = _parsed(_write({}, path, past))
    assert kind == "refused" and f"field '{field}" in message, message
    assert ("greater than 0" if past == 0 else "at least 0") in message, message


INTEGER_LIMITS = [path for path, (_, at) in LIMITS.items() if not isinstance(at, float)]


@pytest.mark.parametrize("path", INTEGER_LIMITS, ids=[".".join(p) for p in INTEGER_LIMITS])
def test_an_integer_field_refuses_the_same_value_as_a_float(path):
    """1.0 for an integer field is refused, not truncated (its type written here too)."""
    at = LIMITS[path][1]
    as_float = [float(i) for i in at] if isinstance(at, list) else float(at)
    kind, message = _parsed(_write({}, path, as_float))
    assert kind == "refused" and "expected an integer" in message, message


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
