"""The Kimi-cost target and its drafts through real create_engine_config() (no weights):
each draft, whatever numbering its config uses, makes vLLM capture Kimi's [2, 30, 58]; and
inspect says how it decided (tokens and acceptance: tests/e2e/test_kimi_cost_e2e.py)."""

from __future__ import annotations

import json
import os

import pytest

from tests.helpers import probe_engine_config, run_cli
from vllm_kimi_eagle.fixtures import kimi_cost

# draft folder -> the rule inspect names for its ids
RULES = {"draft-kimi-cost": "first id is not 1",
         "draft-kimi-cost-output-of": "first id is 1",
         "draft-kimi-cost-eagle3.1": "first id is not 1"}


@pytest.mark.parametrize("draft", [name for name, _, _ in kimi_cost.DRAFTS])
def test_every_kimi_cost_draft_captures_kimis_layers(tiny, draft):
    result = probe_engine_config(os.path.join(tiny, kimi_cost.NAME), os.path.join(tiny, draft))
    assert result["top_level_layer_ids"] == kimi_cost.KIMI_AUX_LAYER_IDS, result
    assert result["use_mla"] and result["target_use_mla"]


@pytest.mark.parametrize("draft", sorted(RULES))
def test_inspect_reads_kimis_numbering(tiny, draft):
    proc = run_cli("inspect", os.path.join(tiny, draft), "--target",
                   os.path.join(tiny, kimi_cost.NAME), "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout.splitlines()[-1])
    assert report["capture_ids"] == kimi_cost.KIMI_AUX_LAYER_IDS
    assert report["target"]["num_hidden_layers"] == 61
    assert RULES[draft] in report["convention_reason"], report["convention_reason"]
    assert not report["problems"]


def test_kimi_cost_target_is_the_target_deeper_and_wider(tiny):
    with open(os.path.join(tiny, kimi_cost.NAME, "config.json")) as f:
        deep = json.load(f)
    with open(os.path.join(tiny, "target", "config.json")) as f:
        base = json.load(f)
    assert deep == kimi_cost.deep_config(base)
    assert deep["num_hidden_layers"] == 61 and deep["n_shared_experts"] == kimi_cost.SHARED_EXPERTS
