"""What the speculative hook decided about a draft, handed to the draft class in the worker.

The hook runs where vLLM builds its config (the API server or ``LLM(...)`` process); the
draft class is built in the engine's worker. vLLM sends the draft's ``hf_config`` there,
so the plugin's decisions travel on it, as one attribute holding one plain record: the
draft's validated config record (as JSON: vLLM hashes ``hf_config`` as JSON; the worker
gets the record back as it was, nothing read again from config.json) and the decisions
that are not in it (capture ids, NoPE, rope base). A new decision is added here, in one
place. vLLM's own field ``eagle_aux_hidden_state_layer_ids`` is still written by the hook:
it is where vLLM's runners read the capture ids.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

from vllm_kimi_eagle.draft.draft_config import SERVED_KEY, DraftConfig, record_from_json

CHANNEL = SERVED_KEY  # the attribute of the draft's hf_config


@dataclass(frozen=True)
class ServedDraft:
    record_json: str  # the draft's config record (draft_config.record_json)
    capture_ids: list[int] | None  # the target layers vLLM captures; None: not decided
    nope: bool  # the draft's attention reads positions unrotated (Kimi-K3)
    rope_theta: float | None  # the rope base served (None only from an older hook)
    # The positions the draft's rotary cache covers, as vLLM set them: it raises an EAGLE
    # draft's max_position_embeddings to the target's max_model_len (0.27-0.32 always,
    # 0.33 for RoPE types that size only the cache; vLLM issue #48894); None: config.json's.
    max_positions: int | None = None
    # The class the hook decided serves the draft ("plugin" or "vllm"; None: an older hook)
    # and the greedy shortcut flag it left on the speculative config (None: no such flag).
    draft_class: str | None = None
    shortcut: bool | None = None
    convention: str | None = None  # how the written ids were read (output-of, input-of)

    @functools.cached_property
    def config(self) -> DraftConfig:
        """The draft's config record, as the hook validated it."""
        return record_from_json(self.record_json)

    def attach(self, hf_config) -> None:
        setattr(hf_config, CHANNEL, dataclasses.asdict(self))


def attached(hf_config) -> ServedDraft | None:
    """The decisions the hook attached to a draft's hf_config, or None."""
    found = getattr(hf_config, CHANNEL, None)
    return ServedDraft(**found) if isinstance(found, dict) else None
