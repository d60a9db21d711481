"""Each draft class as vLLM builds and loads it from the tiny drafts (tests/class_probe.py:
vLLM's config path, the class its registry resolves, ``load_weights`` on the checkpoint;
no engine): the draft as built is the plan (``self_check.expected_draft``), every tensor
the checkpoint holds is loaded, and vLLM's in-tree class, on its own, does what each row of
``draft_class.IN_TREE_GAPS`` says on this release: what the plugin's refusals prevent."""

from __future__ import annotations

import json
import os
import re

import pytest

from tests.helpers import REPO, copy_draft, run_process, save_tensors
from vllm_kimi_eagle.compat import vllm_compat
from vllm_kimi_eagle.draft.draft_class import IN_TREE_GAPS
from vllm_kimi_eagle.draft.draft_config import read_draft_config
from vllm_kimi_eagle.draft.draft_positions import decide_positions
from vllm_kimi_eagle.draft.draft_spec import spec_from_config
from vllm_kimi_eagle.fixtures.variants import DRAFT_VARIANTS, LLAMA_DRAFT
from vllm_kimi_eagle.serving.self_check import differences, expected_draft

INSTALLED = vllm_compat.installed_vllm_version()


def probe(tiny: str, cases: dict, env: dict | None = None, patches=()) -> dict:
    request = json.dumps({"target": os.path.join(tiny, "target"), "cases": cases,
                          "patches": list(patches)})
    proc = run_process([os.path.join(REPO, "tests", "class_probe.py"), request], env,
                       timeout=900)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and lines, (proc.stdout[-2000:], proc.stderr[-4000:])
    return json.loads(lines[-1])


@pytest.fixture(scope="module")
def can_build():
    from tests.helpers import cpu_mla_engine_problem

    problem = cpu_mla_engine_problem()
    if problem:
        pytest.skip(f"vLLM's MLA attention cannot be built on this release's CPU build: "
                    f"{problem}")


@pytest.fixture(scope="module")
def edited(tiny, tmp_path_factory):
    """Tiny drafts edited into what no trained tiny draft is: each flag off with its tensor
    gone, a logit scale, an int8 copy (its scales must load), and the cases of the
    in-tree rows."""
    from vllm_kimi_eagle.fixtures.quantized import write_quantized_draft

    root = tmp_path_factory.mktemp("built")
    folders = {}

    def edit(name, base, config=None, drop=(), tensors=None):
        folder, weights = copy_draft(tiny, base, root / name)
        raw = json.load(open(os.path.join(folder, "config.json")))
        for key, value in (config or {}).items():
            if value == "(left out)":
                raw.pop(key, None)
            else:
                raw[key] = value
        json.dump(raw, open(os.path.join(folder, "config.json"), "w"))
        weights = {k: v for k, v in weights.items() if k not in drop}
        save_tensors(folder, tensors(weights) if tensors else weights)
        folders[name] = folder

    nested = json.load(open(os.path.join(tiny, "draft", "config.json")))["eagle_config"]
    edit("no hidden_norm", "draft", {"eagle_config": {
        **nested, "use_input_layernorm_in_first_layer": False}},
        drop=("layers.0.hidden_norm.weight",))
    edit("no final norm", "draft", {"eagle_config": {**nested, "use_last_layernorm": False}},
         drop=("norm.weight",))
    edit("logit scale", "draft", {"logit_scale": 2.0})
    edit("q_lora_rank left out", "draft", {"q_lora_rank": "(left out)"})
    edit("num_hidden_layers left out", "draft", {"num_hidden_layers": "(left out)"})
    edit("num_hidden_layers null", "draft", {"num_hidden_layers": None})
    edit("use_aux_norm for fc_norm", "draft-eagle3.1", {"fc_norm": "(left out)",
                                                        "use_aux_norm": True})
    edit("under model.", "draft", tensors=lambda w: {
        (k if k.startswith("lm_head") else f"model.{k}"): v for k, v in w.items()})
    edit("identity d2t", "draft", tensors=lambda w: {
        **w, "d2t": __import__("torch").zeros(512, dtype=__import__("torch").long)})
    edit("two ids at the top level", "draft", {
        "eagle_aux_hidden_state_layer_ids": [2, 5], "eagle_config": {
            k: v for k, v in nested.items() if k != "eagle_aux_hidden_state_layer_ids"}},
        tensors=lambda w: {**w, "fc.weight": w["fc.weight"][:, :512].contiguous()})
    edit("pruned without d2t", "draft-pruned", drop=("d2t", "t2d"))
    folders["int8"] = write_quantized_draft(os.path.join(tiny, "draft"), str(root / "int8"),
                                            "int8-channel")
    return folders


