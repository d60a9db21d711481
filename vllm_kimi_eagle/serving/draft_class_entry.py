"""The name vLLM's registry resolves the plugin's MLA draft architectures to.

register() maps them to ``draft_class_entry:Eagle3DeepseekV2ForCausalLM``, a lazy name: the
class is looked up here only when vLLM resolves a draft's class (the process that builds
the draft, or vLLM's class inspection). On a vLLM minor the plugin was not checked on, the
contract of the plugin's class is read then (``release_gate.contract_problems_here``), not
in register(); where it does not hold, vLLM's in-tree class is what this name gives, and
the speculative hook, which reads the same contract, has said so and served the draft as
vLLM's class serves it (``draft_class.py``). That class is guarded here by the hook's own
rule: where the hook did not run (its hooked method moved too), a draft vLLM's class would
serve wrong (NoPE, an output gate...) is refused in the worker with the hook's words.
"""

from __future__ import annotations

import functools
import importlib
import logging
import os

logger = logging.getLogger(f"vllm.{__name__}")  # under vLLM's log handler
CLASS_NAME = "Eagle3DeepseekV2ForCausalLM"  # architectures.DRAFT_CLASS names it


@functools.cache
def resolve() -> type:
    """The class serving the plugin's MLA draft architectures in this process (said once)."""
    from vllm_kimi_eagle.compat import release_gate, vllm_compat

    problems = release_gate.contract_problems_here()
    if problems:
        logger.warning(release_gate.kept_line(vllm_compat.installed_vllm_version_text(),
                                              list(problems)))
        module, name = vllm_compat.IN_TREE_MLA_DRAFT
        return guarded(getattr(importlib.import_module(module), name), problems)
    return getattr(importlib.import_module("vllm_kimi_eagle.serving.draft_model"), CLASS_NAME)


def guarded(in_tree: type, problems: tuple[str, ...]) -> type:
    """vLLM's class, refusing where it is built a draft it would serve wrong."""

    class Guarded(in_tree):
        def __init__(self, *, vllm_config, prefix: str = ""):
            check_in_tree(vllm_config, problems)
            super().__init__(vllm_config=vllm_config, prefix=prefix)

    Guarded.__name__ = Guarded.__qualname__ = in_tree.__name__
    Guarded.guards = in_tree  # the class that serves, for whoever asks which one it is
    return Guarded


def check_in_tree(vllm_config, problems: tuple[str, ...]) -> None:
    """The hook's checks on the draft being built, where the hook did not run (its hooked
    method moved too): the class decision (``draft_class.choose_class``) and the
    checkpoint against its config, each refusal raised as the hook raises it, and the rope
    base asked for applied. Where the hook ran, it checked all of it already."""
    from vllm_kimi_eagle.compat import vllm_compat
    from vllm_kimi_eagle.draft import checkpoint, draft_source, rope_override
    from vllm_kimi_eagle.draft.draft_class import asked_class
    from vllm_kimi_eagle.draft.draft_config import parse_draft_config
    from vllm_kimi_eagle.draft.draft_report import draft_report
    from vllm_kimi_eagle.draft.served_draft import attached

    draft_model_config = vllm_config.speculative_config.draft_model_config
    if attached(draft_model_config.hf_config) is not None:
        return
    model, revision = draft_model_config.model, getattr(draft_model_config, "revision", None)
    found = draft_source.draft_config_json(model, revision)
    if found is None:
        logger.warning("vllm-kimi-eagle: the config.json of the draft %s is neither a "
                       "local file nor in the Hugging Face cache: vLLM's class serves it "
                       "unchecked", model)
        return
    config = parse_draft_config(*found)
    headers = draft_source.draft_headers(model, revision)
    target = vllm_config.model_config
    # The plugin acts in this process: it registered the name being resolved.
    report = draft_report(
        config, headers.tensors, target_layers=vllm_compat.total_layers(target),
        target_hidden=target.get_hidden_size(), target_vocab=target.get_vocab_size(),
        can_capture_after_last=vllm_compat.can_capture_after_last_layer(),
        asked=asked_class(os.environ, verdict_act=True), contract=problems,
        release=vllm_compat.installed_vllm_version())
    report.choice.refuse()
    if report.tensor_problems:
        raise checkpoint.CheckpointError(
            f"the EAGLE3 MLA draft at {model}, served by vLLM's in-tree class, does not "
            f"match its config.json (read from the {headers.where}):\n  - "
            + "\n  - ".join(report.tensor_problems))
    if headers.tensors is None:
        logger.warning("vllm-kimi-eagle: the checkpoint of the draft %s could not be read "
                       "(%s): vLLM's class loads it unchecked", model, headers.where)
    rope_override.serve_rope_theta(draft_model_config.hf_config, report.rope_theta,
                                   config.config_rope_theta, logger)


def __getattr__(name: str):
    if name == CLASS_NAME:
        return resolve()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
