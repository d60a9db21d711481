"""tests/unit: no engine, no fork, no lm-eval task index (a test that needs one lives in
tests/integration); what a test changes in vLLM is undone when it ends, so that no
outcome depends on the order in which the tests run."""

import os

import pytest
from hypothesis import settings


# Generated cases per property test (per field where a test is parametrized over the draft
# record's fields): 300 in the suite (make test, CI); 100 in a maintainer's loop
# (HYPOTHESIS_PROFILE=loop, set by make test-unit); 20 under the mutation run
# (HYPOTHESIS_PROFILE=mutation, set by benchmarks/mutation_scores.py), where each of
# a thousand mutants reruns the tests that reach it.
settings.register_profile("suite", max_examples=300)
settings.register_profile("loop", max_examples=100)
settings.register_profile("mutation", max_examples=20)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "suite"))


@pytest.fixture(autouse=True)
def _undo_vllm_changes(undo_vllm_changes):
    """Every unit test (tests/conftest.py's undo_vllm_changes)."""
