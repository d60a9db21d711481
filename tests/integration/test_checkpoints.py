"""Bad checkpoints fail in create_engine_config(), before anything is served, naming the
tensor, the shapes and the file; local drafts, and hub drafts from the HF cache (what only
loading can find: tests/e2e/test_checkpoint_loading.py)."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch

from tests.helpers import copy_draft, probe_engine_config, save_tensors
from vllm_kimi_eagle.fixtures import variants

BASE = "draft"


def _bad_unknown(tensors):
    tensors["fc_norm.0.weight"] = torch.ones(256)  # EAGLE3.1 weight, config without fc_norm


def _bad_missing_fc(tensors):
    del tensors["fc.weight"]


def _bad_q_a_shape(tensors):
    tensors["layers.0.self_attn.q_a_proj.weight"] = torch.zeros(64, 256)


def _bad_d2t_length(tensors):
    tensors["d2t"] = tensors["d2t"][:-1].clone()


BAD_CHECKPOINTS = {
    # name: (source variant, edit, words the error must contain)
    "unknown-tensor": (BASE, _bad_unknown, ["'fc_norm.0.weight'", "not part of"]),
    "missing-fc": (BASE, _bad_missing_fc, ["'fc.weight'", "[256, 768]", "missing"]),
    "q_a_proj-shape": (BASE, _bad_q_a_shape,
                       ["'layers.0.self_attn.q_a_proj.weight'", "[64, 256]", "[64, 512]"]),
    "d2t-length": ("draft-pruned", _bad_d2t_length, [
        "'d2t'", f"[{variants.PRUNED_VOCAB - 1}]", f"[{variants.PRUNED_VOCAB}]"]),
}


@pytest.mark.parametrize("name", sorted(BAD_CHECKPOINTS))
def test_bad_checkpoint_fails_before_serving(tiny, tmp_path, name):
    source, edit, words = BAD_CHECKPOINTS[name]
    dest = str(tmp_path / name)
    _, tensors = copy_draft(tiny, source, dest)
    edit(tensors)
    path = save_tensors(dest, tensors)
    result = probe_engine_config(os.path.join(tiny, "target"), dest)
    assert "error" in result, f"{name}: create_engine_config() accepted a bad draft"
    message = result["error"]
    print(f"\n{name}: {message[:400]}")
    for word in words:
        assert word in message, f"{word!r} not in: {message}"
    if name != "missing-fc":
        assert path in message  # the file that holds the bad tensor


def _edit_config(dest: str, **changes) -> str:
    path = os.path.join(dest, "config.json")
    config = json.loads(open(path).read())
    config.update(changes)
    with open(path, "w") as f:
        json.dump(config, f)
    return path


def test_float_d2t_fails_before_serving(tiny, tmp_path):
    dest, tensors = copy_draft(tiny, "draft-torchspec", tmp_path / "float-d2t")
    tensors["d2t"] = tensors["d2t"].float()
    path = save_tensors(dest, tensors)
    error = probe_engine_config(os.path.join(tiny, "target"), dest).get("error", "")
    print(f"\n{error[:500]}")
    assert path in error and "'d2t'" in error and "F32" in error and "int64" in error


def test_draft_vocab_size_other_than_targets_fails_before_serving(tiny, tmp_path):
    dest, _ = copy_draft(tiny, BASE, tmp_path / "vocab")
    _edit_config(dest, vocab_size=600, draft_vocab_size=600)
    error = probe_engine_config(os.path.join(tiny, "target"), dest).get("error", "")
    print(f"\n{error[:600]}")
    assert "vocab_size is 600" in error and "512" in error and dest in error


def test_corrupt_safetensors_header_fails_before_serving(tiny, tmp_path):
    dest, _ = copy_draft(tiny, BASE, tmp_path / "corrupt")
    path = os.path.join(dest, "model.safetensors")
    with open(path, "r+b") as f:
        f.truncate(64)  # the header's length field now points past the end of the file
    error = probe_engine_config(os.path.join(tiny, "target"), dest).get("error", "")
    print(f"\n{error[:400]}")
    assert path in error and "corrupt" in error and "again" in error
    assert "struct.error" not in error


# ---- hub drafts: checked from the HF cache, skipped (and said so) when offline -----------
def _fake_hub_cache(root, repo_id: str, folder: str, files: list[str]) -> dict:
    """A Hugging Face cache holding ``files`` of ``folder`` as revision main of repo_id."""
    commit = "0" * 40
    repo = root / "hub" / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    for name in files:
        shutil.copy(os.path.join(folder, name), snapshot / name)
    return {"HF_HOME": str(root), "HF_HUB_OFFLINE": "1"}


@pytest.mark.parametrize("files, bad", [(["config.json", "model.safetensors"], False),
                                        (["config.json", "model.safetensors"], True),
                                        (["config.json"], False)],
                         ids=["in-cache", "in-cache-bad", "offline-not-cached"])
def test_hub_draft_checked_from_hf_cache_or_skip_said(tiny, tmp_path, files, bad):
    source = os.path.join(tiny, "draft-torchspec")
    if bad:
        source, tensors = copy_draft(tiny, "draft-torchspec", tmp_path / "bad")
        tensors["d2t"] = tensors["d2t"].float()
        save_tensors(source, tensors)
    env = _fake_hub_cache(tmp_path / "hf", "tiny-org/kimi-draft", source, files)
    result = probe_engine_config(os.path.join(tiny, "target"), "tiny-org/kimi-draft", env=env)
    log = result["_log"]
    if bad:
        print(f"\n{result.get('error', '')[:400]}")
        assert "Hugging Face cache" in result["error"] and "'d2t'" in result["error"]
    elif "model.safetensors" in files:
        assert "error" not in result, result
        assert "checked against its config (headers from the Hugging Face cache)" in log
        assert "written by TorchSpec (native export)" in log  # tensor names were read
    else:
        assert "error" not in result, result
        line = next(line for line in log.splitlines() if "check of tiny-org" in line)
        print(f"\n{line}")
        assert "skipped: HF_HUB_OFFLINE" in line and "still checks every tensor" in line
