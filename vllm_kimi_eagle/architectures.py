"""Which draft architectures the plugin serves, and with which class.

The names vLLM meets in a draft's config.json and the class that serves them, plus the
user's choice between this plugin's class and vLLM's in-tree one. ``register()`` reads
them, and so do the hooks that must know whether a draft is served by our class.
"""

from __future__ import annotations

import os

from vllm_kimi_eagle import draft_class_entry, settings, vllm_compat

DRAFT_ENV = settings.DRAFT.name
# Draft architectures served by this plugin, and the class that serves them.
# A lazy name (draft_class_entry.py): the plugin's class, or vLLM's where a vLLM minor the
# plugin was not checked on breaks what the plugin's class builds on.
DRAFT_CLASS = draft_class_entry.ENTRY
# vLLM's own MLA draft class, under a name of its own: the speculative hook gives a draft
# this name where vLLM's class serves it (draft_class.py).
IN_TREE_CLASS = ":".join(vllm_compat.IN_TREE_MLA_DRAFT)
IN_TREE_ALIAS = "Eagle3DeepseekV2ForCausalLMInTree"  # starts with Eagle3: vLLM keeps it
DRAFT_ARCHITECTURES = ("Eagle3DeepseekV2ForCausalLM", "Eagle3DeepseekV3ForCausalLM")
# MLA draft architectures that only a training tool writes and vLLM has no class for:
# SpecForge's (specforge/modeling/draft/deepseek_eagle3.py). Served by the same class.
TOOL_DRAFT_ARCHITECTURES = ("DeepseekV3ForCausalLMEagle3",)
PLUGIN_DRAFT_ARCHITECTURES = frozenset(DRAFT_ARCHITECTURES + TOOL_DRAFT_ARCHITECTURES)


def draft_choice(environ=os.environ) -> str:
    """Which draft class the user asked for through ``VLLM_KIMI_EAGLE_DRAFT`` ("plugin"
    where it is unset or cannot be read)."""
    return settings.value(settings.DRAFT, environ)
