"""An explicit rope base for the draft: ``VLLM_KIMI_EAGLE_DRAFT_ROPE_THETA``.

TorchSpec's MLA drafts were for a while trained with rope base 10000 while their
config.json says ``rope_theta`` 50000 (its yarn path built the rotary embedding without
the configured base; the fix's docstring in TorchSpec's ``build_rotary_embedding`` says
so). Whether a published checkpoint is affected is not known, and nothing in a
checkpoint tells. So the plugin never guesses: it serves the config's base unless this
variable names another one, which lets a user measure acceptance both ways (e.g. with
``vllm-kimi-eagle eval``) and keep the better. ``inspect`` reports it.
"""

from __future__ import annotations

import os

from vllm_kimi_eagle import settings
from vllm_kimi_eagle.draft.draft_config import DraftConfig

ROPE_THETA_ENV = settings.DRAFT_ROPE_THETA.name


def requested_rope_theta(environ=os.environ) -> float | None:
    """The rope base asked for through the environment, or None (use config.json's, also
    where the value is not a positive number: register() logs that once)."""
    return settings.value(settings.DRAFT_ROPE_THETA, environ)


def served_rope_theta(config: DraftConfig, environ=os.environ) -> float | None:
    """The rope base the draft is served with: the one asked for, else config.json's."""
    asked = requested_rope_theta(environ)
    return config.config_rope_theta if asked is None else asked


def serve_rope_theta(config, served: float | None, written: float, logger) -> None:
    """Make vLLM's config object of the draft use the rope base served, where it is not
    config.json's, and say so: done where the draft's class is built (the plugin's), or
    where the draft is handed to vLLM's class (which reads the same object)."""
    if served is not None and served != written:
        logger.warning("vllm-kimi-eagle: the draft's rope base is %s from %s (config.json "
                       "says %s)", served, ROPE_THETA_ENV, written)
        apply_rope_theta(config, served)


def apply_rope_theta(config, theta: float) -> None:
    """Make vLLM's config object of the draft use ``theta`` (vLLM builds rope from
    rope_parameters)."""
    parameters = getattr(config, "rope_parameters", None)
    if isinstance(parameters, dict):
        parameters["rope_theta"] = theta
    if hasattr(config, "rope_theta"):
        config.rope_theta = theta
