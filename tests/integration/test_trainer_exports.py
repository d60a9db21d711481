"""Drafts as the training tools export them, read as each tool meant them.

The base draft is written by ``build-tiny`` in the layouts of NVIDIA Model-Optimizer,
TorchSpec (native and ``--vllm``) and SpecForge (``fixtures/trainer_exports.py``), plus a
draft trained on other layers (output-of ids [2, 3, 4], first id not 1) exported by
Model-Optimizer's rules and, with the same weights, given explicit ids. Here what the
plugin reads in each (configs and safetensors headers only) and the rope base it reports;
served by real engines: tests/e2e/test_trainer_exports_e2e.py.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from tests.helpers import EXPORTS, LATE_CAPTURE, LATE_EXPORT
from vllm_kimi_eagle.draft.layer_ids import CONVENTION_KEY
from vllm_kimi_eagle.draft.rope_override import ROPE_THETA_ENV
from vllm_kimi_eagle.tools.inspect_draft import format_report, inspect_draft

BASE = "draft"


def _inspect(tiny: str, draft: str) -> dict:
    return inspect_draft(os.path.join(tiny, draft), os.path.join(tiny, "target"), environ={})


@pytest.mark.parametrize("draft", [*EXPORTS, LATE_EXPORT])
def test_each_export_is_read_as_its_tool_meant(tiny, draft):
    tool, capture = EXPORTS.get(draft, ("Model-Optimizer", LATE_CAPTURE))
    report = _inspect(tiny, draft)
    print(f"\n{draft}: {report['decision']}")
    assert report["problems"] == []
    assert (report["training_tool"], report["convention_rule"]) == (tool, "tool")
    assert report["capture_ids"] == capture and report["ambiguous"] is False
    text = format_report(report)
    assert f"trained with  {tool}" in text and "by rule tool" in text


def test_what_each_tool_wrote(tiny):
    """The fixtures hold what the tools write (read in their sources; see trainer_exports)."""
    layouts = {d: _inspect(tiny, d)["layout"] for d in [*EXPORTS, LATE_EXPORT]}
    modelopt = json.loads(open(os.path.join(tiny, "draft-modelopt", "config.json")).read())
    assert sum(v is None for v in modelopt.values()) > 20  # the template's unfilled keys
    assert "eagle_aux_hidden_state_layer_ids" not in modelopt
    assert modelopt["eagle_config"]["next_layer_regular"] is True
    assert layouts["draft-modelopt"]["layer_prefix"] == "midlayer."
    assert layouts["draft-modelopt"]["embed_tokens"] is False
    assert layouts["draft-torchspec"]["layer_prefix"] == "midlayer."
    assert layouts["draft-torchspec-vllm"]["layer_prefix"] == "layers.0."
    for name in ("draft-torchspec", "draft-torchspec-vllm", "draft-specforge"):
        assert layouts[name]["d2t"] and layouts[name]["t2d"], name  # identity d2t, t2d
    assert layouts["draft-specforge"]["embed_tokens"] is False
    late = json.loads(open(os.path.join(tiny, LATE_EXPORT, "config.json")).read())
    assert late["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [4, 2, 3]


def test_inspect_says_ambiguous_without_a_fingerprint(tiny, tmp_path):
    """The custom-id export with Model-Optimizer's keys stripped: two readings remain."""
    draft = tmp_path / "no-fingerprint"
    shutil.copytree(os.path.join(tiny, LATE_EXPORT), draft)
    config = json.loads((draft / "config.json").read_text())
    config["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": [4, 2, 3]}
    (draft / "config.json").write_text(json.dumps(config))
    report = inspect_draft(str(draft), os.path.join(tiny, "target"), environ={})
    assert report["ambiguous"] is True and report["training_tool"] is None
    assert report["capture_ids"] == [2, 3, 4] and report["ambiguous_capture_ids"] == [3, 4, 5]
    text = format_report(report)
    print("\n" + text)
    assert "AMBIGUOUS" in text and "[3, 4, 5]" in text and CONVENTION_KEY in text


# ---- the rope base: config.json's unless asked explicitly ----------------------------------
def test_rope_theta_override_is_explicit_and_reported(tiny):
    draft, target = os.path.join(tiny, BASE), os.path.join(tiny, "target")
    plain = inspect_draft(draft, target, environ={})
    assert plain["rope_theta"] == {"config": 50000.0, "served": 50000.0, "override": False}
    asked = inspect_draft(draft, target, environ={ROPE_THETA_ENV: "10000"})
    assert asked["rope_theta"] == {"config": 50000.0, "served": 10000.0, "override": True}
    assert (f"rope base     10000.0 (from {ROPE_THETA_ENV}; config.json says 50000.0)"
            in format_report(asked))
    wrong = inspect_draft(draft, target, environ={ROPE_THETA_ENV: "ten thousand"})
    assert any(ROPE_THETA_ENV in p and "positive number" in p for p in wrong["problems"])
