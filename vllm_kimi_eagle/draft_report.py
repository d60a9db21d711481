"""What vLLM will make of a draft: one pure function, read by ``inspect`` and the runtime.

``vllm-kimi-eagle inspect`` prints this report and the speculative-config hook acts on
it (writes the capture ids, refuses a checkpoint with problems), so the two cannot
disagree. The inputs are read elsewhere: configs (object or dict), safetensors headers
(``draft_source.py``), the target's size.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from vllm_kimi_eagle import checkpoint
from vllm_kimi_eagle.config_access import config_value
from vllm_kimi_eagle.draft_spec import DraftConfigError, DraftSpec, spec_from_config
from vllm_kimi_eagle.layer_ids import LayerIdDecision, LayerIdError, resolve_layer_ids


@dataclass(frozen=True)
class DraftReport:
    spec: DraftSpec | None
    decision: LayerIdDecision | None
    config_error: DraftConfigError | None = None
    layer_id_error: LayerIdError | None = None
    tensor_problems: tuple[str, ...] = ()
    header_error: str | None = None  # a local checkpoint whose headers cannot be read

    @property
    def problems(self) -> list[str]:
        """Every problem, in the order a user should fix them."""
        found = [str(e) for e in (self.header_error, self.config_error, self.layer_id_error)
                 if e]
        return found + list(self.tensor_problems)


def draft_report(
    config,
    tensors: dict[str, checkpoint.TensorInfo] | None,
    *,
    source: str,
    target_layers: int | None,
    target_hidden: int | None,
    target_vocab: int | None,
    can_capture_after_last: bool,
    header_error: str | None = None,
    environ=os.environ,
) -> DraftReport:
    """The draft's spec, the layers vLLM must capture and every problem found.

    ``tensors`` None: the headers could not be read, and the tensor checks are skipped
    (loading still checks every tensor). ``source`` names the config file in messages.
    """
    known = tensors or {}
    spec, config_error, problems = None, None, ()
    try:
        spec = spec_from_config(config, source=source)
    except DraftConfigError as err:
        config_error = err
    if spec is not None and tensors:
        problems = tuple(checkpoint.check_checkpoint(
            spec, tensors, target_vocab=target_vocab, target_hidden=target_hidden))
    decision, layer_id_error = None, None
    try:
        decision = resolve_layer_ids(
            config,
            target_layers,
            can_capture_after_last=can_capture_after_last,
            fc_in_features=checkpoint.fc_in_features(known),
            layer_prefix=checkpoint.layer_prefix(known),
            target_hidden_size=target_hidden or config_value(config, "target_hidden_size")
            or config_value(config, "hidden_size"),
            environ=environ,
        )
    except LayerIdError as err:
        layer_id_error = err
    return DraftReport(spec, decision, config_error, layer_id_error, problems, header_error)
