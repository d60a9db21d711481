"""The greedy shortcut never overrides the user and never contradicts vLLM.

The decision is a pure function (shortcut_policy.decide), tested here; through real
``EngineArgs(...).create_engine_config()`` of the installed vLLM, which is where a GPU
user's speculative config is parsed: tests/integration/test_shortcut_policy_config.py.
"""

from __future__ import annotations

import pytest

from vllm_kimi_eagle.compat import vllm_compat
from vllm_kimi_eagle.serving import shortcut_policy
from vllm_kimi_eagle.serving.shortcut_policy import FLAG, SHORTCUT_ENV, decide


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


@pytest.mark.parametrize("settings, given, environ, reason, changed", [
    ({}, None, {}, "the plugin cannot tell whether the speculative config set it, so vLLM's "
     f"value stands; set \"{FLAG}\": true in --speculative-config to use it", False),
    ({}, frozenset({FLAG}), {}, "set in the speculative config", False),
    ({}, frozenset(), {SHORTCUT_ENV: "off"}, f"{SHORTCUT_ENV}=0", False),
    ({"draft_sample_method": "probabilistic"}, frozenset(), {},
     "vLLM rejects it with draft_sample_method='probabilistic': ", False),
    ({FLAG: True}, frozenset(), {}, "already on", False),
    ({}, frozenset(), {}, "greedy draft sampling, nothing in the speculative config against "
     f"it; \"{FLAG}\": false in --speculative-config or {SHORTCUT_ENV}=0 keeps it off", True),
])
def test_each_decision_says_why(settings, given, environ, reason, changed):
    decision = decide({**DEFAULTS, **settings}, given, environ)
    assert decision.reason.startswith(reason), decision.reason
    assert decision.changed is changed
    how = "turned on by the plugin" if changed else "left as it was"
    state = "on" if decision.use else "off"
    assert decision.log_line() == (f"greedy draft-token shortcut (vLLM's {FLAG}) is {state}, "
                                   f"{how}: {decision.reason}")


def test_a_missing_flag_counts_as_off_and_a_conflict_is_matched_exactly():
    assert decide({}, frozenset(), {}).use is True  # absent: off, then turned on
    assert decide({"draft_sample_method": "greedy"}, frozenset(), {}).changed is True
    assert shortcut_policy.conflict({"enable_adaptive_verification": False}) is None
    assert shortcut_policy.conflict({}) is None
    assert shortcut_policy.env_allows({}) is True
    assert shortcut_policy.env_allows({SHORTCUT_ENV: "no"}) is False
