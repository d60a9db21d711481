"""The Hugging Face cache, read the one way the runtime and the tools share: which snapshot
of a hub id is cached, and whether it holds what a job needs. Never a network request."""

from __future__ import annotations

import os

from vllm_kimi_eagle.draft import checkpoint

# What vLLM fetches to serve a model: weights in safetensors, configs, tokenizer files and
# remote code. Never .bin or .pt copies of the same weights.
SERVING_FILES = ("*.json", "*.safetensors", "*.py", "*.txt", "*.model", "*.tiktoken",
                 "*.jinja")
CONFIG_FILES = ("config.json",)


def offline() -> bool:
    """HF_HUB_OFFLINE as huggingface_hub reads it (offline when it is not installed)."""
    try:
        from huggingface_hub import constants
    except ImportError:
        return True
    return bool(constants.HF_HUB_OFFLINE)


def cache_dir() -> str:
    try:
        from huggingface_hub import constants
    except ImportError:
        return "?"
    return constants.HF_HUB_CACHE


def cached_snapshot(repo_id: str, revision: str | None,
                    files: tuple[str, ...] = SERVING_FILES) -> str | None:
    """The cached snapshot folder of ``repo_id`` at ``revision`` if it holds ``files``
    (see :func:`holds`), else None."""
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import LocalEntryNotFoundError
    except ImportError:
        return None
    try:
        folder = snapshot_download(repo_id, revision=revision, allow_patterns=list(files),
                                   local_files_only=True)
    except (LocalEntryNotFoundError, OSError, ValueError):
        return None
    return folder if holds(folder, files) else None


def cached_file(repo_id: str, filename: str, revision: str | None) -> str | None:
    """The cached copy of one file of ``repo_id`` at ``revision``, or None."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    try:
        found = try_to_load_from_cache(repo_id, filename, revision=revision)
    except (ValueError, OSError):  # not a hub id
        return None
    return found if isinstance(found, str) else None


def holds(folder: str, files: tuple[str, ...]) -> bool:
    """Whether a folder holds a config.json and, if ``files`` asks for weights, all of
    them (every shard its index lists, or a .safetensors file). A cache entry left by
    ``inspect`` holds the config alone and is not enough to serve."""
    if not os.path.exists(os.path.join(folder, "config.json")):
        return False
    if "*.safetensors" not in files:
        return True
    try:
        shards = checkpoint.checkpoint_files(folder)
    except (OSError, ValueError, KeyError):
        return False
    return bool(shards) and all(os.path.exists(path) for path in shards)
