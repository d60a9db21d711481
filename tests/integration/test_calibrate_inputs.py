"""calibrate refuses bad input with a clear error before any engine starts."""

from __future__ import annotations

import json
import os
import shutil


from tests.helpers import run_cli
from vllm_kimi_eagle.draft.layer_ids import IDS_KEY


def _calibrate(tiny, tmp_path, *, target=None, draft=None, extra=()):
    out = tmp_path / "out"
    proc = run_cli("calibrate", "--target", target or os.path.join(tiny, "target"),
                   "--draft", draft or os.path.join(tiny, "draft"), "--out", str(out), *extra,
                   timeout=180)
    assert not (out / "capture").exists(), "an engine was started for bad input"
    return proc


def test_no_draft_folder(tiny, tmp_path):
    proc = _calibrate(tiny, tmp_path, draft=str(tmp_path / "nowhere"))
    assert proc.returncode == 2
    assert "--draft" in proc.stderr and "no such folder" in proc.stderr


def test_a_target_that_is_not_mla(tiny, tmp_path):
    target = tmp_path / "llama"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({"model_type": "llama",
                                                    "num_hidden_layers": 4}))
    proc = _calibrate(tiny, tmp_path, target=str(target))
    assert proc.returncode == 2
    assert f"{target}/config.json: model_type 'llama'" in proc.stderr and "not an MLA" in proc.stderr


def test_ids_out_of_range_for_every_reading(tiny, tmp_path):
    draft = tmp_path / "far"
    shutil.copytree(os.path.join(tiny, "draft"), draft)
    config = json.loads((draft / "config.json").read_text())
    config["eagle_config"][IDS_KEY] = [7, 8, 9]
    (draft / "config.json").write_text(json.dumps(config))
    proc = _calibrate(tiny, tmp_path, draft=str(draft))
    assert proc.returncode == 2
    assert "[[7, 8, 9]]" in proc.stderr and "1..6" in proc.stderr


def test_an_unreadable_prompts_file(tiny, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"messages": [{"role": "user", "content": "fine"}]}\n{"oops": 1}\n')
    proc = _calibrate(tiny, tmp_path, extra=("--prompts", str(prompts)))
    assert proc.returncode == 2
    assert f"{prompts}, line 2: not a prompt" in proc.stderr


def test_write_refuses_the_drafts_own_folder(tiny, tmp_path):
    draft = os.path.join(tiny, "draft")
    proc = _calibrate(tiny, tmp_path, extra=("--write", draft))
    assert proc.returncode == 2 and "never modifies it" in proc.stderr
