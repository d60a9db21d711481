"""Reading a field of a target's config, whether it is a transformers config object or the
dict of a config.json, and whether the field sits at the top or in ``text_config``.

A draft's config is never read here: it is parsed once into a validated record
(``draft_config.py``)."""

from __future__ import annotations

from collections.abc import Mapping


def config_value(config, key, default=None):
    """``key`` of a config given as an object (PretrainedConfig) or a dict (config.json)."""
    if isinstance(config, Mapping):
        return config.get(key, default)
    return getattr(config, key, default)


def text_config_value(config, key, default=None):
    """``key`` of a target config, looked up in its ``text_config`` when the top level
    lacks it (multimodal Kimi-K2.5/K2.6 keep the language model's fields there)."""
    value = config_value(config, key)
    if value is None:
        value = config_value(config_value(config, "text_config") or {}, key)
    return default if value is None else value
