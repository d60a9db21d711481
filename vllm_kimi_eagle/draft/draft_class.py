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

from packaging.version import Version

from vllm_kimi_eagle import settings
from vllm_kimi_eagle.compat import vllm_compat
from vllm_kimi_eagle.draft.draft_config import DraftConfig
from vllm_kimi_eagle.draft.draft_positions import NOPE_ENV, NOPE_KEY, PositionDecision
from vllm_kimi_eagle.draft.draft_spec import DEFAULT_NUM_AUX, canonical_name, forward_problems
from vllm_kimi_eagle.draft.quantization import CHECKED, Quantization


class DraftClassError(ValueError):
    """A draft the plugin's class cannot serve and vLLM's would serve wrong."""


@dataclass(frozen=True)
class Needs:
    """What a draft is served with, as the in-tree gaps read it."""

    config: DraftConfig
    positions: PositionDecision
    tensor_names: tuple[str, ...] = ()
    release: Version | None = None  # the vLLM whose class would serve it; None: the newest


# How vLLM's class fails a draft: LOAD, it cannot build or load the draft as its checkpoint
# holds it (an error naming no file, or weights left uninitialised); FORWARD, it loads it
# and computes otherwise than the config says the draft was trained.
LOAD, FORWARD = "load", "forward"
EVERY_RELEASE = (Version("0.26"), Version("0.33"))


@dataclass(frozen=True)
class Gap:
    """One thing vLLM's in-tree MLA draft class gets wrong, on the minors ``releases``
    (inclusive; read in their deepseek_eagle3.py, docs/checkpoints.md): the field, whether
    a draft has it, what the class does."""

    field: str
    has: Callable[[Needs], bool]
    words: str  # what vLLM's class does, as the docs print it
    kind: str  # LOAD or FORWARD
    releases: tuple[Version, Version] = EVERY_RELEASE
    # The words for this draft, where they depend on it (its filled defaults, its ids).
    detail: Callable[[Needs], str] | None = None

    def what(self, needs: Needs) -> str:
        return self.detail(needs) if self.detail else self.words

    def holds_on(self, release: Version | None) -> bool:
        """Whether the gap is in the class of vLLM ``release``: a minor outside those read
        is taken as the nearest read (None: the newest)."""
        oldest, newest = EVERY_RELEASE
        found = newest if release is None else vllm_compat.minor(release)
        found = min(max(found, oldest), newest)
        return self.releases[0] <= found <= self.releases[1]


def _in_tree_states(config: DraftConfig) -> int:
    """How many captured states vLLM's class sizes fc for: num_aux_hidden_states, else the
    eagle_config id list, else 3 (it never reads the top-level ids for the count)."""
    nested = config.nested.ids
    return config.num_aux_hidden_states or (len(nested) if nested else DEFAULT_NUM_AUX)


def _states(config: DraftConfig) -> int:
    """How many the draft reads (draft_spec's count)."""
    ids, _ = config.written_ids
    return config.num_aux_hidden_states or (len(ids) if ids else DEFAULT_NUM_AUX)


def _pruned(config: DraftConfig) -> bool:
    return bool(config.draft_vocab_size) and config.draft_vocab_size != config.vocab_size


def _filled(field: str, then: str) -> Callable[[Needs], str]:
    """The words of a row on a field transformers fills where config.json leaves it out,
    with the value it fills for this draft's model_type."""
    def words(needs: Needs) -> str:
        value = needs.config.unwritten.get(field)
        filled = f"{value} ({needs.config.model_type}'s default)" if value is not None \
            else "its model_type's default"
        return f"left out, transformers makes it {filled}, {then}"
    return words


Q_LORA_LEFT_OUT = ("and vLLM's class builds q's low-rank projection at that rank, where the "
                   "plugin reads none and the checkpoint holds q_proj: it cannot load it")
LAYERS_LEFT_OUT = ("and vLLM's class builds that many layers, loading one and leaving the "
                   "rest uninitialised; write num_hidden_layers: 1")
IDS_AT_THE_TOP = ("vLLM's class sizes fc for num_aux_hidden_states, else eagle_config's "
                  "list, else 3 captured states, and cannot load fc.weight")

