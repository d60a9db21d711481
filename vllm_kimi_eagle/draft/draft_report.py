"""What vLLM will make of a draft: one pure function, read by ``inspect`` and the runtime.

``vllm-kimi-eagle inspect`` prints this report and the speculative-config hook acts on
it (writes the capture ids, hands the decisions to the draft class, refuses a checkpoint
with problems), so the two cannot disagree. Its inputs are read elsewhere: the draft's
validated config record (``draft_config.py``), its safetensors headers
(``draft_source.py``), the target's size.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from vllm_kimi_eagle.draft import checkpoint, rope_override
from vllm_kimi_eagle.draft.draft_class import ClassChoice, Needs, choose_class
from vllm_kimi_eagle.draft.draft_config import DraftConfig, DraftConfigError, record_json
from vllm_kimi_eagle.draft.draft_positions import PositionDecision, decide_positions
from vllm_kimi_eagle.draft.draft_spec import DraftSpec, spec_from_config
from vllm_kimi_eagle.draft.layer_ids import (
    LayerIdDecision,
    LayerIdError,
    explicit_convention,
    resolve_layer_ids,
)
from vllm_kimi_eagle.draft.quantization import QuantizationConfigError, quantization_from_config
from vllm_kimi_eagle.draft.served_draft import ServedDraft


@dataclass(frozen=True)
class DraftReport:
    config: DraftConfig
    spec: DraftSpec | None
    decision: LayerIdDecision | None
    positions: PositionDecision
    rope_theta: float | None  # the rope base served
    choice: ClassChoice  # which class serves it
    config_error: DraftConfigError | None = None
    layer_id_error: LayerIdError | None = None
    tensor_problems: tuple[str, ...] = ()
    header_error: str | None = None  # a local checkpoint whose headers cannot be read
    states_convention: bool = False  # the environment or config.json names the convention

    @property
    def problems(self) -> list[str]:
        """Every problem, in the order a user should fix them."""
        config_error = self.config_error if self.choice.ours else None
        found = [str(e) for e in (self.header_error, self.choice.refusal, config_error,
                                  self.layer_id_error) if e]
        return found + list(self.tensor_problems)

    @property
    def notes(self) -> list[str]:
        """What the plugin's reading of the config found that does not stop vLLM's class
        (which reads the config its own way)."""
        return [str(self.config_error)] if self.config_error and not self.choice.ours else []


    @property
    def layer_ids_line(self) -> str:
        return self.decision.log_line() if self.decision else ""

    @property
    def positions_line(self) -> str:
        return self.positions.log_line()

    def served(self, max_positions: int | None = None) -> ServedDraft:
        """The decisions the draft class needs, with the record they were made on;
        ``max_positions``: what vLLM made of the draft's max_position_embeddings."""
        return ServedDraft(record_json(self.config),
                           self.decision.capture_ids if self.decision else None,
                           self.positions.nope, self.rope_theta, max_positions)


def draft_report(
    config: DraftConfig,
    tensors: dict[str, checkpoint.TensorInfo] | None,
    *,
    target_layers: int | None,
    target_hidden: int | None,
    target_vocab: int | None,
    can_capture_after_last: bool,
    header_error: str | None = None,
    environ=os.environ,
    asked: str = "plugin",
    contract: tuple[str, ...] = (),
) -> DraftReport:
    """The draft's spec, the layers vLLM must capture, how it reads positions, its rope
    base, which class serves it and every problem found. ``asked``: the class the user
    asked for (VLLM_KIMI_EAGLE_DRAFT); ``contract``: where this vLLM breaks what the
    plugin's class builds on (``draft_class.choose_class``).

    ``tensors`` None: the headers could not be read, and the tensor checks are skipped
    (loading still checks every tensor). The tensors are checked for the plugin's class
    only: vLLM's class loads as vLLM does.
    """
    known = tensors or {}
    spec, config_error, problems = None, None, ()
    positions = decide_positions(config, environ)
    try:
        quantization = quantization_from_config(config.quantization_config, config.source,
                                                config.quantization_from)
    except QuantizationConfigError:
        quantization = None  # spec_from_config reports it
    choice = choose_class(asked, Needs(config, positions, tuple(known)), quantization,
                          contract)
    try:
        # The rope is refused only where it will be rotated as served: vLLM's class
        # rotates every draft, the plugin's as the positions decision says.
        spec = spec_from_config(config, served_nope=positions.nope and choice.ours)
    except DraftConfigError as err:
        config_error = err
    if spec is not None and tensors and choice.ours:
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
            target_hidden_size=target_hidden or config.target_hidden_size or config.hidden_size,
            environ=environ,
        )
    except LayerIdError as err:
        layer_id_error = err
    return DraftReport(config, spec, decision, positions,
                       rope_override.served_rope_theta(config, environ), choice, config_error,
                       layer_id_error, problems, header_error,
                       explicit_convention(config, environ)[0] is not None)
