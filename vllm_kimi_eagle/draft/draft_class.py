"""Which class serves a draft: the plugin's, or vLLM's in-tree one, and why.

The plugin's class serves an MLA EAGLE3 draft when it can. Where it cannot (a quantization
scheme it does not load, or a vLLM minor where what it builds on moved), vLLM's class
serves the draft by itself, with the plugin's config fixes and layer ids kept, unless the
draft needs something vLLM's class would get wrong (``IN_TREE_GAPS``): then neither class
serves it right, and the refusal names the field. ``VLLM_KIMI_EAGLE_DRAFT=upstream`` asks
for vLLM's class for every draft.

One pure function (``choose_class``), read by the speculative hook and ``inspect`` through
the draft report, so start-up and ``inspect`` cannot disagree.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from vllm_kimi_eagle import settings
from vllm_kimi_eagle.draft.draft_config import DraftConfig
from vllm_kimi_eagle.draft.draft_positions import NOPE_ENV, NOPE_KEY, PositionDecision
from vllm_kimi_eagle.draft.draft_spec import MLA_ROPE_TYPES
from vllm_kimi_eagle.draft.quantization import CHECKED, Quantization


class DraftClassError(ValueError):
    """A draft the plugin's class cannot serve and vLLM's would serve wrong."""


@dataclass(frozen=True)
class Needs:
    """What a draft is served with, as the in-tree gaps read it."""

    config: DraftConfig
    positions: PositionDecision
    tensor_names: tuple[str, ...] = ()


# What vLLM's in-tree MLA draft class would get wrong: (the field, whether this draft has
# it, what vLLM's class would do). Read in deepseek_eagle3.py, 0.28-0.33.
IN_TREE_GAPS: tuple[tuple[str, Callable[[Needs], bool], str], ...] = (
    (NOPE_KEY, lambda n: n.positions.nope,
     "it rotates the rope dims this draft reads unrotated (NoPE): a silent acceptance loss"),
    ("mla_use_output_gate", lambda n: bool(n.config.mla_use_output_gate),
     "it has no output gate and cannot load g_proj"),
    ("eagle_config.use_input_layernorm_in_first_layer",
     lambda n: n.config.nested.use_input_layernorm_in_first_layer is False,
     "it always applies hidden_norm, which this draft was trained without"),
    ("eagle_config.use_last_layernorm", lambda n: n.config.nested.use_last_layernorm is False,
     "it always applies the final norm, which this draft was trained without"),
    ("use_aux_norm", lambda n: bool(n.config.use_aux_norm) and n.config.fc_norm is None,
     "it reads fc_norm only, so it would not apply the fc norms this draft was trained with"),
    ("the rope type", lambda n: n.config.rope.kind not in MLA_ROPE_TYPES,
     "its MLA attention serves every rope type but default and yarn as DeepSeek YaRN"),
    ("q_lora_rank", lambda n: "q_lora_rank" in n.config.unwritten,
     "left out, transformers makes it 1536, and vLLM's class builds q's low-rank projection "
     "at that rank where the plugin reads none; write q_lora_rank (null for a draft "
     "without one)"),
    ("num_hidden_layers", lambda n: n.config.num_hidden_layers is None,
     "absent or null, transformers makes it 61, and vLLM's class builds that many layers, "
     "loading one and leaving the rest uninitialised; write num_hidden_layers: 1"),
    ("tensor names", lambda n: any(name.startswith("model.") for name in n.tensor_names),
     "its loader puts 'model.' before every name again and cannot load a checkpoint "
     "written under 'model.'"),
)


def in_tree_gaps(needs: Needs) -> list[str]:
    """What vLLM's in-tree class would get wrong with this draft, one line per field: the
    rows above, then the fields no draft class serves as trained (draft_fields)."""
    found = []
    for field, has, what in IN_TREE_GAPS:
        if has(needs):
            where = field
            if field == NOPE_KEY:
                where = f"{NOPE_KEY} ({needs.positions.reason})"
            found.append(f"{where}: {what}")
    return found + list(needs.config.field_refusals)


@dataclass(frozen=True)
class ClassChoice:
    ours: bool  # the plugin's class serves the draft
    why: str  # in words, for the start-up line and inspect
    refusal: str | None = None  # neither class serves it right: why, naming the field

    def line(self, model: str) -> str:
        who = "the plugin's draft class" if self.ours else "vLLM's in-tree draft class"
        return f"the draft {model} is served by {who}: {self.why}"

    def refuse(self) -> None:
        """Raise DraftClassError where neither class serves the draft right."""
        if self.refusal is not None:
            raise DraftClassError(self.refusal)


def _why_not_ours(quantization: Quantization | None, contract: Iterable[str]) -> str | None:
    """Why the plugin's class cannot serve this draft here, or None."""
    problems = list(contract)
    if problems:
        return ("what the plugin's class builds on moved in this vLLM: "
                + "; ".join(problems))
    if quantization is not None and not quantization.loads_in_plugin_class:
        return (f"its quantization is {quantization.words}, which the plugin's class does "
                f"not load (it loads {CHECKED})")
    return None


OFF = "off"  # the plugin does not act in the process: vLLM's class, as without it


def asked_class(environ, verdict_act: bool) -> str:
    """The class asked for where a draft is served: VLLM_KIMI_EAGLE_DRAFT ("plugin" or
    "upstream"), or OFF where the plugin is off (VLLM_KIMI_EAGLE=0) or leaves this vLLM
    release alone (``verdict_act``: vllm_compat.support_verdict's ``act``)."""
    if not (settings.value(settings.PLUGIN, environ) and verdict_act):
        return OFF
    return settings.value(settings.DRAFT, environ)


def choose_class(asked: str, needs: Needs, quantization: Quantization | None,
                 contract: Iterable[str] = ()) -> ClassChoice:
    """Which class serves the draft. ``asked``: ``asked_class``; ``contract``: where this
    vLLM breaks what the plugin's class builds on (empty where it holds or was not
    checked)."""
    if needs.config.kv_lora_rank is None:
        return ClassChoice(False, "not an MLA draft: vLLM serves it with its own class")
    if asked == OFF:
        return ClassChoice(False, f"the plugin does not act ({settings.PLUGIN.name}=0, or a "
                           "vLLM release it leaves alone): vLLM serves the draft as without it")
    if asked == "upstream":
        return ClassChoice(False, f"{settings.DRAFT.name}=upstream")
    why_not = _why_not_ours(quantization, contract)
    if why_not is None:
        return ClassChoice(True, f"the default ({settings.DRAFT.name}=plugin)")
    gaps = in_tree_gaps(needs)
    if gaps:
        return ClassChoice(False, why_not, refusal=(
            f"{needs.config.source}: neither draft class serves this draft right. The "
            f"plugin's cannot: {why_not}. vLLM's in-tree class would serve it wrong: "
            + "; ".join(gaps) + ". Serve the draft unquantized (or in a scheme the plugin's "
            f"class loads) on a vLLM release the plugin was checked on, or, where the "
            f"draft was not trained with that field, remove it (for {NOPE_KEY}: "
            f"{NOPE_ENV}=off)."))
    return ClassChoice(False, f"{why_not}; vLLM's class serves everything this draft "
                       "needs, with the plugin's config fixes and layer ids kept")
