"""A model as vLLM takes it: a local folder, an id in the Hugging Face cache, or a hub id.

Every tool finds a model's files here (the cache is read by ``hf_cache.py``, as the
runtime's pre-serve checks read it), so
``moonshotai/Kimi-K2.6`` means the same thing to ``vllm-kimi-eagle inspect`` as to
``vllm serve``. Offline (``HF_HUB_OFFLINE``) a hub id is looked up in the cache only; a
model that cannot be found raises :class:`ModelNotFound`, whose message is one line
naming the id and how to get it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from vllm_kimi_eagle.draft import hf_cache
from vllm_kimi_eagle.draft.hf_cache import CONFIG_FILES, SERVING_FILES


class ModelNotFound(ValueError):
    """A model that is neither a folder, in the Hugging Face cache, nor fetchable."""


@dataclass(frozen=True)
class ModelFolder:
    model: str  # as the user wrote it
    folder: str  # a local folder holding (at least) its config.json
    where: str  # "local folder", "Hugging Face cache" or "hub"


def looks_like_hub_id(model: str) -> bool:
    """``org/name`` (or ``name``) with no path syntax: what the hub could hold."""
    parts = model.split("/")
    return (len(parts) <= 2 and all(parts) and not model.startswith((".", "~"))
            and not os.path.isabs(model))


def how_to_get(model: str, revision: str | None) -> str:
    rev = f" --revision {revision}" if revision else ""
    return (f"download it with `hf download {model}{rev}` (`huggingface-cli download` "
            "before huggingface_hub 1.0), or give its local folder")


def resolve(model: str, revision: str | None = None, *, role: str = "model",
            files: tuple[str, ...] = SERVING_FILES) -> ModelFolder:
    """The local folder of ``model``, fetching ``files`` from the hub if online.

    ``role`` names the argument in messages (``--draft``). A folder is taken as it is;
    anything else must be a hub id, found in the cache or (online) downloaded the way
    vLLM would download it, with huggingface_hub's own progress bars.
    """
    if os.path.isdir(model):
        return ModelFolder(model, model, "local folder")
    if not looks_like_hub_id(model):
        raise ModelNotFound(f"{role} {model}: no such folder, and not a hub id (ORG/NAME); "
                            "give the model's folder or its hub id")
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import RepositoryNotFoundError, RevisionNotFoundError
    except ImportError:
        raise ModelNotFound(f"{role} {model}: no such folder, and huggingface_hub is not "
                            "installed to look the id up; give the model's folder") from None
    cached = hf_cache.cached_snapshot(model, revision, files)
    if cached:
        return ModelFolder(model, cached, "Hugging Face cache")
    rev = f" at revision {revision}" if revision else ""
    if hf_cache.offline():
        what = " with its weights" if "*.safetensors" in files else ""
        raise ModelNotFound(f"{role} {model}{rev}: not in the Hugging Face cache{what} "
                            f"({hf_cache.cache_dir()}) and HF_HUB_OFFLINE is set; "
                            + how_to_get(model, revision))
    try:
        folder = snapshot_download(model, revision=revision, allow_patterns=list(files))
    except (RepositoryNotFoundError, RevisionNotFoundError) as err:
        raise ModelNotFound(f"{role} {model}{rev}: the hub has no such model or revision "
                            f"({type(err).__name__}); check the id, or log in with "
                            "`hf auth login` if it is private or gated") from None
    except Exception as err:  # HTTP errors, timeouts, a missing cache entry: one line
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise ModelNotFound(f"{role} {model}{rev}: could not be fetched from the hub "
                            f"({type(err).__name__}: {first}); "
                            + how_to_get(model, revision)) from None
    return ModelFolder(model, folder, "hub")


def local_folder(model: str, role: str) -> str:
    """The folder to serve ``model`` from (see :func:`resolve`)."""
    return resolve(model, role=role).folder


def read_config(folder: ModelFolder, role: str = "model") -> dict:
    """The config.json of a resolved model, as a dict; errors name the file."""
    path = os.path.join(folder.folder, "config.json")
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        raise ModelNotFound(f"{role} {folder.model}: {path} not found; a model folder holds "
                            "a config.json") from None
    except (OSError, ValueError) as err:
        raise ModelNotFound(f"{role} {folder.model}: {path} cannot be read ({err})") from None
