"""The greedy shortcut never overrides the user and never contradicts vLLM.

The decision is a pure function (shortcut_policy.decide), tested here; through real
``EngineArgs(...).create_engine_config()`` of the installed vLLM, which is where a GPU
user's speculative config is parsed: tests/integration/test_shortcut_policy_config.py.
"""

from __future__ import annotations

import pytest

from vllm_kimi_eagle import shortcut_policy, vllm_compat
from vllm_kimi_eagle.shortcut_policy import FLAG, SHORTCUT_ENV, decide


DEFAULTS = {FLAG: False, "draft_sample_method": "greedy",
            "enable_adaptive_verification": False, "use_heterogeneous_vocab": False}


@pytest.mark.parametrize(
    "settings, given, environ, expected",
    [
        ({}, frozenset(), {}, True),
        ({}, frozenset({"method", "model"}), {SHORTCUT_ENV: "0"}, False),
        ({}, frozenset({FLAG}), {}, False),  # the user's explicit false
        ({FLAG: True}, frozenset({FLAG}), {SHORTCUT_ENV: "0"}, True),  # the user's true
        ({}, None, {}, False),  # cannot tell: vLLM's value stands
        ({"draft_sample_method": "probabilistic"}, frozenset(), {}, False),
        ({"enable_adaptive_verification": True}, frozenset(), {}, False),
        ({"use_heterogeneous_vocab": True}, frozenset(), {}, False),
    ],
    ids=["greedy-default", "env-off", "user-false", "user-true-beats-env", "unknown",
         "probabilistic", "adaptive-verification", "heterogeneous-vocab"],
)
def test_decision(settings, given, environ, expected):
    decision = decide({**DEFAULTS, **settings}, given, environ)
    assert decision.use is expected
    assert decision.changed is (expected and not settings.get(FLAG, False))
    assert ("is on" if expected else "is off") in decision.log_line()


def test_every_conflict_names_where_vllm_rejects_it():
    for field, value, why in vllm_compat.LOCAL_ARGMAX_CONFLICTS:
        reason = shortcut_policy.conflict({**DEFAULTS, field: value})
        assert reason and field in reason and why in reason
    assert shortcut_policy.conflict(DEFAULTS) is None
