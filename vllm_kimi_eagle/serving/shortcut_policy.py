"""Whether vLLM's proposer may use the plugin draft's greedy shortcut: the decision.

The switch is vLLM's own ``SpeculativeConfig.use_local_argmax_reduction`` (default off):
with it, the proposer asks the draft's ``get_top_tokens`` for greedy draft tokens instead
of ``compute_logits(...).argmax()``. The plugin turns it on for its draft class, but
never over the user and never where vLLM rejects it:

1. a value the user wrote in the speculative config is kept, true or false;
2. where the plugin cannot tell whether the user wrote it, vLLM's value is kept;
3. ``VLLM_KIMI_EAGLE_GREEDY_SHORTCUT=0`` keeps it off;
4. a setting that vLLM declares incompatible with it (``vllm_compat.LOCAL_ARGMAX_CONFLICTS``:
   probabilistic draft sampling, adaptive verification, heterogeneous vocabularies)
   keeps it off;
5. otherwise it is turned on.

:func:`decide` is pure; ``speculative_hook.py`` applies it and logs its one line.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from vllm_kimi_eagle import settings
from vllm_kimi_eagle.compat import vllm_compat

FLAG = "use_local_argmax_reduction"
SHORTCUT_ENV = settings.GREEDY_SHORTCUT.name


@dataclass(frozen=True)
class ShortcutDecision:
    use: bool  # the value the flag ends with
    changed: bool  # whether the plugin changed vLLM's value
    reason: str

    def log_line(self) -> str:
        state = "on" if self.use else "off"
        how = "turned on by the plugin" if self.changed else "left as it was"
        return (
            f"greedy draft-token shortcut (vLLM's {FLAG}) is {state}, {how}: {self.reason}"
        )


def env_allows(environ: Mapping[str, str] = os.environ) -> bool:
    """The shortcut may be turned on unless VLLM_KIMI_EAGLE_GREEDY_SHORTCUT is off."""
    return settings.value(settings.GREEDY_SHORTCUT, environ)


def conflict(settings: Mapping[str, object]) -> str | None:
    """Why vLLM rejects the flag with these speculative settings, or None."""
    for field, bad_value, why in vllm_compat.LOCAL_ARGMAX_CONFLICTS:
        if settings.get(field) == bad_value:
            return f"{field}={bad_value!r}: {why}"
    return None


def decide(
    settings: Mapping[str, object],
    user_given: frozenset[str] | None,
    environ: Mapping[str, str] = os.environ,
) -> ShortcutDecision:
    """The flag's final value for a speculative config served by the plugin's class.

    ``settings``: the parsed speculative config's fields (FLAG included).
    ``user_given``: names of the fields the user wrote, or None when unknown.
    """
    current = bool(settings.get(FLAG, False))
    if user_given is None:
        return ShortcutDecision(current, False, (
            "the plugin cannot tell whether the speculative config set it, so vLLM's "
            f"value stands; set \"{FLAG}\": true in --speculative-config to use it"))
    if FLAG in user_given:
        return ShortcutDecision(current, False, "set in the speculative config")
    if not env_allows(environ):
        return ShortcutDecision(current, False, f"{SHORTCUT_ENV}=0")
    why_not = conflict(settings)
    if why_not:
        return ShortcutDecision(current, False, f"vLLM rejects it with {why_not}")
    if current:
        return ShortcutDecision(True, False, "already on")
    return ShortcutDecision(True, True, (
        "greedy draft sampling, nothing in the speculative config against it; "
        f"\"{FLAG}\": false in --speculative-config or {SHORTCUT_ENV}=0 keeps it off"))
