"""The readings ``calibrate`` measures: every plausible meaning of a draft's layer ids
(and each rope base asked for), and for a draft whose config.json sets mla_use_nope both
ways of reading its rope dims (NoPE, RoPE), as data. Pure."""

from __future__ import annotations

from dataclasses import dataclass

from vllm_kimi_eagle.draft import layer_ids
from vllm_kimi_eagle.draft.draft_config import DraftConfig, as_record
from vllm_kimi_eagle.draft.draft_positions import (
    MEASURED_KEY,
    NOPE_ENV,
    NOPE_KEY,
    decide_positions,
)
from vllm_kimi_eagle.draft.layer_ids import CONVENTION_ENV, CONVENTION_KEY
from vllm_kimi_eagle.draft.rope_override import ROPE_THETA_ENV
from vllm_kimi_eagle.tools.models.config_access import text_config_value

# vLLM cannot capture id 0 (layer_ids.LOWEST_CAPTURE_ID): every reading starts at 1.
LOWEST_CAPTURE_ID = layer_ids.LOWEST_CAPTURE_ID


class CalibrationError(ValueError):
    """A draft or target that calibrate cannot measure; says what and how to fix it."""


@dataclass(frozen=True)
class Reading:
    """One candidate: the target layers vLLM would capture, the draft's rope base, and
    whether its rope dims are rotated."""

    capture_ids: tuple[int, ...]
    rope_theta: float | None
    labels: tuple[str, ...]  # how the written ids give these layers, e.g. "eagle_config +1"
    source: str  # the config key of the ids this reading reads (first label's)
    convention: str  # layer_ids.INPUT_OF, OUTPUT_OF, or "vllm-default"
    nope: bool | None = None  # None: as the plugin reads the draft today; else NoPE or not

    @property
    def name(self) -> str:
        rope = "" if self.rope_theta is None else f", rope {self.rope_theta:g}"
        positions = "" if self.nope is None else (", NoPE" if self.nope else ", RoPE")
        return f"{list(self.capture_ids)}{rope}{positions}"


def served_nope(reading: Reading, draft_config: DraftConfig) -> bool:
    """Whether ``reading`` leaves the rope dims unrotated: its own, else today's decision."""
    if reading.nope is not None:
        return reading.nope
    return decide_positions(as_record(draft_config), {}).nope


def highest_capture_id(num_layers: int, can_capture_after_last: bool) -> int:
    return num_layers if can_capture_after_last else num_layers - 1


def readings(draft_config: DraftConfig, num_layers: int, can_capture_after_last: bool,
             rope_thetas: tuple[float, ...] = ()) -> list[Reading]:
    """Every reading worth measuring: each written list as written (input of layer N) and
    plus one (output of layer N), within the target's capturable layers, times the
    config's rope base and each of ``rope_thetas``; vLLM's default ids when the draft
    names none. Readings that capture the same layers are one candidate. Where config.json
    sets mla_use_nope (inspect's AMBIGUOUS, or a tool known to ignore the field), each
    reading is measured again with the rope dims read the other way."""
    draft_config = as_record(draft_config)
    highest = highest_capture_id(num_layers, can_capture_after_last)
    found: dict[tuple[int, ...], tuple[list[str], str, str]] = {}
    lists = draft_config.id_lists
    if not lists:
        found[tuple(layer_ids.vllm_default_ids(num_layers))] = (
            ["vLLM's default (no ids written)"], "none", "vllm-default")
    for key, ids in lists:
        for convention, shift in ((layer_ids.INPUT_OF, 0), (layer_ids.OUTPUT_OF, 1)):
            capture = tuple(i + shift for i in ids)
            if min(capture) < LOWEST_CAPTURE_ID or max(capture) > highest:
                continue
            label = f"{key} {'as written' if shift == 0 else '+1'} ({convention})"
            labels, source, conv = found.setdefault(capture, ([], key, convention))
            labels.append(label)
    config_theta = draft_config.config_rope_theta
    thetas = [None] + [t for t in dict.fromkeys(rope_thetas) if t != config_theta]
    positions = [None] + ([not decide_positions(draft_config, {}).nope]
                          if draft_config.mla_use_nope else [])
    return [Reading(capture, theta, tuple(labels), source, convention, nope)
            for capture, (labels, source, convention) in found.items() for theta in thetas
            for nope in positions]


