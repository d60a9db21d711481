"""Serving: what runs inside vLLM's processes.

The speculative-config hook (``speculative_hook``, reading ``draft_plan`` and refusing by
``draft_checks``), the draft class (``draft_model`` with ``top_tokens``, reached through
the lazy name ``draft_class_entry``), the config alias and MLA detection
(``config_alias``, ``mla_detection``, ``draft_config_override``) and the greedy
shortcut's rule (``shortcut_policy``).

It may import ``draft``, ``cpu``, ``compat`` and ``vllm_kimi_eagle.settings``; nothing
imports it but ``register()`` and the tools. vLLM itself is imported inside functions or
by the modules vLLM loads by name, never by ``register()`` at import time.
"""
