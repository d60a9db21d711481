"""What ``calibrate`` checks before any engine starts: the two models (folders or hub
ids), the draft's tensors against its config, the rope bases asked for, the folder to
write."""

from __future__ import annotations

import os

from vllm_kimi_eagle.draft import checkpoint
from vllm_kimi_eagle.draft.draft_config import DraftConfig, DraftConfigError, parse_draft_config
from vllm_kimi_eagle.draft.draft_spec import spec_from_config
from vllm_kimi_eagle.tools.calibrate.candidates import CalibrationError
from vllm_kimi_eagle.tools.models import model_source
from vllm_kimi_eagle.tools.models.config_access import text_config_value


def resolve_model(model: str, revision: str | None, role: str) -> tuple[str, dict]:
    """The model's local folder (absolute) and its config.json; hub ids are looked up in
    the Hugging Face cache or fetched as vLLM would fetch them (``model_source.py``)."""
    try:
        found = model_source.resolve(model, revision, role=f"--{role}")
        return os.path.abspath(found.folder), model_source.read_config(found, f"--{role}")
    except model_source.ModelNotFound as err:
        raise CalibrationError(str(err)) from None


def check_draft(draft: str, raw: dict, target_config: dict) -> DraftConfig:
    """The draft's validated config record; an error when it or its tensors are wrong."""
    try:
        config = parse_draft_config(raw, os.path.join(draft, "config.json"))
        spec = spec_from_config(config)
        problems = checkpoint.check_checkpoint(
            spec, checkpoint.read_checkpoint(draft),
            target_vocab=text_config_value(target_config, "vocab_size"),
            target_hidden=text_config_value(target_config, "hidden_size"))
    except (DraftConfigError, checkpoint.CheckpointError) as err:
        raise CalibrationError(str(err)) from None
    if problems:
        raise CalibrationError(f"the draft at {draft} does not match its config.json:\n  - "
                               + "\n  - ".join(problems))
    return config


def parse_thetas(text: str | None) -> tuple[float, ...]:
    if not text:
        return ()
    try:
        thetas = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise CalibrationError(f"--rope-theta {text!r}: give rope bases as numbers, e.g. "
                               "10000,50000") from None
    if any(t <= 0 for t in thetas):
        raise CalibrationError(f"--rope-theta {text!r}: rope bases are positive")
    return thetas


def check_out_folder(path: str, draft: str) -> None:
    if os.path.abspath(path) == os.path.abspath(draft):
        raise CalibrationError(f"--write {path} is the draft's own folder; calibrate never "
                               "modifies it: give a new folder")
    if os.path.exists(path) and os.listdir(path):
        raise CalibrationError(f"--write {path} exists and is not empty; give a new folder")