# What vLLM's in-tree MLA draft class gets wrong (deepseek_eagle3.py, read in 0.26.0-0.33.0;
# docs/checkpoints.md prints this table with each row's releases).
IN_TREE_GAPS: tuple[Gap, ...] = (
    Gap(NOPE_KEY, lambda n: n.positions.nope,
        "it rotates the rope dims this draft reads unrotated (NoPE): a silent acceptance "
        "loss", FORWARD),
    Gap("mla_use_output_gate", lambda n: bool(n.config.mla_use_output_gate),
        "it has no output gate and cannot load g_proj", LOAD),
    Gap("eagle_config.use_input_layernorm_in_first_layer",
        lambda n: n.config.nested.use_input_layernorm_in_first_layer is False,
        "it always applies hidden_norm, which this draft was trained without (at weight 1, "
        "the checkpoint having none)", FORWARD),
    Gap("eagle_config.use_last_layernorm", lambda n: n.config.nested.use_last_layernorm is False,
        "it always applies the final norm, which this draft was trained without (at weight "
        "1, the checkpoint having none)", FORWARD),
    Gap("use_aux_norm", lambda n: bool(n.config.use_aux_norm) and n.config.fc_norm is None,
        "it reads fc_norm only: it builds no fc norms this draft was trained with, and cannot "
        "load their weights", LOAD),
    Gap("the rope type (default)", lambda n: n.config.rope.kind == "default",
        "it rewrites every rope into DeepSeek YaRN and fails building a default one "
        "(KeyError: 'factor')", LOAD, (Version("0.26"), Version("0.27"))),
    Gap("q_lora_rank", lambda n: "q_lora_rank" in n.config.unwritten,
        "left out, transformers fills its model_type's default (1536 for DeepSeek-V2/V3 and "
        "kimi_k2), " + Q_LORA_LEFT_OUT, LOAD, detail=_filled("q_lora_rank", Q_LORA_LEFT_OUT)),
    Gap("q_lora_rank (null)", lambda n: n.config.kv_lora_rank is not None
        and n.config.q_lora_rank is None and "q_lora_rank" not in n.config.unwritten,
        "its weight loader renames kv_a_proj_with_mqa to the fused q/kv projection, which it "
        "builds only with a q_lora_rank: it cannot load this draft", LOAD),
    Gap("num_hidden_layers", lambda n: "num_hidden_layers" in n.config.unwritten,
        "left out, transformers fills its model_type's default (61 for DeepSeek-V3 and "
        "kimi_k2), " + LAYERS_LEFT_OUT, LOAD,
        detail=_filled("num_hidden_layers", LAYERS_LEFT_OUT)),
    Gap("num_hidden_layers (null)", lambda n: n.config.num_hidden_layers is None
        and "num_hidden_layers" not in n.config.unwritten,
        "vLLM's class cannot build its layers (transformers 5's strict config types refuse "
        "the null first, naming no file); write num_hidden_layers: 1", LOAD),
    Gap("tensor names", lambda n: any(name.startswith("model.") for name in n.tensor_names),
        "its loader puts 'model.' before every name again and cannot load a checkpoint "
        "written under 'model.'", LOAD),
    Gap("eagle_aux_hidden_state_layer_ids",
        lambda n: _in_tree_states(n.config) != _states(n.config),
        "written at the top level only, without num_aux_hidden_states, as many ids as not "
        "3: " + IDS_AT_THE_TOP, LOAD,
        detail=lambda n: (f"written at the top level only, it lists {_states(n.config)} "
                          f"layers, and {IDS_AT_THE_TOP.replace('3 captured states', '3')} "
                          f"({_in_tree_states(n.config)} here); write num_aux_hidden_states: "
                          f"{_states(n.config)}")),
    Gap("d2t", lambda n: not _pruned(n.config)
        and any(canonical_name(name) == "d2t" for name in n.tensor_names),
        "a draft whose vocabulary is the target's gets no d2t parameter and vLLM's class "
        "cannot load one; remove d2t from the checkpoint (the identity, all zeros)", LOAD,
        (Version("0.30"), Version("0.33"))),
)


def in_tree_gaps(needs: Needs, kind: str | None = None, fields: bool = True) -> list[str]:
    """What vLLM's in-tree class would get wrong with this draft, one line per field: the
    rows above that hold on the release (of ``kind`` only, where given), then, with
    ``fields`` and for every kind but LOAD, what no draft class serves as trained on
    vLLM's MLA attention, which both build on (``draft_spec.forward_problems``; vLLM's
    class rotates the rope dims)."""
    found = []
    for gap in IN_TREE_GAPS:
        if (kind is None or gap.kind == kind) and gap.holds_on(needs.release) \
                and gap.has(needs):
            where = gap.field
            if gap.field == NOPE_KEY:
                where = f"{NOPE_KEY} ({needs.positions.reason})"
            found.append(f"{where}: {gap.what(needs)}")
    if fields and kind != LOAD:
        found += forward_problems(needs.config, rotated=True)
    return found


@dataclass(frozen=True)
class ClassChoice:
    ours: bool  # the plugin's class serves the draft
    why: str  # in words, for the start-up line and inspect
    refusal: str | None = None  # neither class serves it right: why, naming the field
    # Where vLLM's class serves it as the user asked (VLLM_KIMI_EAGLE_DRAFT=upstream): what
    # it computes otherwise than the draft was trained, one line each.
    warnings: tuple[str, ...] = ()

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
        return _asked_in_tree(needs)
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


def _asked_in_tree(needs: Needs) -> ClassChoice:
    """vLLM's class, as the user asked: refused where it cannot load the draft; where it
    computes otherwise than trained, served with one warning line per field."""
    why = f"{settings.DRAFT.name}=upstream"
    cannot = in_tree_gaps(needs, LOAD)
    if cannot:
        return ClassChoice(False, why, refusal=(
            f"{needs.config.source}: vLLM's in-tree class, asked for by {why}, cannot serve "
            "this draft: " + "; ".join(cannot) + f". Unset {settings.DRAFT.name} to serve it "
            "with the plugin's class."))
    # The fields no draft class serves reach the user as the report's notes.
    return ClassChoice(False, why, warnings=tuple(in_tree_gaps(needs, FORWARD, fields=False)))


KIND_WORDS = {LOAD: "cannot load it: refused on every route",
              FORWARD: "computes otherwise: refused on the hand-off, a warning where asked for"}


def gaps_table() -> str:
    """IN_TREE_GAPS as docs/checkpoints.md prints it."""
    lines = ["| field | releases | vLLM's class | what it does |", "|---|---|---|---|"]
    for gap in IN_TREE_GAPS:
        first, last = gap.releases
        lines.append(f"| `{gap.field}` | {first}-{last} | {KIND_WORDS[gap.kind]} | "
                     f"{gap.words} |")
    return "\n".join(lines)
