"""Which target layers vLLM must capture for an EAGLE3 draft: the convention decision.

A draft's ``eagle_aux_hidden_state_layer_ids`` mean "output of layer N" to the tools that
train drafts (SpecForge, TorchSpec, Model-Optimizer; Kimi default [1, 29, 57]) and
"input of layer N" to vLLM, which uses them verbatim (Kimi default (2, 30, 58): the same
tensors). A draft exported without the +1 is served one layer off with no error, only
lower acceptance. :func:`resolve_layer_ids` decides, as a pure function; the hook in
``speculative_hook.py`` writes the answer where every vLLM runner reads it.

Precedence: an explicit convention (environment variable, then the draft config's
``eagle_aux_hidden_state_layer_ids_convention``), then sglang's heuristic (first id == 1
means output-of-layer), then vLLM's default when the draft names no ids.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

IDS_KEY = "eagle_aux_hidden_state_layer_ids"
CONVENTION_KEY = "eagle_aux_hidden_state_layer_ids_convention"
CONVENTION_ENV = "VLLM_KIMI_EAGLE_LAYER_IDS"
OUTPUT_OF = "output-of"
INPUT_OF = "input-of"
CONVENTIONS = (OUTPUT_OF, INPUT_OF)
# How each convention maps a written id to the id vLLM captures (input of layer N).
TO_CAPTURE_ID = {OUTPUT_OF: 1, INPUT_OF: 0}


class LayerIdError(ValueError):
    """Layer ids that would make vLLM capture layers the draft was not trained on."""


@dataclass(frozen=True)
class LayerIdDecision:
    written: list[int] | None  # ids as found in the draft config
    source: str  # where they were found
    convention: str  # OUTPUT_OF, INPUT_OF, or "vllm-default"
    capture_ids: list[int] | None  # ids vLLM must capture; None: its default, target unknown
    reason: str  # why this convention

    def log_line(self) -> str:
        if self.written is None:
            return (
                f"draft names no layer ids; vLLM will capture its default, the inputs of "
                f"layers {self.capture_ids or '(2, L//2, L-3)'}"
            )
        return (
            f"draft ids {self.written} ({self.source}) read as {self.convention}-layer "
            f"({self.reason}); vLLM will capture the inputs of layers {self.capture_ids}"
        )


def _get(config, key, default=None):
    if isinstance(config, Mapping):
        return config.get(key, default)
    return getattr(config, key, default)


def vllm_default_ids(num_layers: int) -> list[int]:
    """vLLM's default EAGLE3 capture ids (2, L//2, L-3)."""
    return [2, num_layers // 2, num_layers - 3]


def written_ids(draft_config) -> tuple[list[int] | None, str]:
    """The ids as written and where: top level first (what vLLM reads first), then nested."""
    ids = _get(draft_config, IDS_KEY)
    if ids:
        return [int(i) for i in ids], IDS_KEY
    nested = _get(_get(draft_config, "eagle_config") or {}, IDS_KEY)
    if nested:
        return [int(i) for i in nested], f"eagle_config.{IDS_KEY}"
    return None, "none"


def explicit_convention(draft_config, environ=os.environ) -> tuple[str | None, str]:
    """An explicit convention and who set it: the environment, then the draft config."""
    candidates = (
        (environ.get(CONVENTION_ENV), f"environment variable {CONVENTION_ENV}"),
        (_get(draft_config, CONVENTION_KEY), f"config.json {CONVENTION_KEY}"),
        (_get(_get(draft_config, "eagle_config") or {}, CONVENTION_KEY),
         f"config.json eagle_config.{CONVENTION_KEY}"),
    )
    for value, who in candidates:
        if value is None or str(value).strip().lower() in ("", "auto"):
            continue
        value = str(value).strip().lower().replace("_", "-").removesuffix("-layer")
        if value not in CONVENTIONS:
            raise LayerIdError(
                f"{who} is {value!r}; use 'output-of' (ids name the layer whose output "
                "the draft was trained on: SpecForge, TorchSpec, Model-Optimizer), "
                "'input-of' (vLLM's own meaning) or 'auto'."
            )
        return value, who
    return None, ""


def resolve_layer_ids(
    draft_config,
    num_target_layers: int | None,
    *,
    can_capture_after_last: bool = True,
    fc_in_features: int | None = None,
    target_hidden_size: int | None = None,
    environ=os.environ,
) -> LayerIdDecision:
    """Decide and validate the ids vLLM must capture for this draft and target.

    ``num_target_layers`` None (target unknown) skips the range check.
    """
    written, source = written_ids(draft_config)
    if written is None:
        default = vllm_default_ids(num_target_layers) if num_target_layers else None
        decision = LayerIdDecision(
            None, source, "vllm-default", default, "the draft config names no ids"
        )
    else:
        _check_order(written, source)
        convention, who = explicit_convention(draft_config, environ)
        if convention:
            reason = f"set by {who}"
        elif written[0] == 1:
            convention, reason = OUTPUT_OF, "first id is 1, the training tools' convention"
        else:
            convention, reason = INPUT_OF, "first id is not 1, vLLM's convention"
        shift = TO_CAPTURE_ID[convention]
        decision = LayerIdDecision(
            written, source, convention, [i + shift for i in written], reason
        )
    _check_range(decision, num_target_layers, can_capture_after_last)
    _check_count(decision, fc_in_features, target_hidden_size)
    return decision


def _check_order(ids: list[int], source: str) -> None:
    if any(b <= a for a, b in zip(ids, ids[1:])):
        raise LayerIdError(
            f"draft config {source} = {ids}: layer ids must be strictly increasing "
            "without duplicates (each names one captured target layer, in the order the "
            "draft's fc expects them). Fix the list in the draft's config.json."
        )


def _check_range(decision: LayerIdDecision, layers: int | None, can_capture_after_last: bool) -> None:
    if layers is None:
        return
    highest = layers if can_capture_after_last else layers - 1
    bad = [i for i in decision.capture_ids if i < 0 or i > highest]
    if not bad:
        return
    hint = ""
    if not can_capture_after_last and layers in bad:
        hint = (
            f" Capturing after the last layer (id {layers}) needs vLLM 0.25.1 or newer."
        )
    raise LayerIdError(
        f"draft ids {decision.written} ({decision.source}), read as {decision.convention}-"
        f"layer, mean capturing the inputs of layers {decision.capture_ids}, but the "
        f"target has {layers} layers (valid: 0..{highest}); {bad} is out of range.{hint} "
        f"Check that the draft belongs to this target, or state the convention with "
        f"{CONVENTION_ENV}=output-of|input-of or {CONVENTION_KEY} in the draft's config.json."
    )


def _check_count(decision: LayerIdDecision, fc_in: int | None, hidden: int | None) -> None:
    if not fc_in or not hidden:
        return
    count = len(decision.capture_ids or vllm_default_ids(3))
    if fc_in % hidden or fc_in // hidden != count:
        raise LayerIdError(
            f"the draft's fc.weight takes {fc_in} input features, i.e. "
            f"{fc_in / hidden:g} captured states of the target's hidden size {hidden}, but "
            f"{count} layer ids are given ({decision.written or 'vLLM default'}"
            f" {decision.capture_ids or '(2, L//2, L-3)'}). Give as many ids in {IDS_KEY} as "
            "the draft was trained with."
        )
