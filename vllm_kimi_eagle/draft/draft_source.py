"""Where a draft's safetensors headers come from: a local folder, the Hugging Face cache,
or the hub's metadata API, so the pre-serve checks run for hub ids (the docs'
``lightseekorg/...`` usage) as they do for local folders.

Only headers are read (a few KB per file), never weights. Offline, with nothing in the
cache, the headers are not available: :func:`draft_headers` says so and why, and the
caller logs that the checks were skipped and that loading still checks strictly.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from vllm_kimi_eagle.draft import checkpoint, hf_cache
from vllm_kimi_eagle.draft.draft_config import load_config_json


@dataclass(frozen=True)
class DraftHeaders:
    tensors: dict[str, checkpoint.TensorInfo] | None  # None: not available
    where: str  # "local folder", "Hugging Face cache", "hub metadata", or why not


def is_local(model: str) -> bool:
    return os.path.isdir(model)


def draft_headers(model: str, revision: str | None = None) -> DraftHeaders:
    """The draft's tensors from headers: local folder, then the HF cache, then the hub."""
    if is_local(model):
        if not checkpoint.checkpoint_files(model):
            return DraftHeaders(None, f"{model} holds no .safetensors file")
        return DraftHeaders(checkpoint.read_checkpoint(model), "local folder")
    cached = hf_cache.cached_snapshot(model, revision, ("*.json", "*.safetensors"))
    if cached:
        return DraftHeaders(checkpoint.read_checkpoint(cached), "Hugging Face cache")
    return hub_metadata(model, revision)


def draft_config_json(model: str, revision: str | None = None) -> tuple[object, str] | None:
    """The draft's config.json as JSON and its path: from a local folder, or the Hugging
    Face cache where vLLM has just fetched it; None where it is in neither."""
    if is_local(model):
        path = os.path.join(model, "config.json")
    else:
        path = hf_cache.cached_file(model, "config.json", revision)
        if path is None:
            return None
    return load_config_json(path), path


def hub_metadata(repo_id: str, revision: str | None) -> DraftHeaders:
    """Headers through huggingface_hub's get_safetensors_metadata (one small request)."""
    try:
        from huggingface_hub import get_safetensors_metadata
    except ImportError:
        return DraftHeaders(None, "huggingface_hub is not installed")
    if hf_cache.offline():
        return DraftHeaders(None, "HF_HUB_OFFLINE is set and the draft is not in the HF cache")
    try:
        metadata = get_safetensors_metadata(repo_id, revision=revision)
    except Exception as err:  # network, auth, missing repo: loading will tell the user
        return DraftHeaders(None, f"the hub's safetensors metadata could not be read "
                                  f"({type(err).__name__}: {err})")
    tensors: dict[str, checkpoint.TensorInfo] = {}
    for filename, file_meta in metadata.files_metadata.items():
        where = f"{repo_id}/{filename}"
        for name, info in file_meta.tensors.items():
            tensors[name] = checkpoint.TensorInfo(where, tuple(info.shape), str(info.dtype))
    return DraftHeaders(tensors, "hub metadata")
