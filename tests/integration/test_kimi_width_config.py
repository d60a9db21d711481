"""The Kimi-width drafts (fixtures/kimi_width.py) without their weights: config.json and
every shard's safetensors header, the data a hole (sparse files, no disk), through
``inspect`` and through vLLM's real create_engine_config() with the plugin's hook. What
``make kimi-width`` serves at 21 GB, read here at Kimi's sizes in seconds: the multi-shard
headers of 6 GB drafts, a 32000-token head with d2t, K3's NoPE and numbering."""

from __future__ import annotations

import json
import os

import pytest

from tests.helpers import probe_engine_config, run_cli
from vllm_kimi_eagle.fixtures import kimi_width as kw

# What inspect must read from each draft's headers and config.
EXPECTED = {
    "draft-k26-eagle3.1": {"files": 2, "draft_vocab": 163840, "convention": "input-of",
                           "nope": False, "tool": None},
    "draft-modelopt-32k": {"files": 1, "draft_vocab": 32000, "convention": "output-of",
                           "nope": False, "tool": "Model-Optimizer"},
    "draft-k3-nope": {"files": 2, "draft_vocab": 163840, "convention": "output-of",
                      "nope": True, "tool": None},
}


@pytest.fixture(scope="module")
def headers(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("kimi-width") / "models")
    kw.write_models(folder, kw.KIMI, data=False)
    return folder


@pytest.mark.parametrize("name", kw.DRAFT_NAMES)
def test_inspect_reads_each_kimi_width_draft_at_its_size(headers, name):
    proc = run_cli("inspect", os.path.join(headers, name), "--target",
                   os.path.join(headers, "target"), "--json", timeout=120)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    want = EXPECTED[name]
    assert report["problems"] == []
    assert report["capture_ids"] == list(kw.CAPTURE), report
    assert report["layout"]["files"] == want["files"]
    assert report["draft_vocab_size"] == want["draft_vocab"]
    assert report["mla"]["hidden_size"] == 7168 and report["mla"]["num_attention_heads"] == 64
    assert report["target"]["vocab_size"] == 163840
    assert report["convention"] == want["convention"]
    assert (report["attention"]["positions"] == "NoPE") is want["nope"], report["attention"]
    assert report["training_tool"] == want["tool"]


@pytest.mark.parametrize("name", ["draft-k26-eagle3.1", "draft-modelopt-32k"])
def test_the_hook_reads_multi_gb_headers_and_sets_the_capture(headers, name):
    result = probe_engine_config(os.path.join(headers, "target"), os.path.join(headers, name))
    assert "error" not in result, result
    assert result["use_mla"] is True and result["target_use_mla"] is True
    assert result["top_level_layer_ids"] == list(kw.CAPTURE)
    assert f"vLLM will capture the inputs of layers {list(kw.CAPTURE)}" in result["_log"]