def current_reading(draft_config: DraftConfig, num_layers: int, can_capture_after_last: bool,
                    fc_in_features=None, target_hidden_size=None, layer_prefix=None,
                    environ=None) -> tuple[tuple[int, ...] | None, str]:
    """The layers the plugin captures for this draft today, and its log line (the
    resolver's decision; None when the resolver refuses the draft)."""
    kwargs = {} if environ is None else {"environ": environ}
    try:
        decision = layer_ids.resolve_layer_ids(
            as_record(draft_config), num_layers, can_capture_after_last=can_capture_after_last,
            fc_in_features=fc_in_features, target_hidden_size=target_hidden_size,
            layer_prefix=layer_prefix, **kwargs)
    except layer_ids.LayerIdError as err:
        return None, f"refused: {err}"
    return tuple(decision.capture_ids), decision.log_line()


def setting(reading: Reading, draft_config: DraftConfig, layer_prefix: str | None = None,
            measured: bool = False) -> dict:
    """What to apply so that the plugin serves ``reading``: config.json fields, and the
    environment variables that do the same. A convention that contradicts the training
    tool that wrote the ids cannot go in config.json (the plugin refuses the pair): the
    environment variable, which decides over both, is the one way. The rope dims' reading
    goes in with MEASURED_KEY where it is not today's, or where ``measured`` (a verdict
    decided it) and config.json sets mla_use_nope."""
    draft_config = as_record(draft_config)
    config, env = {}, {}
    if reading.convention in layer_ids.CONVENTIONS:
        env[CONVENTION_ENV] = reading.convention
        if not contradicts_tool(draft_config, reading, layer_prefix):
            config[CONVENTION_KEY] = reading.convention
    if reading.rope_theta is not None:
        config["rope_theta"] = reading.rope_theta
        env[ROPE_THETA_ENV] = f"{reading.rope_theta:g}"
    nope = reading.nope
    if nope is None and measured and draft_config.mla_use_nope:
        nope = decide_positions(draft_config, {}).nope
    if nope is not None:
        config[NOPE_KEY], config[MEASURED_KEY] = nope, True
        env[NOPE_ENV] = "on" if nope else "off"
    return {"config.json": config, "environment": env}


def contradicts_tool(draft_config: DraftConfig, reading: Reading,
                     layer_prefix: str | None) -> bool:
    """Whether the reading's convention is the opposite of the one certain reading of
    the training tool that wrote its ids (layer_ids refuses such a config.json)."""
    place = layer_ids.TOP if reading.source == layer_ids.IDS_KEY else layer_ids.NESTED
    rows = [r for r in layer_ids.tool_readings(draft_config, layer_prefix) if place in r.ids_at]
    conventions = {r.convention for r in rows}
    return len(conventions) == 1 and reading.convention not in conventions


def check_target(target_config: dict, path: str) -> int:
    """The target's number of decoder layers; an error when it is not an MLA target."""
    kind = target_config.get("model_type")
    layers = text_config_value(target_config, "num_hidden_layers")
    if text_config_value(target_config, "kv_lora_rank") is None or not layers:
        raise CalibrationError(
            f"{path}/config.json: model_type {kind!r} has no kv_lora_rank (or no "
            "num_hidden_layers): not an MLA target. calibrate measures MLA EAGLE3 drafts on "
            "Kimi-K2.x / DeepSeek targets; give --target the model the draft was made for.")
    return int(layers)
