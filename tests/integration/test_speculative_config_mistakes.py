"""Speculative-config mistakes fail when vLLM builds its config, before an engine starts or
a weight loads, with a message that names the field (vLLM's own for most; the plugin's for
a k schedule, which vLLM checks only when its scheduler starts, and for a checkpoint that
does not match its config). The same path a server takes at start-up; one server start
with a mistake is in tests/e2e/test_soak_e2e.py."""

from __future__ import annotations

import json
import os

import pytest

from tests.helpers import run_python

PROBE = """
import json
from vllm.engine.arg_utils import EngineArgs
results = {{}}
for name, spec in json.loads({cases!r}).items():
    try:
        EngineArgs(model={target!r}, max_model_len=256, speculative_config=spec).create_engine_config()
        results[name] = "accepted"
    except Exception as err:
        results[name] = f"{{type(err).__name__}}: {{err}}"
print(json.dumps(results))
"""


def cases(tiny: str) -> dict:
    draft = os.path.join(tiny, "draft")
    base = {"method": "eagle3", "model": draft, "num_speculative_tokens": 3}
    return {
        "missing draft": {**base, "model": os.path.join(tiny, "no-such-draft")},
        "k 0": {**base, "num_speculative_tokens": 0},
        "method typo": {**base, "method": "eagle-3"},
        "unknown key": {"method": "eagle3", "model": draft, "num_spec_tokens": 3},
        "schedule not from 1": {**base, "num_speculative_tokens_per_batch_size": [[2, 8, 3]]},
        "schedule overlaps": {**base, "num_speculative_tokens_per_batch_size":
                              [[1, 8, 3], [4, 16, 1]]},
        "target as draft": {**base, "model": os.path.join(tiny, "target")},
        "good schedule": {**base, "num_speculative_tokens_per_batch_size":
                          [[1, 8, 3], [9, 1024, 0]]},
    }


# What each message must say: the field (or the path) and, for the plugin's checks, the fix.
EXPECTED = {
    "missing draft": ["no-such-draft"],
    "k 0": ["num_speculative_tokens", "greater than 0"],
    "method typo": ["method", "'eagle3'"],
    "unknown key": ["num_spec_tokens", "Unexpected keyword argument"],
    "schedule not from 1": ["num_speculative_tokens_per_batch_size=[[2, 8, 3]]",
                            "must start at 1", "bench-e2e --schedule"],
    "schedule overlaps": ["num_speculative_tokens_per_batch_size", "non-overlapping"],
    "target as draft": ["field 'num_hidden_layers' is 6", "a target's: check the "
                        "speculative config's model"],
}


@pytest.fixture(scope="module")
def results(tiny):
    return run_python(PROBE.format(cases=json.dumps(cases(tiny)),
                                   target=os.path.join(tiny, "target")))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_mistake_is_refused_naming_the_field(results, name):
    message = results[name]
    assert message != "accepted", f"{name}: accepted"
    for words in EXPECTED[name]:
        assert words in message, f"{name}: {words!r} not in {message[:600]!r}"


def test_a_good_schedule_passes(results):
    assert results["good schedule"] == "accepted"