TRAINED = [v.name for v in DRAFT_VARIANTS if v.name != LLAMA_DRAFT]
IDENTITY_D2T = ("draft-torchspec", "draft-torchspec-vllm")
PLUGIN_CASES = ["no hidden_norm", "no final norm", "logit scale", "int8",
                "num_hidden_layers left out"]


def plan(folder: str, ours: bool) -> dict:
    config = read_draft_config(folder)
    positions = decide_positions(config, {})
    spec = spec_from_config(config, served_nope=positions.nope and ours)
    return expected_draft(spec, config, ours=ours, nope=positions.nope,
                          rope_theta=config.config_rope_theta)


@pytest.fixture(scope="module")
def plugin_built(tiny, edited, can_build):
    cases = {name: os.path.join(tiny, name) for name in TRAINED}
    cases.update({name: edited[name] for name in PLUGIN_CASES})
    return cases, probe(tiny, cases, patches=("quantization",))


def test_the_plugins_class_is_built_as_planned_and_loads_every_tensor(plugin_built):
    """Every trained tiny draft and every flag no trained draft has: NoPE, the gate, the
    norms, norm_output, norm_before_residual, d2t, the vocabulary, the logit scale, the
    rope base, the softmax scale, the captured states; and every checkpoint tensor,
    scales included, is in the model as loaded."""
    cases, results = plugin_built
    for name, folder in cases.items():
        found = results[name]
        assert "built" in found, (name, found)
        assert found["built"]["draft_class"] == \
            "vllm_kimi_eagle.serving.draft_model:Eagle3DeepseekV2ForCausalLM", name
        assert differences(plan(folder, ours=True), found["built"]) == [], name
        assert found["unloaded"] == [], (name, found["unloaded"])
        assert found["self_check"] == [], (name, found["self_check"])  # the worker's check
    assert results["draft-k3-gate"]["built"]["output_gate"]
    assert results["draft-k3-nope"]["built"]["nope"]
    assert not results["no hidden_norm"]["built"]["hidden_norm"]
    assert not results["no final norm"]["built"]["final_norm"]
    assert results["draft-pruned"]["d2t_values"] != [0] * 8


def test_vllms_class_serving_the_plugins_routes_is_built_as_planned(tiny, can_build):
    """With VLLM_KIMI_EAGLE_DRAFT=upstream, vLLM's class on the drafts it is allowed: the
    plan for vLLM's class (it rotates, it builds both norms) is what it builds, and it
    loads every tensor; a gated draft is refused before it is built."""
    cases = {name: os.path.join(tiny, name) for name in TRAINED}
    results = probe(tiny, cases, env={"VLLM_KIMI_EAGLE_DRAFT": "upstream"})
    [d2t_row] = [gap for gap in IN_TREE_GAPS if gap.field == "d2t"]
    for name, folder in cases.items():
        found = results[name]
        if name == "draft-k3-gate":
            assert "cannot load g_proj" in found["config_error"], found
            continue
        if name == "draft-specforge":  # vLLM makes it DeepSeek MTP without the plugin's class
            assert "Eagle3DeepSeekMTPModel" in found["config_error"], found
            continue
        # TorchSpec's and SpecForge's exports carry the identity d2t of a full vocabulary
        if name in IDENTITY_D2T and d2t_row.holds_on(INSTALLED):
            assert "d2t: a draft whose vocabulary is the target's gets no d2t" in \
                found["config_error"], (name, found)
            continue
        assert "built" in found, (name, found)
        assert found["built"]["draft_class"].startswith(
            "vllm.model_executor.models.deepseek_eagle3:"), (name, found)
        assert differences(plan(folder, ours=False), found["built"]) == [], name
        assert found["unloaded"] == [], (name, found["unloaded"])
        assert found["self_check"] == [], (name, found["self_check"])


