"""vllm-kimi-eagle: Kimi-K2.x EAGLE3 speculative decoding with MLA drafts, as a vLLM plugin.

vLLM calls :func:`register` through the ``vllm.general_plugins`` entry point in every
process it starts. It must stay cheap and idempotent and must not initialise CUDA: model
classes are registered as lazy ``"module:Class"`` strings.

Environment variables:

``VLLM_KIMI_EAGLE_DRAFT``
    ``plugin`` (default): the MLA EAGLE3 draft architectures are served by this plugin's
    class. ``upstream``: keep vLLM's in-tree class (config fixes stay on). To disable the
    plugin entirely, set ``VLLM_PLUGINS=""`` (vLLM's own switch).
``VLLM_KIMI_EAGLE_LAYER_IDS``
    ``output-of`` / ``input-of`` / ``auto`` (default: the training tool recognised in
    the config, else sglang's first-id-is-1 rule): how to read a draft's layer ids.
``VLLM_KIMI_EAGLE_DRAFT_ROPE_THETA``
    unset (default): the draft's config.json rope base; a number: serve the draft with
    that rope base instead (to check drafts trained with another base than written).
``VLLM_KIMI_EAGLE_CPU_MLA_VERIFY``
    ``1`` (default) / ``0``: on the CPU build, whether vLLM's MLA backend verifies draft
    tokens in its decode kernel (the plugin's builder, as vLLM's GPU MLA backends do) or,
    with ``0``, through its prefill path (see cpu_mla_verify.py).
``VLLM_KIMI_EAGLE_GREEDY_SHORTCUT``
    ``1`` (default) / ``0``: whether the plugin may turn on vLLM's
    ``use_local_argmax_reduction`` for its draft class (never over a value the user set,
    never where vLLM rejects it; see shortcut_policy.py).
"""

from __future__ import annotations

import logging

__version__ = "0.1.0"

logger = logging.getLogger(f"vllm.{__name__}")  # under vLLM's log handler
_registered = False


def register() -> None:
    """Entry point of the ``vllm.general_plugins`` group (idempotent, no CUDA)."""
    global _registered
    if _registered:
        return
    from vllm_kimi_eagle import vllm_compat

    act, message = vllm_compat.support_verdict(vllm_compat.installed_vllm_version())
    if message:
        logger.warning(message)
    if not act:
        _registered = True
        return

    from vllm import ModelRegistry

    from vllm_kimi_eagle.architectures import (
        DRAFT_CLASS,
        PLUGIN_DRAFT_ARCHITECTURES,
        draft_choice,
    )
    from vllm_kimi_eagle.config_alias import register_config_alias
    from vllm_kimi_eagle.cpu_mla_backend import install_cpu_mla_backend_choice
    from vllm_kimi_eagle.cpu_mla_verify import install_cpu_mla_verify
    from vllm_kimi_eagle.cpu_sampler import install_cpu_sampler
    from vllm_kimi_eagle.mla_detection import install_mla_detection
    from vllm_kimi_eagle.speculative_hook import install_speculative_hook

    ours = draft_choice() == "plugin"
    # Whichever draft class serves: the CPU sampler and MLA backend are vLLM's, for every
    # draft (both change nothing on builds with Triton, i.e. on GPUs).
    install_cpu_sampler()
    install_cpu_mla_verify()
    install_cpu_mla_backend_choice()
    register_config_alias()
    install_mla_detection()
    install_speculative_hook(ours=ours)
    if ours:
        from vllm_kimi_eagle.draft_config_override import install_draft_config_override

        install_draft_config_override()
        for architecture in sorted(PLUGIN_DRAFT_ARCHITECTURES):
            ModelRegistry.register_model(architecture, DRAFT_CLASS)
    _registered = True
