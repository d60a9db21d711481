"""vllm-kimi-eagle inspect on Kimi-K3 draft configs written as the public recipe writes them
(lightseekorg/TorchSpec configs/draft_models/kimi_k3_eagle3_mla.json) and as the shipped
eagle3.1 draft numbers its layers, against a target config with K3's 93 layers, named by hub
ids from a Hugging Face cache, offline: both numberings capture the same physical layers,
and the report says what vLLM's in-tree class would do wrong with such a draft."""

from __future__ import annotations

import json

import pytest

from tests.helpers import place_in_hf_cache, run_cli

# The recipe's fields (see ../docs/checkpoints.md#kimi-k3-drafts); config.json only.
K3_DRAFT = {
    "architectures": ["Eagle3DeepseekV2ForCausalLM"], "model_type": "kimi_k2",
    "hidden_size": 7168, "num_attention_heads": 64, "num_key_value_heads": 64,
    "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64, "v_head_dim": 128, "mla_use_nope": True,
    "intermediate_size": 18432, "num_hidden_layers": 1, "hidden_act": "silu",
    "rms_norm_eps": 1e-6, "vocab_size": 163840, "draft_vocab_size": 163840,
    "rope_theta": 50000, "max_position_embeddings": 1048576, "torch_dtype": "bfloat16",
    "rope_scaling": {"type": "yarn", "factor": 32, "original_max_position_embeddings": 32768,
                     "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0},
    "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 45, 89],
                     "use_aux_hidden_state": True,
                     "use_input_layernorm_in_first_layer": True,
                     "use_last_layernorm": True, "use_mtp_layernorm": False},
}
# The K3 target's text config as far as inspect reads it (layers, width, vocabulary).
K3_TARGET = {"architectures": ["KimiK3ForConditionalGeneration"], "model_type": "kimi_k3",
             "text_config": {"model_type": "kimi_k3", "num_hidden_layers": 93,
                             "hidden_size": 7168, "vocab_size": 163840}}
NUMBERINGS = {"tiny-org/k3-recipe": [1, 45, 89], "tiny-org/k3-shipped": [2, 46, 90]}


def with_ids(layer_ids: list) -> dict:
    eagle = dict(K3_DRAFT["eagle_config"], eagle_aux_hidden_state_layer_ids=layer_ids)
    return dict(K3_DRAFT, eagle_config=eagle)


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    root = tmp_path_factory.mktemp("k3")
    cache = str(root / "hf-cache")
    configs = {"tiny-org/k3-target": K3_TARGET,
               **{repo: with_ids(ids) for repo, ids in NUMBERINGS.items()}}
    for repo, config in configs.items():
        folder = root / repo.split("/")[1]
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(config))
        place_in_hf_cache(cache, repo, str(folder))
    return {"HF_HUB_CACHE": cache, "HF_HUB_OFFLINE": "1"}


@pytest.mark.parametrize("draft", sorted(NUMBERINGS))
def test_both_numberings_capture_the_same_layers_of_k3(hub, draft):
    proc = run_cli("inspect", draft, "--target", "tiny-org/k3-target", "--json", env=hub,
                   timeout=120)
    report = json.loads(proc.stdout.splitlines()[-1])
    assert report["found_in"] == "Hugging Face cache"
    assert report["target"]["num_hidden_layers"] == 93
    assert report["layer_ids"] == NUMBERINGS[draft]
    assert report["capture_ids"] == [2, 46, 90]
    assert report["attention"]["positions"] == "NoPE"
    assert report["attention"]["positions_ambiguous"] is True
    assert any(gap.startswith("mla_use_nope") and "it rotates the rope dims" in gap
               for gap in report["in_tree_class"])
    # A cached config.json alone is inspected as it is (the weights are checked at load).
    assert proc.returncode == 0 and report["problems"] == [], report["problems"]


def test_a_refused_k3_field_is_named(hub, tmp_path):
    config = with_ids([1, 45, 89])
    config["eagle_config"]["use_mtp_layernorm"] = True
    (tmp_path / "config.json").write_text(json.dumps(config))
    proc = run_cli("inspect", str(tmp_path), "--json", env=hub, timeout=120)
    assert proc.returncode == 1
    problems = json.loads(proc.stdout.splitlines()[-1])["problems"]
    assert any("use_mtp_layernorm" in p for p in problems), problems