# What vLLM's class alone does with the draft each in-tree row guards, on this release:
# (case, what shows the failure in the probe's result).
ROWS = {
    "mla_use_nope": ("draft-k3-nope", lambda r: r["built"]["nope"] is False),
    "mla_use_output_gate": ("draft-k3-gate", lambda r: "g_proj" in r["load_error"]),
    "eagle_config.use_input_layernorm_in_first_layer": (
        "no hidden_norm", lambda r: r["built"]["hidden_norm"] is True),
    "eagle_config.use_last_layernorm": ("no final norm", lambda r: r["built"]["final_norm"]),
    "use_aux_norm": ("use_aux_norm for fc_norm", lambda r: "fc_norm" in r["load_error"]),
    "q_lora_rank": ("q_lora_rank left out", lambda r: "load_error" in r),
    "q_lora_rank (null)": ("q_lora_rank null", lambda r: "load_error" in r),
    "num_hidden_layers": ("num_hidden_layers left out", lambda r: "load_error" in r
                          or r["unloaded"] or r.get("layers", 1) > 1),
    # transformers' strict config types refuse it before vLLM builds a class
    "num_hidden_layers (null)": ("num_hidden_layers null", lambda r: "load_error" in r
                                 or "num_hidden_layers" in r.get("config_error", "")),
    "tensor names": ("under model.", lambda r: "load_error" in r),
    "eagle_aux_hidden_state_layer_ids": ("two ids at the top level",
                                         lambda r: "load_error" in r),
    "d2t": ("identity d2t", lambda r: "load_error" in r),
    "the rope type (default)": ("default rope", lambda r: "load_error" in r),
}


def test_every_in_tree_row_shows_what_it_prevents_on_this_release(tiny, edited, can_build,
                                                                   tmp_path):
    """vLLM alone (VLLM_PLUGINS="") builds its class from each row's draft: where the row
    holds on this release, the failure it names shows (a load error, a weight left
    uninitialised, a NoPE draft rotated, a norm it was trained without); where it does
    not, the class loads the draft."""
    assert {gap.field for gap in IN_TREE_GAPS} == set(ROWS), "give each row a case"
    folders = {**edited}
    folders["draft-k3-nope"] = os.path.join(tiny, "draft-k3-nope")
    folders["draft-k3-gate"] = os.path.join(tiny, "draft-k3-gate")
    folder, weights = copy_draft(tiny, "draft", tmp_path / "q_lora_rank null")
    raw = json.load(open(os.path.join(folder, "config.json")))
    json.dump({**raw, "q_lora_rank": None}, open(os.path.join(folder, "config.json"), "w"))
    import torch

    for part in ("q_a_proj", "q_a_layernorm", "q_b_proj"):
        weights.pop(f"layers.0.self_attn.{part}.weight")
    weights["layers.0.self_attn.q_proj.weight"] = torch.zeros(768, 512)
    save_tensors(folder, weights)
    folders["q_lora_rank null"] = folder
    folder, weights = copy_draft(tiny, "draft", tmp_path / "default rope")
    raw = json.load(open(os.path.join(folder, "config.json")))
    raw.pop("rope_scaling")
    json.dump(raw, open(os.path.join(folder, "config.json"), "w"))
    folders["default rope"] = folder
    cases = {case: folders[case] for case, _ in ROWS.values()}
    results = probe(tiny, cases, env={"VLLM_PLUGINS": ""})
    for gap in IN_TREE_GAPS:
        case, fails = ROWS[gap.field]
        found = results[case]
        assert "config_error" not in found or gap.field == "num_hidden_layers (null)", \
            (gap.field, found)
        shown = bool(fails(found))
        print(f"\n{gap.field} ({case}): holds on {INSTALLED}: {gap.holds_on(INSTALLED)}; "
              f"vLLM alone: {found.get('load_error', 'loaded')[:160]}")
        assert shown is gap.holds_on(INSTALLED), (gap.field, found)


def test_the_full_vocabulary_d2t_row_reads_this_releases_own_file():
    """Where this release's CPU build cannot build the class (0.28-0.31), its
    deepseek_eagle3.py tells whether it builds a d2t for a full vocabulary."""
    import importlib.util

    module, _ = vllm_compat.IN_TREE_MLA_DRAFT
    source = open(importlib.util.find_spec(module).origin).read()
    conditional = re.search(r"if self\.config\.draft_vocab_size != target_vocab_size:\s*\n"
                            r"\s*self\.draft_id_to_target_id = nn\.Parameter", source)
    [row] = [gap for gap in IN_TREE_GAPS if gap.field == "d2t"]
    assert bool(conditional) is row.holds_on(INSTALLED), INSTALLED
