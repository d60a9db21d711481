"""Start-up and ``inspect`` decide the same class for every quantization config real
exporters write (tests/data), under every value of the switches that decide it: vLLM's
real create_engine_config() with the plugin's hook against ``inspect_draft``, on copies of
the tiny draft carrying each config. Where vLLM's class serves, the hook gives the draft
the architecture name registered to vLLM's class; where vLLM itself refuses a config, the
refusal is vLLM's, never the plugin's."""

from __future__ import annotations

import json
import os

import pytest

from tests.helpers import run_python
from vllm_kimi_eagle.draft.architectures import IN_TREE_ALIAS

DATA = os.path.join(os.path.dirname(__file__), os.pardir, "data",
                    "exporter_quantization_configs.json")
NOPE_VALUES = (None, "on")

PROBE = """
import json, os, shutil
from vllm.engine.arg_utils import EngineArgs
from vllm_kimi_eagle.draft.draft_config import QUANT_FILE
from vllm_kimi_eagle.tools.inspect_draft import inspect_draft

tiny, work, nope_values = {tiny!r}, {work!r}, {nope_values!r}
exports = json.load(open({data!r}))["configs"] + [
    {{"name": "unquantized", "config_key": "quantization_config", "quantization_config": None}}]
base = os.path.join(tiny, "draft")
with open(os.path.join(base, "config.json")) as f:
    config = json.load(f)
results = []
for export in exports:
    folder = os.path.join(work, export["name"])
    os.makedirs(folder, exist_ok=True)
    os.symlink(os.path.join(base, "model.safetensors"), os.path.join(folder, "model.safetensors"))
    written = dict(config)
    if export["config_key"] == QUANT_FILE:
        with open(os.path.join(folder, QUANT_FILE), "w") as f:
            json.dump(export["quantization_config"], f)
    elif export["quantization_config"] is not None:
        written[export["config_key"]] = export["quantization_config"]
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(written, f)
    for nope in nope_values:
        os.environ.pop("VLLM_KIMI_EAGLE_DRAFT_NOPE", None)
        if nope:
            os.environ["VLLM_KIMI_EAGLE_DRAFT_NOPE"] = nope
        found = {{"name": export["name"], "nope": nope}}
        try:
            built = EngineArgs(
                model=os.path.join(tiny, "target"), max_model_len=256,
                speculative_config={{"method": "eagle3", "model": folder,
                                     "num_speculative_tokens": 3}},
            ).create_engine_config()
        except Exception as err:
            found["error"] = f"{{type(err).__name__}}: {{err}}"
        else:
            draft = built.speculative_config.draft_model_config
            found["architectures"] = list(draft.hf_config.architectures)
            found["resolved"] = draft.architecture
        report = inspect_draft(folder, os.path.join(tiny, "target"), dict(os.environ))
        found["inspect"] = {{"served_by": report.get("served_by"),
                             "problems": report["problems"]}}
        results.append(found)
print(json.dumps({{"results": results}}))
"""

PLUGIN_REFUSALS = ("DraftRefusedError", "PluginHookError")
# The plugin's refusal of a scheme this machine's vLLM build has no kernel for (a W4A16
# draft on a CPU without AVX-512: quantization.serving_problem); inspect judges the draft,
# start-up the draft on this machine.
NO_KERNEL_HERE = "kernel, which this build of vLLM does not have"
# The schemes whose scales the plugin knows (quantization.SCHEMES).
LOADED_BY_THE_PLUGIN = {"ct-0.17-w8a8-int8", "ct-0.9-w8a8-int8", "deepseek-v3-fp8-block",
                        "transformers-finegrained-fp8"}


SWITCHES = {"plugin": {"VLLM_KIMI_EAGLE_DRAFT": "plugin"},
            "upstream": {"VLLM_KIMI_EAGLE_DRAFT": "upstream"},
            "off": {"VLLM_KIMI_EAGLE": "0"}}


@pytest.mark.parametrize("asked", list(SWITCHES))
def test_start_up_and_inspect_decide_the_same_class(tiny, tmp_path, asked):
    env = SWITCHES[asked]
    result = run_python(PROBE.format(tiny=tiny, work=str(tmp_path), data=DATA,
                                     nope_values=NOPE_VALUES), env=env, timeout=900)
    runs = result["results"]
    assert len(runs) == 2 * (len(json.load(open(DATA))["configs"]) + 1)
    served = {"plugin": 0, "vllm": 0, "refused": 0, "vllm refused": 0, "no kernel here": 0}
    for run in runs:
        where = f"{run['name']} (NoPE {run['nope']})"
        inspected = run["inspect"]
        decided = inspected["served_by"]
        assert decided is not None, (where, inspected)
        error = run.get("error", "")
        if error and not error.startswith(PLUGIN_REFUSALS):
            # vLLM's own refusal of the config (a platform without the scheme, say): only
            # where the plugin decided vLLM's class serves the draft.
            assert decided["class"] == "vllm" and not decided["refused"], (where, error)
            served["vllm refused"] += 1
            continue
        if NO_KERNEL_HERE in error and not inspected["problems"]:
            assert error.startswith("DraftRefusedError") and decided["class"] == "vllm", \
                (where, error)
            served["no kernel here"] += 1
            continue
        if inspected["problems"]:
            assert error.startswith("DraftRefusedError"), (where, inspected, error)
            assert any(problem.split("\n")[0][:60] in error
                       for problem in inspected["problems"]), (where, inspected, error)
            served["refused"] += 1
            continue
        assert not error, (where, error)
        # vLLM's cached architecture follows the name the worker builds a class for.
        assert run["resolved"] == run["architectures"][0], (where, run)
        if decided["class"] == "vllm":
            expected = [IN_TREE_ALIAS] if asked == "plugin" else ["Eagle3DeepseekV2ForCausalLM"]
            assert run["architectures"] == expected, (where, run)
            served["vllm"] += 1
        else:
            assert asked == "plugin" and run["architectures"] != [IN_TREE_ALIAS], (where, run)
            served["plugin"] += 1
    print(f"\n{env}: {served}")
    if asked == "plugin":
        # the unquantized draft, hand-offs, NoPE refusals
        assert served["plugin"] == 2 and served["vllm"] > 0 and served["refused"] > 0
        assert "is served by vLLM's in-tree draft class: its quantization is" in result["_log"]
    else:
        assert served["plugin"] == 0
        # These copies hold the unquantized draft's tensors: for the schemes whose scales
        # the plugin knows, vLLM's class would compute with scales never loaded, and the
        # checkpoint check refuses them on this route too; the others are vLLM's to judge.
        refused = {run["name"] for run in runs if run.get("error", "").startswith(
            "DraftRefusedError") and NO_KERNEL_HERE not in run["error"]}
        if asked == "upstream":
            assert refused == LOADED_BY_THE_PLUGIN, refused
            assert all("weight_scale" in run["error"] and "vLLM's in-tree class would leave "
                       "the scale at its initial value" in run["error"]
                       for run in runs if run["name"] in refused)
        else:
            assert served["refused"] == 0
