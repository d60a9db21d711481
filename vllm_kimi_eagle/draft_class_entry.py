"""The name vLLM's registry resolves the plugin's MLA draft architectures to.

register() maps them to ``draft_class_entry:Eagle3DeepseekV2ForCausalLM``, a lazy name: the
class is looked up here only when vLLM resolves a draft's class (the process that builds
the draft, or vLLM's class inspection). On a vLLM minor the plugin was not checked on, the
contract of the plugin's class is read then (``release_gate.contract_problems_here``), not
in register(); where it does not hold, vLLM's in-tree class is what this name gives, and
the speculative hook, which reads the same contract, has said so and served the draft as
vLLM's class serves it (``draft_class.py``).
"""

from __future__ import annotations

import functools
import importlib
import logging

logger = logging.getLogger(f"vllm.{__name__}")  # under vLLM's log handler
CLASS_NAME = "Eagle3DeepseekV2ForCausalLM"
ENTRY = f"{__name__}:{CLASS_NAME}"


@functools.cache
def resolve() -> type:
    """The class serving the plugin's MLA draft architectures in this process (said once)."""
    from vllm_kimi_eagle import release_gate, vllm_compat

    problems = release_gate.contract_problems_here()
    if problems:
        logger.warning(release_gate.kept_line(vllm_compat.installed_vllm_version_text(),
                                              list(problems)))
        module, name = vllm_compat.IN_TREE_MLA_DRAFT
    else:
        module, name = "vllm_kimi_eagle.draft_model", CLASS_NAME
    return getattr(importlib.import_module(module), name)


def __getattr__(name: str):
    if name == CLASS_NAME:
        return resolve()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
