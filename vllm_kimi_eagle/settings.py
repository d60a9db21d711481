"""The plugin's environment variables: each read one way, none able to stop vLLM.

vLLM loads the plugin in every process it starts, servers without a draft included, and
calls ``register()`` without catching what it raises. So a value the plugin cannot read is
never an exception: it is one error line naming the variable, the value and the values it
takes, and the variable's default applies. Every on/off switch takes the same words.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

ON_WORDS = ("1", "true", "yes", "on")
OFF_WORDS = ("0", "false", "no", "off")


def _switch(text: str) -> bool:
    word = text.lower()
    if word in ON_WORDS:
        return True
    if word in OFF_WORDS:
        return False
    raise ValueError


def _choice(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text.lower() not in choices:
            raise ValueError
        return text.lower()

    return parse


def _convention(text: str) -> str:
    """A layer-id convention, written as the config key takes it (output_of, input-of-layer)."""
    return _choice("output-of", "input-of", "auto")(
        text.lower().replace("_", "-").removesuffix("-layer"))


def _positive_number(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or value <= 0:
        raise ValueError
    return value


@dataclass(frozen=True)
class Setting:
    """One environment variable: its name, what it takes, its default and what that means."""

    name: str
    takes: str  # the valid values, as the error line says them
    parse: Callable[[str], object]
    default: object
    default_means: str


SWITCH_TAKES = f"{'/'.join(ON_WORDS)} or {'/'.join(OFF_WORDS)}"
PLUGIN = Setting("VLLM_KIMI_EAGLE", SWITCH_TAKES, _switch, True,
                 "the plugin is on")
DRAFT = Setting("VLLM_KIMI_EAGLE_DRAFT", "plugin or upstream", _choice("plugin", "upstream"),
                "plugin", "the plugin's draft class serves the MLA EAGLE3 drafts")
LAYER_IDS = Setting("VLLM_KIMI_EAGLE_LAYER_IDS", "output-of, input-of or auto",
                    _convention, "auto",
                    "layer ids are read by the draft config and its training tool")
DRAFT_ROPE_THETA = Setting("VLLM_KIMI_EAGLE_DRAFT_ROPE_THETA", "a positive number",
                           _positive_number, None, "the draft config's rope_theta")
DRAFT_NOPE = Setting("VLLM_KIMI_EAGLE_DRAFT_NOPE", SWITCH_TAKES, _switch, None,
                     "the draft is read as its config and training tool say")
GREEDY_SHORTCUT = Setting("VLLM_KIMI_EAGLE_GREEDY_SHORTCUT", SWITCH_TAKES, _switch, True,
                          "the greedy shortcut may be turned on")
CPU_MLA_VERIFY = Setting("VLLM_KIMI_EAGLE_CPU_MLA_VERIFY", SWITCH_TAKES, _switch, True,
                         "draft tokens are verified in the CPU MLA decode kernel")
SELF_CHECK = Setting("VLLM_KIMI_EAGLE_SELF_CHECK", "refuse or warn", _choice("refuse", "warn"),
                     "refuse", "an engine where vLLM did not do what the plugin decided "
                     "does not start")
UNCHECKED_RELEASE = Setting("VLLM_KIMI_EAGLE_UNCHECKED_RELEASE", SWITCH_TAKES, _switch, False,
                            "on a vLLM minor older than those it was checked on the "
                            "plugin changes nothing")
# What vLLM's processes read (the tools' own variables, such as VLLM_KIMI_EAGLE_TINY_DIR,
# are read by the tools).
SETTINGS = (PLUGIN, DRAFT, LAYER_IDS, DRAFT_ROPE_THETA, DRAFT_NOPE, GREEDY_SHORTCUT,
            CPU_MLA_VERIFY, SELF_CHECK, UNCHECKED_RELEASE)


def read(setting: Setting, environ: Mapping[str, str] = os.environ) -> tuple[object, str | None]:
    """(the value, None), or (the default, the error line) where the value cannot be read.
    Unset or empty: the default."""
    text = (environ.get(setting.name) or "").strip()
    if not text:
        return setting.default, None
    try:
        return setting.parse(text), None
    except ValueError:
        return setting.default, (
            f"vllm-kimi-eagle: environment variable {setting.name}={text!r} is not "
            f"{setting.takes}; it is ignored ({setting.default_means}). Set it to "
            f"{setting.takes}, or unset it.")


def value(setting: Setting, environ: Mapping[str, str] = os.environ):
    """The setting's value; its default where the value cannot be read (``problems`` says
    so, once, when the plugin registers)."""
    return read(setting, environ)[0]


def problems(environ: Mapping[str, str] = os.environ) -> list[str]:
    """One error line per variable whose value cannot be read."""
    return [problem for setting in SETTINGS
            if (problem := read(setting, environ)[1]) is not None]
