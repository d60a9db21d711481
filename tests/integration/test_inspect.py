"""vllm-kimi-eagle inspect on the tiny drafts: the layer-id decision, the layout, the problems
(its report on the K2.5 target: tests/integration/test_k25_config.py)."""

from __future__ import annotations

import json
import os
import subprocess

from tests.helpers import run_cli


def inspect(*args: str) -> subprocess.CompletedProcess:
    return run_cli("inspect", *args, timeout=120)


def test_inspect_reports_the_decision_as_json(tiny):
    proc = inspect(os.path.join(tiny, "draft-output-of"), "--target",
                   os.path.join(tiny, "target"), "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["architecture"] == "Eagle3DeepseekV2ForCausalLM"
    assert report["model_type"] == "kimi_k2"
    assert report["layer_ids"] == [1, 2, 4]
    assert report["convention"] == "output-of"
    assert report["capture_ids"] == [2, 3, 5]
    assert report["problems"] == []
    assert report["layout"]["layer_prefix"] == "layers.0."


def test_inspect_text_report_and_layouts(tiny):
    proc = inspect(os.path.join(tiny, "draft-pruned"), "--target", os.path.join(tiny, "target"))
    assert proc.returncode == 0, proc.stderr
    assert "d2t True" in proc.stdout and "vLLM captures [2, 3, 5]" in proc.stdout
    shared = json.loads(inspect(os.path.join(tiny, "draft-shared"), "--json").stdout)
    assert shared["layout"]["embed_tokens"] is False and shared["layout"]["lm_head"] is False
    sharded = json.loads(inspect(os.path.join(tiny, "draft-sharded-bf16"), "--json").stdout)
    assert sharded["layout"]["files"] == 3 and "BF16" in sharded["layout"]["dtypes"]


def test_inspect_lists_problems_and_exits_nonzero(tiny, tmp_path):
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(os.path.join(tiny, "draft"), bad)
    config = json.loads((bad / "config.json").read_text())
    config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [2, 3, 9]
    config["fc_norm"] = True  # the checkpoint has no fc_norm weights
    (bad / "config.json").write_text(json.dumps(config))
    proc = inspect(str(bad), "--target", os.path.join(tiny, "target"), "--json")
    assert proc.returncode == 1
    problems = json.loads(proc.stdout)["problems"]
    assert any("[2, 3, 9]" in p and "6 layers" in p for p in problems), problems
    assert any("'fc_norm.0.weight'" in p and "missing" in p for p in problems), problems
