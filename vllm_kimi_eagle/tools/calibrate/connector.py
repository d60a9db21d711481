"""A store-only KV connector that writes each finished request's captured target hidden
states to one safetensors file, for ``calibrate``'s capture engine.

vLLM's ``extract_hidden_states`` speculative method keeps the inputs of the listed
target layers in the KV cache of a cache-only layer; a KV connector gets them out.
vLLM's own ``ExampleHiddenStatesConnector`` needs a CUDA device (streams, events, pinned
memory) and keeps only the prompt unless each request asks for more; this one reads the
slots synchronously with the release's own ``extract_from_kv_cache`` (its layout
changed in 0.29), so it runs on CPU and GPU builds, and keeps the prompt and the
generated tokens. One file per request: ``hidden_states`` [T-1, layers, hidden] and
``token_ids`` [T-1] (the prompt and the generated tokens but the last, which was never
an input). Tensor-parallel ranks hold the same states: rank 0 writes, every rank
reports the request done. vLLM loads it by module path:

    kv_transfer_config={"kv_connector": "HiddenStatesCaptureConnector",
                        "kv_connector_module_path": "vllm_kimi_eagle.tools.calibrate.connector",
                        "kv_role": "kv_producer",
                        "kv_connector_extra_config": {"path": FOLDER}}
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import torch
from safetensors.torch import save_file
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
    SupportsHMA,
)
from vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector import (
    extract_from_kv_cache,
)

CLASS_NAME = "HiddenStatesCaptureConnector"
PATH_KEY = "hidden_states_path"  # in RequestOutput.kv_transfer_params


@dataclass
class _Save:
    req_id: str
    filename: str
    token_ids: list[int]
    block_ids: list[int]


@dataclass
class CaptureMetadata(KVConnectorMetadata):
    saves: list[_Save] = field(default_factory=list)


class HiddenStatesCaptureConnector(KVConnectorBase_V1, SupportsHMA):
    def __init__(self, vllm_config, role: KVConnectorRole, kv_cache_config=None):
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        self._dir = self._kv_transfer_config.kv_connector_extra_config["path"]
        self._group = _hidden_states_group(kv_cache_config)
        self._block_size = (
            kv_cache_config.kv_cache_groups[self._group].kv_cache_spec.block_size
            if kv_cache_config is not None else vllm_config.cache_config.block_size)
        self._pending: list[_Save] = []  # scheduler side
        self._kv: torch.Tensor | None = None  # worker side
        self._writer = False

    # ---- worker side ------------------------------------------------------------------
    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]):
        from vllm.config import get_layers_from_vllm_config
        from vllm.distributed.parallel_state import get_tensor_model_parallel_rank
        from vllm.model_executor.models.extract_hidden_states import CacheOnlyAttentionLayer

        names = list(get_layers_from_vllm_config(self._vllm_config, CacheOnlyAttentionLayer,
                                                 list(kv_caches)))
        self._kv = kv_caches[names[0]] if names else None  # only the last pipeline stage
        self._writer = self._kv is not None and get_tensor_model_parallel_rank() == 0

    def start_load_kv(self, forward_context, **kwargs: Any) -> None:
        pass

    def wait_for_layer_load(self, layer_name: str) -> None:
        pass

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs: Any) -> None:
        pass

    def wait_for_save(self) -> None:
        pass

    def get_finished(self, finished_req_ids: set[str]):
        """Write the requests that finished in the last step (their blocks are still held)."""
        meta = self._get_connector_metadata() if self.has_connector_metadata() else None
        done = set()
        for save in getattr(meta, "saves", ()):
            if self._writer:
                self._write(save)
            done.add(save.req_id)
        return (done or None), None

    def _write(self, save: _Save) -> None:
        blocks = torch.tensor(save.block_ids, dtype=torch.long)
        slots = (blocks[:, None] * self._block_size + torch.arange(self._block_size)).flatten()
        states = extract_from_kv_cache(self._kv, slots.to(self._kv.device), len(save.token_ids))
        os.makedirs(os.path.dirname(save.filename), exist_ok=True)
        partial = save.filename + ".partial"
        save_file({"hidden_states": states.to("cpu").contiguous(),
                   "token_ids": torch.tensor(save.token_ids, dtype=torch.long)}, partial)
        os.replace(partial, save.filename)

    # ---- scheduler side ---------------------------------------------------------------
    def get_num_new_matched_tokens(self, request, num_computed_tokens: int):
        return 0, False

    def update_state_after_alloc(self, request, blocks, num_external_tokens: int):
        pass

    def build_connector_meta(self, scheduler_output) -> KVConnectorMetadata:
        meta, self._pending = CaptureMetadata(saves=self._pending), []
        return meta

    def request_finished(self, request, block_ids: list[int]):
        tokens = list(request.all_token_ids)[:-1]
        name = os.path.join(self._dir, f"{request.request_id}.safetensors")
        self._pending.append(_Save(request.request_id, name, tokens, list(block_ids)))
        return True, {PATH_KEY: name}  # True: keep the blocks until the file is written

    def request_finished_all_groups(self, request, block_ids: tuple[list[int], ...]):
        return self.request_finished(request, block_ids[self._group])

    @classmethod
    def get_required_kvcache_layout(cls, vllm_config) -> str | None:
        return None


def _hidden_states_group(kv_cache_config) -> int:
    """The KV cache group of the cache-only layer: its own group where it has one, else
    the only group (an MLA target and the cache-only layer share one)."""
    if kv_cache_config is None:
        return 0
    try:
        from vllm.v1.kv_cache_interface import HiddenStateCacheSpec
    except ImportError:  # releases without it keep one group
        return 0
    groups = kv_cache_config.kv_cache_groups
    own = [i for i, g in enumerate(groups) if isinstance(g.kv_cache_spec, HiddenStateCacheSpec)]
    if own:
        return own[0]
    if len(groups) == 1:
        return 0
    raise ValueError(f"calibrate's connector finds no KV cache group for the captured hidden "
                     f"states among {len(groups)} groups; this vLLM release is not supported")
