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

from packaging.version import Version

from vllm_kimi_eagle.draft import checkpoint, rope_override
from vllm_kimi_eagle.draft.draft_class import OFF, ClassChoice, Needs, choose_class
from vllm_kimi_eagle.draft.draft_config import DraftConfig, DraftConfigError, record_json
from vllm_kimi_eagle.draft.draft_positions import PositionDecision, decide_positions
from vllm_kimi_eagle.draft.draft_spec import (
    DraftSpec,
    canonical_name,
    draft_layout,
    spec_from_config,
)
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

    head_note: str | None = None  # the draft's LM head is the target's (``head_note``)

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
        (which reads the config its own way), and what that class computes otherwise than
        the draft was trained, where the user asked for it (VLLM_KIMI_EAGLE_DRAFT=upstream)."""
        notes = list(self.choice.warnings)
        if self.config_error and not self.choice.ours:
            notes.append(str(self.config_error))
        return notes

    @property
    def layer_ids_line(self) -> str:
        return self.decision.log_line() if self.decision else ""

    @property
    def positions_line(self) -> str:
        return self.positions.log_line()

    def served(self, max_positions: int | None = None,
               shortcut: bool | None = None) -> ServedDraft:
        """The decisions the draft class needs and the self-check reads back, with the
        record they were made on; ``max_positions``: what vLLM made of the draft's
        max_position_embeddings; ``shortcut``: the greedy shortcut flag as the hook left it."""
        decision = self.decision
        return ServedDraft(record_json(self.config),
                           decision.capture_ids if decision else None,
                           self.positions.nope, self.rope_theta, max_positions,
                           "plugin" if self.choice.ours else "vllm", shortcut,
                           decision.convention if decision else None)


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
    release: Version | None = None,
) -> DraftReport:
    """The draft's spec, the layers vLLM must capture, how it reads positions, its rope
    base, which class serves it and every problem found. ``asked``: the class the user
    asked for (VLLM_KIMI_EAGLE_DRAFT); ``contract``: where this vLLM breaks what the
    plugin's class builds on (``draft_class.choose_class``); ``release``: the vLLM whose
    in-tree class would serve it (None: the newest the plugin read).

    ``tensors`` None: the headers could not be read, and the tensor checks are skipped
    (loading with the plugin's class still checks every tensor). The tensors of an MLA
    draft are checked against its config whichever class serves it, with a d2t's values
    where its file is at hand: a checkpoint that does not match its config serves wrong in
    either; where vLLM's class serves it, each problem says what that class would do.
    """
    known = tensors or {}
    spec, config_error, problems = None, None, ()
    positions = decide_positions(config, environ)
    try:
        quantization = quantization_from_config(config.quantization_config, config.source,
                                                config.quantization_from)
    except QuantizationConfigError:
        quantization = None  # spec_from_config reports it
    choice = choose_class(asked, Needs(config, positions, tuple(known), release), quantization,
                          contract)
    try:
        # The rope is refused only where it will be rotated as served: vLLM's class
        # rotates every draft, the plugin's as the positions decision says.
        spec = spec_from_config(config, served_nope=positions.nope and choice.ours)
    except DraftConfigError as err:
        config_error = err
    # What the checkpoint must hold for the class that loads it.
    layout = spec if spec is not None and choice.ours else _layout_or_none(
        config, in_tree=not choice.ours)
    checked = layout is not None and tensors and config.kv_lora_rank is not None \
        and asked != OFF
    if checked:
        problems = tuple(checkpoint.check_checkpoint(
            layout, tensors, target_vocab=target_vocab, target_hidden=target_hidden,
            in_tree=not choice.ours))
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
                       explicit_convention(config, environ)[0] is not None,
                       head_note(known) if checked else None)


def _layout_or_none(config: DraftConfig, in_tree: bool) -> DraftSpec | None:
    """What the checkpoint must hold (``draft_layout``), the config's forward pass
    refused or not: None where the config cannot describe a layout."""
    try:
        return draft_layout(config, in_tree)
    except DraftConfigError:
        return None


def head_note(tensors: dict[str, checkpoint.TensorInfo]) -> str | None:
    """One line where the draft carries no LM head of its own, and so serves with the
    target's: right for a draft trained with it, near acceptance 1.0 for one trained with
    its own and exported without it (sglang #27829: a Kimi-K2.6 EAGLE3 draft shipped so)."""
    names = {canonical_name(name) for name in tensors}
    if "lm_head.weight" in names:
        return None
    line = ("the draft has no lm_head: it is served with the target's LM head, as it must "
            "be if it was trained with it; a draft trained with a head of its own and "
            "exported without it proposes almost nothing the target accepts (a "
            "first-position acceptance near zero tells)")
    if "embed_tokens.weight" in names:
        line += ("; this one carries an embedding of its own, so its head was very likely "
                 "trained too and is missing from the export: ask its publisher for it")
    return line
