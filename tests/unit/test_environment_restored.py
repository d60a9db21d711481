"""tests/conftest.py's _environment_restored: a variable a test sets (as vLLM's CPU platform
does when it builds a config in the worker) is gone for the next test of the file, which
xdist's loadfile runs after it in the same worker."""

import os

LEAKED = "VLLM_KIMI_EAGLE_TEST_LEAK_PROBE"


def test_a_test_sets_a_variable_and_changes_another():
    os.environ[LEAKED] = "1"
    os.environ["HOME"] = "/nowhere"


def test_the_next_test_sees_neither():
    assert LEAKED not in os.environ
    assert os.environ["HOME"] != "/nowhere"
