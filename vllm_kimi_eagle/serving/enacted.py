"""What vLLM built, read off its live objects: the draft model as constructed (either
class), and the layers the target captures. Pure readers: nothing here changes a model.

The self-check (``self_check.py``) compares these with the plan the speculative hook
decided; the tests read them to show that each decision reaches the model.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True)
class BuiltDraft:
    """A draft model as vLLM built it."""

    draft_class: str  # "module:Class" of the class serving (vLLM's for a guarded one)
    nope: bool  # its attention applies no rotary embedding
    rope_base: float | None  # the rotary embedding's base (None: NoPE)
    rope_class: str | None  # the rotary embedding's class name (None: NoPE)
    rope_factor: float | None  # a scaling rope's factor (yarn's), where it has one
    softmax_scale: float
    output_gate: bool
    fc_norm: bool
    norm_output: bool
    norm_before_residual: bool
    hidden_norm: bool
    final_norm: bool
    d2t: bool  # a draft-to-target id map is applied
    draft_vocab: int
    logit_scale: float
    captured_states: int  # how many captured target states fc reads

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def class_name(model) -> str:
    """The class serving a draft: a guarded vLLM class (draft_class_entry) by the class it
    guards."""
    cls = getattr(type(model), "guards", type(model))
    return f"{cls.__module__}:{cls.__qualname__}"


def draft_as_built(model) -> BuiltDraft:
    """Read a built MLA EAGLE3 draft: the plugin's class (it carries its ``spec``) or
    vLLM's in-tree one (deepseek_eagle3.py, 0.26-0.33)."""
    inner = model.model
    layer = inner.layers[0]
    attention = layer.self_attn
    rotary = getattr(attention.mla_attn, "rotary_emb", None)
    ours = hasattr(model, "spec")
    if ours:
        from torch import nn

        hidden_norm = not isinstance(layer.hidden_norm, nn.Identity)
        final_norm = inner.norm is not None
        norm_output = bool(inner.spec.norm_output)
        before_residual = bool(layer.norm_before_residual)
        states = model.spec.num_aux
    else:  # vLLM's class always builds both norms
        hidden_norm = final_norm = True
        norm_output = bool(inner.norm_output)
        before_residual = getattr(layer._residual_norm, "__name__", "") == \
            "_norm_before_residual"
        states = inner.num_aux_hidden_states
    lm_head = model.lm_head
    return BuiltDraft(
        draft_class=class_name(model),
        nope=rotary is None,
        rope_base=None if rotary is None else float(rotary.base),
        rope_class=None if rotary is None else type(rotary).__name__,
        rope_factor=None if rotary is None else getattr(rotary, "scaling_factor", None),
        softmax_scale=float(attention.scaling),
        output_gate=getattr(attention.mla_attn, "g_proj", None) is not None,
        fc_norm=inner.fc_norm is not None,
        norm_output=norm_output,
        norm_before_residual=before_residual,
        hidden_norm=hidden_norm,
        final_norm=final_norm,
        d2t=getattr(model, "draft_id_to_target_id", None) is not None,
        draft_vocab=int(getattr(lm_head, "org_vocab_size", lm_head.num_embeddings)),
        logit_scale=float(model.logits_processor.scale),
        captured_states=int(states),
    )


def unwrap(model):
    """The model a runner holds, out of vLLM's CUDA-graph and micro-batch wrappers."""
    seen = 0
    while model is not None and seen < 8:
        inner = getattr(model, "unwrap", None)
        if callable(inner):
            model = inner()
        elif hasattr(model, "runnable") and not hasattr(model, "named_modules"):
            model = model.runnable
        else:
            return model
        seen += 1
    return model


def target_capture_ids(model) -> tuple[int, ...] | None:
    """The layers the target captures for the draft, as vLLM set them on its model
    (``aux_hidden_state_layers``, on the decoder stack of every class that captures:
    DeepSeek-V2/V3, the Kimi-K2.5 wrapper's language model, Kimi-K3); None where no module
    of the target holds them."""
    for module in model.modules():
        layers = vars(module).get("aux_hidden_state_layers")
        if layers is not None:
            return tuple(int(i) for i in layers)
    return None


def runner_parts(runner) -> tuple:
    """(speculative config, target model, drafter, draft model) of a V1 or V2 model
    runner, each None where it has none (V1: ``drafter``, V2: ``speculator``)."""
    spec_config = getattr(runner, "speculative_config", None)
    target = unwrap(getattr(runner, "model", None))
    drafter = getattr(runner, "drafter", None) or getattr(runner, "speculator", None)
    draft = unwrap(getattr(drafter, "model", None))
    return spec_config, target, drafter, draft


def shortcut_flag(spec_config, drafter) -> bool | None:
    """Whether the proposer takes the draft's greedy shortcut: the flag it copied from the
    speculative config (V1's proposer and V2's speculator keep their own), else the
    config's; None where this vLLM has no such flag."""
    found = getattr(drafter, "use_local_argmax_reduction", None)
    return found if found is not None else getattr(spec_config, "use_local_argmax_reduction",
                                                   None)
