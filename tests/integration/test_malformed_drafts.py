"""Malformed drafts, as a new user meets them: ``inspect`` and a server's start-up give the
same one-line cause naming the file and the field, never a traceback from int(), torch
or pydantic; and a fault inside the plugin's hook names itself as the plugin's, not as a
verdict on the draft. Start-up is vLLM's own config path (create_engine_config), one
process for every case; the generated cases are in tests/unit/test_draft_config_properties.py."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from tests.helpers import run_python
from vllm_kimi_eagle.tools.inspect_draft import inspect_draft


def _nested_ids(ids):
    return lambda c: c["eagle_config"].update(eagle_aux_hidden_state_layer_ids=ids)


def _header_dtype(folder):
    """model.safetensors with the first tensor's dtype written as F99 (same length)."""
    path = os.path.join(folder, "model.safetensors")
    data = bytearray(open(path, "rb").read())
    at = data.index(b'"dtype":"F32"')
    data[at:at + 13] = b'"dtype":"F99"'
    os.unlink(path)
    open(path, "wb").write(bytes(data))


def _corrupt_index(folder):
    """A model.safetensors.index.json cut short beside the draft's model.safetensors."""
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        f.write('{"weight_map": {"fc.weight": "model.safet')


def _cut_in_half(folder):
    path = os.path.join(folder, "model.safetensors")
    data = open(path, "rb").read()
    os.unlink(path)
    open(path, "wb").write(data[: len(data) // 2])


# name -> (base draft folder, edit of config.json or of the folder, words of the cause)
CASES = {
    "string ids": ("draft", _nested_ids(["a", "b", "c"]),
                   ["eagle_config.eagle_aux_hidden_state_layer_ids[0]", '"a"', "an integer"]),
    "float ids": ("draft", _nested_ids([1.5, 2.5, 3.5]), ["1.5", "an integer"]),
    "two id lists": ("draft", lambda c: c.update(eagle_aux_hidden_state_layer_ids=[1, 2, 4]),
                     ["two different id lists", "[1, 2, 4]", "[2, 3, 5]"]),
    "rope_theta text": ("draft", lambda c: c.update(rope_theta="abc"),
                        ["field 'rope_theta'", '"abc"', "a number"]),
    "kv_lora_rank text": ("draft", lambda c: c.update(kv_lora_rank="512"),
                          ["field 'kv_lora_rank'", '"512"']),
    "eagle_config text": ("draft", lambda c: c.update(eagle_config="yes"),
                          ["field 'eagle_config'", "an object"]),
    "yarn factor text": ("draft", lambda c: c["rope_scaling"].update(factor="x"),
                         ["rope_scaling.factor", '"x"']),
    "nope text": ("draft", lambda c: c.update(mla_use_nope="sometimes"),
                  ["field 'mla_use_nope'", "true or false"]),
    "convention against the tool": (
        "draft-modelopt",
        lambda c: c.update(eagle_aux_hidden_state_layer_ids_convention="input-of"),
        ["says 'input-of'", "Model-Optimizer", "VLLM_KIMI_EAGLE_LAYER_IDS=input-of"]),
    "dtype F99": ("draft", _header_dtype, ["dtype 'F99'", "model.safetensors"]),
    "file cut in half": ("draft", _cut_in_half, ["model.safetensors", "end past the file"]),
    "the plugin's own field": ("draft", lambda c: c.update(vllm_kimi_eagle_served={
        "raw": {}, "source": "x", "capture_ids": [1, 2, 3], "nope": False, "rope_theta": None}),
        ["field 'vllm_kimi_eagle_served' is there", "only the plugin writes it"]),
    "index cut short": ("draft", _corrupt_index,
                        ["model.safetensors.index.json", "not valid JSON"]),
    "two rope blocks": ("draft", lambda c: c.update(
        rope_parameters={"rope_type": "default", "rope_theta": 20000.0}),
        ["rope_scaling gives yarn", "rope_parameters gives default", "serves rope_scaling"]),
    "linear rope": ("draft", lambda c: c.update(rope_scaling={"type": "linear", "factor": 4.0}),
                    ["field 'rope_scaling.type' is 'linear'", "DeepSeek YaRN"]),
    "fc_norm against use_aux_norm": ("draft", lambda c: c.update(fc_norm=False, use_aux_norm=True),
                                     ["fc_norm is false and use_aux_norm is true"]),
    "draft vocabulary too large": ("draft", lambda c: c.update(
        draft_vocab_size=c["vocab_size"] + 1), ["draft_vocab_size is", "a draft vocabulary"]),
    "two states for three ids": ("draft", lambda c: c.update(num_aux_hidden_states=2),
                                 ["num_aux_hidden_states is 2", "lists 3 layer(s)"]),
    "config.json truncated": ("draft", "truncate", ["config.json", "not valid JSON"]),
}


@pytest.fixture(scope="module")
def drafts(tiny, tmp_path_factory):
    root = tmp_path_factory.mktemp("malformed")
    folders = {}
    for name, (base, edit, _) in CASES.items():
        folder = str(root / name.replace(" ", "-"))
        shutil.copytree(os.path.join(tiny, base), folder)
        path = os.path.join(folder, "config.json")
        text = open(path).read()
        if edit == "truncate":
            text = text[: len(text) // 2]
        elif edit in (_header_dtype, _cut_in_half, _corrupt_index):
            edit(folder)
        else:
            config = json.loads(text)
            edit(config)
            text = json.dumps(config)
        open(path, "w").write(text)
        folders[name] = folder
    return folders


STARTUP = """
import json
from vllm.engine.arg_utils import EngineArgs
results = {{}}
for name, draft in json.loads({drafts!r}).items():
    try:
        EngineArgs(model={target!r}, max_model_len=256, speculative_config={{
            "method": "eagle3", "model": draft, "num_speculative_tokens": 3}}
            ).create_engine_config()
        results[name] = "accepted"
    except Exception as err:
        results[name] = f"{{type(err).__name__}}: {{err}}"
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def startup(tiny, drafts):
    return run_python(STARTUP.format(drafts=json.dumps(drafts),
                                     target=os.path.join(tiny, "target")))


@pytest.mark.parametrize("name", sorted(CASES))
def test_inspect_and_start_up_give_the_same_cause(tiny, drafts, startup, name):
    words = CASES[name][2]
    report = inspect_draft(drafts[name], os.path.join(tiny, "target"), environ={})
    assert report["problems"], f"{name}: inspect found no problem"
    cause = next((p for p in report["problems"] if all(w in p for w in words)), None)
    assert cause is not None, (name, report["problems"])
    assert startup[name].startswith("DraftRefusedError: "), (name, startup[name][:300])
    # The same sentence, at start-up as in inspect; one line per problem.
    assert cause.splitlines()[0] in startup[name], (name, cause, startup[name][:600])
    for noise in ("Traceback", "invalid literal", "errors.pydantic.dev", "TypeError:"):
        assert noise not in startup[name].split("(vLLM's own error")[0], (name, noise)


# What the plugin's class refuses but vLLM alone would serve: with VLLM_KIMI_EAGLE_DRAFT=
# upstream nothing of the plugin refuses them (vLLM's in-tree class is theirs to judge).
# A quantization only vLLM's class loads is handed to it without the switch
# (test_draft_class_agreement.py).
VLLMS_TO_JUDGE = ("two rope blocks", "linear rope", "fc_norm against use_aux_norm")


def test_what_vllm_alone_would_serve_is_left_to_vllm_with_the_switch(tiny, drafts):
    upstream = run_python(STARTUP.format(
        drafts=json.dumps({name: drafts[name] for name in VLLMS_TO_JUDGE}),
        target=os.path.join(tiny, "target")), env={"VLLM_KIMI_EAGLE_DRAFT": "upstream"})
    for name in VLLMS_TO_JUDGE:
        assert not upstream[name].startswith(("DraftRefusedError", "PluginHookError")), \
            (name, upstream[name][:400])
    # The plugin did act on each draft (its layer ids), so its hook ran and let it pass.
    assert upstream["_log"].count("vllm-kimi-eagle: draft ids") == len(VLLMS_TO_JUDGE), \
        upstream["_log"][-3000:]


FAULT = """
import json
import vllm_kimi_eagle.serving.draft_plan as plan
def broken(*args, **kwargs):
    raise KeyError("a field vLLM renamed")
plan.draft_report = broken
from vllm.engine.arg_utils import EngineArgs
try:
    EngineArgs(model={target!r}, max_model_len=256, speculative_config={{
        "method": "eagle3", "model": {draft!r}, "num_speculative_tokens": 3}}
        ).create_engine_config()
    print(json.dumps({{"error": None}}))
except Exception as err:
    print(json.dumps({{"error": f"{{type(err).__name__}}: {{err}}"}}))
"""


def test_a_fault_in_the_hook_names_itself_not_the_draft(tiny):
    from vllm_kimi_eagle.compat import vllm_compat

    error = run_python(FAULT.format(target=os.path.join(tiny, "target"),
                                    draft=os.path.join(tiny, "draft")))["error"]
    assert error is not None and error.startswith("PluginHookError: "), error
    for words in ("fault of the plugin, not a verdict on your draft", "VLLM_KIMI_EAGLE=0",
                  f"vLLM {vllm_compat.installed_vllm_version()}", "a field vLLM renamed"):
        assert words in error, (words, error)
