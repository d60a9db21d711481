"""Which target layers vLLM must capture for an EAGLE3 draft: the convention decision.

A draft's ``eagle_aux_hidden_state_layer_ids`` mean "output of layer N" to the tools that
train drafts (SpecForge, TorchSpec, Model-Optimizer; Kimi default [1, 29, 57]) and
"input of layer N" to vLLM, which uses them verbatim (Kimi default (2, 30, 58): the same
tensors). A draft exported without the +1 is served one layer off with no error, only
lower acceptance. :func:`resolve_layer_ids` decides, as a pure function; the hook in
``speculative_hook.py`` writes the answer where every vLLM runner reads it.

Precedence:

1. an explicit convention: the environment variable, then the draft config's
   ``eagle_aux_hidden_state_layer_ids_convention``;
2. the training tool that wrote the config, recognised by its fingerprint
   (:data:`TOOL_EXPORTS`, one row per tool and export, each citing the tool's source);
3. sglang's heuristic (#25454): a first id of 1 means output-of, any other input-of;
4. vLLM's default ids when the draft names none.

Ids are a set in layer order (vLLM and Model-Optimizer both collect the captured layers
in layer order, whatever the order of the list); a duplicate is an error because it
changes the width of the draft's ``fc``. Where two readings stay plausible (no
fingerprint, ids that are neither tool's default), the decision says so: it is
``ambiguous`` and carries the other reading's capture list.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from vllm_kimi_eagle import settings
from vllm_kimi_eagle.draft.draft_config import (
    CONVENTION_KEY,
    IDS_KEY,
    MODELOPT,
    SPECFORGE,
    TOOL_FINGERPRINTS,
    TOP_IDS,
    TORCHSPEC,
    DraftConfig,
    DraftConfigError,
    written_by,
)

CONVENTION_ENV = settings.LAYER_IDS.name
OUTPUT_OF = "output-of"
INPUT_OF = "input-of"
CONVENTIONS = (OUTPUT_OF, INPUT_OF)
# How each convention maps a written id to the id vLLM captures (input of layer N).
TO_CAPTURE_ID = {OUTPUT_OF: 1, INPUT_OF: 0}
OTHER = {OUTPUT_OF: INPUT_OF, INPUT_OF: OUTPUT_OF}
# Where ids can be written: the top level (read first by vLLM) or inside eagle_config.
TOP, NESTED = "top-level", "eagle_config"
# vLLM cannot capture id 0, the input of layer 0 (the embeddings): its capture adds the
# residual, which does not exist before layer 0 (models/deepseek_v2.py, 0.28-0.33), and
# the engine dies on its first forward pass.
LOWEST_CAPTURE_ID = 1


class LayerIdError(DraftConfigError):
    """Layer ids that would make vLLM capture layers the draft was not trained on."""


# ---- the training tools, as data ---------------------------------------------------------
@dataclass(frozen=True)
class ToolExport:
    """One way a training tool writes a draft, and what its layer ids mean there."""

    tool: str
    marker: str  # the fingerprint, in words
    source: str  # where the facts were read
    fingerprint: str  # the tool whose fingerprint the record carries (TOOL_FINGERPRINTS)
    ids_at: tuple[str, ...]  # where this export writes ids (TOP, NESTED)
    convention: str
    layer_prefix: str | None = None  # the tensor prefix this export writes; None: any
    model_types: frozenset | None = None  # draft model_types this row covers; None: any
    not_model_types: frozenset = frozenset()


TOOL_EXPORTS = (
    ToolExport(
        MODELOPT, TOOL_FINGERPRINTS[MODELOPT],
        "NVIDIA/Model-Optimizer modelopt/torch/export/plugins/hf_spec_export.py "
        "(kimik2_eagle_template_config) and modelopt/torch/speculative/plugins/"
        "transformers.py (forward hook on each listed decoder layer's output, in layer "
        "order)",
        MODELOPT, (NESTED,), OUTPUT_OF,
    ),
    ToolExport(
        SPECFORGE, TOOL_FINGERPRINTS[SPECFORGE],
        "sgl-project/SpecForge specforge/modeling/draft/deepseek_eagle3.py and "
        "scripts/train_eagle3.py (save_pretrained; target hooks on layer outputs)",
        SPECFORGE, (NESTED,), OUTPUT_OF,
    ),
    ToolExport(
        f"{TORCHSPEC} (native export)", f"{TOOL_FINGERPRINTS[TORCHSPEC]} and midlayer. tensors",
        "lightseekorg/TorchSpec tools/convert_to_hf.py (without --vllm: ids as trained, "
        "output-of)",
        TORCHSPEC, (TOP, NESTED), OUTPUT_OF, layer_prefix="midlayer.",
    ),
    ToolExport(
        f"{TORCHSPEC} (--vllm export, kimi_k2)",
        f"{TOOL_FINGERPRINTS[TORCHSPEC]} and layers.0. tensors",
        "lightseekorg/TorchSpec tools/convert_to_hf.py _fixup_export_config (adds 1 to "
        "every id list for model_type kimi_k2)",
        TORCHSPEC, (TOP, NESTED), INPUT_OF, layer_prefix="layers.0.",
        model_types=frozenset({"kimi_k2"}),
    ),
    ToolExport(
        f"{TORCHSPEC} (--vllm export)", f"{TOOL_FINGERPRINTS[TORCHSPEC]} and layers.0. tensors",
        "lightseekorg/TorchSpec tools/convert_to_hf.py _fixup_export_config (adds 1 only "
        "for model_type kimi_k2; other model types keep the trained output-of ids)",
        TORCHSPEC, (TOP, NESTED), OUTPUT_OF, layer_prefix="layers.0.",
        not_model_types=frozenset({"kimi_k2"}),
    ),
)


def _model_type_fits(row: ToolExport, model_type) -> bool:
    if row.model_types is not None and model_type not in row.model_types:
        return False
    return model_type not in row.not_model_types


def tool_readings(draft_config: DraftConfig, layer_prefix: str | None) -> list[ToolExport]:
    """The tool exports this config can be; several when the tensor layout is unknown."""
    model_type = draft_config.model_type
    rows = [r for r in TOOL_EXPORTS if written_by(draft_config, r.fingerprint)
            and _model_type_fits(r, model_type)]
    if layer_prefix is None:
        return rows
    return [r for r in rows if r.layer_prefix in (None, layer_prefix)]


# ---- the decision ------------------------------------------------------------------------
@dataclass(frozen=True)
class LayerIdDecision:
    written: list[int] | None  # ids as found in the draft config (a set, in layer order)
    source: str  # where they were found
    convention: str  # OUTPUT_OF, INPUT_OF, or "vllm-default"
    capture_ids: list[int] | None  # ids vLLM must capture; None: its default, target unknown
    reason: str  # why this convention
    rule: str = "vllm-default"  # "explicit", "tool", "sglang-heuristic" or "vllm-default"
    tool: str | None = None  # the training tool recognised, if any
    ambiguous_with: list[int] | None = None  # the other plausible capture list
    reordered_from: list[int] | None = None  # the ids as written, when not in layer order

    @property
    def ambiguous(self) -> bool:
        return self.ambiguous_with is not None

    def log_line(self) -> str:
        if self.written is None:
            return (
                f"draft names no layer ids; vLLM will capture its default, the inputs of "
                f"layers {self.capture_ids or '(2, L//2, L-3)'}"
            )
        written = self.written
        if self.reordered_from is not None:
            written = f"{self.reordered_from} (a set: {self.written})"
        line = (
            f"draft ids {written} ({self.source}) read as {self.convention}-layer "
            f"({self.reason}); vLLM will capture the inputs of layers {self.capture_ids}"
        )
        if self.ambiguous:
            line += ". AMBIGUOUS: " + ambiguity_advice(self.convention, self.ambiguous_with)
        return line


def ambiguity_advice(convention: str, other_capture: list[int]) -> str:
    """What to do when the ids could also mean the other convention (log and inspect)."""
    other = OTHER[convention]
    return (
        f"read as {other}-layer they would capture {other_capture}; measure which one the "
        "draft was trained on with `vllm-kimi-eagle calibrate --target TARGET --draft "
        f'DRAFT`; if it is the other, add "{CONVENTION_KEY}": "{other}" to its config.json '
        f"(or set {CONVENTION_ENV}={other}); to keep this reading without this warning, "
        f'"{CONVENTION_KEY}": "{convention}"'
    )


def vllm_default_ids(num_layers: int) -> list[int]:
    """vLLM's default EAGLE3 capture ids (2, L//2, L-3)."""
    return [2, num_layers // 2, num_layers - 3]


def tools_default_ids(num_layers: int) -> list[int]:
    """The training tools' default ids, output-of (1, L//2-1, L-4), as a set in order."""
    return sorted({1, num_layers // 2 - 1, num_layers - 4})


def explicit_convention(draft_config: DraftConfig, environ=os.environ) -> tuple[str | None, str]:
    """An explicit convention and who set it: the environment, then the draft config (the
    record has checked its spelling)."""
    asked = settings.value(settings.LAYER_IDS, environ)
    if asked not in (None, "auto"):
        return asked, f"environment variable {CONVENTION_ENV}"
    return draft_config.written_convention


def resolve_layer_ids(
    draft_config: DraftConfig | Mapping,
    num_target_layers: int | None,
    *,
    can_capture_after_last: bool = True,
    fc_in_features: int | None = None,
    target_hidden_size: int | None = None,
    layer_prefix: str | None = None,
    environ=os.environ,
) -> LayerIdDecision:
    """Decide and validate the ids vLLM must capture for this draft and target.

    ``num_target_layers`` None (target unknown) skips the range check. ``layer_prefix``
    is the checkpoint's decoder-layer tensor prefix (``midlayer.`` or ``layers.0.``)
    when its headers could be read; it tells TorchSpec's two exports apart.
    """
    as_written, source = draft_config.written_ids
    if as_written is None:
        default = vllm_default_ids(num_target_layers) if num_target_layers else None
        decision = LayerIdDecision(
            None, source, "vllm-default", default, "the draft config names no ids"
        )
    else:
        written = sorted(as_written)
        convention, reason, rule, tool, ambiguous = _convention(
            draft_config, written, source, num_target_layers, layer_prefix, environ
        )
        other = _capture(written, OTHER[convention])
        if ambiguous and not _in_range(other, num_target_layers, can_capture_after_last):
            ambiguous = False  # the other reading names layers the target does not have
        decision = LayerIdDecision(
            written, source, convention, _capture(written, convention), reason, rule, tool,
            other if ambiguous else None,
            as_written if as_written != written else None,
        )
    _check_range(decision, num_target_layers, can_capture_after_last)
    _check_count(decision, fc_in_features, target_hidden_size, draft_config.source)
    return decision


def _capture(written: list[int], convention: str) -> list[int]:
    return [i + TO_CAPTURE_ID[convention] for i in written]


def _convention(config, written, source, layers, layer_prefix, environ):
    """(convention, reason, rule, tool, ambiguous) for ids that are present."""
    convention, who = explicit_convention(config, environ)
    place = TOP if source == TOP_IDS else NESTED
    readings = tool_readings(config, layer_prefix)
    covering = [r for r in readings if place in r.ids_at]
    conventions = {r.convention for r in covering}
    if convention and who.startswith("config.json") and len(conventions) == 1 \
            and convention not in conventions:
        raise LayerIdError(_contradiction(config, source, who, convention, covering[0]))
    if convention:
        return convention, f"set by {who}", "explicit", None, False
    if covering and len(conventions) == 1:
        row = covering[0]
        tool = row.tool if len(covering) == 1 else row.tool.split(" (")[0]
        return (row.convention, f"written by {tool}: {row.marker}", "tool", tool, False)
    # No single tool reading: sglang's heuristic, with a note on why no tool decided.
    convention = OUTPUT_OF if written[0] == 1 else INPUT_OF
    reason = ("first id is 1, the training tools' convention" if convention == OUTPUT_OF
              else "first id is not 1, vLLM's convention")
    tool = None
    if len(conventions) > 1:
        tool = covering[0].tool.split(" (")[0]
        reason += (f"; {tool} wrote this config, but its exports differ in convention and "
                   "the checkpoint's tensor names (midlayer. or layers.0.) were not read")
    elif readings:
        tool = readings[0].tool
        reason += f"; {tool} wrote this config but never writes ids at the {place}"
    if layers and written == tools_default_ids(layers):
        reason += "; they are the training tools' default ids (1, L//2-1, L-4)"
    elif layers and written == vllm_default_ids(layers):
        reason += "; they are vLLM's default ids (2, L//2, L-3)"
    known_default = bool(layers) and written in (tools_default_ids(layers),
                                                  vllm_default_ids(layers))
    return convention, reason, "sglang-heuristic", tool, not known_default


def _contradiction(config: DraftConfig, source: str, who: str, convention: str,
                   row: ToolExport) -> str:
    """A convention in config.json that says the opposite of the tool that wrote the ids."""
    return (
        f"{config.source}: {who} says {convention!r}, but the ids in {source} were written "
        f"by {row.tool.split(' (')[0]} ({row.marker}), which writes them {row.convention}; "
        f"the two readings capture different layers. Remove the key if the draft is as the "
        f"tool exported it; if its ids were renumbered after export, set "
        f"{CONVENTION_ENV}={convention} when serving (the environment decides over both), "
        "or measure with `vllm-kimi-eagle calibrate`."
    )


def _in_range(capture: list[int], layers: int | None, can_capture_after_last: bool) -> bool:
    if layers is None:
        return True
    highest = layers if can_capture_after_last else layers - 1
    return all(LOWEST_CAPTURE_ID <= i <= highest for i in capture)


def _check_range(decision: LayerIdDecision, layers: int | None, can_capture_after_last: bool) -> None:
    if layers is None or _in_range(decision.capture_ids, layers, can_capture_after_last):
        return
    highest = layers if can_capture_after_last else layers - 1
    bad = [i for i in decision.capture_ids if i < LOWEST_CAPTURE_ID or i > highest]
    hint = ""
    if not can_capture_after_last and layers in bad:
        hint = (
            f" Capturing after the last layer (id {layers}) needs vLLM 0.25.1 or newer."
        )
    if 0 in bad:
        hint += (" Id 0 would be the input of layer 0, the embeddings, which vLLM cannot "
                 "capture.")
    raise LayerIdError(
        f"draft ids {decision.written} ({decision.source}), read as {decision.convention}-"
        f"layer ({decision.reason}), mean capturing the inputs of layers "
        f"{decision.capture_ids}, but the target has {layers} layers (valid: "
        f"{LOWEST_CAPTURE_ID}..{highest}); "
        f"{bad} is out of range.{hint} Check that the draft belongs to this target, or "
        f"state the convention with {CONVENTION_ENV}=output-of|input-of or {CONVENTION_KEY} "
        "in the draft's config.json."
    )


def _check_count(decision: LayerIdDecision, fc_in: int | None, hidden: int | None,
                 source: str) -> None:
    if not fc_in or not hidden:
        return
    count = len(decision.capture_ids or vllm_default_ids(3))
    if fc_in % hidden or fc_in // hidden != count:
        raise LayerIdError(
            f"{source}: the draft's fc.weight (in its checkpoint) takes {fc_in} input "
            f"features, i.e. "
            f"{fc_in / hidden:g} captured states of the target's hidden size {hidden}, but "
            f"{count} layer ids are given ({decision.written or 'vLLM default'}"
            f" {decision.capture_ids or '(2, L//2, L-3)'}). Give as many ids in {IDS_KEY} as "
            "the draft was trained with, or export fc.weight again if its shape is wrong."
        )

