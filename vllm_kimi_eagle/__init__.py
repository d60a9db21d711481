"""vllm-kimi-eagle: Kimi-K2.x EAGLE3 speculative decoding with MLA drafts, as a vLLM plugin.

vLLM calls :func:`register` through the ``vllm.general_plugins`` entry point in every
process it starts. It must stay cheap and idempotent, must not initialise CUDA (model
classes are registered as lazy ``"module:Class"`` strings) and must never raise.

The environment variables it reads are listed, with their values and defaults, in
``settings.py``; ``VLLM_KIMI_EAGLE=0`` turns the plugin off, other plugins staying loaded.
What it changes in a process, with or without a draft, is in docs/troubleshooting.md.
"""

from __future__ import annotations

import logging
import os

__version__ = "0.1.0"

logger = logging.getLogger(f"vllm.{__name__}")  # under vLLM's log handler
_registered = False


def register() -> None:
    """Entry point of the ``vllm.general_plugins`` group: idempotent, no CUDA, and it never
    raises (vLLM calls plugins without a try, in every process, servers without a draft
    included). A variable it cannot read is an error line and its default; a failure
    halfway is logged and everything already changed is undone."""
    global _registered
    if _registered:
        return
    _registered = True
    from vllm_kimi_eagle import settings
    from vllm_kimi_eagle.compat import patching

    for problem in settings.problems():
        logger.error(problem)
    if not settings.value(settings.PLUGIN):
        logger.info("vllm-kimi-eagle: off (%s=0): the plugin changes nothing in this process.",
                    settings.PLUGIN.name)
        return
    try:
        changes = _install()
    except Exception:
        try:
            undone = patching.restore()
        except Exception:
            logger.exception(
                "vllm-kimi-eagle: registering the plugin failed, and so did undoing its "
                "changes: vLLM may run with part of the plugin in this process. Please "
                "report this with your vLLM version; %s=0 turns the plugin off.",
                settings.PLUGIN.name)
            return
        logger.exception(
            "vllm-kimi-eagle: registering the plugin failed; the %d change(s) it had made are "
            "undone and vLLM runs in this process as it would without the plugin. Please "
            "report this with your vLLM version; %s=0 turns the plugin off.", undone,
            settings.PLUGIN.name)
        return
    if changes:
        logger.info("vllm-kimi-eagle %s loaded: %s; %s=0 turns it off.", __version__,
                    "; ".join(changes), settings.PLUGIN.name)


def _install() -> list[str]:
    """Install what this vLLM release needs; what was changed, in words (the load line)."""
    from vllm_kimi_eagle import settings
    from vllm_kimi_eagle.compat import release_gate

    verdict = release_gate.installed_verdict()
    if verdict.message:
        logger.log(verdict.level, verdict.message)
    if not verdict.act:
        return []

    from vllm import ModelRegistry

    from vllm_kimi_eagle.compat import patching
    from vllm_kimi_eagle.cpu.cpu_memory import install_cpu_memory
    from vllm_kimi_eagle.cpu.cpu_mla_backend import install_cpu_mla_backend_choice
    from vllm_kimi_eagle.cpu.cpu_mla_verify import MENDED as VERIFY_MENDED
    from vllm_kimi_eagle.cpu.cpu_mla_verify import install_cpu_mla_verify
    from vllm_kimi_eagle.cpu.cpu_sampler import MENDED as SAMPLER_MENDED
    from vllm_kimi_eagle.cpu.cpu_sampler import install_cpu_sampler
    from vllm_kimi_eagle.draft.architectures import (
        DRAFT_CLASS,
        IN_TREE_ALIAS,
        IN_TREE_CLASS,
        PLUGIN_DRAFT_ARCHITECTURES,
    )
    from vllm_kimi_eagle.draft.draft_class import asked_class
    from vllm_kimi_eagle.serving.config_alias import register_config_alias
    from vllm_kimi_eagle.serving.mla_detection import install_mla_detection
    from vllm_kimi_eagle.serving.plan_metric import install_plan_metric
    from vllm_kimi_eagle.serving.self_check import install_self_check
    from vllm_kimi_eagle.serving.speculative_hook import install_speculative_hook

    # On a minor not checked on, whether the plugin's class still fits this vLLM is read
    # where a draft is built (draft_class_entry.py), not here: every process pays register().
    asked = asked_class(os.environ, verdict.act)
    ours = asked == "plugin"
    changes = []
    # Whichever draft class serves: the CPU sampler and MLA backends are vLLM's, for every
    # speculative method (all change nothing on builds with Triton, i.e. on GPUs).
    if set(install_cpu_sampler().values()) & set(SAMPLER_MENDED):
        changes.append("CPU rejection sampler mended (speculative decoding)")
    if set(install_cpu_mla_verify().values()) & set(VERIFY_MENDED):
        changes.append("CPU MLA backends verify draft tokens in their decode kernels")
    if install_cpu_mla_backend_choice() == "installed":
        changes.append("CPU MLA backend choice mended for models AMX_MLA cannot serve")
    if install_cpu_memory() in ("installed", "deferred"):
        changes.append("CPU engines with a draft hold no unused vocabulary table")
    register_config_alias()
    install_mla_detection()
    install_speculative_hook(asked=asked)
    install_self_check()
    install_plan_metric()
    changes.append("kimi_k2 config alias and MLA detection; EAGLE3 layer ids resolved; "
                   "what vLLM enacts checked where the draft loads, and said on /metrics")
    if ours:
        from vllm_kimi_eagle.serving.draft_config_override import install_draft_config_override

        install_draft_config_override()
        served = {architecture: DRAFT_CLASS for architecture in PLUGIN_DRAFT_ARCHITECTURES}
        for architecture, target in sorted({**served, IN_TREE_ALIAS: IN_TREE_CLASS}.items()):
            patching.remember_item(ModelRegistry.models, architecture)
            ModelRegistry.register_model(architecture, target)
        changes.append(f"{', '.join(sorted(PLUGIN_DRAFT_ARCHITECTURES))} served by its "
                       "draft class where it can serve them, by vLLM's otherwise")
    else:
        changes.append("MLA EAGLE3 drafts served by vLLM's in-tree class "
                       f"({settings.DRAFT.name}=upstream)")
    return changes
