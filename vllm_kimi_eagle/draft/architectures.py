"""Which draft architectures the plugin serves, and with which class.

The names vLLM meets in a draft's config.json and the class that serves them.
``register()`` reads them, and so do the hooks that must know whether a draft is served
by our class. Which class the user asked for is ``draft_class.asked_class``.
"""

from __future__ import annotations

from vllm_kimi_eagle.compat import vllm_compat

# Draft architectures served by this plugin, and the class that serves them.
# A lazy name (draft_class_entry.py): the plugin's class, or vLLM's where a vLLM minor the
# plugin was not checked on breaks what the plugin's class builds on. A string, so that
# reading it imports nothing (tests/unit/test_layout.py checks that it names the class).
DRAFT_CLASS = "vllm_kimi_eagle.serving.draft_class_entry:Eagle3DeepseekV2ForCausalLM"
# vLLM's own MLA draft class, under a name of its own: the speculative hook gives a draft
# this name where vLLM's class serves it (draft_class.py).
IN_TREE_CLASS = ":".join(vllm_compat.IN_TREE_MLA_DRAFT)
IN_TREE_ALIAS = "Eagle3DeepseekV2ForCausalLMInTree"  # starts with Eagle3: vLLM keeps it
DRAFT_ARCHITECTURES = ("Eagle3DeepseekV2ForCausalLM", "Eagle3DeepseekV3ForCausalLM")
# MLA draft architectures that only a training tool writes and vLLM has no class for:
# SpecForge's (specforge/modeling/draft/deepseek_eagle3.py). Served by the same class.
TOOL_DRAFT_ARCHITECTURES = ("DeepseekV3ForCausalLMEagle3",)
PLUGIN_DRAFT_ARCHITECTURES = frozenset(DRAFT_ARCHITECTURES + TOOL_DRAFT_ARCHITECTURES)
