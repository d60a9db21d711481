"""Drafts as the training tools export them, read as each tool meant them (issue 10).

The base draft is written by ``build-tiny`` in the layouts of NVIDIA Model-Optimizer,
TorchSpec (native and ``--vllm``) and SpecForge (``trainer_exports.py``), plus a draft
trained on other layers (output-of ids [2, 3, 4], first id not 1) exported by
Model-Optimizer's rules and, with the same weights, given explicit ids. Config-level
checks first (inspect, pre-serve errors, hub drafts from the HF cache), then real vLLM
engines: every export against the base draft, and vLLM without the plugin beside each.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.helpers import (
    NO_PLUGIN,
    engine,
    probe_engine_config,
    requires_mla_engine,
    run_engine,
    served,
    PROMPTS,
)
from vllm_kimi_eagle.inspect_draft import format_report, inspect_draft
from vllm_kimi_eagle.layer_ids import CONVENTION_KEY
from vllm_kimi_eagle.rope_override import ROPE_THETA_ENV

BASE = "draft"
# export folder -> (training tool recognised, capture ids vLLM must use)
EXPORTS = {
    "draft-modelopt": ("Model-Optimizer", [2, 3, 5]),
    "draft-torchspec": ("TorchSpec (native export)", [2, 3, 5]),
    "draft-torchspec-vllm": ("TorchSpec (--vllm export, kimi_k2)", [2, 3, 5]),
    "draft-specforge": ("SpecForge", [2, 3, 5]),
}
LATE_EXPORT, LATE_EXPLICIT = "draft-late-modelopt", "draft-late-explicit"
LATE_CAPTURE = [3, 4, 5]
SAME_ACCEPTANCE = 0.02
needs_engine = requires_mla_engine()


def _inspect(tiny: str, draft: str) -> dict:
    return inspect_draft(os.path.join(tiny, draft), os.path.join(tiny, "target"), environ={})


# ---- what the plugin reads in each export (configs and headers only) --------------------
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


# ---- checkpoints as the tools write them: errors before serving --------------------------
def _copy(tiny: str, source: str, dest) -> tuple[str, dict]:
    shutil.copytree(os.path.join(tiny, source), dest)
    return str(dest), load_file(os.path.join(dest, "model.safetensors"))


def _save(dest: str, tensors: dict) -> str:
    path = os.path.join(dest, "model.safetensors")
    save_file(tensors, path, metadata={"format": "pt"})
    return path


def _edit_config(dest: str, **changes) -> str:
    path = os.path.join(dest, "config.json")
    config = json.loads(open(path).read())
    config.update(changes)
    with open(path, "w") as f:
        json.dump(config, f)
    return path


def test_float_d2t_fails_before_serving(tiny, tmp_path):
    dest, tensors = _copy(tiny, "draft-torchspec", tmp_path / "float-d2t")
    tensors["d2t"] = tensors["d2t"].float()
    path = _save(dest, tensors)
    error = probe_engine_config(os.path.join(tiny, "target"), dest).get("error", "")
    print(f"\n{error[:500]}")
    assert path in error and "'d2t'" in error and "F32" in error and "int64" in error


def test_draft_vocab_size_other_than_targets_fails_before_serving(tiny, tmp_path):
    dest, _ = _copy(tiny, BASE, tmp_path / "vocab")
    _edit_config(dest, vocab_size=600, draft_vocab_size=600)
    error = probe_engine_config(os.path.join(tiny, "target"), dest).get("error", "")
    print(f"\n{error[:600]}")
    assert "vocab_size is 600" in error and "512" in error and dest in error


def test_corrupt_safetensors_header_fails_before_serving(tiny, tmp_path):
    dest, _ = _copy(tiny, BASE, tmp_path / "corrupt")
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
        source, tensors = _copy(tiny, "draft-torchspec", tmp_path / "bad")
        tensors["d2t"] = tensors["d2t"].float()
        _save(source, tensors)
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


# ---- real vLLM: every export serves like the base draft ---------------------------------
def _figures(result: dict) -> str:
    if "error" in result:
        return "FAILED: " + result["error"].splitlines()[0][:160]
    return (f"acceptance {result['acceptance_length']} {result['acceptance_by_position']} "
            f"({result['drafts']} drafts)")


@needs_engine
@pytest.mark.parametrize("draft", list(EXPORTS))
def test_export_serves_with_base_acceptance(tiny, draft):
    base = served(engine(tiny, BASE))
    result = served(engine(tiny, draft))
    assert base["drafts"] > 0 and result["drafts"] > 0
    print(f"\n{draft}: {_figures(result)}; base {_figures(base)}")
    assert abs(result["acceptance_length"] - base["acceptance_length"]) <= SAME_ACCEPTANCE
    assert result["token_ids"] == base["token_ids"]


@needs_engine
def test_custom_id_export_serves_like_explicit_ids(tiny):
    explicit = served(engine(tiny, LATE_EXPLICIT))
    exported = served(engine(tiny, LATE_EXPORT))
    assert explicit["drafts"] > 0 and exported["drafts"] > 0
    print(f"\n{LATE_EXPORT}: {_figures(exported)}; same weights, explicit ids "
          f"{LATE_CAPTURE}: {_figures(explicit)}")
    assert abs(exported["acceptance_length"] - explicit["acceptance_length"]) <= SAME_ACCEPTANCE
    assert exported["token_ids"] == explicit["token_ids"]


# What vLLM does with each export on its own (VLLM_PLUGINS=""), measured on 0.32.0:
# "lower": serves with lower acceptance (it reads other layers); "error: <words>": does
# not start, with these words in the error.
WITHOUT_PLUGIN = {
    "draft-modelopt": "lower",  # nested output-of [1, 2, 4] used verbatim
    # Its class has no d2t parameter for a full vocabulary: the identity d2t fails.
    "draft-torchspec": "error: no module or parameter named 'draft_id_to_target_id'",
    "draft-torchspec-vllm": "error: no module or parameter named 'draft_id_to_target_id'",
    # The deepseek_v3 draft config is turned into DeepSeek MTP.
    "draft-specforge": "error: Eagle3DeepSeekMTPModel",
    LATE_EXPORT: "lower",  # nested [4, 2, 3] used verbatim: layers 2, 3, 4, not 3, 4, 5
}


@needs_engine
@pytest.mark.parametrize("draft", list(WITHOUT_PLUGIN))
def test_side_by_side_without_plugin(tiny, draft):
    reference = LATE_EXPLICIT if draft == LATE_EXPORT else BASE
    ours = served(engine(tiny, draft))
    plain = engine(tiny, draft, env=NO_PLUGIN)
    print(f"\n{draft}: plugin {_figures(ours)} | VLLM_PLUGINS='' {_figures(plain)} | "
          f"{reference} (plugin) {_figures(served(engine(tiny, reference)))}")
    expected = WITHOUT_PLUGIN[draft]
    if expected.startswith("error: "):
        assert expected.removeprefix("error: ") in plain.get("error", ""), plain.get("error")
        return
    assert plain["drafts"] > 0
    assert plain["acceptance_length"] < ours["acceptance_length"] - 0.05


@needs_engine
def test_non_identity_d2t_with_full_vocabulary_fails_while_loading(tiny, tmp_path):
    dest, tensors = _copy(tiny, "draft-torchspec", tmp_path / "d2t-not-identity")
    tensors["d2t"][5] = 3
    path = _save(dest, tensors)
    result = run_engine({"target": os.path.join(tiny, "target"), "draft": dest,
                         "prompts": PROMPTS[:1], "max_tokens": 4})
    assert "error" in result
    assert "maps draft id 5 to target id 8" in result["_stderr"]
    assert "draft_vocab_size == vocab_size" in result["_stderr"] and path in result["_stderr"]


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


@needs_engine
def test_draft_served_with_another_rope_base(tiny):
    """The base draft (trained with 50000) served with 10000: one variable changed."""
    base = served(engine(tiny, BASE))
    other = served(engine(tiny, BASE, env={ROPE_THETA_ENV: "10000"}))
    assert base["drafts"] > 0 and other["drafts"] > 0
    print(f"\nrope base 50000 (config): {_figures(base)}\nrope base 10000 ({ROPE_THETA_ENV}): "
          f"{_figures(other)}")
    assert f"rope base is 10000.0 from {ROPE_THETA_ENV} (config.json says 50000.0)" in other["_log"]
    assert other["acceptance_length"] < base["acceptance_length"]
    assert other["token_ids"] == base["token_ids"]  # the target decides: still lossless
