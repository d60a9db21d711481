"""tests/unit: what a test changes in vLLM (the plugin's installers, journaled by
vllm_kimi_eagle/compat/patching.py) is undone when it ends, so that no outcome depends on the
order in which the tests run."""

import os

import pytest
from hypothesis import settings

from vllm_kimi_eagle.compat import patching

# Generated cases per property test (per field where a test is parametrized over the draft
# record's fields): 300 in the suite; 20 under the mutation run
# (HYPOTHESIS_PROFILE=mutation, set by benchmarks/mutation_scores.py), where each of
# a thousand mutants reruns the tests that reach it.
settings.register_profile("suite", max_examples=300)
settings.register_profile("mutation", max_examples=20)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "suite"))


@pytest.fixture(autouse=True)
def undo_vllm_changes():
    start = patching.mark()
    yield
    patching.restore(since=start)
